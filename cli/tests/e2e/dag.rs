//! DAG tasks through `run_dag` with several real worker processes against a real Redis: shapes,
//! failure policies, retries, timeouts, validation, and cancellation in the middle of a wide graph.

use std::time::{Duration, Instant};

use conveyor_tests::mcp::{create_2026, settle, tasks_client_capabilities, wait_for_tools};
use conveyor_tests::{Conveyor, Mcp, RedisServer};
use serde_json::{Value, json};

/// A Redis, a `conveyor up --fixtures` and extra worker processes.
struct Cluster {
    mcp: Mcp,
    redis: RedisServer,
    _up: Conveyor,
    _workers: Vec<Conveyor>,
}

async fn cluster(extra_workers: usize) -> Cluster {
    let redis = RedisServer::start().expect("redis");
    let up = Conveyor::up(&redis.url(), &["--fixtures"]).expect("conveyor");
    let workers = (0..extra_workers)
        .map(|_| Conveyor::worker(&redis.url(), &["--fixtures"]).expect("worker"))
        .collect();
    let mcp = Mcp::new(up.mcp_url());
    wait_for_tools(&mcp, &["flaky"]).await;
    Cluster { mcp, redis, _up: up, _workers: workers }
}

/// Submits a graph as a task and returns its id.
async fn submit(mcp: &Mcp, graph: Value) -> String {
    create_2026(mcp, "run_dag", graph, tasks_client_capabilities()).await
}

fn nodes(task: &Value) -> &serde_json::Map<String, Value> {
    task["result"]["structuredContent"]["nodes"]
        .as_object()
        .unwrap_or_else(|| panic!("no node outcomes in {task}"))
}

#[tokio::test]
async fn a_diamond_passes_values_downstream_and_collects_them() {
    let c = cluster(1).await;
    let task = submit(
        &c.mcp,
        json!({"nodes": [
            {"id": "a", "tool": "echo", "arguments": {"v": 21}},
            {"id": "b", "tool": "echo", "dependsOn": ["a"], "arguments": {"twice": {"$from": "a", "pointer": "/structuredContent/v"}}},
            {"id": "c", "tool": "greet", "dependsOn": ["a"], "arguments": {"name": "diamond"}},
            {"id": "d", "kind": "collect", "dependsOn": ["b", "c"]}
        ], "output": "d"}),
    )
    .await;
    let done = settle(&c.mcp, &task, Duration::from_secs(20)).await;
    assert_eq!(done["status"], "completed", "{done}");
    let outcomes = nodes(&done);
    assert_eq!(outcomes.len(), 4);
    for (id, outcome) in outcomes {
        assert_eq!(outcome["status"], "completed", "{id}: {outcome}");
        assert_eq!(outcome["attempts"], 1, "{id}");
    }
    assert_eq!(outcomes["b"]["output"]["structuredContent"]["twice"], 21, "b got a's value");
    let collected = &outcomes["d"]["output"]["structuredContent"];
    assert_eq!(collected["c"]["content"][0]["text"], "Hello, diamond!");
    assert_eq!(collected["b"]["structuredContent"]["twice"], 21);
    let text = done["result"]["content"][0]["text"].as_str().expect("output text");
    assert!(text.contains("Hello, diamond!"), "the output node's content is the task's: {text}");
}

#[tokio::test]
async fn a_fan_out_of_a_thousand_and_a_chain_of_a_thousand_complete() {
    let c = cluster(2).await;
    let mut wide = vec![json!({"id": "root", "kind": "noop"})];
    wide.extend((0..1000).map(|i| json!({"id": format!("n{i}"), "kind": "noop", "dependsOn": ["root"]})));
    wide.push(json!({"id": "sink", "kind": "noop", "dependsOn": (0..1000).map(|i| format!("n{i}")).collect::<Vec<_>>()}));
    let started = Instant::now();
    let task = submit(&c.mcp, json!({"nodes": wide})).await;
    let done = settle(&c.mcp, &task, Duration::from_secs(60)).await;
    println!("fan-out of 1000 (3 workers): {:?}", started.elapsed());
    assert_eq!(done["status"], "completed");
    assert_eq!(nodes(&done).len(), 1002);
    assert!(nodes(&done).values().all(|n| n["status"] == "completed"));
    assert_eq!(done["progress"], Value::Null, "progress is not a DetailedTask field");

    let chain: Vec<Value> = (0..1000)
        .map(|i| {
            if i == 0 {
                json!({"id": "c0", "kind": "noop"})
            } else {
                json!({"id": format!("c{i}"), "kind": "noop", "dependsOn": [format!("c{}", i - 1)]})
            }
        })
        .collect();
    let started = Instant::now();
    let task = submit(&c.mcp, json!({"nodes": chain, "output": "c999"})).await;
    let done = settle(&c.mcp, &task, Duration::from_secs(120)).await;
    println!("chain of 1000 (3 workers): {:?}", started.elapsed());
    assert_eq!(done["status"], "completed");
    let outcomes = nodes(&done);
    assert!(outcomes.values().all(|n| n["status"] == "completed"));
    // Each link started only after the one before it finished.
    let mut conn = c.redis.connection().expect("conn");
    let times: std::collections::HashMap<String, String> =
        redis::cmd("HGETALL").arg(conveyor_tests::process::nodes_key(&task)).query(&mut conn).expect("nodes");
    for i in 1..1000 {
        let started: u64 = times[&format!("c{i}:startedAt")].parse().expect("ms");
        let before: u64 = times[&format!("c{}:finishedAt", i - 1)].parse().expect("ms");
        assert!(started >= before, "c{i} started before c{} finished", i - 1);
    }
}

