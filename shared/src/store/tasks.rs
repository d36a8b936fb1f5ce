//! Tasks: create one (one script: task, nodes, queues, idempotency, limits), read one, watch one
//! (join its waiters and read it in the same step), cancel one, answer its input requests.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::Store;
use crate::call::CallRecord;
use crate::dag::{self, DagSpec};
use crate::error::StoreError;
use crate::keys::{self, Shard};
use crate::model::{NodeRecord, RpcError, TASK_FIELDS, TaskMode, TaskRecord, TaskStatus};
use crate::scripts;

/// Everything a new task is created with.
#[derive(Debug, Clone)]
pub struct NewTask {
    /// The task's id; it names the task's shard ([`crate::model::new_task_id`]).
    pub task_id: String,
    pub owner: String,
    pub tool: String,
    /// What the call carries that no script decides on, stored as one field.
    pub call: CallRecord,
    pub ttl_ms: u64,
    pub traceparent: Option<String>,
    pub mode: TaskMode,
    pub status_message: String,
    pub created_at_ms: u64,
    /// The graph of a DAG task; `None` for a single tool call (one node, `root`).
    pub graph: Option<DagSpec>,
    /// The client's idempotency key: a retried call with the same key returns the same task.
    pub idempotency_key: Option<String>,
    /// The queue of each tool the task calls; a tool missing here waits in a queue of its name.
    pub queues: std::sync::Arc<HashMap<String, String>>,
    /// The inbox channel of the process that waits for the task's end (a synchronous call), so
    /// that it hears of progress and of the end without asking.
    pub waiter: Option<String>,
    /// How long the owner's task index keeps entries (ms).
    pub index_retention_ms: u64,
    /// Answers the client sent with the call itself (an MRTR retry without state): the single
    /// call's first attempt sees them as if it had asked.
    pub input_responses: Option<serde_json::Map<String, Value>>,
    /// The key that finds a synchronous call's task by its request id ([`crate::keys::Shard::call`],
    /// in the shard the request id names), so that `notifications/cancelled` reaches it.
    pub call_key: Option<String>,
    /// A synchronous call whose tool may turn it into the client's task ([`TaskMode::Sync`] only):
    /// it is indexed for its owner from the start, and listed once it escalates.
    pub escalable: bool,
    /// The bytes the task may store in Redis in all (its arguments, its nodes' outputs, its
    /// result): a node that would pass it fails with an error naming `max_task_bytes`. 0: none.
    pub max_bytes: u64,
    /// The graph limits a graph the call's tool plans is held to (`max_dag_nodes`,
    /// `max_dag_node_bytes`): stored with a single call, with the shard's shares of the load
    /// limits, so that the worker that expands the plan applies the limits the call was admitted
    /// under, whatever its own configuration.
    pub plan_limits: crate::dag::DagLimits,
    /// A synchronous call whose input rounds are told to its client, which answers them in later
    /// calls (2026-07-28: MRTR): while it waits in a round it holds no live-task slot, but counts
    /// against `max_parked_rounds_per_principal`, so that rounds a client abandons never lock it out.
    pub input_rounds: bool,
}

/// What became of a synchronous call its gateway stopped waiting for ([`Store::escalate_overdue`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overdue {
    /// It is the client's task now (or was already).
    Escalated,
    /// It settled meanwhile: its outcome is the call's answer.
    Settled,
    /// No such task (it expired).
    Missing,
}

/// Calls remembered under one call key ([`crate::keys::Shard::call`]); `CALLS_KEPT` in
/// `prelude.lua`.
pub const CALLS_KEPT: isize = 16;

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
    /// The task's arguments alone would take more than its byte budget (nothing written).
    OverBudget {
        size: u64,
        max: u64,
    },
}

/// Which overload limit a call hit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitHit {
    /// `queued_nodes`, `queued_nodes_per_tool`, `live_tasks_per_principal` or
    /// `nodes_per_principal`.
    pub limit: String,
    /// The count it is measured on, and the limit: over the whole deployment once every shard
    /// was tried ([`Store::create_task_spread`]); in one shard, and its share, from
    /// [`Store::create_task`].
    pub current: u64,
    pub max: u64,
    /// What the refused task would have added to the count (1 task, or its nodes).
    pub needed: u64,
    /// The tool, for the per-tool limit.
    pub tool: Option<String>,
    /// With `stored_bytes_per_principal`: how long until the oldest of the principal's tasks gives
    /// its bytes back (its TTL runs out), when it has one that will.
    pub frees_in_ms: Option<u64>,
    /// This shard's counts of the owner (live tasks, nodes they hold) and of queued nodes, so
    /// that refusals from every shard add up to the deployment's.
    pub counts: LoadCounts,
}

/// What one shard counts of an owner and of its queues when it refuses a task.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub struct LoadCounts {
    #[serde(default)]
    pub live: u64,
    #[serde(default)]
    pub nodes: u64,
    #[serde(default)]
    pub queued: u64,
    #[serde(default)]
    pub kept: u64,
}

/// Overload limits a new task is checked against, for the whole deployment; 0 means no limit.
/// Each shard holds a share, and the shares add up to the limit exactly: a call refused by its
/// shard tries the others ([`Store::create_task_spread`]), so a configured limit admits exactly
/// that many, wherever a slot is free.
#[derive(Debug, Clone, Copy, Default)]
pub struct Limits {
    pub max_queued: u64,
    pub max_queued_per_tool: u64,
    pub max_live_per_principal: u64,
    /// Nodes one principal's unfinished tasks may hold (a single call holds one): its share of
    /// what the deployment queues.
    pub max_nodes_per_principal: u64,
    /// Bytes one principal may keep in Redis: its tasks' calls, node outputs, results and answers
    /// until their TTL runs out, and its memories.
    pub max_stored_bytes_per_principal: u64,
    /// Synchronous calls of one principal that wait in an input round its client was told of
    /// (2026-07-28 without tasks: MRTR), which hold no live-task slot: past it, the oldest
    /// unanswered round ends. Each shard holds a share of at least one.
    pub max_parked_rounds_per_principal: u64,
}

/// One shard's share of each limit (-1: no limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Shares {
    pub queued: i64,
    pub per_tool: i64,
    pub live: i64,
    pub nodes: i64,
    pub kept: i64,
}

