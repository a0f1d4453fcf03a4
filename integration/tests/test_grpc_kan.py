"""KAN's conformance ExternalAuth scenarios (kube-agentic-networking conformance/tests:
XAccessPolicyExtAuthAccepted, XAccessPolicyExtAuthLimit, XAccessPolicyEvaluationLogic), whose
authorizers all speak gRPC, through `mcp-access` and a real Envoy.

The manifests are KAN's, with the names of this harness where KAN's infrastructure differs: the
demo MCP server's tools stand for KAN's (`add` for get-sum, `delete_repo` for get-env, `echo`
for echo), and the authorizer is a grpcio ext_authz server that decides as KAN's Authorino
AuthConfig does, from `metadata.filter_metadata.mcp_proxy` (method, params.name).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness import free_port, post_jsonrpc, rpc, start_mcp_server
from harness.grpc_authz import GrpcAuthorizer

from test_cli_e2e import cli, run_cli  # noqa: F401  (the session's CLI fixture)

NS = "agentic-conformance-infra"
TESTER = f"spiffe://example.org/ns/{NS}/sa/conformance-tester-sa"

BASE = f"""\
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: conformance-primary, namespace: {NS}}}
spec:
  gatewayClassName: mcp-access
  listeners:
  - name: https
    protocol: HTTPS
    port: 443
    tls:
      mode: Terminate
      certificateRefs: [{{name: gateway-cert}}]
  tls:
    frontend:
      default:
        validation:
          caCertificateRefs: [{{group: "", kind: ConfigMap, name: agents-ca}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: conformance-route, namespace: {NS}}}
spec:
  parentRefs: [{{name: conformance-primary, namespace: {NS}}}]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /mcp}}}}]
    backendRefs: [{{group: agentic.networking.x-k8s.io, kind: XBackend, name: conformance-mcp-backend}}]
---
apiVersion: agentic.networking.x-k8s.io/v0alpha0
kind: XBackend
metadata: {{name: conformance-mcp-backend, namespace: {NS}}}
spec:
  mcp: {{serviceName: conformance-mcp-backend-svc, port: 3001, path: /mcp}}
"""


def extauth(name: str, service: str, created: str, source_sa: str) -> str:
    return f"""\
apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {{name: {name}, namespace: {NS}, creationTimestamp: "{created}"}}
spec:
  targetRefs:
  - group: gateway.networking.k8s.io
    kind: Gateway
    name: conformance-primary
  action: ExternalAuth
  externalAuth:
    protocol: GRPC
    backendRef:
      group: ""
      kind: Service
      name: {service}
      port: 50051
    grpc: {{}}
  rules:
  - name: route-to-extauth
    source:
      type: ServiceAccount
      serviceAccount:
        name: {source_sa}
        namespace: {NS}
"""


EVAL_ALLOW = f"""\
apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {{name: xaccesspolicy-eval-allow, namespace: {NS}, creationTimestamp: "2026-01-02T00:00:00Z"}}
spec:
  targetRefs:
  - group: gateway.networking.k8s.io
    kind: Gateway
    name: conformance-primary
  action: Allow
  rules:
  - name: allow-get-sum
    source:
      type: ServiceAccount
      serviceAccount:
        name: conformance-tester-sa
        namespace: {NS}
    authorization:
      type: Inline
      mcp:
        mcpBaseProtocolMethodsOption: MATCH_BASE_PROTOCOL_METHODS
        methods:
        - name: tools/call
          params: ["add"]
