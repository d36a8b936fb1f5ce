//! One architecture decision record, from its Markdown text to an [`AdrDoc`].
//!
//! [`parse_adr`] never touches the filesystem: it takes the record's path (relative to the root
//! of the record set, `/`-separated) and its text, and keeps what the rules need, with 1-based line
//! numbers into the original text.
//!
//! Where each piece comes from, first source found wins:
//!
//! - **number**: the file name (`0001-foo.md`, `ADR-001-foo.md`, `adr_12_foo.md`, `12-foo.md`;
//!   not a date such as `2024-01-05-foo.md`), else the title (`# 1. Title`, `# ADR-007: Title`,
//!   `# ADR 7 - Title`), else front matter `number`.
//! - **title**: the first level-1 heading, without its number, else front matter `title`.
//! - **status** and **date**: front matter (`status: accepted`), else a field in the preamble
//!   (the lines before the first heading other than the title: `Date: 2018-03-12`,
//!   `* Status: accepted`, `**Status**: Accepted`, `**Status:** Proposed`), else the first
//!   paragraph of a `Status` or `Date` section. The value is kept raw, trimmed.
//! - **format**: MADR when a MADR-specific section is present (Context and Problem Statement,
//!   Considered Options, Decision Outcome, Decision Drivers, Pros and Cons of the Options);
//!   otherwise Nygard when a Status, Context, Decision or Consequences section is; otherwise
//!   MADR when there is front matter; otherwise unknown. Sections decide before front matter so
//!   that a Nygard record that gained front matter is still held to Nygard's sections.
//! - **relations**: a line that opens with `Supersedes`, `Superseded by`, `Amends` or
//!   `Amended by` (after a list marker, emphasis or a `Status:` field name; also in front matter
//!   `status`) relates the record to every ADR it names: a link whose target is an ADR file name
//!   (`0005-x.md`), or `ADR-12`, `ADR 12`, `ADR-0012`. Every other line that names an ADR that way
//!   is a mention. Text in code spans, code blocks and HTML blocks is not read for relations, and
//!   a record mentioning its own number is not a relation.
//! - **links**: every Markdown link and image, with its raw target; e-mail autolinks get a
//!   `mailto:` prefix so that they read as what they are.
//!
//! Front matter is a `---` block at the very top; only its top-level `key: value` scalars are read
//! (quoted or not), which is all ADR front matter carries.

use std::collections::HashSet;
use std::ops::Range;

use pulldown_cmark::{Event, LinkType, Options, Parser, Tag, TagEnd};
use serde::{Deserialize, Serialize};

/// The shape a record follows, which decides its required sections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Nygard,
    Madr,
    Unknown,
}

impl Format {
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Nygard => "nygard",
            Format::Madr => "madr",
            Format::Unknown => "unknown",
        }
    }
}

/// A heading and what follows it up to the next heading of the same or a higher level.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Section {
    pub title: String,
    pub level: u8,
    pub line: u32,
    /// Nothing but whitespace and HTML comments before the next heading of the same or a higher
    /// level; a sub-heading counts as content.
    pub empty: bool,
}

/// A Markdown link or image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Link {
    /// As written (reference links resolved to their destination).
    pub target: String,
    pub line: u32,
    pub text: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RelationKind {
    Supersedes,
    SupersededBy,
    Amends,
    AmendedBy,
    Mentions,
}

impl RelationKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RelationKind::Supersedes => "supersedes",
            RelationKind::SupersededBy => "supersededBy",
            RelationKind::Amends => "amends",
            RelationKind::AmendedBy => "amendedBy",
            RelationKind::Mentions => "mentions",
        }
    }
}

/// A reference from this record to another one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Relation {
    pub kind: RelationKind,
    /// The other record's number, from the link target's file name or from `ADR-n` text.
    pub number: Option<u32>,
    /// The raw link target, when the reference is a link.
    pub target: Option<String>,
    pub line: u32,
}

/// What the rules need to know about one record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdrDoc {
    pub path: String,
    pub number: Option<u32>,
    /// Where the number was read; `None` when it came from the file name.
    pub number_line: Option<u32>,
    pub title: Option<String>,
    pub title_line: Option<u32>,
    pub format: Format,
    pub status: Option<String>,
    pub status_line: Option<u32>,
    pub date: Option<String>,
    pub date_line: Option<u32>,
    pub sections: Vec<Section>,
    pub links: Vec<Link>,
    pub relations: Vec<Relation>,
}

/// The sections only MADR has, normalised by [`section_key`].
pub const MADR_SECTIONS: [&str; 5] = [
    "context and problem statement",
    "considered options",
    "decision outcome",
    "decision drivers",
    "pros and cons of the options",
];

/// Nygard's sections, normalised by [`section_key`].
pub const NYGARD_SECTIONS: [&str; 4] = ["status", "context", "decision", "consequences"];

