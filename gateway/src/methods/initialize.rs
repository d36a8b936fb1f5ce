//! `initialize` (2025-11-25 and earlier revisions): the negotiated version and the server's
//! capabilities, tasks among them.

use serde_json::{Value, json};

use crate::wire;

pub(super) const INSTRUCTIONS: &str = "Conveyor runs long tools as durable tasks on a worker cluster: call a task-capable tool, \
then poll the task, read its result, or cancel it.";

pub(super) fn server_info() -> Value {
    json!({"name": "conveyor", "title": "Conveyor", "version": env!("CARGO_PKG_VERSION")})
}

/// The first revision with tasks, and the newest one that has `initialize`.
const TASKS_SINCE: &str = "2025-11-25";

pub(super) fn initialize(params: &Value) -> Value {
    let requested = params.get("protocolVersion").and_then(Value::as_str).unwrap_or_default();
    let version =
        if wire::INITIALIZE_VERSIONS.contains(&requested) { requested } else { wire::INITIALIZE_VERSIONS[0] };
    let mut capabilities = json!({
        "tools": {"listChanged": false},
        "prompts": {"listChanged": false},
        "resources": {"subscribe": true, "listChanged": false},
        "completions": {},
        "logging": {},
    });
    // Tasks came with 2025-11-25: a client that negotiates an older version is not offered them.
    if version == TASKS_SINCE {
        capabilities["tasks"] = json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}});
    }
    json!({
        "protocolVersion": version,
        "capabilities": capabilities,
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
        assert!(r["capabilities"].get("tasks").is_none(), "tasks came with 2025-11-25");
        let r = initialize(&json!({"protocolVersion": "1999-01-01"}));
        assert_eq!(r["protocolVersion"], "2025-11-25");
        assert!(r["capabilities"]["tasks"]["requests"]["tools"]["call"].is_object());
        // The shape is rmcp's InitializeResult plus the 2025-11-25 tasks capability.
        serde_json::from_value::<rmcp::model::InitializeResult>(r).expect("an InitializeResult");
    }
}
