"""Filter modules side by side under callgrind: Envoy instructions per request (worker threads)
of the same variants, one Envoy per module, all counted at once.

    cd integration && ../.venv/bin/python -m bench.compare --module before=A.wasm --module after=B.wasm \\
        --only s2_allow,s7_ours [--shared before]

For a change's saving, measured before and after in one run (counts do not depend on the load).
`--shared LABEL`: that Envoy's bundles name no listener (`envoy.listener`), as one configuration
shared by listeners of different ports, or a module that predates the field, would have them.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import sys
import tempfile
from pathlib import Path

from bench import envoy_callgrind
from bench.options import ROOT
from bench.run import BODIES, FEW, MIB, VARIANTS


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.compare", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--module", action="append", required=True, metavar="LABEL=WASM", help="a module to count (repeat)")
    ap.add_argument("--shared", default="", help="comma-separated labels whose bundles name no listener")
    ap.add_argument("--only", required=True, help="comma-separated variant keys (bench/run.py VARIANTS)")
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--reader-wasm", type=Path,
                    default=ROOT / "target" / "wasm32-wasip1" / "wasm-release" / "body_reader.wasm")
    ap.add_argument("--start-timeout", type=float, default=3600.0, help="seconds each Envoy may take to be ready")
    ap.add_argument("--json", type=Path, default=None, help="also write the counts here")
    args = ap.parse_args(argv)
    modules = dict(m.split("=", 1) for m in args.module)
    shared = {s for s in args.shared.split(",") if s}
    if shared - modules.keys():
        ap.error(f"--shared names no --module: {sorted(shared - modules.keys())}")
    by_key = {v.key: v for v in VARIANTS}
    keys = args.only.split(",")
    if [k for k in keys if k not in by_key]:
        ap.error(f"unknown variants {[k for k in keys if k not in by_key]}")
    todo = [by_key[k] for k in keys]
    counted = [envoy_callgrind.Counted(v.key, v.envoy, BODIES[v.body], v.path,
                                       60 if v.key in FEW else 30 if v.key in MIB else 0) for v in todo]
    with tempfile.TemporaryDirectory(prefix="bench-compare-") as tmp:
        def count(label: str) -> dict:
            return envoy_callgrind.count_many(
                counted, Path(modules[label]).resolve(), Path(tmp) / label, requests=args.requests,
                warmup=args.requests // 3, log=lambda m: print(f"{label}: {m.strip()}", flush=True),
                reader=args.reader_wasm, ready_timeout=args.start_timeout, shared=label in shared)
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(modules)) as pool:
            futures = {label: pool.submit(count, label) for label in modules}
            counts = {label: f.result() for label, f in futures.items()}
    labels = list(modules)
    print(f"{'variant':24}" + "".join(f" {label:>14}" for label in labels) + f" {'last - first':>14}")
    bad = 0
    for v in todo:
        xs = [counts[label][v.key]["instructions_per_request"] for label in labels]
        print(f"{v.key:24}" + "".join(f" {x:14,}" for x in xs) + f" {xs[-1] - xs[0]:+14,}")
        want = "2xx" if v.status == 200 else "4xx"
        for label in labels:
            c = counts[label][v.key]
            if c["status"].get(want) != c["requests"]:
                print(f"  {label}: answers {c['status']}, expected {c['requests']} {want}", file=sys.stderr)
                bad = 1
    if args.json:
        args.json.write_text(json.dumps({label: {"wasm": modules[label], "shared": label in shared, **counts[label]}
                                         for label in labels}, indent=1) + "\n")
    return bad


if __name__ == "__main__":
    sys.exit(main())