impl Limits {
    /// Shard `shard`'s share of each limit (-1: no limit): the limit divided by the shard count,
    /// the remainder going one each to the first shards.
    pub(super) fn for_shard(self, shard: Shard, shards: u16) -> Value {
        let share = self.shares(shard, shards);
        json!({
            "queued": share.queued,
            "perTool": share.per_tool,
            "live": share.live,
            "nodes": share.nodes,
            "kept": share.kept,
        })
    }

    /// [`Limits::for_shard`] as numbers.
    pub(super) fn shares(self, shard: Shard, shards: u16) -> Shares {
        let shards = u64::from(shards.max(1));
        let k = u64::from(shard.0);
        let share = |limit: u64| -> i64 {
            if limit == 0 {
                return -1;
            }
            let share = limit / shards + u64::from(k < limit % shards);
            i64::try_from(share).unwrap_or(i64::MAX)
        };
        Shares {
            queued: share(self.max_queued),
            per_tool: share(self.max_queued_per_tool),
            live: share(self.max_live_per_principal),
            nodes: share(self.max_nodes_per_principal),
            kept: share(self.max_stored_bytes_per_principal),
        }
    }

    /// Shard `shard`'s share of the parked-rounds limit (-1: none): as [`Limits::for_shard`]
    /// shares a limit, but at least one, so that a round can wait in any shard.
    pub(super) fn rounds_share(self, shard: Shard, shards: u16) -> i64 {
        let limit = self.max_parked_rounds_per_principal;
        if limit == 0 {
            return -1;
        }
        let shards = u64::from(shards.max(1));
        let share = limit / shards + u64::from(u64::from(shard.0) < limit % shards);
        i64::try_from(share.max(1)).unwrap_or(i64::MAX)
    }

    /// The configured figure of a limit, by the name a refusal gives it.
    fn configured(&self, limit: &str) -> u64 {
        match limit {
            "queued_nodes" => self.max_queued,
            "queued_nodes_per_tool" => self.max_queued_per_tool,
            "live_tasks_per_principal" => self.max_live_per_principal,
            "nodes_per_principal" => self.max_nodes_per_principal,
            "stored_bytes_per_principal" => self.max_stored_bytes_per_principal,
            _ => 0,
        }
    }
}

impl NewTask {
    /// The call record as the task hash keeps it. A graph's leaves out its arguments (the graph
    /// itself): its nodes hold their own, and every node start hands the record to its worker, so
    /// a record that held the graph would cost each of N nodes the whole graph, N² in all.
    pub fn stored_call(&self) -> CallRecord {
        match self.graph {
            Some(_) => CallRecord { arguments: Value::Null, ..self.call.clone() },
            None => self.call.clone(),
        }
    }

    /// The task as it stands right after creation, without reading it back.
    pub fn record(&self) -> TaskRecord {
        TaskRecord {
            task_id: self.task_id.clone(),
            status: TaskStatus::Working,
            status_message: Some(self.status_message.clone()),
            created_at_ms: self.created_at_ms,
            updated_at_ms: self.created_at_ms,
            ttl_ms: self.ttl_ms,
            owner: self.owner.clone(),
            tool: self.tool.clone(),
            call: self.stored_call(),
            traceparent: self.traceparent.clone(),
            progress: None,
            total: None,
            result: None,
            error: None,
            input_requests: None,
            input_rounds: Default::default(),
            output_node: None,
            mode: self.mode,
        }
    }
}

/// How `tasks/update` found the task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnswerOutcome {
    /// Answers were recorded; this many requests are still pending, and this many parked nodes
    /// went back to their queue.
    Answered { remaining: u32, resumed: u32 },
    /// The task waits for no input (it has this status); nothing changed.
    NotWaiting(String),
    /// No such task.
    Missing,
    /// The task is another owner's; nothing changed.
    Denied,
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

#[derive(Deserialize)]
#[serde(tag = "outcome", rename_all = "camelCase")]
enum CreateReply {
    Created {
        #[serde(rename = "createdAt")]
        created_at: u64,
    },
    Exists,
    Duplicate {
        task: String,
    },
    Conflict {
        task: String,
    },
    #[serde(rename_all = "camelCase")]
    Claimed {
        claim: String,
        age_ms: u64,
    },
    Budget {
        size: u64,
        max: u64,
    },
    Limit {
        limit: String,
        current: u64,
        max: u64,
        #[serde(default)]
        needed: u64,
        tool: String,
        #[serde(flatten)]
        counts: LoadCounts,
        #[serde(default)]
        oldest: Vec<String>,
        #[serde(default)]
        claim: Option<String>,
    },
}

#[derive(Deserialize)]
#[serde(tag = "outcome", rename_all = "camelCase")]
enum ResolveReply {
    Resolved,
    Lost {
        #[serde(default)]
        current: Option<String>,
    },
}

#[derive(Deserialize)]
#[serde(tag = "outcome", rename_all = "camelCase")]
enum ReleaseReply {
    Released {
        #[allow(dead_code)] // the count is for people reading the reply in MONITOR
        count: u32,
    },
    None,
    QueuesChanged,
}

/// How a create treats its idempotency key and its nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CreateMode {
    /// As [`Store::create_task`]: refused when the shard is full.
    Plain,
    /// In the key's own shard, ahead of a spread: when the shard is full, the key is claimed for
    /// the task the spread makes elsewhere.
    ClaimWhenFull,
    /// In another shard, for a claimed key: the task is made, but its nodes get no queue entry
    /// until the claim resolves to it ([`Store::release_task`]).
    Hold,
}

/// What one create script did.
enum Made {
    Done {
        created: Created,
        /// Redis's clock when the task was made.
        created_at: Option<u64>,
        /// The value the idempotency key was claimed with, when the shard was full.
        claim: Option<String>,
    },
    /// Another create of the same idempotency key claimed it and is making its task elsewhere.
    Claimed { claim: String, age_ms: u64 },
}

#[derive(Deserialize)]
#[serde(tag = "outcome", rename_all = "camelCase")]
enum CancelReply {
    Cancelled,
    Terminal { status: String },
    Missing,
    NotParked,
}

#[derive(Deserialize)]
#[serde(tag = "outcome", rename_all = "camelCase")]
enum AnswerReply {
    Missing,
    Denied,
    NotWaiting { status: String },
    Answered { remaining: u32, resumed: u32 },
    QueuesChanged,
}

/// How long a session's log level is kept after it was last set.
const LOG_LEVEL_TTL_S: u64 = 24 * 60 * 60;

/// An idempotency key outlives its task's TTL by this much, so that a retry of a long-running call
/// still finds its task.
const IDEMPOTENCY_SLACK_MS: u64 = 24 * 60 * 60 * 1000;

