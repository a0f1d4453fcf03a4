"""Receipts (issue 39, docs/audit.md) through real Envoy: two workers, a configuration reload in
the middle, the signing key from Envoy's environment (`host_env_keys`, as `mcp-access envoy`
renders it). `mcp-access audit verify` must verify the access log and Envoy's log, and find a
deleted and an edited line.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from harness import free_port, start_mcp_server
from harness.envoy import EnvoyProcess
from harness.manifests import gateway, http_listener, tools_topology
from harness.traffic import ACCEPT, ALLOWED_TOOL, client, expected, send
from test_cli_e2e import cli  # noqa: F401  (the mcp-access binary fixture)
from test_ecds import VERSION_A, VERSION_B

GATEWAY = tools_topology(gateway(http_listener("plain", 80)), "{name: gw, sectionName: plain}")

SETTINGS = """\
apiVersion: mcp-access.io/v1alpha1
kind: FilterSettings
metadata: {name: settings}
spec:
  decisionRecords:
    arguments: true
    receipts: {checkpointRecords: 7, checkpointSeconds: 1}
"""


def verify(cli: Path, *args: str) -> subprocess.CompletedProcess[str]:  # noqa: F811
    return subprocess.run([str(cli), "audit", "verify", *args], capture_output=True, text=True, timeout=60)


def test_two_workers_and_a_reload_verify(cli: Path, wasm_path: Path, work_dir: Path,  # noqa: F811
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    base = work_dir / "receipts"
    manifests, ecds_dir = base / "manifests", base / "ecds"
    manifests.mkdir(parents=True, exist_ok=True)
    (manifests / "gateway.yaml").write_text(GATEWAY)
    (manifests / "settings.yaml").write_text(SETTINGS)
    policy = manifests / "policy.yaml"
    policy.write_text(VERSION_A)
    key = base / "receipts.key"
    r = subprocess.run([str(cli), "audit", "keygen", str(key)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert key.stat().st_mode & 0o077 == 0
    # Envoy's environment holds the key; the rendered configuration only names the variable.
    monkeypatch.setenv("MCP_ACCESS_RECEIPT_KEY", key.read_text().strip())

    with start_mcp_server(base / "logs", name="receipts-tools") as server:
        plain, admin = free_port(), free_port()
        access_log = base / "access.log"
        common = ["-f", str(manifests), "--wasm", str(wasm_path), "--listen", f"plain={plain}"]
        r = subprocess.run([str(cli), "envoy", *common, "--ecds", str(ecds_dir),
                            "--resolve", f"tools-server=127.0.0.1:{server.port}", "--access-log", str(access_log),
                            "--bind", "127.0.0.1", "--admin-port", str(admin), "-o", str(base / "envoy.json")],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        rendered = (base / "envoy.json").read_text() + (ecds_dir / "mcp_access.ecds.json").read_text()
        assert '"host_env_keys"' in rendered and key.read_text().strip() not in rendered
        config = json.loads((base / "envoy.json").read_text())

        def compiled(name: str) -> Path:
            """The bundle the filter runs with, as `mcp-access compile` writes it."""
            r = subprocess.run([str(cli), "compile", "-f", str(manifests), "--listen", f"plain={plain}",
                                "-o", str(base / name)], capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, r.stderr
            return base / name

        bundle_a = compiled("bundle-a.json")
        url = f"http://127.0.0.1:{plain}/mcp"
        proxy = EnvoyProcess(config, workdir=base / "envoy", name="receipts-envoy", concurrency=2).start()
        try:
            sent = 0

            def burst(n: int, flip_allowed: bool) -> None:
                nonlocal sent
                for i in range(n):
                    kind = ("allowed", "denied", "flip")[i % 3]
                    with client("http1") as c:  # a new connection each: both workers get some
                        s = send(c, url, kind, i, "http1")
                    assert (s.status, s.code) == expected(kind, flip_allowed), s
                    sent += 1

            burst(30, True)
            # Records that are not canonical JSON as written (a fraction serde_json writes as
            # `1.0`, names JCS sorts by UTF-16): their digests are of their canonical form.
            for i, args in enumerate(({"text": "x", "n": 1.0, "m": 1e21},
                                      {"text": "x", "\U0001f600": 1, "\ue000": 2})):
                body = json.dumps({"jsonrpc": "2.0", "id": 500 + i, "method": "tools/call",
                                   "params": {"name": ALLOWED_TOOL, "arguments": args}}, ensure_ascii=False)
                with client("http1") as c:
                    c.post(url, content=body.encode(), headers={"content-type": "application/json",
                                                               "accept": ACCEPT})
                sent += 1
            # The configuration changes mid-run: each VM checkpoints its chain and starts a new one.
            policy.write_text(VERSION_B)
            bundle_b = compiled("bundle-b.json")
            r = subprocess.run([str(cli), "publish", *common, "--ecds", str(ecds_dir)],
                               capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, r.stderr
            deadline = time.monotonic() + 10
            while True:
                with client("http1") as c:
                    s = send(c, url, "flip", 99, "http1")
                sent += 1
                if s.status == 403:
                    break
                assert time.monotonic() < deadline, "version B not applied"
                time.sleep(0.05)
            burst(30, False)
            # Each worker's gauge says its checkpoints are signed.
            assert proxy.stats("mcp_access.receipts").get("wasmcustom.mcp_access.receipts.signed") == 1
            time.sleep(2.5)  # a tick checkpoints each chain's last records (checkpointSeconds 1)
            proxy.wait_access_log(sent, timeout=10)
        finally:
            proxy.stop()

    envoy_log = proxy.log_path
    log_text = envoy_log.read_text()
    assert "checkpoints are signed with key" in log_text
    r = verify(cli, str(access_log), str(envoy_log), "--public-key", f"{key}.pub", "-o", "json",
               "--bundle", str(bundle_a), "--bundle", str(bundle_b))
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    chains = report["chains"]
    # Each chain names the bundle it began with: both versions ran.
    files = {c["configuration"]["file"] for c in chains}
    assert files == {str(bundle_a), str(bundle_b)}, chains
    r = verify(cli, str(access_log), "--public-key", f"{key}.pub", "--bundle", str(bundle_a))
    assert r.returncode == 8 and "UNKNOWN CONFIGURATION" in r.stdout, r.stdout
    assert sum(c["records"] for c in chains) == sent
    assert all(c["gaps"] == [] and c["altered"] == [] and c["unsignedTail"] is None for c in chains), chains
    # The records that were not canonical as written are among those verified.
    assert '\\"n\\":1.0' in access_log.read_text()
    # Two workers, each with a chain before and after the reload.
    assert len(chains) >= 3, chains
    assert all(c["firstSeq"] == 1 for c in chains)

    # A deleted line and an edited field are found.
    lines = access_log.read_text().splitlines()
    deleted = base / "deleted.log"
    deleted.write_text("\n".join(lines[:5] + lines[6:]) + "\n")
    # (Alone: Envoy's log holds every decision too, at wasm:debug, and would fill the gap.)
    r = verify(cli, str(deleted), "--public-key", f"{key}.pub")
    assert r.returncode == 8 and "MISSING seq" in r.stdout, r.stdout
    edited_lines = list(lines)
    i = next(i for i, l in enumerate(lines) if '\\"decision\\":\\"deny\\"' in l)
    edited_lines[i] = lines[i].replace('\\"decision\\":\\"deny\\"', '\\"decision\\":\\"allow\\"')
    edited = base / "edited.log"
    edited.write_text("\n".join(edited_lines) + "\n")
    # Beside Envoy's log (its copy of the record and the checkpoints), the field is named.
    r = verify(cli, str(edited), str(envoy_log), "--public-key", f"{key}.pub")
    assert r.returncode == 8 and "`decision`" in r.stdout, r.stdout
    # replay --verified leaves out the edited record and those no checkpoint reaches past it.
    checkpoints = base / "checkpoints.log"
    checkpoints.write_text("".join(l + "\n" for l in log_text.splitlines() if "mcp-access checkpoint " in l))
    r = subprocess.run([str(cli), "replay", "-f", str(manifests), "--allow-flips", "--verified",
                        "--public-key", f"{key}.pub", "-o", "json", str(edited), str(checkpoints)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert 0 < json.loads(r.stdout)["records"] < sent, r.stdout
    r = subprocess.run([str(cli), "replay", "-f", str(manifests), "--allow-flips", "--verified",
                        "--public-key", f"{key}.pub", "-o", "json", str(access_log), str(checkpoints)],
                       capture_output=True, text=True, timeout=60)
    assert json.loads(r.stdout)["records"] == sent, r.stdout + r.stderr




class OtlpReceiver:
    """A real OTLP/gRPC logs receiver (opentelemetry-proto's LogsService messages, grpcio):
    keeps every log record it is sent."""

    def __init__(self) -> None:
        import grpc
        from concurrent import futures
        from opentelemetry.proto.collector.logs.v1 import logs_service_pb2 as svc

        self.records: list[Any] = []

        def export(request: Any, _context: Any) -> Any:
            for rl in request.resource_logs:
                # `scope_logs` (field 2) is `instrumentation_library_logs` in older proto packages.
                for sl in getattr(rl, "scope_logs", None) or rl.instrumentation_library_logs:
                    self.records.extend(getattr(sl, "log_records", None) or sl.logs)
            return svc.ExportLogsServiceResponse()

        handler = grpc.method_handlers_generic_handler("opentelemetry.proto.collector.logs.v1.LogsService", {
            "Export": grpc.unary_unary_rpc_method_handler(
                export, request_deserializer=svc.ExportLogsServiceRequest.FromString,
                response_serializer=svc.ExportLogsServiceResponse.SerializeToString)})
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self.server.add_generic_rpc_handlers((handler,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def stop(self) -> None:
        self.server.stop(grace=None)


def test_records_reach_an_otlp_collector(cli: Path, wasm_path: Path, work_dir: Path) -> None:  # noqa: F811
    base = work_dir / "receipts-otlp"
    manifests = base / "manifests"
    manifests.mkdir(parents=True, exist_ok=True)
    (manifests / "gateway.yaml").write_text(GATEWAY)
    (manifests / "policy.yaml").write_text(VERSION_A)
    receiver = OtlpReceiver()
    try:
        with start_mcp_server(base / "logs", name="receipts-otlp-tools") as server:
            plain, admin = free_port(), free_port()
            access_log = base / "access.log"
            r = subprocess.run([str(cli), "envoy", "-f", str(manifests), "--wasm", str(wasm_path),
                                "--listen", f"plain={plain}", "--resolve", f"tools-server=127.0.0.1:{server.port}",
                                "--access-log", str(access_log), "--otlp", f"127.0.0.1:{receiver.port}",
                                "--bind", "127.0.0.1", "--admin-port", str(admin), "-o", str(base / "envoy.json")],
                               capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stderr
            config = json.loads((base / "envoy.json").read_text())
            url = f"http://127.0.0.1:{plain}/mcp"
            with EnvoyProcess(config, workdir=base / "envoy", name="otlp-envoy") as proxy:
                with client("http1") as c:
                    for i in range(6):
                        kind = ("allowed", "denied")[i % 2]
                        s = send(c, url, kind, i, "http1")
                        assert (s.status, s.code) == expected(kind, True), s
                entries = proxy.wait_access_log(6, timeout=10)
                deadline = time.monotonic() + 10
                while len(receiver.records) < 6:
                    assert time.monotonic() < deadline, f"{len(receiver.records)} OTLP records"
                    time.sleep(0.1)
    finally:
        receiver.stop()
    bodies = [r.body.string_value for r in receiver.records]
    # The body is the record exactly as the access log holds it (the bytes the receipts hash).
    assert bodies == [e["filter_state"] for e in entries]
    # Each field of each record is an attribute of its own (the record's objects split one level:
    # `mcp_access.request.host`), read by Envoy's CEL formatter from the record as a Struct.
    # Envoy's OTLP formatter writes every attribute as a string: numbers in their JSON text,
    # arrays and deeper objects as JSON, `-` for a field the record leaves null or out.
    for shipped_record, entry in zip(receiver.records, entries):
        record = json.loads(entry["filter_state"])
        kinds = {kv.value.WhichOneof("value") for kv in shipped_record.attributes}
        assert kinds == {"string_value"}, kinds
        attrs = {kv.key: kv.value.string_value for kv in shipped_record.attributes}
        assert len(attrs) == len(shipped_record.attributes), "a key repeats"
        assert attrs["mcp_access.envoy_listener"] == entry["listener"], attrs
        fields = {k.removeprefix("mcp_access."): v for k, v in attrs.items()
                  if k.startswith("mcp_access.") and k != "mcp_access.envoy_listener"}
        assert {"decision", "policy", "chain", "seq", "prev", "request.host", "request.headers"} <= fields.keys()
        for name, text in fields.items():
            top, _, inner = name.partition(".")
            value = record.get(top)
            if inner:
                value = value.get(inner) if isinstance(value, dict) else None
            if value is None:
                assert text == "-", (name, text, record)
            elif isinstance(value, bool):
                assert text == str(value).lower(), (name, text)
            elif isinstance(value, str):
                assert text == value, (name, text)
            else:
                assert json.loads(text) == value, (name, text, value)
        assert fields["decision"] == record["decision"] and fields["seq"] == str(record["seq"])
    denied = {kv.key: kv.value.string_value for kv in receiver.records[1].attributes}
    assert denied["mcp_access.decision"] == "deny" and denied["http.response.status_code"] == "403", denied
    assert denied["mcp_access.request.port"] == str(json.loads(bodies[1])["request"]["port"]), denied
    shipped = base / "otlp.jsonl"
    shipped.write_text("".join(json.dumps({"filter_state": b}) + "\n" for b in bodies))
    r = verify(cli, str(shipped), "--unsigned")
    assert r.returncode == 0 and "chains intact" in r.stdout, r.stdout
