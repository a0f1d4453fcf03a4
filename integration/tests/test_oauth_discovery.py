"""OAuth discovery end to end (docs/semantics.md §5.6), with `mcp-access envoy` and real Envoy.

A FilterSettings object gives the plain-HTTP listener protected resource metadata (RFC 9728)
naming a small authorization server written for the test (harness/authserver.py, loopback only);
an AccessPolicy lets holders of its tokens (scope `mcp`) call `echo`. The official Python SDK
client, given only the MCP server's URL and its OAuth support (`OAuthClientProvider`), gets a 401
whose `WWW-Authenticate` names the metadata, fetches it from Envoy (a direct response the filter
lets through), registers, is approved, gets a token that Envoy's jwt_authn verifies, then calls
`echo` and is refused `delete_repo` (403: it has a credential now). Raw requests check each
answer on the way: the challenge and the JSON-RPC error, the document at both well-known paths,
jwt_authn's own 401 for an invalid token (and, with `--jwt-required`, for a missing one) pointing
to the metadata too. A TLS listener shows a client certificate counts as a credential.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from harness import (
    ALPHA,
    AuthServer,
    Denied,
    McpAgent,
    free_port,
    get,
    initialize_params,
    post_jsonrpc,
    rpc,
    start_mcp_server,
    text_of,
)
from harness.stack import decisions
from test_cli_e2e import cli  # noqa: F401  (the `cli` fixture)
from test_clients import run_sdk
from test_policy_language import EXAMPLES_INFRA, PLAIN_GATEWAY, deploy

WELL_KNOWN = "/.well-known/oauth-protected-resource"


def policies(issuer: str, gateway: str, listener: str, resource: str, admin: bool = False) -> str:
    """The metadata on `gateway`/`listener`, and echo for holders of the server's tokens
    (`admin`: and `delete_repo` for those whose token has scope `mcp:admin`)."""
    admin_rule = f"""
  - name: admins-delete
    source:
      type: JWT
      jwt: {{issuer: "{issuer}", claims: [{{name: scope, values: ["mcp:admin"]}}]}}
    authorization:
      type: Inline
      mcp: {{methods: [{{name: tools/call, params: [delete_repo]}}]}}""" if admin else ""
    return f"""\
apiVersion: mcp-access.io/v1alpha1
kind: FilterSettings
metadata: {{name: settings}}
spec:
  protectedResources:
  - targetRef: {{namespace: mcp, name: {gateway}, sectionName: {listener}}}
    resource: {resource}
    authorizationServers: ["{issuer}"]
    scopesSupported: [mcp]
    resourceName: The tools
---
apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {{name: members, namespace: mcp}}
spec:
  targetRefs: [{{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}}]
  action: Allow
  rules:
  - name: members-echo
    source:
      type: JWT
      jwt: {{issuer: "{issuer}", claims: [{{name: scope, values: [mcp]}}]}}
    authorization:
      type: Inline
      mcp:
        mcpBaseProtocolMethodsOption: MATCH_BASE_PROTOCOL_METHODS
        methods: [{{name: tools/call, params: [echo]}}]{admin_rule}
"""


class Memory:
    """The SDK's TokenStorage, in memory."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


def oauth_client(url: str) -> OAuthClientProvider:
    """The SDK's OAuth support for `url`, knowing nothing else: its redirect handler follows the
    authorization URL the way a browser would (the server approves at once and redirects back),
    its callback handler returns what the redirect carried."""
    redirects: list[dict[str, list[str]]] = []

    async def redirect_handler(authorization_url: str) -> None:
        async with httpx2.AsyncClient(follow_redirects=False, trust_env=False) as http:
            answer = await http.get(authorization_url)
        assert answer.status_code == 302, answer.text
        redirects.append(parse_qs(urlsplit(answer.headers["location"]).query))

    async def callback_handler() -> AuthorizationCodeResult:
        q = redirects[-1]
        return AuthorizationCodeResult(code=q["code"][0], state=q["state"][0], iss=q["iss"][0])

    metadata = OAuthClientMetadata(client_name="mcp-access e2e", redirect_uris=["http://127.0.0.1:9/callback"],
                                   grant_types=["authorization_code"], response_types=["code"])
    return OAuthClientProvider(server_url=url, client_metadata=metadata, storage=Memory(),
                               redirect_handler=redirect_handler, callback_handler=callback_handler)


