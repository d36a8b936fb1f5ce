//! JSON-RPC methods: one handler each, the same task model behind both wires. Handlers read and
//! change tasks only through the store; they run no tool.

use std::sync::Arc;
use std::time::Duration;

use conveyor_shared::dag::{self, DagSpec};
use conveyor_shared::events::{Delivery, Waiter};
use conveyor_shared::keys;
use conveyor_shared::model::{RpcError, TaskEvent, TaskMode, TaskRecord, TaskStatus, new_task_id, now_ms};
use conveyor_shared::store::{AnswerOutcome, CancelOutcome, Created, LimitHit, NewTask, task_error};
use futures::StreamExt;
use futures::stream::BoxStream;
use rmcp::model::{ErrorCode, TASKS_EXTENSION_ID};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;

use crate::catalog::{RUN_DAG, TaskSupport};
use crate::rpc::{self, RpcFailure};
use crate::state::AppState;
use crate::wire::{self, META_CLIENT_CAPABILITIES, META_RELATED_TASK, Wire};

/// `_meta` key of a `tools/call`'s idempotency key: a call retried with the same key (after a lost
/// response, say) returns the task the first one created instead of running the work again.
pub const IDEMPOTENCY_KEY: &str = "io.conveyor/idempotencyKey";

/// Page size of `tasks/list`.
const LIST_PAGE: usize = 50;
/// How often a waiting request reads its task again although no event said so: events are only
/// lost when the subscription drops, and then every waiter reads again at once; this is a last
/// line of defence, not the way results arrive.
const SAFETY_RECHECK: Duration = Duration::from_secs(30);
/// Owner index entries are kept as long as the longest-lived task could be listed.
const OWNER_INDEX_SLACK_MS: u64 = 7 * 24 * 60 * 60 * 1000;

/// One request, as the HTTP layer hands it over.
pub struct RequestCtx {
    pub id: Value,
    pub method: String,
    pub params: Value,
    pub wire: Wire,
    pub accepts_sse: bool,
    pub owner: String,
    pub traceparent: Option<String>,
}

/// A message on a reply stream: notifications first, then the response.
pub enum StreamItem {
    Notification(Value),
    Done(Result<Value, RpcFailure>),
}

pub type ReplyStream = BoxStream<'static, StreamItem>;

pub enum Reply {
    Result(Value),
    /// Sent as SSE: the client gets notifications while the response is pending.
    Stream(ReplyStream),
}

pub async fn handle(state: Arc<AppState>, ctx: RequestCtx) -> Result<Reply, RpcFailure> {
    match ctx.wire {
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
    }
}

