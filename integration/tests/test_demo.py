"""The one-command demo (envoy-demo/demo.py) runs green and leaves nothing behind; its Envoy
configuration and bundle are the mcp-access CLI's rendering of envoy-demo/manifests; on its
documented default ports, Node clients (the MCP Inspector, the TypeScript SDK) reach it."""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from harness import free_ports, port_open
from test_cli_e2e import cli  # noqa: F401  (a fixture: the mcp-access binary)
from test_clients import ALPHA_SEES, BETA_ECHO, DENY_BODY, ECHO, inspector, policy_denial, run_sdk

FLAGS = ("--envoy-port", "--jwt-port", "--admin-port", "--mcp-port", "--authz-port")


def jwt_provider_flags(demo_dir: Path) -> list[str]:
    """The demo's token issuer, as demo.py declares it to the CLI (its JWKS is in the work dir)."""
    return ["--jwt-provider", "demo-idp=issuer=https://auth.demo.mcp-access.local,"
            f"jwks={demo_dir / 'jwt' / 'jwks.json'},audience=mcp-access-demo"]


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


def readme_sample(repo_root: Path) -> list[str]:
    """README's sample of what a demo run prints (its first ```text block)."""
    readme = (repo_root / "README.md").read_text()
    return readme.split("```text\n", 1)[1].split("```", 1)[0].splitlines()


def shown_as_in_readme(out: str, ports: dict[int, int]) -> list[str]:
    """A demo run's output as README shows it: from its banner, on the default ports, with the
    sample's work dir and filter path (the only parts that differ between runs)."""
    out = out[out.index("mcp-access demo (work dir "):]
    for port, default in ports.items():
        out = re.sub(rf"\b{port}\b", str(default), out)
    out = re.sub(r"work dir /tmp/mcp-access-demo-\w+|work dir \S+\)", "work dir /tmp/mcp-access-demo-7ev4okne)", out)
    out = re.sub(r"(?m)^(  filter +)\S+$", r"\1build/mcp_access_filter.wasm", out)
    return out.splitlines()


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
    ports = free_ports(len(FLAGS))
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
    assert re.search(r'agent alpha +tools/call add +-> DENIED 403 by the authorizer risk-check: Access denied +'
                     r'\[WWW-Authenticate: Bearer error="insufficient_scope", error_description=', out), out
    # The same agents with bearer tokens on the plain-HTTP listener; no token, or a forged one.
    assert re.search(r'agent alpha \(JWT\) +tools/call echo +-> allowed: "hello"', out), out
    assert re.search(r"agent beta \(JWT\) +tools/call echo +-> DENIED 403 at the gateway", out), out
    # The JWT listener requires a token (--jwt-required): none is a 401 with a challenge, no error code.
    assert re.search(r'no token +initialize +-> REFUSED 401 by jwt_authn: Jwt is missing +'
                     r'\[Bearer realm="http://127\.0\.0\.1:\d+/mcp"\]', out), out
    assert re.search(r'forged token +initialize +-> REFUSED 401 by jwt_authn: Jwt verification fails +'
                     r'\[Bearer realm="[^"]+", error="invalid_token"\]', out), out
    assert "MCP server received 0 calls of delete_repo/add/echo-from-beta" in out, out
    assert "wasmcustom.mcp_access.denied.gateway.not_allowed: 2" in out, out  # beta (mTLS, JWT)
    assert re.search(r"all \d+ expectations held", out), out
    shown = shown_as_in_readme(out, dict(zip(ports, demo_defaults(repo_root).values())))
    assert readme_sample(repo_root) == shown, "README's sample output is not what the demo prints"

    # The demo ran the CLI's compilation of envoy-demo/manifests, on the Envoy port it was given.
    compiled = subprocess.run(
        [str(cli), "compile", "-f", str(repo_root / "envoy-demo" / "manifests"), "--trust-domain", "example.org",
         "--listen", f"mcp-mtls={ports[0]}", "--listen", f"mcp-jwt={ports[1]}", *jwt_provider_flags(demo_dir),
         "-o", "-"], capture_output=True, text=True, timeout=60)
    assert compiled.returncode == 0, compiled.stderr
    assert json.loads((demo_dir / "bundle.json").read_text()) == json.loads(compiled.stdout)

    # Nothing it started is left: no port answers, no process refers to its work dir or ports.
    assert [p for p in ports if port_open(p)] == []
    assert processes_mentioning([str(demo_dir), *(f"--port {p} " for p in ports)]) == []


