//! What reading tasks with large results costs a gateway, and another principal beside it. One
//! private `redis-server`, one `conveyor worker --fixtures`, and a `conveyor gateway` with static
//! tokens for alice and bob. Alice first runs T tasks of `big_output` (B bytes of result each) to
//! the end; then each phase starts a fresh gateway, so that its peak resident memory is the
//! phase's own, and runs R readers of alice's for S seconds while bob calls `greet` in a loop:
//!
//! - `listings`: each reader reads alice's task list in turn through `tasks/list`,
//!   `resources/read conveyor://tasks` and `GET /ui/api/tasks`;
//! - `details`: each reader reads the tasks' results in turn through `tasks/result`.
//!
//! Printed per phase: the gateway's peak resident memory (`VmHWM`) before and after, the largest
//! answer a reader got, how many reads were answered and how many refused (and with which limit),
//! and bob's `greet` latency (p50, p95, max). Nothing is asserted: a figure is a measurement.
//!
//! Measured with the defaults (20 tasks of 6 MiB, 4 readers, 10 s; debug builds on 2 shared
//! cores, two runs each, before and after listings read status fields only and detail reads
//! counted against the in-flight budget):
//!
//! | phase | gateway peak RSS growth | largest answer | answered | bob's greet p95 |
//! |---|---|---|---|---|
//! | listings, before | +378 to +486 MiB | 6,303 B | 27-29 | 623-784 ms |
//! | listings, after | +0 to +2 MiB | 6,303 B | 2,252-2,518 | 15-16 ms |
//! | details, before | +74 to +80 MiB | 6.0 MiB | 71 | 634-669 ms |
//! | details, after | +76 to +82 MiB (alice's share: 64 MiB) | 6.0 MiB | 58-63 | 31-33 ms |
//!
//! Before, each listing read every listed task's call and result (120 MiB a page here). After,
//! a listing reads status fields only; a detail read holds three times what it reads of its
//! caller's share until its answer is written (here three of alice's reads at once), and parses
//! and writes a large answer off the threads that serve every request, so bob is not held up.
//!
//! The `storing` phase (`--phase storing`, or `all`) measures what one principal can make Redis
//! keep: on a fresh Redis, alice calls `big_output` (B bytes) N times in a row, each to its end,
//! under the default budget of stored bytes per principal (256 MiB), while bob greets. Printed:
//! Redis's used memory before and after, how alice's calls ended (kept, failed at the budget,
//! refused at the door) with the last answer she got, and bob's greet latency.
//!
//! Usage: cargo run --release -p conveyor-tests --bin readers-bench -- [--tasks T] [--bytes B]
//! [--readers R] [--seconds S] [--stores N] [--phase listings|details|both|storing|all]

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use clap::Parser;
use conveyor_tests::load::at_least_one;
use conveyor_tests::process::{conveyor_bin, peak_rss, scratch_dir};
use conveyor_tests::{Conveyor, Mcp, RedisServer};
use serde_json::{Value, json};