async fn handle_2025(state: Arc<AppState>, ctx: RequestCtx) -> Result<Reply, RpcFailure> {
    let result = match ctx.method.as_str() {
        "ping" => json!({}),
        "initialize" => initialize(&ctx.params),
        "tools/list" => tools_list(&state, ctx.wire).await?,
        "tools/call" => return tools_call(state, ctx).await,
        "tasks/get" => tasks_get(&state, &ctx).await?,
        "tasks/cancel" => tasks_cancel(&state, &ctx).await?,
        "tasks/result" => return tasks_result(state, ctx).await,
        "tasks/list" => tasks_list(&state, &ctx).await?,
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
        "server/discover" => discover(),
        "tools/list" => tools_list(&state, ctx.wire).await?,
        "tools/call" => return tools_call(state, ctx).await,
        "tasks/get" => tasks_get(&state, &ctx).await?,
        "tasks/update" => tasks_update(&state, &ctx).await?,
        "tasks/cancel" => tasks_cancel(&state, &ctx).await?,
        // initialize, ping, tasks/result, tasks/list and the rest do not exist on this revision.
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

fn missing_capability(message: String, required: Value) -> RpcFailure {
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

/// The top-level capabilities in `required` that the request's client does not declare.
fn undeclared_capabilities(params: &Value, required: &Value) -> Option<Value> {
    let declared = client_capabilities(params);
    let missing: serde_json::Map<String, Value> = required
        .as_object()?
        .iter()
        .filter(|(name, _)| declared.and_then(|d| d.get(name.as_str())).is_none())
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    (!missing.is_empty()).then_some(Value::Object(missing))
}

const INSTRUCTIONS: &str = "Conveyor runs long tools as durable tasks on a worker cluster: call a task-capable tool, \
then poll the task, read its result, or cancel it.";

fn server_info() -> Value {
    json!({"name": "conveyor", "title": "Conveyor", "version": env!("CARGO_PKG_VERSION")})
}

fn initialize(params: &Value) -> Value {
    let requested = params.get("protocolVersion").and_then(Value::as_str).unwrap_or_default();
    let version =
        if wire::INITIALIZE_VERSIONS.contains(&requested) { requested } else { wire::INITIALIZE_VERSIONS[0] };
    json!({
        "protocolVersion": version,
        "capabilities": {
            "tools": {"listChanged": false},
            "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
        },
        "serverInfo": server_info(),
        "instructions": INSTRUCTIONS,
    })
}

fn discover() -> Value {
    json!({
        "resultType": "complete",
        "supportedVersions": wire::supported_versions(),
        "capabilities": {
            "tools": {"listChanged": false},
            "extensions": {TASKS_EXTENSION_ID: {}}
        },
        "instructions": INSTRUCTIONS,
        "ttlMs": 60_000,
        "cacheScope": "public",
        "_meta": {"io.modelcontextprotocol/serverInfo": server_info()},
    })
}

/// How long a client may cache `tools/list`: workers may publish new tools at any time.
const TOOLS_LIST_TTL_MS: u64 = 5_000;

async fn tools_list(state: &AppState, wire: Wire) -> Result<Value, RpcFailure> {
    let tools: Vec<Value> = state
        .catalog
        .list()
        .await?
        .into_iter()
        .map(|t| match wire {
            Wire::V2025 => t.definition,
            // 2026-07-28 tools carry no `execution`: the server decides per call.
            Wire::V2026 => {
                let mut d = t.definition;
                if let Some(o) = d.as_object_mut() {
                    o.remove("execution");
                }
                d
            }
        })
        .collect();
    Ok(match wire {
        Wire::V2025 => json!({"tools": tools}),
        Wire::V2026 => json!({"tools": tools, "ttlMs": TOOLS_LIST_TTL_MS, "cacheScope": "public"}),
    })
}

fn string_param<'a>(params: &'a Value, name: &str) -> Result<&'a str, RpcFailure> {
    params
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| RpcFailure::invalid_params(format!("Invalid params: `{name}` must be a string")))
}

fn client_has_tasks_extension(params: &Value) -> bool {
    client_capabilities(params)
        .and_then(|c| c.get("extensions"))
        .and_then(|e| e.get(TASKS_EXTENSION_ID))
        .is_some()
}

