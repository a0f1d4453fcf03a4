"""Loopback port allocation and readiness waits."""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_lock = threading.Lock()
_handed_out: set[int] = set()


def free_port(host: str = "127.0.0.1") -> int:
    """A currently free TCP port on `host` (the kernel picks it; never the same one twice per process)."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        with _lock:
            if port not in _handed_out:
                _handed_out.add(port)
                return port
    raise RuntimeError("could not find a fresh free port")


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    return [free_port(host) for _ in range(n)]


def port_open(port: int, host: str = "127.0.0.1", timeout: float = 0.2) -> bool:
    """True if something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_for_port(port: int, host: str = "127.0.0.1", timeout: float = 10.0) -> None:
    """Block until host:port accepts a TCP connection; TimeoutError otherwise."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if port_open(port, host):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing accepted connections on {host}:{port} within {timeout}s")


class BackgroundHttpServer:
    """An HTTP server on 127.0.0.1 (a free port) answering with `handler` on daemon threads, for
    test upstreams and authorizers written in the test itself. Call close() when done."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def json_reply(handler: Any, body: bytes, status: int = 200, content_type: str = "application/json") -> None:
    """Answers a BaseHTTPRequestHandler request with `body` (Content-Length framed)."""
    handler.send_response(status)
    handler.send_header("content-type", content_type)
    handler.send_header("content-length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)
