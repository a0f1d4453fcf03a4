//! One function per subcommand.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use mcp_access_bundle::Bundle;
use mcp_access_cli::checks::PortSource;
use mcp_access_cli::envoy::{self, EnvoyOptions, Notes};
use mcp_access_cli::explain::{self, RequestSpec};
use mcp_access_cli::manifests::{self as platform, ListenerNames, ManifestOptions, Platform};
use mcp_access_cli::{checks, jwt, pin};
use mcp_access_k8s::Manifests;

use crate::args::{
    EnvoyArgs, ExplainArgs, Format, Input, ListenerNamesArg, Output, PinArgs, PlatformArg,
    PlatformArgs, ReplayArgs, ReportArgs, TestArgs, UnpinnedArg, WasmArg, WhoCanArgs,
};
use crate::{build, exit_code, not_accepted, options, pairs, render_report, serialize, write_out};
use mcp_access_cli::error::{
    CliError, EXIT_DANGLING, EXIT_DRIFT, EXIT_FLIPS, EXIT_INVALID, EXIT_NOT_ACCEPTED,
    EXIT_TEST_FAILED,
};

/// `validate`: the report on standard output; exit 1 (invalid), 4 (dangling) or 3 (not
/// accepted).
pub(crate) fn validate(
    input: &Input,
    format: Format,
    allow_not_accepted: bool,
    allow_dangling: bool,
) -> Result<u8, CliError> {
    let (_, mut c) = build(input, options(&input.compile)?)?;
    let dangling = checks::dangling(&c);
    if allow_dangling {
        c.report.warnings.extend(dangling.iter().cloned());
    }
    c.report
        .warnings
        .extend(checks::plaintext_backends(&c.topology));
    print!("{}", render_report(&c, format)?);
    if !c.report.invalid.is_empty() {
        return Ok(EXIT_INVALID);
    }
    if !allow_dangling && !dangling.is_empty() {
        for d in &dangling {
            eprintln!("error: dangling reference: {d}");
        }
        eprintln!(
            "mcp-access: {} reference(s) lead nowhere (--allow-dangling to accept them)",
            dangling.len()
        );
        return Ok(EXIT_DANGLING);
    }
    // --allow-dangling waives what routes and XBackends lead nowhere, never a policy.
    Ok(not_accepted(&c, allow_not_accepted, !allow_dangling))
}

/// `compile`: the bundle on standard output (the report on standard error) or into a file
/// (the report on standard output).
pub(crate) fn compile(
    input: &Input,
    output: Option<Output>,
    report: &ReportArgs,
) -> Result<u8, CliError> {
    let output = output.unwrap_or(Output::Stdout(Format::Json));
    let to_file = matches!(output, Output::File(_));
    let (_, c, code) = match writable(
        input,
        options(&input.compile)?,
        report,
        to_file,
        Ports::Unchecked,
    )? {
        Ok(ok) => ok,
        Err(refused) => return Ok(refused),
    };
    write_out(&output, &serialize(&c.bundle, output.format(Format::Json))?)?;
    Ok(code)
}

/// What the report of a command that writes says about its listeners' ports.
#[derive(Clone, Copy)]
enum Ports {
    /// Nothing: the bundle alone (`compile`, `publish`) serves no listener.
    Unchecked,
    /// `envoy`: warnings for ports clients cannot connect to.
    Envoy,
    /// `manifests`: warnings for Gateway ports clients cannot connect to; with Envoy Gateway,
    /// the report also names the port its Envoy listens on in its pod.
    Platform { envoy_gateway: bool },
}