def test_demo_refuses_a_busy_port_naming_the_flag(repo_root: Path, wasm_path: Path, work_dir: Path, cli: Path) -> None:
    ports = free_ports(len(FLAGS))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", ports[3]))
        busy.listen()
        args = ["--wasm", str(wasm_path), "--workdir", str(work_dir / "demo-busy")]
        for flag, port in zip(FLAGS, ports):
            args += [flag, str(port)]
        code, out = run_demo(repo_root, args, cli, timeout=60)
    assert code == 1, out
    assert f"port {ports[3]}" in out and "--mcp-port" in out, out
    assert [p for i, p in enumerate(ports) if i != 3 and port_open(p)] == []
    assert not (work_dir / "demo-busy" / "envoy").exists()  # nothing was started


def start_kept_demo(repo_root: Path, wasm_path: Path, cli: Path, ports: list[int]) -> tuple[subprocess.Popen[str], str]:
    """demo.py --keep in a temporary folder of its own; returns it once everything runs, with its output so far."""
    args = ["--keep", "--wasm", str(wasm_path)]
    for flag, port in zip(FLAGS, ports):
        args += [flag, str(port)]
    proc = subprocess.Popen(
        [sys.executable, str(repo_root / "envoy-demo" / "demo.py"), *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=repo_root,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "MCP_ACCESS_CLI": str(cli)},
    )
    out: list[str] = []
    assert proc.stdout is not None
    deadline = time.monotonic() + 150
    for line in proc.stdout:
        out.append(line)
        if line.startswith("Logs:") or time.monotonic() > deadline:
            break
    text = "".join(out)
    if "Logs:" not in text:
        proc.kill()
        raise AssertionError(text + (proc.stdout.read() or ""))
    return proc, text


def test_kill_9_of_the_demo_leaves_nothing_behind(repo_root: Path, wasm_path: Path, cli: Path) -> None:
    ports = free_ports(len(FLAGS))
    proc, out = start_kept_demo(repo_root, wasm_path, cli, ports)
    m = re.search(r"Ctrl-C stops it all, and removes (\S+)\n", out)
    assert m, out
    workdir = Path(m.group(1))
    assert (workdir / "jwt" / "alpha.jwt").is_file() and (workdir / "pki").is_dir(), out
    assert all(port_open(p) for p in (ports[0], ports[1], ports[3], ports[4])), out

    proc.kill()  # SIGKILL: the demo cannot clean up
    proc.wait(timeout=10)
    # Its processes die with it (the kernel kills them): no port answers, no process refers to it.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and ([p for p in ports if port_open(p)] or processes_mentioning([str(workdir)])):
        time.sleep(0.2)
    assert [p for p in ports if port_open(p)] == []
    assert processes_mentioning([str(workdir)]) == []
    # Its folder (keys, tokens) is removed by the next start, before anything is built.
    assert workdir.is_dir()
    pre = subprocess.run([sys.executable, str(repo_root / "envoy-demo" / "preflight.py")], capture_output=True,
                         text=True, timeout=30)
    assert f"removed {workdir}, left by a demo that was killed" in pre.stdout, pre
    assert not workdir.exists()


def test_keep_removes_its_folder_on_stop(repo_root: Path, wasm_path: Path, cli: Path) -> None:
    ports = free_ports(len(FLAGS))
    proc, out = start_kept_demo(repo_root, wasm_path, cli, ports)
    workdir = Path(re.search(r"Ctrl-C stops it all, and removes (\S+)\n", out).group(1))  # type: ignore[union-attr]
    assert workdir.is_dir()
    proc.send_signal(signal.SIGINT)  # Ctrl-C
    rest, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out + rest
    assert f"removed {workdir} (its keys, certificates, tokens and logs)" in rest, rest
    assert not workdir.exists()
    assert [p for p in ports if port_open(p)] == []


