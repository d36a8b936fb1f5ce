//! A task's trace context, as Redis keeps it with the task and in every work entry.
//!
//! A task has a span of its own, from its creation to its settling. Its id is chosen when the
//! gateway creates the task, as a child of the MCP request's span, and stored with the task; every
//! node's span, on whatever worker runs it, is a child of that id; the process whose transition
//! settles the task (a worker completing the last node, a gateway cancelling, a worker expiring
//! it) writes the task span itself, with the chosen id and the creation time as its start.
//!
//! Stored form: lines of text, so that Lua passes it along untouched — the task span's
//! `traceparent`, then its parent span id, its creation time in ms, the caller's `tracestate` and
//! `baggage` (W3C), any of the last four possibly empty. A record holding a bare `traceparent`
//! still reads.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use opentelemetry::baggage::BaggageExt;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};

use super::{TRACER, with_span_id};

/// Longest `tracestate` kept (the W3C limit is 32 members of at most 256 characters; 512 is what
/// the specification asks vendors to be able to propagate).
const MAX_TRACESTATE: usize = 512;
/// Longest `baggage` kept (the W3C limit).
const MAX_BAGGAGE: usize = 8192;

/// A task's trace context.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskTrace {
    pub trace_id: TraceId,
    /// The task span's id: the parent of every node span.
    pub span_id: SpanId,
    pub sampled: bool,
    /// The span of the request that created the task: the task span's parent.
    pub parent: Option<SpanId>,
    pub created_ms: u64,
    pub tracestate: String,
    pub baggage: String,
}

/// Reads a caller's W3C trace context (`traceparent`, `tracestate`, `baggage`) from `get`: an HTTP
/// header map or an MCP request's `_meta`. An invalid `traceparent` gives a context without a
/// span, so that the request starts a new trace.
pub fn extract(get: &dyn Fn(&str) -> Option<String>) -> Context {
    let mut carrier = HashMap::new();
    for name in ["traceparent", "tracestate", "baggage"] {
        if let Some(value) = get(name) {
            carrier.insert(name.to_owned(), value);
        }
    }
    let cx = TraceContextPropagator::new().extract(&carrier);
    if carrier.get("baggage").is_some_and(|b| b.len() <= MAX_BAGGAGE) {
        BaggagePropagator::new().extract_with_context(&cx, &carrier)
    } else {
        cx
    }
}

impl TaskTrace {
    /// A new task's context, its span a child of `request` (the current MCP request's span).
    pub fn begin(request: &Context, created_ms: u64) -> Self {
        let span = request.span();
        let sc = span.span_context();
        let (trace_id, sampled, parent, tracestate) = if sc.is_valid() {
            (sc.trace_id(), sc.is_sampled(), Some(sc.span_id()), sc.trace_state().header())
        } else {
            (TraceId::from_bytes(rand::random::<[u8; 16]>()), true, None, String::new())
        };
        let mut carrier = HashMap::new();
        BaggagePropagator::new().inject_context(request, &mut carrier);
        Self {
            trace_id,
            span_id: SpanId::from_bytes(rand::random::<[u8; 8]>()),
            sampled,
            parent,
            created_ms,
            tracestate: if tracestate.len() <= MAX_TRACESTATE { tracestate } else { String::new() },
            baggage: carrier.remove("baggage").unwrap_or_default(),
        }
    }

    /// A new task's context under the current span (the MCP request's).
    pub fn here(created_ms: u64) -> Self {
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        Self::begin(&tracing::Span::current().context(), created_ms)
    }

    /// The task span's W3C `traceparent`.
    pub fn traceparent(&self) -> String {
        format!("00-{}-{}-{:02x}", self.trace_id, self.span_id, u8::from(self.sampled))
    }

    /// The stored form (see the module's documentation).
    pub fn encode(&self) -> String {
        let parent = self.parent.map(|p| p.to_string()).unwrap_or_default();
        format!(
            "{}\n{parent}\n{}\n{}\n{}",
            self.traceparent(),
            self.created_ms,
            self.tracestate,
            self.baggage
        )
    }

