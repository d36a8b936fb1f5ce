//! Fixture tools: the tools the MCP conformance suite's server scenarios call, and a few Conveyor's
//! own tests and benchmarks use. They run through the real worker path like any other tool.
//! Enabled with `--fixtures`; a production deployment leaves them off.

use std::time::Duration;

use conveyor_shared::model::{RpcError, ToolOutcome, result};
use serde_json::{Value, json};

use crate::tool::{FnTool, InputError, ToolContext, ToolRegistry};

/// A 1x1 PNG.
const PNG_1X1: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
/// A tiny WAV file.
const WAV_TINY: &str = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=";

fn definition(name: &str, description: &str, input_schema: Value, task_support: &str) -> Value {
    json!({
        "name": name,
        "description": description,
        "inputSchema": input_schema,
        "execution": {"taskSupport": task_support},
    })
}

fn no_arguments() -> Value {
    json!({"type": "object", "properties": {}})
}

fn content(items: Value) -> ToolOutcome {
    ToolOutcome::Result(json!({"content": items, "isError": false}))
}

/// Sleeps, or returns `false` early when the task is cancelled.
async fn sleep_unless_cancelled(ctx: &ToolContext, duration: Duration) -> bool {
    tokio::select! {
        () = tokio::time::sleep(duration) => true,
        () = ctx.cancel.cancelled() => false,
    }
}

fn stopped() -> ToolOutcome {
    ToolOutcome::Error(RpcError { code: -32800, message: "cancelled".to_owned(), data: None })
}

fn input_failure(e: InputError) -> ToolOutcome {
    match e {
        InputError::Cancelled => stopped(),
        other => ToolOutcome::Error(RpcError { code: -32603, message: other.to_string(), data: None }),
    }
}

fn elicit(message: String, properties: Value, required: &[&str]) -> Value {
    json!({
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": message,
            "requestedSchema": {"type": "object", "properties": properties, "required": required}
        }
    })
}

