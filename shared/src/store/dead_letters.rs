//! Dead letters: nodes whose attempts are spent (or that lost their worker too often), one capped
//! stream per shard, for operators to read and run again (`conveyor redis dlq`). A dead letter's id is
//! `<shard>:<stream entry id>`.

use serde_json::Value;

use super::Store;
use super::tasks::{Created, Limits, NewTask};
use crate::call::CallRecord;
use crate::dag;
use crate::error::StoreError;
use crate::keys::{self, Shard};
use crate::model::{TaskMode, new_task_id, now_ms};

/// The most a dead letter copies of a node's arguments, and of its error: the dead letters are
/// the deployment's and outlive their task, so that a principal's failures must not fill them
/// with its bytes. A larger one is kept as its size; a retry reads the arguments from the task
/// while it lives.
pub const DEAD_LETTER_COPY_MAX: usize = 64 * 1024;

/// One dead letter.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeadLetter {
    pub id: String,
    pub task_id: String,
    pub node_id: String,
    pub tool: String,
    /// `Null` when they were too large to copy ([`DeadLetter::arguments_bytes`]).
    pub arguments: Value,
    /// The size of arguments too large to copy into the dead letter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arguments_bytes: Option<u64>,
    pub owner: String,
    pub attempts: u32,
    pub error: Value,
    pub at_ms: u64,
}

fn dead_letter(shard: Shard, entry: &redis::streams::StreamId) -> DeadLetter {
    let field = |name: &str| entry.get::<String>(name).unwrap_or_default();
    let json = |name: &str| serde_json::from_str(&field(name)).unwrap_or(Value::Null);
    DeadLetter {
        id: format!("{shard}:{}", entry.id),
        task_id: field("task"),
        node_id: field("node"),
        tool: field("tool"),
        // A graph node's own arguments, or the record of a single call (which holds them).
        arguments: match entry.get::<String>("call") {
            Some(call) => CallRecord::from_text(&call).map(|c| c.arguments).unwrap_or(Value::Null),
            None => json("arguments"),
        },
        arguments_bytes: entry
            .get::<String>("argumentsBytes")
            .or_else(|| entry.get::<String>("callBytes"))
            .and_then(|n| n.parse().ok()),
        owner: field("owner"),
        attempts: field("attempts").parse().unwrap_or(0),
        error: match entry.get::<String>("errorBytes") {
            Some(bytes) => serde_json::json!({
                "message": format!("the error was {bytes} bytes, too large to keep with the dead letter; its task keeps it until its TTL runs out")
            }),
            None => json("error"),
        },
        at_ms: field("at").parse().unwrap_or(0),
    }
}

impl Store {
    /// The newest `count` dead letters of every shard, newest first.
    pub async fn dead_letters(&self, count: usize) -> Result<Vec<DeadLetter>, StoreError> {
        let mut letters = Vec::new();
        for shard in self.all_shards() {
            let key = shard.dead_letters();
            let entries: redis::streams::StreamRangeReply = self
                .query(|| redis::cmd("XREVRANGE").arg(&key).arg("+").arg("-").arg("COUNT").arg(count).clone())
                .await?;
            letters.extend(entries.ids.iter().map(|e| dead_letter(shard, e)));
        }
        letters.sort_by(|a, b| b.at_ms.cmp(&a.at_ms).then_with(|| b.id.cmp(&a.id)));
        letters.truncate(count);
        Ok(letters)
    }

    /// One dead letter by its id; `None` for an unknown or malformed id.
    pub async fn dead_letter(&self, id: &str) -> Result<Option<DeadLetter>, StoreError> {
        let Some((shard, entry)) = self.parse_letter_id(id) else { return Ok(None) };
        let key = shard.dead_letters();
        let entries: redis::streams::StreamRangeReply =
            self.query(|| redis::cmd("XRANGE").arg(&key).arg(&entry).arg(&entry).clone()).await?;
        Ok(entries.ids.first().map(|e| dead_letter(shard, e)))
    }

    /// A node's arguments as its task keeps them (a graph node's own, or a single call's), while
    /// the task lives.
    async fn node_arguments(&self, task_id: &str, node_id: &str) -> Result<Option<Value>, StoreError> {
        let Some(shard) = self.shard_of(task_id) else { return Ok(None) };
        let key = shard.task(task_id);
        let field = format!("{node_id}:args");
        let (args, call): (Option<String>, Option<String>) =
            self.query(|| redis::cmd("HMGET").arg(&key).arg(&field).arg("call").clone()).await?;
        Ok(match (args, call) {
            (Some(args), _) => serde_json::from_str(&args).ok(),
            (None, Some(call)) => CallRecord::from_text(&call).ok().map(|c| c.arguments),
            (None, None) => None,
        })
    }

    fn parse_letter_id(&self, id: &str) -> Option<(Shard, String)> {
        let (shard, entry) = id.split_once(':')?;
        let shard: u16 = shard.parse().ok()?;
        (shard < self.shards()).then(|| (Shard(shard), entry.to_owned()))
    }

