//! Reading manifests: files and directories of multi-document YAML or JSON (including
//! `kind: List`), each object recognised by `apiVersion` and `kind`, parsed strictly and
//! validated as its CRD would be.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::check::{self, Checker, FieldError};
use crate::refs::NsName;
use crate::types::*;
use crate::validate;

mod duplicates;
mod pins;

use duplicates::{duplicate_in_yaml, flow_duplicate};
pub use pins::{PinView, ToolPinView};

/// Where an object came from.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Origin {
    pub(crate) file: String,
    /// 1-based document number within the file.
    pub(crate) document: usize,
    /// Index in `items` when the document is a `List`.
    pub(crate) item: Option<usize>,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: document {}", self.file, self.document)?;
        if let Some(i) = self.item {
            write!(f, " items[{i}]")?;
        }
        Ok(())
    }
}

/// `metadata` as the compiler uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    pub(crate) name: String,
    pub namespace: String,
    /// `creationTimestamp` as (seconds, nanoseconds) since the epoch.
    pub(crate) created: Option<(i64, u32)>,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) annotations: BTreeMap<String, String>,
    /// `metadata.generation`, when the manifest carries one (from a cluster).
    pub(crate) generation: Option<i64>,
}

/// An object that passed validation.
#[derive(Debug, Clone)]
pub struct Item<S> {
    pub(crate) origin: Origin,
    /// API group as written (`agentic.prototype.x-k8s.io` stays as it is).
    pub(crate) group: String,
    pub(crate) version: String,
    /// Kind as written (`ReferencePolicy` stays as it is).
    pub(crate) kind: String,
    pub meta: Meta,
    pub(crate) spec: S,
    /// The spec as written (a defaults/overrides `condition` reads it as `self`).
    pub(crate) raw_spec: Value,
}

impl Meta {
    pub fn labels(&self) -> &BTreeMap<String, String> {
        &self.labels
    }

    pub fn annotations(&self) -> &BTreeMap<String, String> {
        &self.annotations
    }
}

impl<S> Item<S> {
    /// `metadata.name`.
    pub fn name(&self) -> &str {
        &self.meta.name
    }

    /// `group/version` as written (`version` for the core group).
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The spec, parsed.
    pub fn spec(&self) -> &S {
        &self.spec
    }

    /// The spec as written.
    pub fn raw_spec(&self) -> &Value {
        &self.raw_spec
    }

    /// `namespace/name`.
    pub(crate) fn id(&self) -> String {
        format!("{}/{}", self.meta.namespace, self.meta.name)
    }

    /// `namespace/name`, typed.
    pub(crate) fn ns_name(&self) -> NsName {
        NsName::new(&self.meta.namespace, &self.meta.name)
    }
}

/// Either version of an XAccessPolicy; an `AccessPolicy` (group `mcp-access.io`) has the
/// v1alpha1 spec (with its extensions).
#[derive(Debug, Clone)]
pub enum PolicySpec {
    V0(Box<PolicySpecV0>),
    V1(Box<PolicySpecV1>),
}

impl PolicySpec {
    pub(crate) fn target_refs(&self) -> &[TargetRef] {
        match self {
            PolicySpec::V0(s) => s.target_refs.as_deref().unwrap_or_default(),
            PolicySpec::V1(s) => s.target_refs.as_deref().unwrap_or_default(),
        }
    }
}

/// A problem that makes an object (or a whole document) unusable: what the API server
/// would reject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub(crate) origin: Origin,
    /// Kind of the object, if known.
    pub(crate) kind: String,
    /// `namespace/name` of the object, if known.
    pub(crate) object: String,
    pub field: String,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.origin)?;
        if !self.kind.is_empty() {
            write!(f, ": {}", self.kind)?;
            if !self.object.is_empty() {
                write!(f, " {}", self.object)?;
            }
        }
        if self.field.is_empty() {
            write!(f, ": {}", self.message)
        } else {
            write!(f, ": {}: {}", self.field, self.message)
        }
    }
}

/// An object of a kind the compiler does not read (it is listed, never silently dropped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub(crate) origin: Origin,
    pub(crate) api_version: String,
    pub(crate) kind: String,
    pub(crate) object: String,
}

