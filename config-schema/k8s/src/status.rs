//! The `status` an implementation would write on each object, from the compiler's report:
//! objects of `apiVersion`, `kind`, `metadata` and `status` only, as `kubectl apply
//! --server-side --subresource=status` takes them.
//!
//! - Policies (both kinds, and RateLimitPolicies): Gateway API `PolicyStatus`, one ancestor per target (the Gateway,
//!   with its `sectionName`, or the XBackend), conditions `Accepted` and, where defaults and
//!   overrides meet, `Enforced`.
//! - Gateways: `Accepted` and one entry per listener (`Accepted`, `ResolvedRefs`, routes
//!   attached); kube-agentic-networking XBackends and ToolPins: `Accepted`; HTTPRoutes: one
//!   parent per parentRef.
//! - Gateway API XBackends (v1.6): `parents`, one per Gateway a route of which forwards to it
//!   (`parentRef`, `controllerName`, `conditions`); one that no Gateway reaches gets one entry
//!   naming the XBackend itself (as Istio writes it for the mesh), so its `Accepted` is still said.
//! - Gateways and XBackends a policy of a kind is accepted on carry `<Kind>Affected` (Gateway API
//!   policy attachment's convention); so does each parent of an HTTPRoute one is accepted on.
//!
//! `observedGeneration` is the object's `metadata.generation` when the manifest has one.

use std::collections::HashMap;

use mcp_access_cel::a_or_an;
use serde_json::{json, Value};

use crate::compile::reason;
use crate::model::{ObjectStatus, Report, RouteAction, TargetStatus, Topology};
use crate::refs::{NsName, ObjectName, Target};
use crate::types::{AGENTIC_GROUP, GATEWAY_GROUP, GATEWAY_X_GROUP};

/// The controller name written on ancestors and route parents.
pub const CONTROLLER_NAME: &str = "mcp-access.io/compiler";

/// One status object per object of the report (policies, Gateways, HTTPRoutes, XBackends,
/// ToolPins),
/// with `now` (RFC 3339) as every condition's `lastTransitionTime`.
pub fn status_objects(report: &Report, topo: &Topology, now: &str) -> Vec<Value> {
    let w = Writer { now };
    let affected = affected(report);
    let mut out = Vec::new();
    for p in report.policies.iter().chain(&report.rate_limit_policies) {
        out.push(w.policy(p, topo));
    }
    for g in &report.gateways {
        out.push(w.gateway(g, topo, affected.get(&key("Gateway", g))));
    }
    for r in &report.routes {
        out.push(w.route(r, topo, affected.get(&key("HTTPRoute", r))));
    }
    for b in &report.backends {
        let affected = affected.get(&key("XBackend", b));
        if b.api_version.split('/').next() == Some(GATEWAY_X_GROUP) {
            out.push(w.gateway_backend(b, topo, affected));
        } else {
            out.push(w.backend(b, affected));
        }
    }
    for p in &report.pins {
        out.push(w.backend(p, None));
    }
    out
}

struct Writer<'a> {
    now: &'a str,
}

/// Object `o` as policies name their targets.
fn key(kind: &str, o: &ObjectStatus) -> Target {
    Target::Object(ObjectName::new(kind, NsName::new(&o.namespace, &o.name)))
}

/// Per target, the policy kinds accepted on it.
fn affected(report: &Report) -> HashMap<Target, Vec<String>> {
    let mut out: HashMap<Target, Vec<String>> = HashMap::new();
    for p in report.policies.iter().chain(&report.rate_limit_policies) {
        for c in p.conditions.iter().filter(|c| c.accepted) {
            let kinds = out.entry(c.target.clone()).or_default();
            if !kinds.contains(&p.kind) {
                kinds.push(p.kind.clone());
            }
        }
    }
    out
}

/// The `ancestorRef` / `parentRef` of an object target (`default_kind` and the target's
/// text as name for a listener, which policies and routes never name). An XBackend's group is
/// its kind's, as the topology has it (kube-agentic-networking's when it is not there).
fn object_ref(target: &Target, default_kind: &str, topo: &Topology) -> Value {
    let (kind, ns, name) = match target {
        Target::Object(o) => (o.kind.as_str(), o.id.namespace.as_str(), o.id.name.clone()),
        Target::Listener(_) => (default_kind, "", target.to_string()),
    };
    let group = match target {
        Target::Object(o) if kind == "XBackend" => topo
            .backends
            .iter()
            .find(|b| b.id == o.id)
            .map_or(AGENTIC_GROUP, |b| b.group()),
        _ => GATEWAY_GROUP,
    };
    json!({"group": group, "kind": kind, "namespace": ns, "name": name})
}

