//! ReferenceGrants: which cross-namespace references are permitted.

use super::{opt, same_group};
use crate::load::Manifests;

/// `to_group/to_kind` `to_name` in `to_ns`?
pub(super) fn permitted(
    m: &Manifests,
    from: (&str, &str, &str),
    to: (&str, &str, &str, &str),
) -> bool {
    let (fg, fk, fns) = from;
    let (tg, tk, tns, tname) = to;
    if fns == tns {
        return true;
    }
    m.grants.iter().any(|g| {
        g.meta.namespace == tns
            && g.spec.from.iter().flatten().any(|f| {
                same_group(opt(&f.group), fg) && opt(&f.kind) == fk && opt(&f.namespace) == fns
            })
            && g.spec.to.iter().flatten().any(|t| {
                same_group(opt(&t.group), tg)
                    && opt(&t.kind) == tk
                    && t.name.as_deref().is_none_or(|n| n == tname)
            })
    })
}
