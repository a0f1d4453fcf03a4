"""The load generators, pinned to their own core: wrk (HTTP/1.1, one thread, keep-alive) for
saturation and one connection; oha at a fixed rate (P11).

wrk sends the next request when the previous answer arrives, so a stall of the server delays the
requests behind it and they are never timed (coordinated omission). P11's latency at 1,000 req/s
needs an open schedule: oha `-q RATE --latency-correction` sends request i at start + i / RATE on
whichever keep-alive connection is free and times it from that scheduled instant, so waiting for
a connection counts (as wrk2 does). h2load's `--rps` does neither: its timer fires at most every
10 ms and sends the requests due in a burst (ten at once at 1,000 req/s), and it times each from
when it was sent."""

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


OHA_VERSION = "1.16.0"  # scripts/bench installs this (cargo install --locked)


def run_oha(
    url: str,
    body_file: Path,
    *,
    rate: int,
    connections: int,
    duration_s: int,
    cpu: int | None,
    timeout_s: int = 10,
) -> WrkResult:
    """`rate` requests/s for `duration_s` seconds on `connections` HTTP/1.1 keep-alive connections,
    each request timed from its scheduled start (oha --latency-correction); answers still in flight
    at the end are waited for."""
    argv = [
        "oha", "--no-tui", "--output-format", "json", "-q", str(rate), "--latency-correction", "-w",
        "-z", f"{duration_s}s", "-c", str(connections), "-t", f"{timeout_s}s", "-m", "POST", "-D", str(body_file),
        "-H", "content-type: application/json", "-H", "accept: application/json, text/event-stream", url,
    ]
    if cpu is not None:
        argv = ["taskset", "-c", str(cpu), *argv]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=duration_s + timeout_s + 30)
    if proc.returncode != 0:
        raise RuntimeError(f"oha failed ({proc.returncode}): {proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    d = json.loads(proc.stdout)
    codes = {int(k): v for k, v in d["statusCodeDistribution"].items()}
    answered = sum(codes.values())
    errors = sum(d["errorDistribution"].values())
    secs = d["summary"]["total"]
    pct = d["latencyPercentiles"]
    ms = lambda x: round((x or 0.0) * 1000, 4)  # noqa: E731  (oha reports seconds; null without answers)
    return WrkResult(
        requests=answered,
        duration_s=round(secs, 3),
        rps=round(answered / secs, 1) if secs > 0 else 0.0,
        p50_ms=ms(pct["p50"]),
        p90_ms=ms(pct["p90"]),
        p99_ms=ms(pct["p99"]),
        max_ms=ms(d["summary"]["slowest"]),
        mean_ms=ms(d["summary"]["average"]),
        errors=errors,
        non_2xx=sum(v for k, v in codes.items() if not 200 <= k < 300),
        connections=connections,
    )