/// An object the API server would reject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    pub(crate) origin: Origin,
    pub(crate) group: String,
    pub(crate) version: String,
    pub(crate) kind: String,
    pub(crate) namespace: String,
    pub(crate) name: String,
    pub(crate) errors: Vec<FieldError>,
    /// Its `spec` as written (a rejected ToolPin's target still gets a fail-closed stand-in).
    pub(crate) raw_spec: Value,
}

/// Everything read from the inputs.
#[derive(Debug, Default, Clone)]
pub struct Manifests {
    pub gateways: Vec<Item<GatewaySpec>>,
    pub routes: Vec<Item<HttpRouteSpec>>,
    pub grants: Vec<Item<ReferenceGrantSpec>>,
    /// XBackends of either kind (kube-agentic-networking's, Gateway API's).
    pub backends: Vec<Item<BackendSpec>>,
    pub policies: Vec<Item<PolicySpec>>,
    pub namespaces: Vec<Item<()>>,
    /// `FilterSettings` objects (at most one is used; the compiler refuses more).
    pub settings: Vec<Item<FilterSettingsSpec>>,
    /// `ToolPin` objects (at most one per XBackend).
    pub pins: Vec<Item<ToolPinSpec>>,
    /// `RateLimitPolicy` objects.
    pub rate_limits: Vec<Item<RateLimitPolicySpec>>,
    pub skipped: Vec<Skipped>,
    pub rejected: Vec<Rejected>,
    /// Documents that are not objects at all (syntax errors, missing apiVersion/kind).
    pub unreadable: Vec<Problem>,
    /// Subdirectories not read (a directory was read without `recursive`).
    pub skipped_dirs: Vec<PathBuf>,
}

impl Manifests {
    /// Every validation problem, in input order.
    pub fn problems(&self) -> Vec<Problem> {
        let mut out = self.unreadable.clone();
        for r in &self.rejected {
            for e in &r.errors {
                out.push(Problem {
                    origin: r.origin.clone(),
                    kind: r.kind.clone(),
                    object: if r.name.is_empty() {
                        String::new()
                    } else {
                        format!("{}/{}", r.namespace, r.name)
                    },
                    field: e.field.clone(),
                    message: e.message.clone(),
                });
            }
        }
        out.sort_by(|a, b| a.origin.cmp(&b.origin));
        out
    }

    /// Appends what another read found.
    pub fn extend(&mut self, more: Manifests) {
        self.gateways.extend(more.gateways);
        self.routes.extend(more.routes);
        self.grants.extend(more.grants);
        self.backends.extend(more.backends);
        self.policies.extend(more.policies);
        self.namespaces.extend(more.namespaces);
        self.settings.extend(more.settings);
        self.pins.extend(more.pins);
        self.rate_limits.extend(more.rate_limits);
        self.skipped.extend(more.skipped);
        self.rejected.extend(more.rejected);
        self.unreadable.extend(more.unreadable);
        self.skipped_dirs.extend(more.skipped_dirs);
    }

    /// Reads files and directories (recursively: `*.yaml`, `*.yml`, `*.json`, sorted by name).
    /// Objects without a namespace get `default_namespace`.
    pub fn load_paths(paths: &[PathBuf], default_namespace: &str) -> Result<Manifests, String> {
        Manifests::load(paths, default_namespace, true)
    }

    /// Reads files and directories: the `*.yaml`, `*.yml` and `*.json` files of a directory,
    /// sorted by name, and (`recursive`) of its subdirectories, else the subdirectories are
    /// listed in [`Manifests::skipped_dirs`] (kubectl's `-f DIR` and `-f DIR -R`).
    pub fn load(
        paths: &[PathBuf],
        default_namespace: &str,
        recursive: bool,
    ) -> Result<Manifests, String> {
        let mut files = Vec::new();
        let mut skipped_dirs = Vec::new();
        for p in paths {
            collect_files(p, recursive, &mut files, &mut skipped_dirs)?;
        }
        let mut m = Manifests {
            skipped_dirs,
            ..Manifests::default()
        };
        for f in files {
            let text = std::fs::read_to_string(&f)
                .map_err(|e| format!("cannot read {}: {e}", f.display()))?;
            m.add_text(&f.display().to_string(), &text, default_namespace);
        }
        Ok(m)
    }

