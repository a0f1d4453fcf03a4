//! `mcp-access`: Kubernetes manifests to a policy bundle, an Envoy configuration and an
//! explanation of any decision. See docs/cli.md.
//!
//! [`args`] declares the command line, [`commands`] runs each subcommand; what they share
//! (reading, compiling, the report, exit codes, writing) is here.

mod args;
mod audit_cmd;
mod commands;
mod effective_text;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use mcp_access_bundle::UnknownBackend;
use mcp_access_cli::error::{CliError, EXIT_INVALID, EXIT_NOT_ACCEPTED};
use mcp_access_cli::{checks, jwt};
use mcp_access_k8s::{compile, Compiled, Manifests, Options};

use args::{Cli, Command, CompileArgs, Format, Input, Output, ReportArgs, UnknownBackendArg};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("mcp-access: {e}");
            ExitCode::from(e.code)
        }
    }
}

fn run(cli: Cli) -> Result<u8, CliError> {
    match cli.command {
        Command::Schema => {
            print!("{}", mcp_access_bundle::json_schema_text());
            Ok(0)
        }
        Command::Crd => {
            print!(
                "{}---\n{}---\n{}---\n{}",
                mcp_access_k8s::crd_yaml(),
                mcp_access_k8s::filter_settings_crd_yaml(),
                mcp_access_k8s::tool_pin_crd_yaml(),
                mcp_access_k8s::rate_limit_policy_crd_yaml()
            );
            Ok(0)
        }
        Command::Completion { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut cmd, "mcp-access", &mut std::io::stdout());
            Ok(0)
        }
        Command::Validate {
            input,
            format,
            allow_not_accepted,
            allow_dangling,
            strict: _,
        } => commands::validate(&input, format, allow_not_accepted, allow_dangling),
        Command::Compile {
            input,
            output,
            report,
        } => commands::compile(&input, output, &report),
        Command::Manifests {
            input,
            platform,
            output,
            report,
        } => commands::manifests(&input, platform, &output, &report),
        Command::Publish {
            input,
            wasm,
            ecds,
            report,
        } => commands::publish(&input, &wasm, &ecds, &report),
        Command::Envoy {
            input,
            envoy,
            output,
            bundle_out,
            ecds,
            report,
        } => commands::envoy(&input, envoy, &output, bundle_out, ecds, &report),
        Command::Explain(a) => commands::explain(*a),
        Command::Pin(a) => commands::pin(*a),
        Command::Test(a) => commands::test(a),
        Command::WhoCan(a) => commands::who_can(a),
        Command::Replay(a) => commands::replay(a),
        Command::Audit(a) => audit_cmd::audit(a),
        Command::Status { input, format } => commands::status(&input, format),
        Command::Effective {
            input,
            gateway,
            listener,
            backend,
            route,
            format,
        } => commands::effective(&input, [gateway, listener, backend, route], format),
    }
}

fn pairs(list: &[String], flag: &str) -> Result<Vec<(String, String)>, CliError> {
    list.iter()
        .map(|s| {
            s.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| CliError::invalid(format!("{flag} `{s}`: expected KEY=VALUE")))
        })
        .collect()
}

fn options(a: &CompileArgs) -> Result<Options, CliError> {
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
        unknown_backend: a.unknown_backend.map(|u| match u {
            UnknownBackendArg::Deny => UnknownBackend::Deny,
            UnknownBackendArg::GatewayOnly => UnknownBackend::GatewayOnly,
        }),
        gateway_classes: a.gateway_classes.clone(),
        tls_secrets: None,
        client_cas: None,
        jwt_providers: jwt::parse_providers(&a.jwt_providers)?
            .iter()
            .map(jwt::JwtProviderSpec::bundle_provider)
            .collect(),
        effective_view: false,
        rate_limit_service: match &a.rate_limit_service {
            Some(r) => Some(
                mcp_access_cli::envoy::RateLimitAddress::parse(r)?
                    .service(&a.rate_limit_domain, a.rate_limit_timeout_ms),
            ),
            None => None,
        },
    })
}

