//! Queues: one stream per queue per shard, read through one consumer group. A worker reads the
//! streams of the queues it serves in batches on connections of its own ([`WorkReader`]), renews
//! the leases of the entries it runs in one command per stream, and the maintenance finds the
//! entries nobody renewed for a lease, whoever holds them ([`Store::idle_entries`]).

use std::collections::HashMap;
use std::time::Duration;

use redis::streams::{StreamId, StreamReadOptions, StreamReadReply};
use serde::Deserialize;

use super::Store;
use crate::conn::Conn;
use crate::error::StoreError;
use crate::keys::{self, Shard};
use crate::model::WorkItem;
use crate::scripts;

/// Reads work from a set of streams that one `XREADGROUP` may name together: on one server every
/// stream a worker serves, on a cluster those of one shard (one slot).
pub struct WorkReader {
    conn: Option<Conn>,
    streams: Vec<(Shard, String)>,
    /// The next read is this worker's own pending entries, not new ones: set whenever the
    /// connection is new, since a read whose reply was lost with the connection (a Redis restart)
    /// left entries delivered to this worker that it never saw.
    own_pending: bool,
    /// Indexes in `streams` of those the last read found work in. Under load the next read names
    /// only these, so that its cost follows the queues with work, not every queue the worker
    /// serves (an `XREADGROUP` looks at each stream it names).
    hot: Vec<usize>,
    /// Reads of only the hot streams since the last read of all of them.
    hot_reads: u32,
}

/// A read of all streams follows at most this many reads of the hot ones, so that a queue whose
/// work started while others kept the worker busy waits a few batches, not until they run dry.
const HOT_READS_BEFORE_FULL: u32 = 8;

impl WorkReader {
    /// Reads up to `count` entries per stream that no worker has seen, blocking up to `block` for
    /// the first (a zero `block` takes only what is there). The read is never abandoned half-way
    /// (Redis would still deliver an entry to a read its worker stopped waiting for), so it is
    /// bounded by `block` plus a margin.
    ///
    /// The first read on a new connection returns instead the entries Redis holds as delivered to
    /// `consumer` (at once, without blocking), with `true`: the caller keeps those it does not
    /// already run or hold.
    pub async fn read(
        &mut self,
        store: &Store,
        consumer: &str,
        count: usize,
        block: Duration,
    ) -> Result<(Vec<WorkItem>, bool), StoreError> {
        if self.conn.is_none() {
            self.conn = Some(store.dedicated_backend().await?.blocking().await?);
            self.own_pending = true;
        }
        let own = std::mem::take(&mut self.own_pending);
        if !own
            && !self.hot.is_empty()
            && self.hot.len() < self.streams.len()
            && self.hot_reads < HOT_READS_BEFORE_FULL
        {
            // Without waiting: when the hot streams are dry, the read of all of them follows.
            self.hot_reads += 1;
            let hot = std::mem::take(&mut self.hot);
            let items = self.read_streams(&hot, consumer, count, Duration::ZERO, false).await?;
            if !items.is_empty() {
                return Ok((items, false));
            }
        }
        self.hot_reads = 0;
        let all: Vec<usize> = (0..self.streams.len()).collect();
        let block = if own { Duration::ZERO } else { block };
        let items = self.read_streams(&all, consumer, count, block, own).await?;
        Ok((items, own))
    }

    /// One `XREADGROUP` of the streams at `which` (indexes in `streams`): new entries, or with
    /// `own` the consumer's pending ones. Remembers which streams had entries as the hot ones.
    async fn read_streams(
        &mut self,
        which: &[usize],
        consumer: &str,
        count: usize,
        block: Duration,
        own: bool,
    ) -> Result<Vec<WorkItem>, StoreError> {
        let Some(conn) = self.conn.as_mut() else { return Ok(Vec::new()) };
        let mut options = StreamReadOptions::default().group(keys::WORK_GROUP, consumer).count(count.max(1));
        // No BLOCK at all for a zero wait: `BLOCK 0` would wait forever.
        if !block.is_zero() {
            options = options.block(block.as_millis() as usize);
        }
        let names: Vec<&str> = which.iter().map(|&i| self.streams[i].1.as_str()).collect();
        let ids: Vec<&str> = vec![if own { "0" } else { ">" }; names.len()];
        let read = redis::AsyncCommands::xread_options::<_, _, Option<StreamReadReply>>(
            conn, &names, &ids, &options,
        );
        let reply = match tokio::time::timeout(block + Duration::from_secs(5), read).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(e)) => {
                self.conn = None;
                return Err(e.into());
            }
            Err(_) => {
                self.conn = None;
                return Err(StoreError::Timeout(block));
            }
        };
        let index_of: HashMap<&str, usize> = which.iter().map(|&i| (self.streams[i].1.as_str(), i)).collect();
        let mut items = Vec::new();
        let mut hot = Vec::new();
        for stream in reply.map(|r| r.keys).unwrap_or_default() {
            let Some(&i) = index_of.get(stream.key.as_str()) else { continue };
            if !stream.ids.is_empty() {
                hot.push(i);
            }
            items.extend(stream.ids.iter().map(|entry| work_item(self.streams[i].0, &stream.key, entry)));
        }
        self.hot = hot;
        Ok(items)
    }
}

