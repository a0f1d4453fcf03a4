//! Just enough X.509 to list the URI SANs of a peer certificate as Envoy hands it over
//! (`connection.peer_certificate`: PEM, possibly percent-encoded). Envoy's
//! `connection.uri_san_peer_certificate` names only the first URI SAN; an X.509-SVID has exactly
//! one, and a certificate with more must give no identity, so the filter counts them itself.
//! Anything unexpected in the encoding is an error (no identity), never a guess.
//!
//! Hand-written rather than a maintained parser, by measurement (release wasm32-wasip1 module
//! after wasm-opt, 501,382 bytes when measured; benches/x509.rs for time): this file takes
//! 4,230 bytes of it; doing the DER walk with x509-cert 0.3 instead adds 62,068 bytes, with
//! x509-parser 0.18 77,658. Natively, on a 499-byte SPIFFE certificate, this walk takes
//! ~0.2 us, x509-cert ~5 us, x509-parser ~4 us (they decode every field; the filter needs only
//! the URI SANs). Neither is as strict as this walk: both accept an encoded critical
//! FALSE, extensions in a v1 certificate, an empty GeneralNames and a repeated non-SAN
//! extension. The walk is held to x509-parser by the differential fuzz target
//! filter/fuzz/fuzz_targets/x509_sans.rs, which lists the rules on which this walk is stricter.

/// DER tags used here.
const BOOLEAN: u8 = 0x01;
const INTEGER: u8 = 0x02;
const BIT_STRING: u8 = 0x03;
const OCTET_STRING: u8 = 0x04;
const OID: u8 = 0x06;
const SEQUENCE: u8 = 0x30;
/// TBSCertificate's `[0] EXPLICIT Version`, `[1] IMPLICIT` and `[2] IMPLICIT UniqueIdentifier`
/// (BIT STRING, so primitive) and `[3] EXPLICIT Extensions`.
const VERSION: u8 = 0xa0;
const ISSUER_UID: u8 = 0x81;
const SUBJECT_UID: u8 = 0x82;
const EXTENSIONS: u8 = 0xa3;
/// `uniformResourceIdentifier [6] IA5String` in GeneralName.
const URI_NAME: u8 = 0x86;
/// The tags a GeneralName may have: otherName [0], rfc822Name [1], dNSName [2],
/// x400Address [3], directoryName [4], ediPartyName [5], URI [6], iPAddress [7], registeredID [8].
const GENERAL_NAME_TAGS: &[u8] = &[0xa0, 0x81, 0x82, 0xa3, 0xa4, 0xa5, URI_NAME, 0x87, 0x88];
/// Of those, the IA5Strings (rfc822Name, dNSName, URI): ASCII only.
const IA5_NAME_TAGS: &[u8] = &[0x81, 0x82, URI_NAME];
/// 2.5.29.17, subjectAltName.
const SAN_OID: &[u8] = &[0x55, 0x1d, 0x11];

/// Why a certificate could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CertError {
    /// Not PEM (or a bad percent escape / base64).
    Encoding,
    /// Not the DER a certificate should be.
    Der,
    /// Two subjectAltName extensions.
    DuplicateSan,
}

/// The URI SANs of the first certificate in `pem` (in certificate order).
pub fn uri_sans(pem: &[u8]) -> Result<Vec<String>, CertError> {
    let der = if pem.contains(&b'%') {
        pem_body(&percent_decode(pem).ok_or(CertError::Encoding)?)
    } else {
        pem_body(pem)
    };
    uri_sans_der(&der.ok_or(CertError::Encoding)?)
}

