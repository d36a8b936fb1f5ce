//! Nodes: a worker starts a batch of entries in one round trip, and then each attempt reports
//! progress, asks for input, and completes (settling, releasing dependents, acknowledging its
//! entry and telling the task's waiters in one script), hands itself back, or plans a graph.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::{Value, json};

use super::Store;
use super::tasks::{INLINE_MAX, QueueList, graph_nodes};
use crate::call::CallRecord;
use crate::dag::{self, DagSpec};
use crate::error::StoreError;
use crate::input::InputRequired;
use crate::keys::Shard;
use crate::model::{RpcError, TaskEvent, ToolOutcome, WorkItem};
use crate::scripts;

/// A started attempt of a node: everything its later transitions need to find their keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    pub shard: Shard,
    pub task_id: String,
    pub node_id: String,
    /// The attempt number: the fencing token of every later transition.
    pub number: u32,
    /// The task's queues, whose streams a completion may add entries to.
    pub queues: Vec<String>,
    /// The stream and entry the attempt was started from.
    pub stream: String,
    pub entry_id: String,
    pub traceparent: Option<String>,
    /// The principal the task belongs to, whose share of the worker's slots the attempt takes.
    pub owner: String,
    /// The node's tool ("" when its start could not read it).
    pub tool: String,
    /// Whether nodes were set aside in the shard when the attempt started: its completion then
    /// puts one of its queue's back on the stream.
    pub release_held: bool,
    /// Whether a tool error fails the task (the call's wire says so: 2025-11-25), for the
    /// completion that settles it.
    pub tool_error_fails: bool,
    /// The worker (consumer) that runs it.
    pub worker: String,
}

impl Attempt {
    /// The attempt's number as tools, spans and logs see it: a lean attempt (0: not adopted,
    /// ADR-0028) is its node's first.
    pub fn try_number(&self) -> u32 {
        self.number.max(1)
    }

    /// Whether this is a lean attempt that no transition has adopted into the running state.
    pub fn is_lean(&self) -> bool {
        self.number == 0
    }
}

/// A node a worker starts: its attempt, and what it runs with, as `start_nodes` handed it over.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeStart {
    pub attempt: Attempt,
    /// The tool to call, or `$noop` / `$collect` for a built-in node.
    pub tool: String,
    /// A graph node's own arguments (its `{"$from": ...}` objects are references); `None` for a
    /// single call's node, which runs with the call's arguments (`call.arguments`).
    pub node_arguments: Option<Value>,
    /// Limit of this attempt.
    pub timeout: Option<std::time::Duration>,
    /// How often this node's worker was lost while running it.
    pub losses: u32,
    /// The answers to the requests the node parked with, by the tool's keys (or the answers the
    /// call came with); empty when it asked nothing.
    pub answers: serde_json::Map<String, Value>,
    /// The state the node parked with.
    pub state: Option<Value>,
    /// The call record, as the task stores it.
    pub call: std::sync::Arc<CallRecord>,
}

impl NodeStart {
    /// Whether the node belongs to a graph: only then are `{"$from": ...}` objects in its
    /// arguments references; in a single call they are the client's data.
    pub fn in_graph(&self) -> bool {
        self.node_arguments.is_some()
    }

    /// The arguments as stored: the node's own, or the call's.
    pub fn arguments(&self) -> &Value {
        self.node_arguments.as_ref().unwrap_or(&self.call.arguments)
    }
}

/// What a worker must do with one entry of a batch it read.
#[derive(Debug, Clone, PartialEq)]
pub enum StartOutcome {
    Run(Box<NodeStart>),
    /// The worker gives the node's owner all the slots it may have, and the entry was not marked
    /// to be set aside: nothing changed; the worker may try it again when the owner has a free
    /// slot, or set it aside.
    Capped {
        owner: String,
    },
    /// The worker gives the node's owner all the slots it may have: the node was set aside (its
    /// queue's held list) until a slot of its queue comes free, so that other owners' work behind
    /// it starts now.
    Deferred,
    /// The entry went back to its queue for another worker (this one had no free slot).
    HandedBack,
    /// The entry was acknowledged without running, for the given reason.
    Skip(String),
    /// What the entry's task stores could not be read, or Redis refused a write of this item: it
    /// alone did not start. `attempt`: the attempt that did start (its node is bound to it) before
    /// what it runs with turned out unreadable, for the worker to fail; `None`: nothing started,
    /// and the entry stays pending as it was, for the worker to try again or for the maintenance
    /// to queue again once it has gone unrenewed for a lease.
    Unreadable {
        attempt: Option<Box<Attempt>>,
        reason: String,
    },
}

