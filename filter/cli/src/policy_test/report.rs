//! What `mcp-access test` prints: a readable report, and JUnit XML for CI.

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

use super::DocResult;
use crate::error::CliError;

/// The readable report: per document its cases, `ok` or `FAIL` with what differs and the
/// decision as `explain` shows it, then the totals.
pub fn to_text(results: &[DocResult]) -> String {
    let mut out = String::new();
    let (mut passed, mut failed, mut broken) = (0, 0, 0);
    for d in results {
        out.push_str(&format!("{}: {}\n", d.file.display(), d.name));
        if let Some(e) = &d.error {
            out.push_str(&format!("  ERROR {e}\n"));
            broken += 1;
            continue;
        }
        for c in &d.cases {
            if c.failures.is_empty() {
                passed += 1;
                out.push_str(&format!("  ok    {}\n", c.name));
                continue;
            }
            failed += 1;
            out.push_str(&format!("  FAIL  {}\n", c.name));
            for f in &c.failures {
                out.push_str(&format!("          {f}\n"));
            }
            for line in c.explanation.iter().flat_map(|e| e.lines()) {
                out.push_str(&format!("          | {line}\n"));
            }
        }
    }
    out.push_str(&format!("{passed} passed, {failed} failed"));
    if broken > 0 {
        out.push_str(&format!(", {broken} test document(s) could not run"));
    }
    out.push('\n');
    out
}

/// JUnit XML: a test suite per document (`file: name`), a test case per case; a failed case
/// has a `failure` (what differs, and the decision as `explain` shows it), a document that
/// could not run an `error` case.
pub fn junit_xml(results: &[DocResult]) -> Result<String, CliError> {
    let mut report = Report::new("mcp-access test");
    for d in results {
        let suite_name = format!("{}: {}", d.file.display(), d.name);
        let mut suite = TestSuite::new(suite_name.as_str());
        if let Some(e) = &d.error {
            let mut status = TestCaseStatus::non_success(NonSuccessKind::Error);
            status.set_message(e.as_str());
            let mut case = TestCase::new("manifests", status);
            case.set_classname(d.name.as_str());
            suite.add_test_case(case);
        }
        for c in &d.cases {
            let status = if c.failures.is_empty() {
                TestCaseStatus::success()
            } else {
                let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
                s.set_message(c.failures.join("; "));
                let mut description = c.failures.join("\n");
                if let Some(e) = &c.explanation {
                    description.push_str("\n\n");
                    description.push_str(e);
                }
                s.set_description(description);
                s
            };
            let mut case = TestCase::new(c.name.as_str(), status);
            case.set_classname(d.name.as_str());
            suite.add_test_case(case);
        }
        report.add_test_suite(suite);
    }
    report
        .to_string()
        .map_err(|e| CliError::invalid(format!("JUnit XML: {e}")))
}
