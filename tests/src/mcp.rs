//! A raw JSON-RPC client for both MCP wires, reading JSON or SSE replies.

use std::time::Duration;

use serde_json::{Value, json};

/// Capabilities of a 2026-07-28 client that takes tasks.
pub fn tasks_client_capabilities() -> Value {
    json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
}

/// What came back for one request.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    /// Notifications that arrived on the request's SSE stream before the response.
    pub notifications: Vec<Value>,
    /// The JSON-RPC response (with `result` or `error`), or `Null` when the body held none.
    pub message: Value,
    pub raw: String,
    /// The `Mcp-Session-Id` header of the response, if any (2025-11-25 `initialize`).
    pub session_id: Option<String>,
}

impl Reply {
    pub fn result(&self) -> &Value {
        &self.message["result"]
    }

    /// The error code, if the reply is an error.
    pub fn error_code(&self) -> Option<i64> {
        self.message["error"]["code"].as_i64()
    }
}

/// A client of one endpoint.
#[derive(Clone)]
pub struct Mcp {
    http: reqwest::Client,
    pub url: String,
    next_id: std::sync::Arc<std::sync::atomic::AtomicU64>,
    bearer: Option<String>,
}

impl Mcp {
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            http: reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap_or_default(),
            url: url.into(),
            next_id: Default::default(),
            bearer: None,
        }
    }

    /// The same client, sending `Authorization: Bearer <key>` with every request.
    pub fn with_api_key(mut self, key: &str) -> Self {
        self.bearer = Some(key.to_owned());
        self
    }

    fn id(&self) -> u64 {
        self.next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1
    }

    /// Sends a raw body with the given headers.
    pub async fn post_raw(
        &self,
        headers: &[(&str, &str)],
        body: impl Into<reqwest::Body>,
    ) -> anyhow::Result<Reply> {
        let mut header_map = reqwest::header::HeaderMap::new();
        header_map.insert("content-type", reqwest::header::HeaderValue::from_static("application/json"));
        header_map.insert(
            "accept",
            reqwest::header::HeaderValue::from_static("application/json, text/event-stream"),
        );
        if let Some(key) = &self.bearer {
            header_map.insert("authorization", format!("Bearer {key}").parse()?);
        }
        for (name, value) in headers {
            // Given headers replace the defaults, so a test can send a wrong Content-Type.
            header_map.insert(reqwest::header::HeaderName::from_bytes(name.as_bytes())?, value.parse()?);
        }
        let request = self.http.post(&self.url).headers(header_map);
        let response = request.body(body).send().await?;
        let status = response.status().as_u16();
        let session_id =
            response.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_owned);
        let is_sse = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let raw = response.text().await?;
        let mut notifications = Vec::new();
        let mut message = Value::Null;
        if is_sse {
            for line in raw.lines() {
                let Some(data) = line.strip_prefix("data:") else { continue };
                let Ok(value) = serde_json::from_str::<Value>(data.trim()) else { continue };
                if value.get("id").is_some() {
                    message = value;
                } else {
                    notifications.push(value);
                }
            }
        } else {
            message = serde_json::from_str(&raw).unwrap_or(Value::Null);
        }
        Ok(Reply { status, notifications, message, raw, session_id })
    }

    /// A 2025-11-25 request (the client is assumed to have run `initialize`).
    pub async fn call_2025(&self, method: &str, params: Value) -> anyhow::Result<Reply> {
        let body = json!({"jsonrpc": "2.0", "id": self.id(), "method": method, "params": params});
        self.post_raw(&[("mcp-protocol-version", "2025-11-25")], body.to_string()).await
    }

    /// A 2026-07-28 request with the given client capabilities, and the routing headers it needs.
    pub async fn call_2026(
        &self,
        method: &str,
        mut params: Value,
        capabilities: Value,
    ) -> anyhow::Result<Reply> {
        let meta = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "conveyor-tests", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": capabilities,
        });
        match params.get_mut("_meta").and_then(Value::as_object_mut) {
            Some(existing) => {
                if let Some(m) = meta.as_object() {
                    existing.extend(m.clone());
                }
            }
            None => params["_meta"] = meta,
        }
        let name = match method {
            "tools/call" => params["name"].as_str().map(str::to_owned),
            "tasks/get" | "tasks/update" | "tasks/cancel" => params["taskId"].as_str().map(str::to_owned),
            "resources/read" => params["uri"].as_str().map(str::to_owned),
            "prompts/get" => params["name"].as_str().map(str::to_owned),
            _ => None,
        };
        let body = json!({"jsonrpc": "2.0", "id": self.id(), "method": method, "params": params});
        let mut headers = vec![("mcp-protocol-version", "2026-07-28"), ("mcp-method", method)];
        if let Some(name) = &name {
            headers.push(("mcp-name", name.as_str()));
        }
        self.post_raw(&headers, body.to_string()).await
    }

    /// Waits until `tools/list` names `tool` (workers publish their tools when they start).
    pub async fn wait_for_tool(&self, tool: &str, timeout: Duration) -> anyhow::Result<()> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Ok(reply) = self.call_2025("tools/list", json!({})).await
                && reply.result()["tools"]
                    .as_array()
                    .is_some_and(|tools| tools.iter().any(|t| t["name"] == tool))
            {
                return Ok(());
            }
            anyhow::ensure!(std::time::Instant::now() < deadline, "tools/list never named `{tool}`");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `GET <base>/<path>`'s status.
    pub async fn get_status(&self, path: &str) -> anyhow::Result<u16> {
        let base = self.url.trim_end_matches("/mcp");
        Ok(self.http.get(format!("{base}{path}")).send().await?.status().as_u16())
    }
}

