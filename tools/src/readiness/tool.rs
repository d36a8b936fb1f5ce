//! `deployment_readiness {"profile"}`: runs the checks of an operator's profile as nodes of one
//! graph (each a child process, see [`crate::process`]), then a report node that parses
//! nothing itself but keeps the run in Redis under the profile and compares it with the runs
//! before it. Checks come only from the operator's tools file: a client names a profile, never a
//! command.

use std::sync::Arc;
use std::time::Duration;

use conveyor_shared::model::{ToolOutcome, now_ms, result};
use conveyor_shared::roots::RootUse;
use serde_json::{Value, json};

use super::history::{self, CheckRecord, CheckStatus, RunRecord};
use super::reports::{self, ReportFormat, TestOutcome, TestResult};
use crate::operator_config::{ConfiguredCheck, OperatorConfig, Profile};
use crate::process::{self, Ending};
use crate::roots::{RootError, Roots};
use crate::{cancelled, invalid, plan};
use conveyor_worker::tool::{FnTool, ToolContext, ToolRegistry};

/// The tool's name, and the name its histories are kept under.
pub const TOOL: &str = "deployment_readiness";
/// The queue of readiness and its steps: give checks a pool of their own.
pub const QUEUE: &str = "readiness";
/// Output kept in a check's result for a person to read.
const SHOWN_OUTPUT_BYTES: usize = 4 * 1024;
/// Slack a check's node gets beyond its command's timeout, to kill the command and report.
const NODE_SLACK_MS: u64 = 30_000;

/// Registers the tool and its steps when the tools file declares at least one profile.
pub fn register(registry: &mut ToolRegistry, roots: &Roots, config: &Arc<OperatorConfig>) {
    if config.profiles.is_empty() {
        return;
    }
    let planner = config.clone();
    let mut reads = RootUse::default();
    reads.bound.insert(
        "profile".to_owned(),
        config.profiles.values().map(|p| (p.name.clone(), p.roots())).collect(),
    );
    registry.register(
        FnTool::new(reads.declared_in(definition(config)), move |ctx| {
            let config = planner.clone();
            async move { plan_run(&config, &ctx) }
        })
        .on_queue(QUEUE),
    );
    let (checker, roots) = (config.clone(), roots.clone());
    registry.register(
        FnTool::step(json!({"name": "readiness_check", "description": "Runs one check of a readiness profile.", "inputSchema": {"type": "object"}}), move |ctx| {
            let (config, roots) = (checker.clone(), roots.clone());
            async move { run_check(&config, &roots, &ctx).await }
        })
        .on_queue(QUEUE),
    );
    let reporter = config.clone();
    registry.register(
        FnTool::step(json!({"name": "readiness_report", "description": "Keeps a readiness run and compares it with the runs before it.", "inputSchema": {"type": "object"}}), move |ctx| {
            let config = reporter.clone();
            async move { report(&config, &ctx).await }
        })
        .on_queue(QUEUE),
    );
}

fn definition(config: &OperatorConfig) -> Value {
    let profiles: Vec<&String> = config.profiles.keys().collect();
    let described: Vec<String> = config
        .profiles
        .values()
        .map(|p| {
            format!(
                "`{}` ({} checks{})",
                p.name,
                p.checks.len(),
                p.description.as_ref().map(|d| format!(": {d}")).unwrap_or_default()
            )
        })
        .collect();
    json!({
        "name": TOOL,
        "title": "Deployment readiness",
        // Which profiles a caller sees depends on the roots it may read: they are listed, with
        // what each is, in `profile` alone, where a gateway shows each caller its own.
        "description": "Runs the checks of a readiness profile the operator defined, each as its own node, parses the test reports they leave (JUnit XML, cargo test, pytest), and says whether the project is ready: per check status and duration, failing tests, and against the profile's previous runs the new failures, fixed tests, flaky tests and the trend. `profile` lists the profiles you may run.",
        "inputSchema": {
            "type": "object",
            "properties": {"profile": {"type": "string", "enum": profiles, "enumDescriptions": described, "description": "The readiness profile to run"}},
            "required": ["profile"],
            "additionalProperties": false
        },
        "outputSchema": {
            "type": "object",
            "properties": {
                "profile": {"type": "string"},
                "ready": {"type": "boolean"},
                "checks": {"type": "array"},
                "failingTests": {"type": "array"},
                "comparison": {"type": "object"}
            },
            "required": ["profile", "ready", "checks"]
        },
        "execution": {"taskSupport": "optional"}
    })
}

