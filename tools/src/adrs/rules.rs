//! The checks on architecture decision records, and the report they make.
//!
//! Rule names are stable: clients filter and count by them. Each rule has one severity.
//!
//! On one record ([`file_findings`]):
//!
//! | rule | severity | what it finds |
//! | --- | --- | --- |
//! | `missing-title` | error | no level-1 heading and no front matter `title` |
//! | `missing-number` | error | no number in the file name, the title or front matter `number` |
//! | `missing-section` | error | a section the record's format requires is absent (Nygard: Context, Decision, Consequences, and Status unless the status is a field; MADR: Context and Problem Statement, Considered Options, Decision Outcome); a record of neither format gets one finding naming both sets |
//! | `missing-status` | error | no status in front matter, a field or a Status section |
//! | `unknown-status` | warning | a status that is not proposed, draft, accepted, rejected, deprecated or superseded (`Superseded by ...` is superseded) |
//! | `missing-date` | warning | no date in front matter, a field or a Date section |
//! | `bad-date` | error | a date that is not a real calendar day written `YYYY-MM-DD` |
//! | `empty-section` | warning | a section with nothing but whitespace and HTML comments |
//! | `broken-link` | error | a relative link (not a URL, not `/rooted`, not `#anchor`) to a file that does not exist |
//!
//! Across the set ([`cross_check`]):
//!
//! | rule | severity | what it finds |
//! | --- | --- | --- |
//! | `duplicate-number` | error | two or more records share a number; on each of them |
//! | `supersede-link` | warning | A supersedes B but B does not say it is superseded by A, or the other way round; on both |
//! | `unknown-adr` | warning | a relation or mention of a number no record has |
//!
//! Gaps in the numbering are not findings on any record; the summary lists them (the first
//! [`MAX_GAPS`], so that one stray large number cannot blow up the report). No rule is at `info`
//! today; the severity exists so that reports keep their shape when one is.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::parse::{AdrDoc, Format, Relation, RelationKind, link_path, section_key};

/// How many missing numbers the summary lists at most.
pub const MAX_GAPS: usize = 1000;

/// The statuses records use; anything else is `unknown-status`.
pub const KNOWN_STATUSES: [&str; 6] =
    ["proposed", "draft", "accepted", "rejected", "deprecated", "superseded"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
    Info,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Info => "info",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    pub rule: String,
    pub severity: Severity,
    pub message: String,
    pub line: Option<u32>,
}

impl Finding {
    fn new(rule: &str, severity: Severity, message: String, line: Option<u32>) -> Self {
        Finding { rule: rule.to_owned(), severity, message, line }
    }

    fn to_json(&self) -> Value {
        json!({
            "rule": self.rule,
            "severity": self.severity.as_str(),
            "message": self.message,
            "line": self.line,
        })
    }
}

/// Numbers that more than one record carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Duplicate {
    pub number: u32,
    pub paths: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Numbers missing between the lowest and the highest, ascending.
    pub gaps: Vec<u32>,
    pub duplicates: Vec<Duplicate>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CrossCheck {
    /// By record path; only records with findings appear.
    pub findings: BTreeMap<String, Vec<Finding>>,
    pub summary: Summary,
}

/// The known status a raw status value stands for: `Accepted`, `accepted.`,
/// `Superseded by [3. Foo](0003-foo.md)` and `**Proposed** (2024-01-05)` all have one;
/// `Approved-ish` and `{proposed | accepted}` do not.
pub fn status_kind(raw: &str) -> Option<&'static str> {
    let s = raw.trim().trim_start_matches(['*', '_', '`']).to_lowercase();
    KNOWN_STATUSES.into_iter().find(|known| {
        s.strip_prefix(known).is_some_and(|rest| {
            rest.is_empty()
                || rest.starts_with(|c: char| {
                    c.is_whitespace() || matches!(c, '.' | ',' | ';' | ':' | '(' | '*' | '_' | '`' | '!')
                })
        })
    })
}

/// Sections that hold the decision itself, normalised by [`section_key`]: Nygard's and MADR's.
const DECISION_SECTIONS: [&str; 2] = ["decision", "decision outcome"];

/// Whether a parsed Markdown file is a decision record at all, and not some other document that
/// sits among them (a vendored README, an install guide): it has a title, and a known status
/// ([`status_kind`]) or a section that holds the decision. What acts on records (turning their
/// setup sections into commands) takes only these.
pub fn is_decision_record(doc: &AdrDoc) -> bool {
    let decided = doc.sections.iter().any(|s| DECISION_SECTIONS.contains(&section_key(&s.title).as_str()));
    doc.title.is_some() && (decided || doc.status.as_deref().is_some_and(|s| status_kind(s).is_some()))
}

