//! `learn-k`: one iteration's failures as learnings, its execution kept in the caller's memory of
//! the profile, and whether the loop is done.

use std::collections::BTreeSet;

use conveyor_shared::model::{ToolOutcome, now_ms, result};
use serde_json::{Value, json};

use super::super::learnings::{Learning, Outcome, learn as learn_from};
use super::super::missing::MissingFile;
use super::super::scripts::Planned;
use super::super::secrets::Masker;
use super::super::workspace::{Place, remove_place};
use super::{Context, TOOL};

/// The learnings node of one iteration.
pub(super) async fn learn(cx: Context) -> ToolOutcome {
    let (profile, root) = match cx.profile() {
        Ok(found) => found,
        Err(outcome) => return outcome,
    };
    let iteration = cx.iteration();
    let plan = cx.arg("plan");
    if cx.round_skipped() {
        // The loop ended before this round: hand the last round's word on.
        let previous = cx.arg("previous").clone();
        return ToolOutcome::Result(result::structured(format!("iteration {iteration}: skipped"), previous));
    }
    if !cx.approved() {
        let why = cx.arg("approval").get("why").and_then(Value::as_str).unwrap_or("not approved").to_owned();
        // What earlier rounds gathered stays; the loop stops here.
        let mut structured = match cx.arg("previous") {
            Value::Object(previous) => Value::Object(previous.clone()),
            _ => json!({"executions": [], "allLearnings": [], "fixed": []}),
        };
        structured["iteration"] = json!(iteration);
        structured["done"] = json!(true);
        structured["passed"] = json!(false);
        structured["stopped"] = json!(format!("iteration {iteration} was not run: {why}"));
        return ToolOutcome::Result(result::structured(format!("iteration {iteration}: {why}"), structured));
    }
    let steps: Vec<Planned> = serde_json::from_value(plan["steps"].clone()).unwrap_or_default();
    let planned_checks: Vec<Planned> = serde_json::from_value(plan["checks"].clone()).unwrap_or_default();
    let missing: Vec<MissingFile> = serde_json::from_value(plan["missingFiles"].clone()).unwrap_or_default();
    let fixes: Vec<String> = serde_json::from_value(plan["fixes"].clone()).unwrap_or_default();
    let run = cx.arg("run");
    let bootstrap_passed = run["passed"].as_bool().unwrap_or(false);
    let mut learnings: Vec<Learning> = Vec::new();
    if !bootstrap_passed {
        let failed = run["failedStep"].as_str().and_then(|id| steps.iter().find(|s| s.id == id));
        let whole = Planned {
            id: "bootstrap".into(),
            command: "bootstrap.sh".into(),
            requirement: "bootstrap.sh".into(),
            origin: super::super::scripts::Origin::Adr,
            source: None,
        };
        learnings.push(learn_from(failed.unwrap_or(&whole), true, &outcome_of(run), &missing));
    }
    let results: Vec<Value> = cx.arg("checks").as_array().cloned().unwrap_or_default();
    let mut checks = Vec::new();
    for (check, ran) in planned_checks.iter().zip(&results) {
        let passed = ran["passed"].as_bool().unwrap_or(false);
        let mut evidence: Vec<String> = Vec::new();
        if !passed {
            let learning = learn_from(check, false, &outcome_of(ran), &missing);
            evidence = learning.evidence.clone();
            learnings.push(learning);
        }
        checks.push(json!({
            "id": check.id,
            "adr": check.source.as_ref().map(|s| s.adr.clone()),
            "adrPath": check.source.as_ref().map(|s| s.adr_path.clone()),
            "requirement": check.requirement,
            "passed": passed,
            "evidence": evidence,
            "durationMs": ran["durationMs"]
        }));
    }
    let passed = bootstrap_passed && checks.iter().all(|c| c["passed"] == json!(true));
    // What earlier iterations of this task learned that passes now, with its fix applied.
    let earlier: Vec<Learning> = cx
        .arg("previous")
        .get("allLearnings")
        .and_then(|l| serde_json::from_value(l.clone()).ok())
        .unwrap_or_default();
    let failing_now: BTreeSet<&str> = learnings.iter().map(|l| l.requirement.as_str()).collect();
    let fixed: Vec<String> = earlier
        .iter()
        .filter(|l| !failing_now.contains(l.requirement.as_str()))
        .filter(|l| l.fix_creates.as_ref().is_some_and(|f| fixes.contains(f)))
        .map(|l| l.key.clone())
        .collect();

    let masker = Masker::for_profile(profile);
    let mut execution = json!({
        "runId": cx.ctx.task_id,
        "iteration": iteration,
        "atMs": now_ms(),
        "root": root.name,
        "passed": passed,
        "bootstrap": {"passed": bootstrap_passed, "failedStep": run.get("failedStep"), "summary": run["summary"], "durationMs": run["durationMs"]},
        "environment": run["environment"],
        "checks": checks,
        "fixesApplied": fixes,
        "learnings": learnings
    });
    // What the memory keeps, every worker reads back and later tasks show: masked as the
    // output is, the profile's values included.
    masker.mask_json(&mut execution);
    let previous_runs = match cx.ctx.record_memory(TOOL, &profile.name, &execution, profile.history).await {
        Ok(runs) => runs,
        Err(e) => {
            return ToolOutcome::Result(result::error_text(format!(
                "could not keep the execution in Redis: {e}"
            )));
        }
    };
    let seen: BTreeSet<String> = previous_runs
        .iter()
        .filter_map(|run| run.get("learnings").and_then(Value::as_array))
        .flatten()
        .filter_map(|l| l.get("key").and_then(Value::as_str).map(str::to_owned))
        .collect();
    for learning in &mut learnings {
        learning.seen_before = seen.contains(&learning.key);
    }
    execution["learnings"] = json!(learnings);
    // The copy is done with: every check of this round has ended.
    let place = Place::of(profile, &root.path, &cx.ctx.task_id, iteration);
    tokio::task::spawn_blocking(move || remove_place(&place)).await.ok();

    let max = cx.arg("maxIterations").as_u64().unwrap_or(1);
    let mut all = earlier;
    all.extend(learnings.iter().cloned());
    let mut all_fixed: Vec<String> = cx
        .arg("previous")
        .get("fixed")
        .and_then(|f| serde_json::from_value(f.clone()).ok())
        .unwrap_or_default();
    all_fixed.extend(fixed);
    let text = format!(
        "iteration {iteration}: {} ({} learnings, {} seen before)",
        if passed { "validation passed" } else { "validation failed" },
        learnings.len(),
        learnings.iter().filter(|l| l.seen_before).count()
    );
    let mut executions: Vec<Value> =
        cx.arg("previous").get("executions").and_then(Value::as_array).cloned().unwrap_or_default();
    executions.push(execution.clone());
    let mut outcome = ToolOutcome::Result(result::structured(
        text,
        json!({
            "iteration": iteration,
            "passed": passed,
            "done": passed || iteration >= max,
            "execution": execution,
            "executions": executions,
            "learnings": learnings,
            "allLearnings": all,
            "fixed": all_fixed,
            "previousExecutions": previous_runs.len()
        }),
    ));
    if let ToolOutcome::Result(value) = &mut outcome {
        masker.mask_json(value);
    }
    outcome
}

/// A node's result as the classifier reads it: its exit, and its output (already masked).
fn outcome_of(ran: &Value) -> Outcome {
    Outcome {
        exit_code: ran["exitCode"].as_i64().and_then(|c| i32::try_from(c).ok()),
        timed_out: ran["timedOut"].as_bool().unwrap_or(false),
        output: format!(
            "{}\n{}\n{}",
            ran["stdout"].as_str().unwrap_or_default(),
            ran["stderr"].as_str().unwrap_or_default(),
            ran["summary"].as_str().unwrap_or_default()
        ),
    }
}
