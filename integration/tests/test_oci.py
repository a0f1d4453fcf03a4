"""The filter as an OCI image, and the ways Istio and Envoy Gateway bring it into Envoy.

A real registry (Debian's docker-registry, distribution v2, plain HTTP on 127.0.0.1) receives both
image variants from scripts/oci-image (which pushes with skopeo). They are read back with
`skopeo inspect --raw` and over the registry API as Istio's and Envoy Gateway's image fetchers read
them, checked (media types, layer count, digests), the module is extracted the way those fetchers
extract it, and Envoy runs the extracted module on live MCP traffic.

Envoy Gateway does not hand Envoy the image: it pulls it, then serves the module over HTTP and
configures `vm_config.code.remote` with the module's sha256. That path is run for real too: Envoy
fetches the module from a local HTTP server, checks the sha256 and enforces; with a wrong sha256
the module is refused and requests fail closed.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import subprocess
import tarfile
import threading
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from harness import (
    ALPHA,
    BETA,
    Cluster,
    Denied,
    EnvoyProcess,
    Listener,
    McpAgent,
    McpServerProc,
    ManagedProcess,
    Pki,
    Route,
    Tls,
    Wasm,
    build_bootstrap,
    free_port,
    post_jsonrpc,
    rpc,
    text_of,
)

StartEnvoy = Callable[..., EnvoyProcess]

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
WASM_CONFIG = "application/vnd.module.wasm.config.v1+json"
WASM_CONTENT = "application/vnd.module.wasm.content.layer.v1+wasm"
REPO = "mcp-access/filter"
TAG = "test"


def need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.fail(f"{tool} is not installed; scripts/test installs it (apt-get install skopeo docker-registry)")
    return path


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------
# A local registry and the pushed images


@dataclass
class Registry:
    port: int

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def get(self, path: str, accept: str | None = None) -> tuple[bytes, dict[str, str]]:
        req = urllib.request.Request(f"http://{self.host}{path}", headers={"accept": accept} if accept else {})
        with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310 - loopback
            return resp.read(), {k.lower(): v for k, v in resp.headers.items()}


@pytest.fixture(scope="module")
def registry(work_dir: Path) -> Iterator[Registry]:
    binary = need("docker-registry")
    port = free_port()
    root = work_dir / "registry"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    config = root / "config.yml"
    # JSON is YAML: the registry's own config format, on loopback only, storage in the work dir.
    config.write_text(json.dumps({
        "version": 0.1,
        "log": {"level": "warn", "accesslog": {"disabled": True}},
        "storage": {"filesystem": {"rootdirectory": str(root / "data")}},
        "http": {"addr": f"127.0.0.1:{port}"},
    }))
    proc = ManagedProcess([binary, "serve", str(config)], name="docker-registry", log_path=root / "registry.log").start()
    reg = Registry(port)
    try:
        proc.wait_ready(lambda: reg.get("/v2/")[0] is not None, timeout=20, what=f"GET /v2/ on {reg.host}")
        yield reg
    finally:
        proc.stop()


@dataclass
class Pushed:
    variant: str
    digest: str  # sha256:<hex> of the manifest
    ref: str  # host/repo:tag


def run_oci_image(repo_root: Path, wasm: Path, out: Path, *args: str) -> str:
    proc = subprocess.run(
        [str(repo_root / "scripts" / "oci-image"), "--wasm", str(wasm), "--out", str(out), *args],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def parse_results(out: str) -> dict[str, tuple[str, str]]:
    """{variant: (digest, where)} from the script's closing lines."""
    found = {}
    for line in out.splitlines():
        parts = line.split(maxsplit=2)
        if len(parts) == 3 and parts[0] in ("compat", "oci") and parts[1].startswith("sha256:"):
            found[parts[0]] = (parts[1], parts[2])
    return found


@pytest.fixture(scope="module")
def pushed(registry: Registry, repo_root: Path, wasm_path: Path, work_dir: Path) -> dict[str, Pushed]:
    need("skopeo")
    ref = f"{registry.host}/{REPO}:{TAG}"
    out = run_oci_image(repo_root, wasm_path, work_dir / "oci", "--push", ref, "--tls-verify", "false")
    results = parse_results(out)
    assert set(results) == {"compat", "oci"}, out
    assert results["compat"][1] == ref and results["oci"][1] == ref + "-oci", out
    return {v: Pushed(v, d, where) for v, (d, where) in results.items()}


