//! The catalog: workers announce themselves with a heartbeat (their queues, tools and running
//! nodes), and publish their tools. Gateways list the tools that a live worker offers.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::Store;
use crate::error::StoreError;
use crate::keys;
use crate::model::PublishedTool;
use crate::scripts;

/// How long a worker counts as live after its last heartbeat.
pub const LIVE_FOR_MS: u64 = 25_000;
/// A worker silent for this long is removed from the catalog.
pub const FORGET_AFTER_MS: u64 = 10 * 60_000;

/// A node a worker is running, as its heartbeat reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunningNode {
    pub task_id: String,
    pub node_id: String,
    pub tool: String,
    pub attempt: u32,
    pub started_at_ms: u64,
}

/// A worker as its last heartbeat describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkerRecord {
    pub name: String,
    pub queues: Vec<String>,
    pub tools: Vec<String>,
    pub concurrency: usize,
    pub running: Vec<RunningNode>,
    pub heartbeat_ms: u64,
    /// The worker's lease: its running entries are taken over once they go unrenewed this long.
    #[serde(default)]
    pub lease_ms: u64,
    #[serde(default)]
    pub host: String,
    #[serde(default)]
    pub pid: u32,
}

impl WorkerRecord {
    /// Whether the worker's heartbeat is recent enough, at `now`.
    pub fn is_live(&self, now: u64) -> bool {
        now.saturating_sub(self.heartbeat_ms) < LIVE_FOR_MS
    }
}

/// What a heartbeat learned.
#[derive(Debug, Clone, PartialEq)]
pub struct Heartbeat {
    /// Redis did not know the worker: its first heartbeat, or Redis lost its data. The worker
    /// publishes its tools again.
    pub fresh: bool,
    /// This worker holds the deployment's maintenance lease.
    pub maintainer: bool,
    /// Redis's clock when the heartbeat was taken.
    pub now_ms: u64,
    /// For the maintainer: workers whose liveness ran out, with their last record when it is
    /// readable.
    pub lapsed: Vec<(String, Option<WorkerRecord>)>,
    /// For the maintainer: when the next other worker's liveness runs out, unless renewed.
    pub next_lapse_in: Option<std::time::Duration>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct HeartbeatReply {
    fresh: bool,
    maintainer: bool,
    now_ms: u64,
    #[serde(default)]
    lapsed: Option<Vec<LapsedReply>>,
    #[serde(default)]
    next_lapse_in_ms: Option<f64>,
}

#[derive(Deserialize)]
struct LapsedReply {
    name: String,
    record: String,
}

#[derive(Deserialize)]
struct ForgetReply {
    kept: u64,
}

/// Most lapsed workers one heartbeat lists.
const LAPSED_PER_HEARTBEAT: usize = 32;

impl Store {
    /// A worker's heartbeat, one script: its record, its liveness for `lease`, and a try at the
    /// maintenance lease for `maintain_for` (see `heartbeat.lua`).
    pub async fn heartbeat(
        &self,
        worker: &WorkerRecord,
        lease: std::time::Duration,
        maintain_for: std::time::Duration,
    ) -> Result<Heartbeat, StoreError> {
        let record = serde_json::to_string(worker).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let args = serde_json::json!({
            "name": worker.name, "record": record, "leaseMs": lease.as_millis() as u64,
            "maintainForMs": maintain_for.as_millis().max(1) as u64, "lapsedMax": LAPSED_PER_HEARTBEAT,
        });
        let keys = [keys::WORKERS, keys::ALIVE, keys::MAINTAINER].map(str::to_owned);
        let reply: HeartbeatReply = self.script(&scripts::HEARTBEAT, &keys, &args).await?;
        let lapsed = reply
            .lapsed
            .unwrap_or_default()
            .into_iter()
            .map(|l| {
                let record = serde_json::from_str(&l.record).ok();
                (l.name, record)
            })
            .collect();
        Ok(Heartbeat {
            fresh: reply.fresh,
            maintainer: reply.maintainer,
            now_ms: reply.now_ms,
            lapsed,
            next_lapse_in: reply
                .next_lapse_in_ms
                .map(|ms| std::time::Duration::from_millis(ms.max(0.0) as u64)),
        })
    }

    /// Gives up the deployment's maintenance lease if `worker` holds it (a stopping worker), so
    /// that the next heartbeat of a live worker takes it at once. Returns whether it was held.
    pub async fn release_maintenance(&self, worker: &str) -> Result<bool, StoreError> {
        #[derive(Deserialize)]
        struct Reply {
            released: bool,
        }
        let keys = [keys::MAINTAINER.to_owned()];
        let reply: Reply =
            self.script(&scripts::RELEASE_MAINTENANCE, &keys, &serde_json::json!({"name": worker})).await?;
        Ok(reply.released)
    }

    /// Publishes a worker's tools to the catalog, in one round trip.
    pub async fn publish_tools(&self, tools: &[PublishedTool]) -> Result<(), StoreError> {
        let mut pipe = redis::pipe();
        for tool in tools {
            if let (Some(name), Ok(json)) = (tool.name(), serde_json::to_string(tool)) {
                pipe.hset(keys::TOOLS, name, json).ignore();
            }
        }
        self.pipeline(&pipe).await
    }

