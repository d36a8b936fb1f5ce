//! What a tool asks of the client mid-call: elicitation (form or URL), sampling and roots, as the
//! MCP requests the client answers, and which client capability each one needs.
//!
//! A tool asks by returning [`InputRequired`]; the node parks until every request is answered and
//! then runs again with the answers. Requests are plain MCP request objects
//! (`{"method": ..., "params": ...}`), so both protocol revisions carry them unchanged: 2026-07-28
//! in `inputRequests`, 2025-11-25 as server-to-client requests on a response stream.

use serde_json::{Map, Value, json};

/// A tool's request for input: requests by key, and state the next attempt gets back.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct InputRequired {
    /// Key -> an MCP request object. Keys are the tool's own; the answers come back by key.
    pub requests: Map<String, Value>,
    /// Anything the tool wants to see again when it resumes (what it had worked out so far).
    pub state: Option<Value>,
}

impl InputRequired {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a request under `key`.
    pub fn ask(mut self, key: impl Into<String>, request: Value) -> Self {
        self.requests.insert(key.into(), request);
        self
    }

    /// Sets the state the resumed attempt reads back ([`InputRequired::state`]).
    pub fn with_state(mut self, state: Value) -> Self {
        self.state = Some(state);
        self
    }
}

/// `elicitation/create` in form mode: the person fills in `requested_schema` (a flat object
/// schema of primitive properties).
pub fn elicit_form(message: impl Into<String>, requested_schema: Value) -> Value {
    json!({"method": "elicitation/create", "params": {"mode": "form", "message": message.into(), "requestedSchema": requested_schema}})
}

/// `elicitation/create` in URL mode: the person is sent to `url` (a sign-in, a payment) and the
/// client answers once they have been there. `elicitation_id` names this interaction.
pub fn elicit_url(
    message: impl Into<String>,
    url: impl Into<String>,
    elicitation_id: impl Into<String>,
) -> Value {
    json!({"method": "elicitation/create", "params": {"mode": "url", "message": message.into(), "url": url.into(), "elicitationId": elicitation_id.into()}})
}

/// `sampling/createMessage`: the client's model answers one user message.
pub fn sample(prompt: impl Into<String>, max_tokens: u32) -> Value {
    json!({"method": "sampling/createMessage", "params": {
        "messages": [{"role": "user", "content": {"type": "text", "text": prompt.into()}}],
        "maxTokens": max_tokens
    }})
}

/// `roots/list`: the directories the client works in.
pub fn list_roots() -> Value {
    json!({"method": "roots/list", "params": {}})
}

/// The client capability a request needs, shaped as `ClientCapabilities` (for example
/// `{"sampling": {}}` or `{"elicitation": {"url": {}}}`); `None` for a method this module does
/// not know, which no capability covers and which the caller should refuse.
pub fn required_capability(request: &Value) -> Option<Value> {
    let method = request.get("method").and_then(Value::as_str)?;
    Some(match method {
        "elicitation/create" => match request.pointer("/params/mode").and_then(Value::as_str) {
            Some("url") => json!({"elicitation": {"url": {}}}),
            _ => json!({"elicitation": {"form": {}}}),
        },
        "sampling/createMessage" => json!({"sampling": {}}),
        "roots/list" => json!({"roots": {}}),
        _ => return None,
    })
}

/// Whether the declared client capabilities cover what `request` needs. An `elicitation`
/// capability that names no mode means form mode (as clients before modes existed declare it).
pub fn client_supports(capabilities: &Map<String, Value>, request: &Value) -> bool {
    let Some(needed) = required_capability(request) else { return false };
    let Some((name, detail)) = needed.as_object().and_then(|o| o.iter().next()) else { return false };
    let Some(declared) = capabilities.get(name) else { return false };
    if name != "elicitation" {
        return true;
    }
    let declared_modes =
        declared.as_object().is_some_and(|o| o.contains_key("form") || o.contains_key("url"));
    match detail.as_object().and_then(|o| o.keys().next()).map(String::as_str) {
        Some("url") => declared.get("url").is_some(),
        _ => !declared_modes || declared.get("form").is_some(),
    }
}

/// The part of a client's declared capabilities a task keeps, for the tools it runs to consult:
/// elicitation, sampling and roots (nothing else reaches a worker).
pub fn kept_capabilities(declared: Option<&Value>) -> Value {
    let mut kept = Map::new();
    if let Some(declared) = declared.and_then(Value::as_object) {
        for name in ["elicitation", "sampling", "roots"] {
            if let Some(value) = declared.get(name).filter(|v| v.is_object()) {
                kept.insert(name.to_owned(), value.clone());
            }
        }
    }
    Value::Object(kept)
}

#[cfg(test)]
mod tests {
    fn object(value: &Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    use super::*;

    #[test]
    fn an_empty_elicitation_capability_means_form_mode_only() {
        let caps = json!({"elicitation": {}});
        assert!(client_supports(&object(&caps), &elicit_form("name?", json!({"type": "object"}))));
        assert!(!client_supports(&object(&caps), &elicit_url("sign in", "https://example.com", "e1")));
    }

    #[test]
    fn modes_named_by_the_client_are_the_ones_it_gets() {
        let url_only = json!({"elicitation": {"url": {}}});
        assert!(!client_supports(&object(&url_only), &elicit_form("name?", json!({}))));
        assert!(client_supports(&object(&url_only), &elicit_url("sign in", "https://example.com", "e1")));
    }

    #[test]
    fn sampling_and_roots_need_their_capability() {
        assert!(!client_supports(&object(&json!({"elicitation": {}})), &sample("hi", 10)));
        assert!(client_supports(&object(&json!({"sampling": {}})), &sample("hi", 10)));
        assert!(client_supports(&object(&json!({"roots": {"listChanged": true}})), &list_roots()));
        assert!(!client_supports(&object(&json!({})), &list_roots()));
    }

    #[test]
    fn an_unknown_method_is_never_supported() {
        assert!(!client_supports(&object(&json!({"sampling": {}})), &json!({"method": "tools/call"})));
        assert_eq!(required_capability(&json!({"method": "ping"})), None);
    }

    #[test]
    fn only_the_input_capabilities_are_kept() {
        let kept = kept_capabilities(Some(&json!({"sampling": {}, "extensions": {"x": {}}, "roots": true})));
        assert_eq!(kept, json!({"sampling": {}}));
    }
}
