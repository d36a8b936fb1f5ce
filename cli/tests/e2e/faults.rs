//! Workers that die mid-node, stall or lose track of what was delivered to them: their entries,
//! unrenewed for a lease, are taken over (by another worker or by the same) with a new attempt, and
//! a node that keeps killing its workers ends in the dead-letter stream.

use std::time::{Duration, Instant};

use conveyor_tests::mcp::{create_2025, status_2025, wait_for_tools};
use conveyor_tests::proxy::StallProxy;
use conveyor_tests::{Conveyor, Mcp, RedisServer, eventually};
use serde_json::{Value, json};

const LEASE: &[&str] = &["--fixtures", "--lease-ms", "1000"];

#[tokio::test]
async fn with_wait_replicas_no_client_hears_of_a_completion_before_a_replica_has_it() {
    let primary = RedisServer::start().expect("primary");
    let replica = RedisServer::start_replica_of(&primary).expect("replica");
    let args = ["--fixtures", "--redis-wait-replicas", "1", "--redis-wait-ms", "1000"];
    let up = Conveyor::up(&primary.url(), &args).expect("conveyor up");
    let mcp = Mcp::new(up.mcp_url());
    wait_for_tools(&mcp, &["slow_compute"]).await;
    // A synchronous call hears of its end once the replica has it.
    let greet = mcp.call_2025("tools/call", json!({"name": "greet", "arguments": {"name": "Ada"}})).await;
    let greet = greet.expect("tools/call greet");
    assert_eq!(greet.result()["content"][0]["text"], "Hello, Ada!", "{}", greet.raw);

    // The replica stalls while a task runs: the task completes on the primary, but no read says so.
    let task = create_2025(&mcp, "slow_compute", json!({"seconds": 1, "label": "kept"})).await;
    let mut stalled = replica.connection().expect("replica connection");
    let sleeping = std::thread::spawn(move || {
        redis::cmd("DEBUG").arg("SLEEP").arg(10).query::<()>(&mut stalled).expect("debug sleep")
    });
    primary.wait_node_status(&task, "root", "completed", Duration::from_secs(8)).await.expect("completes");
    let read = mcp.call_2025("tasks/get", json!({"taskId": task})).await.expect("tasks/get");
    assert_eq!(read.message["error"]["data"]["retryable"], true, "{}", read.raw);
    // Once the replica has it, the client sees it.
    sleeping.join().expect("the replica slept");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let read = mcp.call_2025("tasks/get", json!({"taskId": task})).await.expect("tasks/get");
        if read.result()["status"] == "completed" {
            break;
        }
        assert!(Instant::now() < deadline, "the completion never showed: {}", read.raw);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// libfaketime, which runs a process with its clock moved (`apt-get install faketime`).
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

#[tokio::test]
async fn processes_whose_clock_runs_ahead_of_redis_take_no_live_task_for_an_expired_one() {
    assert!(
        std::path::Path::new(LIBFAKETIME).exists(),
        "this test runs conveyor with its clock moved by libfaketime: apt-get install faketime"
    );
    let redis = RedisServer::start().expect("redis");
    // The gateway and the workers of `conveyor up` run 30 minutes ahead of Redis; the tasks below
    // live 10 minutes (their TTL, counted by Redis from their creation).
    let skewed = [("LD_PRELOAD", LIBFAKETIME), ("FAKETIME", "+30m"), ("FAKETIME_DONT_FAKE_MONOTONIC", "1")];
    let up = Conveyor::with_env("up", &redis.url(), &["--fixtures"], &skewed).expect("conveyor up");
    let mcp = Mcp::new(up.mcp_url());
    wait_for_tools(&mcp, &["slow_compute"]).await;
    // A graph, whose end is assembled by a worker that reads the task first, and a single call.
    let graph = json!({"nodes": [
        {"id": "a", "tool": "slow_compute", "arguments": {"seconds": 1, "label": "a"}},
        {"id": "b", "kind": "collect", "dependsOn": ["a"]}
    ], "output": "b"});
    let tasks = [
        create_2025(&mcp, "run_dag", graph).await,
        create_2025(&mcp, "slow_compute", json!({"seconds": 1, "label": "single"})).await,
    ];
    for task in tasks {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let status = status_2025(&mcp, &task).await;
            if status != "working" {
                assert_eq!(status, "completed", "task {task}");
                break;
            }
            assert!(Instant::now() < deadline, "task {task} never ended: {}", up.log_text());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // The worker counts as live by Redis's clock: `conveyor redis workers` lists it.
    let listed = std::process::Command::new(conveyor_tests::process::conveyor_bin())
        .args(["redis", "workers", "--json"])
        .env("REDIS_URL", redis.url())
        .envs(skewed)
        .output()
        .expect("conveyor redis workers");
    let workers: Vec<Value> = serde_json::from_slice(&listed.stdout).expect("a JSON list of workers");
    assert!(!workers.is_empty(), "no live worker listed: {}", String::from_utf8_lossy(&listed.stderr));
}

#[tokio::test]
async fn a_node_of_a_killed_worker_is_taken_over_when_its_lease_runs_out() {
    let redis = RedisServer::start().expect("redis");
    let gateway = Conveyor::gateway(&redis.url(), &[]).expect("gateway");
    let mut first = Conveyor::worker(&redis.url(), LEASE).expect("worker");
    let mcp = Mcp::new(gateway.mcp_url());
    wait_for_tools(&mcp, &["crash_worker"]).await;

    let task = create_2025(&mcp, "slow_compute", json!({"seconds": 3, "label": "survivor"})).await;
    redis.wait_node_status(&task, "root", "running", Duration::from_secs(10)).await.expect("the node runs");
    let first_worker = redis.node_field(&task, "root", "worker");
    first.signal("KILL");
    assert!(first.wait_exit(Duration::from_secs(5)));
    let killed_at = Instant::now();

    let _second = Conveyor::worker(&redis.url(), LEASE).expect("second worker");
    let result = mcp.call_2025("tasks/result", json!({"taskId": task})).await.expect("tasks/result");
    assert_eq!(result.result()["content"][0]["text"], "computed survivor", "{}", result.raw);
    println!("recovered {:?} after the kill", killed_at.elapsed());
    assert_eq!(
        redis.node_field(&task, "root", "attempt").as_deref(),
        Some("2"),
        "the new worker ran attempt 2"
    );
    assert_ne!(redis.node_field(&task, "root", "worker"), first_worker, "another worker finished it");
    assert_eq!(redis.node_field(&task, "root", "losses").as_deref(), Some("1"));
}

#[tokio::test]
async fn a_node_that_keeps_killing_its_workers_is_dead_lettered() {
    let redis = RedisServer::start().expect("redis");
    let gateway = Conveyor::gateway(&redis.url(), &[]).expect("gateway");
    let args = ["--fixtures", "--lease-ms", "1000", "--max-node-losses", "2"];
    let mcp = Mcp::new(gateway.mcp_url());
    let mut worker = Conveyor::worker(&redis.url(), &args).expect("worker");
    wait_for_tools(&mcp, &["crash_worker"]).await;
    let task = create_2025(&mcp, "crash_worker", json!({})).await;

    // A supervisor restarts the worker each time the node kills it.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut crashes = 0;
    loop {
        let status = mcp.call_2025("tasks/get", json!({"taskId": task})).await.expect("tasks/get");
        if status.result()["status"] == "failed" {
            let message = status.result()["statusMessage"].as_str().unwrap_or_default().to_owned();
            assert!(message.contains("lost its worker 2 times"), "{message}");
            assert!(message.contains("dead letter"), "{message}");
            break;
        }
        assert!(Instant::now() < deadline, "the task never failed: {}", status.raw);
        if worker.wait_exit(Duration::from_millis(100)) {
            crashes += 1;
            worker = Conveyor::worker(&redis.url(), &args).expect("restarted worker");
        }
    }
    assert_eq!(crashes, 2, "two workers died before the node was given up");

    let dead = redis.dead_letters();
    assert_eq!(dead.len(), 1, "{dead:?}");
    let fields = &dead[0];
    assert!(fields.iter().any(|(k, v)| k == "task" && *v == task), "{fields:?}");
    assert!(fields.iter().any(|(k, v)| k == "tool" && v == "crash_worker"), "{fields:?}");
}

#[tokio::test]
async fn operators_list_and_retry_dead_letters() {
    let redis = RedisServer::start().expect("redis");
    let conveyor = Conveyor::up(&redis.url(), &["--fixtures"]).expect("conveyor");
    let mcp = Mcp::new(conveyor.mcp_url());
    wait_for_tools(&mcp, &["crash_worker"]).await;
    let task = create_2025(&mcp, "protocol_error_job", json!({})).await;
    let failed = mcp.call_2025("tasks/result", json!({"taskId": task})).await.expect("tasks/result");
    assert_eq!(failed.error_code(), Some(-32603), "{}", failed.raw);

    let conveyor_cmd = |args: &[&str]| {
        let output = std::process::Command::new(conveyor_tests::process::conveyor_bin())
            .args(args)
            .env("REDIS_URL", redis.url())
            .output()
            .expect("conveyor runs");
        assert!(output.status.success(), "{}", conveyor_tests::process::output_text(&output));
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let listed: Value =
        serde_json::from_str(&conveyor_cmd(&["redis", "dlq", "list", "--json"])).expect("json");
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!(listed[0]["taskId"], task.as_str());
    assert_eq!(listed[0]["error"]["message"], "protocol_error_job exploded");
    let text = conveyor_cmd(&["redis", "dlq", "list"]);
    assert!(text.contains("protocol_error_job") && text.contains("exploded"), "{text}");

    let letter = listed[0]["id"].as_str().expect("id").to_owned();
    let retried = conveyor_cmd(&["redis", "dlq", "retry", &letter]).trim().to_owned();
    assert_eq!(retried.len(), 32, "prints the new task id: {retried}");
    let again = mcp.call_2025("tasks/result", json!({"taskId": retried})).await.expect("tasks/result");
    assert_eq!(again.error_code(), Some(-32603), "the node ran again: {}", again.raw);
    let listed: Value =
        serde_json::from_str(&conveyor_cmd(&["redis", "dlq", "list", "--json"])).expect("json");
    assert_eq!(
        listed.as_array().map(Vec::len),
        Some(1),
        "the retried letter is gone, the new failure is there: {listed}"
    );
    assert_eq!(listed[0]["taskId"], retried.as_str());
}

#[tokio::test]
async fn over_a_limit_a_call_fails_at_once_saying_which_limit_and_when_to_retry() {
    let redis = RedisServer::start().expect("redis");
    // One shard, so that the deployment's limit is the shard's (each of S shards enforces its
    // share of a limit, rounded up).
    let gateway =
        Conveyor::gateway(&redis.url(), &["--max-queued-per-tool", "3", "--shards", "1"]).expect("gateway");
    let mut worker = Conveyor::worker(&redis.url(), &["--fixtures", "--shards", "1"]).expect("worker");
    let mcp = Mcp::new(gateway.mcp_url());
    wait_for_tools(&mcp, &["crash_worker"]).await;
    worker.kill(); // nothing drains the queue now

    let mut tasks = Vec::new();
    for i in 0..3 {
        tasks.push(create_2025(&mcp, "slow_compute", json!({"seconds": 0, "label": format!("q{i}")})).await);
    }
    let started = Instant::now();
    let refused = mcp
        .call_2025("tools/call", json!({"name": "slow_compute", "arguments": {"seconds": 0}, "task": {}}))
        .await
        .expect("a reply");
    assert!(started.elapsed() < Duration::from_secs(2), "refused at once");
    assert_eq!(refused.error_code(), Some(-32029), "{}", refused.raw);
    let message = refused.message["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("3 queued nodes of tool `slow_compute`") && message.contains("Retry in"),
        "{message}"
    );
    assert_eq!(refused.message["error"]["data"]["retryAfterMs"], 1000);
    // Other tools are not held up by this one's queue.
    let other = create_2025(&mcp, "echo", json!({"x": 1})).await;

    let _worker = Conveyor::worker(&redis.url(), &["--fixtures", "--shards", "1"])
        .expect("a new worker drains the queue");
    for task in tasks.iter().chain([&other]) {
        let result = mcp.call_2025("tasks/result", json!({"taskId": task})).await.expect("result");
        assert!(result.error_code().is_none(), "{}", result.raw);
    }
    let accepted = create_2025(&mcp, "slow_compute", json!({"seconds": 0})).await;
    assert_eq!(accepted.len(), 32, "room again once the queue drained");
}

#[tokio::test]
async fn a_hung_worker_that_wakes_up_cannot_take_its_node_back() {
    let redis = RedisServer::start().expect("redis");
    let gateway = Conveyor::gateway(&redis.url(), &[]).expect("gateway");
    let hung = Conveyor::worker(&redis.url(), LEASE).expect("worker A");
    let mcp = Mcp::new(gateway.mcp_url());
    wait_for_tools(&mcp, &["crash_worker"]).await;
    let task = create_2025(&mcp, "slow_compute", json!({"seconds": 4, "label": "fenced"})).await;
    redis.wait_node_status(&task, "root", "running", Duration::from_secs(10)).await.expect("the node runs");
    hung.signal("STOP");
    let mut second = Conveyor::worker(&redis.url(), LEASE).expect("worker B");
    let deadline = Instant::now() + Duration::from_secs(15);
    while redis.node_field(&task, "root", "attempt").as_deref() != Some("2") {
        assert!(Instant::now() < deadline, "worker B never took the node over");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A wakes up: its next lease renewal finds the entry taken over and stops the tool (or, had
    // the tool finished first, its completion is refused as stale); B keeps the node.
    hung.signal("CONT");
    let deadline = Instant::now() + Duration::from_secs(15);
    while !hung.log_text().contains("stopped a node another worker took over")
        && !hung.log_text().contains("attempt is stale")
    {
        assert!(Instant::now() < deadline, "worker A never reported:\n{}", hung.log_text());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // B dies too; a third worker must still find the node and finish it.
    second.kill();
    let _third = Conveyor::worker(&redis.url(), LEASE).expect("worker C");
    let result = mcp.call_2025("tasks/result", json!({"taskId": task})).await.expect("tasks/result");
    assert_eq!(result.result()["content"][0]["text"], "computed fenced", "{}", result.raw);
    assert_eq!(redis.node_field(&task, "root", "attempt").as_deref(), Some("3"));
}

/// `calls` of `command` in Redis's command statistics.
fn command_calls(conn: &mut redis::Connection, command: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(conn).expect("info");
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .and_then(|calls| calls.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn a_due_item_that_keeps_failing_does_not_make_maintenance_spin() {
    let redis = RedisServer::start().expect("redis");
    let mut conn = redis.connection().expect("conn");
    // A retry entry that cannot be read, due since long ago, in every shard.
    for shard in 0..4 {
        let key = conveyor_shared::keys::Shard(shard).retries();
        let _: () =
            redis::cmd("ZADD").arg(&key).arg(0).arg("not a retry entry").query(&mut conn).expect("zadd");
    }
    let _worker = Conveyor::worker(&redis.url(), &["--fixtures"]).expect("worker");
    // Once the worker runs its maintenance, count its scripts over two seconds.
    let deadline = Instant::now() + Duration::from_secs(20);
    while command_calls(&mut conn, "evalsha") == 0 {
        assert!(Instant::now() < deadline, "the worker never ran its maintenance");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = command_calls(&mut conn, "evalsha");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let scripts = command_calls(&mut conn, "evalsha") - before;
    // Four shards looked at about once a second each, and nothing else to do: a few dozen at most.
    assert!(scripts < 100, "{scripts} scripts in 2 s from an idle worker with a bad retry entry");
    let left: u64 =
        redis::cmd("ZCARD").arg(conveyor_shared::keys::Shard(0).retries()).query(&mut conn).expect("zcard");
    assert_eq!(left, 1, "the bad entry stays for an operator to see");
}

/// A node of `flaky` that fails its first two attempts, each of which takes `seconds`, with one
/// retry: two tries of the tool's are all it may spend. A worker stops reading within 2 s of its stop.
async fn create_flaky(mcp: &Mcp) -> String {
    let graph = json!({"nodes": [
        {"id": "a", "tool": "flaky", "arguments": {"failures": 2, "seconds": 4}, "retries": 1, "backoffMs": 10}
    ]});
    create_2025(mcp, "run_dag", graph).await
}

async fn assert_completes_on_attempt_3(mcp: &Mcp, redis: &RedisServer, task: &str) {
    let result = mcp.call_2025("tasks/result", json!({"taskId": task})).await.expect("tasks/result");
    assert_eq!(result.result()["isError"], false, "the graph failed: {}", result.raw);
    assert_eq!(redis.node_field(task, "a", "attempt").as_deref(), Some("3"), "{}", result.raw);
}

#[tokio::test]
async fn a_lost_worker_spends_none_of_its_nodes_retries() {
    let redis = RedisServer::start().expect("redis");
    let gateway = Conveyor::gateway(&redis.url(), &[]).expect("gateway");
    let mut first = Conveyor::worker(&redis.url(), LEASE).expect("worker");
    let mcp = Mcp::new(gateway.mcp_url());
    wait_for_tools(&mcp, &["crash_worker"]).await;
    let task = create_flaky(&mcp).await;
    redis.wait_node_status(&task, "a", "running", Duration::from_secs(10)).await.expect("the node runs");
    first.signal("KILL");
    assert!(first.wait_exit(Duration::from_secs(5)));
    // Attempt 2 is the tool's first try (it fails); its retry, attempt 3, succeeds.
    let _second = Conveyor::worker(&redis.url(), LEASE).expect("second worker");
    assert_completes_on_attempt_3(&mcp, &redis, &task).await;
    assert_eq!(redis.node_field(&task, "a", "losses").as_deref(), Some("1"));
}

#[tokio::test]
async fn a_node_handed_back_at_shutdown_spends_none_of_its_retries() {
    let redis = RedisServer::start().expect("redis");
    let gateway = Conveyor::gateway(&redis.url(), &[]).expect("gateway");
    let args = ["--fixtures", "--shutdown-grace-ms", "100"];
    let mut first = Conveyor::worker(&redis.url(), &args).expect("worker");
    let mcp = Mcp::new(gateway.mcp_url());
    wait_for_tools(&mcp, &["crash_worker"]).await;
    let task = create_flaky(&mcp).await;
    redis.wait_node_status(&task, "a", "running", Duration::from_secs(10)).await.expect("the node runs");
    first.signal("TERM");
    assert!(first.wait_exit(Duration::from_secs(10)), "the worker did not stop");
    assert!(first.log_text().contains("handing them back"), "{}", first.log_text());
    let _second = Conveyor::worker(&redis.url(), &args).expect("second worker");
    assert_completes_on_attempt_3(&mcp, &redis, &task).await;
    assert_eq!(redis.node_field(&task, "a", "losses"), None, "a hand-back is no loss");
}

#[tokio::test]
async fn a_worker_restarted_under_its_name_runs_what_was_delivered_to_it_at_once() {
    let redis = RedisServer::start().expect("redis");
    let gateway = Conveyor::gateway(&redis.url(), &[]).expect("gateway");
    // The default 30 s lease: what is delivered to a lost worker would wait that long.
    let args = ["--fixtures", "--name", "steady-worker"];
    let mut first = Conveyor::worker(&redis.url(), &args).expect("worker");
    let mcp = Mcp::new(gateway.mcp_url());
    wait_for_tools(&mcp, &["crash_worker"]).await;
    first.signal("STOP");
    let task = create_2025(&mcp, "slow_compute", json!({"seconds": 0, "label": "again"})).await;
    // The stopped worker's blocked read takes the entry: Redis counts it as delivered, and the
    // reply sits unread in a socket that dies with the worker, as a reply lost with a restarted
    // Redis would.
    let mut conn = redis.connection().expect("conn");
    let stream = conveyor_tests::process::shard_of(&task).queue("slow_compute");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let pending: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
            .arg(&stream)
            .arg(conveyor_shared::keys::WORK_GROUP)
            .arg("-")
            .arg("+")
            .arg(10)
            .arg("steady-worker")
            .query(&mut conn)
            .expect("xpending");
        if !pending.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "the entry was never delivered to the stopped worker");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    first.kill();
    let restarted_at = Instant::now();
    let _again = Conveyor::worker(&redis.url(), &args).expect("restarted worker");
    let result = mcp.call_2025("tasks/result", json!({"taskId": task})).await.expect("tasks/result");
    assert_eq!(result.result()["content"][0]["text"], "computed again", "{}", result.raw);
    let took = restarted_at.elapsed();
    println!("ran {took:?} after the restart");
    assert!(took < Duration::from_secs(20), "it waited for the lease to run out: {took:?}");
    assert_eq!(redis.node_field(&task, "root", "attempt").as_deref(), Some("1"), "no loss, no retry");
}

#[tokio::test]
async fn a_worker_name_that_is_not_a_plain_word_is_refused() {
    let redis = RedisServer::start().expect("redis");
    let mut worker = Conveyor::worker(&redis.url(), &["--fixtures", "--name", "a b"]).expect("worker");
    assert!(worker.wait_exit(Duration::from_secs(20)), "the worker started");
    assert!(worker.log_text().contains("CONVEYOR_WORKER_NAME must be"), "{}", worker.log_text());
}

#[tokio::test]
async fn an_idle_deployment_sends_its_heartbeats_and_blocking_reads_only() {
    let redis = RedisServer::start().expect("redis");
    let gateway = Conveyor::gateway(&redis.url(), &[]).expect("gateway");
    let workers: Vec<Conveyor> =
        (0..2).map(|_| Conveyor::worker(&redis.url(), &["--fixtures"]).expect("worker")).collect();
    let mcp = Mcp::new(gateway.mcp_url());
    wait_for_tools(&mcp, &["crash_worker"]).await;
    // One task that ends at once, so that every shard's maintenance has had something to plan.
    let task = create_2025(&mcp, "slow_compute", json!({"seconds": 0})).await;
    mcp.call_2025("tasks/result", json!({"taskId": task})).await.expect("tasks/result");
    // Once one worker holds the maintenance lease and has made its first looks, all is quiet.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !workers.iter().any(|w| w.log_text().contains("runs the deployment's maintenance")) {
        assert!(Instant::now() < deadline, "no worker took up the maintenance");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;

    let mut conn = redis.connection().expect("conn");
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut conn).expect("resetstat");
    let window = Duration::from_secs(15);
    tokio::time::sleep(window).await;
    let info: String = redis::cmd("INFO").arg("commandstats").query(&mut conn).expect("info");
    let mut counts: Vec<(String, u64)> = info
        .lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(":calls=")?;
            Some((name.to_owned(), rest.split(',').next()?.parse().ok()?))
        })
        .filter(|(name, _)| !["xreadgroup", "info", "config|resetstat"].contains(&name.as_str()))
        .collect();
    counts.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    let total: u64 = counts.iter().map(|(_, n)| n).sum();
    let per_second = total as f64 / window.as_secs_f64();
    println!("idle: {per_second:.2} commands/s beyond blocking reads: {counts:?}");
    // Two workers' heartbeats (a script of 5 to 7 commands every 7.5 s each) and the pub/sub
    // keepalives: under 2 a second. A timer per shard or per stream would be dozens.
    for scan in ["xautoclaim", "xpending", "zrangebyscore"] {
        assert!(!counts.iter().any(|(name, _)| name == scan), "{scan} while idle: {counts:?}");
    }
    assert!(per_second <= 2.5, "{per_second:.2} commands/s while idle: {counts:?}");
}

#[tokio::test]
async fn a_stopped_workers_tools_leave_the_catalog_unless_another_worker_offers_them() {
    let redis = RedisServer::start().expect("redis");
    let gateway = Conveyor::gateway(&redis.url(), &[]).expect("gateway");
    let mut full = Conveyor::worker(&redis.url(), &["--fixtures"]).expect("worker");
    let _noop = Conveyor::worker(&redis.url(), &["--fixtures", "--tools", "noop"]).expect("noop worker");
    let mcp = Mcp::new(gateway.mcp_url());
    wait_for_tools(&mcp, &["crash_worker"]).await;
    let mut conn = redis.connection().expect("conn");
    let tools = |conn: &mut redis::Connection| -> Vec<String> {
        redis::cmd("HKEYS").arg(conveyor_shared::keys::TOOLS).query(conn).expect("hkeys")
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !tools(&mut conn).contains(&"noop".to_owned()) {
        assert!(Instant::now() < deadline, "noop was never published");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(tools(&mut conn).contains(&"crash_worker".to_owned()));
    full.signal("TERM");
    assert!(full.wait_exit(Duration::from_secs(20)), "the worker did not stop");
    let left = tools(&mut conn);
    assert!(left.contains(&"noop".to_owned()), "{left:?}");
    assert!(!left.contains(&"crash_worker".to_owned()), "a tool no worker offers stays: {left:?}");
}

/// The status `tasks/get` shows for `task`.
async fn status_of(mcp: &Mcp, task: &str) -> String {
    let reply = mcp.call_2025("tasks/get", json!({"taskId": task})).await.expect("tasks/get");
    reply.result()["status"].as_str().unwrap_or_default().to_owned()
}

/// Waits until `task` has completed; fails if it has not by `deadline`, saying what it shows.
async fn completes_by(mcp: &Mcp, task: &str, deadline: Instant, logs: impl Fn() -> String) {
    loop {
        let status = status_of(mcp, task).await;
        if status == "completed" {
            return;
        }
        assert!(Instant::now() < deadline, "task {task} is still {status}; logs:\n{}", logs());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn a_worker_whose_commands_stall_right_after_a_delivery_still_runs_the_node() {
    let redis = RedisServer::start().expect("redis");
    let proxy = StallProxy::start(redis.port).expect("proxy");
    let gateway = Conveyor::gateway(&redis.url(), &[]).expect("gateway");
    // The worker alone talks to Redis through the proxy; it is also the maintenance holder.
    let worker = Conveyor::worker(&proxy.url(), &["--fixtures", "--lease-ms", "3000"]).expect("worker");
    let mcp = Mcp::new(gateway.mcp_url());
    wait_for_tools(&mcp, &["crash_worker"]).await;
    eventually(Duration::from_secs(20), "the worker to run the maintenance", async || {
        worker.log_text().contains("runs the deployment's maintenance").then_some(())
    })
    .await;

    // The reply that delivers the task's entry reaches the worker; what it sends next (the start
    // of the node, its heartbeats) waits 7 s, more than twice its lease, and then goes through.
    proxy.stall_after_reply_containing(":q:slow_compute", Duration::from_secs(7));
    let task = create_2025(&mcp, "slow_compute", json!({"seconds": 0, "label": "stalled"})).await;
    let (_, stall_ended) =
        eventually(Duration::from_secs(10), "the delivery to the worker", async || proxy.stalled()).await;
    tokio::time::sleep_until((stall_ended - Duration::from_secs(1)).into()).await;
    assert_eq!(status_of(&mcp, &task).await, "working", "the node ran during the stall");
    tokio::time::sleep_until(stall_ended.into()).await;

    // The worker is alive throughout: what it failed to start is started on a later try, or
    // queued again once it has gone unrenewed for a lease.
    completes_by(&mcp, &task, Instant::now() + Duration::from_secs(20), || worker.log_text()).await;
    let result = mcp.call_2025("tasks/result", json!({"taskId": task})).await.expect("tasks/result");
    assert_eq!(result.result()["content"][0]["text"], "computed stalled", "{}", result.raw);
}

#[tokio::test]
async fn an_entry_a_live_worker_holds_but_never_runs_is_taken_over() {
    let redis = RedisServer::start().expect("redis");
    let gateway = Conveyor::gateway(&redis.url(), &[]).expect("gateway");
    // One slot: while it runs a node, the worker reads nothing.
    let worker = Conveyor::worker(&redis.url(), &["--fixtures", "--lease-ms", "1000", "--concurrency", "1"])
        .expect("worker");
    let mcp = Mcp::new(gateway.mcp_url());
    wait_for_tools(&mcp, &["crash_worker"]).await;
    let name =
        eventually(Duration::from_secs(10), "the worker's name", async || worker.logged_worker_name()).await;
    let busy = create_2025(&mcp, "slow_compute", json!({"seconds": 5, "label": "busy"})).await;
    redis.wait_node_status(&busy, "root", "running", Duration::from_secs(10)).await.expect("the node runs");

    // An entry is delivered to the worker without its knowing (as when a start failed after the
    // read): it stays pending with a live worker that renews only the node it runs.
    let stranded = create_2025(&mcp, "slow_compute", json!({"seconds": 0, "label": "stranded"})).await;
    let stream = conveyor_tests::process::shard_of(&stranded).queue("slow_compute");
    let mut conn = redis.connection().expect("conn");
    let read: redis::streams::StreamReadReply = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg(conveyor_shared::keys::WORK_GROUP)
        .arg(&name)
        .arg("COUNT")
        .arg(10)
        .arg("STREAMS")
        .arg(&stream)
        .arg(">")
        .query(&mut conn)
        .expect("xreadgroup");
    let delivered: Vec<&str> = read.keys.iter().flat_map(|k| k.ids.iter().map(|i| i.id.as_str())).collect();
    assert_eq!(delivered.len(), 1, "the stranded task's entry went to the worker: {delivered:?}");

    completes_by(&mcp, &stranded, Instant::now() + Duration::from_secs(30), || worker.log_text()).await;
    assert!(
        worker.log_text().contains("took over a node whose entry went unrenewed"),
        "{}",
        worker.log_text()
    );
    assert_eq!(redis.node_field(&stranded, "root", "attempt").as_deref(), Some("1"), "it never ran before");
    assert_eq!(redis.node_field(&stranded, "root", "losses"), None, "never started: no worker was lost");
    assert_eq!(status_of(&mcp, &busy).await, "completed", "the node the worker ran was left alone");
    assert_eq!(redis.node_field(&busy, "root", "attempt").as_deref(), Some("1"));
}

#[tokio::test]
async fn after_a_rolling_restart_a_killed_workers_node_is_taken_over_within_a_lease() {
    let redis = RedisServer::start().expect("redis");
    let gateway = Conveyor::gateway(&redis.url(), &[]).expect("gateway");
    let mcp = Mcp::new(gateway.mcp_url());
    // The old generation holds the maintenance for 25 s unrenewed (a 40 s lease); the new one's
    // lease is 2 s, so a takeover that waits for the old holder's lease to run out is plain.
    let old_args = ["--fixtures", "--lease-ms", "40000"];
    let mut old: Vec<Conveyor> =
        (0..2).map(|_| Conveyor::worker(&redis.url(), &old_args).expect("old worker")).collect();
    wait_for_tools(&mcp, &["crash_worker"]).await;
    eventually(Duration::from_secs(20), "an old worker to run the maintenance", async || {
        old.iter().any(|w| w.log_text().contains("runs the deployment's maintenance")).then_some(())
    })
    .await;
    for worker in &old {
        worker.signal("TERM");
    }
    for worker in &mut old {
        assert!(worker.wait_exit(Duration::from_secs(20)), "an old worker did not stop");
    }

    let new_args = ["--fixtures", "--lease-ms", "2000"];
    let mut new = vec![Conveyor::worker(&redis.url(), &new_args).expect("worker A")];
    wait_for_tools(&mcp, &["crash_worker"]).await;
    new.push(Conveyor::worker(&redis.url(), &new_args).expect("worker B"));
    let names: Vec<String> =
        futures::future::join_all(new.iter().map(|w| {
            eventually(Duration::from_secs(10), "a worker's name", async || w.logged_worker_name())
        }))
        .await;

    let task = create_2025(&mcp, "slow_compute", json!({"seconds": 3, "label": "rolled"})).await;
    redis.wait_node_status(&task, "root", "running", Duration::from_secs(10)).await.expect("the node runs");
    let runner = redis.node_field(&task, "root", "worker").expect("the node's worker");
    let victim = names.iter().position(|n| *n == runner).expect("a new worker runs the node");
    new[victim].signal("KILL");
    assert!(new[victim].wait_exit(Duration::from_secs(5)));
    let killed_at = Instant::now();

    // The survivor takes the node over once the killed worker's lease has run out: a stopped old
    // worker's maintenance lease, handed over on its way out, holds nothing up.
    let survivor = &new[1 - victim];
    completes_by(&mcp, &task, killed_at + Duration::from_secs(12), || survivor.log_text()).await;
    println!("completed {:?} after the kill", killed_at.elapsed());
    assert_eq!(redis.node_field(&task, "root", "attempt").as_deref(), Some("2"));
    assert_eq!(redis.node_field(&task, "root", "losses").as_deref(), Some("1"));
    assert_eq!(redis.node_field(&task, "root", "worker"), Some(names[1 - victim].clone()));
}

#[tokio::test]
async fn an_unreadable_task_in_a_batch_fails_alone_and_the_others_run() {
    use conveyor_shared::call::CallRecord;
    use conveyor_shared::keys::Shard;
    use conveyor_shared::store::{Created, Limits, NewTask};

    let redis = RedisServer::start().expect("redis");
    let store = conveyor_shared::Store::new(&redis.url(), Duration::from_secs(2)).expect("store");
    store.ensure_groups(&["slow_compute".to_owned()]).await.expect("groups");
    // Two calls queued in one shard before any worker runs, so that one read brings both and one
    // script starts both; the first one's stored call record cannot be read.
    let call = |label: &str| NewTask {
        call: CallRecord {
            wire: "2025-11-25".to_owned(),
            arguments: json!({"seconds": 0, "label": label}),
            ..CallRecord::default()
        },
        ttl_ms: 120_000,
        traceparent: None,
        ..crate::store::new_task(Shard(0))
    };
    let (bad, good) = (call("bad"), call("good"));
    for task in [&bad, &good] {
        assert_eq!(store.create_task(task, &Limits::default()).await.expect("create"), Created::Created);
    }
    let mut conn = redis.connection().expect("conn");
    let _: () = redis::cmd("HSET")
        .arg(conveyor_tests::process::task_key(&bad.task_id))
        .arg("call")
        .arg("{not a call record")
        .query(&mut conn)
        .expect("hset");

    let worker = Conveyor::worker(&redis.url(), &["--fixtures"]).expect("worker");
    let settled = async |id: &str| {
        eventually(Duration::from_secs(20), "the task to settle", async || {
            let task = store.get_task(id).await.ok().flatten()?;
            task.status.is_terminal().then_some(task)
        })
        .await
    };
    let good_task = settled(&good.task_id).await;
    assert_eq!(good_task.status.as_str(), "completed", "{good_task:?}\n{}", worker.log_text());
    let bad_task = settled(&bad.task_id).await;
    assert_eq!(bad_task.status.as_str(), "failed", "{bad_task:?}");
    let message = bad_task.status_message.unwrap_or_default();
    assert!(message.contains("cannot be read"), "{message}");
}
