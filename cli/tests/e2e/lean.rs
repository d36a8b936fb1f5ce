//! Lean calls (docs/adr/0028) on real `conveyor` processes and a real Redis: a synchronous call of
//! one tool is created in a batch with its call in its stream entry, runs from its delivery
//! without a start script, and settles in a batch, leaving the load counts as it found them; a
//! rare path (progress, a failure) adopts it into the running state first; a cancel before it
//! starts deletes its entry, so that it never runs; `--lean-calls off` takes the full path.

use std::time::Duration;

use conveyor_tests::mcp::wait_for_tools;
use conveyor_tests::process::{scratch_dir, task_key};
use conveyor_tests::{Conveyor, Mcp, RedisServer};
use serde_json::{Value, json};

/// The hash of a task, as (field, value) pairs.
fn task_hash(redis: &RedisServer, task: &str) -> std::collections::HashMap<String, String> {
    let mut conn = redis.connection().expect("redis connection");
    redis::cmd("HGETALL").arg(task_key(task)).query(&mut conn).expect("hgetall")
}

/// The ids of every task hash.
fn task_ids(redis: &RedisServer) -> Vec<String> {
    redis.keys("cv:{cv.*}:t:*").iter().map(|k| k.rsplit(':').next().unwrap_or_default().to_owned()).collect()
}

/// The load counters that must be back to nothing once every call ended (what a principal keeps
/// stays until the tasks' TTLs run out).
fn live_counts(redis: &RedisServer) -> Vec<(String, i64)> {
    let mut counts: Vec<(String, i64)> = redis
        .load_totals()
        .into_iter()
        .filter(|(field, value)| {
            *value != 0
                && (field == "queued"
                    || field.starts_with("queued:")
                    || field.starts_with("live:")
                    || field.starts_with("nodes:"))
        })
        .collect();
    counts.sort();
    counts
}

/// How long Redis keeps a task's keys still, in ms (-2: gone, -1: for ever).
fn kept_for_ms(redis: &RedisServer, task: &str) -> i64 {
    let mut conn = redis.connection().expect("redis connection");
    redis::cmd("PTTL").arg(task_key(task)).query(&mut conn).expect("pttl")
}

/// The hidden task of an answered synchronous call is kept a grace of 30 s after it settles, not
/// for its TTL (an hour by default): nobody else can name it.
fn assert_kept_for_the_grace(redis: &RedisServer, task: &str) {
    let ms = kept_for_ms(redis, task);
    assert!(ms > 0 && ms <= 30_000, "an answered call's task is kept {ms} ms more");
}

async fn greet(mcp: &Mcp, name: &str) -> Value {
    let reply = mcp
        .call_2025("tools/call", json!({"name": "greet", "arguments": {"name": name}}))
        .await
        .expect("tools/call");
    reply.result().clone()
}

