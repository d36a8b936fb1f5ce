//! `tasks/result` (2025-11-25): waits for a task's end, then answers what its `tools/call` would
//! have, tagged with the related-task `_meta`.

use std::sync::Arc;
use std::time::Duration;

use conveyor_shared::model::{RpcError, TaskRecord, TaskStatus};
use conveyor_shared::store::{GateKind, TaskParts, task_error};
use rmcp::model::ErrorCode;
use serde_json::{Value, json};

use super::follow::{Follow, Stopped, WhenOverdue, follow_task};
use super::resume::{ResumeKind, ResumePoint};
use super::{Reply, ReplyMode, RequestCtx, failure_of, reply_from, string_param, task_not_found};
use crate::reads::{Found, Held, Reader, read_task};
use crate::rpc::RpcFailure;
use crate::state::AppState;
use crate::wire::META_RELATED_TASK;

/// 2025-11-25 `tasks/result`: blocks until the task is terminal, then answers exactly what the
/// `tools/call` would have, tagged with the related-task `_meta`. The result is read in the
/// caller's budget (held until the answer is written), behind the caller's result gate when a
/// poll gap is configured: a client that polled `tasks/get` to the end fetches the result at once,
/// and reads it again no faster than the gap.
pub(super) async fn tasks_result(state: Arc<AppState>, ctx: RequestCtx) -> Result<Reply, RpcFailure> {
    let task_id = string_param(&ctx.params, "taskId")?;
    let reader = Reader::new(&ctx.caller, &ctx.method, TaskParts::OUTCOME).gated(GateKind::Result);
    let Some(Found::Read(held)) = read_task(&state, reader, task_id).await? else {
        return Err(task_not_found(task_id));
    };
    let Held { detail, permit } = *held;
    let task = detail.task;
    if task.status.is_terminal() {
        ctx.reply_budget.hold(permit);
        return task_result_payload(task).map(Reply::Result);
    }
    // Not settled: nothing large was read, and the wait reads the result when there is one.
    drop(permit);
    let held = super::hold_stream(&state, &ctx.caller)?;
    // An SSE reply can wait as long as the task runs (keep-alives hold it open); a JSON one is
    // bounded so that no proxy cuts it silently.
    let deadline =
        if ctx.accepts_sse { Duration::from_secs(7 * 24 * 60 * 60) } else { state.config.sync_call_timeout };
    let task_id = task.task_id.clone();
    let follow = Follow {
        // The wait reads it from the call record when it joins the task's waiters.
        progress_token: None,
        task,
        caller: ctx.caller.clone(),
        deadline,
        stop_on_input: false,
        relay_input: ctx.accepts_sse,
        related_task: true,
        cancel_when_gone: false,
        when_overdue: WhenOverdue::AskAgain,
        resume: ctx.accepts_sse.then(|| ResumePoint {
            task_id: task_id.clone(),
            request_id: ctx.id.clone(),
            kind: ResumeKind::Result,
        }),
        reply_budget: ctx.reply_budget.clone(),
    };
    let stream = follow_task(state, follow, None, |stopped| match stopped {
        Stopped::Terminal(t) => task_result_payload(t),
        Stopped::InputRequired(t) | Stopped::Escalated(t) | Stopped::Overdue(t) => {
            Err(RpcFailure::internal(format!("task `{}` stopped being followed before its end", t.task_id)))
        }
    });
    super::holding(
        reply_from(stream, if ctx.accepts_sse { ReplyMode::Sse } else { ReplyMode::Json }).await,
        held,
    )
}

/// What a settled task's `tools/call` would have answered; the result moves into the answer.
pub(super) fn task_result_payload(mut task: TaskRecord) -> Result<Value, RpcFailure> {
    let related = json!({"taskId": task.task_id});
    match (task.status, task.result.take()) {
        (TaskStatus::Completed | TaskStatus::Failed, Some(mut result)) => {
            if let Some(object) = result.as_object_mut() {
                let meta = object.entry("_meta").or_insert_with(|| json!({}));
                if let Some(meta) = meta.as_object_mut() {
                    meta.insert(META_RELATED_TASK.to_owned(), related);
                }
            }
            Ok(result)
        }
        (TaskStatus::Failed, None) => {
            let error = task_error(&task);
            let mut data = error.data.clone().unwrap_or_else(|| json!({}));
            if let Some(object) = data.as_object_mut() {
                object.insert("_meta".to_owned(), json!({META_RELATED_TASK: related}));
            }
            Err(failure_of(&RpcError { data: Some(data), ..error }))
        }
        (TaskStatus::Cancelled, _) => Err(RpcFailure::new(
            ErrorCode::INVALID_REQUEST,
            format!("Task `{}` was cancelled and has no result", task.task_id),
            Some(json!({"_meta": {META_RELATED_TASK: related}})),
        )),
        (status, _) => Err(RpcFailure::internal(format!("task is {status} without a result"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_error_in_task_result_keeps_the_result_and_tags_the_task() {
        let mut task = crate::wire::tests_support::record(TaskStatus::Failed);
        task.result = Some(json!({"content": [{"type": "text", "text": "boom"}], "isError": true}));
        let r = task_result_payload(task.clone()).expect("a result");
        assert_eq!(r["isError"], true);
        assert_eq!(r["_meta"][META_RELATED_TASK]["taskId"], task.task_id);
    }
}
