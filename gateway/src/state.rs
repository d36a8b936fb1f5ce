//! What every request handler shares. Nothing here is per client: any replica serves any request.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use conveyor_shared::{Config, Store};
use futures::StreamExt;
use serde_json::json;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::access::AccessPolicy;
use crate::auth::Authenticator;
use crate::catalog::ToolCatalog;
use crate::rpc::RpcFailure;

/// Web view streams one gateway serves at once.
pub const MAX_STREAMS: usize = 64;
/// Of those, how many one principal may hold: a page per tab, and room for everyone else.
pub const MAX_STREAMS_PER_PRINCIPAL: usize = 8;

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
    /// Shortest time between two reads of one task (of its state, of its result) or of one page of
    /// a listing by one caller (0: no limit).
    pub min_poll_gap_ms: u64,
}

/// The memory requests in flight may hold, in KiB permits: their bodies and parsed JSON, and the
/// tasks a reader read and the replies built of them until they are written; all of them
/// together, and those of one principal, so that one principal's slow or large requests never
/// take what every caller shares.
pub struct Budget {
    permits: Arc<Semaphore>,
    total_kib: usize,
    principal_kib: usize,
    principals: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// Memory a request holds (of the gateway's budget, and of its principal's share); it returns to
/// both when dropped.
#[derive(Default)]
pub struct BudgetPermit {
    global: Option<OwnedSemaphorePermit>,
    principal: Option<OwnedSemaphorePermit>,
}

impl BudgetPermit {
    pub fn merge(&mut self, other: BudgetPermit) {
        fn join(mine: &mut Option<OwnedSemaphorePermit>, theirs: Option<OwnedSemaphorePermit>) {
            match (mine.as_mut(), theirs) {
                (Some(mine), Some(theirs)) => mine.merge(theirs),
                (None, theirs) => *mine = theirs,
                (_, None) => {}
            }
        }
        join(&mut self.global, other.global);
        join(&mut self.principal, other.principal);
    }
}

/// Memory a reply holds until it has been written: a handler that read a task for it puts the
/// permit of that read here, and the response's body gives it back once its last byte is handed
/// to the connection (or the client is gone). Cheap to clone: the handler and the response share it.
#[derive(Clone, Default)]
pub struct ReplyBudget(Arc<Mutex<Vec<BudgetPermit>>>);

impl ReplyBudget {
    /// Keeps `permit` until the reply is written.
    pub fn hold(&self, permit: BudgetPermit) {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(permit);
    }

    /// Whether anything is held.
    pub fn holds(&self) -> bool {
        !self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).is_empty()
    }

    /// A JSON response whose body keeps what is held until its last part is handed to the
    /// connection, or the client goes away.
    pub fn json(self, status: StatusCode, text: String) -> Response {
        if !self.holds() {
            return (status, [(header::CONTENT_TYPE, "application/json")], text).into_response();
        }
        let body = Bytes::from(text);
        let length = body.len();
        let parts = (0..length)
            .step_by(REPLY_CHUNK)
            .map(move |at| Ok::<_, std::convert::Infallible>(body.slice(at..(at + REPLY_CHUNK).min(length))));
        let stream = futures::stream::iter(parts).map(move |part| {
            let _held = &self;
            part
        });
        let mut response = (status, Body::from_stream(stream)).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
        response
    }
}

/// Parts a held reply body is handed to the connection in: the budget it holds goes back once the
/// last part is taken, so that what is still unsent when it does is at most a few of these.
const REPLY_CHUNK: usize = 64 * 1024;

/// How long a request waits for memory before it is refused as "busy".
const BUDGET_WAIT: Duration = Duration::from_secs(2);
/// The retry hint of a request refused for lack of memory.
pub const BUSY_RETRY_AFTER_MS: u64 = 1_000;
/// The retry hint of a read refused because it is larger than a principal's whole share.
const NEVER_FITS: &str = "it can never fit; an operator can raise the limit";
/// Principals whose shares are remembered before idle ones are forgotten.
const REMEMBERED_PRINCIPALS: usize = 1024;

impl Budget {
    /// A budget of `bytes` for all requests, of which one principal's may hold `per_principal`.
    pub fn new(bytes: usize, per_principal: usize) -> Self {
        let total_kib = bytes.div_ceil(1024).clamp(1, Semaphore::MAX_PERMITS);
        let principal_kib = per_principal.div_ceil(1024).clamp(1, total_kib);
        Self {
            permits: Arc::new(Semaphore::new(total_kib)),
            total_kib,
            principal_kib,
            principals: Mutex::new(HashMap::new()),
        }
    }

