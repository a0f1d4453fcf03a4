#!/usr/bin/env python3
"""Demo MCP server (official `mcp` SDK, Streamable HTTP) that records every HTTP request it gets.

MCP is served on --port at --mcp-path. A separate admin port (never proxied)
exposes the request log: GET /requests (JSON list), POST /reset.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer

_log: list[dict[str, Any]] = []
_log_lock = threading.Lock()


def build_mcp(name: str) -> MCPServer:
    mcp = MCPServer(name, instructions=f"demo MCP server {name}", log_level="WARNING")

    @mcp.tool()
    def echo(text: str) -> str:
        """Echo the text back."""
        return text

    @mcp.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @mcp.tool()
    def delete_repo(name: str) -> str:
        """Pretend to delete a repository (dangerous tool for policy tests)."""
        return f"deleted {name}"

    @mcp.tool()
    def get_weather(city: str) -> str:
        """Canned weather report."""
        return f"sunny in {city}"

    @mcp.prompt()
    def summarize(text: str) -> str:
        """Ask the model to summarize a text."""
        return f"Summarize this: {text}"

    @mcp.resource("file:///docs/readme", mime_type="text/plain")
    def readme() -> str:
        """Project readme."""
        return f"README served by {name}"

    return mcp


def _describe(body: bytes) -> dict[str, Any]:
    """JSON-RPC method / id / tool name of a request body (first message of a batch)."""
    out: dict[str, Any] = {"mcp_method": None, "jsonrpc_id": None, "tool": None, "batch": False}
    try:
        msg = json.loads(body)
    except ValueError:
        return out
    if isinstance(msg, list):
        out["batch"] = True
        out["batch_methods"] = [m.get("method") for m in msg if isinstance(m, dict)]
        msg = msg[0] if msg else None
    if isinstance(msg, dict):
        out["mcp_method"] = msg.get("method")
        out["jsonrpc_id"] = msg.get("id")
        params = msg.get("params") if isinstance(msg.get("params"), dict) else {}
        if msg.get("method") in ("tools/call", "prompts/get"):
            out["tool" if msg["method"] == "tools/call" else "prompt"] = params.get("name")
        elif msg.get("method") == "resources/read":
            out["uri"] = params.get("uri")
    return out


class RecordingMiddleware:
    """ASGI middleware: buffers each HTTP request body, records it, replays it to the app."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        headers: dict[str, str] = {}
        for k, v in scope["headers"]:
            key = k.decode("latin-1").lower()
            val = v.decode("latin-1")
            headers[key] = f"{headers[key]},{val}" if key in headers else val
        entry = {
            "ts_ns": time.time_ns(),
            "method": scope["method"],
            "path": scope["path"],
            "query": scope.get("query_string", b"").decode("latin-1"),
            "headers": headers,
            "body": body.decode("utf-8", errors="replace"),
            **_describe(body),
        }
        with _log_lock:
            _log.append(entry)

        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


class AdminHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _reply(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/requests":
            with _log_lock:
                self._reply(200, list(_log))
        elif self.path == "/health":
            self._reply(200, {"ok": True})
        else:
            self._reply(404, {"error": "not found"})

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.path == "/reset":
            with _log_lock:
                _log.clear()
            self._reply(200, {"ok": True})
        else:
            self._reply(404, {"error": "not found"})

    def log_message(self, *args: Any) -> None:  # quiet
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--admin-port", type=int, required=True)
    ap.add_argument("--mcp-path", default="/mcp")
    ap.add_argument("--name", default="demo")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--stateful", action="store_true", help="keep MCP sessions (default: stateless)")
    ap.add_argument("--sse", action="store_true", help="answer with SSE streams instead of JSON bodies")
    ap.add_argument("--tls-cert", help="serve HTTPS with this PEM certificate (and --tls-key)")
    ap.add_argument("--tls-key", help="the private key of --tls-cert")
    args = ap.parse_args()

    admin = ThreadingHTTPServer((args.host, args.admin_port), AdminHandler)
    admin.daemon_threads = True
    threading.Thread(target=admin.serve_forever, daemon=True).start()

    app = build_mcp(args.name).streamable_http_app(
        streamable_http_path=args.mcp_path,
        json_response=not args.sse,
        stateless_http=not args.stateful,
        # The SDK's defaults: on loopback it checks the Host header (DNS-rebinding protection).
        host=args.host,
    )
    uvicorn.run(
        RecordingMiddleware(app), host=args.host, port=args.port, log_level="warning",
        access_log=False, timeout_graceful_shutdown=1,
        ssl_certfile=args.tls_cert, ssl_keyfile=args.tls_key,
    )


if __name__ == "__main__":
    main()
