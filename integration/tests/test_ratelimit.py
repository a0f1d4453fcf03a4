"""Local rate limits through real Envoy 1.40 (docs/semantics.md §8): two workers (`--concurrency
2`) share one count, the official Python MCP SDK surfaces the 429 as an MCPError naming the limit
(no hang, no retry), a denied request consumes nothing, and requests spelled differently (JSON
escapes in the tool name or the JWT subject, SPIFFE IDs, batch-like bodies) are counted as what
they are or refused before any count. Many subjects in one slot evict, counted, and none gets
more than its limit; a configuration reload keeps an unchanged limit's count and restarts a
changed one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import MCPError

from harness import ALPHA, BETA, Cluster, Denied, McpServerProc, Pki, Route, text_of
from harness import bundles as b
from harness.envoy import EnvoyProcess
from harness.stack import Stack
from test_cli_e2e import cli  # noqa: F401  (the mcp-access binary fixture)

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


# -- attacks: identity spelled differently, tool names, batch-like bodies, many distinct keys ----

def raw_token(jwt_keys: Any, payload: str) -> str:
    """A JWT whose payload is exactly `payload` (JSON as written, escapes and all), signed with
    the published key."""
    from jwt import api_jws
    return api_jws.encode(payload.encode(), jwt_keys.private_key, algorithm="RS256", headers={"kid": jwt_keys.kid})


def claims(jwt_keys: Any, sub_json: str) -> str:
    now = int(time.time())
    return ('{"iss":%s,"aud":%s,"iat":%d,"exp":%d,"sub":%s}'
            % (json.dumps(jwt_keys.issuer), json.dumps(jwt_keys.audience), now, now + 300, sub_json))


def test_a_subject_spelled_with_json_escapes_is_one_subject_with_one_count(jwt_stack: Stack, jwt_keys: Any) -> None:
    echo = call("echo")
    # "agent-é" three ways: UTF-8, \u00e9, and with the ASCII letters escaped too.
    spellings = ['"agent-\u00e9"', '"agent-\\u00e9"', '"\\u0061gent-\\u00E9"']
    results = [jwt_stack.post(echo, who=None, token=raw_token(jwt_keys, claims(jwt_keys, s))).status for s in spellings]
    # One subject, two calls an hour: the third spelling is refused.
    assert results == [200, 200, 429], results
    # A subject that differs in case is another subject, with its own count.
    other = raw_token(jwt_keys, claims(jwt_keys, '"agent-\\u00c9"'))
    assert [jwt_stack.post(echo, who=None, token=other).status for _ in range(3)] == [200, 200, 429]
    # No token: denied by the policies (401/403), never counted as anyone.
    assert jwt_stack.post(echo, who=None).status in (401, 403)


def test_spiffe_ids_spelled_differently_are_counted_as_the_policies_judge_them(stack: Stack) -> None:
    # beta's bucket is full (the first test). An ID the policies do not take for beta's is
    # denied (403), never counted; one they take for beta's is beta's, refused (429).
    for i, spelling in enumerate(("spiffe://example.org/ns/agents/sa/BETA", "spiffe://example.org/ns/agents/sa/bet%61",
                                  "spiffe://example.org/ns/agents/sa/beta/", "spiffe://example.org//ns/agents/sa/beta",
                                  "spiffe://EXAMPLE.org/ns/agents/sa/beta")):
        before = stack.counter("ratelimit.mcp/quotas/echo-per-caller.charged")
        # Named certificate files: the PKI names them by the ID's last segment (beta's own).
        cert = stack.pki.client(spelling, name=f"beta-spelled-{i}")
        r = stack.post(call("echo"), who=cert, tag=True)
        d = stack.decision()
        if r.status == 403:
            assert "limits" not in d, d
        else:
            assert r.status == 429 and d["limits"]["refused"] == "mcp/quotas/echo-per-caller", (spelling, r.status, d)
        assert stack.counter("ratelimit.mcp/quotas/echo-per-caller.charged") == before


def test_tool_names_and_bodies_are_counted_as_what_they_are(stack: Stack) -> None:
    refused = stack.counter("ratelimit.mcp/quotas/echo-per-caller.refused")
    # beta's echo bucket is full: every spelling of echo is refused, nothing else is counted.
    for raw in ('"ech\\u006f"', '"\\u0065\\u0063\\u0068\\u006f"'):
        assert stack.post(call("echo", raw_name=raw), who=BETA).status == 429
    for raw in ('"ECHO"', '"echo\\u0000"', '"echo "'):
        assert stack.post(call("echo", raw_name=raw), who=BETA).status in (400, 403), raw
    for body in ("[%s]" % call("echo"), "[]", call("echo") + call("echo")):
        assert stack.post(body, who=BETA).status == 400
    assert stack.counter("ratelimit.mcp/quotas/echo-per-caller.refused") == refused + 2


def test_many_distinct_subjects_evict_counted_and_none_gets_unlimited(jwt_stack: Stack, jwt_keys: Any,
                                                                      cli: Path, work_dir: Path) -> None:  # noqa: F811
    """Subjects whose buckets share one slot (found with the bucket derivation `explain` shows,
    checked against it): a fifth evicts the least recently charged, counted; each subject still
    gets exactly its two calls before a refusal."""
    bundle_file = work_dir / "ratelimit-jwt-bundle.json"
    bundle_file.write_text(json.dumps(jwt_bundle(80, jwt_keys.issuer)))

    def explained(sub: str) -> dict[str, Any]:
        r = subprocess.run([str(cli), "explain", "--bundle", str(bundle_file), "--backend", "tools", "--tool", "echo",
                            "--jwt-claims", json.dumps({"iss": jwt_keys.issuer, "sub": sub}), "-o", "json"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        [limit] = json.loads(r.stdout)["limits"]
        return limit

    victim = explained("victim")
    digest = bytes.fromhex(victim["digest"])

    def bucket(sub: str) -> bytes:
        v = sub.encode()
        return hashlib.sha256(digest + b"\x01" + len(v).to_bytes(8, "little") + v).digest()

    def slot(sub: str) -> int:
        return int.from_bytes(bucket(sub)[:4], "little") % 25_000

    assert (bucket("victim").hex(), slot("victim")) == (victim["bucket"], victim["slot"])
    mates = [s for s in (f"mate-{i}" for i in range(2_000_000)) if slot(s) == victim["slot"]][:8]
    assert len(mates) == 8
    assert explained(mates[0])["slot"] == victim["slot"]

    def calls(sub: str, n: int) -> list[int]:
        token = jwt_keys.mint(sub=sub)
        return [jwt_stack.post(call("echo"), who=None, token=token).status for _ in range(n)]

    evicted = jwt_stack.counter("ratelimit.evicted")
    assert calls("victim", 3) == [200, 200, 429]
    # Three more fill the slot (4 buckets); the fourth takes the least recently charged: victim's.
    for m in mates[:3]:
        assert calls(m, 3) == [200, 200, 429]
    assert jwt_stack.counter("ratelimit.evicted") == evicted
    assert calls(mates[3], 3) == [200, 200, 429]
    assert jwt_stack.counter("ratelimit.evicted") == evicted + 1
    # Evicted, the victim starts again from zero; and is still limited.
    assert calls("victim", 3) == [200, 200, 429]
    assert jwt_stack.counter("ratelimit.evicted") == evicted + 2
    # Every newcomer to the full slot evicts one bucket, counted; none gets more than its two.
    for m in mates[4:]:
        assert calls(m, 3) == [200, 200, 429]
    assert jwt_stack.counter("ratelimit.evicted") == evicted + 6


# -- a configuration reload in the middle of a window ---------------------------------------------

def quotas(add_limit: int, mode: str = "Local") -> str:
    """RateLimitPolicy mcp/quotas: `kept` (echo, 3 a day) and `changed` (add, `add_limit` a day)."""
    return f"""\
