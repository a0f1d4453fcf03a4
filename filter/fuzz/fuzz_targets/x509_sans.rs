//! `x509::uri_sans_der`, the filter's own DER walk, against x509-parser (nom / asn1-rs based).
//!
//! Forward: whenever x509-parser reads the certificate and its one subjectAltName, the filter
//! lists the same URIs, or it refused the certificate for one of the rules below on which it is
//! deliberately stricter than x509-parser (`stricter` finds the broken rule on asn1-rs's view of
//! the DER; each rule is one the filter documents in filter/engine/src/x509.rs):
//! - every length in its shortest form, every tag number in one byte, every element's
//!   identifier exact (x509-parser checks only the tag number in many places);
//! - Certificate: nothing after the signature;
//! - TBSCertificate: version, if encoded, v2 or v3 (v1 is the default, so never encoded);
//!   unique IDs only from v2, extensions only in v3; after the subjectPublicKeyInfo only the
//!   exact tags `[1]` `[2]` (primitive) and `[3]` (constructed), in order, and nothing after;
//!   `[3]`'s length is that of its contents (x509-parser reads the rest of the TBSCertificate);
//! - Extensions: a non-empty list; `critical` encoded only as TRUE (0xff); nothing after an
//!   extension's value; no OID twice;
//! - subjectAltName: a non-empty list and nothing after it; GeneralNames with RFC 5280's tags
//!   in their exact form (otherName, x400Address, directoryName, ediPartyName constructed, the
//!   others primitive); rfc822Name, dNSName and URI are ASCII (IA5String).
//!
//! If x509-parser finds two subjectAltName extensions, the filter refuses the certificate too;
//! so it does any certificate that `strictness` finds breaking one of those rules.
//!
//! Backward: whenever the filter lists URIs, x509-parser reads the same list from a real
//! certificate (seeds/x509_sans/no-san.der) whose extensions are replaced by this input's. The
//! filter checks the fields before the extensions for order and DER framing only (it reads none
//! of them), so the library's checks of names, times, keys and algorithms are set aside there.
//!
//! Also: the input as PEM, and as percent-encoded PEM, reads the same as the DER, and x509-parser's
//! PEM reader finds the same DER in that PEM; the input read as PEM text does not panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_access_engine::x509::{uri_sans, uri_sans_der, CertError};
use x509_parser::asn1_rs::{Any, Class};
use x509_parser::certificate::X509Certificate;
use x509_parser::error::X509Error;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::FromDer;

/// A real certificate without subjectAltName; its fields frame the input's extensions.
const TEMPLATE: &[u8] = include_bytes!("../seeds/x509_sans/no-san.der");
const SAN_OID: &[u8] = &[0x55, 0x1d, 0x11];

fuzz_target!(|data: &[u8]| {
    check(data);
    let reframed = reframe(data);
    if reframed != data {
        check(&reframed);
    }
});

fn check(der: &[u8]) {
    let ours = uri_sans_der(der);
    if let (Err(Some(rule)), Ok(list)) = (strictness(der), &ours) {
        panic!("the filter lists {list:?} from a certificate that breaks its rule: {rule}");
    }
    forward(der, &ours);
    if let Ok(uris) = &ours {
        backward(der, uris);
    }
    pem(der, &ours);
    let _ = uri_sans(der);
}

/// `input` read leniently as DER elements (a length past its parent's end is cut there) and
/// written again with each length recomputed from the contents it delimits, in the form the
/// input used (short, or long with the same number of bytes where the length fits); inside
/// constructed elements and OCTET STRINGs holding a SEQUENCE (extension values) too. So a
/// mutated length deep in a certificate (its value or its form) still gives a framed
/// certificate around it: the enclosing lengths follow.
fn reframe(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len());
    let mut rest = input;
    while let Some((&tag, after)) = rest.split_first() {
        let Some((&first, after)) = after.split_first() else {
            break;
        };
        let (form, declared, after) = if first < 0x80 {
            (0, usize::from(first), after)
        } else {
            let n = usize::from(first & 0x7f);
            if n == 0 || n > 4 || after.len() < n {
                break;
            }
            let len = after[..n]
                .iter()
                .fold(0usize, |l, b| (l << 8) | usize::from(*b));
            (n, len, &after[n..])
        };
        let (value, after) = after.split_at(declared.min(after.len()));
        let nested = tag & 0x20 != 0 || tag == 0x04 && value.first() == Some(&0x30);
        let value = if nested {
            reframe(value)
        } else {
            value.to_vec()
        };
        out.push(tag);
        let len = value.len();
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        if form == 0 && len < 0x80 {
            out.push(len as u8);
        } else {
            let n = form.max(bytes.len()).max(1);
            out.push(0x80 | n as u8);
            out.extend(std::iter::repeat_n(0, n - bytes.len()));
            out.extend(bytes);
        }
        out.extend(value);
        rest = after;
    }
    out.extend_from_slice(rest);
    out
}

