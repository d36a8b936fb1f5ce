//! The span of each MCP request: it continues the caller's trace (the `traceparent`,
//! `tracestate` and `baggage` of the request's `_meta`, else of its HTTP headers), and is named
//! and described as the OpenTelemetry conventions for MCP servers say (`{method} {target}`,
//! `mcp.method.name`, `jsonrpc.request.id`, `gen_ai.tool.name`, ...). A task created by the
//! request takes it as its parent (`conveyor_shared::telemetry::context`).

use axum::http::HeaderMap;
use conveyor_shared::telemetry::context::{attr, extract};
use serde_json::Value;
use tracing::Span;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::wire::Wire;

/// The span of one MCP request, a child of the caller's span when the request names one.
pub fn request_span(headers: &HeaderMap, params: &Value, method: &str, id: &Value, wire: Wire) -> Span {
    let meta = params.get("_meta");
    let from_meta = |name: &str| meta.and_then(|m| m.get(name)).and_then(Value::as_str).map(str::to_owned);
    let from_headers = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    // One source for all three: a `_meta` that names a trace wins over the transport's headers.
    let in_meta = from_meta("traceparent").is_some();
    if !in_meta && !conveyor_shared::telemetry::exporting() && !headers.contains_key("traceparent") {
        // Nothing exports this span and no caller's trace goes on through it: it would cost every
        // request its fields and context for nothing. A task created now starts its own trace.
        return Span::none();
    }
    let parent = if in_meta { extract(&from_meta) } else { extract(&from_headers) };
    let target = match method {
        "tools/call" | "prompts/get" => params.get("name").and_then(Value::as_str),
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
            params.get("uri").and_then(Value::as_str)
        }
        _ => None,
    };
    let name = match target {
        Some(target) => format!("{method} {target}"),
        None => method.to_owned(),
    };
    let request_id = match id {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let span = tracing::info_span!(
        "mcp request",
        otel.name = %name,
        otel.kind = "server",
        otel.status_code = Empty,
        otel.status_description = Empty,
        { attr::MCP_METHOD_NAME } = %method,
        { attr::MCP_PROTOCOL_VERSION } = wire.as_str(),
        { attr::JSONRPC_REQUEST_ID } = %request_id,
        { attr::JSONRPC_PROTOCOL_VERSION } = "2.0",
        { attr::NETWORK_TRANSPORT } = "tcp",
        { attr::NETWORK_PROTOCOL_NAME } = "http",
        { attr::MCP_SESSION_ID } = Empty,
        { attr::GEN_AI_OPERATION_NAME } = Empty,
        { attr::TOOL } = Empty,
        { attr::MCP_RESOURCE_URI } = Empty,
        { attr::TASK_ID } = Empty,
        { attr::ERROR_TYPE } = Empty,
        { attr::RPC_RESPONSE_STATUS_CODE } = Empty,
    );
    if let Some(session) = headers.get("mcp-session-id").and_then(|v| v.to_str().ok()) {
        span.record(attr::MCP_SESSION_ID, session);
    }
    if method == "tools/call" {
        span.record(attr::GEN_AI_OPERATION_NAME, "execute_tool");
        if let Some(tool) = target {
            span.record(attr::TOOL, tool);
        }
    } else if let Some(uri) = target {
        span.record(attr::MCP_RESOURCE_URI, uri);
    }
    if let Some(task) = params.get("taskId").and_then(Value::as_str) {
        span.record(attr::TASK_ID, task);
    }
    let _ = span.set_parent(parent);
    span
}

/// Marks the request's span as failed with a JSON-RPC error code.
pub fn record_error(span: &Span, code: i32, message: &str) {
    span.record(attr::ERROR_TYPE, code.to_string());
    span.record(attr::RPC_RESPONSE_STATUS_CODE, code.to_string());
    span.record("otel.status_code", "ERROR");
    span.record("otel.status_description", message);
}

/// Names the task a request created (or acted on) on the request's span.
pub fn record_task(task_id: &str) {
    Span::current().record(attr::TASK_ID, task_id);
}
