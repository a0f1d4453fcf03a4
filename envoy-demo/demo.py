#!/usr/bin/env python3
"""The mcp-access demo, in one command.

Starts on 127.0.0.1 the demo MCP server (backend "tools"), the external authorizer
"risk-check" (it denies the tool `add`) and Envoy with the mcp-access filter, behind an mTLS
listener. Envoy's configuration and the policy bundle are rendered by the `mcp-access` CLI
(`mcp-access envoy`, built with cargo first) from the Kubernetes manifests in
envoy-demo/manifests/ (Gateway, HTTPRoute, XBackend, XAccessPolicy), as a user would. Then two
agents, alpha and beta (SPIFFE IDs in their client certificates), talk to the MCP server through
Envoy with the official MCP SDK client. Every answer is printed together with where the filter decided it (read from Envoy's
access log, which carries the filter's decision as filter state), followed by what the MCP
server and the authorizer actually received and the filter's counters.

Exit code 0 only if every expectation held. Everything started is stopped on every path.
With --keep, everything stays up (with instructions) until Ctrl-C.

--render-compose [FILE] writes the static Envoy configuration of envoy-demo/docker-compose.yaml
(envoy-demo/envoy.yaml) from the same manifests, with the container paths and compose service
names, and exits.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

from preflight import COMPOSE_ENVOY, DemoError, check_ports, guarded, new_workdir, parse_args, tidy

try:
    from harness import (
        AuthorizerProc,
        Denied,
        EnvoyProcess,
        McpAgent,
        ManagedProcess,
        McpServerProc,
        TransportFailure,
        envoy_binary,
        free_port,
        make_pki,
        port_open,
        text_of,
    )
    from harness.demo import (
        AGENTS,
        AUTHORIZER,
        AUTHZ_CHALLENGE,
        BACKEND_SERVICE,
        DENIED_TOOL,
        JWT_AUDIENCE,
        JWT_ISSUER,
        JWT_LISTENER,
        JWT_PROVIDER,
        LISTENER,
        MANIFESTS,
        MCP_SERVER_NAME,
        TOKEN_TTL_S,
        CliError,
        make_tokens,
        render_local,
        run_cli,
    )
    from harness.stack import decisions, mark
except ImportError as e:  # pragma: no cover - depends on the interpreter used
    sys.exit(
        f"demo: cannot import the test harness ({e}).\n"
        "Run it with the project's venv (scripts/setup installs the harness into it): scripts/demo, or "
        ".venv/bin/python envoy-demo/demo.py"
    )

JWT_CALLER = "a JWT agent"  # how the summary names a caller that has no certificate
INSPECTOR_VERSION = "1.0.3"  # integration/clients/node/package.json
STATS_PREFIX = "wasmcustom.mcp_access."
COMPOSE_FLAGS = [
    "--wasm-path", "/etc/envoy/mcp_access_filter.wasm", "--files-where-envoy-runs",
    "--tls-cert", "gateway-cert=/etc/envoy/pki/server.crt,/etc/envoy/pki/server.key",
    "--client-ca", "agents-ca=/etc/envoy/pki/ca.crt",
    "--resolve", f"{BACKEND_SERVICE}=mcp-server:18080",
    "--resolve", f"{AUTHORIZER}=authorizer:18081",
    "--jwt-provider", f"{JWT_PROVIDER}=issuer={JWT_ISSUER},jwks=/etc/envoy/pki/jwks.json,audience={JWT_AUDIENCE}",
    "--jwt-required", JWT_LISTENER,
    "--listen", f"{LISTENER}=10443", "--listen", f"{JWT_LISTENER}=10081", "--bind", "0.0.0.0",
    "--admin-port", "19901", "--admin-address", "0.0.0.0",
    "--access-log", "/dev/stdout",
]
COMPOSE_HEADER = """\
# Envoy for the docker-compose demo (envoy-demo/docker-compose.yaml), generated from the manifests in
# envoy-demo/manifests by `envoy-demo/demo.py --render-compose` (mcp-access envoy with container paths
# and the compose service names); integration/tests/test_compose.py checks it is current.
#   /etc/envoy/mcp_access_filter.wasm   the filter (build/mcp_access_filter.wasm, made by scripts/build)
#   /etc/envoy/pki/                     CA, server and agent certificates, the JWKS of the demo's token
#                                       issuer (made by the compose "pki" service, with the agents' tokens)
"""


# ---------------------------------------------------------------------------
# Small helpers


def _raise_interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def other_free_port(taken: set[int]) -> int:
    while True:
        port = free_port()
        if port not in taken:
            return port


def envoy_version() -> str:
    try:
        out = subprocess.run([envoy_binary(), "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return "?"
    # "envoy  version: <sha>/1.40.0/Clean/RELEASE/BoringSSL"
    for part in out.split("/"):
        if part[:1].isdigit() and part.count(".") == 2:
            return part
    return "?"


def cli_binary() -> Path:
    """The mcp-access CLI: $MCP_ACCESS_CLI, else built here with cargo (a no-op when fresh)."""
    if override := os.environ.get("MCP_ACCESS_CLI"):
        return Path(override)
    cargo = shutil.which("cargo")
    if cargo is None:
        raise DemoError("cargo is needed to build the mcp-access CLI (or set MCP_ACCESS_CLI to the binary)")
    print("building the mcp-access CLI (cargo build -p mcp-access-cli; about a minute the first time) ...",
          flush=True)
    proc = subprocess.run([cargo, "build", "-q", "-p", "mcp-access-cli"], cwd=ROOT, capture_output=True,
                          text=True, timeout=1800)
    if proc.returncode != 0:
        raise DemoError(f"cargo build -p mcp-access-cli failed:\n{proc.stderr[-3000:]}")
    target = Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target")
    binary = (target if target.is_absolute() else ROOT / target) / "debug" / "mcp-access"
    print(f"the mcp-access CLI is {binary} (a debug build; docs/cli.md says how to install it)", flush=True)
    return binary


def render_compose(cli: Path) -> str:
    """envoy-demo/envoy.yaml: the compose rendering of the demo's manifests, with its header."""
    return COMPOSE_HEADER + run_cli(cli, *COMPOSE_FLAGS, "-o", "-")


