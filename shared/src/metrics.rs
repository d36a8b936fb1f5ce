//! The process's Prometheus metrics: one registry per process, which every gateway and worker in
//! it records into (`conveyor up` runs both in one process, and its `/metrics` shows both), and
//! the deployment's gauges read from Redis at scrape time. `docs/observability.md` lists every metric.
//!
//! The rest of the code calls the typed functions here, never the registry: label values come
//! from bounded sets (JSON-RPC methods the gateway knows, tools and queues workers publish, script
//! and command names), so that no client input can grow the series without bound.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, OnceLock};
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use crate::keys::Shard;
use crate::model::{ToolOutcome, now_ms};

/// The content type of [`render`]'s text (OpenMetrics 1.0, which Prometheus reads).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// How long a scrape waits for the deployment's gauges before it answers without them.
pub const SCRAPE_REDIS_TIMEOUT: Duration = Duration::from_secs(2);

/// The JSON-RPC reply a request got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum McpOutcome {
    /// A result.
    Ok,
    /// A JSON-RPC error.
    Error,
    /// No reply: the reply stream closed first (the client went away, or the stream was let go
    /// for the client to resume on any gateway).
    Closed,
}

impl McpOutcome {
    fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Error => "error",
            Self::Closed => "closed",
        }
    }
}

/// How a node attempt ended on the worker that ran it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeOutcome {
    /// The tool returned a result.
    Completed,
    /// The tool returned a result with `isError: true`.
    ToolError,
    /// The tool failed with a JSON-RPC error, timed out, crashed, asked for input the client
    /// cannot give, or planned a graph that was refused; or the node lost its worker too often.
    Failed,
    /// The node was stopped because its task was cancelled, failed or expired.
    Cancelled,
    /// The tool planned its work as a graph, which joined its task.
    Planned,
    /// The tool asked the client for input; the node waits without a worker.
    Parked,
    /// The attempt ended without an outcome this worker could record: another worker took the
    /// node over, the attempt turned out stale, or its plan could not be stored (the node runs
    /// again after its lease).
    Lost,
    /// The worker shut down and handed the running node back to its queue.
    HandedBack,
}

impl NodeOutcome {
    /// The outcome of an attempt that settles with the tool's `outcome` (`None`: stopped for its
    /// task).
    pub fn of(outcome: Option<&ToolOutcome>) -> Self {
        match outcome {
            None => Self::Cancelled,
            Some(ToolOutcome::Result(result)) if crate::model::result::is_error(result) => Self::ToolError,
            Some(ToolOutcome::Result(_)) => Self::Completed,
            Some(ToolOutcome::Plan(_)) => Self::Planned,
            Some(ToolOutcome::InputRequired(_)) => Self::Parked,
            Some(ToolOutcome::Error(_)) => Self::Failed,
        }
    }

