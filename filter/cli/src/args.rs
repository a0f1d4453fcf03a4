//! The command line: subcommands and their flags (clap), following kubectl where it does not
//! conflict: `-f` (files, directories, `-` for stdin), `-R`, `-o` (a format, or a file to
//! write), `-n`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use mcp_access_cli::error::CliError;
use mcp_access_cli::manifests;

#[derive(Parser)]
#[command(
    name = "mcp-access",
    version,
    about = "Compile Kubernetes manifests (Gateway, HTTPRoute, XBackend, XAccessPolicy, AccessPolicy, FilterSettings, ToolPin, ReferenceGrant) into an mcp-access policy bundle and an Envoy configuration, and explain decisions"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Parsed once per run: the size of its largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
pub(crate) enum Command {
    /// Compile manifests to a policy bundle; print the status report.
    Compile {
        #[command(flatten)]
        input: Input,
        /// `json` (default) or `yaml`: the bundle on standard output (the report then goes to
        /// standard error); or a file to write the bundle to (the report goes to standard
        /// output; `-`: standard output).
        #[arg(short, long, value_name = "FORMAT|FILE", value_parser = Output::parse_bundle)]
        output: Option<Output>,
        #[command(flatten)]
        report: ReportArgs,
    },
    /// Validate and compile manifests without writing anything; print the status report.
    /// References that lead nowhere (an unknown backendRef or target, an XBackend no route
    /// reaches) fail it with exit code 4.
    Validate {
        #[command(flatten)]
        input: Input,
        /// Report format.
        #[arg(
            short = 'o',
            long = "output",
            visible_alias = "format",
            value_enum,
            default_value = "yaml"
        )]
        format: Format,
        /// Report what is not accepted as warnings and exit 0 (what compile and envoy would
        /// then enforce fail-closed).
        #[arg(long)]
        allow_not_accepted: bool,
        /// Accepted for symmetry with compile: validate always refuses what is not accepted.
        #[arg(long, hide = true, conflicts_with = "allow_not_accepted")]
        strict: bool,
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
        /// `yaml` (default) or `json` on standard output, or a file to write (`.json`: JSON,
        /// otherwise YAML). The report goes to standard error.
        #[arg(short, long, value_name = "FORMAT|FILE", default_value = "yaml", value_parser = Output::parse_config)]
        output: Output,
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
        /// `yaml` (default) or `json` on standard output, or a file to write (`.json`: JSON,
        /// otherwise YAML). The report goes to standard error.
        #[arg(short, long, value_name = "FORMAT|FILE", default_value = "yaml", value_parser = Output::parse_config)]
        output: Output,
        #[command(flatten)]
        report: ReportArgs,
    },
    /// Run one request through the filter's request flow; print the response and the trace.
    Explain(Box<ExplainArgs>),
    /// Write a ToolPin of the tools an MCP server lists (live over Streamable HTTP, or a saved
    /// `tools/list` answer) for review; with --check, compare the server with a ToolPin and
    /// exit 5 on any difference, with a diff per tool (docs/pins.md).
    Pin(Box<PinArgs>),
    /// Run decision tests (PolicyTest documents, docs/policy-tests.md): each case's request
    /// through the filter's request flow, its decision compared with the expected one. Exits
    /// 7 when a case fails, 1 when a test document cannot run.
    Test(TestArgs),
    /// Which callers may call a tool (prompt, resource URI) of an XBackend: per listener that
    /// routes to it, each caller the policies tell apart (SPIFFE IDs and ServiceAccounts,
    /// classes of verified tokens, every other caller), under which policies and rules, and
    /// what decides at run time (authorizers, CEL, HTTP conditions).
    WhoCan(WhoCanArgs),
    /// Decide recorded requests again under candidate policies: reads the filter's decision
    /// records (decision log lines, or access-log entries carrying the decision filter state)
    /// and prints the decisions that flip (who loses or gains which call). Exits 6 on a flip
    /// unless --allow-flips.
    Replay(ReplayArgs),
    /// Check decision records as receipts (docs/audit.md): `verify` rebuilds each chain from
    /// the logs and checks its checkpoints' signatures; `keygen` makes a signing key pair.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Print the effective policy of each (Gateway listener, XBackend), per route where
    /// HTTPRoute-targeted policies make routes differ: every level and step with its rules
    /// and where they came from (the policy, or the defaults/overrides block and strategy of
    /// a Gateway policy), and what blocks replaced or left out.
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
        /// Only what requests through this HTTPRoute (`name` or `namespace/name`) meet: the
        /// views about its routes, and those about every route.
        #[arg(long)]
        route: Option<String>,
        /// Output format.
        #[arg(
            short = 'o',
            long = "output",
            visible_alias = "format",
            value_enum,
            default_value = "text"
        )]
        format: Format,
    },
    /// Print the status each object would get from an implementation (policy ancestors with
    /// Accepted/Enforced, Gateway listeners, HTTPRoute parents, XBackends, `<Kind>Affected` on
    /// policy targets), for `kubectl apply --server-side --subresource=status -f -`.
    Status {
        #[command(flatten)]
        input: Input,
        /// `yaml` (documents) or `json` (a List).
        #[arg(short = 'o', long = "output", value_enum, default_value = "yaml")]
        format: Format,
    },
    /// Print the policy bundle's JSON Schema.
    Schema,
    /// Print a shell completion script (bash: `source <(mcp-access completion bash)`).
    Completion {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the CustomResourceDefinitions of the project's kinds (group mcp-access.io:
    /// AccessPolicy, FilterSettings, ToolPin), ready for `kubectl apply -f -`.
    Crd,
}

