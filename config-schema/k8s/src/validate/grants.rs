//! `ReferenceGrant`: which references from another namespace are allowed.

use super::{ref_fields, required_list, GROUP_FIELD, KIND_FIELD, NAMESPACE_FIELD, NAME_FIELD};
use crate::check::Checker;
use crate::types::*;

pub(crate) fn reference_grant(s: &ReferenceGrantSpec, c: &mut Checker) {
    for (i, f) in required_list("spec.from", &s.from, (1, 16), c)
        .iter()
        .enumerate()
    {
        let fields = [
            (&GROUP_FIELD, &f.group, true),
            (&KIND_FIELD, &f.kind, true),
            (&NAMESPACE_FIELD, &f.namespace, true),
        ];
        ref_fields(&format!("spec.from[{i}]"), &fields, c);
    }
    for (i, t) in required_list("spec.to", &s.to, (1, 16), c)
        .iter()
        .enumerate()
    {
        let fields = [
            (&GROUP_FIELD, &t.group, true),
            (&KIND_FIELD, &t.kind, true),
            (&NAME_FIELD, &t.name, false),
        ];
        ref_fields(&format!("spec.to[{i}]"), &fields, c);
    }
}

// ---------------------------------------------------------------------------------------
// Gateway
