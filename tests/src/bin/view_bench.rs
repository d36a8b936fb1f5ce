//! What watching a task costs Redis: commands per read of the task resources (one tick of
//! `conveyor call`'s live view, one page of `conveyor tasks ls`) and per tick of the web view's
//! event stream, on one private `redis-server` with one `conveyor gateway --no-auth`. A `conveyor
//! worker --fixtures` runs the tasks first and is stopped before anything is counted.
//!
//! Commands are counted with `INFO commandstats`, command by command. The gateway sends a few
//! commands of its own (its event subscription's keep-alive), so each measurement is followed by a
//! span (as long, and at least 15 s) in which nothing is read, and that span's counts, scaled to
//! the measurement's length, are taken away. What is left is
//! printed per read (or per tick), with the commands it is made of. Nothing is asserted; a read
//! that fails ends the run.
//!
//! Measured: `resources/read conveyor://tasks/{taskId}` of a finished graph of W + 2 nodes
//! (`plan_fanout`), `resources/read conveyor://tasks` with T finished tasks (one page when T ≤
//! 100), and `GET /ui/api/stream?task=…` held open for 10 s with that graph open (its ticks are
//! 500 ms apart).
//!
//! Usage: cargo run --release -p conveyor-tests --bin view-bench -- [--reads N] [--tasks T] [--width W]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use clap::Parser;
use conveyor_tests::load::at_least_one;
use conveyor_tests::process::commands_per;
use conveyor_tests::{Conveyor, Mcp, RedisServer};
use serde_json::{Value, json};

/// How long the web view's stream is held open.
const STREAM_FOR: Duration = Duration::from_secs(10);
/// The shortest quiet span whose counts are taken away as background.
const QUIET_AT_LEAST: Duration = Duration::from_secs(15);
/// The web view's stream interval (`gateway/src/ui/stream.rs`).
const STREAM_TICK: Duration = Duration::from_millis(500);

/// Redis commands per read of the task resources and per tick of the web view's stream (see the
/// header of tests/src/bin/view_bench.rs)
#[derive(Parser)]
#[command(
    name = "view-bench",
    override_usage = "cargo run --release -p conveyor-tests --bin view-bench -- [OPTIONS]",
    args_override_self = true
)]
struct Options {
    /// Reads of each resource
    #[arg(long, value_name = "N", default_value_t = 200, value_parser = at_least_one::<u64>())]
    reads: u64,
    /// Finished tasks in the list
    #[arg(long, value_name = "T", default_value_t = 100, value_parser = at_least_one::<u64>())]
    tasks: u64,
    /// Parallel nodes of the graph read (18: a graph of 20 nodes)
    #[arg(long, value_name = "W", default_value_t = 18, value_parser = at_least_one::<u64>())]
    width: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let options = Options::parse();
    if !cfg!(debug_assertions) {
        // A release benchmark measures the release build of conveyor too.
        conveyor_tests::process::prefer_release_binary();
    }
    let redis = RedisServer::start().context("redis-server starts")?;
    let conveyor = Conveyor::gateway(&redis.url(), &["--no-auth"]).context("conveyor gateway starts")?;
    let worker = Conveyor::worker(&redis.url(), &["--fixtures"]).context("conveyor worker starts")?;
    let mcp = Mcp::new(conveyor.mcp_url());
    mcp.wait_for_tool("plan_fanout", Duration::from_secs(10)).await?;

    let graph = create(
        &mcp,
        json!({"name": "plan_fanout", "arguments": {"width": options.width, "seconds": 0}, "task": {}}),
    )
    .await?;
    for _ in 1..options.tasks {
        create(&mcp, json!({"name": "slow_compute", "arguments": {"seconds": 0}, "task": {}})).await?;
    }
    wait_completed(&mcp, &graph).await?;
    // Let the last tasks settle, then stop the worker: its heartbeats and maintenance would be
    // background in every count, and reading a task needs no worker.
    tokio::time::sleep(Duration::from_secs(2)).await;
    drop(worker);

