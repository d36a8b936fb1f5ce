//! Lean calls (ADR-0028): a synchronous call of one tool whose stream entry carries what its worker
//! runs, so that its delivery is its start.
//!
//! - [`Store::create_lean`]: a gateway's create, in its shard's next `create_calls` batch; a call
//!   the batch does not take (a limit, a taken id) goes by the full path.
//! - [`Store::complete_lean`]: a lean attempt's result, in its shard's next `complete_calls` batch.
//! - [`Store::adopted`]: a rare transition of a lean attempt (progress, input, a failure, a
//!   hand-back, ...) first moves its node into today's running state, with `start_nodes`.
//!
//! The task hash of a lean call holds what `create_task` writes for a single call, so that every
//! other script sees a queued node whose entry is pending.

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::Value;

use super::Store;
use super::group_commit::{Batched, Batches};
use super::nodes::{Attempt, NodeStart, SlotShares, StartOutcome};
use super::tasks::{INLINE_MAX, Limits, NewTask, QueueList, queue_of};
use crate::call::CallRecord;
use crate::error::StoreError;
use crate::keys::{self, Shard};
pub use crate::model::LeanEntry;
use crate::model::{ROOT_NODE, TaskMode, WorkItem};
use crate::scripts;

/// The field of a lean task hash that holds, as `name<TAB>value` pairs, the fields its task takes
/// when it is adopted (start_nodes.lua unfolds it).
const ADOPT_FIELD: &str = "adopt";

/// One call of a `create_calls` batch: its keys, the words of its entry and of its task hash.
pub(super) struct LeanCreate {
    task_id: String,
    owner: String,
    tool: String,
    ttl_ms: u64,
    keys: Vec<String>,
    /// What its entry carries beyond the task id (`create_calls` builds it): the traceparent, and
    /// its tool, owner and call record in one field.
    trace: String,
    lean: String,
    /// The `HSET` of its task hash, built once, and how many bytes its fields and values hold.
    hset: redis::Cmd,
    hash_bytes: usize,
    limits: [i64; 5],
}

/// What became of a lean create.
pub(super) enum LeanCreated {
    /// Created, at this time of Redis's clock (ms).
    Created(u64),
    /// Not written: the full path creates it (and refuses it with the figures, or spreads it).
    Refused,
}

impl Batched for LeanCreate {
    type Reply = LeanCreated;

    fn size(&self) -> usize {
        self.hash_bytes * 2
    }

    fn queues(store: &Store) -> &Batches<Self> {
        &store.inner.lean_creates
    }

    async fn send(store: &Store, shard: Shard, calls: Vec<Self>) -> Result<Vec<LeanCreated>, StoreError> {
        let mut keys = vec![shard.load(), shard.expiring()];
        // The limits are the shard's shares of the deployment's, the same for every call of the
        // batch; the first call's are sent.
        let limits = calls.first().map(|c| c.limits).unwrap_or([-1; 5]);
        let mut args: Vec<String> = vec![calls.len().to_string(), shard.cancel_channel()];
        args.extend(limits.iter().map(i64::to_string));
        // Each call's task hash goes as a plain HSET in front of the script, which completes or
        // deletes it (create_calls.lua says why).
        let mut pipe = redis::pipe();
        keys.reserve(calls.len() * 2);
        args.reserve(calls.len() * 7);
        for call in calls {
            let has_call_key = if call.keys.len() > 2 { "1" } else { "0" };
            pipe.add_command(call.hset).ignore();
            keys.extend(call.keys);
            args.extend([
                call.task_id,
                call.owner,
                call.tool,
                call.trace,
                call.lean,
                call.ttl_ms.to_string(),
                has_call_key.to_owned(),
            ]);
        }
        let script = &scripts::CREATE_CALLS;
        pipe.cmd("EVALSHA").arg(script.get_hash()).arg(keys.len()).arg(&keys).arg(&args);
        let (reply,): (Vec<redis::Value>,) = store.pipeline_with_script(script, &pipe).await?;
        let mut reply = reply.into_iter();
        let now: u64 = match reply.next() {
            Some(now) => redis::from_redis_value(now)
                .map_err(|e| StoreError::Corrupt(format!("create_calls time: {e}")))?,
            None => return Err(StoreError::Corrupt("create_calls answered nothing".to_owned())),
        };
        Ok(reply
            .map(|outcome| match redis::from_redis_value::<String>(outcome).as_deref() {
                Ok("created") => LeanCreated::Created(now),
                _ => LeanCreated::Refused,
            })
            .collect())
    }
}

/// One attempt of a `complete_calls` batch.
pub(super) struct LeanCompletion {
    keys: [String; 2],
    words: [String; 9],
}