/// Adds every fixture tool to `registry`. The first is a quick tool that takes no arguments, since
/// clients and probes tend to call the first listed tool with `{}`.
pub fn register(registry: &mut ToolRegistry) {
    registry.register(FnTool::new(
        definition("test_simple_text", "Returns a fixed text.", no_arguments(), "forbidden"),
        |_ctx| async { ToolOutcome::Result(result::text("This is a simple text response for testing.")) },
    ));
    registry.register(FnTool::new(
        definition("test_image_content", "Returns a 1x1 PNG image.", no_arguments(), "forbidden"),
        |_ctx| async { content(json!([{"type": "image", "data": PNG_1X1, "mimeType": "image/png"}])) },
    ));
    registry.register(FnTool::new(
        definition("test_audio_content", "Returns a tiny WAV clip.", no_arguments(), "forbidden"),
        |_ctx| async { content(json!([{"type": "audio", "data": WAV_TINY, "mimeType": "audio/wav"}])) },
    ));
    registry.register(FnTool::new(
        definition(
            "test_embedded_resource",
            "Returns an embedded text resource.",
            no_arguments(),
            "forbidden",
        ),
        |_ctx| async {
            content(json!([{"type": "resource", "resource": {
                "uri": "test://embedded-resource",
                "mimeType": "text/plain",
                "text": "This is an embedded resource content."
            }}]))
        },
    ));
    registry.register(FnTool::new(
        definition(
            "test_multiple_content_types",
            "Returns text, an image and a resource.",
            no_arguments(),
            "forbidden",
        ),
        |_ctx| async {
            content(json!([
                {"type": "text", "text": "Multiple content types test:"},
                {"type": "image", "data": PNG_1X1, "mimeType": "image/png"},
                {"type": "resource", "resource": {
                    "uri": "test://mixed-content-resource",
                    "mimeType": "application/json",
                    "text": "{\"test\":\"data\",\"value\":123}"
                }}
            ]))
        },
    ));
    registry.register(FnTool::new(
        definition(
            "test_error_handling",
            "Always reports a tool error (isError).",
            no_arguments(),
            "forbidden",
        ),
        |_ctx| async {
            ToolOutcome::Result(result::error_text("This tool intentionally returns an error for testing"))
        },
    ));
    registry.register(FnTool::new(
        definition(
            "test_tool_with_progress",
            "Reports progress 0, 50 and 100 of 100, then returns.",
            no_arguments(),
            "forbidden",
        ),
        |ctx| async move {
            for (i, progress) in [0.0, 50.0, 100.0].into_iter().enumerate() {
                if i > 0 && !sleep_unless_cancelled(&ctx, Duration::from_millis(50)).await {
                    return stopped();
                }
                ctx.progress(progress, Some(100.0), None).await;
            }
            ToolOutcome::Result(result::text("Progress test completed"))
        },
    ));
    registry.register(
        FnTool::new(
            definition(
                "test_missing_capability",
                "Needs the client's sampling capability.",
                no_arguments(),
                "forbidden",
            ),
            |_ctx| async { ToolOutcome::Result(result::text("The client declared sampling.")) },
        )
        .requiring(json!({"sampling": {}})),
    );
    registry.register(FnTool::new(
        definition(
            "test_streaming_elicitation",
            "Answers on its own stream without asking the client anything.",
            no_arguments(),
            "forbidden",
        ),
        |_ctx| async {
            ToolOutcome::Result(result::text(
                "Nothing to ask: this server never sends requests on a response stream.",
            ))
        },
    ));
    registry.register(FnTool::new(
        definition(
            "test_logging_tool",
            "Returns a text; it logs only when the client asks for a log level.",
            no_arguments(),
            "forbidden",
        ),
        |_ctx| async { ToolOutcome::Result(result::text("Logging tool finished.")) },
    ));
    registry.register(FnTool::new(
        json!({
            "name": "json_schema_2020_12_tool",
            "description": "Tool with JSON Schema 2020-12 features",
            "inputSchema": {
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
            },
            "execution": {"taskSupport": "forbidden"}
        }),
        |ctx| async move { ToolOutcome::Result(result::text(format!("Accepted: {}", ctx.arguments))) },
    ));
    registry.register(FnTool::new(
        definition(
            "greet",
            "Greets someone by name, at once.",
            json!({"type": "object", "properties": {"name": {"type": "string", "description": "Who to greet"}}, "required": ["name"]}),
            "forbidden",
        ),
        |ctx| async move { ToolOutcome::Result(result::text(format!("Hello, {}!", ctx.str_arg("name").unwrap_or("world")))) },
    ));
    registry.register(FnTool::new(
        definition(
            "noop",
            "Does nothing and returns at once; for measuring Conveyor itself.",
            no_arguments(),
            "optional",
        ),
        |_ctx| async { ToolOutcome::Result(result::text("ok")) },
    ));
    registry.register(FnTool::new(
        definition(
            "echo",
            "Returns its arguments as structured content, at once; for wiring graphs together.",
            json!({"type": "object"}),
            "optional",
        ),
        |ctx| async move {
            ToolOutcome::Result(result::structured(ctx.arguments.to_string(), ctx.arguments.clone()))
        },
    ));
    registry.register(FnTool::new(
        definition(
            "nest",
            "Returns structured content nested `depth` levels deep; for exercising the limits on stored results.",
            json!({
                "type": "object",
                "properties": {"depth": {"type": "integer", "minimum": 0, "maximum": 1000}},
                "required": ["depth"]
            }),
            "optional",
        ),
        |ctx| async move {
            let depth = ctx.arguments.get("depth").and_then(Value::as_u64).unwrap_or(0);
            let mut nested = json!("bottom");
            for _ in 0..depth {
                nested = json!({"inner": nested});
            }
            ToolOutcome::Result(result::structured(format!("nested {depth} levels"), nested))
        },
    ));
    registry.register(FnTool::new(
        definition(
            "flaky",
            "Reports a tool error on its first `failures` attempts, then succeeds; for exercising retries.",
            json!({"type": "object", "properties": {"failures": {"type": "integer", "minimum": 0}}, "required": ["failures"]}),
            "optional",
        ),
        |ctx| async move {
            let failures = ctx.arguments.get("failures").and_then(Value::as_u64).unwrap_or(0);
            if u64::from(ctx.attempt) <= failures {
                ToolOutcome::Result(result::error_text(format!("attempt {} fails on purpose", ctx.attempt)))
            } else {
                ToolOutcome::Result(result::text(format!("succeeded on attempt {}", ctx.attempt)))
            }
        },
    ));
    registry.register(FnTool::new(
        definition(
            "plan_fanout",
            "Plans its work as a graph: `width` slow_compute nodes of `seconds` each, joined by a collect node.",
            json!({
                "type": "object",
                "properties": {
                    "width": {"type": "integer", "minimum": 1, "maximum": 1000},
                    "seconds": {"type": "number", "minimum": 0, "maximum": 60}
                },
                "required": ["width"]
            }),
            "optional",
        ),
        |ctx| async move {
            let width = ctx.arguments.get("width").and_then(Value::as_u64).unwrap_or(1);
            let seconds = ctx.f64_arg("seconds").unwrap_or(0.0);
            let mut nodes: Vec<Value> = (0..width)
                .map(|i| json!({"id": format!("part{i}"), "tool": "slow_compute", "arguments": {"seconds": seconds, "label": format!("part{i}")}}))
                .collect();
            nodes.push(json!({"id": "join", "kind": "collect", "dependsOn": (0..width).map(|i| format!("part{i}")).collect::<Vec<_>>()}));
            match serde_json::from_value(json!({"nodes": nodes, "output": "join"})) {
                Ok(plan) => ToolOutcome::Plan(plan),
                Err(e) => ToolOutcome::Error(RpcError { code: -32603, message: format!("bad plan: {e}"), data: None }),
            }
        },
    ));
    registry.register(FnTool::new(
        definition(
            "slow_compute",
            "Computes for `seconds`, reporting progress every 100 ms; stops at once when cancelled.",
            json!({
                "type": "object",
                "properties": {
                    "seconds": {"type": "number", "minimum": 0, "maximum": 86400, "description": "How long to compute"},
                    "label": {"type": "string", "description": "Named in the result"}
                },
                "required": ["seconds"]
            }),
            "optional",
        ),
        |ctx| async move {
            let seconds = ctx.f64_arg("seconds").unwrap_or(0.0);
            let label = ctx.str_arg("label").unwrap_or("slow_compute").to_owned();
            let total = Duration::from_secs_f64(seconds);
            let step = Duration::from_millis(100);
            let started = tokio::time::Instant::now();
            while started.elapsed() < total {
                let left = total.saturating_sub(started.elapsed()).min(step);
                if !sleep_unless_cancelled(&ctx, left).await {
                    return stopped();
                }
                let done = started.elapsed().as_secs_f64().min(seconds);
                ctx.progress(done, Some(seconds), Some(&format!("{label}: {done:.1} of {seconds} s"))).await;
            }
            ToolOutcome::Result(result::text(format!("computed {label}")))
        },
    ));
    registry.register(FnTool::new(
        definition(
            "failing_job",
            "Works for a second, then reports a tool error (isError).",
            no_arguments(),
            "required",
        ),
        |ctx| async move {
            if !sleep_unless_cancelled(&ctx, Duration::from_secs(1)).await {
                return stopped();
            }
            ToolOutcome::Result(result::error_text("failing_job failed"))
        },
    ));
    registry.register(FnTool::new(
        definition(
            "protocol_error_job",
            "Works briefly, then fails with a JSON-RPC error.",
            no_arguments(),
            "required",
        ),
        |ctx| async move {
            if !sleep_unless_cancelled(&ctx, Duration::from_millis(500)).await {
                return stopped();
            }
            ToolOutcome::Error(RpcError {
                code: -32603,
                message: "protocol_error_job exploded".to_owned(),
                data: None,
            })
        },
    ));
    registry.register(FnTool::new(
        definition(
            "confirm_delete",
            "Asks the client to confirm before it deletes a file (nothing is deleted: a fixture).",
            json!({"type": "object", "properties": {"filename": {"type": "string"}}, "required": ["filename"]}),
            "required",
        ),
        |ctx| async move {
            let filename = ctx.str_arg("filename").unwrap_or("the file").to_owned();
            let requests = json!({"confirm": elicit(
                format!("Delete {filename}?"),
                json!({"confirm": {"type": "boolean", "description": "Delete it"}}),
                &["confirm"],
            )});
            match ctx.request_input(requests).await {
                Ok(answers) => {
                    let answer = &answers["confirm"];
                    let confirmed = answer["action"] == "accept" && answer["content"]["confirm"] == json!(true);
                    let verdict = if confirmed { format!("Deleted {filename}") } else { format!("Kept {filename}") };
                    ToolOutcome::Result(result::text(verdict))
                }
                Err(e) => input_failure(e),
            }
        },
    ));
    registry.register(FnTool::new(
        definition("multi_input", "Asks the client two questions at once, then combines the answers.", no_arguments(), "required"),
        |ctx| async move {
            let requests = json!({
                "name": elicit("Your name?".to_owned(), json!({"name": {"type": "string"}}), &["name"]),
                "confirm": elicit("Proceed?".to_owned(), json!({"confirm": {"type": "boolean"}}), &["confirm"]),
            });
            match ctx.request_input(requests).await {
                Ok(answers) => ToolOutcome::Result(result::structured(
                    format!("Received {} answers", answers.as_object().map_or(0, |o| o.len())),
                    answers,
                )),
                Err(e) => input_failure(e),
            }
        },
    ));
    registry.register(FnTool::new(
        definition(
            "test_tool_with_task",
            "Would ask for input before it creates its task; Conveyor does not offer input before task creation yet.",
            no_arguments(),
            "required",
        ),
        |_ctx| async {
            ToolOutcome::Result(result::error_text(
                "Input before task creation (an input_required tools/call result) is not supported yet",
            ))
        },
    ));
}