/// A claim on an idempotency key this old is taken to be abandoned (its creator stopped half-way):
/// a retry of the call then finishes or drops it. Far longer than a spread takes, outages included.
const CLAIM_ABANDONED_MS: u64 = 30_000;

/// How often a retry that found another create's claim on its key looks again.
const CLAIM_POLL: std::time::Duration = std::time::Duration::from_millis(20);

/// The largest result or error that travels inside a settle event; a larger one is read back by
/// the waiter.
pub(crate) const INLINE_MAX: usize = 64 * 1024;

/// One node in the shape the scripts read: arguments as JSON text (so that Lua's JSON codec never
/// rewrites them: it cannot tell `[]` from `{}`), and `q`, the 1-based index of its queue.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NodeRow {
    id: String,
    tool: String,
    /// A graph node's own arguments; a single call's node runs with the call's.
    #[serde(skip_serializing_if = "Option::is_none")]
    args: Option<String>,
    q: usize,
    deps: usize,
    dependents: Vec<String>,
    retries: u32,
    backoff_ms: u64,
    timeout_ms: u64,
    on_failure: &'static str,
    /// Text, so that the script stores it as given.
    weight: String,
}

/// Queue names of a task, in the order its nodes' `q` indexes them; the built-in queue first.
#[derive(Debug, Clone)]
pub(crate) struct QueueList(pub Vec<String>);

impl QueueList {
    pub(crate) fn new() -> Self {
        Self(vec![keys::BUILTIN_QUEUE.to_owned()])
    }

    /// The 1-based index of `queue`, added when new.
    pub(crate) fn index(&mut self, queue: &str) -> usize {
        match self.0.iter().position(|q| q == queue) {
            Some(i) => i + 1,
            None => {
                self.0.push(queue.to_owned());
                self.0.len()
            }
        }
    }

    /// The stream keys of these queues in `shard`, in order.
    pub(crate) fn streams(&self, shard: Shard) -> Vec<String> {
        self.0.iter().map(|q| shard.queue(q)).collect()
    }
}

/// The work streams of a task's queues as its hash stores them (`queues`, a JSON array), in order;
/// none when they cannot be read.
pub(crate) fn stored_streams(shard: Shard, queues: Option<&str>) -> Vec<String> {
    let queues: Vec<String> = queues.and_then(|q| serde_json::from_str(q).ok()).unwrap_or_default();
    queues.iter().map(|q| shard.queue(q)).collect()
}

/// The queue a node's tool waits in.
pub(crate) fn queue_of<'a>(tool: &'a str, queues: &'a HashMap<String, String>) -> &'a str {
    if tool.starts_with('$') {
        return keys::BUILTIN_QUEUE;
    }
    queues.get(tool).map(String::as_str).unwrap_or(tool)
}

/// The answer to a retry whose idempotency key another create has claimed for longer than the
/// retry may wait: retryable, and nothing was made.
fn claimed_elsewhere() -> StoreError {
    StoreError::Unavailable(
        "another call with this idempotency key is still making its task; nothing was started: retry the call"
            .to_owned(),
    )
}

/// What tells two calls with one idempotency key apart: the tool and its arguments.
fn fingerprint(new: &NewTask) -> String {
    format!("{} {}", new.tool, new.call.arguments)
}

/// The node of a single tool call (it runs with the call's arguments).
fn single_node(tool: &str, queues: &mut QueueList, map: &HashMap<String, String>) -> NodeRow {
    NodeRow {
        id: crate::model::ROOT_NODE.to_owned(),
        tool: tool.to_owned(),
        args: None,
        q: queues.index(queue_of(tool, map)),
        deps: 0,
        dependents: Vec::new(),
        retries: 0,
        backoff_ms: dag::DEFAULT_BACKOFF_MS,
        timeout_ms: 0,
        on_failure: "fail",
        weight: "1".to_owned(),
    }
}

/// A graph's nodes in the shape the scripts read.
pub(crate) fn graph_nodes(
    graph: &DagSpec,
    queues: &mut QueueList,
    map: &HashMap<String, String>,
) -> Vec<NodeRow> {
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
                    n.depends_on.iter().map(|d| (d.clone(), json!({"$from": d}))).collect();
                json!({"nodes": from})
            } else {
                n.arguments.clone()
            };
            NodeRow {
                id: n.id.clone(),
                q: queues.index(queue_of(&tool, map)),
                tool,
                args: Some(arguments.to_string()),
                deps: n.depends_on.len(),
                dependents: dependents
                    .get(n.id.as_str())
                    .map(|d| d.iter().map(|s| (*s).to_owned()).collect())
                    .unwrap_or_default(),
                retries: n.retries,
                backoff_ms: n.backoff_ms.unwrap_or(dag::DEFAULT_BACKOFF_MS),
                timeout_ms: n.timeout_ms.unwrap_or(0),
                on_failure: n.on_failure.as_str(),
                weight: n.weight.unwrap_or(1.0).to_string(),
            }
        })
        .collect()
}

impl Store {
    /// The shard of a task id, or the "not found" answer for an id that names none.
    fn task_shard(&self, task_id: &str) -> Option<Shard> {
        self.shard_of(task_id)
    }

    /// Writes a task, its nodes and its queue entries in one script (after its idempotency key and
    /// its shard's load limits are checked). The task's creation time is Redis's clock at that
    /// moment, not `new.created_at_ms` ([`Store::create_task_spread`] hands it back).
    pub async fn create_task(&self, new: &NewTask, limits: &Limits) -> Result<Created, StoreError> {
        match self.create_task_at(new, limits, CreateMode::Plain).await? {
            Made::Done { created, .. } => Ok(created),
            Made::Claimed { .. } => Err(claimed_elsewhere()),
        }
    }