/// What became of a lean completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LeanCompleted {
    Settled,
    Stale,
    Dropped,
    /// Nothing changed: the full path completes it.
    Adopt,
}

impl Batched for LeanCompletion {
    type Reply = LeanCompleted;

    fn size(&self) -> usize {
        self.words[6].len() + self.words[7].len()
    }

    fn queues(store: &Store) -> &Batches<Self> {
        &store.inner.lean_completions
    }

    async fn send(store: &Store, shard: Shard, done: Vec<Self>) -> Result<Vec<LeanCompleted>, StoreError> {
        let mut keys = vec![shard.load(), shard.expiring(), shard.kept()];
        let mut args = Vec::with_capacity(1 + 9 * done.len());
        args.push(done.len().to_string());
        for completion in done {
            keys.extend(completion.keys);
            args.extend(completion.words);
        }
        let reply: Vec<String> = store.positional_script(&scripts::COMPLETE_CALLS, &keys, &args).await?;
        reply
            .into_iter()
            .map(|outcome| match outcome.as_str() {
                "settled" => Ok(LeanCompleted::Settled),
                "stale" => Ok(LeanCompleted::Stale),
                "dropped" => Ok(LeanCompleted::Dropped),
                "adopt" => Ok(LeanCompleted::Adopt),
                other => Err(StoreError::Corrupt(format!("complete_calls outcome {other:?}"))),
            })
            .collect()
    }
}

