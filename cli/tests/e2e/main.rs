//! End-to-end tests: real `redis-server` and `conveyor` processes, real MCP clients (rmcp, the
//! official Python and TypeScript SDKs, the conformance suite), real kills. One test binary, so that
//! the whole stack links once; cargo builds the `conveyor` binary before it runs. Each module is one
//! area; the shared helpers live in the `conveyor-tests` support crate (`tests/src`).

mod asking;
mod auth;
mod bad_input;
mod bootstrap;
mod chaos;
mod cli;
mod cluster;
mod conformance;
mod custom_tool;
mod dag;
mod decisions;
mod deploy;
mod faults;
mod hostile;
mod inspector;
mod jobs;
mod layout;
mod lean;
mod limits;
mod metrics;
mod pools;
mod python_asking;
mod python_sdk;
mod readers;
mod redis_cluster;
mod rmcp_client;
mod root_grants;
mod store;
mod subscriptions;
mod sync_calls;
mod task_resources;
mod tenants;
mod terminal;
mod traces;
mod ts_client;
mod web_ui;

/// The helpers start the binary cargo built for these tests, not one they build themselves.
#[test]
fn the_helpers_run_the_binary_cargo_built_for_these_tests() {
    assert_eq!(conveyor_tests::process::conveyor_bin(), std::path::Path::new(env!("CARGO_BIN_EXE_conveyor")));
}
