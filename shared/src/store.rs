//! [`Store`]: every Redis operation of Conveyor, typed, bounded by a timeout, and atomic where it
//! changes state (each state change is one Lua script from [`crate::scripts`]).

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use deadpool_redis::{Manager, Pool, Runtime};
use redis::AsyncCommands;
use redis::streams::{StreamReadOptions, StreamReadReply};
use serde_json::Value;

use crate::dag::{self, DagSpec};
use crate::error::StoreError;
use crate::events::{EventHub, Subscription};
use crate::keys;
use crate::model::{
    NodeRecord, PublishedTool, RpcError, TaskEvent, TaskMode, TaskRecord, ToolOutcome, WorkItem, now_ms,
};
use crate::scripts;

/// Everything a new task is created with.
#[derive(Debug, Clone)]
pub struct NewTask {
    pub task_id: String,
    pub owner: String,
    pub tool: String,
    pub arguments: Value,
    pub ttl_ms: u64,
    pub poll_interval_ms: u64,
    pub wire: String,
    pub progress_token: Option<Value>,
    pub traceparent: Option<String>,
    pub mode: TaskMode,
    pub status_message: String,
    pub created_at_ms: u64,
    /// The graph of a DAG task; `None` for a single tool call (one node, `root`).
    pub graph: Option<DagSpec>,
    /// The client's idempotency key: a retried call with the same key returns the same task.
    pub idempotency_key: Option<String>,
}

/// What `create_task` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Created {
    Created,
    /// The id is taken (nothing written).
    IdTaken,
    /// The idempotency key names this earlier task of the same call (nothing written).
    Duplicate(String),
    /// The idempotency key names this earlier task of a different call (nothing written).
    Conflict(String),
    /// An overload limit would be exceeded (nothing written).
    OverLimit(LimitHit),
}

/// Which overload limit a call hit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitHit {
    /// `queued_nodes`, `queued_nodes_per_tool` or `live_tasks_per_principal`.
    pub limit: String,
    pub current: u64,
    pub max: u64,
    /// The tool, for the per-tool limit.
    pub tool: Option<String>,
}

/// Overload limits a new task is checked against; 0 means no limit.
#[derive(Debug, Clone, Copy, Default)]
pub struct Limits {
    pub max_queued: u64,
    pub max_queued_per_tool: u64,
    pub max_live_per_principal: u64,
}

impl NewTask {
    /// The task as it stands right after creation, without reading it back.
    pub fn record(&self) -> TaskRecord {
        TaskRecord {
            task_id: self.task_id.clone(),
            status: crate::model::TaskStatus::Working,
            status_message: Some(self.status_message.clone()),
            created_at_ms: self.created_at_ms,
            updated_at_ms: self.created_at_ms,
            ttl_ms: self.ttl_ms,
            poll_interval_ms: self.poll_interval_ms,
            owner: self.owner.clone(),
            tool: self.tool.clone(),
            arguments: self.arguments.clone(),
            wire: self.wire.clone(),
            progress_token: self.progress_token.clone(),
            traceparent: self.traceparent.clone(),
            progress: None,
            total: None,
            result: None,
            error: None,
            input_requests: None,
            output_node: None,
        }
    }
}

/// How `tasks/update` found the task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnswerOutcome {
    /// Answers were recorded; this many requests are still pending.
    Answered { remaining: u32 },
    /// The task waits for no input (it has this status); nothing changed.
    NotWaiting(String),
    /// No such task for this owner.
    Missing,
}

/// How `tasks/cancel` found the task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelOutcome {
    /// This call moved the task to `cancelled`.
    Cancelled,
    /// The task was already terminal with this status; nothing changed.
    AlreadyTerminal(String),
    /// No such task for this owner.
    Missing,
}

/// What a worker must do with a work item it read.
#[derive(Debug, Clone, PartialEq)]
pub enum StartOutcome {
    Run {
        attempt: u32,
        /// The tool to call, or `$noop` / `$collect` for a built-in node.
        tool: String,
        arguments: Value,
        progress_token: Option<Value>,
        /// Limit of this attempt.
        timeout: Option<std::time::Duration>,
        /// How often this node's worker was lost while running it.
        losses: u32,
    },
    /// Acknowledge the entry without running it, for the given reason.
    Skip(String),
}

/// How a completion was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompleteOutcome {
    /// The task settled with this node's outcome (or, in a DAG, by this node's failure).
    Settled,
    /// The attempt failed and runs again after this delay.
    Retry { delay_ms: u64 },
    /// A DAG node settled; this many dependents were queued.
    Released(u32),
    /// The last node of a DAG settled; a finalize entry was queued.
    Finalize,
    /// The node was recorded, but the task had already ended (cancelled); the output is dropped.
    TaskAlreadyTerminal,
    /// The attempt was stale (the node was retried or settled meanwhile); nothing was written.
    Stale,
}

/// One entry of the dead-letter stream.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeadLetter {
    pub id: String,
    pub task_id: String,
    pub node_id: String,
    pub tool: String,
    pub arguments: Value,
    pub owner: String,
    pub attempts: u32,
    pub error: Value,
    pub at_ms: u64,
}

/// How a planned graph was taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExpandOutcome {
    /// The graph's nodes joined the task.
    Expanded(u32),
    /// The plan cannot join this task, for the given reason.
    Refused(String),
    TaskAlreadyTerminal,
    Stale,
}

/// A page of tasks and the cursor of the next one.
#[derive(Debug, Clone)]
pub struct TaskPage {
    pub tasks: Vec<TaskRecord>,
    pub next_cursor: Option<String>,
}

