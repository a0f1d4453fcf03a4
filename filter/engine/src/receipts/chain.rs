//! One chain of records: its id, the last `seq` written and the digest of that record.

use std::cell::RefCell;

use crate::canonical_json::Digest;

use super::Unsealed;

/// What a record carries of its chain: the record's `chain`, `seq` and `prev`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link<'a> {
    pub chain: &'a str,
    pub seq: u64,
    /// `sha256:<hex>` of the previous record's canonical bytes (of the configuration for the
    /// first record).
    pub prev: &'a str,
}

/// A chain's state: the records written so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    id: String,
    /// The last record's `seq` (0 before the first).
    seq: u64,
    /// The last record's digest (the configuration's before the first), as `sha256:<hex>`.
    head: String,
    /// `seq` of the last checkpoint written (0: none).
    checkpointed: u64,
}

impl Chain {
    /// A chain named `id` (random, unique per VM and configuration) for the configuration of
    /// digest `config`.
    pub fn new(id: String, config: Digest) -> Chain {
        Chain {
            id,
            seq: 0,
            head: config.to_text(),
            checkpointed: 0,
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// The last record's `seq` and digest (`seq` 0 and the configuration's digest before any).
    pub fn head(&self) -> (u64, &str) {
        (self.seq, &self.head)
    }

    /// The next record, as `write` writes it with its link; the chain moves on to it.
    pub fn seal(&mut self, write: impl FnOnce(Link<'_>) -> Unsealed) -> String {
        let seq = self.seq.saturating_add(1);
        let record = write(Link {
            chain: &self.id,
            seq,
            prev: &self.head,
        });
        // The old head's buffer is reused: no allocation per record.
        self.head.clear();
        record.digest().push_text(&mut self.head);
        self.seq = seq;
        record.text
    }

    /// Records written since the last checkpoint.
    pub fn unchecked(&self) -> u64 {
        self.seq.saturating_sub(self.checkpointed)
    }

    /// A checkpoint now covers every record written.
    pub fn checked(&mut self) {
        self.checkpointed = self.seq;
    }
}

/// The chain a VM writes for one configuration: made with the engine, shared by its streams
/// (a VM is one thread).
#[derive(Debug)]
pub struct ChainStore(RefCell<Chain>);

impl ChainStore {
    pub fn new(chain: Chain) -> ChainStore {
        ChainStore(RefCell::new(chain))
    }

    /// [`Chain::seal`] on the store's chain.
    pub fn seal(&self, write: impl FnOnce(Link<'_>) -> Unsealed) -> String {
        self.0.borrow_mut().seal(write)
    }

    /// Runs `f` on the chain.
    pub fn with<T>(&self, f: impl FnOnce(&mut Chain) -> T) -> T {
        f(&mut self.0.borrow_mut())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receipts::digest;

    fn record(link: Link<'_>) -> Unsealed {
        Unsealed {
            text: format!(
                r#"{{"chain":"{}", "prev":"{}","seq":{}}}"#,
                link.chain, link.prev, link.seq
            ),
            canonical: false,
        }
    }

    #[test]
    fn each_record_names_the_digest_of_the_one_before() {
        let config = Digest::of(b"{}");
        let mut chain = Chain::new("c1".into(), config);
        let first = chain.seal(record);
        assert_eq!(
            first,
            format!(r#"{{"chain":"c1", "prev":"{}","seq":1}}"#, config.to_text())
        );
        let second = chain.seal(record);
        let expected = format!(
            r#"{{"chain":"c1", "prev":"{}","seq":2}}"#,
            digest(first.as_bytes()).to_text()
        );
        assert_eq!(second, expected);
        assert_eq!(
            chain.head(),
            (2, digest(second.as_bytes()).to_text().as_str())
        );
        assert_eq!(chain.unchecked(), 2);
        chain.checked();
        assert_eq!(chain.unchecked(), 0);
        chain.seal(record);
        assert_eq!(chain.unchecked(), 1);
    }
}
