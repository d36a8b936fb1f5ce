//! Test reports turned into one result per test: JUnit XML (written by most test runners, read
//! from a file after the run), `cargo test`'s human output and pytest's verbose output (both read
//! from what the command printed). The parsers are lenient with text around what they look for,
//! since a readiness check captures whatever the command prints, but a JUnit file that is not
//! well-formed XML is an error: a truncated report would otherwise read as a smaller, greener run.

use std::collections::HashMap;

use quick_xml::XmlVersion;
use quick_xml::events::{BytesStart, Event};
use quick_xml::reader::Reader;
use serde::{Deserialize, Serialize};

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

/// The kinds of report a readiness check can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReportFormat {
    /// A JUnit XML file the command writes.
    Junit,
    /// `cargo test`'s output.
    Cargo,
    /// pytest's output with `-v` (and `-rA` for every test's line in the short summary).
    Pytest,
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

/// 1-based line and column (in characters) of a byte offset, for error messages people can
/// follow in an editor.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

// ---------------------------------------------------------------------------------------------
// JUnit XML

/// A `<testcase>` being read.
struct OpenCase {
    name: String,
    duration_ms: Option<u64>,
    outcome: TestOutcome,
    message: Option<String>,
    /// The text of the `<failure>`, `<error>` or `<skipped>` element being read, kept only when
    /// that element has no `message` attribute: its first line becomes the message.
    body: Option<String>,
}

impl OpenCase {
    fn finish(self) -> TestResult {
        let message = match self.outcome {
            TestOutcome::Passed => None,
            _ => self.message.or_else(|| {
                self.body
                    .as_deref()
                    .and_then(|body| body.lines().map(str::trim).find(|l| !l.is_empty()).map(cap))
            }),
        };
        TestResult { name: self.name, outcome: self.outcome, duration_ms: self.duration_ms, message }
    }
}

/// Parses a JUnit XML report: every `<testcase>` under `<testsuites>` / `<testsuite>` (nested
/// suites included), named `classname::name` when it has a class name. A `<failure>` or
/// `<error>` makes it failed, a `<skipped>` skipped; the message is the element's `message`
/// attribute, or else the first line of its text.
pub fn parse_junit(xml: &str) -> Result<Vec<TestResult>, ReportError> {
    let mut reader = Reader::from_str(xml);
    let mut results = Vec::new();
    let mut saw_root = false;
    // Element names from the root down, to refuse a file that ends inside an element: quick-xml
    // reports a mismatched end tag but takes end of input as the end of the document.
    let mut open: Vec<String> = Vec::new();
    let mut case: Option<OpenCase> = None;
    // Depth of the `<failure>`/`<error>`/`<skipped>` whose text is being collected.
    let mut body_depth: Option<usize> = None;
    loop {
        let event_start = usize::try_from(reader.buffer_position()).unwrap_or(usize::MAX);
        let event = reader.read_event().map_err(|e| {
            xml_error_at(xml, usize::try_from(reader.error_position()).unwrap_or(usize::MAX), e.to_string())
        })?;
        match event {
            Event::Start(element) => {
                let name = local_name(&element);
                if !saw_root {
                    check_root(&name)?;
                    saw_root = true;
                } else if on_element(xml, event_start, &element, &name, &mut case, &mut results)?
                    && let Some(open_case) = case.as_mut()
                {
                    open_case.body = Some(String::new());
                    body_depth = Some(open.len());
                }
                open.push(name);
            }
            Event::Empty(element) => {
                let name = local_name(&element);
                if !saw_root {
                    check_root(&name)?;
                    saw_root = true;
                    continue;
                }
                on_element(xml, event_start, &element, &name, &mut case, &mut results)?;
                if name == "testcase"
                    && let Some(open_case) = case.take()
                {
                    results.push(open_case.finish());
                }
            }
            Event::End(_) => {
                let name = open.pop().unwrap_or_default();
                if body_depth == Some(open.len()) {
                    body_depth = None;
                }
                if name == "testcase"
                    && let Some(open_case) = case.take()
                {
                    results.push(open_case.finish());
                }
            }
            Event::Text(text) => {
                if let Some(body) = collecting(&mut case, body_depth) {
                    body.push_str(&text.xml_content(XmlVersion::Implicit1_0));
                }
            }
            Event::CData(text) => {
                if let Some(body) = collecting(&mut case, body_depth) {
                    body.push_str(&text.xml_content(XmlVersion::Implicit1_0));
                }
            }
            Event::GeneralRef(reference) => {
                let resolved = match reference.resolve_char_ref() {
                    Ok(Some(c)) => c.to_string(),
                    Ok(None) => quick_xml::escape::resolve_predefined_entity(&reference)
                        .map(str::to_owned)
                        .ok_or_else(|| {
                        xml_error_at(xml, event_start, format!("unknown entity &{};", &*reference))
                    })?,
                    Err(e) => return Err(xml_error_at(xml, event_start, e.to_string())),
                };
                if let Some(body) = collecting(&mut case, body_depth) {
                    body.push_str(&resolved);
                }
            }
            Event::Eof => break,
            Event::Decl(_) | Event::PI(_) | Event::DocType(_) | Event::Comment(_) => {}
        }
    }
    if !saw_root {
        return Err(ReportError::NotJunit { found: "nothing".to_owned() });
    }
    if let Some(name) = open.last() {
        return Err(xml_error_at(xml, xml.len(), format!("the document ends inside <{name}>")));
    }
    Ok(results)
}

