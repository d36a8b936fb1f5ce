//! Test reports turned into one result per test: JUnit XML (written by most test runners, read
//! from a file after the run), `cargo test`'s human output and pytest's verbose output (both read
//! from what the command printed). The parsers are lenient with text around what they look for,
//! since a readiness check captures whatever the command prints, but a JUnit file that is not
//! well-formed XML is an error: a truncated report would otherwise read as a smaller, greener run.

use serde::{Deserialize, Serialize};

mod cargo;
mod junit;
mod pytest;

/// Named in the tools file, so defined with it.
pub use crate::operator_config::ReportFormat;
pub use cargo::parse_cargo_test;
pub use junit::parse_junit;
pub use pytest::parse_pytest;

/// Longest failure or skip message kept, in characters: enough for an assertion's first lines,
/// short enough that a run's history stays small.
pub const MESSAGE_CAP: usize = 500;

/// What happened to one test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TestOutcome {
    Passed,
    /// Failed, or could not run (a JUnit `<error>`, a pytest `ERROR` in setup or teardown).
    Failed,
    /// Skipped, ignored, or an expected failure (pytest's `XFAIL`).
    Skipped,
}

/// One test of a report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TestResult {
    /// Unique within a report as far as the format allows: JUnit's `classname::name`, cargo's
    /// module path (the same path may recur across test binaries), pytest's node id.
    pub name: String,
    pub outcome: TestOutcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// Why it failed or was skipped, capped at [`MESSAGE_CAP`] characters; `None` for a pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A report that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    #[error(
        "the JUnit report is not well-formed XML at line {line}, column {column}: {detail}; check that \
         the test run finished writing it and that report_path names the JUnit file"
    )]
    Xml { line: usize, column: usize, detail: String },
    #[error(
        "the JUnit report starts with <{found}> where <testsuites> or <testsuite> was expected; check \
         that report_path names the JUnit XML file the test runner writes"
    )]
    NotJunit { found: String },
    #[error(
        "the JUnit report has a <testcase> without a name attribute at line {line}, column {column}; \
         the test runner wrote an incomplete report"
    )]
    UnnamedTestCase { line: usize, column: usize },
}

/// Parses a report of the given format.
pub fn parse(format: ReportFormat, text: &str) -> Result<Vec<TestResult>, ReportError> {
    match format {
        ReportFormat::Junit => parse_junit(text),
        ReportFormat::Cargo => Ok(parse_cargo_test(text)),
        ReportFormat::Pytest => Ok(parse_pytest(text)),
    }
}

/// Cuts `text` to at most [`MESSAGE_CAP`] characters, marking the cut with an ellipsis.
fn cap(text: &str) -> String {
    let text = text.trim();
    if text.chars().count() <= MESSAGE_CAP {
        return text.to_owned();
    }
    let mut capped: String = text.chars().take(MESSAGE_CAP - 1).collect();
    capped.push('…');
    capped
}

#[cfg(test)]
mod tests {
    use super::*;
    use TestOutcome::{Failed, Passed, Skipped};

