//! Kubernetes objects that load the filter into Envoy Gateway or Istio, with the bundle compiled
//! from the user's manifests.
//!
//! Envoy Gateway: an `EnvoyExtensionPolicy` (the filter from the OCI image, the bundle as its
//! `config`, `failOpen: false`), per Gateway an `EnvoyPatchPolicy` (one cluster per authorizer,
//! `allow_on_headers_stop_iteration: true` patched into the Wasm filter Envoy Gateway generates)
//! and a `ClientTrafficPolicy` (buffer limit above the body limit, path handling as the filter
//! reads paths); backends, and the targets of policies on HTTPRoutes, are recognised by the
//! cluster Envoy Gateway makes per HTTPRoute rule. Istio: a `WasmPlugin` (phase AUTHZ,
//! FAIL_CLOSE, the bundle as `pluginConfig`, `envoy.holdHeaders: false` because a WasmPlugin
//! cannot hold headers) and an `EnvoyFilter` with the connection manager's path and host
//! normalization; policies on HTTPRoutes are refused (no route name the filter can rely on).
//! Gateway API XBackends: see [`backends`] (an Envoy Gateway `Backend` and the routes turned
//! to it; Istio routes to them itself).

use std::collections::{BTreeMap, BTreeSet};

mod backends;

pub use backends::BackendObjects;

use mcp_access_bundle::{Bundle, EscapedSlashes};
use mcp_access_engine::receipts::KEY_ENV;
use mcp_access_k8s::{Manifests, Report, RouteAction, Topology};
use serde_json::{json, Value};

use crate::error::CliError;

const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";
const EG_API: &str = "gateway.envoyproxy.io/v1alpha1";
const ISTIO_API: &str = "extensions.istio.io/v1alpha1";
const ROOT_ID: &str = "mcp_access";
const MIB: u64 = 1024 * 1024;

/// Where the filter runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Platform {
    EnvoyGateway,
    Istio,
}

/// Envoy Gateway's xDS naming scheme (listener names in EnvoyPatchPolicy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerNames {
    /// `NAMESPACE/GATEWAY/LISTENER`.
    Legacy,
    /// `tcp-PORT` (the XDSNameSchemeV2 runtime flag).
    V2,
}

/// What is not in the manifests.
#[derive(Debug, Clone)]
pub struct ManifestOptions {
    pub platform: Platform,
    /// Name of the generated objects.
    pub name: String,
    /// REGISTRY/REPOSITORY:TAG of the filter image.
    pub image: String,
    /// Its manifest digest, 64 lower-case hex digits (no `sha256:`).
    pub sha256: String,
    pub listener_names: ListenerNames,
    /// Kubernetes cluster domain of Service DNS names.
    pub cluster_domain: String,
    /// Istio: insert the filter with an EnvoyFilter (delivered by extension config discovery,
    /// which istio-agent serves from the OCI image) so that it holds request headers, instead
    /// of a WasmPlugin, which cannot.
    pub istio_hold_headers: bool,
    /// The RateLimitService of `Global` limits (`--rate-limit-service`): a cluster in the
    /// EnvoyPatchPolicy (Envoy Gateway), its Service's outbound cluster (Istio).
    pub rate_limit_service: Option<crate::envoy::RateLimitAddress>,
}

/// `sha256:<64 hex>` (or the bare hex) to the bare hex.
pub fn parse_digest(s: &str) -> Result<String, CliError> {
    let hex = s.strip_prefix("sha256:").unwrap_or(s);
    if hex.len() == 64
        && hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        Ok(hex.to_string())
    } else {
        Err(format!(
            "`{s}`: expected sha256:<64 hex digits> (the manifest digest scripts/oci-image prints)"
        )
        .into())
    }
}

/// `[oci://]REGISTRY/REPOSITORY[:TAG]` to `REGISTRY/REPOSITORY[:TAG]`.
pub fn parse_image(s: &str) -> Result<String, CliError> {
    let r = s.strip_prefix("oci://").unwrap_or(s);
    if r.contains('@') {
        return Err(format!(
            "`{s}`: give the tagged reference (REGISTRY/REPOSITORY:TAG); the digest goes to --digest"
        ).into());
    }
    let re = regex_lite::Regex::new(
        r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9._-]+)+(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?$",
    )
    .map_err(|e| e.to_string())?;
    if re.is_match(r) {
        Ok(r.to_string())
    } else {
        Err(format!("`{s}`: expected REGISTRY/REPOSITORY:TAG").into())
    }
}

