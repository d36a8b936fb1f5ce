//! Chaos: hundreds of tasks (single calls on both wires, tool errors, protocol errors, DAGs with
//! retries) submitted through two gateways while workers are SIGKILLed and replaced, one gateway is
//! SIGKILLed, and Redis (AOF) is killed and restarted. Clients retry failed calls with the same
//! idempotency key on the other gateway. At the end every task must exist, be terminal with the
//! status its tool implies, have settled exactly once, and no call may have created two tasks.
//!
//! The test also counts what the faults cost: nodes taken over from lost workers, completions
//! refused as stale, and the longest time from a disruption to the end of a task that was in
//! flight at that moment.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use conveyor_tests::mcp::{Reply, tasks_client_capabilities};
use conveyor_tests::{Conveyor, Mcp, RedisServer};
use futures::StreamExt;
use serde_json::{Value, json};

/// Calls submitted in all, in batches of [`BATCH`] sent at once, one batch every [`BATCH_EVERY`].
const SUBMISSIONS: usize = 600;
const BATCH: usize = 20;
const BATCH_EVERY: Duration = Duration::from_millis(600);
const WORKERS: usize = 3;
/// `--max-node-losses` is raised from its default of 3: a node that loses its worker that often is
/// failed on purpose (a poison pill), but here the kills pick workers at random, and a node taken
/// over by a worker that is killed next, and again, is plausible with four kills. The test is about
/// losing and duplicating nothing, so the limit must not be reachable by the chaos alone.
const WORKER_ARGS: &[&str] =
    &["--fixtures", "--lease-ms", "1500", "--redis-timeout-ms", "1000", "--max-node-losses", "10"];
const GATEWAY_ARGS: &[&str] = &["--redis-timeout-ms", "1000"];
const IDEMPOTENCY_KEY: &str = "io.conveyor/idempotencyKey";
/// How long one call is retried before the submission counts as lost.
const SUBMIT_GIVE_UP: Duration = Duration::from_secs(90);
/// How long the end of the test waits for every task to be terminal.
const SETTLE_WITHIN: Duration = Duration::from_secs(180);
/// The chaos kills gateway A (index 0); B survives and answers the final checks.
const SURVIVOR: usize = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Kind {
    /// `slow_compute` for 0 to 1.5 s: completed.
    Slow,
    /// `failing_job`: a tool error, so completed with `isError` on 2026-07-28, failed on 2025-11-25.
    Failing,
    /// `protocol_error_job`: a JSON-RPC error, so failed (and dead-lettered once).
    ProtocolError,
    /// A five-node `run_dag` diamond of echo, slow_compute, noop and collect nodes: completed.
    Diamond,
    /// A `run_dag` graph whose flaky node fails once or twice and has three retries: completed.
    FlakyDag,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Wire {
    V2025,
    V2026,
}

/// One call to make.
#[derive(Clone, Debug)]
struct Plan {
    index: usize,
    kind: Kind,
    wire: Wire,
    /// The gateway tried first.
    gateway: usize,
    key: String,
    tool: &'static str,
    arguments: Value,
}

impl Plan {
    fn new(index: usize, run: &str) -> Self {
        let kind = match index % 10 {
            0..=3 | 9 => Kind::Slow,
            4 => Kind::Failing,
            5 => Kind::ProtocolError,
            6 | 7 => Kind::Diamond,
            _ => Kind::FlakyDag,
        };
        let wire = if (index / 10).is_multiple_of(2) { Wire::V2026 } else { Wire::V2025 };
        let gateway = (index + index / 20) % 2;
        let (tool, arguments) = match kind {
            Kind::Slow => (
                "slow_compute",
                json!({"seconds": ((index * 37) % 16) as f64 / 10.0, "label": format!("s{index}")}),
            ),
            Kind::Failing => ("failing_job", json!({})),
            Kind::ProtocolError => ("protocol_error_job", json!({})),
            Kind::Diamond => (
                "run_dag",
                json!({"nodes": [
                    {"id": "a", "tool": "echo", "arguments": {"v": index}},
                    {"id": "b", "tool": "echo", "dependsOn": ["a"], "arguments": {"twice": {"$from": "a", "pointer": "/structuredContent/v"}}},
                    {"id": "c", "tool": "slow_compute", "dependsOn": ["a"], "arguments": {"seconds": 0.4, "label": format!("c{index}")}},
                    {"id": "d", "kind": "noop", "dependsOn": ["a"]},
                    {"id": "e", "kind": "collect", "dependsOn": ["b", "c", "d"]}
                ], "output": "e"}),
            ),
            Kind::FlakyDag => (
                "run_dag",
                json!({"nodes": [
                    {"id": "f", "tool": "flaky", "arguments": {"failures": 1 + index % 2}, "retries": 3, "backoffMs": 50},
                    {"id": "g", "tool": "greet", "dependsOn": ["f"], "arguments": {"name": format!("flaky{index}")}}
                ], "output": "g"}),
            ),
        };
        Self { index, kind, wire, gateway, key: format!("chaos-{run}-{index}"), tool, arguments }
    }

    fn expected_status(&self) -> &'static str {
        match (self.kind, self.wire) {
            (Kind::Failing, Wire::V2025) | (Kind::ProtocolError, _) => "failed",
            _ => "completed",
        }
    }

    fn expected_nodes(&self) -> usize {
        match self.kind {
            Kind::Diamond => 5,
            Kind::FlakyDag => 2,
            _ => 1,
        }
    }

    fn params(&self) -> Value {
        let mut params =
            json!({"name": self.tool, "arguments": self.arguments, "_meta": {IDEMPOTENCY_KEY: self.key}});
        if self.wire == Wire::V2025 {
            params["task"] = json!({"ttl": 3_600_000});
        }
        params
    }
}