def deploy_oauth(cli: Path, envoy: Any, wasm: Path, base: Path, server: Any, auth: AuthServer,
                 *extra: str, admin: bool = False) -> tuple[Any, str, Path]:
    """The plain listener with metadata for `http://127.0.0.1:<port>/mcp`; jwt_authn verifies the
    authorization server's tokens for that resource. Returns the deployment, the metadata URL and
    Envoy's access log."""
    port = free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    jwks = base / "jwks.json"
    base.mkdir(parents=True, exist_ok=True)
    jwks.write_text(auth.keys.jwks_json)
    log = base / "access.log"
    manifests = PLAIN_GATEWAY + "---\n" + policies(auth.issuer, "gw", "http", resource, admin)
    d = deploy(cli, envoy, wasm, base, manifests, server, "--access-log", str(log),
               "--jwt-provider", f"idp=issuer={auth.issuer},jwks={jwks},audience={resource}", *extra, port=port)
    assert d.url == resource
    return d, f"http://127.0.0.1:{port}{WELL_KNOWN}/mcp", log


def test_the_sdk_client_discovers_the_authorization_server_from_the_401(cli: Path, wasm_path: Path, work_dir: Path,
                                                                        envoy: Any) -> None:
    base = work_dir / "oauth" / "discovery"
    auth = AuthServer()
    try:
        with start_mcp_server(base / "logs", name="oauth") as server:
            d, metadata_url, log = deploy_oauth(cli, envoy, wasm_path, base, server, auth)
            challenge = f'Bearer resource_metadata="{metadata_url}"'
            # No credential: 401, the challenge, the JSON-RPC error echoing the id.
            anonymous = post_jsonrpc(d.url, rpc("initialize", initialize_params(), id=7))
            assert (anonymous.status, anonymous.headers.get("www-authenticate")) == (401, challenge), anonymous
            assert anonymous.json()["id"] == 7 and anonymous.json()["error"]["code"] == -32010
            # The document, at the URL the challenge names and at the root well-known path; a token
            # jwt_authn cannot verify does not matter there.
            for url in (metadata_url, f"http://127.0.0.1:{urlsplit(d.url).port}{WELL_KNOWN}"):
                doc = get(url, headers={"authorization": "Bearer not-a-jwt"})
                assert (doc.status, doc.headers.get("content-type")) == (200, "application/json"), doc
                assert doc.headers.get("access-control-allow-origin") == "*"
                assert doc.json() == {"resource": d.url, "authorization_servers": [auth.issuer],
                                      "bearer_methods_supported": ["header"], "scopes_supported": ["mcp"],
                                      "resource_name": "The tools"}
            # A token jwt_authn cannot verify: its 401 points to the metadata too.
            bad = post_jsonrpc(d.url, rpc("ping"), token="not-a-jwt")
            assert bad.status == 401
            assert bad.headers.get("www-authenticate") == f'{challenge}, error="invalid_token"', bad
            server.reset()

            # The SDK client, given the URL alone.
            agent = McpAgent(d.url, auth=oauth_client(d.url))
            with agent:
                assert text_of(agent.call_tool("echo", {"text": "with a token"})) == "with a token"
                with pytest.raises(Denied) as refused:
                    agent.call_tool("delete_repo", {"name": "prod"})
                assert refused.value.status == 403
                assert "www-authenticate" not in refused.value.headers
            # It met the 401 first, and found the server from it: the metadata URL the challenge
            # names is the first thing it fetched, then the authorization server's.
            first = agent.http_errors[0]
            assert (first.status, first.headers.get("www-authenticate")) == (401, challenge)
            assert auth.requests == [("GET", "/.well-known/oauth-authorization-server"), ("POST", "/register"),
                                     ("GET", "/authorize"), ("POST", "/token")]
            assert d.envoy.access_log_paths == [log]
            assert decisions(d.envoy, where=lambda e, _: e["code"] == 403), "no denial logged"
            calls = [(e["method"], e["path"], e["code"]) for e in d.envoy.access_log_entries()]
            # The raw requests above, then the client's: its initialize (401), then the metadata.
            sdk = max(i for i, c in enumerate(calls) if c == ("POST", "/mcp", 401))
            assert calls[sdk + 1] == ("GET", f"{WELL_KNOWN}/mcp", 200), calls
            (entry, fetch), *_ = decisions(d.envoy, since=sdk + 1)
            assert entry["path"] == f"{WELL_KNOWN}/mcp", entry
            assert (fetch["decision"], fetch["policy"], fetch["listener"]) == ("allow", None, "mcp/gw/http")
            # What reached the MCP server: the calls allowed, with no token (jwt_authn removes it).
            assert server.tool_calls() == ["echo"]
            assert all("authorization" not in {k.lower() for k in r.get("headers", {})} for r in server.requests())
            assert len(auth.issued) == 1
    finally:
        auth.close()


