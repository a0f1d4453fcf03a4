"""The filter deciding live MCP traffic inside real Envoy 1.40.

One Envoy per bundle variant: an mTLS listener with jwt_authn and the filter, two MCP backends
behind routes that rewrite the path, and recording HTTP authorizers. The seed tables run row by
row (one tool per row), plus identity, routing, hostile input, failure and observability checks.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import (
    ALPHA,
    BETA,
    Cluster,
    Denied,
    EnvoyProcess,
    HttpResult,
    JwtKeys,
    McpAgent,
    McpServerProc,
    Pki,
    Route,
    TransportFailure,
    delete,
    free_port,
    get,
    post_jsonrpc,
    rpc,
    start_authorizer,
    start_mcp_server,
    text_of,
)
from harness import bundles as b
from harness.stack import Stack, logged_decisions

GAMMA = "spiffe://example.org/ns/agents/sa/gamma"
ROW_TOOLS = ["r1", "r2", "r3", "r4", "r5", "r6"]
GW_DELAY_MS = 150


def tools_call(tool: str, id: int | str = 1) -> dict[str, Any]:
    return rpc("tools/call", {"name": tool, "arguments": {}}, id=id)


def bundle(ports: dict[str, int], issuer: str, with_deny: bool) -> dict[str, Any]:
    """Gateway gw (listener https), backends tools and weather; each seed-table row is one tool:
    r1 gateway authorizer denies, r2 gateway Deny policy, r3 no gateway rule admits, r4 backend
    authorizer denies, r5 backend Deny policy, r6 no backend rule admits; echo passes everything."""
    gw_tools = ["echo", "add", "get_weather", "delete_repo", "r1", "r2", "r4", "r5", "r6"]
    be_tools = ["echo", "add", "get_weather", "r1", "r2", "r3", "r4", "r5"]
    tool_calls = [b.rule("tool-calls", b.calls())]

    def scenario(value: str) -> list[dict[str, Any]]:
        return [b.rule(value, b.header("x-scenario", value))]

    def ext(name: str, seniority: int, authorizer: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
        return b.policy(name, "Gateway", "gw", "ExternalAuth", seniority=seniority, externalAuth=authorizer, rules=rules)

    policies = [
        ext("gw-ext-1", 1, "gw-authz-1", tool_calls),
        ext("gw-ext-2", 2, "gw-authz-2", tool_calls),
        ext("gw-fail-unknown", 3, "unknown-cluster", scenario("unknown-cluster")),
        ext("gw-fail-dead", 4, "dead", scenario("dead")),
        ext("gw-fail-timeout-closed", 5, "slow-closed", scenario("timeout-closed")),
        ext("gw-fail-timeout-open", 6, "slow-open", scenario("timeout-open")),
        b.policy("gw-allow", "Gateway", "gw", "Allow", seniority=7, rules=[
            b.rule("alpha", b.calls(*gw_tools, base=True), source=b.service_account("agents", "alpha")),
            b.rule("beta-weather", b.calls("get_weather", base=True), source=b.spiffe(BETA)),
            b.rule("ops-by-jwt", b.calls("echo", base=True),
                   source=b.jwt(issuer, claims=[{"name": "groups", "values": ["ops"]}])),
        ]),
        b.policy("be-ext", "Backend", "tools", "ExternalAuth", seniority=8, externalAuth="be-authz", rules=tool_calls),
        b.policy("be-allow", "Backend", "tools", "Allow", seniority=9, rules=[b.rule("tools", b.calls(*be_tools, base=True))]),
        b.policy("weather-allow", "Backend", "weather", "Allow", seniority=10,
                 rules=[b.rule("weather", b.calls("get_weather", base=True))]),
    ]
    if with_deny:
        policies.append(b.policy("gw-deny", "Gateway", "gw", "Deny", seniority=11, rules=[b.rule("r2", b.calls("r2"))]))
        policies.append(b.policy("be-deny", "Backend", "tools", "Deny", seniority=12, rules=[b.rule("r5", b.calls("r5"))]))
    return b.bundle(
        identity=b.identity(jwt_issuers=[issuer]),
        gateways=[b.gateway(ports)],
        backends=[b.backend("tools", "tools-route"), b.backend("weather", "weather-route")],
        authorizers=[
            b.authorizer("gw-authz-1", "gw-authz-1", 2000, allowedHeaders=["x-scenario"],
                         allowedResponseHeaders=["x-authz-ok"], forwardBodyMaxBytes=4096),
            b.authorizer("gw-authz-2", "gw-authz-2", 2000),
            b.authorizer("be-authz", "be-authz", 2000),
            b.authorizer("unknown-cluster", "no-such-cluster", 2000),
            b.authorizer("dead", "dead-authz", 2000),
            b.authorizer("slow-closed", "slow-authz", 300),
            b.authorizer("slow-open", "slow-authz", 300, failureMode="Allow"),
        ],
        policies=policies,
        limits={"maxBodyBytes": 1048576},
    )


ROUTES = [
    Route("tools-route", "/tools/mcp", "tools", prefix_rewrite="/mcp"),
    Route("weather-route", "/weather/mcp", "weather", prefix_rewrite="/mcp"),
    Route("unlisted-route", "/unlisted", "tools", prefix_rewrite="/mcp"),
]


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
               "gw-authz-1": gw1, "gw-authz-2": gw2, "be-authz": be, "slow-authz": slow}


def upstreams(servers: dict[str, Any]) -> list[Cluster]:
    return [Cluster(name, port=s.port) for name, s in servers.items()] + [Cluster("dead-authz", port=free_port())]


def bigger_buffer(cfg: dict[str, Any]) -> None:
    """Envoy's own buffer limit above the filter's, so the filter answers oversize bodies."""
    cfg["static_resources"]["listeners"][0]["per_connection_buffer_limit_bytes"] = 4 * 1024 * 1024


@pytest.fixture(scope="module", params=[True, False], ids=["with-deny", "without-deny"])
def stack(request: pytest.FixtureRequest, work_dir: Path, servers: dict[str, Any], wasm_path: Path,
          jwt_keys: JwtKeys, pki: Pki) -> Iterator[Stack]:
    with_deny = request.param
    name = "deny" if with_deny else "nodeny"
    with Stack.start(name, work_dir=work_dir, wasm=wasm_path, bundle=lambda ports: bundle(ports, jwt_keys.issuer, with_deny),
                     routes=ROUTES, upstreams=upstreams(servers), pki=pki, jwt=jwt_keys, servers=servers,
                     edit=bigger_buffer) as s:
        s.with_deny = with_deny  # type: ignore[attr-defined]
        yield s


def send(stack: Stack, body: Any, **kw: Any) -> HttpResult:
    """Marks the access log, then posts (Stack.post): decision_of() is then this request's decision."""
    stack.mark()
    return stack.post(body, **kw)


