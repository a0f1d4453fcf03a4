"""The whole policy language from manifests, end to end: manifests -> `mcp-access envoy` ->
real Envoy 1.40 with the built filter, real MCP SDK clients and the demo MCP server.

- JWT providers declared on the command line (`--jwt-provider`): Envoy's jwt_authn verifies
  tokens against a local JWKS file (or one fetched over HTTPS) and leaves the payload where the
  filter reads it; `envoy --jwt-required` makes a missing token a 401 with a challenge.
- Every CEL scenario of kube-agentic-networking's e2e tests (single rule, all failures,
  multi-rule, macros, the variables), as XAccessPolicies with ServiceAccount sources over mTLS
  (KAN's `get-sum` tool is the demo server's `get_weather`).
- The project's AccessPolicy kind: a Deny policy at the Gateway, JWT sources (claims, subject)
  at the backend, a `when` condition on a Deny rule and a CEL `when` reading verified claims.
- The CRD examples as they are: the vendored upstream ones and the project's own
  (config-schema/crds/examples/valid).
"""

from __future__ import annotations

import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from harness import (
    ALPHA,
    BETA,
    Denied,
    JwtKeys,
    McpAgent,
    free_port,
    initialize_params,
    make_jwt_keys,
    post_jsonrpc,
    request,
    rpc,
    start_mcp_server,
    text_of,
)
from harness.manifests import gateway, http_listener, tools_topology
from test_cli_e2e import cli, run_cli  # noqa: F401  (the `cli` fixture)
from test_clients import run_sdk

PLAIN_GATEWAY = tools_topology(gateway(http_listener("http", 80)), "{name: gw}", route="route")


class Deployment:
    """Manifests rendered by `mcp-access envoy` and run by a real Envoy in front of a demo MCP server."""

    def __init__(self, url: str, server: Any, bundle: dict[str, Any], report: str) -> None:
        self.url = url
        self.server = server
        self.bundle = bundle
        self.report = report
        self.envoy: Any = None  # the EnvoyProcess running it


def deploy(cli: Path, envoy: Any, wasm: Path, base: Path, manifests: str, server: Any, *extra: str,
           listener: str = "http", scheme: str = "http", port: int | None = None) -> Deployment:
    """`mcp-access envoy` for `manifests`, run: the listener on `port` (default: a free one)."""
    base.mkdir(parents=True, exist_ok=True)
    (base / "manifests.yaml").write_text(manifests)
    port, admin = port or free_port(), free_port()
    result = run_cli(
        cli, "envoy", "-f", str(base / "manifests.yaml"), "--wasm", str(wasm), "--strict",
        "--resolve", f"tools-server=127.0.0.1:{server.port}",
        "--listen", f"{listener}={port}", "--bind", "127.0.0.1", "--admin-port", str(admin),
        "--bundle-out", str(base / "bundle.json"), "--format", "text", "-o", str(base / "envoy.json"), *extra,
    )
    assert result.returncode == 0, result.stderr
    proxy = envoy(json.loads((base / "envoy.json").read_text()), name=base.name)
    server.reset()
    d = Deployment(f"{scheme}://127.0.0.1:{port}/mcp", server, json.loads((base / "bundle.json").read_text()),
                   result.stderr)
    d.envoy = proxy
    return d


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