#[derive(Args)]
pub(crate) struct Input {
    /// Manifest files or directories (YAML, multi-document, or JSON; `-` for standard input).
    #[arg(short = 'f', long = "filename", required = true)]
    pub(crate) files: Vec<PathBuf>,
    /// Read directories named with -f recursively (without it, only the files directly in
    /// them; skipped subdirectories are named on standard error).
    #[arg(short = 'R', long)]
    pub(crate) recursive: bool,
    #[command(flatten)]
    pub(crate) compile: CompileArgs,
}

/// Manifests a command may do without (`test`, `replay`, `explain`): each command gives `-f`
/// its own help.
#[derive(Args)]
pub(crate) struct ManifestInput {
    #[arg(short = 'f', long = "filename")]
    pub(crate) files: Vec<PathBuf>,
    #[arg(short = 'R', long)]
    pub(crate) recursive: bool,
    #[command(flatten)]
    pub(crate) compile: CompileArgs,
}

impl ManifestInput {
    /// As the commands that require manifests take them.
    pub(crate) fn input(&self) -> Input {
        Input {
            files: self.files.clone(),
            recursive: self.recursive,
            compile: self.compile.clone(),
        }
    }
}

#[derive(Args, Clone)]
pub(crate) struct CompileArgs {
    /// Namespace of objects that name none.
    #[arg(short = 'n', long, default_value = "default")]
    pub(crate) namespace: String,
    /// SPIFFE trust domain of ServiceAccount sources [default: cluster.local, or a
    /// FilterSettings object's spec.identity.trustDomain].
    #[arg(long)]
    pub(crate) trust_domain: Option<String>,
    /// Accepted policies per target (Gateway or XBackend); 0 for no limit.
    #[arg(long, default_value_t = 5)]
    pub(crate) max_policies_per_target: usize,
    /// Accepted ExternalAuth policies per target; 0 for no limit.
    #[arg(long, default_value_t = 0)]
    pub(crate) max_external_auth_per_target: usize,
    /// Envoy port of a listener: LISTENER=PORT, GATEWAY/LISTENER=PORT or NAMESPACE/GATEWAY/LISTENER=PORT.
    #[arg(long = "listen", value_name = "LISTENER=PORT")]
    pub(crate) listen: Vec<String>,
    /// Added to every listener port without a --listen.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub(crate) port_offset: i32,
    /// Timeout of authorizer calls whose policy sets none [default: 1000, or a FilterSettings
    /// object's spec.externalAuth.timeout].
    #[arg(long)]
    pub(crate) authz_timeout_ms: Option<u32>,
    /// Leave policies that are not accepted out of the bundle (as a controller would) instead
    /// of enforcing them fail-closed.
    #[arg(long)]
    pub(crate) skip_rejected: bool,
    /// Requests Envoy routes to no XBackend: deny them, or decide them on Gateway policies
    /// only [default: deny, or a FilterSettings object's spec.envoy.unknownBackend].
    #[arg(long, value_enum)]
    pub(crate) unknown_backend: Option<UnknownBackendArg>,
    /// Only Gateways of this class (repeatable; default: all).
    #[arg(long = "gateway-class")]
    pub(crate) gateway_classes: Vec<String>,
    /// A JWT provider of Envoy's jwt_authn filter (repeatable): its verified claims are what
    /// JWT sources match. JWKS: a local file or an https:// URI; `audience` repeatable;
    /// `forward=true` keeps the token in the upstream request.
    #[arg(
        long = "jwt-provider",
        value_name = "NAME=issuer=ISSUER,jwks=FILE|URI[,audience=AUD][,forward=BOOL]"
    )]
    pub(crate) jwt_providers: Vec<String>,
    /// The RateLimitService (`envoy.service.ratelimit.v3`, gRPC over HTTP/2; e.g. Limitador
    /// or envoyproxy/ratelimit) that RateLimitPolicies of mode Global ask (docs/semantics.md
    /// §8.6); without it such a policy is not accepted. `envoy` and `manifests` render its
    /// cluster.
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) rate_limit_service: Option<String>,
    /// The domain of the RateLimitService's descriptors.
    #[arg(long, value_name = "DOMAIN", default_value = mcp_access_bundle::DEFAULT_RLS_DOMAIN, requires = "rate_limit_service")]
    pub(crate) rate_limit_domain: String,
    /// How long a request waits for the RateLimitService's answer (1..60000 ms); none in
    /// time follows the policies' failureMode.
    #[arg(long, value_name = "MS", default_value_t = mcp_access_bundle::DEFAULT_RLS_TIMEOUT_MS, requires = "rate_limit_service")]
    pub(crate) rate_limit_timeout_ms: u32,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum UnknownBackendArg {
    Deny,
    GatewayOnly,
}