/// What x509-parser makes of a certificate.
#[derive(Debug)]
enum Library {
    Uris(Vec<String>),
    DuplicateSan,
    Refused,
}

fn library(der: &[u8]) -> Library {
    let Ok((rest, cert)) = X509Certificate::from_der(der) else {
        return Library::Refused;
    };
    if !rest.is_empty() {
        return Library::Refused;
    }
    match cert.subject_alternative_name() {
        Ok(None) => Library::Uris(Vec::new()),
        Ok(Some(san)) => Library::Uris(
            san.value
                .general_names
                .iter()
                .filter_map(|n| match n {
                    GeneralName::URI(u) => Some(u.to_string()),
                    _ => None,
                })
                .collect(),
        ),
        Err(X509Error::DuplicateExtensions) => Library::DuplicateSan,
        Err(_) => Library::Refused,
    }
}

fn forward(der: &[u8], ours: &Result<Vec<String>, CertError>) {
    match (library(der), ours) {
        (Library::Uris(lib), Ok(list)) => assert_eq!(list, &lib, "URI SANs differ"),
        (Library::Uris(lib), Err(e)) => {
            let rule = strictness(der);
            assert!(
                matches!(rule, Err(Some(_))),
                "filter {e:?}, x509-parser {lib:?}, and no documented rule is broken ({rule:?})"
            );
        }
        (Library::DuplicateSan, Ok(list)) => {
            panic!("x509-parser finds two subjectAltNames, the filter lists {list:?}")
        }
        (Library::DuplicateSan | Library::Refused, _) => {}
    }
}

fn backward(der: &[u8], uris: &[String]) {
    let extensions = extensions_element(der).expect("the filter read it, asn1-rs must frame it");
    let spliced = splice(extensions);
    match library(&spliced) {
        Library::Uris(lib) => assert_eq!(lib, uris, "URI SANs differ (spliced)"),
        other => panic!("filter lists {uris:?}, x509-parser on the spliced certificate: {other:?}"),
    }
}

fn pem(der: &[u8], ours: &Result<Vec<String>, CertError>) {
    let body = data_encoding::BASE64.encode(der);
    let mut text = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in body.as_bytes().chunks(64) {
        text.push_str(std::str::from_utf8(line).unwrap());
        text.push('\n');
    }
    text.push_str("-----END CERTIFICATE-----\n");
    assert_eq!(&uri_sans(text.as_bytes()), ours, "PEM");
    let mut encoded = String::new();
    for c in text.chars() {
        match c {
            '\n' | '+' | '/' | '=' | ' ' => encoded.push_str(&format!("%{:02X}", c as u32)),
            c => encoded.push(c),
        }
    }
    assert_eq!(&uri_sans(encoded.as_bytes()), ours, "percent-encoded PEM");
    if !der.is_empty() {
        let (_, lib) = x509_parser::pem::parse_x509_pem(text.as_bytes()).expect("x509-parser PEM");
        assert_eq!(
            lib.contents, der,
            "x509-parser reads other DER from the PEM"
        );
    }
}

/// One element: (what follows, the element, its raw bytes).
fn element(input: &[u8]) -> Option<(&[u8], Any<'_>, &[u8])> {
    let (rest, any) = Any::from_der(input).ok()?;
    let raw = input.get(..input.len() - rest.len())?;
    Some((rest, any, raw))
}

