//! Tools from the operator's tools file: each is an MCP tool whose arguments fill an argv
//! template, run as a child process without a shell (see [`super::process`]) in a root. An
//! argument the file names as a path must stay inside the root and be neither hidden nor
//! ignored, like every path a built-in tool takes. A tool that runs in a root runs only for a
//! caller who may read that root: its definition says so (gateways neither list nor take it for
//! another caller), and the worker refuses such a call too.

use std::sync::Arc;
use std::time::Duration;

use conveyor_shared::model::{ToolOutcome, result};
use conveyor_shared::roots::RootUse;
use serde_json::{Map, Value, json};

use super::operator_config::{ConfiguredTool, OperatorConfig};
use super::process::{self, Ending};
use super::roots::Roots;
use super::{cancelled, invalid};
use conveyor_worker::tool::{FnTool, ToolContext, ToolRegistry};

pub fn register(registry: &mut ToolRegistry, roots: &Roots, config: &Arc<OperatorConfig>) {
    for tool in &config.tools {
        let (spec, roots) = (Arc::new(tool.clone()), roots.clone());
        let reads = RootUse { fixed: tool.root.iter().cloned().collect(), ..RootUse::default() };
        let mut offered = FnTool::new(reads.declared_in(tool.definition()), move |ctx| {
            let (spec, roots) = (spec.clone(), roots.clone());
            async move { call(&spec, &roots, &ctx).await }
        });
        if let Some(queue) = &tool.queue {
            offered = offered.on_queue(queue.clone());
        }
        registry.register(offered);
    }
}

async fn call(spec: &ConfiguredTool, roots: &Roots, ctx: &ToolContext) -> ToolOutcome {
    let arguments: Map<String, Value> = ctx.arguments.as_object().cloned().unwrap_or_default();
    let root = match &spec.root {
        Some(name) => match roots.for_caller(ctx, name) {
            Ok(root) => Some(root),
            Err(e) => return invalid(format!("{}: {e}", spec.name)),
        },
        None => None,
    };
    // Path arguments come from the caller, so they get the rules of every path a caller names
    // (inside the root through symlinks, neither hidden nor ignored), where the command reads
    // them: from its working directory.
    for name in &spec.path_arguments {
        if let (Some(root), Some(value)) = (root, arguments.get(name).and_then(Value::as_str))
            && let Err(e) = root.resolve(&from_cwd(&spec.cwd, value))
        {
            return invalid(format!("{}: argument `{name}`: {e}", spec.name));
        }
    }
    let argv = match spec.fill_argv(&arguments) {
        Ok(argv) => argv,
        Err(e) => return invalid(format!("{}: {e}", spec.name)),
    };
    let cwd = match root {
        // The operator's own path: it may lie under a hidden or ignored folder.
        Some(root) => match root.resolve_configured(&spec.cwd) {
            Ok(cwd) => cwd,
            Err(e) => return invalid(format!("{}: working directory: {e}", spec.name)),
        },
        None => std::env::temp_dir(),
    };
    let command = process::Command {
        argv,
        cwd,
        env: spec.env.clone(),
        timeout: Duration::from_secs(spec.timeout_s),
        max_output_bytes: usize::try_from(spec.max_output_bytes).unwrap_or(usize::MAX),
        traceparent: ctx.traceparent.clone(),
    };
    let run = process::run(&command, &ctx.cancel).await;
    if run.ending == Ending::Cancelled {
        return cancelled();
    }
    let structured = json!({
        "exitCode": run.exit_code,
        "ending": run.ending,
        "durationMs": run.duration_ms,
        "stdout": run.stdout.text,
        "stderr": run.stderr.text,
        "truncated": run.stdout.truncated || run.stderr.truncated
    });
    if run.succeeded() {
        return ToolOutcome::Result(result::structured(run.stdout.text.clone(), structured));
    }
    let mut text = format!("{} failed: {}", spec.name, run.describe(command.timeout));
    for stream in [&run.stderr.text, &run.stdout.text] {
        if !stream.trim().is_empty() {
            text.push_str("\n\n");
            text.push_str(stream.trim_end());
        }
    }
    let mut failed = result::structured(text, structured);
    failed["isError"] = json!(true);
    ToolOutcome::Result(failed)
}

/// A path argument relative to the root, for a command that reads it relative to `cwd` (itself
/// relative to the root). An absolute path is left as it is, so that it is refused as absolute.
fn from_cwd(cwd: &str, value: &str) -> String {
    if cwd == "." || value.starts_with(['/', '\\']) {
        value.to_owned()
    } else {
        format!("{}/{value}", cwd.trim_end_matches('/'))
    }
}
