//! What every request handler shares. Nothing here is per client: any replica serves any request.

use std::sync::Arc;
use std::time::Duration;

use conveyor_shared::{Config, Store};
use serde_json::json;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::access::AccessPolicy;
use crate::auth::Authenticator;
use crate::catalog::ToolCatalog;
use crate::rpc::RpcFailure;

/// HTTP-level policy of a gateway.
#[derive(Clone)]
pub struct HttpPolicy {
    /// Hosts (without port) the gateway answers for, for DNS-rebinding protection; `*` allows all.
    pub allowed_hosts: Vec<String>,
}

impl Default for HttpPolicy {
    fn default() -> Self {
        Self { allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "::1".into()] }
    }
}

/// Limits kept in Redis, so that they hold across every replica of the gateway.
#[derive(Debug, Clone, Copy, Default)]
pub struct SharedLimits {
    /// Requests per second per principal (0: no limit), and how many may come at once.
    pub requests_per_second: f64,
    pub burst: u32,
    /// Shortest time between two `tasks/get` of one task by one caller (0: no limit).
    pub min_poll_gap_ms: u64,
}

/// The memory all requests in flight may hold for bodies and parsed JSON, in KiB permits.
pub struct Budget {
    permits: Arc<Semaphore>,
    total_kib: usize,
}

/// Memory a request holds; it returns to the budget when dropped.
pub struct BudgetPermit(Option<OwnedSemaphorePermit>);

impl BudgetPermit {
    pub fn merge(&mut self, other: BudgetPermit) {
        match (&mut self.0, other.0) {
            (Some(mine), Some(theirs)) => mine.merge(theirs),
            (mine @ None, theirs) => *mine = theirs,
            (_, None) => {}
        }
    }
}

/// How long a request waits for memory before it is refused as "busy".
const BUDGET_WAIT: Duration = Duration::from_secs(2);
/// The retry hint of a request refused for lack of memory.
pub const BUSY_RETRY_AFTER_MS: u64 = 1_000;

impl Budget {
    pub fn new(bytes: usize) -> Self {
        let total_kib = bytes.div_ceil(1024).clamp(1, Semaphore::MAX_PERMITS);
        Self { permits: Arc::new(Semaphore::new(total_kib)), total_kib }
    }

    /// Holds `bytes` of the budget, waiting briefly for requests in flight to return theirs.
    pub async fn reserve(&self, bytes: usize) -> Result<BudgetPermit, RpcFailure> {
        let kib = bytes.div_ceil(1024).min(self.total_kib) as u32;
        if kib == 0 {
            return Ok(BudgetPermit(None));
        }
        match tokio::time::timeout(BUDGET_WAIT, self.permits.clone().acquire_many_owned(kib)).await {
            Ok(Ok(permit)) => Ok(BudgetPermit(Some(permit))),
            _ => Err(RpcFailure::new(
                rmcp::model::ErrorCode(crate::methods::OVERLOADED),
                format!(
                    "Busy: requests in flight hold this gateway's memory for requests ({} MiB, limit max_inflight_bytes); nothing was done. Retry in about {} s.",
                    self.total_kib / 1024,
                    BUSY_RETRY_AFTER_MS / 1000
                ),
                Some(
                    json!({"limit": "max_inflight_bytes", "retryable": true, "retryAfterMs": BUSY_RETRY_AFTER_MS}),
                ),
            )),
        }
    }
}

pub struct AppState {
    pub store: Store,
    pub config: Config,
    pub catalog: ToolCatalog,
    pub http: HttpPolicy,
    pub auth: Authenticator,
    pub access: AccessPolicy,
    pub shared_limits: SharedLimits,
    pub budget: Budget,
    /// Fires when the gateway shuts down: requests that wait on a task end with an error the
    /// client can retry on another gateway, so that the drain does not wait for tasks to finish.
    pub shutdown: tokio_util::sync::CancellationToken,
    /// Signs session ids and MRTR request states with the deployment's shared secret.
    pub signer: crate::signing::Signer,
    /// Open streams of the web view: each reads Redis on an interval, so there is a bound.
    pub ui_streams: Arc<Semaphore>,
}

impl AppState {
    /// A gateway's state; authentication stays off until [`AppState::with_auth`] sets it.
    pub fn new(store: Store, config: Config, http: HttpPolicy) -> Self {
        Self {
            catalog: ToolCatalog::new(store.clone()),
            budget: Budget::new(config.max_inflight_bytes),
            store,
            config,
            http,
            auth: Authenticator::disabled(),
            access: AccessPolicy::default(),
            shared_limits: SharedLimits::default(),
            shutdown: tokio_util::sync::CancellationToken::new(),
            signer: crate::signing::Signer::new(None),
            ui_streams: Arc::new(Semaphore::new(crate::ui::MAX_STREAMS)),
        }
    }

    /// Signs with this secret instead of the deployment's secret kept in Redis.
    pub fn with_signing_key(mut self, secret: Option<Vec<u8>>) -> Self {
        self.signer = crate::signing::Signer::new(secret);
        self
    }

    pub fn with_auth(mut self, auth: Authenticator, access: AccessPolicy) -> Self {
        self.auth = auth;
        self.access = access;
        self
    }

    pub fn with_shared_limits(mut self, limits: SharedLimits) -> Self {
        self.shared_limits = limits;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_budget_refuses_what_it_cannot_hold_and_takes_back_what_is_dropped() {
        let budget = Budget::new(10 * 1024);
        let held = budget.reserve(8 * 1024).await.expect("fits");
        let refused = budget.reserve(4 * 1024).await.map(|_| ()).expect_err("over");
        assert_eq!(refused.error.data.as_ref().expect("data")["limit"], "max_inflight_bytes");
        drop(held);
        let mut again = budget.reserve(4 * 1024).await.expect("returned");
        again.merge(budget.reserve(6 * 1024).await.expect("fits too"));
        assert!(budget.reserve(1).await.is_err());
    }
}
