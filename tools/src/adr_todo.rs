//! `adr_todo {"root", "adrPath"}`: the TODO list the accepted ADRs under a folder imply, as a
//! Markdown checklist. One item per action: each list item of a section about putting the
//! decision into effect or confirming it, each command of such a section, and for a record with
//! neither, the decision itself. Every item cites its record, line and section. An item whose
//! named things (inline code: paths, identifiers) the root's code already holds is checked, with
//! the `path:line` where each was found, in code (Markdown and text files are no evidence). For
//! a confirming command that runs a named test (`cargo test`, `pytest`, `go test`, `npm test`),
//! the named thing is that test.

use std::collections::BTreeMap;
use std::path::PathBuf;

use conveyor_shared::model::ToolOutcome;
use serde::Serialize;
use serde_json::{Value, json};

use crate::bootstrap::requirements::{Purpose, Requirements, Source};
use crate::bootstrap::{DEFAULT_ADR_PATH, read_requirements};
use crate::research::index::read_text;
use crate::roots::{Root, Roots, root_schema, with_root_argument};
use conveyor_worker::tool::{FnTool, ToolContext, ToolRegistry};

pub const TOOL: &str = "adr_todo";
/// Files of the root searched for what items name, at most.
const MAX_FILES: usize = 20_000;
/// Names searched for per item, at most.
const TERMS_PER_ITEM: usize = 5;

/// One thing to do.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TodoItem {
    pub text: String,
    #[serde(flatten)]
    pub source: Source,
    pub done: bool,
    /// Where the code holds what the item names, as `path:line`.
    pub evidence: Vec<String>,
    #[serde(skip)]
    terms: Vec<String>,
}

impl TodoItem {
    /// An item citing `source`.
    pub fn new(text: String, source: Source) -> Self {
        let terms = terms_of(&text);
        TodoItem { text, source, done: false, evidence: vec![], terms }
    }

    /// The names in backticks this item is checked against.
    pub fn terms(&self) -> &[String] {
        &self.terms
    }

    /// Marks the item done, with where the code shows it.
    pub fn mark(&mut self, evidence: Vec<String>) {
        self.done = true;
        self.evidence = evidence;
    }

    /// The checklist line.
    pub fn line(&self) -> String {
        let at = match self.source.line {
            0 => self.source.adr_path.clone(),
            line => format!("{}:{line}", self.source.adr_path),
        };
        let cite = format!("{} ({at}, section \"{}\")", self.source.adr, self.source.section);
        let done =
            if self.done { format!(" Done: found at {}.", self.evidence.join(", ")) } else { String::new() };
        format!(
            "- [{}] {} ({cite}).{done}",
            if self.done { "x" } else { " " },
            self.text.trim_end_matches('.')
        )
    }
}

/// The names in backticks of `text` (paths as written, identifiers by their last segment), and
/// the paths with a folder it names bare (`src/utils/task-manager.ts`).
fn terms_of(text: &str) -> Vec<String> {
    let bare = text
        .split('`')
        .step_by(2)
        .flat_map(str::split_whitespace)
        .map(|w| {
            w.trim_matches(|c: char| matches!(c, '(' | ')' | ',' | ';' | ':' | '"' | '\''))
                .trim_end_matches('.')
        })
        .filter(|w| w.contains('/'))
        .filter_map(crate::bootstrap::requirements::file_path);
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|span| {
            let span = span.trim();
            if crate::bootstrap::requirements::file_path(span).is_some() {
                return Some(span.trim_start_matches("./").to_owned());
            }
            if span.contains(char::is_whitespace) {
                return None;
            }
            let last = span.rsplit(['.', ':']).find(|s| !s.is_empty()).unwrap_or(span);
            let last = last.trim_end_matches("()");
            (last.chars().count() >= 4 && last.chars().all(|c| c.is_alphanumeric() || c == '_'))
                .then(|| last.to_owned())
        })
        .chain(bare)
        .take(TERMS_PER_ITEM)
        .collect()
}

