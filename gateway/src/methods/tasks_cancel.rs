//! `tasks/cancel`: the Task on 2025-11-25 (an error for a terminal one), an empty ack on 2026-07-28.

use conveyor_shared::store::CancelOutcome;
use serde_json::{Value, json};

use super::{RequestCtx, string_param, task_not_found};
use crate::rpc::RpcFailure;
use crate::state::AppState;
use crate::wire::{self, Wire};

pub(super) async fn tasks_cancel(state: &AppState, ctx: &RequestCtx) -> Result<Value, RpcFailure> {
    let task_id = string_param(&ctx.params, "taskId")?;
    let outcome = state.store.cancel_task(task_id, &ctx.owner, "Cancelled by the client").await?;
    match (ctx.wire, outcome) {
        (_, CancelOutcome::Missing) => Err(task_not_found(task_id)),
        (Wire::V2026, _) => Ok(json!({})),
        (Wire::V2025, CancelOutcome::AlreadyTerminal(status)) => Err(RpcFailure::invalid_params(format!(
            "Cannot cancel task `{task_id}`: it is already {status}, and a terminal task never changes"
        ))),
        (Wire::V2025, CancelOutcome::Cancelled) => {
            let task = state.store.get_task(task_id).await?.ok_or_else(|| task_not_found(task_id))?;
            Ok(wire::task_2025(&task))
        }
    }
}
