//! Every Redis key and channel name Conveyor uses, and nothing else.
//!
//! The keyspace is cut into shards. Every key of shard `k` carries the hash tag `{cv.k}`, so on
//! Redis Cluster a shard is one slot and every script, which touches the keys of one shard only,
//! runs on one node. A task lives in one shard, and its id says which ([`shard_of`]). Keys outside
//! the shards (the worker catalog, the deployment's layout) are never touched by a per-task script.
//!
//! Scripts never build a key or channel name: every name is built here and passed in `KEYS`, or
//! stored as data by the Rust side (a waiter's inbox channel) and read back by the script.

use std::fmt;

/// A member of the expiring and kept indexes ([`Shard::expiring`], [`Shard::kept`]), scored
/// [`INDEX_PIN_SCORE`], past any time a task reaches, from their first insert on. It is longer than
/// Redis's `zset-max-listpack-value` (64 bytes by default), so Redis keeps both as skip lists: a
/// small sorted set is a listpack, and an insert into one scans every entry before it, parsing each
/// score (an index's inserts are its latest times: 20,000 instructions of Redis's per call, ADR-0028).
/// Whatever reads these indexes bounds its range below the pin's score (`prelude.lua` has both).
pub const INDEX_PIN: &str =
    "~ this member keeps the index a skip list: inserting into a listpack scans all of it";

/// The score of [`INDEX_PIN`]: 10^14 ms, in the year 5138; a number Lua writes exactly (`%.14g`).
pub const INDEX_PIN_SCORE: u64 = 100_000_000_000_000;

/// Prefix of every key, so that Conveyor can share a Redis database with other software.
pub const PREFIX: &str = "cv";

/// The consumer group of all workers on every queue stream.
pub const WORK_GROUP: &str = "workers";

/// The queue of built-in nodes (`$noop`, `$collect`, the `$finalize` entry of a DAG): every
/// worker reads it, whatever tools it offers.
pub const BUILTIN_QUEUE: &str = "$builtin";

/// The node id of the work entry that assembles a finished DAG task's result.
pub const FINALIZE_NODE: &str = "$finalize";

/// Most shards a deployment may have: a task id spends four hex digits on its shard.
pub const MAX_SHARDS: u16 = 4096;

