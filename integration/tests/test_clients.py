"""MCP clients nobody here wrote, through the demo's topology: what each one reports.

The clients: the official Python SDK (`mcp`), the official TypeScript SDK
(`@modelcontextprotocol/sdk`), the Rust SDK `rmcp` (small programs in integration/clients/ that
print what the SDK reported, as JSON lines) and the MCP Inspector's CLI mode, as a user runs it.
npm packages are pinned by integration/clients/node/package-lock.json; scripts/setup installs
them and builds the rmcp program (nothing is downloaded here).

The topology is the demo's: envoy-demo/manifests rendered by `mcp-access envoy` as
envoy-demo/demo.py renders them (the demo's token issuer and JWKS, its MCP server "demo-tools", its
authorizer "risk-check", which denies the tool `add` with a `WWW-Authenticate` challenge), driven
on the plain-HTTP listener where agents alpha and beta present bearer JWTs. Alpha may call any
tool at the Gateway, beta only get_weather; the Backend allows echo, add and get_weather and asks
risk-check about every tool call. Each client connects (2025-11-25 initialize; 2026-07-28 where the
SDK speaks it), lists tools, and calls an allowed tool and three denied ones (Gateway policy,
Backend policy, authorizer); tokens that jwt_authn refuses, bodies over the limit and paths the
filter rejects show what a transport rejection looks like. docs/clients.md is written from these
measurements.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness import EnvoyProcess, JwtKeys, Pki, demo, free_port, start_authorizer, start_mcp_server
from test_cli_e2e import cli  # noqa: F401  (a fixture: the mcp-access binary)

REPO = Path(__file__).resolve().parents[2]
CLIENTS = REPO / "integration" / "clients"
NODE_DIR = CLIENTS / "node"
RMCP_DIR = CLIENTS / "rmcp-client"
# What the demo authorizer answers a denial with: an RFC 6750 challenge, as the MCP authorization
# spec asks of a 403 for a token that lacks a permission.
CHALLENGE = demo.AUTHZ_CHALLENGE
AUTHZ_BODY = {"denied_by": "risk-check"}


# ---------------------------------------------------------------------------
# The clients


def node_modules() -> Path:
    path = NODE_DIR / "node_modules"
    if not (path / "@modelcontextprotocol" / "sdk").is_dir():
        pytest.fail(f"{path} has no @modelcontextprotocol/sdk: run scripts/setup (npm ci there)")
    return path


def rmcp_binary() -> Path:
    target = Path(os.environ.get("MCP_ACCESS_RMCP_TARGET") or RMCP_DIR / "target")
    path = target / "debug" / "mcp-access-rmcp-client"
    if not path.is_file():
        pytest.fail(f"{path} is missing: run scripts/setup (it builds integration/clients/rmcp-client)")
    return path


SDKS = ("python", "typescript", "rmcp")


def sdk_argv(sdk: str) -> list[str]:
    if sdk == "python":
        return [sys.executable, str(CLIENTS / "python_sdk_client.py")]
    if sdk == "typescript":
        node_modules()
        return ["node", str(NODE_DIR / "ts-sdk-client.mjs")]
    return [str(rmcp_binary())]


def run_sdk(sdk: str, url: str, *ops: str, token: str | None = None, protocol: str = "2025-11-25") -> dict[str, Any]:
    """Runs one SDK client program; its reports by operation ("connect", "list", "call:...")."""
    argv = [*sdk_argv(sdk), url, *ops]
    if token is not None:
        argv += ["--token", token]
    if protocol != "2025-11-25":
        if sdk == "typescript":
            raise ValueError("the TypeScript SDK speaks no 2026-07-28")
        argv += ["--protocol", protocol]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=90, cwd=REPO)
    assert proc.returncode == 0, f"{sdk} client failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    reports: dict[str, Any] = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            reports[r["op"]] = r
    assert "connect" in reports, f"{sdk}: no report\n{proc.stdout}\n{proc.stderr}"
    return reports


@dataclass
class Inspected:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def inspector(url: str, method: str, *args: str, token: str | None = None) -> Inspected:
    """The MCP Inspector in CLI mode, as its README shows it: `mcp-inspector --cli URL --transport
    http --method METHOD [--header 'Authorization: Bearer ...'] ...`."""
    argv = ["node", str(node_modules() / ".bin" / "mcp-inspector"), "--cli", url, "--transport", "http",
            "--method", method, *args]
    if token is not None:
        argv += ["--header", f"Authorization: Bearer {token}"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=90, cwd=REPO,
                          env={**os.environ, "NO_COLOR": "1"})
    return Inspected(proc.returncode, proc.stdout, proc.stderr)


# ---------------------------------------------------------------------------
# The demo topology: envoy-demo/manifests rendered by the CLI as envoy-demo/demo.py renders them


@dataclass
class Demo:
    url: str  # the bearer-JWT listener's MCP endpoint
    keys: JwtKeys
    envoy: EnvoyProcess

    def token(self, agent: str) -> str:
        return self.keys.mint({}, sub=agent, ttl=3600)


def adjusted(cfg: dict[str, Any], *, deny: dict[str, Any] | None, max_body: int | None,
             normalize: bool) -> dict[str, Any]:
    """The rendered Envoy configuration with the bundle's denyResponse / limits set (the CLI has no
    flags for them) and, with normalize=False, without Envoy's own path normalization (so that
    the filter is the one refusing an encoded '/')."""
    for listener in cfg["static_resources"]["listeners"]:
        for chain in listener["filter_chains"]:
            hcm = chain["filters"][0]["typed_config"]
            if not normalize:
                for key in ("normalize_path", "merge_slashes", "path_with_escaped_slashes_action"):
                    hcm.pop(key, None)
            for f in hcm["http_filters"]:
                if f["name"] == "envoy.filters.http.wasm":
                    value = f["typed_config"]["config"]["configuration"]
                    bundle = json.loads(value["value"])
                    if deny is not None:
                        bundle["denyResponse"] = {**bundle.get("denyResponse", {}), **deny}
                    if max_body is not None:
                        bundle["limits"] = {**bundle.get("limits", {}), "maxBodyBytes": max_body}
                    value["value"] = json.dumps(bundle)
    return cfg


@contextmanager
def demo_topology(work_dir: Path, wasm_path: Path, cli: Path, pki: Pki, name: str, *, normalize: bool = True,
                  deny: dict[str, Any] | None = None, max_body: int | None = None) -> Iterator[Demo]:
    """The demo MCP server, the demo authorizer (as demo.py starts it) and Envoy configured by
    `mcp-access envoy` from the demo's manifests with the demo's token issuer."""
    logs, workdir = work_dir / "logs", work_dir / f"clients-{name}"
    keys, jwks = demo.make_tokens(workdir / "jwt")
    with ExitStack() as stack:
        mcp = stack.enter_context(start_mcp_server(logs, name=demo.MCP_SERVER_NAME))
        authz = stack.enter_context(start_authorizer(logs, name=demo.AUTHORIZER, deny_tools=[demo.DENIED_TOOL]))
        authz.configure(www_authenticate=CHALLENGE)
        mtls, jwt_port, out = free_port(), free_port(), workdir / "envoy-config.json"
        demo.render_local(cli, wasm=wasm_path, pki=pki, jwks=jwks, mcp_port=mcp.port, authz_port=authz.port,
                          mtls_port=mtls, jwt_port=jwt_port, admin_port=free_port(),
                          access_log=workdir / "access.log", out=out)
        cfg = adjusted(json.loads(out.read_text()), deny=deny, max_body=max_body, normalize=normalize)
        envoy = stack.enter_context(EnvoyProcess(cfg, workdir=workdir / "envoy", name=f"envoy-{name}"))
        yield Demo(f"http://127.0.0.1:{jwt_port}/mcp", keys, envoy)


# ---------------------------------------------------------------------------
# Tests

ECHO, DELETE, ADD = 'call:echo:{"text":"hello"}', 'call:delete_repo:{"name":"prod"}', 'call:add:{"a":2,"b":3}'
BETA_ECHO = 'call:echo:{"text":"from beta"}'
# The filter's answers: every denial a JSON-RPC error echoing the id (an authorizer's keeps its
# status and headers), with denyResponse's default code and message; listings filtered per caller.
DENY_CODE, DENY_MESSAGE = -32010, "Access denied"  # denyResponse defaults
ALPHA_SEES = ["add", "echo", "get_weather"]  # delete_repo: no Backend rule admits it
BETA_SEES = ["get_weather"]
DENY_BODY = f'"error":{{"code":{DENY_CODE},"message":"{DENY_MESSAGE}"}}'
# (sdk, protocol) pairs each SDK speaks: the TypeScript SDK 1.x knows no 2026-07-28.
SPOKEN = [("python", "2025-11-25"), ("python", "2026-07-28"), ("typescript", "2025-11-25"),
          ("rmcp", "2025-11-25"), ("rmcp", "2026-07-28")]


@pytest.fixture(scope="module")
def topo(work_dir: Path, wasm_path: Path, cli: Path, pki: Pki) -> Iterator[Demo]:
    with demo_topology(work_dir, wasm_path, cli, pki, "default") as d:
        yield d


def first_request(sdk: str, protocol: str, reports: dict[str, Any], op: str) -> dict[str, Any]:
    """The report of a client's first request: 2026-07-28 has no handshake, so the Python SDK's
    first request is the operation itself (rmcp's is server/discover, at connect)."""
    return reports[op] if (sdk, protocol) == ("python", "2026-07-28") else reports["connect"]


def policy_denial(sdk: str, report: dict[str, Any]) -> None:
    """What each SDK makes of the filter's policy denial: HTTP 403 with a JSON-RPC error body."""
    assert report["ok"] is False, report
    e = report["error"]
    if sdk == "python":  # the SDK reads the JSON-RPC error in the 403 body: a plain MCPError
        assert (e["class"], e["code"], e["message"]) == ("MCPError", DENY_CODE, DENY_MESSAGE), e
    elif sdk == "typescript":  # any non-2xx is a transport error carrying the status and the raw body
        assert (e["class"], e["code"]) == ("StreamableHTTPError", 403), e
        assert e["message"].startswith("Streamable HTTP error: Error POSTing to endpoint: {") and \
            DENY_BODY in e["message"], e
    else:  # rmcp: a transport error naming the status, with the body
        assert "error: unexpected server response: HTTP 403 Forbidden: {" in e["display"] and \
            DENY_BODY in e["display"], e


@pytest.mark.parametrize(("sdk", "protocol"), SPOKEN)
def test_an_allowed_agent_connects_lists_and_calls(topo: Demo, sdk: str, protocol: str) -> None:
    r = run_sdk(sdk, topo.url, "list", ECHO, token=topo.token("alpha"), protocol=protocol)
    assert r["connect"]["ok"] and r["connect"]["protocol"] == protocol, r
    if protocol == "2025-11-25" or sdk == "rmcp":  # the Python SDK's 2026-07-28 client asks for no server info
        assert r["connect"]["server"] == "demo-tools", r
    assert sorted(r["list"]["tools"]) == ALPHA_SEES, r
    assert (r[ECHO]["ok"], r[ECHO]["text"], r[ECHO]["is_error"]) == (True, "hello", False), r
    beta = run_sdk(sdk, topo.url, "list", token=topo.token("beta"), protocol=protocol)
    assert sorted(beta["list"]["tools"]) == BETA_SEES, beta


@pytest.mark.parametrize(("sdk", "protocol"), SPOKEN)
def test_policy_denials_as_each_sdk_reports_them(topo: Demo, sdk: str, protocol: str) -> None:
    # Denied at the Gateway (beta may call only get_weather) and at the Backend (delete_repo is
    # not on the allow list): the same answer, a 403 with the JSON-RPC error.
    alpha = run_sdk(sdk, topo.url, DELETE, ECHO, token=topo.token("alpha"), protocol=protocol)
    policy_denial(sdk, alpha[DELETE])
    assert alpha[ECHO]["ok"], alpha  # the session survives a denial
    beta = run_sdk(sdk, topo.url, BETA_ECHO, token=topo.token("beta"), protocol=protocol)
    policy_denial(sdk, beta[BETA_ECHO])


@pytest.mark.parametrize(("sdk", "protocol"), SPOKEN)
def test_an_authorizer_denial_as_each_sdk_reports_it(topo: Demo, sdk: str, protocol: str) -> None:
    r = run_sdk(sdk, topo.url, ADD, ECHO, token=topo.token("alpha"), protocol=protocol)
    e = r[ADD]["error"]
    assert r[ADD]["ok"] is False and r[ECHO]["ok"], r
    if sdk == "rmcp":  # rmcp reads the relayed WWW-Authenticate challenge (insufficient_scope), not the body
        assert e["display"].endswith("error: Insufficient scope") and e["www_authenticate"] == CHALLENGE, e
    else:  # a JSON-RPC error with the authorizer's status: as a policy denial
        policy_denial(sdk, r[ADD])


# Envoy's realm is the request URL; the CLI's configuration strips the port from the host.
def realm(url: str) -> str:
    """jwt_authn's challenge: the realm is the URL the client asked for (the :authority keeps its port)."""
    return f'Bearer realm="{url}"'


def jwt_refusal(sdk: str, report: dict[str, Any], body: str, challenge: str) -> None:
    """What each SDK makes of jwt_authn's 401: a plain-text body and a Bearer challenge."""
    e = report["error"]
    assert report["ok"] is False, report
    if sdk == "python":  # the body is no JSON-RPC error: the SDK puts a stand-in
        assert (e["code"], e["message"]) == (-32603, "Server returned an error response"), e
    elif sdk == "typescript":
        assert (e["class"], e["code"], e["message"]) == (
            "StreamableHTTPError", 401, f"Streamable HTTP error: Error POSTing to endpoint: {body}"), e
    else:
        assert "error: Auth required, when send " in e["display"], e
        assert e["www_authenticate"] == challenge, e


@pytest.mark.parametrize(("sdk", "protocol"), SPOKEN)
def test_tokens_jwt_authn_refuses_and_no_token(topo: Demo, sdk: str, protocol: str) -> None:
    expired = run_sdk(sdk, topo.url, "list", token=topo.keys.mint_expired({}, sub="alpha"), protocol=protocol)
    jwt_refusal(sdk, first_request(sdk, protocol, expired, "list"), "Jwt is expired",
                f'{realm(topo.url)}, error="invalid_token"')
    # No token: the listener requires one (--jwt-required), so jwt_authn answers 401 with a
    # challenge that has no error code (RFC 6750: the request carried no credentials).
    none = run_sdk(sdk, topo.url, "list", protocol=protocol)
    jwt_refusal(sdk, first_request(sdk, protocol, none, "list"), "Jwt is missing", realm(topo.url))


def test_the_inspector_cli_lists_calls_and_shows_denials(topo: Demo) -> None:
    alpha = topo.token("alpha")
    listed = inspector(topo.url, "tools/list", token=alpha)
    assert listed.code == 0, listed
    assert sorted(t["name"] for t in listed.json()["tools"]) == ALPHA_SEES
    beta_listed = inspector(topo.url, "tools/list", token=topo.token("beta"))
    assert sorted(t["name"] for t in beta_listed.json()["tools"]) == BETA_SEES, beta_listed
    called = inspector(topo.url, "tools/call", "--tool-name", "echo", "--tool-arg", "text=hello", token=alpha)
    assert called.code == 0 and called.json()["content"] == [{"type": "text", "text": "hello"}], called
    for tool, arg, token, body in [
        ("delete_repo", "name=prod", alpha, DENY_BODY),
        ("echo", "text=x", topo.token("beta"), DENY_BODY),
        ("add", "a=2", alpha, DENY_BODY),
    ]:
        denied = inspector(topo.url, "tools/call", "--tool-name", tool, "--tool-arg", arg, token=token)
        assert denied.code == 1 and denied.out == "", denied
        assert f"Failed to call tool {tool}: Streamable HTTP error: Error POSTing to endpoint: " in denied.err, denied
        assert body in denied.err, denied
    expired = inspector(topo.url, "tools/list", token=topo.keys.mint_expired({}, sub="alpha"))
    assert expired.code == 1 and "Failed to connect to MCP server: Streamable HTTP error: Error POSTing to " \
        "endpoint: Jwt is expired" in expired.err, expired
    missing = inspector(topo.url, "tools/list")
    assert missing.code == 1 and "Failed to connect to MCP server: Streamable HTTP error: Error POSTing to " \
        "endpoint: Jwt is missing" in missing.err, missing


@pytest.fixture(scope="module")
def ok200(work_dir: Path, wasm_path: Path, cli: Path, pki: Pki) -> Iterator[Demo]:
    """The demo topology with denyResponse httpStatus 200 and exposeDetails: for clients that take
    every non-2xx answer for a transport failure."""
    with demo_topology(work_dir, wasm_path, cli, pki, "ok200", deny={"httpStatus": 200, "exposeDetails": True}) as d:
        yield d


@pytest.mark.parametrize(("sdk", "protocol"), SPOKEN)
def test_denials_with_http_status_200_are_errors_of_the_call(ok200: Demo, sdk: str, protocol: str) -> None:
    alpha = run_sdk(sdk, ok200.url, DELETE, ADD, ECHO, token=ok200.token("alpha"), protocol=protocol)
    beta = run_sdk(sdk, ok200.url, BETA_ECHO, token=ok200.token("beta"), protocol=protocol)
    assert alpha[ECHO]["ok"], alpha
    for report, level in ((alpha[DELETE], "backend"), (beta[BETA_ECHO], "gateway")):
        e = report["error"]
        data = {"level": level, "policy": None, "reason": "not_allowed", "rule": None}
        # Every SDK now reports the JSON-RPC error itself, with its code, message and data.
        if sdk == "python":
            assert (e["class"], e["code"], e["message"], e["data"]) == ("MCPError", DENY_CODE, DENY_MESSAGE, data), e
        elif sdk == "typescript":
            assert (e["class"], e["code"], e["message"], e["data"]) == (
                "McpError", DENY_CODE, f"MCP error {DENY_CODE}: {DENY_MESSAGE}", data), e
        else:
            assert (e["code"], e["message"], e["data"]) == (DENY_CODE, DENY_MESSAGE, data), e
            assert e["display"] == f"Mcp error: {DENY_CODE}: {DENY_MESSAGE}({json.dumps(data, separators=(',', ':'))})"
    # The authorizer's denial keeps the authorizer's status (403) and challenge; its body is in error.data.
    e = alpha[ADD]["error"]
    if sdk == "rmcp":
        assert e["www_authenticate"] == CHALLENGE, e
    else:
        data = json.loads(e["message"].split("Error POSTing to endpoint: ", 1)[1])["error"]["data"] \
            if sdk == "typescript" else e["data"]
        assert (data["authorizerStatus"], data["authorizerBody"]) == (403, AUTHZ_BODY), e


def test_the_inspector_cli_with_http_status_200(ok200: Demo) -> None:
    alpha, beta = ok200.token("alpha"), ok200.token("beta")
    # Policy denials (Backend, Gateway): the MCP error itself.
    for tool, arg, token in [("delete_repo", "name=prod", alpha), ("echo", "text=x", beta)]:
        denied = inspector(ok200.url, "tools/call", "--tool-name", tool, "--tool-arg", arg, token=token)
        assert denied.code == 1 and denied.out == "", denied
        assert f"Failed to call tool {tool}: MCP error {DENY_CODE}: {DENY_MESSAGE}" in denied.err, denied
    # The authorizer's denial keeps its 403: still a transport error, the JSON-RPC error (with the
    # authorizer's status and body in its data) as text.
    denied = inspector(ok200.url, "tools/call", "--tool-name", "add", "--tool-arg", "a=2", token=alpha)
    prefix = "Failed to call tool add: Streamable HTTP error: Error POSTing to endpoint: "
    assert denied.code == 1 and prefix in denied.err, denied
    error = json.loads(denied.err.split(prefix, 1)[1].splitlines()[0])["error"]
    assert (error["code"], error["message"], error["data"]["authorizerStatus"], error["data"]["authorizerBody"]) \
        == (DENY_CODE, DENY_MESSAGE, 403, AUTHZ_BODY), denied


@pytest.fixture(scope="module")
def strict(work_dir: Path, wasm_path: Path, cli: Path, pki: Pki) -> Iterator[Demo]:
    """The demo topology with a 1 KiB body limit, and without Envoy's own path normalization, so
    that the filter is the one refusing an encoded '/'."""
    with demo_topology(work_dir, wasm_path, cli, pki, "strict", normalize=False, max_body=1024) as d:
        yield d


BIG = "call:echo:" + json.dumps({"text": "x" * 1100})
TOO_LARGE = "Request body exceeds the configured limit"
BAD_PATH = "the request path holds an encoded '/' or '\\' (%2F, %5C)"


@pytest.mark.parametrize(("sdk", "protocol"), SPOKEN)
def test_a_body_over_the_limit_as_each_sdk_reports_it(strict: Demo, sdk: str, protocol: str) -> None:
    r = run_sdk(sdk, strict.url, BIG, ECHO, token=strict.token("alpha"), protocol=protocol)
    e = r[BIG]["error"]
    assert r[BIG]["ok"] is False and r[ECHO]["ok"], r
    if sdk == "python":
        assert (e["class"], e["code"], e["message"]) == ("MCPError", -32600, TOO_LARGE), e
    elif sdk == "typescript":
        assert (e["class"], e["code"]) == ("StreamableHTTPError", 413) and TOO_LARGE in e["message"], e
    else:
        # The filter refuses by Content-Length, before reading the body, so the error's id is
        # null; rmcp cannot match it to the call and waits (our program gives up after 10 s).
        assert e["display"].startswith("request timeout after"), e


@pytest.mark.parametrize(("sdk", "protocol"), SPOKEN)
def test_a_path_the_filter_rejects_as_each_sdk_reports_it(strict: Demo, sdk: str, protocol: str) -> None:
    r = run_sdk(sdk, strict.url.replace("/mcp", "/mcp%2Fadmin"), "list", token=strict.token("alpha"),
                protocol=protocol)
    first = r["list"] if (sdk, protocol) == ("python", "2026-07-28") else r["connect"]
    e = first["error"]
    assert first["ok"] is False, r
    if sdk == "python":
        assert (e["class"], e["code"], e["message"]) == ("MCPError", -32600, BAD_PATH), e
    elif sdk == "typescript":
        assert (e["class"], e["code"]) == ("StreamableHTTPError", 400) and json.dumps(BAD_PATH)[1:-1] in \
            e["message"], e
    else:
        assert e["display"] == f"JSON-RPC error: -32600: {BAD_PATH}", e


def test_the_inspector_cli_shows_transport_rejections(strict: Demo) -> None:
    alpha = strict.token("alpha")
    big = inspector(strict.url, "tools/call", "--tool-name", "echo", "--tool-arg", "text=" + "x" * 1100, token=alpha)
    assert big.code == 1 and "Failed to call tool echo: Streamable HTTP error: Error POSTing to endpoint: " \
        f'{{"jsonrpc":"2.0","id":null,"error":{{"code":-32600,"message":"{TOO_LARGE}"}}}}' in big.err, big
    bad = inspector(strict.url.replace("/mcp", "/mcp%2Fadmin"), "tools/list", token=alpha)
    assert bad.code == 1 and "Failed to connect to MCP server: Streamable HTTP error: Error POSTing to endpoint: " \
        in bad.err and "%2F, %5C" in bad.err, bad