/// Compiles for a command that writes, and prints the report (to standard output when the
/// command writes a file, else to standard error): the compiled result and the exit code, or
/// (`Err`) the exit code of a refusal, nothing written.
fn writable(
    input: &Input,
    opts: mcp_access_k8s::Options,
    report: &ReportArgs,
    report_to_stdout: bool,
    ports: Ports,
) -> Result<Result<(Manifests, mcp_access_k8s::Compiled, u8), u8>, CliError> {
    let (m, mut c) = build(input, opts)?;
    let source = match ports {
        Ports::Unchecked => None,
        Ports::Envoy => Some(PortSource::Envoy),
        Ports::Platform { envoy_gateway } => {
            if envoy_gateway {
                platform::report_eg_ports(&mut c.report, &c.topology);
            }
            Some(PortSource::Gateway)
        }
    };
    if let Some(source) = source {
        let blocked = checks::blocked_listener_ports(&c.topology, source);
        c.report.warnings.extend(blocked);
    }
    // What validate refuses or warns of is never compiled silently: a warning, an error
    // (with its exit code) under --strict. (prefix, findings, what they are, exit code)
    let findings = [
        (
            "dangling reference: ",
            checks::dangling(&c),
            "reference(s) lead nowhere",
            EXIT_DANGLING,
        ),
        (
            "",
            checks::plaintext_backends(&c.topology),
            "XBackend(s) reached in plaintext",
            EXIT_NOT_ACCEPTED,
        ),
    ];
    for (_, found, _, _) in &findings {
        c.report.warnings.extend(found.iter().cloned());
    }
    let mut code = exit_code(&c, report);
    let text = render_report(&c, report.format)?;
    if report_to_stdout {
        print!("{text}");
    } else {
        eprint!("{text}");
    }
    let level = if report.strict { "error" } else { "warning" };
    for (prefix, found, what, refused) in &findings {
        for f in found {
            eprintln!("{level}: {prefix}{f}");
        }
        if code == 0 && report.strict && !found.is_empty() {
            eprintln!("mcp-access: {} {what} (--strict)", found.len());
            code = *refused;
        }
    }
    if code != 0 {
        return Ok(Err(nothing_written(code)));
    }
    Ok(Ok((m, c, code)))
}

/// `manifests`: the objects that load the filter into Envoy Gateway or Istio.
pub(crate) fn manifests(
    input: &Input,
    p: PlatformArgs,
    output: &Output,
    report: &ReportArgs,
) -> Result<u8, CliError> {
    let ports = Ports::Platform {
        envoy_gateway: matches!(p.platform, PlatformArg::EnvoyGateway),
    };
    let (m, c, code) = match writable(input, options(&input.compile)?, report, false, ports)? {
        Ok(ok) => ok,
        Err(refused) => return Ok(refused),
    };
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
        istio_hold_headers: p.istio_hold_headers,
        rate_limit_service: input
            .compile
            .rate_limit_service
            .as_deref()
            .map(envoy::RateLimitAddress::parse)
            .transpose()?,
    };
    if o.istio_hold_headers && o.platform != Platform::Istio {
        return Err("--istio-hold-headers applies to --platform istio".into());
    }
    let backends = platform::backend_objects(&m, &c.topology, &o)?;
    for n in &backends.notes {
        eprintln!("warning: {n}");
    }
    if !input.compile.jwt_providers.is_empty() {
        eprintln!("note: --jwt-provider: the bundle reads verified claims under each provider's name; configure the platform's jwt_authn (payload_in_metadata) to match, the generated objects do not");
    }
    let oauth = c
        .bundle
        .gateways
        .iter()
        .flat_map(|g| &g.listeners)
        .any(|l| l.protected_resource.is_some());
    if oauth {
        eprintln!("note: OAuth protected resource metadata: the platform's token verification must let a request without a token through to the filter (which answers it 401 with the metadata's URL when policies deny it) and require none on the metadata paths (docs/deploy.md)");
    }
    for line in platform::unserved_metadata(&c.bundle, &o) {
        eprintln!("warning: {}", line.trim_start_matches("# "));
    }
    let json = output.format(Format::Yaml) == Format::Json;
    let text = platform::render(&c.bundle, &c.topology, &o, json, &backends.objects)?;
    write_out(output, &text)?;
    Ok(code)
}

/// `publish`: the bundle into a running Envoy's ECDS file.
pub(crate) fn publish(
    input: &Input,
    wasm: &WasmArg,
    ecds: &Path,
    report: &ReportArgs,
) -> Result<u8, CliError> {
    let (_, c, code) = match writable(
        input,
        options(&input.compile)?,
        report,
        false,
        Ports::Unchecked,
    )? {
        Ok(ok) => ok,
        Err(refused) => return Ok(refused),
    };
    let bundle_json = serde_json::to_string(&c.bundle).map_err(|e| e.to_string())?;
    let doc = envoy::ecds_document(&wasm_path(wasm)?, &bundle_json);
    let version = envoy::publish_ecds(ecds, &doc)?;
    eprintln!(
        "published version {version} to {}",
        ecds.join(envoy::ECDS_FILE).display()
    );
    Ok(code)
}

