//! Checkpoints: a chain's head (`chain`, `seq`, the digest of record `seq`) at a `time`,
//! signed with Ed25519 when the VM has a key. The signed bytes are the checkpoint's RFC 8785
//! canonical bytes without `sig`: `{"chain":…,"head":…,"key":…,"seq":…,"time":…}`.

use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};
use serde_json::Value;

use crate::base64;
use crate::canonical_json::{canonicalize, Digest};
use crate::jsonw::{push_int, push_opt_str, push_str};

use super::{hex, Chain};

/// The prefix of a checkpoint's log line (its JSON object follows, to the end of the line).
pub const CHECKPOINT_PREFIX: &str = "mcp-access checkpoint ";

/// The environment variable that holds the VM's signing key: the 32-byte Ed25519 private key
/// (seed) in standard Base64. Envoy passes it with `vm_config.environment_variables`.
pub const KEY_ENV: &str = "MCP_ACCESS_RECEIPT_KEY";

/// A chain's head, vouched for at `time`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub chain: String,
    /// The last record's `seq` (0: none yet).
    pub seq: u64,
    /// `sha256:<hex>` of record `seq` (of the configuration when `seq` is 0).
    pub head: String,
    /// Nanoseconds since the Unix epoch.
    pub time: u64,
    /// The signing key's id ([`key_id`]), None when the VM has no key.
    pub key: Option<String>,
    /// The Ed25519 signature in standard Base64, None when the VM has no key.
    pub sig: Option<String>,
}

/// A key's id: the first 16 hex digits of SHA-256 of its 32 public-key bytes.
pub fn key_id(public: &VerifyingKey) -> String {
    let digest = Digest::of(public.as_bytes());
    hex(digest.0.get(..8).unwrap_or_default())
}

/// Why a key cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyError(pub String);

impl std::fmt::Display for KeyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// 32 bytes in standard Base64 (surrounding whitespace ignored).
fn key_bytes(text: &str, what: &str) -> Result<[u8; 32], KeyError> {
    let bytes = base64::decode(text.trim().as_bytes())
        .ok_or_else(|| KeyError(format!("{what} is not standard padded Base64")))?;
    <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| {
        KeyError(format!(
            "{what} holds {} bytes, not the 32 of an Ed25519 key",
            bytes.len()
        ))
    })
}

/// The VM's signing key.
pub struct Signer {
    key: SigningKey,
    id: String,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Signer {{ id: {} }}", self.id)
    }
}

impl Signer {
    /// The key of [`KEY_ENV`]'s value: 32 bytes in standard Base64.
    pub fn from_base64(text: &str) -> Result<Signer, KeyError> {
        let key = SigningKey::from_bytes(&key_bytes(text, KEY_ENV)?);
        let id = key_id(&key.verifying_key());
        Ok(Signer { key, id })
    }

    /// The public key, in standard Base64 (what `audit verify --public-key` reads).
    pub fn public_base64(&self) -> String {
        base64::encode(self.key.verifying_key().as_bytes())
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// A checkpoint of `chain`'s head at `time` (ns), signed; the chain is then checked.
    pub fn checkpoint(signer: Option<&Signer>, chain: &mut Chain, time: u64) -> Checkpoint {
        let (seq, head) = chain.head();
        let mut c = Checkpoint {
            chain: chain.id().to_string(),
            seq,
            head: head.to_string(),
            time,
            key: signer.map(|s| s.id.clone()),
            sig: None,
        };
        if let Some(s) = signer {
            let sig = s.key.sign(c.signed_text().as_bytes());
            c.sig = Some(base64::encode(&sig.to_bytes()));
        }
        chain.checked();
        c
    }
}

/// A public key that checks checkpoints.
#[derive(Debug, Clone)]
pub struct Verifier {
    key: VerifyingKey,
    id: String,
}

impl Verifier {
    /// A public key: 32 bytes in standard Base64.
    pub fn from_base64(text: &str) -> Result<Verifier, KeyError> {
        let key = VerifyingKey::from_bytes(&key_bytes(text, "the public key")?)
            .map_err(|_| KeyError("the public key is not a point of Ed25519".into()))?;
        let id = key_id(&key);
        Ok(Verifier { key, id })
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// Whether `c` carries this key's signature of its fields.
    pub fn verifies(&self, c: &Checkpoint) -> bool {
        let Some(sig) = c.sig.as_deref().and_then(|s| base64::decode(s.as_bytes())) else {
            return false;
        };
        let Ok(sig) = Signature::from_slice(&sig) else {
            return false;
        };
        c.key.as_deref() == Some(self.id.as_str())
            && self
                .key
                .verify_strict(c.signed_text().as_bytes(), &sig)
                .is_ok()
    }
}

impl Checkpoint {
    /// The canonical bytes that are signed: every field but `sig`.
    fn signed_text(&self) -> String {
        let mut out = String::with_capacity(200);
        out.push_str("{\"chain\":");
        push_str(&mut out, &self.chain);
        out.push_str(",\"head\":");
        push_str(&mut out, &self.head);
        out.push_str(",\"key\":");
        push_opt_str(&mut out, self.key.as_deref());
        out.push_str(",\"seq\":");
        push_int(&mut out, i64::try_from(self.seq).unwrap_or(i64::MAX));
        out.push_str(",\"time\":");
        push_int(&mut out, i64::try_from(self.time).unwrap_or(i64::MAX));
        out.push('}');
        // serde_json's escaping is RFC 8785's but for the order of non-ASCII member names
        // (there are none here); canonicalized all the same, so what is signed is exactly JCS.
        match canonicalize(out.as_bytes(), 2) {
            Ok(c) => String::from_utf8(c).unwrap_or(out),
            Err(_) => out,
        }
    }

