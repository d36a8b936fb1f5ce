//! The nodes of one iteration that write, ask and run: `generate-k`, `approve-k`, `run-k` and
//! `check-k-i`.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use conveyor_shared::input::{self, InputRequired};
use conveyor_shared::model::{ToolOutcome, result};
use serde_json::{Value, json};

use super::super::generate::{Inputs, scripts_result};
use super::super::missing::{MissingFile, missing_files};
use super::super::scripts::{Plan, Planned, last_step};
use super::super::secrets::Masker;
use super::super::workspace::{Owner, Place, remove_task};
use super::{Context, TOOL};
use crate::cancelled;
use crate::operator_config::{BootstrapProfile, Workspace};
use crate::process::{self, Ending, Finished};

/// Output kept in a node's result, per stream: the end of it, cut after it is masked.
const SHOWN_OUTPUT_BYTES: usize = 4 * 1024;
/// Steps and checks listed in the approval question, each.
const LISTED: usize = 15;

/// A node that has nothing to do: a round after the loop ended, or one the person did not approve.
fn skipped(iteration: u64, why: &str) -> ToolOutcome {
    ToolOutcome::Result(result::structured(
        format!("iteration {iteration}: skipped ({why})"),
        json!({"skipped": true, "iteration": iteration, "why": why}),
    ))
}

/// The files the caller's earlier executions of the profile learned a fix for: create them from
/// their templates.
async fn known_fixes(cx: &Context, profile: &BootstrapProfile) -> BTreeSet<String> {
    let runs = cx.ctx.memories(TOOL, &profile.name, profile.history).await.unwrap_or_default();
    runs.iter()
        .filter_map(|run| run.get("learnings").and_then(Value::as_array))
        .flatten()
        .filter_map(|learning| learning.get("fixCreates").and_then(Value::as_str).map(str::to_owned))
        .collect()
}

pub(super) async fn generate(cx: Context) -> ToolOutcome {
    let (profile, root) = match cx.profile() {
        Ok(found) => found,
        Err(outcome) => return outcome,
    };
    let iteration = cx.iteration();
    if cx.arg("previous").get("done").and_then(Value::as_bool).unwrap_or(false) {
        // The shape of a plan, so that every later node's references resolve.
        let why = "the loop ended in an earlier iteration";
        return ToolOutcome::Result(result::structured(
            format!("iteration {iteration}: skipped ({why})"),
            json!({"skipped": true, "iteration": iteration, "why": why, "steps": [], "checks": [], "missingFiles": [], "fixes": [], "bootstrapScript": ""}),
        ));
    }
    let inputs = match Inputs::from(&cx.ctx.arguments) {
        Ok(inputs) => inputs,
        Err(outcome) => return outcome,
    };
    let known = known_fixes(&cx, profile).await;
    let missing = missing_files(root, &inputs.requirements);
    let fixes: Vec<&MissingFile> =
        missing.iter().filter(|m| known.contains(&m.path) && m.template.is_some()).collect();
    let plan = Plan::new(&inputs.requirements, &inputs.platforms, &fixes, &[]);
    let adr_path = cx.ctx.str_arg("adrPath").unwrap_or_default().to_owned();
    let heading = format!(
        "iteration {iteration} of Conveyor's {TOOL} for profile `{}`, from {} ADRs under {adr_path} of root `{}` (task {})",
        profile.name,
        inputs.requirements.adrs.len(),
        root.name,
        cx.ctx.task_id
    );
    let mut outcome = scripts_result(&cx.ctx, &root.name, &adr_path, &inputs, &plan, &missing, &heading, 0);
    if let ToolOutcome::Result(value) = &mut outcome {
        // The script the run and check nodes run, as the ADRs wrote it; everything else of the
        // plan (its steps and checks, which the approval, the learnings and the memory show) is
        // masked like the output.
        let script = value["content"][1]["resource"]["text"].clone();
        Masker::for_profile(profile).mask_json(value);
        let fixed: Vec<&str> = fixes.iter().map(|f| f.path.as_str()).collect();
        value["structuredContent"]["iteration"] = json!(iteration);
        value["structuredContent"]["skipped"] = json!(false);
        value["structuredContent"]["fixes"] = json!(fixed);
        value["structuredContent"]["bootstrapScript"] = script;
    }
    outcome
}

