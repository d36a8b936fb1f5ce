//! Worker pools on one Redis: each worker reads only the queues of the tools it offers, gateways
//! list only what a live worker offers, and a call to a tool whose workers are all gone waits in
//! its queue and says so.

use std::time::{Duration, Instant};

use conveyor_tests::{Conveyor, Mcp, RedisServer};
use serde_json::{Value, json};

async fn listed(mcp: &Mcp) -> Vec<String> {
    let reply = mcp.call_2025("tools/list", json!({})).await.expect("tools/list");
    reply.result()["tools"]
        .as_array()
        .map(|tools| tools.iter().filter_map(|t| t["name"].as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

async fn create(mcp: &Mcp, tool: &str, arguments: Value) -> Value {
    let reply = mcp
        .call_2025("tools/call", json!({"name": tool, "arguments": arguments, "task": {"ttl": 60_000}}))
        .await
        .expect("tools/call");
    assert!(reply.result()["task"].is_object(), "{tool}: {}", reply.raw);
    reply.result()["task"].clone()
}

#[tokio::test]
async fn each_pool_runs_only_its_tools_and_a_tool_without_workers_waits_for_one() {
    let redis = RedisServer::start().expect("redis");
    let gateway = Conveyor::gateway(&redis.url(), &[]).expect("gateway");
    let greeters = Conveyor::worker(&redis.url(), &["--fixtures", "--tools", "greet,echo"]).expect("pool A");
    let mut computers =
        Conveyor::worker(&redis.url(), &["--fixtures", "--tools", "slow_compute"]).expect("pool B");
    let mcp = Mcp::new(gateway.mcp_url());
    mcp.wait_for_tool("slow_compute", Duration::from_secs(20)).await.expect("pool B's tool is listed");
    mcp.wait_for_tool("greet", Duration::from_secs(20)).await.expect("pool A's tool is listed");
    let tools = listed(&mcp).await;
    assert!(!tools.contains(&"noop".to_owned()), "a tool no worker offers is not listed: {tools:?}");

    // Each node runs on a worker of its pool.
    let mut tasks = Vec::new();
    for i in 0..6 {
        tasks.push((create(&mcp, "echo", json!({"i": i})).await, "greet,echo"));
        tasks.push((
            create(&mcp, "slow_compute", json!({"seconds": 0, "label": format!("c{i}")})).await,
            "slow_compute",
        ));
    }
    for (task, pool) in &tasks {
        let id = task["taskId"].as_str().expect("a task id");
        let result = mcp.call_2025("tasks/result", json!({"taskId": id})).await.expect("tasks/result");
        assert!(result.error_code().is_none(), "{}", result.raw);
        let worker = redis.node_field(id, "root", "worker").expect("the node ran on a worker");
        let log = if *pool == "greet,echo" { greeters.log_text() } else { computers.log_text() };
        assert!(log.contains(&worker), "task {id} ran on {worker}, not on the {pool} pool");
    }

    let greeting = mcp
        .call_2025("tools/call", json!({"name": "greet", "arguments": {"name": "Ada"}}))
        .await
        .expect("greet");
    assert_eq!(greeting.result()["content"][0]["text"], "Hello, Ada!", "{}", greeting.raw);

    // The computing pool dies: its tool leaves the list within 30 s...
    computers.kill();
    let gone_by = Instant::now() + Duration::from_secs(30);
    while listed(&mcp).await.contains(&"slow_compute".to_owned()) {
        assert!(Instant::now() < gone_by, "slow_compute is still listed 30 s after its last worker died");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // ...a call to it waits in its queue and says why...
    let waiting = create(&mcp, "slow_compute", json!({"seconds": 0, "label": "late"})).await;
    let id = waiting["taskId"].as_str().expect("the call is taken").to_owned();
    let message = waiting["statusMessage"].as_str().unwrap_or_default();
    assert!(message.contains("no live worker offers `slow_compute`"), "{waiting}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let status = mcp.call_2025("tasks/get", json!({"taskId": id})).await.expect("tasks/get");
    assert_eq!(status.result()["status"], "working", "{}", status.raw);
    // ...and runs once a worker of its pool is back.
    let _back =
        Conveyor::worker(&redis.url(), &["--fixtures", "--tools", "slow_compute"]).expect("pool B again");
    let result = mcp.call_2025("tasks/result", json!({"taskId": id})).await.expect("tasks/result");
    assert_eq!(result.result()["content"][0]["text"], "computed late", "{}", result.raw);
}

#[test]
fn a_worker_refuses_tools_it_does_not_have() {
    let output = std::process::Command::new(conveyor_tests::process::conveyor_bin())
        .args(["worker", "--fixtures", "--tools", "greet,no_such_tool"])
        .env("REDIS_URL", "redis://127.0.0.1:1")
        .output()
        .expect("conveyor runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no_such_tool") && stderr.contains("CONVEYOR_TOOLS"), "{stderr}");
}
