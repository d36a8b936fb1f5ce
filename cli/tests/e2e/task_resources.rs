//! The task resources the gateway serves from Redis, read with a raw client on both wires:
//! `conveyor://tasks` a page at a time (every page joined is every task, once), a bad query or
//! cursor refused with a message, `conveyor://tasks/{taskId}` with the graph's nodes and edges,
//! and both listed by `resources/list` and `resources/templates/list`.

use std::collections::BTreeSet;
use std::time::Duration;

use conveyor_tests::mcp::tasks_client_capabilities;
use conveyor_tests::{Conveyor, Mcp, RedisServer};
use serde_json::{Value, json};

/// The JSON text of a `resources/read` result.
fn body(reply: &conveyor_tests::mcp::Reply) -> Value {
    let text = reply.result()["contents"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("text contents: {}", reply.raw));
    serde_json::from_str(text).expect("JSON text")
}

#[tokio::test]
async fn the_task_list_pages_and_a_task_shows_its_graph() {
    let redis = RedisServer::start().expect("redis-server starts");
    let conveyor = Conveyor::up(&redis.url(), &["--fixtures", "--no-auth"]).expect("conveyor up starts");
    let mcp = Mcp::new(conveyor.mcp_url());
    mcp.wait_for_tool("slow_compute", Duration::from_secs(10)).await.expect("fixtures");

    // 130 tasks: more than one page of 100.
    let mut created = BTreeSet::new();
    for _ in 0..130 {
        let reply = mcp
            .call_2025("tools/call", json!({"name": "slow_compute", "arguments": {"seconds": 0}, "task": {}}))
            .await
            .expect("tools/call");
        created.insert(
            reply.result()["task"]["taskId"].as_str().unwrap_or_else(|| panic!("{}", reply.raw)).to_owned(),
        );
    }
    let mut listed = Vec::new();
    let mut uri = "conveyor://tasks".to_owned();
    let mut pages = 0;
    loop {
        let reply = mcp.call_2025("resources/read", json!({"uri": uri})).await.expect("resources/read");
        let page = body(&reply);
        pages += 1;
        for task in page["tasks"].as_array().expect("tasks") {
            assert_eq!(task["tool"], "slow_compute");
            assert!(task.get("nodes").is_none(), "the list carries no nodes");
            listed.push(task["taskId"].as_str().expect("id").to_owned());
        }
        match page["nextCursor"].as_str() {
            Some(cursor) => uri = format!("conveyor://tasks?cursor={cursor}"),
            None => break,
        }
    }
    assert_eq!(pages, 2, "100 a page");
    assert_eq!(listed.len(), created.len(), "each task once");
    assert_eq!(listed.iter().cloned().collect::<BTreeSet<_>>(), created);

    for (uri, says) in [
        ("conveyor://tasks?cursor=not-a-cursor", "invalid cursor"),
        ("conveyor://tasks?page=2", "the only query"),
        ("conveyor://tasks/0123456789abcdef0123456789abcdef", "Resource not found"),
    ] {
        let reply = mcp.call_2025("resources/read", json!({"uri": uri})).await.expect("resources/read");
        assert_eq!(reply.error_code(), Some(-32602), "{uri}: {}", reply.raw);
        assert!(
            reply.message["error"]["message"].as_str().unwrap_or_default().contains(says),
            "{uri}: {}",
            reply.raw
        );
    }

    // A graph on the 2026-07-28 wire: its nodes, their edges, no outputs.
    let caps = tasks_client_capabilities();
    let reply = mcp
        .call_2026(
            "tools/call",
            json!({"name": "plan_fanout", "arguments": {"width": 2, "seconds": 0}}),
            caps.clone(),
        )
        .await
        .expect("tools/call");
    let task =
        reply.result()["taskId"].as_str().unwrap_or_else(|| panic!("a task: {}", reply.raw)).to_owned();
    let uri = format!("conveyor://tasks/{task}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let state = loop {
        let reply =
            mcp.call_2026("resources/read", json!({"uri": uri}), caps.clone()).await.expect("resources/read");
        let state = body(&reply);
        if state["status"] == "completed" {
            break state;
        }
        assert!(tokio::time::Instant::now() < deadline, "the graph never completed: {state}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let nodes = state["nodes"].as_array().expect("nodes");
    let ids: BTreeSet<&str> = nodes.iter().filter_map(|n| n["nodeId"].as_str()).collect();
    assert_eq!(ids, BTreeSet::from(["join", "part0", "part1", "root"]), "{state}");
    for node in nodes {
        assert_eq!(node["status"], "completed", "{node}");
        assert!(node.get("output").is_none(), "no outputs in the state: {node}");
        assert!(node["startedAtMs"].as_u64().is_some() && node["finishedAtMs"].as_u64().is_some(), "{node}");
    }
    let part0 = nodes.iter().find(|n| n["nodeId"] == "part0").expect("part0");
    assert_eq!(part0["dependents"], json!(["join"]));
    assert_eq!(state["progress"], state["total"], "a settled graph's progress is whole: {state}");

    // Both are named where clients look for resources.
    let resources = mcp.call_2025("resources/list", json!({})).await.expect("resources/list");
    assert!(
        resources.result()["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .any(|r| r["uri"] == "conveyor://tasks"),
        "{}",
        resources.raw
    );
    let templates = mcp.call_2025("resources/templates/list", json!({})).await.expect("templates");
    assert!(
        templates.result()["resourceTemplates"]
            .as_array()
            .expect("templates")
            .iter()
            .any(|t| t["uriTemplate"] == "conveyor://tasks/{taskId}"),
        "{}",
        templates.raw
    );
}