    /// The outcome's name: the `outcome` label, and a node span's `conveyor.node.outcome`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::ToolError => "tool_error",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Planned => "planned",
            Self::Parked => "parked",
            Self::Lost => "lost",
            Self::HandedBack => "handed_back",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodLabels {
    method: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    tool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SettledLabels {
    tool: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabels {
    queue: String,
    tool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeRunLabels {
    queue: String,
    tool: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    queue: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabels {
    op: Cow<'static, str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueShardLabels {
    queue: String,
    shard: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShardLabels {
    shard: String,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Buckets of an MCP request: a `tasks/get` takes a millisecond, a synchronous call as long as
/// its tool.
const REQUEST_BUCKETS: &[f64] =
    &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0];
/// Buckets of a node attempt: from a no-op to an hour of work.
const NODE_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
    3600.0,
];
/// Buckets of the time a node waits in its queue.
const WAIT_BUCKETS: &[f64] =
    &[0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0];
/// Buckets of the time a cancelled node takes to stop.
const STOP_BUCKETS: &[f64] = &[0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];
/// Buckets of one Redis round trip.
const REDIS_BUCKETS: &[f64] =
    &[0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];

fn request_histogram() -> Histogram {
    Histogram::new(REQUEST_BUCKETS.iter().copied())
}
fn node_histogram() -> Histogram {
    Histogram::new(NODE_BUCKETS.iter().copied())
}
fn wait_histogram() -> Histogram {
    Histogram::new(WAIT_BUCKETS.iter().copied())
}
fn redis_histogram() -> Histogram {
    Histogram::new(REDIS_BUCKETS.iter().copied())
}

struct Metrics {
    registry: Registry,
    mcp_requests: Family<RequestLabels, Counter>,
    mcp_duration: Histograms<MethodLabels>,
    tasks_created: Family<ToolLabels, Counter>,
    tasks_settled: Family<SettledLabels, Counter>,
    nodes_run: Family<NodeRunLabels, Counter>,
    node_retries: Family<ToolLabels, Counter>,
    node_reclaims: Family<QueueLabels, Counter>,
    dead_letters: Family<ToolLabels, Counter>,
    redis_errors: Family<OpLabels, Counter>,
    node_duration: Histograms<NodeLabels>,
    queue_wait: Histograms<QueueLabels>,
    cancel_stop: Histogram,
    redis_round_trip: Histograms<OpLabels>,
    nodes_running: Gauge,
}

impl Metrics {
    fn new() -> Self {
        let mut metrics = Self {
            registry: Registry::with_prefix("conveyor"),
            mcp_requests: Family::default(),
            mcp_duration: Family::new_with_constructor(request_histogram),
            tasks_created: Family::default(),
            tasks_settled: Family::default(),
            nodes_run: Family::default(),
            node_retries: Family::default(),
            node_reclaims: Family::default(),
            dead_letters: Family::default(),
            redis_errors: Family::default(),
            node_duration: Family::new_with_constructor(node_histogram),
            queue_wait: Family::new_with_constructor(wait_histogram),
            cancel_stop: Histogram::new(STOP_BUCKETS.iter().copied()),
            redis_round_trip: Family::new_with_constructor(redis_histogram),
            nodes_running: Gauge::default(),
        };
        let registry = &mut metrics.registry;
        registry.register(
            "mcp_requests",
            "MCP requests answered by this gateway, by JSON-RPC method and reply (ok, error, closed)",
            metrics.mcp_requests.clone(),
        );
        registry.register_with_unit(
            "mcp_request_duration",
            "Time from an MCP request's dispatch to its reply (the end of a synchronous call's wait)",
            Unit::Seconds,
            metrics.mcp_duration.clone(),
        );
        registry.register(
            "tasks_created",
            "Tasks this process created (synchronous calls' hidden tasks too; idempotent replays not)",
            metrics.tasks_created.clone(),
        );
        registry.register(
            "tasks_settled",
            "Tasks settled by a transition this process made, by the task's tool and final status",
            metrics.tasks_settled.clone(),
        );
        registry.register(
            "nodes_run",
            "Node attempts finished on this worker, by queue, tool and how they ended",
            metrics.nodes_run.clone(),
        );
        registry.register(
            "node_retries",
            "Failed node attempts this worker scheduled for another try",
            metrics.node_retries.clone(),
        );
        registry.register(
            "node_reclaims",
            "Nodes this worker's shard maintenance took over after their worker's lease ran out",
            metrics.node_reclaims.clone(),
        );
        registry.register(
            "dead_letters",
            "Nodes this process wrote to the dead-letter stream, by the node's tool",
            metrics.dead_letters.clone(),
        );
        registry.register(
            "redis_errors",
            "Redis round trips that failed (an error reply, a dropped connection, a timeout), by operation",
            metrics.redis_errors.clone(),
        );
        registry.register_with_unit(
            "node_duration",
            "Time a node attempt ran on this worker, from its start to its outcome",
            Unit::Seconds,
            metrics.node_duration.clone(),
        );
        registry.register_with_unit(
            "node_queue_wait",
            "Time a node waited in its queue, from its stream entry's creation to its start",
            Unit::Seconds,
            metrics.queue_wait.clone(),
        );
        registry.register_with_unit(
            "cancel_stop",
            "Time from a task's cancellation reaching this worker to its running node being stopped",
            Unit::Seconds,
            metrics.cancel_stop.clone(),
        );
        registry.register_with_unit(
            "redis_round_trip",
            "Time of one Redis round trip (each attempt of an operation), by script, command or pipeline",
            Unit::Seconds,
            metrics.redis_round_trip.clone(),
        );
        registry.register(
            "worker_nodes_running",
            "Node attempts running on this process's workers now",
            metrics.nodes_running.clone(),
        );
        metrics
    }
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// An MCP request being answered. [`McpRequest::finish`] records its reply; one dropped unfinished
/// (a reply stream that closed first) counts as [`McpOutcome::Closed`].
pub struct McpRequest {
    method: &'static str,
    started: Instant,
    finished: bool,
}

impl McpRequest {
    /// A request of `method`, which must come from a bounded set (the gateway's known methods).
    pub fn start(method: &'static str) -> Self {
        Self { method, started: Instant::now(), finished: false }
    }

    pub fn finish(mut self, outcome: McpOutcome) {
        self.record(outcome);
    }

    fn record(&mut self, outcome: McpOutcome) {
        if std::mem::replace(&mut self.finished, true) {
            return;
        }
        let m = &*METRICS;
        m.mcp_requests.get_or_create(&RequestLabels { method: self.method, outcome: outcome.as_str() }).inc();
        m.mcp_duration
            .get_or_create(&MethodLabels { method: self.method })
            .observe(self.started.elapsed().as_secs_f64());
    }
}

impl Drop for McpRequest {
    fn drop(&mut self) {
        self.record(McpOutcome::Closed);
    }
}

/// A task was created (`tool`: the called tool, `run_dag`, or the prompt or resource offer).
pub fn task_created(tool: &str) {
    METRICS.tasks_created.get_or_create(&ToolLabels { tool: tool.to_owned() }).inc();
}

/// A transition of this process settled a task with `status`.
pub fn task_settled(tool: &str, status: &str) {
    METRICS
        .tasks_settled
        .get_or_create(&SettledLabels { tool: tool.to_owned(), status: status.to_owned() })
        .inc();
}

/// A failed attempt of a node of `tool` was scheduled for another try.
pub fn node_retried(tool: &str) {
    METRICS.node_retries.get_or_create(&ToolLabels { tool: tool.to_owned() }).inc();
}

/// A node of `queue` was taken over from a worker whose lease ran out.
pub fn node_reclaimed(queue: &str) {
    METRICS.node_reclaims.get_or_create(&QueueLabels { queue: queue.to_owned() }).inc();
}

/// A node of `tool` was written to the dead-letter stream.
pub fn dead_lettered(tool: &str) {
    METRICS.dead_letters.get_or_create(&ToolLabels { tool: tool.to_owned() }).inc();
}

/// One Redis round trip of `op` (a script's name, a command's, or a pipeline's) took `took`.
pub fn redis_round_trip(op: &'static str, took: Duration, ok: bool) {
    redis_op(Cow::Borrowed(op), took, ok);
}

/// [`redis_round_trip`] for a command, named by its first argument.
pub fn redis_command(cmd: &redis::Cmd, took: Duration, ok: bool) {
    let name = match cmd.args_iter().next() {
        Some(redis::Arg::Simple(name)) => String::from_utf8_lossy(name).to_ascii_uppercase(),
        _ => "command".to_owned(),
    };
    redis_op(Cow::Owned(name), took, ok);
}

fn redis_op(op: Cow<'static, str>, took: Duration, ok: bool) {
    let labels = OpLabels { op };
    if !ok {
        METRICS.redis_errors.get_or_create(&labels).inc();
    }
    METRICS.redis_round_trip.get_or_create(&labels).observe(took.as_secs_f64());
}

/// The time a stream entry was added, from its id (`<ms>-<seq>`, as Redis makes them).
fn entry_time_ms(entry_id: &str) -> Option<u64> {
    entry_id.split_once('-')?.0.parse().ok()
}

/// One node attempt on this worker, from its start to its outcome; clones share it. It counts as
/// running until the last clone is dropped, and one that ends without a recorded outcome counts
/// as [`NodeOutcome::Lost`].
#[derive(Clone)]
pub struct NodeRun(Arc<NodeRunInner>);

struct NodeRunInner {
    queue: String,
    tool: String,
    started: Instant,
    stop_requested: OnceLock<Instant>,
    finished: AtomicBool,
}

impl NodeRun {
    /// An attempt of `tool` starts: it counts as running, and its wait in the queue (since its
    /// stream entry was added) is recorded.
    pub fn start(stream: &str, entry_id: &str, tool: &str) -> Self {
        let queue = crate::keys::queue_of_stream(stream).unwrap_or_default().to_owned();
        if let Some(enqueued) = entry_time_ms(entry_id) {
            let waited = Duration::from_millis(now_ms().saturating_sub(enqueued));
            METRICS
                .queue_wait
                .get_or_create(&QueueLabels { queue: queue.clone() })
                .observe(waited.as_secs_f64());
        }
        METRICS.nodes_running.inc();
        Self(Arc::new(NodeRunInner {
            queue,
            tool: tool.to_owned(),
            started: Instant::now(),
            stop_requested: OnceLock::new(),
            finished: AtomicBool::new(false),
        }))
    }

    /// The attempt was told to stop because its task ended; [`NodeOutcome::Cancelled`] then
    /// records how long stopping took.
    pub fn stop_requested(&self) {
        let _ = self.0.stop_requested.set(Instant::now());
    }

    /// Records how the attempt ended; only the first outcome counts.
    pub fn finish(&self, outcome: NodeOutcome) {
        self.0.finish(outcome);
    }
}

impl NodeRunInner {
    fn finish(&self, outcome: NodeOutcome) {
        if self.finished.swap(true, Ordering::SeqCst) {
            return;
        }
        let m = &*METRICS;
        let labels =
            NodeRunLabels { queue: self.queue.clone(), tool: self.tool.clone(), outcome: outcome.as_str() };
        m.nodes_run.get_or_create(&labels).inc();
        m.node_duration
            .get_or_create(&NodeLabels { queue: self.queue.clone(), tool: self.tool.clone() })
            .observe(self.started.elapsed().as_secs_f64());
        if let (NodeOutcome::Cancelled, Some(asked)) = (outcome, self.stop_requested.get()) {
            m.cancel_stop.observe(asked.elapsed().as_secs_f64());
        }
    }
}

impl Drop for NodeRunInner {
    fn drop(&mut self) {
        self.finish(NodeOutcome::Lost);
        METRICS.nodes_running.dec();
    }
}

/// One queue's stream in one shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueDepth {
    pub queue: String,
    pub shard: Shard,
    /// Entries in the stream (`XLEN`): waiting and running nodes, since acknowledged entries are
    /// deleted.
    pub entries: u64,
    /// Entries delivered to a worker of the `workers` group and not acknowledged yet.
    pub pending: u64,
    /// Entries the group has not delivered yet.
    pub lag: u64,
}

/// What a scrape reports of the deployment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterStats {
    /// Every known queue in every shard, by queue then shard.
    pub queues: Vec<QueueDepth>,
    /// Dead-letter entries per shard.
    pub dead_letters: Vec<(Shard, u64)>,
    /// Live workers per known queue (0 for a queue that the catalog knows and no live worker
    /// reads).
    pub workers_live: Vec<(String, u64)>,
}

/// The process's metrics as OpenMetrics text ([`CONTENT_TYPE`]).
pub fn render() -> String {
    render_scrape(None, None)
}

/// The process's metrics, with `conveyor_redis_up` when `redis_up` is given and the deployment's
/// gauges when `cluster` is.
pub fn render_scrape(redis_up: Option<bool>, cluster: Option<&ClusterStats>) -> String {
    let mut text = String::new();
    // Writing to a String cannot fail.
    let _ = encode_registry(&mut text, &METRICS.registry);
    if redis_up.is_some() || cluster.is_some() {
        let _ = encode_registry(&mut text, &scrape_registry(redis_up, cluster));
    }
    let _ = encode_eof(&mut text);
    text
}

fn scrape_registry(redis_up: Option<bool>, cluster: Option<&ClusterStats>) -> Registry {
    let mut registry = Registry::with_prefix("conveyor");
    if let Some(redis_up) = redis_up {
        let up = Gauge::<i64>::default();
        up.set(i64::from(redis_up));
        registry.register("redis_up", "Whether Redis answered this scrape (1) or not within 2 s (0)", up);
    }
    let Some(stats) = cluster else { return registry };
    let entries = Family::<QueueShardLabels, Gauge>::default();
    let pending = Family::<QueueShardLabels, Gauge>::default();
    let lag = Family::<QueueShardLabels, Gauge>::default();
    for depth in &stats.queues {
        let labels = QueueShardLabels { queue: depth.queue.clone(), shard: depth.shard.to_string() };
        entries.get_or_create(&labels).set(gauge_value(depth.entries));
        pending.get_or_create(&labels).set(gauge_value(depth.pending));
        lag.get_or_create(&labels).set(gauge_value(depth.lag));
    }
    let workers = Family::<QueueLabels, Gauge>::default();
    for (queue, live) in &stats.workers_live {
        workers.get_or_create(&QueueLabels { queue: queue.clone() }).set(gauge_value(*live));
    }
    let dead = Family::<ShardLabels, Gauge>::default();
    for (shard, count) in &stats.dead_letters {
        dead.get_or_create(&ShardLabels { shard: shard.to_string() }).set(gauge_value(*count));
    }
    registry.register(
        "queue_stream_entries",
        "Entries in a queue's stream in a shard (XLEN): nodes waiting or running",
        entries,
    );
    registry.register(
        "queue_pending_entries",
        "Entries of a queue's stream delivered to a worker and not acknowledged (running or being started)",
        pending,
    );
    registry.register(
        "queue_consumer_lag",
        "Entries of a queue's stream not yet delivered to any worker (waiting)",
        lag,
    );
    registry.register("workers_live", "Live workers (heartbeat in the last 15 s) that read a queue", workers);
    registry.register("dead_letter_stream_entries", "Entries in a shard's dead-letter stream", dead);
    registry
}

fn gauge_value(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The samples of an exposition, as (series, value) pairs.
    fn samples(text: &str) -> Vec<(String, f64)> {
        text.lines()
            .filter(|line| !line.starts_with('#') && !line.is_empty())
            .filter_map(|line| {
                let (series, value) = line.rsplit_once(' ')?;
                Some((series.to_owned(), value.parse().ok()?))
            })
            .collect()
    }

    fn value(text: &str, series: &str) -> Option<f64> {
        samples(text).into_iter().find(|(s, _)| s == series).map(|(_, v)| v)
    }

    #[test]
    fn the_text_is_openmetrics_with_every_family_named_by_convention() {
        // A family shows once it has a series.
        McpRequest::start("test/families").finish(McpOutcome::Ok);
        task_created("metrics_families");
        task_settled("metrics_families", "completed");
        node_retried("metrics_families");
        node_reclaimed("metrics_families");
        dead_lettered("metrics_families");
        redis_round_trip("metrics_families", Duration::from_millis(1), false);
        NodeRun::start(&Shard(0).queue("metrics_families"), "1-0", "metrics_families")
            .finish(NodeOutcome::Completed);
        let text = render();
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert_eq!(text.matches("# EOF").count(), 1);
        for family in [
            "# TYPE conveyor_mcp_requests counter",
            "# TYPE conveyor_mcp_request_duration_seconds histogram",
            "# UNIT conveyor_mcp_request_duration_seconds seconds",
            "# TYPE conveyor_tasks_created counter",
            "# TYPE conveyor_tasks_settled counter",
            "# TYPE conveyor_nodes_run counter",
            "# TYPE conveyor_node_retries counter",
            "# TYPE conveyor_node_reclaims counter",
            "# TYPE conveyor_dead_letters counter",
            "# TYPE conveyor_redis_errors counter",
            "# TYPE conveyor_node_duration_seconds histogram",
            "# TYPE conveyor_node_queue_wait_seconds histogram",
            "# TYPE conveyor_cancel_stop_seconds histogram",
            "# TYPE conveyor_redis_round_trip_seconds histogram",
            "# TYPE conveyor_worker_nodes_running gauge",
        ] {
            assert!(text.contains(family), "{family} missing from:\n{text}");
        }
        assert!(!text.contains("conveyor_redis_up"), "the process's own text reads nothing from Redis");
    }

    #[test]
    fn a_request_counts_once_with_its_method_and_reply() {
        McpRequest::start("test/ok").finish(McpOutcome::Ok);
        McpRequest::start("test/ok").finish(McpOutcome::Error);
        drop(McpRequest::start("test/closed"));
        let text = render();
        let count = |series: &str| value(&text, series).unwrap_or_else(|| panic!("{series} in\n{text}"));
        assert_eq!(count(r#"conveyor_mcp_requests_total{method="test/ok",outcome="ok"}"#), 1.0);
        assert_eq!(count(r#"conveyor_mcp_requests_total{method="test/ok",outcome="error"}"#), 1.0);
        assert_eq!(count(r#"conveyor_mcp_requests_total{method="test/closed",outcome="closed"}"#), 1.0);
        assert_eq!(count(r#"conveyor_mcp_request_duration_seconds_count{method="test/ok"}"#), 2.0);
        assert_eq!(count(r#"conveyor_mcp_request_duration_seconds_bucket{le="+Inf",method="test/ok"}"#), 2.0);
    }

    #[test]
    fn a_node_run_records_its_queue_its_outcome_once_and_its_stop() {
        let stream = Shard(3).queue("metrics_unit_queue");
        let enqueued = now_ms().saturating_sub(1500);
        let run = NodeRun::start(&stream, &format!("{enqueued}-0"), "metrics_unit_tool");
        let shared = run.clone();
        shared.stop_requested();
        run.finish(NodeOutcome::Cancelled);
        shared.finish(NodeOutcome::Completed);
        drop((run, shared));
        // Dropped without an outcome: lost.
        drop(NodeRun::start(&stream, "not-an-id", "metrics_unit_lost"));
        let text = render();
        let count = |series: &str| value(&text, series).unwrap_or_else(|| panic!("{series} in\n{text}"));
        let node = r#"queue="metrics_unit_queue",tool="metrics_unit_tool""#;
        assert_eq!(count(&format!("conveyor_nodes_run_total{{{node},outcome=\"cancelled\"}}")), 1.0);
        assert_eq!(value(&text, &format!("conveyor_nodes_run_total{{{node},outcome=\"completed\"}}")), None);
        assert_eq!(count(&format!("conveyor_node_duration_seconds_count{{{node}}}")), 1.0);
        assert_eq!(
            count(
                r#"conveyor_nodes_run_total{queue="metrics_unit_queue",tool="metrics_unit_lost",outcome="lost"}"#
            ),
            1.0
        );
        assert_eq!(count(r#"conveyor_node_queue_wait_seconds_count{queue="metrics_unit_queue"}"#), 1.0);
        let waited = count(r#"conveyor_node_queue_wait_seconds_sum{queue="metrics_unit_queue"}"#);
        assert!(waited >= 1.5, "the wait counts from the entry's time: {waited}");
        assert!(count("conveyor_cancel_stop_seconds_count") >= 1.0);
    }

    #[test]
    fn redis_operations_are_named_by_script_or_command() {
        redis_round_trip("metrics_unit_script", Duration::from_millis(2), true);
        redis_command(redis::cmd("hgetall").arg("k"), Duration::from_millis(1), false);
        let text = render();
        let count = |series: &str| value(&text, series).unwrap_or_else(|| panic!("{series} in\n{text}"));
        assert_eq!(count(r#"conveyor_redis_round_trip_seconds_count{op="metrics_unit_script"}"#), 1.0);
        assert!(count(r#"conveyor_redis_round_trip_seconds_count{op="HGETALL"}"#) >= 1.0);
        assert!(count(r#"conveyor_redis_errors_total{op="HGETALL"}"#) >= 1.0);
        assert_eq!(value(&text, r#"conveyor_redis_errors_total{op="metrics_unit_script"}"#), None);
    }

    #[test]
    fn deployment_gauges_carry_queue_and_shard_and_say_whether_redis_answered() {
        let stats = ClusterStats {
            queues: vec![
                QueueDepth { queue: "greet".into(), shard: Shard(0), entries: 3, pending: 1, lag: 2 },
                QueueDepth { queue: "greet".into(), shard: Shard(1), entries: 0, pending: 0, lag: 0 },
            ],
            dead_letters: vec![(Shard(0), 4), (Shard(1), 0)],
            workers_live: vec![("greet".into(), 2), ("idle".into(), 0)],
        };
        let text = render_scrape(Some(true), Some(&stats));
        assert!(text.ends_with("# EOF\n") && text.matches("# EOF").count() == 1, "{text}");
        let count = |series: &str| value(&text, series).unwrap_or_else(|| panic!("{series} in\n{text}"));
        assert_eq!(count("conveyor_redis_up"), 1.0);
        assert_eq!(count(r#"conveyor_queue_stream_entries{queue="greet",shard="0"}"#), 3.0);
        assert_eq!(count(r#"conveyor_queue_pending_entries{queue="greet",shard="0"}"#), 1.0);
        assert_eq!(count(r#"conveyor_queue_consumer_lag{queue="greet",shard="0"}"#), 2.0);
        assert_eq!(count(r#"conveyor_queue_stream_entries{queue="greet",shard="1"}"#), 0.0);
        assert_eq!(count(r#"conveyor_workers_live{queue="greet"}"#), 2.0);
        assert_eq!(count(r#"conveyor_workers_live{queue="idle"}"#), 0.0);
        assert_eq!(count(r#"conveyor_dead_letter_stream_entries{shard="0"}"#), 4.0);

        let down = render_scrape(Some(false), None);
        assert_eq!(value(&down, "conveyor_redis_up"), Some(0.0));
        assert!(!down.contains("conveyor_queue_stream_entries{"), "{down}");
        assert!(
            down.contains("# TYPE conveyor_mcp_requests counter"),
            "the process's metrics are still there"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        task_created("a \"quoted\"\\tool");
        let text = render();
        assert!(text.contains(r#"conveyor_tasks_created_total{tool="a \"quoted\"\\tool"} 1"#), "{text}");
    }

    #[test]
    fn a_tool_outcome_names_the_node_outcome() {
        use crate::model::{RpcError, result};
        assert_eq!(NodeOutcome::of(None), NodeOutcome::Cancelled);
        assert_eq!(NodeOutcome::of(Some(&ToolOutcome::Result(result::text("ok")))), NodeOutcome::Completed);
        assert_eq!(
            NodeOutcome::of(Some(&ToolOutcome::Result(result::error_text("no")))),
            NodeOutcome::ToolError
        );
        let error = RpcError { code: -32603, message: "boom".into(), data: None };
        assert_eq!(NodeOutcome::of(Some(&ToolOutcome::Error(error))), NodeOutcome::Failed);
    }

    #[test]
    fn an_entry_id_holds_its_time() {
        assert_eq!(entry_time_ms("1700000000123-4"), Some(1_700_000_000_123));
        assert_eq!(entry_time_ms("0-1"), Some(0));
        assert_eq!(entry_time_ms("x-1"), None);
        assert_eq!(entry_time_ms("17"), None);
    }
}
