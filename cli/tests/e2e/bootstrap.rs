//! `adr_bootstrap_validation` and `bootstrap_validation_loop` end to end, on real `conveyor`
//! processes and a real Redis, over a sample project whose ADRs require a config file the root
//! lacks (an example of it sits beside), a build step, and a check that fails until that file
//! exists and prints a secret on its way.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use conveyor_tests::mcp::{Reply, get_2026, settle, tasks_client_capabilities};
use conveyor_tests::process::{free_port, sleep_marker, wait_gone, wait_started};
use conveyor_tests::{Conveyor, Mcp, RedisServer};
use serde_json::{Value, json};

/// The secret the check prints; it must never leave the worker unmasked.
const SECRET: &str = "sk-test-0123456789abcdef0123";

const SETTINGS_ADR: &str = "---\nstatus: accepted\ndate: 2026-11-02\n---\n\n# Settings in one file\n\n## Context and Problem Statement\n\nThe service reads its settings from `config/app.toml`. Start from `config/app.example.toml`.\n\n## Decision Outcome\n\nChosen option: one TOML file.\n\n### Implementation\n\n```sh\n./scripts/build.sh\n```\n\n### Confirmation\n\n```sh\n./scripts/check-config.sh\n```\n";

const LOGS_ADR: &str = "# 2. Logs under build/\n\n## Status\n\nAccepted\n\n## Context\n\nBuilds write a marker.\n\n## Decision\n\nThe build writes `build/out.txt`.\n\n## Consequences\n\nNone.\n\n## Validation\n\n```bash\ntest -s build/out.txt\n```\n";

/// A directory under the system's temporary directory (outside this repository's ignore files),
/// removed when dropped.
struct Sample(PathBuf);

