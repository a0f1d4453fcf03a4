"""CEL conditions (`authorization.cel`, `when`) decided by the built filter inside real Envoy 1.40,
with the official MCP Python SDK client and the demo MCP server.

One Envoy, one bundle written directly (manifests -> bundle is the compiler's part): an mTLS
listener with jwt_authn, two backends. Covers KAN's CEL scenarios (single rule, multi-rule,
macros, all-failures), a Deny rule, `when` on a policy and on a rule, an expression over the tool
arguments and the verified JWT claims, and a run-time error that fails closed (counted in stats
and in the decision log).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import BETA, Cluster, Denied, JwtKeys, McpAgent, Pki, Route, post_jsonrpc, rpc, start_mcp_server, text_of
from harness import bundles as b
from harness.stack import Listen, Stack

BASE = b.rule("allow-base-mcp", b.mcp(base=True))
KAN_MACROS = ("request.path.startsWith('/mc') &&\n"
              "request.headers['mcp-protocol-version'].contains('2025') &&\n"
              "request.mcp.tool_name.matches('^get[-_][a-z]+$')")
BACKENDS = ["single", "multi", "macros", "none", "guarded"]


def policy(name: str, target: str, action: str, seniority: int, **kw: Any) -> dict[str, Any]:
    return b.policy(name, "Backend", target, action, seniority=seniority, **kw)


def cel_rule(name: str, expression: str, **kw: Any) -> dict[str, Any]:
    return b.rule(name, b.cel(expression), **kw)


def bundle(ports: dict[str, int], issuer: str) -> dict[str, Any]:
    """Backends (one per scenario, each behind its own route):
    - single: KAN single rule `tool_name == 'echo'` (+ the base protocol rule)
    - multi: KAN multi-rule, `echo` or `non-existent`
    - macros: KAN's startsWith / headers / matches expression
    - none: KAN all-failures, `tool_name == 'non-existent'`
    - guarded: a Deny CEL rule over the arguments (no `delete_repo` of `prod-*`), a Deny policy
      whose `when` holds only for beta, an Allow rule whose `when` needs the `x-team` header,
      an Allow rule over the verified JWT's claims, and a rule whose CEL errs at run time."""
    policies = [
        policy("single", "single", "Allow", 1, rules=[cel_rule("cel", "request.mcp.tool_name == 'echo'"), BASE]),
        policy("multi", "multi", "Allow", 2, rules=[
            cel_rule("echo", "request.mcp.tool_name == 'echo'"),
            cel_rule("nothing", "request.mcp.tool_name == 'non-existent'"), BASE]),
        policy("macros", "macros", "Allow", 3, rules=[cel_rule("macros", KAN_MACROS), BASE]),
        policy("none", "none", "Allow", 4, rules=[cel_rule("nothing", "request.mcp.tool_name == 'non-existent'"), BASE]),
        # has() first: for a request that is no tools/call (initialize) the rest would err, and an
        # error makes a Deny rule match.
        policy("no-prod-delete", "guarded", "Deny", 5, rules=[cel_rule(
            "prod", "has(request.mcp.tool_name) && request.mcp.tool_name == 'delete_repo' && "
                    "request.mcp.params.arguments.name.startsWith('prod-')")]),
        # Guarded with has(): reading an absent attribute is an error, and an error in a Deny
        # policy's `when` or rule makes it apply / match.
        policy("beta-readonly", "guarded", "Deny", 6,
               when=["has(source.principal) && source.service_account.name == 'beta'"],
               rules=[cel_rule("writes", "has(request.mcp.tool_name) && request.mcp.tool_name in ['delete_repo', 'add']")]),
        # Envoy's request.time reaches the filter: without it this `when` would err and the
        # policy would admit nothing.
        policy("guarded-allow", "guarded", "Allow", 7,
               when=["request.time > timestamp('2025-01-01T00:00:00Z') && request.time.getFullYear() < 2200"], rules=[
            BASE,
            b.rule("team", b.calls("echo", "add", "delete_repo"), when=["request.headers['x-team'] == 'blue'"]),
            cel_rule("ops", "'ops' in jwt.claims.groups && jwt.claims.org.team == 'blue' && request.mcp.tool_name == 'get_weather'"),
            # Errs when `a` is 0 (division by zero): an error never admits.
            cel_rule("ratio", "request.mcp.tool_name == 'add' && 10 / request.mcp.params.arguments.a > 1"),
        ]),
    ]
    return b.bundle(identity=b.identity(jwt_issuers=[issuer]), gateways=[b.gateway(ports)],
                    backends=[b.backend(n, f"{n}-route") for n in BACKENDS], policies=policies)


