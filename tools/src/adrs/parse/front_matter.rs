//! Front matter: the `---` block at the very top, of which only top-level `key: value` scalars
//! are read.

pub(super) struct FrontField {
    pub(super) key: String,
    pub(super) value: String,
    pub(super) line: u32,
}

/// The front matter's scalar fields, and the text with the front matter's lines emptied so that
/// offsets into it fall on the same line numbers as in the original.
pub(super) fn split_front_matter(text: &str) -> (Option<Vec<FrontField>>, String) {
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

/// The front matter field `key`, when there is front matter and it has that field.
pub(super) fn front_field<'f>(front: Option<&'f [FrontField]>, key: &str) -> Option<&'f FrontField> {
    front?.iter().find(|f| f.key == key)
}
