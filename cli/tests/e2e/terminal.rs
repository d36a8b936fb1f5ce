//! The terminal client as a person uses it: `conveyor call` and `conveyor tasks` against a real
//! `conveyor up` on a real `redis-server`, with static tokens. Under tmux (a real terminal): the
//! progress bar moves, Ctrl-C cancels the task and it ends `cancelled`, and a question is answered
//! by keystrokes. Through pipes: plain lines without colours, the exit codes scripts read, and
//! `tasks ls|show|watch|cancel` seeing only the caller's tasks.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use conveyor_gateway::auth::token_digest;
use conveyor_tests::process::{conveyor_bin, output_text, scratch_dir, task_key};
use conveyor_tests::{Conveyor, RedisServer};
use serde_json::Value;

const ALICE: &str = "alice-terminal-token-0123456789";
const BOB: &str = "bob-terminal-token-9876543210";

/// A Redis and a `conveyor up --fixtures` with two principals' tokens, polled every 200 ms.
struct Stack {
    conveyor: Conveyor,
    redis: RedisServer,
}

fn stack(name: &str) -> Stack {
    let redis = RedisServer::start().expect("redis-server starts");
    let dir = scratch_dir(name);
    let tokens = dir.join("tokens.toml");
    let entry = |principal: &str, token: &str| {
        format!(
            "[[token]]\nprincipal = \"{principal}\"\ngroups = []\nsha256 = \"{}\"\n\n",
            token_digest(token)
        )
    };
    std::fs::write(&tokens, entry("alice", ALICE) + &entry("bob", BOB)).expect("tokens file");
    let conveyor = Conveyor::up(
        &redis.url(),
        &["--fixtures", "--tokens-file", tokens.to_str().expect("path"), "--poll-interval-ms", "200"],
    )
    .expect("conveyor up starts");
    Stack { conveyor, redis }
}

impl Stack {
    fn status(&self, task_id: &str) -> String {
        let mut conn = self.redis.connection().expect("redis connection");
        redis::cmd("HGET")
            .arg(task_key(task_id))
            .arg("status")
            .query::<Option<String>>(&mut conn)
            .ok()
            .flatten()
            .unwrap_or_default()
    }

    /// Runs `conveyor ARGS` with `token`, stdin from `input`, stdout and stderr piped.
    fn client(&self, token: Option<&str>, args: &[&str], input: &str) -> Output {
        let mut command = Command::new(conveyor_bin());
        command
            .args(args)
            .env("CONVEYOR_URL", self.conveyor.mcp_url())
            .env_remove("CONVEYOR_TOKEN")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(token) = token {
            command.env("CONVEYOR_TOKEN", token);
        }
        let mut child = command.spawn().expect("conveyor runs");
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().expect("stdin");
            let _ = stdin.write_all(input.as_bytes());
        }
        child.wait_with_output().expect("conveyor finishes")
    }
}

