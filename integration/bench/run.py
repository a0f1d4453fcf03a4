"""The performance harness of issue 4: this filter side by side with bare Envoy and Envoy's
native MCP chain, on one machine, in one run.

    scripts/bench            # full run (~20 minutes), writes integration/bench/results/latest.{json,md}, chart.svg, README table
    scripts/bench --quick    # ~5 minute smoke run once built (prints the tables; writes only with --out DIR)

Envoy runs with one worker (`--concurrency 1`) pinned to one core; wrk runs pinned to the other.
Every configuration gets its own Envoy (started once). Each round runs every variant once, in an
order rotated from round to round; ratios are taken within a round (paired) and their median
reported, so that drift of a shared machine cancels out. Then, because wall-clock numbers on a
shared machine stay noisy, instructions are counted with callgrind: of native operations
(filter/engine/benches/decide.rs) and of whole Envoys per request (envoy_callgrind.py).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime as dt
import hashlib
import http.client
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import EnvoyProcess, envoy_binary, free_port

from bench import bundles, configs, envoy_callgrind, report
from bench.loadgen import OHA_VERSION, WrkResult, run_oha, run_wrk
from bench.options import FIXED_RATE, ROOT, parse_args

RESULTS = Path(__file__).resolve().parent / "results"


# ---------------------------------------------------------------------------------------------
# What is measured


@dataclass(frozen=True)
class Variant:
    key: str
    scenario: str
    what: str
    envoy: str  # configs.specs() name
    body: str  # BODIES key
    status: int  # expected HTTP status
    slow: bool = False  # fixed-delay authorizers: latency at one connection only
    path: str = "/mcp"  # the request path (P7's listings: the upstream answers by path)
    cached: bool = False  # the authorizers' answers are cached: a call may be answered without them


VARIANTS = [
    Variant("s0", "S0", "bare Envoy proxying MCP POSTs", "bare", "allow", 200),
    Variant("s1_allow", "S1", "native mcp + rbac, allowed call", "native", "allow", 200),
    Variant("s1_deny", "S1", "native mcp + rbac, denied call", "native", "deny", 403),
    Variant("s2_allow", "S2", "mcp-access, allowed call", "ours", "allow", 200),
    Variant("s2_deny", "S2", "mcp-access, denied call", "ours", "deny", 403),
    Variant("s2_allow_shared", "S2", "mcp-access, allowed call, one configuration for listeners of different ports "
            "(ECDS, Envoy Gateway, Istio): the port and certificate read per request", "ours_shared", "allow", 200),
    Variant("s2_allow_norcpt", "S2", "mcp-access, allowed call, receipts off (P12)", "ours_norcpt", "allow", 200),
    Variant("s2_allow_rl", "S2", "mcp-access, allowed call, one Local rate limit charged (L1)", "ours_limited", "allow", 200),
    Variant("s3_native", "S3", "native mcp + ext_authz + rbac, one authorizer", "native_authz", "allow", 200),
    Variant("s3_ours", "S3", "mcp-access, one authorizer callout", "ours_authz", "allow", 200),
    Variant("s4_ours", "S4", "mcp-access, 2 Gateway + 1 Backend authorizers", "ours_authz3", "allow", 200),
    Variant("s3_native_slow", "S3", f"native ext_authz, one {configs.SLOW_AUTHZ_MS} ms authorizer", "native_slow", "allow", 200, slow=True),
    Variant("s3_ours_slow", "S3", f"mcp-access, one {configs.SLOW_AUTHZ_MS} ms authorizer", "ours_slow", "allow", 200, slow=True),
    Variant("s4_gw2_slow", "S4", f"mcp-access, 2 Gateway {configs.SLOW_AUTHZ_MS} ms authorizers", "ours_slow_gw2", "allow", 200, slow=True),
    Variant("s4_ours_slow", "S4", f"mcp-access, 2 Gateway + 1 Backend {configs.SLOW_AUTHZ_MS} ms authorizers", "ours_slow3", "allow", 200, slow=True),
    Variant("p10_native", "P10", f"native ext_authz, one {configs.SLOW_AUTHZ_MS} ms authorizer, the same call repeated",
            "native_slow", "allow", 200),
    Variant("p10_ours", "P10", f"mcp-access, one {configs.SLOW_AUTHZ_MS} ms authorizer whose answers are cached, the same call repeated",
            "ours_slow_cached", "allow", 200, cached=True),
    Variant("s5_allow", "S5", "mcp-access, 10,000-tool bundle, allowed call", "ours_large", "s5_allow", 200),
    Variant("s5_deny", "S5", "mcp-access, 10,000-tool bundle, denied call", "ours_large", "s5_deny", 403),
    Variant("s7_native", "S7", "native mcp + ext_authz gRPC + rbac, one gRPC authorizer", "native_grpc", "allow", 200),
    Variant("s7_ours", "S7", "mcp-access, one gRPC authorizer callout", "ours_grpc", "allow", 200),
    Variant("s7_native_slow", "S7", f"native ext_authz gRPC, one {configs.SLOW_AUTHZ_MS} ms authorizer", "native_grpc_slow",
            "allow", 200, slow=True),
    Variant("s7_ours_slow", "S7", f"mcp-access, one {configs.SLOW_AUTHZ_MS} ms gRPC authorizer", "ours_grpc_slow", "allow", 200,
            slow=True),
    Variant("p7_bare_json", "P7", "bare Envoy, 1,000-tool tools/list (JSON)", "bare", "list", 200, path=configs.LIST_JSON_PATH),
    Variant("p7_ours_json", "P7", "mcp-access, 1,000-tool tools/list filtered (JSON)", "ours_list", "list", 200,
            path=configs.LIST_JSON_PATH),
    Variant("p7_bare_sse", "P7", "bare Envoy, 1,000-tool tools/list (SSE)", "bare", "list", 200, path=configs.LIST_SSE_PATH),
    Variant("p7_ours_sse", "P7", "mcp-access, 1,000-tool tools/list filtered (SSE)", "ours_list", "list", 200,
            path=configs.LIST_SSE_PATH),
    Variant("p8_allow", "P8", "mcp-access, 100,000-tool bundle, allowed call (last backend)", "ours_p8", "p8_allow", 200),
    Variant("p8_deny", "P8", "mcp-access, 100,000-tool bundle, denied call", "ours_p8", "p8_deny", 403),
    Variant("s6_bare", "S6", "bare Envoy, 1 MiB tools/call", "bare", "mib", 200),
    Variant("s6_native", "S6", "native mcp + rbac, 1 MiB tools/call", "native", "mib", 200),
    Variant("s6_ours", "S6", "mcp-access, 1 MiB tools/call", "ours", "mib", 200),
    Variant("g_native", "G", "native mcp + rbac + ratelimit (RateLimitService, Redis), allowed call", "native_ratelimit", "allow", 200),
    Variant("g_ours", "G", "mcp-access, one Global rate limit (the same RateLimitService), allowed call", "ours_ratelimit",
            "allow", 200),
    Variant("s6_read", "S6", "a Proxy-Wasm module that only reads the 1 MiB body (P5's floor)", "body_reader", "mib", 200),
]

# P11: these variants are also measured at a fixed rate (FIXED_RATE, bench/options.py).
FIXED = {"s0", "s1_allow", "s2_allow"}

# Variants also counted under callgrind (instructions per request), in two Envoys (one per CPU).
COUNTED = [["s0", "s1_allow", "s1_deny", "s2_allow", "s2_allow_shared", "s2_allow_norcpt", "s2_allow_rl", "s2_deny", "s7_native", "s7_ours", "s6_bare", "s6_ours", "s6_native",
            "s6_read"],
           ["s3_native", "s3_ours", "s4_ours", "s5_allow", "s5_deny", "p7_bare_json", "p7_ours_json", "p7_bare_sse", "p7_ours_sse",
            "p8_allow", "p8_deny", "p10_native", "p10_ours", "g_native", "g_ours"]]
FEW = {"p7_bare_json", "p7_ours_json", "p7_bare_sse", "p7_ours_sse"}  # 244 KB answers: 60 requests, not 300
MIB = {"s6_bare", "s6_ours", "s6_native", "s6_read"}  # 1 MiB requests: 30 (about two minutes more under callgrind)
QUICK_COUNTED: list[list[str]] = []  # --quick counts no Envoy (a minute or two under valgrind)

BODIES = {
    "allow": bundles.tools_call_body(bundles.ALLOWED_TOOL),
    "deny": bundles.tools_call_body(bundles.DENIED_TOOL),
    "s5_allow": bundles.tools_call_body(bundles.S5_ALLOWED_TOOL),
    "s5_deny": bundles.tools_call_body(bundles.S5_DENIED_TOOL),
    "p8_allow": bundles.tools_call_body(bundles.P8_ALLOWED_TOOL),
    "p8_deny": bundles.tools_call_body(bundles.P8_DENIED_TOOL),
    "mib": bundles.mib_body(bundles.ALLOWED_TOOL),
    "list": bundles.tools_list_body(),
}


# ---------------------------------------------------------------------------------------------
# Envoy


class BenchEnvoy(EnvoyProcess):
    """The harness's EnvoyProcess, pinned to one core, logging at warning (wasm at info until
    the bundle-load line is read, then warning: decision lines would cost per request)."""

    def __init__(self, config: dict[str, Any], *, cpu: int | None, **kw: Any) -> None:
        super().__init__(config, **kw)
        self.cpu = cpu

    def argv(self) -> list[str]:
        a = super().argv()
        a[a.index("-l") + 1] = "warning"
        a[a.index("--component-log-level") + 1] = "wasm:info"
        return (["taskset", "-c", str(self.cpu)] if self.cpu is not None else []) + a

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def cpu_seconds(self) -> float:
        """User + system CPU time Envoy has used so far (all its threads)."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_kib(self) -> dict[str, int]:
        out = {}
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0])
        return out


