//! `mcp-access`: Kubernetes manifests to a policy bundle, an Envoy configuration and an
//! explanation of any decision. See docs/cli.md.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use mcp_access_bundle::{Bundle, UnknownBackend};
use mcp_access_cli::checks;
use mcp_access_cli::envoy::{self, EnvoyOptions, Notes};
use mcp_access_cli::explain::{self, RequestSpec};
use mcp_access_cli::jwt;
use mcp_access_cli::manifests::{self, ListenerNames, ManifestOptions, Platform};
use mcp_access_k8s::{compile, Compiled, Manifests, Options};

/// Exit code: input the API server would reject, or an error.
const EXIT_INVALID: u8 = 1;
/// Exit code: something was not accepted (without --allow-not-accepted).
const EXIT_NOT_ACCEPTED: u8 = 3;
/// Exit code: `validate` found references that lead nowhere (without --allow-dangling).
const EXIT_DANGLING: u8 = 4;

#[derive(Parser)]
#[command(
    name = "mcp-access",
    version,
    about = "Compile Kubernetes manifests (Gateway, HTTPRoute, XBackend, XAccessPolicy, AccessPolicy, ReferenceGrant) into an mcp-access policy bundle and an Envoy configuration, and explain decisions"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compile manifests to a policy bundle; print the status report.
    Compile {
        #[command(flatten)]
        input: Input,
        /// Write the bundle here (`-`: standard output, the report then goes to standard error).
        #[arg(short, long)]
        output: Option<PathBuf>,
        #[command(flatten)]
        report: ReportArgs,
    },
    /// Validate and compile manifests without writing anything; print the status report.
    /// References that lead nowhere (an unknown backendRef or target, an XBackend no route
    /// reaches) fail it with exit code 4.
    Validate {
        #[command(flatten)]
        input: Input,
        #[command(flatten)]
        report: ReportArgs,
        /// Report references that lead nowhere as warnings instead of failing.
        #[arg(long)]
        allow_dangling: bool,
    },
    /// Render a complete Envoy bootstrap with the filter and the compiled bundle.
    Envoy {
        #[command(flatten)]
        input: Input,
        #[command(flatten)]
        envoy: EnvoyArgs,
        /// Write the configuration here (`.json`: JSON, otherwise YAML; `-`: standard output).
        #[arg(short, long, default_value = "-")]
        output: PathBuf,
        /// Also write the bundle here.
        #[arg(long)]
        bundle_out: Option<PathBuf>,
        /// Deliver the filter's configuration by extension config discovery from
        /// DIR/mcp_access.ecds.json (written now): `mcp-access publish --ecds DIR` then changes
        /// policies without restarting Envoy.
        #[arg(long, value_name = "DIR")]
        ecds: Option<PathBuf>,
        #[command(flatten)]
        report: ReportArgs,
    },
    /// Compile manifests and publish the bundle to a running Envoy rendered with `envoy --ecds
    /// DIR`: DIR/mcp_access.ecds.json is replaced atomically and Envoy swaps the filter's
    /// configuration without dropping a request. Nothing is written when the manifests have
    /// errors; Envoy itself refuses a configuration the filter cannot load and keeps the
    /// previous one. Listeners, backends and authorizer clusters are Envoy's static
    /// configuration: changing those needs `mcp-access envoy` and a restart.
    Publish {
        #[command(flatten)]
        input: Input,
        #[command(flatten)]
        wasm: WasmArg,
        /// The directory given to `mcp-access envoy --ecds`.
        #[arg(long, value_name = "DIR")]
        ecds: PathBuf,
        #[command(flatten)]
        report: ReportArgs,
    },
    /// Render the Kubernetes objects that load the filter into Envoy Gateway or Istio.
    Manifests {
        #[command(flatten)]
        input: Input,
        #[command(flatten)]
        platform: PlatformArgs,
        /// Write the objects here (`-`: standard output).
        #[arg(short, long, default_value = "-")]
        output: PathBuf,
        #[command(flatten)]
        report: ReportArgs,
    },
    /// Run one request through the filter's request flow; print the response and the trace.
    Explain(Box<ExplainArgs>),
    /// Print the effective policy of each (Gateway listener, XBackend): every level and
    /// step with its rules and where they came from (the policy, or the defaults/overrides
    /// block and strategy of a Gateway policy), and what blocks replaced or left out.
    Effective {
        #[command(flatten)]
        input: Input,
        /// Only this Gateway (`name` or `namespace/name`).
        #[arg(long)]
        gateway: Option<String>,
        /// Only this listener.
        #[arg(long)]
        listener: Option<String>,
        /// Only this XBackend (`name` or `namespace/name`).
        #[arg(long)]
        backend: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value = "text")]
        format: Format,
    },
    /// Print the policy bundle's JSON Schema.
    Schema,
    /// Print the CustomResourceDefinition of the project's AccessPolicy kind (group
    /// mcp-access.io), ready for `kubectl apply -f -`.
    Crd,
}

