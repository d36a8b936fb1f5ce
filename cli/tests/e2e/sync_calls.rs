//! Synchronous calls at their edges, on real `conveyor` processes and a real Redis: a call that
//! outlives the gateway's wait (`--sync-timeout-ms`) goes on as a task the client can fetch and
//! cancel, on both wires and with the official Python SDK; a 2025-11-25 `notifications/cancelled`
//! cancels only the call it can be matched to; and a client that reads its SSE stream slowly gets
//! its call's end as soon as it reads on; calls that find the gateway's reading of the tool catalog
//! stale together share one read of it.

use std::time::Duration;

use anyhow::{Context, bail, ensure};
use conveyor_tests::mcp::{Reply, settle, tasks_client_capabilities, wait_for_tools};
use conveyor_tests::process::{output_text, scratch_dir};
use conveyor_tests::python::{MCP_1, python_with, script};
use conveyor_tests::{Conveyor, Mcp, RedisServer};
use serde_json::{Value, json};

/// How long the gateways of these tests wait for a synchronous call.
const WAIT_MS: &str = "2000";

/// A tools file with `nap`, a command that takes longer than the wait and never runs as a task.
fn nap_tools() -> String {
    let tools = scratch_dir("sync-calls").join("tools.toml");
    std::fs::write(
        &tools,
        "[[tool]]\nname = \"nap\"\ndescription = \"Sleeps a few seconds\"\nargv = [\"sleep\", \"4\"]\ntask_support = \"forbidden\"\n",
    )
    .expect("tools file");
    tools.display().to_string()
}

/// The task an overdue call's error names, checked to say what it is and how to reach it.
fn named_task(reply: &Reply, how: &str) -> String {
    assert_eq!(reply.error_code(), Some(-32603), "{}", reply.raw);
    let error = &reply.message["error"];
    let task = error["data"]["taskId"].as_str().unwrap_or_else(|| panic!("no task named: {}", reply.raw));
    let message = error["message"].as_str().unwrap_or_default();
    assert!(message.contains(task) && message.contains(how), "{message}");
    assert_eq!(error["data"]["task"]["taskId"], task, "{}", reply.raw);
    assert_eq!(error["data"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], task);
    task.to_owned()
}