#[derive(Args)]
pub(crate) struct ReportArgs {
    /// Format of the status report (on standard error when the command's output goes to
    /// standard output).
    #[arg(
        long = "report-format",
        visible_alias = "format",
        value_enum,
        default_value = "yaml"
    )]
    pub(crate) format: Format,
    /// Also refuse (exit 3) when a Gateway, HTTPRoute or XBackend is not accepted, and (exit
    /// 4) when a reference leads nowhere (what `validate` refuses; otherwise a warning); a
    /// policy that is not accepted always does, unless --allow-not-accepted.
    #[arg(long, conflicts_with = "allow_not_accepted")]
    pub(crate) strict: bool,
    /// Proceed although something is not accepted: report it, exit 0, and write the
    /// bundle with every not-accepted policy enforced fail-closed where its target resolves.
    #[arg(long)]
    pub(crate) allow_not_accepted: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    Yaml,
    Json,
    Text,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum PlatformArg {
    EnvoyGateway,
    Istio,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum ListenerNamesArg {
    Legacy,
    V2,
}

#[derive(Args)]
pub(crate) struct PlatformArgs {
    /// Where the filter runs.
    #[arg(long, value_enum)]
    pub(crate) platform: PlatformArg,
    /// REGISTRY/REPOSITORY:TAG of the filter's OCI image.
    #[arg(long, value_parser = manifests::parse_image)]
    pub(crate) image: String,
    /// Its manifest digest, sha256:<hex> (printed by scripts/oci-image).
    #[arg(long, value_parser = manifests::parse_digest)]
    pub(crate) digest: String,
    /// Name of the generated objects.
    #[arg(long, default_value = "mcp-access", value_parser = dns_label)]
    pub(crate) name: String,
    /// Envoy Gateway's xDS naming scheme (v2 with the XDSNameSchemeV2 runtime flag).
    #[arg(long, value_enum, default_value = "legacy")]
    pub(crate) eg_listener_names: ListenerNamesArg,
    /// Kubernetes cluster domain of Service DNS names.
    #[arg(long, default_value = "cluster.local")]
    pub(crate) cluster_domain: String,
    /// Istio only: insert the filter with an EnvoyFilter (extension config discovery, the
    /// module fetched by istio-agent from the OCI image) that holds request headers until the
    /// decision, instead of a WasmPlugin, which cannot (docs/deploy.md).
    #[arg(long)]
    pub(crate) istio_hold_headers: bool,
}

pub(crate) fn dns_label(s: &str) -> Result<String, CliError> {
    let ok = !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-');
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!("`{s}` is not a DNS label (lower-case letters, digits, '-')").into())
    }
}

