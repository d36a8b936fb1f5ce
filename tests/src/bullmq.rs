//! BullMQ 6.7 beside Conveyor: installs the pinned Node benchmark in `tests/bullmq/` (BullMQ 6.7.0
//! and ioredis, from its lock file) under `target/bullmq`, runs `node bench.mjs` against a Redis
//! URL and parses the figures it prints, so that a benchmark can set BullMQ and Conveyor side by
//! side on the same machine and the same `redis-server` in one run.
//!
//! What each figure means is written at the top of `tests/bullmq/bench.mjs`. Node.js 18 or newer
//! and npm must be on `PATH`; npm needs the registry only the first time.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{Context, bail};
use serde::Deserialize;

use crate::process::{output_text, workspace_root};

/// The BullMQ version the benchmark pins.
pub const BULLMQ_VERSION: &str = "6.7.0";

/// The files of `tests/bullmq/` that make up the benchmark (the lock file is optional).
const FILES: [&str; 3] = ["package.json", "package-lock.json", "bench.mjs"];

/// How much work `bench.mjs` does; [`Default`] is the script's own defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BullmqOptions {
    /// Jobs added, then consumed, in the `add` and `consume` phases.
    pub jobs: u64,
    /// Worker concurrency in `consume` and `fanout`.
    pub concurrency: u64,
    /// Sequential jobs timed from add to completed in `latency`.
    pub latency_jobs: u64,
    /// Jobs added at once and consumed in `fanout`.
    pub fanout: u64,
}

impl Default for BullmqOptions {
    fn default() -> Self {
        Self { jobs: 20_000, concurrency: 64, latency_jobs: 500, fanout: 10_000 }
    }
}

/// Everything `bench.mjs` prints.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct BullmqFigures {
    /// BullMQ, ioredis, Node.js and Redis versions of the run.
    pub bullmq: String,
    pub ioredis: String,
    pub node: String,
    pub redis: String,
    /// Prefix of the run's queue names (the queues are deleted at the end).
    pub queue_prefix: String,
    pub concurrency: u64,
    pub add: Phase,
    pub consume: Phase,
    pub cycle: Cycle,
    pub latency: Latency,
    pub fanout: Fanout,
}

/// One measured phase.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Phase {
    pub jobs: u64,
    pub seconds: f64,
    pub jobs_per_sec: f64,
    /// Redis `used_cpu_sys + used_cpu_user` spent during the phase.
    pub redis_cpu_seconds: f64,
    /// `INFO commandstats` calls during the phase, commands inside Lua scripts included.
    pub redis_commands: u64,
}

/// `add` and `consume` together, per job.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Cycle {
    pub redis_cpu_us_per_job: f64,
    pub redis_commands_per_job: f64,
}

/// Add-to-completed times of jobs added one at a time, each awaited before the next.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Latency {
    pub jobs: u64,
    /// Jobs run first and not counted.
    pub warmup: u64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub mean_ms: f64,
    pub max_ms: f64,
}

/// `fanout` jobs added at once, then consumed.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Fanout {
    pub jobs: u64,
    /// Adding plus consuming.
    pub seconds: f64,
    /// Jobs over [`Fanout::seconds`].
    pub jobs_per_sec: f64,
    pub add: Phase,
    pub consume: Phase,
}

/// Copies `tests/bullmq/` to `<workspace>/target/bullmq`, installs its packages there with npm
/// (skipped when the pinned versions are already installed) and returns that directory.
pub fn install() -> anyhow::Result<PathBuf> {
    let source = workspace_root().join("tests").join("bullmq");
    let dir = workspace_root().join("target").join("bullmq");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for file in FILES {
        let from = source.join(file);
        if from.exists() {
            std::fs::copy(&from, dir.join(file))
                .with_context(|| format!("cannot copy {} to {}", from.display(), dir.display()))?;
        } else if file != "package-lock.json" {
            bail!("{} is missing", from.display());
        }
    }
    let node = node_version()?;
    let major = node.trim_start_matches('v').split('.').next().and_then(|m| m.parse::<u32>().ok());
    anyhow::ensure!(
        major.is_some_and(|m| m >= 18),
        "the BullMQ comparison needs Node.js 18 or newer, found {node}"
    );
    if installed(&dir)? {
        return Ok(dir);
    }
    let install = if dir.join("package-lock.json").exists() { "ci" } else { "install" };
    let output =
        run_tool(Command::new("npm").args([install, "--no-audit", "--no-fund"]).current_dir(&dir), "npm")?;
    if !output.status.success() {
        bail!("npm {install} in {} failed\n{}", dir.display(), output_text(&output));
    }
    anyhow::ensure!(
        installed(&dir)?,
        "npm {install} in {} succeeded but bullmq {BULLMQ_VERSION} is not installed\n{}",
        dir.display(),
        output_text(&output)
    );
    Ok(dir)
}

