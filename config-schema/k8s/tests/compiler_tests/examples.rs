//! Every CRD example of kube-agentic-networking (vendored in `crds/upstream`): the valid ones
//! pass validation, the invalid ones are rejected with the message the CRD gives.

use std::path::{Path, PathBuf};

use mcp_access_k8s::{compile, reason, Manifests, Options};

fn examples(kind: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../crds/upstream/kube-agentic-networking/examples")
        .join(kind)
}

/// The file names in `dir`, sorted; a missing folder fails the test by name.
fn list(dir: &Path) -> Vec<String> {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| {
        panic!(
            "the vendored CRD examples are missing at {}: {e}",
            dir.display()
        )
    });
    let mut names: Vec<String> = entries
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn load(path: &PathBuf) -> Manifests {
    Manifests::load_paths(std::slice::from_ref(path), "default").unwrap()
}

#[test]
fn every_valid_example_passes_validation() {
    let dir = examples("valid");
    let files = list(&dir);
    assert_eq!(
        files,
        VALID,
        "the vendored valid examples under {}",
        dir.display()
    );
    for f in files.iter().map(|f| dir.join(f)) {
        let m = load(&f);
        assert!(
            m.problems().is_empty(),
            "{}: {:?}",
            f.display(),
            m.problems()
        );
        assert_eq!(
            m.backends.len() + m.policies.len(),
            1,
            "{}: one object expected",
            f.display()
        );
    }
}

const VALID: &[&str] = &[
    "accesspolicy.yaml",
    "accesspolicy_v1alpha1.yaml",
    "backend.yaml",
    "cel-policy.yaml",
];

/// (file, field, message the CRD gives)
const INVALID: &[(&str, &str, &str)] = &[
    (
        "backend-both.yaml",
        "spec.mcp",
        "exactly one of the fields in [serviceName hostname] must be set",
    ),
    (
        "cel-missing-fields.yaml",
        "spec.rules[0].authorization",
        "cel must be specified when type is set to 'CEL'",
    ),
    (
        "policy-v1alpha1-invalid-mcp-method-params.yaml",
        "spec.rules[0].authorization.mcp.methods[0]",
        "Params can only be specified for get, call, subscribe, unsubscribe, or read methods",
    ),
    (
        "policy-v1alpha1-wrong-action-ext-auth.yaml",
        "spec",
        "externalAuth must be specified when action is set to 'ExternalAuth'",
    ),
    (
        "policy-v1alpha1-wrong-target-kind.yaml",
        "spec.targetRefs",
        "All targetRefs must have the same Kind",
    ),
    (
        "policy-wrong-authz-type.yaml",
        "spec.rules[0].authorization.type",
        "Unsupported value: \"InvalidTypeEnum\": supported values: \"Inline\", \"CEL\"",
    ),
];

#[test]
fn every_invalid_example_is_rejected_with_the_crd_reason() {
    let dir = examples("invalid");
    let files = list(&dir);
    let mut expected: Vec<String> = INVALID.iter().map(|x| x.0.to_string()).collect();
    expected.sort();
    assert_eq!(files, expected, "an example without an expectation");
    for (file, field, message) in INVALID {
        let m = load(&dir.join(file));
        let problems = m.problems();
        assert!(
            problems
                .iter()
                .any(|p| p.field == *field && p.message.contains(message)),
            "{file}: expected `{field}: {message}`, got {problems:#?}"
        );
        // The message names file, document, object and field.
        let text = problems[0].to_string();
        assert!(text.contains(file) && text.contains("document 1"), "{text}");
        assert!(text.contains(&problems[0].field), "{text}");
        // Nothing of the object reaches the bundle; its status says why.
        assert!(m.policies.is_empty() && m.backends.is_empty(), "{file}");
        let c = compile(&m, &Options::default());
        let st = c
            .report
            .policies
            .iter()
            .chain(&c.report.backends)
            .next()
            .unwrap();
        assert_eq!(st.conditions[0].reason, reason::INVALID);
        assert!(st.conditions[0].message.contains(message), "{st:?}");
        assert!(c.bundle.policies.is_empty() && c.bundle.backends.is_empty());
    }
}

#[test]
fn valid_examples_compile_with_honest_statuses() {
    // Each example alone: the targets do not exist, CEL is not supported.
    let m = load(&examples("valid"));
    let c = compile(&m, &Options::default());
    let by_name = |n: &str| {
        c.report
            .policies
            .iter()
            .find(|p| p.name == n)
            .unwrap_or_else(|| panic!("{n} missing"))
            .clone()
    };
    // valid-policy targets XBackend valid-backend, which exists, with a gRPC authorizer.
    let grpc = by_name("valid-policy");
    assert_eq!(grpc.conditions[0].reason, reason::ACCEPTED, "{grpc:?}");
    assert!(c
        .bundle
        .authorizers
        .iter()
        .any(|a| a.protocol == mcp_access_bundle::AuthorizerProtocol::Grpc));
    // cel-policy targets my-backend, which does not exist.
    assert_eq!(
        by_name("cel-policy").conditions[0].reason,
        reason::TARGET_NOT_FOUND
    );
    assert_eq!(
        by_name("valid-policy-v1alpha1").conditions[0].reason,
        reason::TARGET_NOT_FOUND
    );
    mcp_access_bundle::validate(&c.bundle).unwrap();
}