    /// [`Store::create_task`], with the creation time Redis gave a task it created, and what
    /// became of its idempotency key.
    async fn create_task_at(
        &self,
        new: &NewTask,
        limits: &Limits,
        mode: CreateMode,
    ) -> Result<Made, StoreError> {
        let shard = self.task_shard(&new.task_id).ok_or_else(|| {
            StoreError::Corrupt(format!("task id {} names no shard of this deployment", new.task_id))
        })?;
        let mut queues = QueueList::new();
        let (kind, output, nodes) = match &new.graph {
            None => ("single", String::new(), vec![single_node(&new.tool, &mut queues, &new.queues)]),
            Some(graph) => (
                "dag",
                graph.output.clone().unwrap_or_default(),
                graph_nodes(graph, &mut queues, &new.queues),
            ),
        };
        let mut keys =
            vec![shard.task(&new.task_id), shard.load(), shard.expiring(), shard.owner_tasks(&new.owner)];
        keys.extend(queues.streams(shard));
        if let Some(key) = &new.idempotency_key {
            keys.push(shard.idempotency(&new.owner, key));
        }
        if let Some(key) = &new.call_key {
            keys.push(key.clone());
        }
        let stored_call = new.stored_call();
        let call_text = stored_call.to_text();
        let answers =
            new.input_responses.as_ref().map(|a| Value::Object(a.clone()).to_string()).unwrap_or_default();
        let shares = limits.for_shard(shard, self.shards());
        // What a graph the tool plans is held to (expand_plan): only a single call may plan.
        let plan_limits = match &new.graph {
            Some(_) => String::new(),
            None => format!(
                "{} {} {} {} {}",
                new.plan_limits.max_nodes,
                new.plan_limits.max_node_bytes,
                shares["nodes"],
                shares["queued"],
                shares["perTool"]
            ),
        };
        let stored_bytes = call_text.len()
            + answers.len()
            + nodes.iter().filter_map(|n| n.args.as_ref()).map(String::len).sum::<usize>();
        let record = json!({
            "id": new.task_id,
            "owner": new.owner,
            "tool": new.tool,
            "call": call_text,
            "ttl": new.ttl_ms,
            "trace": new.traceparent.clone().unwrap_or_default(),
            "mode": new.mode.as_str(),
            "index": new.mode == TaskMode::Task || new.escalable,
            "escalable": new.escalable,
            "callKey": new.call_key.is_some(),
            "answers": answers,
            "message": new.status_message,
            "retention": new.index_retention_ms.max(1),
            "kind": kind,
            "output": output,
            "queues": queues.0,
            "nodes": nodes,
            "waiter": new.waiter.clone().unwrap_or_default(),
            "idem": new.idempotency_key.is_some(),
            "fingerprint": fingerprint(new),
            "idemTtl": new.ttl_ms.saturating_add(IDEMPOTENCY_SLACK_MS),
            "limits": shares,
            "planLimits": plan_limits,
            "maxBytes": new.max_bytes,
            "bytes": stored_bytes,
            "cancelChannel": shard.cancel_channel(),
            // The claim names the task's id without its shard: a retry that finds the claim
            // abandoned looks for the task in every shard.
            "roundsMax": new.input_rounds.then(|| limits.rounds_share(shard, self.shards())),
            "claim": (mode == CreateMode::ClaimWhenFull).then(|| format!("?{}", &new.task_id[4..])),
            "hold": mode == CreateMode::Hold,
        });
        let reply: CreateReply = self.durable_script(&scripts::CREATE_TASK, &keys, &record).await?;
        let mut created_at = None;
        let mut claimed = None;
        let created = match reply {
            CreateReply::Created { created_at: at } => {
                created_at = Some(at);
                Created::Created
            }
            CreateReply::Exists => {
                // Either a 112-bit collision, or this very create retried after its reply was
                // lost while Redis was away: then the task is the one we wrote.
                match self.get_task(&new.task_id).await? {
                    Some(t) if t.owner == new.owner && t.tool == new.tool && t.call == stored_call => {
                        created_at = Some(t.created_at_ms);
                        Created::Created
                    }
                    _ => Created::IdTaken,
                }
            }
            CreateReply::Duplicate { task } => Created::Duplicate(task),
            CreateReply::Conflict { task } => Created::Conflict(task),
            CreateReply::Claimed { claim, age_ms } => return Ok(Made::Claimed { claim, age_ms }),
            CreateReply::Budget { size, max } => Created::OverBudget { size, max },
            CreateReply::Limit { limit, current, max, needed, tool, counts, oldest, claim } => {
                claimed = claim;
                let frees_in_ms = self.frees_in_ms(shard, &oldest).await?;
                Created::OverLimit(LimitHit {
                    limit,
                    current,
                    max,
                    needed,
                    tool: Some(tool).filter(|t| !t.is_empty()),
                    frees_in_ms,
                    counts,
                })
            }
        };
        if created == Created::Created {
            crate::metrics::task_created(&new.tool);
        }
        Ok(Made::Done { created, created_at, claim: claimed })
    }

    /// How long until the first of `tasks` (of `shard`) runs out of TTL and gives back what it
    /// stores; `None` when none of them is still there. Read only for a refused call.
    async fn frees_in_ms(&self, shard: Shard, tasks: &[String]) -> Result<Option<u64>, StoreError> {
        if tasks.is_empty() {
            return Ok(None);
        }
        let mut pipe = redis::pipe();
        for id in tasks {
            pipe.cmd("HMGET").arg(shard.task(id)).arg("createdAt").arg("ttlMs");
        }
        pipe.cmd("TIME");
        let mut times: Vec<redis::Value> = self.pipeline(&pipe).await?;
        let corrupt = |e: redis::ParsingError| StoreError::Corrupt(format!("task times: {e}"));
        let now = match times.pop() {
            Some(now) => super::redis_ms(redis::from_redis_value(now).map_err(corrupt)?),
            None => return Ok(None),
        };
        let times = times
            .into_iter()
            .map(redis::from_redis_value::<(Option<u64>, Option<u64>)>)
            .collect::<Result<Vec<_>, _>>()
            .map_err(corrupt)?;
        Ok(times
            .into_iter()
            .filter_map(|(created, ttl)| Some(created?.saturating_add(ttl?)))
            .min()
            .map(|at| at.saturating_sub(now)))
    }

    /// Creates a task in whichever shard has room under `limits`: first in the shard its id names
    /// (a new task lands where the caller picked, at no extra cost when far from every limit);
    /// when that shard's share of a limit is spent, in each other shard in turn, under a new id
    /// (`new.task_id` says where it landed). Refused only when every shard refuses, with the
    /// limit's configured figure and the deployment's count. `moving` sees the task under each new
    /// id before it is tried (a caller that waits for the task listens for that id and gives its
    /// inbox in that shard).
    ///
    /// A call pinned to its shard by a call key that lands elsewhere has its key written in its
    /// own shard afterwards. One pinned by an idempotency key claims the key in its own shard
    /// before anything is made elsewhere (in the script that finds the shard full), makes its task
    /// elsewhere on hold (no queue entry), points the key at it, and only then queues it: a retry
    /// of the call that comes meanwhile finds the claim, waits for it and answers with the task,
    /// so that the work is made and run once. A claim whose creator stopped half-way is finished
    /// or dropped by the next retry once it is [`CLAIM_ABANDONED_MS`] old.
    pub async fn create_task_spread(
        &self,
        new: &mut NewTask,
        limits: &Limits,
        moving: impl FnMut(&mut NewTask, Shard),
    ) -> Result<Created, StoreError> {
        if let Some(created_at) = self.create_lean(new, limits).await? {
            new.created_at_ms = created_at;
            return Ok(Created::Created);
        }
        // Boxed: the full path's future is several times the lean one's, and a caller's future
        // (a request's, moved whole when it is spawned) would otherwise be as large.
        Box::pin(self.create_task_full(new, limits, moving)).await
    }