/// The node of a single tool call, in the shape `create_task.lua` reads.
fn single_node(tool: &str, arguments: &Value) -> Value {
    serde_json::json!({
        "id": crate::model::ROOT_NODE, "tool": tool, "args": arguments.to_string(), "deps": 0,
        "dependents": [], "retries": 0, "backoffMs": dag::DEFAULT_BACKOFF_MS, "timeoutMs": 0,
        "onFailure": "fail", "weight": 1.0,
    })
}

/// A graph's nodes in the shape `create_task.lua` reads. Arguments travel as JSON strings so that
/// Lua's JSON codec never rewrites them (it cannot tell `[]` from `{}`).
fn graph_nodes(graph: &DagSpec) -> Vec<Value> {
    let dependents = graph.dependents();
    graph
        .nodes
        .iter()
        .map(|n| {
            let tool = match (&n.tool, n.kind) {
                (Some(tool), _) => tool.clone(),
                (None, Some(kind)) => format!("${}", kind.as_str()),
                (None, None) => String::new(),
            };
            // A collect node takes every upstream output, by node id.
            let arguments = if n.kind == Some(dag::BuiltinKind::Collect) {
                let from: serde_json::Map<String, Value> =
                    n.depends_on.iter().map(|d| (d.clone(), serde_json::json!({"$from": d}))).collect();
                serde_json::json!({"nodes": from})
            } else {
                n.arguments.clone()
            };
            serde_json::json!({
                "id": n.id,
                "tool": tool,
                "args": arguments.to_string(),
                "deps": n.depends_on.len(),
                "dependents": dependents.get(n.id.as_str()).cloned().unwrap_or_default(),
                "retries": n.retries,
                "backoffMs": n.backoff_ms.unwrap_or(dag::DEFAULT_BACKOFF_MS),
                "timeoutMs": n.timeout_ms.unwrap_or(0),
                "onFailure": n.on_failure.as_str(),
                "weight": n.weight.unwrap_or(1.0),
            })
        })
        .collect()
}

/// An idempotency key outlives its task's TTL by this much, so that a retry of a long-running call
/// still finds its task.
const IDEMPOTENCY_SLACK_MS: u64 = 24 * 60 * 60 * 1000;

/// The start of every attempt-fenced node script: KEYS task and nodes hashes; ARGV node id,
/// attempt, now. The script's own arguments follow.
fn fenced(
    script: &'static redis::Script,
    task_id: &str,
    node_id: &str,
    attempt: u32,
) -> redis::ScriptInvocation<'static> {
    let mut invocation = script.prepare_invoke();
    invocation.key(keys::task(task_id)).key(keys::nodes(task_id)).arg(node_id).arg(attempt).arg(now_ms());
    invocation
}

/// Conveyor's view of Redis. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    pool: Pool,
    client: redis::Client,
    events: EventHub,
    timeout: Duration,
}

