//! The call record: what a `tools/call` carries that no script decides on. The gateway builds it
//! once from the call's typed params, the task hash stores it as one field (`call`) that Lua
//! never decodes, `start_nodes` hands its text back with every node it starts, and the worker's
//! node job and tool context hold it as it is. Adding a call option is a field here and the line
//! of the gateway that fills it in; no script, key or reply changes.
//!
//! What scripts do read stays in fields of its own: status, owner, tool, mode, creation time and
//! TTL, the counts of a graph, and the trace context, which scripts copy into the stream entries
//! of the nodes they queue.

use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The protocol revision whose rule is that a tool error fails the task (the later one reports
/// it as a completed task whose result says `isError`).
pub const TOOL_ERROR_FAILS_WIRE: &str = "2025-11-25";

/// What a call carries through the task to the worker that runs it, as the task hash stores it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallRecord {
    /// The protocol revision the call came on (`2025-11-25` or `2026-07-28`).
    pub wire: String,
    /// The tool's arguments (a graph's: the graph; each node keeps its own).
    #[serde(default)]
    pub arguments: Value,
    /// How often the client is told to poll the task (ms).
    #[serde(default)]
    pub poll_interval_ms: u64,
    /// The client's progress token, a string or a number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_token: Option<Value>,
    /// The client's input capabilities (elicitation, sampling, roots) that the call's tools may
    /// use ([`crate::input::kept_capabilities`]).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub client_capabilities: Map<String, Value>,
    /// The least severe level of logged messages the client gets; `None`: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_level: Option<LogLevel>,
    /// The roots the caller may read (the access policy grants it `conveyor://roots/NAME/`),
    /// which are the roots the call's tools may read for it; `None`: every root (no access file,
    /// or a policy that restricts no root for this caller).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roots: Option<Vec<String>>,
}

impl CallRecord {
    /// The record as the task hash stores it.
    pub fn to_text(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".to_owned())
    }

    /// A record as stored; `None` when it is not one.
    pub fn from_text(text: &str) -> Result<Self, String> {
        serde_json::from_str(text).map_err(|e| format!("call record: {e}"))
    }

    /// Whether a tool error fails the task on this call's wire.
    pub fn tool_error_fails(&self) -> bool {
        self.wire == TOOL_ERROR_FAILS_WIRE
    }

    /// The client's capabilities as one JSON object.
    pub fn capabilities(&self) -> Value {
        Value::Object(self.client_capabilities.clone())
    }

    /// Whether the call's tools may read root `name` for its caller.
    pub fn may_read_root(&self, name: &str) -> bool {
        self.roots.as_ref().is_none_or(|roots| roots.iter().any(|r| r == name))
    }
}

/// The severity of a logged message: the syslog levels MCP uses, least severe first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Debug,
    Info,
    Notice,
    Warning,
    Error,
    Critical,
    Alert,
    Emergency,
}

impl LogLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Debug => "debug",
            Self::Info => "info",
            Self::Notice => "notice",
            Self::Warning => "warning",
            Self::Error => "error",
            Self::Critical => "critical",
            Self::Alert => "alert",
            Self::Emergency => "emergency",
        }
    }
}

impl FromStr for LogLevel {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        serde_json::from_value(Value::String(s.to_owned())).map_err(|_| {
            format!(
                "unknown log level {s:?}; one of debug, info, notice, warning, error, critical, alert, emergency"
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_record_round_trips_and_leaves_out_what_a_call_did_not_give() {
        let bare = CallRecord {
            wire: "2026-07-28".to_owned(),
            arguments: json!({"name": "x"}),
            poll_interval_ms: 500,
            ..CallRecord::default()
        };
        let text = bare.to_text();
        assert_eq!(text, r#"{"wire":"2026-07-28","arguments":{"name":"x"},"pollIntervalMs":500}"#);
        assert_eq!(CallRecord::from_text(&text), Ok(bare.clone()));
        let full = CallRecord {
            wire: TOOL_ERROR_FAILS_WIRE.to_owned(),
            arguments: json!({}),
            poll_interval_ms: 1,
            progress_token: Some(json!(7)),
            client_capabilities: json!({"elicitation": {}}).as_object().cloned().unwrap_or_default(),
            log_level: Some(LogLevel::Info),
            roots: Some(vec!["sample".to_owned()]),
        };
        assert_eq!(CallRecord::from_text(&full.to_text()), Ok(full.clone()));
        assert!(full.tool_error_fails());
        assert!(full.may_read_root("sample") && !full.may_read_root("vault"));
        assert!(bare.may_read_root("vault"), "no grants recorded: every root");
        assert!(!full.to_text().contains("roots\":null") && !bare.to_text().contains("roots"));
        let none = CallRecord { roots: Some(Vec::new()), ..bare.clone() };
        assert!(!none.may_read_root("sample"), "granted no root: none");
        assert!(none.to_text().contains(r#""roots":[]"#), "{}", none.to_text());
        assert!(CallRecord::from_text("[1]").is_err());
    }
}
