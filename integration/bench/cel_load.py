"""Issue 10: how long the filter takes to load a bundle of 1,000 CEL rules inside Envoy's Wasm VM
(the same bundle as `load/cel1000_bundle` in filter/engine/benches/decide.rs), and of the same
bundle without the CEL conditions, side by side. Prints one JSON line.

    $VENV/bin/python -m bench.cel_load [--wasm build/mcp_access_filter.wasm] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import Cluster, EnvoyProcess, Listener, Route, Wasm, build_bootstrap, free_port
from harness import bundles as b

from bench.run import LOAD_LINE

ROOT = Path(__file__).resolve().parents[2]


def cel1000(port: int, cel: bool = True) -> dict[str, Any]:
    """100 Backend-level Allow policies of 10 KAN-style CEL rules each (decide.rs `cel1000`)."""
    def rule(p: int, r: int) -> dict[str, Any]:
        if not cel:
            return b.rule(f"r{r}")
        return b.rule(f"r{r}", b.cel(
            "request.path.startsWith('/mc') && request.headers['mcp-protocol-version'].contains('2025') && "
            f"request.mcp.tool_name.matches('^get-{p}-{r}-[a-z]+$')"))
    return b.bundle(
        gateways=[b.gateway({"mcp": port}, namespace="bench")],
        backends=[b.backend("tools", "tools", namespace="bench")],
        policies=[b.policy(f"p{p:03}", "Backend", "tools", "Allow", namespace="bench", rules=[rule(p, r) for r in range(10)])
                  for p in range(100)],
        limits={"maxBodyBytes": 2 * 1024 * 1024},
    )


def load_ms(wasm: Path, bundle_of: Any, workdir: Path) -> list[float]:
    port = free_port()
    listener = Listener("mcp", port, [Route("tools", "/", "upstream")],
                        wasm=Wasm(wasm, configuration=json.dumps(bundle_of(port))))
    cfg = build_bootstrap(admin_port=free_port(), listeners=[listener], clusters=[Cluster("upstream", port=free_port())])
    with EnvoyProcess(cfg, workdir=workdir, name="envoy-cel-load", ready_timeout=120) as env:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            loads = [float(m[4]) for m in LOAD_LINE.finditer(env.log_text())]
            if loads:
                return loads
            time.sleep(0.1)
    raise RuntimeError("no bundle load line in Envoy's log")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wasm", type=Path, default=ROOT / "build" / "mcp_access_filter.wasm")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, fn in (("cel1000", cel1000), ("plain1000", lambda port: cel1000(port, cel=False))):
            ms: list[float] = []
            for i in range(args.runs):
                ms += load_ms(args.wasm, fn, Path(tmp) / f"{name}-{i}")
            out[name] = {"vm_load_ms": ms, "max_ms": max(ms)}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
