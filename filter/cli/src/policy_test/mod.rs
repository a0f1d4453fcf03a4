//! `mcp-access test`: decision tests in YAML beside the manifests (docs/policy-tests.md).
//! Each case is a request run through `explain` (the filter's own request flow, authorizer
//! answers assumed) and its decision compared with what the case expects.

mod report;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use mcp_access_k8s::{compile, Compiled, Manifests, Options};
use serde::Deserialize;
use serde_json::Value;

use crate::error::CliError;
use crate::explain::{self, At, Explainer, Explanation, RequestSpec};
pub use report::{junit_xml, to_text};

/// The `apiVersion` of a test file's documents.
pub const API_VERSION: &str = "test.mcp-access.io/v1alpha1";
/// Their `kind`.
pub const KIND: &str = "PolicyTest";

/// One `PolicyTest` document.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TestDoc {
    pub api_version: String,
    pub kind: String,
    pub metadata: TestMeta,
    pub spec: TestSpec,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestMeta {
    pub name: String,
}

/// What is tested, and how.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TestSpec {
    /// Manifest files or directories, relative to the test file (else the command's `-f`).
    #[serde(default)]
    pub manifests: Vec<String>,
    /// The SPIFFE trust domain of ServiceAccount sources (as `--trust-domain`).
    pub trust_domain: Option<String>,
    /// Issuers whose verified tokens callers may present (as `--jwt-provider`'s issuer).
    #[serde(default)]
    pub jwt_issuers: Vec<String>,
    /// What every case's request starts from.
    #[serde(default)]
    pub defaults: RequestYaml,
    pub cases: Vec<Case>,
}

/// One test: a request and the decision it must get.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Case {
    pub name: String,
    #[serde(default)]
    pub request: RequestYaml,
    pub expect: Expect,
}

/// A request as a test writes it; what it leaves out comes from `defaults`, then from
/// `explain`'s client defaults (POST /mcp).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RequestYaml {
    /// The Gateway (`name` or `namespace/name`).
    pub gateway: Option<String>,
    pub listener: Option<String>,
    pub port: Option<u16>,
    /// The `:authority` the client sends.
    pub host: Option<String>,
    pub path: Option<String>,
    pub http_method: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The XBackend Envoy routes to (`name` or `namespace/name`), instead of the routes.
    pub backend: Option<String>,
    /// An Envoy route name, instead of the routes.
    pub route: Option<String>,
    pub caller: Option<CallerYaml>,
    pub mcp: Option<McpYaml>,
    /// The body as sent, instead of `mcp`.
    pub body: Option<String>,
    /// Authorizer answers, as `explain --assume`: POLICY (or authorizer, or `*`) ->
    /// `allow`, `deny`, `deny:STATUS` or `error`; a rate limit (`namespace/policy/limit`) ->
    /// `over` (no room: refused) or `under`.
    #[serde(default)]
    pub assume: BTreeMap<String, String>,
}

/// Who calls: one of a SPIFFE ID, a ServiceAccount or verified JWT claims; none: anonymous.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CallerYaml {
    pub spiffe: Option<String>,
    /// `namespace/name`.
    pub service_account: Option<String>,
    /// The claims of a token Envoy's `jwt_authn` verified (`iss`, `sub`, ...).
    pub jwt: Option<Value>,
}

/// The MCP request: a method and the item it names.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct McpYaml {
    /// Default: `tools/call` with `tool`, `prompts/get` with `prompt`, `resources/read` with
    /// `uri`.
    pub method: Option<String>,
    pub tool: Option<String>,
    pub prompt: Option<String>,
    pub uri: Option<String>,
    /// `params.arguments`.
    pub arguments: Option<Value>,
}

/// The decision expected; only what is given is compared.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Expect {
    /// `allow` or `deny`.
    pub decision: Option<String>,
    /// `gateway`, `backend` or `none` (denials).
    pub level: Option<String>,
    /// `allowed`, `not_allowed`, `deny_policy`, `external_auth_denied`, ...
    pub reason: Option<String>,
    /// The deciding policy: `namespace/name` or `name`; `null`: none.
    #[serde(default, deserialize_with = "some")]
    pub policy: Option<Option<String>>,
    /// The deciding rule; `null`: none.
    #[serde(default, deserialize_with = "some")]
    pub rule: Option<Option<String>>,
    /// The HTTP status of a denial.
    pub status: Option<u16>,
    /// The dry-run decision (docs/semantics.md §3.8).
    pub dry_run: Option<Box<Expect>>,
}