/// The URI SANs of a DER certificate.
///
/// The fields before the extensions are checked for presence, order and DER framing only (the
/// filter reads none of them); the extensions are checked fully: a non-empty list, each
/// `SEQUENCE { OID, critical TRUE (FALSE is the default, so never encoded), OCTET STRING }`,
/// no OID twice, and subjectAltName a non-empty list of GeneralNames with their RFC 5280 tags
/// whose IA5String names are ASCII.
pub fn uri_sans_der(der: &[u8]) -> Result<Vec<String>, CertError> {
    // Certificate ::= SEQUENCE { tbsCertificate, signatureAlgorithm, signatureValue BIT STRING }
    let (cert, rest) = element(der, SEQUENCE)?;
    end(rest)?;
    let (tbs, rest) = element(cert, SEQUENCE)?;
    let (_, rest) = element(rest, SEQUENCE)?;
    let (_, rest) = element(rest, BIT_STRING)?;
    end(rest)?;
    let Some(extensions) = tbs_extensions(tbs)? else {
        return Ok(Vec::new());
    };
    let (mut list, rest) = element(extensions, SEQUENCE)?;
    end(rest)?;
    if list.is_empty() {
        return Err(CertError::Der); // SIZE (1..MAX)
    }
    let mut oids: Vec<&[u8]> = Vec::new();
    let mut san = None;
    while !list.is_empty() {
        let (ext, rest) = element(list, SEQUENCE)?;
        list = rest;
        let (oid, mut ext) = element(ext, OID)?;
        if ext.first() == Some(&BOOLEAN) {
            let (critical, rest) = element(ext, BOOLEAN)?;
            if critical != [0xff] {
                return Err(CertError::Der);
            }
            ext = rest;
        }
        let (value, rest) = element(ext, OCTET_STRING)?;
        end(rest)?;
        if oids.contains(&oid) {
            return Err(if oid == SAN_OID {
                CertError::DuplicateSan
            } else {
                CertError::Der
            });
        }
        oids.push(oid);
        if oid == SAN_OID {
            san = Some(value);
        }
    }
    let Some(san) = san else {
        return Ok(Vec::new());
    };
    let (mut names, rest) = element(san, SEQUENCE)?;
    end(rest)?;
    if names.is_empty() {
        return Err(CertError::Der); // SIZE (1..MAX)
    }
    let mut uris = Vec::new();
    while !names.is_empty() {
        let (tag, value, rest) = any_element(names)?;
        names = rest;
        if !GENERAL_NAME_TAGS.contains(&tag) || IA5_NAME_TAGS.contains(&tag) && !value.is_ascii() {
            return Err(CertError::Der);
        }
        if tag == URI_NAME {
            let uri = std::str::from_utf8(value).map_err(|_| CertError::Der)?;
            uris.push(uri.to_string());
        }
    }
    Ok(uris)
}

/// The contents of TBSCertificate's `[3] Extensions`, if there are any, after checking that
/// version (v2 or v3, as v1 is the default), serialNumber, signature, issuer, validity, subject,
/// subjectPublicKeyInfo and the optional unique IDs come in order and nothing else does.
/// Unique IDs need v2 or v3, extensions v3.
fn tbs_extensions(tbs: &[u8]) -> Result<Option<&[u8]>, CertError> {
    let mut version = 1;
    let mut rest = tbs;
    if rest.first() == Some(&VERSION) {
        let (explicit, after) = element(rest, VERSION)?;
        let (number, tail) = element(explicit, INTEGER)?;
        end(tail)?;
        version = match number {
            [1] => 2,
            [2] => 3,
            _ => return Err(CertError::Der),
        };
        rest = after;
    }
    rest = element(rest, INTEGER)?.1;
    for _ in 0..5 {
        rest = element(rest, SEQUENCE)?.1;
    }
    for tag in [ISSUER_UID, SUBJECT_UID] {
        if rest.first() == Some(&tag) {
            if version < 2 {
                return Err(CertError::Der);
            }
            rest = element(rest, tag)?.1;
        }
    }
    if rest.is_empty() {
        return Ok(None);
    }
    let (extensions, rest) = element(rest, EXTENSIONS)?;
    end(rest)?;
    if version < 3 {
        return Err(CertError::Der);
    }
    Ok(Some(extensions))
}

/// Nothing may follow.
fn end(rest: &[u8]) -> Result<(), CertError> {
    if rest.is_empty() {
        Ok(())
    } else {
        Err(CertError::Der)
    }
}

/// One DER element with tag `want`: (contents, what follows).
fn element(input: &[u8], want: u8) -> Result<(&[u8], &[u8]), CertError> {
    let (tag, value, rest) = any_element(input)?;
    if tag == want {
        Ok((value, rest))
    } else {
        Err(CertError::Der)
    }
}

/// One DER element: (tag, contents, what follows). Low tag numbers and definite lengths in
/// their shortest form only (DER), up to 4 length bytes.
fn any_element(input: &[u8]) -> Result<(u8, &[u8], &[u8]), CertError> {
    let (&tag, rest) = input.split_first().ok_or(CertError::Der)?;
    if tag & 0x1f == 0x1f {
        return Err(CertError::Der); // high tag numbers never occur in a certificate
    }
    let (&first, mut rest) = rest.split_first().ok_or(CertError::Der)?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 {
            return Err(CertError::Der);
        }
        let bytes = rest.get(..count).ok_or(CertError::Der)?;
        rest = rest.get(count..).ok_or(CertError::Der)?;
        let len = bytes.iter().fold(0usize, |n, b| (n << 8) | usize::from(*b));
        // The short form where it fits, and no leading zero byte.
        if len < 0x80 || bytes.first() == Some(&0) {
            return Err(CertError::Der);
        }
        len
    };
    let value = rest.get(..len).ok_or(CertError::Der)?;
    let after = rest.get(len..).ok_or(CertError::Der)?;
    Ok((tag, value, after))
}

