//! Support for Conveyor's end-to-end tests and benchmarks: real `redis-server` processes on free
//! ports (killed and restarted where a test needs it), real `conveyor` processes, and a raw
//! JSON-RPC client for both MCP wires. Nothing here is mocked.
//!
//! # Layout
//!
//! - [`process`]: [`RedisServer`], [`Conveyor`], ports (a process listens on port 0 and its log
//!   says where; a server that must be told its port gets one below the ephemeral range), and the
//!   `conveyor` binary built once.
//! - [`python`]: the official MCP Python SDKs, each in a virtualenv of its own.
//! - [`otlp`]: an OTLP receiver (gRPC and HTTP/protobuf) that keeps the spans it is sent.
//! - [`trees`]: generated source trees and ADR folders for the heavy tools' tests and benchmarks.
//! - [`load`]: what the benchmarks share: sync `tools/call`s of `noop` driven from this process,
//!   latency percentiles, and CPU readings of processes and of Redis.
//! - [`callgrind`]: a `redis-server` under callgrind, for instruction counts per operation.
//! - [`npm`]: npm packages the tests run, installed once into the target directory.
//! - [`proxy`]: [`proxy::StallProxy`], a TCP proxy in front of Redis that can stall what a process
//!   sends while Redis's replies still reach it.
//! - [`mcp`]: [`Mcp`], a plain HTTP JSON-RPC client that speaks 2025-11-25 and 2026-07-28 and reads
//!   SSE replies, for checks that need the raw wire; and the task calls the tests share (create a
//!   task, read it, wait for a status or its end).

pub mod bullmq;
pub mod callgrind;
pub mod load;
pub mod mcp;
pub mod monitor;
pub mod npm;
pub mod otlp;
pub mod process;
pub mod proxy;
pub mod python;
pub mod redis_cluster;
pub mod trees;

pub use mcp::Mcp;
pub use process::{Conveyor, RedisServer, free_port};

/// Polls `check` every 20 ms until it returns `Some`, and returns what it holds. Panics after
/// `timeout` with a message that names `what`.
pub async fn eventually<T>(
    timeout: std::time::Duration,
    what: &str,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> T {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(std::time::Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