#[derive(Args)]
struct Input {
    /// Manifest files or directories (YAML, multi-document, or JSON; `-` for standard input).
    #[arg(short = 'f', long = "filename", required = true)]
    files: Vec<PathBuf>,
    #[command(flatten)]
    compile: CompileArgs,
}

#[derive(Args, Clone)]
struct CompileArgs {
    /// Namespace of objects that name none.
    #[arg(short = 'n', long, default_value = "default")]
    namespace: String,
    /// SPIFFE trust domain of ServiceAccount sources.
    #[arg(long, default_value = mcp_access_bundle::gateway_api::DEFAULT_TRUST_DOMAIN)]
    trust_domain: String,
    /// Accepted policies per target (Gateway or XBackend); 0 for no limit.
    #[arg(long, default_value_t = 5)]
    max_policies_per_target: usize,
    /// Accepted ExternalAuth policies per target; 0 for no limit.
    #[arg(long, default_value_t = 0)]
    max_external_auth_per_target: usize,
    /// Envoy port of a listener: LISTENER=PORT, GATEWAY/LISTENER=PORT or NAMESPACE/GATEWAY/LISTENER=PORT.
    #[arg(long = "listen", value_name = "LISTENER=PORT")]
    listen: Vec<String>,
    /// Added to every listener port without a --listen.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    port_offset: i32,
    /// Timeout of authorizer calls.
    #[arg(long, default_value_t = 1000)]
    authz_timeout_ms: u32,
    /// Leave policies that are not accepted out of the bundle (as a controller would) instead
    /// of enforcing them fail-closed.
    #[arg(long)]
    skip_rejected: bool,
    /// Requests Envoy routes to no XBackend: deny them, or decide them on Gateway policies only.
    #[arg(long, value_enum, default_value = "deny")]
    unknown_backend: UnknownBackendArg,
    /// Only Gateways of this class (repeatable; default: all).
    #[arg(long = "gateway-class")]
    gateway_classes: Vec<String>,
    /// A JWT provider of Envoy's jwt_authn filter (repeatable): its verified claims are what
    /// JWT sources match. JWKS: a local file or an https:// URI; `audience` repeatable;
    /// `forward=true` keeps the token in the upstream request.
    #[arg(
        long = "jwt-provider",
        value_name = "NAME=issuer=ISSUER,jwks=FILE|URI[,audience=AUD][,forward=BOOL]"
    )]
    jwt_providers: Vec<String>,
}

#[derive(Clone, Copy, ValueEnum)]
enum UnknownBackendArg {
    Deny,
    GatewayOnly,
}

#[derive(Args)]
struct ReportArgs {
    /// Report format.
    #[arg(long, value_enum, default_value = "yaml")]
    format: Format,
    /// Also refuse (exit 3) when a Gateway, HTTPRoute or XBackend is not accepted; a policy
    /// that is not accepted always does, unless --allow-not-accepted.
    #[arg(long, conflicts_with = "allow_not_accepted")]
    strict: bool,
    /// Proceed although something is not accepted: report it, exit 0, and write the
    /// bundle with every not-accepted policy enforced fail-closed where its target resolves.
    #[arg(long)]
    allow_not_accepted: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Yaml,
    Json,
    Text,
}

#[derive(Clone, Copy, ValueEnum)]
enum PlatformArg {
    EnvoyGateway,
    Istio,
}

#[derive(Clone, Copy, ValueEnum)]
enum ListenerNamesArg {
    Legacy,
    V2,
}

#[derive(Args)]
struct PlatformArgs {
    /// Where the filter runs.
    #[arg(long, value_enum)]
    platform: PlatformArg,
    /// REGISTRY/REPOSITORY:TAG of the filter's OCI image.
    #[arg(long, value_parser = manifests::parse_image)]
    image: String,
    /// Its manifest digest, sha256:<hex> (printed by scripts/oci-image).
    #[arg(long, value_parser = manifests::parse_digest)]
    digest: String,
    /// Name of the generated objects.
    #[arg(long, default_value = "mcp-access", value_parser = dns_label)]
    name: String,
    /// Envoy Gateway's xDS naming scheme (v2 with the XDSNameSchemeV2 runtime flag).
    #[arg(long, value_enum, default_value = "legacy")]
    eg_listener_names: ListenerNamesArg,
    /// Kubernetes cluster domain of Service DNS names.
    #[arg(long, default_value = "cluster.local")]
    cluster_domain: String,
}

fn dns_label(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-');
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!(
            "`{s}` is not a DNS label (lower-case letters, digits, '-')"
        ))
    }
}

