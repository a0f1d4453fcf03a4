//! One chain rebuilt from its records and checkpoints.

use std::collections::{BTreeMap, BTreeSet};

use mcp_access_engine::receipts::{Checkpoint, Verifier};

use super::{ChainReport, Configuration, Finding, Read};

/// Checks one chain: its records by seq (each distinct copy), and its checkpoints.
pub(super) fn verify_chain(
    name: &str,
    records: &BTreeMap<u64, Vec<Read>>,
    checkpoints: &[(String, Checkpoint)],
    key: Option<&Verifier>,
) -> ChainReport {
    let mut r = ChainReport {
        chain: name.to_string(),
        records: records.values().map(Vec::len).sum(),
        first_seq: records.keys().next().copied().unwrap_or(0),
        last_seq: records.keys().next_back().copied().unwrap_or(0),
        checkpoints: checkpoints.len(),
        ..ChainReport::default()
    };
    // Checkpoints whose signature verifies (every one read when no key is given).
    let mut anchors: Vec<&Checkpoint> = Vec::new();
    for (at, c) in checkpoints {
        match key {
            Some(k) if !k.verifies(c) => r.bad_checkpoints.push(Finding {
                at: at.clone(),
                seq: c.seq,
                what: match (&c.sig, &c.key) {
                    (None, _) => "unsigned (the VM had no key)".into(),
                    (Some(_), Some(id)) if id != k.id() => {
                        format!("signed with key {id}, not {}", k.id())
                    }
                    _ => "its signature does not verify (forged or edited)".into(),
                },
            }),
            _ => anchors.push(c),
        }
    }
    let heads: BTreeMap<u64, BTreeSet<&str>> = anchors.iter().fold(BTreeMap::new(), |mut m, c| {
        m.entry(c.seq).or_default().insert(c.head.as_str());
        m
    });
    let accepted = accept_copies(records, &heads, &mut r.altered);
    check_links(&accepted, &mut r.altered);
    r.configuration = accepted.get(&1).and_then(|rec| {
        Some(Configuration {
            digest: rec.prev.clone()?,
            at: rec.at.clone(),
            file: None,
        })
    });
    for (at, c) in checkpoints {
        if !anchors.iter().any(|a| std::ptr::eq(*a, c)) {
            continue;
        }
        match accepted.get(&c.seq) {
            Some(rec) if rec.digest != c.head => r.bad_checkpoints.push(Finding {
                at: at.clone(),
                seq: c.seq,
                what: format!(
                    "its head is not the digest of seq {} ({}): that record was changed, or the checkpoint",
                    c.seq, rec.at
                ),
            }),
            _ => {}
        }
    }
    let end = anchors
        .iter()
        .map(|c| c.seq)
        .chain([r.last_seq])
        .max()
        .unwrap_or(0);
    r.gaps = ranges((1..=end).filter(|s| !records.contains_key(s)));
    let mut verified = BTreeSet::new();
    for c in &anchors {
        let (mut s, mut expected) = (c.seq, c.head.as_str());
        while let Some(rec) = accepted.get(&s).filter(|rec| rec.digest == expected) {
            verified.insert(s);
            r.verified_digests.insert(rec.digest.clone());
            match rec.prev.as_deref() {
                Some(p) if s > 1 => (s, expected) = (s - 1, p),
                _ => break,
            }
        }
    }
    r.verified = ranges(verified.iter().copied());
    let signed_to = anchors.iter().map(|c| c.seq).max().unwrap_or(0);
    if r.last_seq > signed_to {
        r.unsigned_tail = Some((signed_to.max(r.first_seq.saturating_sub(1)) + 1, r.last_seq));
    }
    r
}

/// Of several copies of one seq, the one the chain vouches for (its digest is a
/// checkpoint's head, or the next record's `prev`; else the first read); the others are
/// altered, with the fields they differ in.
fn accept_copies<'a>(
    records: &'a BTreeMap<u64, Vec<Read>>,
    heads: &BTreeMap<u64, BTreeSet<&str>>,
    altered: &mut Vec<Finding>,
) -> BTreeMap<u64, &'a Read> {
    let mut accepted = BTreeMap::new();
    for (&seq, copies) in records {
        let next_prevs: BTreeSet<&str> = records
            .get(&(seq + 1))
            .into_iter()
            .flatten()
            .filter_map(|r| r.prev.as_deref())
            .collect();
        let vouched = |r: &&Read| {
            heads
                .get(&seq)
                .is_some_and(|h| h.contains(r.digest.as_str()))
                || next_prevs.contains(r.digest.as_str())
        };
        let Some(chosen) = copies.iter().find(vouched).or(copies.first()) else {
            continue;
        };
        for other in copies.iter().filter(|c| !std::ptr::eq(*c, chosen)) {
            altered.push(Finding {
                at: other.at.clone(),
                seq,
                what: format!(
                    "differs from the copy at {} in {}",
                    chosen.at,
                    differing_fields(&chosen.value, &other.value)
                ),
            });
        }
        accepted.insert(seq, chosen);
    }
    accepted
}

/// Each record's `prev` against the digest of the record before it.
fn check_links(accepted: &BTreeMap<u64, &Read>, altered: &mut Vec<Finding>) {
    for (&seq, rec) in accepted {
        let Some(before) = seq.checked_sub(1).and_then(|s| accepted.get(&s)) else {
            continue;
        };
        if rec.prev.as_deref() != Some(before.digest.as_str()) {
            altered.push(Finding {
                at: before.at.clone(),
                seq: seq - 1,
                what: format!(
                    "its digest is not the `prev` of seq {seq} ({}): a field of it was changed (or that record's `prev`)",
                    rec.at
                ),
            });
        }
    }
}

/// The top-level fields two records differ in, as `` `a`, `b` ``.
fn differing_fields(a: &serde_json::Value, b: &serde_json::Value) -> String {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return "their whole text".into();
    };
    let names: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    let differ: Vec<String> = names
        .into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| format!("`{k}`"))
        .collect();
    if differ.is_empty() {
        "the spelling of a value (the same JSON, other bytes)".into()
    } else {
        differ.join(", ")
    }
}

/// Sorted numbers as ranges of consecutive ones.
fn ranges(numbers: impl Iterator<Item = u64>) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for n in numbers {
        match out.last_mut() {
            Some((_, end)) if *end + 1 == n => *end = n,
            _ => out.push((n, n)),
        }
    }
    out
}
