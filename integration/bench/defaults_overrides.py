"""Compile time of defaults and overrides at scale: 100 Gateway AccessPolicies with blocks
(defaults and overrides, atomic and merge, Allow and ExternalAuth) over 1,000 XBackends, each
with its own Backend-level policy, compiled by the release `mcp-access compile`.

    python -m bench.defaults_overrides [--cli target/release/mcp-access] [--runs 5]

Prints the wall and CPU (user + system) time of the whole command (reading YAML, validating,
compiling, applying the blocks, writing the bundle) and writes nothing else. On a shared machine
the CPU time is the figure to compare: wall time includes waiting for a core.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

GATEWAYS = 1
BACKENDS = 1000
BLOCKS = 100


def manifests(per_backend: int = 1, blocks: int = BLOCKS) -> str:
    """The manifests: `per_backend` AccessPolicies on each XBackend (the scale run: 10), `blocks`
    Gateway blocks (their atomic overrides replace the backends' own policies)."""
    docs = [
        """apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: bench}
spec:
  gatewayClassName: mcp-access
  listeners:
  - {name: main, protocol: HTTP, port: 8080}
  - {name: alt, protocol: HTTP, port: 8081}"""
    ]
    for i in range(BACKENDS):
        unset = f"  unset: [d{i % blocks}-r0]" if blocks else ""
        docs.append(
            f"""apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: r{i}, namespace: bench}}
spec:
  parentRefs: [{{name: gw}}]
  hostnames: [b{i}.bench.example]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /mcp}}}}]
    backendRefs: [{{group: agentic.networking.x-k8s.io, kind: XBackend, name: b{i}}}]"""
        )
        docs.append(
            f"""apiVersion: agentic.networking.x-k8s.io/v0alpha0
kind: XBackend
metadata: {{name: b{i}, namespace: bench}}
spec:
  mcp: {{serviceName: s{i}, port: 8000, path: /mcp}}"""
        )
        docs.append(
            f"""apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {{name: own{i}, namespace: bench, creationTimestamp: "2026-02-01T00:00:00Z"}}
spec:
  targetRefs: [{{group: agentic.networking.x-k8s.io, kind: XBackend, name: b{i}}}]
  action: Allow
{unset}
  rules:
  - {{name: r0, authorization: {{type: Inline, mcp: {{methods: [{{name: tools/call, params: [t{i}]}}]}}}}}}
  - {{name: shared, authorization: {{type: Inline, mcp: {{methods: [{{name: tools/list}}]}}}}}}"""
        )
        for j in range(1, per_backend):
            docs.append(
                f"""apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {{name: own{i}-{j}, namespace: bench, creationTimestamp: "2026-02-01T00:00:{j:02d}Z"}}
spec:
  targetRefs: [{{group: agentic.networking.x-k8s.io, kind: XBackend, name: b{i}}}]
  action: Allow
  rules:
  - {{name: r{j}, authorization: {{type: Inline, mcp: {{methods: [{{name: tools/call, params: [t{i}-{j}]}}]}}}}}}"""
            )
    for k in range(blocks):
        block = "defaults" if k % 2 == 0 else "overrides"
        strategy = "merge" if k % 4 < 2 else "atomic"
        section = ", sectionName: alt" if k % 10 == 9 else ""
        if k % 25 == 24:
            body = f"""    action: ExternalAuth
    externalAuth: {{protocol: HTTP, backendRef: {{name: authz{k}, port: 9000}}, http: {{}}}}"""
        else:
            body = f"""    action: Allow
    condition: "size(self.rules) > 1"
    rules:
    - {{name: d{k}-r0, authorization: {{type: Inline, mcp: {{methods: [{{name: tools/call, params: [x{k}]}}]}}}}}}
    - {{name: shared, authorization: {{type: Inline, mcp: {{methods: [{{name: tools/call, params: [y{k}]}}]}}}}}}"""
        docs.append(
            f"""apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {{name: block{k}, namespace: bench, creationTimestamp: "2026-01-01T00:{k // 60:02d}:{k % 60:02d}Z"}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, name: gw{section}}}]
  {block}:
    strategy: {strategy}
{body}"""
        )
    return "\n---\n".join(docs) + "\n"


def command(cli: str, src: Path, out: Path) -> list[str]:
    """The compile command measured (here and by integration/bench/run.py's P8.compile)."""
    return [cli, "compile", "-f", str(src), "-o", str(out), "--max-policies-per-target", "0", "--format", "json"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default="target/release/mcp-access")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--blocks", type=int, default=BLOCKS, help="Gateway defaults/overrides blocks")
    ap.add_argument("--per-backend", type=int, default=1, help="AccessPolicies per XBackend (10: 10,000 policies)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "bench.yaml"
        src.write_text(manifests(args.per_backend, args.blocks))
        out = Path(d) / "bundle.json"
        cmd = command(args.cli, src, out)
        times, cpu, rss = [], [], 0
        for _ in range(args.runs):
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            p = subprocess.run(cmd, capture_output=True, text=True)
            times.append(time.perf_counter() - t0)
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
            rss = max(rss, r1.ru_maxrss)
            if p.returncode != 0:
                raise SystemExit(f"compile failed ({p.returncode}): {p.stderr[-2000:]}")
        size = out.stat().st_size
        print(f"{args.blocks} Gateway blocks x {BACKENDS} XBackends (2 listeners, {BACKENDS * args.per_backend} backend policies): "
              f"wall median {statistics.median(times):.3f} s (min {min(times):.3f} s), "
              f"CPU median {statistics.median(cpu):.3f} s (min {min(cpu):.3f} s) over {args.runs} runs; "
              f"manifests {src.stat().st_size} bytes, bundle {size} bytes, peak RSS {rss} KiB")


if __name__ == "__main__":
    main()
