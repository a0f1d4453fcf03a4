"""Policy bundles (the filter's configuration; docs/semantics.md) built from named parts, for the
end-to-end tests and the benchmark: the one place here that writes the bundle's shape.

    bundle(gateways=[gateway({"https": port})], backends=[backend("tools", "tools-route")],
           policies=[policy("allow", "Gateway", "gw", "Allow", rules=[rule("alpha", calls("echo"),
                                                                           source=spiffe(ALPHA))])])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

API_VERSION = "mcp-access.io/v1"
NAMESPACE = "mcp"
GATEWAY = "gw"

Doc = dict[str, Any]


def bundle(*, gateways: Sequence[Doc], backends: Sequence[Doc], policies: Sequence[Doc] = (),
           authorizers: Sequence[Doc] | None = None, identity: Doc | None = None, **more: Any) -> Doc:
    """A bundle; `more` are further top-level fields as the bundle spells them (limits,
    denyResponse, listings)."""
    out: Doc = {"apiVersion": API_VERSION}
    if identity is not None:
        out["identity"] = identity
    out["gateways"] = list(gateways)
    out["backends"] = list(backends)
    if authorizers is not None:
        out["authorizers"] = list(authorizers)
    out["policies"] = list(policies)
    return {**out, **more}


def identity(trust_domain: str = "example.org", jwt_issuers: Sequence[str] = ()) -> Doc:
    """The trust domain and the JWT providers whose verified payload jwt_authn leaves under the
    metadata key `jwt_payload` (the harness's JwtProvider)."""
    out: Doc = {"trustDomain": trust_domain}
    if jwt_issuers:
        out["jwt"] = {"providers": [{"issuer": i, "metadataKey": "jwt_payload"} for i in jwt_issuers]}
    return out


def gateway(listeners: Mapping[str, int], name: str = GATEWAY, namespace: str = NAMESPACE) -> Doc:
    """A Gateway with its listeners, by name and port."""
    return {"name": name, "namespace": namespace,
            "listeners": [{"name": n, "port": p} for n, p in listeners.items()]}


def backend(name: str, *routes: str, namespace: str = NAMESPACE) -> Doc:
    """A backend reached through the given Envoy route names."""
    return {"name": name, "namespace": namespace, "routeNames": list(routes)}


def authorizer(name: str, cluster: str, timeout_ms: int, **fields: Any) -> Doc:
    """An authorizer; `fields` as the bundle spells them (protocol, failureMode, allowedHeaders...)."""
    return {"name": name, "cluster": cluster, "timeoutMs": timeout_ms, **fields}


def policy(name: str, level: str, target: str, action: str, *, rules: Sequence[Doc] | None = None,
           seniority: int | None = None, namespace: str = NAMESPACE, **fields: Any) -> Doc:
    """A policy on one target; `fields` as the bundle spells them (externalAuth, when)."""
    out: Doc = {"name": name, "namespace": namespace, "level": level, "targets": [{"name": target}],
                "action": action}
    if seniority is not None:
        out["seniority"] = seniority
    out.update(fields)
    if rules is not None:
        out["rules"] = list(rules)
    return out


def rule(name: str, authorization: Doc | None = None, *, source: Doc | None = None, **fields: Any) -> Doc:
    """A rule: who (`source`) may do what (`authorization`); `fields` such as `when`."""
    out: Doc = {"name": name}
    if source is not None:
        out["source"] = source
    if authorization is not None:
        out["authorization"] = authorization
    return {**out, **fields}


# --- authorizations -----------------------------------------------------------------------------


def method(name: str, params: Sequence[str] | None = None) -> Doc:
    return {"name": name} if params is None else {"name": name, "params": list(params)}


def mcp(*methods: Doc, base: bool = False) -> Doc:
    """MCP methods (see method()); with `base`, the base protocol (initialize, listings...) too."""
    out: Doc = {}
    if methods:
        out["methods"] = list(methods)
    if base:
        out["baseProtocol"] = "Match"
    return {"mcp": out}


def calls(*tools: str, base: bool = False) -> Doc:
    """tools/call of the given tools (any tool when none is given)."""
    return mcp(method("tools/call", tools or None), base=base)


def header(name: str, value: str) -> Doc:
    return {"headers": [{"name": name, "value": value}]}


def cel(expression: str) -> Doc:
    return {"cel": expression}


# --- sources ------------------------------------------------------------------------------------


def spiffe(spiffe_id: str) -> Doc:
    return {"type": "SPIFFE", "spiffe": spiffe_id}


def service_account(namespace: str, name: str) -> Doc:
    return {"type": "ServiceAccount", "serviceAccount": {"namespace": namespace, "name": name}}


def jwt(issuer: str, **fields: Any) -> Doc:
    """A verified JWT of `issuer`; `fields` as the bundle spells them (subject, claims)."""
    return {"type": "JWT", "jwt": {"issuer": issuer, **fields}}