def decision_of(stack: Stack) -> dict[str, Any]:
    """The decision of the one request sent since the last mark()."""
    found = stack.decisions_since()
    assert len(found) == 1, found
    return found[0]


def called(stack: Stack, name: str) -> list[dict[str, Any]]:
    return stack.servers[name].calls()


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
    r = send(stack, tools_call(tool, id=f"row-{tool}"))
    assert r.status == status, r.text
    d = decision_of(stack)
    assert (d["level"], d["reason"]) == (level, reason), d
    # Gateway authorizers were asked every time; the backend one only when the gateway passed.
    assert len(called(stack, "gw-authz-1")) == 1 and len(called(stack, "gw-authz-2")) == 1
    assert len(called(stack, "be-authz")) == (1 if backend_authz_called else 0)
    if status == 200:
        assert stack.servers["tools"].tool_calls() == [tool]
        assert (d["policy"], d["rule"]) == ("mcp/be-allow", "tools"), "the admitting rule is reported"
        return
    assert stack.servers["tools"].requests() == [], "a denied request never reaches the upstream"
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
    assert send(stack, tools_call("echo")).status == 200
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
    upstream = {k.lower(): v for k, v in stack.servers["tools"].requests()[-1]["headers"].items()}
    assert upstream.get("x-authz-ok") == "gw1"
    assert "x-not-allowed" not in upstream