def test_jwt_required_answers_a_missing_token_with_a_challenge(cli: Path, wasm_path: Path, work_dir: Path,
                                                              jwt_keys: JwtKeys, envoy: Any) -> None:
    """`--jwt-required LISTENER`: jwt_authn answers a request without a token 401 with a
    `WWW-Authenticate: Bearer` challenge (the MCP authorization spec's answer), where without the
    option it reaches the policies; a CORS preflight, which carries no token, still passes
    jwt_authn (and is then the filter's to judge); a valid token is served."""
    base = work_dir / "policy-language" / "jwt-required"
    base.mkdir(parents=True, exist_ok=True)
    jwks = base / "jwks.json"
    jwks.write_text(jwt_keys.jwks_json)
    provider = f"idp=issuer={jwt_keys.issuer},jwks={jwks},audience={jwt_keys.audience}"
    with start_mcp_server(base / "logs", name="jwt-required") as server:
        d = deploy(cli, envoy, wasm_path, base, PLAIN_GATEWAY, server, "--jwt-provider", provider,
                   "--jwt-required", "gw/http")
        missing = post_jsonrpc(d.url, rpc("initialize", initialize_params()))
        assert (missing.status, missing.text) == (401, "Jwt is missing"), missing
        # RFC 6750 3.1: no error code for a request that has no credentials at all. The realm is the
        # URL the client asked for (Envoy keeps the :authority's port).
        assert missing.headers.get("www-authenticate") == f'Bearer realm="{d.url}"', missing
        with pytest.raises(Denied) as denied:
            with McpAgent(d.url):
                pass
        assert denied.value.status == 401
        expired = post_jsonrpc(d.url, rpc("ping"), token=jwt_keys.mint_expired())
        assert expired.status == 401 and 'error="invalid_token"' in expired.headers.get("www-authenticate", ""), expired
        preflight = request("OPTIONS", d.url, headers={
            "origin": "https://inspector.example", "access-control-request-method": "POST",
            "access-control-request-headers": "authorization, content-type"})
        # Past jwt_authn; no policy here, so the filter lets it on to the MCP server, which (at the
        # SDK's defaults, on loopback) refuses a foreign Origin itself: its 403, not Envoy's.
        assert preflight.status == 403 and preflight.body == b"Invalid Origin header", preflight
        assert "x-envoy-upstream-service-time" in preflight.headers, preflight
        with McpAgent(d.url, token=jwt_keys.mint()) as holder:
            assert text_of(holder.call_tool("echo", {"text": "token"})) == "token"


# ---------------------------------------------------------------------------
# kube-agentic-networking's CEL scenarios

KAN_GATEWAY = """\
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: e2e-gateway, namespace: e2e}
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
        validation:
          caCertificateRefs: [{group: "", kind: ConfigMap, name: agents-ca}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: e2e-route, namespace: e2e}
spec:
  parentRefs: [{name: e2e-gateway}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /mcp}}]
    backendRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: e2e-mcp-backend}]
---
apiVersion: agentic.networking.x-k8s.io/v0alpha0
kind: XBackend
metadata: {name: e2e-mcp-backend, namespace: e2e}
spec:
  mcp: {serviceName: tools-server, port: 8000, path: /mcp}
"""


def kan_policy(*rules: tuple[str, str]) -> str:
    """A KAN e2e CEL policy: Allow on the backend for alpha's ServiceAccount through the given CEL
    rules, plus the Inline rule KAN adds so that the base protocol (initialize...) is admitted."""
    alpha = "source: {type: ServiceAccount, serviceAccount: {namespace: agents, name: alpha}}"
    out = ("apiVersion: agentic.networking.x-k8s.io/v1alpha1\nkind: XAccessPolicy\n"
           "metadata: {name: e2e-cel, namespace: e2e}\nspec:\n"
           "  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: e2e-mcp-backend}]\n"
           "  action: Allow\n  rules:\n")
    for name, expression in rules:
        out += (f"  - name: {name}\n    {alpha}\n    authorization:\n      type: CEL\n"
                f"      cel: {{expression: {json.dumps(expression)}}}\n")
    out += (f"  - name: allow-base-mcp\n    {alpha}\n    authorization:\n      type: Inline\n"
            "      mcp: {mcpBaseProtocolMethodsOption: MATCH_BASE_PROTOCOL_METHODS}\n")
    return out


MACROS = ("request.path.startsWith('/mc') && request.headers['mcp-protocol-version'].contains('2025') && "
          "request.mcp.tool_name.matches('^get_[a-z]+$')")
# KAN's cases 10-15, one variable each. request.host is the :authority as received, port included
# (KAN: `request.host.endsWith(':10001')`); request.hostname is the canonical host.
VARIABLES = ["request.path == '/mcp'", "request.url_path == '/mcp'", "request.method == 'POST'",
             "request.host == '127.0.0.1:' + string(request.port) && request.hostname == '127.0.0.1'",
             "request.headers['mcp-protocol-version'] == '2025-11-25'"]
