//! The web view at `/ui`: a person's window onto the tasks `/mcp` runs. The page and its script
//! and style sheet are compiled into the binary (no CDN, no build step) and hold no data, so they
//! are served without a token; everything they show comes from the JSON API under `/ui/api/`,
//! which asks for the same bearer token as `/mcp`, through the same authentication, and answers
//! 401 with the same challenge without one. The token travels in the `Authorization` header of
//! each `fetch` (the page keeps it in `sessionStorage`), never in a cookie, so another site cannot
//! make a browser send it; the Host and Origin checks of `/mcp` apply as well.
//!
//! # Layout
//!
//! - [`api`]: the JSON endpoints: who is asking, the caller's tasks, one task with its nodes and
//!   result, cancel, and the operators' view of queues, workers and dead letters.
//! - [`stream`]: the Server-Sent Events stream that pushes the task list (and the open task)
//!   whenever it changes, read from Redis on a short interval.
//! - [`view`]: the JSON shapes of tasks, nodes, queues and workers that the page reads.
//!
//! `docs/ui.md` describes the page, the endpoints and their shapes.

mod api;
mod stream;
#[cfg(test)]
mod tests;
mod view;

use std::sync::Arc;

use axum::Router;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde_json::json;

use crate::access::Caller;
use crate::admission::{AllowedOrigin, Authenticated};
use crate::state::AppState;

pub use stream::{MAX_STREAMS, MAX_STREAMS_PER_PRINCIPAL, STREAM_INTERVAL};
pub use view::LIST_LIMIT;

const PAGE: &str = include_str!("assets/index.html");
const SCRIPT: &str = include_str!("assets/app.js");
const STYLE: &str = include_str!("assets/app.css");

/// What the page may load and talk to: only this origin; no inline script, no frames around it.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The routes of the web view, merged into the gateway's router.
pub(crate) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/ui", get(page))
        // The page's links are relative to `/ui`, so that it also works behind a path prefix.
        .route("/ui/", get(|| async { Redirect::permanent("../ui") }))
        .route("/ui/app.js", get(script))
        .route("/ui/app.css", get(style))
        .route("/ui/api/me", get(api::me))
        .route("/ui/api/tasks", get(api::tasks))
        .route("/ui/api/tasks/{task_id}", get(api::task))
        .route("/ui/api/tasks/{task_id}/cancel", post(api::cancel))
        .route("/ui/api/operators", get(api::operators))
        .route("/ui/api/stream", get(stream::open))
}

async fn page(_: AllowedOrigin) -> Response {
    asset("text/html; charset=utf-8", PAGE)
}

async fn script(_: AllowedOrigin) -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

async fn style(_: AllowedOrigin) -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

/// A compiled-in file. `no-cache` rather than a long lifetime: the files change with the binary,
/// and a gateway upgraded under an open browser must not leave it with a stale script.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}

/// The caller of an API endpoint, admitted as `/mcp` admits one: Host and Origin checked, the
/// bearer token authenticated (or `anonymous` under `--no-auth`), the principal's request rate
/// counted. A refusal is the same response `/mcp` gives.
pub(crate) struct ApiCaller(pub Caller);

impl FromRequestParts<Arc<AppState>> for ApiCaller {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<AppState>) -> Result<Self, Response> {
        let Authenticated(caller) = Authenticated::from_request_parts(parts, state).await?;
        if let Err(failure) = crate::admission::rate_limit(state, &caller).await {
            return Err(ApiError::Refused(failure).into_response());
        }
        Ok(ApiCaller(caller))
    }
}

/// Why an API request failed, as the page shows it: a status and `{"error": message}`.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ApiError {
    #[error("task `{0}` not found (unknown, expired, or not yours)")]
    TaskNotFound(String),
    #[error("only operators see queues, workers and dead letters")]
    NotOperator,
    #[error("task `{task}` is already {status}; a finished task never changes")]
    AlreadyTerminal { task: String, status: String },
    #[error(
        "this gateway already serves {MAX_STREAMS} web view streams; close a tab or retry in a few seconds"
    )]
    TooManyStreams,
    #[error(
        "you already have {MAX_STREAMS_PER_PRINCIPAL} web view streams open on this gateway; close a tab or retry in a few seconds"
    )]
    TooManyOwnStreams,
    #[error("{}", .0.error.message)]
    Refused(crate::rpc::RpcFailure),
}

impl From<conveyor_shared::StoreError> for ApiError {
    fn from(e: conveyor_shared::StoreError) -> Self {
        Self::Refused(e.into())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let retry_after_ms = match &self {
            Self::Refused(failure) => {
                failure.error.data.as_ref().and_then(|d| d.get("retryAfterMs")).and_then(|v| v.as_u64())
            }
            Self::TooManyStreams | Self::TooManyOwnStreams => Some(5_000),
            _ => None,
        };
        let status = match &self {
            Self::TaskNotFound(_) => StatusCode::NOT_FOUND,
            Self::NotOperator => StatusCode::FORBIDDEN,
            Self::AlreadyTerminal { .. } => StatusCode::CONFLICT,
            Self::TooManyStreams => StatusCode::SERVICE_UNAVAILABLE,
            Self::TooManyOwnStreams => StatusCode::TOO_MANY_REQUESTS,
            // Over the principal's rate: the JSON-RPC error's own code says so.
            Self::Refused(failure) if failure.error.code == crate::rpc::codes::OVERLOADED => {
                StatusCode::TOO_MANY_REQUESTS
            }
            // The task store is out of reach or refused: the page says so and tries again.
            Self::Refused(_) => StatusCode::SERVICE_UNAVAILABLE,
        };
        let mut body = json!({"error": self.to_string()});
        if let Some(ms) = retry_after_ms {
            body["retryAfterMs"] = json!(ms);
        }
        let mut response = (status, axum::Json(body)).into_response();
        if let Some(ms) = retry_after_ms
            && let Ok(value) = HeaderValue::from_str(&ms.div_ceil(1000).to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        response
    }
}