/// What T readers of tasks with large results cost a gateway (see the header of
/// tests/src/bin/readers_bench.rs)
#[derive(Parser)]
#[command(
    name = "readers-bench",
    override_usage = "cargo run --release -p conveyor-tests --bin readers-bench -- [OPTIONS]",
    args_override_self = true
)]
struct Options {
    /// Finished tasks of alice's
    #[arg(long, value_name = "T", default_value_t = 20, value_parser = at_least_one::<u64>())]
    tasks: u64,
    /// Bytes of each task's result text
    #[arg(long, value_name = "B", default_value_t = 6 * 1024 * 1024)]
    bytes: u64,
    /// Readers of alice's at once
    #[arg(long, value_name = "R", default_value_t = 4, value_parser = at_least_one::<u64>())]
    readers: u64,
    /// How long each phase reads
    #[arg(long, value_name = "S", default_value_t = 10, value_parser = at_least_one::<u64>())]
    seconds: u64,
    /// Calls of alice's in the storing phase
    #[arg(long, value_name = "N", default_value_t = 60, value_parser = at_least_one::<u64>())]
    stores: u64,
    /// Which phase to run
    #[arg(long, value_enum, default_value_t = Phase::Both)]
    phase: Phase,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Phase {
    Listings,
    Details,
    /// Listings and details.
    Both,
    Storing,
    /// Listings, details and storing.
    All,
}

const PRINCIPALS: [&str; 2] = ["alice", "bob"];

fn token(principal: &str) -> String {
    format!("{principal}-token-0123456789")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let options = Options::parse();
    if !cfg!(debug_assertions) {
        // A release benchmark measures the release build of conveyor too.
        conveyor_tests::process::prefer_release_binary();
    }
    if matches!(options.phase, Phase::Listings | Phase::Details | Phase::Both | Phase::All) {
        reading(&options).await?;
    }
    if matches!(options.phase, Phase::Storing | Phase::All) {
        storing(&options).await?;
    }
    Ok(())
}

/// The listings and details phases, over alice's finished tasks.
async fn reading(options: &Options) -> anyhow::Result<()> {
    let redis = RedisServer::start().context("redis-server starts")?;
    let tokens = tokens_file()?;
    let tokens = tokens.to_str().context("utf-8 path")?.to_owned();
    let _worker = Conveyor::worker(&redis.url(), &["--fixtures"]).context("conveyor worker starts")?;
    let gateway = Conveyor::gateway(&redis.url(), &["--tokens-file", &tokens]).context("gateway starts")?;
    let alice = Mcp::new(gateway.mcp_url()).with_api_key(&token("alice"));
    alice.wait_for_tool("big_output", Duration::from_secs(20)).await?;
    let mut tasks = Vec::new();
    for _ in 0..options.tasks {
        let reply = alice
            .call_2025(
                "tools/call",
                json!({"name": "big_output", "arguments": {"bytes": options.bytes}, "task": {}}),
            )
            .await?;
        let id =
            reply.result()["task"]["taskId"].as_str().with_context(|| format!("no task: {}", reply.raw))?;
        tasks.push(id.to_owned());
    }
    for id in &tasks {
        settle(&alice, id).await?;
    }
    drop(gateway);
    println!(
        "readers-bench: {} finished tasks of alice's with {} MiB results; {} readers of alice's for {} s; bob greets meanwhile",
        options.tasks,
        options.bytes as f64 / 1048576.0,
        options.readers,
        options.seconds
    );
    let tasks = Arc::new(tasks);
    if options.phase != Phase::Details {
        phase(&redis, &tokens, options, "listings", tasks.clone()).await?;
    }
    if options.phase != Phase::Listings {
        phase(&redis, &tokens, options, "details", tasks).await?;
    }
    Ok(())
}

/// The storing phase: alice keeps storing results while bob greets.
async fn storing(options: &Options) -> anyhow::Result<()> {
    let redis = RedisServer::start().context("redis-server starts")?;
    let tokens = tokens_file()?;
    let tokens = tokens.to_str().context("utf-8 path")?.to_owned();
    let _worker = Conveyor::worker(&redis.url(), &["--fixtures"]).context("conveyor worker starts")?;
    let gateway = Conveyor::gateway(&redis.url(), &["--tokens-file", &tokens]).context("gateway starts")?;
    let alice = Mcp::new(gateway.mcp_url()).with_api_key(&token("alice"));
    let bob = Mcp::new(gateway.mcp_url()).with_api_key(&token("bob"));
    alice.wait_for_tool("big_output", Duration::from_secs(20)).await?;
    for _ in 0..20 {
        greet(&bob).await?;
    }
    let memory_before = redis_used_memory(&redis)?;
    let stop = Arc::new(AtomicBool::new(false));
    let greeter = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut latencies = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                greet(&bob).await?;
                latencies.push(t.elapsed());
            }
            Ok::<_, anyhow::Error>(latencies)
        })
    };
    let (mut kept, mut failed, mut refused, mut last) = (0, 0, 0, String::new());
    for _ in 0..options.stores {
        let reply = alice
            .call_2025(
                "tools/call",
                json!({"name": "big_output", "arguments": {"bytes": options.bytes}, "task": {}}),
            )
            .await?;
        if let Some(error) = reply.message.get("error") {
            refused += 1;
            last = error.to_string();
            continue;
        }
        let id =
            reply.result()["task"]["taskId"].as_str().with_context(|| format!("no task: {}", reply.raw))?;
        match settle(&alice, id).await {
            Ok(()) => kept += 1,
            Err(e) => {
                failed += 1;
                last = e.to_string();
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut latencies = greeter.await??;
    let memory_after = redis_used_memory(&redis)?;
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
    println!(
        "storing: alice called big_output ({:.1} MiB) {} times: {kept} kept, {failed} failed at the budget, {refused} refused; \
         Redis used memory {:.1} -> {:.1} MiB (+{:.1} MiB); bob's greet ({} calls) p50 {:.1} ms, p95 {:.1} ms; last answer: {}",
        options.bytes as f64 / 1048576.0,
        options.stores,
        mib(memory_before),
        mib(memory_after),
        mib(memory_after.saturating_sub(memory_before)),
        latencies.len(),
        ms(at(0.5)),
        ms(at(0.95)),
        last.chars().take(600).collect::<String>(),
    );
    Ok(())
}

/// Redis's `used_memory`, in bytes.
fn redis_used_memory(redis: &RedisServer) -> anyhow::Result<u64> {
    let mut conn = redis.connection()?;
    let info: String = redis::cmd("INFO").arg("memory").query(&mut conn)?;
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .context("INFO memory has used_memory")
}

/// What one reader saw.
#[derive(Default)]
struct Seen {
    answered: u64,
    refused: Vec<String>,
    largest: usize,
}

async fn phase(
    redis: &RedisServer,
    tokens: &str,
    options: &Options,
    name: &'static str,
    tasks: Arc<Vec<String>>,
) -> anyhow::Result<()> {
    let gateway = Conveyor::gateway(&redis.url(), &["--tokens-file", tokens]).context("gateway starts")?;
    let pid = gateway.pid().context("gateway pid")?;
    let bob = Mcp::new(gateway.mcp_url()).with_api_key(&token("bob"));
    bob.wait_for_tool("greet", Duration::from_secs(20)).await?;
    // Warm up: the first calls set up connections and caches that every later call shares.
    for _ in 0..20 {
        greet(&bob).await?;
    }
    let rss_before = peak_rss(pid);
    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for r in 0..options.readers {
        let alice = Mcp::new(gateway.mcp_url()).with_api_key(&token("alice"));
        let base = gateway.base.clone();
        let (stop, tasks) = (stop.clone(), tasks.clone());
        readers.push(tokio::spawn(async move {
            let http = reqwest::Client::new();
            let mut seen = Seen::default();
            let mut n = r as usize;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let (raw, error) = match name {
                    "listings" => match n % 3 {
                        0 => json_rpc(alice.call_2025("tasks/list", json!({})).await?),
                        1 => json_rpc(
                            alice.call_2025("resources/read", json!({"uri": "conveyor://tasks"})).await?,
                        ),
                        _ => {
                            let response = http
                                .get(format!("{base}/ui/api/tasks"))
                                .bearer_auth(token("alice"))
                                .send()
                                .await?;
                            let ok = response.status().is_success();
                            let raw = response.text().await?;
                            let error = (!ok).then(|| raw.chars().take(200).collect());
                            (raw, error)
                        }
                    },
                    _ => {
                        let id = &tasks[n % tasks.len()];
                        json_rpc(alice.call_2025("tasks/result", json!({"taskId": id})).await?)
                    }
                };
                seen.largest = seen.largest.max(raw.len());
                match error {
                    None => seen.answered += 1,
                    Some(error) => seen.refused.push(error),
                }
            }
            Ok::<_, anyhow::Error>(seen)
        }));
    }
    let started = Instant::now();
    let mut latencies = Vec::new();
    while started.elapsed() < Duration::from_secs(options.seconds) {
        let t = Instant::now();
        greet(&bob).await?;
        latencies.push(t.elapsed());
    }
    stop.store(true, Ordering::Relaxed);
    let mut all = Seen::default();
    for reader in readers {
        let seen = reader.await??;
        all.answered += seen.answered;
        all.largest = all.largest.max(seen.largest);
        all.refused.extend(seen.refused);
    }
    let rss_after = peak_rss(pid);
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
    let mut limits: Vec<String> = all.refused.iter().map(|e| limit_of(e)).collect();
    limits.sort();
    limits.dedup();
    println!(
        "{name}: gateway peak RSS {:.1} -> {:.1} MiB (+{:.1} MiB); largest answer {} bytes; {} answered, {} refused {:?}; \
         bob's greet ({} calls) p50 {:.1} ms, p95 {:.1} ms, max {:.1} ms",
        mib(rss_before),
        mib(rss_after),
        mib(rss_after.saturating_sub(rss_before)),
        all.largest,
        all.answered,
        all.refused.len(),
        limits,
        latencies.len(),
        ms(at(0.5)),
        ms(at(0.95)),
        ms(latencies[latencies.len() - 1]),
    );
    Ok(())
}

/// A JSON-RPC reply's raw text, and its error's message when it is one.
fn json_rpc(reply: conveyor_tests::mcp::Reply) -> (String, Option<String>) {
    let error = reply.message.get("error").map(|e| e.to_string());
    (reply.raw, error)
}

/// The limit a refusal names, or the start of its text.
fn limit_of(error: &str) -> String {
    serde_json::from_str::<Value>(error)
        .ok()
        .and_then(|e| e["data"]["limit"].as_str().map(str::to_owned))
        .unwrap_or_else(|| error.chars().take(80).collect())
}

async fn greet(bob: &Mcp) -> anyhow::Result<()> {
    let reply = bob.call_2025("tools/call", json!({"name": "greet", "arguments": {"name": "bob"}})).await?;
    ensure!(reply.result()["content"].is_array(), "greet failed: {}", reply.raw);
    Ok(())
}

async fn settle(mcp: &Mcp, id: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let reply = mcp.call_2025("tasks/get", json!({"taskId": id})).await?;
        match reply.result()["status"].as_str() {
            Some("completed") => return Ok(()),
            Some("working") => {}
            _ => anyhow::bail!("task {id} did not complete: {}", reply.result()["statusMessage"]),
        }
        ensure!(Instant::now() < deadline, "task {id} did not complete in time");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A tokens file for [`PRINCIPALS`], hashed by `conveyor token hash`.
fn tokens_file() -> anyhow::Result<std::path::PathBuf> {
    let mut text = String::new();
    for principal in PRINCIPALS {
        let mut child = Command::new(conveyor_bin())
            .args(["token", "hash"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("conveyor token hash")?;
        child.stdin.take().context("stdin")?.write_all(token(principal).as_bytes())?;
        let output = child.wait_with_output()?;
        ensure!(output.status.success(), "conveyor token hash failed");
        let digest = String::from_utf8(output.stdout)?.trim().to_owned();
        text.push_str(&format!("[[token]]\nprincipal = \"{principal}\"\nsha256 = \"{digest}\"\n\n"));
    }
    let path = scratch_dir("readers-bench").join("tokens.toml");
    std::fs::write(&path, text)?;
    Ok(path)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
