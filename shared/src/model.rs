//! The task model as it lives in Redis, in shapes both gateway and worker agree on.
//!
//! The gateway turns these into the MCP wire shapes of the client's protocol revision; the worker
//! never sees MCP types. Field names here are the field names of the Redis hashes.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::call::CallRecord;
pub use crate::call::LogLevel;

/// The node id of a task that runs as a single tool call.
pub const ROOT_NODE: &str = "root";

/// A task's status; the same five values on both MCP revisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    Working,
    InputRequired,
    Completed,
    Failed,
    Cancelled,
}

impl TaskStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Working => "working",
            Self::InputRequired => "input_required",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    /// Terminal statuses never change again.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TaskStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "working" => Self::Working,
            "input_required" => Self::InputRequired,
            "completed" => Self::Completed,
            "failed" => Self::Failed,
            "cancelled" => Self::Cancelled,
            other => return Err(format!("unknown task status {other:?}")),
        })
    }
}

/// Whether a task was asked for by the client (visible in `tasks/*`) or is the gateway's own
/// vehicle for a synchronous `tools/call` (never listed, never shown to the client).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskMode {
    Task,
    Sync,
}

impl TaskMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Task => "task",
            Self::Sync => "sync",
        }
    }

    /// The stored mode; anything but `sync` is a task (records written before modes were stored).
    pub fn parse(s: &str) -> Self {
        if s == "sync" { Self::Sync } else { Self::Task }
    }
}

/// A JSON-RPC error produced by a tool (a protocol-level failure, not `isError: true`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RpcError {
    pub code: i32,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

/// One task as stored in its hash.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskRecord {
    pub task_id: String,
    pub status: TaskStatus,
    pub status_message: Option<String>,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    pub ttl_ms: u64,
    pub owner: String,
    pub tool: String,
    /// What the call carries that no script decides on: its wire, arguments, poll interval,
    /// progress token, client capabilities and log level.
    pub call: CallRecord,
    pub traceparent: Option<String>,
    pub progress: Option<f64>,
    pub total: Option<f64>,
    /// The `CallToolResult` (JSON object) of a completed task.
    pub result: Option<Value>,
    /// The JSON-RPC error of a failed task.
    pub error: Option<RpcError>,
    /// Pending input requests (JSON object) while the task is `input_required`.
    pub input_requests: Option<Value>,
    /// The round of the task's input that asked each pending request, by key: an answer that
    /// names its round is taken only for that round's question.
    pub input_rounds: BTreeMap<String, u64>,
    /// The node whose content is a DAG task's result.
    pub output_node: Option<String>,
    /// A client's task, or the hidden vehicle of a synchronous call.
    pub mode: TaskMode,
}

/// The fields of a task hash that make a [`TaskRecord`] (the hash also holds its nodes).
pub const TASK_FIELDS: [&str; 17] = [
    "status",
    "statusMessage",
    "createdAt",
    "updatedAt",
    "ttlMs",
    "owner",
    "tool",
    "call",
    "traceparent",
    "progress",
    "total",
    "result",
    "error",
    "inputRequests",
    "outputNode",
    "mode",
    "inputRounds",
];

/// The fields of [`TASK_FIELDS`] that a listing reads: a task's status and times, never what it
/// carries (its call, its result, its error, its input requests), which can be megabytes.
pub const TASK_STATUS_FIELDS: [&str; 10] = [
    "status",
    "statusMessage",
    "createdAt",
    "updatedAt",
    "ttlMs",
    "owner",
    "tool",
    "progress",
    "total",
    "mode",
];

/// The fields of [`TASK_FIELDS`] that can be large: a reader counts them against its memory budget
/// before it reads them (`call` holds the arguments; the others, what the task produced or asks).
pub const TASK_LARGE_FIELDS: [&str; 5] = ["call", "result", "error", "inputRequests", "inputRounds"];

/// A task's status and times, as a listing shows them ([`TASK_STATUS_FIELDS`]).
#[derive(Debug, Clone, PartialEq)]
pub struct TaskStatusRecord {
    pub task_id: String,
    pub status: TaskStatus,
    pub status_message: Option<String>,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    pub ttl_ms: u64,
    pub owner: String,
    pub tool: String,
    pub progress: Option<f64>,
    pub total: Option<f64>,
    pub mode: TaskMode,
}

