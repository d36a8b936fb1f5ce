//! A failed step or check turned into a learning: what kind of failure it is, what to do about
//! it, and the lines of output that show it, secrets masked.

use serde::{Deserialize, Serialize};

use super::missing::MissingFile;
use super::scripts::Planned;
use super::secrets::mask;

/// Evidence lines kept per learning.
const EVIDENCE_LINES: usize = 6;
/// Longest evidence line kept.
const EVIDENCE_LINE_CHARS: usize = 300;

/// The kinds of failure, in the order they are recognised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Category {
    Timeout,
    PortInUse,
    Permission,
    MissingCommand,
    MissingFile,
    Dependency,
    TestFailure,
    Unknown,
}

impl Category {
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Timeout => "timeout",
            Category::PortInUse => "portInUse",
            Category::Permission => "permission",
            Category::MissingCommand => "missingCommand",
            Category::MissingFile => "missingFile",
            Category::Dependency => "dependency",
            Category::TestFailure => "testFailure",
            Category::Unknown => "unknown",
        }
    }
}

/// Phrases that mark each category in a command's output (lowercased).
const MARKERS: &[(Category, &[&str])] = &[
    (
        Category::PortInUse,
        &["address already in use", "eaddrinuse", "port is already allocated", "bind: address"],
    ),
    (Category::Permission, &["permission denied", "eacces", "operation not permitted", "access denied"]),
    (
        Category::MissingCommand,
        &["command not found", ": not found", "executable file not found", "no such command"],
    ),
    (
        Category::MissingFile,
        &[
            "no such file or directory",
            "enoent",
            "filenotfounderror",
            "does not exist",
            "cannot open",
            "not found:",
            "missing file",
        ],
    ),
    (
        Category::Dependency,
        &[
            "modulenotfounderror",
            "no module named",
            "cannot find module",
            "importerror",
            "could not resolve",
            "unresolved import",
            "failed to select a version",
            "npm err! 404",
            "missing dependency",
            "unable to locate package",
            "could not find a version",
        ],
    ),
    (
        Category::TestFailure,
        &[
            "test result: failed",
            "assertionerror",
            "assertion failed",
            "tests failed",
            "failed:",
            " failed",
            "failures:",
        ],
    ),
];

/// How one step or check ended, as the learnings node reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    /// stdout then stderr, secrets already masked.
    pub output: String,
}

/// One thing learned from a failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Learning {
    /// The same failure of the same requirement has the same key in every run.
    pub key: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub category: Category,
    /// `critical` for a failed step (nothing after it ran), `high` for a failed check.
    pub severity: String,
    /// The ADR it concerns, and where; `None` for a platform's check.
    pub adr: Option<String>,
    pub adr_path: Option<String>,
    pub section: Option<String>,
    pub requirement: String,
    pub recommendation: String,
    pub evidence: Vec<String>,
    /// A file whose absence explains it and whose template makes a fix, when there is one.
    pub fix_creates: Option<String>,
    /// Whether an earlier execution saw the same learning.
    #[serde(default)]
    pub seen_before: bool,
}

/// The category `outcome` shows.
pub fn classify(outcome: &Outcome) -> Category {
    if outcome.timed_out {
        return Category::Timeout;
    }
    match outcome.exit_code {
        Some(127) => return Category::MissingCommand,
        Some(126) => return Category::Permission,
        _ => {}
    }
    let lower = outcome.output.to_lowercase();
    MARKERS
        .iter()
        .find(|(_, phrases)| phrases.iter().any(|p| lower.contains(p)))
        .map_or(Category::Unknown, |(category, _)| *category)
}

/// The learning a failed `item` teaches. `missing` are the files the ADRs name that the
/// workspace lacked; one the output names (or that the item's command names) is taken as the
/// cause of a missing-file failure.
pub fn learn(item: &Planned, is_step: bool, outcome: &Outcome, missing: &[MissingFile]) -> Learning {
    let category = classify(outcome);
    let named = missing
        .iter()
        .find(|m| outcome.output.contains(&m.path))
        .or_else(|| missing.iter().find(|m| item.command.contains(&m.path)));
    let (category, file) = match (category, named) {
        (Category::MissingFile | Category::Unknown | Category::TestFailure, Some(file)) => {
            (Category::MissingFile, Some(file))
        }
        (category, _) => (category, None),
    };
    let program = item.command.split_whitespace().next().unwrap_or_default();
    let recommendation = match (category, file) {
        (Category::MissingFile, Some(file)) => file.recommendation.clone(),
        (Category::MissingFile, None) => {
            "Create the file the output names, or add a step that creates it".into()
        }
        (Category::Timeout, _) => "Raise the profile's timeout_s, or make the command finish sooner".into(),
        (Category::PortInUse, _) => "Free the port, or configure another one for this run".into(),
        (Category::Permission, _) => {
            format!("Make `{program}` executable (chmod +x) or give the run the rights it needs")
        }
        (Category::MissingCommand, _) => {
            format!(
                "Install `{program}` on the workers, or add a step that installs it, and record it in the ADR"
            )
        }
        (Category::Dependency, _) => {
            "Install the missing dependency in a bootstrap step before this one".into()
        }
        (Category::TestFailure, _) => {
            "Fix the failing tests the evidence names; the deployment itself ran".into()
        }
        (Category::Unknown, _) => "Read the evidence; no known pattern explains this failure".into(),
    };
    let source = item.source.as_ref();
    Learning {
        key: format!(
            "{}:{}:{}",
            category.as_str(),
            source.map_or("platform", |s| s.adr_path.as_str()),
            item.command
        ),
        kind: "failure".into(),
        category,
        severity: if is_step { "critical" } else { "high" }.into(),
        adr: source.map(|s| s.adr.clone()),
        adr_path: source.map(|s| s.adr_path.clone()),
        section: source.map(|s| s.section.clone()),
        requirement: item.requirement.clone(),
        recommendation: mask(&recommendation),
        evidence: evidence(&outcome.output, category),
        fix_creates: file.filter(|f| f.template.is_some()).map(|f| f.path.clone()),
        seen_before: false,
    }
}

