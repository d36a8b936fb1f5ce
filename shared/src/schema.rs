//! Input schemas: compiled once per tool, checked against arguments wherever they are known. The
//! gateway checks what a client sends; a worker checks a graph node's arguments once upstream
//! values are in them, which no gateway could see. Both read errors the same way.

use std::sync::Arc;

use serde_json::Value;

/// A tool's compiled input schema.
#[derive(Clone)]
pub struct InputSchema(Arc<jsonschema::Validator>);

/// One thing a schema found wrong: where (a JSON pointer, `/` for the whole value) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaError {
    pub path: String,
    pub message: String,
}

impl InputSchema {
    /// Compiles a schema; the error says why it is not one.
    pub fn compile(schema: &Value) -> Result<Self, String> {
        jsonschema::validator_for(schema).map(|v| Self(Arc::new(v))).map_err(|e| e.to_string())
    }

    /// Everything wrong with `value`; empty when it is valid.
    pub fn errors(&self, value: &Value) -> Vec<SchemaError> {
        self.0
            .iter_errors(value)
            .map(|e| {
                let path = e.instance_path().to_string();
                SchemaError {
                    path: if path.is_empty() { "/".to_owned() } else { path },
                    message: e.to_string(),
                }
            })
            .collect()
    }

    /// [`InputSchema::errors`] in one line (`/path: message; ...`), or `None` when valid.
    pub fn check(&self, value: &Value) -> Option<String> {
        let errors = self.errors(value);
        (!errors.is_empty()).then(|| {
            errors.iter().map(|e| format!("{}: {}", e.path, e.message)).collect::<Vec<_>>().join("; ")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn errors_name_the_field_and_the_rule() {
        let schema = InputSchema::compile(&json!({
            "type": "object",
            "properties": {"mode": {"enum": ["a", "b"]}, "paths": {"type": "array", "maxItems": 2}},
            "additionalProperties": false
        }))
        .expect("a schema");
        assert_eq!(schema.check(&json!({"mode": "a", "paths": ["x"]})), None);
        let found = schema.errors(&json!({"mode": "c", "paths": [1, 2, 3], "extra": true}));
        let paths: Vec<&str> = found.iter().map(|e| e.path.as_str()).collect();
        assert!(paths.contains(&"/mode") && paths.contains(&"/paths") && paths.contains(&"/"), "{found:?}");
        assert!(InputSchema::compile(&json!({"type": 12})).is_err());
    }
}
