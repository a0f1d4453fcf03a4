"""Policy bundles of the benchmark scenarios.

Every bundle describes one Gateway listener on the benchmark port and a backend reached through
the Envoy route `tools`. The inline tool policy is the same everywhere: `tools/call` of `echo`
is allowed (plus base protocol), every other tool is denied. The native chain enforces the same
policy with `envoy.filters.http.mcp` + `rbac` (see configs.py).

The large bundle (S5) is built by a fixed recipe; filter/engine/benches/decide.rs builds the very same
document (run.py checks that both produce identical JSON).
"""

from __future__ import annotations

from typing import Any

from harness import bundles as b

NAMESPACE = "bench"
GATEWAY = "gw"
ROUTE = "tools"
ALLOWED_TOOL = "echo"
DENIED_TOOL = "delete_everything"
MAX_BODY_BYTES = 2 * 1024 * 1024

# S5 shape
S5_BACKENDS = 100
S5_POLICIES_PER_BACKEND = 10
S5_TOOLS_PER_POLICY = 10
S5_ROUTED_BACKEND = 42  # the backend Envoy's `tools` route leads to


def s5_tool(backend: int, policy: int, tool: int) -> str:
    return f"tool-{backend:03}-{policy:02}-{tool:02}"


S5_ALLOWED_TOOL = s5_tool(S5_ROUTED_BACKEND, S5_POLICIES_PER_BACKEND - 1, S5_TOOLS_PER_POLICY - 1)
S5_DENIED_TOOL = s5_tool(S5_ROUTED_BACKEND + 1, 0, 0)  # another backend's tool


def tool_rule(name: str, tools: list[str]) -> dict[str, Any]:
    return b.rule(name, b.calls(*tools, base=True))


def _base(port: int, backends: list[dict[str, Any]]) -> dict[str, Any]:
    return b.bundle(gateways=[b.gateway({"mcp": port}, GATEWAY, NAMESPACE)], backends=backends, authorizers=[],
                    limits={"maxBodyBytes": MAX_BODY_BYTES})


def _tools_backend() -> dict[str, Any]:
    return b.backend("tools", ROUTE, namespace=NAMESPACE)


def inline_policy(seniority: int = 1) -> dict[str, Any]:
    """S2: the Gateway-level Allow policy the native rbac filter mirrors."""
    return b.policy("allow-echo", "Gateway", GATEWAY, "Allow", namespace=NAMESPACE, seniority=seniority,
                    rules=[tool_rule("echo-only", [ALLOWED_TOOL])])


def s2(port: int) -> dict[str, Any]:
    doc = _base(port, [_tools_backend()])
    doc["policies"] = [inline_policy()]
    return doc


def global_limit(port: int, limit: str, cluster: str, timeout_ms: int) -> dict[str, Any]:
    """G: the S2 policy plus one Global rate limit `limit` (namespace/policy/name) on every
    tools/call at the Gateway, per `request.host`, asked of the RateLimitService on `cluster`."""
    namespace, policy, name = limit.split("/")
    doc = s2(port)
    doc["rateLimits"] = [{"namespace": namespace, "policy": policy, "name": name, "level": "Gateway", "mode": "Global",
                          "targets": [{"name": GATEWAY, "namespace": NAMESPACE}],
                          "rates": [{"limit": 2**31, "windowSeconds": 3600}], "counters": ["request.host"], "when": []}]
    doc["rateLimitService"] = {"cluster": cluster, "timeoutMs": timeout_ms}
    return doc


def s2_limited(port: int) -> dict[str, Any]:
    """S2 with one Local rate limit charged on every allowed call (keyed by the tool name; a
    limit never reached)."""
    doc = s2(port)
    doc["rateLimits"] = [{"namespace": NAMESPACE, "policy": "quotas", "name": "calls", "level": "Backend",
                          "targets": [{"name": "tools"}], "rates": [{"limit": 2**31, "windowSeconds": 60}],
                          "counters": ["request.mcp.tool_name"], "when": []}]
    return doc


def authorizer(name: str, cluster: str, timeout_ms: int = 1000, protocol: str = "HTTP") -> dict[str, Any]:
    if protocol == "GRPC":
        return b.authorizer(name, cluster, timeout_ms, protocol="GRPC")
    return b.authorizer(name, cluster, timeout_ms, pathPrefix="/authz")


def ext_auth_policy(name: str, level: str, target: str, authz: str, seniority: int) -> dict[str, Any]:
    return b.policy(name, level, target, "ExternalAuth", namespace=NAMESPACE, externalAuth=authz, seniority=seniority)


# P10: answers reused for a minute; the authorizer's `authorization` (always sent) is declared
# irrelevant (the benchmark's requests carry none).
CACHE = {"ttlMs": 60_000, "ignoredHeaders": ["authorization"]}


