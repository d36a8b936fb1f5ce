//! The Lua scripts of every atomic transition, each loaded from its own file in `lua/`.
//!
//! `redis::Script` sends `EVALSHA` and loads the script once per server on `NOSCRIPT`, so a
//! restarted Redis gets the scripts back without anyone noticing.

use std::sync::LazyLock;

use redis::Script;

pub static CREATE_TASK: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/create_task.lua")));
pub static START_NODE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/start_node.lua")));
pub static REPORT_PROGRESS: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/report_progress.lua")));
pub static COMPLETE_NODE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/complete_node.lua")));
pub static CANCEL_TASK: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/cancel_task.lua")));
pub static REQUEST_INPUT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/request_input.lua")));
pub static ANSWER_INPUT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/answer_input.lua")));
pub static RELEASE_NODE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/release_node.lua")));
pub static PROMOTE_RETRIES: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/promote_retries.lua")));
pub static SETTLE_DAG: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/settle_dag.lua")));
pub static REAP_EXPIRED: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/reap_expired.lua")));
pub static TRIM_WORK: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/trim_work.lua")));
pub static EXPAND_PLAN: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/expand_plan.lua")));
