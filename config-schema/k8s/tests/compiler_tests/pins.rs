//! ToolPins: validated as the API server would, one per XBackend, compiled into the bundle
//! backend's pins; mistakes are refused with their field paths and never open access.

use mcp_access_bundle::Unpinned;
use mcp_access_k8s::{compile, reason, Compiled, Manifests, Options};

fn base() -> String {
    crate::common::xbackend("tools", "tools-server", None)
}

const D1: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
const D2: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

fn pin(name: &str, created: &str, target: &str, tools: &str) -> String {
    format!(
        r#"
apiVersion: mcp-access.io/v1alpha1
kind: ToolPin
metadata: {{name: {name}, namespace: mcp, creationTimestamp: "{created}"}}
spec:
  targetRef: {{group: agentic.networking.x-k8s.io, kind: XBackend, name: {target}}}
  tools:
{tools}"#
    )
}

fn two_tools() -> String {
    format!(
        r#"  - name: echo
    digest: {D1}
    annotations: {{readOnlyHint: true, title: Echo}}
    definition: {{name: echo, description: Echo the text, inputSchema: {{type: object}}}}
  - name: rm
    digest: {D2}
"#
    )
}

fn compiled(docs: &[String], o: &Options) -> (Manifests, Compiled) {
    let mut m = Manifests::default();
    m.add_text(
        "pins.yaml",
        &format!("{}---\n{}", base(), docs.join("---\n")),
        "default",
    );
    let c = compile(&m, o);
    mcp_access_bundle::validate(&c.bundle).unwrap();
    (m, c)
}

#[test]
fn an_accepted_toolpin_puts_its_pins_on_the_backend() {
    let (m, c) = compiled(
        &[pin(
            "tools-pins",
            "2024-01-01T00:00:00Z",
            "tools",
            &two_tools(),
        )],
        &Options::default(),
    );
    assert!(m.problems().is_empty(), "{:#?}", m.problems());
    assert!(c.report.all_accepted(), "{:#?}", c.report);
    let st = &c.report.pins[0];
    assert_eq!(
        (st.kind.as_str(), st.name.as_str()),
        ("ToolPin", "tools-pins")
    );
    assert_eq!(st.conditions[0].target, "XBackend mcp/tools");
    assert!(
        st.conditions[0].message.contains("2 tools pinned"),
        "{st:?}"
    );
    let pins = c.bundle.backends[0].pins.as_ref().unwrap();
    assert_eq!(pins.source, "mcp/tools-pins");
    assert_eq!(pins.unpinned, Unpinned::Deny);
    let names: Vec<&str> = pins.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["echo", "rm"]);
    let echo = pins.tools[0].annotations.as_ref().unwrap();
    assert_eq!(
        (echo.read_only_hint, echo.title.as_deref()),
        (Some(true), Some("Echo"))
    );
    assert_eq!(pins.tools[1].annotations, None);
    // Its status, as a controller writes it.
    let statuses = mcp_access_k8s::status_objects(&c.report, &c.topology, "2024-01-01T00:00:00Z");
    let s = statuses.iter().find(|s| s["kind"] == "ToolPin").unwrap();
    assert_eq!(s["status"]["conditions"][0]["type"], "Accepted");
    assert_eq!(s["status"]["conditions"][0]["status"], "True");
}

#[test]
fn a_toolpin_of_an_unknown_backend_is_not_accepted_and_named() {
    let (_, c) = compiled(
        &[pin("p", "2024-01-01T00:00:00Z", "nope", &two_tools())],
        &Options::default(),
    );
    assert!(!c.report.all_accepted());
    assert_eq!(
        c.report.pins[0].conditions[0].reason,
        reason::TARGET_NOT_FOUND
    );
    assert!(
        c.report
            .unenforced
            .iter()
            .any(|u| u.contains("ToolPin mcp/p") && u.contains("mcp/nope")),
        "{:?}",
        c.report.unenforced
    );
    assert_eq!(c.bundle.backends[0].pins, None);
}