impl TaskStatusRecord {
    /// Parses the values of [`TASK_STATUS_FIELDS`], in that order; `None` when there is no such
    /// task. What the task carries is not read, so a task whose payload cannot be decoded lists
    /// with its stored status; reading it in full says why it failed.
    pub fn from_fields(task_id: &str, values: Vec<Option<String>>) -> Result<Option<Self>, String> {
        let mut hash: HashMap<String, String> = TASK_STATUS_FIELDS
            .iter()
            .zip(values)
            .filter_map(|(field, value)| Some(((*field).to_owned(), value?)))
            .collect();
        if hash.is_empty() {
            return Ok(None);
        }
        Self::take(task_id, &mut hash).map(Some)
    }

    /// Takes the status fields out of a task's hash.
    fn take(task_id: &str, hash: &mut HashMap<String, String>) -> Result<Self, String> {
        let mut take = |field: &str| hash.remove(field).filter(|v| !v.is_empty());
        let status = take("status").ok_or("task hash has no status")?.parse::<TaskStatus>()?;
        let number = |v: Option<String>, field: &str| -> Result<u64, String> {
            v.ok_or_else(|| format!("task hash has no {field}"))?
                .parse::<u64>()
                .map_err(|e| format!("task field {field}: {e}"))
        };
        let float = |v: Option<String>| v.and_then(|s| s.parse::<f64>().ok()).filter(|f| f.is_finite());
        Ok(Self {
            task_id: task_id.to_owned(),
            status,
            status_message: take("statusMessage"),
            created_at_ms: number(take("createdAt"), "createdAt")?,
            updated_at_ms: number(take("updatedAt"), "updatedAt")?,
            ttl_ms: number(take("ttlMs"), "ttlMs")?,
            owner: take("owner").unwrap_or_default(),
            tool: take("tool").unwrap_or_default(),
            progress: float(take("progress")),
            total: float(take("total")),
            mode: take("mode").map_or(TaskMode::Task, |m| TaskMode::parse(&m)),
        })
    }

    /// Whether the task is gone for its readers at `now_ms`: an unsettled task whose TTL, counted
    /// from its creation, has run out. A settled task is there as long as its keys are: one that
    /// settled at or after its TTL is kept a grace after it settled (`prelude.lua`'s `settle`).
    pub fn expired_at(&self, now_ms: u64) -> bool {
        outlived(self.status, self.created_at_ms, self.ttl_ms, now_ms)
    }
}

/// Whether a task in `status`, created at `created_at_ms` with `ttl_ms`, is gone for its readers at
/// `now_ms` (see [`TaskStatusRecord::expired_at`]).
fn outlived(status: TaskStatus, created_at_ms: u64, ttl_ms: u64, now_ms: u64) -> bool {
    !status.is_terminal() && created_at_ms.saturating_add(ttl_ms) <= now_ms
}

impl TaskRecord {
    /// Parses the values of [`TASK_FIELDS`], in that order; `None` when there is no such task.
    pub fn from_fields(task_id: &str, values: Vec<Option<String>>) -> Result<Option<Self>, String> {
        let hash: HashMap<String, String> = TASK_FIELDS
            .iter()
            .zip(values)
            .filter_map(|(field, value)| Some(((*field).to_owned(), value?)))
            .collect();
        Self::from_hash(task_id, hash)
    }

    /// Parses the fields of a task hash; `None` when the hash is empty (no such task).
    pub fn from_hash(task_id: &str, hash: HashMap<String, String>) -> Result<Option<Self>, String> {
        Self::from_read(task_id, hash, true)
    }