#[derive(Args)]
#[group(required = true, multiple = false)]
struct WasmArg {
    /// The filter (`mcp_access_filter.wasm`); it must exist, its absolute path is written.
    #[arg(long)]
    wasm: Option<PathBuf>,
    /// The filter's absolute path where Envoy runs (e.g. in a container), written as given and
    /// not checked here.
    #[arg(long, value_name = "PATH")]
    wasm_path: Option<String>,
}

#[derive(Args)]
struct EnvoyArgs {
    #[command(flatten)]
    wasm: WasmArg,
    /// Map a Service or hostname to an address: NAME=HOST:PORT (NAME: `svc`, `ns/svc` or a
    /// hostname; `http://` or `https://` before HOST forces plaintext or TLS).
    #[arg(long = "resolve", value_name = "NAME=HOST:PORT")]
    resolve: Vec<String>,
    /// Certificate of a Gateway certificateRef Secret: SECRET=CERT.pem,KEY.pem.
    #[arg(long = "tls-cert", value_name = "SECRET=CERT,KEY")]
    tls_cert: Vec<String>,
    /// CA for client certificates: REF=CA.pem for a caCertificateRef, or CA.pem for HTTPS
    /// listeners whose Gateway names none.
    #[arg(long = "client-ca", value_name = "[REF=]CA.pem")]
    client_ca: Vec<String>,
    /// The --tls-cert, --client-ca and JWKS files are absolute paths where Envoy runs (e.g. in
    /// a container), written as given and not checked here.
    #[arg(long)]
    files_where_envoy_runs: bool,
    /// Address listeners bind to when their Gateway has no spec.addresses.
    #[arg(long, default_value = "0.0.0.0")]
    bind: String,
    /// Envoy admin port.
    #[arg(long, default_value_t = 9901)]
    admin_port: u16,
    /// Envoy admin address.
    #[arg(long, default_value = "127.0.0.1")]
    admin_address: String,
    /// Trusted CAs for TLS towards `hostname` XBackends.
    #[arg(long, default_value = "/etc/ssl/certs/ca-certificates.crt")]
    upstream_ca: String,
    /// Write an access log (one JSON line per request, with the filter's decision).
    #[arg(long)]
    access_log: Option<String>,
    /// Require a bearer token on this listener (repeatable; LISTENER, GATEWAY/LISTENER or
    /// NAMESPACE/GATEWAY/LISTENER): jwt_authn answers a request without one 401 with a
    /// `WWW-Authenticate: Bearer` challenge (CORS preflights pass) instead of passing it on.
    #[arg(long = "jwt-required", value_name = "LISTENER")]
    jwt_required: Vec<String>,
}

#[derive(Args)]
struct ExplainArgs {
    /// A compiled bundle (its JWT providers are those it was compiled with).
    #[arg(long, conflicts_with_all = ["files", "jwt_providers"])]
    bundle: Option<PathBuf>,
    /// Manifests to compile first (routes then decide the backend from host and path).
    #[arg(short = 'f', long = "filename")]
    files: Vec<PathBuf>,
    #[command(flatten)]
    compile: CompileArgs,
    /// Gateway (NAME or NAMESPACE/NAME) the request arrives at.
    #[arg(long)]
    gateway: Option<String>,
    /// Listener (section) name.
    #[arg(long)]
    listener: Option<String>,
    /// Destination port (instead of --gateway/--listener).
    #[arg(long)]
    port: Option<u16>,
    /// Host, or `:authority` with a port, as the client sends it. Without a port, a client of
    /// a listener on a port other than 80 or 443 sends `HOST:PORT`, and so does explain.
    #[arg(long)]
    host: Option<String>,
    /// Request path (default /mcp).
    #[arg(long)]
    path: Option<String>,
    /// HTTP method (default POST).
    #[arg(long = "http-method")]
    http_method: Option<String>,
    /// Request header NAME:VALUE (repeatable).
    #[arg(short = 'H', long = "header", value_name = "NAME:VALUE")]
    headers: Vec<String>,
    /// XBackend (NAME or NAMESPACE/NAME) Envoy routes to, instead of matching routes.
    #[arg(long)]
    backend: Option<String>,
    /// Envoy route name, instead of matching routes.
    #[arg(long)]
    route: Option<String>,
    /// Caller SPIFFE ID.
    #[arg(long, conflicts_with = "service_account")]
    spiffe: Option<String>,
    /// Caller ServiceAccount NAMESPACE/NAME (through the trust domain).
    #[arg(long)]
    service_account: Option<String>,
    /// JSON-RPC method (tools/call, prompts/get, resources/read, tools/list, initialize, ...).
    #[arg(long)]
    mcp_method: Option<String>,
    /// Tool name (implies --mcp-method tools/call).
    #[arg(long, conflicts_with_all = ["prompt", "uri", "body"])]
    tool: Option<String>,
    /// Prompt name (implies --mcp-method prompts/get).
    #[arg(long, conflicts_with_all = ["uri", "body"])]
    prompt: Option<String>,
    /// Resource URI (implies --mcp-method resources/read).
    #[arg(long, conflicts_with = "body")]
    uri: Option<String>,
    /// The request body as sent (else built from --mcp-method / --tool / --prompt / --uri).
    #[arg(long, conflicts_with = "mcp_method")]
    body: Option<String>,
    /// Authorizer outcome to assume: POLICY=allow|deny[:STATUS]|error (POLICY: an ExternalAuth
    /// policy's NAMESPACE/NAME or NAME, the authorizer name, or `*`; STATUS 300-499). Unlisted
    /// authorizers are assumed to allow; a key naming none is an error.
    #[arg(long = "assume", value_name = "POLICY=OUTCOME")]
    assume: Vec<String>,
    /// The caller's verified JWT claims, a JSON object with `iss` (an issuer of the bundle's
    /// JWT providers), `sub` and any other claims, as if Envoy's jwt_authn had verified them.
    #[arg(long = "jwt-claims", value_name = "JSON")]
    jwt_claims: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("mcp-access: {e}");
            ExitCode::from(EXIT_INVALID)
        }
    }
}

