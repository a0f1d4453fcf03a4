"""Decisions in traces and metrics end to end: `mcp-access envoy --tracing zipkin=HOST:PORT` renders
Envoy 1.40's Zipkin tracer with custom tags read from the filter state the built filter sets; a
small Zipkin-format collector in this test receives the spans. The tags follow kube-agentic-
networking's conventions (security_rule.ruleset.name, security_rule.name, event.action,
event.outcome, `failure` when an authorizer faulted); per-policy and per-rule counters count
the deciding policy and rule.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from harness import Denied, EnvoyProcess, McpAgent, free_port, start_authorizer, start_mcp_server, text_of
from harness.manifests import AGENTS_TOOLS, BASE_METHODS as BASE
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
  - name: read
    authorization:
      type: Inline
      mcp: {{{BASE}, methods: [{{name: tools/list}}, {{name: tools/call, params: [echo, get_weather]}}]}}
---
apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {{name: risk, namespace: mcp, creationTimestamp: "2026-01-02T00:00:00Z"}}
spec:
  targetRefs: [{{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}}]
  action: ExternalAuth
  externalAuth:
    protocol: HTTP
    backendRef: {{name: risk-authorizer, port: 9000}}
    http: {{}}
    timeout: 300ms
    failureMode: Allow
  rules:
  - name: calls
    authorization: {{type: Inline, mcp: {{methods: [{{name: tools/call}}]}}}}
"""


class Collector:
    """A Zipkin v2 collector: POST /api/v2/spans with a JSON array of spans."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def body(self) -> bytes:
                if "chunked" not in self.headers.get("transfer-encoding", ""):
                    return self.rfile.read(int(self.headers.get("content-length") or 0))
                out = b""
                while size := int(self.rfile.readline().split(b";")[0], 16):
                    out += self.rfile.read(size)
                    self.rfile.readline()
                self.rfile.readline()
                return out

            def do_POST(self) -> None:  # noqa: N802
                body = self.body()
                if self.path == "/api/v2/spans":
                    with outer.lock:
                        outer.spans.extend(json.loads(body))
                self.send_response(202)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def tagged(self, want: int, method: str, timeout: float = 15.0) -> list[dict[str, str]]:
        """The tags of the spans that carry a decision of `method`, once `want` arrived (Envoy
        flushes its buffer every few seconds; the session's other requests have spans too)."""
        deadline = time.monotonic() + timeout
        of_method = f'"method":"{method}"'
        while True:
            with self.lock:
                tags = [t for t in (s.get("tags", {}) for s in self.spans)
                        if "event.action" in t and of_method in t.get("mcp_access.decision", "")]
            if len(tags) >= want or time.monotonic() > deadline:
                return tags
            time.sleep(0.2)


@pytest.fixture(scope="module")
def deployment(cli: Path, work_dir: Path, wasm_path: Path) -> Iterator[Any]:  # noqa: F811
    base = work_dir / "tracing"
    base.mkdir(parents=True, exist_ok=True)
    (base / "manifests.yaml").write_text(MANIFESTS)
    logs = base / "logs"
    collector = Collector()
    with start_mcp_server(logs, name="tracing-tools") as server, \
            start_authorizer(logs, name="risk", deny_tools=["get_weather"]) as risk:
        port, admin = free_port(), free_port()
        result = run_cli(
            cli, "envoy", "-f", str(base / "manifests.yaml"), "--wasm", str(wasm_path), "--strict",
            "--resolve", f"tools-server=127.0.0.1:{server.port}", "--resolve", f"risk-authorizer=127.0.0.1:{risk.port}",
            "--listen", f"main={port}", "--bind", "127.0.0.1", "--admin-port", str(admin),
            "--tracing", f"zipkin=127.0.0.1:{collector.port}", "--format", "text", "-o", str(base / "envoy.json"),
        )
        assert result.returncode == 0, result.stderr
        config = json.loads((base / "envoy.json").read_text())
        # Zipkin's buffer is flushed every span (the default waits for 5).
        config["layered_runtime"] = {"layers": [{"name": "static", "static_layer": {"tracing.zipkin.min_flush_spans": 1}}]}
        with EnvoyProcess(config, workdir=base / "envoy", name="envoy-tracing") as proxy:
            yield f"http://127.0.0.1:{port}/mcp", proxy, collector, risk
    collector.server.shutdown()


def test_spans_carry_the_decision(deployment: Any) -> None:
    url, proxy, collector, risk = deployment
    with McpAgent(url) as agent:
        assert text_of(agent.call_tool("echo", {"text": "hi"})) == "hi"
        with pytest.raises(Denied):
            agent.call_tool("add", {"a": 1, "b": 2})
        with pytest.raises(Denied):
            agent.call_tool("get_weather", {"city": "Paris"})
        # The authorizer faults (past the policy's timeout): failure mode Allow lets the call on,
        # and the span says the check itself failed.
        risk.configure(delay_ms=1500)
        try:
            assert text_of(agent.call_tool("echo", {"text": "slow"})) == "slow"
        finally:
            risk.configure(delay_ms=0)
    calls = collector.tagged(want=4, method="tools/call")
    by_tool = [(json.loads(t["mcp_access.decision"])["name"], t) for t in calls]
    assert [name for name, _ in by_tool] == ["echo", "add", "get_weather", "echo"], calls
    (_, echo), (_, add), (_, weather), (_, slow) = by_tool
    assert (echo["security_rule.ruleset.name"], echo["security_rule.name"], echo["event.action"],
            echo["event.outcome"]) == ("mcp/tools-allow", "read", "allow", "success"), echo
    assert (add["security_rule.name"], add["event.action"], add["event.outcome"]) == \
        ("default-deny", "deny", "success"), add
    assert (weather["security_rule.ruleset.name"], weather["security_rule.name"], weather["event.action"]) == \
        ("mcp/risk", "risk", "deny"), weather
    assert (slow["event.action"], slow["event.outcome"]) == ("allow", "failure"), slow
    # Per-policy and per-rule counters count the deciding policy and rule.
    stats = proxy.stats("mcp_access.policy")
    def counter(name: str) -> int:
        return int(stats.get(f"wasmcustom.mcp_access.policy.{name}", 0))
    assert counter("mcp/tools-allow.rule.read.allowed") >= 2, stats
    assert counter("mcp/tools-allow.allowed") >= 2, stats
    assert counter("mcp/risk.denied") == 1, stats
    assert counter("mcp/tools-allow.denied") == 0, stats