#[tokio::test]
async fn failure_policies_fail_skip_or_continue() {
    let c = cluster(1).await;
    // fail: the task fails naming the node, and its dependent never runs.
    let task = submit(
        &c.mcp,
        json!({"nodes": [
            {"id": "bad", "tool": "protocol_error_job"},
            {"id": "after", "tool": "greet", "dependsOn": ["bad"], "arguments": {"name": "x"}}
        ]}),
    )
    .await;
    let done = settle(&c.mcp, &task, Duration::from_secs(20)).await;
    // A failed graph is a tool-level failure: a result with isError that says how each node ended.
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["isError"], true, "{done}");
    let message = done["result"]["content"][0]["text"].as_str().unwrap_or_default();
    assert!(message.contains("bad") && message.contains("exploded"), "{message}");
    assert_eq!(done["result"]["structuredContent"]["failedNode"], "bad");
    let outcomes = nodes(&done);
    assert_eq!(outcomes["bad"]["status"], "failed");
    assert_eq!(outcomes["bad"]["error"]["message"], "protocol_error_job exploded", "{done}");
    assert_eq!(outcomes["after"]["status"], "pending", "its dependent never ran: {done}");

    // skipDependents: the failed node's dependents are skipped, the rest runs; the task completes.
    let task = submit(
        &c.mcp,
        json!({"nodes": [
            {"id": "bad", "tool": "protocol_error_job", "onFailure": "skipDependents"},
            {"id": "child", "tool": "greet", "dependsOn": ["bad"], "arguments": {"name": "x"}},
            {"id": "grandchild", "kind": "noop", "dependsOn": ["child"]},
            {"id": "other", "tool": "greet", "arguments": {"name": "y"}}
        ], "output": "other"}),
    )
    .await;
    let done = settle(&c.mcp, &task, Duration::from_secs(20)).await;
    assert_eq!(done["status"], "completed", "{done}");
    let outcomes = nodes(&done);
    assert_eq!(outcomes["bad"]["status"], "failed");
    assert_eq!(outcomes["child"]["status"], "skipped");
    assert_eq!(outcomes["grandchild"]["status"], "skipped");
    assert_eq!(outcomes["other"]["status"], "completed");
    assert_eq!(done["result"]["isError"], false);

    // continue: dependents run as if it succeeded, seeing its error as its output.
    let task = submit(
        &c.mcp,
        json!({"nodes": [
            {"id": "bad", "tool": "failing_job", "onFailure": "continue"},
            {"id": "child", "tool": "echo", "dependsOn": ["bad"], "arguments": {"upstream": {"$from": "bad", "pointer": "/isError"}}}
        ], "output": "child"}),
    )
    .await;
    let done = settle(&c.mcp, &task, Duration::from_secs(20)).await;
    assert_eq!(done["status"], "completed", "{done}");
    let outcomes = nodes(&done);
    assert_eq!(outcomes["bad"]["status"], "failed");
    assert_eq!(outcomes["child"]["output"]["structuredContent"]["upstream"], true);
}