    /// Parses the fields a reader read of a task hash; `None` when it holds none (no such task).
    /// Without `call_read` the call record was not read (a reader that does not show it): the
    /// record carries a default one, and its absence is no fault.
    pub fn from_read(
        task_id: &str,
        mut hash: HashMap<String, String>,
        call_read: bool,
    ) -> Result<Option<Self>, String> {
        if hash.is_empty() {
            return Ok(None);
        }
        let head = TaskStatusRecord::take(task_id, &mut hash)?;
        let mut status = head.status;
        let mut take = |field: &str| hash.remove(field).filter(|v| !v.is_empty());
        let json = |v: Option<String>, field: &str| -> Result<Option<Value>, String> {
            v.map(|s| serde_json::from_str(&s).map_err(|e| format!("task field {field}: {e}"))).transpose()
        };
        // A payload that cannot be read (written by an older or broken writer) breaks only this
        // task, which shows as failed and says why; the record, listings and other tasks stay
        // readable.
        let mut unreadable: Option<String> = None;
        let call = match take("call").map(|text| CallRecord::from_text(&text)) {
            Some(Ok(call)) => call,
            Some(Err(e)) => {
                unreadable.get_or_insert(e);
                CallRecord::default()
            }
            None if call_read => {
                unreadable.get_or_insert("task hash has no call record".to_owned());
                CallRecord::default()
            }
            None => CallRecord::default(),
        };
        let mut payload = |field: &str, value: Option<String>| match json(value, field) {
            Ok(value) => value,
            Err(e) => {
                unreadable.get_or_insert(e);
                None
            }
        };
        let traceparent = take("traceparent");
        let mut result = payload("result", take("result"));
        let mut error =
            payload("error", take("error")).and_then(|e| serde_json::from_value::<RpcError>(e).ok());
        let input_requests = payload("inputRequests", take("inputRequests"));
        let input_rounds = payload("inputRounds", take("inputRounds"))
            .and_then(|rounds| serde_json::from_value(rounds).ok())
            .unwrap_or_default();
        if let Some(why) = unreadable {
            status = TaskStatus::Failed;
            result = None;
            error = Some(RpcError {
                code: -32603,
                message: format!("this task's stored data cannot be read ({why}); the task is failed"),
                data: None,
            });
        }
        let output_node = take("outputNode");
        Ok(Some(Self {
            task_id: head.task_id,
            status,
            status_message: head.status_message,
            created_at_ms: head.created_at_ms,
            updated_at_ms: head.updated_at_ms,
            ttl_ms: head.ttl_ms,
            owner: head.owner,
            tool: head.tool,
            call,
            traceparent,
            progress: head.progress,
            total: head.total,
            result,
            error,
            input_requests,
            input_rounds,
            output_node,
            mode: head.mode,
        }))
    }

    /// Whether the task is gone for its readers at `now_ms` ([`TaskStatusRecord::expired_at`]).
    pub fn expired_at(&self, now_ms: u64) -> bool {
        outlived(self.status, self.created_at_ms, self.ttl_ms, now_ms)
    }

    /// The task's status and times, as a listing shows them.
    pub fn status_record(&self) -> TaskStatusRecord {
        TaskStatusRecord {
            task_id: self.task_id.clone(),
            status: self.status,
            status_message: self.status_message.clone(),
            created_at_ms: self.created_at_ms,
            updated_at_ms: self.updated_at_ms,
            ttl_ms: self.ttl_ms,
            owner: self.owner.clone(),
            tool: self.tool.clone(),
            progress: self.progress,
            total: self.total,
            mode: self.mode,
        }
    }
}

/// One node of a task as stored in the task's hash (fields `<nodeId>:<field>`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeRecord {
    pub node_id: String,
    pub status: String,
    pub attempt: u32,
    pub tool: String,
    pub worker: Option<String>,
    pub started_at_ms: Option<u64>,
    pub finished_at_ms: Option<u64>,
    pub error: Option<Value>,
    pub output: Option<Value>,
    /// The size of the node's stored output, in bytes of JSON: given where the output itself is
    /// not read (a task's detail shows how large each output is, and reads none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_bytes: Option<u64>,
    /// The nodes that wait on this one: the edges of the graph, for drawing it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dependents: Vec<String>,
}

