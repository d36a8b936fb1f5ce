//! `tasks/update` (2026-07-28): a client answers a task's input requests.

use conveyor_shared::store::AnswerOutcome;
use serde_json::{Value, json};

use super::{RequestCtx, string_param, task_not_found};
use crate::rpc::RpcFailure;
use crate::state::AppState;

/// 2026-07-28 `tasks/update`: answers some or all pending input requests. Answers to keys that are
/// not pending are ignored; the task resumes once nothing is pending.
pub(super) async fn tasks_update(state: &AppState, ctx: &RequestCtx) -> Result<Value, RpcFailure> {
    let task_id = string_param(&ctx.params, "taskId")?;
    let responses = match ctx.params.get("inputResponses") {
        Some(Value::Object(r)) => r,
        _ => return Err(RpcFailure::invalid_params("Invalid params: `inputResponses` must be an object")),
    };
    if let Some((key, _)) = responses.iter().find(|(_, v)| !v.is_object()) {
        return Err(RpcFailure::invalid_params(format!(
            "Invalid params: inputResponses.{key} must be an object (the client's result for that request)"
        )));
    }
    match state.store.answer_input(task_id, &ctx.caller.principal, responses, &Default::default()).await? {
        AnswerOutcome::Missing => Err(task_not_found(task_id)),
        AnswerOutcome::Denied => {
            super::audit_denied(&ctx.caller, &ctx.method, task_id, "the task belongs to another principal");
            Err(task_not_found(task_id))
        }
        AnswerOutcome::Answered { .. } | AnswerOutcome::NotWaiting(_) => Ok(json!({})),
    }
}