#[derive(Args)]
#[group(required = true, multiple = false)]
pub(crate) struct WasmArg {
    /// The filter (`mcp_access_filter.wasm`); it must exist, its absolute path is written.
    #[arg(long)]
    pub(crate) wasm: Option<PathBuf>,
    /// The filter's absolute path where Envoy runs (e.g. in a container), written as given and
    /// not checked here.
    #[arg(long, value_name = "PATH")]
    pub(crate) wasm_path: Option<String>,
}

#[derive(Args)]
pub(crate) struct EnvoyArgs {
    #[command(flatten)]
    pub(crate) wasm: WasmArg,
    /// Map a Service or hostname to an address: NAME=HOST:PORT (NAME: `svc`, `ns/svc` or a
    /// hostname; `http://` or `https://` before HOST forces plaintext or TLS).
    #[arg(long = "resolve", value_name = "NAME=HOST:PORT")]
    pub(crate) resolve: Vec<String>,
    /// Certificate of a Secret a Gateway certificateRef or an XBackend's
    /// tls.clientCertificateRef names: SECRET=CERT.pem,KEY.pem.
    #[arg(long = "tls-cert", value_name = "SECRET=CERT,KEY")]
    pub(crate) tls_cert: Vec<String>,
    /// CA of a caCertificateRef: REF=CA.pem (a Gateway's client certificates, or an
    /// XBackend's tls.validation), or CA.pem for HTTPS listeners whose Gateway names none.
    #[arg(long = "client-ca", value_name = "[REF=]CA.pem")]
    pub(crate) client_ca: Vec<String>,
    /// The --tls-cert, --client-ca and JWKS files are absolute paths where Envoy runs (e.g. in
    /// a container), written as given and not checked here.
    #[arg(long)]
    pub(crate) files_where_envoy_runs: bool,
    /// Address listeners bind to when their Gateway has no spec.addresses.
    #[arg(long, default_value = "0.0.0.0")]
    pub(crate) bind: String,
    /// Envoy admin port.
    #[arg(long, default_value_t = 9901)]
    pub(crate) admin_port: u16,
    /// Envoy admin address.
    #[arg(long, default_value = "127.0.0.1")]
    pub(crate) admin_address: String,
    /// Trusted CAs for TLS towards `hostname` XBackends (and Gateway API XBackends whose
    /// validation trusts the system's CAs).
    #[arg(long, default_value = "/etc/ssl/certs/ca-certificates.crt")]
    pub(crate) upstream_ca: String,
    /// Write an access log (one JSON line per request, with the filter's decision).
    #[arg(long)]
    pub(crate) access_log: Option<String>,
    /// Trace every request to a Zipkin collector (`zipkin=HOST:PORT`, its v2 JSON API), with
    /// the filter's decision as span tags (security_rule.name, event.action, event.outcome...).
    #[arg(long, value_name = "zipkin=HOST:PORT")]
    pub(crate) tracing: Option<String>,
    /// Also send every decision record to an OpenTelemetry collector over OTLP/gRPC (Envoy's
    /// `envoy.access_loggers.open_telemetry`): the record is the log body, each of its fields an
    /// attribute `mcp_access.<field>` (sets the bundle's decisionRecords.structured; docs/audit.md).
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) otlp: Option<String>,
    /// Require a bearer token on this listener (repeatable; LISTENER, GATEWAY/LISTENER or
    /// NAMESPACE/GATEWAY/LISTENER): jwt_authn answers a request without one 401 with a
    /// `WWW-Authenticate: Bearer` challenge (CORS preflights pass) instead of passing it on.
    #[arg(long = "jwt-required", value_name = "LISTENER")]
    pub(crate) jwt_required: Vec<String>,
}