LOAD_LINE = re.compile(
    r"loaded bundle \((\d+) policies, (\d+) listeners, (\d+) backends\) in ([\d.]+) ms, VM memory (\d+) KiB"
)


@dataclass
class Running:
    name: str
    envoy: BenchEnvoy
    port: int
    bundle_bytes: int = 0
    loads: list[dict[str, Any]] = field(default_factory=list)


def start_envoys(names: set[str], wasm: Path, reader: Path, workdir: Path, cpu: int | None) -> dict[str, Running]:
    specs = configs.specs()

    def one(name: str) -> Running:
        spec = specs[name]
        port, admin = free_port(), free_port()
        cfg = configs.bootstrap(spec, port=port, admin_port=admin, wasm_path=wasm, reader_path=reader)
        b = configs.bundle_for(spec, port)
        env = BenchEnvoy(cfg, cpu=cpu, workdir=workdir / name, name=f"envoy-{name}", ready_timeout=120)
        env.start()
        r = Running(name, env, port, bundle_bytes=len(json.dumps(b)) if b else 0)
        if b is not None:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                r.loads = [
                    {"policies": int(m[1]), "listeners": int(m[2]), "backends": int(m[3]), "ms": float(m[4]), "vm_memory_kib": int(m[5])}
                    for m in LOAD_LINE.finditer(env.log_text())
                ]
                if r.loads:
                    break
                time.sleep(0.1)
        env.admin_post("/logging?wasm=warning")
        return r

    # The large bundle's Envoy starts alone, so that its load time is not shared with other
    # Envoys compiling the module on the same CPU.
    large = {n for n in names if (specs[n].bundle or {}).get("kind") in ("s5", "p8")}
    out: dict[str, Running] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        for r in pool.map(one, sorted(names - large)):
            out[r.name] = r
    for n in sorted(large):
        out[n] = one(n)
    return out


