//! The web view at `/ui`, in a real browser: Debian's headless Chromium (`/usr/bin/chromium`)
//! driven by `puppeteer-core` from `tests/web/ui.mjs`, against a real `conveyor up --fixtures`
//! with static tokens for two principals and an operator, on a real `redis-server`. This test
//! starts the tasks over MCP, lets the script use the page as a person would, and checks what the
//! script saw against Redis and MCP: the running task listed with its progress moving and no
//! reload, the 20 planned nodes of a fan-out (and the node that planned them) drawn with their
//! states and edges, Cancel ending the task `cancelled`, another principal's task invisible, and
//! the operators' queues, workers and dead letters. Screenshots are kept under
//! `<target>/ui-artifacts/`.
//!
//! Needs `chromium` (`apt-get install -y --no-install-recommends chromium` on Debian) and `npm`
//! with Node.js 18 or newer; `puppeteer-core` is installed once into `<target>/ui-browser/`, and
//! downloads no browser.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use conveyor_gateway::auth::token_digest;
use conveyor_tests::process::{nodes_key, scratch_dir, target_dir, workspace_root};
use conveyor_tests::{Conveyor, Mcp, RedisServer, npm};
use serde_json::{Value, json};

const PUPPETEER: &str = "puppeteer-core";
const PUPPETEER_VERSION: &str = "24.43.1";
const SCRIPT: &str = "ui.mjs";
const CHROMIUM: &str = "/usr/bin/chromium";
/// The script takes about twenty seconds; this only stops a hung browser.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(180);

const ALICE: &str = "alice-web-token-0123456789abcdef";
const BOB: &str = "bob-web-token-9876543210fedcba";
const OPS: &str = "olga-web-token-aaaabbbbccccdddd";

const INSTALL_CHROMIUM: &str = "the web view test needs Debian's Chromium at /usr/bin/chromium: \
     `apt-get install -y --no-install-recommends chromium` (CI's .ci/run installs it)";
const INSTALL_NPM: &str = "the web view test needs npm and Node.js 18 or newer to install and run \
     puppeteer-core: `apt-get install -y nodejs npm` on Debian (CI's .ci/run installs them)";

fn chromium() -> PathBuf {
    let path = PathBuf::from(CHROMIUM);
    let runs = Command::new(&path)
        .args(["--headless=new", "--no-sandbox", "--version"])
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(runs, "cannot run {CHROMIUM}; {INSTALL_CHROMIUM}");
    path
}

/// The system's `node`, checked to be 18 or newer.
fn node() -> PathBuf {
    let output = Command::new("node")
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|error| panic!("cannot run `node` ({error}); {INSTALL_NPM}"));
    let version = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    let major: u32 =
        version.trim_start_matches('v').split('.').next().and_then(|m| m.parse().ok()).unwrap_or(0);
    assert!(major >= 18, "`node --version` says {version:?}; {INSTALL_NPM}");
    PathBuf::from("node")
}

/// Installs puppeteer-core into `<target>/ui-browser` unless it is there at its version, and
/// copies the script next to it so that its `import` finds the package.
fn install() -> PathBuf {
    let dir = target_dir().join("ui-browser");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    let installed = npm::package_version(&dir.join("node_modules").join(PUPPETEER));
    if installed.as_deref() != Some(PUPPETEER_VERSION) {
        let manifest = dir.join("package.json");
        if !manifest.exists() {
            std::fs::write(&manifest, "{\n  \"name\": \"conveyor-ui-browser\",\n  \"private\": true\n}\n")
                .unwrap_or_else(|e| panic!("cannot write {}: {e}", manifest.display()));
        }
        println!("installing {PUPPETEER}@{PUPPETEER_VERSION} into {} ...", dir.display());
        // puppeteer-core downloads nothing and needs no install script: it uses the system browser.
        npm::run(
            &dir,
            &["install", "--save-exact", &format!("{PUPPETEER}@{PUPPETEER_VERSION}")],
            INSTALL_NPM,
        );
        assert_eq!(
            npm::package_version(&dir.join("node_modules").join(PUPPETEER)).as_deref(),
            Some(PUPPETEER_VERSION),
            "npm install succeeded but {PUPPETEER} {PUPPETEER_VERSION} is not in {}",
            dir.display()
        );
    }
    let source = workspace_root().join("tests").join("web").join(SCRIPT);
    std::fs::copy(&source, dir.join(SCRIPT))
        .unwrap_or_else(|e| panic!("cannot copy {} to {}: {e}", source.display(), dir.display()));
    dir
}

