"""Listings on streams a hostile or careless server writes, through real Envoy 1.40
(docs/semantics.md §5.4).

One Envoy (plain HTTP) with the filter in front of an upstream that answers each request with
the bytes the test chose (status, headers, body chunks), and of the Python SDK's server at its
defaults (sessions, SSE). The caller may call `echo` and use the base protocol, so every listing
it gets must name `echo` alone, whatever stream carries it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

import httpx2

from harness import BackgroundHttpServer, Cluster, McpServerProc, Route, rpc
from harness import bundles as b
from harness.procs import start_mcp_server
from harness.rawhttp import Reply, send_raw
from harness.stack import Listen, Stack

ALL_TOOLS = ["delete_repo", "echo", "get_weather"]
Answer = tuple[int, list[tuple[str, str]], list[bytes]]


class ScriptedUpstream(BackgroundHttpServer):
    """Answers every request with `self.answer` (status, headers, body chunks written one by one,
    chunked); records the requests' headers and bodies."""

    def __init__(self) -> None:
        self.answer: Answer = (200, [], [])
        self.seen: list[tuple[dict[str, list[str]], bytes]] = []
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                headers: dict[str, list[str]] = {}
                for k, v in self.headers.items():
                    headers.setdefault(k.lower(), []).append(v)
                upstream.seen.append((headers, body))
                status, hdrs, chunks = upstream.answer
                self.send_response(status)
                for k, v in hdrs:
                    self.send_header(k, v)
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                for c in chunks:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(c), c))
                    self.wfile.flush()
                    if len(chunks) < 50:
                        time.sleep(0.002)
                self.wfile.write(b"0\r\n\r\n")

            do_POST = do_GET = _answer  # noqa: N815

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(Handler)


def bundle(ports: dict[str, int]) -> dict[str, Any]:
    # The gz routes match on Accept-Encoding (as `mcp-access compile` lists HTTPRoute matches).
    return b.bundle(envoy={"routeMatchHeaders": ["accept-encoding"]},
        gateways=[b.gateway(ports)],
        backends=[b.backend("up", "up-route"), b.backend("sdk", "sdk-route"), b.backend("sdkjson", "sdkjson-route"),
                  b.backend("gz", "gz-route"), b.backend("plain", "plain-route")],
        policies=[b.policy("echo-only", "Gateway", "gw", "Allow", rules=[b.rule("echo", b.calls("echo", base=True))])],
    )


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedUpstream]:
    server = ScriptedUpstream()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def sdk_server(work_dir: Path) -> Iterator[McpServerProc]:
    """The Python SDK's server at its defaults: sessions, answers as SSE streams."""
    with start_mcp_server(work_dir / "logs", name="hostile-sdk", extra_args=["--stateful", "--sse"]) as srv:
        yield srv


@pytest.fixture(scope="module")
def sdk_json_server(work_dir: Path) -> Iterator[McpServerProc]:
    """The Python SDK's server with sessions, answering with JSON bodies."""
    with start_mcp_server(work_dir / "logs", name="hostile-sdk-json", extra_args=["--stateful"]) as srv:
        yield srv


@pytest.fixture(scope="module")
def stack(work_dir: Path, wasm_path: Path, upstream: ScriptedUpstream, sdk_server: McpServerProc,
          sdk_json_server: McpServerProc) -> Iterator[Stack]:
    with Stack.start("hostile-streams", work_dir=work_dir, wasm=wasm_path, bundle=bundle,
                     routes=[Route("up-route", "/up/mcp", "up", prefix_rewrite="/mcp"),
                             Route("sdk-route", "/sdk/mcp", "sdk", prefix_rewrite="/mcp"),
                             Route("sdkjson-route", "/sdkjson/mcp", "sdkjson", prefix_rewrite="/mcp"),
                             # Two routes told apart by a header the filter edits (Envoy matches again).
                             Route("gz-route", "/gz/mcp", "up", prefix_rewrite="/mcp", extra={"match": {
                                 "prefix": "/gz/mcp", "headers": [{"name": "accept-encoding",
                                                                   "string_match": {"contains": "gzip"}}]}}),
                             Route("plain-route", "/gz/mcp", direct_response=(200, "plain route"))],
                     upstreams=[Cluster("up", port=upstream.port), Cluster("sdk", port=sdk_server.port),
                                Cluster("sdkjson", port=sdk_json_server.port)],
                     listeners={"plain": Listen()}) as s:
        yield s


def listing(id: Any) -> dict[str, Any]:
    items = [{"name": n, "inputSchema": {"type": "object"}} for n in ALL_TOOLS]
    return {"jsonrpc": "2.0", "id": id, "result": {"tools": items}}


def sse(*messages: dict[str, Any], eol: bytes = b"\n") -> bytes:
    out = b""
    for m in messages:
        out += b"event: message" + eol + b"data: " + json.dumps(m).encode() + eol + eol
    return out


SSE = [("content-type", "text/event-stream")]
JSON = [("content-type", "application/json")]
HEADERS = [("content-type", "application/json"), ("accept", "application/json, text/event-stream"),
           ("mcp-protocol-version", "2025-11-25")]


def send(stack: Stack, body: Any) -> Reply:
    return send_raw(stack.port, "POST", "/up/mcp", HEADERS, json.dumps(body).encode())


