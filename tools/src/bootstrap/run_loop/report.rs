//! `report`: the loop's result (every execution with its checks, the learnings, which were seen
//! before) and the ADR updates it proposes. With `updateAdrs` on a writable profile, it asks the
//! person and writes the approved updates; otherwise each diff is a resource of the task.

use conveyor_shared::input::{self, InputRequired};
use conveyor_shared::model::{ToolOutcome, iso8601, now_ms};
use serde_json::{Value, json};

use super::super::learnings::Learning;
use super::super::secrets::Masker;
use super::super::updates::{AdrUpdate, apply, propose};
use super::super::workspace::remove_task;
use super::Context;
use crate::research::index::read_text;

pub(super) fn output_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "profile": {"type": "string"},
            "root": {"type": "string"},
            "success": {"type": "boolean"},
            "iterations": {"type": "integer"},
            "stopped": {"type": ["string", "null"]},
            "executions": {"type": "array", "items": {"type": "object", "properties": {
                "iteration": {"type": "integer"},
                "passed": {"type": "boolean"},
                "bootstrap": {"type": "object"},
                "fixesApplied": {"type": "array", "items": {"type": "string"}},
                "checks": {"type": "array", "items": {"type": "object", "properties": {
                    "id": {"type": "string"}, "adr": {"type": ["string", "null"]}, "adrPath": {"type": ["string", "null"]},
                    "requirement": {"type": "string"}, "passed": {"type": "boolean"}, "evidence": {"type": "array", "items": {"type": "string"}}
                }, "required": ["adr", "requirement", "passed", "evidence"]}}
            }, "required": ["iteration", "passed", "checks"]}},
            "learnings": {"type": "array", "items": {"type": "object", "properties": {
                "type": {"type": "string"},
                "category": {"type": "string", "enum": ["missingCommand", "missingFile", "permission", "portInUse", "dependency", "testFailure", "timeout", "unknown"]},
                "severity": {"type": "string"},
                "adr": {"type": ["string", "null"]},
                "adrPath": {"type": ["string", "null"]},
                "section": {"type": ["string", "null"]},
                "requirement": {"type": "string"},
                "recommendation": {"type": "string"},
                "evidence": {"type": "array", "items": {"type": "string"}},
                "seenBefore": {"type": "boolean"}
            }, "required": ["type", "category", "severity", "recommendation", "evidence", "seenBefore"]}},
            "newLearnings": {"type": "integer"},
            "knownLearnings": {"type": "integer"},
            "adrUpdates": {"type": "array", "items": {"type": "object", "properties": {
                "adr": {"type": "string"}, "adrPath": {"type": "string"}, "section": {"type": "string"},
                "diff": {"type": "string"}, "uri": {"type": "string"}, "applied": {"type": "boolean"}
            }, "required": ["adrPath", "section", "diff", "applied"]}}
        },
        "required": ["success", "iterations", "executions", "learnings", "adrUpdates"]
    })
}

pub(super) async fn report(cx: Context) -> ToolOutcome {
    let (profile, root) = match cx.profile() {
        Ok(found) => found,
        Err(outcome) => return outcome,
    };
    // Each round hands the one before on, so the last holds the whole loop.
    let last = cx.arg("iterations").as_array().and_then(|all| all.last()).cloned().unwrap_or(Value::Null);
    let executions: Vec<Value> = last["executions"].as_array().cloned().unwrap_or_default();
    let mut learnings: Vec<Learning> =
        serde_json::from_value(last["allLearnings"].clone()).unwrap_or_default();
    // A failure that came back in a later round is one learning, as first seen.
    let mut keys = std::collections::BTreeSet::new();
    learnings.retain(|l| keys.insert(l.key.clone()));
    let fixed: Vec<String> = serde_json::from_value(last["fixed"].clone()).unwrap_or_default();
    let success = executions.last().is_some_and(|e| e["passed"] == json!(true));
    let date = iso8601(now_ms()).chars().take(10).collect::<String>();
    let (reader, learned) = (root.clone(), learnings.clone());
    // A record is read (and written) only when a walk of the root lists it.
    let updates = tokio::task::spawn_blocking(move || {
        propose(&learned, &fixed, &date, |path| reader.resolve(path).ok().and_then(|p| read_text(&p)))
    })
    .await
    .unwrap_or_default();
    // What is shown of each update is masked; what is written is the record's own text and the
    // (masked) learnings appended to it.
    let masker = Masker::for_profile(profile);
    let updates: Vec<AdrUpdate> = updates
        .into_iter()
        .map(|u| AdrUpdate { diff: masker.mask(&u.diff), appended: masker.mask(&u.appended), ..u })
        .collect();

    let wants_writing = cx.arg("updateAdrs").as_bool().unwrap_or(false) && !updates.is_empty();
    let mut applied: Vec<Result<(), String>> = Vec::new();
    let mut note = None;
    if wants_writing && !profile.writable {
        note = Some(format!(
            "updateAdrs was asked, but the operator has not marked profile `{}` writable: the diffs are returned as resources",
            profile.name
        ));
    } else if wants_writing {
        match cx.ctx.input("apply") {
            None => {
                let listed: Vec<String> =
                    updates.iter().map(|u| format!("- {} (section \"{}\")", u.adr_path, u.section)).collect();
                let message = format!(
                    "Apply what the loop learned to {} ADRs of root `{}`?\n{}\n\nThe diffs are in the task's result either way.",
                    updates.len(),
                    root.name,
                    listed.join("\n")
                );
                let schema = json!({"type": "object", "properties": {"apply": {"type": "boolean", "title": "Write the updates", "default": false}}, "required": ["apply"]});
                return ToolOutcome::InputRequired(
                    InputRequired::new().ask("apply", input::elicit_form(message, schema)),
                );
            }
            Some(reply) => {
                let yes = reply.get("action").and_then(Value::as_str) == Some("accept")
                    && reply.pointer("/content/apply").and_then(Value::as_bool) == Some(true);
                if yes {
                    applied = updates
                        .iter()
                        .map(|u| {
                            root.resolve(&u.adr_path).map_err(|e| e.to_string()).and_then(|f| apply(u, &f))
                        })
                        .collect();
                } else {
                    note = Some("the person did not approve writing the updates".into());
                }
            }
        }
    }
    let (removed, task) = (profile.clone(), cx.ctx.task_id.clone());
    tokio::task::spawn_blocking(move || remove_task(&removed, &task)).await.ok();
    let mut outcome = result(
        &cx,
        profile.name.as_str(),
        &root.name,
        success,
        &executions,
        &learnings,
        &updates,
        &applied,
        note,
        &last,
    );
    if let ToolOutcome::Result(value) = &mut outcome {
        masker.mask_json(value);
    }
    outcome
}