/// One shard of the keyspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Shard(pub u16);

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl Shard {
    /// The hash tag all of this shard's keys share.
    fn tag(self) -> String {
        format!("{PREFIX}:{{cv.{}}}", self.0)
    }

    /// Hash of a task: status, timestamps, TTL, owner, tool, arguments, result or error, waiters,
    /// and its nodes as fields `<nodeId>:<field>` (task fields never contain a `:`, node ids never
    /// do). One key per task: a transition reads and writes the task and its node in one command
    /// each, and a settled task's keys expire with one command.
    pub fn task(self, task_id: &str) -> String {
        format!("{}:t:{task_id}", self.tag())
    }

    /// The stream of runnable nodes of one queue in this shard (consumer group [`WORK_GROUP`]).
    pub fn queue(self, queue: &str) -> String {
        format!("{}:q:{queue}", self.tag())
    }

    /// Nodes of one queue set aside because the worker that read them had given their owner its
    /// share of its slots (a list of `task\tnode\ttrace`, oldest first); each goes back to the
    /// queue's stream when a node of that queue in this shard finishes, or by the shard's
    /// maintenance. They stay `queued`, with no entry, meanwhile.
    pub fn held(self, queue: &str) -> String {
        format!("{}:held:{queue}", self.tag())
    }

    /// Hash of load counters: `queued`, `queued:<tool>`, `live:<owner>`, `nodes:<owner>` (what an
    /// owner's live tasks hold beyond one node each), `held` (nodes set aside in [`Shard::held`]),
    /// `kept:<owner>` (the bytes an owner keeps in the shard: its tasks' calls, outputs, results
    /// and answers until their keys expire, and its memories), `rounds:<owner>` (the owner's
    /// synchronous calls parked in an input round told to their client: no longer live tasks).
    pub fn load(self) -> String {
        format!("{}:load", self.tag())
    }

    /// Sorted set of failed attempts waiting out their backoff, scored by the time they are due.
    pub fn retries(self) -> String {
        format!("{}:retries", self.tag())
    }

    /// Sorted set of unsettled tasks (`<taskId>`), scored by the time their TTL runs out, and
    /// [`INDEX_PIN`].
    pub fn expiring(self) -> String {
        format!("{}:expiring", self.tag())
    }

    /// Sorted set of the stored bytes that settled tasks' owners still hold, by when the tasks'
    /// keys expire, in buckets of 100 ms: members are `<bucket>\t<owner>` (the expiry time in ms
    /// divided by 100, rounded down), scored by the end of the bucket, and their bytes add up in
    /// the load hash under `keptAt:<member>`, so that the shard's maintenance gives them back to
    /// `kept:<owner>` without reading the tasks, whose keys are gone by then. (A previous version's
    /// members, one per task, are `<taskId>\t<bytes>\t<owner>`; the maintenance reads both.) It
    /// holds [`INDEX_PIN`] too.
    pub fn kept(self) -> String {
        format!("{}:kept", self.tag())
    }

    /// Stream of nodes whose attempts are spent, for operators (`conveyor redis dlq`).
    pub fn dead_letters(self) -> String {
        format!("{}:dead", self.tag())
    }

    /// Sorted set of an owner's synchronous calls in this shard that parked in an input round and
    /// were told to their client (MRTR), scored by when they parked: the oldest go first when the
    /// owner has more than its share of unanswered rounds. Kept loosely: a round answered is
    /// removed, one that ended otherwise is removed when an eviction finds it over.
    pub fn rounds(self, owner: &str) -> String {
        format!("{}:rounds:{}", self.tag(), part(owner))
    }

    /// Sorted set of an owner's tasks in this shard, scored by creation time.
    pub fn owner_tasks(self, owner: &str) -> String {
        format!("{}:owner:{owner}", self.tag())
    }

    /// The task an owner's call with this idempotency key created. Both parts come from callers:
    /// each is escaped ([`part`]), so that no two (owner, key) pairs name one key.
    pub fn idempotency(self, owner: &str, key: &str) -> String {
        format!("{}:idem:{}:{}", self.tag(), part(owner), part(key))
    }

    /// The hidden tasks of the synchronous calls the client made under one request id in `scope`
    /// (a 2025-11-25 session, or the principal), newest first, so that `notifications/cancelled`
    /// on any gateway finds the call's work, and knows when the id names more than one call (two
    /// clients of one principal without sessions). A list, trimmed to the last few calls. Both
    /// parts are escaped, as in [`Shard::idempotency`].
    pub fn call(self, scope: &str, request_id: &str) -> String {
        format!("{}:calls:{}:{}", self.tag(), part(scope), part(request_id))
    }

    /// A list of one principal's memory of a tool under a name (a root's troubleshooting
    /// sessions, a bootstrap profile's executions), newest first, trimmed to the number the tool
    /// keeps. Every list of a principal lives in the shard [`memory_shard`] picks for it, so that
    /// what it keeps can be counted in that shard's load hash. All three parts are escaped
    /// ([`part`]): the owner is a caller's name, and a tool's name or a root's may hold a `:`.
    pub fn memory(self, owner: &str, tool: &str, name: &str) -> String {
        format!("{}:mem:{}:{}:{}", self.tag(), part(owner), part(tool), part(name))
    }

    /// When `caller` may next read a task (`tasks/get` no faster than the poll interval).
    pub fn poll_gate(self, task_id: &str, caller: &str) -> String {
        format!("{}:poll:{task_id}:{caller}", self.tag())
    }

    /// When `caller` may next read a task's result (`tasks/result`, the result resource): a gate
    /// of its own, so that a client that polls `tasks/get` until the end fetches the result at
    /// once, and reads it again no faster than the poll gap.
    pub fn result_gate(self, task_id: &str, caller: &str) -> String {
        format!("{}:poll-result:{task_id}:{caller}", self.tag())
    }

    /// Sharded channel on which cancellations of this shard's tasks reach every worker.
    pub fn cancel_channel(self) -> String {
        format!("{}:cancel", self.tag())
    }

    /// Sharded channel of one process's inbox in this shard: events of the tasks it waits on.
    pub fn inbox(self, process: &str) -> String {
        format!("{}:inbox:{process}", self.tag())
    }
}

/// A name made by a caller (a principal, an idempotency key, a request id) as one part of a key
/// with several: `%` and `:` are percent-escaped, so that the part holds no `:` and the parts of a
/// key never run into each other. Names without either (nearly all) are unchanged.
pub fn part(name: &str) -> std::borrow::Cow<'_, str> {
    if !name.contains([':', '%']) {
        return std::borrow::Cow::Borrowed(name);
    }
    std::borrow::Cow::Owned(name.replace('%', "%25").replace(':', "%3A"))
}

