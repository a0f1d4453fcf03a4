"""Envoy bootstraps of the benchmark: one Envoy per configuration, rendered with the
integration harness (`build_bootstrap`) and then given internal listeners.

Every Envoy has a front listener (the one measured) whose route `tools` proxies to the cluster
`upstream`. The upstream, and the HTTP authorizers, are internal listeners of the same Envoy
(`envoy.bootstrap.internal_listener`) answering with a `direct_response`: no second process, no
kernel socket between Envoy and its upstream, and all work of a request on Envoy's one worker.
Slow authorizers add a fixed delay with the `fault` filter (a timer, no CPU).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import Listener, Route, Wasm, build_bootstrap, ext_authz_filter

from . import bundles, ratelimit

T = "type.googleapis.com/"
MCP_FILTER = "envoy.filters.http.mcp"
UPSTREAM_RESULT = '{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"ok"}]}}'
BUFFER_LIMIT = 4 * 1024 * 1024  # above the 1 MiB body of S6 and the bundles' maxBodyBytes
SLOW_AUTHZ_MS = 5
LIST_JSON_PATH = "/list/json"  # the upstream answers a 1,000-tool tools/list (P7)
LIST_SSE_PATH = "/list/sse"


@dataclass
class EnvoySpec:
    """One Envoy to start: its front listener filters and the internal listeners it needs."""

    name: str
    extra_filters: list[dict[str, Any]] = field(default_factory=list)
    bundle: dict[str, Any] | None = None  # our filter with this bundle
    authorizers: list[str] = field(default_factory=list)  # internal authorizer listeners (fast)
    slow_authorizers: list[str] = field(default_factory=list)  # internal authorizer listeners with a delay
    grpc_authorizers: list[str] = field(default_factory=list)  # internal gRPC ext_authz listeners (fast)
    slow_grpc_authorizers: list[str] = field(default_factory=list)  # internal gRPC ext_authz listeners with a delay
    body_reader: bool = False  # P5's floor: the module that only reads the body (body_reader/)
    ratelimit: bool = False  # the front route's descriptors and the cluster for bench/ratelimit.py's service


# ---------------------------------------------------------------------------------------------
# The native chain: envoy.filters.http.mcp + rbac (what the upstream reference implementation
# generates), enforcing the policy of bundles.inline_policy().


def mcp_filter() -> dict[str, Any]:
    return {
        "name": MCP_FILTER,
        "typed_config": {
            "@type": T + "envoy.extensions.filters.http.mcp.v3.Mcp",
            "max_request_body_size": bundles.MAX_BODY_BYTES,
        },
    }


def _md(path: list[str], string_match: dict[str, Any]) -> dict[str, Any]:
    return {
        "sourced_metadata": {
            "metadata_matcher": {
                "filter": MCP_FILTER,
                "path": [{"key": k} for k in path],
                "value": {"string_match": string_match},
            }
        }
    }


def _header(name: str, **match: Any) -> dict[str, Any]:
    return {"header": {"name": name, **match}}


def rbac_filter() -> dict[str, Any]:
    """ALLOW: tools/call of the allowed tool, or base protocol (as the reference translates
    `baseProtocol: Match`): initialize, tools/list, ping, notifications/*, completion/*,
    logging/*, GET, DELETE with Mcp-Session-Id."""
    base = [_md(["method"], {"exact": m}) for m in ("initialize", "tools/list", "ping")]
    base += [_md(["method"], {"prefix": p}) for p in ("completion/", "logging/", "notifications/")]
    base.append(_header(":method", string_match={"exact": "GET"}))
    base.append(
        {
            "and_rules": {
                "rules": [
                    _header(":method", string_match={"exact": "DELETE"}),
                    _header("mcp-session-id", present_match=True),
                ]
            }
        }
    )
    tool = {
        "and_rules": {
            "rules": [
                _md(["method"], {"exact": "tools/call"}),
                _md(["params", "name"], {"exact": bundles.ALLOWED_TOOL}),
            ]
        }
    }
    return {
        "name": "envoy.filters.http.rbac",
        "typed_config": {
            "@type": T + "envoy.extensions.filters.http.rbac.v3.RBAC",
            "rules": {
                "action": "ALLOW",
                "policies": {"echo-only": {"principals": [{"any": True}], "permissions": [tool, *base]}},
            },
        },
    }


def native_ext_authz(cluster: str) -> dict[str, Any]:
    return ext_authz_filter(cluster, 1, path_prefix="/authz", timeout=1.0)


def native_ext_authz_grpc(cluster: str) -> dict[str, Any]:
    """Envoy's ext_authz filter calling a gRPC authorizer (as the bundle's GRPC authorizer)."""
    return {
        "name": "envoy.filters.http.ext_authz",
        "typed_config": {
            "@type": T + "envoy.extensions.filters.http.ext_authz.v3.ExtAuthz",
            "grpc_service": {"envoy_grpc": {"cluster_name": cluster}, "timeout": "1s"},
            "transport_api_version": "V3",
        },
    }


# A CheckResponse with status {code: OK}: field 1, an empty google.rpc.Status.
CHECK_RESPONSE_OK = "CgA="  # base64 of b"\x0a\x00"


def grpc_authorizer_filters() -> list[dict[str, Any]]:
    """An internal gRPC authorizer without a process: grpc_http1_reverse_bridge in front of an
    internal HTTP/1.1 listener whose direct_response is the serialized CheckResponse; the
    bridge frames it and adds grpc-status."""
    return [{
        "name": "envoy.filters.http.grpc_http1_reverse_bridge",
        "typed_config": {
            "@type": T + "envoy.extensions.filters.http.grpc_http1_reverse_bridge.v3.FilterConfig",
            "content_type": "application/x-protobuf",
            "withhold_grpc_frames": True,
        },
    }]


def fault_delay(ms: int) -> dict[str, Any]:
    return {
        "name": "envoy.filters.http.fault",
        "typed_config": {
            "@type": T + "envoy.extensions.filters.http.fault.v3.HTTPFault",
            "delay": {"fixed_delay": f"{ms / 1000:.3f}s", "percentage": {"numerator": 100, "denominator": "HUNDRED"}},
        },
    }


# ---------------------------------------------------------------------------------------------


def specs() -> dict[str, EnvoySpec]:
    """Every Envoy the benchmark starts, by name (bundles get the port later)."""
    return {
        "bare": EnvoySpec("bare"),
        "native": EnvoySpec("native", extra_filters=[mcp_filter(), rbac_filter()]),
        "ours": EnvoySpec("ours", bundle={"kind": "s2"}),
        "ours_norcpt": EnvoySpec("ours_norcpt", bundle={"kind": "s2", "receipts": False}),  # P12 (docs/audit.md)
        "ours_limited": EnvoySpec("ours_limited", bundle={"kind": "s2_limited"}),  # L1: one Local rate limit charged
        "ours_shared": EnvoySpec("ours_shared", bundle={"kind": "s2", "shared": True}),
        "native_authz": EnvoySpec(
            "native_authz", extra_filters=[mcp_filter(), native_ext_authz("authz0"), rbac_filter()], authorizers=["authz0"]
        ),
        "ours_authz": EnvoySpec("ours_authz", bundle={"kind": "authz", "gateway": ["authz0"], "backend": []}, authorizers=["authz0"]),
        "ours_authz3": EnvoySpec(
            "ours_authz3",
            bundle={"kind": "authz", "gateway": ["authz0", "authz1"], "backend": ["authz2"]},
            authorizers=["authz0", "authz1", "authz2"],
        ),
        "native_slow": EnvoySpec(
            "native_slow", extra_filters=[mcp_filter(), native_ext_authz("slow0"), rbac_filter()], slow_authorizers=["slow0"]
        ),
        "ours_slow": EnvoySpec("ours_slow", bundle={"kind": "authz", "gateway": ["slow0"], "backend": []}, slow_authorizers=["slow0"]),
        # P10: the authorizer's answers cached (docs/semantics.md §3.10), the same call repeated.
        "ours_slow_cached": EnvoySpec("ours_slow_cached", bundle={"kind": "authz", "gateway": ["slow0"], "backend": [], "cache": True},
                                      slow_authorizers=["slow0"]),
        # bench/cache_scale.py: the same cache in front of a quick authorizer, each request a new caller.
        "ours_authz_cached": EnvoySpec("ours_authz_cached", bundle={"kind": "authz", "gateway": ["authz0"], "backend": [], "cache": True},
                                       authorizers=["authz0"]),
        "ours_slow_gw2": EnvoySpec(
            "ours_slow_gw2",
            bundle={"kind": "authz", "gateway": ["slow0", "slow1"], "backend": []},
            slow_authorizers=["slow0", "slow1"],
        ),
        "ours_slow3": EnvoySpec(
            "ours_slow3",
            bundle={"kind": "authz", "gateway": ["slow0", "slow1"], "backend": ["slow2"]},
            slow_authorizers=["slow0", "slow1", "slow2"],
        ),
        "ours_large": EnvoySpec("ours_large", bundle={"kind": "s5"}),
        "native_grpc": EnvoySpec(
            "native_grpc", extra_filters=[mcp_filter(), native_ext_authz_grpc("grpc0"), rbac_filter()], grpc_authorizers=["grpc0"]
        ),
        "ours_grpc": EnvoySpec("ours_grpc", bundle={"kind": "grpc", "gateway": ["grpc0"]}, grpc_authorizers=["grpc0"]),
        "native_grpc_slow": EnvoySpec(
            "native_grpc_slow", extra_filters=[mcp_filter(), native_ext_authz_grpc("sgrpc0"), rbac_filter()],
            slow_grpc_authorizers=["sgrpc0"],
        ),
        "ours_grpc_slow": EnvoySpec("ours_grpc_slow", bundle={"kind": "grpc", "gateway": ["sgrpc0"]},
                                    slow_grpc_authorizers=["sgrpc0"]),
        "ours_list": EnvoySpec("ours_list", bundle={"kind": "list"}),
        "ours_p8": EnvoySpec("ours_p8", bundle={"kind": "p8"}),
        "body_reader": EnvoySpec("body_reader", body_reader=True),
        "native_ratelimit": EnvoySpec("native_ratelimit", extra_filters=[mcp_filter(), rbac_filter(), ratelimit.native_filter()],
                                      ratelimit=True),
        "ours_ratelimit": EnvoySpec("ours_ratelimit", bundle={"kind": "global"}, ratelimit=True),
    }


def bundle_for(spec: EnvoySpec, port: int, shared: bool = False) -> dict[str, Any] | None:
    """The bundle of `spec`'s front listener on `port`: as `mcp-access envoy` renders a filter
    chain's copy, naming the listener it serves (`envoy.listener`, plain HTTP here), unless the
    spec or `shared` says it is one copy for listeners of different ports (ECDS, Envoy Gateway,
    Istio)."""
    if spec.bundle is None:
        return None
    b = _bundle(spec.bundle, port)
    if shared or spec.bundle.get("shared"):
        return b
    return {**b, "envoy": {**b.get("envoy", {}), "listener": {"port": port, "tls": False}}}


def _bundle(spec: dict[str, Any], port: int) -> dict[str, Any]:
    kind = spec["kind"]
    if kind == "s2":
        return {**bundles.s2(port), **({} if spec.get("receipts", True) else {"decisionRecords": {"receipts": {"enabled": False}}})}
    if kind == "s2_limited":
        return bundles.s2_limited(port)
    if kind == "s5":
        return bundles.s5(port)
    if kind == "p8":
        return bundles.p8(port)
    if kind == "list":
        return bundles.listing_bundle(port)
    if kind == "global":
        return bundles.global_limit(port, ratelimit.LIMIT, ratelimit.CLUSTER, ratelimit.TIMEOUT_MS)
    if kind == "grpc":
        return bundles.with_authorizers(port, spec["gateway"], [], protocol="GRPC")
    return bundles.with_authorizers(port, spec["gateway"], spec["backend"], cache=spec.get("cache", False))


def _internal(name: str, routes: list[Route], filters: list[dict[str, Any]] = ()) -> Listener:
    return Listener(name=name, port=0, routes=routes, extra_filters=list(filters))


def bootstrap(spec: EnvoySpec, *, port: int, admin_port: int, wasm_path: Path | None,
              reader_path: Path | None = None) -> dict[str, Any]:
    """One Envoy for one configuration: its front listener is named `front`."""
    return bootstrap_many([(spec, port)], admin_port=admin_port, wasm_path=wasm_path, reader_path=reader_path)


def bootstrap_many(fronts: list[tuple[EnvoySpec, int]], *, admin_port: int, wasm_path: Path | None,
                   reader_path: Path | None = None, shared: bool = False) -> dict[str, Any]:
    """One Envoy with a front listener per (configuration, port) (`front` alone, else
    `front_<name>`), sharing the internal upstream and authorizers; filters with different
    bundles share one Wasm VM (same vm_id and code), each with its own root context. The
    body reader (P5's floor) is its own module in its own VM."""
    json_headers = {"content-type": "application/json"}
    listeners: list[Listener] = []
    internal: dict[str, Listener] = {
        "upstream": _internal("upstream", [
            Route(name="list_json", prefix=LIST_JSON_PATH, direct_response=(200, bundles.listing_result()),
                  response_headers=json_headers),
            Route(name="list_sse", prefix=LIST_SSE_PATH, direct_response=(200, bundles.listing_sse()),
                  response_headers={"content-type": "text/event-stream"}),
            Route(name="up", prefix="/", direct_response=(200, UPSTREAM_RESULT), response_headers=json_headers),
        ])
    }
    for spec, port in fronts:
        front = Listener(
            name="front" if len(fronts) == 1 else f"front_{spec.name}",
            port=port,
            routes=[Route(name=bundles.ROUTE, prefix="/", cluster="upstream", timeout=30.0,
                          extra=ratelimit.route_extra() if spec.ratelimit and spec.bundle is None else {})],
            extra_filters=spec.extra_filters,
        )
        b = bundle_for(spec, port, shared=shared)
        if b is not None:
            if wasm_path is None:
                raise ValueError(f"{spec.name} needs the filter")
            front.wasm = Wasm(wasm_path, configuration=json.dumps(b))
        elif spec.body_reader:
            if reader_path is None:
                raise ValueError(f"{spec.name} needs the body reader module")
            front.wasm = Wasm(reader_path, configuration="", root_id="", vm_id="body_reader", name="body_reader")
        listeners.append(front)
        for a in spec.authorizers:
            internal[a] = _internal(a, [Route(name=a, prefix="/", direct_response=(200, ""))])
        for a in [*spec.grpc_authorizers, *spec.slow_grpc_authorizers]:
            # The bridge needs a real (HTTP/1.1) upstream: a direct_response to a gRPC request
            # would be rendered as a gRPC local reply.
            delay = [fault_delay(SLOW_AUTHZ_MS)] if a in spec.slow_grpc_authorizers else []
            internal[a] = _internal(a, [Route(name=a, prefix="/", cluster=f"{a}_http")], [*delay, *grpc_authorizer_filters()])
            internal[f"{a}_http"] = _internal(f"{a}_http", [Route(
                name=f"{a}_http", prefix="/", direct_response=(200, ""), response_headers={"content-type": "application/x-protobuf"},
                extra={"direct_response": {"status": 200, "body": {"inline_bytes": CHECK_RESPONSE_OK}}})])
        for a in spec.slow_authorizers:
            internal[a] = _internal(a, [Route(name=a, prefix="/", direct_response=(200, ""))], [fault_delay(SLOW_AUTHZ_MS)])

    cfg = build_bootstrap(admin_port=admin_port, listeners=[*listeners, *internal.values()], clusters=[])
    for l in cfg["static_resources"]["listeners"]:
        if l["name"] == "upstream":  # the listings are larger than direct_response's default 4 KiB
            hcm = l["filter_chains"][0]["filters"][0]["typed_config"]
            hcm["route_config"]["max_direct_response_body_size_bytes"] = BUFFER_LIMIT
        if l["name"] in internal:
            del l["address"]
            l["internal_listener"] = {}
        else:
            l["per_connection_buffer_limit_bytes"] = BUFFER_LIMIT
    cfg["bootstrap_extensions"] = [
        {
            "name": "envoy.bootstrap.internal_listener",
            "typed_config": {"@type": T + "envoy.extensions.bootstrap.internal_listener.v3.InternalListener"},
        }
    ]
    grpc = {a for spec, _ in fronts for a in [*spec.grpc_authorizers, *spec.slow_grpc_authorizers]}
    cfg["static_resources"]["clusters"] = [_internal_cluster(name, http2=name in grpc) for name in internal]
    if any(spec.ratelimit for spec, _ in fronts):
        cfg["static_resources"]["clusters"].append(ratelimit.cluster())
    return cfg


def _internal_cluster(name: str, http2: bool = False) -> dict[str, Any]:
    c: dict[str, Any] = {
        "name": name,
        "connect_timeout": "1s",
        "per_connection_buffer_limit_bytes": BUFFER_LIMIT,
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {"envoy_internal_address": {"server_listener_name": name}}}}]}],
        },
    }
    if http2:
        c["typed_extension_protocol_options"] = {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
            "@type": T + "envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
            "explicit_http_config": {"http2_protocol_options": {}},
        }}
    return c
