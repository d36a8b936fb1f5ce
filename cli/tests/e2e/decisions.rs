//! The memory of decisions and of troubleshooting, over this repository: `adr_todo` over its own
//! ADRs (`docs/adr`), and `troubleshoot` sessions with `troubleshoot_feedback`, a later similar
//! failure seeing the steps that helped first.

use std::time::Duration;

use conveyor_tests::mcp::{Reply, settle, tasks_client_capabilities};
use conveyor_tests::process::workspace_root;
use conveyor_tests::{Conveyor, Mcp, RedisServer};
use serde_json::{Value, json};

async fn stack() -> (RedisServer, Conveyor, Mcp) {
    let redis = RedisServer::start().expect("redis");
    let root = format!("repo={}", workspace_root().display());
    let up = Conveyor::up(&redis.url(), &["--root", &root]).expect("conveyor up");
    let mcp = Mcp::new(up.mcp_url());
    for tool in ["adr_todo", "troubleshoot", "troubleshoot_feedback"] {
        mcp.wait_for_tool(tool, Duration::from_secs(30))
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", up.log_text()));
    }
    (redis, up, mcp)
}

async fn call(mcp: &Mcp, tool: &str, arguments: Value) -> Reply {
    mcp.call_2026("tools/call", json!({"name": tool, "arguments": arguments}), tasks_client_capabilities())
        .await
        .expect("tools/call")
}

/// Runs `tool` as a task to its end; its result.
async fn run(mcp: &Mcp, tool: &str, arguments: Value) -> Value {
    let reply = call(mcp, tool, arguments).await;
    let task = reply.result()["taskId"].as_str().unwrap_or_else(|| panic!("{}", reply.raw)).to_owned();
    let done = settle(mcp, &task, Duration::from_secs(120)).await;
    assert_eq!(done["status"], "completed", "{done}");
    done["result"].clone()
}

#[tokio::test]
async fn adr_todo_lists_what_conveyors_own_decisions_imply_and_checks_off_what_the_code_holds() {
    let (_redis, _up, mcp) = stack().await;
    let result = run(&mcp, "adr_todo", json!({"root": "repo", "adrPath": "docs/adr"})).await;
    let todo = &result["structuredContent"];
    let items = todo["items"].as_array().expect("items");
    let markdown = todo["markdown"].as_str().expect("markdown");
    let records: std::collections::BTreeSet<&str> =
        items.iter().filter_map(|i| i["adrPath"].as_str()).collect();
    assert!(records.len() >= 19, "items from every accepted record: {records:?}\n{markdown}");
    assert_eq!(markdown.lines().filter(|l| l.starts_with("- [")).count(), items.len(), "{markdown}");
    for item in items {
        assert!(item["adrPath"].as_str().is_some_and(|p| p.starts_with("docs/adr/0")), "{item}");
        assert!(item["section"].as_str().is_some_and(|s| !s.is_empty()), "{item}");
    }
    let done: Vec<&Value> = items.iter().filter(|i| i["done"] == true).collect();
    assert!(!done.is_empty(), "the code holds what some decisions name: {markdown}");
    // Each piece of evidence is a real line of this repository that holds the name.
    for item in &done {
        for evidence in item["evidence"].as_array().expect("evidence") {
            let (path, line) = evidence.as_str().and_then(|e| e.rsplit_once(':')).expect("path:line");
            let text = std::fs::read_to_string(workspace_root().join(path)).expect("the file exists");
            let line: usize = line.parse().expect("a line number");
            assert!(line >= 1 && line <= text.lines().count().max(1), "{evidence}");
        }
    }
    assert_eq!(todo["done"].as_u64().unwrap_or(0) as usize, done.len());
    assert_eq!(result["content"][1]["resource"]["uri"], todo["uri"]);
}

