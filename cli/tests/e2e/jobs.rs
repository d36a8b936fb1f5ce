//! The built-in job tools end to end, as MCP tasks on real `conveyor` processes and a real Redis:
//! `research` over this repository and over a generated tree of 50,000 files (sharded over two
//! workers, `.gitignore` honoured), `research` that asks the client's model through sampling,
//! `validate_adrs` over the fixture set of planted defects, `deployment_readiness` across runs
//! (history, flaky tests, timeouts, cancellation killing the check's process group), a tool from
//! the operator's tools file (argv filled without a shell), and every way out of a root refused.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use conveyor_tests::mcp::{Reply, get_2026, settle, tasks_client_capabilities, wait_status};
use conveyor_tests::process::{
    free_port, scratch_dir, sleep_marker, wait_gone, wait_started, workspace_root,
};
use conveyor_tests::{Conveyor, Mcp, RedisServer};
use serde_json::{Value, json};

/// A Redis and one `conveyor up` on it.
struct Stack {
    redis: RedisServer,
    up: Conveyor,
    mcp: Mcp,
}

/// Starts Redis and `conveyor up` with `args`, and waits until `tool` is listed.
async fn stack(args: &[&str], tool: &str) -> Stack {
    let redis = RedisServer::start().expect("redis");
    let up = Conveyor::up(&redis.url(), args).expect("conveyor up");
    let mcp = Mcp::new(up.mcp_url());
    if let Err(e) = mcp.wait_for_tool(tool, Duration::from_secs(30)).await {
        panic!("{e}; log:\n{}", up.log_text());
    }
    Stack { redis, up, mcp }
}

/// `--root NAME=PATH`.
fn root_arg(name: &str, path: &Path) -> String {
    format!("{name}={}", path.display())
}

/// A 2026-07-28 client that takes tasks and answers sampling requests.
fn sampling_client() -> Value {
    let mut capabilities = tasks_client_capabilities();
    capabilities["sampling"] = json!({});
    capabilities
}

/// Calls `tool` as a task (2026-07-28): the task's id, or the reply when the call was refused at
/// once.
async fn start(mcp: &Mcp, tool: &str, arguments: Value, capabilities: Value) -> Result<String, Reply> {
    let reply = mcp
        .call_2026("tools/call", json!({"name": tool, "arguments": arguments}), capabilities)
        .await
        .expect("tools/call");
    match reply.result()["taskId"].as_str() {
        Some(id) if reply.result()["resultType"] == "task" => Ok(id.to_owned()),
        _ => Err(reply),
    }
}

/// Runs `tool` as a task to its end and returns its result, which must be a success.
async fn run_ok(mcp: &Mcp, tool: &str, arguments: Value, within: Duration) -> Value {
    let task = start(mcp, tool, arguments.clone(), tasks_client_capabilities())
        .await
        .unwrap_or_else(|reply| panic!("{tool} {arguments} was refused: {}", reply.raw));
    let done = settle(mcp, &task, within).await;
    assert_eq!(done["status"], "completed", "{tool} {arguments}: {done}");
    assert_ne!(done["result"]["isError"], true, "{tool} {arguments}: {done}");
    done["result"].clone()
}

/// Calls `tool` as a task that must not succeed: the error's message, whether the gateway
/// refused the call at once or the task failed.
async fn refusal(mcp: &Mcp, tool: &str, arguments: Value) -> String {
    let task = match start(mcp, tool, arguments.clone(), tasks_client_capabilities()).await {
        Ok(task) => task,
        Err(reply) => {
            assert!(
                reply.error_code().is_some(),
                "{tool} {arguments}: neither a task nor an error: {}",
                reply.raw
            );
            return reply.message["error"]["message"].as_str().unwrap_or_default().to_owned();
        }
    };
    let done = settle(mcp, &task, Duration::from_secs(30)).await;
    assert_eq!(done["status"], "failed", "{tool} {arguments} must not succeed: {done}");
    assert!(done.get("result").is_none(), "a refused call has no result: {done}");
    done["error"]["message"].as_str().unwrap_or_else(|| panic!("an error message: {done}")).to_owned()
}

/// The `path` of each evidence item, best first.
fn evidence_paths(result: &Value) -> Vec<String> {
    result["structuredContent"]["evidence"]
        .as_array()
        .unwrap_or_else(|| panic!("no evidence in {result}"))
        .iter()
        .map(|e| e["path"].as_str().expect("a path").to_owned())
        .collect()
}