    /// Reads one file's text (multi-document YAML, or JSON: one value, a stream of values,
    /// or a `List`). A byte order mark that starts it is not text (editors on Windows write
    /// one; YAML 1.2 and kubectl read past it).
    pub fn add_text(&mut self, file: &str, text: &str, default_namespace: &str) {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let json_docs = || -> Vec<Result<Value, String>> {
            let mut docs: Vec<Result<Value, String>> = serde_json::Deserializer::from_str(text)
                .into_iter::<Value>()
                .map(|r| r.map_err(|e| format!("invalid JSON: {e}")))
                .collect();
            // serde_json keeps the last of two equal keys silently: refused, as in YAML.
            if docs.iter().all(Result::is_ok) {
                if let Some(d) = flow_duplicate(text, 0, true) {
                    if let Some(doc) = docs.get_mut(d.value) {
                        *doc = Err(format!(
                            "invalid JSON: duplicate key {:?} ({})",
                            d.key,
                            d.at()
                        ));
                    }
                }
            }
            docs
        };
        let docs = if file.ends_with(".json") {
            json_docs()
        } else if text.trim_start().starts_with('{') {
            // JSON, unless it only parses as YAML (a flow mapping).
            let j = json_docs();
            if j.iter().all(Result::is_ok) {
                j
            } else {
                yaml_documents(text)
            }
        } else {
            yaml_documents(text)
        };
        for (i, doc) in docs.into_iter().enumerate() {
            let origin = Origin {
                file: file.to_string(),
                document: i + 1,
                item: None,
            };
            match doc {
                Err(message) => self.unreadable.push(Problem {
                    origin,
                    kind: String::new(),
                    object: String::new(),
                    field: String::new(),
                    message,
                }),
                Ok(Value::Null) => {}
                Ok(v) => self.add_value(origin, v, default_namespace),
            }
        }
    }

    fn unreadable(&mut self, origin: Origin, message: impl Into<String>) {
        self.unreadable.push(Problem {
            origin,
            kind: String::new(),
            object: String::new(),
            field: String::new(),
            message: message.into(),
        });
    }

