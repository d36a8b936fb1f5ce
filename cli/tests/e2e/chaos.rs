//! Chaos: hundreds of tasks (single calls on both wires, tool errors, protocol errors, DAGs with
//! retries) submitted through two gateways while workers are SIGKILLed and replaced, one gateway is
//! SIGKILLed, and Redis dies: a single server (AOF) killed and restarted, or, in the second test, the
//! primary of a Redis Cluster (3 primaries with a replica each) killed and failed over to its
//! replica, then restarted to rejoin as a replica. Clients retry failed calls with the same
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
use std::time::{Duration, Instant};

use conveyor_shared::keys::Shard;
use conveyor_shared::model::now_ms;
use conveyor_tests::mcp::wait_for_tools;
use conveyor_tests::mcp::{Reply, tasks_client_capabilities};
use conveyor_tests::redis_cluster::RedisCluster;
use conveyor_tests::{Conveyor, Mcp, RedisServer};
use futures::StreamExt;
use serde_json::{Value, json};

/// The fixture tools the chaos runs call.
const CHAOS_TOOLS: &[&str] = &["flaky", "protocol_error_job", "run_dag"];

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
/// Shards of every gateway and worker on the cluster: more than twice as many as primaries, so
/// that each primary serves some (`docs/operations.md`, sizing). All processes must agree.
const CLUSTER_SHARDS: u16 = 8;
/// How long the cluster may take to promote the killed primary's replica, and the killed node,
/// restarted, to rejoin as a replica.
const FAILOVER_WITHIN: Duration = Duration::from_secs(60);

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
    redis: Box<dyn RedisSide>,
    workers: Vec<Conveyor>,
    dead: Vec<Conveyor>,
    events: Vec<Event>,
}

/// The Redis a chaos run talks to, kills and reads back at the end: one server, or a cluster. On a
/// cluster every read of a key goes to the primary that serves it, and a count by pattern sums the
/// primaries' counts.
trait RedisSide: Send {
    /// `REDIS_URL` of every gateway and worker.
    fn url(&self) -> String;
    /// What every gateway is started with besides [`GATEWAY_ARGS`].
    fn gateway_args(&self) -> Vec<String>;
    /// Environment variables of every gateway.
    fn gateway_env(&self) -> Vec<(&'static str, &'static str)>;
    /// What every worker is started with besides [`WORKER_ARGS`].
    fn worker_args(&self) -> Vec<String>;
    /// The Redis fault of the timeline: returns once Redis serves every shard again. Records what
    /// it did as events.
    fn kill_and_recover(&mut self, events: &mut Vec<Event>);
    /// A hash; empty when it does not exist.
    fn hgetall(&mut self, key: &str) -> HashMap<String, String>;
    /// How many keys match a pattern.
    fn count_keys(&mut self, pattern: &str) -> usize;
    /// The members of every sorted set whose key matches a pattern.
    fn zcard_sum(&mut self, pattern: &str) -> usize;
    /// Every dead letter of every shard, as (field, value) lists.
    fn dead_letters(&mut self) -> Vec<Vec<(String, String)>>;
    /// The load counters, summed over the shards.
    fn load_totals(&mut self) -> HashMap<String, i64>;
    /// Work entries delivered to a worker and not yet acknowledged, over every queue of every shard.
    fn pending_entries(&mut self) -> usize;
    /// Which primary [`RedisSide::kill_and_recover`] killed and how the cluster recovered; `None`
    /// for a single server.
    fn failover(&self) -> Option<Failover>;
    /// How often the primaries ran `command`, as far as they still count (a killed or demoted
    /// node's counts are gone with it); `None` where it is not measured.
    fn command_calls(&self, _command: &str) -> Option<u64> {
        None
    }
}

/// One `redis-server` with an append-only file (`appendfsync everysec`): the fault kills it, waits
/// 2 s and starts it again on the same port and directory. A SIGKILL of the process (not of the
/// machine) loses only what the server had not yet written to its file, and it writes before it
/// answers (unless a slow fsync made it postpone a write), so acknowledged writes survive.
struct SingleServer {
    server: RedisServer,
    conn: Option<redis::Connection>,
}

impl SingleServer {
    fn conn(&mut self) -> &mut redis::Connection {
        self.conn
            .get_or_insert_with(|| self.server.connection().expect("a connection to the restarted Redis"))
    }
}

impl RedisSide for SingleServer {
    fn url(&self) -> String {
        self.server.url()
    }

    fn gateway_args(&self) -> Vec<String> {
        Vec::new()
    }

    fn gateway_env(&self) -> Vec<(&'static str, &'static str)> {
        Vec::new()
    }

    fn worker_args(&self) -> Vec<String> {
        Vec::new()
    }

    fn kill_and_recover(&mut self, events: &mut Vec<Event>) {
        self.conn = None;
        self.server.kill();
        events.push(Event {
            what: "redis kill",
            detail: format!("port {}", self.server.port),
            at_ms: now_ms(),
        });
        std::thread::sleep(Duration::from_secs(2));
        self.server.restart().expect("redis restarts on the same port and directory");
        events.push(Event {
            what: "redis restart",
            detail: "answers PING again".to_owned(),
            at_ms: now_ms(),
        });
    }

    fn hgetall(&mut self, key: &str) -> HashMap<String, String> {
        hgetall(self.conn(), key)
    }

    fn count_keys(&mut self, pattern: &str) -> usize {
        scan_count(self.conn(), pattern)
    }