fn listed(items: &[Planned]) -> String {
    let mut out = String::new();
    for item in items.iter().take(LISTED) {
        let from = item.source.as_ref().map(|s| format!(" ({}, {})", s.adr, s.section)).unwrap_or_default();
        out.push_str(&format!("  {}. {}{from}\n", item.id, item.command.lines().next().unwrap_or_default()));
    }
    if items.len() > LISTED {
        out.push_str(&format!("  … and {} more\n", items.len() - LISTED));
    }
    out
}

pub(super) async fn approve(cx: Context) -> ToolOutcome {
    let (profile, root) = match cx.profile() {
        Ok(found) => found,
        Err(outcome) => return outcome,
    };
    let iteration = cx.iteration();
    let plan = cx.arg("plan");
    if cx.round_skipped() {
        return skipped(iteration, "the loop ended in an earlier iteration");
    }
    let Some(reply) = cx.ctx.input("approve") else {
        let steps: Vec<Planned> = serde_json::from_value(plan["steps"].clone()).unwrap_or_default();
        let checks: Vec<Planned> = serde_json::from_value(plan["checks"].clone()).unwrap_or_default();
        let place = match &profile.workspace {
            Workspace::Root => format!("in root `{}` itself (what the steps create stays)", root.name),
            Workspace::Scratch(_) => format!("in a scratch copy of root `{}`", root.name),
        };
        let message = format!(
            "Bootstrap validation, iteration {iteration} of {}, profile `{}`: run {} steps, then {} checks, {place}, each with a timeout of {} s?\n\nSteps:\n{}\nChecks:\n{}\nThe scripts are at {} and {}.",
            cx.arg("maxIterations").as_u64().unwrap_or(1),
            profile.name,
            steps.len(),
            checks.len(),
            profile.timeout_s,
            if steps.is_empty() { "  (none)\n".to_owned() } else { listed(&steps) },
            if checks.is_empty() { "  (none)\n".to_owned() } else { listed(&checks) },
            plan["scripts"]["bootstrap"].as_str().unwrap_or_default(),
            plan["scripts"]["validate"].as_str().unwrap_or_default()
        );
        let schema = json!({
            "type": "object",
            "properties": {"approve": {"type": "boolean", "title": "Run them", "description": "Run this iteration's steps and checks", "default": false}},
            "required": ["approve"]
        });
        let message = Masker::for_profile(profile).mask(&message);
        return ToolOutcome::InputRequired(
            InputRequired::new().ask("approve", input::elicit_form(message, schema)),
        );
    };
    let action = reply.get("action").and_then(Value::as_str).unwrap_or("nothing");
    let yes = action == "accept" && reply.pointer("/content/approve").and_then(Value::as_bool) == Some(true);
    let why = if yes {
        "approved".to_owned()
    } else if action == "accept" {
        "the person did not approve the plan".to_owned()
    } else {
        format!("the person answered `{action}`")
    };
    ToolOutcome::Result(result::structured(
        format!("iteration {iteration}: {why}"),
        json!({"approved": yes, "iteration": iteration, "why": why}),
    ))
}

/// Runs `script` (or one check's command) with bash in `dir`, under the profile's limits.
async fn run_bash(
    cx: &Context,
    profile: &BootstrapProfile,
    dir: &Path,
    script: &str,
    name: &str,
) -> Finished {
    let command = process::Command {
        argv: vec!["bash".into(), "-c".into(), script.to_owned(), name.to_owned()],
        cwd: dir.to_path_buf(),
        env: profile.env.clone(),
        timeout: Duration::from_secs(profile.timeout_s),
        max_output_bytes: usize::try_from(profile.max_output_bytes).unwrap_or(usize::MAX),
        traceparent: cx.ctx.traceparent.clone(),
    };
    process::run(&command, &cx.ctx.cancel).await
}

