//! The Lua scripts of every atomic transition, each from its own file in `lua/`, each behind the
//! shared helpers of `lua/prelude.lua` (how a node joins and leaves its queue, how an entry is
//! acknowledged, how a task settles and who hears of it).
//!
//! Every script takes the keys it touches in `KEYS`, all of one shard, and its arguments as one
//! JSON record in `ARGV[1]`; it answers with JSON that decodes to a Rust enum in `store`.
//! `redis::Script` sends `EVALSHA` and loads the script on `NOSCRIPT`, so a restarted or
//! failed-over Redis gets the scripts back without anyone noticing.

use std::sync::LazyLock;

use redis::Script;

macro_rules! script {
    ($name:ident, $file:literal) => {
        pub static $name: LazyLock<Script> =
            LazyLock::new(|| Script::new(concat!(include_str!("lua/prelude.lua"), include_str!($file))));
    };
}

script!(CREATE_TASK, "lua/create_task.lua");
script!(RATE_LIMIT, "lua/rate_limit.lua");
script!(START_NODES, "lua/start_nodes.lua");
script!(REPORT_PROGRESS, "lua/report_progress.lua");
script!(NOTIFY_WAITERS, "lua/notify_waiters.lua");
script!(COMPLETE_NODE, "lua/complete_node.lua");
script!(CANCEL_TASK, "lua/cancel_task.lua");
script!(PARK_NODE, "lua/park_node.lua");
script!(ESCALATE_TASK, "lua/escalate_task.lua");
script!(ANSWER_INPUT, "lua/answer_input.lua");
script!(RELEASE_NODE, "lua/release_node.lua");
script!(RECLAIM_NODE, "lua/reclaim_node.lua");
script!(PROMOTE_RETRY, "lua/promote_retry.lua");
script!(EXPIRE_TASK, "lua/expire_task.lua");
script!(SETTLE_DAG, "lua/settle_dag.lua");
script!(EXPAND_PLAN, "lua/expand_plan.lua");
script!(MAINTAIN, "lua/maintain.lua");
script!(WATCH_TASK, "lua/watch_task.lua");