def caller_of(headers: dict[str, str], header: str) -> str:
    """Agent name (alpha/beta) found in a header carrying a SPIFFE ID (XFCC or x-mcp-source-spiffe);
    without the header, the request came with a bearer JWT (whose token Envoy does not forward)."""
    value = headers.get(header, "")
    for name, spiffe in AGENTS.items():
        if spiffe in value:
            return name
    return value or JWT_CALLER


# ---------------------------------------------------------------------------
# The running demo


@dataclass
class Expect:
    """allow (optionally with a tool result text), or deny at `level` for `reason`."""

    allow: bool
    text: str | None = None
    level: str | None = None
    reason: str | None = None
    policy: str | None = None
    body: Any = None  # for denials: the JSON-RPC error the client must get
    challenge: str | None = None  # for denials: the WWW-Authenticate header the client must get

    def describe(self) -> str:
        if self.allow:
            return "allowed" + (f" with {self.text!r}" if self.text is not None else "")
        where = f"{self.level}/{self.reason}" + (f" (policy {self.policy})" if self.policy else "")
        return f"DENIED at {where}"


class GuardedEnvoy(EnvoyProcess):
    """Envoy that dies with the demo, however the demo ends (see preflight.guarded)."""

    def argv(self) -> list[str]:
        return guarded(super().argv())


