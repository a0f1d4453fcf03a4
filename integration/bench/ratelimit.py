"""The RateLimitService of the benchmark's Global rate-limit variants: a private Redis and
envoy-demo/ratelimit (harness.ratelimit), started once, on first use, and stopped when the
benchmark exits. Its one limit is too high to refuse, so every measured request is allowed and
charged: the cost measured is the call and the count.

`native_filter()` and `route_extra()` make Envoy's own ratelimit filter call it (the reference a
Global limit of mcp-access is compared with, issue 38); `bundles.global_limit` makes mcp-access
call it; `cluster()` is Envoy's cluster for it.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from harness.ratelimit import DOMAIN, RateLimitService, Redis, header_actions, start_ratelimit, start_redis
from harness.ratelimit import native_filter as _native_filter

CLUSTER = "ratelimit"
LIMIT = "mcp/bench/calls"
# The native filter's descriptor (limit, caller) and mcp-access's (mcp_access.limit, its bucket
# key: the limit's definition and the counter value, `request.host`): one count per caller each.
LIMITS = [{"namespace": DOMAIN, "name": LIMIT, "max_value": 10**15, "seconds": 3600,
           "conditions": [f"descriptors[0].limit == '{LIMIT}'"], "variables": ["descriptors[0].caller"]},
          {"namespace": DOMAIN, "name": LIMIT, "max_value": 10**15, "seconds": 3600,
           "conditions": [f"descriptors[0]['mcp_access.limit'] == '{LIMIT}'"],
           "variables": ["descriptors[0]['mcp_access.key']"]}]
# The native filter's timeout (harness.ratelimit.native_filter), for mcp-access's limit too.
TIMEOUT_MS = 2000

_running: tuple[Redis, RateLimitService] | None = None
_logs: Path | None = None
_lock = threading.Lock()  # Envoys are configured from several threads (run.start_envoys)


def service() -> RateLimitService:
    global _running, _logs
    with _lock:
        if _running is None:
            _logs = logs = Path(tempfile.mkdtemp(prefix="bench-ratelimit-"))
            redis = start_redis(logs)
            try:
                _running = (redis, start_ratelimit(logs, LIMITS, redis=redis))
            except BaseException:
                redis.stop()
                raise
            atexit.register(stop)
        return _running[1]


def stop() -> None:
    global _running, _logs
    if _running is not None:
        for p in reversed(_running):
            p.stop()
        _running = None
    if _logs is not None:
        shutil.rmtree(_logs, ignore_errors=True)
        _logs = None


def native_filter() -> dict[str, Any]:
    return _native_filter(CLUSTER, failure_mode_deny=True)


def route_extra() -> dict[str, Any]:
    """One descriptor per request: (limit, LIMIT), (caller, the request's `host` header)."""
    return header_actions("limit", LIMIT, ":authority", "caller")


def cluster() -> dict[str, Any]:
    return {
        "name": CLUSTER,
        "type": "STATIC",
        "connect_timeout": "1s",
        "load_assignment": {"cluster_name": CLUSTER, "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {
            "socket_address": {"address": "127.0.0.1", "port_value": service().port}}}}]}]},
        "typed_extension_protocol_options": {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
            "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
            "explicit_http_config": {"http2_protocol_options": {}},
        }},
    }