/// A registry of just the fixture tools.
pub fn registry() -> ToolRegistry {
    let mut registry = ToolRegistry::new();
    register(&mut registry);
    registry
}

/// Fixtures that harm the process that runs them.
pub const HARMFUL: &[&str] = &["crash_worker"];

/// Adds the fixtures that harm the process that runs them; only a test process loads them.
pub fn register_harmful(registry: &mut ToolRegistry) {
    registry.register(FnTool::new(
        definition(
            "crash_worker",
            "Kills the worker process that runs it (abort), to exercise leases and dead letters. Fixture only.",
            no_arguments(),
            "optional",
        ),
        |_ctx| async {
            tracing::error!("crash_worker: aborting this worker process on purpose");
            std::process::abort()
        },
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fixture_has_a_name_a_description_and_an_object_schema() {
        let published = registry().published();
        assert!(published.len() >= 15);
        assert_eq!(published[0].definition["name"], "test_simple_text", "a no-argument tool comes first");
        for tool in published {
            let d = &tool.definition;
            let name = d["name"].as_str().expect("a name");
            assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)), "{name}");
            assert!(d["description"].as_str().is_some_and(|s| !s.is_empty()), "{name} lacks a description");
            assert_eq!(d["inputSchema"]["type"], "object", "{name}");
        }
    }
}
