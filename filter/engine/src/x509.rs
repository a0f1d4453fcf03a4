//! Just enough X.509 to list the URI SANs of a peer certificate as Envoy hands it over
//! (`connection.peer_certificate`: PEM, possibly percent-encoded). Envoy's
//! `connection.uri_san_peer_certificate` names only the first URI SAN; an X.509-SVID has exactly
//! one, and a certificate with more must give no identity, so the filter counts them itself.
//! Anything unexpected in the encoding is an error (no identity), never a guess.

/// DER tags used here.
const SEQUENCE: u8 = 0x30;
const OID: u8 = 0x06;
const BOOLEAN: u8 = 0x01;
const OCTET_STRING: u8 = 0x04;
/// `[3] EXPLICIT Extensions` in TBSCertificate.
const EXTENSIONS: u8 = 0xa3;
/// `uniformResourceIdentifier [6] IA5String` in GeneralName.
const URI_NAME: u8 = 0x86;
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
pub fn uri_sans_der(der: &[u8]) -> Result<Vec<String>, CertError> {
    let (cert, rest) = element(der, SEQUENCE)?;
    if !rest.is_empty() {
        return Err(CertError::Der);
    }
    let (tbs, _) = element(cert, SEQUENCE)?;
    // version, serial, signature, issuer, validity, subject, spki, then optional [1] [2] [3].
    let mut fields = tbs;
    let mut extensions = None;
    while !fields.is_empty() {
        let (tag, value, rest) = any_element(fields)?;
        if tag == EXTENSIONS {
            extensions = Some(value);
        }
        fields = rest;
    }
    let Some(extensions) = extensions else {
        return Ok(Vec::new());
    };
    let (mut list, rest) = element(extensions, SEQUENCE)?;
    if !rest.is_empty() {
        return Err(CertError::Der);
    }
    let mut san = None;
    while !list.is_empty() {
        let (ext, rest) = element(list, SEQUENCE)?;
        list = rest;
        let (oid, mut ext) = element(ext, OID)?;
        if ext.first() == Some(&BOOLEAN) {
            ext = element(ext, BOOLEAN)?.1;
        }
        let (value, rest) = element(ext, OCTET_STRING)?;
        if !rest.is_empty() {
            return Err(CertError::Der);
        }
        if oid == SAN_OID {
            if san.is_some() {
                return Err(CertError::DuplicateSan);
            }
            san = Some(value);
        }
    }
    let Some(san) = san else {
        return Ok(Vec::new());
    };
    let (mut names, rest) = element(san, SEQUENCE)?;
    if !rest.is_empty() {
        return Err(CertError::Der);
    }
    let mut uris = Vec::new();
    while !names.is_empty() {
        let (tag, value, rest) = any_element(names)?;
        names = rest;
        if tag == URI_NAME {
            let uri = std::str::from_utf8(value).map_err(|_| CertError::Der)?;
            uris.push(uri.to_string());
        }
    }
    Ok(uris)
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

/// One DER element: (tag, contents, what follows). Definite lengths only, up to 4 length bytes.
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
        bytes.iter().fold(0usize, |n, b| (n << 8) | usize::from(*b))
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
    base64_decode(body.get(..end)?)
}

/// Standard base64 with padding; ASCII whitespace between characters is skipped.
fn base64_decode(input: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(input.len() / 4 * 3);
    let (mut acc, mut bits, mut padding) = (0u32, 0u32, 0usize);
    for &c in input {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' => {
                padding += 1;
                continue;
            }
            b' ' | b'\t' | b'\r' | b'\n' => continue,
            _ => return None,
        };
        if padding > 0 {
            return None; // data after padding
        }
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    // Leftover bits must be the zero padding of the last group.
    (padding <= 2 && acc & ((1 << bits) - 1) == 0).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_and_rejects_garbage() {
        assert_eq!(base64_decode(b"aGVsbG8=").as_deref(), Some(&b"hello"[..]));
        assert_eq!(
            base64_decode(b"aGVs\nbG8h").as_deref(),
            Some(&b"hello!"[..])
        );
        assert_eq!(base64_decode(b"aGVsbG8=x"), None);
        assert_eq!(base64_decode(b"aGVs*G8="), None);
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
            n => out.extend([0x82, (n >> 8) as u8, n as u8]),
        }
        out.extend_from_slice(content);
        out
    }

    /// A certificate whose TBS holds a serial, a subject and these extensions.
    fn cert(extensions: &[Vec<u8>]) -> Vec<u8> {
        let mut tbs = tlv(0x02, &[1]);
        tbs.extend(tlv(SEQUENCE, &[]));
        if !extensions.is_empty() {
            tbs.extend(tlv(EXTENSIONS, &tlv(SEQUENCE, &extensions.concat())));
        }
        let mut c = tlv(SEQUENCE, &tbs);
        c.extend(tlv(SEQUENCE, &[]));
        tlv(SEQUENCE, &c)
    }

    fn san(critical: bool, names: &[(u8, &str)]) -> Vec<u8> {
        let names: Vec<u8> = names
            .iter()
            .flat_map(|(t, n)| tlv(*t, n.as_bytes()))
            .collect();
        let mut ext = tlv(OID, SAN_OID);
        if critical {
            ext.extend(tlv(BOOLEAN, &[0xff]));
        }
        ext.extend(tlv(OCTET_STRING, &tlv(SEQUENCE, &names)));
        tlv(SEQUENCE, &ext)
    }

    #[test]
    fn uri_sans_are_counted_in_the_one_san_extension() {
        let other = tlv(
            SEQUENCE,
            &[tlv(OID, &[0x55, 0x1d, 0x13]), tlv(OCTET_STRING, &[0x30, 0])].concat(),
        );
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
    fn lengths_are_checked() {
        assert_eq!(any_element(&[0x30, 0x03, 1, 2]), Err(CertError::Der));
        assert_eq!(any_element(&[0x30, 0x80]), Err(CertError::Der));
        assert_eq!(
            any_element(&[0x30, 0x81, 0x01, 7]),
            Ok((0x30, &[7u8][..], &[][..]))
        );
        assert_eq!(uri_sans_der(&[]), Err(CertError::Der));
    }
}
