//! The real Rust MCP client, `rmcp`, against a real Conveyor (`conveyor up --fixtures` on a real
//! `redis-server`): protocol 2026-07-28 started with `server/discover`, with and without the Tasks
//! extension (`io.modelcontextprotocol/tasks`, SEP-2663). Everything goes through rmcp's own
//! client API: `call_tool_once` (a result or a task), `get_task`, `cancel_task`, and a
//! `ClientHandler` that receives the progress notifications of a response stream.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use conveyor_tests::{Conveyor, RedisServer};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams,
    ClientCapabilities, ClientConfig, ClientRequest, CreateTaskResult, DetailedTask, ErrorCode, ErrorData,
    ExtensionCapabilities, GetTaskParams, Implementation, JsonObject, ProgressNotificationParam,
    ProtocolVersion, ResultType, ServerResult, TASKS_EXTENSION_ID, TaskPayload, TaskStatus,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, RoleClient, ServiceError};
use serde_json::{Value, json};

/// A client that records every progress notification it receives.
#[derive(Clone, Default)]
struct Client {
    tasks: bool,
    progress: Arc<Mutex<Vec<ProgressNotificationParam>>>,
}

impl Client {
    fn with_tasks() -> Self {
        Self { tasks: true, ..Self::default() }
    }

    fn without_tasks() -> Self {
        Self::default()
    }

    fn progress(&self) -> Vec<ProgressNotificationParam> {
        self.progress.lock().map(|p| p.clone()).unwrap_or_default()
    }
}

impl ClientHandler for Client {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if let Ok(mut progress) = self.progress.lock() {
            progress.push(params);
        }
    }

    fn get_info(&self) -> ClientConfig {
        // `ClientCapabilities::builder().enable_tasks()` needs rmcp's `server` or `macros`
        // feature; the declaration it makes is exactly this entry in the extensions map.
        let mut capabilities = ClientCapabilities::default();
        if self.tasks {
            capabilities.extensions =
                Some(ExtensionCapabilities::from([(TASKS_EXTENSION_ID.to_owned(), JsonObject::new())]));
        }
        ClientConfig::new(capabilities, Implementation::new("conveyor-rmcp-e2e", "1"))
    }
}

/// A Redis and a `conveyor up --fixtures` of the test's own; dropping it stops both.
struct Stack {
    conveyor: Conveyor,
    _redis: RedisServer,
}

fn stack() -> Stack {
    let redis = RedisServer::start().expect("redis-server starts");
    let conveyor = Conveyor::up(&redis.url(), &["--fixtures"]).expect("conveyor up starts");
    Stack { conveyor, _redis: redis }
}

type Session = RunningService<RoleClient, Client>;

/// Connects rmcp with the 2026-07-28 lifecycle: `server/discover`, then per-request `_meta`.
async fn connect(stack: &Stack, client: Client) -> Session {
    let transport = StreamableHttpClientTransport::from_uri(stack.conveyor.mcp_url());
    let session = client
        .serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] },
        )
        .await
        .unwrap_or_else(|e| panic!("rmcp connects: {e}\nconveyor log:\n{}", stack.conveyor.log_text()));
    let info = session.peer_info().expect("server info after discover");
    assert_eq!(info.protocol_version, ProtocolVersion::V_2026_07_28);
    assert!(info.capabilities.supports_tasks(), "the server declares the tasks extension");
    session
}

fn arguments(value: Value) -> JsonObject {
    value.as_object().cloned().expect("arguments are an object")
}

fn call(name: &'static str, args: Value) -> CallToolRequestParams {
    CallToolRequestParams::new(name).with_arguments(arguments(args))
}

/// The first text block of a tool result.
fn text_of(result: &CallToolResult) -> String {
    result.content.iter().find_map(|c| c.as_text().map(|t| t.text.clone())).unwrap_or_default()
}