/// The port Envoy Gateway's Envoy listens on for a Gateway port (privileged ports shift by 10000).
pub(crate) fn eg_container_port(port: u16) -> u16 {
    if port < 1024 {
        port + 10000
    } else {
        port
    }
}

/// The report's word on each listener's port for Envoy Gateway, whose Envoy does not listen
/// on the Gateway's port when it is privileged: clients connect to the Gateway's port (its
/// Service), which forwards to [`eg_container_port`].
pub fn report_eg_ports(report: &mut Report, topo: &Topology) {
    for g in &mut report.gateways {
        let Some(model) = topo
            .gateways
            .iter()
            .find(|t| t.namespace == g.namespace && t.name == g.name)
        else {
            continue;
        };
        for c in &mut g.conditions {
            let Some(l) = model
                .listeners
                .iter()
                .find(|l| c.target.listener() == Some(l.name.as_str()))
            else {
                continue;
            };
            let (port, envoy) = (l.port, eg_container_port(l.port));
            let said = format!("Envoy listens on port {port}");
            let true_here = if envoy == port {
                format!("clients connect to port {port} (the Gateway's Service), where Envoy Gateway's Envoy listens")
            } else {
                format!("clients connect to port {port} (the Gateway's Service); Envoy Gateway's Envoy listens on port {envoy} in its pod (privileged ports shift by 10000)")
            };
            c.message = c.message.replacen(&said, &true_here, 1);
        }
    }
}

/// Twice the body limit, at least 1 MiB above it, in whole MiB.
fn buffer_limit(max_body: u32) -> String {
    let b = u64::from(max_body);
    let want = (2 * b).max(b + MIB);
    format!("{}Mi", want.div_ceil(MIB))
}

fn svc_host(name: &str, namespace: &str, domain: &str) -> String {
    format!("{name}.{namespace}.svc.{domain}")
}

fn istio_cluster(host: &str, port: u16) -> String {
    format!("outbound|{port}||{host}")
}

fn meta(name: &str, namespace: &str) -> Value {
    json!({"name": name, "namespace": namespace, "labels": {
        "app.kubernetes.io/name": "mcp-access", "app.kubernetes.io/component": "policy"}})
}

fn gateway_ref(name: &str) -> Value {
    json!({"group": GATEWAY_GROUP, "kind": "Gateway", "name": name})
}

/// What Envoy Gateway makes of the HTTPRoute rules that forward only to one XBackend: one
/// cluster per rule, `httproute/NS/NAME/rule/I`.
#[derive(Default)]
struct EgRules {
    /// Per XBackend, the clusters of its rules.
    clusters: BTreeMap<String, BTreeSet<String>>,
    /// Per XBackend, each name the bundle recognises it by in the `mcp-access envoy`
    /// rendering (a route name, or its cluster for rules that forward to it more than once)
    /// -> the clusters of the rules requests through that name take in Envoy Gateway.
    names: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
}

fn eg_rules(topo: &Topology) -> EgRules {
    let mut out = EgRules::default();
    for l in topo.gateways.iter().flat_map(|g| &g.listeners) {
        for e in &l.routes {
            let RouteAction::Forward { clusters, .. } = &e.action else {
                continue;
            };
            let ids: BTreeSet<_> = clusters.iter().map(|c| c.backend.as_ref()).collect();
            let [Some(id)] = ids.into_iter().collect::<Vec<_>>()[..] else {
                continue;
            };
            let eg = format!("httproute/{}/rule/{}", e.route, e.rule);
            out.clusters
                .entry(id.to_string())
                .or_default()
                .insert(eg.clone());
            let name = match clusters.as_slice() {
                [_] => Some(e.name.clone()),
                _ => topo
                    .backends
                    .iter()
                    .find(|b| &b.id == id)
                    .map(|b| b.cluster.clone()),
            };
            if let Some(name) = name {
                out.names
                    .entry(id.to_string())
                    .or_default()
                    .entry(name)
                    .or_default()
                    .insert(eg);
            }
        }
    }
    out
}

