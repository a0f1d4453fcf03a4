"""Cached authorizer answers (docs/semantics.md §3.10), in real Envoy 1.40 configured by the CLI
(`mcp-access envoy --ecds`, reconfigured with `mcp-access publish`), with counting HTTP and gRPC
authorizers, the demo MCP server and mTLS callers.

Per protocol: a repeated call reaches the authorizer once within the TTL (the answer's header
edits replayed) and again after it; another caller, another tool is a miss; a denial is not
reused unless the policy says `denials: true`; an error is never reused; and a new bundle (the
policy republished) starts with an empty cache. The decision log names the answers that came
from the cache and the counters count hits and misses.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from harness import ALPHA, BETA, BackgroundHttpServer, free_port, post_jsonrpc, rpc, start_mcp_server
from harness.grpc_authz import GrpcAuthorizer
from harness.manifests import AGENTS_CA, MTLS_LISTENER, gateway, tools_topology
from test_cli_e2e import cli  # noqa: F401  (the mcp-access binary fixture)

TTL_S = 2

GATEWAY = tools_topology(gateway(MTLS_LISTENER, tls=AGENTS_CA), "{name: gw, sectionName: mtls}")


def policy(protocol: str, denials: bool) -> str:
    """An ExternalAuth AccessPolicy whose authorizer is sent `x-authz` (what it answers), a header
    its answers are declared not to depend on: so a reused answer shows as the wrong one."""
    if protocol == "HTTP":
        settings = "http: {allowedHeaders: [x-authz]}"
        ignored = "[authorization, x-authz]"
    else:
        settings = "grpc: {allowedHeaders: [x-authz]}"
        ignored = "[x-authz]"
    return f"""\
apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {{name: approvals, namespace: mcp}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, name: gw}}]
  action: ExternalAuth
  externalAuth:
    protocol: {protocol}
    backendRef: {{name: authz, port: 9000}}
    {settings}
    failureMode: Deny
    cache:
      ttl: {TTL_S}s
      denials: {str(denials).lower()}
      key: {{ignoredHeaders: {ignored}}}
"""


class HttpAuthorizer(BackgroundHttpServer):
    """Counts its checks; answers by the request's `x-authz` (allow, deny, error), an OK adding
    `x-authz-check: <n>` upstream (n: this check's number)."""

    def __init__(self) -> None:
        self.checks = 0
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("content-length") or 0))
                with outer.lock:
                    outer.checks += 1
                    n = outer.checks
                ask = self.headers.get("x-authz", "allow")
                status = {"allow": 200, "deny": 403, "error": 503}[ask]
                self.send_response(status)
                if status == 200:
                    self.send_header("x-authz-check", str(n))
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(Handler)

    def count(self) -> int:
        with self.lock:
            return self.checks


class GrpcCounting:
    """The harness's gRPC authorizer (answers by `x-authz`: allow, deny:403, grpc:UNAVAILABLE)."""

    def __init__(self) -> None:
        self.inner = GrpcAuthorizer()
        self.port = self.inner.port

    def count(self) -> int:
        return len(self.inner.recorded())

    def close(self) -> None:
        self.inner.close()


ASK = {"HTTP": {"allow": "allow", "deny": "deny", "error": "error"},
       "GRPC": {"allow": "allow", "deny": "deny:403", "error": "grpc:UNAVAILABLE"}}