    fn data(name: &str) -> String {
        let path = format!("{}/tests/data/reports/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
    }

    fn result(
        name: &str,
        outcome: TestOutcome,
        duration_ms: Option<u64>,
        message: Option<&str>,
    ) -> TestResult {
        TestResult { name: name.to_owned(), outcome, duration_ms, message: message.map(str::to_owned) }
    }

    #[test]
    fn junit_from_pytest() {
        let parsed = parse_junit(&data("pytest-junit.xml")).expect("a well-formed report");
        let expected = vec![
            result(
                "tests.test_fixtures::test_uses_broken",
                Failed,
                Some(0),
                Some("failed on setup with \"RuntimeError: fixture could not start\""),
            ),
            result("tests.test_fixtures::test_prints", Passed, Some(1), None),
            result("tests.test_math::test_adds", Passed, Some(0), None),
            result(
                "tests.test_math::test_adds_wrongly",
                Failed,
                Some(0),
                Some("AssertionError: two and two\nassert 4 == 5\n +  where 4 = add(2, 2)"),
            ),
            result("tests.test_math::test_network", Skipped, Some(8), Some("needs a network")),
            result("tests.test_math::test_known_bug", Skipped, Some(2), Some("known bug")),
            result("tests.test_math::test_fixed_bug", Passed, Some(14), None),
            result("tests.test_math::test_param[1-2-3]", Passed, Some(1), None),
            result(
                "tests.test_math::test_param[2-2-5]",
                Failed,
                Some(1),
                Some("assert 4 == 5\n +  where 4 = add(2, 2)"),
            ),
            result("tests.test_math.TestGroup::test_in_class", Passed, Some(0), None),
            result(
                "tests.test_math.TestGroup::test_raises",
                Failed,
                Some(1),
                Some("ValueError: bad value\nsecond line"),
            ),
        ];
        assert_eq!(parsed, expected);
    }

    #[test]
    fn junit_collection_error_has_no_class() {
        let parsed = parse_junit(&data("pytest-collect-error-junit.xml")).expect("a well-formed report");
        assert_eq!(parsed, vec![result("t2.test_broken", Failed, Some(0), Some("collection failure"))]);
    }

    #[test]
    fn junit_message_from_text_when_no_attribute() {
        let xml = r#"<?xml version="1.0"?>
<testsuites>
  <testsuite name="outer">
    <testsuite name="inner">
      <testcase classname="a.B" name="t1" time="1.2345">
        <failure type="AssertionError">

   expected &lt;1&gt; but was &#50;
   at a.B.t1(B.java:10)
        </failure>
      </testcase>
      <testcase name="t2" time="oops"><error><![CDATA[boom & bust
trace]]></error></testcase>
      <testcase classname="" name="t3"><skipped/></testcase>
      <testcase classname="a.B" name="t4"><skipped message="later"/><failure message="real"/></testcase>
      <testcase classname="a.B" name="t5"><system-out>noise</system-out></testcase>
    </testsuite>
  </testsuite>
</testsuites>"#;
        let parsed = parse_junit(xml).expect("a well-formed report");
        assert_eq!(
            parsed,
            vec![
                result("a.B::t1", Failed, Some(1235), Some("expected <1> but was 2")),
                result("t2", Failed, None, Some("boom & bust")),
                result("t3", Skipped, None, None),
                result("a.B::t4", Failed, None, Some("real")),
                result("a.B::t5", Passed, None, None),
            ]
        );
    }

    #[test]
    fn junit_single_suite_root_and_empty_suite() {
        let parsed = parse_junit(r#"<testsuite name="x" tests="1"><testcase name="only"/></testsuite>"#);
        assert_eq!(parsed, Ok(vec![result("only", Passed, None, None)]));
        assert_eq!(parse_junit(r#"<testsuites/>"#), Ok(vec![]));
        assert_eq!(parse_junit(r#"<?xml version="1.0"?><testsuites></testsuites>"#), Ok(vec![]));
    }

    #[test]
    fn junit_long_message_is_capped() {
        let long = "x".repeat(800);
        let xml =
            format!(r#"<testsuite><testcase name="t"><failure message="{long}"/></testcase></testsuite>"#);
        let parsed = parse_junit(&xml).expect("a well-formed report");
        let message = parsed[0].message.as_deref().expect("a message");
        assert_eq!(message.chars().count(), MESSAGE_CAP);
        assert!(message.ends_with('…'));
    }

    #[test]
    fn junit_malformed_is_an_error_with_position() {
        let mismatched =
            "<testsuites>\n  <testsuite>\n    <testcase name=\"a\">\n  </testsuite>\n</testsuites>";
        let error = parse_junit(mismatched).expect_err("mismatched end tag");
        let ReportError::Xml { line, .. } = &error else { panic!("not an XML error: {error}") };
        assert_eq!(*line, 4, "{error}");
        assert!(error.to_string().contains("not well-formed XML at line 4"), "{error}");

        let truncated = "<testsuites>\n<testsuite>\n<testcase name=\"a\" time=\"0.1\">";
        let error = parse_junit(truncated).expect_err("truncated");
        assert!(
            matches!(&error, ReportError::Xml { line: 3, detail, .. } if detail.contains("ends inside <testcase>")),
            "{error}"
        );

        let broken_attribute = "<testsuite>\n<testcase name=\"a></testsuite>";
        assert!(matches!(parse_junit(broken_attribute), Err(ReportError::Xml { .. })));

        let unknown_entity =
            "<testsuite><testcase name=\"a\"><failure>&nope;</failure></testcase></testsuite>";
        let error = parse_junit(unknown_entity).expect_err("unknown entity");
        assert!(error.to_string().contains("&nope;"), "{error}");
    }

    #[test]
    fn junit_wrong_documents() {
        assert_eq!(
            parse_junit("<html><body/></html>"),
            Err(ReportError::NotJunit { found: "html".to_owned() })
        );
        assert_eq!(parse_junit(""), Err(ReportError::NotJunit { found: "nothing".to_owned() }));
        assert_eq!(
            parse_junit("<testsuite>\n <testcase classname=\"c\"/></testsuite>"),
            Err(ReportError::UnnamedTestCase { line: 2, column: 2 })
        );
    }

    #[test]
    fn cargo_with_backtraces() {
        let parsed = parse_cargo_test(&data("cargo-test-backtrace-stdout.txt"));
        let expected = vec![
            result("tests::adds_small_numbers", Passed, None, None),
            result("tests::overflows", Passed, None, None),
            result("tests::prints_then_panics", Failed, None, Some("boom: the widget broke")),
            result("tests::slow_test", Skipped, None, None),
            result("tests::talks_to_server", Skipped, None, Some("needs a network")),
            result(
                "tests::adds_wrongly",
                Failed,
                None,
                Some("assertion `left == right` failed\n  left: 4\n right: 5"),
            ),
            result("integration_passes", Passed, None, None),
            result("integration_returns_err", Failed, None, Some("Error: \"the config file is missing\"")),
            result(
                "integration_should_panic_but_does_not",
                Failed,
                None,
                Some("test did not panic as expected at tests/integration.rs:13:4"),
            ),
            result("integration_fails", Failed, None, Some("one and one make 2")),
            result("src/lib.rs - add (line 3)", Passed, None, None),
        ];
        assert_eq!(parsed, expected);
    }

    #[test]
    fn cargo_with_stderr_mixed_in() {
        let parsed = parse_cargo_test(&data("cargo-test-combined.txt"));
        let names: Vec<(&str, TestOutcome)> = parsed.iter().map(|r| (r.name.as_str(), r.outcome)).collect();
        assert_eq!(
            names,
            vec![
                ("tests::adds_small_numbers", Passed),
                ("tests::adds_wrongly", Failed),
                ("tests::overflows", Passed),
                ("tests::prints_then_panics", Failed),
                ("tests::slow_test", Skipped),
                ("tests::talks_to_server", Skipped),
                ("integration_fails", Failed),
                ("integration_passes", Passed),
                ("integration_should_panic_but_does_not", Failed),
                ("integration_returns_err", Failed),
                ("src/lib.rs - add (line 3)", Passed),
            ]
        );
        let message = |name: &str| parsed.iter().find(|r| r.name == name).and_then(|r| r.message.clone());
        assert_eq!(
            message("tests::adds_wrongly").as_deref(),
            Some("assertion `left == right` failed\n  left: 4\n right: 5")
        );
        assert_eq!(message("tests::prints_then_panics").as_deref(), Some("boom: the widget broke"));
        assert_eq!(message("integration_fails").as_deref(), Some("one and one make 2"));
    }

    #[test]
    fn cargo_old_panic_format_and_repeated_names() {
        let output = "\
running 1 test
test it_works ... FAILED

failures:

---- it_works stdout ----
thread 'it_works' panicked at 'assertion failed: `(left == right)`', src/lib.rs:5:9
note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace

failures:
    it_works

test result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out

running 1 test
test it_works ... ok

test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out
";
        assert_eq!(
            parse_cargo_test(output),
            vec![
                result("it_works", Failed, None, Some("assertion failed: `(left == right)`")),
                result("it_works", Passed, None, None),
            ]
        );
    }

    #[test]
    fn cargo_ignores_what_is_not_a_result() {
        let output =
            "test result: ok. 0 passed\ntest slow has been running for over 60 seconds\ntest  ... ok\n";
        assert_eq!(parse_cargo_test(output), vec![]);
        assert_eq!(parse_cargo_test(""), vec![]);
    }

    #[test]
    fn pytest_verbose_with_summary() {
        let parsed = parse_pytest(&data("pytest-verbose-ra.txt"));
        let expected = vec![
            result(
                "tests/test_fixtures.py::test_uses_broken",
                Failed,
                None,
                Some("RuntimeError: fixture could ..."),
            ),
            result("tests/test_fixtures.py::test_prints", Passed, None, None),
            result("tests/test_math.py::test_adds", Passed, None, None),
            result(
                "tests/test_math.py::test_adds_wrongly",
                Failed,
                None,
                Some("AssertionError: two and two"),
            ),
            result("tests/test_math.py::test_network", Skipped, None, Some("needs a network")),
            result("tests/test_math.py::test_known_bug", Skipped, None, Some("known bug")),
            result("tests/test_math.py::test_fixed_bug", Passed, None, None),
            result("tests/test_math.py::test_param[1-2-3]", Passed, None, None),
            result("tests/test_math.py::test_param[2-2-5]", Failed, None, Some("assert 4 == 5")),
            result("tests/test_math.py::TestGroup::test_in_class", Passed, None, None),
            result("tests/test_math.py::TestGroup::test_raises", Failed, None, Some("ValueError: bad value")),
        ];
        assert_eq!(parsed, expected);
    }

    #[test]
    fn pytest_default_output_names_only_failures() {
        let parsed = parse_pytest(&data("pytest-default.txt"));
        assert_eq!(
            parsed,
            vec![
                result(
                    "tests/test_math.py::test_adds_wrongly",
                    Failed,
                    None,
                    Some("AssertionError: two and two")
                ),
                result("tests/test_math.py::test_param[2-2-5]", Failed, None, Some("assert 4 == 5")),
                result(
                    "tests/test_math.py::TestGroup::test_raises",
                    Failed,
                    None,
                    Some("ValueError: bad value")
                ),
                result(
                    "tests/test_fixtures.py::test_uses_broken",
                    Failed,
                    None,
                    Some("RuntimeError: fixture could ..."),
                ),
            ]
        );
    }

    #[test]
    fn pytest_collection_error() {
        assert_eq!(
            parse_pytest(&data("pytest-collect-error.txt")),
            vec![result("t2/test_broken.py", Failed, None, None)]
        );
    }

    #[test]
    fn pytest_teardown_error_and_xdist() {
        let output = "\
tests/t.py::test_a PASSED                                     [ 50%]
tests/t.py::test_a ERROR                                      [ 50%]
[gw1] [100%] FAILED tests/t.py::test_b
[gw0] [ 50%] SKIPPED tests/t.py::test_c
ERROR    root:t.py:10 logged, not a result
PASSED tests/t.py::test_a
ERROR tests/t.py::test_a - RuntimeError: teardown broke
FAILED tests/t.py::test_b - assert False
";
        assert_eq!(
            parse_pytest(output),
            vec![
                result("tests/t.py::test_a", Failed, None, Some("RuntimeError: teardown broke")),
                result("tests/t.py::test_b", Failed, None, Some("assert False")),
                result("tests/t.py::test_c", Skipped, None, None),
            ]
        );
    }

    #[test]
    fn parse_dispatches_on_format() {
        assert_eq!(parse(ReportFormat::Cargo, "test a ... ok\n"), Ok(vec![result("a", Passed, None, None)]));
        assert_eq!(
            parse(ReportFormat::Pytest, "t.py::a PASSED [100%]\n"),
            Ok(vec![result("t.py::a", Passed, None, None)])
        );
        assert!(parse(ReportFormat::Junit, "<testsuite>").is_err());
    }

    #[test]
    fn serde_shapes() {
        let value = serde_json::to_value(result("a::b", Failed, Some(3), Some("why"))).expect("serializes");
        assert_eq!(
            value,
            serde_json::json!({"name": "a::b", "outcome": "failed", "durationMs": 3, "message": "why"})
        );
        let value = serde_json::to_value(result("a", Skipped, None, None)).expect("serializes");
        assert_eq!(value, serde_json::json!({"name": "a", "outcome": "skipped"}));
        let back: TestResult = serde_json::from_value(serde_json::json!({"name": "a", "outcome": "passed"}))
            .expect("deserializes");
        assert_eq!(back, result("a", Passed, None, None));
        assert_eq!(serde_json::to_value(ReportFormat::Junit).expect("serializes"), "junit");
    }
}
