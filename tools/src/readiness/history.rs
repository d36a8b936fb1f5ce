//! A readiness run compared with the runs before it: which tests and checks broke since the last
//! run, which were fixed, which keep failing, which flip between passing and failing, and how the
//! recent runs went. Everything here is a pure function of the records, so the same history
//! always gives the same answer, in the same order.
//!
//! A test is known as `CHECK::TEST` (its check's name, then its name in the report): the same
//! test name under two checks (a suite run in two configurations, say) is two tests.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::reports::{TestOutcome, TestResult};
/// Named in the tools file, so defined with it; a run record keeps it.
pub use crate::operator_config::Severity;

/// How one check of a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckStatus {
    /// The command exited with status 0.
    Passed,
    /// The command exited with another status.
    Failed,
    /// The command ran past its timeout and was stopped.
    Timeout,
    /// The command could not be run, or its report could not be read.
    Error,
    /// The command was not run.
    Skipped,
}

impl CheckStatus {
    /// Whether the check counts as failing: it ran and did not pass, or could not run.
    pub fn is_failure(self) -> bool {
        matches!(self, Self::Failed | Self::Timeout | Self::Error)
    }
}

/// One check of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckRecord {
    pub name: String,
    pub status: CheckStatus,
    pub severity: Severity,
    pub duration_ms: u64,
    /// The tests its report named; empty for a check without a report.
    #[serde(default)]
    pub tests: Vec<TestResult>,
}

/// One readiness run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunRecord {
    pub run_id: String,
    /// When it started, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    pub ready: bool,
    pub checks: Vec<CheckRecord>,
}

/// A test that both passed and failed within the flaky window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FlakyTest {
    pub name: String,
    pub passes: usize,
    pub failures: usize,
}

/// One run of the trend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrendPoint {
    pub run_id: String,
    pub at_ms: u64,
    pub ready: bool,
    pub failed_tests: usize,
    pub passed_tests: usize,
    pub failed_checks: usize,
}

/// A run compared with the runs before it. Every list of names is sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Comparison {
    /// Tests failing now that did not fail in the previous run (passed, were skipped, or were
    /// not there; with no previous run, every failing test).
    pub new_failures: Vec<String>,
    /// Tests that failed in the previous run and pass now.
    pub fixed: Vec<String>,
    /// Tests that failed in the previous run and fail now.
    pub still_failing: Vec<String>,
    /// Tests that both passed and failed within the window, sorted by name.
    pub flaky: Vec<FlakyTest>,
    /// Checks failing now that did not fail in the previous run.
    pub newly_failing_checks: Vec<String>,
    /// Checks that failed in the previous run and pass now.
    pub fixed_checks: Vec<String>,
    /// The current run and those before it, newest first, at most `window` of them.
    pub trend: Vec<TrendPoint>,
}

/// Whether a run with these checks is ready: every critical check passed. A critical check that
/// was skipped, timed out or could not run blocks as a failure does; warnings never block.
pub fn is_ready(checks: &[CheckRecord]) -> bool {
    checks.iter().all(|check| check.severity == Severity::Warning || check.status == CheckStatus::Passed)
}

/// Compares `current` with `previous` (newest first, as history is kept). `window` is how many
/// runs, the current one included, the flaky tests and the trend look at; 0 counts as 1. A
/// record in `previous` with the current run's id is left out, so a caller may pass a history
/// the current run was already added to.
pub fn compare(current: &RunRecord, previous: &[RunRecord], window: usize) -> Comparison {
    let window = window.max(1);
    let earlier: Vec<&RunRecord> = previous.iter().filter(|run| run.run_id != current.run_id).collect();
    let now = test_outcomes(current);
    let before = earlier.first().map(|run| test_outcomes(run)).unwrap_or_default();

    let failed_before = |name: &str| before.get(name) == Some(&TestOutcome::Failed);
    let mut comparison = Comparison::default();
    for (name, outcome) in &now {
        match outcome {
            TestOutcome::Failed if failed_before(name) => comparison.still_failing.push(name.clone()),
            TestOutcome::Failed => comparison.new_failures.push(name.clone()),
            TestOutcome::Passed if failed_before(name) => comparison.fixed.push(name.clone()),
            _ => {}
        }
    }

    let checks_now = check_statuses(current);
    let checks_before = earlier.first().map(|run| check_statuses(run)).unwrap_or_default();
    let check_failed_before = |name: &str| checks_before.get(name).is_some_and(|status| status.is_failure());
    for (name, status) in &checks_now {
        if status.is_failure() && !check_failed_before(name) {
            comparison.newly_failing_checks.push(name.clone());
        } else if *status == CheckStatus::Passed && check_failed_before(name) {
            comparison.fixed_checks.push(name.clone());
        }
    }

    let recent: Vec<&RunRecord> =
        std::iter::once(current).chain(earlier.iter().copied()).take(window).collect();
    let mut counts: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for run in &recent {
        for (name, outcome) in test_outcomes(run) {
            let (passes, failures) = counts.entry(name).or_default();
            match outcome {
                TestOutcome::Passed => *passes += 1,
                TestOutcome::Failed => *failures += 1,
                TestOutcome::Skipped => {}
            }
        }
    }
    comparison.flaky = counts
        .into_iter()
        .filter(|(_, (passes, failures))| *passes > 0 && *failures > 0)
        .map(|(name, (passes, failures))| FlakyTest { name, passes, failures })
        .collect();

    comparison.trend = recent.iter().map(|run| trend_point(run)).collect();
    comparison
}

