//! `tasks/list` (2025-11-25): the caller's tasks, a page at a time; for an operator, every
//! principal's unfinished tasks. Each task's status and times only: a listing never reads what a
//! task carries. With a poll gap configured, one page is read no faster than the gap.

use serde_json::{Value, json};

use conveyor_shared::store::TaskIndex;

use super::RequestCtx;
use crate::rpc::RpcFailure;
use crate::state::AppState;
use crate::wire;

/// Page size of `tasks/list`.
const LIST_PAGE: usize = 50;

pub(super) async fn tasks_list(state: &AppState, ctx: &RequestCtx) -> Result<Value, RpcFailure> {
    let cursor = match ctx.params.get("cursor") {
        None | Some(Value::Null) => None,
        Some(Value::String(c)) => Some(c.as_str()),
        Some(_) => return Err(RpcFailure::invalid_params("Invalid params: `cursor` must be a string")),
    };
    let index = if ctx.caller.operator { TaskIndex::Live } else { TaskIndex::Owner(&ctx.caller.principal) };
    crate::reads::pass_list_gate(state, &ctx.caller, "tasks/list", cursor.unwrap_or("first")).await?;
    let page = state.store.list_tasks(index, cursor, LIST_PAGE).await?.map_err(RpcFailure::invalid_params)?;
    let poll = state.config.poll_interval_ms;
    let tasks: Vec<Value> = page.tasks.iter().map(|t| wire::task_2025(t, poll)).collect();
    let mut result = json!({"tasks": tasks});
    if let Some(next) = page.next_cursor {
        result["nextCursor"] = json!(next);
    }
    Ok(result)
}
