"""Per-caller listings and MCP revisions in real Envoy 1.40 (docs/semantics.md §4.4, §5.4).

One Envoy with an mTLS listener and the filter in front of three upstreams: the demo MCP server
(official Python SDK) answering with JSON bodies, the same server answering with SSE streams,
and a crafted upstream that answers each listing as the request's `x-answer` header asks
(paginated, malformed, oversize, split SSE) so hostile or unusual listings can be sent on purpose.
The official Python SDK client drives the first two, over 2025-11-25 (initialize) and 2026-07-28
(server/discover, no initialize).
"""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from mcp import MCPError

from harness import (
    ALPHA,
    BETA,
    BackgroundHttpServer,
    Cluster,
    EnvoyProcess,
    Listener,
    McpAgent,
    McpServerProc,
    Pki,
    Route,
    Tls,
    Wasm,
    build_bootstrap,
    free_port,
    post_jsonrpc,
    rpc,
    start_mcp_server,
    text_of,
)

MAX_LISTING = 16 * 1024


def tools_result(names: list[str], **extra: Any) -> dict[str, Any]:
    tools = [{"name": n, "inputSchema": {"type": "object"}} for n in names]
    return {"jsonrpc": "2.0", "id": 1, "result": {"tools": tools, **extra}}


PAGED = tools_result(["echo", "delete_repo"], nextCursor="page-2", ttlMs=60000)
SSE_EVENTS = [
    b": keep-alive\n\n",
    b'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}\n\n',
    b"event: message\ndata: " + json.dumps(tools_result(["delete_repo", "echo", "get_weather"])).encode() + b"\n\n",
]