impl Store {
    /// Builds a store for `url`. Connections are made on first use, so this succeeds while Redis
    /// is down; every operation then fails within `timeout` until it is back.
    pub fn new(url: &str, timeout: Duration) -> Result<Self, StoreError> {
        let connection = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout));
        let manager = Manager::new_with_config(url, connection)
            .map_err(|e| StoreError::InvalidUrl(format!("{url:?} ({e})")))?;
        let pool = Pool::builder(manager)
            .max_size(64)
            .wait_timeout(Some(timeout))
            .create_timeout(Some(timeout))
            .recycle_timeout(Some(timeout))
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        let client =
            redis::Client::open(url).map_err(|e| StoreError::InvalidUrl(format!("{url:?} ({e})")))?;
        let events = EventHub::new(client.clone(), timeout);
        Ok(Self { pool, client, events, timeout })
    }

    /// Runs one operation on a pooled connection, failing after the store's timeout.
    async fn with_conn<T, F, Fut>(&self, op: F) -> Result<T, StoreError>
    where
        F: FnOnce(deadpool_redis::Connection) -> Fut,
        Fut: Future<Output = Result<T, redis::RedisError>>,
    {
        let work = async {
            let conn = self.pool.get().await?;
            op(conn).await.map_err(StoreError::from)
        };
        tokio::time::timeout(self.timeout, work).await.map_err(|_| StoreError::Timeout(self.timeout))?
    }

    /// Runs a script invocation on a pooled connection.
    async fn invoke<T: redis::FromRedisValue + Send>(
        &self,
        invocation: redis::ScriptInvocation<'static>,
    ) -> Result<T, StoreError> {
        self.with_conn(|mut c| async move { invocation.invoke_async(&mut c).await }).await
    }

    /// Whether Redis answers.
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.with_conn(|mut c| async move { redis::cmd("PING").query_async::<()>(&mut c).await }).await
    }

    /// Writes a task and its node and enqueues the node, in one script. Returns `false` when the
    /// id is already taken (nothing written).
    pub async fn create_task(
        &self,
        new: &NewTask,
        owner_index_retention_ms: u64,
        limits: &Limits,
    ) -> Result<Created, StoreError> {
        let id = &new.task_id;
        let idempotency_key =
            new.idempotency_key.as_deref().map(|k| keys::idempotency(&new.owner, k)).unwrap_or_default();
        let (kind, output, nodes) = match &new.graph {
            None => ("single", String::new(), vec![single_node(&new.tool, &new.arguments)]),
            Some(graph) => ("dag", graph.output.clone().unwrap_or_default(), graph_nodes(graph)),
        };
        let mut invocation = scripts::CREATE_TASK.prepare_invoke();
        invocation
            .key(keys::task(id))
            .key(keys::nodes(id))
            .key(keys::owner_tasks(&new.owner))
            .key(keys::WORK_STREAM)
            .key(idempotency_key)
            .key(keys::LOAD)
            .arg(id)
            .arg(new.created_at_ms)
            .arg(&new.owner)
            .arg(&new.tool)
            .arg(new.arguments.to_string())
            .arg(new.ttl_ms)
            .arg(new.poll_interval_ms)
            .arg(&new.wire)
            .arg(new.progress_token.as_ref().map(Value::to_string).unwrap_or_default())
            .arg(new.traceparent.clone().unwrap_or_default())
            .arg(new.mode.as_str())
            .arg(if new.mode == TaskMode::Task { "1" } else { "0" })
            .arg(&new.status_message)
            .arg(owner_index_retention_ms)
            .arg(kind)
            .arg(output)
            .arg(Value::Array(nodes).to_string())
            .arg(format!("{} {}", new.tool, new.arguments))
            .arg(new.ttl_ms.saturating_add(IDEMPOTENCY_SLACK_MS))
            .arg(limits.max_queued)
            .arg(limits.max_queued_per_tool)
            .arg(limits.max_live_per_principal);
        let reply: Vec<String> = self.invoke(invocation).await?;
        Ok(match (reply.first().map(String::as_str), reply.get(1)) {
            (Some("created"), _) => Created::Created,
            (Some("duplicate"), Some(id)) => Created::Duplicate(id.clone()),
            (Some("conflict"), Some(id)) => Created::Conflict(id.clone()),
            (Some("limit"), Some(limit)) => Created::OverLimit(LimitHit {
                limit: limit.clone(),
                current: reply.get(2).and_then(|v| v.parse().ok()).unwrap_or(0),
                max: reply.get(3).and_then(|v| v.parse().ok()).unwrap_or(0),
                tool: reply.get(4).filter(|t| !t.is_empty()).cloned(),
            }),
            _ => Created::IdTaken,
        })
    }

    /// Reads a task; `None` when it does not exist (never created, or expired).
    pub async fn get_task(&self, task_id: &str) -> Result<Option<TaskRecord>, StoreError> {
        let key = keys::task(task_id);
        let hash: HashMap<String, String> =
            self.with_conn(|mut c| async move { c.hgetall(key).await }).await?;
        TaskRecord::from_hash(task_id, hash).map_err(StoreError::Corrupt)
    }

    /// Reads a task's nodes, ordered by node id.
    pub async fn get_nodes(&self, task_id: &str) -> Result<Vec<NodeRecord>, StoreError> {
        let key = keys::nodes(task_id);
        let hash: HashMap<String, String> =
            self.with_conn(|mut c| async move { c.hgetall(key).await }).await?;
        Ok(NodeRecord::from_hash(hash))
    }

    /// One page of an owner's tasks, oldest first. The cursor is opaque to clients; an invalid one
    /// is an error, not an empty page. Pages continue after the cursor's entry by rank, so tasks
    /// created in the same millisecond are neither skipped nor repeated.
    pub async fn list_tasks(
        &self,
        owner: &str,
        cursor: Option<&str>,
        page_size: usize,
    ) -> Result<Result<TaskPage, String>, StoreError> {
        let after = match cursor {
            None => None,
            Some(c) => match decode_cursor(c) {
                Some(pos) => Some(pos),
                None => {
                    return Ok(Err(format!("invalid cursor {c:?}: pass back a nextCursor from tasks/list")));
                }
            },
        };
        let index = keys::owner_tasks(owner);
        let start: isize = match &after {
            None => 0,
            Some((score, id)) => {
                let (key, id, score) = (index.clone(), id.clone(), *score);
                self.with_conn(|mut c| async move {
                    match c.zrank::<_, _, Option<isize>>(&key, &id).await? {
                        Some(rank) => Ok(rank + 1),
                        // The cursor's task was trimmed from the index: go on after its time.
                        None => c.zcount::<_, _, _, isize>(&key, "-inf", score).await,
                    }
                })
                .await?
            }
        };
        // One more than a page tells whether another page follows.
        let (key, stop) = (index.clone(), start + page_size as isize);
        let entries: Vec<(String, u64)> =
            self.with_conn(|mut c| async move { c.zrange_withscores(&key, start, stop).await }).await?;
        let more = entries.len() > page_size;
        let page: Vec<(String, u64)> = entries.into_iter().take(page_size).collect();
        let next_cursor = if more { page.last().map(|(id, score)| encode_cursor(*score, id)) } else { None };
        let ids: Vec<String> = page.into_iter().map(|(id, _)| id).collect();
        let mut pipe = redis::pipe();
        for id in &ids {
            pipe.hgetall(keys::task(id));
        }
        let hashes: Vec<HashMap<String, String>> = if ids.is_empty() {
            Vec::new()
        } else {
            self.with_conn(|mut c| async move { pipe.query_async(&mut c).await }).await?
        };
        let mut tasks = Vec::with_capacity(ids.len());
        let mut expired = Vec::new();
        for (id, hash) in ids.into_iter().zip(hashes) {
            match TaskRecord::from_hash(&id, hash).map_err(StoreError::Corrupt)? {
                Some(task) if task.owner == owner => tasks.push(task),
                _ => expired.push(id),
            }
        }
        if !expired.is_empty() {
            self.with_conn(|mut c| async move { c.zrem::<_, _, ()>(index, expired).await }).await?;
        }
        Ok(Ok(TaskPage { tasks, next_cursor }))
    }

    /// Cancels a live task (one script) and tells every worker. `owner` empty skips the owner check.
    pub async fn cancel_task(
        &self,
        task_id: &str,
        owner: &str,
        message: &str,
    ) -> Result<CancelOutcome, StoreError> {
        let mut invocation = scripts::CANCEL_TASK.prepare_invoke();
        invocation
            .key(keys::task(task_id))
            .key(keys::nodes(task_id))
            .key(keys::LOAD)
            .key(keys::EXPIRING)
            .arg(task_id)
            .arg(now_ms())
            .arg(owner)
            .arg(message)
            .arg(keys::events(task_id))
            .arg(keys::CANCEL_CHANNEL);
        let reply: Vec<String> = self.invoke(invocation).await?;
        Ok(match reply.first().map(String::as_str) {
            Some("cancelled") => CancelOutcome::Cancelled,
            Some("terminal") => CancelOutcome::AlreadyTerminal(reply.get(1).cloned().unwrap_or_default()),
            _ => CancelOutcome::Missing,
        })
    }

    /// Starts the next attempt of a queued node, if its task is still live.
    pub async fn start_node(
        &self,
        task_id: &str,
        node_id: &str,
        worker: &str,
    ) -> Result<StartOutcome, StoreError> {
        self.start_attempt(task_id, node_id, worker, false).await
    }

    /// Starts the next attempt of a node; with `reclaiming`, also one still marked running by a
    /// worker whose lease ran out (the new attempt number fences that worker).
    pub async fn start_attempt(
        &self,
        task_id: &str,
        node_id: &str,
        worker: &str,
        reclaiming: bool,
    ) -> Result<StartOutcome, StoreError> {
        let mut invocation = scripts::START_NODE.prepare_invoke();
        invocation
            .key(keys::task(task_id))
            .key(keys::nodes(task_id))
            .key(keys::LOAD)
            .arg(node_id)
            .arg(now_ms())
            .arg(worker)
            .arg(if reclaiming { "1" } else { "0" });
        let reply: Vec<redis::Value> = self.invoke(invocation).await?;
        let text = |i: usize| -> String {
            reply.get(i).and_then(|v| redis::from_redis_value_ref::<String>(v).ok()).unwrap_or_default()
        };
        if text(0) != "run" {
            return Ok(StartOutcome::Skip(text(1)));
        }
        let attempt = text(1).parse::<u32>().map_err(|e| StoreError::Corrupt(format!("attempt: {e}")))?;
        let arguments = serde_json::from_str(&text(3))
            .map_err(|e| StoreError::Corrupt(format!("node arguments: {e}")))?;
        let token = text(4);
        let progress_token = if token.is_empty() {
            None
        } else {
            Some(
                serde_json::from_str(&token)
                    .map_err(|e| StoreError::Corrupt(format!("progress token: {e}")))?,
            )
        };
        let timeout = text(5).parse::<u64>().ok().filter(|ms| *ms > 0).map(std::time::Duration::from_millis);
        let losses = reply.get(6).and_then(|v| redis::from_redis_value_ref::<u32>(v).ok()).unwrap_or(0);
        Ok(StartOutcome::Run { attempt, tool: text(2), arguments, progress_token, timeout, losses })
    }

    /// Records progress of a running attempt. Returns `false` when refused (stale or not live).
    pub async fn report_progress(
        &self,
        task_id: &str,
        node_id: &str,
        attempt: u32,
        progress: f64,
        total: Option<f64>,
        message: Option<&str>,
    ) -> Result<bool, StoreError> {
        let mut invocation = fenced(&scripts::REPORT_PROGRESS, task_id, node_id, attempt);
        invocation
            .arg(progress)
            .arg(total.map(|t| t.to_string()).unwrap_or_default())
            .arg(message.unwrap_or_default())
            .arg(keys::events(task_id));
        Ok(self.invoke::<i64>(invocation).await? == 1)
    }

    /// Settles an attempt with the tool's outcome, or as cancelled when `outcome` is `None`.
    pub async fn complete_node(
        &self,
        task_id: &str,
        node_id: &str,
        attempt: u32,
        outcome: Option<&ToolOutcome>,
    ) -> Result<CompleteOutcome, StoreError> {
        self.complete_attempt(task_id, node_id, attempt, outcome, false).await
    }

    /// Like [`Store::complete_node`]; with `final_failure` a failure is not retried whatever
    /// retries are left (a node that lost its worker too often).
    pub async fn complete_attempt(
        &self,
        task_id: &str,
        node_id: &str,
        attempt: u32,
        outcome: Option<&ToolOutcome>,
        final_failure: bool,
    ) -> Result<CompleteOutcome, StoreError> {
        let (status, payload, is_error, message) = match outcome {
            Some(ToolOutcome::Result(result)) => {
                let is_error = crate::model::result::is_error(result);
                ("completed", result.to_string(), is_error, completion_message(is_error))
            }
            Some(ToolOutcome::Error(error)) => (
                "failed",
                serde_json::to_string(error).map_err(|e| StoreError::Corrupt(e.to_string()))?,
                false,
                format!("Failed: {}", error.message),
            ),
            None => ("cancelled", "null".to_owned(), false, "Cancelled".to_owned()),
            Some(ToolOutcome::Plan(_)) => {
                return Err(StoreError::Corrupt(
                    "a plan is expanded with expand_plan, not completed".to_owned(),
                ));
            }
        };
        let mut invocation = fenced(&scripts::COMPLETE_NODE, task_id, node_id, attempt);
        invocation
            .key(keys::WORK_STREAM)
            .key(keys::DELAYED_RETRIES)
            .key(keys::DEAD_LETTERS)
            .key(keys::LOAD)
            .key(keys::EXPIRING)
            .arg(status)
            .arg(payload)
            .arg(if is_error { "1" } else { "0" })
            .arg(message)
            .arg(keys::events(task_id))
            .arg(keys::CANCEL_CHANNEL)
            .arg(task_id)
            .arg(rand::random::<f64>())
            .arg(dag::MAX_BACKOFF_MS)
            .arg(if final_failure { "1" } else { "0" });
        let reply: Vec<redis::Value> = self.invoke(invocation).await?;
        let text = |i: usize| -> String {
            reply.get(i).and_then(|v| redis::from_redis_value_ref::<String>(v).ok()).unwrap_or_default()
        };
        Ok(match text(0).as_str() {
            "retry" => CompleteOutcome::Retry { delay_ms: text(1).parse().unwrap_or(0) },
            "released" => CompleteOutcome::Released(text(1).parse().unwrap_or(0)),
            "finalize" => CompleteOutcome::Finalize,
            "settled" => CompleteOutcome::Settled,
            "dropped" => CompleteOutcome::TaskAlreadyTerminal,
            _ => CompleteOutcome::Stale,
        })
    }

    /// Completes a planning node and adds its planned graph to the task (one script). The plan
    /// must have been validated.
    pub async fn expand_plan(
        &self,
        task_id: &str,
        node_id: &str,
        attempt: u32,
        plan: &DagSpec,
    ) -> Result<ExpandOutcome, StoreError> {
        let summary = crate::model::result::text(format!("planned {} nodes", plan.nodes.len()));
        let mut invocation = fenced(&scripts::EXPAND_PLAN, task_id, node_id, attempt);
        invocation
            .key(keys::WORK_STREAM)
            .key(keys::LOAD)
            .arg(summary.to_string())
            .arg(plan.output.clone().unwrap_or_default())
            .arg(Value::Array(graph_nodes(plan)).to_string())
            .arg(task_id)
            .arg(keys::events(task_id));
        let reply: Vec<redis::Value> = self.invoke(invocation).await?;
        let text = |i: usize| -> String {
            reply.get(i).and_then(|v| redis::from_redis_value_ref::<String>(v).ok()).unwrap_or_default()
        };
        Ok(match text(0).as_str() {
            "expanded" => ExpandOutcome::Expanded(text(1).parse().unwrap_or(0)),
            "refused" => ExpandOutcome::Refused(text(1)),
            "dropped" => ExpandOutcome::TaskAlreadyTerminal,
            _ => ExpandOutcome::Stale,
        })
    }

    /// Queues failed attempts whose backoff has passed; returns how many.
    pub async fn promote_retries(&self, most: usize) -> Result<u64, StoreError> {
        let mut invocation = scripts::PROMOTE_RETRIES.prepare_invoke();
        invocation
            .key(keys::DELAYED_RETRIES)
            .key(keys::WORK_STREAM)
            .key(keys::LOAD)
            .arg(now_ms())
            .arg(most)
            .arg(keys::TASK_KEY_PREFIX)
            .arg(keys::TASK_SUFFIX)
            .arg(keys::NODES_SUFFIX);
        self.invoke(invocation).await
    }

    /// Drops work-stream entries that are neither pending nor undelivered; returns how many.
    pub async fn trim_work(&self) -> Result<u64, StoreError> {
        let mut invocation = scripts::TRIM_WORK.prepare_invoke();
        invocation.key(keys::WORK_STREAM).arg(keys::WORK_GROUP);
        self.invoke(invocation).await
    }

    /// Removes the owner-index entries of tasks whose keys have expired; returns how many.
    pub async fn reap_expired(&self, most: usize) -> Result<u64, StoreError> {
        let mut invocation = scripts::REAP_EXPIRED.prepare_invoke();
        invocation
            .key(keys::EXPIRING)
            .arg(now_ms())
            .arg(most)
            .arg(keys::OWNER_PREFIX)
            .arg(keys::OWNER_SUFFIX);
        self.invoke(invocation).await
    }

    /// Completes a DAG task with its assembled result, unless it already ended.
    pub async fn settle_dag(&self, task_id: &str, result: &Value, message: &str) -> Result<bool, StoreError> {
        let mut invocation = scripts::SETTLE_DAG.prepare_invoke();
        invocation
            .key(keys::task(task_id))
            .key(keys::nodes(task_id))
            .key(keys::LOAD)
            .key(keys::EXPIRING)
            .arg(now_ms())
            .arg(result.to_string())
            .arg(message)
            .arg(keys::events(task_id))
            .arg(if crate::model::result::is_error(result) { "1" } else { "0" })
            .arg(task_id);
        Ok(self.invoke::<i64>(invocation).await? == 1)
    }

    /// The stored outputs of some nodes of a task, by node id (nodes without one are left out).
    pub async fn node_outputs(
        &self,
        task_id: &str,
        node_ids: &[String],
    ) -> Result<HashMap<String, Value>, StoreError> {
        if node_ids.is_empty() {
            return Ok(HashMap::new());
        }
        let key = keys::nodes(task_id);
        let fields: Vec<String> = node_ids.iter().map(|n| format!("{n}:output")).collect();
        let values: Vec<Option<String>> = self
            .with_conn(
                |mut c| async move { redis::cmd("HMGET").arg(key).arg(fields).query_async(&mut c).await },
            )
            .await?;
        Ok(node_ids
            .iter()
            .zip(values)
            .filter_map(|(id, v)| Some((id.clone(), serde_json::from_str(&v?).ok()?)))
            .collect())
    }

    /// Moves a running node's task to `input_required` with these requests. Returns `false` when
    /// refused (task not working, or a stale attempt).
    pub async fn request_input(
        &self,
        task_id: &str,
        node_id: &str,
        attempt: u32,
        requests: &Value,
        message: &str,
    ) -> Result<bool, StoreError> {
        let mut invocation = fenced(&scripts::REQUEST_INPUT, task_id, node_id, attempt);
        invocation.arg(requests.to_string()).arg(message).arg(keys::events(task_id));
        Ok(self.invoke::<i64>(invocation).await? == 1)
    }

    /// Records a client's answers to a task's pending input requests (one script).
    pub async fn answer_input(
        &self,
        task_id: &str,
        owner: &str,
        responses: &Value,
    ) -> Result<AnswerOutcome, StoreError> {
        let mut invocation = scripts::ANSWER_INPUT.prepare_invoke();
        invocation
            .key(keys::task(task_id))
            .arg(responses.to_string())
            .arg(now_ms())
            .arg(owner)
            .arg(keys::events(task_id));
        let reply: Vec<String> = self.invoke(invocation).await?;
        Ok(match reply.first().map(String::as_str) {
            Some("answered") => {
                AnswerOutcome::Answered { remaining: reply.get(1).and_then(|r| r.parse().ok()).unwrap_or(0) }
            }
            Some("not_waiting") => AnswerOutcome::NotWaiting(reply.get(1).cloned().unwrap_or_default()),
            _ => AnswerOutcome::Missing,
        })
    }

    /// The answers a task has received to its input requests (JSON object).
    pub async fn input_responses(&self, task_id: &str) -> Result<Value, StoreError> {
        let key = keys::task(task_id);
        let raw: Option<String> =
            self.with_conn(|mut c| async move { c.hget(key, "inputResponses").await }).await?;
        Ok(raw.and_then(|r| serde_json::from_str(&r).ok()).unwrap_or_else(|| serde_json::json!({})))
    }

    /// Hands a running node back to the queue (a new stream entry) and acknowledges its old entry.
    /// Returns `false` when the attempt is stale and nothing changed.
    pub async fn release_node(&self, item: &WorkItem, attempt: u32) -> Result<bool, StoreError> {
        let mut invocation = scripts::RELEASE_NODE.prepare_invoke();
        invocation
            .key(keys::task(&item.task_id))
            .key(keys::nodes(&item.task_id))
            .key(keys::WORK_STREAM)
            .key(keys::LOAD)
            .arg(&item.node_id)
            .arg(attempt)
            .arg(&item.entry_id)
            .arg(&item.task_id)
            .arg(keys::WORK_GROUP)
            .arg(item.traceparent.clone().unwrap_or_default());
        let taken: i64 = self.invoke(invocation).await?;
        Ok(taken == 1)
    }

    /// Puts a read but unstarted entry back on the stream for another worker (a new entry, and
    /// the old one acknowledged, in one transaction).
    pub async fn requeue(&self, item: &WorkItem) -> Result<(), StoreError> {
        let mut pipe = redis::pipe();
        pipe.atomic()
            .xadd(
                keys::WORK_STREAM,
                "*",
                &[
                    ("task", item.task_id.as_str()),
                    ("node", item.node_id.as_str()),
                    ("traceparent", item.traceparent.as_deref().unwrap_or_default()),
                ],
            )
            .ignore()
            .xack(keys::WORK_STREAM, keys::WORK_GROUP, &[&item.entry_id])
            .ignore();
        self.with_conn(|mut c| async move { pipe.query_async::<()>(&mut c).await }).await
    }

    /// Creates the workers' consumer group (and the stream) if they do not exist yet.
    pub async fn ensure_work_group(&self) -> Result<(), StoreError> {
        let result = self
            .with_conn(|mut c| async move {
                c.xgroup_create_mkstream::<_, _, _, ()>(keys::WORK_STREAM, keys::WORK_GROUP, "0").await
            })
            .await;
        match result {
            Err(StoreError::Unavailable(e)) if e.contains("BUSYGROUP") => Ok(()),
            other => other,
        }
    }

    /// Opens a connection for blocking stream reads: it must not share the pool's response timeout.
    pub async fn blocking_connection(&self) -> Result<redis::aio::MultiplexedConnection, StoreError> {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(None);
        let connect = self.client.get_multiplexed_async_connection_with_config(&config);
        tokio::time::timeout(self.timeout, connect)
            .await
            .map_err(|_| StoreError::Timeout(self.timeout))?
            .map_err(Into::into)
    }

    /// Reads up to `count` new work items for `consumer`, blocking up to `block` for the first.
    pub async fn read_work(
        conn: &mut redis::aio::MultiplexedConnection,
        consumer: &str,
        count: usize,
        block: Duration,
    ) -> Result<Vec<WorkItem>, StoreError> {
        let options = StreamReadOptions::default()
            .group(keys::WORK_GROUP, consumer)
            .count(count)
            .block(block.as_millis() as usize);
        // The read blocks server-side for `block`; give the reply a margin beyond that.
        let read =
            conn.xread_options::<_, _, Option<StreamReadReply>>(&[keys::WORK_STREAM], &[">"], &options);
        let reply = tokio::time::timeout(block + Duration::from_secs(5), read)
            .await
            .map_err(|_| StoreError::Timeout(block))??;
        Ok(reply
            .map(|r| r.keys)
            .unwrap_or_default()
            .iter()
            .flat_map(|s| s.ids.iter())
            .map(work_item)
            .collect())
    }

    /// Renews this worker's leases on the entries it runs: their idle time in the group starts
    /// again, so that no other worker claims them.
    pub async fn renew_leases(&self, consumer: &str, entry_ids: &[String]) -> Result<(), StoreError> {
        if entry_ids.is_empty() {
            return Ok(());
        }
        let (consumer, ids) = (consumer.to_owned(), entry_ids.to_vec());
        self.with_conn(|mut c| async move {
            redis::cmd("XCLAIM")
                .arg(keys::WORK_STREAM)
                .arg(keys::WORK_GROUP)
                .arg(&consumer)
                .arg(0)
                .arg(&ids)
                .arg("JUSTID")
                .query_async::<redis::Value>(&mut c)
                .await
                .map(|_| ())
        })
        .await
    }

    /// Takes over up to `count` entries whose worker has not renewed its lease for `lease`.
    pub async fn claim_abandoned(
        &self,
        consumer: &str,
        lease: Duration,
        count: usize,
    ) -> Result<Vec<WorkItem>, StoreError> {
        let consumer = consumer.to_owned();
        let reply: redis::streams::StreamAutoClaimReply = self
            .with_conn(|mut c| async move {
                let options = redis::streams::StreamAutoClaimOptions::default().count(count);
                c.xautoclaim_options(
                    keys::WORK_STREAM,
                    keys::WORK_GROUP,
                    &consumer,
                    lease.as_millis() as u64,
                    "0-0",
                    options,
                )
                .await
            })
            .await?;
        Ok(reply.claimed.iter().map(work_item).collect())
    }

    /// The newest `count` dead letters, newest first.
    pub async fn dead_letters(&self, count: usize) -> Result<Vec<DeadLetter>, StoreError> {
        let entries: redis::streams::StreamRangeReply = self
            .with_conn(|mut c| async move { c.xrevrange_count(keys::DEAD_LETTERS, "+", "-", count).await })
            .await?;
        Ok(entries.ids.iter().map(dead_letter).collect())
    }

    /// One dead letter by its entry id.
    pub async fn dead_letter(&self, id: &str) -> Result<Option<DeadLetter>, StoreError> {
        let id = id.to_owned();
        let entries: redis::streams::StreamRangeReply =
            self.with_conn(|mut c| async move { c.xrange(keys::DEAD_LETTERS, &id, &id).await }).await?;
        Ok(entries.ids.first().map(dead_letter))
    }

    /// Runs a dead-lettered node again as a new task of the same owner (a terminal task never
    /// changes, so its own task stays failed), then removes the dead letter. Upstream values in the
    /// node's arguments are taken from its original task while that still exists. Returns the new
    /// task's id.
    pub async fn retry_dead_letter(
        &self,
        letter: &DeadLetter,
        ttl_ms: u64,
        poll_interval_ms: u64,
    ) -> Result<Result<String, String>, StoreError> {
        let arguments = if dag::upstream_references(&letter.arguments).is_empty() {
            letter.arguments.clone()
        } else {
            let upstream: Vec<String> =
                dag::upstream_references(&letter.arguments).into_iter().map(|(from, _)| from).collect();
            let outputs = self.node_outputs(&letter.task_id, &upstream).await?;
            match dag::resolve_references(&letter.arguments, &outputs) {
                Ok(resolved) => resolved,
                Err(e) => {
                    return Ok(Err(format!(
                        "cannot rebuild the node's arguments: {e} (its task has expired?)"
                    )));
                }
            }
        };
        let original = self.get_task(&letter.task_id).await?;
        let new = NewTask {
            task_id: crate::model::new_task_id(),
            owner: letter.owner.clone(),
            tool: letter.tool.clone(),
            arguments,
            ttl_ms,
            poll_interval_ms,
            wire: original.as_ref().map(|t| t.wire.clone()).unwrap_or_else(|| "2026-07-28".to_owned()),
            progress_token: None,
            traceparent: original.and_then(|t| t.traceparent),
            mode: TaskMode::Task,
            status_message: format!("Queued: retry of dead letter {}", letter.id),
            created_at_ms: now_ms(),
            graph: None,
            idempotency_key: None,
        };
        if self.create_task(&new, ttl_ms.saturating_mul(2), &Limits::default()).await? != Created::Created {
            return Ok(Err("task id collision; run the retry again".to_owned()));
        }
        let id = letter.id.clone();
        self.with_conn(|mut c| async move { c.xdel::<_, _, ()>(keys::DEAD_LETTERS, &[id]).await }).await?;
        Ok(Ok(new.task_id))
    }

    /// Acknowledges a work entry so that it is never delivered again.
    pub async fn ack(&self, entry_id: &str) -> Result<(), StoreError> {
        let id = entry_id.to_owned();
        self.with_conn(|mut c| async move {
            c.xack::<_, _, _, ()>(keys::WORK_STREAM, keys::WORK_GROUP, &[id]).await
        })
        .await
    }

    /// Publishes this worker's tools for gateways to list.
    pub async fn publish_tools(&self, tools: &[PublishedTool]) -> Result<(), StoreError> {
        let entries: Vec<(String, String)> = tools
            .iter()
            .filter_map(|t| {
                let name = t.definition.get("name")?.as_str()?.to_owned();
                Some((name, serde_json::to_string(t).ok()?))
            })
            .collect();
        if entries.is_empty() {
            return Ok(());
        }
        self.with_conn(|mut c| async move { c.hset_multiple::<_, _, _, ()>(keys::TOOLS, &entries).await })
            .await
    }

    /// All tools workers have published, in registration order (then by name).
    pub async fn tools(&self) -> Result<Vec<PublishedTool>, StoreError> {
        let hash: HashMap<String, String> =
            self.with_conn(|mut c| async move { c.hgetall(keys::TOOLS).await }).await?;
        let mut tools: Vec<(String, PublishedTool)> = hash
            .into_iter()
            .filter_map(|(name, json)| match serde_json::from_str(&json) {
                Ok(tool) => Some((name, tool)),
                Err(e) => {
                    tracing::warn!(tool = %name, error = %e, "ignoring a published tool in an unknown shape");
                    None
                }
            })
            .collect();
        tools.sort_by(|a, b| (a.1.position, &a.0).cmp(&(b.1.position, &b.0)));
        Ok(tools.into_iter().map(|(_, t)| t).collect())
    }

    /// Subscribes to a task's events. The subscription is live when this returns, so a caller
    /// that re-reads the task afterwards cannot miss an event that falls in between.
    pub async fn subscribe_task(&self, task_id: &str) -> Result<TaskEvents, StoreError> {
        Ok(TaskEvents(self.events.subscribe(&keys::events(task_id)).await?))
    }

    /// Subscribes to a channel on the process's shared pub/sub connection.
    pub async fn subscribe(&self, channel: &str) -> Result<Subscription, StoreError> {
        self.events.subscribe(channel).await
    }
}

