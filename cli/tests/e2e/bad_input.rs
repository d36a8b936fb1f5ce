//! Bad input gets a clear JSON-RPC error and changes nothing in Redis.

use conveyor_tests::mcp::tasks_client_capabilities;
use conveyor_tests::{Conveyor, Mcp, RedisServer};
use serde_json::json;

#[tokio::test]
async fn bad_requests_get_clear_errors_and_write_nothing() {
    let redis = RedisServer::start().expect("redis");
    let conveyor = Conveyor::up(&redis.url(), &["--fixtures", "--max-body-bytes", "4096"]).expect("conveyor");
    let mcp = Mcp::new(conveyor.mcp_url());
    mcp.wait_for_tool("greet", std::time::Duration::from_secs(20))
        .await
        .expect("the worker publishes its tools");

    let reply = mcp.post_raw(&[], "{not json").await.expect("reply");
    assert_eq!(reply.status, 400);
    assert_eq!(reply.error_code(), Some(-32700), "{}", reply.raw);

    let reply = mcp.post_raw(&[], "[]").await.expect("reply");
    assert_eq!(reply.error_code(), Some(-32600), "{}", reply.raw);

    let reply = mcp.post_raw(&[("content-type", "text/plain")], "{}").await.expect("reply");
    assert_eq!(reply.status, 415, "{}", reply.raw);

    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"greet","arguments":{{"name":"{}"}}}}}}"#,
        "x".repeat(10_000)
    );
    let reply = mcp.post_raw(&[], huge).await.expect("reply");
    assert_eq!(reply.status, 413, "{}", reply.raw);
    assert!(reply.raw.contains("4096"), "the error names the limit: {}", reply.raw);

    let reply = mcp.call_2025("no/such/method", json!({})).await.expect("reply");
    assert_eq!(reply.error_code(), Some(-32601), "{}", reply.raw);
    let reply = mcp.call_2026("no/such/method", json!({}), json!({})).await.expect("reply");
    assert_eq!((reply.status, reply.error_code()), (404, Some(-32601)), "{}", reply.raw);

    let reply = mcp.call_2025("tools/call", json!({"name": "nope", "arguments": {}})).await.expect("reply");
    assert_eq!(reply.error_code(), Some(-32602), "{}", reply.raw);
    assert!(reply.message["error"]["message"].as_str().unwrap_or_default().contains("nope"), "{}", reply.raw);

    let bad_args = json!({"name": "slow_compute", "arguments": {"seconds": "soon"}, "task": {}});
    let reply = mcp.call_2025("tools/call", bad_args).await.expect("reply");
    assert_eq!(reply.error_code(), Some(-32602), "{}", reply.raw);
    let message = reply.message["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("/seconds") && message.contains("number"), "names the field and why: {message}");
    assert_eq!(reply.message["error"]["data"]["errors"][0]["path"], "/seconds", "{}", reply.raw);

    let reply =
        mcp.call_2025("tools/call", json!({"name": "slow_compute", "arguments": {}})).await.expect("reply");
    assert!(
        reply.message["error"]["message"].as_str().unwrap_or_default().contains("seconds"),
        "a missing required field is named: {}",
        reply.raw
    );

    let reply = mcp.call_2025("tools/call", json!({"name": "greet", "arguments": [1]})).await.expect("reply");
    assert_eq!(reply.error_code(), Some(-32602), "{}", reply.raw);

    let reply = mcp
        .call_2025("tasks/get", json!({"taskId": "00000000000000000000000000000000"}))
        .await
        .expect("reply");
    assert_eq!(reply.error_code(), Some(-32602), "{}", reply.raw);
    let reply = mcp
        .call_2026(
            "tasks/get",
            json!({"taskId": "00000000000000000000000000000000"}),
            tasks_client_capabilities(),
        )
        .await
        .expect("reply");
    assert_eq!(reply.error_code(), Some(-32602), "{}", reply.raw);
    let reply = mcp.call_2025("tasks/cancel", json!({"taskId": "nope"})).await.expect("reply");
    assert_eq!(reply.error_code(), Some(-32602), "{}", reply.raw);
    let reply = mcp.call_2025("tasks/list", json!({"cursor": "not-a-cursor"})).await.expect("reply");
    assert_eq!(reply.error_code(), Some(-32602), "{}", reply.raw);

    assert_eq!(redis.written(), (0, 0), "bad input must not create tasks or enqueue work");

    // And a good call still works afterwards.
    let reply = mcp
        .call_2025("tools/call", json!({"name": "greet", "arguments": {"name": "Ada"}}))
        .await
        .expect("reply");
    assert_eq!(reply.result()["content"][0]["text"], "Hello, Ada!", "{}", reply.raw);
}