#[tokio::test]
async fn a_lean_call_runs_from_its_delivery_and_settles_in_a_batch() {
    let redis = RedisServer::start().expect("redis");
    let up = Conveyor::up(&redis.url(), &["--fixtures"]).expect("conveyor up");
    let mcp = Mcp::new(up.mcp_url());
    wait_for_tools(&mcp, &["greet"]).await;

    // Calls that come together share batches of creates and of completions.
    let calls = (0..40).map(|i| {
        let mcp = mcp.clone();
        async move { greet(&mcp, &format!("n{i}")).await }
    });
    let results = futures::future::join_all(calls).await;
    for (i, result) in results.iter().enumerate() {
        assert_eq!(result["content"][0]["text"], format!("Hello, n{i}!"), "{result}");
    }
    let ids = task_ids(&redis);
    assert_eq!(ids.len(), 40, "one task per call");
    let mut lean = 0;
    for id in &ids {
        let hash = task_hash(&redis, id);
        assert_eq!(hash.get("status").map(String::as_str), Some("completed"), "{hash:?}");
        assert_eq!(hash.get("root:status").map(String::as_str), Some("completed"), "{hash:?}");
        assert!(hash.get("root:worker").is_some_and(|w| w.starts_with("worker-")), "{hash:?}");
        // No start script ran: the node was never given an attempt or a start time. A call whose
        // owner had its share of a worker's slots when it was read waited, and was started by
        // `start_nodes` (attempt 1).
        // A lean hash leaves attempt 0 out, and keeps what only an adopted call reads folded.
        match hash.get("root:attempt").map(String::as_str) {
            None => {
                assert!(!hash.contains_key("root:startedAt"), "{hash:?}");
                assert!(hash.get("adopt").is_some_and(|a| a.starts_with("planLimits\t")), "{hash:?}");
                assert!(!hash.contains_key("planLimits"), "{hash:?}");
                lean += 1;
            }
            attempt => {
                assert_eq!(attempt, Some("1"), "{hash:?}");
                assert!(hash.contains_key("planLimits") && !hash.contains_key("adopt"), "{hash:?}");
            }
        }
        let bytes: usize = hash["bytes"].parse().expect("bytes");
        assert_eq!(bytes, hash["call"].len() + hash["result"].len(), "what the task keeps is counted");
        assert_kept_for_the_grace(&redis, id);
    }
    assert!(lean >= 20, "only {lean} of 40 calls ran from their delivery");
    assert_eq!(live_counts(&redis), Vec::<(String, i64)>::new(), "every count is back");
    assert_eq!(redis.stream_entries(), 0, "every entry was acknowledged and deleted");
    assert_eq!(redis.pending_entries(), 0);
    let totals = redis.load_totals();
    let kept: i64 = totals.iter().filter(|(f, _)| f.starts_with("kept:")).map(|(_, v)| v).sum();
    assert!(kept > 0, "the tasks' bytes stay counted until their TTL runs out");
    // They come back in buckets of 100 ms of expiry times per owner, not one index entry a task.
    let mut conn = redis.connection().expect("redis connection");
    let mut members = Vec::new();
    for index in redis.keys("cv:{cv.*}:kept") {
        let found: Vec<String> =
            redis::cmd("ZRANGE").arg(&index).arg(0).arg(-1).query(&mut conn).expect("zrange");
        // The pin that keeps the index a skip list stays with it (keys::INDEX_PIN).
        members.extend(found.into_iter().filter(|m| m != conveyor_shared::keys::INDEX_PIN));
    }
    assert!(
        !members.is_empty() && members.len() < 40,
        "{} index entries for 40 tasks: {members:?}",
        members.len()
    );
    let bucketed: i64 = totals.iter().filter(|(f, _)| f.starts_with("keptAt:")).map(|(_, v)| v).sum();
    assert_eq!(bucketed, kept, "the buckets hold every byte the owner keeps: {members:?}");
    for member in &members {
        let (bucket, owner) = member.split_once('\t').expect("<bucket>\t<owner>");
        assert!(bucket.parse::<u64>().is_ok() && owner == "anonymous", "{member:?}");
    }
}

#[tokio::test]
async fn a_lean_entry_over_its_owners_share_waits_on_the_worker_without_a_start_script() {
    let redis = RedisServer::start().expect("redis");
    // Two slots, one of them a principal's share: most of what one principal sends at once is
    // read while its share is taken.
    let gateway = Conveyor::gateway(&redis.url(), &[]).expect("gateway");
    let _worker =
        Conveyor::worker(&redis.url(), &["--fixtures", "--concurrency", "2", "--principal-share", "0.5"])
            .expect("worker");
    let mcp = Mcp::new(gateway.mcp_url());
    wait_for_tools(&mcp, &["greet"]).await;

    let monitor = conveyor_tests::monitor::Monitor::start(&redis.url()).expect("monitor");
    let calls = (0..30).map(|i| {
        let mcp = mcp.clone();
        async move { greet(&mcp, &format!("s{i}")).await }
    });
    let results = futures::future::join_all(calls).await;
    let counts = monitor.stop().expect("monitor counts");
    for (i, result) in results.iter().enumerate() {
        assert_eq!(result["content"][0]["text"], format!("Hello, s{i}!"), "{result}");
    }
    // `start_nodes` runs only for an entry whose wait ran out (it is set aside, then started by
    // the full path: attempt 1); one that found its owner's slot free in time ran lean (attempt
    // 0), with no script at its start. Each set-aside entry takes at most two starts (set aside,
    // started).
    let full_path =
        task_ids(&redis).iter().filter(|id| task_hash(&redis, id).contains_key("root:attempt")).count();
    let starts = counts.evalsha(conveyor_shared::scripts::START_NODES.script.get_hash());
    assert!(
        starts <= 2 * full_path as u64,
        "{starts} start_nodes scripts ran for {full_path} calls that left the lean path: {counts:?}"
    );
    assert_eq!(live_counts(&redis), Vec::<(String, i64)>::new(), "every count is back");
    assert_eq!(redis.pending_entries(), 0);
}

