//! Readers read what they show. Listings of tasks with large results read status fields only, so
//! their answers stay small and the gateway holds nothing of the results; a detail read holds what
//! it reads of its caller's in-flight budget, and one larger than the caller's whole share is
//! refused, naming the limit, while another principal reads on; the poll gap holds on every
//! reader, and a read it refuses reads nothing; what a client sends never starts a log line.
//!
//! Each test runs real `conveyor` processes against a real `redis-server`, with static tokens for
//! alice and bob. Memory figures are printed; the bounds asserted on them are generous.

use std::path::{Path, PathBuf};
use std::time::Duration;

use conveyor_gateway::auth::token_digest;
use conveyor_tests::mcp::{Reply, create_2025, tasks_client_capabilities};
use conveyor_tests::process::{peak_rss, scratch_dir};
use conveyor_tests::{Conveyor, Mcp, RedisServer};
use serde_json::{Value, json};

/// JSON-RPC code of a refusal over a limit.
const OVERLOADED: i64 = -32029;
const MIB: u64 = 1024 * 1024;

fn token(principal: &str) -> String {
    format!("{principal}-token-0123456789")
}

fn tokens_file(dir: &Path, principals: &[&str]) -> PathBuf {
    let text: String = principals
        .iter()
        .map(|p| format!("[[token]]\nprincipal = \"{p}\"\nsha256 = \"{}\"\n\n", token_digest(&token(p))))
        .collect();
    let path = dir.join("tokens.toml");
    std::fs::write(&path, text).expect("tokens file");
    path
}

/// A worker with the fixtures, and a gateway of its own (so that its memory is the readers' alone)
/// with tokens for alice and bob and `extra` arguments.
fn deployment(redis: &RedisServer, name: &str, extra: &[&str]) -> (Conveyor, Conveyor) {
    let tokens = tokens_file(&scratch_dir(name), &["alice", "bob"]);
    let worker = Conveyor::worker(&redis.url(), &["--fixtures"]).expect("worker");
    let mut args = vec!["--tokens-file", tokens.to_str().expect("utf-8")];
    args.extend_from_slice(extra);
    let gateway = Conveyor::gateway(&redis.url(), &args).expect("gateway");
    (worker, gateway)
}

fn client(gateway: &Conveyor, principal: &str) -> Mcp {
    Mcp::new(gateway.mcp_url()).with_api_key(&token(principal))
}

/// A task of `big_output` with a result of `bytes` bytes, once it has completed: its result read
/// by `tasks/result`, which waits for it.
async fn big_task(mcp: &Mcp, bytes: u64) -> String {
    let id = create_2025(mcp, "big_output", json!({"bytes": bytes})).await;
    let reply = mcp.call_2025("tasks/result", json!({"taskId": id})).await.expect("tasks/result");
    let text =
        reply.result()["content"][0]["text"].as_str().unwrap_or_else(|| panic!("{}", head(&reply.raw)));
    assert_eq!(text.len() as u64, bytes);
    id
}

/// A task of `big_output` with a result of `bytes` bytes, once `tasks/get` says it has completed.
async fn big_task_polled(mcp: &Mcp, bytes: u64) -> String {
    let id = create_2025(mcp, "big_output", json!({"bytes": bytes})).await;
    assert_eq!(status_2025(mcp, &id, Duration::from_secs(60)).await, "completed");
    id
}

