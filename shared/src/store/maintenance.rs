//! A shard's maintenance, run by the one worker that holds the deployment's maintenance lease
//! (taken by heartbeats), only when something is due: due retries go back to their queue, tasks
//! past their TTL expire (giving back their load), and entries nobody renewed for a lease (a lost
//! worker's, or a live one's that it failed to run) are queued again.

use std::time::Duration;

use serde::Deserialize;
use serde_json::json;

use super::Store;
use crate::error::StoreError;
use crate::keys::Shard;
use crate::model::WorkItem;
use crate::scripts;
use crate::telemetry::context::LostAttempt;

/// What is due in a shard: these retries and expiries, the next item in `next_due_in`, and this
/// many nodes are set aside in the shard's held lists. `live`: the shard has live tasks, whose
/// entries the maintenance looks at for idle ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaintainOutcome {
    pub retries: Vec<String>,
    pub expired: Vec<String>,
    pub next_due_in: Option<Duration>,
    pub set_aside: u64,
    pub live: bool,
}

/// What became of an entry found unrenewed for a lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReclaimOutcome {
    /// The node was queued again; its worker has now been lost this many times. `lost` is the
    /// attempt the lost worker was running (none when the entry was read but never started).
    Requeued { losses: u32, lost: Option<LostAttempt> },
    /// The entry was renewed since it was found (a running attempt holds it): nothing changed.
    Renewed,
    /// The entry was not its node's current one (or its task is gone); it was dropped.
    Dropped(String),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MaintainReply {
    #[serde(default)]
    retries: Option<Vec<String>>,
    #[serde(default)]
    expired: Option<Vec<String>>,
    #[serde(default)]
    next_due_in_ms: Option<f64>,
    #[serde(default)]
    set_aside: i64,
    #[serde(default)]
    live: bool,
}

#[derive(Deserialize)]
struct ReleaseReply {
    released: u64,
}

#[derive(Deserialize)]
#[serde(tag = "outcome", rename_all = "camelCase")]
enum ReclaimReply {
    Requeued {
        losses: u32,
        #[serde(default)]
        lost: Option<LostAttempt>,
    },
    Renewed,
    Dropped {
        reason: String,
    },
}

#[derive(Deserialize)]
#[serde(tag = "outcome", rename_all = "camelCase")]
enum DueReply {
    Promoted,
    Dropped,
    Expired,
    NotYet,
    Gone,
}

impl Store {
    /// Lists up to `max` due retries and expiries of `shard`, and plans its next look (see
    /// `maintain.lua`); while nodes are set aside, that look is at most `every` away, and while
    /// the shard has live tasks at most `idle_every` (for their idle entries; zero: no bound).
    pub async fn maintain(
        &self,
        shard: Shard,
        max: usize,
        every: Duration,
        idle_every: Duration,
    ) -> Result<MaintainOutcome, StoreError> {
        let keys = [shard.retries(), shard.expiring(), shard.load(), shard.kept()];
        let record = json!({
            "max": max, "everyMs": every.as_millis() as u64, "idleEveryMs": idle_every.as_millis() as u64,
        });
        let reply: MaintainReply = self.script(&scripts::MAINTAIN, &keys, &record).await?;
        Ok(MaintainOutcome {
            retries: reply.retries.unwrap_or_default(),
            expired: reply.expired.unwrap_or_default(),
            next_due_in: reply.next_due_in_ms.map(|ms| Duration::from_millis(ms.max(0.0) as u64)),
            set_aside: u64::try_from(reply.set_aside).unwrap_or(0),
            live: reply.live,
        })
    }

    /// Puts up to `count` nodes set aside in `queue`'s held list of `shard` back on its stream.
    /// Returns how many went back.
    pub async fn release_held(&self, shard: Shard, queue: &str, count: u64) -> Result<u64, StoreError> {
        let keys = [shard.held(queue), shard.queue(queue), shard.load()];
        let reply: ReleaseReply =
            self.script(&scripts::RELEASE_HELD, &keys, &json!({"count": count.max(1)})).await?;
        Ok(reply.released)
    }

    /// Queues a due retry (a member of the shard's retry set) again. Returns whether it was.
    pub async fn promote_retry(&self, shard: Shard, member: &str) -> Result<bool, StoreError> {
        let (task_id, node_id, queue): (String, String, String) = serde_json::from_str(member)
            .map_err(|e| StoreError::Corrupt(format!("retry entry {member:?}: {e}")))?;
        let keys = [shard.task(&task_id), shard.load(), shard.retries(), shard.queue(&queue)];
        let record = json!({"task": task_id, "node": node_id, "member": member});
        let reply: DueReply = self.script(&scripts::PROMOTE_RETRY, &keys, &record).await?;
        Ok(matches!(reply, DueReply::Promoted))
    }

    /// Expires a task whose TTL ran out: an unsettled one gives back its load and its running
    /// nodes are told to stop. Returns whether it expired now.
    pub async fn expire_task(&self, shard: Shard, task_id: &str) -> Result<bool, StoreError> {
        let (owner, queues): (Option<String>, Option<String>) = self
            .query(|| redis::cmd("HMGET").arg(shard.task(task_id)).arg("owner").arg("queues").clone())
            .await?;
        let mut keys = vec![
            shard.task(task_id),
            shard.load(),
            shard.expiring(),
            shard.owner_tasks(owner.as_deref().unwrap_or_default()),
        ];
        // Its queued nodes' entries are deleted: a lean entry would run from its delivery.
        keys.extend(super::tasks::stored_streams(shard, queues.as_deref()));
        let record = json!({"task": task_id, "cancelChannel": shard.cancel_channel()});
        let reply: serde_json::Value = self.script(&scripts::EXPIRE_TASK, &keys, &record).await?;
        let reply: DueReply = super::effects::recorded(reply)?;
        Ok(matches!(reply, DueReply::Expired))
    }

    /// Queues again the node of an entry that has gone unrenewed for `idle` (its holder's lease),
    /// or drops an entry that is not its node's current one, and acknowledges the entry. An entry
    /// renewed since it was found is left alone ([`ReclaimOutcome::Renewed`]): a running attempt
    /// holds it.
    pub async fn reclaim(&self, item: &WorkItem, idle: Duration) -> Result<ReclaimOutcome, StoreError> {
        let shard = item.shard;
        let keys = [shard.task(&item.task_id), shard.load(), item.stream.clone()];
        let record = json!({
            "task": item.task_id, "node": item.node_id, "entry": item.entry_id,
            "trace": item.traceparent.clone().unwrap_or_default(), "idleMs": idle.as_millis() as u64,
        });
        let reply: ReclaimReply = self.script(&scripts::RECLAIM_NODE, &keys, &record).await?;
        Ok(match reply {
            ReclaimReply::Requeued { losses, lost } => ReclaimOutcome::Requeued { losses, lost },
            ReclaimReply::Renewed => ReclaimOutcome::Renewed,
            ReclaimReply::Dropped { reason } => ReclaimOutcome::Dropped(reason),
        })
    }
}
