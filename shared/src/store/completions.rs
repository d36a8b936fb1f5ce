//! Completions of one shard go to Redis in batches, as one `complete_node` call each: a group
//! commit. The first completion of a shard starts a batch at once (an idle shard waits for
//! nothing); those that finish while it is on the way wait and go together in the next one. A busy
//! worker so pays one script call per batch instead of one per node, with no timer and no added
//! wait.
//!
//! Each batch runs on a task of its own, so that a caller that stops waiting (a shutdown's
//! deadline) never strands the completions queued behind it; it runs inside the tracing span of
//! its first completion, so that its round trip shows under that node.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::Value;
use tokio::sync::oneshot;
use tracing::Instrument;

use super::{Deferred, Store};
use crate::error::StoreError;
use crate::keys::Shard;
use crate::scripts;

/// Most completions in one batch: a batch is one script, and Redis runs nothing else meanwhile.
const MAX_BATCH: usize = 64;
/// Most bytes of records in one batch (a batch's first completion goes whatever its size).
const MAX_BATCH_BYTES: usize = 512 * 1024;

/// The completions waiting for each shard's batch.
#[derive(Default)]
pub(super) struct Completions {
    shards: Mutex<HashMap<u16, ShardQueue>>,
}

#[derive(Default)]
struct ShardQueue {
    /// A batch of this shard is on the way; completions that come meanwhile wait for the next.
    sending: bool,
    waiting: Vec<Waiting>,
}

/// One completion: the keys of its task (task hash, its queues' streams, then their held lists),
/// its record, and where its reply goes.
pub(super) struct Completion {
    pub keys: Vec<String>,
    pub record: Value,
}

struct Waiting {
    completion: Completion,
    span: tracing::Span,
    reply: oneshot::Sender<Result<Value, StoreError>>,
}

impl Store {
    /// Settles one completion of `shard` in the shard's next batch; its own reply of
    /// `complete_node`.
    pub(super) async fn complete_in_batch(
        &self,
        shard: Shard,
        completion: Completion,
    ) -> Result<Value, StoreError> {
        let (reply, answer) = oneshot::channel();
        let waiting = Waiting { completion, span: tracing::Span::current(), reply };
        let start = {
            let mut shards = self.inner.completions.shards.lock().unwrap_or_else(|e| e.into_inner());
            let queue = shards.entry(shard.0).or_default();
            queue.waiting.push(waiting);
            !std::mem::replace(&mut queue.sending, true)
        };
        if start {
            tokio::spawn(self.clone().send_batches(shard));
        }
        answer
            .await
            .unwrap_or_else(|_| Err(StoreError::Unavailable("the completion's batch was dropped".to_owned())))
    }

    /// Sends the shard's waiting completions, batch after batch, until none are left.
    async fn send_batches(self, shard: Shard) {
        loop {
            let batch = {
                let mut shards = self.inner.completions.shards.lock().unwrap_or_else(|e| e.into_inner());
                let queue = shards.entry(shard.0).or_default();
                if queue.waiting.is_empty() {
                    queue.sending = false;
                    return;
                }
                take_batch(&mut queue.waiting)
            };
            let span = batch[0].span.clone();
            let (records, senders): (Vec<_>, Vec<_>) =
                batch.into_iter().map(|w| (w.completion, w.reply)).unzip();
            let replies = self.send_batch(shard, &records).instrument(span).await;
            for (i, sender) in senders.into_iter().enumerate() {
                let reply = match &replies {
                    Ok(replies) => replies.get(i).cloned().ok_or_else(|| {
                        StoreError::Corrupt(format!(
                            "complete_node answered {} replies for {} completions",
                            replies.len(),
                            records.len()
                        ))
                    }),
                    Err(e) => Err(e.clone()),
                };
                let _ = sender.send(reply);
            }
        }
    }

    /// One `complete_node` call for `completions`, all of `shard`.
    async fn send_batch(&self, shard: Shard, completions: &[Completion]) -> Result<Vec<Value>, StoreError> {
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

/// The oldest waiting completions, up to the batch's bounds.
fn take_batch(waiting: &mut Vec<Waiting>) -> Vec<Waiting> {
    let mut bytes = 0;
    let mut count = 0;
    for w in waiting.iter() {
        let size = w.completion.record["payload"].as_str().map_or(0, str::len) + 256;
        if count > 0 && (count == MAX_BATCH || bytes + size > MAX_BATCH_BYTES) {
            break;
        }
        bytes += size;
        count += 1;
    }
    waiting.drain(..count).collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn waiting(payload_bytes: usize) -> Waiting {
        let record = json!({"payload": "x".repeat(payload_bytes)});
        Waiting {
            completion: Completion { keys: Vec::new(), record },
            span: tracing::Span::none(),
            reply: oneshot::channel().0,
        }
    }

    #[test]
    fn a_batch_takes_the_oldest_within_its_count_and_bytes_and_always_one() {
        let mut queue: Vec<Waiting> = (0..100).map(|_| waiting(10)).collect();
        assert_eq!(take_batch(&mut queue).len(), MAX_BATCH);
        assert_eq!(queue.len(), 100 - MAX_BATCH);

        let mut big = vec![waiting(MAX_BATCH_BYTES * 2), waiting(10)];
        assert_eq!(take_batch(&mut big).len(), 1, "a batch's first completion goes whatever its size");
        assert_eq!(big.len(), 1);

        let half = MAX_BATCH_BYTES / 2;
        let mut halves = vec![waiting(half), waiting(half), waiting(half)];
        assert_eq!(take_batch(&mut halves).len(), 1, "two halves and their records pass the bound");
        assert!(take_batch(&mut Vec::new()).is_empty());
    }
}
