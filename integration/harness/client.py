"""MCP client helpers: a synchronous facade over the official SDK client, and raw HTTP helpers.

How the SDK (mcp 2.3.0) reports HTTP errors: for a request POST answered with a
status >= 400, the Streamable HTTP transport turns the answer into a JSON-RPC
error for that request (the body's JSON-RPC error if the body is one with an
application/json content type, else a stand-in such as -32603 "Server returned
an error response"), and the session raises `mcp.MCPError(code, message)`. The
HTTP status and body are lost. `McpAgent` therefore records every >= 400
response with an httpx2 response hook and, when a call fails, raises `Denied`
carrying the status, headers, body and the parsed JSON-RPC error.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx2
import mcp_types as types
from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp import Client, Implementation, MCPError
from mcp.client.streamable_http import streamable_http_client

from .certs import CertPair

T = TypeVar("T")

DEFAULT_PROTOCOL_VERSION = "2025-11-25"
MCP_ACCEPT = "application/json, text/event-stream"

CertArg = CertPair | tuple[str | Path, str | Path] | None
CaArg = CertPair | Path | str | None


# ---------------------------------------------------------------------------
# Results and errors


@dataclass
class HttpResult:
    status: int
    headers: dict[str, str]  # lower-case names; repeated headers joined with ", "
    body: bytes
    method: str = ""  # request method, when known

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def error(self) -> dict[str, Any] | None:
        """The JSON-RPC `error` object if the body is a JSON-RPC error response."""
        try:
            doc = self.json()
        except ValueError:
            return None
        return doc["error"] if isinstance(doc, dict) and isinstance(doc.get("error"), dict) else None


class Denied(Exception):
    """An MCP call failed because the HTTP layer answered with a status >= 400."""

    def __init__(self, result: HttpResult) -> None:
        self.result = result
        self.status = result.status
        self.headers = result.headers
        self.body = result.body
        super().__init__(f"HTTP {result.status}: {result.text[:300]}")

    @property
    def error(self) -> dict[str, Any] | None:
        return self.result.error

    @property
    def code(self) -> int | None:
        return self.error.get("code") if self.error else None

    @property
    def message(self) -> str | None:
        return self.error.get("message") if self.error else None

    def json(self) -> Any:
        return self.result.json()


class TransportFailure(Exception):
    """No HTTP answer at all: connect refused, TLS handshake/verification failed, connection reset.
    `__cause__` is the underlying error (httpx2.TransportError, ssl.SSLError or OSError)."""


# Depending on timing, a TLS alert surfaces as httpx2.ReadError or as a bare ssl.SSLError.
_TRANSPORT_ERRORS = (httpx2.TransportError, ssl.SSLError, OSError)


# ---------------------------------------------------------------------------
# TLS


def _cert_tuple(cert: CertArg) -> tuple[str, str] | None:
    if cert is None:
        return None
    if isinstance(cert, CertPair):
        return cert.as_tuple()
    return str(cert[0]), str(cert[1])


def ssl_context(ca: CaArg = None, cert: CertArg = None) -> ssl.SSLContext:
    """Client TLS context trusting `ca` (system roots if None), presenting `cert` if given."""
    cafile = str(ca.cert if isinstance(ca, CertPair) else ca) if ca is not None else None
    ctx = ssl.create_default_context(cafile=cafile)
    if (pair := _cert_tuple(cert)) is not None:
        ctx.load_cert_chain(*pair)
    return ctx


def _headers_of(resp: httpx2.Response) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in resp.headers.multi_items():
        k = k.lower()
        out[k] = f"{out[k]}, {v}" if k in out else v
    return out


# ---------------------------------------------------------------------------
# SDK client facade


def _unwrap(exc: BaseException) -> BaseException:
    """The interesting leaf of (nested) exception groups: an MCPError if any, else the first leaf."""
    leaves: list[BaseException] = []

    def walk(e: BaseException) -> None:
        if isinstance(e, BaseExceptionGroup):
            for sub in e.exceptions:
                walk(sub)
        else:
            leaves.append(e)

    walk(exc)
    for leaf in leaves:
        if isinstance(leaf, MCPError):
            return leaf
    return leaves[0] if leaves else exc


class McpAgent:
    """Synchronous MCP client over Streamable HTTP (official SDK `mcp.Client`, run on a private
    event loop thread). Entering connects: mode="legacy" does the initialize handshake
    (protocol 2025-11-25); mode="auto" first probes `server/discover` and, if the server speaks
    the 2026-07-28 protocol, uses it without any initialize (falling back to initialize otherwise).

        with McpAgent(url, cert=pki.client(ALPHA), ca=pki.ca) as agent:
            agent.call_tool("echo", {"text": "hi"})

    A call answered with HTTP >= 400 raises `Denied`; one with no HTTP answer (TLS refused,
    connection reset) raises `TransportFailure`; JSON-RPC errors in a 2xx answer raise the
    SDK's `mcp.MCPError`. Always close it (use `with`): its loop thread is not a daemon."""

    def __init__(
        self,
        url: str,
        *,
        cert: CertArg = None,
        ca: CaArg = None,
        token: str | None = None,
        headers: Mapping[str, str] | None = None,
        mode: str = "legacy",
        timeout: float = 10.0,
        client_name: str = "mcp-access-harness",
        auth: httpx2.Auth | None = None,
    ) -> None:
        self.url = url
        self._auth = auth  # e.g. the SDK's OAuthClientProvider
        self.mode = mode
        self.timeout = timeout
        self.client_name = client_name
        self._verify: ssl.SSLContext | bool = ssl_context(ca, cert) if url.startswith("https") else False
        self._headers = dict(headers or {})
        if token is not None:
            self._headers["authorization"] = f"Bearer {token}"
        self.http_errors: list[HttpResult] = []  # every HTTP >= 400 answer seen, in order
        self._stack = ExitStack()
        self._portal: BlockingPortal | None = None
        self._client: Client | None = None

    # lifecycle ---------------------------------------------------------------
    async def _on_response(self, response: httpx2.Response) -> None:
        if response.status_code >= 400:
            await response.aread()  # cached on the response, so the SDK can still read it
            self.http_errors.append(
                HttpResult(response.status_code, _headers_of(response), response.content, response.request.method)
            )

    @asynccontextmanager
    async def _open(self) -> AsyncIterator[Client]:
        async with httpx2.AsyncClient(
            verify=self._verify,
            headers=self._headers,
            auth=self._auth,
            timeout=httpx2.Timeout(self.timeout),
            trust_env=False,
            event_hooks={"response": [self._on_response]},
        ) as http:
            transport = streamable_http_client(self.url, http_client=http)
            async with Client(
                transport,
                mode=self.mode,
                cache=None,  # every call must reach the server
                read_timeout_seconds=self.timeout,
                client_info=Implementation(name=self.client_name, version="0.0.0"),
            ) as client:
                yield client

    def connect(self) -> "McpAgent":
        try:
            self._portal = self._stack.enter_context(start_blocking_portal())
            cm: AbstractContextManager[Client] = self._portal.wrap_async_context_manager(self._open())
            self._client = self._translate(lambda: self._stack.enter_context(cm))
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        self._client = None
        try:
            self._stack.close()
        except Exception:
            pass  # teardown after a failed call must not mask the test's real error
        self._portal = None

    def __enter__(self) -> "McpAgent":
        return self.connect()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _translate(self, fn: Callable[[], T]) -> T:
        seen = len(self.http_errors)
        try:
            return fn()
        except Exception as e:
            leaf = _unwrap(e)
            # Only POSTs carry requests; a failed background GET stream is not this call's answer.
            posts = [r for r in self.http_errors[seen:] if r.method == "POST"]
            if posts:
                raise Denied(posts[-1]) from leaf
            if isinstance(leaf, _TRANSPORT_ERRORS):
                raise TransportFailure(f"{type(leaf).__name__}: {leaf}") from leaf
            if leaf is not e:
                raise leaf from e
            raise

    def run(self, fn: Callable[[Client], Awaitable[T]]) -> T:
        """Run `await fn(client)` on the agent's loop (for SDK calls not wrapped below)."""
        if self._portal is None or self._client is None:
            raise RuntimeError("McpAgent is not connected")
        portal, client = self._portal, self._client
        return self._translate(lambda: portal.call(fn, client))

    # MCP operations ------------------------------------------------------------
    @property
    def client(self) -> Client:
        if self._client is None:
            raise RuntimeError("McpAgent is not connected")
        return self._client

    @property
    def server_name(self) -> str | None:
        info = self.client.server_info
        return info.name if info else None

    @property
    def protocol_version(self) -> str:
        return self.client.protocol_version

    def ping(self) -> Any:
        return self.run(lambda c: c.send_ping())

    def list_tools(self) -> Any:
        return self.run(lambda c: c.list_tools())

    def tool_names(self) -> list[str]:
        return [t.name for t in self.list_tools().tools]

    def call_tool(self, name: str, arguments: dict[str, Any] | None = None, *, validate: bool = False) -> Any:
        """Send exactly one tools/call. With validate=True use the SDK's `Client.call_tool`, which
        also checks structured output and, for a tool not listed yet, first sends tools/list."""
        if validate:
            return self.run(lambda c: c.call_tool(name, arguments or {}))
        req = types.CallToolRequest(params=types.CallToolRequestParams(name=name, arguments=arguments or {}))
        return self.run(lambda c: c.session.send_request(req, types.CallToolResult))

    def list_prompts(self) -> Any:
        return self.run(lambda c: c.list_prompts())

    def get_prompt(self, name: str, arguments: dict[str, str] | None = None) -> Any:
        return self.run(lambda c: c.get_prompt(name, arguments))

    def list_resources(self) -> Any:
        return self.run(lambda c: c.list_resources())

    def read_resource(self, uri: str) -> Any:
        return self.run(lambda c: c.read_resource(uri))