    /// [`Store::create_task_spread`] of a call that is not lean, or that its lean batch left.
    async fn create_task_full(
        &self,
        new: &mut NewTask,
        limits: &Limits,
        mut moving: impl FnMut(&mut NewTask, Shard),
    ) -> Result<Created, StoreError> {
        let home_id = new.task_id.clone();
        let give_up = tokio::time::Instant::now() + self.inner.options.outage_wait;
        loop {
            let mode =
                if new.idempotency_key.is_some() { CreateMode::ClaimWhenFull } else { CreateMode::Plain };
            let (first, claim) = match self.create_task_at(new, limits, mode).await? {
                Made::Done { created: Created::OverLimit(hit), claim, .. } => (hit, claim),
                Made::Done { created, created_at, .. } => {
                    new.created_at_ms = created_at.unwrap_or(new.created_at_ms);
                    if let Created::Duplicate(earlier) = &created
                        && self.shard_of(earlier) != self.shard_of(&home_id)
                    {
                        // Made elsewhere for a claim: its creator may have stopped before it
                        // queued the task.
                        self.release_task(earlier).await?;
                    }
                    return Ok(created);
                }
                Made::Claimed { claim, age_ms } => {
                    if age_ms >= CLAIM_ABANDONED_MS {
                        if let Some(found) = self.finish_abandoned_claim(new, &claim).await? {
                            return Ok(found);
                        }
                        continue;
                    }
                    // Wait for the claim to resolve, looking at the key alone (the create's record
                    // may be large), then try the create again.
                    let (Some(key), Some(home)) = (&new.idempotency_key, self.shard_of(&home_id)) else {
                        return Err(claimed_elsewhere());
                    };
                    let idem = home.idempotency(&new.owner, key);
                    loop {
                        if tokio::time::Instant::now() + CLAIM_POLL > give_up {
                            return Err(claimed_elsewhere());
                        }
                        tokio::time::sleep(CLAIM_POLL).await;
                        let current: Option<String> = self.query(|| redis::Cmd::get(&idem)).await?;
                        if current.as_deref() != Some(claim.as_str()) {
                            break;
                        }
                    }
                    continue;
                }
            };
            if let Some(created) = self.spread(new, limits, &mut moving, first, claim).await? {
                return Ok(created);
            }
        }
    }

    /// The rest of [`Store::create_task_spread`] once the task's own shard refused it: the other
    /// shards in turn. `None` when the idempotency key this call claimed was taken over meanwhile
    /// (the task made for it was dropped before it ever ran).
    async fn spread(
        &self,
        new: &mut NewTask,
        limits: &Limits,
        moving: &mut impl FnMut(&mut NewTask, Shard),
        first: LimitHit,
        claim: Option<String>,
    ) -> Result<Option<Created>, StoreError> {
        let Some(home) = self.shard_of(&new.task_id) else { return Ok(Some(Created::OverLimit(first))) };
        let idempotency = new.idempotency_key.take();
        let call_key = new.call_key.take();
        let mode = if claim.is_some() { CreateMode::Hold } else { CreateMode::Plain };
        let mut refusals = vec![first];
        let mut created = None;
        for step in 1..self.shards() {
            let shard = Shard((home.0 + step) % self.shards());
            let mut moved = new.clone();
            moved.task_id = format!("{:04x}{}", shard.0, &new.task_id[4..]);
            moving(&mut moved, shard);
            match self.create_task_at(&moved, limits, mode).await? {
                Made::Done { created: Created::OverLimit(hit), .. } => refusals.push(hit),
                Made::Done { created: other, created_at, .. } => {
                    moved.created_at_ms = created_at.unwrap_or(moved.created_at_ms);
                    created = Some((other, moved));
                    break;
                }
                // Moved tasks carry no idempotency key.
                Made::Claimed { .. } => return Err(claimed_elsewhere()),
            }
        }
        if let Some((_, moved)) = &mut created {
            moved.idempotency_key = idempotency.clone();
            moved.call_key = call_key.clone();
        }
        new.idempotency_key = idempotency;
        new.call_key = call_key;
        // The key lives where the create script read and claimed it: in the task's own shard.
        let idem = new.idempotency_key.as_ref().map(|key| home.idempotency(&new.owner, key));
        let Some((created, moved)) = created else {
            if let (Some(claim), Some(idem)) = (&claim, &idem) {
                // No shard had room: the key goes back to naming nothing.
                self.resolve_claim(idem, claim, None, 0).await?;
            }
            let first = &refusals[0];
            let current = refusals
                .iter()
                .map(|hit| match first.limit.as_str() {
                    "live_tasks_per_principal" => hit.counts.live,
                    "nodes_per_principal" => hit.counts.nodes,
                    "queued_nodes" => hit.counts.queued,
                    "stored_bytes_per_principal" => hit.counts.kept,
                    _ if hit.limit == first.limit && hit.tool == first.tool => hit.current,
                    _ => 0,
                })
                .sum();
            return Ok(Some(Created::OverLimit(LimitHit {
                limit: first.limit.clone(),
                current,
                max: limits.configured(&first.limit),
                needed: first.needed,
                tool: first.tool.clone(),
                frees_in_ms: refusals.iter().filter_map(|hit| hit.frees_in_ms).min(),
                counts: LoadCounts::default(),
            })));
        };
        if created != Created::Created {
            if let (Some(claim), Some(idem)) = (&claim, &idem) {
                self.resolve_claim(idem, claim, None, 0).await?;
            }
            return Ok(Some(created));
        }
        if let (Some(claim), Some(idem)) = (&claim, &idem) {
            let value = format!("{} {}", moved.task_id, fingerprint(&moved));
            let ttl = moved.ttl_ms.saturating_add(IDEMPOTENCY_SLACK_MS);
            if self.resolve_claim(idem, claim, Some(&value), ttl).await?.is_some() {
                // Another retry of the call took the claim over while this one stalled: the task
                // made here never ran. The caller looks at the key again, under the task's first id.
                self.cancel_task(&moved.task_id, "", "Cancelled: a retry of this call made its task instead")
                    .await?;
                moving(new, home);
                return Ok(None);
            }
        }
        *new = moved;
        if let Some(call_key) = &new.call_key {
            // As `remember_call` (prelude.lua) does for a call created in the key's own shard.
            let ttl = new.ttl_ms;
            let mut pipe = redis::pipe();
            pipe.atomic()
                .lpush(call_key, &new.task_id)
                .ignore()
                .ltrim(call_key, 0, CALLS_KEPT - 1)
                .ignore()
                .cmd("PEXPIRE")
                .arg(call_key)
                .arg(ttl)
                .arg("GT")
                .ignore()
                .cmd("PEXPIRE")
                .arg(call_key)
                .arg(ttl)
                .arg("NX")
                .ignore();
            self.pipeline::<()>(&pipe).await?;
        }
        if claim.is_some() {
            self.release_task(&new.task_id).await?;
        }
        Ok(Some(Created::Created))
    }

