//! `subscriptions/listen` (2026-07-28) against real processes: a stream acknowledges first, tags
//! every message with its subscription id, delivers a task's status as it changes and its result
//! resource's update when it finishes, tells of tool and prompt list changes when a worker with
//! new offers starts, refuses task notifications to a client without the Tasks extension, agrees
//! only to the caller's own tasks, and ends with a result when its gateway shuts down.

use std::time::{Duration, Instant};

use conveyor_tests::mcp::{Mcp, tasks_client_capabilities};
use conveyor_tests::{Conveyor, RedisServer};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// Opens a listen stream; its messages arrive on the returned channel as they come.
async fn listen(url: &str, id: u64, notifications: Value, capabilities: Value) -> mpsc::Receiver<Value> {
    listen_as(url, None, id, notifications, capabilities).await
}

/// [`listen`] with a bearer token.
async fn listen_as(
    url: &str,
    bearer: Option<&str>,
    id: u64,
    notifications: Value,
    capabilities: Value,
) -> mpsc::Receiver<Value> {
    let body = json!({
        "jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
        "params": {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": capabilities,
            },
            "notifications": notifications,
        }
    });
    let mut request = reqwest::Client::new().post(url);
    if let Some(bearer) = bearer {
        request = request.bearer_auth(bearer);
    }
    let response = request
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "subscriptions/listen")
        .body(body.to_string())
        .send()
        .await
        .expect("subscriptions/listen");
    let (tx, rx) = mpsc::channel(256);
    let sse = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    tokio::spawn(async move {
        if !sse {
            // An error answers as JSON: hand it over as the only message.
            let _ = tx.send(response.json::<Value>().await.unwrap_or(Value::Null)).await;
            return;
        }
        let mut bytes = response.bytes_stream();
        let mut buffer = String::new();
        while let Some(Ok(chunk)) = bytes.next().await {
            buffer.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = buffer.find("\n\n") {
                let event: String = buffer.drain(..end + 2).collect();
                for line in event.lines() {
                    if let Some(data) = line.strip_prefix("data:")
                        && let Ok(message) = serde_json::from_str::<Value>(data.trim())
                        && tx.send(message).await.is_err()
                    {
                        return;
                    }
                }
            }
        }
    });
    rx
}

/// The next message that satisfies `wanted`, failing after `within`; every message on the way
/// must carry the subscription id.
async fn next_where(
    rx: &mut mpsc::Receiver<Value>,
    id: u64,
    within: Duration,
    seen: &mut Vec<Value>,
    wanted: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let message = match tokio::time::timeout(left, rx.recv()).await {
            Ok(Some(message)) => message,
            Ok(None) => panic!("the stream ended; messages so far: {seen:#?}"),
            Err(_) => panic!("nothing wanted arrived within {within:?}; messages so far: {seen:#?}"),
        };
        let tag = message
            .pointer("/params/_meta/io.modelcontextprotocol~1subscriptionId")
            .or_else(|| message.pointer("/result/_meta/io.modelcontextprotocol~1subscriptionId"));
        assert_eq!(tag, Some(&json!(id)), "every message names its subscription: {message}");
        seen.push(message.clone());
        if wanted(&message) {
            return message;
        }
    }
}