    /// Takes a worker that stopped, or was lost, out of the consumer groups of `queues` in every
    /// shard where it holds no pending entry. Returns how many streams it still holds entries in
    /// (then it stays, for maintenance to take them over).
    pub async fn leave_groups(&self, name: &str, queues: &[String]) -> Result<u64, StoreError> {
        let record = serde_json::json!({"consumer": name});
        let mut kept = 0;
        for shard in self.all_shards() {
            let streams: Vec<String> = queues.iter().map(|q| shard.queue(q)).collect();
            if streams.is_empty() {
                continue;
            }
            let reply: ForgetReply = self.script(&scripts::FORGET_WORKER, &streams, &record).await?;
            kept += reply.kept;
        }
        Ok(kept)
    }

    /// Removes a worker from the catalog and from the liveness set, with every tool no other
    /// worker in the catalog offers. Returns how many tools went.
    pub async fn forget_worker(&self, name: &str) -> Result<u64, StoreError> {
        #[derive(Deserialize)]
        struct Reply {
            tools: u64,
        }
        let keys = [keys::WORKERS, keys::ALIVE, keys::TOOLS].map(str::to_owned);
        let reply: Reply =
            self.script(&scripts::LEAVE_CATALOG, &keys, &serde_json::json!({"name": name})).await?;
        Ok(reply.tools)
    }

    /// Consumers of `queues`' groups that hold pending entries but are not in the liveness set (a
    /// worker of an older build, or a set that Redis lost) join it as lapsed, so that their
    /// entries are taken over like a lost worker's. Returns how many joined.
    pub async fn adopt_orphans(&self, queues: &[String]) -> Result<usize, StoreError> {
        let mut holders: std::collections::BTreeSet<String> = Default::default();
        for (_, stream) in self.queue_streams(queues) {
            let info: Result<redis::streams::StreamInfoConsumersReply, StoreError> = self
                .query(|| redis::cmd("XINFO").arg("CONSUMERS").arg(&stream).arg(keys::WORK_GROUP).clone())
                .await;
            match info {
                Ok(info) => {
                    holders.extend(info.consumers.into_iter().filter(|c| c.pending > 0).map(|c| c.name))
                }
                Err(e) if e.to_string().contains("NOGROUP") || e.to_string().contains("no such key") => {}
                Err(e) => return Err(e),
            }
        }
        if holders.is_empty() {
            return Ok(0);
        }
        let mut pipe = redis::pipe();
        for name in &holders {
            pipe.cmd("ZADD").arg(keys::ALIVE).arg("NX").arg(0).arg(name);
        }
        let added: Vec<u64> = self.pipeline(&pipe).await?;
        Ok(added.iter().sum::<u64>() as usize)
    }

    /// Looks at a lapsed worker again at `at_ms` (Redis's clock), unless it renews before.
    pub async fn recheck_worker_at(&self, name: &str, at_ms: u64) -> Result<(), StoreError> {
        self.query(|| redis::Cmd::zadd(keys::ALIVE, name, at_ms)).await
    }

    /// Every worker of the catalog, live or not, by name; records in an unknown shape are skipped.
    pub async fn workers(&self) -> Result<Vec<WorkerRecord>, StoreError> {
        let hash: HashMap<String, String> = self.query(|| redis::Cmd::hgetall(keys::WORKERS)).await?;
        let mut workers: Vec<WorkerRecord> = hash
            .into_iter()
            .filter_map(|(name, json)| match serde_json::from_str(&json) {
                Ok(w) => Some(w),
                Err(e) => {
                    tracing::warn!(worker = %name, error = %e, "ignoring a worker record in an unknown shape");
                    None
                }
            })
            .collect();
        workers.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(workers)
    }

    /// Every tool workers have published, live or not, in registration order (then by name).
    pub async fn tools(&self) -> Result<Vec<PublishedTool>, StoreError> {
        let hash: HashMap<String, String> = self.query(|| redis::Cmd::hgetall(keys::TOOLS)).await?;
        Ok(sorted_tools(hash))
    }

    /// The tools, the workers that offer them, and Redis's clock (ms), in one round trip: a
    /// worker's heartbeat is Redis's time, so its liveness is judged by that clock
    /// ([`WorkerRecord::is_live`]), never by the reader's.
    pub async fn catalog(&self) -> Result<(Vec<PublishedTool>, Vec<WorkerRecord>, u64), StoreError> {
        let mut pipe = redis::pipe();
        pipe.hgetall(keys::TOOLS).hgetall(keys::WORKERS).cmd("TIME");
        let (tools, workers, (seconds, micros)): (
            HashMap<String, String>,
            HashMap<String, String>,
            (u64, u64),
        ) = self.pipeline(&pipe).await?;
        let workers = workers.into_values().filter_map(|json| serde_json::from_str(&json).ok()).collect();
        Ok((sorted_tools(tools), workers, seconds * 1000 + micros / 1000))
    }
}

fn sorted_tools(hash: HashMap<String, String>) -> Vec<PublishedTool> {
    let mut tools: Vec<(String, PublishedTool)> = hash
        .into_iter()
        .filter_map(|(name, json)| match serde_json::from_str(&json) {
            Ok(tool) => Some((name, tool)),
            Err(e) => {
                tracing::warn!(tool = %name, error = %e, "ignoring a published tool in an unknown shape");
                None
            }
        })
        .collect();
    tools.sort_by(|a, b| (a.1.position, &a.0).cmp(&(b.1.position, &b.0)));
    tools.into_iter().map(|(_, t)| t).collect()
}
