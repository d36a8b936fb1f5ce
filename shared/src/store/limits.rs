//! Limits every gateway replica shares, so that a client cannot multiply its allowance by
//! spreading requests over gateways: a principal's request rate (one script on one key). The gap
//! between two reads of one task by one caller is a key that lives for the gap, checked by the
//! read itself ([`super::reads`]).

use serde::Deserialize;
use serde_json::json;

use super::Store;
use crate::error::StoreError;
use crate::keys;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RateReply {
    allowed: bool,
    #[serde(default)]
    retry_after_ms: u64,
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
}