class Services:
    """What the demo starts (the MCP server, the authorizer, Envoy, with the agents' certificates
    and tokens) and what Envoy recorded of each request (its access log and counters)."""

    def __init__(self, args: argparse.Namespace, stack: ExitStack, workdir: Path, cli: Path) -> None:
        self.a = args
        self.cli = cli
        self.stack = stack
        self.workdir = workdir
        self.bundle: dict[str, Any] = {}
        self.authorizer_of: dict[str, str] = {}  # "ns/policy" -> authorizer name
        self.envoy: EnvoyProcess | None = None
        self.mcp: McpServerProc | None = None
        self.authz: AuthorizerProc | None = None
        self.url = f"https://127.0.0.1:{args.envoy_port}/mcp"
        self.jwt_url = f"http://127.0.0.1:{args.jwt_port}/mcp"
        self.tokens: dict[str, str] = {}

    # -- start ----------------------------------------------------------------
    def start(self) -> None:
        print("starting the MCP server, the authorizer and Envoy ...", flush=True)
        config_path = self.render()
        # The MCP server and the authorizer start while Envoy compiles the filter; all are awaited below.
        waits = self.spawn_servers()
        self.start_envoy(config_path)
        for proc, ports in waits:
            try:
                proc.wait_ready(lambda: all(port_open(p) for p in ports), timeout=30, what=f"ports {ports}")
            except (RuntimeError, TimeoutError) as e:
                raise DemoError(str(e)) from None
        self.banner()

    def render(self) -> Path:
        """The agents' certificates and tokens; Envoy's configuration (its path is returned) and the
        bundle, from the manifests, with the local ports and files."""
        a = self.a
        self.pki = make_pki(self.workdir / "pki")
        self.certs = {name: self.pki.client(spiffe, name=name) for name, spiffe in AGENTS.items()}
        self.jwt_keys, jwks = make_tokens(self.workdir / "jwt")
        self.tokens = {name: (self.workdir / "jwt" / f"{name}.jwt").read_text().strip() for name in AGENTS}
        envoy_dir = self.workdir / "envoy"
        envoy_dir.mkdir(parents=True, exist_ok=True)
        config_path, bundle_path = self.workdir / "envoy-config.json", self.workdir / "bundle.json"
        render_local(self.cli, wasm=a.wasm, pki=self.pki, jwks=jwks, mcp_port=a.mcp_port, authz_port=a.authz_port,
                     mtls_port=a.envoy_port, jwt_port=a.jwt_port, admin_port=a.admin_port,
                     access_log=envoy_dir / "access.log", out=config_path, extra=["--bundle-out", str(bundle_path)])
        self.bundle = json.loads(bundle_path.read_text())
        services = {z["name"]: z["cluster"].rsplit("/", 1)[-1].split(":")[0] for z in self.bundle.get("authorizers", [])}
        self.authorizer_of = {
            f"{p.get('namespace', '')}/{p['name']}": services.get(p["externalAuth"], p["externalAuth"])
            for p in self.bundle.get("policies", []) if p.get("action") == "ExternalAuth"
        }
        return config_path

    def spawn_servers(self) -> list[tuple[ManagedProcess, list[int]]]:
        """The MCP server and the authorizer, started; each with the ports to wait for."""
        a = self.a
        taken = {a.envoy_port, a.jwt_port, a.admin_port, a.mcp_port, a.authz_port}
        mcp_admin = other_free_port(taken)
        mcp_proc = self._spawn("mcp_server", HERE / "mcp_server.py", [
            "--port", str(a.mcp_port), "--admin-port", str(mcp_admin), "--mcp-path", "/mcp", "--name", MCP_SERVER_NAME,
        ])
        self.mcp = McpServerProc(mcp_proc, name=MCP_SERVER_NAME, port=a.mcp_port, admin_port=mcp_admin, mcp_path="/mcp")
        authz_proc = self._spawn("authorizer", HERE / "authorizer.py", [
            "--name", AUTHORIZER, "--port", str(a.authz_port), "--deny-tool", DENIED_TOOL,
            "--www-authenticate", AUTHZ_CHALLENGE,
        ])
        self.authz = AuthorizerProc(authz_proc, name=AUTHORIZER, port=a.authz_port)
        return [(mcp_proc, [a.mcp_port, mcp_admin]), (authz_proc, [a.authz_port])]

    def start_envoy(self, config_path: Path) -> None:
        self.envoy = GuardedEnvoy(json.loads(config_path.read_text()), workdir=self.workdir / "envoy", name="envoy")
        self.stack.callback(self.envoy.stop)
        try:
            self.envoy.start()
        except (RuntimeError, TimeoutError) as e:
            why = str(e).splitlines()[0]
            lines = [l for l in self.envoy.log_text().splitlines()
                     if "mcp-access" in l or "][error][" in l or "][critical][" in l]
            raise DemoError(
                f"Envoy did not start ({why}); its log is {self.envoy.log_path}\n" + "\n".join(lines[-15:])
            ) from None

    def banner(self) -> None:
        assert self.mcp is not None and self.authz is not None
        a = self.a
        print(f"mcp-access demo (work dir {self.workdir})")
        rows = [
            ("MCP server", f"{self.mcp.url}  (\"{MCP_SERVER_NAME}\": echo, add, delete_repo, get_weather)"),
            ("authorizer", f"{self.authz.url}  (\"{AUTHORIZER}\", denies the tool {DENIED_TOOL!r})"),
            (f"Envoy {envoy_version()}", f"{self.url}  (mTLS; admin http://127.0.0.1:{a.admin_port})"),
            ("", f"{self.jwt_url}  (plain HTTP, bearer JWT of issuer {JWT_ISSUER})"),
            ("filter", str(a.wasm)),
            ("policies", self._policy_summary()),
        ]
        for k, v in rows:
            print(f"  {k:<12} {v}")
        print()

    def _spawn(self, name: str, script: Path, args: list[str]) -> ManagedProcess:
        """Start `python script args` (this interpreter), logging to logs/<name>.log; stopped with the
        stack, and killed by the kernel if the demo is killed."""
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        proc = ManagedProcess(guarded([sys.executable, str(script), *args]), name=name,
                              log_path=self.workdir / "logs" / f"{name}.log", env=env)
        self.stack.callback(proc.stop)
        return proc.start()

    def _policy_summary(self) -> str:
        parts = []
        for p in sorted(self.bundle.get("policies", []), key=lambda p: (p["level"] != "Gateway", p.get("seniority", 0))):
            authz = self.authorizer_of.get(f"{p.get('namespace', '')}/{p['name']}", "")
            act = p["action"] + (f" {authz}" if p["action"] == "ExternalAuth" else "")
            parts.append(f"{p['name']} ({p['level']}, {act})")
        return ", ".join(parts)

    # -- reading decisions -----------------------------------------------------
    def mark(self) -> int:
        assert self.envoy is not None
        return mark(self.envoy)

    def denial_counters(self) -> dict[str, int]:
        assert self.envoy is not None
        stats = self.envoy.stats(filter=r"mcp_access\.denied\.")
        return {k: v for k, v in stats.items() if isinstance(v, int)}

    def decision(self, start: int, method: str, name: str | None, before: dict[str, int]) -> dict[str, Any] | None:
        """The filter's decision for the request just made: the filter state of the first new access
        log entry for (method, name); if no filter state shows up, the denial counter that moved."""
        assert self.envoy is not None
        found = decisions(self.envoy, start, where=lambda _, d: d.get("method") == method and d.get("name") == name)
        if found:
            entry, d = found[0]
            return {**d, "source": "access log", "code": entry.get("code")}
        after = self.denial_counters()
        moved = [k for k, v in after.items() if v > before.get(k, 0)]
        if len(moved) == 1:  # wasmcustom.mcp_access.denied.<level>.<reason>
            level, _, reason = moved[0].rsplit("mcp_access.denied.", 1)[1].partition(".")
            return {"decision": "deny", "level": level, "reason": reason, "source": "stats"}
        return None

    def where(self, d: dict[str, Any] | None, denied: Denied) -> str:
        """Where the filter denied, in words, from its decision record."""
        if d is None:
            return "(no decision recorded by the filter)"
        level, reason, policy = d.get("level"), d.get("reason"), d.get("policy")
        if reason == "external_auth_denied":
            authz = self.authorizer_of.get(policy or "", "?")
            challenge = denied.headers.get("www-authenticate")
            return f"by the authorizer {authz}: {denied.message}" + (f"   [WWW-Authenticate: {challenge}]" if challenge else "")
        if reason == "authorizer_error":
            return f"because the authorizer {self.authorizer_of.get(policy or '', '?')} failed"
        text = {"gateway": "at the gateway", "backend": "by the backend policy"}.get(level or "", f"at level {level}")
        if policy:
            text += f" (policy {policy}" + (f", rule {d['rule']}" if d.get("rule") else "") + ")"
        if reason == "not_allowed":
            text += ": no Allow rule admits it"  # the filter names no single policy for this
        elif reason:
            text += f" [{reason}]"
        if denied.code is not None:
            text += f"   [JSON-RPC error {denied.code} {json.dumps(denied.message)}]"
        return text


