"""The one-command demo (envoy-demo/demo.py) runs green and leaves nothing behind; its Envoy
configuration and bundle are the mcp-access CLI's rendering of envoy-demo/manifests."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

from harness import free_ports, port_open
from test_cli_e2e import cli  # noqa: F401  (a fixture: the mcp-access binary)

FLAGS = ("--envoy-port", "--admin-port", "--mcp-port", "--authz-port")


def run_demo(repo_root: Path, args: list[str], cli: Path, timeout: float = 180.0) -> tuple[int, str]:
    """Run demo.py; on timeout (or an interrupted test) SIGTERM it so it stops what it started."""
    proc = subprocess.Popen(
        [sys.executable, str(repo_root / "envoy-demo" / "demo.py"), *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=repo_root,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "MCP_ACCESS_CLI": str(cli)},
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except BaseException:
        proc.send_signal(signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        print(out, file=sys.stderr)
        raise
    return proc.returncode, out


def processes_mentioning(needles: list[str]) -> list[str]:
    """Command lines of live processes containing any of `needles` (Linux /proc; [] elsewhere)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if entry.name != str(os.getpid()) and any(n in cmd for n in needles):
            found.append(f"{entry.name}: {cmd}")
    return found


def test_demo_session_succeeds_and_stops_everything(repo_root: Path, wasm_path: Path, work_dir: Path, cli: Path) -> None:
    ports = free_ports(4)
    demo_dir = work_dir / "demo"
    args = ["--wasm", str(wasm_path), "--workdir", str(demo_dir)]
    for flag, port in zip(FLAGS, ports):
        args += [flag, str(port)]

    code, out = run_demo(repo_root, args, cli)

    assert code == 0, out
    assert re.search(r"agent alpha +initialize +-> ok \(server demo-tools\)", out), out
    assert re.search(r'agent alpha +tools/call echo +-> allowed: "hello"', out), out
    assert re.search(r'agent beta +tools/call get_weather +-> allowed: "sunny in ', out), out
    assert re.search(r"agent beta +tools/call echo +-> DENIED 403 at the gateway", out), out
    assert re.search(r"agent alpha +tools/call delete_repo +-> DENIED 403 by the backend policy", out), out
    assert re.search(r"agent alpha +tools/call add +-> DENIED 403 by the authorizer risk-check: Access denied", out), out
    assert "MCP server received 0 calls of delete_repo/add/echo-from-beta" in out, out
    assert "wasmcustom.mcp_access.denied.gateway.not_allowed: 1" in out, out
    assert re.search(r"all \d+ expectations held", out), out

    # The demo ran the CLI's compilation of envoy-demo/manifests, on the Envoy port it was given.
    compiled = subprocess.run(
        [str(cli), "compile", "-f", str(repo_root / "envoy-demo" / "manifests"), "--trust-domain", "example.org",
         "--listen", f"mcp-mtls={ports[0]}", "-o", "-"], capture_output=True, text=True, timeout=60)
    assert compiled.returncode == 0, compiled.stderr
    assert json.loads((demo_dir / "bundle.json").read_text()) == json.loads(compiled.stdout)

    # Nothing it started is left: no port answers, no process refers to its work dir or ports.
    assert [p for p in ports if port_open(p)] == []
    assert processes_mentioning([str(demo_dir), *(f"--port {p} " for p in ports)]) == []


def test_demo_refuses_a_busy_port_naming_the_flag(repo_root: Path, wasm_path: Path, work_dir: Path, cli: Path) -> None:
    ports = free_ports(4)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", ports[2]))
        busy.listen()
        args = ["--wasm", str(wasm_path), "--workdir", str(work_dir / "demo-busy")]
        for flag, port in zip(FLAGS, ports):
            args += [flag, str(port)]
        code, out = run_demo(repo_root, args, cli, timeout=60)
    assert code == 1, out
    assert f"port {ports[2]}" in out and "--mcp-port" in out, out
    assert [p for i, p in enumerate(ports) if i != 2 and port_open(p)] == []
    assert not (work_dir / "demo-busy" / "envoy").exists()  # nothing was started