    /// Its JSON: the log line after [`CHECKPOINT_PREFIX`].
    pub fn to_json(&self) -> String {
        let mut out = self.signed_text();
        out.pop();
        out.push_str(",\"sig\":");
        push_opt_str(&mut out, self.sig.as_deref());
        out.push('}');
        out
    }

    /// A checkpoint read back from its JSON (untrusted: every field is checked for its type).
    pub fn parse(json: &str) -> Result<Checkpoint, String> {
        let v: Value = serde_json::from_str(json)
            .map_err(|e| format!("the checkpoint does not parse: {e}"))?;
        let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        let need = |k: &str| text(k).ok_or_else(|| format!("the checkpoint has no string `{k}`"));
        let int = |k: &str| {
            v.get(k)
                .and_then(Value::as_u64)
                .ok_or_else(|| format!("the checkpoint has no whole number `{k}`"))
        };
        Ok(Checkpoint {
            chain: need("chain")?,
            seq: int("seq")?,
            head: need("head")?,
            time: int("time")?,
            key: text("key"),
            sig: text("sig"),
        })
    }

    /// The checkpoint of a log line holding [`CHECKPOINT_PREFIX`]; None for other lines.
    pub fn of_line(line: &str) -> Option<Result<Checkpoint, String>> {
        let at = line.find(CHECKPOINT_PREFIX)?;
        let json = line.get(at + CHECKPOINT_PREFIX.len()..).unwrap_or_default();
        Some(Checkpoint::parse(json.trim_end()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED: &str = "nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A=";

    #[test]
    fn a_signed_checkpoint_verifies_and_a_changed_one_does_not() {
        let signer = Signer::from_base64(SEED).unwrap();
        let verifier = Verifier::from_base64(&signer.public_base64()).unwrap();
        let mut chain = Chain::new("c".into(), Digest::of(b"{}"));
        chain.seal(|l| crate::receipts::Unsealed {
            text: format!("{{\"seq\":{}}}", l.seq),
            canonical: true,
        });
        let c = Signer::checkpoint(Some(&signer), &mut chain, 7);
        assert_eq!(chain.unchecked(), 0);
        let line = c.to_json();
        assert!(
            line.starts_with("{\"chain\":\"c\",\"head\":\"sha256:"),
            "{line}"
        );
        let back = Checkpoint::parse(&line).unwrap();
        assert_eq!(back, c);
        assert!(verifier.verifies(&back));
        for forged in [
            Checkpoint {
                seq: 2,
                ..c.clone()
            },
            Checkpoint {
                time: 8,
                ..c.clone()
            },
            Checkpoint {
                chain: "d".into(),
                ..c.clone()
            },
            Checkpoint {
                head: Digest::of(b"x").to_text(),
                ..c.clone()
            },
            Checkpoint {
                sig: None,
                ..c.clone()
            },
            Checkpoint {
                sig: Some("AAAA".into()),
                ..c.clone()
            },
        ] {
            assert!(!verifier.verifies(&forged), "{forged:?}");
        }
        // Another key's signature does not verify.
        let other = Signer::from_base64(&base64::encode(&[7; 32])).unwrap();
        let theirs = Signer::checkpoint(Some(&other), &mut chain, 7);
        assert!(!verifier.verifies(&theirs));
        // Unsigned: written, never verified.
        let unsigned = Signer::checkpoint(None, &mut chain, 9);
        assert_eq!(
            (unsigned.key.as_deref(), unsigned.sig.as_deref()),
            (None, None)
        );
        assert!(!verifier.verifies(&unsigned));
    }

    #[test]
    fn keys_are_read_strictly() {
        assert!(Signer::from_base64(SEED).is_ok());
        for bad in ["", "not base64", "AAAA", &base64::encode(&[1; 64])] {
            let e = Signer::from_base64(bad).unwrap_err();
            assert!(e.0.contains(KEY_ENV), "{e}");
        }
    }

    #[test]
    fn the_signature_is_rfc_8032s() {
        // RFC 8032 §7.1, TEST 1: the empty message.
        let seed = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";
        let bytes: Vec<u8> = (0..32)
            .map(|i| u8::from_str_radix(&seed[2 * i..2 * i + 2], 16).unwrap())
            .collect();
        let signer = Signer::from_base64(&base64::encode(&bytes)).unwrap();
        let sig = signer.key.sign(b"");
        assert_eq!(
            hex(&sig.to_bytes()),
            "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
        );
    }
}
