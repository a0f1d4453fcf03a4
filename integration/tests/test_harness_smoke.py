"""Smoke tests of the harness itself: real Envoy (no wasm), real MCP SDK client and server."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness import (
    ALPHA,
    BETA,
    AuthorizerProc,
    Cluster,
    Denied,
    EnvoyProcess,
    JwtKeys,
    JwtProvider,
    Listener,
    McpAgent,
    McpServerProc,
    Pki,
    Route,
    Tls,
    TransportFailure,
    Wasm,
    build_bootstrap,
    ext_authz_filter,
    free_port,
    initialize_params,
    post_jsonrpc,
    render_envoy_config,
    request,
    rpc,
    start_authorizer,
    text_of,
)

StartEnvoy = Callable[..., EnvoyProcess]


def single_listener(
    upstream: McpServerProc, work_dir: Path, listener_name: str, **listener_kw: object
) -> tuple[dict, int]:
    """Bootstrap with one listener routing everything to the demo server; returns (config, port)."""
    port = free_port()
    routes = listener_kw.pop("routes", None) or [Route("all", "/", "upstream")]
    cfg = build_bootstrap(
        admin_port=free_port(),
        listeners=[Listener(listener_name, port, routes, **listener_kw)],  # type: ignore[arg-type]
        clusters=[Cluster("upstream", port=upstream.port)],
        access_log_path=work_dir / f"access-{listener_name}-{port}.log",
    )
    return cfg, port


@pytest.fixture
def authorizer(work_dir: Path) -> Iterator[AuthorizerProc]:
    with start_authorizer(
        work_dir / "logs", name="authz-a", deny_headers=["x-block:yes"], deny_tools=["delete_repo"],
        add_headers=["x-authz-ok:authz-a"],
    ) as a:
        yield a


def test_mtls_proxy_roundtrip_with_sdk_client(
    envoy: StartEnvoy, mcp_server: McpServerProc, pki: Pki, work_dir: Path
) -> None:
    cfg, port = single_listener(mcp_server, work_dir, "mtls", tls=Tls(pki.server, pki.ca))
    env = envoy(cfg)
    mcp_server.reset()

    with McpAgent(f"https://127.0.0.1:{port}/mcp", cert=pki.client(ALPHA), ca=pki.ca) as agent:
        assert agent.server_name == "upstream"
        assert set(agent.tool_names()) >= {"echo", "add", "delete_repo", "get_weather"}
        assert text_of(agent.call_tool("echo", {"text": "hi"})) == "hi"
        assert agent.call_tool("add", {"a": 2, "b": 3}).structured_content == {"result": 5}
        assert [p.name for p in agent.list_prompts().prompts] == ["summarize"]
        assert "Summarize this: doc" in text_of(agent.get_prompt("summarize", {"text": "doc"}))
        assert "README" in text_of(agent.read_resource("file:///docs/readme"))

    seen = mcp_server.requests()
    assert [r["mcp_method"] for r in seen] == [
        "initialize", "notifications/initialized", "tools/list", "tools/call", "tools/call",
        "prompts/list", "prompts/get", "resources/read",
    ]
    assert mcp_server.tool_calls() == ["echo", "add"]
    assert all(r["path"] == "/mcp" and r["method"] == "POST" for r in seen)
    # Envoy forwards the verified client identity (URI SAN) upstream.
    assert all(f"URI={ALPHA}" in r["headers"]["x-forwarded-client-cert"] for r in seen)

    entries = env.wait_access_log(len(seen))
    assert {e["code"] for e in entries} == {200, 202}
    assert {e["peer_uri_san"] for e in entries} == {ALPHA}
    assert all(e["path"] == "/mcp" and e["listener"] == "mtls" for e in entries)
    assert env.stats()["http.mtls.downstream_rq_completed"] >= len(seen)


def test_client_cert_from_untrusted_ca_is_refused_at_tls(
    envoy: StartEnvoy, mcp_server: McpServerProc, pki: Pki, work_dir: Path
) -> None:
    cfg, port = single_listener(mcp_server, work_dir, "mtls", tls=Tls(pki.server, pki.ca))
    env = envoy(cfg)
    mcp_server.reset()
    url = f"https://127.0.0.1:{port}/mcp"
    body = rpc("initialize", initialize_params())

    with pytest.raises(TransportFailure):
        post_jsonrpc(url, body, cert=pki.client(ALPHA, untrusted=True), ca=pki.ca)
    with pytest.raises(TransportFailure):  # no client cert at all
        post_jsonrpc(url, body, ca=pki.ca)
    with pytest.raises(TransportFailure):  # the SDK client fails the same way (not as Denied)
        with McpAgent(url, cert=pki.client(ALPHA, untrusted=True), ca=pki.ca):
            pass

    assert post_jsonrpc(url, body, cert=pki.client(BETA), ca=pki.ca).status == 200
    assert [r["mcp_method"] for r in mcp_server.requests()] == ["initialize"]
    assert env.stats()["listener.127.0.0.1_%d.ssl.fail_verify_error" % port] >= 1


def test_jwt_authn_rejects_unknown_key_and_accepts_valid_token(
    envoy: StartEnvoy, mcp_server: McpServerProc, pki: Pki, jwt_keys: JwtKeys, work_dir: Path
) -> None:
    provider = JwtProvider(jwt_keys.issuer, jwt_keys.jwks_json, audiences=[jwt_keys.audience])
    cfg, port = single_listener(
        mcp_server, work_dir, "jwt", tls=Tls(pki.server, pki.ca, require_client_certificate=False), jwt=[provider]
    )
    envoy(cfg)
    mcp_server.reset()
    url = f"https://127.0.0.1:{port}/mcp"
    body = rpc("initialize", initialize_params())

    with pytest.raises(Denied) as denied:
        with McpAgent(url, ca=pki.ca, token=jwt_keys.mint_untrusted()):
            pass
    assert denied.value.status == 401
    assert "invalid_token" in denied.value.headers["www-authenticate"]
    assert post_jsonrpc(url, body, ca=pki.ca, token=jwt_keys.mint_expired()).status == 401
    assert post_jsonrpc(url, body, ca=pki.ca, token="not.a.jwt").status == 401
    assert mcp_server.requests() == []

    token = jwt_keys.mint({"groups": ["readers", "ops"], "agent": "alpha"}, sub="agent-alpha")
    with McpAgent(url, ca=pki.ca, token=token) as agent:
        assert text_of(agent.call_tool("get_weather", {"city": "Oslo"})) == "sunny in Oslo"
    seen = mcp_server.requests()
    assert mcp_server.tool_calls() == ["get_weather"]
    assert all(r["headers"]["authorization"] == f"Bearer {token}" for r in seen)  # forward: true

    # allow_missing: no token passes through untouched.
    assert post_jsonrpc(url, body, ca=pki.ca).status == 200


def test_prefix_rewrite_route_reaches_upstream_with_rewritten_path(
    envoy: StartEnvoy, mcp_server: McpServerProc, work_dir: Path
) -> None:
    routes = [
        Route("alt", "/alt/mcp", "upstream", prefix_rewrite="/mcp", timeout=5),
        Route("all", "/", "upstream"),
    ]
    cfg, port = single_listener(mcp_server, work_dir, "plain", routes=routes)
    envoy(cfg)
    mcp_server.reset()

    res = post_jsonrpc(f"http://127.0.0.1:{port}/alt/mcp", rpc("initialize", initialize_params()))
    assert res.status == 200 and res.json()["result"]["serverInfo"]["name"] == "upstream"
    with McpAgent(f"http://127.0.0.1:{port}/alt/mcp") as agent:
        assert text_of(agent.call_tool("echo", {"text": "via alt"})) == "via alt"
    assert {r["path"] for r in mcp_server.requests()} == {"/mcp"}


def test_http_403_with_jsonrpc_body_surfaces_as_denied(
    envoy: StartEnvoy, mcp_server: McpServerProc, work_dir: Path
) -> None:
    error = {"jsonrpc": "2.0", "id": None, "error": {"code": -32001, "message": "denied by test route"}}
    routes = [
        Route("deny", "/denied", direct_response=(403, json.dumps(error)),
              response_headers={"content-type": "application/json"}),
        Route("all", "/", "upstream"),
    ]
    cfg, port = single_listener(mcp_server, work_dir, "plain", routes=routes)
    envoy(cfg)

    with pytest.raises(Denied) as denied:
        with McpAgent(f"http://127.0.0.1:{port}/denied"):
            pass
    assert denied.value.status == 403
    assert (denied.value.code, denied.value.message) == (-32001, "denied by test route")
    assert denied.value.__cause__ is not None and getattr(denied.value.__cause__, "code", None) == -32001

    raw = post_jsonrpc(f"http://127.0.0.1:{port}/denied", rpc("tools/list"))
    assert raw.status == 403 and raw.error == error["error"]


def test_authorizer_records_calls_and_applies_rules(authorizer: AuthorizerProc) -> None:
    base = authorizer.url
    ok = request("POST", f"{base}/authz/mcp", body=b'{"x":1}', headers={"x-mcp-tool": "echo"})
    assert ok.status == 200 and ok.headers["x-authz-ok"] == "authz-a"

    by_header = request("GET", f"{base}/authz/mcp", headers={"x-block": "yes"})
    assert by_header.status == 403
    assert by_header.json() == {"denied_by": "authz-a"}
    assert by_header.headers["www-authenticate"] == 'Bearer realm="authz-a"'
    assert request("POST", f"{base}/authz/mcp", headers={"x-mcp-tool": "delete_repo"}).status == 403

    calls = authorizer.calls()
    assert [(c["method"], c["path"]) for c in calls] == [("POST", "/authz/mcp"), ("GET", "/authz/mcp"), ("POST", "/authz/mcp")]
    assert calls[0]["body"] == '{"x":1}' and calls[0]["headers"]["x-mcp-tool"] == "echo"
    assert calls[0]["ts_ns"] <= calls[1]["ts_ns"] <= calls[2]["ts_ns"]

    # Runtime reconfiguration, then concurrent checks (threaded server: delays overlap).
    authorizer.configure(deny_tools=[], deny_status=401, delay_ms=300)
    assert request("POST", f"{base}/x", headers={"x-mcp-tool": "delete_repo"}).status == 200
    assert request("POST", f"{base}/x", headers={"x-block": "yes"}).status == 401
    authorizer.reset()
    assert authorizer.calls() == []
    statuses: list[int] = []
    t0 = time.monotonic()
    threads = [threading.Thread(target=lambda: statuses.append(request("GET", f"{base}/c").status)) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert statuses == [200] * 5
    assert time.monotonic() - t0 < 1.2  # 5 x 300 ms, served concurrently
    assert len(authorizer.calls()) == 5


def test_ext_authz_extra_filter_uses_authorizer(
    envoy: StartEnvoy, mcp_server: McpServerProc, authorizer: AuthorizerProc, work_dir: Path
) -> None:
    port = free_port()
    cfg = build_bootstrap(
        admin_port=free_port(),
        listeners=[Listener("authz", port, [Route("all", "/", "upstream")],
                            extra_filters=[ext_authz_filter("authz", authorizer.port, path_prefix="/check",
                                                           allowed_headers=["x-block", "x-mcp-tool"])])],
        clusters=[Cluster("upstream", port=mcp_server.port), Cluster("authz", port=authorizer.port)],
    )
    envoy(cfg)
    mcp_server.reset()
    url = f"http://127.0.0.1:{port}/mcp"

    with McpAgent(url) as agent:
        assert text_of(agent.call_tool("echo", {"text": "ok"})) == "ok"
    assert all(r["headers"].get("x-authz-ok") == "authz-a" for r in mcp_server.requests())
    assert {c["path"] for c in authorizer.calls()} == {"/check/mcp"}

    with pytest.raises(Denied) as denied:
        with McpAgent(url, headers={"x-block": "yes"}):
            pass
    assert denied.value.status == 403 and denied.value.json() == {"denied_by": "authz-a"}

    # A denial mid-session raises Denied for that call only; the session stays usable.
    with McpAgent(url) as agent:
        authorizer.configure(deny_all=True)
        with pytest.raises(Denied) as denied:
            agent.call_tool("echo", {"text": "blocked"})
        assert denied.value.status == 403
        assert denied.value.headers["www-authenticate"] == 'Bearer realm="authz-a"'
        authorizer.configure(deny_all=False)
        assert text_of(agent.call_tool("echo", {"text": "again"})) == "again"
    assert mcp_server.tool_calls() == ["echo", "echo"]


def test_envoy_rejects_invalid_config_and_stops_cleanly(work_dir: Path, mcp_server: McpServerProc) -> None:
    bad = build_bootstrap(
        admin_port=free_port(),
        listeners=[Listener("bad", free_port(), [Route("r", "/", "no_such_cluster")])],
        clusters=[],
    )
    code, log = EnvoyProcess.start_expect_failure(bad, workdir=work_dir / "envoy" / "bad")
    assert code != 0
    assert "no_such_cluster" in log

    unknown_field = build_bootstrap(admin_port=free_port(), listeners=[], clusters=[])
    unknown_field["admin"]["bogus_field"] = True
    code, log = EnvoyProcess.start_expect_failure(unknown_field, workdir=work_dir / "envoy" / "bad2")
    assert code != 0 and "bogus_field" in log

    # Two Envoys side by side (distinct base ids), both stopped and reaped on exit.
    cfg_a, _ = single_listener(mcp_server, work_dir, "a")
    cfg_b, _ = single_listener(mcp_server, work_dir, "b")
    with EnvoyProcess(cfg_a, workdir=work_dir / "envoy" / "pair", name="a") as a, \
            EnvoyProcess(cfg_b, workdir=work_dir / "envoy" / "pair", name="b") as b:
        assert a.alive and b.alive
        assert "LIVE" in a.admin_get("/ready")
    assert not a.alive and not b.alive


def test_rendered_config_shapes(pki: Pki, jwt_keys: JwtKeys) -> None:
    def filters(listener: Listener) -> list[dict]:
        cfg = json.loads(render_envoy_config(admin_port=1, listeners=[listener], clusters=[]))
        hcm = cfg["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
        return hcm["http_filters"]

    base = dict(name="l", port=2, routes=[Route("r", "/", "c")])
    assert [f["name"] for f in filters(Listener(**base, wasm=Wasm(None)))] == ["envoy.filters.http.router"]

    extra = {"name": "envoy.filters.http.rbac", "typed_config": {}}
    chain = filters(Listener(
        **base, jwt=[JwtProvider(jwt_keys.issuer, jwt_keys.jwks_json)], extra_filters=[extra],
        wasm=Wasm("/x/mcp_access_filter.wasm", '{"bundle": 1}'),
    ))
    assert [f["name"] for f in chain] == [
        "envoy.filters.http.jwt_authn", "envoy.filters.http.rbac", "envoy.filters.http.wasm", "envoy.filters.http.router",
    ]
    plugin = chain[2]["typed_config"]["config"]
    assert plugin["allow_on_headers_stop_iteration"] is True
    assert plugin["configuration"]["value"] == '{"bundle": 1}'
    assert plugin["vm_config"]["code"]["local"]["filename"] == "/x/mcp_access_filter.wasm"
    requires = chain[0]["typed_config"]["rules"][0]["requires"]["requires_any"]["requirements"]
    assert requires == [{"provider_name": "test"}, {"allow_missing": {}}]