class Checks:
    """The demo's expectations: how many were checked, which did not hold."""

    def __init__(self) -> None:
        self.failures: list[str] = []
        self.count = 0

    def expect(self, ok: bool, what: str) -> bool:
        self.count += 1
        if not ok:
            self.failures.append(what)
        return ok

    def report(self) -> int:
        if self.failures:
            print(f"\nFAILED: {len(self.failures)} of {self.count} expectations did not hold:")
            for f in self.failures:
                print(f"  - {f}")
            return 1
        print(f"\nall {self.count} expectations held")
        return 0


class Session:
    """The agents' session through Envoy, each answer printed with where the filter decided it."""

    def __init__(self, services: Services, checks: Checks) -> None:
        self.s = services
        self.checks = checks

    def line(self, agent: str, op: str, result: str) -> None:
        print(f"agent {agent:<11} {op:<26} -> {result}", flush=True)

    def connect(self, agent: str, expect: Expect, *, jwt: bool = False) -> McpAgent | None:
        """Agent `agent` connects: over mTLS with its certificate, or with jwt=True over the JWT
        listener with its token (then labelled "<agent> (JWT)")."""
        if jwt:
            client = McpAgent(self.s.jwt_url, token=self.s.tokens[agent], client_name=f"demo-agent-{agent}")
            agent = f"{agent} (JWT)"
        else:
            client = McpAgent(self.s.url, cert=self.s.certs[agent], ca=self.s.pki.ca, client_name=f"demo-agent-{agent}")
        label = f"agent {agent} initialize"
        start, before = self.s.mark(), self.s.denial_counters()
        try:
            client.connect()
        except Denied as e:
            d = self.s.decision(start, "initialize", None, before)
            self.line(agent, "initialize", f"DENIED {e.status} {self.s.where(d, e)}")
            self.checks.expect(False, f"{label}: expected {expect.describe()}, got HTTP {e.status}")
            return None
        except TransportFailure as e:
            self.line(agent, "initialize", f"NO ANSWER ({e})")
            self.checks.expect(False, f"{label}: expected {expect.describe()}, got no HTTP answer: {e}")
            return None
        self.s.stack.callback(client.close)
        d = self.s.decision(start, "initialize", None, before)
        self.line(agent, "initialize", f"ok (server {client.server_name})")
        self.checks.expect(client.server_name == MCP_SERVER_NAME, f"{label}: server name {client.server_name!r}")
        self.checks.expect(d is not None and d.get("decision") == "allow", f"{label}: filter decision {d}")
        return client

    def list_tools(self, agent: str, client: McpAgent | None) -> None:
        if client is None:
            return
        try:
            names = sorted(client.tool_names())
        except Denied as e:
            self.line(agent, "tools/list", f"DENIED {e.status}")
            self.checks.expect(False, f"agent {agent} tools/list: expected allowed, got HTTP {e.status}")
            return
        self.line(agent, "tools/list", "ok: " + ", ".join(names))
        # The listing holds what the agent may call (delete_repo is not on the backend's list).
        self.checks.expect(set(names) == {"echo", "add", "get_weather"}, f"agent {agent} tools/list: {names}")

    def call(self, agent: str, client: McpAgent | None, tool: str, arguments: dict[str, Any], expect: Expect) -> None:
        op, label = f"tools/call {tool}", f"agent {agent} tools/call {tool}"
        if client is None:
            self.checks.expect(False, f"{label}: not attempted (agent {agent} has no session)")
            return
        start, before = self.s.mark(), self.s.denial_counters()
        try:
            result = client.call_tool(tool, arguments)
        except Denied as e:
            d = self.s.decision(start, "tools/call", tool, before)
            self.line(agent, op, f"DENIED {e.status} {self.s.where(d, e)}")
            if expect.allow:
                self.checks.expect(False, f"{label}: expected {expect.describe()}, got HTTP {e.status} {e.body[:200]!r}")
                return
            got = (d or {}).get("level"), (d or {}).get("reason")
            self.checks.expect(e.status == 403, f"{label}: HTTP status {e.status}, expected 403")
            self.checks.expect(
                d is not None and d.get("decision") == "deny" and got == (expect.level, expect.reason)
                and (expect.policy is None or d.get("policy") == expect.policy),
                f"{label}: expected {expect.describe()}, the filter recorded {d}",
            )
            if expect.body is not None:
                self.checks.expect(e.error == expect.body, f"{label}: client got error {e.error!r}, expected {expect.body!r}")
            if expect.challenge is not None:
                got_challenge = e.headers.get("www-authenticate")
                self.checks.expect(got_challenge == expect.challenge,
                                   f"{label}: WWW-Authenticate {got_challenge!r}, expected {expect.challenge!r}")
            return
        except TransportFailure as e:
            self.line(agent, op, f"NO ANSWER ({e})")
            self.checks.expect(False, f"{label}: expected {expect.describe()}, got no HTTP answer: {e}")
            return
        text = text_of(result)
        d = self.s.decision(start, "tools/call", tool, before)
        self.line(agent, op, f"allowed: {json.dumps(text)}" + (" (tool error)" if result.is_error else ""))
        if not expect.allow:
            self.checks.expect(False, f"{label}: expected {expect.describe()}, but it was allowed (filter recorded {d})")
            return
        self.checks.expect(not result.is_error and (expect.text is None or text == expect.text),
                           f"{label}: result {text!r}, expected {expect.text!r}")
        self.checks.expect(d is not None and d.get("decision") == "allow", f"{label}: filter decision {d}")

    def run(self) -> None:
        assert self.s.mcp is not None and self.s.authz is not None
        self.s.mcp.reset()
        self.s.authz.reset()
        alpha = self.connect("alpha", Expect(True))
        self.list_tools("alpha", alpha)
        self.call("alpha", alpha, "echo", {"text": "hello"}, Expect(True, text="hello"))
        beta = self.connect("beta", Expect(True))
        self.call("beta", beta, "get_weather", {"city": "Lisbon"}, Expect(True, text="sunny in Lisbon"))
        self.call("beta", beta, "echo", {"text": "hi from beta"},
                  Expect(False, level="gateway", reason="not_allowed"))
        self.call("alpha", alpha, "delete_repo", {"name": "prod"},
                  Expect(False, level="backend", reason="not_allowed"))
        self.call("alpha", alpha, "add", {"a": 2, "b": 3},
                  Expect(False, level="backend", reason="external_auth_denied", policy="demo/tools-risk-check",
                         body={"code": -32010, "message": "Access denied"}, challenge=AUTHZ_CHALLENGE))
        self.jwt_session()

    def refused(self, who: str, token: str | None, challenge_error: str | None) -> None:
        """A caller without a usable token on the JWT listener, refused 401 by jwt_authn (the
        listener requires a token) with a Bearer challenge: `error="invalid_token"` for a token it
        cannot verify, no error code (RFC 6750) when there is no token at all."""
        label = f"{who} initialize"
        start, before = self.s.mark(), self.s.denial_counters()
        client = McpAgent(self.s.jwt_url, token=token, client_name="demo-anonymous")
        try:
            client.connect()
        except Denied as e:
            challenge = e.headers.get("www-authenticate", "(no WWW-Authenticate)")
            if e.status == 401:
                shown = f"REFUSED 401 by jwt_authn: {e.body.decode('utf-8', 'replace').strip()}  [{challenge}]"
            else:
                shown = f"DENIED {e.status} {self.s.where(self.s.decision(start, 'initialize', None, before), e)}"
            print(f"{who:<17} {'initialize':<26} -> {shown}", flush=True)
            error_ok = (f'error="{challenge_error}"' in challenge) if challenge_error else "error=" not in challenge
            self.checks.expect(e.status == 401 and challenge.startswith("Bearer realm=") and error_ok,
                               f"{label}: expected 401 from jwt_authn with a Bearer challenge, got {e.status} [{challenge}]")
            return
        except TransportFailure as e:
            print(f"{who:<17} {'initialize':<26} -> NO ANSWER ({e})", flush=True)
            self.checks.expect(False, f"{label}: no HTTP answer: {e}")
            return
        client.close()
        print(f"{who:<17} {'initialize':<26} -> ok", flush=True)
        self.checks.expect(False, f"{label}: expected HTTP 401, it was let through")

    def jwt_session(self) -> None:
        """The same agents through the bearer-JWT listener, and callers without a valid token."""
        alpha = self.connect("alpha", Expect(True), jwt=True)
        self.list_tools("alpha (JWT)", alpha)
        self.call("alpha (JWT)", alpha, "echo", {"text": "hello"}, Expect(True, text="hello"))
        beta = self.connect("beta", Expect(True), jwt=True)
        self.call("beta (JWT)", beta, "echo", {"text": "hi from beta"},
                  Expect(False, level="gateway", reason="not_allowed"))
        self.refused("no token", None, None)
        self.refused("forged token", self.s.jwt_keys.mint_untrusted({}, sub="alpha"), "invalid_token")


