"""`mcp-access envoy` end to end: quick-start Kubernetes manifests become a real Envoy.

The manifests (a Gateway with an HTTPS listener and client-certificate validation, an HTTPRoute
that rewrites /tools/mcp to the server's /mcp, an XBackend, Allow and ExternalAuth policies at
both levels in both API versions, and a ReferenceGrant for the cross-namespace authorizer) go
through the CLI with --resolve; Envoy runs the generated configuration as it is, and two agents
with the official MCP SDK client check every allow and deny, which is also read back from
Envoy's access log (the filter's own decision record).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from harness import (
    ALPHA,
    BETA,
    Denied,
    McpAgent,
    TransportFailure,
    free_port,
    post_jsonrpc,
    rpc,
    start_authorizer,
    start_mcp_server,
    text_of,
)
from harness.stack import decisions

GATEWAY = """\
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: agents-gateway
  namespace: mcp
spec:
  gatewayClassName: mcp-access
  listeners:
  - name: mcp-https
    protocol: HTTPS
    port: 443
    tls:
      mode: Terminate
      certificateRefs:
      - name: gateway-cert
  tls:
    frontend:
      default:
        validation:
          caCertificateRefs:
          - {group: "", kind: ConfigMap, name: agents-ca}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: tools-route
  namespace: mcp
spec:
  parentRefs:
  - name: agents-gateway
    sectionName: mcp-https
  rules:
  - matches:
    - path: {type: PathPrefix, value: /tools/mcp}
    filters:
    - type: URLRewrite
      urlRewrite:
        path: {type: ReplacePrefixMatch, replacePrefixMatch: /mcp}
    backendRefs:
    - {group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}
---
apiVersion: agentic.networking.x-k8s.io/v0alpha0
kind: XBackend
metadata:
  name: tools
  namespace: mcp
spec:
  mcp:
    serviceName: tools-server
    port: 8000
    path: /mcp
"""

GATEWAY_POLICIES = """\
# Gateway level (v1alpha1): alpha may do anything, beta only two tools; every tool call is
# first checked by the risk-check authorizer, a Service in another namespace.
apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata:
  name: gateway-agents
  namespace: mcp
  creationTimestamp: "2026-01-01T00:00:00Z"
spec:
  targetRefs:
  - {group: gateway.networking.k8s.io, kind: Gateway, name: agents-gateway}
  action: Allow
  rules:
  - name: alpha-anything
    source:
      type: ServiceAccount
      serviceAccount: {namespace: agents, name: alpha}
  - name: beta-two-tools
    source:
      type: ServiceAccount
      serviceAccount: {namespace: agents, name: beta}
    authorization:
      type: Inline
      mcp:
        mcpBaseProtocolMethodsOption: MATCH_BASE_PROTOCOL_METHODS
        methods:
        - name: tools/call
          params: [get_weather, echo]
---
apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata:
  name: gateway-risk-check
  namespace: mcp
  creationTimestamp: "2026-01-02T00:00:00Z"
spec:
  targetRefs:
  - {group: gateway.networking.k8s.io, kind: Gateway, name: agents-gateway}
  action: ExternalAuth
  externalAuth:
    protocol: HTTP
    backendRef: {name: risk-check, namespace: authz, port: 9000}
    http:
      path: /check
  rules:
  - name: tool-calls
    authorization:
      type: Inline
      mcp:
        methods:
        - name: tools/call
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata:
  name: policies-may-call-authorizers
  namespace: authz
spec:
  from:
  - {group: agentic.networking.x-k8s.io, kind: XAccessPolicy, namespace: mcp}
  to:
  - {group: "", kind: Service}
"""

BACKEND_POLICIES = """\
# Backend level (v0alpha0): per-agent tool lists, and beta's calls go to a review authorizer.
apiVersion: agentic.networking.x-k8s.io/v0alpha0
kind: XAccessPolicy
metadata:
  name: backend-tools
  namespace: mcp
  creationTimestamp: "2026-01-03T00:00:00Z"