    fn zcard_sum(&mut self, pattern: &str) -> usize {
        let keys = self.server.keys(pattern);
        let conn = self.conn();
        keys.iter().map(|k| redis::cmd("ZCARD").arg(k).query::<usize>(conn).expect("zcard")).sum()
    }

    fn dead_letters(&mut self) -> Vec<Vec<(String, String)>> {
        self.server.dead_letters()
    }

    fn load_totals(&mut self) -> HashMap<String, i64> {
        self.server.load_totals()
    }

    fn pending_entries(&mut self) -> usize {
        self.server.pending_entries()
    }

    fn failover(&self) -> Option<Failover> {
        None
    }
}

/// Which primary the cluster's fault killed, and how the cluster recovered.
#[derive(Debug, Clone)]
struct Failover {
    /// The killed primary's port.
    killed: u16,
    /// The shards whose keys it served (shard 0's among them).
    shards: Vec<u16>,
    /// The replica promoted in its place.
    promoted: u16,
    /// From the kill until every running node saw `promoted` serve all of the killed primary's
    /// slots and said `cluster_state:ok`.
    took: Duration,
    /// The primary the killed node, restarted, rejoined as a replica of.
    rejoined_under: u16,
    /// From its restart until it was an attached replica.
    rejoin_took: Duration,
    /// With `CHAOS_REPLICA_LAG_MS`: the replica that was paused and cut off, and for how long
    /// before the kill.
    lag: Option<(u16, Duration)>,
}

/// A Redis Cluster of 3 primaries with a replica each (`RedisCluster::start(3, 1)`): the fault
/// kills the primary of shard 0, waits for its replica to take over, and 2 s later starts the
/// killed node again, which rejoins as the new primary's replica.
///
/// With `CHAOS_REPLICA_LAG_MS=<ms>` in the environment, the replica is paused (SIGSTOP) and its
/// link to the primary cut that long before the kill, and resumed just after: writes the primary
/// acknowledged in that window never reach the replica and are lost in the failover. Without it,
/// the replica on the same machine is usually a millisecond behind, and the failover loses nothing.
///
/// Reads at the end go to the primary that serves the key: the one that last served the key's
/// hash tag, else the one the cluster names; a `MOVED` reply is followed. Connections are kept per
/// primary.
struct ClusterRedis {
    cluster: RedisCluster,
    conns: HashMap<u16, redis::Connection>,
    /// The primary that last served each hash tag (one slot: one shard).
    routes: HashMap<String, u16>,
    failover: Option<Failover>,
    /// `CHAOS_REPLICA_LAG_MS`.
    replica_lag: Option<Duration>,
}

/// The part of a key that picks its slot: the text between the first `{` and the next `}` when
/// not empty, else the whole key.
fn hash_tag(key: &str) -> &str {
    key.split_once('{')
        .and_then(|(_, rest)| rest.split_once('}'))
        .map(|(tag, _)| tag)
        .filter(|tag| !tag.is_empty())
        .unwrap_or(key)
}

impl ClusterRedis {
    fn new(cluster: RedisCluster) -> Self {
        let replica_lag = std::env::var("CHAOS_REPLICA_LAG_MS")
            .ok()
            .map(|ms| Duration::from_millis(ms.parse().expect("CHAOS_REPLICA_LAG_MS in milliseconds")));
        Self { cluster, conns: HashMap::new(), routes: HashMap::new(), failover: None, replica_lag }
    }

    /// Runs a command on `key` on the primary that serves it, following `MOVED`.
    fn query<T: redis::FromRedisValue>(&mut self, key: &str, cmd: &redis::Cmd) -> T {
        let tag = hash_tag(key).to_owned();
        let mut port = match self.routes.get(&tag) {
            Some(&port) => port,
            None => self.cluster.primary_for_key(key).expect("the primary serving a key"),
        };
        let mut redirects = Vec::new();
        for _ in 0..5 {
            let conn = match self.conns.entry(port) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(self.cluster.connection(port).expect("a connection to a primary"))
                }
            };
            match cmd.query::<T>(conn) {
                Ok(value) => {
                    self.routes.insert(tag, port);
                    return value;
                }
                Err(e) => {
                    let moved = e
                        .redirect_node()
                        .and_then(|(address, _)| address.rsplit_once(':')?.1.parse::<u16>().ok());
                    let Some(next) = moved else {
                        panic!("reading {key} from node {port} of the cluster failed: {e}");
                    };
                    redirects.push(format!("{port} -> {next}"));
                    port = next;
                }
            }
        }
        panic!("reading {key} from the cluster: redirected in a loop ({})", redirects.join(", "))
    }

    fn keys(&self, pattern: &str) -> Vec<String> {
        let keys = self.cluster.keys_by_primary(pattern).expect("SCAN of every primary");
        keys.into_iter().map(|(_, key)| key).collect()
    }
}

impl RedisSide for ClusterRedis {
    /// Every node, comma-separated: processes started after the kill (replacement workers) must
    /// not depend on the killed node.
    fn url(&self) -> String {
        self.cluster.seed_urls()
    }

    fn gateway_args(&self) -> Vec<String> {
        vec!["--shards".to_owned(), CLUSTER_SHARDS.to_string()]
    }

    /// A create is answered only once the replica has it. Set by environment: the flag is
    /// `--wait-replicas`, unlike its siblings (`--redis-wait-ms`, `--redis-timeout-ms`), while
    /// `docs/operations.md` names the variable.
    fn gateway_env(&self) -> Vec<(&'static str, &'static str)> {
        vec![("CONVEYOR_REDIS_WAIT_REPLICAS", "1")]
    }

