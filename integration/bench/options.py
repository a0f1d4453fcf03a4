"""The options of integration/bench/run.py, with nothing but the standard library: `scripts/bench`
reads them (prints `--help`, refuses an unknown option) before it installs or builds anything.

    python3 -m bench.options --help     # the help, then exit 0
    python3 -m bench.options ARGS...    # exit 0 when run.py would accept ARGS, 2 (with the error) if not
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# P11: variants measured at a fixed rate (oha, latency from each request's scheduled start).
FIXED_RATE = 1000


def _description() -> str | None:
    # run.py's docstring, read without importing it (it imports the harness and its packages).
    return ast.get_docstring(ast.parse((Path(__file__).parent / "run.py").read_text()))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    # No abbreviations: scripts/bench looks for `--quick` and `--help` spelled out.
    ap = argparse.ArgumentParser(prog="scripts/bench", description=_description(), allow_abbrev=False,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 round, short runs, quick criterion")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--duration", type=int, default=None, help="seconds per saturating run")
    ap.add_argument("--latency-duration", type=int, default=None, help="seconds per one-connection run")
    ap.add_argument("--connections", type=int, default=16, help="connections of the saturating runs")
    ap.add_argument("--fixed-duration", type=int, default=None, help=f"seconds per run at {FIXED_RATE} req/s (P11)")
    ap.add_argument("--fixed-connections", type=int, default=8, help=f"keep-alive connections of the runs at {FIXED_RATE} req/s")
    ap.add_argument("--remeasure", type=int, default=None,
                    help="passes re-measuring noisy wall-clock targets (2 more paired rounds each, longer runs)")
    ap.add_argument("--budget-min", type=float, default=13.0, help="no re-measuring pass starts after this many minutes")
    ap.add_argument("--envoy-cpu", type=int, default=1)
    ap.add_argument("--load-cpu", type=int, default=0)
    ap.add_argument("--wasm", type=Path, default=ROOT / "build" / "mcp_access_filter.wasm")
    ap.add_argument("--reader-wasm", type=Path, default=ROOT / "target" / "wasm32-wasip1" / "wasm-release" / "body_reader.wasm",
                    help="P5's floor: the module that only reads the body (integration/bench/body_reader)")
    ap.add_argument("--raw-wasm", type=Path, default=ROOT / "target" / "wasm32-wasip1" / "wasm-release" / "mcp_access_filter.wasm")
    ap.add_argument("--out", type=Path, default=None, help="results directory (default integration/bench/results, quick: no write unless given)")
    ap.add_argument("--only", default="", help="comma-separated variant keys (default: all)")
    ap.add_argument("--skip-micro", action="store_true", help="no criterion / callgrind of the native benches")
    ap.add_argument("--skip-criterion", action="store_true", help="callgrind of the native benches, no criterion timing")
    ap.add_argument("--skip-envoy-callgrind", action="store_true", help="no instruction counts of Envoy under callgrind")
    ap.add_argument("--callgrind-only", action="store_true",
                    help="only the instruction counts (no timed rounds): they do not depend on load, so they can be "
                         "counted while the machine is busy and reused with --callgrind-from")
    ap.add_argument("--callgrind-start-timeout", type=float, default=3600.0,
                    help="seconds an Envoy under callgrind may take to become ready (its V8 compiles the module and "
                         "loads every bundle about 50x slower than natively; more on a busy machine): counts do not depend on it")
    ap.add_argument("--callgrind-from", type=Path, default=None,
                    help="take the instruction counts from this results file (if it counted the same .wasm)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    return ap.parse_args(argv)


if __name__ == "__main__":
    parse_args()