fn xml_error_at(xml: &str, offset: usize, detail: String) -> ReportError {
    let (line, column) = line_column(xml, offset);
    ReportError::Xml { line, column, detail }
}

fn check_root(name: &str) -> Result<(), ReportError> {
    if name == "testsuites" || name == "testsuite" {
        Ok(())
    } else {
        Err(ReportError::NotJunit { found: name.to_owned() })
    }
}

fn collecting(case: &mut Option<OpenCase>, body_depth: Option<usize>) -> Option<&mut String> {
    body_depth?;
    case.as_mut().and_then(|c| c.body.as_mut())
}

fn local_name(element: &BytesStart<'_>) -> String {
    element.local_name().as_ref().to_owned()
}

/// Reads the attributes of an element as (local name, value), refusing malformed ones.
fn attributes(
    xml: &str,
    offset: usize,
    element: &BytesStart<'_>,
) -> Result<Vec<(String, String)>, ReportError> {
    let mut out = Vec::new();
    for attribute in element.attributes() {
        let attribute = attribute.map_err(|e| xml_error_at(xml, offset, e.to_string()))?;
        let key = attribute.key.local_name().as_ref().to_owned();
        let value = attribute
            .normalized_value(XmlVersion::Implicit1_0)
            .map_err(|e| xml_error_at(xml, offset, e.to_string()))?;
        out.push((key, value.into_owned()));
    }
    Ok(out)
}

fn attribute<'a>(attributes: &'a [(String, String)], key: &str) -> Option<&'a str> {
    attributes.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// Handles the start of any element below the root; `true` when the element's text is to be
/// collected as the failure or skip message, for want of a `message` attribute.
fn on_element(
    xml: &str,
    offset: usize,
    element: &BytesStart<'_>,
    name: &str,
    case: &mut Option<OpenCase>,
    results: &mut Vec<TestResult>,
) -> Result<bool, ReportError> {
    match name {
        "testcase" => {
            // A testcase inside a testcase is not JUnit; close the outer one rather than lose it.
            if let Some(previous) = case.take() {
                results.push(previous.finish());
            }
            let attributes = attributes(xml, offset, element)?;
            let Some(test) = attribute(&attributes, "name") else {
                let (line, column) = line_column(xml, offset);
                return Err(ReportError::UnnamedTestCase { line, column });
            };
            let name = match attribute(&attributes, "classname").filter(|c| !c.is_empty()) {
                Some(class) => format!("{class}::{test}"),
                None => test.to_owned(),
            };
            let duration_ms = attribute(&attributes, "time").and_then(seconds_to_ms);
            *case =
                Some(OpenCase { name, duration_ms, outcome: TestOutcome::Passed, message: None, body: None });
            Ok(false)
        }
        "failure" | "error" | "skipped" => {
            let Some(open_case) = case.as_mut() else { return Ok(false) };
            let outcome = if name == "skipped" { TestOutcome::Skipped } else { TestOutcome::Failed };
            // A failure outranks a skip whatever their order, and the first failure's message is
            // the one kept.
            if open_case.outcome == TestOutcome::Failed {
                return Ok(false);
            }
            if open_case.outcome == TestOutcome::Skipped && outcome == TestOutcome::Skipped {
                return Ok(false);
            }
            open_case.outcome = outcome;
            open_case.body = None;
            let attributes = attributes(xml, offset, element)?;
            open_case.message = attribute(&attributes, "message").filter(|m| !m.trim().is_empty()).map(cap);
            Ok(open_case.message.is_none())
        }
        _ => Ok(false),
    }
}

