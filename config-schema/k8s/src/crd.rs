//! The CustomResourceDefinitions of the project's kinds (group `mcp-access.io`): `AccessPolicy`,
//! `FilterSettings`, `ToolPin` and `RateLimitPolicy`, generated from the Rust types the compiler reads
//! ([`PolicySpecV1`], [`FilterSettingsSpec`], [`ToolPinSpec`], [`RateLimitPolicySpec`] and what
//! they hold):
//! their schema (with the `x-kubernetes-validations` rules written on them) made structural
//! as Kubernetes requires — subschemas inlined, no `null` types, no `additionalProperties:
//! false` (the API server prunes or, with strict field validation, rejects unknown fields).
//!
//! The committed files `config-schema/crds/mcp-access.io_*.yaml` are checked against this by
//! a test (`UPDATE_CRD=1 cargo test -p mcp-access-k8s --test crd` rewrites it).

use schemars::generate::SchemaSettings;
use schemars::JsonSchema;
use serde_json::{json, Map, Value};

use crate::types::{
    FilterSettingsSpec, PolicySpecV1, RateLimitPolicySpec, ToolPinSpec, MCP_ACCESS_GROUP,
};

/// `status`: Gateway API's PolicyStatus, per ancestor (Gateway) the conditions of a
/// controller. Only its schema is used.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)] // only the schema is used
struct PolicyStatus {
    /// One entry per ancestor the policy is attached through.
    #[schemars(length(max = 16), extend("x-kubernetes-list-type" = "atomic"))]
    ancestors: Vec<PolicyAncestorStatus>,
}

#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)] // only the schema is used
struct PolicyAncestorStatus {
    /// The ancestor (a Gateway, or an XBackend's Gateway).
    ancestor_ref: ParentReference,
    /// The controller that wrote this entry.
    #[schemars(length(min = 1, max = 253))]
    controller_name: String,
    /// Conditions (Accepted, ...).
    #[schemars(length(min = 1, max = 8), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    conditions: Vec<Condition>,
}

#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)] // only the schema is used
struct ParentReference {
    #[schemars(length(max = 253))]
    group: Option<String>,
    #[schemars(length(min = 1, max = 63))]
    kind: Option<String>,
    #[schemars(length(min = 1, max = 253))]
    name: String,
    #[schemars(length(min = 1, max = 63))]
    namespace: Option<String>,
    #[schemars(length(min = 1, max = 253))]
    section_name: Option<String>,
    #[schemars(range(min = 1, max = 65535), extend("format" = "int32"))]
    port: Option<i32>,
}

/// `status` of a ToolPin: its conditions (Accepted).
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)] // only the schema is used
struct ConditionsStatus {
    /// Conditions (Accepted, ...).
    #[schemars(length(max = 8), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    conditions: Vec<Condition>,
}

/// A `metav1.Condition`.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)] // only the schema is used
struct Condition {
    #[schemars(length(max = 316))]
    #[serde(rename = "type")]
    kind: String,
    #[schemars(extend("enum" = ["True", "False", "Unknown"]))]
    status: String,
    #[schemars(length(min = 1, max = 1024))]
    reason: String,
    #[schemars(length(max = 32768))]
    message: String,
    #[schemars(extend("format" = "date-time"))]
    last_transition_time: String,
    #[schemars(range(min = 0))]
    observed_generation: Option<i64>,
}

/// The schema of `T`, structural.
fn schema_of<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft2020_12()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .into_generator();
    let mut v = generator.into_root_schema_for::<T>().to_value();
    structural(&mut v);
    if let Some(o) = v.as_object_mut() {
        o.remove("title");
    }
    v
}

