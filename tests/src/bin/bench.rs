//! End-to-end throughput and latency of Conveyor through MCP, against a private redis-server.
//!
//! For each worker count it starts a fresh redis-server, one `conveyor gateway` and N
//! `conveyor worker --fixtures` processes, then drives the no-op fixture tool two ways:
//! - `sync`: a 2026-07-28 `tools/call` without the tasks extension; the gateway creates a hidden
//!   task, a worker runs it, and the gateway answers with the result.
//! - `task`: a 2025-11-25 `tools/call` with `task`, then `tasks/result`, which blocks until the
//!   worker has settled the task; latency is from the `tools/call` to the result.
//!
//! Usage: cargo run --release -p conveyor-tests --bin bench -- [--tasks N] [--concurrency C] [--workers 1,2]

use std::sync::Arc;
use std::time::{Duration, Instant};

use conveyor_tests::{Conveyor, Mcp, RedisServer};
use futures::StreamExt;
use serde_json::json;

struct Options {
    tasks: usize,
    concurrency: usize,
    workers: Vec<usize>,
}

fn parse() -> anyhow::Result<Options> {
    let mut options = Options { tasks: 2000, concurrency: 32, workers: vec![1, 2] };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| anyhow::anyhow!("{arg} needs a value"));
        match arg.as_str() {
            "--tasks" => options.tasks = value()?.parse()?,
            "--concurrency" => options.concurrency = value()?.parse()?,
            "--workers" => {
                options.workers = value()?.split(',').map(str::parse).collect::<Result<_, _>>()?;
            }
            "-h" | "--help" => {
                println!("bench [--tasks N (2000)] [--concurrency C (32)] [--workers 1,2]");
                std::process::exit(0);
            }
            other => anyhow::bail!("unknown argument {other}; see --help"),
        }
    }
    Ok(options)
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Sync,
    Task,
}

async fn one_call(mcp: &Mcp, mode: Mode) -> anyhow::Result<Duration> {
    let started = Instant::now();
    match mode {
        Mode::Sync => {
            let reply =
                mcp.call_2026("tools/call", json!({"name": "noop", "arguments": {}}), json!({})).await?;
            anyhow::ensure!(reply.result()["content"][0]["text"] == "ok", "unexpected reply {}", reply.raw);
        }
        Mode::Task => {
            let created = mcp
                .call_2025("tools/call", json!({"name": "noop", "arguments": {}, "task": {"ttl": 60_000}}))
                .await?;
            let task_id = created.result()["task"]["taskId"]
                .as_str()
                .ok_or_else(|| anyhow::anyhow!("no task in {}", created.raw))?
                .to_owned();
            let result = mcp.call_2025("tasks/result", json!({"taskId": task_id})).await?;
            anyhow::ensure!(
                result.result()["content"][0]["text"] == "ok",
                "unexpected result {}",
                result.raw
            );
        }
    }
    Ok(started.elapsed())
}

async fn run(
    mcp: &Mcp,
    mode: Mode,
    tasks: usize,
    concurrency: usize,
) -> anyhow::Result<(Duration, Vec<Duration>)> {
    let started = Instant::now();
    let mcp = Arc::new(mcp.clone());
    let results: Vec<anyhow::Result<Duration>> = futures::stream::iter(0..tasks)
        .map(|_| {
            let mcp = mcp.clone();
            async move { one_call(&mcp, mode).await }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let elapsed = started.elapsed();
    let mut latencies = results.into_iter().collect::<anyhow::Result<Vec<_>>>()?;
    latencies.sort();
    Ok((elapsed, latencies))
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)].as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let options = parse()?;
    if !cfg!(debug_assertions) {
        // A release benchmark measures the release build of conveyor too.
        conveyor_tests::process::prefer_release_binary();
    }
    println!(
        "Conveyor end-to-end benchmark: no-op tool, {} calls per run, {} in flight, gateway and workers as separate processes",
        options.tasks, options.concurrency
    );
    println!(
        "{:<8} {:<6} {:>8} {:>10} {:>9} {:>9} {:>9} {:>9} {:>12}  busiest commands per call",
        "workers", "mode", "calls", "calls/s", "p50 ms", "p90 ms", "p99 ms", "max ms", "Redis cmds/call"
    );
    for &workers in &options.workers {
        let redis = RedisServer::start()?;
        let gateway = Conveyor::gateway(&redis.url(), &[])?;
        let mut worker_processes = Vec::new();
        for _ in 0..workers {
            worker_processes.push(Conveyor::worker(&redis.url(), &["--fixtures", "--concurrency", "64"])?);
        }
        let mcp = Mcp::new(gateway.mcp_url());
        mcp.wait_for_tool("noop", Duration::from_secs(20)).await?;
        for mode in [Mode::Sync, Mode::Task] {
            run(&mcp, mode, options.tasks / 10 + 1, options.concurrency).await?; // warm-up
            let before = redis.command_stats()?;
            let (elapsed, latencies) = run(&mcp, mode, options.tasks, options.concurrency).await?;
            let after = redis.command_stats()?;
            let (total, per_command) =
                conveyor_tests::process::commands_per(&before, &after, latencies.len() as f64);
            let busiest: Vec<String> =
                per_command.iter().take(6).map(|(name, n)| format!("{name} {n:.1}")).collect();
            println!(
                "{:<8} {:<6} {:>8} {:>10.0} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>12.1}  {}",
                workers,
                if mode == Mode::Sync { "sync" } else { "task" },
                latencies.len(),
                latencies.len() as f64 / elapsed.as_secs_f64(),
                percentile(&latencies, 0.50),
                percentile(&latencies, 0.90),
                percentile(&latencies, 0.99),
                percentile(&latencies, 1.0),
                total,
                busiest.join(", "),
            );
        }
        drop(worker_processes);
        drop(gateway);
        drop(redis);
    }
    Ok(())
}
