//! Reading one task for a client: what the reader shows and no more, behind the caller's poll
//! gate, within the memory the reader holds for it. One script ([`crate::scripts::READ_TASK`])
//! checks the gate first (a refused poll reads nothing), then the owner, then the size of what is
//! large; a read over its allowance gets that size back instead of the fields, so that the reader
//! can hold memory for them (or refuse) before it reads them. Nodes are read without their
//! outputs, whose sizes come instead.

use std::collections::HashMap;

use super::Store;
use crate::error::StoreError;
use crate::model::{
    NodeRecord, TASK_FIELDS, TASK_LARGE_FIELDS, TASK_STATUS_FIELDS, TaskRecord, TaskStatusRecord, now_ms,
};
use crate::scripts;

/// Which gate of the caller's a read passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateKind {
    /// Reads of a task's state (`tasks/get`, the task resource, the web view).
    Poll,
    /// Reads of a task's result (`tasks/result`, the result resource).
    Result,
}

/// A caller's poll gate: at most one read per `gap_ms`, over every gateway.
#[derive(Debug, Clone, Copy)]
pub struct Gate<'a> {
    pub caller: &'a str,
    pub gap_ms: u64,
    pub kind: GateKind,
}

/// What a read loads besides a task's status and times.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TaskParts {
    /// The call record (arguments, progress token).
    pub call: bool,
    /// The result or error, and pending input requests with their rounds.
    pub outcome: bool,
    /// The nodes, each without its output (whose size is given).
    pub nodes: bool,
}

impl TaskParts {
    pub const STATUS: Self = Self { call: false, outcome: false, nodes: false };
    pub const OUTCOME: Self = Self { call: false, outcome: true, nodes: false };

    /// The large task fields these parts read.
    fn large(self) -> Vec<&'static str> {
        TASK_LARGE_FIELDS
            .into_iter()
            .filter(|f| match *f {
                "call" => self.call,
                _ => self.outcome,
            })
            .collect()
    }

    pub fn reads_large(self) -> bool {
        self.call || self.outcome || self.nodes
    }
}

/// One read of one task.
#[derive(Debug, Clone)]
pub struct TaskRead<'a> {
    /// The owner the reader may see; `""` for any (an operator).
    pub owner: &'a str,
    /// A synchronous call's hidden task is read too (what a call's result names).
    pub hidden: bool,
    pub parts: TaskParts,
    pub gate: Option<Gate<'a>>,
    /// Bytes the large fields and nodes may take; over it, only their size comes back.
    pub allowance: u64,
    /// A version the reader shows already: a task still at it is not read again.
    pub since: Option<&'a str>,
    /// This read's token in the gate, so that the same read sent again (a lost reply, a larger
    /// allowance) passes the gate it set.
    pub token: String,
}

impl<'a> TaskRead<'a> {
    pub fn new(owner: &'a str, parts: TaskParts) -> Self {
        Self {
            owner,
            hidden: false,
            parts,
            gate: None,
            allowance: 0,
            since: None,
            token: format!("{:016x}", rand::random::<u64>()),
        }
    }
}

/// A task as a read found it.
#[derive(Debug, Clone)]
pub struct TaskDetail {
    pub task: TaskRecord,
    /// With [`TaskParts::nodes`]: each node, its output left out and its size given.
    pub nodes: Vec<NodeRecord>,
    /// Bytes of the large fields and nodes read.
    pub bytes: u64,
    /// The task's version, to pass as [`TaskRead::since`] next time.
    pub version: String,
}

/// How a read went.
#[derive(Debug)]
pub enum ReadOutcome {
    Read(Box<TaskDetail>),
    /// The caller read through this gate less than the gap ago; it may again after this long.
    TooSoon {
        retry_after_ms: u64,
    },
    /// No such task (never created, expired, a hidden one, or an id that names no shard).
    Missing,
    /// Another owner's task: nothing of it was read.
    Other,
    /// Still at the version the reader shows.
    Same {
        version: String,
    },
    /// What the read asks for holds this many bytes, more than its allowance; nothing was read.
    Over {
        bytes: u64,
        version: String,
    },
}

/// The fields every read of a task returns whatever its size: all of [`TASK_FIELDS`] that are not
/// large.
fn small_fields() -> Vec<&'static str> {
    TASK_FIELDS.into_iter().filter(|f| !TASK_LARGE_FIELDS.contains(f)).collect()
}

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct ReadRecord<'a> {
    gap_ms: u64,
    token: &'a str,
    owner: &'a str,
    hidden: bool,
    small: Vec<&'static str>,
    large: Vec<&'static str>,
    nodes: bool,
    allowance: u64,
    since: &'a str,
}

impl Store {
    /// Reads one task as `read` asks: see the module's header.
    pub async fn read_task(&self, task_id: &str, read: &TaskRead<'_>) -> Result<ReadOutcome, StoreError> {
        let Some(shard) = self.shard_of(task_id) else { return Ok(ReadOutcome::Missing) };
        let mut keys = vec![shard.task(task_id)];
        let gap_ms = match read.gate {
            Some(gate) if gate.gap_ms > 0 => {
                keys.push(match gate.kind {
                    GateKind::Poll => shard.poll_gate(task_id, gate.caller),
                    GateKind::Result => shard.result_gate(task_id, gate.caller),
                });
                gate.gap_ms
            }
            _ => 0,
        };
        let small = small_fields();
        let large = read.parts.large();
        let record = ReadRecord {
            gap_ms,
            token: &read.token,
            owner: read.owner,
            hidden: read.hidden,
            small: small.clone(),
            large: large.clone(),
            nodes: read.parts.nodes,
            allowance: read.allowance,
            since: read.since.unwrap_or_default(),
        };
        let reply: Vec<redis::Value> = self.script_reply(&scripts::READ_TASK, &keys, &record).await?;
        decode(task_id, reply, &small, &large, read.parts)
    }

