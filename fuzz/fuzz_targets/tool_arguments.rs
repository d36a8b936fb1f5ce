//! Tool-argument validation, as the gateway does it before a task exists: `CatalogTool::validate`
//! of gateway/src/catalog.rs, on tools built with `CatalogTool::from_definition` (as workers
//! publish them) and the built-in `run_dag`.
//!
//! Input:
//! - JSON text (the seeds in `corpus/tool_arguments/`): validated as arguments against every fixed
//!   tool below; when it is an object with an `inputSchema` (a tool definition as a worker
//!   publishes it), that tool is built too and the object's `arguments` (or the whole object)
//!   validated against it: workers publish schemas, the gateway compiles them.
//! - anything else: arguments built with `arbitrary` from the fixed schemas' vocabulary.
#![no_main]

use std::sync::LazyLock;

use arbitrary::Unstructured;
use conveyor_fuzz::{json_value, looks_like_json};
use conveyor_gateway::catalog::CatalogTool;
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

/// Realistic tools: a search tool with every common keyword, the 2020-12 fixture tool of
/// worker/src/fixtures.rs, slow_compute, and the gateway's own `run_dag`.
static TOOLS: LazyLock<Vec<CatalogTool>> = LazyLock::new(|| {
    let mut tools: Vec<CatalogTool> = [
        ("search_documents", search_schema()),
        ("json_schema_2020_12_tool", fixture_2020_12_schema()),
        ("slow_compute", json!({"type": "object", "properties": {"seconds": {"type": "number", "minimum": 0, "maximum": 86400}, "label": {"type": "string"}}, "required": ["seconds"]})),
    ]
    .into_iter()
    .map(|(name, schema)| {
        CatalogTool::from_definition(json!({"name": name, "inputSchema": schema})).expect("a named tool")
    })
    .collect();
    tools.push(CatalogTool::run_dag());
    tools
});

const KEYS: &[&str] = &[
    "query",
    "limit",
    "threshold",
    "tags",
    "filters",
    "author",
    "since",
    "language",
    "options",
    "highlight",
    "page",
    "cursor",
    "size",
    "mode",
    "nodes",
    "id",
    "tool",
    "kind",
    "arguments",
    "dependsOn",
    "retries",
    "backoffMs",
    "timeoutMs",
    "onFailure",
    "weight",
    "output",
    "$from",
    "pointer",
    "name",
    "address",
    "street",
    "city",
    "contactMethod",
    "phone",
    "email",
    "seconds",
    "label",
];
const STRINGS: &[&str] = &[
    "",
    "rust",
    "noop",
    "collect",
    "fail",
    "skipDependents",
    "continue",
    "phone",
    "email",
    "exact",
    "fuzzy",
    "semantic",
    "2026-01-01T00:00:00Z",
    "not-a-date",
    "a@b.c",
    "en",
    "EN",
    "a",
    "n0",
];

fuzz_target!(|data: &[u8]| {
    if looks_like_json(data) {
        let Ok(value) = serde_json::from_slice::<Value>(data) else { return };
        for tool in TOOLS.iter() {
            validate(tool, &value);
        }
        if value.get("inputSchema").is_some() {
            let mut definition = value.clone();
            definition["name"] = json!("published");
            if let Some(tool) = CatalogTool::from_definition(definition) {
                validate(&tool, value.get("arguments").unwrap_or(&value));
            }
        }
    } else {
        let mut u = Unstructured::new(data.get(1..).unwrap_or_default());
        let Ok(value) = json_value(&mut u, KEYS, STRINGS, 0) else { return };
        for tool in TOOLS.iter() {
            validate(tool, &value);
        }
    }
});

/// The gateway's check: a refusal names every failing field.
fn validate(tool: &CatalogTool, arguments: &Value) {
    if let Err(failure) = tool.validate(arguments) {
        assert!(!failure.error.message.is_empty(), "a refusal says why");
    }
}

fn search_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "maxLength": 512, "description": "What to look for"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 10},
            "threshold": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
            "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z][a-z0-9-]{0,31}$"}, "uniqueItems": true, "maxItems": 16},
            "filters": {
                "type": "object",
                "properties": {
                    "author": {"type": "string"},
                    "since": {"type": "string", "format": "date-time"},
                    "language": {"enum": ["en", "de", "fr", "ja"]},
                    "size": {"type": "object", "properties": {"min": {"type": "integer"}, "max": {"type": "integer"}}, "additionalProperties": false}
                },
                "required": ["author"],
                "additionalProperties": false
            },
            "mode": {"oneOf": [{"const": "exact"}, {"const": "fuzzy"}, {"type": "object", "properties": {"semantic": {"$ref": "#/$defs/embedding"}}, "required": ["semantic"]}]},
            "page": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}]},
            "cursor": {"type": ["string", "null"], "maxLength": 64},
            "options": {"type": "array", "prefixItems": [{"type": "boolean"}, {"type": "number", "multipleOf": 0.5}], "items": false},
            "highlight": {"type": "object", "patternProperties": {"^x-": {"type": "string"}}, "propertyNames": {"maxLength": 20}, "minProperties": 1}
        },
        "required": ["query"],
        "dependentRequired": {"cursor": ["limit"]},
        "additionalProperties": false,
        "$defs": {"embedding": {"type": "array", "items": {"type": "number"}, "minItems": 3, "maxItems": 3}}
    })
}

fn fixture_2020_12_schema() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {"address": {"$anchor": "addressDef", "type": "object", "properties": {
            "street": {"type": "string"}, "city": {"type": "string"}}}},
        "properties": {
            "name": {"type": "string"},
            "address": {"$ref": "#/$defs/address"},
            "contactMethod": {"type": "string", "enum": ["phone", "email"]},
            "phone": {"type": "string"},
            "email": {"type": "string"}
        },
        "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
        "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
        "then": {"required": ["phone"]},
        "else": {"required": ["email"]},
        "additionalProperties": false
    })
}