async fn tools_call(state: Arc<AppState>, ctx: RequestCtx) -> Result<Reply, RpcFailure> {
    let params = &ctx.params;
    let name = string_param(params, "name")?;
    let arguments = match params.get("arguments") {
        None | Some(Value::Null) => json!({}),
        Some(a @ Value::Object(_)) => a.clone(),
        Some(_) => return Err(RpcFailure::invalid_params("Invalid params: `arguments` must be an object")),
    };
    let tool = state.catalog.get(name).await?.ok_or_else(|| {
        RpcFailure::invalid_params(format!(
            "Unknown tool: `{name}`. tools/list names the tools this server offers."
        ))
    })?;
    let task_param = params.get("task").filter(|t| !t.is_null());
    let as_task = match ctx.wire {
        Wire::V2025 => match (task_param, tool.task_support) {
            (Some(_), TaskSupport::Forbidden) => {
                return Err(RpcFailure::method_not_found("tools/call").with_data(json!({
                    "reason": format!("tool `{name}` does not run as a task (execution.taskSupport is \"forbidden\"); call it without `task`")
                })));
            }
            (None, TaskSupport::Required) => {
                return Err(RpcFailure::new(
                    ErrorCode::METHOD_NOT_FOUND,
                    format!("Tool `{name}` must be called as a task: add `task` to the tools/call params"),
                    None,
                ));
            }
            (task, _) => task.is_some(),
        },
        Wire::V2026 => {
            let client_tasks = client_has_tasks_extension(params);
            match tool.task_support {
                TaskSupport::Required if !client_tasks => {
                    return Err(RpcFailure::new(
                        ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
                        format!(
                            "Tool `{name}` runs only as a task: the client must declare the {TASKS_EXTENSION_ID} extension"
                        ),
                        Some(json!({"requiredCapabilities": {"extensions": {TASKS_EXTENSION_ID: {}}}})),
                    ));
                }
                TaskSupport::Required | TaskSupport::Optional => client_tasks,
                TaskSupport::Forbidden => false,
            }
        }
    };
    if ctx.wire == Wire::V2026
        && let Some(required) = &tool.required_client_capabilities
        && let Some(missing) = undeclared_capabilities(params, required)
    {
        return Err(missing_capability(
            format!("Tool `{name}` needs client capabilities this client does not declare: {missing}"),
            missing,
        ));
    }
    tool.validate(&arguments)?;
    let graph = if tool.name == RUN_DAG { Some(checked_graph(&state, &arguments).await?) } else { None };
    let requested_ttl = match task_param.and_then(|t| t.get("ttl")) {
        None | Some(Value::Null) => None,
        Some(ttl) => Some(ttl.as_u64().ok_or_else(|| {
            RpcFailure::invalid_params(
                "Invalid params: `task.ttl` must be a non-negative integer (milliseconds)",
            )
        })?),
    };
    let progress_token =
        params.pointer("/_meta/progressToken").filter(|t| t.is_string() || t.is_number()).cloned();
    let mode = if as_task { TaskMode::Task } else { TaskMode::Sync };
    let idempotency_key = match params.pointer(&format!("/_meta/{}", IDEMPOTENCY_KEY.replace('/', "~1"))) {
        None | Some(Value::Null) => None,
        Some(Value::String(k)) if !k.is_empty() && k.len() <= 256 && !k.contains(char::is_whitespace) => {
            Some(k.clone())
        }
        Some(_) => {
            return Err(RpcFailure::invalid_params(format!(
                "Invalid params: `_meta.{IDEMPOTENCY_KEY}` must be a string of 1 to 256 characters without spaces"
            )));
        }
    };
    // An idempotent call lands in the shard its key names, so that a retry finds the first task.
    let shard = match &idempotency_key {
        Some(key) => keys::shard_of_key(&ctx.owner, key, state.store.shards()),
        None => state.store.pick_shard(),
    };
    let task_id = new_task_id(shard);
    let idle = idle_tools(&tool, graph.as_ref(), &state.catalog.known().await?);
    let status_message = if idle.is_empty() {
        format!("Queued: {name}")
    } else {
        format!("Queued: no live worker offers {} now; waiting for one", idle.join(", "))
    };
    // A synchronous call hears of its task's progress and end in this gateway's inbox: the local
    // waiter is registered before the task exists, so that not even its first event is missed.
    let (waiter, inbox) = if as_task {
        (None, None)
    } else {
        let hub = state.store.events().await?;
        (Some(hub.waiter(&task_id)), Some(hub.inbox(shard)))
    };
    let mut new = NewTask {
        task_id,
        owner: ctx.owner.clone(),
        tool: name.to_owned(),
        arguments,
        ttl_ms: state.config.applied_ttl_ms(requested_ttl),
        poll_interval_ms: state.config.poll_interval_ms,
        wire: ctx.wire.as_str().to_owned(),
        progress_token: progress_token.clone(),
        traceparent: ctx.traceparent.clone(),
        mode,
        status_message,
        created_at_ms: now_ms(),
        graph,
        idempotency_key,
        queues: state.catalog.queues(),
        waiter: inbox,
        index_retention_ms: state.config.task_ttl_max_ms + OWNER_INDEX_SLACK_MS,
    };
    let mut record = new.record();
    let mut waiter = waiter;
    match state.store.create_task(&new, &state.config.limits).await? {
        Created::Created => {
            tracing::info!(task = %new.task_id, tool = %name, wire = ctx.wire.as_str(), mode = mode.as_str(), "task created");
        }
        Created::Duplicate(earlier) => {
            // A retried call: answer with the task the first one created; nothing runs twice.
            tracing::info!(task = %earlier, tool = %name, "idempotent retry: returning the earlier task");
            record = state.store.get_task(&earlier).await?.ok_or_else(|| task_not_found(&earlier))?;
            new.task_id = earlier;
            waiter = None;
        }
        Created::Conflict(earlier) => {
            return Err(RpcFailure::invalid_params(format!(
                "Idempotency key already used for a different call (task `{earlier}`); use a new key for a new call"
            )));
        }
        Created::OverLimit(hit) => return Err(over_limit(&hit)),
        Created::IdTaken => {
            // 112 random bits collided: astronomically unlikely, and nothing was written.
            return Err(RpcFailure::internal("task id collision; retry the call"));
        }
    }
    if as_task {
        return Ok(Reply::Result(wire::create_result(ctx.wire, &record)));
    }
    let follow = Follow {
        task: record,
        owner: ctx.owner.clone(),
        progress_token: progress_token.clone(),
        deadline: state.config.sync_call_timeout,
    };
    let stream = follow_task(state, follow, waiter, |task| sync_outcome(&task));
    reply_from(stream, ctx.accepts_sse && progress_token.is_some()).await
}

