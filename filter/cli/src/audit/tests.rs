//! `verify` on logs written as the filter writes them, then damaged every way issue 39 lists.

use mcp_access_engine::canonical_json::Digest;
use mcp_access_engine::flow::records::LOG_PREFIX;
use mcp_access_engine::receipts::{Chain, Link, Signer, Unsealed, Verifier, CHECKPOINT_PREFIX};

use super::*;

const KEY: &str = "nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A=";

fn record(link: Link<'_>, decision: &str) -> String {
    format!(
        r#"{{"backend":"ns/b","caller":"spiffe://x","chain":"{}","decision":"{decision}","method":"tools/call","name":"t{}","prev":"{}","seq":{}}}"#,
        link.chain, link.seq, link.prev, link.seq
    )
}

/// A log of `n` records of chain `id` as decision log lines, with a checkpoint after each
/// `every` (and none after the last ones when `n` is not a multiple).
fn log(id: &str, n: u64, every: u64, signer: Option<&Signer>) -> Vec<String> {
    let mut chain = Chain::new(id.into(), Digest::of(b"{\"config\":1}"));
    let mut lines = Vec::new();
    for i in 1..=n {
        let decision = if i % 3 == 0 { "deny" } else { "allow" };
        // Canonical as written: sealed as the filter seals it, digested without a second pass.
        let r = chain.seal(|l| Unsealed {
            text: record(l, decision),
            canonical: true,
        });
        lines.push(format!("[info] wasm log: {LOG_PREFIX}{r}"));
        if i % every == 0 {
            let c = Signer::checkpoint(signer, &mut chain, 1_000 + i);
            lines.push(format!(
                "[info] wasm log: {CHECKPOINT_PREFIX}{}",
                c.to_json()
            ));
        }
    }
    lines
}

fn run(files: &[(&str, &[String])], key: Option<&Verifier>) -> Report {
    let texts: Vec<(String, String)> = files
        .iter()
        .map(|(n, lines)| (n.to_string(), lines.join("\n") + "\n"))
        .collect();
    let logs: Vec<Log<'_>> = texts
        .iter()
        .map(|(name, text)| Log {
            name,
            bytes: text.as_bytes(),
        })
        .collect();
    verify(&logs, key)
}

fn keys() -> (Signer, Verifier) {
    let s = Signer::from_base64(KEY).unwrap();
    let v = Verifier::from_base64(&s.public_base64()).unwrap();
    (s, v)
}

fn one(r: &Report) -> &ChainReport {
    assert_eq!(r.chains.len(), 1, "{}", to_text(r));
    &r.chains[0]
}

#[test]
fn an_intact_signed_log_verifies() {
    let (s, v) = keys();
    let lines = log("a", 6, 3, Some(&s));
    let r = run(&[("envoy.log", &lines)], Some(&v));
    let c = one(&r);
    assert!(!r.damaged() && !r.unsigned(), "{}", to_text(&r));
    assert_eq!((c.records, c.first_seq, c.last_seq), (6, 1, 6));
    assert_eq!(c.verified, vec![(1, 6)]);
    assert!(to_text(&r).contains("verified: every record"));
    // Every record is verified; a record of another log is not.
    for line in lines.iter().filter(|l| l.contains(LOG_PREFIX)) {
        let text = &line[line.find(LOG_PREFIX).unwrap() + LOG_PREFIX.len()..];
        assert!(is_verified(&r, text));
    }
    assert!(!is_verified(&r, &log("b", 1, 1, Some(&s))[0]));
}

#[test]
fn records_after_the_last_checkpoint_are_an_unsigned_tail() {
    let (s, v) = keys();
    let r = run(&[("e", &log("a", 8, 3, Some(&s)))], Some(&v));
    let c = one(&r);
    assert!(!r.damaged() && r.unsigned(), "{}", to_text(&r));
    assert_eq!(
        (c.verified.clone(), c.unsigned_tail),
        (vec![(1, 6)], Some((7, 8)))
    );
}

#[test]
fn out_of_order_rotated_and_interleaved_logs_verify() {
    let (s, v) = keys();
    let a = log("a", 6, 3, Some(&s));
    let b = log("b", 6, 6, Some(&s));
    // Rotated: a's lines over two files, the newer named first; b's interleaved, reversed.
    let (old, new) = a.split_at(4);
    let mut mixed: Vec<String> = b.iter().rev().cloned().collect();
    mixed.extend(new.iter().cloned());
    // A second copy of some records (the access log's filter_state beside Envoy's log).
    let access: Vec<String> = old
        .iter()
        .filter_map(|l| l.split_once(LOG_PREFIX))
        .map(|(_, r)| serde_json::json!({"filter_state": r, "path": "/mcp"}).to_string())
        .collect();
    let r = run(
        &[
            ("new.log", &mixed),
            ("old.log", old),
            ("access.log", &access),
        ],
        Some(&v),
    );
    assert!(!r.damaged() && !r.unsigned(), "{}", to_text(&r));
    assert_eq!(r.chains.len(), 2);
    assert!(r
        .chains
        .iter()
        .all(|c| c.records == 6 && c.verified == vec![(1, 6)]));
}

