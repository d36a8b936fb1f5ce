//! The JSON endpoints under `/ui/api/`. Each admits its caller as `/mcp` does ([`ApiCaller`]) and
//! reads or changes tasks only through the store, with the same rules as the MCP methods: a
//! caller sees its own tasks (an operator every task), another principal's task is "not found"
//! exactly like an unknown one, and cancel is the `tasks/cancel` path.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use conveyor_shared::store::{CancelOutcome, GateKind, TaskParts};
use serde_json::{Value, json};

use super::view;
use super::{ApiCaller, ApiError};
use crate::reads::{Found, Held, Reader, read_task};
use crate::state::{AppState, ReplyBudget};

/// `GET /ui/api/me`: who the token belongs to, whether an operator, and the figures the page
/// needs (the server's clock for running durations, the stream's interval, the list's bound).
pub(super) async fn me(State(state): State<Arc<AppState>>, ApiCaller(caller): ApiCaller) -> Json<Value> {
    Json(json!({
        "principal": caller.principal,
        "operator": caller.operator,
        "authRequired": !state.auth.disabled,
        // Task times are Redis's: so is the clock the page measures running durations by.
        "nowMs": state.store.redis_now_ms().await.unwrap_or_else(|_| conveyor_shared::model::now_ms()),
        "streamIntervalMs": super::STREAM_INTERVAL.as_millis() as u64,
        "listLimit": view::LIST_LIMIT,
    }))
}

/// `GET /ui/api/tasks`: the caller's tasks, newest first (see [`view::task_list`]). A listing like
/// `tasks/list`: status fields only, and one read per poll gap.
pub(super) async fn tasks(
    State(state): State<Arc<AppState>>,
    ApiCaller(caller): ApiCaller,
) -> Result<Json<Value>, ApiError> {
    crate::reads::pass_list_gate(&state, &caller, LISTING, "first").await.map_err(ApiError::Refused)?;
    Ok(Json(view::task_list(&state.store, &caller).await?))
}

/// The name of the web view's listing in the poll gate (its stream's reads share it).
pub(super) const LISTING: &str = "ui";

/// What the web view shows of one task: its arguments, its result or error, its input requests,
/// and its nodes without their outputs.
pub(super) const DETAIL: TaskParts = TaskParts { call: true, outcome: true, nodes: true };

/// `GET /ui/api/tasks/{taskId}`: one task with its nodes and result, read behind the poll gap
/// like `tasks/get`, and held of the caller's in-flight budget until the answer is written.
pub(super) async fn task(
    State(state): State<Arc<AppState>>,
    ApiCaller(caller): ApiCaller,
    Path(task_id): Path<String>,
) -> Result<Response, ApiError> {
    let reader = Reader::new(&caller, "ui/task", DETAIL).gated(GateKind::Poll);
    let held = detail(&state, reader, &task_id).await?;
    let text = view::task_detail(held.task(), &held.detail.nodes).to_string();
    Ok(answer(text, held.permit))
}

/// A task read for the web view, or its "not found".
async fn detail(state: &AppState, reader: Reader<'_>, task_id: &str) -> Result<Held, ApiError> {
    match read_task(state, reader, task_id).await.map_err(ApiError::Refused)? {
        Some(Found::Read(held)) => Ok(*held),
        _ => Err(ApiError::TaskNotFound(task_id.to_owned())),
    }
}

/// A JSON answer that holds `permit` until it is written.
fn answer(text: String, permit: crate::state::BudgetPermit) -> Response {
    let held = ReplyBudget::default();
    held.hold(permit);
    held.json(StatusCode::OK, text)
}

/// `POST /ui/api/tasks/{taskId}/cancel`: cancels a task the caller may see, through the same
/// store call, metrics, span and audit record as `tasks/cancel`; answers with the task as it is
/// now. A task that has already finished is 409 with its status.
pub(super) async fn cancel(
    State(state): State<Arc<AppState>>,
    ApiCaller(caller): ApiCaller,
    Path(task_id): Path<String>,
) -> Result<Response, ApiError> {
    // The same "not found" as the detail's, for an unknown, hidden or another principal's task.
    detail(&state, Reader::new(&caller, "ui/cancel", TaskParts::STATUS), &task_id).await?;
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
    let held = detail(&state, Reader::new(&caller, "ui/cancel", DETAIL), &task_id).await?;
    let text = json!({"outcome": "cancelled", "task": view::task_detail(held.task(), &held.detail.nodes)})
        .to_string();
    Ok(answer(text, held.permit))
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
    let (stats, (_, mut workers, now), letters) = tokio::try_join!(
        state.store.cluster_stats(),
        state.store.catalog(),
        state.store.dead_letters(view::DEAD_LETTERS_SHOWN),
    )?;
    workers.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Json(view::operators(&stats, &workers, &letters, now)))
}
