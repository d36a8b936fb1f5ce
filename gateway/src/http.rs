//! Streamable HTTP at `/mcp`, plus `/healthz` and `/readyz`. This module owns everything that is
//! about HTTP: Host and Origin checks, content negotiation, body limits, the MCP request headers,
//! and turning a handler's reply into a JSON body or an SSE stream.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::StreamExt;
use rmcp::model::ErrorCode;
use serde_json::Value;

use crate::methods::{self, Reply, RequestCtx, StreamItem};
use crate::rpc::{self, RpcFailure};
use crate::state::AppState;
use crate::wire::{self, Wire};

/// The router of a gateway. Built by a plain function so tests can drive it without a socket.
pub fn router(state: Arc<AppState>) -> Router {
    let limit = state.config.max_body_bytes;
    Router::new()
        .route("/mcp", get(get_mcp).post(post_mcp).delete(delete_mcp))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    match state.store.ping().await {
        Ok(()) => (StatusCode::OK, "ready").into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {e}")).into_response(),
    }
}

/// A stateless server offers no standalone SSE stream: every message belongs to a request.
async fn get_mcp(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Err(r) = check_origin(&state, &headers) {
        return r;
    }
    (
        StatusCode::METHOD_NOT_ALLOWED,
        [(header::ALLOW, "POST")],
        "Conveyor's gateway is stateless: POST JSON-RPC requests to /mcp; server messages arrive on each request's own stream.",
    )
        .into_response()
}

async fn delete_mcp(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Err(r) = check_origin(&state, &headers) {
        return r;
    }
    (
        StatusCode::METHOD_NOT_ALLOWED,
        [(header::ALLOW, "POST")],
        "Conveyor's gateway keeps no sessions to delete.",
    )
        .into_response()
}

async fn post_mcp(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Response {
    if let Err(r) = check_origin(&state, &headers) {
        return r;
    }
    let owner = match principal(&state, &headers) {
        Ok(owner) => owner,
        Err(r) => return r,
    };
    let body = match body {
        Ok(b) => b,
        Err(rejection) => {
            let status = rejection.status();
            let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
                format!("request body exceeds the limit of {} bytes", state.config.max_body_bytes)
            } else {
                rejection.body_text()
            };
            return failure_response(&Value::Null, RpcFailure::invalid_request(message).with_status(status));
        }
    };
    if !content_type_is_json(&headers) {
        return failure_response(
            &Value::Null,
            RpcFailure::invalid_request("Content-Type must be application/json")
                .with_status(StatusCode::UNSUPPORTED_MEDIA_TYPE),
        );
    }
    let accepts = Accepts::from(&headers);
    if !accepts.json && !accepts.sse {
        return failure_response(
            &Value::Null,
            RpcFailure::invalid_request("Accept must include application/json and text/event-stream")
                .with_status(StatusCode::NOT_ACCEPTABLE),
        );
    }
    let message: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return failure_response(&Value::Null, RpcFailure::parse_error(format!("Parse error: {e}")));
        }
    };
    let Some(object) = message.as_object() else {
        let what = if message.is_array() {
            "batches are not supported; send one message per request"
        } else {
            "a JSON-RPC message must be an object"
        };
        return failure_response(
            &Value::Null,
            RpcFailure::invalid_request(format!("Invalid Request: {what}")),
        );
    };
    let id = object.get("id").cloned();
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return failure_response(
            &id.unwrap_or(Value::Null),
            RpcFailure::invalid_request("Invalid Request: `jsonrpc` must be \"2.0\""),
        );
    }
    let Some(method) = object.get("method").and_then(Value::as_str) else {
        // A response or error from the client: nothing in Conveyor asks the client anything yet.
        if id.is_some() && (object.contains_key("result") || object.contains_key("error")) {
            return StatusCode::ACCEPTED.into_response();
        }
        return failure_response(
            &id.unwrap_or(Value::Null),
            RpcFailure::invalid_request("Invalid Request: `method` must be a string"),
        );
    };
    let params = object.get("params").cloned().unwrap_or(Value::Null);
    if !(params.is_null() || params.is_object()) {
        return failure_response(
            &id.unwrap_or(Value::Null),
            RpcFailure::invalid_request("Invalid Request: `params` must be an object"),
        );
    }
    let Some(id) = id else {
        // Notifications need no answer; a stateless server has nothing to update for them.
        return StatusCode::ACCEPTED.into_response();
    };
    if !(id.is_string() || id.is_i64() || id.is_u64()) {
        return failure_response(
            &Value::Null,
            RpcFailure::invalid_request("Invalid Request: `id` must be a string or an integer"),
        );
    }
    let wire = Wire::detect(method, &params, &headers);
    if wire == Wire::V2026
        && let Err(failure) = wire::check_2026(method, &params, &headers)
    {
        return failure_response(&id, failure);
    }
    let ctx = RequestCtx {
        id: id.clone(),
        method: method.to_owned(),
        params,
        wire,
        accepts_sse: accepts.sse,
        owner,
        traceparent: traceparent(&headers, object),
    };
    let initialize = wire == Wire::V2025 && method == "initialize";
    match methods::handle(state, ctx).await {
        Ok(Reply::Result(result)) if initialize => {
            // 2025-11-25 clients expect a session id. Conveyor's names no server state: every
            // gateway accepts every id, none is ever terminated, and DELETE answers 405, so the
            // gateway stays stateless while clients that wait for an id get one.
            let mut response = json_response(StatusCode::OK, rpc::response(&id, result));
            if let Ok(session) = header::HeaderValue::from_str(&conveyor_shared::model::random_id()) {
                response.headers_mut().insert("mcp-session-id", session);
            }
            response
        }
        Ok(Reply::Result(result)) => json_response(StatusCode::OK, rpc::response(&id, result)),
        Ok(Reply::Stream(stream)) => sse_response(id, stream),
        Err(failure) => failure_response(&id, with_wire_status(wire, failure)),
    }
}

