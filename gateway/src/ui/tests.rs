//! The web view's API through the gateway's router, without a socket: a real `redis-server` (the
//! tests crate's [`RedisServer`]), a worker with the fixture tools running in this process, and
//! tasks created through `/mcp` on the same router. Two principals and an operator hold static
//! tokens.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use conveyor_shared::{Config, Store};
use conveyor_tests::RedisServer;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::access::AccessPolicy;
use crate::auth::{Authenticator, StaticTokens, token_digest};
use crate::state::{AppState, HttpPolicy};

const ALICE: &str = "alice-ui-token-0123456789abcdef";
const BOB: &str = "bob-ui-token-9876543210fedcba";
const OPS: &str = "olga-ui-token-aaaabbbbccccdddd";

/// A gateway's router on a fresh Redis, and a worker offering `slow_compute` and
/// `protocol_error_job`; the worker stops when this is dropped.
struct Stack {
    app: Router,
    _redis: RedisServer,
    worker: CancellationToken,
}

impl Drop for Stack {
    fn drop(&mut self) {
        self.worker.cancel();
    }
}

async fn stack() -> Stack {
    let redis = RedisServer::start().expect("redis-server starts");
    let store = Store::new(&redis.url(), Duration::from_secs(3)).expect("store");
    let entry = |principal: &str, groups: &str, token: &str| {
        format!(
            "[[token]]\nprincipal = \"{principal}\"\ngroups = [{groups}]\nsha256 = \"{}\"\n\n",
            token_digest(token)
        )
    };
    let tokens = StaticTokens::parse(
        &[entry("alice", "", ALICE), entry("bob", "", BOB), entry("olga", "\"ops\"", OPS)].concat(),
    )
    .expect("tokens");
    let auth = Authenticator {
        disabled: false,
        tokens,
        jwt: None,
        resource_url: None,
        authorization_servers: Vec::new(),
    };
    let access = AccessPolicy::parse("operators = [\"group:ops\"]\n").expect("access policy");
    let config = Config { redis_url: redis.url(), ..Config::default() };
    let state = Arc::new(AppState::new(store.clone(), config, HttpPolicy::default()).with_auth(auth, access));
    let registry = conveyor_worker::fixtures::registry()
        .only(&["slow_compute".to_owned(), "protocol_error_job".to_owned()])
        .expect("fixture tools");
    let worker = CancellationToken::new();
    tokio::spawn(conveyor_worker::run(
        store,
        Arc::new(registry),
        conveyor_worker::WorkerOptions::new(4),
        worker.clone(),
    ));
    let stack = Stack { app: crate::router(state), _redis: redis, worker };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let listed = stack.mcp(ALICE, "tools/list", json!({})).await;
        if listed["result"]["tools"].as_array().is_some_and(|t| t.iter().any(|t| t["name"] == "slow_compute"))
        {
            return stack;
        }
        assert!(Instant::now() < deadline, "the worker never offered slow_compute: {listed}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

impl Stack {
    async fn send(&self, request: Request<Body>) -> axum::response::Response {
        self.app.clone().oneshot(request).await.expect("the router answers")
    }

    /// A request with `token` (if any) and `Host: localhost`, as a browser on this machine sends.
    async fn call(
        &self,
        method: &str,
        uri: &str,
        token: Option<&str>,
    ) -> (StatusCode, Value, header::HeaderMap) {
        let mut request = Request::builder().method(method).uri(uri).header(header::HOST, "localhost:8080");
        if let Some(token) = token {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let response = self.send(request.body(Body::empty()).expect("request")).await;
        let (status, headers) = (response.status(), response.headers().clone());
        let bytes = response.into_body().collect().await.expect("body").to_bytes();
        (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null), headers)
    }

    async fn mcp(&self, token: &str, method: &str, params: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let request = Request::post("/mcp")
            .header(header::HOST, "localhost")
            .header(header::AUTHORIZATION, format!("Bearer {token}"))
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .body(Body::from(body.to_string()))
            .expect("request");
        let bytes = self.send(request).await.into_body().collect().await.expect("body").to_bytes();
        serde_json::from_slice(&bytes).expect("a JSON reply")
    }

    /// A task of `token`'s principal (2025-11-25, `params.task`); its id.
    async fn task(&self, token: &str, tool: &str, arguments: Value) -> String {
        let created =
            self.mcp(token, "tools/call", json!({"name": tool, "arguments": arguments, "task": {}})).await;
        created["result"]["task"]["taskId"]
            .as_str()
            .unwrap_or_else(|| panic!("no task: {created}"))
            .to_owned()
    }

    /// Reads `/ui/api/tasks/{task}` as alice until `done` says so; the detail then.
    async fn detail_until(&self, task: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let (_, detail, _) = self.call("GET", &format!("/ui/api/tasks/{task}"), Some(ALICE)).await;
            if done(&detail) {
                return detail;
            }
            assert!(Instant::now() < deadline, "{what}: {detail}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn ids(list: &Value) -> Vec<String> {
    list["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .filter_map(|t| t["taskId"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ui_page_is_public_and_its_api_asks_for_the_mcp_token() {
    let s = stack().await;
    let page = s.send(Request::get("/ui").body(Body::empty()).expect("request")).await;
    assert_eq!(page.status(), StatusCode::OK);
    let csp = page.headers().get(header::CONTENT_SECURITY_POLICY).and_then(|v| v.to_str().ok()).unwrap_or("");
    assert!(csp.contains("script-src 'self'") && csp.contains("connect-src 'self'"), "{csp}");
    let html = page.into_body().collect().await.expect("body").to_bytes();
    let html = String::from_utf8_lossy(&html);
    assert!(html.contains("ui/app.js") && !html.contains("http"), "the page loads nothing from elsewhere");
    for asset in ["/ui/app.js", "/ui/app.css"] {
        let response = s.send(Request::get(asset).body(Body::empty()).expect("request")).await;
        assert_eq!(response.status(), StatusCode::OK, "{asset}");
    }

    for path in ["/ui/api/me", "/ui/api/tasks", "/ui/api/tasks/x", "/ui/api/operators", "/ui/api/stream"] {
        let (status, body, headers) = s.call("GET", path, None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}: {body}");
        let challenge = headers.get(header::WWW_AUTHENTICATE).and_then(|v| v.to_str().ok()).unwrap_or("");
        assert!(
            challenge.starts_with("Bearer resource_metadata=\"http://localhost:8080/.well-known/"),
            "{challenge}"
        );
        let (status, _, headers) = s.call("GET", path, Some("not-a-token-of-this-gateway")).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
        let challenge = headers.get(header::WWW_AUTHENTICATE).and_then(|v| v.to_str().ok()).unwrap_or("");
        assert!(challenge.contains("error=\"invalid_token\""), "{challenge}");
    }
    let (status, _, _) = s.call("POST", "/ui/api/tasks/x/cancel", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let (status, me, _) = s.call("GET", "/ui/api/me", Some(ALICE)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!((me["principal"].as_str(), me["operator"].as_bool()), (Some("alice"), Some(false)), "{me}");
    let (_, me, _) = s.call("GET", "/ui/api/me", Some(OPS)).await;
    assert_eq!((me["principal"].as_str(), me["operator"].as_bool()), (Some("olga"), Some(true)), "{me}");

    // DNS rebinding: a Host or Origin this gateway does not serve is refused, token or not.
    let request = Request::get("/ui/api/me")
        .header(header::HOST, "localhost")
        .header(header::ORIGIN, "http://evil.example")
        .header(header::AUTHORIZATION, format!("Bearer {ALICE}"))
        .body(Body::empty())
        .expect("request");
    assert_eq!(s.send(request).await.status(), StatusCode::FORBIDDEN);
    let request =
        Request::get("/ui").header(header::HOST, "evil.example").body(Body::empty()).expect("request");
    assert_eq!(s.send(request).await.status(), StatusCode::FORBIDDEN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ui_lists_the_callers_tasks_and_hides_other_principals_tasks() {
    let s = stack().await;
    let alices = s.task(ALICE, "slow_compute", json!({"seconds": 30, "label": "alice"})).await;
    let bobs = s.task(BOB, "slow_compute", json!({"seconds": 30, "label": "bob"})).await;

    let (status, list, _) = s.call("GET", "/ui/api/tasks", Some(ALICE)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ids(&list), [alices.as_str()], "alice sees her task only: {list}");
    assert_eq!(list["limit"], super::LIST_LIMIT);
    let row = &list["tasks"][0];
    assert_eq!((row["tool"].as_str(), row["owner"].as_str()), (Some("slow_compute"), Some("alice")), "{row}");
    assert_eq!(row["status"], "working");
    assert_eq!(ids(&s.call("GET", "/ui/api/tasks", Some(BOB)).await.1), [bobs.as_str()]);
    let (_, all, _) = s.call("GET", "/ui/api/tasks", Some(OPS)).await;
    let mut all = ids(&all);
    all.sort();
    let mut both = vec![alices.clone(), bobs.clone()];
    both.sort();
    assert_eq!(all, both, "an operator sees every live task");

    // One task: its nodes and, once it ends, its result.
    let (status, detail, _) = s.call("GET", &format!("/ui/api/tasks/{alices}"), Some(ALICE)).await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    assert_eq!(detail["taskId"], alices.as_str());
    assert_eq!(detail["arguments"]["label"], "alice");
    assert_eq!(detail["nodes"][0]["nodeId"], "root", "{detail}");
    assert_eq!(detail["nodes"][0]["tool"], "slow_compute");
    assert!(detail["result"].is_null() && detail["error"].is_null(), "{detail}");

    // Another principal's task is "not found", word for word as an unknown one is.
    let (status, theirs, _) = s.call("GET", &format!("/ui/api/tasks/{bobs}"), Some(ALICE)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let unknown = "0000ffffffffffffffffffffffffffff";
    let (status, nobodys, _) = s.call("GET", &format!("/ui/api/tasks/{unknown}"), Some(ALICE)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        theirs["error"].as_str().map(|m| m.replace(&bobs, "ID")),
        nobodys["error"].as_str().map(|m| m.replace(unknown, "ID"))
    );
    let (status, _, _) = s.call("POST", &format!("/ui/api/tasks/{bobs}/cancel"), Some(ALICE)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "alice cannot cancel bob's task");
    let (_, still, _) = s.call("GET", &format!("/ui/api/tasks/{bobs}"), Some(BOB)).await;
    assert_eq!(still["status"], "working");
    let (status, _, _) = s.call("GET", &format!("/ui/api/tasks/{bobs}"), Some(OPS)).await;
    assert_eq!(status, StatusCode::OK, "an operator reads any task");

    // A finished task shows its CallToolResult.
    let quick = s.task(ALICE, "slow_compute", json!({"seconds": 0.1, "label": "quick"})).await;
    let done = s.detail_until(&quick, "the quick task never ended", |d| d["terminal"] == true).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["content"][0]["type"], "text", "{done}");
    assert_eq!(done["nodes"][0]["status"], "completed");
    assert!(done["nodes"][0]["durationMs"].as_u64().is_some(), "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ui_cancel_ends_a_running_task_as_tasks_cancel_does() {
    let s = stack().await;
    let task = s.task(ALICE, "slow_compute", json!({"seconds": 30})).await;
    s.detail_until(&task, "the task never started", |d| d["nodes"][0]["status"] == "running").await;
    let (status, cancelled, _) = s.call("POST", &format!("/ui/api/tasks/{task}/cancel"), Some(ALICE)).await;
    assert_eq!(status, StatusCode::OK, "{cancelled}");
    assert_eq!(cancelled["outcome"], "cancelled");
    assert_eq!(cancelled["task"]["status"], "cancelled");
    assert_eq!(
        cancelled["task"]["statusMessage"], "Cancelled by the client",
        "the message tasks/cancel records"
    );
    let over_mcp = s.mcp(ALICE, "tasks/get", json!({"taskId": task})).await;
    assert_eq!(over_mcp["result"]["status"], "cancelled", "{over_mcp}");
    // The worker hears of it and stops the node.
    s.detail_until(&task, "the node kept running", |d| d["nodes"][0]["status"] == "cancelled").await;
    let (status, again, _) = s.call("POST", &format!("/ui/api/tasks/{task}/cancel"), Some(ALICE)).await;
    assert_eq!(status, StatusCode::CONFLICT, "a finished task cannot be cancelled: {again}");
    assert!(again["error"].as_str().is_some_and(|m| m.contains("already cancelled")), "{again}");
    // The settled task is counted as tasks/cancel's would be.
    let metrics = conveyor_shared::metrics::render();
    assert!(
        metrics.contains(r#"conveyor_tasks_settled_total{tool="slow_compute",status="cancelled"}"#),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ui_operators_see_queues_workers_and_dead_letters_and_nobody_else_does() {
    let s = stack().await;
    let doomed = s.task(BOB, "protocol_error_job", json!({})).await;
    let running = s.task(ALICE, "slow_compute", json!({"seconds": 30})).await;
    let (status, refused, _) = s.call("GET", "/ui/api/operators", Some(ALICE)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    assert!(refused["error"].as_str().is_some_and(|m| m.contains("operators")), "{refused}");

    let deadline = Instant::now() + Duration::from_secs(20);
    let view = loop {
        let (status, view, _) = s.call("GET", "/ui/api/operators", Some(OPS)).await;
        assert_eq!(status, StatusCode::OK, "{view}");
        let busy = view["queues"]
            .as_array()
            .is_some_and(|q| q.iter().any(|q| q["queue"] == "slow_compute" && q["pending"] == 1));
        let running_node = view["workers"][0]["running"]
            .as_array()
            .is_some_and(|r| r.iter().any(|n| n["taskId"] == running.as_str()));
        if view["deadLetters"]["total"] == 1 && busy && running_node {
            break view;
        }
        assert!(Instant::now() < deadline, "the operators' view never showed the work: {view}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let letter = &view["deadLetters"]["newest"][0];
    assert_eq!(
        (letter["taskId"].as_str(), letter["tool"].as_str()),
        (Some(doomed.as_str()), Some("protocol_error_job")),
        "{letter}"
    );
    assert_eq!(letter["owner"], "bob");
    let queue = view["queues"]
        .as_array()
        .and_then(|q| q.iter().find(|q| q["queue"] == "slow_compute"))
        .expect("queue");
    assert_eq!(
        (queue["entries"].as_u64(), queue["lag"].as_u64(), queue["workers"].as_u64()),
        (Some(1), Some(0), Some(1)),
        "{queue}"
    );
    assert_eq!(view["workers"][0]["live"], true);
}

/// Reads SSE events from `body` until `done` says enough, or the time is up.
async fn events_until(
    body: &mut Body,
    within: Duration,
    mut done: impl FnMut(&[(String, Value)]) -> bool,
) -> Vec<(String, Value)> {
    let deadline = tokio::time::Instant::now() + within;
    let (mut text, mut events) = (String::new(), Vec::new());
    while !done(&events) {
        let frame = tokio::time::timeout_at(deadline, body.frame()).await;
        let Ok(Some(Ok(frame))) = frame else { break };
        let Ok(data) = frame.into_data() else { continue };
        text.push_str(&String::from_utf8_lossy(&data));
        while let Some(end) = text.find("\n\n") {
            let block: String = text.drain(..end + 2).collect();
            let name = block.lines().find_map(|l| l.strip_prefix("event: ")).unwrap_or("message").to_owned();
            let data: Vec<&str> = block.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
            if let Ok(value) = serde_json::from_str(&data.join("\n")) {
                events.push((name, value));
            }
        }
    }
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ui_stream_pushes_the_list_and_the_open_task_as_they_change() {
    let s = stack().await;
    let task = s.task(ALICE, "slow_compute", json!({"seconds": 30})).await;
    let request = Request::get(format!("/ui/api/stream?task={task}"))
        .header(header::HOST, "localhost")
        .header(header::AUTHORIZATION, format!("Bearer {ALICE}"))
        .body(Body::empty())
        .expect("request");
    let response = s.send(request).await;
    assert_eq!(response.status(), StatusCode::OK);
    let content_type =
        response.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    assert_eq!(content_type, "text/event-stream");
    let mut body = response.into_body();
    let progress = |events: &[(String, Value)]| -> Vec<f64> {
        events.iter().filter(|(name, _)| name == "task").filter_map(|(_, t)| t["progress"].as_f64()).collect()
    };
    let events = events_until(&mut body, Duration::from_secs(15), |events| {
        let moves = progress(events);
        moves.len() >= 2 && moves.last() > moves.first() && events.iter().any(|(name, _)| name == "tasks")
    })
    .await;
    let moves = progress(&events);
    assert!(
        moves.len() >= 2 && moves.last() > moves.first(),
        "the open task's progress was pushed as it moved: {events:?}"
    );
    let list = events.iter().find(|(name, _)| name == "tasks").map(|(_, l)| l).expect("a tasks event");
    assert_eq!(ids(list), [task.as_str()]);
    // Nothing is sent twice: each event differs from the one before it of its kind.
    let details: Vec<&Value> = events.iter().filter(|(name, _)| name == "task").map(|(_, t)| t).collect();
    assert!(details.windows(2).all(|pair| pair[0] != pair[1]), "an unchanged task was sent again");

    // Another principal's task: the stream says it is missing, and sends no detail.
    let bobs = s.task(BOB, "slow_compute", json!({"seconds": 30})).await;
    let request = Request::get(format!("/ui/api/stream?task={bobs}"))
        .header(header::AUTHORIZATION, format!("Bearer {ALICE}"))
        .body(Body::empty())
        .expect("request");
    let mut body = s.send(request).await.into_body();
    let events =
        events_until(&mut body, Duration::from_secs(5), |events| events.iter().any(|(n, _)| n == "missing"))
            .await;
    assert!(
        events.iter().any(|(name, value)| name == "missing" && value["taskId"] == bobs.as_str()),
        "{events:?}"
    );
    assert!(!events.iter().any(|(name, _)| name == "task"), "{events:?}");
}
