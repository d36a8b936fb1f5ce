//! The deployment's state as gauges read at scrape time: each queue's stream in each shard (its
//! entries, what its consumer group has delivered and not acknowledged, what it has not delivered
//! yet), each shard's dead letters, and the live workers of each queue.

use std::collections::BTreeMap;

use redis::streams::StreamInfoGroupsReply;

use super::Store;
use crate::error::StoreError;
use crate::keys::{self, Shard};

pub use crate::metrics::{ClusterStats, QueueDepth};

impl Store {
    /// Reads the gauges of [`ClusterStats`]: the catalog, then one pipeline per shard (all in
    /// parallel). The queues are those live workers read, those of every published tool, and the
    /// built-in one.
    pub async fn cluster_stats(&self) -> Result<ClusterStats, StoreError> {
        let (tools, workers, now) = self.catalog().await?;
        let mut live: BTreeMap<String, u64> = BTreeMap::new();
        live.insert(keys::BUILTIN_QUEUE.to_owned(), 0);
        for queue in tools.iter().filter_map(|t| t.queue_name()) {
            live.entry(queue.to_owned()).or_insert(0);
        }
        for worker in workers.iter().filter(|w| w.is_live(now)) {
            for queue in &worker.queues {
                *live.entry(queue.clone()).or_insert(0) += 1;
            }
        }
        let queues: Vec<String> = live.keys().cloned().collect();
        let shards =
            futures::future::join_all(self.all_shards().map(|shard| self.shard_depths(shard, &queues))).await;
        let mut stats = ClusterStats { workers_live: live.into_iter().collect(), ..ClusterStats::default() };
        for (shard, depths) in self.all_shards().zip(shards) {
            let (depths, dead) = depths?;
            stats.queues.extend(depths);
            stats.dead_letters.push((shard, dead));
        }
        stats.queues.sort_by(|a, b| (&a.queue, a.shard).cmp(&(&b.queue, b.shard)));
        Ok(stats)
    }

    /// One shard's queue depths and dead letters, in one round trip. A stream that does not
    /// exist (no worker has set its group up in this shard) is an empty queue.
    async fn shard_depths(
        &self,
        shard: Shard,
        queues: &[String],
    ) -> Result<(Vec<QueueDepth>, u64), StoreError> {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for queue in queues {
            let stream = shard.queue(queue);
            pipe.cmd("XLEN").arg(&stream).cmd("XINFO").arg("GROUPS").arg(&stream);
        }
        pipe.cmd("XLEN").arg(shard.dead_letters());
        let pipe = &pipe;
        let replies: Vec<redis::RedisResult<redis::Value>> =
            self.run("queue_depths", |mut c| async move { pipe.query_async(&mut c).await }).await?;
        let count = |reply: Option<&redis::RedisResult<redis::Value>>| -> u64 {
            match reply {
                Some(Ok(value)) => redis::from_redis_value_ref(value).unwrap_or(0),
                _ => 0,
            }
        };
        let mut depths = Vec::with_capacity(queues.len());
        for (i, queue) in queues.iter().enumerate() {
            let entries = count(replies.get(2 * i));
            let group = match replies.get(2 * i + 1) {
                Some(Ok(value)) => redis::from_redis_value_ref::<StreamInfoGroupsReply>(value)
                    .ok()
                    .and_then(|groups| groups.groups.into_iter().find(|g| g.name == keys::WORK_GROUP)),
                _ => None,
            };
            let (pending, lag) = match group {
                // Redis cannot always tell the lag (after entries were deleted from the middle of
                // the stream, which every acknowledgement here does). Acknowledged entries are
                // deleted, so what the stream holds beyond the pending ones is what the group has
                // not delivered: the same number.
                Some(g) => {
                    let pending = g.pending as u64;
                    (pending, g.lag.map(|l| l as u64).unwrap_or_else(|| entries.saturating_sub(pending)))
                }
                None => (0, entries),
            };
            depths.push(QueueDepth { queue: queue.clone(), shard, entries, pending, lag });
        }
        Ok((depths, count(replies.get(2 * queues.len()))))
    }
}
