//! Soak: many no-op tasks through the gateway, to show that nothing grows without bound.
//!
//! It starts a private redis-server, one gateway (task TTL 3 s) and two workers, runs `--tasks`
//! no-op tasks (a 2025-11-25 `tools/call` with `task`, then `tasks/result`) with `--concurrency` in
//! flight, and prints the gateway's and the workers' resident memory (RSS) at the start and the end,
//! and Redis's memory, key count and work-stream length before the run, right after it, and once
//! the tasks' TTLs have run out.
//!
//! Usage: cargo run --release -p conveyor-tests --bin soak -- [--tasks N] [--concurrency C]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use conveyor_tests::{Conveyor, Mcp, RedisServer};
use futures::StreamExt;
use serde_json::json;

fn rss_kib(pid: Option<u32>) -> u64 {
    let Some(pid) = pid else { return 0 };
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

struct RedisState {
    used_memory: u64,
    keys: u64,
    stream: u64,
}

fn redis_state(redis: &RedisServer) -> anyhow::Result<RedisState> {
    let mut conn = redis.connection()?;
    let info: String = redis::cmd("INFO").arg("memory").query(&mut conn)?;
    let used_memory = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let keys: u64 = redis::cmd("DBSIZE").query(&mut conn)?;
    let stream = redis.stream_entries() as u64;
    Ok(RedisState { used_memory, keys, stream })
}

fn show(label: &str, state: &RedisState) {
    println!(
        "redis {label:<22} used_memory {:>8.1} MiB  keys {:>7}  work stream {:>7} entries",
        state.used_memory as f64 / 1048576.0,
        state.keys,
        state.stream
    );
}

async fn one_task(mcp: &Mcp) -> anyhow::Result<()> {
    let created = mcp.call_2025("tools/call", json!({"name": "noop", "arguments": {}, "task": {}})).await?;
    let task_id = created.result()["task"]["taskId"]
        .as_str()
        .ok_or_else(|| anyhow::anyhow!("no task: {}", created.raw))?
        .to_owned();
    let result = mcp.call_2025("tasks/result", json!({"taskId": task_id})).await?;
    anyhow::ensure!(result.result()["content"][0]["text"] == "ok", "unexpected result {}", result.raw);
    Ok(())
}

/// Soak: many no-op tasks through the gateway, to show that nothing grows without bound (see the
/// header of tests/src/bin/soak.rs)
#[derive(Parser)]
#[command(
    name = "soak",
    override_usage = "cargo run --release -p conveyor-tests --bin soak -- [OPTIONS]",
    args_override_self = true
)]
struct Options {
    /// No-op tasks run
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    tasks: usize,
    /// Tasks in flight
    #[arg(long, value_name = "C", default_value_t = 64)]
    concurrency: usize,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let Options { tasks, concurrency } = Options::parse();
    if !cfg!(debug_assertions) {
        conveyor_tests::process::prefer_release_binary();
    }
    let ttl_ms = 3_000u64;
    let redis = RedisServer::start()?;
    let ttl = ttl_ms.to_string();
    let gateway = Conveyor::gateway(&redis.url(), &["--task-ttl-ms", &ttl, "--task-ttl-max-ms", &ttl])?;
    let workers = [
        Conveyor::worker(&redis.url(), &["--fixtures", "--concurrency", "64"])?,
        Conveyor::worker(&redis.url(), &["--fixtures", "--concurrency", "64"])?,
    ];
    let mcp = Arc::new(Mcp::new(gateway.mcp_url()));
    mcp.wait_for_tool("noop", Duration::from_secs(20)).await?;
    // Warm up, and let the warm-up's tasks expire, so that "start" is a steady state.
    for _ in 0..1000 {
        one_task(&mcp).await?;
    }
    tokio::time::sleep(Duration::from_millis(ttl_ms + 6_000)).await;
    let start_rss = (rss_kib(gateway.pid()), workers.iter().map(|w| rss_kib(w.pid())).collect::<Vec<_>>());
    let before = redis_state(&redis)?;

    println!(
        "soak: {tasks} no-op tasks, {concurrency} in flight, task TTL {ttl_ms} ms, 1 gateway, 2 workers"
    );
    let done = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let failures: usize = futures::stream::iter(0..tasks)
        .map(|_| {
            let (mcp, done) = (mcp.clone(), done.clone());
            async move {
                let outcome = one_task(&mcp).await;
                let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                if n % 20_000 == 0 {
                    eprintln!("  {n} tasks");
                }
                usize::from(outcome.is_err())
            }
        })
        .buffer_unordered(concurrency)
        .fold(0, |sum, failed| async move { sum + failed })
        .await;
    let elapsed = started.elapsed();
    let end_rss = (rss_kib(gateway.pid()), workers.iter().map(|w| rss_kib(w.pid())).collect::<Vec<_>>());
    let after_run = redis_state(&redis)?;
    println!(
        "{} tasks in {:.1} s ({:.0} tasks/s), {failures} failed",
        tasks,
        elapsed.as_secs_f64(),
        tasks as f64 / elapsed.as_secs_f64()
    );
    println!("gateway RSS    start {:>7} KiB  end {:>7} KiB", start_rss.0, end_rss.0);
    for (i, (s, e)) in start_rss.1.iter().zip(&end_rss.1).enumerate() {
        println!("worker {i} RSS   start {s:>7} KiB  end {e:>7} KiB");
    }
    // TTLs run out, the reaper clears the owner index, the stream is trimmed.
    tokio::time::sleep(Duration::from_millis(ttl_ms + 8_000)).await;
    let after_expiry = redis_state(&redis)?;
    show("before the run", &before);
    show("right after the run", &after_run);
    show("after the TTLs", &after_expiry);
    anyhow::ensure!(failures == 0, "{failures} tasks failed");
    Ok(())
}