def with_authorizers(port: int, gateway: list[str], backend: list[str], protocol: str = "HTTP",
                     cache: bool = False) -> dict[str, Any]:
    """S3/S4: the S2 policy plus ExternalAuth policies (no rules: every request) calling the
    given authorizer clusters, at the Gateway and at the Backend level (P10: caching answers)."""
    doc = s2(port)
    seniority = 10
    for i, cluster in enumerate(gateway):
        name = f"gw-authz-{i}"
        doc["authorizers"].append(authorizer(name, cluster, protocol=protocol))
        if cache:
            doc["authorizers"][-1]["cache"] = dict(CACHE)
        doc["policies"].append(ext_auth_policy(name, "Gateway", GATEWAY, name, seniority))
        seniority += 1
    for i, cluster in enumerate(backend):
        name = f"be-authz-{i}"
        doc["authorizers"].append(authorizer(name, cluster, protocol=protocol))
        doc["policies"].append(ext_auth_policy(name, "Backend", "tools", name, seniority))
        seniority += 1
    return doc


def s5(port: int, n_backends: int = S5_BACKENDS, routed: int = S5_ROUTED_BACKEND) -> dict[str, Any]:
    """10,000 tools in 1,000 Backend-level Allow policies over 100 backends (P8: 100,000 tools in
    10,000 policies over 1,000 backends with n_backends=1000); Envoy's `tools` route leads to
    backend `routed` (42; P8: the last one, whose policies come last in the bundle)."""
    backends = []
    policies = []
    for bi in range(n_backends):
        name = f"backend-{bi:03}"
        route = ROUTE if bi == routed else f"route-{bi:03}"
        backends.append(b.backend(name, route, namespace=NAMESPACE))
        for pi in range(S5_POLICIES_PER_BACKEND):
            tools = [s5_tool(bi, pi, ti) for ti in range(S5_TOOLS_PER_POLICY)]
            policies.append(b.policy(f"{name}-allow-{pi:02}", "Backend", name, "Allow", namespace=NAMESPACE,
                                     seniority=bi * S5_POLICIES_PER_BACKEND + pi,
                                     rules=[tool_rule(f"tools-{pi:02}", tools)]))
    doc = _base(port, backends)
    doc["policies"] = policies
    return doc


def tools_call_body(tool: str, text: str = "hi") -> bytes:
    return (
        '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"'
        + tool
        + '","arguments":{"text":"'
        + text
        + '"}}}'
    ).encode()


def mib_body(tool: str, size: int = 1024 * 1024) -> bytes:
    """A tools/call body of exactly `size` bytes (the argument text pads it)."""
    empty = len(tools_call_body(tool, ""))
    return tools_call_body(tool, "x" * (size - empty))


# P8 shape: S5 scaled tenfold (100,000 tools, 10,000 policies, 1,000 backends).
P8_BACKENDS = 1000


P8_ROUTED_BACKEND = P8_BACKENDS - 1  # the last: any per-request scan over policies would show
P8_ALLOWED_TOOL = s5_tool(P8_ROUTED_BACKEND, S5_POLICIES_PER_BACKEND - 1, S5_TOOLS_PER_POLICY - 1)
P8_DENIED_TOOL = s5_tool(0, 0, 0)  # another backend's tool


def p8(port: int) -> dict[str, Any]:
    return s5(port, P8_BACKENDS, P8_ROUTED_BACKEND)


# P7: a 1,000-tool tools/list answer filtered per caller (as filter/engine/benches/listing.rs).
LIST_TOOLS = 1000


def list_tool(i: int) -> str:
    return f"tool-{i:04}"


def listing_bundle(port: int) -> dict[str, Any]:
    """Every caller may call the even-numbered tools; a Gateway Deny removes every tenth: 400 of
    the 1,000 listed tools remain."""
    doc = _base(port, [_tools_backend()])
    doc["policies"] = [
        b.policy("allow-half", "Backend", "tools", "Allow", namespace=NAMESPACE,
                 rules=[tool_rule("half", [list_tool(i) for i in range(0, LIST_TOOLS, 2)])]),
        b.policy("deny-tenth", "Gateway", GATEWAY, "Deny", namespace=NAMESPACE,
                 rules=[b.rule("tenth", b.calls(*[list_tool(i) for i in range(0, LIST_TOOLS, 10)]))]),
    ]
    return doc


LIST_KEPT = 400


def listing_result() -> str:
    """The upstream's answer: 1,000 tools with a description and an input schema (about 244 KB)."""
    tools = ",".join(
        '{"name":"' + list_tool(i) + '","description":"Tool number ' + str(i) + ', which does one thing well.",'
        '"inputSchema":{"type":"object","properties":{"text":{"type":"string","description":"what to work on"},'
        '"count":{"type":"integer","minimum":0}},"required":["text"]}}'
        for i in range(LIST_TOOLS))
    return '{"jsonrpc":"2.0","id":1,"result":{"tools":[' + tools + '],"nextCursor":"next"}}'


def listing_sse() -> str:
    return "event: message\ndata: " + listing_result() + "\n\n"


def tools_list_body() -> bytes:
    return b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
