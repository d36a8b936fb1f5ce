//! Input from a careless or hostile client costs a bounded amount and breaks nothing: a body that
//! would parse a hundredfold is refused before it is parsed, stalled connections are closed, a
//! result too deep to read is refused (and stored data that cannot be read breaks only its task),
//! non-finite weights never reach Lua, and `$from` in a plain call is the client's data.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use conveyor_tests::process::{peak_rss, task_key};
use conveyor_tests::{Conveyor, Mcp, RedisServer};
use serde_json::{Value, json};

/// A `tools/call` whose arguments hold `count` one-key objects: about 8 bytes of text each, and
/// several hundred bytes each once parsed into JSON values.
fn hostile_body(count: usize) -> String {
    let mut items = String::with_capacity(count * 8);
    for i in 0..count {
        if i > 0 {
            items.push(',');
        }
        items.push_str(r#"{"a":1}"#);
    }
    format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"echo","arguments":{{"items":[{items}]}}}}}}"#
    )
}

#[tokio::test]
async fn a_body_that_would_parse_a_hundredfold_is_refused_before_it_is_parsed() {
    let redis = RedisServer::start().expect("redis");
    let gateway = Conveyor::gateway(&redis.url(), &[]).expect("gateway");
    let pid = gateway.pid().expect("pid");
    let mcp = Mcp::new(gateway.mcp_url());
    // Warm up: the first requests grow the allocator's arenas on their own.
    for _ in 0..3 {
        mcp.call_2025("tools/list", json!({})).await.expect("tools/list");
    }
    let before = peak_rss(pid);
    let body = hostile_body(500_000);
    assert!(body.len() < 4 * 1024 * 1024, "under the default body limit");
    let started = Instant::now();
    let replies = futures::future::join_all((0..3).map(|_| mcp.post_raw(&[], body.clone()))).await;
    for reply in replies {
        let reply = reply.expect("reply");
        assert_eq!(reply.status, 413, "{}", reply.raw);
        assert_eq!(reply.error_code(), Some(-32600), "{}", reply.raw);
        assert_eq!(reply.message["error"]["data"]["limit"], "max_parsed_bytes", "{}", reply.raw);
        assert!(reply.raw.contains("once parsed"), "says why: {}", reply.raw);
    }
    let grown = peak_rss(pid).saturating_sub(before);
    println!(
        "three {} byte hostile bodies at once: peak RSS grew by {:.1} MiB ({:.1}x one body) in {:?}",
        body.len(),
        grown as f64 / 1048576.0,
        grown as f64 / body.len() as f64,
        started.elapsed()
    );
    // Three bodies are held at once, each read into one buffer; nothing is parsed.
    assert!(
        grown < 6 * body.len() as u64,
        "peak memory grew by {grown} bytes for three bodies of {} bytes",
        body.len()
    );
    // The gateway still serves.
    let reply = mcp.call_2025("tools/list", json!({})).await.expect("tools/list");
    assert_eq!(reply.status, 200, "{}", reply.raw);

    // Too deep to be a reasonable request: refused, naming the limit.
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"echo","arguments":{{"x":{}1{}}}}}}}"#,
        "[".repeat(100),
        "]".repeat(100)
    );
    let reply = mcp.post_raw(&[], deep).await.expect("reply");
    assert_eq!(reply.message["error"]["data"]["limit"], "max_json_depth", "{}", reply.raw);
}

/// Reads until the server closes the connection; how long that took, and what it sent.
fn wait_closed(stream: &mut TcpStream, limit: Duration) -> (Duration, String) {
    let started = Instant::now();
    stream.set_read_timeout(Some(limit)).expect("read timeout");
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => received.extend_from_slice(&buffer[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("the connection was not closed within {limit:?}: {e}"),
        }
    }
    (started.elapsed(), String::from_utf8_lossy(&received).into_owned())
}

#[tokio::test]
async fn stalled_and_idle_connections_are_closed_within_their_deadlines() {
    let redis = RedisServer::start().expect("redis");
    let gateway =
        Conveyor::gateway(&redis.url(), &["--header-timeout-ms", "1000", "--body-timeout-ms", "1000"])
            .expect("gateway");
    let address = gateway.base.trim_start_matches("http://").to_owned();
    let check = tokio::task::spawn_blocking(move || {
        // Half a request line, then nothing.
        let mut stream = TcpStream::connect(&address).expect("connect");
        stream.write_all(b"POST /mcp HTT").expect("write");
        let (took, _) = wait_closed(&mut stream, Duration::from_secs(10));
        println!("half a request line: closed after {took:?}");
        assert!(took >= Duration::from_millis(900), "closed early: {took:?}");

        // Whole headers, half a body.
        let mut stream = TcpStream::connect(&address).expect("connect");
        let head = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n{}",
            r#"{"jsonrpc":"#
        );
        stream.write_all(head.as_bytes()).expect("write");
        let (took, answer) = wait_closed(&mut stream, Duration::from_secs(10));
        println!("half a body: closed after {took:?}");
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("CONVEYOR_BODY_TIMEOUT_MS"), "names the limit: {answer}");

        // An idle keep-alive connection after a complete request.
        let mut stream = TcpStream::connect(&address).expect("connect");
        stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").expect("write");
        let (took, answer) = wait_closed(&mut stream, Duration::from_secs(10));
        println!("idle keep-alive: closed after {took:?}");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    });
    check.await.expect("the checks ran");
    // The gateway is still well.
    assert_eq!(Mcp::new(gateway.mcp_url()).get_status("/healthz").await.expect("healthz"), 200);
}

