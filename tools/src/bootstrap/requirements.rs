//! What a root's ADRs require of a deployment, read from their Markdown: the commands that set
//! it up (steps), the commands that confirm it (checks), the files they name, and file contents
//! they show.
//!
//! - **Steps** are the commands in shell code blocks of a section about putting the decision into
//!   effect: a heading with implementation, deployment, bootstrap, setup, installation, rollout,
//!   migration, build, getting started or prerequisites in it.
//! - **Checks** are the commands in shell code blocks of a section about confirming it: MADR's
//!   Confirmation, and validation, verification, testing, acceptance, health check or compliance.
//! - A shell code block is one whose info string is empty, `sh`, `bash`, `shell`, `zsh` or
//!   `console` (where only `$ ` lines are commands). Each line is a command, `$ ` prompts and
//!   comments dropped, unless the block has a heredoc, a continued line or a compound command:
//!   then the whole block is one command.
//! - **Files**: every inline code span or code block title that looks like a relative path to a
//!   file (`config/app.toml`, `.env`), and every such path a command names.
//! - **Shown contents**: a non-shell code block right under a paragraph whose last inline path
//!   names a file (or whose info string says `title=path`) shows that file's contents.
//!
//! Records whose status is rejected, deprecated or superseded require nothing.

use std::ops::Range;

use pulldown_cmark::{CodeBlockKind, Event, Options, Parser, Tag, TagEnd};
use serde::{Deserialize, Serialize};

use crate::adrs::parse::{AdrDoc, parse_adr, section_key};
use crate::adrs::rules::is_decision_record;

/// Words in a heading that make its commands steps.
const STEP_WORDS: &[&str] = &[
    "implement",
    "deploy",
    "bootstrap",
    "setup",
    "set up",
    "install",
    "rollout",
    "roll out",
    "migration",
    "build",
    "getting started",
    "prerequisite",
    "provision",
];
/// Words in a heading that make its commands checks.
const CHECK_WORDS: &[&str] =
    &["confirm", "validat", "verif", "test", "acceptance", "health check", "compliance", "smoke"];
/// Statuses whose records require nothing any more.
const RETIRED: &[&str] = &["rejected", "deprecated", "superseded"];
/// Longest command kept; a longer one is cut and said to be.
const MAX_COMMAND_CHARS: usize = 4_000;

/// Which ADR a requirement comes from, and where in it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Source {
    /// The record's path relative to the root.
    pub adr_path: String,
    /// `ADR 3: Title`, or the file name when the record has no number.
    pub adr: String,
    pub section: String,
    pub line: u32,
}

impl Source {
    /// `ADR 1: Title (docs/adr/0001-x.md:12, section "Confirmation")`: what a script comment says.
    pub fn cite(&self) -> String {
        format!("{} ({}:{}, section \"{}\")", self.adr, self.adr_path, self.line, self.section)
    }
}

/// A command an ADR asks to run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Command {
    pub command: String,
    #[serde(flatten)]
    pub source: Source,
}

/// A file an ADR names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileMention {
    pub path: String,
    /// Named by a step's or check's command, so the run needs it.
    pub in_command: bool,
    #[serde(flatten)]
    pub source: Source,
}

/// A file's contents an ADR shows in a code block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShownFile {
    pub path: String,
    pub contents: String,
    #[serde(flatten)]
    pub source: Source,
}

/// A section about putting a decision into effect that has no command: what a model may draft
/// steps from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProseSection {
    pub text: String,
    #[serde(flatten)]
    pub source: Source,
}

/// A list item of a section about setting up or confirming a decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Action {
    pub text: String,
    pub purpose: Purpose,
    #[serde(flatten)]
    pub source: Source,
}

/// An inline code span and where it stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Span {
    pub text: String,
    #[serde(flatten)]
    pub source: Source,
}

