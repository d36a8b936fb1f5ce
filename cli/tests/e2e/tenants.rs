//! One endpoint, many principals: every offer passes the access policy and a root keeps its hidden
//! and ignored files; graphs that amplify their bytes end at a limit that is named, with no process
//! growing; `$from` values meet the tool's schema; per-principal limits hold exactly over every
//! shard; one principal's long graph leaves worker slots, streams and request memory to the others;
//! and what is signed or keyed for one principal is no use to another.
//!
//! Each test runs real `conveyor` processes against a real `redis-server`, with static tokens for
//! the principals it needs; the hostile principal is called mallory.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use conveyor_gateway::auth::token_digest;
use conveyor_tests::mcp::create_2025;
use conveyor_tests::process::{peak_rss, scratch_dir};
use conveyor_tests::{Conveyor, Mcp, RedisServer};
use futures::StreamExt;
use serde_json::{Value, json};

/// JSON-RPC code of a refusal over a limit.
const OVERLOADED: i64 = -32029;

/// A tokens file with one token per principal (the token is `<principal>-token-0123456789`).
fn tokens_file(dir: &Path, principals: &[&str]) -> PathBuf {
    let text: String = principals
        .iter()
        .map(|p| format!("[[token]]\nprincipal = \"{p}\"\nsha256 = \"{}\"\n\n", token_digest(&token(p))))
        .collect();
    let path = dir.join("tokens.toml");
    std::fs::write(&path, text).expect("tokens file");
    path
}

fn token(principal: &str) -> String {
    format!("{principal}-token-0123456789")
}

/// `conveyor up` with the fixtures, tokens for `principals`, and `extra` arguments.
fn up(redis: &RedisServer, name: &str, principals: &[&str], extra: &[&str]) -> Conveyor {
    let dir = scratch_dir(name);
    let tokens = tokens_file(&dir, principals);
    let mut args = vec!["--fixtures", "--tokens-file", tokens.to_str().expect("utf-8")];
    args.extend_from_slice(extra);
    Conveyor::up(&redis.url(), &args).expect("conveyor up")
}

fn client(conveyor: &Conveyor, principal: &str) -> Mcp {
    Mcp::new(conveyor.mcp_url()).with_api_key(&token(principal))
}

/// The task once it has ended.
async fn ended(mcp: &Mcp, task_id: &str, within: Duration) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let reply = mcp.call_2025("tasks/get", json!({"taskId": task_id})).await.expect("tasks/get");
        let status = reply.result()["status"].as_str().unwrap_or_default().to_owned();
        if ["completed", "failed", "cancelled"].contains(&status.as_str()) {
            return reply.result().clone();
        }
        assert!(Instant::now() < deadline, "task {task_id} never ended: {}", reply.raw);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A finished task's result (or its error) as text, to look for what must or must not be in it.
async fn outcome_text(mcp: &Mcp, task_id: &str) -> String {
    let reply = mcp.call_2025("tasks/result", json!({"taskId": task_id})).await.expect("tasks/result");
    reply.raw
}

