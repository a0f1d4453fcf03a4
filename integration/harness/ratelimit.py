"""A real RateLimitService for the tests: a private Debian `redis-server` and
envoy-demo/ratelimit's `ratelimit-service` (Envoy's `envoy.service.ratelimit.v3.RateLimitService`
on Kuadrant's limitador, counting in that Redis), each on a free loopback port.

    with start_redis(log_dir) as redis, start_ratelimit(log_dir, limits, redis=redis) as rls:
        rls.address          # "127.0.0.1:PORT", the gRPC endpoint (HTTP/2 plaintext)
        rls.should_rate_limit("mcp-access", [[("k", "v")]])   # a ShouldRateLimit call, the answer

`limits` is Limitador's limits-file format (docs/ratelimit-service.md) as a list of dicts, or None
(then every descriptor must carry its own `limit` override). Several services on one Redis
share their counts; `restart()` restarts a service or Redis on the same port.
scripts/setup installs redis-server and builds the service ($MCP_ACCESS_RATELIMIT_BIN overrides it).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .ports import free_port, port_open
from .procs import REPO_ROOT, ManagedProcess

DEFAULT_BIN = REPO_ROOT / "target" / "ratelimit" / "release" / "ratelimit-service"
DOMAIN = "mcp-access"


def service_binary() -> Path:
    path = Path(os.environ.get("MCP_ACCESS_RATELIMIT_BIN") or DEFAULT_BIN)
    if not path.is_file():
        raise FileNotFoundError(f"ratelimit-service not found at {path}: run scripts/setup (or scripts/ratelimit-service --build)")
    return path


def redis_binary() -> str:
    found = shutil.which("redis-server")
    if not found:
        raise FileNotFoundError("redis-server not found: run scripts/setup (Debian package redis-server)")
    return found


class _Served:
    """A process serving on one loopback port, restartable on that port."""

    def __init__(self, name: str, argv: list[str], port: int, log_dir: Path) -> None:
        self.name, self.argv, self.port, self.log_dir = name, argv, port, Path(log_dir)
        self.proc: ManagedProcess | None = None

    def start(self, timeout: float = 20.0) -> "_Served":
        self.proc = ManagedProcess(self.argv, name=self.name, log_path=self.log_dir / f"{self.name}.log").start()
        try:
            self.proc.wait_ready(lambda: port_open(self.port), timeout=timeout, what=f"port {self.port}")
        except BaseException:
            self.proc.stop()
            raise
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()

    def restart(self) -> None:
        self.stop()
        self.start()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.alive

    def log_text(self) -> str:
        return self.proc.log_text() if self.proc else ""

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Redis(_Served):
    """A private redis-server: no persistence, loopback only, its own working directory."""

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"


class RateLimitService(_Served):
    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def should_rate_limit(
        self,
        domain: str,
        descriptors: Sequence[Sequence[tuple[str, str]]],
        hits_addend: int = 0,
        timeout: float = 5.0,
        override: tuple[int, str] | None = None,
    ) -> Any:
        """One ShouldRateLimit call (grpcio, the Envoy messages of PyPI xds-protos); the
        RateLimitResponse, or grpc.RpcError as the service answered. `override` (requests per
        unit, unit name such as "MINUTE") is set as every descriptor's `limit`."""
        import grpc
        from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
        from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc
        from envoy.type.v3 import ratelimit_unit_pb2

        limit = None
        if override is not None:
            limit = ratelimit_pb2.RateLimitDescriptor.RateLimitOverride(
                requests_per_unit=override[0], unit=ratelimit_unit_pb2.RateLimitUnit.Value(override[1]))

        request = rls_pb2.RateLimitRequest(
            domain=domain,
            hits_addend=hits_addend,
            descriptors=[
                ratelimit_pb2.RateLimitDescriptor(
                    entries=[ratelimit_pb2.RateLimitDescriptor.Entry(key=k, value=v) for k, v in entries], limit=limit
                )
                for entries in descriptors
            ],
        )
        with grpc.insecure_channel(self.address) as channel:
            return rls_pb2_grpc.RateLimitServiceStub(channel).ShouldRateLimit(request, timeout=timeout)


def start_redis(log_dir: Path, name: str = "redis") -> Redis:
    port = free_port()
    data = Path(log_dir) / f"{name}-data"
    data.mkdir(parents=True, exist_ok=True)
    argv = [
        redis_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
        "--dir", str(data), "--protected-mode", "yes",
    ]
    return Redis(name, argv, port, log_dir).start()


def start_ratelimit(
    log_dir: Path,
    limits: list[dict[str, Any]] | None,
    *,
    redis: Redis,
    name: str = "ratelimit",
) -> RateLimitService:
    """The service on a free port, counting in `redis`, with `limits` (Limitador's format)."""
    port = free_port()
    argv = [str(service_binary()), "--listen", f"127.0.0.1:{port}", "--redis", redis.url]
    if limits is not None:
        path = Path(log_dir) / f"{name}-limits.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(limits, indent=1))  # JSON is YAML
        argv += ["--limits", str(path)]
    return RateLimitService(name, argv, port, log_dir).start()


def service_cluster(service: RateLimitService, name: str = "ratelimit") -> Any:
    """Envoy's cluster for the service (gRPC: HTTP/2)."""
    from .envoy import Cluster

    return Cluster(name=name, port=service.port, http2=True)


def native_filter(cluster: str = "ratelimit", *, domain: str = DOMAIN, failure_mode_deny: bool = True,
                  timeout: float = 2.0) -> dict[str, Any]:
    """Envoy's own `envoy.filters.http.ratelimit` calling the service on `cluster`; the route's
    `rate_limits` actions make the descriptors (see `header_actions`)."""
    return {
        "name": "envoy.filters.http.ratelimit",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit",
            "domain": domain,
            "failure_mode_deny": failure_mode_deny,
            "timeout": f"{timeout:.3f}s",
            "enable_x_ratelimit_headers": "DRAFT_VERSION_03",
            "rate_limit_service": {"transport_api_version": "V3", "grpc_service": {"envoy_grpc": {"cluster_name": cluster}}},
        },
    }


def header_actions(key: str, value: str, header: str, descriptor_key: str) -> dict[str, Any]:
    """A Route's `extra` for `native_filter`: one descriptor [(generic key `key`, `value`),
    (descriptor_key, the request's `header`)] per request (none when the header is absent)."""
    return {"typed_per_filter_config": {"envoy.filters.http.ratelimit": {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute",
        "rate_limits": [{"actions": [
            {"generic_key": {"descriptor_key": key, "descriptor_value": value}},
            {"request_headers": {"header_name": header, "descriptor_key": descriptor_key}},
        ]}],
    }}}
