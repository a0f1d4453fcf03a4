"""Settings from manifests, end to end: a `FilterSettings` object and per-policy
`externalAuth.failureMode` / `timeout` on an AccessPolicy -> `mcp-access envoy` -> real Envoy 1.40
with the built filter, the demo MCP server and the official Python SDK client.

- The denial shape TypeScript SDK and Inspector users need (HTTP 200 with a JSON-RPC error, their
  own code and message, details in `error.data`) comes from `FilterSettings.spec.denyResponse`:
  the SDK client sees a JSON-RPC error, not a transport failure.
- An authorizer nobody can connect to: the policy's `failureMode: Allow` admits, the default
  (`Deny`) refuses, each within the policy's own `timeout`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from mcp import MCPError

from harness import McpAgent, free_port, post_jsonrpc, rpc, start_mcp_server, text_of
from test_cli_e2e import cli  # noqa: F401  (the `cli` fixture)
from test_policy_language import PLAIN_GATEWAY, deploy

SETTINGS = """\
---
apiVersion: mcp-access.io/v1alpha1
kind: FilterSettings
metadata: {name: default}
spec:
  denyResponse: {httpStatus: 200, jsonRpcCode: -32042, message: Not for you, exposeDetails: true}
  listings: {filter: true}
"""

ECHO_ONLY = """\
---
apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {name: echo-only, namespace: mcp}
spec:
  targetRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}]
  action: Allow
  rules:
  - name: echo
    authorization:
      type: Inline
      mcp:
        mcpBaseProtocolMethodsOption: MATCH_BASE_PROTOCOL_METHODS
        methods: [{name: tools/call, params: [echo]}, {name: tools/list}]
"""


def external_auth(name: str, extra: str) -> str:
    return f"""\
---
apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {{name: {name}, namespace: mcp}}
spec:
  targetRefs: [{{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}}]
  action: ExternalAuth
  externalAuth:
    protocol: HTTP
    backendRef: {{name: approvals, port: 9000}}
    http: {{}}
{extra}"""


def test_deny_response_from_filter_settings(cli: Path, wasm_path: Path, work_dir: Path, envoy: Any) -> None:
    base = work_dir / "settings" / "deny-response"
    with start_mcp_server(base / "logs", name="settings-deny") as server:
        d = deploy(cli, envoy, wasm_path, base, PLAIN_GATEWAY + SETTINGS + ECHO_ONLY, server)
        assert d.bundle["denyResponse"] == {"httpStatus": 200, "jsonRpcCode": -32042, "message": "Not for you",
                                            "exposeDetails": True}
        with McpAgent(d.url) as agent:
            assert text_of(agent.call_tool("echo", {"text": "hi"})) == "hi"
            with pytest.raises(MCPError) as denied:
                agent.call_tool("get_weather", {"city": "Oslo"})
            e = denied.value.error
            assert (e.code, e.message) == (-32042, "Not for you")
            assert (e.data["level"], e.data["reason"]) == ("backend", "not_allowed"), e.data
            assert [t.name for t in agent.list_tools().tools] == ["echo"]
        assert not any("get_weather" in str(r.get("body", "")) for r in server.requests())


@pytest.mark.parametrize("mode, admitted", [("failureMode: Allow", True), ("", False)])
def test_failure_mode_and_timeout_per_policy(cli: Path, wasm_path: Path, work_dir: Path, envoy: Any,
                                             mode: str, admitted: bool) -> None:
    """The authorizer's Service resolves to a port nothing listens on: Envoy cannot connect."""
    name = "fail-open" if admitted else "fail-closed"
    base = work_dir / "settings" / name
    extra = f"    timeout: 300ms\n    {mode}\n" if mode else "    timeout: 300ms\n"
    manifests = PLAIN_GATEWAY + external_auth(name, extra)
    with start_mcp_server(base / "logs", name=f"settings-{name}") as server:
        d = deploy(cli, envoy, wasm_path, base, manifests, server, "--resolve",
                   f"approvals=127.0.0.1:{free_port()}")
        (authorizer,) = d.bundle["authorizers"]
        assert authorizer["timeoutMs"] == 300
        assert authorizer["failureMode"] == ("Allow" if admitted else "Deny")
        if admitted:
            with McpAgent(d.url) as agent:
                started = time.monotonic()
                assert text_of(agent.call_tool("echo", {"text": "open"})) == "open"
                assert time.monotonic() - started < 5
        else:
            started = time.monotonic()
            answer = post_jsonrpc(d.url, rpc("ping"))
            assert answer.status == 403, answer
            assert time.monotonic() - started < 5
            assert not server.requests()
