"""Instructions per request of the whole Envoy process, counted by callgrind.

Wall-clock numbers on a shared 2-core machine drift; instruction counts do not. Each variant's
Envoy is started under `valgrind --tool=callgrind` (V8's JIT output included, hence
--smc-check), warmed up, its counters zeroed, then sent a fixed number of requests with h2load
(HTTP/1.1, 4 connections) and dumped: total instructions / requests. The count covers everything
Envoy did for those requests (codecs, routing, filters, the Wasm VM, the internal upstream and
authorizers), plus a small constant of timers.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from harness import envoy_binary, free_port

from . import configs


def _live(admin: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{admin}/ready", timeout=2) as r:
            return r.read().strip() == b"LIVE"
    except Exception:
        return False


def count(spec_name: str, body: bytes, wasm: Path, workdir: Path, *, requests: int = 400, warmup: int = 200,
          connections: int = 4, ready_timeout: float = 300.0) -> dict[str, Any]:
    spec = configs.specs()[spec_name]
    port, admin = free_port(), free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    cfg_path, body_path = workdir / "envoy.json", workdir / "body.json"
    cfg_path.write_text(json.dumps(configs.bootstrap(spec, port=port, admin_port=admin, wasm_path=wasm)))
    body_path.write_bytes(body)
    out = workdir / "callgrind.out"
    for f in workdir.glob("callgrind.out*"):
        f.unlink()
    argv = [
        "valgrind", "--tool=callgrind", "--smc-check=all-non-file", f"--callgrind-out-file={out}",
        envoy_binary(), "-c", str(cfg_path), "--concurrency", "1", "-l", "warning",
        "--base-id", str(port), "--disable-hot-restart",
    ]
    with open(workdir / "envoy.log", "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + ready_timeout
        while not _live(admin):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Envoy under callgrind did not start ({spec_name}); see {workdir / 'envoy.log'}")
            time.sleep(1)
        req = urllib.request.Request(f"http://127.0.0.1:{admin}/logging?wasm=warning", data=b"", method="POST")
        urllib.request.urlopen(req, timeout=10).read()
        h2load = ["h2load", "--h1", "-c", str(connections), "-d", str(body_path),
                  "-H", "content-type: application/json", "-H", "accept: application/json, text/event-stream",
                  f"http://127.0.0.1:{port}/mcp"]
        subprocess.run(h2load[:1] + ["-n", str(warmup)] + h2load[1:], capture_output=True, check=True, timeout=600)
        subprocess.run(["callgrind_control", "-z", str(proc.pid)], capture_output=True, check=True, timeout=60)
        run = subprocess.run(h2load[:1] + ["-n", str(requests)] + h2load[1:], capture_output=True, text=True,
                             check=True, timeout=600)
        subprocess.run(["callgrind_control", "-d", str(proc.pid)], capture_output=True, check=True, timeout=60)
        dumps: list[Path] = []
        for _ in range(50):
            dumps = [f for f in workdir.glob("callgrind.out.*") if re.search(r"^summary: \d+", f.read_text(), re.M)]
            if dumps:
                break
            time.sleep(0.2)
        total = sum(int(re.search(r"^summary: (\d+)", f.read_text(), re.M)[1]) for f in dumps)
        m = re.search(r"status codes: (\d+) 2xx, \d+ 3xx, (\d+) 4xx, (\d+) 5xx", run.stdout)
        codes = {"2xx": int(m[1]), "4xx": int(m[2]), "5xx": int(m[3])} if m else {}
        return {"instructions_per_request": round(total / requests), "requests": requests, "status": codes}
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for f in workdir.glob("callgrind.out*"):
            f.unlink()
