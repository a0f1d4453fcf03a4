"""Policy changes under load (issue 14, item 4): `mcp-access envoy --ecds DIR` renders Envoy with
the filter's configuration discovered from DIR/mcp_access.ecds.json, and `mcp-access publish`
replaces that file atomically. While agents send allowed, denied, policy-dependent and hostile
requests over HTTP/1.1, h2c and mTLS, the policy is swapped SWAPS times (default 100; env
MCP_ACCESS_ECDS_SWAPS): no request may fail and every decision must be the one of a policy
version that was serving while the request ran (harness/traffic.py's oracle). A file the filter
cannot load is refused by Envoy (the previous policy keeps serving, Envoy logs it); manifests
with errors are refused by `publish` (nothing written).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from harness import ALPHA, free_port, start_mcp_server
from harness.traffic import FLIP_TOOL, Load, Version, client, expected, judge, send
from harness.manifests import AGENTS_CA, MTLS_LISTENER, gateway, http_listener, tools_topology
from test_cli_e2e import cli  # noqa: F401  (the mcp-access binary fixture)

SWAPS = int(os.environ.get("MCP_ACCESS_ECDS_SWAPS", "100"))

GATEWAY = tools_topology(
    gateway(http_listener("plain", 80) + MTLS_LISTENER, tls=AGENTS_CA),
    "{name: gw, sectionName: plain}, {name: gw, sectionName: mtls}",
)


def policy(tools: list[str]) -> str:
    return f"""\
apiVersion: agentic.networking.x-k8s.io/v1alpha1
kind: XAccessPolicy
metadata: {{name: tools-for-all, namespace: mcp}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, name: gw}}]
  action: Allow
  rules:
  - name: these-tools
    authorization:
      type: Inline
      mcp:
        mcpBaseProtocolMethodsOption: MATCH_BASE_PROTOCOL_METHODS
        methods: [{{name: tools/call, params: [{", ".join(tools)}]}}]