def test_keep_prints_inspector_and_curl_commands_that_work(repo_root: Path, wasm_path: Path, cli: Path) -> None:
    """The commands --keep prints for the bearer-JWT listener, pasted into a shell as they are."""
    ports = free_ports(len(FLAGS))
    proc, out = start_kept_demo(repo_root, wasm_path, cli, ports)
    try:
        commands = [l.strip() for l in out.splitlines() if "mcp-inspector --cli" in l]
        assert len(commands) == 4, out  # tools/list and tools/call, for alpha and beta
        ran = {}
        for cmd in commands:
            r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=90)
            ran[cmd] = r
            assert r.returncode == 0, (cmd, r.stdout, r.stderr)
        # Each agent's listing shows only the tools it may call (delete_repo: no Backend rule admits
        # it; beta may call only get_weather at the Gateway).
        listed = {("alpha" if "alpha.jwt" in c else "beta"): sorted(t["name"] for t in json.loads(r.stdout)["tools"])
                  for c, r in ran.items() if "tools/list" in c}
        assert listed == {"alpha": ["add", "echo", "get_weather"], "beta": ["get_weather"]}, listed
        called = {c: json.loads(r.stdout)["content"][0]["text"] for c, r in ran.items() if "tools/call" in c}
        assert sorted(called.values()) == ["hi", "sunny in Lisbon"], called
        # A denial, as the Inspector shows it: beta may not call echo.
        beta_call = next(c for c in commands if "beta.jwt" in c and "tools/call" in c)
        denied = subprocess.run(["bash", "-c", beta_call.replace("--tool-name get_weather --tool-arg city=Lisbon",
                                                                 "--tool-name echo --tool-arg text=hi")],
                                capture_output=True, text=True, timeout=90)
        assert denied.returncode == 1 and "Failed to call tool echo" in denied.stderr, denied
        # The curl commands (three lines each, joined as a shell joins them).
        text = out.replace("\\\n", " ")
        curls = [l.strip() for l in text.splitlines() if l.strip().startswith("curl -sS http://")]
        assert len(curls) == 2, out
        for c in curls:
            r = subprocess.run(["bash", "-c", c], capture_output=True, text=True, timeout=30)
            assert r.returncode == 0 and '"isError":false' in r.stdout, (c, r.stdout, r.stderr)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)


