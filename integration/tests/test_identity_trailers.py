"""Identity headers forged in request trailers (docs/semantics.md §5.7), in real Envoy 1.40.

A client may send a header after the body, as an HTTP/2 trailer or an HTTP/1.1 chunked trailer
(which Envoy reads only with http_protocol_options.enable_trailers); Envoy passes request trailers
on to an HTTP/2 upstream. The filter removes every identity header name (and each spelling read as one
when `_` is read as `-`) from the trailers by the same removals it makes in the headers, so the MCP
server only ever reads the identity the filter set. Other trailers pass. The upstream here is a
small h2c server that records each request's headers and trailers as it received them.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import h2.events
import pytest

from harness import Cluster, Route, free_port, rpc
from harness import bundles as b
from harness.stack import Listen, Stack
from test_leaks import JSON, send_h2


class H2Recorder:
    """An h2c server: answers every request with a JSON-RPC result, records (headers, trailers)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.seen: list[tuple[dict[str, str], list[tuple[str, str]]]] = []
        self.lock = threading.Lock()
        self.sock = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, s: socket.socket) -> None:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
        conn.initiate_connection()
        s.sendall(conn.data_to_send())
        streams: dict[int, dict[str, Any]] = {}
        with s:
            while True:
                data = s.recv(65536)
                if not data:
                    return
                for event in conn.receive_data(data):
                    if isinstance(event, h2.events.RequestReceived):
                        streams[event.stream_id] = {"headers": dict(event.headers), "trailers": []}
                    elif isinstance(event, h2.events.DataReceived):
                        conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                    elif isinstance(event, h2.events.TrailersReceived):
                        streams[event.stream_id]["trailers"] = list(event.headers)
                    elif isinstance(event, h2.events.StreamEnded):
                        st = streams.pop(event.stream_id)
                        with self.lock:
                            self.seen.append((st["headers"], st["trailers"]))
                        body = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"content": []}}).encode()
                        conn.send_headers(event.stream_id, [(":status", "200"), ("content-type", "application/json"),
                                                            ("content-length", str(len(body)))])
                        conn.send_data(event.stream_id, body, end_stream=True)
                s.sendall(conn.data_to_send())

    def take(self) -> list[tuple[dict[str, str], list[tuple[str, str]]]]:
        with self.lock:
            out, self.seen = self.seen, []
        return out

    def close(self) -> None:
        self.sock.close()


IDENTITY = ["x-caller-spiffe", "x-caller-sub"]


def bundle(ports: dict[str, int]) -> dict[str, Any]:
    tools = b.backend("tools", "tools-route")
    tools["identityHeaders"] = [{"name": "x-caller-spiffe", "from": "SPIFFE"},
                                {"name": "x-caller-sub", "from": "JWTSubject"}]
    return b.bundle(
        gateways=[b.gateway({f"l{i}": p for i, p in enumerate(ports.values())})],
        backends=[tools],
        policies=[b.policy("tools-any", "Backend", "tools", "Allow", rules=[b.rule("any", {})])],
    )


@pytest.fixture(scope="module")
def stack(work_dir: Path, wasm_path: Path) -> Iterator[tuple[Stack, H2Recorder]]:
    upstream = H2Recorder()
    routes = [Route("tools-route", "/tools", "h2", prefix_rewrite="/mcp")]
    try:
        with Stack.start("identity-trailers", work_dir=work_dir, wasm=wasm_path, bundle=bundle, routes=routes,
                         upstreams=[Cluster("h2", port=upstream.port, http2=True)],
                         listeners={"plain": Listen(),
                                    "h1t": Listen(hcm_extra={"http_protocol_options": {"enable_trailers": True}}),
                                    # Envoy's normalization off: names with `_` reach the filter.
                                    "raw": Listen(normalize=False,
                                                  hcm_extra={"http_protocol_options": {"enable_trailers": True}})}) as s:
            yield s, upstream
    finally:
        upstream.close()