/// Reads `-f` inputs (`-` is standard input); names each subdirectory not read.
fn load(files: &[PathBuf], namespace: &str, recursive: bool) -> Result<Manifests, CliError> {
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
    m.extend(Manifests::load(&paths, namespace, recursive)?);
    for d in &m.skipped_dirs {
        eprintln!(
            "note: {}: a subdirectory, not read (-R reads directories recursively)",
            d.display()
        );
    }
    Ok(m)
}

/// Loads and compiles; prints the invalid input (what the API server would reject, and
/// settings that conflict) to stderr.
fn build(input: &Input, opts: Options) -> Result<(Manifests, Compiled), CliError> {
    let m = load(&input.files, &input.compile.namespace, input.recursive)?;
    let mut c = compile(&m, &opts);
    for p in &c.report.invalid {
        eprintln!("error: {p}");
    }
    mcp_access_bundle::validate(&c.bundle)
        .map_err(|e| format!("internal error, the compiled bundle is invalid: {e}"))?;
    c.report
        .warnings
        .extend(checks::closed_listeners(&c.bundle));
    Ok((m, c))
}

fn render_report(c: &Compiled, format: Format) -> Result<String, CliError> {
    match format {
        Format::Json | Format::Yaml => serialize(&c.report, format),
        Format::Text => {
            let mut out = String::new();
            for (what, list) in [
                ("policy", &c.report.policies),
                ("gateway", &c.report.gateways),
                ("route", &c.report.routes),
                ("backend", &c.report.backends),
                ("toolpin", &c.report.pins),
                ("limit", &c.report.rate_limit_policies),
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
            for i in &c.report.invalid {
                out.push_str(&format!("invalid  {i}\n"));
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
        not_accepted(c, r.allow_not_accepted, r.strict)
    }
}

/// Names on stderr each object (`all`) or policy that is not accepted, and each policy
/// enforced nowhere; 3 when any is not accepted, unless --allow-not-accepted.
fn not_accepted(c: &Compiled, allow: bool, all: bool) -> u8 {
    // Policies and ToolPins always count; Gateways, routes and XBackends only with `all`
    // (else each is a warning: what validate refuses is never compiled silently).
    let lists = [
        (&c.report.policies, true),
        (&c.report.pins, true),
        (&c.report.rate_limit_policies, true),
        (&c.report.gateways, all),
        (&c.report.routes, all),
        (&c.report.backends, all),
    ];
    let mut n = 0;
    for (list, counts) in lists {
        let level = if allow || !counts { "warning" } else { "error" };
        for o in list {
            for cnd in o.conditions.iter().filter(|x| !x.accepted) {
                n += usize::from(counts);
                eprintln!(
                    "{level}: {}: {} {}/{} -> {}: not accepted: {}: {}",
                    o.source, o.kind, o.namespace, o.name, cnd.target, cnd.reason, cnd.message
                );
            }
        }
    }
    let level = if allow { "warning" } else { "error" };
    for u in &c.report.unenforced {
        eprintln!("{level}: {u}");
    }
    if n == 0 || allow {
        0
    } else {
        eprintln!("mcp-access: {n} status condition(s) not accepted (--allow-not-accepted to proceed with fail-closed stand-ins)");
        EXIT_NOT_ACCEPTED
    }
}

/// Writes a command's output where `-o` says.
fn write_out(out: &Output, text: &str) -> Result<(), CliError> {
    match out {
        Output::Stdout(_) => {
            print!("{text}");
            Ok(())
        }
        Output::File(path) => std::fs::write(path, text)
            .map_err(|e| CliError::invalid(format!("cannot write {}: {e}", path.display()))),
    }
}

/// A value as pretty JSON or YAML.
fn serialize<T: serde::Serialize>(v: &T, format: Format) -> Result<String, CliError> {
    match format {
        Format::Yaml => serde_norway::to_string(v).map_err(|e| CliError::invalid(e.to_string())),
        Format::Json | Format::Text => Ok(serde_json::to_string_pretty(v)? + "\n"),
    }
}
