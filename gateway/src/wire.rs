//! The two MCP revisions Conveyor serves, how a request says which one it speaks, and the task
//! shapes of each. 2026-07-28 shapes come from `rmcp::model`; rmcp 3 has no 2025-11-25 task types,
//! so those few shapes are built here.

use axum::http::{HeaderMap, StatusCode};
use conveyor_shared::model::{TaskRecord, TaskStatus, iso8601};
use rmcp::model::{self, DetailedTask, ErrorCode, GetTaskResult, ProtocolVersion, TaskPayload};
use serde_json::{Map, Value, json};

use crate::rpc::RpcFailure;

/// `_meta` key that carries the protocol version on every 2026-07-28 request.
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key that carries the client's capabilities on every 2026-07-28 request.
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key that ties a 2025-11-25 result to its task.
pub const META_RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// Protocol versions served with `initialize`, newest first.
pub const INITIALIZE_VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// Which wire a request speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// 2025-11-25 (and earlier `initialize` revisions) with experimental Tasks.
    V2025,
    /// 2026-07-28 with the Tasks extension.
    V2026,
}

impl Wire {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V2025 => "2025-11-25",
            Self::V2026 => "2026-07-28",
        }
    }

    /// Reads the revision from the request: `_meta` protocol version first (2026-07-28 puts it
    /// on every request), then the method, then the `MCP-Protocol-Version` header.
    pub fn detect(method: &str, params: &Value, headers: &HeaderMap) -> Result<Self, RpcFailure> {
        let header = headers.get("mcp-protocol-version").map(|v| v.to_str().unwrap_or("").to_owned());
        let meta = params.pointer(&format!("/_meta/{}", META_PROTOCOL_VERSION.replace('/', "~1")));
        if let Some(meta) = meta {
            let Some(version) = meta.as_str() else {
                return Err(RpcFailure::invalid_params(format!(
                    "`_meta.{META_PROTOCOL_VERSION}` must be a string"
                )));
            };
            if let Some(header) = &header
                && header != version
            {
                return Err(RpcFailure::new(
                    ErrorCode::HEADER_MISMATCH,
                    format!("Header mismatch: MCP-Protocol-Version `{header}` differs from _meta protocol version `{version}`"),
                    None,
                )
                .with_status(StatusCode::BAD_REQUEST));
            }
            return Self::from_version(version);
        }
        if method == "server/discover" {
            return Ok(Self::V2026);
        }
        if method == "initialize" {
            return Ok(Self::V2025);
        }
        match header {
            None => Ok(Self::V2025),
            Some(version) => Self::from_version(&version).map_err(|f| f.with_status(StatusCode::BAD_REQUEST)),
        }
    }

    fn from_version(version: &str) -> Result<Self, RpcFailure> {
        if version == ProtocolVersion::V_2026_07_28.as_str() {
            Ok(Self::V2026)
        } else if INITIALIZE_VERSIONS.contains(&version) {
            Ok(Self::V2025)
        } else {
            Err(RpcFailure::new(
                ErrorCode::UNSUPPORTED_PROTOCOL_VERSION,
                format!("Unsupported protocol version `{version}`"),
                Some(json!({"supported": supported_versions()})),
            ))
        }
    }
}

/// Every version this gateway speaks, newest first.
pub fn supported_versions() -> Vec<&'static str> {
    let mut all = vec![ProtocolVersion::V_2026_07_28.as_str()];
    all.extend(INITIALIZE_VERSIONS);
    all
}

/// A 2025-11-25 `Task`.
pub fn task_2025(task: &TaskRecord) -> Value {
    let mut out = Map::new();
    out.insert("taskId".into(), json!(task.task_id));
    out.insert("status".into(), json!(task.status.as_str()));
    if let Some(message) = &task.status_message {
        out.insert("statusMessage".into(), json!(message));
    }
    out.insert("createdAt".into(), json!(iso8601(task.created_at_ms)));
    out.insert("lastUpdatedAt".into(), json!(iso8601(task.updated_at_ms)));
    out.insert("ttl".into(), json!(task.ttl_ms));
    out.insert("pollInterval".into(), json!(task.poll_interval_ms));
    Value::Object(out)
}

