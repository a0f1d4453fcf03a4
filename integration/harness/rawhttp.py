"""Requests written byte for byte: HTTP/1.1 over a socket, so paths, repeated headers and Host
values reach Envoy exactly as a hostile client sends them."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass


@dataclass
class Reply:
    status: int
    body: bytes

    @property
    def code(self) -> int | None:
        """The JSON-RPC error code of the body, if it is a JSON-RPC error."""
        try:
            return json.loads(self.body)["error"]["code"]
        except (ValueError, KeyError, TypeError):
            return None

    @property
    def outcome(self) -> tuple[int, int | None]:
        return self.status, self.code


def _dechunk(data: bytes) -> bytes:
    out = b""
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out, data = out + data[:size], data[size + 2:]
    return out


def send_raw(port: int, method: str, path: str, headers: list[tuple[str, str]], body: bytes = b"",
             host: str = "gw.example") -> Reply:
    """One HTTP/1.1 request written as given (no normalization of any kind)."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in headers]
    if body or method == "POST":
        lines.append(f"Content-Length: {len(body)}")
    raw = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(raw)
        data, chunked, status_line = b"", False, "HTTP/1.1 000"
        # Read only what the response holds: Envoy delays closing after a local reply.
        while True:
            head, sep, content = data.partition(b"\r\n\r\n")
            if sep:
                status_line, *header_lines = head.decode("latin-1").split("\r\n")
                hdrs = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
                chunked = hdrs.get("transfer-encoding", "").lower() == "chunked"
                if "content-length" in hdrs and len(content) >= int(hdrs["content-length"]):
                    break
                if chunked and content.endswith(b"0\r\n\r\n"):
                    break
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    if chunked:
        content = _dechunk(content)
    return Reply(int(status_line.split()[1]), content)
