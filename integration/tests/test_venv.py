"""scripts/lib.sh's venv check: two pinned packages write cel/__init__.py (common-expression-language,
the CEL evaluator of test_manifests.py, and xds-protos, whose file is empty). `venv_check` passes
on the venv the tests run in and fails, naming the package, when the empty file has won."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def venv_check(repo_root: Path, venv: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", f'source "{repo_root}/scripts/lib.sh" && venv_check'], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "MCP_ACCESS_VENV": str(venv)})


def test_the_venv_of_the_tests_passes(repo_root: Path) -> None:
    proc = venv_check(repo_root, Path(sys.prefix))
    assert proc.returncode == 0, proc.stderr


def test_an_empty_cel_package_fails_naming_it(repo_root: Path, tmp_path: Path) -> None:
    # The same interpreter, with xds-protos's empty cel/__init__.py first on its path.
    shadow = tmp_path / "shadow" / "cel"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    python = tmp_path / "venv" / "bin" / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{shadow.parent}" exec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    proc = venv_check(repo_root, tmp_path / "venv")
    assert proc.returncode == 1, proc.stderr
    assert "venv check: cel.evaluate (PyPI common-expression-language) is not usable" in proc.stderr, proc.stderr
    assert "run scripts/setup" in proc.stderr, proc.stderr
