//! `cargo test`'s human output: one result per `test ... ok|FAILED|ignored` line, with the
//! message of each failure from its block.

use super::*;

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