/// How many more of a worker's slots each owner may take, for a batch it starts: owners at zero
/// have their nodes set aside ([`StartOutcome::Deferred`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlotShares {
    /// Owners the worker runs nodes of now, and how many more each may take.
    pub room: HashMap<String, u64>,
    /// How many an owner not in `room` may take; `None`: any number.
    pub default: Option<u64>,
    /// Entries (stream, entry id) to set aside when their owner has no room
    /// ([`StartOutcome::Deferred`]); any other such entry is left as it is
    /// ([`StartOutcome::Capped`]).
    pub set_aside: std::collections::HashSet<(String, String)>,
}

impl SlotShares {
    /// No share: every owner may take every slot.
    pub fn unlimited() -> Self {
        Self::default()
    }
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
    /// The node was recorded, but the task had already ended; the output is dropped.
    TaskAlreadyTerminal,
    /// The attempt was stale (the node was retried, taken over or settled meanwhile); nothing was
    /// written.
    Stale,
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

/// A started node as `start_nodes` answers it (an array, in this order).
struct RunReply {
    attempt: u32,
    tool: String,
    args: String,
    call: String,
    timeout_ms: u64,
    losses: u32,
    /// The task's queues as stored: a JSON array.
    queues: String,
    answers: String,
    state: String,
    owner: String,
    set_aside: bool,
}

enum StartReply {
    Run(Box<RunReply>),
    Capped { owner: String },
    Deferred,
    HandedBack,
    Skip { reason: String },
    Bad { reason: String },
}

impl StartReply {
    /// One item of `start_nodes`' reply: an array whose first element names the outcome.
    fn from_value(value: redis::Value) -> Result<Self, StoreError> {
        let corrupt = |what: &str| StoreError::Corrupt(format!("start_nodes reply: {what}"));
        let mut fields = match value {
            redis::Value::Array(fields) => fields.into_iter(),
            other => return Err(corrupt(&format!("not an array: {other:?}"))),
        };
        let mut next = |name: &str| fields.next().ok_or_else(|| corrupt(&format!("no {name}")));
        let text = |value: redis::Value, name: &str| {
            redis::from_redis_value::<String>(value).map_err(|e| corrupt(&format!("{name}: {e}")))
        };
        // Counts that no script writes negative: one that is, is as corrupt as a missing one.
        let number = |value: redis::Value, name: &str| {
            let n = redis::from_redis_value::<i64>(value).map_err(|e| corrupt(&format!("{name}: {e}")))?;
            u64::try_from(n).map_err(|_| corrupt(&format!("{name} is {n}")))
        };
        let outcome = text(next("outcome")?, "outcome")?;
        Ok(match outcome.as_str() {
            "run" => {
                let attempt =
                    u32::try_from(number(next("attempt")?, "attempt")?).map_err(|_| corrupt("attempt"))?;
                let tool = text(next("tool")?, "tool")?;
                let args = text(next("args")?, "args")?;
                let call = text(next("call")?, "call")?;
                let timeout_ms = number(next("timeoutMs")?, "timeoutMs")?;
                let losses =
                    u32::try_from(number(next("losses")?, "losses")?).map_err(|_| corrupt("losses"))?;
                StartReply::Run(Box::new(RunReply {
                    attempt,
                    tool,
                    args,
                    call,
                    timeout_ms,
                    losses,
                    queues: text(next("queues")?, "queues")?,
                    answers: text(next("answers")?, "answers")?,
                    state: text(next("state")?, "state")?,
                    owner: text(next("owner")?, "owner")?,
                    set_aside: number(next("setAside")?, "setAside")? != 0,
                }))
            }
            "capped" => StartReply::Capped { owner: text(next("owner")?, "owner")? },
            "deferred" => StartReply::Deferred,
            "handedBack" => StartReply::HandedBack,
            "skip" => StartReply::Skip { reason: text(next("reason")?, "reason")? },
            "bad" => StartReply::Bad { reason: text(next("reason")?, "reason")? },
            other => return Err(corrupt(&format!("unknown outcome {other:?}"))),
        })
    }
}

/// The attempt a `run` reply names, read from its first two fields alone: known even when the rest
/// of the reply cannot be read, so that the attempt can still be failed.
fn started_attempt(reply: &redis::Value) -> Option<u32> {
    let redis::Value::Array(fields) = reply else { return None };
    match fields.as_slice() {
        [redis::Value::BulkString(outcome), redis::Value::Int(attempt), ..] if outcome == b"run" => {
            u32::try_from(*attempt).ok()
        }
        _ => None,
    }
}

/// The attempt `number` of `item`'s node; `queues` as the task stores them (JSON), or, when they
/// cannot be read, the queue of the item's stream alone.
fn attempt_of(
    shard: Shard,
    item: &WorkItem,
    number: u32,
    queues: Option<Vec<String>>,
    owner: &str,
    worker: &str,
) -> Attempt {
    let queues = queues.unwrap_or_else(|| {
        crate::keys::queue_of_stream(&item.stream).map(str::to_owned).into_iter().collect()
    });
    Attempt {
        shard,
        task_id: item.task_id.clone(),
        node_id: item.node_id.clone(),
        number,
        queues,
        stream: item.stream.clone(),
        entry_id: item.entry_id.clone(),
        traceparent: item.traceparent.clone(),
        owner: owner.to_owned(),
        tool: String::new(),
        release_held: false,
        tool_error_fails: false,
        worker: worker.to_owned(),
    }
}

/// A started node as the worker runs it ([`StartOutcome::Run`]); when a stored record it needs
/// cannot be read, the attempt that was started, for the worker to fail, and what was wrong
/// ([`StartOutcome::Unreadable`]).
fn started(shard: Shard, item: &WorkItem, run: RunReply, worker: &str) -> StartOutcome {
    let queues: Result<Vec<String>, _> = serde_json::from_str(&run.queues);
    let mut attempt = attempt_of(shard, item, run.attempt, queues.as_ref().ok().cloned(), &run.owner, worker);
    attempt.release_held = run.set_aside;
    attempt.tool = run.tool.clone();
    let unreadable = |attempt: Attempt, reason: String| StartOutcome::Unreadable {
        attempt: Some(Box::new(attempt)),
        reason,
    };
    if let Err(e) = queues {
        return unreadable(attempt, format!("the task's queues {:?}: {e}", run.queues));
    }
    let call = match CallRecord::from_text(&run.call) {
        Ok(call) => call,
        Err(e) => return unreadable(attempt, format!("the call record: {e}")),
    };
    let node_arguments = if run.args.is_empty() {
        None
    } else {
        match serde_json::from_str(&run.args) {
            Ok(args) => Some(args),
            Err(e) => return unreadable(attempt, format!("the node's arguments: {e}")),
        }
    };
    let answers = match serde_json::from_str::<Value>(&run.answers) {
        Ok(Value::Object(answers)) => answers,
        _ => serde_json::Map::new(),
    };
    attempt.tool_error_fails = call.tool_error_fails();
    StartOutcome::Run(Box::new(NodeStart {
        attempt,
        tool: run.tool,
        node_arguments,
        timeout: (run.timeout_ms > 0).then(|| std::time::Duration::from_millis(run.timeout_ms)),
        losses: run.losses,
        answers,
        state: serde_json::from_str::<Value>(&run.state).ok(),
        call: std::sync::Arc::new(call),
    }))
}

#[derive(Deserialize)]
#[serde(tag = "outcome", rename_all = "camelCase")]
enum CompleteReply {
    Stale,
    #[serde(rename_all = "camelCase")]
    Retry {
        delay_ms: u64,
    },
    Dropped,
    Settled,
    Released {
        count: u32,
    },
    Finalize,
}

#[derive(Deserialize)]
#[serde(tag = "outcome", rename_all = "camelCase")]
enum FencedReply {
    Recorded,
    Released,
    Refused,
    Stale,
}

/// How a park was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParkOutcome {
    /// The node waits for its answers; its entry is acknowledged.
    Parked,
    /// The task ended meanwhile; the entry is acknowledged and nothing waits.
    TaskAlreadyTerminal,
    /// The attempt was stale; nothing was written.
    Stale,
}