"""


# Two policy versions: both allow echo and deny delete_repo; only A allows add.
VERSION_A, VERSION_B = policy(["echo", FLIP_TOOL]), policy(["echo"])


def ecds_stats(proxy: Any) -> dict[str, Any]:
    return {k.rsplit(".", 1)[1]: v for k, v in proxy.stats("extension_config_discovery.http_filter.mcp_access").items()}


def test_policy_swaps_under_load(cli: Path, wasm_path: Path, work_dir: Path, pki: Any, envoy: Any) -> None:  # noqa: F811
    base = work_dir / "ecds"
    manifests, ecds_dir = base / "manifests", base / "ecds"
    manifests.mkdir(parents=True, exist_ok=True)
    (manifests / "gateway.yaml").write_text(GATEWAY)
    policy_file = manifests / "policy.yaml"
    policy_file.write_text(VERSION_A)

    with start_mcp_server(base / "logs", name="ecds-tools") as server:
        plain, mtls, admin = free_port(), free_port(), free_port()
        common = ["-f", str(manifests), "--wasm", str(wasm_path), "--listen", f"plain={plain}", "--listen", f"mtls={mtls}"]
        r = subprocess.run([str(cli), "envoy", *common, "--strict", "--ecds", str(ecds_dir),
                            "--tls-cert", f"gateway-cert={pki.server.cert},{pki.server.key}",
                            "--client-ca", f"agents-ca={pki.ca.cert}",
                            "--resolve", f"tools-server=127.0.0.1:{server.port}",
                            "--bind", "127.0.0.1", "--admin-port", str(admin), "-o", str(base / "envoy.json")],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        config = json.loads((base / "envoy.json").read_text())
        assert '"config_discovery"' in json.dumps(config) and "StringValue" not in json.dumps(config)
        assert (ecds_dir / "mcp_access.ecds.json").is_file()

        proxy = envoy(config, name="ecds-envoy")
        plain_url, mtls_url = f"http://127.0.0.1:{plain}/mcp", f"https://127.0.0.1:{mtls}/mcp"
        probe = client("http1")
        probes_allowed = []

        def flip_allowed() -> bool:
            s = send(probe, plain_url, "flip", 7, "http1")
            assert (s.status, s.code) in (expected("flip", True), expected("flip", False)), s
            probes_allowed.append(s.status == 200)
            return s.status == 200

        assert flip_allowed()  # version A from the file written by `envoy --ecds`
        versions = [Version("A0", True, float("-inf"), time.monotonic())]
        mtls_kw = {"ca": pki.ca.cert, "cert": (pki.client(ALPHA).cert, pki.client(ALPHA).key)}
        # Each listener subscribes to the file on its own and may take the new version a moment
        # after the other: a version counts as seen once both listeners' probes answer with it.
        mtls_probe = client("mtls", **mtls_kw)

        def serving(allow: bool) -> bool:
            if flip_allowed() != allow:
                return False
            s = send(mtls_probe, mtls_url, "flip", 8, "mtls")
            assert (s.status, s.code) in (expected("flip", True), expected("flip", False)), s
            probes_allowed.append(s.status == 200)
            return (s.status == 200) == allow

        def publish(text: str) -> subprocess.CompletedProcess[str]:
            policy_file.write_text(text)
            return subprocess.run([str(cli), "publish", *common, "--ecds", str(ecds_dir)],
                                  capture_output=True, text=True, timeout=60)

        load = Load([("http1", plain_url, {}), ("h2c", plain_url, {}), ("mtls", mtls_url, mtls_kw),
                     ("h2c", plain_url, {})]).start()
        latencies = []
        try:
            for i in range(SWAPS):
                allow = i % 2 == 1  # B, A, B, ...
                published = time.monotonic()  # the file may be replaced any time after this
                r = publish(VERSION_A if allow else VERSION_B)
                assert r.returncode == 0, r.stderr
                # When publish renamed the file into place (its mtime: written just before).
                replaced = (ecds_dir / "mcp_access.ecds.json").stat().st_mtime - (time.time() - time.monotonic())
                v = Version(f"{'A' if allow else 'B'}{i + 1}", allow, published)
                versions.append(v)
                while not serving(allow):
                    assert time.monotonic() - published < 10, f"swap {i + 1} not applied after 10 s"
                v.seen = time.monotonic()
                latencies.append(v.seen - max(replaced, published))
                time.sleep(0.02)

            # A file the filter cannot load (as a broken publisher might write): Envoy refuses
            # it and the last good version keeps serving.
            before = ecds_stats(proxy)
            doc = json.loads((ecds_dir / "mcp_access.ecds.json").read_text())
            doc["version_info"] = "broken"
            doc["resources"][0]["typed_config"]["config"]["configuration"]["value"] = '{"apiVersion": "mcp-access.io/v1", "policies": [{"name": "x"}]}'
            (ecds_dir / ".broken.tmp").write_text(json.dumps(doc))
            os.rename(ecds_dir / ".broken.tmp", ecds_dir / "mcp_access.ecds.json")
            deadline = time.monotonic() + 10
            while ecds_stats(proxy).get("update_rejected", 0) == before.get("update_rejected", 0):
                assert time.monotonic() < deadline, f"Envoy did not refuse the broken file: {ecds_stats(proxy)}"
                time.sleep(0.05)
            assert ecds_stats(proxy)["version_text"] == before["version_text"]
            time.sleep(0.3)
            assert flip_allowed() == versions[-1].flip_allowed
            assert "Filesystem config update rejected" in proxy.log_text()
            assert "invalid policy bundle" in proxy.log_text()

            # Manifests with errors: publish writes nothing.
            written = (ecds_dir / "mcp_access.ecds.json").read_text()
            r = publish(VERSION_A.replace("action: Allow", "action: Permit"))
            assert r.returncode != 0 and "nothing written" in r.stderr, r.stderr
            assert (ecds_dir / "mcp_access.ecds.json").read_text() == written
            time.sleep(0.2)
        finally:
            results = load.stop()

        verdict = judge(results, versions)
        print(f"\n{SWAPS} swaps, {verdict['requests']} requests: {verdict['counts']}; "
              f"failed {len(verdict['failed'])}, misdecisions {len(verdict['misdecisions'])}")
        print(f"swap latency (file replaced -> first request decided by the new version): "
              f"median {statistics.median(latencies) * 1000:.1f} ms, max {max(latencies) * 1000:.1f} ms")
        assert not verdict["failed"], verdict["failed"][:5]
        assert not verdict["misdecisions"], [(m, [(v.name, v.published, v.seen) for v in versions
                                                  if v.published - 1 < m.t0 < (v.seen or 0) + 1]) for m in verdict["misdecisions"][:3]]
        (base / "swap-latency-ms.json").write_text(json.dumps([round(x * 1000, 2) for x in latencies]))
        per_kind = {k: sum(1 for s in results if s.kind == k) for k in ("allowed", "denied", "flip", "hostile")}
        assert min(per_kind.values()) >= SWAPS, per_kind  # traffic ran throughout
        assert {s.proto for s in results} == {"http1", "h2c", "mtls"}
        # Nothing denied reached the server: it saw echo, and add only when a version allowed it.
        calls = server.tool_calls()
        assert "delete_repo" not in calls
        assert calls.count(FLIP_TOOL) == sum(1 for s in results if s.kind == "flip" and s.status == 200) + sum(probes_allowed)
        assert calls.count("echo") == sum(1 for s in results if s.kind == "allowed")
        assert ecds_stats(proxy)["update_success"] >= SWAPS + 1
