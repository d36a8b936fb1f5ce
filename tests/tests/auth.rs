//! With API keys configured, every request needs one, and each principal sees only its own tasks.

use conveyor_tests::mcp::tasks_client_capabilities;
use conveyor_tests::{Conveyor, Mcp, RedisServer};
use serde_json::json;

const ALICE: &str = "alice-key-0123456789";
const BOB: &str = "bob-key-9876543210ab";

#[tokio::test]
async fn tasks_belong_to_the_principal_that_created_them() {
    let redis = RedisServer::start().expect("redis");
    let keys = format!("alice={ALICE},bob={BOB}");
    let conveyor = Conveyor::up(&redis.url(), &["--fixtures", "--api-keys", &keys]).expect("conveyor");
    let anonymous = Mcp::new(conveyor.mcp_url());
    let alice = Mcp::new(conveyor.mcp_url()).with_api_key(ALICE);
    let bob = Mcp::new(conveyor.mcp_url()).with_api_key(BOB);

    let refused = anonymous.call_2025("tools/list", json!({})).await.expect("reply");
    assert_eq!(refused.status, 401, "{}", refused.raw);
    assert!(refused.raw.contains("Authorization"), "says what to send: {}", refused.raw);
    let wrong = Mcp::new(conveyor.mcp_url()).with_api_key("not-a-key-at-all-000");
    assert_eq!(wrong.call_2025("tools/list", json!({})).await.expect("reply").status, 401);
    assert_eq!(anonymous.get_status("/healthz").await.expect("healthz"), 200, "probes need no key");

    let created = alice
        .call_2025("tools/call", json!({"name": "slow_compute", "arguments": {"seconds": 30}, "task": {}}))
        .await
        .expect("tools/call");
    let task =
        created.result()["task"]["taskId"].as_str().unwrap_or_else(|| panic!("{}", created.raw)).to_owned();

    assert_eq!(
        alice.call_2025("tasks/get", json!({"taskId": task})).await.expect("get").result()["status"],
        "working"
    );
    for (method, params) in [
        ("tasks/get", json!({"taskId": task})),
        ("tasks/cancel", json!({"taskId": task})),
        ("tasks/result", json!({"taskId": task})),
    ] {
        let reply = bob.call_2025(method, params).await.expect("reply");
        assert_eq!(
            reply.error_code(),
            Some(-32602),
            "bob's {method} must not find alice's task: {}",
            reply.raw
        );
    }
    let reply = bob
        .call_2026("tasks/get", json!({"taskId": task}), tasks_client_capabilities())
        .await
        .expect("reply");
    assert_eq!(reply.error_code(), Some(-32602), "{}", reply.raw);
    let bobs_list = bob.call_2025("tasks/list", json!({})).await.expect("list");
    assert_eq!(bobs_list.result()["tasks"], json!([]), "{}", bobs_list.raw);
    let alices_list = alice.call_2025("tasks/list", json!({})).await.expect("list");
    assert_eq!(alices_list.result()["tasks"][0]["taskId"], task.as_str(), "{}", alices_list.raw);

    // Bob's failed cancel changed nothing; Alice's works.
    let cancelled = alice.call_2025("tasks/cancel", json!({"taskId": task})).await.expect("cancel");
    assert_eq!(cancelled.result()["status"], "cancelled", "{}", cancelled.raw);
}
