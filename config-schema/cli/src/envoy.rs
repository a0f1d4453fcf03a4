//! A complete Envoy bootstrap (static resources) from the compiled topology and bundle.

use std::collections::{BTreeMap, BTreeSet};

use mcp_access_bundle::{Bundle, EscapedSlashes};
use mcp_access_k8s::{
    HeaderOps, ListenerModel, PathMatchKind, PathRewrite, Protocol, RouteAction, RouteEntry,
    Topology, ValueMatchModel,
};
use serde_json::{json, Value};

use crate::jwt::{self, Jwks, JwtProviderSpec};

const T: &str = "type.googleapis.com/";
/// Above the bundle's largest body limit, so the filter (not Envoy) answers oversize bodies.
const BUFFER_LIMIT: u32 = 2 * 1024 * 1024;

/// Where a service name resolves to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub(crate) host: String,
    pub(crate) port: u16,
    /// Some(true): TLS; Some(false): plaintext; None: the default for the kind of backend.
    pub(crate) tls: Option<bool>,
}

/// Parses `host:port`, `http://host:port` or `https://host:port`.
pub fn parse_resolve_target(s: &str) -> Result<Resolved, String> {
    let (tls, rest) = if let Some(r) = s.strip_prefix("https://") {
        (Some(true), r)
    } else if let Some(r) = s.strip_prefix("http://") {
        (Some(false), r)
    } else {
        (None, s)
    };
    let rest = rest.trim_end_matches('/');
    let (host, port) = rest
        .rsplit_once(':')
        .ok_or_else(|| format!("`{s}`: expected host:port"))?;
    let port: u16 = port
        .parse()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| format!("`{s}`: bad port"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(format!("`{s}`: empty host"));
    }
    Ok(Resolved {
        host: host.to_string(),
        port,
        tls,
    })
}

/// Envoy settings that are not in the manifests.
#[derive(Debug, Clone)]
pub struct EnvoyOptions {
    pub wasm: String,
    pub admin_port: u16,
    pub admin_address: String,
    /// Bind address of listeners whose Gateway names no address.
    pub bind: String,
    /// Service / hostname -> address (`name`, `namespace/name` or `name.namespace`).
    pub resolve: BTreeMap<String, Resolved>,
    /// Secret (`name` or `namespace/name`) -> (certificate chain, private key) files.
    pub tls_certs: BTreeMap<String, (String, String)>,
    /// CA reference (`name`, `namespace/name`, or `""` for the default) -> CA file.
    pub client_cas: BTreeMap<String, String>,
    /// Trusted CAs for TLS towards `hostname` XBackends.
    pub upstream_ca: String,
    pub access_log: Option<String>,
    /// JWT providers: a `jwt_authn` filter before the wasm filter on every listener.
    pub jwt: Vec<JwtProviderSpec>,
    /// Listeners (`LISTENER`, `GATEWAY/LISTENER` or `NAMESPACE/GATEWAY/LISTENER`) whose
    /// `jwt_authn` answers a request without a token 401 instead of passing it on.
    pub jwt_required: Vec<String>,
    /// Deliver the filter's configuration by extension config discovery from this directory's
    /// [`ECDS_FILE`] instead of inline (policy changes without a restart: `mcp-access publish`).
    pub ecds_dir: Option<String>,
}

/// Whether `--jwt-required` names the listener `ns/gw/listener` (`full`); marks the names used.
fn jwt_required(o: &EnvoyOptions, full: &str, used: &mut BTreeSet<String>) -> bool {
    let mut hit = false;
    for r in &o.jwt_required {
        let matches = full == r || (r.matches('/').count() < 2 && full.ends_with(&format!("/{r}")));
        if matches {
            used.insert(r.clone());
            hit = true;
        }
    }
    hit
}

/// What a PEM file given to Envoy must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pem {
    Certificate,
    PrivateKey,
}

/// Whether PEM `text` holds a block of `kind`.
fn has_pem(text: &str, kind: Pem) -> bool {
    text.lines().map(str::trim).any(|l| match kind {
        Pem::Certificate => l == "-----BEGIN CERTIFICATE-----",
        Pem::PrivateKey => l.starts_with("-----BEGIN ") && l.ends_with("PRIVATE KEY-----"),
    })
}

/// A file for Envoy, as Envoy must be given it: absolute, since Envoy resolves a relative path
/// against its own working directory, not the one the command ran in. `what` names the flag.
/// With `elsewhere` the path is where Envoy runs: it must be absolute, and is not read (None).
fn absolute(what: &str, path: &str, elsewhere: bool) -> Result<(String, Option<String>), String> {
    if elsewhere {
        return if std::path::Path::new(path).is_absolute() {
            Ok((path.to_string(), None))
        } else {
            Err(format!("{what}: {path}: give the absolute path where Envoy runs (--files-where-envoy-runs)"))
        };
    }
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!("{what}: cannot read {path}: {e} (a path that exists only where Envoy runs: --files-where-envoy-runs)")
    })?;
    let abs = std::path::absolute(path).map_err(|e| format!("{what}: {path}: {e}"))?;
    Ok((abs.to_string_lossy().into_owned(), Some(text)))
}