#[derive(Args)]
#[command(
    mut_arg("files", |a| a.help("Manifests of test documents that name none (`spec.manifests`)")),
    mut_arg("recursive", |a| a.help("Read manifest directories recursively"))
)]
pub(crate) struct TestArgs {
    /// Test files, or directories of them (their .yaml/.yml files).
    #[arg(required = true, value_name = "TESTS")]
    pub(crate) tests: Vec<PathBuf>,
    #[command(flatten)]
    pub(crate) manifests: ManifestInput,
    /// Test what compile --allow-not-accepted writes (policies not accepted enforced by their
    /// fail-closed stand-ins) instead of failing on them.
    #[arg(long)]
    pub(crate) allow_not_accepted: bool,
    /// Also write the results as JUnit XML to this file.
    #[arg(long, value_name = "FILE")]
    pub(crate) junit: Option<PathBuf>,
}

#[derive(Args)]
#[command(
    mut_arg("files", |a| a.help("The candidate manifests").required_unless_present("bundle")),
    mut_arg("recursive", |a| a.help("Read manifest directories recursively"))
)]
pub(crate) struct ReplayArgs {
    /// Logs holding decision records (`-`: standard input).
    #[arg(required = true, value_name = "LOG")]
    pub(crate) logs: Vec<PathBuf>,
    #[command(flatten)]
    pub(crate) manifests: ManifestInput,
    /// Or a candidate bundle.
    #[arg(long, conflicts_with_all = ["files", "jwt_providers"])]
    pub(crate) bundle: Option<PathBuf>,
    /// Authorizer answers, as explain's (default: allow; a recorded authorizer denial keeps
    /// its answer).
    #[arg(long = "assume", value_name = "POLICY=OUTCOME")]
    pub(crate) assume: Vec<String>,
    /// Exit 0 even when decisions flip.
    #[arg(long)]
    pub(crate) allow_flips: bool,
    /// Replay only records `audit verify` verifies with --public-key (docs/audit.md).
    #[arg(long, requires = "public_key")]
    pub(crate) verified: bool,
    /// The public key for --verified.
    #[arg(long, value_name = "FILE")]
    pub(crate) public_key: Option<PathBuf>,
    /// Output format.
    #[arg(
        short = 'o',
        long = "output",
        visible_alias = "format",
        value_enum,
        default_value = "text"
    )]
    pub(crate) format: Format,
}

