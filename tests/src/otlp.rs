//! An OpenTelemetry collector's receiving end, inside the test: OTLP over gRPC and over
//! HTTP/protobuf on free ports, keeping every span it is sent, with its service name and the
//! transport it came by.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::response::IntoResponse;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message;

/// One span as received.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    /// `service.name` of the resource that sent it.
    pub service: String,
    /// `grpc` or `http`.
    pub via: &'static str,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    pub name: String,
    pub attributes: HashMap<String, String>,
    /// The span's status is an error.
    pub error: bool,
    pub start_ns: u64,
    pub end_ns: u64,
    /// The names of the span's events (a log line written inside the span is one).
    pub events: Vec<String>,
}

impl ReceivedSpan {
    pub fn attr(&self, name: &str) -> Option<&str> {
        self.attributes.get(name).map(String::as_str)
    }
}

type Spans = Arc<Mutex<Vec<ReceivedSpan>>>;

/// A running receiver.
pub struct OtlpReceiver {
    /// `http://127.0.0.1:<port>` of the gRPC listener.
    pub grpc_endpoint: String,
    /// `http://127.0.0.1:<port>` of the HTTP listener (spans are posted to `/v1/traces`).
    pub http_endpoint: String,
    spans: Spans,
}

impl OtlpReceiver {
    pub async fn start() -> anyhow::Result<Self> {
        let spans: Spans = Arc::default();
        // Bound here, on a port the kernel picks as it binds: a port chosen first and bound later
        // could be taken meanwhile, and the workers' spans would go to whoever took it.
        let incoming = tonic::transport::server::TcpIncoming::bind("127.0.0.1:0".parse()?)?;
        let grpc: SocketAddr = incoming.local_addr()?;
        let service = TraceServiceServer::new(Grpc(spans.clone()));
        tokio::spawn(tonic::transport::Server::builder().add_service(service).serve_with_incoming(incoming));
        let http = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let http_addr = http.local_addr()?;
        let kept = spans.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: Bytes| {
                let kept = kept.clone();
                async move {
                    match ExportTraceServiceRequest::decode(body) {
                        Ok(request) => {
                            keep(&kept, request, "http");
                            let reply = ExportTraceServiceResponse::default().encode_to_vec();
                            ([("content-type", "application/x-protobuf")], reply).into_response()
                        }
                        Err(e) => (axum::http::StatusCode::BAD_REQUEST, e.to_string()).into_response(),
                    }
                }
            }),
        );
        tokio::spawn(async move { axum::serve(http, app).await });
        Ok(Self {
            grpc_endpoint: format!("http://{grpc}"),
            http_endpoint: format!("http://{http_addr}"),
            spans,
        })
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Waits up to `seconds` until `done` holds for the spans received.
    pub async fn wait_for(&self, seconds: u64, done: impl Fn(&[ReceivedSpan]) -> bool) -> Vec<ReceivedSpan> {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(seconds);
        loop {
            let spans = self.spans();
            if done(&spans) || tokio::time::Instant::now() > deadline {
                return spans;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
}

struct Grpc(Spans);

#[tonic::async_trait]
impl TraceService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        keep(&self.0, request.into_inner(), "grpc");
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

fn keep(spans: &Spans, request: ExportTraceServiceRequest, via: &'static str) {
    let mut received = Vec::new();
    for resource_spans in request.resource_spans {
        let resource = resource_spans.resource.map(|r| attributes(&r.attributes)).unwrap_or_default();
        let service = resource.get("service.name").cloned().unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                received.push(ReceivedSpan {
                    service: service.clone(),
                    via,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    name: span.name,
                    attributes: attributes(&span.attributes),
                    // Status code 2 is ERROR.
                    error: span.status.is_some_and(|s| s.code == 2),
                    start_ns: span.start_time_unix_nano,
                    end_ns: span.end_time_unix_nano,
                    events: span.events.iter().map(|e| e.name.clone()).collect(),
                });
            }
        }
    }
    if let Ok(mut all) = spans.lock() {
        all.extend(received);
    }
}

fn attributes(list: &[KeyValue]) -> HashMap<String, String> {
    list.iter()
        .map(|kv| {
            let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(AnyValue::StringValue(s)) => s.clone(),
                Some(AnyValue::IntValue(i)) => i.to_string(),
                Some(AnyValue::BoolValue(b)) => b.to_string(),
                Some(AnyValue::DoubleValue(d)) => d.to_string(),
                Some(other) => format!("{other:?}"),
                None => String::new(),
            };
            (kv.key.clone(), value)
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