/// A task's events, parsed.
pub struct TaskEvents(Subscription);

impl TaskEvents {
    /// The next event, or `None` once the subscription ended (subscribe again and re-read).
    pub async fn recv(&mut self) -> Option<TaskEvent> {
        loop {
            let payload = self.0.recv().await?;
            match serde_json::from_str::<TaskEvent>(&payload) {
                Ok(event) => return Some(event),
                Err(e) => tracing::warn!(error = %e, "ignoring malformed task event"),
            }
        }
    }
}

fn dead_letter(entry: &redis::streams::StreamId) -> DeadLetter {
    let field = |name: &str| entry.get::<String>(name).unwrap_or_default();
    let json = |name: &str| serde_json::from_str(&field(name)).unwrap_or(Value::Null);
    DeadLetter {
        id: entry.id.clone(),
        task_id: field("task"),
        node_id: field("node"),
        tool: field("tool"),
        arguments: json("arguments"),
        owner: field("owner"),
        attempts: field("attempts").parse().unwrap_or(0),
        error: json("error"),
        at_ms: field("at").parse().unwrap_or(0),
    }
}

/// A stream entry as a work item; an entry without task or node comes back with empty ids, for
/// the worker to acknowledge and drop.
fn work_item(entry: &redis::streams::StreamId) -> WorkItem {
    let field = |name: &str| entry.get::<String>(name).filter(|v| !v.is_empty());
    let (task_id, node_id) = match (field("task"), field("node")) {
        (Some(task), Some(node)) => (task, node),
        _ => {
            tracing::warn!(entry = %entry.id, "work entry without task or node; acknowledging it");
            (String::new(), String::new())
        }
    };
    WorkItem { entry_id: entry.id.clone(), task_id, node_id, traceparent: field("traceparent") }
}