FAILING_VARIABLES = ["request.path == '/wrong'", "request.url_path == '/wrong'", "request.method == 'GET'",
                     "request.host.endsWith(':9999')", "request.headers['mcp-protocol-version'] == '1999-01-01'",
                     "request.time.getFullYear() < 2000"]


# (scenario, rules, tools alpha may call, tools denied)
KAN_SCENARIOS = [
    ("single-rule", [("allow-get-sum-only", "request.mcp.tool_name == 'get_weather'")], ["get_weather"], ["echo"]),
    ("all-failures", [("allow-nothing", "request.mcp.tool_name == 'non-existent'")], [], ["get_weather", "echo"]),
    ("multi-rule", [("allow-get-sum", "request.mcp.tool_name == 'get_weather'"),
                    ("allow-non-existent", "request.mcp.tool_name == 'non-existent'")], ["get_weather"], ["echo"]),
    ("macros", [("allow-macros", MACROS)], ["get_weather"], ["echo"]),
    ("variables", [("all-hold", " && ".join(VARIABLES))], ["get_weather", "echo"], []),
    ("failing-variables", [(f"fails-{i}", e) for i, e in enumerate(FAILING_VARIABLES)], [], ["get_weather"]),
    ("time", [("time", "request.time.getFullYear() >= 2025")], ["get_weather", "echo"], []),
]


@pytest.mark.parametrize(("scenario", "rules", "allowed", "denied"), KAN_SCENARIOS, ids=[s[0] for s in KAN_SCENARIOS])
def test_kan_cel_scenarios(scenario: str, rules: list[tuple[str, str]], allowed: list[str], denied: list[str],
                           cli: Path, wasm_path: Path, work_dir: Path, pki: Any, envoy: Any) -> None:
    base = work_dir / "policy-language" / f"kan-{scenario}"
    with start_mcp_server(base / "logs", name=f"kan-{scenario}") as server:
        d = deploy(cli, envoy, wasm_path, base, KAN_GATEWAY + "---\n" + kan_policy(*rules), server,
                   "--trust-domain", "example.org",
                   "--tls-cert", f"gateway-cert={pki.server.cert},{pki.server.key}",
                   "--client-ca", f"agents-ca={pki.ca.cert}", listener="https", scheme="https")
        assert all(r.get("authorization", {}).get("cel") for r in d.bundle["policies"][0]["rules"][:-1])
        with McpAgent(d.url, cert=pki.client(ALPHA), ca=pki.ca) as alpha:  # initialize: the base rule
            # The listing holds exactly what the caller may call (per-caller listings).
            listed = alpha.tool_names()
            assert all(t in listed for t in allowed) and not any(t in listed for t in denied), listed
            for tool in allowed:
                alpha.call_tool(tool, {"city": "Oslo"} if tool == "get_weather" else {"text": "x"})
            for tool in denied:
                with pytest.raises(Denied) as e:
                    alpha.call_tool(tool, {"city": "Oslo"} if tool == "get_weather" else {"text": "x"})
                assert e.value.status == 403 and e.value.code == -32010, scenario
        # beta has no rule at all, not even for initialize.
        with pytest.raises(Denied):
            with McpAgent(d.url, cert=pki.client(BETA), ca=pki.ca):
                pass
        assert server.tool_calls() == allowed


# ---------------------------------------------------------------------------
# The AccessPolicy kind: Deny, JWT sources, when