fn pairs(list: &[String], flag: &str) -> Result<Vec<(String, String)>, String> {
    list.iter()
        .map(|s| {
            s.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| format!("{flag} `{s}`: expected KEY=VALUE"))
        })
        .collect()
}

fn options(a: &CompileArgs) -> Result<Options, String> {
    let mut listen = BTreeMap::new();
    for (k, v) in pairs(&a.listen, "--listen")? {
        let port: u16 = v
            .parse()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("--listen {k}={v}: bad port"))?;
        listen.insert(k, port);
    }
    Ok(Options {
        trust_domain: a.trust_domain.clone(),
        max_policies_per_target: a.max_policies_per_target,
        max_external_auth_per_target: a.max_external_auth_per_target,
        listen,
        port_offset: a.port_offset,
        authz_timeout_ms: a.authz_timeout_ms,
        skip_rejected: a.skip_rejected,
        unknown_backend: match a.unknown_backend {
            UnknownBackendArg::Deny => UnknownBackend::Deny,
            UnknownBackendArg::GatewayOnly => UnknownBackend::GatewayOnly,
        },
        gateway_classes: a.gateway_classes.clone(),
        tls_secrets: None,
        client_cas: None,
        jwt_providers: jwt::parse_providers(&a.jwt_providers)?
            .iter()
            .map(jwt::JwtProviderSpec::bundle_provider)
            .collect(),
        effective_view: false,
    })
}

fn load(files: &[PathBuf], namespace: &str) -> Result<Manifests, String> {
    let mut paths = Vec::new();
    let mut m = Manifests::default();
    for f in files {
        if f.as_os_str() == "-" {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| format!("cannot read standard input: {e}"))?;
            m.add_text("<stdin>", &text, namespace);
        } else {
            paths.push(f.clone());
        }
    }
    let more = Manifests::load_paths(&paths, namespace)?;
    m.gateways.extend(more.gateways);
    m.routes.extend(more.routes);
    m.grants.extend(more.grants);
    m.backends.extend(more.backends);
    m.policies.extend(more.policies);
    m.namespaces.extend(more.namespaces);
    m.skipped.extend(more.skipped);
    m.rejected.extend(more.rejected);
    m.unreadable.extend(more.unreadable);
    Ok(m)
}

/// Loads and compiles; prints validation problems to stderr.
fn build(input: &Input, opts: Options) -> Result<(Manifests, Compiled), String> {
    let m = load(&input.files, &input.compile.namespace)?;
    for p in m.problems() {
        eprintln!("error: {p}");
    }
    let mut c = compile(&m, &opts);
    mcp_access_bundle::validate(&c.bundle)
        .map_err(|e| format!("internal error, the compiled bundle is invalid: {e}"))?;
    c.report
        .warnings
        .extend(checks::closed_listeners(&c.bundle));
    Ok((m, c))
}

fn render_report(c: &Compiled, format: Format) -> Result<String, String> {
    match format {
        Format::Json => serde_json::to_string_pretty(&c.report)
            .map(|s| s + "\n")
            .map_err(|e| e.to_string()),
        Format::Yaml => serde_norway::to_string(&c.report).map_err(|e| e.to_string()),
        Format::Text => {
            let mut out = String::new();
            for (what, list) in [
                ("policy", &c.report.policies),
                ("gateway", &c.report.gateways),
                ("route", &c.report.routes),
                ("backend", &c.report.backends),
            ] {
                for o in list.iter() {
                    for cnd in &o.conditions {
                        let line = format!(
                            "{what:<8} {}/{} -> {}{}: {} {}",
                            o.namespace,
                            o.name,
                            cnd.target,
                            cnd.section_name
                                .as_ref()
                                .map(|s| format!(" section {s}"))
                                .unwrap_or_default(),
                            cnd.reason,
                            cnd.message
                        );
                        out.push_str(line.trim_end());
                        if let Some(e) = &cnd.enforced {
                            out.push_str(&format!("; {}: {}", e.reason, e.message));
                        }
                        out.push('\n');
                    }
                }
            }
            for w in &c.report.warnings {
                out.push_str(&format!("warning  {w}\n"));
            }
            for s in &c.report.skipped {
                out.push_str(&format!(
                    "skipped  {} {} {} ({})\n",
                    s.api_version, s.kind, s.object, s.source
                ));
            }
            Ok(out)
        }
    }
}