#[derive(Deserialize)]
#[serde(tag = "outcome", rename_all = "camelCase")]
enum ParkReply {
    Parked {
        #[serde(default)]
        over: u32,
    },
    Dropped,
    Stale,
}

#[derive(Deserialize)]
#[serde(tag = "outcome", rename_all = "camelCase")]
pub(super) enum EscalateReply {
    Escalated,
    Unchanged,
    Stale,
    Terminal,
    Missing,
}

#[derive(Deserialize)]
#[serde(tag = "outcome", rename_all = "camelCase")]
enum ExpandReply {
    Expanded { count: u32 },
    Stale,
    Dropped,
    Refused { reason: String },
}

#[derive(Deserialize)]
#[serde(tag = "outcome", rename_all = "camelCase")]
enum SettleReply {
    Settled,
    Dropped,
}

/// The graph limits a task's `planLimits` field names ("maxNodes maxNodeBytes ..."); the defaults
/// for a task stored without one.
fn plan_limits(stored: Option<&str>) -> dag::DagLimits {
    let mut numbers = stored.unwrap_or_default().split(' ').map(str::parse::<usize>);
    match (numbers.next(), numbers.next()) {
        (Some(Ok(max_nodes)), Some(Ok(max_node_bytes))) => {
            dag::DagLimits { max_nodes, max_node_bytes, ..dag::DagLimits::default() }
        }
        _ => dag::DagLimits::default(),
    }
}