/// The checks that need only one record. `link_exists` is asked about each relative link's path
/// (fragment and query removed, percent-escapes decoded) as written, relative to the record's
/// directory: resolving it, and refusing paths that leave the record set, is the caller's part.
pub fn file_findings(doc: &AdrDoc, link_exists: &dyn Fn(&str) -> bool) -> Vec<Finding> {
    let mut out = Vec::new();
    if doc.title.is_none() {
        out.push(Finding::new(
            "missing-title",
            Severity::Error,
            "The record has no title: no level-1 heading and no `title` in front matter.".into(),
            None,
        ));
    }
    if doc.number.is_none() {
        out.push(Finding::new(
            "missing-number",
            Severity::Error,
            format!(
                "The record has no number: none in the file name \"{}\", the title or front matter `number`.",
                doc.path.rsplit('/').next().unwrap_or(&doc.path)
            ),
            None,
        ));
    }
    out.extend(missing_sections(doc));
    match &doc.status {
        None => out.push(Finding::new(
            "missing-status",
            Severity::Error,
            "The record has no status: none in front matter, a Status field or a Status section.".into(),
            None,
        )),
        Some(status) if status_kind(status).is_none() => out.push(Finding::new(
            "unknown-status",
            Severity::Warning,
            format!("The status \"{status}\" is not one of {}.", KNOWN_STATUSES.join(", ")),
            doc.status_line,
        )),
        Some(_) => {}
    }
    match &doc.date {
        None => out.push(Finding::new(
            "missing-date",
            Severity::Warning,
            "The record has no date: none in front matter, a Date field or a Date section.".into(),
            None,
        )),
        Some(date) => {
            if let Err(why) = check_date(date) {
                out.push(Finding::new("bad-date", Severity::Error, why, doc.date_line));
            }
        }
    }
    for section in doc.sections.iter().filter(|s| s.empty) {
        out.push(Finding::new(
            "empty-section",
            Severity::Warning,
            format!("The section \"{}\" is empty.", section.title),
            Some(section.line),
        ));
    }
    for link in &doc.links {
        if let Some(path) = link_path(&link.target)
            && !link_exists(&path)
        {
            let message = if link.text.is_empty() {
                format!("The link to \"{}\" points to a file that does not exist.", link.target)
            } else {
                format!("The link \"{}\" points to \"{}\", which does not exist.", link.text, link.target)
            };
            out.push(Finding::new("broken-link", Severity::Error, message, Some(link.line)));
        }
    }
    sort(&mut out);
    out
}

fn missing_sections(doc: &AdrDoc) -> Vec<Finding> {
    let keys: BTreeSet<String> =
        doc.sections.iter().filter(|s| s.level > 1).map(|s| section_key(&s.title)).collect();
    let (format, required): (&str, &[&str]) = match doc.format {
        // A missing status is `missing-status`, whether it would have been a section or a field.
        Format::Nygard => ("Nygard", &["Context", "Decision", "Consequences"]),
        Format::Madr => {
            ("MADR", &["Context and Problem Statement", "Considered Options", "Decision Outcome"])
        }
        Format::Unknown => {
            return vec![Finding::new(
                "missing-section",
                Severity::Error,
                "The record has neither Nygard's sections (Status, Context, Decision, Consequences) nor MADR's (Context and Problem Statement, Considered Options, Decision Outcome).".into(),
                None,
            )];
        }
    };
    required
        .iter()
        .filter(|name| !keys.contains(&section_key(name)))
        .map(|name| {
            Finding::new(
                "missing-section",
                Severity::Error,
                format!("The section \"{name}\" that the {format} format requires is missing."),
                None,
            )
        })
        .collect()
}

/// Why `raw` is not a calendar day written `YYYY-MM-DD`.
fn check_date(raw: &str) -> Result<(), String> {
    let shaped = |s: &[u8]| {
        s.len() == 10
            && s.iter()
                .enumerate()
                .all(|(i, b)| if i == 4 || i == 7 { *b == b'-' } else { b.is_ascii_digit() })
    };
    let bytes = raw.as_bytes();
    if !shaped(bytes) {
        return Err(if bytes.len() > 10 && shaped(&bytes[..10]) {
            format!("The date \"{raw}\" has more than a day in it; write it as YYYY-MM-DD.")
        } else {
            format!("The date \"{raw}\" is not written YYYY-MM-DD.")
        });
    }
    // The shape check above makes every slice below ASCII digits.
    let year: i32 = raw[..4].parse().map_err(|_| bad_day(raw, "the year"))?;
    let month: u8 = raw[5..7].parse().map_err(|_| bad_day(raw, "the month"))?;
    let day: u8 = raw[8..10].parse().map_err(|_| bad_day(raw, "the day"))?;
    let month = time::Month::try_from(month)
        .map_err(|_| format!("The date \"{raw}\" is not a calendar date: there is no month {month}."))?;
    if day == 0 {
        return Err(format!("The date \"{raw}\" is not a calendar date: there is no day 0."));
    }
    time::Date::from_calendar_date(year, month, day).map(|_| ()).map_err(|_| {
        format!("The date \"{raw}\" is not a calendar date: {month} {year} has {} days.", month.length(year))
    })
}

fn bad_day(raw: &str, part: &str) -> String {
    format!("The date \"{raw}\" is not a calendar date: {part} cannot be read.")
}