def test_backend_is_envoys_routing_decision(stack: Stack) -> None:
    """Both routes rewrite to /mcp; the backend policy applied follows the route Envoy chose."""
    stack.reset()
    assert send(stack, tools_call("echo"), backend="tools").status == 200
    r = send(stack, tools_call("echo"), backend="weather")
    d = decision_of(stack)
    assert r.status == 403 and (d["backend"], d["level"]) == ("mcp/weather", "backend")
    assert send(stack, tools_call("get_weather"), backend="weather").status == 200
    assert [x["path"] for x in stack.servers["weather"].requests()] == ["/mcp"]
    assert stack.servers["weather"].tool_calls() == ["get_weather"]
    # A route the bundle does not know: fail closed.
    stack.mark()
    r = post_jsonrpc(f"https://127.0.0.1:{stack.port}/unlisted", tools_call("echo"),
                     cert=stack.pki.client(ALPHA), ca=stack.pki.ca)
    assert r.status == 403 and decision_of(stack)["reason"] == "unknown_backend"
    # The client is told which route and cluster lead to no backend (configuration, not policy).
    data = r.json()["error"]["data"]
    assert data["reason"] == "unknown_backend" and "cluster" in data["detail"], data
    assert "XBackend" in data["fix"] and "policy" not in data, data


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
        denials = [d for d in stack.decisions_since() if d["decision"] == "deny"]
        assert [(d["level"], d["name"]) for d in denials] == [("gateway", "echo")]
    assert "delete_repo" not in stack.servers["tools"].tool_calls()
    assert stack.servers["tools"].tool_calls().count("echo") == 2


def test_sdk_with_mcp_method_headers(stack: Stack) -> None:
    """Newer protocol versions send Mcp-Method / Mcp-Name headers; they agree with the body."""
    with McpAgent(stack.url(), cert=stack.pki.client(ALPHA), ca=stack.pki.ca, mode="auto") as alpha:
        assert text_of(alpha.call_tool("echo", {"text": "auto"})) == "auto"
    r = send(stack, tools_call("echo"), headers={"mcp-method": "tools/list"})
    assert r.status == 400 and r.json()["error"]["code"] == -32020  # HeaderMismatch
    r = send(stack, tools_call("echo"), headers={"mcp-method": "tools/call", "mcp-name": "delete_repo"})
    assert r.status == 400


def test_identity_comes_from_the_certificate_and_verified_jwt(stack: Stack) -> None:
    stack.reset()
    # gamma has no rule of its own; a forged identity header changes nothing.
    forged = {"x-forwarded-client-cert": f"URI={ALPHA}", "x-spiffe-id": ALPHA}
    r = send(stack, tools_call("echo"), who=GAMMA, headers=forged)
    assert r.status == 403 and decision_of(stack)["caller"] == GAMMA
    # A verified JWT with groups=[ops] admits echo for gamma.
    ops = stack.jwt.mint({"groups": ["ops", "dev"]}, sub="gamma")
    assert send(stack, tools_call("echo"), who=GAMMA, token=ops).status == 200
    dev = stack.jwt.mint({"groups": ["dev"]}, sub="gamma")
    assert send(stack, tools_call("echo"), who=GAMMA, token=dev).status == 403
    # Claims of a token Envoy did not verify never count: jwt_authn rejects it first.
    assert send(stack, tools_call("echo"), who=GAMMA, token=stack.jwt.mint_untrusted({"groups": ["ops"]})).status == 401
    assert stack.servers["tools"].tool_calls() == ["echo"]


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
    assert [x["method"] for x in stack.servers["tools"].requests()] == ["GET", "DELETE"]


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
    r = send(stack, body)
    assert (r.status, r.json()["error"]["code"]) == (status, code), r.text
    assert stack.servers["tools"].requests() == []


