//! `resources/list`, `resources/templates/list`, `resources/read`, and `resources/subscribe` /
//! `unsubscribe`: the resources and templates live workers offer, produced by their handlers on a
//! worker, and what the gateway itself knows of the caller's tasks, read straight from Redis: the
//! list at `conveyor://tasks`, one task with its progress and its graph's nodes at
//! `conveyor://tasks/{taskId}`, and every finished task's result at
//! `conveyor://tasks/{taskId}/result`. Any MCP client can read them; `conveyor tasks` does.
//!
//! Each reads what it shows ([`crate::reads`]): the list each task's status and times, the task
//! its status and its nodes without their outputs (each output's size instead), the result
//! resource the result, held of the caller's in-flight budget until the answer is written. With a
//! poll gap configured, the list page and the task share the gap of `tasks/get`; the result and
//! the documents it embeds share the gap of `tasks/result`.

use std::sync::Arc;

use conveyor_shared::model::{NodeRecord, OfferKind, TaskMode, TaskRecord, TaskStatusRecord};
use conveyor_shared::store::{GateKind, TaskIndex, TaskParts};
use serde_json::{Value, json};

use super::offers::{LIST_TTL_MS, reply_with_cache_hints, run_offer, with_cache_hints};
use super::{Reply, RequestCtx, string_param};
use crate::access::Offer;
use crate::catalog::CatalogTool;
use crate::reads::{Found, Held, Reader, read_task};
use crate::rpc::RpcFailure;
use crate::state::AppState;
use crate::uri_template::match_template;

/// The caller's tasks (every live task, for an operator), a page at a time: the next page is
/// `conveyor://tasks?cursor=<nextCursor>`.
const TASKS_RESOURCE: &str = "conveyor://tasks";

/// Tasks per page of [`TASKS_RESOURCE`].
const TASKS_PAGE: usize = 100;

fn tasks_resource() -> Value {
    json!({
        "uri": TASKS_RESOURCE,
        "name": "tasks",
        "title": "Your tasks",
        "description": "Your tasks (an operator: every unfinished task), oldest first: status, status message, progress, tool and times. When `nextCursor` is set, read `conveyor://tasks?cursor=<nextCursor>` for the next page.",
        "mimeType": "application/json",
    })
}

/// The template of one task's state: status, progress and its graph's nodes.
const TASK_STATE_TEMPLATE: &str = "conveyor://tasks/{taskId}";

fn task_state_template() -> Value {
    json!({
        "uriTemplate": TASK_STATE_TEMPLATE,
        "name": "task",
        "title": "One of your tasks, with its nodes",
        "description": "A task's status, status message and progress, and each node of its graph: status, attempts, worker, start and finish times, error, the size of its output (outputBytes; the output itself is not shown), and the nodes that wait on it.",
        "mimeType": "application/json",
    })
}

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
    let mut resources: Vec<Value> = state
        .catalog
        .offers(OfferKind::Resource)
        .await?
        .iter()
        .filter(|r| state.access.may_use(&ctx.caller, Offer::Resource, resource_uri(r)))
        .map(|r| r.definition.clone())
        .collect();
    resources.push(tasks_resource());
    Ok(with_cache_hints(ctx.wire, json!({"resources": resources}), LIST_TTL_MS))
}

