//! JSON-RPC methods, one module each (the one-module-per-command layout of mini-redis), the same
//! task model behind both wires. Handlers read and change tasks only through the store; they run
//! no tool. This module routes a request to its handler and holds what several handlers share.
//!
//! - [`initialize`], [`discover`]: the handshakes of 2025-11-25 and 2026-07-28.
//! - [`tools_list`], [`tools_call`]: the catalog, and a call (a task, or a synchronous call that
//!   waits for its hidden task).
//! - [`prompts`], [`resources`], [`completion`]: what workers offer besides tools ([`offers`]:
//!   run by a handler on a worker like a tool; caching hints), and every finished task's result.
//! - [`logging`]: the log level a 2025-11-25 session asks for.
//! - [`subscriptions`]: the `subscriptions/listen` stream of 2026-07-28 (task status, resource
//!   updates, list changes).
//! - [`tasks_get`], [`tasks_cancel`], [`tasks_update`], [`tasks_list`], [`tasks_result`].
//! - [`client_messages`]: the client's answers to requests for input, and its notifications.
//! - [`resume`]: a 2025-11-25 reply stream resumed after a disconnect (`Last-Event-ID`).
//! - [`follow`]: a request that waits for a task's end, relaying its progress.
//! - [`root_grants`]: the roots a caller may read: calls naming another root refused at the door,
//!   listings and completions showing only the caller's, the list every call carries to workers.
//! - [`rounds`]: a synchronous call whose tool asks for input (2026-07-28 MRTR rounds with a
//!   signed `requestState`), and one that its tool turns into a task.

mod client_messages;
mod completion;
mod discover;
mod follow;
mod initialize;
mod logging;
mod offers;
mod prompts;
mod resources;
pub mod resume;
mod root_grants;
mod rounds;
mod subscriptions;
mod tasks_cancel;
mod tasks_get;
mod tasks_list;
mod tasks_result;
mod tasks_update;
mod tools_call;
mod tools_list;

use std::sync::Arc;

use conveyor_shared::call::CallRecord;
use conveyor_shared::model::{RpcError, TaskMode};
use conveyor_shared::store::NewTask;
use futures::StreamExt;
use futures::stream::BoxStream;
use rmcp::model::{ErrorCode, TASKS_EXTENSION_ID};
use serde_json::{Value, json};

use crate::access::Caller;
use crate::rpc::RpcFailure;
use crate::state::{AppState, BudgetPermit, ReplyBudget};
use crate::wire::{META_CLIENT_CAPABILITIES, Wire};

pub(crate) use crate::access::audit_denied;
pub(crate) use client_messages::{client_response, notification};
pub use resume::ResumePoint;
pub(crate) use tasks_cancel::cancel_task;
pub use tools_call::IDEMPOTENCY_KEY;

/// One request, as the HTTP layer hands it over.
pub struct RequestCtx {
    pub id: Value,
    pub method: String,
    pub params: Value,
    pub wire: Wire,
    pub accepts_sse: bool,
    pub caller: Caller,
    /// The request's share of the gateway's memory budget; a handler that keeps running after it
    /// has let go of the request's JSON (a synchronous call waiting for its task) gives it back.
    pub budget: Option<BudgetPermit>,
    /// What the reply holds of the caller's budget until it is written: a handler that read a
    /// task for its answer puts that read's permit here.
    pub reply_budget: ReplyBudget,
    /// The client's input capabilities (elicitation, sampling, roots): from the request's `_meta`
    /// on 2026-07-28, from the signed session id on 2025-11-25; `{}` when unknown.
    pub client_capabilities: Value,
    /// The nonce of the request's 2025-11-25 session, when it names one this deployment signed.
    pub session: Option<String>,
    /// The request's `Mcp-Param-*` headers (2026-07-28), by lower-cased parameter name.
    pub param_headers: Vec<(String, String)>,
}

/// A message on a reply stream: notifications and requests to the client first, then the
/// response.
pub enum StreamItem {
    Message(Value),
    Done(Result<Value, RpcFailure>),
    /// The stream can be resumed after a disconnect (`Last-Event-ID`): it follows this point's
    /// task. Comes first, before any message.
    Resumable(ResumePoint),
    /// The stream closes here without a response; the client resumes it after `retry_ms`.
    Release {
        retry_ms: u64,
    },
}