def test_the_sdk_client_steps_up_its_scope_on_insufficient_scope(cli: Path, wasm_path: Path, work_dir: Path,
                                                                 envoy: Any) -> None:
    """A call the token's scope does not cover, that a rule would admit with `mcp:admin`: 403 with
    `error="insufficient_scope"` and that scope; the SDK client asks the authorization server again
    for its scopes and that one (SEP-2350), and its retried call goes through."""
    base = work_dir / "oauth" / "step-up"
    auth = AuthServer(scopes=("mcp", "mcp:admin"))
    try:
        with start_mcp_server(base / "logs", name="step-up") as server:
            d, metadata_url, _ = deploy_oauth(cli, envoy, wasm_path, base, server, auth, admin=True)
            agent = McpAgent(d.url, auth=oauth_client(d.url))
            with agent:
                assert text_of(agent.call_tool("echo", {"text": "member"})) == "member"
                agent.call_tool("delete_repo", {"name": "scratch"})
            challenge = [e for e in agent.http_errors if e.status == 403]
            assert [e.headers.get("www-authenticate") for e in challenge] == [
                f'Bearer error="insufficient_scope", scope="mcp:admin", resource_metadata="{metadata_url}"'
            ], agent.http_errors
            # Registered once; authorized twice, the second time for both scopes.
            assert auth.requests == [("GET", "/.well-known/oauth-authorization-server"), ("POST", "/register"),
                                     ("GET", "/authorize"), ("POST", "/token"),
                                     ("GET", "/authorize"), ("POST", "/token")]
            scopes = [json.loads(_payload(t))["scope"] for t in auth.issued]
            assert scopes == ["mcp", "mcp mcp:admin"]
            # The refused call never reached the server; the retried one did.
            assert server.tool_calls() == ["echo", "delete_repo"]
    finally:
        auth.close()


def test_the_typescript_sdk_client_steps_up_its_scope_on_insufficient_scope(cli: Path, wasm_path: Path,
                                                                            work_dir: Path, envoy: Any) -> None:
    """The TypeScript SDK's transport, on the same 403, authorizes again for the scope the
    challenge names (the SDK asks for that scope alone), and the call goes through."""
    base = work_dir / "oauth" / "step-up-ts"
    auth = AuthServer(scopes=("mcp", "mcp:admin"))
    try:
        with start_mcp_server(base / "logs", name="step-up-ts") as server:
            d, _, _ = deploy_oauth(cli, envoy, wasm_path, base, server, auth, admin=True)
            echo, delete = 'call:echo:{"text":"member"}', 'call:delete_repo:{"name":"scratch"}'
            reports = run_sdk("typescript", d.url, "--oauth", echo, delete)
            assert reports["connect"]["ok"], reports
            assert (reports[echo]["ok"], reports[echo]["text"]) == (True, "member"), reports
            assert (reports[delete]["ok"], reports[delete]["is_error"]) == (True, False), reports
            assert [json.loads(_payload(t))["scope"] for t in auth.issued] == ["mcp", "mcp:admin"]
            assert server.tool_calls() == ["echo", "delete_repo"]
    finally:
        auth.close()


