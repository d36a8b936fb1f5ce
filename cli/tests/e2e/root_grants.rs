//! Roots under the access policy, and memories per principal: a tool reads a root only for a
//! caller granted the root's resources (`conveyor://roots/NAME/*`), whichever way the call names
//! it (an argument, a graph node, a value from upstream, a profile or an operator's tool bound to
//! it), and no caller's listing or completion names a root it lacks; troubleshooting sessions and
//! feedback are each principal's own, so that another's feedback, citations and flood reach none
//! of them.
//!
//! Each test runs a real `conveyor up` against a real `redis-server`, with a tokens file and an
//! access file that denies by default: alice is granted root `sample` (and one file of `vault`,
//! which is not the root), bob `sample` and `vault`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use conveyor_gateway::auth::token_digest;
use conveyor_tests::mcp::{get_2026, settle, tasks_client_capabilities};
use conveyor_tests::process::{free_port, scratch_dir};
use conveyor_tests::{Conveyor, Mcp, RedisServer};
use serde_json::{Value, json};

/// A word only root `vault` holds.
const VAULT_WORD: &str = "quarterlyhandshake";

fn token(principal: &str) -> String {
    format!("{principal}-token-0123456789")
}

fn client(conveyor: &Conveyor, principal: &str) -> Mcp {
    Mcp::new(conveyor.mcp_url()).with_api_key(&token(principal))
}

fn write(dir: &Path, relative: &str, text: &str) {
    let path = dir.join(relative);
    std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
    std::fs::write(&path, text).expect("write");
}

/// The roots: `sample`, a small service, and `vault`, notes alice must never read.
fn roots(dir: &Path) -> (PathBuf, PathBuf) {
    let sample = dir.join("sample");
    write(
        &sample,
        "src/retry.rs",
        "pub fn backoff(attempt: u32) -> u64 {\n    // retry backoff grows until max_delay\n    (attempt as u64).pow(2).min(max_delay())\n}\n\nfn max_delay() -> u64 { 30 }\n",
    );
    write(
        &sample,
        "src/store.rs",
        "pub fn complete(attempt: u32) {\n    // a stale attempt is refused after the lease expired\n    assert!(attempt > 0, \"stale attempt\");\n}\n",
    );
    write(&sample, "README.md", "A sample service with retries and a store.\n");
    let vault = dir.join("vault");
    write(&vault, "notes.md", &format!("Deployment notes: the {VAULT_WORD} rotates every quarter.\n"));
    write(&vault, "public.md", "The vault's one public page.\n");
    (sample, vault)
}

/// `conveyor up` with tokens for alice and bob, an access file that denies by default, the roots
/// `sample` and `vault` (by default those of [`roots`]) and `extra` arguments.
fn up(redis: &RedisServer, dir: &Path, sample: Option<&Path>, extra: &[&str]) -> Conveyor {
    let tokens: String = ["alice", "bob"]
        .iter()
        .map(|p| format!("[[token]]\nprincipal = \"{p}\"\nsha256 = \"{}\"\n\n", token_digest(&token(p))))
        .collect();
    write(dir, "tokens.toml", &tokens);
    write(
        dir,
        "access.toml",
        r#"
default = "deny"
[[rule]]
tools = ["research", "troubleshoot", "troubleshoot_feedback", "run_dag", "echo", "deployment_readiness", "bootstrap_validation_loop", "vault_lines"]
prompts = ["*"]
resources = ["conveyor://roots/sample/*"]
allow = ["alice", "bob"]
[[rule]]
resources = ["conveyor://roots/vault/*"]
allow = ["bob"]
[[rule]]
resources = ["conveyor://roots/vault/public.md"]
allow = ["alice"]
"#,
    );
    let (made, vault) = roots(dir);
    let sample = sample.unwrap_or(&made);
    let (sample, vault) = (format!("sample={}", sample.display()), format!("vault={}", vault.display()));
    let (tokens, access) = (dir.join("tokens.toml"), dir.join("access.toml"));
    let mut args = vec![
        "--tokens-file",
        tokens.to_str().expect("utf-8"),
        "--access-file",
        access.to_str().expect("utf-8"),
        "--root",
        &sample,
        "--root",
        &vault,
    ];
    args.extend_from_slice(extra);
    Conveyor::up(&redis.url(), &args).expect("conveyor up")
}