    /// Changes the idempotency key `idem` from `claim` to `value` (`None`: drops it), only while
    /// it still holds that claim. `None` when it did; otherwise what the key holds now.
    async fn resolve_claim(
        &self,
        idem: &str,
        claim: &str,
        value: Option<&str>,
        ttl_ms: u64,
    ) -> Result<Option<Option<String>>, StoreError> {
        let record = json!({"claim": claim, "value": value.unwrap_or_default(), "ttl": ttl_ms.max(1)});
        let reply: ResolveReply = self.script(&scripts::RESOLVE_CLAIM, &[idem.to_owned()], &record).await?;
        Ok(match reply {
            ResolveReply::Resolved => None,
            ResolveReply::Lost { current } => Some(current),
        })
    }

    /// Queues the nodes of a task made on hold for a claimed idempotency key (nothing when it is
    /// not on hold, or ended meanwhile). Anyone that finds the key naming the task may, so that a
    /// creator that stopped between pointing the key at it and queueing it strands nothing.
    async fn release_task(&self, task_id: &str) -> Result<(), StoreError> {
        let Some(shard) = self.task_shard(task_id) else { return Ok(()) };
        let key = shard.task(task_id);
        for _ in 0..3 {
            let queues: Option<String> = self.query(|| redis::Cmd::hget(&key, "queues")).await?;
            let Some(queues) = queues else { return Ok(()) };
            let queues: Vec<String> = serde_json::from_str(&queues)
                .map_err(|e| StoreError::Corrupt(format!("task {task_id} queues: {e}")))?;
            let mut keys = vec![key.clone()];
            keys.extend(queues.iter().map(|q| shard.queue(q)));
            let record = json!({"task": task_id, "queues": queues.len()});
            match self.script(&scripts::RELEASE_TASK, &keys, &record).await? {
                ReleaseReply::Released { .. } | ReleaseReply::None => return Ok(()),
                ReleaseReply::QueuesChanged => continue,
            }
        }
        Err(StoreError::Corrupt(format!("task {task_id}: its queues keep changing while it is released")))
    }

    /// A retry found its idempotency key claimed long ago by a create that never finished: the
    /// claim names the task's id but its shard, so the task is looked for in every shard. Found,
    /// the key is pointed at it and it is queued (the retry's answer); not found, the claim is
    /// dropped and the retry makes the task itself (`None`). A creator that wakes up afterwards
    /// finds its claim gone and drops what it made, which never ran.
    async fn finish_abandoned_claim(
        &self,
        new: &NewTask,
        claim: &str,
    ) -> Result<Option<Created>, StoreError> {
        let (token, their_fingerprint) = claim.split_once(' ').unwrap_or((claim, ""));
        let suffix = token.trim_start_matches('?').split('@').next().unwrap_or_default();
        let (Some(key), Some(home)) = (&new.idempotency_key, self.task_shard(&new.task_id)) else {
            return Ok(None);
        };
        let idem = home.idempotency(&new.owner, key);
        let mut found = None;
        for shard in self.all_shards() {
            let id = format!("{:04x}{suffix}", shard.0);
            if self.task_shard(&id).is_none() {
                continue;
            }
            let task = shard.task(&id);
            let exists: bool = self.query(|| redis::Cmd::exists(&task)).await?;
            if exists {
                found = Some(id);
                break;
            }
        }
        let Some(id) = found else {
            self.resolve_claim(&idem, claim, None, 0).await?;
            return Ok(None);
        };
        let value = format!("{id} {their_fingerprint}");
        let ttl = new.ttl_ms.saturating_add(IDEMPOTENCY_SLACK_MS);
        if self.resolve_claim(&idem, claim, Some(&value), ttl).await?.is_some() {
            return Ok(None);
        }
        self.release_task(&id).await?;
        Ok(Some(if their_fingerprint == fingerprint(new) {
            Created::Duplicate(id)
        } else {
            Created::Conflict(id)
        }))
    }

    /// Keeps the log level a session asked for (`logging/setLevel`) for a day after it last did.
    pub async fn set_log_level(&self, scope: &str, level: crate::model::LogLevel) -> Result<(), StoreError> {
        let key = crate::keys::log_level(scope);
        self.query(|| redis::Cmd::set_ex(&key, level.as_str(), LOG_LEVEL_TTL_S)).await
    }

    /// The log level a session asked for, if it did.
    pub async fn log_level(&self, scope: &str) -> Result<Option<crate::model::LogLevel>, StoreError> {
        let key = crate::keys::log_level(scope);
        let level: Option<String> = self.query(|| redis::Cmd::get(&key)).await?;
        Ok(level.and_then(|l| l.parse().ok()))
    }

