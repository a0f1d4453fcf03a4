"""Authorizer answers are checked before they are applied (docs/semantics.md §3.5), in real Envoy
1.40 with a real grpcio authorizer and a raw HTTP/1.1 authorizer that answer exactly the bytes
each test asks for.

An answer asking for a header that is never applied (pseudo-headers, `host`, framing and
hop-by-hop headers, `proxy-*`), a header value holding CR, LF, NUL or another control, or a gRPC answer whose status
and response disagree, is malformed: under failureMode Deny the client gets the JSON-RPC denial and
the MCP server never sees the call; under Allow the call goes through with nothing of the answer
applied. Either way the callout is counted as an error and logged, and the next request through
the same Envoy (the same upstream connection) is fine.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from envoy.config.core.v3 import base_pb2
from envoy.service.auth.v3 import external_auth_pb2 as ext
from envoy.type.v3 import http_status_pb2
from google.rpc import code_pb2, status_pb2

from harness import Cluster, HttpResult, McpServerProc, Route, rpc
from harness import bundles as b
from harness.stack import Listen, Stack

TIMEOUT_MS = 2000
OVERWRITE = base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD


def _hvo(key: str, value: str) -> base_pb2.HeaderValueOption:
    return base_pb2.HeaderValueOption(header=base_pb2.HeaderValue(key=key, value=value), append_action=OVERWRITE)


def _ok(*headers: tuple[str, str], remove: tuple[str, ...] = (), **extra: Any) -> ext.CheckResponse:
    """OK, setting x-user: alice upstream before `headers` (none of it may be applied if one is bad)."""
    return ext.CheckResponse(
        status=status_pb2.Status(code=code_pb2.OK),
        ok_response=ext.OkHttpResponse(headers=[_hvo("x-user", "alice"), *(_hvo(k, v) for k, v in headers)],
                                       headers_to_remove=list(remove)),
        **extra)


def _deny(*headers: tuple[str, str]) -> ext.CheckResponse:
    return ext.CheckResponse(
        status=status_pb2.Status(code=code_pb2.PERMISSION_DENIED),
        denied_response=ext.DeniedHttpResponse(status=http_status_pb2.HttpStatus(code=401),
                                               headers=[_hvo(k, v) for k, v in headers], body="denied"))


# What the gRPC authorizer answers, by the request's `x-answer` header: a list of messages.
GRPC_ANSWERS: dict[str, list[ext.CheckResponse | bytes]] = {
    "ok": [_ok()],
    "content-length": [_ok(("content-length", "0"))],
    "transfer-encoding": [_ok(("transfer-encoding", "chunked"))],
    "host": [_ok(("host", "evil.example"))],
    ":path": [_ok((":path", "/admin"))],
    "connection": [_ok(("connection", "close"))],
    "proxy-authorization": [_ok(("proxy-authorization", "Basic eDp5"))],
    "crlf": [_ok(("x-role", "user\r\nx-admin: true"))],
    "nul": [_ok(("x-role", "user\0"))],
    "control": [_ok(("x-role", "user\x01"))],
    "del": [_ok(("x-role", "user\x7f"))],
    "bad-name": [_ok(("x role", "user"))],
    "remove-content-length": [_ok(remove=("content-length",))],
    "ok-and-denied": [_ok(denied_response=ext.DeniedHttpResponse(status=http_status_pb2.HttpStatus(code=403)))],
    # CheckResponse field 5, error_response (newer than the xds-protos messages): an empty one.
    "ok-and-error": [_ok().SerializeToString() + b"\x2a\x00"],
    "denial-crlf": [_deny(("www-authenticate", "Bearer\r\nset-cookie: s=1"))],
    "denial-content-length": [_deny(("content-length", "0"))],
    # Two messages on a unary call (see test_two_grpc_messages_...).
    "deny-then-ok": [_deny(("www-authenticate", "Bearer")), _ok()],
    "ok-then-deny": [_ok(), _deny(("www-authenticate", "Bearer"))],
}

# Raw HTTP/1.1 answers of the HTTP authorizer, by `x-answer`.
HTTP_ANSWERS: dict[str, bytes] = {
    "ok": b"HTTP/1.1 200 OK\r\nx-user: alice\r\ncontent-length: 0\r\n\r\n",
    "chunked": b"HTTP/1.1 200 OK\r\nx-user: alice\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n",
    "close": b"HTTP/1.1 200 OK\r\nx-user: alice\r\nconnection: close\r\ncontent-length: 0\r\n\r\n",
    "host": b"HTTP/1.1 200 OK\r\nx-user: alice\r\nhost: evil.example\r\ncontent-length: 0\r\n\r\n",
    "proxy-authorization": b"HTTP/1.1 200 OK\r\nx-user: alice\r\nproxy-authorization: Basic eDp5\r\ncontent-length: 0\r\n\r\n",
    "cr": b"HTTP/1.1 200 OK\r\nx-user: alice\rx-admin: true\r\ncontent-length: 0\r\n\r\n",
    "nul": b"HTTP/1.1 200 OK\r\nx-user: alice\0\r\ncontent-length: 0\r\n\r\n",
    "denial-host": b"HTTP/1.1 401 Unauthorized\r\nwww-authenticate: Bearer\r\nhost: evil.example\r\ncontent-length: 0\r\n\r\n",
}


class GrpcAnswers:
    """A grpcio server whose Check handler is unary-stream, so that it can send any number of
    messages on Envoy's unary call; it answers GRPC_ANSWERS[x-answer]."""

    def __init__(self) -> None:
        def check(req: ext.CheckRequest, ctx: grpc.ServicerContext) -> Iterator[bytes]:
            answer = req.attributes.request.http.headers.get("x-answer", "ok")
            for message in GRPC_ANSWERS[answer]:
                yield message if isinstance(message, bytes) else message.SerializeToString()

        handler = grpc.method_handlers_generic_handler("envoy.service.auth.v3.Authorization", {
            "Check": grpc.unary_stream_rpc_method_handler(
                check, request_deserializer=ext.CheckRequest.FromString, response_serializer=lambda b: b)})
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        self.server.add_generic_rpc_handlers((handler,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def close(self) -> None:
        self.server.stop(grace=None)


class HttpAnswers:
    """An HTTP/1.1 authorizer on a raw socket (so it can send bytes no HTTP library would):
    answers HTTP_ANSWERS[x-answer], keeping the connection unless the answer closes it."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in buf:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                head, _, buf = buf.partition(b"\r\n\r\n")
                fields = dict(l.split(b":", 1) for l in head.split(b"\r\n")[1:] if b":" in l)
                fields = {k.strip().lower(): v.strip() for k, v in fields.items()}
                length = int(fields.get(b"content-length", b"0"))
                while len(buf) < length:
                    buf += conn.recv(65536)
                buf = buf[length:]
                answer = HTTP_ANSWERS[fields.get(b"x-answer", b"ok").decode()]
                conn.sendall(answer)
                if b"connection: close" in answer:
                    return

    def close(self) -> None:
        self.sock.close()


def bundle(ports: dict[str, int]) -> dict[str, Any]:
    listed = ["x-user", "x-role", "content-length", "transfer-encoding", "connection", "host",
              "proxy-authorization"]
    asks = ["x-answer"]
    authorizers = [
        b.authorizer("grpc-deny", "grpc-answers", TIMEOUT_MS, protocol="GRPC", allowedHeaders=asks),
        b.authorizer("grpc-allow", "grpc-answers", TIMEOUT_MS, protocol="GRPC", allowedHeaders=asks,
                     failureMode="Allow"),
        # allowedResponseHeaders names the framing headers too: they are still never applied.
        b.authorizer("http-deny", "http-answers", TIMEOUT_MS, allowedHeaders=asks, allowedResponseHeaders=listed),
        b.authorizer("http-allow", "http-answers", TIMEOUT_MS, allowedHeaders=asks, allowedResponseHeaders=listed,
                     failureMode="Allow"),
    ]
    policies = [
        b.policy(a["name"], "Gateway", "gw", "ExternalAuth", externalAuth=a["name"], seniority=i,
                 rules=[b.rule("r", b.header("x-scenario", a["name"]))])
        for i, a in enumerate(authorizers)
    ]
    return b.bundle(identity=b.identity(), gateways=[b.gateway({"l": ports["mcp"]})],
                    backends=[b.backend("tools", "tools-route")], authorizers=authorizers, policies=policies)


def native_ext_authz() -> dict[str, Any]:
    """Envoy's own ext_authz filter on the same gRPC authorizer (no mcp-access)."""
    return {"name": "envoy.filters.http.ext_authz", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz",
        "grpc_service": {"envoy_grpc": {"cluster_name": "grpc-answers"}, "timeout": f"{TIMEOUT_MS / 1000}s"},
        "transport_api_version": "V3", "failure_mode_allow": False}}


def post(stack: Stack, scenario: str, answer: str, text: str = "hi", listener: str = "mcp") -> HttpResult:
    """tools/call echo, tagged for stack.decision(); the authorizer answers as `answer` says."""
    stack.servers["tools"].reset()
    call = rpc("tools/call", {"name": "echo", "arguments": {"text": text}}, id=11)
    return stack.post(call, listener=listener, tag=True, timeout=5,
                      headers={"x-scenario": scenario, "x-answer": answer})


def upstream(stack: Stack) -> dict[str, Any]:
    calls = [r for r in stack.servers["tools"].requests() if r.get("mcp_method") == "tools/call"]
    assert len(calls) == 1, calls
    return calls[0]


@pytest.fixture(scope="module")
def stack(work_dir: Path, mcp_server: McpServerProc, wasm_path: Path) -> Iterator[Stack]:
    grpc_answers, http_answers = GrpcAnswers(), HttpAnswers()
    listeners = {"mcp": Listen(), "native": Listen(filter=False, extra_filters=[native_ext_authz()])}
    upstreams = [Cluster("tools", port=mcp_server.port), Cluster("grpc-answers", port=grpc_answers.port, http2=True),
                 Cluster("http-answers", port=http_answers.port)]
    try:
        with Stack.start("answers", work_dir=work_dir, wasm=wasm_path, bundle=bundle,
                         routes=[Route("tools-route", "/mcp", "tools")], upstreams=upstreams, listeners=listeners,
                         servers={"tools": mcp_server}, path="/mcp") as s:
            yield s
    finally:
        grpc_answers.close()
        http_answers.close()


def assert_well_formed_call(stack: Stack, scenario: str, text: str) -> None:
    """A good answer right after: allowed, x-user applied, the whole body upstream."""
    r = post(stack, scenario, "ok", text=text)
    assert r.status == 200 and text in r.text, r.text
    up = upstream(stack)
    assert up["headers"]["x-user"] == "alice", up["headers"]
    assert json.loads(up["body"])["params"]["arguments"]["text"] == text


def assert_malformed(stack: Stack, protocol: str, answer: str, mode: str, logged: bool = True) -> None:
    scenario = f"{protocol}-{mode.lower()}"
    before = stack.counter("callout.errors")
    r = post(stack, scenario, answer)
    if mode == "Deny":
        assert r.status == 403, (answer, r.status, r.text)
        assert r.json()["error"]["code"] == -32010 and r.json()["id"] == 11, r.text
        assert "www-authenticate" not in r.headers and "set-cookie" not in r.headers
        assert stack.decision()["reason"] == "authorizer_error"
        assert stack.servers["tools"].tool_calls() == [], "the MCP server never sees the call"
    else:
        assert r.status == 200 and "hi" in r.text, (answer, r.status, r.text)
        up = upstream(stack)
        for name in ("x-user", "x-role", "x-admin", "proxy-authorization", "set-cookie"):
            assert name not in up["headers"], (answer, up["headers"])
        assert up["headers"]["content-length"] == str(len(up["body"].encode())), up["headers"]
        assert "transfer-encoding" not in up["headers"] and up["headers"]["host"] != "evil.example"
        assert stack.decision()["decision"] == "allow"
    assert stack.counter("callout.errors") == before + 1, answer
    if logged:
        assert f"authorizer {protocol}-{mode.lower()}: malformed answer" in stack.envoy.log_text()
    assert_well_formed_call(stack, scenario, f"after {answer}")


MALFORMED_GRPC = ["content-length", "transfer-encoding", "host", ":path", "connection", "proxy-authorization",
                  "crlf", "nul", "control", "del", "bad-name", "remove-content-length", "ok-and-denied", "ok-and-error",
                  "denial-crlf", "denial-content-length"]


@pytest.mark.parametrize("mode", ["Deny", "Allow"])
@pytest.mark.parametrize("answer", MALFORMED_GRPC)
def test_a_malformed_grpc_answer_takes_the_failure_mode_and_nothing_is_applied(
        stack: Stack, answer: str, mode: str) -> None:
    assert_malformed(stack, "grpc", answer, mode)


@pytest.mark.parametrize("mode", ["Deny", "Allow"])
@pytest.mark.parametrize("answer", ["host", "proxy-authorization", "denial-host"])
def test_a_malformed_http_answer_takes_the_failure_mode_and_nothing_is_applied(
        stack: Stack, answer: str, mode: str) -> None:
    assert_malformed(stack, "http", answer, mode)


@pytest.mark.parametrize("mode", ["Deny", "Allow"])
def test_an_http_answer_with_nul_in_a_value_takes_the_failure_mode(stack: Stack, mode: str) -> None:
    # Envoy's HTTP/1 codec refuses the answer before the filter sees it: a failed callout.
    assert_malformed(stack, "http", "nul", mode, logged=False)


def test_envoy_drops_a_bare_cr_from_an_http_answer(stack: Stack) -> None:
    # A CR or LF cannot reach the filter in an HTTP/1 answer: LF ends the line, and Envoy's codec
    # removes a bare CR from the value (no x-admin header is made of it).
    r = post(stack, "http-deny", "cr")
    assert r.status == 200, r.text
    up = upstream(stack)["headers"]
    assert up["x-user"] == "alicex-admin: true" and "x-admin" not in up, up


@pytest.mark.parametrize("answer", ["ok", "chunked", "close"])
def test_an_http_answers_own_framing_never_reaches_upstream(stack: Stack, answer: str) -> None:
    # allowedResponseHeaders lists content-length, transfer-encoding and connection: still the
    # answer's own framing, never applied (content-length: 0 upstream would cut the body).
    before = stack.counter("callout.errors")
    for i in range(2):
        r = post(stack, "http-deny", answer, text=f"{answer} {i}")
        assert r.status == 200 and f"{answer} {i}" in r.text, r.text
        up = upstream(stack)
        assert up["headers"]["x-user"] == "alice"
        assert up["headers"]["content-length"] == str(len(up["body"].encode())), up["headers"]
        assert "transfer-encoding" not in up["headers"] and up["headers"].get("connection") != "close"
    assert stack.counter("callout.errors") == before


def test_a_grpc_answer_of_two_messages_is_malformed_for_the_filter(stack: Stack) -> None:
    """A unary Check answered with two messages is malformed (docs/semantics.md §3.5): the filter
    calls gRPC authorizers as HTTP/2 callouts and reads every length-prefixed message, so the
    failure mode applies (here Deny: the filter's own 403), whatever the order. Envoy's own
    ext_authz filter (the native listener) keeps only the last message
    (AsyncRequestImpl::onReceiveMessageRaw overwrites it): pinned so that a change shows."""
    before = stack.counter("callout.errors")
    for answer in ("ok-then-deny", "deny-then-ok"):
        r = post(stack, "grpc-deny", answer, listener="mcp")
        assert r.status == 403 and stack.servers["tools"].tool_calls() == [], (answer, r.text)
        assert "-32010" in r.text and "www-authenticate" not in r.headers, r.headers
    assert stack.counter("callout.errors") == before + 2
    assert "a gRPC answer of 2 messages" in stack.envoy.log_text()
    r = post(stack, "grpc-deny", "ok-then-deny", listener="native")
    assert r.status == 401 and stack.servers["tools"].tool_calls() == [], r.text
    r = post(stack, "grpc-deny", "deny-then-ok", listener="native")
    assert r.status == 200 and stack.servers["tools"].tool_calls() == ["echo"], r.text
