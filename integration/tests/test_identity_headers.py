"""Identity headers end to end (docs/semantics.md §5.7), with `mcp-access envoy` and real Envoy.

An AccessPolicy on the XBackend declares the headers its MCP server receives: the subject and
issuer of the caller's verified JWT, two claims (a string as it is, a list as JSON) and the
SPIFFE ID. Clients send forged copies of all of them, in any case, once or twice: the server only
ever sees what the filter set from the verified identity, and nothing for a caller without one.
A denied request never reaches it. The server answers with JSON bodies, and (stateful) with SSE
streams, whose GET stream carries the headers too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness import Denied, JwtKeys, McpAgent, post_jsonrpc, rpc, start_mcp_server, text_of
from harness.stack import logged_decisions
from test_cli_e2e import cli  # noqa: F401  (the `cli` fixture)
from test_policy_language import PLAIN_GATEWAY, deploy

POLICY = """\
apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {name: who-calls, namespace: mcp}
spec:
  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]
  action: Allow
  identityHeaders:
  - {name: x-caller-sub, from: JWTSubject}
  - {name: x-caller-iss, from: JWTIssuer}
  - {name: x-caller-team, from: JWTClaim, claim: org.team}
  - {name: x-caller-groups, from: JWTClaim, claim: groups}
  - {name: x-caller-spiffe, from: SPIFFE}
  rules:
  - name: everyone-echo
    authorization:
      type: Inline
      mcp:
        mcpBaseProtocolMethodsOption: MATCH_BASE_PROTOCOL_METHODS
        methods: [{name: tools/call, params: [echo]}]
"""

NAMES = ["x-caller-sub", "x-caller-iss", "x-caller-team", "x-caller-groups", "x-caller-spiffe"]
FORGED = {"X-Caller-Sub": "admin", "x-caller-iss": "https://evil.example", "X-CALLER-TEAM": "red",
          "x-caller-groups": '["admins"]', "x-caller-spiffe": "spiffe://example.org/ns/x/sa/admin"}


def identity_of(request: dict[str, Any]) -> dict[str, str]:
    """The identity headers a request reached the MCP server with."""
    return {k: v for k, v in request.get("headers", {}).items() if k in NAMES}


@pytest.mark.parametrize("mode", ["json", "sse"])
def test_the_server_sees_only_the_identity_the_filter_sets(cli: Path, wasm_path: Path, work_dir: Path,
                                                           jwt_keys: JwtKeys, envoy: Any, mode: str) -> None:
    base = work_dir / "identity-headers" / mode
    base.mkdir(parents=True, exist_ok=True)
    (base / "jwks.json").write_text(jwt_keys.jwks_json)
    extra = ["--sse", "--stateful"] if mode == "sse" else []
    with start_mcp_server(base / "logs", name=f"identity-{mode}", extra_args=extra) as server:
        d = deploy(cli, envoy, wasm_path, base, PLAIN_GATEWAY + "---\n" + POLICY, server,
                   "--jwt-provider", f"idp=issuer={jwt_keys.issuer},jwks={base / 'jwks.json'}")
        assert [h["name"] for h in d.bundle["backends"][0]["identityHeaders"]] == NAMES
        token = jwt_keys.mint({"org": {"team": "blue"}, "groups": ["staff", "ops"]}, sub="u1")
        expected = {"x-caller-sub": "u1", "x-caller-iss": jwt_keys.issuer, "x-caller-team": "blue",
                    "x-caller-groups": '["staff","ops"]'}

        # A token holder that also sends forged copies: every request carries its own identity.
        with McpAgent(d.url, token=token, headers=FORGED) as agent:
            assert text_of(agent.call_tool("echo", {"text": "hi"})) == "hi"
            with pytest.raises(Denied) as denied:
                agent.call_tool("delete_repo", {"name": "prod"})
            assert denied.value.status == 403
        seen = server.requests()
        assert seen and all(identity_of(r) == expected for r in seen), [identity_of(r) for r in seen]
        assert {r["method"] for r in seen} >= ({"POST", "GET"} if mode == "sse" else {"POST"})
        # The denied call never reached the server.
        assert server.tool_calls() == ["echo"]

        # A caller without identity: the forged copies are removed, nothing is set.
        server.reset()
        with McpAgent(d.url, headers=FORGED) as anonymous:
            assert text_of(anonymous.call_tool("echo", {"text": "anon"})) == "anon"
        seen = server.requests()
        assert seen and all(identity_of(r) == {} for r in seen), [identity_of(r) for r in seen]

        # Repeated forged lines, in another case: still only the one value the filter set.
        server.reset()
        call = rpc("tools/call", {"name": "echo", "arguments": {"text": "twice"}})
        twice = post_jsonrpc(d.url, call, [("x-caller-sub", "a"), ("X-Caller-Sub", "b"), ("x-caller-team", "c")],
                             token=token)
        # (A stateful server wants a session first; it still received the request.)
        assert twice.status == (200 if mode == "json" else 400), twice
        (r,) = server.requests()
        assert identity_of(r) == expected
        # A header name with '_' never reaches the server either: Envoy refuses the request.
        underscore = post_jsonrpc(d.url, call, {"x_caller_sub": "admin"}, token=token)
        assert underscore.status == 400, underscore
        assert len(server.requests()) == 1

        # A subject or claim with leading or trailing space or tab: every HTTP parser strips it,
        # so the server would read another identity (" admin " as "admin"). Left out, and the
        # decision record says why (never the value).
        server.reset()
        padded = jwt_keys.mint({"org": {"team": "blue\t"}, "groups": ["staff"]}, sub=" admin ")
        r = post_jsonrpc(d.url, call, {}, token=padded)
        assert r.status == (200 if mode == "json" else 400), r
        (seen,) = server.requests()
        assert identity_of(seen) == {"x-caller-iss": jwt_keys.issuer, "x-caller-groups": '["staff"]'}, seen
        records = [r for _, r in logged_decisions(d.envoy)]
        assert records[-1]["identity_headers_omitted"] == [
            {"name": "x-caller-sub", "reason": "has leading or trailing whitespace"},
            {"name": "x-caller-team", "reason": "has leading or trailing whitespace"},
            {"name": "x-caller-spiffe", "reason": "no SPIFFE ID"},
        ], records[-1]