async fn create_task(mcp: &Mcp, tool: &str, arguments: Value) -> String {
    let reply = mcp
        .call_2025("tools/call", json!({"name": tool, "arguments": arguments, "task": {}}))
        .await
        .expect("tools/call");
    reply.result()["task"]["taskId"].as_str().unwrap_or_else(|| panic!("{}", reply.raw)).to_owned()
}

async fn terminal(mcp: &Mcp, task: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let reply = mcp.call_2025("tasks/get", json!({"taskId": task})).await.expect("tasks/get");
        let status = reply.result()["status"].as_str().unwrap_or_default().to_owned();
        if ["completed", "failed", "cancelled"].contains(&status.as_str()) {
            return reply.result().clone();
        }
        assert!(Instant::now() < deadline, "task {task} never ended: {}", reply.raw);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_result_too_deep_to_read_fails_its_task_and_breaks_no_other_read() {
    let redis = RedisServer::start().expect("redis");
    let conveyor = Conveyor::up(&redis.url(), &["--fixtures"]).expect("conveyor");
    let mcp = Mcp::new(conveyor.mcp_url());
    mcp.wait_for_tool("nest", Duration::from_secs(10)).await.expect("fixtures");

    let fine = create_task(&mcp, "nest", json!({"depth": 40})).await;
    assert_eq!(terminal(&mcp, &fine).await["status"], "completed");
    let deep = create_task(&mcp, "nest", json!({"depth": 120})).await;
    let task = terminal(&mcp, &deep).await;
    assert_eq!(task["status"], "failed", "{task}");
    let result = mcp.call_2025("tasks/result", json!({"taskId": deep})).await.expect("tasks/result");
    let message = result.message["error"]["message"].as_str().unwrap_or_default().to_owned();
    assert!(message.contains("levels deep") && message.contains("64"), "says why: {}", result.raw);

    // Stored data no reader can parse (written by hand here, as a broken writer would) breaks
    // only its own task.
    let mut conn = redis.connection().expect("redis connection");
    let poison = format!("{}\"x\"{}", "[".repeat(300), "]".repeat(300));
    let _: () =
        redis::cmd("HSET").arg(task_key(&fine)).arg("result").arg(&poison).query(&mut conn).expect("HSET");
    let other = create_task(&mcp, "echo", json!({"name": "neighbour"})).await;
    assert_eq!(terminal(&mcp, &other).await["status"], "completed");
    // A reader of its payload finds it failed and says why; a status poll, which reads no payload,
    // still answers with the stored status.
    let polled = terminal(&mcp, &fine).await;
    assert_eq!(polled["taskId"], fine.as_str(), "{polled}");
    let capabilities = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    let detailed =
        mcp.call_2026("tasks/get", json!({"taskId": fine}), capabilities).await.expect("tasks/get");
    assert_eq!(detailed.result()["status"], "failed", "{}", detailed.raw);
    assert!(
        detailed.raw.contains("cannot be read"),
        "the poisoned task says what is wrong: {}",
        detailed.raw
    );
    let result = mcp.call_2025("tasks/result", json!({"taskId": fine})).await.expect("tasks/result");
    assert!(result.raw.contains("cannot be read"), "{}", result.raw);
    let list = mcp.call_2025("tasks/list", json!({})).await.expect("tasks/list");
    let listed: Vec<&str> = list.result()["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .filter_map(|t| t["taskId"].as_str())
        .collect();
    assert!(listed.contains(&other.as_str()) && listed.contains(&deep.as_str()), "{}", list.raw);
    let ready = mcp.get_status("/readyz").await.expect("readyz");
    assert_eq!(ready, 200);
}

#[tokio::test]
async fn non_finite_weights_are_refused_and_from_in_a_plain_call_is_data() {
    let redis = RedisServer::start().expect("redis");
    let conveyor = Conveyor::up(&redis.url(), &["--fixtures"]).expect("conveyor");
    let mcp = Mcp::new(conveyor.mcp_url());
    mcp.wait_for_tool("echo", Duration::from_secs(10)).await.expect("fixtures");

    // Each weight is finite; their sum is not.
    let graph = json!({"nodes": [
        {"id": "a", "kind": "noop", "weight": 1e308},
        {"id": "b", "kind": "noop", "weight": 1e308}
    ]});
    let written = redis.task_count();
    let reply = mcp
        .call_2025("tools/call", json!({"name": "run_dag", "arguments": graph, "task": {}}))
        .await
        .expect("reply");
    assert_eq!(reply.error_code(), Some(-32602), "{}", reply.raw);
    assert!(reply.raw.contains("weight"), "names the field: {}", reply.raw);
    assert_eq!(redis.task_count(), written, "nothing written");
    let graph = json!({"nodes": [
        {"id": "a", "kind": "noop", "weight": 1e6},
        {"id": "b", "kind": "noop", "weight": 1e6, "dependsOn": ["a"]}
    ]});
    let task = create_task(&mcp, "run_dag", graph).await;
    assert_eq!(terminal(&mcp, &task).await["status"], "completed");

    // `$from` means an upstream value only inside a graph; in a plain call it is data.
    let arguments = json!({"x": {"$from": "a", "pointer": "/b"}, "y": [{"$from": "z"}]});
    let reply =
        mcp.call_2025("tools/call", json!({"name": "echo", "arguments": arguments})).await.expect("echo");
    assert_eq!(reply.result()["structuredContent"], arguments, "{}", reply.raw);
    let task = create_task(&mcp, "echo", arguments.clone()).await;
    assert_eq!(terminal(&mcp, &task).await["status"], "completed");
    let result = mcp.call_2025("tasks/result", json!({"taskId": task})).await.expect("tasks/result");
    assert_eq!(result.result()["structuredContent"], arguments, "{}", result.raw);
    assert!(redis.dead_letters().is_empty(), "nothing went to the dead-letter stream");
}
