"""End-to-end test harness for mcp-access: real Envoy, real MCP SDK client and server."""

from .authserver import AuthServer
from .certs import ALPHA, BETA, CertPair, Pki, make_pki
from .client import (
    Denied,
    HttpResult,
    McpAgent,
    TransportFailure,
    delete,
    get,
    initialize_params,
    post_jsonrpc,
    request,
    rpc,
    text_of,
)
from .envoy import (
    Cluster,
    EnvoyProcess,
    JwtProvider,
    Listener,
    Route,
    Tls,
    Wasm,
    build_bootstrap,
    envoy_binary,
    ext_authz_filter,
    jwt_filter,
    normalization,
    render_envoy_config,
    scenario_bundle,
    start_expect_failure,
    wasm_filter,
)
from .jwt import JwtKeys, make_jwt_keys
from .ports import BackgroundHttpServer, free_port, free_ports, json_reply, port_open, wait_for_port
from .procs import (
    AuthorizerProc,
    ManagedProcess,
    McpServerProc,
    start_authorizer,
    start_mcp_server,
    start_python,
)

__all__ = [
    "ALPHA", "BETA", "AuthServer", "AuthorizerProc", "BackgroundHttpServer", "json_reply", "CertPair", "Cluster", "Denied", "EnvoyProcess", "HttpResult",
    "JwtKeys", "JwtProvider", "Listener", "ManagedProcess", "McpAgent", "McpServerProc", "Pki", "Route",
    "Tls", "TransportFailure", "Wasm", "build_bootstrap", "delete", "envoy_binary", "ext_authz_filter",
    "free_port", "free_ports", "get", "initialize_params", "jwt_filter", "make_jwt_keys", "make_pki",
    "normalization", "port_open", "post_jsonrpc", "render_envoy_config", "request", "rpc", "scenario_bundle", "start_authorizer",
    "start_expect_failure", "start_mcp_server", "start_python", "text_of", "wait_for_port", "wasm_filter",
]