spec:
  targetRefs:
  - {group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}
  rules:
  - name: alpha-tools
    source:
      type: ServiceAccount
      serviceAccount: {namespace: agents, name: alpha}
    authorization:
      type: InlineTools
      tools: [echo, add, get_weather]
  - name: beta-tools
    source:
      type: ServiceAccount
      serviceAccount: {namespace: agents, name: beta}
    authorization:
      type: InlineTools
      tools: [get_weather, echo]
---
apiVersion: agentic.networking.x-k8s.io/v0alpha0
kind: XAccessPolicy
metadata:
  name: backend-beta-review
  namespace: mcp
  creationTimestamp: "2026-01-04T00:00:00Z"
spec:
  targetRefs:
  - {group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}
  rules:
  - name: beta-review
    source:
      type: ServiceAccount
      serviceAccount: {namespace: agents, name: beta}
    authorization:
      type: ExternalAuth
      externalAuth:
        protocol: HTTP
        backendRef: {name: beta-review, port: 9001}
        http: {}
"""


@pytest.fixture(scope="session")
def cli(repo_root: Path) -> Path:
    """The mcp-access binary: $MCP_ACCESS_CLI, else built here with cargo (a no-op when fresh)."""
    if override := os.environ.get("MCP_ACCESS_CLI"):
        return Path(override)
    cargo = shutil.which("cargo")
    if cargo:
        subprocess.run([cargo, "build", "-q", "-p", "mcp-access-cli"], cwd=repo_root, check=True, timeout=1200)
        return repo_root / "target" / "debug" / "mcp-access"
    for profile in ("debug", "release"):
        path = repo_root / "target" / profile / "mcp-access"
        if path.is_file():
            return path
    pytest.fail("mcp-access CLI not found and cargo is not available to build it")


def run_cli(cli: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(cli), *args], capture_output=True, text=True, timeout=60)


def denials(envoy: Any, want: int) -> list[dict[str, Any]]:
    """The filter's decision records (filter state in the access log) of denied requests;
    waits until `want` of them are flushed."""
    return [d for _, d in decisions(envoy, count=want, where=lambda _, d: d.get("decision") == "deny")]


def test_quickstart_manifests_through_real_envoy(cli: Path, wasm_path: Path, work_dir: Path, pki: Any, envoy: Any) -> None:
    base = work_dir / "cli-e2e"
    manifests = base / "manifests"
    manifests.mkdir(parents=True, exist_ok=True)
    (manifests / "10-gateway.yaml").write_text(GATEWAY)
    (manifests / "20-gateway-policies.yaml").write_text(GATEWAY_POLICIES)
    (manifests / "30-backend-policies.yaml").write_text(BACKEND_POLICIES)

    logs = base / "logs"
    with start_mcp_server(logs, name="cli-tools") as server, \
            start_authorizer(logs, name="risk-check", deny_tools=["add"]) as risk, \
            start_authorizer(logs, name="beta-review", deny_tools=["echo"], deny_status=401) as review:
        port, admin = free_port(), free_port()
        access_log = base / "access.log"
        config_path = base / "envoy.json"
        result = run_cli(
            cli, "envoy", "-f", str(manifests), "--strict",
            "--trust-domain", "example.org",
            "--wasm", str(wasm_path),
            "--tls-cert", f"gateway-cert={pki.server.cert},{pki.server.key}",
            "--client-ca", f"agents-ca={pki.ca.cert}",
            "--resolve", f"tools-server=127.0.0.1:{server.port}",
            "--resolve", f"authz/risk-check=127.0.0.1:{risk.port}",
            "--resolve", f"mcp/beta-review=127.0.0.1:{review.port}",
            "--listen", f"mcp-https={port}",
            "--bind", "127.0.0.1",
            "--admin-port", str(admin),
            "--access-log", str(access_log),
            "--bundle-out", str(base / "bundle.json"),
            "-o", str(config_path),
        )
        assert result.returncode == 0, result.stderr
        assert "note:" not in result.stderr, result.stderr  # every Service was resolved
        bundle = json.loads((base / "bundle.json").read_text())
        assert bundle["gateways"][0]["listeners"][0]["port"] == port  # the port Envoy listens on

        proxy = envoy(json.loads(config_path.read_text()), name="cli-envoy")
        url = f"https://127.0.0.1:{port}/tools/mcp"
        server.reset()
        risk.reset()
        review.reset()

        with McpAgent(url, cert=pki.client(ALPHA), ca=pki.ca) as alpha:
            # The listing holds what alpha may call; `add`, refused only by an authorizer, stays.
            listed = set(alpha.tool_names())
            assert {"echo", "add", "get_weather"} <= listed and "delete_repo" not in listed
            assert text_of(alpha.call_tool("echo", {"text": "hi"})) == "hi"
            assert text_of(alpha.call_tool("get_weather", {"city": "Oslo"})) == "sunny in Oslo"
            with pytest.raises(Denied) as denied:  # the gateway's authorizer refuses `add`
                alpha.call_tool("add", {"a": 1, "b": 2})
            # The authorizer's status, as a JSON-RPC error (its body only with exposeDetails).
            assert denied.value.status == 403 and denied.value.code == -32010
            with pytest.raises(Denied) as denied:  # not in alpha's backend tool list
                alpha.call_tool("delete_repo", {"name": "prod"})
            assert denied.value.status == 403 and denied.value.code == -32010

        with McpAgent(url, cert=pki.client(BETA), ca=pki.ca) as beta:
            assert text_of(beta.call_tool("get_weather", {"city": "Rome"})) == "sunny in Rome"
            with pytest.raises(Denied) as denied:  # the backend's review authorizer refuses
                beta.call_tool("echo", {"text": "x"})
            assert denied.value.status == 401
            with pytest.raises(Denied) as denied:  # the gateway's authorizer comes first
                beta.call_tool("add", {"a": 1, "b": 2})
            assert denied.value.status == 403 and denied.value.code == -32010
            with pytest.raises(Denied) as denied:  # not one of beta's two gateway tools
                beta.call_tool("delete_repo", {"name": "prod"})
            assert denied.value.code == -32010

        # Only what was allowed reached the server, at the rewritten path.
        assert server.tool_calls() == ["echo", "get_weather", "get_weather"]
        assert {r["path"] for r in server.requests()} == {"/mcp"}
        # The backend authorizer only ever saw beta (all of beta's requests that passed the
        # gateway); the gateway one every tool call and nothing else.
        assert {c["headers"].get("x-mcp-source-spiffe") for c in review.calls()} == {BETA}
        assert [c["headers"]["x-mcp-tool"] for c in review.calls() if "x-mcp-tool" in c["headers"]] == ["get_weather", "echo"]
        assert {c["headers"].get("x-mcp-method") for c in risk.calls()} == {"tools/call"}
        assert all(c["path"].startswith("/check/tools/mcp") for c in risk.calls())
        assert len(risk.calls()) == 8

        # Where each denial was decided, from the filter's decision record.
        denied_records = denials(proxy, 5)
        where = {(d["caller"].rsplit("/", 1)[-1], d["name"]): (d["level"], d["reason"], d["policy"]) for d in denied_records}
        assert where == {
            ("alpha", "add"): ("gateway", "external_auth_denied", "mcp/gateway-risk-check"),
            ("alpha", "delete_repo"): ("backend", "not_allowed", None),
            ("beta", "echo"): ("backend", "external_auth_denied", "mcp/backend-beta-review"),
            ("beta", "add"): ("gateway", "external_auth_denied", "mcp/gateway-risk-check"),
            ("beta", "delete_repo"): ("gateway", "not_allowed", None),
        }, denied_records

        # No client certificate: the listener requires one.
        with pytest.raises(TransportFailure):
            post_jsonrpc(url, rpc("tools/call", {"name": "echo", "arguments": {"text": "x"}}), ca=pki.ca)
        # A path no HTTPRoute matches: Envoy's 404 after the filter's unknown-backend denial.
        other = post_jsonrpc(f"https://127.0.0.1:{port}/elsewhere", rpc("ping"), cert=pki.client(ALPHA), ca=pki.ca)
        assert other.status in (403, 404), other

        # explain agrees with what Envoy did.
        bundle_path = str(base / "bundle.json")
        for agent, tool, expected in [("alpha", "echo", "allow"), ("alpha", "delete_repo", "deny"),
                                      ("beta", "get_weather", "allow"), ("beta", "delete_repo", "deny")]:
            out = run_cli(cli, "explain", "--bundle", bundle_path, "--backend", "mcp/tools",
                          "--service-account", f"agents/{agent}", "--tool", tool, "--format", "json")
            assert out.returncode == 0, out.stderr
            assert json.loads(out.stdout)["decision"] == expected, out.stdout
        # explain prints the response the client got from Envoy, status and body: a path no
        # route matches (the filter's unknown-backend denial) and a gzip body (the filter's 415).
        for path, headers in [("/elsewhere", {}), ("/tools/mcp", {"content-encoding": "gzip"})]:
            got = post_jsonrpc(f"https://127.0.0.1:{port}{path}", rpc("ping"), headers,
                               cert=pki.client(ALPHA), ca=pki.ca, protocol_version=None)
            flags = [arg for k, v in headers.items() for arg in ("-H", f"{k}:{v}")]
            out = run_cli(cli, "explain", "-f", str(manifests), "--trust-domain", "example.org", "--path", path,
                          "--service-account", "agents/alpha", "--mcp-method", "ping", *flags, "--format", "json")
            assert out.returncode == 0, out.stderr
            said = json.loads(out.stdout)["response"]
            assert (said["status"], said["body"].encode()) == (got.status, got.body), (out.stdout, got)


def test_strict_compile_rejects_what_is_not_accepted(cli: Path, work_dir: Path) -> None:
    """Without the ReferenceGrant, the cross-namespace authorizer is not permitted: --strict fails."""
    d = work_dir / "cli-e2e-strict"
    d.mkdir(parents=True, exist_ok=True)
    no_grant = GATEWAY_POLICIES.split("---\napiVersion: gateway.networking.k8s.io/v1beta1\nkind: ReferenceGrant")[0]
    (d / "all.yaml").write_text(GATEWAY + "---\n" + no_grant)
    out = run_cli(cli, "compile", "-f", str(d), "--strict", "--format", "json", "-o", str(d / "bundle.json"))
    assert out.returncode == 3, out.stderr
    report = json.loads(out.stdout)
    risk = next(p for p in report["policies"] if p["name"] == "gateway-risk-check")
    assert risk["conditions"][0]["reason"] == "RefNotPermitted"
    assert not (d / "bundle.json").exists()


RICH = """\
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: edge, namespace: web}
spec:
  gatewayClassName: mcp-access
  listeners:
  - {name: http-a, protocol: HTTP, port: 8080, hostname: a.example.com}
  - {name: http-any, protocol: HTTP, port: 8080, hostname: "*.example.org"}
  - name: https-secure
    protocol: HTTPS
    port: 8443
    hostname: secure.example.com
    tls: {certificateRefs: [{name: secure-cert}]}
  - name: https-default
    protocol: HTTPS
    port: 8443
    tls: {certificateRefs: [{name: default-cert}]}
    allowedRoutes: {namespaces: {from: All}}
  tls:
    frontend:
      default:
        validation: {caCertificateRefs: [{group: "", kind: ConfigMap, name: agents-ca}], mode: AllowInsecureFallback}
