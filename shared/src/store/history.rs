//! Tools' run histories and memories: what a tool keeps of its past runs under a name, so that a
//! run can be compared with the ones before it. A history (a readiness profile's outcomes) is
//! shared by every caller; a memory (a principal's troubleshooting sessions, its bootstrap
//! executions) is its principal's alone, kept in the shard its principal's name picks.

use serde_json::{Value, json};

use super::Store;
use crate::{StoreError, keys};

/// The largest entry a principal's memory keeps: its lists are capped by count, and what they keep
/// counts against the principal's stored bytes (`kept:<owner>` of its memory shard).
pub const MAX_MEMORY_ENTRY_BYTES: usize = 64 * 1024;

impl Store {
    /// Records `entry` as the newest run of `tool` under `name`, keeping the newest `keep`, and
    /// returns the runs recorded before it, newest first. One script, so that two runs recorded
    /// at once each see the other or not, never half of it; repeated after a lost reply, it
    /// records the run once (an entry names its run and time, so its text is its identity).
    pub async fn record_run(
        &self,
        tool: &str,
        name: &str,
        entry: &Value,
        keep: usize,
    ) -> Result<Vec<Value>, StoreError> {
        let key = keys::run_history(tool, name);
        let record = json!({"entry": entry.to_string(), "keep": keep.max(1)});
        let previous: Vec<String> = self.script(&crate::scripts::RECORD_RUN, &[key], &record).await?;
        Ok(decode(previous))
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

/// Entries that are not JSON (written by something else) are left out rather than failing a run.
fn decode(entries: Vec<String>) -> Vec<Value> {
    entries.into_iter().filter_map(|e| serde_json::from_str(&e).ok()).collect()
}
