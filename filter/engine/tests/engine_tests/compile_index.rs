//! The engine's per-target policy index: Backend-level policies are attached to their backends
//! in seniority order whatever their order in the bundle, once even when a policy names the
//! same backend twice, and only to the backends they target.

use crate::common;

use std::collections::HashMap;

use common::*;
use serde_json::json;

#[test]
fn backend_policies_attach_once_in_seniority_order() {
    let mut twice = ext("b", "Backend", "tools", "authz-b", 2);
    twice["targets"] = json!([{"name": "tools"}, {"name": "tools"}, {"name": "other"}]);
    let e = engine(&bundle(
        vec![
            ext("c", "Backend", "other", "authz-c", 0),
            twice,
            ext("a", "Backend", "tools", "authz-a", 1),
            inline_tools("gw-allow", "Gateway", "gw", &["echo"]),
            inline_tools("be-allow", "Backend", "tools", &["echo"]),
        ],
        &["authz-a", "authz-b", "authz-c"],
    ));
    let outcomes = HashMap::from([("a", allow()), ("b", allow()), ("c", allow())]);
    let (d, batches) = run(&e, &call("echo"), &outcomes);
    assert!(is_allow(&d), "{d:?}");
    assert_eq!(batches, vec![vec!["a".to_string(), "b".to_string()]]);
}