/// `envoy`: a complete Envoy bootstrap.
pub(crate) fn envoy(
    input: &Input,
    e: EnvoyArgs,
    output: &Output,
    bundle_out: Option<PathBuf>,
    ecds: Option<PathBuf>,
    report: &ReportArgs,
) -> Result<u8, CliError> {
    let ecds = ecds.map(|d| ecds_dir(&d)).transpose()?;
    let mut opts = options(&input.compile)?;
    let mut tls_certs: BTreeMap<String, (String, String)> = pairs(&e.tls_cert, "--tls-cert")?
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
    let rate_limit_service = input
        .compile
        .rate_limit_service
        .as_deref()
        .map(envoy::RateLimitAddress::parse)
        .transpose()?;
    opts.tls_secrets = Some(tls_certs.keys().cloned().collect());
    opts.client_cas = Some(client_cas.keys().cloned().collect());
    let (_, c, code) = match writable(input, opts, report, false, Ports::Envoy)? {
        Ok(ok) => ok,
        Err(refused) => return Ok(refused),
    };
    let unserved = envoy::listeners_without_files(&c.report);
    if !unserved.is_empty() && !report.allow_not_accepted {
        for u in &unserved {
            eprintln!("error: {u}; without it Envoy would have no listener for it (--allow-not-accepted to write the configuration without it)");
        }
        return Ok(nothing_written(EXIT_NOT_ACCEPTED));
    }
    let eo = EnvoyOptions {
        wasm: wasm_path(&e.wasm)?,
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
        tracing: e
            .tracing
            .as_deref()
            .map(envoy::Tracing::parse)
            .transpose()?,
        otlp: e.otlp.as_deref().map(envoy::Otlp::parse).transpose()?,
        rate_limit_service,
    };
    let mut c = c;
    // Traces read the decision from filter state the filter sets only when told to.
    c.bundle.decision_records.trace_tags |= eo.tracing.is_some();
    // OTLP attributes read the record field by field from its Struct (docs/audit.md).
    c.bundle.decision_records.structured |= eo.otlp.is_some();
    let mut notes = Notes::default();
    let config = envoy::render(&c.topology, &c.bundle, &eo, &mut notes)?;
    if let Some(dir) = &ecds {
        let bundle_json = serde_json::to_string(&c.bundle).map_err(|x| x.to_string())?;
        envoy::publish_ecds(dir, &envoy::ecds_document(&eo.wasm, &bundle_json))?;
    }
    for n in &notes.0 {
        eprintln!("note: {n}");
    }
    write_out(output, &serialize(&config, output.format(Format::Yaml))?)?;
    if let Some(b) = bundle_out {
        let out = Output::File(b);
        write_out(&out, &serialize(&c.bundle, out.format(Format::Json))?)?;
    }
    Ok(code)
}

/// `status`: what an implementation would write in each object's `status`.
pub(crate) fn status(input: &Input, format: Format) -> Result<u8, CliError> {
    let (_, c) = build(input, options(&input.compile)?)?;
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let objects = mcp_access_k8s::status_objects(&c.report, &c.topology, &now);
    let text = match format {
        Format::Json => serialize(
            &serde_json::json!({"apiVersion": "v1", "kind": "List", "items": objects}),
            Format::Json,
        )?,
        _ => {
            let mut out = String::new();
            for o in &objects {
                out.push_str("---\n");
                out.push_str(&serialize(o, Format::Yaml)?);
            }
            out
        }
    };
    print!("{text}");
    Ok(if c.report.invalid.is_empty() {
        0
    } else {
        EXIT_INVALID
    })
}

/// `effective`: the effective policy of each (listener, XBackend, route class), filtered by
/// `[gateway, listener, backend, route]`.
pub(crate) fn effective(
    input: &Input,
    [gateway, listener, backend, route]: [Option<String>; 4],
    format: Format,
) -> Result<u8, CliError> {
    let mut o = options(&input.compile)?;
    o.effective_view = true;
    let (_, c) = build(input, o)?;
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
                && (route.is_none()
                    || e.routes.is_empty()
                    || e.http_routes.iter().any(|id| matches(&route, id)))
        })
        .collect();
    if views.is_empty() {
        return Err("no (listener, XBackend) pair matches: a route from a listener to an XBackend makes one".into());
    }
    let text = match format {
        Format::Text => crate::effective_text::text(&views),
        f => serialize(&views, f)?,
    };
    print!("{text}");
    Ok(if c.report.invalid.is_empty() {
        0
    } else {
        EXIT_INVALID
    })
}

