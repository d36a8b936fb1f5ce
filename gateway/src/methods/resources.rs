//! `resources/list`, `resources/templates/list`, `resources/read`, and `resources/subscribe` /
//! `unsubscribe`: the resources and templates live workers offer, produced by their handlers on a
//! worker, and every finished task's result, which its owner reads at
//! `conveyor://tasks/{taskId}/result` straight from Redis.

use std::sync::Arc;

use conveyor_shared::model::{OfferKind, TaskMode, TaskRecord};
use serde_json::{Value, json};

use super::offers::{LIST_TTL_MS, match_template, reply_with_cache_hints, run_offer, with_cache_hints};
use super::{Reply, RequestCtx, string_param};
use crate::rpc::RpcFailure;
use crate::state::AppState;

/// The template of a finished task's result.
pub(super) const TASK_RESULT_TEMPLATE: &str = "conveyor://tasks/{taskId}/result";

fn task_result_template() -> Value {
    json!({
        "uriTemplate": TASK_RESULT_TEMPLATE,
        "name": "task-result",
        "title": "A finished task's result",
        "description": "The result of one of your finished tasks (the CallToolResult, or the error it failed with), as JSON.",
        "mimeType": "application/json",
    })
}

/// The template of a resource a finished task's result embeds (a document a tool wrote).
const TASK_EMBEDDED_TEMPLATE: &str = "conveyor://tasks/{taskId}/{+name}";

fn task_embedded_template() -> Value {
    json!({
        "uriTemplate": TASK_EMBEDDED_TEMPLATE,
        "name": "task-document",
        "title": "A document in a finished task's result",
        "description": "A resource one of your finished tasks embeds in its result (for example the ADR plan_adr writes), at the uri the result names.",
    })
}

pub(super) async fn resources_list(state: &AppState, ctx: &RequestCtx) -> Result<Value, RpcFailure> {
    let resources: Vec<Value> =
        state.catalog.offers(OfferKind::Resource).await?.iter().map(|r| r.definition.clone()).collect();
    Ok(with_cache_hints(ctx.wire, json!({"resources": resources}), LIST_TTL_MS))
}

pub(super) async fn resource_templates_list(state: &AppState, ctx: &RequestCtx) -> Result<Value, RpcFailure> {
    let mut templates: Vec<Value> = state
        .catalog
        .offers(OfferKind::ResourceTemplate)
        .await?
        .iter()
        .map(|r| r.definition.clone())
        .collect();
    templates.push(task_result_template());
    templates.push(task_embedded_template());
    Ok(with_cache_hints(ctx.wire, json!({"resourceTemplates": templates}), LIST_TTL_MS))
}

fn not_found(uri: &str) -> RpcFailure {
    RpcFailure::invalid_params(format!(
        "Resource not found: `{uri}`. resources/list and resources/templates/list name what this server offers."
    ))
    .with_data(json!({"uri": uri}))
}

pub(super) async fn resources_read(state: Arc<AppState>, ctx: RequestCtx) -> Result<Reply, RpcFailure> {
    let uri = string_param(&ctx.params, "uri")?.to_owned();
    if let Some(variables) = match_template(TASK_RESULT_TEMPLATE, &uri) {
        let task_id = variables.get("taskId").and_then(Value::as_str).unwrap_or_default();
        return task_result(&state, &ctx, &uri, task_id).await.map(Reply::Result);
    }
    if let Some(variables) = match_template(TASK_EMBEDDED_TEMPLATE, &uri) {
        let task_id = variables.get("taskId").and_then(Value::as_str).unwrap_or_default();
        return task_embedded(&state, &ctx, &uri, task_id).await.map(Reply::Result);
    }
    let wire = ctx.wire;
    let snapshot = state.catalog.snapshot().await?;
    let live = |kind: OfferKind| snapshot.tools.iter().filter(move |t| t.live && t.kind == kind);
    if let Some(resource) = live(OfferKind::Resource).find(|r| r.definition.get("uri") == Some(&json!(uri))) {
        let resource = resource.clone();
        let reply = run_offer(state, ctx, &resource, json!({"uri": uri})).await?;
        return Ok(reply_with_cache_hints(wire, reply, 0));
    }
    let template = live(OfferKind::ResourceTemplate).find_map(|t| {
        let variables = match_template(t.definition.get("uriTemplate")?.as_str()?, &uri)?;
        Some((t.clone(), variables))
    });
    match template {
        Some((template, variables)) => {
            let reply = run_offer(state, ctx, &template, json!({"uri": uri, "variables": variables})).await?;
            Ok(reply_with_cache_hints(wire, reply, 0))
        }
        None => Err(not_found(&uri)),
    }
}