JWT_POLICIES = """\
apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {name: no-repo-deletion, namespace: mcp}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  action: Deny
  rules:
  - name: delete-repo
    authorization: {type: Inline, mcp: {methods: [{name: tools/call, params: [delete_repo]}]}}
---
apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {name: token-holders, namespace: mcp}
spec:
  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]
  action: Allow
  rules:
  - name: staff
    source:
      type: JWT
      jwt:
        issuer: ISSUER
        claims: [{name: groups, values: [staff]}]
    authorization:
      type: Inline
      mcp:
        mcpBaseProtocolMethodsOption: MATCH_BASE_PROTOCOL_METHODS
        methods: [{name: tools/call, params: [echo, get_weather]}]
  - name: on-call
    source: {type: JWT, jwt: {issuer: ISSUER, subject: oncall}}
  - name: auditors
    source: {type: JWT, jwt: {issuer: ISSUER}}
    authorization:
      type: Inline
      mcp: {mcpBaseProtocolMethodsOption: MATCH_BASE_PROTOCOL_METHODS, methods: [{name: tools/call, params: [echo]}]}
    when:
    - predicate: "'auditor' in jwt.claims.roles"
---
apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {name: no-add-in-prod, namespace: mcp}
spec:
  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]
  action: Deny
  when:  # a missing header would be an error, which makes a Deny policy apply (fail closed)
  - predicate: "'x-env' in request.headers && request.headers['x-env'] == 'prod'"
  rules:
  - name: add
    authorization: {type: Inline, mcp: {methods: [{name: tools/call, params: [add]}]}}
"""


def deploy_access_policies(cli: Path, envoy: Any, wasm: Path, base: Path, jwt_keys: JwtKeys, server: Any,
                           policies: str = JWT_POLICIES) -> Deployment:
    base.mkdir(parents=True, exist_ok=True)
    jwks = base / "jwks.json"
    jwks.write_text(jwt_keys.jwks_json)
    manifests = PLAIN_GATEWAY + "---\n" + policies.replace("ISSUER", jwt_keys.issuer)
    return deploy(cli, envoy, wasm, base, manifests, server, "--jwt-provider", f"idp=issuer={jwt_keys.issuer},jwks={jwks}")


def test_access_policy_deny_jwt_and_when(cli: Path, wasm_path: Path, work_dir: Path, jwt_keys: JwtKeys,
                                         envoy: Any) -> None:
    base = work_dir / "policy-language" / "access-policy"
    with start_mcp_server(base / "logs", name="access-policy") as server:
        d = deploy_access_policies(cli, envoy, wasm_path, base, jwt_keys, server)
        actions = {p["name"]: p["action"] for p in d.bundle["policies"]}
        assert actions == {"no-repo-deletion": "Deny", "token-holders": "Allow", "no-add-in-prod": "Deny"}

        staff = jwt_keys.mint({"groups": ["staff", "eng"]}, sub="u1")
        with McpAgent(d.url, token=staff) as agent:
            assert text_of(agent.call_tool("echo", {"text": "hi"})) == "hi"
            agent.call_tool("get_weather", {"city": "Rome"})
            for tool, args in [("add", {"a": 1, "b": 2}), ("delete_repo", {"name": "prod"})]:
                with pytest.raises(Denied) as e:
                    agent.call_tool(tool, args)
                assert e.value.status == 403
        on_call = jwt_keys.mint(sub="oncall")
        with McpAgent(d.url, token=on_call) as agent:
            assert text_of(agent.call_tool("add", {"a": 1, "b": 2})) == "3"
            with pytest.raises(Denied):  # the Gateway's Deny comes before any Allow
                agent.call_tool("delete_repo", {"name": "prod"})
        with McpAgent(d.url, token=on_call, headers={"x-env": "prod"}) as agent:
            agent.call_tool("echo", {"text": "still fine"})
            with pytest.raises(Denied):  # the Deny policy applies where its `when` holds
                agent.call_tool("add", {"a": 1, "b": 2})
        # Holders of other tokens, and callers without one, have no rule: not even initialize.
        for token in [jwt_keys.mint({"groups": ["guests"]}, sub="g1"), None]:
            with pytest.raises(Denied) as e:
                with McpAgent(d.url, token=token):
                    pass
            assert e.value.status == 403
        assert server.tool_calls() == ["echo", "get_weather", "add", "echo"]


def test_a_rule_when_over_verified_claims(cli: Path, wasm_path: Path, work_dir: Path, jwt_keys: JwtKeys,
                                          envoy: Any) -> None:
    base = work_dir / "policy-language" / "claims-when"
    with start_mcp_server(base / "logs", name="claims-when") as server:
        d = deploy_access_policies(cli, envoy, wasm_path, base, jwt_keys, server)
        auditor = jwt_keys.mint({"roles": ["auditor"]}, sub="a1")
        with McpAgent(d.url, token=auditor) as agent:
            agent.call_tool("echo", {"text": "audit"})
            with pytest.raises(Denied):
                agent.call_tool("get_weather", {"city": "Oslo"})
        with pytest.raises(Denied):
            with McpAgent(d.url, token=jwt_keys.mint({"roles": ["viewer"]}, sub="v1")):
                pass