/// The exit code of a command that writes: 1 for invalid input, 3 when a policy (with
/// --strict: anything) is not accepted and --allow-not-accepted was not given.
fn exit_code(c: &Compiled, r: &ReportArgs) -> u8 {
    if !c.report.invalid.is_empty() {
        EXIT_INVALID
    } else {
        not_accepted(c, r, r.strict)
    }
}

/// Names on stderr each object (`all`) or policy that is not accepted, and each policy
/// enforced nowhere; 3 when any is not accepted, unless --allow-not-accepted.
fn not_accepted(c: &Compiled, r: &ReportArgs, all: bool) -> u8 {
    let lists: &[&Vec<mcp_access_k8s::ObjectStatus>] = if all {
        &[
            &c.report.policies,
            &c.report.gateways,
            &c.report.routes,
            &c.report.backends,
        ]
    } else {
        &[&c.report.policies]
    };
    let level = if r.allow_not_accepted {
        "warning"
    } else {
        "error"
    };
    let mut n = 0;
    for o in lists.iter().flat_map(|l| l.iter()) {
        for cnd in o.conditions.iter().filter(|x| !x.accepted) {
            n += 1;
            eprintln!(
                "{level}: {}: {} {}/{} -> {}: not accepted: {}: {}",
                o.source, o.kind, o.namespace, o.name, cnd.target, cnd.reason, cnd.message
            );
        }
    }
    for u in &c.report.unenforced {
        eprintln!("{level}: {u}");
    }
    if n == 0 || r.allow_not_accepted {
        0
    } else {
        eprintln!("mcp-access: {n} status condition(s) not accepted (--allow-not-accepted to proceed with fail-closed stand-ins)");
        EXIT_NOT_ACCEPTED
    }
}

fn write_out(path: &PathBuf, text: &str) -> Result<(), String> {
    if path.as_os_str() == "-" {
        print!("{text}");
        Ok(())
    } else {
        std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
    }
}

fn bundle_text(b: &Bundle) -> Result<String, String> {
    serde_json::to_string_pretty(b)
        .map(|s| s + "\n")
        .map_err(|e| e.to_string())
}

