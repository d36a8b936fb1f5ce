//! Number, title, status, date and format: each read from the first place that gives it, in the
//! order the parent module's documentation lists.

use super::front_matter::{FrontField, front_field};
use super::markdown::Markdown;
use super::paths::number_from_file_name;
use super::{Format, MADR_SECTIONS, NYGARD_SECTIONS};

/// The record's title, where it was read, and the number it opened with.
pub(super) struct Title {
    /// The level-1 heading it came from, as an index into the headings.
    pub(super) heading: Option<usize>,
    pub(super) text: Option<String>,
    pub(super) line: Option<u32>,
    pub(super) number: Option<u32>,
}

/// The first level-1 heading, without its number, else front matter `title`.
pub(super) fn read_title(md: &Markdown, front: Option<&[FrontField]>) -> Title {
    let title_heading = md.headings.iter().position(|h| h.level == 1);
    let (text, line, number) = match title_heading {
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
        None => match front_field(front, "title") {
            Some(f) => (Some(f.value.clone()), Some(f.line), None),
            None => (None, None, None),
        },
    };
    Title { heading: title_heading, text, line, number }
}

/// The record's number and the line it was read on (`None` for the file name): the file name,
/// else the title, else front matter `number`.
pub(super) fn read_number(
    path: &str,
    title: &Title,
    front: Option<&[FrontField]>,
) -> (Option<u32>, Option<u32>) {
    if let Some(n) = number_from_file_name(path) {
        (Some(n), None)
    } else if let Some(n) = title.number {
        (Some(n), title.line)
    } else if let Some(f) = front_field(front, "number") {
        let n = f.value.parse().ok().or_else(|| title_number(&f.value).map(|(n, _)| n));
        (n, n.and(Some(f.line)))
    } else {
        (None, None)
    }
}

/// The `key: value` fields of the preamble, with their lines: key (lower case), value, line.
pub(super) fn preamble_fields(
    md: &Markdown,
    raw: &[&str],
    title_heading: Option<usize>,
) -> Vec<(String, String, u32)> {
    // The preamble ends at the first heading that is not the title.
    let preamble_end = md
        .headings
        .iter()
        .enumerate()
        .find(|(i, _)| Some(*i) != title_heading)
        .map_or(raw.len() as u32 + 1, |(_, h)| h.line);
    let title_lines = title_heading.map(|i| md.headings[i].line..=md.headings[i].end_line);
    let mut fields = Vec::new();
    for line in 1..preamble_end {
        if md.is_hidden(line) || title_lines.as_ref().is_some_and(|r| r.contains(&line)) {
            continue;
        }
        if let Some((key, value)) = raw.get(line as usize - 1).and_then(|l| parse_field(l))
            && !value.is_empty()
        {
            fields.push((key, value, line));
        }
    }
    fields
}

/// A status or date field (`key` in lower case) and its line. Records keep these in one of three
/// places, tried in this order: front matter (MADR 3 and 4), a field in the preamble (MADR 2's
/// list, bold inline fields, adr-tools' `Date:`), or the first paragraph of a section of that name
/// (Nygard's `## Status`).
pub(super) fn metadata(
    key: &str,
    front: Option<&[FrontField]>,
    preamble: &[(String, String, u32)],
    md: &Markdown,
    raw: &[&str],
) -> Option<(String, u32)> {
    front_matter_value(front, key)
        .or_else(|| preamble_value(preamble, key))
        .or_else(|| section_value(md, raw, key))
}

fn front_matter_value(front: Option<&[FrontField]>, key: &str) -> Option<(String, u32)> {
    front_field(front, key).map(|f| (f.value.clone(), f.line))
}

fn preamble_value(preamble: &[(String, String, u32)], key: &str) -> Option<(String, u32)> {
    preamble.iter().find(|(k, _, _)| k == key).map(|(_, value, line)| (value.clone(), *line))
}

fn section_value(md: &Markdown, raw: &[&str], key: &str) -> Option<(String, u32)> {
    let i = md.headings.iter().position(|h| h.level > 1 && section_key(&h.title) == key)?;
    section_text(md, i, raw)
}

/// MADR when a MADR-only section is present, else Nygard when one of Nygard's is, else MADR when
/// there is front matter, else unknown.
pub(super) fn detect_format(md: &Markdown, has_front_matter: bool) -> Format {
    let keys: Vec<String> = md.headings.iter().map(|h| section_key(&h.title)).collect();
    let has = |names: &[&str]| keys.iter().any(|k| names.contains(&k.as_str()));
    if has(&MADR_SECTIONS) {
        Format::Madr
    } else if has(&NYGARD_SECTIONS) {
        Format::Nygard
    } else if has_front_matter {
        Format::Madr
    } else {
        Format::Unknown
    }
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

/// The number a title opens with, and the title without it: `1. Title`, `ADR-007: Title`,
/// `ADR 7 - Title`. A bare number needs punctuation after it, so that `2024 roadmap` keeps its
/// year.
pub(super) fn title_number(title: &str) -> Option<(u32, &str)> {
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

/// A `key: value` field line: `Date: 2018-03-12`, `* Status: accepted`, `**Status**: Accepted`,
/// `**Status:** Proposed`. The key comes back in lower case.
pub(super) fn parse_field(line: &str) -> Option<(String, String)> {
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

pub(super) fn strip_list_marker(s: &str) -> &str {
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
