//! The stateless MCP gateway. It speaks Streamable HTTP at `/mcp` in two revisions (2025-11-25
//! with experimental Tasks, 2026-07-28 with the Tasks extension), checks tools and arguments,
//! creates tasks in Redis with one script before answering, and answers every `tasks/*` method
//! from Redis. It holds no task state and runs no tool: any replica answers any request.
//!
//! # Layout
//!
//! - [`http`]: the axum router; Host/Origin checks, content negotiation, body limit, the
//!   `Mcp-Method`/`Mcp-Name` headers, JSON or SSE replies; `/healthz` and `/readyz`.
//! - [`wire`]: which revision a request speaks, and each revision's task shapes.
//! - [`methods`]: one module per JSON-RPC method, and the wait on a task through the gateway's
//!   inbox that relays progress and ends with the result.
//! - [`catalog`]: the tools workers publish, cached, with compiled input schemas.
//! - [`rpc`]: JSON-RPC envelopes and [`rpc::RpcFailure`], the one error type handlers return.
//! - [`state`]: [`AppState`], shared by all handlers.
//!
//! Why a dispatcher of our own rather than rmcp's `StreamableHttpService`: see
//! `docs/architecture.md`. MCP shapes come from `rmcp::model` wherever rmcp has them.

pub mod catalog;
pub mod http;
pub mod methods;
pub mod rpc;
pub mod state;
pub mod wire;

use std::future::Future;
use std::sync::Arc;

pub use http::router;
pub use state::{AppState, HttpPolicy};

/// Serves the gateway on `listener` until `shutdown` completes, then stops accepting and lets
/// requests in flight finish.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::serve::ListenerExt;
    // Replies are small and often end in a separate final write (the last SSE event, the end of a
    // chunked body); without TCP_NODELAY each such write waits out the client's delayed ACK.
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
    });
    let waits = state.shutdown.clone();
    let shutdown = async move {
        shutdown.await;
        // Stop accepting, and end the requests that wait on tasks: they may wait for hours.
        waits.cancel();
    };
    axum::serve(listener, router(state)).with_graceful_shutdown(shutdown).await
}
