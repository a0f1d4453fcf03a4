//! What a policy that is not accepted becomes: its fail-closed stand-in where its target
//! resolves, and what it would have done where its target does not.

use super::{reason, PolicyContent};
use crate::load::{Item, PolicySpec};
use mcp_access_bundle::{self as bundle, Action, Level};

/// The stand-in of a policy not accepted at `targets`. Fail closed: an Allow policy admits
/// nothing; anything else denies what it would have selected (everything, when its rules
/// cannot be trusted). Its `when` is kept only when every predicate compiled (it can then
/// only narrow a denial to where the policy applies); otherwise the stand-in has none.
pub(super) fn standin(
    p: &Item<PolicySpec>,
    name: &str,
    (level, seniority): (Level, u64),
    (content, refused): (&PolicyContent, Option<&str>),
    targets: Vec<bundle::PolicyTarget>,
) -> bundle::Policy {
    let (action, rules) = match (content.action, content.deny_all) {
        (Action::Allow, false) => (Action::Allow, None),
        (_, true) => (Action::Deny, None),
        _ => (Action::Deny, content.rules.clone().ok().flatten()),
    };
    let when = match (action, &content.rules) {
        (Action::Deny, Ok(_)) => content.when.clone(),
        _ => Vec::new(),
    };
    let why = match (&content.problem, refused) {
        (Err((reason, msg)), _) => format!("{reason}: {msg}"),
        (Ok(()), Some(refused)) => refused.to_string(),
        (Ok(()), None) => format!(
            "{}: more senior policies fill a target's limit",
            reason::LIMIT
        ),
    };
    bundle::Policy {
        name: format!("{name}.not-accepted"),
        namespace: p.meta.namespace.clone(),
        level,
        targets,
        action,
        external_auth: None,
        seniority,
        rules,
        when,
        not_accepted: Some(why),
        listeners: Vec::new(),
        origin: None,
        // A dry-run policy's mistake closes nothing: its stand-in is a dry run too.
        mode: if content.dry_run {
            bundle::PolicyMode::DryRun
        } else {
            bundle::PolicyMode::Enforce
        },
    }
}

/// What a policy would have done at its targets, for one whose target does not resolve.
pub(super) fn restricted(c: &PolicyContent) -> &'static str {
    let all = c.deny_all || matches!(c.rules, Ok(None));
    match (c.action, all) {
        (Action::Allow, true) => "admitted all traffic there, and nothing else would change",
        (Action::Allow, false) => {
            "admitted only what its rules allow there (denied everything else)"
        }
        (Action::Deny, true) => "denied every request there",
        (Action::Deny, false) => "denied the requests its rules match there",
        (Action::ExternalAuth, true) => "sent every request there to its authorizer",
        (Action::ExternalAuth, false) => {
            "sent the requests its rules select there to its authorizer"
        }
    }
}