apiVersion: mcp-access.io/v1alpha1
kind: RateLimitPolicy
metadata: {{name: quotas, namespace: mcp}}
spec:
  targetRefs: [{{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}}]
  mode: {mode}
  limits:
    kept:
      rates: [{{limit: 3, window: 1d}}]
      when: [{{predicate: "request.mcp.tool_name == 'echo'"}}]
    changed:
      rates: [{{limit: {add_limit}, window: 1d}}]
      when: [{{predicate: "request.mcp.tool_name == 'add'"}}]
"""


class Reloading:
    """An Envoy (two workers) made by `mcp-access envoy --ecds` from manifests allowing echo and
    add and the RateLimitPolicy `quotas`; `publish` changes the policy without a restart."""

    def __init__(self, cli: Path, manifests: Path, ecds_dir: Path, common: list[str], url: str,
                 proxy: EnvoyProcess) -> None:
        self.cli, self.manifests, self.ecds_dir, self.common = cli, manifests, ecds_dir, common
        self.url, self.proxy = url, proxy

    def statuses(self, tool: str, n: int) -> list[int]:
        from harness.client import post_jsonrpc
        body = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"%s","arguments":{"a":1,"b":2,"text":"x"}}}' % tool
        return [post_jsonrpc(self.url, body).status for _ in range(n)]

    def reloads(self) -> int:
        stats = self.proxy.stats("extension_config_discovery.http_filter.mcp_access")
        return int(next((v for k, v in stats.items() if k.endswith("update_success")), 0))

    def publish(self, quotas_yaml: str) -> None:
        """Publishes `quotas_yaml` and waits until Envoy applied it."""
        before = self.reloads()
        (self.manifests / "quotas.yaml").write_text(quotas_yaml)
        r = subprocess.run([str(self.cli), "publish", *self.common, "--ecds", str(self.ecds_dir)],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        deadline = time.monotonic() + 15
        while self.reloads() <= before:
            assert time.monotonic() < deadline, "the new configuration was not applied"
            time.sleep(0.05)


@contextlib.contextmanager
def reloading(cli: Path, wasm_path: Path, base: Path, quotas_yaml: str,
              extra: tuple[str, ...] = ()) -> Iterator[Reloading]:
    """A [`Reloading`] Envoy in `base`; `extra`: more `envoy`/`publish` arguments."""
    from harness import free_port, start_mcp_server
    from harness.manifests import gateway, http_listener, tools_topology
    from test_ecds import policy

    manifests, ecds_dir = base / "manifests", base / "ecds"
    manifests.mkdir(parents=True, exist_ok=True)
    (manifests / "gateway.yaml").write_text(tools_topology(gateway(http_listener("plain", 80)), "{name: gw}"))
    (manifests / "policy.yaml").write_text(policy(["echo", "add"]))
    (manifests / "quotas.yaml").write_text(quotas_yaml)
    with start_mcp_server(base / "logs", name=f"{base.name}-tools") as server:
        plain, admin = free_port(), free_port()
        common = ["-f", str(manifests), "--wasm", str(wasm_path), "--listen", f"plain={plain}", *extra]
        r = subprocess.run([str(cli), "envoy", *common, "--ecds", str(ecds_dir),
                            "--resolve", f"tools-server=127.0.0.1:{server.port}",
                            "--bind", "127.0.0.1", "--admin-port", str(admin), "-o", str(base / "envoy.json")],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        proxy = EnvoyProcess(json.loads((base / "envoy.json").read_text()), workdir=base / "envoy",
                             name=f"{base.name}-envoy", concurrency=2).start()
        try:
            yield Reloading(cli, manifests, ecds_dir, common, f"http://127.0.0.1:{plain}/mcp", proxy)
        finally:
            proxy.stop()


def test_a_reload_keeps_an_unchanged_limits_count_and_restarts_a_changed_one(cli: Path, wasm_path: Path,  # noqa: F811
                                                                            work_dir: Path) -> None:
    with reloading(cli, wasm_path, work_dir / "ratelimit-reload", quotas(2)) as rig:
        assert rig.statuses("echo", 2) == [200, 200]
        assert rig.statuses("add", 2) == [200, 200]
        assert rig.statuses("add", 1) == [429]
        # `changed` allows 4 from now on; `kept` is the same limit.
        rig.publish(quotas(4))
        # kept: its two calls still count (one left); changed: starts again at zero.
        assert rig.statuses("echo", 2) == [200, 429]
        assert rig.statuses("add", 5) == [200, 200, 200, 200, 429]
        proxy = rig.proxy
    log = proxy.log_path.read_text()
    # The slots were created once (the first configuration's canary); reloads and workers found them.
    created = [line for line in log.splitlines() if "rate limit store: 25000 slots created in" in line]
    assert len(created) == 1, created
    print(created[0])