fn method(message: &Value) -> &str {
    message["method"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_listen_stream_tells_of_task_status_result_updates_and_list_changes() {
    let redis = RedisServer::start().expect("redis");
    let gateway = Conveyor::gateway(&redis.url(), &[]).expect("gateway");
    let _pool = Conveyor::worker(&redis.url(), &["--fixtures", "--tools", "slow_compute"]).expect("worker");
    let mcp = Mcp::new(gateway.mcp_url());
    mcp.wait_for_tool("slow_compute", Duration::from_secs(20)).await.expect("slow_compute is offered");

    // Task notifications need the Tasks extension.
    let mut refused = listen(&mcp.url, 1, json!({"taskIds": ["x"]}), json!({})).await;
    let error = refused.recv().await.expect("an answer");
    assert_eq!(error["error"]["code"], -32021, "{error}");

    let created = mcp
        .call_2026(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 1.5}}),
            tasks_client_capabilities(),
        )
        .await
        .expect("tools/call");
    let task = created.result()["taskId"].as_str().expect("a task").to_owned();
    let uri = format!("conveyor://tasks/{task}/result");
    let filter = json!({
        "taskIds": [task], "resourceSubscriptions": [uri],
        "toolsListChanged": true, "promptsListChanged": true,
    });
    let mut stream = listen(&mcp.url, 7, filter.clone(), tasks_client_capabilities()).await;
    let mut seen = Vec::new();
    let ack = next_where(&mut stream, 7, Duration::from_secs(5), &mut seen, |_| true).await;
    assert_eq!(method(&ack), "notifications/subscriptions/acknowledged", "the acknowledgement comes first");
    assert_eq!(ack["params"]["notifications"], filter, "everything asked for is agreed");

    // The task's status now, then its end with the result inlined, then its result resource.
    let first =
        next_where(&mut stream, 7, Duration::from_secs(5), &mut seen, |m| method(m) == "notifications/tasks")
            .await;
    assert_eq!(first["params"]["taskId"], task.as_str());
    let done = next_where(&mut stream, 7, Duration::from_secs(20), &mut seen, |m| {
        method(m) == "notifications/tasks" && m["params"]["status"] == "completed"
    })
    .await;
    assert!(done["params"]["result"]["content"].is_array(), "the result travels with the status: {done}");
    let updated = next_where(&mut stream, 7, Duration::from_secs(5), &mut seen, |m| {
        method(m) == "notifications/resources/updated"
    })
    .await;
    assert_eq!(updated["params"]["uri"], uri.as_str());

    // A worker with more tools and prompts starts: both lists changed.
    let _all = Conveyor::worker(&redis.url(), &["--fixtures"]).expect("second worker");
    next_where(&mut stream, 7, Duration::from_secs(20), &mut seen, |m| {
        method(m) == "notifications/tools/list_changed"
    })
    .await;
    let prompts = seen.iter().any(|m| method(m) == "notifications/prompts/list_changed");
    if !prompts {
        next_where(&mut stream, 7, Duration::from_secs(10), &mut seen, |m| {
            method(m) == "notifications/prompts/list_changed"
        })
        .await;
    }
    assert!(
        !seen.iter().any(|m| method(m) == "notifications/resources/list_changed"),
        "nothing that was not asked for: {seen:#?}"
    );

    // The gateway shuts down: the stream ends with a result, so the client listens elsewhere.
    gateway.signal("TERM");
    let end =
        next_where(&mut stream, 7, Duration::from_secs(10), &mut seen, |m| m.get("result").is_some()).await;
    assert_eq!(end["id"], 7, "{end}");
    assert_eq!(end["result"]["resultType"], "complete", "{end}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_listen_stream_agrees_only_to_the_callers_own_tasks() {
    let redis = RedisServer::start().expect("redis");
    let dir = conveyor_tests::process::scratch_dir("subscriptions-own");
    let token = |p: &str| format!("{p}-token-0123456789");
    let tokens: String = ["alice", "mallory"]
        .iter()
        .map(|p| {
            format!(
                "[[token]]\nprincipal = \"{p}\"\nsha256 = \"{}\"\n\n",
                conveyor_gateway::auth::token_digest(&token(p))
            )
        })
        .collect();
    let tokens_path = dir.join("tokens.toml");
    std::fs::write(&tokens_path, tokens).expect("tokens file");
    let conveyor =
        Conveyor::up(&redis.url(), &["--fixtures", "--tokens-file", tokens_path.to_str().expect("utf-8")])
            .expect("conveyor up");
    let alice = Mcp::new(conveyor.mcp_url()).with_api_key(&token("alice"));
    let mallory = Mcp::new(conveyor.mcp_url()).with_api_key(&token("mallory"));
    alice.wait_for_tool("slow_compute", Duration::from_secs(20)).await.expect("tools");
    let create = |mcp: Mcp| async move {
        let created = mcp
            .call_2026(
                "tools/call",
                json!({"name": "slow_compute", "arguments": {"seconds": 30}}),
                tasks_client_capabilities(),
            )
            .await
            .expect("tools/call");
        created.result()["taskId"].as_str().unwrap_or_else(|| panic!("{}", created.raw)).to_owned()
    };
    let alices = create(alice.clone()).await;
    let mallorys = create(mallory.clone()).await;
    let unknown = "0000ffffffffffffffffffffffffffff";

    let filter = json!({
        "taskIds": [alices, mallorys, unknown],
        "resourceSubscriptions": [
            format!("conveyor://tasks/{mallorys}/result"),
            format!("conveyor://tasks/{mallorys}"),
            format!("conveyor://tasks/{alices}/result"),
            "conveyor://tasks",
        ],
    });
    let mut stream =
        listen_as(&alice.url, Some(&token("alice")), 3, filter, tasks_client_capabilities()).await;
    let mut seen = Vec::new();
    let ack = next_where(&mut stream, 3, Duration::from_secs(10), &mut seen, |_| true).await;
    assert_eq!(method(&ack), "notifications/subscriptions/acknowledged", "{ack}");
    assert_eq!(
        ack["params"]["notifications"],
        json!({
            "taskIds": [alices],
            "resourceSubscriptions": [format!("conveyor://tasks/{alices}/result"), "conveyor://tasks"],
        }),
        "another principal's task and an unknown one are not agreed to"
    );
    let status = next_where(&mut stream, 3, Duration::from_secs(10), &mut seen, |m| {
        method(m) == "notifications/tasks"
    })
    .await;
    assert_eq!(status["params"]["taskId"], alices.as_str(), "{status}");
    let log = conveyor.log_text();
    assert!(
        log.lines().any(|l| l.contains("conveyor::audit")
            && l.contains("principal=alice")
            && l.contains(&mallorys)
            && l.contains("left out of the acknowledgement")),
        "the refusal is audited:\n{log}"
    );
    assert!(!seen.iter().any(|m| m.to_string().contains(&mallorys)), "nothing of mallory's: {seen:#?}");
    for (mcp, id) in [(&alice, &alices), (&mallory, &mallorys)] {
        mcp.call_2026("tasks/cancel", json!({"taskId": id}), tasks_client_capabilities())
            .await
            .expect("cancel");
    }
}

