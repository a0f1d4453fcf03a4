"""Local rate limits through real Envoy 1.40 (docs/semantics.md §8): two workers (`--concurrency
2`) share one count, the official Python MCP SDK surfaces the 429 as an MCPError naming the limit
(no hang, no retry), a denied request consumes nothing, and requests spelled differently (JSON
escapes in the tool name, batch-like bodies) are counted as what they are or refused before any
count.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import MCPError

from harness import ALPHA, BETA, Cluster, Denied, McpServerProc, Pki, Route, text_of
from harness import bundles as b
from harness.envoy import EnvoyProcess
from harness.stack import Stack

LIMIT = 3


def rate_limit(name: str, limit: int, counters: list[str], when: list[str]) -> dict[str, Any]:
    return {"namespace": "mcp", "policy": "quotas", "name": name, "level": "Backend",
            "targets": [{"name": "tools"}], "rates": [{"limit": limit, "windowSeconds": 3600}],
            "counters": counters, "when": when}


def bundle(port: int) -> dict[str, Any]:
    """alpha and beta may call echo; get_weather is allowed to nobody. Each caller may call echo
    LIMIT times an hour."""
    return b.bundle(
        identity=b.identity(),
        gateways=[b.gateway({"https": port})],
        backends=[b.backend("tools", "tools-route")],
        policies=[b.policy("agents", "Backend", "tools", "Allow", rules=[
            b.rule("alpha", b.calls("echo", base=True), source=b.spiffe(ALPHA)),
            b.rule("beta", b.calls("echo", base=True), source=b.spiffe(BETA))])],
        rateLimits=[rate_limit("echo-per-caller", LIMIT, ["source.principal"],
                               ["request.mcp.method == 'tools/call' && request.mcp.tool_name == 'echo'"])],
    )


class TwoWorkers(EnvoyProcess):
    """Envoy with two worker threads: two VMs of the filter, one shared data."""

    def argv(self) -> list[str]:
        argv = super().argv()
        at = argv.index("--concurrency")
        argv[at + 1] = "2"
        return argv


@pytest.fixture(scope="module")
def stack(work_dir: Path, mcp_server: McpServerProc, wasm_path: Path, pki: Pki) -> Iterator[Stack]:
    cfg, ports = Stack.render("ratelimit", work_dir=work_dir, wasm=wasm_path, bundle=lambda p: bundle(p["https"]),
                              routes=[Route("tools-route", "/mcp", "tools")],
                              upstreams=[Cluster("tools", port=mcp_server.port)], pki=pki)
    with TwoWorkers(cfg, workdir=work_dir / "envoy-ratelimit", name="envoy-ratelimit") as envoy:
        yield Stack(envoy, ports, {"https": "mtls"}, pki, None, {}, "/mcp")


def call(tool: str, raw_name: str | None = None) -> str:
    name = raw_name if raw_name is not None else json.dumps(tool)
    return '{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":%s,"arguments":{"text":"x"}}}' % name


def test_two_workers_share_the_count_and_the_sdk_reports_the_refusal(stack: Stack) -> None:
    # Fresh connections for every request: Envoy spreads them over both workers.
    allowed = [stack.post(call("echo"), who=BETA).status for _ in range(2 * LIMIT)]
    assert allowed.count(200) == LIMIT and allowed.count(429) == LIMIT, allowed
    workers = stack.envoy.stats("downstream_cx_total")
    per_worker = [v for k, v in workers.items() if ".worker_" in k and k.startswith("listener.") and int(v) > 0]
    assert len(per_worker) == 2, workers
    # The refusal as the official Python SDK shows it: an MCPError with the code and data.
    with stack.agent(ALPHA) as a:
        for _ in range(LIMIT):
            assert text_of(a.call_tool("echo", {"text": "ok"})) == "ok"
        with pytest.raises((Denied, MCPError)) as refused:
            a.call_tool("echo", {"text": "one too many"})
        err = refused.value.__cause__ if isinstance(refused.value, Denied) else refused.value
        assert isinstance(err, MCPError), repr(refused.value)
        assert err.error.code == 429 and err.error.message == "Rate limit exceeded"
        assert err.error.data["reason"] == "rate_limited"
        assert err.error.data["limit"] == "mcp/quotas/echo-per-caller"
        assert 0 < err.error.data["retryAfter"] <= 3600
        if isinstance(refused.value, Denied):
            h = refused.value.headers
            assert refused.value.status == 429 and int(h["retry-after"]) == err.error.data["retryAfter"]
            assert h["ratelimit-policy"] == '"mcp/quotas/echo-per-caller";q=3;w=3600'
            assert h["ratelimit"].startswith('"mcp/quotas/echo-per-caller";r=0;t=')
    assert stack.counter("denied.backend.rate_limited") >= LIMIT + 1
    # Per-limit counters: each caller's LIMIT calls charged, the rest refused.
    assert stack.counter("ratelimit.mcp/quotas/echo-per-caller.charged") == 2 * LIMIT
    assert stack.counter("ratelimit.mcp/quotas/echo-per-caller.refused") == LIMIT + 1


def test_denied_and_malformed_requests_consume_nothing_and_escapes_count(stack: Stack) -> None:
    # A fresh caller per test would need a certificate; the limit is per caller, so use a SPIFFE
    # ID the policies deny: it is never counted (the denial comes first).
    other = "spiffe://example.org/ns/agents/sa/gamma"
    for _ in range(LIMIT + 2):
        r = stack.post(call("echo"), who=other)
        assert r.status == 403, r.text
    # Batch-like bodies are refused as invalid before any count, whoever sends them.
    batch = "[%s,%s]" % (call("echo"), call("echo"))
    assert stack.post(batch, who=BETA).status == 400
    # The tool name spelled with a JSON escape is the same tool, counted in the same bucket
    # (beta's bucket is full from the first test).
    r = stack.post(call("echo", raw_name='"\\u0065cho"'), who=BETA, tag=True)
    assert r.status == 429, r.text
    # The decision record names the limit charged and the one that refused.
    d = stack.decision()
    assert (d["decision"], d["reason"], d["level"]) == ("deny", "rate_limited", "backend"), d
    assert d["limits"] == {"charged": ["mcp/quotas/echo-per-caller"], "refused": "mcp/quotas/echo-per-caller"}
    # A tool no policy allows is denied (403), not rate limited.
    assert stack.post(call("get_weather"), who=BETA).status == 403


# -- both official SDK clients, callers by verified JWT ------------------------------------------

REPO = Path(__file__).resolve().parents[2]
CLIENTS = REPO / "integration" / "clients"


def jwt_bundle(port: int, issuer: str) -> dict[str, Any]:
    """Any verified JWT may call echo; each subject twice an hour (by `jwt.claims.sub`)."""
    return b.bundle(
        identity=b.identity(jwt_issuers=[issuer]),
        gateways=[b.gateway({"http": port})],
        backends=[b.backend("tools", "tools-route")],
        policies=[b.policy("jwt-agents", "Backend", "tools", "Allow", rules=[
            b.rule("any-jwt", b.calls("echo", base=True), source=b.jwt(issuer))])],
        rateLimits=[rate_limit("echo-per-subject", 2, ["jwt.claims.sub"], ["request.mcp.method == 'tools/call'"])],
    )


@pytest.fixture(scope="module")
def jwt_stack(work_dir: Path, mcp_server: McpServerProc, wasm_path: Path, jwt_keys: Any) -> Iterator[Stack]:
    from harness.stack import Listen
    with Stack.start("ratelimit-jwt", work_dir=work_dir, wasm=wasm_path,
                     bundle=lambda p: jwt_bundle(p["http"], jwt_keys.issuer),
                     routes=[Route("tools-route", "/mcp", "tools")], upstreams=[Cluster("tools", port=mcp_server.port)],
                     listeners={"http": Listen(tls=None)}, jwt=jwt_keys, path="/mcp") as s:
        yield s


def run_client(sdk: str, url: str, token: str, *ops: str) -> list[dict[str, Any]]:
    """One SDK client program's reports, in order."""
    import subprocess
    import sys
    argv = [sys.executable, str(CLIENTS / "python_sdk_client.py")] if sdk == "python" else \
        ["node", str(CLIENTS / "node" / "ts-sdk-client.mjs")]
    proc = subprocess.run([*argv, url, *ops, "--token", token], capture_output=True, text=True, timeout=90, cwd=REPO)
    assert proc.returncode == 0, f"{sdk}: {proc.stdout}\n{proc.stderr}"
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("sdk", ["python", "typescript"])
def test_each_official_sdk_surfaces_the_429_as_an_error_of_the_call(jwt_stack: Stack, jwt_keys: Any, sdk: str) -> None:
    if sdk == "typescript" and not (CLIENTS / "node" / "node_modules").is_dir():
        pytest.fail("integration/clients/node/node_modules is missing: run scripts/setup")
    token = jwt_keys.mint(sub=f"agent-{sdk}")
    echo = 'call:echo:{"text": "hi"}'
    reports = run_client(sdk, jwt_stack.url(), token, echo, echo, echo)
    calls = [r for r in reports if r.get("op") == echo]
    assert [r["ok"] for r in calls] == [True, True, False], json.dumps(reports)
    e = calls[2]["error"]
    if sdk == "python":  # the JSON-RPC error of the 429 body, as an MCPError
        assert (e["class"], e["code"], e["message"]) == ("MCPError", 429, "Rate limit exceeded"), e
    else:  # a transport error carrying the status and the body
        assert (e["class"], e["code"]) == ("StreamableHTTPError", 429), e
        assert '"limit":"mcp/quotas/echo-per-subject"' in e["message"], e
    # Another subject has its own count; a token spelled with other claims is the same subject.
    again = run_client(sdk, jwt_stack.url(), jwt_keys.mint({"extra": 1}, sub=f"agent-{sdk}"), echo)
    assert [r["ok"] for r in again if r.get("op") == echo] == [False], again
