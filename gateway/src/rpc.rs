//! JSON-RPC envelopes and the one error type every handler returns.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use rmcp::model::{ErrorCode, ErrorData};
use serde_json::{Value, json};

/// The JSON-RPC error codes Conveyor sends beyond those `rmcp::model::ErrorCode` names.
pub mod codes {
    use rmcp::model::ErrorCode;

    /// A synchronous call's answer when it was cancelled (the code LSP and several MCP SDKs use for
    /// a cancelled request; MCP itself names none).
    pub const REQUEST_CANCELLED: ErrorCode = ErrorCode(-32800);

    /// A request refused because an overload limit is reached.
    pub const OVERLOADED: ErrorCode = ErrorCode(-32029);
}

/// A failed request: the JSON-RPC error to send, and the HTTP status to send it with.
#[derive(Debug, Clone)]
pub struct RpcFailure {
    pub error: ErrorData,
    pub http_status: StatusCode,
}

impl RpcFailure {
    pub fn new(code: ErrorCode, message: impl Into<String>, data: Option<Value>) -> Self {
        Self { error: ErrorData::new(code, message.into(), data), http_status: StatusCode::OK }
    }

    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::INVALID_PARAMS, message, None)
    }

    pub fn method_not_found(method: &str) -> Self {
        Self::new(ErrorCode::METHOD_NOT_FOUND, format!("Method not found: {method}"), None)
    }

    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::INVALID_REQUEST, message, None).with_status(StatusCode::BAD_REQUEST)
    }

    pub fn parse_error(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::PARSE_ERROR, message, None).with_status(StatusCode::BAD_REQUEST)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::INTERNAL_ERROR, message, None)
    }

    pub fn with_status(mut self, status: StatusCode) -> Self {
        self.http_status = status;
        self
    }

    pub fn with_data(mut self, data: Value) -> Self {
        self.error.data = Some(data);
        self
    }
}

/// How long a client should wait before it retries a request that failed because Redis was away.
pub const STORE_RETRY_AFTER_MS: u64 = 1_000;

impl From<conveyor_shared::StoreError> for RpcFailure {
    fn from(e: conveyor_shared::StoreError) -> Self {
        tracing::warn!(error = %e, "store operation failed");
        // A JSON-RPC error with HTTP 200, never a 5xx: some clients (the official Python SDK) end
        // their whole session on an HTTP 5xx, while a JSON-RPC error fails only this request.
        if e.is_transient() {
            Self::internal(format!(
                "Conveyor cannot reach its task store right now ({e}); nothing was lost, retry in about {} s",
                STORE_RETRY_AFTER_MS / 1000
            ))
            .with_data(json!({"retryable": true, "retryAfterMs": STORE_RETRY_AFTER_MS}))
        } else {
            Self::internal(format!("Conveyor's task store refused the operation: {e}"))
        }
    }
}

/// A JSON-RPC response carrying `result`.
pub fn response(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// A JSON-RPC error response.
pub fn error_response(id: &Value, error: &ErrorData) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": error})
}

impl RpcFailure {
    /// The failure as the HTTP response to the request `id`: its status, and a JSON-RPC error.
    pub fn into_response_for(self, id: &Value) -> Response {
        let body = error_response(id, &self.error).to_string();
        (self.http_status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
    }
}

/// A failure before any request id is known (admission): the error answers id `null`.
impl IntoResponse for RpcFailure {
    fn into_response(self) -> Response {
        self.into_response_for(&Value::Null)
    }
}

/// A JSON-RPC notification.
pub fn notification(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}
