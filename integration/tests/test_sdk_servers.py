"""Official SDK servers at their default settings behind the Envoy `mcp-access envoy` renders.

Both SDKs turn on DNS-rebinding protection when the server listens on loopback: the Python SDK
answers a Host it does not expect 421, the TypeScript SDK (`createMcpExpressApp()`) 403. A client of
the Gateway sends the Gateway's host name; the generated route sends the upstream the authority a
`--resolve` maps its Service to (and the client's Host in `x-forwarded-host`), so the servers work
unchanged. Each test first shows the server refusing the Gateway's Host when asked directly.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from harness import ManagedProcess, free_port, post_jsonrpc, rpc, start_mcp_server, wait_for_port
from test_cli_e2e import cli  # noqa: F401  (the `cli` fixture)
from test_policy_language import deploy

REPO = Path(__file__).resolve().parents[2]
NODE_DIR = REPO / "integration" / "clients" / "node"
HOST = "tools.example.com"

MANIFESTS = f"""\
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: mcp}}
spec:
  gatewayClassName: mcp-access
  listeners:
  - {{name: http, protocol: HTTP, port: 80, hostname: {HOST}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: route, namespace: mcp}}
spec:
  parentRefs: [{{name: gw}}]
  hostnames: [{HOST}]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /mcp}}}}]
    backendRefs: [{{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}}]
---
apiVersion: agentic.networking.x-k8s.io/v0alpha0
kind: XBackend
metadata: {{name: tools, namespace: mcp}}
spec:
  mcp: {{serviceName: tools-server, port: 8000, path: /mcp}}
---
apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {{name: echo-only, namespace: mcp}}
spec:
  targetRefs: [{{group: agentic.networking.x-k8s.io, kind: XBackend, name: tools}}]
  action: Allow
  rules:
  - name: echo
    authorization:
      type: Inline
      mcp:
        mcpBaseProtocolMethodsOption: MATCH_BASE_PROTOCOL_METHODS
        methods: [{{name: tools/call, params: [echo]}}]
"""


class TsServer:
    """ts-sdk-server.mjs (official TypeScript SDK, default settings) on a free port."""

    def __init__(self, log_dir: Path) -> None:
        self.port = free_port()
        self.proc = ManagedProcess(["node", NODE_DIR / "ts-sdk-server.mjs", str(self.port)], name="ts-sdk-server",
                                   log_path=log_dir / "ts-sdk-server.log", cwd=NODE_DIR)

    def __enter__(self) -> "TsServer":
        self.proc.start()
        wait_for_port(self.port, timeout=30)
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.stop()

    def reset(self) -> None:
        pass


def call(url: str, tool: str, host: str) -> Any:
    body = rpc("tools/call", {"name": tool, "arguments": {"text": "hi"}})
    return post_jsonrpc(url, body, {"host": host})


def result_text(answer: Any) -> str:
    text = answer.body.decode()
    if "data:" in text:  # an SSE answer: its one event
        text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
    return json.loads(text)["result"]["content"][0]["text"]


def check(cli: Path, envoy: Any, wasm: Path, base: Path, server: Any, refusal: int) -> None:
    direct = call(f"http://127.0.0.1:{server.port}/mcp", "echo", HOST)
    assert direct.status == refusal, direct  # the server is at its defaults
    d = deploy(cli, envoy, wasm, base, MANIFESTS, server)
    through = call(d.url, "echo", HOST)
    assert through.status == 200, through
    assert result_text(through) == "hi"
    denied = call(d.url, "get_weather", HOST)
    assert denied.status == 403, denied


def test_python_sdk_server_at_defaults(cli: Path, wasm_path: Path, work_dir: Path, envoy: Any) -> None:
    base = work_dir / "sdk-servers" / "python"
    with start_mcp_server(base / "logs", name="python-defaults") as server:
        check(cli, envoy, wasm_path, base, server, 421)
        forwarded = [r["headers"] for r in server.requests() if r.get("method") == "POST"]
        assert forwarded and all(h.get("x-forwarded-host") == HOST for h in forwarded), forwarded


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed (scripts/setup installs it)")
def test_typescript_sdk_server_at_defaults(cli: Path, wasm_path: Path, work_dir: Path, envoy: Any) -> None:
    base = work_dir / "sdk-servers" / "typescript"
    with TsServer(base / "logs") as server:
        check(cli, envoy, wasm_path, base, server, 403)
