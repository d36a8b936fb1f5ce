//! `tasks/get`: a task in the caller's revision (2026-07-28 inlines the result or the error). With
//! a poll gap configured, a caller that reads one task faster than that is told when to come back.

use serde_json::json;

use super::{RequestCtx, owned_task_polled};
use crate::rpc::RpcFailure;
use crate::state::AppState;
use crate::wire::{self, Wire};

pub(super) async fn tasks_get(state: &AppState, ctx: &RequestCtx) -> Result<serde_json::Value, RpcFailure> {
    let task = owned_task_polled(state, ctx).await?;
    Ok(match ctx.wire {
        Wire::V2025 => wire::task_2025(&task),
        Wire::V2026 => json!(wire::detailed_2026(&task)),
    })
}
