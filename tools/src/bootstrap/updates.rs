//! What a bootstrap loop learned, proposed as updates to the ADRs it concerns: per record, the
//! section a failed requirement came from and a unified diff that appends the learnings at that
//! section's end. Nothing is written here; [`apply`] writes an update only onto the text it was
//! made from.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use similar::TextDiff;

use super::learnings::Learning;
use crate::adrs::parse::parse_adr;

/// One proposed change to one record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdrUpdate {
    pub adr: String,
    pub adr_path: String,
    pub section: String,
    /// The lines appended, for a person to read.
    pub appended: String,
    /// A unified diff against the record as it was read (`a/PATH`, `b/PATH`).
    pub diff: String,
    /// The record's whole new text, to write once approved.
    #[serde(skip)]
    pub new_text: String,
    #[serde(skip)]
    pub old_text: String,
}

/// What a learning adds to its record: the requirement, what went wrong, what to do, and whether
/// the loop's known fix made it pass.
fn bullet(learning: &Learning, fixed: bool) -> String {
    let mut line = format!(
        "- `{}` failed ({}): {}.",
        learning.requirement.lines().next().unwrap_or_default(),
        learning.category.as_str(),
        learning.recommendation.trim_end_matches('.')
    );
    if fixed {
        line.push_str(" With that done first, it passed.");
    }
    line
}

/// The updates `learnings` imply, one per record and section, reading each record with `read`
/// (its path relative to the root). `fixed` holds the keys of learnings a later iteration fixed.
pub fn propose(
    learnings: &[Learning],
    fixed: &[String],
    date: &str,
    read: impl Fn(&str) -> Option<String>,
) -> Vec<AdrUpdate> {
    let mut by_place: BTreeMap<(String, String), Vec<&Learning>> = BTreeMap::new();
    for learning in learnings {
        if let (Some(path), Some(section)) = (&learning.adr_path, &learning.section) {
            let group = by_place.entry((path.clone(), section.clone())).or_default();
            if !group.iter().any(|l| l.key == learning.key) {
                group.push(learning);
            }
        }
    }
    let mut updates = Vec::new();
    for ((path, section), group) in by_place {
        let Some(old_text) = read(&path) else { continue };
        let mut appended = format!("Learned by bootstrap validation on {date}:\n\n");
        for learning in &group {
            appended.push_str(&bullet(learning, fixed.contains(&learning.key)));
            appended.push('\n');
        }
        let new_text = append_to_section(&path, &old_text, &section, &appended);
        let diff = TextDiff::from_lines(&old_text, &new_text)
            .unified_diff()
            .context_radius(3)
            .header(&format!("a/{path}"), &format!("b/{path}"))
            .to_string();
        updates.push(AdrUpdate {
            adr: group[0].adr.clone().unwrap_or_else(|| path.clone()),
            adr_path: path,
            section,
            appended,
            diff,
            new_text,
            old_text,
        });
    }
    updates
}

/// `text` with `addition` at the end of the section titled `section` (before the next heading of
/// the same or a higher level), or at the end of the record when it has no such section.
fn append_to_section(path: &str, text: &str, section: &str, addition: &str) -> String {
    let doc = parse_adr(path, text);
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let found = doc.sections.iter().position(|s| s.title.trim() == section);
    let end = found.and_then(|i| {
        let level = doc.sections[i].level;
        doc.sections[i + 1..].iter().find(|s| s.level <= level).map(|s| s.line as usize - 1)
    });
    let end = end.unwrap_or(lines.len());
    // Before the blank lines that close the section.
    let mut at = end;
    while at > 0 && lines[at - 1].trim().is_empty() {
        at -= 1;
    }
    let mut out: String = lines[..at].concat();
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out.push('\n');
    out.push_str(addition);
    if at < lines.len() {
        out.push('\n');
    }
    out.push_str(&lines[at..].concat());
    out
}

/// Writes `update` into the record at `file`, if the record is still the text it was made from.
pub fn apply(update: &AdrUpdate, file: &std::path::Path) -> Result<(), String> {
    let now = std::fs::read_to_string(file).map_err(|e| format!("cannot read {}: {e}", update.adr_path))?;
    if now != update.old_text {
        return Err(format!("{} changed since it was read; nothing was written to it", update.adr_path));
    }
    std::fs::write(file, &update.new_text).map_err(|e| format!("cannot write {}: {e}", update.adr_path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::learnings::Category;

    #[test]
    fn a_learning_is_appended_to_its_section_as_a_unified_diff() {
        let adr =
            "# 1. Settings\n\n## Confirmation\n\n```sh\n./check.sh\n```\n\n## More Information\n\nNone.\n";
        let learning = Learning {
            key: "k".into(),
            kind: "failure".into(),
            category: Category::MissingFile,
            severity: "high".into(),
            adr: Some("ADR 1: Settings".into()),
            adr_path: Some("docs/adr/0001-s.md".into()),
            section: Some("Confirmation".into()),
            requirement: "./check.sh".into(),
            recommendation: "Create config/app.toml from config/app.example.toml".into(),
            evidence: vec![],
            fix_creates: Some("config/app.toml".into()),
            seen_before: false,
        };
        let updates = propose(&[learning.clone(), learning], &["k".into()], "2026-12-06", |p| {
            (p == "docs/adr/0001-s.md").then(|| adr.to_owned())
        });
        assert_eq!(updates.len(), 1);
        let update = &updates[0];
        assert_eq!(
            (update.adr_path.as_str(), update.section.as_str()),
            ("docs/adr/0001-s.md", "Confirmation")
        );
        assert!(
            update.diff.starts_with("--- a/docs/adr/0001-s.md\n+++ b/docs/adr/0001-s.md\n"),
            "{}",
            update.diff
        );
        assert!(update.diff.contains("+- `./check.sh` failed (missingFile): Create config/app.toml from config/app.example.toml. With that done first, it passed.\n"), "{}", update.diff);
        let at = update.new_text.find("Learned by").expect("added");
        assert!(at < update.new_text.find("## More Information").expect("kept"), "{}", update.new_text);
        assert_eq!(update.new_text.matches("- `./check.sh`").count(), 1, "one bullet per learning");

        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("a.md");
        std::fs::write(&file, "changed").expect("write");
        assert!(apply(update, &file).expect_err("refused").contains("changed since it was read"));
        std::fs::write(&file, adr).expect("write");
        apply(update, &file).expect("written");
        assert_eq!(std::fs::read_to_string(&file).expect("read"), update.new_text);
    }
}
