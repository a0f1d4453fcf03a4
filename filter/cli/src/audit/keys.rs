//! Receipt keys as files: a private key (the 32-byte Ed25519 seed in standard Base64, the
//! value of `MCP_ACCESS_RECEIPT_KEY`) and its public key (32 bytes in standard Base64, or an
//! `openssl pkey -pubout` PEM).

use mcp_access_engine::receipts::{KeyError, Signer, Verifier};

/// The DER prefix of an Ed25519 SubjectPublicKeyInfo (RFC 8410 §4): the 32 key bytes follow.
const SPKI_ED25519: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];

/// A public key file's text: Base64 of the 32 bytes, or a PEM `PUBLIC KEY` of Ed25519.
pub fn public_key(text: &str) -> Result<Verifier, KeyError> {
    let text = text.trim();
    let Some(body) = text
        .strip_prefix("-----BEGIN PUBLIC KEY-----")
        .and_then(|t| t.strip_suffix("-----END PUBLIC KEY-----"))
    else {
        return Verifier::from_base64(text);
    };
    let b64: String = body.split_whitespace().collect();
    let der = decode(&b64).ok_or_else(|| KeyError("the PEM body is not Base64".into()))?;
    match der.strip_prefix(&SPKI_ED25519[..]) {
        Some(key) if key.len() == 32 => Verifier::from_base64(&encode(key)),
        _ => Err(KeyError(
            "the PEM public key is not an Ed25519 key (RFC 8410)".into(),
        )),
    }
}

/// A new key pair: (private key file text, public key file text).
pub fn generate() -> Result<(String, String), KeyError> {
    let mut seed = [0u8; 32];
    getrandom::getrandom(&mut seed).map_err(|e| KeyError(format!("no randomness: {e}")))?;
    let private = encode(&seed);
    let public = Signer::from_base64(&private)?.public_base64();
    Ok((format!("{private}\n"), format!("{public}\n")))
}

fn encode(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn decode(text: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}
