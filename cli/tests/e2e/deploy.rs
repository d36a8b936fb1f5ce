//! The deployment files (docker-compose.yml, deploy/): real validators accept them and refuse
//! broken copies of them (deploy/validate.sh), and the compose topology runs with real processes:
//! a redis-server with deploy/redis/redis.conf (AOF), two gateways with the compose file's
//! settings and tokens file, three workers in the compose file's two pools over the sample root,
//! and nginx with deploy/nginx/conveyor.conf in front of the gateways.
//!
//! No Docker engine runs here: the test runs the same programs and configuration files as the
//! compose services, as processes on free ports.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use conveyor_tests::mcp::create_2025;
use conveyor_tests::process::{conveyor_bin, output_text, scratch_dir, server_port, workspace_root};
use conveyor_tests::{Conveyor, Mcp};
use serde_json::{Value, json};

/// The demo token of deploy/conveyor/tokens.toml (docs/deploy.md).
const DEMO_TOKEN: &str = "cvt_demo_compose_token_replace_me";
/// docker-compose.yml's worker pools.
const RESEARCH_POOL: &str = "research,plan_adr,troubleshoot,troubleshoot_feedback";
const CHECKS_POOL: &str = "validate_adrs,adr_todo,deployment_readiness";

fn validate(tree: &Path) -> Output {
    Command::new("bash")
        .arg(workspace_root().join("deploy").join("validate.sh"))
        .arg(tree)
        .stdin(Stdio::null())
        .output()
        .expect("bash runs deploy/validate.sh")
}

#[test]
fn the_deployment_files_pass_real_validators() {
    let started = Instant::now();
    let output = validate(&workspace_root());
    let text = output_text(&output);
    println!("{text}\n(deploy/validate.sh took {:.1?})", started.elapsed());
    assert!(output.status.success(), "deploy/validate.sh failed:\n{text}");
    assert!(text.contains("all deployment files are valid"), "{text}");
}