/// Reads one record. `path` is relative to the record set's root and `/`-separated.
pub fn parse_adr(path: &str, text: &str) -> AdrDoc {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let (front, body) = split_front_matter(text);
    let lines = LineIndex::new(&body);
    let raw: Vec<&str> = body.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)).collect();
    let md = scan_markdown(&body, &lines);
    let front_field = |key: &str| front.as_ref().and_then(|fields| fields.iter().find(|f| f.key == key));

    let title_heading = md.headings.iter().position(|h| h.level == 1);
    let (title, title_line, number_in_title) = match title_heading {
        Some(i) => {
            let heading = &md.headings[i];
            let text = heading.title.trim();
            match title_number(text) {
                Some((n, rest)) if !rest.is_empty() => (Some(rest.to_owned()), Some(heading.line), Some(n)),
                Some((n, _)) => (Some(text.to_owned()), Some(heading.line), Some(n)),
                None if text.is_empty() => (None, None, None),
                None => (Some(text.to_owned()), Some(heading.line), None),
            }
        }
        None => match front_field("title") {
            Some(f) => (Some(f.value.clone()), Some(f.line), None),
            None => (None, None, None),
        },
    };

    let (number, number_line) = if let Some(n) = number_from_file_name(path) {
        (Some(n), None)
    } else if let Some(n) = number_in_title {
        (Some(n), title_line)
    } else if let Some(f) = front_field("number") {
        let n = f.value.parse().ok().or_else(|| title_number(&f.value).map(|(n, _)| n));
        (n, n.and(Some(f.line)))
    } else {
        (None, None)
    };

    // The preamble ends at the first heading that is not the title.
    let preamble_end = md
        .headings
        .iter()
        .enumerate()
        .find(|(i, _)| Some(*i) != title_heading)
        .map_or(raw.len() as u32 + 1, |(_, h)| h.line);
    let title_lines = title_heading.map(|i| md.headings[i].line..=md.headings[i].end_line);
    let mut preamble_fields: Vec<(String, String, u32)> = Vec::new();
    for line in 1..preamble_end {
        if md.is_hidden(line) || title_lines.as_ref().is_some_and(|r| r.contains(&line)) {
            continue;
        }
        if let Some((key, value)) = raw.get(line as usize - 1).and_then(|l| parse_field(l))
            && !value.is_empty()
        {
            preamble_fields.push((key, value, line));
        }
    }
    let metadata = |key: &str| -> Option<(String, u32)> {
        if let Some(f) = front_field(key) {
            return Some((f.value.clone(), f.line));
        }
        if let Some((_, value, line)) = preamble_fields.iter().find(|(k, _, _)| k == key) {
            return Some((value.clone(), *line));
        }
        let i = md.headings.iter().position(|h| h.level > 1 && section_key(&h.title) == key)?;
        section_text(&md, i, &raw)
    };
    let (status, status_line) = metadata("status").unzip();
    let (date, date_line) = metadata("date").unzip();

    let keys: Vec<String> = md.headings.iter().map(|h| section_key(&h.title)).collect();
    let has = |names: &[&str]| keys.iter().any(|k| names.contains(&k.as_str()));
    let format = if has(&MADR_SECTIONS) {
        Format::Madr
    } else if has(&NYGARD_SECTIONS) {
        Format::Nygard
    } else if front.is_some() {
        Format::Madr
    } else {
        Format::Unknown
    };

    let mut relations = Vec::new();
    if let Some(f) = front_field("status") {
        relations_in(&f.value, f.line, &mut relations);
    }
    for (i, text) in raw.iter().enumerate() {
        let line = i as u32 + 1;
        if !md.is_hidden(line) {
            relations_in(text, line, &mut relations);
        }
    }
    let mut seen = HashSet::new();
    let relations: Vec<Relation> = relations
        .into_iter()
        .filter(|r| !(r.kind == RelationKind::Mentions && r.number.is_some() && r.number == number))
        .filter(|r| seen.insert(r.clone()))
        .collect();

    AdrDoc {
        path: path.to_owned(),
        number,
        number_line,
        title,
        title_line,
        format,
        status,
        status_line,
        date,
        date_line,
        sections: md
            .headings
            .iter()
            .map(|h| Section {
                title: h.title.trim().to_owned(),
                level: h.level,
                line: h.line,
                empty: !h.has_content,
            })
            .collect(),
        links: md.links,
        relations,
    }
}

/// Whether a file in a record set is a record: Markdown, and not an index (`README.md`,
/// `index.md`) or a template (`template.md`, `adr-template-minimal.md`: the word `template` and
/// no number, so that `0012-template-engine.md` is still a record).
pub fn is_adr_path(path: &str) -> bool {
    let base = base_name(path).to_ascii_lowercase();
    let Some(stem) = base.strip_suffix(".md").or_else(|| base.strip_suffix(".markdown")) else {
        return false;
    };
    let template = stem.split(['-', '_', '.', ' ']).any(|word| word == "template")
        && number_from_file_name(stem).is_none();
    !(template || matches!(stem, "readme" | "index" | "toc" | "_sidebar"))
}

/// The number a record's file name carries: `0001-foo.md`, `ADR-001-foo.md`, `adr_12_foo.md`,
/// `12-foo.md`, `0001.md`. A leading `YYYY-MM-DD` is a date, not a number.
pub fn number_from_file_name(path: &str) -> Option<u32> {
    let base = base_name(path).to_ascii_lowercase();
    let rest = match base.strip_prefix("adr") {
        Some(r) => r.strip_prefix(['-', '_', ' ', '.']).unwrap_or(r),
        None => &base,
    };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    let after = &rest[digits..];
    if !(after.is_empty() || after.starts_with(['-', '_', '.', ' '])) {
        return None;
    }
    let after = after.as_bytes();
    let is_date = digits == 4
        && after.len() >= 6
        && after[0] == b'-'
        && after[1..3].iter().all(u8::is_ascii_digit)
        && after[3] == b'-'
        && after[4..6].iter().all(u8::is_ascii_digit);
    if is_date {
        return None;
    }
    rest[..digits].parse().ok()
}

/// A heading's text reduced for comparison: lower case, single spaces, `&` as `and`, without
/// leading numbering (`1.`, `2)`, `3.1`) or a trailing colon.
pub fn section_key(title: &str) -> String {
    let lower = title.to_lowercase().replace('&', " and ");
    let mut key = lower.split_whitespace().collect::<Vec<_>>().join(" ");
    let numbering = key.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ')')).unwrap_or(key.len());
    if numbering > 0 && key.starts_with(|c: char| c.is_ascii_digit()) && key[numbering..].starts_with(' ') {
        key = key[numbering + 1..].to_owned();
    }
    key.trim_end_matches([':', ' ']).to_owned()
}

/// The path part of a relative link target (fragment and query removed, percent-escapes
/// decoded), or `None` for an absolute URL (`https:`, `mailto:`, ...), a root-relative path, a
/// bare `#anchor` or an empty target.
pub fn link_path(target: &str) -> Option<String> {
    let t = target.trim();
    if t.is_empty() || t.starts_with(['#', '/', '\\']) || has_scheme(t) {
        return None;
    }
    let end = t.find(['#', '?']).unwrap_or(t.len());
    let path = percent_decode(&t[..end]);
    (!path.is_empty()).then_some(path)
}