/// A field that is present, `null` included.
fn some<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

/// The outcome of one case.
#[derive(Debug, Clone)]
pub struct CaseResult {
    pub name: String,
    /// Empty: passed; else what differs, or the error.
    pub failures: Vec<String>,
    /// The decision as `explain` prints it (for failures).
    pub explanation: Option<String>,
}

/// The outcome of one test document.
#[derive(Debug, Clone)]
pub struct DocResult {
    pub file: PathBuf,
    pub name: String,
    /// A problem with the document itself (its manifests do not compile): no case ran.
    pub error: Option<String>,
    pub cases: Vec<CaseResult>,
}

impl DocResult {
    pub fn failed(&self) -> usize {
        self.cases.iter().filter(|c| !c.failures.is_empty()).count()
    }
}

/// Every test document in `paths` (files, or directories whose `.yaml` / `.yml` files are
/// read, not recursively), in order.
pub fn load(paths: &[PathBuf]) -> Result<Vec<(PathBuf, TestDoc)>, CliError> {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut in_dir: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| format!("{}: {e}", p.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.is_file() && f.extension().is_some_and(|x| x == "yaml" || x == "yml"))
                .collect();
            in_dir.sort();
            files.extend(in_dir);
        } else {
            files.push(p.clone());
        }
    }
    let mut out = Vec::new();
    for f in files {
        let text =
            std::fs::read_to_string(&f).map_err(|e| format!("cannot read {}: {e}", f.display()))?;
        for (i, doc) in serde_norway::Deserializer::from_str(&text).enumerate() {
            let at = format!("{}: document {}", f.display(), i + 1);
            let v = serde_norway::Value::deserialize(doc).map_err(|e| format!("{at}: {e}"))?;
            if v.is_null() {
                continue;
            }
            let t: TestDoc = serde_path_to_error::deserialize(v)
                .map_err(|e| format!("{at}: {}: {}", e.path(), e.inner()))?;
            if t.api_version != API_VERSION || t.kind != KIND {
                return Err(format!(
                    "{at}: not a test: apiVersion {API_VERSION} and kind {KIND} expected, got {} {}",
                    t.api_version, t.kind
                ).into());
            }
            out.push((f.clone(), t));
        }
    }
    if out.is_empty() {
        return Err("no test documents found".into());
    }
    Ok(out)
}

/// How the manifests are read and compiled: the command's flags.
pub struct Inputs {
    /// `-f`: manifests of test documents that name none.
    pub files: Vec<PathBuf>,
    pub namespace: String,
    pub recursive: bool,
    pub options: Options,
    /// Run against what `compile --allow-not-accepted` writes (stand-ins enforced) instead of
    /// refusing manifests with a policy not accepted.
    pub allow_not_accepted: bool,
}

/// Runs every document's cases.
pub fn run(docs: &[(PathBuf, TestDoc)], inputs: &Inputs) -> Vec<DocResult> {
    docs.iter()
        .map(|(file, doc)| {
            let mut result = DocResult {
                file: file.clone(),
                name: doc.metadata.name.clone(),
                error: None,
                cases: Vec::new(),
            };
            match compiled(file, &doc.spec, inputs) {
                Err(e) => result.error = Some(e.message),
                Ok(c) => {
                    // One engine for every case (a bundle that does not compile: each case's
                    // error).
                    let explainer = Explainer::new(&c.bundle, Some(&c.topology));
                    result.cases = doc
                        .spec
                        .cases
                        .iter()
                        .map(|case| run_case(explainer.as_ref(), &doc.spec.defaults, case))
                        .collect();
                }
            }
            result
        })
        .collect()
}