/// JSON-RPC code of a call refused because an overload limit is reached.
pub const OVERLOADED: i32 = -32029;
/// The retry hint of an overloaded call.
const RETRY_AFTER_MS: u64 = 1_000;

fn over_limit(hit: &LimitHit) -> RpcFailure {
    let what = match (hit.limit.as_str(), &hit.tool) {
        ("queued_nodes_per_tool", Some(tool)) => format!("{} queued nodes of tool `{tool}`", hit.max),
        ("live_tasks_per_principal", _) => format!("{} unfinished tasks per principal", hit.max),
        _ => format!("{} queued nodes", hit.max),
    };
    RpcFailure::new(
        ErrorCode(OVERLOADED),
        format!(
            "Overloaded: the limit of {what} is reached ({} now); nothing was started. Retry in about {} s.",
            hit.current,
            RETRY_AFTER_MS / 1000
        ),
        Some(
            json!({"limit": hit.limit, "current": hit.current, "max": hit.max, "tool": hit.tool, "retryAfterMs": RETRY_AFTER_MS}),
        ),
    )
}

/// A `run_dag` graph, checked before anything is written: its shape and limits, every node's tool,
/// and the arguments of every node that takes nothing from upstream against its tool's schema.
async fn checked_graph(state: &AppState, arguments: &Value) -> Result<DagSpec, RpcFailure> {
    let graph: DagSpec = serde_json::from_value(arguments.clone())
        .map_err(|e| RpcFailure::invalid_params(format!("Invalid run_dag graph: {e}")))?;
    graph
        .validate(&state.config.dag_limits())
        .map_err(|e| RpcFailure::invalid_params(format!("Invalid run_dag graph: {e}")))?;
    for node in &graph.nodes {
        let Some(name) = &node.tool else { continue };
        if name == RUN_DAG {
            return Err(RpcFailure::invalid_params(format!(
                "Invalid run_dag graph: node `{}` cannot nest run_dag",
                node.id
            )));
        }
        let tool = state.catalog.get(name).await?.ok_or_else(|| {
            RpcFailure::invalid_params(format!(
                "Invalid run_dag graph: node `{}` calls unknown tool `{name}`",
                node.id
            ))
        })?;
        if dag::upstream_references(&node.arguments).is_empty() {
            tool.validate(&node.arguments).map_err(|mut f| {
                f.error.message =
                    format!("Invalid run_dag graph: node `{}`: {}", node.id, f.error.message).into();
                f
            })?;
        }
    }
    Ok(graph)
}

/// What a synchronous `tools/call` returns once its task settles.
fn sync_outcome(task: &TaskRecord) -> Result<Value, RpcFailure> {
    match (task.status, &task.result, &task.error) {
        (TaskStatus::Completed | TaskStatus::Failed, Some(result), _) => Ok(result.clone()),
        (TaskStatus::Failed, None, _) => Err(failure_of(&task_error(task))),
        _ => Err(RpcFailure::internal(format!("the call ended as {}", task.status))),
    }
}