#[derive(Subcommand)]
pub(crate) enum AuditCommand {
    /// Read logs (rotated, out of order, several workers and Envoys interleaved), rebuild
    /// each chain and report per chain: records, first and last seq, missing seq numbers,
    /// altered records, bad checkpoints, records after the last checkpoint. Exits 0 when every
    /// record verifies, 8 when something is missing, altered, unreadable or badly signed,
    /// 9 when intact but records after the last checkpoint are not signed yet.
    Verify(AuditVerifyArgs),
    /// Make an Ed25519 key pair: FILE (the private key, for the VM's
    /// MCP_ACCESS_RECEIPT_KEY; mode 0600) and FILE.pub (for --public-key).
    Keygen {
        /// Where to write the private key (FILE.pub gets the public key).
        #[arg(value_name = "FILE")]
        out: PathBuf,
    },
}

#[derive(Args)]
pub(crate) struct AuditVerifyArgs {
    /// Logs holding decision records and checkpoints (`-`: standard input).
    #[arg(required = true, value_name = "LOG")]
    pub(crate) logs: Vec<PathBuf>,
    /// The public key checkpoints are signed with (Base64 of its 32 bytes, as `audit keygen`
    /// writes it, or a PEM `PUBLIC KEY`).
    #[arg(long, value_name = "FILE", required_unless_present = "unsigned")]
    pub(crate) public_key: Option<PathBuf>,
    /// Check links, gaps and checkpoint heads only (VMs without a key: forgeries do not show).
    #[arg(long)]
    pub(crate) unsigned: bool,
    /// A bundle the filter ran with (repeatable; `mcp-access compile`'s output, the plugin
    /// configuration): each chain's seq 1 names its configuration's digest, which must be one
    /// of these.
    #[arg(long = "bundle", value_name = "FILE")]
    pub(crate) bundles: Vec<PathBuf>,
    /// Output format.
    #[arg(
        short = 'o',
        long = "output",
        visible_alias = "format",
        value_enum,
        default_value = "text"
    )]
    pub(crate) format: Format,
}

#[derive(Args)]
pub(crate) struct WhoCanArgs {
    #[command(flatten)]
    pub(crate) input: Input,
    /// The XBackend (NAME or NAMESPACE/NAME).
    #[arg(long)]
    pub(crate) backend: String,
    /// A tool (tools/call).
    #[arg(long, conflicts_with_all = ["prompt", "uri"])]
    pub(crate) tool: Option<String>,
    /// A prompt (prompts/get).
    #[arg(long, conflicts_with = "uri")]
    pub(crate) prompt: Option<String>,
    /// A resource URI (resources/read).
    #[arg(long)]
    pub(crate) uri: Option<String>,
    /// Another MCP method (or, with --tool, --prompt or --uri, the method naming it).
    #[arg(long)]
    pub(crate) mcp_method: Option<String>,
    /// Output format.
    #[arg(
        short = 'o',
        long = "output",
        visible_alias = "format",
        value_enum,
        default_value = "text"
    )]
    pub(crate) format: Format,
}

