//! `XBackend`: the backend a route or policy names, of either kind (kube-agentic-networking's,
//! Gateway API's).

use super::{ref_fields, GROUP_FIELD, KIND_FIELD, NAMESPACE_FIELD, NAME_FIELD};
use crate::check::{self, Checker};
use crate::types::*;

pub(crate) fn xbackend(s: &XBackendSpec, c: &mut Checker) {
    let Some(mcp) = &s.mcp else {
        c.err("spec.mcp", "Required value");
        return;
    };
    if c.required("spec.mcp.port", &mcp.port) {
        c.range("spec.mcp.port", mcp.port.unwrap_or_default(), 1, 65535);
    }
    c.rule(
        "spec.mcp",
        mcp.service_name.is_some() != mcp.hostname.is_some(),
        "object",
        "exactly one of the fields in [serviceName hostname] must be set",
    );
}

// ---------------------------------------------------------------------------------------
// XAccessPolicy

/// The hostname patterns of Gateway API (`PreciseHostname`, a SAN's `Hostname`).
const PRECISE_HOSTNAME: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
const SAN_HOSTNAME: &str =
    r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
const SAN_URI: &str = r"^(([^:/?#]+):)(//([^/?#]*))([^?#]*)(\?([^#]*))?(#(.*))?";
const WELL_KNOWN_CAS: &str = r"^(System|([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]))$";

/// The protocols of Gateway API's `XBackend.spec.protocol`.
pub(crate) const GATEWAY_XBACKEND_PROTOCOLS: &[&str] =
    &["TCP", "HTTP", "HTTP2", "HTTP11", "H2C", "MCP"];

/// `XBackend` of Gateway API v1.6 (group `gateway.networking.x-k8s.io`): what its CRD
/// (`config-schema/crds/upstream/gateway-api/gateway.networking.x-k8s.io_xbackends.yaml`) checks.
pub(crate) fn gateway_xbackend(s: &GatewayXBackendSpec, c: &mut Checker) {
    if c.required("spec.type", &s.kind) {
        c.one_of("spec.type", opt(&s.kind), &["ExternalHostname"]);
    }
    c.rule(
        "spec",
        (opt(&s.kind) == "ExternalHostname") == s.external_hostname.is_some(),
        "object",
        "externalHostname must be set when type is ExternalHostname and must be unset otherwise",
    );
    if let Some(e) = &s.external_hostname {
        let at = "spec.externalHostname.hostname";
        if c.required(at, &e.hostname) {
            let h = opt(&e.hostname);
            if c.string(at, h, 1, 253, Some(PRECISE_HOSTNAME)) {
                c.rule(
                    at,
                    !h.ends_with(".cluster.local"),
                    "string",
                    "hostname must not be an IP address or end with .cluster.local",
                );
            }
        }
    }
    match &s.port {
        None => c.err("spec.port", "Required value"),
        Some(p) => {
            if c.required("spec.port.port", &p.port) {
                c.range("spec.port.port", p.port.unwrap_or_default(), 1, 65535);
            }
            if let Some(n) = &p.name {
                if c.len_between("spec.port.name", n, 0, 63) {
                    c.rule(
                        "spec.port.name",
                        n.is_empty() || check::matches(check::DNS_LABEL, n),
                        "string",
                        "Name must be a valid DNS label",
                    );
                }
            }
        }
    }
    if let Some(p) = &s.protocol {
        c.one_of("spec.protocol", p, GATEWAY_XBACKEND_PROTOCOLS);
    }
    if let Some(t) = &s.tls {
        backend_tls("spec.tls", t, c);
    }
}

