"""AccessPolicies on HTTPRoutes end to end (docs/semantics.md §1.6): two HTTPRoutes (one with two
named rules) lead to the same XBackend; policies target one rule each (by sectionName). Real Envoy
1.40 with the built filter, the demo MCP server (official Python SDK) and the SDK client.

- rule `admin` of route `admin` (/admin/mcp): an Allow policy admitting echo only: echo works, add
  is denied, tools/list shows echo alone;
- rule `ops` of route `admin` (/ops/mcp): an Allow policy for all traffic and a Deny policy for
  add: everything but add, and tools/list leaves add out;
- route `public` (/mcp), no policy of its own: the route-scoped policies of the other rules do not
  apply there, and the XBackend has no other policy, so everything gets through.

Once through `mcp-access envoy` (route names it chooses, `NS/ROUTE/rule-I/match-J`), once with the
bundle `mcp-access manifests --platform envoy-gateway` makes, in an Envoy (the harness Stack) whose
routes and clusters are named as Envoy Gateway names them (one cluster per rule,
`httproute/NS/ROUTE/rule/I`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness import Denied, McpAgent, free_port, start_mcp_server, text_of
from harness.envoy import Cluster, Route
from harness.stack import Listen, Stack
from harness.manifests import BASE_METHODS as BASE, gateway, http_listener
from test_cli_e2e import cli, denials, run_cli  # noqa: F401  (the `cli` fixture)


GATEWAY = gateway(http_listener("main", 8080))

MANIFESTS = f"""\
{GATEWAY}---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: admin, namespace: mcp}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
  - name: admin
    matches: [{{path: {{type: PathPrefix, value: /admin}}}}]
    filters: [{{type: URLRewrite, urlRewrite: {{path: {{type: ReplacePrefixMatch, replacePrefixMatch: /}}}}}}]
    backendRefs: [{{name: tools-server, port: 8000}}]
  - name: ops
    matches: [{{path: {{type: PathPrefix, value: /ops}}}}]
    filters: [{{type: URLRewrite, urlRewrite: {{path: {{type: ReplacePrefixMatch, replacePrefixMatch: /}}}}}}]
    backendRefs: [{{name: tools-server, port: 8000}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: public, namespace: mcp}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /mcp}}}}]
    backendRefs: [{{name: tools-server, port: 8000}}]
---
apiVersion: agentic.networking.x-k8s.io/v0alpha0
kind: XBackend
metadata: {{name: tools, namespace: mcp}}
spec:
  mcp: {{serviceName: tools-server, port: 8000, path: /mcp}}
---
apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {{name: admin-echo-only, namespace: mcp}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: admin, sectionName: admin}}]
  action: Allow
  rules:
  - name: echo
    authorization: {{type: Inline, mcp: {{{BASE}, methods: [{{name: tools/call, params: [echo]}}]}}}}
---
apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {{name: ops-all, namespace: mcp}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: admin, sectionName: ops}}]
  action: Allow
---
apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {{name: ops-no-add, namespace: mcp}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: admin, sectionName: ops}}]
  action: Deny
  rules:
  - name: add
    authorization: {{type: Inline, mcp: {{methods: [{{name: tools/call, params: [add]}}]}}}}
"""

ALL_TOOLS = {"add", "delete_repo", "echo", "get_weather"}


def write_manifests(base: Path) -> Path:
    base.mkdir(parents=True, exist_ok=True)
    path = base / "manifests.yaml"
    path.write_text(MANIFESTS)
    return path


def check_routes(url: Any, server: Any, denied: Any) -> None:
    """The decisions through each rule and route; `url(path)` is the URL of a path on the Gateway,
    `denied(n)` the filter's logged denials once there are n of them."""
    server.reset()
    with McpAgent(url("/admin/mcp")) as agent:
        assert set(agent.tool_names()) == {"echo"}
        assert text_of(agent.call_tool("echo", {"text": "via admin"})) == "via admin"
        with pytest.raises(Denied) as e:
            agent.call_tool("add", {"a": 1, "b": 2})
        assert e.value.status == 403
    with McpAgent(url("/ops/mcp")) as agent:
        assert set(agent.tool_names()) == ALL_TOOLS - {"add"}
        assert text_of(agent.call_tool("echo", {"text": "via ops"})) == "via ops"
        assert agent.call_tool("get_weather", {"city": "Oslo"})
        with pytest.raises(Denied) as e:
            agent.call_tool("add", {"a": 1, "b": 2})
        assert e.value.status == 403
    # No policy of its own: the other rules' route-scoped policies do not apply here.
    with McpAgent(url("/mcp")) as agent:
        assert set(agent.tool_names()) == ALL_TOOLS
        assert agent.call_tool("add", {"a": 1, "b": 2})
    assert server.tool_calls() == ["echo", "echo", "get_weather", "add"]
    # add through admin, add through ops.
    records = denied(2)
    why = {(d["reason"], d["policy"]) for d in records}
    assert why == {("not_allowed", None), ("deny_policy", "mcp/ops-no-add")}, records
    assert all(d["backend"] == "mcp/tools" and d["level"] == "backend" for d in records), records


