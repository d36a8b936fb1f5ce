//! Readiness: whether a project is fit to ship, from checks the operator declares (commands run
//! in a root, each critical or a warning) and the test reports they leave.
//!
//! - [`reports`]: JUnit XML, `cargo test` and pytest output turned into one result per test.
//! - [`history`]: a run against the runs before it: new failures, fixes, flaky tests, the trend.
//! - [`tool`]: `deployment_readiness`, one node per check and a report node that keeps the run.

pub mod history;
pub mod reports;
pub mod tool;
