"""Reused listings in real Envoy 1.40 (issue 25 P7, docs/performance.md): the filter reuses a
filtered listing when the upstream's bytes are the same and the caller is judged alike.

One Envoy with an mTLS listener and the filter in front of an upstream whose listing the test
changes at will, answered as a JSON body or as an SSE stream (each event in two writes). Two
callers asking alternately each get their own listing; a listing the upstream changes (a tool
more or less, or one byte of a description) is seen at once; the official SDK client too.
Listings asked under changing JSON-RPC ids (as SDK clients number their requests) are reused
with each request's id in place. Each reused answer is counted in
`mcp_access.listings.reused` (one Envoy worker here, so the count is exact); the answers are
checked to be what a fresh filtering gives.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from harness import ALPHA, BETA, BackgroundHttpServer, Cluster, Pki, Route, json_reply, rpc
from harness import bundles as b
from harness.stack import Stack

ALL_TOOLS = ["delete_repo", "echo", "get_weather"]
# What each caller may call (the bundle below), in the order the upstream lists tools.
MAY_CALL = {ALPHA: ["echo", "get_weather"], BETA: ["get_weather"]}


class ListingUpstream(BackgroundHttpServer):
    """Answers tools/list with `self.tools` (name -> description), as JSON or, with
    `x-format: sse`, as an SSE stream; other requests as a minimal MCP server."""

    def __init__(self) -> None:
        self.tools: dict[str, str] = {n: f"the {n} tool" for n in ALL_TOOLS}
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802
                msg = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
                if "id" not in msg:  # a notification
                    self.send_response(202)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                if msg.get("method") == "initialize":
                    result: dict[str, Any] = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                                              "serverInfo": {"name": "listing", "version": "0"}}
                elif msg.get("method") == "tools/list":
                    result = {"tools": [{"name": n, "description": d, "inputSchema": {"type": "object"}}
                                        for n, d in upstream.tools.items()]}
                else:
                    result = {}
                body = json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}).encode()
                if self.headers.get("x-format") == "sse":
                    event = b"event: message\ndata: " + body + b"\n\n"
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                    self.send_header("transfer-encoding", "chunked")
                    self.end_headers()
                    for part in (event[:len(event) // 2], event[len(event) // 2:]):
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                        self.wfile.flush()
                        time.sleep(0.01)
                    self.wfile.write(b"0\r\n\r\n")
                    return
                json_reply(self, body)

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(Handler)


def bundle(ports: dict[str, int]) -> dict[str, Any]:
    """alpha may call echo and get_weather, beta get_weather; both have the base protocol."""

    def rule(name: str, spiffe: str, tools: list[str]) -> dict[str, Any]:
        return b.rule(name, b.mcp(b.method("tools/call", tools), base=True), source=b.spiffe(spiffe))

    return b.bundle(
        gateways=[b.gateway(ports)],
        backends=[b.backend("up", "up-route")],
        policies=[b.policy("agents", "Gateway", "gw", "Allow", rules=[
            rule("alpha", ALPHA, MAY_CALL[ALPHA]), rule("beta", BETA, MAY_CALL[BETA])])],
    )


@pytest.fixture(scope="module")
def upstream() -> Iterator[ListingUpstream]:
    server = ListingUpstream()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def stack(work_dir: Path, wasm_path: Path, pki: Pki, upstream: ListingUpstream) -> Iterator[Stack]:
    with Stack.start("listing-reuse", work_dir=work_dir, wasm=wasm_path, bundle=bundle,
                     routes=[Route("up-route", "/up/mcp", "up", prefix_rewrite="/mcp")],
                     upstreams=[Cluster("up", port=upstream.port)], pki=pki) as s:
        yield s


@pytest.fixture(autouse=True)
def every_tool(upstream: ListingUpstream) -> None:
    upstream.tools = {n: f"the {n} tool" for n in ALL_TOOLS}


def listed(stack: Stack, who: str, fmt: str, id: int | str = 1) -> list[dict[str, Any]]:
    """The tools `who` is listed, asking with request id `id` (the same bytes come back for
    the same id)."""
    r = stack.post(backend="up", body=rpc("tools/list", id=id), who=who, headers={"x-format": fmt})
    assert r.status == 200, r.text
    if fmt == "sse":
        assert r.headers["content-type"] == "text/event-stream"
        events = [e for e in r.text.split("\n\n") if e.strip()]
        assert len(events) == 1, r.text
        data = "\n".join(l[len("data: "):] for l in events[0].splitlines() if l.startswith("data: "))
        message = json.loads(data)
    else:
        assert "content-length" not in r.headers or int(r.headers["content-length"]) == len(r.body)
        message = r.json()
    assert message["id"] == id
    return message["result"]["tools"]


@pytest.mark.parametrize("fmt", ["json", "sse"])
def test_callers_asking_alternately_get_their_own_listings(stack: Stack, fmt: str) -> None:
    for _ in range(5):
        for who in (ALPHA, BETA, BETA, ALPHA):
            tools = listed(stack, who, fmt)
            assert [t["name"] for t in tools] == MAY_CALL[who]
            assert all(t["description"] == f"the {t['name']} tool" for t in tools)


@pytest.mark.parametrize("fmt", ["json", "sse"])
def test_a_listing_the_upstream_changes_is_seen_at_once(stack: Stack, upstream: ListingUpstream, fmt: str) -> None:
    for who in (ALPHA, BETA, ALPHA, BETA):
        assert [t["name"] for t in listed(stack, who, fmt)] == MAY_CALL[who]
    # A tool fewer.
    del upstream.tools["get_weather"]
    assert [t["name"] for t in listed(stack, ALPHA, fmt)] == ["echo"]
    assert listed(stack, BETA, fmt) == []
    # One byte of a description.
    upstream.tools = {n: f"the {n} tool" for n in ALL_TOOLS}
    upstream.tools["echo"] = "the echO tool"
    assert [t["description"] for t in listed(stack, ALPHA, fmt)] == ["the echO tool", "the get_weather tool"]
    assert [t["name"] for t in listed(stack, BETA, fmt)] == ["get_weather"]
    # And back: no answer of before is mixed in.
    upstream.tools["echo"] = "the echo tool"
    assert [t["description"] for t in listed(stack, ALPHA, fmt)] == ["the echo tool", "the get_weather tool"]


def test_the_sdk_client_sees_its_own_listing_each_time(stack: Stack, upstream: ListingUpstream) -> None:
    with stack.agent(ALPHA, "up") as alpha, stack.agent(BETA, "up") as beta:
        for _ in range(3):
            assert alpha.tool_names() == MAY_CALL[ALPHA]
            assert beta.tool_names() == MAY_CALL[BETA]
        upstream.tools.pop("echo")
        assert alpha.tool_names() == ["get_weather"]
        assert beta.tool_names() == ["get_weather"]


@pytest.mark.parametrize("fmt", ["json", "sse"])
def test_listings_asked_under_changing_ids_answer_each_id(stack: Stack, upstream: ListingUpstream, fmt: str) -> None:
    ids: list[int | str] = [1, 9, 10, 12345678901, -3, "1", 'x"y', "t\\4", "echo", "get_weather", 7]
    for n, id in enumerate(ids * 2):
        who = (ALPHA, BETA)[n % 2]
        tools = listed(stack, who, fmt, id)
        assert [t["name"] for t in tools] == MAY_CALL[who], id
        assert all(t["description"] == f"the {t['name']} tool" for t in tools), id
    # A listing the upstream changes is seen at once under a new id.
    upstream.tools["echo"] = "the echO tool"
    assert [t["description"] for t in listed(stack, ALPHA, fmt, 100)] == ["the echO tool", "the get_weather tool"]
    assert [t["name"] for t in listed(stack, BETA, fmt, 101)] == ["get_weather"]


def test_an_sdk_session_asking_again_gets_the_same_listing(stack: Stack, upstream: ListingUpstream) -> None:
    """The SDK numbers its requests: each tools/list of a session has another id."""
    with stack.agent(ALPHA, "up") as alpha, stack.agent(BETA, "up") as beta:
        first = {who: agent.list_tools().model_dump() for who, agent in ((ALPHA, alpha), (BETA, beta))}
        assert [t["name"] for t in first[ALPHA]["tools"]] == MAY_CALL[ALPHA]
        assert [t["name"] for t in first[BETA]["tools"]] == MAY_CALL[BETA]
        for _ in range(5):
            assert alpha.list_tools().model_dump() == first[ALPHA]
            assert beta.list_tools().model_dump() == first[BETA]
        upstream.tools["echo"] = "changed"
        assert [t.description for t in alpha.list_tools().tools] == ["changed", "the get_weather tool"]


@pytest.mark.parametrize("fmt", ["json", "sse"])
def test_each_reused_listing_is_counted(stack: Stack, upstream: ListingUpstream, fmt: str) -> None:
    """A listing is reused from the second time a caller judged alike asks for the same bytes
    (one worker: one VM keeps them), and counted once (a JSON body, or the SSE event)."""
    upstream.tools = {n: f"the {n} tool, counted as {fmt}" for n in ALL_TOOLS}

    def reused_after(who: str, id: int) -> int:
        before = stack.counter("listings.reused")
        assert [t["name"] for t in listed(stack, who, fmt, id)] == MAY_CALL[who]
        return stack.counter("listings.reused") - before

    assert reused_after(ALPHA, 1) == 0  # bytes never seen: filtered afresh
    assert reused_after(ALPHA, 1) == 1
    assert reused_after(BETA, 1) == 0  # another caller: judged apart
    assert reused_after(BETA, 2) == 1  # another id: the same answer with that id
    assert reused_after(ALPHA, 3) == 1
    upstream.tools["echo"] = f"the echo tool, counted as {fmt}!"
    assert reused_after(ALPHA, 3) == 0  # one byte more: filtered afresh
    assert reused_after(ALPHA, 4) == 1
