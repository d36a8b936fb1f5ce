//! Readiness: whether a project is fit to ship, from checks the operator declares (commands run
//! in a root, each critical or a warning) and the test reports they leave.
//!
//! - [`reports`]: JUnit XML, `cargo test` and pytest output turned into one result per test.

pub mod reports;