fn run(cli: Cli) -> Result<u8, String> {
    match cli.command {
        Command::Schema => {
            print!("{}", mcp_access_bundle::json_schema_text());
            Ok(0)
        }
        Command::Crd => {
            print!("{}", mcp_access_k8s::crd_yaml());
            Ok(0)
        }
        Command::Validate {
            input,
            report,
            allow_dangling,
        } => {
            let (_, mut c) = build(&input, options(&input.compile)?)?;
            let dangling = checks::dangling(&c);
            if allow_dangling {
                c.report.warnings.extend(dangling.iter().cloned());
            }
            print!("{}", render_report(&c, report.format)?);
            let code = if c.report.invalid.is_empty() {
                0
            } else {
                EXIT_INVALID
            };
            if code == 0 && !allow_dangling && !dangling.is_empty() {
                for d in &dangling {
                    eprintln!("error: dangling reference: {d}");
                }
                eprintln!(
                    "mcp-access: {} reference(s) lead nowhere (--allow-dangling to accept them)",
                    dangling.len()
                );
                return Ok(EXIT_DANGLING);
            }
            if code == 0 {
                // --allow-dangling waives what routes and XBackends lead nowhere, never a policy.
                return Ok(not_accepted(&c, &report, !allow_dangling));
            }
            Ok(code)
        }
        Command::Manifests {
            input,
            platform: p,
            output,
            report,
        } => {
            let (_, mut c) = build(&input, options(&input.compile)?)?;
            if matches!(p.platform, PlatformArg::EnvoyGateway) {
                manifests::report_eg_ports(&mut c.report, &c.topology);
            }
            let code = exit_code(&c, &report);
            eprint!("{}", render_report(&c, report.format)?);
            if code != 0 {
                return Ok(nothing_written(code));
            }
            let o = ManifestOptions {
                platform: match p.platform {
                    PlatformArg::EnvoyGateway => Platform::EnvoyGateway,
                    PlatformArg::Istio => Platform::Istio,
                },
                name: p.name,
                image: p.image,
                sha256: p.digest,
                listener_names: match p.eg_listener_names {
                    ListenerNamesArg::Legacy => ListenerNames::Legacy,
                    ListenerNamesArg::V2 => ListenerNames::V2,
                },
                cluster_domain: p.cluster_domain,
            };
            if !input.compile.jwt_providers.is_empty() {
                eprintln!("note: --jwt-provider: the bundle reads verified claims under each provider's name; configure the platform's jwt_authn (payload_in_metadata) to match, the generated objects do not");
            }
            write_out(&output, &manifests::render(&c.bundle, &c.topology, &o)?)?;
            Ok(code)
        }
        Command::Compile {
            input,
            output,
            report,
        } => {
            let (_, c) = build(&input, options(&input.compile)?)?;
            let code = exit_code(&c, &report);
            let text = render_report(&c, report.format)?;
            let to_stdout = output.as_ref().is_some_and(|o| o.as_os_str() == "-");
            if to_stdout {
                eprint!("{text}");
            } else {
                print!("{text}");
            }
            if code != 0 {
                return Ok(nothing_written(code));
            }
            if let Some(o) = output {
                write_out(&o, &bundle_text(&c.bundle)?)?;
            }
            Ok(code)
        }
        Command::Publish {
            input,
            wasm,
            ecds,
            report,
        } => {
            let (_, c) = build(&input, options(&input.compile)?)?;
            let code = exit_code(&c, &report);
            eprint!("{}", render_report(&c, report.format)?);
            if code != 0 {
                return Ok(nothing_written(code));
            }
            let bundle_json = serde_json::to_string(&c.bundle).map_err(|e| e.to_string())?;
            let doc = envoy::ecds_document(&wasm_path(&wasm)?, &bundle_json);
            let version = envoy::publish_ecds(&ecds, &doc)?;
            eprintln!(
                "published version {version} to {}",
                ecds.join(envoy::ECDS_FILE).display()
            );
            Ok(code)
        }
        Command::Envoy {
            input,
            envoy: e,
            output,
            bundle_out,
            ecds,
            report,
        } => {
            let ecds = ecds.map(|d| ecds_dir(&d)).transpose()?;
            let mut opts = options(&input.compile)?;
            let mut tls_certs: BTreeMap<String, (String, String)> =
                pairs(&e.tls_cert, "--tls-cert")?
                    .into_iter()
                    .map(|(k, v)| {
                        v.split_once(',')
                            .map(|(c, kf)| (k.clone(), (c.to_string(), kf.to_string())))
                            .ok_or_else(|| format!("--tls-cert {k}={v}: expected CERT.pem,KEY.pem"))
                    })
                    .collect::<Result<_, _>>()?;
            let mut client_cas: BTreeMap<String, String> = e
                .client_ca
                .iter()
                .map(|s| match s.split_once('=') {
                    Some((k, v)) => (k.to_string(), v.to_string()),
                    None => (String::new(), s.clone()),
                })
                .collect();
            let mut resolve = BTreeMap::new();
            for (k, v) in pairs(&e.resolve, "--resolve")? {
                resolve.insert(
                    k,
                    envoy::parse_resolve_target(&v).map_err(|x| format!("--resolve {x}"))?,
                );
            }
            let mut jwt = jwt::parse_providers(&input.compile.jwt_providers)?;
            let files = (&mut tls_certs, &mut client_cas, &mut jwt[..]);
            envoy::check_files(files, e.files_where_envoy_runs)?;
            opts.tls_secrets = Some(tls_certs.keys().cloned().collect());
            opts.client_cas = Some(client_cas.keys().cloned().collect());
            let (_, c) = build(&input, opts)?;
            let code = exit_code(&c, &report);
            eprint!("{}", render_report(&c, report.format)?);
            if code != 0 {
                return Ok(nothing_written(code));
            }
            let unserved = envoy::listeners_without_files(&c.report);
            if !unserved.is_empty() && !report.allow_not_accepted {
                for u in &unserved {
                    eprintln!("error: {u}; without it Envoy would have no listener for it (--allow-not-accepted to write the configuration without it)");
                }
                return Ok(nothing_written(EXIT_NOT_ACCEPTED));
            }
            let wasm = wasm_path(&e.wasm)?;
            let eo = EnvoyOptions {
                wasm,
                admin_port: e.admin_port,
                admin_address: e.admin_address,
                bind: e.bind,
                resolve,
                tls_certs,
                client_cas,
                upstream_ca: e.upstream_ca,
                access_log: e.access_log,
                jwt,
                jwt_required: e.jwt_required,
                ecds_dir: ecds.as_ref().map(|d| d.to_string_lossy().into_owned()),
            };
            let mut notes = Notes::default();
            let config = envoy::render(&c.topology, &c.bundle, &eo, &mut notes)?;
            if let Some(dir) = &ecds {
                let bundle_json = serde_json::to_string(&c.bundle).map_err(|x| x.to_string())?;
                envoy::publish_ecds(dir, &envoy::ecds_document(&eo.wasm, &bundle_json))?;
            }
            for n in &notes.0 {
                eprintln!("note: {n}");
            }
            let json_out = output.extension().is_some_and(|x| x == "json");
            let text = if json_out {
                serde_json::to_string_pretty(&config)
                    .map(|s| s + "\n")
                    .map_err(|x| x.to_string())?
            } else {
                serde_norway::to_string(&config).map_err(|x| x.to_string())?
            };
            write_out(&output, &text)?;
            if let Some(b) = bundle_out {
                write_out(&b, &bundle_text(&c.bundle)?)?;
            }
            Ok(code)
        }
        Command::Explain(a) => explain_cmd(*a),
        Command::Effective {
            input,
            gateway,
            listener,
            backend,
            format,
        } => {
            let mut o = options(&input.compile)?;
            o.effective_view = true;
            let (_, c) = build(&input, o)?;
            let matches = |want: &Option<String>, full: &str| {
                want.as_ref()
                    .is_none_or(|w| w == full || full.split_once('/').is_some_and(|(_, n)| n == w))
            };
            let views: Vec<&mcp_access_k8s::EffectivePolicy> = c
                .effective
                .iter()
                .filter(|e| {
                    matches(&gateway, &e.gateway)
                        && listener.as_ref().is_none_or(|l| l == &e.listener)
                        && matches(&backend, &e.backend)
                })
                .collect();
            if views.is_empty() {
                return Err("no (listener, XBackend) pair matches: a route from a listener to an XBackend makes one".into());
            }
            let text = match format {
                Format::Json => serde_json::to_string_pretty(&views)
                    .map(|s| s + "\n")
                    .map_err(|e| e.to_string())?,
                Format::Yaml => serde_norway::to_string(&views).map_err(|e| e.to_string())?,
                Format::Text => effective_text(&views),
            };
            print!("{text}");
            Ok(if c.report.invalid.is_empty() {
                0
            } else {
                EXIT_INVALID
            })
        }
    }
}

