//! `mcp-access audit`: decision records checked as receipts (docs/audit.md). `verify` reads
//! logs (rotated, out of order, several workers and Envoys interleaved), rebuilds each chain
//! from its records' `chain`, `seq` and `prev`, and checks the checkpoints' heads and
//! signatures; what a verifier can and cannot tell is in docs/audit.md.

use std::collections::{BTreeMap, BTreeSet};

use mcp_access_engine::flow::records::{written, Unreadable, Written};
use mcp_access_engine::receipts::{digest, Checkpoint, Verifier, CHECKPOINT_PREFIX};
use serde::Serialize;
use serde_json::Value;

pub mod keys;
mod text;

pub use text::to_text;

/// One log: its name (`file`, `-`) and bytes.
pub struct Log<'a> {
    pub name: &'a str,
    pub bytes: &'a [u8],
}

/// What `verify` found.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub chains: Vec<ChainReport>,
    /// Records that carry no chain (a filter without receipts, or the fields removed).
    pub unchained: Vec<String>,
    /// Lines that look like records or checkpoints but cannot be read (`file:line: why`).
    pub unreadable: Vec<String>,
    /// Whether signatures were checked (a public key was given).
    pub signatures_checked: bool,
    /// Whether each chain's configuration was looked for among given bundles
    /// ([`Report::name_configurations`]).
    pub configurations_checked: bool,
}

/// One chain, rebuilt.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChainReport {
    pub chain: String,
    /// Distinct records read (copies of one record, e.g. in the access log and Envoy's log,
    /// count once).
    pub records: usize,
    pub first_seq: u64,
    pub last_seq: u64,
    /// Missing seq numbers, as ranges (first, last).
    pub gaps: Vec<(u64, u64)>,
    /// Records that are not what the filter wrote: where and why.
    pub altered: Vec<Finding>,
    /// Checkpoints that do not verify: a signature that is not the key's, a head that is not
    /// the record's.
    pub bad_checkpoints: Vec<Finding>,
    /// Checkpoints read (valid or not).
    pub checkpoints: usize,
    /// seq numbers of records a valid checkpoint vouches for, as ranges.
    pub verified: Vec<(u64, u64)>,
    /// Their digests (what `replay --verified` keeps).
    #[serde(skip)]
    pub verified_digests: BTreeSet<String>,
    /// Records after the last valid checkpoint (none vouches for them yet).
    pub unsigned_tail: Option<(u64, u64)>,
    /// The configuration the chain began with: seq 1's `prev` (None without seq 1).
    pub configuration: Option<Configuration>,
}

/// A chain's configuration: its digest, the record that names it, and the bundle file that
/// has that digest (None when none given has it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Configuration {
    pub digest: String,
    pub at: String,
    pub file: Option<String>,
}

/// A finding: where (`file:line`), the seq it concerns, and what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub at: String,
    pub seq: u64,
    pub what: String,
}

impl Report {
    /// Whether every record verifies: no damage, no unreadable line, no unchained record, and
    /// (when signatures were checked) no record after its chain's last checkpoint.
    pub fn damaged(&self) -> bool {
        !self.unreadable.is_empty()
            || !self.unchained.is_empty()
            || self.chains.iter().any(|c| {
                !c.gaps.is_empty() || !c.altered.is_empty() || !c.bad_checkpoints.is_empty()
            })
            || self.chains.iter().any(|c| self.unknown_configuration(c))
    }

    /// Whether bundles were given and none is `c`'s configuration.
    pub fn unknown_configuration(&self, c: &ChainReport) -> bool {
        self.configurations_checked && c.configuration.as_ref().is_some_and(|k| k.file.is_none())
    }

    /// Names each chain's configuration by the bundle (`(file, bytes)`: the plugin
    /// configuration, as `mcp-access compile` writes it) whose digest it is; a chain that
    /// began with none of them makes the report damaged.
    pub fn name_configurations(&mut self, bundles: &[(String, Vec<u8>)]) {
        let digests: Vec<(String, &String)> = bundles
            .iter()
            .map(|(file, bytes)| (digest(bytes).to_text(), file))
            .collect();
        for k in self
            .chains
            .iter_mut()
            .filter_map(|c| c.configuration.as_mut())
        {
            k.file = digests
                .iter()
                .find(|(d, _)| *d == k.digest)
                .map(|(_, f)| f.to_string());
        }
        self.configurations_checked = true;
    }

    /// Whether some chain has records no valid checkpoint vouches for.
    pub fn unsigned(&self) -> bool {
        self.chains.iter().any(|c| c.unsigned_tail.is_some())
    }
}

/// A record read: where, its digest, and its chain fields.
#[derive(Debug, Clone)]
struct Read {
    at: String,
    digest: String,
    prev: Option<String>,
    value: Value,
}

