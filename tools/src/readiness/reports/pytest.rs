//! pytest's output, verbose or not: one result per test node id, from the progress lines and
//! the short test summary.

use std::collections::HashMap;

use super::*;

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
