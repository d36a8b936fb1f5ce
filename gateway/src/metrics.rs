//! The gateway's side of the metrics: each MCP request counted and timed by its JSON-RPC method
//! and reply, and `/metrics`, which adds the deployment's gauges (read from Redis at scrape time)
//! to the process's metrics.

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use conveyor_shared::metrics::{self, McpOutcome, McpRequest};
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

/// `GET /metrics`: the process's metrics and the deployment's gauges, unauthenticated like
/// `/healthz`. It answers 200 while Redis is away, with `conveyor_redis_up 0`.
pub(crate) async fn serve(State(state): State<Arc<AppState>>) -> Response {
    ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], metrics::scrape(&state.store).await).into_response()
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