    /// Reads the stored form; `None` for an empty or unreadable one.
    pub fn decode(stored: &str) -> Option<Self> {
        let mut lines = stored.split('\n');
        let parts: Vec<&str> = lines.next()?.split('-').collect();
        let [version, trace, span, flags] = parts.as_slice() else { return None };
        if version.len() != 2 || trace.len() != 32 || span.len() != 16 || flags.len() != 2 {
            return None;
        }
        let trace_id = TraceId::from_hex(trace).ok().filter(|t| *t != TraceId::INVALID)?;
        let span_id = SpanId::from_hex(span).ok().filter(|s| *s != SpanId::INVALID)?;
        let flags = u8::from_str_radix(flags, 16).ok()?;
        let parent = lines.next().and_then(|p| SpanId::from_hex(p).ok()).filter(|p| *p != SpanId::INVALID);
        let created_ms = lines.next().and_then(|c| c.parse().ok()).unwrap_or(0);
        Some(Self {
            trace_id,
            span_id,
            sampled: flags & 1 == 1,
            parent,
            created_ms,
            tracestate: lines.next().unwrap_or_default().to_owned(),
            baggage: lines.next().unwrap_or_default().to_owned(),
        })
    }

    fn remote(&self, span_id: SpanId) -> Context {
        let flags = if self.sampled { TraceFlags::SAMPLED } else { TraceFlags::default() };
        let state = self.tracestate.parse::<TraceState>().unwrap_or_default();
        let cx = Context::new().with_remote_span_context(SpanContext::new(
            self.trace_id,
            span_id,
            flags,
            true,
            state,
        ));
        if self.baggage.is_empty() {
            return cx;
        }
        let carrier = HashMap::from([("baggage".to_owned(), self.baggage.clone())]);
        BaggagePropagator::new().extract_with_context(&cx, &carrier)
    }

    /// The context a node's span starts under: the task span, with the caller's baggage.
    pub fn node_parent(&self) -> Context {
        self.remote(self.span_id)
    }