/// The tools file: an operator's tool that runs in `vault`, and readiness and bootstrap profiles
/// of each root.
fn tools_file(dir: &Path) -> PathBuf {
    write(
        dir,
        "tools.toml",
        r#"
[[tool]]
name = "vault_lines"
description = "Counts the lines of the deployment notes"
argv = ["wc", "-l", "notes.md"]
root = "vault"

[readiness.quick]
description = "The sample's smoke check"
[[readiness.quick.check]]
name = "smoke"
argv = ["true"]
root = "sample"

[readiness.vaulted]
description = "Reads the deployment notes"
[[readiness.vaulted.check]]
name = "notes"
argv = ["cat", "notes.md"]
root = "vault"

[bootstrap.sampleboot]
root = "sample"
workspace = "root"

[bootstrap.vaultboot]
root = "vault"
workspace = "root"
"#,
    );
    dir.join("tools.toml")
}

/// The definition of `name` in a `tools/list` result.
fn tool<'a>(listed: &'a Value, name: &str) -> Option<&'a Value> {
    listed["tools"].as_array().expect("tools").iter().find(|t| t["name"] == name)
}

/// The `enum` of property `property` of tool `name`'s input schema.
fn choices(listed: &Value, name: &str, property: &str) -> Value {
    let tool = tool(listed, name).unwrap_or_else(|| panic!("{name} is listed: {listed}"));
    tool["inputSchema"]["properties"][property]["enum"].clone()
}

/// A 2025-11-25 task-augmented call: the error's message when the gateway refuses it, or the
/// task's id.
async fn call(mcp: &Mcp, tool: &str, arguments: Value) -> Result<String, String> {
    let reply = mcp
        .call_2025("tools/call", json!({"name": tool, "arguments": arguments, "task": {"ttl": 600_000}}))
        .await
        .expect("tools/call");
    match reply.result()["task"]["taskId"].as_str() {
        Some(task) => Ok(task.to_owned()),
        None => {
            assert_eq!(reply.error_code(), Some(-32602), "{tool}: {}", reply.raw);
            Err(reply.message["error"]["message"].as_str().unwrap_or_default().to_owned())
        }
    }
}

/// Suggestions for the root file template's `root` variable.
async fn root_completions(mcp: &Mcp, typed: &str) -> Value {
    let reply = mcp
        .call_2025(
            "completion/complete",
            json!({"ref": {"type": "ref/resource", "uri": "conveyor://roots/{root}/{+path}"}, "argument": {"name": "root", "value": typed}}),
        )
        .await
        .expect("completion/complete");
    reply.result()["completion"]["values"].clone()
}

