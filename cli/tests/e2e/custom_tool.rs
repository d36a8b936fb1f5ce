//! The README's way to add a tool works: the `custom_worker` example, a worker program with a tool
//! of its own, serves that tool through an ordinary `conveyor gateway`.

use std::time::{Duration, Instant};

use conveyor_tests::mcp::tasks_client_capabilities;
use conveyor_tests::process::example_bin;
use conveyor_tests::{Conveyor, Mcp, RedisServer};
use serde_json::json;

#[tokio::test]
async fn a_worker_with_its_own_tool_serves_it_through_any_gateway() {
    let redis = RedisServer::start().expect("redis");
    let gateway = Conveyor::gateway(&redis.url(), &[]).expect("gateway");
    let worker = Conveyor::program(&example_bin("custom_worker"), &redis.url()).expect("worker");
    let mcp = Mcp::new(gateway.mcp_url());

    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let listed = mcp.call_2025("tools/list", json!({})).await.expect("tools/list");
        if listed.raw.contains("count_words") {
            break;
        }
        assert!(Instant::now() < deadline, "count_words never appeared:\n{}", worker.log_text());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let text = "one two three\nfour five\nsix";
    let sync = mcp
        .call_2025("tools/call", json!({"name": "count_words", "arguments": {"text": text}}))
        .await
        .expect("call");
    assert_eq!(sync.result()["structuredContent"]["words"], 6, "{}", sync.raw);

    let created = mcp
        .call_2026(
            "tools/call",
            json!({"name": "count_words", "arguments": {"text": text}}),
            tasks_client_capabilities(),
        )
        .await
        .expect("call");
    assert_eq!(created.result()["resultType"], "task", "{}", created.raw);
    let task_id = created.result()["taskId"].as_str().expect("task id").to_owned();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = mcp
            .call_2026("tasks/get", json!({"taskId": task_id}), tasks_client_capabilities())
            .await
            .expect("get");
        if got.result()["status"] == "completed" {
            assert_eq!(got.result()["result"]["content"][0]["text"], "6 words", "{}", got.raw);
            break;
        }
        assert!(Instant::now() < deadline, "the task did not complete: {}", got.raw);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
