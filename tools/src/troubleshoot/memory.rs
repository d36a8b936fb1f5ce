//! Troubleshooting memory: every `troubleshoot` run is a session kept in Redis under its root
//! (its failure's words and its plan), `troubleshoot_feedback` records which of a session's steps
//! helped, and a later run whose failure shares enough words with an earlier session's puts the
//! steps that helped then first, citing that session.
//!
//! The memory is each principal's own ([`ToolContext::record_memory`]): a principal's sessions and
//! feedback are kept in lists of its own, per root, so that a later run cites only the caller's
//! sessions, feedback is taken only on a session of the caller's (any other is refused, and the
//! refusal audited), and one principal's many sessions push out only its own.

use std::collections::BTreeSet;

use conveyor_shared::model::{ToolOutcome, now_ms, result};
use serde_json::{Value, json};

use super::{LOG_NOISE, TOOL};
use crate::bootstrap::secrets::mask;
use crate::invalid;
use crate::roots::Roots;
use conveyor_worker::tool::{FnTool, ToolContext, ToolRegistry};

pub const FEEDBACK_TOOL: &str = "troubleshoot_feedback";
/// Sessions and feedback entries kept per principal and root.
const KEEP: usize = 200;
/// Words kept of a failure, to compare it with others.
const SIGNATURE_WORDS: usize = 64;
/// The share of words two failures must have in common (Jaccard) to be similar.
const SIMILAR: f64 = 0.4;
const OUTCOMES: [&str; 3] = ["resolved", "partial", "unresolved"];

/// Words of any text, which say nothing of a failure.
const COMMON: &[&str] =
    &["the", "and", "for", "with", "was", "not", "this", "that", "from", "are", "has", "but"];

/// The words of a failure (its first lines, all of them: the line that names the place and
/// the line that says what went wrong), lowercased and sorted, log noise left out.
pub fn signature(failure: &str) -> Vec<String> {
    let start: String = failure.chars().take(4_000).collect();
    let words: BTreeSet<String> = start
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .map(str::to_lowercase)
        .filter(|w| w.chars().count() >= 3 && !w.chars().all(|c| c.is_ascii_digit()))
        .filter(|w| !LOG_NOISE.contains(&w.as_str()) && !COMMON.contains(&w.as_str()))
        .collect();
    words.into_iter().take(SIGNATURE_WORDS).collect()
}

fn similarity(a: &[String], b: &[String]) -> f64 {
    let (a, b): (BTreeSet<&String>, BTreeSet<&String>) = (a.iter().collect(), b.iter().collect());
    let union = a.union(&b).count();
    if union == 0 { 0.0 } else { a.intersection(&b).count() as f64 / union as f64 }
}

/// An earlier session of a similar failure, and the steps its feedback said helped.
pub struct Helped {
    pub session: String,
    pub similarity: f64,
    pub outcome: String,
    pub actions: Vec<String>,
}

/// The caller's earlier sessions of `root` whose failure is like `signature` and whose feedback
/// says some steps helped, most similar first.
pub async fn helped_before(ctx: &ToolContext, root: &str, signature: &[String]) -> Vec<Helped> {
    let sessions = ctx.memories(TOOL, root, KEEP).await.unwrap_or_default();
    let feedback = ctx.memories(FEEDBACK_TOOL, root, KEEP).await.unwrap_or_default();
    let mut found: Vec<Helped> = Vec::new();
    for entry in &feedback {
        let id = entry["session"].as_str().unwrap_or_default();
        let Some(session) = sessions.iter().find(|s| s["session"] == id) else { continue };
        let earlier: Vec<String> = serde_json::from_value(session["signature"].clone()).unwrap_or_default();
        let score = similarity(signature, &earlier);
        let actions: Vec<String> = entry["steps"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s["helped"] == true)
            .filter_map(|s| s["action"].as_str().map(str::to_owned))
            .collect();
        if score >= SIMILAR && !actions.is_empty() && !found.iter().any(|h| h.session == id) {
            found.push(Helped {
                session: id.to_owned(),
                similarity: score,
                outcome: entry["outcome"].as_str().unwrap_or_default().to_owned(),
                actions,
            });
        }
    }
    found.sort_by(|a, b| b.similarity.total_cmp(&a.similarity));
    found
}

/// Puts the steps that helped before first in `steps`, each saying which session it helped in;
/// a step of theirs the new plan lacks is added. Returns the sessions cited.
pub fn rank(steps: &mut Vec<Value>, helped: &[Helped]) -> Vec<Value> {
    let mut first: Vec<Value> = Vec::new();
    for earlier in helped {
        for action in &earlier.actions {
            let cited = json!({"session": earlier.session, "outcome": earlier.outcome, "similarity": (earlier.similarity * 100.0).round() / 100.0});
            if first.iter().any(|s| s["action"] == action.as_str()) {
                continue;
            }
            let mut step = match steps.iter().position(|s| s["action"] == action.as_str()) {
                Some(at) => steps.remove(at),
                None => json!({"step": "helped-before", "action": action, "cites": []}),
            };
            step["helpedBefore"] = cited;
            first.push(step);
        }
    }
    let cited = helped
        .iter()
        .map(|h| json!({"session": h.session, "outcome": h.outcome, "similarity": (h.similarity * 100.0).round() / 100.0, "helpedSteps": h.actions}))
        .collect();
    first.append(steps);
    *steps = first;
    cited
}

