"""Subprocess management with readiness waits and guaranteed cleanup.

Every process is started in its own session (process group) and registered so
that `stop()` — or, as a last resort, an atexit hook — terminates it.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .ports import free_port, port_open

REPO_ROOT = Path(__file__).resolve().parents[2]
DEMO_DIR = REPO_ROOT / "envoy-demo"

_live: set["ManagedProcess"] = set()
_live_lock = threading.Lock()


class ManagedProcess:
    """One child process whose stdout+stderr go to `log_path`."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        name: str,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.argv = [str(a) for a in argv]
        self.name = name
        self.log_path = Path(log_path)
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None

    # lifecycle -------------------------------------------------------------
    def start(self) -> "ManagedProcess":
        if self.proc is not None:
            raise RuntimeError(f"{self.name} already started")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,  # own process group: stop() can signal it as a whole
            )
        with _live_lock:
            _live.add(self)
        return self

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.proc.poll() if self.proc else None

    def wait_ready(self, check: Callable[[], bool], *, timeout: float, what: str) -> None:
        """Poll `check` until true; raise with the log tail if the process dies or time runs out."""
        deadline = time.monotonic() + timeout
        while True:
            if not self.alive:
                raise RuntimeError(
                    f"{self.name} exited with code {self.returncode} before {what}\n"
                    f"--- {self.name} log tail ---\n{self.log_tail()}"
                )
            try:
                if check():
                    return
            except Exception:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{self.name} not ready ({what}) within {timeout}s\n"
                    f"--- {self.name} log tail ---\n{self.log_tail()}"
                )
            time.sleep(0.05)

    def wait_exit(self, timeout: float) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is not None:
                with _live_lock:
                    _live.discard(self)

    def stop(self, timeout: float = 5.0) -> int | None:
        """SIGTERM the process group, SIGKILL after `timeout`; always reaps. Idempotent."""
        proc = self.proc
        if proc is None:
            return None
        try:
            if proc.poll() is None:
                _signal_group(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    _signal_group(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=timeout)
            else:
                _signal_group(proc.pid, signal.SIGKILL)  # stray children of a dead leader
        finally:
            with _live_lock:
                _live.discard(self)
        return proc.returncode

    def __enter__(self) -> "ManagedProcess":
        if self.proc is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # logs ----------------------------------------------------------------
    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)  # pgid == pid thanks to start_new_session
    except (ProcessLookupError, PermissionError):
        pass


@atexit.register
def _stop_all() -> None:
    with _live_lock:
        procs = list(_live)
    for p in procs:
        p.stop(timeout=2.0)


# ---------------------------------------------------------------------------
# Small HTTP helpers for the demo processes' control endpoints (stdlib only).


def http_json(method: str, url: str, body: Any = None, timeout: float = 5.0) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - loopback only
        raw = resp.read()
    return json.loads(raw) if raw else None


def start_python(
    script: Path | str,
    args: Sequence[str],
    *,
    name: str,
    log_dir: Path,
    ready_ports: Sequence[int] = (),
    timeout: float = 20.0,
    env: Mapping[str, str] | None = None,
) -> ManagedProcess:
    """Start `python script args...` (this interpreter) and wait until all `ready_ports` accept."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    proc = ManagedProcess(
        [sys.executable, str(script), *args], name=name, log_path=Path(log_dir) / f"{name}.log", env=full_env
    ).start()
    try:
        proc.wait_ready(lambda: all(port_open(p) for p in ready_ports), timeout=timeout, what=f"ports {list(ready_ports)}")
    except BaseException:
        proc.stop()
        raise
    return proc


# ---------------------------------------------------------------------------
# Demo MCP server (envoy-demo/mcp_server.py)


class McpServerProc:
    """A running envoy-demo/mcp_server.py. MCP on `port`, request log on `admin_port`."""

    def __init__(self, proc: ManagedProcess, *, name: str, port: int, admin_port: int, mcp_path: str) -> None:
        self.proc, self.name, self.port, self.admin_port, self.mcp_path = proc, name, port, admin_port, mcp_path

    @property
    def url(self) -> str:
        """Direct (not proxied) MCP endpoint."""
        return f"http://127.0.0.1:{self.port}{self.mcp_path}"

    def requests(self) -> list[dict[str, Any]]:
        """Every HTTP request the MCP port received since the last reset."""
        return http_json("GET", f"http://127.0.0.1:{self.admin_port}/requests")

    def reset(self) -> None:
        http_json("POST", f"http://127.0.0.1:{self.admin_port}/reset")

    def tool_calls(self) -> list[str]:
        """Tool names of the tools/call requests received, in order."""
        return [r["tool"] for r in self.requests() if r.get("mcp_method") == "tools/call"]

    def stop(self) -> None:
        self.proc.stop()

    def __enter__(self) -> "McpServerProc":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_mcp_server(
    log_dir: Path,
    *,
    name: str = "mcp",
    mcp_path: str = "/mcp",
    extra_args: Sequence[str] = (),
    timeout: float = 20.0,
) -> McpServerProc:
    port, admin_port = free_port(), free_port()
    args = ["--port", str(port), "--admin-port", str(admin_port), "--mcp-path", mcp_path, "--name", name, *extra_args]
    proc = start_python(
        DEMO_DIR / "mcp_server.py", args, name=f"mcp_server-{name}", log_dir=log_dir,
        ready_ports=[port, admin_port], timeout=timeout,
    )
    return McpServerProc(proc, name=name, port=port, admin_port=admin_port, mcp_path=mcp_path)


# ---------------------------------------------------------------------------
# Demo external authorizer (envoy-demo/authorizer.py)


class AuthorizerProc:
    """A running envoy-demo/authorizer.py (HTTP ext_authz semantics)."""

    def __init__(self, proc: ManagedProcess, *, name: str, port: int) -> None:
        self.proc, self.name, self.port = proc, name, port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def calls(self) -> list[dict[str, Any]]:
        return http_json("GET", f"{self.url}/__calls")

    def reset(self) -> None:
        http_json("POST", f"{self.url}/__reset")

    def configure(self, **changes: Any) -> dict[str, Any]:
        """Change decision rules at runtime (keys as in authorizer.py's /__config); returns the new config."""
        return http_json("POST", f"{self.url}/__config", changes)

    def stop(self) -> None:
        self.proc.stop()

    def __enter__(self) -> "AuthorizerProc":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_authorizer(
    log_dir: Path,
    *,
    name: str = "authz",
    deny_headers: Sequence[str] = (),
    deny_tools: Sequence[str] = (),
    deny_status: int = 403,
    delay_ms: int = 0,
    add_headers: Sequence[str] = (),
    timeout: float = 20.0,
) -> AuthorizerProc:
    port = free_port()
    args = ["--name", name, "--port", str(port), "--deny-status", str(deny_status), "--delay-ms", str(delay_ms)]
    for h in deny_headers:
        args += ["--deny-header", h]
    for t in deny_tools:
        args += ["--deny-tool", t]
    for h in add_headers:
        args += ["--add-header", h]
    proc = start_python(
        DEMO_DIR / "authorizer.py", args, name=f"authorizer-{name}", log_dir=log_dir, ready_ports=[port], timeout=timeout
    )
    return AuthorizerProc(proc, name=name, port=port)