pub(super) async fn resource_templates_list(state: &AppState, ctx: &RequestCtx) -> Result<Value, RpcFailure> {
    let catalog = state.catalog.snapshot().await?;
    let roots = super::root_grants::Grants::of(state, &ctx.caller, &catalog);
    let mut templates: Vec<Value> = catalog
        .tools
        .iter()
        .filter(|t| t.live && t.kind == OfferKind::ResourceTemplate)
        .filter(|t| state.access.may_use_template(&ctx.caller, template_of(t)))
        // A template's completions name only the caller's roots.
        .filter_map(|t| roots.view(&t.definition).map(std::borrow::Cow::into_owned))
        .collect();
    templates.push(task_state_template());
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
    if let Some(query) =
        uri.strip_prefix(TASKS_RESOURCE).filter(|rest| rest.is_empty() || rest.starts_with('?'))
    {
        return task_list(&state, &ctx, &uri, query).await.map(Reply::Result);
    }
    if let Some(variables) = match_template(TASK_STATE_TEMPLATE, &uri) {
        let task_id = variables.get("taskId").and_then(Value::as_str).unwrap_or_default();
        return task_state(&state, &ctx, &uri, task_id).await.map(Reply::Result);
    }
    if let Some(variables) = match_template(TASK_RESULT_TEMPLATE, &uri) {
        let task_id = variables.get("taskId").and_then(Value::as_str).unwrap_or_default();
        return task_result(&state, &ctx, &uri, task_id).await.map(Reply::Result);
    }
    if let Some(variables) = match_template(TASK_EMBEDDED_TEMPLATE, &uri) {
        let task_id = variables.get("taskId").and_then(Value::as_str).unwrap_or_default();
        return task_embedded(&state, &ctx, &uri, task_id).await.map(Reply::Result);
    }
    let wire = ctx.wire;
    if !state.access.may_use(&ctx.caller, Offer::Resource, &uri) {
        // Refused as unknown, like a tool the policy does not grant, whatever serves it.
        super::audit_denied(
            &ctx.caller,
            "resources/read",
            &uri,
            "the access policy does not grant this resource",
        );
        return Err(not_found(&uri));
    }
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

/// One page of the caller's tasks (every live task, for an operator). `query` is empty or
/// `?cursor=<nextCursor>`.
async fn task_list(state: &AppState, ctx: &RequestCtx, uri: &str, query: &str) -> Result<Value, RpcFailure> {
    let cursor = match query.strip_prefix("?cursor=") {
        _ if query.is_empty() => None,
        Some(cursor) if !cursor.is_empty() && !cursor.contains('&') => Some(cursor),
        _ => {
            return Err(RpcFailure::invalid_params(format!(
                "`{uri}`: the only query {TASKS_RESOURCE} takes is `?cursor=<nextCursor>`"
            ))
            .with_data(json!({"uri": uri})));
        }
    };
    let index = if ctx.caller.operator { TaskIndex::Live } else { TaskIndex::Owner(&ctx.caller.principal) };
    crate::reads::pass_list_gate(state, &ctx.caller, TASKS_RESOURCE, cursor.unwrap_or("first")).await?;
    let page = state.store.list_tasks(index, cursor, TASKS_PAGE).await?.map_err(|why| {
        RpcFailure::invalid_params(format!("`{uri}`: {why}")).with_data(json!({"uri": uri}))
    })?;
    let tasks: Vec<Value> =
        page.tasks.iter().filter(|t| t.mode == TaskMode::Task).map(|t| task_view(t, None)).collect();
    let mut body = json!({"tasks": tasks});
    if let Some(next) = page.next_cursor {
        body["nextCursor"] = json!(next);
    }
    let contents = json!([{"uri": uri, "mimeType": "application/json", "text": body.to_string()}]);
    Ok(with_cache_hints(ctx.wire, json!({"contents": contents}), 0))
}

/// One task's state with its nodes, for its owner (or an operator).
async fn task_state(
    state: &AppState,
    ctx: &RequestCtx,
    uri: &str,
    task_id: &str,
) -> Result<Value, RpcFailure> {
    let parts = TaskParts { nodes: true, ..TaskParts::STATUS };
    let reader = Reader::new(&ctx.caller, &ctx.method, parts).gated(GateKind::Poll);
    let held = read_detail(state, reader, task_id, uri).await?;
    let body = task_view(&held.task().status_record(), Some(&held.detail.nodes));
    let cache = if held.task().status.is_terminal() { cacheable_for(held.task()) } else { 0 };
    let contents = json!([{"uri": uri, "mimeType": "application/json", "text": body.to_string()}]);
    ctx.reply_budget.hold(held.permit);
    Ok(with_cache_hints(ctx.wire, json!({"contents": contents}), cache))
}

/// A task read for a resource, or the resource's "not found".
async fn read_detail(
    state: &AppState,
    reader: Reader<'_>,
    task_id: &str,
    uri: &str,
) -> Result<Held, RpcFailure> {
    match read_task(state, reader, task_id).await? {
        Some(Found::Read(held)) => Ok(*held),
        _ => Err(not_found(uri)),
    }
}

/// What the task resources say of a task: its summary, and with `nodes` its graph, each node
/// with the size of its output rather than the output (which the result resource carries).
fn task_view(task: &TaskStatusRecord, nodes: Option<&[NodeRecord]>) -> Value {
    let mut view = conveyor_shared::store::task_summary(task, nodes.unwrap_or_default());
    match (view.as_object_mut(), nodes) {
        (Some(object), None) => {
            object.remove("nodes");
        }
        (Some(object), Some(_)) => {
            if let Some(Value::Array(nodes)) = object.get_mut("nodes") {
                for node in nodes.iter_mut().filter_map(Value::as_object_mut) {
                    node.remove("output");
                }
            }
        }
        (None, _) => {}
    }
    view
}

/// A finished task's result as a resource, for its owner (or an operator).
async fn task_result(
    state: &AppState,
    ctx: &RequestCtx,
    uri: &str,
    task_id: &str,
) -> Result<Value, RpcFailure> {
    let reader = Reader::new(&ctx.caller, &ctx.method, TaskParts::OUTCOME).gated(GateKind::Result);
    let Held { detail, permit } = read_detail(state, reader, task_id, uri).await?;
    let mut task = detail.task;
    let body = match (task.result.take(), &task.error) {
        (Some(result), _) => result,
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
    drop(body);
    ctx.reply_budget.hold(permit);
    Ok(with_cache_hints(ctx.wire, json!({"contents": contents}), cacheable_for(&task)))
}

/// How long what a finished task holds may be cached: it never changes until the task expires.
fn cacheable_for(task: &TaskRecord) -> u64 {
    task.created_at_ms.saturating_add(task.ttl_ms).saturating_sub(conveyor_shared::model::now_ms())
}

/// A resource a finished task's result embeds under `uri`, for the task's owner (or an operator).
/// A synchronous call's result names its documents the same way, so they are read the same way,
/// although the call is no task to its client otherwise.
async fn task_embedded(
    state: &AppState,
    ctx: &RequestCtx,
    uri: &str,
    task_id: &str,
) -> Result<Value, RpcFailure> {
    // A result reader like the result resource: its gap, and the caller's budget.
    let reader = Reader {
        hidden: true,
        ..Reader::new(&ctx.caller, &ctx.method, TaskParts::OUTCOME).gated(GateKind::Result)
    };
    let Held { detail, permit } = read_detail(state, reader, task_id, uri).await?;
    let task = detail.task;
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
    ctx.reply_budget.hold(permit);
    Ok(with_cache_hints(ctx.wire, json!({"contents": [embedded]}), cacheable_for(&task)))
}

/// `resources/subscribe` and `unsubscribe` (2025-11-25): accepted for a resource this server
/// knows. Updates reach 2026-07-28 clients on `subscriptions/listen`; a 2025-11-25 session has no
/// stream of its own to carry them (the gateway serves no GET stream), so nothing is kept.
pub(super) fn resources_subscribe(state: &AppState, ctx: &RequestCtx) -> Result<Value, RpcFailure> {
    let uri = string_param(&ctx.params, "uri")?;
    if uri.is_empty() {
        return Err(RpcFailure::invalid_params("Invalid params: `uri` must not be empty"));
    }
    if !is_task_resource(uri) && !state.access.may_use(&ctx.caller, Offer::Resource, uri) {
        super::audit_denied(&ctx.caller, &ctx.method, uri, "the access policy does not grant this resource");
        return Err(not_found(uri));
    }
    Ok(json!({}))
}

/// The task a task resource's `uri` names (its state, its result, a document its result embeds);
/// `None` for the task list and any other resource.
pub(super) fn task_of_resource(uri: &str) -> Option<String> {
    [TASK_STATE_TEMPLATE, TASK_RESULT_TEMPLATE, TASK_EMBEDDED_TEMPLATE]
        .into_iter()
        .find_map(|template| match_template(template, uri)?.get("taskId")?.as_str().map(str::to_owned))
}

/// Whether `uri` is one of the gateway's resources of the caller's own tasks, which need no rule.
pub(super) fn is_task_resource(uri: &str) -> bool {
    uri.starts_with(TASKS_RESOURCE)
}

/// A worker resource's URI, by which it is granted.
fn resource_uri(resource: &CatalogTool) -> &str {
    resource.definition.get("uri").and_then(Value::as_str).unwrap_or_default()
}

/// A template's URI template, by which it is offered.
pub(super) fn template_of(template: &CatalogTool) -> &str {
    template.definition.get("uriTemplate").and_then(Value::as_str).unwrap_or_default()
}