/// The bundle for Envoy Gateway: listener ports as its Envoy listens, backends recognised by
/// its per-rule clusters, and route-scoped targets narrowed to those clusters (a target whose
/// routes no request can take there is dropped, and a policy left without targets).
fn eg_bundle(bundle: &Bundle, topo: &Topology) -> Bundle {
    let mut b = bundle.clone();
    for l in b.gateways.iter_mut().flat_map(|g| &mut g.listeners) {
        l.port = eg_container_port(l.port);
    }
    let rules = eg_rules(topo);
    for be in &mut b.backends {
        be.route_names.clear();
        be.cluster_names = rules
            .clusters
            .get(&format!("{}/{}", be.namespace, be.name))
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
    }
    for p in &mut b.policies {
        let ns = p.namespace.clone();
        p.targets.retain_mut(|t| {
            let Some(routes) = &t.routes else {
                return true;
            };
            let id = format!("{}/{}", t.namespace.as_deref().unwrap_or(&ns), t.name);
            let names = rules.names.get(&id);
            let eg: BTreeSet<String> = routes
                .iter()
                .filter_map(|r| names.and_then(|n| n.get(r)))
                .flatten()
                .cloned()
                .collect();
            t.routes = Some(eg.into_iter().collect());
            t.routes.as_ref().is_some_and(|r| !r.is_empty())
        });
    }
    b.policies.retain(|p| !p.targets.is_empty());
    b.envoy.hold_headers = true; // allow_on_headers_stop_iteration is patched in
    b
}

/// Istio cannot tell routes apart by a name the filter sees (see docs/deploy.md): a
/// route-scoped policy is refused rather than applied to every route or to none.
fn istio_route_scoped(bundle: &Bundle) -> Result<(), CliError> {
    let scoped: Vec<String> = bundle
        .policies
        .iter()
        .filter(|p| p.targets.iter().any(|t| t.routes.is_some()))
        .map(|p| format!("{}/{}", p.namespace, p.name))
        .collect();
    if scoped.is_empty() {
        return Ok(());
    }
    Err(format!(
        "--platform istio cannot enforce policies narrowed to HTTPRoutes ({}): Istio names Envoy routes after the HTTPRoute rule's `name` (Istio 1.24 and later) or NAMESPACE.ROUTE.INDEX, names that need not be unique across routes, and its clusters are the Services', shared by every route, so the filter cannot tell which route a request took; target the XBackend or the Gateway listener instead, or use --platform envoy-gateway or `mcp-access envoy`",
        scoped.join(", ")
    ).into())
}

fn istio_bundle(
    bundle: &Bundle,
    topo: &Topology,
    (domain, hold_headers): (&str, bool),
    rls: Option<&crate::envoy::RateLimitAddress>,
) -> Bundle {
    let mut b = bundle.clone();
    for a in &mut b.authorizers {
        if let Some(m) = topo.authorizers.iter().find(|m| m.cluster == a.cluster) {
            a.cluster = istio_cluster(&svc_host(&m.name, &m.namespace, domain), m.port);
        }
    }
    for be in &mut b.backends {
        be.route_names.clear();
        be.cluster_names = topo
            .backends
            .iter()
            .filter(|m| m.id.namespace == be.namespace && m.id.name == be.name)
            .filter_map(|m| match (&m.service_name, &m.hostname) {
                (Some(s), _) => Some(istio_cluster(&svc_host(s, &m.namespace, domain), m.port)),
                (None, Some(h)) => Some(istio_cluster(h, m.port)),
                (None, None) => None,
            })
            .collect();
    }
    // A WasmPlugin cannot set allow_on_headers_stop_iteration; the EnvoyFilter rendering can.
    b.envoy.hold_headers = hold_headers;
    if let (Some(s), Some(a)) = (&mut b.rate_limit_service, rls) {
        s.cluster = istio_cluster(&a.host, a.port);
    }
    b
}

