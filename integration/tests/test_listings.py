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
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import MCPError

from harness import ALPHA, BETA, BackgroundHttpServer, Cluster, McpServerProc, Pki, Route, get, rpc, start_mcp_server, text_of
from harness import bundles as b
from harness.client import ssl_context
from harness.stack import Stack

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
# Non-2xx answers to a listing: (status, content type, body).
ERROR_ANSWERS = {
    "500-listing": (500, "application/json", json.dumps(tools_result(["delete_repo", "echo", "get_weather"])).encode()),
    "500-error": (500, "application/json",
                  b'{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"delete_repo is broken"}}'),
    "502-html": (502, "text/html", b"<html><body>delete_repo: bad gateway</body></html>"),
}


def with_line_ends(events: list[bytes], style: str) -> list[bytes]:
    """`events` (LF line ends) with CR, CRLF or mixed line ends."""
    if style == "lf":
        return events
    if style in ("cr", "crlf"):
        return [e.replace(b"\n", {"cr": b"\r", "crlf": b"\r\n"}[style]) for e in events]
    # mixed: each line end of another kind than the one before (never a CR before a blank LF).
    ends = [b"\r\n", b"\n", b"\r"]
    out, i = [], 0
    for e in events:
        lines = e.split(b"\n")[:-1]
        buf = b""
        for line in lines:
            buf += line + ends[i % 3]
            i += 1
        out.append(buf)
    return out


# What a crafted server sends on streams: a listing of every tool answering a request the
# filter did not see on that stream (a GET stream, or another request's POST stream).
ALL_TOOLS = ["delete_repo", "echo", "get_weather"]


