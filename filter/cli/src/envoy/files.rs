//! The files the configuration names: certificates, keys, CAs and JWKS, checked and made absolute.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::error::CliError;
use crate::jwt::{Jwks, JwtProviderSpec};

/// What a PEM file given to Envoy must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pem {
    Certificate,
    PrivateKey,
}

/// Whether PEM `text` holds a block of `kind`.
pub(super) fn has_pem(text: &str, kind: Pem) -> bool {
    text.lines().map(str::trim).any(|l| match kind {
        Pem::Certificate => l == "-----BEGIN CERTIFICATE-----",
        Pem::PrivateKey => l.starts_with("-----BEGIN ") && l.ends_with("PRIVATE KEY-----"),
    })
}

/// A file for Envoy, as Envoy must be given it: absolute, since Envoy resolves a relative path
/// against its own working directory, not the one the command ran in. `what` names the flag.
/// With `elsewhere` the path is where Envoy runs: it must be absolute, and is not read (None).
pub(super) fn absolute(
    what: &str,
    path: &str,
    elsewhere: bool,
) -> Result<(String, Option<String>), CliError> {
    if elsewhere {
        return if std::path::Path::new(path).is_absolute() {
            Ok((path.to_string(), None))
        } else {
            Err(format!("{what}: {path}: give the absolute path where Envoy runs (--files-where-envoy-runs)").into())
        };
    }
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!("{what}: cannot read {path}: {e} (a path that exists only where Envoy runs: --files-where-envoy-runs)")
    })?;
    let abs = std::path::absolute(path).map_err(|e| format!("{what}: {path}: {e}"))?;
    Ok((abs.to_string_lossy().into_owned(), Some(text)))
}

/// A PEM file of `kind` for Envoy (see [`absolute`]); an error names the flag and the fix.
pub(super) fn pem_file(
    what: &str,
    path: &str,
    kind: Pem,
    elsewhere: bool,
) -> Result<String, CliError> {
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
    Err(format!("{what}: {path} holds no {want}{hint}").into())
}

/// A local JWKS file for Envoy's `jwt_authn` (see [`absolute`]): JSON with at least one key.
pub(super) fn jwks_file(what: &str, path: &str, elsewhere: bool) -> Result<String, CliError> {
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
        return Err(format!("{what}: {path} is no JWKS with a key: expected {{\"keys\": [JWK, ...]}} with at least one JWK (with \"kty\"); Envoy would refuse every token").into());
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
) -> Result<(), CliError> {
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