impl NodeRecord {
    /// Groups the `<nodeId>:<field>` entries of a task's hash into nodes, ordered by id.
    pub fn from_hash(hash: HashMap<String, String>) -> Vec<Self> {
        let mut by_node: std::collections::BTreeMap<String, HashMap<String, String>> = Default::default();
        for (key, value) in hash {
            // Fields of input requests (`ask/KEY`) hold a `/`, which no node id does.
            if let Some((node, field)) = key.rsplit_once(':').filter(|(node, _)| !node.contains('/')) {
                by_node.entry(node.to_owned()).or_default().insert(field.to_owned(), value);
            }
        }
        by_node
            .into_iter()
            .map(|(node_id, mut f)| NodeRecord {
                node_id,
                status: f.remove("status").unwrap_or_default(),
                attempt: f.get("attempt").and_then(|a| a.parse().ok()).unwrap_or(0),
                tool: f.remove("tool").unwrap_or_default(),
                worker: f.remove("worker"),
                started_at_ms: f.get("startedAt").and_then(|v| v.parse().ok()),
                finished_at_ms: f.get("finishedAt").and_then(|v| v.parse().ok()),
                error: f.get("error").and_then(|v| serde_json::from_str(v).ok()),
                output_bytes: f.get("output").map(|v| v.len() as u64),
                output: f.get("output").and_then(|v| serde_json::from_str(v).ok()),
                dependents: f
                    .get("dependents")
                    .and_then(|v| serde_json::from_str(v).ok())
                    .unwrap_or_default(),
            })
            .collect()
    }
}

/// An event of one task, as it reaches the inbox of a process that waits on the task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TaskEvent {
    Progress {
        progress: f64,
        #[serde(default)]
        total: Option<f64>,
        #[serde(default)]
        message: Option<String>,
    },
    Status {
        status: TaskStatus,
        #[serde(default)]
        message: Option<String>,
        /// The task's result, when it settled with one small enough to travel with the event.
        #[serde(default)]
        result: Option<Value>,
        /// The task's error, when it failed with one small enough to travel with the event.
        #[serde(default)]
        error: Option<RpcError>,
        /// The pending input requests, when the task went to `input_required` and they are small
        /// enough to travel with the event.
        #[serde(default, rename = "inputRequests")]
        input_requests: Option<Value>,
        /// The round that asked each of those requests, by key (with `input_requests`).
        #[serde(default, rename = "inputRounds")]
        input_rounds: Box<BTreeMap<String, u64>>,
        /// The hidden task of a synchronous call became the client's task (the tool said so).
        #[serde(default)]
        escalated: bool,
    },
    /// A message a running node logged for the client (MCP `notifications/message`).
    Log {
        level: LogLevel,
        #[serde(default)]
        logger: String,
        data: Value,
    },
    /// The call's SSE stream may close now: the client resumes it (`Last-Event-ID`) after
    /// `retry_ms`, from any gateway.
    Reconnect {
        #[serde(rename = "retryMs")]
        retry_ms: u64,
    },
    /// The task's TTL ran out before it finished: it no longer exists.
    Expired,
}

/// A message on an inbox channel: the task it is about, and the event.
#[derive(Debug, Clone, PartialEq)]
pub struct InboxMessage {
    pub task_id: String,
    pub event: TaskEvent,
}

impl InboxMessage {
    /// The message as JSON text, as the Lua scripts publish it: `{"task": id, "type": ..., ...}`.
    pub fn encode(&self) -> String {
        let mut value = serde_json::to_value(&self.event).unwrap_or(Value::Null);
        if let Some(object) = value.as_object_mut() {
            object.insert("task".to_owned(), Value::String(self.task_id.clone()));
        }
        value.to_string()
    }

    /// Parses a message as the Lua scripts publish it: `{"task": id, "type": ..., ...}`.
    pub fn parse(payload: &str) -> Result<Self, String> {
        Self::of_value(serde_json::from_str(payload).map_err(|e| e.to_string())?)
    }

    /// The messages of one inbox payload: one message, or a JSON array of them (a batch of lean
    /// completions publishes its events for one inbox together, `complete_calls.lua`).
    pub fn parse_all(payload: &str) -> Vec<Result<Self, String>> {
        if !payload.trim_start().starts_with('[') {
            return vec![Self::parse(payload)];
        }
        match serde_json::from_str::<Vec<Value>>(payload) {
            Ok(values) => values.into_iter().map(Self::of_value).collect(),
            Err(e) => vec![Err(e.to_string())],
        }
    }

    fn of_value(mut value: Value) -> Result<Self, String> {
        let task_id = match value.as_object_mut().and_then(|o| o.remove("task")) {
            Some(Value::String(id)) => id,
            _ => return Err("an inbox message without a task id".to_owned()),
        };
        let event = serde_json::from_value(value).map_err(|e| e.to_string())?;
        Ok(Self { task_id, event })
    }
}