fn failure_of(error: &RpcError) -> RpcFailure {
    RpcFailure::new(ErrorCode(error.code), error.message.clone(), error.data.clone())
}

/// Sends a followed task's stream as SSE, or waits for its end and answers with JSON.
async fn reply_from(mut stream: ReplyStream, as_sse: bool) -> Result<Reply, RpcFailure> {
    if as_sse {
        return Ok(Reply::Stream(stream));
    }
    while let Some(item) = stream.next().await {
        if let StreamItem::Done(done) = item {
            return done.map(Reply::Result);
        }
    }
    Err(RpcFailure::internal("the task stream ended without a result"))
}

async fn owned_task(state: &AppState, ctx: &RequestCtx) -> Result<TaskRecord, RpcFailure> {
    let task_id = string_param(&ctx.params, "taskId")?;
    match state.store.get_task(task_id).await? {
        Some(task) if task.owner == ctx.owner => Ok(task),
        _ => Err(task_not_found(task_id)),
    }
}

fn task_not_found(task_id: &str) -> RpcFailure {
    RpcFailure::invalid_params(format!(
        "Failed to retrieve task: Task not found: `{task_id}` (unknown, expired, or not yours)"
    ))
}

async fn tasks_get(state: &AppState, ctx: &RequestCtx) -> Result<Value, RpcFailure> {
    let task = owned_task(state, ctx).await?;
    Ok(match ctx.wire {
        Wire::V2025 => wire::task_2025(&task),
        Wire::V2026 => json!(wire::detailed_2026(&task)),
    })
}

async fn tasks_cancel(state: &AppState, ctx: &RequestCtx) -> Result<Value, RpcFailure> {
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

/// 2026-07-28 `tasks/update`: answers some or all pending input requests. Answers to keys that are
/// not pending are ignored; the task resumes once nothing is pending.
async fn tasks_update(state: &AppState, ctx: &RequestCtx) -> Result<Value, RpcFailure> {
    let task_id = string_param(&ctx.params, "taskId")?;
    let responses = match ctx.params.get("inputResponses") {
        Some(r @ Value::Object(_)) => r,
        _ => return Err(RpcFailure::invalid_params("Invalid params: `inputResponses` must be an object")),
    };
    match state.store.answer_input(task_id, &ctx.owner, responses).await? {
        AnswerOutcome::Missing => Err(task_not_found(task_id)),
        AnswerOutcome::Answered { .. } | AnswerOutcome::NotWaiting(_) => Ok(json!({})),
    }
}

async fn tasks_list(state: &AppState, ctx: &RequestCtx) -> Result<Value, RpcFailure> {
    let cursor = match ctx.params.get("cursor") {
        None | Some(Value::Null) => None,
        Some(Value::String(c)) => Some(c.as_str()),
        Some(_) => return Err(RpcFailure::invalid_params("Invalid params: `cursor` must be a string")),
    };
    let page =
        state.store.list_tasks(&ctx.owner, cursor, LIST_PAGE).await?.map_err(RpcFailure::invalid_params)?;
    let mut result = json!({"tasks": page.tasks.iter().map(wire::task_2025).collect::<Vec<_>>()});
    if let Some(next) = page.next_cursor {
        result["nextCursor"] = json!(next);
    }
    Ok(result)
}

/// 2025-11-25 `tasks/result`: blocks until the task is terminal, then answers exactly what the
/// `tools/call` would have, tagged with the related-task `_meta`.
async fn tasks_result(state: Arc<AppState>, ctx: RequestCtx) -> Result<Reply, RpcFailure> {
    let task = owned_task(&state, &ctx).await?;
    if task.status.is_terminal() {
        return task_result_payload(&task).map(Reply::Result);
    }
    // An SSE reply can wait as long as the task runs (keep-alives hold it open); a JSON one is
    // bounded so that no proxy cuts it silently.
    let deadline =
        if ctx.accepts_sse { Duration::from_secs(7 * 24 * 60 * 60) } else { state.config.sync_call_timeout };
    let follow =
        Follow { progress_token: task.progress_token.clone(), task, owner: ctx.owner.clone(), deadline };
    let stream = follow_task(state, follow, None, |t| task_result_payload(&t));
    reply_from(stream, ctx.accepts_sse).await
}

fn task_result_payload(task: &TaskRecord) -> Result<Value, RpcFailure> {
    let related = json!({"taskId": task.task_id});
    match (task.status, &task.result) {
        (TaskStatus::Completed | TaskStatus::Failed, Some(result)) => {
            let mut result = result.clone();
            if let Some(object) = result.as_object_mut() {
                let meta = object.entry("_meta").or_insert_with(|| json!({}));
                if let Some(meta) = meta.as_object_mut() {
                    meta.insert(META_RELATED_TASK.to_owned(), related);
                }
            }
            Ok(result)
        }
        (TaskStatus::Failed, None) => {
            let error = task_error(task);
            let mut data = error.data.clone().unwrap_or_else(|| json!({}));
            if let Some(object) = data.as_object_mut() {
                object.insert("_meta".to_owned(), json!({META_RELATED_TASK: related}));
            }
            Err(failure_of(&RpcError { data: Some(data), ..error }))
        }
        (TaskStatus::Cancelled, _) => Err(RpcFailure::new(
            ErrorCode::INVALID_REQUEST,
            format!("Task `{}` was cancelled and has no result", task.task_id),
            Some(json!({"_meta": {META_RELATED_TASK: related}})),
        )),
        (status, _) => Err(RpcFailure::internal(format!("task is {status} without a result"))),
    }
}

/// Which task to follow, for whom, and for how long.
struct Follow {
    /// The task as last known; its status, result and error are updated from events.
    task: TaskRecord,
    owner: String,
    progress_token: Option<Value>,
    deadline: Duration,
}

/// Follows a task until it is terminal: relays its progress as `notifications/progress` (when the
/// client gave a token), then yields `finish(task)`. `waiter` is a local waiter registered before
/// the task was created with this gateway's inbox among its waiters; without one, the follow
/// registers its own and watches the task (joins its waiters and reads it in one step).
fn follow_task<F>(state: Arc<AppState>, follow: Follow, waiter: Option<Waiter>, finish: F) -> ReplyStream
where
    F: FnOnce(TaskRecord) -> Result<Value, RpcFailure> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        let outcome = wait_terminal(&state, follow, waiter, &tx).await;
        let _ = tx.send(StreamItem::Done(outcome.and_then(finish))).await;
    });
    ReceiverStream::new(rx).boxed()
}