    fn worker_args(&self) -> Vec<String> {
        vec!["--shards".to_owned(), CLUSTER_SHARDS.to_string()]
    }

    fn kill_and_recover(&mut self, events: &mut Vec<Event>) {
        let cluster = &mut self.cluster;
        let victim = cluster.primary_for_key(&Shard(0).load()).expect("the primary of shard 0");
        let shards: Vec<u16> = (0..CLUSTER_SHARDS)
            .filter(|&s| cluster.primary_for_key(&Shard(s).load()).expect("the primary of a shard") == victim)
            .collect();
        self.conns.clear();
        self.routes.clear();
        let lag = self.replica_lag.map(|lag| {
            let replicas = cluster.replicas_of(victim).expect("the replicas of the primary to kill");
            let replica = *replicas.first().expect("the primary to kill has a replica");
            cluster.pause(replica).expect("the replica pauses");
            let cut = cluster.cut_replication(victim).expect("CLIENT KILL TYPE replica");
            assert_eq!(cut, 1, "the primary to kill had one replication link");
            std::thread::sleep(lag);
            (replica, lag)
        });
        cluster.kill(victim);
        let killed_at = Instant::now();
        if let Some((replica, _)) = lag {
            cluster.resume(replica).expect("the replica resumes");
        }
        let lagging = match lag {
            Some((replica, lag)) => {
                format!(", its replica {replica} paused and cut off {} ms before", lag.as_millis())
            }
            None => String::new(),
        };
        events.push(Event {
            what: "redis kill",
            detail: format!("primary {victim} (shards {shards:?}){lagging}"),
            at_ms: now_ms(),
        });
        let promoted =
            cluster.wait_failover(victim, FAILOVER_WITHIN).expect("a replica takes over the killed primary");
        let took = killed_at.elapsed();
        events.push(Event {
            what: "redis failover",
            detail: format!(
                "replica {promoted} serves the slots of {victim}, {} ms after the kill",
                took.as_millis()
            ),
            at_ms: now_ms(),
        });
        // Meanwhile the promoted primary has no replica: the gateways' creates on its shards wait
        // for one (`CONVEYOR_REDIS_WAIT_REPLICAS=1`), holding up the gateway's connection to that
        // primary; each such round trip times out, and is tried again until the replica is back or
        // the gateway's outage budget is spent (then the call fails with a retryable error).
        std::thread::sleep(Duration::from_secs(2));
        let restarted_at = Instant::now();
        cluster.restart(victim).expect("the killed node starts again");
        let rejoined_under =
            cluster.wait_replica(victim, FAILOVER_WITHIN).expect("the killed node rejoins as a replica");
        let rejoin_took = restarted_at.elapsed();
        events.push(Event {
            what: "redis restart",
            detail: format!(
                "node {victim} a replica of {rejoined_under}, {} ms after its restart",
                rejoin_took.as_millis()
            ),
            at_ms: now_ms(),
        });
        self.failover =
            Some(Failover { killed: victim, shards, promoted, took, rejoined_under, rejoin_took, lag });
    }

    fn hgetall(&mut self, key: &str) -> HashMap<String, String> {
        self.query(key, redis::cmd("HGETALL").arg(key))
    }

    fn count_keys(&mut self, pattern: &str) -> usize {
        self.keys(pattern).len()
    }

    fn zcard_sum(&mut self, pattern: &str) -> usize {
        self.keys(pattern).iter().map(|k| self.query::<usize>(k, redis::cmd("ZCARD").arg(k))).sum()
    }

    fn dead_letters(&mut self) -> Vec<Vec<(String, String)>> {
        let mut letters = Vec::new();
        for shard in (0..CLUSTER_SHARDS).map(Shard) {
            let key = shard.dead_letters();
            let entries: Vec<(String, Vec<(String, String)>)> =
                self.query(&key, redis::cmd("XRANGE").arg(&key).arg("-").arg("+"));
            letters.extend(entries.into_iter().map(|(_, fields)| fields));
        }
        letters
    }

    fn load_totals(&mut self) -> HashMap<String, i64> {
        let mut totals = HashMap::new();
        for shard in (0..CLUSTER_SHARDS).map(Shard) {
            let key = shard.load();
            let hash: HashMap<String, i64> = self.query(&key, redis::cmd("HGETALL").arg(&key));
            for (field, value) in hash {
                *totals.entry(field).or_insert(0) += value;
            }
        }
        totals
    }

    fn pending_entries(&mut self) -> usize {
        self.keys("cv:{cv.*}:q:*")
            .iter()
            .map(|key| {
                // XPENDING's summary: [count, smallest id, greatest id, consumers].
                let summary: redis::Value = self.query(key, redis::cmd("XPENDING").arg(key).arg("workers"));
                match summary {
                    redis::Value::Array(items) => items
                        .first()
                        .and_then(|c| redis::from_redis_value_ref::<usize>(c).ok())
                        .expect("a pending count"),
                    other => panic!("XPENDING {key} answered {other:?}"),
                }
            })
            .sum()
    }

    fn failover(&self) -> Option<Failover> {
        self.failover.clone()
    }