fn mcp_error(error: ServiceError) -> ErrorData {
    match error {
        ServiceError::McpError(e) => e,
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}

async fn expect_task(session: &Session, params: CallToolRequestParams) -> CreateTaskResult {
    match session.call_tool_once(params).await.expect("tools/call answers") {
        CallToolResponse::Task(task) => task,
        other => panic!("expected a task, got {other:?}"),
    }
}

async fn expect_complete(session: &Session, params: CallToolRequestParams) -> CallToolResult {
    match session.call_tool_once(params).await.expect("tools/call answers") {
        CallToolResponse::Complete(result) => result,
        other => panic!("expected a complete result, got {other:?}"),
    }
}

/// Polls `tasks/get` at the task's poll interval until it is terminal or `within` passes.
async fn wait_terminal(session: &Session, task: &CreateTaskResult, within: Duration) -> DetailedTask {
    let interval = Duration::from_millis(task.task.poll_interval_ms.unwrap_or(100).clamp(10, 500));
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let got =
            session.get_task(GetTaskParams::new(task.task.task_id.clone())).await.expect("tasks/get answers");
        assert_eq!(got.task.task.task_id, task.task.task_id);
        assert!(got.result_type.is_complete(), "tasks/get is a complete result");
        if got.task.status().is_terminal() {
            return got.task;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "task {} still {:?} after {within:?}",
            task.task.task_id,
            got.task.status()
        );
        tokio::time::sleep(interval).await;
    }
}

fn completed_result(task: DetailedTask) -> CallToolResult {
    match task.payload {
        TaskPayload::Completed { result } => {
            serde_json::from_value(Value::Object(result)).expect("the inlined result is a CallToolResult")
        }
        other => panic!("expected a completed task, got {other:?}"),
    }
}

#[tokio::test]
async fn lists_the_fixture_tools() {
    let stack = stack();
    let session = connect(&stack, Client::with_tasks()).await;
    let listed = session.list_tools(None).await.expect("tools/list answers");
    let names: Vec<&str> = listed.tools.iter().map(|t| t.name.as_ref()).collect();
    for expected in ["greet", "slow_compute", "failing_job", "protocol_error_job"] {
        assert!(names.contains(&expected), "{expected} is listed: {names:?}");
    }
    assert!(listed.ttl_ms.is_some(), "a 2026-07-28 list carries a cache hint");
    let greet = listed.tools.iter().find(|t| t.name == "greet").expect("greet");
    assert_eq!(greet.input_schema.get("type"), Some(&json!("object")));
    session.cancel().await.expect("client stops");
}

#[tokio::test]
async fn greet_answers_directly_even_to_a_tasks_client() {
    let stack = stack();
    let session = connect(&stack, Client::with_tasks()).await;
    let result = expect_complete(&session, call("greet", json!({"name": "Rust"}))).await;
    assert_eq!(text_of(&result), "Hello, Rust!");
    assert_ne!(result.is_error, Some(true));
    assert_eq!(result.result_type, Some(ResultType::COMPLETE));
    session.cancel().await.expect("client stops");
}

#[tokio::test]
async fn slow_compute_runs_as_a_task_and_completes() {
    let stack = stack();
    let session = connect(&stack, Client::with_tasks()).await;
    let task = expect_task(&session, call("slow_compute", json!({"seconds": 1, "label": "rmcp"}))).await;
    assert_eq!(task.result_type, ResultType::TASK);
    assert!(task.task.ttl_ms.is_some_and(|ttl| ttl > 0), "ttlMs is set: {task:?}");
    assert!(!task.task.task_id.is_empty());
    assert_eq!(task.task.status, TaskStatus::Working);
    let done = wait_terminal(&session, &task, Duration::from_secs(20)).await;
    let result = completed_result(done);
    assert_eq!(text_of(&result), "computed rmcp");
    assert_ne!(result.is_error, Some(true));
    session.cancel().await.expect("client stops");
}

#[tokio::test]
async fn a_tool_error_completes_and_a_protocol_error_fails() {
    let stack = stack();
    let session = connect(&stack, Client::with_tasks()).await;

    let failing = expect_task(&session, call("failing_job", json!({}))).await;
    let protocol = expect_task(&session, call("protocol_error_job", json!({}))).await;

    let result = completed_result(wait_terminal(&session, &failing, Duration::from_secs(20)).await);
    assert_eq!(result.is_error, Some(true), "a tool error is a completed task with isError: {result:?}");
    assert_eq!(text_of(&result), "failing_job failed");

    let failed = wait_terminal(&session, &protocol, Duration::from_secs(20)).await;
    match failed.payload {
        TaskPayload::Failed { error } => {
            assert_eq!(error.get("code"), Some(&json!(-32603)), "{error:?}");
            assert!(error.get("message").and_then(Value::as_str).is_some(), "{error:?}");
        }
        other => panic!("expected a failed task, got {other:?}"),
    }
    session.cancel().await.expect("client stops");
}

