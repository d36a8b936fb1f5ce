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
//!
//! The steps, one submodule each: `front_matter` splits off the front matter; `markdown` finds
//! headings, links, and the lines inside code or HTML blocks; `metadata` reads number, title,
//! status, date and format; `relations` finds the other records a record names; `paths` reads
//! record file names and link targets.

use serde::{Deserialize, Serialize};

mod front_matter;
mod markdown;
mod metadata;
mod paths;
mod relations;
#[cfg(test)]
pub(super) mod tests;

use front_matter::{front_field, split_front_matter};
use markdown::{LineIndex, scan_markdown};
pub use metadata::section_key;
use metadata::{detect_format, metadata, preamble_fields, read_number, read_title};
pub use paths::{is_adr_path, link_path, number_from_file_name, target_number};
use relations::read_relations;

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
    let front = front.as_deref();
    let lines = LineIndex::new(&body);
    let raw: Vec<&str> = body.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)).collect();
    let md = scan_markdown(&body, &lines);

    let title = read_title(&md, front);
    let (number, number_line) = read_number(path, &title, front);
    let preamble = preamble_fields(&md, &raw, title.heading);
    let (status, status_line) = metadata("status", front, &preamble, &md, &raw).unzip();
    let (date, date_line) = metadata("date", front, &preamble, &md, &raw).unzip();
    let format = detect_format(&md, front.is_some());
    let relations = read_relations(front_field(front, "status"), &raw, &md, number);

    AdrDoc {
        path: path.to_owned(),
        number,
        number_line,
        title: title.text,
        title_line: title.line,
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
