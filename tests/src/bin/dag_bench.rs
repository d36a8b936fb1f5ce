//! Scheduling overhead of DAG tasks: no-op nodes per second through a fan-out, and Redis commands
//! per node (from `INFO commandstats` before and after).
//!
//! For each worker count it starts a fresh redis-server, a gateway and N worker processes, submits
//! one `run_dag` task whose root fans out to `--nodes` no-op nodes that join in one sink, and times
//! it from `tools/call` until `tasks/get` says completed.
//!
//! Usage: cargo run --release -p conveyor-tests --bin dag-bench -- [--nodes N] [--workers 1,2]

use std::time::{Duration, Instant};

use clap::{ArgAction, Parser};
use conveyor_tests::mcp::tasks_client_capabilities;
use conveyor_tests::{Conveyor, Mcp, RedisServer};
use serde_json::json;

/// Scheduling overhead of DAG tasks: no-op nodes per second through a fan-out of one `run_dag`
/// task, and Redis commands per node (see the header of tests/src/bin/dag_bench.rs)
#[derive(Parser)]
#[command(
    name = "dag-bench",
    override_usage = "cargo run --release -p conveyor-tests --bin dag-bench -- [OPTIONS]",
    args_override_self = true
)]
struct Options {
    /// No-op nodes between the root and the sink
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    nodes: usize,
    /// Worker process counts, comma-separated: one fresh redis-server, gateway and workers each
    #[arg(
        long = "workers",
        value_name = "N,N,...",
        value_delimiter = ',',
        default_value = "1,2",
        action = ArgAction::Set
    )]
    worker_counts: Vec<usize>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let Options { nodes, worker_counts } = Options::parse();
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

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::Options;

    fn parse(args: &[&str]) -> Result<Options, clap::Error> {
        Options::try_parse_from(std::iter::once("dag-bench").chain(args.iter().copied()))
    }

    #[test]
    fn the_options_are_well_formed() {
        Options::command().debug_assert();
    }

    #[test]
    fn the_worker_counts_are_a_comma_list() {
        let o = parse(&[]).expect("no options");
        assert_eq!((o.nodes, o.worker_counts), (10_000, vec![1, 2]));
        let o = parse(&["--nodes", "10000", "--workers", "1,2,4"]).expect("docs/deploy.md's run");
        assert_eq!((o.nodes, o.worker_counts), (10_000, vec![1, 2, 4]));
        let o = parse(&["--workers", "3"]).expect("one count");
        assert_eq!(o.worker_counts, vec![3]);
        let o = parse(&["--workers", "1,2", "--workers", "4"]).expect("a flag given twice");
        assert_eq!(o.worker_counts, vec![4], "the last one counts");
        for bad in ["", "1,,2", "1, 2", "x"] {
            assert!(parse(&["--workers", bad]).is_err(), "--workers {bad:?}");
        }
        assert!(parse(&["--nodes", "many"]).is_err());
        assert!(parse(&["--node", "5"]).is_err());
    }
}