SCOPED_POLICY = """\
apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {name: scoped, namespace: mcp}
spec:
  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]
  action: Allow
  rules:
  - name: sessions
    source: {type: JWT, jwt: {issuer: ISSUER}}
    authorization:
      type: Inline
      mcp: {mcpBaseProtocolMethodsOption: MATCH_BASE_PROTOCOL_METHODS, methods: [{name: tools/list}]}
  - name: readers
    source: {type: JWT, jwt: {issuer: ISSUER, claims: [{name: scope, values: ["tools:read"]}]}}
    authorization: {type: Inline, mcp: {methods: [{name: tools/call, params: [echo]}]}}
"""


def test_a_token_short_of_a_scope_gets_insufficient_scope(cli: Path, wasm_path: Path, work_dir: Path,
                                                          jwt_keys: JwtKeys, envoy: Any) -> None:
    """`scope` is a set of space-separated scopes; a token the `readers` rule would admit with
    `tools:read` gets 403 with an `insufficient_scope` challenge naming it (docs/semantics.md §5.6)."""
    base = work_dir / "policy-language" / "scope"
    with start_mcp_server(base / "logs", name="scope") as server:
        d = deploy_access_policies(cli, envoy, wasm_path, base, jwt_keys, server, SCOPED_POLICY)
        with McpAgent(d.url, token=jwt_keys.mint({"scope": "tools:list  tools:read"}, sub="r1")) as agent:
            assert text_of(agent.call_tool("echo", {"text": "hi"})) == "hi"
        with McpAgent(d.url, token=jwt_keys.mint({"scope": "tools:list"}, sub="l1")) as agent:
            with pytest.raises(Denied) as e:
                agent.call_tool("echo", {"text": "no"})
            assert e.value.status == 403
            assert e.value.headers.get("www-authenticate") == 'Bearer error="insufficient_scope", scope="tools:read"'
            assert e.value.code == -32010
            # A tool no rule admits whatever the scopes: the usual 403, no challenge.
            with pytest.raises(Denied) as e:
                agent.call_tool("add", {"a": 1, "b": 2})
            assert e.value.status == 403 and "www-authenticate" not in e.value.headers
        # "tools:readonly" is no "tools:read".
        with McpAgent(d.url, token=jwt_keys.mint({"scope": "tools:readonly"}, sub="l2")) as agent:
            with pytest.raises(Denied) as e:
                agent.call_tool("echo", {"text": "no"})
            assert e.value.status == 403
        assert server.tool_calls() == ["echo"]
        # The official Python SDK, given the bearer token (no OAuth provider: step-up needs an
        # authorization server), reports the JSON-RPC error of the 403 as the call's error.
        sdk = run_sdk("python", d.url, 'call:echo:{"text": "no"}', token=jwt_keys.mint({"scope": "tools:list"}))
        assert sdk["connect"]["ok"], sdk
        assert sdk['call:echo:{"text": "no"}']["error"]["code"] == -32010, sdk


# ---------------------------------------------------------------------------
# The vendored upstream CRD examples, as they are

UPSTREAM_EXAMPLES = Path(__file__).resolve().parents[2] / "config-schema/crds/upstream/kube-agentic-networking/examples/valid"


def example_infra(gateway: str, backend: str) -> str:
    """KAN_GATEWAY renamed to what an example targets, in namespace default."""
    return (KAN_GATEWAY.replace("e2e-mcp-backend", backend).replace("e2e-gateway", gateway)
            .replace("namespace: e2e", "namespace: default"))


