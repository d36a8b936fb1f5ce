//! The stateless MCP gateway. It speaks Streamable HTTP at `/mcp` in two revisions (2025-11-25
//! with experimental Tasks, 2026-07-28 with the Tasks extension), checks tools and arguments,
//! creates tasks in Redis with one script before answering, and answers every `tasks/*` method
//! from Redis. It holds no task state and runs no tool: any replica answers any request.
//!
//! # Layout
//!
//! - [`admission`]: Host/Origin checks, authentication and the rate limit, as the extractor
//!   [`admission::Admitted`] that `/mcp` and the web view's API share.
//! - [`http`]: the axum router of the public listener; Host/Origin checks, content negotiation, body limit, the
//!   `Mcp-Method`/`Mcp-Name` headers, JSON or SSE replies; `/healthz` and `/readyz`.
//! - [`wire`]: which revision a request speaks, and each revision's task shapes.
//! - [`methods`]: one module per JSON-RPC method, and the wait on a task through the gateway's
//!   inbox that relays progress and ends with the result.
//! - [`catalog`]: the tools workers publish, cached, with compiled input schemas.
//! - [`metrics`]: MCP requests counted and timed by method and reply; `/metrics` with the
//!   deployment's gauges, on its own listener (`--metrics-listen`).
//! - [`gauges`]: the deployment's gauges as last read for a scrape, shared by scrapes.
//! - [`probes`]: `/healthz` and `/readyz`, on both listeners.
//! - [`reads`]: how a task is read for a client: only what the reader shows, behind the poll gap,
//!   held against the caller's in-flight budget until the reply is written.
//! - [`rpc`]: JSON-RPC envelopes and [`rpc::RpcFailure`], the one error type handlers return.
//! - [`signing`]: signed tokens any replica recognises: 2025-11-25 session ids, MRTR request
//!   states.
//! - [`serve`]: the accept loop: connection limit, header deadline and idle close, graceful drain.
//! - [`state`]: [`AppState`], shared by all handlers.
//! - [`telemetry`]: the span of each MCP request, continuing the caller's trace.
//! - [`uri_template`]: the RFC 6570 matcher of resource templates, for the policy and the methods.
//! - [`ui`]: the web view at `/ui`: a page compiled into the binary, and its JSON API and event
//!   stream under `/ui/api/`, behind the same authentication as `/mcp`.
//!
//! Why a dispatcher of our own rather than rmcp's `StreamableHttpService`: see
//! `docs/architecture.md`. MCP shapes come from `rmcp::model` wherever rmcp has them.

pub mod access;
pub mod admission;
pub mod auth;
pub mod catalog;
pub mod gauges;
pub mod http;
pub mod methods;
pub mod metrics;
pub mod probes;
pub mod reads;
pub mod rpc;
pub mod serve;
pub mod signing;
pub mod state;
pub mod telemetry;
pub mod ui;
pub mod uri_template;
pub mod wire;

pub use http::router;
pub use serve::serve;
pub use state::{AppState, HttpPolicy};
