//! The JSON endpoints under `/ui/api/`. Each admits its caller as `/mcp` does ([`ApiCaller`]) and
//! reads or changes tasks only through the store, with the same rules as the MCP methods: a
//! caller sees its own tasks (an operator every task), another principal's task is "not found"
//! exactly like an unknown one, and cancel is the `tasks/cancel` path.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use conveyor_shared::store::CancelOutcome;
use serde_json::{Value, json};

use super::view;
use super::{ApiCaller, ApiError};
use crate::state::AppState;

/// `GET /ui/api/me`: who the token belongs to, whether an operator, and the figures the page
/// needs (the server's clock for running durations, the stream's interval, the list's bound).
pub(super) async fn me(State(state): State<Arc<AppState>>, ApiCaller(caller): ApiCaller) -> Json<Value> {
    Json(json!({
        "principal": caller.principal,
        "operator": caller.operator,
        "authRequired": !state.auth.disabled,
        "nowMs": conveyor_shared::model::now_ms(),
        "streamIntervalMs": super::STREAM_INTERVAL.as_millis() as u64,
        "listLimit": view::LIST_LIMIT,
    }))
}

/// `GET /ui/api/tasks`: the caller's tasks, newest first (see [`view::task_list`]).
pub(super) async fn tasks(
    State(state): State<Arc<AppState>>,
    ApiCaller(caller): ApiCaller,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(view::task_list(&state.store, &caller).await?))
}

/// `GET /ui/api/tasks/{taskId}`: one task with its nodes and result.
pub(super) async fn task(
    State(state): State<Arc<AppState>>,
    ApiCaller(caller): ApiCaller,
    Path(task_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    // A reader like tasks/get: the poll gap holds here too.
    let task = crate::methods::polled_task(&state, &caller, "ui/task", &task_id)
        .await
        .map_err(ApiError::Refused)?
        .ok_or_else(|| ApiError::TaskNotFound(task_id.clone()))?;
    let nodes = state.store.get_nodes(&task_id).await?;
    Ok(Json(view::task_detail(&task, &nodes)))
}

/// `POST /ui/api/tasks/{taskId}/cancel`: cancels a task the caller may see, through the same
/// store call, metrics, span and audit record as `tasks/cancel`; answers with the task as it is
/// now. A task that has already finished is 409 with its status.
pub(super) async fn cancel(
    State(state): State<Arc<AppState>>,
    ApiCaller(caller): ApiCaller,
    Path(task_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    // The same "not found" as the detail's, for an unknown, hidden or another principal's task.
    crate::methods::visible_task(&state.store, &caller, "ui/cancel", &task_id)
        .await?
        .ok_or_else(|| ApiError::TaskNotFound(task_id.clone()))?;
    let outcome = crate::methods::cancel_task(&state, &caller, "ui/cancel", &task_id)
        .await
        .map_err(ApiError::Refused)?;
    match outcome {
        CancelOutcome::Cancelled => {}
        CancelOutcome::AlreadyTerminal(status) => {
            return Err(ApiError::AlreadyTerminal { task: task_id, status });
        }
        // Expired between the two reads.
        CancelOutcome::Missing => return Err(ApiError::TaskNotFound(task_id)),
    }
    let task = crate::methods::visible_task(&state.store, &caller, "ui/cancel", &task_id)
        .await?
        .ok_or_else(|| ApiError::TaskNotFound(task_id.clone()))?;
    let nodes = state.store.get_nodes(&task_id).await?;
    Ok(Json(json!({"outcome": "cancelled", "task": view::task_detail(&task, &nodes)})))
}

/// `GET /ui/api/operators`: queues, workers and dead letters; 403 for anyone but an operator.
pub(super) async fn operators(
    State(state): State<Arc<AppState>>,
    ApiCaller(caller): ApiCaller,
) -> Result<Json<Value>, ApiError> {
    if !caller.operator {
        crate::methods::audit_denied(&caller, "ui/operators", "operators", "not an operator");
        return Err(ApiError::NotOperator);
    }
    let (stats, workers, letters) = tokio::try_join!(
        state.store.cluster_stats(),
        state.store.workers(),
        state.store.dead_letters(view::DEAD_LETTERS_SHOWN),
    )?;
    Ok(Json(view::operators(&stats, &workers, &letters)))
}