# ---------------------------------------------------------------------------
# After the session


def summarize(s: Services, checks: Checks) -> None:
    """What the MCP server and the authorizer received and the filter counted, checked."""
    assert s.mcp is not None and s.authz is not None and s.envoy is not None
    print("\nsummary")
    calls = [(r["tool"], caller_of(r["headers"], "x-forwarded-client-cert"))
             for r in s.mcp.requests() if r.get("mcp_method") == "tools/call"]
    shown = ", ".join(f"{t} ({who})" for t, who in calls) or "none"
    print(f"  MCP server {MCP_SERVER_NAME} received {len(calls)} tools/call requests: {shown}")
    blocked = [c for c in calls if c[0] in ("delete_repo", "add") or c == ("echo", "beta")]
    print(f"  MCP server received {len(blocked)} calls of delete_repo/add/echo-from-beta"
          + ("" if not blocked else f": {blocked}"))
    checks.expect(not blocked, f"denied calls reached the MCP server: {blocked}")
    checks.expect(sorted(calls) == sorted([("echo", "alpha"), ("get_weather", "beta"), ("echo", JWT_CALLER)]),
                  "the MCP server should have received echo from alpha, get_weather from beta and echo from "
                  f"alpha's JWT, got {calls}")

    asked = [(c["headers"].get("x-mcp-tool", "?"), caller_of(c["headers"], "x-mcp-source-spiffe"))
             for c in s.authz.calls()]
    shown = ", ".join(f"{t} ({who})" for t, who in asked) or "none"
    print(f"  authorizer {AUTHORIZER} was asked {len(asked)} times: {shown}")
    checks.expect(("echo", "beta") not in asked,
                  "beta's echo, denied at the gateway, must not reach the backend's authorizer")
    checks.expect(("add", "alpha") in asked and ("delete_repo", "alpha") in asked,
                  f"the authorizer should have been asked about alpha's add and delete_repo, got {asked}")

    stats = s.envoy.stats(filter=r"mcp_access\.")
    counters = {k: v for k, v in stats.items() if k.startswith(STATS_PREFIX) and isinstance(v, int)}
    print("  filter counters (Envoy admin /stats; those still at 0 left out):")
    for k in sorted(counters):
        if counters[k]:
            print(f"    {k}: {counters[k]}")
    # beta's echo twice (mTLS, JWT) at the Gateway, delete_repo and add at the Backend; callers
    # without a valid token are jwt_authn's (401), not the filter's.
    want = {"denied": 4, "denied.gateway.not_allowed": 2, "denied.backend.not_allowed": 1,
            "denied.backend.external_auth_denied": 1}
    for k, v in want.items():
        got = counters.get(STATS_PREFIX + k, 0)
        checks.expect(got == v, f"counter {STATS_PREFIX}{k} is {got}, expected {v}")


