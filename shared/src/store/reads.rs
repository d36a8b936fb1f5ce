//! Reading one task for a client: what the reader shows and no more, behind the caller's poll
//! gate, within the memory the reader holds for it. One script ([`crate::scripts::READ_TASK`])
//! checks the gate first (a refused poll reads nothing), then the owner, then the size of what is
//! large; a read over its allowance gets that size back instead of the fields, so that the reader
//! can hold memory for them (or refuse) before it reads them. Nodes are read without their
//! outputs, whose sizes come instead.
//!
//! The large fields are then read with plain `HMGET`s, never through the script (Lua would copy
//! every value, and Redis would serve no one else meanwhile): the task's fields in one command, so
//! that they are of one moment, its nodes' in others of the same round trip. A task that grew past
//! the allowance between the script's look and the read (it settled with its result meanwhile) is
//! not answered: the read says so ([`ReadOutcome::Moved`]), and is measured again.

use std::collections::HashMap;

use super::Store;
use crate::error::StoreError;
use crate::model::{
    NodeRecord, TASK_FIELDS, TASK_LARGE_FIELDS, TASK_STATUS_FIELDS, TaskRecord, TaskStatusRecord,
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
    /// The task grew past the allowance between being measured and being read: measure it again.
    Moved,
}

/// Node fields read by one `HMGET`.
const FIELDS_PER_COMMAND: usize = 1000;
/// What the script counts for a node field of a size that hardly varies (`SMALL` in
/// `read_task.lua`).
const SMALL_NODE_FIELD: usize = 128;
/// Large fields of more bytes than this are parsed on a blocking thread.
const PARSE_APART: u64 = 256 * 1024;

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
        let checked = match check(task_id, reply)? {
            Checked::Done(outcome) => return Ok(outcome),
            Checked::Fits(fits) => fits,
        };
        let Fits { bytes, version, small_values, node_fields, outputs } = *checked;
        let key = &keys[0];
        let (hash, node_values) = if large.is_empty() && node_fields.is_empty() {
            let hash =
                small.iter().zip(small_values).filter_map(|(f, v)| Some(((*f).to_owned(), v?))).collect();
            (hash, Vec::new())
        } else {
            // The task's fields in one command, so that they are of one moment; its small fields
            // again with the large ones, which may be of a later moment than the script's look.
            let task_fields: Vec<&str> = small.iter().chain(large.iter()).copied().collect();
            let mut pipe = redis::pipe();
            pipe.cmd("HMGET").arg(key).arg(&task_fields[..]);
            for names in node_fields.chunks(FIELDS_PER_COMMAND) {
                pipe.cmd("HMGET").arg(key).arg(names);
            }
            let replies: Vec<redis::Value> = self.pipeline(&pipe).await?;
            let corrupt = |what: String| StoreError::Corrupt(format!("read of {task_id}: {what}"));
            let mut replies = replies.into_iter();
            let values: Vec<Option<String>> =
                redis::from_redis_value(replies.next().ok_or_else(|| corrupt("no task fields".into()))?)
                    .map_err(|e| corrupt(format!("task fields: {e}")))?;
            let mut node_values: Vec<Option<String>> = Vec::with_capacity(node_fields.len());
            for reply in replies {
                let chunk: Vec<Option<String>> =
                    redis::from_redis_value(reply).map_err(|e| corrupt(format!("node fields: {e}")))?;
                node_values.extend(chunk);
            }
            let large_read: usize =
                values[small.len().min(values.len())..].iter().flatten().map(String::len).sum();
            // Measured as the script measures: the fields whose size varies by their size, the
            // others at a fixed figure.
            let nodes_read: usize = node_fields
                .iter()
                .zip(&node_values)
                .map(|(name, value)| {
                    let sized = name.ends_with(":error") || name.ends_with(":dependents");
                    name.len() + if sized { value.as_ref().map_or(0, String::len) } else { SMALL_NODE_FIELD }
                })
                .sum();
            if (large_read + nodes_read) as u64 > read.allowance {
                // It grew (settled with its result) since the script measured it.
                return Ok(ReadOutcome::Moved);
            }
            let hash =
                task_fields.iter().zip(values).filter_map(|(f, v)| Some(((*f).to_owned(), v?))).collect();
            (hash, node_values)
        };
        let call_read = read.parts.call;
        let parsed = if bytes > PARSE_APART {
            // Megabytes of JSON take a while to parse: off the threads that serve every request.
            let id = task_id.to_owned();
            tokio::task::spawn_blocking(move || TaskRecord::from_read(&id, hash, call_read))
                .await
                .map_err(|e| StoreError::Corrupt(format!("parsing task {task_id}: {e}")))?
        } else {
            TaskRecord::from_read(task_id, hash, call_read)
        };
        let Some(task) = parsed.map_err(StoreError::Corrupt)? else {
            return Ok(ReadOutcome::Missing);
        };
        let fields: HashMap<String, String> = node_fields
            .into_iter()
            .zip(node_values)
            .filter_map(|(field, value)| Some((field, value?)))
            .collect();
        let mut nodes = NodeRecord::from_hash(fields);
        for node in &mut nodes {
            node.output_bytes = outputs.get(&node.node_id).copied();
        }
        // A settled task is shown once its end is on enough replicas (a deployment that waits).
        self.confirm_if_settled(Some((task_id, task.status))).await?;
        Ok(ReadOutcome::Read(Box::new(TaskDetail { task, nodes, bytes, version })))
    }

    /// A task's status and times, or `None` when there is no such task (whoever owns it): for a
    /// check that needs no more, such as whether an id names another principal's task.
    pub async fn task_status(&self, task_id: &str) -> Result<Option<TaskStatusRecord>, StoreError> {
        let Some(shard) = self.shard_of(task_id) else { return Ok(None) };
        let mut pipe = redis::pipe();
        pipe.cmd("HMGET").arg(shard.task(task_id)).arg(&TASK_STATUS_FIELDS[..]).cmd("TIME");
        let (values, now): (Vec<Option<String>>, (u64, u64)) = self.pipeline(&pipe).await?;
        let task = TaskStatusRecord::from_fields(task_id, values).map_err(StoreError::Corrupt)?;
        let task = task.filter(|t| !t.expired_at(super::redis_ms(now)));
        self.confirm_if_settled(task.as_ref().map(|t| (task_id, t.status))).await?;
        Ok(task)
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

/// What the script found of a task the read may read.
struct Fits {
    bytes: u64,
    version: String,
    small_values: Vec<Option<String>>,
    node_fields: Vec<String>,
    outputs: HashMap<String, u64>,
}

enum Checked {
    Done(ReadOutcome),
    Fits(Box<Fits>),
}

/// Decodes `read_task`'s reply: an array whose first element names the outcome.
fn check(task_id: &str, reply: Vec<redis::Value>) -> Result<Checked, StoreError> {
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
    let done = |outcome| Ok(Checked::Done(outcome));
    match outcome.as_str() {
        "soon" => done(ReadOutcome::TooSoon {
            retry_after_ms: number(next("retryAfterMs")?, "retryAfterMs")?.max(1),
        }),
        "missing" => done(ReadOutcome::Missing),
        "other" => done(ReadOutcome::Other),
        "same" => done(ReadOutcome::Same { version: text(next("version")?, "version")? }),
        "over" => {
            let bytes = number(next("bytes")?, "bytes")?;
            done(ReadOutcome::Over { bytes, version: text(next("version")?, "version")? })
        }
        "fits" => {
            let bytes = number(next("bytes")?, "bytes")?;
            let version = text(next("version")?, "version")?;
            let small_values = redis::from_redis_value::<Vec<Option<String>>>(next("small")?)
                .map_err(|e| corrupt(format!("small: {e}")))?;
            let node_fields = redis::from_redis_value::<Vec<String>>(next("node fields")?)
                .map_err(|e| corrupt(format!("node fields: {e}")))?;
            let pairs = redis::from_redis_value::<Vec<redis::Value>>(next("outputs")?)
                .map_err(|e| corrupt(format!("outputs: {e}")))?;
            let mut outputs = HashMap::new();
            let mut pairs = pairs.into_iter();
            while let (Some(node), Some(size)) = (pairs.next(), pairs.next()) {
                outputs.insert(text(node, "output node")?, number(size, "output size")?);
            }
            Ok(Checked::Fits(Box::new(Fits { bytes, version, small_values, node_fields, outputs })))
        }
        other => Err(corrupt(format!("unknown outcome {other:?}"))),
    }
}
