"""Requests that spell a denied request differently are still judged as that request, in real Envoy.

One Envoy with three plaintext listeners:
  normalized  the filter, with Envoy's own path / host normalization (what the project renders)
  raw         the filter, without any Envoy normalization: the filter alone must hold
  front       no filter; forwards everything unchanged over HTTP/2 (h2c) to `raw`, so the filter
              also sees the requests as Envoy's HTTP/2 codec hands them over
Requests are written byte for byte over a socket (HTTP/1.1), so paths, repeated headers and Host
values reach Envoy exactly as a hostile client sends them. Every refused request is checked
against the MCP server's own request log: it never arrives there.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import Cluster, McpServerProc, Route, rpc
from harness import bundles as b
from harness.rawhttp import Reply, send_raw
from harness.stack import Listen, Stack

DENIED = (403, -32010)  # a policy said no (the bundle's default deny answer)
MISMATCH = (400, -32020)  # HeaderMismatch (SEP-2243)
BAD_PATH = (400, -32600)  # no canonical path


def policy(name: str, level: str, target: str, action: str, authorization: dict[str, Any]) -> dict[str, Any]:
    return b.policy(name, level, target, action, rules=[b.rule(name, authorization)])


def bundle(ports: dict[str, int]) -> dict[str, Any]:
    return b.bundle(
        gateways=[b.gateway({n: ports[n] for n in ("normalized", "raw")})],
        backends=[b.backend("tools", "tools-route"), b.backend("guarded", "guarded-route"),
                  b.backend("hosted", "hosted-route")],
        policies=[
            policy("no-admin", "Gateway", "gw", "Deny", {"paths": [{"type": "PathPrefix", "value": "/mcp/admin"}]}),
            policy("no-intruders", "Gateway", "gw", "Deny", b.header("x-role", "intruder")),
            policy("blocked-host", "Gateway", "gw", "Deny", {"hosts": ["blocked.example"]}),
            policy("echo-only", "Backend", "tools", "Allow", b.calls("echo", base=True)),
            policy("tenant-acme", "Backend", "guarded", "Allow", b.header("x-tenant", "acme")),
            policy("ok-hosts", "Backend", "hosted", "Allow", {"hosts": ["*.ok.example"]}),
        ],
    )


MCP_HEADERS = [("content-type", "application/json"), ("accept", "application/json, text/event-stream")]


def call(tool: str, meta_version: str | None = None) -> bytes:
    params: dict[str, Any] = {"name": tool, "arguments": {"text": "hi"}}
    if meta_version:
        params["_meta"] = {"io.modelcontextprotocol/protocolVersion": meta_version}
    return json.dumps(rpc("tools/call", params, id=7)).encode()


def b64(s: str) -> str:
    return f"=?base64?{base64.b64encode(s.encode()).decode()}?="


def send(stack: Stack, via: str, body: bytes, headers: list[tuple[str, str]] = (), path: str = "/mcp",
         host: str = "gw.example", version: str | None = "2025-11-25") -> Reply:
    """The request byte for byte to listener `via`, after forgetting what the MCP server received."""
    stack.servers["mcp"].reset()
    h = list(MCP_HEADERS) + ([("mcp-protocol-version", version)] if version else []) + list(headers)
    return send_raw(stack.ports[via], "POST", path, h, body, host)


def arrived(stack: Stack) -> list[dict[str, Any]]:
    return stack.servers["mcp"].requests()


@pytest.fixture(scope="module")
def stack(work_dir: Path, mcp_server: McpServerProc, wasm_path: Path) -> Iterator[Stack]:
    routes = [
        Route("guarded-route", "/guarded", "tools", prefix_rewrite="/mcp"),
        Route("hosted-route", "/hosted", "tools", prefix_rewrite="/mcp"),
        Route("tools-route", "/", "tools"),
    ]
    listeners = {
        "normalized": Listen(),
        "raw": Listen(normalize=False),
        "front": Listen(filter=False, normalize=False, routes=[Route("to-raw", "/", "raw-h2", keep_host=True)]),
    }

    def upstreams(ports: dict[str, int]) -> list[Cluster]:
        # The front listener's cluster: the raw listener, over HTTP/2.
        return [Cluster("tools", port=mcp_server.port), Cluster("raw-h2", port=ports["raw"], http2=True)]

    with Stack.start("canonical", work_dir=work_dir, wasm=wasm_path, bundle=bundle, routes=routes,
                     upstreams=upstreams, listeners=listeners, servers={"mcp": mcp_server}) as s:
        hcms = {l["name"]: l["filter_chains"][0]["filters"][0]["typed_config"]
                for l in s.envoy.config["static_resources"]["listeners"]}
        assert hcms["normalized"]["normalize_path"] is True and "normalize_path" not in hcms["raw"]
        yield s


FILTERED = ["raw", "front", "normalized"]


def test_the_setup_forwards_front_over_http2(stack: Stack) -> None:
    r = send(stack, "front", call("echo"))
    assert r.status == 200, r.body
    assert stack.envoy.stats("http.raw.downstream_cx_http2_total")["http.raw.downstream_cx_http2_total"] >= 1


# --- item 4: Mcp-Method / Mcp-Name / MCP-Protocol-Version once, agreeing with the body -------

@pytest.mark.parametrize("via", FILTERED)
def test_mcp_headers_appear_once_and_agree_with_the_body(stack: Stack, via: str) -> None:
    ok = send(stack, via, call("echo"), [("mcp-method", "tools/call"), ("mcp-name", "echo")])
    assert ok.status == 200, ok.body
    assert [r["tool"] for r in arrived(stack)] == ["echo"]
    refused = {
        "second Mcp-Name": [("mcp-name", "echo"), ("mcp-name", "delete_repo")],
        "second Mcp-Name, same value": [("mcp-name", "echo"), ("mcp-name", "echo")],
        "second Mcp-Method": [("mcp-method", "tools/call"), ("mcp-method", "tools/list")],
        "Mcp-Method disagrees": [("mcp-method", "tools/list")],
        "Mcp-Name disagrees": [("mcp-name", "delete_repo")],
        "Base64 Mcp-Name disagrees": [("mcp-name", b64("delete_repo"))],
        "malformed Base64": [("mcp-name", "=?base64?ZWNobw?=")],
    }
    for what, headers in refused.items():
        r = send(stack, via, call("echo"), headers)
        assert r.outcome == MISMATCH, (what, r)
        assert arrived(stack) == [], f"{what}: reached the MCP server"
    r = send(stack, via, call("echo"), [("mcp-name", b64("echo"))])
    assert r.status == 200 and [x["tool"] for x in arrived(stack)] == ["echo"]


@pytest.mark.parametrize("via", FILTERED)
def test_protocol_version_header_is_single_and_matches_meta(stack: Stack, via: str) -> None:
    modern = [("mcp-method", "tools/call"), ("mcp-name", "echo")]
    for what, version, headers, body in [
        ("header and _meta disagree", "2026-07-28", modern, call("echo", "2025-11-25")),
        ("header twice", "2025-11-25", [("mcp-protocol-version", "2025-11-25")], call("echo")),
        ("2026-07-28 without Mcp-Name", "2026-07-28", modern[:1], call("echo", "2026-07-28")),
        ("2026-07-28 without the version header", None, modern, call("echo", "2026-07-28")),
    ]:
        r = send(stack, via, body, headers, version=version)
        assert r.outcome == MISMATCH, (what, r)
        assert arrived(stack) == [], f"{what}: reached the MCP server"


# --- item 5: paths ----------------------------------------------------------------------

BYPASSES = ["/mcp/admin", "/mcp/./admin", "/mcp/x/../admin", "/mcp//admin", "/mcp/%61dmin", "/mcp/%2e/admin",
            "/mcp/%2E%2E/mcp/admin", "/mcp/admin?x=1"]
ESCAPED = ["/mcp/admin%2ftools", "/mcp/admin%2Ftools", "/mcp%5Cadmin", "/mcp/%00admin", "/mcp/%zzadmin",
           "/mcp/x//../admin"]  # the last: /mcp/x/admin by RFC 3986 order, /mcp/admin if slashes merge first


@pytest.mark.parametrize("via", ["raw", "front"])
def test_the_filter_alone_matches_paths_canonically(stack: Stack, via: str) -> None:
    ok = send(stack, via, call("echo"), path="/mcp")
    assert ok.status == 200 and len(arrived(stack)) == 1
    for path in BYPASSES:
        r = send(stack, via, call("echo"), path=path)
        assert r.outcome == DENIED, (path, r)
        assert arrived(stack) == [], f"{path} reached the MCP server"
    for path in ESCAPED:
        r = send(stack, via, call("echo"), path=path)
        assert r.outcome == BAD_PATH, (path, r)
        assert b"path" in r.body
        assert arrived(stack) == [], f"{path} reached the MCP server"


def test_envoy_normalizes_too_when_configured(stack: Stack) -> None:
    for path in BYPASSES:
        r = send(stack, "normalized", call("echo"), path=path)
        assert r.outcome == DENIED, (path, r)
        assert arrived(stack) == []
    # Envoy itself refuses escaped slashes (REJECT_REQUEST), before the filter.
    for path in ESCAPED[:3]:
        r = send(stack, "normalized", call("echo"), path=path)
        assert r.status == 400, (path, r)
        assert arrived(stack) == []


# --- item 6: repeated headers -----------------------------------------------------------

@pytest.mark.parametrize("via", FILTERED)
def test_repeated_headers_are_judged_against_the_caller(stack: Stack, via: str) -> None:
    def post(headers: list[tuple[str, str]], path: str = "/mcp") -> Reply:
        return send(stack, via, call("echo"), headers, path=path)

    assert post([("x-role", "user")]).status == 200
    # Deny: any copy matches. (Envoy 1.40 hands the filter each copy of these headers separately,
    # over HTTP/1.1 and HTTP/2: joined as "user,intruder" they would match no exact rule.)
    for headers in ([("x-role", "user"), ("x-role", "intruder")], [("x-role", "intruder"), ("x-role", "user")]):
        r = post(headers)
        assert r.outcome == DENIED, (headers, r)
        assert arrived(stack) == []
    # Allow: every copy must match; one line with a comma is one copy.
    assert post([("x-tenant", "acme")], "/guarded").status == 200
    assert post([("x-tenant", "acme"), ("x-tenant", "acme")], "/guarded").status == 200
    for headers in ([("x-tenant", "acme"), ("x-tenant", "evil")], [("x-tenant", "evil"), ("x-tenant", "acme")],
                    [("x-tenant", "acme,evil")], []):
        r = post(headers, "/guarded")
        assert r.outcome == DENIED, (headers, r)
        assert arrived(stack) == []


# --- item 7: hosts ----------------------------------------------------------------------

@pytest.mark.parametrize("via", FILTERED)
def test_hosts_are_matched_canonically(stack: Stack, via: str) -> None:
    for host in ["blocked.example", "blocked.example.", "BLOCKED.Example.", "blocked.example.:8080"]:
        r = send(stack, via, call("echo"), host=host)
        assert r.outcome == DENIED, (host, r)
        assert arrived(stack) == []
    for host in ["a.ok.example", "a.ok.example.", "A.OK.example.:8080"]:
        r = send(stack, via, call("echo"), path="/hosted", host=host)
        assert r.status == 200, (host, r)
    for host in [".ok.example", "ok.example"]:
        r = send(stack, via, call("echo"), path="/hosted", host=host)
        assert r.status in (400, 403), (host, r)
        assert arrived(stack) == [], f"{host} reached the MCP server"
