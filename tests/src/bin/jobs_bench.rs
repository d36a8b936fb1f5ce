//! The heavy tools, measured: `research` over a generated tree of 50,000 files and
//! `validate_adrs` over 1,000 generated ADRs, each with one and with two worker processes on one
//! redis-server, through a real gateway. Prints wall time per call (median of three after a
//! first, untimed call that warms the page cache), files per second, and each worker's peak
//! resident memory.
//!
//! `cargo run --release -p conveyor-tests --bin jobs-bench [-- --files N --adrs N --runs N]`

use std::time::{Duration, Instant};

use anyhow::ensure;
use clap::Parser;
use conveyor_tests::process::{prefer_release_binary, scratch_dir};
use conveyor_tests::trees::{PLANTED_PHRASE, generate_adrs, generate_tree};
use conveyor_tests::{Conveyor, Mcp, RedisServer};
use serde_json::{Value, json};

/// The heavy tools, measured: `research` over a generated tree of files and `validate_adrs` over
/// generated ADRs, each with one and with two worker processes (see the header of
/// tests/src/bin/jobs_bench.rs)
#[derive(Parser)]
#[command(
    name = "jobs-bench",
    override_usage = "cargo run --release -p conveyor-tests --bin jobs-bench -- [OPTIONS]",
    args_override_self = true
)]
struct Options {
    /// Files in the generated tree that `research` reads
    #[arg(long, value_name = "N", default_value_t = 50_000)]
    files: usize,
    /// Generated ADRs that `validate_adrs` reads
    #[arg(long, value_name = "N", default_value_t = 1_000)]
    adrs: usize,
    /// Timed calls per measurement after the warm-up call, of which the median is printed (0
    /// runs 1)
    #[arg(long, value_name = "N", default_value_t = 3)]
    runs: usize,
}

fn options() -> Options {
    let mut options = Options::parse();
    // A median needs at least one timed call.
    options.runs = options.runs.max(1);
    options
}

/// Peak resident memory of a process, in MiB, from `/proc/PID/status` (`VmHWM`).
fn peak_rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// One synchronous call on the 2026-07-28 wire: the reply is the tool's result.
async fn call(mcp: &Mcp, tool: &str, arguments: Value) -> anyhow::Result<(Duration, Value)> {
    let started = Instant::now();
    let reply = mcp.call_2026("tools/call", json!({"name": tool, "arguments": arguments}), json!({})).await?;
    let elapsed = started.elapsed();
    let result = reply.result().clone();
    ensure!(result["isError"] != json!(true) && reply.error_code().is_none(), "{tool} failed: {}", reply.raw);
    Ok((elapsed, result))
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

struct Measured {
    median: Duration,
    peak_rss_mib: Vec<f64>,
    result: Value,
}

async fn measure(
    redis: &RedisServer,
    root: &str,
    workers: usize,
    tool: &str,
    arguments: Value,
    runs: usize,
) -> anyhow::Result<Measured> {
    let mut connection = redis.connection()?;
    redis::cmd("FLUSHALL").query::<()>(&mut connection)?;
    let gateway = Conveyor::gateway(&redis.url(), &["--no-auth", "--sync-timeout-ms", "600000"])?;
    let pool: Vec<Conveyor> = (0..workers)
        .map(|_| Conveyor::worker(&redis.url(), &["--root", root, "--concurrency", "16"]))
        .collect::<anyhow::Result<_>>()?;
    let mcp = Mcp::new(gateway.mcp_url());
    mcp.wait_for_tool(tool, Duration::from_secs(30)).await?;
    let (_, first) = call(&mcp, tool, arguments.clone()).await?;
    let mut times = Vec::new();
    for _ in 0..runs {
        times.push(call(&mcp, tool, arguments.clone()).await?.0);
    }
    let peak_rss_mib = pool.iter().filter_map(|w| w.pid().and_then(peak_rss_mib)).collect();
    Ok(Measured { median: median(times), peak_rss_mib, result: first })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    prefer_release_binary();
    let options = options();
    let redis = RedisServer::start()?;
    let base = scratch_dir("jobs-bench");

    let tree = base.join("tree");
    let generated = Instant::now();
    let planted = generate_tree(&tree, options.files, &[17, options.files / 2, options.files - 3])?;
    println!("generated {} files in {:.1} s", options.files, generated.elapsed().as_secs_f64());
    let root = format!("tree={}", tree.display());
    let question = json!({"root": "tree", "question": format!("\"{PLANTED_PHRASE}\""), "maxResults": 10, "synthesize": false});
    println!(
        "\nresearch over {} files (median of {} calls after a warm-up call)",
        options.files, options.runs
    );
    println!(
        "{:>8} {:>10} {:>12} {:>7} {:>22}",
        "workers", "median ms", "files/s", "shards", "worker peak RSS (MiB)"
    );
    for workers in [1, 2] {
        let measured = measure(&redis, &root, workers, "research", question.clone(), options.runs).await?;
        let stats = &measured.result["structuredContent"]["stats"];
        let top: Vec<&str> = measured.result["structuredContent"]["evidence"]
            .as_array()
            .into_iter()
            .flatten()
            .take(planted.len())
            .filter_map(|e| e["path"].as_str())
            .collect();
        ensure!(
            planted.iter().all(|p| top.contains(&p.as_str())),
            "the planted files are not first: {top:?}"
        );
        let files = stats["files"].as_u64().unwrap_or(0) as f64;
        println!(
            "{workers:>8} {:>10.0} {:>12.0} {:>7} {:>22}",
            measured.median.as_secs_f64() * 1000.0,
            files / measured.median.as_secs_f64(),
            stats["shards"],
            measured.peak_rss_mib.iter().map(|m| format!("{m:.0}")).collect::<Vec<_>>().join(", ")
        );
    }

    let adrs = generate_adrs(&base.join("adr-root/docs/adr"), options.adrs)?;
    let adr_root = format!("adrs={}", base.join("adr-root").display());
    println!(
        "\nvalidate_adrs over {} ADRs in {} (median of {} calls after a warm-up call)",
        options.adrs,
        adrs.display(),
        options.runs
    );
    println!(
        "{:>8} {:>10} {:>12} {:>9} {:>22}",
        "workers", "median ms", "ADRs/s", "findings", "worker peak RSS (MiB)"
    );
    for workers in [1, 2] {
        let arguments = json!({"root": "adrs", "path": "docs/adr"});
        let measured = measure(&redis, &adr_root, workers, "validate_adrs", arguments, options.runs).await?;
        let summary = &measured.result["structuredContent"]["summary"];
        ensure!(summary["adrs"].as_u64() == Some(options.adrs as u64), "validated {} ADRs", summary["adrs"]);
        let findings = summary["errors"].as_u64().unwrap_or(0) + summary["warnings"].as_u64().unwrap_or(0);
        println!(
            "{workers:>8} {:>10.0} {:>12.0} {findings:>9} {:>22}",
            measured.median.as_secs_f64() * 1000.0,
            options.adrs as f64 / measured.median.as_secs_f64(),
            measured.peak_rss_mib.iter().map(|m| format!("{m:.0}")).collect::<Vec<_>>().join(", ")
        );
    }
    Ok(())
}