def jwt_commands(s: Services, expires: str) -> str:
    """Ready-to-paste MCP Inspector (CLI mode) and curl commands for each agent's token."""
    inspector = ROOT / "integration" / "clients" / "node" / "node_modules" / ".bin" / "mcp-inspector"
    run = str(inspector) if inspector.exists() else f"npx -y @modelcontextprotocol/inspector@{INSPECTOR_VERSION}"
    lines = [f"\nThe bearer-JWT listener: each agent's token (valid until {expires}) is in {s.workdir / 'jwt'}."]
    for agent, (tool, arg), denials in (("alpha", ("echo", "text=hi"), "delete_repo or add"),
                                        ("beta", ("get_weather", "city=Lisbon"), "echo")):
        auth = f'"Authorization: Bearer $(cat {s.workdir / "jwt" / f"{agent}.jwt"})"'
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                           "params": {"name": tool, "arguments": dict([arg.split("=", 1)])}})
        lines += [
            f"MCP Inspector as agent {agent}: the tools it may call, then a call (try {denials} for a denial):",
            f"  {run} --cli {s.jwt_url} --transport http --method tools/list --header {auth}",
            f"  {run} --cli {s.jwt_url} --transport http --method tools/call --tool-name {tool} "
            f"--tool-arg {arg} --header {auth}",
            f"curl as agent {agent}:",
            f"  curl -sS {s.jwt_url} -H {auth} \\",
            "    -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' \\",
            f"    -H 'mcp-protocol-version: 2025-11-25' -d '{body}'",
        ]
    return "\n".join(lines) + "\n"