/// The filter as an extension config (`EXTENSION_CONFIG`, which istio-agent resolves: it fetches
/// the OCI image, checks its digest and hands Envoy a local file, as for a WasmPlugin) and its
/// place in the Gateway's HTTP filter chain (before the router, by discovery), holding headers.
fn istio_envoy_filter(ns: &str, refs: &[Value], config: &Value, o: &ManifestOptions) -> Value {
    let bundle_json = config.to_string();
    json!({
        "apiVersion": "networking.istio.io/v1alpha3",
        "kind": "EnvoyFilter",
        "metadata": meta(&o.name, ns),
        "spec": {
            "targetRefs": refs,
            "configPatches": [
                {
                    "applyTo": "EXTENSION_CONFIG",
                    "patch": {"operation": "ADD", "value": {
                        "name": o.name,
                        "typed_config": {
                            "@type": "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm",
                            "config": {
                                "name": o.name,
                                "root_id": ROOT_ID,
                                "vm_config": {
                                    "vm_id": o.name,
                                    "runtime": "envoy.wasm.runtime.v8",
                                    "code": {"remote": {
                                        "http_uri": {"uri": format!("oci://{}", o.image), "timeout": "30s"},
                                        "sha256": o.sha256,
                                    }},
                                    // The receipts' key, from the gateway's environment (a
                                    // Secret; docs/audit.md), never from this file.
                                    "environment_variables": {"host_env_keys": [KEY_ENV]},
                                },
                                "configuration": {
                                    "@type": "type.googleapis.com/google.protobuf.StringValue",
                                    "value": bundle_json,
                                },
                                "fail_open": false,
                                "allow_on_headers_stop_iteration": true,
                            },
                        },
                    }},
                },
                {
                    "applyTo": "HTTP_FILTER",
                    "match": {"context": "GATEWAY", "listener": {"filterChain": {"filter": {
                        "name": "envoy.filters.network.http_connection_manager",
                        "subFilter": {"name": "envoy.filters.http.router"},
                    }}}},
                    "patch": {"operation": "INSERT_BEFORE", "value": {
                        "name": o.name,
                        "config_discovery": {
                            "config_source": {"ads": {}},
                            "type_urls": ["type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm"],
                        },
                    }},
                },
            ],
        }
    })
}

/// An authorizer's cluster; HTTP/2 for a gRPC authorizer.
fn authorizer_cluster(name: &str, host: &str, port: u16, grpc: bool) -> Value {
    let mut c = json!({
        "name": name,
        "type": "STRICT_DNS",
        "connect_timeout": "1s",
        "dns_lookup_family": "V4_PREFERRED",
        "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {
            "socket_address": {"address": host, "port_value": port}}}}]}]}
    });
    if grpc {
        crate::envoy::http2_only(&mut c);
    }
    c
}

fn escaped_action(e: EscapedSlashes, reject: &str, decode: &str) -> String {
    match e {
        EscapedSlashes::Reject => reject.into(),
        EscapedSlashes::Decode => decode.into(),
    }
}

/// Gateways by namespace, in bundle order.
fn by_namespace(
    bundle: &Bundle,
) -> Result<BTreeMap<&str, Vec<&mcp_access_bundle::Gateway>>, CliError> {
    let mut out: BTreeMap<&str, Vec<_>> = BTreeMap::new();
    for g in &bundle.gateways {
        out.entry(g.namespace.as_str()).or_default().push(g);
    }
    if out.is_empty() {
        return Err(
            "the manifests have no accepted Gateway: nothing to attach the filter to".into(),
        );
    }
    Ok(out)
}

/// A platform's bundle, checked as the filter will check it. Identity headers need the
/// headers held: without, a client's copy would reach the MCP server first.
fn checked(b: Bundle) -> Result<Value, CliError> {
    if !b.envoy.hold_headers && b.backends.iter().any(|x| !x.identity_headers.is_empty()) {
        return Err("AccessPolicy identityHeaders need the filter to hold request headers, which a WasmPlugin cannot (a client's copy would reach the MCP server before the filter removes it): render with --istio-hold-headers".into());
    }
    mcp_access_bundle::validate(&b).map_err(|e| e.to_string())?;
    Ok(serde_json::to_value(b)?)
}