    fn share_of(&self, principal: &str) -> Arc<Semaphore> {
        let mut shares = self.principals.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if shares.len() >= REMEMBERED_PRINCIPALS && !shares.contains_key(principal) {
            // A share nobody holds anything of is the same as a new one.
            shares.retain(|_, share| share.available_permits() < self.principal_kib);
        }
        shares
            .entry(principal.to_owned())
            .or_insert_with(|| Arc::new(Semaphore::new(self.principal_kib)))
            .clone()
    }

    /// Holds `bytes` of the budget for what `principal` reads (a task and the reply built of it),
    /// like [`Budget::reserve`]; but a read larger than the principal's whole share (or the whole
    /// budget) is refused at once ([`Budget::check_fits`]), since no wait makes room for it.
    pub async fn reserve_read(&self, principal: &str, bytes: usize) -> Result<BudgetPermit, RpcFailure> {
        self.check_fits(bytes)?;
        self.reserve(principal, bytes).await
    }

    /// Refuses, naming the limit, what no principal's share (or not the whole budget) can hold.
    pub fn check_fits(&self, bytes: usize) -> Result<(), RpcFailure> {
        let kib = bytes.div_ceil(1024);
        let (limit, max_kib, what) = if kib > self.principal_kib {
            ("max_inflight_bytes_per_principal", self.principal_kib, "your share of")
        } else if kib > self.total_kib {
            ("max_inflight_bytes", self.total_kib, "all of")
        } else {
            return Ok(());
        };
        Err(RpcFailure::new(
            crate::rpc::codes::OVERLOADED,
            format!(
                "Too large to read: this answer would hold {:.1} MiB, more than {what} this gateway's memory for requests in flight ({:.1} MiB, limit {limit}); {NEVER_FITS}. Read less at once.",
                bytes as f64 / 1048576.0,
                max_kib as f64 / 1024.0,
            ),
            Some(json!({"limit": limit, "retryable": false, "size": bytes, "max": max_kib * 1024})),
        ))
    }

    /// Holds `bytes` of the budget for `principal`, waiting briefly for requests in flight to
    /// return theirs: first of the principal's share, then of the whole.
    pub async fn reserve(&self, principal: &str, bytes: usize) -> Result<BudgetPermit, RpcFailure> {
        let kib = bytes.div_ceil(1024).min(self.total_kib);
        if kib == 0 {
            return Ok(BudgetPermit::default());
        }
        let share = self.share_of(principal);
        let mut held = BudgetPermit::default();
        let acquired = tokio::time::timeout(BUDGET_WAIT, async {
            let own = kib.min(self.principal_kib) as u32;
            held.principal = Some(share.acquire_many_owned(own).await.map_err(|_| "principal")?);
            held.global =
                Some(self.permits.clone().acquire_many_owned(kib as u32).await.map_err(|_| "global")?);
            Ok::<(), &str>(())
        })
        .await;
        if matches!(acquired, Ok(Ok(()))) {
            return Ok(held);
        }
        let (limit, what) = if held.principal.is_none() {
            (
                "max_inflight_bytes_per_principal",
                format!(
                    "your requests in flight hold your share of this gateway's memory ({} MiB)",
                    self.principal_kib / 1024
                ),
            )
        } else {
            (
                "max_inflight_bytes",
                format!(
                    "requests in flight hold this gateway's memory for requests ({} MiB)",
                    self.total_kib / 1024
                ),
            )
        };
        Err(RpcFailure::new(
            crate::rpc::codes::OVERLOADED,
            format!(
                "Busy: {what} (limit {limit}); nothing was done. Retry in about {} s.",
                BUSY_RETRY_AFTER_MS / 1000
            ),
            Some(json!({"limit": limit, "retryable": true, "retryAfterMs": BUSY_RETRY_AFTER_MS})),
        ))
    }
}

/// What a gateway holds for one principal at once (its open streams and waiting calls), counted
/// per principal and bounded, so that one principal cannot hold what every caller shares.
pub struct PerPrincipal {
    held: Mutex<HashMap<String, usize>>,
    max: usize,
}

/// One thing held for a principal; it is given back when dropped.
pub struct Held {
    of: Arc<PerPrincipal>,
    principal: String,
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut held = self.of.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(count) = held.get_mut(&self.principal) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                held.remove(&self.principal);
            }
        }
    }
}