    /// A task's status and times, or `None` when there is no such task (whoever owns it): for a
    /// check that needs no more, such as whether an id names another principal's task.
    pub async fn task_status(&self, task_id: &str) -> Result<Option<TaskStatusRecord>, StoreError> {
        let Some(shard) = self.shard_of(task_id) else { return Ok(None) };
        let key = shard.task(task_id);
        let values: Vec<Option<String>> =
            self.query(|| redis::cmd("HMGET").arg(&key).arg(&TASK_STATUS_FIELDS[..]).clone()).await?;
        let task = TaskStatusRecord::from_fields(task_id, values).map_err(StoreError::Corrupt)?;
        Ok(task.filter(|t| !t.expired_at(now_ms())))
    }

    /// Passes the gate `key` for `gap_ms` (any gateway's later pass within the gap is refused),
    /// or says how long until it may be passed again. The gate holds `token`, so that the same
    /// pass sent again after a lost reply is let through.
    pub async fn pass_gate(&self, key: &str, token: &str, gap_ms: u64) -> Result<Option<u64>, StoreError> {
        if gap_ms == 0 {
            return Ok(None);
        }
        let mut pipe = redis::pipe();
        pipe.cmd("SET").arg(key).arg(token).arg("NX").arg("PX").arg(gap_ms).arg("GET");
        pipe.cmd("PTTL").arg(key);
        let (earlier, ttl): (Option<String>, i64) = self.pipeline(&pipe).await?;
        Ok(earlier.filter(|earlier| earlier != token).map(|_| u64::try_from(ttl).unwrap_or(1).max(1)))
    }
}

/// Decodes `read_task`'s reply: an array whose first element names the outcome.
fn decode(
    task_id: &str,
    reply: Vec<redis::Value>,
    small: &[&'static str],
    large: &[&'static str],
    parts: TaskParts,
) -> Result<ReadOutcome, StoreError> {
    let corrupt = |what: String| StoreError::Corrupt(format!("read_task reply for {task_id}: {what}"));
    let mut items = reply.into_iter();
    let mut next = |name: &str| items.next().ok_or_else(|| corrupt(format!("no {name}")));
    let text = |value: redis::Value, name: &str| {
        redis::from_redis_value::<String>(value).map_err(|e| corrupt(format!("{name}: {e}")))
    };
    let number = |value: redis::Value, name: &str| {
        let n = redis::from_redis_value::<i64>(value).map_err(|e| corrupt(format!("{name}: {e}")))?;
        u64::try_from(n).map_err(|_| corrupt(format!("{name} is {n}")))
    };
    let outcome = text(next("outcome")?, "outcome")?;
    Ok(match outcome.as_str() {
        "soon" => {
            ReadOutcome::TooSoon { retry_after_ms: number(next("retryAfterMs")?, "retryAfterMs")?.max(1) }
        }
        "missing" => ReadOutcome::Missing,
        "other" => ReadOutcome::Other,
        "same" => ReadOutcome::Same { version: text(next("version")?, "version")? },
        "over" => {
            let bytes = number(next("bytes")?, "bytes")?;
            ReadOutcome::Over { bytes, version: text(next("version")?, "version")? }
        }
        "read" => {
            let bytes = number(next("bytes")?, "bytes")?;
            let version = text(next("version")?, "version")?;
            let values = |value: redis::Value, name: &str| {
                redis::from_redis_value::<Vec<Option<String>>>(value)
                    .map_err(|e| corrupt(format!("{name}: {e}")))
            };
            let small_values = values(next("small")?, "small")?;
            let large_values = values(next("large")?, "large")?;
            let node_fields = redis::from_redis_value::<Vec<String>>(next("nodes")?)
                .map_err(|e| corrupt(format!("nodes: {e}")))?;
            let outputs = redis::from_redis_value::<Vec<redis::Value>>(next("outputs")?)
                .map_err(|e| corrupt(format!("outputs: {e}")))?;
            let hash: HashMap<String, String> = small
                .iter()
                .zip(small_values)
                .chain(large.iter().zip(large_values))
                .filter_map(|(field, value)| Some(((*field).to_owned(), value?)))
                .collect();
            let Some(task) = TaskRecord::from_read(task_id, hash, parts.call).map_err(StoreError::Corrupt)?
            else {
                return Ok(ReadOutcome::Missing);
            };
            let mut pairs = node_fields.into_iter();
            let mut fields = HashMap::new();
            while let (Some(key), Some(value)) = (pairs.next(), pairs.next()) {
                fields.insert(key, value);
            }
            let mut nodes = NodeRecord::from_hash(fields);
            let mut outputs = outputs.into_iter();
            let mut sizes = HashMap::new();
            while let (Some(node), Some(size)) = (outputs.next(), outputs.next()) {
                sizes.insert(text(node, "output node")?, number(size, "output size")?);
            }
            for node in &mut nodes {
                node.output_bytes = sizes.get(&node.node_id).copied();
            }
            ReadOutcome::Read(Box::new(TaskDetail { task, nodes, bytes, version }))
        }
        other => return Err(corrupt(format!("unknown outcome {other:?}"))),
    })
}