/// The record number a link target names, when it is a relative link to a Markdown file whose
/// name carries a number.
pub fn target_number(target: &str) -> Option<u32> {
    let path = link_path(target)?;
    let lower = path.to_ascii_lowercase();
    if lower.ends_with(".md") || lower.ends_with(".markdown") { number_from_file_name(&path) } else { None }
}

fn base_name(path: &str) -> &str {
    path.rsplit(['/', '\\']).next().unwrap_or(path)
}

fn has_scheme(t: &str) -> bool {
    let Some(colon) = t.find(':') else {
        return false;
    };
    let scheme = &t[..colon];
    scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(b) => {
                out.push(b);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| s.to_owned())
}

/// The number a title opens with, and the title without it: `1. Title`, `ADR-007: Title`,
/// `ADR 7 - Title`. A bare number needs punctuation after it, so that `2024 roadmap` keeps its
/// year.
fn title_number(title: &str) -> Option<(u32, &str)> {
    let t = title.trim_start();
    let (prefixed, rest) = match t.get(..3) {
        Some(p) if p.eq_ignore_ascii_case("adr") => {
            (true, t[3..].trim_start_matches(['-', '_', ' ', '#', ':']))
        }
        _ => (false, t),
    };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    let after = &rest[digits..];
    let separated = if prefixed {
        !after.starts_with(char::is_alphanumeric)
    } else if let Some(r) = after.strip_prefix('.') {
        !r.starts_with(|c: char| c.is_ascii_digit())
    } else if after.starts_with([':', ')']) {
        true
    } else {
        let trimmed = after.trim_start();
        trimmed.len() < after.len() && trimmed.starts_with(['-', '–', '—', ':'])
    };
    if !separated {
        return None;
    }
    let number = rest[..digits].parse().ok()?;
    let title = after
        .trim_start_matches(|c: char| c.is_whitespace() || matches!(c, '.' | ':' | ')' | '-' | '–' | '—'))
        .trim_end();
    Some((number, title))
}

struct FrontField {
    key: String,
    value: String,
    line: u32,
}

/// The front matter's scalar fields, and the text with the front matter's lines emptied so that
/// offsets into it fall on the same line numbers as in the original.
fn split_front_matter(text: &str) -> (Option<Vec<FrontField>>, String) {
    let mut lines = text.split_inclusive('\n');
    let Some(first) = lines.next() else {
        return (None, String::new());
    };
    if first.trim_end() != "---" {
        return (None, text.to_owned());
    }
    let mut fields = Vec::new();
    let mut consumed = first.len();
    for (i, raw) in lines.enumerate() {
        consumed += raw.len();
        let line = i as u32 + 2;
        let l = raw.trim_end();
        if l == "---" || l == "..." {
            let mut body = "\n".repeat(line as usize);
            body.push_str(&text[consumed..]);
            return (Some(fields), body);
        }
        if let Some(field) = front_matter_field(l, line) {
            fields.push(field);
        }
    }
    // Never closed: a thematic break, not front matter.
    (None, text.to_owned())
}

fn front_matter_field(line: &str, number: u32) -> Option<FrontField> {
    if line.is_empty() || line.starts_with(|c: char| c.is_whitespace() || c == '#' || c == '-') {
        return None;
    }
    let colon = line.find(':')?;
    let value = &line[colon + 1..];
    if !(value.is_empty() || value.starts_with([' ', '\t'])) {
        return None;
    }
    let key = line[..colon].trim().trim_matches(['"', '\'']).to_lowercase();
    let value = yaml_scalar(value.trim())?;
    (!key.is_empty() && !value.is_empty()).then_some(FrontField { key, value, line: number })
}

/// A one-line YAML scalar's value; `None` for a block scalar, whose text is on the lines below.
fn yaml_scalar(v: &str) -> Option<String> {
    if v.starts_with(['|', '>']) {
        return None;
    }
    if v.len() >= 2 && v.starts_with('"') && v.ends_with('"') {
        return Some(v[1..v.len() - 1].replace("\\\"", "\"").replace("\\\\", "\\"));
    }
    if v.len() >= 2 && v.starts_with('\'') && v.ends_with('\'') {
        return Some(v[1..v.len() - 1].replace("''", "'"));
    }
    let v = match v.find(" #") {
        Some(i) => &v[..i],
        None => v,
    };
    Some(v.trim().to_owned())
}

/// A `key: value` field line: `Date: 2018-03-12`, `* Status: accepted`, `**Status**: Accepted`,
/// `**Status:** Proposed`. The key comes back in lower case.
fn parse_field(line: &str) -> Option<(String, String)> {
    let s = strip_list_marker(line.trim_start());
    let marker = ["**", "__", "*", "_"].into_iter().find(|m| s.starts_with(m)).unwrap_or("");
    let s = &s[marker.len()..];
    let colon = s.find(':')?;
    let mut key = &s[..colon];
    let mut value = &s[colon + 1..];
    if !marker.is_empty() {
        match key.strip_suffix(marker) {
            Some(k) => key = k,
            None => value = value.trim_start().strip_prefix(marker)?,
        }
    }
    let key = key.trim();
    if key.is_empty() || !key.chars().all(|c| c.is_alphabetic() || matches!(c, ' ' | '-' | '_')) {
        return None;
    }
    let value = value.trim();
    let value = value.strip_suffix('\\').unwrap_or(value).trim_end();
    Some((key.to_lowercase(), value.to_owned()))
}

fn strip_list_marker(s: &str) -> &str {
    for marker in ["* ", "- ", "+ "] {
        if let Some(rest) = s.strip_prefix(marker) {
            return rest.trim_start();
        }
    }
    s
}

fn starts_list_item(s: &str) -> bool {
    ["* ", "- ", "+ "].iter().any(|m| s.starts_with(m)) || {
        let digits = s.bytes().take_while(u8::is_ascii_digit).count();
        digits > 0 && (s[digits..].starts_with(". ") || s[digits..].starts_with(") "))
    }
}