def post(port: int, body: bytes, path: str = "/mcp") -> tuple[int, bytes]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request("POST", path, body=body, headers={
            "content-type": "application/json", "accept": "application/json, text/event-stream"})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def authz_requests(env: BenchEnvoy) -> dict[str, int]:
    """Requests each internal authorizer listener answered so far."""
    stats = env.stats("downstream_rq_completed")
    out = {}
    for k, v in stats.items():
        m = re.fullmatch(r"http\.((?:authz|slow|grpc|sgrpc)\d)\.downstream_rq_completed", k)
        if m and isinstance(v, int):
            out[m[1]] = v
    return out


def preflight(v: Variant, r: Running) -> dict[str, Any]:
    """One request, checked: status, body, and that each authorizer was called once."""
    spec = configs.specs()[v.envoy]
    want_authz = (len(spec.authorizers) + len(spec.slow_authorizers) + len(spec.grpc_authorizers)
                  + len(spec.slow_grpc_authorizers))
    before = authz_requests(r.envoy)
    status, body = post(r.port, BODIES[v.body], v.path)
    after = authz_requests(r.envoy)
    problems = []
    if status != v.status:
        problems.append(f"status {status}, expected {v.status}: {body[:200]!r}")
    if v.body == "list":
        problems += listing_problems(v, spec, body)
    elif v.status == 200 and body != configs.UPSTREAM_RESULT.encode():
        problems.append(f"allowed call did not reach the upstream: {body[:200]!r}")
    if v.status == 403:
        if spec.bundle is not None:
            j = json.loads(body)
            if j.get("id") != 1 or j.get("error", {}).get("code") != -32010:
                problems.append(f"unexpected denial body {body[:200]!r}")
        elif b"RBAC: access denied" not in body:
            problems.append(f"unexpected denial body {body[:200]!r}")
    calls = sum(after.get(k, 0) - before.get(k, 0) for k in after)
    if calls != want_authz and not (v.cached and calls == 0):
        problems.append(f"{calls} authorizer calls, expected {want_authz}{' (or none: cached)' if v.cached else ''}")
    if problems:
        raise RuntimeError(f"{v.key} preflight failed: " + "; ".join(problems))
    return {"status": status, "authorizer_calls": calls, "body_bytes": len(BODIES[v.body])}


def listing_problems(v: Variant, spec: configs.EnvoySpec, body: bytes) -> list[str]:
    """Bare Envoy passes the 1,000-tool listing as is; the filter keeps the 400 the caller may call."""
    sse = v.path == configs.LIST_SSE_PATH
    text = body.decode(errors="replace")
    if sse:
        data = [l.removeprefix("data:").strip() for l in text.splitlines() if l.startswith("data:")]
        if len(data) != 1:
            return [f"expected one SSE data line, got {len(data)}: {text[:200]!r}"]
        text = data[0]
    try:
        tools = json.loads(text)["result"]["tools"]
    except (ValueError, KeyError, TypeError):
        return [f"not a tools/list result: {text[:200]!r}"]
    want = bundles.LIST_TOOLS if spec.bundle is None else bundles.LIST_KEPT
    return [] if len(tools) == want else [f"{len(tools)} tools listed, expected {want}"]


def check_run(v: Variant, w: WrkResult, rate: int | None = None) -> list[str]:
    problems = []
    if rate is not None and w.requests and abs(w.rps / rate - 1) > 0.02:
        problems.append(f"{w.rps:.0f} req/s answered at a fixed rate of {rate}: the rate was not held")
    if w.errors:
        problems.append(f"{w.errors} socket errors/timeouts")
    if w.requests == 0:
        problems.append("no requests completed")
    if v.status == 200 and w.non_2xx:
        problems.append(f"{w.non_2xx} non-2xx answers for an allowed call")
    if v.status != 200 and w.non_2xx != w.requests:
        problems.append(f"{w.requests - w.non_2xx} 2xx answers for a denied call")
    return problems


# ---------------------------------------------------------------------------------------------
# Micro-benchmarks (criterion + callgrind)


