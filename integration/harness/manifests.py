"""Kubernetes manifests the e2e tests share: a Gateway in namespace mcp, the HTTPRoute that sends
/mcp to XBackend `tools`, that XBackend (Service tools-server:8000, path /mcp)."""

from __future__ import annotations

# An Inline `mcp` block's option admitting the base protocol (initialize, ping, ...).
BASE_METHODS = "mcpBaseProtocolMethodsOption: MATCH_BASE_PROTOCOL_METHODS"

# Listener `mtls`: HTTPS on 443, terminated with Secret gateway-cert.
MTLS_LISTENER = """\
  - name: mtls
    protocol: HTTPS
    port: 443
    tls:
      mode: Terminate
      certificateRefs: [{name: gateway-cert}]
"""

# The Gateway's frontend TLS: agents' certificates are validated against ConfigMap agents-ca.
AGENTS_CA = """\
  tls:
    frontend:
      default:
        validation:
          caCertificateRefs: [{group: "", kind: ConfigMap, name: agents-ca}]
"""

TOOLS_XBACKEND = """\
apiVersion: agentic.networking.x-k8s.io/v0alpha0
kind: XBackend
metadata: {name: tools, namespace: mcp}
spec:
  mcp: {serviceName: tools-server, port: 8000, path: /mcp}
"""


def http_listener(name: str, port: int) -> str:
    """A listener line of `gateway`: plain HTTP."""
    return f"  - {{name: {name}, protocol: HTTP, port: {port}}}\n"


def gateway(listeners: str, *, name: str = "gw", tls: str = "") -> str:
    """Gateway `name` in namespace mcp with `listeners` (their lines) and `tls` (e.g. AGENTS_CA)."""
    return f"""\
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {name}, namespace: mcp}}
spec:
  gatewayClassName: mcp-access
  listeners:
{listeners}{tls}"""


def tools_route(parent_refs: str, *, name: str = "tools") -> str:
    """HTTPRoute `name` in namespace mcp under `parent_refs` (the flow list's entries) sending
    /mcp to XBackend `tools`."""
    return f"""\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: mcp}}
spec:
  parentRefs: [{parent_refs}]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /mcp}}}}]
    backendRefs: [{{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}}]
"""


def tools_topology(gateway_doc: str, parent_refs: str, *, route: str = "tools") -> str:
    """`gateway_doc`, the route to XBackend `tools` under `parent_refs`, and the XBackend."""
    return "---\n".join([gateway_doc, tools_route(parent_refs, name=route), TOOLS_XBACKEND])


# Gateway `agents` with one HTTP listener `main` on 80, route `tools` to XBackend `tools`.
AGENTS_TOOLS = tools_topology(gateway(http_listener("main", 80), name="agents"), "{name: agents}")
