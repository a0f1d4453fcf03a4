#!/usr/bin/env python3
"""Demo HTTP external authorizer with Envoy ext_authz (HTTP service) semantics.

Any request except the control endpoints is an authorization check: 200 allows
(optionally adding headers), anything else denies and Envoy relays the status,
headers and body to the client. Every check is recorded.

Control endpoints (same port): GET /__calls, POST /__reset, GET|POST /__config.
/__config accepts a JSON object with any of: deny_headers ["name:value"],
deny_tools [tool], deny_all bool, deny_status int, delay_ms int,
add_headers ["name:value"] (replacing the current values), www_authenticate (the challenge
sent with every denial; default `Bearer realm="<name>"`).
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CONTROL = ("/__calls", "/__reset", "/__config")


def _pair(s: str) -> tuple[str, str]:
    name, sep, value = s.partition(":")
    if not sep:
        raise ValueError(f"expected name:value, got {s!r}")
    return name.strip().lower(), value.strip()


class State:
    def __init__(self, name: str, config: dict[str, Any]) -> None:
        self.name = name
        self.lock = threading.Lock()
        self.calls: list[dict[str, Any]] = []
        self.config: dict[str, Any] = {
            "deny_headers": [], "deny_tools": [], "deny_all": False,
            "deny_status": 403, "delay_ms": 0, "add_headers": [],
            "www_authenticate": f'Bearer realm="{name}"',
        }
        self.update(config)

    def update(self, changes: dict[str, Any]) -> dict[str, Any]:
        unknown = set(changes) - set(self.config)
        if unknown:
            raise ValueError(f"unknown config keys: {sorted(unknown)}")
        for key in ("deny_headers", "add_headers"):
            for item in changes.get(key, []):
                _pair(item)  # validate
        with self.lock:
            self.config.update(changes)
            return dict(self.config)

    def decide(self, headers: dict[str, str]) -> tuple[bool, dict[str, Any]]:
        with self.lock:
            cfg = dict(self.config)
        deny = bool(cfg["deny_all"])
        deny |= any(headers.get(n) == v for n, v in map(_pair, cfg["deny_headers"]))
        deny |= headers.get("x-mcp-tool") in cfg["deny_tools"]
        return not deny, cfg


def make_handler(state: State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _body(self) -> bytes:
            if self.headers.get("transfer-encoding", "").lower() == "chunked":
                data = b""
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return data
                    data += self.rfile.read(size)
                    self.rfile.readline()
            return self.rfile.read(int(self.headers.get("content-length") or 0))

        def _send(self, status: int, body: bytes, headers: list[tuple[str, str]]) -> None:
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _json(self, status: int, payload: Any) -> None:
            self._send(status, json.dumps(payload).encode(), [("content-type", "application/json")])

        def _control(self, body: bytes) -> None:
            if self.path == "/__calls" and self.command == "GET":
                with state.lock:
                    self._json(200, list(state.calls))
            elif self.path == "/__reset" and self.command == "POST":
                with state.lock:
                    state.calls.clear()
                self._json(200, {"ok": True})
            elif self.path == "/__config" and self.command == "GET":
                with state.lock:
                    self._json(200, dict(state.config))
            elif self.path == "/__config" and self.command == "POST":
                try:
                    self._json(200, state.update(json.loads(body or b"{}")))
                except (ValueError, AttributeError, TypeError) as e:
                    self._json(400, {"error": str(e)})
            else:
                self._json(405, {"error": "method not allowed"})

        def _check(self, body: bytes) -> None:
            headers: dict[str, str] = {}
            for k, v in self.headers.items():
                key = k.lower()
                headers[key] = f"{headers[key]},{v}" if key in headers else v
            with state.lock:
                state.calls.append({
                    "ts_ns": time.time_ns(),
                    "authorizer": state.name,
                    "method": self.command,
                    "path": self.path,
                    "headers": headers,
                    "body": body.decode("utf-8", errors="replace"),
                })
            allowed, cfg = state.decide(headers)
            if cfg["delay_ms"]:
                time.sleep(cfg["delay_ms"] / 1000)
            if allowed:
                self._send(200, b"", list(map(_pair, cfg["add_headers"])))
            else:
                self._send(
                    int(cfg["deny_status"]),
                    json.dumps({"denied_by": state.name}).encode(),
                    [("content-type", "application/json"), ("www-authenticate", cfg["www_authenticate"])],
                )

        def _handle(self) -> None:
            body = self._body()
            if self.path.split("?", 1)[0] in CONTROL:
                self._control(body)
            else:
                self._check(body)

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _handle  # noqa: N815

        def log_message(self, *args: Any) -> None:  # quiet
            pass

    return Handler


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", default="authz")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--deny-header", action="append", default=[], metavar="NAME:VALUE")
    ap.add_argument("--deny-tool", action="append", default=[], metavar="TOOL", help="deny when x-mcp-tool equals it")
    ap.add_argument("--deny-all", action="store_true")
    ap.add_argument("--deny-status", type=int, default=403)
    ap.add_argument("--delay-ms", type=int, default=0)
    ap.add_argument("--add-header", action="append", default=[], metavar="NAME:VALUE", help="added to OK answers")
    ap.add_argument("--www-authenticate", metavar="CHALLENGE",
                    help='the WWW-Authenticate header of denials (default: Bearer realm="NAME")')
    a = ap.parse_args()
    state = State(a.name, {
        "deny_headers": a.deny_header, "deny_tools": a.deny_tool, "deny_all": a.deny_all,
        "deny_status": a.deny_status, "delay_ms": a.delay_ms, "add_headers": a.add_header,
        **({"www_authenticate": a.www_authenticate} if a.www_authenticate else {}),
    })
    server = ThreadingHTTPServer((a.host, a.port), make_handler(state))
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