/// The text content of a result.
fn text_of(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

/// A directory under the system's temporary directory, removed when dropped (for trees too large
/// to keep under `target/` for inspection, and outside the workspace's ignore files).
struct TempTree(PathBuf);

impl TempTree {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("conveyor-jobs-{name}-{}-{}", std::process::id(), free_port()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        Self(dir)
    }
}

impl Drop for TempTree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes `text` to `dir/relative`, creating its folders.
fn write(dir: &Path, relative: &str, text: &str) {
    let path = dir.join(relative);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("mkdir");
    }
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

/// This test file, relative to the workspace.
const THIS_FILE: &str = file!();

/// Questions about this repository and the files that answer each.
const QUESTIONS: &[(&str, &[&str])] = &[
    ("Which secret key signs the HMAC-SHA256 of a session id token?", &["gateway/src/signing.rs"]),
    (
        "Which capped stream keeps dead letters of nodes whose attempts are spent?",
        &["shared/src/store/dead_letters.rs", "shared/src/lua/complete_node.lua"],
    ),
    ("How are identifiers split on camel case and underscores?", &["tools/src/research/text.rs"]),
];

#[tokio::test]
async fn research_over_this_repository_finds_the_files_that_answer() {
    let repo = workspace_root();
    let s = stack(&["--root", &root_arg("repo", &repo)], "research").await;

    for (question, answers) in QUESTIONS {
        let result = run_ok(
            &s.mcp,
            "research",
            json!({"root": "repo", "question": question}),
            Duration::from_secs(60),
        )
        .await;
        let paths = evidence_paths(&result);
        let top: Vec<&String> = paths.iter().take(3).collect();
        assert!(
            top.iter().any(|p| answers.contains(&p.as_str())),
            "{question}: none of {answers:?} in the top 3 {top:?}\n{}",
            text_of(&result)
        );
        // This file quotes the question word for word, so it may rank high too; apart from it, the
        // answer comes first.
        let first_other = paths.iter().find(|p| *p != THIS_FILE);
        assert!(
            first_other.is_some_and(|p| answers.contains(&p.as_str())),
            "{question}: {first_other:?} ranks above {answers:?}\n{}",
            text_of(&result)
        );
        let evidence = &result["structuredContent"]["evidence"];
        let items = evidence.as_array().expect("evidence");
        assert!(items.len() <= 20, "the default maxResults is 20: {}", items.len());
        let scores: Vec<f64> = items.iter().map(|e| e["score"].as_f64().expect("a score")).collect();
        assert!(scores.windows(2).all(|w| w[0] >= w[1]), "best first: {scores:?}");
        for item in items {
            let path = item["path"].as_str().expect("path");
            assert!(!path.starts_with('/') && !path.contains(".."), "relative to the root: {path}");
            assert!(repo.join(path).is_file(), "{path} is a file of the repository");
            assert!(item["line"].as_u64().is_some_and(|l| l >= 1), "{item}");
            assert!(!item["snippet"].as_str().unwrap_or_default().is_empty(), "{item}");
            assert!(!path.starts_with("target/"), "ignored folders are not searched: {path}");
        }
        // The text cites path:line, the first item first.
        let first = format!("1. {}:{} ", items[0]["path"].as_str().unwrap_or_default(), items[0]["line"]);
        assert!(text_of(&result).contains(&first), "{first:?} not in:\n{}", text_of(&result));
        // The snippet holds the cited line.
        let file = std::fs::read_to_string(repo.join(items[0]["path"].as_str().unwrap_or_default()))
            .expect("the cited file");
        let line = file.lines().nth(items[0]["line"].as_u64().unwrap_or(1) as usize - 1).unwrap_or_default();
        assert!(
            items[0]["snippet"].as_str().unwrap_or_default().contains(line.trim_end()),
            "the snippet shows line {}: {line:?}",
            items[0]["line"]
        );
        let stats = &result["structuredContent"]["stats"];
        assert!(stats["files"].as_u64().is_some_and(|n| n > 100), "{stats}");
        assert!(stats["chunks"].as_u64() >= stats["files"].as_u64(), "{stats}");
        assert_eq!(stats["truncated"], false, "{stats}");
        assert!(result["structuredContent"].get("answer").is_none(), "no sampling, no answer: {result}");
    }

    // `paths` narrows the search to a folder; `maxResults` caps the evidence.
    let (question, answers) = QUESTIONS[2];
    let narrowed = run_ok(
        &s.mcp,
        "research",
        json!({"root": "repo", "question": question, "paths": ["tools/src"], "maxResults": 3}),
        Duration::from_secs(60),
    )
    .await;
    let paths = evidence_paths(&narrowed);
    assert!(!paths.is_empty() && paths.len() <= 3, "maxResults 3: {paths:?}");
    assert!(paths.iter().all(|p| p.starts_with("tools/src/")), "only under the folder: {paths:?}");
    assert_eq!(paths[0], answers[0], "{paths:?}");
    let everywhere = run_ok(
        &s.mcp,
        "research",
        json!({"root": "repo", "question": "HMAC signature", "maxResults": 50}),
        Duration::from_secs(60),
    )
    .await;
    assert!(
        evidence_paths(&everywhere).iter().any(|p| p.starts_with("gateway/")),
        "without paths, the whole root is searched"
    );
    let elsewhere = run_ok(
        &s.mcp,
        "research",
        json!({"root": "repo", "question": "HMAC signature", "paths": ["shared/src/lua", "docs"], "maxResults": 50}),
        Duration::from_secs(60),
    )
    .await;
    let paths = evidence_paths(&elsewhere);
    assert!(
        paths.iter().all(|p| p.starts_with("shared/src/lua/") || p.starts_with("docs/")),
        "several paths narrow to their union: {paths:?}"
    );
    assert!(
        elsewhere["structuredContent"]["stats"]["files"].as_u64()
            < everywhere["structuredContent"]["stats"]["files"].as_u64()
    );
}

/// Files of the generated tree: 50 folders of 20 folders of 50 files.
const TREE_FILES: usize = 50 * 20 * 50;
/// The folder `.gitignore` leaves out, with its 50 files.
const IGNORED_FOLDER: &str = "d13/s05";
const PLANTED: &[&str] =
    &["d03/s11/f07.txt", "d19/s00/f42.txt", "d27/s13/f01.txt", "d41/s19/f33.txt", "d49/s07/f49.txt"];
const DECOYS: &[&str] = &["d13/s05/f00.txt", "d13/s05/f01.txt", "d13/s05/f02.txt"];

/// Writes the tree: filler everywhere, the phrase in the planted files, and decoys (which hold
/// the phrase more often than any planted file) in the ignored folder.
fn generate_tree(dir: &Path) {
    const WORDS: &[&str] = &[
        "amber", "basalt", "cobalt", "delta", "ember", "fjord", "granite", "harbor", "indigo", "jasper",
        "kelp", "lagoon", "meadow", "nickel", "orchard", "pebble", "quill", "ridge", "saffron", "tundra",
    ];
    let mut text = String::new();
    for a in 0..50 {
        for b in 0..20 {
            let folder = dir.join(format!("d{a:02}/s{b:02}"));
            std::fs::create_dir_all(&folder).expect("mkdir");
            for c in 0..50 {
                text.clear();
                let n = a * 1000 + b * 50 + c;
                for line in 0..4 {
                    let w = |k: usize| WORDS[(n * 7 + line * 3 + k * 11) % WORDS.len()];
                    text.push_str(&format!("{} {} {} record {n} line {line} {}\n", w(0), w(1), w(2), w(3)));
                }
                std::fs::write(folder.join(format!("f{c:02}.txt")), &text).expect("write");
            }
        }
    }
    for (i, planted) in PLANTED.iter().enumerate() {
        write(
            dir,
            planted,
            &format!(
                "amber basalt cobalt\nplanted note {i}: the zephyr quartz nebula handshake is renegotiated hourly\ndelta ember\n"
            ),
        );
    }
    for decoy in DECOYS {
        write(dir, decoy, &"the zephyr quartz nebula handshake is renegotiated hourly\n".repeat(10));
    }
    write(dir, ".gitignore", &format!("{IGNORED_FOLDER}/\n"));
}

#[tokio::test]
async fn research_over_fifty_thousand_files_is_sharded_over_two_workers_and_honours_gitignore() {
    let tree = TempTree::new("tree");
    let started = Instant::now();
    generate_tree(&tree.0);
    eprintln!("generated {TREE_FILES} files in {:?}", started.elapsed());
    let s =
        stack(&["--workers", "2", "--concurrency", "4", "--root", &root_arg("tree", &tree.0)], "research")
            .await;

    let started = Instant::now();
    let task = start(
        &s.mcp,
        "research",
        json!({"root": "tree", "question": "Where is the zephyr quartz nebula handshake renegotiated?", "maxResults": 10}),
        tasks_client_capabilities(),
    )
    .await
    .unwrap_or_else(|reply| panic!("refused: {}", reply.raw));
    let done = settle(&s.mcp, &task, Duration::from_secs(300)).await;
    eprintln!("research over {TREE_FILES} files: {:?}", started.elapsed());
    assert_eq!(done["status"], "completed", "{done}\n{}", s.up.log_text());
    let result = &done["result"];
    let paths = evidence_paths(result);
    let planted: BTreeSet<String> = PLANTED.iter().map(|p| (*p).to_owned()).collect();
    let found: BTreeSet<String> = paths.iter().take(PLANTED.len()).cloned().collect();
    assert_eq!(found, planted, "the planted files come first: {paths:?}");
    assert_eq!(paths.len(), PLANTED.len(), "nothing else holds the phrase: {paths:?}");
    assert!(
        !paths.iter().any(|p| p.starts_with(IGNORED_FOLDER)),
        "the ignored folder's decoys are not searched: {paths:?}"
    );
    let stats = &result["structuredContent"]["stats"];
    assert_eq!(stats["files"], TREE_FILES - 50, "every file but the ignored folder's: {stats}");
    assert_eq!(stats["skipped"], 0, "{stats}");
    assert!(stats["shards"].as_u64().is_some_and(|n| n > 1), "{stats}");
    assert_eq!(stats["chunks"], stats["files"], "each file is one chunk: {stats}");

    // Each shard ran as a node of its own, and each worked.
    let shards = stats["shards"].as_u64().unwrap_or_default();
    let mut workers = BTreeSet::new();
    for shard in 0..shards {
        let node = format!("scan-{shard}");
        assert_eq!(s.redis.node_field(&task, &node, "status").as_deref(), Some("completed"), "{node}");
        workers.extend(s.redis.node_field(&task, &node, "worker"));
    }
    eprintln!("{shards} scan nodes ran on {} worker(s)", workers.len());
    assert_eq!(s.redis.node_field(&task, "merge", "status").as_deref(), Some("completed"));
}

#[tokio::test]
async fn research_with_a_sampling_client_adds_the_models_answer() {
    let repo = workspace_root();
    let s = stack(&["--root", &root_arg("repo", &repo)], "research").await;
    let capabilities = sampling_client();
    let (question, answers) = QUESTIONS[0];
    let arguments = json!({"root": "repo", "question": question, "paths": ["gateway/src"], "maxResults": 5});

    let task = start(&s.mcp, "research", arguments.clone(), capabilities.clone())
        .await
        .unwrap_or_else(|reply| panic!("refused: {}", reply.raw));
    let asked = wait_status(&s.mcp, &task, "input_required", &capabilities, Duration::from_secs(60)).await;
    let requests = asked["inputRequests"].as_object().expect("input requests");
    // The key names the graph node that asks (`answer`) and its question (`answer`).
    assert_eq!(requests.keys().collect::<Vec<_>>(), ["answer/answer"], "{asked}");
    let request = &requests["answer/answer"];
    assert_eq!(request["method"], "sampling/createMessage", "{asked}");
    assert!(request["params"]["maxTokens"].as_u64().is_some_and(|n| n > 0), "{asked}");
    let prompt = request["params"]["messages"][0]["content"]["text"].as_str().expect("a prompt");
    assert!(prompt.contains(question), "the prompt holds the question: {prompt}");
    assert!(prompt.contains("path:line"), "the prompt asks for citations: {prompt}");
    // The evidence is in the prompt as `--- path:line` blocks, best first.
    let cited = prompt
        .lines()
        .find_map(|l| l.strip_prefix("--- "))
        .unwrap_or_else(|| panic!("no evidence in the prompt: {prompt}"))
        .to_owned();
    assert!(answers.iter().any(|a| cited.starts_with(&format!("{a}:"))), "{cited}");

    let answer = format!("Session ids carry an HMAC-SHA256 made with the shared signing key ({cited}).");
    let reply = s
        .mcp
        .call_2026(
            "tasks/update",
            json!({"taskId": task, "inputResponses": {"answer/answer": {
                "role": "assistant",
                "content": {"type": "text", "text": answer},
                "model": "test-model",
                "stopReason": "endTurn"
            }}}),
            capabilities.clone(),
        )
        .await
        .expect("tasks/update");
    assert!(reply.error_code().is_none(), "{}", reply.raw);

    let done = wait_status(&s.mcp, &task, "completed", &capabilities, Duration::from_secs(60)).await;
    let result = &done["result"];
    assert_ne!(result["isError"], true, "{done}");
    let structured = &result["structuredContent"];
    assert_eq!(structured["answer"], answer.as_str(), "{done}");
    assert_eq!(structured["model"], "test-model", "{done}");
    let first = &structured["evidence"][0];
    assert_eq!(format!("{}:{}", first["path"].as_str().unwrap_or_default(), first["line"]), cited, "{done}");
    let text = text_of(result);
    assert!(text.starts_with(&answer), "the answer comes first: {text}");
    assert!(text.contains(&format!("1. {cited} ")), "then the evidence: {text}");

    // synthesize: false asks nothing, even of a client that samples.
    let mut plain = arguments;
    plain["synthesize"] = json!(false);
    let task =
        start(&s.mcp, "research", plain, capabilities.clone()).await.unwrap_or_else(|r| panic!("{}", r.raw));
    let done = wait_status(&s.mcp, &task, "completed", &capabilities, Duration::from_secs(60)).await;
    assert!(done["result"]["structuredContent"].get("answer").is_none(), "{done}");
    assert_eq!(evidence_paths(&done["result"])[0], answers[0], "{done}");
}

/// A finding as (rule, line).
fn finding_keys(findings: &Value) -> Vec<(String, Option<u64>)> {
    let mut keys: Vec<(String, Option<u64>)> = findings
        .as_array()
        .unwrap_or_else(|| panic!("findings: {findings}"))
        .iter()
        .map(|f| (f["rule"].as_str().unwrap_or_default().to_owned(), f["line"].as_u64()))
        .collect();
    keys.sort();
    keys
}

/// Conveyor's own decision records (`docs/adr/`) pass Conveyor's own `validate_adrs`, run as a
/// user runs it: no error, no warning, every record read.
#[tokio::test]
async fn conveyors_own_decision_records_pass_validate_adrs() {
    let repo = workspace_root();
    let folder = "docs/adr";
    let records = std::fs::read_dir(repo.join(folder))
        .expect("docs/adr")
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.ends_with(".md") && name.as_bytes().first().is_some_and(u8::is_ascii_digit)
        })
        .count();
    assert!(records > 0, "no decision records in {folder}");
    let s = stack(&["--root", &root_arg("repo", &repo)], "validate_adrs").await;

    let result =
        run_ok(&s.mcp, "validate_adrs", json!({"root": "repo", "path": folder}), Duration::from_secs(60))
            .await;
    let report = &result["structuredContent"];
    let summary = &report["summary"];
    let findings: Vec<String> = report["adrs"]
        .as_array()
        .unwrap_or_else(|| panic!("no adrs in {report}"))
        .iter()
        .flat_map(|a| {
            a["findings"].as_array().into_iter().flatten().map(move |f| format!("{}: {f}", a["path"]))
        })
        .collect();
    assert_eq!(summary["adrs"], records, "every record read: {summary}");
    assert_eq!((&summary["errors"], &summary["warnings"]), (&json!(0), &json!(0)), "{findings:#?}");
}