fn completion_message(is_error: bool) -> String {
    if is_error { "Completed: the tool reported an error".to_owned() } else { "Completed".to_owned() }
}

/// A task as JSON for a person or a script (the `conveyor tasks show` output).
pub fn task_summary(task: &TaskRecord, nodes: &[NodeRecord]) -> Value {
    serde_json::json!({
        "taskId": task.task_id,
        "status": task.status,
        "statusMessage": task.status_message,
        "tool": task.tool,
        "owner": task.owner,
        "createdAt": crate::model::iso8601(task.created_at_ms),
        "lastUpdatedAt": crate::model::iso8601(task.updated_at_ms),
        "ttlMs": task.ttl_ms,
        "progress": task.progress,
        "total": task.total,
        "nodes": nodes,
    })
}

/// The error a task failed with, for callers that need one even when none was stored.
pub fn task_error(task: &TaskRecord) -> RpcError {
    task.error.clone().unwrap_or_else(|| RpcError {
        code: -32603,
        message: task.status_message.clone().unwrap_or_else(|| "the task failed".to_owned()),
        data: None,
    })
}

fn encode_cursor(score: u64, id: &str) -> String {
    use std::fmt::Write;
    let raw = format!("{score}:{id}");
    raw.bytes().fold(String::with_capacity(raw.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn decode_cursor(cursor: &str) -> Option<(u64, String)> {
    if !cursor.len().is_multiple_of(2) || cursor.len() > 256 {
        return None;
    }
    let bytes: Option<Vec<u8>> =
        (0..cursor.len()).step_by(2).map(|i| u8::from_str_radix(cursor.get(i..i + 2)?, 16).ok()).collect();
    let raw = String::from_utf8(bytes?).ok()?;
    let (score, id) = raw.split_once(':')?;
    Some((score.parse().ok()?, id.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_reject_garbage() {
        let c = encode_cursor(1_700_000_000_123, "abc");
        assert_eq!(decode_cursor(&c), Some((1_700_000_000_123, "abc".to_owned())));
        assert_eq!(decode_cursor("zz"), None);
        assert_eq!(decode_cursor("abc"), None);
        assert_eq!(decode_cursor(""), None);
    }
}