/// A PEM file of `kind` for Envoy (see [`absolute`]); an error names the flag and the fix.
fn pem_file(what: &str, path: &str, kind: Pem, elsewhere: bool) -> Result<String, String> {
    let (abs, Some(text)) = absolute(what, path, elsewhere)? else {
        return Ok(path.to_string());
    };
    if has_pem(&text, kind) {
        return Ok(abs);
    }
    let (want, other) = match kind {
        Pem::Certificate => (
            "PEM certificate (-----BEGIN CERTIFICATE-----)",
            Pem::PrivateKey,
        ),
        Pem::PrivateKey => (
            "PEM private key (-----BEGIN ... PRIVATE KEY-----)",
            Pem::Certificate,
        ),
    };
    let hint = if has_pem(&text, other) {
        match kind {
            Pem::Certificate => {
                "; it holds a private key: give the certificate first (CERT.pem,KEY.pem)"
            }
            Pem::PrivateKey => {
                "; it holds a certificate: give the private key second (CERT.pem,KEY.pem)"
            }
        }
    } else {
        ""
    };
    Err(format!("{what}: {path} holds no {want}{hint}"))
}

/// A local JWKS file for Envoy's `jwt_authn` (see [`absolute`]): JSON with at least one key.
fn jwks_file(what: &str, path: &str, elsewhere: bool) -> Result<String, String> {
    let (abs, Some(text)) = absolute(what, path, elsewhere)? else {
        return Ok(path.to_string());
    };
    let keys = serde_json::from_str::<Value>(&text)
        .map_err(|e| {
            format!("{what}: {path} is not JSON ({e}); a JWKS is {{\"keys\": [JWK, ...]}}")
        })?
        .get("keys")
        .and_then(Value::as_array)
        .map_or(0, |k| k.iter().filter(|j| j.get("kty").is_some()).count());
    if keys == 0 {
        return Err(format!("{what}: {path} is no JWKS with a key: expected {{\"keys\": [JWK, ...]}} with at least one JWK (with \"kty\"); Envoy would refuse every token"));
    }
    Ok(abs)
}

/// The files Envoy is given: `--tls-cert` (Secret -> certificate, key), `--client-ca`
/// (reference -> CA) and the providers' local JWKS.
pub type EnvoyFiles<'a> = (
    &'a mut BTreeMap<String, (String, String)>,
    &'a mut BTreeMap<String, String>,
    &'a mut [JwtProviderSpec],
);

/// Checks the files Envoy is given and makes their paths absolute; with `elsewhere` they are
/// where Envoy runs: only checked to be absolute.
pub fn check_files(
    (tls_certs, client_cas, jwt): EnvoyFiles,
    elsewhere: bool,
) -> Result<(), String> {
    for (k, (cert, key)) in tls_certs.iter_mut() {
        let what = format!("--tls-cert {k}");
        *cert = pem_file(&what, cert, Pem::Certificate, elsewhere)?;
        *key = pem_file(&what, key, Pem::PrivateKey, elsewhere)?;
    }
    for (k, ca) in client_cas.iter_mut() {
        let what = if k.is_empty() {
            "--client-ca".to_string()
        } else {
            format!("--client-ca {k}")
        };
        *ca = pem_file(&what, ca, Pem::Certificate, elsewhere)?;
    }
    for p in jwt {
        if let Jwks::File(f) = &mut p.jwks {
            *f = jwks_file(&format!("--jwt-provider {} jwks", p.name), f, elsewhere)?;
        }
    }
    Ok(())
}

/// Gateway listeners left out of the Envoy configuration because a certificate or CA file was
/// not given: each as `Gateway ns/name listener L: <what to pass>`.
pub fn listeners_without_files(report: &mcp_access_k8s::Report) -> Vec<String> {
    report
        .gateways
        .iter()
        .flat_map(|g| {
            g.conditions
                .iter()
                .filter(|c| !c.accepted && c.message.contains(" is not available here: pass --"))
                .map(move |c| {
                    format!(
                        "{}: Gateway {}/{} {}: {}",
                        g.source, g.namespace, g.name, c.target, c.message
                    )
                })
        })
        .collect()
}

/// What could not be resolved and fell back to a default (printed as notes).
#[derive(Debug, Default)]
pub struct Notes(pub Vec<String>);