def calls_reaching(server: Any, url: str, pki: Any, spiffe: str, tools: list[str]) -> dict[str, int]:
    """The HTTP status of a raw tools/call of each tool from `spiffe`; the server's request log says
    which ones got through the filter."""
    return {t: post_jsonrpc(url, rpc("tools/call", {"name": t, "arguments": {}}), cert=pki.client(spiffe),
                            ca=pki.ca).status for t in tools}


def test_vendored_cel_example_end_to_end(cli: Path, wasm_path: Path, work_dir: Path, pki: Any, envoy: Any) -> None:
    """examples/valid/cel-policy.yaml: my-agent may call verify_* tools and nothing else (its CEL
    rule admits no initialize either: the example has no base-protocol rule)."""
    base = work_dir / "policy-language" / "upstream-cel"
    agent = "spiffe://example.org/ns/default/sa/my-agent"
    with start_mcp_server(base / "logs", name="upstream-cel") as server:
        d = deploy(cli, envoy, wasm_path, base,
                   example_infra("e2e-gateway", "my-backend") + "---\n" + (UPSTREAM_EXAMPLES / "cel-policy.yaml").read_text(),
                   server, "--trust-domain", "example.org",
                   "--tls-cert", f"gateway-cert={pki.server.cert},{pki.server.key}",
                   "--client-ca", f"agents-ca={pki.ca.cert}", listener="https", scheme="https")
        got = calls_reaching(server, d.url, pki, agent, ["verify_signature", "echo", "verifyless"])
        assert got["echo"] == 403 and got["verifyless"] == 403, got
        assert got["verify_signature"] != 403, got
        other = calls_reaching(server, d.url, pki, ALPHA, ["verify_signature"])
        assert other == {"verify_signature": 403}
        assert post_jsonrpc(d.url, rpc("initialize", initialize_params()), cert=pki.client(agent), ca=pki.ca).status == 403
        assert server.tool_calls() == ["verify_signature"]


def test_vendored_v1alpha1_example_end_to_end(cli: Path, wasm_path: Path, work_dir: Path, pki: Any,
                                              envoy: Any) -> None:
    """examples/valid/accesspolicy_v1alpha1.yaml at the Gateway: my-sa may do anything; the SPIFFE
    ID spiffe://example.com/my-service may call tool param1 only; anyone else nothing."""
    base = work_dir / "policy-language" / "upstream-v1alpha1"
    with start_mcp_server(base / "logs", name="upstream-v1alpha1") as server:
        d = deploy(cli, envoy, wasm_path, base,
                   example_infra("my-gateway", "tools") + "---\n" + (UPSTREAM_EXAMPLES / "accesspolicy_v1alpha1.yaml").read_text(),
                   server, "--trust-domain", "example.org",
                   "--tls-cert", f"gateway-cert={pki.server.cert},{pki.server.key}",
                   "--client-ca", f"agents-ca={pki.ca.cert}", listener="https", scheme="https")
        with McpAgent(d.url, cert=pki.client("spiffe://example.org/ns/default/sa/my-sa"), ca=pki.ca) as sa:
            assert text_of(sa.call_tool("echo", {"text": "sa"})) == "sa"
        got = calls_reaching(server, d.url, pki, "spiffe://example.com/my-service", ["param1", "echo"])
        assert got["echo"] == 403 and got["param1"] != 403, got
        assert calls_reaching(server, d.url, pki, ALPHA, ["param1"]) == {"param1": 403}
        assert server.tool_calls() == ["echo", "param1"]


# ---------------------------------------------------------------------------
# The project's AccessPolicy examples (config-schema/crds/examples/valid), as they are

PROJECT_EXAMPLES = Path(__file__).resolve().parents[2] / "config-schema/crds/examples/valid"

EXAMPLES_INFRA = (PROJECT_EXAMPLES.parent / "targets.yaml").read_text()