/// What a lean entry carries beyond `task`, `node` and `trace` (docs/adr/0028), which every entry carries (a
/// worker of the previous version starts it from those with `start_nodes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeanEntry {
    pub owner: String,
    pub tool: String,
    /// The call record, as the task stores it.
    pub call: String,
}

impl LeanEntry {
    /// The lean part of a stream entry's fields, when it has one: the one field `lean`
    /// ([`LeanEntry::packed`]), or, from a gateway of the first lean version, `owner`, `tool` and
    /// `call` apart.
    pub(crate) fn of(field: impl Fn(&str) -> Option<String>) -> Option<std::sync::Arc<Self>> {
        let lean = match field("lean") {
            Some(packed) => Self::unpack(&packed)?,
            None => Self { owner: field("owner")?, tool: field("tool")?, call: field("call")? },
        };
        Some(std::sync::Arc::new(lean))
    }

    /// The entry's `lean` field: `<bytes of the tool's name>:<tool><bytes of the owner>:<owner>`
    /// then the call record. One field instead of three: every field of an entry is one more
    /// argument of its `XADD`, one more value in each read's reply, and one more step for every
    /// `XDEL` that walks past it. create_calls.lua takes the call record's length (what the call
    /// stores from the start) from this layout.
    pub fn packed(tool: &str, owner: &str, call: &str) -> String {
        format!("{}:{tool}{}:{owner}{call}", tool.len(), owner.len())
    }

    fn unpack(packed: &str) -> Option<Self> {
        fn word(text: &str) -> Option<(&str, &str)> {
            let (length, rest) = text.split_once(':')?;
            let length: usize = length.parse().ok()?;
            Some((rest.get(..length)?, rest.get(length..)?))
        }
        let (tool, rest) = word(packed)?;
        let (owner, call) = word(rest)?;
        Some(Self { owner: owner.to_owned(), tool: tool.to_owned(), call: call.to_owned() })
    }
}

/// A runnable node, as carried by one entry of a queue's work stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkItem {
    /// The shard of the stream (and of the task).
    pub shard: crate::keys::Shard,
    /// The stream's key.
    pub stream: String,
    pub entry_id: String,
    pub task_id: String,
    pub node_id: String,
    /// W3C trace context of the request that created the task.
    pub traceparent: Option<String>,
    /// What a lean entry carries for its worker to run it straight from its delivery (ADR-0028).
    pub lean: Option<std::sync::Arc<LeanEntry>>,
}

/// The definition of a tool as workers publish it and gateways list it: the MCP `Tool` object.
pub type ToolDefinition = Value;

/// What a worker offers: a tool, or a prompt, resource or resource template that a handler on the
/// worker produces the way a tool produces its result.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum OfferKind {
    #[default]
    Tool,
    Prompt,
    Resource,
    ResourceTemplate,
    /// A step of the graphs tools plan: it runs as a node of a tool's task and is never offered
    /// to clients (not listed, not callable, not usable in `run_dag`).
    Step,
}

impl OfferKind {
    pub fn is_tool(&self) -> bool {
        *self == Self::Tool
    }

    /// The name the offer is known by inside Conveyor (catalog, queues, tasks): a tool's name, or
    /// `prompt/NAME`, `resource/URI`, `template/URI-TEMPLATE`, `step/NAME` (no tool name contains `/`, so they
    /// never collide). `None` when the MCP definition lacks the field that names it.
    pub fn key(self, definition: &Value) -> Option<String> {
        let field = |name: &str| definition.get(name).and_then(Value::as_str);
        Some(match self {
            Self::Tool => field("name")?.to_owned(),
            Self::Prompt => format!("prompt/{}", field("name")?),
            Self::Resource => format!("resource/{}", field("uri")?),
            Self::ResourceTemplate => format!("template/{}", field("uriTemplate")?),
            Self::Step => format!("step/{}", field("name")?),
        })
    }
}