#[tokio::test]
async fn a_similar_failure_sees_the_steps_that_helped_before_first() {
    let (_redis, _up, mcp) = stack().await;
    let failure = "thread 'store' panicked at shared/src/store/nodes.rs:120:9:\nstale attempt: complete_node refused the fenced completion after the lease expired";
    let first = run(&mcp, "troubleshoot", json!({"root": "repo", "failure": failure})).await;
    let session = first["structuredContent"]["session"].as_str().expect("a session").to_owned();
    let plan = first["structuredContent"]["plan"].as_array().expect("plan").clone();
    assert!(plan.len() >= 3, "{first}");
    assert_eq!(first["structuredContent"]["earlierSessions"], json!([]));
    let helped = plan[2]["action"].as_str().expect("an action").to_owned();

    let feedback = run(
        &mcp,
        "troubleshoot_feedback",
        json!({"session": session, "outcome": "resolved", "stepsTried": [{"step": 1, "helped": false}, {"step": 3, "helped": true}]}),
    )
    .await;
    assert_eq!(feedback["structuredContent"]["root"], "repo", "{feedback}");

    let similar = "panicked at shared/src/store/nodes.rs:131:5: stale attempt: complete_node refused the fenced completion, the lease expired";
    let second = run(&mcp, "troubleshoot", json!({"root": "repo", "failure": similar})).await;
    let structured = &second["structuredContent"];
    assert_eq!(structured["plan"][0]["action"], helped.as_str(), "{structured}");
    assert_eq!(structured["plan"][0]["helpedBefore"]["session"], session.as_str());
    assert_eq!(structured["earlierSessions"][0]["session"], session.as_str());
    let text = second["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains(&format!("session {session}")), "{text}");

    // An unrelated failure gets no earlier session; an unknown session or step is refused.
    let other = run(
        &mcp,
        "troubleshoot",
        json!({"root": "repo", "failure": "the web view renders a blank page in chromium"}),
    )
    .await;
    assert_eq!(other["structuredContent"]["earlierSessions"], json!([]), "{other}");
    for (arguments, expected) in [
        (
            json!({"session": "nope", "outcome": "resolved", "stepsTried": []}),
            "no troubleshoot session `nope`",
        ),
        (
            json!({"session": session, "outcome": "resolved", "stepsTried": [{"step": 99, "helped": true}]}),
            "there is no step 99",
        ),
    ] {
        let reply = call(&mcp, "troubleshoot_feedback", arguments).await;
        let message = match reply.result()["taskId"].as_str() {
            Some(task) => settle(&mcp, task, Duration::from_secs(30)).await.to_string(),
            None => reply.raw.clone(),
        };
        assert!(message.contains(expected), "{message}");
    }
}

#[tokio::test]
async fn adr_todo_reads_the_seed_record_in_plain_text_and_finds_its_first_step_in_the_code() {
    let redis = RedisServer::start().expect("redis");
    let root = format!("seed={}", workspace_root().join("tests/fixtures/seed-project").display());
    let up = Conveyor::up(&redis.url(), &["--root", &root]).expect("conveyor up");
    let mcp = Mcp::new(up.mcp_url());
    mcp.wait_for_tool("adr_todo", Duration::from_secs(30)).await.expect("listed");
    let result = run(&mcp, "adr_todo", json!({"root": "seed"})).await;
    let todo = &result["structuredContent"];
    let markdown = todo["markdown"].as_str().expect("markdown");
    let items = todo["items"].as_array().expect("items");
    assert!(items.len() >= 20, "one item per bullet of the implementation plan: {markdown}");
    let task_manager = items
        .iter()
        .find(|i| i["text"].as_str().is_some_and(|t| t.starts_with("Create TaskManager class")))
        .unwrap_or_else(|| panic!("{markdown}"));
    assert_eq!(task_manager["section"], "Step 1: Infrastructure (Week 1) ✅ COMPLETE", "{task_manager}");
    assert_eq!(task_manager["adrPath"], "docs/adr/ADR-020-mcp-tasks-integration.txt");
    assert_eq!(task_manager["done"], true, "{task_manager}");
    assert_eq!(task_manager["evidence"], json!(["src/utils/task-manager.ts:1"]));
    let persistence = items
        .iter()
        .find(|i| i["text"].as_str().is_some_and(|t| t.contains("src/utils/task-persistence.ts")))
        .expect("the persistence item");
    assert_eq!(persistence["done"], false, "the code lacks it: {persistence}");
    assert!(markdown.contains("- [x] Create TaskManager class in src/utils/task-manager.ts"), "{markdown}");
}