fn text_of(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn a_call_past_the_wait_goes_on_as_a_task_the_client_can_fetch_and_cancel() {
    let redis = RedisServer::start().expect("redis");
    let tools = nap_tools();
    let up =
        Conveyor::up(&redis.url(), &["--fixtures", "--sync-timeout-ms", WAIT_MS, "--tools-file", &tools])
            .expect("conveyor up");
    let mcp = Mcp::new(up.mcp_url());
    wait_for_tools(&mcp, &["slow_compute", "nap"]).await;

    // 2025-11-25: the error names the task; tasks/get, tasks/list and tasks/result reach it.
    let call = json!({"name": "slow_compute", "arguments": {"seconds": 4, "label": "late"}});
    let reply = mcp.call_2025("tools/call", call).await.expect("tools/call");
    let late = named_task(&reply, "tasks/result");
    let got = mcp.call_2025("tasks/get", json!({"taskId": late})).await.expect("tasks/get");
    assert!(
        ["working", "completed"].contains(&got.result()["status"].as_str().unwrap_or_default()),
        "{}",
        got.raw
    );
    let listed = mcp.call_2025("tasks/list", json!({})).await.expect("tasks/list");
    assert!(listed.raw.contains(&late), "tasks/list: {}", listed.raw);
    let result = mcp.call_2025("tasks/result", json!({"taskId": late})).await.expect("tasks/result");
    assert_eq!(text_of(result.result()), "computed late", "{}", result.raw);
    assert_eq!(result.result()["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], late.as_str());

    // ... and tasks/cancel stops its work.
    let call = json!({"name": "slow_compute", "arguments": {"seconds": 60, "label": "doomed"}});
    let reply = mcp.call_2025("tools/call", call).await.expect("tools/call");
    let doomed = named_task(&reply, "tasks/cancel");
    let cancelled = mcp.call_2025("tasks/cancel", json!({"taskId": doomed})).await.expect("tasks/cancel");
    assert_eq!(cancelled.result()["status"], "cancelled", "{}", cancelled.raw);
    redis
        .wait_node_status(&doomed, "root", "cancelled", Duration::from_secs(10))
        .await
        .expect("the work stops");

    // 2026-07-28 without the tasks extension: an error naming the task, which tasks/get (with the
    // extension declared) and tasks/cancel reach.
    let call = json!({"name": "slow_compute", "arguments": {"seconds": 4, "label": "later"}});
    let reply = mcp.call_2026("tools/call", call, json!({})).await.expect("tools/call");
    let later = named_task(&reply, "tasks/get");
    let done = settle(&mcp, &later, Duration::from_secs(30)).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(text_of(&done["result"]), "computed later", "{done}");
    let call = json!({"name": "slow_compute", "arguments": {"seconds": 60}});
    let reply = mcp.call_2026("tools/call", call, json!({})).await.expect("tools/call");
    let stopped = named_task(&reply, "tasks/cancel");
    let ack = mcp
        .call_2026("tasks/cancel", json!({"taskId": stopped}), tasks_client_capabilities())
        .await
        .expect("tasks/cancel");
    assert!(ack.error_code().is_none(), "{}", ack.raw);
    assert_eq!(settle(&mcp, &stopped, Duration::from_secs(10)).await["status"], "cancelled");

    // 2026-07-28 with the tasks extension: a tool that never runs as a task answers with the task
    // its call became.
    let reply = mcp
        .call_2026("tools/call", json!({"name": "nap", "arguments": {}}), tasks_client_capabilities())
        .await
        .expect("tools/call");
    assert_eq!(reply.result()["resultType"], "task", "{}", reply.raw);
    let nap = reply.result()["taskId"].as_str().expect("a task id").to_owned();
    assert_eq!(settle(&mcp, &nap, Duration::from_secs(30)).await["status"], "completed");
}

#[tokio::test]
async fn the_python_sdk_fetches_and_cancels_the_task_of_a_call_past_the_wait() -> anyhow::Result<()> {
    let python = python_with(&MCP_1).await?;
    let redis = RedisServer::start()?;
    let up = Conveyor::up(&redis.url(), &["--fixtures", "--sync-timeout-ms", WAIT_MS])?;
    let run = script(&python, "overdue_client.py").arg(up.mcp_url()).output();
    let output = match tokio::time::timeout(Duration::from_secs(120), run).await {
        Ok(output) => output.context("cannot run the Python client")?,
        Err(_) => bail!("the Python client did not finish\n--- conveyor log ---\n{}", up.log_text()),
    };
    ensure!(
        output.status.success(),
        "the Python client failed\n{}\n--- conveyor log ---\n{}",
        output_text(&output),
        up.log_text()
    );
    print!("{}", String::from_utf8_lossy(&output.stdout));
    Ok(())
}

/// The hidden task of the running synchronous call whose arguments carry `label`.
async fn call_labelled(redis: &RedisServer, label: &str) -> String {
    let needle = format!("\"label\":\"{label}\"");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let mut conn = redis.connection().expect("redis connection");
        for key in redis.keys("cv:{cv.*}:t:*") {
            let (call, mode): (Option<String>, Option<String>) =
                redis::cmd("HMGET").arg(&key).arg("call").arg("mode").query(&mut conn).unwrap_or_default();
            if mode.as_deref() == Some("sync") && call.is_some_and(|c| c.contains(&needle)) {
                let id = key.rsplit(':').next().unwrap_or_default().to_owned();
                redis
                    .wait_node_status(&id, "root", "running", Duration::from_secs(20))
                    .await
                    .expect("it runs");
                return id;
            }
        }
        assert!(std::time::Instant::now() < deadline, "no call labelled {label} appeared in Redis");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn status_of(redis: &RedisServer, task: &str) -> String {
    let mut conn = redis.connection().expect("redis connection");
    redis::cmd("HGET")
        .arg(conveyor_tests::process::task_key(task))
        .arg("status")
        .query::<Option<String>>(&mut conn)
        .expect("hget")
        .unwrap_or_default()
}

/// Starts a 2025-11-25 synchronous call of `slow_compute` with request id `id` (in `session`, or
/// without one) in the background, labelled `label`.
fn start_call(mcp: &Mcp, session: Option<&str>, id: u64, label: &str) -> tokio::task::JoinHandle<()> {
    let mcp = mcp.clone();
    let session = session.map(str::to_owned);
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "slow_compute", "arguments": {"seconds": 60, "label": label}}});
    tokio::spawn(async move {
        let mut headers = vec![("mcp-protocol-version", "2025-11-25")];
        if let Some(session) = &session {
            headers.push(("mcp-session-id", session.as_str()));
        }
        let _ = mcp.post_raw(&headers, body.to_string()).await;
    })
}

/// `notifications/cancelled` for request `id`, in `session` or without one.
async fn cancel(mcp: &Mcp, session: Option<&str>, id: u64) {
    let body = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": id, "reason": "the user gave up"}});
    let mut headers = vec![("mcp-protocol-version", "2025-11-25")];
    if let Some(session) = session {
        headers.push(("mcp-session-id", session));
    }
    let posted = mcp.post_raw(&headers, body.to_string()).await.expect("notifications/cancelled");
    // The gateway acts on a notification before it accepts it.
    assert_eq!(posted.status, 202, "{}", posted.raw);
}

async fn session(mcp: &Mcp) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "conveyor-tests", "version": "1"}}});
    let reply = mcp.post_raw(&[], init.to_string()).await.expect("initialize");
    reply.session_id.unwrap_or_else(|| panic!("no session: {}", reply.raw))
}