    fn command_calls(&self, command: &str) -> Option<u64> {
        let stats = self.cluster.command_stats().expect("INFO commandstats of the primaries");
        Some(stats.get(command).copied().unwrap_or(0))
    }
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

/// `base` followed by `extra`.
fn with_extra(base: &[&str], extra: &[String]) -> Vec<String> {
    base.iter().map(|s| (*s).to_owned()).chain(extra.iter().cloned()).collect()
}

fn as_strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// The disruptions, on a fixed timeline while the calls are being submitted: four worker kills
/// (each followed by a replacement), one gateway kill, one Redis fault
/// ([`RedisSide::kill_and_recover`]).
fn run_chaos(
    mut redis: Box<dyn RedisSide>,
    mut gateway: Conveyor,
    mut workers: Vec<Conveyor>,
    seed: u64,
) -> Chaos {
    let url = redis.url();
    let worker_args = with_extra(WORKER_ARGS, &redis.worker_args());
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
        let replacement = Conveyor::worker(&url, &as_strs(&worker_args)).expect("a replacement worker");
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
    redis.kill_and_recover(&mut events);
    until(13.0);
    kill_worker(&mut workers, &mut dead, &mut events);
    until(15.5);
    kill_worker(&mut workers, &mut dead, &mut events);
    Chaos { started_ms, redis, workers, dead, events }
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
    conveyor_tests::process::scan(conn, pattern).expect("scan").len()
}

/// Everything Redis and the logs know about one task, for a failure message.
fn evidence(redis: &mut dyn RedisSide, logs: &[PathBuf], task_id: &str) -> String {
    let mut out = format!("--- task {task_id}\n");
    let task = redis.hgetall(&conveyor_tests::process::task_key(task_id));
    let nodes = redis.hgetall(&conveyor_tests::process::nodes_key(task_id));
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

/// The two chaos tests run one at a time: each is heavy enough on its own.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nothing_is_lost_or_done_twice_while_workers_gateways_and_redis_die() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let test_started = Instant::now();
    let redis = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "everysec", "--save", ""])
        .expect("redis");
    run_under_chaos(Box::new(SingleServer { server: redis, conn: None }), test_started).await;
}

/// The same chaos on a Redis Cluster of 3 primaries with a replica each; the Redis fault kills the
/// primary of shard 0 (with it the other shards it serves), its replica takes over, and the killed
/// node rejoins as a replica. Every process runs with [`CLUSTER_SHARDS`] shards, and the gateways
/// with `CONVEYOR_REDIS_WAIT_REPLICAS=1`.
///
/// What the failover may cost, and what the checks therefore demand: replication is asynchronous,
/// so the killed primary may have acknowledged writes its replica never got.
/// - Creates (and cancels, which this test does not send) are answered only once the replica has
///   them (`WAIT 1` in the same pipeline), so none a client was told about can be lost: every
///   call must still find its one task, and its idempotency key its first task, exactly as on one
///   server. A create whose `WAIT` went unanswered (while the promoted primary had no replica yet)
///   is tried again by the gateway, or fails with a retryable error; either way the repeat must
///   return the task the first attempt may have written.
/// - Everything workers write is not waited for: a start, a progress report, a completion (with
///   its acknowledgement, its dead letter, the dependents it released), a retry promoted, a node
///   taken over. A lost completion leaves the node running on the new primary with its entry
///   pending for a worker that has forgotten it: its lease runs out, it is taken over, and the node
///   runs again (one more `losses`, one more attempt), which these tools tolerate (same result). A
///   lost start lets a second worker start the same attempt; only one completion is taken. So the
///   checks still demand the right final status, outcome, node count, settled count and one dead
///   letter per failing call, but not one run per node: the summary counts the nodes whose
///   completion a worker saw recorded more than once (a completion lost in the failover).
///
/// On one machine the replica is rarely more than a millisecond behind, so a plain run seldom
/// loses anything; `CHAOS_REPLICA_LAG_MS=500` makes the replica lag that long before the kill (see
/// [`ClusterRedis`]) so that acknowledged worker writes are really lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nothing_is_lost_or_done_twice_on_a_redis_cluster_while_a_primary_fails_over() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let test_started = Instant::now();
    let cluster = tokio::task::block_in_place(|| RedisCluster::start(3, 1))
        .expect("a Redis Cluster of 3 primaries with a replica each");
    let spread: BTreeMap<u16, u16> = (0..CLUSTER_SHARDS)
        .map(|s| (s, cluster.primary_for_key(&Shard(s).load()).expect("the primary of a shard")))
        .collect();
    println!(
        "cluster {:?} ready after {:?}; shard -> primary: {spread:?}",
        cluster.ports(),
        test_started.elapsed()
    );
    run_under_chaos(Box::new(ClusterRedis::new(cluster)), test_started).await;
}

/// What the phases of a chaos run share.
struct Run {
    gateways: Arc<Gateways>,
    /// Gateway B, which the chaos spares; gateway A is the chaos thread's to kill.
    gateway_b: Conveyor,
    /// The logs of every process, alive or dead, for the counts and the evidence at the end.
    logs: Vec<PathBuf>,
    /// What became of each call, by its index.
    records: Vec<Submitted>,
    /// The terminal `tasks/get` result of each call whose task settled in time, by its index.
    finals: HashMap<usize, Value>,
    /// Everything found wrong, with the task it concerns when there is one.
    problems: Vec<(Option<String>, String)>,
    submit_took: Duration,
    settle_took: Duration,
}

