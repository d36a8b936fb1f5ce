//! Conveyor's terminal client: a person runs a tool as a task through a Conveyor endpoint and
//! watches it, and looks at and cancels their tasks. A real MCP client (rmcp, protocol 2026-07-28
//! with the Tasks extension) of `/mcp`, with the caller's bearer token: it sees exactly what any
//! other client with that token sees, and never reads Redis.
//!
//! # Layout
//!
//! - [`session`]: the endpoint and token, the rmcp session, and what the client declares
//!   (form elicitation, the Tasks extension).
//! - [`exit`]: the outcome of a command as an exit code scripts can use, and [`ClientError`].
//! - [`arguments`]: `--arg key=value` typed by the tool's input schema, and `--json`.
//! - [`form`]: an elicitation asked in the terminal, one field at a time, from its schema.
//! - [`display`]: a live progress bar with a line per running node on a terminal; plain lines
//!   otherwise; results as text or JSON.
//! - [`call`]: `conveyor call TOOL`: run, watch, answer, cancel on Ctrl-C.
//! - [`tasks`]: `conveyor tasks ls|show|watch|cancel`, from the task resources the gateway serves.
//! - [`follow`]: the watch loop both share: polls a task at its interval until it settles.

pub mod arguments;
pub mod call;
pub mod display;
pub mod exit;
pub mod follow;
pub mod form;
pub mod session;
pub mod tasks;

pub use exit::{ClientError, Exit};
pub use session::Endpoint;