/// Redis's `used_memory_peak` and `used_memory`, in bytes.
fn redis_memory(redis: &RedisServer) -> (u64, u64) {
    let mut conn = redis.connection().expect("redis");
    let info: String = redis::cmd("INFO").arg("memory").query(&mut conn).expect("INFO");
    let field = |name: &str| -> u64 {
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    (field("used_memory_peak"), field("used_memory"))
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// A root with secrets in the places a walk never goes: a hidden file, a hidden folder, an
/// ignored folder, a link to the hidden file, and a FIFO.
fn vault() -> PathBuf {
    let dir = scratch_dir("vault").join("vault");
    std::fs::create_dir_all(dir.join("src")).expect("mkdir");
    std::fs::create_dir_all(dir.join(".git")).expect("mkdir");
    std::fs::create_dir_all(dir.join("private")).expect("mkdir");
    std::fs::write(dir.join("README.md"), "The vault keeps public notes about deployments.\n")
        .expect("write");
    std::fs::write(dir.join("src/app.rs"), "fn deploy() { panic!(\"deployment failed\") }\n").expect("write");
    std::fs::write(dir.join(".env"), "SECRET_TOKEN=hunter2-from-the-env-file\n").expect("write");
    std::fs::write(dir.join(".git/config"), "[remote]\n  token = gitsecret-in-git-config\n").expect("write");
    std::fs::write(dir.join(".gitignore"), "private/\n").expect("write");
    std::fs::write(dir.join("private/keys.txt"), "PRIVATE-KEY-MATERIAL-ignored\n").expect("write");
    std::os::unix::fs::symlink(dir.join(".env"), dir.join("notes.txt")).expect("symlink");
    let made = std::process::Command::new("mkfifo").arg(dir.join("pipe")).status().expect("mkfifo runs");
    assert!(made.success(), "mkfifo");
    dir
}

const SECRETS: [&str; 3] = ["hunter2-from-the-env-file", "gitsecret-in-git-config", "PRIVATE-KEY-MATERIAL"];

fn assert_no_secret(what: &str, text: &str) {
    for secret in SECRETS {
        assert!(!text.contains(secret), "{what} let `{secret}` out: {text}");
    }
}

#[tokio::test]
async fn every_offer_passes_the_access_policy_and_a_root_keeps_what_it_hides() {
    let redis = RedisServer::start().expect("redis");
    let root = vault();
    let dir = scratch_dir("tenants-access");
    let access = dir.join("access.toml");
    std::fs::write(
        &access,
        r#"
default = "deny"
[[rule]]
tools = ["research", "troubleshoot", "greet"]
prompts = ["*"]
resources = ["conveyor://roots/vault/*"]
allow = ["alice"]
"#,
    )
    .expect("access file");
    let root_arg = format!("vault={}", root.display());
    let conveyor = up(
        &redis,
        "tenants-access",
        &["alice", "mallory"],
        &["--access-file", access.to_str().expect("utf-8"), "--root", &root_arg],
    );
    let alice = client(&conveyor, "alice");
    let mallory = client(&conveyor, "mallory");
    alice.wait_for_tool("research", Duration::from_secs(20)).await.expect("tools");

    // Mallory is granted nothing: nothing is listed, and nothing is served by name.
    let tools = mallory.call_2025("tools/list", json!({})).await.expect("tools/list");
    assert_eq!(tools.result()["tools"], json!([]), "{}", tools.raw);
    let prompts = mallory.call_2025("prompts/list", json!({})).await.expect("prompts/list");
    assert_eq!(prompts.result()["prompts"], json!([]), "{}", prompts.raw);
    let resources = mallory.call_2025("resources/list", json!({})).await.expect("resources/list");
    let uris: Vec<&str> = resources.result()["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .filter_map(|r| r["uri"].as_str())
        .collect();
    assert_eq!(uris, ["conveyor://tasks"], "only the caller's own tasks: {}", resources.raw);
    let templates = mallory.call_2025("resources/templates/list", json!({})).await.expect("templates");
    assert!(
        !templates.raw.contains("conveyor://roots/"),
        "the root template is not offered to mallory: {}",
        templates.raw
    );
    for uri in ["conveyor://roots/vault/README.md", "conveyor://roots/vault/", "conveyor://roots/vault/.env"]
    {
        let read = mallory.call_2025("resources/read", json!({"uri": uri})).await.expect("read");
        assert_eq!(read.error_code(), Some(-32602), "{uri}: {}", read.raw);
        assert!(read.raw.contains("Resource not found"), "refused as unknown: {}", read.raw);
        assert_no_secret(uri, &read.raw);
    }
    let listed = alice.call_2025("prompts/list", json!({})).await.expect("prompts/list");
    let prompt = listed.result()["prompts"][0]["name"].as_str().expect("alice sees the prompts").to_owned();
    let got = mallory.call_2025("prompts/get", json!({"name": prompt})).await.expect("prompts/get");
    assert_eq!(got.error_code(), Some(-32602), "{}", got.raw);
    let greeted = mallory
        .call_2025("tools/call", json!({"name": "greet", "arguments": {"name": "m"}}))
        .await
        .expect("greet");
    assert!(greeted.raw.contains("Unknown tool"), "{}", greeted.raw);

    // Alice may read the root, but never what it hides, whichever way she names it.
    let readme = alice
        .call_2025("resources/read", json!({"uri": "conveyor://roots/vault/README.md"}))
        .await
        .expect("read");
    assert!(readme.raw.contains("public notes"), "{}", readme.raw);
    let listing =
        alice.call_2025("resources/read", json!({"uri": "conveyor://roots/vault/"})).await.expect("listing");
    assert!(listing.raw.contains("README.md") && !listing.raw.contains(".env"), "{}", listing.raw);
    for (path, why) in [
        (".env", "hidden"),
        (".git/config", "hidden"),
        ("private/keys.txt", "ignored"),
        ("notes.txt", "hidden"),
        ("pipe", "not a regular file"),
    ] {
        let started = Instant::now();
        let read = alice
            .call_2025("resources/read", json!({"uri": format!("conveyor://roots/vault/{path}")}))
            .await
            .expect("read");
        assert!(read.message.get("error").is_some(), "{path} was served: {}", read.raw);
        assert!(read.raw.contains(why), "{path}: says it is {why}: {}", read.raw);
        assert_no_secret(path, &read.raw);
        assert!(started.elapsed() < Duration::from_secs(20), "{path} blocked the worker");
    }
    let research =
        create_2025(&alice, "research", json!({"root": "vault", "question": "token", "paths": [".env"]}))
            .await;
    ended(&alice, &research, Duration::from_secs(30)).await;
    let text = outcome_text(&alice, &research).await;
    assert!(text.contains("hidden"), "research refuses a hidden path by name: {text}");
    assert_no_secret("research", &text);
    let failure = "error: deployment failed\n  at .env:1\n  at .git/config:2\n  at private/keys.txt:1\n  at src/app.rs:1";
    let troubleshoot =
        create_2025(&alice, "troubleshoot", json!({"root": "vault", "failure": failure})).await;
    ended(&alice, &troubleshoot, Duration::from_secs(60)).await;
    let text = outcome_text(&alice, &troubleshoot).await;
    assert!(text.contains("src/app.rs"), "what may be read is read: {text}");
    assert_no_secret("troubleshoot", &text);

    // Every refusal of mallory's is in the audit log.
    let log = conveyor.log_text();
    for method in ["resources/read", "prompts/get", "tools/call"] {
        assert!(
            log.lines().any(|l| l.contains("conveyor::audit") && l.contains("mallory") && l.contains(method)),
            "no audit record of mallory's {method}:\n{log}"
        );
    }
}

/// A graph whose collect nodes double their output at every layer: a root and `layers` pairs,
/// each node collecting both nodes of the layer before.
fn amplifying_graph(layers: usize) -> Value {
    let mut nodes = vec![json!({"id": "root", "kind": "noop"})];
    for layer in 1..=layers {
        let before: Vec<String> = if layer == 1 {
            vec!["root".to_owned()]
        } else {
            vec![format!("l{}a", layer - 1), format!("l{}b", layer - 1)]
        };
        for side in ["a", "b"] {
            nodes.push(json!({"id": format!("l{layer}{side}"), "kind": "collect", "dependsOn": before}));
        }
    }
    json!({"nodes": nodes, "output": format!("l{layers}a")})
}

/// A large output and one node whose 64 KiB of arguments reference it thousands of times.
fn fan_in_graph() -> Value {
    let references: Vec<Value> = (0..3_000).map(|_| json!({"$from": "big"})).collect();
    json!({"nodes": [
        {"id": "big", "tool": "echo", "arguments": {"text": "x".repeat(60_000)}},
        {"id": "fan", "tool": "echo", "arguments": {"items": references}, "dependsOn": ["big"]}
    ], "output": "fan"})
}

#[tokio::test]
async fn amplifying_graphs_end_at_a_named_limit_while_another_principal_keeps_working() {
    let redis = RedisServer::start().expect("redis");
    let conveyor = up(&redis, "tenants-amplify", &["alice", "mallory"], &[]);
    let pid = conveyor.pid().expect("pid");
    let alice = client(&conveyor, "alice");
    let mallory = client(&conveyor, "mallory");
    alice.wait_for_tool("greet", Duration::from_secs(20)).await.expect("tools");
    for _ in 0..3 {
        alice
            .call_2025("tools/call", json!({"name": "greet", "arguments": {"name": "warm"}}))
            .await
            .expect("greet");
    }
    let (rss_before, (redis_peak_before, redis_before)) = (peak_rss(pid), redis_memory(&redis));

    let amplify = create_2025(&mallory, "run_dag", amplifying_graph(12)).await;
    let fan_in = create_2025(&mallory, "run_dag", fan_in_graph()).await;
    // Alice's calls keep completing while mallory's graphs run.
    let mut greeted = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut ended_graphs = Vec::new();
    while ended_graphs.len() < 2 {
        let reply = alice
            .call_2025("tools/call", json!({"name": "greet", "arguments": {"name": "alice"}}))
            .await
            .expect("greet");
        assert_eq!(reply.result()["content"][0]["text"], "Hello, alice!", "{}", reply.raw);
        greeted += 1;
        ended_graphs.clear();
        for graph in [&amplify, &fan_in] {
            let got = mallory.call_2025("tasks/get", json!({"taskId": graph})).await.expect("tasks/get");
            if got.result()["status"] != "working" {
                ended_graphs.push(got.result()["status"].clone());
            }
        }
        assert!(Instant::now() < deadline, "mallory's graphs never ended");
    }
    let amplified = outcome_text(&mallory, &amplify).await;
    assert!(
        amplified.contains("\"isError\":true"),
        "the amplifying graph failed: {}",
        &amplified[..amplified.len().min(2000)]
    );
    assert!(
        ["max_node_argument_bytes", "max_node_output_bytes", "max_task_bytes"]
            .iter()
            .any(|l| amplified.contains(l)),
        "it names the limit: {}",
        &amplified[..amplified.len().min(2000)]
    );
    let fanned = outcome_text(&mallory, &fan_in).await;
    assert!(fanned.contains("max_node_argument_bytes"), "{}", &fanned[..fanned.len().min(2000)]);
    let (rss_after, (redis_peak_after, redis_after)) = (peak_rss(pid), redis_memory(&redis));
    println!(
        "12-layer amplification and a 3,000-reference fan-in of mallory's, {greeted} greetings of alice's meanwhile: \
         conveyor up peak RSS {:.1} -> {:.1} MiB; Redis used memory {:.1} -> {:.1} MiB (peak {:.1} -> {:.1} MiB); \
         results of {} and {} bytes",
        mib(rss_before),
        mib(rss_after),
        mib(redis_before),
        mib(redis_after),
        mib(redis_peak_before),
        mib(redis_peak_after),
        amplified.len(),
        fanned.len()
    );
    // Without the budgets the first graph alone took 3 GB in this process and 500 MB in Redis.
    assert!(
        rss_after.saturating_sub(rss_before) < 512 * 1024 * 1024,
        "the process grew by {} MiB",
        mib(rss_after - rss_before)
    );
    assert!(
        redis_peak_after.saturating_sub(redis_peak_before) < 256 * 1024 * 1024,
        "Redis grew by {} MiB",
        mib(redis_peak_after - redis_peak_before)
    );
    assert!(greeted >= 1);
}

#[tokio::test]
async fn upstream_values_must_meet_the_tools_schema_on_the_worker() {
    let redis = RedisServer::start().expect("redis");
    let conveyor = up(&redis, "tenants-schema", &["mallory"], &[]);
    let mallory = client(&conveyor, "mallory");
    mallory.wait_for_tool("plan_fanout", Duration::from_secs(20)).await.expect("tools");
    // `width` is at most 1000 by the schema; a value from upstream broke it unchecked before.
    let graph = json!({"nodes": [
        {"id": "wide", "tool": "echo", "arguments": {"width": 100_000, "extra": "x"}},
        {"id": "plan", "tool": "plan_fanout", "dependsOn": ["wide"], "retries": 3,
         "arguments": {"width": {"$from": "wide", "pointer": "/structuredContent/width"}}}
    ], "output": "plan"});
    let id = create_2025(&mallory, "run_dag", graph).await;
    let ended = ended(&mallory, &id, Duration::from_secs(30)).await;
    let text = outcome_text(&mallory, &id).await;
    assert!(text.contains("Invalid arguments for tool `plan_fanout`"), "{ended} {text}");
    assert!(text.contains("/width"), "names the field: {text}");
    let attempts = redis.node_field(&id, "plan", "attempt");
    assert_eq!(attempts.as_deref(), Some("1"), "refused for good, not retried");
}

/// Calls `tool` as a task `count` times, `parallel` at once; the task ids created and the refusals.
async fn flood(mcp: &Mcp, count: usize, parallel: usize) -> (Vec<String>, Vec<Value>) {
    let replies: Vec<_> = futures::stream::iter(0..count)
        .map(|i| async move {
            mcp.call_2025(
                "tools/call",
                json!({"name": "slow_compute", "arguments": {"seconds": 60, "label": format!("n{i}")}, "task": {}}),
            )
            .await
            .expect("tools/call")
        })
        .buffer_unordered(parallel)
        .collect()
        .await;
    let mut created = Vec::new();
    let mut refused = Vec::new();
    for reply in replies {
        match reply.result()["task"]["taskId"].as_str() {
            Some(id) => created.push(id.to_owned()),
            None => refused.push(reply.message["error"].clone()),
        }
    }
    (created, refused)
}

/// The live-task limit holds exactly over every shard of `redis_url`'s deployment.
async fn exact_live_limit(conveyor: &Conveyor) {
    let mallory = client(conveyor, "mallory");
    let alice = client(conveyor, "alice");
    mallory.wait_for_tool("slow_compute", Duration::from_secs(30)).await.expect("tools");
    let (created, refused) = flood(&mallory, 2_000, 64).await;
    assert_eq!(created.len(), 50, "exactly the limit is admitted ({} refused)", refused.len());
    assert_eq!(refused.len(), 1_950);
    for error in &refused {
        assert_eq!(error["code"], OVERLOADED, "{error}");
        assert_eq!(error["data"]["limit"], "live_tasks_per_principal", "{error}");
        assert_eq!(error["data"]["max"], 50, "the configured figure: {error}");
        assert!(
            error["message"].as_str().unwrap_or_default().contains("limit of 50 unfinished tasks"),
            "{error}"
        );
    }
    // A slot freed anywhere admits the next call, whichever shard it lands in first.
    for freed in created.iter().take(3) {
        let cancelled = mallory.call_2025("tasks/cancel", json!({"taskId": freed})).await.expect("cancel");
        assert!(cancelled.message.get("error").is_none(), "{}", cancelled.raw);
        let (again, _) = flood(&mallory, 8, 8).await;
        assert_eq!(again.len(), 1, "one freed slot admits one call");
    }
    let (none, _) = flood(&mallory, 4, 4).await;
    assert!(none.is_empty());
    // Another principal's allowance is its own.
    let (hers, _) = flood(&alice, 3, 3).await;
    assert_eq!(hers.len(), 3);
}

#[tokio::test]
async fn a_limit_of_fifty_admits_fifty_over_every_shard() {
    let redis = RedisServer::start().expect("redis");
    let conveyor =
        up(&redis, "tenants-exact", &["alice", "mallory"], &["--max-live-tasks-per-principal", "50"]);
    exact_live_limit(&conveyor).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_limit_of_fifty_admits_fifty_over_every_shard_of_a_redis_cluster() {
    let cluster = tokio::task::block_in_place(|| conveyor_tests::redis_cluster::RedisCluster::start(3, 0))
        .expect("cluster");
    let dir = scratch_dir("tenants-exact-cluster");
    let tokens = tokens_file(&dir, &["alice", "mallory"]);
    let conveyor = Conveyor::up(
        &cluster.seed_url(),
        &[
            "--fixtures",
            "--tokens-file",
            tokens.to_str().expect("utf-8"),
            "--shards",
            "6",
            "--max-live-tasks-per-principal",
            "50",
        ],
    )
    .expect("conveyor up");
    exact_live_limit(&conveyor).await;
    // The byte budgets hold on a cluster as on one server: alice's fan-in ends at the limit.
    let alice = client(&conveyor, "alice");
    let fan_in = create_2025(&alice, "run_dag", fan_in_graph()).await;
    ended(&alice, &fan_in, Duration::from_secs(60)).await;
    let text = outcome_text(&alice, &fan_in).await;
    assert!(text.contains("max_node_argument_bytes"), "{}", &text[..text.len().min(2000)]);
}

#[tokio::test]
async fn another_principals_call_starts_at_once_while_one_principals_long_graph_runs() {
    let redis = RedisServer::start().expect("redis");
    // Four slots: mallory may take three of them.
    let conveyor = up(&redis, "tenants-share", &["alice", "mallory"], &["--concurrency", "4"]);
    let alice = client(&conveyor, "alice");
    let mallory = client(&conveyor, "mallory");
    mallory.wait_for_tool("slow_compute", Duration::from_secs(20)).await.expect("tools");
    let nodes: Vec<Value> = (0..200)
        .map(|i| json!({"id": format!("n{i}"), "tool": "slow_compute", "arguments": {"seconds": 30, "label": format!("{i}")}}))
        .collect();
    let graph = create_2025(&mallory, "run_dag", json!({"nodes": nodes})).await;
    let running = |redis: &RedisServer| {
        (0..200)
            .filter(|i| redis.node_field(&graph, &format!("n{i}"), "status").as_deref() == Some("running"))
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while running(&redis) < 3 {
        assert!(Instant::now() < deadline, "mallory's graph never started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A call of another tool, and one of the very tool whose queue mallory filled.
    let started = Instant::now();
    let greeting = alice
        .call_2025("tools/call", json!({"name": "greet", "arguments": {"name": "alice"}}))
        .await
        .expect("greet");
    assert_eq!(greeting.result()["content"][0]["text"], "Hello, alice!", "{}", greeting.raw);
    let greet_took = started.elapsed();
    let started = Instant::now();
    let same_queue = alice
        .call_2025(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 0, "label": "alice"}}),
        )
        .await
        .expect("slow_compute");
    assert!(same_queue.raw.contains("computed alice"), "{}", same_queue.raw);
    let same_queue_took = started.elapsed();
    println!(
        "while mallory's 200 nodes of 30 s hold 3 of 4 slots: alice's greet took {greet_took:?}, her slow_compute \
         behind mallory's queue {same_queue_took:?}"
    );
    // Neither waited for one of mallory's 30 s nodes to end: they started on the slot she leaves.
    let progress = mallory.call_2025("tasks/get", json!({"taskId": graph})).await.expect("tasks/get");
    let settled = (0..200)
        .filter(|i| {
            redis
                .node_field(&graph, &format!("n{i}"), "status")
                .is_some_and(|s| s == "completed" || s == "failed")
        })
        .count();
    assert_eq!(settled, 0, "alice waited for mallory's nodes: {}", progress.raw);
    assert_eq!(running(&redis), 3, "mallory holds her share, no more");
    let cancelled = mallory.call_2025("tasks/cancel", json!({"taskId": graph})).await.expect("cancel");
    assert!(cancelled.message.get("error").is_none(), "{}", cancelled.raw);
}

#[tokio::test]
async fn one_principal_cannot_hold_every_stream_or_the_request_memory() {
    let redis = RedisServer::start().expect("redis");
    let conveyor = up(
        &redis,
        "tenants-streams",
        &["alice", "mallory"],
        &[
            "--max-streams-per-principal",
            "4",
            "--max-body-bytes",
            "1048576",
            "--max-parsed-bytes",
            "2097152",
            "--max-inflight-bytes",
            "16777216",
            "--max-inflight-bytes-per-principal",
            "4194304",
            "--max-task-bytes",
            "1048576",
        ],
    );
    let alice = client(&conveyor, "alice");
    let mallory = client(&conveyor, "mallory");
    mallory.wait_for_tool("slow_compute", Duration::from_secs(20)).await.expect("tools");

    // Mallory holds 4 waiting calls; the fifth is refused, with the limit named. Alice's is not.
    let waiting: Vec<_> = (0..4)
        .map(|i| {
            let mallory = mallory.clone();
            tokio::spawn(async move {
                mallory
                    .call_2025("tools/call", json!({"name": "slow_compute", "arguments": {"seconds": 20, "label": format!("w{i}")}}))
                    .await
            })
        })
        .collect();
    // Let the four reach the gateway before the fifth is sent.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(waiting.iter().all(|call| !call.is_finished()), "a waiting call ended early");
    let deadline = Instant::now() + Duration::from_secs(20);
    let refused = loop {
        let reply = mallory
            .call_2025(
                "tools/call",
                json!({"name": "slow_compute", "arguments": {"seconds": 0, "label": "fifth"}}),
            )
            .await
            .expect("call");
        if reply.error_code() == Some(OVERLOADED) {
            break reply;
        }
        assert!(Instant::now() < deadline, "the fifth stream was never refused: {}", reply.raw);
    };
    assert_eq!(refused.status, 200, "a JSON-RPC error, not an HTTP one: {}", refused.raw);
    assert_eq!(refused.message["error"]["data"]["limit"], "max_streams_per_principal", "{}", refused.raw);
    let hers = alice
        .call_2025(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 0, "label": "alice"}}),
        )
        .await
        .expect("call");
    assert!(hers.raw.contains("computed alice"), "{}", hers.raw);
    for call in waiting {
        call.abort();
    }
    // Her calls' connections are gone: their streams are given back.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let reply = mallory
            .call_2025(
                "tools/call",
                json!({"name": "slow_compute", "arguments": {"seconds": 0, "label": "back"}}),
            )
            .await
            .expect("call");
        if reply.raw.contains("computed back") {
            break;
        }
        assert!(Instant::now() < deadline, "mallory's streams were never given back: {}", reply.raw);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Web view streams count among her streams (and at most 8 of hers on a gateway).
    let http = reqwest::Client::new();
    let stream =
        |who: &str| http.get(format!("{}/ui/api/stream", conveyor.base)).bearer_auth(token(who)).send();
    let mut open = Vec::new();
    let mut refused_status = None;
    for _ in 0..12 {
        let response = stream("mallory").await.expect("stream");
        if response.status().is_success() {
            open.push(response);
        } else {
            refused_status = Some(response.status().as_u16());
            break;
        }
    }
    assert_eq!(open.len(), 4, "mallory's four streams");
    assert_eq!(refused_status, Some(429));
    drop(open);
    let hers = stream("alice").await.expect("stream");
    assert!(hers.status().is_success(), "alice's web view stream: {}", hers.status());
    drop(hers);

    // Request memory: bodies that trickle in without a Content-Length hold what has arrived, not
    // the largest body allowed, so twenty of mallory's leave room for alice.
    let address = conveyor.base.trim_start_matches("http://").to_owned();
    let mut trickles = Vec::new();
    for _ in 0..20 {
        let mut socket = std::net::TcpStream::connect(&address).expect("connect");
        use std::io::Write;
        let head = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{{\"jso\r\n",
            token("mallory")
        );
        socket.write_all(head.as_bytes()).expect("write");
        trickles.push(socket);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let hers = alice.call_2025("tools/list", json!({})).await.expect("tools/list");
    assert!(
        hers.result()["tools"].is_array(),
        "alice is served while mallory's bodies trickle: {}",
        hers.raw
    );
    // Mallory's own share is what her requests hold: 4 MiB, so a fifth 1 MiB body of hers waits
    // and is refused while four are held.
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut socket = std::net::TcpStream::connect(&address).expect("connect");
        use std::io::Write;
        let head = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nContent-Length: 1000000\r\n\r\n{{",
            token("mallory")
        );
        socket.write_all(head.as_bytes()).expect("write");
        held.push(socket);
    }
    drop(trickles);
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":9,"method":"tools/list","params":{{"pad":"{}"}}}}"#,
        "x".repeat(900_000)
    );
    // The four count once the gateway has taken them up, which a loaded machine may take a while
    // to do: until then a fifth is served, after that it is refused.
    let deadline = Instant::now() + Duration::from_secs(20);
    let over = loop {
        let over =
            mallory.post_raw(&[("mcp-protocol-version", "2025-11-25")], body.clone()).await.expect("post");
        if over.message.get("error").is_some() || Instant::now() >= deadline {
            break over;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(over.message["error"]["data"]["limit"], "max_inflight_bytes_per_principal", "{}", over.raw);
    let hers = alice.post_raw(&[("mcp-protocol-version", "2025-11-25")], body).await.expect("post");
    assert!(hers.result()["tools"].is_array(), "{}", hers.raw);
    drop(held);
}

#[tokio::test]
async fn what_is_signed_or_keyed_for_one_principal_is_no_use_to_another() {
    let redis = RedisServer::start().expect("redis");
    let conveyor =
        up(&redis, "tenants-keys", &["al", "al:x", "alice", "mallory"], &["--min-poll-gap-ms", "2000"]);
    let al = client(&conveyor, "al");
    let alx = client(&conveyor, "al:x");
    al.wait_for_tool("slow_compute", Duration::from_secs(20)).await.expect("tools");

    // Principals `al` (key `x:y`) and `al:x` (key `y`) used to share one idempotency key.
    let keyed = |key: &str| {
        json!({"name": "slow_compute", "arguments": {"seconds": 30, "label": "k"}, "task": {},
               "_meta": {"io.conveyor/idempotencyKey": key}})
    };
    let first = al.call_2025("tools/call", keyed("x:y")).await.expect("call");
    let second = alx.call_2025("tools/call", keyed("y")).await.expect("call");
    let (a, b) = (first.result()["task"]["taskId"].clone(), second.result()["task"]["taskId"].clone());
    assert!(
        a.is_string() && b.is_string() && a != b,
        "two principals, two tasks: {} {}",
        first.raw,
        second.raw
    );

    // A 2025-11-25 session of alice's is no session for mallory.
    let alice = client(&conveyor, "alice");
    let mallory = client(&conveyor, "mallory");
    let init = alice
        .call_2025(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}}, "clientInfo": {"name": "t", "version": "1"}}),
        )
        .await
        .expect("initialize");
    let session = init.session_id.clone().expect("a session id");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "logging/setLevel", "params": {"level": "debug"}});
    let reply = mallory
        .post_raw(
            &[("mcp-protocol-version", "2025-11-25"), ("mcp-session-id", session.as_str())],
            body.to_string(),
        )
        .await
        .expect("setLevel");
    assert!(reply.message.get("error").is_none(), "{}", reply.raw);
    let mut conn = redis.connection().expect("redis");
    let levels: Vec<String> =
        redis::cmd("KEYS").arg("cv:{cv.meta}:log-level:*").query(&mut conn).expect("KEYS");
    assert_eq!(levels, ["cv:{cv.meta}:log-level:principal:mallory"], "mallory set only her own level");
    assert!(
        conveyor.log_text().contains("a session id of another principal"),
        "the attempt is audited:\n{}",
        conveyor.log_text()
    );

    // The poll gap holds on every reader of a task, not only tasks/get.
    let id = a.as_str().expect("id");
    let got = al.call_2025("tasks/get", json!({"taskId": id})).await.expect("tasks/get");
    assert!(got.message.get("error").is_none(), "{}", got.raw);
    let read = al
        .call_2025("resources/read", json!({"uri": format!("conveyor://tasks/{id}")}))
        .await
        .expect("resources/read");
    assert_eq!(read.message["error"]["data"]["limit"], "min_poll_gap_ms", "{}", read.raw);
}