#[tokio::test]
async fn validate_adrs_finds_every_planted_defect_and_nothing_else() {
    let repo = workspace_root();
    let folder = "tests/fixtures/adrs";
    let expected: Value = serde_json::from_str(
        &std::fs::read_to_string(repo.join(folder).join("expected.json")).expect("expected.json"),
    )
    .expect("expected.json is JSON");
    let s = stack(&["--root", &root_arg("repo", &repo)], "validate_adrs").await;

    let result =
        run_ok(&s.mcp, "validate_adrs", json!({"root": "repo", "path": folder}), Duration::from_secs(60))
            .await;
    let report = &result["structuredContent"];
    let prefix = format!("{folder}/");
    let adrs: BTreeMap<String, &Value> = report["adrs"]
        .as_array()
        .unwrap_or_else(|| panic!("no adrs in {report}"))
        .iter()
        .map(|a| {
            let path = a["path"].as_str().expect("a path");
            let name = path.strip_prefix(&prefix).unwrap_or_else(|| panic!("{path} is relative to the root"));
            (name.to_owned(), a)
        })
        .collect();
    let files = expected["files"].as_object().expect("files");
    assert_eq!(
        adrs.keys().collect::<Vec<_>>(),
        files.keys().collect::<Vec<_>>(),
        "every record, each once, and no README"
    );
    assert!(!adrs.contains_key("README.md"));
    assert_eq!(report["adrs"].as_array().map(Vec::len), Some(files.len()), "no record twice");

    for (name, want) in files {
        let got = adrs[name];
        assert_eq!(finding_keys(&got["findings"]), finding_keys(&want["findings"]), "{name}: {got}");
        for field in ["number", "title", "status", "format"] {
            assert_eq!(got[field], want[field], "{name}: {field}");
        }
        for finding in got["findings"].as_array().into_iter().flatten() {
            assert!(!finding["message"].as_str().unwrap_or_default().is_empty(), "{name}: {finding}");
            assert!(["error", "warning", "info"].contains(&finding["severity"].as_str().unwrap_or_default()));
        }
    }

    let summary = &report["summary"];
    for field in ["adrs", "errors", "warnings", "infos", "clean", "gaps"] {
        assert_eq!(summary[field], expected["summary"][field], "summary.{field}: {summary}");
    }
    let duplicates: Vec<Value> = summary["duplicates"]
        .as_array()
        .expect("duplicates")
        .iter()
        .map(|d| {
            let paths: Vec<&str> = d["paths"]
                .as_array()
                .expect("paths")
                .iter()
                .map(|p| p.as_str().unwrap_or_default().strip_prefix(&prefix).unwrap_or("outside the folder"))
                .collect();
            json!({"number": d["number"], "paths": paths})
        })
        .collect();
    assert_eq!(Value::Array(duplicates), expected["summary"]["duplicates"], "{summary}");
    let by_rule_total: u64 =
        summary["byRule"].as_object().expect("byRule").values().filter_map(Value::as_u64).sum();
    let findings_total: usize = adrs.values().map(|a| a["findings"].as_array().map_or(0, Vec::len)).sum();
    assert_eq!(by_rule_total as usize, findings_total, "{summary}");
    let want = &expected["summary"];
    let headline = format!(
        "{} ADRs checked: {} errors, {} warnings, {} infos; {} without findings.",
        want["adrs"], want["errors"], want["warnings"], want["infos"], want["clean"]
    );
    let gaps: Vec<String> = want["gaps"].as_array().expect("gaps").iter().map(Value::to_string).collect();
    let text = text_of(&result);
    assert!(text.starts_with(&headline), "{headline:?} does not start:\n{text}");
    assert!(text.contains(&format!("Missing numbers: {}.", gaps.join(", "))), "{text}");

    // The result is what the tool's outputSchema promises.
    let listed = s.mcp.call_2025("tools/list", json!({})).await.expect("tools/list");
    let tool = listed.result()["tools"]
        .as_array()
        .and_then(|tools| tools.iter().find(|t| t["name"] == "validate_adrs"))
        .unwrap_or_else(|| panic!("validate_adrs listed: {}", listed.raw))
        .clone();
    let schema = &tool["outputSchema"];
    assert!(schema.is_object(), "{tool}");
    let validator = jsonschema::validator_for(schema).expect("the outputSchema compiles");
    let errors: Vec<String> =
        validator.iter_errors(report).map(|e| format!("{}: {e}", e.instance_path())).collect();
    assert!(errors.is_empty(), "the report does not match the outputSchema: {errors:?}");
    // ...and a broken report would not pass.
    let mut broken = report.clone();
    broken["adrs"][0]["format"] = json!("haiku");
    assert!(!validator.is_valid(&broken), "the schema checks something");
}

