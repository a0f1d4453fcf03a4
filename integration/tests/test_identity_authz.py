"""Who the caller is, and what an authorizer's answer may cost, in real Envoy 1.40.

One Envoy: a TLS listener that asks for (but does not require) a client certificate, jwt_authn,
the filter, the demo MCP server, and a test authorizer that answers as each request tells it
(status, body size, header count), so hostile authorizer answers can be sent on purpose.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from harness import (
    ALPHA,
    BETA,
    BackgroundHttpServer,
    Cluster,
    EnvoyProcess,
    JwtKeys,
    JwtProvider,
    Listener,
    McpServerProc,
    Pki,
    Route,
    Tls,
    Wasm,
    build_bootstrap,
    free_port,
    post_jsonrpc,
    rpc,
)

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


def bundle(port: int, issuer: str) -> dict[str, Any]:
    def scenario(value: str) -> list[dict[str, Any]]:
        return [{"name": value, "authorization": {"headers": [{"name": "x-scenario", "value": value}]}}]

    def ext(name: str, authorizer: str, seniority: int) -> dict[str, Any]:
        return {"name": name, "namespace": "mcp", "level": "Gateway", "targets": [{"name": "gw"}],
                "action": "ExternalAuth", "externalAuth": authorizer, "seniority": seniority,
                "rules": scenario(name)}

    echo = {"mcp": {"methods": [{"name": "tools/call", "params": ["echo"]}]}}
    asks = ["x-status", "x-body-bytes", "x-header-count"]
    return {
        "apiVersion": "mcp-access.io/v1",
        "identity": {"trustDomain": "example.org",
                     "jwt": {"providers": [{"issuer": issuer, "metadataKey": "jwt_payload"}]}},
        "gateways": [{"name": "gw", "namespace": "mcp", "listeners": [{"name": "https", "port": port}]}],
        "backends": [{"name": "tools", "namespace": "mcp", "routeNames": ["tools-route"]}],
        "authorizers": [
            {"name": "default-cap", "cluster": "authz", "timeoutMs": 5000, "allowedHeaders": asks},
            {"name": "cap-16", "cluster": "authz", "timeoutMs": 5000, "allowedHeaders": asks,
             "maxResponseBodyBytes": 16},
        ],
        "policies": [
            ext("default-cap", "default-cap", 1),
            ext("cap-16", "cap-16", 2),
            {"name": "allow", "namespace": "mcp", "level": "Gateway", "targets": [{"name": "gw"}],
             "action": "Allow", "seniority": 3, "rules": [
                 {"name": "alpha", "source": {"type": "SPIFFE", "spiffe": ALPHA}, "authorization": echo},
                 {"name": "u1", "source": {"type": "JWT", "jwt": {"issuer": issuer, "subject": "u1"}},
                  "authorization": echo},
             ]},
        ],
        # The authorizer's body reaches the client only as error.data, with details exposed.
        "denyResponse": {"exposeDetails": True},
    }


@dataclass
class Stack:
    envoy: EnvoyProcess
    port: int
    tools: McpServerProc
    authz: Authorizer
    pki: Pki
    jwt: JwtKeys
    sent: int = 0

    def post(self, cert: Any = None, headers: dict[str, str] | None = None, token: str | None = None):
        """tools/call echo; the query names the request, so decision() finds its access-log entry."""
        self.tools.reset()
        self.sent += 1
        call = rpc("tools/call", {"name": "echo", "arguments": {"text": "hi"}}, id=9)
        return post_jsonrpc(f"https://127.0.0.1:{self.port}/tools/mcp?req={self.sent}", call, headers=headers,
                            cert=cert, ca=self.pki.ca, token=token)

    def decision(self) -> dict[str, Any]:
        """The filter-state decision of the request sent by the last post()."""
        deadline = time.monotonic() + 5
        while True:
            mine = [e for e in self.envoy.access_log_entries() if e["path"].endswith(f"?req={self.sent}")]
            if mine or time.monotonic() > deadline:
                assert len(mine) == 1, mine
                return json.loads(mine[0]["filter_state"])
            time.sleep(0.05)

    def callout_errors(self) -> int:
        return int(self.envoy.stats("mcp_access").get("wasmcustom.mcp_access.callout.errors", 0))


@pytest.fixture(scope="module")
def stack(work_dir: Path, mcp_server: McpServerProc, wasm_path: Path, jwt_keys: JwtKeys, pki: Pki) -> Iterator[Stack]:
    authz = Authorizer()
    port = free_port()
    listener = Listener(
        "https", port, [Route("tools-route", "/tools/mcp", "tools", prefix_rewrite="/mcp")],
        tls=Tls(pki.server, pki.ca, require_client_certificate=False),
        jwt=[JwtProvider(jwt_keys.issuer, jwt_keys.jwks_json, audiences=[jwt_keys.audience])],
        wasm=Wasm(wasm_path, configuration=json.dumps(bundle(port, jwt_keys.issuer))),
    )
    cfg = build_bootstrap(admin_port=free_port(), listeners=[listener],
                          clusters=[Cluster("tools", port=mcp_server.port), Cluster("authz", port=authz.port)],
                          access_log_path=work_dir / f"access-identity-{port}.log")
    try:
        with EnvoyProcess(cfg, workdir=work_dir / "envoy-identity", name="envoy-identity") as env:
            yield Stack(env, port, mcp_server, authz, pki, jwt_keys)
    finally:
        authz.close()


# --- identity -------------------------------------------------------------------------------


def test_a_certificate_with_two_uri_sans_has_no_identity(stack: Stack) -> None:
    single = stack.post(stack.pki.client(ALPHA))
    assert single.status == 200, single.text
    assert stack.decision()["caller"] == ALPHA
    # Envoy's uri_san_peer_certificate names ALPHA (the first) for both; the second SAN must count.
    for sans in ([ALPHA, BETA], [BETA, ALPHA]):
        r = stack.post(stack.pki.client(sans))
        assert r.status == 403, (sans, r.text)
        d = stack.decision()
        assert (d["caller"], d["reason"]) == (None, "not_allowed"), d
        assert stack.tools.tool_calls() == []
    # Other kinds of SAN do not count: one URI SAN next to a DNS name is still an X.509-SVID.
    r = stack.post(stack.pki.client(ALPHA, name="alpha-with-dns", dns_names=["alpha.example.org"]))
    assert r.status == 200 and stack.decision()["caller"] == ALPHA


def test_a_jwt_caller_is_named_in_the_decision(stack: Stack) -> None:
    token = stack.jwt.mint({}, sub="u1")
    # No client certificate: the verified JWT is the only identity.
    r = stack.post(token=token)
    assert r.status == 200, r.text
    d = stack.decision()
    assert (d["caller"], d["jwt"]) == (f"jwt:{stack.jwt.issuer}#u1", f"{stack.jwt.issuer}#u1"), d
    # With a certificate too, the caller is the SPIFFE ID and the token is still named.
    r = stack.post(stack.pki.client(BETA), token=token)
    assert r.status == 200, r.text
    d = stack.decision()
    assert (d["caller"], d["jwt"]) == (BETA, f"{stack.jwt.issuer}#u1"), d
    # Denied as well as allowed decisions name it; the decision log line carries the same JSON.
    r = stack.post(token=stack.jwt.mint({}, sub="u2"))
    assert r.status == 403
    d = stack.decision()
    assert (d["caller"], d["decision"]) == (f"jwt:{stack.jwt.issuer}#u2", "deny"), d
    line = [l for l in stack.envoy.log_text().splitlines() if "mcp-access decision" in l][-1]
    assert f'"caller":"jwt:{stack.jwt.issuer}#u2"' in line


# --- authorizer answers ---------------------------------------------------------------------


def ask(scenario: str, **answer: int) -> dict[str, str]:
    return {"x-scenario": scenario, **{f"x-{k.replace('_', '-')}": str(v) for k, v in answer.items()}}


@pytest.mark.parametrize("scenario,cap", [("default-cap", 8 * KIB), ("cap-16", 16)])
def test_a_denial_body_is_relayed_up_to_the_cap(stack: Stack, scenario: str, cap: int) -> None:
    alpha = stack.pki.client(ALPHA)
    r = stack.post(alpha, headers=ask(scenario, body_bytes=cap))
    # A JSON-RPC error echoing the id, the authorizer's status, its body in error.data.
    assert r.status == 403 and r.headers["content-type"] == "application/json"
    error = r.json()["error"]
    assert r.json()["id"] == 9 and error["code"] == -32010 and error["message"] == "Access denied"
    assert error["data"]["authorizerBody"] == "d" * cap and error["data"]["authorizerStatus"] == 403
    # One byte over, or 8 MiB over: the denial stands, with the authorizer's status and its
    # headers, but its body is not relayed.
    for size in (cap + 1, 8 * KIB * KIB):
        r = stack.post(alpha, headers=ask(scenario, body_bytes=size, status=401))
        assert r.status == 401, (size, r.status, len(r.body))
        assert "authorizerBody" not in r.json()["error"]["data"]
        assert r.headers["www-authenticate"] == 'Bearer realm="test"'
        assert r.headers["content-type"] == "application/json"
        d = stack.decision()
        assert (d["reason"], d["policy"], d["status"]) == ("external_auth_denied", f"mcp/{scenario}", 401), d
        assert stack.tools.tool_calls() == []
    assert f"authorizer {scenario}: denial body over maxResponseBodyBytes ({cap}), not relayed" in stack.envoy.log_text()


def test_an_allow_body_is_never_read(stack: Stack) -> None:
    r = stack.post(stack.pki.client(ALPHA), headers=ask("cap-16", status=200, body_bytes=8 * KIB * KIB))
    assert r.status == 200 and stack.tools.tool_calls() == ["echo"]


def test_errors_are_counted_as_the_decision_sees_them(stack: Stack) -> None:
    alpha = stack.pki.client(ALPHA)
    before = stack.callout_errors()
    # Denials are answers, not errors.
    assert stack.post(alpha, headers=ask("default-cap", status=403)).status == 403
    assert stack.post(alpha, headers=ask("default-cap", status=499)).status == 499
    assert stack.callout_errors() == before
    # A 5xx and an answer with too many headers (Envoy refuses it): errors,
    # and the failure mode (Deny) applies.
    for headers in (ask("default-cap", status=500), ask("default-cap", status=200, header_count=150)):
        r = stack.post(alpha, headers=headers)
        assert r.status == 403, r.text
        assert stack.decision()["reason"] == "authorizer_error"
    assert stack.callout_errors() == before + 2
