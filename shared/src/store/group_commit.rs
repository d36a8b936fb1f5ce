//! Group commit per shard (ADR-0009): the first item of a shard goes at once (an idle shard waits
//! for nothing); those that arrive while its batch is on the way wait and go together in the next
//! one. A busy shard so pays one script call per batch, with no timer and no added wait. Used by
//! completions (`complete_node`), lean creates (`create_calls`) and lean completions
//! (`complete_calls`).
//!
//! Each batch runs on a task of its own, so that a caller that stops waiting (a shutdown's
//! deadline) never strands the items queued behind it; it runs inside the tracing span of its
//! first item, so that its round trip shows under that request or node.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;

use tokio::sync::oneshot;
use tracing::Instrument;

use super::Store;
use crate::error::StoreError;
use crate::keys::Shard;

/// Most items in one batch: a batch is one script, and Redis runs nothing else meanwhile.
pub(super) const MAX_BATCH: usize = 64;
/// Most bytes of items in one batch (a batch's first item goes whatever its size).
pub(super) const MAX_BATCH_BYTES: usize = 512 * 1024;

/// An item that goes to Redis in its shard's next batch.
pub(super) trait Batched: Sized + Send + 'static {
    type Reply: Send + 'static;

    /// The bytes the item adds to its batch, against [`MAX_BATCH_BYTES`].
    fn size(&self) -> usize;

    /// The store's queues of this kind of item.
    fn queues(store: &Store) -> &Batches<Self>;

    /// Sends one batch of `shard`, in order; one reply per item.
    fn send(
        store: &Store,
        shard: Shard,
        items: Vec<Self>,
    ) -> impl Future<Output = Result<Vec<Self::Reply>, StoreError>> + Send;
}

/// The items waiting for each shard's batch.
pub(super) struct Batches<T: Batched> {
    shards: Mutex<HashMap<u16, ShardQueue<T>>>,
}

impl<T: Batched> Default for Batches<T> {
    fn default() -> Self {
        Self { shards: Mutex::new(HashMap::new()) }
    }
}

struct ShardQueue<T: Batched> {
    /// A batch of this shard is on the way; items that come meanwhile wait for the next.
    sending: bool,
    waiting: Vec<Waiting<T>>,
}

impl<T: Batched> Default for ShardQueue<T> {
    fn default() -> Self {
        Self { sending: false, waiting: Vec::new() }
    }
}

struct Waiting<T: Batched> {
    item: T,
    span: tracing::Span,
    reply: oneshot::Sender<Result<T::Reply, StoreError>>,
}

impl Store {
    /// Sends `item` in `shard`'s next batch; its own reply.
    pub(super) async fn in_batch<T: Batched>(&self, shard: Shard, item: T) -> Result<T::Reply, StoreError> {
        let (reply, answer) = oneshot::channel();
        let waiting = Waiting { item, span: tracing::Span::current(), reply };
        let start = {
            let mut shards = T::queues(self).shards.lock().unwrap_or_else(|e| e.into_inner());
            let queue = shards.entry(shard.0).or_default();
            queue.waiting.push(waiting);
            !std::mem::replace(&mut queue.sending, true)
        };
        if start {
            tokio::spawn(send_batches::<T>(self.clone(), shard));
        }
        answer
            .await
            .unwrap_or_else(|_| Err(StoreError::Unavailable("the item's batch was dropped".to_owned())))
    }
}

/// Sends the shard's waiting items, batch after batch, until none are left.
async fn send_batches<T: Batched>(store: Store, shard: Shard) {
    loop {
        let batch = {
            let mut shards = T::queues(&store).shards.lock().unwrap_or_else(|e| e.into_inner());
            let queue = shards.entry(shard.0).or_default();
            if queue.waiting.is_empty() {
                queue.sending = false;
                return;
            }
            take_batch(&mut queue.waiting, Waiting::size)
        };
        let span = batch[0].span.clone();
        let count = batch.len();
        let (items, senders): (Vec<_>, Vec<_>) = batch.into_iter().map(|w| (w.item, w.reply)).unzip();
        match T::send(&store, shard, items).instrument(span).await {
            Ok(replies) if replies.len() == count => {
                for (sender, reply) in senders.into_iter().zip(replies) {
                    let _ = sender.send(Ok(reply));
                }
            }
            Ok(replies) => {
                let e = StoreError::Corrupt(format!("{} replies for a batch of {count}", replies.len()));
                for sender in senders {
                    let _ = sender.send(Err(e.clone()));
                }
            }
            Err(e) => {
                for sender in senders {
                    let _ = sender.send(Err(e.clone()));
                }
            }
        }
    }
}

/// The oldest waiting items, up to the batch's bounds (each item counts 256 bytes beyond its size).
fn take_batch<W>(waiting: &mut Vec<W>, size: impl Fn(&W) -> usize) -> Vec<W> {
    let mut bytes = 0;
    let mut count = 0;
    for w in waiting.iter() {
        let size = size(w) + 256;
        if count > 0 && (count == MAX_BATCH || bytes + size > MAX_BATCH_BYTES) {
            break;
        }
        bytes += size;
        count += 1;
    }
    waiting.drain(..count).collect()
}

impl<T: Batched> Waiting<T> {
    fn size(&self) -> usize {
        self.item.size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_takes_the_oldest_within_its_count_and_bytes_and_always_one() {
        let mut queue: Vec<usize> = vec![10; 100];
        assert_eq!(take_batch(&mut queue, |s| *s).len(), MAX_BATCH);
        assert_eq!(queue.len(), 100 - MAX_BATCH);

        let mut big = vec![MAX_BATCH_BYTES * 2, 10];
        assert_eq!(take_batch(&mut big, |s| *s).len(), 1, "a batch's first item goes whatever its size");
        assert_eq!(big.len(), 1);

        let half = MAX_BATCH_BYTES / 2;
        let mut halves = vec![half, half, half];
        assert_eq!(take_batch(&mut halves, |s| *s).len(), 1, "two halves and their overheads pass the bound");
        assert!(take_batch(&mut Vec::<usize>::new(), |s| *s).is_empty());
    }
}