#[tokio::test]
async fn retries_with_backoff_and_timeouts() {
    let c = cluster(1).await;
    let task = submit(
        &c.mcp,
        json!({"nodes": [{"id": "f", "tool": "flaky", "arguments": {"failures": 2}, "retries": 2, "backoffMs": 50}], "output": "f"}),
    )
    .await;
    let done = settle(&c.mcp, &task, Duration::from_secs(20)).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(nodes(&done)["f"]["attempts"], 3, "failed twice, then succeeded");
    assert_eq!(done["result"]["content"][0]["text"], "succeeded on attempt 3");

    // Out of retries: the failure policy applies.
    let task = submit(
        &c.mcp,
        json!({"nodes": [{"id": "f", "tool": "flaky", "arguments": {"failures": 5}, "retries": 1, "backoffMs": 10}]}),
    )
    .await;
    let done = settle(&c.mcp, &task, Duration::from_secs(20)).await;
    assert_eq!(
        (done["status"].as_str(), &done["result"]["isError"]),
        (Some("completed"), &json!(true)),
        "{done}"
    );
    assert_eq!(nodes(&done)["f"]["attempts"], 2, "{done}");

    // A timed-out attempt fails, and the tool is stopped.
    let started = Instant::now();
    let task = submit(
        &c.mcp,
        json!({"nodes": [{"id": "slow", "tool": "slow_compute", "arguments": {"seconds": 30}, "timeoutMs": 300}]}),
    )
    .await;
    let done = settle(&c.mcp, &task, Duration::from_secs(20)).await;
    assert!(started.elapsed() < Duration::from_secs(10), "the timeout cut it short");
    assert_eq!(done["result"]["isError"], true, "{done}");
    assert!(
        nodes(&done)["slow"]["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("timed out after 300 ms"),
        "{done}"
    );
}

#[tokio::test]
async fn a_tool_that_ignores_its_timeout_is_aborted_and_runs_no_longer_than_its_node() {
    // One process runs every node, so `stubborn_sleep` sees the runs of its earlier attempts.
    let c = cluster(0).await;
    let task = submit(
        &c.mcp,
        json!({"nodes": [{"id": "s", "tool": "stubborn_sleep", "arguments": {"seconds": 30}, "timeoutMs": 200}]}),
    )
    .await;
    let done = settle(&c.mcp, &task, Duration::from_secs(20)).await;
    assert_eq!(done["result"]["isError"], true, "{done}");
    assert!(
        nodes(&done)["s"]["error"]["message"].as_str().unwrap_or_default().contains("timed out after 200 ms"),
        "{done}"
    );
    // Its node is over, so nothing of it runs any more: not beside a retry, not outside the
    // worker's concurrency.
    let task = submit(
        &c.mcp,
        json!({"nodes": [{"id": "s", "tool": "stubborn_sleep", "arguments": {"seconds": 0}}], "output": "s"}),
    )
    .await;
    let done = settle(&c.mcp, &task, Duration::from_secs(20)).await;
    assert_eq!(done["result"]["content"][0]["text"], "0 other runs alive", "{done}");
}

#[tokio::test]
async fn invalid_graphs_are_refused_before_anything_is_written() {
    let c = cluster(0).await;
    let call = |graph: Value| {
        let mcp = c.mcp.clone();
        async move {
            mcp.call_2026(
                "tools/call",
                json!({"name": "run_dag", "arguments": graph}),
                tasks_client_capabilities(),
            )
            .await
            .expect("reply")
        }
    };
    let reply = call(json!({"nodes": [
        {"id": "a", "kind": "noop", "dependsOn": ["b"]},
        {"id": "b", "kind": "noop", "dependsOn": ["a"]}
    ]}))
    .await;
    assert_eq!(reply.error_code(), Some(-32602), "{}", reply.raw);
    let message = reply.message["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("cycle") && message.contains("a -> b -> a"), "{message}");
    let reply = call(json!({"nodes": [{"id": "a", "tool": "no_such_tool"}]})).await;
    assert!(reply.raw.contains("unknown tool `no_such_tool`"), "{}", reply.raw);
    let reply =
        call(json!({"nodes": [{"id": "a", "tool": "slow_compute", "arguments": {"seconds": "x"}}]})).await;
    assert!(reply.raw.contains("node `a`") && reply.raw.contains("/seconds"), "{}", reply.raw);
    let reply = call(json!({"nodes": [{"id": "a", "kind": "noop"}, {"id": "a", "kind": "noop"}]})).await;
    assert!(reply.raw.contains("more than once"), "{}", reply.raw);
    assert_eq!(c.redis.written(), (0, 0), "nothing written");
}

#[tokio::test]
async fn cancelling_a_wide_graph_stops_every_node_on_every_worker() {
    let c = cluster(2).await;
    let graph: Vec<Value> = (0..60)
        .map(|i| json!({"id": format!("w{i}"), "tool": "slow_compute", "arguments": {"seconds": 5}}))
        .collect();
    let task = submit(&c.mcp, json!({"nodes": graph})).await;
    let mut conn = c.redis.connection().expect("conn");
    let running = |conn: &mut redis::Connection| -> usize {
        let fields: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
            .arg(conveyor_tests::process::nodes_key(&task))
            .query(conn)
            .unwrap_or_default();
        fields.iter().filter(|(k, v)| k.ends_with(":status") && v.as_str() == "running").count()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while running(&mut conn) < 20 {
        assert!(Instant::now() < deadline, "nodes never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ack = c
        .mcp
        .call_2026("tasks/cancel", json!({"taskId": task}), tasks_client_capabilities())
        .await
        .expect("cancel");
    assert_eq!(ack.result()["resultType"], "complete", "{}", ack.raw);
    // What had started when the cancel took effect: read after its acknowledgement, so after its
    // script ran (scripts run one at a time), and never after a start that came later. Nodes
    // go on starting while the cancel is on its way, so no clock reading of the test's says
    // where the cancel fell.
    let starts = |conn: &mut redis::Connection| -> std::collections::HashMap<String, String> {
        let fields: std::collections::HashMap<String, String> =
            redis::cmd("HGETALL").arg(conveyor_tests::process::nodes_key(&task)).query(conn).expect("nodes");
        fields.into_iter().filter(|(k, _)| k.ends_with(":startedAt")).collect()
    };
    let started_before = starts(&mut conn);

    let deadline = Instant::now() + Duration::from_secs(5);
    while running(&mut conn) > 0 {
        assert!(Instant::now() < deadline, "nodes kept running after the cancel");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Give any late starter its chance to show up, then check that none started after the cancel.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let late: Vec<(String, String)> =
        starts(&mut conn).into_iter().filter(|(k, v)| started_before.get(k) != Some(v)).collect();
    assert!(late.is_empty(), "nodes started after the cancel: {late:?}");
    let fields: std::collections::HashMap<String, String> =
        redis::cmd("HGETALL").arg(conveyor_tests::process::nodes_key(&task)).query(&mut conn).expect("nodes");
    assert!(
        !fields.iter().any(|(k, v)| k.ends_with(":status") && v == "completed"),
        "no node finished its work"
    );
    let done = settle(&c.mcp, &task, Duration::from_secs(5)).await;
    assert_eq!(done["status"], "cancelled");
}

#[tokio::test]
async fn a_tool_plans_its_work_as_a_graph_that_runs_across_workers() {
    let c = cluster(2).await;
    let created = c
        .mcp
        .call_2026(
            "tools/call",
            json!({"name": "plan_fanout", "arguments": {"width": 40, "seconds": 0.3}}),
            tasks_client_capabilities(),
        )
        .await
        .expect("tools/call");
    let task = created.result()["taskId"].as_str().expect("a task").to_owned();
    let done = settle(&c.mcp, &task, Duration::from_secs(30)).await;
    assert_eq!(done["status"], "completed", "{done}");
    // A planned graph answers with its output node's result as it is: the join's.
    let joined = &done["result"]["structuredContent"];
    for i in 0..40 {
        assert_eq!(joined[format!("part{i}")]["content"][0]["text"], format!("computed part{i}"));
    }
    let mut conn = c.redis.connection().expect("conn");
    let fields: std::collections::HashMap<String, String> =
        redis::cmd("HGETALL").arg(conveyor_tests::process::nodes_key(&task)).query(&mut conn).expect("nodes");
    let completed =
        fields.iter().filter(|(k, v)| k.ends_with(":status") && v.as_str() == "completed").count();
    assert_eq!(completed, 42, "the planner, forty parts and the join");
    assert_eq!(fields.get("root:status").map(String::as_str), Some("completed"));
    // Forty parts are more than one worker runs at once (16): they spread over the workers.
    let workers: std::collections::HashSet<&String> = fields
        .iter()
        .filter(|(k, _)| k.starts_with("part") && k.ends_with(":worker"))
        .map(|(_, v)| v)
        .collect();
    assert!(workers.len() > 1, "parts ran on {workers:?}");

    // `conveyor redis tasks show` prints the task and its nodes for a person.
    let shown = std::process::Command::new(conveyor_tests::process::conveyor_bin())
        .args(["redis", "tasks", "show", &task])
        .env("REDIS_URL", c.redis.url())
        .output()
        .expect("conveyor runs");
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.status.success(), "{}", String::from_utf8_lossy(&shown.stderr));
    assert!(
        text.contains("completed")
            && text.contains("plan_fanout")
            && text.contains("part39")
            && text.contains("join"),
        "{text}"
    );
}