/// The manifests of a document compiled with its settings; an error when they have errors
/// or (without `allow_not_accepted`) a policy is not accepted, as `compile` refuses them.
fn compiled(file: &Path, spec: &TestSpec, inputs: &Inputs) -> Result<Compiled, CliError> {
    let base = file.parent().unwrap_or(Path::new("."));
    let paths: Vec<PathBuf> = if spec.manifests.is_empty() {
        inputs.files.clone()
    } else {
        spec.manifests.iter().map(|m| base.join(m)).collect()
    };
    if paths.is_empty() {
        return Err("no manifests: give spec.manifests or -f".into());
    }
    let mut o = inputs.options.clone();
    match (&o.trust_domain, &spec.trust_domain) {
        (Some(a), Some(b)) if a != b => {
            return Err(format!("spec.trustDomain {b} disagrees with --trust-domain {a}").into())
        }
        (None, Some(b)) => o.trust_domain = Some(b.clone()),
        _ => {}
    }
    for (i, issuer) in spec.jwt_issuers.iter().enumerate() {
        if !o.jwt_providers.iter().any(|p| &p.issuer == issuer) {
            o.jwt_providers.push(mcp_access_bundle::JwtProvider {
                issuer: issuer.clone(),
                metadata_key: format!("policy-test-{i}"),
            });
        }
    }
    let m = Manifests::load(&paths, &inputs.namespace, inputs.recursive)?;
    let c = compile(&m, &o);
    if !c.report.invalid.is_empty() {
        let errors: Vec<String> = c.report.invalid.iter().map(ToString::to_string).collect();
        return Err(format!("the manifests have errors: {}", errors.join("; ")).into());
    }
    let refused: Vec<String> = c
        .report
        .policies
        .iter()
        .filter(|p| !p.accepted())
        .map(|p| format!("{} {}/{}", p.kind, p.namespace, p.name))
        .collect();
    if !refused.is_empty() && !inputs.allow_not_accepted {
        return Err(format!(
            "not accepted: {} (compile refuses them; --allow-not-accepted tests their fail-closed stand-ins)",
            refused.join(", ")
        ).into());
    }
    Ok(c)
}

fn run_case(
    explainer: Result<&Explainer, &CliError>,
    defaults: &RequestYaml,
    case: &Case,
) -> CaseResult {
    let mut result = CaseResult {
        name: case.name.clone(),
        failures: Vec::new(),
        explanation: None,
    };
    let e = spec_of(defaults, &case.request).and_then(|spec| {
        explainer
            .map_err(Clone::clone)
            .and_then(|x| x.explain(&spec))
    });
    match e {
        Err(err) => result.failures.push(format!("error: {err}")),
        Ok(e) => {
            result.failures = compare(&case.expect, &actual(&e), "");
            if !result.failures.is_empty() {
                result.explanation = Some(explain::to_text(&e));
            }
        }
    }
    result
}

/// The decision as a case compares it.
struct Actual {
    decision: String,
    level: String,
    reason: String,
    policy: Option<String>,
    rule: Option<String>,
    status: Option<u16>,
    dry_run: Option<Box<Actual>>,
}

fn actual(e: &Explanation) -> Actual {
    Actual {
        decision: e.decision.as_str().to_string(),
        level: e.level.unwrap_or(At(None)).to_string(),
        reason: e.reason.to_string(),
        policy: e.policy.clone(),
        rule: e.rule.clone(),
        status: e.status,
        dry_run: e.dry_run.as_ref().map(|d| {
            Box::new(Actual {
                decision: d.decision.as_str().to_string(),
                level: d.level.unwrap_or(At(None)).to_string(),
                reason: d.reason.to_string(),
                policy: d.policy.clone(),
                rule: d.rule.clone(),
                status: None,
                dry_run: None,
            })
        }),
    }
}

