"""The demo's topology (envoy-demo/demo.py runs it; integration/tests/test_clients.py drives
third-party clients through it): its names, its token issuer and how `mcp-access envoy` renders
Envoy's configuration from envoy-demo/manifests for local ports and files."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from .certs import ALPHA, BETA, Pki
from .jwt import JwtKeys, make_jwt_keys
from .procs import DEMO_DIR

MANIFESTS = DEMO_DIR / "manifests"
MCP_SERVER_NAME = "demo-tools"
AUTHORIZER = "risk-check"  # the Service the ExternalAuth policy's backendRef names
DENIED_TOOL = "add"  # what the authorizer refuses
# How the authorizer's denial names its reason: an RFC 6750 challenge, as the MCP authorization
# spec asks of a 403 for a valid token that lacks a permission (relayed by the filter).
AUTHZ_CHALLENGE = f'Bearer error="insufficient_scope", error_description="{AUTHORIZER} refuses this tool"'
BACKEND_SERVICE = "tools"  # the XBackend's serviceName
LISTENER = "mcp-mtls"
JWT_LISTENER = "mcp-jwt"
# The demo's token issuer: its signing key is made at start, its JWKS given to Envoy's jwt_authn.
JWT_ISSUER = "https://auth.demo.mcp-access.local"
JWT_AUDIENCE = "mcp-access-demo"
JWT_PROVIDER = "demo-idp"
TOKEN_TTL_S = 24 * 3600  # tokens printed by --keep stay valid for a day
AGENTS = {"alpha": ALPHA, "beta": BETA}
# Compiler flags of every rendering: the manifests' ServiceAccount sources are SPIFFE IDs in this trust domain.
COMPILE_FLAGS = ["-f", str(MANIFESTS), "--trust-domain", "example.org", "--strict", "--format", "text"]


class CliError(Exception):
    """`mcp-access envoy` failed; the message carries its standard error."""


def run_cli(cli: Path, *args: str) -> str:
    """Runs `mcp-access envoy` on the demo's manifests; its standard output (the report goes to stderr)."""
    proc = subprocess.run([str(cli), "envoy", *COMPILE_FLAGS, *args], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise CliError(f"mcp-access envoy failed (exit {proc.returncode}):\n{proc.stderr.strip()}")
    return proc.stdout


def render_local(cli: Path, *, wasm: Path, pki: Pki, jwks: Path, mcp_port: int, authz_port: int, mtls_port: int,
                 jwt_port: int, admin_port: int, access_log: Path, out: Path, extra: Sequence[str] = ()) -> None:
    """Envoy's configuration (`out`) for the demo on 127.0.0.1: the mTLS listener on `mtls_port`,
    the bearer-JWT listener on `jwt_port`, the MCP server and the authorizer on their ports;
    `extra` are more flags of `mcp-access envoy`."""
    run_cli(
        cli, "--wasm", str(wasm),
        "--tls-cert", f"gateway-cert={pki.server.cert},{pki.server.key}",
        "--client-ca", f"agents-ca={pki.ca.cert}",
        "--resolve", f"{BACKEND_SERVICE}=127.0.0.1:{mcp_port}",
        "--resolve", f"{AUTHORIZER}=127.0.0.1:{authz_port}",
        "--jwt-provider", f"{JWT_PROVIDER}=issuer={JWT_ISSUER},jwks={jwks},audience={JWT_AUDIENCE}",
        "--jwt-required", JWT_LISTENER,
        "--listen", f"{LISTENER}={mtls_port}", "--listen", f"{JWT_LISTENER}={jwt_port}",
        "--bind", "127.0.0.1", "--admin-port", str(admin_port),
        "--access-log", str(access_log),
        "-o", str(out), *extra,
    )


def make_tokens(directory: Path) -> tuple[JwtKeys, Path]:
    """The demo's token issuer: a new RSA key, its JWKS (jwks.json, what jwt_authn verifies with) and
    a token for each agent (<agent>.jwt: sub = the agent's name, valid for a day)."""
    directory.mkdir(parents=True, exist_ok=True)
    keys = make_jwt_keys(issuer=JWT_ISSUER, audience=JWT_AUDIENCE, kid="demo-1")
    jwks = directory / "jwks.json"
    jwks.write_text(keys.jwks_json)
    for name in AGENTS:
        (directory / f"{name}.jwt").write_text(keys.mint({}, sub=name, ttl=TOKEN_TTL_S) + "\n")
    return keys, jwks