/// How a followed task's reply goes out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyMode {
    /// As SSE from the start (the client asked for progress).
    Sse,
    /// As JSON, unless a message must go out before the response: then as SSE from that message
    /// on (the client accepts both).
    JsonUnlessStreaming,
    /// As JSON; messages before the response are dropped (the client takes no SSE).
    Json,
}

impl ReplyMode {
    pub fn of(accepts_sse: bool, wants_progress: bool) -> Self {
        match (accepts_sse, wants_progress) {
            (true, true) => Self::Sse,
            (true, false) => Self::JsonUnlessStreaming,
            (false, _) => Self::Json,
        }
    }
}

pub type ReplyStream = BoxStream<'static, StreamItem>;

pub enum Reply {
    Result(Value),
    /// Sent as SSE: the client gets notifications while the response is pending.
    Stream(ReplyStream),
}

pub async fn handle(state: Arc<AppState>, ctx: RequestCtx) -> Result<Reply, RpcFailure> {
    let request = conveyor_shared::metrics::McpRequest::start(crate::metrics::method_label(&ctx.method));
    let reply = match ctx.wire {
        Wire::V2025 => handle_2025(state, ctx).await,
        Wire::V2026 => handle_2026(state, ctx).await.map(|reply| match reply {
            // Every 2026-07-28 result says what it is; a plain result is "complete".
            Reply::Result(result) => Reply::Result(with_result_type(result)),
            Reply::Stream(stream) => Reply::Stream(
                stream
                    .map(|item| match item {
                        StreamItem::Done(Ok(result)) => StreamItem::Done(Ok(with_result_type(result))),
                        other => other,
                    })
                    .boxed(),
            ),
        }),
    };
    measured(request, reply)
}

// Every method but `tools/call` runs boxed: a request's future is as large as the largest method
// it may run, and it is moved whole (a spawn, a box), so the rare ones stay off the hot path's size.
async fn handle_2025(state: Arc<AppState>, ctx: RequestCtx) -> Result<Reply, RpcFailure> {
    let result = match ctx.method.as_str() {
        "ping" => json!({}),
        "initialize" => initialize::initialize(&ctx.params),
        "tools/list" => Box::pin(tools_list::tools_list(&state, &ctx)).await?,
        "tools/call" => return tools_call::tools_call(state, ctx).await,
        "tasks/get" => Box::pin(tasks_get::tasks_get(&state, &ctx)).await?,
        "tasks/cancel" => Box::pin(tasks_cancel::tasks_cancel(&state, &ctx)).await?,
        "tasks/result" => return Box::pin(tasks_result::tasks_result(state, ctx)).await,
        "tasks/list" => Box::pin(tasks_list::tasks_list(&state, &ctx)).await?,
        "prompts/list" => Box::pin(prompts::prompts_list(&state, &ctx)).await?,
        "prompts/get" => return Box::pin(prompts::prompts_get(state, ctx)).await,
        "resources/list" => Box::pin(resources::resources_list(&state, &ctx)).await?,
        "resources/templates/list" => Box::pin(resources::resource_templates_list(&state, &ctx)).await?,
        "resources/read" => return Box::pin(resources::resources_read(state, ctx)).await,
        "resources/subscribe" | "resources/unsubscribe" => resources::resources_subscribe(&state, &ctx)?,
        "completion/complete" => Box::pin(completion::complete(&state, &ctx)).await?,
        "logging/setLevel" => Box::pin(logging::set_level(&state, &ctx)).await?,
        method => return Err(RpcFailure::method_not_found(method)),
    };
    Ok(Reply::Result(result))
}

