//! Resumable reply streams (2025-11-25, SEP-1699). The SSE reply of a synchronous call or of
//! `tasks/result` follows a task, so it can be picked up again: every event carries an id that
//! names the task, the request it answers and how far the stream got, signed so that no client
//! forges one; a client whose stream closed (a tool let it go, a proxy cut it, a gateway died)
//! sends `GET /mcp` with `Last-Event-ID` to any gateway and gets the rest: what the task still
//! asks, its progress from then on, and the response to its original request.

use std::sync::Arc;
use std::time::Duration;

use conveyor_shared::store::TaskParts;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::follow::{Follow, Stopped, WhenOverdue, follow_task};
use super::tasks_result::task_result_payload;
use super::tools_call::sync_outcome;
use super::{ReplyStream, task_not_found};
use crate::access::Caller;
use crate::reads::{Found, Reader, read_task};
use crate::rpc::RpcFailure;
use crate::signing::{Purpose, Refused, SigningKey};
use crate::state::AppState;
use crate::wire::Wire;

/// How long a client waits before it resumes a stream the gateway closed (the SSE `retry`).
pub const RESUME_AFTER: Duration = Duration::from_millis(1_000);

/// What a resumable stream answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResumeKind {
    /// A synchronous `tools/call`: its result, or its error.
    Call,
    /// `tasks/result`: the task's result, tagged with the related-task `_meta`.
    Result,
}

/// Where a resumable stream stands: the task it follows and the request it answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResumePoint {
    #[serde(rename = "t")]
    pub task_id: String,
    #[serde(rename = "i")]
    pub request_id: Value,
    #[serde(rename = "k")]
    pub kind: ResumeKind,
}

#[derive(Serialize, Deserialize)]
struct EventId {
    #[serde(flatten)]
    point: ResumePoint,
    #[serde(rename = "s")]
    seq: u64,
}

/// The id of event `seq` of a stream at `point`.
pub fn event_id(key: &SigningKey, point: &ResumePoint, seq: u64) -> String {
    key.sign(Purpose::StreamEvent, &EventId { point: point.clone(), seq })
}

/// The point and position a `Last-Event-ID` names.
pub fn parse_event_id(key: &SigningKey, id: &str) -> Result<(ResumePoint, u64), Refused> {
    key.verify::<EventId>(Purpose::StreamEvent, id).map(|e| (e.point, e.seq))
}

/// The rest of a stream at `point`, for its owner (or an operator). A result read from Redis holds
/// its memory in `reply_budget` until the stream has sent it.
pub async fn resume(
    state: Arc<AppState>,
    caller: Caller,
    point: ResumePoint,
    reply_budget: crate::state::ReplyBudget,
) -> Result<ReplyStream, RpcFailure> {
    // Its status only: the wait joins the task's waiters and reads what it needs then.
    let reader = Reader { hidden: true, ..Reader::new(&caller, "GET /mcp", TaskParts::STATUS) };
    let Some(Found::Read(held)) = read_task(&state, reader, &point.task_id).await? else {
        return Err(task_not_found(&point.task_id));
    };
    let task = held.detail.task;
    let kind = point.kind;
    let waited = state.config.sync_call_timeout;
    let follow = Follow {
        // The wait takes it from the call record when it joins the task's waiters.
        progress_token: None,
        task,
        caller,
        deadline: match kind {
            ResumeKind::Call => state.config.sync_call_timeout,
            ResumeKind::Result => Duration::from_secs(7 * 24 * 60 * 60),
        },
        stop_on_input: false,
        relay_input: true,
        related_task: kind == ResumeKind::Result,
        cancel_when_gone: kind == ResumeKind::Call,
        // A resumed call's wait runs out as its first one would have (a 2025-11-25 stream).
        when_overdue: match kind {
            ResumeKind::Call => WhenOverdue::Escalate,
            ResumeKind::Result => WhenOverdue::AskAgain,
        },
        resume: Some(point),
        reply_budget,
    };
    Ok(follow_task(state, follow, None, move |stopped| match stopped {
        Stopped::Terminal(task) if kind == ResumeKind::Call => sync_outcome(&task),
        Stopped::Terminal(task) => task_result_payload(task),
        Stopped::Overdue(task) => Err(super::follow::overdue_failure(Wire::V2025, &task, waited)),
        Stopped::InputRequired(task) | Stopped::Escalated(task) => Err(RpcFailure::internal(format!(
            "task `{}` stopped being followed before its end",
            task.task_id
        ))),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_event_id_names_its_stream_and_position_and_cannot_be_forged() {
        let key = SigningKey::from_secret(b"k");
        let point = ResumePoint { task_id: "t1".into(), request_id: json!(7), kind: ResumeKind::Call };
        let id = event_id(&key, &point, 3);
        assert_eq!(parse_event_id(&key, &id), Ok((point, 3)));
        assert!(parse_event_id(&SigningKey::from_secret(b"other"), &id).is_err());
        assert!(parse_event_id(&key, "t1.7.3").is_err());
    }
}