/// Each test of a run by its `CHECK::TEST` name. A name met twice in one check (cargo runs
/// several test binaries, and two may hold a test of the same path) is one test that failed if
/// either failed.
fn test_outcomes(run: &RunRecord) -> BTreeMap<String, TestOutcome> {
    let mut outcomes = BTreeMap::new();
    for check in &run.checks {
        for test in &check.tests {
            let name = format!("{}::{}", check.name, test.name);
            outcomes
                .entry(name)
                .and_modify(|seen: &mut TestOutcome| *seen = worse(*seen, test.outcome))
                .or_insert(test.outcome);
        }
    }
    outcomes
}

/// Failed over passed over skipped.
fn worse(a: TestOutcome, b: TestOutcome) -> TestOutcome {
    let rank = |o: TestOutcome| match o {
        TestOutcome::Failed => 2,
        TestOutcome::Passed => 1,
        TestOutcome::Skipped => 0,
    };
    if rank(b) > rank(a) { b } else { a }
}

/// Each check of a run by name; a name given twice keeps its worse status, so that a failure
/// is never hidden by a pass of the same name.
fn check_statuses(run: &RunRecord) -> BTreeMap<String, CheckStatus> {
    let mut statuses = BTreeMap::new();
    for check in &run.checks {
        statuses
            .entry(check.name.clone())
            .and_modify(|seen: &mut CheckStatus| {
                if check_rank(check.status) > check_rank(*seen) {
                    *seen = check.status;
                }
            })
            .or_insert(check.status);
    }
    statuses
}

/// A failure of any kind over a pass over a skip.
fn check_rank(status: CheckStatus) -> u8 {
    match status {
        CheckStatus::Failed | CheckStatus::Timeout | CheckStatus::Error => 2,
        CheckStatus::Passed => 1,
        CheckStatus::Skipped => 0,
    }
}

