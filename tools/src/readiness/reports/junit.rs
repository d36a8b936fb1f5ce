//! JUnit XML, as most test runners write it: one result per `testcase`; a file that is not
//! well-formed XML is an error, not a smaller run.

use quick_xml::XmlVersion;
use quick_xml::events::{BytesStart, Event};
use quick_xml::reader::Reader;

use super::*;

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