/// Envoy Gateway: per listener with OAuth protected resource metadata, an `HTTPRouteFilter`
/// whose direct response is the document, and an `HTTPRoute` of that listener that answers
/// the metadata paths with it (Envoy Gateway routes them to no upstream, so the filter lets
/// them through without policy, docs/semantics.md §5.6).
fn eg_metadata(g: &mcp_access_bundle::Gateway, o: &ManifestOptions) -> Vec<Value> {
    let mut out = Vec::new();
    for l in &g.listeners {
        let Some(p) = &l.protected_resource else {
            continue;
        };
        let name = format!("{}-oauth-{}-{}", o.name, g.name, l.name);
        // The body is a format string of Envoy command operators: `%` stands for itself as `%%`.
        let body = p.document().to_string().replace('%', "%%");
        let header = |n: &str, v: &str| json!({"name": n, "value": v});
        out.push(json!({
            "apiVersion": EG_API,
            "kind": "HTTPRouteFilter",
            "metadata": meta(&name, &g.namespace),
            "spec": {"directResponse": {
                "contentType": "application/json",
                "statusCode": 200,
                "body": {"type": "Inline", "inline": body},
                "header": {"set": [header("access-control-allow-origin", "*"),
                                   header("access-control-allow-headers", "mcp-protocol-version")]},
            }},
        }));
        let matches: Vec<Value> = p
            .metadata_paths()
            .iter()
            .map(|path| json!({"path": {"type": "Exact", "value": path}}))
            .collect();
        out.push(json!({
            "apiVersion": format!("{GATEWAY_GROUP}/v1"),
            "kind": "HTTPRoute",
            "metadata": meta(&name, &g.namespace),
            "spec": {
                "parentRefs": [{"group": GATEWAY_GROUP, "kind": "Gateway", "name": g.name, "sectionName": l.name}],
                "rules": [{"matches": matches, "filters": [{"type": "ExtensionRef", "extensionRef": {
                    "group": "gateway.envoyproxy.io", "kind": "HTTPRouteFilter", "name": name}}]}],
            },
        }));
    }
    out
}

fn envoy_gateway(
    bundle: &Bundle,
    topo: &Topology,
    o: &ManifestOptions,
) -> Result<Vec<Value>, CliError> {
    let config = checked(eg_bundle(bundle, topo))?;
    let mut objects = Vec::new();
    for (ns, gws) in by_namespace(bundle)? {
        let refs: Vec<Value> = gws.iter().map(|g| gateway_ref(&g.name)).collect();
        objects.push(json!({
            "apiVersion": EG_API,
            "kind": "EnvoyExtensionPolicy",
            "metadata": meta(&o.name, ns),
            "spec": {"targetRefs": refs, "wasm": [{
                "name": o.name,
                "rootID": ROOT_ID,
                "code": {"type": "Image", "image": {"url": o.image, "sha256": o.sha256}, "pullPolicy": "IfNotPresent"},
                "config": config,
                "failOpen": false,
                // The receipts' key from the gateway's environment (docs/audit.md).
                "env": {"hostKeys": [KEY_ENV]},
            }]}
        }));
        let filter = format!(
            "envoy.filters.http.wasm/envoyextensionpolicy/{ns}/{}/wasm/0",
            o.name
        );
        for g in &gws {
            let mut patches = Vec::new();
            for a in &topo.authorizers {
                if bundle.authorizers.iter().any(|b| b.cluster == a.cluster) {
                    let host = svc_host(&a.name, &a.namespace, &o.cluster_domain);
                    patches.push(json!({
                        "type": "type.googleapis.com/envoy.config.cluster.v3.Cluster",
                        "name": a.cluster,
                        "operation": {"op": "add", "path": "", "value": authorizer_cluster(&a.cluster, &host, a.port, a.grpc)},
                    }));
                }
            }
            if let (Some(s), Some(a)) = (&bundle.rate_limit_service, &o.rate_limit_service) {
                patches.push(json!({
                    "type": "type.googleapis.com/envoy.config.cluster.v3.Cluster",
                    "name": s.cluster,
                    "operation": {"op": "add", "path": "", "value": a.cluster()},
                }));
            }
            let mut seen = BTreeSet::new();
            for l in &g.listeners {
                let name = match o.listener_names {
                    ListenerNames::Legacy => format!("{ns}/{}/{}", g.name, l.name),
                    ListenerNames::V2 => format!("tcp-{}", eg_container_port(l.port)),
                };
                if seen.insert(name.clone()) {
                    patches.push(json!({
                        "type": "type.googleapis.com/envoy.config.listener.v3.Listener",
                        "name": name,
                        "operation": {
                            "op": "add",
                            "jsonPath": format!("..http_filters[?(@.name=='{filter}')]"),
                            "path": "/typed_config/config/allow_on_headers_stop_iteration",
                            "value": true,
                        },
                    }));
                }
            }
            let name = if gws.len() > 1 {
                format!("{}-{}", o.name, g.name)
            } else {
                o.name.clone()
            };
            objects.push(json!({
                "apiVersion": EG_API,
                "kind": "EnvoyPatchPolicy",
                "metadata": meta(&name, ns),
                "spec": {"targetRef": gateway_ref(&g.name), "type": "JSONPatch", "jsonPatches": patches},
            }));
            objects.extend(eg_metadata(g, o));
        }
        objects.push(json!({
            "apiVersion": EG_API,
            "kind": "ClientTrafficPolicy",
            "metadata": meta(&o.name, ns),
            "spec": {
                "targetRefs": refs,
                "connection": {"bufferLimit": buffer_limit(bundle.limits.max_body_bytes)},
                "path": {
                    "escapedSlashesAction": escaped_action(bundle.envoy.escaped_slashes, "RejectRequest", "UnescapeAndForward"),
                    "disableMergeSlashes": false,
                },
                "headers": {"withUnderscoresAction": "RejectRequest"},
            }
        }));
    }
    Ok(objects)
}

