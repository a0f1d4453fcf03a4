//! Listing the URI SANs of a peer certificate: the filter's hand-written `x509` module against
//! the maintained parsers it was measured against (x509-cert, x509-parser), on a real SPIFFE
//! client certificate (filter/fuzz/seeds/x509_sans/spiffe.der, made by openssl). All three must agree
//! on it before anything is timed.
//!
//! `cargo bench -p mcp-access-engine --bench x509`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;
use std::time::Duration;

use criterion::Criterion;
use mcp_access_engine::x509::{uri_sans, uri_sans_der};
use x509_cert::der::pem::LineEnding;

const DER: &[u8] = include_bytes!("../../fuzz/seeds/x509_sans/spiffe.der");

/// x509-cert: the whole certificate decoded, then its one subjectAltName.
fn x509_cert_sans(der: &[u8]) -> Option<Vec<String>> {
    use x509_cert::der::Decode;
    use x509_cert::ext::pkix::{name::GeneralName, SubjectAltName};
    let cert = x509_cert::Certificate::from_der(der).ok()?;
    let mut sans = cert.tbs_certificate().filter_extensions::<SubjectAltName>();
    let Some(first) = sans.next() else {
        return Some(Vec::new());
    };
    if sans.next().is_some() {
        return None;
    }
    let (_, san) = first.ok()?;
    let uris = san.0.iter().filter_map(|n| match n {
        GeneralName::UniformResourceIdentifier(u) => Some(u.to_string()),
        _ => None,
    });
    Some(uris.collect())
}

/// x509-parser: the whole certificate parsed, then its one subjectAltName.
fn x509_parser_sans(der: &[u8]) -> Option<Vec<String>> {
    use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
    let (rest, cert) = X509Certificate::from_der(der).ok()?;
    if !rest.is_empty() {
        return None;
    }
    let Some(san) = cert.subject_alternative_name().ok()? else {
        return Some(Vec::new());
    };
    let uris = san.value.general_names.iter().filter_map(|n| match n {
        GeneralName::URI(u) => Some(u.to_string()),
        _ => None,
    });
    Some(uris.collect())
}

fn main() {
    let pem = x509_cert::der::pem::encode_string("CERTIFICATE", LineEnding::LF, DER).unwrap();
    // As older Envoys hand it over: percent-encoded.
    let encoded: String = pem
        .chars()
        .map(|c| match c {
            '\n' | '+' | '/' | '=' => format!("%{:02X}", c as u32),
            c => c.to_string(),
        })
        .collect();
    let ours = uri_sans_der(DER).unwrap();
    assert_eq!(ours, ["spiffe://example.org/ns/agents/sa/alpha"]);
    assert_eq!(x509_cert_sans(DER).as_ref(), Some(&ours));
    assert_eq!(x509_parser_sans(DER).as_ref(), Some(&ours));
    assert_eq!(uri_sans(pem.as_bytes()).as_ref(), Ok(&ours));
    assert_eq!(uri_sans(encoded.as_bytes()).as_ref(), Ok(&ours));

    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    let mut g = c.benchmark_group("der");
    g.bench_function("hand-written", |b| b.iter(|| uri_sans_der(black_box(DER))));
    g.bench_function("x509-cert", |b| b.iter(|| x509_cert_sans(black_box(DER))));
    g.bench_function("x509-parser", |b| {
        b.iter(|| x509_parser_sans(black_box(DER)))
    });
    g.finish();
    let mut g = c.benchmark_group("pem");
    g.bench_function("hand-written", |b| {
        b.iter(|| uri_sans(black_box(pem.as_bytes())))
    });
    g.bench_function("hand-written-percent", |b| {
        b.iter(|| uri_sans(black_box(encoded.as_bytes())))
    });
    g.bench_function("x509-cert", |b| {
        b.iter(|| {
            let (_, der) = x509_cert::der::pem::decode_vec(black_box(pem.as_bytes())).unwrap();
            x509_cert_sans(&der)
        })
    });
    g.bench_function("x509-parser", |b| {
        b.iter(|| {
            let (_, p) = x509_parser::pem::parse_x509_pem(black_box(pem.as_bytes())).unwrap();
            x509_parser_sans(&p.contents)
        })
    });
    g.finish();
    c.final_summary();
}
