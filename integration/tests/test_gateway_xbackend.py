"""Gateway API v1.6's XBackend (`gateway.networking.x-k8s.io`) end to end, beside the agentic kind.

One topology (an mTLS Gateway listener, an HTTPRoute, an XBackend, Gateway- and Backend-level
XAccessPolicies) is written once with each XBackend kind. The MCP server is an external host
(`tools.example.test`) serving HTTPS with a CA of its own: the Gateway API kind says so in
`spec.tls` (ServerOnly, validation against its caCertificateRef); the agentic kind is a
`hostname` XBackend (TLS to the hostname, against `--upstream-ca`). `mcp-access envoy` renders
each, Envoy runs it, and the official Python SDK client gets the same decisions from both.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from harness import ALPHA, BETA, Denied, McpAgent, free_port, start_mcp_server, text_of
from harness.certs import make_server_pki

HOST = "tools.example.test"

GATEWAY = """\
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: agents-gateway, namespace: mcp}
spec:
  gatewayClassName: mcp-access
  listeners:
  - name: mcp-https
    protocol: HTTPS
    port: 443
    tls: {mode: Terminate, certificateRefs: [{name: gateway-cert}]}
  tls:
    frontend:
      default:
        validation:
          caCertificateRefs: [{group: "", kind: ConfigMap, name: agents-ca}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: tools-route, namespace: mcp}
spec:
  parentRefs: [{name: agents-gateway}]
  rules:
  - backendRefs: [{group: GROUP, kind: XBackend, name: tools}]
---
"""

XBACKENDS = {
    "agentic.networking.x-k8s.io": f"""\
apiVersion: agentic.networking.x-k8s.io/v0alpha0
kind: XBackend
metadata: {{name: tools, namespace: mcp}}
spec:
  mcp: {{hostname: {HOST}, port: PORT, path: /mcp}}
""",
    "gateway.networking.x-k8s.io": f"""\
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {{name: tools, namespace: mcp}}
spec:
  type: ExternalHostname
  externalHostname: {{hostname: {HOST}}}
  port: {{port: PORT}}
  protocol: MCP
  tls:
    mode: ServerOnly
    validation:
      hostname: {HOST}
      caCertificateRefs: [{{group: "", kind: ConfigMap, name: tools-ca}}]
""",
}

POLICIES = """\
---
apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {name: gateway-agents, namespace: mcp}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: agents-gateway}]
  action: Allow
  rules:
  - name: alpha-anything
    source: {type: ServiceAccount, serviceAccount: {namespace: agents, name: alpha}}
  - name: beta-two-tools
    source: {type: ServiceAccount, serviceAccount: {namespace: agents, name: beta}}
    authorization:
      type: Inline
      mcp:
        mcpBaseProtocolMethodsOption: MATCH_BASE_PROTOCOL_METHODS
        methods: [{name: tools/call, params: [get_weather, echo]}]
---
apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {name: backend-tools, namespace: mcp}
spec:
  targetRefs: [{group: GROUP, kind: XBackend, name: tools}]
  action: Allow
  rules:
  - name: safe-tools
    authorization:
      type: Inline
      mcp:
        mcpBaseProtocolMethodsOption: MATCH_BASE_PROTOCOL_METHODS
        methods: [{name: tools/call, params: [echo, add, get_weather]}]
