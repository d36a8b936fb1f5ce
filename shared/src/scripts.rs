//! The Lua scripts of every atomic transition, each from its own file in `lua/`, each behind the
//! shared helpers of `lua/prelude.lua` (how a node joins and leaves its queue, how an entry is
//! acknowledged, how a task settles and who hears of it).
//!
//! Every script takes the keys it touches in `KEYS`, all of one shard, and its arguments as one
//! MessagePack record in `ARGV[1]` (`cmsgpack.unpack` of a sync call's `create_task` record
//! costs Redis about 4 µs against 5.5 µs for `cjson.decode` of the same record); it answers with
//! JSON that decodes to a Rust enum in `store`, except `start_nodes`, which answers plain arrays
//! so that the call record it hands over is not escaped into a JSON document. The lean path's
//! batches (`create_calls`, `complete_calls`; ADR-0028) run without the prelude, behind only the
//! helper files they name (`lua/remember_call.lua`), take positional arguments and answer plain
//! arrays. Each carries the name of its file, which names its round trips in the metrics.
//! `redis::Script` sends `EVALSHA` and loads the script on `NOSCRIPT`, so a restarted or
//! failed-over Redis gets the scripts back without anyone noticing.

use std::ops::Deref;
use std::sync::LazyLock;

use redis::Script;

/// A script and the name of its file, which names its round trips in the metrics
/// (`conveyor_redis_round_trip_seconds{op="complete_node"}`).
pub struct NamedScript {
    pub name: &'static str,
    pub script: Script,
}

impl Deref for NamedScript {
    type Target = Script;

    fn deref(&self) -> &Script {
        &self.script
    }
}

macro_rules! script {
    ($name:ident, $file:literal) => {
        pub static $name: LazyLock<NamedScript> = LazyLock::new(|| NamedScript {
            name: $file,
            script: Script::new(concat!(
                include_str!("lua/remember_call.lua"),
                include_str!("lua/prelude.lua"),
                include_str!(concat!("lua/", $file, ".lua"))
            )),
        });
    };
}

/// A script that runs without the prelude, behind only the helper files it names: the lean
/// path's (ADR-0028), whose batches define no more than what they use.
macro_rules! script_alone {
    ($name:ident, $file:literal $(, $helper:literal)*) => {
        pub static $name: LazyLock<NamedScript> = LazyLock::new(|| NamedScript {
            name: $file,
            script: Script::new(concat!(
                $(include_str!(concat!("lua/", $helper, ".lua")),)*
                include_str!(concat!("lua/", $file, ".lua"))
            )),
        });
    };
}

script!(CREATE_TASK, "create_task");
script_alone!(CREATE_CALLS, "create_calls", "remember_call");
script_alone!(COMPLETE_CALLS, "complete_calls");
script!(RATE_LIMIT, "rate_limit");
script!(START_NODES, "start_nodes");
script!(REPORT_PROGRESS, "report_progress");
script!(NOTIFY_WAITERS, "notify_waiters");
script!(COMPLETE_NODE, "complete_node");
script!(CANCEL_TASK, "cancel_task");
script!(PARK_NODE, "park_node");
script!(ESCALATE_TASK, "escalate_task");
script!(ANSWER_INPUT, "answer_input");
script!(RELEASE_NODE, "release_node");
script!(IDLE_ENTRIES, "idle_entries");
script!(RECLAIM_NODE, "reclaim_node");
script!(PROMOTE_RETRY, "promote_retry");
script!(EXPIRE_TASK, "expire_task");
script!(SETTLE_DAG, "settle_dag");
script!(EXPAND_PLAN, "expand_plan");
script!(MAINTAIN, "maintain");
script!(WATCH_TASK, "watch_task");
script!(READ_TASK, "read_task");
script!(RELEASE_HELD, "release_held");
script!(HEARTBEAT, "heartbeat");
script!(RELEASE_MAINTENANCE, "release_maintenance");
script!(FORGET_WORKER, "forget_worker");
script!(LEAVE_CATALOG, "leave_catalog");
script!(RECORD_RUN, "record_run");
script!(RELEASE_TASK, "release_task");
script!(RESOLVE_CLAIM, "resolve_claim");
script!(CONFIRM_SETTLED, "confirm_settled");

/// Every script, so that a server can be given all of them at once (`SCRIPT LOAD`): a benchmark
/// that counts a server's instructions per call loads them first, so that no script's compile
/// lands in what it counts.
pub fn every() -> Vec<&'static NamedScript> {
    vec![
        &CREATE_TASK,
        &CREATE_CALLS,
        &COMPLETE_CALLS,
        &RATE_LIMIT,
        &START_NODES,
        &REPORT_PROGRESS,
        &NOTIFY_WAITERS,
        &COMPLETE_NODE,
        &CANCEL_TASK,
        &PARK_NODE,
        &ESCALATE_TASK,
        &ANSWER_INPUT,
        &RELEASE_NODE,
        &IDLE_ENTRIES,
        &RECLAIM_NODE,
        &PROMOTE_RETRY,
        &EXPIRE_TASK,
        &SETTLE_DAG,
        &EXPAND_PLAN,
        &MAINTAIN,
        &WATCH_TASK,
        &READ_TASK,
        &RELEASE_HELD,
        &HEARTBEAT,
        &RELEASE_MAINTENANCE,
        &FORGET_WORKER,
        &LEAVE_CATALOG,
        &RECORD_RUN,
        &RELEASE_TASK,
        &RESOLVE_CLAIM,
        &CONFIRM_SETTLED,
    ]
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_script_file_is_listed() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/lua");
        let helpers = ["prelude", "remember_call"];
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .expect("lua/")
            .map(|e| e.expect("entry").file_name().to_string_lossy().trim_end_matches(".lua").to_owned())
            .filter(|name| !helpers.contains(&name.as_str()))
            .collect();
        files.sort();
        let mut listed: Vec<String> = super::every().iter().map(|s| s.name.to_owned()).collect();
        listed.sort();
        assert_eq!(listed, files);
    }
}
