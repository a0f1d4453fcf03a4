"""Defaults and overrides end to end (docs/defaults-overrides.md): manifests -> `mcp-access envoy`
-> real Envoy 1.40 with the built filter, a real demo authorizer, the demo MCP server and the MCP
Python SDK client.

The platform team's worked example: every agent must pass the risk authorizer (an ExternalAuth
override); by default agents may only use read tools (a merged Allow default `no-write`); team X's
backend unsets `no-write` and allows its own tools. The Gateway has one listener per backend, so
each agent reaches one XBackend:

- `wiki` (no policy of its own): the defaults apply (echo and get_weather only) and every call goes
  to the authorizer first (which refuses delete_repo);
- `team-x`: its own rule (every tool) without the default; the override still sends every call to
  the authorizer, which refuses delete_repo: `unset` cannot escape an override.

Plus seed 002's pair: an atomic Gateway default is replaced by a backend policy, an atomic override
replaces it; and decision logs name the block a deciding policy came from.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness import Denied, McpAgent, free_port, start_authorizer, start_mcp_server, text_of
from harness.manifests import BASE_METHODS as BASE
from test_cli_e2e import cli, denials, run_cli  # noqa: F401  (the `cli` fixture)

INFRA = """\
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: agents, namespace: platform}
spec:
  gatewayClassName: mcp-access
  listeners:
  - {name: wiki, protocol: HTTP, port: 80}
  - {name: team-x, protocol: HTTP, port: 81}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: wiki, namespace: platform}
spec:
  parentRefs: [{name: agents, sectionName: wiki}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /mcp}}]
    backendRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: wiki}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: team-x, namespace: platform}
spec:
  parentRefs: [{name: agents, sectionName: team-x}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /mcp}}]
    backendRefs: [{group: agentic.networking.x-k8s.io, kind: XBackend, name: team-x}]
---
apiVersion: agentic.networking.x-k8s.io/v0alpha0
kind: XBackend
metadata: {name: wiki, namespace: platform}
spec:
  mcp: {serviceName: wiki-server, port: 8000, path: /mcp}
---
apiVersion: agentic.networking.x-k8s.io/v0alpha0
kind: XBackend
metadata: {name: team-x, namespace: platform}
spec:
  mcp: {serviceName: team-x-server, port: 8000, path: /mcp}
"""


WORKED_EXAMPLE = f"""\
apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {{name: risk-check, namespace: platform, creationTimestamp: "2026-01-01T00:00:00Z"}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, name: agents}}]
  overrides:
    action: ExternalAuth
    externalAuth: {{protocol: HTTP, backendRef: {{name: risk-authorizer, port: 9000}}, http: {{}}}}
---
apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {{name: read-only, namespace: platform, creationTimestamp: "2026-01-01T00:00:00Z"}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, name: agents}}]
  defaults:
    strategy: merge
    action: Allow
    rules:
    - name: no-write
      authorization:
        type: Inline
        mcp: {{{BASE}, methods: [{{name: tools/list}}, {{name: tools/call, params: [echo, get_weather]}}]}}
---
apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {{name: team-x, namespace: platform, creationTimestamp: "2026-01-02T00:00:00Z"}}
spec:
  targetRefs: [{{group: agentic.networking.x-k8s.io, kind: XBackend, name: team-x}}]
  action: Allow
  unset: [no-write]
  rules:
  - name: team-x-tools
    authorization: {{type: Inline, mcp: {{{BASE}, methods: [{{name: tools}}]}}}}
"""


def gateway_block(kind: str) -> str:
    """Seed 002: an atomic Gateway block admitting echo only."""
    return f"""\
apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {{name: gw-{kind}, namespace: platform, creationTimestamp: "2026-01-01T00:00:00Z"}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, name: agents}}]
  {kind}:
    action: Allow
    rules:
    - name: echo-only
      authorization: {{type: Inline, mcp: {{{BASE}, methods: [{{name: tools/call, params: [echo]}}]}}}}
---
apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {{name: team-x-own, namespace: platform, creationTimestamp: "2026-01-02T00:00:00Z"}}
spec:
  targetRefs: [{{group: agentic.networking.x-k8s.io, kind: XBackend, name: team-x}}]
  action: Allow
  rules:
  - name: add-only
    authorization: {{type: Inline, mcp: {{{BASE}, methods: [{{name: tools/call, params: [add]}}]}}}}
