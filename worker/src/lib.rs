//! The worker: reads runnable nodes from the streams of the queues its tools wait in (in every
//! shard, through the workers' consumer group), starts each batch in one script, runs the tool each
//! node names with a context (cancellation token, progress reporter, task metadata), and settles
//! the node with one script that also acknowledges its entry. Start as many as the queues need;
//! they share nothing but Redis. The built-in tools are a crate of their own (`conveyor-tools`),
//! built on [`tool`] alone.
//!
//! # Layout
//!
//! - [`tool`]: the [`Tool`] trait, [`ToolContext`] handed to a running tool, and [`ToolRegistry`].
//! - [`runner`]: [`run`], the worker: batched reads and starts, bounded concurrency and each
//!   principal's share of it, byte limits on what a node takes in and hands out, lease renewal,
//!   its own failed transitions tried again, cancellation over sharded pub/sub, the maintenance of
//!   the shards whose lease it holds (entries nobody renewed for a lease queued again), heartbeats,
//!   graceful shutdown that hands the maintenance lease over.
//! - [`dag`]: upstream values in a node's arguments, built-in nodes, a finished graph's result.
//! - [`fixtures`]: the tools the MCP conformance suite and Conveyor's own tests call
//!   (`--fixtures`; off by default).
//! - [`http`]: the worker's own small HTTP listener (`--metrics-listen`): `/metrics`, `/healthz`,
//!   `/readyz`.

pub mod dag;
pub mod fixtures;
pub mod http;
pub mod runner;
pub mod tool;

pub use runner::{NodeLimits, WorkerOptions, run};
pub use tool::{FnTool, Tool, ToolContext, ToolRegistry};