/// A copy of the deployment files in a directory of its own.
fn copy_tree(name: &str) -> PathBuf {
    let root = workspace_root();
    let dir = scratch_dir(&format!("deploy-broken-{name}"));
    for file in ["docker-compose.yml", ".dockerignore"] {
        std::fs::copy(root.join(file), dir.join(file)).expect("copy");
    }
    copy_dir(&root.join("deploy"), &dir.join("deploy"));
    dir
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// Replaces the first `from` in a file of the copy, which must hold it.
fn break_file(tree: &Path, file: &str, from: &str, to: &str) {
    let path = tree.join(file);
    let text = std::fs::read_to_string(&path).expect("read");
    assert!(text.contains(from), "{file} no longer holds {from:?}: update this test");
    std::fs::write(&path, text.replacen(from, to, 1)).expect("write");
}

/// Breakages of a copy of the deployment files: (what breaks, file, text, replacement, the check
/// that must fail).
const BREAKAGES: &[(&str, &str, &str, &str, &str)] = &[
    (
        "compose-key",
        "docker-compose.yml",
        "    healthcheck:\n      test: [\"CMD\", \"redis-cli\", \"ping\"]",
        "    healthchek:\n      test: [\"CMD\", \"redis-cli\", \"ping\"]",
        "FAIL docker-compose.yml: Docker Compose v2",
    ),
    (
        "k8s-field",
        "deploy/k8s/gateway.yaml",
        "readOnlyRootFilesystem: true",
        "readOnlyRootFileSystem: true",
        "FAIL deploy/k8s: built-in kinds",
    ),
    (
        "kustomization",
        "deploy/k8s/kustomization.yaml",
        "  - keda-trigger-auth.yaml",
        "  - keda-trigger-authentication.yaml",
        "kubectl kustomize refused it",
    ),
    (
        "keda-metadata",
        "deploy/k8s/worker-research.yaml",
        "pendingEntriesCount: \"12\"",
        "pendingEntriesCount: 12",
        "FAIL deploy/k8s: KEDA and Prometheus Operator kinds",
    ),
    (
        "keda-shards",
        "deploy/k8s/configmap.yaml",
        "CONVEYOR_SHARDS: \"16\"",
        "CONVEYOR_SHARDS: \"32\"",
        "FAIL deploy/k8s: probes, grace periods",
    ),
    (
        "alert-promql",
        "deploy/prometheus/alerts.yml",
        "expr: max(conveyor_redis_up) == 0",
        "expr: max(conveyor_redis_up) ==",
        "could not parse expression",
    ),
    (
        "dashboard-json",
        "deploy/grafana/dashboards/conveyor.json",
        "\"panels\": [",
        "\"panels\": [[",
        "FAIL yaml, json and toml parse",
    ),
    (
        "dockerfile-user",
        "deploy/Dockerfile",
        "USER 10001:10001",
        "USER root",
        "FAIL deploy/Dockerfile: BuildKit",
    ),
    (
        "nginx",
        "deploy/nginx/conveyor.conf",
        "proxy_buffering off;",
        "proxy_buffering of;",
        "nginx -t refused it",
    ),
    (
        "redis-conf",
        "deploy/redis/redis.conf",
        "\nappendfsync everysec\n",
        "\nappendfsync sometimes\n",
        "redis-server refused the file",
    ),
];

#[test]
fn broken_copies_of_the_deployment_files_are_refused() {
    // The validators are installed once, before the copies are checked side by side.
    assert!(validate(&workspace_root()).status.success(), "the unbroken files must pass first");
    let started = Instant::now();
    // Three copies at a time: each validation runs a dozen programs.
    for batch in BREAKAGES.chunks(3) {
        let runs: Vec<_> = batch
            .iter()
            .map(|&(name, file, from, to, expected)| {
                let tree = copy_tree(name);
                break_file(&tree, file, from, to);
                std::thread::spawn(move || (name, expected, validate(&tree)))
            })
            .collect();
        for run in runs {
            let (name, expected, output) = run.join().expect("a validation thread");
            let text = output_text(&output);
            assert!(!output.status.success(), "{name}: the broken copy passed:\n{text}");
            assert!(text.contains(expected), "{name}: expected `{expected}` among the failures:\n{text}");
            let failed: Vec<String> = text
                .lines()
                .filter(|l| l.starts_with("FAIL"))
                .map(|l| l.chars().take(110).collect())
                .collect();
            println!("{name}: refused by {} check(s):\n  {}", failed.len(), failed.join("\n  "));
        }
    }
    println!("{} broken copies checked in {:.1?}", BREAKAGES.len(), started.elapsed());
}

/// The tools file the Kubernetes ConfigMap carries: a real worker loads it, and offers the
/// readiness tool it declares.
#[tokio::test]
async fn the_kubernetes_tools_file_loads_in_a_worker() {
    let manifest =
        std::fs::read_to_string(workspace_root().join("deploy/k8s/configmap.yaml")).expect("configmap");
    let mut lines = manifest.lines().skip_while(|l| l.trim() != "tools.toml: |").skip(1);
    let mut toml = String::new();
    for line in lines.by_ref().take_while(|l| l.is_empty() || l.starts_with("    ")) {
        toml.push_str(line.strip_prefix("    ").unwrap_or(line));
        toml.push('\n');
    }
    assert!(toml.contains("[readiness."), "configmap.yaml's tools.toml: {toml}");
    let dir = scratch_dir("deploy-k8s-tools");
    std::fs::write(dir.join("tools.toml"), &toml).expect("write");
    std::fs::create_dir_all(dir.join("repo/docs/adr")).expect("mkdir");
    let redis = conveyor_tests::RedisServer::start().expect("redis");
    let tools_file = dir.join("tools.toml");
    let root = format!("repo={}", dir.join("repo").display());
    let env = [
        ("CONVEYOR_TOOLS", CHECKS_POOL),
        ("CONVEYOR_TOOLS_FILE", tools_file.to_str().expect("utf-8 path")),
        ("CONVEYOR_ROOTS", root.as_str()),
    ];
    let worker = Conveyor::with_env("worker", &redis.url(), &[], &env).expect("worker");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let workers = conveyor_json(&redis.url(), &["redis", "workers"]);
        if workers.to_string().contains("\"deployment_readiness\"") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the worker never offered deployment_readiness:\n{}",
            worker.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// ---- the topology, with real processes ---------------------------------------------------------

/// A process killed (SIGTERM, then SIGKILL) when dropped.
struct Process {
    child: Child,
    name: &'static str,
}

impl Process {
    fn stop(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            println!("stopping {}", self.name);
            self.stop();
        }
    }
}

/// redis-server with deploy/redis/redis.conf, as the compose file runs it (the port, address and
/// directory given on the command line).
fn start_redis(dir: &Path) -> (Process, String) {
    let port = server_port();
    let log = std::fs::File::create(dir.join("redis.log")).expect("log");
    let child = Command::new("redis-server")
        .arg(workspace_root().join("deploy/redis/redis.conf"))
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--dir"])
        .arg(dir)
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("redis-server must be on PATH");
    let process = Process { child, name: "redis-server" };
    let url = format!("redis://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let ping = redis::Client::open(url.as_str())
            .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
            .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c));
        if ping.is_ok() {
            return (process, url);
        }
        assert!(Instant::now() < deadline, "redis-server with deploy/redis/redis.conf did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn nginx_program() -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).map(|d| d.join("nginx")).find(|p| p.is_file()))
        .unwrap_or_default();
    on_path.unwrap_or_else(|| PathBuf::from("/usr/sbin/nginx"))
}

/// nginx with deploy/nginx/conveyor.conf, the gateways' names replaced by their addresses, its
/// public port by a free one, and its access log written to a file.
fn start_nginx(dir: &Path, gateways: &[&str; 2]) -> (Process, u16, PathBuf) {
    let port = server_port();
    let conf =
        std::fs::read_to_string(workspace_root().join("deploy/nginx/conveyor.conf")).expect("nginx conf");
    let access_log = dir.join("access.log");
    let local = conf
        .replacen("server gateway-1:8080", &format!("server {}", gateways[0]), 1)
        .replacen("server gateway-2:8080", &format!("server {}", gateways[1]), 1)
        .replacen("listen 8080;", &format!("listen 127.0.0.1:{port};"), 1)
        .replacen(
            "access_log /dev/stdout conveyor;",
            &format!("access_log {} conveyor;", access_log.display()),
            1,
        );
    assert!(
        !local.contains("gateway-1:") && !local.contains("listen 8080"),
        "the test no longer fits the nginx file"
    );
    std::fs::write(dir.join("conveyor.conf"), local).expect("write");
    let d = dir.display();
    std::fs::write(
        dir.join("nginx.conf"),
        format!(
            "daemon off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
             events {{}}\nhttp {{\n  include {d}/conveyor.conf;\n}}\n"
        ),
    )
    .expect("write");
    let child = Command::new(nginx_program())
        .arg("-p")
        .arg(dir)
        .arg("-c")
        .arg(dir.join("nginx.conf"))
        .arg("-e")
        .arg(dir.join("error.log"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("nginx.stderr")).expect("log"))
        .spawn()
        .expect("nginx must be installed (apt-get install nginx-light)");
    let process = Process { child, name: "nginx" };
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "nginx did not start:\n{}",
            std::fs::read_to_string(dir.join("error.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (process, port, access_log)
}

/// `conveyor <args> --json` against the deployment's Redis.
fn conveyor_json(redis_url: &str, args: &[&str]) -> Value {
    let output = Command::new(conveyor_bin())
        .args(args)
        .arg("--json")
        .env("REDIS_URL", redis_url)
        .env("CONVEYOR_SHARDS", "4")
        .output()
        .expect("conveyor runs");
    assert!(output.status.success(), "{}", output_text(&output));
    serde_json::from_slice(&output.stdout).expect("json")
}

async fn result(mcp: &Mcp, task: &str) -> Value {
    let reply = mcp.call_2025("tasks/result", json!({"taskId": task})).await.expect("tasks/result");
    assert!(reply.error_code().is_none(), "task {task}: {}", reply.raw);
    reply.result().clone()
}

/// Which gateway (upstream address) answered each request, from nginx's access log, and how many
/// requests went to a second gateway after the first refused the connection.
fn upstreams(access_log: &Path) -> (BTreeMap<String, usize>, usize) {
    let mut counts = BTreeMap::new();
    let mut retried = 0;
    for line in std::fs::read_to_string(access_log).unwrap_or_default().lines() {
        let Some(rest) = line.split(" upstream=").nth(1) else { continue };
        let tried = rest.split(" upstream_status=").next().unwrap_or_default();
        // "a, b": a refused the connection and b answered; "-": no gateway (the proxy answered).
        if tried.contains(", ") {
            retried += 1;
        }
        let last = tried.rsplit(", ").next().unwrap_or_default().to_owned();
        *counts.entry(last).or_insert(0) += 1;
    }
    (counts, retried)
}

fn metrics_listen_supported() -> bool {
    Command::new(conveyor_bin())
        .args(["worker", "--help"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("--metrics-listen"))
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compose_topology_runs_with_real_processes() {
    the_compose_file_still_says_what_this_test_runs();
    let mut topology = Topology::start();
    let mcp = the_proxy_wants_a_token_and_then_lists_both_pools_tools(&topology).await;
    let tasks = tasks_of_both_pools_complete_through_the_proxy(&mcp).await;
    every_node_ran_on_a_worker_of_the_pool_that_offers_its_tool(&topology, &tasks);
    the_proxy_spreads_the_requests_over_both_gateways(&topology);
    if topology.metrics {
        every_process_serves_its_metrics_on_its_own_listener(&topology).await;
    } else {
        println!("this conveyor has no --metrics-listen yet: worker metrics endpoints not checked");
    }
    the_proxy_keeps_serving_when_a_gateway_dies(&mut topology, &mcp).await;
    redis_keeps_everything_in_its_append_only_file(&topology);
    topology.stop();
}

/// docker-compose.yml still holds the settings this test gives its processes.
fn the_compose_file_still_says_what_this_test_runs() {
    let root = workspace_root();
    let compose = std::fs::read_to_string(root.join("docker-compose.yml")).expect("docker-compose.yml");
    for line in [
        format!("CONVEYOR_TOOLS: {RESEARCH_POOL}"),
        format!("CONVEYOR_TOOLS: {CHECKS_POOL}"),
        "CONVEYOR_ROOTS: sample=/srv/sample".to_owned(),
        "./deploy/sample:/srv/sample:ro".to_owned(),
        "CONVEYOR_TOKENS_FILE: /etc/conveyor/tokens.toml".to_owned(),
        "CONVEYOR_TOOLS_FILE: /etc/conveyor/tools.toml".to_owned(),
        "CONVEYOR_SHARDS: \"4\"".to_owned(),
    ] {
        assert!(
            compose.contains(&line),
            "docker-compose.yml no longer says `{line}`: update this test with it"
        );
    }
}

/// The compose topology's processes, and where they listen.
struct Topology {
    dir: PathBuf,
    redis_url: String,
    gateways: Vec<Conveyor>,
    /// Each gateway's metrics listener (`host:port`), in the order the gateways were started.
    gateway_metrics: Vec<String>,
    /// Each worker with its pool.
    workers: Vec<(&'static str, Conveyor)>,
    worker_metrics: Vec<String>,
    /// The gateways' `host:port`, as nginx's access log names them.
    addresses: Vec<String>,
    /// nginx's base URL.
    proxy: String,
    access_log: PathBuf,
    /// Whether this conveyor has `--metrics-listen`.
    metrics: bool,
    nginx: Process,
    redis: Process,
}

impl Topology {
    /// Redis with deploy/redis/redis.conf, two gateways and three workers with the compose file's
    /// settings, and nginx in front of the gateways.
    fn start() -> Self {
        let root = workspace_root();
        let dir = scratch_dir("deploy-topology");
        let (redis, redis_url) = start_redis(&dir);

        let tokens = root.join("deploy/conveyor/tokens.toml");
        let tools_file = root.join("deploy/conveyor/tools.toml");
        let sample = format!("sample={}", root.join("deploy/sample").display());
        let gateway_env = [
            ("CONVEYOR_SHARDS", "4"),
            ("CONVEYOR_SIGNING_KEY", "a-shared-signing-key-for-the-topology-test"),
            ("CONVEYOR_TOKENS_FILE", tokens.to_str().expect("utf-8 path")),
            ("CONVEYOR_ALLOWED_HOSTS", "localhost"),
            ("CONVEYOR_LOG_FORMAT", "json"),
        ];
        // Each process serves /metrics on a listener of its own (never on a gateway's public port),
        // on a port the kernel picks as it binds it; the process logs where.
        let metrics_listen = "127.0.0.1:0";
        let mut gateways = Vec::new();
        for _ in 0..2 {
            let env: Vec<(&str, &str)> =
                gateway_env.iter().copied().chain([("CONVEYOR_METRICS_LISTEN", metrics_listen)]).collect();
            gateways.push(Conveyor::with_env("gateway", &redis_url, &[], &env).expect("gateway"));
        }
        let metrics = metrics_listen_supported();
        let mut workers = Vec::new();
        for pool in [RESEARCH_POOL, RESEARCH_POOL, CHECKS_POOL] {
            let env = [
                ("CONVEYOR_SHARDS", "4"),
                ("CONVEYOR_TOOLS", pool),
                ("CONVEYOR_ROOTS", sample.as_str()),
                ("CONVEYOR_TOOLS_FILE", tools_file.to_str().expect("utf-8 path")),
                ("CONVEYOR_WORKER_CONCURRENCY", "8"),
                ("CONVEYOR_SHUTDOWN_GRACE_MS", "30000"),
                ("CONVEYOR_LOG_FORMAT", "json"),
                ("CONVEYOR_METRICS_LISTEN", metrics_listen),
            ];
            workers.push((pool, Conveyor::with_env("worker", &redis_url, &[], &env).expect("worker")));
        }
        let metrics_of = |process: &Conveyor| {
            if !metrics {
                return String::new();
            }
            let base = process.wait_metrics_base(Duration::from_secs(30)).expect("a metrics listener");
            base.trim_start_matches("http://").to_owned()
        };
        let gateway_metrics = gateways.iter().map(metrics_of).collect();
        let worker_metrics = workers.iter().map(|(_, worker)| metrics_of(worker)).collect();
        let addresses: Vec<String> =
            gateways.iter().map(|g| g.base.trim_start_matches("http://").to_owned()).collect();
        let (nginx, proxy_port, access_log) = start_nginx(&dir, &[&addresses[0], &addresses[1]]);
        let proxy = format!("http://127.0.0.1:{proxy_port}");
        println!("redis {redis_url}, gateways {addresses:?}, proxy {proxy}, metrics endpoints: {metrics}");
        Self {
            dir,
            redis_url,
            gateways,
            gateway_metrics,
            workers,
            worker_metrics,
            addresses,
            proxy,
            access_log,
            metrics,
            nginx,
            redis,
        }
    }

    /// Stops the workers, then the gateways, then Redis, then nginx.
    fn stop(self) {
        let Self { workers, gateways, mut redis, nginx, .. } = self;
        drop(workers);
        drop(gateways);
        redis.stop();
        drop(nginx);
    }
}

/// Without a token the proxy passes the gateway's 401 on; with the demo token of the tokens file
/// every tool of both pools is listed. The proxy hides `/metrics` and passes `/readyz` on.
/// Returns a client of the proxy with the demo token.
async fn the_proxy_wants_a_token_and_then_lists_both_pools_tools(topology: &Topology) -> Mcp {
    let proxy = &topology.proxy;
    let anonymous = Mcp::new(format!("{proxy}/mcp"));
    let refused = anonymous.call_2025("tools/list", json!({})).await.expect("tools/list");
    assert_eq!(refused.status, 401, "{}", refused.raw);
    let mcp = Mcp::new(format!("{proxy}/mcp")).with_api_key(DEMO_TOKEN);
    // Each gateway learns the workers' tools from Redis on its own: wait until both list them.
    for gateway in &topology.gateways {
        let direct = Mcp::new(gateway.mcp_url()).with_api_key(DEMO_TOKEN);
        for tool in ["research", "troubleshoot", "validate_adrs", "deployment_readiness"] {
            direct.wait_for_tool(tool, Duration::from_secs(30)).await.expect("the pools' tools are listed");
        }
    }
    assert_eq!(mcp.get_status("/metrics").await.expect("GET /metrics"), 404, "the proxy hides /metrics");
    assert_eq!(mcp.get_status("/readyz").await.expect("GET /readyz"), 200);
    mcp
}

/// Tasks of both pools, created through the proxy, complete with what the sample holds. Returns
/// them with their tools.
async fn tasks_of_both_pools_complete_through_the_proxy(mcp: &Mcp) -> Vec<(&'static str, String)> {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for question in ["how are failed jobs retried", "what happens when a worker dies"] {
        tasks.push((
            "research",
            create_2025(mcp, "research", json!({"root": "sample", "question": question})).await,
        ));
    }
    for _ in 0..2 {
        tasks.push((
            "validate_adrs",
            create_2025(mcp, "validate_adrs", json!({"root": "sample", "path": "docs/adr"})).await,
        ));
    }
    tasks.push((
        "deployment_readiness",
        create_2025(mcp, "deployment_readiness", json!({"profile": "sample"})).await,
    ));
    for (tool, task) in &tasks {
        let result = result(mcp, task).await;
        let structured = &result["structuredContent"];
        match *tool {
            "research" => {
                let evidence = structured["evidence"].as_array().cloned().unwrap_or_default();
                assert!(
                    evidence.iter().any(|e| e["path"].as_str().is_some_and(|p| p.starts_with("src/"))),
                    "research found the sample's code: {result}"
                );
            }
            "validate_adrs" => assert_eq!(structured["summary"]["adrs"], 3, "{result}"),
            _ => assert_eq!(structured["ready"], true, "{result}"),
        }
    }
    println!("{} tasks of both pools completed through the proxy in {:.1?}", tasks.len(), started.elapsed());
    tasks
}

/// A pool's name: the tools its workers offer, steps left out, sorted.
fn pool_name(tools: &str) -> String {
    let mut offered: Vec<&str> = tools.split(',').filter(|t| !t.starts_with("step/")).collect();
    offered.sort_unstable();
    offered.join(",")
}

/// Each node ran on a worker of the pool that offers its task's tool, and that worker offers the
/// node's own tool (the task's tool or one of its steps).
fn every_node_ran_on_a_worker_of_the_pool_that_offers_its_tool(
    topology: &Topology,
    tasks: &[(&str, String)],
) {
    let redis_url = &topology.redis_url;
    let live = conveyor_json(redis_url, &["redis", "workers"]);
    let mut offers = BTreeMap::<String, Vec<String>>::new();
    for worker in live.as_array().expect("workers") {
        let tools = worker["tools"].as_array().expect("tools").iter().filter_map(Value::as_str);
        offers.insert(worker["name"].as_str().expect("name").to_owned(), tools.map(str::to_owned).collect());
    }
    let pool_of: BTreeMap<&String, String> =
        offers.iter().map(|(w, t)| (w, pool_name(&t.join(",")))).collect();
    assert_eq!(pool_of.len(), 3, "three live workers: {live}");
    assert_eq!(pool_of.values().filter(|p| **p == pool_name(RESEARCH_POOL)).count(), 2, "{live}");
    assert_eq!(pool_of.values().filter(|p| **p == pool_name(CHECKS_POOL)).count(), 1, "{live}");
    let mut ran_on = BTreeMap::<String, BTreeSet<String>>::new();
    for (tool, task) in tasks {
        let shown = conveyor_json(redis_url, &["redis", "tasks", "show", task]);
        let pool =
            pool_name(if RESEARCH_POOL.split(',').any(|t| t == *tool) { RESEARCH_POOL } else { CHECKS_POOL });
        let nodes = shown["nodes"].as_array().expect("nodes");
        assert!(!nodes.is_empty(), "{shown}");
        for node in nodes {
            let Some(worker) = node["worker"].as_str() else { continue };
            let node_tool = node["tool"].as_str().unwrap_or_default();
            let offered = offers.get(worker).cloned().unwrap_or_default();
            if !offered.iter().any(|t| t == node_tool) {
                // A built-in graph node (`$builtin` queue, which every worker reads).
                continue;
            }
            assert_eq!(
                pool_of.get(&worker.to_owned()),
                Some(&pool),
                "node {} ({node_tool}) of {tool} task {task} ran on {worker}, outside pool {pool}",
                node["nodeId"]
            );
            ran_on.entry(format!("{pool} ({node_tool})")).or_default().insert(worker.to_owned());
        }
    }
    assert!(ran_on.keys().any(|k| k.starts_with(&pool_name(RESEARCH_POOL))), "{ran_on:?}");
    assert!(ran_on.keys().any(|k| k.starts_with(&pool_name(CHECKS_POOL))), "{ran_on:?}");
    println!("nodes ran on: {ran_on:?}");
}

/// nginx spread the requests over both gateways.
fn the_proxy_spreads_the_requests_over_both_gateways(topology: &Topology) {
    let (spread, _) = upstreams(&topology.access_log);
    println!("requests per gateway through the proxy: {spread:?}");
    for address in &topology.addresses {
        assert!(
            spread.get(address).copied().unwrap_or(0) >= 3,
            "gateway {address} got too few requests: {spread:?}"
        );
    }
}

/// Each gateway serves the deployment's queue gauges on its metrics listener and none on its
/// public one, and each worker serves its health, readiness and metrics endpoints.
async fn every_process_serves_its_metrics_on_its_own_listener(topology: &Topology) {
    let http = reqwest::Client::new();
    for (gateway, listen) in topology.gateways.iter().zip(&topology.gateway_metrics) {
        let text = http.get(format!("http://{listen}/metrics")).send().await.expect("metrics").text().await;
        assert!(text.expect("text").contains("conveyor_tasks_created_total"), "gateway metrics");
        let public = http.get(format!("{}/metrics", gateway.base)).send().await.expect("metrics").status();
        assert_eq!(public.as_u16(), 404, "a gateway's public listener serves no metrics");
    }
    for listen in &topology.worker_metrics {
        for path in ["/healthz", "/readyz", "/metrics"] {
            let status = http.get(format!("http://{listen}{path}")).send().await.expect(path).status();
            assert_eq!(status.as_u16(), 200, "worker {listen}{path}");
        }
    }
}

/// One gateway dies (SIGKILL): the proxy keeps serving, and the survivor answers for a task
/// created before the kill.
async fn the_proxy_keeps_serving_when_a_gateway_dies(topology: &mut Topology, mcp: &Mcp) {
    let before = create_2025(mcp, "validate_adrs", json!({"root": "sample", "path": "docs/adr"})).await;
    let mut killed = topology.gateways.remove(0);
    killed.kill();
    let killed_at = Instant::now();
    let mut answered = 0;
    for i in 0..10 {
        let reply = mcp.call_2025("tools/list", json!({})).await.expect("tools/list after the kill");
        assert!(reply.result()["tools"].is_array(), "request {i} after the kill failed: {}", reply.raw);
        answered += 1;
    }
    assert_eq!(result(mcp, &before).await["structuredContent"]["summary"]["adrs"], 3);
    let after =
        create_2025(mcp, "research", json!({"root": "sample", "question": "how are jobs acknowledged"}))
            .await;
    assert!(result(mcp, &after).await["structuredContent"]["evidence"].is_array());
    let synchronous = mcp
        .call_2025(
            "tools/call",
            json!({"name": "validate_adrs", "arguments": {"root": "sample", "path": "docs/adr"}}),
        )
        .await
        .expect("a synchronous call after the kill");
    assert_eq!(synchronous.result()["structuredContent"]["summary"]["adrs"], 3, "{}", synchronous.raw);
    println!(
        "after the kill of gateway {}: {answered} requests, 2 tasks and a synchronous call served in {:.1?}",
        topology.addresses[0],
        killed_at.elapsed()
    );
    let (spread, retried) = upstreams(&topology.access_log);
    println!(
        "requests per gateway through the proxy, in the end: {spread:?}; {retried} sent on to the \
         other gateway after the dead one refused the connection"
    );
}

/// Redis runs with its append-only file on, and the file holds the writes.
fn redis_keeps_everything_in_its_append_only_file(topology: &Topology) {
    let mut conn = redis::Client::open(topology.redis_url.as_str())
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
        .expect("redis");
    let appendonly: Vec<String> =
        redis::cmd("CONFIG").arg("GET").arg("appendonly").query(&mut conn).expect("CONFIG");
    assert_eq!(appendonly, vec!["appendonly", "yes"]);
    let aof = topology.dir.join("appendonlydir");
    let aof_bytes: u64 = std::fs::read_dir(&aof)
        .expect("the AOF directory")
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum();
    assert!(aof_bytes > 0, "the AOF holds the writes");
    println!("AOF: {aof_bytes} bytes in {}", aof.display());
}
