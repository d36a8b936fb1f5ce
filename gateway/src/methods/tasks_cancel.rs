//! `tasks/cancel`: the Task on 2025-11-25 (an error for a terminal one), an empty ack on 2026-07-28.

use conveyor_shared::store::CancelOutcome;
use serde_json::{Value, json};

use super::{RequestCtx, string_param, task_not_found};
use crate::access::Caller;
use crate::rpc::RpcFailure;
use crate::state::AppState;
use crate::wire::{self, Wire};

pub(super) async fn tasks_cancel(state: &AppState, ctx: &RequestCtx) -> Result<Value, RpcFailure> {
    let task_id = string_param(&ctx.params, "taskId")?;
    let outcome = cancel_task(state, &ctx.caller, &ctx.method, task_id).await?;
    match (ctx.wire, outcome) {
        (_, CancelOutcome::Missing) => Err(task_not_found(task_id)),
        (Wire::V2026, _) => Ok(json!({})),
        (Wire::V2025, CancelOutcome::AlreadyTerminal(status)) => Err(RpcFailure::invalid_params(format!(
            "Cannot cancel task `{task_id}`: it is already {status}, and a terminal task never changes"
        ))),
        (Wire::V2025, CancelOutcome::Cancelled) => {
            let task = state.store.task_status(task_id).await?.ok_or_else(|| task_not_found(task_id))?;
            Ok(wire::task_2025(&task, state.config.poll_interval_ms))
        }
    }
}

/// Cancels a task for `caller` (`method` names the request in the audit log): the store's cancel
/// script, which also counts the settled task in the metrics and ends its span, and the audit
/// record of the cancellation or of the refusal. Another principal's task is `Missing`, as an
/// unknown one is. Shared by `tasks/cancel` and the web view's cancel button.
pub(crate) async fn cancel_task(
    state: &AppState,
    caller: &Caller,
    method: &str,
    task_id: &str,
) -> Result<CancelOutcome, RpcFailure> {
    let message = if caller.operator { "Cancelled by an operator" } else { "Cancelled by the client" };
    let outcome = state.store.cancel_task(task_id, caller.owner_filter(), message).await?;
    match outcome {
        CancelOutcome::Cancelled => {
            tracing::info!(target: "conveyor::audit", event = "task_cancelled", principal = %caller.principal, operator = caller.operator, task = %task_id, "task cancelled");
        }
        // Whether the id names another principal's task: its status says so, nothing more is read.
        CancelOutcome::Missing if state.store.task_status(task_id).await.ok().flatten().is_some() => {
            super::audit_denied(caller, method, task_id, "the task belongs to another principal");
        }
        CancelOutcome::Missing | CancelOutcome::AlreadyTerminal(_) => {}
    }
    Ok(outcome)
}
