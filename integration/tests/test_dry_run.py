"""Dry-run policies (docs/semantics.md §3.8) end to end: manifests -> `mcp-access envoy` -> real
Envoy 1.40 with the built filter, the demo MCP server, a real demo authorizer and the MCP Python
SDK client.

XBackend `tools` has one enforced policy (an XAccessPolicy admitting echo, get_weather,
delete_repo and the base protocol) and three dry-run ones:

- `tools-add`: an XAccessPolicy with the annotation `mcp-access.io/dry-run: "true"` admitting
  `add` (the enforced policy denies it: the dry run would allow it);
- `no-delete`: an AccessPolicy `mode: DryRun` denying `delete_repo`;
- `risk-watch`: an AccessPolicy `mode: DryRun` sending every request to the risk authorizer,
  which refuses `get_weather` and adds a header to what it allows.

Traffic is exactly what it is without them (the SDK sees the enforced decisions, the server the
allowed calls, without the dry-run authorizer's header; listings are filtered by the enforced
policies only); the decision log and the access log's filter state say what the dry run would
have changed, and the counters count it, per policy too. The authorizer is called and never
enforced, its failures neither.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness import Denied, EnvoyProcess, McpAgent, free_port, start_authorizer, start_mcp_server, text_of
from harness.manifests import AGENTS_TOOLS, BASE_METHODS as BASE
from harness.stack import decisions, logged_decisions
from test_cli_e2e import cli, run_cli  # noqa: F401  (the `cli` fixture)


MANIFESTS = f"""\
{AGENTS_TOOLS}---
apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {{name: tools-allow, namespace: mcp, creationTimestamp: "2026-01-01T00:00:00Z"}}
spec:
  targetRefs: [{{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}}]
  action: Allow
  rules:
  - name: read-and-delete
    authorization:
      type: Inline
      mcp: {{{BASE}, methods: [{{name: tools/list}}, {{name: tools/call, params: [echo, get_weather, delete_repo]}}]}}
---
apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata:
  name: tools-add
  namespace: mcp
  creationTimestamp: "2026-01-02T00:00:00Z"
  annotations: {{mcp-access.io/dry-run: "true"}}
spec:
  targetRefs: [{{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}}]
  action: Allow
  rules:
  - name: add
    authorization: {{type: Inline, mcp: {{methods: [{{name: tools/call, params: [add]}}]}}}}
---
apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {{name: no-delete, namespace: mcp, creationTimestamp: "2026-01-03T00:00:00Z"}}
spec:
  targetRefs: [{{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}}]
  mode: DryRun
  action: Deny
  rules:
  - name: delete
    authorization: {{type: Inline, mcp: {{methods: [{{name: tools/call, params: [delete_repo]}}]}}}}
---
apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {{name: risk-watch, namespace: mcp, creationTimestamp: "2026-01-04T00:00:00Z"}}
spec:
  targetRefs: [{{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}}]
  mode: DryRun
  action: ExternalAuth
  externalAuth:
    protocol: HTTP
    backendRef: {{name: risk-authorizer, port: 9000}}
    http: {{}}
    timeout: 300ms