def test_route_policies_through_mcp_access_envoy(cli: Path, wasm_path: Path, work_dir: Path,  # noqa: F811
                                                 envoy: Any) -> None:
    base = work_dir / "routes" / "envoy"
    manifests = write_manifests(base)
    port, admin = free_port(), free_port()
    with start_mcp_server(base / "logs", name="routes") as server:
        result = run_cli(
            cli, "envoy", "-f", str(manifests), "--wasm", str(wasm_path), "--strict",
            "--resolve", f"tools-server=127.0.0.1:{server.port}", "--listen", f"main={port}",
            "--bind", "127.0.0.1", "--admin-port", str(admin), "--access-log", str(base / "access.log"),
            "--format", "text", "-o", str(base / "envoy.json"), "--bundle-out", str(base / "bundle.json"),
        )
        assert result.returncode == 0, result.stderr
        bundle = json.loads((base / "bundle.json").read_text())
        scoped = {p["name"]: p["targets"][0]["routes"] for p in bundle["policies"]}
        assert scoped == {"admin-echo-only": ["mcp/admin/rule-0/match-0"],
                          "ops-all": ["mcp/admin/rule-1/match-0"],
                          "ops-no-add": ["mcp/admin/rule-1/match-0"]}, scoped
        proxy = envoy(json.loads((base / "envoy.json").read_text()), name="routes")
        check_routes(lambda path: f"http://127.0.0.1:{port}{path}", server, lambda n: denials(proxy, n))


def eg_bundle(cli: Path, manifests: Path) -> dict[str, Any]:  # noqa: F811
    """The bundle of `mcp-access manifests --platform envoy-gateway` (its EnvoyExtensionPolicy)."""
    result = run_cli(cli, "manifests", "-f", str(manifests), "--platform", "envoy-gateway",
                     "--image", "registry.example/mcp-access:1", "--digest", "sha256:" + "0" * 64, "-o", "json")
    assert result.returncode == 0, result.stderr
    items = json.loads(result.stdout)["items"]
    (eep,) = [o for o in items if o["kind"] == "EnvoyExtensionPolicy"]
    return eep["spec"]["wasm"][0]["config"]


def test_route_policies_with_envoy_gateway_names(cli: Path, wasm_path: Path, work_dir: Path) -> None:  # noqa: F811
    """The Envoy Gateway rendering: the filter recognises the backend, and the rule a request took,
    by the per-rule cluster Envoy Gateway makes."""
    base = work_dir / "routes" / "envoy-gateway"
    config = eg_bundle(cli, write_manifests(base))
    scoped = {p["name"]: p["targets"][0]["routes"] for p in config["policies"]}
    assert scoped == {"admin-echo-only": ["httproute/mcp/admin/rule/0"],
                      "ops-all": ["httproute/mcp/admin/rule/1"],
                      "ops-no-add": ["httproute/mcp/admin/rule/1"]}, scoped
    assert config["backends"][0]["routeNames"] == []

    def bundle(ports: dict[str, int]) -> dict[str, Any]:
        b = json.loads(json.dumps(config))
        b["gateways"][0]["listeners"][0]["port"] = ports["main"]
        return b

    # Envoy Gateway's names: routes httproute/NS/ROUTE/rule/I/match/J/HOST, one cluster per rule.
    rules = [("admin", 0, "/admin/"), ("admin", 1, "/ops/"), ("public", 0, "/mcp")]
    routes = [Route(f"httproute/mcp/{r}/rule/{i}/match/0/*", prefix, f"httproute/mcp/{r}/rule/{i}",
                    prefix_rewrite="/" if prefix.endswith("/") else None)
              for r, i, prefix in rules]
    with start_mcp_server(base / "logs", name="routes-eg") as server, \
            Stack.start("routes-eg", work_dir=base, wasm=wasm_path, bundle=bundle, routes=routes,
                        upstreams=[Cluster(f"httproute/mcp/{r}/rule/{i}", port=server.port) for r, i, _ in rules],
                        listeners={"main": Listen()}, servers={"tools": server}) as stack:
        check_routes(lambda path: f"http://127.0.0.1:{stack.port}{path}", server, lambda n: denials(stack.envoy, n))
