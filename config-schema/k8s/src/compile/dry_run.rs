//! Dry-run policies (docs/semantics.md §3.8): `spec.mode: DryRun` on an AccessPolicy, the
//! annotation `mcp-access.io/dry-run: "true"` on either kind. A dry-run policy is compiled
//! as any other and marked `mode: DryRun` in the bundle.
//!
//! Defaults and overrides are applied twice: once without the dry-run policies and blocks
//! (what is enforced: a dry-run object never changes it) and once with all of them (the
//! dry-run decision). A policy both give is enforced; one only the first gives is
//! `EnforceOnly` (a dry-run block replaces it in the dry run); one only the second gives is
//! `DryRun`. So the dry-run decision is exactly the one the manifests give with every
//! dry-run object enforced.

use std::collections::BTreeSet;

use super::effective::BlockPolicy;
use super::Ctx;
use crate::load::{Item, PolicySpec};
use crate::model::Enforcement;
use mcp_access_bundle::{self as bundle, PolicyMode};

/// The annotation that makes an `XAccessPolicy` (or an `AccessPolicy`) a dry run.
pub(crate) const ANNOTATION: &str = "mcp-access.io/dry-run";

/// Whether policy `p` is a dry run; an error when the annotation holds neither `"true"` nor
/// `"false"`, or disagrees with `spec.mode` (the policy is then not accepted: which was meant
/// is unknown).
pub(super) fn dry_run_of(p: &Item<PolicySpec>) -> Result<bool, String> {
    let mode = match &p.spec {
        PolicySpec::V1(s) => s.mode.as_deref(),
        PolicySpec::V0(_) => None,
    };
    let annotation = p.meta.annotations.get(ANNOTATION).map(String::as_str);
    let by_annotation = match annotation {
        None => None,
        Some("true") => Some(true),
        Some("false") => Some(false),
        Some(v) => {
            return Err(format!(
                "metadata.annotations[{ANNOTATION}]: \"{v}\" is neither \"true\" nor \"false\""
            ))
        }
    };
    let by_mode = mode.map(|m| m == "DryRun");
    match (by_mode, by_annotation) {
        (Some(m), Some(a)) if m != a => Err(format!(
            "spec.mode {} and metadata.annotations[{ANNOTATION}] \"{}\" disagree: remove one",
            mode.unwrap_or_default(),
            annotation.unwrap_or_default()
        )),
        (m, a) => Ok(m.or(a).unwrap_or(false)),
    }
}

impl Ctx<'_> {
    /// Applies the defaults/overrides blocks (docs/semantics.md §7), for the enforced
    /// decision and, when there are dry-run policies, for the dry-run one (see the module).
    /// Statuses are those of the enforced decision.
    pub(super) fn apply_blocks_both(
        &mut self,
        blocks: &[BlockPolicy],
        out: &mut Vec<bundle::Policy>,
        authorizers: &mut Vec<bundle::Authorizer>,
    ) {
        let dry_policies = out.iter().any(|p| p.mode == PolicyMode::DryRun);
        if !dry_policies && !blocks.iter().any(|b| b.dry_run) {
            return self.apply_blocks(blocks, out, authorizers);
        }
        let enforced_blocks: Vec<BlockPolicy> =
            blocks.iter().filter(|b| !b.dry_run).cloned().collect();
        let mut enforced: Vec<bundle::Policy> =
            out.iter().filter(|p| p.mode.enforced()).cloned().collect();
        self.apply_blocks(&enforced_blocks, &mut enforced, authorizers);
        let mut dry: Vec<bundle::Policy> = out
            .iter()
            .cloned()
            .map(|mut p| {
                p.mode = PolicyMode::Enforce;
                p
            })
            .collect();
        // The dry run's effects and block statuses are not the objects' status.
        let (effects, statuses) = (self.effects.clone(), self.report.policies.clone());
        let mut dry_authorizers = Vec::new();
        self.apply_blocks(blocks, &mut dry, &mut dry_authorizers);
        (self.effects, self.report.policies) = (effects, statuses);
        for a in dry_authorizers {
            if !authorizers.iter().any(|x| x.name == a.name) {
                authorizers.push(a);
            }
        }
        *out = merge(enforced, dry);
    }

    /// The `Enforced` condition of every accepted target of a dry-run policy: `DryRun`.
    pub(super) fn dry_run_statuses(&mut self) {
        for p in &self.m.policies {
            if dry_run_of(p) != Ok(true) {
                continue;
            }
            let Some(st) = self.report.policies.iter_mut().find(|s| {
                s.kind == p.kind && s.namespace == p.meta.namespace && s.name == p.meta.name
            }) else {
                continue;
            };
            let headers = match &p.spec {
                PolicySpec::V1(s) if s.identity_headers.is_some() => {
                    "; its identityHeaders are neither sent nor removed until it is enforced"
                }
                _ => "",
            };
            for c in st.conditions.iter_mut().filter(|c| c.accepted) {
                c.enforced = Some(Enforcement {
                    status: false,
                    reason: "DryRun".into(),
                    message: format!("a dry run: evaluated beside the enforced policies and reported (decision log, filter state, mcp_access.dry_run counters), never enforced{headers}"),
                });
            }
        }
    }
}

/// One bundle of both decisions' policies: a policy in both is enforced, one only in
/// `enforced` is `EnforceOnly`, one only in `dry` is `DryRun` (renamed `<name>.dry-run`
/// where its name is taken).
fn merge(enforced: Vec<bundle::Policy>, dry: Vec<bundle::Policy>) -> Vec<bundle::Policy> {
    let mut rest = dry;
    let mut out = Vec::with_capacity(enforced.len() + rest.len());
    for mut p in enforced {
        match rest.iter().position(|d| *d == p) {
            Some(i) => {
                rest.remove(i);
            }
            None => p.mode = PolicyMode::EnforceOnly,
        }
        out.push(p);
    }
    let mut names: BTreeSet<String> = out
        .iter()
        .map(|p| format!("{}/{}", p.namespace, p.name))
        .collect();
    for mut p in rest {
        p.mode = PolicyMode::DryRun;
        let base = p.name.clone();
        let mut k = 1;
        while names.contains(&format!("{}/{}", p.namespace, p.name)) {
            p.name = match k {
                1 => format!("{base}.dry-run"),
                _ => format!("{base}.dry-run.{k}"),
            };
            k += 1;
        }
        names.insert(format!("{}/{}", p.namespace, p.name));
        out.push(p);
    }
    out.sort_by(|a, b| {
        (a.seniority, &a.namespace, &a.name).cmp(&(b.seniority, &b.namespace, &b.name))
    });
    out
}
