//! The accept loop: HTTP/1.1 connections with a bound on how many are served at once, a deadline
//! on each request's headers (which also closes idle keep-alive connections), and a graceful
//! drain. axum's own `serve` offers none of these bounds, so the loop is built on hyper directly.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceExt;

use crate::http::router;
use crate::state::AppState;

/// Serves the gateway on `listener` until `shutdown` completes, then stops accepting, ends the
/// requests that wait on tasks (with an error the client can retry elsewhere) and lets the rest
/// finish.
pub async fn serve(
    listener: TcpListener,
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = router(state.clone());
    let connections = Arc::new(Semaphore::new(state.config.max_connections));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(state.config.header_timeout).max_buf_size(64 * 1024);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        // A free slot first: past the limit, new connections wait in the kernel's backlog.
        let permit = tokio::select! {
            () = &mut shutdown => break,
            permit = connections.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        let (tcp, remote) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: wait a moment rather than spin.
                    tracing::warn!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        // Replies are small and often end in a separate final write (the last SSE event, the end
        // of a chunked body); without TCP_NODELAY each such write waits out a delayed ACK.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        let app = app.clone();
        let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            let mut request = request.map(axum::body::Body::new);
            request.extensions_mut().insert(ConnectInfo::<SocketAddr>(remote));
            app.clone().oneshot(request)
        });
        let connection = graceful.watch(http.serve_connection(TokioIo::new(tcp), service));
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, %remote, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    // Requests that wait on tasks may wait for hours: end them, the client retries elsewhere.
    state.shutdown.cancel();
    graceful.shutdown().await;
    Ok(())
}