/// A bundle file, or the manifests compiled (refused when they have errors).
fn bundle_or_compiled(
    bundle: Option<&Path>,
    input: Input,
) -> Result<(Bundle, Option<mcp_access_k8s::Compiled>), CliError> {
    if let Some(p) = bundle {
        let text = std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
        let b = mcp_access_bundle::parse_bundle(&text).map_err(|e| e.to_string())?;
        return Ok((b.into_inner(), None));
    }
    if input.files.is_empty() {
        return Err("give a --bundle or manifests (-f)".into());
    }
    let (_, c) = build(&input, options(&input.compile)?)?;
    if !c.report.invalid.is_empty() {
        return Err("the manifests have errors".into());
    }
    Ok((c.bundle.clone(), Some(c)))
}

/// `explain`: one request through the request flow.
pub(crate) fn explain(a: ExplainArgs) -> Result<u8, CliError> {
    let input = a.manifests.input();
    let (bundle, compiled) = bundle_or_compiled(a.bundle.as_deref(), input)?;
    let (report, topo) = match compiled {
        Some(c) => (Some(c.report), Some(c.topology)),
        None => (None, None),
    };
    let (mut assume, mut limits) = (BTreeMap::new(), BTreeMap::new());
    for (k, v) in pairs(&a.assume, "--assume")? {
        let assumed = explain::parse_assumed(&v).map_err(|e| format!("--assume {e}"))?;
        if let explain::Assumed::Limit(l) = assumed {
            limits.insert(k, l);
            continue;
        }
        if let Some(note) = report
            .as_ref()
            .and_then(|r| enforced_nowhere(r, &bundle, &k))
        {
            eprintln!("note: {note}");
            continue;
        }
        if let explain::Assumed::Authorizer(x) = assumed {
            assume.insert(k, x);
        }
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
        arguments: match &a.arguments {
            None => None,
            Some(text) => {
                let v: serde_json::Value = serde_json::from_str(text)
                    .map_err(|e| format!("--arguments: not JSON: {e}"))?;
                if !v.is_object() {
                    return Err("--arguments: must be a JSON object".into());
                }
                Some(v)
            }
        },
        body: a.body,
        assume,
        limits,
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
        revision: None,
        time: None,
    };
    let e = explain::explain(&bundle, topo.as_ref(), &spec)?;
    match a.format {
        Format::Text => print!("{}", explain::to_text(&e)),
        f => print!("{}", serialize(&e, f)?),
    }
    Ok(0)
}

/// `test`: every case of every test document; the report on standard output.
pub(crate) fn test(a: TestArgs) -> Result<u8, CliError> {
    use mcp_access_cli::policy_test;
    let docs = policy_test::load(&a.tests)?;
    let inputs = policy_test::Inputs {
        files: a.manifests.files.clone(),
        namespace: a.manifests.compile.namespace.clone(),
        recursive: a.manifests.recursive,
        options: options(&a.manifests.compile)?,
        allow_not_accepted: a.allow_not_accepted,
    };
    let results = policy_test::run(&docs, &inputs);
    print!("{}", policy_test::to_text(&results));
    if let Some(path) = &a.junit {
        let xml = policy_test::junit_xml(&results)?;
        std::fs::write(path, xml).map_err(|e| format!("--junit {}: {e}", path.display()))?;
    }
    Ok(if results.iter().any(|r| r.error.is_some()) {
        EXIT_INVALID
    } else if results.iter().any(|r| r.failed() > 0) {
        EXIT_TEST_FAILED
    } else {
        0
    })
}

