"""Policies that once compiled to less than was written, enforced by real Envoy.

Kubernetes manifests go through `mcp-access envoy`; Envoy runs the generated configuration with
the built filter, the demo MCP server and a recording authorizer:
- an ExternalAuth policy with `rules: []` sends every request to its authorizer;
- an Inline rule whose `mcp` block lists no method admits only the base protocol;
- a v0alpha0 policy with an ExternalAuth rule beside another rule is not accepted, and every
  request to its backend is denied (even when the authorizer would allow).
Nothing denied reaches the MCP server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness import ALPHA, BETA, Denied, McpAgent, free_port, post_jsonrpc, rpc, start_authorizer, start_mcp_server, text_of
from test_cli_e2e import cli, run_cli  # noqa: F401  (cli is a fixture)

MANIFESTS = """\
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: mcp}
spec:
  gatewayClassName: mcp-access
  listeners:
  - name: https
    protocol: HTTPS
    port: 443
    tls: {mode: Terminate, certificateRefs: [{name: gateway-cert}]}
  tls:
    frontend:
      default:
        validation: {caCertificateRefs: [{group: "", kind: ConfigMap, name: agents-ca}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: routes, namespace: mcp}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /tools/mcp}}]
    filters: [{type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /mcp}}}]
    backendRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]
  - matches: [{path: {type: PathPrefix, value: /mixed/mcp}}]
    filters: [{type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /mcp}}}]
    backendRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: mixed}]
---
apiVersion: agentic.networking.x-k8s.io/v0alpha0
kind: XBackend
metadata: {name: tools, namespace: mcp}
spec: {mcp: {serviceName: tools-server, port: 8000, path: /mcp}}
---
apiVersion: agentic.networking.x-k8s.io/v0alpha0
kind: XBackend
metadata: {name: mixed, namespace: mcp}
spec: {mcp: {serviceName: tools-server, port: 8000, path: /mcp}}
---
# Every request, whatever it is, goes to check-all.
apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {name: check-all, namespace: mcp}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  action: ExternalAuth
  externalAuth: {protocol: HTTP, backendRef: {name: check-all, port: 9000}, http: {}}
  rules: []
---
# alpha: the base protocol only; beta: every tools/* method.
apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {name: tools-access, namespace: mcp}
spec:
  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]
  action: Allow
  rules:
  - name: alpha-base-only
    source: {type: ServiceAccount, serviceAccount: {namespace: agents, name: alpha}}
    authorization:
      type: Inline
      mcp: {mcpBaseProtocolMethodsOption: MATCH_BASE_PROTOCOL_METHODS}
  - name: beta-tools
    source: {type: ServiceAccount, serviceAccount: {namespace: agents, name: beta}}
    authorization:
      type: Inline
      mcp:
        mcpBaseProtocolMethodsOption: MATCH_BASE_PROTOCOL_METHODS
        methods: [{name: tools}]
---
# Not one policy's meaning: an authorizer for alpha beside a rule admitting beta.
apiVersion: agentic.networking.x-k8s.io/v0alpha0
kind: XAccessPolicy
metadata: {name: mixed-rules, namespace: mcp}
spec:
  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: mixed}]
  rules:
  - name: alpha-judged
    source: {type: ServiceAccount, serviceAccount: {namespace: agents, name: alpha}}
    authorization:
      type: ExternalAuth
      externalAuth: {protocol: HTTP, backendRef: {name: check-all, port: 9000}, http: {}}
  - name: beta-open
    source: {type: ServiceAccount, serviceAccount: {namespace: agents, name: beta}}
"""


def test_policies_are_enforced_as_written(cli: Path, wasm_path: Path, work_dir: Path, pki: Any, envoy: Any) -> None:  # noqa: F811
    base = work_dir / "fail-closed"
    base.mkdir(parents=True, exist_ok=True)
    (base / "policies.yaml").write_text(MANIFESTS)
    logs = base / "logs"
    with start_mcp_server(logs, name="fc-tools") as server, \
            start_authorizer(logs, name="check-all", deny_tools=["add"]) as check:
        port, admin = free_port(), free_port()
        args = [
            "envoy", "-f", str(base / "policies.yaml"),
            "--trust-domain", "example.org", "--wasm", str(wasm_path),
            "--tls-cert", f"gateway-cert={pki.server.cert},{pki.server.key}",
            "--client-ca", f"agents-ca={pki.ca.cert}",
            "--resolve", f"tools-server=127.0.0.1:{server.port}",
            "--resolve", f"check-all=127.0.0.1:{check.port}",
            "--listen", f"https={port}", "--bind", "127.0.0.1", "--admin-port", str(admin),
            "--bundle-out", str(base / "bundle.json"),
            "-o", str(base / "envoy.json"),
        ]
        # A policy is not accepted: nothing is written unless told to proceed.
        refused = run_cli(cli, *args)
        assert refused.returncode == 3, refused.stderr
        assert "mixed-rules" in refused.stderr and not (base / "envoy.json").exists(), refused.stderr
        out = run_cli(cli, *args, "--allow-not-accepted")
        assert out.returncode == 0, out.stderr
        checked = run_cli(cli, "validate", "-f", str(base / "policies.yaml"), "--format", "json")
        assert checked.returncode == 3, checked.stderr
        report = json.loads(checked.stdout)
        mixed = next(p for p in report["policies"] if p["name"] == "mixed-rules")
        assert mixed["conditions"][0]["reason"] == "Invalid", mixed
        assert all(p["conditions"][0]["reason"] == "Accepted" for p in report["policies"] if p["name"] != "mixed-rules")

        envoy(json.loads((base / "envoy.json").read_text()), name="fail-closed")
        url = f"https://127.0.0.1:{port}/tools/mcp"
        server.reset()
        check.reset()

        with McpAgent(url, cert=pki.client(ALPHA), ca=pki.ca) as alpha:
            # tools/list is base protocol, but its answer lists only what alpha may call.
            assert "echo" not in alpha.tool_names()
            with pytest.raises(Denied) as denied:  # an mcp block admits only what it lists
                alpha.call_tool("echo", {"text": "hi"})
            assert denied.value.status == 403
            with pytest.raises(Denied):
                alpha.get_prompt("summarize", {"text": "x"})
        with McpAgent(url, cert=pki.client(BETA), ca=pki.ca) as beta:
            assert text_of(beta.call_tool("echo", {"text": "hi"})) == "hi"
            with pytest.raises(Denied) as denied:  # check-all judges every request
                beta.call_tool("add", {"a": 1, "b": 2})
            assert denied.value.status == 403
        assert server.tool_calls() == ["echo"]
        methods = [c["headers"].get("x-mcp-method") for c in check.calls()]
        assert {"initialize", "tools/list", "tools/call"} <= set(methods), methods

        # The mixed policy's backend denies everyone, before and after its authorizer.
        server.reset()
        mixed_url = f"https://127.0.0.1:{port}/mixed/mcp"
        for agent in (ALPHA, BETA):
            r = post_jsonrpc(mixed_url, rpc("tools/call", {"name": "echo", "arguments": {"text": "x"}}),
                             cert=pki.client(agent), ca=pki.ca)
            assert r.status == 403, r
        assert server.requests() == []
