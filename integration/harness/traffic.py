"""Mixed MCP traffic with an oracle, for policy swaps under load (tests/test_ecds.py) and the
soak (scripts/soak).

Workers send JSON-RPC POSTs over HTTP/1.1, h2c (HTTP/2 with prior knowledge) or mTLS, each on
its own keep-alive connection, and record every request: kind, protocol, start and end time,
status and JSON-RPC error code. Kinds:

- `allowed`: a tools/call every policy version allows (200 from the server);
- `denied`: a tools/call no version allows (403, -32010);
- `flip`: a tools/call some versions allow and others deny;
- `hostile`: a body the filter must reject whatever the policy (400: duplicate keys).

The oracle knows, per policy version, whether `flip` is allowed and when that version could
have been serving: from its publication until the next version was seen serving (a probe).
A request is right if its answer is the one of a version whose window overlaps the request.
"""

from __future__ import annotations

import itertools
import json
import ssl
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx2

ACCEPT = "application/json, text/event-stream"
ALLOWED_TOOL, DENIED_TOOL, FLIP_TOOL = "echo", "delete_repo", "add"
ARGS = {"echo": {"text": "hi"}, "delete_repo": {"name": "prod"}, "add": {"a": 1, "b": 2}}


def call_body(tool: str, rid: int) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                       "params": {"name": tool, "arguments": ARGS[tool]}}).encode()


def hostile_body(rid: int) -> bytes:
    # Two "method" keys: strict JSON parsing rejects it before any policy is consulted.
    return (f'{{"jsonrpc":"2.0","id":{rid},"method":"tools/call","method":"tools/list",'
            f'"params":{{"name":"{ALLOWED_TOOL}","arguments":{{}}}}}}').encode()


KINDS = ("allowed", "denied", "flip", "hostile")


@dataclass
class Sent:
    kind: str
    proto: str
    t0: float
    t1: float
    status: int | None  # None: the request failed (connection error, timeout)
    code: int | None = None  # JSON-RPC error code of the answer, if any
    error: str = ""


def client(proto: str, *, ca: Any = None, cert: Any = None, timeout: float = 10.0) -> httpx2.Client:
    if proto == "h2c":
        return httpx2.Client(http1=False, http2=True, timeout=timeout)
    if proto == "mtls":
        ctx = ssl.create_default_context(cafile=str(ca))
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
        return httpx2.Client(verify=ctx, timeout=timeout)
    return httpx2.Client(timeout=timeout)


def send(c: httpx2.Client, url: str, kind: str, rid: int, proto: str) -> Sent:
    body = hostile_body(rid) if kind == "hostile" else call_body(
        {"allowed": ALLOWED_TOOL, "denied": DENIED_TOOL, "flip": FLIP_TOOL}[kind], rid)
    t0 = time.monotonic()
    try:
        r = c.post(url, content=body, headers={"content-type": "application/json", "accept": ACCEPT})
        t1 = time.monotonic()
        code = None
        try:
            j = r.json()
            if isinstance(j, dict) and isinstance(j.get("error"), dict):
                code = j["error"].get("code")
        except ValueError:
            pass
        return Sent(kind, proto, t0, t1, r.status_code, code)
    except httpx2.HTTPError as e:
        return Sent(kind, proto, t0, time.monotonic(), None, error=f"{type(e).__name__}: {e}")


@dataclass
class Load:
    """Worker threads sending a round-robin mix of KINDS until stopped."""

    targets: list[tuple[str, str, dict[str, Any]]]  # (proto, url, client kwargs)
    kinds: tuple[str, ...] = KINDS
    results: list[Sent] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _work(self, proto: str, url: str, kw: dict[str, Any], offset: int) -> None:
        with client(proto, **kw) as c:
            for i in itertools.count(offset):
                if self._stop.is_set():
                    return
                s = send(c, url, self.kinds[i % len(self.kinds)], i + 1, proto)
                with self._lock:
                    self.results.append(s)

    def start(self) -> "Load":
        for n, (proto, url, kw) in enumerate(self.targets):
            t = threading.Thread(target=self._work, args=(proto, url, kw, n), daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> list[Sent]:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=30)
        return self.results


@dataclass
class Version:
    name: str
    flip_allowed: bool
    published: float  # monotonic time the file was replaced (-inf: served from the start)
    seen: float | None = None  # when a probe first saw this version decide


def expected(kind: str, flip_allowed: bool) -> tuple[int, int | None]:
    """(status, JSON-RPC error code) the filter answers `kind` with under a version."""
    if kind == "allowed" or (kind == "flip" and flip_allowed):
        return 200, None
    if kind == "hostile":
        return 400, -32600
    return 403, -32010


def judge(results: list[Sent], versions: list[Version], flip_denials: tuple[int, ...] = (403,)) -> dict[str, Any]:
    """Counts per outcome; `failed` (no answer or an answer no version gives) and
    `misdecisions` (an answer only a version that was not serving gives) must be empty.
    `flip_denials`: the statuses a denied `flip` may have (an authorizer's failure modes),
    each with a JSON-RPC error."""
    windows = []
    for k, v in enumerate(versions):
        end = versions[k + 1].seen if k + 1 < len(versions) else None
        windows.append((v.published, float("inf") if end is None else end, v.flip_allowed))
    failed, wrong = [], []
    counts: Counter[str] = Counter()
    for s in results:
        counts[f"{s.proto}/{s.kind}/{s.status}"] += 1
        got = (s.status, s.code)
        if s.kind == "flip" and s.status in flip_denials and s.code is not None:
            got = expected("flip", False)  # a denial, whichever failure mode gave it
        if s.status is None or got not in {expected(s.kind, True), expected(s.kind, False)}:
            failed.append(s)
            continue
        if not any(start <= s.t1 and s.t0 <= end and got == expected(s.kind, allowed) for start, end, allowed in windows):
            wrong.append(s)
    return {"requests": len(results), "counts": dict(sorted(counts.items())), "failed": failed, "misdecisions": wrong}