/// One record, as the result lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdrSummary {
    pub path: String,
    pub number: Option<u32>,
    pub title: Option<String>,
    pub status: Option<String>,
    /// False for rejected, deprecated and superseded records, which require nothing.
    pub in_force: bool,
}

/// Everything a set of records requires.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Requirements {
    pub adrs: Vec<AdrSummary>,
    pub steps: Vec<Command>,
    pub checks: Vec<Command>,
    pub files: Vec<FileMention>,
    pub shown: Vec<ShownFile>,
    pub prose: Vec<ProseSection>,
    /// The list items of sections about putting a decision into effect or confirming it: the
    /// actions a record implies, in words.
    #[serde(default)]
    pub actions: Vec<Action>,
    /// Every inline code span of the records in force, where it stands: names a decision uses.
    #[serde(default)]
    pub spans: Vec<Span>,
    /// Environment variables the records name (`DATABASE_URL`, `$PORT`), sorted.
    pub variables: Vec<String>,
}

impl Requirements {
    /// Adds what the record at `path` (relative to the root) with this text requires.
    pub fn add(&mut self, path: &str, text: &str) {
        self.add_parsed(parse_adr(path, text), path, text);
    }

    /// [`Requirements::add`] for a file that may be no decision record at all (a vendored
    /// document under the folder): one that is not ([`is_decision_record`]) adds nothing, and
    /// the answer is `false`.
    pub fn add_if_record(&mut self, path: &str, text: &str) -> bool {
        let doc = parse_adr(path, text);
        if !is_decision_record(&doc) {
            return false;
        }
        self.add_parsed(doc, path, text);
        true
    }

    fn add_parsed(&mut self, doc: AdrDoc, path: &str, text: &str) {
        let in_force = doc.status.as_deref().is_none_or(|status| {
            let status = status.to_ascii_lowercase();
            !RETIRED.iter().any(|retired| status.starts_with(retired))
        });
        self.adrs.push(AdrSummary {
            path: path.to_owned(),
            number: doc.number,
            title: doc.title.clone(),
            status: doc.status.clone(),
            in_force,
        });
        if in_force {
            read_body(&doc, path, text, self);
        }
    }

    /// The steps, then the checks, with what they are.
    pub fn commands(&self) -> impl Iterator<Item = (Purpose, &Command)> {
        self.steps.iter().map(|c| (Purpose::Step, c)).chain(self.checks.iter().map(|c| (Purpose::Check, c)))
    }
}

/// What a section's commands are for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Purpose {
    Step,
    Check,
}

/// What a section heading says its commands are for, if anything.
pub fn purpose_of(heading: &str) -> Option<Purpose> {
    let key = section_key(heading);
    if CHECK_WORDS.iter().any(|w| key.contains(w)) {
        Some(Purpose::Check)
    } else if STEP_WORDS.iter().any(|w| key.contains(w)) {
        Some(Purpose::Step)
    } else {
        None
    }
}

fn adr_label(doc: &AdrDoc, path: &str) -> String {
    let name = path.rsplit('/').next().unwrap_or(path);
    match (doc.number, &doc.title) {
        (Some(n), Some(title)) => format!("ADR {n}: {title}"),
        (Some(n), None) => format!("ADR {n}"),
        (None, Some(title)) => format!("{name}: {title}"),
        (None, None) => name.to_owned(),
    }
}

/// Section names a plain-text record writes alone on a line.
const PLAIN_SECTIONS: &[&str] = &[
    "status",
    "date",
    "context",
    "decision",
    "consequences",
    "implementation plan",
    "implementation",
    "alternatives considered",
    "references",
    "notes",
    "confirmation",
    "validation",
    "deployment",
    "positive",
    "negative",
    "neutral",
    "decision drivers",
    "considered options",
    "decision outcome",
];