/// The effective policy view as text.
fn effective_text(views: &[&mcp_access_k8s::EffectivePolicy]) -> String {
    let mut out = String::new();
    for v in views {
        out.push_str(&format!(
            "{} listener {} -> XBackend {}\n",
            v.gateway, v.listener, v.backend
        ));
        for l in &v.levels {
            if l.steps.is_empty() {
                out.push_str(&format!("  {} level: no policy\n", l.level));
                continue;
            }
            out.push_str(&format!("  {} level\n", l.level));
            for s in &l.steps {
                out.push_str(&format!("    {}\n", s.step));
                for p in &s.policies {
                    out.push_str(&format!("      {}  from {}\n", p.policy, p.from));
                    for w in &p.when {
                        out.push_str(&format!("        when {w}\n"));
                    }
                    if let Some(a) = &p.authorizer {
                        out.push_str(&format!("        authorizer {a}\n"));
                    }
                    match &p.rules {
                        None => out.push_str("        all traffic\n"),
                        Some(rs) if rs.is_empty() => {
                            out.push_str("        no traffic: admits nothing (fail-closed)\n");
                        }
                        Some(rs) => {
                            for r in rs {
                                out.push_str(&format!("        rule {}: {}\n", r.name, r.rule));
                            }
                        }
                    }
                }
            }
        }
        for n in &v.notes {
            out.push_str(&format!("  note: {n}\n"));
        }
    }
    out
}

