"""The soak (issue 14, item 5): mixed requests over HTTP/1.1, h2c and mTLS connections while the
authorizer misbehaves (it answers, then denies everything, then answers too late for its
timeout, in turns), against an oracle (harness/traffic.py): no failed request, no misdecision,
nothing denied reaching the server, the filter's VMs never restarted, Envoy's memory flat.

CI runs a short version (MCP_ACCESS_SOAK_REQUESTS, default 4,000); `scripts/soak` runs 100,000.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from harness import (ALPHA, Cluster, EnvoyProcess, Listener, Route, Tls, Wasm, build_bootstrap, free_port,
                     start_authorizer, start_mcp_server)
from harness import bundles as b
from harness.traffic import ALLOWED_TOOL, FLIP_TOOL, Load, Version, client, judge, send
from test_cli_e2e import cli, run_cli  # noqa: F401  (the `cli` fixture)

REQUESTS = int(os.environ.get("MCP_ACCESS_SOAK_REQUESTS", "4000"))
TIMEOUT_MS = 200
# The authorizer's behaviours in turn: (name, /__config changes, whether `flip` is allowed).
PHASES = [("answers", {"deny_all": False, "delay_ms": 0}, True),
          ("denies", {"deny_all": True, "delay_ms": 0}, False),
          ("answers", {"deny_all": False, "delay_ms": 0}, True),
          ("too-late", {"deny_all": False, "delay_ms": 3 * TIMEOUT_MS}, False)]


def bundle(plain: int, mtls: int) -> dict[str, Any]:
    """echo and add allowed to everyone; every call of add is first asked of the authorizer."""
    return b.bundle(
        gateways=[b.gateway({"plain": plain, "mtls": mtls})], backends=[b.backend("tools", "tools")],
        authorizers=[b.authorizer("risk", "risk", TIMEOUT_MS)],
        policies=[b.policy("risk-check", "Gateway", "gw", "ExternalAuth", seniority=1, externalAuth="risk",
                           rules=[b.rule("adds", b.calls(FLIP_TOOL))]),
                  b.policy("tools", "Gateway", "gw", "Allow", seniority=2,
                           rules=[b.rule("two-tools", b.calls(ALLOWED_TOOL, FLIP_TOOL, base=True))])])


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def test_soak(work_dir: Path, wasm_path: Path, pki: Any, cli: Path) -> None:  # noqa: F811
    base = work_dir / "soak"
    with start_mcp_server(base / "logs", name="soak-tools") as server, \
            start_authorizer(base / "logs", name="soak-risk") as authz:
        plain, mtls = free_port(), free_port()
        config = json.dumps(bundle(plain, mtls))
        routes = [Route("tools", "/", "tools")]
        listeners = [Listener("plain", plain, routes, wasm=Wasm(wasm_path, configuration=config)),
                     Listener("mtls", mtls, routes, tls=Tls(pki.server, pki.ca), wasm=Wasm(wasm_path, configuration=config))]
        cfg = build_bootstrap(admin_port=free_port(), listeners=listeners,
                              clusters=[Cluster("tools", port=server.port), Cluster("risk", port=authz.port)])
        with EnvoyProcess(cfg, workdir=base / "envoy", name="envoy-soak") as proxy:
            plain_url, mtls_url = f"http://127.0.0.1:{plain}/mcp", f"https://127.0.0.1:{mtls}/mcp"
            probe = client("http1")
            probes_allowed: list[bool] = []

            def flip_allowed() -> bool:
                s = send(probe, plain_url, "flip", 7, "http1")
                assert s.status is not None, s
                probes_allowed.append(s.status == 200)
                return s.status == 200

            assert flip_allowed()
            loads_at_start = proxy.log_text().count("loaded bundle")
            versions = [Version("answers-0", True, float("-inf"), time.monotonic())]
            cert = pki.client(ALPHA)
            load = Load([("http1", plain_url, {}), ("h2c", plain_url, {}), ("h2c", plain_url, {}),
                         ("mtls", mtls_url, {"ca": pki.ca.cert, "cert": (cert.cert, cert.key)})]).start()
            rss = []
            try:
                turn = 0
                while len(load.results) < REQUESTS:
                    turn += 1
                    name, changes, allowed = PHASES[turn % len(PHASES)]
                    v = Version(f"{name}-{turn}", allowed, time.monotonic())
                    authz.configure(**changes)
                    versions.append(v)
                    while flip_allowed() != allowed:
                        assert time.monotonic() - v.published < 10, f"phase {v.name} not seen after 10 s"
                    v.seen = time.monotonic()
                    time.sleep(0.5)
                    rss.append((len(load.results), rss_kib(proxy._proc.pid)))
            finally:
                results = load.stop()
            authz.configure(deny_all=False, delay_ms=0)

            verdict = judge(results, versions, flip_denials=(403, 503, 504))
            growth = rss[-1][1] - min(kib for n, kib in rss if n >= len(results) // 4) if len(rss) > 2 else 0
            print(f"\nsoak: {verdict['requests']} requests, {turn} authorizer phases: {verdict['counts']}; "
                  f"failed {len(verdict['failed'])}, misdecisions {len(verdict['misdecisions'])}; "
                  f"Envoy RSS {rss[0][1] // 1024} -> {rss[-1][1] // 1024} MiB")
            assert verdict["requests"] >= REQUESTS
            assert not verdict["failed"], verdict["failed"][:5]
            assert not verdict["misdecisions"], verdict["misdecisions"][:5]
            assert {s.proto for s in results} == {"http1", "h2c", "mtls"}
            # Nothing denied reached the server.
            calls = server.tool_calls()
            assert "delete_repo" not in calls
            assert calls.count(ALLOWED_TOOL) == sum(1 for s in results if s.kind == "allowed")
            assert calls.count(FLIP_TOOL) == sum(1 for s in results if s.kind == "flip" and s.status == 200) + sum(probes_allowed)
            # The filter's VMs were never restarted (each logs its bundle load once) and
            # Envoy's memory did not grow after the first quarter.
            log = proxy.log_text()
            assert log.count("loaded bundle") == loads_at_start, "a filter VM was restarted"
            assert "Wasm VM failed" not in log and "panicked" not in log
            assert growth < 16 * 1024, f"Envoy RSS grew by {growth} KiB: {rss}"
            print(f"soak: no denied call reached the server; {loads_at_start} filter VM loads, none after the start; "
                  f"RSS growth after the first quarter {growth} KiB")
            replay_soak_log(cli, base, log, plain, mtls, calls.count(ALLOWED_TOOL))


def replay_soak_log(cli: Path, base: Path, log: str, plain: int, mtls: int, allowed: int) -> None:  # noqa: F811
    """The soak's decision log replayed against a changed policy (the Allow rule drops the allowed
    tool): exactly the recorded allowed calls of that tool flip, as `explain` decides them under the
    changed bundle; the flip tool keeps every recorded decision (the authorizer's recorded denials
    and failures answer as they did)."""
    changed = bundle(plain, mtls)
    changed["policies"][1]["rules"][0]["authorization"]["mcp"]["methods"][0]["params"] = [FLIP_TOOL]
    (base / "changed.json").write_text(json.dumps(changed))
    (base / "soak-envoy.log").write_text(log)
    out = run_cli(cli, "replay", "--bundle", str(base / "changed.json"), str(base / "soak-envoy.log"), "-o", "json")
    assert out.returncode == 6, out.stderr + out.stdout[:2000]
    r = json.loads(out.stdout)
    assert not r["errors"], r["errors"][:5]
    assert {(f["change"], f["call"]) for f in r["flips"]} == {("loses", f"tools/call {ALLOWED_TOOL}")}, r["flips"]
    assert sum(f["count"] for f in r["flips"]) == allowed, (allowed, r["flips"])
    for port, listener in ((plain, "plain"), (mtls, "mtls")):
        for tool, decision in ((ALLOWED_TOOL, "deny"), (FLIP_TOOL, "allow")):
            e = run_cli(cli, "explain", "--bundle", str(base / "changed.json"), "--gateway", "mcp/gw", "--listener",
                        listener, "--backend", "mcp/tools", "--tool", tool, "-o", "json")
            assert json.loads(e.stdout)["decision"] == decision, e.stdout
    print(f"soak: replay of {r['records']} decision records against the changed policy: {allowed} flips, "
          f"as explain decides them")