#[tokio::test]
async fn cancelling_a_task_acks_settles_and_stays_idempotent() {
    let stack = stack();
    let session = connect(&stack, Client::with_tasks()).await;
    let task = expect_task(&session, call("slow_compute", json!({"seconds": 30}))).await;
    let id = task.task.task_id.clone();

    session.cancel_task(CancelTaskParams::new(id.clone())).await.expect("tasks/cancel acks");
    let settled = wait_terminal(&session, &task, Duration::from_secs(2)).await;
    assert_eq!(settled.status(), TaskStatus::Cancelled);
    assert_eq!(settled.payload, TaskPayload::Cancelled);

    session.cancel_task(CancelTaskParams::new(id.clone())).await.expect("a second tasks/cancel still acks");
    let again = session.get_task(GetTaskParams::new(id)).await.expect("tasks/get answers");
    assert_eq!(again.task.status(), TaskStatus::Cancelled, "a cancelled task stays cancelled");
    session.cancel().await.expect("client stops");
}

#[tokio::test]
async fn without_the_extension_tasks_are_refused_or_run_synchronously() {
    let stack = stack();
    let session = connect(&stack, Client::without_tasks()).await;

    let refused = mcp_error(
        session
            .call_tool_once(call("failing_job", json!({})))
            .await
            .expect_err("a task-only tool is refused"),
    );
    assert_eq!(refused.code, ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY);
    assert_eq!(refused.code.0, -32021);
    let data = refused.data.expect("the error names what is missing");
    assert!(
        data["requiredCapabilities"]["extensions"].get(TASKS_EXTENSION_ID).is_some(),
        "requiredCapabilities names the tasks extension: {data}"
    );

    // rmcp's high-level `call_tool` refuses task replies, so this also proves no task came back.
    let result = session.call_tool(call("slow_compute", json!({"seconds": 0}))).await.expect("runs inline");
    assert_eq!(text_of(&result), "computed slow_compute");
    assert_ne!(result.is_error, Some(true));
    session.cancel().await.expect("client stops");
}

#[tokio::test]
async fn progress_arrives_on_the_response_stream() {
    let stack = stack();
    let client = Client::without_tasks();
    let session = connect(&stack, client.clone()).await;

    // rmcp puts a progress token on every request; the handle tells which one this call got.
    let request =
        ClientRequest::CallToolRequest(CallToolRequest::new(call("test_tool_with_progress", json!({}))));
    let handle = session
        .send_request_with_option(request, PeerRequestOptions::with_timeout(Duration::from_secs(30)))
        .await
        .expect("tools/call is sent");
    let token = handle.progress_token.clone();
    let result = match handle.await_response().await.expect("tools/call answers") {
        ServerResult::CallToolResult(result) => result,
        other => panic!("expected a CallToolResult, got {other:?}"),
    };
    assert_eq!(text_of(&result), "Progress test completed");

    // Notifications are handled off the response path: give the handler a moment to see them.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    let mine = loop {
        let mine: Vec<_> = client.progress().into_iter().filter(|p| p.progress_token == token).collect();
        if mine.len() >= 3 || tokio::time::Instant::now() >= deadline {
            break mine;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(mine.len() >= 3, "at least 3 progress notifications for {token:?}, got {mine:?}");
    let values: Vec<f64> = mine.iter().map(|p| p.progress).collect();
    assert!(values.windows(2).all(|w| w[0] <= w[1]), "progress never goes back: {values:?}");
    assert_eq!(values.last().copied(), Some(100.0));
    assert!(mine.iter().all(|p| p.total == Some(100.0)), "{mine:?}");
    session.cancel().await.expect("client stops");
}

#[tokio::test]
async fn an_unknown_task_is_invalid_params() {
    let stack = stack();
    let session = connect(&stack, Client::with_tasks()).await;
    let error = mcp_error(
        session.get_task(GetTaskParams::new("no-such-task")).await.expect_err("an unknown task is refused"),
    );
    assert_eq!(error.code, ErrorCode::INVALID_PARAMS);
    assert_eq!(error.code.0, -32602);
    session.cancel().await.expect("client stops");
}
