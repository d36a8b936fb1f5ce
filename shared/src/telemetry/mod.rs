//! Telemetry of a Conveyor process: structured logs, and OpenTelemetry traces exported over OTLP.
//!
//! Every process installs the same stack ([`init`]): a log layer (human on a terminal, JSON with
//! `--log-format json`, filtered by `RUST_LOG`) whose lines carry the `trace_id` and `span_id` of
//! the span they were written in, and the OpenTelemetry layer that turns Conveyor's spans into
//! OTLP spans. Export is configured only by the standard `OTEL_*` variables; without an endpoint
//! nothing is exported and spans are dropped when they end, so the ids in the logs still tie a
//! task's lines together across processes.
//!
//! - [`context`]: a task's trace context as Redis keeps it, the task span, and spans a process
//!   writes on behalf of another (an attempt whose worker died).
//! - `logs`: the log line formats.

pub mod context;
mod logs;

use std::cell::Cell;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::trace::{SpanId, TraceId, TracerProvider as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SdkTracerProvider};
use tracing::Level;
use tracing_subscriber::filter::{EnvFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, Registry};

pub use logs::LogFormat;

/// The instrumentation scope of every Conveyor span.
pub const TRACER: &str = "conveyor";

/// Crates whose spans become OpenTelemetry spans, whatever the log level says.
const TRACED_CRATES: [&str; 3] = ["conveyor_shared", "conveyor_gateway", "conveyor_worker"];

static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Whether this process exports spans. Spans that serve only a trace (Redis round trips, spans
/// written on another's behalf) are not made when it does not; those that logs need are.
pub fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// What [`init`] set up; [`Telemetry::shutdown`] exports the spans still buffered.
pub struct Telemetry {
    provider: SdkTracerProvider,
    exporting: Option<String>,
    /// Writes the log lines still buffered when dropped (at [`Telemetry::shutdown`] or with this).
    log_writer: std::sync::Mutex<Option<tracing_appender::non_blocking::WorkerGuard>>,
}

impl Telemetry {
    /// Where spans go (`grpc http://collector:4317`), or `None` when export is off.
    pub fn exporting(&self) -> Option<&str> {
        self.exporting.as_deref()
    }

    /// Flushes and stops the exporter, and writes the log lines still buffered. Call once, as the
    /// process's last step: log lines after it are not written.
    pub fn shutdown(&self) {
        if self.exporting.is_some()
            && let Err(e) = self.provider.shutdown()
        {
            eprintln!("conveyor: could not export the last spans: {e}");
        }
        drop(self.log_writer.lock().unwrap_or_else(|e| e.into_inner()).take());
    }
}

/// Why telemetry could not start.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error(
        "cannot set up the OTLP exporter ({0}); check OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_EXPORTER_OTLP_PROTOCOL"
    )]
    Exporter(String),
    #[error("a log subscriber is already installed")]
    AlreadyInstalled,
}

/// Installs logs and traces for this process. `service` names the process in traces unless
/// `OTEL_SERVICE_NAME` (or `service.name` in `OTEL_RESOURCE_ATTRIBUTES`) says otherwise. Needs a
/// Tokio runtime when the exporter speaks gRPC. `default_level` filters logs when neither
/// `RUST_LOG` nor `CONVEYOR_LOG` is set (a server logs `info`; a client in a terminal only `warn`).
pub fn init(format: LogFormat, service: &str, default_level: &str) -> Result<Telemetry, TelemetryError> {
    let export = export_target();
    let mut resource = Resource::builder();
    let named = std::env::var("OTEL_SERVICE_NAME").is_ok_and(|v| !v.is_empty())
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|v| v.contains("service.name="));
    if !named {
        resource = resource.with_service_name(service.to_owned());
    }
    let mut builder = SdkTracerProvider::builder()
        .with_id_generator(TaskSpanIds::default())
        .with_resource(resource.build());
    let exporting = match export {
        Some(protocol) => {
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .build()
                .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
            builder = builder.with_batch_exporter(exporter);
            Some(protocol)
        }
        None => None,
    };
    EXPORTING.store(exporting.is_some(), Ordering::Relaxed);
    let provider = builder.build();
    opentelemetry::global::set_tracer_provider(provider.clone());
    let traced = TRACED_CRATES.iter().fold(Targets::new(), |t, name| t.with_target(*name, Level::INFO));
    let otel = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer(TRACER))
        .with_tracked_inactivity(false)
        .with_filter(traced);
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_from_env("CONVEYOR_LOG"))
        .unwrap_or_else(|_| EnvFilter::new(default_level));
    let (writer, log_writer) = logs::stderr_writer();
    Registry::default()
        .with(otel)
        .with(logs::layer(format, writer).with_filter(filter))
        .try_init()
        .map_err(|_| TelemetryError::AlreadyInstalled)?;
    Ok(Telemetry { provider, exporting, log_writer: std::sync::Mutex::new(Some(log_writer)) })
}

/// Whether spans are exported, and how: the `OTEL_*` variables as the specification reads them.
/// Export is on once an endpoint is named (or `OTEL_TRACES_EXPORTER=otlp`), off with
/// `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`.
fn export_target() -> Option<String> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    if var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return None;
    }
    let exporter = var("OTEL_TRACES_EXPORTER");
    if exporter.as_deref().is_some_and(|e| e.eq_ignore_ascii_case("none")) {
        return None;
    }
    let endpoint = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").or_else(|| var("OTEL_EXPORTER_OTLP_ENDPOINT"));
    if endpoint.is_none() && exporter.is_none() {
        return None;
    }
    let protocol = var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .unwrap_or_else(|| "http/protobuf".into());
    Some(format!("{protocol} {}", endpoint.unwrap_or_else(|| "(default endpoint)".into())))
}

thread_local! {
    /// The span id the next span built on this thread must take: set just before a span whose
    /// id was chosen earlier (a task's span, named when the task was created) is built.
    static CHOSEN_SPAN_ID: Cell<Option<SpanId>> = const { Cell::new(None) };
}

/// Random ids, except for a span whose id was fixed in advance (see [`context`]): a task's span
/// is named when the task is created, so that its nodes can be its children on any worker, and
/// written by whichever process settles the task.
#[derive(Debug, Default)]
struct TaskSpanIds {
    random: RandomIdGenerator,
}

impl IdGenerator for TaskSpanIds {
    fn new_trace_id(&self) -> TraceId {
        self.random.new_trace_id()
    }

    fn new_span_id(&self) -> SpanId {
        CHOSEN_SPAN_ID.with(Cell::take).unwrap_or_else(|| self.random.new_span_id())
    }
}

/// Runs `build` with `id` as the id of the first span it builds on this thread.
fn with_span_id<T>(id: SpanId, build: impl FnOnce() -> T) -> T {
    CHOSEN_SPAN_ID.with(|c| c.set(Some(id)));
    let built = build();
    CHOSEN_SPAN_ID.with(|c| c.set(None));
    built
}

impl fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Telemetry").field("exporting", &self.exporting).finish()
    }
}