    println!(
        "view-bench: {} reads each; a graph of {} nodes; {} tasks in the list",
        options.reads,
        options.width + 2,
        options.tasks
    );
    let uri = format!("conveyor://tasks/{graph}");
    let counted = measure(&redis, options.reads as f64, || async {
        for _ in 0..options.reads {
            read(&mcp, &uri).await?;
        }
        Ok(())
    })
    .await?;
    report("resources/read conveyor://tasks/{taskId} (a live-view tick)", "read", &counted);

    let counted = measure(&redis, options.reads as f64, || async {
        for _ in 0..options.reads {
            read(&mcp, "conveyor://tasks").await?;
        }
        Ok(())
    })
    .await?;
    report("resources/read conveyor://tasks (a page of the list)", "read", &counted);

    let ticks = STREAM_FOR.as_secs_f64() / STREAM_TICK.as_secs_f64();
    let stream_url = format!("{}/ui/api/stream?task={graph}", conveyor.base);
    let counted = measure(&redis, ticks, || async {
        let mut response = reqwest::get(&stream_url).await?.error_for_status()?;
        let until = Instant::now() + STREAM_FOR;
        while let Ok(chunk) =
            tokio::time::timeout(until.saturating_duration_since(Instant::now()), response.chunk()).await
        {
            if chunk?.is_none() {
                bail!("the stream ended before {STREAM_FOR:?}");
            }
        }
        Ok(())
    })
    .await?;
    report("web view stream, the list and the open graph (a 500 ms tick)", "tick", &counted);
    Ok(())
}

/// Runs `action`, then waits as long with nothing done, and returns the commands per `units` that
/// `action` added to what Redis did anyway.
async fn measure<F, Fut>(redis: &RedisServer, units: f64, action: F) -> anyhow::Result<BTreeMap<String, f64>>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let before = redis.command_stats()?;
    let started = Instant::now();
    action().await?;
    let span = started.elapsed();
    let during = redis.command_stats()?;
    // The gateway's keep-alive comes every few seconds: a longer quiet span averages it out.
    let quiet = span.max(QUIET_AT_LEAST);
    tokio::time::sleep(quiet).await;
    let after = redis.command_stats()?;
    let (_, measured) = commands_per(&before, &during, units);
    // The quiet span's commands, scaled to the measured span, per unit.
    let (_, background) = commands_per(&during, &after, units * quiet.as_secs_f64() / span.as_secs_f64());
    let mut per_unit: BTreeMap<String, f64> =
        measured.into_iter().map(|(name, n)| (name.to_uppercase(), n)).collect();
    for (name, n) in background {
        *per_unit.entry(name.to_uppercase()).or_default() -= n;
    }
    // Less than a twentieth of a command per unit is background that did not repeat evenly.
    per_unit.retain(|_, n| *n >= 0.05);
    Ok(per_unit)
}

fn report(what: &str, unit: &str, counted: &BTreeMap<String, f64>) {
    let total: f64 = counted.values().sum();
    let parts: Vec<String> = counted.iter().map(|(name, n)| format!("{name} {n:.2}")).collect();
    println!("{what}: {total:.2} Redis commands per {unit} ({})", parts.join(", "));
}

async fn create(mcp: &Mcp, params: Value) -> anyhow::Result<String> {
    let reply = mcp.call_2025("tools/call", params).await?;
    reply.result()["task"]["taskId"]
        .as_str()
        .map(str::to_owned)
        .with_context(|| format!("no task in {}", reply.raw))
}

async fn read(mcp: &Mcp, uri: &str) -> anyhow::Result<Value> {
    let reply = mcp.call_2025("resources/read", json!({"uri": uri})).await?;
    let text = reply.result()["contents"][0]["text"]
        .as_str()
        .with_context(|| format!("resources/read {uri}: {}", reply.raw))?;
    Ok(serde_json::from_str(text)?)
}

async fn wait_completed(mcp: &Mcp, task: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let state = read(mcp, &format!("conveyor://tasks/{task}")).await?;
        if state["status"] == "completed" {
            return Ok(());
        }
        ensure!(Instant::now() < deadline, "the graph did not complete: {state}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