"""


def authconfig(check: Any) -> str:
    """KAN's Authorino AuthConfig `authorized-tools`: initialize, or tools/call of get-sum /
    get-env (here add / delete_repo), read from the metadata the gateway sends."""
    meta = check.attributes.metadata_context.filter_metadata["mcp_proxy"]
    method = meta.fields["method"].string_value if "method" in meta.fields else ""
    params = meta.fields["params"].struct_value.fields if "params" in meta.fields else {}
    name = params["name"].string_value if "name" in params else None
    ok = method == "initialize" or (method == "tools/call" and name in ("add", "delete_repo"))
    return "allow" if ok else "deny:403"


def write(directory: Path, docs: list[str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "manifests.yaml").write_text("---\n".join(docs))
    return directory


def policy_reasons(cli: Path, manifests: Path, *extra: str) -> dict[str, str]:
    out = run_cli(cli, "validate", "-f", str(manifests), "--format", "json", *extra)
    report = json.loads(out.stdout)
    return {p["name"]: p["conditions"][0]["reason"] for p in report["policies"]}


def test_extauth_accepted(cli: Path, tmp_path: Path) -> None:  # noqa: F811
    m = write(tmp_path, [BASE, extauth("xaccesspolicy-extauth-accepted", "ext-auth-svc", "2026-01-01T00:00:00Z", "default")])
    assert policy_reasons(cli, m) == {"xaccesspolicy-extauth-accepted": "Accepted"}
    out = run_cli(cli, "compile", "-f", str(m), "--trust-domain", "example.org", "-o", str(tmp_path / "bundle.json"))
    assert out.returncode == 0, out.stderr
    bundle = json.loads((tmp_path / "bundle.json").read_text())
    (a,) = bundle["authorizers"]
    assert (a["protocol"], a["cluster"]) == ("GRPC", f"authz-grpc/{NS}/ext-auth-svc:50051")


def test_extauth_limit(cli: Path, tmp_path: Path) -> None:  # noqa: F811
    m = write(tmp_path, [BASE, extauth("xaccesspolicy-extauth-limit-1", "ext-auth-svc", "2026-01-01T00:00:00Z", "default"),
                         extauth("xaccesspolicy-extauth-limit-2", "ext-auth-svc", "2026-01-02T00:00:00Z", "default")])
    # KAN's reference accepts one ExternalAuth policy per target.
    reasons = policy_reasons(cli, m, "--max-external-auth-per-target", "1")
    assert reasons == {"xaccesspolicy-extauth-limit-1": "Accepted",
                       "xaccesspolicy-extauth-limit-2": "LimitPerTargetExceeded"}, reasons


def test_evaluation_logic_through_real_envoy(cli: Path, wasm_path: Path, work_dir: Path, pki: Any, envoy: Any) -> None:  # noqa: F811
    base = work_dir / "grpc-kan"
    m = write(base / "manifests", [BASE, extauth("xaccesspolicy-eval-extauth", "authorino", "2026-01-01T00:00:00Z",
                                                 "conformance-tester-sa"), EVAL_ALLOW])
    authz = GrpcAuthorizer(decide=authconfig)
    try:
        with start_mcp_server(base / "logs", name="kan-tools") as server:
            port, admin = free_port(), free_port()
            config_path = base / "envoy.json"
            result = run_cli(
                cli, "envoy", "-f", str(m), "--strict", "--trust-domain", "example.org",
                "--wasm", str(wasm_path),
                "--tls-cert", f"gateway-cert={pki.server.cert},{pki.server.key}",
                "--client-ca", f"agents-ca={pki.ca.cert}",
                "--resolve", f"conformance-mcp-backend-svc=127.0.0.1:{server.port}",
                "--resolve", f"authorino=127.0.0.1:{authz.port}",
                "--listen", f"https={port}", "--bind", "127.0.0.1", "--admin-port", str(admin),
                "--access-log", str(base / "access.log"), "-o", str(config_path),
            )
            assert result.returncode == 0, result.stderr
            config = json.loads(config_path.read_text())
            (cluster,) = [c for c in config["static_resources"]["clusters"] if c["name"].startswith("authz-grpc/")]
            assert "http2_protocol_options" in json.dumps(cluster["typed_extension_protocol_options"])
            envoy(config, name="kan-envoy")
            url = f"https://127.0.0.1:{port}/mcp"
            tester = pki.client(TESTER)

            def call(tool: str, args: dict[str, Any]):
                server.reset()
                return post_jsonrpc(url, rpc("tools/call", {"name": tool, "arguments": args}, id=2), cert=tester, ca=pki.ca)

            r = post_jsonrpc(url, rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                                     "clientInfo": {"name": "kan", "version": "1"}}, id=1),
                             cert=tester, ca=pki.ca)
            assert r.status == 200, r.text
            # get-sum: both policies allow.
            r = call("add", {"a": 2, "b": 3})
            assert r.status == 200 and "5" in r.text, r.text
            assert server.tool_calls() == ["add"]
            # get-env: the authorizer allows, the Allow policy does not.
            r = call("delete_repo", {"name": "x"})
            assert r.status == 403 and r.error is not None, r.text
            assert server.tool_calls() == []
            # echo: the ExternalAuth policy's authorizer denies (it runs before the Allow step).
            r = call("echo", {"text": "hello"})
            assert r.status == 403, r.text
            assert server.tool_calls() == []
            decided = [c.attributes.metadata_context.filter_metadata["mcp_proxy"].fields["method"].string_value
                       for c in authz.recorded()]
            assert decided == ["initialize", "tools/call", "tools/call", "tools/call"], decided
    finally:
        authz.close()
