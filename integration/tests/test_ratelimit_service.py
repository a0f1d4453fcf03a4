"""The RateLimitService of the demo and CI (envoy-demo/ratelimit, docs/ratelimit-service.md) is a
real one: Envoy's own `envoy.filters.http.ratelimit` filter (descriptors from the route's
`rate_limits` actions) calls it over gRPC and it counts in a real Redis, so that two Envoys (each
through its own service instance) share one count, a restarted service keeps the count, and a
Redis that is down makes it answer UNAVAILABLE, which Envoy's `failure_mode_deny` turns into a
refusal."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import grpc
import pytest
from envoy.service.ratelimit.v3 import rls_pb2

from harness import BackgroundHttpServer, Cluster, EnvoyProcess, Listener, Route, build_bootstrap, free_port, get
from harness.ratelimit import (
    DOMAIN,
    RateLimitService,
    Redis,
    header_actions,
    native_filter,
    service_binary,
    service_cluster,
    start_ratelimit,
    start_redis,
)
from harness.procs import REPO_ROOT

OK, OVER = rls_pb2.RateLimitResponse.OK, rls_pb2.RateLimitResponse.OVER_LIMIT
MINUTE = rls_pb2.RateLimitResponse.RateLimit.MINUTE
LIMITS: list[dict[str, Any]] = [
    {"namespace": DOMAIN, "name": "tools-per-user", "max_value": 3, "seconds": 60,
     "conditions": ["descriptors[0].limit == 'tools'"], "variables": ["descriptors[0].user"]},
    {"namespace": DOMAIN, "name": "writes-per-user", "max_value": 1, "seconds": 3600,
     "conditions": ["descriptors[0].limit == 'writes'"], "variables": ["descriptors[0].user"]},
]


class _Ok(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def logs(work_dir: Path) -> Path:
    return work_dir / "ratelimit-service"


@pytest.fixture(scope="module")
def redis(logs: Path) -> Iterator[Redis]:
    with start_redis(logs) as r:
        yield r


@pytest.fixture(scope="module")
def service(logs: Path, redis: Redis) -> Iterator[RateLimitService]:
    with start_ratelimit(logs, LIMITS, redis=redis) as s:
        yield s


@pytest.fixture(scope="module")
def upstream() -> Iterator[BackgroundHttpServer]:
    server = BackgroundHttpServer(_Ok)
    yield server
    server.close()


def user() -> str:
    return f"u-{uuid.uuid4().hex[:8]}"


def envoy(logs: Path, name: str, service: RateLimitService, upstream: BackgroundHttpServer,
          route_action: bool = False) -> EnvoyProcess:
    """Envoy with its native ratelimit filter: descriptor (limit=tools, user=<x-user>) on /, from
    the filter's per-route config, or with `route_action` from the route's own `rate_limits`."""
    port = free_port()
    actions = header_actions("limit", "tools", "x-user", "user")
    if route_action:
        per_route = actions["typed_per_filter_config"]["envoy.filters.http.ratelimit"]
        actions = {"route": {"cluster": "up", "rate_limits": per_route["rate_limits"]}}
    cfg = build_bootstrap(
        admin_port=free_port(),
        listeners=[Listener(name="l", port=port, extra_filters=[native_filter()], routes=[
            Route(name="r", prefix="/", cluster="up", extra=actions)])],
        clusters=[Cluster(name="up", port=upstream.port), service_cluster(service)],
    )
    env = EnvoyProcess(cfg, workdir=logs / name, name=name)
    env.port = port  # type: ignore[attr-defined]
    return env


def through(env: EnvoyProcess, who: str) -> int:
    return get(f"http://127.0.0.1:{env.port}/", headers={"x-user": who}).status  # type: ignore[attr-defined]


def test_should_rate_limit_counts_per_descriptor_with_statuses(service: RateLimitService) -> None:
    who = user()
    answers = [service.should_rate_limit(DOMAIN, [[("limit", "tools"), ("user", who)]]) for _ in range(4)]
    assert [a.overall_code for a in answers] == [OK, OK, OK, OVER]
    assert [a.statuses[0].limit_remaining for a in answers] == [2, 1, 0, 0]
    last = answers[-1].statuses[0]
    assert (last.code, last.current_limit.name, last.current_limit.requests_per_unit, last.current_limit.unit) == (
        OVER, "tools-per-user", 3, MINUTE)
    assert 0 < last.duration_until_reset.ToTimedelta().total_seconds() <= 60
    # Another counter value is another count; a descriptor no limit selects is OK without a limit.
    assert service.should_rate_limit(DOMAIN, [[("limit", "tools"), ("user", user())]]).overall_code == OK
    free = service.should_rate_limit(DOMAIN, [[("limit", "none"), ("user", who)]])
    assert (free.overall_code, free.statuses[0].code, free.statuses[0].HasField("current_limit")) == (OK, OK, False)


def test_a_request_refused_by_one_descriptor_charges_none(service: RateLimitService) -> None:
    who = user()
    writes, tools = [("limit", "writes"), ("user", who)], [("limit", "tools"), ("user", who)]
    assert service.should_rate_limit(DOMAIN, [writes]).overall_code == OK  # the 1 write an hour
    refused = service.should_rate_limit(DOMAIN, [tools, writes])
    assert refused.overall_code == OVER
    assert [s.code for s in refused.statuses] == [OK, OVER]
    assert refused.statuses[0].limit_remaining == 3  # not charged
    three = service.should_rate_limit(DOMAIN, [tools], hits_addend=3)
    assert (three.overall_code, three.statuses[0].limit_remaining) == (OK, 0)


def test_a_descriptors_own_limit_override_counts_per_entry_values(service: RateLimitService) -> None:
    who = user()
    mine = [("generic_key", "override"), ("user", who)]
    answers = [service.should_rate_limit("other-domain", [mine], override=(2, "MINUTE")) for _ in range(3)]
    assert [a.overall_code for a in answers] == [OK, OK, OVER]
    assert (answers[0].statuses[0].current_limit.requests_per_unit, answers[0].statuses[0].current_limit.unit) == (2, MINUTE)
    # The file's limits are not consulted for it: (limit=tools) with an override of 1 counts 1.
    tools = [("limit", "tools"), ("user", who)]
    assert [service.should_rate_limit(DOMAIN, [tools], override=(1, "HOUR")).overall_code for _ in range(2)] == [OK, OVER]
    assert service.should_rate_limit(DOMAIN, [tools]).statuses[0].limit_remaining == 2  # the file's count is apart


def test_malformed_requests_are_errors_not_answers(service: RateLimitService) -> None:
    with pytest.raises(grpc.RpcError) as empty:
        service.should_rate_limit("", [[("limit", "tools"), ("user", user())]])
    assert empty.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as unknown:  # a misspelt domain would otherwise count nothing
        service.should_rate_limit("mcp-acess", [[("limit", "tools"), ("user", user())]])
    assert unknown.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert unknown.value.details() == 'domain "mcp-acess" has no limits (the limits file names mcp-access)'
    for override, entries in (((1, "MONTH"), [("k", "v")]), ((1, "MINUTE"), [("k'] || true || ['", "v")])):
        with pytest.raises(grpc.RpcError) as refused:
            service.should_rate_limit(DOMAIN, [entries], override=override)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, override


def test_a_limits_file_with_a_typo_is_refused_naming_the_entry(logs: Path, redis: Redis) -> None:
    typo = [{"namespace": DOMAIN, "max_vaule": 3, "seconds": 60}]
    with pytest.raises(RuntimeError) as refused:
        start_ratelimit(logs, typo, redis=redis, name="ratelimit-typo")
    assert 'limit 0: unknown key "max_vaule"' in str(refused.value)


def test_the_compose_demos_limits_file_is_accepted() -> None:
    limits = REPO_ROOT / "envoy-demo" / "ratelimit" / "limits.yaml"
    out = subprocess.run([service_binary(), "--check", "--limits", limits], capture_output=True, text=True, timeout=30)
    assert (out.returncode, out.stdout.strip()) == (0, "2 limits: ok"), out.stderr


def test_envoys_native_filter_through_the_service(logs: Path, service: RateLimitService,
                                                  upstream: BackgroundHttpServer) -> None:
    with envoy(logs, "envoy-native", service, upstream, route_action=True) as env:
        who = user()
        assert [through(env, who) for _ in range(3)] == [200, 200, 200]
        refused = get(f"http://127.0.0.1:{env.port}/", headers={"x-user": who})  # type: ignore[attr-defined]
        # Envoy's own x-ratelimit headers (draft 03) come from the service's descriptor status.
        assert (refused.status, refused.headers.get("x-envoy-ratelimited")) == (429, "true")
        assert refused.headers.get("x-ratelimit-limit", "").startswith("3, 3;w=60"), refused.headers
        assert refused.headers.get("x-ratelimit-remaining") == "0", refused.headers
        assert 0 < int(refused.headers.get("x-ratelimit-reset", "0")) <= 60, refused.headers
        assert through(env, user()) == 200
        stats = env.stats("ratelimit")
        assert stats.get("cluster.up.ratelimit.over_limit") == 1, stats


def test_two_envoys_share_one_count_through_redis(logs: Path, redis: Redis, service: RateLimitService,
                                                  upstream: BackgroundHttpServer) -> None:
    with start_ratelimit(logs, LIMITS, redis=redis, name="ratelimit-second") as second, \
            envoy(logs, "envoy-a", service, upstream) as a, envoy(logs, "envoy-b", second, upstream) as b:
        who = user()
        assert [through(a, who), through(b, who), through(a, who), through(b, who), through(a, who)] == [
            200, 200, 200, 429, 429]


def test_a_restarted_service_keeps_the_count_and_envoy_denies_meanwhile(
        logs: Path, redis: Redis, upstream: BackgroundHttpServer) -> None:
    with start_ratelimit(logs, LIMITS, redis=redis, name="ratelimit-restarted") as svc, \
            envoy(logs, "envoy-restart", svc, upstream) as env:
        who = user()
        assert [through(env, who), through(env, who)] == [200, 200]
        svc.stop()
        assert through(env, who) == 500  # failure_mode_deny: no limiter, no request
        svc.start()
        assert [through(env, who), through(env, who)] == [200, 429]


def test_redis_down_is_unavailable_and_recovers(logs: Path, upstream: BackgroundHttpServer) -> None:
    with start_redis(logs, name="redis-down") as down, \
            start_ratelimit(logs, LIMITS, redis=down, name="ratelimit-redis-down") as svc, \
            envoy(logs, "envoy-redis-down", svc, upstream) as env:
        who = user()
        assert through(env, who) == 200
        down.stop()
        with pytest.raises(grpc.RpcError) as unavailable:
            svc.should_rate_limit(DOMAIN, [[("limit", "tools"), ("user", who)]])
        assert unavailable.value.code() == grpc.StatusCode.UNAVAILABLE
        assert through(env, who) == 500
        down.start()  # empty: this Redis keeps nothing on disk
        deadline = time.monotonic() + 10
        while through(env, who) != 200:  # the service reconnects on a call after Redis is back
            assert time.monotonic() < deadline, svc.log_text()[-2000:]
            time.sleep(0.2)
        assert [through(env, who), through(env, who), through(env, who)] == [200, 200, 429]


def test_a_changed_max_value_keeps_the_count_a_changed_window_starts_anew(
        logs: Path, redis: Redis, service: RateLimitService) -> None:
    who = user()
    tools = [("limit", "tools"), ("user", who)]
    assert [service.should_rate_limit(DOMAIN, [tools]).statuses[0].limit_remaining for _ in range(2)] == [2, 1]
    higher = [{**LIMITS[0], "max_value": 5}]
    with start_ratelimit(logs, higher, redis=redis, name="ratelimit-higher") as svc:
        assert svc.should_rate_limit(DOMAIN, [tools]).statuses[0].limit_remaining == 2  # 5 - 3
    longer = [{**LIMITS[0], "seconds": 120}]
    with start_ratelimit(logs, longer, redis=redis, name="ratelimit-longer") as svc:
        assert svc.should_rate_limit(DOMAIN, [tools]).statuses[0].limit_remaining == 2  # 3 - 1


def test_a_condition_that_errs_on_a_callers_value_refuses_that_call_only(logs: Path, redis: Redis) -> None:
    numeric = [{"namespace": DOMAIN, "name": "n", "max_value": 10, "seconds": 60,
                "conditions": ["int(descriptors[0].n) > 5"], "variables": []}]
    with start_ratelimit(logs, numeric, redis=redis, name="ratelimit-numeric") as svc:
        assert svc.should_rate_limit(DOMAIN, [[("n", "7")]]).overall_code == OK
        with pytest.raises(grpc.RpcError) as refused:  # limitador panics here; the service answers
            svc.should_rate_limit(DOMAIN, [[("n", "seven")]])
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert refused.value.details() == 'limit "n": a condition failed on this descriptor'
        assert svc.should_rate_limit(DOMAIN, [[("n", "7")]]).statuses[0].limit_remaining == 8
