//! Everything decoded from what Redis hands back: task hashes, node entries, inbox messages,
//! worker heartbeats and published tools; then the gateway's and CLI's views of a decoded task.
//!
//! Input format (text, one value per line, so that seeds are readable; see
//! `corpus/task_record/`):
//! - line 1: the task id;
//! - lines 2 to 18: the values of `TASK_FIELDS`, in order, as `HMGET` returns them; the line
//!   `<nil>` (or a missing line) is an absent field;
//! - any further line: an entry of the task's nodes hash, `<nodeId>:<field>=<value>`.
//!
//! Every line is also tried as an inbox message (`InboxMessage::parse`), a task event, an RPC
//! error, a worker record and a published tool, the JSON shapes Lua scripts and workers write.
//! (The Lua scripts' own reply types in `shared/src/store/*.rs` are private, so they are reached
//! only through the store, which needs Redis.)
#![no_main]

use std::collections::HashMap;

use conveyor_gateway::wire::{self, Wire};
use conveyor_shared::keys;
use conveyor_shared::model::{
    InboxMessage, NodeRecord, PublishedTool, RpcError, TASK_FIELDS, TaskEvent, TaskRecord,
};
use conveyor_shared::store::{WorkerRecord, task_error, task_summary};
use libfuzzer_sys::fuzz_target;

const NIL: &str = "<nil>";

fuzz_target!(|data: &[u8]| {
    // Redis values reach the parsers as Strings: the redis crate refuses invalid UTF-8 before.
    let text = String::from_utf8_lossy(data);
    let mut lines = text.split('\n');
    let task_id = lines.next().unwrap_or_default();
    let values: Vec<Option<String>> =
        (0..TASK_FIELDS.len()).map(|_| lines.next().filter(|l| *l != NIL).map(str::to_owned)).collect();
    let node_lines: Vec<&str> = lines.collect();

    for line in std::iter::once(task_id)
        .chain(values.iter().flatten().map(String::as_str))
        .chain(node_lines.iter().copied())
    {
        decode_line(line);
    }

    // The nodes hash, as HGETALL returns it.
    let mut nodes_hash = HashMap::new();
    for line in &node_lines {
        let (key, value) = line.split_once('=').unwrap_or((line, ""));
        nodes_hash.insert(key.to_owned(), value.to_owned());
    }
    let nodes = NodeRecord::from_hash(nodes_hash.clone());
    assert!(nodes.windows(2).all(|w| w[0].node_id < w[1].node_id), "nodes come ordered by id, once each");
    for node in &nodes {
        serde_json::to_string(node).expect("a node record serializes");
    }

    let by_fields = TaskRecord::from_fields(task_id, values.clone());
    // The same task read with HGETALL: its fields and its node entries in one hash. Node keys
    // hold a `:` and no task field does, so the extra entries must not change the result.
    let mut full_hash: HashMap<String, String> = TASK_FIELDS
        .iter()
        .zip(values.iter())
        .filter_map(|(field, value)| Some(((*field).to_owned(), value.clone()?)))
        .collect();
    let had_fields = !full_hash.is_empty();
    full_hash.extend(nodes_hash.into_iter().filter(|(k, _)| k.contains(':')));
    let by_hash = TaskRecord::from_hash(task_id, full_hash);
    if had_fields {
        // Debug, not PartialEq: a stored progress of "NaN" parses as NaN.
        assert_eq!(format!("{by_fields:?}"), format!("{by_hash:?}"), "HMGET and HGETALL readings differ");
    }

    for record in [by_fields, by_hash].into_iter().filter_map(|r| r.ok().flatten()) {
        render(&record, &nodes);
    }

    // Task ids come from clients too: which shard one names must never panic.
    for shards in [0, 1, 4, keys::MAX_SHARDS, u16::MAX] {
        if let Some(shard) = keys::shard_of(task_id, shards) {
            assert!(shard.0 < shards);
            let _ = shard.task(task_id);
        }
        let shard = keys::shard_of_key(task_id, text.as_ref(), shards);
        assert!(shard.0 < shards.max(1));
    }
});

fn decode_line(line: &str) {
    if let Ok(message) = InboxMessage::parse(line) {
        serde_json::to_string(&message.event).expect("an event serializes");
    }
    let _ = serde_json::from_str::<TaskEvent>(line);
    let _ = serde_json::from_str::<RpcError>(line);
    if let Ok(worker) = serde_json::from_str::<WorkerRecord>(line) {
        let _ = worker.is_live(conveyor_shared::model::now_ms());
        let _ = worker.is_live(0);
        let _ = worker.is_live(u64::MAX);
    }
    if let Ok(tool) = serde_json::from_str::<PublishedTool>(line) {
        let _ = tool.name();
        let _ = tool.queue_name();
    }
}

/// What the gateway and the CLI make of a task read from Redis.
fn render(record: &TaskRecord, nodes: &[NodeRecord]) {
    let _ = wire::task_2025(record).to_string();
    let _ = serde_json::to_string(&wire::task_2026(record));
    let _ = serde_json::to_string(&wire::detailed_2026(record));
    let _ = wire::create_result(Wire::V2025, record).to_string();
    let _ = wire::create_result(Wire::V2026, record).to_string();
    let _ = task_summary(record, nodes).to_string();
    let _ = serde_json::to_string(&task_error(record));
}