fn completion_message(is_error: bool) -> String {
    if is_error { "Completed: the tool reported an error".to_owned() } else { "Completed".to_owned() }
}

/// How soon the shard's maintenance puts a set-aside node back on its stream when no finishing
/// node of its queue does.
pub const RELEASE_SET_ASIDE_AFTER: std::time::Duration = std::time::Duration::from_millis(500);

impl Store {
    /// Starts a batch of entries read from one shard, in one script: the first `run` of them start
    /// their node's next attempt; the rest go back to their queue for another worker.
    pub async fn start_batch(
        &self,
        shard: Shard,
        items: &[WorkItem],
        run: usize,
        worker: &str,
        shares: &SlotShares,
    ) -> Result<Vec<StartOutcome>, StoreError> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let mut keys = vec![shard.load()];
        let mut rows = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            keys.push(shard.task(&item.task_id));
            keys.push(item.stream.clone());
            keys.push(shard.held(crate::keys::queue_of_stream(&item.stream).unwrap_or_default()));
            rows.push(json!({
                "task": item.task_id, "node": item.node_id, "entry": item.entry_id,
                "trace": item.traceparent.clone().unwrap_or_default(), "run": i < run,
                "mayDefer": shares.set_aside.contains(&(item.stream.clone(), item.entry_id.clone())),
            }));
        }
        let default_room = shares.default.map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX));
        let record = json!({
            "worker": worker, "items": rows, "room": shares.room, "defaultRoom": default_room,
            "cancelChannel": shard.cancel_channel(), "releaseAfterMs": RELEASE_SET_ASIDE_AFTER.as_millis() as u64,
        });
        let replies: Vec<redis::Value> = self.script_reply(&scripts::START_NODES, &keys, &record).await?;
        if replies.len() != items.len() {
            return Err(StoreError::Corrupt(format!(
                "{} start replies for {} entries",
                replies.len(),
                items.len()
            )));
        }
        // Each item is read on its own: one whose record cannot be read fails alone.
        Ok(items
            .iter()
            .zip(replies)
            .map(|(item, reply)| {
                let number = started_attempt(&reply);
                let unreadable = |reason: String| StartOutcome::Unreadable {
                    attempt: number.map(|number| Box::new(attempt_of(shard, item, number, None, "", worker))),
                    reason,
                };
                match StartReply::from_value(reply) {
                    Err(e) => unreadable(e.to_string()),
                    Ok(StartReply::Run(run)) => started(shard, item, *run, worker),
                    Ok(StartReply::Capped { owner }) => StartOutcome::Capped { owner },
                    Ok(StartReply::Deferred) => StartOutcome::Deferred,
                    Ok(StartReply::HandedBack) => StartOutcome::HandedBack,
                    Ok(StartReply::Skip { reason }) => StartOutcome::Skip(reason),
                    Ok(StartReply::Bad { reason }) => StartOutcome::Unreadable { attempt: None, reason },
                }
            })
            .collect())
    }

    /// Records progress of a running attempt. Returns `false` when refused (stale or not live).
    pub async fn report_progress(
        &self,
        attempt: &Attempt,
        progress: f64,
        total: Option<f64>,
        message: Option<&str>,
    ) -> Result<bool, StoreError> {
        // Lua reads "inf" as a number that no JSON can carry: such a report would wedge the task.
        if !progress.is_finite() || total.is_some_and(|t| !t.is_finite()) {
            return Err(StoreError::Refused(format!(
                "progress must be finite numbers (got {progress} of {total:?})"
            )));
        }
        let Some(attempt) = self.adopted(attempt).await? else { return Ok(false) };
        let attempt = attempt.as_ref();
        let record = json!({
            "task": attempt.task_id, "node": attempt.node_id, "attempt": attempt.number,
            "progress": progress.to_string(), "total": total.map(|t| t.to_string()), "message": message,
        });
        let reply: FencedReply =
            self.script(&scripts::REPORT_PROGRESS, &[self.task_key_of(attempt)], &record).await?;
        Ok(matches!(reply, FencedReply::Recorded))
    }

    /// Sends a message a running attempt logged to the clients that follow its task. Returns
    /// `false` when refused (stale or not live).
    pub async fn log(
        &self,
        attempt: &Attempt,
        level: crate::model::LogLevel,
        logger: &str,
        data: &Value,
    ) -> Result<bool, StoreError> {
        let event = TaskEvent::Log { level, logger: logger.to_owned(), data: data.clone() };
        self.notify_waiters(attempt, &event).await
    }

    /// Tells the gateways that follow the attempt's task over an SSE stream that the client may
    /// resume it later: they close the stream, asking the client to come back after `retry_ms`.
    pub async fn release_stream(&self, attempt: &Attempt, retry_ms: u64) -> Result<bool, StoreError> {
        self.notify_waiters(attempt, &TaskEvent::Reconnect { retry_ms }).await
    }

    async fn notify_waiters(&self, attempt: &Attempt, event: &TaskEvent) -> Result<bool, StoreError> {
        let Some(attempt) = self.adopted(attempt).await? else { return Ok(false) };
        let attempt = attempt.as_ref();
        let message = crate::model::InboxMessage { task_id: attempt.task_id.clone(), event: event.clone() };
        let record = json!({"node": attempt.node_id, "attempt": attempt.number, "event": message.encode()});
        let reply: FencedReply =
            self.script(&scripts::NOTIFY_WAITERS, &[self.task_key_of(attempt)], &record).await?;
        Ok(matches!(reply, FencedReply::Recorded))
    }

    /// Parks a running node until the client answers `input`: its entry is acknowledged, its
    /// requests join the task's pending input, and the task goes to `input_required`.
    pub async fn park(&self, attempt: &Attempt, input: &InputRequired) -> Result<ParkOutcome, StoreError> {
        let Some(attempt) = self.adopted(attempt).await? else { return Ok(ParkOutcome::Stale) };
        let attempt = attempt.as_ref();
        // Each request travels as its own JSON text, which the script stores without decoding.
        let requests: serde_json::Map<String, Value> =
            input.requests.iter().map(|(k, v)| (k.clone(), Value::String(v.to_string()))).collect();
        let keys = [
            self.task_key_of(attempt),
            attempt.stream.clone(),
            attempt.shard.load(),
            attempt.shard.rounds(&attempt.owner),
        ];
        let message = format!(
            "Waiting for input: {}",
            input.requests.keys().map(String::as_str).collect::<Vec<_>>().join(", ")
        );
        let record = json!({
            "task": attempt.task_id, "node": attempt.node_id, "attempt": attempt.number,
            "requests": requests, "state": input.state.as_ref().map(Value::to_string).unwrap_or_default(),
            "message": message, "inlineMax": INLINE_MAX,
        });
        let reply: ParkReply = self.script(&scripts::PARK_NODE, &keys, &record).await?;
        Ok(match reply {
            ParkReply::Parked { over } => {
                // The park is done; a round left over its owner's bound is ended by the next park
                // when this cannot end it now.
                if over > 0
                    && let Err(e) = self.end_oldest_rounds(attempt, over).await
                {
                    tracing::warn!(task = %attempt.task_id, error = %e, "could not end the oldest unanswered rounds");
                }
                ParkOutcome::Parked
            }
            ParkReply::Dropped => ParkOutcome::TaskAlreadyTerminal,
            ParkReply::Stale => ParkOutcome::Stale,
        })
    }

    /// The owner of `parked` has `over` more synchronous calls waiting in input rounds in its shard
    /// than its share: its oldest unanswered ones end, so that rounds a client abandons are bounded.
    /// Entries of the index whose call no longer waits in a round leave it on the way.
    async fn end_oldest_rounds(&self, parked: &Attempt, mut over: u32) -> Result<(), StoreError> {
        let index = parked.shard.rounds(&parked.owner);
        let oldest: Vec<String> =
            self.query(|| redis::cmd("ZRANGE").arg(&index).arg(0).arg(i64::from(over) + 63).clone()).await?;
        let message = "Cancelled: this call's round of input was left unanswered while its caller asked newer \
                       ones, more than it may leave waiting (max_parked_rounds_per_principal); call again";
        for task in oldest {
            if over == 0 {
                break;
            }
            if task == parked.task_id {
                continue;
            }
            if self.end_abandoned_round(&task, message).await? {
                over -= 1;
            }
            self.query::<()>(|| redis::Cmd::zrem(&index, &task)).await?;
        }
        Ok(())
    }

    /// Turns the hidden task of a synchronous call into the client's task, when the call allows
    /// it; the waiting gateway answers the call with the task. Returns whether the call is the
    /// client's task now: a repeat (after a lost reply) says so again.
    pub async fn escalate(&self, attempt: &Attempt, message: &str) -> Result<bool, StoreError> {
        let Some(attempt) = self.adopted(attempt).await? else { return Ok(false) };
        let attempt = attempt.as_ref();
        let record = json!({
            "task": attempt.task_id, "node": attempt.node_id, "attempt": attempt.number,
            "message": message,
        });
        let reply: EscalateReply =
            self.script(&scripts::ESCALATE_TASK, &[self.task_key_of(attempt)], &record).await?;
        Ok(matches!(reply, EscalateReply::Escalated))
    }

    fn task_key_of(&self, attempt: &Attempt) -> String {
        attempt.shard.task(&attempt.task_id)
    }

    /// Settles an attempt with the tool's outcome, or as cancelled when `outcome` is `None`; with
    /// `final_failure` a failure is not retried whatever retries are left (a node that lost its
    /// worker too often). An outcome larger than `max_output_bytes` of JSON (0: no limit) is not
    /// stored: the node fails for good with an error that names the limit. Acknowledges the
    /// attempt's entry in the same script.
    pub async fn complete(
        &self,
        attempt: &Attempt,
        outcome: Option<&ToolOutcome>,
        final_failure: bool,
        max_output_bytes: usize,
    ) -> Result<CompleteOutcome, StoreError> {
        self.complete_with(attempt, outcome, final_failure, true, max_output_bytes).await
    }

    /// Fails an attempt that was refused before it could do anything (it asked the client for
    /// something the client cannot give): no retry, and no dead letter, since nothing an
    /// operator could retry went wrong.
    pub async fn complete_refused(
        &self,
        attempt: &Attempt,
        error: RpcError,
    ) -> Result<CompleteOutcome, StoreError> {
        self.complete_with(attempt, Some(&ToolOutcome::Error(error)), true, false, 0).await
    }

    async fn complete_with(
        &self,
        attempt: &Attempt,
        outcome: Option<&ToolOutcome>,
        mut final_failure: bool,
        mut dead_letter: bool,
        max_output_bytes: usize,
    ) -> Result<CompleteOutcome, StoreError> {
        // What is stored must stay readable by every reader (serde_json stops at 128 levels, and
        // the record wraps the result): a deeper outcome fails the node instead of the readers.
        let too_deep;
        let outcome = match outcome {
            Some(ToolOutcome::Result(value))
            | Some(ToolOutcome::Error(RpcError { data: Some(value), .. }))
                if crate::json_limits::depth(value) > crate::json_limits::MAX_RESULT_DEPTH =>
            {
                too_deep = ToolOutcome::Error(RpcError {
                    code: -32603,
                    message: format!(
                        "the tool's outcome nests {} levels deep; at most {} are stored, so that every client can read it",
                        crate::json_limits::depth(value),
                        crate::json_limits::MAX_RESULT_DEPTH
                    ),
                    data: None,
                });
                Some(&too_deep)
            }
            other => other,
        };
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
            Some(ToolOutcome::InputRequired(_)) => {
                return Err(StoreError::Corrupt(
                    "a request for input parks the node, not completes it".to_owned(),
                ));
            }
        };
        let (status, payload, is_error, message) = if max_output_bytes > 0 && payload.len() > max_output_bytes
        {
            // Another attempt would most likely produce as much again, and an operator cannot
            // make it smaller: no retry, no dead letter.
            final_failure = true;
            dead_letter = false;
            let error = RpcError {
                code: -32603,
                message: format!(
                    "the node's {} is {} bytes of JSON; a node may store at most {max_output_bytes} (max_node_output_bytes)",
                    if status == "failed" { "error" } else { "result" },
                    payload.len()
                ),
                data: Some(
                    json!({"limit": "max_node_output_bytes", "max": max_output_bytes, "size": payload.len()}),
                ),
            };
            let message = format!("Failed: {}", error.message);
            let payload = serde_json::to_string(&error).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            ("failed", payload, false, message)
        } else {
            (status, payload, is_error, message)
        };
        if attempt.number == 0 && status == "completed" && !self.is_adopted(attempt) {
            // A lean attempt's result (ADR-0028): in its shard's next `complete_calls` batch,
            // unless it would pass its owner's stored bytes, which the full path fails it for.
            match self.complete_lean(attempt, &payload, is_error, &message).await? {
                super::lean::LeanCompleted::Settled => return Ok(CompleteOutcome::Settled),
                super::lean::LeanCompleted::Stale => return Ok(CompleteOutcome::Stale),
                super::lean::LeanCompleted::Dropped => return Ok(CompleteOutcome::TaskAlreadyTerminal),
                super::lean::LeanCompleted::Adopt => {}
            }
        }
        // The full path runs boxed, so that a lean completion's future (one per call) stays small.
        let Some(attempt) = Box::pin(self.adopted(attempt)).await? else { return Ok(CompleteOutcome::Stale) };
        let attempt = attempt.as_ref();
        let shard = attempt.shard;
        let mut keys = vec![shard.task(&attempt.task_id)];
        keys.extend(attempt.queues.iter().map(|q| shard.queue(q)));
        keys.extend(attempt.queues.iter().map(|q| shard.held(q)));
        let record = json!({
            "task": attempt.task_id, "node": attempt.node_id, "attempt": attempt.number,
            "queueCount": attempt.queues.len(), "releaseHeld": attempt.release_held,
            "outcome": status, "payload": payload, "isError": is_error, "message": message,
            "jitter": rand::random::<f64>(), "maxBackoffMs": dag::MAX_BACKOFF_MS, "final": final_failure,
            "deadLetter": dead_letter, "toolErrorFails": attempt.tool_error_fails,
            "cancelChannel": shard.cancel_channel(), "inlineMax": INLINE_MAX,
            "deadLetterCopyMax": super::dead_letters::DEAD_LETTER_COPY_MAX,
        });
        let reply =
            Box::pin(self.complete_in_batch(shard, super::completions::Completion { keys, record })).await?;
        let reply: CompleteReply = super::effects::recorded(reply)?;
        Ok(match reply {
            CompleteReply::Stale => CompleteOutcome::Stale,
            CompleteReply::Retry { delay_ms } => CompleteOutcome::Retry { delay_ms },
            CompleteReply::Dropped => CompleteOutcome::TaskAlreadyTerminal,
            CompleteReply::Settled => CompleteOutcome::Settled,
            CompleteReply::Released { count } => CompleteOutcome::Released(count),
            CompleteReply::Finalize => CompleteOutcome::Finalize,
        })
    }

    /// Hands a running node back to its queue (a new entry) and acknowledges its old entry.
    /// Returns `false` when the attempt is stale and nothing changed.
    pub async fn release(&self, attempt: &Attempt) -> Result<bool, StoreError> {
        let Some(attempt) = self.adopted(attempt).await? else { return Ok(false) };
        let attempt = attempt.as_ref();
        let shard = attempt.shard;
        let keys = [shard.task(&attempt.task_id), shard.load(), attempt.stream.clone()];
        let record = json!({
            "task": attempt.task_id, "node": attempt.node_id, "attempt": attempt.number,
            "trace": attempt.traceparent.clone().unwrap_or_default(),
        });
        let reply: FencedReply = self.script(&scripts::RELEASE_NODE, &keys, &record).await?;
        Ok(matches!(reply, FencedReply::Released))
    }

    /// Completes a planning node and adds its planned graph to the task (one script). The plan
    /// must have been checked for its shape; here it is held to the graph limits the call was
    /// created under (`max_dag_nodes`, `max_dag_node_bytes`), and the script holds its nodes to
    /// the shard's shares of the load limits. `queues` names the queue of each tool it calls.
    pub async fn expand_plan(
        &self,
        attempt: &Attempt,
        plan: &DagSpec,
        queues: &HashMap<String, String>,
    ) -> Result<ExpandOutcome, StoreError> {
        let Some(attempt) = self.adopted(attempt).await? else { return Ok(ExpandOutcome::Stale) };
        let attempt = attempt.as_ref();
        let shard = attempt.shard;
        let stored: Option<String> =
            self.query(|| redis::Cmd::hget(shard.task(&attempt.task_id), "planLimits")).await?;
        if let Err(e) = plan.validate(&plan_limits(stored.as_deref())) {
            return Ok(ExpandOutcome::Refused(format!(
                "invalid plan: {e} (max_dag_nodes, max_dag_node_bytes)"
            )));
        }
        let mut list = QueueList(attempt.queues.clone());
        let nodes = graph_nodes(plan, &mut list, queues);
        let mut keys = vec![shard.task(&attempt.task_id), shard.load()];
        keys.extend(list.streams(shard));
        let summary = crate::model::result::text(format!("planned {} nodes", plan.nodes.len()));
        let record = json!({
            "task": attempt.task_id, "node": attempt.node_id, "attempt": attempt.number,
            "output": summary.to_string(), "planOutput": plan.output.clone().unwrap_or_default(),
            "nodes": nodes, "queues": list.0,
        });
        let reply: ExpandReply = self.script(&scripts::EXPAND_PLAN, &keys, &record).await?;
        Ok(match reply {
            ExpandReply::Expanded { count } => ExpandOutcome::Expanded(count),
            ExpandReply::Refused { reason } => ExpandOutcome::Refused(reason),
            ExpandReply::Dropped => ExpandOutcome::TaskAlreadyTerminal,
            ExpandReply::Stale => ExpandOutcome::Stale,
        })
    }

    /// Completes a DAG task with its assembled result, unless it already ended, and acknowledges
    /// the finalize entry. Returns whether the task settled.
    pub async fn settle_dag(
        &self,
        item: &WorkItem,
        result: &Value,
        message: &str,
        tool_error_fails: bool,
    ) -> Result<bool, StoreError> {
        let shard = item.shard;
        let keys =
            [shard.task(&item.task_id), shard.load(), shard.expiring(), item.stream.clone(), shard.kept()];
        let record = json!({
            "task": item.task_id, "result": result.to_string(),
            "isError": crate::model::result::is_error(result), "message": message, "entry": item.entry_id,
            "inlineMax": INLINE_MAX, "toolErrorFails": tool_error_fails,
        });
        let reply: Value = self.durable_transition(&scripts::SETTLE_DAG, &keys, &record).await?;
        let reply: SettleReply = super::effects::recorded(reply)?;
        Ok(matches!(reply, SettleReply::Settled))
    }

    /// The stored outputs of some nodes of a task as their JSON text, by node id (nodes without
    /// one are left out): parsed by whoever needs them, within its own bounds.
    pub async fn node_outputs(
        &self,
        task_id: &str,
        node_ids: &[String],
    ) -> Result<HashMap<String, String>, StoreError> {
        let Some(shard) = self.shard_of(task_id) else { return Ok(HashMap::new()) };
        if node_ids.is_empty() {
            return Ok(HashMap::new());
        }
        let key = shard.task(task_id);
        let fields: Vec<String> = node_ids.iter().map(|n| format!("{n}:output")).collect();
        let values: Vec<Option<String>> =
            self.query(|| redis::cmd("HMGET").arg(&key).arg(&fields).clone()).await?;
        Ok(node_ids.iter().zip(values).filter_map(|(id, v)| Some((id.clone(), v?))).collect())
    }

    /// The queue of each tool, as the catalog knows it (for planned graphs and dead-letter retries).
    pub async fn tool_queues(&self) -> Result<HashMap<String, String>, StoreError> {
        Ok(self
            .tools()
            .await?
            .iter()
            .filter_map(|t| Some((t.name()?.to_owned(), t.queue_name()?.to_owned())))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::*;

    fn text(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_start_reply_is_read_field_by_field_and_a_short_negative_or_unknown_one_is_refused() {
        let call = r#"{"wire":"2026-07-28","arguments":{"name":"a \"quoted\" name"}}"#;
        let run_with_timeout = |timeout_ms: i64| {
            Value::Array(vec![
                text("run"),
                Value::Int(2),
                text("greet"),
                text(""),
                text(call),
                Value::Int(timeout_ms),
                Value::Int(1),
                text(r#"["$builtin","greet"]"#),
                text(""),
                text(""),
                text("alice"),
                Value::Int(1),
            ])
        };
        let StartReply::Run(reply) = StartReply::from_value(run_with_timeout(5000)).expect("a run reply")
        else {
            panic!("not a run")
        };
        assert_eq!(
            (reply.attempt, reply.tool.as_str(), reply.timeout_ms, reply.losses),
            (2, "greet", 5000, 1)
        );
        assert_eq!(reply.call, call, "the call record arrives as stored");
        assert_eq!((reply.owner.as_str(), reply.set_aside), ("alice", true));

        let capped =
            StartReply::from_value(Value::Array(vec![text("capped"), text("bob")])).expect("a capped reply");
        assert!(matches!(capped, StartReply::Capped { owner } if owner == "bob"));
        let skip = StartReply::from_value(Value::Array(vec![text("skip"), text("task expired")]))
            .expect("a skip reply");
        assert!(matches!(skip, StartReply::Skip { reason } if reason == "task expired"));

        for bad in [
            Value::Array(vec![text("run"), Value::Int(2), text("greet")]),
            Value::Array(vec![text("started")]),
            Value::Array(vec![text("run"), text("two")]),
            run_with_timeout(-1),
            text("run"),
        ] {
            assert!(matches!(StartReply::from_value(bad), Err(StoreError::Corrupt(_))));
        }
    }

    #[test]
    fn a_run_reply_cut_short_still_names_the_attempt_that_started() {
        // A nil in a script's array ends it: the fields after it are lost, not the attempt.
        let short = Value::Array(vec![text("run"), Value::Int(3), text("greet")]);
        assert!(StartReply::from_value(short.clone()).is_err());
        assert_eq!(started_attempt(&short), Some(3));
        assert_eq!(started_attempt(&Value::Array(vec![text("skip"), text("gone")])), None);
        assert_eq!(started_attempt(&Value::Array(vec![text("run"), Value::Int(-1)])), None);
    }
}
