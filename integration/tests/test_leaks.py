"""Regressions of the leaks attack testing found, in real Envoy 1.40 with the official Python SDK server.

One Envoy, two plaintext listeners with the filter: `normalized` (the Envoy settings the project
renders) and `raw` (none: the filter alone must hold). Three backends on the demo MCP server:
  tools    Allow: the base protocol, tool calls of echo / get_weather by a CEL rule reading
           `request.mcp.params.name`, the prompt `summarize`, the resource file:///docs/readme, and
           subscriptions to file:///public by a CEL rule reading `request.mcp.params.uri`
  guarded  Allow any method; Deny any call whose params hold `arguments`
  cat      Allow the `tools` category only
Requests are written byte for byte (HTTP/1.1 over a socket, HTTP/2 frames with the h2 library), and
every refusal is checked against the MCP server's own request log: it never arrives there.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import h2.events
import pytest

from harness import Cluster, McpServerProc, Route, rpc
from harness import bundles as b
from harness.rawhttp import Reply, send_raw
from harness.stack import Listen, Stack

DENIED = (403, -32010)
MALFORMED_JSON = (400, -32700)
INVALID_REQUEST = (400, -32600)
INVALID_PARAMS = (400, -32602)
MISMATCH = (400, -32020)
SERVER_TOOLS = ["echo", "add", "delete_repo", "get_weather"]


def policy(name: str, target: str, action: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return b.policy(name, "Backend", target, action, rules=rules)


def bundle(ports: dict[str, int]) -> dict[str, Any]:
    return b.bundle(
        gateways=[b.gateway({f"l{i}": p for i, p in enumerate(ports.values())})],
        backends=[b.backend(n, f"{n}-route") for n in ("tools", "guarded", "cat")],
        policies=[
            policy("tools-allow", "tools", "Allow", [
                b.rule("base", b.mcp(base=True)),
                b.rule("some-tools", b.cel(
                    "request.mcp.method == 'tools/call' && request.mcp.params.name in ['echo', 'get_weather']")),
                b.rule("some-prompts-and-resources", b.mcp(b.method("prompts/get", ["summarize"]),
                                                           b.method("resources/read", ["file:///docs/readme"]))),
                b.rule("public-subscriptions", b.cel(
                    "request.mcp.method == 'resources/subscribe' && request.mcp.params.uri == 'file:///public'")),
            ]),
            policy("guarded-any", "guarded", "Allow", [b.rule("any", {})]),
            policy("guarded-no-arguments", "guarded", "Deny", [b.rule("no-arguments", b.cel("'arguments' in request.mcp.params"))]),
            policy("cat-tools", "cat", "Allow", [b.rule("tools", b.mcp(b.method("tools")))]),
        ],
    )


def send_h2(port: int, path: str, headers: list[tuple[str, str]], body: bytes,
            trailers: list[tuple[str, str]]) -> Reply:
    """One HTTP/2 (h2c, prior knowledge) request whose body is followed by trailers."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    conn.initiate_connection()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(conn.data_to_send())
        sid = conn.get_next_available_stream_id()
        conn.send_headers(sid, [(":method", "POST"), (":scheme", "http"), (":authority", "gw.example"),
                                (":path", path), *headers])
        conn.send_data(sid, body)
        conn.send_headers(sid, trailers, end_stream=True)
        s.sendall(conn.data_to_send())
        status, out, done = 0, b"", False
        while not done:
            data = s.recv(65536)
            if not data:
                break
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    status = int(dict(event.headers)[":status"])
                elif isinstance(event, h2.events.DataReceived):
                    out += event.data
                    conn.acknowledge_received_data(event.flow_controlled_length, sid)
                elif isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)):
                    done = True
            s.sendall(conn.data_to_send())
    return Reply(status, out)