"""


class Deployment:
    def __init__(self, url: str, proxy: Any, report: str) -> None:
        self.url, self.proxy, self.report = url, proxy, report

    def counter(self, name: str) -> int:
        return int(self.proxy.stats("mcp_access").get(f"wasmcustom.mcp_access.{name}", 0))

    def records(self, until: Any = None) -> list[dict[str, Any]]:
        """The decision of each request, from the access log's filter state; waits (up to 5 s)
        until `until(records)` holds."""
        return [r for _, r in decisions(self.proxy, until=until or (lambda _: True))]


@pytest.fixture(scope="module")
def deployment(cli: Path, work_dir: Path, wasm_path: Path) -> Any:  # noqa: F811
    base = work_dir / "dry-run"
    base.mkdir(parents=True, exist_ok=True)
    (base / "manifests.yaml").write_text(MANIFESTS)
    logs = base / "logs"
    with start_mcp_server(logs, name="dry-run-tools") as server, \
            start_authorizer(logs, name="risk", deny_tools=["get_weather"], add_headers=["x-risk-score:7"]) as risk:
        port, admin = free_port(), free_port()
        result = run_cli(
            cli, "envoy", "-f", str(base / "manifests.yaml"), "--wasm", str(wasm_path), "--strict",
            "--resolve", f"tools-server=127.0.0.1:{server.port}", "--resolve", f"risk-authorizer=127.0.0.1:{risk.port}",
            "--listen", f"main={port}", "--bind", "127.0.0.1", "--admin-port", str(admin),
            "--access-log", str(base / "access.log"), "--format", "text", "-o", str(base / "envoy.json"),
        )
        assert result.returncode == 0, result.stderr
        with EnvoyProcess(json.loads((base / "envoy.json").read_text()), workdir=base / "envoy", name="envoy-dry-run") as proxy:
            yield Deployment(f"http://127.0.0.1:{port}/mcp", proxy, result.stderr), server, risk


def test_status_says_dry_run(deployment: Any) -> None:
    d, _, _ = deployment
    assert d.report.count("Accepted; DryRun: a dry run") == 3, d.report


def test_traffic_is_decided_by_the_enforced_policies_only(deployment: Any) -> None:
    d, server, risk = deployment
    server.reset()
    risk.reset()
    with McpAgent(d.url) as agent:
        # Listings are filtered by the enforced policy: `add` (which the dry run would admit)
        # is not listed, delete_repo (which it would deny) is.
        names = set(agent.tool_names())
        assert {"echo", "get_weather", "delete_repo"} <= names and "add" not in names, names
        assert text_of(agent.call_tool("echo", {"text": "hi"})) == "hi"
        # The dry-run authorizer refuses get_weather; the call goes through.
        assert "Paris" in text_of(agent.call_tool("get_weather", {"city": "Paris"}))
        # The dry-run Deny matches delete_repo; the call goes through.
        agent.call_tool("delete_repo", {"name": "scratch"})
        # The enforced policy does not admit add; the dry run would.
        with pytest.raises(Denied) as e:
            agent.call_tool("add", {"a": 1, "b": 2})
        assert e.value.status == 403
    assert server.tool_calls() == ["echo", "get_weather", "delete_repo"]
    # The dry-run authorizer was called for every request, and its header never applied.
    called = [c["headers"].get("x-mcp-tool") for c in risk.calls()]
    assert {"echo", "get_weather", "delete_repo", "add"} <= set(called), risk.calls()
    assert all("x-risk-score" not in r["headers"] for r in server.requests()), server.requests()


def test_decisions_and_counters_say_what_the_dry_run_would_change(deployment: Any) -> None:
    d, _, _ = deployment
    calls = {"echo", "get_weather", "delete_repo", "add"}
    found = d.records(until=lambda rs: calls <= {r["name"] for r in rs})
    records = {r["name"]: r for r in found if r["method"] == "tools/call"}
    assert records["echo"]["dry_run"] == {
        "decision": "allow", "level": None, "reason": "allowed", "policy": "mcp/tools-allow",
        "rule": "read-and-delete", "authorizers": [{"policy": "mcp/risk-watch", "answer": "allow"}], "not_called": [],
    }, records["echo"]
    weather = records["get_weather"]
    assert weather["decision"] == "allow"
    assert weather["dry_run"]["decision"] == "deny" and weather["dry_run"]["reason"] == "external_auth_denied"
    assert weather["dry_run"]["policy"] == "mcp/risk-watch"
    assert weather["dry_run"]["authorizers"] == [{"policy": "mcp/risk-watch", "answer": "deny 403"}]
    delete = records["delete_repo"]
    assert (delete["decision"], delete["dry_run"]["decision"]) == ("allow", "deny")
    assert (delete["dry_run"]["policy"], delete["dry_run"]["rule"]) == ("mcp/no-delete", "delete")
    add = records["add"]
    assert (add["decision"], add["reason"], add["dry_run"]["decision"]) == ("deny", "not_allowed", "allow")
    assert (add["dry_run"]["policy"], add["dry_run"]["rule"]) == ("mcp/tools-add", "add")
    assert d.counter("dry_run.would_deny") == 2
    assert d.counter("dry_run.would_allow") == 1
    assert d.counter("dry_run.policy.mcp/no-delete.would_deny") == 1
    assert d.counter("dry_run.policy.mcp/risk-watch.would_deny") == 1
    assert d.counter("dry_run.policy.mcp/tools-add.would_allow") == 1
    assert d.counter("dry_run.policy.mcp/tools-add.would_deny") == 0
    # The decision log line of an allowed request the dry run would deny is logged.
    logged = [r for _, r in logged_decisions(d.proxy) if r.get("name") == "delete_repo"]
    assert logged and logged[-1]["dry_run"]["policy"] == "mcp/no-delete", logged


def test_a_failing_dry_run_authorizer_is_not_enforced(deployment: Any) -> None:
    d, server, risk = deployment
    before = d.counter("dry_run.would_deny")
    risk.configure(delay_ms=1500)  # past the policy's 300ms timeout
    try:
        server.reset()
        with McpAgent(d.url) as agent:
            assert text_of(agent.call_tool("echo", {"text": "slow"})) == "slow"
        assert server.tool_calls() == ["echo"]
    finally:
        risk.configure(delay_ms=0)
    slow = d.records(until=lambda rs: any(r.get("name") == "echo" and r["dry_run"]["reason"] == "authorizer_error"
                                          for r in rs if r["dry_run"]))
    echo = [r for r in slow if r["method"] == "tools/call" and r["name"] == "echo"][-1]
    assert echo["decision"] == "allow"
    assert echo["dry_run"]["decision"] == "deny" and echo["dry_run"]["reason"] == "authorizer_error", echo
    assert echo["dry_run"]["authorizers"][0]["answer"].startswith("error"), echo
    assert d.counter("dry_run.would_deny") > before
