"""What the official Python MCP SDK client (mcp 2.3.0) reports for each kind of refusal, in real
Envoy 1.40 (docs/semantics.md §5.1, §5.2): a policy denial (403, and 200 for clients that treat
non-2xx as a transport failure), an authorizer's denial (its status and WWW-Authenticate, its
body in error.data when details are exposed) and transport rejections (400, 413), over
2025-11-25 (initialize) and 2026-07-28 (server/discover).

Two listeners in front of the demo MCP server: "plain" with the default denyResponse, "exposed"
with `httpStatus: 200` and `exposeDetails: true`. The assertions are the measurements: the
SDK's `MCPError` code and message, which is what an application using the SDK shows.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from mcp import MCPError

from harness import ALPHA, BackgroundHttpServer, Cluster, Denied, McpServerProc, Pki, Route, text_of
from harness import bundles as b
from harness.stack import Listen, Stack

AUTHZ_BODY = {"reason": "needs approval", "ticket": "T-1"}


class ApprovalAuthorizer(BackgroundHttpServer):
    """Denies every check with 401, a WWW-Authenticate challenge and a JSON body."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("content-length") or 0))
                body = json.dumps(AUTHZ_BODY).encode()
                self.send_response(401)
                self.send_header("www-authenticate", 'Bearer realm="approvals", error="insufficient_scope"')
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(Handler)


def bundle(port: int, deny_response: dict[str, Any]) -> dict[str, Any]:
    """alpha may call echo and add; delete_repo is denied by a Deny policy; `add` needs the
    approval authorizer, which always says no."""

    def policy(name: str, action: str, seniority: int, **kw: Any) -> dict[str, Any]:
        return b.policy(name, "Gateway", "gw", action, seniority=seniority, **kw)

    return b.bundle(
        gateways=[b.gateway({"l": port})],
        backends=[b.backend("tools", "tools-route")],
        authorizers=[b.authorizer("approvals", "approvals", 2000)],
        policies=[
            policy("approvals", "ExternalAuth", 1, externalAuth="approvals", rules=[b.rule("add", b.calls("add"))]),
            policy("no-delete", "Deny", 2, rules=[b.rule("delete", b.calls("delete_repo"))]),
            policy("alpha", "Allow", 3, rules=[
                b.rule("alpha", b.calls("echo", "add", "delete_repo", base=True), source=b.spiffe(ALPHA))]),
        ],
        denyResponse=deny_response,
        limits={"maxBodyBytes": 4096},
    )


@pytest.fixture(scope="module")
def stack(work_dir: Path, mcp_server: McpServerProc, wasm_path: Path, pki: Pki) -> Iterator[Stack]:
    authz = ApprovalAuthorizer()
    listeners = {
        "plain": Listen(tls="mtls", bundle=lambda ports: bundle(ports["plain"], {})),
        "exposed": Listen(tls="mtls", bundle=lambda ports: bundle(ports["exposed"], {"httpStatus": 200, "exposeDetails": True})),
    }
    try:
        with Stack.start("sdk-denials", work_dir=work_dir, wasm=wasm_path, bundle=None,
                         routes=[Route("tools-route", "/mcp", "tools")],
                         upstreams=[Cluster("tools", port=mcp_server.port), Cluster("approvals", port=authz.port)],
                         listeners=listeners, pki=pki, path="/mcp") as s:
            yield s
    finally:
        authz.close()


def sdk_error(call: Any) -> tuple[int | None, MCPError]:
    """Runs a failing call; the HTTP status (None: a 2xx answer) and the SDK's own error."""
    try:
        call()
    except Denied as d:
        assert isinstance(d.__cause__, MCPError), repr(d.__cause__)
        return d.status, d.__cause__
    except MCPError as e:
        return None, e
    raise AssertionError("the call succeeded")


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_what_the_python_sdk_reports_for_each_refusal(stack: Stack, mode: str) -> None:
    with stack.agent(listener="plain", mode=mode) as a:
        assert text_of(a.call_tool("echo", {"text": "ok"})) == "ok"
        # A policy denial: 403, the SDK raises MCPError with the bundle's code and message.
        status, e = sdk_error(lambda: a.call_tool("delete_repo", {"name": "prod"}))
        assert (status, e.error.code, e.error.message) == (403, -32010, "Access denied")
        assert e.error.data is None
        # No rule admits: the same answer.
        status, e = sdk_error(lambda: a.call_tool("get_weather", {"city": "Oslo"}))
        assert (status, e.error.code, e.error.message) == (403, -32010, "Access denied")
        # An authorizer's denial: its status, the same JSON-RPC error (its body not exposed).
        status, e = sdk_error(lambda: a.call_tool("add", {"a": 1, "b": 2}))
        assert (status, e.error.code, e.error.message) == (401, -32010, "Access denied")
        assert a.http_errors[-1].headers["www-authenticate"].startswith('Bearer realm="approvals"')
        # Transport rejections: 413 for a body over limits.maxBodyBytes.
        status, e = sdk_error(lambda: a.call_tool("echo", {"text": "x" * 5000}))
        assert (status, e.error.code) == (413, -32600)
        assert e.error.message == "Request body exceeds the configured limit"
        # The session is still usable.
        assert text_of(a.call_tool("echo", {"text": "still open"})) == "still open"
    # 400 with -32020 when a header disagrees with the body (here: a wrong Mcp-Method on every
    # request, so the very first one fails and the client cannot connect). In 2026-07-28 the
    # SDK sets Mcp-Method itself, replacing the injected one.
    if mode == "auto":
        return
    with pytest.raises(Denied) as denied:
        with stack.agent(listener="plain", mode=mode, headers={"mcp-method": "tools/call"}):
            pass
    assert denied.value.status == 400 and denied.value.code == -32020
    assert isinstance(denied.value.__cause__, MCPError) and denied.value.__cause__.error.code == -32020


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_with_status_200_and_details_the_sdk_shows_them(stack: Stack, mode: str) -> None:
    with stack.agent(listener="exposed", mode=mode) as a:
        status, e = sdk_error(lambda: a.call_tool("delete_repo", {"name": "prod"}))
        assert (status, e.error.code, e.error.message) == (None, -32010, "Access denied")
        assert e.error.data == {"level": "gateway", "reason": "deny_policy", "policy": "mcp/no-delete",
                                "rule": "delete"}
        # An authorizer's denial keeps its own status (401), its body in error.data.
        status, e = sdk_error(lambda: a.call_tool("add", {"a": 1, "b": 2}))
        assert (status, e.error.code) == (401, -32010)
        assert e.error.data["authorizerStatus"] == 401 and e.error.data["authorizerBody"] == AUTHZ_BODY
        assert text_of(a.call_tool("echo", {"text": "ok"})) == "ok"