fn istio(bundle: &Bundle, topo: &Topology, o: &ManifestOptions) -> Result<Vec<Value>, CliError> {
    istio_route_scoped(bundle)?;
    let hold = o.istio_hold_headers;
    let rls = o.rate_limit_service.as_ref();
    let config = checked(istio_bundle(bundle, topo, (&o.cluster_domain, hold), rls))?;
    let mut objects = Vec::new();
    for (ns, gws) in by_namespace(bundle)? {
        let refs: Vec<Value> = gws.iter().map(|g| gateway_ref(&g.name)).collect();
        if hold {
            objects.push(istio_envoy_filter(ns, &refs, &config, o));
        } else {
            objects.push(json!({
            "apiVersion": ISTIO_API,
            "kind": "WasmPlugin",
            "metadata": meta(&o.name, ns),
            "spec": {
                "targetRefs": refs,
                "url": format!("oci://{}", o.image),
                "sha256": o.sha256,
                "imagePullPolicy": "IfNotPresent",
                "pluginName": ROOT_ID,
                "phase": "AUTHZ",
                "type": "HTTP",
                "failStrategy": "FAIL_CLOSE",
                "pluginConfig": config,
                // The receipts' key from the gateway's environment (docs/audit.md).
                "vmConfig": {"env": [{"name": KEY_ENV, "valueFrom": "HOST"}]},
            }
            }));
        }
        let mut hcm = json!({"@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"});
        if let (Some(h), Value::Object(n)) = (
            hcm.as_object_mut(),
            crate::envoy::normalization(bundle.envoy.escaped_slashes),
        ) {
            h.extend(n);
        }
        objects.push(json!({
            "apiVersion": "networking.istio.io/v1alpha3",
            "kind": "EnvoyFilter",
            "metadata": meta(&format!("{}-normalization", o.name), ns),
            "spec": {
                "targetRefs": refs,
                "configPatches": [{
                    "applyTo": "NETWORK_FILTER",
                    "match": {"context": "GATEWAY", "listener": {"filterChain": {"filter": {"name": "envoy.filters.network.http_connection_manager"}}}},
                    "patch": {"operation": "MERGE", "value": {"typed_config": hcm}},
                }],
            }
        }));
    }
    Ok(objects)
}

/// Where the objects do not serve a listener's OAuth protected resource metadata (Istio):
/// what must be served, and where (docs/deploy.md).
pub fn unserved_metadata(bundle: &Bundle, o: &ManifestOptions) -> Vec<String> {
    if o.platform != Platform::Istio {
        return Vec::new();
    }
    let mut lines = Vec::new();
    for g in &bundle.gateways {
        for l in &g.listeners {
            if let Some(p) = &l.protected_resource {
                lines.push(format!(
                    "# OAuth: serve the protected resource metadata of listener {}/{}/{} yourself (these objects do not; see docs/deploy.md), at {}: {}",
                    g.namespace,
                    g.name,
                    l.name,
                    p.metadata_paths().join(" and "),
                    p.document()
                ));
            }
        }
    }
    lines
}

