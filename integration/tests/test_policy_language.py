"""The whole policy language from manifests, end to end: manifests -> `mcp-access envoy` ->
real Envoy 1.40 with the built filter, real MCP SDK clients and the demo MCP server.

- JWT providers declared on the command line (`--jwt-provider`): Envoy's jwt_authn verifies
  tokens against a local JWKS file and leaves the payload where the filter reads it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness import (
    Denied,
    JwtKeys,
    McpAgent,
    free_port,
    post_jsonrpc,
    rpc,
    start_mcp_server,
    text_of,
)
from test_cli_e2e import cli, run_cli  # noqa: F401  (the `cli` fixture)

PLAIN_GATEWAY = """\
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: mcp}
spec:
  gatewayClassName: mcp-access
  listeners:
  - {name: http, protocol: HTTP, port: 80}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: route, namespace: mcp}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /mcp}}]
    backendRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]
---
apiVersion: agentic.networking.x-k8s.io/v0alpha0
kind: XBackend
metadata: {name: tools, namespace: mcp}
spec:
  mcp: {serviceName: tools-server, port: 8000, path: /mcp}
"""


class Deployment:
    """Manifests rendered by `mcp-access envoy` and run by a real Envoy in front of a demo MCP server."""

    def __init__(self, url: str, server: Any, bundle: dict[str, Any], report: str) -> None:
        self.url = url
        self.server = server
        self.bundle = bundle
        self.report = report


def deploy(cli: Path, envoy: Any, wasm: Path, base: Path, manifests: str, server: Any, *extra: str) -> Deployment:
    base.mkdir(parents=True, exist_ok=True)
    (base / "manifests.yaml").write_text(manifests)
    port, admin = free_port(), free_port()
    result = run_cli(
        cli, "envoy", "-f", str(base / "manifests.yaml"), "--wasm", str(wasm),
        "--resolve", f"tools-server=127.0.0.1:{server.port}",
        "--listen", f"http={port}", "--bind", "127.0.0.1", "--admin-port", str(admin),
        "--bundle-out", str(base / "bundle.json"), "--format", "text", "-o", str(base / "envoy.json"), *extra,
    )
    assert result.returncode == 0, result.stderr
    envoy(json.loads((base / "envoy.json").read_text()), name=base.name)
    server.reset()
    return Deployment(f"http://127.0.0.1:{port}/mcp", server, json.loads((base / "bundle.json").read_text()),
                      result.stderr)


def test_jwt_providers_from_the_command_line(cli: Path, wasm_path: Path, work_dir: Path, jwt_keys: JwtKeys,
                                             envoy: Any) -> None:
    """`--jwt-provider` fills the bundle's providers and puts jwt_authn (local JWKS file) before the
    filter: no token passes on to the policies, a token jwt_authn cannot verify is refused (401; 403
    for another audience) before the filter, a valid one passes and is not forwarded upstream (forward defaults to false)."""
    base = work_dir / "policy-language" / "jwt-cli"
    base.mkdir(parents=True, exist_ok=True)
    jwks = base / "jwks.json"
    jwks.write_text(jwt_keys.jwks_json)
    with start_mcp_server(base / "logs", name="jwt-cli") as server:
        d = deploy(cli, envoy, wasm_path, base, PLAIN_GATEWAY, server,
                   "--jwt-provider", f"idp=issuer={jwt_keys.issuer},jwks={jwks},audience={jwt_keys.audience}")
        assert d.bundle["identity"]["jwt"]["providers"] == [{"issuer": jwt_keys.issuer, "metadataKey": "idp"}]
        with McpAgent(d.url) as anonymous:
            assert text_of(anonymous.call_tool("echo", {"text": "no token"})) == "no token"
        with McpAgent(d.url, token=jwt_keys.mint()) as holder:
            assert text_of(holder.call_tool("echo", {"text": "token"})) == "token"
        # jwt_authn's own answers (not the filter's): 401, or 403 for a token for another audience.
        for bad, status in [(jwt_keys.mint_untrusted(), 401), (jwt_keys.mint_expired(), 401),
                            (jwt_keys.mint(aud="someone-else"), 403)]:
            got = post_jsonrpc(d.url, rpc("ping"), token=bad)
            assert got.status == status and b"Jwt" in got.body, got
            with pytest.raises(Denied) as denied:
                with McpAgent(d.url, token=bad):
                    pass
            assert denied.value.status == status
        assert server.requests() and all("authorization" not in {k.lower() for k in r.get("headers", {})} for r in server.requests())