/// The queue a stream key of [`Shard::queue`] belongs to, for labels and reports; `None` for a
/// key that is no queue stream.
pub fn queue_of_stream(stream: &str) -> Option<&str> {
    let rest = stream.strip_prefix(PREFIX)?.strip_prefix(":{cv.")?;
    let (shard, rest) = rest.split_once("}:q:")?;
    shard.parse::<u16>().ok()?;
    Some(rest)
}

/// A principal's request rate, shared by every gateway (a GCRA arrival time). One key per
/// principal, outside the shards: the script that reads it touches nothing else.
pub fn rate(principal: &str) -> String {
    format!("{PREFIX}:rate:{principal}")
}

/// When `caller` may next read one page of one listing of tasks (`listing` names the reader:
/// `tasks/list`, the tasks resource, the web view; `page` its cursor, or `first`), shared by every
/// gateway. Outside the shards: a listing spans them all.
pub fn list_gate(listing: &str, page: &str, caller: &str) -> String {
    format!("{PREFIX}:poll-list:{}:{}:{}", part(listing), part(page), part(caller))
}

/// The shard a task id names: its first four hex digits. `None` for an id that names no shard of
/// a deployment with `shards` shards (such a task does not exist).
pub fn shard_of(task_id: &str, shards: u16) -> Option<Shard> {
    let digits = task_id.get(..4)?;
    let shard = u16::from_str_radix(digits, 16).ok()?;
    (task_id.len() == 32 && shard < shards && task_id.bytes().all(|b| b.is_ascii_hexdigit()))
        .then_some(Shard(shard))
}

