//! The worker's own HTTP listener (`conveyor worker --metrics-listen ADDR`), for Prometheus and an
//! orchestrator's probes: `/metrics` (this process's metrics, and whether Redis answers a `PING`),
//! `/healthz` (the process runs) and `/readyz` (Redis answers). A worker serves no MCP; only gateways do.

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use conveyor_shared::{Store, metrics};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The listener's routes.
pub fn router(store: Store) -> Router {
    Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(store)
}

async fn metrics_text(State(store): State<Store>) -> Response {
    ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], scrape(&store).await).into_response()
}

async fn readyz(State(store): State<Store>) -> Response {
    match store.ping().await {
        Ok(()) => (StatusCode::OK, "ready").into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {e}")).into_response(),
    }
}

/// Serves [`router`] on `listener` until `shutdown` fires.
pub async fn serve(listener: TcpListener, store: Store, shutdown: CancellationToken) -> std::io::Result<()> {
    axum::serve(listener, router(store))
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
}

/// A worker's scrape: the process's metrics, and whether Redis answers a `PING` within
/// [`metrics::SCRAPE_REDIS_TIMEOUT`] (`conveyor_redis_up`).
async fn scrape(store: &Store) -> String {
    let up = matches!(tokio::time::timeout(metrics::SCRAPE_REDIS_TIMEOUT, store.ping()).await, Ok(Ok(())));
    metrics::render_scrape(Some(up), None)
}
