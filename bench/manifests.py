"""Kubernetes manifests at scale for P8's compile target: one Gateway, `gateways` Gateway-level
XAccessPolicies (one rule each) and `backends` XBackends, each behind its own HTTPRoute."""

from __future__ import annotations

# --max-policies-per-target 0: all Gateway-level policies are accepted (the default limit is 5).
COMPILE_ARGS = ["compile", "--max-policies-per-target", "0", "-f"]


def scaled(gateways: int, backends: int) -> str:
    docs = ["""apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: bench}
spec:
  gatewayClassName: mcp-access
  listeners:
  - {name: mcp, protocol: HTTP, port: 8080}
"""]
    docs += [f"""apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: r{b:04}, namespace: bench}}
spec:
  parentRefs:
  - {{name: gw, sectionName: mcp}}
  rules:
  - matches:
    - path: {{type: PathPrefix, value: /b{b:04}}}
    backendRefs:
    - {{group: agentic.networking.x-k8s.io, kind: XBackend, name: b{b:04}}}
""" for b in range(backends)]
    docs += [f"""apiVersion: agentic.networking.x-k8s.io/v0alpha0
kind: XBackend
metadata: {{name: b{b:04}, namespace: bench}}
spec:
  mcp: {{serviceName: s{b:04}, port: 8080, path: /b{b:04}}}
""" for b in range(backends)]
    docs += [f"""apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {{name: g{g:03}, namespace: bench, creationTimestamp: "2026-01-01T00:{g // 60:02}:{g % 60:02}Z"}}
spec:
  targetRefs:
  - {{group: gateway.networking.k8s.io, kind: Gateway, name: gw}}
  action: Allow
  rules:
  - name: r
    source:
      type: ServiceAccount
      serviceAccount: {{namespace: agents, name: a{g:03}}}
    authorization:
      type: Inline
      mcp:
        mcpBaseProtocolMethodsOption: MATCH_BASE_PROTOCOL_METHODS
        methods:
        - {{name: tools/call, params: [t{g:03}]}}
""" for g in range(gateways)]
    return "---\n".join(docs)
