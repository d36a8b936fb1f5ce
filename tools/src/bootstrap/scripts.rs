//! The plan of a bootstrap (its steps and checks, each with where it comes from) and the two
//! scripts written from it: `bootstrap.sh`, which stops at the first failing step, and
//! `validate_bootstrap.sh`, which runs every check and says which failed. Every step and check is
//! commented with its ADR, file, line and section, or with why it is there otherwise.

use serde::{Deserialize, Serialize};

use super::missing::{MissingFile, quote};
use super::platforms::Platform;
use super::requirements::{Purpose, Requirements, Source};

/// Why a step or check is in the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Origin {
    /// A command in an ADR.
    Adr,
    /// A check of a platform found in the root.
    Platform,
    /// A fix learned from an earlier run: create a missing file from its template.
    KnownFix,
    /// Drafted by the client's model from an ADR section that has no command.
    Drafted,
}

/// One step or check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Planned {
    /// `step-1`, `check-2`: stable within one plan.
    pub id: String,
    pub command: String,
    /// What it shows, in words: the ADR's requirement, or the platform's.
    pub requirement: String,
    pub origin: Origin,
    /// The ADR it comes from; `None` for a platform's check.
    pub source: Option<Source>,
}

impl Planned {
    fn comment(&self) -> String {
        match (self.origin, &self.source) {
            (Origin::Adr, Some(source)) => format!("From {}.", source.cite()),
            (Origin::Drafted, Some(source)) => format!(
                "Drafted by the client's model from {}, which has no command: review it before you run it.",
                source.cite()
            ),
            (Origin::KnownFix, Some(source)) => {
                format!(
                    "Known fix, learned from an earlier run: {}. Required by {}.",
                    self.requirement,
                    source.cite()
                )
            }
            _ => format!("Platform check: {}.", self.requirement),
        }
    }
}

/// The steps and checks of one bootstrap, and the scripts written from them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    pub steps: Vec<Planned>,
    pub checks: Vec<Planned>,
}

/// A step the client's model drafted for an ADR section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Draft {
    pub command: String,
    pub source: Source,
}

impl Plan {
    /// The plan for `requirements` and `platforms`: the known fixes first (files to create from
    /// their templates), then the ADRs' steps in record order, then drafted steps; checks are the
    /// ADRs' then the platforms'.
    pub fn new(
        requirements: &Requirements,
        platforms: &[Platform],
        fixes: &[&MissingFile],
        drafts: &[Draft],
    ) -> Self {
        let mut steps: Vec<Planned> = Vec::new();
        for file in fixes {
            if let Some(command) = file.create_command() {
                steps.push(Planned {
                    id: String::new(),
                    command,
                    requirement: format!("create {}", file.path),
                    origin: Origin::KnownFix,
                    source: file.required_by.first().cloned(),
                });
            }
        }
        let from_adr = |purpose: Purpose| {
            requirements.commands().filter(move |(p, _)| *p == purpose).map(|(_, c)| Planned {
                id: String::new(),
                command: c.command.clone(),
                requirement: c.command.clone(),
                origin: Origin::Adr,
                source: Some(c.source.clone()),
            })
        };
        steps.extend(from_adr(Purpose::Step));
        steps.extend(drafts.iter().map(|d| Planned {
            id: String::new(),
            command: d.command.clone(),
            requirement: d.command.clone(),
            origin: Origin::Drafted,
            source: Some(d.source.clone()),
        }));
        let mut checks: Vec<Planned> = from_adr(Purpose::Check).collect();
        checks.extend(platforms.iter().map(|p| Planned {
            id: String::new(),
            command: p.command.clone(),
            requirement: format!("{} ({})", p.requirement, p.evidence),
            origin: Origin::Platform,
            source: None,
        }));
        for (i, step) in steps.iter_mut().enumerate() {
            step.id = format!("step-{}", i + 1);
        }
        for (i, check) in checks.iter_mut().enumerate() {
            check.id = format!("check-{}", i + 1);
        }
        Plan { steps, checks }
    }