---
apiVersion: agentic.networking.x-k8s.io/v0alpha0
kind: XBackend
metadata: {name: local, namespace: web}
spec: {mcp: {serviceName: local-mcp, port: 3001}}
---
apiVersion: agentic.prototype.x-k8s.io/v0alpha0
kind: XBackend
metadata: {name: remote, namespace: web}
spec: {mcp: {hostname: mcp.example.net, port: 443}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: everything, namespace: web}
spec:
  parentRefs: [{name: edge}]
  hostnames: [a.example.com, x.example.org, secure.example.com]
  rules:
  - matches:
    - path: {type: Exact, value: /mcp}
      method: POST
      headers: [{name: x-team, value: blue}, {name: x-env, type: RegularExpression, value: "prod|dev"}]
      queryParams: [{name: v, value: "2"}]
    filters:
    - type: RequestHeaderModifier
      requestHeaderModifier: {set: [{name: x-a, value: "1"}], add: [{name: x-b, value: "2"}], remove: [x-c]}
    - type: ResponseHeaderModifier
      responseHeaderModifier: {set: [{name: x-served-by, value: edge}]}
    backendRefs:
    - {group: agentic.networking.x-k8s.io, kind: XBackend, name: local, weight: 80}
    - {group: agentic.prototype.x-k8s.io, kind: XBackend, name: remote, weight: 20}
    timeouts: {request: 30s, backendRequest: 10s}
  - matches: [{path: {type: RegularExpression, value: "/v[0-9]+/mcp"}}]
    filters: [{type: URLRewrite, urlRewrite: {hostname: internal.example, path: {type: ReplaceFullPath, replaceFullPath: /mcp}}}]
    backendRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: local}]
  - matches: [{path: {type: PathPrefix, value: /old}}]
    filters: [{type: RequestRedirect, requestRedirect: {scheme: https, port: 8443, statusCode: 301, path: {type: ReplacePrefixMatch, replacePrefixMatch: /new}}}]
  - matches: [{path: {type: PathPrefix, value: /remote/mcp}}]
    filters: [{type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /}}}]
    backendRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: remote}]
  - matches: [{path: {type: PathPrefix, value: /plain}}]
    backendRefs: [{name: web-svc, port: 80}]