/// A task that ended before the stream joined it is told of with its outcome, read within the
/// caller's in-flight budget: an outcome too large for it is left out (the client reads it with
/// `tasks/get`), and the status still comes.
#[tokio::test]
async fn a_listen_stream_inlines_an_outcome_only_within_the_callers_budget() {
    let redis = RedisServer::start().expect("redis");
    let conveyor = Conveyor::up(
        &redis.url(),
        &[
            "--fixtures",
            "--no-auth",
            // The smallest share of in-flight memory (a largest request): an outcome of 14 MiB
            // takes three times that to read.
            "--max-inflight-bytes-per-principal",
            "37748736",
            "--max-task-bytes",
            "12582912",
            "--max-node-output-bytes",
            "16777216",
        ],
    )
    .expect("conveyor up");
    let mcp = Mcp::new(conveyor.mcp_url());
    mcp.wait_for_tool("big_output", Duration::from_secs(20)).await.expect("tools");
    let mut ended = Vec::new();
    for bytes in [1_000, 14 * 1024 * 1024] {
        let created = mcp
            .call_2026(
                "tools/call",
                json!({"name": "big_output", "arguments": {"bytes": bytes}}),
                tasks_client_capabilities(),
            )
            .await
            .expect("tools/call");
        let id = created.result()["taskId"].as_str().unwrap_or_else(|| panic!("{}", created.raw)).to_owned();
        let deadline = Instant::now() + Duration::from_secs(30);
        while conveyor_tests::mcp::status_2025(&mcp, &id).await != "completed" {
            assert!(Instant::now() < deadline, "task {id} never completed");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        ended.push(id);
    }
    let filter = json!({"taskIds": ended});
    let mut stream = listen(&mcp.url, 5, filter, tasks_client_capabilities()).await;
    let mut seen = Vec::new();
    for _ in 0..2 {
        next_where(&mut stream, 5, Duration::from_secs(20), &mut seen, |m| {
            method(m) == "notifications/tasks"
        })
        .await;
    }
    let told = |id: &str| {
        seen.iter()
            .find(|m| method(m) == "notifications/tasks" && m["params"]["taskId"] == id)
            .unwrap_or_else(|| panic!("no notification of {id}"))
            .clone()
    };
    let small = told(&ended[0]);
    assert_eq!(small["params"]["status"], "completed", "{small}");
    assert!(small["params"]["result"]["content"].is_array(), "a small outcome travels along: {small}");
    let large = told(&ended[1]);
    assert_eq!(large["params"]["status"], "completed");
    assert!(
        large["params"].get("result").is_none(),
        "an outcome past the budget stays behind: {}",
        &large.to_string()[..300]
    );
}