/// `replay`: recorded decisions decided again under the candidate manifests (or bundle).
pub(crate) fn replay(a: ReplayArgs) -> Result<u8, CliError> {
    use mcp_access_cli::replay;
    let input = a.manifests.input();
    let (bundle, compiled) = bundle_or_compiled(a.bundle.as_deref(), input)?;
    // What compile would write: policies not accepted as their fail-closed stand-ins.
    if let Some(c) = &compiled {
        not_accepted(c, true, false);
    }
    let topo = compiled.map(|c| c.topology);
    let mut assume = BTreeMap::new();
    for (k, v) in pairs(&a.assume, "--assume")? {
        assume.insert(
            k,
            explain::parse_assumption(&v).map_err(|e| format!("--assume {e}"))?,
        );
    }
    let logs = crate::audit_cmd::read_logs(&a.logs)?;
    let (mut records, mut unreadable) = (Vec::new(), Vec::new());
    for (name, bytes) in &logs {
        let (found, bad) = replay::records(bytes, name);
        records.extend(found);
        unreadable.extend(bad);
    }
    if let Some(key) = a.public_key.as_deref().filter(|_| a.verified) {
        let all = records.len();
        records = crate::audit_cmd::verified_records(&logs, key)?;
        let left = all - records.len();
        eprintln!("mcp-access replay: --verified: {left} records left out (not verified)");
    }
    for u in &unreadable {
        eprintln!(
            "mcp-access replay: {}: unreadable decision record: {}",
            u.at, u.why
        );
    }
    if records.is_empty() {
        return Err("no decision records in the logs (decision log lines `mcp-access decision {...}`, or access-log entries with filter_state)".into());
    }
    let mut r = replay::replay(&bundle, topo.as_ref(), &records, &assume);
    r.unreadable = unreadable
        .into_iter()
        .map(|u| format!("{}: {}", u.at, u.why))
        .collect();
    match a.format {
        Format::Text => print!("{}", replay::to_text(&r)),
        f => print!("{}", serialize(&r, f)?),
    }
    Ok(if !r.flips.is_empty() && !a.allow_flips {
        EXIT_FLIPS
    } else {
        0
    })
}