/// JUnit's `time` is seconds as a decimal; runners disagree on precision and some write
/// nothing useful, which reads as no duration rather than an error.
fn seconds_to_ms(time: &str) -> Option<u64> {
    let seconds: f64 = time.trim().parse().ok()?;
    if !seconds.is_finite() || seconds < 0.0 {
        return None;
    }
    Some((seconds * 1000.0).round() as u64)
}

// ---------------------------------------------------------------------------------------------
// cargo test

/// Parses `cargo test`'s human output: the `test NAME ... ok|FAILED|ignored` lines of every test
/// binary (doc tests included), with each failure's message taken from its `---- NAME stdout ----`
/// block: the panic message, a `should_panic` test's note, or the `Error:` a test returned. Lines
/// that are not test results (cargo's own on stderr, the tests' output) are passed over.
pub fn parse_cargo_test(output: &str) -> Vec<TestResult> {
    let mut results: Vec<TestResult> = Vec::new();
    let mut lines = output.lines().peekable();
    while let Some(line) = lines.next() {
        let line = line.trim_end();
        if let Some(name) = line.strip_prefix("---- ").and_then(|l| l.strip_suffix(" stdout ----")) {
            let mut block = Vec::new();
            while let Some(next) = lines.peek() {
                let next = next.trim_end();
                if next.starts_with("---- ") || next == "failures:" || next.starts_with("test result: ") {
                    break;
                }
                block.push(next);
                lines.next();
            }
            // Failure blocks follow the result lines of their own binary, so the latest result
            // of that name is the one they describe.
            if let Some(result) = results.iter_mut().rev().find(|r| r.name == name)
                && result.outcome == TestOutcome::Failed
                && result.message.is_none()
            {
                result.message = cargo_failure_message(&block);
            }
            continue;
        }
        if let Some(result) = cargo_result_line(line) {
            results.push(result);
        }
    }
    results
}

fn cargo_result_line(line: &str) -> Option<TestResult> {
    let rest = line.strip_prefix("test ")?;
    let (name, status) = rest.rsplit_once(" ... ")?;
    let name = name.strip_suffix(" - should panic").unwrap_or(name);
    let (outcome, message) = match status {
        "ok" => (TestOutcome::Passed, None),
        "FAILED" => (TestOutcome::Failed, None),
        "ignored" => (TestOutcome::Skipped, None),
        _ => {
            let reason = status.strip_prefix("ignored, ")?;
            (TestOutcome::Skipped, Some(cap(reason)))
        }
    };
    if name.is_empty() {
        return None;
    }
    Some(TestResult { name: name.to_owned(), outcome, duration_ms: None, message })
}

/// The message of one failure block: the first panic's message (all its lines up to the
/// backtrace note), else what the test harness said about it.
fn cargo_failure_message(block: &[&str]) -> Option<String> {
    for (i, line) in block.iter().enumerate() {
        let Some((_, after)) = line.split_once(" panicked at ").filter(|_| line.starts_with("thread '"))
        else {
            continue;
        };
        // Before Rust 1.73 the message was on the same line: panicked at 'MESSAGE', FILE:L:C
        if let Some(quoted) = after.strip_prefix('\'')
            && let Some(end) = quoted.rfind("', ")
        {
            return Some(cap(&quoted[..end]));
        }
        let message: Vec<&str> = block[i + 1..]
            .iter()
            .copied()
            .take_while(|l| {
                !l.is_empty() && *l != "stack backtrace:" && !l.starts_with("note: run with `RUST_BACKTRACE")
            })
            .collect();
        if !message.is_empty() {
            return Some(cap(&message.join("\n")));
        }
        return Some(cap(after.trim_end_matches(':')));
    }
    block
        .iter()
        .find_map(|l| l.strip_prefix("note: ").filter(|n| n.starts_with("test did not panic")).map(cap))
        .or_else(|| block.iter().find(|l| l.starts_with("Error: ")).map(|l| cap(l)))
}

// ---------------------------------------------------------------------------------------------
// pytest

const PYTEST_OUTCOMES: [(&str, TestOutcome); 6] = [
    ("PASSED", TestOutcome::Passed),
    ("FAILED", TestOutcome::Failed),
    ("ERROR", TestOutcome::Failed),
    ("SKIPPED", TestOutcome::Skipped),
    ("XFAIL", TestOutcome::Skipped),
    ("XPASS", TestOutcome::Passed),
];

