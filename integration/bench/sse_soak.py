"""One long SSE stream through the filter at constant memory (issue 40's scale goal).

A `tools/list` POST whose answer is an SSE stream that never ends: an upstream writes a
notification event every `--interval-ms` (and, every `--listing-every` events, a `tools/list`
result for another request id, which the filter parses and passes on). Envoy (one worker, the
filter with listings filtered) sits between; its RSS is sampled every `--sample-s` seconds.
Printed and written as JSON: the samples, and the least-squares slope of RSS over the second
half of the run (the first half warms up allocator arenas and V8), in KiB per hour.

    cd integration && ../.venv/bin/python -m bench.sse_soak --minutes 10 --json /tmp/sse.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import socket
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from harness import Cluster, Route, free_port
from harness import bundles as b
from harness.stack import Listen, Stack

from bench.options import ROOT


def upstream(interval_s: float, listing_every: int, stop: threading.Event) -> ThreadingHTTPServer:
    """An MCP server whose every POST is answered with an endless SSE stream."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("content-length", "0")))
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            n = 0
            try:
                while not stop.is_set():
                    n += 1
                    if n % listing_every == 0:
                        msg = {"jsonrpc": "2.0", "id": 1_000_000 + n, "result": {"tools": [
                            {"name": f"tool-{i}", "inputSchema": {"type": "object"}} for i in range(20)]}}
                    else:
                        msg = {"jsonrpc": "2.0", "method": "notifications/progress",
                               "params": {"progressToken": "soak", "progress": n, "message": "x" * 200}}
                    data = f"event: message\nid: {n}\ndata: {json.dumps(msg)}\n\n".encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()
                    time.sleep(interval_s)
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                pass

        def log_message(self, *args: Any) -> None:
            pass

    class Server(ThreadingHTTPServer):
        def handle_error(self, request: Any, client_address: Any) -> None:
            if not stop.is_set():  # Envoy closing the connection at the end is not an error
                super().handle_error(request, client_address)

    server = Server(("127.0.0.1", free_port()), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def write_result(path: Path | None, result: dict[str, Any], wasm: Path) -> None:
    """Writes a scale run's result as JSON with what the bench report names it by (run.py
    scale_runs): the day it ran (UTC) and the module it measured."""
    if path is None:
        return
    digest = hashlib.sha256(wasm.read_bytes()).hexdigest()[:16]
    stamped = {**result, "date": time.strftime("%Y-%m-%d", time.gmtime()), "module": f"{wasm.name}, sha256 {digest}"}
    path.write_text(json.dumps(stamped, indent=1) + "\n")


def slope_kib_per_hour(samples: list[tuple[float, int]]) -> float:
    half = samples[len(samples) // 2:]
    n = len(half)
    mt = sum(t for t, _ in half) / n
    mr = sum(r for _, r in half) / n
    var = sum((t - mt) ** 2 for t, _ in half)
    return 0.0 if var == 0 else sum((t - mt) * (r - mr) for t, r in half) / var * 3600


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.sse_soak", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--interval-ms", type=float, default=5.0, help="between events")
    ap.add_argument("--listing-every", type=int, default=50, help="every Nth event is a tools/list result")
    ap.add_argument("--sample-s", type=float, default=10.0)
    ap.add_argument("--wasm", type=Path, default=ROOT / "build" / "mcp_access_filter.wasm")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    stop = threading.Event()
    server = upstream(args.interval_ms / 1000, args.listing_every, stop)
    bundle = lambda ports: b.bundle(  # noqa: E731
        gateways=[b.gateway(ports)], backends=[b.backend("tools", "tools-route")],
        policies=[b.policy("allow-all", "Backend", "tools", "Allow", rules=[b.rule("any", {})])])
    route = Route("tools-route", "/tools/", "tools", prefix_rewrite="/", timeout=0)
    with tempfile.TemporaryDirectory(prefix="sse-soak-") as tmp, Stack.start(
            "sse-soak", work_dir=Path(tmp), wasm=args.wasm.resolve(), bundle=bundle, routes=[route],
            upstreams=[Cluster("tools", port=server.server_port)], listeners={"plain": Listen()}) as stack:
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
        sock = socket.create_connection(("127.0.0.1", stack.port))
        sock.sendall(b"POST /tools/mcp HTTP/1.1\r\nhost: gw.example.org\r\ncontent-type: application/json\r\n"
                     b"accept: application/json, text/event-stream\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        received = [0]

        def drain() -> None:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    return
                received[0] += len(chunk)
        threading.Thread(target=drain, daemon=True).start()
        pid = stack.envoy._proc.pid  # noqa: SLF001 - the harness's process
        start, samples = time.monotonic(), []
        while (t := time.monotonic() - start) < args.minutes * 60:
            samples.append((t, rss_kib(pid)))
            print(f"{t:7.0f} s  Envoy RSS {samples[-1][1]:,} KiB  received {received[0]:,} bytes", flush=True)
            time.sleep(args.sample_s)
        stop.set()
    slope = slope_kib_per_hour(samples)
    result = {"minutes": args.minutes, "interval_ms": args.interval_ms, "listing_every": args.listing_every,
              "received_bytes": received[0], "rss_first_kib": samples[0][1], "rss_last_kib": samples[-1][1],
              "rss_max_kib": max(r for _, r in samples), "slope_kib_per_hour_second_half": round(slope, 1),
              "samples": samples}
    print(f"RSS {result['rss_first_kib']:,} -> {result['rss_last_kib']:,} KiB (max {result['rss_max_kib']:,}); "
          f"slope over the second half {slope:+.1f} KiB/hour; {received[0]:,} bytes streamed")
    write_result(args.json, result, args.wasm)
    return 0


if __name__ == "__main__":
    sys.exit(main())