fn trend_point(run: &RunRecord) -> TrendPoint {
    let outcomes = test_outcomes(run);
    let count = |wanted: TestOutcome| outcomes.values().filter(|o| **o == wanted).count();
    TrendPoint {
        run_id: run.run_id.clone(),
        at_ms: run.at_ms,
        ready: run.ready,
        failed_tests: count(TestOutcome::Failed),
        passed_tests: count(TestOutcome::Passed),
        failed_checks: check_statuses(run).values().filter(|s| s.is_failure()).count(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use TestOutcome::{Failed, Passed, Skipped};

    fn test(name: &str, outcome: TestOutcome) -> TestResult {
        TestResult { name: name.to_owned(), outcome, duration_ms: None, message: None }
    }

    fn check(name: &str, status: CheckStatus, tests: Vec<TestResult>) -> CheckRecord {
        CheckRecord { name: name.to_owned(), status, severity: Severity::Critical, duration_ms: 10, tests }
    }

    fn run(id: &str, at_ms: u64, checks: Vec<CheckRecord>) -> RunRecord {
        RunRecord { run_id: id.to_owned(), at_ms, ready: is_ready(&checks), checks }
    }

    /// A run of one check, "unit", with the given tests; the check fails when a test does.
    fn unit_run(id: &str, at_ms: u64, tests: &[(&str, TestOutcome)]) -> RunRecord {
        let tests: Vec<TestResult> = tests.iter().map(|(n, o)| test(n, *o)).collect();
        let status =
            if tests.iter().any(|t| t.outcome == Failed) { CheckStatus::Failed } else { CheckStatus::Passed };
        run(id, at_ms, vec![check("unit", status, tests)])
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn ready_only_when_every_critical_check_passed() {
        assert!(is_ready(&[]));
        assert!(is_ready(&[check("a", CheckStatus::Passed, vec![])]));
        for status in [CheckStatus::Failed, CheckStatus::Timeout, CheckStatus::Error, CheckStatus::Skipped] {
            assert!(
                !is_ready(&[check("a", CheckStatus::Passed, vec![]), check("b", status, vec![])]),
                "{status:?}"
            );
            let warning = CheckRecord { severity: Severity::Warning, ..check("b", status, vec![]) };
            assert!(is_ready(&[check("a", CheckStatus::Passed, vec![]), warning]), "{status:?}");
        }
    }

    #[test]
    fn empty_history_makes_every_failure_new() {
        let current = unit_run("r1", 100, &[("a", Passed), ("b", Failed), ("c", Skipped)]);
        let comparison = compare(&current, &[], 10);
        assert_eq!(
            comparison,
            Comparison {
                new_failures: names(&["unit::b"]),
                newly_failing_checks: names(&["unit"]),
                trend: vec![TrendPoint {
                    run_id: "r1".to_owned(),
                    at_ms: 100,
                    ready: false,
                    failed_tests: 1,
                    passed_tests: 1,
                    failed_checks: 1,
                }],
                ..Comparison::default()
            }
        );
    }

    #[test]
    fn new_fixed_and_still_failing_against_the_previous_run() {
        let older = unit_run("r1", 100, &[("a", Failed), ("b", Failed), ("c", Failed)]);
        let previous = unit_run("r2", 200, &[("a", Failed), ("b", Failed), ("c", Passed), ("gone", Failed)]);
        let current = unit_run(
            "r3",
            300,
            &[("a", Passed), ("b", Failed), ("c", Failed), ("new", Failed), ("s", Skipped)],
        );
        let comparison = compare(&current, &[previous, older], 10);
        assert_eq!(comparison.new_failures, names(&["unit::c", "unit::new"]));
        assert_eq!(comparison.fixed, names(&["unit::a"]));
        assert_eq!(comparison.still_failing, names(&["unit::b"]));
        // The check failed before and fails now: neither newly failing nor fixed.
        assert!(comparison.newly_failing_checks.is_empty());
        assert!(comparison.fixed_checks.is_empty());
    }

    #[test]
    fn skipped_or_absent_is_neither_fixed_nor_failing() {
        let previous = unit_run("r1", 100, &[("a", Failed), ("b", Failed), ("c", Skipped)]);
        let current = unit_run("r2", 200, &[("a", Skipped), ("c", Failed)]);
        let comparison = compare(&current, &[previous], 10);
        assert!(comparison.fixed.is_empty());
        assert!(comparison.still_failing.is_empty());
        assert_eq!(comparison.new_failures, names(&["unit::c"]));
    }

    #[test]
    fn same_test_name_in_two_checks_is_two_tests() {
        let previous = run(
            "r1",
            100,
            vec![
                check("debug", CheckStatus::Passed, vec![test("t", Passed)]),
                check("release", CheckStatus::Failed, vec![test("t", Failed)]),
            ],
        );
        let current = run(
            "r2",
            200,
            vec![
                check("debug", CheckStatus::Failed, vec![test("t", Failed)]),
                check("release", CheckStatus::Passed, vec![test("t", Passed)]),
            ],
        );
        let comparison = compare(&current, &[previous], 10);
        assert_eq!(comparison.new_failures, names(&["debug::t"]));
        assert_eq!(comparison.fixed, names(&["release::t"]));
        assert_eq!(comparison.newly_failing_checks, names(&["debug"]));
        assert_eq!(comparison.fixed_checks, names(&["release"]));
    }

    #[test]
    fn a_name_repeated_within_a_check_fails_if_either_failed() {
        let current = run(
            "r2",
            200,
            vec![check(
                "unit",
                CheckStatus::Failed,
                vec![test("t", Passed), test("t", Failed), test("t", Skipped)],
            )],
        );
        let previous = unit_run("r1", 100, &[("t", Passed)]);
        let comparison = compare(&current, &[previous], 10);
        assert_eq!(comparison.new_failures, names(&["unit::t"]));
        assert_eq!(comparison.trend[0].failed_tests, 1);
        assert_eq!(comparison.trend[0].passed_tests, 0);
    }

    #[test]
    fn checks_without_reports_take_part_as_checks() {
        let previous = run(
            "r1",
            100,
            vec![
                check("lint", CheckStatus::Failed, vec![]),
                check("fmt", CheckStatus::Passed, vec![]),
                check("build", CheckStatus::Timeout, vec![]),
                check("audit", CheckStatus::Error, vec![]),
                check("docs", CheckStatus::Skipped, vec![]),
            ],
        );
        let current = run(
            "r2",
            200,
            vec![
                check("lint", CheckStatus::Passed, vec![]),
                check("fmt", CheckStatus::Timeout, vec![]),
                check("build", CheckStatus::Error, vec![]),
                check("audit", CheckStatus::Skipped, vec![]),
                check("docs", CheckStatus::Failed, vec![]),
                check("new", CheckStatus::Error, vec![]),
            ],
        );
        let comparison = compare(&current, &[previous], 10);
        assert_eq!(comparison.newly_failing_checks, names(&["docs", "fmt", "new"]));
        assert_eq!(comparison.fixed_checks, names(&["lint"]));
        assert!(comparison.new_failures.is_empty() && comparison.fixed.is_empty());
        assert_eq!(comparison.trend[0].failed_checks, 4);
        assert_eq!(comparison.trend[1].failed_checks, 3);
    }

    #[test]
    fn flaky_within_the_window_only() {
        // Newest first: r5 (current), r4, r3, r2, r1.
        let current = unit_run("r5", 500, &[("a", Passed), ("b", Passed), ("c", Failed), ("d", Passed)]);
        let history = vec![
            unit_run("r4", 400, &[("a", Failed), ("b", Passed), ("c", Failed), ("d", Skipped)]),
            unit_run("r3", 300, &[("a", Passed), ("b", Passed), ("c", Failed), ("d", Passed)]),
            unit_run("r2", 200, &[("a", Passed), ("b", Failed), ("c", Passed), ("d", Passed)]),
            unit_run("r1", 100, &[("a", Passed), ("b", Passed), ("c", Failed), ("d", Passed)]),
        ];
        let comparison = compare(&current, &history, 3);
        assert_eq!(comparison.flaky, vec![FlakyTest { name: "unit::a".to_owned(), passes: 2, failures: 1 }]);
        let comparison = compare(&current, &history, 5);
        assert_eq!(
            comparison.flaky,
            vec![
                FlakyTest { name: "unit::a".to_owned(), passes: 4, failures: 1 },
                FlakyTest { name: "unit::b".to_owned(), passes: 4, failures: 1 },
                FlakyTest { name: "unit::c".to_owned(), passes: 1, failures: 4 },
            ]
        );
        // A window of one run can show no flip.
        assert!(compare(&current, &history, 1).flaky.is_empty());
        assert!(compare(&current, &history, 0).flaky.is_empty());
    }

    #[test]
    fn trend_is_newest_first_and_capped() {
        let current = unit_run("r4", 400, &[("a", Passed), ("b", Passed)]);
        let history = vec![
            unit_run("r3", 300, &[("a", Failed), ("b", Passed)]),
            unit_run("r2", 200, &[("a", Failed), ("b", Failed)]),
            unit_run("r1", 100, &[("a", Passed)]),
        ];
        let trend = compare(&current, &history, 3).trend;
        let summary: Vec<(&str, bool, usize, usize, usize)> = trend
            .iter()
            .map(|p| (p.run_id.as_str(), p.ready, p.failed_tests, p.passed_tests, p.failed_checks))
            .collect();
        assert_eq!(summary, vec![("r4", true, 0, 2, 0), ("r3", false, 1, 1, 1), ("r2", false, 2, 0, 1)]);
        assert_eq!(compare(&current, &history, 100).trend.len(), 4);
        assert_eq!(compare(&current, &history, 0).trend.len(), 1);
    }

    #[test]
    fn the_current_run_in_its_own_history_is_left_out() {
        let previous = unit_run("r1", 100, &[("a", Failed)]);
        let current = unit_run("r2", 200, &[("a", Failed)]);
        let comparison = compare(&current, &[current.clone(), previous], 10);
        assert_eq!(comparison.still_failing, names(&["unit::a"]));
        assert_eq!(comparison.trend.len(), 2);
    }

    #[test]
    fn output_is_deterministic() {
        let previous = unit_run("r1", 100, &[("z", Passed), ("m", Passed), ("a", Passed)]);
        let current = unit_run("r2", 200, &[("m", Failed), ("z", Failed), ("a", Failed)]);
        let first = compare(&current, std::slice::from_ref(&previous), 10);
        assert_eq!(first.new_failures, names(&["unit::a", "unit::m", "unit::z"]));
        assert_eq!(first, compare(&current, &[previous], 10));
    }

    #[test]
    fn serde_shapes() {
        let record = run("r1", 5, vec![check("unit tests", CheckStatus::Timeout, vec![])]);
        let value = serde_json::to_value(&record).expect("serializes");
        assert_eq!(
            value,
            serde_json::json!({
                "runId": "r1", "atMs": 5, "ready": false,
                "checks": [{"name": "unit tests", "status": "timeout", "severity": "critical", "durationMs": 10, "tests": []}]
            })
        );
        let back: RunRecord = serde_json::from_value(serde_json::json!({
            "runId": "r1", "atMs": 5, "ready": false,
            "checks": [{"name": "unit tests", "status": "timeout", "severity": "critical", "durationMs": 10}]
        }))
        .expect("deserializes without tests");
        assert_eq!(back, record);
        let comparison = compare(&record, &[], 10);
        let value = serde_json::to_value(&comparison).expect("serializes");
        assert_eq!(value["newlyFailingChecks"], serde_json::json!(["unit tests"]));
        assert_eq!(value["trend"][0]["failedChecks"], 1);
    }
}