/// The words of a status event as the scripts publish it (prelude's `status_event`), with the
/// result inline when it is small enough to travel.
fn status_event(task_id: &str, status: &str, message: &str, result: &str) -> String {
    let text = |s: &str| Value::String(s.to_owned()).to_string();
    let mut event = format!(
        r#"{{"task":{},"type":"status","status":"{status}","message":{}"#,
        text(task_id),
        text(message)
    );
    if result.len() <= INLINE_MAX {
        event.push_str(r#","result":"#);
        event.push_str(result);
    }
    event.push('}');
    event
}

impl Store {
    /// Creates `new` as a lean call when it is one (ADR-0028), in its shard's next batch. `None`:
    /// it is not one, or the batch did not take it; the caller creates it by the full path.
    pub(super) async fn create_lean(
        &self,
        new: &NewTask,
        limits: &Limits,
    ) -> Result<Option<u64>, StoreError> {
        let Some(call) = self.lean_create(new, limits) else { return Ok(None) };
        let shard = self.shard_of(&new.task_id).ok_or_else(|| {
            StoreError::Corrupt(format!("task id {} names no shard of this deployment", new.task_id))
        })?;
        Ok(match self.in_batch(shard, call).await? {
            LeanCreated::Created(at) => {
                crate::metrics::task_created(&new.tool);
                Some(at)
            }
            LeanCreated::Refused => None,
        })
    }

    /// `new` as one call of a `create_calls` batch, when it is a lean call: a synchronous call of
    /// one tool, with no idempotency key, no answers, no escalation, within its byte budget, on a
    /// deployment that makes lean calls.
    fn lean_create(&self, new: &NewTask, limits: &Limits) -> Option<LeanCreate> {
        if !self.lean_calls()
            || new.graph.is_some()
            || new.mode != TaskMode::Sync
            || new.escalable
            || new.idempotency_key.is_some()
            || new.input_responses.is_some()
            || new.tool.starts_with('$')
        {
            return None;
        }
        let shard = self.shard_of(&new.task_id)?;
        let call = new.stored_call().to_text();
        let bytes = call.len();
        if new.max_bytes > 0 && bytes as u64 > new.max_bytes {
            return None;
        }
        let queue = queue_of(&new.tool, &new.queues);
        let mut queues = QueueList::new();
        let q = queues.index(queue);
        let share = limits.shares(shard, self.shards());
        let trace = new.traceparent.clone().unwrap_or_default();
        // An inbox's name is this gateway's, in letters, digits and `-`: written as JSON here
        // without a JSON value built for it (a call's other fields are built the same way).
        let waiters = match &new.waiter {
            Some(w) => serde_json::to_string(&[w]).unwrap_or_else(|_| "[]".to_owned()),
            None => "[]".to_owned(),
        };
        let queues_text = serde_json::to_string(&queues.0).unwrap_or_else(|_| "[]".to_owned());
        let plan_limits = format!(
            "{} {} {} {} {}",
            new.plan_limits.max_nodes,
            new.plan_limits.max_node_bytes,
            share.nodes,
            share.queued,
            share.per_tool
        );
        let lean = crate::model::LeanEntry::packed(&new.tool, &new.owner, &call);
        let task_key = shard.task(&new.task_id);
        let mut hset = redis::cmd("HSET");
        hset.arg(&task_key);
        let mut hash_bytes = 0;
        let mut field = |name: &str, value: &str| {
            hash_bytes += name.len() + value.len();
            hset.arg(name).arg(value);
        };
        field("status", "working");
        field("statusMessage", &new.status_message);
        field("ttlMs", &new.ttl_ms.to_string());
        field("owner", &new.owner);
        field("tool", &new.tool);
        field("traceparent", &trace);
        field("mode", new.mode.as_str());
        field("queues", &queues_text);
        field("waiters", &waiters);
        field("bytes", &bytes.to_string());
        // What only an adopted call reads (create_task's `planLimits`, `maxBytes`, `keptMax`,
        // `roundsMax`), in one field that start_nodes unfolds when it adopts the call: each field
        // of this HSET costs Redis about as much as a command's argument twice over, and most
        // calls are never adopted. Until then complete_calls reads the shard's `keptMax` from the
        // load hash, where create_calls states it.
        let mut adopt = format!("planLimits\t{plan_limits}");
        if share.kept >= 0 {
            adopt.push_str(&format!("\tkeptMax\t{}", share.kept));
        }
        if new.max_bytes > 0 {
            adopt.push_str(&format!("\tmaxBytes\t{}", new.max_bytes));
        }
        if new.input_rounds {
            adopt.push_str(&format!("\troundsMax\t{}", limits.rounds_share(shard, self.shards())));
        }
        field(ADOPT_FIELD, &adopt);
        // The root node's fields (model.rs's ROOT_NODE), its attempt left at its default (0).
        debug_assert_eq!(ROOT_NODE, "root");
        field("root:status", "queued");
        field("root:tool", &new.tool);
        field("root:q", &q.to_string());
        field("call", &call);
        let mut keys = vec![task_key, shard.queue(queue)];
        keys.extend(new.call_key.iter().cloned());
        Some(LeanCreate {
            task_id: new.task_id.clone(),
            owner: new.owner.clone(),
            tool: new.tool.clone(),
            ttl_ms: new.ttl_ms,
            keys,
            trace,
            lean,
            hset,
            hash_bytes,
            limits: [share.kept, share.live, share.nodes, share.queued, share.per_tool],
        })
    }

    /// Settles a lean attempt with its result in its shard's next `complete_calls` batch. `None`:
    /// the batch left it as it was, for the full path.
    pub(super) async fn complete_lean(
        &self,
        attempt: &Attempt,
        result: &str,
        is_error: bool,
        message: &str,
    ) -> Result<LeanCompleted, StoreError> {
        let status = if is_error && attempt.tool_error_fails { "failed" } else { "completed" };
        let (shard, tool) = (attempt.shard, attempt.tool.as_str());
        let completion = LeanCompletion {
            keys: [shard.task(&attempt.task_id), attempt.stream.clone()],
            words: [
                attempt.task_id.clone(),
                attempt.entry_id.clone(),
                attempt.owner.clone(),
                tool.to_owned(),
                status.to_owned(),
                message.to_owned(),
                result.to_owned(),
                status_event(&attempt.task_id, status, message, result),
                attempt.worker.clone(),
            ],
        };
        let outcome = self.in_batch(shard, completion).await?;
        if outcome == LeanCompleted::Settled {
            crate::metrics::task_settled(tool, status);
            if let Some(trace) =
                attempt.traceparent.as_deref().and_then(crate::telemetry::context::TaskTrace::decode)
            {
                trace.end_task_span(&attempt.task_id, tool, status, None, std::time::SystemTime::now());
            }
        }
        Ok(outcome)
    }

    /// `attempt` as a fenced attempt of today's running state: itself, or, for a lean attempt
    /// (number 0), the attempt its node was adopted as (`start_nodes` starts it from the same
    /// entry). `None`: the entry is no longer its node's (the task ended, or the node was taken
    /// over): the attempt is stale.
    pub async fn adopted<'a>(&self, attempt: &'a Attempt) -> Result<Option<Cow<'a, Attempt>>, StoreError> {
        if attempt.number > 0 {
            return Ok(Some(Cow::Borrowed(attempt)));
        }
        let key = (attempt.stream.clone(), attempt.entry_id.clone());
        let known = self.inner.adopted.lock().unwrap_or_else(|e| e.into_inner()).get(&key).copied();
        let number = match known {
            Some(number) => number,
            None => {
                let item = WorkItem {
                    shard: attempt.shard,
                    stream: attempt.stream.clone(),
                    entry_id: attempt.entry_id.clone(),
                    task_id: attempt.task_id.clone(),
                    node_id: attempt.node_id.clone(),
                    traceparent: attempt.traceparent.clone(),
                    lean: None,
                };
                let started = self
                    .start_batch(attempt.shard, &[item], 1, &attempt.worker, &SlotShares::unlimited())
                    .await?;
                let number = match started.into_iter().next() {
                    Some(StartOutcome::Run(start)) => start.attempt.number,
                    Some(StartOutcome::Unreadable { attempt: Some(started), .. }) => started.number,
                    Some(StartOutcome::Unreadable { attempt: None, reason }) => {
                        return Err(StoreError::Unavailable(format!(
                            "could not adopt a lean attempt: {reason}"
                        )));
                    }
                    _ => return Ok(None),
                };
                tracing::debug!(task = %attempt.task_id, attempt = number, "adopted a lean attempt");
                self.inner.adopted.lock().unwrap_or_else(|e| e.into_inner()).insert(key, number);
                number
            }
        };
        Ok(Some(Cow::Owned(Attempt { number, ..attempt.clone() })))
    }

    /// Whether this deployment runs lean calls: gateways create them, and workers run lean entries
    /// from their delivery (off: every entry is started with `start_nodes`).
    pub fn lean_calls(&self) -> bool {
        self.inner.options.lean_calls && self.inner.options.wait_replicas == 0
    }

    /// Whether a lean `attempt` was adopted.
    pub(super) fn is_adopted(&self, attempt: &Attempt) -> bool {
        let key = (attempt.stream.clone(), attempt.entry_id.clone());
        self.inner.adopted.lock().unwrap_or_else(|e| e.into_inner()).contains_key(&key)
    }

    /// Forgets a lean attempt's adoption once its job has ended.
    pub fn forget_adoption(&self, attempt: &Attempt) {
        if attempt.number == 0 {
            let key = (attempt.stream.clone(), attempt.entry_id.clone());
            self.inner.adopted.lock().unwrap_or_else(|e| e.into_inner()).remove(&key);
        }
    }

    /// Runs `pipe`, whose last command is an `EVALSHA` of `script` (a script without the prelude):
    /// when Redis does not have the script (a restart, a failover, `SCRIPT FLUSH`), loads it and
    /// runs the pipeline again, which must therefore be safe to repeat.
    pub(super) async fn pipeline_with_script<T: redis::FromRedisValue>(
        &self,
        script: &'static scripts::NamedScript,
        pipe: &redis::Pipeline,
    ) -> Result<T, StoreError> {
        self.run_within(super::Op::Script(script.name), self.inner.options.timeout, |mut c| async move {
            match pipe.query_async::<T>(&mut c).await {
                Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                    script.prepare_invoke().load_async(&mut c).await?;
                    pipe.query_async(&mut c).await
                }
                other => other,
            }
        })
        .await
    }

    /// Runs a script without the prelude, over `keys`, with positional arguments (`create_calls`,
    /// `complete_calls`).
    pub(super) async fn positional_script<T: redis::FromRedisValue>(
        &self,
        script: &'static scripts::NamedScript,
        keys: &[String],
        args: &[String],
    ) -> Result<T, StoreError> {
        let mut invocation = script.prepare_invoke();
        for key in keys {
            invocation.key(key);
        }
        for arg in args {
            invocation.arg(arg);
        }
        self.run_within(super::Op::Script(script.name), self.inner.options.timeout, |mut c| {
            let invocation = &invocation;
            async move { invocation.invoke_async(&mut c).await }
        })
        .await
    }
}

/// A lean entry as the node its worker runs: attempt 0 (not adopted), fenced by its entry.
/// `None` when its call record cannot be read: the worker starts it with `start_nodes` instead,
/// which fails it with a message that says why.
pub fn lean_start(item: &WorkItem, worker: &str) -> Option<NodeStart> {
    let lean = item.lean.as_ref()?;
    let call = CallRecord::from_text(&lean.call).ok()?;
    let mut queues = QueueList::new();
    queues.index(keys::queue_of_stream(&item.stream)?);
    Some(NodeStart {
        attempt: Attempt {
            shard: item.shard,
            task_id: item.task_id.clone(),
            node_id: item.node_id.clone(),
            number: 0,
            queues: queues.0,
            stream: item.stream.clone(),
            entry_id: item.entry_id.clone(),
            traceparent: item.traceparent.clone(),
            owner: lean.owner.clone(),
            tool: lean.tool.clone(),
            release_held: false,
            tool_error_fails: call.tool_error_fails(),
            worker: worker.to_owned(),
        },
        tool: lean.tool.clone(),
        node_arguments: None,
        timeout: None,
        losses: 0,
        answers: serde_json::Map::new(),
        state: None,
        call: Arc::new(call),
    })
}