/// On 2026-07-28 an error's HTTP status follows its code: unknown and removed methods are 404,
/// refused requests 400. On 2025-11-25 JSON-RPC errors travel with 200.
fn with_wire_status(wire: Wire, failure: RpcFailure) -> RpcFailure {
    if wire != Wire::V2026 || failure.http_status != StatusCode::OK {
        return failure;
    }
    let status = match failure.error.code {
        ErrorCode::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
        ErrorCode::INVALID_PARAMS
        | ErrorCode::HEADER_MISMATCH
        | ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
        | ErrorCode::UNSUPPORTED_PROTOCOL_VERSION => StatusCode::BAD_REQUEST,
        _ => StatusCode::OK,
    };
    failure.with_status(status)
}

fn json_response(status: StatusCode, body: Value) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

fn failure_response(id: &Value, failure: RpcFailure) -> Response {
    json_response(failure.http_status, rpc::error_response(id, &failure.error))
}

fn sse_response(id: Value, stream: methods::ReplyStream) -> Response {
    let events = stream.map(move |item| {
        let message = match item {
            StreamItem::Notification(n) => n,
            StreamItem::Done(Ok(result)) => rpc::response(&id, result),
            StreamItem::Done(Err(failure)) => rpc::error_response(&id, &failure.error),
        };
        Ok::<_, Infallible>(Event::default().event("message").data(message.to_string()))
    });
    Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))).into_response()
}

struct Accepts {
    json: bool,
    sse: bool,
}

impl From<&HeaderMap> for Accepts {
    fn from(headers: &HeaderMap) -> Self {
        let mut accepts = Accepts { json: false, sse: false };
        let values = headers.get_all(header::ACCEPT);
        if values.iter().next().is_none() {
            // No Accept header means anything goes.
            return Accepts { json: true, sse: true };
        }
        for value in values.iter().filter_map(|v| v.to_str().ok()) {
            for item in value.split(',') {
                let mime = item.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
                match mime.as_str() {
                    "application/json" | "application/*" => accepts.json = true,
                    "text/event-stream" | "text/*" => accepts.sse = true,
                    "*/*" => {
                        accepts.json = true;
                        accepts.sse = true;
                    }
                    _ => {}
                }
            }
        }
        accepts
    }
}

fn content_type_is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").trim().eq_ignore_ascii_case("application/json"))
        .unwrap_or(false)
}