JSON = [("content-type", "application/json"), ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2025-11-25")]


def send(stack: Stack, body: Any, backend: str = "tools", via: str = "normalized",
         headers: list[tuple[str, str]] | None = None) -> Reply:
    """The request byte for byte to listener `via`, after forgetting what the MCP server received."""
    stack.servers["mcp"].reset()
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return send_raw(stack.ports[via], "POST", f"/{backend}", JSON if headers is None else headers, raw)


def arrived(stack: Stack) -> list[dict[str, Any]]:
    return stack.servers["mcp"].requests()


@pytest.fixture(scope="module")
def stack(work_dir: Path, mcp_server: McpServerProc, wasm_path: Path) -> Iterator[Stack]:
    routes = [Route(f"{n}-route", f"/{n}", "mcp", prefix_rewrite="/mcp") for n in ("tools", "guarded", "cat")]
    with Stack.start("leaks", work_dir=work_dir, wasm=wasm_path, bundle=bundle, routes=routes,
                     upstreams=[Cluster("mcp", port=mcp_server.port)],
                     listeners={"normalized": Listen(), "raw": Listen(normalize=False)},
                     servers={"mcp": mcp_server}) as s:
        yield s


VIAS = ["normalized", "raw"]


def tool_names(r: Reply) -> list[str]:
    assert r.status == 200, r
    return [t["name"] for t in json.loads(r.body)["result"]["tools"]]


@pytest.mark.parametrize("via", VIAS)
def test_listed_tools_are_judged_without_the_listings_params(stack: Stack, via: str) -> None:
    assert tool_names(send(stack, rpc("tools/list", {}), via=via)) == ["echo", "get_weather"]
    # A name (and arguments) in the listing request once let every tool through the CEL rule.
    for params in ({"name": "echo"}, {"name": "get_weather", "arguments": {"x": 1}}):
        assert tool_names(send(stack, rpc("tools/list", params), via=via)) == ["echo", "get_weather"], params


@pytest.mark.parametrize("via", VIAS)
def test_subscribed_uris_are_judged_without_the_listens_params(stack: Stack, via: str) -> None:
    headers = [*JSON[:2], ("mcp-protocol-version", "2026-07-28"), ("mcp-method", "subscriptions/listen")]

    def listen(extra: dict[str, Any], uris: list[str]) -> Reply:
        params = {**extra, "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"},
                  "notifications": {"resourceSubscriptions": uris}}
        return send(stack, rpc("subscriptions/listen", params), via=via, headers=headers)

    # A public "uri" beside the subscriptions once subscribed the caller to the secret resource.
    for extra, uris in [({"uri": "file:///public"}, ["file:///secret"]),
                        ({"uri": "file:///public"}, ["file:///public", "file:///secret"]),
                        ({}, ["file:///secret"])]:
        r = listen(extra, uris)
        assert r.outcome == DENIED, (extra, uris, r)
        assert arrived(stack) == [], f"{uris} reached the MCP server"
    # The public one alone passes the filter (what the server makes of it is its own business).
    listen({}, ["file:///public"])
    assert [a["mcp_method"] for a in arrived(stack)] == ["subscriptions/listen"]


@pytest.mark.parametrize("via", VIAS)
def test_numbers_no_double_holds_are_malformed(stack: Stack, via: str) -> None:
    def call(arguments: str) -> bytes:
        return (b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"echo","arguments":'
                + arguments.encode() + b"}}")

    # CEL once saw params as empty: the Deny on 'arguments' missed and the call reached the server.
    for n in ["1e400", "-1e999", "9" * 400, "[1, 2e308]"]:
        r = send(stack, call('{"text": ' + n + "}"), backend="guarded", via=via)
        assert r.outcome == MALFORMED_JSON, (n[:20], r)
        assert arrived(stack) == [], f"{n[:20]} reached the MCP server"
    r = send(stack, call('{"text": 1e300}'), backend="guarded", via=via)
    assert r.outcome == DENIED and arrived(stack) == []
    r = send(stack, rpc("tools/call", {"name": "echo"}), backend="guarded", via=via)
    assert r.status == 200 and [a["tool"] for a in arrived(stack)] == ["echo"]


