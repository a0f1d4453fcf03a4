#!/usr/bin/env python3
"""What the demo checks and tidies before anything is built or started (standard library only,
so that scripts/demo can run it with the system's python3 before setup and the build):

- its options (the same parser as envoy-demo/demo.py) and that every port it will listen on is
  free, naming the flag that picks another one;
- work folders left by a demo that was killed (kill -9 leaves no chance to clean up): a temporary
  folder whose demo.pid names a process that is gone is removed. The processes a demo starts die
  with it: each is started through `guarded()`, which asks the kernel to kill it when the demo
  process ends, however it ends.

`python3 envoy-demo/preflight.py [demo options]` exits 0 when the demo may start, 1 with a message
when not (2 for a usage error), 10 after printing the demo's --help.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
COMPOSE_ENVOY = HERE / "envoy.yaml"
DEFAULT_WASM = ROOT / "build" / "mcp_access_filter.wasm"
WORKDIR_PREFIX = "mcp-access-demo-"
PID_FILE = "demo.pid"
PORT_FLAGS = ("envoy_port", "jwt_port", "admin_port", "mcp_port", "authz_port")
HELP_EXIT = 10


class DemoError(Exception):
    """A problem the user can fix (busy port, missing filter...): printed without a traceback."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="scripts/demo",
        description="Run the mcp-access demo: an MCP server, an authorizer and Envoy with the filter "
        "(an mTLS listener and a bearer-JWT listener), then agents through both.",
    )
    ap.add_argument("--keep", action="store_true",
                    help="leave everything running until Ctrl-C, with ready-to-paste commands for the "
                    "MCP Inspector and curl")
    ap.add_argument("--envoy-port", type=int, default=10443, help="Envoy's mTLS MCP listener (default 10443)")
    ap.add_argument("--jwt-port", type=int, default=10081,
                    help="Envoy's plain-HTTP MCP listener for bearer JWTs (default 10081)")
    ap.add_argument("--admin-port", type=int, default=19901, help="Envoy admin (default 19901)")
    ap.add_argument("--mcp-port", type=int, default=18080, help="the MCP server (default 18080)")
    ap.add_argument("--authz-port", type=int, default=18081, help="the authorizer (default 18081)")
    ap.add_argument("--wasm", type=Path, default=DEFAULT_WASM,
                    help="the filter (default build/mcp_access_filter.wasm, made by scripts/build)")
    ap.add_argument("--workdir", type=Path,
                    help="keys, certificates, tokens, configs and logs (default: a new temporary folder, "
                    "removed when the demo stops)")
    ap.add_argument("--render-compose", nargs="?", const=COMPOSE_ENVOY, type=Path, metavar="FILE",
                    help=f"write the docker-compose Envoy configuration (default {COMPOSE_ENVOY.relative_to(ROOT)}) "
                    "and exit")
    return ap.parse_args(argv)


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind; TIME_WAIT leftovers are fine
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return False
    except OSError:
        return True


def check_ports(a: argparse.Namespace) -> None:
    ports = {"--" + f.replace("_", "-"): getattr(a, f) for f in PORT_FLAGS}
    seen: dict[int, str] = {}
    for flag, port in ports.items():
        if not 0 < port < 65536:
            raise DemoError(f"{flag} {port} is not a TCP port")
        if port in seen:
            raise DemoError(f"{seen[port]} and {flag} are both {port}; give them different ports")
        seen[port] = flag
    for flag, port in ports.items():
        if not port_is_free(port):
            raise DemoError(f"port {port} on 127.0.0.1 is already in use; pick another one with {flag} PORT")


def _demo_alive(pid: int) -> bool:
    """Whether `pid` is a running demo (not merely a process that reused the number)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        try:
            os.kill(pid, 0)  # no /proc: trust the number
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return b"demo.py" in cmdline


def remove_stale_workdirs() -> list[Path]:
    """Removes the temporary folders of demos that were killed; returns them."""
    removed = []
    for d in Path(tempfile.gettempdir()).glob(WORKDIR_PREFIX + "*"):
        try:
            pid = int((d / PID_FILE).read_text().strip())
        except (OSError, ValueError):
            continue  # not ours, or still being set up
        if not _demo_alive(pid):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


def tidy() -> None:
    """Removes the folders of killed demos, saying so."""
    for d in remove_stale_workdirs():
        print(f"demo: removed {d}, left by a demo that was killed", flush=True)


def new_workdir() -> Path:
    """A temporary folder for this demo, marked with its PID so a later run can tidy it up."""
    d = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX))
    (d / PID_FILE).write_text(f"{os.getpid()}\n")
    return d


# Runs as the child of the demo: asks Linux to SIGKILL it when the demo (its parent) ends, then
# becomes the real program. argv[1] is the demo's PID: if the demo is already gone, do not start.
_GUARD = """\
import ctypes, os, sys
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
except (OSError, AttributeError):
    pass  # not Linux: the process outlives a killed demo
if os.getppid() != int(sys.argv[1]):
    sys.exit(1)
os.execvp(sys.argv[2], sys.argv[2:])
"""


def guarded(argv: list[str]) -> list[str]:
    """`argv` run so that it dies with this process (see _GUARD)."""
    return [sys.executable, "-c", _GUARD, str(os.getpid()), *argv]


def main(argv: list[str] | None = None) -> int:
    try:
        a = parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as e:  # argparse: 0 after --help, 2 after a usage error (printed)
        return HELP_EXIT if e.code == 0 else 2
    tidy()
    if a.render_compose is not None:
        return 0
    try:
        check_ports(a)
    except DemoError as e:
        print(f"demo: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
