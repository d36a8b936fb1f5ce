//! The tools file as written: serde's view of it, before any value is checked.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::TaskSupport;
use super::{ReportFormat, Severity};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFile {
    #[serde(default)]
    pub(super) tool: Vec<RawTool>,
    #[serde(default)]
    pub(super) readiness: BTreeMap<String, RawProfile>,
    #[serde(default)]
    pub(super) bootstrap: BTreeMap<String, RawBootstrap>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBootstrap {
    pub(super) description: Option<String>,
    pub(super) root: Option<String>,
    pub(super) workspace: Option<String>,
    pub(super) scratch_dir: Option<String>,
    pub(super) timeout_s: Option<u64>,
    #[serde(default)]
    pub(super) env: Vec<String>,
    #[serde(default)]
    pub(super) writable: bool,
    pub(super) history: Option<u64>,
    pub(super) max_output_bytes: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTool {
    pub(super) name: String,
    pub(super) description: String,
    // Defaulted so that a missing argv gets the same message, naming the tool, as an empty one.
    #[serde(default)]
    pub(super) argv: Vec<String>,
    pub(super) root: Option<String>,
    pub(super) cwd: Option<String>,
    #[serde(default)]
    pub(super) path_arguments: Vec<String>,
    pub(super) timeout_s: Option<u64>,
    pub(super) queue: Option<String>,
    #[serde(default)]
    pub(super) task_support: TaskSupport,
    #[serde(default)]
    pub(super) env: Vec<String>,
    pub(super) max_output_bytes: Option<u64>,
    pub(super) input_schema: Option<toml::Table>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProfile {
    pub(super) description: Option<String>,
    pub(super) history: Option<u64>,
    pub(super) flaky_window: Option<u64>,
    #[serde(default)]
    pub(super) check: Vec<RawCheck>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCheck {
    pub(super) name: String,
    #[serde(default)]
    pub(super) argv: Vec<String>,
    pub(super) root: Option<String>,
    pub(super) cwd: Option<String>,
    pub(super) timeout_s: Option<u64>,
    #[serde(default)]
    pub(super) severity: Severity,
    pub(super) report: Option<ReportFormat>,
    pub(super) report_path: Option<String>,
    #[serde(default)]
    pub(super) env: Vec<String>,
    pub(super) max_output_bytes: Option<u64>,
}
