//! URI templates of resources (RFC 6570 level 1, with `{+name}` for a path): the one matcher that
//! both the access policy and the resource methods use.

use serde_json::{Map, Value, json};

/// Matches a URI against an RFC 6570 level-1 template (`{name}` stands for one or more characters
/// other than `/`); the variables by name when it matches.
pub(crate) fn match_template(template: &str, uri: &str) -> Option<Map<String, Value>> {
    let mut variables = Map::new();
    let mut rest_template = template;
    let mut rest_uri = uri;
    loop {
        match rest_template.find('{') {
            None => return (rest_template == rest_uri).then_some(variables),
            Some(open) => {
                let (literal, after) = rest_template.split_at(open);
                rest_uri = rest_uri.strip_prefix(literal)?;
                let close = after.find('}')?;
                let name = &after[1..close];
                // `{+name}` (RFC 6570 reserved expansion) may hold `/`: a path.
                let (name, slashes) = match name.strip_prefix('+') {
                    Some(name) => (name, true),
                    None => (name, false),
                };
                rest_template = &after[close + 1..];
                // The variable runs to the next literal character of the template (or a `/`).
                let stop = rest_template.chars().next();
                let end = rest_uri
                    .char_indices()
                    .find(|&(_, c)| (c == '/' && !slashes) || Some(c) == stop)
                    .map_or(rest_uri.len(), |(i, _)| i);
                if end == 0 || name.is_empty() {
                    return None;
                }
                variables.insert(name.to_owned(), json!(&rest_uri[..end]));
                rest_uri = &rest_uri[end..];
            }
        }
    }
}

/// Whether `template` can produce `uri`.
pub(crate) fn template_matches(template: &str, uri: &str) -> bool {
    match_template(template, uri).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_bind_their_variables_and_refuse_what_does_not_fit() {
        let vars = match_template("test://template/{id}/data", "test://template/123/data").expect("a match");
        assert_eq!(vars["id"], "123");
        let vars = match_template("conveyor://roots/{root}/{+path}", "conveyor://roots/repo/src/lib.rs")
            .expect("a path may hold slashes");
        assert_eq!((vars["root"].as_str(), vars["path"].as_str()), (Some("repo"), Some("src/lib.rs")));
        assert!(match_template("test://template/{id}", "test://template/a/b").is_none());
        assert!(match_template("test://template/{id}/data", "test://template/123/other").is_none());
        assert!(match_template("test://template/{id}/data", "test://template//data").is_none());
        assert!(match_template("test://template/{id}/data", "test://template/1/2/data").is_none());
        let two = match_template("adr://{template}.{format}", "adr://nygard.md").expect("a match");
        assert_eq!((two["template"].as_str(), two["format"].as_str()), (Some("nygard"), Some("md")));
        assert_eq!(match_template("plain://x", "plain://x").expect("a match").len(), 0);
    }
}
