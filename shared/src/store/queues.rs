//! Queues: one stream per queue per shard, read through one consumer group. A worker reads the
//! streams of the queues it serves in batches on connections of its own ([`WorkReader`]), renews
//! the leases of the entries it runs in one command per stream, and a shard's maintenance takes
//! over entries whose worker stopped renewing ([`Store::claim_abandoned`]).

use std::collections::HashMap;
use std::time::Duration;

use redis::streams::{
    StreamAutoClaimOptions, StreamAutoClaimReply, StreamId, StreamReadOptions, StreamReadReply,
};

use super::Store;
use crate::conn::Conn;
use crate::error::StoreError;
use crate::keys::{self, Shard};
use crate::model::WorkItem;

/// Reads work from a set of streams that one `XREADGROUP` may name together: on one server every
/// stream a worker serves, on a cluster those of one shard (one slot).
pub struct WorkReader {
    conn: Option<Conn>,
    streams: Vec<(Shard, String)>,
}

impl WorkReader {
    /// Reads up to `count` entries per stream that no worker has seen, blocking up to `block` for
    /// the first (a zero `block` takes only what is there). The read is never abandoned half-way (Redis would still deliver an entry to a
    /// read its worker stopped waiting for), so it is bounded by `block` plus a margin.
    pub async fn read(
        &mut self,
        store: &Store,
        consumer: &str,
        count: usize,
        block: Duration,
    ) -> Result<Vec<WorkItem>, StoreError> {
        if self.conn.is_none() {
            self.conn = Some(store.dedicated_backend().await?.blocking().await?);
        }
        let Some(conn) = self.conn.as_mut() else { return Ok(Vec::new()) };
        let mut options = StreamReadOptions::default().group(keys::WORK_GROUP, consumer).count(count.max(1));
        // No BLOCK at all for a zero wait: `BLOCK 0` would wait forever.
        if !block.is_zero() {
            options = options.block(block.as_millis() as usize);
        }
        let names: Vec<&str> = self.streams.iter().map(|(_, s)| s.as_str()).collect();
        let ids: Vec<&str> = vec![">"; names.len()];
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
        let shard_of: HashMap<&str, Shard> =
            self.streams.iter().map(|(shard, s)| (s.as_str(), *shard)).collect();
        let mut items = Vec::new();
        for stream in reply.map(|r| r.keys).unwrap_or_default() {
            let Some(shard) = shard_of.get(stream.key.as_str()).copied() else { continue };
            items.extend(stream.ids.iter().map(|entry| work_item(shard, &stream.key, entry)));
        }
        Ok(items)
    }
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
                })
                .collect())
        } else {
            Ok(vec![WorkReader { conn: None, streams: self.queue_streams(queues) }])
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

    /// Takes over up to `count` entries of `stream` whose worker has not renewed its lease for
    /// `lease`, scanning on from `cursor` (`0-0` to begin), so that abandoned entries behind many
    /// live ones are reached in turn. Returns the entries and the cursor to go on from.
    pub async fn claim_abandoned(
        &self,
        shard: Shard,
        stream: &str,
        consumer: &str,
        lease: Duration,
        cursor: &str,
        count: usize,
    ) -> Result<(Vec<WorkItem>, String), StoreError> {
        let reply: StreamAutoClaimReply = self
            .run("XAUTOCLAIM", |mut c| async move {
                redis::AsyncCommands::xautoclaim_options(
                    &mut c,
                    stream,
                    keys::WORK_GROUP,
                    consumer,
                    lease.as_millis() as u64,
                    cursor,
                    StreamAutoClaimOptions::default().count(count),
                )
                .await
            })
            .await?;
        let items = reply.claimed.iter().map(|entry| work_item(shard, stream, entry)).collect();
        Ok((items, reply.next_stream_id))
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
