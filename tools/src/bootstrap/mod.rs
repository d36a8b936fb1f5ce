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
use crate::operator_config::{OperatorConfig, Workspace};
use crate::research::index::read_text;
use crate::roots::{Root, Roots};
use conveyor_worker::tool::{Chore, ToolRegistry};

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

/// Registers the generator with roots, and the loop with bootstrap profiles (and the sweep of
/// their scratch copies).
pub fn register(registry: &mut ToolRegistry, roots: &Roots, config: &Arc<OperatorConfig>) {
    if !roots.is_empty() {
        generate::register(registry, roots);
    }
    if !config.bootstrap.is_empty() {
        run_loop::register(registry, roots, config);
        let mut bases: Vec<std::path::PathBuf> = config
            .bootstrap
            .values()
            .filter_map(|p| match &p.workspace {
                Workspace::Scratch(base) => Some(base.clone()),
                Workspace::Root => None,
            })
            .collect();
        bases.sort();
        bases.dedup();
        if !bases.is_empty() {
            let bases = Arc::new(bases);
            registry.add_chore(Chore::new(
                "bootstrap-scratch-sweep",
                QUEUE,
                workspace::SWEEP_EVERY,
                move |cx| {
                    let bases = bases.clone();
                    async move { workspace::sweep_chore(&bases, &cx).await }
                },
            ));
        }
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
    let mut others = 0;
    for (relative, file) in records {
        if let Some(text) = read_text(&file) {
            let text = if is_plain_text_record(&relative) {
                requirements::plain_text_as_markdown(&text)
            } else {
                text
            };
            // A document that is no decision record (a vendored README's install section)
            // gives no step: only records are the team's word on what to run.
            if !requirements.add_if_record(&relative, &text) {
                others += 1;
            }
        }
    }
    if requirements.adrs.is_empty() {
        return Err(invalid(format!(
            "no ADR under `{adr_path}` of root `{}`: {others} Markdown or text files, none a decision record (a title, and a status or a Decision section); name the folder that holds the records with adrPath",
            root.name
        )));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &std::path::Path, text: &str) {
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }

    #[test]
    fn only_decision_records_feed_steps_and_vendored_docs_give_none() {
        let dir = tempfile::tempdir().expect("dir");
        write(
            &dir.path().join("docs/adr/0001-build.md"),
            "# 1. One build script\n\n## Status\n\nAccepted\n\n## Decision\n\nA script.\n\n## Implementation\n\n```sh\n./build.sh\n```\n",
        );
        write(
            &dir.path().join("docs/vendor/redis/INSTALL.md"),
            "# Redis\n\n## Installation\n\n```sh\ncurl -fsSL https://example.com/install.sh | sh\n```\n\n## Testing\n\n```sh\nmake test\n```\n",
        );
        write(
            &dir.path().join("docs/guides/setup.md"),
            "---\ntitle: Setup\n---\n\n## Getting started\n\n```sh\nnpm install -g something\n```\n",
        );
        let roots = Roots::parse(&[format!("r={}", dir.path().display())]).expect("roots");
        let root = roots.get("r").expect("root");
        let requirements = read_requirements(root, "docs").expect("read");
        let paths: Vec<&str> = requirements.adrs.iter().map(|a| a.path.as_str()).collect();
        assert_eq!(paths, ["docs/adr/0001-build.md"], "only the record is read as one");
        let commands: Vec<&str> = requirements.commands().map(|(_, c)| c.command.as_str()).collect();
        assert_eq!(commands, ["./build.sh"]);
        let refused = read_requirements(root, "docs/vendor").map(|_| ()).expect_err("no record there");
        let ToolOutcome::Error(error) = refused else { panic!("an error: {refused:?}") };
        assert!(error.message.contains("none a decision record"), "{}", error.message);
    }
}