def inspect_raw(ref: str) -> bytes:
    proc = subprocess.run(
        [need("skopeo"), "inspect", "--raw", "--tls-verify=false", f"docker://{ref}"],
        capture_output=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout


def fetch_blob(registry: Registry, desc: dict[str, Any]) -> bytes:
    """A blob as an image fetcher gets it, checked against its descriptor."""
    data, _ = registry.get(f"/v2/{REPO}/blobs/{desc['digest']}")
    assert len(data) == desc["size"], desc
    assert "sha256:" + sha256_hex(data) == desc["digest"], desc
    return data


def extract_module(registry: Registry, manifest: dict[str, Any]) -> bytes:
    """What Istio's and Envoy Gateway's fetchers do: a last layer of type tar+gzip is the compat
    variant (the file named plugin.wasm in it); otherwise exactly two layers, one of which is the
    raw module (application/vnd.module.wasm.content.layer.v1+wasm)."""
    layers = manifest["layers"]
    if layers[-1]["mediaType"] == OCI_LAYER:
        with tarfile.open(fileobj=io.BytesIO(gzip.decompress(fetch_blob(registry, layers[-1])))) as tar:
            for member in tar:
                if Path(member.name).name == "plugin.wasm":
                    f = tar.extractfile(member)
                    assert f is not None
                    return f.read()
        raise AssertionError("no plugin.wasm in the compat layer")
    assert len(layers) == 2, layers
    content = [l for l in layers if l["mediaType"] == WASM_CONTENT]
    assert len(content) == 1, layers
    return fetch_blob(registry, content[0])


# ---------------------------------------------------------------------------
# Images


def test_both_variants_are_in_the_registry_as_written(pushed: dict[str, Pushed], registry: Registry) -> None:
    for p in pushed.values():
        raw = inspect_raw(p.ref)
        assert "sha256:" + sha256_hex(raw) == p.digest, f"{p.variant}: the registry holds another manifest"
        # The registry names the same digest, and serves the manifest by digest too.
        body, headers = registry.get(f"/v2/{REPO}/manifests/{p.ref.rsplit(':', 1)[1]}", accept=OCI_MANIFEST)
        assert body == raw and headers["docker-content-digest"] == p.digest
        assert registry.get(f"/v2/{REPO}/manifests/{p.digest}", accept=OCI_MANIFEST)[0] == raw


def test_compat_variant_is_one_tar_gzip_layer_holding_plugin_wasm(
    pushed: dict[str, Pushed], registry: Registry, wasm_path: Path
) -> None:
    manifest = json.loads(inspect_raw(pushed["compat"].ref))
    assert manifest["schemaVersion"] == 2 and manifest["mediaType"] == OCI_MANIFEST
    assert [l["mediaType"] for l in manifest["layers"]] == [OCI_LAYER]
    assert manifest["config"]["mediaType"] == OCI_CONFIG
    config = json.loads(fetch_blob(registry, manifest["config"]))
    assert (config["os"], config["architecture"]) == ("wasip1", "wasm")
    tar_bytes = gzip.decompress(fetch_blob(registry, manifest["layers"][0]))
    assert config["rootfs"] == {"type": "layers", "diff_ids": ["sha256:" + sha256_hex(tar_bytes)]}
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
        assert tar.getnames() == ["plugin.wasm"]
    assert extract_module(registry, manifest) == wasm_path.read_bytes()


def test_oci_variant_is_exactly_two_wasm_layers(pushed: dict[str, Pushed], registry: Registry, wasm_path: Path) -> None:
    manifest = json.loads(inspect_raw(pushed["oci"].ref))
    assert manifest["schemaVersion"] == 2 and manifest["mediaType"] == OCI_MANIFEST
    assert [l["mediaType"] for l in manifest["layers"]] == [WASM_CONFIG, WASM_CONTENT]
    assert manifest["config"]["mediaType"] == WASM_CONFIG
    meta = json.loads(fetch_blob(registry, manifest["layers"][0]))
    assert meta["type"] == "envoy_proxy" and meta["config"]["rootIds"] == ["mcp_access"]
    assert extract_module(registry, manifest) == wasm_path.read_bytes()


def test_images_are_reproducible(repo_root: Path, wasm_path: Path, work_dir: Path, pushed: dict[str, Pushed]) -> None:
    """Built twice (no push), the layouts, the archives and the digests are byte for byte the same,
    and the same digests the registry holds."""
    outs = [work_dir / f"oci-repro-{i}" for i in (1, 2)]
    results = [parse_results(run_oci_image(repo_root, wasm_path, out)) for out in outs]
    assert {v: d for v, (d, _) in results[0].items()} == {v: d for v, (d, _) in results[1].items()}
    assert {v: d for v, (d, _) in results[0].items()} == {v: p.digest for v, p in pushed.items()}
    for variant in ("compat", "oci"):
        a, b = (out / f"mcp-access-{variant}.tar" for out in outs)
        assert a.read_bytes() == b.read_bytes(), variant
    # The oci-archive tarball is a valid image source for skopeo and holds the same manifest.
    proc = subprocess.run(
        [need("skopeo"), "inspect", "--raw", f"oci-archive:{outs[0] / 'mcp-access-compat.tar'}"],
        capture_output=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    assert "sha256:" + sha256_hex(proc.stdout) == pushed["compat"].digest


# ---------------------------------------------------------------------------
# Envoy running what came out of the registry


def small_bundle(port: int) -> dict[str, Any]:
    """Gateway gw: alpha may call echo (and the base protocol); everything else is denied."""
    return {
        "apiVersion": "mcp-access.io/v1",
        "identity": {"trustDomain": "example.org"},
        "gateways": [{"name": "gw", "namespace": "oci", "listeners": [{"name": "mcp", "port": port}]}],
        "backends": [{"name": "tools", "namespace": "oci", "routeNames": ["tools"]}],
        "policies": [{
            "name": "gw-allow", "namespace": "oci", "level": "Gateway", "targets": [{"name": "gw"}],
            "action": "Allow",
            "rules": [{
                "name": "alpha-echo",
                "source": {"type": "SPIFFE", "spiffe": ALPHA},
                "authorization": {"mcp": {"methods": [{"name": "tools/call", "params": ["echo"]}],
                                          "baseProtocol": "Match"}},
            }],
        }],
    }


def mcp_config(pki: Pki, mcp_server: McpServerProc, wasm_file: Path | None, work_dir: Path,
               extra_clusters: list[Cluster] = ()) -> tuple[dict[str, Any], int]:
    port = free_port()
    cfg = build_bootstrap(
        admin_port=free_port(),
        listeners=[Listener(
            "mcp", port, [Route("tools", "/mcp", "upstream", timeout=30)],
            tls=Tls(pki.server, pki.ca),
            wasm=Wasm(wasm_file or "/placeholder.wasm", json.dumps(small_bundle(port))),
        )],
        clusters=[Cluster("upstream", port=mcp_server.port), *extra_clusters],
        access_log_path=work_dir / f"access-oci-{port}.log",
    )
    return cfg, port


def wasm_config_of(cfg: dict[str, Any]) -> dict[str, Any]:
    hcm = cfg["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    wasm = [f for f in hcm["http_filters"] if f["name"] == "envoy.filters.http.wasm"]
    assert len(wasm) == 1
    return wasm[0]["typed_config"]["config"]


def check_enforces(port: int, pki: Pki, mcp_server: McpServerProc) -> None:
    """alpha's echo reaches the MCP server; alpha's add and beta's echo are denied by the filter."""
    url = f"https://127.0.0.1:{port}/mcp"
    mcp_server.reset()
    with McpAgent(url, cert=pki.client(ALPHA), ca=pki.ca) as alpha:
        assert text_of(alpha.call_tool("echo", {"text": "from the image"})) == "from the image"
        with pytest.raises(Denied) as denied:
            alpha.call_tool("add", {"a": 1, "b": 2})
        assert denied.value.status == 403
    beta = post_jsonrpc(url, rpc("tools/call", {"name": "echo", "arguments": {"text": "x"}}),
                        cert=pki.client(BETA), ca=pki.ca)
    assert beta.status == 403, beta
    assert mcp_server.tool_calls() == ["echo"]


@pytest.mark.parametrize("variant", ["compat", "oci"])
def test_envoy_runs_the_module_pulled_from_the_registry(
    variant: str, pushed: dict[str, Pushed], registry: Registry, envoy: StartEnvoy, pki: Pki,
    mcp_server: McpServerProc, work_dir: Path,
) -> None:
    manifest = json.loads(inspect_raw(pushed[variant].ref))
    module = work_dir / f"pulled-{variant}.wasm"
    module.write_bytes(extract_module(registry, manifest))
    cfg, port = mcp_config(pki, mcp_server, module, work_dir)
    envoy(cfg)
    check_enforces(port, pki, mcp_server)


# ---------------------------------------------------------------------------
# The Envoy Gateway path: the module served over HTTP, vm_config.code.remote with its sha256


class ModuleServer:
    """Serves one file at /<sha256>.wasm on 127.0.0.1 (as Envoy Gateway's wasm HTTP server does) and
    records the paths requested."""

    def __init__(self, module: bytes) -> None:
        self.module = module
        self.sha = sha256_hex(module)
        self.requests: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server API
                outer.requests.append(self.path)
                if self.path == f"/{outer.sha}.wasm":
                    self.send_response(200)
                    self.send_header("content-type", "application/wasm")
                    self.send_header("content-length", str(len(outer.module)))
                    self.end_headers()
                    self.wfile.write(outer.module)
                else:
                    self.send_error(404)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "ModuleServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def remote_code(server: ModuleServer, sha256: str) -> dict[str, Any]:
    """What Envoy Gateway puts in vm_config.code (internal/xds/translator/wasm.go), pointed here."""
    return {"remote": {
        "http_uri": {"uri": f"http://127.0.0.1:{server.port}/{server.sha}.wasm", "cluster": "wasm_cluster",
                     "timeout": "10s"},
        "sha256": sha256,
        "retry_policy": {"num_retries": 1, "retry_back_off": {"base_interval": "0.2s", "max_interval": "1s"}},
    }}


def test_envoy_fetches_the_module_over_http_and_checks_its_sha256(
    pushed: dict[str, Pushed], registry: Registry, envoy: StartEnvoy, pki: Pki,
    mcp_server: McpServerProc, work_dir: Path,
) -> None:
    # As Envoy Gateway does: pull the image, take the module out, serve it, configure its sha256.
    module = extract_module(registry, json.loads(inspect_raw(pushed["oci"].ref)))
    with ModuleServer(module) as server:
        cfg, port = mcp_config(pki, mcp_server, None, work_dir,
                               extra_clusters=[Cluster("wasm_cluster", port=server.port)])
        wasm_config_of(cfg)["vm_config"]["code"] = remote_code(server, server.sha)
        proc = envoy(cfg)
        assert server.requests == [f"/{server.sha}.wasm"]
        check_enforces(port, pki, mcp_server)
        assert "mcp-access" in proc.log_text()


def test_envoy_refuses_a_module_whose_sha256_does_not_match(
    registry: Registry, pushed: dict[str, Pushed], envoy: StartEnvoy, pki: Pki,
    mcp_server: McpServerProc, work_dir: Path,
) -> None:
    module = extract_module(registry, json.loads(inspect_raw(pushed["compat"].ref)))
    with ModuleServer(module) as server:
        cfg, port = mcp_config(pki, mcp_server, None, work_dir,
                               extra_clusters=[Cluster("wasm_cluster", port=server.port)])
        wasm_config_of(cfg)["vm_config"]["code"] = remote_code(server, "0" * 64)
        proc = envoy(cfg)
        assert server.requests, "Envoy did not fetch the module"
        mcp_server.reset()
        result = post_jsonrpc(f"https://127.0.0.1:{port}/mcp", rpc("tools/call", {"name": "echo", "arguments": {}}),
                              cert=pki.client(ALPHA), ca=pki.ca)
        # fail_open is false: without a verified module, nothing passes.
        assert result.status == 503, result
        assert mcp_server.requests() == []
        entry = proc.wait_access_log(1)[-1]
        assert entry["details"] == "wasm_fail_stream", entry
        # The same bytes were served as in the test above: only the sha256 differs. Envoy retried
        # (the configured retry) and gave up.
        assert server.requests == [f"/{server.sha}.wasm"] * 2, server.requests
        assert "Plugin configured to fail closed failed to load" in proc.log_text(), proc.log_tail()
