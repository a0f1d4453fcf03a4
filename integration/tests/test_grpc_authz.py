"""gRPC authorizers (Envoy's ext_authz protocol called from inside the filter), in real Envoy 1.40
with a real grpcio authorizer, the demo MCP server and the MCP SDK client.

One Envoy, four listeners on the same authorizer: `mcp` and `tls` (the filter; plaintext and
TLS asking for a client certificate) and `native` and `native-tls` (Envoy's own ext_authz gRPC
filter, no mcp-access, likewise), so the CheckRequests both send for the same request can be
compared field by field.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format

from harness import ALPHA, BackgroundHttpServer, Cluster, Denied, HttpResult, McpServerProc, Pki, Route, rpc
from harness import bundles as b
from harness.grpc_authz import GrpcAuthorizer, ResettingServer
from harness.stack import Listen, Stack

_T = "type.googleapis.com/"
TIMEOUT_MS = 1000
BODY_MAX = 8192


class HttpAuthorizer(BackgroundHttpServer):
    """An HTTP authorizer that allows everything, adding `x-http-authz: ok` upstream."""

    def __init__(self) -> None:
        self.checks = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("content-length") or 0))
                outer.checks += 1
                self.send_response(200)
                self.send_header("x-http-authz", "ok")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(Handler)


def bundle(ports: dict[str, int]) -> dict[str, Any]:
    def grpc(name: str, cluster: str, mode: str = "Deny", **extra: Any) -> dict[str, Any]:
        return b.authorizer(name, cluster, TIMEOUT_MS, protocol="GRPC", forwardBodyMaxBytes=BODY_MAX, failureMode=mode,
                            **extra)

    def ext(name: str, authorizer: str, seniority: int, scenario: str, level: str = "Gateway") -> dict[str, Any]:
        target = "gw" if level == "Gateway" else "tools"
        return b.policy(name, level, target, "ExternalAuth", externalAuth=authorizer, seniority=seniority,
                        rules=[b.rule(scenario, b.header("x-scenario", scenario))])

    authorizers = [grpc("grpc", "grpc-authz"), grpc("grpc-open", "grpc-authz", "Allow"),
                   b.authorizer("http", "http-authz", TIMEOUT_MS),
                   grpc("grpc-cert", "grpc-authz", includePeerCertificate=True)]
    policies = [ext("closed", "grpc", 1, "closed"), ext("open", "grpc-open", 2, "open"),
                ext("p1", "grpc", 10, "parallel"), ext("p2", "grpc", 11, "parallel"),
                ext("pb", "grpc", 12, "parallel", level="Backend"),
                ext("m-http", "http", 20, "mixed"), ext("m-grpc", "grpc", 21, "mixed"),
                ext("cert", "grpc-cert", 30, "cert")]
    for target in ("unknown", "reset", "empty"):
        for mode in ("Deny", "Allow"):
            name = f"{target}-{mode.lower()}"
            cluster = "no-such-cluster" if target == "unknown" else f"{target}-authz"
            authorizers.append(grpc(name, cluster, mode))
            policies.append(ext(name, name, 40 + len(policies), name))
    return b.bundle(
        identity=b.identity(),
        gateways=[b.gateway({f"l{p}": p for n, p in ports.items() if n in ("mcp", "tls")})],
        backends=[b.backend("tools", "tools-route")],
        authorizers=authorizers,
        policies=policies,
        # The authorizer's denial body reaches the client in error.data (docs/semantics.md §5.2).
        denyResponse={"exposeDetails": True},
    )


def native_ext_authz() -> dict[str, Any]:
    """Envoy's own ext_authz filter, gRPC, configured as the bundle's `grpc` authorizer."""
    return {"name": "envoy.filters.http.ext_authz", "typed_config": {
        "@type": _T + "envoy.extensions.filters.http.ext_authz.v3.ExtAuthz",
        "grpc_service": {"envoy_grpc": {"cluster_name": "grpc-authz"}, "timeout": f"{TIMEOUT_MS / 1000}s"},
        "transport_api_version": "V3",
        "failure_mode_allow": False,
        "include_peer_certificate": True,
        "with_request_body": {"max_request_bytes": BODY_MAX, "allow_partial_message": True, "pack_as_bytes": True},
        # As KAN's reference configures it: the MCP filter's dynamic metadata goes to the authorizer.
        "metadata_context_namespaces": ["envoy.filters.http.mcp"],
    }}


def native_mcp() -> dict[str, Any]:
    """Envoy's MCP filter, whose dynamic metadata (namespace envoy.filters.http.mcp) ext_authz forwards."""
    return {"name": "envoy.filters.http.mcp", "typed_config": {"@type": _T + "envoy.extensions.filters.http.mcp.v3.Mcp"}}


