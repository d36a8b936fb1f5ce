//! Prometheus metrics end to end: a known workload through a real gateway and a real worker, then
//! every counter of both processes' `/metrics` checked against it, and the deployment's gauges
//! against Redis; a node taken over from a killed worker counted by the worker that took it.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use conveyor_tests::{Conveyor, Mcp, RedisServer};
use serde_json::{Value, json};

/// One sample of an exposition: its name, labels and value.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A scraped exposition.
#[derive(Debug)]
struct Exposition {
    samples: Vec<Sample>,
    text: String,
}

impl Exposition {
    /// Parses OpenMetrics text: comments, then `name{label="value",...} value` lines, with `\\`,
    /// `\"` and `\n` escaped in label values.
    fn parse(text: &str) -> Self {
        assert!(text.ends_with("# EOF\n"), "an OpenMetrics exposition ends with # EOF:\n{text}");
        let mut samples = Vec::new();
        for line in text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')) {
            let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("a sample line: {line}"));
            let value: f64 = match value {
                "+Inf" => f64::INFINITY,
                v => v.parse().unwrap_or_else(|_| panic!("a sample value: {line}")),
            };
            let (name, labels) = match series.split_once('{') {
                None => (series.to_owned(), BTreeMap::new()),
                Some((name, rest)) => {
                    let body = rest.strip_suffix('}').unwrap_or_else(|| panic!("closed labels: {line}"));
                    (name.to_owned(), parse_labels(body, line))
                }
            };
            samples.push(Sample { name, labels, value });
        }
        Self { samples, text: text.to_owned() }
    }

    fn matching<'a>(&'a self, name: &'a str, labels: &'a [(&str, &str)]) -> impl Iterator<Item = &'a Sample> {
        self.samples.iter().filter(move |s| {
            s.name == name && labels.iter().all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
    }

    /// The value of the one series of `name` whose labels include `labels`; `None` when there is
    /// none.
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let found: Vec<&Sample> = self.matching(name, labels).collect();
        assert!(found.len() <= 1, "{name} {labels:?} names several series: {found:?}");
        found.first().map(|s| s.value)
    }

    /// The sum over every series of `name` whose labels include `labels` (0 when there is none).
    fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.matching(name, labels).map(|s| s.value).sum()
    }

    /// Every series of `name`, as its label values in `keys` order with its value.
    fn series(&self, name: &str, keys: &[&str]) -> BTreeMap<Vec<String>, f64> {
        self.samples
            .iter()
            .filter(|s| s.name == name)
            .map(|s| (keys.iter().map(|k| s.labels.get(*k).cloned().unwrap_or_default()).collect(), s.value))
            .collect()
    }
}

fn parse_labels(body: &str, line: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut chars = body.chars().peekable();
    while chars.peek().is_some() {
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        assert_eq!(chars.next(), Some('"'), "a quoted label value: {line}");
        let mut value = String::new();
        loop {
            match chars.next() {
                Some('\\') => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(c) => value.push(c),
                    None => panic!("an escape at the end: {line}"),
                },
                Some('"') => break,
                Some(c) => value.push(c),
                None => panic!("an unterminated label value: {line}"),
            }
        }
        labels.insert(key, value);
        if chars.peek() == Some(&',') {
            chars.next();
        }
    }
    labels
}

async fn scrape(base: &str) -> Exposition {
    let response = reqwest::get(format!("{base}/metrics")).await.expect("GET /metrics");
    assert_eq!(response.status().as_u16(), 200);
    let content_type =
        response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    assert!(content_type.starts_with("application/openmetrics-text; version=1.0.0"), "{content_type}");
    Exposition::parse(&response.text().await.expect("a body"))
}

/// Starts a worker with its metrics listener and waits until the listener answers.
async fn worker_with_metrics(redis_url: &str, extra: &[&str]) -> (Conveyor, String) {
    with_metrics("worker", redis_url, &[&["--fixtures"], extra].concat()).await
}