fn lookup<'a, V>(map: &'a BTreeMap<String, V>, ns: &str, name: &str) -> Option<&'a V> {
    map.get(&format!("{ns}/{name}"))
        .or_else(|| map.get(&format!("{name}.{ns}")))
        .or_else(|| map.get(name))
}

fn is_ip(h: &str) -> bool {
    h.parse::<std::net::IpAddr>().is_ok()
}

fn duration_ms(ms: u64) -> String {
    format!("{}.{:03}s", ms / 1000, ms % 1000)
}

fn cluster(name: &str, host: &str, port: u16, tls_sni: Option<&str>, upstream_ca: &str) -> Value {
    let mut c = json!({
        "name": name,
        "type": if is_ip(host) { "STATIC" } else { "STRICT_DNS" },
        "connect_timeout": "5s",
        "per_connection_buffer_limit_bytes": BUFFER_LIMIT,
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {
                "socket_address": {"address": host, "port_value": port}}}}]}]
        }
    });
    if let (Some(sni), Some(obj)) = (tls_sni, c.as_object_mut()) {
        obj.insert(
            "transport_socket".into(),
            json!({
                "name": "envoy.transport_sockets.tls",
                "typed_config": {
                    "@type": format!("{T}envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"),
                    "sni": sni,
                    "common_tls_context": {"validation_context": {
                        "trusted_ca": {"filename": upstream_ca},
                        "match_typed_subject_alt_names": [{"san_type": "DNS", "matcher": {"exact": sni}}]
                    }}
                }
            }),
        );
    }
    c
}

/// Makes `cluster` speak HTTP/2 to its endpoints (gRPC authorizers), over TLS or plaintext.
pub(crate) fn http2_only(cluster: &mut Value) {
    if let Some(obj) = cluster.as_object_mut() {
        obj.insert(
            "typed_extension_protocol_options".into(),
            json!({"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": format!("{T}envoy.extensions.upstreams.http.v3.HttpProtocolOptions"),
                "explicit_http_config": {"http2_protocol_options": {}}
            }}),
        );
    }
}

fn string_match(v: &ValueMatchModel) -> Value {
    if v.regex {
        json!({"safe_regex": {"regex": v.value}})
    } else {
        json!({"exact": v.value})
    }
}

fn header_ops(ops: &HeaderOps) -> (Vec<Value>, Vec<String>) {
    let mut add = Vec::new();
    for (k, v) in &ops.set {
        add.push(json!({"header": {"key": k, "value": v}, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}));
    }
    for (k, v) in &ops.add {
        add.push(
            json!({"header": {"key": k, "value": v}, "append_action": "APPEND_IF_EXISTS_OR_ADD"}),
        );
    }
    (add, ops.remove.clone())
}

