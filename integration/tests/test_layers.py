"""scripts/layers finds import cycles in a synthetic workspace: between a crate's top-level
modules, between the files of a module folder (through `super::` and the parent's re-exports),
not in test code; a known circle passes as known, and a known one that is gone fails."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType


def layers(repo_root: Path) -> ModuleType:
    path = str(repo_root / "scripts" / "layers")
    loader = importlib.machinery.SourceFileLoader("layers", path)
    spec = importlib.util.spec_from_loader("layers", loader)
    assert spec
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def workspace(root: Path, files: dict[str, str]) -> Path:
    (root / "Cargo.toml").write_text('[workspace]\nmembers = ["a"]\n')
    for name, text in files.items():
        f = root / "a" / "src" / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    return root


def run(repo_root: Path, root: Path, known: list) -> tuple[int, str]:
    lines: list[str] = []
    code = layers(repo_root).check(root, known, out=lines.append)
    return code, "\n".join(lines)


# A folder whose two files reach each other: one by path, one through the parent's re-export.
CIRCLE = {
    "lib.rs": "mod codec;\nmod flow;\npub mod listing;\n",
    "codec.rs": "pub fn read() {}\n",
    "flow.rs": "use crate::listing::Judge;\nuse crate::codec;\n",
    "listing/mod.rs": "mod message;\nmod sse;\npub use message::Judge;\nuse crate::codec::read;\n",
    "listing/message.rs": "use super::sse::find_either;\npub struct Judge;\n",
    "listing/sse.rs": "use super::{Judge, read};\npub fn find_either() { read() }\n",
}


def test_a_circle_inside_a_folder_fails_and_is_named(repo_root: Path, tmp_path: Path) -> None:
    code, out = run(repo_root, workspace(tmp_path, CIRCLE), [])
    assert code == 1, out
    assert "cycle: a/src/listing/: message -> sse -> message" in out, out
    assert out.count("cycle:") == 1, out  # the parent's own `use`s are no arrows


def test_a_circle_between_top_level_modules_fails(repo_root: Path, tmp_path: Path) -> None:
    files = {**CIRCLE, "codec.rs": "pub fn read() { crate::flow::go() }\n",
             "flow.rs": "use crate::{codec, listing::{self, Judge}};\npub fn go() {}\n"}
    files["listing/sse.rs"] = "use super::read;\npub fn find_either() {}\n"
    code, out = run(repo_root, workspace(tmp_path, files), [])
    assert code == 1, out
    assert "cycle: a/src/: codec -> flow -> codec" in out, out
    assert "listing/" not in out, out


def test_test_code_and_comments_make_no_arrow(repo_root: Path, tmp_path: Path) -> None:
    files = {**CIRCLE, "listing/sse.rs": (
        "// use super::message::Judge;\npub fn find_either() {}\n"
        "#[cfg(test)]\nmod tests {\n    use super::super::Judge;\n}\n")}
    code, out = run(repo_root, workspace(tmp_path, files), [])
    assert code == 0, out
    assert out.endswith("no new cycle"), out


def test_a_known_circle_passes_until_it_is_gone(repo_root: Path, tmp_path: Path) -> None:
    known = [("a", "listing", frozenset({"message", "sse"}))]
    code, out = run(repo_root, workspace(tmp_path, CIRCLE), known)
    assert code == 0, out
    assert "known circle: a/src/listing/: message -> sse -> message" in out, out

    (tmp_path / "a/src/listing/sse.rs").write_text("use super::read;\npub fn find_either() {}\n")
    code, out = run(repo_root, tmp_path, known)
    assert code == 1, out
    assert "gone: the known circle in a/src/listing of message, sse: take it off KNOWN" in out, out


def test_the_workspace_has_no_new_cycle(repo_root: Path) -> None:
    proc = subprocess.run([sys.executable, str(repo_root / "scripts" / "layers")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
