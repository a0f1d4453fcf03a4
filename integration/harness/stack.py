"""One Envoy with the mcp-access filter in front of upstreams, as a test module runs it: listeners
on free ports, a bundle built for those ports, routes to upstream clusters, and an access log
whose entries carry the filter's decisions (its filter state), read back with mark() and
decisions_since() (decisions() for any Envoy; logged_decisions() reads its log's decision lines).

    with Stack.start("cel", work_dir=..., wasm=..., bundle=lambda ports: {...}, routes=[...],
                     upstreams=[Cluster("tools", port=server.port)], pki=pki) as stack:
        mark = stack.mark()
        stack.post(rpc("tools/call", {"name": "echo"}), backend="tools")
        (decision,) = stack.decisions_since(mark)
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .certs import ALPHA, CertPair, Pki
from .client import HttpResult, McpAgent, post_jsonrpc
from .envoy import Cluster, EnvoyProcess, JwtProvider, Listener, Route, Tls, Wasm, build_bootstrap
from .jwt import JwtKeys
from .ports import free_port

Doc = dict[str, Any]
BundleOf = Callable[[dict[str, int]], Doc]  # the listeners' ports, by name -> the bundle
Upstreams = Sequence[Cluster] | Callable[[dict[str, int]], Sequence[Cluster]]  # or of the ports
Where = Callable[[Doc, Doc], bool]  # (access-log entry, decision) -> wanted?


# --- the decision log ---------------------------------------------------------------------------


def mark(envoy: EnvoyProcess, settle: float = 0.15) -> int:
    """How many access-log entries exist once Envoy has written those of requests already answered
    (no new entry for `settle` seconds): decisions after this mark are of later requests."""
    count, stable_since = -1, time.monotonic()
    while time.monotonic() - stable_since < settle:
        now = len(envoy.access_log_entries())
        if now != count:
            count, stable_since = now, time.monotonic()
        time.sleep(0.03)
    return count


def decisions(envoy: EnvoyProcess, since: int = 0, *, count: int = 1, where: Where | None = None,
              until: Callable[[list[Doc]], bool] | None = None, timeout: float = 5.0) -> list[tuple[Doc, Doc]]:
    """(access-log entry, decision) of the entries after the first `since` that carry a decision
    (and satisfy `where`), once there are `count` of them (or, given `until`, once it holds for
    their decisions) or `timeout` seconds have passed (then what there is, perhaps nothing)."""
    deadline = time.monotonic() + timeout
    while True:
        found = []
        for entry in envoy.access_log_entries()[since:]:
            state = entry.get("filter_state")
            if state in (None, "-"):
                continue
            decision = json.loads(state)
            if where is None or where(entry, decision):
                found.append((entry, decision))
        done = until([d for _, d in found]) if until else len(found) >= count
        if done or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


DECISION_LINE = "mcp-access decision "


def logged_decisions(envoy: EnvoyProcess) -> list[tuple[str, Doc]]:
    """(log line, decision) of each decision line of Envoy's log so far, oldest first: the same
    record as the access log's filter state, written when the request ends."""
    return [(line, json.loads(line.split(DECISION_LINE, 1)[1]))
            for line in envoy.log_text().splitlines() if DECISION_LINE in line]


# --- the stack ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Listen:
    """One listener of a Stack. `tls`: None (plain HTTP), "mtls" (a client certificate required)
    or "tls" (one asked for, not required); `forward_client_cert` sets x-forwarded-client-cert
    upstream. `filter=False`: Envoy alone, no mcp-access. `bundle`: this listener's own bundle (in
    a VM of its own) instead of the Stack's. `routes`: instead of the Stack's. `hcm_extra`: merged
    into its HttpConnectionManager."""

    tls: str | None = None
    forward_client_cert: bool = True
    filter: bool = True
    normalize: bool = True
    bundle: BundleOf | None = None
    routes: Sequence[Route] | None = None
    extra_filters: Sequence[Doc] = ()
    hcm_extra: Doc = field(default_factory=dict)  # merged into the HttpConnectionManager


MTLS = {"https": Listen(tls="mtls")}