#[test]
fn a_deleted_line_is_a_gap() {
    let (s, v) = keys();
    let mut lines = log("a", 6, 3, Some(&s));
    lines.remove(1); // seq 2
    let r = run(&[("e", &lines)], Some(&v));
    let c = one(&r);
    assert!(r.damaged());
    assert_eq!(c.gaps, vec![(2, 2)]);
    assert!(to_text(&r).contains("MISSING seq 2"));
    // The records after the gap are still vouched for by the checkpoint; those before are not.
    assert_eq!(c.verified, vec![(3, 6)]);
}

#[test]
fn an_edited_field_is_found_and_named_when_a_copy_is_left() {
    let (s, v) = keys();
    let lines = log("a", 6, 3, Some(&s));
    let edit = |l: &String| l.replacen("\"decision\":\"deny\"", "\"decision\":\"allow\"", 1);
    // seq 3 (the third line) is a denial: made an allow.
    let mut edited = lines.clone();
    edited[2] = edit(&lines[2]);
    assert_ne!(edited[2], lines[2]);
    let r = run(&[("e", &edited)], Some(&v));
    let c = one(&r);
    assert!(r.damaged(), "{}", to_text(&r));
    assert!(
        c.altered.iter().any(|f| f.seq == 2 || f.seq == 3),
        "{:?}",
        c.altered
    );
    assert!(
        c.bad_checkpoints.iter().any(|f| f.seq == 3),
        "{:?}",
        c.bad_checkpoints
    );
    assert!(!c.verified.iter().any(|(a, b)| (*a..=*b).contains(&3)));
    // With the untouched copy in another log, the field is named.
    let r = run(&[("e", &edited), ("copy", &lines)], Some(&v));
    let c = one(&r);
    let f = c.altered.iter().find(|f| f.at == "e:3").unwrap();
    assert_eq!(f.seq, 3);
    assert!(f.what.contains("`decision`"), "{}", f.what);
}

#[test]
fn an_edit_without_any_checkpoint_after_it_breaks_the_next_link() {
    let mut lines = log("a", 4, 100, None);
    lines[1] = lines[1].replace("\"name\":\"t2\"", "\"name\":\"rm\"");
    let r = run(&[("e", &lines)], None);
    let c = one(&r);
    assert!(r.damaged());
    assert_eq!(c.altered.len(), 1, "{:?}", c.altered);
    assert_eq!((c.altered[0].seq, c.altered[0].at.as_str()), (2, "e:2"));
}

#[test]
fn two_swapped_lines_verify_but_swapped_seqs_do_not() {
    let (s, v) = keys();
    let mut lines = log("a", 6, 3, Some(&s));
    lines.swap(0, 1);
    let r = run(&[("e", &lines)], Some(&v));
    assert!(!r.damaged(), "{}", to_text(&r));
    // The records' places exchanged: seq 1 and 2 trade their seq (and prev) values.
    let mut lines = log("a", 6, 3, Some(&s));
    let (l0, l1) = (lines[0].clone(), lines[1].clone());
    lines[0] = l0.replace("\"seq\":1}", "\"seq\":2}");
    lines[1] = l1.replace("\"seq\":2}", "\"seq\":1}");
    let r = run(&[("e", &lines)], Some(&v));
    assert!(r.damaged(), "{}", to_text(&r));
    assert!(!one(&r).altered.is_empty());
}

#[test]
fn a_truncated_file_shows() {
    let (s, v) = keys();
    let lines = log("a", 6, 3, Some(&s));
    let mut text = lines.join("\n");
    // Cut in the middle of the last record (seq 6), before its checkpoint.
    let cut = text.rfind(LOG_PREFIX).unwrap() + LOG_PREFIX.len() + 20;
    text.truncate(cut);
    let logs = [Log {
        name: "e",
        bytes: text.as_bytes(),
    }];
    let r = verify(&logs, Some(&v));
    assert!(r.damaged(), "{}", to_text(&r));
    assert_eq!(r.unreadable.len(), 1, "{:?}", r.unreadable);
    assert!(r.unreadable[0].starts_with("e:7:"), "{:?}", r.unreadable);
    // Cut at a line's end, records 4-6 gone: the checkpoint after them (in the next
    // rotation) names seq 6, so 4-6 are missing.
    let r = run(&[("e", &lines[..4]), ("later", &lines[7..])], Some(&v));
    assert_eq!(one(&r).gaps, vec![(4, 6)], "{}", to_text(&r));
}