"""


class Deployment:
    def __init__(self, wiki: str, team_x: str, proxy: Any, report: str) -> None:
        self.wiki, self.team_x, self.proxy, self.report = wiki, team_x, proxy, report


def deploy(cli: Path, envoy: Any, wasm: Path, base: Path, policies: str, server: Any,
           authorizer: Any | None) -> Deployment:
    base.mkdir(parents=True, exist_ok=True)
    (base / "manifests.yaml").write_text(INFRA + "---\n" + policies)
    wiki, team_x, admin = free_port(), free_port(), free_port()
    extra = ["--resolve", f"risk-authorizer=127.0.0.1:{authorizer.port}"] if authorizer else []
    result = run_cli(
        cli, "envoy", "-f", str(base / "manifests.yaml"), "--wasm", str(wasm), "--strict",
        "--resolve", f"wiki-server=127.0.0.1:{server.port}", "--resolve", f"team-x-server=127.0.0.1:{server.port}",
        *extra, "--listen", f"wiki={wiki}", "--listen", f"team-x={team_x}", "--bind", "127.0.0.1",
        "--admin-port", str(admin), "--access-log", str(base / "access.log"), "--format", "text",
        "-o", str(base / "envoy.json"),
    )
    assert result.returncode == 0, result.stderr
    proxy = envoy(json.loads((base / "envoy.json").read_text()), name=base.name)
    server.reset()
    return Deployment(f"http://127.0.0.1:{wiki}/mcp", f"http://127.0.0.1:{team_x}/mcp", proxy, result.stderr)


def test_worked_example_in_real_envoy(cli: Path, wasm_path: Path, work_dir: Path, envoy: Any) -> None:
    base = work_dir / "defaults-overrides" / "worked-example"
    logs = base / "logs"
    with start_mcp_server(logs, name="do-tools") as server, \
            start_authorizer(logs, name="risk", deny_tools=["delete_repo"]) as risk:
        d = deploy(cli, envoy, wasm_path, base, WORKED_EXAMPLE, server, risk)
        assert "Enforced" in d.report, d.report
        risk.reset()
        with McpAgent(d.wiki) as agent:
            # The merged default: read tools only, and the listing says so.
            assert set(agent.tool_names()) == {"echo", "get_weather"}
            assert text_of(agent.call_tool("echo", {"text": "hi"})) == "hi"
            with pytest.raises(Denied) as e:  # not a read tool: the default admits no `add`
                agent.call_tool("add", {"a": 1, "b": 2})
            assert e.value.status == 403
        calls_wiki = len(risk.calls())
        assert calls_wiki >= 2, risk.calls()  # the override's authorizer saw the wiki's calls
        with McpAgent(d.team_x) as agent:
            # Team X unset `no-write`: its own rule admits every tool ...
            assert text_of(agent.call_tool("add", {"a": 1, "b": 2})) == "3"
            assert text_of(agent.call_tool("echo", {"text": "x"})) == "x"
            # ... but the override still sends every call to the authorizer, which refuses this one.
            with pytest.raises(Denied) as e:
                agent.call_tool("delete_repo", {"name": "prod"})
            assert e.value.status == 403
        assert len(risk.calls()) > calls_wiki
        # The decision log names the block the deciding policy came from.
        records = denials(d.proxy, 2)
        origins = {r.get("origin") for r in records}
        assert "overrides (atomic) of AccessPolicy platform/risk-check" in origins, records
        assert any(r["reason"] == "not_allowed" and r["backend"] == "platform/wiki" for r in records), records


@pytest.mark.parametrize("kind", ["defaults", "overrides"])
def test_seed_002_gateway_defaults_and_overrides(kind: str, cli: Path, wasm_path: Path, work_dir: Path,
                                                 envoy: Any) -> None:
    """A Gateway default applies to the backend without a policy of its own (wiki) and not to the
    one with one (team-x); an override applies to both."""
    base = work_dir / "defaults-overrides" / f"seed-002-{kind}"
    with start_mcp_server(base / "logs", name=f"do-{kind}") as server:
        d = deploy(cli, envoy, wasm_path, base, gateway_block(kind), server, None)
        with McpAgent(d.wiki) as agent:
            assert text_of(agent.call_tool("echo", {"text": "w"})) == "w"
            with pytest.raises(Denied):
                agent.call_tool("add", {"a": 1, "b": 1})
        with McpAgent(d.team_x) as agent:
            if kind == "defaults":  # the backend's own policy replaces the default
                assert text_of(agent.call_tool("add", {"a": 2, "b": 2})) == "4"
                with pytest.raises(Denied):
                    agent.call_tool("echo", {"text": "t"})
            else:  # the override replaces the backend's policy
                assert text_of(agent.call_tool("echo", {"text": "t"})) == "t"
                with pytest.raises(Denied):
                    agent.call_tool("add", {"a": 2, "b": 2})