#[allow(clippy::too_many_arguments)]
fn result(
    cx: &Context,
    profile: &str,
    root: &str,
    success: bool,
    executions: &[Value],
    learnings: &[Learning],
    updates: &[AdrUpdate],
    applied: &[Result<(), String>],
    note: Option<String>,
    last: &Value,
) -> ToolOutcome {
    let mut content = vec![];
    let mut listed = Vec::new();
    for (i, update) in updates.iter().enumerate() {
        let name = update.adr_path.rsplit('/').next().unwrap_or(&update.adr_path);
        let uri = format!("conveyor://tasks/{}/adr-updates/{name}.diff", cx.ctx.task_id);
        let outcome = applied.get(i);
        listed.push(json!({
            "adr": update.adr,
            "adrPath": update.adr_path,
            "section": update.section,
            "diff": update.diff,
            "uri": uri,
            "applied": matches!(outcome, Some(Ok(()))),
            "error": outcome.and_then(|o| o.as_ref().err().cloned())
        }));
        content.push(json!({"type": "resource", "resource": {"uri": uri, "mimeType": "text/x-diff", "text": update.diff}}));
    }
    let stopped = last["stopped"].as_str().map(str::to_owned);
    let known = learnings.iter().filter(|l| l.seen_before).count();
    let mut text = format!(
        "Profile `{profile}` (root `{root}`): {} after {} iterations.\n",
        if success { "validation PASSED" } else { "validation FAILED" },
        executions.len()
    );
    if let Some(stopped) = &stopped {
        text.push_str(&format!("Stopped: {stopped}.\n"));
    }
    for execution in executions {
        let checks = execution["checks"].as_array().cloned().unwrap_or_default();
        let passed = checks.iter().filter(|c| c["passed"] == json!(true)).count();
        text.push_str(&format!(
            "- iteration {}: bootstrap {}, {passed} of {} checks passed{}\n",
            execution["iteration"],
            if execution["bootstrap"]["passed"] == json!(true) { "passed" } else { "failed" },
            checks.len(),
            match execution["fixesApplied"].as_array() {
                Some(f) if !f.is_empty() => format!(
                    " (known fixes: {})",
                    f.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", ")
                ),
                _ => String::new(),
            }
        ));
    }
    if !learnings.is_empty() {
        text.push_str(&format!("\nLearnings ({} new, {known} seen before):\n", learnings.len() - known));
        for l in learnings {
            text.push_str(&format!(
                "- [{}] {} {}: {}{}\n",
                l.category.as_str(),
                l.adr.as_deref().unwrap_or("platform"),
                l.requirement.lines().next().unwrap_or_default(),
                l.recommendation,
                if l.seen_before { " (seen before)" } else { "" }
            ));
        }
    }
    if !updates.is_empty() {
        text.push_str(&format!(
            "\nADR updates proposed: {}\n",
            updates
                .iter()
                .map(|u| format!("{} (\"{}\")", u.adr_path, u.section))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if let Some(note) = &note {
        text.push_str(&format!("\n{note}\n"));
    }
    content.insert(0, json!({"type": "text", "text": text}));
    ToolOutcome::Result(json!({
        "content": content,
        "structuredContent": {
            "profile": profile,
            "root": root,
            "success": success,
            "iterations": executions.len(),
            "stopped": stopped,
            "executions": executions,
            "learnings": learnings,
            "newLearnings": learnings.len() - known,
            "knownLearnings": known,
            "adrUpdates": listed,
            "note": note
        },
        "isError": false
    }))
}
