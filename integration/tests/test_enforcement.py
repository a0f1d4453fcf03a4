"""The filter deciding live MCP traffic inside real Envoy 1.40.

One Envoy per bundle variant: an mTLS listener with jwt_authn and the filter, two MCP backends
behind routes that rewrite the path, and recording HTTP authorizers. The seed tables run row by
row (one tool per row), plus identity, routing, hostile input, failure and observability checks.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness import (
    ALPHA,
    BETA,
    AuthorizerProc,
    Cluster,
    Denied,
    EnvoyProcess,
    JwtKeys,
    JwtProvider,
    Listener,
    McpAgent,
    McpServerProc,
    Pki,
    Route,
    Tls,
    TransportFailure,
    Wasm,
    build_bootstrap,
    delete,
    free_port,
    get,
    post_jsonrpc,
    rpc,
    start_authorizer,
    start_mcp_server,
    text_of,
)

GAMMA = "spiffe://example.org/ns/agents/sa/gamma"
ROW_TOOLS = ["r1", "r2", "r3", "r4", "r5", "r6"]
GW_DELAY_MS = 150


def tools_call(tool: str, id: int | str = 1) -> dict[str, Any]:
    return rpc("tools/call", {"name": tool, "arguments": {}}, id=id)


def mcp_methods(tools: list[str]) -> dict[str, Any]:
    return {"mcp": {"methods": [{"name": "tools/call", "params": tools}], "baseProtocol": "Match"}}


def select_tool_calls() -> list[dict[str, Any]]:
    return [{"name": "tool-calls", "authorization": {"mcp": {"methods": [{"name": "tools/call"}]}}}]


def scenario_header(value: str) -> list[dict[str, Any]]:
    return [{"name": value, "authorization": {"headers": [{"name": "x-scenario", "value": value}]}}]


def bundle(port: int, issuer: str, with_deny: bool) -> dict[str, Any]:
    """Gateway gw (listener https), backends tools and weather; each seed-table row is one tool:
    r1 gateway authorizer denies, r2 gateway Deny policy, r3 no gateway rule admits, r4 backend
    authorizer denies, r5 backend Deny policy, r6 no backend rule admits; echo passes everything."""
    gw_tools = ["echo", "add", "get_weather", "delete_repo", "r1", "r2", "r4", "r5", "r6"]
    be_tools = ["echo", "add", "get_weather", "r1", "r2", "r3", "r4", "r5"]

    def policy(name: str, level: str, target: str, action: str, seniority: int, **kw: Any) -> dict[str, Any]:
        return {"name": name, "namespace": "mcp", "level": level, "targets": [{"name": target}],
                "action": action, "seniority": seniority, **kw}

    def authorizer(name: str, cluster: str, **kw: Any) -> dict[str, Any]:
        return {"name": name, "cluster": cluster, "timeoutMs": 2000, **kw}

    policies = [
        policy("gw-ext-1", "Gateway", "gw", "ExternalAuth", 1, externalAuth="gw-authz-1", rules=select_tool_calls()),
        policy("gw-ext-2", "Gateway", "gw", "ExternalAuth", 2, externalAuth="gw-authz-2", rules=select_tool_calls()),
        policy("gw-fail-unknown", "Gateway", "gw", "ExternalAuth", 3, externalAuth="unknown-cluster",
               rules=scenario_header("unknown-cluster")),
        policy("gw-fail-dead", "Gateway", "gw", "ExternalAuth", 4, externalAuth="dead", rules=scenario_header("dead")),
        policy("gw-fail-timeout-closed", "Gateway", "gw", "ExternalAuth", 5, externalAuth="slow-closed",
               rules=scenario_header("timeout-closed")),
        policy("gw-fail-timeout-open", "Gateway", "gw", "ExternalAuth", 6, externalAuth="slow-open",
               rules=scenario_header("timeout-open")),
        policy("gw-allow", "Gateway", "gw", "Allow", 7, rules=[
            {"name": "alpha", "source": {"type": "ServiceAccount", "serviceAccount": {"namespace": "agents", "name": "alpha"}},
             "authorization": mcp_methods(gw_tools)},
            {"name": "beta-weather", "source": {"type": "SPIFFE", "spiffe": BETA},
             "authorization": mcp_methods(["get_weather"])},
            {"name": "ops-by-jwt", "source": {"type": "JWT", "jwt": {"issuer": issuer, "claims": [{"name": "groups", "values": ["ops"]}]}},
             "authorization": mcp_methods(["echo"])},
        ]),
        policy("be-ext", "Backend", "tools", "ExternalAuth", 8, externalAuth="be-authz", rules=select_tool_calls()),
        policy("be-allow", "Backend", "tools", "Allow", 9,
               rules=[{"name": "tools", "authorization": mcp_methods(be_tools)}]),
        policy("weather-allow", "Backend", "weather", "Allow", 10,
               rules=[{"name": "weather", "authorization": mcp_methods(["get_weather"])}]),
    ]
    if with_deny:
        policies.append(policy("gw-deny", "Gateway", "gw", "Deny", 11,
                               rules=[{"name": "r2", "authorization": {"mcp": {"methods": [{"name": "tools/call", "params": ["r2"]}]}}}]))
        policies.append(policy("be-deny", "Backend", "tools", "Deny", 12,
                               rules=[{"name": "r5", "authorization": {"mcp": {"methods": [{"name": "tools/call", "params": ["r5"]}]}}}]))
    return {
        "apiVersion": "mcp-access.io/v1",
        "identity": {"trustDomain": "example.org",
                     "jwt": {"providers": [{"issuer": issuer, "metadataKey": "jwt_payload"}]}},
        "gateways": [{"name": "gw", "namespace": "mcp", "listeners": [{"name": "https", "port": port}]}],
        "backends": [
            {"name": "tools", "namespace": "mcp", "routeNames": ["tools-route"]},
            {"name": "weather", "namespace": "mcp", "routeNames": ["weather-route"]},
        ],
        "authorizers": [
            authorizer("gw-authz-1", "gw-authz-1", allowedHeaders=["x-scenario"], allowedResponseHeaders=["x-authz-ok"],
                       forwardBodyMaxBytes=4096),
            authorizer("gw-authz-2", "gw-authz-2"),
            authorizer("be-authz", "be-authz"),
            authorizer("unknown-cluster", "no-such-cluster"),
            authorizer("dead", "dead-authz"),
            authorizer("slow-closed", "slow-authz", timeoutMs=300),
            authorizer("slow-open", "slow-authz", timeoutMs=300, failureMode="Allow"),
        ],
        "policies": policies,
        "limits": {"maxBodyBytes": 1048576},
    }


@dataclass
class Stack:
    envoy: EnvoyProcess
    port: int
    tools: McpServerProc
    weather: McpServerProc
    authz: dict[str, AuthorizerProc]
    pki: Pki
    jwt: JwtKeys

    def url(self, backend: str = "tools") -> str:
        return f"https://127.0.0.1:{self.port}/{backend}/mcp"

    def post(self, body: Any, *, who: str = ALPHA, backend: str = "tools", **kw: Any):
        self.mark()
        return post_jsonrpc(self.url(backend), body, cert=self.pki.client(who), ca=self.pki.ca, **kw)

    def mark(self) -> None:
        """Remember how many access-log entries exist (once Envoy has flushed the entries of
        requests already answered), so decisions() returns only newer ones."""
        count, stable_since = -1, time.monotonic()
        while time.monotonic() - stable_since < 0.15:
            now = len(self.envoy.access_log_entries())
            if now != count:
                count, stable_since = now, time.monotonic()
            time.sleep(0.03)
        self.logged = count

    def reset(self) -> None:
        self.tools.reset()
        self.weather.reset()
        for a in self.authz.values():
            a.reset()
        self.mark()


@pytest.fixture(scope="module")
def servers(work_dir: Path, mcp_server: McpServerProc) -> Iterator[dict[str, Any]]:
    logs = work_dir / "logs"
    with start_mcp_server(logs, name="weather") as weather, \
            start_authorizer(logs, name="gw-authz-1", deny_tools=["r1"], delay_ms=GW_DELAY_MS,
                             add_headers=["x-authz-ok:gw1", "x-not-allowed:leak"]) as gw1, \
            start_authorizer(logs, name="gw-authz-2", delay_ms=GW_DELAY_MS) as gw2, \
            start_authorizer(logs, name="be-authz", deny_tools=["r4"], deny_status=401) as be, \
            start_authorizer(logs, name="slow-authz", delay_ms=1500) as slow:
        yield {"tools": mcp_server, "weather": weather,
               "authz": {"gw-authz-1": gw1, "gw-authz-2": gw2, "be-authz": be, "slow-authz": slow}}


def envoy_config(work_dir: Path, servers: dict[str, Any], wasm_path: Path, jwt_keys: JwtKeys, pki: Pki,
                 bundle_json: str, port: int, name: str) -> dict[str, Any]:
    routes = [
        Route("tools-route", "/tools/mcp", "tools", prefix_rewrite="/mcp"),
        Route("weather-route", "/weather/mcp", "weather", prefix_rewrite="/mcp"),
        Route("unlisted-route", "/unlisted", "tools", prefix_rewrite="/mcp"),
    ]
    clusters = [Cluster("tools", port=servers["tools"].port), Cluster("weather", port=servers["weather"].port),
                Cluster("dead-authz", port=free_port())]
    clusters += [Cluster(n, port=a.port) for n, a in servers["authz"].items()]
    listener = Listener(
        "https", port, routes, tls=Tls(pki.server, pki.ca),
        jwt=[JwtProvider(jwt_keys.issuer, jwt_keys.jwks_json, audiences=[jwt_keys.audience])],
        wasm=Wasm(wasm_path, configuration=bundle_json),
    )
    cfg = build_bootstrap(admin_port=free_port(), listeners=[listener], clusters=clusters,
                          access_log_path=work_dir / f"access-{name}-{port}.log")
    # Envoy's own buffer limit above the filter's, so the filter answers oversize bodies.
    cfg["static_resources"]["listeners"][0]["per_connection_buffer_limit_bytes"] = 4 * 1024 * 1024
    return cfg


@pytest.fixture(scope="module", params=[True, False], ids=["with-deny", "without-deny"])
def stack(request: pytest.FixtureRequest, work_dir: Path, servers: dict[str, Any], wasm_path: Path,
          jwt_keys: JwtKeys, pki: Pki) -> Iterator[Stack]:
    with_deny = request.param
    port = free_port()
    name = "deny" if with_deny else "nodeny"
    b = json.dumps(bundle(port, jwt_keys.issuer, with_deny))
    cfg = envoy_config(work_dir, servers, wasm_path, jwt_keys, pki, b, port, name)
    with EnvoyProcess(cfg, workdir=work_dir / f"envoy-{name}", name=f"envoy-{name}") as env:
        s = Stack(env, port, servers["tools"], servers["weather"], servers["authz"], pki, jwt_keys)
        s.with_deny = with_deny  # type: ignore[attr-defined]
        yield s


def decisions(stack: Stack, count: int = 1) -> list[dict[str, Any]]:
    """Filter-state decisions of the access-log entries written since the last mark()."""
    deadline = time.monotonic() + 5
    while True:
        entries = stack.envoy.access_log_entries()[stack.logged:]
        found = [json.loads(e["filter_state"]) for e in entries if e.get("filter_state") not in (None, "-")]
        if len(found) >= count:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"fewer than {count} new decisions in the access log: {entries}")
        time.sleep(0.05)


def decision_of(stack: Stack) -> dict[str, Any]:
    """The decision of the one request sent since the last mark()."""
    found = decisions(stack)
    assert len(found) == 1, found
    return found[0]


def called(stack: Stack, name: str) -> list[dict[str, Any]]:
    return stack.authz[name].calls()


# --- seed 000 summary tables, row by row, end to end -------------------------------------

ROWS_WITH_DENY = [
    ("r1", 403, "gateway", "external_auth_denied", False),
    ("r2", 403, "gateway", "deny_policy", False),
    ("r3", 403, "gateway", "not_allowed", False),
    ("r4", 401, "backend", "external_auth_denied", True),
    ("r5", 403, "backend", "deny_policy", True),
    ("r6", 403, "backend", "not_allowed", True),
    ("echo", 200, "none", "allowed", True),
]


@pytest.mark.parametrize("tool,status,level,reason,backend_authz_called", ROWS_WITH_DENY,
                         ids=[r[0] for r in ROWS_WITH_DENY])
def test_seed_table_row(stack: Stack, tool: str, status: int, level: str, reason: str,
                        backend_authz_called: bool) -> None:
    if not stack.with_deny and tool in ("r2", "r5"):  # type: ignore[attr-defined]
        pytest.skip("DENY rows exist only in the table with DENY policies")
    stack.reset()
    r = stack.post(tools_call(tool, id=f"row-{tool}"))
    assert r.status == status, r.text
    d = decision_of(stack)
    assert (d["level"], d["reason"]) == (level, reason), d
    # Gateway authorizers were asked every time; the backend one only when the gateway passed.
    assert len(called(stack, "gw-authz-1")) == 1 and len(called(stack, "gw-authz-2")) == 1
    assert len(called(stack, "be-authz")) == (1 if backend_authz_called else 0)
    if status == 200:
        assert stack.tools.tool_calls() == [tool]
        assert (d["policy"], d["rule"]) == ("mcp/be-allow", "tools"), "the admitting rule is reported"
        return
    assert stack.tools.requests() == [], "a denied request never reaches the upstream"
    if reason == "external_auth_denied":
        # The authorizer's own status and headers are relayed, with a JSON-RPC error (its
        # body only with exposeDetails).
        denier = "gw-authz-1" if level == "gateway" else "be-authz"
        assert r.headers.get("www-authenticate") == f'Bearer realm="{denier}"'
        assert r.json()["id"] == f"row-{tool}"
        assert r.json()["error"] == {"code": -32010, "message": "Access denied"}
    else:
        assert r.json()["id"] == f"row-{tool}"
        assert r.json()["error"]["code"] == -32010


def test_gateway_authorizers_run_in_parallel_and_before_the_backend(stack: Stack) -> None:
    stack.reset()
    assert stack.post(tools_call("echo")).status == 200
    gw = [called(stack, n)[0]["ts_ns"] for n in ("gw-authz-1", "gw-authz-2")]
    be = called(stack, "be-authz")[0]["ts_ns"]
    delay_ns = GW_DELAY_MS * 1_000_000
    assert abs(gw[0] - gw[1]) < delay_ns, "both gateway authorizers were asked at once"
    assert be >= max(gw) + int(delay_ns * 0.9), "the backend authorizer only after both gateway answers"
    # What the authorizer saw: method, prefixed path, MCP context, forwarded body.
    c = called(stack, "gw-authz-1")[0]
    h = {k.lower(): v for k, v in c["headers"].items()}
    assert c["path"] == "/tools/mcp"
    assert h["x-mcp-method"] == "tools/call" and h["x-mcp-tool"] == "echo"
    assert h["x-mcp-source-spiffe"] == ALPHA and h["x-mcp-access-level"] == "gateway"
    assert json.loads(c["body"])["params"]["name"] == "echo"
    assert called(stack, "gw-authz-2")[0]["body"] == "", "no body unless forwardBodyMaxBytes"
    # Only the allowed response header reached the upstream.
    upstream = {k.lower(): v for k, v in stack.tools.requests()[-1]["headers"].items()}
    assert upstream.get("x-authz-ok") == "gw1"
    assert "x-not-allowed" not in upstream


def test_backend_is_envoys_routing_decision(stack: Stack) -> None:
    """Both routes rewrite to /mcp; the backend policy applied follows the route Envoy chose."""
    stack.reset()
    assert stack.post(tools_call("echo"), backend="tools").status == 200
    r = stack.post(tools_call("echo"), backend="weather")
    d = decision_of(stack)
    assert r.status == 403 and (d["backend"], d["level"]) == ("mcp/weather", "backend")
    assert stack.post(tools_call("get_weather"), backend="weather").status == 200
    assert [x["path"] for x in stack.weather.requests()] == ["/mcp"]
    assert stack.weather.tool_calls() == ["get_weather"]
    # A route the bundle does not know: fail closed.
    stack.mark()
    r = post_jsonrpc(f"https://127.0.0.1:{stack.port}/unlisted", tools_call("echo"),
                     cert=stack.pki.client(ALPHA), ca=stack.pki.ca)
    assert r.status == 403 and decision_of(stack)["reason"] == "unknown_backend"


def test_agents_through_the_official_sdk(stack: Stack) -> None:
    stack.reset()
    with McpAgent(stack.url(), cert=stack.pki.client(ALPHA), ca=stack.pki.ca) as alpha:
        assert set(alpha.tool_names()) >= {"echo", "get_weather"}
        assert text_of(alpha.call_tool("echo", {"text": "hi"})) == "hi"
        with pytest.raises(Denied) as denied:
            alpha.call_tool("delete_repo", {"name": "prod"})
        assert denied.value.status == 403 and denied.value.code == -32010
        assert text_of(alpha.call_tool("echo", {"text": "still open"})) == "still open"
    with McpAgent(stack.url(), cert=stack.pki.client(BETA), ca=stack.pki.ca) as beta:
        assert text_of(beta.call_tool("get_weather", {"city": "Oslo"}))
        stack.mark()
        with pytest.raises(Denied) as denied:
            beta.call_tool("echo", {"text": "x"})
        assert denied.value.status == 403
        denials = [d for d in decisions(stack) if d["decision"] == "deny"]
        assert [(d["level"], d["name"]) for d in denials] == [("gateway", "echo")]
    assert "delete_repo" not in stack.tools.tool_calls()
    assert stack.tools.tool_calls().count("echo") == 2


def test_sdk_with_mcp_method_headers(stack: Stack) -> None:
    """Newer protocol versions send Mcp-Method / Mcp-Name headers; they agree with the body."""
    with McpAgent(stack.url(), cert=stack.pki.client(ALPHA), ca=stack.pki.ca, mode="auto") as alpha:
        assert text_of(alpha.call_tool("echo", {"text": "auto"})) == "auto"
    r = stack.post(tools_call("echo"), headers={"mcp-method": "tools/list"})
    assert r.status == 400 and r.json()["error"]["code"] == -32020  # HeaderMismatch
    r = stack.post(tools_call("echo"), headers={"mcp-method": "tools/call", "mcp-name": "delete_repo"})
    assert r.status == 400


def test_identity_comes_from_the_certificate_and_verified_jwt(stack: Stack) -> None:
    stack.reset()
    # gamma has no rule of its own; a forged identity header changes nothing.
    forged = {"x-forwarded-client-cert": f"URI={ALPHA}", "x-spiffe-id": ALPHA}
    r = stack.post(tools_call("echo"), who=GAMMA, headers=forged)
    assert r.status == 403 and decision_of(stack)["caller"] == GAMMA
    # A verified JWT with groups=[ops] admits echo for gamma.
    ops = stack.jwt.mint({"groups": ["ops", "dev"]}, sub="gamma")
    assert stack.post(tools_call("echo"), who=GAMMA, token=ops).status == 200
    dev = stack.jwt.mint({"groups": ["dev"]}, sub="gamma")
    assert stack.post(tools_call("echo"), who=GAMMA, token=dev).status == 403
    # Claims of a token Envoy did not verify never count: jwt_authn rejects it first.
    assert stack.post(tools_call("echo"), who=GAMMA, token=stack.jwt.mint_untrusted({"groups": ["ops"]})).status == 401
    assert stack.tools.tool_calls() == ["echo"]


def test_base_protocol_get_and_delete(stack: Stack) -> None:
    stack.reset()
    cert, ca = stack.pki.client(ALPHA), stack.pki.ca
    try:  # an allowed GET opens the server's SSE stream, which stays open
        get(stack.url(), cert=cert, ca=ca, timeout=1.5)
    except TransportFailure:
        pass
    assert decision_of(stack)["decision"] == "allow"
    stack.mark()
    delete(stack.url(), headers={"mcp-session-id": "s-1"}, cert=cert, ca=ca)
    assert decision_of(stack)["decision"] == "allow"
    # Without a session id a DELETE is not MCP: no rule admits it.
    r = delete(stack.url(), cert=cert, ca=ca)
    assert r.status == 403
    # gamma (no rule) gets nothing, not even the SSE stream.
    r = get(stack.url(), cert=stack.pki.client(GAMMA), ca=ca)
    assert r.status == 403
    assert [x["method"] for x in stack.tools.requests()] == ["GET", "DELETE"]


HOSTILE = [
    ("duplicate key", b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","name":"delete_repo"}}', 400, -32600),
    ("escaped duplicate", b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","n\\u0061me":"delete_repo"}}', 400, -32600),
    ("escaped key alone", b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"n\\u0061me":"delete_repo"}}', 403, -32010),
    ("case-folded key", b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"Name":"echo"}}', 400, -32602),
    ("duplicate method", b'{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call","params":{"name":"delete_repo"}}', 400, -32600),
    ("batch", b'[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}]', 400, -32600),
    ("trailing data", b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}{"x":1}', 400, -32700),
    ("invalid utf-8", b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ech\xc0\xaf"}}', 400, -32700),
    ("too deep", b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":' + b'[' * 100 + b']' * 100 + b'}}', 400, -32700),
    ("not json", b"tools/call echo", 400, -32700),
]


@pytest.mark.parametrize("name,body,status,code", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_bodies_never_reach_the_upstream(stack: Stack, name: str, body: bytes, status: int, code: int) -> None:
    stack.reset()
    r = stack.post(body)
    assert (r.status, r.json()["error"]["code"]) == (status, code), r.text
    assert stack.tools.requests() == []


def test_encoding_size_and_content_type(stack: Stack) -> None:
    stack.reset()
    r = stack.post(tools_call("echo"), headers={"content-encoding": "gzip"})
    assert r.status == 415
    r = stack.post(json.dumps(tools_call("echo")), headers={"content-type": "text/plain"})
    assert r.status == 415
    big = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
           "params": {"name": "echo", "arguments": {"text": "x" * (1024 * 1024)}}}
    r = stack.post(big)
    assert r.status == 413 and r.json()["error"]["code"] == -32600
    assert stack.tools.requests() == []
    # Just under the limit, and an object with many keys, pass.
    ok = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
          "params": {"name": "echo", "arguments": {"text": "y" * (1024 * 1024 - 200)}}}
    assert stack.post(ok).status == 200
    wide = {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "z"}, **{f"k{i}": i for i in range(50)}}}
    assert stack.post(wide).status == 200


@pytest.mark.parametrize("scenario,status,reason", [
    ("unknown-cluster", 403, "authorizer_error"),
    ("dead", 403, "authorizer_error"),
    ("timeout-closed", 403, "authorizer_error"),
    ("timeout-open", 200, "allowed"),
])
def test_authorizer_failures_follow_the_failure_mode(stack: Stack, scenario: str, status: int, reason: str) -> None:
    stack.reset()
    r = stack.post(tools_call("echo"), headers={"x-scenario": scenario})
    assert r.status == status, r.text
    assert decision_of(stack)["reason"] == reason
    assert len(stack.tools.tool_calls()) == (1 if status == 200 else 0)


def test_stats_and_logs(stack: Stack) -> None:
    stack.reset()
    stack.post(tools_call("echo"))
    stack.post(tools_call("r3"))
    stats = stack.envoy.stats("mcp_access")
    assert stats["wasmcustom.mcp_access.allowed"] >= 1
    assert stats["wasmcustom.mcp_access.denied.gateway.not_allowed"] >= 1
    assert "wasmcustom.mcp_access.callout.latency_ms" in stats
    assert stats.get("wasmcustom.mcp_access.callout.dispatch_errors", 0) >= 0
    log = stack.envoy.log_text()
    assert "mcp-access: loaded bundle" in log
    denial_lines = [l for l in log.splitlines() if "mcp-access decision" in l and '"reason":"not_allowed"' in l]
    assert denial_lines and "[info]" in denial_lines[-1]
    assert "BEGIN" not in log and "Bearer ey" not in log, "no secrets in logs"


def test_invalid_bundle_refuses_to_start(work_dir: Path, servers: dict[str, Any], wasm_path: Path,
                                         jwt_keys: JwtKeys, pki: Pki) -> None:
    port = free_port()
    b = bundle(port, jwt_keys.issuer, True)
    b["policies"][0]["targets"][0]["name"] = "no-such-gateway"
    cfg = envoy_config(work_dir, servers, wasm_path, jwt_keys, pki, json.dumps(b), port, "bad")
    code, log = EnvoyProcess.start_expect_failure(cfg, workdir=work_dir / "envoy-bad")
    assert code != 0
    lines = [l for l in log.splitlines() if "mcp-access:" in l]
    assert any("policies[0].targets[0].name" in l for l in lines), lines