/// Waits up to 60 s until `tools/list` on `mcp` names every one of `tools` (workers publish their
/// tools when they start); panics with the tool that never appeared.
pub async fn wait_for_tools(mcp: &Mcp, tools: &[&str]) {
    for tool in tools {
        if let Err(e) = mcp.wait_for_tool(tool, Duration::from_secs(60)).await {
            panic!("the workers' tools never appeared: {e}");
        }
    }
}

/// A 2025-11-25 task-augmented `tools/call` (TTL 10 minutes); the new task's id. Panics when the
/// call fails or answers no task.
pub async fn create_2025(mcp: &Mcp, tool: &str, arguments: Value) -> String {
    let reply = mcp
        .call_2025("tools/call", json!({"name": tool, "arguments": arguments, "task": {"ttl": 600_000}}))
        .await
        .unwrap_or_else(|e| panic!("tools/call {tool}: {e}"));
    reply.result()["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("tools/call {tool} answered no task: {}", reply.raw))
        .to_owned()
}

/// A task's status by 2025-11-25 `tasks/get`. Panics when the call fails or answers no status.
pub async fn status_2025(mcp: &Mcp, task_id: &str) -> String {
    let reply = mcp
        .call_2025("tasks/get", json!({"taskId": task_id}))
        .await
        .unwrap_or_else(|e| panic!("tasks/get {task_id}: {e}"));
    reply.result()["status"].as_str().unwrap_or_else(|| panic!("no status in {}", reply.raw)).to_owned()
}

/// A 2026-07-28 `tools/call` of `tool` that the gateway answers with a task; the task's id. Panics
/// when the call fails or answers anything but a task.
pub async fn create_2026(mcp: &Mcp, tool: &str, arguments: Value, capabilities: Value) -> String {
    let reply = mcp
        .call_2026("tools/call", json!({"name": tool, "arguments": arguments}), capabilities)
        .await
        .unwrap_or_else(|e| panic!("tools/call {tool}: {e}"));
    assert_eq!(reply.result()["resultType"], "task", "tools/call {tool}: {}", reply.raw);
    reply.result()["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("tools/call {tool} answered no task id: {}", reply.raw))
        .to_owned()
}

/// A task by 2026-07-28 `tasks/get` with `capabilities`: the detailed task. Panics when the call
/// fails or answers an error.
pub async fn get_2026(mcp: &Mcp, task_id: &str, capabilities: &Value) -> Value {
    let reply = mcp
        .call_2026("tasks/get", json!({"taskId": task_id}), capabilities.clone())
        .await
        .unwrap_or_else(|e| panic!("tasks/get {task_id}: {e}"));
    assert!(reply.error_code().is_none(), "tasks/get {task_id} failed: {}", reply.raw);
    reply.result().clone()
}

/// Whether a task in `status` has ended.
fn is_terminal(status: &str) -> bool {
    ["completed", "failed", "cancelled"].contains(&status)
}

/// Polls [`get_2026`] until the task has `status`, and returns the detailed task. Panics at once
/// when the task ends in another status (it will not change again), and after `within`.
pub async fn wait_status(
    mcp: &Mcp,
    task_id: &str,
    status: &str,
    capabilities: &Value,
    within: Duration,
) -> Value {
    let deadline = std::time::Instant::now() + within;
    loop {
        let got = get_2026(mcp, task_id, capabilities).await;
        if got["status"] == status {
            return got;
        }
        let now = got["status"].as_str().unwrap_or_default();
        assert!(!is_terminal(now), "task {task_id} ended {now} instead of becoming {status}: {got}");
        assert!(std::time::Instant::now() < deadline, "task {task_id} never became {status}: {got}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Polls [`get_2026`] (as a client that takes tasks) until the task has ended, and returns the
/// detailed task. Panics after `within`.
pub async fn settle(mcp: &Mcp, task_id: &str, within: Duration) -> Value {
    let capabilities = tasks_client_capabilities();
    let deadline = std::time::Instant::now() + within;
    loop {
        let got = get_2026(mcp, task_id, &capabilities).await;
        if is_terminal(got["status"].as_str().unwrap_or_default()) {
            return got;
        }
        assert!(std::time::Instant::now() < deadline, "task {task_id} did not end within {within:?}: {got}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