async fn handle_2026(state: Arc<AppState>, ctx: RequestCtx) -> Result<Reply, RpcFailure> {
    let method = ctx.method.as_str();
    if matches!(method, "tasks/get" | "tasks/update" | "tasks/cancel")
        && !client_has_tasks_extension(&ctx.params)
    {
        return Err(missing_capability(
            format!(
                "{method} needs the {TASKS_EXTENSION_ID} extension: declare it in the client capabilities"
            ),
            json!({"extensions": {TASKS_EXTENSION_ID: {}}}),
        ));
    }
    let result = match method {
        "server/discover" => discover::discover(),
        "tools/list" => Box::pin(tools_list::tools_list(&state, &ctx)).await?,
        "tools/call" => return tools_call::tools_call(state, ctx).await,
        "tasks/get" => Box::pin(tasks_get::tasks_get(&state, &ctx)).await?,
        "tasks/update" => Box::pin(tasks_update::tasks_update(&state, &ctx)).await?,
        "tasks/cancel" => Box::pin(tasks_cancel::tasks_cancel(&state, &ctx)).await?,
        "prompts/list" => Box::pin(prompts::prompts_list(&state, &ctx)).await?,
        "prompts/get" => return Box::pin(prompts::prompts_get(state, ctx)).await,
        "resources/list" => Box::pin(resources::resources_list(&state, &ctx)).await?,
        "resources/templates/list" => Box::pin(resources::resource_templates_list(&state, &ctx)).await?,
        "resources/read" => return Box::pin(resources::resources_read(state, ctx)).await,
        "completion/complete" => Box::pin(completion::complete(&state, &ctx)).await?,
        "subscriptions/listen" => return Box::pin(subscriptions::listen(state, ctx)).await,
        // initialize, ping, logging/setLevel, resources/subscribe, tasks/result, tasks/list and
        // the rest do not exist on this revision.
        method => return Err(RpcFailure::method_not_found(method)),
    };
    Ok(Reply::Result(result))
}

fn with_result_type(mut result: Value) -> Value {
    if let Some(object) = result.as_object_mut() {
        object.entry("resultType").or_insert_with(|| json!("complete"));
    }
    result
}

pub(crate) fn missing_capability(message: String, required: Value) -> RpcFailure {
    RpcFailure::new(
        ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
        message,
        Some(json!({"requiredCapabilities": required})),
    )
}

/// The client capabilities of a 2026-07-28 request.
fn client_capabilities(params: &Value) -> Option<&Value> {
    params.get("_meta").and_then(|m| m.get(META_CLIENT_CAPABILITIES))
}

pub(crate) fn string_param<'a>(params: &'a Value, name: &str) -> Result<&'a str, RpcFailure> {
    params
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| RpcFailure::invalid_params(format!("Invalid params: `{name}` must be a string")))
}

pub(crate) fn client_has_tasks_extension(params: &Value) -> bool {
    client_capabilities(params)
        .and_then(|c| c.get("extensions"))
        .and_then(|e| e.get(TASKS_EXTENSION_ID))
        .is_some()
}

pub(crate) fn failure_of(error: &RpcError) -> RpcFailure {
    RpcFailure::new(ErrorCode(error.code), error.message.clone(), error.data.clone())
}

/// Sends a followed task's stream as SSE, or waits for its end and answers with JSON.
pub(crate) async fn reply_from(mut stream: ReplyStream, mode: ReplyMode) -> Result<Reply, RpcFailure> {
    if mode == ReplyMode::Sse {
        return Ok(Reply::Stream(stream));
    }
    let mut resumable = None;
    while let Some(item) = stream.next().await {
        match item {
            StreamItem::Done(done) => return done.map(Reply::Result),
            StreamItem::Resumable(point) => resumable = Some(point),
            item @ (StreamItem::Message(_) | StreamItem::Release { .. })
                if mode == ReplyMode::JsonUnlessStreaming =>
            {
                // Something must reach the client before the response: the reply becomes a stream.
                let first: Vec<StreamItem> =
                    resumable.take().map(StreamItem::Resumable).into_iter().chain([item]).collect();
                return Ok(Reply::Stream(futures::stream::iter(first).chain(stream).boxed()));
            }
            StreamItem::Message(_) | StreamItem::Release { .. } => {}
        }
    }
    Err(RpcFailure::internal("the task stream ended without a result"))
}

/// Owner index entries are kept as long as the longest-lived task could be listed.
const OWNER_INDEX_SLACK_MS: u64 = 7 * 24 * 60 * 60 * 1000;

/// How long an owner's task index is kept at least: as long as its longest-lived task.
pub(crate) fn index_retention_ms(state: &AppState) -> u64 {
    state.config.task_ttl_max_ms + OWNER_INDEX_SLACK_MS
}

/// What every call of a tool or an offer stores for its worker: the wire, the arguments, the
/// client's capabilities, the roots its caller may read. A `tools/call` adds its progress token
/// and log level.
pub(crate) fn call_record(
    state: &AppState,
    ctx: &RequestCtx,
    arguments: Value,
    roots: root_grants::Grants,
) -> CallRecord {
    CallRecord {
        wire: ctx.wire.as_str().to_owned(),
        arguments,
        poll_interval_ms: state.config.poll_interval_ms,
        client_capabilities: ctx.client_capabilities.as_object().cloned().unwrap_or_default(),
        roots: roots.into_record(),
        ..CallRecord::default()
    }
}