def _payload(jwt: str) -> bytes:
    """A JWT's payload, decoded (the test's own tokens)."""
    part = jwt.split(".")[1]
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def test_with_jwt_required_jwt_authn_challenges_a_missing_token(cli: Path, wasm_path: Path, work_dir: Path,
                                                               envoy: Any) -> None:
    """`--jwt-required`: jwt_authn answers a request without a token itself, with the same
    challenge, and the SDK client goes the same way."""
    base = work_dir / "oauth" / "required"
    auth = AuthServer()
    try:
        with start_mcp_server(base / "logs", name="oauth-required") as server:
            d, metadata_url, _ = deploy_oauth(cli, envoy, wasm_path, base, server, auth, "--jwt-required", "gw/http")
            missing = post_jsonrpc(d.url, rpc("initialize", initialize_params()))
            assert (missing.status, missing.text) == (401, "Jwt is missing"), missing
            assert missing.headers.get("www-authenticate") == f'Bearer resource_metadata="{metadata_url}"'
            assert get(metadata_url).status == 200
            with McpAgent(d.url, auth=oauth_client(d.url)) as agent:
                assert text_of(agent.call_tool("echo", {"text": "required"})) == "required"
            assert server.tool_calls() == ["echo"]
    finally:
        auth.close()


def test_a_client_certificate_is_a_credential(cli: Path, wasm_path: Path, work_dir: Path, pki: Any,
                                              envoy: Any) -> None:
    """A TLS listener that accepts callers with or without a client certificate: without one, the
    challenge; with one (whether or not it gives a SPIFFE ID), the usual 403. Envoy's
    `connection.mtls` tells the filter."""
    base = work_dir / "oauth" / "tls"
    auth = AuthServer()
    try:
        port = free_port()
        resource = f"https://127.0.0.1:{port}/mcp"
        manifests = EXAMPLES_INFRA + "---\n" + policies(auth.issuer, "agents-gateway", "mcp-https", resource)
        base.mkdir(parents=True, exist_ok=True)
        (base / "jwks.json").write_text(auth.keys.jwks_json)
        with start_mcp_server(base / "logs", name="oauth-tls") as server:
            d = deploy(cli, envoy, wasm_path, base, manifests, server,
                       "--jwt-provider", f"idp=issuer={auth.issuer},jwks={base / 'jwks.json'},audience={resource}",
                       "--tls-cert", f"gateway-cert={pki.server.cert},{pki.server.key}",
                       "--client-ca", f"agents-ca={pki.ca.cert}", listener="mcp-https", scheme="https", port=port)
            call = rpc("tools/call", {"name": "echo", "arguments": {"text": "x"}})
            none = post_jsonrpc(d.url, call, ca=pki.ca)
            assert none.status == 401, none
            assert none.headers["www-authenticate"] == f'Bearer resource_metadata="https://127.0.0.1:{port}{WELL_KNOWN}/mcp"'
            for cert in (pki.client(ALPHA), pki.client([ALPHA, "spiffe://example.org/ns/agents/sa/beta"])):
                with_cert = post_jsonrpc(d.url, call, cert=cert, ca=pki.ca)
                assert (with_cert.status, with_cert.headers.get("www-authenticate")) == (403, None), with_cert
            assert server.tool_calls() == []
    finally:
        auth.close()
