//! The official MCP Python SDK for the tests that drive Conveyor with it: each release lives in a
//! virtualenv of its own under `<workspace>/target`, made the first time (PyPI must be reachable
//! then) and reused afterwards. The scripts the tests run live in `tests/python`.

use std::path::{Path, PathBuf};
use std::process::Output;

use anyhow::{Context, bail, ensure};
use tokio::process::Command;

use crate::process::{output_text, workspace_root};

const INSTALL_PYTHON: &str = "install Python 3 with its venv module, e.g. `apt-get install -y python3 python3-venv` \
     on Debian or Ubuntu, or make `python3` on PATH point at a Python 3.10 or newer";

/// One SDK release and the virtualenv (a folder under `target/`) it lives in.
pub struct Sdk {
    pub version: &'static str,
    pub venv: &'static str,
}

/// The 1.x SDK (2025-11-25).
pub const MCP_1: Sdk = Sdk { version: "1.30.0", venv: "py-venv" };
/// The 2.x SDK (2026-07-28, and 2025-11-25 with `mode="legacy"`).
pub const MCP_2: Sdk = Sdk { version: "2.3.0", venv: "py-venv-mcp2" };

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

/// The python of `sdk`'s virtualenv, made first if needed. The tests of one test binary run in
/// parallel: one sets a venv up at a time while the others wait.
pub async fn python_with(sdk: &Sdk) -> anyhow::Result<PathBuf> {
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
    let requirement = format!("mcp=={}", sdk.version);
    run_setup(
        Command::new(&python).args([
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            &requirement,
        ]),
        &format!("pip install {requirement} (PyPI must be reachable the first time)"),
    )
    .await?;
    ensure!(
        has_sdk(&venv, sdk.version).await,
        "pip installed mcp, but `pip show mcp` does not report {}",
        sdk.version
    );
    Ok(python)
}

/// A command that runs the `tests/python` script `name` with `python` (from [`python_with`]); the
/// caller adds the script's arguments. It writes no `__pycache__` into the source tree, and it is
/// killed if the test drops it (at a timeout).
pub fn script(python: &Path, name: &str) -> Command {
    let mut command = Command::new(python);
    command
        .arg(workspace_root().join("tests/python").join(name))
        .env("PYTHONUNBUFFERED", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .kill_on_drop(true);
    command
}