    /// Turns the hidden task of a synchronous call that its gateway stopped waiting for into the
    /// client's task (listed for `owner`, whose index is kept `index_retention_ms` at least), so
    /// that the client can fetch, follow and cancel it. Safe to repeat.
    pub async fn escalate_overdue(
        &self,
        task_id: &str,
        owner: &str,
        index_retention_ms: u64,
    ) -> Result<Overdue, StoreError> {
        let Some(shard) = self.task_shard(task_id) else { return Ok(Overdue::Missing) };
        let keys = [shard.task(task_id), shard.owner_tasks(owner)];
        let record = json!({
            "task": task_id, "message": "", "overdue": true, "retention": index_retention_ms.max(1),
        });
        // The client is told of the task at once: its new mode must survive a failover.
        let reply: super::nodes::EscalateReply =
            self.durable_script(&scripts::ESCALATE_TASK, &keys, &record).await?;
        Ok(match reply {
            super::nodes::EscalateReply::Escalated => Overdue::Escalated,
            super::nodes::EscalateReply::Terminal => Overdue::Settled,
            super::nodes::EscalateReply::Missing => Overdue::Missing,
            // Not answers to the gateway: it fences nothing, and any live call escalates.
            super::nodes::EscalateReply::Unchanged | super::nodes::EscalateReply::Stale => {
                return Err(StoreError::Corrupt(format!(
                    "escalate_task answered an overdue call {task_id} as a tool's"
                )));
            }
        })
    }

    /// The tasks of the synchronous calls made under one call key ([`NewTask::call_key`]), newest
    /// first: the last [`CALLS_KEPT`] within the longest TTL among them.
    pub async fn call_tasks(&self, call_key: &str) -> Result<Vec<String>, StoreError> {
        self.query(|| redis::Cmd::lrange(call_key, 0, -1)).await
    }

    /// Reads a task; `None` when it does not exist: never created, expired (its TTL counts from
    /// creation, by Redis's clock, read in the same round trip), or an id that names no shard.
    pub async fn get_task(&self, task_id: &str) -> Result<Option<TaskRecord>, StoreError> {
        let Some(shard) = self.task_shard(task_id) else { return Ok(None) };
        let mut pipe = redis::pipe();
        pipe.cmd("HMGET").arg(shard.task(task_id)).arg(&TASK_FIELDS[..]).cmd("TIME");
        let (values, now): (Vec<Option<String>>, (u64, u64)) = self.pipeline(&pipe).await?;
        Self::live_record(task_id, values, super::redis_ms(now))
    }

    /// Whether a task exists, has not settled and is within its TTL (by Redis's clock): what a
    /// worker asks before it removes something a task may still use (a scratch copy on disk).
    /// Reads three fields, never the task's result; `false` for an id that names no shard.
    pub async fn task_is_live(&self, task_id: &str) -> Result<bool, StoreError> {
        let Some(shard) = self.task_shard(task_id) else { return Ok(false) };
        let mut pipe = redis::pipe();
        pipe.cmd("HMGET").arg(shard.task(task_id)).arg("status").arg("createdAt").arg("ttlMs").cmd("TIME");
        type Head = (Option<String>, Option<u64>, Option<u64>);
        let ((status, created, ttl), now): (Head, (u64, u64)) = self.pipeline(&pipe).await?;
        let (Some(status), Some(created), Some(ttl)) = (status, created, ttl) else { return Ok(false) };
        let settled = status.parse::<TaskStatus>().map_or(true, TaskStatus::is_terminal);
        Ok(!settled && created.saturating_add(ttl) > super::redis_ms(now))
    }

    /// A task read as the values of [`TASK_FIELDS`], unless it is gone for its readers (unsettled
    /// past its TTL) at `now` (Redis's clock: a process whose clock runs ahead must not take a live
    /// task for an expired one).
    pub(crate) fn live_record(
        task_id: &str,
        values: Vec<Option<String>>,
        now: u64,
    ) -> Result<Option<TaskRecord>, StoreError> {
        let task = TaskRecord::from_fields(task_id, values).map_err(StoreError::Corrupt)?;
        Ok(task.filter(|t| !t.expired_at(now)))
    }

    /// Starts waiting on a task from this process: its inbox joins the task's waiters, and the task
    /// is read in the same step, so that no event falls between the read and the wait. Register a
    /// local waiter ([`crate::events::EventHub::waiter`]) first. With `owner` (not empty), a task
    /// of another owner is read but not joined: nothing is written to what the caller may not see.
    pub async fn watch_task(
        &self,
        task_id: &str,
        inbox: &str,
        owner: &str,
    ) -> Result<Option<TaskRecord>, StoreError> {
        let (values, now) = self.watch_fields(task_id, inbox, owner, &TASK_FIELDS).await?;
        let task = Self::live_record(task_id, values, now)?;
        self.confirm_if_settled(task.as_ref().map(|t| (t.task_id.as_str(), t.status))).await?;
        Ok(task)
    }

    /// [`Store::watch_task`] without the task's result and error, for a follower that reads them
    /// only once the task has settled, and counts them against its caller's memory budget then.
    pub async fn watch_task_without_result(
        &self,
        task_id: &str,
        inbox: &str,
        owner: &str,
    ) -> Result<Option<TaskRecord>, StoreError> {
        let fields: Vec<&str> =
            TASK_FIELDS.into_iter().filter(|f| !matches!(*f, "result" | "error")).collect();
        let (values, now) = self.watch_fields(task_id, inbox, owner, &fields).await?;
        let hash: HashMap<String, String> = fields
            .iter()
            .zip(values)
            .filter_map(|(field, value)| Some(((*field).to_owned(), value?)))
            .collect();
        let task = TaskRecord::from_hash(task_id, hash).map_err(StoreError::Corrupt)?;
        let task = task.filter(|t| !t.expired_at(now));
        self.confirm_if_settled(task.as_ref().map(|t| (t.task_id.as_str(), t.status))).await?;
        Ok(task)
    }

    /// [`Store::confirm_settled`] for a task read for a client, when it has settled.
    pub(crate) async fn confirm_if_settled(
        &self,
        task: Option<(&str, TaskStatus)>,
    ) -> Result<(), StoreError> {
        match task {
            Some((task_id, status)) if status.is_terminal() => match self.task_shard(task_id) {
                Some(shard) => self.confirm_settled(&shard.task(task_id)).await,
                None => Ok(()),
            },
            _ => Ok(()),
        }
    }

    /// The values of `fields`, and Redis's clock (ms) when they were read.
    async fn watch_fields(
        &self,
        task_id: &str,
        inbox: &str,
        owner: &str,
        fields: &[&str],
    ) -> Result<(Vec<Option<String>>, u64), StoreError> {
        let Some(shard) = self.task_shard(task_id) else { return Ok((Vec::new(), 0)) };
        let key = shard.task(task_id);
        let (inbox, owner) = (inbox.to_owned(), owner.to_owned());
        let mut values: Vec<Option<String>> = self
            .run(scripts::WATCH_TASK.name, |mut c| {
                let (key, inbox, owner) = (key.clone(), inbox.clone(), owner.clone());
                async move {
                    let mut invocation = scripts::WATCH_TASK.prepare_invoke();
                    invocation.key(key).arg(inbox).arg(owner).arg(fields);
                    invocation.invoke_async(&mut c).await
                }
            })
            .await?;
        // The script's last value is Redis's clock; no values at all, no such task.
        let now = values.pop().flatten().and_then(|now| now.parse().ok()).unwrap_or(0);
        Ok((values, now))
    }