    fn add_value(&mut self, origin: Origin, v: Value, default_namespace: &str) {
        let Value::Object(map) = &v else {
            return self.unreadable(origin, "a document must be a Kubernetes object (a mapping)");
        };
        let api_version = map.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = map.get("kind").and_then(Value::as_str).unwrap_or("");
        if api_version.is_empty() || kind.is_empty() {
            return self.unreadable(origin, "Object 'apiVersion' and 'kind' must be set");
        }
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g.to_string(), v.to_string()),
            None => (String::new(), api_version.to_string()),
        };
        if kind == "List" && group.is_empty() {
            let items = map.get("items").and_then(Value::as_array).cloned();
            for (i, item) in items.unwrap_or_default().into_iter().enumerate() {
                let o = Origin {
                    item: Some(i),
                    ..origin.clone()
                };
                self.add_value(o, item, default_namespace);
            }
            return;
        }
        let kind = kind.to_string();
        let Some(versions) = versions(&group, &kind) else {
            let (namespace, name) = object_name(map, default_namespace);
            self.skipped.push(Skipped {
                origin,
                api_version: api_version.to_string(),
                kind,
                object: format!("{namespace}/{name}"),
            });
            return;
        };
        let doc = Doc {
            origin,
            group: &group,
            version: &version,
            kind: &kind,
            default_namespace,
        };
        if !versions.contains(&version.as_str()) {
            let msg = if versions.is_empty() {
                format!("no matches for kind \"{kind}\" in group \"{group}\"")
            } else {
                format!("no matches for kind \"{kind}\" in version \"{api_version}\"")
            };
            return self.reject_doc(&doc, map, "", msg);
        }
        match kind.as_str() {
            "Gateway" => {
                if let Some(it) = self.typed(&doc, v, validate::gateway) {
                    self.gateways.push(it);
                }
            }
            "HTTPRoute" => {
                if let Some(it) = self.typed(&doc, v, validate::http_route) {
                    self.routes.push(it);
                }
            }
            "ReferenceGrant" | "ReferencePolicy" => {
                if let Some(it) = self.typed(&doc, v, validate::reference_grant) {
                    self.grants.push(it);
                }
            }
            "XBackend" if group == GATEWAY_X_GROUP => {
                if let Some(it) = self.typed(&doc, v, validate::gateway_xbackend) {
                    self.backends
                        .push(map_spec(it, |s| BackendSpec::Gateway(Box::new(s))));
                }
            }
            "XBackend" => {
                if let Some(it) = self.typed(&doc, v, validate::xbackend) {
                    self.backends.push(map_spec(it, BackendSpec::Agentic));
                }
            }
            "XAccessPolicy" if version == "v0alpha0" => {
                if let Some(it) = self.typed(&doc, v, validate::policy_v0) {
                    let it = map_spec(it, |s| PolicySpec::V0(Box::new(s)));
                    self.policies.push(it);
                }
            }
            "XAccessPolicy" => {
                if let Some(it) = self.typed(&doc, v, validate::policy_v1) {
                    let it = map_spec(it, |s| PolicySpec::V1(Box::new(s)));
                    self.policies.push(it);
                }
            }
            "AccessPolicy" => {
                if let Some(it) = self.typed(&doc, v, validate::access_policy) {
                    let it = map_spec(it, |s| PolicySpec::V1(Box::new(s)));
                    self.policies.push(it);
                }
            }
            "FilterSettings" => {
                if let Some(it) = self.typed(&doc, v, validate::filter_settings) {
                    self.settings.push(it);
                }
            }
            "ToolPin" => {
                if let Some(it) = self.typed(&doc, v, validate::tool_pin) {
                    self.pins.push(it);
                }
            }
            "RateLimitPolicy" => {
                if let Some(it) = self.typed(&doc, v, validate::rate_limit_policy) {
                    self.rate_limits.push(it);
                }
            }
            _ => self.namespace(doc.origin, v),
        }
    }

    /// Records an object the API server would reject.
    fn reject(
        &mut self,
        doc: &Doc,
        (namespace, name): (String, String),
        errors: Vec<FieldError>,
        raw_spec: Value,
    ) {
        self.rejected.push(Rejected {
            origin: doc.origin.clone(),
            group: doc.group.to_string(),
            version: doc.version.to_string(),
            kind: doc.kind.to_string(),
            namespace,
            name,
            errors,
            raw_spec,
        });
    }

    /// Rejects a document that is not a valid object of its kind, with one error.
    fn reject_doc(
        &mut self,
        doc: &Doc,
        map: &serde_json::Map<String, Value>,
        field: &str,
        message: String,
    ) {
        let (namespace, name) = object_name(map, doc.default_namespace);
        let error = FieldError {
            field: field.to_string(),
            message,
        };
        let raw_spec = map.get("spec").cloned().unwrap_or(Value::Null);
        self.reject(doc, (namespace, name), vec![error], raw_spec);
    }

    /// Reads `v` strictly as a `T`; when it is not one, the document is rejected.
    fn deserialize<T: DeserializeOwned>(&mut self, doc: &Doc, v: Value) -> Option<T> {
        let map = match &v {
            Value::Object(m) => m.clone(),
            _ => serde_json::Map::new(),
        };
        match serde_path_to_error::deserialize(v) {
            Ok(o) => Some(o),
            Err(e) => {
                let field = e.path().to_string();
                let message = strict_message(&e.into_inner().to_string());
                let field = if field == "." { String::new() } else { field };
                self.reject_doc(doc, &map, &field, message);
                None
            }
        }
    }

    /// Reads, validates and keeps an object of one of the compiled kinds.
    fn typed<S: DeserializeOwned + Default>(
        &mut self,
        doc: &Doc,
        v: Value,
        check_spec: fn(&S, &mut Checker),
    ) -> Option<Item<S>> {
        let raw_spec = v.get("spec").cloned().unwrap_or(Value::Null);
        let obj: Object<S> = self.deserialize(doc, v)?;
        let mut c = Checker::default();
        let meta = metadata(&obj.metadata, doc.default_namespace, &mut c);
        match &obj.spec {
            Some(spec) => check_spec(spec, &mut c),
            None => {
                c.err("spec", "Required value");
            }
        }
        if !c.errors.is_empty() {
            self.reject(doc, (meta.namespace, meta.name), c.errors, raw_spec);
            return None;
        }
        Some(Item {
            origin: doc.origin.clone(),
            group: doc.group.to_string(),
            version: doc.version.to_string(),
            kind: doc.kind.to_string(),
            meta,
            spec: obj.spec.unwrap_or_default(),
            raw_spec,
        })
    }

    fn namespace(&mut self, origin: Origin, v: Value) {
        let doc = Doc {
            origin,
            group: "",
            version: "v1",
            kind: "Namespace",
            default_namespace: "",
        };
        let Some(ns) = self.deserialize::<NamespaceObject>(&doc, v) else {
            return;
        };
        let mut c = Checker::default();
        let name = ns.metadata.name.clone().unwrap_or_default();
        if c.required("metadata.name", &ns.metadata.name) {
            c.string("metadata.name", &name, 1, 63, Some(check::DNS_LABEL));
        }
        if !c.errors.is_empty() {
            self.reject(&doc, (String::new(), name), c.errors, Value::Null);
            return;
        }
        let mut labels = ns.metadata.labels.unwrap_or_default();
        labels.insert("kubernetes.io/metadata.name".into(), name.clone());
        self.namespaces.push(Item {
            origin: doc.origin,
            group: String::new(),
            version: "v1".into(),
            kind: "Namespace".into(),
            meta: Meta {
                name,
                namespace: String::new(),
                created: None,
                labels,
                annotations: BTreeMap::new(),
                generation: None,
            },
            spec: (),
            raw_spec: Value::Null,
        });
    }
}