/// The test a `cargo test`, `pytest -k`, `go test -run` or `npm test --` command names, by its
/// last path segment (`store::a_stale_attempt` → `a_stale_attempt`).
fn test_filter(command: &str) -> Option<String> {
    let words: Vec<&str> = command.split_whitespace().collect();
    let runs_tests = words
        .windows(2)
        .any(|w| matches!((w[0], w[1]), ("cargo", "test") | ("go", "test") | ("npm", "test")))
        || words.first().is_some_and(|w| *w == "pytest");
    let last = words.last().filter(|w| runs_tests && !w.starts_with('-') && words.len() > 2)?;
    let name = last.rsplit("::").find(|s| !s.is_empty())?.trim_matches(['"', '\'']);
    (name.chars().count() >= 4 && name.chars().all(|c| c.is_alphanumeric() || c == '_'))
        .then(|| name.to_owned())
}

/// The items the accepted records of `requirements` imply, in record order.
pub fn items(requirements: &Requirements) -> Vec<TodoItem> {
    let mut items = Vec::new();
    for adr in requirements
        .adrs
        .iter()
        .filter(|a| a.status.as_deref().is_some_and(|s| s.to_ascii_lowercase().starts_with("accept")))
    {
        let before = items.len();
        for action in requirements.actions.iter().filter(|a| a.source.adr_path == adr.path) {
            items.push(TodoItem::new(action.text.clone(), action.source.clone()));
        }
        for (purpose, command) in requirements.commands().filter(|(_, c)| c.source.adr_path == adr.path) {
            let first = command.command.lines().next().unwrap_or_default();
            let text = match purpose {
                Purpose::Step => format!("Run `{first}`"),
                Purpose::Check => format!("Confirm with `{first}`"),
            };
            let mut item = TodoItem::new(text, command.source.clone());
            // A confirming test that exists in the code is the decision's confirmation in place.
            item.terms = test_filter(first).into_iter().collect();
            items.push(item);
        }
        if items.len() == before {
            // No action is written down: the decision itself is the item, with the names its
            // decision section uses.
            let spans: Vec<&crate::bootstrap::requirements::Span> = requirements
                .spans
                .iter()
                .filter(|s| {
                    s.source.adr_path == adr.path
                        && s.source.section.to_lowercase().starts_with("decision")
                        && !s.source.section.to_lowercase().contains("driver")
                })
                .collect();
            let Some(first) = spans.first() else { continue };
            let named: Vec<String> =
                spans.iter().take(TERMS_PER_ITEM).map(|s| format!("`{}`", s.text)).collect();
            let title = adr.title.clone().unwrap_or_else(|| adr.path.clone());
            let text = format!("Put \"{title}\" into effect: {}", named.join(", "));
            let source = Source { line: first.source.line, ..first.source.clone() };
            items.push(TodoItem::new(text, source));
        }
    }
    items
}

/// Checks off the items whose every named thing the root's code holds (files outside the ADR
/// folder; paths by existence, identifiers by their first line).
pub fn mark_done(root: &Root, adr_path: &str, items: &mut [TodoItem]) {
    let mut wanted: BTreeMap<String, Option<String>> = BTreeMap::new();
    for term in items.iter().flat_map(|i| i.terms.iter()) {
        // Only what a walk of the root lists is evidence: a hidden or ignored file is neither
        // read nor said to exist.
        let found = root.resolve(term).is_ok_and(|path| path.is_file());
        wanted.insert(term.clone(), found.then(|| format!("{term}:1")));
    }
    let adr_folder = root.path.join(adr_path);
    // Code, not prose: what a document says is no evidence that the code does it.
    let prose = |f: &PathBuf| {
        f.extension().is_some_and(|e| matches!(e.to_str(), Some("md" | "markdown" | "txt" | "rst" | "adoc")))
    };
    let files: Vec<PathBuf> =
        root.files(&root.path).filter(|f| !f.starts_with(&adr_folder) && !prose(f)).take(MAX_FILES).collect();
    for file in files {
        if wanted.values().all(Option::is_some) {
            break;
        }
        let Some(text) = read_text(&file) else { continue };
        let relative = root.relative(&file);
        for (term, found) in wanted.iter_mut().filter(|(_, f)| f.is_none()) {
            if let Some(line) = text.lines().position(|l| contains_word(l, term)) {
                *found = Some(format!("{relative}:{}", line + 1));
            }
        }
    }
    for item in items {
        let evidence: Vec<String> =
            item.terms.iter().filter_map(|t| wanted.get(t).cloned().flatten()).collect();
        item.done = !item.terms.is_empty() && evidence.len() == item.terms.len();
        if item.done {
            item.evidence = evidence;
        }
    }
}