def test_scripts_demo_checks_ports_before_setting_up_or_building(repo_root: Path) -> None:
    ports = free_ports(len(FLAGS))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", ports[1]))
        busy.listen()
        args = [a for flag, port in zip(FLAGS, ports) for a in (flag, str(port))]
        proc = subprocess.run(["bash", str(repo_root / "scripts" / "demo"), *args], capture_output=True, text=True,
                              timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"port {ports[1]} on 127.0.0.1 is already in use; pick another one with --jwt-port PORT" in proc.stderr
    assert "setting the machine up" not in proc.stdout and "building" not in proc.stdout, proc.stdout


def demo_defaults(repo_root: Path) -> dict[str, int]:
    """The demo's default ports, by flag (envoy-demo/preflight.py's parser, which demo.py uses)."""
    spec = importlib.util.spec_from_file_location("demo_preflight", repo_root / "envoy-demo" / "preflight.py")
    assert spec is not None and spec.loader is not None
    preflight = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(preflight)
    a = preflight.parse_args([])
    return {flag: getattr(a, flag[2:].replace("-", "_")) for flag in FLAGS}


@contextmanager
def default_ports(ports: list[int], timeout: float = 600.0) -> Iterator[None]:
    """The demo's fixed default ports, held by one test at a time on this machine: other test
    runs (other checkouts) that start the demo on them wait here. Anything else on them fails
    the test, naming the port (a skip would hide that the quick start was not tested)."""
    with open(Path(tempfile.gettempdir()) / "mcp-access-demo-default-ports.lock", "w") as lock:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.fail(f"another test held the demo's default ports for {timeout:.0f}s")
                time.sleep(1)
        busy = [p for p in ports if port_open(p)]
        assert busy == [], f"the demo's default ports {busy} are in use on 127.0.0.1 (a demo left running?)"
        yield


def readme_inspector_command(repo_root: Path) -> str:
    """README's ready-to-paste MCP Inspector command (its continuation lines joined)."""
    readme = (repo_root / "README.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", readme, flags=re.S)
    commands = [b.replace("\\\n", " ") for b in blocks if "mcp-inspector --cli" in b]
    assert len(commands) == 1, blocks
    return " ".join(commands[0].split())


def test_quick_start_demo_on_its_default_ports_serves_the_inspector_and_the_ts_sdk(
    repo_root: Path, wasm_path: Path, cli: Path
) -> None:
    """The demo as README's quick start runs it, on its documented default ports (no port flag),
    driven with Node clients (the MCP Inspector, the TypeScript SDK) on the bearer-JWT listener
    README names: Node's fetch refuses the Fetch standard's blocked ports, so this fails if the
    documented port is one of them."""
    defaults = demo_defaults(repo_root)
    command = readme_inspector_command(repo_root)
    m = re.search(r"--cli (http://127\.0\.0\.1:(\d+)/mcp) ", command)
    assert m, command
    url = m.group(1)
    # README documents the default ports the demo has.
    assert int(m.group(2)) == defaults["--jwt-port"], (command, defaults)
    readme = (repo_root / "README.md").read_text()
    assert f"`--envoy-port` (mTLS, {defaults['--envoy-port']}), `--jwt-port` (bearer JWT, {defaults['--jwt-port']})" \
        in readme, defaults
    with default_ports(list(defaults.values())):
        proc, out = start_kept_demo(repo_root, wasm_path, cli, [])
        try:
            assert f"{url}  (plain HTTP, bearer JWT" in out, out
            kept = re.search(r"Ctrl-C stops it all, and removes (\S+)\n", out)
            assert kept, out
            workdir = Path(kept.group(1))
            token = {a: (workdir / "jwt" / f"{a}.jwt").read_text().strip() for a in ("alpha", "beta")}

            # README's Inspector command, pasted with the demo's folder.
            pasted = re.sub(r"/tmp/mcp-access-demo-[^/]*/", f"{workdir}/", command)
            listed = subprocess.run(["bash", "-c", pasted], capture_output=True, text=True, timeout=90,
                                    cwd=repo_root, env={**os.environ, "NO_COLOR": "1"})
            assert listed.returncode == 0, (pasted, listed.stdout, listed.stderr)
            assert sorted(t["name"] for t in json.loads(listed.stdout)["tools"]) == ALPHA_SEES, listed.stdout
            called = inspector(url, "tools/call", "--tool-name", "echo", "--tool-arg", "text=hello",
                               token=token["alpha"])
            assert called.code == 0 and called.json()["content"] == [{"type": "text", "text": "hello"}], called
            denied = inspector(url, "tools/call", "--tool-name", "echo", "--tool-arg", "text=x", token=token["beta"])
            assert denied.code == 1 and "Failed to call tool echo: Streamable HTTP error: Error POSTing to " \
                "endpoint: " in denied.err and DENY_BODY in denied.err, denied

            # The official TypeScript SDK.
            alpha = run_sdk("typescript", url, "list", ECHO, token=token["alpha"])
            assert alpha["connect"]["ok"] and alpha["connect"]["server"] == "demo-tools", alpha
            assert sorted(alpha["list"]["tools"]) == ALPHA_SEES, alpha
            assert (alpha[ECHO]["ok"], alpha[ECHO]["text"], alpha[ECHO]["is_error"]) == (True, "hello", False), alpha
            beta = run_sdk("typescript", url, BETA_ECHO, token=token["beta"])
            assert beta["connect"]["ok"], beta
            policy_denial("typescript", beta[BETA_ECHO])
        finally:
            proc.send_signal(signal.SIGINT)
            rest, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, out + rest
        assert [p for p in defaults.values() if port_open(p)] == []