/// `who-can`: the callers that may make one MCP call of an XBackend.
pub(crate) fn who_can(a: WhoCanArgs) -> Result<u8, CliError> {
    use mcp_access_cli::who_can;
    let (method, param) = match (&a.tool, &a.prompt, &a.uri, &a.mcp_method) {
        (Some(t), _, _, m) => (m.clone().unwrap_or_else(|| "tools/call".into()), Some(t)),
        (_, Some(p), _, m) => (m.clone().unwrap_or_else(|| "prompts/get".into()), Some(p)),
        (_, _, Some(u), m) => (
            m.clone().unwrap_or_else(|| "resources/read".into()),
            Some(u),
        ),
        (_, _, _, Some(m)) => (m.clone(), None),
        _ => return Err("give --tool, --prompt, --uri or --mcp-method".into()),
    };
    let (_, c) = build(&a.input, options(&a.input.compile)?)?;
    if !c.report.invalid.is_empty() {
        return Err("the manifests have errors".into());
    }
    // Policies not accepted are answered for as enforced: by their fail-closed stand-ins.
    not_accepted(&c, true, false);
    let q = who_can::Question {
        backend: a.backend,
        method,
        param: param.cloned(),
    };
    let answer = who_can::who_can(&c.bundle, &c.topology, &q)?;
    match a.format {
        Format::Text => print!("{}", who_can::to_text(&answer)),
        f => print!("{}", serialize(&answer, f)?),
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

/// The ECDS directory, created if missing, as the absolute path Envoy watches.
fn ecds_dir(d: &Path) -> Result<PathBuf, CliError> {
    std::fs::create_dir_all(d).map_err(|e| format!("--ecds {}: {e}", d.display()))?;
    Ok(std::fs::canonicalize(d).map_err(|e| format!("--ecds {}: {e}", d.display()))?)
}

/// The filter path written into the configuration: `--wasm` must be a file and is made
/// absolute (Envoy resolves relative paths against its own working directory); `--wasm-path`
/// must be absolute and is written as given.
fn wasm_path(w: &WasmArg) -> Result<String, CliError> {
    match (&w.wasm, &w.wasm_path) {
        (Some(p), _) => {
            if !p.is_file() {
                return Err(format!(
                    "--wasm {}: no such file (build it with scripts/build, or give --wasm-path for a path that exists only where Envoy runs)",
                    p.display()
                ).into());
            }
            let abs =
                std::fs::canonicalize(p).map_err(|e| format!("--wasm {}: {e}", p.display()))?;
            abs.to_str().map(str::to_string).ok_or_else(|| {
                CliError::invalid(format!("--wasm {}: the path is not UTF-8", abs.display()))
            })
        }
        (None, Some(s)) if s.starts_with('/') => Ok(s.clone()),
        (None, Some(s)) => Err(format!("--wasm-path {s}: give an absolute path").into()),
        (None, None) => Err("give --wasm FILE or --wasm-path PATH".into()),
    }
}

/// Says why nothing was written and passes the exit code on.
fn nothing_written(code: u8) -> u8 {
    let why = match code {
        EXIT_INVALID => "the manifests have errors",
        EXIT_DANGLING => "references lead nowhere (without --strict they are warnings)",
        _ => "not everything was accepted (--allow-not-accepted to proceed)",
    };
    eprintln!("mcp-access: nothing written: {why}");
    code
}

/// `pin`: a ToolPin of what the server lists; with --check, the comparison with one (exit 5
/// on any difference).
pub(crate) fn pin(a: PinArgs) -> Result<u8, CliError> {
    let listing = match (&a.url, &a.from_file) {
        (_, Some(file)) => pin::from_file(file)?,
        (Some(url), None) => pin::from_server(pin_connection(&a, url)?)?,
        (None, None) => return Err("pin: --url or --from-file".into()),
    };
    if let Some(file) = &a.check {
        let pins = toolpins_in(file)?;
        let wanted = a.backend.as_deref().map(|b| match b.contains('/') {
            true => b.to_string(),
            false => format!("{}/{b}", a.namespace),
        });
        let chosen: Vec<_> = pins
            .iter()
            .filter(|p| wanted.as_ref().is_none_or(|w| &p.backend == w))
            .collect();
        let [pin] = chosen.as_slice() else {
            return Err(format!(
                "pin --check: {} holds {} ToolPin(s){}; name one with --backend",
                file.display(),
                chosen.len(),
                wanted
                    .map(|w| format!(" for XBackend {w}"))
                    .unwrap_or_default()
            )
            .into());
        };
        let report = pin::check(&listing, pin);
        print!("{}", report.text);
        return Ok(if report.drifted > 0 { EXIT_DRIFT } else { 0 });
    }
    let backend = a.backend.clone().unwrap_or_default();
    let target = pin::PinTarget {
        name: a.name.clone().unwrap_or_else(|| format!("{backend}-tools")),
        namespace: a.namespace.clone(),
        backend,
        group: a.backend_group.clone(),
        unpinned: match a.unpinned {
            UnpinnedArg::Deny => mcp_access_bundle::Unpinned::Deny,
            UnpinnedArg::Allow => mcp_access_bundle::Unpinned::Allow,
        },
    };
    let yaml = pin::toolpin_yaml(&listing, &target)?;
    // What is written must be a ToolPin the compiler accepts.
    let mut m = Manifests::default();
    m.add_text("pin", &yaml, &a.namespace);
    if let Some(p) = m.problems().first() {
        return Err(format!("internal error, the ToolPin written is invalid: {p}").into());
    }
    match &a.output {
        Some(path) => std::fs::write(path, &yaml)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?,
        None => print!("{yaml}"),
    }
    eprintln!(
        "mcp-access: pinned {} tool(s) of {}; review the definitions and annotations before applying",
        listing.tools.len(),
        listing.source
    );
    Ok(0)
}

/// How `pin` reaches the server, from its flags.
fn pin_connection(a: &PinArgs, url: &str) -> Result<pin::Connection, CliError> {
    let mut headers = Vec::new();
    for h in &a.headers {
        let (n, v) = h
            .split_once(':')
            .ok_or_else(|| format!("--header {h:?}: write it as `Name: value`"))?;
        let (n, v) = (n.trim(), v.trim());
        if n.is_empty()
            || !n.bytes().all(|b| b.is_ascii_graphic())
            || v.contains(['\r', '\n', '\0'])
        {
            return Err(format!("--header {h:?}: not a valid header").into());
        }
        headers.push((n.to_ascii_lowercase(), v.to_string()));
    }
    let bearer = match &a.bearer_token_file {
        Some(f) => {
            let t = std::fs::read_to_string(f)
                .map_err(|e| format!("cannot read {}: {e}", f.display()))?;
            let t = t.trim().to_string();
            if t.is_empty() || t.contains(['\r', '\n', '\0']) {
                return Err(format!("{}: not a bearer token (one line)", f.display()).into());
            }
            Some(t)
        }
        None => None,
    };
    Ok(pin::Connection {
        url: url.to_string(),
        headers,
        bearer,
        client_cert: a.cert.clone().zip(a.key.clone()),
        ca: a.cacert.clone(),
        protocol_version: a.protocol_version.clone(),
        timeout: a.timeout,
    })
}

/// The ToolPins of a file, validated as the API server would.
fn toolpins_in(file: &Path) -> Result<Vec<mcp_access_k8s::ToolPinView>, CliError> {
    let m = Manifests::load_paths(&[file.to_path_buf()], "default")?;
    if let Some(p) = m.problems().first() {
        return Err(format!("{p}").into());
    }
    Ok(m.pins.iter().map(|p| p.view()).collect())
}