/// Starts `conveyor <command>` with a metrics listener (`--metrics-listen`) and waits until the
/// listener answers; the listener's base URL. A gateway serves `/metrics` there only.
async fn with_metrics(command: &str, redis_url: &str, extra: &[&str]) -> (Conveyor, String) {
    // On a port the kernel picks as the process binds it; the process logs where.
    let mut args = vec!["--metrics-listen", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let worker = match command {
        "worker" => Conveyor::worker(redis_url, &args),
        "gateway" => Conveyor::gateway(redis_url, &args),
        _ => Conveyor::up(redis_url, &args),
    }
    .expect("conveyor");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(base) = worker.metrics_base()
            && let Ok(r) = reqwest::get(format!("{base}/healthz")).await
            && r.status().as_u16() == 200
        {
            assert_eq!(r.text().await.expect("a body"), "ok");
            return (worker, base);
        }
        assert!(Instant::now() < deadline, "the metrics listener never answered:\n{}", worker.log_text());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A client that remembers every request it sent and whether its reply was a JSON-RPC error.
struct Counted {
    mcp: Mcp,
    sent: BTreeMap<(String, String), u64>,
}

impl Counted {
    fn count(&mut self, method: &str, reply: &conveyor_tests::mcp::Reply) {
        let outcome = if reply.message.get("error").is_some() { "error" } else { "ok" };
        *self.sent.entry((method.to_owned(), outcome.to_owned())).or_default() += 1;
    }

    async fn call(&mut self, method: &str, params: Value) -> conveyor_tests::mcp::Reply {
        let reply = self.mcp.call_2025(method, params).await.unwrap_or_else(|e| panic!("{method}: {e}"));
        self.count(method, &reply);
        reply
    }

    async fn task(&mut self, tool: &str, arguments: Value, ttl_ms: u64) -> String {
        let reply = self
            .call("tools/call", json!({"name": tool, "arguments": arguments, "task": {"ttl": ttl_ms}}))
            .await;
        reply.result()["task"]["taskId"]
            .as_str()
            .unwrap_or_else(|| panic!("{tool}: {}", reply.raw))
            .to_owned()
    }

    async fn wait_for_tools(&mut self, tools: &[&str]) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let reply = self.call("tools/list", json!({})).await;
            let listed: HashSet<&str> = reply.result()["tools"]
                .as_array()
                .map(|t| t.iter().filter_map(|t| t["name"].as_str()).collect())
                .unwrap_or_default();
            if tools.iter().all(|t| listed.contains(t)) {
                return;
            }
            assert!(Instant::now() < deadline, "tools never listed: {}", reply.raw);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Scrapes `base` until `done` holds of it, or fails after 30 s.
async fn scrape_until(base: &str, what: &str, done: impl Fn(&Exposition) -> bool) -> Exposition {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let exposition = scrape(base).await;
        if done(&exposition) {
            return exposition;
        }
        assert!(Instant::now() < deadline, "never {what}:\n{}", exposition.text);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

#[tokio::test]
async fn every_counter_matches_a_known_workload() {
    let mut metered = Metered::start().await;
    let workload = run_the_known_workload(&mut metered).await;
    cancel_a_task_while_its_tool_runs(&mut metered, &workload).await;
    send_requests_the_gateway_refuses(&mut metered).await;
    let (worker, gateway_metrics) = scrape_both_once_every_node_has_ended(&mut metered, &workload).await;
    let expected_nodes = every_node_attempt_is_counted_by_queue_tool_and_outcome(&worker, &gateway_metrics);
    each_attempt_its_queue_wait_and_each_stop_are_timed_once(&worker, &expected_nodes);
    retries_and_dead_letters_are_counted_by_the_worker_alone(&worker, &gateway_metrics);
    tasks_are_counted_created_by_the_gateway_and_settled_where_they_settled(&worker, &gateway_metrics);
    every_mcp_request_is_counted_by_method_and_reply(&metered.client, &worker, &gateway_metrics);
    every_redis_operation_is_timed_and_none_failed(&worker, &gateway_metrics);
    the_deployment_gauges_on_the_gateway_match_redis(&metered.redis, &worker, &gateway_metrics, &workload);
}

/// A gateway and a worker with the fixtures, each with its metrics listener, and a client that
/// counts its requests.
struct Metered {
    client: Counted,
    _worker: Conveyor,
    worker_base: String,
    gateway: Conveyor,
    gateway_base: String,
    redis: RedisServer,
}

impl Metered {
    /// Starts the processes and waits until the gateway lists the workload's tools.
    async fn start() -> Self {
        let redis = RedisServer::start().expect("redis");
        // Four shards: the gauges are read shard by shard.
        let (gateway, gateway_base) = with_metrics("gateway", &redis.url(), &["--shards", "4"]).await;
        let (_worker, worker_base) = worker_with_metrics(&redis.url(), &["--shards", "4"]).await;
        let mut client = Counted { mcp: Mcp::new(gateway.mcp_url()), sent: BTreeMap::new() };
        client
            .wait_for_tools(&[
                "slow_compute",
                "failing_job",
                "protocol_error_job",
                "greet",
                "flaky",
                "plan_fanout",
            ])
            .await;
        Self { client, _worker, worker_base, gateway, gateway_base, redis }
    }
}

/// The tasks of the workload that later phases look at again.
struct Workload {
    /// Tasks that run to their end, in the order created (the protocol error's is the sixth).
    settle: Vec<String>,
    /// A long task, cancelled while it runs.
    cancelled: String,
    /// A long task whose TTL runs out while it runs.
    expiring: String,
}

/// The workload: tasks that complete, fail with a tool error or a protocol error, a graph with a
/// retried node, a fan-out, a synchronous call, and two long tasks to stop; every task that runs
/// to its end is awaited.
async fn run_the_known_workload(metered: &mut Metered) -> Workload {
    let client = &mut metered.client;
    let mut settle = Vec::new();
    for i in 0..3 {
        settle.push(
            client.task("slow_compute", json!({"seconds": 0, "label": format!("s{i}")}), 600_000).await,
        );
    }
    for _ in 0..2 {
        settle.push(client.task("failing_job", json!({}), 600_000).await);
    }
    settle.push(client.task("protocol_error_job", json!({}), 600_000).await);
    let graph = json!({
        "nodes": [
            {"id": "a", "tool": "flaky", "arguments": {"failures": 1}, "retries": 1, "backoffMs": 50},
            {"id": "b", "tool": "greet", "arguments": {"name": "graph"}, "dependsOn": ["a"]}
        ],
        "output": "b"
    });
    settle.push(client.task("run_dag", graph, 600_000).await);
    settle.push(client.task("plan_fanout", json!({"width": 2, "seconds": 0}), 600_000).await);
    let greeting = client.call("tools/call", json!({"name": "greet", "arguments": {"name": "Ada"}})).await;
    assert_eq!(greeting.result()["content"][0]["text"], "Hello, Ada!", "{}", greeting.raw);
    let cancelled = client.task("slow_compute", json!({"seconds": 60, "label": "cancelled"}), 600_000).await;
    // Its TTL runs out while it runs: the worker's maintenance expires it and its node stops.
    let expiring = client.task("slow_compute", json!({"seconds": 60, "label": "expiring"}), 4_000).await;
    metered
        .redis
        .wait_node_status(&expiring, "root", "running", Duration::from_secs(4))
        .await
        .expect("running");
    for task in &settle {
        client.call("tasks/result", json!({"taskId": task})).await;
    }
    Workload { settle, cancelled, expiring }
}

/// The long task is cancelled once its tool reports progress: it runs on the worker then, not
/// only in Redis.
async fn cancel_a_task_while_its_tool_runs(metered: &mut Metered, workload: &Workload) {
    let cancelled = &workload.cancelled;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut conn = metered.redis.connection().expect("redis");
    while redis::cmd("HGET")
        .arg(conveyor_tests::process::task_key(cancelled))
        .arg("progress")
        .query::<Option<String>>(&mut conn)
        .expect("HGET")
        .is_none()
    {
        assert!(Instant::now() < deadline, "the task to cancel never reported progress");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cancel = metered.client.call("tasks/cancel", json!({"taskId": cancelled})).await;
    assert_eq!(cancel.result()["status"], "cancelled", "{}", cancel.raw);
}

/// A request the gateway refuses, one of a method it does not know, and one for no task.
async fn send_requests_the_gateway_refuses(metered: &mut Metered) {
    let client = &mut metered.client;
    client.call("tasks/get", json!({"taskId": "0000ffffffffffffffffffffffffffff"})).await;
    client.call("x/unknown", json!({})).await;
    let refused = json!({"jsonrpc": "2.0", "id": 99, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "conveyor-tests", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }}});
    let headers = [("mcp-protocol-version", "2026-07-28"), ("mcp-method", "tools/call")];
    let reply = client.mcp.post_raw(&headers, refused.to_string()).await.expect("a refused request");
    assert_eq!(reply.error_code(), Some(-32020), "the Mcp-Method header disagrees: {}", reply.raw);
    client.count("tools/list", &reply);
}

/// Scrapes the worker once it has seen every node attempt and settled every task it settles,
/// both stopped nodes (the cancelled task's and the expired one's) included, then the gateway's
/// metrics listener; the expired task is gone, and the public listener serves no metrics. Returns
/// the worker's exposition and the gateway's.
async fn scrape_both_once_every_node_has_ended(
    metered: &mut Metered,
    workload: &Workload,
) -> (Exposition, Exposition) {
    let worker = scrape_until(&metered.worker_base, "saw every node end", |m| {
        m.sum("conveyor_nodes_run_total", &[]) >= 16.0
            && m.sum("conveyor_tasks_settled_total", &[]) >= 10.0
            && m.get("conveyor_worker_nodes_running", &[]) == Some(0.0)
            && m.get("conveyor_tasks_settled_total", &[("tool", "slow_compute"), ("status", "expired")])
                .is_some()
    })
    .await;
    let gone = metered.client.call("tasks/get", json!({"taskId": workload.expiring})).await;
    assert!(gone.error_code().is_some(), "the expired task is gone: {}", gone.raw);
    let gateway_metrics = scrape(&metered.gateway_base).await;
    let public = reqwest::get(format!("{}/metrics", metered.gateway.base)).await.expect("GET /metrics");
    assert_eq!(public.status().as_u16(), 404, "the public listener serves no metrics");
    (worker, gateway_metrics)
}

/// The worker counts every node attempt of the workload by queue, tool and outcome; the gateway
/// runs none. Returns the counts expected.
fn every_node_attempt_is_counted_by_queue_tool_and_outcome(
    worker: &Exposition,
    gateway_metrics: &Exposition,
) -> BTreeMap<Vec<String>, f64> {
    let nodes = worker.series("conveyor_nodes_run_total", &["queue", "tool", "outcome"]);
    let expected_nodes: BTreeMap<Vec<String>, f64> = [
        (["slow_compute", "slow_compute", "completed"], 5.0),
        (["slow_compute", "slow_compute", "cancelled"], 2.0),
        (["failing_job", "failing_job", "tool_error"], 2.0),
        (["protocol_error_job", "protocol_error_job", "failed"], 1.0),
        (["greet", "greet", "completed"], 2.0),
        (["flaky", "flaky", "tool_error"], 1.0),
        (["flaky", "flaky", "completed"], 1.0),
        (["plan_fanout", "plan_fanout", "planned"], 1.0),
        (["$builtin", "$collect", "completed"], 1.0),
    ]
    .into_iter()
    .map(|(labels, n)| (strings(&labels), n))
    .collect();
    assert_eq!(nodes, expected_nodes, "node attempts by queue, tool and outcome");
    assert!(gateway_metrics.series("conveyor_nodes_run_total", &[]).is_empty(), "a gateway runs no node");
    expected_nodes
}

/// Each attempt is timed once, and its wait in its queue once; each stopped node's stop once.
fn each_attempt_its_queue_wait_and_each_stop_are_timed_once(
    worker: &Exposition,
    expected_nodes: &BTreeMap<Vec<String>, f64>,
) {
    let mut per_node: BTreeMap<Vec<String>, f64> = BTreeMap::new();
    let mut per_queue: BTreeMap<Vec<String>, f64> = BTreeMap::new();
    for (labels, n) in expected_nodes {
        *per_node.entry(labels[..2].to_vec()).or_default() += n;
        *per_queue.entry(labels[..1].to_vec()).or_default() += n;
    }
    assert_eq!(worker.series("conveyor_node_duration_seconds_count", &["queue", "tool"]), per_node);
    assert_eq!(worker.series("conveyor_node_queue_wait_seconds_count", &["queue"]), per_queue);
    for (labels, n) in &per_node {
        let labels = [("queue", labels[0].as_str()), ("tool", labels[1].as_str()), ("le", "+Inf")];
        assert_eq!(worker.get("conveyor_node_duration_seconds_bucket", &labels), Some(*n));
    }
    assert_eq!(
        worker.get("conveyor_cancel_stop_seconds_count", &[]),
        Some(2.0),
        "the cancelled and the expired node"
    );
    assert_eq!(worker.get("conveyor_worker_nodes_running", &[]), Some(0.0));
}

/// Retries and dead letters: the flaky node's first attempt, the protocol error's only one, both
/// counted by the worker; nothing was reclaimed, no worker being lost.
fn retries_and_dead_letters_are_counted_by_the_worker_alone(
    worker: &Exposition,
    gateway_metrics: &Exposition,
) {
    assert_eq!(worker.series("conveyor_node_retries_total", &["tool"]), [(strings(&["flaky"]), 1.0)].into());
    assert_eq!(
        worker.series("conveyor_dead_letters_total", &["tool"]),
        [(strings(&["protocol_error_job"]), 1.0)].into()
    );
    assert!(gateway_metrics.series("conveyor_dead_letters_total", &[]).is_empty());
    assert!(worker.series("conveyor_node_reclaims_total", &[]).is_empty(), "no worker was lost");
}

/// Tasks: created by the gateway, settled by whichever process settled them.
fn tasks_are_counted_created_by_the_gateway_and_settled_where_they_settled(
    worker: &Exposition,
    gateway_metrics: &Exposition,
) {
    let created: BTreeMap<Vec<String>, f64> = [
        ("slow_compute", 5.0),
        ("failing_job", 2.0),
        ("protocol_error_job", 1.0),
        ("run_dag", 1.0),
        ("greet", 1.0),
        ("plan_fanout", 1.0),
    ]
    .into_iter()
    .map(|(tool, n)| (strings(&[tool]), n))
    .collect();
    assert_eq!(gateway_metrics.series("conveyor_tasks_created_total", &["tool"]), created);
    assert!(worker.series("conveyor_tasks_created_total", &[]).is_empty());
    assert_eq!(
        gateway_metrics.series("conveyor_tasks_settled_total", &["tool", "status"]),
        [(strings(&["slow_compute", "cancelled"]), 1.0)].into(),
        "the gateway settled the task it cancelled"
    );
    let settled: BTreeMap<Vec<String>, f64> = [
        (["slow_compute", "completed"], 3.0),
        (["slow_compute", "expired"], 1.0),
        (["failing_job", "failed"], 2.0),
        (["protocol_error_job", "failed"], 1.0),
        (["run_dag", "completed"], 1.0),
        (["greet", "completed"], 1.0),
        (["plan_fanout", "completed"], 1.0),
    ]
    .into_iter()
    .map(|(labels, n)| (strings(&labels), n))
    .collect();
    assert_eq!(worker.series("conveyor_tasks_settled_total", &["tool", "status"]), settled);
}

/// MCP requests, by method and reply, each timed once, as the client sent them; a worker serves
/// no MCP.
fn every_mcp_request_is_counted_by_method_and_reply(
    client: &Counted,
    worker: &Exposition,
    gateway_metrics: &Exposition,
) {
    let requests: BTreeMap<Vec<String>, f64> = client
        .sent
        .iter()
        .map(|((method, outcome), n)| {
            let method = if method == "x/unknown" { "other" } else { method.as_str() };
            (strings(&[method, outcome]), *n as f64)
        })
        .collect();
    assert!(requests.contains_key(&strings(&["tasks/result", "error"])), "{requests:?}");
    assert!(requests.contains_key(&strings(&["other", "error"])), "{requests:?}");
    assert_eq!(gateway_metrics.series("conveyor_mcp_requests_total", &["method", "outcome"]), requests);
    let mut per_method: BTreeMap<Vec<String>, f64> = BTreeMap::new();
    for (labels, n) in &requests {
        *per_method.entry(labels[..1].to_vec()).or_default() += n;
    }
    assert_eq!(
        gateway_metrics.series("conveyor_mcp_request_duration_seconds_count", &["method"]),
        per_method
    );
    assert!(worker.series("conveyor_mcp_requests_total", &[]).is_empty(), "a worker serves no MCP");
}

/// Redis: every operation timed, none failed.
fn every_redis_operation_is_timed_and_none_failed(worker: &Exposition, gateway_metrics: &Exposition) {
    // (A read of one task's status goes with Redis's clock in one pipeline: no plain HMGET.)
    for op in ["create_task", "cancel_task", "watch_task", "pipeline"] {
        let n = gateway_metrics.get("conveyor_redis_round_trip_seconds_count", &[("op", op)]);
        assert!(n.is_some_and(|n| n > 0.0), "gateway op {op}: {n:?}");
    }
    for op in ["start_nodes", "complete_node", "settle_dag", "expire_task", "maintain", "heartbeat", "XGROUP"]
    {
        let n = worker.get("conveyor_redis_round_trip_seconds_count", &[("op", op)]);
        assert!(n.is_some_and(|n| n > 0.0), "worker op {op}: {n:?}");
    }
    assert_eq!(gateway_metrics.sum("conveyor_redis_errors_total", &[]), 0.0, "{}", gateway_metrics.text);
    assert_eq!(worker.sum("conveyor_redis_errors_total", &[]), 0.0, "{}", worker.text);
}

/// The deployment's gauges, on the gateway only: every queue the worker reads, in every shard,
/// empty now; one live worker per queue; the dead letter in its task's shard.
fn the_deployment_gauges_on_the_gateway_match_redis(
    redis: &RedisServer,
    worker: &Exposition,
    gateway_metrics: &Exposition,
    workload: &Workload,
) {
    assert_eq!(gateway_metrics.get("conveyor_redis_up", &[]), Some(1.0));
    assert_eq!(worker.get("conveyor_redis_up", &[]), Some(1.0), "a worker says whether it reaches Redis");
    assert!(worker.series("conveyor_queue_stream_entries", &[]).is_empty(), "and reads no deployment gauge");
    let mut conn = redis.connection().expect("redis");
    let records: BTreeMap<String, String> = redis::cmd("HGETALL")
        .arg(conveyor_shared::keys::WORKERS)
        .query(&mut conn)
        .expect("the worker catalog");
    assert_eq!(records.len(), 1, "{records:?}");
    let record: Value = serde_json::from_str(records.values().next().expect("one worker")).expect("json");
    let queues: Vec<&str> =
        record["queues"].as_array().expect("queues").iter().filter_map(Value::as_str).collect();
    for queue in ["slow_compute", "flaky", "$builtin"] {
        assert!(queues.contains(&queue), "{queue} in {queues:?}");
    }
    // Nothing waits; what the streams still hold (the expired task's stopped node, whose entry
    // waits for its lease to run out) is what Redis says.
    for queue in &queues {
        assert_eq!(gateway_metrics.get("conveyor_workers_live", &[("queue", queue)]), Some(1.0), "{queue}");
        for shard in 0..4u16 {
            let stream = conveyor_shared::keys::Shard(shard).queue(queue);
            let entries: u64 = redis::cmd("XLEN").arg(&stream).query(&mut conn).expect("XLEN");
            let (pending, ..): (u64, Option<String>, Option<String>, redis::Value) =
                redis::cmd("XPENDING").arg(&stream).arg("workers").query(&mut conn).expect("XPENDING");
            let shard = shard.to_string();
            let labels = [("queue", *queue), ("shard", shard.as_str())];
            let gauge = |name: &str| gateway_metrics.get(name, &labels);
            assert_eq!(gauge("conveyor_queue_stream_entries"), Some(entries as f64), "{labels:?}");
            assert_eq!(gauge("conveyor_queue_pending_entries"), Some(pending as f64), "{labels:?}");
            assert_eq!(gauge("conveyor_queue_consumer_lag"), Some(0.0), "{labels:?}");
        }
    }
    assert!(gateway_metrics.sum("conveyor_queue_stream_entries", &[]) <= 1.0, "{}", gateway_metrics.text);
    let dead_shard = conveyor_tests::process::shard_of(&workload.settle[5]).to_string();
    for shard in ["0", "1", "2", "3"] {
        let expected = if shard == dead_shard { 1.0 } else { 0.0 };
        assert_eq!(
            gateway_metrics.get("conveyor_dead_letter_stream_entries", &[("shard", shard)]),
            Some(expected),
            "shard {shard}"
        );
    }
}

#[tokio::test]
async fn the_gauges_follow_the_queues_and_redis() {
    let redis = RedisServer::start().expect("redis");
    let (gateway, gateway_base) = with_metrics("gateway", &redis.url(), &["--shards", "2"]).await;
    // One slot: while its node runs, the worker reads nothing more.
    let (_worker, worker_base) =
        worker_with_metrics(&redis.url(), &["--shards", "2", "--concurrency", "1"]).await;
    let mut client = Counted { mcp: Mcp::new(gateway.mcp_url()), sent: BTreeMap::new() };
    client.wait_for_tools(&["slow_compute"]).await;
    assert_eq!(reqwest::get(format!("{worker_base}/readyz")).await.expect("readyz").status().as_u16(), 200);

    // One node running, two waiting behind it.
    let running = client.task("slow_compute", json!({"seconds": 60}), 600_000).await;
    redis.wait_node_status(&running, "root", "running", Duration::from_secs(20)).await.expect("running");
    let waiting = [
        client.task("slow_compute", json!({"seconds": 0}), 600_000).await,
        client.task("slow_compute", json!({"seconds": 0}), 600_000).await,
    ];
    let metrics = scrape(&gateway_base).await;
    let total = |gauge: &str| metrics.sum(gauge, &[("queue", "slow_compute")]);
    assert_eq!(total("conveyor_queue_stream_entries"), 3.0, "{}", metrics.text);
    assert_eq!(total("conveyor_queue_pending_entries"), 1.0, "the running node's entry: {}", metrics.text);
    assert_eq!(total("conveyor_queue_consumer_lag"), 2.0, "the waiting nodes: {}", metrics.text);
    let shard = conveyor_tests::process::shard_of(&running).to_string();
    let labels = [("queue", "slow_compute"), ("shard", shard.as_str())];
    assert_eq!(metrics.get("conveyor_queue_pending_entries", &labels), Some(1.0), "{}", metrics.text);
    for task in &waiting {
        let shard = conveyor_tests::process::shard_of(task).to_string();
        let labels = [("queue", "slow_compute"), ("shard", shard.as_str())];
        assert!(metrics.get("conveyor_queue_consumer_lag", &labels).is_some_and(|n| n >= 1.0), "{task}");
    }
    assert_eq!(metrics.series("conveyor_dead_letter_stream_entries", &["shard"]).len(), 2, "two shards");
    let worker = scrape(&worker_base).await;
    assert_eq!(worker.get("conveyor_worker_nodes_running", &[]), Some(1.0), "{}", worker.text);

    // Redis gone: both still answer 200, the gateway says Redis is down, the worker is not ready.
    drop(redis);
    // The gauges are read at most every couple of seconds, however often Prometheus scrapes.
    let down =
        scrape_until(&gateway_base, "Redis is down", |m| m.get("conveyor_redis_up", &[]) == Some(0.0)).await;
    assert_eq!(down.get("conveyor_redis_up", &[]), Some(0.0), "{}", down.text);
    assert!(down.series("conveyor_queue_stream_entries", &["queue"]).is_empty(), "{}", down.text);
    assert_eq!(
        down.get("conveyor_tasks_created_total", &[("tool", "slow_compute")]),
        Some(3.0),
        "{}",
        down.text
    );
    let readyz = reqwest::get(format!("{worker_base}/readyz")).await.expect("readyz");
    assert_eq!(readyz.status().as_u16(), 503);
    let worker = scrape(&worker_base).await;
    assert_eq!(worker.get("conveyor_redis_up", &[]), Some(0.0), "{}", worker.text);
    assert_eq!(worker.get("conveyor_worker_nodes_running", &[]), Some(1.0));
}

#[tokio::test]
async fn the_worker_that_takes_over_a_killed_workers_node_counts_the_reclaim() {
    let redis = RedisServer::start().expect("redis");
    let gateway = Conveyor::gateway(&redis.url(), &[]).expect("gateway");
    let (mut doomed, _) = worker_with_metrics(&redis.url(), &["--lease-ms", "1000"]).await;
    let mut client = Counted { mcp: Mcp::new(gateway.mcp_url()), sent: BTreeMap::new() };
    client.wait_for_tools(&["slow_compute"]).await;
    let task = client.task("slow_compute", json!({"seconds": 2, "label": "survivor"}), 600_000).await;
    redis.wait_node_status(&task, "root", "running", Duration::from_secs(20)).await.expect("running");
    doomed.signal("KILL");
    assert!(doomed.wait_exit(Duration::from_secs(5)));

    let (_survivor, survivor_base) = worker_with_metrics(&redis.url(), &["--lease-ms", "1000"]).await;
    let result = client.call("tasks/result", json!({"taskId": task})).await;
    assert_eq!(result.result()["content"][0]["text"], "computed survivor", "{}", result.raw);
    let metrics = scrape_until(&survivor_base, "counted the completed node", |m| {
        m.get("conveyor_worker_nodes_running", &[]) == Some(0.0)
            && m.sum("conveyor_nodes_run_total", &[]) >= 1.0
    })
    .await;
    assert_eq!(
        metrics.series("conveyor_node_reclaims_total", &["queue"]),
        [(strings(&["slow_compute"]), 1.0)].into()
    );
    assert_eq!(
        metrics.series("conveyor_nodes_run_total", &["queue", "tool", "outcome"]),
        [(strings(&["slow_compute", "slow_compute", "completed"]), 1.0)].into()
    );
    assert_eq!(
        metrics.series("conveyor_tasks_settled_total", &["tool", "status"]),
        [(strings(&["slow_compute", "completed"]), 1.0)].into()
    );
    assert_eq!(redis.node_field(&task, "root", "attempt").as_deref(), Some("2"));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_gauges_are_read_from_every_shard_of_a_redis_cluster() {
    let cluster = tokio::task::block_in_place(|| conveyor_tests::redis_cluster::RedisCluster::start(3, 0))
        .expect("cluster");
    let url = cluster.seed_url();
    let (gateway, gateway_base) = with_metrics("gateway", &url, &["--shards", "6"]).await;
    let (_worker, worker_base) = worker_with_metrics(&url, &["--shards", "6"]).await;
    let mut client = Counted { mcp: Mcp::new(gateway.mcp_url()), sent: BTreeMap::new() };
    client.wait_for_tools(&["greet"]).await;
    let greeting =
        client.call("tools/call", json!({"name": "greet", "arguments": {"name": "cluster"}})).await;
    assert_eq!(greeting.result()["content"][0]["text"], "Hello, cluster!", "{}", greeting.raw);

    let metrics = scrape(&gateway_base).await;
    assert_eq!(metrics.get("conveyor_redis_up", &[]), Some(1.0), "{}", metrics.text);
    assert_eq!(metrics.get("conveyor_workers_live", &[("queue", "greet")]), Some(1.0));
    for shard in ["0", "1", "2", "3", "4", "5"] {
        let labels = [("queue", "greet"), ("shard", shard)];
        for gauge in
            ["conveyor_queue_stream_entries", "conveyor_queue_pending_entries", "conveyor_queue_consumer_lag"]
        {
            assert_eq!(metrics.get(gauge, &labels), Some(0.0), "{gauge} {labels:?}: {}", metrics.text);
        }
        assert_eq!(metrics.get("conveyor_dead_letter_stream_entries", &[("shard", shard)]), Some(0.0));
    }
    assert_eq!(metrics.get("conveyor_tasks_created_total", &[("tool", "greet")]), Some(1.0));
    let worker = scrape(&worker_base).await;
    let labels = [("queue", "greet"), ("tool", "greet"), ("outcome", "completed")];
    assert_eq!(worker.get("conveyor_nodes_run_total", &labels), Some(1.0), "{}", worker.text);
    assert_eq!(worker.sum("conveyor_redis_errors_total", &[]), 0.0, "{}", worker.text);
}

#[tokio::test]
async fn conveyor_up_shows_its_workers_metrics_beside_its_gateways() {
    let redis = RedisServer::start().expect("redis");
    let (up, up_metrics) = with_metrics("up", &redis.url(), &["--fixtures"]).await;
    let mut client = Counted { mcp: Mcp::new(up.mcp_url()), sent: BTreeMap::new() };
    client.wait_for_tools(&["greet"]).await;
    client.call("tools/call", json!({"name": "greet", "arguments": {"name": "up"}})).await;
    let metrics = scrape_until(&up_metrics, "counted the greeting", |m| {
        m.get("conveyor_tasks_settled_total", &[("tool", "greet"), ("status", "completed")]).is_some()
    })
    .await;
    assert_eq!(
        metrics.get("conveyor_mcp_requests_total", &[("method", "tools/call"), ("outcome", "ok")]),
        Some(1.0)
    );
    assert_eq!(metrics.get("conveyor_tasks_created_total", &[("tool", "greet")]), Some(1.0));
    let labels = [("queue", "greet"), ("tool", "greet"), ("outcome", "completed")];
    assert_eq!(metrics.get("conveyor_nodes_run_total", &labels), Some(1.0), "{}", metrics.text);
    assert_eq!(
        metrics.get("conveyor_tasks_settled_total", &[("tool", "greet"), ("status", "completed")]),
        Some(1.0)
    );
    assert_eq!(metrics.get("conveyor_workers_live", &[("queue", "greet")]), Some(1.0));
    assert_eq!(metrics.get("conveyor_redis_up", &[]), Some(1.0));
}