impl PerPrincipal {
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Self { held: Mutex::new(HashMap::new()), max })
    }

    /// One more for `principal`, unless it holds `max` already.
    pub fn take(self: &Arc<Self>, principal: &str) -> Option<Held> {
        let mut held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = held.entry(principal.to_owned()).or_default();
        if *count >= self.max {
            return None;
        }
        *count += 1;
        Some(Held { of: self.clone(), principal: principal.to_owned() })
    }

    pub fn max(&self) -> usize {
        self.max
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
    /// Open streams of the web view: each reads Redis on an interval, so there is a bound, and
    /// one principal may hold only a share of it.
    pub ui_streams: Arc<Semaphore>,
    pub ui_streams_per_principal: Arc<PerPrincipal>,
    /// Streams and waiting calls of every kind a principal holds open on this gateway.
    pub streams: Arc<PerPrincipal>,
    /// The deployment's gauges last read for `/metrics`.
    pub stats: crate::gauges::StatsCache,
}

impl AppState {
    /// A gateway's state; authentication stays off until [`AppState::with_auth`] sets it.
    pub fn new(store: Store, config: Config, http: HttpPolicy) -> Self {
        Self {
            catalog: ToolCatalog::new(store.clone()),
            budget: Budget::new(config.max_inflight_bytes, config.inflight_bytes_per_principal()),
            streams: PerPrincipal::new(config.max_streams_per_principal),
            store,
            config,
            http,
            auth: Authenticator::disabled(),
            access: AccessPolicy::default(),
            shared_limits: SharedLimits::default(),
            shutdown: tokio_util::sync::CancellationToken::new(),
            signer: crate::signing::Signer::new(None),
            ui_streams: Arc::new(Semaphore::new(MAX_STREAMS)),
            ui_streams_per_principal: PerPrincipal::new(MAX_STREAMS_PER_PRINCIPAL),
            stats: crate::gauges::StatsCache::default(),
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
        let budget = Budget::new(10 * 1024, 10 * 1024);
        let held = budget.reserve("a", 8 * 1024).await.expect("fits");
        let refused = budget.reserve("b", 4 * 1024).await.map(|_| ()).expect_err("over");
        assert_eq!(refused.error.data.as_ref().expect("data")["limit"], "max_inflight_bytes");
        drop(held);
        let mut again = budget.reserve("a", 4 * 1024).await.expect("returned");
        again.merge(budget.reserve("a", 6 * 1024).await.expect("fits too"));
        assert!(budget.reserve("a", 1).await.is_err());
    }

    #[tokio::test]
    async fn one_principal_holds_only_its_share_of_the_budget() {
        let budget = Budget::new(16 * 1024, 4 * 1024);
        let held = budget.reserve("mallory", 4 * 1024).await.expect("her share");
        let refused = budget.reserve("mallory", 1024).await.map(|_| ()).expect_err("over her share");
        assert_eq!(refused.error.data.as_ref().expect("data")["limit"], "max_inflight_bytes_per_principal");
        let _alice = budget.reserve("alice", 4 * 1024).await.expect("alice is not held back");
        drop(held);
        budget.reserve("mallory", 1024).await.expect("given back");
    }

    #[tokio::test]
    async fn a_read_larger_than_a_share_is_refused_at_once_and_names_the_limit() {
        let budget = Budget::new(16 * 1024, 4 * 1024);
        let refused = budget.reserve_read("alice", 5 * 1024).await.map(|_| ()).expect_err("over her share");
        let data = refused.error.data.as_ref().expect("data");
        assert_eq!(data["limit"], "max_inflight_bytes_per_principal");
        assert_eq!(data["retryable"], false, "no wait makes room for it");
        let held = budget.reserve_read("alice", 4 * 1024).await.expect("her whole share");
        let busy = budget.reserve_read("alice", 1024).await.map(|_| ()).expect_err("held");
        assert_eq!(busy.error.data.as_ref().expect("data")["retryable"], true, "a wait may make room");
        let reply = ReplyBudget::default();
        assert!(!reply.holds());
        reply.hold(held);
        reply.hold(budget.reserve_read("bob", 1024).await.expect("bob's own"));
        assert!(reply.holds());
        assert!(budget.reserve_read("alice", 1024).await.is_err(), "held until the reply is written");
        drop(reply);
        budget.reserve_read("alice", 4 * 1024).await.expect("given back with the reply");
    }

    #[test]
    fn streams_are_counted_per_principal_and_given_back() {
        let streams = PerPrincipal::new(2);
        let first = streams.take("mallory").expect("one");
        let _second = streams.take("mallory").expect("two");
        assert!(streams.take("mallory").is_none(), "her limit");
        assert!(streams.take("alice").is_some(), "another principal's own");
        drop(first);
        assert!(streams.take("mallory").is_some(), "given back when dropped");
    }
}
