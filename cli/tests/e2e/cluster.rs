//! Several real gateway and worker processes against one real Redis: any gateway answers for any
//! task, cancellation reaches the worker running the tool, killed workers lose nothing queued, and
//! the whole cluster rides out a Redis restart.

use std::time::{Duration, Instant};

use conveyor_tests::mcp::tasks_client_capabilities;
use conveyor_tests::mcp::{create_2025, status_2025, wait_for_tools};
use conveyor_tests::process::task_key;
use conveyor_tests::{Conveyor, Mcp, RedisServer, eventually};
use serde_json::json;

#[tokio::test]
async fn any_gateway_reads_awaits_and_cancels_any_task() {
    let redis = RedisServer::start().expect("redis");
    let gateway_a = Conveyor::gateway(&redis.url(), &[]).expect("gateway A");
    let gateway_b = Conveyor::gateway(&redis.url(), &[]).expect("gateway B");
    let _worker = Conveyor::worker(&redis.url(), &["--fixtures"]).expect("worker");
    let (a, b) = (Mcp::new(gateway_a.mcp_url()), Mcp::new(gateway_b.mcp_url()));
    wait_for_tools(&a, &["slow_compute"]).await;

    // Created on A, read and awaited on B.
    let task = create_2025(&a, "slow_compute", json!({"seconds": 1, "label": "cross"})).await;
    assert_eq!(status_2025(&b, &task).await, "working");
    let result = b.call_2025("tasks/result", json!({"taskId": task})).await.expect("tasks/result");
    assert_eq!(result.result()["content"][0]["text"], "computed cross", "{}", result.raw);
    assert_eq!(result.result()["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], task.as_str());
    assert_eq!(status_2025(&a, &task).await, "completed");

    // Created on A, cancelled on B; A sees the cancellation.
    let task = create_2025(&a, "slow_compute", json!({"seconds": 30})).await;
    let cancelled = b.call_2025("tasks/cancel", json!({"taskId": task})).await.expect("tasks/cancel");
    assert_eq!(cancelled.result()["status"], "cancelled", "{}", cancelled.raw);
    assert_eq!(status_2025(&a, &task).await, "cancelled");

    // The same on the 2026-07-28 wire.
    let caps = tasks_client_capabilities();
    let created = a
        .call_2026(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 1, "label": "wire26"}}),
            caps.clone(),
        )
        .await
        .expect("tools/call");
    assert_eq!(created.result()["resultType"], "task", "{}", created.raw);
    let task = created.result()["taskId"].as_str().expect("task id").to_owned();
    let done = eventually(Duration::from_secs(10), "the task to complete on B", async || {
        let got = b.call_2026("tasks/get", json!({"taskId": task}), caps.clone()).await.ok()?;
        (got.result()["status"] == "completed").then(|| got.result().clone())
    })
    .await;
    assert_eq!(done["result"]["content"][0]["text"], "computed wire26");
}

#[tokio::test]
async fn cancel_stops_the_running_tool_on_its_worker() {
    let redis = RedisServer::start().expect("redis");
    let conveyor = Conveyor::gateway(&redis.url(), &[]).expect("gateway");
    let _worker = Conveyor::worker(&redis.url(), &["--fixtures"]).expect("worker");
    let mcp = Mcp::new(conveyor.mcp_url());
    wait_for_tools(&mcp, &["slow_compute"]).await;

    let task = create_2025(&mcp, "slow_compute", json!({"seconds": 60})).await;
    redis.wait_node_status(&task, "root", "running", Duration::from_secs(10)).await.expect("the node runs");
    let cancelled_at = conveyor_shared_now_ms();
    let reply = mcp.call_2025("tasks/cancel", json!({"taskId": task})).await.expect("tasks/cancel");
    assert_eq!(reply.result()["status"], "cancelled", "{}", reply.raw);

    // The worker records the node as stopped by cancellation once the tool has returned: long
    // before the 60 s it would have run. (How long the stop took is printed, not asserted: on a
    // loaded machine it varies, and what matters is that the cancel reached the running tool.)
    let finished_at: u64 = eventually(Duration::from_secs(20), "the tool to stop", async || {
        if redis.node_field(&task, "root", "status").as_deref() != Some("cancelled") {
            return None;
        }
        redis.node_field(&task, "root", "finishedAt")?.parse().ok()
    })
    .await;
    let stop_ms = finished_at.saturating_sub(cancelled_at);
    println!("cancel-to-stop: {stop_ms} ms (tasks/cancel sent to tool returned and recorded)");
    // The task stays cancelled.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(status_2025(&mcp, &task).await, "cancelled");
}