fn explain_cmd(a: ExplainArgs) -> Result<u8, String> {
    let mut report = None;
    let (bundle, topo) = match (&a.bundle, a.files.is_empty()) {
        (Some(p), _) => {
            let text = std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
            (
                mcp_access_bundle::parse_bundle(&text)
                    .map_err(|e| e.to_string())?
                    .into_inner(),
                None,
            )
        }
        (None, false) => {
            let input = Input {
                files: a.files.clone(),
                compile: a.compile.clone(),
            };
            let (_, c) = build(&input, options(&a.compile)?)?;
            if !c.report.invalid.is_empty() {
                return Err("the manifests have errors".into());
            }
            report = Some(c.report);
            (c.bundle, Some(c.topology))
        }
        (None, true) => return Err("give a --bundle or manifests (-f)".into()),
    };
    let mut assume = BTreeMap::new();
    for (k, v) in pairs(&a.assume, "--assume")? {
        if let Some(note) = report
            .as_ref()
            .and_then(|r| enforced_nowhere(r, &bundle, &k))
        {
            eprintln!("note: {note}");
            continue;
        }
        assume.insert(
            k,
            explain::parse_assumption(&v).map_err(|e| format!("--assume {e}"))?,
        );
    }
    let headers = a
        .headers
        .iter()
        .map(|h| {
            h.split_once(':')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .ok_or_else(|| format!("-H `{h}`: expected NAME:VALUE"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let (mcp_method, param) = match (&a.mcp_method, &a.tool, &a.prompt, &a.uri) {
        (m, Some(t), _, _) => (
            Some(m.clone().unwrap_or_else(|| "tools/call".into())),
            Some(t.clone()),
        ),
        (m, _, Some(p), _) => (
            Some(m.clone().unwrap_or_else(|| "prompts/get".into())),
            Some(p.clone()),
        ),
        (m, _, _, Some(u)) => (
            Some(m.clone().unwrap_or_else(|| "resources/read".into())),
            Some(u.clone()),
        ),
        (m, _, _, _) => (m.clone(), None),
    };
    let spec = RequestSpec {
        gateway: a.gateway,
        listener: a.listener,
        port: a.port,
        host: a.host,
        path: a.path,
        method: a.http_method,
        headers,
        backend: a.backend,
        route: a.route,
        spiffe: a.spiffe,
        service_account: a.service_account,
        mcp_method,
        param,
        body: a.body,
        assume,
        jwt_claims: match &a.jwt_claims {
            None => None,
            Some(text) => {
                let v: serde_json::Value = serde_json::from_str(text)
                    .map_err(|e| format!("--jwt-claims: not JSON: {e}"))?;
                if !v.is_object() {
                    return Err("--jwt-claims: must be a JSON object (e.g. {\"iss\": \"https://idp.example\", \"sub\": \"u1\"})".into());
                }
                Some(v)
            }
        },
    };
    let e = explain::explain(&bundle, topo.as_ref(), &spec)?;
    match a.format {
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(&e).map_err(|x| x.to_string())?
        ),
        Format::Yaml => print!(
            "{}",
            serde_norway::to_string(&e).map_err(|x| x.to_string())?
        ),
        Format::Text => print!("{}", explain::to_text(&e)),
    }
    Ok(0)
}

/// For an `--assume` key that names a policy of the manifests with nothing in the bundle
/// (not accepted, and its target does not resolve): what became of it.
fn enforced_nowhere(r: &mcp_access_k8s::Report, b: &Bundle, key: &str) -> Option<String> {
    let names = |id: &str| key == id || id.split_once('/').is_some_and(|(_, n)| n == key);
    let in_bundle = b.policies.iter().any(|p| {
        names(&format!("{}/{}", p.namespace, p.name))
            || names(&format!(
                "{}/{}",
                p.namespace,
                p.name.trim_end_matches(".not-accepted")
            ))
    });
    if in_bundle {
        return None;
    }
    let p = r
        .policies
        .iter()
        .find(|p| !p.accepted() && names(&format!("{}/{}", p.namespace, p.name)))?;
    let why: Vec<String> = p
        .conditions
        .iter()
        .filter(|c| !c.accepted)
        .map(|c| format!("{}: {}", c.reason, c.message))
        .collect();
    Some(format!(
        "--assume {key}: {} {}/{} is not accepted ({}) and is enforced nowhere: its target does not resolve; no authorizer is called",
        p.kind,
        p.namespace,
        p.name,
        why.join("; ")
    ))
}

/// The filter path written into the configuration: `--wasm` must be a file and is made
/// absolute (Envoy resolves relative paths against its own working directory); `--wasm-path`
/// must be absolute and is written as given.
/// The ECDS directory, created if missing, as the absolute path Envoy watches.
fn ecds_dir(d: &Path) -> Result<PathBuf, String> {
    std::fs::create_dir_all(d).map_err(|e| format!("--ecds {}: {e}", d.display()))?;
    std::fs::canonicalize(d).map_err(|e| format!("--ecds {}: {e}", d.display()))
}

fn wasm_path(w: &WasmArg) -> Result<String, String> {
    match (&w.wasm, &w.wasm_path) {
        (Some(p), _) => {
            if !p.is_file() {
                return Err(format!(
                    "--wasm {}: no such file (build it with scripts/build, or give --wasm-path for a path that exists only where Envoy runs)",
                    p.display()
                ));
            }
            let abs =
                std::fs::canonicalize(p).map_err(|e| format!("--wasm {}: {e}", p.display()))?;
            abs.to_str()
                .map(str::to_string)
                .ok_or_else(|| format!("--wasm {}: the path is not UTF-8", abs.display()))
        }
        (None, Some(s)) if s.starts_with('/') => Ok(s.clone()),
        (None, Some(s)) => Err(format!("--wasm-path {s}: give an absolute path")),
        (None, None) => Err("give --wasm FILE or --wasm-path PATH".into()),
    }
}

/// Says why nothing was written and passes the exit code on.
fn nothing_written(code: u8) -> u8 {
    let why = if code == EXIT_INVALID {
        "the manifests have errors"
    } else {
        "not everything was accepted (--allow-not-accepted to proceed)"
    };
    eprintln!("mcp-access: nothing written: {why}");
    code
}
