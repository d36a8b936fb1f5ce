//! `tasks/list` (2025-11-25): the caller's tasks, a page at a time; for an operator, every
//! principal's unfinished tasks.

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
    let page = state.store.list_tasks(index, cursor, LIST_PAGE).await?.map_err(RpcFailure::invalid_params)?;
    let mut result = json!({"tasks": page.tasks.iter().map(wire::task_2025).collect::<Vec<_>>()});
    if let Some(next) = page.next_cursor {
        result["nextCursor"] = json!(next);
    }
    Ok(result)
}
