//! The gateway's side of the metrics: each MCP request counted and timed by its JSON-RPC method
//! and reply, and `/metrics`, which adds the deployment's gauges (read from Redis, at most every
//! [`STATS_FRESH_FOR`]) to the process's metrics.
//!
//! `/metrics` is served on its own listener (`--metrics-listen`, [`router`]), never on the public
//! one: a scrape reads every shard, and what it tells (queues, workers, dead letters) is for
//! operators.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use conveyor_shared::metrics::{self, McpOutcome, McpRequest};
use conveyor_shared::store::ClusterStats;
use futures::StreamExt;

use crate::methods::{Reply, StreamItem};
use crate::rpc::RpcFailure;
use crate::state::AppState;

/// Every JSON-RPC method either revision has; a request of any other method is counted as
/// `other`, so that clients cannot add series.
const METHODS: &[&str] = &[
    "initialize",
    "ping",
    "server/discover",
    "tools/list",
    "tools/call",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "tasks/result",
    "tasks/list",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "completion/complete",
    "logging/setLevel",
    "subscriptions/listen",
];

/// The `method` label of a request.
pub fn method_label(method: &str) -> &'static str {
    METHODS.iter().find(|m| **m == method).copied().unwrap_or("other")
}

/// Counts a request refused before dispatch with a JSON-RPC error.
pub(crate) fn refused(method: &str) {
    McpRequest::start(method_label(method)).finish(McpOutcome::Error);
}

/// Counts and times a dispatched request by its reply: at once for a result or an error, at its
/// response for a stream (or when the stream closes without one).
pub(crate) fn measured(request: McpRequest, reply: Result<Reply, RpcFailure>) -> Result<Reply, RpcFailure> {
    match reply {
        Ok(Reply::Result(result)) => {
            request.finish(McpOutcome::Ok);
            Ok(Reply::Result(result))
        }
        Ok(Reply::Stream(stream)) => {
            let mut request = Some(request);
            Ok(Reply::Stream(
                stream
                    .inspect(move |item| {
                        if let StreamItem::Done(done) = item
                            && let Some(request) = request.take()
                        {
                            request.finish(if done.is_ok() { McpOutcome::Ok } else { McpOutcome::Error });
                        }
                    })
                    .boxed(),
            ))
        }
        Err(failure) => {
            request.finish(McpOutcome::Error);
            Err(failure)
        }
    }
}

/// How long the deployment's gauges read for one scrape serve the next: scrapes from several
/// Prometheus replicas, or a scraper gone wild, cost Redis one read per shard this often at most.
pub const STATS_FRESH_FOR: Duration = Duration::from_secs(2);

/// The deployment's gauges as last read, and when.
#[derive(Default)]
pub struct StatsCache(tokio::sync::Mutex<Option<(Instant, ClusterStats)>>);

impl StatsCache {
    /// The gauges, read again when older than [`STATS_FRESH_FOR`]; one read at a time.
    async fn get(&self, store: &conveyor_shared::Store) -> Option<ClusterStats> {
        let mut cached = self.0.lock().await;
        if let Some((at, stats)) = cached.as_ref()
            && at.elapsed() < STATS_FRESH_FOR
        {
            return Some(stats.clone());
        }
        match tokio::time::timeout(metrics::SCRAPE_REDIS_TIMEOUT, store.cluster_stats()).await {
            Ok(Ok(stats)) => {
                *cached = Some((Instant::now(), stats.clone()));
                Some(stats)
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "cannot read the deployment's gauges for a scrape");
                None
            }
            Err(_) => None,
        }
    }
}

/// The routes of a gateway's metrics listener: `/metrics` (the process's metrics and the
/// deployment's gauges; 200 with `conveyor_redis_up 0` while Redis is away), `/healthz`, `/readyz`.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/metrics", get(serve))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(crate::http::readyz))
        .with_state(state)
}

/// Serves [`router`] on `listener` until `shutdown` fires.
pub async fn serve_listener(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    shutdown: tokio_util::sync::CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
}

async fn serve(State(state): State<Arc<AppState>>) -> Response {
    let stats = state.stats.get(&state.store).await;
    let text = metrics::render_scrape(Some(stats.is_some()), stats.as_ref());
    ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], text).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_are_labelled_from_a_bounded_set() {
        assert_eq!(method_label("tools/call"), "tools/call");
        assert_eq!(method_label("server/discover"), "server/discover");
        assert_eq!(method_label("x/anything-a-client-sends"), "other");
        assert_eq!(method_label(""), "other");
    }
}