/// A document being read: where it is and what it says it is.
struct Doc<'d> {
    origin: Origin,
    group: &'d str,
    version: &'d str,
    kind: &'d str,
    /// The namespace of objects that name none.
    default_namespace: &'d str,
}

/// The versions read of a kind; None for kinds the compiler does not read (other groups).
fn versions(group: &str, kind: &str) -> Option<&'static [&'static str]> {
    Some(match (group, kind) {
        (GATEWAY_GROUP, "Gateway" | "HTTPRoute") => &["v1", "v1beta1"],
        (GATEWAY_GROUP, "ReferenceGrant") => &["v1", "v1beta1", "v1alpha2"],
        (GATEWAY_GROUP, "ReferencePolicy") => &["v1alpha2"],
        (AGENTIC_GROUP | PROTOTYPE_GROUP, "XBackend") => &["v0alpha0"],
        (GATEWAY_X_GROUP, "XBackend") => &["v1alpha1"],
        (AGENTIC_GROUP | PROTOTYPE_GROUP, "XAccessPolicy") => &["v0alpha0", "v1alpha1"],
        (MCP_ACCESS_GROUP, "AccessPolicy" | "FilterSettings" | "ToolPin" | "RateLimitPolicy") => {
            &["v1alpha1"]
        }
        ("", "Namespace") => &["v1"],
        (GATEWAY_GROUP | AGENTIC_GROUP | PROTOTYPE_GROUP | MCP_ACCESS_GROUP, _) => &[],
        _ => return None,
    })
}

fn map_spec<A, B>(it: Item<A>, f: impl FnOnce(A) -> B) -> Item<B> {
    Item {
        origin: it.origin,
        group: it.group,
        version: it.version,
        kind: it.kind,
        meta: it.meta,
        spec: f(it.spec),
        raw_spec: it.raw_spec,
    }
}