#[derive(Args)]
#[command(
    mut_arg("files", |a| a.help("Manifests to compile first (routes then decide the backend from host and path)")),
    mut_arg("recursive", |a| a.help("Read directories named with -f recursively"))
)]
pub(crate) struct ExplainArgs {
    /// A compiled bundle (its JWT providers are those it was compiled with).
    #[arg(long, conflicts_with_all = ["files", "jwt_providers"])]
    pub(crate) bundle: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) manifests: ManifestInput,
    /// Gateway (NAME or NAMESPACE/NAME) the request arrives at.
    #[arg(long)]
    pub(crate) gateway: Option<String>,
    /// Listener (section) name.
    #[arg(long)]
    pub(crate) listener: Option<String>,
    /// Destination port (instead of --gateway/--listener).
    #[arg(long)]
    pub(crate) port: Option<u16>,
    /// Host, or `:authority` with a port, as the client sends it. Without a port, a client of
    /// a listener on a port other than 80 or 443 sends `HOST:PORT`, and so does explain.
    #[arg(long)]
    pub(crate) host: Option<String>,
    /// Request path (default /mcp).
    #[arg(long)]
    pub(crate) path: Option<String>,
    /// HTTP method (default POST).
    #[arg(long = "http-method")]
    pub(crate) http_method: Option<String>,
    /// Request header NAME:VALUE (repeatable).
    #[arg(short = 'H', long = "header", value_name = "NAME:VALUE")]
    pub(crate) headers: Vec<String>,
    /// XBackend (NAME or NAMESPACE/NAME) Envoy routes to, instead of matching routes.
    #[arg(long)]
    pub(crate) backend: Option<String>,
    /// Envoy route name, instead of matching routes.
    #[arg(long)]
    pub(crate) route: Option<String>,
    /// Caller SPIFFE ID.
    #[arg(long, conflicts_with = "service_account")]
    pub(crate) spiffe: Option<String>,
    /// Caller ServiceAccount NAMESPACE/NAME (through the trust domain).
    #[arg(long)]
    pub(crate) service_account: Option<String>,
    /// JSON-RPC method (tools/call, prompts/get, resources/read, tools/list, initialize, ...).
    #[arg(long)]
    pub(crate) mcp_method: Option<String>,
    /// Tool name (implies --mcp-method tools/call).
    #[arg(long, conflicts_with_all = ["prompt", "uri", "body"])]
    pub(crate) tool: Option<String>,
    /// Prompt name (implies --mcp-method prompts/get).
    #[arg(long, conflicts_with_all = ["uri", "body"])]
    pub(crate) prompt: Option<String>,
    /// Resource URI (implies --mcp-method resources/read).
    #[arg(long, conflicts_with = "body")]
    pub(crate) uri: Option<String>,
    /// The request body as sent (else built from --mcp-method / --tool / --prompt / --uri).
    #[arg(long, conflicts_with = "mcp_method")]
    pub(crate) body: Option<String>,
    /// `params.arguments` of the request (a JSON object), e.g. for CEL rules that read them.
    #[arg(long, value_name = "JSON", conflicts_with = "body")]
    pub(crate) arguments: Option<String>,
    /// Authorizer outcome to assume: POLICY=allow|deny[:STATUS]|error (POLICY: an ExternalAuth
    /// policy's NAMESPACE/NAME or NAME, the authorizer name, or `*`; STATUS 300-499). Unlisted
    /// authorizers are assumed to allow; a key naming none is an error. A rate limit's bucket:
    /// NAMESPACE/POLICY/LIMIT=over|under (over: no room, the request is refused; default under).
    #[arg(long = "assume", value_name = "KEY=OUTCOME")]
    pub(crate) assume: Vec<String>,
    /// The caller's verified JWT claims, a JSON object with `iss` (an issuer of the bundle's
    /// JWT providers), `sub` and any other claims, as if Envoy's jwt_authn had verified them.
    #[arg(long = "jwt-claims", value_name = "JSON")]
    pub(crate) jwt_claims: Option<String>,
    /// Output format.
    #[arg(
        short = 'o',
        long = "output",
        visible_alias = "format",
        value_enum,
        default_value = "text"
    )]
    pub(crate) format: Format,
}

/// Where a command's main output goes: `-o FORMAT` (standard output in that format), `-o -`
/// (standard output, the default format) or `-o FILE` (its extension picks the format).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Output {
    Stdout(Format),
    File(PathBuf),
}

impl Output {
    /// `compile -o`: JSON unless YAML is asked for (a `.yaml`/`.yml` file or `-o yaml`).
    pub(crate) fn parse_bundle(s: &str) -> Result<Output, CliError> {
        Output::parse(s, Format::Json)
    }

    /// `envoy -o`, `manifests -o`: YAML unless JSON is asked for (a `.json` file or `-o json`).
    pub(crate) fn parse_config(s: &str) -> Result<Output, CliError> {
        Output::parse(s, Format::Yaml)
    }