/// `%XX` decoded (PEM itself holds no `%`, so plain PEM passes unchanged).
fn percent_decode(input: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(input.len());
    let mut i = 0;
    while let Some(&b) = input.get(i) {
        if b == b'%' {
            let hex = input.get(i + 1..i + 3)?;
            let s = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(s, 16).ok()?);
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    Some(out)
}

/// The DER of the first `CERTIFICATE` block of a PEM text.
fn pem_body(text: &[u8]) -> Option<Vec<u8>> {
    const BEGIN: &[u8] = b"-----BEGIN CERTIFICATE-----";
    const END: &[u8] = b"-----END CERTIFICATE-----";
    let start = text.windows(BEGIN.len()).position(|w| w == BEGIN)? + BEGIN.len();
    let body = text.get(start..)?;
    // Base64 holds no '-': the block ends at the first one.
    let end = body.iter().position(|b| *b == b'-')?;
    if !body.get(end..)?.starts_with(END) {
        return None;
    }
    // The Base64 of the whole block, its line breaks (ASCII whitespace) removed.
    let b64: Vec<u8> = body
        .get(..end)?
        .iter()
        .copied()
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    crate::base64::decode(&b64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_base64_round_trips_and_rejects_garbage() {
        let pem = |b64: &str| {
            pem_body(
                format!("-----BEGIN CERTIFICATE-----\n{b64}\n-----END CERTIFICATE-----\n")
                    .as_bytes(),
            )
        };
        assert_eq!(pem("aGVsbG8=").as_deref(), Some(&b"hello"[..]));
        assert_eq!(pem("aGVs\nbG8h").as_deref(), Some(&b"hello!"[..]));
        assert_eq!(pem("aGVsbG8=x"), None);
        assert_eq!(pem("aGVs*G8="), None);
    }

    #[test]
    fn percent_decoding_is_strict() {
        assert_eq!(percent_decode(b"a%0Ab").as_deref(), Some(&b"a\nb"[..]));
        assert_eq!(percent_decode(b"a%0"), None);
        assert_eq!(percent_decode(b"a%zz"), None);
    }

    fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        match content.len() {
            n @ 0..=0x7f => out.push(n as u8),
            n @ 0x80..=0xff => out.extend([0x81, n as u8]),
            n => out.extend([0x82, (n >> 8) as u8, n as u8]),
        }
        out.extend_from_slice(content);
        out
    }

    /// A certificate of this version (`None`: v1, not encoded) whose TBS holds these fields
    /// after the subjectPublicKeyInfo. The fields the filter does not read are left empty.
    fn cert_with(version: Option<u8>, tail: &[Vec<u8>]) -> Vec<u8> {
        let mut tbs = version.map_or(vec![], |v| tlv(VERSION, &tlv(INTEGER, &[v])));
        tbs.extend(tlv(INTEGER, &[1]));
        for _ in 0..5 {
            tbs.extend(tlv(SEQUENCE, &[])); // signature, issuer, validity, subject, spki
        }
        tbs.extend(tail.concat());
        let mut c = tlv(SEQUENCE, &tbs);
        c.extend(tlv(SEQUENCE, &[]));
        c.extend(tlv(BIT_STRING, &[0]));
        tlv(SEQUENCE, &c)
    }

    /// A v3 certificate with these extensions (none: no `[3]` at all).
    fn cert(extensions: &[Vec<u8>]) -> Vec<u8> {
        if extensions.is_empty() {
            return cert_with(Some(2), &[]);
        }
        cert_with(
            Some(2),
            &[tlv(EXTENSIONS, &tlv(SEQUENCE, &extensions.concat()))],
        )
    }

    fn extension(oid: &[u8], critical: Option<u8>, value: &[u8]) -> Vec<u8> {
        let mut ext = tlv(OID, oid);
        if let Some(c) = critical {
            ext.extend(tlv(BOOLEAN, &[c]));
        }
        ext.extend(tlv(OCTET_STRING, value));
        tlv(SEQUENCE, &ext)
    }

    fn san(critical: bool, names: &[(u8, &str)]) -> Vec<u8> {
        let names: Vec<u8> = names
            .iter()
            .flat_map(|(t, n)| tlv(*t, n.as_bytes()))
            .collect();
        extension(SAN_OID, critical.then_some(0xff), &tlv(SEQUENCE, &names))
    }

    const BASIC_CONSTRAINTS: &[u8] = &[0x55, 0x1d, 0x13];

    #[test]
    fn uri_sans_are_counted_in_the_one_san_extension() {
        let other = extension(BASIC_CONSTRAINTS, None, &[0x30, 0]);
        let two = cert(&[
            other.clone(),
            san(
                true,
                &[
                    (0x82, "a.example"),
                    (URI_NAME, "spiffe://a/x"),
                    (URI_NAME, "spiffe://a/y"),
                ],
            ),
        ]);
        assert_eq!(
            uri_sans_der(&two),
            Ok(vec!["spiffe://a/x".to_string(), "spiffe://a/y".to_string()])
        );
        assert_eq!(
            uri_sans_der(&cert(std::slice::from_ref(&other))),
            Ok(vec![])
        );
        assert_eq!(uri_sans_der(&cert(&[])), Ok(vec![]));
        // A second subjectAltName extension (each with one URI) is refused, not merged or skipped.
        let dup = cert(&[
            san(false, &[(URI_NAME, "spiffe://a/x")]),
            san(false, &[(URI_NAME, "spiffe://a/y")]),
        ]);
        assert_eq!(uri_sans_der(&dup), Err(CertError::DuplicateSan));
        // Trailing bytes after the certificate, or a URI that is not UTF-8.
        let mut trailing = cert(&[san(false, &[(URI_NAME, "spiffe://a/x")])]);
        trailing.push(0);
        assert_eq!(uri_sans_der(&trailing), Err(CertError::Der));
        let mut raw = cert(&[san(false, &[(URI_NAME, "x")])]);
        let at = raw.iter().rposition(|b| *b == b'x').unwrap();
        raw[at] = 0xff;
        assert_eq!(uri_sans_der(&raw), Err(CertError::Der));
    }

    #[test]
    fn extensions_are_read_strictly() {
        let uri = (URI_NAME, "spiffe://a/x");
        let ok = |exts: &[Vec<u8>]| uri_sans_der(&cert(exts));
        assert_eq!(ok(&[san(true, &[uri])]), Ok(vec![uri.1.to_string()]));
        // Critical FALSE is the default, which DER never encodes; other booleans are not DER.
        let san_value = tlv(SEQUENCE, &tlv(URI_NAME, uri.1.as_bytes()));
        for critical in [0x00, 0x01] {
            let ext = extension(SAN_OID, Some(critical), &san_value);
            assert_eq!(ok(&[ext]), Err(CertError::Der), "critical {critical}");
        }
        // Any extension twice, an empty extension list or SAN, bytes after the names.
        let other = extension(BASIC_CONSTRAINTS, None, &[0x30, 0]);
        assert_eq!(
            ok(&[other.clone(), san(false, &[uri]), other]),
            Err(CertError::Der)
        );
        let empty = cert_with(Some(2), &[tlv(EXTENSIONS, &tlv(SEQUENCE, &[]))]);
        assert_eq!(uri_sans_der(&empty), Err(CertError::Der));
        assert_eq!(ok(&[san(false, &[])]), Err(CertError::Der));
        let mut value = san_value.clone();
        value.push(0);
        assert_eq!(ok(&[extension(SAN_OID, None, &value)]), Err(CertError::Der));
        // GeneralName tags are those of RFC 5280; IA5String names are ASCII.
        assert_eq!(
            ok(&[san(false, &[uri, (0x87, "\x7f\0\0\x01")])]),
            Ok(vec![uri.1.to_string()])
        );
        assert_eq!(ok(&[san(false, &[uri, (0x89, "x")])]), Err(CertError::Der));
        assert_eq!(ok(&[san(false, &[uri, (0x30, "")])]), Err(CertError::Der));
        assert_eq!(
            ok(&[san(false, &[(0x82, "é.example"), uri])]),
            Err(CertError::Der)
        );
        assert_eq!(
            ok(&[san(false, &[(URI_NAME, "spiffe://é/x")])]),
            Err(CertError::Der)
        );
    }

    #[test]
    fn tbs_fields_come_in_order() {
        let exts = tlv(EXTENSIONS, &tlv(SEQUENCE, &san(false, &[(URI_NAME, "u")])));
        let uid = tlv(ISSUER_UID, &[0]);
        assert_eq!(
            uri_sans_der(&cert_with(Some(2), &[uid.clone(), exts.clone()])),
            Ok(vec!["u".to_string()])
        );
        assert_eq!(uri_sans_der(&cert_with(None, &[])), Ok(vec![]));
        assert_eq!(
            uri_sans_der(&cert_with(Some(1), std::slice::from_ref(&uid))),
            Ok(vec![])
        );
        // Extensions need v3, unique IDs v2 or v3; v1 is never encoded (it is the default).
        for (version, tail) in [
            (None, &exts),
            (Some(1), &exts),
            (None, &uid),
            (Some(0), &vec![]),
            (Some(3), &vec![]),
        ] {
            let c = cert_with(version, std::slice::from_ref(tail));
            assert_eq!(uri_sans_der(&c), Err(CertError::Der), "{version:?}");
        }
        // Fields out of order, a field too many, or something after the extensions.
        let after = tlv(SEQUENCE, &[]);
        for tail in [
            vec![exts.clone(), uid.clone()],
            vec![after.clone()],
            vec![exts.clone(), after],
        ] {
            assert_eq!(
                uri_sans_der(&cert_with(Some(2), &tail)),
                Err(CertError::Der)
            );
        }
        // A signature that is not a BIT STRING, or missing.
        let good = cert(&[]);
        let mut bad = good.clone();
        let at = bad.len() - 3;
        assert_eq!(bad[at], BIT_STRING);
        bad[at] = OCTET_STRING;
        assert_eq!(uri_sans_der(&bad), Err(CertError::Der));
        let (inner, _) = element(&good, SEQUENCE).unwrap();
        let truncated = tlv(SEQUENCE, &inner[..inner.len() - 3]);
        assert_eq!(uri_sans_der(&truncated), Err(CertError::Der));
    }

    /// What the fuzz target found x509-parser accepting (it compares tag numbers only, reads
    /// the Certificate's first three fields only, and parses the rest of the TBSCertificate
    /// as the extensions whatever `[3]`'s length says): the walk refuses each.
    #[test]
    fn what_x509_parser_lets_through_is_refused() {
        let list = tlv(SEQUENCE, &san(false, &[(URI_NAME, "u")]));
        let good = cert_with(Some(2), &[tlv(EXTENSIONS, &list)]);
        assert_eq!(uri_sans_der(&good), Ok(vec!["u".to_string()]));
        // The TBSCertificate tagged [APPLICATION 16] (0x70) rather than SEQUENCE (0x30).
        let mut application = good.clone();
        assert_eq!(application[2], SEQUENCE);
        application[2] = 0x70;
        assert_eq!(uri_sans_der(&application), Err(CertError::Der));
        // Bytes after the signature, inside the Certificate.
        let (inner, _) = element(&good, SEQUENCE).unwrap();
        let after = tlv(SEQUENCE, &[inner, &[0x05, 0x00]].concat());
        assert_eq!(uri_sans_der(&after), Err(CertError::Der));
        // [3] one byte shorter, or longer, than the extension list it holds.
        let short = [&[EXTENSIONS, list.len() as u8 - 1][..], &list].concat();
        let long = [&[EXTENSIONS, list.len() as u8 + 1][..], &list, &[0]].concat();
        for tail in [short, long] {
            assert_eq!(
                uri_sans_der(&cert_with(Some(2), &[tail])),
                Err(CertError::Der)
            );
        }
    }

    #[test]
    fn lengths_are_checked() {
        assert_eq!(any_element(&[0x30, 0x03, 1, 2]), Err(CertError::Der));
        assert_eq!(any_element(&[0x30, 0x80]), Err(CertError::Der));
        assert_eq!(any_element(&[0x1f, 0x01, 0x01]), Err(CertError::Der));
        assert_eq!(
            any_element(&[0x30, 0x85, 0, 0, 0, 0, 1]),
            Err(CertError::Der)
        );
        // DER lengths take the shortest form: no long form below 128, no leading zero.
        assert_eq!(any_element(&[0x30, 0x81, 0x01, 7]), Err(CertError::Der));
        let mut long = vec![0x30, 0x82, 0x00, 0x80];
        long.extend([0; 0x80]);
        assert_eq!(any_element(&long), Err(CertError::Der));
        let mut long = vec![0x30, 0x81, 0x80];
        long.extend([7; 0x80]);
        assert_eq!(any_element(&long), Ok((0x30, &[7u8; 0x80][..], &[][..])));
        assert_eq!(uri_sans_der(&[]), Err(CertError::Der));
    }
}