fn regex_escape(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn rewrite_fields(obj: &mut serde_json::Map<String, Value>, rw: &PathRewrite) {
    match rw {
        PathRewrite::Full(p) => {
            obj.insert(
                "regex_rewrite".into(),
                json!({"pattern": {"regex": "^.*$"}, "substitution": p}),
            );
        }
        PathRewrite::Prefix {
            prefix,
            replacement,
        } => {
            let p = prefix.trim_end_matches('/');
            if replacement == "/" || replacement.is_empty() {
                obj.insert(
                    "regex_rewrite".into(),
                    json!({"pattern": {"regex": format!("^{}/*", regex_escape(p))}, "substitution": "/"}),
                );
            } else {
                obj.insert("prefix_rewrite".into(), json!(replacement));
            }
        }
    }
}

/// One Envoy route from a route entry.
/// `HOST:PORT` as an HTTP authority (an IPv6 address in brackets).
fn authority(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// One Envoy route. `hostnames`: per cluster, the Host the upstream is sent (an XBackend's
/// `hostname`, or the `HOST:PORT` a `--resolve` maps a Service to: an MCP server listening on
/// loopback checks that Host, as the official SDKs do by default against DNS rebinding).
pub(crate) fn route(e: &RouteEntry, hostnames: &BTreeMap<String, String>) -> Value {
    let mut m = serde_json::Map::new();
    match e.path_kind {
        PathMatchKind::Exact => {
            m.insert("path".into(), json!(e.path));
        }
        PathMatchKind::Regex => {
            m.insert("safe_regex".into(), json!({"regex": e.path}));
        }
        PathMatchKind::Prefix => {
            let p = e.path.trim_end_matches('/');
            if p.is_empty() {
                m.insert("prefix".into(), json!("/"));
            } else {
                m.insert("path_separated_prefix".into(), json!(p));
            }
        }
    }
    let mut headers: Vec<Value> = e
        .headers
        .iter()
        .map(|h| json!({"name": h.name.to_ascii_lowercase(), "string_match": string_match(h)}))
        .collect();
    if let Some(method) = &e.method {
        headers.push(json!({"name": ":method", "string_match": {"exact": method}}));
    }
    if !headers.is_empty() {
        m.insert("headers".into(), json!(headers));
    }
    if !e.query.is_empty() {
        let q: Vec<Value> = e
            .query
            .iter()
            .map(|h| json!({"name": h.name, "string_match": string_match(h)}))
            .collect();
        m.insert("query_parameters".into(), json!(q));
    }
    let mut r = serde_json::Map::new();
    r.insert("name".into(), json!(e.name));
    r.insert("match".into(), Value::Object(m));
    match &e.action {
        RouteAction::Forward {
            clusters,
            host_rewrite,
            path_rewrite,
            request_headers,
            response_headers,
            timeout_ms,
        } => {
            let mut a = serde_json::Map::new();
            let host_of = |c: &str| host_rewrite.clone().or_else(|| hostnames.get(c).cloned());
            let rewritten = clusters.iter().any(|c| host_of(&c.cluster).is_some());
            match clusters.as_slice() {
                [one] => {
                    a.insert("cluster".into(), json!(one.cluster));
                    if let Some(h) = host_of(&one.cluster) {
                        a.insert("host_rewrite_literal".into(), json!(h));
                    }
                }
                many => {
                    let cs: Vec<Value> = many
                        .iter()
                        .map(|c| {
                            let mut w = json!({"name": c.cluster, "weight": c.weight});
                            if let (Some(h), Some(o)) = (host_of(&c.cluster), w.as_object_mut()) {
                                o.insert("host_rewrite_literal".into(), json!(h));
                            }
                            w
                        })
                        .collect();
                    a.insert("weighted_clusters".into(), json!({"clusters": cs}));
                }
            }
            if rewritten {
                // The client's Host, where the upstream sees its own authority instead.
                a.insert("append_x_forwarded_host".into(), json!(true));
            }
            if let Some(rw) = path_rewrite {
                rewrite_fields(&mut a, rw);
            }
            // MCP streams (SSE) are long-lived: no route timeout unless the HTTPRoute sets one.
            a.insert(
                "timeout".into(),
                json!(duration_ms(timeout_ms.unwrap_or(0))),
            );
            r.insert("route".into(), Value::Object(a));
            let (add, remove) = header_ops(request_headers);
            if !add.is_empty() {
                r.insert("request_headers_to_add".into(), json!(add));
            }
            if !remove.is_empty() {
                r.insert("request_headers_to_remove".into(), json!(remove));
            }
            let (add, remove) = header_ops(response_headers);
            if !add.is_empty() {
                r.insert("response_headers_to_add".into(), json!(add));
            }
            if !remove.is_empty() {
                r.insert("response_headers_to_remove".into(), json!(remove));
            }
        }
        RouteAction::Redirect {
            scheme,
            hostname,
            path,
            port,
            status,
            response_headers,
        } => {
            let mut a = serde_json::Map::new();
            if let Some(s) = scheme {
                a.insert("scheme_redirect".into(), json!(s));
            }
            if let Some(h) = hostname {
                a.insert("host_redirect".into(), json!(h));
            }
            if let Some(p) = port {
                a.insert("port_redirect".into(), json!(p));
            }
            match path {
                Some(PathRewrite::Full(p)) => {
                    a.insert("path_redirect".into(), json!(p));
                }
                Some(PathRewrite::Prefix { replacement, .. }) => {
                    a.insert("prefix_rewrite".into(), json!(replacement));
                }
                None => {}
            }
            let code = match status {
                301 => "MOVED_PERMANENTLY",
                303 => "SEE_OTHER",
                307 => "TEMPORARY_REDIRECT",
                308 => "PERMANENT_REDIRECT",
                _ => "FOUND",
            };
            a.insert("response_code".into(), json!(code));
            r.insert("redirect".into(), Value::Object(a));
            let (add, remove) = header_ops(response_headers);
            if !add.is_empty() {
                r.insert("response_headers_to_add".into(), json!(add));
            }
            if !remove.is_empty() {
                r.insert("response_headers_to_remove".into(), json!(remove));
            }
        }
        RouteAction::Fail { message } => {
            r.insert(
                "direct_response".into(),
                json!({"status": 500, "body": {"inline_string": message}}),
            );
        }
    }
    Value::Object(r)
}

/// Virtual hosts of one or more listeners sharing a route configuration.
fn virtual_hosts(
    listeners: &[&ListenerModel],
    prefix: &str,
    hostnames: &BTreeMap<String, String>,
) -> Vec<Value> {
    // domain -> entries
    let mut by_domain: BTreeMap<String, Vec<RouteEntry>> = BTreeMap::new();
    for l in listeners {
        let default_domain = l.hostname.clone().unwrap_or_else(|| "*".into());
        by_domain.entry(default_domain.clone()).or_default();
        for e in &l.routes {
            let domains = if e.hostnames.is_empty() {
                vec![default_domain.clone()]
            } else {
                e.hostnames.clone()
            };
            for d in domains {
                by_domain.entry(d).or_default().push(e.clone());
            }
        }
    }
    // Routes for any host (and for covering wildcards) also serve more specific hosts.
    let domains: Vec<String> = by_domain.keys().cloned().collect();
    let snapshot = by_domain.clone();
    for d in &domains {
        for (other, entries) in &snapshot {
            if other != d
                && (other == "*" || mcp_access_bundle::gateway_api::host_matches(other, d))
            {
                if let Some(list) = by_domain.get_mut(d) {
                    for e in entries {
                        if !list.iter().any(|x| x.name == e.name) {
                            list.push(e.clone());
                        }
                    }
                }
            }
        }
    }
    by_domain
        .into_iter()
        .map(|(domain, mut entries)| {
            entries.sort_by(mcp_access_k8s::precedence);
            let routes: Vec<Value> = entries.iter().map(|e| route(e, hostnames)).collect();
            json!({"name": format!("{prefix}/{domain}"), "domains": [domain], "routes": routes})
        })
        .collect()
}

fn wasm_filter(wasm: &str, bundle_json: &str) -> Value {
    json!({
        "name": "envoy.filters.http.wasm",
        "typed_config": {
            "@type": format!("{T}envoy.extensions.filters.http.wasm.v3.Wasm"),
            "config": {
                "name": "mcp_access",
                "root_id": "mcp_access",
                "vm_config": {
                    "vm_id": "mcp_access",
                    "runtime": "envoy.wasm.runtime.v8",
                    "code": {"local": {"filename": wasm}}
                },
                "configuration": {"@type": format!("{T}google.protobuf.StringValue"), "value": bundle_json},
                "fail_open": false,
                "allow_on_headers_stop_iteration": true
            }
        }
    })
}

/// Name of the filter's extension configuration (the ECDS resource every listener subscribes to).
pub const ECDS_NAME: &str = "mcp_access";
/// The file in the ECDS directory Envoy reads the filter's configuration from.
pub const ECDS_FILE: &str = "mcp_access.ecds.json";

/// The filter as an extension config discovered from `dir`/[`ECDS_FILE`]: Envoy watches the
/// directory and reloads the file when one is moved into it (how `publish` writes it).
fn ecds_filter(dir: &str) -> Value {
    let path = std::path::Path::new(dir).join(ECDS_FILE);
    json!({
        "name": ECDS_NAME,
        "config_discovery": {
            "config_source": {
                "path_config_source": {"path": path.to_string_lossy(), "watched_directory": {"path": dir}},
                "resource_api_version": "V3"
            },
            "type_urls": [format!("{T}envoy.extensions.filters.http.wasm.v3.Wasm")]
        }
    })
}

/// The ECDS file: a discovery response with the filter's Wasm configuration (the same as the
/// inline one) as its one resource; `version_info` is a hash of the bundle.
pub fn ecds_document(wasm: &str, bundle_json: &str) -> Value {
    let typed = wasm_filter(wasm, bundle_json)
        .get("typed_config")
        .cloned()
        .unwrap_or(Value::Null);
    // FNV-1a: a short, stable version text for Envoy's stats and logs.
    let hash = bundle_json.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    json!({
        "version_info": format!("{hash:016x}"),
        "resources": [{
            "@type": format!("{T}envoy.config.core.v3.TypedExtensionConfig"),
            "name": ECDS_NAME,
            "typed_config": typed
        }]
    })
}

/// Writes `doc` as `dir`/[`ECDS_FILE`] atomically: a temporary file in `dir`, flushed, then
/// renamed over the old one, so Envoy never reads half a file. Returns the version written.
pub fn publish_ecds(dir: &std::path::Path, doc: &Value) -> Result<String, String> {
    use std::io::Write;
    let text = serde_json::to_string(doc).map_err(|e| e.to_string())?;
    let tmp = dir.join(format!(".{ECDS_FILE}.{}.tmp", std::process::id()));
    let target = dir.join(ECDS_FILE);
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &target)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("cannot write {}: {e}", target.display())
    })?;
    Ok(doc
        .get("version_info")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string())
}

