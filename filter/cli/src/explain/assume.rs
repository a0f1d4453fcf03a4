//! `--assume`: which keys name what, and the answer each authorizer call gets.

use std::collections::BTreeMap;

use mcp_access_bundle::{Action, Bundle};
use mcp_access_k8s::Topology;

use super::Assumption;
use crate::error::CliError;

/// `namespace/name` of the policy the user wrote that a bundle policy was derived from (a
/// Gateway policy's defaults/overrides block, or a lower policy some of whose rules were
/// replaced).
fn block_policy(p: &mcp_access_bundle::Policy) -> Option<&str> {
    p.origin
        .as_ref()
        .and_then(|o| o.policy.split_once(' '))
        .map(|(_, id)| id)
}

/// Whether `key` (`namespace/name` or `name`) names `id` (`namespace/name`).
fn names(key: &str, id: &str) -> bool {
    key == id || id.split_once('/').is_some_and(|(_, n)| n == key)
}

/// Every `--assume` key must name an ExternalAuth policy (`namespace/name` or `name`; a
/// Gateway policy whose block derived it), an authorizer, or be `*`. A key naming a policy
/// that was not accepted, or an ExternalAuth policy the user wrote that calls nothing here
/// (an override replaced it), is no error: the note says so.
pub(super) fn check_assumptions(
    bundle: &Bundle,
    topo: Option<&Topology>,
    assume: &BTreeMap<String, Assumption>,
) -> Result<Vec<String>, CliError> {
    let mut notes = Vec::new();
    for key in assume.keys() {
        if key == "*" || bundle.authorizers.iter().any(|a| &a.name == key) {
            continue;
        }
        let named: Vec<_> = bundle
            .policies
            .iter()
            .filter(|p| {
                names(key, &format!("{}/{}", p.namespace, p.name))
                    || block_policy(p).is_some_and(|id| names(key, id))
            })
            .collect();
        let standins: Vec<_> = bundle
            .policies
            .iter()
            .filter(|p| {
                p.not_accepted.is_some()
                    && p.name
                        .strip_suffix(".not-accepted")
                        .is_some_and(|n| names(key, &format!("{}/{n}", p.namespace)))
            })
            .collect();
        if named.is_empty() && !standins.is_empty() {
            for p in standins {
                let does = if p.action == Action::Allow {
                    "admits nothing"
                } else {
                    "denies the requests the policy would have selected"
                };
                notes.push(format!(
                    "--assume {key}: policy {}/{} is not accepted ({}) and is enforced fail-closed: its stand-in {} {does}; no authorizer is called",
                    p.namespace,
                    p.name.trim_end_matches(".not-accepted"),
                    p.not_accepted.as_deref().unwrap_or_default(),
                    p.name
                ));
            }
            continue;
        }
        let written = topo
            .into_iter()
            .flat_map(|t| &t.external_auth_policies)
            .find(|id| names(key, id));
        if let (true, Some(id)) = (named.is_empty(), written) {
            notes.push(format!(
                "--assume {key}: policy {id} calls no authorizer in this configuration (a Gateway policy's overrides replaced it): the assumption changes nothing"
            ));
            continue;
        }
        if named.is_empty() {
            return Err(format!(
                "--assume {key}: no policy or authorizer of that name in the bundle"
            )
            .into());
        }
        if !named.iter().any(|p| p.action == Action::ExternalAuth) {
            return Err(format!(
                "--assume {key}: that policy calls no authorizer (only ExternalAuth policies do)"
            )
            .into());
        }
    }
    Ok(notes)
}

/// The `--assume` answer for a call of `policy` (`namespace/name`) to `authorizer`: by the
/// policy's name (or that of the Gateway policy whose block derived it), the authorizer's,
/// else `*`; None when none is given (the call is then allowed).
pub(super) fn assumption<'a>(
    bundle: &Bundle,
    assume: &'a BTreeMap<String, Assumption>,
    policy: &str,
    authorizer: &str,
) -> Option<&'a Assumption> {
    let short = policy.split_once('/').map_or("", |x| x.1);
    // A policy derived from a Gateway policy's block answers to its name too.
    let block = bundle
        .policies
        .iter()
        .find(|p| format!("{}/{}", p.namespace, p.name) == policy)
        .and_then(block_policy)
        .unwrap_or_default();
    let block_short = block.split_once('/').map_or("", |x| x.1);
    [policy, short, block, block_short, authorizer]
        .iter()
        .filter(|k| !k.is_empty())
        .chain(&["*"])
        .find_map(|k| assume.get(*k))
}
