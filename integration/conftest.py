"""Session fixtures for the mcp-access integration tests."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import EnvoyProcess, JwtKeys, McpServerProc, Pki, make_jwt_keys, make_pki, start_mcp_server

DEFAULT_WASM = "build/mcp_access_filter.wasm"


def pytest_configure(config: pytest.Config) -> None:
    # A SIGTERM (e.g. a CI timeout) becomes KeyboardInterrupt, so fixtures still stop Envoy and the servers.
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _sigterm)


def _sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    rep = yield
    setattr(item, f"rep_{rep.when}", rep)  # lets fixtures see whether the test failed
    return rep


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def work_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Per-session directory for certs, configs and process logs ($MCP_ACCESS_WORK_DIR if set)."""
    if override := os.environ.get("MCP_ACCESS_WORK_DIR"):
        path = Path(override).resolve()
        path.mkdir(parents=True, exist_ok=True)
        return path
    return tmp_path_factory.mktemp("mcp-access")


@pytest.fixture(scope="session")
def pki(work_dir: Path) -> Pki:
    return make_pki(work_dir / "pki")


@pytest.fixture(scope="session")
def jwt_keys() -> JwtKeys:
    return make_jwt_keys()


@pytest.fixture(scope="session")
def wasm_path(repo_root: Path) -> Path:
    """The built filter: $MCP_ACCESS_WASM or build/mcp_access_filter.wasm (scripts/build).
    Missing → failure, or a skip when MCP_ACCESS_ALLOW_MISSING_WASM=1."""
    path = Path(os.environ.get("MCP_ACCESS_WASM") or repo_root / DEFAULT_WASM)
    if not path.is_file():
        msg = (
            f"mcp-access wasm not found at {path}. Build it with scripts/build (or point "
            "MCP_ACCESS_WASM at a build); set MCP_ACCESS_ALLOW_MISSING_WASM=1 to skip wasm tests instead."
        )
        if os.environ.get("MCP_ACCESS_ALLOW_MISSING_WASM") == "1":
            pytest.skip(msg)
        pytest.fail(msg)
    return path


@pytest.fixture(scope="session")
def mcp_server(work_dir: Path) -> Iterator[McpServerProc]:
    """One demo MCP server for the session (name "upstream"); call .reset() before counting."""
    with start_mcp_server(work_dir / "logs", name="upstream") as srv:
        yield srv


@pytest.fixture
def envoy(request: pytest.FixtureRequest, work_dir: Path) -> Iterator[Callable[..., EnvoyProcess]]:
    """Factory: envoy(config) starts an EnvoyProcess that is stopped after the test;
    if the test failed, each Envoy's log tail is printed."""
    started: list[EnvoyProcess] = []
    test_dir = work_dir / "envoy" / request.node.name

    def start(config: dict[str, Any] | str, name: str = "envoy") -> EnvoyProcess:
        proc = EnvoyProcess(config, workdir=test_dir, name=f"{name}{len(started)}")
        started.append(proc)
        return proc.start()

    yield start
    failed = getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed
    for proc in started:
        if failed:
            print(f"\n--- {proc.name} log tail ({proc.log_path}) ---\n{proc.log_tail()}", file=sys.stderr)
        proc.stop()
