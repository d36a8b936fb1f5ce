//! `initialize` (2025-11-25 and earlier revisions): the negotiated version and the server's
//! capabilities, tasks among them.

use serde_json::{Value, json};

use crate::wire;

pub(super) const INSTRUCTIONS: &str = "Conveyor runs long tools as durable tasks on a worker cluster: call a task-capable tool, \
then poll the task, read its result, or cancel it.";

pub(super) fn server_info() -> Value {
    json!({"name": "conveyor", "title": "Conveyor", "version": env!("CARGO_PKG_VERSION")})
}

pub(super) fn initialize(params: &Value) -> Value {
    let requested = params.get("protocolVersion").and_then(Value::as_str).unwrap_or_default();
    let version =
        if wire::INITIALIZE_VERSIONS.contains(&requested) { requested } else { wire::INITIALIZE_VERSIONS[0] };
    json!({
        "protocolVersion": version,
        "capabilities": {
            "tools": {"listChanged": false},
            "prompts": {"listChanged": false},
            "resources": {"subscribe": true, "listChanged": false},
            "completions": {},
            "logging": {},
            "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
        },
        "serverInfo": server_info(),
        "instructions": INSTRUCTIONS,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initialize_negotiates_a_known_version() {
        let r = initialize(&json!({"protocolVersion": "2025-06-18"}));
        assert_eq!(r["protocolVersion"], "2025-06-18");
        let r = initialize(&json!({"protocolVersion": "1999-01-01"}));
        assert_eq!(r["protocolVersion"], "2025-11-25");
        assert!(r["capabilities"]["tasks"]["requests"]["tools"]["call"].is_object());
        // The shape is rmcp's InitializeResult plus the 2025-11-25 tasks capability.
        serde_json::from_value::<rmcp::model::InitializeResult>(r).expect("an InitializeResult");
    }
}
