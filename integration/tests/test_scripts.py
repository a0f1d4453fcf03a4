"""scripts/test installs no system packages: when a tool the tests need is missing it names the
tools and scripts/setup and fails, before building anything."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path


def test_scripts_test_sets_up_what_is_missing_before_building(repo_root: Path, tmp_path: Path) -> None:
    # After the demo's setup (which leaves out the OCI and compose tools), scripts/test runs
    # scripts/setup for what it lacks before it builds anything; here setup itself stops at
    # its first check (no cargo on this PATH), so the installers are never reached.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marker = tmp_path / "installer-called"
    for tool in ("dirname",):
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    for installer in ("apt-get", "sudo", "apt"):
        script = bin_dir / installer
        script.write_text(f"#!/bin/sh\necho {installer} \"$@\" >> {marker}\n")
        script.chmod(0o755)
    bash = shutil.which("bash")
    assert bash
    proc = subprocess.run([bash, str(repo_root / "scripts" / "test")], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": str(bin_dir)})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "skopeo docker-registry docker-compose redis-server not found (the image" in proc.stdout, proc.stdout
    assert "scripts/setup" in proc.stdout, proc.stdout
    assert "setup: cargo is required" in proc.stderr, proc.stderr
    assert "cargo fmt" not in proc.stdout, proc.stdout  # nothing was built or checked
    assert not marker.exists(), marker.read_text()


def test_scripts_bench_reads_its_options_before_installing_anything(repo_root: Path, tmp_path: Path) -> None:
    # `--help` prints the options and a mistyped option fails, both before any tool (wrk, valgrind,
    # oha, the venv) is installed or anything is built.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marker = tmp_path / "installer-called"
    (bin_dir / "dirname").symlink_to(shutil.which("dirname") or "/usr/bin/dirname")
    (bin_dir / "python3").symlink_to(Path(sys.executable).resolve())  # an interpreter, not a shim
    for installer in ("apt-get", "sudo", "apt", "cargo", "pip", "nproc"):
        script = bin_dir / installer
        script.write_text(f"#!/bin/sh\necho {installer} \"$@\" >> {marker}\n")
        script.chmod(0o755)
    bash = shutil.which("bash")
    assert bash
    env = {**os.environ, "PATH": str(bin_dir)}
    bench = str(repo_root / "scripts" / "bench")
    proc = subprocess.run([bash, bench, "--quick", "--help"], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("usage: scripts/bench"), proc.stdout
    assert "--skip-micro" in proc.stdout and "installing" not in proc.stderr, proc.stdout + proc.stderr
    proc = subprocess.run([bash, bench, "--quik"], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "unrecognized arguments: --quik" in proc.stderr, proc.stderr
    assert not marker.exists(), marker.read_text()
