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

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use conveyor_tests::process::{output_text, workspace_root};
use conveyor_tests::{Conveyor, RedisServer};
use tokio::process::Command;

const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);
const INSTALL_PYTHON: &str = "install Python 3 with its venv module, e.g. `apt-get install -y python3 python3-venv` \
     on Debian or Ubuntu, or make `python3` on PATH point at a Python 3.10 or newer";

/// One official SDK release and the virtualenv it lives in.
struct Sdk {
    version: &'static str,
    venv: &'static str,
}

/// The 1.x SDK (2025-11-25); its venv is the one `python_sdk.rs` uses.
const MCP_1: Sdk = Sdk { version: "1.30.0", venv: "py-venv" };
/// The 2.x SDK (2026-07-28 and 2025-11-25), in a venv of its own.
const MCP_2: Sdk = Sdk { version: "2.3.0", venv: "py-venv-mcp2" };

/// Runs a setup command to completion and fails with its output unless it succeeds.
async fn run_setup(command: &mut Command, what: &str) -> anyhow::Result<Output> {
    let output = command.output().await.with_context(|| format!("cannot run {what}"))?;
    ensure!(output.status.success(), "{what} failed\n{}", output_text(&output));
    Ok(output)
}

/// Whether the venv already holds the wanted SDK.
async fn has_sdk(venv: &Path, version: &str) -> bool {
    let pip = venv.join("bin").join("pip");
    match Command::new(&pip).args(["show", "mcp"]).output().await {
        Ok(output) if output.status.success() => {
            String::from_utf8_lossy(&output.stdout).lines().any(|l| l.trim() == format!("Version: {version}"))
        }
        _ => false,
    }
}

/// `<workspace>/target/<venv>` with `mcp==<version>`; returns its python. The tests of this file
/// run in parallel: one sets a venv up at a time while the other waits.
async fn python_with(sdk: &Sdk) -> anyhow::Result<PathBuf> {
    static SETUP: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _setting_up = SETUP.lock().await;
    let venv = workspace_root().join("target").join(sdk.venv);
    let python = venv.join("bin").join("python");
    if has_sdk(&venv, sdk.version).await {
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
            &format!("mcp=={}", sdk.version),
        ]),
        &format!("pip install mcp=={} (PyPI must be reachable the first time)", sdk.version),
    )
    .await?;
    ensure!(
        has_sdk(&venv, sdk.version).await,
        "pip installed mcp, but `pip show mcp` does not report {}",
        sdk.version
    );
    Ok(python)
}

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