fn access_log(path: &str, name: &str) -> Value {
    json!([{
        "name": "envoy.access_loggers.file",
        "typed_config": {
            "@type": format!("{T}envoy.extensions.access_loggers.file.v3.FileAccessLog"),
            "path": path,
            "log_format": {"json_format": {
                "listener": name,
                "code": "%RESPONSE_CODE%",
                "method": "%REQ(:METHOD)%",
                "path": "%REQ(:PATH)%",
                "route": "%ROUTE_NAME%",
                "upstream": "%UPSTREAM_CLUSTER%",
                "peer_uri_san": "%DOWNSTREAM_PEER_URI_SAN%",
                "filter_state": "%FILTER_STATE(wasm.mcp_access.decision:PLAIN)%"
            }}
        }
    }])
}

/// Envoy's own request normalization, with the choices the filter makes (it does not rely on
/// them): RFC 3986 path normalization, merged slashes, `%2F` / `%5C` per the bundle's
/// `envoy.escapedSlashes`, one trailing dot of the host removed.
pub(crate) fn normalization(escaped: EscapedSlashes) -> Value {
    json!({
        "normalize_path": true,
        "merge_slashes": true,
        "path_with_escaped_slashes_action": match escaped {
            EscapedSlashes::Reject => "REJECT_REQUEST",
            EscapedSlashes::Decode => "UNESCAPE_AND_FORWARD",
        },
        "strip_trailing_host_dot": true,
        // `mcp_name` must not reach a server that folds `_` into `-` and reads it as Mcp-Name.
        "common_http_protocol_options": {"headers_with_underscores_action": "REJECT_REQUEST"},
    })
}