/// What the task checks measure for the summary, from Conveyor's own timestamps in Redis.
#[derive(Default)]
struct Costs {
    /// Per task: (createdAt, settled at) in ms, for the recovery numbers.
    lifetimes: Vec<(u64, u64)>,
    /// The same with each task's shard, for the cluster's figures.
    shard_lifetimes: Vec<(u16, u64, u64)>,
    /// Per node taken over from a lost worker: the start of its last attempt.
    takeovers: Vec<u64>,
    /// How many nodes lost their worker how many times (`<node>:losses`).
    losses: BTreeMap<u32, usize>,
}

/// How many tasks the calls made, as the clients saw them and as Redis holds them.
struct Counts {
    distinct: usize,
    task_hashes: usize,
    idempotency_keys: usize,
    indexed: usize,
}

/// Runs the whole chaos against `redis`: processes, calls, faults, and every check.
async fn run_under_chaos(redis: Box<dyn RedisSide>, test_started: Instant) {
    let (mut run, gateway_a, workers) = two_gateways_and_the_workers_offer_the_chaos_tools(&*redis).await;
    let seed = std::env::var("CHAOS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(now_ms);
    let run_id = format!("{}-{seed}", std::process::id());
    println!("chaos seed {seed} (CHAOS_SEED={seed} repeats the choice of workers to kill)");
    let chaos = tokio::task::spawn_blocking(move || run_chaos(redis, gateway_a, workers, seed));
    submit_every_call_while_processes_die(&mut run, &run_id).await;
    let mut chaos = chaos.await.expect("the chaos thread");
    run.logs.extend(chaos.workers.iter().chain(&chaos.dead).map(|c| c.log.clone()));
    run.logs.sort();
    run.logs.dedup();

    wait_until_every_task_is_terminal(&mut run).await;
    send_every_call_again_now_that_redis_is_back(&mut run).await;
    no_call_was_lost_and_every_repeat_named_its_first_task(&mut run);
    let (dead_letters, letters_by_task) =
        every_dead_letter_is_of_a_task_a_call_created(&mut run, &mut *chaos.redis);
    let costs = every_task_ended_as_its_tool_implies(&mut run, &mut *chaos.redis, &letters_by_task).await;
    let counts = one_task_per_call_as_the_clients_and_redis_see_it(&mut run, &mut *chaos.redis);
    let pending_entries = chaos.redis.pending_entries();
    let load = chaos.redis.load_totals();

    print_the_calls_and_the_faults(&run, &chaos, &counts, dead_letters.len());
    print_the_recovery(&chaos, &costs, pending_entries, &load);
    print_what_the_logs_say_the_faults_cost(&run, &mut *chaos.redis);
    if let Some(failover) = chaos.redis.failover() {
        print_the_failover(&failover, &mut chaos, &run.logs, &costs);
    }
    let (submit_took, settle_took) = (run.submit_took, run.settle_took);
    println!(
        "times: submitting {submit_took:?}, settling after the last call {settle_took:?}, whole test {:?}",
        test_started.elapsed()
    );
    print_the_problems(&run, &mut *chaos.redis);
    drop(run.gateway_b);
    assert!(run.problems.is_empty(), "{} problems under chaos (see above)", run.problems.len());
}

/// Two gateways and [`WORKERS`] workers on `redis` offer the chaos tools on both gateways. Gateway
/// A and the workers are handed back apart from the rest, for the chaos thread to kill.
async fn two_gateways_and_the_workers_offer_the_chaos_tools(
    redis: &dyn RedisSide,
) -> (Run, Conveyor, Vec<Conveyor>) {
    let url = redis.url();
    let gateway_args = with_extra(GATEWAY_ARGS, &redis.gateway_args());
    let worker_args = with_extra(WORKER_ARGS, &redis.worker_args());
    let gateway_env = redis.gateway_env();
    let gateway =
        |name| Conveyor::with_env("gateway", &url, &as_strs(&gateway_args), &gateway_env).expect(name);
    let (gateway_a, gateway_b) = (gateway("gateway A"), gateway("gateway B"));
    let workers: Vec<Conveyor> =
        (0..WORKERS).map(|_| Conveyor::worker(&url, &as_strs(&worker_args)).expect("worker")).collect();
    let gateways = Arc::new(Gateways {
        clients: [Mcp::new(gateway_a.mcp_url()), Mcp::new(gateway_b.mcp_url())],
        down: [AtomicBool::new(false), AtomicBool::new(false)],
    });
    wait_for_tools(&gateways.clients[0], CHAOS_TOOLS).await;
    wait_for_tools(&gateways.clients[1], CHAOS_TOOLS).await;
    let mut logs: Vec<PathBuf> = vec![gateway_a.log.clone(), gateway_b.log.clone()];
    logs.extend(workers.iter().map(|w| w.log.clone()));
    let run = Run {
        gateways,
        gateway_b,
        logs,
        records: Vec::with_capacity(SUBMISSIONS),
        finals: HashMap::new(),
        problems: Vec::new(),
        submit_took: Duration::ZERO,
        settle_took: Duration::ZERO,
    };
    (run, gateway_a, workers)
}

/// Submits every call while the chaos thread kills processes: in batches, every call of a batch
/// at once, alternating between the gateways.
async fn submit_every_call_while_processes_die(run: &mut Run, run_id: &str) {
    let submit_started = Instant::now();
    for batch in 0..SUBMISSIONS.div_ceil(BATCH) {
        let batch_started = Instant::now();
        let calls = (batch * BATCH..((batch + 1) * BATCH).min(SUBMISSIONS))
            .map(|i| submit_maybe_twice(&run.gateways, Plan::new(i, run_id)));
        run.records.extend(futures::future::join_all(calls).await);
        tokio::time::sleep_until((batch_started + BATCH_EVERY).into()).await;
    }
    run.submit_took = submit_started.elapsed();
}

/// Waits (bounded) until every task is terminal, asking the surviving gateway.
async fn wait_until_every_task_is_terminal(run: &mut Run) {
    let survivor = &run.gateways.clients[SURVIVOR];
    let records = &run.records;
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
    run.settle_took = settle_started.elapsed();
    run.finals = finals;
}

/// Sends every call once more with its key, now that Redis is back: the keys survived (the
/// server's AOF, or the replica that had every create before its client was answered) and must
/// still name the tasks the first attempts created.
async fn send_every_call_again_now_that_redis_is_back(run: &mut Run) {
    let replays: Vec<(usize, Submitted)> = futures::stream::iter(0..run.records.len())
        .map(|i| {
            let plan = Plan { gateway: SURVIVOR, ..run.records[i].plan.clone() };
            let gateways = &run.gateways;
            async move { (i, submit(gateways, plan).await) }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    for (i, again) in replays {
        run.records[i].replays.push(again.task_id.ok_or_else(|| again.error.unwrap_or_default()));
    }
}

/// Every call got a task, and every time it was sent again with its key it got that same task.
fn no_call_was_lost_and_every_repeat_named_its_first_task(run: &mut Run) {
    for record in run.records.iter().filter(|r| r.error.is_some() || r.task_id.is_none()) {
        run.problems.push((
            None,
            format!("call #{} ({:?}) was lost: {:?}", record.plan.index, record.plan.kind, record.error),
        ));
    }
    for record in &run.records {
        for replay in record.replays.iter().filter(|r| r.as_deref().ok() != record.task_id.as_deref()) {
            run.problems.push((
                record.task_id.clone(),
                format!(
                    "call #{} sent again with its key got {replay:?}, not {:?}",
                    record.plan.index, record.task_id
                ),
            ));
        }
    }
}

/// Every dead letter names a task that a call created. Returns the dead letters (their fields)
/// and how many each task has.
fn every_dead_letter_is_of_a_task_a_call_created(
    run: &mut Run,
    redis: &mut dyn RedisSide,
) -> (Vec<HashMap<String, String>>, HashMap<String, usize>) {
    let dead_letters: Vec<HashMap<String, String>> =
        redis.dead_letters().into_iter().map(|fields| fields.into_iter().collect()).collect();
    let mut letters_by_task: HashMap<String, usize> = HashMap::new();
    for fields in &dead_letters {
        *letters_by_task.entry(fields.get("task").cloned().unwrap_or_default()).or_default() += 1;
    }
    let known: HashSet<&str> = run.records.iter().filter_map(|r| r.task_id.as_deref()).collect();
    for (task, count) in &letters_by_task {
        if !known.contains(task.as_str()) {
            run.problems
                .push((None, format!("{count} dead letter(s) for task {task}, which no call created")));
        }
    }
    (dead_letters, letters_by_task)
}

/// Every task ended with the status and outcome its tool implies, as its client sees it; in
/// Redis, all its nodes ran, ended and were counted settled, and only a protocol error left a
/// dead letter. Returns what the tasks' timestamps say about the faults' costs.
async fn every_task_ended_as_its_tool_implies(
    run: &mut Run,
    redis: &mut dyn RedisSide,
    letters_by_task: &HashMap<String, usize>,
) -> Costs {
    let mut costs = Costs::default();
    let survivor = &run.gateways.clients[SURVIVOR];
    for (i, record) in run.records.iter().enumerate() {
        let Some(id) = record.task_id.as_deref() else { continue };
        let plan = &record.plan;
        let letters = letters_by_task.get(id).copied().unwrap_or(0);
        let got = run.finals.get(&i);
        for what in task_problems(plan, id, got, survivor, redis, letters, &mut costs).await {
            run.problems.push((Some(id.to_owned()), format!("#{i} {:?}/{:?}: {what}", plan.kind, plan.wire)));
        }
    }
    costs
}

/// What is wrong with one task, given its terminal `tasks/get` result (`None` when it never
/// settled) and its dead letters; notes its lifetime and its nodes' costs.
async fn task_problems(
    plan: &Plan,
    id: &str,
    got: Option<&Value>,
    survivor: &Mcp,
    redis: &mut dyn RedisSide,
    letters: usize,
    costs: &mut Costs,
) -> Vec<String> {
    let Some(got) = got else { return vec!["not terminal within the wait".to_owned()] };
    let mut wrong = Vec::new();
    let status = got["status"].as_str().unwrap_or_default();
    if status != plan.expected_status() {
        wrong.push(format!("status {status}, expected {}", plan.expected_status()));
    }
    let outcome = client_outcome(survivor, plan.wire, id, got).await;
    if let Some(what) = check_outcome(plan, &outcome) {
        wrong.push(what);
    }
    let task = redis.hgetall(&conveyor_tests::process::task_key(id));
    let nodes = redis.hgetall(&conveyor_tests::process::nodes_key(id));
    let field = |name: &str| task.get(name).cloned().unwrap_or_default();
    // A graph counts its settled nodes; a single call keeps no counts (its one node settles
    // with its task, and the node checks below cover it).
    let counted = if field("kind") == "dag" {
        field("nodeCount") == plan.expected_nodes().to_string() && field("nodesSettled") == field("nodeCount")
    } else {
        plan.expected_nodes() == 1 && field("nodeCount").is_empty()
    };
    if !counted {
        wrong.push(format!(
            "nodesSettled {:?} against nodeCount {:?} (expected {})",
            field("nodesSettled"),
            field("nodeCount"),
            plan.expected_nodes()
        ));
    }
    wrong.extend(node_problems(plan, &nodes, costs));
    let expected_letters = usize::from(plan.kind == Kind::ProtocolError);
    if letters != expected_letters {
        wrong.push(format!("{letters} dead letters, expected {expected_letters}"));
    }
    if let (Ok(created), Ok(settled)) = (field("createdAt").parse(), field("updatedAt").parse()) {
        costs.lifetimes.push((created, settled));
        costs.shard_lifetimes.push((conveyor_tests::process::shard_of(id).0, created, settled));
    }
    wrong
}

/// What is wrong with a task's nodes hash: the number of nodes, and each node's attempt and
/// final status; notes how often each node lost its worker, and when each one taken over started.
fn node_problems(plan: &Plan, nodes: &HashMap<String, String>, costs: &mut Costs) -> Vec<String> {
    let mut wrong = Vec::new();
    let node_ids: Vec<&str> = nodes.keys().filter_map(|k| k.strip_suffix(":status")).collect();
    if node_ids.len() != plan.expected_nodes() {
        wrong.push(format!("{} nodes in Redis, expected {}", node_ids.len(), plan.expected_nodes()));
    }
    for node in &node_ids {
        let node_field = |name: &str| nodes.get(&format!("{node}:{name}")).cloned().unwrap_or_default();
        if node_field("attempt").parse::<u32>().unwrap_or(0) < 1 {
            wrong.push(format!("node {node} never ran (attempt {:?})", node_field("attempt")));
        }
        if !["completed", "failed"].contains(&node_field("status").as_str()) {
            wrong.push(format!("node {node} ended {:?}", node_field("status")));
        }
        *costs.losses.entry(node_field("losses").parse().unwrap_or(0)).or_default() += 1;
        if node_field("losses").parse::<u32>().unwrap_or(0) > 0
            && node_field("retries").parse::<u32>().unwrap_or(0) == 0
            && let Ok(started) = node_field("startedAt").parse()
        {
            costs.takeovers.push(started);
        }
    }
    wrong
}

/// Idempotency: one task per call, both as the clients saw it and as Redis holds it.
fn one_task_per_call_as_the_clients_and_redis_see_it(run: &mut Run, redis: &mut dyn RedisSide) -> Counts {
    let distinct: HashSet<&str> = run.records.iter().filter_map(|r| r.task_id.as_deref()).collect();
    let task_hashes = redis.count_keys("cv:{cv.*}:t:*");
    let idempotency_keys = redis.count_keys("cv:{cv.*}:idem:*");
    let indexed = redis.zcard_sum("cv:{cv.*}:owner:anonymous");
    for (what, n) in [
        ("distinct task ids returned", distinct.len()),
        ("task hashes in Redis", task_hashes),
        ("idempotency keys in Redis", idempotency_keys),
        ("tasks in the owner index", indexed),
    ] {
        if n != SUBMISSIONS {
            run.problems.push((None, format!("{n} {what}, expected one per call ({SUBMISSIONS})")));
        }
    }
    Counts { distinct: distinct.len(), task_hashes, idempotency_keys, indexed }
}

/// Prints the calls by kind and wire, the disruptions on their timeline, and what the calls met:
/// retries, repeats with their keys, tasks and keys in Redis, dead letters.
fn print_the_calls_and_the_faults(run: &Run, chaos: &Chaos, counts: &Counts, dead_letters: usize) {
    let records = &run.records;
    let mut by_kind: BTreeMap<String, usize> = BTreeMap::new();
    for record in records {
        *by_kind.entry(format!("{:?} on {:?}", record.plan.kind, record.plan.wire)).or_default() += 1;
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
    print_the_retries_and_repeats(records);
    let Counts { distinct, task_hashes, idempotency_keys, indexed } = counts;
    println!(
        "distinct task ids: {distinct}, task hashes in Redis: {task_hashes}, idempotency keys: {idempotency_keys}, owner index: {indexed}"
    );
    println!(
        "dead letters: {dead_letters} (protocol_error_job calls: {})",
        records.iter().filter(|r| r.plan.kind == Kind::ProtocolError).count()
    );
}

/// Prints why submissions were retried, and what the calls sent again with their keys got.
fn print_the_retries_and_repeats(records: &[Submitted]) {
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
}

/// Prints the recovery, measured two ways from Conveyor's own timestamps in Redis:
/// - in flight: for each disruption, the tasks created before it and not yet settled at that
///   moment; the longest time from the disruption to such a task's settlement. It includes the
///   task's own remaining work and any queueing, so it bounds the recovery delay from above.
/// - taken over: nodes without retries whose worker was lost (losses > 0, so an attempt was
///   taken over after its lease ran out, or after Redis came back); the longest time from the
///   latest disruption before it to the start of the node's last attempt, i.e. how long such a
///   node sat without a live worker.
fn print_the_recovery(chaos: &Chaos, costs: &Costs, pending_entries: usize, load: &HashMap<String, i64>) {
    let mut longest_in_flight = (0u64, "none", 0usize);
    for event in &chaos.events {
        let in_flight: Vec<u64> = costs
            .lifetimes
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
    let (takeover_ms, takeover_after) = costs
        .takeovers
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
        costs.takeovers.len()
    );
    println!(
        "work stream entries still pending: {}; load counters: {:?}",
        pending_entries,
        load.iter().collect::<BTreeMap<_, _>>()
    );
    println!("nodes by the number of workers they lost: {:?}", costs.losses);
}

/// Prints what the logs say about the cost of the faults: completions that had to wait for Redis
/// to come back (the worker retries them, holding its lease), and late completions from presumed
/// lost workers that were refused as stale (they leave the entry to the node's new worker).
fn print_what_the_logs_say_the_faults_cost(run: &Run, redis: &mut dyn RedisSide) {
    let logs = &run.logs;
    let idempotent = log_lines(logs, "idempotent retry: returning the earlier task");
    let unrecorded = log_lines(logs, "could not record the node's outcome yet; retrying");
    let stale = log_lines(logs, "completion refused: attempt is stale");
    let replayed: usize = run.records.iter().map(|r| r.replays.len()).sum();
    println!(
        "calls the gateways answered with an earlier task (idempotency key): {}, of which {replayed} replays \
         and {} retries whose first attempt had created the task",
        idempotent.len(),
        idempotent.len().saturating_sub(replayed)
    );
    println!("completions retried while Redis was away: {}", unrecorded.len());
    for line in unrecorded.iter().take(3) {
        let Some(task) = log_field(line, "task") else { continue };
        let nodes = redis.hgetall(&conveyor_tests::process::nodes_key(task));
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
}

/// Prints which primary the cluster's fault killed, how the cluster recovered, and what the
/// failover cost: the tasks of the killed primary's shards, and the completions run again.
fn print_the_failover(failover: &Failover, chaos: &mut Chaos, logs: &[PathBuf], costs: &Costs) {
    println!(
        "killed primary: {} (the primary of shard 0, serving shards {:?}); replica {} served its slots \
         {} ms after the kill; the killed node was a replica of {} {} ms after its restart",
        failover.killed,
        failover.shards,
        failover.promoted,
        failover.took.as_millis(),
        failover.rejoined_under,
        failover.rejoin_took.as_millis()
    );
    if let Some((replica, lag)) = failover.lag {
        println!(
            "replica {replica} was paused and cut off from the killed primary {} ms before the kill \
             (CHAOS_REPLICA_LAG_MS): what the primary acknowledged meanwhile was lost",
            lag.as_millis()
        );
    }
    if let Some(waits) = chaos.redis.command_calls("wait") {
        println!("WAIT calls counted by the primaries now (creates replicated before their answer): {waits}");
    }
    let killed_at = chaos.events.iter().find(|e| e.what == "redis kill").map_or(0, |e| e.at_ms);
    let on_victim: Vec<&(u16, u64, u64)> =
        costs.shard_lifetimes.iter().filter(|(shard, ..)| failover.shards.contains(shard)).collect();
    println!(
        "tasks in the killed primary's shards: {}, of which in flight at the kill: {}",
        on_victim.len(),
        on_victim
            .iter()
            .filter(|(_, created, settled)| *created <= killed_at && *settled > killed_at)
            .count()
    );
    print_the_completions_recorded_twice(&mut *chaos.redis, logs);
}

/// Prints the nodes whose completion a worker saw recorded more than once: a completion the
/// killed primary acknowledged but its replica never received, so that the node ran again after
/// the failover and was recorded again. Tolerated (see the cluster test's comment), counted here.
/// Failed attempts that go on to a retry are left out: a node with retries completes once per
/// attempt.
fn print_the_completions_recorded_twice(redis: &mut dyn RedisSide, logs: &[PathBuf]) {
    let mut recorded: BTreeMap<(String, String), usize> = BTreeMap::new();
    for line in log_lines(logs, "node completed").iter().filter(|l| !l.contains("outcome=Retry")) {
        if let (Some(task), Some(node)) = (log_field(line, "task"), log_field(line, "node")) {
            *recorded.entry((task.to_owned(), node.to_owned())).or_default() += 1;
        }
    }
    let again: Vec<(&(String, String), &usize)> = recorded.iter().filter(|(_, n)| **n > 1).collect();
    println!(
        "nodes whose completion a worker saw recorded more than once (lost in the failover, run again): {}",
        again.len()
    );
    for ((task, node), times) in again.iter().take(5) {
        let nodes = redis.hgetall(&conveyor_tests::process::nodes_key(task));
        let of = |field: &str| nodes.get(&format!("{node}:{field}")).cloned().unwrap_or_default();
        println!(
            "  task {task} node {node}: recorded {times} times; now attempt {}, losses {}, status {}",
            of("attempt"),
            of("losses"),
            of("status")
        );
    }
}

/// Prints every problem, what Redis and the logs know of the first ten tasks concerned, and the
/// retries of the first calls given up.
fn print_the_problems(run: &Run, redis: &mut dyn RedisSide) {
    if run.problems.is_empty() {
        return;
    }
    println!("\n=== {} problems ===", run.problems.len());
    let mut shown = HashSet::new();
    for (task, problem) in &run.problems {
        println!("{problem}");
        if let Some(task) = task
            && shown.len() < 10
            && shown.insert(task.clone())
        {
            println!("{}", evidence(redis, &run.logs, task));
        }
    }
    let retried = run.records.iter().filter(|r| r.attempts > 1);
    for record in retried.filter(|r| r.error.is_some()).take(5) {
        println!("retries of call #{}: {:?}", record.plan.index, record.retry_reasons);
    }
}
