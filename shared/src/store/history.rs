//! Tools' run histories and memories: what a tool keeps of its past runs under a name, so that a
//! run can be compared with the ones before it. A history (a readiness profile's outcomes) is
//! shared by every caller; a memory (a principal's troubleshooting sessions, its bootstrap
//! executions) is its principal's alone, kept in the shard its principal's name picks.

use serde_json::{Value, json};

use super::{Attempt, Store};
use crate::{StoreError, keys};

/// The largest entry a principal's memory keeps: its lists are capped by count, and what they keep
/// counts against the principal's stored bytes (`kept:<owner>` of its memory shard).
pub const MAX_MEMORY_ENTRY_BYTES: usize = 64 * 1024;

impl Store {
    /// Records `entry` as the newest run of `tool` under `name`, keeping the newest `keep`, and
    /// returns the runs recorded before it, newest first. One script, so that two runs recorded
    /// at once each see the other or not, never half of it; repeated after a lost reply, it
    /// records the run once (an entry names its run and time, so its text is its identity).
    ///
    /// Fenced by `attempt`, as its completion is: an attempt whose node was taken over (or that
    /// settled) records nothing and gets [`StoreError::Refused`], and a node's later attempt
    /// replaces what an earlier one recorded, so that a node's run is in the history once.
    pub async fn record_run(
        &self,
        attempt: &Attempt,
        tool: &str,
        name: &str,
        entry: &Value,
        keep: usize,
    ) -> Result<Vec<Value>, StoreError> {
        // The history is shared by tasks of every shard, so it lives in a slot of its own and no
        // script reads both it and the task: the attempt is checked first, and the history's own
        // fence refuses what an attempt that took over meanwhile has recorded first.
        let Some(attempt) = self.adopted(attempt).await? else { return Err(stale_run(attempt)) };
        let attempt = attempt.as_ref();
        let task = attempt.shard.task(&attempt.task_id);
        let fields = [format!("{}:status", attempt.node_id), format!("{}:attempt", attempt.node_id)];
        let (status, number): (Option<String>, Option<u32>) =
            self.query(|| redis::cmd("HMGET").arg(&task).arg(&fields).clone()).await?;
        if status.as_deref() != Some("running") || number != Some(attempt.number) {
            return Err(stale_run(attempt));
        }
        let keys = [keys::run_history(tool, name), keys::run_fences(tool, name)];
        let record = json!({
            "entry": entry.to_string(), "keep": keep.max(1),
            "run": format!("{}/{}", attempt.task_id, attempt.node_id), "attempt": attempt.number,
        });
        let reply: Value = self.script(&crate::scripts::RECORD_RUN, &keys, &record).await?;
        match reply {
            Value::Array(previous) => {
                Ok(decode(previous.into_iter().filter_map(|v| v.as_str().map(str::to_owned)).collect()))
            }
            _ => Err(stale_run(attempt)),
        }
    }

    /// The newest `count` runs of `tool` under `name`, newest first.
    pub async fn runs(&self, tool: &str, name: &str, count: usize) -> Result<Vec<Value>, StoreError> {
        self.newest(keys::run_history(tool, name), count).await
    }

    /// [`Store::record_run`] into `owner`'s own memory of `tool` under `name`: its list holds its
    /// entries only, so that the newest `keep` are its own and no other principal's runs push
    /// them out.
    pub async fn record_memory(
        &self,
        owner: &str,
        tool: &str,
        name: &str,
        entry: &Value,
        keep: usize,
    ) -> Result<Vec<Value>, StoreError> {
        let entry = entry.to_string();
        if entry.len() > MAX_MEMORY_ENTRY_BYTES {
            return Err(StoreError::Refused(format!(
                "a memory entry of {} bytes passes the {MAX_MEMORY_ENTRY_BYTES} a tool may keep in one",
                entry.len()
            )));
        }
        let shard = keys::memory_shard(owner, self.shards());
        let keys = [shard.memory(owner, tool, name), shard.load()];
        let record = json!({"entry": entry, "keep": keep.max(1), "owner": owner});
        let previous: Vec<String> = self.script(&crate::scripts::RECORD_RUN, &keys, &record).await?;
        Ok(decode(previous))
    }

    /// The newest `count` entries of `owner`'s memory of `tool` under `name`, newest first.
    pub async fn memories(
        &self,
        owner: &str,
        tool: &str,
        name: &str,
        count: usize,
    ) -> Result<Vec<Value>, StoreError> {
        let shard = keys::memory_shard(owner, self.shards());
        self.newest(shard.memory(owner, tool, name), count).await
    }

    async fn newest(&self, key: String, count: usize) -> Result<Vec<Value>, StoreError> {
        let count = count.max(1) as isize;
        let runs: Vec<String> =
            self.query(|| redis::cmd("LRANGE").arg(&key).arg(0).arg(count - 1).clone()).await?;
        Ok(decode(runs))
    }
}

/// The refusal of a run recorded by an attempt that is no longer its node's.
fn stale_run(attempt: &Attempt) -> StoreError {
    StoreError::Refused(format!(
        "attempt {} of node {} of task {} is no longer the node's current one (another worker took it over, or it \
         settled): its run is not recorded",
        attempt.number, attempt.node_id, attempt.task_id
    ))
}

/// Entries that are not JSON (written by something else) are left out rather than failing a run.
fn decode(entries: Vec<String>) -> Vec<Value> {
    entries.into_iter().filter_map(|e| serde_json::from_str(&e).ok()).collect()
}