/// What became of one call.
#[derive(Debug)]
struct Submitted {
    plan: Plan,
    task_id: Option<String>,
    attempts: u32,
    /// Why each failed attempt was retried.
    retry_reasons: Vec<String>,
    /// Why the call was given up (a non-retryable error, or retried too long).
    error: Option<String>,
    /// The task ids (or errors) of the same call sent again with the same key, as a client that
    /// lost the first reply would: during the run on the other gateway, and at the end.
    replays: Vec<Result<String, String>>,
}

/// The two gateways, and which one the clients currently believe is down.
struct Gateways {
    clients: [Mcp; 2],
    down: [AtomicBool; 2],
}

enum Verdict {
    Created(String),
    Retry(String),
    Fatal(String),
}

/// Sorts a `tools/call` reply: a task, an error worth retrying (Redis away, overload, a gateway
/// shutting down), or anything else.
fn classify(reply: &Reply, wire: Wire) -> Verdict {
    let id = match wire {
        Wire::V2025 => reply.result()["task"]["taskId"].as_str(),
        Wire::V2026 if reply.result()["resultType"] == "task" => reply.result()["taskId"].as_str(),
        Wire::V2026 => None,
    };
    if let Some(id) = id {
        return Verdict::Created(id.to_owned());
    }
    let error = &reply.message["error"];
    let code = error["code"].as_i64();
    let message = error["message"].as_str().unwrap_or_default();
    let store_trouble = code == Some(-32603) && (message.contains("Redis") || message.contains("task store"));
    if reply.status >= 500 || store_trouble || error["data"]["retryable"] == true || code == Some(-32029) {
        Verdict::Retry(format!("HTTP {} {code:?}: {message}", reply.status))
    } else {
        Verdict::Fatal(format!("HTTP {}: {}", reply.status, reply.raw))
    }
}

/// Makes one call, retrying it with the same idempotency key (on the other gateway first) until it
/// returns a task, fails for good, or [`SUBMIT_GIVE_UP`] passes.
async fn submit(gateways: &Gateways, plan: Plan) -> Submitted {
    let deadline = Instant::now() + SUBMIT_GIVE_UP;
    let mut target = plan.gateway;
    let mut attempts = 0;
    let mut retry_reasons = Vec::new();
    let done = |task_id, attempts, retry_reasons, error| Submitted {
        plan: plan.clone(),
        task_id,
        attempts,
        retry_reasons,
        error,
        replays: Vec::new(),
    };
    loop {
        if gateways.down[target].load(Ordering::SeqCst) {
            target = 1 - target;
        }
        attempts += 1;
        let client = &gateways.clients[target];
        let reply = match plan.wire {
            Wire::V2025 => client.call_2025("tools/call", plan.params()).await,
            Wire::V2026 => client.call_2026("tools/call", plan.params(), tasks_client_capabilities()).await,
        };
        let reason = match reply {
            Ok(reply) => match classify(&reply, plan.wire) {
                Verdict::Created(id) => return done(Some(id), attempts, retry_reasons, None),
                Verdict::Fatal(why) => return done(None, attempts, retry_reasons, Some(why)),
                Verdict::Retry(why) => why,
            },
            Err(e) => {
                // The gateway is gone (or the connection broke): go to the other one from now on.
                gateways.down[target].store(true, Ordering::SeqCst);
                gateways.down[1 - target].store(false, Ordering::SeqCst);
                format!("transport error on gateway {target}: {e:#}")
            }
        };
        retry_reasons.push(reason);
        if Instant::now() > deadline {
            let why = format!("still failing after {SUBMIT_GIVE_UP:?}: {:?}", retry_reasons.last());
            return done(None, attempts, retry_reasons, Some(why));
        }
        target = 1 - target;
        let backoff = Duration::from_millis(100 * (1u64 << attempts.min(4))).min(Duration::from_millis(1500));
        tokio::time::sleep(backoff).await;
    }
}

