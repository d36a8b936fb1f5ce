//! Limits every gateway replica shares, so that a client cannot multiply its allowance by
//! spreading requests over gateways: a principal's request rate (one script on one key), and the
//! gap between two reads of one task by one caller (a key that lives for the gap).

use serde::Deserialize;
use serde_json::json;

use super::Store;
use crate::error::StoreError;
use crate::keys;
use crate::model::TaskRecord;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RateReply {
    allowed: bool,
    #[serde(default)]
    retry_after_ms: u64,
}

/// A read of a task, gated by the poll gap.
#[derive(Debug)]
pub enum Polled {
    /// The task (or `None`: no such task).
    Read(Option<Box<TaskRecord>>),
    /// The caller read this task less than the gap ago; it may read again after this long.
    TooSoon { retry_after_ms: u64 },
}

impl Store {
    /// Counts one request of `principal` against `per_second` (with `burst` at once). `None` when
    /// allowed, else how long to wait before the next request is.
    pub async fn rate_limit(
        &self,
        principal: &str,
        per_second: f64,
        burst: u32,
    ) -> Result<Option<u64>, StoreError> {
        if !(per_second.is_finite() && per_second > 0.0) {
            return Ok(None);
        }
        let record = json!({"intervalMs": 1000.0 / per_second, "burst": burst.max(1)});
        let reply: RateReply =
            self.script(&crate::scripts::RATE_LIMIT, &[keys::rate(principal)], &record).await?;
        Ok((!reply.allowed).then_some(reply.retry_after_ms.max(1)))
    }

    /// Reads a task for `caller`, unless the caller read it less than `gap_ms` ago. The gate and
    /// the read travel in one round trip.
    pub async fn get_task_polled(
        &self,
        task_id: &str,
        caller: &str,
        gap_ms: u64,
    ) -> Result<Polled, StoreError> {
        let Some(shard) = self.shard_of(task_id) else { return Ok(Polled::Read(None)) };
        let gate = shard.poll_gate(task_id, caller);
        let task = shard.task(task_id);
        // The gate holds this read's own token: the same read sent again after a lost reply finds
        // its own token there and is let through, where another read within the gap is not.
        let token = format!("{:016x}", rand::random::<u64>());
        let mut pipe = redis::pipe();
        pipe.cmd("SET").arg(&gate).arg(&token).arg("NX").arg("PX").arg(gap_ms).arg("GET");
        pipe.cmd("PTTL").arg(&gate);
        pipe.cmd("HMGET").arg(&task).arg(&crate::model::TASK_FIELDS[..]);
        let (earlier, ttl, values): (Option<String>, i64, Vec<Option<String>>) = self.pipeline(&pipe).await?;
        if earlier.is_some_and(|earlier| earlier != token) {
            return Ok(Polled::TooSoon { retry_after_ms: u64::try_from(ttl).unwrap_or(1).max(1) });
        }
        Ok(Polled::Read(Self::live_record(task_id, values)?.map(Box::new)))
    }
}