def test_access_policy_examples_end_to_end(cli: Path, wasm_path: Path, work_dir: Path, pki: Any, envoy: Any) -> None:
    """deny.yaml, jwt.yaml and cel.yaml together: the Gateway denies delete_repo to all; at the
    backend, staff tokens (group and nested region claims) get echo and get_weather, the on-call
    subject everything, alpha's certificate the get_* tools by CEL, unless the arguments name the
    production database (a Deny rule in CEL); everyone gets the base protocol."""
    base = work_dir / "policy-language" / "examples"
    base.mkdir(parents=True, exist_ok=True)
    idp = make_jwt_keys(issuer="https://idp.example.com")
    (base / "jwks.json").write_text(idp.jwks_json)
    manifests = EXAMPLES_INFRA + "".join("---\n" + (PROJECT_EXAMPLES / f).read_text()
                                         for f in ("deny.yaml", "jwt.yaml", "cel.yaml"))
    with start_mcp_server(base / "logs", name="examples") as server:
        d = deploy(cli, envoy, wasm_path, base, manifests, server, "--trust-domain", "example.org",
                   "--tls-cert", f"gateway-cert={pki.server.cert},{pki.server.key}",
                   "--client-ca", f"agents-ca={pki.ca.cert}",
                   "--jwt-provider", f"idp=issuer=https://idp.example.com,jwks={base / 'jwks.json'}",
                   listener="mcp-https", scheme="https")
        staff_eu = idp.mint({"groups": ["staff"], "org": {"region": "eu"}}, sub="u1")
        with McpAgent(d.url, token=staff_eu, ca=pki.ca) as agent:
            assert text_of(agent.call_tool("echo", {"text": "eu"})) == "eu"
            with pytest.raises(Denied):
                agent.call_tool("add", {"a": 1, "b": 2})
        staff_asia = idp.mint({"groups": ["staff"], "org": {"region": "asia"}}, sub="u2")
        with McpAgent(d.url, token=staff_asia, ca=pki.ca) as agent:  # base protocol only
            with pytest.raises(Denied):
                agent.call_tool("echo", {"text": "asia"})
        with McpAgent(d.url, token=idp.mint(sub="oncall@example.com"), ca=pki.ca) as agent:
            assert text_of(agent.call_tool("add", {"a": 2, "b": 2})) == "4"
            with pytest.raises(Denied):  # the Gateway's Deny policy
                agent.call_tool("delete_repo", {"name": "x"})
        with McpAgent(d.url, cert=pki.client(ALPHA), ca=pki.ca) as alpha:
            alpha.call_tool("get_weather", {"city": "Oslo"})
            with pytest.raises(Denied):
                alpha.call_tool("echo", {"text": "x"})
        prod = post_jsonrpc(d.url, rpc("tools/call", {"name": "get_weather", "arguments": {"city": "x", "database": "prod"}}),
                            cert=pki.client(ALPHA), ca=pki.ca)
        assert prod.status == 403, prod
        assert server.tool_calls() == ["echo", "add", "get_weather"]


def test_jwt_provider_with_a_remote_jwks(cli: Path, wasm_path: Path, work_dir: Path, pki: Any, jwt_keys: JwtKeys,
                                         envoy: Any) -> None:
    """`jwks=https://...`: Envoy fetches the keys through the cluster `envoy` renders for them (TLS
    verified against --upstream-ca), and verifies tokens with them."""
    body = jwt_keys.jwks_json.encode()
    fetched: list[str] = []

    class Jwks(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            fetched.append(self.path)
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Jwks)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(pki.server.cert), str(pki.server.key))
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        base = work_dir / "policy-language" / "remote-jwks"
        policy = JWT_POLICIES.replace("ISSUER", jwt_keys.issuer)
        with start_mcp_server(base / "logs", name="remote-jwks") as server:
            d = deploy(cli, envoy, wasm_path, base, PLAIN_GATEWAY + "---\n" + policy, server,
                       "--jwt-provider",
                       f"idp=issuer={jwt_keys.issuer},jwks=https://localhost:{httpd.server_address[1]}/keys.json",
                       "--upstream-ca", str(pki.ca.cert))
            with McpAgent(d.url, token=jwt_keys.mint(sub="oncall")) as agent:
                assert text_of(agent.call_tool("add", {"a": 1, "b": 1})) == "2"
            assert post_jsonrpc(d.url, rpc("ping"), token=jwt_keys.mint_untrusted(sub="oncall")).status == 401
        assert fetched and fetched[0] == "/keys.json"
    finally:
        httpd.shutdown()
        httpd.server_close()