    /// Runs a dead-lettered node again as a new task of the same owner (a terminal task never
    /// changes, so its own task stays failed), then removes the dead letter. Upstream values in the
    /// node's arguments are taken from its original task while that still exists. Returns the new
    /// task's id, or why there is none.
    ///
    /// The new task is created like a call of the owner's: under `retry.limits` (spread over the
    /// shards) and within `retry.max_task_bytes`, and keyed by the letter: its idempotency key is
    /// the letter's id, so that a retry sent again (the letter still there after a lost reply or
    /// a crash, or two operators at once) finds the task the first made instead of running the
    /// node twice.
    pub async fn retry_dead_letter(
        &self,
        letter: &DeadLetter,
        retry: &RetryOptions,
    ) -> Result<Result<String, String>, StoreError> {
        let Some((shard, entry)) = self.parse_letter_id(&letter.id) else {
            return Ok(Err(format!("`{}` is not a dead letter id", letter.id)));
        };
        let kept = match letter.arguments_bytes {
            None => letter.arguments.clone(),
            Some(bytes) => match self.node_arguments(&letter.task_id, &letter.node_id).await? {
                Some(arguments) => arguments,
                None => {
                    return Ok(Err(format!(
                        "the node's arguments ({bytes} bytes) were too large to keep with the dead letter, and its task has expired"
                    )));
                }
            },
        };
        let references = dag::upstream_references(&kept);
        let arguments = if references.is_empty() {
            kept
        } else {
            let upstream: Vec<String> = references.into_iter().map(|(from, _)| from).collect();
            let outputs = self.node_outputs(&letter.task_id, &upstream).await?;
            match dag::resolve_bounded(&kept, &outputs, &dag::ResolveLimits::default()) {
                Ok(resolved) => resolved,
                Err(e) => {
                    return Ok(Err(format!(
                        "cannot rebuild the node's arguments: {e} (its task has expired?)"
                    )));
                }
            }
        };
        let original = self.get_task(&letter.task_id).await?;
        // Keyed by the letter: a client's keys hold no space, so no call of the owner's shares it.
        let key = format!("dead letter {}", letter.id);
        let mut new = NewTask {
            task_id: new_task_id(keys::shard_of_key(&letter.owner, &key, self.shards())),
            owner: letter.owner.clone(),
            tool: letter.tool.clone(),
            // An operator's retry has no client to ask or to tell: no progress token, no client
            // capabilities (a node that asks for input fails), no log level. It reads only the
            // roots the original call could; once that task has expired they are not known, and
            // the retry is the operator's to vouch for, like the rest of it.
            call: CallRecord {
                wire: original
                    .as_ref()
                    .map(|t| t.call.wire.clone())
                    .unwrap_or_else(|| "2026-07-28".to_owned()),
                arguments,
                poll_interval_ms: retry.poll_interval_ms,
                roots: original.as_ref().and_then(|t| t.call.roots.clone()),
                ..CallRecord::default()
            },
            ttl_ms: retry.ttl_ms,
            traceparent: original.and_then(|t| t.traceparent),
            mode: TaskMode::Task,
            status_message: format!("Queued: retry of dead letter {}", letter.id),
            created_at_ms: now_ms(),
            graph: None,
            idempotency_key: Some(key),
            queues: std::sync::Arc::new(self.tool_queues().await?),
            waiter: None,
            index_retention_ms: retry.ttl_ms.saturating_mul(2),
            input_responses: None,
            escalable: false,
            call_key: None,
            max_bytes: retry.max_task_bytes,
            plan_limits: retry.plan_limits,
            input_rounds: false,
        };
        let task = match self.create_task_spread(&mut new, &retry.limits, |_, _| {}).await? {
            Created::Created => new.task_id,
            // The letter was retried before: that task is its retry, whatever it was made with.
            Created::Duplicate(task) | Created::Conflict(task) => task,
            Created::OverLimit(hit) => {
                return Ok(Err(format!(
                    "the owner {} is at a limit ({}: {} of {}); nothing was started and the dead letter stays: retry \
                     it later",
                    letter.owner, hit.limit, hit.current, hit.max
                )));
            }
            Created::OverBudget { size, max } => {
                return Ok(Err(format!(
                    "the node's call is {size} bytes, more than a task may store ({max}, max_task_bytes); the dead \
                     letter stays"
                )));
            }
            Created::IdTaken => return Ok(Err("task id collision; run the retry again".to_owned())),
        };
        let key = shard.dead_letters();
        self.query::<()>(|| redis::cmd("XDEL").arg(&key).arg(&entry).clone()).await?;
        Ok(Ok(task))
    }
}

/// What a dead letter's retry is made with, and held to: as a call of its owner's is.
#[derive(Debug, Clone, Copy)]
pub struct RetryOptions {
    pub ttl_ms: u64,
    pub poll_interval_ms: u64,
    pub limits: Limits,
    pub max_task_bytes: u64,
    pub plan_limits: dag::DagLimits,
}
