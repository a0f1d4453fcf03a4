"""A real gRPC ext_authz authorizer (grpcio + the Envoy API messages of PyPI `xds-protos`) that
records every CheckRequest and answers each as the request's `x-authz` header asks, plus a TCP
server that resets every connection.

`x-authz` (read from the CheckRequest's headers, so the client chooses per request):
  allow (default)          OK; edits upstream headers (see `ok_response`), dynamic metadata
  deny:<http status>       status PERMISSION_DENIED, denied_response with that status, a
                           `www-authenticate` header and the body `denied by <policy>`
  bigdeny:<bytes>          a denial (401) whose body has that many bytes
  grpc:<code name>         the call fails with that gRPC status (e.g. grpc:UNAVAILABLE)
  sleep:<seconds>          answers OK after sleeping (past the filter's timeout)
  garbage                  answers bytes that are not a CheckResponse
The policy is read from context_extensions[mcp_access_policy] when the filter calls, and is
"native" when Envoy's own ext_authz calls (it sends no context extensions). With `decide`, that
function chooses instead: it gets the CheckRequest and returns an `x-authz` value.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from concurrent import futures
from collections.abc import Callable
from typing import Any

import grpc
from envoy.config.core.v3 import base_pb2
from envoy.service.auth.v3 import external_auth_pb2
from envoy.type.v3 import http_status_pb2
from google.protobuf import struct_pb2
from google.rpc import code_pb2, status_pb2

SERVICE = "envoy.service.auth.v3.Authorization"


def _hvo(key: str, value: str, **kw: Any) -> base_pb2.HeaderValueOption:
    return base_pb2.HeaderValueOption(header=base_pb2.HeaderValue(key=key, value=value), **kw)


class GrpcAuthorizer:
    """In-process grpcio server on 127.0.0.1 (HTTP/2 plaintext). `checks` holds every
    CheckRequest received, in order."""

    def __init__(self, decide: Callable[[external_auth_pb2.CheckRequest], str] | None = None) -> None:
        self.decide = decide
        self.checks: list[external_auth_pb2.CheckRequest] = []
        self._lock = threading.Lock()
        handler = grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "Check": grpc.unary_unary_rpc_method_handler(
                    self._check,
                    request_deserializer=external_auth_pb2.CheckRequest.FromString,
                    response_serializer=lambda b: b,  # _check returns bytes (garbage on purpose)
                )
            },
        )
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        self.server.add_generic_rpc_handlers((handler,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def reset(self) -> None:
        with self._lock:
            self.checks.clear()

    def recorded(self) -> list[external_auth_pb2.CheckRequest]:
        with self._lock:
            return list(self.checks)

    def close(self) -> None:
        self.server.stop(grace=None)

    def _check(self, req: external_auth_pb2.CheckRequest, ctx: grpc.ServicerContext) -> bytes:
        with self._lock:
            self.checks.append(req)
        attrs = req.attributes
        ask = self.decide(req) if self.decide else attrs.request.http.headers.get("x-authz", "allow")
        policy = attrs.context_extensions.get("mcp_access_policy", "native")
        kind, _, arg = ask.partition(":")
        if kind == "grpc":
            ctx.abort(getattr(grpc.StatusCode, arg), f"asked for {arg}")
        if kind == "sleep":
            time.sleep(float(arg))
        if kind == "garbage":
            return b"\xff\xff\xff\xff garbage"
        if kind == "bigdeny":
            resp = external_auth_pb2.CheckResponse(
                status=status_pb2.Status(code=code_pb2.PERMISSION_DENIED),
                denied_response=external_auth_pb2.DeniedHttpResponse(
                    status=http_status_pb2.HttpStatus(code=401), body="d" * int(arg)),
            )
            return resp.SerializeToString()
        if kind == "deny":
            resp = external_auth_pb2.CheckResponse(
                status=status_pb2.Status(code=code_pb2.PERMISSION_DENIED),
                denied_response=external_auth_pb2.DeniedHttpResponse(
                    status=http_status_pb2.HttpStatus(code=int(arg or 403)),
                    headers=[_hvo("www-authenticate", f'Bearer realm="{policy}"')],
                    body=f"denied by {policy}",
                ),
            )
            return resp.SerializeToString()
        meta = struct_pb2.Struct()
        meta.update({"policy": policy, "checked": True})
        resp = external_auth_pb2.CheckResponse(
            status=status_pb2.Status(code=code_pb2.OK),
            ok_response=external_auth_pb2.OkHttpResponse(headers=self.ok_headers(policy), headers_to_remove=["x-remove-me"]),
            dynamic_metadata=meta,
        )
        return resp.SerializeToString()

    @staticmethod
    def ok_headers(policy: str) -> list[base_pb2.HeaderValueOption]:
        """Upstream edits of an OK answer: `x-authz-set` overwritten with the policy,
        `x-authz-trail` appended to, `x-authz-default` added only if absent."""
        action = base_pb2.HeaderValueOption
        return [
            _hvo("x-authz-set", policy, append_action=action.OVERWRITE_IF_EXISTS_OR_ADD),
            _hvo("x-authz-trail", policy, append_action=action.APPEND_IF_EXISTS_OR_ADD),
            _hvo("x-authz-default", policy, append_action=action.ADD_IF_ABSENT),
        ]


class ResettingServer:
    """Accepts TCP connections, reads a little, and resets them (RST via SO_LINGER 0)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self._stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            try:
                conn.settimeout(1.0)
                conn.recv(65536)
            except OSError:
                pass
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()

    def close(self) -> None:
        self._stop = True
        self.sock.close()