/// A tmux server of the test's own (its own socket), with one window running bash.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(stack: &Stack, token: &str) -> Tmux {
        let socket = format!("conveyor-test-{}-{}", std::process::id(), conveyor_tests::process::free_port());
        let status = Command::new("tmux")
            .args(["-L", &socket, "-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", "150", "-y", "40"])
            .args(["bash", "--norc", "--noprofile"])
            .env("TERM", "xterm-256color")
            .status()
            .unwrap_or_else(|e| panic!("cannot run tmux ({e}); install it (`apt-get install -y tmux`)"));
        assert!(status.success(), "tmux starts a session");
        let tmux = Tmux { socket };
        // The person's shell: the binary on PATH, the endpoint and the token in the environment.
        let bin_dir: PathBuf = conveyor_bin().parent().map(Path::to_path_buf).unwrap_or_default();
        tmux.line(&format!("export PATH='{}':\"$PATH\" PS1='$ '", bin_dir.display()));
        tmux.line(&format!("export CONVEYOR_URL='{}' CONVEYOR_TOKEN='{token}'", stack.conveyor.mcp_url()));
        tmux.line("clear");
        tmux
    }

    fn tmux(&self, args: &[&str]) -> String {
        let output = Command::new("tmux").arg("-L").arg(&self.socket).args(args).output().expect("tmux runs");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Types `text` and presses Enter.
    fn line(&self, text: &str) {
        self.tmux(&["send-keys", "-t", "t", "-l", text]);
        self.tmux(&["send-keys", "-t", "t", "Enter"]);
    }

    fn key(&self, key: &str) {
        self.tmux(&["send-keys", "-t", "t", key]);
    }

    /// What the terminal shows now.
    fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-t", "t", "-p"])
    }

    /// Reads the screen every 100 ms until `done` holds, handing every screen to `seen`.
    fn wait(
        &self,
        what: &str,
        within: Duration,
        mut seen: impl FnMut(&str),
        done: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = Instant::now() + within;
        loop {
            let screen = self.screen();
            seen(&screen);
            if done(&screen) {
                return screen;
            }
            assert!(Instant::now() < deadline, "waited {within:?} for {what}; the screen:\n{screen}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn wait_for(&self, what: &str, within: Duration, text: &str) -> String {
        self.wait(what, within, |_| {}, |s| s.contains(text))
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.tmux(&["kill-server"]);
    }
}

/// The percentage the bar shows on a screen (`[=====>   ]  42%`).
fn bar_percent(screen: &str) -> Option<u32> {
    screen.lines().filter(|l| l.contains('[') && l.contains(']')).find_map(|l| {
        let after = &l[l.rfind(']')? + 1..];
        after.split_whitespace().next()?.strip_suffix('%')?.parse().ok()
    })
}

/// The id in `task <id> started`.
fn started_task(screen: &str) -> Option<String> {
    screen.lines().find_map(|l| {
        let rest = l.trim().strip_prefix("task ")?;
        let (id, tail) = rest.split_once(' ')?;
        tail.starts_with("started").then(|| id.to_owned())
    })
}

fn exit_code(screen: &str) -> Option<i32> {
    screen.lines().rev().find_map(|l| l.trim().strip_prefix("EXIT=")?.parse().ok())
}

#[test]
fn in_a_terminal_the_bar_moves_ctrl_c_cancels_and_a_question_is_answered_by_keystrokes() {
    let stack = stack("terminal-tmux");
    let tmux = Tmux::start(&stack, ALICE);

    // The bar moves while slow_compute computes, and the result is printed at the end.
    tmux.line("conveyor call slow_compute --arg seconds=4 --arg label=tmux; echo EXIT=$?");
    let mut percents: Vec<u32> = Vec::new();
    let screen = tmux.wait(
        "slow_compute to finish",
        Duration::from_secs(40),
        |s| {
            if let Some(p) = bar_percent(s)
                && percents.last() != Some(&p)
            {
                percents.push(p);
            }
        },
        |s| exit_code(s).is_some(),
    );
    assert_eq!(exit_code(&screen), Some(0), "{screen}");
    assert!(screen.contains("computed tmux"), "the result is printed: {screen}");
    assert!(screen.contains("slow_compute ["), "a bar was drawn: {screen}");
    assert!(percents.len() >= 3, "the bar moved through several values: {percents:?}");
    assert!(percents.windows(2).all(|w| w[0] <= w[1]), "and never went back: {percents:?}");
    assert!(
        percents.iter().any(|p| (1..100).contains(p)),
        "some values were between 0 and 100: {percents:?}"
    );

    // Ctrl-C cancels a running task; the client says so and exits 130; the task ends cancelled.
    tmux.line("clear; conveyor call slow_compute --arg seconds=60; echo EXIT=$?");
    let screen = tmux.wait(
        "the second run's bar",
        Duration::from_secs(30),
        |_| {},
        // No EXIT= line: the screen was cleared, so the task and bar are this run's, not the last.
        |s| exit_code(s).is_none() && bar_percent(s).is_some_and(|p| p > 0) && started_task(s).is_some(),
    );
    let task = started_task(&screen).expect("a task id");
    assert_eq!(stack.status(&task), "working");
    tmux.key("C-c");
    let screen =
        tmux.wait("the cancelled run to exit", Duration::from_secs(30), |_| {}, |s| exit_code(s).is_some());
    assert_eq!(exit_code(&screen), Some(130), "{screen}");
    assert!(screen.contains("Ctrl-C: cancelling task"), "{screen}");
    assert!(screen.contains(&format!("task {task} cancelled")), "{screen}");
    assert_eq!(stack.status(&task), "cancelled", "the task itself ended cancelled");

    // A tool that asks: the question appears, a wrong answer is asked again, keystrokes answer.
    tmux.line("clear; conveyor call confirm_delete --arg filename=report.txt; echo EXIT=$?");
    tmux.wait_for("the question", Duration::from_secs(30), "[y/n]:");
    let screen = tmux.screen();
    assert!(screen.contains("Delete report.txt?"), "{screen}");
    tmux.line("maybe");
    tmux.wait_for("the question asked again", Duration::from_secs(10), "must be true or false");
    tmux.line("y");
    let screen =
        tmux.wait("the answered call to exit", Duration::from_secs(30), |_| {}, |s| exit_code(s).is_some());
    assert_eq!(exit_code(&screen), Some(0), "{screen}");
    assert!(screen.contains("Deleted report.txt"), "{screen}");
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn code(output: &Output) -> i32 {
    output.status.code().unwrap_or(-1)
}

#[test]
fn through_pipes_lines_are_plain_exit_codes_tell_the_outcome_and_tasks_are_the_callers() {
    let stack = stack("terminal-pipes");
    let alice = |args: &[&str]| stack.client(Some(ALICE), args, "");

    // Plain lines on stderr, no colours or bars; only the result on stdout.
    let done = alice(&["call", "slow_compute", "--arg", "seconds=1", "--arg", "label=piped"]);
    assert_eq!(code(&done), 0, "{}", output_text(&done));
    assert_eq!(stdout(&done), "computed piped\n");
    let progress = stderr(&done);
    assert!(!progress.contains('\u{1b}'), "no escape sequences off a terminal: {progress:?}");
    assert!(progress.contains("started (slow_compute)"), "{progress}");
    assert!(progress.lines().any(|l| l.contains(" working ") && l.contains('%')), "{progress}");
    assert!(progress.lines().any(|l| l.contains(" completed ")), "{progress}");

    // --json prints the whole CallToolResult.
    let json = alice(&["call", "greet", "--arg", "name=Ada", "--json"]);
    assert_eq!(code(&json), 0, "{}", output_text(&json));
    let result: Value = serde_json::from_str(&stdout(&json)).expect("JSON on stdout");
    assert_eq!(result["content"][0]["text"], "Hello, Ada!");
    // --json '{...}' gives the arguments; a second, bare --json prints JSON as well.
    let both = alice(&["call", "greet", "--json", r#"{"name":"Grace"}"#, "--json"]);
    assert_eq!(code(&both), 0, "{}", output_text(&both));
    let result: Value = serde_json::from_str(&stdout(&both)).expect("JSON on stdout");
    assert_eq!(result["content"][0]["text"], "Hello, Grace!");
    let text = alice(&["call", "greet", "--json", r#"{"name":"Lin"}"#]);
    assert_eq!(stdout(&text), "Hello, Lin!\n", "{}", output_text(&text));
    let not_an_object = alice(&["call", "greet", "--json", "[1]"]);
    assert_eq!(code(&not_an_object), 2, "{}", output_text(&not_an_object));
    assert!(stderr(&not_an_object).contains("JSON object"), "{}", output_text(&not_an_object));

    // Exit codes.
    let tool_error = alice(&["call", "failing_job"]);
    assert_eq!(code(&tool_error), 1, "a tool error: {}", output_text(&tool_error));
    assert_eq!(stdout(&tool_error), "failing_job failed\n");
    let failed = alice(&["call", "protocol_error_job"]);
    assert_eq!(code(&failed), 3, "a failed task: {}", output_text(&failed));
    assert!(stderr(&failed).contains("protocol_error_job exploded"), "{}", output_text(&failed));
    let unknown = alice(&["call", "no_such_tool"]);
    assert_eq!(code(&unknown), 2, "{}", output_text(&unknown));
    assert!(stderr(&unknown).contains("no tool `no_such_tool`") && stderr(&unknown).contains("slow_compute"));
    let mistyped = alice(&["call", "slow_compute", "--arg", "seconds=soon"]);
    assert_eq!(code(&mistyped), 2, "{}", output_text(&mistyped));
    assert!(stderr(&mistyped).contains("`seconds` must be a number"), "{}", output_text(&mistyped));
    let missing = alice(&["call", "slow_compute"]);
    assert_eq!(code(&missing), 2, "{}", output_text(&missing));
    assert!(stderr(&missing).contains("missing required argument: seconds"), "{}", output_text(&missing));
    let refused = stack.client(Some("not-a-token"), &["call", "greet", "--arg", "name=x"], "");
    assert_eq!(code(&refused), 4, "{}", output_text(&refused));
    assert!(stderr(&refused).contains("refused the token"), "{}", output_text(&refused));
    let nobody_there = alice(&["call", "greet", "--arg", "name=x", "--url", "http://127.0.0.1:1/mcp"]);
    assert_eq!(code(&nobody_there), 4, "{}", output_text(&nobody_there));
    assert!(stderr(&nobody_there).contains("Is a gateway running there"), "{}", output_text(&nobody_there));
    assert!(!stderr(&nobody_there).contains("rmcp::"), "no type names: {}", output_text(&nobody_there));
    let anonymous = stack.client(None, &["tasks", "ls"], "");
    assert_eq!(code(&anonymous), 4, "{}", output_text(&anonymous));
    assert!(stderr(&anonymous).contains("needs a token"), "{}", output_text(&anonymous));

    // A question answered from a pipe.
    let answered = stack.client(Some(ALICE), &["call", "confirm_delete", "--arg", "filename=a.txt"], "y\n");
    assert_eq!(code(&answered), 0, "{}", output_text(&answered));
    assert_eq!(stdout(&answered), "Deleted a.txt\n");
    assert!(stderr(&answered).contains("Delete a.txt?"), "{}", output_text(&answered));

    // A graph: a plain line per node as it changes, and `tasks show` lists the nodes with edges.
    let graph = alice(&["call", "plan_fanout", "--arg", "width=3", "--arg", "seconds=1"]);
    assert_eq!(code(&graph), 0, "{}", output_text(&graph));
    for node in ["part0", "part1", "part2", "join"] {
        assert!(
            stderr(&graph).contains(&format!("node {node} completed")),
            "{node}: {}",
            output_text(&graph)
        );
    }
    // A graph's progress is its share of settled nodes (every weight is 1 here), whatever its
    // running nodes report: `NN% k/n nodes` agree on every line.
    let mut shares = 0;
    for line in stderr(&graph).lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let (Some(percent), Some(nodes)) = (words.get(2).and_then(|w| w.strip_suffix('%')), words.get(3))
        else {
            continue;
        };
        let (Ok(percent), Some((settled, of))) = (percent.parse::<f64>(), nodes.split_once('/')) else {
            continue;
        };
        let share = settled.parse::<f64>().unwrap_or(-1.0) / of.parse::<f64>().unwrap_or(1.0) * 100.0;
        assert!((percent - share).abs() < 1.0, "progress {percent}% with {nodes} nodes settled: {line}");
        shares += 1;
    }
    assert!(shares > 0, "{}", output_text(&graph));
    let graph_task = started_task(&stderr(&graph)).expect("the graph's task id");
    let shown = alice(&["tasks", "show", &graph_task, "--json"]);
    assert_eq!(code(&shown), 0, "{}", output_text(&shown));
    let shown: Value = serde_json::from_str(&stdout(&shown)).expect("JSON");
    let nodes = shown["nodes"].as_array().expect("nodes");
    assert!(nodes.len() >= 4, "{shown}");
    let part0 = nodes.iter().find(|n| n["nodeId"] == "part0").expect("part0");
    assert_eq!(part0["dependents"], serde_json::json!(["join"]), "{shown}");
    assert!(part0.get("output").is_none(), "outputs stay in the result, not in the node list");
    assert_eq!(shown["status"], "completed");
    assert!(shown["result"]["content"].is_array(), "a finished task shows its result: {shown}");
    let text = alice(&["tasks", "show", &graph_task]);
    assert!(stdout(&text).contains("part1") && stdout(&text).contains("attempts"), "{}", output_text(&text));

    // tasks ls / watch / cancel through the endpoint; bob sees none of alice's tasks.
    let mut running = Command::new(conveyor_bin())
        .args(["call", "slow_compute", "--arg", "seconds=60"])
        .env("CONVEYOR_URL", stack.conveyor.mcp_url())
        .env("CONVEYOR_TOKEN", ALICE)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("a background call");
    let deadline = Instant::now() + Duration::from_secs(20);
    let live = loop {
        let listed = alice(&["tasks", "ls", "--json"]);
        assert_eq!(code(&listed), 0, "{}", output_text(&listed));
        let tasks: Vec<Value> = serde_json::from_str(&stdout(&listed)).expect("JSON");
        if let Some(task) = tasks.iter().find(|t| t["tool"] == "slow_compute" && t["status"] == "working") {
            break task["taskId"].as_str().expect("id").to_owned();
        }
        assert!(Instant::now() < deadline, "the background task is never listed: {tasks:?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let all = alice(&["tasks", "ls", "--all", "--json"]);
    let all: Vec<Value> = serde_json::from_str(&stdout(&all)).expect("JSON");
    assert!(all.iter().any(|t| t["taskId"] == graph_task.as_str()), "--all lists finished tasks too");
    let table = alice(&["tasks", "ls"]);
    assert!(
        stdout(&table).contains(&live) && !stdout(&table).contains(&graph_task),
        "{}",
        output_text(&table)
    );
    let bobs = stack.client(Some(BOB), &["tasks", "ls", "--all", "--json"], "");
    let bobs: Vec<Value> = serde_json::from_str(&stdout(&bobs)).expect("JSON");
    assert!(bobs.is_empty(), "bob sees none of alice's tasks: {bobs:?}");
    let peek = stack.client(Some(BOB), &["tasks", "show", &live], "");
    assert_eq!(code(&peek), 2, "{}", output_text(&peek));
    assert!(stderr(&peek).contains("no task"), "{}", output_text(&peek));
    let meddle = stack.client(Some(BOB), &["tasks", "cancel", &live], "");
    assert_ne!(code(&meddle), 0, "bob cannot cancel alice's task: {}", output_text(&meddle));
    assert_eq!(stack.status(&live), "working");

    // Watching in another process, then cancelling: the watcher reports a cancel by someone else.
    let watched_log = conveyor_tests::process::scratch_dir("tasks-watch").join("stderr");
    let mut watcher = Command::new(conveyor_bin())
        .args(["tasks", "watch", &live])
        .env("CONVEYOR_URL", stack.conveyor.mcp_url())
        .env("CONVEYOR_TOKEN", ALICE)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&watched_log).expect("the watcher's log"))
        .spawn()
        .expect("tasks watch runs");
    // The cancel comes once the watcher has seen the task working, whatever the machine's load.
    let watching = format!("{live} working");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&watched_log).unwrap_or_default().contains(&watching) {
        assert!(Instant::now() < deadline, "the watcher never showed the task working");
        assert!(watcher.try_wait().expect("wait").is_none(), "the watcher ended before the cancel");
        std::thread::sleep(Duration::from_millis(50));
    }
    let cancelled = alice(&["tasks", "cancel", &live]);
    assert_eq!(code(&cancelled), 0, "{}", output_text(&cancelled));
    assert!(stderr(&cancelled).contains(&format!("task {live} cancelled")), "{}", output_text(&cancelled));
    assert_eq!(stack.status(&live), "cancelled");
    let watched = watcher.wait().expect("the watcher ends");
    let watched_text = std::fs::read_to_string(&watched_log).unwrap_or_default();
    assert_eq!(watched.code(), Some(5), "cancelled by someone else: {watched_text}");
    let status = running.wait().expect("the background call ends");
    assert_eq!(status.code(), Some(5), "the caller's own client sees its task cancelled by someone else");
    let again = alice(&["tasks", "cancel", &live]);
    assert_eq!(code(&again), 0, "cancelling twice is fine: {}", output_text(&again));
    assert!(stderr(&again).contains("cancelled"), "{}", output_text(&again));
}