def post(stack: Stack, scenario: str, authz: str = "allow", listener: str = "mcp", cert: Any = None,
         extra: dict[str, str] | None = None, tool: str = "echo", again: bool = False) -> HttpResult:
    """tools/call `tool`, tagged for stack.decision(). `again` sends the same path as the previous
    request (same authority too, with `host` in `extra`)."""
    stack.servers["tools"].reset()
    stack.servers["grpc"].reset()
    call = rpc("tools/call", {"name": tool, "arguments": {"text": "hi"}}, id=7)
    headers = {"x-scenario": scenario, "x-authz": authz, **(extra or {})}
    return stack.post(call, who=cert, listener=listener, tag=True, again=again, headers=headers)


def upstream_headers(stack: Stack) -> dict[str, str]:
    calls = [r for r in stack.servers["tools"].requests() if r.get("mcp_method") == "tools/call"]
    assert len(calls) == 1, calls
    return calls[0]["headers"]


@pytest.fixture(scope="module")
def stack(work_dir: Path, mcp_server: McpServerProc, wasm_path: Path, pki: Pki) -> Iterator[Stack]:
    authz, http_authz, resetter = GrpcAuthorizer(), HttpAuthorizer(), ResettingServer()
    native = [native_mcp(), native_ext_authz()]
    listeners = {
        "mcp": Listen(),
        "tls": Listen(tls="tls", forward_client_cert=False),
        "native": Listen(filter=False, extra_filters=native),
        "native-tls": Listen(tls="tls", forward_client_cert=False, filter=False, extra_filters=native),
    }
    upstreams = [Cluster("tools", port=mcp_server.port), Cluster("grpc-authz", port=authz.port, http2=True),
                 Cluster("http-authz", port=http_authz.port), Cluster("reset-authz", port=resetter.port, http2=True),
                 Cluster("empty-authz", port=1, http2=True)]

    def no_endpoints(cfg: dict[str, Any]) -> None:
        """A cluster without endpoints: no healthy host, ever."""
        for c in cfg["static_resources"]["clusters"]:
            if c["name"] == "empty-authz":
                c["load_assignment"]["endpoints"] = []

    try:
        with Stack.start("grpc", work_dir=work_dir, wasm=wasm_path, bundle=bundle,
                         routes=[Route("tools-route", "/mcp", "tools")], upstreams=upstreams, listeners=listeners,
                         pki=pki, servers={"tools": mcp_server, "grpc": authz, "http": http_authz}, path="/mcp",
                         edit=no_endpoints) as s:
            yield s
    finally:
        authz.close()
        http_authz.close()
        resetter.close()


# --- allow, deny, header edits ----------------------------------------------------------------


def test_allow_applies_header_edits_upstream_and_exports_metadata(stack: Stack) -> None:
    r = post(stack, "closed", extra={"x-remove-me": "secret", "x-authz-default": "client",
                                    "x-authz-trail": "client", "x-authz-set": "client"})
    assert r.status == 200, r.text
    h = upstream_headers(stack)
    assert h["x-authz-set"] == "mcp/closed"  # OVERWRITE_IF_EXISTS_OR_ADD
    assert h["x-authz-trail"] == "client,mcp/closed"  # APPEND_IF_EXISTS_OR_ADD
    assert h["x-authz-default"] == "client"  # ADD_IF_ABSENT: present, so kept
    assert "x-remove-me" not in h  # headers_to_remove
    d = stack.decision()
    assert (d["decision"], d["level"]) == ("allow", "none") or d["decision"] == "allow", d
    (check,) = stack.servers["grpc"].recorded()
    ext = dict(check.attributes.context_extensions)
    assert ext == {"mcp_method": "tools/call", "mcp_tool": "echo", "mcp_access_level": "gateway",
                   "mcp_access_policy": "mcp/closed"}, ext


