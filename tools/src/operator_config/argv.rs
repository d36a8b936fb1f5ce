//! Argv templates: a tool's command line with `{name}` placeholders that a call's arguments fill,
//! each item becoming exactly one argument.

use serde_json::{Map, Value};

use super::ArgvError;

/// A piece of one argv template item.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Piece<'a> {
    Text(String),
    Argument(&'a str),
}

/// Splits a template item into literal text and `{name}` placeholders; `{{` and `}}` are literal
/// braces. The error completes "item ITEM ...".
pub(super) fn pieces(item: &str) -> Result<Vec<Piece<'_>>, String> {
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut rest = item;
    while let Some(c) = rest.chars().next() {
        match c {
            '{' if rest.starts_with("{{") => {
                text.push('{');
                rest = &rest[2..];
            }
            '}' if rest.starts_with("}}") => {
                text.push('}');
                rest = &rest[2..];
            }
            '{' => {
                let Some(end) = rest.find('}') else {
                    return Err("has a `{` that is not closed; write a literal brace as `{{`".into());
                };
                let name = &rest[1..end];
                if !is_identifier(name) {
                    return Err(format!(
                        "has the placeholder `{{{name}}}`, but a placeholder is `{{name}}` with a name of \
                         letters, digits and `_`; write a literal brace as `{{{{` or `}}}}`"
                    ));
                }
                if !text.is_empty() {
                    pieces.push(Piece::Text(std::mem::take(&mut text)));
                }
                pieces.push(Piece::Argument(name));
                rest = &rest[end + 1..];
            }
            '}' => return Err("has a `}` that closes nothing; write a literal brace as `}}`".into()),
            _ => {
                text.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
    }
    if !text.is_empty() || pieces.is_empty() {
        pieces.push(Piece::Text(text));
    }
    Ok(pieces)
}

fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The command line for a call: each template item becomes exactly one argument, never split on
/// spaces. `{name}` stands for the argument of that name: a string as it is, a number or boolean
/// as its JSON text; when the call does not give it (or gives `null`), the default in `schema`'s
/// `properties.NAME.default`. An item that is exactly `{name}` for an argument absent with no
/// default is left out (an optional argument); a placeholder within a longer item must have a
/// value. Arrays and objects are refused, as is a NUL byte anywhere.
pub fn fill_argv(
    template: &[String],
    arguments: &Map<String, Value>,
    schema: &Value,
) -> Result<Vec<String>, ArgvError> {
    let mut argv = Vec::with_capacity(template.len());
    for item in template {
        if item.contains('\0') {
            return Err(ArgvError::Template { item: item.clone(), problem: "contains a NUL byte".into() });
        }
        let pieces = pieces(item).map_err(|problem| ArgvError::Template { item: item.clone(), problem })?;
        if let [Piece::Argument(name)] = pieces.as_slice() {
            if let Some(value) = argument_value(name, arguments, schema)? {
                argv.push(value);
            }
            continue;
        }
        let mut filled = String::new();
        for piece in &pieces {
            match piece {
                Piece::Text(text) => filled.push_str(text),
                Piece::Argument(name) => match argument_value(name, arguments, schema)? {
                    Some(value) => filled.push_str(&value),
                    None => return Err(ArgvError::Missing { name: (*name).to_owned(), item: item.clone() }),
                },
            }
        }
        argv.push(filled);
    }
    Ok(argv)
}

/// The text an argument stands for on the command line; `None` when neither the call nor the
/// schema's default gives it.
fn argument_value(
    name: &str,
    arguments: &Map<String, Value>,
    schema: &Value,
) -> Result<Option<String>, ArgvError> {
    let given = arguments.get(name).filter(|v| !v.is_null());
    let default = || schema.get("properties")?.get(name)?.get("default").filter(|v| !v.is_null());
    let Some(value) = given.or_else(default) else { return Ok(None) };
    let text = match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Array(_) => return Err(ArgvError::NotScalar { name: name.to_owned(), kind: "an array" }),
        Value::Object(_) => return Err(ArgvError::NotScalar { name: name.to_owned(), kind: "an object" }),
        Value::Null => return Ok(None),
    };
    if text.contains('\0') {
        return Err(ArgvError::NulByte { name: name.to_owned() });
    }
    Ok(Some(text))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::operator_config::tests::strings;

    fn object(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            other => panic!("not an object: {other}"),
        }
    }

    fn grep_schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string"},
                "path": {"type": "string", "default": "."},
                "context": {"type": "integer"},
                "ignore_case": {"type": "boolean", "default": false},
            }
        })
    }

    #[test]
    fn fill_argv_substitutes_each_item_whole() {
        let template = strings(&["grep", "-rn", "--context={context}", "--", "{pattern}", "{path}"]);
        let arguments = object(json!({"pattern": "a b; rm -rf /", "path": "src dir", "context": 3}));
        assert_eq!(
            fill_argv(&template, &arguments, &grep_schema()),
            Ok(strings(&["grep", "-rn", "--context=3", "--", "a b; rm -rf /", "src dir"]))
        );
    }

    #[test]
    fn fill_argv_uses_defaults_and_drops_absent_optional_items() {
        let template = strings(&["grep", "{context}", "{pattern}", "{path}", "--ignore-case={ignore_case}"]);
        let arguments = object(json!({"pattern": "x", "context": null}));
        assert_eq!(
            fill_argv(&template, &arguments, &grep_schema()),
            Ok(strings(&["grep", "x", ".", "--ignore-case=false"]))
        );
    }

    #[test]
    fn fill_argv_scalars_by_their_json_text() {
        let schema = json!({"type": "object", "properties": {"n": {}, "f": {}, "b": {}, "s": {}}});
        let template = strings(&["p", "{n}", "{f}", "{b}", "{s}", "{n}{s}", "{{{n}}}"]);
        let arguments = object(json!({"n": -42, "f": 1.5, "b": true, "s": ""}));
        assert_eq!(
            fill_argv(&template, &arguments, &schema),
            Ok(strings(&["p", "-42", "1.5", "true", "", "-42", "{-42}"]))
        );
    }

    #[test]
    fn fill_argv_refusals() {
        let schema = grep_schema();
        let template = strings(&["grep", "--context={context}", "{pattern}"]);
        let missing = fill_argv(&template, &object(json!({"pattern": "x"})), &schema);
        assert_eq!(
            missing,
            Err(ArgvError::Missing { name: "context".into(), item: "--context={context}".into() })
        );
        let message = missing.expect_err("missing").to_string();
        assert_eq!(
            message,
            "argument `context` is missing, and the command-line item \"--context={context}\" needs it; pass \
             it, or give it a default in the tool's input schema"
        );

        let template = strings(&["grep", "{pattern}"]);
        let array = fill_argv(&template, &object(json!({"pattern": ["a", "b"]})), &schema);
        assert_eq!(array, Err(ArgvError::NotScalar { name: "pattern".into(), kind: "an array" }));
        assert_eq!(
            array.expect_err("array").to_string(),
            "argument `pattern` is an array; a command-line argument can only be a string, a number or a boolean"
        );
        let object_argument = fill_argv(&template, &object(json!({"pattern": {"a": 1}})), &schema);
        assert_eq!(object_argument, Err(ArgvError::NotScalar { name: "pattern".into(), kind: "an object" }));

        let nul = fill_argv(&template, &object(json!({"pattern": "a\u{0}b"})), &schema);
        assert_eq!(nul, Err(ArgvError::NulByte { name: "pattern".into() }));
        assert!(nul.expect_err("nul").to_string().contains("NUL byte"));

        let array_default = json!({"type": "object", "properties": {"pattern": {"default": [1]}}});
        assert_eq!(
            fill_argv(&template, &Map::new(), &array_default),
            Err(ArgvError::NotScalar { name: "pattern".into(), kind: "an array" })
        );

        let broken = fill_argv(&strings(&["grep", "{pattern"]), &Map::new(), &schema);
        assert!(matches!(&broken, Err(ArgvError::Template { item, .. }) if item == "{pattern"), "{broken:?}");
        assert_eq!(
            broken.expect_err("broken").to_string(),
            "the command-line item \"{pattern\" has a `{` that is not closed; write a literal brace as `{{`"
        );
    }

    #[test]
    fn pieces_of_templates() {
        assert_eq!(pieces(""), Ok(vec![Piece::Text(String::new())]));
        assert_eq!(pieces("{a}"), Ok(vec![Piece::Argument("a")]));
        assert_eq!(
            pieces("x{a}é{_b1}"),
            Ok(vec![
                Piece::Text("x".into()),
                Piece::Argument("a"),
                Piece::Text("é".into()),
                Piece::Argument("_b1")
            ])
        );
        assert_eq!(pieces("{{a}}"), Ok(vec![Piece::Text("{a}".into())]));
        assert!(pieces("{}").is_err());
        assert!(pieces("{1a}").is_err());
        assert!(pieces("{a-b}").is_err());
        assert!(pieces("{a").is_err());
        assert!(pieces("a}").is_err());
    }
}