fn profile<'a>(config: &'a OperatorConfig, name: &str) -> Result<&'a Profile, ToolOutcome> {
    config.profiles.get(name).ok_or_else(|| {
        invalid(format!(
            "no readiness profile `{name}`; the profiles are: {}",
            config.profiles.keys().cloned().collect::<Vec<_>>().join(", ")
        ))
    })
}

/// The profile a call names, when its checks run only in roots the caller may read; another is
/// refused like an unknown one, naming only the caller's.
fn profile_for_caller<'a>(
    config: &'a OperatorConfig,
    ctx: &ToolContext,
    name: &str,
) -> Result<&'a Profile, ToolOutcome> {
    let yours = |p: &Profile| p.roots().iter().all(|r| ctx.may_read_root(r));
    match config.profiles.get(name) {
        Some(profile) if yours(profile) => Ok(profile),
        found => {
            if found.is_some() {
                ctx.audit_denied(
                    name,
                    "a readiness profile that runs in a root the access policy does not grant",
                );
            }
            let names: Vec<String> =
                config.profiles.values().filter(|p| yours(p)).map(|p| p.name.clone()).collect();
            Err(invalid(format!(
                "no readiness profile `{name}` that you may run; yours: {}",
                if names.is_empty() { "none".to_owned() } else { names.join(", ") }
            )))
        }
    }
}

fn plan_run(config: &OperatorConfig, ctx: &ToolContext) -> ToolOutcome {
    let name = ctx.str_arg("profile").unwrap_or_default();
    let profile = match profile_for_caller(config, ctx, name) {
        Ok(profile) => profile,
        Err(outcome) => return outcome,
    };
    let mut nodes: Vec<Value> = profile
        .checks
        .iter()
        .enumerate()
        .map(|(i, check)| {
            json!({
                "id": format!("check-{i}"),
                "tool": "step/readiness_check",
                "arguments": {"profile": profile.name, "check": check.name},
                "timeoutMs": check.timeout_s * 1000 + NODE_SLACK_MS
            })
        })
        .collect();
    let checks: Vec<Value> = (0..profile.checks.len())
        .map(|i| json!({"$from": format!("check-{i}"), "pointer": "/structuredContent"}))
        .collect();
    nodes.push(json!({
        "id": "report",
        "tool": "step/readiness_report",
        "arguments": {"profile": profile.name, "checks": checks},
        "dependsOn": (0..profile.checks.len()).map(|i| format!("check-{i}")).collect::<Vec<_>>()
    }));
    plan(nodes, "report")
}