struct Chain<'a> {
    name: &'a str,
    tls: bool,
    /// `jwt_authn` refuses requests without a token.
    jwt_required: bool,
}

fn hcm(
    c: &Chain<'_>,
    vhosts: Vec<Value>,
    o: &EnvoyOptions,
    bundle: &Bundle,
    bundle_json: &str,
) -> Value {
    let (name, tls) = (c.name, c.tls);
    let mut filters: Vec<Value> = jwt::envoy_filter(&o.jwt, c.jwt_required)
        .into_iter()
        .collect();
    filters.push(match &o.ecds_dir {
        Some(dir) => ecds_filter(dir),
        None => wasm_filter(&o.wasm, bundle_json),
    });
    filters.push(json!({"name": "envoy.filters.http.router", "typed_config": {"@type": format!("{T}envoy.extensions.filters.http.router.v3.Router")}}));
    let mut h = json!({
        "@type": format!("{T}envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"),
        "stat_prefix": name,
        "codec_type": "AUTO",
        // The :authority keeps its port (CEL's request.host reads it as received, as Envoy's
        // attribute); virtual hosts are matched without it.
        "route_config": {"name": name, "virtual_hosts": vhosts, "ignore_port_in_host_matching": true},
        "http_filters": filters,
        // Callers cannot forge a client certificate header; over TLS the verified one is sent.
        "forward_client_cert_details": if tls { "SANITIZE_SET" } else { "SANITIZE" },
    });
    if let (Some(obj), Value::Object(norm)) = (
        h.as_object_mut(),
        normalization(bundle.envoy.escaped_slashes),
    ) {
        obj.extend(norm);
        if tls {
            obj.insert(
                "set_current_client_cert_details".into(),
                json!({"uri": true}),
            );
        }
        if let Some(p) = &o.access_log {
            obj.insert("access_log".into(), access_log(p, name));
        }
    }
    json!([{"name": "envoy.filters.network.http_connection_manager", "typed_config": h}])
}

