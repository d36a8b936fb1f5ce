//! The worker: reads runnable nodes from the work stream through the workers' consumer group, runs
//! the tool each names with a context (cancellation token, progress reporter, task metadata), and
//! settles the node with one script. Start as many as the queue needs; they share nothing but Redis.
//!
//! # Layout
//!
//! - [`tool`]: the [`Tool`] trait, [`ToolContext`] handed to a running tool, and [`ToolRegistry`].
//! - [`runner`]: [`run`], the consumer loop: bounded concurrency, cancellation over pub/sub with a
//!   status re-check as a safety net, graceful shutdown.
//! - [`fixtures`]: the tools the MCP conformance suite and Conveyor's own tests call
//!   (`--fixtures`; off by default).

pub mod dag;
pub mod fixtures;
pub mod runner;
pub mod tool;

pub use runner::{WorkerOptions, run};
pub use tool::{FnTool, InputError, Tool, ToolContext, ToolRegistry};