def test_deny_relays_status_headers_and_body(stack: Stack) -> None:
    r = post(stack, "closed", authz="deny:401")
    assert r.status == 401, r.text
    assert r.headers["www-authenticate"] == 'Bearer realm="mcp/closed"'
    error = r.json()["error"]
    assert error["code"] == -32010 and r.json()["id"] == 7, r.text
    assert error["data"]["authorizerStatus"] == 401 and "denied by mcp/closed" in error["data"]["authorizerBody"]
    d = stack.decision()
    assert (d["reason"], d["policy"], d["status"]) == ("external_auth_denied", "mcp/closed", 401), d
    assert stack.servers["tools"].tool_calls() == []


def test_the_mcp_sdk_client_sees_allow_and_deny(stack: Stack) -> None:
    with stack.agent(headers={"x-scenario": "closed"}) as agent:
        out = agent.call_tool("echo", {"text": "via grpc"})
        assert "via grpc" in json.dumps(out, default=str)
    with pytest.raises(Denied) as denied:
        with stack.agent(headers={"x-scenario": "closed", "x-authz": "deny:403"}) as agent:
            agent.call_tool("echo", {"text": "no"})
    assert denied.value.status == 403
    assert "denied by mcp/closed" in denied.value.body.decode()


def test_a_denial_body_over_the_cap_is_not_relayed_and_an_unreadable_answer_denies(stack: Stack) -> None:
    # 8 KiB default cap: a 9 KiB body is dropped, the 401 stands.
    r = post(stack, "open", authz="bigdeny:9216")
    assert (r.status, "d" * 100 in r.text) == (401, False), (r.status, len(r.body))
    assert "denial body over maxResponseBodyBytes" in stack.envoy.log_text()
    # Over the cap + 64 KiB the CheckResponse is not read; even failureMode Allow denies.
    r = post(stack, "open", authz="bigdeny:100000")
    assert r.status == 403, r.status
    assert stack.servers["tools"].tool_calls() == []
    assert "not read: denied" in stack.envoy.log_text()


# --- failures under both failure modes ----------------------------------------------------------

FAILURES = {
    "timeout": ("closed", "open", "sleep:2"),
    "unavailable": ("closed", "open", "grpc:UNAVAILABLE"),
    "permission-denied": ("closed", "open", "grpc:PERMISSION_DENIED"),
    "garbage": ("closed", "open", "garbage"),
    "unknown-cluster": ("unknown-deny", "unknown-allow", "allow"),
    "reset": ("reset-deny", "reset-allow", "allow"),
    "no-healthy-host": ("empty-deny", "empty-allow", "allow"),
}


@pytest.mark.parametrize("failure", list(FAILURES))
def test_each_failure_takes_the_failure_mode(stack: Stack, failure: str) -> None:
    closed, open_, ask = FAILURES[failure]
    started = time.monotonic()
    r = post(stack, closed, authz=ask)
    took = time.monotonic() - started
    assert r.status == 403, (failure, r.status, r.text)
    d = stack.decision()
    assert d["reason"] == "authorizer_error", d
    assert stack.servers["tools"].tool_calls() == []
    assert took < TIMEOUT_MS / 1000 + 1.0, f"{failure}: {took:.2f}s: the request waited past the timeout"
    if failure == "timeout":  # the log says the call timed out, not that the authorizer answered
        assert f"timed out: no answer within the authorizer's timeout of {TIMEOUT_MS} ms" in stack.envoy.log_text()
    r = post(stack, open_, authz=ask)
    assert r.status == 200, (failure, r.status, r.text)
    assert stack.servers["tools"].tool_calls() == ["echo"]


# --- ordering: two Gateway authorizers in parallel, then the Backend one ------------------------


def test_gateway_authorizers_run_in_parallel_before_the_backend_one(stack: Stack) -> None:
    started = time.monotonic()
    r = post(stack, "parallel", authz="sleep:0.4")
    took = time.monotonic() - started
    assert r.status == 200, r.text
    checks = stack.servers["grpc"].recorded()
    order = [c.attributes.context_extensions["mcp_access_policy"] for c in checks]
    assert sorted(order[:2]) == ["mcp/p1", "mcp/p2"] and order[2] == "mcp/pb", order
    assert [c.attributes.context_extensions["mcp_access_level"] for c in checks] == ["gateway", "gateway", "backend"]
    # Parallel Gateway calls (0.4 s each) then the Backend call: about 0.8 s, not 1.2 s.
    assert 0.75 < took < 1.15, took
    # Every authorizer's edits reach upstream in seniority order.
    assert upstream_headers(stack)["x-authz-trail"] == "mcp/p1,mcp/p2,mcp/pb"


