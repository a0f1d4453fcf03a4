"""An authorizer Envoy cannot reach, in real Envoy 1.40: what Envoy hands the filter, and what the
log says (docs/cli.md, Troubleshooting).

- Nothing listens on the cluster's port: an http_call gets Envoy's own 503 ("upstream connect
  error or disconnect/reset before headers. reset reason: remote connection failure"), a
  grpc_call gets status 14 UNAVAILABLE with the same reason as its message. The log says the
  authorizer was not reached, with Envoy's reason, not that it answered.
- A STRICT_DNS cluster whose name does not resolve: Envoy fails the call at once
  (InternalFailure, both kinds); the log names the cluster and the DNS cause.

Either way the policy's failure mode applies (Deny here) and the callout is counted as an error.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness import (
    Cluster,
    EnvoyProcess,
    Listener,
    McpServerProc,
    Route,
    Wasm,
    build_bootstrap,
    free_port,
    post_jsonrpc,
    rpc,
    scenario_bundle,
)

AUTHORIZERS = [
    {"name": "http-refused", "cluster": "refused-http"},
    {"name": "grpc-refused", "cluster": "refused-grpc", "protocol": "GRPC"},
    {"name": "http-dns", "cluster": "dns-http"},
    {"name": "grpc-dns", "cluster": "dns-grpc", "protocol": "GRPC"},
]


def bundle(port: int) -> dict[str, Any]:
    return scenario_bundle(port, [{**a, "timeoutMs": 2000} for a in AUTHORIZERS])


@dataclass
class UnreachableAuthorizers:
    """Envoy, with authorizers it cannot reach, in front of the MCP server."""

    envoy: EnvoyProcess
    port: int
    tools: McpServerProc


@pytest.fixture(scope="module")
def stack(work_dir: Path, mcp_server: McpServerProc, wasm_path: Path) -> Iterator[UnreachableAuthorizers]:
    port, dead = free_port(), free_port()  # nothing listens on `dead`
    listeners = [Listener("mcp", port, [Route("tools-route", "/mcp", "tools")],
                          wasm=Wasm(wasm_path, configuration=json.dumps(bundle(port))))]
    clusters = [Cluster("tools", port=mcp_server.port),
                Cluster("refused-http", port=dead), Cluster("refused-grpc", port=dead, http2=True),
                # A name that never resolves (RFC 6761 .invalid): a STRICT_DNS cluster with no host.
                Cluster("dns-http", host="authz.no-such-namespace.invalid", port=9000),
                Cluster("dns-grpc", host="authz.no-such-namespace.invalid", port=9000, http2=True)]
    cfg = build_bootstrap(admin_port=free_port(), listeners=listeners, clusters=clusters,
                          access_log_path=work_dir / f"access-unreachable-{port}.log")
    with EnvoyProcess(cfg, workdir=work_dir / "envoy-unreachable", name="envoy-unreachable") as env:
        yield UnreachableAuthorizers(env, port, mcp_server)


def logged(stack: UnreachableAuthorizers, prefix: str) -> str:
    """The log line that begins with `prefix` (waiting for it briefly)."""
    deadline = time.monotonic() + 5
    while True:
        lines = [l for l in stack.envoy.log_text().splitlines() if prefix in l]
        if lines or time.monotonic() > deadline:
            assert lines, stack.envoy.log_text()[-3000:]
            return lines[-1].split(prefix, 1)[1]
        time.sleep(0.05)


def call(stack: UnreachableAuthorizers, scenario: str) -> None:
    """A tools/call the authorizer of `scenario` must judge: denied (failure mode Deny)."""
    stats = lambda: int(stack.envoy.stats("mcp_access").get("wasmcustom.mcp_access.callout.errors", 0))
    before = stats()
    msg = rpc("tools/call", {"name": "echo", "arguments": {"text": "hi"}}, id=3)
    r = post_jsonrpc(f"http://127.0.0.1:{stack.port}/mcp", msg, timeout=5, headers={"x-scenario": scenario})
    assert r.status == 403 and r.json()["error"]["code"] == -32010, r.text
    assert stats() == before + 1


@pytest.mark.parametrize(("scenario", "status"), [
    ("http-refused", "503"), ("grpc-refused", "gRPC status 14 (UNAVAILABLE)")])
def test_an_authorizer_nothing_listens_for_is_not_reached_with_envoys_reason(
        stack: UnreachableAuthorizers, scenario: str, status: str) -> None:
    call(stack, scenario)
    cluster = f"refused-{scenario.split('-')[0]}"
    line = logged(stack, f"mcp-access: authorizer {scenario}: ")
    assert line.startswith(
        f"not reached: Envoy could not reach cluster {cluster} and answered {status} itself "
        "(upstream connect error or disconnect/reset before headers. reset reason: remote connection failure"), line
    assert "check that the authorizer runs and listens" in line, line
    assert f"authorizer answered" not in line, line


@pytest.mark.parametrize("scenario", ["http-dns", "grpc-dns"])
def test_an_authorizer_whose_dns_name_does_not_resolve_is_named_with_the_cause(
        stack: UnreachableAuthorizers, scenario: str) -> None:
    call(stack, scenario)
    line = logged(stack, f"mcp-access: authorizer {scenario}: ")
    assert line.startswith(
        f"not reached: Envoy failed the call at once (InternalFailure): cluster dns-{scenario.split('-')[0]} "
        "has no endpoint to send it to: its DNS name does not resolve"), line