/// The lines that show the failure (those with a marker of its category), else the last lines.
fn evidence(output: &str, category: Category) -> Vec<String> {
    let markers: &[&str] = MARKERS.iter().find(|(c, _)| *c == category).map_or(&[], |(_, m)| m);
    let lines: Vec<&str> = output.lines().map(str::trim_end).filter(|l| !l.trim().is_empty()).collect();
    let marked: Vec<&str> =
        lines.iter().copied().filter(|l| markers.iter().any(|m| l.to_lowercase().contains(m))).collect();
    let chosen =
        if marked.is_empty() { &lines[lines.len().saturating_sub(EVIDENCE_LINES)..] } else { &marked[..] };
    chosen
        .iter()
        .take(EVIDENCE_LINES)
        .map(|l| {
            let kept: String = l.chars().take(EVIDENCE_LINE_CHARS).collect();
            mask(&kept)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::scripts::Origin;

    fn outcome(exit: i32, output: &str) -> Outcome {
        Outcome { exit_code: Some(exit), timed_out: false, output: output.into() }
    }

    #[test]
    fn failures_are_classified() {
        for (o, expected) in [
            (Outcome { timed_out: true, ..outcome(1, "") }, Category::Timeout),
            (outcome(127, "bash: kubectl: command not found"), Category::MissingCommand),
            (outcome(126, ""), Category::Permission),
            (outcome(1, "Error: listen EADDRINUSE: address already in use :::3000"), Category::PortInUse),
            (outcome(1, "cat: config/app.toml: No such file or directory"), Category::MissingFile),
            (outcome(1, "ModuleNotFoundError: No module named 'flask'"), Category::Dependency),
            (outcome(101, "test result: FAILED. 3 passed; 1 failed"), Category::TestFailure),
            (outcome(3, "something odd"), Category::Unknown),
        ] {
            assert_eq!(classify(&o), expected, "{o:?}");
        }
    }

    #[test]
    fn a_learning_cites_its_adr_masks_its_evidence_and_names_the_fix() {
        let item = Planned {
            id: "check-1".into(),
            command: "./check.sh".into(),
            requirement: "./check.sh".into(),
            origin: Origin::Adr,
            source: Some(crate::bootstrap::requirements::Source {
                adr_path: "docs/adr/0001-a.md".into(),
                adr: "ADR 1: A".into(),
                section: "Confirmation".into(),
                line: 9,
            }),
        };
        let missing = crate::bootstrap::missing::MissingFile {
            path: "config/app.toml".into(),
            required_by: vec![],
            severity: crate::bootstrap::missing::Severity::Critical,
            secret: false,
            template: Some(crate::bootstrap::missing::Template {
                source: crate::bootstrap::missing::TemplateSource::Variables,
                contents: String::new(),
            }),
            recommendation: "Create config/app.toml from config/app.example.toml".into(),
        };
        let o =
            outcome(1, "using API_TOKEN=tok-123456789\ncat: config/app.toml: No such file or directory\n");
        let learning = learn(&item, false, &o, &[missing]);
        assert_eq!(learning.category, Category::MissingFile);
        assert_eq!(learning.adr_path.as_deref(), Some("docs/adr/0001-a.md"));
        assert_eq!(learning.fix_creates.as_deref(), Some("config/app.toml"));
        assert_eq!(learning.evidence, ["cat: config/app.toml: No such file or directory"]);
        let unknown = learn(&item, true, &outcome(2, "API_TOKEN=tok-123456789\nboom"), &[]);
        assert_eq!(unknown.evidence, ["API_TOKEN=***", "boom"]);
        assert_eq!(unknown.severity, "critical");
    }
}
