//! The gateway's side of the metrics: each MCP request counted and timed by its JSON-RPC method
//! and reply, and `/metrics`, which adds the deployment's gauges (read from Redis, at most every
//! [`crate::gauges::STATS_FRESH_FOR`]) to the process's metrics.
//!
//! `/metrics` is served on its own listener (`--metrics-listen`, [`router`]), never on the public
//! one: a scrape reads every shard, and what it tells (queues, workers, dead letters) is for
//! operators.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use conveyor_shared::metrics::{self, McpOutcome, McpRequest};

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

/// The routes of a gateway's metrics listener: `/metrics` (the process's metrics and the
/// deployment's gauges; 200 with `conveyor_redis_up 0` while Redis is away), `/healthz`, `/readyz`.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/metrics", get(serve))
        .route("/healthz", get(crate::probes::healthz))
        .route("/readyz", get(crate::probes::readyz))
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
