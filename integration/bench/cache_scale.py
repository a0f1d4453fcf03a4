"""Distinct callers through the authorizer cache, in Envoy, at bounded memory (issue 40's scale goal).

One Envoy (one worker) with the P10 setup: an ExternalAuth policy whose answers are cached
(`maxEntries` slots in Envoy's shared data), its authorizer an internal listener answering 200.
wrk sends `--callers` allowed `tools/call`s, each with a key the cache has not seen (its own
path query, which the authorizer is sent and the key therefore holds, as it would a new
caller's identity). Envoy's RSS and the cache's hit and miss counters are sampled as it goes.
Printed, and written as JSON with `--json`.

    cd integration && ../.venv/bin/python -m bench.cache_scale --callers 1000000 --json /tmp/c.json
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import EnvoyProcess, free_port

from bench import configs
from bench.options import ROOT
from bench.run import BODIES
from bench.sse_soak import rss_kib, write_result

SPEC = "ours_authz_cached"

# Each request a key the cache has not seen: the path's query (the authorizer is sent the path, so
# the key holds it, as it would a new caller's identity) and the JSON-RPC id, from a counter; the
# thread stops once `callers` answers came back.
WRK_SCRIPT = """
local body = assert(io.open(os.getenv("BENCH_BODY"), "rb")):read("*a")
local sent = 0
request = function()
  sent = sent + 1
  local b = body:gsub('"id":%s*%d+', '"id":' .. sent, 1)
  return wrk.format("POST", "/mcp?caller=" .. sent, {["content-type"] = "application/json",
    ["accept"] = "application/json, text/event-stream"}, b)
end
"""


STALL_S = 60  # no request counted by the cache for this long: the run failed
HITS, MISSES = "wasmcustom.mcp_access.authz_cache.hits", "wasmcustom.mcp_access.authz_cache.misses"


def counters(env: EnvoyProcess) -> dict[str, int]:
    return {k: int(v) for k, v in env.stats("mcp_access.authz_cache").items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.cache_scale", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--callers", type=int, default=1_000_000)
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--sample-s", type=float, default=10.0)
    ap.add_argument("--wasm", type=Path, default=ROOT / "build" / "mcp_access_filter.wasm")
    ap.add_argument("--reader-wasm", type=Path,
                    default=ROOT / "target" / "wasm32-wasip1" / "wasm-release" / "body_reader.wasm")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    spec = configs.specs()[SPEC]
    port = free_port()
    cfg = configs.bootstrap_many([(spec, port)], admin_port=free_port(), wasm_path=args.wasm.resolve(),
                                 reader_path=args.reader_wasm)
    with tempfile.TemporaryDirectory(prefix="cache-scale-") as tmp, \
            EnvoyProcess(cfg, name="cache-scale", ready_timeout=300) as env:
        body, script = Path(tmp) / "body.json", Path(tmp) / "callers.lua"
        body.write_bytes(BODIES["allow"])
        script.write_text(WRK_SCRIPT)
        pid = env._proc.pid  # noqa: SLF001 - the harness's process
        wrk = subprocess.Popen(["wrk", "-t1", f"-c{args.connections}", "-d24h", "-s", str(script),
                                f"http://127.0.0.1:{port}/mcp"], env={**os.environ, "BENCH_BODY": str(body)},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        samples: list[dict[str, int | float]] = []
        start, seen, moved = time.monotonic(), 0, time.monotonic()
        while seen < args.callers and wrk.poll() is None:
            c = counters(env)
            if c.get(HITS, 0) + c.get(MISSES, 0) > seen:
                moved = time.monotonic()
            elif time.monotonic() - moved > STALL_S:
                break  # requests no longer reach the cache: wrk's output below says why
            seen = c.get(HITS, 0) + c.get(MISSES, 0)
            s = {"t": round(time.monotonic() - start, 1), "rss_kib": rss_kib(pid), **c}
            samples.append(s)
            print(f"{s['t']:7.0f} s  Envoy RSS {s['rss_kib']:,} KiB  {c}", flush=True)
            time.sleep(args.sample_s if args.callers - seen > 20_000 else 0.2)
        wrk.send_signal(signal.SIGINT)  # wrk then prints its summary (non-2xx answers among it)
        out, err = wrk.communicate()
        final = {"seconds": round(time.monotonic() - start, 1), "rss_kib": rss_kib(pid), **counters(env)}
    if seen < args.callers or "Non-2xx" in out or "Requests/sec" not in out:
        print(f"stopped at {seen:,} of {args.callers:,} (wrk {wrk.returncode}), or answers other than 200: "
              f"{out[-2000:]} {err[-2000:]}", file=sys.stderr)
        return 1
    rss = [int(s["rss_kib"]) for s in samples]
    result = {"callers": args.callers, "final": final,
              "rss_first_kib": rss[0] if rss else None, "rss_max_kib": max(rss) if rss else None,
              "rss_last_kib": final["rss_kib"], "samples": samples}
    print(f"{args.callers:,} callers: Envoy RSS {result['rss_first_kib']:,} -> {final['rss_kib']:,} KiB "
          f"(max {result['rss_max_kib']:,}); counters {final}")
    write_result(args.json, result, args.wasm)
    return 0


if __name__ == "__main__":
    sys.exit(main())
