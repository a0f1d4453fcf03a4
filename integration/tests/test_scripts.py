"""scripts/test installs no system packages: when a tool the tests need is missing it names the
tools and scripts/setup and fails, before building anything."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path


def test_scripts_test_names_missing_tools_and_installs_nothing(repo_root: Path, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marker = tmp_path / "installer-called"
    # Only what scripts/test needs before its check, and installers that record being called.
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
    assert "skopeo docker-registry docker-compose not found" in proc.stderr, proc.stderr
    assert "scripts/setup" in proc.stderr, proc.stderr
    assert "cargo" not in proc.stdout, proc.stdout  # nothing was built
    assert not marker.exists(), marker.read_text()