fn contains_word(line: &str, word: &str) -> bool {
    line.match_indices(word).any(|(at, _)| {
        let before = line[..at].chars().next_back();
        let after = line[at + word.len()..].chars().next();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
            && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

/// The checklist, under a heading.
pub fn checklist(heading: &str, items: &[TodoItem]) -> String {
    let mut out = format!("# {heading}\n\n");
    for item in items {
        out.push_str(&item.line());
        out.push('\n');
    }
    if items.is_empty() {
        out.push_str("Nothing to do: no accepted record implies an action.\n");
    }
    out
}

pub fn register(registry: &mut ToolRegistry, roots: &Roots) {
    let known = roots.clone();
    registry.register(
        FnTool::new(with_root_argument(definition(roots)), move |ctx| {
            let roots = known.clone();
            async move { todo(&roots, &ctx).await }
        })
        .on_queue(crate::adrs::tool::QUEUE),
    );
}

fn definition(roots: &Roots) -> Value {
    json!({
        "name": TOOL,
        "title": "TODOs from accepted ADRs",
        "description": "Lists what the accepted ADRs under a folder of a root imply as a Markdown checklist: each list item and command of their implementation, deployment, setup and Confirmation sections, or the decision itself when they write down no action, each citing its ADR, line and section. Items whose named files and identifiers the code already holds are checked, with path:line evidence.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "root": root_schema(roots),
                "adrPath": {"type": "string", "default": DEFAULT_ADR_PATH, "description": "The folder of ADRs, relative to the root"}
            },
            "required": ["root"],
            "additionalProperties": false
        },
        "outputSchema": {
            "type": "object",
            "properties": {
                "markdown": {"type": "string"},
                "uri": {"type": "string"},
                "items": {"type": "array", "items": {"type": "object", "properties": {
                    "text": {"type": "string"}, "adr": {"type": "string"}, "adrPath": {"type": "string"}, "section": {"type": "string"},
                    "line": {"type": "integer"}, "done": {"type": "boolean"}, "evidence": {"type": "array", "items": {"type": "string"}}
                }, "required": ["text", "adrPath", "section", "done", "evidence"]}},
                "done": {"type": "integer"},
                "open": {"type": "integer"}
            },
            "required": ["markdown", "items", "done", "open"]
        },
        "execution": {"taskSupport": "optional"}
    })
}

async fn todo(roots: &Roots, ctx: &ToolContext) -> ToolOutcome {
    let root = match roots.of(ctx) {
        Ok(root) => root.clone(),
        Err(e) => return e.into_outcome(),
    };
    let adr_path = ctx.str_arg("adrPath").unwrap_or(DEFAULT_ADR_PATH).to_owned();
    let folder = adr_path.clone();
    let made = tokio::task::spawn_blocking(move || {
        let requirements = read_requirements(&root, &folder)?;
        let mut items = items(&requirements);
        mark_done(&root, &folder, &mut items);
        Ok::<_, ToolOutcome>((root.name.clone(), items))
    })
    .await;
    let (root_name, items) = match made {
        Ok(Ok(made)) => made,
        Ok(Err(outcome)) => return outcome,
        Err(e) => return crate::invalid(format!("{TOOL}: reading the ADRs failed: {e}")),
    };
    let markdown =
        checklist(&format!("TODO from the accepted ADRs under {adr_path} of root `{root_name}`"), &items);
    let uri = format!("conveyor://tasks/{}/TODO.md", ctx.task_id);
    let done = items.iter().filter(|i| i.done).count();
    ToolOutcome::Result(json!({
        "content": [
            {"type": "text", "text": markdown},
            {"type": "resource", "resource": {"uri": uri, "mimeType": "text/markdown", "text": markdown}}
        ],
        "structuredContent": {"markdown": markdown, "uri": uri, "items": items, "done": done, "open": items.len() - done},
        "isError": false
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_records_give_items_and_code_that_holds_their_names_checks_them_off() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::create_dir_all(dir.path().join("src")).expect("mkdir");
        std::fs::write(dir.path().join("src/retry.rs"), "// x\npub fn backoff_delay() {}\n").expect("write");
        let mut r = Requirements::default();
        r.add("docs/adr/0001-a.md", "---\nstatus: accepted\n---\n# Retries\n\n## Decision Outcome\n\nUse backoff.\n\n### Implementation Plan\n\n1. Add `backoff_delay` in `src/retry.rs`\n2. Add `jitter_ratio` to the settings\n\n### Confirmation\n\n```sh\ncargo test retry\n```\n");
        r.add("docs/adr/0002-b.md", "---\nstatus: accepted\n---\n# Logs\n\n## Decision Outcome\n\nChosen option: write `src/retry.rs` logs.\n");
        r.add(
            "docs/adr/0003-c.md",
            "---\nstatus: proposed\n---\n# Later\n\n## Implementation\n\n* Something\n",
        );
        let mut found = items(&r);
        let roots = Roots::parse(&[format!("repo={}", dir.path().display())]).expect("roots");
        mark_done(roots.get("repo").expect("root"), "docs/adr", &mut found);
        let lines: Vec<String> = found.iter().map(TodoItem::line).collect();
        assert_eq!(lines.len(), 4, "{lines:#?}");
        assert_eq!(
            lines[0],
            "- [x] Add `backoff_delay` in `src/retry.rs` (ADR 1: Retries (docs/adr/0001-a.md:12, section \"Implementation Plan\")). Done: found at src/retry.rs:2, src/retry.rs:1."
        );
        assert!(lines[1].starts_with("- [ ] Add `jitter_ratio` to the settings"), "{}", lines[1]);
        assert!(lines[2].starts_with("- [ ] Confirm with `cargo test retry` (ADR 1: Retries (docs/adr/0001-a.md:18, section \"Confirmation\"))"), "{}", lines[2]);
        assert!(lines[3].starts_with("- [x] Put \"Logs\" into effect: `src/retry.rs`"), "{}", lines[3]);
    }

    #[test]
    fn a_hidden_or_ignored_file_is_no_evidence_and_is_not_said_to_exist() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(dir.path().join(".env"), "SECRET=1\n").expect("write");
        std::fs::write(dir.path().join(".gitignore"), "local.toml\n").expect("write");
        std::fs::write(dir.path().join("local.toml"), "x = 1\n").expect("write");
        let mut r = Requirements::default();
        r.add("docs/adr/0001-a.md", "---\nstatus: accepted\n---\n# Config\n\n## Decision Outcome\n\nChosen option: read `.env` and `local.toml`.\n");
        let mut found = items(&r);
        let roots = Roots::parse(&[format!("repo={}", dir.path().display())]).expect("roots");
        mark_done(roots.get("repo").expect("root"), "docs/adr", &mut found);
        let lines: Vec<String> = found.iter().map(TodoItem::line).collect();
        assert_eq!(lines.len(), 1, "{lines:#?}");
        assert!(lines[0].starts_with("- [ ] "), "{}", lines[0]);
        assert!(!lines[0].contains("found at"), "{}", lines[0]);
    }
}
