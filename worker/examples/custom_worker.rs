//! A worker with a tool of your own: `cargo run -p conveyor-worker --example custom_worker`.
//!
//! It offers `count_words`, which counts the words of a text in chunks, reports progress after
//! each chunk, and stops when the task is cancelled. Start a gateway (`conveyor gateway`) against
//! the same Redis and the tool appears in `tools/list` of every gateway.

use std::sync::Arc;
use std::time::Duration;

use conveyor_shared::Store;
use conveyor_shared::model::{ToolOutcome, result};
use conveyor_shared::store::StoreOptions;
use conveyor_worker::{FnTool, ToolRegistry, WorkerOptions};
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn count_words() -> impl conveyor_worker::Tool {
    FnTool::new(
        json!({
            "name": "count_words",
            "description": "Counts the words of a text, reporting progress as it goes.",
            "inputSchema": {
                "type": "object",
                "properties": {"text": {"type": "string", "description": "The text to count"}},
                "required": ["text"]
            },
            // Clients that speak tasks get a task; others wait for the result.
            "execution": {"taskSupport": "optional"}
        }),
        |ctx| async move {
            let text = ctx.str_arg("text").unwrap_or_default().to_owned();
            let lines: Vec<&str> = text.lines().collect();
            let mut words = 0;
            for (done, line) in lines.iter().enumerate() {
                if ctx.cancel.is_cancelled() {
                    return ToolOutcome::Result(result::error_text("cancelled"));
                }
                words += line.split_whitespace().count();
                ctx.progress((done + 1) as f64, Some(lines.len() as f64), Some("counting")).await;
                // Stands in for real work on each chunk.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            ToolOutcome::Result(result::structured(format!("{words} words"), json!({"words": words})))
        },
    )
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let url =
        std::env::var("REDIS_URL").unwrap_or_else(|_| conveyor_shared::config::DEFAULT_REDIS_URL.to_owned());
    // The deployment's shard count, as every gateway and worker of it uses.
    let options = StoreOptions { timeout: Duration::from_secs(3), ..StoreOptions::default() };
    let store = Store::for_deployment(&url, options).await?;
    let mut registry = ToolRegistry::new();
    registry.register(count_words());
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        stop.cancel();
    });
    conveyor_worker::run(store, Arc::new(registry), WorkerOptions::new(8), shutdown).await?;
    Ok(())
}
