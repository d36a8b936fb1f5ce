//! The JSON the web view reads. Built here rather than taken from the MCP wire shapes: the page
//! shows what a person needs (owner, times in milliseconds for durations, the graph's edges)
//! and leaves out what only a client needs (progress tokens, trace context, node outputs, of
//! which it shows the size).

use std::collections::{BTreeMap, HashMap};

use conveyor_shared::model::{NodeRecord, ROOT_NODE, TaskRecord, TaskStatusRecord, iso8601};
use conveyor_shared::store::{ClusterStats, DeadLetter, TaskIndex, WorkerRecord, catalog::LIVE_FOR_MS};
use conveyor_shared::{Store, StoreError};
use serde_json::{Value, json};

use crate::access::Caller;

/// How many tasks the list holds at most: the newest ones.
pub const LIST_LIMIT: usize = 200;
/// How many dead letters the operators' view shows: the newest ones.
pub const DEAD_LETTERS_SHOWN: usize = 50;

/// A task as a row of the list.
pub(crate) fn task_row(task: &TaskStatusRecord) -> Value {
    json!({
        "taskId": task.task_id,
        "tool": task.tool,
        "status": task.status,
        "statusMessage": task.status_message,
        "progress": task.progress,
        "total": task.total,
        "owner": task.owner,
        "createdAt": iso8601(task.created_at_ms),
        "lastUpdatedAt": iso8601(task.updated_at_ms),
        "createdAtMs": task.created_at_ms,
        "updatedAtMs": task.updated_at_ms,
        "terminal": task.status.is_terminal(),
    })
}

/// The list the caller sees: its own tasks, and for an operator every principal's unfinished
/// ones too; newest first, at most [`LIST_LIMIT`]. Each task's status and times only.
pub(crate) async fn task_list(store: &Store, caller: &Caller) -> Result<Value, StoreError> {
    let mut tasks = store.newest_tasks(TaskIndex::Owner(&caller.principal), LIST_LIMIT).await?;
    if caller.operator {
        let live = store.newest_tasks(TaskIndex::Live, LIST_LIMIT).await?;
        let mine: std::collections::HashSet<String> = tasks.iter().map(|t| t.task_id.clone()).collect();
        tasks.extend(live.into_iter().filter(|t| !mine.contains(&t.task_id)));
    }
    tasks.sort_by(|a, b| b.created_at_ms.cmp(&a.created_at_ms).then_with(|| b.task_id.cmp(&a.task_id)));
    tasks.truncate(LIST_LIMIT);
    Ok(json!({"tasks": tasks.iter().map(task_row).collect::<Vec<_>>(), "limit": LIST_LIMIT}))
}

/// One task with its nodes: the row's fields, its arguments, its result (the `CallToolResult`
/// of a completed task) or error, and each node with its status, attempts, times and edges.
pub(crate) fn task_detail(task: &TaskRecord, nodes: &[NodeRecord]) -> Value {
    let mut detail = task_row(&task.status_record());
    detail["ttlMs"] = json!(task.ttl_ms);
    detail["arguments"] = task.call.arguments.clone();
    detail["result"] = task.result.clone().unwrap_or(Value::Null);
    detail["error"] = json!(task.error);
    detail["inputRequests"] = task.input_requests.clone().unwrap_or(Value::Null);
    detail["plannedBy"] = json!(planner(task, nodes));
    detail["nodes"] = nodes.iter().map(node_view).collect::<Vec<_>>().into();
    detail
}

/// The node whose tool planned the task's graph, if a tool did: a direct call's node (`root`,
/// running the called tool) that now has other nodes beside it. Its planned nodes do not name it
/// as a dependency (they were queued when it completed), so the page draws that link itself.
fn planner<'a>(task: &TaskRecord, nodes: &'a [NodeRecord]) -> Option<&'a str> {
    if nodes.len() < 2 {
        return None;
    }
    nodes.iter().find(|n| n.node_id == ROOT_NODE && n.tool == task.tool).map(|n| n.node_id.as_str())
}

fn node_view(node: &NodeRecord) -> Value {
    // A built-in step (`$collect`, ...) is shown by its kind.
    let (tool, builtin) = match node.tool.strip_prefix('$') {
        Some(kind) => (kind, true),
        None => (node.tool.as_str(), false),
    };
    let duration_ms = match (node.started_at_ms, node.finished_at_ms) {
        (Some(start), Some(end)) => Some(end.saturating_sub(start)),
        _ => None,
    };
    json!({
        "nodeId": node.node_id,
        "status": node.status,
        "tool": tool,
        "builtin": builtin,
        "attempt": node.attempt,
        "worker": node.worker,
        "startedAtMs": node.started_at_ms,
        "finishedAtMs": node.finished_at_ms,
        "durationMs": duration_ms,
        "error": node.error,
        "outputBytes": node.output_bytes,
        "dependents": node.dependents,
    })
}

/// Queues (summed over shards, each shard listed too), workers and dead letters, for operators.
/// `now` is Redis's clock, which heartbeats are stamped with.
pub(crate) fn operators(
    stats: &ClusterStats,
    workers: &[WorkerRecord],
    letters: &[DeadLetter],
    now: u64,
) -> Value {
    let live: HashMap<&str, u64> = stats.workers_live.iter().map(|(q, n)| (q.as_str(), *n)).collect();
    let mut by_queue: BTreeMap<&str, (u64, u64, u64, Vec<Value>)> = BTreeMap::new();
    for depth in &stats.queues {
        let (entries, pending, lag, shards) = by_queue.entry(depth.queue.as_str()).or_default();
        *entries += depth.entries;
        *pending += depth.pending;
        *lag += depth.lag;
        shards.push(json!({
            "shard": depth.shard.0, "entries": depth.entries, "pending": depth.pending, "lag": depth.lag,
        }));
    }
    let queues: Vec<Value> = by_queue
        .into_iter()
        .map(|(queue, (entries, pending, lag, shards))| {
            json!({
                "queue": queue, "entries": entries, "pending": pending, "lag": lag,
                "workers": live.get(queue).copied().unwrap_or(0), "shards": shards,
            })
        })
        .collect();
    let workers: Vec<Value> = workers
        .iter()
        .map(|w| {
            json!({
                "name": w.name,
                "host": w.host,
                "pid": w.pid,
                "queues": w.queues,
                "tools": w.tools,
                "concurrency": w.concurrency,
                "running": w.running,
                "heartbeatMs": w.heartbeat_ms,
                "heartbeatAgeMs": now.saturating_sub(w.heartbeat_ms),
                "live": w.is_live(now),
            })
        })
        .collect();
    let letters: Vec<Value> = letters
        .iter()
        .map(|l| {
            json!({
                "id": l.id,
                "taskId": l.task_id,
                "nodeId": l.node_id,
                "tool": l.tool,
                "owner": l.owner,
                "attempts": l.attempts,
                "error": l.error,
                "at": iso8601(l.at_ms),
                "atMs": l.at_ms,
            })
        })
        .collect();
    json!({
        "queues": queues,
        "workers": workers,
        "liveForMs": LIVE_FOR_MS,
        "deadLetters": {
            "total": stats.dead_letters.iter().map(|(_, n)| n).sum::<u64>(),
            "shown": DEAD_LETTERS_SHOWN,
            "newest": letters,
        },
    })
}