    fn parse(s: &str, default: Format) -> Result<Output, CliError> {
        match s {
            "" => Err("give a format (json, yaml) or a file".into()),
            "-" => Ok(Output::Stdout(default)),
            "json" => Ok(Output::Stdout(Format::Json)),
            "yaml" | "yml" => Ok(Output::Stdout(Format::Yaml)),
            "text" => Err("this command writes JSON or YAML: -o json, -o yaml, or -o FILE".into()),
            _ => Ok(Output::File(PathBuf::from(s))),
        }
    }

    /// The format written: a file's extension decides (`.json`, `.yaml`/`.yml`), else `default`.
    pub(crate) fn format(&self, default: Format) -> Format {
        match self {
            Output::Stdout(f) => *f,
            Output::File(p) => match p.extension().and_then(|x| x.to_str()) {
                Some("json") => Format::Json,
                Some("yaml" | "yml") => Format::Yaml,
                _ => default,
            },
        }
    }
}

/// What a ToolPin does with tools it does not name.
#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum UnpinnedArg {
    Deny,
    Allow,
}

#[derive(Args)]
pub(crate) struct PinArgs {
    /// The MCP server's endpoint (Streamable HTTP), e.g. `https://tools.example/mcp`.
    #[arg(
        long,
        required_unless_present = "from_file",
        conflicts_with = "from_file"
    )]
    pub(crate) url: Option<String>,
    /// A saved `tools/list` answer instead of a live server: a JSON-RPC response (or its
    /// result), a JSON array of pages, or an SSE stream of responses.
    #[arg(long, value_name = "FILE")]
    pub(crate) from_file: Option<PathBuf>,
    /// Compare with the ToolPin in FILE instead of writing one: the differences per tool,
    /// and exit code 5 when there are any.
    #[arg(long, value_name = "FILE")]
    pub(crate) check: Option<PathBuf>,
    /// The XBackend the ToolPin pins (with --check: which ToolPin of FILE, when it has
    /// several).
    #[arg(long, required_unless_present = "check")]
    pub(crate) backend: Option<String>,
    /// The XBackend's API group: Gateway API's or kube-agentic-networking's kind.
    #[arg(long, default_value = "agentic.networking.x-k8s.io", value_parser = ["gateway.networking.x-k8s.io", "agentic.networking.x-k8s.io"])]
    pub(crate) backend_group: String,
    /// The ToolPin's namespace (the XBackend's).
    #[arg(short = 'n', long, default_value = "default")]
    pub(crate) namespace: String,
    /// The ToolPin's name [default: <backend>-tools].
    #[arg(long)]
    pub(crate) name: Option<String>,
    /// Tools the ToolPin does not name: deny (left out of listings, calls denied) or allow.
    #[arg(long, value_enum, default_value = "deny")]
    pub(crate) unpinned: UnpinnedArg,
    /// A request header for the server (`Name: value`); repeatable.
    #[arg(short = 'H', long = "header", value_name = "NAME: VALUE")]
    pub(crate) headers: Vec<String>,
    /// A file holding a bearer token for the server (`Authorization: Bearer ...`).
    #[arg(long, value_name = "FILE")]
    pub(crate) bearer_token_file: Option<PathBuf>,
    /// Client certificate (PEM, with its chain) for mTLS; needs --key.
    #[arg(long, value_name = "FILE", requires = "key")]
    pub(crate) cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "cert")]
    pub(crate) key: Option<PathBuf>,
    /// CA certificates (PEM) the server's certificate must chain to [default: the web PKI].
    #[arg(long, value_name = "FILE")]
    pub(crate) cacert: Option<PathBuf>,
    /// The MCP revision asked for in `initialize`.
    #[arg(long, default_value = "2025-11-25", value_parser = ["2025-06-18", "2025-11-25"])]
    pub(crate) protocol_version: String,
    /// How long the whole exchange with the server may take.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub(crate) timeout: std::time::Duration,
    /// Write the ToolPin to this file instead of standard output.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub(crate) output: Option<PathBuf>,
}
