//! `tasks/get`: a task in the caller's revision (2026-07-28 inlines the result or the error). With
//! a poll gap configured, a caller that reads one task faster than that is told when to come back,
//! before anything of the task is read. A 2025-11-25 task carries no result, so only its status is
//! read; a 2026-07-28 one holds its result of the caller's in-flight budget until it is written.

use conveyor_shared::store::{GateKind, TaskParts};
use serde_json::json;

use super::{RequestCtx, string_param, task_not_found};
use crate::reads::{Found, Reader, read_task};
use crate::rpc::RpcFailure;
use crate::state::AppState;
use crate::wire::{self, Wire};

pub(super) async fn tasks_get(state: &AppState, ctx: &RequestCtx) -> Result<serde_json::Value, RpcFailure> {
    let task_id = string_param(&ctx.params, "taskId")?;
    let parts = match ctx.wire {
        Wire::V2025 => TaskParts::STATUS,
        Wire::V2026 => TaskParts::OUTCOME,
    };
    let reader = Reader::new(&ctx.caller, &ctx.method, parts).gated(GateKind::Poll);
    let Some(Found::Read(held)) = read_task(state, reader, task_id).await? else {
        return Err(task_not_found(task_id));
    };
    let held = *held;
    ctx.reply_budget.hold(held.permit);
    let task = held.detail.task;
    Ok(match ctx.wire {
        Wire::V2025 => wire::task_2025(&task.status_record(), state.config.poll_interval_ms),
        Wire::V2026 => json!(wire::detailed_2026_owned(task)),
    })
}