"""


@pytest.fixture(scope="module")
def cli(repo_root: Path) -> Path:
    if override := os.environ.get("MCP_ACCESS_CLI"):
        return Path(override)
    cargo = shutil.which("cargo")
    assert cargo, "cargo builds the mcp-access CLI"
    subprocess.run([cargo, "build", "-q", "-p", "mcp-access-cli"], cwd=repo_root, check=True, timeout=1200)
    return repo_root / "target" / "debug" / "mcp-access"


def decisions(url: str, pki: Any) -> dict[tuple[str, str], Any]:
    """What each agent sees: its tool listing, and per tool call the answer or the denial."""
    seen: dict[tuple[str, str], Any] = {}
    for name, spiffe in (("alpha", ALPHA), ("beta", BETA)):
        with McpAgent(url, cert=pki.client(spiffe), ca=pki.ca) as agent:
            seen[(name, "tools/list")] = sorted(agent.tool_names())
            for tool, args in (("echo", {"text": "hi"}), ("get_weather", {"city": "Oslo"}),
                               ("delete_repo", {"name": "prod"}), ("add", {"a": 1, "b": 2})):
                try:
                    seen[(name, tool)] = text_of(agent.call_tool(tool, args))
                except Denied as d:
                    seen[(name, tool)] = ("denied", d.status, d.code)
    return seen


@pytest.mark.parametrize("group", list(XBACKENDS))
def test_both_xbackend_kinds_decide_the_same_over_tls_to_an_external_host(
    group: str, cli: Path, wasm_path: Path, work_dir: Path, pki: Any, envoy: Any
) -> None:
    base = work_dir / f"xbackend-{group.split('.')[0]}"
    tools_ca, tools_cert = make_server_pki(base / "tools-pki", "tools", [HOST])
    with start_mcp_server(base / "logs", name="external-tools",
                          extra_args=["--host", "0.0.0.0", "--tls-cert", str(tools_cert.cert),
                                      "--tls-key", str(tools_cert.key)]) as server:
        text = (GATEWAY + XBACKENDS[group] + POLICIES).replace("GROUP", group).replace("PORT", str(server.port))
        (base / "manifests.yaml").write_text(text)
        port, admin = free_port(), free_port()
        config = base / "envoy.json"
        upstream = ["--client-ca", f"mcp/tools-ca={tools_ca.cert}",
                    "--resolve", f"{HOST}=127.0.0.1:{server.port}"]
        if group.startswith("agentic"):  # TLS to a hostname, trusting --upstream-ca
            upstream = ["--upstream-ca", str(tools_ca.cert), "--resolve", f"{HOST}=https://127.0.0.1:{server.port}"]
        result = subprocess.run(
            [str(cli), "envoy", "-f", str(base / "manifests.yaml"), "--strict", "--trust-domain", "example.org",
             "--wasm", str(wasm_path), "--tls-cert", f"gateway-cert={pki.server.cert},{pki.server.key}",
             "--client-ca", f"agents-ca={pki.ca.cert}", *upstream, "--listen", f"mcp-https={port}",
             "--bind", "127.0.0.1", "--admin-port", str(admin), "-o", str(config)],
            capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        rendered = json.loads(config.read_text())
        cluster = next(c for c in rendered["static_resources"]["clusters"] if c["name"].endswith("mcp/tools"))
        assert cluster["transport_socket"]["typed_config"]["sni"] == HOST
        envoy(rendered, name=f"xbackend-{group.split('.')[0]}")
        seen = decisions(f"https://127.0.0.1:{port}/mcp", pki)
        denied = ("denied", 403, -32010)
        assert seen == {
            ("alpha", "tools/list"): ["add", "echo", "get_weather"],
            ("alpha", "echo"): "hi",
            ("alpha", "get_weather"): "sunny in Oslo",
            ("alpha", "delete_repo"): denied,  # not in the backend's list
            ("alpha", "add"): "3",
            ("beta", "tools/list"): ["echo", "get_weather"],
            ("beta", "echo"): "hi",
            ("beta", "get_weather"): "sunny in Oslo",
            ("beta", "delete_repo"): denied,  # not one of beta's gateway tools
            ("beta", "add"): denied,
        }, seen
        # Only allowed calls reached the server, over TLS, with the external host's name.
        assert server.tool_calls() == ["echo", "get_weather", "add", "echo", "get_weather"]
        assert {r["headers"].get("host") for r in server.requests()} == {HOST}