@pytest.mark.parametrize("via", VIAS)
def test_malformed_methods_and_categories(stack: Stack, via: str) -> None:
    for backend, method in [("guarded", "notifications/../tools/call"), ("guarded", "tools/list/"),
                            ("guarded", "tools//call"), ("cat", "tools/list "), ("cat", "tools/list\t")]:
        r = send(stack, rpc(method, {"name": "delete_repo"}), backend=backend, via=via)
        assert r.outcome == INVALID_REQUEST, (method, r)
        assert arrived(stack) == [], f"{method!r} reached the MCP server"
    # The tools category names the method table's tools methods, not every string under tools/.
    r = send(stack, rpc("tools/secret", {}), backend="cat", via=via)
    assert r.outcome == DENIED and arrived(stack) == []
    assert tool_names(send(stack, rpc("tools/list", {}), backend="cat", via=via)) == SERVER_TOOLS


@pytest.mark.parametrize("via", VIAS)
def test_completion_is_judged_by_what_it_completes(stack: Stack, via: str) -> None:
    def complete(ref: dict[str, Any]) -> Reply:
        return send(stack, rpc("completion/complete", {"ref": ref, "argument": {"name": "text", "value": "a"}}), via=via)

    for ref in [{"type": "ref/prompt", "name": "secret"}, {"type": "ref/resource", "uri": "file:///secret"}]:
        r = complete(ref)
        assert r.outcome == DENIED, (ref, r)
        assert arrived(stack) == []
    for ref in [{"type": "ref/unknown", "name": "summarize"}, {"type": "ref/prompt"}]:
        r = complete(ref)
        assert r.outcome == INVALID_PARAMS, (ref, r)
        assert arrived(stack) == []
    for ref in [{"type": "ref/prompt", "name": "summarize"}, {"type": "ref/resource", "uri": "file:///docs/readme"}]:
        complete(ref)
        assert [a["mcp_method"] for a in arrived(stack)] == ["completion/complete"], ref


@pytest.mark.parametrize("via", VIAS)
def test_a_post_must_be_json_in_utf8(stack: Stack, via: str) -> None:
    body = rpc("tools/call", {"name": "echo", "arguments": {"text": "hi"}})
    for content_type in [None, "text/plain", "application/json; charset=iso-8859-1", "application/json;charset=utf-16"]:
        headers = [h for h in JSON if h[0] != "content-type"]
        if content_type:
            headers.append(("content-type", content_type))
        r = send(stack, body, via=via, headers=headers)
        assert r.status == 415, (content_type, r)
        assert arrived(stack) == []
    headers = [h for h in JSON if h[0] != "content-type"] + [("content-type", "application/json; charset=UTF-8")]
    assert send(stack, body, via=via, headers=headers).status == 200


def test_header_names_with_underscores(stack: Stack) -> None:
    call = rpc("tools/call", {"name": "echo", "arguments": {"text": "hi"}})
    # The configuration the project renders refuses them in Envoy...
    r = send(stack, call, via="normalized", headers=[*JSON, ("mcp_name", "delete_repo")])
    assert r.status == 400 and arrived(stack) == []
    # ...and the filter alone counts them as copies of the MCP header they would be read as.
    for extra in ([("mcp_name", "delete_repo")], [("mcp-name", "echo"), ("mcp_name", "echo")]):
        r = send(stack, call, via="raw", headers=[*JSON, *extra])
        assert r.outcome == MISMATCH, (extra, r)
        assert arrived(stack) == []


@pytest.mark.parametrize("via", VIAS)
def test_mcp_headers_sent_as_trailers_are_refused(stack: Stack, via: str) -> None:
    body = json.dumps(rpc("tools/call", {"name": "echo", "arguments": {"text": "hi"}})).encode()
    stack.servers["mcp"].reset()
    r = send_h2(stack.ports[via], "/tools", JSON, body, [("x-checksum", "abc")])
    assert r.status == 200, r
    for name in ["mcp-name", "mcp-method"]:
        stack.servers["mcp"].reset()
        r = send_h2(stack.ports[via], "/tools", JSON, body, [(name, "delete_repo")])
        assert r.outcome == MISMATCH, (name, r)
        assert arrived(stack) == []