/// The audit records of `principal` that name `subject`.
fn audited(conveyor: &Conveyor, principal: &str, subject: &str) -> Vec<String> {
    conveyor
        .log_text()
        .lines()
        .filter(|l| l.contains("conveyor::audit") && l.contains(principal) && l.contains(subject))
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn a_tool_reads_a_root_only_for_a_caller_granted_it_and_lists_only_the_callers_roots() {
    let redis = RedisServer::start().expect("redis");
    let dir = scratch_dir("root-grants");
    let tools = tools_file(&dir);
    let conveyor = up(&redis, &dir, None, &["--fixtures", "--tools-file", tools.to_str().expect("utf-8")]);
    let (alice, bob) = (client(&conveyor, "alice"), client(&conveyor, "bob"));
    for tool in ["research", "deployment_readiness", "bootstrap_validation_loop", "vault_lines", "echo"] {
        bob.wait_for_tool(tool, Duration::from_secs(30))
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", conveyor.log_text()));
    }

    // Bob is granted both roots and sees both; alice's listings name no root but hers, nor any
    // profile or tool bound to another.
    let bobs = bob.call_2025("tools/list", json!({})).await.expect("tools/list");
    assert_eq!(choices(bobs.result(), "research", "root"), json!(["sample", "vault"]));
    assert_eq!(choices(bobs.result(), "deployment_readiness", "profile"), json!(["quick", "vaulted"]));
    assert!(tool(bobs.result(), "vault_lines").is_some(), "{}", bobs.raw);
    for wire in ["2025", "2026"] {
        let listed = if wire == "2025" {
            alice.call_2025("tools/list", json!({})).await.expect("tools/list")
        } else {
            alice.call_2026("tools/list", json!({}), json!({})).await.expect("tools/list")
        };
        let listed_tools = listed.result();
        for name in ["research", "troubleshoot"] {
            assert_eq!(choices(listed_tools, name, "root"), json!(["sample"]), "{wire}: {name}");
        }
        assert_eq!(choices(listed_tools, "deployment_readiness", "profile"), json!(["quick"]));
        let profile = &tool(listed_tools, "deployment_readiness").expect("listed")["inputSchema"]["properties"]
            ["profile"];
        assert_eq!(profile["enumDescriptions"].as_array().map(Vec::len), Some(1), "{profile}");
        assert_eq!(choices(listed_tools, "bootstrap_validation_loop", "profile"), json!(["sampleboot"]));
        assert_eq!(choices(listed_tools, "bootstrap_validation_loop", "root"), json!(["sample"]));
        assert!(
            tool(listed_tools, "vault_lines").is_none(),
            "an operator's tool in another root is not hers"
        );
        assert!(!listed.raw.contains("vault"), "{wire}: alice's tools/list names the vault: {}", listed.raw);
    }
    let templates = alice.call_2025("resources/templates/list", json!({})).await.expect("templates");
    assert!(templates.raw.contains("conveyor://roots/{root}/{+path}"), "{}", templates.raw);
    assert!(!templates.raw.contains("vault"), "{}", templates.raw);
    assert_eq!(root_completions(&alice, "").await, json!(["sample"]));
    assert_eq!(root_completions(&alice, "v").await, json!([]));
    assert_eq!(root_completions(&bob, "").await, json!(["sample", "vault"]));

    // Every way alice names the vault at the door is refused before any task exists, in words
    // that name only her roots, and audited.
    let hers = "no root named `vault` that you may read; your roots: sample";
    let refused = call(&alice, "research", json!({"root": "vault", "question": VAULT_WORD})).await;
    assert_eq!(refused, Err(format!("Invalid arguments for tool `research`: /root: {hers}")));
    let unknown =
        call(&alice, "research", json!({"root": "nope", "question": "x"})).await.expect_err("unknown");
    assert!(unknown.ends_with("no root named `nope` that you may read; your roots: sample"), "{unknown}");
    let profile = call(&alice, "deployment_readiness", json!({"profile": "vaulted"}))
        .await
        .expect_err("bound to the vault");
    assert!(profile.contains("`vaulted`") && profile.contains("yours: `quick`"), "{profile}");
    let boot = call(&alice, "bootstrap_validation_loop", json!({"profile": "vaultboot"}))
        .await
        .expect_err("the vault's");
    assert!(boot.contains("yours: `sampleboot`"), "{boot}");
    let operators = call(&alice, "vault_lines", json!({})).await.expect_err("not hers");
    assert!(operators.contains("Unknown tool: `vault_lines`"), "{operators}");
    let graph = json!({"nodes": [
        {"id": "fine", "tool": "research", "arguments": {"root": "sample", "question": "retry"}},
        {"id": "peek", "tool": "research", "arguments": {"root": "vault", "question": VAULT_WORD}}
    ]});
    let refused = call(&alice, "run_dag", graph).await.expect_err("a node names the vault");
    assert!(
        refused.starts_with("Invalid run_dag graph: node `peek`") && refused.ends_with(hers),
        "{refused}"
    );
    let listed = alice.call_2025("tasks/list", json!({})).await.expect("tasks/list");
    assert_eq!(listed.result()["tasks"], json!([]), "nothing was started: {}", listed.raw);
    let records = audited(&conveyor, "alice", "vault");
    assert!(records.len() >= 5, "each refusal is audited:\n{}", records.join("\n"));
    assert!(records.iter().any(|l| l.contains("tools/call")), "{records:?}");

    // A root that arrives from upstream passes the door and meets the worker's check.
    let graph = json!({"nodes": [
        {"id": "name", "tool": "echo", "arguments": {"root": "vault"}},
        {"id": "peek", "tool": "research", "dependsOn": ["name"], "arguments": {
            "root": {"$from": "name", "pointer": "/structuredContent/root"}, "question": VAULT_WORD
        }}
    ], "output": "peek"});
    let task = call(&alice, "run_dag", graph).await.expect("a graph the door cannot judge");
    let done = settle(&alice, &task, Duration::from_secs(60)).await;
    let result = alice.call_2025("tasks/result", json!({"taskId": task})).await.expect("tasks/result");
    assert!(result.raw.contains(hers), "the worker refuses the vault: {done}\n{}", result.raw);
    assert!(
        !result.raw.contains("notes.md") && !result.raw.contains("rotates every quarter"),
        "{}",
        result.raw
    );
    let worker_records = audited(&conveyor, "alice", "vault");
    assert!(
        worker_records.iter().any(|l| l.contains(&task)),
        "the worker's refusal is audited with the task:\n{}",
        worker_records.join("\n")
    );

    // A grant of one file of the vault lets alice read that file, and no tool the vault.
    let page = alice
        .call_2025("resources/read", json!({"uri": "conveyor://roots/vault/public.md"}))
        .await
        .expect("read");
    assert!(page.raw.contains("one public page"), "{}", page.raw);
    let notes = alice
        .call_2025("resources/read", json!({"uri": "conveyor://roots/vault/notes.md"}))
        .await
        .expect("read");
    assert!(notes.raw.contains("Resource not found") && !notes.raw.contains(VAULT_WORD), "{}", notes.raw);

    // Each reads what it is granted.
    let task =
        call(&alice, "research", json!({"root": "sample", "question": "retry backoff"})).await.expect("hers");
    let done = settle(&alice, &task, Duration::from_secs(60)).await;
    assert_eq!(done["status"], "completed", "{done}");
    let task = call(&bob, "research", json!({"root": "vault", "question": VAULT_WORD})).await.expect("his");
    settle(&bob, &task, Duration::from_secs(60)).await;
    let result = bob.call_2025("tasks/result", json!({"taskId": task})).await.expect("tasks/result");
    assert!(result.raw.contains("notes.md"), "bob reads the vault: {}", result.raw);
    let task = call(&bob, "vault_lines", json!({})).await.expect("his");
    let done = settle(&bob, &task, Duration::from_secs(60)).await;
    assert_eq!(done["status"], "completed", "{done}");
}

/// Runs `troubleshoot` on root `sample` as a task to its end; its structured result.
async fn troubleshoot(mcp: &Mcp, failure: &str) -> Value {
    let reply = mcp
        .call_2026(
            "tools/call",
            json!({"name": "troubleshoot", "arguments": {"root": "sample", "failure": failure}}),
            tasks_client_capabilities(),
        )
        .await
        .expect("tools/call");
    let task = reply.result()["taskId"].as_str().unwrap_or_else(|| panic!("{}", reply.raw)).to_owned();
    let done = settle(mcp, &task, Duration::from_secs(120)).await;
    assert_eq!(done["status"], "completed", "{done}");
    done["result"]["structuredContent"].clone()
}

/// `troubleshoot_feedback` as a synchronous call: the result, or the error's message.
async fn feedback(mcp: &Mcp, session: &str, step: u64) -> Result<Value, String> {
    let arguments =
        json!({"session": session, "outcome": "resolved", "stepsTried": [{"step": step, "helped": true}]});
    let reply = mcp
        .call_2025("tools/call", json!({"name": "troubleshoot_feedback", "arguments": arguments}))
        .await
        .expect("tools/call");
    match reply.message.get("error") {
        Some(error) => Err(error["message"].as_str().unwrap_or_default().to_owned()),
        None => Ok(reply.result().clone()),
    }
}

/// How many entries a principal's memory of `tool` under root `sample` holds, and its key.
fn memory(redis: &RedisServer, owner: &str, tool: &str) -> (usize, String) {
    let keys = redis.keys(&format!("cv:*:mem:{owner}:{tool}:sample"));
    assert_eq!(keys.len(), 1, "one list per principal, tool and root: {keys:?}");
    let mut conn = redis.connection().expect("redis");
    let len: usize = redis::cmd("LLEN").arg(&keys[0]).query(&mut conn).expect("LLEN");
    (len, keys[0].clone())
}

#[tokio::test]
async fn troubleshooting_memory_is_each_principals_own() {
    let redis = RedisServer::start().expect("redis");
    let dir = scratch_dir("memory-grants");
    let conveyor = up(&redis, &dir, None, &[]);
    let (alice, bob) = (client(&conveyor, "alice"), client(&conveyor, "bob"));
    for tool in ["troubleshoot", "troubleshoot_feedback"] {
        alice
            .wait_for_tool(tool, Duration::from_secs(30))
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", conveyor.log_text()));
    }
    let failure =
        "thread 'store' panicked at src/store.rs:3:5:\nstale attempt refused after the lease expired";
    let similar = "panicked at src/store.rs:3:9: stale attempt refused, the lease expired";

    let first = troubleshoot(&alice, failure).await;
    let session = first["session"].as_str().expect("a session").to_owned();
    let helped = first["plan"][0]["action"].as_str().expect("a step").to_owned();
    feedback(&alice, &session, 1).await.expect("alice's own session");

    // Bob cannot give feedback on alice's session, and is not shown it.
    let refused = feedback(&bob, &session, 1).await.expect_err("not bob's session");
    assert!(refused.contains(&format!("no troubleshoot session `{session}` of yours")), "{refused}");
    assert!(
        !audited(&conveyor, "bob", &session).is_empty(),
        "bob's attempt is audited:\n{}",
        conveyor.log_text()
    );
    let bobs = troubleshoot(&bob, similar).await;
    assert_eq!(bobs["earlierSessions"], json!([]), "bob's plan cites none of alice's sessions: {bobs}");
    assert!(!bobs.to_string().contains(&session), "{bobs}");

    // Bob floods his own memory of the root: more sessions than a principal keeps.
    const FLOOD: usize = 200;
    for wave in 0..FLOOD / 20 {
        let runs = (0..20).map(|i| {
            let failure = format!(
                "panicked at src/retry.rs:3:{}: backoff exceeded max_delay (run {})",
                wave * 20 + i,
                wave * 20 + i
            );
            let bob = bob.clone();
            async move { troubleshoot(&bob, &failure).await }
        });
        futures::future::join_all(runs).await;
    }
    let (bob_kept, bob_key) = memory(&redis, "bob", "troubleshoot");
    assert_eq!(bob_kept, FLOOD, "bob's list is capped at what a principal keeps");
    let (alice_kept, alice_key) = memory(&redis, "alice", "troubleshoot");
    assert_eq!(alice_kept, 1, "alice's list is untouched by bob's flood");
    let tag = |key: &str| key.split(':').nth(1).map(str::to_owned);
    let (alice_feedback, feedback_key) = memory(&redis, "alice", "troubleshoot_feedback");
    assert_eq!(
        (alice_feedback, tag(&feedback_key)),
        (1, tag(&alice_key)),
        "a principal's memory shares one shard"
    );
    assert!(bob_key != alice_key);

    // Alice's session survived the flood: her similar failure sees what helped her first.
    let second = troubleshoot(&alice, similar).await;
    assert_eq!(second["earlierSessions"][0]["session"], session.as_str(), "{second}");
    assert_eq!(second["plan"][0]["action"], helped.as_str(), "{second}");
    assert_eq!(second["earlierSessions"].as_array().map(Vec::len), Some(1), "only her own: {second}");
}

const SETTINGS_ADR: &str = "---\nstatus: accepted\n---\n\n# Settings in one file\n\n## Context and Problem Statement\n\nThe service reads its settings from `config/app.toml`. Start from `config/app.example.toml`.\n\n## Decision Outcome\n\nChosen option: one TOML file.\n\n### Implementation\n\n```sh\n./scripts/build.sh\n```\n\n### Confirmation\n\n```sh\n./scripts/check-config.sh\n```\n";

fn executable(dir: &Path, relative: &str, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    write(dir, relative, text);
    std::fs::set_permissions(dir.join(relative), std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// A project whose ADR's check fails until `config/app.toml` exists, which its example shows how
/// to make: the fix a bootstrap loop learns. Under the system's temporary directory, outside this
/// repository's ignore files; removed when dropped.
struct Project(PathBuf);

impl Project {
    fn new() -> Self {
        let dir =
            std::env::temp_dir().join(format!("conveyor-root-grants-{}-{}", std::process::id(), free_port()));
        write(&dir, "docs/adr/0001-settings.md", SETTINGS_ADR);
        write(&dir, "config/app.example.toml", "port = 8080\n");
        executable(&dir, "scripts/build.sh", "#!/bin/sh\nmkdir -p build\n");
        executable(&dir, "scripts/check-config.sh", "#!/bin/sh\ncat config/app.toml\n");
        std::fs::create_dir_all(dir.with_extension("scratch")).expect("scratch");
        Self(dir)
    }
}

impl Drop for Project {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        let _ = std::fs::remove_dir_all(self.0.with_extension("scratch"));
    }
}

/// Runs the bootstrap loop of profile `sample` to its end as `mcp`, approving every iteration;
/// its report.
async fn bootstrap_loop(mcp: &Mcp, iterations: u64) -> Value {
    let mut capabilities = tasks_client_capabilities();
    capabilities["elicitation"] = json!({});
    let arguments = json!({"profile": "sample", "maxIterations": iterations});
    let reply = mcp
        .call_2026(
            "tools/call",
            json!({"name": "bootstrap_validation_loop", "arguments": arguments}),
            capabilities.clone(),
        )
        .await
        .expect("tools/call");
    let task = reply.result()["taskId"].as_str().unwrap_or_else(|| panic!("{}", reply.raw)).to_owned();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let got = get_2026(mcp, &task, &capabilities).await;
        match got["status"].as_str().unwrap_or_default() {
            "completed" => return got["result"]["structuredContent"].clone(),
            "failed" | "cancelled" => panic!("the loop ended {got}"),
            "input_required" => {
                let responses: serde_json::Map<String, Value> = got["inputRequests"]
                    .as_object()
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(key, _)| (key, json!({"action": "accept", "content": {"approve": true}})))
                    .collect();
                let answered = mcp
                    .call_2026(
                        "tasks/update",
                        json!({"taskId": task, "inputResponses": responses}),
                        capabilities.clone(),
                    )
                    .await
                    .expect("tasks/update");
                assert!(answered.error_code().is_none(), "{}", answered.raw);
            }
            _ => {}
        }
        assert!(std::time::Instant::now() < deadline, "the loop did not end: {got}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn bootstrap_executions_are_each_principals_own() {
    let project = Project::new();
    let scratch = project.0.with_extension("scratch");
    let redis = RedisServer::start().expect("redis");
    let dir = scratch_dir("bootstrap-grants");
    write(
        &dir,
        "tools.toml",
        &format!(
            "[bootstrap.sample]\nroot = \"sample\"\nscratch_dir = \"{}\"\ntimeout_s = 60\n",
            scratch.display()
        ),
    );
    let tools = dir.join("tools.toml");
    let conveyor = up(&redis, &dir, Some(&project.0), &["--tools-file", tools.to_str().expect("utf-8")]);
    let (alice, bob) = (client(&conveyor, "alice"), client(&conveyor, "bob"));
    alice
        .wait_for_tool("bootstrap_validation_loop", Duration::from_secs(30))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", conveyor.log_text()));

    // Alice's loop fails, learns the missing file, and passes with the fix.
    let learned = bootstrap_loop(&alice, 2).await;
    assert_eq!(learned["executions"][0]["passed"], false, "{learned}");
    assert_eq!(learned["executions"][1]["fixesApplied"], json!(["config/app.toml"]), "{learned}");

    // Bob's loop of the same profile starts from nothing of hers.
    let fresh = bootstrap_loop(&bob, 1).await;
    assert_eq!(fresh["executions"][0]["fixesApplied"], json!([]), "bob does not get alice's fixes: {fresh}");
    assert_eq!(fresh["executions"][0]["passed"], false, "{fresh}");

    // Alice's next loop starts from what she learned.
    let again = bootstrap_loop(&alice, 1).await;
    assert_eq!(again["executions"][0]["fixesApplied"], json!(["config/app.toml"]), "{again}");
    assert_eq!(again["success"], true, "{again}");

    let kept = |owner: &str| {
        let keys = redis.keys(&format!("cv:*:mem:{owner}:bootstrap_validation_loop:sample"));
        assert_eq!(keys.len(), 1, "{keys:?}");
        let mut conn = redis.connection().expect("redis");
        redis::cmd("LLEN").arg(&keys[0]).query::<usize>(&mut conn).expect("LLEN")
    };
    assert_eq!((kept("alice"), kept("bob")), (3, 1), "each principal's executions in its own list");
}

/// Each principal's memory of one tool and name, kept apart and capped apart: `keep` of bob's
/// entries push out none of alice's, and neither reads the other's.
async fn memories_stay_apart(store: &conveyor_shared::Store) {
    let entry = |owner: &str, i: usize| json!({"session": format!("{owner}-{i}"), "atMs": i});
    for i in 0..2 {
        store.record_memory("alice", "troubleshoot", "sample", &entry("alice", i), 3).await.expect("record");
    }
    for i in 0..5 {
        let before =
            store.record_memory("bob", "troubleshoot", "sample", &entry("bob", i), 3).await.expect("record");
        assert!(
            before.iter().all(|e| e["session"].as_str().is_some_and(|s| s.starts_with("bob-"))),
            "{before:?}"
        );
    }
    let alices = store.memories("alice", "troubleshoot", "sample", 10).await.expect("read");
    assert_eq!(alices, vec![entry("alice", 1), entry("alice", 0)], "bob's flood left alice's memory");
    let bobs = store.memories("bob", "troubleshoot", "sample", 10).await.expect("read");
    assert_eq!(bobs, vec![entry("bob", 4), entry("bob", 3), entry("bob", 2)], "bob keeps his newest 3");
    // A principal whose name would run into the key's other parts has a memory of its own too.
    store.record_memory("bob:troubleshoot", "sample", "x", &entry("odd", 0), 3).await.expect("record");
    assert_eq!(store.memories("bob", "troubleshoot", "sample", 10).await.expect("read").len(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_principals_memory_is_its_own_on_one_server_and_on_a_redis_cluster() {
    let redis = RedisServer::start().expect("redis");
    let store = conveyor_shared::Store::new(&redis.url(), Duration::from_secs(2)).expect("store");
    memories_stay_apart(&store).await;
    let shard = conveyor_shared::keys::memory_shard("alice", store.shards());
    assert_eq!(redis.keys("cv:*:mem:alice:*"), vec![shard.memory("alice", "troubleshoot", "sample")]);
    // What each keeps is counted in its memory shard: exactly the bytes of the entries its lists
    // hold, those pushed out no more.
    let mut conn = redis.connection().expect("redis");
    for owner in ["alice", "bob"] {
        let shard = conveyor_shared::keys::memory_shard(owner, store.shards());
        let entries: Vec<String> = redis::cmd("LRANGE")
            .arg(shard.memory(owner, "troubleshoot", "sample"))
            .arg(0)
            .arg(-1)
            .query(&mut conn)
            .expect("LRANGE");
        let kept: Option<usize> =
            redis::cmd("HGET").arg(shard.load()).arg(format!("kept:{owner}")).query(&mut conn).expect("HGET");
        assert_eq!(kept, Some(entries.iter().map(String::len).sum::<usize>()), "{owner}: {entries:?}");
    }
    let huge = json!({"session": "x".repeat(conveyor_shared::store::history::MAX_MEMORY_ENTRY_BYTES)});
    let refused = store.record_memory("alice", "troubleshoot", "sample", &huge, 3).await;
    assert!(refused.is_err_and(|e| e.to_string().contains("65536")), "an entry past the bound is not kept");

    // On a cluster the script's two keys (the list and its shard's load hash) share one slot.
    let cluster = tokio::task::block_in_place(|| conveyor_tests::redis_cluster::RedisCluster::start(3, 0))
        .expect("a Redis Cluster of 3 primaries");
    let store = conveyor_shared::Store::new(&cluster.seed_urls(), Duration::from_secs(5)).expect("store");
    memories_stay_apart(&store).await;
}