#[tokio::test]
async fn resuming_a_stream_counts_against_the_request_rate() {
    let redis = RedisServer::start().expect("redis");
    let conveyor =
        up(&redis, "tenants-rate", &["mallory"], &["--rate-limit-rps", "1", "--rate-limit-burst", "2"]);
    // GET /mcp is a request like POST: it counts against the principal's rate.
    let http = reqwest::Client::new();
    let mut statuses = Vec::new();
    for _ in 0..6 {
        let response = http
            .get(conveyor.mcp_url())
            .bearer_auth(token("mallory"))
            .header("accept", "text/event-stream")
            .header("last-event-id", "not-a-stream")
            .send()
            .await
            .expect("GET");
        statuses.push(response.status().as_u16());
    }
    assert!(statuses.contains(&429), "GET /mcp is rate limited: {statuses:?}");
}

/// The official Python SDK ends its session on any HTTP 5xx: every refusal at a tenant's limits
/// must be a JSON-RPC error its session survives (`tests/python/tenant_client.py`).
#[tokio::test]
async fn the_python_sdk_meets_the_limits_and_its_session_goes_on() {
    let python =
        conveyor_tests::python::python_with(&conveyor_tests::python::MCP_1).await.expect("python SDK");
    let redis = RedisServer::start().expect("redis");
    let root = vault();
    let root_arg = format!("vault={}", root.display());
    let conveyor = up(
        &redis,
        "tenants-python",
        &["mallory"],
        &["--root", &root_arg, "--max-live-tasks-per-principal", "5"],
    );
    client(&conveyor, "mallory").wait_for_tool("slow_compute", Duration::from_secs(20)).await.expect("tools");
    let run = conveyor_tests::python::script(&python, "tenant_client.py")
        .arg(conveyor.mcp_url())
        .arg(token("mallory"))
        .arg("5")
        .output();
    let output = tokio::time::timeout(Duration::from_secs(180), run)
        .await
        .unwrap_or_else(|_| panic!("the Python client did not finish\n{}", conveyor.log_text()))
        .expect("the Python client runs");
    let text = conveyor_tests::process::output_text(&output);
    assert!(
        output.status.success(),
        "the Python client failed\n{text}\n--- conveyor log ---\n{}",
        conveyor.log_text()
    );
    print!("{}", String::from_utf8_lossy(&output.stdout));
}