#[tokio::test]
async fn a_sessionless_cancel_stops_only_the_call_it_matches_alone() {
    let redis = RedisServer::start().expect("redis");
    let up = Conveyor::up(&redis.url(), &["--fixtures"]).expect("conveyor up");
    // Two clients of one principal (no authentication: everyone is the same caller, as two clients
    // sharing one token are), neither with a session.
    let (alice, bob) = (Mcp::new(up.mcp_url()), Mcp::new(up.mcp_url()));
    wait_for_tools(&alice, &["slow_compute"]).await;

    // Both use request id 7: a cancel of id 7 names neither alone, and stops neither.
    let _a = start_call(&alice, None, 7, "alice-7");
    let alice_7 = call_labelled(&redis, "alice-7").await;
    let _b = start_call(&bob, None, 7, "bob-7");
    let bob_7 = call_labelled(&redis, "bob-7").await;
    cancel(&alice, None, 7).await;
    assert_eq!(status_of(&redis, &alice_7), "working", "alice's call");
    assert_eq!(status_of(&redis, &bob_7), "working", "bob's call was cancelled by alice's notification");
    assert!(up.log_text().contains("cancel_ambiguous"), "the refusal is audited:\n{}", up.log_text());

    // A request id that one call alone is running under is still cancelled.
    let _c = start_call(&alice, None, 8, "alice-8");
    let alice_8 = call_labelled(&redis, "alice-8").await;
    cancel(&alice, None, 8).await;
    assert_eq!(status_of(&redis, &alice_8), "cancelled");
    assert_eq!(status_of(&redis, &bob_7), "working");

    // With sessions, the session tells the calls apart.
    let (alice_session, bob_session) = (session(&alice).await, session(&bob).await);
    let _d = start_call(&alice, Some(&alice_session), 9, "alice-9");
    let alice_9 = call_labelled(&redis, "alice-9").await;
    let _e = start_call(&bob, Some(&bob_session), 9, "bob-9");
    let bob_9 = call_labelled(&redis, "bob-9").await;
    cancel(&bob, Some(&bob_session), 9).await;
    assert_eq!(status_of(&redis, &bob_9), "cancelled");
    assert_eq!(status_of(&redis, &alice_9), "working");
}