    /// The span id of a node's attempt: derived from the task span, the node and the attempt, so
    /// that a worker that takes over a lost attempt writes that attempt's span under the id the
    /// lost worker used, and whatever the lost worker exported before it died hangs under it.
    pub fn node_span_id(&self, node_id: &str, attempt: u32) -> SpanId {
        // FNV-1a: the same on every process and release.
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        let attempt = attempt.to_be_bytes();
        let parts: [&[u8]; 4] = [&self.span_id.to_bytes(), node_id.as_bytes(), b"/", &attempt];
        for byte in parts.into_iter().flatten() {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        SpanId::from_bytes(hash.max(1).to_be_bytes())
    }

    /// Makes `span` (a node attempt's span, not yet entered) a child of the task span, under the
    /// attempt's own id ([`TaskTrace::node_span_id`]).
    pub fn adopt_node_span(&self, span: &tracing::Span, node_id: &str, attempt: u32) {
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        let _ = span.set_parent(self.node_parent());
        // Reading the context builds the span, here, with the chosen id.
        with_span_id(self.node_span_id(node_id, attempt), || drop(span.context()));
    }

    /// The caller's baggage, as key and value pairs.
    pub fn baggage_entries(&self) -> Vec<(String, String)> {
        self.node_parent().baggage().iter().map(|(k, (v, _))| (k.to_string(), v.to_string())).collect()
    }

    /// Writes the task span, from the task's creation to `ended`. Called once, by the process
    /// whose transition settled the task; `status` is the task's terminal status.
    pub fn end_task_span(
        &self,
        task_id: &str,
        tool: &str,
        status: &str,
        message: Option<&str>,
        ended: SystemTime,
    ) {
        let Some(parent) = self.parent else {
            // Without the request's span id the task span could not join the trace.
            return;
        };
        let tracer = opentelemetry::global::tracer(TRACER);
        let builder = tracer
            .span_builder(format!("task {tool}"))
            .with_kind(SpanKind::Internal)
            .with_start_time(SystemTime::UNIX_EPOCH + Duration::from_millis(self.created_ms))
            .with_attributes([
                KeyValue::new(attr::TASK_ID, task_id.to_owned()),
                KeyValue::new(attr::TOOL, tool.to_owned()),
                KeyValue::new(attr::TASK_STATUS, status.to_owned()),
            ]);
        let mut span =
            with_span_id(self.span_id, || tracer.build_with_context(builder, &self.remote(parent)));
        use opentelemetry::trace::Span as _;
        if status == "failed" {
            span.set_status(Status::error(message.unwrap_or("failed").to_owned()));
        }
        span.end_with_timestamp(ended);
    }

    /// Writes the span of an attempt whose worker was lost (killed, hung, cut off) mid-node: the
    /// lost worker could not, so the worker that takes the node over writes it, from the attempt's
    /// start to the takeover, as an error.
    pub fn lost_attempt_span(&self, lost: &LostAttempt, task_id: &str, node_id: &str) {
        if !super::exporting() {
            return;
        }
        let tracer = opentelemetry::global::tracer(TRACER);
        let start = SystemTime::UNIX_EPOCH + Duration::from_millis(lost.started_ms);
        let builder = tracer
            .span_builder(format!("node {}", lost.tool))
            .with_kind(SpanKind::Consumer)
            .with_start_time(start)
            .with_attributes([
                KeyValue::new(attr::TASK_ID, task_id.to_owned()),
                KeyValue::new(attr::NODE_ID, node_id.to_owned()),
                KeyValue::new(attr::TOOL, lost.tool.clone()),
                KeyValue::new(attr::ATTEMPT, i64::from(lost.attempt)),
                KeyValue::new(attr::WORKER, lost.worker.clone()),
                KeyValue::new(attr::OUTCOME, "lost"),
            ]);
        use opentelemetry::trace::Span as _;
        let mut span = with_span_id(self.node_span_id(node_id, lost.attempt), || {
            tracer.build_with_context(builder, &self.node_parent())
        });
        span.set_status(Status::error(format!(
            "worker {} stopped renewing its lease; the node was taken over",
            lost.worker
        )));
        span.end();
    }
}

/// Writes a span that has already ended, under `parent`: a Redis round trip shared by several
/// nodes (one batch start), recorded under each node's span.
pub fn finished_span(
    parent: &Context,
    name: String,
    start: SystemTime,
    end: SystemTime,
    attributes: Vec<KeyValue>,
) {
    use opentelemetry::trace::Span as _;
    let tracer = opentelemetry::global::tracer(TRACER);
    let builder = tracer
        .span_builder(name)
        .with_kind(SpanKind::Client)
        .with_start_time(start)
        .with_attributes(attributes);
    tracer.build_with_context(builder, parent).end_with_timestamp(end);
}

/// The attributes of a Redis round trip's span (the database conventions).
pub fn redis_attributes(operation: &'static str, script: &'static str) -> Vec<KeyValue> {
    vec![
        KeyValue::new(attr::DB_SYSTEM_NAME, "redis"),
        KeyValue::new(attr::DB_OPERATION_NAME, operation),
        KeyValue::new(attr::DB_STORED_PROCEDURE_NAME, script),
    ]
}

/// The attempt a lost worker was running when its node was taken over.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LostAttempt {
    pub tool: String,
    pub attempt: u32,
    #[serde(default)]
    pub worker: String,
    #[serde(default)]
    pub started_ms: u64,
}