/// All elements of a constructed element's contents.
fn elements(mut input: &[u8]) -> Option<Vec<(Any<'_>, &[u8])>> {
    let mut out = Vec::new();
    while !input.is_empty() {
        let (rest, any, raw) = element(input)?;
        out.push((any, raw));
        input = rest;
    }
    Some(out)
}

/// TBSCertificate's fields.
fn tbs_fields(der: &[u8]) -> Option<Vec<(Any<'_>, &[u8])>> {
    let (_, cert, _) = element(der)?;
    let (_, tbs, _) = element(cert.data)?;
    elements(tbs.data)
}

fn is_tag(any: &Any<'_>, class: Class, constructed: bool, number: u32) -> bool {
    any.class() == class && any.header.is_constructed() == constructed && any.tag().0 == number
}

/// The raw `[3]` element of the TBSCertificate, if any.
fn extensions_element(der: &[u8]) -> Option<Option<&[u8]>> {
    let fields = tbs_fields(der)?;
    Some(
        fields
            .iter()
            .find(|(f, _)| is_tag(f, Class::ContextSpecific, true, 3))
            .map(|(_, raw)| *raw),
    )
}

/// TEMPLATE with its extensions (if any) replaced by `extensions` (none: no `[3]`).
fn splice(extensions: Option<&[u8]>) -> Vec<u8> {
    let (_, cert, _) = element(TEMPLATE).unwrap();
    let (after, _, _) = element(cert.data).unwrap();
    let mut fields: Vec<u8> = tbs_fields(TEMPLATE)
        .unwrap()
        .iter()
        .filter(|(f, _)| !is_tag(f, Class::ContextSpecific, true, 3))
        .flat_map(|(_, raw)| raw.to_vec())
        .collect();
    fields.extend_from_slice(extensions.unwrap_or_default());
    let mut body = tlv(0x30, &fields);
    body.extend_from_slice(after);
    tlv(0x30, &body)
}

fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

const FRAMING: &str = "a length not in its shortest form, or a multi-byte tag";
const A3_LENGTH: &str = "[3]'s length not that of its contents (x509-parser reads on)";
const TAG: &str = "an element of the wrong tag class or form (x509-parser compares tag numbers)";

