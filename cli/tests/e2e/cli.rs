//! The `conveyor` command's contract: `up` brings its own Redis when none answers and says how to
//! get one when it cannot, and every subcommand's help names its flags and environment variables.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use conveyor_tests::Mcp;
use conveyor_tests::process::{conveyor_bin, logged_address, server_port, wait_listening};
use serde_json::json;

#[tokio::test]
async fn up_starts_a_private_redis_when_none_answers_and_stops_it_on_exit() {
    // A port nothing listens on, out of the kernel's ephemeral range so that nothing takes it.
    let dead_port = server_port();
    let log = conveyor_tests::process::scratch_dir("up-private").join("conveyor.log");
    let mut child = Command::new(conveyor_bin())
        .args(["up", "--fixtures", "--no-auth", "--listen", "127.0.0.1:0"])
        .env("REDIS_URL", format!("redis://127.0.0.1:{dead_port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("conveyor up starts");
    let listen = wait_listening(&mut child, &log, Duration::from_secs(20)).expect("conveyor up serves");
    let mcp = Mcp::new(format!("http://{listen}/mcp"));
    let deadline = Instant::now() + Duration::from_secs(20);
    let reply = loop {
        if let Ok(reply) =
            mcp.call_2025("tools/call", json!({"name": "greet", "arguments": {"name": "laptop"}})).await
            && reply.result()["content"][0]["text"] == "Hello, laptop!"
        {
            break reply;
        }
        assert!(
            Instant::now() < deadline,
            "conveyor up never served:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(reply.raw.contains("Hello"));
    let said = std::fs::read_to_string(&log).unwrap_or_default();
    let private_url = said
        .split_whitespace()
        .find(|w| w.starts_with("redis://") && !w.contains(&dead_port.to_string()))
        .unwrap_or_else(|| panic!("up says which Redis it started:\n{said}"))
        .to_owned();
    assert!(said.contains("started a private redis-server"), "{said}");
    let private = redis::Client::open(private_url.as_str()).expect("url");
    assert!(private.get_connection_with_timeout(Duration::from_secs(1)).is_ok(), "the private Redis runs");

    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let deadline = Instant::now() + Duration::from_secs(15);
    while child.try_wait().expect("wait").is_none() {
        assert!(Instant::now() < deadline, "conveyor up did not exit on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while private.get_connection_with_timeout(Duration::from_millis(200)).is_ok() {
        assert!(Instant::now() < deadline, "the private Redis was left running");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn up_without_redis_explains_how_to_get_it() {
    let output = Command::new(conveyor_bin())
        .args(["up", "--no-auth", "--listen", "127.0.0.1:0"])
        .env("REDIS_URL", format!("redis://127.0.0.1:{}", server_port()))
        .env("PATH", "/nonexistent")
        .stdin(Stdio::null())
        .output()
        .expect("conveyor runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no redis-server on PATH") && stderr.contains("REDIS_URL"), "{stderr}");
    assert!(stderr.contains("apt-get install redis-server"), "{stderr}");
}

#[test]
fn every_subcommand_documents_its_flags_and_environment() {
    let expectations: [(&[&str], &[&str]); 8] = [
        (
            &["up"],
            &[
                "--listen",
                "CONVEYOR_LISTEN",
                "--workers",
                "--fixtures",
                "REDIS_URL",
                "CONVEYOR_TASK_TTL_MAX_MS",
            ],
        ),
        (
            &["gateway"],
            &[
                "--listen",
                "CONVEYOR_ALLOWED_HOSTS",
                "CONVEYOR_MAX_BODY_BYTES",
                "REDIS_URL",
                "CONVEYOR_REDIS_TIMEOUT_MS",
            ],
        ),
        (
            &["worker"],
            &[
                "--concurrency",
                "CONVEYOR_WORKER_CONCURRENCY",
                "--fixtures",
                "CONVEYOR_SHUTDOWN_GRACE_MS",
                "--metrics-listen",
                "CONVEYOR_METRICS_LISTEN",
                "REDIS_URL",
            ],
        ),
        (&["redis", "tasks", "show"], &["--json", "REDIS_URL"]),
        (
            &["call"],
            &["--arg", "--json [<ARGUMENTS>]", "--json-args", "CONVEYOR_URL", "CONVEYOR_TOKEN", "Exit codes"],
        ),
        (&["tasks"], &["ls", "show", "watch", "cancel"]),
        (&["redis"], &["tasks", "workers", "dlq"]),
        (
            &[],
            &[
                "up",
                "gateway",
                "worker",
                "call",
                "tasks",
                "redis",
                "RUST_LOG",
                "--log-format",
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            ],
        ),
    ];
    for (command, words) in expectations {
        let output =
            Command::new(conveyor_bin()).args(command).arg("--help").output().expect("conveyor runs");
        assert!(output.status.success(), "{command:?} --help");
        let help = String::from_utf8_lossy(&output.stdout);
        for word in words {
            assert!(
                help.contains(word),
                "`conveyor {} --help` does not mention {word}:\n{help}",
                command.join(" ")
            );
        }
    }
}

#[test]
fn bad_flags_are_refused_with_the_reason() {
    let output = Command::new(conveyor_bin())
        .args(["gateway", "--task-ttl-ms", "100", "--task-ttl-max-ms", "50"])
        .output()
        .expect("conveyor runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("CONVEYOR_TASK_TTL_MS"), "{stderr}");

    let output = Command::new(conveyor_bin())
        .args(["gateway", "--no-auth", "--signing-key", "too-short"])
        .output()
        .expect("conveyor runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("CONVEYOR_SIGNING_KEY must be at least 32 characters"), "{stderr}");
}

#[test]
fn processes_with_another_shard_count_than_the_deployment_refuse_to_run() {
    let redis = conveyor_tests::RedisServer::start().expect("redis");
    let mut conn = redis.connection().expect("conn");
    // The deployment was set up with 4 shards.
    let _: () =
        redis::cmd("HSET").arg("cv:{cv.meta}:layout").arg("shards").arg(4).query(&mut conn).expect("hset");
    for command in ["gateway", "worker"] {
        let mut args = vec![command, "--shards", "8"];
        if command == "gateway" {
            args.extend(["--no-auth", "--listen", "127.0.0.1:0"]);
        } else {
            args.push("--fixtures");
        }
        let mut child = Command::new(conveyor_bin())
            .args(&args)
            .env("REDIS_URL", redis.url())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("conveyor runs");
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "`conveyor {command}` kept running with the wrong shard count"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let output = child.wait_with_output().expect("output");
        assert!(!status.success());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("CONVEYOR_SHARDS=4"), "{command}: {stderr}");
    }
}

#[tokio::test]
async fn a_process_without_a_shard_count_takes_the_deployments_or_one_on_a_new_single_server() {
    let layout = |redis: &conveyor_tests::RedisServer| -> Option<u16> {
        let mut conn = redis.connection().ok()?;
        redis::cmd("HGET").arg("cv:{cv.meta}:layout").arg("shards").query(&mut conn).ok()?
    };
    let wait_for = |redis: &conveyor_tests::RedisServer, pattern: &str| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while redis.keys(pattern).is_empty() {
            assert!(Instant::now() < deadline, "no key {pattern}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    // A new deployment on one server: one shard.
    let fresh = conveyor_tests::RedisServer::start().expect("redis");
    let _worker = conveyor_tests::Conveyor::worker(&fresh.url(), &["--fixtures"]).expect("worker");
    wait_for(&fresh, "cv:{cv.0}:q:greet");
    assert_eq!(layout(&fresh), Some(1));
    assert!(fresh.keys("cv:{cv.1}:q:*").is_empty(), "{:?}", fresh.keys("cv:{cv.1}:q:*"));

    // A deployment set up with 4: a process that names none takes 4.
    let set_up = conveyor_tests::RedisServer::start().expect("redis");
    let mut conn = set_up.connection().expect("conn");
    let _: () =
        redis::cmd("HSET").arg("cv:{cv.meta}:layout").arg("shards").arg(4).query(&mut conn).expect("hset");
    let _worker = conveyor_tests::Conveyor::worker(&set_up.url(), &["--fixtures"]).expect("worker");
    wait_for(&set_up, "cv:{cv.3}:q:greet");
    let up = conveyor_tests::Conveyor::up(&set_up.url(), &["--fixtures"]).expect("conveyor up");
    let mcp = conveyor_tests::Mcp::new(up.mcp_url());
    conveyor_tests::mcp::wait_for_tools(&mcp, &["greet"]).await;
    let reply = mcp
        .call_2025("tools/call", serde_json::json!({"name": "greet", "arguments": {"name": "four"}}))
        .await
        .expect("tools/call");
    assert_eq!(reply.result()["content"][0]["text"], "Hello, four!", "{}", reply.raw);
}

#[test]
fn up_whose_workers_refuse_the_tools_file_stops_at_once_with_the_reason() {
    let redis = conveyor_tests::RedisServer::start().expect("redis");
    let tools = conveyor_tests::process::scratch_dir("up-bad-tools").join("tools.toml");
    std::fs::write(&tools, "[[tool]]\nname = \"broken\"\ndescription = \"Runs nothing.\"\nargv = []\n")
        .expect("write");
    let mut child = Command::new(conveyor_bin())
        .args(["up", "--no-auth", "--listen", "127.0.0.1:0", "--tools-file"])
        .arg(&tools)
        .env("REDIS_URL", redis.url())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("conveyor runs");
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("`conveyor up` kept serving although its workers cannot run");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = child.wait_with_output().expect("output");
    assert!(!status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("broken"), "the error names what the tools file got wrong: {stderr}");
    // Where it listened, if it got that far, is closed with it.
    if let Some(listen) = logged_address(&stderr, "MCP at http://") {
        assert!(
            std::net::TcpStream::connect(&listen).is_err(),
            "nothing serves on {listen} after `up` stopped"
        );
    }
}
