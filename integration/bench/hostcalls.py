"""The Proxy-Wasm host calls of one request, counted from Envoy's own trace of them.

With the `wasm` log at trace, proxy-wasm-cpp-host logs every call from the module into Envoy
(`[vm->host] env.proxy_get_property(...)`) and every call from Envoy into the module (`[host->vm]
proxy_on_memory_allocate(...)`: Envoy asking the module for memory for bytes it returns). One
Envoy with a front listener per variant; each variant warmed up, then one request traced. The
decision's log line (`proxy_log`) is left out: the trace level is what lets it through.

    cd integration && ../.venv/bin/python -m bench.hostcalls --only s2_allow,s7_ours [--wasm W]
"""

from __future__ import annotations

import argparse
import collections
import http.client
import json
import re
import sys
import time
from pathlib import Path

from harness import EnvoyProcess, free_port

from bench import configs
from bench.options import ROOT
from bench.run import BODIES, VARIANTS

CALL = re.compile(r"\[(vm->host|host->vm)\] ([\w.]+)\(")
ALLOCATE = ("proxy_on_memory_allocate", "malloc")


def post(port: int, body: bytes, path: str) -> int:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("POST", path, body, {"content-type": "application/json",
                                   "accept": "application/json, text/event-stream"})
    r = c.getresponse()
    r.read()
    c.close()
    return r.status


def count(only: list[str], wasm: Path, reader: Path, shared: bool = False) -> dict[str, dict[str, int]]:
    by_key = {v.key: v for v in VARIANTS}
    todo = [by_key[k] for k in only]
    specs = configs.specs()
    names = sorted({v.envoy for v in todo})
    ports = {n: free_port() for n in names}
    cfg = configs.bootstrap_many([(specs[n], ports[n]) for n in names], admin_port=free_port(),
                                 wasm_path=wasm, reader_path=reader, shared=shared)
    out: dict[str, dict[str, int]] = {}
    with EnvoyProcess(cfg, name="hostcalls", ready_timeout=300) as env:
        for v in todo:
            for _ in range(3):  # warm-up: VM-wide first-time work is not per request
                post(ports[v.envoy], BODIES[v.body], v.path)
            env.admin_post("/logging?wasm=trace")
            time.sleep(0.3)
            start = env.log_path.stat().st_size
            status = post(ports[v.envoy], BODIES[v.body], v.path)
            time.sleep(0.5)  # the access to the log file is flushed every 50 ms
            env.admin_post("/logging?wasm=warning")
            with open(env.log_path, "rb") as f:
                f.seek(start)
                text = f.read().decode(errors="replace")
            calls = collections.Counter(m[2] for m in CALL.finditer(text) if m[1] == "vm->host")
            # The decision line: written only because the trace level lets debug lines through.
            calls.pop("env.proxy_log", None)
            into = collections.Counter(m[2] for m in CALL.finditer(text) if m[1] == "host->vm")
            allocs = sum(n for name, n in into.items() if name.endswith(ALLOCATE))
            out[v.key] = {"status": status, "host_calls": sum(calls.values()), "returning_bytes": allocs,
                          "calls_into_module": sum(into.values()) - allocs,
                          **{f"call {k}": n for k, n in sorted(calls.items())},
                          **{f"into {k}": n for k, n in sorted(into.items())}}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.hostcalls", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", required=True, help="comma-separated variant keys (bench/run.py VARIANTS)")
    ap.add_argument("--wasm", type=Path, default=ROOT / "build" / "mcp_access_filter.wasm")
    ap.add_argument("--reader-wasm", type=Path,
                    default=ROOT / "target" / "wasm32-wasip1" / "wasm-release" / "body_reader.wasm")
    ap.add_argument("--shared", action="store_true", help="bundles that name no listener (bench/compare.py)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    counts = count(args.only.split(","), args.wasm.resolve(), args.reader_wasm, args.shared)
    for key, c in counts.items():
        print(f"{key}: {c['host_calls']} host calls, {c['returning_bytes']} returning bytes "
              f"(an allocation in the module each), {c['calls_into_module']} other calls into the module")
        for k, n in c.items():
            if k.startswith(("call ", "into ")):
                print(f"    {k[5:]:48} {n}")
    if args.json:
        args.json.write_text(json.dumps(counts, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
