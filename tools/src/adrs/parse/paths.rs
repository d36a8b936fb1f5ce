//! Record file names and link targets: which files are records, the number a file name carries,
//! and the path a relative link points to.

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
