#!/usr/bin/env python3
"""A small MCP client on the official Python SDK (`mcp`, pinned in integration/requirements.txt),
for integration/tests/test_clients.py: it connects over Streamable HTTP, runs the operations
given on the command line and prints, one JSON object per line, what the SDK reported for each:
its result, or its error as the SDK raises it (class, str(), and the JSON-RPC code, message and
data of an `mcp.MCPError`).

Usage: python_sdk_client.py URL [--token TOKEN] [--protocol 2025-11-25|2026-07-28] OP...
where OP is `list` (tools/list) or `call:NAME:JSON-ARGUMENTS` (tools/call).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import Client, Implementation, MCPError
from mcp.client.streamable_http import streamable_http_client

from harness.client import _unwrap as leaf  # the MCPError under the SDK's task groups


def report(exc: BaseException) -> dict[str, Any]:
    e = leaf(exc)
    out: dict[str, Any] = {"class": type(e).__name__, "message": str(e)}
    if isinstance(e, MCPError):
        out.update(code=e.error.code, message=e.error.message)
        if e.error.data is not None:
            out["data"] = e.error.data
    return out


async def run(a: argparse.Namespace) -> None:
    headers = {"authorization": f"Bearer {a.token}"} if a.token else {}
    mode = "legacy" if a.protocol == "2025-11-25" else a.protocol
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(10.0), trust_env=False) as http:
        try:
            async with Client(
                streamable_http_client(a.url, http_client=http),
                mode=mode,
                cache=None,
                read_timeout_seconds=10.0,
                client_info=Implementation(name="mcp-access-python-sdk-test", version="0.0.0"),
            ) as client:
                info = client.server_info
                print(json.dumps({"op": "connect", "ok": True, "protocol": client.protocol_version,
                                  "server": info.name if info else None}), flush=True)
                for op in a.ops:
                    print(json.dumps(await one(client, op)), flush=True)
        except Exception as e:  # noqa: BLE001 - what the SDK raised is the measurement
            print(json.dumps({"op": "connect", "ok": False, "error": report(e)}), flush=True)


async def one(client: Client, op: str) -> dict[str, Any]:
    try:
        if op == "list":
            return {"op": op, "ok": True, "tools": [t.name for t in (await client.list_tools()).tools]}
        name, _, args = op.removeprefix("call:").partition(":")
        req = types.CallToolRequest(params=types.CallToolRequestParams(name=name, arguments=json.loads(args or "{}")))
        r = await client.session.send_request(req, types.CallToolResult)
        text = "".join(c.text for c in r.content if getattr(c, "text", None) is not None)
        return {"op": op, "ok": True, "text": text, "is_error": bool(r.is_error)}
    except Exception as e:  # noqa: BLE001
        return {"op": op, "ok": False, "error": report(e)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("url")
    ap.add_argument("ops", nargs="*")
    ap.add_argument("--token")
    ap.add_argument("--protocol", default="2025-11-25", choices=["2025-11-25", "2026-07-28"])
    a = ap.parse_args()
    for op in a.ops:
        if op != "list" and not op.startswith("call:"):
            sys.exit(f"unknown operation {op}: list or call:NAME:JSON")
    anyio.run(run, a)


if __name__ == "__main__":
    main()