/// A 2026-07-28 `Task`.
pub fn task_2026(task: &TaskRecord) -> model::Task {
    let status = match task.status {
        TaskStatus::Working => model::TaskStatus::Working,
        TaskStatus::InputRequired => model::TaskStatus::InputRequired,
        TaskStatus::Completed => model::TaskStatus::Completed,
        TaskStatus::Failed => model::TaskStatus::Failed,
        TaskStatus::Cancelled => model::TaskStatus::Cancelled,
    };
    let mut out = model::Task::new(
        task.task_id.clone(),
        status,
        iso8601(task.created_at_ms),
        iso8601(task.updated_at_ms),
    )
    .with_ttl_ms(task.ttl_ms)
    .with_poll_interval_ms(task.poll_interval_ms);
    out.status_message = task.status_message.clone();
    out
}

/// A 2026-07-28 `tasks/get` result: the task with its result or error inlined.
pub fn detailed_2026(task: &TaskRecord) -> GetTaskResult {
    let object = |v: &Value| v.as_object().cloned().unwrap_or_default();
    let payload = match task.status {
        TaskStatus::Working => TaskPayload::Working,
        TaskStatus::InputRequired => TaskPayload::InputRequired { input_requests: Default::default() },
        TaskStatus::Cancelled => TaskPayload::Cancelled,
        TaskStatus::Completed => {
            TaskPayload::Completed { result: task.result.as_ref().map(object).unwrap_or_default() }
        }
        TaskStatus::Failed => match (&task.error, &task.result) {
            // A 2025-11-25 client's tool error settles as failed with a result; on this wire a
            // tool error is a completed task whose result says isError.
            (None, Some(result)) => TaskPayload::Completed { result: object(result) },
            _ => {
                let error = conveyor_shared::store::task_error(task);
                TaskPayload::Failed { error: object(&json!(error)) }
            }
        },
    };
    GetTaskResult::new(DetailedTask::new(task_2026(task), payload))
}

/// The create result of each wire.
pub fn create_result(wire: Wire, task: &TaskRecord) -> Value {
    match wire {
        Wire::V2025 => json!({"task": task_2025(task)}),
        Wire::V2026 => json!(model::CreateTaskResult::new(task_2026(task))),
    }
}

#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;

    pub fn record(status: TaskStatus) -> TaskRecord {
        TaskRecord {
            task_id: "t1".into(),
            status,
            status_message: Some("m".into()),
            created_at_ms: 0,
            updated_at_ms: 1000,
            ttl_ms: 60_000,
            poll_interval_ms: 500,
            owner: "anonymous".into(),
            tool: "greet".into(),
            arguments: json!({}),
            wire: "2026-07-28".into(),
            progress_token: None,
            traceparent: None,
            progress: None,
            total: None,
            result: Some(json!({"content": [], "isError": false})),
            error: None,
            input_requests: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::record;
    use super::*;

    #[test]
    fn shapes_of_2025() {
        let t = task_2025(&record(TaskStatus::Working));
        assert_eq!(t["ttl"], 60_000);
        assert_eq!(t["pollInterval"], 500);
        assert_eq!(t["createdAt"], "1970-01-01T00:00:00.000Z");
        let created = create_result(Wire::V2025, &record(TaskStatus::Working));
        assert_eq!(created["task"]["taskId"], "t1");
    }

    #[test]
    fn shapes_of_2026() {
        let created = create_result(Wire::V2026, &record(TaskStatus::Working));
        assert_eq!(created["resultType"], "task");
        assert_eq!(created["ttlMs"], 60_000);
        assert_eq!(created["pollIntervalMs"], 500);
        let got = serde_json::to_value(detailed_2026(&record(TaskStatus::Completed))).expect("serializable");
        assert_eq!(got["resultType"], "complete");
        assert_eq!(got["result"]["isError"], false);
    }
}