async fn run_check(config: &OperatorConfig, roots: &Roots, ctx: &ToolContext) -> ToolOutcome {
    let profile = match profile(config, ctx.str_arg("profile").unwrap_or_default()) {
        Ok(profile) => profile,
        Err(outcome) => return outcome,
    };
    let wanted = ctx.str_arg("check").unwrap_or_default();
    let Some(check) = profile.checks.iter().find(|c| c.name == wanted) else {
        return invalid(format!("readiness profile `{}` has no check `{wanted}`", profile.name));
    };
    // A root this worker lacks is the check's error below; one the caller lacks is a refusal.
    if let Err(e @ RootError::NotGranted { .. }) = roots.for_caller(ctx, &check.root) {
        return e.into_outcome();
    }
    // The operator's own path: it may lie under a hidden or ignored folder.
    let cwd = match roots.get(&check.root).and_then(|root| root.resolve_configured(&check.cwd)) {
        Ok(cwd) => cwd,
        Err(e) => return finished(check, CheckStatus::Error, 0, vec![], format!("cannot run: {e}"), None),
    };
    let command = process::Command {
        argv: check.argv.clone(),
        cwd,
        env: check.env.clone(),
        timeout: Duration::from_secs(check.timeout_s),
        max_output_bytes: usize::try_from(check.max_output_bytes).unwrap_or(usize::MAX),
        traceparent: ctx.traceparent.clone(),
    };
    let run = process::run(&command, &ctx.cancel).await;
    if run.ending == Ending::Cancelled {
        return cancelled();
    }
    let (tests, report_note) = match read_report(check, roots, &run.stdout.text) {
        Ok(tests) => (tests, None),
        Err(note) => (vec![], Some(note)),
    };
    let any_failed = tests.iter().any(|t| t.outcome == TestOutcome::Failed);
    let status = match run.ending {
        Ending::TimedOut => CheckStatus::Timeout,
        Ending::FailedToStart => CheckStatus::Error,
        _ if run.succeeded() && !any_failed => CheckStatus::Passed,
        _ => CheckStatus::Failed,
    };
    let mut summary = run.describe(command.timeout);
    if !tests.is_empty() {
        let failed = tests.iter().filter(|t| t.outcome == TestOutcome::Failed).count();
        summary.push_str(&format!("; {failed} of {} tests failed", tests.len()));
    }
    if let Some(note) = &report_note {
        summary.push_str(&format!("; {note}"));
    }
    let output = json!({
        "stdout": run.stdout.tail(SHOWN_OUTPUT_BYTES),
        "stderr": run.stderr.tail(SHOWN_OUTPUT_BYTES),
        "exitCode": run.exit_code,
        "truncated": run.stdout.truncated || run.stderr.truncated
    });
    finished(check, status, run.duration_ms, tests, summary, Some(output))
}

/// A check's result: its record, how it ended, and the end of its output.
fn finished(
    check: &ConfiguredCheck,
    status: CheckStatus,
    duration_ms: u64,
    tests: Vec<TestResult>,
    summary: String,
    output: Option<Value>,
) -> ToolOutcome {
    let record =
        CheckRecord { name: check.name.clone(), status, severity: check.severity, duration_ms, tests };
    let mut structured = serde_json::to_value(&record).unwrap_or(Value::Null);
    structured["summary"] = json!(summary);
    if let Some(output) = output {
        structured["output"] = output;
    }
    let status_text =
        serde_json::to_value(status).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
    ToolOutcome::Result(result::structured(format!("{}: {status_text} ({summary})", check.name), structured))
}

/// The check's tests from its report, if it has one.
fn read_report(check: &ConfiguredCheck, roots: &Roots, stdout: &str) -> Result<Vec<TestResult>, String> {
    match check.report {
        None => Ok(vec![]),
        Some(ReportFormat::Junit) => {
            let relative = check.report_path.as_deref().unwrap_or_default();
            // The operator's own path, typically under an ignored `build/` or `target/`.
            let path = roots
                .get(&check.root)
                .and_then(|root| root.resolve_configured(relative))
                .map_err(|e| format!("no JUnit report: {e}"))?;
            let xml = std::fs::read_to_string(&path)
                .map_err(|e| format!("cannot read the JUnit report {relative}: {e}"))?;
            reports::parse_junit(&xml).map_err(|e| format!("the JUnit report {relative} is not valid: {e}"))
        }
        Some(format) => {
            reports::parse(format, stdout).map_err(|e| format!("the test report is not valid: {e}"))
        }
    }
}