def text_of(result: Any) -> str:
    """Concatenated text content of a CallToolResult / GetPromptResult / ReadResourceResult."""
    parts: list[str] = []
    for item in getattr(result, "content", None) or getattr(result, "contents", None) or []:
        if getattr(item, "text", None) is not None:
            parts.append(item.text)
    for msg in getattr(result, "messages", None) or []:
        if getattr(msg.content, "text", None) is not None:
            parts.append(msg.content.text)
    return "".join(parts)


# ---------------------------------------------------------------------------
# Raw HTTP helpers (for hostile inputs the SDK would never send)

HeadersArg = Mapping[str, str | None] | Sequence[tuple[str, str]] | None


def rpc(method: str, params: Any = None, id: int | str | None = 1) -> dict[str, Any]:
    """A JSON-RPC 2.0 message; id=None makes it a notification."""
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if id is not None:
        msg["id"] = id
    if params is not None:
        msg["params"] = params
    return msg


def initialize_params(protocol_version: str = DEFAULT_PROTOCOL_VERSION, name: str = "raw-client") -> dict[str, Any]:
    return {"protocolVersion": protocol_version, "capabilities": {}, "clientInfo": {"name": name, "version": "0"}}


def _merge_headers(defaults: Mapping[str, str], headers: HeadersArg) -> list[tuple[str, str]]:
    """Defaults overridden case-insensitively by `headers`; a None value drops the header.
    A sequence of pairs is sent as given (duplicates kept), after any defaults it does not name."""
    if headers is None:
        return list(defaults.items())
    pairs = list(headers.items()) if isinstance(headers, Mapping) else list(headers)
    named = {k.lower() for k, _ in pairs}
    out = [(k, v) for k, v in defaults.items() if k.lower() not in named]
    return out + [(k, v) for k, v in pairs if v is not None]