async fn status_2025(mcp: &Mcp, id: &str, within: Duration) -> String {
    let deadline = std::time::Instant::now() + within;
    loop {
        let got = mcp.call_2025("tasks/get", json!({"taskId": id})).await.expect("tasks/get");
        let status = got.result()["status"].as_str().unwrap_or_else(|| panic!("{}", got.raw)).to_owned();
        if status != "working" || std::time::Instant::now() > deadline {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The start of a long text, for a failure message.
fn head(text: &str) -> &str {
    &text[..text.len().min(500)]
}

/// `GET <gateway>/ui/api/<path>` as `principal`: the status and the body.
async fn ui_get(gateway: &Conveyor, principal: &str, path: &str) -> (u16, String) {
    let response = reqwest::Client::new()
        .get(format!("{}/ui/api/{path}", gateway.base))
        .bearer_auth(token(principal))
        .send()
        .await
        .expect("GET");
    let status = response.status().as_u16();
    (status, response.text().await.expect("body"))
}

fn limit_of(reply: &Reply) -> &str {
    reply.message["error"]["data"]["limit"].as_str().unwrap_or_default()
}

/// Bytes Redis has sent its clients so far.
fn redis_output_bytes(redis: &RedisServer) -> u64 {
    let mut conn = redis.connection().expect("redis");
    let info: String = redis::cmd("INFO").arg("stats").query(&mut conn).expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix("total_net_output_bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("total_net_output_bytes")
}

#[tokio::test]
async fn listings_of_tasks_with_large_results_stay_small_and_hold_none_of_them() {
    let redis = RedisServer::start().expect("redis");
    let (_worker, gateway) = deployment(&redis, "readers-listings", &[]);
    let alice = client(&gateway, "alice");
    alice.wait_for_tool("big_output", Duration::from_secs(30)).await.expect("tools");
    for _ in 0..20 {
        big_task_polled(&alice, 4 * MIB).await;
    }
    let base = gateway.base.clone();
    let read = move |n: usize| {
        let (alice, base) = (alice.clone(), base.clone());
        async move {
            let raw = match n % 3 {
                0 => alice.call_2025("tasks/list", json!({})).await.expect("tasks/list").raw,
                1 => {
                    let reply = alice
                        .call_2025("resources/read", json!({"uri": "conveyor://tasks"}))
                        .await
                        .expect("read");
                    reply.result()["contents"][0]["text"].as_str().unwrap_or_default().to_owned()
                }
                _ => reqwest::Client::new()
                    .get(format!("{base}/ui/api/tasks"))
                    .bearer_auth(token("alice"))
                    .send()
                    .await
                    .expect("GET")
                    .text()
                    .await
                    .expect("body"),
            };
            let listed: Value = serde_json::from_str(&raw).unwrap_or_else(|_| panic!("{raw}"));
            let listed = listed.get("result").unwrap_or(&listed);
            assert_eq!(listed["tasks"].as_array().map(Vec::len), Some(20), "every task is listed: {raw}");
            raw.len()
        }
    };
    // The first listing of each kind warms what every later one shares.
    for n in 0..3 {
        read(n).await;
    }
    let pid = gateway.pid().expect("pid");
    let before = peak_rss(pid);
    let readers: Vec<_> = (0..4)
        .map(|r| {
            let read = read.clone();
            tokio::spawn(async move {
                let mut largest = 0;
                for n in 0..12 {
                    largest = largest.max(read(r + n).await);
                }
                largest
            })
        })
        .collect();
    let mut largest = 0;
    for reader in readers {
        largest = largest.max(reader.await.expect("reader"));
    }
    let growth = peak_rss(pid).saturating_sub(before);
    println!(
        "4 readers x 12 listings of 20 tasks with 4 MiB results: largest answer {largest} bytes; gateway peak RSS +{:.1} MiB",
        growth as f64 / MIB as f64
    );
    assert!(largest < 64 * 1024, "a listing carries no result: {largest} bytes");
    // Reading the results would hold 80 MiB of text per listing, several times over once parsed.
    assert!(growth < 100 * MIB, "the gateway grew {} MiB while listing", growth / MIB);
    let bob = client(&gateway, "bob");
    let bobs = bob.call_2025("tasks/list", json!({})).await.expect("tasks/list");
    assert_eq!(bobs.result()["tasks"], json!([]), "{}", bobs.raw);
}

#[tokio::test]
async fn a_detail_read_larger_than_a_principals_share_is_refused_while_another_reads_on() {
    let redis = RedisServer::start().expect("redis");
    let (_worker, gateway) = deployment(
        &redis,
        "readers-budget",
        &[
            "--max-body-bytes",
            "1048576",
            "--max-parsed-bytes",
            "1048576",
            "--max-inflight-bytes",
            "16777216",
            "--max-inflight-bytes-per-principal",
            "4194304",
            "--max-task-bytes",
            "1048576",
        ],
    );
    let (alice, bob) = (client(&gateway, "alice"), client(&gateway, "bob"));
    alice.wait_for_tool("big_output", Duration::from_secs(30)).await.expect("tools");
    let bobs = big_task_polled(&bob, 512 * 1024).await;
    // This gateway's configuration lets no task store more than a third of a share, so the large
    // task comes through a gateway of the default configuration, as during a rolling change of
    // limits. A read holds three times what it reads: 2 MiB of result is 6 MiB, over alice's
    // 4 MiB. A graph of one node, so that the node keeps its output too.
    let tokens = tokens_file(&scratch_dir("readers-roomy"), &["alice", "bob"]);
    let roomy = Conveyor::gateway(&redis.url(), &["--tokens-file", tokens.to_str().expect("utf-8")])
        .expect("gateway");
    let graph = json!({"nodes": [{"id": "big", "tool": "big_output", "arguments": {"bytes": 2 * MIB}}], "output": "big"});
    let large = create_2025(&client(&roomy, "alice"), "run_dag", graph).await;
    assert_eq!(status_2025(&alice, &large, Duration::from_secs(60)).await, "completed");
    let small = big_task_polled(&alice, 1024).await;

    let reply = alice.call_2025("tasks/result", json!({"taskId": large})).await.expect("tasks/result");
    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(reply.error_code(), Some(OVERLOADED), "{}", reply.raw);
    assert_eq!(limit_of(&reply), "max_inflight_bytes_per_principal", "{}", reply.raw);
    assert_eq!(reply.message["error"]["data"]["retryable"], false, "no wait makes room: {}", reply.raw);
    assert!(reply.raw.len() < 4096, "the refusal carries nothing of the result");
    let got = alice
        .call_2026("tasks/get", json!({"taskId": large}), tasks_client_capabilities())
        .await
        .expect("tasks/get");
    assert_eq!((got.status, limit_of(&got)), (200, "max_inflight_bytes_per_principal"), "{}", got.raw);
    let resource = format!("conveyor://tasks/{large}/result");
    let read = alice.call_2025("resources/read", json!({"uri": resource})).await.expect("read");
    assert_eq!(limit_of(&read), "max_inflight_bytes_per_principal", "{}", read.raw);
    let (status, body) = ui_get(&gateway, "alice", &format!("tasks/{large}")).await;
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("max_inflight_bytes_per_principal"), "{body}");

    // What does not need the result is read: the task's status, its state resource, the list.
    let status = alice.call_2025("tasks/get", json!({"taskId": large})).await.expect("tasks/get");
    assert_eq!(status.result()["status"], "completed", "{}", status.raw);
    let state = alice
        .call_2025("resources/read", json!({"uri": format!("conveyor://tasks/{large}")}))
        .await
        .expect("read");
    let state: Value = serde_json::from_str(
        state.result()["contents"][0]["text"].as_str().unwrap_or_else(|| panic!("{}", state.raw)),
    )
    .expect("JSON");
    assert_eq!(state["status"], "completed", "{state}");
    let node = &state["nodes"][0];
    assert_eq!(node["nodeId"], "big", "{state}");
    assert!(node["outputBytes"].as_u64().is_some_and(|n| n > 2 * MIB), "a node's output is sized: {state}");
    assert!(node.get("output").is_none(), "and not shown: {state}");
    // A result within her share is hers, whole.
    let reply = alice.call_2025("tasks/result", json!({"taskId": small})).await.expect("tasks/result");
    assert_eq!(reply.result()["content"][0]["text"].as_str().map(str::len), Some(1024), "{}", reply.raw);
    // Bob's 512 KiB (1.5 MiB held) is read in his own share.
    let reply = bob.call_2025("tasks/result", json!({"taskId": bobs})).await.expect("tasks/result");
    assert_eq!(
        reply.result()["content"][0]["text"].as_str().map(str::len),
        Some(512 * 1024),
        "{}",
        head(&reply.raw)
    );
    let got = bob
        .call_2026("tasks/get", json!({"taskId": bobs}), tasks_client_capabilities())
        .await
        .expect("tasks/get");
    assert_eq!(got.result()["status"], "completed", "{}", head(&got.raw));
    assert_eq!(got.result()["result"]["content"][0]["text"].as_str().map(str::len), Some(512 * 1024));
}

#[tokio::test]
async fn the_poll_gap_holds_on_every_reader_and_a_refused_read_reads_nothing() {
    let redis = RedisServer::start().expect("redis");
    let (_worker, gateway) = deployment(&redis, "readers-gap", &["--min-poll-gap-ms", "60000"]);
    let (alice, bob) = (client(&gateway, "alice"), client(&gateway, "bob"));
    alice.wait_for_tool("big_output", Duration::from_secs(30)).await.expect("tools");
    // Its first tasks/result waits for the end, and reads the result: the result gate is passed.
    let sent = redis_output_bytes(&redis);
    let id = big_task(&alice, 4 * MIB).await;
    assert!(redis_output_bytes(&redis) - sent > 4 * MIB, "a served read reads the result");

    let sent = redis_output_bytes(&redis);
    let again = alice.call_2025("tasks/result", json!({"taskId": id})).await.expect("tasks/result");
    let read_by_refusal = redis_output_bytes(&redis) - sent;
    assert_eq!(again.error_code(), Some(OVERLOADED), "{}", again.raw);
    assert_eq!(limit_of(&again), "min_poll_gap_ms", "{}", again.raw);
    assert!(again.message["error"]["data"]["retryAfterMs"].as_u64().is_some_and(|ms| ms > 0 && ms <= 60_000));
    assert!(read_by_refusal < MIB, "a refused read reads nothing of the task: {read_by_refusal} bytes");
    // The result resource shares the result's gate.
    let resource = format!("conveyor://tasks/{id}/result");
    let read = alice.call_2025("resources/read", json!({"uri": resource})).await.expect("read");
    assert_eq!(limit_of(&read), "min_poll_gap_ms", "{}", head(&read.raw));

    // Polling the status has a gate of its own, which the task resource and the web view share.
    let got = alice.call_2025("tasks/get", json!({"taskId": id})).await.expect("tasks/get");
    assert_eq!(got.result()["status"], "completed", "{}", got.raw);
    let state = alice
        .call_2025("resources/read", json!({"uri": format!("conveyor://tasks/{id}")}))
        .await
        .expect("read");
    assert_eq!(limit_of(&state), "min_poll_gap_ms", "{}", state.raw);
    let (status, body) = ui_get(&gateway, "alice", &format!("tasks/{id}")).await;
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("min_poll_gap_ms"), "{body}");

    // A listing's page too, each reader's own; another principal has a gate of his own.
    for (first, again) in [
        (
            alice.call_2025("tasks/list", json!({})).await.expect("list"),
            alice.call_2025("tasks/list", json!({})).await.expect("list"),
        ),
        (
            alice.call_2025("resources/read", json!({"uri": "conveyor://tasks"})).await.expect("read"),
            alice.call_2025("resources/read", json!({"uri": "conveyor://tasks"})).await.expect("read"),
        ),
    ] {
        assert_eq!(first.error_code(), None, "{}", first.raw);
        assert_eq!(limit_of(&again), "min_poll_gap_ms", "{}", again.raw);
    }
    assert_eq!(ui_get(&gateway, "alice", "tasks").await.0, 200);
    assert_eq!(ui_get(&gateway, "alice", "tasks").await.0, 429);
    let bobs = bob.call_2025("tasks/list", json!({})).await.expect("list");
    assert_eq!(bobs.error_code(), None, "{}", bobs.raw);
    let denied = bob.call_2025("tasks/result", json!({"taskId": id})).await.expect("tasks/result");
    assert_eq!(denied.error_code(), Some(-32602), "another principal's task is not found: {}", denied.raw);
}

#[tokio::test]
async fn what_a_client_sends_never_starts_a_log_line() {
    let redis = RedisServer::start().expect("redis");
    let (_worker, gateway) = deployment(&redis, "readers-log", &[]);
    let alice = client(&gateway, "alice");
    // An answer to an input request that names no task: its key is logged.
    let forged = "k\n1999-01-01T00:00:00.000000Z  INFO conveyor::audit: event=\"granted\" principal=\"root\"\r\u{1b}[2K";
    let body = json!({"jsonrpc": "2.0", "id": format!("conveyor-input/nosuchtask/1/{forged}"), "result": {}});
    let reply =
        alice.post_raw(&[("mcp-protocol-version", "2025-11-25")], body.to_string()).await.expect("post");
    assert_eq!(reply.status, 202, "{}", reply.raw);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let log = loop {
        let log = gateway.log_text();
        if log.contains("an answer for an unknown task") || std::time::Instant::now() > deadline {
            break log;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let line =
        log.lines().find(|l| l.contains("an answer for an unknown task")).unwrap_or_else(|| panic!("{log}"));
    assert!(line.contains(r"k\n1999-01-01T00:00:00.000000Z"), "the key is kept, escaped: {line}");
    assert!(!log.contains('\u{1b}') && !log.contains('\r'), "no terminal control reaches the log");
    assert!(!log.lines().any(|l| l.starts_with("1999-01-01")), "no forged line:\n{log}");
}

#[tokio::test]
async fn the_web_views_stream_reads_a_finished_task_once_not_every_tick() {
    let redis = RedisServer::start().expect("redis");
    let (_worker, gateway) = deployment(&redis, "readers-stream", &[]);
    let alice = client(&gateway, "alice");
    alice.wait_for_tool("big_output", Duration::from_secs(30)).await.expect("tools");
    let id = big_task_polled(&alice, 4 * MIB).await;

    let sent = redis_output_bytes(&redis);
    let mut response = reqwest::Client::new()
        .get(format!("{}/ui/api/stream?task={id}", gateway.base))
        .bearer_auth(token("alice"))
        .send()
        .await
        .expect("stream");
    assert_eq!(response.status().as_u16(), 200);
    // Six ticks of the stream, at 500 ms each.
    let until = tokio::time::Instant::now() + Duration::from_secs(3);
    let mut text = String::new();
    while let Ok(Ok(Some(chunk))) = tokio::time::timeout_at(until, response.chunk()).await {
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    drop(response);
    let read = redis_output_bytes(&redis) - sent;
    let details = text.matches("event: task\n").count();
    println!(
        "the stream's first 3 s with a finished 4 MiB task open: {details} task event(s), {read} bytes read from Redis"
    );
    assert_eq!(details, 1, "the detail is sent once: {}", head(&text));
    assert!(text.contains("event: tasks\n"), "the list too: {}", head(&text));
    assert!(read > 4 * MIB, "the detail was read");
    assert!(read < 8 * MIB, "and read once, not at every tick: {read} bytes");
}
