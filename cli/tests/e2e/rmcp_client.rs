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

/// `conveyor up` with the fixtures, once its workers have published them: on a busy machine `up`
/// may serve before its workers have announced themselves.
async fn stack() -> Stack {
    let redis = RedisServer::start().expect("redis-server starts");
    let conveyor = Conveyor::up(&redis.url(), &["--fixtures"]).expect("conveyor up starts");
    conveyor_tests::Mcp::new(conveyor.mcp_url())
        .wait_for_tool("test_input_required_result_elicitation", Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("{e}\nconveyor log:\n{}", conveyor.log_text()));
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
    let stack = stack().await;
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
    let stack = stack().await;
    let session = connect(&stack, Client::with_tasks()).await;
    let result = expect_complete(&session, call("greet", json!({"name": "Rust"}))).await;
    assert_eq!(text_of(&result), "Hello, Rust!");
    assert_ne!(result.is_error, Some(true));
    assert_eq!(result.result_type, Some(ResultType::COMPLETE));
    session.cancel().await.expect("client stops");
}

#[tokio::test]
async fn slow_compute_runs_as_a_task_and_completes() {
    let stack = stack().await;
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
    let stack = stack().await;
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
    let stack = stack().await;
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
    let stack = stack().await;
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
    let stack = stack().await;
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
    let stack = stack().await;
    let session = connect(&stack, Client::with_tasks()).await;
    let error = mcp_error(
        session.get_task(GetTaskParams::new("no-such-task")).await.expect_err("an unknown task is refused"),
    );
    assert_eq!(error.code, ErrorCode::INVALID_PARAMS);
    assert_eq!(error.code.0, -32602);
    session.cancel().await.expect("client stops");
}