@pytest.mark.parametrize("protocol", ["HTTP", "GRPC"])
def test_answers_are_reused_within_the_ttl_and_never_across_bundles(
        protocol: str, cli: Path, wasm_path: Path, work_dir: Path, pki: Any, envoy: Any) -> None:  # noqa: F811
    base = work_dir / f"authz-cache-{protocol.lower()}"
    manifests, ecds_dir = base / "manifests", base / "ecds"
    manifests.mkdir(parents=True, exist_ok=True)
    (manifests / "gateway.yaml").write_text(GATEWAY)
    (manifests / "policy.yaml").write_text(policy(protocol, denials=False))
    authz = HttpAuthorizer() if protocol == "HTTP" else GrpcCounting()
    try:
        with start_mcp_server(base / "logs", name=f"cache-tools-{protocol.lower()}") as server:
            port, common = _render(cli, wasm_path, pki, base, server.port, authz.port)
            bundle_cache = _bundle(ecds_dir)["authorizers"][0]["cache"]
            assert bundle_cache["ttlMs"] == TTL_S * 1000 and not bundle_cache.get("denials"), bundle_cache
            proxy = envoy(json.loads((base / "envoy.json").read_text()), name=f"cache-{protocol.lower()}")
            url = f"https://127.0.0.1:{port}/mcp"
            ask = ASK[protocol]
            ids = iter(range(1, 10_000))

            def call(who: str = ALPHA, tool: str = "echo", answer: str = "allow") -> int:
                """tools/call `tool` as `who`; returns the HTTP status."""
                body = rpc("tools/call", {"name": tool, "arguments": {"text": "hi"}}, id=next(ids))
                res = post_jsonrpc(url, body, headers={"x-authz": ask[answer]}, ca=pki.ca, cert=pki.client(who))
                return res.status

            def stat(name: str) -> int:
                return int(proxy.stats("mcp_access").get(f"wasmcustom.mcp_access.authz_cache.{name}", 0))

            def upstream_checks() -> list[str]:
                calls = [q for q in server.requests() if q.get("mcp_method") == "tools/call"]
                return [q["headers"].get("x-authz-check", q["headers"].get("x-authz-set", "")) for q in calls]

            # A first call asks the authorizer; the same call again within the TTL does not,
            # even though the authorizer would now deny it: the answer (and its edits) is reused.
            assert call() == 200 and authz.count() == 1
            assert call(answer="deny") == 200 and authz.count() == 1
            edits = upstream_checks()
            assert len(edits) == 2 and edits[0] == edits[1] and edits[0], edits
            assert (stat("hits"), stat("misses")) == (1, 1)
            cached_lines = [ln for ln in proxy.log_text().splitlines() if '"authz_cached":["mcp.approvals"]' in ln]
            assert len(cached_lines) == 1, cached_lines
            # Another caller, another tool: misses.
            assert call(who=BETA, answer="deny") != 200 and authz.count() == 2
            assert call(tool="add", answer="deny") != 200 and authz.count() == 3
            # A denial is not reused (denials: false), nor is an error.
            for answer, n in (("deny", 4), ("deny", 5), ("error", 6), ("error", 7)):
                assert call(tool="other", answer=answer) != 200 and authz.count() == n, answer
            assert call(tool="other") == 200 and authz.count() == 8
            # Past the TTL: asked again.
            time.sleep(TTL_S + 0.2)
            assert call(answer="deny") != 200 and authz.count() == 9

            # A new bundle (the policy republished, now reusing denials) starts empty: the answer
            # the old one kept for the same key is not reused.
            assert call(tool="kept") == 200 and authz.count() == 10
            assert call(tool="kept", answer="deny") == 200 and authz.count() == 10
            version = _ecds_version(proxy)
            (manifests / "policy.yaml").write_text(policy(protocol, denials=True))
            r = subprocess.run([str(cli), "publish", *common, "--ecds", str(ecds_dir)],
                               capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, r.stderr
            assert _bundle(ecds_dir)["authorizers"][0]["cache"]["denials"] is True
            deadline = time.monotonic() + 10
            while _ecds_version(proxy) == version:
                assert time.monotonic() < deadline, "the new bundle was not applied"
                time.sleep(0.05)
            time.sleep(0.3)  # every worker's VM reconfigured
            assert call(tool="kept", answer="deny") != 200 and authz.count() == 11
            # ... and now denials are reused: the authorizer would allow, the cache denies.
            assert call(tool="kept", answer="allow") != 200 and authz.count() == 11
            assert stat("hits") >= 3
    finally:
        authz.close()


def test_grpc_keys_are_what_the_authorizer_is_sent_and_a_rollback_starts_empty(
        cli: Path, wasm_path: Path, work_dir: Path, pki: Any, envoy: Any) -> None:  # noqa: F811
    """Certificates without a single URI SAN (DNS SAN only, none) have no SPIFFE ID, yet a gRPC
    authorizer is sent each one's principal: one's kept answer is never another's. And a
    configuration published again after another (S1, S2, S1) reuses nothing kept under the first
    S1, although its bundle is byte for byte the same."""
    base = work_dir / "authz-cache-key"
    manifests, ecds_dir = base / "manifests", base / "ecds"
    manifests.mkdir(parents=True, exist_ok=True)
    (manifests / "gateway.yaml").write_text(GATEWAY)
    (manifests / "policy.yaml").write_text(policy("GRPC", denials=False))
    authz = GrpcCounting()
    try:
        with start_mcp_server(base / "logs", name="cache-key-tools") as server:
            port, common = _render(cli, wasm_path, pki, base, server.port, authz.port)
            proxy = envoy(json.loads((base / "envoy.json").read_text()), name="cache-key")
            url = f"https://127.0.0.1:{port}/mcp"
            ids = iter(range(1, 10_000))

            def call(cert: Any, tool: str = "echo", answer: str = "allow") -> int:
                body = rpc("tools/call", {"name": tool, "arguments": {"text": "hi"}}, id=next(ids))
                ask = {"allow": "allow", "deny": "deny:403"}[answer]
                return post_jsonrpc(url, body, headers={"x-authz": ask}, ca=pki.ca, cert=cert).status

            dns_a = pki.client(name="dns-a", dns_names=["a.agents.example"])
            dns_b = pki.client(name="dns-b", dns_names=["b.agents.example"])
            bare_a, bare_b = pki.client(name="bare-a"), pki.client(name="bare-b")
            for first, second in ((dns_a, dns_b), (bare_a, bare_b)):
                n = authz.count()
                assert call(first) == 200 and authz.count() == n + 1
                assert call(first, answer="deny") == 200 and authz.count() == n + 1, "the same caller: reused"
                assert call(second, answer="deny") == 403 and authz.count() == n + 2, "another certificate"
            principals = [c.attributes.source.principal for c in authz.inner.recorded()]
            assert len(set(principals)) == 4, principals

            def publish(denials: bool) -> None:
                version = _ecds_version(proxy)
                (manifests / "policy.yaml").write_text(policy("GRPC", denials=denials))
                r = subprocess.run([str(cli), "publish", *common, "--ecds", str(ecds_dir)],
                                   capture_output=True, text=True, timeout=60)
                assert r.returncode == 0, r.stderr
                deadline = time.monotonic() + 10
                while _ecds_version(proxy) == version:
                    assert time.monotonic() < deadline, "the new bundle was not applied"
                    time.sleep(0.05)
                time.sleep(0.3)  # every worker's VM reconfigured

            s1 = _bundle_text(ecds_dir)
            n = authz.count()
            assert call(dns_a, tool="kept") == 200 and authz.count() == n + 1
            publish(denials=True)
            publish(denials=False)
            assert _bundle_text(ecds_dir) == s1, "S1 published again as it was"
            assert call(dns_a, tool="kept", answer="deny") == 403 and authz.count() == n + 2
    finally:
        authz.close()


def _render(cli: Path, wasm_path: Path, pki: Any, base: Path, server_port: int, authz_port: int) -> tuple[int, list[str]]:
    """`mcp-access envoy --ecds` of base/manifests into base/envoy.json; returns the mTLS port
    and the arguments `publish` takes again."""
    port, admin = free_port(), free_port()
    common = ["-f", str(base / "manifests"), "--wasm", str(wasm_path), "--listen", f"mtls={port}"]
    r = subprocess.run([str(cli), "envoy", *common, "--strict", "--ecds", str(base / "ecds"),
                        "--tls-cert", f"gateway-cert={pki.server.cert},{pki.server.key}",
                        "--client-ca", f"agents-ca={pki.ca.cert}",
                        "--resolve", f"tools-server=127.0.0.1:{server_port}",
                        "--resolve", f"authz=http://127.0.0.1:{authz_port}",
                        "--bind", "127.0.0.1", "--admin-port", str(admin), "-o", str(base / "envoy.json")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return port, common


def _bundle_text(ecds_dir: Path) -> str:
    doc = json.loads((ecds_dir / "mcp_access.ecds.json").read_text())
    return str(doc["resources"][0]["typed_config"]["config"]["configuration"]["value"])


def _bundle(ecds_dir: Path) -> dict[str, Any]:
    return dict(json.loads(_bundle_text(ecds_dir)))


def _ecds_version(proxy: Any) -> Any:
    stats = proxy.stats("extension_config_discovery.http_filter.mcp_access")
    return {k: v for k, v in stats.items() if k.endswith("version_text") or k.endswith("config_reload")}
