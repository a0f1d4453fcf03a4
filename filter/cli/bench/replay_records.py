#!/usr/bin/env python3
"""Decision records for timing `mcp-access replay`: N log lines (default 10000) as the filter
writes them (`mcp-access decision {...}`, keys as flow/outcome.rs and flow/record.rs write
them) for the demo's manifests (envoy-demo/manifests): agents alpha and beta, by SPIFFE ID on
the mTLS listener and by JWT on the bearer listener, calling the demo's tools.

    filter/cli/bench/replay_records.py 10000 > /tmp/records.log
    mcp-access replay /tmp/records.log -f envoy-demo/manifests \\
        --jwt-provider demo=issuer=https://auth.demo.mcp-access.local,jwks=https://idp.invalid/jwks
"""

import json
import sys

ISSUER = "https://auth.demo.mcp-access.local"
TOOLS = ["echo", "add", "get_weather", "delete_repo"]
METHODS = ["tools/call"] * 4 + ["tools/list", "initialize"]


def record(i: int) -> dict:
    agent = ["alpha", "beta"][i % 2]
    jwt = (i // 2) % 3 == 0
    method = METHODS[(i // 6) % len(METHODS)]
    tool = TOOLS[(i // 36) % len(TOOLS)] if method == "tools/call" else None
    listener = "mcp-jwt" if jwt else "mcp-mtls"
    port = 80 if jwt else 443
    allowed = (agent == "alpha" or tool in (None, "get_weather")) and tool != "delete_repo"
    request = {
        "arguments": None,
        "headers": {},
        "host": "localhost",
        "jwt": {"iss": ISSUER, "sub": agent} if jwt else None,
        "method": "POST",
        "path": "/mcp",
        "port": port,
        "revision": "2025-11-25",
        "route": "demo/tools/rule-0/match-0",
    }
    caller = f"jwt:{ISSUER}#{agent}" if jwt else f"spiffe://cluster.local/ns/agents/sa/{agent}"
    return {
        "backend": "demo/tools",
        "caller": caller,
        "cel_errors": 0,
        "decision": "allow" if allowed else "deny",
        "dry_run": None,
        "jwt": f"{ISSUER}#{agent}" if jwt else None,
        "level": "backend" if allowed or tool == "delete_repo" else "gateway",
        "listener": f"demo/agents-gateway/{listener}",
        "method": method,
        "name": tool,
        "origin": None,
        "policy": "demo/tools-allow-list" if allowed or tool == "delete_repo" else None,
        "reason": "allowed" if allowed else "not_allowed",
        "request": request,
        "rule": "safe-tools" if allowed else None,
        "status": None if allowed else 403,
    }


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
    out = sys.stdout
    for i in range(n):
        out.write("[2026-12-04 10:00:00.000][12][info][wasm] wasm log mcp_access: mcp-access decision ")
        out.write(json.dumps(record(i), sort_keys=True, separators=(",", ":")))
        out.write("\n")


if __name__ == "__main__":
    main()