/// The first paragraph (or list item) under heading `i`, joined into one line, and its line.
fn section_text(md: &Markdown, i: usize, raw: &[&str]) -> Option<(String, u32)> {
    let heading = &md.headings[i];
    let stop = md.headings.get(i + 1).map_or(raw.len() as u32 + 1, |next| next.line);
    let mut parts: Vec<&str> = Vec::new();
    let mut first = None;
    for line in heading.end_line + 1..stop {
        let text = raw.get(line as usize - 1).map_or("", |l| l.trim());
        let started = first.is_some();
        if md.is_hidden(line) || text.is_empty() || (started && starts_list_item(text)) {
            if started {
                break;
            }
            continue;
        }
        if !started {
            first = Some(line);
            parts.push(strip_list_marker(text));
        } else {
            parts.push(text);
        }
    }
    let text = parts.join(" ");
    let text = text.strip_suffix('\\').unwrap_or(&text).trim();
    Some((text.to_owned(), first?))
}

/// Appends the relations one line states: all references on it take the kind the line opens with.
fn relations_in(text: &str, line: u32, out: &mut Vec<Relation>) {
    let text = blank_code_spans(text);
    let kind = leading_relation_kind(&text);
    let mut rest = text.clone();
    for (span, link_text, target) in inline_links(&text) {
        rest.replace_range(span.clone(), &" ".repeat(span.len()));
        let number = target_number(&target).or_else(|| mentions(&link_text).first().copied());
        let names_a_file = target_number(&target).is_some()
            || link_path(&target).is_some_and(|p| {
                let p = p.to_ascii_lowercase();
                p.ends_with(".md") || p.ends_with(".markdown")
            });
        if number.is_some() || (kind != RelationKind::Mentions && names_a_file) {
            out.push(Relation { kind, number, target: Some(target), line });
        }
    }
    for number in mentions(&rest) {
        out.push(Relation { kind, number: Some(number), target: None, line });
    }
}

fn leading_relation_kind(text: &str) -> RelationKind {
    let s = strip_list_marker(text.trim_start().trim_start_matches(['>', ' ']));
    let field_value;
    let s = match parse_field(s) {
        Some((key, value)) if key == "status" => {
            field_value = value;
            field_value.as_str()
        }
        _ => s,
    };
    let s = s.trim_start_matches(['*', '_', ' ']).to_lowercase();
    let opens = |words: &[&str]| words.iter().any(|w| s.starts_with(w));
    // "Superceded" is a common misspelling that means the same thing.
    if opens(&["superseded by", "superceded by", "superseded-by"]) {
        RelationKind::SupersededBy
    } else if opens(&["supersedes", "supercedes"]) {
        RelationKind::Supersedes
    } else if opens(&["amended by", "amended-by"]) {
        RelationKind::AmendedBy
    } else if opens(&["amends"]) {
        RelationKind::Amends
    } else {
        RelationKind::Mentions
    }
}

fn blank_code_spans(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_code = false;
    for c in text.chars() {
        if c == '`' {
            in_code = !in_code;
            out.push(c);
        } else if in_code {
            out.extend(std::iter::repeat_n(' ', c.len_utf8()));
        } else {
            out.push(c);
        }
    }
    out
}

/// Inline links `[text](target "title")` (and images) in one line: byte span, text, target.
fn inline_links(s: &str) -> Vec<(Range<usize>, String, String)> {
    let bytes = s.as_bytes();
    let square = closing_brackets(bytes, b'[', b']');
    let round = closing_brackets(bytes, b'(', b')');
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let link = square[i]
            .filter(|&close| bytes.get(close + 1) == Some(&b'('))
            .and_then(|close| Some((close, round[close + 1]?)));
        let Some((close, end)) = link else {
            i += 1;
            continue;
        };
        let inner = s[close + 2..end].trim();
        let target = match inner.strip_prefix('<') {
            Some(r) => r.split('>').next().unwrap_or(r),
            None => inner.split_whitespace().next().unwrap_or(""),
        };
        let start = if i > 0 && bytes[i - 1] == b'!' { i - 1 } else { i };
        found.push((start..end + 1, s[i + 1..close].to_owned(), target.to_owned()));
        i = end + 1;
    }
    found
}

/// For each opening bracket, the index of the bracket that closes it; in one pass, so that a line
/// of a thousand unmatched brackets costs no more than a thousand characters.
fn closing_brackets(bytes: &[u8], left: u8, right: u8) -> Vec<Option<usize>> {
    let mut closing = vec![None; bytes.len()];
    let mut open = Vec::new();
    for (i, &b) in bytes.iter().enumerate() {
        if b == left {
            open.push(i);
        } else if b == right
            && let Some(start) = open.pop()
        {
            closing[start] = Some(i);
        }
    }
    closing
}

/// Record numbers named as `ADR-12`, `ADR 12`, `ADR-0012`, `ADR_12`, `ADR#12` or `ADR12`. Not
/// inside a path or a URL (`/adr-12`), which links already account for.
fn mentions(s: &str) -> Vec<u32> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i + 3 <= b.len() {
        let boundary = i == 0 || {
            let prev = b[i - 1];
            !prev.is_ascii_alphanumeric() && !matches!(prev, b'/' | b'-' | b'_' | b'.' | b'#')
        };
        if boundary && b[i..i + 3].eq_ignore_ascii_case(b"adr") {
            let mut j = i + 3;
            if j < b.len() && matches!(b[j], b'-' | b'_' | b' ' | b'#') {
                j += 1;
            }
            let start = j;
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            if j > start && (j == b.len() || !b[j].is_ascii_alphanumeric()) {
                if let Ok(n) = s[start..j].parse() {
                    out.push(n);
                }
                i = j;
                continue;
            }
        }
        i += 1;
    }
    out
}

fn has_visible_html(html: &str) -> bool {
    let mut rest = html;
    let mut visible = String::new();
    while let Some(start) = rest.find("<!--") {
        visible.push_str(&rest[..start]);
        rest = match rest[start + 4..].find("-->") {
            Some(end) => &rest[start + 4 + end + 3..],
            None => "",
        };
    }
    visible.push_str(rest);
    !visible.trim().is_empty()
}

struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    fn new(text: &str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex { starts }
    }

    fn line_of(&self, offset: usize) -> u32 {
        self.starts.partition_point(|&s| s <= offset) as u32
    }

    fn last_line(&self, range: &Range<usize>) -> u32 {
        self.line_of(range.end.saturating_sub(1).max(range.start))
    }
}

struct Heading {
    title: String,
    level: u8,
    line: u32,
    end_line: u32,
    has_content: bool,
}

struct Markdown {
    headings: Vec<Heading>,
    links: Vec<Link>,
    /// Indexed by line number: inside a code block or an HTML block, where fields and references
    /// are examples or comments rather than statements.
    hidden: Vec<bool>,
}

impl Markdown {
    fn is_hidden(&self, line: u32) -> bool {
        self.hidden.get(line as usize).copied().unwrap_or(false)
    }
}

fn scan_markdown(body: &str, lines: &LineIndex) -> Markdown {
    let mut options = Options::empty();
    options.insert(Options::ENABLE_TABLES);
    options.insert(Options::ENABLE_STRIKETHROUGH);
    options.insert(Options::ENABLE_TASKLISTS);
    options.insert(Options::ENABLE_FOOTNOTES);

    let mut headings: Vec<Heading> = Vec::new();
    // Headings whose section is still open, outermost first.
    let mut open: Vec<usize> = Vec::new();
    let mut in_heading: Option<usize> = None;
    let mut links: Vec<Link> = Vec::new();
    let mut open_links: Vec<usize> = Vec::new();
    let mut html_block: Option<String> = None;
    let mut hidden = vec![false; lines.starts.len() + 2];
    let mut hide = |range: &Range<usize>| {
        for line in lines.line_of(range.start)..=lines.last_line(range) {
            if let Some(h) = hidden.get_mut(line as usize) {
                *h = true;
            }
        }
    };

    for (event, range) in Parser::new_ext(body, options).into_offset_iter() {
        let mut content = false;
        match event {
            Event::Start(Tag::Heading { level, .. }) => {
                let level = level as u8;
                while open.last().is_some_and(|&i| headings[i].level >= level) {
                    open.pop();
                }
                for &i in &open {
                    headings[i].has_content = true;
                }
                headings.push(Heading {
                    title: String::new(),
                    level,
                    line: lines.line_of(range.start),
                    end_line: lines.last_line(&range),
                    has_content: false,
                });
                open.push(headings.len() - 1);
                in_heading = Some(headings.len() - 1);
            }
            Event::End(TagEnd::Heading(_)) => in_heading = None,
            Event::Start(Tag::Link { link_type, dest_url, .. }) => {
                let target = if link_type == LinkType::Email {
                    format!("mailto:{dest_url}")
                } else {
                    dest_url.to_string()
                };
                open_links.push(links.len());
                links.push(Link { target, line: lines.line_of(range.start), text: String::new() });
                content = true;
            }
            Event::Start(Tag::Image { dest_url, .. }) => {
                open_links.push(links.len());
                links.push(Link {
                    target: dest_url.to_string(),
                    line: lines.line_of(range.start),
                    text: String::new(),
                });
                content = true;
            }
            Event::End(TagEnd::Link | TagEnd::Image) => {
                if let Some(link) = open_links.pop().and_then(|i| links.get_mut(i)) {
                    link.text = link.text.trim().to_owned();
                }
            }
            Event::Text(t) | Event::Code(t) => {
                if let Some(i) = in_heading {
                    headings[i].title.push_str(&t);
                }
                for &i in &open_links {
                    links[i].text.push_str(&t);
                }
                content = !t.trim().is_empty();
            }
            Event::SoftBreak | Event::HardBreak => {
                if let Some(i) = in_heading {
                    headings[i].title.push(' ');
                }
                for &i in &open_links {
                    links[i].text.push(' ');
                }
            }
            Event::Start(Tag::CodeBlock(_)) => {
                hide(&range);
                content = true;
            }
            Event::Start(Tag::HtmlBlock) => {
                hide(&range);
                html_block = Some(String::new());
            }
            Event::Html(t) => match html_block.as_mut() {
                Some(block) => block.push_str(&t),
                None => content = has_visible_html(&t),
            },
            Event::End(TagEnd::HtmlBlock) => {
                content = html_block.take().is_some_and(|b| has_visible_html(&b));
            }
            Event::InlineHtml(t) => content = has_visible_html(&t),
            Event::InlineMath(_)
            | Event::DisplayMath(_)
            | Event::FootnoteReference(_)
            | Event::TaskListMarker(_) => content = true,
            _ => {}
        }
        if content && in_heading.is_none() {
            for &i in &open {
                headings[i].has_content = true;
            }
        }
    }
    Markdown { headings, links, hidden }
}

#[cfg(test)]
pub(super) mod tests {
    use std::collections::BTreeMap;
    use std::path::PathBuf;

    use serde_json::Value;

    use super::*;
    use crate::adrs::rules;