def bench_executable() -> Path:
    out = subprocess.run(
        ["cargo", "bench", "--locked", "-p", "mcp-access-engine", "--bench", "decide", "--no-run", "--message-format=json"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout
    for line in out.splitlines():
        try:
            m = json.loads(line)
        except json.JSONDecodeError:
            continue
        if m.get("reason") == "compiler-artifact" and m.get("target", {}).get("name") == "decide" and m.get("executable"):
            return Path(m["executable"])
    raise RuntimeError("no bench executable found in cargo output")


# (op, small n, large n): instructions per op = (Ir(large) - Ir(small)) / (large - small)
CALLGRIND_OPS = [
    ("parse/tools_call", 100, 600),
    ("parse/tools_call_1mib", 1, 4),
    ("request/s2_allowed", 100, 600),
    ("request/s2_allowed_limited", 100, 600),  # L1: one Local rate limit charged
    ("phase/s2_headers", 100, 600),
    ("phase/s2_headers_body", 100, 600),
    ("request/s2_denied", 100, 600),
    ("request/s4_three_authorizers", 100, 600),
    ("request/s5_allowed", 100, 600),
    ("request/s5_denied", 100, 600),
    ("request/s6_1mib_allowed", 1, 4),
    ("request/inline10_allowed", 100, 600),
    ("request/cel10_allowed", 100, 600),
    ("request/cel10_unindexed_allowed", 100, 600),
    ("load/s2_bundle", 100, 600),
    ("load/s5_bundle", 1, 2),
    ("load/cel1000_bundle", 1, 3),
]


QUICK_CALLGRIND_OPS = ["request/s2_allowed"]


def callgrind_op(exe: Path, op: str, small: int, large: int) -> dict[str, Any]:
    """Instructions of one native operation: (Ir(large) - Ir(small)) / (large - small)."""

    def collected(n: int) -> int:
        argv = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", str(exe)]
        p = subprocess.run(argv, env={**os.environ, "MCP_ACCESS_COUNT": f"{op}:{n}"}, capture_output=True, text=True)
        m = re.search(r"Collected : (\d+)", p.stderr)
        if p.returncode != 0 or not m:
            raise RuntimeError(f"callgrind {op}:{n} failed: {p.stderr[-2000:]}")
        return int(m[1])

    a, b = collected(small), collected(large)
    return {"instructions": round((b - a) / (large - small)), "runs": [small, large]}


def criterion(exe: Path, cpu: int | None, quick: bool) -> dict[str, dict[str, float]]:
    argv = [str(exe), "--bench"]
    if quick:
        argv += ["--warm-up-time", "0.3", "--measurement-time", "0.5", "request/s2_allowed"]
    if cpu is not None:
        argv = ["taskset", "-c", str(cpu), *argv]
    crit = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "criterion"
    subprocess.run(argv, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env={**os.environ, "CRITERION_HOME": str(crit)})
    out = {}
    for op, _, _ in CALLGRIND_OPS:
        est = crit / op / "new" / "estimates.json"
        if est.exists():
            e = json.loads(est.read_text())
            out[op] = {"median_ns": round(e["median"]["point_estimate"], 1), "mean_ns": round(e["mean"]["point_estimate"], 1)}
    return out


def check_bundle_recipe(exe: Path) -> None:
    """filter/engine/benches/decide.rs builds the S5 bundle itself; it must be ours."""
    for kind, ours in (("s2", bundles.s2(10000)), ("s5", bundles.s5(10000)),
                       ("s4", bundles.with_authorizers(10000, ["authz0", "authz1"], ["authz2"]))):
        theirs = json.loads(subprocess.run([str(exe)], env={**os.environ, "MCP_ACCESS_DUMP": kind},
                                           capture_output=True, text=True, check=True).stdout)
        if theirs != ours:
            raise RuntimeError(f"decide.rs builds a different {kind} bundle than integration/bench/bundles.py")


# ---------------------------------------------------------------------------------------------


TOOLS = {  # tool: (what it is for, how to ask its version, where scripts/bench gets it)
    "wrk": ("load", ["wrk", "--version"], "Debian package wrk"),
    "oha": ("load at a fixed rate (P11)", ["oha", "--version"], f"cargo install --locked oha --version {OHA_VERSION}"),
    "h2load": ("requests counted under callgrind", ["h2load", "--version"], "Debian package nghttp2-client"),
    "valgrind": ("instruction counts", ["valgrind", "--version"], "Debian package valgrind"),
    "callgrind_control": ("zeroing and dumping callgrind's counters", ["callgrind_control", "--version"], "Debian package valgrind"),
    "taskset": ("CPU pinning", ["taskset", "--version"], "Debian package util-linux"),
    "cargo": ("micro-benchmarks", ["cargo", "--version"], "rustup"),
}


def check_tools(need_valgrind: bool, need_oha: bool = True) -> dict[str, str]:
    """Every tool answers before the first round (scripts/bench installs them): a missing tool
    must fail the run in its first second, not after twelve minutes."""
    versions, missing = {}, []
    for tool, (why, argv, pkg) in TOOLS.items():
        if not need_valgrind and tool in ("valgrind", "callgrind_control", "h2load"):
            continue
        if not need_oha and tool == "oha":
            continue
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=30)
            out = (p.stdout or p.stderr).strip().splitlines()
            versions[tool] = out[0] if out else "?"
        except (OSError, subprocess.TimeoutExpired):
            missing.append(f"{tool} ({why}; {pkg})")
    try:
        versions["envoy"] = envoy_callgrind.real_envoy_binary()
    except (OSError, RuntimeError) as e:
        missing.append(f"envoy ({e})")
    if missing:
        raise SystemExit("scripts/bench: missing tools: " + "; ".join(missing))
    return versions


def machine() -> dict[str, Any]:
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem = Path("/proc/meminfo").read_text().splitlines()[0].split()[1]
    envoy = subprocess.run([envoy_binary(), "--version"], capture_output=True, text=True).stdout.strip()
    wrk = subprocess.run(["wrk", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    virt = subprocess.run(["systemd-detect-virt"], capture_output=True, text=True).stdout.strip() if shutil.which("systemd-detect-virt") else ""
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(int(mem) / 1024 / 1024, 1),
        "kernel": platform.release(),
        "virtualization": virt or None,
        "envoy": envoy.split("version:")[-1].strip(),
        "load_generator": wrk.split("Copyright")[0].strip(),
        "fixed_rate_generator": (subprocess.run(["oha", "--version"], capture_output=True, text=True).stdout.strip()
                                 if shutil.which("oha") else None),
        "python": platform.python_version(),
        "load_average_at_start": os.getloadavg()[0],
    }


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def aggregate(v: Variant, rs: list[dict[str, Any]], check: dict[str, Any] | None) -> dict[str, Any]:
    agg: dict[str, Any] = {"scenario": v.scenario, "what": v.what, "envoy": v.envoy, "expected_status": v.status,
                           "path": v.path, "body_bytes": len(BODIES[v.body]), "preflight": check, "rounds": rs}
    loads = [r["load"] for r in rs if "load" in r]
    if loads:
        agg["rps"] = round(median([x["rps"] for x in loads]), 1)
        agg["p50_ms"] = median([x["p50_ms"] for x in loads])
        agg["p99_ms"] = median([x["p99_ms"] for x in loads])
        agg["cpu_us_per_request"] = round(median([x["envoy_cpu_us_per_request"] for x in loads]), 1)
    singles = [r["single"] for r in rs if "single" in r]
    if singles:
        agg["single_rps"] = round(median([x["rps"] for x in singles]), 1)
        agg["single_p50_ms"] = median([x["p50_ms"] for x in singles])
        agg["single_p99_ms"] = median([x["p99_ms"] for x in singles])
        agg["single_cpu_us_per_request"] = round(median([x["envoy_cpu_us_per_request"] for x in singles]), 1)
    fixed = [r["fixed"] for r in rs if "fixed" in r]
    if fixed:
        agg["fixed_rps"] = round(median([x["rps"] for x in fixed]), 1)
        agg["fixed_p50_ms"] = median([x["p50_ms"] for x in fixed])
        agg["fixed_p99_ms"] = median([x["p99_ms"] for x in fixed])
    return agg


# Issue 40's hour-long scale runs are separate tools (bench.cache_scale, bench.sse_soak): each
# writes its result file; the report shows what the newest of each measured, with its date.
SCALE_RUNS = {"cache": "cache-scale.json", "sse": "sse-soak.json"}


def scale_runs(results: Path) -> dict[str, Any]:
    """The summaries (samples left out) of the scale runs' result files that exist."""
    runs: dict[str, Any] = {}
    for key, name in SCALE_RUNS.items():
        try:
            data = json.loads((results / name).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            runs[key] = {k: v for k, v in data.items() if k != "samples"} | {"file": f"bench/results/{name}"}
    return runs


# P8's compile target: the effective policies of 100 Gateway-level defaults/overrides blocks over
# 1,000 XBackends (integration/bench/defaults_overrides.py builds the manifests); and the scale
# run: 10,000 AccessPolicies, ten on each of the 1,000 XBackends, no blocks.
def compile_bench(workdir: Path, runs: int, per_backend: int = 1, blocks: int | None = None) -> dict[str, Any]:
    """Times `mcp-access compile` of integration/bench/defaults_overrides.py's manifests: by
    default 100 Gateway AccessPolicies with defaults and overrides blocks (atomic and merge, Allow
    with a `condition`, ExternalAuth, some on one listener) over 1,000 XBackends on two listeners,
    each with its own Backend-level policy. CPU time of the whole process (user + system; wall
    clock beside it, which on a shared machine includes waiting for a CPU), and its peak RSS."""
    from bench import defaults_overrides as do

    blocks = do.BLOCKS if blocks is None else blocks
    cli = ROOT / "target" / "release" / "mcp-access"
    if not cli.is_file():
        return {"error": f"{cli} not built (scripts/bench builds it)"}
    d = workdir / f"compile-{per_backend}-{blocks}"
    d.mkdir(parents=True, exist_ok=True)
    src = d / "manifests.yaml"
    src.write_text(do.manifests(per_backend, blocks))
    out = d / "bundle.json"
    argv = do.command(str(cli), src, out)
    secs, wall, rss = [], [], []
    for _ in range(runs):
        t = time.monotonic()
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        _, status, ru = os.wait4(p.pid, 0)
        stderr = p.stderr.read() if p.stderr else ""
        wall.append(round(time.monotonic() - t, 4))
        secs.append(round(ru.ru_utime + ru.ru_stime, 4))
        rss.append(ru.ru_maxrss)
        if os.waitstatus_to_exitcode(status) != 0:
            return {"error": f"{' '.join(argv)} failed: {stderr[-1000:]}"}
    instructions = None
    if per_backend == 1 and shutil.which("valgrind"):  # deterministic beside the CPU time, which a loaded machine moves 2x
        p = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv], capture_output=True, text=True)
        m = re.search(r"Collected : (\d+)", p.stderr)
        instructions = int(m[1]) if p.returncode == 0 and m else None
    bundle = json.loads(out.read_text())
    origins = sum(1 for x in bundle.get("policies", []) if x.get("origin"))
    return {"seconds": secs, "wall_seconds": wall, "peak_rss_kib": rss, "instructions": instructions,
            "manifest_bytes": src.stat().st_size, "bundle_bytes": out.stat().st_size,
            "policies": len(bundle.get("policies", [])), "policies_from_blocks": origins,
            "backends": len(bundle.get("backends", [])),
            "what": f"{blocks} Gateway defaults/overrides blocks, {do.BACKENDS} XBackends with {per_backend} AccessPolicies each, "
                    "2 listeners; mcp-access compile (release), CPU time of the process (wall clock beside it)"}


class Saver:
    """Writes what has been measured so far (partial.json) after every step, so a crash late in
    the run keeps the rounds it measured; the final files replace it at the end."""

    def __init__(self, out_dir: Path | None) -> None:
        self.path = out_dir / "partial.json" if out_dir else None

    def save(self, result: dict[str, Any], variants: list[Variant], runs: dict[str, list[dict[str, Any]]],
             checks: dict[str, Any]) -> None:
        result["variants"] = {v.key: aggregate(v, runs[v.key], checks.get(v.key)) for v in variants if runs.get(v.key)}
        for k, x in result.get("envoy_instructions", {}).items():
            if k in result["variants"]:
                result["variants"][k]["envoy_instructions_per_request"] = x
        try:
            result["targets"] = report.targets(result)
        except (KeyError, ValueError, ZeroDivisionError) as e:
            result["targets_error"] = str(e)
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(result, indent=1) + "\n")
            tmp.replace(self.path)

    def done(self) -> None:
        if self.path is not None and self.path.exists():
            self.path.unlink()


