//! Tools that ask, driven by the official MCP Python SDKs against a real Conveyor:
//!
//! - `mcp==1.30.0` runs `tests/python/asking_client.py` on 2025-11-25: elicitation and sampling
//!   requests on a call's SSE stream and on a task's `tasks/result` stream, answered by the SDK's
//!   callbacks; -32021 for an undeclared capability; logging; prompts, completions, resources.
//! - `mcp==2.3.0` runs `tests/python/asking_client_v2.py` on 2026-07-28 (multi-round-trip
//!   `input_required` results resolved by the SDK's callbacks, tasks through a small Tasks
//!   extension built on the SDK's extension hooks, `subscriptions/listen`, prompts and resources)
//!   and, with `mode="legacy"`, on 2025-11-25.
//!
//! Needs `python3` with the `venv` module, and PyPI reachable the first time: each SDK is
//! installed into its own virtualenv under `<workspace>/target` (`py-venv` for 1.30.0, shared with
//! `python_sdk.rs`; `py-venv-mcp2` for 2.3.0), which later runs reuse.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use conveyor_tests::process::output_text;
use conveyor_tests::python::{MCP_1, MCP_2, Sdk, python_with};
use conveyor_tests::{Conveyor, RedisServer};
use tokio::process::Command;

const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);
/// Runs one of the `tests/python` scripts with `sdk` against a fresh `conveyor up --fixtures`,
/// and fails with the script's output and the server's log unless every check passes.
async fn run_script(sdk: &Sdk, script: &str) -> anyhow::Result<()> {
    let python = python_with(sdk).await?;
    let redis = RedisServer::start()?;
    let conveyor = Conveyor::up(&redis.url(), &["--fixtures"])?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python").join(script);
    let started = Instant::now();
    let run = Command::new(&python)
        .arg(&script)
        .arg(conveyor.mcp_url())
        .env("PYTHONUNBUFFERED", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .kill_on_drop(true)
        .output();
    let output = match tokio::time::timeout(SCRIPT_TIMEOUT, run).await {
        Ok(output) => output.with_context(|| format!("cannot run {}", script.display()))?,
        Err(_) => bail!(
            "{} (mcp {}) did not finish within {SCRIPT_TIMEOUT:?}\n--- conveyor log ---\n{}",
            script.display(),
            sdk.version,
            conveyor.log_text()
        ),
    };
    ensure!(
        output.status.success(),
        "{} (mcp {}) failed\n{}\n--- conveyor log ---\n{}",
        script.display(),
        sdk.version,
        output_text(&output),
        conveyor.log_text()
    );
    print!("{}", String::from_utf8_lossy(&output.stdout));
    println!("mcp {}: the script ran {:.1} s", sdk.version, started.elapsed().as_secs_f64());
    Ok(())
}

#[tokio::test]
async fn the_python_sdk_1_answers_tools_that_ask_on_the_2025_wire() -> anyhow::Result<()> {
    run_script(&MCP_1, "asking_client.py").await
}

#[tokio::test]
async fn the_python_sdk_2_answers_tools_that_ask_on_the_2026_wire() -> anyhow::Result<()> {
    run_script(&MCP_2, "asking_client_v2.py").await
}