---
apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {name: secure-only, namespace: web}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: edge, sectionName: https-secure}]
  action: Allow
  rules:
  - name: agents
    source: {type: SPIFFE, spiffe: "spiffe://example.org/ns/agents/sa/alpha"}
"""


def test_rich_manifests_render_a_configuration_envoy_accepts(cli: Path, wasm_path: Path, work_dir: Path, pki: Any) -> None:
    """Shared ports (virtual hosts, SNI filter chains), every supported route feature, weighted
    XBackends of both API groups, a hostname backend over TLS, a plain Service: `envoy --mode validate`."""
    from harness import envoy_binary

    d = work_dir / "cli-rich"
    d.mkdir(parents=True, exist_ok=True)
    (d / "rich.yaml").write_text(RICH)
    out = run_cli(
        cli, "envoy", "-f", str(d / "rich.yaml"), "--strict", "--wasm", str(wasm_path),
        "--tls-cert", f"secure-cert={pki.server.cert},{pki.server.key}",
        "--tls-cert", f"web/default-cert={pki.server.cert},{pki.server.key}",
        "--client-ca", f"agents-ca={pki.ca.cert}", "--upstream-ca", str(pki.ca.cert),
        "--resolve", "local-mcp=127.0.0.1:3001", "--resolve", "mcp.example.net=127.0.0.1:3443",
        "--resolve", "web/web-svc=127.0.0.1:3080", "--port-offset", str(free_port() % 1000 + 20000),
        "--bind", "127.0.0.1", "--admin-port", str(free_port()), "-o", str(d / "envoy.yaml"),
    )
    assert out.returncode == 0, out.stderr
    checked = subprocess.run(
        [envoy_binary(), "--mode", "validate", "-c", str(d / "envoy.yaml"), "--base-id", str(os.getpid() % 60000 + 3)],
        capture_output=True, text=True, timeout=120,
    )
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-3000:]