/// The shard of an idempotent call: its key decides, so that a retry finds the first task.
pub fn shard_of_key(owner: &str, key: &str, shards: u16) -> Shard {
    // FNV-1a: stable across processes and builds, unlike std's hasher. The owner goes in escaped
    // and ended by `:`, which it cannot hold then, so that (owner, key) pairs stay apart.
    let mut hash: u32 = 0x811c_9dc5;
    for byte in part(owner).bytes().chain([b':']).chain(key.bytes()) {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    Shard((hash % u32::from(shards.max(1))) as u16)
}

/// The shard that holds every memory list of `owner` ([`Shard::memory`]).
pub fn memory_shard(owner: &str, shards: u16) -> Shard {
    shard_of_key(owner, "$memory", shards)
}

/// The deployment's layout (shard count), fixed when it is first set up, the signing secret
/// gateways share (field `signingKey`), and the deployment's id (field `deploymentId`).
pub const LAYOUT: &str = "cv:{cv.meta}:layout";

/// The log level a 2025-11-25 session (or a principal without one) asked for with
/// `logging/setLevel`.
pub fn log_level(scope: &str) -> String {
    format!("{PREFIX}:{{cv.meta}}:log-level:{scope}")
}

/// A list of a tool's past runs under one name (a readiness profile), newest first, trimmed to
/// the number the tool keeps. Outside the shards: no task script touches it.
pub fn run_history(tool: &str, name: &str) -> String {
    format!("{PREFIX}:{{cv.history}}:{tool}:{name}")
}

/// Hash of the attempts that recorded into [`run_history`]`(tool, name)`: `<task>/<node>` to the
/// attempt and the digest of its entry, so that a late record of a node's taken-over attempt is
/// refused and a newer attempt's replaces it. In the history's slot; no `:` follows the hash tag,
/// which every run history's key has there, so that no tool and name make a history of this name.
pub fn run_fences(tool: &str, name: &str) -> String {
    format!("{PREFIX}:{{cv.history}}fences:{}:{}", part(tool), part(name))
}

/// Hash of worker name to its heartbeat record (queues, tools, running nodes, time).
pub const WORKERS: &str = "cv:{cv.catalog}:workers";

/// Sorted set of worker name to the time (Redis ms) its liveness runs out: its last heartbeat plus
/// its lease. The maintenance holder takes over a worker's entries once that time has passed.
pub const ALIVE: &str = "cv:{cv.catalog}:alive";

/// Which worker runs the deployment's maintenance (retries, expiries, idle entries): a lease
/// string, taken and renewed by heartbeats, and given up by its holder when it stops.
pub const MAINTAINER: &str = "cv:{cv.catalog}:maintainer";

/// Hash of tool name to the tool as workers publish it (definition, queue, position).
pub const TOOLS: &str = "cv:{cv.catalog}:tools";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_a_shard_share_one_hash_tag() {
        let s = Shard(3);
        for key in [
            s.task("x"),
            s.queue("greet"),
            s.held("greet"),
            s.load(),
            s.retries(),
            s.expiring(),
            s.kept(),
            s.dead_letters(),
            s.owner_tasks("alice"),
            s.idempotency("alice", "k"),
            s.cancel_channel(),
            s.inbox("g1"),
            s.memory("alice", "troubleshoot", "repo"),
        ] {
            assert!(key.starts_with("cv:{cv.3}:"), "{key} lacks the shard's hash tag");
        }
    }

    #[test]
    fn every_script_pins_the_indexes_with_the_same_member() {
        assert!(INDEX_PIN.len() > 64, "longer than Redis's default zset-max-listpack-value");
        let pin = format!("local INDEX_PIN = '{INDEX_PIN}'");
        let score = format!("local INDEX_PIN_SCORE = {INDEX_PIN_SCORE}");
        for (name, text) in [
            ("prelude", include_str!("lua/prelude.lua")),
            ("create_calls", include_str!("lua/create_calls.lua")),
            ("complete_calls", include_str!("lua/complete_calls.lua")),
        ] {
            assert!(text.contains(&pin) && text.contains(&score), "{name}.lua's copy of the pin differs");
        }
        // Lua writes a number joined into a range bound with `%.14g`: the score must stay exact.
        let digits = INDEX_PIN_SCORE.to_string();
        assert!(
            digits.trim_end_matches('0').len() <= 14,
            "{digits} has more significant digits than %.14g keeps"
        );
    }

    #[test]
    fn key_names_are_stable() {
        // Gateways and workers of different builds meet in Redis: renaming a key is a migration.
        assert_eq!(Shard(0).task("x"), "cv:{cv.0}:t:x");
        assert_eq!(Shard(12).queue("research"), "cv:{cv.12}:q:research");
    }

    #[test]
    fn a_queue_stream_names_its_queue() {
        assert_eq!(queue_of_stream(&Shard(7).queue("research")), Some("research"));
        assert_eq!(queue_of_stream(&Shard(0).queue(BUILTIN_QUEUE)), Some(BUILTIN_QUEUE));
        assert_eq!(queue_of_stream(&Shard(0).queue("a:b")), Some("a:b"), "a queue name may hold a colon");
        assert_eq!(queue_of_stream(&Shard(0).dead_letters()), None);
        assert_eq!(queue_of_stream("cv:{cv.x}:q:research"), None);
    }

    #[test]
    fn a_task_id_names_its_shard() {
        assert_eq!(shard_of("000a0123456789abcdef0123456789ab", 16), Some(Shard(10)));
        assert_eq!(shard_of("000a0123456789abcdef0123456789ab", 8), None, "shard beyond the layout");
        assert_eq!(shard_of("zzzz0123456789abcdef0123456789ab", 16), None);
        assert_eq!(shard_of("000a", 16), None);
        assert_eq!(shard_of("000a0123456789abcdef0123456789a!", 16), None);
    }

    #[test]
    fn keys_built_from_two_caller_names_never_meet() {
        let s = Shard(0);
        // Principal `al` with key `x:y`, and principal `al:x` with key `y`.
        assert_ne!(s.idempotency("al", "x:y"), s.idempotency("al:x", "y"));
        assert_ne!(s.call("al", "x:y"), s.call("al:x", "y"));
        assert_ne!(s.idempotency("a%3Ab", "c"), s.idempotency("a:b", "c"));
        assert_eq!(s.idempotency("alice", "k1"), "cv:{cv.0}:idem:alice:k1", "plain names are unchanged");
        assert_eq!(part("a:b%c"), "a%3Ab%25c");
        assert_ne!(s.memory("al", "x:y", "z"), s.memory("al:x", "y", "z"));
        assert_ne!(s.memory("al", "x", "y:z"), s.memory("al", "x:y", "z"));
        assert_eq!(s.memory("alice", "troubleshoot", "repo"), "cv:{cv.0}:mem:alice:troubleshoot:repo");
    }

    #[test]
    fn a_principals_memory_stays_in_one_shard() {
        let shard = memory_shard("alice", 16);
        assert_eq!(shard, memory_shard("alice", 16));
        assert_eq!(shard, shard_of_key("alice", "$memory", 16));
        assert!(shard.0 < 16);
        let spread: std::collections::BTreeSet<Shard> =
            (0..64).map(|i| memory_shard(&format!("principal-{i}"), 16)).collect();
        assert!(spread.len() > 1, "principals spread over the shards");
    }

    #[test]
    fn an_idempotency_key_always_picks_the_same_shard() {
        let a = shard_of_key("alice", "k1", 16);
        assert_eq!(a, shard_of_key("alice", "k1", 16));
        assert!(a.0 < 16);
        assert_eq!(shard_of_key("alice", "k1", 1), Shard(0));
    }
}
