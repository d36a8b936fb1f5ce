//! A real 2025-11-25 client against a real Conveyor: the official MCP Python SDK (`mcp==1.30.0`)
//! runs `tests/python/legacy_client.py`, which drives the experimental-Tasks wire end to end
//! (plain calls, progress, tasks/get, tasks/result, tasks/list, tasks/cancel and their errors).
//!
//! Needs `python3` with the `venv` module, and PyPI reachable the first time: the SDK is installed
//! into `<workspace>/target/py-venv`, which later runs reuse.

use std::time::Duration;

use anyhow::{Context, bail, ensure};
use conveyor_tests::process::output_text;
use conveyor_tests::python::{MCP_1, python_with, script};
use conveyor_tests::{Conveyor, Mcp, RedisServer};

const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);

#[tokio::test]
async fn the_python_sdk_runs_tools_and_tasks_on_the_2025_wire() -> anyhow::Result<()> {
    let python = python_with(&MCP_1).await?;
    let redis = RedisServer::start()?;
    let conveyor =
        Conveyor::up(&redis.url(), &["--fixtures", "--task-ttl-ms", "60000", "--task-ttl-max-ms", "600000"])?;

    let run = script(&python, "legacy_client.py").arg(conveyor.mcp_url()).output();
    let output = match tokio::time::timeout(SCRIPT_TIMEOUT, run).await {
        Ok(output) => output.context("cannot run the Python client")?,
        Err(_) => bail!(
            "the Python client did not finish within {SCRIPT_TIMEOUT:?}\n--- conveyor log ---\n{}",
            conveyor.log_text()
        ),
    };
    ensure!(
        output.status.success(),
        "the Python client failed\n{}\n--- conveyor log ---\n{}",
        output_text(&output),
        conveyor.log_text()
    );
    print!("{}", String::from_utf8_lossy(&output.stdout));
    Ok(())
}

/// The official SDK ends its whole session on any HTTP 5xx. Through a Redis restart of about a
/// second and a half, its calls must wait and succeed (or fail with a JSON-RPC error), and the
/// session must survive.
#[tokio::test]
async fn the_python_sdk_session_survives_a_redis_restart() -> anyhow::Result<()> {
    let python = python_with(&MCP_1).await?;
    let mut redis =
        RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always", "--save", ""])?;
    let conveyor = Conveyor::gateway(&redis.url(), &["--redis-timeout-ms", "1000"])?;
    // A node whose delivery was written to the stream's pending list just before the kill, while
    // the reply never reached its worker, is taken over when its lease runs out: a short lease
    // keeps that recovery well within the client's 30 s read timeout.
    let worker =
        Conveyor::worker(&redis.url(), &["--fixtures", "--redis-timeout-ms", "1000", "--lease-ms", "3000"])?;
    Mcp::new(conveyor.mcp_url()).wait_for_tool("slow_compute", Duration::from_secs(10)).await?;
    let run = script(&python, "outage_client.py").arg(conveyor.mcp_url()).arg("6").output();
    let client = tokio::spawn(async move { tokio::time::timeout(SCRIPT_TIMEOUT, run).await });
    tokio::time::sleep(Duration::from_secs(2)).await;
    redis.kill();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    redis.restart()?;
    let output = match client.await? {
        Ok(output) => output.context("cannot run the Python client")?,
        Err(_) => bail!(
            "the Python client did not finish\n--- gateway log ---\n{}\n--- worker log ---\n{}",
            conveyor.log_text(),
            worker.log_text()
        ),
    };
    ensure!(
        output.status.success(),
        "the Python SDK's session broke through the Redis restart\n{}\n--- gateway log ---\n{}\n--- worker log ---\n{}",
        output_text(&output),
        conveyor.log_text(),
        worker.log_text()
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let summary: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or_default()).context("the client's summary")?;
    println!("through a 1.5 s Redis restart: {summary}");
    ensure!(summary["succeeded"].as_u64() > Some(0), "no call succeeded: {summary}");
    // The outage is shorter than the gateway's outage budget: every call waits it out.
    ensure!(summary["rpc_errors"].as_array().is_some_and(Vec::is_empty), "calls failed: {summary}");
    Ok(())
}