/// DNS-rebinding protection: the Host must be one this gateway serves, and a browser's Origin
/// must point at such a host too.
#[allow(clippy::result_large_err)] // the error is a ready response; this runs once per request
fn check_origin(state: &AppState, headers: &HeaderMap) -> Result<(), Response> {
    let allowed = &state.http.allowed_hosts;
    if allowed.iter().any(|h| h == "*") {
        return Ok(());
    }
    let host_allowed = |authority: &str| {
        let host = strip_port(authority);
        allowed.iter().any(|a| a.eq_ignore_ascii_case(host))
    };
    if let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok())
        && !host_allowed(host)
    {
        return Err(forbidden(&format!(
            "Host `{host}` is not served here; set CONVEYOR_ALLOWED_HOSTS to allow it"
        )));
    }
    if let Some(origin) = headers.get(header::ORIGIN).and_then(|h| h.to_str().ok()) {
        let authority = origin.split_once("://").map(|(_, rest)| rest).unwrap_or(origin);
        let authority = authority.split('/').next().unwrap_or("");
        if origin == "null" || !host_allowed(authority) {
            return Err(forbidden(&format!(
                "Origin `{origin}` is not allowed; set CONVEYOR_ALLOWED_HOSTS to allow it"
            )));
        }
    }
    Ok(())
}

fn forbidden(message: &str) -> Response {
    failure_response(&Value::Null, RpcFailure::invalid_request(message).with_status(StatusCode::FORBIDDEN))
}

/// `host:port`, `[v6]:port` or a bare host, without the port.
fn strip_port(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => host,
        _ => authority,
    }
}

/// Who is asking. Tasks are bound to it: other principals get "not found". Without API keys
/// configured every caller is `anonymous`; with them, a request needs `Authorization: Bearer <key>`.
#[allow(clippy::result_large_err)] // the error is a ready response; this runs once per request
fn principal(state: &AppState, headers: &HeaderMap) -> Result<String, Response> {
    if state.http.api_keys.is_empty() {
        return Ok("anonymous".to_owned());
    }
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim);
    match token.and_then(|t| state.http.principal_of(t)) {
        Some(principal) => Ok(principal.to_owned()),
        None => {
            let message = if token.is_some() {
                "Unauthorized: the API key is not valid"
            } else {
                "Unauthorized: send `Authorization: Bearer <API key>`"
            };
            let mut response = failure_response(
                &Value::Null,
                RpcFailure::invalid_request(message).with_status(StatusCode::UNAUTHORIZED),
            );
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
            Err(response)
        }
    }
}

/// The request's W3C trace context: `_meta.traceparent` (SEP-414) first, then the HTTP header;
/// a new trace when neither is valid, so that every task carries a trace context from the start.
fn traceparent(headers: &HeaderMap, message: &serde_json::Map<String, Value>) -> Option<String> {
    let from_meta =
        message.get("params").and_then(|p| p.pointer("/_meta/traceparent")).and_then(Value::as_str);
    let from_header = headers.get("traceparent").and_then(|v| v.to_str().ok());
    from_meta
        .filter(|t| valid_traceparent(t))
        .or(from_header.filter(|t| valid_traceparent(t)))
        .map(str::to_owned)
        .or_else(|| Some(new_traceparent()))
}

/// `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`, ids not all zero.
fn valid_traceparent(value: &str) -> bool {
    let parts: Vec<&str> = value.split('-').collect();
    let hex = |s: &str, len: usize| {
        s.len() == len && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    parts.len() == 4
        && hex(parts[0], 2)
        && parts[0] != "ff"
        && hex(parts[1], 32)
        && parts[1].bytes().any(|b| b != b'0')
        && hex(parts[2], 16)
        && parts[2].bytes().any(|b| b != b'0')
        && hex(parts[3], 2)
}

fn new_traceparent() -> String {
    let trace = conveyor_shared::model::random_id();
    let span = &conveyor_shared::model::random_id()[..16];
    format!("00-{trace}-{span}-01")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_context_is_kept_when_valid_and_made_when_not() {
        let given = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let message = serde_json::json!({"params": {"_meta": {"traceparent": given}}});
        let object = message.as_object().expect("an object");
        assert_eq!(traceparent(&HeaderMap::new(), object).as_deref(), Some(given));
        let bad = serde_json::json!({"params": {"_meta": {"traceparent": "00-zz-01"}}});
        let made = traceparent(&HeaderMap::new(), bad.as_object().expect("an object")).expect("a new trace");
        assert!(valid_traceparent(&made), "{made}");
        assert_ne!(made, given);
        assert!(!valid_traceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01"));
    }

    #[test]
    fn ports_are_stripped_from_hosts() {
        assert_eq!(strip_port("localhost:8080"), "localhost");
        assert_eq!(strip_port("[::1]:8080"), "::1");
        assert_eq!(strip_port("127.0.0.1"), "127.0.0.1");
    }
}
