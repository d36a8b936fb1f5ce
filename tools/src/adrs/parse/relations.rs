//! Relations: the lines that say a record supersedes or amends another, or is superseded or
//! amended by one, and the other records a record merely mentions.

use std::collections::HashSet;
use std::ops::Range;

use super::front_matter::FrontField;
use super::markdown::Markdown;
use super::metadata::{parse_field, strip_list_marker};
use super::paths::{link_path, target_number};
use super::{Relation, RelationKind};

/// Every relation the record states, each once, in the order written: front matter `status`
/// first, then the body outside code and HTML blocks. A record mentioning its own number is not
/// a relation.
pub(super) fn read_relations(
    front_status: Option<&FrontField>,
    raw: &[&str],
    md: &Markdown,
    number: Option<u32>,
) -> Vec<Relation> {
    let mut relations = Vec::new();
    if let Some(f) = front_status {
        relations_in(&f.value, f.line, &mut relations);
    }
    for (i, text) in raw.iter().enumerate() {
        let line = i as u32 + 1;
        if !md.is_hidden(line) {
            relations_in(text, line, &mut relations);
        }
    }
    let mut seen = HashSet::new();
    relations
        .into_iter()
        .filter(|r| !(r.kind == RelationKind::Mentions && r.number.is_some() && r.number == number))
        .filter(|r| seen.insert(r.clone()))
        .collect()
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