class CraftedUpstream(BackgroundHttpServer):
    """Answers every POST as its `x-answer` header says."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802
                msg = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
                if "id" not in msg:  # a notification
                    self.send_response(202)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                answer = self.headers.get("x-answer", "paged")
                if msg.get("method") == "initialize":
                    answer = "initialize"
                if answer == "sse":
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                    self.send_header("transfer-encoding", "chunked")
                    self.end_headers()
                    # Each event cut in two writes, a pause between: the filter sees it in pieces.
                    for event in SSE_EVENTS:
                        half = len(event) // 2
                        for part in (event[:half], event[half:]):
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                            self.wfile.flush()
                            time.sleep(0.05)
                    self.wfile.write(b"0\r\n\r\n")
                    return
                body = {
                    "initialize": json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": {
                        "protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                        "serverInfo": {"name": "crafted", "version": "0"}}}).encode(),
                    # Says which Accept-Encoding reached the server.
                    "paged": json.dumps({**PAGED, "result": {
                        **PAGED["result"], "_meta": {"acceptEncoding": self.headers.get("accept-encoding")}}}).encode(),
                    "malformed": b'{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"delete_repo"}',
                    "duplicate": b'{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"echo","name":"delete_repo"}]}}',
                    "oversize": json.dumps(tools_result(["delete_repo"] * 2000)).encode(),
                    # A server compressing although asked not to (the filter sends
                    # Accept-Encoding: identity with a listing request).
                    "gzip": json.dumps(PAGED).encode()
                    if self.headers.get("accept-encoding") != "identity" else b"identity was asked for",
                }[answer]
                self.send_response(200)
                self.send_header("content-type", "application/json")
                if answer == "gzip":
                    body = gzip.compress(body)
                    self.send_header("content-encoding", "gzip")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(Handler)


def bundle(port: int) -> dict[str, Any]:
    """alpha may call echo and get_weather and get the summarize prompt; beta may call
    get_weather and read the readme; both have the base protocol (listings, discover)."""

    def rule(name: str, spiffe: str, methods: list[dict[str, Any]]) -> dict[str, Any]:
        return {"name": name, "source": {"type": "SPIFFE", "spiffe": spiffe},
                "authorization": {"mcp": {"methods": methods, "baseProtocol": "Match"}}}

    return {
        "apiVersion": "mcp-access.io/v1",
        "gateways": [{"name": "gw", "namespace": "mcp", "listeners": [{"name": "https", "port": port}]}],
        "backends": [{"name": n, "namespace": "mcp", "routeNames": [f"{n}-route"]} for n in ("json", "sse", "crafted")],
        "policies": [{
            "name": "agents", "namespace": "mcp", "level": "Gateway", "targets": [{"name": "gw"}],
            "action": "Allow", "rules": [
                rule("alpha", ALPHA, [{"name": "tools/call", "params": ["echo", "get_weather"]},
                                      {"name": "prompts/get", "params": ["summarize"]}]),
                rule("beta", BETA, [{"name": "tools/call", "params": ["get_weather"]},
                                    {"name": "resources/read", "params": ["file:///docs/readme"]}]),
            ]}],
        "listings": {"maxBytes": MAX_LISTING},
    }


@dataclass
class Stack:
    envoy: EnvoyProcess
    port: int
    pki: Pki
    json_server: McpServerProc

    def url(self, backend: str) -> str:
        return f"https://127.0.0.1:{self.port}/{backend}/mcp"

    def post(self, backend: str, body: Any, headers: dict[str, str] | None = None, who: str = ALPHA, **kw: Any):
        return post_jsonrpc(self.url(backend), body, headers=headers, cert=self.pki.client(who), ca=self.pki.ca, **kw)


@pytest.fixture(scope="module")
def stack(work_dir: Path, mcp_server: McpServerProc, wasm_path: Path, pki: Pki) -> Iterator[Stack]:
    crafted = CraftedUpstream()
    port = free_port()
    routes = [Route(f"{n}-route", f"/{n}/mcp", n, prefix_rewrite="/mcp") for n in ("json", "sse", "crafted")]
    listener = Listener("https", port, routes, tls=Tls(pki.server, pki.ca),
                        wasm=Wasm(wasm_path, configuration=json.dumps(bundle(port))))
    try:
        with start_mcp_server(work_dir / "logs", name="sse-upstream", extra_args=["--sse"]) as sse:
            cfg = build_bootstrap(admin_port=free_port(), listeners=[listener], clusters=[
                Cluster("json", port=mcp_server.port), Cluster("sse", port=sse.port),
                Cluster("crafted", port=crafted.port)],
                access_log_path=work_dir / f"access-listings-{port}.log")
            with EnvoyProcess(cfg, workdir=work_dir / "envoy-listings", name="envoy-listings") as env:
                yield Stack(env, port, pki, mcp_server)
    finally:
        crafted.close()


@pytest.mark.parametrize("mode", ["legacy", "auto"])
@pytest.mark.parametrize("backend", ["json", "sse"])
def test_the_sdk_client_sees_only_what_each_agent_may_use(stack: Stack, backend: str, mode: str) -> None:
    stack.json_server.reset()
    with McpAgent(stack.url(backend), cert=stack.pki.client(ALPHA), ca=stack.pki.ca, mode=mode) as alpha:
        assert sorted(alpha.tool_names()) == ["echo", "get_weather"]
        assert [p.name for p in alpha.list_prompts().prompts] == ["summarize"]
        assert alpha.list_resources().resources == []
        assert text_of(alpha.call_tool("echo", {"text": "listed and callable"})) == "listed and callable"
    with McpAgent(stack.url(backend), cert=stack.pki.client(BETA), ca=stack.pki.ca, mode=mode) as beta:
        assert beta.tool_names() == ["get_weather"]
        assert beta.list_prompts().prompts == []
        assert [str(r.uri) for r in beta.list_resources().resources] == ["file:///docs/readme"]
    if backend == "json":
        # "auto" speaks 2026-07-28 (server/discover, no initialize); "legacy" 2025-11-25.
        seen = [(r["mcp_method"], r["headers"].get("mcp-protocol-version")) for r in stack.json_server.requests()]
        want = ("server/discover", "2026-07-28") if mode == "auto" else ("initialize", None)
        assert want in seen and ("initialize" in [m for m, _ in seen]) == (mode == "legacy"), seen


def test_a_2026_listing_is_private_and_content_length_goes(stack: Stack) -> None:
    meta = {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientCapabilities": {},
                      "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"}}}
    headers = {"mcp-method": "tools/list"}
    r = stack.post("json", rpc("tools/list", meta), headers=headers, protocol_version="2026-07-28")
    assert r.status == 200, r.text
    assert r.json()["result"]["cacheScope"] == "private"
    assert sorted(t["name"] for t in r.json()["result"]["tools"]) == ["echo", "get_weather"]
    assert "content-length" not in r.headers or int(r.headers["content-length"]) == len(r.body)
    # An older revision's listing is filtered but not given a cacheScope.
    r = stack.post("json", rpc("tools/list"), protocol_version="2025-11-25")
    assert "cacheScope" not in r.json()["result"]


def test_pagination_and_ttl_are_kept(stack: Stack) -> None:
    r = stack.post("crafted", rpc("tools/list", {"cursor": "page-1"}),
                   headers={"x-answer": "paged", "accept-encoding": "gzip, br"})
    assert r.status == 200, r.text
    result = r.json()["result"]
    assert [t["name"] for t in result["tools"]] == ["echo"]
    assert (result["nextCursor"], result["ttlMs"]) == ("page-2", 60000)
    # The filter asked the server for an uncompressed listing it can read.
    assert result["_meta"] == {"acceptEncoding": "identity"}


def test_a_split_sse_listing_is_filtered_event_by_event(stack: Stack) -> None:
    r = stack.post("crafted", rpc("tools/list"), headers={"x-answer": "sse"})
    assert r.status == 200 and r.headers["content-type"] == "text/event-stream"
    events = [e for e in r.text.split("\n\n") if e.strip()]
    data = [json.loads("".join(l[len("data: "):] for l in e.splitlines() if l.startswith("data: "))) for e in events]
    assert data[0]["method"] == "notifications/progress"
    assert [t["name"] for t in data[1]["result"]["tools"]] == ["echo", "get_weather"]
    assert "delete_repo" not in r.text and "keep-alive" not in r.text


@pytest.mark.parametrize("answer", ["malformed", "duplicate", "oversize", "gzip"])
def test_an_unfilterable_listing_is_replaced_by_an_error(stack: Stack, answer: str) -> None:
    r = stack.post("crafted", rpc("tools/list", id="list-7"), headers={"x-answer": answer})
    assert r.status == 200
    assert "delete_repo" not in r.text
    assert r.json() == {"jsonrpc": "2.0", "id": "list-7", "error": {
        "code": -32603, "message": "The server's listing could not be checked for this caller"}}
    # What the official client reports: an error of the call, with the message.
    with McpAgent(stack.url("crafted"), cert=stack.pki.client(ALPHA), ca=stack.pki.ca,
                  headers={"x-answer": answer}) as agent:
        with pytest.raises(MCPError) as err:
            agent.list_tools()
        assert err.value.error.code == -32603 and "could not be checked" in err.value.error.message


def test_revisions_are_checked(stack: Stack) -> None:
    r = stack.post("json", rpc("ping"), protocol_version="2024-11-05")
    assert (r.status, r.json()["error"]["code"]) == (400, -32022)
    assert r.json()["error"]["data"]["supported"] == ["2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"]
    r = stack.post("json", rpc("ping"), headers={"mcp-method": "ping"}, protocol_version="2026-07-28")
    assert (r.status, r.json()["error"]["code"]) == (404, -32601)
    r = stack.post("json", rpc("server/discover"), protocol_version="2025-11-25")
    assert (r.status, r.json()["error"]["code"]) == (404, -32601)


def test_mcp_param_headers_are_passed_on_untouched(stack: Stack) -> None:
    stack.json_server.reset()
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}
    call = rpc("tools/call", {"name": "echo", "arguments": {"text": "hi"}, "_meta": meta})
    headers = {"mcp-method": "tools/call", "mcp-name": "echo", "mcp-param-region": "=?base64?ZXUtd2VzdA==?="}
    stack.post("json", call, headers=headers, protocol_version="2026-07-28")
    seen = [r["headers"] for r in stack.json_server.requests() if r["mcp_method"] == "tools/call"]
    assert [h.get("mcp-param-region") for h in seen] == ["=?base64?ZXUtd2VzdA==?="], seen