/// The checks that need the whole set: duplicate numbers, one-sided supersessions, references to
/// numbers no record has, and the gaps in the numbering.
pub fn cross_check(docs: &[AdrDoc]) -> CrossCheck {
    let mut findings: BTreeMap<String, Vec<Finding>> = BTreeMap::new();
    let mut by_number: BTreeMap<u32, Vec<&AdrDoc>> = BTreeMap::new();
    for doc in docs {
        if let Some(n) = doc.number {
            by_number.entry(n).or_default().push(doc);
        }
    }
    let by_path: HashMap<String, &AdrDoc> =
        docs.iter().filter_map(|d| normalize(&d.path).map(|p| (p, d))).collect();

    let mut duplicates = Vec::new();
    for (&number, group) in by_number.iter().filter(|(_, g)| g.len() > 1) {
        let mut paths: Vec<String> = group.iter().map(|d| d.path.clone()).collect();
        paths.sort();
        for doc in group {
            let others: Vec<&str> = paths.iter().filter(|p| **p != doc.path).map(String::as_str).collect();
            findings.entry(doc.path.clone()).or_default().push(Finding::new(
                "duplicate-number",
                Severity::Error,
                format!(
                    "The number {number} is also used by {}.",
                    if others.is_empty() {
                        "another record at the same path".to_owned()
                    } else {
                        others.join(", ")
                    }
                ),
                doc.number_line,
            ));
        }
        duplicates.push(Duplicate { number, paths });
    }

    let mut seen_pairs = BTreeSet::new();
    let mut seen_unknown = BTreeSet::new();
    for doc in docs {
        for relation in &doc.relations {
            let targets = resolve(doc, relation, &by_path, &by_number);
            if targets.is_empty() {
                if let Some(n) = relation.number
                    && !by_number.contains_key(&n)
                    && seen_unknown.insert((doc.path.clone(), n, relation.line))
                {
                    findings.entry(doc.path.clone()).or_default().push(Finding::new(
                        "unknown-adr",
                        Severity::Warning,
                        unknown_message(relation.kind, n),
                        Some(relation.line),
                    ));
                }
                continue;
            }
            let wanted = match relation.kind {
                RelationKind::Supersedes => RelationKind::SupersededBy,
                RelationKind::SupersededBy => RelationKind::Supersedes,
                _ => continue,
            };
            // A number several records share is answered when any of them answers.
            if targets.iter().any(|other| other.path == doc.path || refers_back(other, wanted, doc, &by_path))
            {
                continue;
            }
            for other in targets {
                if !seen_pairs.insert((doc.path.clone(), other.path.clone(), relation.kind)) {
                    continue;
                }
                let (here, there) = one_sided_messages(relation.kind, doc, other);
                findings.entry(doc.path.clone()).or_default().push(Finding::new(
                    "supersede-link",
                    Severity::Warning,
                    here,
                    Some(relation.line),
                ));
                findings.entry(other.path.clone()).or_default().push(Finding::new(
                    "supersede-link",
                    Severity::Warning,
                    there,
                    other.status_line,
                ));
            }
        }
    }
    for list in findings.values_mut() {
        sort(list);
    }

    let gaps = match (by_number.keys().next(), by_number.keys().next_back()) {
        (Some(&low), Some(&high)) => {
            (low..=high).filter(|n| !by_number.contains_key(n)).take(MAX_GAPS).collect()
        }
        _ => Vec::new(),
    };
    CrossCheck { findings, summary: Summary { gaps, duplicates } }
}

fn unknown_message(kind: RelationKind, n: u32) -> String {
    let says = match kind {
        RelationKind::Supersedes => "This record says it supersedes",
        RelationKind::SupersededBy => "This record says it is superseded by",
        RelationKind::Amends => "This record says it amends",
        RelationKind::AmendedBy => "This record says it is amended by",
        RelationKind::Mentions => "This record refers to",
    };
    format!("{says} ADR {n}, but no record has that number.")
}

/// "ADR 5 (0005-x.md)", or the path alone for a record without a number.
fn name(doc: &AdrDoc) -> String {
    match doc.number {
        Some(n) => format!("ADR {n} ({})", doc.path),
        None => doc.path.clone(),
    }
}

/// "ADR 5", or the path for a record without a number.
fn short_name(doc: &AdrDoc) -> String {
    match doc.number {
        Some(n) => format!("ADR {n}"),
        None => doc.path.clone(),
    }
}

/// What each side of a one-sided supersession is told: `doc` states `kind` about `other`, and
/// `other` does not state the converse.
fn one_sided_messages(kind: RelationKind, doc: &AdrDoc, other: &AdrDoc) -> (String, String) {
    if kind == RelationKind::Supersedes {
        (
            format!(
                "This record says it supersedes {}, but that record does not say it is superseded by {}.",
                name(other),
                short_name(doc)
            ),
            format!(
                "{} says it supersedes this record, but this record does not say it is superseded by {}.",
                name(doc),
                short_name(doc)
            ),
        )
    } else {
        (
            format!(
                "This record says it is superseded by {}, but that record does not say it supersedes {}.",
                name(other),
                short_name(doc)
            ),
            format!(
                "{} says it is superseded by this record, but this record does not say it supersedes {}.",
                name(doc),
                short_name(doc)
            ),
        )
    }
}

/// The records a relation points at: the file its link names when that is a record of the set,
/// else every record with its number.
fn resolve<'a>(
    from: &AdrDoc,
    relation: &Relation,
    by_path: &HashMap<String, &'a AdrDoc>,
    by_number: &BTreeMap<u32, Vec<&'a AdrDoc>>,
) -> Vec<&'a AdrDoc> {
    if let Some(doc) =
        relation.target.as_deref().and_then(|t| resolve_target(&from.path, t)).and_then(|p| by_path.get(&p))
    {
        return vec![*doc];
    }
    relation.number.and_then(|n| by_number.get(&n)).cloned().unwrap_or_default()
}