/// A plain-text record (no Markdown headings, as some tools export them) as Markdown, line for
/// line: its first line is the title, a known section name alone between blank lines is a
/// section, another short line alone between blank lines is a sub-section, and `•` bullets are
/// list items. A record with Markdown headings is returned as it is.
pub fn plain_text_as_markdown(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    if lines.iter().any(|l| l.starts_with('#')) {
        return text.to_owned();
    }
    let blank = |i: Option<usize>| i.and_then(|i| lines.get(i)).is_none_or(|l| l.trim().is_empty());
    let mut out = String::new();
    // A status or date value alone on its line (`Status` / `Accepted`) is text, never a heading.
    let mut under_heading = false;
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim();
        let alone = !trimmed.is_empty() && blank(i.checked_sub(1)) && blank(Some(i + 1));
        let converted = if trimmed.is_empty() {
            (*line).to_owned()
        } else if i == 0 {
            format!("# {trimmed}")
        } else if alone && PLAIN_SECTIONS.contains(&trimmed.to_lowercase().as_str()) {
            format!("## {trimmed}")
        } else if alone
            && !under_heading
            && trimmed.chars().count() <= 80
            && !trimmed.ends_with(['.', ':', ';', ','])
            && trimmed.starts_with(|c: char| c.is_uppercase())
            && !line.starts_with(char::is_whitespace)
        {
            format!("### {trimmed}")
        } else if let Some(item) = trimmed.strip_prefix("• ") {
            format!("* {item}")
        } else {
            (*line).to_owned()
        };
        if !trimmed.is_empty() {
            under_heading = matches!(trimmed.to_lowercase().as_str(), "status" | "date");
        }
        out.push_str(&converted);
        out.push('\n');
    }
    out
}

/// Offsets of line starts, for 1-based line numbers.
struct Lines(Vec<usize>);

impl Lines {
    fn new(text: &str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Lines(starts)
    }
    fn of(&self, offset: usize) -> u32 {
        self.0.partition_point(|&s| s <= offset) as u32
    }
}

/// The text with its front matter blanked (line numbers kept), so that `---` is not a rule.
fn without_front_matter(text: &str) -> String {
    let Some(rest) = text.strip_prefix("---\n").or_else(|| text.strip_prefix("---\r\n")) else {
        return text.to_owned();
    };
    let Some(end) = rest.find("\n---").map(|i| i + 4) else {
        return text.to_owned();
    };
    let head = 4 + end;
    let blank: String = text[..head].chars().map(|c| if c == '\n' { '\n' } else { ' ' }).collect();
    format!("{blank}{}", &text[head..])
}

/// The state of the walk through one record.
struct Walk<'a> {
    path: &'a str,
    adr: String,
    lines: Lines,
    section: String,
    purpose: Option<Purpose>,
    section_line: u32,
    section_commands: usize,
    section_text: String,
    /// The last path in the paragraph just closed, and its line.
    last_path: Option<(String, u32)>,
    paragraph_path: Option<(String, u32)>,
}