/// How a command ended, with its output's end, secrets masked.
fn ended(run: &Finished, profile: &BootstrapProfile) -> Value {
    let masker = Masker::for_profile(profile);
    json!({
        "passed": run.succeeded(),
        "exitCode": run.exit_code,
        "timedOut": run.ending == Ending::TimedOut,
        "durationMs": run.duration_ms,
        "summary": masker.mask(&run.describe(Duration::from_secs(profile.timeout_s))),
        "stdout": masker.tail(&run.stdout, SHOWN_OUTPUT_BYTES),
        "stderr": masker.tail(&run.stderr, SHOWN_OUTPUT_BYTES)
    })
}

/// Whose the scratch copies this node makes are, for their marker.
async fn owner(cx: &Context) -> Result<Owner, String> {
    let deployment = cx
        .ctx
        .deployment_id()
        .await
        .map_err(|e| format!("the scratch copy cannot be marked as this deployment's: {e}"))?;
    Ok(Owner { task: cx.ctx.task_id.clone(), deployment })
}

/// A node whose work was cancelled. When its task is over (and not only this worker stopping,
/// which hands the node to another that needs the copies), the task's copies go now.
async fn cancelled_node(cx: &Context, profile: &BootstrapProfile) -> ToolOutcome {
    if matches!(cx.ctx.task_is_live().await, Ok(false)) {
        let (profile, task) = (profile.clone(), cx.ctx.task_id.clone());
        tokio::task::spawn_blocking(move || remove_task(&profile, &task)).await.ok();
    }
    cancelled()
}

pub(super) async fn run_bootstrap(cx: Context) -> ToolOutcome {
    let (profile, root) = match cx.profile() {
        Ok(found) => found,
        Err(outcome) => return outcome,
    };
    let iteration = cx.iteration();
    if !cx.approved() {
        return skipped(iteration, "not approved");
    }
    let steps: Vec<Planned> = serde_json::from_value(cx.arg("steps").clone()).unwrap_or_default();
    cx.ctx
        .progress(
            0.0,
            None,
            Some(&format!("Iteration {iteration}: running the bootstrap ({} steps)", steps.len())),
        )
        .await;
    let place = Place::of(profile, &root.path, &cx.ctx.task_id, iteration);
    let copied = if place.is_scratch() {
        match owner(&cx).await {
            Ok(owner) => {
                let (copy_place, copy_root, cancel) = (place.clone(), root.clone(), cx.ctx.cancel.clone());
                tokio::task::spawn_blocking(move || copy_place.copy_fresh(&copy_root, &owner, &cancel))
                    .await
                    .map_err(|e| e.to_string())
                    .and_then(|r| r)
            }
            Err(e) => Err(e),
        }
    } else {
        Ok(())
    };
    if cx.ctx.cancel.is_cancelled() {
        return cancelled_node(&cx, profile).await;
    }
    if let Err(e) = copied {
        let structured = json!({"passed": false, "iteration": iteration, "summary": format!("the workspace could not be made: {e}"), "stdout": "", "stderr": ""});
        return ToolOutcome::Result(result::structured(format!("iteration {iteration}: {e}"), structured));
    }
    let script = cx.arg("script").as_str().unwrap_or_default().to_owned();
    let run = run_bash(&cx, profile, &place.dir, &script, "bootstrap.sh").await;
    if run.ending == Ending::Cancelled {
        return cancelled_node(&cx, profile).await;
    }
    place.mark_ready();
    let mut structured = ended(&run, profile);
    structured["iteration"] = json!(iteration);
    let checks: Vec<Planned> = serde_json::from_value(cx.arg("checks").clone()).unwrap_or_default();
    structured["environment"] = environment(&place, steps.iter().chain(&checks));
    if !run.succeeded() {
        let failed = last_step(&run.stdout.text).and_then(|n| steps.get(n.checked_sub(1)?));
        structured["failedStep"] = json!(failed.map(|s| s.id.clone()));
    }
    let text =
        format!("iteration {iteration}: bootstrap {}", structured["summary"].as_str().unwrap_or_default());
    ToolOutcome::Result(result::structured(text, structured))
}