fn pytest_outcome(word: &str) -> Option<TestOutcome> {
    PYTEST_OUTCOMES.iter().find(|(w, _)| *w == word).map(|(_, o)| *o)
}

/// Parses pytest's output: the verbose lines (`-v`) `NODEID PASSED [ 50%]`, and the short test
/// summary lines `FAILED NODEID - MESSAGE` (every outcome with `-rA`; failures and errors by
/// default). A test named by both is one result: a failure anywhere wins (a test that passed and
/// then failed in teardown failed), and the summary's message completes the verbose line. A
/// module that failed to import is a failed test named by its path.
pub fn parse_pytest(output: &str) -> Vec<TestResult> {
    let mut results: Vec<TestResult> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for line in output.lines() {
        let Some(found) = pytest_summary_line(line).or_else(|| pytest_verbose_line(line)) else { continue };
        match index.get(&found.name) {
            Some(&i) => merge(&mut results[i], found),
            None => {
                index.insert(found.name.clone(), results.len());
                results.push(found);
            }
        }
    }
    for result in &mut results {
        if result.outcome == TestOutcome::Passed {
            result.message = None;
        }
    }
    results
}

fn merge(earlier: &mut TestResult, later: TestResult) {
    if earlier.outcome == TestOutcome::Failed && later.outcome != TestOutcome::Failed {
        return;
    }
    if earlier.outcome != later.outcome {
        earlier.outcome = later.outcome;
        earlier.message = later.message.or(earlier.message.take());
    } else if earlier.message.is_none() {
        earlier.message = later.message;
    }
    earlier.duration_ms = earlier.duration_ms.or(later.duration_ms);
}

/// Whether `node` looks like a pytest node id (`path::name...`), as opposed to a log line that
/// happens to start with an outcome word.
fn is_node_id(node: &str) -> bool {
    let Some((path, rest)) = node.split_once("::") else { return false };
    !path.is_empty() && !rest.is_empty() && !path.contains(char::is_whitespace)
}

/// `OUTCOME NODEID[ - MESSAGE]`, as in the short test summary (and pytest-xdist's verbose lines
/// once their `[gw0] [ 50%] ` prefix is cut).
fn pytest_summary_line(line: &str) -> Option<TestResult> {
    let line = line.trim_end();
    let line = strip_xdist_prefix(line).unwrap_or(line);
    let (word, rest) = line.split_once(' ')?;
    let outcome = pytest_outcome(word)?;
    // `SKIPPED [1] path:line: reason` names a location, not a test; the verbose line has it.
    if rest.starts_with('[') || rest.starts_with(char::is_whitespace) {
        return None;
    }
    let (node, message) = match rest.split_once(" - ") {
        Some((node, message)) => (node, Some(cap(message))),
        None => (rest, None),
    };
    let collection_error = word == "ERROR" && node.ends_with(".py") && !node.contains(char::is_whitespace);
    if !is_node_id(node) && !collection_error {
        return None;
    }
    Some(TestResult { name: node.to_owned(), outcome, duration_ms: None, message })
}

fn strip_xdist_prefix(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("[gw")?;
    let (worker, rest) = rest.split_once("] ")?;
    if !worker.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let (_, rest) = rest.strip_prefix('[')?.split_once("%] ")?;
    Some(rest)
}

/// `NODEID OUTCOME[ (REASON)][ [ 50%]]`, as pytest `-v` prints while it runs.
fn pytest_verbose_line(line: &str) -> Option<TestResult> {
    let mut line = line.trim_end();
    if line.ends_with("%]")
        && let Some(open) = line.rfind('[')
    {
        line = line[..open].trim_end();
    }
    let mut best: Option<(usize, &str, TestOutcome)> = None;
    for (word, outcome) in PYTEST_OUTCOMES {
        let needle = format!(" {word}");
        let mut from = 0;
        while let Some(found) = line[from..].find(&needle) {
            let at = from + found;
            let after = &line[at + needle.len()..];
            if (after.is_empty() || (after.starts_with(" (") && after.ends_with(')')))
                && best.is_none_or(|(b, _, _)| at < b)
            {
                best = Some((at, after, outcome));
                break;
            }
            from = at + needle.len();
        }
    }
    let (at, after, outcome) = best?;
    let node = &line[..at];
    if !is_node_id(node) {
        return None;
    }
    let reason =
        after.strip_prefix(" (").and_then(|r| r.strip_suffix(')')).filter(|r| !r.is_empty()).map(cap);
    Some(TestResult { name: node.to_owned(), outcome, duration_ms: None, message: reason })
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