/// Attribute names of Conveyor's spans. Where the OpenTelemetry semantic conventions name a thing
/// (MCP, JSON-RPC, GenAI tools, databases) their names are used; the rest live under `conveyor.`.
pub mod attr {
    // The MCP and GenAI names are those of the semantic conventions; the crate marks its copies
    // deprecated since they moved to the GenAI conventions' own repository, so they are spelled
    // out here.
    pub use opentelemetry_semantic_conventions::attribute::{
        DB_OPERATION_NAME, DB_STORED_PROCEDURE_NAME, DB_SYSTEM_NAME, ERROR_TYPE, JSONRPC_PROTOCOL_VERSION,
        JSONRPC_REQUEST_ID, NETWORK_PROTOCOL_NAME, NETWORK_TRANSPORT, RPC_RESPONSE_STATUS_CODE,
    };
    pub const MCP_METHOD_NAME: &str = "mcp.method.name";
    pub const MCP_PROTOCOL_VERSION: &str = "mcp.protocol.version";
    pub const MCP_SESSION_ID: &str = "mcp.session.id";
    pub const MCP_RESOURCE_URI: &str = "mcp.resource.uri";
    pub const GEN_AI_OPERATION_NAME: &str = "gen_ai.operation.name";
    /// The tool a task or node runs (the GenAI convention's name for it).
    pub const TOOL: &str = "gen_ai.tool.name";
    pub const TASK_ID: &str = "conveyor.task.id";
    pub const TASK_STATUS: &str = "conveyor.task.status";
    pub const NODE_ID: &str = "conveyor.node.id";
    /// The attempt number, the node's fencing token: 2 and up for a retry or a takeover.
    pub const ATTEMPT: &str = "conveyor.node.attempt";
    pub const QUEUE: &str = "conveyor.queue";
    pub const WORKER: &str = "conveyor.worker";
    /// How the attempt ended: completed, tool_error, failed, cancelled, parked, lost, handed_back.
    pub const OUTCOME: &str = "conveyor.node.outcome";
    /// Why this attempt runs: first, retry, reclaimed (taken over from a lost worker), resumed
    /// (input arrived for a parked node).
    pub const RUN_REASON: &str = "conveyor.node.run_reason";
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> Context {
        let cx = extract(&|name| match name {
            "traceparent" => Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
            "tracestate" => Some("vendor=abc".into()),
            "baggage" => Some("team=search,user=ada".into()),
            _ => None,
        });
        assert!(cx.span().span_context().is_valid());
        cx
    }

    #[test]
    fn a_task_joins_the_callers_trace_and_survives_storage() {
        let trace = TaskTrace::begin(&request(), 1_700_000_000_000);
        assert_eq!(trace.trace_id.to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(trace.parent.map(|p| p.to_string()).as_deref(), Some("00f067aa0ba902b7"));
        assert_ne!(trace.span_id.to_string(), "00f067aa0ba902b7");
        assert_eq!(trace.tracestate, "vendor=abc");
        let read = TaskTrace::decode(&trace.encode()).expect("reads back");
        assert_eq!(read, trace);
        let mut baggage = read.baggage_entries();
        baggage.sort();
        assert_eq!(baggage, [("team".into(), "search".into()), ("user".into(), "ada".into())]);
        assert_eq!(read.node_span_id("a", 1), trace.node_span_id("a", 1));
        assert_ne!(read.node_span_id("a", 1), trace.node_span_id("a", 2));
        assert_ne!(read.node_span_id("a", 1), trace.node_span_id("b", 1));
        let node = read.node_parent();
        assert_eq!(node.span().span_context().span_id(), trace.span_id);
        assert!(node.span().span_context().is_sampled());
    }

    #[test]
    fn a_bad_caller_context_starts_a_new_trace_and_bad_records_read_as_none() {
        let cx = extract(&|name| (name == "traceparent").then(|| "00-zz-01".to_owned()));
        let trace = TaskTrace::begin(&cx, 5);
        assert!(trace.parent.is_none());
        assert_ne!(trace.trace_id, TraceId::INVALID);
        let bare =
            TaskTrace::decode("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00").expect("bare");
        assert!(!bare.sampled);
        assert!(bare.parent.is_none());
        for broken in ["", "garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"] {
            assert!(TaskTrace::decode(broken).is_none(), "{broken:?}");
        }
    }
}
