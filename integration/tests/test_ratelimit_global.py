"""Global rate limits through real Envoy 1.40 and the real RateLimitService (envoy-demo/ratelimit:
limitador counting in a real Redis; docs/semantics.md §8.6): the filter asks it once per allowed
request, two Envoys share one count, the official Python and TypeScript SDKs surface the 429, a
denied request consumes nothing, and a limiter that is down, answers garbage or hangs follows the
limit's failureMode (Deny refuses, Allow lets through; both recorded and counted), and a
configuration reload keeps an unchanged limit's count in the limiter while a changed one gets a
new key. What the limiter saw is read in the limiter (its Redis keys and its conditions), not in
our own log."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import MCPError

from harness import ALPHA, BETA, Cluster, Denied, McpServerProc, Pki, Route, free_port, text_of
from harness import bundles as b
from harness.ratelimit import DOMAIN, RateLimitService, Redis, start_ratelimit, start_redis
from harness.stack import Listen, Stack
from test_cli_e2e import cli  # noqa: F401  (the mcp-access binary fixture)
from test_ratelimit import CLIENTS, quotas, reloading, run_client

LIMIT = 3
POLICY = "mcp/quotas"
ECHO = f"{POLICY}/echo-global"
TEXT = f"{POLICY}/per-text"
SUBJECT = f"{POLICY}/echo-per-subject"
GAMMA = "spiffe://example.org/ns/agents/sa/gamma"


def limiter_limits() -> list[dict[str, Any]]:
    """The limiter's limits (Limitador's format) for the bundle's Global limits: what it counts
    by is the descriptor's bucket key; its conditions also read the policy, the limit and the
    counter value, so a descriptor naming them wrongly would count nothing (and the 4th call
    would pass)."""
    def limit(name: str, max_value: int, counter_condition: str) -> dict[str, Any]:
        return {"namespace": DOMAIN, "name": name, "max_value": max_value, "seconds": 3600,
                "conditions": [f"descriptors[0]['mcp_access.policy'] == '{POLICY}'",
                               f"descriptors[0]['mcp_access.limit'] == '{name}'", counter_condition],
                "variables": ["descriptors[0]['mcp_access.key']", "descriptors[0]['mcp_access.counter.0']"]}
    return [limit(ECHO, LIMIT, "descriptors[0]['mcp_access.counter.0'].startsWith('spiffe://example.org/')"),
            limit(TEXT, 2, "size(descriptors[0]['mcp_access.counter.0']) > 0"),
            limit(SUBJECT, 2, "descriptors[0]['mcp_access.counter.0'].startsWith('global-')")]


def global_limit(name: str, counters: list[str], when: list[str], failure: str = "Deny",
                 limit: int = LIMIT) -> dict[str, Any]:
    return {"namespace": "mcp", "policy": "quotas", "name": name, "level": "Backend", "mode": "Global",
            "failureMode": failure, "targets": [{"name": "tools"}],
            "rates": [{"limit": limit, "windowSeconds": 3600}], "counters": counters, "when": when}


def bundle(port: int, limits: list[dict[str, Any]], cluster: str = "rls", timeout_ms: int = 500,
           listener: str = "https", source: Any = None, issuer: str | None = None) -> dict[str, Any]:
    """alpha and beta (or `source`, JWTs of `issuer`) may call echo and get_weather; `limits`
    are charged."""
    sources = [source] if source is not None else [b.spiffe(ALPHA), b.spiffe(BETA)]
    return b.bundle(
        identity=b.identity(jwt_issuers=[issuer]) if issuer else b.identity(),
        gateways=[b.gateway({listener: port})],
        backends=[b.backend("tools", "tools-route")],
        policies=[b.policy("agents", "Backend", "tools", "Allow", rules=[
            b.rule(f"r{i}", b.calls("echo", "get_weather", base=True), source=s) for i, s in enumerate(sources)])],
        rateLimits=limits,
        rateLimitService={"cluster": cluster, "timeoutMs": timeout_ms, "domain": DOMAIN},
    )


def echo_limits() -> list[dict[str, Any]]:
    return [global_limit("echo-global", ["source.principal"], ["request.mcp.tool_name == 'echo'"]),
            global_limit("per-text", ["string(request.mcp.params.arguments.city)"],
                         ["request.mcp.tool_name == 'get_weather'"], limit=2)]


@pytest.fixture(scope="module")
def redis(work_dir: Path) -> Iterator[Redis]:
    with start_redis(work_dir / "global-rls", name="redis-global") as r:
        yield r


@pytest.fixture(scope="module")
def rls(work_dir: Path, redis: Redis) -> Iterator[RateLimitService]:
    with start_ratelimit(work_dir / "global-rls", limiter_limits(), redis=redis, name="rls-global") as s:
        yield s


def stack_with(name: str, work_dir: Path, mcp_server: McpServerProc, wasm: Path, pki: Pki,
               limits: list[dict[str, Any]], rls_port: int, http2: bool = True, timeout_ms: int = 500) -> Any:
    return Stack.start(name, work_dir=work_dir, wasm=wasm, bundle=lambda p: bundle(p["https"], limits,
                                                                                  timeout_ms=timeout_ms),
                       routes=[Route("tools-route", "/mcp", "tools")],
                       upstreams=[Cluster("tools", port=mcp_server.port), Cluster("rls", port=rls_port, http2=http2)],
                       pki=pki, path="/mcp")


@pytest.fixture(scope="module")
def two(work_dir: Path, mcp_server: McpServerProc, wasm_path: Path, pki: Pki,
        rls: RateLimitService) -> Iterator[tuple[Stack, Stack]]:
    with stack_with("global-1", work_dir, mcp_server, wasm_path, pki, echo_limits(), rls.port) as one, \
            stack_with("global-2", work_dir, mcp_server, wasm_path, pki, echo_limits(), rls.port) as other:
        yield one, other


def call(tool: str, raw_name: str | None = None, **arguments: str) -> str:
    name = raw_name if raw_name is not None else json.dumps(tool)
    args = json.dumps(arguments or {"text": "x"})
    return '{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":%s,"arguments":%s}}' % (name, args)


def redis_keys(redis: Redis) -> list[str]:
    out = subprocess.run(["redis-cli", "-p", str(redis.port), "--raw", "KEYS", "*"], capture_output=True,
                         text=True, timeout=10, check=True)
    return [k for k in out.stdout.splitlines() if k]


def test_two_envoys_share_one_global_count_and_the_limiter_sees_policy_limit_and_caller(
        two: tuple[Stack, Stack], redis: Redis) -> None:
    one, other = two
    statuses = [(one if i % 2 else other).post(call("echo"), who=BETA).status for i in range(LIMIT + 2)]
    assert statuses == [200] * LIMIT + [429, 429], statuses
    r = one.post(call("echo"), who=BETA, tag=True)
    assert r.status == 429, r.text
    body = json.loads(r.text)
    assert body["error"]["code"] == 429
    assert body["error"]["data"]["limit"] == ECHO and body["error"]["data"]["reason"] == "rate_limited"
    assert 0 < int(r.headers["retry-after"]) <= 3600
    assert r.headers["ratelimit-policy"] == f'"{ECHO}";q={LIMIT};w=3600'
    d = one.decision()
    assert (d["decision"], d["reason"], d["level"]) == ("deny", "rate_limited", "backend"), d
    assert d["limits"] == {"charged": [ECHO], "refused": ECHO}, d
    # The limiter's own keys: the caller's SPIFFE ID (a counter value) is in one of them.
    keys = redis_keys(redis)
    assert any(BETA in k for k in keys), keys
    # Its per-limit counters, both Envoys together.
    charged = sum(s.counter(f"ratelimit.{ECHO}.charged") for s in two)
    refused = sum(s.counter(f"ratelimit.{ECHO}.refused") for s in two)
    assert (charged, refused) == (LIMIT, 3), (charged, refused)


def test_a_denied_request_consumes_nothing_and_escapes_count_as_the_tool(
        two: tuple[Stack, Stack], redis: Redis) -> None:
    one, _ = two
    for _ in range(LIMIT + 2):
        assert one.post(call("echo"), who=GAMMA).status == 403
    assert not any(GAMMA in k for k in redis_keys(redis)), "a denied request reached the limiter"
    # alpha: the tool name through a JSON escape is echo, counted in alpha's bucket.
    escaped = [one.post(call("echo", raw_name='"\\u0065cho"'), who=ALPHA).status for _ in range(LIMIT + 1)]
    assert escaped == [200] * LIMIT + [429], escaped


def test_the_python_sdk_surfaces_the_global_429(two: tuple[Stack, Stack]) -> None:
    _, other = two
    # alpha's bucket is full (the test before): the SDK's first call is refused.
    with other.agent(ALPHA) as a:
        with pytest.raises((Denied, MCPError)) as refused:
            a.call_tool("echo", {"text": "one too many"})
        err = refused.value.__cause__ if isinstance(refused.value, Denied) else refused.value
        assert isinstance(err, MCPError), repr(refused.value)
        assert err.error.code == 429 and err.error.data["limit"] == ECHO
        # A call no Global limit selects (get_weather has its own, per text) goes through.
        assert text_of(a.call_tool("get_weather", {"city": "Lisbon"})) == "sunny in Lisbon"


def test_huge_and_distinct_counter_values_are_counted_apart_and_exactly(two: tuple[Stack, Stack]) -> None:
    one, other = two
    huge = "h" * 32_000
    seen = [(one if i % 2 else other).post(call("get_weather", city=huge), who=BETA).status for i in range(3)]
    assert seen == [200, 200, 429], seen
    # A value differing in its last character is another bucket; a short one too.
    assert one.post(call("get_weather", city=huge[:-1] + "i"), who=BETA).status == 200
    assert one.post(call("get_weather", city="\u00e9"), who=BETA).status == 200


# -- both official SDK clients by verified JWT -----------------------------------------------------


@pytest.fixture(scope="module")
def jwt_stack(work_dir: Path, mcp_server: McpServerProc, wasm_path: Path, jwt_keys: Any,
              rls: RateLimitService) -> Iterator[Stack]:
    limits = [global_limit("echo-per-subject", ["jwt.claims.sub"], ["request.mcp.tool_name == 'echo'"], limit=2)]
    with Stack.start("global-jwt", work_dir=work_dir, wasm=wasm_path,
                     bundle=lambda p: bundle(p["http"], limits, listener="http", source=b.jwt(jwt_keys.issuer),
                                            issuer=jwt_keys.issuer),
                     routes=[Route("tools-route", "/mcp", "tools")],
                     upstreams=[Cluster("tools", port=mcp_server.port), Cluster("rls", port=rls.port, http2=True)],
                     listeners={"http": Listen(tls=None)}, jwt=jwt_keys, path="/mcp") as s:
        yield s


@pytest.mark.parametrize("sdk", ["python", "typescript"])
def test_each_official_sdk_surfaces_the_global_429(jwt_stack: Stack, jwt_keys: Any, sdk: str) -> None:
    if sdk == "typescript" and not (CLIENTS / "node" / "node_modules").is_dir():
        pytest.fail("integration/clients/node/node_modules is missing: run scripts/setup")
    echo = 'call:echo:{"text": "hi"}'
    reports = run_client(sdk, jwt_stack.url(), jwt_keys.mint(sub=f"global-{sdk}"), echo, echo, echo)
    calls = [r for r in reports if r.get("op") == echo]
    assert [r["ok"] for r in calls] == [True, True, False], json.dumps(reports)
    e = calls[2]["error"]
    if sdk == "python":
        assert (e["class"], e["code"], e["message"]) == ("MCPError", 429, "Rate limit exceeded"), e
    else:
        assert (e["class"], e["code"]) == ("StreamableHTTPError", 429), e
        assert f'"limit":"{SUBJECT}"' in e["message"], e
    # The same subject in a token with other claims (identity spelled differently): same count.
    again = run_client(sdk, jwt_stack.url(), jwt_keys.mint({"extra": 1, "aud2": "x"}, sub=f"global-{sdk}"), echo)
    assert [r["ok"] for r in again if r.get("op") == echo] == [False], again


# -- a limiter that is down, answers garbage, or hangs ---------------------------------------------


class Listener(threading.Thread):
    """A TCP server on a free port that answers every connection `reply` (None: holds it open,
    saying nothing)."""

    def __init__(self, reply: bytes | None) -> None:
        super().__init__(daemon=True)
        self.reply, self.sock = reply, socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        self.accepted = 0

    def run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            if self.reply is None:
                self.held.append(conn)
            else:
                try:
                    conn.recv(65536)
                    conn.sendall(self.reply)
                finally:
                    conn.close()

    def close(self) -> None:
        self.sock.close()
        for c in self.held:
            c.close()


def failing_limits() -> list[dict[str, Any]]:
    """echo: failureMode Deny; get_weather: Allow."""
    return [global_limit("echo-global", ["source.principal"], ["request.mcp.tool_name == 'echo'"]),
            global_limit("weather-open", ["source.principal"], ["request.mcp.tool_name == 'get_weather'"],
                         failure="Allow")]


@pytest.mark.parametrize("limiter", ["down", "garbage", "hangs"])
def test_a_limiter_that_fails_follows_the_failure_mode_and_is_recorded(
        work_dir: Path, mcp_server: McpServerProc, wasm_path: Path, pki: Pki, limiter: str) -> None:
    server = None
    if limiter == "down":
        port = free_port()
    else:
        server = Listener(b"HTTP/1.1 200 OK\r\ncontent-length: 7\r\n\r\ngarbage" if limiter == "garbage" else None)
        server.start()
        port = server.port
    try:
        with stack_with(f"global-{limiter}", work_dir, mcp_server, wasm_path, pki, failing_limits(), port,
                        timeout_ms=300) as s:
            r = s.post(call("echo"), who=ALPHA, tag=True)
            assert r.status == 429, r.text
            data = json.loads(r.text)["error"]["data"]
            assert (data["reason"], data["limit"]) == ("rate_limiter_unavailable", ECHO), data
            d = s.decision()
            assert d["limits"]["refused"] == ECHO and d["limits"]["limiterFailed"], d
            if limiter == "hangs":
                assert d["limits"]["limiterFailed"].startswith("timed out"), d
            assert (s.counter("ratelimit.limiter_failed.refused"), s.counter("ratelimit.limiter_failed.allowed")) == (1, 0)
            r = s.post(call("get_weather", city="Lisbon"), who=ALPHA, tag=True)
            assert r.status == 200, r.text
            d = s.decision()
            assert d["decision"] == "allow" and d["limits"]["refused"] is None and d["limits"]["limiterFailed"], d
            assert (s.counter("ratelimit.limiter_failed.refused"), s.counter("ratelimit.limiter_failed.allowed")) == (1, 1)
        if server is not None:
            assert server.accepted > 0, "the limiter was never called"
    finally:
        if server is not None:
            server.close()


# -- a configuration reload in the middle of a window ---------------------------------------------

def test_a_reload_keeps_an_unchanged_global_limits_count_and_gives_a_changed_one_new_buckets(
        cli: Path, wasm_path: Path, work_dir: Path, redis: Redis) -> None:  # noqa: F811
    """The limiter counts by `mcp_access.key`: a limit whose definition is unchanged keeps its
    key across a reload, so the limiter's count goes on; a changed one (here its rate in the
    bundle) has a new key, so the limiter counts it from zero, under the limiter's own limit (the
    limiter holds the rates: the bundle's new rate only names a refusal's rate)."""
    base = work_dir / "global-reload"
    key = "descriptors[0]['mcp_access.key']"
    limits = [{"namespace": DOMAIN, "name": f"mcp/quotas/{name}", "max_value": n, "seconds": 86400,
               "conditions": [f"descriptors[0]['mcp_access.limit'] == 'mcp/quotas/{name}'"], "variables": [key]}
              for name, n in [("kept", 3), ("changed", 2)]]
    with start_ratelimit(base / "rls", limits, redis=redis, name="rls-reload") as rls:
        service = ("--rate-limit-service", f"127.0.0.1:{rls.port}", "--rate-limit-domain", DOMAIN)
        with reloading(cli, wasm_path, base, quotas(2, mode="Global"), service) as rig:
            assert rig.statuses("echo", 2) == [200, 200]
            assert rig.statuses("add", 3) == [200, 200, 429]
            keys_before = set(redis_keys(redis))
            rig.publish(quotas(4, mode="Global"))
            # kept: the same key, the limiter's count goes on (one left); changed: a new key,
            # counted from zero up to the limiter's 2.
            assert rig.statuses("echo", 2) == [200, 429]
            assert rig.statuses("add", 3) == [200, 200, 429]
            new_keys = set(redis_keys(redis)) - keys_before
            assert len(new_keys) == 1 and "changed" in next(iter(new_keys)), (new_keys, keys_before)