fn read_body(doc: &AdrDoc, path: &str, text: &str, out: &mut Requirements) {
    let body = without_front_matter(text);
    let mut walk = Walk {
        path,
        adr: adr_label(doc, path),
        lines: Lines::new(&body),
        section: String::new(),
        purpose: None,
        section_line: 1,
        section_commands: 0,
        section_text: String::new(),
        last_path: None,
        paragraph_path: None,
    };
    let mut heading: Option<String> = None;
    // The headings above the current one, with what their sections are for.
    let mut enclosing: Vec<(u8, Option<Purpose>)> = Vec::new();
    let mut heading_level = 0u8;
    // List items open, innermost last: their text and line.
    let mut items: Vec<(String, u32)> = Vec::new();
    let mut code: Option<(String, Range<usize>, String)> = None;
    for (event, range) in Parser::new_ext(&body, Options::ENABLE_TABLES).into_offset_iter() {
        match event {
            Event::Start(Tag::Heading { level, .. }) => {
                walk.close_section(out);
                heading = Some(String::new());
                walk.section_line = walk.lines.of(range.start);
                let level = level as u8;
                while enclosing.last().is_some_and(|(l, _)| *l >= level) {
                    enclosing.pop();
                }
                heading_level = level;
            }
            Event::End(TagEnd::Heading(_)) => {
                let title = heading.take().unwrap_or_default();
                // A sub-section of a section about setting up (`### Step 1`) is about it too.
                // The record's title says what it decides, not what its sections are for.
                walk.purpose = if heading_level == 1 {
                    None
                } else {
                    purpose_of(&title).or_else(|| enclosing.last().and_then(|(_, p)| *p))
                };
                enclosing.push((heading_level, walk.purpose));
                walk.section = title.trim().to_owned();
            }
            Event::Start(Tag::CodeBlock(kind)) => {
                let info = match kind {
                    CodeBlockKind::Fenced(info) => info.to_string(),
                    CodeBlockKind::Indented => String::new(),
                };
                code = Some((info, range, String::new()));
            }
            Event::End(TagEnd::CodeBlock) => {
                if let Some((info, range, contents)) = code.take() {
                    walk.code_block(&info, &contents, walk.lines.of(range.start) + 1, out);
                }
                walk.last_path = None;
            }
            Event::Start(Tag::Item) => items.push((String::new(), walk.lines.of(range.start))),
            Event::End(TagEnd::Item) => {
                if let (Some((text, line)), Some(purpose)) = (items.pop(), walk.purpose) {
                    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
                    if !text.is_empty() {
                        out.actions.push(Action { text, purpose, source: walk.source(line) });
                    }
                }
            }
            Event::Start(Tag::Paragraph) => walk.paragraph_path = None,
            Event::End(TagEnd::Paragraph) => walk.last_path = walk.paragraph_path.take(),
            Event::Text(t) => {
                if let Some((_, _, contents)) = code.as_mut() {
                    contents.push_str(&t);
                } else if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                } else {
                    walk.section_text.push_str(&t);
                    walk.section_text.push(' ');
                    if let Some((item, _)) = items.last_mut() {
                        item.push_str(&t);
                    }
                }
            }
            Event::Code(span) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&span);
                    continue;
                }
                walk.section_text.push_str(&format!("`{span}` "));
                if let Some((item, _)) = items.last_mut() {
                    item.push_str(&format!("`{span}`"));
                }
                out.spans
                    .push(Span { text: span.to_string(), source: walk.source(walk.lines.of(range.start)) });
                variables(&span, &mut out.variables);
                if let Some(file) = file_path(&span) {
                    let line = walk.lines.of(range.start);
                    walk.paragraph_path = Some((file.clone(), line));
                    walk.mention(file, line, false, out);
                }
            }
            Event::SoftBreak | Event::HardBreak => {
                walk.section_text.push('\n');
                if let Some((item, _)) = items.last_mut() {
                    item.push(' ');
                }
            }
            _ => {}
        }
    }
    walk.close_section(out);
}

