//! `mcp-access audit` (docs/audit.md): reading the logs and the key, the report, the exit code.

use std::path::{Path, PathBuf};

use mcp_access_cli::audit::{self, keys, Log};
use mcp_access_cli::error::{CliError, EXIT_AUDIT_DAMAGED, EXIT_AUDIT_UNSIGNED};
use mcp_access_engine::flow::records::written;
use mcp_access_engine::receipts::Verifier;
use serde_json::Value;

use crate::args::{AuditCommand, AuditVerifyArgs, Format};

pub(crate) fn audit(c: AuditCommand) -> Result<u8, CliError> {
    match c {
        AuditCommand::Verify(a) => verify(&a),
        AuditCommand::Keygen { out } => keygen(&out),
    }
}

/// Each log's name and bytes (`-`: standard input).
pub(crate) fn read_logs(paths: &[PathBuf]) -> Result<Vec<(String, Vec<u8>)>, CliError> {
    let mut logs = Vec::new();
    for log in paths {
        let mut bytes = Vec::new();
        let name = if log.as_os_str() == "-" {
            std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes)
                .map_err(|e| format!("cannot read standard input: {e}"))?;
            "-".to_string()
        } else {
            bytes =
                std::fs::read(log).map_err(|e| format!("cannot read {}: {e}", log.display()))?;
            log.display().to_string()
        };
        logs.push((name, bytes));
    }
    Ok(logs)
}

fn public_key(path: &Path) -> Result<Verifier, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    keys::public_key(&text)
        .map_err(|e| CliError::invalid(format!("--public-key {}: {e}", path.display())))
}

fn report(logs: &[(String, Vec<u8>)], key: Option<&Verifier>) -> audit::Report {
    let logs: Vec<Log<'_>> = logs
        .iter()
        .map(|(name, bytes)| Log { name, bytes })
        .collect();
    audit::verify(&logs, key)
}

fn verify(a: &AuditVerifyArgs) -> Result<u8, CliError> {
    let key = match (&a.public_key, a.unsigned) {
        (Some(p), false) => Some(public_key(p)?),
        _ => None,
    };
    let logs = read_logs(&a.logs)?;
    let mut r = report(&logs, key.as_ref());
    if !a.bundles.is_empty() {
        r.name_configurations(&read_logs(&a.bundles)?);
    }
    match a.format {
        Format::Text => print!("{}", audit::to_text(&r)),
        f => print!("{}", crate::serialize(&r, f)?),
    }
    Ok(if r.damaged() {
        EXIT_AUDIT_DAMAGED
    } else if key.is_some() && r.unsigned() {
        EXIT_AUDIT_UNSIGNED
    } else {
        0
    })
}

/// The records of `logs` that verify with the key of `path` (each once).
pub(crate) fn verified_records(
    logs: &[(String, Vec<u8>)],
    path: &Path,
) -> Result<Vec<Value>, CliError> {
    let key = public_key(path)?;
    let r = report(logs, Some(&key));
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for (name, bytes) in logs {
        for w in written(bytes, name).0 {
            let d = mcp_access_engine::receipts::digest(w.text.as_bytes()).to_text();
            if audit::is_verified(&r, &w.text) && seen.insert(d) {
                if let Ok(v) = serde_json::from_str(&w.text) {
                    out.push(v);
                }
            }
        }
    }
    Ok(out)
}

fn keygen(out: &Path) -> Result<u8, CliError> {
    let (private, public) = keys::generate().map_err(|e| CliError::invalid(e.0))?;
    let public_path = PathBuf::from(format!("{}.pub", out.display()));
    write_private(out, &private)?;
    std::fs::write(&public_path, public)
        .map_err(|e| format!("cannot write {}: {e}", public_path.display()))?;
    eprintln!(
        "wrote {} (private: the VM's MCP_ACCESS_RECEIPT_KEY, keep it secret) and {} (for audit verify --public-key)",
        out.display(),
        public_path.display()
    );
    Ok(0)
}

/// Writes the private key readable by its owner only (never over an existing file).
fn write_private(path: &Path, text: &str) -> Result<(), CliError> {
    use std::io::Write as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut f = options
        .open(path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    f.write_all(text.as_bytes())
        .map_err(|e| CliError::invalid(format!("cannot write {}: {e}", path.display())))
}