/// Renders the bootstrap. Errors name what is missing (certificates, CAs).
pub fn render(
    topo: &Topology,
    bundle: &Bundle,
    o: &EnvoyOptions,
    notes: &mut Notes,
) -> Result<Value, String> {
    let bundle_json = serde_json::to_string(bundle).map_err(|e| e.to_string())?;
    let mut clusters = Vec::new();
    let mut host_rewrites: BTreeMap<String, String> = BTreeMap::new();
    for b in &topo.backends {
        let key = b
            .service_name
            .clone()
            .or_else(|| b.hostname.clone())
            .unwrap_or_default();
        let resolved = lookup(&o.resolve, &b.namespace, &key);
        let (host, port) = match resolved {
            Some(r) => (r.host.clone(), r.port),
            None => {
                let host = match (&b.service_name, &b.hostname) {
                    (Some(s), _) => format!("{s}.{}.svc.cluster.local", b.namespace),
                    (None, Some(h)) => h.clone(),
                    _ => String::new(),
                };
                if b.service_name.is_some() {
                    notes.0.push(format!(
                        "XBackend {}: no --resolve {key}=HOST:PORT, using DNS {host}:{}",
                        b.id, b.port
                    ));
                }
                (host, b.port)
            }
        };
        let tls = resolved.and_then(|r| r.tls).unwrap_or(b.hostname.is_some());
        let sni = if tls {
            Some(b.hostname.clone().unwrap_or_else(|| key.clone()))
        } else {
            None
        };
        if let Some(h) = &b.hostname {
            host_rewrites.insert(b.cluster.clone(), h.clone());
        } else if resolved.is_some() {
            host_rewrites.insert(b.cluster.clone(), authority(&host, port));
        }
        clusters.push(cluster(
            &b.cluster,
            &host,
            port,
            sni.as_deref(),
            &o.upstream_ca,
        ));
    }
    for s in &topo.services {
        let (host, port, tls) = match lookup(&o.resolve, &s.namespace, &s.name) {
            Some(r) => {
                host_rewrites.insert(s.cluster.clone(), authority(&r.host, r.port));
                (r.host.clone(), r.port, r.tls == Some(true))
            }
            None => {
                let h = format!("{}.{}.svc.cluster.local", s.name, s.namespace);
                notes.0.push(format!(
                    "Service {}/{}: no --resolve {}=HOST:PORT, using DNS {h}:{}",
                    s.namespace, s.name, s.name, s.port
                ));
                (h, s.port, false)
            }
        };
        clusters.push(cluster(
            &s.cluster,
            &host,
            port,
            tls.then_some(s.name.as_str()),
            &o.upstream_ca,
        ));
    }
    for a in &topo.authorizers {
        let (host, port, tls) = match lookup(&o.resolve, &a.namespace, &a.name) {
            Some(r) => (r.host.clone(), r.port, r.tls == Some(true)),
            None => {
                let h = format!("{}.{}.svc.cluster.local", a.name, a.namespace);
                notes.0.push(format!(
                    "authorizer Service {}/{}: no --resolve {}=HOST:PORT, using DNS {h}:{}",
                    a.namespace, a.name, a.name, a.port
                ));
                (h, a.port, false)
            }
        };
        let mut c = cluster(
            &a.cluster,
            &host,
            port,
            tls.then_some(a.name.as_str()),
            &o.upstream_ca,
        );
        if a.grpc {
            http2_only(&mut c);
        }
        clusters.push(c);
    }
    for p in &o.jwt {
        if let (Jwks::Remote { host, port, .. }, Some(name)) = (&p.jwks, p.jwks_cluster()) {
            let mut c = cluster(&name, host, *port, Some(host), &o.upstream_ca);
            if let Some(obj) = c.as_object_mut() {
                // `localhost` and dual-stack names: try IPv4 first, then IPv6.
                obj.insert("dns_lookup_family".into(), json!("V4_PREFERRED"));
            }
            clusters.push(c);
        }
    }

    // Envoy listeners: one per (address, port).
    let mut groups: BTreeMap<(String, u16), Vec<(String, &ListenerModel)>> = BTreeMap::new();
    for g in &topo.gateways {
        let addrs = if g.addresses.is_empty() {
            vec![o.bind.clone()]
        } else {
            g.addresses.clone()
        };
        for l in &g.listeners {
            for a in &addrs {
                groups
                    .entry((a.clone(), l.port))
                    .or_default()
                    .push((format!("{}/{}/{}", g.namespace, g.name, l.name), l));
            }
        }
    }
    if !o.jwt_required.is_empty() && o.jwt.is_empty() {
        return Err(
            "--jwt-required needs a --jwt-provider (the token it requires is verified by one)"
                .into(),
        );
    }
    let mut required_used = BTreeSet::new();
    let mut listeners = Vec::new();
    for ((addr, port), ls) in groups {
        let name = format!("{addr}:{port}");
        let https = ls.iter().any(|(_, l)| l.protocol == Protocol::Https);
        let mut listener = json!({
            "name": name,
            "address": {"socket_address": {"address": addr, "port_value": port}},
            "per_connection_buffer_limit_bytes": BUFFER_LIMIT,
        });
        let chains: Vec<Value> = if !https {
            let refs: Vec<&ListenerModel> = ls.iter().map(|(_, l)| *l).collect();
            let vhosts = virtual_hosts(&refs, &name, &host_rewrites);
            // Plain-HTTP listeners on one port share one filter chain: all require a token or none.
            let required: Vec<(&String, bool)> = ls
                .iter()
                .map(|(lname, _)| (lname, jwt_required(o, lname, &mut required_used)))
                .collect();
            let jwt_required = required.iter().any(|(_, r)| *r);
            if let Some((other, _)) = required.iter().find(|(_, r)| *r != jwt_required) {
                return Err(format!(
                    "--jwt-required: listener {other} shares port {port} with a listener that requires a token; name every listener on that port, or none"
                ));
            }
            let chain = Chain {
                name: &name,
                tls: false,
                jwt_required,
            };
            vec![json!({"filters": hcm(&chain, vhosts, o, bundle, &bundle_json)})]
        } else {
            let mut chains = Vec::new();
            for (lname, l) in &ls {
                let vhosts = virtual_hosts(&[*l], lname, &host_rewrites);
                let c = Chain {
                    name: lname,
                    tls: true,
                    jwt_required: jwt_required(o, lname, &mut required_used),
                };
                let mut chain = json!({
                    "filters": hcm(&c, vhosts, o, bundle, &bundle_json),
                    "transport_socket": downstream_tls(lname, l, o)?,
                });
                if let (Some(h), Some(obj)) = (&l.hostname, chain.as_object_mut()) {
                    obj.insert("filter_chain_match".into(), json!({"server_names": [h]}));
                }
                chains.push(chain);
            }
            if let Some(obj) = listener.as_object_mut() {
                obj.insert(
                    "listener_filters".into(),
                    json!([{"name": "envoy.filters.listener.tls_inspector", "typed_config": {
                        "@type": format!("{T}envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector")}}]),
                );
            }
            chains
        };
        if let Some(obj) = listener.as_object_mut() {
            obj.insert("filter_chains".into(), json!(chains));
        }
        listeners.push(listener);
    }
    if let Some(unknown) = o.jwt_required.iter().find(|r| !required_used.contains(*r)) {
        let known: Vec<String> = topo
            .gateways
            .iter()
            .flat_map(|g| {
                g.listeners
                    .iter()
                    .map(move |l| format!("{}/{}/{}", g.namespace, g.name, l.name))
            })
            .collect();
        return Err(format!(
            "--jwt-required {unknown}: no such listener (LISTENER, GATEWAY/LISTENER or NAMESPACE/GATEWAY/LISTENER; listeners: {})",
            known.join(", ")
        ));
    }
    let mut boot = json!({
        "admin": {"address": {"socket_address": {"address": o.admin_address, "port_value": o.admin_port}}},
        "static_resources": {"listeners": listeners, "clusters": clusters}
    });
    if let (Some(_), Some(obj)) = (&o.ecds_dir, boot.as_object_mut()) {
        // Envoy subscribes to a config source only with a node id and cluster.
        obj.insert(
            "node".into(),
            json!({"id": "mcp-access", "cluster": "mcp-access"}),
        );
    }
    Ok(boot)
}

