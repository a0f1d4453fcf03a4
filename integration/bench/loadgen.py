"""The load generator: wrk (HTTP/1.1, one thread, keep-alive), pinned to its own core."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

WRK_SCRIPT = Path(__file__).resolve().parent / "wrk.lua"


@dataclass
class WrkResult:
    requests: int
    duration_s: float
    rps: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    mean_ms: float
    errors: int  # connect, read, write, timeout
    non_2xx: int
    connections: int

    def to_dict(self) -> dict:
        return asdict(self)


def run_wrk(
    url: str,
    body_file: Path,
    *,
    connections: int,
    duration_s: int,
    cpu: int | None,
    timeout_s: int = 10,
) -> WrkResult:
    argv = [
        "wrk", "-t1", f"-c{connections}", f"-d{duration_s}s", f"--timeout={timeout_s}s",
        "-s", str(WRK_SCRIPT), url,
    ]
    if cpu is not None:
        argv = ["taskset", "-c", str(cpu), *argv]
    env = {**os.environ, "BENCH_BODY": str(body_file)}
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=duration_s + timeout_s + 30)
    line = next((l for l in proc.stdout.splitlines() if l.startswith("BENCH_JSON ")), None)
    if proc.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed ({proc.returncode}): {proc.stdout}\n{proc.stderr}")
    d = json.loads(line.removeprefix("BENCH_JSON "))
    secs = d["duration_us"] / 1e6
    return WrkResult(
        requests=d["requests"],
        duration_s=round(secs, 3),
        rps=round(d["requests"] / secs, 1) if secs > 0 else 0.0,
        p50_ms=d["p50_us"] / 1000,
        p90_ms=d["p90_us"] / 1000,
        p99_ms=d["p99_us"] / 1000,
        max_ms=d["max_us"] / 1000,
        mean_ms=round(d["mean_us"] / 1000, 4),
        errors=d["errors_connect"] + d["errors_read"] + d["errors_write"] + d["errors_timeout"],
        non_2xx=d["non_2xx"],
        connections=connections,
    )
