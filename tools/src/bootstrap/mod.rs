//! From a root's ADRs to deployment scripts, and a loop that runs them, learns and proposes ADR
//! updates.
//!
//! - [`generate`]: `adr_bootstrap_validation {"root", "adrPath"}`: a graph that reads the ADRs
//!   and detects the root's platforms, then writes `bootstrap.sh` and `validate_bootstrap.sh`
//!   (embedded resources of the task) and lists the files the ADRs require that the root lacks.
//! - [`run_loop`]: `bootstrap_validation_loop {"root", "adrPath", "profile", ...}`: per iteration
//!   generate, ask the person to approve, run the bootstrap, run every check as its own node,
//!   learn; each principal's own memory of executions per profile; ADR updates as unified diffs.
//! - The pieces both use, one module each: [`requirements`] (what ADRs require), [`platforms`],
//!   [`missing`] (missing files and templates), [`scripts`] (the plan and its two scripts),
//!   [`learnings`] (failures classified), [`secrets`] (masking), [`workspace`] (where a run
//!   happens), [`updates`] (ADR diffs).
//!
//! Nothing runs from a client's words alone: the generator only reads, and the loop runs only in
//! a root and profile the operator's tools file names (`[bootstrap.NAME]`).

use std::sync::Arc;

use conveyor_shared::model::ToolOutcome;
use serde_json::Value;

use crate::adrs::parse::is_adr_path;
use crate::invalid;
use crate::operator_config::OperatorConfig;
use crate::research::index::read_text;
use crate::roots::{Root, Roots};
use conveyor_worker::tool::ToolRegistry;

pub mod generate;
pub mod learnings;
pub mod missing;
pub mod platforms;
pub mod requirements;
pub mod run_loop;
pub mod scripts;
pub mod secrets;
pub mod updates;
pub mod workspace;

use requirements::Requirements;

/// The queue of both tools and their steps: give bootstrap runs a pool of their own.
pub const QUEUE: &str = "bootstrap";
/// Where ADRs are looked for when the call names no folder.
pub const DEFAULT_ADR_PATH: &str = "docs/adr";
/// Most records read in one call.
const MAX_RECORDS: usize = 2_000;

/// Registers the generator with roots, and the loop with bootstrap profiles.
pub fn register(registry: &mut ToolRegistry, roots: &Roots, config: &Arc<OperatorConfig>) {
    if !roots.is_empty() {
        generate::register(registry, roots);
    }
    if !config.bootstrap.is_empty() {
        run_loop::register(registry, roots, config);
    }
}

/// What the ADRs under `adr_path` of `root` require.
pub fn read_requirements(root: &Root, adr_path: &str) -> Result<Requirements, ToolOutcome> {
    let files = root.files_under(&[adr_path.to_owned()]).map_err(|e| e.into_outcome())?;
    let mut requirements = Requirements::default();
    let mut records: Vec<(String, std::path::PathBuf)> = files
        .into_iter()
        .map(|f| (root.relative(&f), f))
        .filter(|(relative, _)| is_adr_path(relative) || is_plain_text_record(relative))
        .collect();
    records.sort();
    if records.is_empty() {
        return Err(invalid(format!(
            "no ADR under `{adr_path}` of root `{}`: name the folder that holds the records with adrPath",
            root.name
        )));
    }
    if records.len() > MAX_RECORDS {
        return Err(invalid(format!(
            "`{adr_path}` of root `{}` holds {} records; at most {MAX_RECORDS} are read in one call: name a narrower folder",
            root.name,
            records.len()
        )));
    }
    for (relative, file) in records {
        if let Some(text) = read_text(&file) {
            let text = if is_plain_text_record(&relative) {
                requirements::plain_text_as_markdown(&text)
            } else {
                text
            };
            requirements.add(&relative, &text);
        }
    }
    Ok(requirements)
}

/// A numbered plain-text record (`ADR-020-tasks.txt`), read as Markdown.
fn is_plain_text_record(path: &str) -> bool {
    path.ends_with(".txt") && crate::adrs::parse::number_from_file_name(path).is_some()
}

/// The ADR folder a call names, or the default.
fn adr_path_arg(arguments: &Value) -> String {
    arguments.get("adrPath").and_then(Value::as_str).unwrap_or(DEFAULT_ADR_PATH).to_owned()
}