/// Shell words that are no program to look for.
const BUILTINS: &[&str] = &[
    "cd", "echo", "test", "[", "export", "set", "true", "false", "if", "for", "while", "source", ".", "exit",
    "printf",
];

/// What the run's environment was: the system, where it ran, and whether each program the steps
/// and checks start is there (on the worker's `PATH`, or in the workspace for `./x`).
fn environment<'a>(place: &Place, items: impl Iterator<Item = &'a Planned>) -> Value {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut programs = serde_json::Map::new();
    for item in items {
        let Some(program) = item.command.split_whitespace().find(|w| !w.contains('=')) else { continue };
        if BUILTINS.contains(&program) || programs.contains_key(program) {
            continue;
        }
        let found = if program.contains('/') {
            place.dir.join(program).is_file()
        } else {
            std::env::split_paths(&path).any(|dir| dir.join(program).is_file())
        };
        programs.insert(program.to_owned(), json!(found));
    }
    json!({
        "os": std::env::consts::OS,
        "arch": std::env::consts::ARCH,
        "workspace": if place.is_scratch() { "scratch copy" } else { "root" },
        "programs": programs
    })
}

pub(super) async fn check(cx: Context) -> ToolOutcome {
    let (profile, root) = match cx.profile() {
        Ok(found) => found,
        Err(outcome) => return outcome,
    };
    let iteration = cx.iteration();
    let check: Planned = match serde_json::from_value(cx.arg("check").clone()) {
        Ok(check) => check,
        Err(e) => return crate::invalid(format!("bootstrap_loop_check: the check is not readable: {e}")),
    };
    if !cx.approved() {
        return skipped(iteration, "not approved");
    }
    let masker = Masker::for_profile(profile);
    let message = masker.mask(&format!("Iteration {iteration}: checking {}", check.requirement));
    cx.ctx.progress(0.0, None, Some(&message)).await;
    let place = Place::of(profile, &root.path, &cx.ctx.task_id, iteration);
    if !place.is_ready() {
        // This worker has no copy: make one and bootstrap it the same way.
        let owner = match owner(&cx).await {
            Ok(owner) => owner,
            Err(e) => return check_result(iteration, &check, json!({"passed": false, "summary": e})),
        };
        let (copy_place, copy_root, node) = (place.clone(), root.clone(), cx.ctx.node_id.clone());
        let cancel = cx.ctx.cancel.clone();
        let copied =
            tokio::task::spawn_blocking(move || copy_place.private_copy(&copy_root, &node, &owner, &cancel))
                .await;
        if cx.ctx.cancel.is_cancelled() {
            return cancelled_node(&cx, profile).await;
        }
        match copied {
            Ok(Ok(private)) => {
                let script = cx.arg("script").as_str().unwrap_or_default().to_owned();
                let run = run_bash(&cx, profile, &private.dir, &script, "bootstrap.sh").await;
                if run.ending == Ending::Cancelled {
                    return cancelled_node(&cx, profile).await;
                }
                place.adopt(private);
            }
            Ok(Err(e)) => return check_result(iteration, &check, json!({"passed": false, "summary": e})),
            Err(e) => {
                return check_result(iteration, &check, json!({"passed": false, "summary": e.to_string()}));
            }
        }
    }
    let run = run_bash(&cx, profile, &place.dir, &check.command, &check.id).await;
    if run.ending == Ending::Cancelled {
        return cancelled_node(&cx, profile).await;
    }
    check_result(iteration, &check, ended(&run, profile))
}

fn check_result(iteration: u64, check: &Planned, mut structured: Value) -> ToolOutcome {
    structured["id"] = json!(check.id);
    structured["iteration"] = json!(iteration);
    let passed = structured["passed"].as_bool().unwrap_or(false);
    let text = format!(
        "iteration {iteration}, {}: {} ({})",
        check.id,
        if passed { "passed" } else { "failed" },
        structured["summary"].as_str().unwrap_or_default()
    );
    ToolOutcome::Result(result::structured(text, structured))
}