#[test]
fn two_toolpins_for_one_backend_conflict_and_fail_closed() {
    let docs = [
        pin("old", "2024-01-01T00:00:00Z", "tools", &two_tools()),
        pin(
            "new",
            "2024-02-01T00:00:00Z",
            "tools",
            &format!("  - {{name: other, digest: {D1}}}\n"),
        ),
    ];
    let (_, c) = compiled(&docs, &Options::default());
    assert!(!c.report.all_accepted());
    let new = c.report.pins.iter().find(|p| p.name == "new").unwrap();
    assert_eq!(new.conditions[0].reason, reason::CONFLICTED);
    assert!(new.conditions[0]
        .message
        .contains("ToolPin mcp/old pins this XBackend already"));
    let old = c.report.pins.iter().find(|p| p.name == "old").unwrap();
    assert!(old.accepted());
    // Proceeding anyway: nothing of the backend passes.
    let pins = c.bundle.backends[0].pins.as_ref().unwrap();
    assert!(
        pins.tools.is_empty() && pins.unpinned == Unpinned::Deny,
        "{pins:?}"
    );
    assert!(pins.source.contains("mcp/new (not accepted"), "{pins:?}");
    // As a controller that drops what it does not accept: the senior one.
    let skip = Options {
        skip_rejected: true,
        ..Options::default()
    };
    let (_, c) = compiled(&docs, &skip);
    assert_eq!(
        c.bundle.backends[0].pins.as_ref().unwrap().source,
        "mcp/old"
    );
}

#[test]
fn invalid_toolpins_are_rejected_with_field_paths_and_fail_closed() {
    let cases: Vec<(String, &str, &str)> = vec![
        (
            format!("  - {{name: echo, digest: {D1}}}\n  - {{name: echo, digest: {D2}}}\n"),
            "spec.tools[1]",
            "Duplicate value",
        ),
        (
            "  - {name: echo, digest: \"sha256:ABC\"}\n".into(),
            "spec.tools[0].digest",
            "should match '^sha256:[0-9a-f]{64}$'",
        ),
        (
            "  - {name: echo}\n".into(),
            "spec.tools[0].digest",
            "Required value",
        ),
        (
            format!("  - {{digest: {D1}}}\n"),
            "spec.tools[0].name",
            "Required value",
        ),
        (
            format!("  - {{name: echo, digest: {D1}, definition: {{name: rm}}}}\n"),
            "spec.tools[0].definition",
            "definition.name must be the pinned tool's name",
        ),
        (
            format!("  - {{name: echo, digest: {D1}, annotations: {{readOnly: true}}}}\n"),
            "spec.tools[0].annotations.readOnly",
            "unknown field",
        ),
        (
            format!(
                "  - {{name: echo, digest: {D1}, annotations: {{readOnlyHint: yes please}}}}\n"
            ),
            "spec.tools[0].annotations.readOnlyHint",
            "invalid type",
        ),
    ];
    for (tools, field, message) in cases {
        let doc = pin("bad", "2024-01-01T00:00:00Z", "tools", &tools);
        let (m, c) = compiled(&[doc], &Options::default());
        let problems = m.problems();
        assert!(
            problems
                .iter()
                .any(|p| p.field == field && p.message.contains(message)),
            "{field}: {problems:#?}"
        );
        assert!(!c.report.all_accepted());
        assert_eq!(c.report.pins[0].conditions[0].reason, reason::INVALID);
        let pins = c.bundle.backends[0].pins.as_ref().unwrap();
        assert!(
            pins.tools.is_empty() && pins.unpinned == Unpinned::Deny,
            "{field}: {pins:?}"
        );
    }
    // The target itself: only an XBackend.
    let doc = pin("bad", "2024-01-01T00:00:00Z", "tools", &two_tools())
        .replace("kind: XBackend", "kind: Service");
    let (m, _) = compiled(&[doc], &Options::default());
    assert!(
        m.problems()
            .iter()
            .any(|p| p.field == "spec.targetRef.kind" && p.message.contains("Unsupported value")),
        "{:#?}",
        m.problems()
    );
    let doc = pin("bad", "2024-01-01T00:00:00Z", "tools", &two_tools())
        .replace("  unpinned", "  x")
        .replace("spec:\n", "spec:\n  unpinned: allow\n");
    let (m, _) = compiled(&[doc], &Options::default());
    assert!(
        m.problems().iter().any(|p| p.field == "spec.unpinned"),
        "{:#?}",
        m.problems()
    );
}

#[test]
fn unpinned_allow_is_carried_to_the_bundle() {
    let doc = pin("p", "2024-01-01T00:00:00Z", "tools", &two_tools())
        .replace("spec:\n", "spec:\n  unpinned: Allow\n");
    let (_, c) = compiled(&[doc], &Options::default());
    assert!(c.report.all_accepted(), "{:#?}", c.report);
    assert_eq!(
        c.bundle.backends[0].pins.as_ref().unwrap().unpinned,
        Unpinned::Allow
    );
}