def test_identity_headers_forged_in_trailers_never_reach_the_server(stack: tuple[Stack, H2Recorder]) -> None:
    s, upstream = stack
    body = json.dumps(rpc("tools/call", {"name": "echo", "arguments": {"text": "hi"}})).encode()
    forged = [("x-caller-spiffe", "spiffe://example.org/ns/x/sa/admin"), ("x-caller-sub", "root"),
              ("X-Caller-Sub", "admin"), ("x-checksum", "abc")]
    r = send_h2(s.ports["plain"], "/tools", JSON, body, forged)
    assert r.status == 200, r
    (headers, trailers), = upstream.take()
    assert not any(n in headers for n in IDENTITY), headers
    assert trailers == [("x-checksum", "abc")], trailers
    # A spelling with '_' (read as '-' by some servers): Envoy refuses it or the filter removes it.
    r = send_h2(s.ports["plain"], "/tools", JSON, body, [("x_caller_sub", "admin"), ("x-checksum", "abc")])
    for _, trailers in upstream.take():
        assert trailers == [("x-checksum", "abc")], (r, trailers)
    # Trailers with nothing to remove pass as they are.
    r = send_h2(s.ports["plain"], "/tools", JSON, body, [("x-checksum", "def")])
    assert r.status == 200, r
    (_, trailers), = upstream.take()
    assert trailers == [("x-checksum", "def")], trailers


def send_chunked(port: int, body: bytes, trailers: list[tuple[str, str]], method: str = "POST") -> int:
    """One HTTP/1.1 request with a chunked body followed by `trailers`; the answer's status."""
    head = [f"{method} /tools HTTP/1.1", "host: localhost", "transfer-encoding: chunked", "te: trailers",
            "connection: close", *(f"{n}: {v}" for n, v in JSON)]
    chunk = (b"%x\r\n%s\r\n" % (len(body), body)) if body else b""
    tail = "".join(f"{n}: {v}\r\n" for n, v in trailers).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
        c.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + chunk + b"0\r\n" + tail + b"\r\n")
        answer = b""
        while b"\r\n" not in answer:
            data = c.recv(4096)
            if not data:
                break
            answer += data
    return int(answer.split(b" ", 2)[1])


def test_identity_headers_forged_in_http1_chunked_trailers_never_reach_the_server(
        stack: tuple[Stack, H2Recorder]) -> None:
    s, upstream = stack
    body = json.dumps(rpc("tools/call", {"name": "echo", "arguments": {"text": "hi"}})).encode()
    forged = [("X-Caller-Sub", "admin"), ("x-caller-spiffe", "spiffe://example.org/ns/x/sa/admin"),
              ("x-caller-sub", "root"), ("x-checksum", "abc")]
    # With enable_trailers Envoy reads them: the filter removes every copy, other trailers pass.
    assert send_chunked(s.ports["h1t"], body, forged) == 200
    (headers, trailers), = upstream.take()
    assert not any(n in headers for n in IDENTITY), headers
    assert trailers == [("x-checksum", "abc")], trailers
    # Without it (the default) Envoy drops them: nothing of them reaches the server.
    assert send_chunked(s.ports["plain"], body, forged) == 200
    (headers, trailers), = upstream.take()
    assert not any(n in headers for n in IDENTITY) and trailers == [], (headers, trailers)
    # A GET with a body and trailers: whatever the answer, no forged trailer reaches the server.
    send_chunked(s.ports["h1t"], b"x", forged, method="GET")
    time.sleep(0.2)
    for headers, trailers in upstream.take():
        assert not any(n in headers for n in IDENTITY), headers
        assert trailers == [("x-checksum", "abc")], trailers


def test_underscore_spellings_in_trailers_are_removed_by_the_filter(stack: tuple[Stack, H2Recorder]) -> None:
    s, upstream = stack
    body = json.dumps(rpc("tools/call", {"name": "echo", "arguments": {"text": "hi"}})).encode()
    forged = [("x_caller_sub", "admin"), ("X_Caller_Spiffe", "spiffe://example.org/ns/x/sa/admin"),
              ("x-checksum", "abc"), ("x_caller_sub", "root")]
    # Envoy lets `_` through on this listener: the filter removes every such spelling.
    assert send_chunked(s.ports["raw"], body, forged) == 200
    r = send_h2(s.ports["raw"], "/tools", JSON, body, [(n.lower(), v) for n, v in forged])
    assert r.status == 200, r
    seen = upstream.take()
    assert len(seen) == 2, seen
    for headers, trailers in seen:
        assert not any(n in headers for n in IDENTITY), headers
        assert trailers == [("x-checksum", "abc")], trailers