impl Walk<'_> {
    fn source(&self, line: u32) -> Source {
        Source {
            adr_path: self.path.to_owned(),
            adr: self.adr.clone(),
            section: if self.section.is_empty() { "(preamble)".to_owned() } else { self.section.clone() },
            line,
        }
    }

    fn mention(&self, path: String, line: u32, in_command: bool, out: &mut Requirements) {
        let source = self.source(line);
        match out.files.iter_mut().find(|f| f.path == path && f.source.adr_path == source.adr_path) {
            Some(known) => known.in_command |= in_command,
            None => out.files.push(FileMention { path, in_command, source }),
        }
    }

    /// A section ends: a section about setting up that gave no command is kept as prose.
    fn close_section(&mut self, out: &mut Requirements) {
        let text = std::mem::take(&mut self.section_text);
        if self.purpose == Some(Purpose::Step) && self.section_commands == 0 && !text.trim().is_empty() {
            out.prose
                .push(ProseSection { text: text.trim().to_owned(), source: self.source(self.section_line) });
        }
        self.section_commands = 0;
    }

    fn code_block(&mut self, info: &str, contents: &str, first_line: u32, out: &mut Requirements) {
        let mut words = info.split_whitespace();
        let language = words.next().unwrap_or_default().to_ascii_lowercase();
        let titled = words
            .filter_map(|w| w.strip_prefix("title=").or_else(|| w.strip_prefix("file=")))
            .map(|t| t.trim_matches(['"', '\'']).to_owned())
            .find_map(|t| file_path(&t));
        let shell =
            matches!(language.as_str(), "" | "sh" | "bash" | "shell" | "zsh" | "console" | "shell-session");
        if !shell || titled.is_some() {
            let target = titled.map(|t| (t, first_line)).or_else(|| self.last_path.clone());
            if let Some((path, _)) = target {
                out.shown.push(ShownFile {
                    path: path.clone(),
                    contents: contents.to_owned(),
                    source: self.source(first_line.saturating_sub(1)),
                });
                self.mention(path, first_line.saturating_sub(1), false, out);
            }
            return;
        }
        let Some(purpose) = self.purpose else { return };
        for (command, line) in commands(contents, language == "console", first_line) {
            variables(&command, &mut out.variables);
            for word in command.split_whitespace() {
                if let Some(file) = file_path(word.trim_matches(['"', '\'', ';', '(', ')', '<', '>'])) {
                    self.mention(file, line, true, out);
                }
            }
            let command = Command { command, source: self.source(line) };
            match purpose {
                Purpose::Step => out.steps.push(command),
                Purpose::Check => out.checks.push(command),
            }
            self.section_commands += 1;
        }
    }
}

/// The commands of a shell block, each with its line.
fn commands(contents: &str, console: bool, first_line: u32) -> Vec<(String, u32)> {
    let whole_block = contents.contains("<<")
        || contents.lines().any(|l| l.trim_end().ends_with('\\'))
        || contents.lines().any(|l| {
            let first = l.split_whitespace().next().unwrap_or_default();
            matches!(first, "if" | "for" | "while" | "until" | "case" | "function" | "{" | "(")
                || l.trim_end().ends_with("() {")
        });
    let mut found = Vec::new();
    for (i, raw) in contents.lines().enumerate() {
        let line = raw.trim();
        let command = match line.strip_prefix("$ ") {
            Some(command) => command,
            None if console => continue,
            None => line,
        };
        if command.is_empty() || command.starts_with('#') {
            continue;
        }
        found.push((cut(command), first_line + i as u32));
    }
    if whole_block && !console {
        let text: String = contents.trim_end().to_owned();
        return found.first().map(|(_, line)| vec![(cut(&text), *line)]).unwrap_or_default();
    }
    found
}

/// Adds the variables `text` names: `NAME=...`, `$NAME`, `${NAME}`, or an inline `NAME` alone.
fn variables(text: &str, into: &mut Vec<String>) {
    let is_name = |w: &str| {
        w.len() >= 3
            && w.starts_with(|c: char| c.is_ascii_uppercase())
            && w.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            && w.contains('_')
    };
    let mut add = |name: &str| {
        if is_name(name) && !into.iter().any(|v| v == name) {
            into.push(name.to_owned());
            into.sort();
        }
    };
    if is_name(text.trim()) {
        add(text.trim());
    }
    for word in text.split(|c: char| c.is_whitespace() || matches!(c, ';' | '"' | '\'' | '(' | ')')) {
        if let Some((name, _)) = word.split_once('=') {
            add(name.trim_start_matches("export "));
        }
        for piece in word.split('$').skip(1) {
            let piece = piece.trim_start_matches('{');
            let end = piece.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(piece.len());
            add(&piece[..end]);
        }
    }
}

