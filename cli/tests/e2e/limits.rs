//! Limits a gateway enforces, against real gateways sharing one real Redis: a principal's request
//! rate and the gap between two reads of one task hold across gateways; arguments, graphs and
//! TTLs are bounded; and fixtures that harm their worker load only in a test process.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use conveyor_tests::mcp::Reply;
use conveyor_tests::process::{conveyor_bin, output_text, scratch_dir};
use conveyor_tests::{Conveyor, Mcp, RedisServer};
use serde_json::{Value, json};

/// JSON-RPC code of a request refused because a limit is reached.
const OVERLOADED: i64 = -32029;

/// `error.data.retryAfterMs` of a refusal.
fn retry_after_ms(reply: &Reply) -> u64 {
    reply.message["error"]["data"]["retryAfterMs"]
        .as_u64()
        .unwrap_or_else(|| panic!("a refusal says when to retry: {}", reply.raw))
}

/// `conveyor token new --principal <principal>`: the token (the last line of stderr) and the
/// tokens-file entry (stdout).
fn new_token(principal: &str) -> (String, String) {
    let output = Command::new(conveyor_bin())
        .args(["token", "new", "--principal", principal])
        .stdin(Stdio::null())
        .output()
        .expect("conveyor token new runs");
    assert!(output.status.success(), "{}", output_text(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let token = stderr
        .lines()
        .map(str::trim)
        .rfind(|line| !line.is_empty())
        .unwrap_or_else(|| panic!("no token printed: {}", output_text(&output)))
        .to_owned();
    (token, String::from_utf8_lossy(&output.stdout).into_owned())
}

/// A tokens file for alice and bob, and their tokens.
fn alice_and_bob() -> (std::path::PathBuf, String, String) {
    let (alice, alice_entry) = new_token("alice");
    let (bob, bob_entry) = new_token("bob");
    let path = scratch_dir("limits").join("tokens.toml");
    std::fs::write(&path, format!("{alice_entry}\n{bob_entry}")).expect("write the tokens file");
    (path, alice, bob)
}

/// Polls until `tools/list` names `tool`, and returns the listed names.
async fn tool_names_once_listed(mcp: &Mcp, tool: &str, within: Duration) -> Vec<String> {
    let deadline = Instant::now() + within;
    loop {
        let reply = mcp.call_2025("tools/list", json!({})).await.expect("tools/list");
        let names: Vec<String> = reply.result()["tools"]
            .as_array()
            .map(|tools| tools.iter().filter_map(|t| t["name"].as_str().map(str::to_owned)).collect())
            .unwrap_or_default();
        if names.iter().any(|n| n == tool) {
            return names;
        }
        assert!(Instant::now() < deadline, "tools/list never named `{tool}`: {}", reply.raw);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_request_rate_is_per_principal_and_shared_by_every_gateway() {
    let redis = RedisServer::start().expect("redis");
    let (tokens, alice_token, bob_token) = alice_and_bob();
    let tokens = tokens.to_str().expect("a UTF-8 path").to_owned();
    let limits = ["--tokens-file", tokens.as_str(), "--rate-limit-rps", "5", "--rate-limit-burst", "5"];
    let mut up_args = vec!["--fixtures"];
    up_args.extend_from_slice(&limits);
    let a = Conveyor::up(&redis.url(), &up_args).expect("conveyor up");
    let b = Conveyor::gateway(&redis.url(), &limits).expect("second gateway");
    let alice =
        [Mcp::new(a.mcp_url()).with_api_key(&alice_token), Mcp::new(b.mcp_url()).with_api_key(&alice_token)];
    let bob =
        [Mcp::new(a.mcp_url()).with_api_key(&bob_token), Mcp::new(b.mcp_url()).with_api_key(&bob_token)];

    // Alice sends 30 requests as fast as she can, alternating between the gateways.
    let started = Instant::now();
    let (mut allowed, mut refused) = (0u32, [0u32; 2]);
    for i in 0..30 {
        let reply = alice[i % 2].call_2025("tools/list", json!({})).await.expect("tools/list");
        assert_eq!(reply.status, 200, "a refusal is a JSON-RPC error: {}", reply.raw);
        match reply.error_code() {
            None => {
                assert!(reply.result()["tools"].is_array(), "{}", reply.raw);
                allowed += 1;
            }
            Some(code) => {
                assert_eq!(code, OVERLOADED, "{}", reply.raw);
                assert_eq!(reply.message["error"]["data"]["limit"], "requests_per_second", "{}", reply.raw);
                assert!(retry_after_ms(&reply) > 0, "{}", reply.raw);
                let message = reply.message["error"]["message"].as_str().unwrap_or_default();
                assert!(message.contains("alice"), "names the principal: {message}");
                refused[i % 2] += 1;
            }
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    println!("rate limit: {allowed} of 30 allowed in {elapsed:.3} s; refused by gateway: {refused:?}");
    assert!(allowed >= 1, "some requests are allowed");
    assert!(refused[0] > 0 && refused[1] > 0, "both gateways refuse once the rate is spent: {refused:?}");
    let bound = 5.0 + 5.0 * elapsed + 2.0;
    assert!(
        f64::from(allowed) <= bound,
        "{allowed} allowed in {elapsed:.3} s over two gateways; the shared limit allows at most {bound:.1}"
    );

    // Bob has a rate of his own.
    for mcp in &bob {
        let reply = mcp.call_2025("tools/list", json!({})).await.expect("tools/list");
        assert_eq!(reply.error_code(), None, "alice's rate does not refuse bob: {}", reply.raw);
    }

    // Alice may send again once she waits as long as she is told (a token may have come back
    // while bob was served: then she is served at once).
    let reply = alice[1].call_2025("tools/list", json!({})).await.expect("tools/list");
    if reply.error_code().is_some() {
        assert_eq!(reply.error_code(), Some(OVERLOADED), "{}", reply.raw);
        tokio::time::sleep(Duration::from_millis(retry_after_ms(&reply) + 25)).await;
        let reply = alice[0].call_2025("tools/list", json!({})).await.expect("tools/list");
        assert_eq!(reply.error_code(), None, "after retryAfterMs alice is served again: {}", reply.raw);
    }
}

#[tokio::test]
async fn the_poll_gap_holds_across_gateways() {
    let redis = RedisServer::start().expect("redis");
    let a = Conveyor::up(&redis.url(), &["--fixtures", "--min-poll-gap-ms", "800"]).expect("conveyor up");
    let b = Conveyor::gateway(&redis.url(), &["--min-poll-gap-ms", "800"]).expect("second gateway");
    let (mcp_a, mcp_b) = (Mcp::new(a.mcp_url()), Mcp::new(b.mcp_url()));
    mcp_a.wait_for_tool("slow_compute", Duration::from_secs(10)).await.expect("worker tools");

    let created = mcp_a
        .call_2025("tools/call", json!({"name": "slow_compute", "arguments": {"seconds": 5}, "task": {}}))
        .await
        .expect("tools/call");
    let task = created.result()["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task: {}", created.raw))
        .to_owned();

    let first = mcp_a.call_2025("tasks/get", json!({"taskId": task})).await.expect("tasks/get");
    assert_eq!(first.error_code(), None, "{}", first.raw);
    assert_eq!(first.result()["taskId"], task.as_str(), "{}", first.raw);

    let too_soon = mcp_b.call_2025("tasks/get", json!({"taskId": task})).await.expect("tasks/get");
    assert_eq!(too_soon.status, 200, "{}", too_soon.raw);
    assert_eq!(
        too_soon.error_code(),
        Some(OVERLOADED),
        "the other gateway knows of the read: {}",
        too_soon.raw
    );
    assert_eq!(too_soon.message["error"]["data"]["limit"], "min_poll_gap_ms", "{}", too_soon.raw);
    let wait = retry_after_ms(&too_soon);
    assert!(wait > 0 && wait <= 800, "retryAfterMs {wait} is within the gap: {}", too_soon.raw);

    tokio::time::sleep(Duration::from_millis(wait + 50)).await;
    let again = mcp_b.call_2025("tasks/get", json!({"taskId": task})).await.expect("tasks/get");
    assert_eq!(again.error_code(), None, "after retryAfterMs the read is served: {}", again.raw);
    assert_eq!(again.result()["taskId"], task.as_str(), "{}", again.raw);
}

#[tokio::test]
async fn arguments_over_the_size_limit_are_refused_and_write_nothing() {
    let redis = RedisServer::start().expect("redis");
    let conveyor =
        Conveyor::up(&redis.url(), &["--fixtures", "--max-argument-bytes", "2048"]).expect("conveyor up");
    let mcp = Mcp::new(conveyor.mcp_url());
    mcp.wait_for_tool("echo", Duration::from_secs(10)).await.expect("worker tools");
    let before = redis.written();

    for task in [Value::Null, json!({})] {
        let call = json!({"name": "echo", "arguments": {"text": "x".repeat(4000)}, "task": task});
        let reply = mcp.call_2025("tools/call", call).await.expect("tools/call");
        assert_eq!(reply.status, 200, "{}", reply.raw);
        assert_eq!(reply.error_code(), Some(-32602), "{}", reply.raw);
        let data = &reply.message["error"]["data"];
        assert_eq!(data["limit"], "max_argument_bytes", "{}", reply.raw);
        assert_eq!(data["max"], 2048, "{}", reply.raw);
        assert!(data["size"].as_u64().is_some_and(|s| s > 4000), "{}", reply.raw);
    }
    assert_eq!(redis.written(), before, "refused arguments must not create tasks or enqueue work");

    let text = "y".repeat(1000);
    let reply = mcp
        .call_2025("tools/call", json!({"name": "echo", "arguments": {"text": text}}))
        .await
        .expect("tools/call");
    assert_eq!(reply.error_code(), None, "{}", reply.raw);
    assert_eq!(reply.result()["structuredContent"]["text"], text.as_str(), "{}", reply.raw);
}

#[tokio::test]
async fn graphs_over_the_node_limit_are_refused() {
    let redis = RedisServer::start().expect("redis");
    let conveyor = Conveyor::up(&redis.url(), &["--fixtures", "--max-dag-nodes", "5"]).expect("conveyor up");
    let mcp = Mcp::new(conveyor.mcp_url());
    mcp.wait_for_tool("noop", Duration::from_secs(10)).await.expect("worker tools");
    let graph = |n: usize| {
        let nodes: Vec<Value> = (0..n).map(|i| json!({"id": format!("n{i}"), "kind": "noop"})).collect();
        json!({"name": "run_dag", "arguments": {"nodes": nodes}})
    };
    let before = redis.written();

    let reply = mcp.call_2025("tools/call", graph(6)).await.expect("tools/call");
    assert_eq!(reply.error_code(), Some(-32602), "{}", reply.raw);
    let message = reply.message["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("limit") && message.contains('5') && message.contains('6'),
        "names the limit and the graph's size: {message}"
    );
    assert_eq!(redis.written(), before, "a refused graph must not create tasks or enqueue work");

    let reply = mcp.call_2025("tools/call", graph(5)).await.expect("tools/call");
    assert_eq!(reply.error_code(), None, "{}", reply.raw);
    assert_ne!(reply.result()["isError"], true, "{}", reply.raw);
    let nodes = reply.result()["structuredContent"]["nodes"]
        .as_object()
        .unwrap_or_else(|| panic!("no node outcomes: {}", reply.raw));
    assert_eq!(nodes.len(), 5, "{}", reply.raw);
    assert!(nodes.values().all(|n| n["status"] == "completed"), "{}", reply.raw);
}

#[tokio::test]
async fn graphs_a_tool_plans_are_held_to_the_configured_limits() {
    let redis = RedisServer::start().expect("redis");
    // One shard, so that the principal's share of the node limit is the whole of it.
    let args = ["--fixtures", "--max-dag-nodes", "6", "--max-nodes-per-principal", "5", "--shards", "1"];
    let conveyor = Conveyor::up(&redis.url(), &args).expect("conveyor up");
    let mcp = Mcp::new(conveyor.mcp_url());
    mcp.wait_for_tool("plan_fanout", Duration::from_secs(10)).await.expect("worker tools");
    let fan_out = |width: u64| json!({"name": "plan_fanout", "arguments": {"width": width, "seconds": 0}});

    // 6 parts and their join: 7 nodes, over the graph limit.
    let reply = mcp.call_2025("tools/call", fan_out(6)).await.expect("tools/call");
    let message = reply.message["error"]["message"].as_str().unwrap_or_default().to_owned();
    assert!(message.contains("7 nodes") && message.contains("max_dag_nodes"), "{}", reply.raw);
    // 5 nodes fit the graph limit, but the planner holds one already: 6 held, over the 5 a
    // principal's unfinished tasks may hold.
    let reply = mcp.call_2025("tools/call", fan_out(4)).await.expect("tools/call");
    let message = reply.message["error"]["message"].as_str().unwrap_or_default().to_owned();
    assert!(message.contains("nodes_per_principal"), "{}", reply.raw);
    // Within both, the plan runs.
    let reply = mcp.call_2025("tools/call", fan_out(3)).await.expect("tools/call");
    assert_eq!(reply.error_code(), None, "{}", reply.raw);
    assert_ne!(reply.result()["isError"], true, "{}", reply.raw);
}

#[tokio::test]
async fn a_requested_ttl_is_capped_at_the_maximum() {
    let redis = RedisServer::start().expect("redis");
    let conveyor =
        Conveyor::up(&redis.url(), &["--fixtures", "--task-ttl-ms", "30000", "--task-ttl-max-ms", "60000"])
            .expect("conveyor up");
    let mcp = Mcp::new(conveyor.mcp_url());
    mcp.wait_for_tool("slow_compute", Duration::from_secs(10)).await.expect("worker tools");

    for (requested, applied) in
        [(json!(999_999_999u64), 60_000), (json!(5_000), 5_000), (Value::Null, 30_000)]
    {
        let task = if requested.is_null() { json!({}) } else { json!({"ttl": requested}) };
        let created = mcp
            .call_2025(
                "tools/call",
                json!({"name": "slow_compute", "arguments": {"seconds": 1}, "task": task}),
            )
            .await
            .expect("tools/call");
        assert_eq!(created.error_code(), None, "{}", created.raw);
        assert_eq!(
            created.result()["task"]["ttl"],
            applied,
            "ttl {requested} applies as {applied}: {}",
            created.raw
        );
        let task_id = created.result()["task"]["taskId"].as_str().expect("task id").to_owned();
        let got = mcp.call_2025("tasks/get", json!({"taskId": task_id})).await.expect("tasks/get");
        assert_eq!(got.result()["ttl"], applied, "tasks/get reports the applied ttl: {}", got.raw);
    }
}

#[tokio::test]
async fn harmful_fixtures_load_only_in_a_test_process() {
    let redis = RedisServer::start().expect("redis");
    let gateway = Conveyor::gateway(&redis.url(), &[]).expect("gateway");
    let mcp = Mcp::new(gateway.mcp_url());

    // A worker that is not a test process offers the fixtures, but not those that harm it.
    let worker =
        Conveyor::with_env("worker", &redis.url(), &["--fixtures"], &[("CONVEYOR_TEST_PROCESS", "0")])
            .expect("worker");
    let names = tool_names_once_listed(&mcp, "greet", Duration::from_secs(10)).await;
    assert!(
        !names.iter().any(|n| n == "crash_worker"),
        "crash_worker must not be offered outside a test process: {names:?}\nworker log:\n{}",
        worker.log_text()
    );

    // A test process does offer it (so the name checked above is the right one).
    let _test_worker = Conveyor::worker(&redis.url(), &["--fixtures"]).expect("test worker");
    tool_names_once_listed(&mcp, "crash_worker", Duration::from_secs(10)).await;

    // Asking for it by name outside a test process is a configuration error.
    let log = scratch_dir("limits").join("harmful-worker.log");
    let mut child = Command::new(conveyor_bin())
        .args(["worker", "--fixtures", "--tools", "crash_worker"])
        .env("REDIS_URL", redis.url())
        .env("CONVEYOR_TEST_PROCESS", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("conveyor worker starts");
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the worker") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the worker kept running with a harmful fixture outside a test process");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(!status.success(), "the worker must refuse to start: {status}\n{stderr}");
    assert!(stderr.contains("CONVEYOR_TEST_PROCESS"), "the error names the variable: {stderr}");
}