/// Keeps a run as a session of `root` in the caller's memory: whose it is, its failure's words, the
/// start of the failure (secrets masked) and its plan.
pub async fn keep_session(
    ctx: &ToolContext,
    root: &str,
    failure: &str,
    steps: &[Value],
) -> Result<(), String> {
    let entry = json!({
        "session": ctx.task_id,
        "owner": ctx.owner(),
        "root": root,
        "atMs": now_ms(),
        "signature": signature(failure),
        "failure": mask(&failure.chars().take(300).collect::<String>()),
        "steps": steps.iter().map(|s| json!({"step": s["step"], "action": s["action"]})).collect::<Vec<_>>()
    });
    ctx.record_memory(TOOL, root, &entry, KEEP).await.map(|_| ()).map_err(|e| e.to_string())
}

pub fn register(registry: &mut ToolRegistry, roots: &Roots) {
    let known = roots.clone();
    registry.register(
        FnTool::new(definition(), move |ctx| {
            let roots = known.clone();
            async move { feedback(&roots, &ctx).await }
        })
        .on_queue(crate::research::QUEUE),
    );
}

fn definition() -> Value {
    json!({
        "name": FEEDBACK_TOOL,
        "title": "Say which troubleshooting steps helped",
        "description": "Records how one of your troubleshoot sessions ended and which of its plan's steps helped. A later troubleshoot of yours of a similar failure in the same root puts those steps first and cites this session.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "session": {"type": "string", "minLength": 1, "maxLength": 64, "description": "The session: the `session` of one of your troubleshoot results"},
                "outcome": {"type": "string", "enum": OUTCOMES, "description": "Whether the failure is fixed"},
                "stepsTried": {
                    "type": "array",
                    "maxItems": 50,
                    "description": "The plan's steps you tried: their number in the plan (from 1) and whether each helped",
                    "items": {"type": "object", "properties": {"step": {"type": "integer", "minimum": 1}, "helped": {"type": "boolean"}}, "required": ["step", "helped"]}
                }
            },
            "required": ["session", "outcome", "stepsTried"],
            "additionalProperties": false
        },
        "execution": {"taskSupport": "optional"}
    })
}

async fn feedback(roots: &Roots, ctx: &ToolContext) -> ToolOutcome {
    let id = ctx.str_arg("session").unwrap_or_default();
    let outcome = ctx.str_arg("outcome").unwrap_or_default();
    let mut found = None;
    // Only the caller's own sessions, of the roots it may still read.
    for root in roots.names_for(ctx) {
        let sessions = ctx.memories(TOOL, &root, KEEP).await.unwrap_or_default();
        if let Some(session) = sessions.into_iter().find(|s| s["session"] == id) {
            found = Some((root, session));
            break;
        }
    }
    // Checked before anything is written, though the list is the caller's own; a session without
    // an owner is the caller's by where it was found.
    let yours = |session: &Value| session["owner"].as_str().is_none_or(|owner| owner == ctx.owner());
    let Some((root, session)) = found.filter(|(_, session)| yours(session)) else {
        // Another principal's session is not found here: which it was cannot be told from an
        // expired or made-up one, so every such request is audited.
        ctx.audit_denied(id, "feedback on a troubleshoot session that is not one of the caller's");
        return invalid(format!(
            "no troubleshoot session `{id}` of yours: give the `session` of one of your troubleshoot results (your newest {KEEP} of each root are kept)"
        ));
    };
    let plan = session["steps"].as_array().cloned().unwrap_or_default();
    let mut steps = Vec::new();
    for tried in ctx.arguments["stepsTried"].as_array().into_iter().flatten() {
        let number = tried["step"].as_u64().unwrap_or(0);
        let Some(step) = plan.get((number as usize).wrapping_sub(1)) else {
            return invalid(format!("session `{id}` has {} steps; there is no step {number}", plan.len()));
        };
        steps.push(json!({"step": number, "action": step["action"], "helped": tried["helped"]}));
    }
    let entry = json!({"session": id, "outcome": outcome, "steps": steps, "atMs": now_ms()});
    if let Err(e) = ctx.record_memory(FEEDBACK_TOOL, &root, &entry, KEEP).await {
        return ToolOutcome::Result(result::error_text(format!("could not keep the feedback in Redis: {e}")));
    }
    let helped = steps.iter().filter(|s| s["helped"] == true).count();
    ToolOutcome::Result(result::structured(
        format!(
            "Session {id} ({root}): {outcome}; {helped} of {} steps tried helped. A similar failure will see them first.",
            steps.len()
        ),
        json!({"session": id, "root": root, "outcome": outcome, "steps": steps}),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn similar_failures_share_most_words_and_helped_steps_go_first() {
        let a =
            signature("thread 'x' panicked at src/retry.rs:42: backoff exceeded max_delay of retry policy");
        let b = signature("panicked at src/retry.rs:57: backoff exceeded max_delay in retry policy");
        let c = signature("connection refused to redis at 127.0.0.1:6379");
        let two_lines =
            signature("panicked at src/store.rs:1:\nstale attempt refused after the lease expired");
        let one_line = signature("panicked at src/store.rs:9: stale attempt refused, the lease expired");
        assert!(similarity(&two_lines, &one_line) >= SIMILAR, "{two_lines:?} {one_line:?}");
        assert!(similarity(&a, &b) >= SIMILAR, "{a:?} {b:?}");
        assert!(similarity(&a, &c) < SIMILAR);
        let mut steps =
            vec![json!({"step": "reproduce", "action": "one"}), json!({"step": "inspect", "action": "two"})];
        let cited = rank(
            &mut steps,
            &[Helped {
                session: "s1".into(),
                similarity: 0.8,
                outcome: "resolved".into(),
                actions: vec!["two".into(), "three".into()],
            }],
        );
        let actions: Vec<&str> = steps.iter().filter_map(|s| s["action"].as_str()).collect();
        assert_eq!(actions, ["two", "three", "one"]);
        assert_eq!(steps[0]["helpedBefore"]["session"], "s1");
        assert_eq!(cited[0]["session"], "s1");
    }
}