@dataclass
class Stack:
    """A running Stack (see Stack.start). `servers` are the processes behind its clusters, by
    name, as the test module gave them; `path` is the URL path of a backend ("{backend}" filled in)."""

    envoy: EnvoyProcess
    ports: dict[str, int]
    tls: dict[str, str | None]
    pki: Pki | None = None
    jwt: JwtKeys | None = None
    servers: dict[str, Any] = field(default_factory=dict)
    path: str = "/{backend}/mcp"
    marked: int = 0  # the last mark()
    sent: int = 0  # requests posted with tag=True

    @classmethod
    def render(cls, name: str, *, work_dir: Path, wasm: Path, bundle: BundleOf | None, routes: Sequence[Route],
               upstreams: Upstreams, listeners: Mapping[str, Listen] = MTLS, pki: Pki | None = None,
               jwt: JwtKeys | None = None, edit: Callable[[Doc], None] | None = None) -> tuple[Doc, dict[str, int]]:
        """Envoy's bootstrap for `listeners` (by name; each on a free port), filtering with the
        bundle that `bundle` builds for their ports and routing by `routes` to `upstreams` (which
        may be built from the ports too), and the ports. With `jwt`, every listener verifies
        tokens (jwt_authn; none is required). `edit` may change the bootstrap."""
        ports = {n: free_port() for n in listeners}
        built = [cls._listener(n, ports, spec, bundle, routes, wasm, pki, jwt) for n, spec in listeners.items()]
        cfg = build_bootstrap(admin_port=free_port(), listeners=built,
                              clusters=upstreams(ports) if callable(upstreams) else upstreams,
                              access_log_path=work_dir / f"access-{name}-{ports[next(iter(ports))]}.log")
        if edit is not None:
            edit(cfg)
        return cfg, ports

    @classmethod
    @contextmanager
    def start(cls, name: str, *, work_dir: Path, wasm: Path, bundle: BundleOf | None, routes: Sequence[Route],
              upstreams: Upstreams, listeners: Mapping[str, Listen] = MTLS, pki: Pki | None = None,
              jwt: JwtKeys | None = None, servers: Mapping[str, Any] | None = None, path: str = "/{backend}/mcp",
              edit: Callable[[Doc], None] | None = None) -> Iterator[Stack]:
        """Envoy `name` running render()'s bootstrap, stopped on exit."""
        cfg, ports = cls.render(name, work_dir=work_dir, wasm=wasm, bundle=bundle, routes=routes, upstreams=upstreams,
                                listeners=listeners, pki=pki, jwt=jwt, edit=edit)
        with EnvoyProcess(cfg, workdir=work_dir / f"envoy-{name}", name=f"envoy-{name}") as envoy:
            yield cls(envoy, ports, {n: spec.tls for n, spec in listeners.items()}, pki, jwt, dict(servers or {}), path)

    @staticmethod
    def _listener(name: str, ports: dict[str, int], spec: Listen, bundle: BundleOf | None, routes: Sequence[Route],
                  wasm: Path, pki: Pki | None, jwt: JwtKeys | None) -> Listener:
        tls = None
        if spec.tls is not None:
            if pki is None:
                raise ValueError(f"listener {name}: tls={spec.tls!r} needs the Stack's pki")
            tls = Tls(pki.server, pki.ca, require_client_certificate=spec.tls == "mtls",
                      forward_client_cert=spec.forward_client_cert)
        filter_ = None
        if spec.filter:
            own = spec.bundle or bundle
            if own is None:
                raise ValueError(f"listener {name}: no bundle (give the Stack or the listener one)")
            vm_id = f"mcp_access_{name}" if spec.bundle else "mcp_access"
            filter_ = Wasm(wasm, configuration=json.dumps(own(ports)), vm_id=vm_id)
        verify = [JwtProvider(jwt.issuer, jwt.jwks_json, audiences=[jwt.audience])] if jwt else []
        return Listener(name, ports[name], spec.routes or routes, tls=tls, jwt=verify, wasm=filter_,
                        extra_filters=spec.extra_filters, normalize=spec.normalize, hcm_extra=dict(spec.hcm_extra))

    # -- where and how requests go -----------------------------------------------------------------

    @property
    def port(self) -> int:
        """The first listener's port."""
        return self.ports[next(iter(self.ports))]

    def url(self, backend: str = "tools", listener: str | None = None) -> str:
        listener = listener or next(iter(self.ports))
        scheme = "https" if self.tls[listener] else "http"
        return f"{scheme}://127.0.0.1:{self.ports[listener]}{self.path.format(backend=backend)}"

    def _tls_args(self, who: str | Sequence[str] | CertPair | None, listener: str | None) -> Doc:
        """cert (a SPIFFE ID's, SANs', or as given; none for None) and ca, on a TLS listener."""
        if not self.tls[listener or next(iter(self.ports))]:
            return {}
        assert self.pki is not None
        cert = who if isinstance(who, CertPair) or who is None else self.pki.client(who)
        return {"cert": cert, "ca": self.pki.ca}

    def agent(self, who: str | Sequence[str] | CertPair | None = ALPHA, backend: str = "tools",
              listener: str | None = None, **kw: Any) -> McpAgent:
        """The MCP SDK client as `who` (its client certificate on a TLS listener)."""
        return McpAgent(self.url(backend, listener), **self._tls_args(who, listener), **kw)

    def post(self, body: Any, *, who: str | Sequence[str] | CertPair | None = ALPHA, backend: str = "tools",
             listener: str | None = None, tag: bool = False, again: bool = False, **kw: Any) -> HttpResult:
        """POSTs a JSON-RPC body (post_jsonrpc) as `who`. With `tag`, the path gets `?req=<n>`, a
        new n (the same as the last with `again`), and decision() finds this request's entry."""
        url = self.url(backend, listener)
        if tag:
            self.sent += 0 if again else 1
            url += f"?req={self.sent}"
        return post_jsonrpc(url, body, **self._tls_args(who, listener), **kw)

    # -- what happened -------------------------------------------------------------------------------

    def mark(self) -> int:
        """See mark(); also remembered, for decisions_since() without a mark."""
        self.marked = mark(self.envoy)
        return self.marked

    def decisions_since(self, mark: int | None = None, count: int = 1, where: Where | None = None) -> list[Doc]:
        """The decisions logged after `mark` (default: the last mark()); fails with fewer than `count`."""
        found = decisions(self.envoy, self.marked if mark is None else mark, count=count, where=where)
        assert len(found) >= count, f"fewer than {count} new decisions in the access log: {found}"
        return [d for _, d in found]

    def decision(self) -> Doc:
        """The decision of the last request posted with tag=True."""
        tag = f"?req={self.sent}"
        found = self.decisions_since(0, where=lambda entry, _: entry["path"].endswith(tag))
        assert len(found) == 1, found
        return found[0]

    def counter(self, name: str) -> int:
        """The filter's counter wasmcustom.mcp_access.<name> (0 while never counted)."""
        return int(self.envoy.stats("mcp_access").get(f"wasmcustom.mcp_access.{name}", 0))

    def reset(self) -> None:
        """Forgets what every server recorded, and marks the access log."""
        for server in self.servers.values():
            server.reset()
        self.mark()