/// Installs the benchmark if needed and runs it against `redis_url`: a few seconds of load on that
/// server with the default options. Its queues are deleted at the end.
pub fn run(redis_url: &str, options: &BullmqOptions) -> anyhow::Result<BullmqFigures> {
    let dir = install()?;
    let mut command = Command::new("node");
    command.current_dir(&dir).arg("bench.mjs").args(["--redis", redis_url]);
    for (flag, value) in [
        ("--jobs", options.jobs),
        ("--concurrency", options.concurrency),
        ("--latency-jobs", options.latency_jobs),
        ("--fanout", options.fanout),
    ] {
        command.arg(flag).arg(value.to_string());
    }
    let output = run_tool(&mut command, "node")?;
    if !output.status.success() {
        bail!("the BullMQ benchmark (node bench.mjs in {}) failed\n{}", dir.display(), output_text(&output));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let json = stdout.lines().rev().find(|line| !line.trim().is_empty()).unwrap_or_default();
    serde_json::from_str(json).with_context(|| {
        format!("the BullMQ benchmark printed no figures that parse\n{}", output_text(&output))
    })
}

/// The installed Node.js version, or an error saying that Node.js is missing.
fn node_version() -> anyhow::Result<String> {
    let output = run_tool(Command::new("node").arg("--version"), "node")?;
    if !output.status.success() {
        bail!("node --version failed\n{}", output_text(&output));
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// Runs a Node.js tool to completion, with an error that names it when it is not installed.
fn run_tool(command: &mut Command, tool: &str) -> anyhow::Result<Output> {
    command.output().map_err(|err| match err.kind() {
        ErrorKind::NotFound => {
            anyhow::anyhow!("{tool} is not on PATH: the BullMQ comparison needs Node.js 18 or newer with npm")
        }
        _ => anyhow::Error::new(err).context(format!("cannot run {tool}")),
    })
}

/// Whether every dependency of the copied `package.json` is installed at its pinned version.
fn installed(dir: &Path) -> anyhow::Result<bool> {
    let manifest = dir.join("package.json");
    let package: serde_json::Value = serde_json::from_slice(
        &std::fs::read(&manifest).with_context(|| format!("cannot read {}", manifest.display()))?,
    )
    .with_context(|| format!("{} is not JSON", manifest.display()))?;
    let dependencies = package["dependencies"].as_object().cloned().unwrap_or_default();
    anyhow::ensure!(
        dependencies.get("bullmq").and_then(|v| v.as_str()) == Some(BULLMQ_VERSION),
        "{} must pin bullmq {BULLMQ_VERSION}",
        manifest.display()
    );
    Ok(dependencies.iter().all(|(name, wanted)| {
        let installed = std::fs::read(dir.join("node_modules").join(name).join("package.json"))
            .ok()
            .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok());
        installed.is_some_and(|p| p["version"].as_str().is_some_and(|v| Some(v) == wanted.as_str()))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::monitor::Monitor;
    use crate::process::RedisServer;

    /// The real script on a small load: `cargo test -p conveyor-tests --lib bullmq -- --ignored`.
    #[test]
    #[ignore = "needs Node.js and npm, and the npm registry the first time"]
    fn the_script_runs_against_a_real_redis() -> anyhow::Result<()> {
        let server = RedisServer::start()?;
        let options = BullmqOptions { jobs: 500, concurrency: 16, latency_jobs: 20, fanout: 300 };
        let monitor = Monitor::start(&server.url())?;
        let figures = run(&server.url(), &options)?;
        let counts = monitor.stop()?;
        assert_eq!(figures.bullmq, BULLMQ_VERSION);
        assert_eq!((figures.add.jobs, figures.consume.jobs, figures.fanout.jobs), (500, 500, 300));
        assert_eq!(figures.latency.jobs, 20);
        assert!(figures.consume.jobs_per_sec > 0.0 && figures.latency.p50_ms > 0.0, "{figures:?}");
        assert!(figures.cycle.redis_commands_per_job > 1.0, "{figures:?}");
        // BullMQ does its work in Lua scripts, and its queues are gone afterwards.
        assert!(
            counts.client("EVALSHA") > 0 && counts.script_commands > counts.client_commands,
            "{counts:?}"
        );
        let mut conn = server.connection()?;
        assert_eq!(redis::cmd("DBSIZE").query::<u64>(&mut conn)?, 0);
        Ok(())
    }

    #[test]
    fn figures_parse_from_the_script_output() -> anyhow::Result<()> {
        let phase = r#"{"jobs":2000,"seconds":0.145,"jobs_per_sec":13790.3,"redis_cpu_seconds":0.043749,"redis_commands":18000}"#;
        let json = format!(
            r#"{{"bullmq":"6.7.0","ioredis":"5.11.1","node":"v20.20.2","redis":"7.0.15","queue_prefix":"bench-1","concurrency":64,"add":{phase},"consume":{phase},"cycle":{{"redis_cpu_us_per_job":86.03,"redis_commands_per_job":32.3}},"latency":{{"jobs":50,"warmup":10,"p50_ms":1.5,"p90_ms":1.8,"p99_ms":5.7,"mean_ms":1.6,"max_ms":5.7}},"fanout":{{"jobs":2000,"seconds":0.324,"jobs_per_sec":6172.8,"add":{phase},"consume":{phase}}}}}"#
        );
        let figures: BullmqFigures = serde_json::from_str(&json)?;
        assert_eq!(figures.bullmq, BULLMQ_VERSION);
        assert_eq!(figures.add.redis_commands, 18_000);
        assert_eq!(figures.fanout.consume.jobs, 2000);
        assert!((figures.latency.p99_ms - 5.7).abs() < 1e-9);
        Ok(())
    }
}
