//! Identity headers of AccessPolicies (docs/semantics.md §5.7): gathered per XBackend, the
//! bundle's `backends[].identityHeaders`. Two policies that give one XBackend the same header
//! with different values conflict: the more senior one's stands, the other is not accepted.

use std::collections::BTreeMap;

use mcp_access_bundle::{self as bundle, IdentityField};

use crate::load::{Item, PolicySpec};
use crate::refs::NsName;
use crate::types::{opt, BackendKind};
use crate::validate::identity_header;

/// The identity headers of each XBackend (`namespace/name`), with the policy that declared
/// each (`Kind namespace/name`), in seniority order.
#[derive(Debug, Default)]
pub(super) struct IdentityHeaders {
    by_backend: BTreeMap<NsName, Vec<(bundle::IdentityHeader, String)>>,
}

fn describe(h: &bundle::IdentityHeader) -> String {
    let from = match h.from {
        IdentityField::Spiffe => "SPIFFE",
        IdentityField::JwtSubject => "JWTSubject",
        IdentityField::JwtIssuer => "JWTIssuer",
        IdentityField::JwtClaim => "JWTClaim",
    };
    match &h.claim {
        Some(c) => format!("{from} {c}"),
        None => from.to_string(),
    }
}

impl IdentityHeaders {
    /// Records the identity headers of `p` (policies come most senior first) for the
    /// accepted XBackends it targets (`accepted`: whether a reference resolves), whether or not it is accepted (its headers are
    /// still removed from what clients send). A header another policy already gives one of
    /// them with another value is not recorded: the message says which, for `p`'s status.
    /// A header some route matches on (`route_headers`) is not recorded either: Envoy would
    /// match the route again once the filter sets it.
    pub(super) fn record(
        &mut self,
        p: &Item<PolicySpec>,
        accepted: &dyn Fn(BackendKind, &str, &str) -> bool,
        route_headers: &[String],
    ) -> Result<(), String> {
        let PolicySpec::V1(s) = &p.spec else {
            return Ok(());
        };
        let Some(headers) = &s.identity_headers else {
            return Ok(());
        };
        let ns = &p.meta.namespace;
        let targets = s
            .target_refs
            .iter()
            .flatten()
            .filter_map(|r| Some((BackendKind::of(opt(&r.group), opt(&r.kind))?, r)));
        let mut conflict = Ok(());
        for (kind, r) in targets {
            if !accepted(kind, ns, opt(&r.name)) {
                continue;
            }
            let id = NsName::new(ns, opt(&r.name));
            let have = self.by_backend.entry(id.clone()).or_default();
            for (i, h) in headers.iter().enumerate() {
                let Some(h) = identity_header(h) else {
                    continue;
                };
                if route_headers.contains(&h.name) {
                    if conflict.is_ok() {
                        conflict = Err(format!(
                            "spec.identityHeaders[{i}]: an HTTPRoute matches on header {}: Envoy matches the route again once the filter sets it, and could send the request through a route no policy judged; name another header",
                            h.name
                        ));
                    }
                    continue;
                }
                match have.iter().find(|(x, _)| x.name == h.name) {
                    Some((x, _)) if *x == h => {}
                    Some((x, who)) => {
                        if conflict.is_ok() {
                            conflict = Err(format!(
                                "spec.identityHeaders[{i}]: XBackend {id} already receives {} as {} from {who}; a header has one value: rename it, or remove one of the two",
                                h.name,
                                describe(x)
                            ));
                        }
                    }
                    None => have.push((h, format!("{} {}", p.kind, p.id()))),
                }
            }
        }
        conflict
    }

    /// Puts the recorded headers on the bundle's backends.
    pub(super) fn apply(&self, backends: &mut [bundle::Backend]) {
        for b in backends {
            if let Some(hs) = self.by_backend.get(&NsName::new(&b.namespace, &b.name)) {
                b.identity_headers = hs.iter().map(|(h, _)| h.clone()).collect();
            }
        }
    }
}