@pytest.fixture(scope="module")
def stack(work_dir: Path, wasm_path: Path, jwt_keys: JwtKeys, pki: Pki) -> Iterator[Stack]:
    # Under /mcp, as KAN's scenarios expect (`request.path.startsWith('/mc')`).
    with start_mcp_server(work_dir / "logs", name="cel-tools") as server:
        routes = [Route(f"{n}-route", f"/mcp/{n}", "tools", prefix_rewrite="/mcp") for n in BACKENDS]
        with Stack.start("cel", work_dir=work_dir, wasm=wasm_path, bundle=lambda ports: bundle(ports, jwt_keys.issuer),
                         routes=routes, upstreams=[Cluster("tools", port=server.port)],
                         listeners={"https": Listen(tls="tls")}, pki=pki, jwt=jwt_keys, path="/mcp/{backend}") as s:
            yield s


def calls(agent: McpAgent, tools: dict[str, dict[str, Any]]) -> dict[str, bool]:
    """Which of the tool calls the filter lets through (a denial is an HTTP 403 from the filter)."""
    out = {}
    for tool, args in tools.items():
        try:
            agent.call_tool(tool, args)
            out[tool] = True
        except Denied as d:
            assert d.status == 403, d
            out[tool] = False
    return out


ECHO = {"echo": {"text": "hi"}, "get_weather": {"city": "Paris"}, "add": {"a": 1, "b": 2}}


def test_kan_single_rule(stack: Stack) -> None:
    with stack.agent(backend="single") as a:
        assert text_of(a.call_tool("echo", {"text": "hi"})) == "hi"
        assert calls(a, ECHO) == {"echo": True, "get_weather": False, "add": False}


def test_kan_multi_rule(stack: Stack) -> None:
    with stack.agent(backend="multi") as a:
        assert calls(a, ECHO) == {"echo": True, "get_weather": False, "add": False}


def test_kan_macros(stack: Stack) -> None:
    # The SDK sends mcp-protocol-version 2025-11-25 after initialize: `contains('2025')` holds.
    with stack.agent(backend="macros") as a:
        assert calls(a, ECHO) == {"echo": False, "get_weather": True, "add": False}
    # Without the header (a raw POST) the expression errs: the CEL rule does not admit.
    stack.mark()
    r = post_jsonrpc(stack.url("macros"), rpc("tools/call", {"name": "get_weather", "arguments": {"city": "x"}}),
                     ca=stack.pki.ca, protocol_version=None)
    assert r.status == 403, r
    assert stack.decisions_since()[-1]["cel_errors"] == 1


def test_kan_all_failures(stack: Stack) -> None:
    # initialize and tools/list pass (the base protocol rule); every call is denied, so the
    # per-caller listing is empty.
    with stack.agent(backend="none") as a:
        assert a.tool_names() == []
        assert calls(a, ECHO) == {"echo": False, "get_weather": False, "add": False}


def test_deny_rule_reads_tool_arguments(stack: Stack) -> None:
    with stack.agent(backend="guarded", headers={"x-team": "blue"}) as a:
        assert calls(a, {"delete_repo": {"name": "dev-1"}}) == {"delete_repo": True}
        stack.mark()
        assert calls(a, {"delete_repo": {"name": "prod-1"}}) == {"delete_repo": False}
        d = stack.decisions_since()[-1]
        assert (d["reason"], d["policy"], d["rule"]) == ("deny_policy", "mcp/no-prod-delete", "prod"), d


def test_when_on_rule_and_policy(stack: Stack) -> None:
    # The rule's `when` needs x-team: blue.
    with stack.agent(backend="guarded") as a:
        assert calls(a, {"echo": {"text": "x"}}) == {"echo": False}
    with stack.agent(backend="guarded", headers={"x-team": "blue"}) as a:
        assert calls(a, {"echo": {"text": "x"}, "add": {"a": 1, "b": 1}}) == {"echo": True, "add": True}
    # The Deny policy applies only to beta (its `when`): beta may echo but not add.
    with stack.agent(BETA, "guarded", headers={"x-team": "blue"}) as beta:
        assert calls(beta, {"echo": {"text": "x"}, "add": {"a": 1, "b": 1}}) == {"echo": True, "add": False}


def test_jwt_claims(stack: Stack) -> None:
    ops = stack.jwt.mint({"groups": ["ops"], "org": {"team": "blue"}}, sub="u1")
    with stack.agent(backend="guarded", token=ops) as a:
        assert calls(a, {"get_weather": {"city": "Paris"}}) == {"get_weather": True}
    red = stack.jwt.mint({"groups": ["ops"], "org": {"team": "red"}}, sub="u2")
    with stack.agent(backend="guarded", token=red) as a:
        assert calls(a, {"get_weather": {"city": "Paris"}}) == {"get_weather": False}


def test_runtime_error_fails_closed_and_is_counted(stack: Stack) -> None:
    before = stack.counter("cel.errors")
    with stack.agent(backend="guarded") as a:
        assert calls(a, {"add": {"a": 5, "b": 1}}) == {"add": True}  # 10 / 5 > 1
        stack.mark()
        assert calls(a, {"add": {"a": 0, "b": 1}}) == {"add": False}  # 10 / 0: an error
        d = stack.decisions_since()[-1]
        assert d["reason"] == "not_allowed" and d["cel_errors"] >= 1, d
    assert stack.counter("cel.errors") > before
