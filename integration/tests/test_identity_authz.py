"""Who the caller is, and what an authorizer's answer may cost, in real Envoy 1.40.

One Envoy: a TLS listener that asks for (but does not require) a client certificate, jwt_authn,
the filter, the demo MCP server, and a test authorizer that answers as each request tells it
(status, body size, header count), so hostile authorizer answers can be sent on purpose.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from harness import ALPHA, BETA, BackgroundHttpServer, Cluster, HttpResult, JwtKeys, McpServerProc, Pki, Route, rpc
from harness import bundles as b
from harness.stack import Listen, Stack, logged_decisions

KIB = 1024


class Authorizer(BackgroundHttpServer):
    """An HTTP authorizer answering each check as its headers ask: `x-status` (default 403),
    `x-body-bytes` (body of that many bytes), `x-header-count` (that many extra headers)."""

    def __init__(self) -> None:
        self.checks = 0
        lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("content-length") or 0))
                with lock:
                    outer.checks += 1
                body = b"d" * int(self.headers.get("x-body-bytes") or 0)
                self.send_response(int(self.headers.get("x-status") or 403))
                self.send_header("www-authenticate", 'Bearer realm="test"')
                self.send_header("content-type", "text/plain")
                for i in range(int(self.headers.get("x-header-count") or 0)):
                    self.send_header(f"x-extra-{i}", "v" * 64)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(Handler)


def bundle(ports: dict[str, int], issuer: str) -> dict[str, Any]:
    def ext(name: str, authorizer: str, seniority: int) -> dict[str, Any]:
        return b.policy(name, "Gateway", "gw", "ExternalAuth", externalAuth=authorizer, seniority=seniority,
                        rules=[b.rule(name, b.header("x-scenario", name))])

    echo = b.calls("echo")
    asks = ["x-status", "x-body-bytes", "x-header-count"]
    return b.bundle(
        identity=b.identity(jwt_issuers=[issuer]),
        gateways=[b.gateway(ports)],
        backends=[b.backend("tools", "tools-route")],
        authorizers=[
            b.authorizer("default-cap", "authz", 5000, allowedHeaders=asks),
            b.authorizer("cap-16", "authz", 5000, allowedHeaders=asks, maxResponseBodyBytes=16),
        ],
        policies=[
            ext("default-cap", "default-cap", 1),
            ext("cap-16", "cap-16", 2),
            b.policy("allow", "Gateway", "gw", "Allow", seniority=3, rules=[
                b.rule("alpha", echo, source=b.spiffe(ALPHA)),
                b.rule("u1", echo, source=b.jwt(issuer, subject="u1")),
            ]),
        ],
        # The authorizer's body reaches the client only as error.data, with details exposed.
        denyResponse={"exposeDetails": True},
    )


def post(stack: Stack, cert: Any = None, headers: dict[str, str] | None = None, token: str | None = None) -> HttpResult:
    """tools/call echo, tagged for stack.decision()."""
    stack.servers["tools"].reset()
    call = rpc("tools/call", {"name": "echo", "arguments": {"text": "hi"}}, id=9)
    return stack.post(call, who=cert, tag=True, headers=headers, token=token)


@pytest.fixture(scope="module")
def stack(work_dir: Path, mcp_server: McpServerProc, wasm_path: Path, jwt_keys: JwtKeys, pki: Pki) -> Iterator[Stack]:
    authz = Authorizer()
    try:
        with Stack.start("identity", work_dir=work_dir, wasm=wasm_path, bundle=lambda ports: bundle(ports, jwt_keys.issuer),
                         routes=[Route("tools-route", "/tools/mcp", "tools", prefix_rewrite="/mcp")],
                         upstreams=[Cluster("tools", port=mcp_server.port), Cluster("authz", port=authz.port)],
                         listeners={"https": Listen(tls="tls")}, pki=pki, jwt=jwt_keys,
                         servers={"tools": mcp_server}) as s:
            yield s
    finally:
        authz.close()


# --- identity -------------------------------------------------------------------------------


def test_a_certificate_with_two_uri_sans_has_no_identity(stack: Stack) -> None:
    single = post(stack, stack.pki.client(ALPHA))
    assert single.status == 200, single.text
    assert stack.decision()["caller"] == ALPHA
    # Envoy's uri_san_peer_certificate names ALPHA (the first) for both; the second SAN must count.
    for sans in ([ALPHA, BETA], [BETA, ALPHA]):
        r = post(stack, stack.pki.client(sans))
        assert r.status == 403, (sans, r.text)
        d = stack.decision()
        assert (d["caller"], d["reason"]) == (None, "not_allowed"), d
        assert stack.servers["tools"].tool_calls() == []
    # Other kinds of SAN do not count: one URI SAN next to a DNS name is still an X.509-SVID.
    r = post(stack, stack.pki.client(ALPHA, name="alpha-with-dns", dns_names=["alpha.example.org"]))
    assert r.status == 200 and stack.decision()["caller"] == ALPHA


def test_a_jwt_caller_is_named_in_the_decision(stack: Stack) -> None:
    token = stack.jwt.mint({}, sub="u1")
    # No client certificate: the verified JWT is the only identity.
    r = post(stack, token=token)
    assert r.status == 200, r.text
    d = stack.decision()
    assert (d["caller"], d["jwt"]) == (f"jwt:{stack.jwt.issuer}#u1", f"{stack.jwt.issuer}#u1"), d
    # With a certificate too, the caller is the SPIFFE ID and the token is still named.
    r = post(stack, stack.pki.client(BETA), token=token)
    assert r.status == 200, r.text
    d = stack.decision()
    assert (d["caller"], d["jwt"]) == (BETA, f"{stack.jwt.issuer}#u1"), d
    # Denied as well as allowed decisions name it; the decision log line carries the same JSON.
    r = post(stack, token=stack.jwt.mint({}, sub="u2"))
    assert r.status == 403
    d = stack.decision()
    assert (d["caller"], d["decision"]) == (f"jwt:{stack.jwt.issuer}#u2", "deny"), d
    _, logged = logged_decisions(stack.envoy)[-1]
    assert logged["caller"] == f"jwt:{stack.jwt.issuer}#u2", logged


# --- authorizer answers ---------------------------------------------------------------------


def ask(scenario: str, **answer: int) -> dict[str, str]:
    return {"x-scenario": scenario, **{f"x-{k.replace('_', '-')}": str(v) for k, v in answer.items()}}


@pytest.mark.parametrize("scenario,cap", [("default-cap", 8 * KIB), ("cap-16", 16)])
def test_a_denial_body_is_relayed_up_to_the_cap(stack: Stack, scenario: str, cap: int) -> None:
    alpha = stack.pki.client(ALPHA)
    r = post(stack, alpha, headers=ask(scenario, body_bytes=cap))
    # A JSON-RPC error echoing the id, the authorizer's status, its body in error.data.
    assert r.status == 403 and r.headers["content-type"] == "application/json"
    error = r.json()["error"]
    assert r.json()["id"] == 9 and error["code"] == -32010 and error["message"] == "Access denied"
    assert error["data"]["authorizerBody"] == "d" * cap and error["data"]["authorizerStatus"] == 403
    # One byte over, or 8 MiB over: the denial stands, with the authorizer's status and its
    # headers, but its body is not relayed.
    for size in (cap + 1, 8 * KIB * KIB):
        r = post(stack, alpha, headers=ask(scenario, body_bytes=size, status=401))
        assert r.status == 401, (size, r.status, len(r.body))
        assert "authorizerBody" not in r.json()["error"]["data"]
        assert r.headers["www-authenticate"] == 'Bearer realm="test"'
        assert r.headers["content-type"] == "application/json"
        d = stack.decision()
        assert (d["reason"], d["policy"], d["status"]) == ("external_auth_denied", f"mcp/{scenario}", 401), d
        assert stack.servers["tools"].tool_calls() == []
    assert f"authorizer {scenario}: denial body over maxResponseBodyBytes ({cap}), not relayed" in stack.envoy.log_text()


def test_an_allow_body_is_never_read(stack: Stack) -> None:
    r = post(stack, stack.pki.client(ALPHA), headers=ask("cap-16", status=200, body_bytes=8 * KIB * KIB))
    assert r.status == 200 and stack.servers["tools"].tool_calls() == ["echo"]


def test_errors_are_counted_as_the_decision_sees_them(stack: Stack) -> None:
    alpha = stack.pki.client(ALPHA)
    before = stack.counter("callout.errors")
    # Denials are answers, not errors.
    assert post(stack, alpha, headers=ask("default-cap", status=403)).status == 403
    assert post(stack, alpha, headers=ask("default-cap", status=499)).status == 499
    assert stack.counter("callout.errors") == before
    # A 5xx and an answer with too many headers (Envoy refuses it): errors,
    # and the failure mode (Deny) applies.
    for headers in (ask("default-cap", status=500), ask("default-cap", status=200, header_count=150)):
        r = post(stack, alpha, headers=headers)
        assert r.status == 403, r.text
        assert stack.decision()["reason"] == "authorizer_error"
    assert stack.counter("callout.errors") == before + 2
