//! The two MCP revisions Conveyor serves, how a request says which one it speaks, and the task
//! shapes of each. 2026-07-28 shapes come from `rmcp::model`; rmcp 3 has no 2025-11-25 task types,
//! so those few shapes are built here.

use axum::http::{HeaderMap, StatusCode};
use base64::Engine;
use conveyor_shared::model::{TaskRecord, TaskStatus, TaskStatusRecord, iso8601};
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

    /// Which wire a request speaks. A request is 2026-07-28 (stateless, per-request `_meta`) when
    /// its `_meta` names a protocol version, when it is `server/discover`, or when its
    /// `MCP-Protocol-Version` header names anything but an `initialize`-era version. Everything
    /// else is 2025-11-25 traffic of a client that ran `initialize`.
    pub fn detect(method: &str, params: &Value, headers: &HeaderMap) -> Self {
        let header = header_value(headers, "mcp-protocol-version");
        let meta_version = meta(params).and_then(|m| m.get(META_PROTOCOL_VERSION));
        let stateless = meta_version.is_some()
            || method == "server/discover"
            || header.as_deref().is_some_and(|h| !INITIALIZE_VERSIONS.contains(&h));
        if stateless { Self::V2026 } else { Self::V2025 }
    }
}

/// A request's `_meta` object, if any.
pub fn meta(params: &Value) -> Option<&Map<String, Value>> {
    params.get("_meta").and_then(Value::as_object)
}

/// One header's value, trimmed of surrounding whitespace; `None` when absent or not text.
pub fn header_value(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(|v| v.trim().to_owned())
}