/// `conveyor up` with the fixtures, tokens for alice, bob and olga (an operator, by group), and
/// six nodes at a time, so that a 19-wide fan-out runs in rounds and shows every state.
fn up() -> (RedisServer, Conveyor) {
    let redis = RedisServer::start().expect("redis-server starts");
    let dir = scratch_dir("web-ui");
    let entry = |principal: &str, groups: &str, token: &str| {
        format!(
            "[[token]]\nprincipal = \"{principal}\"\ngroups = [{groups}]\nsha256 = \"{}\"\n\n",
            token_digest(token)
        )
    };
    let tokens = dir.join("tokens.toml");
    let text = [entry("alice", "", ALICE), entry("bob", "", BOB), entry("olga", "\"ops\"", OPS)].concat();
    std::fs::write(&tokens, text).expect("tokens file");
    let access = dir.join("access.toml");
    std::fs::write(&access, "operators = [\"group:ops\"]\n").expect("access file");
    let (tokens, access) = (tokens.to_str().expect("path"), access.to_str().expect("path"));
    let conveyor = Conveyor::up(
        &redis.url(),
        &["--fixtures", "--tokens-file", tokens, "--access-file", access, "--concurrency", "6"],
    )
    .expect("conveyor up starts");
    (redis, conveyor)
}

/// A task of the caller over MCP (2025-11-25, `params.task`); its id.
async fn start_task(mcp: &Mcp, tool: &str, arguments: Value) -> String {
    let created = mcp
        .call_2025("tools/call", json!({"name": tool, "arguments": arguments, "task": {}}))
        .await
        .expect("tools/call");
    created.result()["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task: {}", created.raw))
        .to_owned()
}

async fn status_over_mcp(mcp: &Mcp, task: &str) -> String {
    let reply = mcp.call_2025("tasks/get", json!({"taskId": task})).await.expect("tasks/get");
    reply.result()["status"].as_str().unwrap_or_else(|| panic!("no status: {}", reply.raw)).to_owned()
}

/// Every node of a task in Redis, by id, with its status.
fn nodes_in_redis(redis: &RedisServer, task: &str) -> BTreeMap<String, String> {
    let mut conn = redis.connection().expect("redis connection");
    let hash: std::collections::HashMap<String, String> =
        redis::cmd("HGETALL").arg(nodes_key(task)).query(&mut conn).expect("HGETALL");
    hash.into_iter()
        .filter_map(|(field, value)| {
            let node = field.strip_suffix(":status")?;
            (!node.contains('/')).then(|| (node.to_owned(), value))
        })
        .collect()
}

