//! The probes an orchestrator sends, on the public listener and on the metrics listener alike:
//! `/healthz` (the process runs) and `/readyz` (Redis answers).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::state::AppState;

/// `/healthz`: the process runs and serves HTTP.
pub(crate) async fn healthz() -> &'static str {
    "ok"
}

/// `/readyz`: Redis answers a `PING`; 503 with the reason while it does not.
pub(crate) async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    match state.store.ping().await {
        Ok(()) => (StatusCode::OK, "ready").into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {e}")).into_response(),
    }
}
