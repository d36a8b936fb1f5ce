//! `tools/call`: checks the tool and its arguments, decides task or synchronous call, creates the
//! task in one script, and answers with the task, or waits for a synchronous call's result.

use std::sync::Arc;

use conveyor_shared::call::CallRecord;
use conveyor_shared::dag::{self, DagSpec};
use conveyor_shared::events::Waiter;
use conveyor_shared::keys;
use conveyor_shared::model::{TaskMode, TaskRecord, TaskStatus, new_task_id};
use conveyor_shared::store::{Created, LimitHit, NewTask, task_error};
use rmcp::model::{ErrorCode, TASKS_EXTENSION_ID};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::root_grants::Grants;
use super::{
    Reply, ReplyMode, RequestCtx, failure_of, missing_capability, rounds, string_param, task_not_found,
};
use crate::access::Caller;
use crate::catalog::{CatalogTool, RUN_DAG, Snapshot as CatalogSnapshot, TaskSupport};
use crate::rpc::{RpcFailure, codes};
use crate::state::AppState;
use crate::wire::{self, Wire};

/// `_meta` key of a `tools/call`'s idempotency key: a call retried with the same key (after a lost
/// response, say) returns the task the first one created instead of running the work again.
pub const IDEMPOTENCY_KEY: &str = "io.conveyor/idempotencyKey";

/// A `tools/call`'s params, parsed once: every later step reads these fields, not the JSON.
pub(super) struct CallParams {
    pub name: String,
    /// The tool's arguments: an object (`{}` when the call gave none).
    pub arguments: Value,
    /// The call asked to run as a task (`task` present, 2025-11-25).
    pub as_task: bool,
    /// `task.ttl`, when given.
    pub ttl_ms: Option<u64>,
    pub progress_token: Option<Value>,
    pub idempotency_key: Option<String>,
    /// The client capabilities the request's `_meta` declares (2026-07-28).
    pub declared: Map<String, Value>,
    /// The answers and state of a later round (2026-07-28).
    pub round: rounds::RoundInput,
}

