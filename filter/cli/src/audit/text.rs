//! The report of `audit verify` as text.

use std::fmt::Write as _;

use super::{ChainReport, Report};

fn seqs(ranges: &[(u64, u64)]) -> String {
    ranges
        .iter()
        .map(|(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn chain(out: &mut String, c: &ChainReport, r: &Report) {
    let signed = r.signatures_checked;
    let _ = writeln!(
        out,
        "chain {}: {} records, seq {}-{}, {} checkpoints",
        c.chain, c.records, c.first_seq, c.last_seq, c.checkpoints
    );
    match &c.configuration {
        Some(k) if r.unknown_configuration(c) => {
            let _ = writeln!(
                out,
                "  UNKNOWN CONFIGURATION {} (seq 1 at {}): no --bundle given has this digest",
                k.digest, k.at
            );
        }
        Some(k) => {
            let file = k.file.as_deref().map(|f| format!(" ({f})"));
            let _ = writeln!(
                out,
                "  configuration {}{}",
                k.digest,
                file.unwrap_or_default()
            );
        }
        None => {}
    }
    if !c.gaps.is_empty() {
        let _ = writeln!(out, "  MISSING seq {}", seqs(&c.gaps));
    }
    for f in &c.altered {
        let _ = writeln!(out, "  ALTERED seq {} at {}: {}", f.seq, f.at, f.what);
    }
    for f in &c.bad_checkpoints {
        let _ = writeln!(
            out,
            "  BAD CHECKPOINT (seq {}) at {}: {}",
            f.seq, f.at, f.what
        );
    }
    let vouched = if signed {
        "signed"
    } else {
        "checkpointed (signatures not checked)"
    };
    if !c.verified.is_empty() {
        let _ = writeln!(out, "  {vouched}: seq {}", seqs(&c.verified));
    }
    if let Some((a, b)) = c.unsigned_tail {
        let _ = writeln!(
            out,
            "  after the last checkpoint (no checkpoint vouches for them yet): seq {}",
            seqs(&[(a, b)])
        );
    }
}

/// The report: one paragraph per chain, then what could not be read, then the verdict.
pub fn to_text(r: &Report) -> String {
    let mut out = String::new();
    for c in &r.chains {
        chain(&mut out, c, r);
    }
    if !r.unchained.is_empty() {
        let _ = writeln!(
            out,
            "{} records carry no chain (a filter without receipts, or the fields removed): {}",
            r.unchained.len(),
            r.unchained.join(", ")
        );
    }
    for u in &r.unreadable {
        let _ = writeln!(out, "UNREADABLE {u}");
    }
    let verdict = if r.damaged() {
        "NOT VERIFIED: records are missing, altered or unreadable, a checkpoint is bad, or a chain began with no given bundle"
    } else if !r.signatures_checked {
        "chains intact (signatures not checked: no --public-key)"
    } else if r.unsigned() {
        "intact, but records after the last checkpoint are not signed yet"
    } else {
        "verified: every record is covered by a signed checkpoint"
    };
    let _ = writeln!(out, "{verdict}");
    out
}