class CraftedUpstream(BackgroundHttpServer):
    """Answers every POST as its `x-answer` header says; GET streams as the `x-stream` header says."""

    def __init__(self) -> None:
        # The id of the last tools/list answered with a stream that broke off (resumed by GET).
        pending: dict[str, Any] = {}

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def stream(self, parts: list[bytes], status: int = 200, pause: float = 0.05, hold: float = 0) -> None:
                """An SSE answer written in `parts` (chunks with a pause between), then held
                open `hold` seconds before it ends."""
                self.send_response(status)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                for part in parts:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                    self.wfile.flush()
                    time.sleep(pause)
                time.sleep(hold)
                self.wfile.write(b"0\r\n\r\n")

            def do_GET(self) -> None:  # noqa: N802
                kind = self.headers.get("x-stream", "lf")
                listing = tools_result(ALL_TOOLS)
                if self.headers.get("last-event-id"):
                    # The stream a tools/list POST broke off: its answer, replayed.
                    listing["id"] = pending.get("id", 1)
                    self.stream([b"id: ev-2\ndata: " + json.dumps(listing).encode() + b"\n\n"])
                    return
                listing["id"] = "no-such-request"
                note = b'data: {"jsonrpc":"2.0","method":"notifications/tools/list_changed"}\n\n'
                event = b"id: s-1\ndata: " + json.dumps(listing).encode() + b"\n\n"
                # The stream stays open after its events: they must reach the client before it ends.
                self.stream(with_line_ends([note, event], kind), hold=float(self.headers.get("x-hold", "0")))

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
                    # Each event cut in two writes, a pause between: the filter sees it in pieces.
                    self.stream([p for e in SSE_EVENTS for p in (e[:len(e) // 2], e[len(e) // 2:])])
                    return
                if answer.startswith("sse-"):
                    # The listing with other line ends, each event cut after its first CR (a
                    # CRLF then arrives in two chunks), with this request's id.
                    events = [e.replace(b'"id": 1,', b'"id": %s,' % json.dumps(msg["id"]).encode()) for e in SSE_EVENTS]
                    parts = []
                    for e in with_line_ends(events, answer[4:]):
                        cut = e.find(b"\r") + 1 or len(e) // 2
                        parts += [e[:cut], e[cut:]]
                    self.stream(parts)
                    return
                if answer == "resume" and msg.get("method") == "tools/list":
                    # A priming event (id, short retry), then the stream breaks off: the client
                    # resumes it with a GET carrying Last-Event-ID.
                    pending["id"] = msg["id"]
                    self.stream([b"id: ev-1\nretry: 50\ndata: \n\n"])
                    return
                if answer == "call-stream" and msg.get("method") == "tools/call":
                    # Another request's listing on this call's stream, then the call's answer.
                    other = {**tools_result(ALL_TOOLS), "id": 424242}
                    own = {"jsonrpc": "2.0", "id": msg["id"], "result": {
                        "content": [{"type": "text", "text": "called"}], "tools": [{"name": "delete_repo"}]}}
                    self.stream([b"data: " + json.dumps(m).encode() + b"\n\n" for m in (other, own)])
                    return
                if answer in ERROR_ANSWERS:
                    status, ctype, body = ERROR_ANSWERS[answer]
                    self.send_response(status)
                    self.send_header("content-type", ctype)
                    self.send_header("content-length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
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


def bundle(ports: dict[str, int]) -> dict[str, Any]:
    """alpha may call echo and get_weather and get the summarize prompt; beta may call
    get_weather and read the readme; both have the base protocol (listings, discover)."""

    def rule(name: str, spiffe: str, *methods: dict[str, Any]) -> dict[str, Any]:
        return b.rule(name, b.mcp(*methods, base=True), source=b.spiffe(spiffe))

    return b.bundle(
        gateways=[b.gateway(ports)],
        backends=[b.backend(n, f"{n}-route") for n in ("json", "sse", "crafted")],
        policies=[b.policy("agents", "Gateway", "gw", "Allow", rules=[
            rule("alpha", ALPHA, b.method("tools/call", ["echo", "get_weather"]), b.method("prompts/get", ["summarize"])),
            rule("beta", BETA, b.method("tools/call", ["get_weather"]), b.method("resources/read", ["file:///docs/readme"])),
        ])],
        listings={"maxBytes": MAX_LISTING},
    )


@pytest.fixture(scope="module")
def stack(work_dir: Path, mcp_server: McpServerProc, wasm_path: Path, pki: Pki) -> Iterator[Stack]:
    crafted = CraftedUpstream()
    routes = [Route(f"{n}-route", f"/{n}/mcp", n, prefix_rewrite="/mcp") for n in ("json", "sse", "crafted")]
    try:
        with start_mcp_server(work_dir / "logs", name="sse-upstream", extra_args=["--sse"]) as sse:
            upstreams = [Cluster("json", port=mcp_server.port), Cluster("sse", port=sse.port),
                         Cluster("crafted", port=crafted.port)]
            with Stack.start("listings", work_dir=work_dir, wasm=wasm_path, bundle=bundle, routes=routes,
                             upstreams=upstreams, pki=pki, servers={"json": mcp_server}) as s:
                yield s
    finally:
        crafted.close()


@pytest.mark.parametrize("mode", ["legacy", "auto"])
@pytest.mark.parametrize("backend", ["json", "sse"])
def test_the_sdk_client_sees_only_what_each_agent_may_use(stack: Stack, backend: str, mode: str) -> None:
    stack.servers["json"].reset()
    with stack.agent(ALPHA, backend, mode=mode) as alpha:
        assert sorted(alpha.tool_names()) == ["echo", "get_weather"]
        assert [p.name for p in alpha.list_prompts().prompts] == ["summarize"]
        assert alpha.list_resources().resources == []
        assert text_of(alpha.call_tool("echo", {"text": "listed and callable"})) == "listed and callable"
    with stack.agent(BETA, backend, mode=mode) as beta:
        assert beta.tool_names() == ["get_weather"]
        assert beta.list_prompts().prompts == []
        assert [str(r.uri) for r in beta.list_resources().resources] == ["file:///docs/readme"]
    if backend == "json":
        # "auto" speaks 2026-07-28 (server/discover, no initialize); "legacy" 2025-11-25.
        seen = [(r["mcp_method"], r["headers"].get("mcp-protocol-version")) for r in stack.servers["json"].requests()]
        want = ("server/discover", "2026-07-28") if mode == "auto" else ("initialize", None)
        assert want in seen and ("initialize" in [m for m, _ in seen]) == (mode == "legacy"), seen


def test_a_2026_listing_is_private_and_content_length_goes(stack: Stack) -> None:
    meta = {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientCapabilities": {},
                      "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"}}}
    headers = {"mcp-method": "tools/list"}
    r = stack.post(backend="json", body=rpc("tools/list", meta), headers=headers, protocol_version="2026-07-28")
    assert r.status == 200, r.text
    assert r.json()["result"]["cacheScope"] == "private"
    assert sorted(t["name"] for t in r.json()["result"]["tools"]) == ["echo", "get_weather"]
    assert "content-length" not in r.headers or int(r.headers["content-length"]) == len(r.body)
    # An older revision's listing is filtered but not given a cacheScope.
    r = stack.post(backend="json", body=rpc("tools/list"), protocol_version="2025-11-25")
    assert "cacheScope" not in r.json()["result"]


def test_pagination_and_ttl_are_kept(stack: Stack) -> None:
    r = stack.post(backend="crafted", body=rpc("tools/list", {"cursor": "page-1"}),
                   headers={"x-answer": "paged", "accept-encoding": "gzip, br"})
    assert r.status == 200, r.text
    result = r.json()["result"]
    assert [t["name"] for t in result["tools"]] == ["echo"]
    assert (result["nextCursor"], result["ttlMs"]) == ("page-2", 60000)
    # The filter asked the server for an uncompressed listing it can read.
    assert result["_meta"] == {"acceptEncoding": "identity"}


def test_a_split_sse_listing_is_filtered_event_by_event(stack: Stack) -> None:
    r = stack.post(backend="crafted", body=rpc("tools/list"), headers={"x-answer": "sse"})
    assert r.status == 200 and r.headers["content-type"] == "text/event-stream"
    events = [e for e in r.text.split("\n\n") if e.strip()]
    data = [json.loads("".join(l[len("data: "):] for l in e.splitlines() if l.startswith("data: "))) for e in events]
    assert data[0]["method"] == "notifications/progress"
    assert [t["name"] for t in data[1]["result"]["tools"]] == ["echo", "get_weather"]
    assert "delete_repo" not in r.text and "keep-alive" not in r.text


@pytest.mark.parametrize("answer", ["malformed", "duplicate", "oversize", "gzip"])
def test_an_unfilterable_listing_is_replaced_by_an_error(stack: Stack, answer: str) -> None:
    r = stack.post(backend="crafted", body=rpc("tools/list", id="list-7"), headers={"x-answer": answer})
    assert r.status == 200
    assert "delete_repo" not in r.text
    assert r.json() == {"jsonrpc": "2.0", "id": "list-7", "error": {
        "code": -32603, "message": "The server's listing could not be checked for this caller"}}
    # What the official client reports: an error of the call, with the message.
    with stack.agent(ALPHA, "crafted", headers={"x-answer": answer}) as agent:
        with pytest.raises(MCPError) as err:
            agent.list_tools()
        assert err.value.error.code == -32603 and "could not be checked" in err.value.error.message


def test_revisions_are_checked(stack: Stack) -> None:
    r = stack.post(backend="json", body=rpc("ping"), protocol_version="2024-11-05")
    assert (r.status, r.json()["error"]["code"]) == (400, -32022)
    assert r.json()["error"]["data"]["supported"] == ["2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"]
    r = stack.post(backend="json", body=rpc("ping"), headers={"mcp-method": "ping"}, protocol_version="2026-07-28")
    assert (r.status, r.json()["error"]["code"]) == (404, -32601)
    r = stack.post(backend="json", body=rpc("server/discover"), protocol_version="2025-11-25")
    assert (r.status, r.json()["error"]["code"]) == (404, -32601)


def test_mcp_param_headers_are_passed_on_untouched(stack: Stack) -> None:
    stack.servers["json"].reset()
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}
    call = rpc("tools/call", {"name": "echo", "arguments": {"text": "hi"}, "_meta": meta})
    headers = {"mcp-method": "tools/call", "mcp-name": "echo", "mcp-param-region": "=?base64?ZXUtd2VzdA==?="}
    stack.post(backend="json", body=call, headers=headers, protocol_version="2026-07-28")
    seen = [r["headers"] for r in stack.servers["json"].requests() if r["mcp_method"] == "tools/call"]
    assert [h.get("mcp-param-region") for h in seen] == ["=?base64?ZXUtd2VzdA==?="], seen


def sse_messages(text: str) -> list[dict[str, Any]]:
    """The JSON-RPC messages of an SSE body the filter wrote (LF line ends, `data: ` lines)."""
    events = [e for e in text.split("\n\n") if e.strip()]
    data = ["\n".join(l[len("data: "):] for l in e.splitlines() if l.startswith("data: ")) for e in events]
    return [json.loads(d) for d in data if d]


def tool_lists(messages: list[dict[str, Any]]) -> list[list[str]]:
    return [[t["name"] for t in m["result"]["tools"]] for m in messages if "tools" in m.get("result", {})]


@pytest.mark.parametrize("line_ends", ["lf", "cr", "crlf", "mixed"])
def test_a_get_stream_is_filtered_whatever_its_line_ends(stack: Stack, line_ends: str) -> None:
    """The standalone GET stream carries a listing answering a request the filter never saw."""
    r = get(stack.url("crafted"), headers={"x-stream": line_ends}, cert=stack.pki.client(ALPHA), ca=stack.pki.ca)
    assert r.status == 200 and r.headers["content-type"] == "text/event-stream", r.text
    m = sse_messages(r.text)
    assert m[0]["method"] == "notifications/tools/list_changed"
    assert tool_lists(m) == [["echo", "get_weather"]], r.text
    assert m[1]["id"] == "no-such-request" and "delete_repo" not in r.text
    assert "id: s-1\n" in r.text
    r = get(stack.url("crafted"), headers={"x-stream": line_ends}, cert=stack.pki.client(BETA), ca=stack.pki.ca)
    assert tool_lists(sse_messages(r.text)) == [["get_weather"]]


def test_a_get_stream_event_reaches_the_client_before_the_stream_ends(stack: Stack) -> None:
    """The GET stream is long-lived: each event goes out, filtered, as soon as it is complete."""
    ctx = ssl_context(stack.pki.ca, stack.pki.client(ALPHA))
    headers = {"accept": "text/event-stream", "x-hold": "4"}
    started = time.monotonic()
    with httpx2.Client(verify=ctx, timeout=10, trust_env=False) as http:
        with http.stream("GET", stack.url("crafted"), headers=headers) as resp:
            seen = b""
            for chunk in resp.iter_bytes():
                seen += chunk
                if b"s-1" in seen and seen.endswith(b"\n\n"):
                    break
            waited = time.monotonic() - started
    assert waited < 3, f"the listing event waited {waited:.1f} s for the stream to end"
    assert tool_lists(sse_messages(seen.decode())) == [["echo", "get_weather"]], seen


@pytest.mark.parametrize("who,want", [(ALPHA, ["echo", "get_weather"]), (BETA, ["get_weather"])])
def test_a_listing_resumed_on_a_get_stream_is_filtered_for_the_sdk_client(stack: Stack, who: str, want: list[str]) -> None:
    """The official client's tools/list stream breaks off after a priming event; the client
    resumes it with GET and Last-Event-ID, and the listing arrives there."""
    with stack.agent(who, "crafted", headers={"x-answer": "resume"}) as agent:
        assert sorted(agent.tool_names()) == want
    # The same by hand: the resumed stream's listing is filtered.
    r = get(stack.url("crafted"), headers={"last-event-id": "ev-1"}, cert=stack.pki.client(who), ca=stack.pki.ca)
    assert tool_lists(sse_messages(r.text)) == [want] and "delete_repo" not in r.text


@pytest.mark.parametrize("line_ends", ["cr", "crlf", "mixed", "lf"])
def test_an_sse_listing_is_filtered_whatever_its_line_ends(stack: Stack, line_ends: str) -> None:
    answer = f"sse-{line_ends}"
    r = stack.post(backend="crafted", body=rpc("tools/list", id=5), headers={"x-answer": answer})
    assert r.status == 200 and r.headers["content-type"] == "text/event-stream"
    m = sse_messages(r.text)
    assert [x.get("method") for x in m] == ["notifications/progress", None], r.text
    assert tool_lists(m) == [["echo", "get_weather"]] and "delete_repo" not in r.text
    with stack.agent(ALPHA, "crafted", headers={"x-answer": answer}) as agent:
        assert sorted(agent.tool_names()) == ["echo", "get_weather"]


def test_another_requests_listing_on_a_call_stream_is_filtered(stack: Stack) -> None:
    call = rpc("tools/call", {"name": "echo", "arguments": {"text": "x"}}, id=8)
    r = stack.post(backend="crafted", body=call, headers={"x-answer": "call-stream"})
    assert r.status == 200 and r.headers["content-type"] == "text/event-stream"
    other, own = sse_messages(r.text)
    assert other["id"] == 424242 and [t["name"] for t in other["result"]["tools"]] == ["echo", "get_weather"]
    # A tools/call never answers with a listing: a `tools` array under the call's own id is
    # another request's listing (a server routing answers by id alone), filtered as one.
    assert own == {"jsonrpc": "2.0", "id": 8, "result": {
        "content": [{"type": "text", "text": "called"}], "tools": []}}


def test_a_non_2xx_listing_is_filtered_and_an_error_passes_unchanged(stack: Stack) -> None:
    r = stack.post(backend="crafted", body=rpc("tools/list"), headers={"x-answer": "500-listing"})
    assert r.status == 500
    assert [t["name"] for t in r.json()["result"]["tools"]] == ["echo", "get_weather"], r.text
    assert "delete_repo" not in r.text
    for answer in ("500-error", "502-html"):
        status, ctype, body = ERROR_ANSWERS[answer]
        r = stack.post(backend="crafted", body=rpc("tools/list"), headers={"x-answer": answer})
        assert (r.status, r.headers["content-type"], r.body) == (status, ctype, body)