class Run:
    """One benchmark run, in the order main() calls its parts: the native micro-benchmarks and
    P8's compile, the timed rounds in Envoy (and re-measuring passes), the instruction counts, the
    result files. Every part saves what it measured (Saver) before the next one starts."""

    def __init__(self, args: argparse.Namespace, tools: dict[str, Any]) -> None:
        self.args = args
        self.t_start = time.monotonic()
        self.rounds = args.rounds or (1 if args.quick else 4)
        self.duration = args.duration or (2 if args.quick else 4)
        self.lat_duration = args.latency_duration or (1 if args.quick else 2)
        self.fixed_duration = args.fixed_duration or (2 if args.quick else 5)
        self.remeasure = args.remeasure if args.remeasure is not None else (0 if args.quick else 2)
        self.warmup = 1 if args.quick else 2
        self.out_dir = args.out or (None if args.quick else RESULTS)
        self.variants = [v for v in VARIANTS if not args.only or v.key in args.only.split(",")]
        self.started = dt.datetime.now(dt.timezone.utc)
        self.workdir = Path(tempfile.mkdtemp(prefix="mcp-access-bench-"))
        self.wasm = self.workdir / "mcp_access_filter.wasm"
        shutil.copy(args.wasm, self.wasm)  # others may rebuild build/ while this runs
        self.reader = self.workdir / "body_reader.wasm"
        shutil.copy(args.reader_wasm, self.reader)
        print(f"work directory {self.workdir}", flush=True)
        self.result: dict[str, Any] = {
            "date": self.started.isoformat(timespec="seconds"),
            "complete": False,
            "machine": machine(),
            "tools": tools,
            "settings": {
                "rounds": self.rounds, "duration_s": self.duration, "latency_duration_s": self.lat_duration,
                "warmup_s": self.warmup, "connections": args.connections, "envoy_cpu": args.envoy_cpu,
                "fixed_rate": FIXED_RATE, "fixed_duration_s": self.fixed_duration, "fixed_connections": args.fixed_connections,
                "load_cpu": args.load_cpu, "envoy_concurrency": 1, "slow_authorizer_ms": configs.SLOW_AUTHZ_MS,
                "quick": args.quick, "remeasure_passes": self.remeasure, "noise_threshold": report.NOISE,
                "upstream": "internal listener of the same Envoy, direct_response",
                "authorizer": "internal listener of the same Envoy, direct_response 200",
            },
        }
        raw_size = args.raw_wasm.stat().st_size if args.raw_wasm.is_file() else None
        self.result["wasm"] = {"bytes_after_wasm_opt": args.wasm.stat().st_size, "bytes_from_cargo": raw_size,
                               "sha256": hashlib.sha256(args.wasm.read_bytes()).hexdigest()}
        self.saver = Saver(self.out_dir)
        self.runs: dict[str, list[dict[str, Any]]] = {v.key: [] for v in self.variants}
        self.checks: dict[str, Any] = {}
        self.problems: list[str] = []
        self.result["problems"] = self.problems
        self.phases: dict[str, float] = {}
        self.result["phases"] = self.phases
        self.envoys: dict[str, Running] = {}
        self.body_files: dict[str, Path] = {}

    def save(self) -> None:
        self.saver.save(self.result, self.variants, self.runs, self.checks)

    # -- native micro-benchmarks and P8's compile -------------------------------------------------

    def micro(self) -> Path | None:
        """criterion of decide.rs (its bench executable, returned for the instruction counts) and
        the compile target."""
        exe = None
        if not self.args.skip_micro:
            t_micro = time.monotonic()
            print("micro-benchmarks: building", flush=True)
            exe = bench_executable()
            check_bundle_recipe(exe)
            if not self.args.skip_criterion:
                print("micro-benchmarks: criterion", flush=True)
                self.result["criterion"] = criterion(exe, self.args.envoy_cpu, self.args.quick)
            self.phases["micro_s"] = round(time.monotonic() - t_micro)
        print("P8: compiling 100 Gateway defaults/overrides blocks x 1,000 backends", flush=True)
        self.result["compile"] = compile_bench(self.workdir, 1 if self.args.quick else 3)
        if "error" in self.result["compile"]:
            self.problems.append("compile: " + self.result["compile"]["error"])
        print("scale: compiling 10,000 AccessPolicies on 1,000 XBackends", flush=True)
        self.result["compile_scale"] = compile_bench(self.workdir, 1 if self.args.quick else 3, per_backend=10, blocks=0)
        if "error" in self.result["compile_scale"]:
            self.problems.append("compile_scale: " + self.result["compile_scale"]["error"])
        self.result["scale_runs"] = scale_runs(RESULTS)
        self.save()
        return exe

    # -- timed rounds in Envoy ---------------------------------------------------------------------

    def timed(self) -> None:
        """Every Envoy started and checked, warmed up, measured in rounds, noisy targets re-measured."""
        try:
            t0 = time.monotonic()
            self.start_envoys()
            self.phases["start_preflight_warmup_s"] = round(time.monotonic() - t0)
            t0 = time.monotonic()
            self.measure_rounds()
            self.phases["rounds_s"] = round(time.monotonic() - t0)
            t0 = time.monotonic()
            self.remeasure_noisy()
            self.phases["remeasure_s"] = round(time.monotonic() - t0)
            self.result["memory_kib"] = {name: r.envoy.rss_kib() for name, r in self.envoys.items()}
        finally:
            for r in self.envoys.values():
                r.envoy.stop()
            self.save()

    def start_envoys(self) -> None:
        print(f"starting {len({v.envoy for v in self.variants})} Envoys", flush=True)
        self.envoys = start_envoys({v.envoy for v in self.variants}, self.wasm, self.reader, self.workdir, self.args.envoy_cpu)
        self.result["bundle_loads"] = {name: {"bundle_bytes": r.bundle_bytes, "vm_loads": r.loads}
                                       for name, r in self.envoys.items() if r.loads}
        for k, b in BODIES.items():
            self.body_files[k] = self.workdir / f"body-{k}.json"
            self.body_files[k].write_bytes(b)
        for v in self.variants:
            self.checks[v.key] = preflight(v, self.envoys[v.envoy])
        print("preflight: every variant answers as expected", flush=True)
        for v in self.variants:
            self.wrk(v, 1 if v.slow else self.args.connections, self.warmup)
        print("warmed up", flush=True)

    def wrk(self, v: Variant, connections: int, secs: int) -> dict[str, Any]:
        r = self.envoys[v.envoy]
        cpu0 = r.envoy.cpu_seconds()
        w = run_wrk(f"http://127.0.0.1:{r.port}{v.path}", self.body_files[v.body], connections=connections,
                    duration_s=secs, cpu=self.args.load_cpu)
        d = w.to_dict()
        d["envoy_cpu_us_per_request"] = round((r.envoy.cpu_seconds() - cpu0) / max(1, w.requests) * 1e6, 1)
        return d

    def fixed(self, v: Variant, secs: int) -> dict[str, Any]:
        """P11: FIXED_RATE requests/s, latency from each request's scheduled start."""
        r = self.envoys[v.envoy]
        cpu0 = r.envoy.cpu_seconds()
        w = run_oha(f"http://127.0.0.1:{r.port}{v.path}", self.body_files[v.body], rate=FIXED_RATE,
                    connections=self.args.fixed_connections, duration_s=secs, cpu=self.args.load_cpu)
        d = w.to_dict()
        d["envoy_cpu_us_per_request"] = round((r.envoy.cpu_seconds() - cpu0) / max(1, w.requests) * 1e6, 1)
        return d

    def measure(self, v: Variant, rnd: int, scale: float = 1.0, label: str = "round") -> None:
        entry: dict[str, Any] = {"round": rnd}
        if scale != 1.0:
            entry["remeasured"] = True
        if not v.slow:
            entry["load"] = self.wrk(v, self.args.connections, max(1, round(self.duration * scale)))
        entry["single"] = self.wrk(v, 1, max(1, round((self.lat_duration * 2 if v.slow else self.lat_duration) * scale)))
        if v.key in FIXED and shutil.which("oha"):
            entry["fixed"] = self.fixed(v, max(1, round(self.fixed_duration * scale)))
        for kind in ("load", "single", "fixed"):
            if kind in entry:
                w = WrkResult(**{k: x for k, x in entry[kind].items() if k != "envoy_cpu_us_per_request"})
                for p in check_run(v, w, FIXED_RATE if kind == "fixed" else None):
                    self.problems.append(f"{v.key} {label} {rnd} {kind}: {p}")
        self.runs[v.key].append(entry)
        summary = entry.get("load", entry["single"])
        fixed = (f"  at {FIXED_RATE}/s: p50 {entry['fixed']['p50_ms']:.3f} ms  p99 {entry['fixed']['p99_ms']:.3f} ms"
                 if "fixed" in entry else "")
        print(f"  {label} {rnd + 1} {v.key:16} {summary['rps']:9.0f} req/s  "
              f"p50 {summary['p50_ms']:.3f} ms  p99 {summary['p99_ms']:.3f} ms  "
              f"{summary['envoy_cpu_us_per_request']:.1f} µs CPU/req{fixed}", flush=True)

    def measure_rounds(self) -> None:
        """Each round runs every variant once, in an order rotated from round to round."""
        variants = self.variants
        for rnd in range(self.rounds):
            shift = (rnd * max(1, len(variants) // self.rounds)) % len(variants)
            for v in variants[shift:] + variants[:shift]:
                self.measure(v, rnd)
            self.save()

    def remeasure_noisy(self) -> None:
        """Noisy wall-clock targets: more paired rounds of their variants, longer, order alternating."""
        by_key = {v.key: v for v in self.variants}
        next_round = self.rounds
        for rpass in range(self.remeasure):
            noisy = [t for t in self.result.get("targets", []) if t.get("noisy")]
            if not noisy or (time.monotonic() - self.t_start) / 60 > self.args.budget_min:
                break
            keys = sorted({k for t in noisy for k in t.get("variants", []) if k in by_key}, key=list(by_key).index)
            print(f"re-measuring pass {rpass + 1}: {', '.join(t['id'] for t in noisy)} ({len(keys)} variants)", flush=True)
            for extra in range(2):
                for v in keys if extra % 2 == 0 else list(reversed(keys)):
                    self.measure(by_key[v], next_round, scale=1.5, label="re-measure")
                next_round += 1
                self.save()

    # -- instruction counts ------------------------------------------------------------------------

    def reuse_counts(self, exe: Path | None) -> Path | None:
        """--callgrind-from: that file's counts if it counted the same .wasm; then nothing is
        counted again (None for the executable)."""
        path = self.args.callgrind_from
        if path is None:
            return exe
        prev = json.loads(path.read_text())
        if prev.get("wasm", {}).get("sha256") != self.result["wasm"]["sha256"]:
            self.problems.append(f"{path} counted another .wasm: instructions counted again")
            return exe
        self.result["callgrind"] = prev.get("callgrind", {})
        self.result["envoy_instructions"] = prev.get("envoy_instructions", {})
        self.result["callgrind_from"] = {"file": str(path), "date": prev.get("date")}
        self.args.skip_envoy_callgrind = True
        return None

    def count_instructions(self, exe: Path | None) -> None:
        """Native operations and whole Envoys under callgrind (deterministic, so both CPUs at once)."""
        exe = self.reuse_counts(exe)
        jobs: list[tuple[str, Any]] = []
        if exe is not None:
            jobs += [("op", (op, small, large)) for op, small, large in CALLGRIND_OPS
                     if not self.args.quick or op in QUICK_CALLGRIND_OPS]
        if not self.args.skip_envoy_callgrind:
            for group in QUICK_COUNTED if self.args.quick else COUNTED:
                todo = [v for v in self.variants if v.key in group]
                if todo:
                    jobs.append(("envoy", todo))
        if not jobs:
            return
        t0 = time.monotonic()
        print(f"callgrind: {len(jobs)} jobs", flush=True)
        counts: dict[str, Any] = {}
        self.result["callgrind"] = counts
        envoy_counts: dict[str, int] = {}

        def job(j: tuple[str, Any]) -> None:
            kind, what = j
            if kind == "op":
                op, small, large = what
                counts[op] = callgrind_op(exe, op, small, large)
                print(f"  {op:32} {counts[op]['instructions']:12,} instructions", flush=True)
                return
            envoy_counts.update(self.count_envoys(what))

        # Envoys first: they take longest.
        jobs.sort(key=lambda j: j[0] != "envoy")
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            futures = [pool.submit(job, j) for j in jobs]
            for f in concurrent.futures.as_completed(futures):
                try:
                    f.result()
                except Exception as e:  # one failed job keeps the others' counts
                    self.problems.append(f"callgrind: {e}")
                self.result["envoy_instructions"] = dict(envoy_counts)
                self.save()
        self.result["callgrind"] = {op: counts[op] for op, _, _ in CALLGRIND_OPS if op in counts}
        self.phases["callgrind_s"] = round(time.monotonic() - t0)

    def count_envoys(self, todo: list[Variant]) -> dict[str, int]:
        """Instructions per request of one group of variants' Envoys."""
        counted = envoy_callgrind.count_many(
            [envoy_callgrind.Counted(v.key, v.envoy, BODIES[v.body], v.path,
                                     60 if v.key in FEW else 30 if v.key in MIB else 0) for v in todo], self.wasm,
            self.workdir / "callgrind" / todo[0].key, requests=300, warmup=100, log=lambda m: print(m, flush=True),
            reader=self.reader, keep=self.args.keep, ready_timeout=self.args.callgrind_start_timeout)
        out = {}
        for v in todo:
            c = counted[v.key]
            want = "2xx" if v.status == 200 else "4xx"
            if c["status"].get(want) != c["requests"]:
                self.problems.append(f"{v.key} under callgrind: answers {c['status']}")
            out[v.key] = c["instructions_per_request"]
        return out

    # -- results -----------------------------------------------------------------------------------

    def finish(self) -> int:
        """The tables printed, the result files written (with --out, or a full run); 1 if any
        problem was seen."""
        self.result["complete"] = True
        self.result["duration_s"] = round((dt.datetime.now(dt.timezone.utc) - self.started).total_seconds())
        self.save()
        print(report.markdown(self.result))
        out_dir = self.out_dir
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / "latest.json").write_text(json.dumps(self.result, indent=1) + "\n")
            report.write_all(self.result, out_dir, ROOT if out_dir == RESULTS else None)
            self.saver.done()
            print(f"wrote {out_dir}/latest.json, latest.md, chart.svg"
                  + (", README's and docs/performance.md's tables" if out_dir == RESULTS else ""))
        if not self.args.keep:
            shutil.rmtree(self.workdir, ignore_errors=True)
        if self.problems:
            print("PROBLEMS:\n  " + "\n  ".join(self.problems), file=sys.stderr)
            return 1
        return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # A --quick smoke run (CI) goes without oha: scripts/bench installs it for full runs only, and
    # the fixed-rate runs are left out without it.
    tools = check_tools(need_valgrind=not (args.skip_micro and args.skip_envoy_callgrind),
                        need_oha=not args.quick or shutil.which("oha") is not None)
    if not args.wasm.is_file():
        print(f"no filter at {args.wasm}: run scripts/build", file=sys.stderr)
        return 2
    if not args.reader_wasm.is_file():
        print(f"no body reader at {args.reader_wasm}: scripts/bench builds it", file=sys.stderr)
        return 2
    run = Run(args, tools)
    exe = run.micro()
    if not args.callgrind_only:
        run.timed()
    run.count_instructions(exe)
    return run.finish()


if __name__ == "__main__":
    sys.exit(main())