async fn wait_terminal(
    state: &AppState,
    follow: Follow,
    waiter: Option<Waiter>,
    tx: &mpsc::Sender<StreamItem>,
) -> Result<TaskRecord, RpcFailure> {
    let Follow { mut task, owner, progress_token, deadline } = follow;
    let task_id = task.task_id.clone();
    let give_up = Instant::now() + deadline;
    let hub = state.store.events().await?;
    let shard = state.store.shard_of(&task_id).ok_or_else(|| task_not_found(&task_id))?;
    let inbox = hub.inbox(shard);
    let watch = async |task_id: &str| -> Result<TaskRecord, RpcFailure> {
        match state.store.watch_task(task_id, &inbox).await? {
            Some(t) if t.owner == owner => Ok(t),
            _ => Err(task_not_found(task_id)),
        }
    };
    let mut waiter = match waiter {
        Some(waiter) => waiter,
        None => {
            let waiter = hub.waiter(&task_id);
            task = watch(&task_id).await?;
            if task.status.is_terminal() {
                return Ok(task);
            }
            waiter
        }
    };
    let mut recheck = Instant::now() + SAFETY_RECHECK;
    loop {
        tokio::select! {
            delivery = waiter.recv() => match delivery {
                Some(Delivery::Event(TaskEvent::Progress { progress, total, message })) => {
                    if let Some(token) = &progress_token {
                        let mut params = json!({"progressToken": token, "progress": progress});
                        if let Some(total) = total { params["total"] = json!(total); }
                        if let Some(message) = message { params["message"] = json!(message); }
                        let _ = tx.send(StreamItem::Notification(rpc::notification("notifications/progress", params))).await;
                    }
                }
                Some(Delivery::Event(TaskEvent::Status { status, message, result, error })) if status.is_terminal() => {
                    // The event carries the result when it is small: answer without a read.
                    if result.is_some() || error.is_some() || status == TaskStatus::Cancelled {
                        task.status = status;
                        task.status_message = message;
                        task.result = result;
                        task.error = error;
                        return Ok(task);
                    }
                    return state.store.get_task(&task_id).await?.ok_or_else(|| task_not_found(&task_id));
                }
                Some(Delivery::Event(TaskEvent::Status { status, message, .. })) => {
                    task.status = status;
                    task.status_message = message;
                }
                Some(Delivery::Event(TaskEvent::Expired)) => return Err(task_not_found(&task_id)),
                // Events may have been lost (the subscription dropped): read the task again.
                Some(Delivery::Resync) => {
                    task = watch(&task_id).await?;
                    if task.status.is_terminal() {
                        return Ok(task);
                    }
                }
                None => return Err(RpcFailure::internal("this gateway's event hub stopped")),
            },
            () = tokio::time::sleep_until(recheck) => {
                recheck = Instant::now() + SAFETY_RECHECK;
                task = watch(&task_id).await?;
                if task.status.is_terminal() {
                    return Ok(task);
                }
            }
            () = tokio::time::sleep_until(give_up) => {
                return Err(RpcFailure::internal(format!(
                    "Task `{task_id}` is still running after {deadline:?}; it goes on, ask again later"
                )));
            }
            () = tx.closed() => {
                return Err(RpcFailure::internal("the client went away"));
            }
            () = state.shutdown.cancelled() => {
                return Err(RpcFailure::internal(format!(
                    "This gateway is shutting down; task `{task_id}` goes on. Ask again (tasks/get, tasks/result) on any gateway."
                ))
                .with_data(json!({"retryable": true, "taskId": task_id})));
            }
        }
    }
}

