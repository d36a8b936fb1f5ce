//! Tools that ask the client for input, end to end: a node that asks parks (its stream entry is
//! acknowledged, its worker slot freed, its questions kept in Redis), the answers may come through
//! any gateway, and the node runs again as a new attempt on whichever worker is free, even one
//! started after the asking worker was killed. Also: partial answers, cancelling a task that waits
//! for input, 2026-07-28 synchronous calls that ask in rounds (MRTR, `requestState`), and
//! cancelling synchronous calls (2025-11-25 `notifications/cancelled`, a closed connection).

use std::time::{Duration, Instant};

use conveyor_shared::model::now_ms;
use conveyor_tests::mcp::{Reply, create_2026, get_2026, tasks_client_capabilities, wait_status};
use conveyor_tests::process::task_key;
use conveyor_tests::{Conveyor, Mcp, RedisServer};
use serde_json::{Value, json};

/// A 2026-07-28 client that takes tasks and answers elicitation forms.
fn asking_client() -> Value {
    let mut capabilities = tasks_client_capabilities();
    capabilities["elicitation"] = json!({});
    capabilities
}

/// A Redis and two gateways on it; workers are started by each test.
struct Stack {
    redis: RedisServer,
    a: Mcp,
    b: Mcp,
    _gateways: (Conveyor, Conveyor),
}

fn stack() -> Stack {
    let redis = RedisServer::start().expect("redis");
    let gateway_a = Conveyor::gateway(&redis.url(), &[]).expect("gateway A");
    let gateway_b = Conveyor::gateway(&redis.url(), &[]).expect("gateway B");
    Stack {
        a: Mcp::new(gateway_a.mcp_url()),
        b: Mcp::new(gateway_b.mcp_url()),
        redis,
        _gateways: (gateway_a, gateway_b),
    }
}