    pub(in crate::adrs) fn fixture_dir() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/adrs")
    }

    /// Every record of the fixture set, parsed, by path.
    pub(in crate::adrs) fn fixture_docs() -> Vec<AdrDoc> {
        let dir = fixture_dir();
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .expect("the fixture directory is part of the repository")
            .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
            .filter(|name| is_adr_path(name))
            .collect();
        names.sort();
        names
            .iter()
            .map(|name| {
                let text = std::fs::read_to_string(dir.join(name)).expect("fixture files are UTF-8");
                parse_adr(name, &text)
            })
            .collect()
    }

    pub(in crate::adrs) fn fixture_expected() -> Value {
        let text = std::fs::read_to_string(fixture_dir().join("expected.json"))
            .expect("expected.json is part of the fixture set");
        serde_json::from_str(&text).expect("expected.json is JSON")
    }

    fn kinds(doc: &AdrDoc) -> Vec<(RelationKind, Option<u32>, u32)> {
        doc.relations.iter().map(|r| (r.kind, r.number, r.line)).collect()
    }

    #[test]
    fn fixture_records_parse_to_the_expected_metadata() {
        let expected = fixture_expected();
        let files = expected["files"].as_object().expect("files is an object");
        let docs = fixture_docs();
        let paths: Vec<&str> = docs.iter().map(|d| d.path.as_str()).collect();
        let listed: Vec<&str> = files.keys().map(String::as_str).collect();
        assert_eq!(paths, listed, "records found versus records listed");
        for doc in &docs {
            let want = &files[&doc.path];
            assert_eq!(doc.number.map(u64::from), want["number"].as_u64(), "{}", doc.path);
            assert_eq!(doc.format.as_str(), want["format"], "{}", doc.path);
            assert_eq!(doc.title.as_deref(), want["title"].as_str(), "{}", doc.path);
            assert_eq!(doc.status.as_deref(), want["status"].as_str(), "{}", doc.path);
            assert_eq!(doc.date.as_deref(), want["date"].as_str(), "{}", doc.path);
        }
        let skipped: Vec<&str> = expected["skipped"]
            .as_array()
            .expect("skipped is a list")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        for name in skipped {
            assert!(fixture_dir().join(name).exists(), "{name} is in the fixture set");
            assert!(!is_adr_path(name), "{name} is not a record");
        }
    }

    #[test]
    fn the_document_survives_a_json_round_trip() {
        for doc in fixture_docs() {
            let json = serde_json::to_value(&doc).expect("an AdrDoc serialises");
            assert!(json.get("numberLine").is_some() && json.get("statusLine").is_some());
            let back: AdrDoc = serde_json::from_value(json).expect("and deserialises");
            assert_eq!(back, doc);
        }
        let doc = parse_adr("0002-x.md", "# 2. X\n\n## Status\n\nSuperseded by ADR-3\n");
        let json = serde_json::to_value(&doc).expect("an AdrDoc serialises");
        assert_eq!(json["format"], "nygard");
        assert_eq!(json["relations"][0]["kind"], "supersededBy");
    }

    #[test]
    fn nygard_as_adr_tools_writes_it() {
        let text = "# 2. Use Redis\n\nDate: 2018-03-12\n\n## Status\n\nAccepted\n\nSupersedes [1. Record architecture decisions](0001-record-architecture-decisions.md)\n\nAmended by [3. Tune Redis](0003-tune-redis.md#status)\n\n## Context\n\nText.\n\n## Decision\n\nText.\n\n## Consequences\n\nText.\n";
        let doc = parse_adr("doc/adr/0002-use-redis.md", text);
        assert_eq!(doc.format, Format::Nygard);
        assert_eq!((doc.number, doc.number_line), (Some(2), None));
        assert_eq!((doc.title.as_deref(), doc.title_line), (Some("Use Redis"), Some(1)));
        assert_eq!((doc.date.as_deref(), doc.date_line), (Some("2018-03-12"), Some(3)));
        assert_eq!((doc.status.as_deref(), doc.status_line), (Some("Accepted"), Some(7)));
        assert_eq!(
            kinds(&doc),
            vec![(RelationKind::Supersedes, Some(1), 9), (RelationKind::AmendedBy, Some(3), 11)]
        );
        assert_eq!(doc.relations[1].target.as_deref(), Some("0003-tune-redis.md#status"));
        let titles: Vec<(&str, u8, u32)> =
            doc.sections.iter().map(|s| (s.title.as_str(), s.level, s.line)).collect();
        assert_eq!(
            titles,
            vec![
                ("2. Use Redis", 1, 1),
                ("Status", 2, 5),
                ("Context", 2, 13),
                ("Decision", 2, 17),
                ("Consequences", 2, 21)
            ]
        );
        assert!(doc.sections.iter().all(|s| !s.empty));
        assert_eq!(doc.links.len(), 2);
        assert_eq!(doc.links[0].text, "1. Record architecture decisions");
        assert_eq!(doc.links[0].line, 9);
    }

    #[test]
    fn a_superseded_status_paragraph_is_the_status_and_a_relation() {
        let text = "# 1. Old\n\nDate: 2018-03-12\n\n## Status\n\nSuperseded by [2. New](0002-new.md)\n\n## Context\n\nx\n";
        let doc = parse_adr("0001-old.md", text);
        assert_eq!(doc.status.as_deref(), Some("Superseded by [2. New](0002-new.md)"));
        assert_eq!(kinds(&doc), vec![(RelationKind::SupersededBy, Some(2), 7)]);
    }

    #[test]
    fn madr_4_with_front_matter() {
        let text = "---\nstatus: \"superseded by [ADR-0005](0005-example.md)\"\ndate: 2023-01-05 # last update\ndecision-makers: Ana\n---\n\n# Use MADR\n\n## Context and Problem Statement\n\nWhy?\n\n## Considered Options\n\n* MADR\n\n## Decision Outcome\n\nChosen option: MADR.\n";
        let doc = parse_adr("0003-use-madr.md", text);
        assert_eq!(doc.format, Format::Madr);
        assert_eq!(
            (doc.status.as_deref(), doc.status_line),
            (Some("superseded by [ADR-0005](0005-example.md)"), Some(2))
        );
        assert_eq!((doc.date.as_deref(), doc.date_line), (Some("2023-01-05"), Some(3)));
        assert_eq!((doc.title.as_deref(), doc.title_line), (Some("Use MADR"), Some(7)));
        assert_eq!(kinds(&doc), vec![(RelationKind::SupersededBy, Some(5), 2)]);
        assert_eq!(doc.sections[1].line, 9);
        // Front matter links are not Markdown links.
        assert!(doc.links.is_empty());
    }

    #[test]
    fn madr_2_list_fields_under_the_title() {
        let text = "# Use JUnit5\n\n* Status: accepted\n- Deciders: Ana, Bo\n* Date: 2020-01-01\n\nTechnical Story: #12\n\n## Context and Problem Statement\n\nx\n";
        let doc = parse_adr("0004-use-junit5.md", text);
        assert_eq!(doc.format, Format::Madr);
        assert_eq!((doc.status.as_deref(), doc.status_line), (Some("accepted"), Some(3)));
        assert_eq!((doc.date.as_deref(), doc.date_line), (Some("2020-01-01"), Some(5)));
        assert_eq!(doc.title.as_deref(), Some("Use JUnit5"));
    }

    #[test]
    fn bold_inline_fields_with_the_colon_inside_or_outside() {
        let text =
            "# ADR-007: Use Postgres\n\n**Status**: Accepted\n**Date:** 2024-02-01  \n\n## Context\n\nx\n";
        let doc = parse_adr("decisions/use-postgres.md", text);
        assert_eq!((doc.number, doc.number_line), (Some(7), Some(1)));
        assert_eq!(doc.title.as_deref(), Some("Use Postgres"));
        assert_eq!((doc.status.as_deref(), doc.status_line), (Some("Accepted"), Some(3)));
        assert_eq!((doc.date.as_deref(), doc.date_line), (Some("2024-02-01"), Some(4)));
        assert_eq!(doc.format, Format::Nygard);
        let doc = parse_adr("x.md", "# T\n\n__Status:__ *Proposed*\n\n## Context\n\nx\n");
        assert_eq!(doc.status.as_deref(), Some("*Proposed*"));
    }

    #[test]
    fn fields_below_the_preamble_are_prose() {
        let text = "# 1. T\n\n## Context\n\nStatus: this is prose, not a field.\n";
        let doc = parse_adr("0001-t.md", text);
        assert_eq!(doc.status, None);
    }

    #[test]
    fn front_matter_wins_over_fields_and_sections() {
        let text = "---\nstatus: accepted\n---\n# T\n\nStatus: proposed\n\n## Status\n\nRejected\n";
        assert_eq!(parse_adr("1-t.md", text).status.as_deref(), Some("accepted"));
        let text = "# T\n\nStatus: proposed\n\n## Status\n\nRejected\n";
        assert_eq!(parse_adr("1-t.md", text).status.as_deref(), Some("proposed"));
    }

    #[test]
    fn unclosed_front_matter_is_a_thematic_break() {
        let doc = parse_adr("1-t.md", "---\nstatus: accepted\n\n# T\n");
        // Front matter would make it MADR; the line still reads as a field before the title.
        assert_eq!(doc.format, Format::Unknown);
        assert_eq!((doc.status.as_deref(), doc.status_line), (Some("accepted"), Some(2)));
    }

    #[test]
    fn numbers_from_file_names() {
        for (name, number) in [
            ("0001-foo.md", Some(1)),
            ("doc/adr/ADR-001-foo.md", Some(1)),
            ("adr_12_foo.md", Some(12)),
            ("12-foo.md", Some(12)),
            ("adr-0042.md", Some(42)),
            ("0007.md", Some(7)),
            ("ADR0009-x.md", Some(9)),
            ("2024-01-05-use-x.md", None),
            ("foo.md", None),
            ("adrian.md", None),
            ("12abc.md", None),
            ("99999999999-x.md", None),
        ] {
            assert_eq!(number_from_file_name(name), number, "{name}");
        }
    }

    #[test]
    fn numbers_from_titles() {
        for (title, want) in [
            ("1. Record architecture decisions", Some((1, "Record architecture decisions"))),
            ("ADR-007: Use Postgres", Some((7, "Use Postgres"))),
            ("ADR 7 - Use Postgres", Some((7, "Use Postgres"))),
            ("adr-0012 Use Postgres", Some((12, "Use Postgres"))),
            ("12: Use Postgres", Some((12, "Use Postgres"))),
            ("3 — Use Postgres", Some((3, "Use Postgres"))),
            ("2024 roadmap", None),
            ("1.5 release", None),
            ("Use Postgres", None),
            ("ADRs for everyone", None),
        ] {
            assert_eq!(title_number(title), want, "{title}");
        }
        let doc = parse_adr("use-x.md", "---\nnumber: 21\n---\n# Use X\n");
        assert_eq!((doc.number, doc.number_line), (Some(21), Some(2)));
        // The file name wins over the title.
        let doc = parse_adr("0003-x.md", "# 4. X\n");
        assert_eq!((doc.number, doc.number_line), (Some(3), None));
        assert_eq!(doc.title.as_deref(), Some("X"));
    }

    #[test]
    fn formats() {
        let madr = parse_adr("1-a.md", "# A\n\n## Decision Outcome\n\nx\n");
        assert_eq!(madr.format, Format::Madr);
        let nygard = parse_adr("1-a.md", "# A\n\n## 1. Context\n\nx\n");
        assert_eq!(nygard.format, Format::Nygard);
        let front = parse_adr("1-a.md", "---\ndate: 2020-01-01\n---\n# A\n\nx\n");
        assert_eq!(front.format, Format::Madr);
        let nygard_with_front_matter =
            parse_adr("1-a.md", "---\nstatus: accepted\n---\n# A\n\n## Context\n\nx\n");
        assert_eq!(nygard_with_front_matter.format, Format::Nygard);
        let unknown = parse_adr("1-a.md", "# A\n\n## Background\n\nx\n");
        assert_eq!(unknown.format, Format::Unknown);
    }

    #[test]
    fn section_keys_tolerate_numbering_case_and_ampersands() {
        assert_eq!(section_key("1. Context"), "context");
        assert_eq!(section_key("  CONTEXT  and problem   Statement:"), "context and problem statement");
        assert_eq!(section_key("Pros & Cons of the Options"), "pros and cons of the options");
        assert_eq!(section_key("2) Decision"), "decision");
    }

    #[test]
    fn empty_sections() {
        let text = "# T\n\n## Context\n\n<!-- fill in -->\n\n## Decision\n\n### Detail\n\nx\n\n## Consequences\n\n   \n## Notes\n\n<details>open</details>\n\n## Options\n\n```\n```\n";
        let doc = parse_adr("1-t.md", text);
        let empty: Vec<(&str, bool)> = doc.sections.iter().map(|s| (s.title.as_str(), s.empty)).collect();
        assert_eq!(
            empty,
            vec![
                ("T", false),
                ("Context", true),
                ("Decision", false),
                ("Detail", false),
                ("Consequences", true),
                ("Notes", false),
                ("Options", false)
            ]
        );
        let multi_line_comment = "# T\n\n## Context\n\n<!--\nline one\nline two\n-->\n\n## Decision\n\nx\n";
        assert!(parse_adr("1-t.md", multi_line_comment).sections[1].empty);
        let setext = "T\n=\n\nContext\n-------\n\n## Decision\n\nx\n";
        let doc = parse_adr("1-t.md", setext);
        assert_eq!((doc.title.as_deref(), doc.title_line), (Some("T"), Some(1)));
        assert_eq!((doc.sections[1].line, doc.sections[1].empty), (4, true));
    }

    #[test]
    fn links_keep_their_raw_targets_and_lines() {
        let text = "# T\n\nSee [a](b%20c.md#x), [ref][r], <https://example.com>, <me@example.com>\nand ![diagram](img/flow.png).\n\n[r]: ./other.md\n";
        let doc = parse_adr("1-t.md", text);
        let links: Vec<(&str, u32, &str)> =
            doc.links.iter().map(|l| (l.target.as_str(), l.line, l.text.as_str())).collect();
        assert_eq!(
            links,
            vec![
                ("b%20c.md#x", 3, "a"),
                ("./other.md", 3, "ref"),
                ("https://example.com", 3, "https://example.com"),
                ("mailto:me@example.com", 3, "me@example.com"),
                ("img/flow.png", 4, "diagram"),
            ]
        );
        assert_eq!(link_path("b%20c.md#x").as_deref(), Some("b c.md"));
        assert_eq!(link_path("x.md?plain=1").as_deref(), Some("x.md"));
        for not_relative in ["#anchor", "/root.md", "https://x.md", "mailto:a@b", "", "C:x"] {
            assert_eq!(link_path(not_relative), None, "{not_relative}");
        }
    }

    #[test]
    fn mentions_and_relations_in_the_body() {
        let text = "# 5. T\n\n## Context\n\nLike ADR-12 and ADR 3, unlike ADR-0005 (this one).\nSee https://wiki/adr-44 and `ADR-45`.\n* **Supersedes** ADR-0003\n> Amends [the old one](0004-old.md)\n\n```\nADR-46\n```\n<!-- ADR-47 -->\n\nADR-3 was superseded by ADR-9.\n";
        let doc = parse_adr("0005-t.md", text);
        assert_eq!(
            kinds(&doc),
            vec![
                (RelationKind::Mentions, Some(12), 5),
                (RelationKind::Mentions, Some(3), 5),
                (RelationKind::Supersedes, Some(3), 7),
                (RelationKind::Amends, Some(4), 8),
                (RelationKind::Mentions, Some(3), 15),
                (RelationKind::Mentions, Some(9), 15),
            ]
        );
    }

    #[test]
    fn a_relation_to_a_file_without_a_number_keeps_its_target() {
        let doc = parse_adr("0002-x.md", "# X\n\n## Status\n\nSuperseded by [the new way](new-way.md)\n");
        assert_eq!(doc.relations.len(), 1);
        assert_eq!(doc.relations[0].kind, RelationKind::SupersededBy);
        assert_eq!(doc.relations[0].number, None);
        assert_eq!(doc.relations[0].target.as_deref(), Some("new-way.md"));
        let doc = parse_adr("0002-x.md", "# X\n\nSee [the guide](guide.md).\n");
        assert!(doc.relations.is_empty(), "a plain link to a document is not a mention");
    }

    #[test]
    fn skipped_files() {
        for name in [
            "README.md",
            "docs/adr/index.md",
            "template.md",
            "adr-template.md",
            "adr-template-minimal.md",
            "notes.txt",
        ] {
            assert!(!is_adr_path(name), "{name}");
        }
        for name in ["0001-x.md", "docs/adr/use-x.markdown", "0012-template-engine.md", "use-templates.md"] {
            assert!(is_adr_path(name), "{name}");
        }
    }

    #[test]
    fn crlf_and_a_byte_order_mark() {
        let text = "\u{feff}---\r\nstatus: accepted\r\ndate: 2020-01-01\r\n---\r\n# 1. T\r\n\r\n## Context\r\n\r\nx\r\n";
        let doc = parse_adr("t.md", text);
        assert_eq!(doc.status.as_deref(), Some("accepted"));
        assert_eq!(doc.date.as_deref(), Some("2020-01-01"));
        assert_eq!((doc.number, doc.title_line), (Some(1), Some(5)));
        assert_eq!(doc.sections[1].line, 7);
    }

    #[test]
    fn any_text_parses_without_panicking() {
        const PIECES: [&str; 36] = [
            "#",
            "# ",
            "## ",
            " ",
            "\n",
            "\r\n",
            "---\n",
            "[",
            "]",
            "(",
            ")",
            "!",
            "<",
            ">",
            "ADR-",
            "adr ",
            "1",
            "0",
            ":",
            "*",
            "**",
            "_",
            "`",
            "```\n",
            "<!--",
            "-->",
            "é",
            "中",
            "Status",
            "Date: ",
            "Supersedes ",
            "Superseded by ",
            "0002-x.md",
            "../",
            "|",
            "\t",
        ];
        // A fixed xorshift, so that a failure reproduces.
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut docs = Vec::new();
        for round in 0..2000 {
            let len = (next() % 120) as usize;
            let text: String = (0..len).map(|_| PIECES[(next() % PIECES.len() as u64) as usize]).collect();
            let doc = parse_adr(&format!("{round:04}-x.md"), &text);
            for section in &doc.sections {
                assert!(section.line >= 1 && section.line as usize <= text.lines().count() + 1, "{text:?}");
            }
            rules::file_findings(&doc, &|_| false);
            docs.push(doc);
        }
        let cross = rules::cross_check(&docs);
        rules::summary_text(&rules::report(&docs, &BTreeMap::new(), &cross));
        let brackets = "[".repeat(100_000) + &"](".repeat(1000);
        parse_adr("0001-x.md", &brackets);
    }
}