/// The chains' records (by chain, by seq: each distinct copy) and checkpoints of `logs`.
#[derive(Default)]
struct Gathered {
    chains: BTreeMap<String, BTreeMap<u64, Vec<Read>>>,
    checkpoints: BTreeMap<String, Vec<(String, Checkpoint)>>,
    unchained: Vec<String>,
    unreadable: Vec<String>,
}

fn gather(logs: &[Log<'_>]) -> Gathered {
    let mut g = Gathered::default();
    for log in logs {
        let (found, bad) = written(log.bytes, log.name);
        let unreadable = |u: Unreadable| format!("{}: {}", u.at, u.why);
        g.unreadable.extend(bad.into_iter().map(unreadable));
        for w in found {
            add_record(&mut g, w);
        }
        let (found, bad) = checkpoints(log.bytes, log.name);
        g.unreadable.extend(bad.into_iter().map(unreadable));
        for (at, c) in found {
            g.checkpoints
                .entry(c.chain.clone())
                .or_default()
                .push((at, c));
        }
    }
    g
}

fn add_record(g: &mut Gathered, w: Written) {
    let Ok(value) = serde_json::from_str::<Value>(&w.text) else {
        g.unreadable
            .push(format!("{}: the decision record does not parse", w.at));
        return;
    };
    let chain = value.get("chain").and_then(Value::as_str);
    let seq = value.get("seq").and_then(Value::as_u64);
    let (Some(chain), Some(seq)) = (chain, seq.filter(|s| *s > 0)) else {
        g.unchained.push(w.at);
        return;
    };
    let read = Read {
        digest: digest(w.text.as_bytes()).to_text(),
        prev: value
            .get("prev")
            .and_then(Value::as_str)
            .map(str::to_string),
        at: w.at,
        value: value.clone(),
    };
    let copies = g
        .chains
        .entry(chain.to_string())
        .or_default()
        .entry(seq)
        .or_default();
    // The same record in two logs (the access log and Envoy's log) is one record.
    if !copies.iter().any(|c| c.digest == read.digest) {
        copies.push(read);
    }
}

/// The checkpoints of one log: lines holding [`CHECKPOINT_PREFIX`] (as they are, or as a
/// string member of a JSON log line).
pub fn checkpoints(log: &[u8], name: &str) -> (Vec<(String, Checkpoint)>, Vec<Unreadable>) {
    let (mut out, mut bad) = (Vec::new(), Vec::new());
    let prefix = CHECKPOINT_PREFIX.as_bytes();
    for (i, raw) in log.split(|b| *b == b'\n').enumerate() {
        if !raw.windows(prefix.len()).any(|w| w == prefix) {
            continue;
        }
        let at = format!("{name}:{}", i + 1);
        let Ok(line) = std::str::from_utf8(raw) else {
            bad.push(Unreadable {
                at,
                why: "not UTF-8".into(),
            });
            continue;
        };
        let line = line.trim();
        let message = match serde_json::from_str::<Value>(line) {
            Ok(Value::Object(o)) => o
                .values()
                .filter_map(Value::as_str)
                .find(|s| s.contains(CHECKPOINT_PREFIX))
                .map(str::to_string),
            _ => Some(line.to_string()),
        };
        match message.as_deref().and_then(Checkpoint::of_line) {
            Some(Ok(c)) => out.push((at, c)),
            Some(Err(why)) => bad.push(Unreadable { at, why }),
            None => {}
        }
    }
    (out, bad)
}

/// Verifies the records and checkpoints of `logs`; signatures with `key` (without one, only
/// links, gaps and heads are checked).
pub fn verify(logs: &[Log<'_>], key: Option<&Verifier>) -> Report {
    let g = gather(logs);
    let mut report = Report {
        unchained: g.unchained,
        unreadable: g.unreadable,
        signatures_checked: key.is_some(),
        ..Report::default()
    };
    let names: BTreeSet<&String> = g.chains.keys().chain(g.checkpoints.keys()).collect();
    let empty = BTreeMap::new();
    for name in names {
        let records = g.chains.get(name).unwrap_or(&empty);
        let checkpoints = g.checkpoints.get(name).map_or(&[][..], Vec::as_slice);
        report
            .chains
            .push(verify_chain(name, records, checkpoints, key));
    }
    report
}

/// Whether a record (its JSON text as the log holds it) is one `report` verified: its digest
/// is that of a record a valid checkpoint vouches for.
pub fn is_verified(report: &Report, text: &str) -> bool {
    let d = digest(text.as_bytes()).to_text();
    report
        .chains
        .iter()
        .any(|c| c.verified_digests.contains(&d))
}

mod chain;
use chain::verify_chain;

#[cfg(test)]
mod tests;