fn downstream_tls(lname: &str, l: &ListenerModel, o: &EnvoyOptions) -> Result<Value, String> {
    let Some(tls) = &l.tls else {
        return Err(format!("listener {lname}: HTTPS without TLS settings"));
    };
    let mut certs = Vec::new();
    for c in &tls.certificates {
        let (ns, name) = c.split_once('/').unwrap_or(("", c));
        let (cert, key) = lookup(&o.tls_certs, ns, name).ok_or_else(|| {
            format!("listener {lname}: no --tls-cert {name}=<cert.pem>,<key.pem> for Secret {c}")
        })?;
        certs.push(
            json!({"certificate_chain": {"filename": cert}, "private_key": {"filename": key}}),
        );
    }
    let mut common = json!({"tls_certificates": certs, "alpn_protocols": ["h2", "http/1.1"]});
    let mut require = false;
    if let Some(v) = &tls.client_validation {
        let mut files = Vec::new();
        for r in &v.ca_refs {
            let (ns, name) = r.split_once('/').unwrap_or(("", r));
            let f = lookup(&o.client_cas, ns, name).ok_or_else(|| {
                format!("listener {lname}: no --client-ca {name}=<ca.pem> for {r}")
            })?;
            files.push(f.clone());
        }
        if files.len() > 1 {
            return Err(format!("listener {lname}: several client CA references; concatenate them into one --client-ca file"));
        }
        if let (Some(f), Some(obj)) = (files.first(), common.as_object_mut()) {
            obj.insert(
                "validation_context".into(),
                json!({"trusted_ca": {"filename": f}}),
            );
        }
        require = !v.optional;
    }
    Ok(json!({
        "name": "envoy.transport_sockets.tls",
        "typed_config": {
            "@type": format!("{T}envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext"),
            "require_client_certificate": require,
            "common_tls_context": common
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalization_follows_the_escaped_slashes_choice() {
        let reject = normalization(EscapedSlashes::Reject);
        assert_eq!(reject["path_with_escaped_slashes_action"], "REJECT_REQUEST");
        assert_eq!(reject["normalize_path"], true);
        assert_eq!(reject["merge_slashes"], true);
        assert_eq!(
            reject["common_http_protocol_options"]["headers_with_underscores_action"],
            "REJECT_REQUEST"
        );
        let decode = normalization(EscapedSlashes::Decode);
        assert_eq!(
            decode["path_with_escaped_slashes_action"],
            "UNESCAPE_AND_FORWARD"
        );
    }
}