/// Every fifth call is sent a second time, right after its task is created, to the other gateway.
const REPLAY_EVERY: usize = 5;

/// Submits a call; every [`REPLAY_EVERY`]th is then sent again with its key on the other gateway.
async fn submit_maybe_twice(gateways: &Gateways, plan: Plan) -> Submitted {
    let mut submitted = submit(gateways, plan.clone()).await;
    if plan.index.is_multiple_of(REPLAY_EVERY) && submitted.task_id.is_some() {
        let again = submit(gateways, Plan { gateway: 1 - plan.gateway, ..plan }).await;
        submitted.replays.push(again.task_id.ok_or_else(|| again.error.unwrap_or_default()));
    }
    submitted
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// One disruption, with its wall-clock time (the clock Conveyor stamps tasks and nodes with).
#[derive(Debug, Clone)]
struct Event {
    what: &'static str,
    detail: String,
    at_ms: u64,
}

/// What the chaos thread leaves behind: the processes (alive and dead, for their logs) and what it
/// did.
struct Chaos {
    started_ms: u64,
    redis: RedisServer,
    workers: Vec<Conveyor>,
    dead: Vec<Conveyor>,
    events: Vec<Event>,
}

/// A small deterministic generator, so that a run can be repeated with its printed seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// A log's text without the terminal colour codes.
fn plain_log(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            chars.by_ref().find(|&c| c == 'm');
        } else {
            out.push(c);
        }
    }
    out
}

/// The lines of all `logs` that contain `needle`.
fn log_lines(logs: &[PathBuf], needle: &str) -> Vec<String> {
    logs.iter()
        .flat_map(|log| {
            plain_log(log).lines().filter(|l| l.contains(needle)).map(str::to_owned).collect::<Vec<_>>()
        })
        .collect()
}

/// The value of `name=` in a log line.
fn log_field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    line.split_whitespace().find_map(|w| w.strip_prefix(name)?.strip_prefix('='))
}