/// Checks a 2026-07-28 request before dispatch, in the order the specification's conformance
/// suite expects: protocol version header, required `_meta`, version agreement and support, then
/// the SEP-2243 routing headers (`Mcp-Method` always; `Mcp-Name` where the method names a target).
pub fn check_2026(method: &str, params: &Value, headers: &HeaderMap) -> Result<(), RpcFailure> {
    let mismatch = |message: String| {
        RpcFailure::new(ErrorCode::HEADER_MISMATCH, message, None).with_status(StatusCode::BAD_REQUEST)
    };
    let Some(header) = header_value(headers, "mcp-protocol-version") else {
        return Err(mismatch("Header mismatch: missing required MCP-Protocol-Version header".to_owned()));
    };
    let meta = meta(params);
    let version = meta.and_then(|m| m.get(META_PROTOCOL_VERSION)).and_then(Value::as_str);
    let capabilities = meta.and_then(|m| m.get(META_CLIENT_CAPABILITIES)).filter(|c| c.is_object());
    let (Some(version), Some(_)) = (version, capabilities) else {
        return Err(RpcFailure::invalid_params(format!(
            "Invalid params: every request must carry `_meta` with `{META_PROTOCOL_VERSION}` (a string) and \
             `{META_CLIENT_CAPABILITIES}` (an object)"
        ))
        .with_status(StatusCode::BAD_REQUEST));
    };
    if header != version {
        return Err(mismatch(format!(
            "Header mismatch: MCP-Protocol-Version `{header}` differs from _meta protocol version `{version}`"
        )));
    }
    if version != ProtocolVersion::V_2026_07_28.as_str() {
        return Err(RpcFailure::new(
            ErrorCode::UNSUPPORTED_PROTOCOL_VERSION,
            format!(
                "Unsupported protocol version `{version}`; this endpoint speaks 2026-07-28 without initialize"
            ),
            Some(json!({"supported": [ProtocolVersion::V_2026_07_28.as_str()], "requested": version})),
        )
        .with_status(StatusCode::BAD_REQUEST));
    }
    match header_value(headers, "mcp-method") {
        None => return Err(mismatch("Header mismatch: missing required Mcp-Method header".to_owned())),
        Some(value) if value != method => {
            return Err(mismatch(format!(
                "Header mismatch: Mcp-Method `{value}` does not match body method `{method}`"
            )));
        }
        Some(_) => {}
    }
    let target = match method {
        "tools/call" | "prompts/get" => Some(("name", params.get("name"))),
        "resources/read" => Some(("uri", params.get("uri"))),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some(("taskId", params.get("taskId"))),
        _ => None,
    };
    if let Some((field, Some(Value::String(expected)))) = target {
        match header_value(headers, "mcp-name") {
            None => {
                return Err(mismatch(format!(
                    "Header mismatch: missing required Mcp-Name header for `{method}`"
                )));
            }
            Some(raw) => {
                let decoded = decode_header_value(&raw)
                    .ok_or_else(|| mismatch("Header mismatch: Mcp-Name is not valid Base64".to_owned()))?;
                if &decoded != expected {
                    return Err(mismatch(format!(
                        "Header mismatch: Mcp-Name `{decoded}` does not match `{field}` `{expected}` in the body"
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Header values that are not plain ASCII travel as `=?base64?<data>?=`.
pub fn decode_header_value(raw: &str) -> Option<String> {
    match raw.strip_prefix("=?base64?").and_then(|r| r.strip_suffix("?=")) {
        Some(encoded) => {
            let bytes = base64::engine::general_purpose::STANDARD.decode(encoded).ok()?;
            String::from_utf8(bytes).ok()
        }
        None => Some(raw.to_owned()),
    }
}

/// Every version this gateway speaks, newest first.
pub fn supported_versions() -> Vec<&'static str> {
    let mut all = vec![ProtocolVersion::V_2026_07_28.as_str()];
    all.extend(INITIALIZE_VERSIONS);
    all
}

/// A 2025-11-25 `Task`: its status and times, and how often to poll it.
pub fn task_2025(task: &TaskStatusRecord, poll_interval_ms: u64) -> Value {
    let mut out = Map::new();
    out.insert("taskId".into(), json!(task.task_id));
    out.insert("status".into(), json!(task.status.as_str()));
    if let Some(message) = &task.status_message {
        out.insert("statusMessage".into(), json!(message));
    }
    out.insert("createdAt".into(), json!(iso8601(task.created_at_ms)));
    out.insert("lastUpdatedAt".into(), json!(iso8601(task.updated_at_ms)));
    out.insert("ttl".into(), json!(task.ttl_ms));
    out.insert("pollInterval".into(), json!(poll_interval_ms));
    Value::Object(out)
}

/// A 2026-07-28 `Task`: its status and times, and how often to poll it.
pub fn task_2026(task: &TaskStatusRecord, poll_interval_ms: u64) -> model::Task {
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
    .with_poll_interval_ms(poll_interval_ms);
    out.status_message = task.status_message.clone();
    out
}

/// A 2026-07-28 `tasks/get` result: the task with its result or error inlined.
pub fn detailed_2026(task: &TaskRecord) -> GetTaskResult {
    detailed_2026_owned(task.clone())
}

/// [`detailed_2026`] of a task the caller lets go of: its result moves into the answer instead of
/// being copied (a result can be megabytes).
pub fn detailed_2026_owned(mut task: TaskRecord) -> GetTaskResult {
    let object = |v: Value| match v {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    let head = task_2026(&task.status_record(), task.call.poll_interval_ms);
    let payload = match task.status {
        TaskStatus::Working => TaskPayload::Working,
        TaskStatus::InputRequired => TaskPayload::InputRequired {
            input_requests: task
                .input_requests
                .take()
                .and_then(|r| serde_json::from_value(r).map_err(|e| tracing::warn!(task = %task.task_id, error = %e, "stored input requests are not in MCP shape")).ok())
                .unwrap_or_default(),
        },
        TaskStatus::Cancelled => TaskPayload::Cancelled,
        TaskStatus::Completed => TaskPayload::Completed { result: task.result.take().map(object).unwrap_or_default() },
        TaskStatus::Failed => match (&task.error, task.result.take()) {
            // A 2025-11-25 client's tool error settles as failed with a result; on this wire a
            // tool error is a completed task whose result says isError.
            (None, Some(result)) => TaskPayload::Completed { result: object(result) },
            _ => {
                let error = conveyor_shared::store::task_error(&task);
                TaskPayload::Failed { error: object(json!(error)) }
            }
        },
    };
    GetTaskResult::new(DetailedTask::new(head, payload))
}

/// The `Mcp-Param-*` headers of a request, by lower-cased parameter name (SEP-2243), kept for the
/// check of a tool's `x-mcp-header` parameters once the tool is known.
pub fn param_headers(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .filter_map(|(name, value)| {
            let param = name.as_str().strip_prefix("mcp-param-")?;
            Some((param.to_owned(), value.to_str().ok()?.trim().to_owned()))
        })
        .collect()
}

/// Checks the parameters a tool mirrors into headers (`"x-mcp-header": "Name"` in its input
/// schema, SEP-2243): when the argument is in the body, `Mcp-Param-Name` must carry the same value,
/// literally or as `=?base64?...?=`; a missing, undecodable or different header is refused with
/// HTTP 400 and -32020, so that what an intermediary routed on is what the tool gets.
pub fn check_param_headers(
    definition: &Value,
    arguments: &Value,
    headers: &[(String, String)],
) -> Result<(), RpcFailure> {
    let Some(properties) = definition.pointer("/inputSchema/properties").and_then(Value::as_object) else {
        return Ok(());
    };
    let mismatch = |message: String| {
        RpcFailure::new(ErrorCode::HEADER_MISMATCH, format!("Header mismatch: {message}"), None)
            .with_status(StatusCode::BAD_REQUEST)
    };
    for (param, schema) in properties {
        let Some(name) = schema.get("x-mcp-header").and_then(Value::as_str) else { continue };
        let header = headers.iter().find(|(h, _)| h.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str());
        let body = match arguments.get(param) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(v @ (Value::Number(_) | Value::Bool(_))) => Some(v.to_string()),
            Some(_) => {
                return Err(mismatch(format!(
                    "`{param}` is mirrored in Mcp-Param-{name}, so it must be a string, number or boolean"
                )));
            }
        };
        match (body, header) {
            (None, None) => {}
            (None, Some(_)) => {
                return Err(mismatch(format!(
                    "Mcp-Param-{name} is set but `{param}` is not in the arguments"
                )));
            }
            (Some(_), None) => {
                return Err(mismatch(format!(
                    "`{param}` is in the arguments but the Mcp-Param-{name} header is missing"
                )));
            }
            (Some(body), Some(header)) => {
                let value = match header.strip_prefix("=?base64?").and_then(|v| v.strip_suffix("?=")) {
                    Some(encoded) => base64::engine::general_purpose::STANDARD
                        .decode(encoded)
                        .ok()
                        .and_then(|bytes| String::from_utf8(bytes).ok())
                        .ok_or_else(|| {
                            mismatch(format!("Mcp-Param-{name} is not valid Base64 of UTF-8 text"))
                        })?,
                    None => header.to_owned(),
                };
                if value != body {
                    return Err(mismatch(format!(
                        "Mcp-Param-{name} does not match the value of `{param}` in the arguments"
                    )));
                }
            }
        }
    }
    Ok(())
}

/// The create result of each wire.
pub fn create_result(wire: Wire, task: &TaskRecord) -> Value {
    match wire {
        Wire::V2025 => json!({"task": task_2025(&task.status_record(), task.call.poll_interval_ms)}),
        Wire::V2026 => {
            json!(model::CreateTaskResult::new(task_2026(&task.status_record(), task.call.poll_interval_ms)))
        }
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

            owner: "anonymous".into(),
            tool: "greet".into(),
            call: conveyor_shared::call::CallRecord {
                wire: "2026-07-28".into(),
                arguments: json!({}),
                poll_interval_ms: 500,
                ..Default::default()
            },
            traceparent: None,
            progress: None,
            total: None,
            result: Some(json!({"content": [], "isError": false})),
            error: None,
            input_requests: None,
            input_rounds: Default::default(),
            output_node: None,
            mode: conveyor_shared::model::TaskMode::Task,
        }
    }
}

#[cfg(test)]
mod param_header_tests {
    use super::*;

    fn check(value: &str, header: Option<&str>) -> Result<(), i32> {
        let definition =
            json!({"inputSchema": {"properties": {"region": {"type": "string", "x-mcp-header": "Region"}}}});
        let headers: Vec<(String, String)> =
            header.map(|h| ("region".to_owned(), h.to_owned())).into_iter().collect();
        check_param_headers(&definition, &json!({"region": value}), &headers).map_err(|f| f.error.code.0)
    }

    #[test]
    fn mirrored_parameters_must_match_their_header_literally_or_in_base64() {
        assert_eq!(check("Hello", Some("Hello")), Ok(()));
        assert_eq!(check("Hello", Some("=?base64?SGVsbG8=?=")), Ok(()));
        assert_eq!(check("Hello", Some("=?base64?SGVsbG8?=")), Err(-32020), "padding is required");
        assert_eq!(check("Hello", Some("=?base64?SGVs!!!bG8=?=")), Err(-32020), "not the Base64 alphabet");
        assert_eq!(check("SGVsbG8=", Some("SGVsbG8=")), Ok(()), "without the wrapper a value is literal");
        assert_eq!(check("=?base64?SGVsbG8=", Some("=?base64?SGVsbG8=")), Ok(()), "no suffix: literal");
        assert_eq!(check("Hello", None), Err(-32020), "the header must be there");
        assert_eq!(check("Hello", Some("Bye")), Err(-32020));
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::record;
    use super::*;

    #[test]
    fn shapes_of_2025() {
        let working = record(TaskStatus::Working);
        let t = task_2025(&working.status_record(), working.call.poll_interval_ms);
        assert_eq!(t["ttl"], 60_000);
        assert_eq!(t["pollInterval"], 500);
        assert_eq!(t["createdAt"], "1970-01-01T00:00:00.000Z");
        let created = create_result(Wire::V2025, &record(TaskStatus::Working));
        assert_eq!(created["task"]["taskId"], "t1");
    }

    #[test]
    fn base64_header_values_decode() {
        assert_eq!(decode_header_value("=?base64?aMOpbGxv?=").as_deref(), Some("héllo"));
        assert_eq!(decode_header_value("plain").as_deref(), Some("plain"));
        assert_eq!(decode_header_value("=?base64?***?="), None);
    }

    #[test]
    fn detection_follows_meta_then_method_then_header() {
        let mut headers = HeaderMap::new();
        let meta = json!({"_meta": {META_PROTOCOL_VERSION: "2026-07-28"}});
        assert_eq!(Wire::detect("tools/list", &meta, &headers), Wire::V2026);
        assert_eq!(Wire::detect("server/discover", &json!({}), &headers), Wire::V2026);
        assert_eq!(Wire::detect("initialize", &json!({}), &headers), Wire::V2025);
        assert_eq!(Wire::detect("tools/list", &json!({}), &headers), Wire::V2025);
        headers.insert("mcp-protocol-version", "2025-11-25".parse().expect("valid header"));
        assert_eq!(
            Wire::detect("tools/list", &json!({"_meta": {"progressToken": 1}}), &headers),
            Wire::V2025
        );
        headers.insert("mcp-protocol-version", "2026-07-28".parse().expect("valid header"));
        assert_eq!(Wire::detect("tools/list", &json!({}), &headers), Wire::V2026);
    }

    #[test]
    fn checks_of_2026_run_in_order() {
        let mut headers = HeaderMap::new();
        let full = json!({"_meta": {META_PROTOCOL_VERSION: "2026-07-28", META_CLIENT_CAPABILITIES: {}}});
        let code = |r: Result<(), RpcFailure>| r.expect_err("refused").error.code.0;
        assert_eq!(code(check_2026("tools/list", &full, &headers)), -32020, "no version header");
        headers.insert("mcp-protocol-version", "2026-07-28".parse().expect("valid header"));
        assert_eq!(code(check_2026("tools/list", &json!({}), &headers)), -32602, "no _meta");
        let v999 = json!({"_meta": {META_PROTOCOL_VERSION: "v999", META_CLIENT_CAPABILITIES: {}}});
        assert_eq!(code(check_2026("tools/list", &v999, &headers)), -32020, "header and _meta differ");
        assert_eq!(code(check_2026("tools/list", &full, &headers)), -32020, "no Mcp-Method");
        headers.insert("mcp-method", "tools/list".parse().expect("valid header"));
        assert!(check_2026("tools/list", &full, &headers).is_ok());
        headers.insert("mcp-protocol-version", "v999".parse().expect("valid header"));
        let err = check_2026("tools/list", &v999, &headers).expect_err("unsupported");
        assert_eq!(err.error.code.0, -32022);
        assert_eq!(err.error.data.expect("data")["requested"], "v999");
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