#[tokio::test]
async fn a_slow_sse_reader_gets_the_end_of_its_call_as_soon_as_it_reads() {
    let redis = RedisServer::start().expect("redis");
    let up = Conveyor::up(&redis.url(), &["--fixtures"]).expect("conveyor up");
    let mcp = Mcp::new(up.mcp_url());
    wait_for_tools(&mcp, &["slow_compute"]).await;

    // A call whose client asks for progress on an SSE stream, then reads nothing for a while.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "slow_compute", "arguments": {"seconds": 120, "label": "slow-reader"},
        "_meta": {"progressToken": "p"}}});
    let mut response = reqwest::Client::new()
        .post(&mcp.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .body(body.to_string())
        .send()
        .await
        .expect("tools/call");
    let task = call_labelled(&redis, "slow-reader").await;
    let mut conn = redis.connection().expect("redis connection");
    let waiters: String = redis::cmd("HGET")
        .arg(conveyor_tests::process::task_key(&task))
        .arg("waiters")
        .query(&mut conn)
        .expect("the call's waiters");
    let inbox = serde_json::from_str::<Vec<String>>(&waiters).expect("waiters")[0].clone();

    // Far more progress than the stream's buffers hold (the sockets' included), then the end, on
    // the gateway's inbox as the transitions publish them.
    let padding = "x".repeat(1_000);
    for batch in 0..20 {
        let mut pipe = redis::pipe();
        for i in 0..1_000 {
            let event =
                json!({"task": task, "type": "progress", "progress": batch * 1_000 + i, "message": padding});
            pipe.cmd("SPUBLISH").arg(&inbox).arg(event.to_string()).ignore();
        }
        let () = pipe.query(&mut conn).expect("publish");
    }
    let end = json!({"task": task, "type": "status", "status": "completed", "message": "done",
        "result": {"content": [{"type": "text", "text": "the end of the slow reader's call"}]}});
    let () = redis::cmd("SPUBLISH").arg(&inbox).arg(end.to_string()).query(&mut conn).expect("publish");

    // Reading now, the client gets the end after what the buffers kept, while the task (still
    // working in Redis: only the event says it ended) has well over a minute to run.
    let mut read = Vec::new();
    let answered = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(chunk) = response.chunk().await.expect("the stream") {
            read.extend_from_slice(&chunk);
            if String::from_utf8_lossy(&read[read.len().saturating_sub(4_096)..])
                .contains("the end of the slow reader's call")
            {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(answered, Ok(true), "the end never came ({} bytes read)", read.len());
    assert!(read.len() > 1_000_000, "the stream's buffers held {} bytes: they did not fill", read.len());
}

/// `HGETALL`s Redis has run so far (the catalog's reads among them).
fn hgetalls(redis: &RedisServer) -> u64 {
    redis.command_stats().expect("commandstats").get("hgetall").copied().unwrap_or(0)
}

#[tokio::test]
async fn calls_that_find_the_tool_catalog_stale_together_read_it_once() {
    let redis = RedisServer::start().expect("redis");
    let gateway = Conveyor::gateway(&redis.url(), &[]).expect("gateway");
    let _worker = Conveyor::worker(&redis.url(), &["--fixtures"]).expect("worker");
    let mcp = Mcp::new(gateway.mcp_url());
    wait_for_tools(&mcp, &["greet"]).await;
    let greet = |name: String| {
        let mcp = mcp.clone();
        async move {
            let reply = mcp
                .call_2025("tools/call", json!({"name": "greet", "arguments": {"name": name}}))
                .await
                .expect("tools/call");
            assert_eq!(reply.result()["content"][0]["text"], format!("Hello, {name}!"), "{}", reply.raw);
        }
    };
    // 32 connections to the gateway, open and idle, so that the 32 calls below arrive together.
    futures::future::join_all((0..32).map(|i| greet(format!("w{i}")))).await;
    // The gateway keeps its reading of the catalog for 2 s: past that, one call reads it again.
    tokio::time::sleep(Duration::from_millis(2_200)).await;
    let before = hgetalls(&redis);
    greet("one".to_owned()).await;
    let one_read = hgetalls(&redis) - before;
    assert!(one_read >= 1, "a stale catalog is read again");

    // Many calls that find it stale at once share one read (each would read and compile every
    // tool's schema again otherwise).
    tokio::time::sleep(Duration::from_millis(2_200)).await;
    let before = hgetalls(&redis);
    futures::future::join_all((0..32).map(|i| greet(format!("n{i}")))).await;
    let reads = hgetalls(&redis) - before;
    assert!(
        reads <= one_read + 1,
        "32 calls on a stale catalog ran {reads} HGETALLs; one call runs {one_read}"
    );
}