def keep_running(s: Services) -> bool:
    """Wait for Ctrl-C (KeyboardInterrupt); False if one of the processes exits first."""
    assert s.mcp is not None and s.authz is not None and s.envoy is not None
    a, alpha = s.a, s.certs["alpha"]
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": "echo", "arguments": {"text": "hi"}}})
    expires = time.strftime("%Y-%m-%d %H:%M %Z", time.localtime(time.time() + TOKEN_TTL_S))
    print(f"""
Everything keeps running (Ctrl-C stops it all, and removes {s.workdir}
with its keys, certificates and tokens):
  MCP through Envoy   {s.url}   (mTLS: client cert required)
                      {s.jwt_url}   (plain HTTP: Authorization: Bearer <token>)
  Envoy admin         http://127.0.0.1:{a.admin_port}/   (counters: http://127.0.0.1:{a.admin_port}/stats?filter=mcp_access)
  MCP server direct   {s.mcp.url}   (what it received: http://127.0.0.1:{s.mcp.admin_port}/requests)
  authorizer          {s.authz.url}   (what it was asked: {s.authz.url}/__calls)

Call a tool through Envoy as agent alpha (try "delete_repo" or "add" for denials; beta.crt/beta.key for beta):
  curl -sS --cacert {s.pki.ca.cert} --cert {alpha.cert} --key {alpha.key} \\
    -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' \\
    -H 'mcp-protocol-version: 2025-11-25' \\
    {s.url} -d '{body}'
{jwt_commands(s, expires)}
Logs:
  Envoy               {s.envoy.log_path}   (decisions: grep mcp-access)
  access log          {s.envoy.access_log_paths[0]}   (filter_state = the filter's decision)
  MCP server          {s.workdir / 'logs' / 'mcp_server.log'}
  authorizer          {s.workdir / 'logs' / 'authorizer.log'}
  manifests           {MANIFESTS}
  policy bundle       {s.workdir / 'bundle.json'}   (mcp-access envoy --bundle-out)
  Envoy config        {s.envoy.config_path}
""", flush=True)
    procs = {"Envoy": s.envoy, "MCP server": s.mcp.proc, "authorizer": s.authz.proc}
    while True:
        for name, p in procs.items():
            if not p.alive:
                print(f"{name} exited unexpectedly; stopping everything", flush=True)
                return False
        time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    a.wasm = a.wasm.resolve()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_interrupt)  # unwinds like Ctrl-C, so everything is stopped
    code, workdir, temp = 1, None, False
    if a.render_compose is not None:
        try:
            a.render_compose.write_text(render_compose(cli_binary()))
        except (DemoError, CliError) as e:
            print(f"demo: {e}", file=sys.stderr)
            return 1
        print(f"wrote {a.render_compose}")
        return 0
    try:
        if not a.wasm.is_file():
            raise DemoError(f"the filter is not at {a.wasm}: run scripts/build (or scripts/demo), or pass --wasm PATH")
        check_ports(a)
        if a.workdir:
            workdir = a.workdir.resolve()
            workdir.mkdir(parents=True, exist_ok=True)
        else:
            tidy()
            workdir, temp = new_workdir(), True
        cli = cli_binary()
        with ExitStack() as stack:
            services, checks = Services(a, stack, workdir, cli), Checks()
            services.start()
            try:
                Session(services, checks).run()
                summarize(services, checks)
            except Exception as e:  # noqa: BLE001 - reported as a failed expectation, then everything stops
                checks.expect(False, f"the session broke off: {type(e).__name__}: {e}")
            code = checks.report()
            if a.keep and not keep_running(services):
                code = 1
            print("stopping the MCP server, the authorizer and Envoy", flush=True)
    except (DemoError, CliError) as e:
        print(f"demo: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted; everything started was stopped", flush=True)
        return code if a.keep else 130
    finally:
        if workdir is not None and temp:
            if code == 0:
                shutil.rmtree(workdir, ignore_errors=True)
                if a.keep:
                    print(f"removed {workdir} (its keys, certificates, tokens and logs)", flush=True)
            else:
                print(f"logs kept in {workdir}")
    return code


if __name__ == "__main__":
    sys.exit(main())
