//! A real 2025-11-25 client against a real Conveyor: the official MCP Python SDK (`mcp==1.30.0`)
//! runs `tests/python/legacy_client.py`, which drives the experimental-Tasks wire end to end
//! (plain calls, progress, tasks/get, tasks/result, tasks/list, tasks/cancel and their errors).
//!
//! Needs `python3` with the `venv` module, and PyPI reachable the first time: the SDK is installed
//! into `<workspace>/target/py-venv`, which later runs reuse.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use conveyor_tests::process::{output_text, workspace_root};
use conveyor_tests::{Conveyor, RedisServer};
use tokio::process::Command;

const MCP_VERSION: &str = "1.30.0";
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);
const INSTALL_PYTHON: &str = "install Python 3 with its venv module, e.g. `apt-get install -y python3 python3-venv` \
     on Debian or Ubuntu, or make `python3` on PATH point at a Python 3.10 or newer";

/// Runs a setup command to completion and fails with its output unless it succeeds.
async fn run_setup(command: &mut Command, what: &str) -> anyhow::Result<Output> {
    let output = command.output().await.with_context(|| format!("cannot run {what}"))?;
    ensure!(output.status.success(), "{what} failed\n{}", output_text(&output));
    Ok(output)
}

/// Whether the venv already holds the wanted SDK.
async fn has_sdk(venv: &Path) -> bool {
    let pip = venv.join("bin").join("pip");
    match Command::new(&pip).args(["show", "mcp"]).output().await {
        Ok(output) if output.status.success() => String::from_utf8_lossy(&output.stdout)
            .lines()
            .any(|l| l.trim() == format!("Version: {MCP_VERSION}")),
        _ => false,
    }
}

/// `<workspace>/target/py-venv` with `mcp==1.30.0`; returns its python. The tests of this file
/// run in parallel: one of them sets the venv up while the others wait for it.
async fn python_with_sdk() -> anyhow::Result<PathBuf> {
    static SETUP: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _setting_up = SETUP.lock().await;
    let venv = workspace_root().join("target").join("py-venv");
    let python = venv.join("bin").join("python");
    if has_sdk(&venv).await {
        return Ok(python);
    }
    match Command::new("python3").arg("--version").output().await {
        Ok(output) if output.status.success() => {}
        Ok(output) => bail!("`python3 --version` failed: {INSTALL_PYTHON}\n{}", output_text(&output)),
        Err(e) => bail!("python3 is not on PATH ({e}): {INSTALL_PYTHON}"),
    }
    run_setup(Command::new("python3").args(["-m", "venv", "--clear"]).arg(&venv), "python3 -m venv")
        .await
        .with_context(|| format!("cannot make a virtualenv at {}: {INSTALL_PYTHON}", venv.display()))?;
    run_setup(
        Command::new(&python).args([
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            &format!("mcp=={MCP_VERSION}"),
        ]),
        "pip install mcp",
    )
    .await?;
    ensure!(has_sdk(&venv).await, "pip installed mcp, but `pip show mcp` does not report {MCP_VERSION}");
    Ok(python)
}

#[tokio::test]
async fn the_python_sdk_runs_tools_and_tasks_on_the_2025_wire() -> anyhow::Result<()> {
    let python = python_with_sdk().await?;
    let redis = RedisServer::start()?;
    let conveyor =
        Conveyor::up(&redis.url(), &["--fixtures", "--task-ttl-ms", "60000", "--task-ttl-max-ms", "600000"])?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python").join("legacy_client.py");

    let run = Command::new(&python)
        .arg(&script)
        .arg(conveyor.mcp_url())
        .env("PYTHONUNBUFFERED", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .kill_on_drop(true)
        .output();
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
    let python = python_with_sdk().await?;
    let mut redis =
        RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always", "--save", ""])?;
    let conveyor = Conveyor::up(&redis.url(), &["--fixtures", "--redis-timeout-ms", "1000"])?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python").join("outage_client.py");
    let run = Command::new(&python)
        .arg(&script)
        .arg(conveyor.mcp_url())
        .arg("6")
        .env("PYTHONUNBUFFERED", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .kill_on_drop(true)
        .output();
    let client = tokio::spawn(async move { tokio::time::timeout(SCRIPT_TIMEOUT, run).await });
    tokio::time::sleep(Duration::from_secs(2)).await;
    redis.kill();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    redis.restart()?;
    let output = match client.await? {
        Ok(output) => output.context("cannot run the Python client")?,
        Err(_) => bail!("the Python client did not finish\n--- conveyor log ---\n{}", conveyor.log_text()),
    };
    ensure!(
        output.status.success(),
        "the Python SDK's session broke through the Redis restart\n{}\n--- conveyor log ---\n{}",
        output_text(&output),
        conveyor.log_text()
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