/// The history Redis keeps for a readiness profile, newest first.
fn history(redis: &RedisServer, profile: &str) -> Vec<Value> {
    let mut conn = redis.connection().expect("redis");
    let entries: Vec<String> = redis::cmd("LRANGE")
        .arg(format!("cv:{{cv.history}}:deployment_readiness:{profile}"))
        .arg(0)
        .arg(-1)
        .query(&mut conn)
        .expect("LRANGE");
    entries.iter().map(|e| serde_json::from_str(e).expect("a JSON run")).collect()
}

/// What the test expects of one run of the `release` profile.
struct Expected {
    ready: bool,
    unit: &'static str,
    failing: &'static [&'static str],
    new_failures: &'static [&'static str],
    fixed: &'static [&'static str],
    flaky: &'static [(&'static str, u64, u64)],
    newly_failing_checks: &'static [&'static str],
    fixed_checks: &'static [&'static str],
}

fn names(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"))
        .iter()
        .map(|v| v.as_str().unwrap_or_else(|| panic!("not a name: {v}")).to_owned())
        .collect()
}

#[tokio::test]
async fn deployment_readiness_compares_each_run_with_the_runs_before_it() {
    let root = scratch_dir("readiness-root");
    let marker = sleep_marker();
    write(&root, "compile.sh", "echo compiled 12 crates\n");
    write(&root, "lint.sh", "echo 'lint: 3 problems in src/lib.rs' >&2\nexit 1\n");
    write(&root, "soak.sh", &format!("echo soaking\nsleep {marker}\necho never\n"));
    // cargo test output; which tests fail depends on the run number in `state`.
    write(
        &root,
        "unit.sh",
        r#"n=$(cat state)
flaky=ok; migrates=ok
case "$n" in 1|3) flaky=FAILED ;; esac
if [ "$n" = 2 ]; then migrates=FAILED; fi
echo "     Running unittests src/lib.rs (target/debug/deps/app-0123456789abcdef)"
echo
echo "running 4 tests"
echo "test net::connects ... ok"
echo "test net::flaky ... $flaky"
echo "test db::migrates ... $migrates"
echo "test net::slow ... ignored"
if [ $flaky = ok ] && [ $migrates = ok ]; then
  echo
  echo "test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s"
  exit 0
fi
echo
echo "failures:"
echo
if [ $flaky = FAILED ]; then
  echo "---- net::flaky stdout ----"
  echo
  echo "thread 'net::flaky' (4242) panicked at src/net.rs:40:9:"
  echo "connection reset by peer"
  echo "note: run with \`RUST_BACKTRACE=1\` environment variable to display a backtrace"
  echo
fi
if [ $migrates = FAILED ]; then
  echo "---- db::migrates stdout ----"
  echo
  echo "thread 'db::migrates' (4243) panicked at src/db.rs:12:5:"
  echo "migration 7 failed"
  echo
fi
echo "test result: FAILED. 2 passed; 1 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s"
exit 101
"#,
    );
    let tools = scratch_dir("readiness-tools").join("tools.toml");
    std::fs::write(
        &tools,
        r#"
[readiness.release]
description = "What must pass before a release"
[[readiness.release.check]]
name = "compile"
argv = ["sh", "compile.sh"]
root = "app"
[[readiness.release.check]]
name = "lint"
argv = ["sh", "lint.sh"]
root = "app"
severity = "warning"
[[readiness.release.check]]
name = "unit"
argv = ["sh", "unit.sh"]
root = "app"
report = "cargo"
[[readiness.release.check]]
name = "soak"
argv = ["sh", "soak.sh"]
root = "app"
timeout_s = 1
severity = "warning"
"#,
    )
    .expect("tools file");
    let s = stack(
        &["--root", &root_arg("app", &root), "--tools-file", &tools.display().to_string()],
        "deployment_readiness",
    )
    .await;

    let runs = [
        Expected {
            ready: false,
            unit: "failed",
            failing: &["net::flaky"],
            new_failures: &["unit::net::flaky"],
            fixed: &[],
            flaky: &[],
            newly_failing_checks: &["lint", "soak", "unit"],
            fixed_checks: &[],
        },
        Expected {
            ready: false,
            unit: "failed",
            failing: &["db::migrates"],
            new_failures: &["unit::db::migrates"],
            fixed: &["unit::net::flaky"],
            flaky: &[("unit::db::migrates", 1, 1), ("unit::net::flaky", 1, 1)],
            newly_failing_checks: &[],
            fixed_checks: &[],
        },
        Expected {
            ready: false,
            unit: "failed",
            failing: &["net::flaky"],
            new_failures: &["unit::net::flaky"],
            fixed: &["unit::db::migrates"],
            flaky: &[("unit::db::migrates", 2, 1), ("unit::net::flaky", 1, 2)],
            newly_failing_checks: &[],
            fixed_checks: &[],
        },
        // A fourth run where every critical check passes: the failing warnings do not block.
        Expected {
            ready: true,
            unit: "passed",
            failing: &[],
            new_failures: &[],
            fixed: &["unit::net::flaky"],
            flaky: &[("unit::db::migrates", 3, 1), ("unit::net::flaky", 2, 2)],
            newly_failing_checks: &[],
            fixed_checks: &["unit"],
        },
    ];
    let mut run_ids: Vec<String> = Vec::new();
    for (i, want) in runs.iter().enumerate() {
        let n = i + 1;
        std::fs::write(root.join("state"), n.to_string()).expect("state");
        let task =
            start(&s.mcp, "deployment_readiness", json!({"profile": "release"}), tasks_client_capabilities())
                .await
                .unwrap_or_else(|reply| panic!("refused: {}", reply.raw));
        let done = settle(&s.mcp, &task, Duration::from_secs(120)).await;
        assert_eq!(done["status"], "completed", "run {n}: {done}");
        let report = &done["result"]["structuredContent"];
        let context = format!("run {n}: {}", serde_json::to_string_pretty(report).unwrap_or_default());
        assert_eq!(report["profile"], "release", "{context}");
        assert_eq!(report["runId"], task.as_str(), "{context}");
        assert_eq!(report["ready"], want.ready, "{context}");
        let text = text_of(&done["result"]);
        assert!(text.contains(if want.ready { "READY" } else { "NOT READY" }), "run {n}: {text}");

        let checks: BTreeMap<&str, &Value> = report["checks"]
            .as_array()
            .expect("checks")
            .iter()
            .map(|c| (c["name"].as_str().unwrap_or_default(), c))
            .collect();
        assert_eq!(
            checks.keys().copied().collect::<Vec<_>>(),
            ["compile", "lint", "soak", "unit"],
            "{context}"
        );
        let status = |name: &str| checks[name]["status"].as_str().unwrap_or_default().to_owned();
        assert_eq!(status("compile"), "passed", "{context}");
        assert_eq!(status("lint"), "failed", "{context}");
        assert_eq!(status("unit"), want.unit, "{context}");
        assert_eq!(status("soak"), "timeout", "{context}");
        assert_eq!(checks["compile"]["severity"], "critical");
        assert_eq!(checks["lint"]["severity"], "warning");
        assert_eq!(checks["soak"]["severity"], "warning");
        assert!(
            checks["compile"]["output"]["stdout"].as_str().unwrap_or_default().contains("compiled 12 crates")
        );
        assert_eq!(checks["lint"]["output"]["exitCode"], 1, "{context}");
        assert!(checks["lint"]["summary"].as_str().unwrap_or_default().contains("exit code 1"), "{context}");
        assert!(
            checks["lint"]["output"]["stderr"].as_str().unwrap_or_default().contains("3 problems"),
            "{context}"
        );
        assert!(checks["soak"]["summary"].as_str().unwrap_or_default().contains("timed out"), "{context}");
        assert!(
            checks["soak"]["durationMs"].as_u64().is_some_and(|ms| ms >= 1000),
            "ran until its timeout: {context}"
        );
        let soak_out = checks["soak"]["output"]["stdout"].as_str().unwrap_or_default();
        assert!(soak_out.contains("soaking") && !soak_out.contains("never"), "{context}");
        let failed = want.failing.len() as u64;
        assert_eq!(
            checks["unit"]["tests"],
            json!({"passed": 3 - failed, "failed": failed, "skipped": 1}),
            "{context}"
        );

        let failing: Vec<(String, String)> = report["failingTests"]
            .as_array()
            .expect("failingTests")
            .iter()
            .map(|t| {
                assert_eq!(t["check"], "unit", "{context}");
                (
                    t["test"].as_str().unwrap_or_default().to_owned(),
                    t["message"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        assert_eq!(failing.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>(), want.failing, "{context}");
        for (test, message) in &failing {
            let expected =
                if test == "net::flaky" { "connection reset by peer" } else { "migration 7 failed" };
            assert_eq!(message, expected, "the panic message of {test}: {context}");
        }

        let comparison = &report["comparison"];
        assert_eq!(names(&comparison["newFailures"]), want.new_failures, "{context}");
        assert_eq!(names(&comparison["fixed"]), want.fixed, "{context}");
        assert_eq!(names(&comparison["stillFailing"]), Vec::<String>::new(), "{context}");
        let flaky: Vec<(String, u64, u64)> = comparison["flaky"]
            .as_array()
            .expect("flaky")
            .iter()
            .map(|f| {
                (
                    f["name"].as_str().unwrap_or_default().to_owned(),
                    f["passes"].as_u64().unwrap_or(0),
                    f["failures"].as_u64().unwrap_or(0),
                )
            })
            .collect();
        let want_flaky: Vec<(String, u64, u64)> =
            want.flaky.iter().map(|(n, p, f)| ((*n).to_owned(), *p, *f)).collect();
        assert_eq!(flaky, want_flaky, "{context}");
        assert_eq!(names(&comparison["newlyFailingChecks"]), want.newly_failing_checks, "{context}");
        assert_eq!(names(&comparison["fixedChecks"]), want.fixed_checks, "{context}");
        let trend = comparison["trend"].as_array().expect("trend");
        assert_eq!(trend.len(), n, "{context}");
        run_ids.insert(0, task.clone());
        let trend_ids: Vec<&str> = trend.iter().map(|p| p["runId"].as_str().unwrap_or_default()).collect();
        assert_eq!(trend_ids, run_ids, "the trend is the runs, newest first: {context}");
        let readiness: Vec<bool> = trend.iter().map(|p| p["ready"].as_bool().unwrap_or_default()).collect();
        let want_readiness: Vec<bool> = runs[..n].iter().rev().map(|r| r.ready).collect();
        assert_eq!(readiness, want_readiness, "{context}");
        assert_eq!(report["previousRuns"], i, "{context}");

        // Redis keeps the run under the profile, newest first.
        let kept = history(&s.redis, "release");
        let kept_ids: Vec<&str> = kept.iter().map(|r| r["runId"].as_str().unwrap_or_default()).collect();
        assert_eq!(kept_ids, run_ids, "run {n}");
        // The hanging check's `sleep` did not outlive its timeout.
        wait_gone(&format!("sleep {marker}"), Duration::from_secs(10)).await;
    }
}

#[tokio::test]
async fn a_cancelled_readiness_run_kills_its_check_and_is_not_kept() {
    let root = scratch_dir("readiness-cancel");
    let (child, grandchild) = (sleep_marker(), sleep_marker());
    // `mode` says whether the check hangs (with a grandchild in the background) or passes.
    write(
        &root,
        "slow.sh",
        &format!(
            "if [ \"$(cat mode)\" = hang ]; then\n  sleep {grandchild} &\n  sleep {child}\nfi\necho done\n"
        ),
    );
    let tools = scratch_dir("readiness-cancel-tools").join("tools.toml");
    std::fs::write(
        &tools,
        "[readiness.nightly]\n[[readiness.nightly.check]]\nname = \"slow\"\nargv = [\"sh\", \"slow.sh\"]\nroot = \"app\"\ntimeout_s = 900\n",
    )
    .expect("tools file");
    let s = stack(
        &["--root", &root_arg("app", &root), "--tools-file", &tools.display().to_string()],
        "deployment_readiness",
    )
    .await;
    let run = |mode: &'static str| {
        std::fs::write(root.join("mode"), mode).expect("mode");
        let mcp = s.mcp.clone();
        async move {
            start(&mcp, "deployment_readiness", json!({"profile": "nightly"}), tasks_client_capabilities())
                .await
                .unwrap_or_else(|reply| panic!("refused: {}", reply.raw))
        }
    };

    let first = run("pass").await;
    let done = settle(&s.mcp, &first, Duration::from_secs(60)).await;
    assert_eq!(done["result"]["structuredContent"]["ready"], true, "{done}");
    assert_eq!(history(&s.redis, "nightly").len(), 1);

    let doomed = run("hang").await;
    let (child_sleep, grandchild_sleep) = (format!("sleep {child}"), format!("sleep {grandchild}"));
    wait_started(&[&child_sleep, &grandchild_sleep], Duration::from_secs(30), || s.up.log_text()).await;
    let cancelled = s
        .mcp
        .call_2026("tasks/cancel", json!({"taskId": doomed}), tasks_client_capabilities())
        .await
        .expect("tasks/cancel");
    assert!(cancelled.error_code().is_none(), "{}", cancelled.raw);
    let got = settle(&s.mcp, &doomed, Duration::from_secs(10)).await;
    assert_eq!(got["status"], "cancelled", "{got}");
    // The check's whole process group is gone: its command and what that started.
    wait_gone(&format!("sleep {child}"), Duration::from_secs(10)).await;
    wait_gone(&format!("sleep {grandchild}"), Duration::from_secs(10)).await;
    s.redis.wait_node_status(&doomed, "check-0", "cancelled", Duration::from_secs(10)).await.unwrap_or_else(
        |e| panic!("{e}: {:?}\n{}", s.redis.node_field(&doomed, "check-0", "status"), s.up.log_text()),
    );
    // Give a late report its chance to show up: none does.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_ne!(s.redis.node_field(&doomed, "report", "status").as_deref(), Some("completed"));
    assert_eq!(history(&s.redis, "nightly").len(), 1, "a cancelled run is not kept");
    assert_eq!(get_2026(&s.mcp, &doomed, &tasks_client_capabilities()).await["status"], "cancelled");

    let third = run("pass").await;
    let done = settle(&s.mcp, &third, Duration::from_secs(60)).await;
    let report = &done["result"]["structuredContent"];
    assert_eq!(report["ready"], true, "{done}");
    assert_eq!(report["previousRuns"], 1, "only the first run came before: {done}");
    let trend: Vec<&str> = report["comparison"]["trend"]
        .as_array()
        .expect("trend")
        .iter()
        .map(|p| p["runId"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(trend, [third.as_str(), first.as_str()], "{done}");
    let kept: Vec<String> = history(&s.redis, "nightly")
        .iter()
        .map(|r| r["runId"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(kept, [third.clone(), first.clone()]);
}

#[tokio::test]
async fn a_killed_workers_commands_and_what_they_started_end_with_it() {
    let (alone, first, second) = (sleep_marker(), sleep_marker(), sleep_marker());
    let tools = scratch_dir("orphans-tools").join("tools.toml");
    std::fs::write(
        &tools,
        format!(
            r#"
[[tool]]
name = "nap"
description = "Sleeps"
argv = ["sleep", "{alone}"]
timeout_s = 900

[[tool]]
name = "nap_family"
description = "Starts two sleeps of its own"
argv = ["sh", "-c", "sleep {first} & sleep {second}"]
timeout_s = 900
"#
        ),
    )
    .expect("tools file");
    let tools_arg = tools.display().to_string();
    let mut s = stack(&["--tools-file", &tools_arg], "nap_family").await;
    for tool in ["nap", "nap_family"] {
        start(&s.mcp, tool, json!({}), tasks_client_capabilities())
            .await
            .unwrap_or_else(|reply| panic!("refused: {}", reply.raw));
    }
    let patterns = [format!("sleep {alone}"), format!("sleep {first}"), format!("sleep {second}")];
    let [alone, first, second] = [&patterns[0], &patterns[1], &patterns[2]].map(String::as_str);
    wait_started(&[alone, first, second], Duration::from_secs(30), || s.up.log_text()).await;

    // Killed outright: no chance to signal anything. The commands it started die with it.
    s.up.kill();
    wait_gone(alone, Duration::from_secs(10)).await;
    // What a command started (the shell's two sleeps) was reparented, not killed: it outlives it
    // only until a worker of the host looks. Here that is the next incarnation, at its start (or
    // any other test's worker on this machine, which may come first).
    let next = Conveyor::up(&s.redis.url(), &["--tools-file", &tools_arg]).expect("conveyor up");
    Mcp::new(next.mcp_url()).wait_for_tool("nap", Duration::from_secs(30)).await.expect("tools");
    wait_gone(first, Duration::from_secs(20)).await;
    wait_gone(second, Duration::from_secs(20)).await;
}

/// The tools file of the configured-tool and path-escape tests: `grep_code` (fixed strings, so
/// that a pattern is never a regular expression) and `line_count`, both in root `ROOT`.
fn grep_tools_file(root: &str) -> PathBuf {
    let tools = scratch_dir("configured-tools").join("tools.toml");
    std::fs::write(
        &tools,
        format!(
            r#"
[[tool]]
name = "grep_code"
description = "Lines of the root's files that hold a text"
argv = ["grep", "-rnF", "--", "{{pattern}}", "{{path}}"]
root = "{root}"
path_arguments = ["path"]
[tool.input_schema]
type = "object"
required = ["pattern"]
[tool.input_schema.properties.pattern]
type = "string"
[tool.input_schema.properties.path]
type = "string"
default = "."

[[tool]]
name = "line_count"
description = "Counts the lines of a file of the root"
argv = ["wc", "-l", "{{path}}"]
root = "{root}"
path_arguments = ["path"]
[tool.input_schema]
type = "object"
required = ["path"]
[tool.input_schema.properties.path]
type = "string"
"#
        ),
    )
    .expect("tools file");
    tools
}

#[tokio::test]
async fn a_configured_tool_fills_its_argv_without_a_shell() {
    let root = scratch_dir("configured-root");
    let pwned =
        std::env::temp_dir().join(format!("conveyor-jobs-pwned-{}-{}", std::process::id(), free_port()));
    let hostile = format!("$(touch {}); *", pwned.display());
    write(&root, "notes/a.txt", "alpha beta\nthe magic word is xyzzy\n");
    write(&root, "notes/b.txt", &format!("gamma\nrun {hostile} now\n"));
    write(&root, "other/c.txt", "xyzzy elsewhere\n");
    let tools = grep_tools_file("notes-root");
    let s = stack(
        &["--root", &root_arg("notes-root", &root), "--tools-file", &tools.display().to_string()],
        "grep_code",
    )
    .await;

    let found =
        run_ok(&s.mcp, "grep_code", json!({"pattern": "xyzzy", "path": "notes"}), Duration::from_secs(30))
            .await;
    assert_eq!(text_of(&found), "notes/a.txt:2:the magic word is xyzzy\n", "{found}");
    assert_eq!(found["structuredContent"]["exitCode"], 0, "{found}");
    // The path argument's default: the whole root.
    let everywhere = run_ok(&s.mcp, "grep_code", json!({"pattern": "xyzzy"}), Duration::from_secs(30)).await;
    let mut lines: Vec<&str> = text_of(&everywhere).lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        ["./notes/a.txt:2:the magic word is xyzzy", "./other/c.txt:1:xyzzy elsewhere"],
        "{everywhere}"
    );

    // Shell metacharacters are one literal argument: grep finds them as text, nothing runs.
    let literal =
        run_ok(&s.mcp, "grep_code", json!({"pattern": hostile, "path": "notes"}), Duration::from_secs(30))
            .await;
    assert_eq!(text_of(&literal), format!("notes/b.txt:2:run {hostile} now\n"), "{literal}");
    assert!(!pwned.exists(), "{} was created: the pattern went through a shell", pwned.display());

    // A command that fails is a tool error with its stderr.
    let task = start(&s.mcp, "line_count", json!({"path": "notes"}), tasks_client_capabilities())
        .await
        .unwrap_or_else(|reply| panic!("refused: {}", reply.raw));
    let done = settle(&s.mcp, &task, Duration::from_secs(30)).await;
    assert_eq!(done["status"], "completed", "a tool error is a result: {done}");
    let failed = &done["result"];
    assert_eq!(failed["isError"], true, "{done}");
    assert_eq!(failed["structuredContent"]["exitCode"], 1, "{done}");
    let stderr = failed["structuredContent"]["stderr"].as_str().unwrap_or_default();
    assert!(stderr.contains("notes") && stderr.contains("Is a directory"), "{done}");
    assert!(
        text_of(failed).contains("line_count failed") && text_of(failed).contains(stderr.trim_end()),
        "{done}"
    );
    let counted = run_ok(&s.mcp, "line_count", json!({"path": "notes/a.txt"}), Duration::from_secs(30)).await;
    assert_eq!(text_of(&counted).trim(), "2 notes/a.txt", "{counted}");
    // grep finding nothing exits 1: an error too, with nothing on stderr.
    let task = start(&s.mcp, "grep_code", json!({"pattern": "absent-word"}), tasks_client_capabilities())
        .await
        .unwrap_or_else(|reply| panic!("refused: {}", reply.raw));
    let done = settle(&s.mcp, &task, Duration::from_secs(30)).await;
    assert_eq!(done["result"]["isError"], true, "{done}");
    assert_eq!(done["result"]["structuredContent"]["exitCode"], 1, "{done}");
}

/// `resources/read` (2025-11-25).
async fn read_resource(mcp: &Mcp, uri: &str) -> Reply {
    mcp.call_2025("resources/read", json!({"uri": uri})).await.expect("resources/read")
}

#[tokio::test]
async fn every_way_out_of_a_root_is_refused() {
    let root = scratch_dir("escape-root");
    let outside = scratch_dir("escape-outside");
    let secret = format!("TOPSECRET{}", free_port());
    write(&outside, "secret.txt", &format!("{secret}\n"));
    write(&root, "README.md", "# Escape test\n\nThis root holds a few files and two links that leave it.\n");
    write(
        &root,
        "docs/adr/0001-record-decisions.md",
        "# 1. Record decisions\n\nDate: 2024-01-01\n\n## Status\n\nAccepted\n\n## Context\n\nWe decide.\n\n## Decision\n\nWe record.\n\n## Consequences\n\nWe remember.\n",
    );
    write(&root, "notes.txt", &format!("nothing secret here, not even {}\n", "TOP"));
    std::os::unix::fs::symlink(&outside, root.join("leak")).expect("symlink");
    std::os::unix::fs::symlink(outside.join("secret.txt"), root.join("leak-file.md")).expect("symlink");
    // A link in docs/ whose name is also a harmless file at the root's top.
    std::os::unix::fs::symlink(outside.join("secret.txt"), root.join("docs/notes.txt")).expect("symlink");
    let tools = grep_tools_file("repo");
    // A tool that runs in a folder of the root: its path arguments are read from there.
    let mut text = std::fs::read_to_string(&tools).expect("tools file");
    text.push_str(
        r#"
[[tool]]
name = "show_doc"
description = "Prints a file of the root's docs folder"
argv = ["cat", "{path}"]
root = "repo"
cwd = "docs"
path_arguments = ["path"]
[tool.input_schema]
type = "object"
required = ["path"]
[tool.input_schema.properties.path]
type = "string"
"#,
    );
    std::fs::write(&tools, text).expect("tools file");
    let s = stack(
        &["--root", &root_arg("repo", &root), "--tools-file", &tools.display().to_string()],
        "grep_code",
    )
    .await;
    s.mcp.wait_for_tool("validate_adrs", Duration::from_secs(10)).await.expect("validate_adrs");

    let refused = |message: &str, wanted: &[&str]| {
        assert!(wanted.iter().all(|w| message.contains(w)), "{message:?} does not say {wanted:?}");
        assert!(!message.contains(&secret), "{message}");
    };
    let research = |paths: Value| json!({"root": "repo", "question": "secret", "paths": paths});
    refused(&refusal(&s.mcp, "research", research(json!(["../"]))).await, &["`../`", "holds `..`"]);
    refused(&refusal(&s.mcp, "research", research(json!(["docs/../../"]))).await, &["holds `..`"]);
    refused(&refusal(&s.mcp, "research", research(json!(["/etc"]))).await, &["`/etc`", "absolute"]);
    refused(
        &refusal(&s.mcp, "research", research(json!(["leak"]))).await,
        &["`leak`", "outside root `repo`"],
    );
    refused(&refusal(&s.mcp, "research", research(json!(["leak-file.md"]))).await, &["outside root `repo`"]);
    refused(&refusal(&s.mcp, "research", research(json!(["docs", "leak"]))).await, &["outside root `repo`"]);
    let unknown = refusal(&s.mcp, "research", json!({"root": "elsewhere", "question": "secret"})).await;
    refused(&unknown, &["elsewhere"]);
    // A walk of the whole root never follows the links.
    let whole =
        run_ok(&s.mcp, "research", json!({"root": "repo", "question": secret}), Duration::from_secs(30))
            .await;
    assert_eq!(evidence_paths(&whole), Vec::<String>::new(), "{whole}");
    assert_eq!(whole["structuredContent"]["stats"]["files"], 3, "README, the ADR, notes.txt: {whole}");

    refused(
        &refusal(&s.mcp, "validate_adrs", json!({"root": "repo", "path": "../.."})).await,
        &["`../..`", "holds `..`"],
    );
    refused(&refusal(&s.mcp, "validate_adrs", json!({"root": "repo", "path": "/"})).await, &["absolute"]);
    refused(
        &refusal(&s.mcp, "validate_adrs", json!({"root": "repo", "path": "leak"})).await,
        &["outside root `repo`"],
    );
    let adrs =
        run_ok(&s.mcp, "validate_adrs", json!({"root": "repo", "path": "."}), Duration::from_secs(30)).await;
    let listed: Vec<&str> = adrs["structuredContent"]["adrs"]
        .as_array()
        .expect("adrs")
        .iter()
        .map(|a| a["path"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(listed, ["docs/adr/0001-record-decisions.md"], "no link followed, README skipped: {adrs}");

    refused(
        &refusal(&s.mcp, "grep_code", json!({"pattern": "root", "path": "../../etc/passwd"})).await,
        &["argument `path`", "holds `..`"],
    );
    refused(
        &refusal(&s.mcp, "grep_code", json!({"pattern": "root", "path": "/etc/passwd"})).await,
        &["absolute"],
    );
    refused(
        &refusal(&s.mcp, "grep_code", json!({"pattern": "TOP", "path": "leak"})).await,
        &["outside root `repo`"],
    );
    refused(
        &refusal(&s.mcp, "grep_code", json!({"pattern": "TOP", "path": "leak-file.md"})).await,
        &["outside root"],
    );
    // A path argument is checked where the command reads it: in the tool's working directory.
    let doc =
        run_ok(&s.mcp, "show_doc", json!({"path": "adr/0001-record-decisions.md"}), Duration::from_secs(30))
            .await;
    assert!(text_of(&doc).starts_with("# 1. Record decisions"), "{doc}");
    refused(&refusal(&s.mcp, "show_doc", json!({"path": "notes.txt"})).await, &["outside root `repo`"]);
    refused(&refusal(&s.mcp, "show_doc", json!({"path": "../leak-file.md"})).await, &["holds `..`"]);
    refused(&refusal(&s.mcp, "show_doc", json!({"path": "/etc/passwd"})).await, &["absolute"]);
    // Searching the whole root with grep -r does not follow the links either.
    let task = start(&s.mcp, "grep_code", json!({"pattern": "TOP"}), tasks_client_capabilities())
        .await
        .unwrap_or_else(|reply| panic!("refused: {}", reply.raw));
    let done = settle(&s.mcp, &task, Duration::from_secs(30)).await;
    assert!(!done.to_string().contains(&secret), "{done}");

    // Resources: the root and its files, and nothing outside it.
    let list = s.mcp.call_2025("resources/list", json!({})).await.expect("resources/list");
    let uris: Vec<&str> = list.result()["resources"]
        .as_array()
        .unwrap_or_else(|| panic!("{}", list.raw))
        .iter()
        .filter_map(|r| r["uri"].as_str())
        .collect();
    assert!(uris.contains(&"conveyor://roots/repo/"), "{}", list.raw);
    let listing = read_resource(&s.mcp, "conveyor://roots/repo/").await;
    let mut files: Vec<&str> = listing.result()["contents"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{}", listing.raw))
        .lines()
        .collect();
    files.sort();
    assert_eq!(files, ["README.md", "docs/adr/0001-record-decisions.md", "notes.txt"], "{}", listing.raw);
    let readme = read_resource(&s.mcp, "conveyor://roots/repo/README.md").await;
    assert_eq!(
        readme.result()["contents"][0]["text"].as_str(),
        Some(std::fs::read_to_string(root.join("README.md")).expect("README").as_str()),
        "{}",
        readme.raw
    );
    assert_eq!(readme.result()["contents"][0]["uri"], "conveyor://roots/repo/README.md");
    let nested = read_resource(&s.mcp, "conveyor://roots/repo/docs/adr/0001-record-decisions.md").await;
    assert!(
        nested.result()["contents"][0]["text"].as_str().is_some_and(|t| t.starts_with("# 1. Record")),
        "{}",
        nested.raw
    );

    for (uri, wanted) in [
        ("conveyor://roots/repo/../../etc/passwd", "holds `..`"),
        ("conveyor://roots/repo/docs/../../../etc/passwd", "holds `..`"),
        ("conveyor://roots/repo//etc/passwd", "absolute"),
        ("conveyor://roots/repo/leak-file.md", "outside root `repo`"),
        ("conveyor://roots/repo/leak/secret.txt", "outside root `repo`"),
        ("conveyor://roots/elsewhere/README.md", "elsewhere"),
    ] {
        let reply = read_resource(&s.mcp, uri).await;
        assert!(reply.error_code().is_some(), "{uri} must be refused: {}", reply.raw);
        let message = reply.message["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(wanted), "{uri}: {message:?} does not say {wanted:?}");
        assert!(
            !reply.raw.contains(&secret) && !reply.raw.contains("root:x:0:0"),
            "{uri} leaked: {}",
            reply.raw
        );
    }
}

/// A cargo test run in which one test fails at `src/retry.rs:3`, as a check prints it.
const FAILING_UNIT_RUN: &str = "cat <<'OUT'
running 2 tests
test retry::tests::backoff_doubles ... FAILED
test retry::tests::first_delay ... ok

failures:

---- retry::tests::backoff_doubles stdout ----

thread 'retry::tests::backoff_doubles' panicked at src/retry.rs:3:5:
assertion failed: backoff grew too fast

failures:
    retry::tests::backoff_doubles

test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out
OUT
exit 101
";

#[tokio::test]
async fn troubleshoot_cites_the_failing_test_the_code_and_the_decision() {
    let tree = TempTree::new("troubleshoot");
    let app = &tree.0;
    write(
        app,
        "src/retry.rs",
        "/// The delay before a retry.\npub fn backoff_ms(attempt: u32) -> u64 {\n    200 << attempt\n}\n",
    );
    write(app, "src/queue.rs", "/// Queues hold work.\npub struct Queue;\n");
    for i in 0..20 {
        write(app, &format!("src/filler{i}.rs"), &format!("pub fn helper{i}() -> u32 {{ {i} }}\n"));
    }
    write(
        app,
        "docs/adr/0001-retry-with-exponential-backoff.md",
        "# 1. Retry with exponential backoff\n\nDate: 2024-01-01\n\n## Status\n\nAccepted\n\n## Context\n\nFixed delays made retries hammer the queue.\n\n## Decision\n\nA retry waits an exponential backoff that grows with each attempt.\n\n## Consequences\n\nRecovery is slower.\n",
    );
    write(app, "unit.sh", FAILING_UNIT_RUN);
    let tools = app.join("conveyor-tools.toml");
    std::fs::write(
        &tools,
        "[readiness.ci]\n[[readiness.ci.check]]\nname = \"unit\"\nargv = [\"sh\", \"unit.sh\"]\nroot = \"app\"\nreport = \"cargo\"\n",
    )
    .expect("tools file");
    let s = stack(
        &["--root", &root_arg("app", app), "--tools-file", &tools.display().to_string()],
        "troubleshoot",
    )
    .await;
    let run = run_ok(&s.mcp, "deployment_readiness", json!({"profile": "ci"}), Duration::from_secs(60)).await;
    assert_eq!(run["structuredContent"]["ready"], false, "{run}");

    let failure = "thread 'retry::tests::backoff_doubles' panicked at src/retry.rs:3:5:\nassertion failed: backoff grew too fast";
    let result =
        run_ok(&s.mcp, "troubleshoot", json!({"root": "app", "failure": failure}), Duration::from_secs(60))
            .await;
    let found = &result["structuredContent"];
    // Where the log points, read from the root.
    assert_eq!(found["locations"][0]["path"], "src/retry.rs", "{found}");
    assert_eq!(found["locations"][0]["line"], 3, "{found}");
    // The failing test from the readiness history, named by the log.
    let failing = &found["failingTests"][0];
    assert_eq!(failing["test"], "retry::tests::backoff_doubles", "{found}");
    assert_eq!(
        (failing["check"].as_str(), failing["profile"].as_str()),
        (Some("unit"), Some("ci")),
        "{found}"
    );
    assert_eq!(failing["mentioned"], true, "{found}");
    // The decision that bears on it, from the ADR folder.
    let adrs: Vec<&str> =
        found["adrs"].as_array().into_iter().flatten().filter_map(|e| e["path"].as_str()).collect();
    assert_eq!(adrs.first(), Some(&"docs/adr/0001-retry-with-exponential-backoff.md"), "{found}");
    // The plan: reproduce the test, read the code it points at, keep to the decision, verify.
    let plan = found["plan"].as_array().expect("a plan");
    let steps: Vec<&str> = plan.iter().filter_map(|p| p["step"].as_str()).collect();
    assert_eq!(steps.first(), Some(&"reproduce"), "{found}");
    assert_eq!(steps.last(), Some(&"verify"), "{found}");
    assert_eq!(plan[0]["cites"], json!(["unit::retry::tests::backoff_doubles"]), "{found}");
    assert!(
        plan.iter().any(|p| p["step"] == "inspect" && p["cites"] == json!(["src/retry.rs:3"])),
        "{found}"
    );
    assert!(
        plan.iter().any(|p| p["step"] == "check-decision"
            && p["cites"][0]
                .as_str()
                .is_some_and(|c| c.starts_with("docs/adr/0001-retry-with-exponential-backoff.md:"))),
        "{found}"
    );
    assert!(plan.last().is_some_and(|p| p["action"].as_str().is_some_and(|a| a.contains("`ci`"))), "{found}");
    let text = text_of(&result);
    assert!(text.contains("src/retry.rs:3") && text.contains("retry::tests::backoff_doubles"), "{text}");

    // A log that names nothing searchable is refused with a clear error.
    let refused = refusal(&s.mcp, "troubleshoot", json!({"root": "app", "failure": "  12 34 "})).await;
    assert!(refused.contains("names nothing to search for"), "{refused}");
}

#[tokio::test]
async fn validate_adrs_asks_the_clients_model_to_review_each_record() {
    let repo = workspace_root();
    let s = stack(&["--root", &root_arg("repo", &repo)], "validate_adrs").await;
    let capabilities = sampling_client();
    let task = start(
        &s.mcp,
        "validate_adrs",
        json!({"root": "repo", "path": "tests/fixtures/adrs", "review": true}),
        capabilities.clone(),
    )
    .await
    .unwrap_or_else(|reply| panic!("refused: {}", reply.raw));
    let asked = wait_status(&s.mcp, &task, "input_required", &capabilities, Duration::from_secs(60)).await;
    let requests = asked["inputRequests"].as_object().expect("input requests");
    // One review per ADR of the fixture set (README.md is not one).
    assert_eq!(requests.len(), 16, "{asked}");
    let mut answers = serde_json::Map::new();
    for (key, request) in requests {
        assert_eq!(request["method"], "sampling/createMessage", "{asked}");
        let prompt = request["params"]["messages"][0]["content"]["text"].as_str().expect("a prompt");
        let path =
            prompt.split('(').nth(1).and_then(|p| p.split(')').next()).expect("the prompt names its file");
        answers.insert(
            key.clone(),
            json!({"role": "assistant", "content": {"type": "text", "text": format!("- {path} reads clearly.")}, "model": "reviewer"}),
        );
    }
    let reply = s
        .mcp
        .call_2026("tasks/update", json!({"taskId": task, "inputResponses": answers}), capabilities.clone())
        .await
        .expect("tasks/update");
    assert!(reply.error_code().is_none(), "{}", reply.raw);
    let done = wait_status(&s.mcp, &task, "completed", &capabilities, Duration::from_secs(60)).await;
    let report = &done["result"]["structuredContent"];
    let reviews = report["reviews"].as_array().expect("reviews");
    assert_eq!(reviews.len(), 16, "{report}");
    for review in reviews {
        let path = review["path"].as_str().expect("a path");
        assert_eq!(review["review"], format!("- {path} reads clearly."), "{report}");
    }
    // The findings are the same as without a review.
    assert_eq!(report["summary"]["errors"], 8, "{report}");
    assert!(text_of(&done["result"]).contains("Review by the client's model"), "{done}");
}