/// The tools of a call that no live worker offers now (the call waits in their queues).
fn idle_tools(
    tool: &crate::catalog::CatalogTool,
    graph: Option<&DagSpec>,
    catalog: &[crate::catalog::CatalogTool],
) -> Vec<String> {
    match graph {
        None if tool.live => Vec::new(),
        None => vec![format!("`{}`", tool.name)],
        Some(graph) => {
            let mut idle: Vec<String> = graph
                .nodes
                .iter()
                .filter_map(|n| n.tool.as_deref())
                .filter(|t| catalog.iter().any(|c| c.name == *t && !c.live))
                .map(|t| format!("`{t}`"))
                .collect();
            idle.sort();
            idle.dedup();
            idle
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ProtocolVersion;

    #[test]
    fn initialize_negotiates_a_known_version() {
        let r = initialize(&json!({"protocolVersion": "2025-06-18"}));
        assert_eq!(r["protocolVersion"], "2025-06-18");
        let r = initialize(&json!({"protocolVersion": "1999-01-01"}));
        assert_eq!(r["protocolVersion"], "2025-11-25");
        assert!(r["capabilities"]["tasks"]["requests"]["tools"]["call"].is_object());
        // The shape is rmcp's InitializeResult plus the 2025-11-25 tasks capability.
        serde_json::from_value::<rmcp::model::InitializeResult>(r).expect("an InitializeResult");
    }

    #[test]
    fn discover_is_an_rmcp_discover_result() {
        let d: rmcp::model::DiscoverResult = serde_json::from_value(discover()).expect("a DiscoverResult");
        assert!(d.supported_versions.contains(&ProtocolVersion::V_2026_07_28));
        assert!(d.capabilities.extensions.expect("extensions").contains_key(TASKS_EXTENSION_ID));
    }

    #[test]
    fn a_tool_error_in_task_result_keeps_the_result_and_tags_the_task() {
        let mut task = crate::wire::tests_support::record(TaskStatus::Failed);
        task.result = Some(json!({"content": [{"type": "text", "text": "boom"}], "isError": true}));
        let r = task_result_payload(&task).expect("a result");
        assert_eq!(r["isError"], true);
        assert_eq!(r["_meta"][META_RELATED_TASK]["taskId"], task.task_id);
    }
}