/// Makes a generated JSON Schema a Kubernetes structural schema (see the module comment).
fn structural(v: &mut Value) {
    match v {
        Value::Array(items) => items.iter_mut().for_each(structural),
        Value::Object(o) => {
            // `Option<T>`: `T` or null.
            if let Some(Value::Array(any)) = o.get("anyOf") {
                let non_null: Vec<Value> = any
                    .iter()
                    .filter(|x| x.get("type") != Some(&json!("null")))
                    .cloned()
                    .collect();
                if let [one] = non_null.as_slice() {
                    o.remove("anyOf");
                    if let Value::Object(inner) = one {
                        for (k, x) in inner {
                            o.entry(k.clone()).or_insert_with(|| x.clone());
                        }
                    }
                }
            }
            // A unit-variant enum: `oneOf` of `const`s becomes `enum` (structural schemas
            // allow no `oneOf` with types); the field's own doc names the values.
            if let Some(Value::Array(variants)) = o.get("oneOf") {
                let consts: Option<Vec<Value>> =
                    variants.iter().map(|x| x.get("const").cloned()).collect();
                if let Some(consts) = consts {
                    o.remove("oneOf");
                    o.insert("type".into(), json!("string"));
                    o.insert("enum".into(), Value::Array(consts));
                }
            }
            if let Some(Value::Array(types)) = o.get("type") {
                let types: Vec<Value> = types
                    .iter()
                    .filter(|t| *t != &json!("null"))
                    .cloned()
                    .collect();
                let t = match types.as_slice() {
                    [one] => one.clone(),
                    _ => Value::Array(types),
                };
                o.insert("type".into(), t);
            }
            if o.get("additionalProperties") == Some(&Value::Bool(false)) {
                o.remove("additionalProperties");
            }
            if o.get("default") == Some(&Value::Null) {
                o.remove("default");
            }
            for key in ["$schema", "nullable"] {
                o.remove(key);
            }
            // A schema's title (a string), not a property named `title` (a schema).
            if o.get("title").is_some_and(Value::is_string) {
                o.remove("title");
            }
            // Unsigned integer formats are not Kubernetes formats.
            if let Some(Value::String(f)) = o.get("format") {
                if f.starts_with("uint") {
                    o.insert("format".into(), json!("int64"));
                }
            }
            o.values_mut().for_each(structural);
        }
        _ => {}
    }
}

/// What differs between the project's CRDs.
struct Kind<'a> {
    kind: &'a str,
    plural: &'a str,
    namespaced: bool,
    description: &'a str,
    generated_from: &'a str,
    spec: Value,
    status: Option<Value>,
    columns: Value,
}

fn custom_resource(k: Kind) -> Value {
    let mut properties = Map::new();
    properties.insert("apiVersion".into(), json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."}));
    properties.insert("kind".into(), json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."}));
    properties.insert("metadata".into(), json!({"type": "object"}));
    properties.insert("spec".into(), k.spec);
    let subresources = match k.status {
        Some(status) => {
            properties.insert("status".into(), status);
            json!({"status": {}})
        }
        None => Value::Null,
    };
    let mut version = json!({
        "name": "v1alpha1",
        "served": true,
        "storage": true,
        "additionalPrinterColumns": k.columns,
        "schema": {"openAPIV3Schema": {
            "description": k.description,
            "type": "object",
            "required": ["spec"],
            "properties": properties,
        }},
    });
    if let (Some(v), false) = (version.as_object_mut(), subresources.is_null()) {
        v.insert("subresources".into(), subresources);
    }
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": format!("{}.{MCP_ACCESS_GROUP}", k.plural),
            "annotations": {"mcp-access.io/generated-from": k.generated_from},
        },
        "spec": {
            "group": MCP_ACCESS_GROUP,
            "names": {
                "kind": k.kind,
                "listKind": format!("{}List", k.kind),
                "plural": k.plural,
                "singular": k.kind.to_ascii_lowercase(),
                "categories": ["mcp-access"],
            },
            "scope": if k.namespaced { "Namespaced" } else { "Cluster" },
            "versions": [version],
        },
    })
}

fn described(mut v: Value, description: &str) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.insert("description".into(), json!(description));
    }
    v
}