def names_in(body: bytes) -> list[list[str]]:
    """The tool names of every message in a JSON or SSE body that lists tools."""
    text = body.decode()
    datas = [text] if text.lstrip().startswith("{") else [
        "\n".join(l[5:].lstrip() for l in ev.replace("\r\n", "\n").replace("\r", "\n").split("\n")
                  if l.startswith("data:"))
        for ev in text.replace("\r\n", "\n").replace("\r", "\n").split("\n\n") if "data:" in ev]
    messages = [json.loads(d) for d in datas]
    return [[t["name"] for t in m["result"]["tools"]] for m in messages
            if isinstance(m.get("result"), dict) and "tools" in m["result"]]


# --- every stream carries listings (§5) --------------------------------------------------------

def test_a_stream_split_at_every_byte_is_filtered(stack: Stack, upstream: ScriptedUpstream) -> None:
    """CR line ends, one byte per chunk: a CR ending a chunk is a line end already."""
    body = sse(listing(99), eol=b"\r")
    upstream.answer = (200, SSE, [body[i:i + 1] for i in range(len(body))])
    r = send(stack, rpc("tools/call", {"name": "echo", "arguments": {}}, id=7))
    assert names_in(r.body) == [["echo"]], r.body


def test_a_tools_call_json_answer_in_a_session_holding_a_listing_is_filtered(stack: Stack,
                                                                             upstream: ScriptedUpstream) -> None:
    """A JSON body answering a POST is dispatched by its id (SDK clients route a response to the
    request of that id, whichever POST it came on), and the SDK server in JSON mode with sessions
    mixes answers of requests sent at once under one id as it does on streams: in a session, the
    JSON answer to a call is read, asked uncompressed, and a listing in it filtered."""
    call = rpc("tools/call", {"name": "echo", "arguments": {}}, id=7)
    session = [("mcp-session-id", "s-1")]
    upstream.answer = (200, JSON, [json.dumps(listing(7)).encode()])
    # (Accept-Encoding is passed as sent: routes of this bundle match on it.)
    for asked, sent in (("gzip, br", ["gzip, br"]), (None, None)):
        extra = [("accept-encoding", asked)] if asked else []
        r = send_raw(stack.port, "POST", "/up/mcp", HEADERS + session + extra, json.dumps(call).encode())
        assert (r.status, names_in(r.body)) == (200, [["echo"]]), r.body
        assert upstream.seen[-1][0].get("accept-encoding") == sent
    # The call's own answer passes byte for byte, in one chunk or many.
    own = json.dumps({"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": "tools"}]}}).encode()
    upstream.answer = (200, JSON, [own[i:i + 5] for i in range(0, len(own), 5)])
    r = send_raw(stack.port, "POST", "/up/mcp", HEADERS + session, json.dumps(call).encode())
    assert (r.status, r.body) == (200, own)
    # Without a session no server gives one POST another's answer: not read.
    upstream.answer = (200, JSON, [json.dumps(listing(7)).encode()])
    r = send(stack, call)
    assert names_in(r.body) == [ALL_TOOLS]


@pytest.mark.parametrize("server", ["sdk", "sdkjson"])
def test_a_listing_routed_by_id_to_another_requests_stream_is_filtered(stack: Stack, server: str) -> None:
    """The SDK server (SSE or JSON answers) routes an answer to the stream of the last POST that
    carried its id: a tools/list and a tools/call sent at once under the same id may give the
    listing to the call's stream, as the call's own answer. The filter lists nothing more there."""
    url = stack.url(server)
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    with httpx2.Client(timeout=5) as c:
        r = c.post(url, headers=headers, json=rpc("initialize", {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}, id=0))
        assert r.status_code == 200, r.text
        headers |= {"mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
        c.post(url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        mixed = 0
        for n in range(1, 301):
            answers: dict[str, bytes] = {}

            def post(what: str, body: dict[str, Any]) -> None:
                try:
                    answers[what] = c.post(url, headers=headers, json=body, timeout=2).content
                except httpx2.TimeoutException:  # its answer went to the other stream
                    answers[what] = b""

            threads = [threading.Thread(target=post, args=a) for a in (
                ("list", rpc("tools/list", id=n)),
                ("call", rpc("tools/call", {"name": "echo", "arguments": {"text": "hi"}}, id=n)))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for what, body in answers.items():
                assert all(names == ["echo"] for names in names_in(body)), (what, body)
            mixed += bool(names_in(answers["call"]))
            if mixed >= 2:
                break
    assert mixed, "the SDK server never gave the call's stream the listing: nothing was tested"


def test_a_request_is_not_routed_elsewhere_once_its_headers_are_edited(stack: Stack,
                                                                      upstream: ScriptedUpstream) -> None:
    """Envoy matches the route again after the filter edits the request's headers: a listing asked
    with `Accept-Encoding: gzip` is judged on the route that matches it; asked for identity, another
    route (here a direct answer) would match. A route matches on Accept-Encoding
    (`envoy.routeMatchHeaders`): the filter leaves it as it is."""
    upstream.answer = (200, JSON, [json.dumps(listing(3)).encode()])
    seen = len(upstream.seen)
    headers = HEADERS + [("accept-encoding", "gzip")]
    # A call (not edited): judged and sent on the route that matched it.
    call = rpc("tools/call", {"name": "echo", "arguments": {}}, id=2)
    r = send_raw(stack.port, "POST", "/gz/mcp", headers, json.dumps(call).encode())
    assert (r.status, len(upstream.seen)) == (200, seen + 1), r.body
    # A listing (edited to ask for identity) must go the same way, or not at all.
    r = send_raw(stack.port, "POST", "/gz/mcp", headers, json.dumps(rpc("tools/list", id=3)).encode())
    assert len(upstream.seen) == seen + 2 or r.status >= 500, r.body
