"""Targets of issue 4 computed from a run, the Markdown table and the SVG chart."""

from __future__ import annotations

import html
import statistics
from typing import Any

MIB = 1024 * 1024


def _per_round(res: dict[str, Any], a: str, b: str, kind: str, field: str) -> list[float]:
    va, vb = res["variants"].get(a), res["variants"].get(b)
    if not va or not vb:
        return []
    out = []
    for ra, rb in zip(va["rounds"], vb["rounds"]):
        x, y = ra.get(kind, {}).get(field), rb.get(kind, {}).get(field)
        if x is not None and y:
            out.append(x / y)
    return out


def _instr(res: dict[str, Any], a: str, b: str) -> list[float]:
    x = res["variants"].get(a, {}).get("envoy_instructions_per_request")
    y = res["variants"].get(b, {}).get("envoy_instructions_per_request")
    return [x / y] if x and y else []


def _target(name: str, scenario: str, values: list[float], op: str, limit: float, unit: str, detail: str,
            primary: bool = True) -> dict[str, Any] | None:
    if not values:
        return None
    measured = statistics.median(values)
    met = measured >= limit if op == ">=" else measured <= limit
    t = {
        "name": name, "scenario": scenario, "measured": round(measured, 3), "op": op, "target": limit,
        "unit": unit, "met": met, "detail": detail, "primary": primary,
    }
    if len(values) > 1:
        t["per_round"] = [round(v, 3) for v in values]
    return t


def targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    r = lambda a, b, kind, field: _per_round(res, a, b, kind, field)  # noqa: E731
    inv = lambda xs: [1 / x for x in xs if x]  # noqa: E731
    ts = [
        _target("S2 throughput / S1, allowed call", "S2", r("s2_allow", "s1_allow", "load", "rps"), ">=", 0.9, "ratio",
                "requests/s at saturation, paired per round"),
        _target("S2 throughput / S1, denied call", "S2", r("s2_deny", "s1_deny", "load", "rps"), ">=", 0.9, "ratio",
                "requests/s at saturation, paired per round"),
        _target("S2 p99 / S1, allowed call", "S2", r("s2_allow", "s1_allow", "load", "p99_ms"), "<=", 1.2, "ratio",
                "p99 latency at saturation"),
        _target("S2 p99 / S1, denied call", "S2", r("s2_deny", "s1_deny", "load", "p99_ms"), "<=", 1.2, "ratio",
                "p99 latency at saturation"),
        _target("S2 p99 / S1 at one connection, allowed call", "S2", r("s2_allow", "s1_allow", "single", "p99_ms"), "<=", 1.2,
                "ratio", "p99 latency of an unloaded Envoy (one connection)", primary=False),
        _target("S3 our callout / native ext_authz, throughput", "S3", r("s3_ours", "s3_native", "load", "rps"), ">=", 0.95,
                "ratio", "one authorizer (direct_response 200), requests/s at saturation"),
        _target("S3 our callout / native ext_authz, p50 with a 5 ms authorizer", "S3",
                r("s3_ours_slow", "s3_native_slow", "single", "p50_ms"), "<=", 1.05, "ratio",
                "one connection; informational", primary=False),
        _target("S4 latency / one authorizer (5 ms authorizers)", "S4", r("s4_ours_slow", "s3_ours_slow", "single", "p50_ms"),
                "<=", 1.3, "ratio", "p50 at one connection; 2 Gateway authorizers in parallel, then the Backend one"),
        _target("S4 p99 / one authorizer (5 ms authorizers)", "S4", r("s4_ours_slow", "s3_ours_slow", "single", "p99_ms"),
                "<=", 1.3, "ratio", "p99 at one connection", primary=False),
        _target("S4 two Gateway authorizers / one (5 ms, parallel)", "S4", r("s4_gw2_slow", "s3_ours_slow", "single", "p50_ms"),
                "<=", 1.3, "ratio", "p50 at one connection: the two Gateway-level calls overlap", primary=False),
        _target("S4 p99 / one authorizer (fast authorizers, saturation)", "S4", r("s4_ours", "s3_ours", "load", "p99_ms"),
                "<=", 1.3, "ratio", "3 callouts instead of 1: CPU per request", primary=False),
        _target("S5 per-request cost / S2, allowed call", "S5",
                r("s5_allow", "s2_allow", "load", "envoy_cpu_us_per_request"), "<=", 1.1, "ratio",
                "Envoy CPU time per request at saturation, paired per round"),
        _target("S5 per-request cost / S2, denied call", "S5",
                r("s5_deny", "s2_deny", "load", "envoy_cpu_us_per_request"), "<=", 1.1, "ratio",
                "Envoy CPU time per request at saturation, paired per round"),
        _target("S5 / S2 time per request, allowed call", "S5", inv(r("s5_allow", "s2_allow", "load", "rps")), "<=", 1.1,
                "ratio", "1 / requests/s at saturation", primary=False),
    ]
    ins = lambda a, b: _instr(res, a, b)  # noqa: E731
    ts += [
        _target("Envoy instructions per request S2 / S1, allowed call", "S2", ins("s2_allow", "s1_allow"), "<=", 1.111,
                "ratio", "callgrind, whole Envoy; <= 1.111 is throughput >= 0.9 at equal IPC", primary=False),
        _target("Envoy instructions per request S2 / S1, denied call", "S2", ins("s2_deny", "s1_deny"), "<=", 1.111,
                "ratio", "callgrind, whole Envoy", primary=False),
        _target("Envoy instructions per request S3 ours / native ext_authz", "S3", ins("s3_ours", "s3_native"), "<=", 1.053,
                "ratio", "callgrind, whole Envoy (authorizer included); <= 1.053 is throughput >= 0.95", primary=False),
        _target("Envoy instructions per request S4 / S3 ours (fast authorizers)", "S4", ins("s4_ours", "s3_ours"), "<=", 1.3,
                "ratio", "callgrind, whole Envoy: the CPU of two more callouts", primary=False),
        _target("Envoy instructions per request S5 / S2, allowed call", "S5", ins("s5_allow", "s2_allow"), "<=", 1.1,
                "ratio", "callgrind, whole Envoy", primary=False),
        _target("Envoy instructions per request S5 / S2, denied call", "S5", ins("s5_deny", "s2_deny"), "<=", 1.1,
                "ratio", "callgrind, whole Envoy", primary=False),
    ]
    loads = res.get("bundle_loads", {}).get("ours_large", {}).get("vm_loads", [])
    if loads:
        ts.append(_target("S5 bundle load time", "S5", [max(l["ms"] for l in loads)], "<=", 100, "ms",
                          f"in Envoy's Wasm VM, slowest of {len(loads)} VMs (main thread + worker)"))
        ts.append(_target("S5 VM memory", "S5", [max(l["vm_memory_kib"] for l in loads) / 1024], "<=", 64, "MiB",
                          "Wasm linear memory after loading (its peak: it never shrinks)"))
    crit = res.get("criterion", {}).get("load/s5_bundle")
    if crit:
        ts.append(_target("S5 bundle load time, native", "S5", [crit["median_ns"] / 1e6], "<=", 100, "ms",
                          "Engine::from_json, criterion median", primary=False))
    # Issue 10: ten CEL rules vs the same conditions inline, and loading 1,000 CEL rules (native).
    cg = res.get("callgrind", {})
    cel, inline = cg.get("request/cel10_allowed"), cg.get("request/inline10_allowed")
    if cel and inline:
        ts.append(_target("10 CEL rules / the same policy inline, instructions per request", "CEL",
                          [cel["instructions"] / inline["instructions"]], "<=", 1.2, "ratio",
                          "callgrind of the whole native request flow; the request is admitted by the 10th rule"))
    crit = res.get("criterion", {}).get("load/cel1000_bundle")
    if crit:
        ts.append(_target("bundle load with 1,000 CEL rules, native", "CEL", [crit["median_ns"] / 1e6], "<=", 100, "ms",
                          "Engine::from_json, criterion median"))
    size = res.get("wasm", {}).get("bytes_after_wasm_opt")
    if size:
        ts.append(_target(".wasm size after wasm-opt", "build", [size / MIB], "<=", 1, "MiB", f"{size:,} bytes"))
    return [t for t in ts if t is not None]