fn header(o: &ManifestOptions) -> String {
    let mut lines = vec![
        format!(
            "# mcp-access for {}: generated by `mcp-access manifests`",
            match o.platform {
                Platform::EnvoyGateway => "Envoy Gateway",
                Platform::Istio => "Istio",
            }
        ),
        format!("# image {}, manifest digest sha256:{}", o.image, o.sha256),
    ];
    match o.platform {
        Platform::EnvoyGateway => {
            lines.push("# Needs EnvoyPatchPolicy enabled in the EnvoyGateway config (extensionApis.enableEnvoyPatchPolicy: true).".into());
            lines.push(format!(
                "# EnvoyPatchPolicy listener names use Envoy Gateway's {} xDS naming scheme.",
                match o.listener_names {
                    ListenerNames::Legacy => "legacy",
                    ListenerNames::V2 => "v2",
                }
            ));
        }
        Platform::Istio => {
            if o.istio_hold_headers {
                lines.push("# The filter is an EnvoyFilter extension config (istio-agent fetches the OCI image) that holds request headers (allow_on_headers_stop_iteration).".into());
            } else {
                lines.push("# The bundle has envoy.holdHeaders: false (WasmPlugin cannot set allow_on_headers_stop_iteration; --istio-hold-headers renders an EnvoyFilter that can).".into());
            }
            lines.push("# The EnvoyFilter sets the Gateways' path normalization (overrides meshConfig.pathNormalization).".into());
        }
    }
    lines.join("\n") + "\n"
}

/// What the platform makes of Gateway API XBackends (`manifests/backends.rs`): for Envoy
/// Gateway, its Backends and the HTTPRoutes turned to them; for Istio, nothing to render.
pub fn backend_objects(
    m: &Manifests,
    topo: &Topology,
    o: &ManifestOptions,
) -> Result<BackendObjects, CliError> {
    match o.platform {
        Platform::EnvoyGateway => backends::envoy_gateway(m, topo, &o.name),
        Platform::Istio => Ok(backends::istio(m, topo)),
    }
}

/// The objects for `o.platform`, then `extra` ([`backend_objects`]): multi-document YAML with
/// a header comment, or (`json`) one JSON `List` (kubectl's `-o json` shape; the header's
/// notes are then not written).
pub fn render(
    bundle: &Bundle,
    topo: &Topology,
    o: &ManifestOptions,
    json: bool,
    extra: &[Value],
) -> Result<String, CliError> {
    let mut objects = match o.platform {
        Platform::EnvoyGateway => envoy_gateway(bundle, topo, o)?,
        Platform::Istio => istio(bundle, topo, o)?,
    };
    objects.extend(extra.iter().cloned());
    if json {
        let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
        return Ok(serde_json::to_string_pretty(&list)? + "\n");
    }
    let mut out = header(o);
    for line in unserved_metadata(bundle, o) {
        out.push_str(&line);
        out.push('\n');
    }
    for obj in &objects {
        out.push_str("---\n");
        out.push_str(&serde_norway::to_string(obj).map_err(|e| e.to_string())?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_images_and_ports() {
        let hex = "a".repeat(64);
        assert_eq!(parse_digest(&format!("sha256:{hex}")), Ok(hex.clone()));
        assert!(parse_digest("sha256:1234").is_err());
        assert!(parse_digest(&"A".repeat(64)).is_err());
        assert_eq!(
            parse_image("oci://r.example/x/y:1").as_deref(),
            Ok("r.example/x/y:1")
        );
        assert!(parse_image("r.example/x@sha256:00").is_err());
        assert!(parse_image("Not An Image").is_err());
        assert_eq!(eg_container_port(443), 10443);
        assert_eq!(eg_container_port(8443), 8443);
        assert_eq!(buffer_limit(1024 * 1024), "2Mi");
        assert_eq!(buffer_limit(3 * 1024 * 1024 + 1), "7Mi");
        assert_eq!(buffer_limit(100), "2Mi");
    }
}
