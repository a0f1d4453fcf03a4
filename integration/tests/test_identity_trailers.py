"""Identity headers forged in request trailers (docs/semantics.md §5.7), in real Envoy 1.40.

A client may send a header after the body, as an HTTP/2 trailer; Envoy passes request trailers on
to an HTTP/2 upstream. The filter removes every identity header name (and each spelling read as one
when `_` is read as `-`) from the trailers by the same removals it makes in the headers, so the MCP
server only ever reads the identity the filter set. Other trailers pass. The upstream here is a
small h2c server that records each request's headers and trailers as it received them.
"""

from __future__ import annotations

import json
import socket
import threading
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
                         listeners={"plain": Listen()}) as s:
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