/// A worker's consumer name, from its start-up log line.
fn consumer_name(worker: &Conveyor) -> String {
    log_lines(std::slice::from_ref(&worker.log), "worker started")
        .first()
        .and_then(|l| log_field(l, "worker").map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}

/// The disruptions, on a fixed timeline while the calls are being submitted: four worker kills
/// (each followed by a replacement), one gateway kill, one Redis kill and restart.
fn run_chaos(mut redis: RedisServer, mut gateway: Conveyor, mut workers: Vec<Conveyor>, seed: u64) -> Chaos {
    let url = redis.url();
    let start = Instant::now();
    let started_ms = now_ms();
    let until = |secs: f64| {
        let at = start + Duration::from_secs_f64(secs);
        std::thread::sleep(at.saturating_duration_since(Instant::now()));
    };
    let mut rng = Rng(seed | 1);
    let mut dead = Vec::new();
    let mut events = Vec::new();
    let mut kill_worker = |workers: &mut Vec<Conveyor>, dead: &mut Vec<Conveyor>, events: &mut Vec<Event>| {
        let slot = rng.below(workers.len());
        let name = consumer_name(&workers[slot]);
        workers[slot].kill();
        events.push(Event { what: "worker kill", detail: format!("slot {slot} ({name})"), at_ms: now_ms() });
        std::thread::sleep(Duration::from_millis(500));
        let replacement = Conveyor::worker(&url, WORKER_ARGS).expect("a replacement worker");
        dead.push(std::mem::replace(&mut workers[slot], replacement));
    };

    until(2.0);
    kill_worker(&mut workers, &mut dead, &mut events);
    until(4.5);
    gateway.kill();
    events.push(Event { what: "gateway kill", detail: gateway.base.clone(), at_ms: now_ms() });
    dead.push(gateway);
    until(6.5);
    kill_worker(&mut workers, &mut dead, &mut events);
    until(9.0);
    redis.kill();
    events.push(Event { what: "redis kill", detail: format!("port {}", redis.port), at_ms: now_ms() });
    until(11.0);
    redis.restart().expect("redis restarts on the same port and directory");
    events.push(Event { what: "redis restart", detail: "answers PING again".to_owned(), at_ms: now_ms() });
    until(13.0);
    kill_worker(&mut workers, &mut dead, &mut events);
    until(15.5);
    kill_worker(&mut workers, &mut dead, &mut events);
    Chaos { started_ms, redis, workers, dead, events }
}

async fn wait_for_tools(mcp: &Mcp) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let raw = mcp.call_2025("tools/list", json!({})).await.map(|r| r.raw).unwrap_or_default();
        if ["\"flaky\"", "\"protocol_error_job\"", "\"run_dag\""].iter().all(|t| raw.contains(t)) {
            return;
        }
        assert!(Instant::now() < deadline, "the workers' tools never appeared: {raw}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `tasks/get` on the task's own wire; `None` when the call itself failed.
async fn task_get(mcp: &Mcp, wire: Wire, task_id: &str) -> Option<Value> {
    let params = json!({"taskId": task_id});
    let reply = match wire {
        Wire::V2025 => mcp.call_2025("tasks/get", params).await,
        Wire::V2026 => mcp.call_2026("tasks/get", params, tasks_client_capabilities()).await,
    };
    reply.ok().map(|r| r.message)
}

fn is_terminal(status: &str) -> bool {
    ["completed", "failed", "cancelled"].contains(&status)
}

/// What the client finally gets for a terminal task: the `CallToolResult`, or the JSON-RPC error.
/// 2026-07-28 reads it from `tasks/get`, 2025-11-25 from `tasks/result`.
async fn client_outcome(mcp: &Mcp, wire: Wire, task_id: &str, got: &Value) -> Result<Value, Value> {
    match wire {
        Wire::V2026 => match got.get("result") {
            Some(result) => Ok(result.clone()),
            None => Err(got.get("error").cloned().unwrap_or(Value::Null)),
        },
        Wire::V2025 => match mcp.call_2025("tasks/result", json!({"taskId": task_id})).await {
            Ok(reply) if reply.message.get("result").is_some() => Ok(reply.message["result"].clone()),
            Ok(reply) => Err(reply.message.get("error").cloned().unwrap_or_else(|| json!(reply.raw))),
            Err(e) => Err(json!(format!("tasks/result failed: {e:#}"))),
        },
    }
}

/// What is wrong with a terminal task's outcome, if anything.
fn check_outcome(plan: &Plan, outcome: &Result<Value, Value>) -> Option<String> {
    let i = plan.index;
    let ok = match (plan.kind, outcome) {
        (Kind::Slow, Ok(r)) => r["content"][0]["text"] == format!("computed s{i}").as_str(),
        (Kind::Failing, Ok(r)) => r["isError"] == true && r["content"][0]["text"] == "failing_job failed",
        (Kind::ProtocolError, Err(e)) => {
            e["message"].as_str().is_some_and(|m| m.contains("protocol_error_job exploded"))
        }
        (Kind::Diamond, Ok(r)) => {
            let nodes = &r["structuredContent"]["nodes"];
            r["isError"] == false
                && nodes
                    .as_object()
                    .is_some_and(|n| n.len() == 5 && n.values().all(|v| v["status"] == "completed"))
                && nodes["e"]["output"]["structuredContent"]["b"]["structuredContent"]["twice"] == i
        }
        (Kind::FlakyDag, Ok(r)) => {
            let f = &r["structuredContent"]["nodes"]["f"];
            let failures = 1 + i as u64 % 2;
            r["isError"] == false
                && f["status"] == "completed"
                && f["attempts"].as_u64().is_some_and(|a| a > failures)
                && r["content"][0]["text"] == format!("Hello, flaky{i}!").as_str()
        }
        _ => false,
    };
    (!ok).then(|| format!("unexpected outcome {outcome:?}"))
}

fn hgetall(conn: &mut redis::Connection, key: &str) -> HashMap<String, String> {
    redis::cmd("HGETALL").arg(key).query(conn).unwrap_or_default()
}

fn scan_count(conn: &mut redis::Connection, pattern: &str) -> usize {
    let mut cursor = 0u64;
    let mut seen = HashSet::new();
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query(conn)
            .expect("scan");
        seen.extend(keys);
        if next == 0 {
            return seen.len();
        }
        cursor = next;
    }
}

/// Everything Redis and the logs know about one task, for a failure message.
fn evidence(conn: &mut redis::Connection, logs: &[PathBuf], task_id: &str) -> String {
    let mut out = format!("--- task {task_id}\n");
    let task = hgetall(conn, &conveyor_tests::process::task_key(task_id));
    let nodes = hgetall(conn, &conveyor_tests::process::nodes_key(task_id));
    out += &format!("task hash: {:?}\n", task.iter().collect::<BTreeMap<_, _>>());
    out += &format!("nodes hash: {:?}\n", nodes.iter().collect::<BTreeMap<_, _>>());
    for log in logs {
        let text = plain_log(log);
        let lines: Vec<&str> = text.lines().filter(|l| l.contains(task_id)).collect();
        if !lines.is_empty() {
            out +=
                &format!("{}:\n  {}\n", log.display(), lines[lines.len().saturating_sub(20)..].join("\n  "));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nothing_is_lost_or_done_twice_while_workers_gateways_and_redis_die() {
    let test_started = Instant::now();
    let redis = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "everysec", "--save", ""])
        .expect("redis");
    let url = redis.url();
    let gateway_a = Conveyor::gateway(&url, GATEWAY_ARGS).expect("gateway A");
    let gateway_b = Conveyor::gateway(&url, GATEWAY_ARGS).expect("gateway B");
    let workers: Vec<Conveyor> =
        (0..WORKERS).map(|_| Conveyor::worker(&url, WORKER_ARGS).expect("worker")).collect();
    let gateways = Arc::new(Gateways {
        clients: [Mcp::new(gateway_a.mcp_url()), Mcp::new(gateway_b.mcp_url())],
        down: [AtomicBool::new(false), AtomicBool::new(false)],
    });
    wait_for_tools(&gateways.clients[0]).await;
    wait_for_tools(&gateways.clients[1]).await;
    let mut logs: Vec<PathBuf> = vec![gateway_a.log.clone(), gateway_b.log.clone()];
    logs.extend(workers.iter().map(|w| w.log.clone()));

    let seed = std::env::var("CHAOS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(now_ms);
    let run = format!("{}-{seed}", std::process::id());
    println!("chaos seed {seed} (CHAOS_SEED={seed} repeats the choice of workers to kill)");
    let chaos = tokio::task::spawn_blocking(move || run_chaos(redis, gateway_a, workers, seed));

    // Submit in batches, every call of a batch at once, alternating between the gateways.
    let submit_started = Instant::now();
    let mut records: Vec<Submitted> = Vec::with_capacity(SUBMISSIONS);
    for batch in 0..SUBMISSIONS.div_ceil(BATCH) {
        let batch_started = Instant::now();
        let calls = (batch * BATCH..((batch + 1) * BATCH).min(SUBMISSIONS))
            .map(|i| submit_maybe_twice(&gateways, Plan::new(i, &run)));
        records.extend(futures::future::join_all(calls).await);
        tokio::time::sleep_until((batch_started + BATCH_EVERY).into()).await;
    }
    let submit_took = submit_started.elapsed();
    let chaos = chaos.await.expect("the chaos thread");
    logs.extend(chaos.workers.iter().chain(&chaos.dead).map(|c| c.log.clone()));
    logs.sort();
    logs.dedup();

    // Wait (bounded) until every task is terminal, asking the surviving gateway.
    let survivor = &gateways.clients[SURVIVOR];
    let settle_started = Instant::now();
    let mut finals: HashMap<usize, Value> = HashMap::new();
    let mut pending: Vec<usize> = (0..records.len()).filter(|&i| records[i].task_id.is_some()).collect();
    while !pending.is_empty() && settle_started.elapsed() < SETTLE_WITHIN {
        let polled: Vec<(usize, Option<Value>)> = futures::stream::iter(pending.clone())
            .map(|i| {
                let record = &records[i];
                async move {
                    let id = record.task_id.as_deref().unwrap_or_default();
                    (i, task_get(survivor, record.plan.wire, id).await)
                }
            })
            .buffer_unordered(16)
            .collect()
            .await;
        for (i, got) in polled {
            if let Some(message) = got
                && is_terminal(message["result"]["status"].as_str().unwrap_or_default())
            {
                finals.insert(i, message["result"].clone());
                pending.retain(|&p| p != i);
            }
        }
        if !pending.is_empty() {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    let settle_took = settle_started.elapsed();

    // Every call once more with its key, now that Redis has restarted: the keys survived (AOF) and
    // still name the tasks the first attempts created.
    let replays: Vec<(usize, Submitted)> = futures::stream::iter(0..records.len())
        .map(|i| {
            let plan = Plan { gateway: SURVIVOR, ..records[i].plan.clone() };
            let gateways = &gateways;
            async move { (i, submit(gateways, plan).await) }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    for (i, again) in replays {
        records[i].replays.push(again.task_id.ok_or_else(|| again.error.unwrap_or_default()));
    }

    // Check every task: as its client sees it, and in Redis.
    let mut problems: Vec<(Option<String>, String)> = Vec::new();
    let mut conn = chaos.redis.connection().expect("a connection to the restarted Redis");
    for record in records.iter().filter(|r| r.error.is_some() || r.task_id.is_none()) {
        problems.push((
            None,
            format!("call #{} ({:?}) was lost: {:?}", record.plan.index, record.plan.kind, record.error),
        ));
    }
    for record in &records {
        for replay in record.replays.iter().filter(|r| r.as_deref().ok() != record.task_id.as_deref()) {
            problems.push((
                record.task_id.clone(),
                format!(
                    "call #{} sent again with its key got {replay:?}, not {:?}",
                    record.plan.index, record.task_id
                ),
            ));
        }
    }
    let dead_letters: Vec<HashMap<String, String>> =
        chaos.redis.dead_letters().into_iter().map(|fields| fields.into_iter().collect()).collect();
    let mut letters_by_task: HashMap<String, usize> = HashMap::new();
    for fields in &dead_letters {
        *letters_by_task.entry(fields.get("task").cloned().unwrap_or_default()).or_default() += 1;
    }
    let known: HashSet<&str> = records.iter().filter_map(|r| r.task_id.as_deref()).collect();
    for (task, count) in &letters_by_task {
        if !known.contains(task.as_str()) {
            problems.push((None, format!("{count} dead letter(s) for task {task}, which no call created")));
        }
    }
    // Per task: (createdAt, settled at) in ms, for the recovery numbers.
    let mut lifetimes: Vec<(u64, u64)> = Vec::new();
    // Per node taken over from a lost worker: the start of its last attempt.
    let mut takeovers: Vec<u64> = Vec::new();
    // How many nodes lost their worker how many times (`<node>:losses`).
    let mut losses: BTreeMap<u32, usize> = BTreeMap::new();
    for (i, record) in records.iter().enumerate() {
        let Some(id) = record.task_id.as_deref() else { continue };
        let plan = &record.plan;
        let mut wrong = |what: String| {
            problems.push((Some(id.to_owned()), format!("#{i} {:?}/{:?}: {what}", plan.kind, plan.wire)))
        };
        let Some(got) = finals.get(&i) else {
            wrong("not terminal within the wait".to_owned());
            continue;
        };
        let status = got["status"].as_str().unwrap_or_default();
        if status != plan.expected_status() {
            wrong(format!("status {status}, expected {}", plan.expected_status()));
        }
        let outcome = client_outcome(survivor, plan.wire, id, got).await;
        if let Some(what) = check_outcome(plan, &outcome) {
            wrong(what);
        }
        let task = hgetall(&mut conn, &conveyor_tests::process::task_key(id));
        let nodes = hgetall(&mut conn, &conveyor_tests::process::nodes_key(id));
        let field = |name: &str| task.get(name).cloned().unwrap_or_default();
        // A graph counts its settled nodes; a single call's one node settles with its task.
        if field("nodeCount") != plan.expected_nodes().to_string()
            || (field("kind") == "dag" && field("nodesSettled") != field("nodeCount"))
        {
            wrong(format!(
                "nodesSettled {:?} against nodeCount {:?} (expected {})",
                field("nodesSettled"),
                field("nodeCount"),
                plan.expected_nodes()
            ));
        }
        let node_ids: Vec<&str> = nodes.keys().filter_map(|k| k.strip_suffix(":status")).collect();
        if node_ids.len() != plan.expected_nodes() {
            wrong(format!("{} nodes in Redis, expected {}", node_ids.len(), plan.expected_nodes()));
        }
        for node in &node_ids {
            let node_field = |name: &str| nodes.get(&format!("{node}:{name}")).cloned().unwrap_or_default();
            if node_field("attempt").parse::<u32>().unwrap_or(0) < 1 {
                wrong(format!("node {node} never ran (attempt {:?})", node_field("attempt")));
            }
            if !["completed", "failed"].contains(&node_field("status").as_str()) {
                wrong(format!("node {node} ended {:?}", node_field("status")));
            }
            *losses.entry(node_field("losses").parse().unwrap_or(0)).or_default() += 1;
            if node_field("losses").parse::<u32>().unwrap_or(0) > 0
                && node_field("retries").parse::<u32>().unwrap_or(0) == 0
                && let Ok(started) = node_field("startedAt").parse()
            {
                takeovers.push(started);
            }
        }
        let letters = letters_by_task.get(id).copied().unwrap_or(0);
        let expected_letters = usize::from(plan.kind == Kind::ProtocolError);
        if letters != expected_letters {
            wrong(format!("{letters} dead letters, expected {expected_letters}"));
        }
        if let (Ok(created), Ok(settled)) = (field("createdAt").parse(), field("updatedAt").parse()) {
            lifetimes.push((created, settled));
        }
    }
    // Idempotency: one task per call, both as the clients saw it and as Redis holds it.
    let distinct: HashSet<&str> = records.iter().filter_map(|r| r.task_id.as_deref()).collect();
    let task_hashes = scan_count(&mut conn, "cv:{cv.*}:t:*");
    let idempotency_keys = scan_count(&mut conn, "cv:{cv.*}:idem:*");
    let indexed: usize = chaos
        .redis
        .keys("cv:{cv.*}:owner:anonymous")
        .iter()
        .map(|k| redis::cmd("ZCARD").arg(k).query::<usize>(&mut conn).expect("zcard"))
        .sum();
    for (what, n) in [
        ("distinct task ids returned", distinct.len()),
        ("task hashes in Redis", task_hashes),
        ("idempotency keys in Redis", idempotency_keys),
        ("tasks in the owner index", indexed),
    ] {
        if n != SUBMISSIONS {
            problems.push((None, format!("{n} {what}, expected one per call ({SUBMISSIONS})")));
        }
    }
    let pending_entries = chaos.redis.pending_entries();
    let load = chaos.redis.load_totals();

    // The numbers.
    let mut by_kind: BTreeMap<String, usize> = BTreeMap::new();
    for record in &records {
        *by_kind.entry(format!("{:?} on {:?}", record.plan.kind, record.plan.wire)).or_default() += 1;
    }
    let retried: Vec<&Submitted> = records.iter().filter(|r| r.attempts > 1).collect();
    let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
    for reason in retried.iter().flat_map(|r| &r.retry_reasons) {
        let class = if reason.starts_with("transport") {
            "transport error (gateway gone)"
        } else if reason.contains("-32029") {
            "overloaded"
        } else if reason.contains("503") {
            "HTTP 503 (Redis unreachable)"
        } else {
            "other retryable"
        };
        *reasons.entry(class).or_default() += 1;
    }
    let count = |what: &str| chaos.events.iter().filter(|e| e.what == what).count();
    println!("\n=== chaos summary ===");
    println!(
        "tasks submitted: {} (gateway A first: {}, gateway B first: {})",
        records.len(),
        records.iter().filter(|r| r.plan.gateway == 0).count(),
        records.iter().filter(|r| r.plan.gateway == 1).count()
    );
    for (kind, n) in &by_kind {
        println!("  {kind}: {n}");
    }
    println!(
        "worker kills: {}, gateway kills: {}, Redis restarts: {}",
        count("worker kill"),
        count("gateway kill"),
        count("redis restart")
    );
    for event in &chaos.events {
        println!(
            "  {:>14} at +{:>6} ms: {}",
            event.what,
            event.at_ms.saturating_sub(chaos.started_ms),
            event.detail
        );
    }
    println!(
        "submissions retried: {} ({} retries in all: {reasons:?}); most attempts for one call: {}",
        retried.len(),
        retried.iter().map(|r| r.attempts as usize - 1).sum::<usize>(),
        records.iter().map(|r| r.attempts).max().unwrap_or(0)
    );
    println!(
        "replays of a call with its key: {} during the run, {} after the Redis restart; all named the first task: {}",
        records.iter().filter(|r| r.replays.len() > 1).count(),
        records.iter().filter(|r| !r.replays.is_empty()).count(),
        records.iter().all(|r| r.replays.iter().all(|x| x.as_deref().ok() == r.task_id.as_deref()))
    );
    println!(
        "distinct task ids: {}, task hashes in Redis: {task_hashes}, idempotency keys: {idempotency_keys}, owner index: {indexed}",
        distinct.len()
    );
    println!(
        "dead letters: {} (protocol_error_job calls: {})",
        dead_letters.len(),
        records.iter().filter(|r| r.plan.kind == Kind::ProtocolError).count()
    );
    // Recovery, measured two ways from Conveyor's own timestamps in Redis:
    // - in flight: for each disruption, the tasks created before it and not yet settled at that
    //   moment; the longest time from the disruption to such a task's settlement. It includes the
    //   task's own remaining work and any queueing, so it bounds the recovery delay from above.
    // - taken over: nodes without retries whose worker was lost (losses > 0, so an attempt was
    //   taken over after its lease ran out, or after Redis came back); the longest time from the
    //   latest disruption before it to the start of the node's last attempt, i.e. how long such a
    //   node sat without a live worker.
    let mut longest_in_flight = (0u64, "none", 0usize);
    for event in &chaos.events {
        let in_flight: Vec<u64> = lifetimes
            .iter()
            .filter(|(created, settled)| *created <= event.at_ms && *settled > event.at_ms)
            .map(|(_, settled)| settled - event.at_ms)
            .collect();
        let longest = in_flight.iter().copied().max().unwrap_or(0);
        println!(
            "  {:>14}: {} tasks in flight, the last settled {longest} ms later",
            event.what,
            in_flight.len()
        );
        if longest > longest_in_flight.0 {
            longest_in_flight = (longest, event.what, in_flight.len());
        }
    }
    let (takeover_ms, takeover_after) = takeovers
        .iter()
        .filter_map(|started| {
            let before = chaos.events.iter().rev().find(|e| e.at_ms <= *started)?;
            Some((started - before.at_ms, before.what))
        })
        .max()
        .unwrap_or((0, "none"));
    println!(
        "longest wait of an in-flight task after a disruption: {} ms (after the {}, with {} tasks in flight)",
        longest_in_flight.0, longest_in_flight.1, longest_in_flight.2
    );
    println!(
        "nodes taken over from a lost worker: {}; longest from the disruption to such a node's new \
         attempt: {takeover_ms} ms (after the {takeover_after})",
        takeovers.len()
    );
    println!(
        "work stream entries still pending: {}; load counters: {:?}",
        pending_entries,
        load.iter().collect::<BTreeMap<_, _>>()
    );
    println!("nodes by the number of workers they lost: {losses:?}");
    // What the logs say about the cost of the faults: completions that had to wait for Redis to
    // come back (the worker retries them, holding its lease), and late completions from presumed
    // lost workers that were refused as stale (they leave the entry to the node's new worker).
    let idempotent = log_lines(&logs, "idempotent retry: returning the earlier task");
    let unrecorded = log_lines(&logs, "could not record the node's outcome yet; retrying");
    let stale = log_lines(&logs, "completion refused: attempt is stale");
    let replayed: usize = records.iter().map(|r| r.replays.len()).sum();
    println!(
        "calls the gateways answered with an earlier task (idempotency key): {}, of which {replayed} replays \
         and {} retries whose first attempt had created the task",
        idempotent.len(),
        idempotent.len().saturating_sub(replayed)
    );
    println!("completions retried while Redis was away: {}", unrecorded.len());
    for line in unrecorded.iter().take(3) {
        let Some(task) = log_field(line, "task") else { continue };
        let nodes = hgetall(&mut conn, &conveyor_tests::process::nodes_key(task));
        let of = |field: &str| {
            nodes
                .iter()
                .filter(|(k, _)| k.ends_with(field))
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
        };
        println!("  task {task}: {:?} {:?} {:?}", of(":attempt"), of(":losses"), of(":status"));
    }
    println!("late completions refused as stale: {}", stale.len());
    for line in stale.iter().take(3) {
        println!("  {line}");
    }
    println!(
        "times: submitting {submit_took:?}, settling after the last call {settle_took:?}, whole test {:?}",
        test_started.elapsed()
    );

    if !problems.is_empty() {
        println!("\n=== {} problems ===", problems.len());
        let mut shown = HashSet::new();
        for (task, problem) in &problems {
            println!("{problem}");
            if let Some(task) = task
                && shown.len() < 10
                && shown.insert(task.clone())
            {
                println!("{}", evidence(&mut conn, &logs, task));
            }
        }
        for record in retried.iter().filter(|r| r.error.is_some()).take(5) {
            println!("retries of call #{}: {:?}", record.plan.index, record.retry_reasons);
        }
    }
    drop(gateway_b);
    assert!(problems.is_empty(), "{} problems under chaos (see above)", problems.len());
}
