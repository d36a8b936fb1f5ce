//! Every Redis key and channel name Conveyor uses, and nothing else.
//!
//! Keys that belong to one task carry the hash tag `{<taskId>}` so that a later move to Redis Cluster
//! keeps each task's keys in one slot and every per-task script stays single-slot.

/// Prefix of every key, so that Conveyor can share a Redis database with other software.
pub const PREFIX: &str = "cv";

/// The stream that holds runnable nodes. Workers read it through [`WORK_GROUP`].
pub const WORK_STREAM: &str = "cv:work";

/// The consumer group of all workers on [`WORK_STREAM`].
pub const WORK_GROUP: &str = "workers";

/// Channel on which `tasks/cancel` announces a cancelled task id to every worker.
pub const CANCEL_CHANNEL: &str = "cv:cancel";

/// Hash of tool name to tool definition (JSON), written by workers, read by gateways.
pub const TOOLS: &str = "cv:tools";

/// Sorted set of failed attempts waiting out their backoff: members `<taskId> <nodeId>`, scored by
/// the time they are due again.
pub const DELAYED_RETRIES: &str = "cv:retries";

/// The pieces of a task's key names, for the one script that reaches tasks named in data (the
/// retry promoter): `<TASK_KEY_PREFIX><taskId><TASK_SUFFIX>` is [`task`], and with
/// [`NODES_SUFFIX`] it is [`nodes`].
pub const TASK_KEY_PREFIX: &str = "cv:{";
pub const TASK_SUFFIX: &str = "}:task";
pub const NODES_SUFFIX: &str = "}:nodes";

/// Hash of load counters: `queued` (nodes waiting for a worker), `queued:<tool>`, and
/// `live:<owner>` (tasks not yet terminal). The overload limits are checked against it.
pub const LOAD: &str = "cv:load";

/// Stream of nodes whose attempts are spent (or that lost their worker too often), with their
/// last error, tool and arguments, for operators (`conveyor dlq`).
pub const DEAD_LETTERS: &str = "cv:dead";

/// The node id of the work entry that assembles a finished DAG task's result.
pub const FINALIZE_NODE: &str = "$finalize";

/// Hash of a task: status, timestamps, TTL, owner, tool, arguments, result or error.
pub fn task(task_id: &str) -> String {
    format!("{PREFIX}:{{{task_id}}}:task")
}

/// Hash of a task's nodes, with fields `<nodeId>:<field>` (status, attempt, tool, args, ...).
pub fn nodes(task_id: &str) -> String {
    format!("{PREFIX}:{{{task_id}}}:nodes")
}

/// Channel for a task's progress and status events.
pub fn events(task_id: &str) -> String {
    format!("{PREFIX}:{{{task_id}}}:events")
}

/// The task an owner's call with this idempotency key created.
pub fn idempotency(owner: &str, key: &str) -> String {
    format!("{PREFIX}:idem:{owner}:{key}")
}

/// Sorted set of an owner's task ids, scored by creation time in milliseconds.
pub fn owner_tasks(owner: &str) -> String {
    format!("{OWNER_PREFIX}{owner}{OWNER_SUFFIX}")
}

/// The pieces of [`owner_tasks`], for the script that reaches owners named in data (the reaper).
pub const OWNER_PREFIX: &str = "cv:owner:";
pub const OWNER_SUFFIX: &str = ":tasks";

/// Sorted set of settled tasks (`<owner> <taskId>`) scored by the time their keys expire; the
/// reaper removes their owner-index entries then, so indexes hold only tasks that exist.
pub const EXPIRING: &str = "cv:expiring";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_keys_share_one_hash_tag() {
        let id = "0123abcd";
        for key in [task(id), nodes(id), events(id)] {
            assert!(key.contains("{0123abcd}"), "{key} lacks the task's hash tag");
        }
    }

    #[test]
    fn key_pieces_build_the_same_names() {
        assert_eq!(format!("{TASK_KEY_PREFIX}abc{TASK_SUFFIX}"), task("abc"));
        assert_eq!(format!("{TASK_KEY_PREFIX}abc{NODES_SUFFIX}"), nodes("abc"));
    }

    #[test]
    fn key_names_are_stable() {
        // Gateways and workers of different builds meet in Redis: renaming a key is a migration.
        assert_eq!(task("x"), "cv:{x}:task");
        assert_eq!(nodes("x"), "cv:{x}:nodes");
        assert_eq!(events("x"), "cv:{x}:events");
        assert_eq!(owner_tasks("alice"), "cv:owner:alice:tasks");
    }
}