def request(
    method: str,
    url: str,
    *,
    body: bytes | str | Any = None,
    headers: HeadersArg = None,
    cert: CertArg = None,
    ca: CaArg = None,
    token: str | None = None,
    timeout: float = 10.0,
    default_headers: Mapping[str, str] | None = None,
) -> HttpResult:
    """One HTTP request; returns whatever status came back (no raising on 4xx/5xx).
    `body`: bytes/str sent verbatim, anything else JSON-encoded. No answer → TransportFailure."""
    if body is None or isinstance(body, bytes):
        content = body
    elif isinstance(body, str):
        content = body.encode()
    else:
        content = json.dumps(body).encode()
    defaults = dict(default_headers or {})
    if token is not None:
        defaults["authorization"] = f"Bearer {token}"
    verify: ssl.SSLContext | bool = ssl_context(ca, cert) if url.startswith("https") else False
    try:
        with httpx2.Client(verify=verify, timeout=timeout, trust_env=False) as http:
            resp = http.request(method, url, content=content, headers=_merge_headers(defaults, headers))
            return HttpResult(resp.status_code, _headers_of(resp), resp.content, method)
    except _TRANSPORT_ERRORS as e:
        raise TransportFailure(f"{type(e).__name__}: {e}") from e


def post_jsonrpc(
    url: str,
    body: bytes | str | Any,
    headers: HeadersArg = None,
    *,
    cert: CertArg = None,
    ca: CaArg = None,
    token: str | None = None,
    protocol_version: str | None = DEFAULT_PROTOCOL_VERSION,
    timeout: float = 10.0,
) -> HttpResult:
    """POST a JSON-RPC body the way an MCP client would (content-type, accept, MCP-Protocol-Version)."""
    defaults = {"content-type": "application/json", "accept": MCP_ACCEPT}
    if protocol_version is not None:
        defaults["mcp-protocol-version"] = protocol_version
    return request(
        "POST", url, body=body, headers=headers, cert=cert, ca=ca, token=token, timeout=timeout,
        default_headers=defaults,
    )


def get(url: str, headers: HeadersArg = None, **kw: Any) -> HttpResult:
    return request("GET", url, headers=headers, default_headers={"accept": MCP_ACCEPT}, **kw)


def delete(url: str, headers: HeadersArg = None, **kw: Any) -> HttpResult:
    return request("DELETE", url, headers=headers, **kw)