impl Drop for Sample {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn write(dir: &Path, relative: &str, text: &str) {
    let path = dir.join(relative);
    std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
    std::fs::write(&path, text).expect("write");
}

fn executable(dir: &Path, relative: &str, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    write(dir, relative, text);
    std::fs::set_permissions(dir.join(relative), std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// The sample project, and the check's command (`check`), which the cancel test makes hang.
fn sample(name: &str, check: &str) -> Sample {
    let dir = std::env::temp_dir().join(format!(
        "conveyor-bootstrap-{name}-{}-{}",
        std::process::id(),
        free_port()
    ));
    write(&dir, "docs/adr/0001-settings.md", SETTINGS_ADR);
    write(&dir, "docs/adr/0002-logs.md", LOGS_ADR);
    write(&dir, "config/app.example.toml", "port = 8080\n");
    executable(&dir, "scripts/build.sh", "#!/bin/sh\nmkdir -p build\necho built > build/out.txt\n");
    executable(&dir, "scripts/check-config.sh", check);
    Sample(dir)
}

fn check_config() -> String {
    format!("#!/bin/sh\necho \"connecting with API_TOKEN={SECRET}\"\ncat config/app.toml\n")
}

/// The tools file: one scratch profile of root `sample`, its copies under `scratch`.
fn tools_file(dir: &Path, scratch: &Path, extra: &str) -> PathBuf {
    let file = dir.join("tools.toml");
    std::fs::write(
        &file,
        format!(
            "[bootstrap.sample]\nroot = \"sample\"\nscratch_dir = \"{}\"\ntimeout_s = 60\n{extra}",
            scratch.display()
        ),
    )
    .expect("tools file");
    file
}

fn asking_client() -> Value {
    let mut capabilities = tasks_client_capabilities();
    capabilities["elicitation"] = json!({});
    capabilities
}

async fn call(mcp: &Mcp, tool: &str, arguments: Value, capabilities: Value) -> Reply {
    mcp.call_2026("tools/call", json!({"name": tool, "arguments": arguments}), capabilities)
        .await
        .expect("tools/call")
}

async fn start(mcp: &Mcp, tool: &str, arguments: Value) -> String {
    let reply = call(mcp, tool, arguments, asking_client()).await;
    reply.result()["taskId"].as_str().unwrap_or_else(|| panic!("no task: {}", reply.raw)).to_owned()
}

/// Sends the person's answers to the task's pending requests.
async fn answer(mcp: &Mcp, task: &str, responses: serde_json::Map<String, Value>) {
    let reply = mcp
        .call_2026("tasks/update", json!({"taskId": task, "inputResponses": responses}), asking_client())
        .await
        .expect("tasks/update");
    assert!(reply.error_code().is_none(), "{}", reply.raw);
}

/// Answers every approval the task asks with `approve`, until it ends; returns the final
/// `tasks/get` and the approval messages in order.
async fn drive(mcp: &Mcp, task: &str, approve: bool, within: Duration) -> (Value, Vec<String>) {
    let deadline = Instant::now() + within;
    let mut asked = Vec::new();
    loop {
        let got = get_2026(mcp, task, &asking_client()).await;
        match got["status"].as_str().unwrap_or_default() {
            "completed" | "failed" | "cancelled" => return (got, asked),
            "input_required" => {
                let requests = got["inputRequests"].as_object().cloned().unwrap_or_default();
                let mut responses = serde_json::Map::new();
                for (key, request) in requests {
                    asked.push(request["params"]["message"].as_str().unwrap_or_default().to_owned());
                    let field = if key.ends_with("apply") { "apply" } else { "approve" };
                    responses.insert(key, json!({"action": "accept", "content": {field: approve}}));
                }
                answer(mcp, task, responses).await;
            }
            _ => {}
        }
        assert!(Instant::now() < deadline, "the loop did not end within {within:?}: {got}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

struct Stack {
    redis: RedisServer,
    up: Conveyor,
    mcp: Mcp,
    sample: Sample,
    scratch: PathBuf,
}

async fn stack(name: &str, check: &str, extra: &str) -> Stack {
    let sample = sample(name, check);
    let scratch = sample.0.with_extension("scratch");
    std::fs::create_dir_all(&scratch).expect("scratch");
    let tools = tools_file(&scratch, &scratch, extra);
    let redis = RedisServer::start().expect("redis");
    let root = format!("sample={}", sample.0.display());
    let up = Conveyor::up(&redis.url(), &["--root", &root, "--tools-file", &tools.display().to_string()])
        .expect("conveyor up");
    let mcp = Mcp::new(up.mcp_url());
    for tool in ["adr_bootstrap_validation", "bootstrap_validation_loop"] {
        if let Err(e) = mcp.wait_for_tool(tool, Duration::from_secs(30)).await {
            panic!("{e}; log:\n{}", up.log_text());
        }
    }
    Stack { redis, up, mcp, sample, scratch }
}

impl Drop for Stack {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

#[tokio::test]
async fn adr_bootstrap_validation_writes_both_scripts_from_the_adrs_and_lists_the_missing_config() {
    let s = stack("generate", &check_config(), "").await;
    let task = start(&s.mcp, "adr_bootstrap_validation", json!({"root": "sample"})).await;
    let done = settle(&s.mcp, &task, Duration::from_secs(60)).await;
    assert_eq!(done["status"], "completed", "{done}");
    let result = &done["result"];
    let structured = &result["structuredContent"];
    let commands = |list: &str| -> Vec<String> {
        structured[list]
            .as_array()
            .expect("a list")
            .iter()
            .map(|i| i["command"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    assert_eq!(commands("steps"), ["./scripts/build.sh"]);
    assert_eq!(commands("checks"), ["./scripts/check-config.sh", "test -s build/out.txt"]);
    assert_eq!(structured["checks"][1]["source"]["section"], "Validation", "{structured}");
    let missing = structured["missingFiles"].as_array().expect("missing files");
    let paths: Vec<&str> = missing.iter().filter_map(|m| m["path"].as_str()).collect();
    assert_eq!(paths, ["config/app.toml"], "build/out.txt is a build's output, the rest exist: {structured}");
    assert_eq!(missing[0]["severity"], "warning", "only prose names it: {structured}");
    assert_eq!(missing[0]["requiredBy"][0]["adrPath"], "docs/adr/0001-settings.md");
    assert_eq!(missing[0]["template"]["source"]["path"], "config/app.example.toml");

    // Both scripts are resources of the task, and each line of work cites its ADR.
    let uri = format!("conveyor://tasks/{task}/bootstrap.sh");
    assert_eq!(result["content"][1]["resource"]["uri"], uri.as_str());
    let read = s.mcp.call_2025("resources/read", json!({"uri": uri})).await.expect("resources/read");
    let script =
        read.result()["contents"][0]["text"].as_str().unwrap_or_else(|| panic!("{}", read.raw)).to_owned();
    assert!(script.contains("# Step 1 of 1. From ADR 1: Settings in one file (docs/adr/0001-settings.md:19, section \"Implementation\")."), "{script}");
    let validate = result["content"][2]["resource"]["text"].as_str().expect("validate_bootstrap.sh");
    assert!(validate.contains("# Check 2 of 2. From ADR 2: Logs under build/ (docs/adr/0002-logs.md:22, section \"Validation\")."), "{validate}");

    // The scripts do what they say, run by hand at a copy of the root.
    let copy = s.scratch.join("by-hand");
    for (relative, text) in [("bootstrap.sh", script.as_str()), ("validate_bootstrap.sh", validate)] {
        write(&copy, relative, text);
    }
    for file in ["scripts/build.sh", "scripts/check-config.sh"] {
        executable(&copy, file, &std::fs::read_to_string(s.sample.0.join(file)).expect("read"));
    }
    let run = |script: &str| {
        std::process::Command::new("bash").arg(script).current_dir(&copy).output().expect("bash")
    };
    assert!(run("bootstrap.sh").status.success());
    let checked = run("validate_bootstrap.sh");
    let out = String::from_utf8_lossy(&checked.stdout);
    assert!(
        !checked.status.success() && out.contains("FAIL check-1") && out.contains("PASS check-2"),
        "{out}"
    );
}

#[tokio::test]
async fn the_loop_fails_then_learns_the_fix_passes_and_proposes_the_adr_update() {
    let s = stack("loop", &check_config(), "").await;
    let task =
        start(&s.mcp, "bootstrap_validation_loop", json!({"profile": "sample", "maxIterations": 3})).await;
    let (done, asked) = drive(&s.mcp, &task, true, Duration::from_secs(120)).await;
    assert_eq!(done["status"], "completed", "{done}\n{}", s.up.log_text());
    let raw = done.to_string();
    assert!(!raw.contains(SECRET), "the secret leaked into the result: {raw}");
    let report = &done["result"]["structuredContent"];
    assert_eq!(
        (report["success"].as_bool(), report["iterations"].as_u64()),
        (Some(true), Some(2)),
        "{report}"
    );
    assert_eq!(asked.len(), 2, "one approval per iteration run: {asked:?}");
    assert!(
        asked[0].contains("iteration 1 of 3") && asked[0].contains("./scripts/check-config.sh"),
        "{}",
        asked[0]
    );

    // Iteration 1: the check failed, classified and masked, and cites its ADR.
    let first = &report["executions"][0];
    assert_eq!(first["passed"], false, "{first}");
    let failed: Vec<&Value> =
        first["checks"].as_array().expect("checks").iter().filter(|c| c["passed"] == false).collect();
    assert_eq!(failed.len(), 1, "{first}");
    assert_eq!(failed[0]["adr"], "ADR 1: Settings in one file");
    let learning = &report["learnings"][0];
    assert_eq!(learning["category"], "missingFile", "{learning}");
    assert_eq!(learning["adrPath"], "docs/adr/0001-settings.md");
    assert_eq!(learning["seenBefore"], false);
    let evidence = learning["evidence"].to_string();
    assert!(evidence.contains("config/app.toml: No such file or directory"), "{evidence}");
    // Iteration 2 took the known fix and passed.
    let second = &report["executions"][1];
    assert_eq!(second["passed"], true, "{second}");
    assert_eq!(second["fixesApplied"], json!(["config/app.toml"]));
    // Each execution records its environment: whether each program it starts was there.
    assert_eq!(first["environment"]["programs"]["./scripts/check-config.sh"], true, "{first}");
    assert_eq!(first["environment"]["workspace"], "scratch copy");
    // The update names the right ADR and section, as a diff.
    let updates = report["adrUpdates"].as_array().expect("updates");
    assert_eq!(updates.len(), 1, "{report}");
    assert_eq!(
        (updates[0]["adrPath"].as_str(), updates[0]["section"].as_str()),
        (Some("docs/adr/0001-settings.md"), Some("Confirmation"))
    );
    let diff = updates[0]["diff"].as_str().expect("diff");
    assert!(diff.starts_with("--- a/docs/adr/0001-settings.md\n+++ b/docs/adr/0001-settings.md\n"), "{diff}");
    assert!(diff.contains("+- `./scripts/check-config.sh` failed (missingFile): Create config/app.toml from config/app.example.toml. With that done first, it passed."), "{diff}");
    assert_eq!(updates[0]["applied"], false);
    // The root was never touched, and the scratch copies are gone.
    assert!(!s.sample.0.join("config/app.toml").exists() && !s.sample.0.join("build").exists());
    assert_eq!(
        std::fs::read_to_string(s.sample.0.join("docs/adr/0001-settings.md")).expect("adr"),
        SETTINGS_ADR
    );
    assert!(std::fs::read_dir(s.scratch.join("conveyor-bootstrap")).map(|d| d.count()).unwrap_or(0) == 0);

    // Every execution is kept in Redis, unmasked secrets nowhere.
    let mut conn = s.redis.connection().expect("conn");
    let keys: Vec<String> =
        redis::cmd("KEYS").arg("*bootstrap_validation_loop*").query(&mut conn).expect("keys");
    assert_eq!(keys.len(), 1, "{keys:?}");
    let kept: Vec<String> = redis::cmd("LRANGE").arg(&keys[0]).arg(0).arg(-1).query(&mut conn).expect("runs");
    assert_eq!(kept.len(), 2);
    assert!(kept.iter().all(|run| !run.contains(SECRET)));

    // The next task starts from what was learned: it passes at once, with the fix.
    // Named by its root alone: the only profile of that root runs.
    let again = start(&s.mcp, "bootstrap_validation_loop", json!({"root": "sample"})).await;
    let (done, _) = drive(&s.mcp, &again, true, Duration::from_secs(120)).await;
    let report = &done["result"]["structuredContent"];
    assert_eq!(
        (report["success"].as_bool(), report["iterations"].as_u64()),
        (Some(true), Some(1)),
        "{report}"
    );
    assert_eq!(report["executions"][0]["fixesApplied"], json!(["config/app.toml"]));
}

/// Waits for the task to ask, and approves what it asks.
async fn approve_next(mcp: &Mcp, task: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = get_2026(mcp, task, &asking_client()).await;
        if got["status"] == "input_required" {
            let keys: Vec<String> =
                got["inputRequests"].as_object().expect("requests").keys().cloned().collect();
            let responses: serde_json::Map<String, Value> = keys
                .into_iter()
                .map(|k| (k, json!({"action": "accept", "content": {"approve": true}})))
                .collect();
            answer(mcp, task, responses).await;
            return;
        }
        assert!(Instant::now() < deadline, "the task never asked: {got}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn cancelling_the_loop_kills_the_running_check_and_what_it_started() {
    let (child, grandchild) = (sleep_marker(), sleep_marker());
    let s = stack("cancel", &format!("#!/bin/sh\nsleep {grandchild} &\nsleep {child}\n"), "").await;
    let task = start(&s.mcp, "bootstrap_validation_loop", json!({"profile": "sample"})).await;
    approve_next(&s.mcp, &task).await;
    let (child_sleep, grandchild_sleep) = (format!("sleep {child}"), format!("sleep {grandchild}"));
    wait_started(&[&child_sleep, &grandchild_sleep], Duration::from_secs(30), || s.up.log_text()).await;
    // While its nodes run, the task says how far the graph is.
    let running = get_2026(&s.mcp, &task, &asking_client()).await;
    assert_eq!(running["status"], "working", "{running}");
    // (A check that starts sets its own message until the next node settles.)
    let message = running["statusMessage"].as_str().unwrap_or_default();
    assert!(message.ends_with("nodes settled") || message.starts_with("Iteration 1: checking "), "{running}");
    let cancelled = s
        .mcp
        .call_2026("tasks/cancel", json!({"taskId": task}), asking_client())
        .await
        .expect("tasks/cancel");
    assert!(cancelled.error_code().is_none(), "{}", cancelled.raw);
    wait_gone(&format!("sleep {child}"), Duration::from_secs(10)).await;
    wait_gone(&format!("sleep {grandchild}"), Duration::from_secs(10)).await;
    assert_eq!(get_2026(&s.mcp, &task, &asking_client()).await["status"], "cancelled");
    s.redis
        .wait_node_status(&task, "check-1-1", "cancelled", Duration::from_secs(10))
        .await
        .expect("cancelled");
    assert_ne!(s.redis.node_field(&task, "learn-1", "status").as_deref(), Some("completed"));
    // No learnings node or report ran, yet the task's scratch copy is gone: the cancelled node
    // removed it.
    wait_no_copies(&s.scratch, Duration::from_secs(10)).await;
}

/// The task folders under `scratch`'s `conveyor-bootstrap`, by name.
fn copies(scratch: &Path) -> Vec<String> {
    std::fs::read_dir(scratch.join("conveyor-bootstrap"))
        .map(|d| d.filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default()
}

async fn wait_no_copies(scratch: &Path, within: Duration) {
    let deadline = Instant::now() + within;
    while !copies(scratch).is_empty() {
        assert!(Instant::now() < deadline, "scratch copies are left: {:?}", copies(scratch));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_person_who_declines_stops_the_loop_before_anything_runs() {
    let s = stack("decline", &check_config(), "").await;
    let task = start(&s.mcp, "bootstrap_validation_loop", json!({"profile": "sample"})).await;
    let (done, asked) = drive(&s.mcp, &task, false, Duration::from_secs(60)).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(asked.len(), 1, "{asked:?}");
    let report = &done["result"]["structuredContent"];
    assert_eq!(
        (report["success"].as_bool(), report["iterations"].as_u64()),
        (Some(false), Some(0)),
        "{report}"
    );
    assert!(report["stopped"].as_str().unwrap_or_default().contains("did not approve"), "{report}");
    assert_eq!(s.redis.node_field(&task, "run-1", "status").as_deref(), Some("completed"));
    assert!(std::fs::read_dir(s.scratch.join("conveyor-bootstrap")).map(|d| d.count()).unwrap_or(0) == 0);
    let mut conn = s.redis.connection().expect("conn");
    let keys: Vec<String> =
        redis::cmd("KEYS").arg("*bootstrap_validation_loop*").query(&mut conn).expect("keys");
    assert!(keys.is_empty(), "nothing ran, so nothing is remembered: {keys:?}");
}

#[tokio::test]
async fn a_client_without_elicitation_is_refused_at_once() {
    let s = stack("refuse", &check_config(), "").await;
    let reply =
        call(&s.mcp, "bootstrap_validation_loop", json!({"profile": "sample"}), tasks_client_capabilities())
            .await;
    let message =
        reply.message["error"]["message"].as_str().unwrap_or_else(|| panic!("refused: {}", reply.raw));
    assert!(message.contains("elicitation"), "{message}");
    // A profile the operator did not define, or a root that is not the profile's, is refused too.
    for (arguments, expected) in [
        (json!({"profile": "prod"}), "prod"),
        (json!({"profile": "sample", "root": "other"}), "root"),
        (json!({"profile": "sample", "maxIterations": 9}), "maxIterations"),
    ] {
        let reply = call(&s.mcp, "bootstrap_validation_loop", arguments.clone(), asking_client()).await;
        let refused = match reply.result()["taskId"].as_str() {
            Some(task) => settle(&s.mcp, task, Duration::from_secs(30)).await["error"]["message"].to_string(),
            None => reply.raw.clone(),
        };
        assert!(refused.contains(expected), "{arguments}: {refused}");
    }
}

#[tokio::test]
async fn on_a_writable_profile_approved_updates_are_written_into_the_adr() {
    let s = stack("apply", &check_config(), "writable = true\n").await;
    let task = start(
        &s.mcp,
        "bootstrap_validation_loop",
        json!({"profile": "sample", "maxIterations": 2, "updateAdrs": true}),
    )
    .await;
    let (done, asked) = drive(&s.mcp, &task, true, Duration::from_secs(120)).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(asked.len(), 3, "two iterations and the update: {asked:?}");
    assert!(asked[2].contains("docs/adr/0001-settings.md (section \"Confirmation\")"), "{}", asked[2]);
    let update = &done["result"]["structuredContent"]["adrUpdates"][0];
    assert_eq!(update["applied"], true, "{update}");
    let written = std::fs::read_to_string(s.sample.0.join("docs/adr/0001-settings.md")).expect("adr");
    let confirmation = written.find("### Confirmation").expect("kept");
    let learned = written.find("Learned by bootstrap validation on").expect("appended");
    assert!(learned > confirmation, "{written}");
    assert!(written.contains("Create config/app.toml from config/app.example.toml"), "{written}");
}

#[tokio::test]
async fn a_check_whose_worker_is_killed_is_taken_over_and_the_loop_goes_on() {
    // The first run of the check marks that it started and hangs; a run that finds the mark goes
    // on, and fails or passes on the config file like the sample's check.
    let hang = sleep_marker();
    let sample = sample("takeover", "");
    let mark = sample.0.with_extension("started");
    executable(
        &sample.0,
        "scripts/check-config.sh",
        &format!(
            "#!/bin/sh\nif [ ! -e {mark} ]; then touch {mark}; sleep {hang}; fi\ncat config/app.toml\n",
            mark = mark.display()
        ),
    );
    let scratch = sample.0.with_extension("scratch");
    std::fs::create_dir_all(&scratch).expect("scratch");
    let tools = tools_file(&scratch, &scratch, "").display().to_string();
    let root = format!("sample={}", sample.0.display());
    let redis = RedisServer::start().expect("redis");
    let gateway = Conveyor::gateway(&redis.url(), &[]).expect("gateway");
    let mcp = Mcp::new(gateway.mcp_url());
    let args = ["--root", root.as_str(), "--tools-file", tools.as_str(), "--lease-ms", "1500"];
    let mut doomed = Conveyor::worker(&redis.url(), &args).expect("worker");
    mcp.wait_for_tool("bootstrap_validation_loop", Duration::from_secs(30)).await.expect("listed");

    let task =
        start(&mcp, "bootstrap_validation_loop", json!({"profile": "sample", "maxIterations": 2})).await;
    approve_next(&mcp, &task).await;
    wait_started(&[&format!("sleep {hang}")], Duration::from_secs(30), || doomed.log_text()).await;
    let _rescuer = Conveyor::worker(&redis.url(), &args).expect("worker");
    doomed.signal("KILL");
    assert!(doomed.wait_exit(Duration::from_secs(5)), "the worker died");
    // The orphaned sleep of the killed worker's check is not the test's subject.
    let _ = std::process::Command::new("pkill").args(["-f", &format!("sleep {hang}")]).status();

    let (done, _) = drive(&mcp, &task, true, Duration::from_secs(120)).await;
    assert_eq!(done["status"], "completed", "{done}");
    let report = &done["result"]["structuredContent"];
    assert_eq!(
        (report["success"].as_bool(), report["iterations"].as_u64()),
        (Some(true), Some(2)),
        "{report}"
    );
    assert_eq!(report["learnings"][0]["category"], "missingFile", "{report}");
    let attempts: u32 =
        redis.node_field(&task, "check-1-1", "attempt").and_then(|a| a.parse().ok()).unwrap_or(0);
    assert!(attempts >= 2, "the check ran again on the rescuer: attempt {attempts}");
    assert!(copies(&scratch).is_empty(), "the loop's end removed every copy: {:?}", copies(&scratch));
    drop(sample);
    let _ = std::fs::remove_dir_all(&scratch);
    let _ = std::fs::remove_file(&mark);
}

#[tokio::test]
async fn the_python_sdk_runs_both_tools_and_approves_each_iteration() -> anyhow::Result<()> {
    let python = conveyor_tests::python::python_with(&conveyor_tests::python::MCP_1).await?;
    let s = stack("python", &check_config(), "").await;
    let run = conveyor_tests::python::script(&python, "bootstrap_client.py")
        .arg(s.up.mcp_url())
        .arg("sample")
        .arg("sample")
        .arg(SECRET)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(180), run).await??;
    anyhow::ensure!(
        output.status.success(),
        "bootstrap_client.py failed\n{}\n--- conveyor log ---\n{}",
        conveyor_tests::process::output_text(&output),
        s.up.log_text()
    );
    print!("{}", String::from_utf8_lossy(&output.stdout));
    Ok(())
}

#[tokio::test]
async fn a_sampling_clients_model_drafts_the_steps_no_rule_finds_and_each_says_so() {
    let s = stack("draft", &check_config(), "").await;
    write(
        &s.sample.0,
        "docs/adr/0003-tooling.md",
        "# 3. One setup command\n\n## Status\n\nAccepted\n\n## Context\n\nNew machines.\n\n## Decision\n\nA make target.\n\n## Consequences\n\nNone.\n\n## Setup\n\nRun the setup target of the Makefile once per machine.\n",
    );
    let mut capabilities = tasks_client_capabilities();
    capabilities["sampling"] = json!({});
    let reply =
        call(&s.mcp, "adr_bootstrap_validation", json!({"root": "sample"}), capabilities.clone()).await;
    let task = reply.result()["taskId"].as_str().unwrap_or_else(|| panic!("{}", reply.raw)).to_owned();
    let deadline = Instant::now() + Duration::from_secs(60);
    let asked = loop {
        let got = get_2026(&s.mcp, &task, &capabilities).await;
        if got["status"] == "input_required" {
            break got;
        }
        assert!(Instant::now() < deadline, "never asked the model: {got}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let (key, request) = asked["inputRequests"].as_object().and_then(|r| r.iter().next()).expect("a request");
    assert_eq!(request["method"], "sampling/createMessage", "{request}");
    let prompt = request["params"]["messages"][0]["content"]["text"].as_str().expect("a prompt");
    assert!(
        prompt.contains("[1] ADR 3: One setup command (docs/adr/0003-tooling.md), section \"Setup\""),
        "{prompt}"
    );
    let answer = json!({"role": "assistant", "model": "test", "content": {"type": "text", "text": "1: make setup\n2: not a section"}});
    let reply = s
        .mcp
        .call_2026(
            "tasks/update",
            json!({"taskId": task, "inputResponses": {key: answer}}),
            capabilities.clone(),
        )
        .await
        .expect("tasks/update");
    assert!(reply.error_code().is_none(), "{}", reply.raw);
    let done = settle(&s.mcp, &task, Duration::from_secs(60)).await;
    let structured = &done["result"]["structuredContent"];
    assert_eq!(structured["drafted"], 1, "{done}");
    let drafted = structured["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .find(|s| s["origin"] == "drafted")
        .expect("a drafted step");
    assert_eq!(drafted["command"], "make setup");
    let script = done["result"]["content"][1]["resource"]["text"].as_str().expect("bootstrap.sh");
    assert!(
        script.contains(
            "Drafted by the client's model from ADR 3: One setup command (docs/adr/0003-tooling.md:"
        ),
        "{script}"
    );
}

#[tokio::test]
async fn a_scratch_copy_a_killed_worker_left_is_swept_when_a_worker_starts() {
    let hang = sleep_marker();
    let s = sample("sweep", &format!("#!/bin/sh\nsleep {hang}\n"));
    let scratch = s.0.with_extension("scratch");
    std::fs::create_dir_all(&scratch).expect("scratch");
    let tools = tools_file(&scratch, &scratch, "").display().to_string();
    let root = format!("sample={}", s.0.display());
    // Another deployment's copy in the same directory, and a folder no deployment marked.
    let foreign = scratch.join("conveyor-bootstrap/0123456789abcdef0123456789abcdef");
    write(
        &foreign,
        "conveyor-scratch.json",
        r#"{"task":"0123456789abcdef0123456789abcdef","deployment":"another"}"#,
    );
    write(&foreign, "iteration-1/file", "theirs");
    write(&scratch, "conveyor-bootstrap/unmarked/iteration-1/file", "someone's");
    let redis = RedisServer::start().expect("redis");
    let gateway = Conveyor::gateway(&redis.url(), &[]).expect("gateway");
    let mcp = Mcp::new(gateway.mcp_url());
    let args = ["--root", root.as_str(), "--tools-file", tools.as_str()];
    let mut doomed = Conveyor::worker(&redis.url(), &args).expect("worker");
    mcp.wait_for_tool("bootstrap_validation_loop", Duration::from_secs(30)).await.expect("listed");

    let task =
        start(&mcp, "bootstrap_validation_loop", json!({"profile": "sample", "maxIterations": 1})).await;
    approve_next(&mcp, &task).await;
    let sleeping = format!("sleep {hang}");
    wait_started(&[&sleeping], Duration::from_secs(30), || doomed.log_text()).await;
    let copy = scratch.join("conveyor-bootstrap").join(&task);
    assert!(copy.join("iteration-1/scripts/check-config.sh").is_file(), "{:?}", copies(&scratch));
    assert!(copy.join("conveyor-scratch.json").is_file());
    doomed.signal("KILL");
    assert!(doomed.wait_exit(Duration::from_secs(5)), "the worker died");
    // The killed worker's check outlives it; it is this test's to end, by its id.
    for pid in conveyor_tests::process::processes(&sleeping) {
        let _ = std::process::Command::new("kill").args(["-KILL", &pid]).status();
    }
    let cancelled =
        mcp.call_2026("tasks/cancel", json!({"taskId": task}), asking_client()).await.expect("tasks/cancel");
    assert!(cancelled.error_code().is_none(), "{}", cancelled.raw);
    assert!(copy.is_dir(), "no worker was there to remove it");

    let fresh = Conveyor::worker(&redis.url(), &args).expect("worker");
    let deadline = Instant::now() + Duration::from_secs(30);
    while copy.exists() {
        assert!(Instant::now() < deadline, "the copy was not swept:\n{}", fresh.log_text());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(foreign.join("iteration-1/file").is_file(), "another deployment's copy is kept");
    assert!(
        scratch.join("conveyor-bootstrap/unmarked/iteration-1/file").is_file(),
        "an unmarked folder is kept"
    );
    let _ = std::fs::remove_dir_all(&scratch);
}

#[tokio::test]
async fn the_profiles_environment_values_are_masked_in_output_progress_result_and_memory() {
    const KEY: &str = "plain-Value-4821";
    let release = std::env::temp_dir().join(format!("conveyor-bootstrap-release-{}", sleep_marker()));
    let dir =
        std::env::temp_dir().join(format!("conveyor-bootstrap-env-{}-{}", std::process::id(), free_port()));
    let s = Sample(dir.clone());
    write(
        &dir,
        "docs/adr/0001-deploy.md",
        &format!(
            "# 1. Deploy with a key\n\n## Status\n\nAccepted\n\n## Decision\n\nThe deploy key comes from the environment.\n\n## Implementation\n\n```sh\n./scripts/deploy.sh\n```\n\n## Confirmation\n\n```sh\n./scripts/verify.sh {KEY}\n```\n"
        ),
    );
    executable(&dir, "scripts/deploy.sh", "#!/bin/sh\necho \"deploying with $DEPLOY_KEY\"\n");
    executable(
        &dir,
        "scripts/verify.sh",
        &format!(
            "#!/bin/sh\nfor i in $(seq 1 600); do [ -e {release} ] && break; sleep 0.1; done\necho \"deploy key $DEPLOY_KEY was refused\"\nexit 1\n",
            release = release.display()
        ),
    );
    let scratch = dir.with_extension("scratch");
    std::fs::create_dir_all(&scratch).expect("scratch");
    let tools = tools_file(&scratch, &scratch, "env = [\"DEPLOY_KEY\"]\n").display().to_string();
    let root = format!("sample={}", dir.display());
    let redis = RedisServer::start().expect("redis");
    let up = Conveyor::with_env(
        "up",
        &redis.url(),
        &["--root", &root, "--tools-file", &tools],
        &[("DEPLOY_KEY", KEY)],
    )
    .expect("conveyor up");
    let mcp = Mcp::new(up.mcp_url());
    mcp.wait_for_tool("bootstrap_validation_loop", Duration::from_secs(30)).await.expect("listed");

    let task =
        start(&mcp, "bootstrap_validation_loop", json!({"profile": "sample", "maxIterations": 1})).await;
    let asked = get_until(&mcp, &task, |got| got["status"] == "input_required").await;
    let approval = asked["inputRequests"].to_string();
    assert!(approval.contains("./scripts/verify.sh ***") && !approval.contains(KEY), "{approval}");
    approve_next(&mcp, &task).await;
    // The check's progress message names its command, masked.
    let checking = get_until(&mcp, &task, |got| {
        got["statusMessage"].as_str().is_some_and(|m| m.starts_with("Iteration 1: checking"))
    })
    .await;
    assert_eq!(checking["statusMessage"], "Iteration 1: checking ./scripts/verify.sh ***", "{checking}");
    std::fs::write(&release, "").expect("release the check");
    let (done, _) = drive(&mcp, &task, true, Duration::from_secs(120)).await;
    let _ = std::fs::remove_file(&release);
    assert_eq!(done["status"], "completed", "{done}\n{}", up.log_text());
    let raw = done.to_string();
    assert!(!raw.contains(KEY), "the value leaked into the result: {raw}");
    let learning = &done["result"]["structuredContent"]["learnings"][0];
    assert_eq!(learning["requirement"], "./scripts/verify.sh ***", "{learning}");
    assert!(learning["evidence"].to_string().contains("deploy key *** was refused"), "{learning}");

    let mut conn = redis.connection().expect("conn");
    let keys: Vec<String> =
        redis::cmd("KEYS").arg("*bootstrap_validation_loop*").query(&mut conn).expect("keys");
    assert_eq!(keys.len(), 1, "{keys:?}");
    let kept: Vec<String> = redis::cmd("LRANGE").arg(&keys[0]).arg(0).arg(-1).query(&mut conn).expect("runs");
    assert_eq!(kept.len(), 1);
    assert!(kept[0].contains("deploy key *** was refused") && !kept[0].contains(KEY), "{}", kept[0]);
    // Each node's stored result (the bootstrap's and the check's output among them) is masked too.
    let task_key: Vec<String> = redis::cmd("KEYS").arg(format!("*{task}*")).query(&mut conn).expect("keys");
    for key in task_key {
        let kind: String = redis::cmd("TYPE").arg(&key).query(&mut conn).expect("type");
        if kind != "hash" {
            continue;
        }
        let fields: Vec<(String, String)> = redis::cmd("HGETALL").arg(&key).query(&mut conn).expect("hash");
        for (field, value) in fields {
            if field.ends_with("output") || field.ends_with("result") {
                assert!(!value.contains(KEY), "{key} {field}: {value}");
            }
        }
    }
    drop(s);
    let _ = std::fs::remove_dir_all(&scratch);
}

#[tokio::test]
async fn the_generator_reads_only_records_and_what_the_walk_lists() {
    let s = stack("walk", &check_config(), "").await;
    let dir = &s.sample.0;
    write(
        dir,
        "docs/vendor/redis/INSTALL.md",
        "# Redis\n\n## Installation\n\n```sh\ncurl -fsSL https://example.com/install.sh | sh\n```\n\n## Testing\n\n```sh\nmake test\n```\n",
    );
    write(
        dir,
        "docs/adr/0003-local.md",
        "# 3. Local settings\n\n## Status\n\nAccepted\n\n## Decision\n\nEach machine keeps `.env` (with `API_TOKEN`) and `config/local.toml`.\n",
    );
    write(dir, ".gitignore", "config/local.toml.example\n");
    write(dir, ".env.example", "HIDDEN_TEMPLATE_MARKER=1\n");
    write(dir, "config/local.toml.example", "ignored_template_marker = 1\n");
    let task = start(&s.mcp, "adr_bootstrap_validation", json!({"root": "sample", "adrPath": "docs"})).await;
    let done = settle(&s.mcp, &task, Duration::from_secs(60)).await;
    assert_eq!(done["status"], "completed", "{done}");
    let structured = &done["result"]["structuredContent"];
    let commands: Vec<&str> =
        structured["steps"].as_array().expect("steps").iter().filter_map(|s| s["command"].as_str()).collect();
    assert_eq!(commands, ["./scripts/build.sh"], "a vendored install guide gives no step: {structured}");
    let adrs: Vec<&str> =
        structured["adrs"].as_array().expect("adrs").iter().filter_map(|a| a["path"].as_str()).collect();
    assert!(!adrs.iter().any(|a| a.contains("vendor")), "{adrs:?}");
    let raw = done.to_string();
    assert!(!raw.contains("HIDDEN_TEMPLATE_MARKER") && !raw.contains("ignored_template_marker"), "{raw}");
    let missing = structured["missingFiles"].as_array().expect("missing");
    let env = missing.iter().find(|m| m["path"] == ".env").expect(".env is missing");
    assert_eq!(env["template"]["source"]["kind"], "variables", "{env}");
    let local = missing.iter().find(|m| m["path"] == "config/local.toml").expect("local.toml is missing");
    assert!(local["template"].is_null(), "{local}");
}

/// Reads the task until `done` says so.
async fn get_until(mcp: &Mcp, task: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = get_2026(mcp, task, &asking_client()).await;
        if done(&got) {
            return got;
        }
        assert!(Instant::now() < deadline, "never came: {got}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