def test_a_gateway_denial_means_no_backend_call_and_the_senior_denial_is_relayed(stack: Stack) -> None:
    r = post(stack, "parallel", authz="deny:403")
    assert r.status == 403
    assert "denied by mcp/p1" in r.text and r.headers["www-authenticate"] == 'Bearer realm="mcp/p1"'
    order = sorted(c.attributes.context_extensions["mcp_access_policy"] for c in stack.servers["grpc"].recorded())
    assert order == ["mcp/p1", "mcp/p2"], order


def test_http_and_grpc_authorizers_at_one_level(stack: Stack) -> None:
    before = stack.servers["http"].checks
    r = post(stack, "mixed")
    assert r.status == 200, r.text
    h = upstream_headers(stack)
    assert h["x-http-authz"] == "ok" and h["x-authz-set"] == "mcp/m-grpc"
    assert stack.servers["http"].checks == before + 1
    r = post(stack, "mixed", authz="deny:451")
    assert r.status == 451 and "denied by mcp/m-grpc" in r.text


# --- conformance: the same request through Envoy's ext_authz and through the filter -------------

# Fields that differ by construction, documented in docs/semantics.md (gRPC authorizers).
EXPECTED_DIFFERENCES = {
    "attributes.contextExtensions",  # ours: the MCP attributes
    "attributes.metadataContext.filterMetadata.mcp_proxy",  # ours: the MCP filter's metadata again, under KAN's name
    "attributes.request.time",  # two requests, two times
    "attributes.request.http.id",  # Envoy: its stream id; ours: x-request-id
    "attributes.request.http.headers.x-request-id",  # two requests, two ids
    "attributes.source.address.socketAddress.portValue",  # two connections
    "attributes.destination.address.socketAddress.portValue",  # two listeners
}


def flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else k))
        return out if out or not prefix else {prefix: {}}
    return {prefix: d}


def _as_dict(check: Any) -> dict[str, Any]:
    return flatten(json_format.MessageToDict(check))


@pytest.mark.parametrize("tls", [False, True], ids=["plaintext", "mtls"])
def test_check_requests_agree_with_envoys_own_ext_authz(stack: Stack, tls: bool) -> None:
    cert = stack.pki.client(ALPHA) if tls else None
    # The `cert` policy's authorizer sends the certificate, as include_peer_certificate does.
    scenario = "cert" if tls else "closed"
    ours_at, native_at = ("tls", "native-tls") if tls else ("mcp", "native")
    ours_port, native_port = stack.ports[ours_at], stack.ports[native_at]
    host = {"host": "gw.example:8080"}
    r = post(stack, scenario, listener=ours_at, cert=cert, extra=host)
    assert r.status == 200, r.text
    (ours,) = stack.servers["grpc"].recorded()
    r = post(stack, scenario, listener=native_at, cert=cert, extra=host, again=True)
    assert r.status == 200, r.text
    (native,) = stack.servers["grpc"].recorded()
    a, b = _as_dict(ours), _as_dict(native)
    assert b.get("attributes.source.address.socketAddress.address") == "127.0.0.1"
    keys = set(a) | set(b)
    diffs = {k: (a.get(k), b.get(k)) for k in keys if a.get(k) != b.get(k)}
    unexpected = {k: v for k, v in diffs.items()
                  if not any(k == e or k.startswith(e + ".") for e in EXPECTED_DIFFERENCES)}
    assert unexpected == {}, json.dumps(unexpected, indent=1, default=str)
    # The differences are the documented ones, and they hold what they should.
    assert int(native.attributes.request.http.id) >= 0
    assert ours.attributes.request.http.id == ours.attributes.request.http.headers["x-request-id"]
    assert ours.attributes.destination.address.socket_address.port_value == ours_port
    assert native.attributes.destination.address.socket_address.port_value == native_port
    for c in (ours, native):
        assert abs(c.attributes.request.time.ToNanoseconds() / 1e9 - time.time()) < 10
    if tls:
        src = ours.attributes.source
        assert src.principal == ALPHA
        assert src.certificate.startswith("-----BEGIN%20CERTIFICATE-----"), src.certificate[:40]
        assert ours.attributes.destination.principal
        assert ours.attributes.request.http.scheme == "https"
    # The field-by-field comparison can fail: a changed field is caught.
    assert {k for k in keys if a.get(k) != b.get(k)} >= {"attributes.contextExtensions.mcp_method"}