fn cut(command: &str) -> String {
    if command.chars().count() <= MAX_COMMAND_CHARS {
        return command.to_owned();
    }
    let kept: String = command.chars().take(MAX_COMMAND_CHARS).collect();
    format!("{kept} # (cut at {MAX_COMMAND_CHARS} characters)")
}

/// `text` as a relative path to a file, when it looks like one: no spaces or URL, no `..`, and a
/// last component with an extension or a leading dot (`.env`), or a known extensionless name.
pub fn file_path(text: &str) -> Option<String> {
    let text = text.trim().trim_start_matches("./");
    if text.is_empty()
        || text.len() > 200
        || text.contains("://")
        || text.starts_with('/')
        || text.starts_with('-')
        || text.starts_with('~')
        || text.ends_with('/')
        || !text.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'))
        || text.contains("..")
        || text.split('/').any(|c| c.is_empty() || c == "..")
    {
        return None;
    }
    let name = text.rsplit('/').next().unwrap_or(text);
    let known = ["Dockerfile", "Containerfile", "Makefile", "Procfile", "Gemfile", "Justfile"];
    let extension = name.rsplit_once('.');
    let file_like = match extension {
        // `.env`, `.env.local`
        Some(("", ext)) => !ext.is_empty(),
        // `app.toml`; not a version (`1.2`) or a dotted name without a letter in its extension
        Some((_, ext)) => !ext.is_empty() && ext.len() <= 10 && ext.chars().any(|c| c.is_ascii_alphabetic()),
        None => known.contains(&name),
    };
    // A bare `a.b` word with no folder and a long extension is a domain or a module path.
    let dotted_name = text.matches('.').count() > 2 && !text.contains('/');
    (file_like && !dotted_name).then(|| text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG_ADR: &str = "---\nstatus: accepted\ndate: 2026-01-02\n---\n\n# Settings in one file\n\n## Context and Problem Statement\n\nThe service reads `config/app.toml`; start from `config/app.example.toml`.\n\n## Decision Outcome\n\nChosen option: one file.\n\n### Implementation\n\n```bash\n$ ./scripts/build.sh\n# a comment\nmkdir -p logs\n```\n\n### Confirmation\n\n```sh\n./scripts/check.sh config/app.toml\n```\n\nThe file `config/app.toml` looks like this:\n\n```toml\nport = 8080\n```\n\n## Setup on a laptop\n\nAsk a colleague for the credentials, then log in.\n";

    #[test]
    fn steps_checks_files_and_shown_contents_come_with_their_adr_section_and_line() {
        let mut r = Requirements::default();
        r.add("docs/adr/0001-settings.md", CONFIG_ADR);
        let steps: Vec<(&str, u32, &str)> =
            r.steps.iter().map(|c| (c.command.as_str(), c.source.line, c.source.section.as_str())).collect();
        assert_eq!(
            steps,
            [("./scripts/build.sh", 19, "Implementation"), ("mkdir -p logs", 21, "Implementation")]
        );
        assert_eq!(r.checks.len(), 1);
        assert_eq!(r.checks[0].command, "./scripts/check.sh config/app.toml");
        assert_eq!((r.checks[0].source.line, r.checks[0].source.section.as_str()), (27, "Confirmation"));
        assert_eq!(r.checks[0].source.adr, "ADR 1: Settings in one file");
        let config = r.files.iter().find(|f| f.path == "config/app.toml").expect("named");
        assert!(config.in_command, "a check names it");
        assert!(r.files.iter().any(|f| f.path == "config/app.example.toml" && !f.in_command));
        assert!(r.files.iter().any(|f| f.path == "scripts/build.sh" && f.in_command));
        assert_eq!(r.shown.len(), 1);
        assert_eq!(
            (r.shown[0].path.as_str(), r.shown[0].contents.as_str()),
            ("config/app.toml", "port = 8080\n")
        );
        assert_eq!(r.prose.len(), 1, "{:?}", r.prose);
        assert_eq!(r.prose[0].source.section, "Setup on a laptop");
        assert!(r.prose[0].text.contains("credentials"));
    }

    #[test]
    fn retired_records_require_nothing() {
        let mut r = Requirements::default();
        r.add("0002-old.md", &CONFIG_ADR.replace("status: accepted", "status: superseded by ADR-3"));
        assert!(r.steps.is_empty() && r.checks.is_empty() && r.files.is_empty());
        assert!(!r.adrs[0].in_force);
    }

    #[test]
    fn a_block_with_a_heredoc_or_a_loop_is_one_command() {
        let text = "# T\n\n## Deployment\n\n```bash\ncat > .env <<EOF\nPORT=1\nEOF\n```\n\n```\nfor f in a b; do\n  echo $f\ndone\n```\n";
        let mut r = Requirements::default();
        r.add("0003-t.md", text);
        assert_eq!(r.steps.len(), 2, "{:?}", r.steps);
        assert!(r.steps[0].command.starts_with("cat > .env <<EOF") && r.steps[0].command.ends_with("EOF"));
        assert!(r.files.iter().any(|f| f.path == ".env" && f.in_command));
    }

    #[test]
    fn variables_come_from_commands_and_inline_names() {
        let text = "# T\n\n## Deployment\n\nSet `DATABASE_URL` and `API_TOKEN`; `PATH` is left alone.\n\n```sh\nAPP_PORT=8080 ./run.sh --db \"$DATABASE_URL\" ${LOG_LEVEL}\n```\n";
        let mut r = Requirements::default();
        r.add("0004-t.md", text);
        assert_eq!(r.variables, ["API_TOKEN", "APP_PORT", "DATABASE_URL", "LOG_LEVEL"]);
    }

    #[test]
    fn a_title_that_names_a_build_makes_no_section_a_setup_section() {
        let mut r = Requirements::default();
        r.add("0002-logs.md", "# 2. Logs under build/\n\n## Status\n\nAccepted\n\n## Context\n\nWords.\n");
        assert!(r.prose.is_empty() && r.actions.is_empty(), "{:?}", r.prose);
    }

    #[test]
    fn a_plain_text_record_reads_like_markdown() {
        let text = "ADR-020: Tasks\n\nStatus\n\nAccepted (Phase 1 Complete)\n\nImplementation Plan\n\nStep 1: Infrastructure (Week 1)\n\n• Create TaskManager in src/utils/task-manager.ts\n• Add handlers\n";
        let markdown = plain_text_as_markdown(text);
        assert_eq!(markdown.lines().count(), text.lines().count(), "line for line");
        let mut r = Requirements::default();
        r.add("docs/adr/ADR-020-tasks.md", &markdown);
        assert_eq!(r.adrs[0].status.as_deref(), Some("Accepted (Phase 1 Complete)"));
        let actions: Vec<(&str, &str, u32)> =
            r.actions.iter().map(|a| (a.text.as_str(), a.source.section.as_str(), a.source.line)).collect();
        assert_eq!(
            actions,
            [
                ("Create TaskManager in src/utils/task-manager.ts", "Step 1: Infrastructure (Week 1)", 11),
                ("Add handlers", "Step 1: Infrastructure (Week 1)", 12)
            ]
        );
    }

    #[test]
    fn paths_look_like_files() {
        for yes in
            ["config/app.toml", ".env", "./scripts/run.sh", "Dockerfile", "k8s/deploy.yaml", ".env.local"]
        {
            assert!(file_path(yes).is_some(), "{yes}");
        }
        for no in [
            "https://x.io/a.md",
            "npm install",
            "1.2",
            "/etc/hosts",
            "../x.toml",
            "src/",
            "v1.2.3",
            "-f",
            "a..b",
        ] {
            assert!(file_path(no).is_none(), "{no}");
        }
    }
}