/// A call of alice's that stores `bytes` in its result, as a task: how it ended, or the refusal.
async fn store_blob(mcp: &Mcp, bytes: u64) -> Result<String, Value> {
    let reply = mcp
        .call_2025(
            "tools/call",
            json!({"name": "big_output", "arguments": {"bytes": bytes}, "task": {"ttl": 600_000}}),
        )
        .await
        .expect("tools/call");
    if !reply.message["error"].is_null() {
        return Err(reply.message["error"].clone());
    }
    let id = reply.result()["task"]["taskId"].as_str().expect("a task").to_owned();
    Ok(ended(mcp, &id, Duration::from_secs(30)).await.to_string())
}

#[tokio::test]
async fn a_principal_that_keeps_storing_is_stopped_at_its_budget_and_another_keeps_working() {
    let redis = RedisServer::start().expect("redis");
    // 64 MiB over 4 shards: 16 MiB a shard.
    let budget: u64 = 64 * 1024 * 1024;
    let conveyor = up(
        &redis,
        "tenants-stored",
        &["alice", "bob"],
        &["--max-stored-bytes-per-principal", &budget.to_string(), "--shards", "4"],
    );
    let alice = client(&conveyor, "alice");
    let bob = client(&conveyor, "bob");
    alice.wait_for_tool("big_output", Duration::from_secs(20)).await.expect("tools");
    let (_, redis_before) = redis_memory(&redis);

    let (mut completed, mut failed_at_limit, mut refusal) = (0, 0, None);
    for _ in 0..60 {
        match store_blob(&alice, 3 * 1024 * 1024).await {
            Ok(task) if task.contains("\"completed\"") => completed += 1,
            Ok(task) => {
                assert!(task.contains("stored_bytes_per_principal"), "a failure names the budget: {task}");
                failed_at_limit += 1;
            }
            Err(error) => {
                refusal = Some(error);
                break;
            }
        }
    }
    let (_, redis_after) = redis_memory(&redis);
    println!(
        "alice storing 3 MiB results in a loop under a 64 MiB budget: {completed} kept, {failed_at_limit} failed at the budget, \
         then {}; Redis used memory {:.1} -> {:.1} MiB",
        refusal.as_ref().map_or("no refusal".to_owned(), Value::to_string),
        mib(redis_before),
        mib(redis_after)
    );
    assert!((16..=20).contains(&completed), "about the budget's worth is kept: {completed}");
    assert!(
        (1..=4).contains(&failed_at_limit),
        "a result past a shard's share fails, naming the budget, once a shard: {failed_at_limit}"
    );
    let error = refusal.as_ref().expect("then calls are refused at the door");
    assert!(
        redis_after.saturating_sub(redis_before) < budget + 16 * 1024 * 1024,
        "Redis grew by {:.1} MiB",
        mib(redis_after - redis_before)
    );
    assert_eq!(error["code"], OVERLOADED, "{error}");
    assert_eq!(error["data"]["limit"], "stored_bytes_per_principal", "{error}");
    assert_eq!(error["data"]["max"], budget, "{error}");
    assert!(
        error["data"]["current"].as_u64().is_some_and(|held| held > budget / 2),
        "names what she keeps: {error}"
    );
    assert!(error["data"]["freesInMs"].as_u64().is_some_and(|ms| ms <= 600_000), "{error}");
    assert!(
        error["message"].as_str().is_some_and(|m| m.contains("gives its bytes back in about")),
        "{error}"
    );
    // Bob stores what he likes; his calls never meet alice's budget.
    let bobs = store_blob(&bob, 3 * 1024 * 1024).await.expect("bob's call is not refused");
    assert!(bobs.contains("\"completed\""), "{bobs}");
    let greeting = bob
        .call_2025("tools/call", json!({"name": "greet", "arguments": {"name": "bob"}}))
        .await
        .expect("greet");
    assert_eq!(greeting.result()["content"][0]["text"], "Hello, bob!", "{}", greeting.raw);
}