fn backend_tls(at: &str, t: &GatewayBackendTlsSpec, c: &mut Checker) {
    let mode_at = format!("{at}.mode");
    if c.required(&mode_at, &t.mode) {
        c.one_of(
            &mode_at,
            opt(&t.mode),
            &["None", "ServerOnly", "ClientAndServer"],
        );
    }
    c.rule(
        at,
        (opt(&t.mode) == "ClientAndServer") == t.client_certificate_ref.is_some(),
        "object",
        "clientCertificateRef must be set if and only if mode is ClientAndServer",
    );
    if let Some(r) = &t.client_certificate_ref {
        let fields = [
            (&GROUP_FIELD, &r.group, false),
            (&KIND_FIELD, &r.kind, false),
            (&NAME_FIELD, &r.name, true),
            (&NAMESPACE_FIELD, &r.namespace, false),
        ];
        ref_fields(&format!("{at}.clientCertificateRef"), &fields, c);
    }
    let Some(v) = &t.validation else { return };
    let vat = format!("{at}.validation");
    let refs = v.ca_certificate_refs.as_deref().unwrap_or_default();
    c.max_items(&format!("{vat}.caCertificateRefs"), refs.len(), 8);
    for (i, r) in refs.iter().enumerate() {
        if r.namespace.is_some() {
            c.err(
                format!("{vat}.caCertificateRefs[{i}].namespace"),
                "unknown field \"namespace\"",
            );
        }
        let fields = [
            (&GROUP_FIELD, &r.group, true),
            (&KIND_FIELD, &r.kind, true),
            (&NAME_FIELD, &r.name, true),
        ];
        ref_fields(&format!("{vat}.caCertificateRefs[{i}]"), &fields, c);
    }
    let well_known = opt(&v.well_known_ca_certificates);
    if let Some(w) = &v.well_known_ca_certificates {
        c.string(
            &format!("{vat}.wellKnownCACertificates"),
            w,
            1,
            253,
            Some(WELL_KNOWN_CAS),
        );
    }
    let hat = format!("{vat}.hostname");
    if c.required(&hat, &v.hostname) {
        c.string(&hat, opt(&v.hostname), 1, 253, Some(PRECISE_HOSTNAME));
    }
    let sans = v.subject_alt_names.as_deref().unwrap_or_default();
    c.max_items(&format!("{vat}.subjectAltNames"), sans.len(), 5);
    for (i, san) in sans.iter().enumerate() {
        subject_alt_name(&format!("{vat}.subjectAltNames[{i}]"), san, c);
    }
    c.rule(
        &vat,
        refs.is_empty() || well_known.is_empty(),
        "object",
        "must not contain both CACertificateRefs and WellKnownCACertificates",
    );
    c.rule(
        &vat,
        !refs.is_empty() || !well_known.is_empty(),
        "object",
        "must specify either CACertificateRefs or WellKnownCACertificates",
    );
}

fn subject_alt_name(at: &str, san: &SubjectAltName, c: &mut Checker) {
    let tat = format!("{at}.type");
    if c.required(&tat, &san.kind) {
        c.one_of(&tat, opt(&san.kind), &["Hostname", "URI"]);
    }
    if let Some(h) = &san.hostname {
        c.string(&format!("{at}.hostname"), h, 1, 253, Some(SAN_HOSTNAME));
    }
    if let Some(u) = &san.uri {
        c.string(&format!("{at}.uri"), u, 1, 253, Some(SAN_URI));
    }
    let kind = opt(&san.kind);
    let (host, uri) = (opt(&san.hostname), opt(&san.uri));
    for (ok, message) in [
        (
            kind != "Hostname" || !host.is_empty(),
            "SubjectAltName element must contain Hostname, if Type is set to Hostname",
        ),
        (
            kind == "Hostname" || host.is_empty(),
            "SubjectAltName element must not contain Hostname, if Type is not set to Hostname",
        ),
        (
            kind != "URI" || !uri.is_empty(),
            "SubjectAltName element must contain URI, if Type is set to URI",
        ),
        (
            kind == "URI" || uri.is_empty(),
            "SubjectAltName element must not contain URI, if Type is not set to URI",
        ),
    ] {
        c.rule(at, ok, "object", message);
    }
}
