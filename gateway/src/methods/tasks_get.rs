//! `tasks/get`: a task in the caller's revision (2026-07-28 inlines the result or the error). With
//! a poll gap configured, a caller that reads one task faster than that is told when to come back.

use conveyor_shared::model::TaskMode;
use conveyor_shared::store::limits::Polled;
use rmcp::model::ErrorCode;
use serde_json::json;

use super::{OVERLOADED, RequestCtx, owned_task, string_param, task_not_found};
use crate::rpc::RpcFailure;
use crate::state::AppState;
use crate::wire::{self, Wire};

pub(super) async fn tasks_get(state: &AppState, ctx: &RequestCtx) -> Result<serde_json::Value, RpcFailure> {
    let gap = state.shared_limits.min_poll_gap_ms;
    let task = if gap == 0 {
        owned_task(state, ctx).await?
    } else {
        let task_id = string_param(&ctx.params, "taskId")?;
        match state.store.get_task_polled(task_id, &ctx.caller.principal, gap).await? {
            Polled::TooSoon { retry_after_ms } => {
                return Err(RpcFailure::new(
                    ErrorCode(OVERLOADED),
                    format!(
                        "Polling too fast: read task `{task_id}` at most every {gap} ms (limit min_poll_gap_ms; its pollInterval says how often to poll). Retry in {retry_after_ms} ms."
                    ),
                    Some(json!({"limit": "min_poll_gap_ms", "max": gap, "retryAfterMs": retry_after_ms})),
                ));
            }
            Polled::Read(Some(task)) if task.mode == TaskMode::Sync => return Err(task_not_found(task_id)),
            Polled::Read(Some(task)) if ctx.caller.may_see(&task.owner) => *task,
            Polled::Read(Some(_)) => {
                super::audit_denied(
                    &ctx.caller,
                    &ctx.method,
                    task_id,
                    "the task belongs to another principal",
                );
                return Err(task_not_found(task_id));
            }
            Polled::Read(None) => return Err(task_not_found(task_id)),
        }
    };
    Ok(match ctx.wire {
        Wire::V2025 => wire::task_2025(&task),
        Wire::V2026 => json!(wire::detailed_2026(&task)),
    })
}
