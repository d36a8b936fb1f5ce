//! The catalog: workers announce themselves with a heartbeat (their queues, tools and running
//! nodes), and publish their tools. Gateways list the tools that a live worker offers.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::Store;
use crate::error::StoreError;
use crate::keys;
use crate::model::PublishedTool;

/// How long a worker counts as live after its last heartbeat.
pub const LIVE_FOR_MS: u64 = 15_000;
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

impl Store {
    /// A worker's heartbeat: its record and its tools, in one round trip.
    pub async fn heartbeat(&self, worker: &WorkerRecord, tools: &[PublishedTool]) -> Result<(), StoreError> {
        let mut pipe = redis::pipe();
        let record = serde_json::to_string(worker).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        pipe.hset(keys::WORKERS, &worker.name, record).ignore();
        for tool in tools {
            if let (Some(name), Ok(json)) = (tool.name(), serde_json::to_string(tool)) {
                pipe.hset(keys::TOOLS, name, json).ignore();
            }
        }
        self.pipeline(&pipe).await
    }

    /// Removes a worker from the catalog (it stops).
    pub async fn forget_worker(&self, name: &str) -> Result<(), StoreError> {
        self.query(|| redis::Cmd::hdel(keys::WORKERS, name)).await
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

    /// Removes workers silent for longer than [`FORGET_AFTER_MS`]; returns how many.
    pub async fn prune_workers(&self, now: u64) -> Result<usize, StoreError> {
        let stale: Vec<String> = self
            .workers()
            .await?
            .into_iter()
            .filter(|w| now.saturating_sub(w.heartbeat_ms) > FORGET_AFTER_MS)
            .map(|w| w.name)
            .collect();
        if !stale.is_empty() {
            self.query::<()>(|| redis::Cmd::hdel(keys::WORKERS, &stale)).await?;
        }
        Ok(stale.len())
    }

    /// Every tool workers have published, live or not, in registration order (then by name).
    pub async fn tools(&self) -> Result<Vec<PublishedTool>, StoreError> {
        let hash: HashMap<String, String> = self.query(|| redis::Cmd::hgetall(keys::TOOLS)).await?;
        Ok(sorted_tools(hash))
    }

    /// The tools, and the workers that offer them, in one round trip.
    pub async fn catalog(&self) -> Result<(Vec<PublishedTool>, Vec<WorkerRecord>), StoreError> {
        let mut pipe = redis::pipe();
        pipe.hgetall(keys::TOOLS).hgetall(keys::WORKERS);
        let (tools, workers): (HashMap<String, String>, HashMap<String, String>) =
            self.pipeline(&pipe).await?;
        let workers = workers.into_values().filter_map(|json| serde_json::from_str(&json).ok()).collect();
        Ok((sorted_tools(tools), workers))
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
