//! `server/discover` (2026-07-28): supported versions and capabilities, the tasks extension among
//! them.

use rmcp::model::TASKS_EXTENSION_ID;
use serde_json::{Value, json};

use super::initialize::{INSTRUCTIONS, server_info};
use crate::wire;

pub(super) fn discover() -> Value {
    json!({
        "resultType": "complete",
        "supportedVersions": wire::supported_versions(),
        "capabilities": {
            "tools": {"listChanged": true},
            "prompts": {"listChanged": true},
            "resources": {"subscribe": true, "listChanged": true},
            "completions": {},
            "extensions": {TASKS_EXTENSION_ID: {}}
        },
        "instructions": INSTRUCTIONS,
        "ttlMs": 60_000,
        "cacheScope": "public",
        "_meta": {"io.modelcontextprotocol/serverInfo": server_info()},
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ProtocolVersion;

    #[test]
    fn discover_is_an_rmcp_discover_result() {
        let d: rmcp::model::DiscoverResult = serde_json::from_value(discover()).expect("a DiscoverResult");
        assert!(d.supported_versions.contains(&ProtocolVersion::V_2026_07_28));
        assert!(d.capabilities.extensions.expect("extensions").contains_key(TASKS_EXTENSION_ID));
    }
}