fn conveyor_shared_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[tokio::test]
async fn a_worker_killed_while_idle_loses_no_queued_task() {
    let redis = RedisServer::start().expect("redis");
    let gateway = Conveyor::gateway(&redis.url(), &[]).expect("gateway");
    let mut first = Conveyor::worker(&redis.url(), &["--fixtures"]).expect("worker");
    let mcp = Mcp::new(gateway.mcp_url());
    wait_for_tools(&mcp, &["slow_compute"]).await;
    first.signal("KILL");
    assert!(first.wait_exit(Duration::from_secs(5)), "the worker died");

    let mut tasks = Vec::new();
    for i in 0..5 {
        tasks.push(
            create_2025(&mcp, "slow_compute", json!({"seconds": 0, "label": format!("queued-{i}")})).await,
        );
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    for task in &tasks {
        assert_eq!(status_2025(&mcp, task).await, "working", "nothing runs without a worker");
    }

    // One queued task is cancelled before any worker sees it.
    let cancelled = create_2025(&mcp, "slow_compute", json!({"seconds": 0, "label": "never"})).await;
    mcp.call_2025("tasks/cancel", json!({"taskId": cancelled})).await.expect("tasks/cancel");

    let _second = Conveyor::worker(&redis.url(), &["--fixtures"]).expect("second worker");
    for (i, task) in tasks.iter().enumerate() {
        let result = mcp.call_2025("tasks/result", json!({"taskId": task})).await.expect("tasks/result");
        assert_eq!(result.result()["content"][0]["text"], format!("computed queued-{i}"), "{}", result.raw);
    }
    // The cancelled task's entry is acknowledged without running its node.
    // Acknowledged entries are deleted: nothing pending, nothing undelivered is left.
    eventually(Duration::from_secs(5), "every entry acknowledged", async || {
        (redis.pending_entries() == 0 && redis.stream_entries() == 0).then_some(())
    })
    .await;
    assert_eq!(
        redis.node_field(&cancelled, "root", "attempt").as_deref(),
        Some("0"),
        "the cancelled node never started"
    );
    assert_eq!(status_2025(&mcp, &cancelled).await, "cancelled");
}

#[tokio::test]
async fn sigterm_lets_a_worker_finish_its_node_and_exit() {
    let redis = RedisServer::start().expect("redis");
    let gateway = Conveyor::gateway(&redis.url(), &[]).expect("gateway");
    let mut worker = Conveyor::worker(&redis.url(), &["--fixtures"]).expect("worker");
    let mcp = Mcp::new(gateway.mcp_url());
    wait_for_tools(&mcp, &["slow_compute"]).await;

    let task = create_2025(&mcp, "slow_compute", json!({"seconds": 1, "label": "drain"})).await;
    redis.wait_node_status(&task, "root", "running", Duration::from_secs(10)).await.expect("the node runs");
    worker.signal("TERM");
    assert!(
        worker.wait_exit(Duration::from_secs(10)),
        "the worker exits after draining:\n{}",
        worker.log_text()
    );
    assert_eq!(status_2025(&mcp, &task).await, "completed", "the running node finished before exit");

    let mut gateway = gateway;
    gateway.signal("TERM");
    assert!(gateway.wait_exit(Duration::from_secs(10)), "the gateway exits on SIGTERM");
}

#[tokio::test]
async fn a_worker_that_stops_hands_its_running_node_to_another() {
    let redis = RedisServer::start().expect("redis");
    let gateway = Conveyor::gateway(&redis.url(), &[]).expect("gateway");
    let mut first =
        Conveyor::worker(&redis.url(), &["--fixtures", "--shutdown-grace-ms", "200"]).expect("worker");
    let mcp = Mcp::new(gateway.mcp_url());
    wait_for_tools(&mcp, &["slow_compute"]).await;

    let task = create_2025(&mcp, "slow_compute", json!({"seconds": 4, "label": "handed"})).await;
    redis.wait_node_status(&task, "root", "running", Duration::from_secs(10)).await.expect("the node runs");
    first.signal("TERM");
    assert!(first.wait_exit(Duration::from_secs(5)), "the worker stops after its grace period");
    assert_eq!(
        redis.node_field(&task, "root", "status").as_deref(),
        Some("queued"),
        "handed back, not left running"
    );

    let _second = Conveyor::worker(&redis.url(), &["--fixtures"]).expect("second worker");
    let result = mcp.call_2025("tasks/result", json!({"taskId": task})).await.expect("tasks/result");
    assert_eq!(result.result()["content"][0]["text"], "computed handed", "{}", result.raw);
    assert_eq!(
        redis.node_field(&task, "root", "attempt").as_deref(),
        Some("2"),
        "the second worker ran attempt 2"
    );
}

#[tokio::test]
async fn the_cluster_rides_out_a_redis_restart() {
    let mut redis =
        RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always", "--save", ""])
            .expect("redis");
    // One gateway gives up on Redis after a second, the other rides out an outage of up to eight.
    let gateway =
        Conveyor::gateway(&redis.url(), &["--redis-timeout-ms", "1000", "--redis-outage-ms", "1000"])
            .expect("gateway");
    let patient =
        Conveyor::gateway(&redis.url(), &["--redis-timeout-ms", "1000", "--redis-outage-ms", "8000"])
            .expect("patient gateway");
    let _worker =
        Conveyor::worker(&redis.url(), &["--fixtures", "--redis-timeout-ms", "1000"]).expect("worker");
    let mcp = Mcp::new(gateway.mcp_url());
    wait_for_tools(&mcp, &["slow_compute"]).await;
    assert_eq!(mcp.get_status("/readyz").await.expect("readyz"), 200);
    let before = create_2025(&mcp, "slow_compute", json!({"seconds": 0, "label": "before"})).await;
    eventually(Duration::from_secs(10), "the first task", async || {
        (status_2025(&mcp, &before).await == "completed").then_some(())
    })
    .await;

    redis.kill();
    assert_eq!(mcp.get_status("/healthz").await.expect("healthz"), 200, "the process is alive");
    assert_eq!(mcp.get_status("/readyz").await.expect("readyz"), 503, "not ready without Redis");
    let started = Instant::now();
    let reply = mcp.call_2025("tasks/get", json!({"taskId": before})).await.expect("a reply, not a hang");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "failed fast: {took:?}");
    let message = reply.message["error"]["message"].as_str().unwrap_or_default().to_owned();
    assert!(message.contains("Redis"), "the error says what is wrong: {}", reply.raw);
    // A JSON-RPC error with HTTP 200 and a retry hint, never a 5xx: the official Python SDK ends
    // its whole session on any HTTP 5xx.
    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(reply.message["error"]["data"]["retryable"], true, "{}", reply.raw);
    assert!(reply.message["error"]["data"]["retryAfterMs"].is_u64(), "{}", reply.raw);

    // A request to the patient gateway while Redis is down waits for it and then succeeds.
    let patient_mcp = Mcp::new(patient.mcp_url());
    let during = tokio::spawn({
        let before = before.clone();
        async move { patient_mcp.call_2025("tasks/get", json!({"taskId": before})).await }
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    redis.restart().expect("redis restarts");
    let during = during.await.expect("the request task").expect("a reply");
    assert_eq!(during.status, 200, "{}", during.raw);
    assert_eq!(during.result()["status"], "completed", "ridden out: {}", during.raw);
    eventually(Duration::from_secs(15), "readiness after the restart", async || {
        (mcp.get_status("/readyz").await.ok()? == 200).then_some(())
    })
    .await;
    // The task written before the restart survived (AOF), and new work flows again.
    assert_eq!(status_2025(&mcp, &before).await, "completed");
    let after = create_2025(&mcp, "slow_compute", json!({"seconds": 0, "label": "after"})).await;
    let result = mcp.call_2025("tasks/result", json!({"taskId": after})).await.expect("tasks/result");
    assert_eq!(
        result.result()["content"][0]["text"],
        "computed after",
        "{}\n{}",
        result.raw,
        gateway.log_text()
    );
}

#[tokio::test]
async fn a_redis_that_lost_its_data_is_set_up_again_by_the_workers() {
    let mut redis = RedisServer::start().expect("redis");
    let gateway = Conveyor::gateway(&redis.url(), &["--redis-timeout-ms", "1000"]).expect("gateway");
    let _worker =
        Conveyor::worker(&redis.url(), &["--fixtures", "--redis-timeout-ms", "1000"]).expect("worker");
    let mcp = Mcp::new(gateway.mcp_url());
    wait_for_tools(&mcp, &["slow_compute"]).await;

    // No persistence: the restarted Redis is empty, without the consumer group or the tool catalog.
    redis.restart().expect("redis restarts");
    wait_for_tools(&mcp, &["slow_compute"]).await;
    let task = create_2025(&mcp, "slow_compute", json!({"seconds": 0, "label": "fresh"})).await;
    let result = mcp.call_2025("tasks/result", json!({"taskId": task})).await.expect("tasks/result");
    assert_eq!(result.result()["content"][0]["text"], "computed fresh", "{}", result.raw);
}

#[tokio::test]
async fn a_gateway_that_shuts_down_ends_waits_with_an_error_the_client_retries_elsewhere() {
    let redis = RedisServer::start().expect("redis");
    let mut gateway_a = Conveyor::gateway(&redis.url(), &[]).expect("gateway A");
    let gateway_b = Conveyor::gateway(&redis.url(), &[]).expect("gateway B");
    let _worker = Conveyor::worker(&redis.url(), &["--fixtures"]).expect("worker");
    let (a, b) = (Mcp::new(gateway_a.mcp_url()), Mcp::new(gateway_b.mcp_url()));
    wait_for_tools(&a, &["slow_compute"]).await;

    let task = create_2025(&a, "slow_compute", json!({"seconds": 3, "label": "outlives"})).await;
    let waiting = tokio::spawn({
        let a = a.clone();
        let task = task.clone();
        async move { a.call_2025("tasks/result", json!({"taskId": task})).await }
    });
    // Gateway A waits on the task once its inbox is among the task's waiters; only then is there
    // a wait for its shutdown to end (sooner, the request might not have reached it at all).
    let mut conn = redis.connection().expect("redis connection");
    eventually(Duration::from_secs(20), "gateway A to wait on the task", async || {
        let waiters: Option<String> =
            redis::cmd("HGET").arg(task_key(&task)).arg("waiters").query(&mut conn).ok()?;
        waiters.filter(|w| w != "[]").map(|_| ())
    })
    .await;
    gateway_a.signal("TERM");
    let reply = waiting.await.expect("joined").expect("a reply, not a cut connection");
    // The wait ended with the shutdown, not with the task: an error to retry, not the result.
    assert_eq!(reply.message["error"]["data"]["retryable"], true, "{}", reply.raw);
    assert_eq!(reply.message["error"]["data"]["taskId"], task.as_str(), "{}", reply.raw);
    assert!(gateway_a.wait_exit(Duration::from_secs(5)), "gateway A exits");

    let result = b.call_2025("tasks/result", json!({"taskId": task})).await.expect("tasks/result");
    assert_eq!(result.result()["content"][0]["text"], "computed outlives", "{}", result.raw);
}

#[tokio::test]
async fn a_call_retried_with_its_idempotency_key_returns_the_same_task_on_any_gateway() {
    let redis = RedisServer::start().expect("redis");
    let gateway_a = Conveyor::gateway(&redis.url(), &[]).expect("gateway A");
    let gateway_b = Conveyor::gateway(&redis.url(), &[]).expect("gateway B");
    let _worker = Conveyor::worker(&redis.url(), &["--fixtures"]).expect("worker");
    let (a, b) = (Mcp::new(gateway_a.mcp_url()), Mcp::new(gateway_b.mcp_url()));
    wait_for_tools(&a, &["slow_compute"]).await;
    let call = |seconds: u64| {
        json!({
            "name": "slow_compute",
            "arguments": {"seconds": seconds, "label": "once"},
            "task": {"ttl": 60_000},
            "_meta": {"io.conveyor/idempotencyKey": "deploy-2026-12-02"}
        })
    };
    let first = a.call_2025("tools/call", call(1)).await.expect("first call");
    let first_id = first.result()["task"]["taskId"].as_str().expect("a task").to_owned();
    // The response was "lost"; the client retries on another gateway.
    let retry = b.call_2025("tools/call", call(1)).await.expect("retry");
    assert_eq!(retry.result()["task"]["taskId"], first_id.as_str(), "{}", retry.raw);
    let different = b.call_2025("tools/call", call(2)).await.expect("a different call");
    assert_eq!(different.error_code(), Some(-32602), "{}", different.raw);
    assert!(different.raw.contains("Idempotency key already used"), "{}", different.raw);

    let result = a.call_2025("tasks/result", json!({"taskId": first_id})).await.expect("result");
    assert_eq!(result.result()["content"][0]["text"], "computed once");
    assert_eq!(redis.task_count(), 1, "one task for the call and its retry");
    assert_eq!(redis.node_field(&first_id, "root", "attempt").as_deref(), Some("1"), "the work ran once");
}