/// The AccessPolicy CRD as a value.
pub fn crd() -> Value {
    custom_resource(Kind {
        kind: "AccessPolicy",
        plural: "accesspolicies",
        namespaced: true,
        description: "AccessPolicy: which callers may do what through Gateways or to XBackends (mcp-access's own kind; see docs/semantics.md).",
        generated_from: "config-schema/k8s/src/types.rs (PolicySpecV1)",
        spec: described(schema_of::<PolicySpecV1>(), "The XAccessPolicy v1alpha1 spec (group agentic.networking.x-k8s.io) plus action Deny, JWT sources, `when` conditions on the policy and its rules, defaults/overrides blocks and unset, and identity headers."),
        status: Some(described(schema_of::<PolicyStatus>(), "What controllers report, per ancestor.")),
        columns: json!([
            {"name": "Action", "type": "string", "jsonPath": ".spec.action"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ]),
    })
}

/// The FilterSettings CRD as a value.
pub fn filter_settings_crd() -> Value {
    custom_resource(Kind {
        kind: "FilterSettings",
        plural: "filtersettings",
        namespaced: false,
        description: "FilterSettings: the mcp-access filter's settings that are not policy (denial response, limits, listing filtering, identity source, authorizer timeout, Envoy integration, OAuth protected resource metadata). At most one object; see docs/cli.md.",
        generated_from: "config-schema/k8s/src/types.rs (FilterSettingsSpec)",
        spec: described(schema_of::<FilterSettingsSpec>(), "Every field is optional and defaults as the policy bundle does."),
        status: None,
        columns: json!([
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ]),
    })
}

/// The ToolPin CRD as a value.
pub fn tool_pin_crd() -> Value {
    custom_resource(Kind {
        kind: "ToolPin",
        plural: "toolpins",
        namespaced: true,
        description: "ToolPin: the reviewed definitions of one XBackend's tools (name, SHA-256 digest of the tool object in RFC 8785 canonical JSON, reviewed annotations). The filter lists only tools that match their pins and denies calls of tools that are not pinned or drifted; see docs/pins.md. Written by `mcp-access pin`.",
        generated_from: "config-schema/k8s/src/types/pins.rs (ToolPinSpec)",
        spec: described(schema_of::<ToolPinSpec>(), "The XBackend, its pinned tools, and what happens to tools that are not pinned."),
        status: Some(described(schema_of::<ConditionsStatus>(), "What controllers report.")),
        columns: json!([
            {"name": "Backend", "type": "string", "jsonPath": ".spec.targetRef.name"},
            {"name": "Unpinned", "type": "string", "jsonPath": ".spec.unpinned"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ]),
    })
}

/// The RateLimitPolicy CRD as a value.
pub fn rate_limit_policy_crd() -> Value {
    custom_resource(Kind {
        kind: "RateLimitPolicy",
        plural: "ratelimitpolicies",
        namespaced: true,
        description: "RateLimitPolicy: how many requests the callers of a Gateway, HTTPRoute or XBackend may make per window, counted per caller, tool or any CEL expression after the access decision allowed; see docs/semantics.md §8.",
        generated_from: "config-schema/k8s/src/types/ratelimit.rs (RateLimitPolicySpec)",
        spec: described(schema_of::<RateLimitPolicySpec>(), "The targets, the limits (or a Gateway's defaults/overrides), and where they are counted (Local or Global)."),
        status: Some(described(schema_of::<PolicyStatus>(), "What controllers report, per ancestor.")),
        columns: json!([
            {"name": "Mode", "type": "string", "jsonPath": ".spec.mode"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ]),
    })
}

const HEADER: &str = "# Generated by mcp-access from its Rust types (config-schema/k8s/src/crd.rs); do not edit.\n# Regenerate: UPDATE_CRD=1 cargo test -p mcp-access-k8s --test crd\n";

/// A CRD as the YAML file that is committed and applied.
fn committed(crd: &Value) -> String {
    let body = serde_norway::to_string(crd).unwrap_or_default();
    format!("{HEADER}{body}")
}

/// The AccessPolicy CRD as the YAML file that is committed and applied.
pub fn crd_yaml() -> String {
    committed(&crd())
}

/// The FilterSettings CRD as the YAML file that is committed and applied.
pub fn filter_settings_crd_yaml() -> String {
    committed(&filter_settings_crd())
}

/// The ToolPin CRD as the YAML file that is committed and applied.
pub fn tool_pin_crd_yaml() -> String {
    committed(&tool_pin_crd())
}

/// The RateLimitPolicy CRD as the YAML file that is committed and applied.
pub fn rate_limit_policy_crd_yaml() -> String {
    committed(&rate_limit_policy_crd())
}
