//! Tools that ask, driven by the official MCP Python SDKs against a real Conveyor:
//!
//! - `mcp==1.30.0` runs `tests/python/asking_client.py` on 2025-11-25: elicitation and sampling
//!   requests on a call's SSE stream and on a task's `tasks/result` stream, answered by the SDK's
//!   callbacks, two rounds of one task in turn on one `tasks/result` stream (`interview`); -32021
//!   for an undeclared capability; logging; prompts, completions, resources.
//! - `mcp==2.3.0` runs `tests/python/asking_client_v2.py` on 2026-07-28 (multi-round-trip
//!   `input_required` results resolved by the SDK's callbacks, tasks through a small Tasks
//!   extension built on the SDK's extension hooks, `subscriptions/listen`, prompts and resources)
//!   and, with `mode="legacy"`, on 2025-11-25.
//!
//! - `mcp==1.30.0` also runs `tests/python/plan_adr_client.py`: `plan_adr` driven through its
//!   seven phases by a person the SDK's elicitation callback plays, to a MADR document read back
//!   as a resource; and a workflow declined at its first question.
//!
//! Needs `python3` with the `venv` module, and PyPI reachable the first time: each SDK is
//! installed into its own virtualenv under `<workspace>/target` (`py-venv` for 1.30.0, shared with
//! `python_sdk.rs`; `py-venv-mcp2` for 2.3.0), which later runs reuse.

use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use conveyor_tests::process::output_text;
use conveyor_tests::python::{MCP_1, MCP_2, Sdk, python_with, script};
use conveyor_tests::{Conveyor, RedisServer};

const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);
/// Runs one of the `tests/python` scripts with `sdk` against a fresh `conveyor up --fixtures`,
/// and fails with the script's output and the server's log unless every check passes.
async fn run_script(sdk: &Sdk, name: &str) -> anyhow::Result<()> {
    let python = python_with(sdk).await?;
    let redis = RedisServer::start()?;
    let conveyor = Conveyor::up(&redis.url(), &["--fixtures"])?;
    let started = Instant::now();
    let run = script(&python, name).arg(conveyor.mcp_url()).output();
    let output = match tokio::time::timeout(SCRIPT_TIMEOUT, run).await {
        Ok(output) => output.with_context(|| format!("cannot run {name}"))?,
        Err(_) => bail!(
            "{name} (mcp {}) did not finish within {SCRIPT_TIMEOUT:?}\n--- conveyor log ---\n{}",
            sdk.version,
            conveyor.log_text()
        ),
    };
    ensure!(
        output.status.success(),
        "{name} (mcp {}) failed\n{}\n--- conveyor log ---\n{}",
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

#[tokio::test]
async fn the_python_sdk_drives_plan_adr_through_its_seven_phases() -> anyhow::Result<()> {
    let python = python_with(&MCP_1).await?;
    let redis = RedisServer::start()?;
    let root = format!("repo={}", conveyor_tests::process::workspace_root().display());
    let conveyor = Conveyor::up(&redis.url(), &["--root", &root, "--workers", "2"])?;
    // Watches every plan_adr task's progress while the person answers (the script's person takes
    // 0.3 s per question), so that each phase's step is seen.
    let watching = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let watcher = {
        let (watching, url) = (watching.clone(), redis.url());
        tokio::task::spawn_blocking(move || -> anyhow::Result<std::collections::BTreeSet<u32>> {
            let mut conn = redis::Client::open(url)?.get_connection()?;
            let mut seen = std::collections::BTreeSet::new();
            while watching.load(std::sync::atomic::Ordering::Relaxed) {
                for key in conveyor_tests::process::scan(&mut conn, "cv:*:t:*")? {
                    let (tool, progress, total): (Option<String>, Option<f64>, Option<f64>) =
                        redis::cmd("HMGET")
                            .arg(&key)
                            .arg("tool")
                            .arg("progress")
                            .arg("total")
                            .query(&mut conn)?;
                    if let (Some("plan_adr"), Some(progress), Some(total)) =
                        (tool.as_deref(), progress, total)
                        && total > 7000.0
                    {
                        seen.insert((100.0 * progress / total).floor() as u32);
                    }
                }
                std::thread::sleep(Duration::from_millis(25));
            }
            Ok(seen)
        })
    };
    let run = script(&python, "plan_adr_client.py").arg(conveyor.mcp_url()).arg("repo").output();
    let output =
        tokio::time::timeout(SCRIPT_TIMEOUT, run).await.context("plan_adr_client.py did not finish")??;
    watching.store(false, std::sync::atomic::Ordering::Relaxed);
    let seen = watcher.await??;
    ensure!(
        output.status.success(),
        "plan_adr_client.py failed\n{}\n--- conveyor log ---\n{}",
        output_text(&output),
        conveyor.log_text()
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    print!("{stdout}");
    let task_id =
        stdout.lines().find_map(|l| l.strip_prefix("TASK ")).context("the script named no task")?.trim();
    // Progress moved by phase to its end: every phase weighs the same, so the task's progress
    // equals its total once the seventh phase is done.
    let mut conn = redis.connection()?;
    let (progress, total): (f64, f64) = redis::cmd("HMGET")
        .arg(conveyor_tests::process::task_key(task_id))
        .arg("progress")
        .arg("total")
        .query(&mut conn)?;
    ensure!((progress - total).abs() < 1e-6 && total > 7000.0, "progress {progress} of {total}");
    // The phases that ask start at 0, 28, 42, 57 and 71 %; the task ends at 100 %.
    for step in [0, 28, 42, 57, 71, 100] {
        ensure!(seen.contains(&step), "progress never showed {step} %: saw {seen:?}");
    }
    println!("progress seen (%): {seen:?}");
    Ok(())
}