def test_encoding_size_and_content_type(stack: Stack) -> None:
    stack.reset()
    r = send(stack, tools_call("echo"), headers={"content-encoding": "gzip"})
    assert r.status == 415
    r = send(stack, json.dumps(tools_call("echo")), headers={"content-type": "text/plain"})
    assert r.status == 415
    big = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
           "params": {"name": "echo", "arguments": {"text": "x" * (1024 * 1024)}}}
    r = send(stack, big)
    assert r.status == 413 and r.json()["error"]["code"] == -32600
    assert stack.servers["tools"].requests() == []
    # Just under the limit, and an object with many keys, pass.
    ok = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
          "params": {"name": "echo", "arguments": {"text": "y" * (1024 * 1024 - 200)}}}
    assert send(stack, ok).status == 200
    wide = {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "z"}, **{f"k{i}": i for i in range(50)}}}
    assert send(stack, wide).status == 200


@pytest.mark.parametrize("scenario,status,reason", [
    ("unknown-cluster", 403, "authorizer_error"),
    ("dead", 403, "authorizer_error"),
    ("timeout-closed", 403, "authorizer_error"),
    ("timeout-open", 200, "allowed"),
])
def test_authorizer_failures_follow_the_failure_mode(stack: Stack, scenario: str, status: int, reason: str) -> None:
    stack.reset()
    r = send(stack, tools_call("echo"), headers={"x-scenario": scenario})
    assert r.status == status, r.text
    assert decision_of(stack)["reason"] == reason
    assert len(stack.servers["tools"].tool_calls()) == (1 if status == 200 else 0)
    if scenario.startswith("timeout"):  # the log says the call timed out (Envoy's 504 is not the authorizer's)
        assert "timed out: no answer within the authorizer's timeout of 300 ms (Envoy ended the call with 504)" in stack.envoy.log_text()


def test_stats_and_logs(stack: Stack) -> None:
    stack.reset()
    send(stack, tools_call("echo"))
    send(stack, tools_call("r3"))
    stats = stack.envoy.stats("mcp_access")
    assert stats["wasmcustom.mcp_access.allowed"] >= 1
    assert stats["wasmcustom.mcp_access.denied.gateway.not_allowed"] >= 1
    assert "wasmcustom.mcp_access.callout.latency_ms" in stats
    assert stats.get("wasmcustom.mcp_access.callout.dispatch_errors", 0) >= 0
    log = stack.envoy.log_text()
    assert "mcp-access: loaded bundle" in log
    denial_lines = [line for line, d in logged_decisions(stack.envoy) if d.get("reason") == "not_allowed"]
    assert denial_lines and "[info]" in denial_lines[-1]
    assert "BEGIN" not in log and "Bearer ey" not in log, "no secrets in logs"


def test_invalid_bundle_refuses_to_start(work_dir: Path, servers: dict[str, Any], wasm_path: Path,
                                         jwt_keys: JwtKeys, pki: Pki) -> None:
    def broken(ports: dict[str, int]) -> dict[str, Any]:
        doc = bundle(ports, jwt_keys.issuer, True)
        doc["policies"][0]["targets"][0]["name"] = "no-such-gateway"
        return doc

    cfg, _ = Stack.render("bad", work_dir=work_dir, wasm=wasm_path, bundle=broken, routes=ROUTES,
                          upstreams=upstreams(servers), pki=pki, jwt=jwt_keys, edit=bigger_buffer)
    code, log = EnvoyProcess.start_expect_failure(cfg, workdir=work_dir / "envoy-bad")
    assert code != 0
    lines = [l for l in log.splitlines() if "mcp-access:" in l]
    assert any("policies[0].targets[0].name" in l for l in lines), lines