    /// `bootstrap.sh`: each step in order, announced on stdout as `==> step N of M`, stopping at
    /// the first that fails.
    pub fn bootstrap_script(&self, heading: &str) -> String {
        let mut out = format!(
            "#!/usr/bin/env bash\n# bootstrap.sh: {heading}\n# Each step says where it comes from. Read it before you run it; run it at the root.\nset -eo pipefail\n"
        );
        let total = self.steps.len();
        for (i, step) in self.steps.iter().enumerate() {
            out.push_str(&format!(
                "\n# Step {} of {total}. {}\necho {}\n{}\n",
                i + 1,
                step.comment(),
                quote(&format!("==> step {} of {total}: {}", i + 1, first_line(&step.requirement))),
                step.command
            ));
        }
        if total == 0 {
            out.push_str("\n# The ADRs give no step to run.\n");
        }
        out.push_str("\necho '==> bootstrap done'\n");
        out
    }

    /// `validate_bootstrap.sh`: every check, each in a subshell, then a summary; it exits 1 when
    /// any failed.
    pub fn validation_script(&self, heading: &str) -> String {
        let mut out = format!(
            "#!/usr/bin/env bash\n# validate_bootstrap.sh: {heading}\n# Each check says where it comes from. Run it at the root after bootstrap.sh.\nset -o pipefail\npassed=0\nfailed=0\n"
        );
        let total = self.checks.len();
        for (i, check) in self.checks.iter().enumerate() {
            let label = quote(&format!("{} ({})", check.id, first_line(&check.requirement)));
            out.push_str(&format!(
                "\n# Check {} of {total}. {}\nif (\n{}\n); then echo \"PASS \"{label}; passed=$((passed + 1)); else echo \"FAIL \"{label}; failed=$((failed + 1)); fi\n",
                i + 1,
                check.comment(),
                check.command
            ));
        }
        out.push_str("\necho \"==> $passed passed, $failed failed\"\n[ \"$failed\" -eq 0 ]\n");
        out
    }
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

/// The step `bootstrap.sh` was at when it stopped: the last `==> step N of M` it printed.
pub fn last_step(stdout: &str) -> Option<usize> {
    stdout.lines().rev().find_map(|line| {
        let rest = line.strip_prefix("==> step ")?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::missing::missing_files;

    #[test]
    fn scripts_run_what_the_adrs_say_and_cite_them() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(dir.path().join("app.example.toml"), "port = 1\n").expect("write");
        let mut requirements = Requirements::default();
        requirements.add(
            "docs/adr/0001-a.md",
            "# 1. Settings\n\n## Deployment\n\n```sh\ntest -f app.toml && echo built > built.txt\n```\n\n## Confirmation\n\n```sh\ngrep -q built built.txt\nfalse\n```\n",
        );
        let roots = crate::roots::Roots::parse(&[format!("r={}", dir.path().display())]).expect("roots");
        let missing = missing_files(roots.get("r").expect("root"), &requirements);
        let plan = Plan::new(&requirements, &[], &missing.iter().collect::<Vec<_>>(), &[]);
        let bootstrap = plan.bootstrap_script("a test");
        assert!(bootstrap.contains("# Step 1 of 2. Known fix, learned from an earlier run: create app.toml"));
        assert!(
            bootstrap.contains(
                "# Step 2 of 2. From ADR 1: Settings (docs/adr/0001-a.md:6, section \"Deployment\")"
            )
        );
        let validation = plan.validation_script("a test");
        assert!(validation.contains("# Check 2 of 2. From ADR 1: Settings (docs/adr/0001-a.md:13"));

        std::fs::write(dir.path().join("bootstrap.sh"), &bootstrap).expect("write");
        std::fs::write(dir.path().join("validate.sh"), &validation).expect("write");
        let run = |script: &str| {
            std::process::Command::new("bash")
                .arg(script)
                .current_dir(dir.path())
                .output()
                .expect("bash runs")
        };
        let booted = run("bootstrap.sh");
        assert!(booted.status.success(), "{booted:?}");
        assert_eq!(last_step(&String::from_utf8_lossy(&booted.stdout)), Some(2));
        let checked = run("validate.sh");
        let out = String::from_utf8_lossy(&checked.stdout);
        assert!(!checked.status.success());
        assert!(
            out.contains("PASS check-1")
                && out.contains("FAIL check-2")
                && out.contains("1 passed, 1 failed"),
            "{out}"
        );
    }
}