/// The rule an element breaks: its length or tag number not in DER form (shortest length,
/// one-byte tag), or (with `want`) a tag other than that exact identifier byte.
fn framing(any: &Any<'_>, raw: &[u8], want: Option<u8>) -> Option<&'static str> {
    let tag_len = any.header.raw_tag().map_or(1, <[u8]>::len);
    let len = any.data.len();
    let shortest = if len < 0x80 {
        1
    } else {
        1 + len.to_be_bytes().iter().skip_while(|b| **b == 0).count()
    };
    if tag_len != 1 || raw.len() != tag_len + shortest + len {
        return Some(FRAMING);
    }
    match want {
        Some(tag) if raw.first() != Some(&tag) => Some(TAG),
        _ => None,
    }
}

/// The rule of the first element of `input` with identifier `want`, or the element.
fn expect(input: &[u8], want: u8) -> Result<(&[u8], Any<'_>), Option<&'static str>> {
    let (rest, any, raw) = element(input).ok_or(None)?;
    match framing(&any, raw, Some(want)) {
        Some(rule) => Err(Some(rule)),
        None => Ok((rest, any)),
    }
}

/// `Err(Some(rule))`: `der` breaks the filter's `rule`; `Err(None)`: asn1-rs cannot frame it;
/// `Ok`: no rule found.
fn strictness(der: &[u8]) -> Result<(), Option<&'static str>> {
    let (rest, cert) = expect(der, 0x30)?;
    if !rest.is_empty() {
        return Err(None);
    }
    let (rest, tbs) = expect(cert.data, 0x30)?;
    let (rest, _) = expect(rest, 0x30)?; // signatureAlgorithm
    let (rest, _) = expect(rest, 0x03)?; // signatureValue
    if !rest.is_empty() {
        return Err(Some("bytes after the signature in Certificate"));
    }
    let mut rest = tbs.data;
    let mut version = 1;
    if rest.first() == Some(&0xa0) {
        let (after, explicit) = expect(rest, 0xa0)?;
        let (tail, number) = expect(explicit.data, 0x02)?;
        version = match (tail, number.data) {
            ([], [1]) => 2,
            ([], [2]) => 3,
            _ => return Err(Some("version encoded but not v2 or v3")),
        };
        rest = after;
    }
    rest = expect(rest, 0x02)?.0; // serialNumber
    for _ in 0..5 {
        rest = expect(rest, 0x30)?.0; // signature, issuer, validity, subject, spki
    }
    let mut extensions = None;
    let mut order = [(0x81u8, 2), (0x82, 2), (0xa3, 3)].into_iter();
    while !rest.is_empty() {
        let Some((after, any, raw)) = element(rest) else {
            let in_or_after_3 = extensions.is_some() || rest.first() == Some(&0xa3);
            return Err(in_or_after_3.then_some(A3_LENGTH));
        };
        if let Some(rule) = framing(&any, raw, None) {
            return Err(Some(rule));
        }
        let tag = raw.first().copied().ok_or(None)?;
        let Some((_, need)) = order.by_ref().find(|(t, _)| *t == tag) else {
            return Err(Some(
                "a TBSCertificate field out of order, or of the wrong class or form",
            ));
        };
        if version < need {
            return Err(Some("unique IDs before v2, or extensions before v3"));
        }
        if tag == 0xa3 {
            extensions = Some(any.data);
        }
        rest = after;
    }
    match extensions {
        Some(extensions) => match san_of(extensions)? {
            Some(san) => general_names(san),
            None => Ok(()),
        },
        None => Ok(()),
    }
}

/// The rules of the `[3]` extensions' contents; `Ok`: the subjectAltName's value, if any.
fn san_of(extensions: &[u8]) -> Result<Option<&[u8]>, Option<&'static str>> {
    let Some((after, list, raw)) = element(extensions) else {
        return Err(Some(A3_LENGTH));
    };
    if let Some(rule) = framing(&list, raw, Some(0x30)) {
        return Err(Some(rule));
    }
    if !after.is_empty() {
        return Err(Some(A3_LENGTH));
    }
    if list.data.is_empty() {
        return Err(Some("an empty extension list"));
    }
    let mut oids = Vec::new();
    let mut san = None;
    let mut rest = list.data;
    while !rest.is_empty() {
        let (after, ext) = expect(rest, 0x30)?;
        rest = after;
        let (mut inner, oid) = expect(ext.data, 0x06)?;
        if inner.first() == Some(&0x01) {
            let (after, critical) = expect(inner, 0x01)?;
            if critical.data != [0xff] {
                return Err(Some("critical encoded, but not as DER TRUE"));
            }
            inner = after;
        }
        let (after, value) = expect(inner, 0x04)?;
        if !after.is_empty() {
            return Err(Some("bytes after an extension's value"));
        }
        if oids.contains(&oid.data) {
            return Err(Some("an extension OID twice"));
        }
        oids.push(oid.data);
        if oid.data == SAN_OID {
            san = Some(value.data);
        }
    }
    Ok(san)
}

/// The rules of a subjectAltName's GeneralNames.
fn general_names(san: &[u8]) -> Result<(), Option<&'static str>> {
    let (after, names) = expect(san, 0x30)?;
    if !after.is_empty() {
        return Err(Some("bytes after the GeneralNames in subjectAltName"));
    }
    if names.data.is_empty() {
        return Err(Some("an empty GeneralNames"));
    }
    let mut rest = names.data;
    while !rest.is_empty() {
        let (after, name, raw) = element(rest).ok_or(None)?;
        if let Some(rule) = framing(&name, raw, None) {
            return Err(Some(rule));
        }
        rest = after;
        let constructed = match name.tag().0 {
            0 | 3 | 4 | 5 => true,
            1 | 2 | 6 | 7 | 8 => false,
            _ => return Err(Some("a GeneralName tag outside RFC 5280")),
        };
        if name.class() != Class::ContextSpecific || name.header.is_constructed() != constructed {
            return Err(Some("a GeneralName of the wrong class or form"));
        }
        if matches!(name.tag().0, 1 | 2 | 6) && !name.data.is_ascii() {
            return Err(Some("an rfc822Name, dNSName or URI that is not ASCII"));
        }
    }
    Ok(())
}