/// Whether `doc` states `kind` about `target`.
fn refers_back(
    doc: &AdrDoc,
    kind: RelationKind,
    target: &AdrDoc,
    by_path: &HashMap<String, &AdrDoc>,
) -> bool {
    doc.relations.iter().filter(|r| r.kind == kind).any(|r| {
        let by_link = r
            .target
            .as_deref()
            .and_then(|t| resolve_target(&doc.path, t))
            .and_then(|p| by_path.get(&p))
            .map(|d| d.path == target.path);
        match by_link {
            Some(same) => same,
            None => r.number.is_some() && r.number == target.number,
        }
    })
}

/// A link target's path, resolved against the directory of the record at `from`; `None` when it
/// is not a relative link or climbs out of the root.
fn resolve_target(from: &str, target: &str) -> Option<String> {
    let path = link_path(target)?;
    let dir = from.rsplit_once('/').map_or("", |(dir, _)| dir);
    normalize(&format!("{dir}/{path}"))
}

/// `a/./b/../c` as `a/c`; `None` when `..` climbs above the root.
fn normalize(path: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split(['/', '\\']) {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(parts.join("/"))
}

fn sort(findings: &mut [Finding]) {
    findings.sort_by(|a, b| (a.line, &a.rule, &a.message).cmp(&(b.line, &b.rule, &b.message)));
}

/// The whole report: each record (by number, then path; records without a number last) with its
/// findings from both passes, and the summary.
pub fn report(docs: &[AdrDoc], file_findings: &BTreeMap<String, Vec<Finding>>, cross: &CrossCheck) -> Value {
    let mut ordered: Vec<&AdrDoc> = docs.iter().collect();
    ordered.sort_by(|a, b| {
        (a.number.is_none(), a.number, &a.path).cmp(&(b.number.is_none(), b.number, &b.path))
    });
    let (mut errors, mut warnings, mut infos, mut clean) = (0u64, 0u64, 0u64, 0u64);
    let mut by_rule: BTreeMap<String, u64> = BTreeMap::new();
    let mut by_status: BTreeMap<String, u64> = BTreeMap::new();
    let mut adrs = Vec::with_capacity(ordered.len());
    for doc in ordered {
        let mut findings: Vec<Finding> = file_findings
            .get(&doc.path)
            .into_iter()
            .chain(cross.findings.get(&doc.path))
            .flatten()
            .cloned()
            .collect();
        sort(&mut findings);
        for finding in &findings {
            match finding.severity {
                Severity::Error => errors += 1,
                Severity::Warning => warnings += 1,
                Severity::Info => infos += 1,
            }
            *by_rule.entry(finding.rule.clone()).or_default() += 1;
        }
        if findings.is_empty() {
            clean += 1;
        }
        let status_key = match doc.status.as_deref() {
            Some(raw) => status_kind(raw).unwrap_or("unknown"),
            None => "none",
        };
        *by_status.entry(status_key.to_owned()).or_default() += 1;
        adrs.push(json!({
            "path": doc.path,
            "number": doc.number,
            "title": doc.title,
            "status": doc.status,
            "format": doc.format.as_str(),
            "findings": findings.iter().map(Finding::to_json).collect::<Vec<_>>(),
        }));
    }
    json!({
        "adrs": adrs,
        "summary": {
            "adrs": docs.len(),
            "errors": errors,
            "warnings": warnings,
            "infos": infos,
            "byRule": by_rule,
            "byStatus": by_status,
            "gaps": cross.summary.gaps,
            "duplicates": cross
                .summary
                .duplicates
                .iter()
                .map(|d| json!({"number": d.number, "paths": d.paths}))
                .collect::<Vec<_>>(),
            "clean": clean,
        },
    })
}

/// A report (as [`report`] makes it) as text for people: the counts, then one line per finding,
/// `path:line [severity] rule: message`, record by record.
pub fn summary_text(report: &Value) -> String {
    let summary = &report["summary"];
    let count = |key: &str| summary[key].as_u64().unwrap_or(0);
    let plural = |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let mut out = format!(
        "{} checked: {}, {}, {}; {} without findings.\n",
        plural(count("adrs"), "ADR", "ADRs"),
        plural(count("errors"), "error", "errors"),
        plural(count("warnings"), "warning", "warnings"),
        plural(count("infos"), "info", "infos"),
        count("clean"),
    );
    if let Some(by_rule) = summary["byRule"].as_object()
        && !by_rule.is_empty()
    {
        let rules: Vec<String> =
            by_rule.iter().map(|(rule, n)| format!("{rule} {}", n.as_u64().unwrap_or(0))).collect();
        let _ = writeln!(out, "By rule: {}.", rules.join(", "));
    }
    if let Some(gaps) = summary["gaps"].as_array()
        && !gaps.is_empty()
    {
        let gaps: Vec<String> = gaps.iter().map(Value::to_string).collect();
        let _ = writeln!(out, "Missing numbers: {}.", gaps.join(", "));
    }
    if let Some(duplicates) = summary["duplicates"].as_array() {
        for duplicate in duplicates {
            let paths: Vec<&str> = duplicate["paths"]
                .as_array()
                .map(|p| p.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let _ = writeln!(out, "Number {} is used by {}.", duplicate["number"], paths.join(", "));
        }
    }
    for adr in report["adrs"].as_array().map(Vec::as_slice).unwrap_or_default() {
        let Some(findings) = adr["findings"].as_array().filter(|f| !f.is_empty()) else {
            continue;
        };
        let path = adr["path"].as_str().unwrap_or("?");
        out.push('\n');
        for finding in findings {
            let place = match finding["line"].as_u64() {
                Some(line) => format!("{path}:{line}"),
                None => path.to_owned(),
            };
            let _ = writeln!(
                out,
                "{place} [{}] {}: {}",
                finding["severity"].as_str().unwrap_or("?"),
                finding["rule"].as_str().unwrap_or("?"),
                finding["message"].as_str().unwrap_or(""),
            );
        }
    }
    out
}

/// The JSON Schema (draft 2020-12) of what [`report`] returns.
pub fn output_schema() -> Value {
    let nullable = |kind: &str| json!({ "type": [kind, "null"] });
    let count = json!({ "type": "integer", "minimum": 0 });
    let finding = json!({
        "type": "object",
        "required": ["rule", "severity", "message", "line"],
        "properties": {
            "rule": { "type": "string", "description": "Stable kebab-case rule name." },
            "severity": { "enum": ["error", "warning", "info"] },
            "message": { "type": "string" },
            "line": { "type": ["integer", "null"], "minimum": 1, "description": "1-based; null when the finding is about the whole record." },
        },
    });
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "ADR validation report",
        "type": "object",
        "required": ["adrs", "summary"],
        "properties": {
            "adrs": {
                "type": "array",
                "description": "One entry per record, by number then path; records without a number last.",
                "items": {
                    "type": "object",
                    "required": ["path", "number", "title", "status", "format", "findings"],
                    "properties": {
                        "path": { "type": "string" },
                        "number": { "type": ["integer", "null"], "minimum": 0 },
                        "title": nullable("string"),
                        "status": nullable("string"),
                        "format": { "enum": ["nygard", "madr", "unknown"] },
                        "findings": { "type": "array", "items": finding },
                    },
                },
            },
            "summary": {
                "type": "object",
                "required": ["adrs", "errors", "warnings", "infos", "byRule", "byStatus", "gaps", "duplicates", "clean"],
                "properties": {
                    "adrs": count,
                    "errors": count,
                    "warnings": count,
                    "infos": count,
                    "byRule": { "type": "object", "additionalProperties": count },
                    "byStatus": {
                        "type": "object",
                        "description": "By known status; `unknown` for any other value, `none` for records without one.",
                        "additionalProperties": count,
                    },
                    "gaps": { "type": "array", "items": { "type": "integer", "minimum": 0 } },
                    "duplicates": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["number", "paths"],
                            "properties": {
                                "number": { "type": "integer", "minimum": 0 },
                                "paths": { "type": "array", "items": { "type": "string" } },
                            },
                        },
                    },
                    "clean": count,
                },
            },
        },
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    use serde_json::Value;

    use super::*;
    use crate::adrs::parse::parse_adr;
    use crate::adrs::parse::tests::{fixture_dir, fixture_docs, fixture_expected};

    const NYGARD: &str = "# 1. Title\n\nDate: 2020-01-01\n\n## Status\n\nAccepted\n\n## Context\n\nx\n\n## Decision\n\nx\n\n## Consequences\n\nx\n";

    fn no_files(_: &str) -> bool {
        false
    }

    fn rules_of(findings: &[Finding]) -> Vec<(&str, Option<u32>)> {
        findings.iter().map(|f| (f.rule.as_str(), f.line)).collect()
    }

    fn check(path: &str, text: &str) -> Vec<Finding> {
        file_findings(&parse_adr(path, text), &no_files)
    }

    /// The fixture's file findings, with links checked against the real directory.
    fn fixture_file_findings(docs: &[AdrDoc]) -> BTreeMap<String, Vec<Finding>> {
        let root = fixture_dir();
        docs.iter()
            .map(|doc| {
                let dir = Path::new(&doc.path).parent().unwrap_or(Path::new(""));
                let exists = |target: &str| root.join(dir).join(target).exists();
                (doc.path.clone(), file_findings(doc, &exists))
            })
            .collect()
    }

    #[test]
    fn only_a_titled_record_with_a_status_or_a_decision_is_a_decision_record() {
        use super::super::parse::parse_adr;
        for (text, expected) in [
            ("---\nstatus: accepted\n---\n# Settings\n\n## Context and Problem Statement\n\nx\n", true),
            ("# 2. Logs\n\n## Status\n\nAccepted\n\n## Context\n\nx\n", true),
            ("# 3. Caching\n\n## Decision\n\nWe cache.\n", true),
            ("# Caching\n\nStatus: Superseded by ADR-4\n", true),
            ("# Redis\n\n## Installation\n\n```sh\nmake install\n```\n", false),
            ("# Redis\n\n**Status**: beta\n\n## Install\n\n```sh\nmake install\n```\n", false),
            ("---\ntitle: Install\nweight: 2\n---\n\n## Setup\n\n```sh\nnpm i\n```\n", false),
            ("## Decision\n\nNo title.\n", false),
        ] {
            assert_eq!(is_decision_record(&parse_adr("docs/x.md", text)), expected, "{text}");
        }
    }

    #[test]
    fn the_fixture_set_yields_exactly_the_planted_findings() {
        let expected = fixture_expected();
        let docs = fixture_docs();
        let files = fixture_file_findings(&docs);
        let cross = cross_check(&docs);
        for doc in &docs {
            let found: BTreeSet<(String, Option<u64>)> = files[&doc.path]
                .iter()
                .chain(cross.findings.get(&doc.path).into_iter().flatten())
                .map(|f| (f.rule.clone(), f.line.map(u64::from)))
                .collect();
            let want: BTreeSet<(String, Option<u64>)> = expected["files"][&doc.path]["findings"]
                .as_array()
                .expect("each record lists its findings")
                .iter()
                .map(|f| {
                    let rule = f["rule"].as_str().expect("a finding names its rule").to_owned();
                    (rule, f["line"].as_u64())
                })
                .collect();
            assert_eq!(found, want, "{}", doc.path);
        }
        let gaps: Vec<u64> = cross.summary.gaps.iter().map(|&n| u64::from(n)).collect();
        let want_gaps: Vec<u64> = expected["summary"]["gaps"]
            .as_array()
            .expect("gaps is a list")
            .iter()
            .filter_map(Value::as_u64)
            .collect();
        assert_eq!(gaps, want_gaps);
        assert_eq!(
            serde_json::to_value(&cross.summary.duplicates).expect("duplicates serialise"),
            expected["summary"]["duplicates"]
        );

        let report = report(&docs, &files, &cross);
        for key in ["adrs", "errors", "warnings", "infos", "clean", "gaps", "duplicates"] {
            assert_eq!(report["summary"][key], expected["summary"][key], "summary {key}");
        }
    }

    #[test]
    fn the_fixture_report_follows_the_schema_and_reads_well() {
        let docs = fixture_docs();
        let files = fixture_file_findings(&docs);
        let cross = cross_check(&docs);
        let report = report(&docs, &files, &cross);
        let validator = jsonschema::validator_for(&output_schema()).expect("the schema compiles");
        let errors: Vec<String> = validator.iter_errors(&report).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{errors:?}");

        let order: Vec<&str> = report["adrs"]
            .as_array()
            .expect("adrs is a list")
            .iter()
            .filter_map(|a| a["path"].as_str())
            .collect();
        assert_eq!(order.first(), Some(&"0001-record-architecture-decisions.md"));
        assert_eq!(order[3..5], ["0004-name-queues-after-tools.md", "0004-use-redis-streams-for-queues.md"]);
        assert_eq!(order.last(), Some(&"shard-streams-by-queue.md"));
        assert_eq!(report["summary"]["byRule"]["duplicate-number"], 2);
        assert_eq!(report["summary"]["byStatus"]["accepted"], 11);
        assert_eq!(report["summary"]["byStatus"]["unknown"], 1);
        assert_eq!(report["summary"]["byStatus"]["none"], 1);

        let text = summary_text(&report);
        assert!(
            text.starts_with("16 ADRs checked: 8 errors, 6 warnings, 0 infos; 8 without findings.\n"),
            "{text}"
        );
        assert!(text.contains("Missing numbers: 7.\n"), "{text}");
        assert!(
            text.contains(
                "Number 4 is used by 0004-name-queues-after-tools.md, 0004-use-redis-streams-for-queues.md.\n"
            ),
            "{text}"
        );
        assert!(text.contains("0006-version-the-api-in-the-path.md:5 [error] bad-date: The date \"2023-02-30\" is not a calendar date: February 2023 has 28 days.\n"), "{text}");
        assert!(text.contains("shard-streams-by-queue.md [error] missing-title: "), "{text}");
        assert!(!text.contains("0001-record"), "clean records are not listed: {text}");
    }

    #[test]
    fn a_complete_nygard_record_is_clean() {
        assert_eq!(check("0001-title.md", NYGARD), vec![]);
    }

    #[test]
    fn missing_title_and_number() {
        let findings = check("title.md", &NYGARD.replace("# 1. Title\n", ""));
        assert_eq!(rules_of(&findings), vec![("missing-number", None), ("missing-title", None)]);
        assert!(findings[0].message.contains("\"title.md\""), "{}", findings[0].message);
    }

    #[test]
    fn missing_sections_per_format() {
        let findings = check("0001-t.md", &NYGARD.replace("## Decision\n\nx\n\n", ""));
        assert_eq!(rules_of(&findings), vec![("missing-section", None)]);
        assert!(findings[0].message.contains("\"Decision\""), "{}", findings[0].message);

        let madr = "---\nstatus: accepted\ndate: 2020-01-01\n---\n# T\n\n## 1. Context and Problem Statement\n\nx\n\n## Decision Outcome\n\nx\n";
        let findings = check("0001-t.md", madr);
        assert_eq!(rules_of(&findings), vec![("missing-section", None)]);
        assert!(findings[0].message.contains("\"Considered Options\""), "{}", findings[0].message);
        assert!(findings[0].message.contains("MADR"), "{}", findings[0].message);

        let neither = "# 1. T\n\nStatus: accepted\nDate: 2020-01-01\n\n## Background\n\nx\n";
        assert_eq!(rules_of(&check("0001-t.md", neither)), vec![("missing-section", None)]);
    }

    #[test]
    fn a_status_field_stands_in_for_the_status_section() {
        let text =
            NYGARD.replace("## Status\n\nAccepted\n\n", "").replace("Date:", "Status: Accepted\nDate:");
        assert_eq!(check("0001-t.md", &text), vec![]);
        let findings = check("0001-t.md", &NYGARD.replace("## Status\n\nAccepted\n\n", ""));
        assert_eq!(rules_of(&findings), vec![("missing-status", None)]);
    }

    #[test]
    fn statuses() {
        for known in [
            "Accepted",
            "accepted.",
            "PROPOSED",
            "Draft",
            "Rejected",
            "Deprecated",
            "Superseded by [3. Foo](0003-foo.md)",
            "superseded",
            "**Proposed** (2024-01-05)",
        ] {
            assert!(status_kind(known).is_some(), "{known}");
        }
        for unknown in ["Approved-ish", "{proposed | accepted}", "Accepted-ish", "Done", ""] {
            assert_eq!(status_kind(unknown), None, "{unknown}");
        }
        let findings = check("0001-t.md", &NYGARD.replace("Accepted", "Approved-ish"));
        assert_eq!(rules_of(&findings), vec![("unknown-status", Some(7))]);
        assert_eq!(
            findings[0].message,
            "The status \"Approved-ish\" is not one of proposed, draft, accepted, rejected, deprecated, superseded."
        );
        assert_eq!(findings[0].severity, Severity::Warning);
    }

    #[test]
    fn dates() {
        assert_eq!(check_date("2020-02-29"), Ok(()));
        for (raw, message) in [
            ("2023-02-30", "The date \"2023-02-30\" is not a calendar date: February 2023 has 28 days."),
            ("2021-04-31", "The date \"2021-04-31\" is not a calendar date: April 2021 has 30 days."),
            ("2023-13-01", "The date \"2023-13-01\" is not a calendar date: there is no month 13."),
            ("2023-01-00", "The date \"2023-01-00\" is not a calendar date: there is no day 0."),
            ("12/03/2018", "The date \"12/03/2018\" is not written YYYY-MM-DD."),
            ("2018-3-12", "The date \"2018-3-12\" is not written YYYY-MM-DD."),
            (
                "2023-01-05T10:00:00Z",
                "The date \"2023-01-05T10:00:00Z\" has more than a day in it; write it as YYYY-MM-DD.",
            ),
        ] {
            assert_eq!(check_date(raw), Err(message.to_owned()), "{raw}");
        }
        let findings = check("0001-t.md", &NYGARD.replace("2020-01-01", "2023-02-30"));
        assert_eq!(rules_of(&findings), vec![("bad-date", Some(3))]);
        assert_eq!(findings[0].severity, Severity::Error);
        let findings = check("0001-t.md", &NYGARD.replace("Date: 2020-01-01\n", ""));
        assert_eq!(rules_of(&findings), vec![("missing-date", None)]);
    }

    #[test]
    fn empty_sections_are_warnings_at_their_heading() {
        let findings =
            check("0001-t.md", &NYGARD.replace("## Decision\n\nx\n", "## Decision\n\n<!-- later -->\n"));
        assert_eq!(rules_of(&findings), vec![("empty-section", Some(13))]);
        assert_eq!(findings[0].message, "The section \"Decision\" is empty.");
    }

    #[test]
    fn broken_links_are_relative_links_the_caller_cannot_find() {
        let text = NYGARD.replace(
            "## Context\n\nx\n",
            "## Context\n\n[a](there.md#part) [b](missing%20file.md) [c](https://x.org/no) [d](#context) [e](/rooted.md) ![f](img/none.png)\n",
        );
        let asked = std::cell::RefCell::new(Vec::new());
        let exists = |path: &str| {
            asked.borrow_mut().push(path.to_owned());
            path == "there.md"
        };
        let findings = file_findings(&parse_adr("0001-t.md", &text), &exists);
        assert_eq!(rules_of(&findings), vec![("broken-link", Some(11)), ("broken-link", Some(11))]);
        assert_eq!(*asked.borrow(), ["there.md", "missing file.md", "img/none.png"]);
        assert_eq!(
            findings[0].message,
            "The link \"b\" points to \"missing%20file.md\", which does not exist."
        );
    }

    fn docs(records: &[(&str, &str)]) -> Vec<AdrDoc> {
        records.iter().map(|(path, text)| parse_adr(path, text)).collect()
    }

    fn nygard(number: u32, status: &str, body: &str) -> String {
        format!(
            "# {number}. T\n\nDate: 2020-01-01\n\n## Status\n\n{status}\n\n## Context\n\n{body}\n\n## Decision\n\nx\n\n## Consequences\n\nx\n"
        )
    }

    #[test]
    fn duplicate_numbers_are_reported_on_every_holder() {
        let set = docs(&[
            ("adr/0001-a.md", &nygard(1, "Accepted", "x")),
            ("adr/0001-b.md", &nygard(1, "Accepted", "x")),
            ("adr/0001-c.md", &nygard(1, "Accepted", "x")),
            ("adr/0002-d.md", &nygard(2, "Accepted", "x")),
        ]);
        let cross = cross_check(&set);
        assert_eq!(cross.findings.len(), 3);
        let on_b = &cross.findings["adr/0001-b.md"];
        assert_eq!(rules_of(on_b), vec![("duplicate-number", None)]);
        assert_eq!(on_b[0].message, "The number 1 is also used by adr/0001-a.md, adr/0001-c.md.");
        assert_eq!(
            cross.summary.duplicates,
            vec![Duplicate {
                number: 1,
                paths: vec!["adr/0001-a.md".into(), "adr/0001-b.md".into(), "adr/0001-c.md".into()]
            }]
        );
        // A number from the title is reported at the title.
        let set = docs(&[("a.md", "# ADR-3: A\n"), ("b.md", "# ADR-3: B\n")]);
        assert_eq!(rules_of(&cross_check(&set).findings["a.md"]), vec![("duplicate-number", Some(1))]);
    }

    #[test]
    fn one_sided_supersessions_are_reported_on_both_sides() {
        let set = docs(&[
            ("0001-a.md", &nygard(1, "Accepted", "x")),
            ("0002-b.md", &nygard(2, "Accepted\n\nSupersedes [1. A](0001-a.md)", "x")),
        ]);
        let cross = cross_check(&set);
        assert_eq!(rules_of(&cross.findings["0002-b.md"]), vec![("supersede-link", Some(9))]);
        assert_eq!(
            cross.findings["0002-b.md"][0].message,
            "This record says it supersedes ADR 1 (0001-a.md), but that record does not say it is superseded by ADR 2."
        );
        assert_eq!(rules_of(&cross.findings["0001-a.md"]), vec![("supersede-link", Some(7))]);
        assert_eq!(
            cross.findings["0001-a.md"][0].message,
            "ADR 2 (0002-b.md) says it supersedes this record, but this record does not say it is superseded by ADR 2."
        );

        let set = docs(&[
            ("0001-a.md", &nygard(1, "Superseded by ADR-2", "x")),
            ("0002-b.md", &nygard(2, "Accepted", "x")),
        ]);
        let cross = cross_check(&set);
        assert_eq!(
            cross.findings["0001-a.md"][0].message,
            "This record says it is superseded by ADR 2 (0002-b.md), but that record does not say it supersedes ADR 1."
        );
        assert_eq!(
            cross.findings["0002-b.md"][0].message,
            "ADR 1 (0001-a.md) says it is superseded by this record, but this record does not say it supersedes ADR 1."
        );
    }

    #[test]
    fn matching_supersessions_are_clean_by_number_or_by_link() {
        let set = docs(&[
            ("adr/0001-a.md", &nygard(1, "Superseded by [the new one](new/b.md)", "x")),
            (
                "adr/new/b.md",
                "# ADR-2: B\n\n**Status:** Accepted\n\nSupersedes ADR-0001 and [A](../0001-a.md)\n",
            ),
        ]);
        let cross = cross_check(&set);
        assert!(
            cross.findings.values().flatten().all(|f| f.rule != "supersede-link"),
            "{:?}",
            cross.findings
        );
    }

    #[test]
    fn a_shared_number_is_answered_by_any_of_its_records() {
        let set = docs(&[
            ("0001-a.md", &nygard(1, "Superseded by ADR-2", "x")),
            ("0001-b.md", &nygard(1, "Accepted", "x")),
            ("0002-c.md", &nygard(2, "Accepted\n\nSupersedes ADR-1", "x")),
        ]);
        let cross = cross_check(&set);
        assert!(
            cross.findings.values().flatten().all(|f| f.rule == "duplicate-number"),
            "{:?}",
            cross.findings
        );
    }

    #[test]
    fn references_to_numbers_no_record_has() {
        let set = docs(&[
            (
                "0001-a.md",
                &nygard(1, "Superseded by ADR-9", "Unlike ADR-0042, and like ADR-1 and [ADR 2](0002-b.md)."),
            ),
            ("0002-b.md", &nygard(2, "Accepted", "x")),
        ]);
        let cross = cross_check(&set);
        let on_a = &cross.findings["0001-a.md"];
        assert_eq!(rules_of(on_a), vec![("unknown-adr", Some(7)), ("unknown-adr", Some(11))]);
        assert_eq!(
            on_a[0].message,
            "This record says it is superseded by ADR 9, but no record has that number."
        );
        assert_eq!(on_a[1].message, "This record refers to ADR 42, but no record has that number.");
        assert_eq!(on_a[1].severity, Severity::Warning);
    }

    #[test]
    fn gaps_go_to_the_summary_only() {
        let set = docs(&[
            ("0002-a.md", &nygard(2, "Accepted", "x")),
            ("0005-b.md", &nygard(5, "Accepted", "x")),
            ("c.md", "# C\n"),
        ]);
        let cross = cross_check(&set);
        assert_eq!(cross.summary.gaps, vec![3, 4]);
        assert!(cross.findings.is_empty());
        let far = docs(&[("0001-a.md", "# A\n"), ("4000000000-b.md", "# B\n")]);
        assert_eq!(cross_check(&far).summary.gaps.len(), MAX_GAPS);
        assert_eq!(cross_check(&[]), CrossCheck::default());
    }

    #[test]
    fn findings_serialise_in_camel_case_with_lowercase_severities() {
        let finding = Finding::new("bad-date", Severity::Error, "m".into(), Some(3));
        let json = serde_json::to_value(&finding).expect("a finding serialises");
        assert_eq!(
            json,
            serde_json::json!({"rule": "bad-date", "severity": "error", "message": "m", "line": 3})
        );
        assert_eq!(finding.to_json(), json);
        let back: Finding = serde_json::from_value(json).expect("and deserialises");
        assert_eq!(back, finding);
        let cross = cross_check(&docs(&[("0001-a.md", "# A\n"), ("0003-b.md", "# B\n")]));
        let json = serde_json::to_value(&cross).expect("a cross-check serialises");
        assert_eq!(json["summary"]["gaps"], serde_json::json!([2]));
    }

    #[test]
    fn an_empty_set_reports_nothing() {
        let report = report(&[], &BTreeMap::new(), &cross_check(&[]));
        assert_eq!(report["summary"]["adrs"], 0);
        assert_eq!(report["adrs"], serde_json::json!([]));
        assert_eq!(
            summary_text(&report),
            "0 ADRs checked: 0 errors, 0 warnings, 0 infos; 0 without findings.\n"
        );
    }
}