/// Starts a fixtures worker and waits until it has started; returns it and its name.
async fn start_worker(redis: &RedisServer, args: &[&str]) -> (Conveyor, String) {
    let worker = Conveyor::worker(&redis.url(), args).expect("worker");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(name) = worker.logged_worker_name() {
            return (worker, name);
        }
        assert!(Instant::now() < deadline, "the worker never started:\n{}", worker.log_text());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `tasks/update` (2026-07-28) with the given answers.
async fn update(mcp: &Mcp, task: &str, responses: Value) -> Reply {
    mcp.call_2026("tasks/update", json!({"taskId": task, "inputResponses": responses}), asking_client())
        .await
        .expect("tasks/update")
}

/// An accepted elicitation answer.
fn accept(content: Value) -> Value {
    json!({"action": "accept", "content": content})
}

/// The `requestState` of an `input_required` result, which the next round sends back.
fn state_of(result: &Value) -> String {
    result["requestState"].as_str().unwrap_or_else(|| panic!("no requestState in {result}")).to_owned()
}

fn keys_of(requests: &Value) -> Vec<String> {
    let mut keys: Vec<String> = requests.as_object().map(|o| o.keys().cloned().collect()).unwrap_or_default();
    keys.sort();
    keys
}

/// The id of the hidden task of a synchronous call of `tool` that is not in `known`, once it
/// exists (no client sees it; its hash says `mode: sync`).
async fn hidden_task(redis: &RedisServer, tool: &str, known: &[String], within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        let mut conn = redis.connection().expect("redis connection");
        for key in redis.keys("cv:{cv.*}:t:*") {
            let (t, mode): (Option<String>, Option<String>) =
                redis::cmd("HMGET").arg(&key).arg("tool").arg("mode").query(&mut conn).unwrap_or_default();
            let id = key.rsplit(':').next().unwrap_or_default().to_owned();
            if t.as_deref() == Some(tool) && mode.as_deref() == Some("sync") && !known.contains(&id) {
                return id;
            }
        }
        assert!(Instant::now() < deadline, "no synchronous call of {tool} appeared in Redis");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One field of a task's hash.
fn task_field(redis: &RedisServer, task: &str, field: &str) -> Option<String> {
    let mut conn = redis.connection().ok()?;
    redis::cmd("HGET").arg(task_key(task)).arg(field).query(&mut conn).ok()?
}

#[tokio::test]
async fn a_question_asked_on_one_worker_is_answered_through_another_gateway_and_resumed_on_another_worker() {
    let s = stack();
    let (mut first, first_name) = start_worker(&s.redis, &["--fixtures"]).await;
    s.a.wait_for_tool("confirm_delete", Duration::from_secs(20)).await.expect("confirm_delete listed");

    let task = create_2026(&s.a, "confirm_delete", json!({"filename": "report.txt"}), asking_client()).await;
    let asked = wait_status(&s.a, &task, "input_required", &asking_client(), Duration::from_secs(15)).await;
    assert_eq!(keys_of(&asked["inputRequests"]), ["confirm"], "{asked}");
    let request = &asked["inputRequests"]["confirm"];
    assert_eq!(request["method"], "elicitation/create", "{asked}");
    assert_eq!(request["params"]["message"], "Delete report.txt?", "{asked}");
    assert_eq!(request["params"]["requestedSchema"]["properties"]["confirm"]["type"], "boolean", "{asked}");

    // Parked: nothing of the node is left in a stream or held by the worker.
    assert_eq!(s.redis.node_field(&task, "root", "status").as_deref(), Some("parked"));
    assert_eq!(s.redis.node_field(&task, "root", "attempt").as_deref(), Some("1"));
    assert_eq!(s.redis.node_field(&task, "root", "worker"), None, "a parked node has no worker");
    assert_eq!(s.redis.pending_entries(), 0, "a parked node has no pending stream entry");
    assert_eq!(s.redis.stream_entries(), 0, "a parked node has no stream entry at all");

    // The asking worker dies (SIGKILL) while the node waits; a fresh one comes up.
    first.kill();
    let (_second, second_name) = start_worker(&s.redis, &["--fixtures"]).await;
    assert_ne!(first_name, second_name);

    let answered = update(&s.b, &task, json!({"confirm": accept(json!({"confirm": true}))})).await;
    assert!(answered.error_code().is_none(), "{}", answered.raw);
    assert_eq!(
        answered.result(),
        &json!({"resultType": "complete"}),
        "tasks/update answers an empty result: {}",
        answered.raw
    );

    let done = wait_status(&s.b, &task, "completed", &asking_client(), Duration::from_secs(15)).await;
    assert_eq!(done["result"]["content"][0]["text"], "Deleted report.txt", "{done}");
    assert_eq!(
        get_2026(&s.a, &task, &asking_client()).await["status"],
        "completed",
        "every gateway tells the same"
    );
    assert_eq!(
        s.redis.node_field(&task, "root", "attempt").as_deref(),
        Some("2"),
        "the answer ran as a new attempt"
    );
    assert_eq!(
        s.redis.node_field(&task, "root", "worker").as_deref(),
        Some(second_name.as_str()),
        "the second worker ran it"
    );
    assert_eq!(s.redis.node_field(&task, "root", "status").as_deref(), Some("completed"));
    assert_eq!(s.redis.node_field(&task, "root", "losses"), None, "a parked node is never lost");
    assert_eq!(s.redis.stream_entries(), 0);
    assert_eq!(s.redis.pending_entries(), 0);
}

#[tokio::test]
async fn a_node_parked_while_its_worker_is_killed_loses_nothing() {
    let s = stack();
    // A short lease: were the parked node still bound to its worker, it would soon be taken over.
    let args = ["--fixtures", "--lease-ms", "1000"];
    let (mut only, only_name) = start_worker(&s.redis, &args).await;
    s.a.wait_for_tool("confirm_delete", Duration::from_secs(20)).await.expect("confirm_delete listed");
    let task = create_2026(&s.a, "confirm_delete", json!({"filename": "keep.me"}), asking_client()).await;
    wait_status(&s.a, &task, "input_required", &asking_client(), Duration::from_secs(15)).await;
    s.redis.wait_node_status(&task, "root", "parked", Duration::from_secs(5)).await.expect("parked");

    // The only worker dies with SIGKILL; a few lease lengths pass with no worker at all.
    only.signal("KILL");
    assert!(only.wait_exit(Duration::from_secs(5)), "the worker died");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let waiting = get_2026(&s.b, &task, &asking_client()).await;
    assert_eq!(waiting["status"], "input_required", "{waiting}");
    assert_eq!(keys_of(&waiting["inputRequests"]), ["confirm"], "the question survived: {waiting}");
    assert_eq!(s.redis.node_field(&task, "root", "status").as_deref(), Some("parked"));

    // The answer arrives while no worker lives: the node waits in its queue.
    let answered = update(&s.b, &task, json!({"confirm": accept(json!({"confirm": false}))})).await;
    assert!(answered.error_code().is_none(), "{}", answered.raw);
    let working = get_2026(&s.a, &task, &asking_client()).await;
    assert_eq!(working["status"], "working", "{working}");
    assert_eq!(s.redis.node_field(&task, "root", "status").as_deref(), Some("queued"));
    assert_eq!(s.redis.stream_entries(), 1, "the resumed node waits in its queue");

    let (_fresh, fresh_name) = start_worker(&s.redis, &args).await;
    let done = wait_status(&s.a, &task, "completed", &asking_client(), Duration::from_secs(15)).await;
    assert_eq!(done["result"]["content"][0]["text"], "Kept keep.me", "confirm=false keeps it: {done}");
    assert_eq!(s.redis.node_field(&task, "root", "attempt").as_deref(), Some("2"));
    assert_eq!(s.redis.node_field(&task, "root", "worker").as_deref(), Some(fresh_name.as_str()));
    assert_ne!(only_name, fresh_name);
    assert_eq!(s.redis.node_field(&task, "root", "losses"), None, "no loss was counted");
    assert!(s.redis.dead_letters().is_empty(), "{:?}", s.redis.dead_letters());
    assert_eq!(s.redis.stream_entries(), 0);
    assert_eq!(s.redis.pending_entries(), 0);
}

#[tokio::test]
async fn cancelling_a_task_that_waits_for_input_ends_it_and_nothing_runs() {
    let s = stack();
    let (worker, _) = start_worker(&s.redis, &["--fixtures"]).await;
    s.a.wait_for_tool("confirm_delete", Duration::from_secs(20)).await.expect("confirm_delete listed");
    let task = create_2026(&s.a, "confirm_delete", json!({"filename": "precious.db"}), asking_client()).await;
    wait_status(&s.a, &task, "input_required", &asking_client(), Duration::from_secs(15)).await;

    let cancelled =
        s.b.call_2026("tasks/cancel", json!({"taskId": task}), asking_client()).await.expect("tasks/cancel");
    assert!(cancelled.error_code().is_none(), "{}", cancelled.raw);
    let got = get_2026(&s.a, &task, &asking_client()).await;
    assert_eq!(got["status"], "cancelled", "{got}");
    assert!(got.get("inputRequests").is_none(), "a cancelled task asks nothing: {got}");

    // A late answer is acknowledged, and changes nothing.
    let late = update(&s.a, &task, json!({"confirm": accept(json!({"confirm": true}))})).await;
    assert!(late.error_code().is_none(), "{}", late.raw);
    assert_eq!(late.result(), &json!({"resultType": "complete"}), "an empty result: {}", late.raw);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let got = get_2026(&s.b, &task, &asking_client()).await;
    assert_eq!(got["status"], "cancelled", "{got}");
    assert_eq!(s.redis.node_field(&task, "root", "attempt").as_deref(), Some("1"), "it never ran again");
    assert_ne!(s.redis.node_field(&task, "root", "status").as_deref(), Some("completed"));
    assert_eq!(s.redis.stream_entries(), 0, "nothing is left in a queue");
    assert_eq!(s.redis.pending_entries(), 0);
    assert!(!worker.log_text().contains("Deleted precious.db"));
}

#[tokio::test]
async fn partial_answers_keep_the_rest_pending() {
    let s = stack();
    let _worker = start_worker(&s.redis, &["--fixtures"]).await;
    s.a.wait_for_tool("multi_input", Duration::from_secs(20)).await.expect("multi_input listed");
    let task = create_2026(&s.a, "multi_input", json!({}), asking_client()).await;
    let asked = wait_status(&s.a, &task, "input_required", &asking_client(), Duration::from_secs(15)).await;
    assert_eq!(keys_of(&asked["inputRequests"]), ["confirm", "name"], "{asked}");

    let first = update(&s.b, &task, json!({"name": accept(json!({"name": "Grace"}))})).await;
    assert!(first.error_code().is_none(), "{}", first.raw);
    let half = get_2026(&s.a, &task, &asking_client()).await;
    assert_eq!(half["status"], "input_required", "one answer of two: {half}");
    assert_eq!(keys_of(&half["inputRequests"]), ["confirm"], "only the unanswered one is pending: {half}");
    assert_eq!(s.redis.node_field(&task, "root", "status").as_deref(), Some("parked"));
    assert_eq!(s.redis.stream_entries(), 0, "the node does not run on half its answers");

    let second = update(&s.a, &task, json!({"confirm": accept(json!({"confirm": true}))})).await;
    assert!(second.error_code().is_none(), "{}", second.raw);
    let done = wait_status(&s.b, &task, "completed", &asking_client(), Duration::from_secs(15)).await;
    let result = &done["result"];
    assert_eq!(result["content"][0]["text"], "Received 2 answers", "{done}");
    assert_eq!(result["structuredContent"]["name"], accept(json!({"name": "Grace"})), "{done}");
    assert_eq!(result["structuredContent"]["confirm"], accept(json!({"confirm": true})), "{done}");
    assert_eq!(s.redis.node_field(&task, "root", "attempt").as_deref(), Some("2"), "one resumption");
}

/// A 2026-07-28 synchronous `tools/call`, optionally continuing a round.
async fn sync_call(mcp: &Mcp, tool: &str, round: Option<(&str, Value)>, capabilities: Value) -> Reply {
    let mut params = json!({"name": tool, "arguments": {}});
    if let Some((state, responses)) = round {
        params["requestState"] = json!(state);
        params["inputResponses"] = responses;
    }
    mcp.call_2026("tools/call", params, capabilities).await.expect("tools/call")
}

#[tokio::test]
async fn mrtr_rounds_continue_on_any_gateway_and_a_tampered_state_is_refused() {
    let s = stack();
    let _worker = start_worker(&s.redis, &["--fixtures"]).await;
    let tool = "test_input_required_result_multi_round";
    s.a.wait_for_tool(tool, Duration::from_secs(20)).await.expect("tool listed");
    let elicits = json!({"elicitation": {}});

    let round1 = sync_call(&s.a, tool, None, elicits.clone()).await;
    let r1 = round1.result();
    assert_eq!(r1["resultType"], "input_required", "{}", round1.raw);
    assert_eq!(keys_of(&r1["inputRequests"]), ["step1"], "{}", round1.raw);
    assert_eq!(r1["inputRequests"]["step1"]["method"], "elicitation/create");
    let state1 = state_of(r1);

    let round2 = sync_call(
        &s.b,
        tool,
        Some((&state1, json!({"step1": accept(json!({"name": "Ada"}))}))),
        elicits.clone(),
    )
    .await;
    let r2 = round2.result();
    assert_eq!(r2["resultType"], "input_required", "{}", round2.raw);
    assert_eq!(keys_of(&r2["inputRequests"]), ["step2"], "{}", round2.raw);
    let state2 = state_of(r2);
    assert_ne!(state1, state2, "each round has its own state");

    let round3 = sync_call(
        &s.a,
        tool,
        Some((&state2, json!({"step2": accept(json!({"color": "green"}))}))),
        elicits.clone(),
    )
    .await;
    assert!(round3.error_code().is_none(), "{}", round3.raw);
    assert_eq!(round3.result()["content"][0]["text"], "Ada likes green", "{}", round3.raw);
    assert_ne!(round3.result()["resultType"], "input_required", "{}", round3.raw);

    // Declining step 1 makes the tool ask step 1 again, in a new round under the same key. The
    // first round's state replayed with an answer for that key answers nothing: the call is
    // still asking, and only the new round's state continues it.
    let first = sync_call(&s.a, tool, None, elicits.clone()).await;
    let first_state = state_of(first.result());
    let declined =
        sync_call(&s.b, tool, Some((&first_state, json!({"step1": {"action": "decline"}}))), elicits.clone())
            .await;
    assert_eq!(keys_of(&declined.result()["inputRequests"]), ["step1"], "{}", declined.raw);
    let again = state_of(declined.result());
    let replayed = sync_call(
        &s.a,
        tool,
        Some((&first_state, json!({"step1": accept(json!({"name": "Eve"}))}))),
        elicits.clone(),
    )
    .await;
    assert_eq!(replayed.result()["resultType"], "input_required", "{}", replayed.raw);
    assert_eq!(
        keys_of(&replayed.result()["inputRequests"]),
        ["step1"],
        "the replay answered: {}",
        replayed.raw
    );
    let named = sync_call(
        &s.b,
        tool,
        Some((&again, json!({"step1": accept(json!({"name": "Ada"}))}))),
        elicits.clone(),
    )
    .await;
    assert_eq!(keys_of(&named.result()["inputRequests"]), ["step2"], "{}", named.raw);
    let state = state_of(named.result());
    let done = sync_call(
        &s.a,
        tool,
        Some((&state, json!({"step2": accept(json!({"color": "red"}))}))),
        elicits.clone(),
    )
    .await;
    assert_eq!(done.result()["content"][0]["text"], "Ada likes red", "{}", done.raw);

    // A requestState with one character changed is refused.
    let tampered_tool = "test_input_required_result_tampered_state";
    let asked = sync_call(&s.b, tampered_tool, None, elicits.clone()).await;
    assert_eq!(asked.result()["resultType"], "input_required", "{}", asked.raw);
    let state = state_of(asked.result());
    let mut chars: Vec<char> = state.chars().collect();
    let at = chars.len() / 3;
    chars[at] = if chars[at] == 'A' { 'B' } else { 'A' };
    let altered: String = chars.into_iter().collect();
    let answer = json!({"confirm": accept(json!({"ok": true}))});
    let refused = sync_call(&s.a, tampered_tool, Some((&altered, answer.clone())), elicits.clone()).await;
    assert_eq!(refused.error_code(), Some(-32602), "{}", refused.raw);
    // The state as issued still works.
    let intact = sync_call(&s.a, tampered_tool, Some((&state, answer)), elicits.clone()).await;
    let text = intact.result()["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.starts_with("state-ok"), "{}", intact.raw);

    // A client that cannot answer an elicitation is told which capability it lacks.
    let unable = sync_call(&s.a, "test_input_required_result_elicitation", None, json!({})).await;
    assert_eq!(unable.error_code(), Some(-32021), "{}", unable.raw);
    let required = &unable.message["error"]["data"]["requiredCapabilities"];
    assert!(required.get("elicitation").is_some(), "{}", unable.raw);
}

#[tokio::test]
async fn notifications_cancelled_stops_a_synchronous_call() {
    let s = stack();
    let (worker, _) = start_worker(&s.redis, &["--fixtures"]).await;
    s.a.wait_for_tool("slow_compute", Duration::from_secs(20)).await.expect("slow_compute listed");

    // 2025-11-25: a session from gateway A.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "conveyor-tests", "version": "1"}}});
    let initialized = s.a.post_raw(&[], init.to_string()).await.expect("initialize");
    assert!(initialized.error_code().is_none(), "{}", initialized.raw);
    let session = initialized.session_id.clone().expect("initialize returns an Mcp-Session-Id");
    let headers = |session: &str| {
        vec![("mcp-protocol-version", "2025-11-25".to_owned()), ("mcp-session-id", session.to_owned())]
    };

    let call = json!({"jsonrpc": "2.0", "id": 42, "method": "tools/call",
        "params": {"name": "slow_compute", "arguments": {"seconds": 30, "label": "doomed"}}});
    let a = s.a.clone();
    let call_headers = headers(&session);
    let started = Instant::now();
    let background = tokio::spawn(async move {
        let headers: Vec<(&str, &str)> = call_headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        a.post_raw(&headers, call.to_string()).await
    });
    let hidden = hidden_task(&s.redis, "slow_compute", &[], Duration::from_secs(10)).await;
    s.redis
        .wait_node_status(&hidden, "root", "running", Duration::from_secs(10))
        .await
        .expect("the call runs");

    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 42, "reason": "the user gave up"}});
    let cancel_headers = headers(&session);
    let cancel_headers: Vec<(&str, &str)> = cancel_headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let posted_at = now_ms();
    let posted = s.b.post_raw(&cancel_headers, cancel.to_string()).await.expect("notifications/cancelled");
    assert_eq!(posted.status, 202, "a notification is accepted: {}", posted.raw);

    s.redis
        .wait_node_status(&hidden, "root", "cancelled", Duration::from_secs(5))
        .await
        .unwrap_or_else(|e| panic!("{e}; worker log:\n{}", worker.log_text()));
    assert_eq!(task_field(&s.redis, &hidden, "status").as_deref(), Some("cancelled"));
    let finished: u64 =
        s.redis.node_field(&hidden, "root", "finishedAt").expect("finishedAt").parse().expect("ms");
    let latency = finished.saturating_sub(posted_at);
    eprintln!("notifications/cancelled (gateway B) -> the tool stopped on its worker: {latency} ms");
    assert!(latency < 2_000, "the tool took {latency} ms to stop");

    // The call itself ends: whatever it answers, it is not the tool's result.
    let outcome = tokio::time::timeout(Duration::from_secs(5), background)
        .await
        .expect("the cancelled call returns within 5 s")
        .expect("the call's task");
    match outcome {
        Ok(reply) => {
            eprintln!("the cancelled call answered HTTP {}: {}", reply.status, reply.raw);
            assert!(!reply.raw.contains("computed doomed"), "{}", reply.raw);
        }
        Err(e) => eprintln!("the cancelled call's connection ended: {e}"),
    }
    assert!(started.elapsed() < Duration::from_secs(25), "the call did not run its 30 s");

    // 2026-07-28: a synchronous call whose client goes away is cancelled.
    let a = s.a.clone();
    let background = tokio::spawn(async move {
        a.call_2026(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 30, "label": "abandoned"}}),
            json!({}),
        )
        .await
    });
    let second =
        hidden_task(&s.redis, "slow_compute", std::slice::from_ref(&hidden), Duration::from_secs(10)).await;
    s.redis
        .wait_node_status(&second, "root", "running", Duration::from_secs(10))
        .await
        .expect("the call runs");
    background.abort();
    let dropped_at = now_ms();
    let _ = background.await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while task_field(&s.redis, &second, "status").as_deref() != Some("cancelled") {
        assert!(
            Instant::now() < deadline,
            "the call of a client that went away was not cancelled within 5 s (task status {:?}, node status {:?})",
            task_field(&s.redis, &second, "status"),
            s.redis.node_field(&second, "root", "status")
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    s.redis
        .wait_node_status(&second, "root", "cancelled", Duration::from_secs(5))
        .await
        .expect("the tool stopped");
    let finished: u64 =
        s.redis.node_field(&second, "root", "finishedAt").expect("finishedAt").parse().expect("ms");
    eprintln!(
        "closed connection (2026-07-28) -> the tool stopped: {} ms",
        finished.saturating_sub(dropped_at)
    );
    assert_eq!(s.redis.stream_entries(), 0);
    assert_eq!(s.redis.pending_entries(), 0);
}

#[tokio::test]
async fn an_idempotent_synchronous_call_whose_connection_drops_runs_on_for_its_retry() {
    let s = stack();
    let (worker, _) = start_worker(&s.redis, &["--fixtures"]).await;
    let params = json!({"name": "slow_compute", "arguments": {"seconds": 2, "label": "kept"},
        "_meta": {"io.conveyor/idempotencyKey": "report-7"}});
    let a = s.a.clone();
    let first = params.clone();
    let background = tokio::spawn(async move { a.call_2026("tools/call", first, json!({})).await });
    let hidden = hidden_task(&s.redis, "slow_compute", &[], Duration::from_secs(10)).await;
    s.redis
        .wait_node_status(&hidden, "root", "running", Duration::from_secs(10))
        .await
        .expect("the call runs");
    // The connection drops: a client with a key retries rather than abandons the call.
    background.abort();
    let _ = background.await;

    let retry = s.b.call_2026("tools/call", params, json!({})).await.expect("the retry");
    assert_eq!(retry.error_code(), None, "the retry with the key gets the work's result: {}", retry.raw);
    assert!(retry.raw.contains("computed kept"), "{}", retry.raw);
    assert_eq!(task_field(&s.redis, &hidden, "status").as_deref(), Some("completed"));
    assert_eq!(s.redis.node_field(&hidden, "root", "attempt").as_deref(), Some("1"), "the work ran once");
    drop(worker);
}

#[tokio::test]
async fn url_elicitation_is_sent_only_to_a_client_that_takes_it() {
    let s = stack();
    let _worker = start_worker(&s.redis, &["--fixtures"]).await;
    let tool = "connect_account";
    s.a.wait_for_tool(tool, Duration::from_secs(20)).await.expect("tool listed");
    let call = |capabilities: Value, round: Option<(String, Value)>| {
        let mut params = json!({"name": tool, "arguments": {"service": "git"}});
        if let Some((state, responses)) = round {
            params["requestState"] = json!(state);
            params["inputResponses"] = responses;
        }
        let mcp = s.a.clone();
        async move { mcp.call_2026("tools/call", params, capabilities).await.expect("tools/call") }
    };

    // A client that takes form elicitation only (`{}` means form) is refused, naming URL mode.
    let refused = call(json!({"elicitation": {}}), None).await;
    assert_eq!(refused.error_code(), Some(-32021), "{}", refused.raw);
    assert_eq!(refused.message["error"]["data"]["requiredCapabilities"], json!({"elicitation": {"url": {}}}));

    let asked = call(json!({"elicitation": {"url": {}}}), None).await;
    let request = &asked.result()["inputRequests"]["sign_in"];
    assert_eq!(request["params"]["mode"], "url", "{}", asked.raw);
    assert_eq!(request["params"]["url"], "https://example.com/connect/git");
    assert!(request["params"]["elicitationId"].as_str().is_some_and(|id| id.starts_with("connect-")));
    let state = state_of(asked.result());
    let done =
        call(json!({"elicitation": {"url": {}}}), Some((state, json!({"sign_in": {"action": "accept"}}))))
            .await;
    assert_eq!(done.result()["content"][0]["text"], "Connected to git", "{}", done.raw);
}

#[tokio::test]
async fn progress_on_a_tasks_result_stream_names_its_task() {
    let s = stack();
    let _worker = start_worker(&s.redis, &["--fixtures"]).await;
    s.a.wait_for_tool("slow_compute", Duration::from_secs(20)).await.expect("tool listed");
    let created = s
        .a
        .call_2025(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 1}, "task": {"ttl": 60_000}, "_meta": {"progressToken": "p1"}}),
        )
        .await
        .expect("tools/call");
    let task = created.result()["task"]["taskId"].as_str().expect("a task").to_owned();
    let result = s.b.call_2025("tasks/result", json!({"taskId": task})).await.expect("tasks/result");
    assert!(result.error_code().is_none(), "{}", result.raw);
    let progress: Vec<&Value> =
        result.notifications.iter().filter(|n| n["method"] == "notifications/progress").collect();
    assert!(!progress.is_empty(), "progress reached the tasks/result stream: {}", result.raw);
    for n in progress {
        assert_eq!(n["params"]["progressToken"], "p1", "{n}");
        assert_eq!(
            n["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
            task.as_str(),
            "{n}"
        );
    }
    assert_eq!(result.result()["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], task.as_str());
}

#[tokio::test]
async fn rounds_a_client_abandons_never_lock_it_out_and_the_oldest_end_past_their_bound() {
    let redis = RedisServer::start().expect("redis");
    // One shard, so that the limits are the shard's: 3 live tasks, 4 rounds left waiting.
    let args = [
        "--fixtures",
        "--shards",
        "1",
        "--max-live-tasks-per-principal",
        "3",
        "--max-parked-rounds-per-principal",
        "4",
    ];
    let up = Conveyor::up(&redis.url(), &args).expect("conveyor up");
    let mcp = Mcp::new(up.mcp_url());
    let tool = "test_input_required_result_multi_round";
    mcp.wait_for_tool(tool, Duration::from_secs(20)).await.expect("tool listed");
    let elicits = json!({"elicitation": {}});

    // A client asks five calls' first rounds and answers none of them.
    let mut states = Vec::new();
    for i in 0..5 {
        let asked = sync_call(&mcp, tool, None, elicits.clone()).await;
        assert_eq!(asked.result()["resultType"], "input_required", "round {i}: {}", asked.raw);
        states.push(state_of(asked.result()));
    }
    // More rounds wait than the caller may hold live tasks, yet a new call runs.
    let greet = mcp
        .call_2026("tools/call", json!({"name": "greet", "arguments": {"name": "Ada"}}), elicits.clone())
        .await;
    let greet = greet.expect("tools/call greet");
    assert!(greet.error_code().is_none(), "{}", greet.raw);
    assert_eq!(greet.result()["content"][0]["text"], "Hello, Ada!", "{}", greet.raw);

    // Four rounds may wait: the fifth ended the oldest, whose continuation says so.
    let rounds = || {
        let mut conn = redis.connection().expect("redis connection");
        let load: std::collections::HashMap<String, i64> =
            redis::cmd("HGETALL").arg("cv:{cv.0}:load").query(&mut conn).expect("load");
        load.iter().filter(|(k, _)| k.starts_with("rounds:")).map(|(_, v)| *v).sum::<i64>()
    };
    conveyor_tests::eventually(Duration::from_secs(10), "the oldest round to end", async || {
        (rounds() == 4).then_some(())
    })
    .await;
    let step1 = || json!({"step1": accept(json!({"name": "Ada"}))});
    let late = sync_call(&mcp, tool, Some((&states[0], step1())), elicits.clone()).await;
    let message = late.message["error"]["message"].as_str().unwrap_or_default().to_owned();
    assert!(message.contains("max_parked_rounds_per_principal"), "{}", late.raw);
    // The newest goes on to its next round.
    let next = sync_call(&mcp, tool, Some((&states[4], step1())), elicits).await;
    assert_eq!(keys_of(&next.result()["inputRequests"]), ["step2"], "{}", next.raw);
}