/// A tool (or another offer) as a worker publishes it in Redis for gateways.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PublishedTool {
    /// Where the tool stands in `tools/list`: the worker's registration order.
    pub position: u32,
    /// The queue its nodes wait in; the tool's own name when it declares none. Workers read only
    /// the queues of the tools they offer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// The MCP `Tool` object.
    pub definition: ToolDefinition,
    /// Client capabilities the tool needs (for example `{"sampling": {}}`); a 2026-07-28 client
    /// that does not declare them gets `-32021` instead of a run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_client_capabilities: Option<Value>,
    /// The tool gathers input in rounds of the call (MRTR) before it turns the call into a task.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub input_before_task: bool,
    /// What is offered; the definition is the MCP object of that kind (`Tool`, `Prompt`,
    /// `Resource`, `ResourceTemplate`).
    #[serde(default, skip_serializing_if = "OfferKind::is_tool")]
    pub kind: OfferKind,
    /// The offer's name inside Conveyor ([`OfferKind::key`]), for offers that are not tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

impl PublishedTool {
    /// A tool from its MCP definition alone: no queue of its own, no required capability.
    pub fn tool(position: u32, definition: ToolDefinition) -> Self {
        Self {
            position,
            queue: None,
            definition,
            required_client_capabilities: None,
            input_before_task: false,
            kind: OfferKind::Tool,
            key: None,
        }
    }

    /// The name it is known by inside Conveyor: a tool's `definition.name`, or the key of another
    /// offer ([`OfferKind::key`]).
    pub fn name(&self) -> Option<&str> {
        match &self.key {
            Some(key) => Some(key),
            None => self.definition.get("name").and_then(Value::as_str),
        }
    }

    /// The queue the tool's nodes wait in.
    pub fn queue_name(&self) -> Option<&str> {
        self.queue.as_deref().or_else(|| self.name())
    }
}

/// How a tool call ended, as the worker reports it.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolOutcome {
    /// A `CallToolResult` JSON object. With `isError: true` it still counts as a result.
    Result(Value),
    /// A protocol-level error: the task fails with this JSON-RPC error.
    Error(RpcError),
    /// The tool planned its work as a graph: the graph's nodes run as part of this task, on any
    /// worker, and the task's result is the graph's. Only a tool called directly may plan.
    Plan(crate::dag::DagSpec),
    /// The tool needs answers from the client before it can go on: the node parks (its worker
    /// slot is freed) and runs again as a new attempt, on any worker, once every request is
    /// answered; that attempt sees the answers and `state`.
    InputRequired(crate::input::InputRequired),
}

/// Builders for `CallToolResult` JSON, so that tools need no MCP library.
pub mod result {
    use serde_json::{Value, json};

    /// A result of one text item.
    pub fn text(text: impl Into<String>) -> Value {
        json!({"content": [{"type": "text", "text": text.into()}], "isError": false})
    }

    /// A tool-level failure the caller should read (`isError: true`).
    pub fn error_text(text: impl Into<String>) -> Value {
        json!({"content": [{"type": "text", "text": text.into()}], "isError": true})
    }

    /// A result with both text content and `structuredContent`.
    pub fn structured(text: impl Into<String>, structured: Value) -> Value {
        json!({
            "content": [{"type": "text", "text": text.into()}],
            "structuredContent": structured,
            "isError": false
        })
    }