#[test]
fn a_forged_checkpoint_is_bad() {
    let (s, v) = keys();
    let mut lines = log("a", 6, 3, Some(&s));
    // Its seq moved forward (as if records 4-6 never happened it would vouch for 3 records).
    lines[3] = lines[3].replace("\"seq\":3,", "\"seq\":2,");
    let r = run(&[("e", &lines)], Some(&v));
    let c = one(&r);
    assert!(r.damaged());
    assert!(c
        .bad_checkpoints
        .iter()
        .any(|f| f.at == "e:4" && f.what.contains("does not verify")));
    // Signed with another key.
    let other = Signer::from_base64("AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=").unwrap();
    let r = run(&[("e", &log("a", 3, 3, Some(&other)))], Some(&v));
    assert!(one(&r).bad_checkpoints[0].what.contains("signed with key"));
    // Unsigned (a VM without a key) when a key is expected.
    let r = run(&[("e", &log("a", 3, 3, None))], Some(&v));
    assert!(one(&r).bad_checkpoints[0].what.contains("unsigned"));
    // Without a key, the same log's chain is intact.
    let r = run(&[("e", &log("a", 3, 3, None))], None);
    assert!(!r.damaged());
}

#[test]
fn a_record_moved_between_chains_shows_in_both() {
    let (s, v) = keys();
    let a = log("a", 6, 3, Some(&s));
    let mut b = log("b", 6, 3, Some(&s));
    // Record 5 of chain a re-labelled as chain b's, put in b's log in place of b's 5.
    let moved = a[5].replace("\"chain\":\"a\"", "\"chain\":\"b\"");
    let i = b.iter().position(|l| l.contains("\"seq\":5}")).unwrap();
    b[i] = moved;
    let mut a2 = a.clone();
    a2.remove(5);
    let r = run(&[("a", &a2), ("b", &b)], Some(&v));
    assert!(r.damaged(), "{}", to_text(&r));
    let (ca, cb) = (&r.chains[0], &r.chains[1]);
    assert_eq!(ca.gaps, vec![(5, 5)]);
    assert!(!cb.altered.is_empty() || !cb.bad_checkpoints.is_empty());
}

#[test]
fn each_chain_begins_with_a_given_bundle_or_the_report_says_not() {
    let (s, v) = keys();
    let lines = log("a", 4, 2, Some(&s));
    let mut r = run(&[("access.log", &lines)], Some(&v));
    let digest = Digest::of(b"{\"config\":1}").to_text();
    assert_eq!(
        one(&r).configuration.as_ref().map(|k| k.digest.as_str()),
        Some(digest.as_str())
    );
    assert!(!r.damaged(), "{}", to_text(&r));
    // The same bundle in other whitespace: its canonical bytes are the same.
    let same = ("b.json".to_string(), b"{ \"config\" : 1 }\n".to_vec());
    let other = ("c.json".to_string(), b"{\"config\":2}".to_vec());
    r.name_configurations(&[other.clone(), same]);
    assert!(!r.damaged(), "{}", to_text(&r));
    assert!(to_text(&r).contains(&format!("configuration {digest} (b.json)")));
    r.name_configurations(&[other]);
    assert!(r.damaged());
    let text = to_text(&r);
    assert!(
        text.contains("UNKNOWN CONFIGURATION") && text.contains("access.log:1"),
        "{text}"
    );
    // Without seq 1 there is nothing to name: the gap says what is missing.
    let mut r = run(&[("access.log", &lines[1..])], Some(&v));
    r.name_configurations(&[]);
    assert!(one(&r).configuration.is_none());
    assert!(r.damaged() && !r.unknown_configuration(one(&r)));
}

#[test]
fn records_without_a_chain_fail() {
    let lines = vec![format!("{LOG_PREFIX}{{\"decision\":\"allow\"}}")];
    let r = run(&[("e", &lines)], None);
    assert!(r.damaged());
    assert_eq!(r.unchained, vec!["e:1".to_string()]);
}

#[test]
fn public_keys_read_as_base64_and_pem() {
    let (s, v) = keys();
    assert_eq!(keys::public_key(&s.public_base64()).unwrap().id(), v.id());
    // `openssl pkey -pubout` of the same key.
    let der: Vec<u8> = [
        0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
    ]
    .into_iter()
    .chain(base64_decode(&s.public_base64()))
    .collect();
    let pem = format!(
        "-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----\n",
        base64_encode(&der)
    );
    assert_eq!(keys::public_key(&pem).unwrap().id(), v.id());
    assert!(
        keys::public_key("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----").is_err()
    );
    let (private, public) = keys::generate().unwrap();
    let signer = Signer::from_base64(&private).unwrap();
    assert_eq!(signer.public_base64(), public.trim());
}

fn base64_decode(s: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.decode(s).unwrap()
}

fn base64_encode(b: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(b)
}