#[tokio::test]
async fn a_lean_call_whose_worker_is_killed_is_taken_over_and_counts_the_lost_worker() {
    let redis = RedisServer::start().expect("redis");
    let gateway = Conveyor::gateway(&redis.url(), &[]).expect("gateway");
    let lease = ["--fixtures", "--lease-ms", "1000"];
    let mut first = Conveyor::worker(&redis.url(), &lease).expect("worker");
    let mcp = Mcp::new(gateway.mcp_url());
    wait_for_tools(&mcp, &["slow_compute"]).await;

    // A synchronous call: it runs from its delivery, its node still `queued` while it runs.
    let call = {
        let mcp = mcp.clone();
        tokio::spawn(async move {
            mcp.call_2025(
                "tools/call",
                json!({"name": "slow_compute", "arguments": {"seconds": 2, "label": "kept"}}),
            )
            .await
            .expect("tools/call")
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while redis.pending_entries() == 0 {
        assert!(std::time::Instant::now() < deadline, "the call's entry was never delivered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let id = task_ids(&redis).pop().expect("the call's task");
    assert_eq!(task_hash(&redis, &id).get("root:attempt"), None, "it ran lean (attempt 0)");
    first.signal("KILL");
    assert!(first.wait_exit(Duration::from_secs(5)));

    // Another worker takes it over once the lease runs out, by the full path, and the node counts
    // the worker it lost (the lean entry carried the call: it was running, not waiting).
    let _second = Conveyor::worker(&redis.url(), &lease).expect("second worker");
    let reply = tokio::time::timeout(Duration::from_secs(30), call).await.expect("in time").expect("joined");
    assert_eq!(reply.result()["content"][0]["text"], "computed kept", "{}", reply.raw);
    let hash = task_hash(&redis, &id);
    assert_eq!(hash.get("root:losses").map(String::as_str), Some("1"), "{hash:?}");
    assert_eq!(hash.get("root:attempt").map(String::as_str), Some("1"), "{hash:?}");
    assert_eq!(live_counts(&redis), Vec::<(String, i64)>::new(), "every count is back");
}

#[tokio::test]
async fn a_lean_entry_carries_its_call_and_a_worker_of_the_full_path_runs_it_all_the_same() {
    let redis = RedisServer::start().expect("redis");
    // A gateway alone: the entry waits in its stream to be looked at.
    let gateway = Conveyor::gateway(&redis.url(), &[]).expect("gateway");
    let lean_worker = Conveyor::worker(&redis.url(), &["--fixtures"]).expect("worker");
    let mcp = Mcp::new(gateway.mcp_url());
    wait_for_tools(&mcp, &["greet"]).await;
    drop(lean_worker);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let call = {
        let mcp = mcp.clone();
        tokio::spawn(async move { greet(&mcp, "entry").await })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let entry = loop {
        let mut conn = redis.connection().expect("redis connection");
        let streams = redis.keys("cv:{cv.*}:q:greet");
        let mut found = None;
        for stream in streams {
            let entries: Vec<(String, Vec<(String, String)>)> =
                redis::cmd("XRANGE").arg(&stream).arg("-").arg("+").query(&mut conn).unwrap_or_default();
            if let Some((_, fields)) = entries.into_iter().next() {
                found = Some(fields.into_iter().collect::<std::collections::HashMap<_, _>>());
            }
        }
        if let Some(found) = found {
            break found;
        }
        assert!(std::time::Instant::now() < deadline, "no entry of greet appeared");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    for field in ["task", "node", "trace", "lean"] {
        assert!(entry.contains_key(field), "the entry carries {field}: {entry:?}");
    }
    assert_eq!(entry.len(), 4, "the tool, owner and call travel in one field: {entry:?}");
    // `<bytes>:<tool><bytes>:<owner><call record>`
    assert!(entry["lean"].starts_with("5:greet9:anonymous{"), "{entry:?}");
    assert!(entry["lean"].contains("\"entry\""), "the call record travels in the entry: {entry:?}");

    // A worker that starts every entry with start_nodes (as the previous version did) runs it too.
    let _full_worker =
        Conveyor::worker(&redis.url(), &["--fixtures", "--lean-calls", "off"]).expect("worker");
    let result = tokio::time::timeout(Duration::from_secs(30), call).await.expect("in time").expect("joined");
    assert_eq!(result["content"][0]["text"], "Hello, entry!", "{result}");
    let id = &task_ids(&redis)[0];
    assert_eq!(
        task_hash(&redis, id).get("root:attempt").map(String::as_str),
        Some("1"),
        "started by start_nodes"
    );
    assert_eq!(live_counts(&redis), Vec::<(String, i64)>::new());
}

#[tokio::test]
async fn a_rare_path_adopts_a_lean_call_first() {
    let redis = RedisServer::start().expect("redis");
    let up = Conveyor::up(&redis.url(), &["--fixtures"]).expect("conveyor up");
    let mcp = Mcp::new(up.mcp_url());
    wait_for_tools(&mcp, &["slow_compute", "test_error_handling", "big_output"]).await;

    // Progress: the node is adopted (attempt 1, running) before its first report.
    let reply = mcp
        .call_2025("tools/call", json!({"name": "slow_compute", "arguments": {"seconds": 0.3, "label": "p"}}))
        .await
        .expect("tools/call");
    assert_eq!(reply.result()["content"][0]["text"], "computed p", "{}", reply.raw);
    let progress = task_ids(&redis).into_iter().find(|id| task_hash(&redis, id)["tool"] == "slow_compute");
    let hash = task_hash(&redis, &progress.expect("the task"));
    assert_eq!(hash.get("root:attempt").map(String::as_str), Some("1"), "adopted: {hash:?}");
    assert_eq!(hash.get("root:status").map(String::as_str), Some("completed"), "{hash:?}");
    // Adopted, it holds the fields create_task writes, unfolded.
    assert!(!hash.contains_key("adopt"), "{hash:?}");
    assert!(hash.get("planLimits").is_some_and(|l| l.split(' ').count() == 5), "{hash:?}");
    assert!(hash.get("maxBytes").is_some_and(|b| b.parse::<u64>().is_ok()), "{hash:?}");

    // A tool error stays on the lean path; on 2025-11-25 it fails the call's task, result kept.
    let reply = mcp
        .call_2025("tools/call", json!({"name": "test_error_handling", "arguments": {}}))
        .await
        .expect("call");
    assert_eq!(reply.result()["isError"], true, "{}", reply.raw);
    let failing =
        task_ids(&redis).into_iter().find(|id| task_hash(&redis, id)["tool"] == "test_error_handling");
    let hash = task_hash(&redis, &failing.expect("the task"));
    assert_eq!(hash.get("status").map(String::as_str), Some("failed"), "{hash:?}");
    assert_eq!(hash.get("root:attempt"), None, "never adopted: {hash:?}");

    // A failure (a result over the node's output limit) is adopted, and settled by complete_node.
    let reply = mcp
        .call_2025("tools/call", json!({"name": "big_output", "arguments": {"bytes": 9_000_000}}))
        .await
        .expect("call");
    assert!(reply.error_code().is_some(), "{}", &reply.raw[..reply.raw.len().min(500)]);
    assert!(reply.raw.contains("max_node_output_bytes"), "{}", &reply.raw[..reply.raw.len().min(500)]);
    let failed = task_ids(&redis).into_iter().find(|id| task_hash(&redis, id)["tool"] == "big_output");
    let hash = task_hash(&redis, &failed.expect("the task"));
    assert_eq!(hash.get("root:attempt").map(String::as_str), Some("1"), "adopted: {hash:?}");
    assert_eq!(hash.get("status").map(String::as_str), Some("failed"), "{hash:?}");
    assert_eq!(live_counts(&redis), Vec::<(String, i64)>::new());
}

#[tokio::test]
async fn a_lean_call_cancelled_before_it_starts_never_runs() {
    let redis = RedisServer::start().expect("redis");
    let marker = scratch_dir("lean-cancel").join("ran");
    let tools = scratch_dir("lean-cancel").join("tools.toml");
    std::fs::write(
        &tools,
        format!(
            "[[tool]]\nname = \"mark\"\ndescription = \"Leaves a mark\"\nargv = [\"touch\", \"{}\"]\ntask_support = \"forbidden\"\n",
            marker.display()
        ),
    )
    .expect("tools file");
    let tools = tools.display().to_string();
    let gateway = Conveyor::gateway(&redis.url(), &[]).expect("gateway");
    let mcp = Mcp::new(gateway.mcp_url());
    // A worker announces the tool, and stops: the call waits in its queue.
    let mut first = Conveyor::worker(&redis.url(), &["--tools-file", &tools]).expect("worker");
    wait_for_tools(&mcp, &["mark"]).await;
    first.kill();

    let body = json!({"jsonrpc": "2.0", "id": 41, "method": "tools/call", "params": {"name": "mark", "arguments": {}}});
    let call = {
        let mcp = mcp.clone();
        tokio::spawn(async move {
            mcp.post_raw(&[("mcp-protocol-version", "2025-11-25")], body.to_string()).await
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while redis.stream_entries() == 0 {
        assert!(std::time::Instant::now() < deadline, "the call's entry never appeared");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 41}});
    let posted =
        mcp.post_raw(&[("mcp-protocol-version", "2025-11-25")], cancel.to_string()).await.expect("cancel");
    assert_eq!(posted.status, 202, "{}", posted.raw);
    let reply = tokio::time::timeout(Duration::from_secs(20), call).await.expect("in time").expect("joined");
    let reply = reply.expect("reply");
    assert!(reply.raw.contains("Cancelled") || reply.raw.contains("cancelled"), "{}", reply.raw);
    assert_eq!(redis.stream_entries(), 0, "the cancel deleted the entry");

    // A worker that comes now finds nothing to run.
    let _second = Conveyor::worker(&redis.url(), &["--tools-file", &tools]).expect("worker");
    wait_for_tools(&mcp, &["mark"]).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!marker.exists(), "a cancelled call ran");
    assert_eq!(live_counts(&redis), Vec::<(String, i64)>::new());
}

#[tokio::test]
async fn with_lean_calls_off_a_call_takes_the_full_path() {
    let redis = RedisServer::start().expect("redis");
    let up = Conveyor::up(&redis.url(), &["--fixtures", "--lean-calls", "off"]).expect("conveyor up");
    let mcp = Mcp::new(up.mcp_url());
    wait_for_tools(&mcp, &["greet"]).await;
    assert_eq!(greet(&mcp, "full").await["content"][0]["text"], "Hello, full!");
    let id = &task_ids(&redis)[0];
    let hash = task_hash(&redis, id);
    assert_eq!(hash.get("root:attempt").map(String::as_str), Some("1"), "started by start_nodes: {hash:?}");
    assert_kept_for_the_grace(&redis, id);
    assert_eq!(live_counts(&redis), Vec::<(String, i64)>::new());

    // A call that became the client's task (a task-augmented call here) keeps its TTL.
    let created = mcp
        .call_2025(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 0, "label": "task"}, "task": {"ttl": 600_000}}),
        )
        .await
        .expect("tools/call");
    let task = created.result()["task"]["taskId"].as_str().expect("a task").to_owned();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while task_hash(&redis, &task).get("status").map(String::as_str) != Some("completed") {
        assert!(std::time::Instant::now() < deadline, "the task did not complete");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ms = kept_for_ms(&redis, &task);
    assert!(ms > 500_000, "a client's task is kept for its TTL, {ms} ms more");
}

#[tokio::test]
async fn a_refused_call_or_a_flushed_script_leaves_no_stray_task_hash() {
    let redis = RedisServer::start().expect("redis");
    let tools = scratch_dir("lean-refused").join("tools.toml");
    std::fs::write(
        &tools,
        "[[tool]]\nname = \"wait\"\ndescription = \"Waits\"\nargv = [\"sleep\", \"30\"]\ntask_support = \"forbidden\"\n",
    )
    .expect("tools file");
    let tools = tools.display().to_string();
    let gateway = Conveyor::gateway(&redis.url(), &["--max-live-tasks-per-principal", "1"]).expect("gateway");
    let mcp = Mcp::new(gateway.mcp_url());
    // A worker announces the tool, and stops: the first call waits in its queue, live.
    let mut worker = Conveyor::worker(&redis.url(), &["--tools-file", &tools]).expect("worker");
    wait_for_tools(&mcp, &["wait"]).await;
    worker.kill();

    let call = |id: u32| {
        let mcp = mcp.clone();
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "wait", "arguments": {}}});
        async move { mcp.post_raw(&[("mcp-protocol-version", "2025-11-25")], body.to_string()).await }
    };
    let first = tokio::spawn(call(1));
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while redis.stream_entries() == 0 {
        assert!(std::time::Instant::now() < deadline, "the first call's entry never appeared");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The second is over its owner's share: the batch deletes the hash the gateway sent with it,
    // and the full path refuses it with the figures.
    let refused = call(2).await.expect("reply");
    assert!(refused.raw.contains("live_tasks_per_principal"), "{}", refused.raw);
    assert_eq!(task_ids(&redis).len(), 1, "only the waiting call has a task: {:?}", task_ids(&redis));

    // Redis forgets its scripts (a restart, a failover): the batch loads it again and runs once.
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}});
    mcp.post_raw(&[("mcp-protocol-version", "2025-11-25")], cancel.to_string()).await.expect("cancel");
    let _ = tokio::time::timeout(Duration::from_secs(20), first).await.expect("the first call ended");
    let mut conn = redis.connection().expect("redis connection");
    let () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut conn).expect("script flush");
    let after = tokio::spawn(call(3));
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while task_ids(&redis).len() < 2 {
        assert!(std::time::Instant::now() < deadline, "the call after the flush made no task");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(task_ids(&redis).len(), 2, "one task for the call after the flush");
    assert_eq!(redis.stream_entries(), 1, "one entry for the call after the flush");
    after.abort();
}