    /// Whether a `CallToolResult` reports a tool-level error.
    pub fn is_error(result: &Value) -> bool {
        result.get("isError").and_then(Value::as_bool).unwrap_or(false)
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// RFC 3339 / ISO 8601 timestamp of a millisecond epoch time, as MCP's `createdAt` wants.
pub fn iso8601(ms: u64) -> String {
    let nanos = i128::from(ms) * 1_000_000;
    time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .and_then(|t| {
            t.format(time::macros::format_description!(
                "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
            ))
            .ok()
        })
        .unwrap_or_else(|| "1970-01-01T00:00:00.000Z".to_owned())
}

/// A new task id in `shard`: 32 hex digits, the first four naming the shard and the other 112
/// bits random from the operating system's CSPRNG, so that ids stay unguessable.
pub fn new_task_id(shard: crate::keys::Shard) -> String {
    let random = format!("{:032x}", rand::random::<u128>());
    format!("{:04x}{}", shard.0, &random[4..])
}

/// 128 random bits as 32 hex digits, for ids that name no shard (processes, sessions, traces).
pub fn random_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_ids_are_hex_name_their_shard_and_are_distinct() {
        let a = new_task_id(crate::keys::Shard(5));
        let b = new_task_id(crate::keys::Shard(5));
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(crate::keys::shard_of(&a, 8), Some(crate::keys::Shard(5)));
        assert_ne!(a, b);
    }

    #[test]
    fn iso8601_formats_epoch_millis() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(1_767_225_600_123), "2026-01-01T00:00:00.123Z");
    }

    #[test]
    fn status_round_trips_through_its_string() {
        for s in [
            TaskStatus::Working,
            TaskStatus::InputRequired,
            TaskStatus::Completed,
            TaskStatus::Failed,
            TaskStatus::Cancelled,
        ] {
            assert_eq!(s.as_str().parse::<TaskStatus>(), Ok(s));
        }
        assert!("done".parse::<TaskStatus>().is_err());
    }

    #[test]
    fn a_lean_entry_reads_packed_or_apart() {
        let packed = LeanEntry::packed("a:tool", "o:3\tx", r#"{"wire":"2026-07-28"}"#);
        let fields = |name: &str| (name == "lean").then(|| packed.clone());
        let lean = LeanEntry::of(fields).expect("packed");
        assert_eq!((lean.tool.as_str(), lean.owner.as_str()), ("a:tool", "o:3\tx"));
        assert_eq!(lean.call, r#"{"wire":"2026-07-28"}"#);
        // The three fields of the first lean entries.
        let apart = |name: &str| match name {
            "owner" => Some("me".to_owned()),
            "tool" => Some("greet".to_owned()),
            "call" => Some("{}".to_owned()),
            _ => None,
        };
        assert_eq!(LeanEntry::of(apart).map(|l| l.owner.clone()), Some("me".to_owned()));
        // A field that does not parse is no lean entry: the worker starts it by the full path.
        for bad in ["", "5:greet", "x:greet0:", "99:greet2:me{}"] {
            let fields = |name: &str| (name == "lean").then(|| bad.to_owned());
            assert!(LeanEntry::of(fields).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn events_have_a_stable_wire_shape() {
        // Lua scripts publish these with cjson; the Rust side must read exactly that shape.
        let progress: TaskEvent =
            serde_json::from_str(r#"{"type":"progress","progress":2,"total":4,"message":"half"}"#)
                .expect("valid progress event");
        assert_eq!(
            progress,
            TaskEvent::Progress { progress: 2.0, total: Some(4.0), message: Some("half".into()) }
        );
        let status = InboxMessage::parse(
            r#"{"task":"t1","type":"status","status":"completed","message":"x","result":{"content":[]}}"#,
        )
        .expect("valid status event");
        assert_eq!(status.task_id, "t1");
        assert_eq!(
            status.event,
            TaskEvent::Status {
                status: TaskStatus::Completed,
                message: Some("x".into()),
                result: Some(serde_json::json!({"content": []})),
                error: None,
                input_requests: None,
                input_rounds: Default::default(),
                escalated: false,
            }
        );
        assert!(InboxMessage::parse(r#"{"type":"expired"}"#).is_err(), "a message names its task");
    }

    #[test]
    fn an_inbox_payload_holds_one_message_or_an_array_of_them() {
        let one = InboxMessage::parse_all(r#"{"task":"t1","type":"expired"}"#);
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].as_ref().expect("one message").task_id, "t1");
        let batch = InboxMessage::parse_all(
            r#"[{"task":"t1","type":"status","status":"completed","message":"x","result":{"content":[]}},{"task":"t2","type":"expired"},{"type":"expired"}]"#,
        );
        let ids: Vec<_> = batch.iter().map(|m| m.as_ref().map(|m| m.task_id.as_str()).ok()).collect();
        assert_eq!(ids, [Some("t1"), Some("t2"), None], "each message of the array stands alone");
        assert!(InboxMessage::parse_all("[{").iter().all(Result::is_err));
    }

    #[test]
    fn node_records_group_fields_by_node() {
        let hash = HashMap::from([
            ("root:status".to_owned(), "running".to_owned()),
            ("root:attempt".to_owned(), "2".to_owned()),
            ("root:tool".to_owned(), "greet".to_owned()),
        ]);
        let nodes = NodeRecord::from_hash(hash);
        assert_eq!(nodes.len(), 1);
        assert_eq!(nodes[0].node_id, "root");
        assert_eq!(nodes[0].attempt, 2);
        assert_eq!(nodes[0].status, "running");
    }
}