async fn report(config: &OperatorConfig, ctx: &ToolContext) -> ToolOutcome {
    let profile = match profile(config, ctx.str_arg("profile").unwrap_or_default()) {
        Ok(profile) => profile,
        Err(outcome) => return outcome,
    };
    let outputs: Vec<Value> =
        ctx.arguments.get("checks").and_then(Value::as_array).cloned().unwrap_or_default();
    let mut checks: Vec<CheckRecord> = Vec::new();
    let mut summaries: Vec<String> = Vec::new();
    for output in &outputs {
        match serde_json::from_value::<CheckRecord>(output.clone()) {
            Ok(record) => {
                summaries.push(output.get("summary").and_then(Value::as_str).unwrap_or_default().to_owned());
                checks.push(record);
            }
            Err(e) => {
                return invalid(format!("readiness_report: a check's result is not a check record: {e}"));
            }
        }
    }
    let run =
        RunRecord { run_id: ctx.task_id.clone(), at_ms: now_ms(), ready: history::is_ready(&checks), checks };
    let entry = serde_json::to_value(&run).unwrap_or(Value::Null);
    let previous: Vec<RunRecord> = match ctx.record_run(TOOL, &profile.name, &entry, profile.history).await {
        Ok(previous) => previous.into_iter().filter_map(|v| serde_json::from_value(v).ok()).collect(),
        Err(e) => {
            return ToolOutcome::Result(result::error_text(format!("could not keep the run in Redis: {e}")));
        }
    };
    let comparison = history::compare(&run, &previous, profile.flaky_window);
    let failing: Vec<Value> = run
        .checks
        .iter()
        .flat_map(|c| {
            c.tests
                .iter()
                .filter(|t| t.outcome == TestOutcome::Failed)
                .map(move |t| json!({"check": c.name, "test": t.name, "message": t.message}))
        })
        .collect();
    let checks: Vec<Value> = run
        .checks
        .iter()
        .zip(&summaries)
        .zip(&outputs)
        .map(|((c, summary), output)| {
            json!({
                "name": c.name,
                "status": c.status,
                "severity": c.severity,
                "durationMs": c.duration_ms,
                "summary": summary,
                "tests": {
                    "passed": c.tests.iter().filter(|t| t.outcome == TestOutcome::Passed).count(),
                    "failed": c.tests.iter().filter(|t| t.outcome == TestOutcome::Failed).count(),
                    "skipped": c.tests.iter().filter(|t| t.outcome == TestOutcome::Skipped).count()
                },
                "output": output.get("output").cloned().unwrap_or(Value::Null)
            })
        })
        .collect();
    let text = report_text(&profile.name, &run, &summaries, &failing, &comparison);
    ToolOutcome::Result(result::structured(
        text,
        json!({
            "profile": profile.name,
            "runId": run.run_id,
            "ready": run.ready,
            "checks": checks,
            "failingTests": failing,
            "comparison": comparison,
            "previousRuns": previous.len()
        }),
    ))
}

fn report_text(
    profile: &str,
    run: &RunRecord,
    summaries: &[String],
    failing: &[Value],
    comparison: &history::Comparison,
) -> String {
    let mut out = format!("Profile `{profile}`: {}\n\n", if run.ready { "READY" } else { "NOT READY" });
    for (check, summary) in run.checks.iter().zip(summaries) {
        let status = serde_json::to_value(check.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let severity = serde_json::to_value(check.severity)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        out.push_str(&format!(
            "- {} [{severity}]: {status} in {:.1} s ({summary})\n",
            check.name,
            check.duration_ms as f64 / 1000.0
        ));
    }
    if !failing.is_empty() {
        out.push_str("\nFailing tests:\n");
        for test in failing {
            out.push_str(&format!(
                "- {}::{}{}\n",
                test["check"].as_str().unwrap_or_default(),
                test["test"].as_str().unwrap_or_default(),
                test["message"]
                    .as_str()
                    .map(|m| format!(": {}", m.lines().next().unwrap_or_default()))
                    .unwrap_or_default()
            ));
        }
    }
    let list = |title: &str, items: &[String], out: &mut String| {
        if !items.is_empty() {
            out.push_str(&format!("\n{title}: {}\n", items.join(", ")));
        }
    };
    list("New failures", &comparison.new_failures, &mut out);
    list("Fixed", &comparison.fixed, &mut out);
    list("Still failing", &comparison.still_failing, &mut out);
    list("Checks newly failing", &comparison.newly_failing_checks, &mut out);
    list("Checks fixed", &comparison.fixed_checks, &mut out);
    if !comparison.flaky.is_empty() {
        let flaky: Vec<String> = comparison
            .flaky
            .iter()
            .map(|f| format!("{} ({} passed, {} failed)", f.name, f.passes, f.failures))
            .collect();
        list("Flaky", &flaky, &mut out);
    }
    if comparison.trend.len() > 1 {
        let trend: Vec<&str> =
            comparison.trend.iter().map(|p| if p.ready { "ready" } else { "not ready" }).collect();
        out.push_str(&format!("\nTrend (newest first): {}\n", trend.join(", ")));
    }
    out
}