/// A call of `stubborn_sleep` for `seconds`, checked for its answer.
async fn sleep_call(mcp: &Mcp, seconds: f64) {
    let reply = mcp
        .call_2025("tools/call", json!({"name": "stubborn_sleep", "arguments": {"seconds": seconds}}))
        .await
        .expect("tools/call");
    assert!(
        reply.result()["content"][0]["text"].as_str().is_some_and(|t| t.ends_with("other runs alive")),
        "{}",
        reply.raw
    );
}

#[tokio::test]
async fn settled_entries_leave_their_stream_around_an_older_one_still_running() {
    let redis = RedisServer::start().expect("redis");
    let up = Conveyor::up(&redis.url(), &["--fixtures"]).expect("conveyor up");
    let mcp = Mcp::new(up.mcp_url());
    wait_for_tools(&mcp, &["stubborn_sleep"]).await;

    // Settled with nothing older running: their entries go with the stream's oldest nodes.
    futures::future::join_all((0..20).map(|_| sleep_call(&mcp, 0.0))).await;
    assert_eq!(redis.stream_entries(), 0, "every settled entry left its stream");

    // One call runs for a while; the calls after it settle around it, and only its entry stays.
    let long = {
        let mcp = mcp.clone();
        tokio::spawn(async move { sleep_call(&mcp, 3.0).await })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while redis.pending_entries() == 0 {
        assert!(std::time::Instant::now() < deadline, "the long call's entry was never delivered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for _ in 0..3 {
        futures::future::join_all((0..10).map(|_| sleep_call(&mcp, 0.0))).await;
    }
    assert!(!long.is_finished(), "the long call still runs");
    assert_eq!(redis.stream_entries(), 1, "only the running call's entry is left");
    assert_eq!(redis.pending_entries(), 1);
    long.await.expect("the long call");
    assert_eq!(redis.stream_entries(), 0, "its entry left too");
    assert_eq!(redis.pending_entries(), 0);
    let lean =
        task_ids(&redis).iter().filter(|id| !task_hash(&redis, id).contains_key("root:attempt")).count();
    assert!(lean >= 25, "only {lean} of 51 calls settled from their delivery (complete_calls)");
    assert_eq!(live_counts(&redis), Vec::<(String, i64)>::new(), "every count is back");
}

#[tokio::test]
async fn a_lean_result_past_its_owners_stored_byte_share_is_adopted_and_fails_naming_it() {
    let redis = RedisServer::start().expect("redis");
    // The smallest budget a deployment takes (each of 4 shards must hold the largest arguments).
    let share = 4 * 1024 * 1024;
    let up =
        Conveyor::up(&redis.url(), &["--fixtures", "--max-stored-bytes-per-principal", &share.to_string()])
            .expect("conveyor up");
    let mcp = Mcp::new(up.mcp_url());
    wait_for_tools(&mcp, &["greet", "big_output"]).await;
    assert_eq!(greet(&mcp, "small").await["content"][0]["text"], "Hello, small!");

    // create_calls states the share in the load hash, where complete_calls reads it.
    let mut conn = redis.connection().expect("redis connection");
    let stated: Option<u64> =
        redis::cmd("HGET").arg("cv:{cv.0}:load").arg("keptMax").query(&mut conn).expect("hget");
    assert_eq!(stated, Some(share), "one shard on a single server holds the whole share");

    let reply = mcp
        .call_2025("tools/call", json!({"name": "big_output", "arguments": {"bytes": share + share / 4}}))
        .await
        .expect("call");
    assert!(reply.raw.contains("stored_bytes_per_principal"), "{}", &reply.raw[..reply.raw.len().min(600)]);
    let failed = task_ids(&redis).into_iter().find(|id| task_hash(&redis, id)["tool"] == "big_output");
    let hash = task_hash(&redis, &failed.expect("the task"));
    assert_eq!(hash.get("root:attempt").map(String::as_str), Some("1"), "adopted: {hash:?}");
    assert_eq!(hash.get("status").map(String::as_str), Some("failed"), "{hash:?}");
    assert!(hash.get("keptMax").is_some_and(|m| m == &share.to_string()), "unfolded on adoption: {hash:?}");
    assert!(!hash.contains_key("result"), "nothing past the share is kept: {hash:?}");
    assert_eq!(live_counts(&redis), Vec::<(String, i64)>::new());
}

#[tokio::test]
async fn a_lean_task_nobody_waits_on_goes_when_its_ttl_runs_out_within_the_grace() {
    let redis = RedisServer::start().expect("redis");
    let up = Conveyor::up(&redis.url(), &["--fixtures"]).expect("conveyor up");
    let mcp = Mcp::new(up.mcp_url());
    wait_for_tools(&mcp, &["stubborn_sleep"]).await;

    let call = {
        let mcp = mcp.clone();
        tokio::spawn(async move { sleep_call(&mcp, 1.5).await })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let task = loop {
        if let Some(id) = task_ids(&redis).into_iter().next() {
            break id;
        }
        assert!(std::time::Instant::now() < deadline, "the call's task never appeared");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // While it runs, its waiter goes (as a gateway that died would leave it) and its TTL is made
    // to run out 10 s after its creation: it settles with no grace beyond its TTL.
    let mut conn = redis.connection().expect("redis connection");
    let created: u64 =
        redis::cmd("HGET").arg(task_key(&task)).arg("createdAt").query(&mut conn).expect("hget");
    let _: () = redis::cmd("HSET")
        .arg(task_key(&task))
        .arg("waiters")
        .arg("[]")
        .arg("ttlMs")
        .arg(10_000)
        .query(&mut conn)
        .expect("hset");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while task_hash(&redis, &task).get("status").map(String::as_str) != Some("completed") {
        assert!(
            std::time::Instant::now() < deadline,
            "the call never settled: {:?}",
            task_hash(&redis, &task)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!task_hash(&redis, &task).contains_key("root:attempt"), "it settled from its delivery");
    let expires_at: i64 =
        redis::cmd("PEXPIRETIME").arg(task_key(&task)).query(&mut conn).expect("pexpiretime");
    assert_eq!(expires_at, (created + 10_000) as i64, "kept to its TTL, not a grace past it");
    drop(call);
}