impl CallParams {
    /// Takes the params apart, moving the arguments out (a large call is held in memory once),
    /// and refuses what is malformed with the parameter named.
    pub fn parse(ctx: &mut RequestCtx) -> Result<Self, RpcFailure> {
        let round = rounds::RoundInput::of(&*ctx)?;
        let params = &mut ctx.params;
        let arguments = match params.get_mut("arguments").map(Value::take) {
            None | Some(Value::Null) => json!({}),
            Some(a @ Value::Object(_)) => a,
            Some(_) => {
                return Err(RpcFailure::invalid_params("Invalid params: `arguments` must be an object"));
            }
        };
        let name = string_param(params, "name")?.to_owned();
        let task = params.get("task").filter(|t| !t.is_null());
        let ttl_ms = match task.and_then(|t| t.get("ttl")) {
            None | Some(Value::Null) => None,
            Some(ttl) => Some(ttl.as_u64().ok_or_else(|| {
                RpcFailure::invalid_params(
                    "Invalid params: `task.ttl` must be a non-negative integer (milliseconds)",
                )
            })?),
        };
        let meta = params.get("_meta").and_then(Value::as_object);
        let progress_token =
            meta.and_then(|m| m.get("progressToken")).filter(|t| t.is_string() || t.is_number()).cloned();
        let idempotency_key = match meta.and_then(|m| m.get(IDEMPOTENCY_KEY)) {
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
        let declared = meta
            .and_then(|m| m.get(crate::wire::META_CLIENT_CAPABILITIES))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        Ok(Self {
            name,
            arguments,
            as_task: task.is_some(),
            ttl_ms,
            progress_token,
            idempotency_key,
            declared,
            round,
        })
    }

    /// Whether the 2026-07-28 client declares the tasks extension.
    fn client_tasks(&self) -> bool {
        self.declared.get("extensions").and_then(|e| e.get(TASKS_EXTENSION_ID)).is_some()
    }
}

/// The top-level capabilities in `required` that `declared` lacks.
fn undeclared(required: &Value, declared: &Map<String, Value>) -> Option<Value> {
    let missing: Map<String, Value> = required
        .as_object()?
        .iter()
        .filter(|(name, _)| !declared.contains_key(name.as_str()))
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    (!missing.is_empty()).then_some(Value::Object(missing))
}

/// `tools/call` in four steps: parse the params, decide how the call runs, create its task, reply.
pub(super) async fn tools_call(state: Arc<AppState>, mut ctx: RequestCtx) -> Result<Reply, RpcFailure> {
    let call = CallParams::parse(&mut ctx)?;
    // One catalog snapshot serves the whole call: the tool, the queues, which tools are live.
    let catalog = state.catalog.snapshot_with(&call.name).await?;
    let roots = Grants::of(&state, &ctx.caller, &catalog);
    let tool = granted_tool(
        &state,
        &ctx.caller,
        catalog.get(&call.name),
        "the access policy does not grant this tool",
    )
    .filter(|tool| roots.offers(&ctx.caller, &tool.name, &tool.definition))
    .ok_or_else(|| {
        RpcFailure::invalid_params(format!(
            "Unknown tool: `{}`. tools/list names the tools this server offers you.",
            call.name
        ))
    })?;
    check_argument_size(&state, &call.arguments)?;
    let client_tasks = ctx.wire == Wire::V2026 && call.client_tasks();
    if let Some(request_state) = &call.round.request_state {
        // A later round of a call that asked for input: it continues that call, whatever else.
        let held = super::hold_stream(&state, &ctx.caller)?;
        let reply = Box::pin(rounds::continue_round(
            state.clone(),
            ctx.id.clone(),
            ctx.caller.clone(),
            &call.name,
            request_state,
            call.round.responses,
            ctx.accepts_sse,
            rounds::Overdue::Task { client_tasks },
            ctx.reply_budget.clone(),
        ))
        .await;
        return super::holding(reply, held);
    }
    let plan = decide(&state, &ctx, &call, &tool, roots).await?;
    let started = create(&state, &ctx, call, &tool, plan, &catalog).await?;
    reply(state, ctx, started).await
}

/// How a checked call runs.
struct CallPlan {
    /// The client gets a task at once; otherwise the call waits for its hidden task.
    as_task: bool,
    /// A synchronous call its tool may turn into the client's task (2026-07-28 input rounds).
    escalable: bool,
    /// The client takes a task as a call's answer (2026-07-28 with the tasks extension).
    client_tasks: bool,
    /// The checked graph of a `run_dag` call.
    graph: Option<DagSpec>,
    /// The roots the caller may read, which its call's tools may read for it.
    roots: Grants,
}

impl CallPlan {
    fn mode(&self) -> TaskMode {
        if self.as_task { TaskMode::Task } else { TaskMode::Sync }
    }
}

/// Decides task or synchronous call from the wire, the call and the tool's task support, and
/// refuses what the tool cannot take: missing client capabilities, a root the caller may not
/// read, invalid arguments, parameter headers that disagree with the arguments, an invalid graph.
async fn decide(
    state: &AppState,
    ctx: &RequestCtx,
    call: &CallParams,
    tool: &CatalogTool,
    roots: Grants,
) -> Result<CallPlan, RpcFailure> {
    let name = tool.name.as_str();
    let as_task = match ctx.wire {
        Wire::V2025 => match (call.as_task, tool.task_support) {
            (true, TaskSupport::Forbidden) => {
                return Err(RpcFailure::method_not_found("tools/call").with_data(json!({
                    "reason": format!("tool `{name}` does not run as a task (execution.taskSupport is \"forbidden\"); call it without `task`")
                })));
            }
            (false, TaskSupport::Required) => {
                return Err(RpcFailure::new(
                    ErrorCode::METHOD_NOT_FOUND,
                    format!("Tool `{name}` must be called as a task: add `task` to the tools/call params"),
                    None,
                ));
            }
            (task, _) => task,
        },
        Wire::V2026 => {
            let client_tasks = call.client_tasks();
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
    // What the client declared: in the request on 2026-07-28; in the signed session on
    // 2025-11-25, when the request names one (without, nothing is known, and the tool's own
    // request for input fails with -32021 if the client cannot answer it).
    let declared = match (ctx.wire, &ctx.session) {
        (Wire::V2026, _) => Some(&call.declared),
        (Wire::V2025, Some(_)) => ctx.client_capabilities.as_object(),
        (Wire::V2025, None) => None,
    };
    if let (Some(required), Some(declared)) = (&tool.required_client_capabilities, declared)
        && let Some(missing) = undeclared(required, declared)
    {
        return Err(missing_capability(
            format!("Tool `{name}` needs client capabilities this client does not declare: {missing}"),
            missing,
        ));
    }
    // Before the schema, whose `enum` of roots names every one: a refusal names the caller's.
    roots.check_call(
        &ctx.caller,
        name,
        &tool.definition,
        &call.arguments,
        &format!("Invalid arguments for tool `{name}`"),
    )?;
    tool.validate(&call.arguments)?;
    if ctx.wire == Wire::V2026 {
        wire::check_param_headers(&tool.definition, &call.arguments, &ctx.param_headers)?;
    }
    // A tool that gathers input in rounds of the call first answers a task-capable 2026-07-28
    // client synchronously, and turns the call into its task when it says so.
    let escalable = ctx.wire == Wire::V2026 && as_task && tool.input_before_task;
    let graph = if name == RUN_DAG {
        Some(Box::pin(checked_graph(state, &ctx.caller, &roots, &call.arguments)).await?)
    } else {
        None
    };
    let client_tasks = ctx.wire == Wire::V2026 && call.client_tasks();
    Ok(CallPlan { as_task: as_task && !escalable, escalable, client_tasks, graph, roots })
}

/// A created (or, for a retry, found) task, and what its reply needs.
struct Started {
    record: TaskRecord,
    plan: CallPlan,
    /// Where a synchronous call hears of its task; `None` for a task, or a retry's earlier task.
    waiter: Option<Waiter>,
    /// A synchronous call's hold on one of the caller's streams.
    held: Option<crate::state::Held>,
    progress_token: Option<Value>,
    /// A call without an idempotency key is abandoned, not retried, when its connection drops.
    cancel_when_gone: bool,
}

/// Creates the call's task in one script (in another shard when this one is at its limits), or
/// finds the task a retry with the same idempotency key created.
async fn create(
    state: &AppState,
    ctx: &RequestCtx,
    call: CallParams,
    tool: &CatalogTool,
    plan: CallPlan,
    catalog: &CatalogSnapshot,
) -> Result<Started, RpcFailure> {
    let name = tool.name.as_str();
    // A synchronous 2025-11-25 call can be cancelled with notifications/cancelled, which names
    // only its request id and may reach any gateway: the call's task is found by that id.
    let call_scope = (ctx.wire == Wire::V2025 && !plan.as_task && call.idempotency_key.is_none())
        .then(|| ctx.session.clone().unwrap_or_else(|| ctx.caller.principal.clone()));
    let request_id = super::client_messages::request_id_text(&ctx.id);
    // An idempotent call lands in the shard its key names, so that a retry finds the first task;
    // a cancellable call in the shard its request id names.
    let shard = match (&call.idempotency_key, &call_scope) {
        (Some(key), _) => keys::shard_of_key(&ctx.caller.principal, key, state.store.shards()),
        (None, Some(scope)) => keys::shard_of_key(scope, &request_id, state.store.shards()),
        (None, None) => state.store.pick_shard(),
    };
    let task_id = new_task_id(shard);
    crate::telemetry::record_task(&task_id);
    let log_level = super::logging::level_of_call(state, ctx).await?;
    let idle = idle_tools(tool, plan.graph.as_ref(), &catalog.tools);
    let status_message = if idle.is_empty() {
        format!("Queued: {name}")
    } else {
        format!("Queued: no live worker offers {} now; waiting for one", idle.join(", "))
    };
    // A synchronous call hears of its task's progress and end in this gateway's inbox: the local
    // waiter is registered before the task exists, so that not even its first event is missed.
    // A synchronous call holds its connection while its task runs: one of the caller's streams.
    // A call with an idempotency key is retried, not abandoned, when its connection drops: its
    // work runs on so that the retry with the key gets the result (`cancel_when_gone`).
    let held = if plan.as_task { None } else { Some(super::hold_stream(state, &ctx.caller)?) };
    let hub = if plan.as_task { None } else { Some(state.store.events().await?) };
    let mut waiter = hub.as_ref().map(|hub| hub.waiter(&task_id));
    let progress_token = call.progress_token.clone();
    let cancel_when_gone = call.idempotency_key.is_none();
    let record = CallRecord {
        progress_token: call.progress_token,
        log_level,
        ..super::call_record(state, ctx, call.arguments, plan.roots.clone())
    };
    let mut new = NewTask {
        mode: plan.mode(),
        ttl_ms: state.config.applied_ttl_ms(call.ttl_ms),
        status_message,
        graph: plan.graph.clone(),
        idempotency_key: call.idempotency_key,
        waiter: hub.as_ref().map(|hub| hub.inbox(shard)),
        input_responses: call.round.responses,
        escalable: plan.escalable,
        call_key: call_scope.map(|scope| shard.call(&scope, &request_id)),
        ..super::new_task(state, ctx, task_id, name, record, catalog)
    };
    let created = state
        .store
        .create_task_spread(&mut new, &state.config.limits, |moved, shard| {
            // Another shard has room: a synchronous call listens for its task there.
            if let Some(hub) = &hub {
                waiter = Some(hub.waiter(&moved.task_id));
                moved.waiter = Some(hub.inbox(shard));
            }
        })
        .await?;
    crate::telemetry::record_task(&new.task_id);
    let record = match created {
        Created::Created => {
            tracing::info!(target: "conveyor::audit", event = "task_created", principal = %ctx.caller.principal, tool = %name, task = %new.task_id, mode = plan.mode().as_str(), "task created");
            new.record()
        }
        Created::Duplicate(earlier) => {
            // A retried call: answer with the task the first one created; nothing runs twice.
            tracing::info!(task = %earlier, tool = %name, "idempotent retry: returning the earlier task");
            waiter = None;
            Box::pin(earlier_task(state, &ctx.caller, &earlier)).await?
        }
        refused => return Err(refusal(refused)),
    };
    Ok(Started { record, plan, waiter, held, progress_token, cancel_when_gone })
}

/// The task an idempotent call's first attempt created, for its retry.
async fn earlier_task(state: &AppState, caller: &Caller, earlier: &str) -> Result<TaskRecord, RpcFailure> {
    // Its state, not what it stores: a retry of a call whose result is large reads none of it.
    let reader = crate::reads::Reader {
        hidden: true,
        ..crate::reads::Reader::new(caller, "tools/call", conveyor_shared::store::TaskParts::STATUS)
    };
    let record = match crate::reads::read_task(state, reader, earlier).await? {
        Some(crate::reads::Found::Read(held)) => held.detail.task,
        _ => return Err(task_not_found(earlier)),
    };
    if record.owner != caller.principal {
        // Keys are per principal; a task of another one here is a fault, never an answer.
        super::audit_denied(
            caller,
            "tools/call",
            earlier,
            "an idempotency key naming another principal's task",
        );
        return Err(RpcFailure::internal(
            "the idempotency key names a task of another principal; use a new key",
        ));
    }
    Ok(record)
}

/// Why a task was not created, as the caller is told.
pub(super) fn refusal(created: Created) -> RpcFailure {
    match created {
        Created::Conflict(earlier) => RpcFailure::invalid_params(format!(
            "Idempotency key already used for a different call (task `{earlier}`); use a new key for a new call"
        )),
        Created::OverLimit(hit) => over_limit(&hit),
        Created::OverBudget { size, max } => over_budget(size, max),
        // 112 random bits collided: astronomically unlikely, and nothing was written.
        Created::IdTaken => RpcFailure::internal("task id collision; retry the call"),
        // Not refusals: no caller asks for their message.
        Created::Created | Created::Duplicate(_) => {
            RpcFailure::internal("the task was created; nothing was refused")
        }
    }
}

/// Answers with the task, or waits for a synchronous call's task to settle and answers with its
/// result.
async fn reply(state: Arc<AppState>, mut ctx: RequestCtx, started: Started) -> Result<Reply, RpcFailure> {
    if started.plan.as_task {
        return Ok(Reply::Result(wire::create_result(ctx.wire, &started.record)));
    }
    // A synchronous call may wait minutes: the request's JSON and its memory budget go now.
    ctx.params = Value::Null;
    ctx.budget = None;
    let mode = ReplyMode::of(ctx.accepts_sse, started.progress_token.is_some());
    let reply = rounds::follow_call(
        state,
        ctx.wire,
        ctx.id.clone(),
        ctx.caller.clone(),
        started.record,
        started.waiter,
        started.progress_token,
        mode,
        started.cancel_when_gone,
        rounds::Overdue::Task { client_tasks: started.plan.client_tasks },
        ctx.reply_budget.clone(),
    )
    .await;
    match started.held {
        Some(held) => super::holding(reply, held),
        None => reply,
    }
}

/// `found` if it is a tool `caller` may call; a tool the policy does not grant is audited under
/// `denial`, and answers like an unknown one, so that its existence is not confirmed.
fn granted_tool(
    state: &AppState,
    caller: &Caller,
    found: Option<&Arc<CatalogTool>>,
    denial: &str,
) -> Option<Arc<CatalogTool>> {
    let tool = found.filter(|tool| tool.kind.is_tool())?;
    if state.access.may_call(caller, &tool.name) {
        return Some(tool.clone());
    }
    super::audit_denied(caller, "tools/call", &tool.name, denial);
    None
}

/// The retry hint of an overloaded call.
const RETRY_AFTER_MS: u64 = 1_000;

fn over_limit(hit: &LimitHit) -> RpcFailure {
    if hit.limit == "stored_bytes_per_principal" {
        return over_stored_bytes(hit);
    }
    let what = match (hit.limit.as_str(), &hit.tool) {
        ("queued_nodes_per_tool", Some(tool)) => format!("{} queued nodes of tool `{tool}`", hit.max),
        ("live_tasks_per_principal", _) => format!("{} unfinished tasks per principal", hit.max),
        ("nodes_per_principal", _) => format!("{} nodes of unfinished tasks per principal", hit.max),
        _ => format!("{} queued nodes", hit.max),
    };
    let this_call = if hit.needed > 1 { format!("; this call needs {}", hit.needed) } else { String::new() };
    RpcFailure::new(
        codes::OVERLOADED,
        format!(
            "Overloaded: the limit of {what} is reached ({} now{this_call}); nothing was started. Retry in about {} s.",
            hit.current,
            RETRY_AFTER_MS / 1000
        ),
        Some(json!({
            "limit": hit.limit, "current": hit.current, "max": hit.max, "needed": hit.needed, "tool": hit.tool,
            "retryAfterMs": RETRY_AFTER_MS
        })),
    )
}

/// A call of a principal that keeps as many bytes in Redis as it may: it waits for its oldest
/// tasks to run out of TTL (or stores less).
fn over_stored_bytes(hit: &LimitHit) -> RpcFailure {
    let when = match hit.frees_in_ms {
        Some(ms) => format!("The oldest of your tasks gives its bytes back in about {} s", ms.div_ceil(1000)),
        None => "Your running tasks give their bytes back when their TTL runs out".to_owned(),
    };
    RpcFailure::new(
        codes::OVERLOADED,
        format!(
            "Overloaded: you keep {} bytes in Redis of a budget of {} (stored_bytes_per_principal), and what your calls store no longer fits in it (this one brings {}); nothing was started. {when}; shorter TTLs keep less.",
            hit.current, hit.max, hit.needed
        ),
        Some(json!({
            "limit": hit.limit, "current": hit.current, "max": hit.max, "needed": hit.needed,
            "freesInMs": hit.frees_in_ms, "retryAfterMs": hit.frees_in_ms.unwrap_or(RETRY_AFTER_MS).max(RETRY_AFTER_MS)
        })),
    )
}

/// A task whose arguments alone pass the byte budget of a task.
fn over_budget(size: u64, max: u64) -> RpcFailure {
    RpcFailure::invalid_params(format!(
        "Invalid params: the task's arguments take {size} bytes as stored; a task may store at most {max} (max_task_bytes)"
    ))
    .with_data(json!({"limit": "max_task_bytes", "max": max, "size": size}))
}

/// A `run_dag` graph, checked before anything is written: its shape and limits, every node's tool,
/// the roots every node names, and the arguments of every node that takes nothing from upstream
/// against its tool's schema.
async fn checked_graph(
    state: &AppState,
    caller: &Caller,
    roots: &Grants,
    arguments: &Value,
) -> Result<DagSpec, RpcFailure> {
    let graph = DagSpec::deserialize(arguments)
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
        let found = state.catalog.get(name).await?;
        let tool = granted_tool(
            state,
            caller,
            found.as_ref(),
            "a run_dag node calls a tool the access policy does not grant",
        )
        .filter(|tool| roots.offers(caller, &tool.name, &tool.definition))
        .ok_or_else(|| {
            RpcFailure::invalid_params(format!(
                "Invalid run_dag graph: node `{}` calls unknown tool `{name}`",
                node.id
            ))
        })?;
        roots.check_call(
            caller,
            name,
            &tool.definition,
            &node.arguments,
            &format!("Invalid run_dag graph: node `{}`: invalid arguments for tool `{name}`", node.id),
        )?;
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

/// Refuses arguments larger than `max_argument_bytes` (measured as compact JSON), naming the limit.
fn check_argument_size(state: &AppState, arguments: &Value) -> Result<(), RpcFailure> {
    let max = state.config.max_argument_bytes;
    let size = conveyor_shared::json_limits::compact_size(arguments);
    if size <= max {
        return Ok(());
    }
    Err(RpcFailure::invalid_params(format!(
        "Invalid params: the arguments are {size} bytes of JSON; the limit is {max} (max_argument_bytes)"
    ))
    .with_data(json!({"limit": "max_argument_bytes", "max": max, "size": size})))
}

/// What a synchronous `tools/call` returns once its task settles.
pub(super) fn sync_outcome(task: &TaskRecord) -> Result<Value, RpcFailure> {
    match (task.status, &task.result, &task.error) {
        (TaskStatus::Completed | TaskStatus::Failed, Some(result), _) => Ok(result.clone()),
        (TaskStatus::Failed, None, _) => Err(failure_of(&task_error(task))),
        // Only the client cancels a call (or a gateway for a client that went away): it is told
        // so, in case the response still reaches it.
        (TaskStatus::Cancelled, _, _) => Err(RpcFailure::new(
            codes::REQUEST_CANCELLED,
            task.status_message.clone().unwrap_or_else(|| "Cancelled".to_owned()),
            None,
        )),
        _ => Err(RpcFailure::internal(format!("the call ended as {}", task.status))),
    }
}

/// The tools of a call that no live worker offers now (the call waits in their queues).
fn idle_tools(tool: &CatalogTool, graph: Option<&DagSpec>, catalog: &[Arc<CatalogTool>]) -> Vec<String> {
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