    /// Reads a task's nodes, ordered by node id.
    pub async fn get_nodes(&self, task_id: &str) -> Result<Vec<NodeRecord>, StoreError> {
        let Some(shard) = self.task_shard(task_id) else { return Ok(Vec::new()) };
        let key = shard.task(task_id);
        let hash: HashMap<String, String> = self.query(|| redis::Cmd::hgetall(&key)).await?;
        Ok(NodeRecord::from_hash(hash))
    }

    /// The keys of `cancel_task` for a task: its hash, the shard's load, expiry and kept indexes,
    /// and the task's work streams, whose entries of its queued nodes it deletes (ADR-0028).
    async fn cancel_keys(&self, shard: Shard, task_id: &str) -> Result<Vec<String>, StoreError> {
        let mut keys = vec![shard.task(task_id), shard.load(), shard.expiring(), shard.kept()];
        let queues: Option<String> = self.query(|| redis::Cmd::hget(shard.task(task_id), "queues")).await?;
        keys.extend(stored_streams(shard, queues.as_deref()));
        Ok(keys)
    }

    /// Cancels a live task (one script) and tells its waiters and every worker. `owner` empty
    /// skips the owner check. Safe to repeat after a lost reply: the cancel carries a token of
    /// its own, so a repeat answers `Cancelled` again instead of `AlreadyTerminal`.
    pub async fn cancel_task(
        &self,
        task_id: &str,
        owner: &str,
        message: &str,
    ) -> Result<CancelOutcome, StoreError> {
        let Some(shard) = self.task_shard(task_id) else { return Ok(CancelOutcome::Missing) };
        let keys = self.cancel_keys(shard, task_id).await?;
        let record = json!({
            "task": task_id, "owner": owner, "message": message,
            "cancelChannel": shard.cancel_channel(), "token": format!("{:016x}", rand::random::<u64>()),
        });
        let reply: Value = self.durable_transition(&scripts::CANCEL_TASK, &keys, &record).await?;
        let reply: CancelReply = super::effects::recorded(reply)?;
        Ok(match reply {
            CancelReply::Cancelled => CancelOutcome::Cancelled,
            CancelReply::Terminal { status } => CancelOutcome::AlreadyTerminal(status),
            CancelReply::Missing => CancelOutcome::Missing,
            // Only a cancel of a parked round answers this.
            CancelReply::NotParked => CancelOutcome::AlreadyTerminal("working".to_owned()),
        })
    }

    /// Ends a synchronous call that waits in an input round its client was told of (an abandoned
    /// round: its owner has more unanswered rounds than it may), as cancelled, with `message`.
    /// Returns whether it did: `false` when the call is not waiting in a round any more (answered
    /// meanwhile, or ended), and nothing changed.
    pub(crate) async fn end_abandoned_round(&self, task_id: &str, message: &str) -> Result<bool, StoreError> {
        let Some(shard) = self.task_shard(task_id) else { return Ok(false) };
        let keys = self.cancel_keys(shard, task_id).await?;
        let record = json!({
            "task": task_id, "owner": "", "message": message, "cancelChannel": shard.cancel_channel(),
            "token": format!("{:016x}", rand::random::<u64>()), "parkedRound": true,
        });
        let reply: Value = self.durable_transition(&scripts::CANCEL_TASK, &keys, &record).await?;
        Ok(matches!(super::effects::recorded(reply)?, CancelReply::Cancelled))
    }

    /// Records a client's answers to a task's pending input requests (one script); a parked node
    /// whose requests are all answered is queued again. `responses` maps keys to the client's
    /// results; keys that are not pending are ignored, and so is an answer whose key `rounds`
    /// names with another round than the one that asked it (a replayed or late answer).
    pub async fn answer_input(
        &self,
        task_id: &str,
        owner: &str,
        responses: &serde_json::Map<String, Value>,
        rounds: &HashMap<String, u64>,
    ) -> Result<AnswerOutcome, StoreError> {
        let Some(shard) = self.task_shard(task_id) else { return Ok(AnswerOutcome::Missing) };
        let key = shard.task(task_id);
        // Each answer travels as its own JSON text, which the script stores without decoding.
        let texts: serde_json::Map<String, Value> =
            responses.iter().map(|(k, v)| (k.clone(), Value::String(v.to_string()))).collect();
        // The script needs the streams of the task's queues; a plan expanding meanwhile can add
        // one, which the script notices, and the answer is sent again with the new list.
        for _ in 0..3 {
            let queues: Option<String> = self.query(|| redis::Cmd::hget(&key, "queues")).await?;
            let Some(queues) = queues else { return Ok(AnswerOutcome::Missing) };
            let queues: Vec<String> = serde_json::from_str(&queues)
                .map_err(|e| StoreError::Corrupt(format!("task {task_id} queues: {e}")))?;
            let mut keys = vec![key.clone(), shard.load(), shard.rounds(owner)];
            keys.extend(queues.iter().map(|q| shard.queue(q)));
            let record = json!({
                "task": task_id, "owner": owner, "responses": texts, "rounds": rounds,
                "queues": queues.len(),
            });
            let reply: AnswerReply = self.script(&scripts::ANSWER_INPUT, &keys, &record).await?;
            return Ok(match reply {
                AnswerReply::Missing => AnswerOutcome::Missing,
                AnswerReply::Denied => AnswerOutcome::Denied,
                AnswerReply::NotWaiting { status } => AnswerOutcome::NotWaiting(status),
                AnswerReply::Answered { remaining, resumed } => {
                    AnswerOutcome::Answered { remaining, resumed }
                }
                AnswerReply::QueuesChanged => continue,
            });
        }
        Err(StoreError::Corrupt(format!("task {task_id}: its queues keep changing while it is answered")))
    }
}

/// A task as JSON for a person or a script (the `conveyor redis tasks show` output).
pub fn task_summary(task: &crate::model::TaskStatusRecord, nodes: &[NodeRecord]) -> Value {
    json!({
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
