"""`mcp-access replay` on a log recorded by real Envoy 1.40 with the built filter: the MCP SDK client
makes calls under the policies in force; replaying the access log (and the decision log lines of
Envoy's own log) against changed manifests reports exactly the decisions that flip, each checked
against `mcp-access explain` under the changed manifests. The records carry the request's
attributes and never its credentials; tool arguments only where FilterSettings opts in.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import Denied, EnvoyProcess, McpAgent, free_port, start_mcp_server
from harness.manifests import AGENTS_TOOLS, BASE_METHODS as BASE
from test_cli_e2e import cli, run_cli  # noqa: F401  (the `cli` fixture)


INFRA = AGENTS_TOOLS + """\
---
apiVersion: mcp-access.io/v1alpha1
kind: FilterSettings
metadata: {name: settings}
spec:
  decisionRecords: {arguments: true}
"""


def allow(tools: list[str]) -> str:
    return f"""\
---
apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {{name: tools-allow, namespace: mcp}}
spec:
  targetRefs: [{{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}}]
  action: Allow
  rules:
  - name: listed
    authorization:
      type: Inline
      mcp: {{{BASE}, methods: [{{name: tools/list}}, {{name: tools/call, params: [{", ".join(tools)}]}}]}}
"""


BEFORE = INFRA + allow(["echo", "get_weather", "add"])
AFTER = INFRA + allow(["echo", "delete_repo"])


@pytest.fixture(scope="module")
def recorded(cli: Path, work_dir: Path, wasm_path: Path) -> Iterator[Any]:  # noqa: F811
    base = work_dir / "replay"
    base.mkdir(parents=True, exist_ok=True)
    (base / "before.yaml").write_text(BEFORE)
    (base / "after.yaml").write_text(AFTER)
    with start_mcp_server(base / "logs", name="replay-tools") as server:
        port, admin = free_port(), free_port()
        result = run_cli(
            cli, "envoy", "-f", str(base / "before.yaml"), "--wasm", str(wasm_path), "--strict",
            "--resolve", f"tools-server=127.0.0.1:{server.port}", "--listen", f"main={port}",
            "--bind", "127.0.0.1", "--admin-port", str(admin), "--access-log", str(base / "access.log"),
            "--format", "text", "-o", str(base / "envoy.json"),
        )
        assert result.returncode == 0, result.stderr
        with EnvoyProcess(json.loads((base / "envoy.json").read_text()), workdir=base / "envoy",
                          name="envoy-replay") as proxy:
            url = f"http://127.0.0.1:{port}/mcp"
            # The SDK's own choice of revision: server/discover first, then 2026-07-28 if the
            # server speaks it (records must carry the revision for replay to decide them again).
            with McpAgent(url, mode="auto") as agent:
                agent.call_tool("echo", {"text": "discovered"})
            with McpAgent(url, headers={"authorization": "Bearer secret-token"}) as agent:
                agent.tool_names()
                agent.call_tool("echo", {"text": "a"})
                agent.call_tool("echo", {"text": "b"})
                agent.call_tool("get_weather", {"city": "Paris"})
                agent.call_tool("add", {"a": 1, "b": 2})
                with pytest.raises(Denied):
                    agent.call_tool("delete_repo", {"name": "x"})
            # Envoy flushes the access log every 50 ms: wait for the last request's entry.
            deadline = time.monotonic() + 5
            while not any("delete_repo" in (e.get("filter_state") or "") for e in proxy.access_log_entries()):
                assert time.monotonic() < deadline, "no access-log entry of the last request"
                time.sleep(0.05)
            yield base, proxy


def replay(cli: Path, base: Path, *logs: str, extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:  # noqa: F811
    return run_cli(cli, "replay", "-f", str(base / "after.yaml"), *extra, *logs)


def explain_after(cli: Path, base: Path, tool: str) -> dict[str, Any]:  # noqa: F811
    out = run_cli(cli, "explain", "-f", str(base / "after.yaml"), "--gateway", "mcp/agents", "--listener", "main",
                  "--tool", tool, "-o", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_records_carry_the_request_and_no_credential(recorded: Any) -> None:
    base, proxy = recorded
    text = (base / "access.log").read_text()
    assert "secret-token" not in text and "Bearer" not in text
    records = [json.loads(e["filter_state"]) for e in proxy.access_log_entries() if e.get("filter_state") not in (None, "-")]
    add = next(r for r in records if r.get("name") == "add")
    assert add["request"]["method"] == "POST" and add["request"]["path"] == "/mcp", add
    assert add["request"]["arguments"] == {"a": 1, "b": 2}, add


def test_replay_reports_the_flips_explain_confirms(cli: Path, recorded: Any) -> None:  # noqa: F811
    base, _ = recorded
    out = replay(cli, base, str(base / "access.log"), extra=("-o", "json"))
    assert out.returncode == 6, out.stderr + out.stdout
    r = json.loads(out.stdout)
    flips = {(f["change"], f["call"]): f for f in r["flips"]}
    assert set(flips) == {("loses", "tools/call get_weather"), ("loses", "tools/call add"),
                          ("gains", "tools/call delete_repo")}, r
    assert r["errors"] == [], r
    for (change, call), f in flips.items():
        tool = call.split()[1]
        e = explain_after(cli, base, tool)
        assert e["decision"] == ("allow" if change == "gains" else "deny"), e
        assert f["now"].startswith(e["decision"]), (f, e)
        assert f["listener"] == "mcp/agents/main" and f["backend"] == "mcp/tools", f
    # echo and the listing keep their decisions.
    assert all("echo" not in f["call"] and "tools/list" not in f["call"] for f in r["flips"]), r
    text = replay(cli, base, str(base / "access.log")).stdout
    assert "LOSES an anonymous caller  tools/call add  on mcp/agents/main -> mcp/tools  (1 request)" in text, text
    assert replay(cli, base, str(base / "access.log"), extra=("--allow-flips",)).returncode == 0


def test_replay_of_the_decision_log_lines(cli: Path, recorded: Any) -> None:  # noqa: F811
    base, proxy = recorded
    log = base / "envoy-decisions.log"
    log.write_text(proxy.log_text())
    out = replay(cli, base, str(log), extra=("-o", "json"))
    assert out.returncode == 6, out.stderr
    calls = {(f["change"], f["call"]) for f in json.loads(out.stdout)["flips"]}
    assert calls == {("loses", "tools/call get_weather"), ("loses", "tools/call add"),
                     ("gains", "tools/call delete_repo")}, out.stdout
    # The manifests in force: nothing flips, whatever revision each request was judged under.
    records = [json.loads(e["filter_state"]) for e in proxy.access_log_entries() if e.get("filter_state") not in (None, "-")]
    revisions = {r["request"]["revision"] for r in records if r.get("request")}
    assert "2026-07-28" in revisions and any(r.get("method") == "server/discover" for r in records), revisions
    same = run_cli(cli, "replay", "-f", str(base / "before.yaml"), str(base / "access.log"), str(log))
    assert same.returncode == 0 and " 0 flip(s)" in same.stdout, same.stdout + same.stderr
