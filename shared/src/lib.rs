//! What gateways and workers share: the task model, the Redis keyspace, the Lua scripts of every
//! state transition, configuration and the store that ties them together. The gateway and the
//! worker never talk to each other; they meet only in Redis, in the shapes defined here.
//!
//! # Layout
//!
//! - [`keys`]: every Redis key and channel name, in one place; the shards of the keyspace.
//! - [`scripts`]: one static script per file in `src/lua/` (a `redis::Script` and its file's name),
//!   one file per atomic transition, each behind the shared helpers of `lua/prelude.lua`.
//! - [`call`]: [`call::CallRecord`], what a call carries that no script decides on, stored as one
//!   field of its task and handed to the worker as it is.
//! - [`model`]: task status, task and node records as stored, events, work items, tool outcomes,
//!   and builders for `CallToolResult` JSON so that tools need no MCP library.
//! - [`conn`]: one server or a Redis Cluster, told apart once; the shared command connection and
//!   the dedicated ones for blocking reads and subscriptions.
//! - [`store`]: [`Store`], the typed operations, one module per concern (tasks, nodes, queues,
//!   maintenance, catalog, dead letters, listing); each is bounded in time and rides out a short
//!   Redis outage.
//! - [`events`]: [`events::EventHub`], a process's one subscription: its inbox in every shard and
//!   every shard's cancel channel, handed out to local waiters by task id.
//! - [`input`]: what a tool asks of the client mid-call (elicitation, sampling, roots) and the
//!   client capability each request needs.
//! - [`roots`]: [`roots::RootUse`], which roots a tool's calls read, as its definition tells
//!   gateways, so that a call naming a root its caller may not read is refused at the door.
//! - [`dag`]: the graph of a DAG task, its validation and upstream references.
//! - [`schema`]: a tool's input schema compiled once, and what it finds wrong with arguments (the
//!   gateway checks a call, a worker a graph node's resolved arguments).
//! - [`json_limits`]: bounds on outside JSON: a body measured before it is parsed, a result's
//!   depth before it is stored.
//! - [`config`]: [`Config`], the settings of a deployment.
//! - [`telemetry`]: logs and OpenTelemetry traces of a process, and a task's trace context as Redis
//!   keeps it.
//! - [`metrics`]: the process's Prometheus registry, the typed functions that record into it, and
//!   its OpenMetrics text with the deployment's gauges read from Redis at scrape time.
//! - [`error`] holds [`StoreError`], what a failed store operation tells its caller.

pub mod call;
pub mod config;
pub mod conn;
pub mod dag;
pub mod error;
pub mod events;
pub mod input;
pub mod json_limits;
pub mod keys;
pub mod metrics;
pub mod model;
pub mod roots;
pub mod schema;
pub mod scripts;
pub mod store;
pub mod telemetry;

pub use config::Config;
pub use error::StoreError;
pub use store::Store;