/// Elicitation on 2026-07-28, both ways Conveyor asks for it: (a) multi-round-trip requests (MRTR)
/// on a synchronous `tools/call`, which answers `resultType: "input_required"` with
/// `inputRequests` and a `requestState` and is called again with `inputResponses` and that state;
/// (b) a task that waits in `input_required` until `tasks/update` carries the answer. The client
/// declares form elicitation and the tasks extension in `get_info`, which rmcp sends in every
/// request's `_meta` on this revision; a client that declares no elicitation is refused.
///
/// rmcp 3.11 drives (a) automatically: `RunningService::call_tool` hands each `inputRequests` entry
/// to `ClientHandler::create_elicitation` and retries with the answers and the echoed
/// `requestState` (up to `DEFAULT_MRTR_MAX_ROUNDS` rounds). It does not drive (b): `call_tool`
/// refuses a task reply and nothing in rmcp polls a task or answers its `inputRequests`, so the
/// test drives those rounds itself with rmcp's typed `call_tool_once`, `get_task` and
/// `update_task`, and hands the task's request to the same handler's `create_elicitation`.
#[tokio::test]
async fn elicitation_answers_a_synchronous_call_by_mrtr_and_a_task_by_tasks_update() {
    use rmcp::model::{
        ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationCapability,
        FormElicitationCapability, InputRequest, InputResponses, NumberOrString, UpdateTaskParams,
    };
    use rmcp::service::RequestContext;

    /// Answers form elicitations as a person would (a name, a confirmation) and records each
    /// message it was asked.
    #[derive(Clone, Default)]
    struct Answering {
        asked: Arc<Mutex<Vec<String>>>,
    }

    impl Answering {
        fn asked(&self) -> Vec<String> {
            self.asked.lock().map(|a| a.clone()).unwrap_or_default()
        }
    }

    impl ClientHandler for Answering {
        async fn create_elicitation(
            &self,
            request: ElicitRequestParams,
            _context: RequestContext<RoleClient>,
        ) -> Result<ElicitResult, ErrorData> {
            let ElicitRequestParams::FormElicitationParams { message, requested_schema, .. } = request else {
                return Ok(ElicitResult::new(ElicitationAction::Decline));
            };
            if let Ok(mut asked) = self.asked.lock() {
                asked.push(message);
            }
            let mut content = JsonObject::new();
            for field in requested_schema.properties.keys() {
                let answer = match field.as_str() {
                    "name" => json!("Ferris"),
                    "confirm" => json!(true),
                    _ => return Ok(ElicitResult::new(ElicitationAction::Decline)),
                };
                content.insert(field.clone(), answer);
            }
            Ok(ElicitResult::new(ElicitationAction::Accept).with_content(Value::Object(content)))
        }

        fn get_info(&self) -> ClientConfig {
            let mut capabilities = ClientCapabilities::default();
            capabilities.elicitation =
                Some(ElicitationCapability::new().with_form(FormElicitationCapability::new()));
            capabilities.extensions =
                Some(ExtensionCapabilities::from([(TASKS_EXTENSION_ID.to_owned(), JsonObject::new())]));
            ClientConfig::new(capabilities, Implementation::new("conveyor-rmcp-e2e-elicitation", "1"))
        }
    }

    let stack = stack().await;

    // Without the elicitation capability in `_meta`, the tool may not ask, and the call says why.
    let mute = connect(&stack, Client::with_tasks()).await;
    let refused = mcp_error(
        mute.call_tool_once(call("test_input_required_result_elicitation", json!({})))
            .await
            .expect_err("a client that cannot answer is not asked"),
    );
    assert_eq!(refused.code, ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY, "{refused:?}");
    let data = refused.data.clone().unwrap_or_default();
    assert!(data["requiredCapabilities"].get("elicitation").is_some(), "names elicitation: {refused:?}");
    mute.cancel().await.expect("client stops");

    let answering = Answering::default();
    let session = answering
        .clone()
        .serve_with_lifecycle(
            StreamableHttpClientTransport::from_uri(stack.conveyor.mcp_url()),
            ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] },
        )
        .await
        .unwrap_or_else(|e| panic!("rmcp connects: {e}\nconveyor log:\n{}", stack.conveyor.log_text()));
    assert_eq!(session.peer_info().expect("server info").protocol_version, ProtocolVersion::V_2026_07_28);

    // (a) One round by hand first, to see the wire: an elicitation under `user_name`, and a state.
    let first = match session
        .call_tool_once(call("test_input_required_result_elicitation", json!({})))
        .await
        .expect("tools/call answers")
    {
        CallToolResponse::InputRequired(first) => first,
        other => panic!("expected input_required, got {other:?}"),
    };
    assert!(first.result_type.is_input_required());
    assert!(first.request_state.as_deref().is_some_and(|s| !s.is_empty()), "a requestState: {first:?}");
    let requests = first.input_requests.clone().expect("inputRequests");
    assert_eq!(requests.keys().collect::<Vec<_>>(), ["user_name"]);
    assert!(matches!(requests["user_name"], InputRequest::Elicitation(_)), "{requests:?}");
    assert!(answering.asked().is_empty(), "call_tool_once answers nothing by itself");

    // Then rmcp's own driver: the handler answers, the call is retried, and the greeting comes back.
    let greeted = session
        .call_tool(call("test_input_required_result_elicitation", json!({})))
        .await
        .unwrap_or_else(|e| panic!("call_tool drives the rounds: {e}\nlog:\n{}", stack.conveyor.log_text()));
    assert_eq!(text_of(&greeted), "Hello, Ferris!");
    assert_ne!(greeted.is_error, Some(true));
    assert_eq!(answering.asked(), ["What is your name?"]);

    // (b) rmcp's `call_tool` does not take tasks: a task-only tool is an unexpected response.
    let not_driven = session.call_tool(call("confirm_delete", json!({"filename": "draft.md"}))).await;
    assert!(matches!(not_driven, Err(ServiceError::UnexpectedResponse)), "{not_driven:?}");

    let task = match session
        .call_tool_once(call("confirm_delete", json!({"filename": "report.txt"})))
        .await
        .expect("tools/call answers")
    {
        CallToolResponse::Task(task) => task,
        other => panic!("expected a task, got {other:?}"),
    };
    let id = task.task.task_id.clone();
    let interval = Duration::from_millis(task.task.poll_interval_ms.unwrap_or(100).clamp(10, 200));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let waiting = loop {
        let got = session.get_task(GetTaskParams::new(id.clone())).await.expect("tasks/get answers");
        match got.task.payload {
            TaskPayload::InputRequired { input_requests } => break input_requests,
            TaskPayload::Working => {}
            other => panic!("task {id} ended before it asked: {other:?}"),
        }
        assert!(tokio::time::Instant::now() < deadline, "task {id} never asked for input");
        tokio::time::sleep(interval).await;
    };
    assert_eq!(waiting.keys().collect::<Vec<_>>(), ["confirm"]);
    let mut responses = InputResponses::new();
    for (key, request) in waiting {
        let InputRequest::Elicitation(request) = request else { panic!("{key} is not an elicitation") };
        let context =
            RequestContext::new(NumberOrString::String(key.as_str().into()), session.peer().clone());
        let answer = session.service().create_elicitation(request.params, context).await.expect("answers");
        responses.insert(key, serde_json::to_value(answer).expect("an ElicitResult serializes"));
    }
    assert_eq!(responses["confirm"], json!({"action": "accept", "content": {"confirm": true}}));
    session.update_task(UpdateTaskParams::new(id.clone(), responses)).await.expect("tasks/update acks");
    assert_eq!(answering.asked(), ["What is your name?", "Delete report.txt?"]);

    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let result = loop {
        let got = session.get_task(GetTaskParams::new(id.clone())).await.expect("tasks/get answers");
        match got.task.payload {
            TaskPayload::Completed { .. } => break completed_result(got.task),
            TaskPayload::Working | TaskPayload::InputRequired { .. } => {}
            other => panic!("task {id} did not complete: {other:?}"),
        }
        assert!(tokio::time::Instant::now() < deadline, "task {id} never completed");
        tokio::time::sleep(interval).await;
    };
    assert_eq!(text_of(&result), "Deleted report.txt");
    assert_ne!(result.is_error, Some(true));
    session.cancel().await.expect("client stops");
}