/// The Gateways (`namespace`, `name`) with a listener whose routes forward to XBackend `id`.
fn gateways_to(topo: &Topology, id: &NsName) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = topo
        .gateways
        .iter()
        .filter(|g| {
            g.listeners
                .iter()
                .flat_map(|l| &l.routes)
                .any(|e| match &e.action {
                    RouteAction::Forward { clusters, .. } => {
                        clusters.iter().any(|c| c.backend.as_ref() == Some(id))
                    }
                    _ => false,
                })
        })
        .map(|g| (g.namespace.clone(), g.name.clone()))
        .collect();
    out.sort();
    out.dedup();
    out
}

impl Writer<'_> {
    fn condition(
        &self,
        o: &ObjectStatus,
        kind: &str,
        ok: bool,
        reason: &str,
        message: &str,
    ) -> Value {
        let mut c = json!({
            "type": kind,
            "status": if ok { "True" } else { "False" },
            "reason": reason,
            "message": message.chars().take(32768).collect::<String>(),
            "lastTransitionTime": self.now,
        });
        if let (Some(g), Some(m)) = (o.generation, c.as_object_mut()) {
            m.insert("observedGeneration".into(), json!(g));
        }
        c
    }

    fn object(o: &ObjectStatus, status: Value) -> Value {
        let meta = json!({"name": o.name, "namespace": o.namespace});
        json!({"apiVersion": o.api_version, "kind": o.kind, "metadata": meta, "status": status})
    }

    fn policy(&self, p: &ObjectStatus, topo: &Topology) -> Value {
        let ancestors: Vec<Value> = p
            .conditions
            .iter()
            .map(|c| {
                let mut r = object_ref(&c.target, "", topo);
                if let (Some(s), Some(m)) = (&c.section_name, r.as_object_mut()) {
                    m.insert("sectionName".into(), json!(s));
                }
                let mut conditions = vec![self.condition(p, "Accepted", c.accepted, &c.reason, &c.message)];
                if let Some(e) = &c.enforced {
                    conditions.push(self.condition(p, "Enforced", e.status, &e.reason, &e.message));
                }
                json!({"ancestorRef": r, "controllerName": CONTROLLER_NAME, "conditions": conditions})
            })
            .collect();
        Writer::object(p, json!({"ancestors": ancestors}))
    }

    fn affected_conditions(&self, o: &ObjectStatus, kinds: Option<&Vec<String>>) -> Vec<Value> {
        kinds
            .into_iter()
            .flatten()
            .map(|k| {
                let msg = format!("{} is accepted on this object", a_or_an(k));
                self.condition(o, &format!("{k}Affected"), true, "Accepted", &msg)
            })
            .collect()
    }

    fn gateway(&self, g: &ObjectStatus, topo: &Topology, affected: Option<&Vec<String>>) -> Value {
        let listeners: Vec<Value> = g
            .conditions
            .iter()
            .filter_map(|c| Some((c.target.listener()?, c)))
            .map(|(name, c)| {
                let refs_ok = !matches!(
                    c.reason.as_str(),
                    "InvalidCertificateRef" | "InvalidCACertificateRef" | "RefNotPermitted"
                );
                let (refs_reason, refs_msg) = if refs_ok {
                    ("ResolvedRefs", "")
                } else {
                    (c.reason.as_str(), c.message.as_str())
                };
                json!({
                    "name": name,
                    "attachedRoutes": attached_routes(topo, &g.namespace, &g.name, name),
                    "supportedKinds": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute"}],
                    "conditions": [
                        self.condition(g, "Accepted", c.accepted, &c.reason, &c.message),
                        self.condition(g, "ResolvedRefs", refs_ok, refs_reason, refs_msg),
                    ],
                })
            })
            .collect();
        let any = g.conditions.iter().any(|c| c.accepted);
        let (reason, msg) = if any {
            (reason::ACCEPTED, "at least one listener is accepted")
        } else {
            ("ListenersNotValid", "no listener is accepted")
        };
        let mut conditions = vec![self.condition(g, "Accepted", any, reason, msg)];
        conditions.extend(self.affected_conditions(g, affected));
        Writer::object(g, json!({"conditions": conditions, "listeners": listeners}))
    }

    /// An HTTPRoute: one entry per parent, each with `<Kind>Affected` when a policy of that kind
    /// is accepted on the route.
    fn route(&self, r: &ObjectStatus, topo: &Topology, affected: Option<&Vec<String>>) -> Value {
        let parents: Vec<Value> = r
            .conditions
            .iter()
            .map(|c: &TargetStatus| {
                let mut p = object_ref(&c.target, "Gateway", topo);
                if let (Some(s), Some(m)) = (&c.section_name, p.as_object_mut()) {
                    m.insert("sectionName".into(), json!(s));
                }
                let refs_ok = !matches!(
                    c.reason.as_str(),
                    "RefNotPermitted" | "BackendNotFound" | "InvalidKind"
                );
                let (refs_reason, refs_msg) = if refs_ok {
                    ("ResolvedRefs", "")
                } else {
                    (c.reason.as_str(), c.message.as_str())
                };
                let accepted = c.accepted || !refs_ok;
                let (reason, msg) = if accepted {
                    (reason::ACCEPTED, c.message.as_str())
                } else {
                    (c.reason.as_str(), c.message.as_str())
                };
                let mut conditions = vec![
                    self.condition(r, "Accepted", accepted, reason, msg),
                    self.condition(r, "ResolvedRefs", refs_ok, refs_reason, refs_msg),
                ];
                conditions.extend(self.affected_conditions(r, affected));
                json!({"parentRef": p, "controllerName": CONTROLLER_NAME, "conditions": conditions})
            })
            .collect();
        Writer::object(r, json!({"parents": parents}))
    }

    fn backend(&self, b: &ObjectStatus, affected: Option<&Vec<String>>) -> Value {
        let conditions = self.backend_conditions(b, affected);
        Writer::object(b, json!({"conditions": conditions}))
    }

    /// A Gateway API XBackend (v1.6 `BackendStatus`): its conditions under each Gateway that
    /// routes to it, or under itself when none does (at most 32 entries, as the CRD allows).
    fn gateway_backend(
        &self,
        b: &ObjectStatus,
        topo: &Topology,
        affected: Option<&Vec<String>>,
    ) -> Value {
        let conditions = self.backend_conditions(b, affected);
        let id = NsName::new(&b.namespace, &b.name);
        let mut refs: Vec<Value> = gateways_to(topo, &id)
            .into_iter()
            .map(|(ns, name)| {
                json!({"group": GATEWAY_GROUP, "kind": "Gateway", "namespace": ns, "name": name})
            })
            .collect();
        if refs.is_empty() {
            refs.push(json!({"group": GATEWAY_X_GROUP, "kind": "XBackend", "namespace": b.namespace, "name": b.name}));
        }
        let parents: Vec<Value> = refs
            .into_iter()
            .take(32)
            .map(|r| json!({"parentRef": r, "controllerName": CONTROLLER_NAME, "conditions": conditions}))
            .collect();
        Writer::object(b, json!({"parents": parents}))
    }

    fn backend_conditions(&self, b: &ObjectStatus, affected: Option<&Vec<String>>) -> Vec<Value> {
        let ok = b.accepted();
        let first = b
            .conditions
            .iter()
            .find(|c| !c.accepted)
            .or(b.conditions.first());
        let (reason, msg) = first
            .map(|c| (c.reason.as_str(), c.message.as_str()))
            .unwrap_or((reason::ACCEPTED, ""));
        let mut conditions = vec![self.condition(b, "Accepted", ok, reason, msg)];
        conditions.extend(self.affected_conditions(b, affected));
        conditions
    }
}

/// Routes attached to a listener: the distinct HTTPRoutes of its route entries.
fn attached_routes(topo: &Topology, ns: &str, gateway: &str, listener: &str) -> usize {
    let mut names: Vec<&str> = topo
        .gateways
        .iter()
        .filter(|g| g.namespace == ns && g.name == gateway)
        .flat_map(|g| g.listeners.iter().filter(|l| l.name == listener))
        .flat_map(|l| l.routes.iter().map(|e| e.route.as_str()))
        .collect();
    names.sort_unstable();
    names.dedup();
    names.len()
}