/// A finished task's result as a resource, for its owner (or an operator).
async fn task_result(
    state: &AppState,
    ctx: &RequestCtx,
    uri: &str,
    task_id: &str,
) -> Result<Value, RpcFailure> {
    let task = visible_task(state, ctx, uri, task_id).await?;
    let body = match (&task.result, &task.error) {
        (Some(result), _) => result.clone(),
        (None, Some(error)) => json!({"error": error}),
        (None, None) if task.status.is_terminal() => json!({"status": task.status}),
        (None, None) => {
            return Err(RpcFailure::invalid_params(format!(
                "Task `{task_id}` has not finished ({}); its result is a resource once it has",
                task.status
            ))
            .with_data(json!({"uri": uri, "status": task.status})));
        }
    };
    let contents = json!([{"uri": uri, "mimeType": "application/json", "text": body.to_string()}]);
    Ok(with_cache_hints(ctx.wire, json!({"contents": contents}), cacheable_for(&task)))
}

/// A client's own task (or any, for an operator); any other is not found, so that task ids of
/// others are not confirmed.
async fn visible_task(
    state: &AppState,
    ctx: &RequestCtx,
    uri: &str,
    task_id: &str,
) -> Result<TaskRecord, RpcFailure> {
    match state.store.get_task(task_id).await? {
        Some(task) if task.mode == TaskMode::Task && ctx.caller.may_see(&task.owner) => Ok(task),
        _ => Err(not_found(uri)),
    }
}

/// How long what a finished task holds may be cached: it never changes until the task expires.
fn cacheable_for(task: &TaskRecord) -> u64 {
    task.created_at_ms.saturating_add(task.ttl_ms).saturating_sub(conveyor_shared::model::now_ms())
}

/// A resource a finished task's result embeds under `uri`, for the task's owner (or an operator).
async fn task_embedded(
    state: &AppState,
    ctx: &RequestCtx,
    uri: &str,
    task_id: &str,
) -> Result<Value, RpcFailure> {
    let task = visible_task(state, ctx, uri, task_id).await?;
    let embedded = task
        .result
        .as_ref()
        .and_then(|r| r.get("content"))
        .and_then(Value::as_array)
        .and_then(|items| {
            items.iter().find_map(|item| {
                let resource =
                    item.get("resource").filter(|_| item.get("type") == Some(&json!("resource")))?;
                (resource.get("uri").and_then(Value::as_str) == Some(uri)).then(|| resource.clone())
            })
        })
        .ok_or_else(|| not_found(uri))?;
    Ok(with_cache_hints(ctx.wire, json!({"contents": [embedded]}), cacheable_for(&task)))
}

/// `resources/subscribe` and `unsubscribe` (2025-11-25): accepted for a resource this server
/// knows. Updates reach 2026-07-28 clients on `subscriptions/listen`; a 2025-11-25 session has no
/// stream of its own to carry them (the gateway serves no GET stream), so nothing is kept.
pub(super) fn resources_subscribe(ctx: &RequestCtx) -> Result<Value, RpcFailure> {
    let uri = string_param(&ctx.params, "uri")?;
    if uri.is_empty() {
        return Err(RpcFailure::invalid_params("Invalid params: `uri` must not be empty"));
    }
    Ok(json!({}))
}