/// An entry pending past a lease, as the maintenance found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdleEntry {
    pub item: WorkItem,
    /// The consumer it is pending with.
    pub holder: String,
    /// How long it has gone unrenewed.
    pub idle: Duration,
}

/// What one look for idle entries found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IdleEntries {
    pub entries: Vec<IdleEntry>,
    /// A stream held more such entries than one look takes: look again at once.
    pub more: bool,
    /// Looking at one holder's entries: how long until the next of them goes unrenewed that long
    /// (at once when `more`); `None` when it holds no other.
    pub next: Option<Duration>,
}

/// A stream entry as a work item; an entry without task or node comes back with empty ids, for
/// the worker to acknowledge and drop.
pub(crate) fn work_item(shard: Shard, stream: &str, entry: &StreamId) -> WorkItem {
    let field = |name: &str| entry.get::<String>(name).filter(|v| !v.is_empty());
    let (task_id, node_id) = match (field("task"), field("node")) {
        (Some(task), Some(node)) => (task, node),
        _ => {
            tracing::warn!(entry = %entry.id, "work entry without task or node; acknowledging it");
            (String::new(), String::new())
        }
    };
    WorkItem {
        shard,
        stream: stream.to_owned(),
        entry_id: entry.id.clone(),
        task_id,
        node_id,
        traceparent: field("trace"),
        lean: crate::model::LeanEntry::of(field),
    }
}

impl Store {
    /// The stream keys of `queues` in every shard.
    pub fn queue_streams(&self, queues: &[String]) -> Vec<(Shard, String)> {
        self.all_shards().flat_map(|shard| queues.iter().map(move |q| (shard, shard.queue(q)))).collect()
    }

    /// Readers that together cover `queues` in every shard: one on a single server, one per shard
    /// on a cluster (an `XREADGROUP` names keys of one slot there).
    pub async fn work_readers(&self, queues: &[String]) -> Result<Vec<WorkReader>, StoreError> {
        if self.is_cluster().await? {
            Ok(self
                .all_shards()
                .map(|shard| WorkReader {
                    conn: None,
                    streams: queues.iter().map(|q| (shard, shard.queue(q))).collect(),
                    own_pending: true,
                    hot: Vec::new(),
                    hot_reads: 0,
                })
                .collect())
        } else {
            Ok(vec![WorkReader {
                conn: None,
                streams: self.queue_streams(queues),
                own_pending: true,
                hot: Vec::new(),
                hot_reads: 0,
            }])
        }
    }

    /// Creates the consumer group (and the stream) of `queues` in every shard where missing. The
    /// group starts at the stream's beginning, so entries added before it existed are read.
    pub async fn ensure_groups(&self, queues: &[String]) -> Result<(), StoreError> {
        let streams = self.queue_streams(queues);
        let results = futures::future::join_all(streams.iter().map(|(_, stream)| async move {
            let created: Result<(), StoreError> = self
                .query(|| {
                    redis::cmd("XGROUP")
                        .arg("CREATE")
                        .arg(stream)
                        .arg(keys::WORK_GROUP)
                        .arg("0")
                        .arg("MKSTREAM")
                        .clone()
                })
                .await;
            match created {
                Err(StoreError::Refused(e)) if e.contains("BUSYGROUP") => Ok(()),
                other => other,
            }
        }))
        .await;
        results.into_iter().collect()
    }

