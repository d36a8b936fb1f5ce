//! What gateways and workers share: the task model, the Redis keyspace, the Lua scripts of every
//! state transition, configuration and the store that ties them together. The gateway and the
//! worker never talk to each other; they meet only in Redis, in the shapes defined here.
//!
//! # Layout
//!
//! - [`keys`]: every Redis key and channel name, in one place.
//! - [`scripts`]: one static `redis::Script` per file in `src/lua/`, one file per atomic transition
//!   (create, start node, report progress, complete node, cancel).
//! - [`model`]: task status, task and node records as stored, events, work items, tool outcomes,
//!   and builders for `CallToolResult` JSON so that tools need no MCP library.
//! - [`store`]: [`Store`], the typed operations over a connection pool: every read and every
//!   script call goes through it, each bounded by a timeout so that nothing hangs on a dead Redis.
//! - [`events`]: [`events::EventHub`], the one pub/sub connection a process shares among all
//!   its subscribers (task events, cancellations).
//! - [`config`]: [`Config`], the settings of a deployment.
//! - [`error`] holds [`StoreError`], what a failed store operation tells its caller.

pub mod config;
pub mod dag;
pub mod error;
pub mod events;
pub mod keys;
pub mod model;
pub mod scripts;
pub mod store;

pub use config::Config;
pub use error::StoreError;
pub use store::Store;