fn is_png(path: &str) -> bool {
    std::fs::read(path).is_ok_and(|bytes| bytes.len() > 10_000 && bytes.starts_with(b"\x89PNG\r\n\x1a\n"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_view_shows_live_tasks_their_graphs_and_cancels_them() {
    let web = Web::start().await;
    let tasks = start_the_tasks_the_page_shows(&web).await;
    let r = the_browser_script_uses_the_page_to_its_end(&web, &tasks).await;
    the_api_wants_a_token_and_knows_alice_for_no_operator(&r);
    the_running_task_is_listed_and_its_progress_moves_without_a_reload(&r, &tasks);
    the_graph_draws_every_node_in_redis_with_its_state_and_edges(&web, &r, &tasks);
    cancel_on_the_page_ends_the_graph_over_mcp_and_in_redis(&web, &r, &tasks).await;
    another_principals_task_is_not_found_and_the_operators_api_is_not_hers(&r);
    the_operator_sees_alices_task_and_the_queues_workers_and_dead_letters(&r, &tasks);
    every_screenshot_is_kept(&r);
    let _ = web.olga.call_2025("tasks/cancel", json!({"taskId": tasks.slow})).await;
}

/// The browser, the script, and `conveyor up` with a client per principal.
struct Web {
    chromium: PathBuf,
    node: PathBuf,
    /// Where puppeteer-core and the script are installed.
    dir: PathBuf,
    alice: Mcp,
    bob: Mcp,
    olga: Mcp,
    conveyor: Conveyor,
    redis: RedisServer,
}

impl Web {
    /// Checks for the browser and Node.js, installs the script, and starts `conveyor up` until it
    /// offers the fixtures.
    async fn start() -> Self {
        let chromium = chromium();
        let node = node();
        let dir = install();
        let (redis, conveyor) = up();
        let alice = Mcp::new(conveyor.mcp_url()).with_api_key(ALICE);
        let bob = Mcp::new(conveyor.mcp_url()).with_api_key(BOB);
        let olga = Mcp::new(conveyor.mcp_url()).with_api_key(OPS);
        alice.wait_for_tool("slow_compute", Duration::from_secs(20)).await.expect("the fixtures are offered");
        Self { chromium, node, dir, alice, bob, olga, conveyor, redis }
    }
}

/// The tasks the page is shown.
struct Tasks {
    /// Bob's, which alice must not see.
    bobs: String,
    /// Bob's node that fails for good, for the dead letters.
    doomed: String,
    /// Alice's minute of computing.
    slow: String,
    /// Alice's fan-out of 19 five-second nodes joined by a 20th.
    dag: String,
}

/// Starts bob's tasks (waiting until the doomed one has failed), then alice's.
async fn start_the_tasks_the_page_shows(web: &Web) -> Tasks {
    let bob = &web.bob;
    let bobs = start_task(bob, "slow_compute", json!({"seconds": 0.2, "label": "bob"})).await;
    let doomed = start_task(bob, "protocol_error_job", json!({})).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while status_over_mcp(bob, &doomed).await != "failed" {
        assert!(Instant::now() < deadline, "protocol_error_job never failed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let slow = start_task(&web.alice, "slow_compute", json!({"seconds": 60, "label": "web view"})).await;
    let dag = start_task(&web.alice, "plan_fanout", json!({"width": 19, "seconds": 5})).await;
    Tasks { bobs, doomed, slow, dag }
}

/// The browser script uses the page as a person would and succeeds; returns what it saw.
async fn the_browser_script_uses_the_page_to_its_end(web: &Web, tasks: &Tasks) -> Value {
    let artifacts = target_dir().join("ui-artifacts");
    let config = json!({
        "base": web.conveyor.base,
        "chromium": web.chromium,
        "artifacts": artifacts,
        "tokens": {"alice": ALICE, "ops": OPS},
        "tasks": {"slow": tasks.slow, "dag": tasks.dag, "bobs": tasks.bobs},
    });
    let started = Instant::now();
    let (node, node_dir) = (web.node.clone(), web.dir.clone());
    let run = tokio::task::spawn_blocking(move || {
        npm::run_script(&node, &node_dir, &[SCRIPT, &config.to_string()], SCRIPT_TIMEOUT, true)
    })
    .await
    .expect("script thread");
    let (success, out, err) = (run.success, run.stdout, run.stderr);
    println!("{SCRIPT} ran in {:?}", started.elapsed());
    let last = out.lines().rev().find_map(|l| serde_json::from_str::<Value>(l).ok()).unwrap_or(Value::Null);
    assert!(
        success && last.get("result").is_some(),
        "the browser script failed\n--- stdout ---\n{out}\n--- stderr ---\n{err}\n--- conveyor log (tail) ---\n{}",
        web.conveyor
            .log_text()
            .lines()
            .rev()
            .take(40)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n")
    );
    last["result"].clone()
}

/// Without a token the API answers 401 with the same challenge as /mcp; with hers, the page
/// knows alice, and shows her no operators' tab.
fn the_api_wants_a_token_and_knows_alice_for_no_operator(r: &Value) {
    assert_eq!(r["unauthenticated"]["status"], 401, "{r}");
    assert!(
        r["unauthenticated"]["challenge"]
            .as_str()
            .is_some_and(|c| c.starts_with("Bearer resource_metadata=")),
        "{r}"
    );
    assert_eq!(r["principal"], "alice");
    assert_eq!(r["operatorsTabShown"], false, "alice is no operator");
}

/// The running task is listed (bob's is not), and its progress moved between two readings a
/// second apart, in the same document.
fn the_running_task_is_listed_and_its_progress_moves_without_a_reload(r: &Value, tasks: &Tasks) {
    let listed: Vec<&str> =
        r["aliceList"].as_array().expect("list").iter().filter_map(|t| t["taskId"].as_str()).collect();
    assert!(listed.contains(&tasks.slow.as_str()) && listed.contains(&tasks.dag.as_str()), "{listed:?}");
    assert!(!listed.contains(&tasks.bobs.as_str()), "alice's list holds bob's task: {listed:?}");
    let progress = &r["progress"];
    let (first, second) =
        (progress["first"].as_f64().expect("first"), progress["second"].as_f64().expect("second"));
    assert!(second > first, "the progress did not move: {progress}");
    assert_eq!(
        progress["after"]["marker"], "set-before-the-first-reading",
        "the page was replaced: {progress}"
    );
    assert_eq!(
        progress["before"]["timeOrigin"], progress["after"]["timeOrigin"],
        "the page reloaded: {progress}"
    );
    assert_eq!(progress["before"]["loads"], progress["after"]["loads"], "the page reloaded: {progress}");
    assert_eq!(progress["after"]["navigations"], 1, "{progress}");
}

/// The graph: one box per node in Redis (the 20 planned nodes and the node that planned them),
/// each with a state; an edge from each part to the join, and from the planner to each part.
fn the_graph_draws_every_node_in_redis_with_its_state_and_edges(web: &Web, r: &Value, tasks: &Tasks) {
    let drawn = r["dag"]["nodes"].as_array().expect("nodes");
    let stored = nodes_in_redis(&web.redis, &tasks.dag);
    let drawn_ids: Vec<&str> = drawn.iter().filter_map(|n| n["nodeId"].as_str()).collect();
    assert_eq!(drawn.len(), 21, "{drawn_ids:?}");
    assert_eq!(
        drawn_ids.iter().copied().collect::<std::collections::BTreeSet<_>>(),
        stored.keys().map(String::as_str).collect(),
    );
    let planned: Vec<&Value> = drawn.iter().filter(|n| n["planner"] != true).collect();
    assert_eq!(planned.len(), 20, "20 planned nodes: {drawn_ids:?}");
    let planner: Vec<&Value> = drawn.iter().filter(|n| n["planner"] == true).collect();
    assert_eq!(planner.len(), 1, "{drawn_ids:?}");
    assert_eq!(planner[0]["nodeId"], "root");
    let known = ["pending", "queued", "running", "completed"];
    for n in drawn {
        let status = n["status"].as_str().unwrap_or_default();
        assert!(known.contains(&status), "a running graph's node is {status}: {n}");
        let text = n["text"].as_str().unwrap_or_default();
        assert!(text.contains(n["nodeId"].as_str().unwrap_or("?")), "the box names its node: {n}");
        if status == "completed" && n["planner"] != true {
            assert!(text.contains("1 attempt") && text.contains(" s"), "attempts and duration shown: {n}");
        }
    }
    let count = |status: &str| drawn.iter().filter(|n| n["status"] == status).count();
    assert!(count("running") >= 1, "a node runs while the graph is drawn: {}", r["dag"]);
    assert!(planned.iter().any(|n| n["status"] == "completed"), "a part is done: {}", r["dag"]);
    assert!(count("queued") + count("pending") >= 1, "some nodes wait: {}", r["dag"]);
    let edges = r["dag"]["edges"].as_array().expect("edges");
    let dependency_edges = edges.iter().filter(|e| e["planned"] == false).count();
    let planned_edges = edges.iter().filter(|e| e["planned"] == true).count();
    assert_eq!(dependency_edges, 19, "each part leads to the join: {edges:?}");
    assert!(edges.iter().filter(|e| e["planned"] == false).all(|e| e["to"] == "join"), "{edges:?}");
    assert_eq!(planned_edges, 19, "the planner leads to each part: {edges:?}");
    assert_eq!(r["dag"]["cancelShown"], true);
}

/// Cancel from the page: cancelled on the page, over MCP, and in Redis no node is left running;
/// the cancel is audited, and alice's other task runs on.
async fn cancel_on_the_page_ends_the_graph_over_mcp_and_in_redis(web: &Web, r: &Value, tasks: &Tasks) {
    let dag = &tasks.dag;
    assert_eq!(r["cancelled"]["status"], "cancelled", "{}", r["cancelled"]);
    assert_eq!(r["cancelled"]["listStatus"], "cancelled", "the list follows: {}", r["cancelled"]);
    assert_eq!(r["cancelled"]["cancelShown"], false, "a finished task has no Cancel button");
    assert_eq!(status_over_mcp(&web.alice, dag).await, "cancelled");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let nodes = nodes_in_redis(&web.redis, dag);
        if !nodes.values().any(|s| s == "running" || s == "queued") {
            assert!(nodes.values().any(|s| s == "cancelled"), "{nodes:?}");
            break;
        }
        assert!(Instant::now() < deadline, "nodes still run after the cancel: {nodes:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = web.conveyor.log_text();
    assert!(
        log.lines().any(|l| l.contains("conveyor::audit") && l.contains("task_cancelled") && l.contains(dag)),
        "the cancel is in the audit log"
    );
    assert_eq!(status_over_mcp(&web.alice, &tasks.slow).await, "working", "only the graph was cancelled");
}

/// Another principal's task is "not found", as an unknown one is; the operators' API is not hers.
fn another_principals_task_is_not_found_and_the_operators_api_is_not_hers(r: &Value) {
    assert_eq!(r["othersTask"]["shown"], "Not found", "{}", r["othersTask"]);
    assert_eq!(r["othersTask"]["api"], 404);
    assert_eq!(r["othersTask"]["unknownApi"], 404);
    assert_eq!(r["othersTask"]["operatorsApi"], 403);
}

/// The operator sees alice's running task, and queues, workers and dead letters.
fn the_operator_sees_alices_task_and_the_queues_workers_and_dead_letters(r: &Value, tasks: &Tasks) {
    let operator = &r["operator"];
    assert_eq!(operator["principal"], "olga");
    assert_eq!(operator["tabShown"], true);
    let theirs: Vec<&str> =
        operator["list"].as_array().expect("list").iter().filter_map(Value::as_str).collect();
    assert!(theirs.contains(&tasks.slow.as_str()), "the operator lists alice's live task: {theirs:?}");
    let queues = operator["queues"].as_array().expect("queues");
    assert!(
        queues.iter().any(|q| q["queue"] == "slow_compute" && q["busy"] == true),
        "alice's running node is in the slow_compute queue: {queues:?}"
    );
    assert!(queues.iter().any(|q| q["queue"] == "plan_fanout"), "idle queues are listed too: {queues:?}");
    assert!(
        operator["workers"].as_array().expect("workers").iter().any(|w| w["live"] == "true"),
        "{operator}"
    );
    let letters = operator["deadLetters"].as_array().expect("dead letters");
    assert!(
        letters.iter().any(|l| l["taskId"] == tasks.doomed.as_str()
            && l["text"].as_str().is_some_and(|t| t.contains("protocol_error_job"))),
        "{letters:?}"
    );
}

/// Each of the script's screenshots is a PNG on disk.
fn every_screenshot_is_kept(r: &Value) {
    for name in ["ui-list", "ui-dag", "ui-cancelled", "ui-operators"] {
        let path = r["screenshots"][name].as_str().unwrap_or_else(|| panic!("no {name} screenshot: {r}"));
        assert!(is_png(path), "{path} is not a screenshot");
        println!("screenshot: {path}");
    }
}
