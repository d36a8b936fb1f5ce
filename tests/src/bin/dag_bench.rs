//! Scheduling overhead of DAG tasks: no-op nodes per second through a fan-out, and Redis commands
//! per node (from `INFO commandstats` before and after).
//!
//! For each worker count it starts a fresh redis-server, a gateway and N worker processes, submits
//! one `run_dag` task whose root fans out to `--nodes` no-op nodes that join in one sink, and times
//! it from `tools/call` until `tasks/get` says completed.
//!
//! Usage: cargo run --release -p conveyor-tests --bin dag-bench -- [--nodes N] [--workers 1,2]

use std::time::{Duration, Instant};

use conveyor_tests::mcp::tasks_client_capabilities;
use conveyor_tests::{Conveyor, Mcp, RedisServer};
use serde_json::json;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut nodes = 10_000usize;
    let mut worker_counts = vec![1usize, 2];
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--nodes" => {
                nodes = args.next().ok_or_else(|| anyhow::anyhow!("--nodes needs a value"))?.parse()?
            }
            "--workers" => {
                worker_counts = args
                    .next()
                    .ok_or_else(|| anyhow::anyhow!("--workers needs a value"))?
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()?
            }
            "-h" | "--help" => {
                println!("dag-bench [--nodes N (10000)] [--workers 1,2]");
                return Ok(());
            }
            other => anyhow::bail!("unknown argument {other}; see --help"),
        }
    }
    if !cfg!(debug_assertions) {
        conveyor_tests::process::prefer_release_binary();
    }
    let mut graph = vec![json!({"id": "root", "kind": "noop"})];
    graph.extend((0..nodes).map(|i| json!({"id": format!("n{i}"), "kind": "noop", "dependsOn": ["root"]})));
    graph.push(json!({"id": "sink", "kind": "noop", "dependsOn": (0..nodes).map(|i| format!("n{i}")).collect::<Vec<_>>()}));
    let total_nodes = graph.len();
    let limit = (total_nodes + 10).to_string();
    println!("DAG scheduling: root -> {nodes} no-op nodes -> sink ({total_nodes} nodes), one task");
    println!(
        "{:<8} {:>10} {:>12} {:>16}  busiest commands per node",
        "workers", "seconds", "nodes/s", "Redis cmds/node"
    );
    for workers in worker_counts {
        let redis = RedisServer::start()?;
        let gateway = Conveyor::gateway(
            &redis.url(),
            &["--max-dag-nodes", &limit, "--max-body-bytes", "16777216", "--max-argument-bytes", "16777216"],
        )?;
        let _workers: Vec<Conveyor> = (0..workers)
            .map(|_| Conveyor::worker(&redis.url(), &["--fixtures", "--concurrency", "64"]))
            .collect::<anyhow::Result<_>>()?;
        let mcp = Mcp::new(gateway.mcp_url());
        mcp.wait_for_tool("noop", Duration::from_secs(20)).await?;
        let before = redis.command_stats()?;
        let started = Instant::now();
        let created = mcp
            .call_2026(
                "tools/call",
                json!({"name": "run_dag", "arguments": {"nodes": graph}}),
                tasks_client_capabilities(),
            )
            .await?;
        let task = created.result()["taskId"]
            .as_str()
            .ok_or_else(|| anyhow::anyhow!("no task: {}", created.raw))?
            .to_owned();
        loop {
            let got =
                mcp.call_2026("tasks/get", json!({"taskId": task}), tasks_client_capabilities()).await?;
            match got.result()["status"].as_str() {
                Some("completed") => break,
                Some("working") => tokio::time::sleep(Duration::from_millis(20)).await,
                _ => anyhow::bail!(
                    "the task did not complete: {}",
                    got.raw.chars().take(500).collect::<String>()
                ),
            }
        }
        let elapsed = started.elapsed();
        let after = redis.command_stats()?;
        let (total, per_node) = conveyor_tests::process::commands_per(&before, &after, total_nodes as f64);
        let busiest: Vec<String> =
            per_node.iter().take(7).map(|(name, n)| format!("{name} {n:.2}")).collect();
        println!(
            "{:<8} {:>10.2} {:>12.0} {:>16.1}  {}",
            workers,
            elapsed.as_secs_f64(),
            total_nodes as f64 / elapsed.as_secs_f64(),
            total,
            busiest.join(", ")
        );
    }
    Ok(())
}