/// A new synchronous call of `tool` by the request's caller, with the deployment's limits, traced
/// from here: the fields every task shares. Callers set what their call decides.
pub(crate) fn new_task(
    state: &AppState,
    ctx: &RequestCtx,
    task_id: String,
    tool: &str,
    call: CallRecord,
    catalog: &crate::catalog::Snapshot,
) -> NewTask {
    let created_at_ms = conveyor_shared::model::now_ms();
    NewTask {
        task_id,
        owner: ctx.caller.principal.clone(),
        tool: tool.to_owned(),
        call,
        ttl_ms: state.config.applied_ttl_ms(None),
        traceparent: Some(conveyor_shared::telemetry::context::TaskTrace::here(created_at_ms).encode()),
        mode: TaskMode::Sync,
        status_message: format!("Queued: {tool}"),
        created_at_ms,
        graph: None,
        idempotency_key: None,
        queues: catalog.queues.clone(),
        waiter: None,
        index_retention_ms: index_retention_ms(state),
        input_responses: None,
        escalable: false,
        call_key: None,
        max_bytes: state.config.max_task_bytes,
        plan_limits: state.config.dag_limits(),
        // A 2026-07-28 synchronous call tells its client of each round of input, and the client
        // answers in a later call, or never.
        input_rounds: ctx.wire == crate::wire::Wire::V2026,
    }
}

/// One more stream or waiting call for `caller` on this gateway, or the refusal that names the
/// limit (`max_streams_per_principal`). Held as long as the stream or the wait lasts.
pub(crate) fn hold_stream(state: &AppState, caller: &Caller) -> Result<crate::state::Held, RpcFailure> {
    state.streams.take(&caller.principal).ok_or_else(|| {
        tracing::info!(target: "conveyor::audit", event = "denied", principal = %caller.principal, reason = "streams per principal", "request refused: too many open streams");
        too_many_streams(state)
    })
}

/// The refusal of a stream or waiting call over the principal's limit.
pub(crate) fn too_many_streams(state: &AppState) -> RpcFailure {
    RpcFailure::new(
        crate::rpc::codes::OVERLOADED,
        format!(
            "Too many open streams: a principal may hold {} streams and waiting calls open on one gateway (limit max_streams_per_principal); nothing was started. Close one, or retry in about 1 s.",
            state.streams.max()
        ),
        Some(
            json!({"limit": "max_streams_per_principal", "max": state.streams.max(), "retryAfterMs": 1_000}),
        ),
    )
}

/// A reply that keeps `held` until it has been sent: a stream drops it when it ends.
pub(crate) fn holding(
    reply: Result<Reply, RpcFailure>,
    held: crate::state::Held,
) -> Result<Reply, RpcFailure> {
    match reply {
        Ok(Reply::Stream(stream)) => Ok(Reply::Stream(
            stream
                .map(move |item| {
                    let _held = &held;
                    item
                })
                .boxed(),
        )),
        other => other,
    }
}

/// Counts and times a dispatched request by its reply: at once for a result or an error, at its
/// response for a stream (or when the stream closes without one).
fn measured(
    request: conveyor_shared::metrics::McpRequest,
    reply: Result<Reply, RpcFailure>,
) -> Result<Reply, RpcFailure> {
    match reply {
        Ok(Reply::Result(result)) => {
            request.finish(conveyor_shared::metrics::McpOutcome::Ok);
            Ok(Reply::Result(result))
        }
        Ok(Reply::Stream(stream)) => {
            let mut request = Some(request);
            Ok(Reply::Stream(
                stream
                    .inspect(move |item| {
                        if let StreamItem::Done(done) = item
                            && let Some(request) = request.take()
                        {
                            request.finish(if done.is_ok() {
                                conveyor_shared::metrics::McpOutcome::Ok
                            } else {
                                conveyor_shared::metrics::McpOutcome::Error
                            });
                        }
                    })
                    .boxed(),
            ))
        }
        Err(failure) => {
            request.finish(conveyor_shared::metrics::McpOutcome::Error);
            Err(failure)
        }
    }
}

pub(crate) fn task_not_found(task_id: &str) -> RpcFailure {
    RpcFailure::invalid_params(format!(
        "Failed to retrieve task: Task not found: `{task_id}` (unknown, expired, or not yours)"
    ))
}
