//! Completions of one shard go to Redis in batches, as one `complete_node` call each: a group
//! commit ([`super::group_commit`]). A busy worker so pays one script call per batch instead of
//! one per node, with no timer and no added wait.

use serde_json::Value;

use super::group_commit::{Batched, Batches};
use super::{Deferred, Store};
use crate::error::StoreError;
use crate::keys::Shard;
use crate::scripts;

/// One completion: the keys of its task (task hash, its queues' streams, then their held lists)
/// and its record.
pub(super) struct Completion {
    pub keys: Vec<String>,
    pub record: Value,
}

impl Batched for Completion {
    type Reply = Value;

    fn size(&self) -> usize {
        self.record["payload"].as_str().map_or(0, str::len)
    }

    fn queues(store: &Store) -> &Batches<Self> {
        &store.inner.completions
    }

    async fn send(store: &Store, shard: Shard, completions: Vec<Self>) -> Result<Vec<Value>, StoreError> {
        store.send_completions(shard, &completions).await
    }
}

impl Store {
    /// Settles one completion of `shard` in the shard's next batch; its own reply of
    /// `complete_node`.
    pub(super) async fn complete_in_batch(
        &self,
        shard: Shard,
        completion: Completion,
    ) -> Result<Value, StoreError> {
        self.in_batch(shard, completion).await
    }

    /// One `complete_node` call for `completions`, all of `shard`.
    async fn send_completions(
        &self,
        shard: Shard,
        completions: &[Completion],
    ) -> Result<Vec<Value>, StoreError> {
        let mut keys =
            vec![shard.load(), shard.retries(), shard.expiring(), shard.dead_letters(), shard.kept()];
        let mut records = Vec::with_capacity(completions.len());
        for completion in completions {
            let mut record = completion.record.clone();
            record["k"] = (keys.len() + 1).into();
            keys.extend(completion.keys.iter().cloned());
            records.push(record);
        }
        if self.inner.options.wait_replicas == 0 {
            return self.script(&scripts::COMPLETE_NODE, &keys, &records).await;
        }
        // A deployment that waits for replicas: the waiters hear of these completions only once
        // enough replicas have them, so that no client is told an outcome a failover could take
        // back (the node would run again, and its stored result could differ).
        records[0]["deferEvents"] = Value::Bool(true);
        let record = super::script_record(&records)?;
        let (reply, acknowledged) = self.eval_and_wait(&scripts::COMPLETE_NODE, &keys, &record).await?;
        let Deferred { events, reply } = serde_json::from_str(&reply)
            .map_err(|e| StoreError::Corrupt(format!("complete_node reply {reply:?}: {e}")))?;
        match self.enough_replicas(acknowledged) {
            Ok(()) => self.publish_events(&events).await?,
            // Recorded on the primary all the same: the workers are done with these nodes. A
            // waiter learns of them at its next read of the task, which waits for the replicas.
            Err(e) => {
                tracing::warn!(error = %e, completions = records.len(), "completions not announced: too few replicas have them")
            }
        }
        serde_json::from_value(reply).map_err(|e| StoreError::Corrupt(format!("complete_node reply: {e}")))
    }
}