def _fmt(x: float | None, digits: int = 2) -> str:
    if x is None:
        return "–"
    return f"{x:,.{digits}f}"


def markdown(res: dict[str, Any]) -> str:
    m = res["machine"]
    s = res["settings"]
    lines = [
        "# mcp-access benchmark results",
        "",
        f"Run {res['date']} on {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB"
        + (f" ({m['virtualization']} VM)" if m.get("virtualization") else "")
        + f", Linux {m['kernel']}; Envoy {m['envoy']} with `--concurrency 1` pinned to CPU {s['envoy_cpu']}, "
        f"{m['load_generator']} (1 thread) pinned to CPU {s['load_cpu']}. "
        f"{s['rounds']} interleaved rounds; saturating runs {s['duration_s']} s at {s['connections']} connections, "
        f"latency runs {s['latency_duration_s']} s at one connection. Upstream and authorizers: {s['upstream']}."
        + (" **Quick smoke run: numbers are indicative only.**" if s.get("quick") else ""),
        "",
        "## Scenarios",
        "",
        "| scenario | variant | req/s | p50 ms | p99 ms | Envoy CPU µs/req | 1 conn: req/s | p50 ms | p99 ms | Envoy instructions/req |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for key, v in res["variants"].items():
        lines.append(
            f"| {v['scenario']} | {v['what']} | {_fmt(v.get('rps'), 0)} | {_fmt(v.get('p50_ms'), 3)} | "
            f"{_fmt(v.get('p99_ms'), 3)} | {_fmt(v.get('cpu_us_per_request'), 0)} | {_fmt(v.get('single_rps'), 0)} | "
            f"{_fmt(v.get('single_p50_ms'), 3)} | {_fmt(v.get('single_p99_ms'), 3)} | "
            f"{_fmt(v.get('envoy_instructions_per_request'), 0)} |"
        )
    lines += ["", "## Targets", "", "| target | measured | goal | met |", "| --- | ---: | ---: | :---: |"]
    for t in res["targets"]:
        unit = "" if t["unit"] == "ratio" else f" {t['unit']}"
        met = ("yes" if t["met"] else "**no**") if t["primary"] else ("yes" if t["met"] else "no") + " (info)"
        lines.append(f"| {t['name']} ({t['detail']}) | {t['measured']:.3f}{unit} | {t['op']} {t['target']}{unit} | {met} |")
    if res.get("callgrind"):
        lines += ["", "## Native micro-benchmarks", "",
                  "| operation | instructions (callgrind) | median time (criterion) |", "| --- | ---: | ---: |"]
        for op, c in res["callgrind"].items():
            t = res.get("criterion", {}).get(op, {}).get("median_ns")
            time_s = "–" if t is None else (f"{t / 1e6:.2f} ms" if t >= 1e6 else f"{t / 1e3:.2f} µs")
            lines.append(f"| `{op}` | {c['instructions']:,} | {time_s} |")
    if res.get("memory_kib"):
        lines += ["", "## Envoy memory (RSS at the end of the run)", "", "| Envoy | RSS MiB | peak RSS MiB |", "| --- | ---: | ---: |"]
        for name, mem in res["memory_kib"].items():
            lines.append(f"| {name} | {mem.get('VmRSS', 0) / 1024:.1f} | {mem.get('VmHWM', 0) / 1024:.1f} |")
    w = res.get("wasm", {})
    if w.get("bytes_after_wasm_opt"):
        lines += ["", f"Filter size: {w['bytes_after_wasm_opt']:,} bytes after wasm-opt"
                  + (f" ({w['bytes_from_cargo']:,} from cargo)." if w.get("bytes_from_cargo") else ".")]
    if res.get("problems"):
        lines += ["", "## Problems", ""] + [f"- {p}" for p in res["problems"]]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# Chart


COLORS = {"bare": "#8c8c8c", "native": "#3b6fb6", "ours": "#e07b24"}


def _family(v: dict[str, Any]) -> str:
    e = v["envoy"]
    return "bare" if e == "bare" else "native" if e.startswith("native") else "ours"


def chart_svg(res: dict[str, Any]) -> str:
    load = [(k, v) for k, v in res["variants"].items() if v.get("rps") is not None]
    slow = [(k, v) for k, v in res["variants"].items() if v.get("rps") is None]
    label_w, bar_w, row_h, gap = 360, 300, 20, 40
    panels = [
        ("Throughput at saturation (req/s, one Envoy worker)", [(v, [(v["rps"], 1.0)], "{:,.0f}") for _, v in load]),
        ("Latency at saturation: p50 / p99 (ms)", [(v, [(v["p50_ms"], 0.55), (v["p99_ms"], 1.0)], "{:.2f}") for _, v in load]),
        ("Latency at one connection: p50 / p99 (ms)", [(v, [(v["single_p50_ms"], 0.55), (v["single_p99_ms"], 1.0)], "{:.2f}")
                                                      for _, v in load + slow]),
    ]
    counted = [v for v in res["variants"].values() if v.get("envoy_instructions_per_request")]
    if counted:
        panels.append(("Envoy instructions per request (callgrind, thousands)",
                       [(v, [(v["envoy_instructions_per_request"] / 1000, 1.0)], "{:,.0f}k") for v in counted]))
    width = label_w + bar_w * 2 + 40
    y = 50
    out = []
    m = res["machine"]
    title = f"mcp-access vs Envoy native MCP chain — {res['date'][:10]}, {m['cpu']}, Envoy {m['envoy'].split('/')[1] if '/' in m['envoy'] else m['envoy']}"
    out.append(f'<text x="10" y="24" font-size="15" font-weight="bold">{html.escape(title)}</text>')
    lx = 10
    for fam, label in (("bare", "bare Envoy"), ("native", "Envoy's mcp + rbac / ext_authz"), ("ours", "mcp-access (this filter)")):
        out.append(f'<rect x="{lx}" y="32" width="10" height="10" fill="{COLORS[fam]}"/>'
                   f'<text x="{lx + 14}" y="41" font-size="11">{html.escape(label)}</text>')
        lx += 30 + 6.5 * len(label)
    for ptitle, rows in panels:
        y += 12
        out.append(f'<text x="10" y="{y}" font-size="13" font-weight="bold">{html.escape(ptitle)}</text>')
        y += 8
        scale_max = max((val for _, bars, _ in rows for val, _ in bars if val == val), default=1) or 1
        for v, bars, fmt in rows:
            out.append(f'<text x="{label_w - 6}" y="{y + 14}" font-size="11" text-anchor="end">'
                       f'{html.escape(v["scenario"] + "  " + v["what"])}</text>')
            bh = (row_h - 4) / len(bars)
            for i, (val, opacity) in enumerate(bars):
                w = max(1.0, (bar_w * 2) * val / scale_max)
                by = y + 2 + i * bh
                out.append(f'<rect x="{label_w}" y="{by:.1f}" width="{w:.1f}" height="{bh - 1:.1f}" '
                           f'fill="{COLORS[_family(v)]}" fill-opacity="{opacity}"/>')
                out.append(f'<text x="{label_w + w + 4:.1f}" y="{by + bh - 2:.1f}" font-size="9">{fmt.format(val)}</text>')
            y += row_h
        y += gap - 20
    height = y + 10
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="Helvetica, Arial, sans-serif">\n<rect width="100%" height="100%" fill="white"/>\n'
        + "\n".join(out) + "\n</svg>\n"
    )