    /// Renews this worker's leases on the entries it runs (their idle time in the group starts
    /// again), one command per stream. Returns the entries (stream, id) it no longer holds: taken
    /// over after its lease ran out, or acknowledged meanwhile. A run whose entry is gone has lost
    /// its node.
    pub async fn renew_leases(
        &self,
        consumer: &str,
        held: &[(String, String)],
    ) -> Result<Vec<(String, String)>, StoreError> {
        let mut by_stream: HashMap<&str, Vec<&str>> = HashMap::new();
        for (stream, entry) in held {
            by_stream.entry(stream.as_str()).or_default().push(entry.as_str());
        }
        let renewals = futures::future::join_all(by_stream.iter().map(|(stream, ids)| async move {
            let kept: Vec<String> = self
                .query(|| {
                    redis::cmd("XCLAIM")
                        .arg(*stream)
                        .arg(keys::WORK_GROUP)
                        .arg(consumer)
                        .arg(0)
                        .arg(ids)
                        .arg("JUSTID")
                        .clone()
                })
                .await?;
            Ok::<_, StoreError>(
                ids.iter()
                    .filter(|id| !kept.iter().any(|k| k == **id))
                    .map(|id| ((*stream).to_owned(), (*id).to_owned()))
                    .collect::<Vec<_>>(),
            )
        }))
        .await;
        let mut lost = Vec::new();
        for renewal in renewals {
            lost.extend(renewal?);
        }
        Ok(lost)
    }

    /// Finds up to `count` entries per stream of `queues` in `shard` that have gone unrenewed for
    /// `idle`, pending with `holder` (`None`: with any consumer), in one script (see
    /// `idle_entries.lua`). A running attempt renews its entry three times per lease, so an entry
    /// idle for its holder's lease is run by nobody, whether the holder died or is alive. Nothing
    /// is claimed: [`Store::reclaim`] checks each again when it queues its node.
    pub async fn idle_entries(
        &self,
        shard: Shard,
        queues: &[String],
        holder: Option<&str>,
        idle: Duration,
        count: usize,
    ) -> Result<IdleEntries, StoreError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Found {
            stream: String,
            entry: String,
            holder: String,
            idle_ms: u64,
            task: String,
            node: String,
            trace: String,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Reply {
            #[serde(default)]
            entries: Option<Vec<Found>>,
            full: bool,
            #[serde(default)]
            next_in_ms: Option<f64>,
        }
        let streams: Vec<String> = queues.iter().map(|q| shard.queue(q)).collect();
        if streams.is_empty() {
            return Ok(IdleEntries::default());
        }
        let record = serde_json::json!({
            "idleMs": idle.as_millis() as u64, "count": count.max(1), "holder": holder.unwrap_or_default(),
        });
        let reply: Reply = self.script(&scripts::IDLE_ENTRIES, &streams, &record).await?;
        let entries = reply
            .entries
            .unwrap_or_default()
            .into_iter()
            .map(|found| {
                let named = !found.task.is_empty() && !found.node.is_empty();
                IdleEntry {
                    item: WorkItem {
                        shard,
                        stream: found.stream,
                        entry_id: found.entry,
                        // An entry that names no node is acknowledged and dropped by its taker.
                        task_id: if named { found.task } else { String::new() },
                        node_id: if named { found.node } else { String::new() },
                        traceparent: Some(found.trace).filter(|t| !t.is_empty()),
                        // Taken over by `reclaim_node`, never run from here.
                        lean: None,
                    },
                    holder: found.holder,
                    idle: Duration::from_millis(found.idle_ms),
                }
            })
            .collect();
        let next = if reply.full {
            Some(Duration::ZERO)
        } else {
            reply.next_in_ms.map(|ms| Duration::from_millis(ms.max(0.0) as u64))
        };
        Ok(IdleEntries { entries, more: reply.full, next })
    }

    /// Acknowledges and deletes an entry that names no node (it cannot be run).
    pub async fn drop_entry(&self, item: &WorkItem) -> Result<(), StoreError> {
        let mut pipe = redis::pipe();
        pipe.atomic()
            .xack(&item.stream, keys::WORK_GROUP, &[&item.entry_id])
            .ignore()
            .xdel(&item.stream, &[&item.entry_id])
            .ignore();
        self.pipeline(&pipe).await
    }
}