/// What differs between `want` and `got` (`at`: `dryRun.` inside the dry run).
fn compare(want: &Expect, got: &Actual, at: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut check = |field: &str, want: Option<&str>, got: &str| {
        if let Some(w) = want.filter(|w| *w != got) {
            out.push(format!("{at}{field}: want {w}, got {got}"));
        }
    };
    check("decision", want.decision.as_deref(), &got.decision);
    check("level", want.level.as_deref(), &got.level);
    check("reason", want.reason.as_deref(), &got.reason);
    let name = |v: &Option<String>| v.clone().unwrap_or_else(|| "null".into());
    if let Some(w) = &want.policy {
        let matches = match (w, &got.policy) {
            (None, None) => true,
            (Some(w), Some(g)) => w == g || g.split_once('/').is_some_and(|(_, n)| n == w),
            _ => false,
        };
        if !matches {
            out.push(format!(
                "{at}policy: want {}, got {}",
                name(w),
                name(&got.policy)
            ));
        }
    }
    if let Some(w) = want.rule.as_ref().filter(|w| **w != got.rule) {
        out.push(format!(
            "{at}rule: want {}, got {}",
            name(w),
            name(&got.rule)
        ));
    }
    if let Some(w) = want.status.filter(|w| Some(*w) != got.status) {
        let got = got.status.map_or("none".into(), |s| s.to_string());
        out.push(format!("{at}status: want {w}, got {got}"));
    }
    if let Some(w) = &want.dry_run {
        match &got.dry_run {
            Some(g) => out.extend(compare(w, g, "dryRun.")),
            None => out.push(format!(
                "{at}dryRun: expected, but no dry-run policy concerns the request"
            )),
        }
    }
    out
}

/// The `explain` request of a case: its fields over the defaults.
fn spec_of(d: &RequestYaml, r: &RequestYaml) -> Result<RequestSpec, CliError> {
    let pick = |a: &Option<String>, b: &Option<String>| a.clone().or_else(|| b.clone());
    let mut headers = d.headers.clone();
    headers.extend(r.headers.clone());
    let mut assume_text = d.assume.clone();
    assume_text.extend(r.assume.clone());
    let (mut assume, mut limits) = (BTreeMap::new(), BTreeMap::new());
    for (k, v) in assume_text {
        match explain::parse_assumed(&v).map_err(|e| format!("assume {k}: {e}"))? {
            explain::Assumed::Authorizer(a) => assume.insert(k, a).map(drop),
            explain::Assumed::Limit(l) => limits.insert(k, l).map(drop),
        };
    }
    let caller = r.caller.as_ref().or(d.caller.as_ref());
    let mcp = r.mcp.as_ref().or(d.mcp.as_ref());
    let body = pick(&r.body, &d.body);
    if body.is_some() && r.mcp.is_some() {
        return Err("give mcp or body, not both".into());
    }
    let (mcp_method, param, arguments) = match mcp {
        None => (None, None, None),
        Some(m) => {
            let named = [
                (&m.tool, "tools/call"),
                (&m.prompt, "prompts/get"),
                (&m.uri, "resources/read"),
            ];
            let given: Vec<_> = named.iter().filter(|(v, _)| v.is_some()).collect();
            let (param, method) = match given.as_slice() {
                [] => (None, None),
                [(v, method)] => ((*v).clone(), Some(*method)),
                _ => return Err("mcp: give one of tool, prompt and uri".into()),
            };
            let method = m.method.clone().or(method.map(str::to_string));
            if method.is_none() {
                return Err("mcp: give a method (or a tool, prompt or uri)".into());
            }
            if m.arguments.as_ref().is_some_and(|a| !a.is_object()) {
                return Err("mcp.arguments must be a mapping".into());
            }
            (method, param, m.arguments.clone())
        }
    };
    let (spiffe, service_account, jwt_claims) = match caller {
        None => (None, None, None),
        Some(c) => {
            let given = [
                c.spiffe.is_some(),
                c.service_account.is_some(),
                c.jwt.is_some(),
            ];
            if given.iter().filter(|g| **g).count() > 1 {
                return Err("caller: give one of spiffe, serviceAccount and jwt".into());
            }
            if c.jwt.as_ref().is_some_and(|j| !j.is_object()) {
                return Err("caller.jwt must be a mapping of claims (iss, sub, ...)".into());
            }
            (c.spiffe.clone(), c.service_account.clone(), c.jwt.clone())
        }
    };
    Ok(RequestSpec {
        gateway: pick(&r.gateway, &d.gateway),
        listener: pick(&r.listener, &d.listener),
        port: r.port.or(d.port),
        host: pick(&r.host, &d.host),
        path: pick(&r.path, &d.path),
        method: pick(&r.http_method, &d.http_method),
        headers: headers.into_iter().collect(),
        backend: pick(&r.backend, &d.backend),
        route: pick(&r.route, &d.route),
        spiffe,
        service_account,
        mcp_method,
        param,
        arguments,
        body,
        assume,
        limits,
        jwt_claims,
        revision: None,
        time: None,
    })
}