/// `metadata.namespace` (or `default_namespace`) and `metadata.name` of a document, as
/// far as they can be read.
fn object_name(map: &serde_json::Map<String, Value>, default_namespace: &str) -> (String, String) {
    let meta = map.get("metadata");
    let get = |k: &str| {
        meta.and_then(|m| m.get(k))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let ns = get("namespace");
    let ns = if ns.is_empty() {
        default_namespace.to_string()
    } else {
        ns
    };
    (ns, get("name"))
}

/// serde's wording, closer to kubectl's for unknown fields.
fn strict_message(m: &str) -> String {
    match m.strip_prefix("unknown field ") {
        Some(rest) => {
            let name = rest.split(',').next().unwrap_or(rest);
            format!("unknown field {name}")
        }
        None => m.to_string(),
    }
}

fn metadata(m: &ObjectMeta, default_namespace: &str, c: &mut Checker) -> Meta {
    let name = m.name.clone().unwrap_or_default();
    if m.name.is_none() {
        c.err("metadata.name", "Required value: name is required");
    } else {
        c.string("metadata.name", &name, 1, 253, Some(check::DNS_SUBDOMAIN));
    }
    let namespace = match &m.namespace {
        Some(ns) if !ns.is_empty() => {
            c.string("metadata.namespace", ns, 1, 63, Some(check::DNS_LABEL));
            ns.clone()
        }
        _ => default_namespace.to_string(),
    };
    let created = match &m.creation_timestamp {
        None => None,
        Some(ts) => {
            let parsed = check::parse_timestamp(ts);
            if parsed.is_none() {
                c.err(
                    "metadata.creationTimestamp",
                    format!("Invalid value: \"{ts}\": must be an RFC 3339 date-time"),
                );
            }
            parsed
        }
    };
    Meta {
        name,
        namespace,
        created,
        labels: m.labels.clone().unwrap_or_default(),
        annotations: m.annotations.clone().unwrap_or_default(),
        generation: m.generation.as_ref().and_then(Value::as_i64),
    }
}

fn yaml_documents(text: &str) -> Vec<Result<Value, String>> {
    let mut out = Vec::new();
    // serde_norway's own Value refuses duplicate keys in a mapping (serde_json's Value keeps
    // the last one silently): each document is read into it too, for that check only (it keeps
    // non-string keys, which serde_json reads as strings, as Kubernetes does).
    let mut checks = serde_norway::Deserializer::from_str(text);
    for doc in serde_norway::Deserializer::from_str(text) {
        let duplicate = checks
            .next()
            .and_then(|d| <serde_norway::Value as serde::Deserialize>::deserialize(d).err())
            .filter(|e| e.to_string().contains("duplicate entry"));
        let v: Result<Value, String> = match duplicate {
            Some(e) => Err(yaml_error(text, &e)),
            None => serde::Deserialize::deserialize(doc).map_err(|e| format!("invalid YAML: {e}")),
        };
        let failed = v.is_err();
        out.push(v);
        if failed {
            // The YAML stream cannot be resynchronised after a syntax error.
            break;
        }
    }
    out
}

/// A YAML error. serde_norway names a duplicate key but not where it is: both lines are
/// found in the text.
fn yaml_error(text: &str, e: &serde_norway::Error) -> String {
    let msg = e.to_string();
    let lines = msg
        .split_once("duplicate entry with key ")
        .and_then(|(_, k)| {
            serde_json::Deserializer::from_str(k)
                .into_iter::<String>()
                .next()
                .and_then(Result::ok)
        })
        .and_then(|k| duplicate_in_yaml(text, &k));
    match lines {
        Some(at) => format!("invalid YAML: {msg} ({at})"),
        None => format!("invalid YAML: {msg}"),
    }
}

fn collect_files(
    p: &Path,
    recursive: bool,
    out: &mut Vec<PathBuf>,
    skipped_dirs: &mut Vec<PathBuf>,
) -> Result<(), String> {
    let meta = std::fs::metadata(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
    if meta.is_file() {
        out.push(p.to_path_buf());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(p)
        .map_err(|e| format!("cannot read directory {}: {e}", p.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for e in entries {
        if e.is_dir() && recursive {
            collect_files(&e, recursive, out, skipped_dirs)?;
        } else if e.is_dir() {
            skipped_dirs.push(e);
        } else if e
            .extension()
            .and_then(|x| x.to_str())
            .is_some_and(|x| matches!(x, "yaml" | "yml" | "json"))
        {
            out.push(e);
        }
    }
    Ok(())
}
