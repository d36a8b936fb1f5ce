//! A tool's arguments from the command line: `--json '{...}'` for the whole object, and
//! `--arg key=value` for one property, its value typed by the property's schema in the tool's
//! input schema (`seconds=5` is the number 5 when `seconds` is a number, the string "5" when it is
//! a string).

use serde_json::{Map, Number, Value};

use crate::exit::ClientError;

/// What the `--json` flags of `conveyor call` ask for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JsonFlags {
    /// The JSON object of arguments, as given.
    pub arguments: Option<String>,
    /// Print the whole result as JSON.
    pub print_json: bool,
}

/// Sorts the `--json` flags: each `--json` without a value (an empty one) asks for JSON output,
/// one with a value gives the arguments, as `--json-args` does. Two objects are refused rather
/// than merged, since it is not clear which the caller meant.
pub fn json_flags(json: &[String], json_args: Option<&str>) -> Result<JsonFlags, ClientError> {
    let mut flags = JsonFlags::default();
    let given = json.iter().filter(|value| !value.is_empty()).map(String::as_str).chain(json_args);
    for object in given {
        if flags.arguments.is_some() {
            return Err(ClientError::usage(
                "arguments given as JSON twice; give one object (with --json '{...}' or --json-args) and \
                 --arg for the rest",
            ));
        }
        flags.arguments = Some(object.to_owned());
    }
    flags.print_json = json.iter().any(String::is_empty);
    Ok(flags)
}

/// The arguments of one call: `json` first (an object), then each `key=value` over it.
pub fn build(
    input_schema: &Value,
    json: Option<&str>,
    pairs: &[String],
) -> Result<Map<String, Value>, ClientError> {
    let mut arguments = match json {
        None => Map::new(),
        Some(text) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(object)) => object,
            Ok(other) => {
                return Err(ClientError::usage(format!(
                    "--json must be a JSON object of arguments, not {}",
                    kind_of(&other)
                )));
            }
            Err(e) => return Err(ClientError::usage(format!("--json is not valid JSON: {e}"))),
        },
    };
    let properties = input_schema.get("properties").and_then(Value::as_object);
    let closed = input_schema.get("additionalProperties") == Some(&Value::Bool(false));
    for pair in pairs {
        let Some((key, raw)) = pair.split_once('=') else {
            return Err(ClientError::usage(format!("--arg {pair:?} must be KEY=VALUE")));
        };
        let key = key.trim();
        if key.is_empty() {
            return Err(ClientError::usage(format!("--arg {pair:?} names no argument before `=`")));
        }
        let value = match properties.and_then(|p| p.get(key)) {
            Some(schema) => typed(key, raw, schema)?,
            // A tool that lists its properties takes only those.
            None if closed || properties.is_some_and(|p| !p.is_empty()) => {
                return Err(unknown(key, properties));
            }
            // A tool that describes no properties takes what it is given: JSON where the value
            // reads as JSON, a string otherwise.
            None => serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned())),
        };
        arguments.insert(key.to_owned(), value);
    }
    let missing: Vec<String> = input_schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|name| !arguments.contains_key(*name))
        .map(|name| describe(name, properties.and_then(|p| p.get(name))))
        .collect();
    if !missing.is_empty() {
        return Err(ClientError::usage(format!(
            "missing required argument{}: {} (give each as --arg KEY=VALUE)",
            if missing.len() == 1 { "" } else { "s" },
            missing.join(", ")
        )));
    }
    Ok(arguments)
}

fn unknown(key: &str, properties: Option<&Map<String, Value>>) -> ClientError {
    let known: Vec<String> =
        properties.into_iter().flatten().map(|(name, schema)| describe(name, Some(schema))).collect();
    ClientError::usage(format!("the tool takes no argument `{key}`; it takes: {}", known.join(", ")))
}

/// `name (type: description)`, for a message.
fn describe(name: &str, schema: Option<&Value>) -> String {
    let ty = schema.and_then(type_of).unwrap_or("any");
    match schema.and_then(|s| s.get("description")).and_then(Value::as_str) {
        Some(description) => format!("{name} ({ty}: {description})"),
        None => format!("{name} ({ty})"),
    }
}

/// The JSON Schema type of a property: its `type`, or the first non-null one of a list.
pub(crate) fn type_of(schema: &Value) -> Option<&str> {
    match schema.get("type") {
        Some(Value::String(ty)) => Some(ty.as_str()),
        Some(Value::Array(types)) => types.iter().filter_map(Value::as_str).find(|t| *t != "null"),
        _ => None,
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `raw` as the value `schema` describes.
pub(crate) fn typed(key: &str, raw: &str, schema: &Value) -> Result<Value, ClientError> {
    let wrong = |what: &str| ClientError::usage(format!("`{key}` must be {what}, not {raw:?}"));
    let value = match type_of(schema) {
        Some("string") => Value::String(raw.to_owned()),
        Some("integer") => raw.trim().parse::<i64>().map(Value::from).map_err(|_| wrong("an integer"))?,
        Some("number") => raw
            .trim()
            .parse::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .map(|n| {
                // 5 stays an integer on the wire, so a schema of `integer | number` accepts it.
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 9e15)
                    .map_or(Value::Number(n.clone()), |f| Value::from(f as i64))
            })
            .ok_or_else(|| wrong("a number"))?,
        Some("boolean") => match raw.trim().to_ascii_lowercase().as_str() {
            "true" | "yes" | "y" | "1" | "on" => Value::Bool(true),
            "false" | "no" | "n" | "0" | "off" => Value::Bool(false),
            _ => return Err(wrong("true or false")),
        },
        Some("array") if raw.trim_start().starts_with('[') => match serde_json::from_str(raw) {
            Ok(Value::Array(items)) => Value::Array(items),
            _ => return Err(wrong("a JSON array, or values separated by commas")),
        },
        Some("array") => {
            let items = schema.get("items").cloned().unwrap_or(Value::Null);
            let parts: Vec<&str> = if raw.is_empty() { Vec::new() } else { raw.split(',').collect() };
            Value::Array(
                parts.into_iter().map(|part| typed(key, part.trim(), &items)).collect::<Result<_, _>>()?,
            )
        }
        Some("object") => match serde_json::from_str(raw) {
            Ok(Value::Object(object)) => Value::Object(object),
            _ => return Err(wrong("a JSON object")),
        },
        _ => serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned())),
    };
    if let Some(choices) = schema.get("enum").and_then(Value::as_array)
        && !choices.contains(&value)
    {
        let list: Vec<String> = choices.iter().map(Value::to_string).collect();
        return Err(ClientError::usage(format!("`{key}` must be one of {}, not {raw:?}", list.join(", "))));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "seconds": {"type": "number", "description": "How long"},
                "count": {"type": "integer"},
                "label": {"type": "string"},
                "loud": {"type": "boolean"},
                "tags": {"type": "array", "items": {"type": "integer"}},
                "level": {"type": "string", "enum": ["low", "high"]},
                "extra": {"type": "object"}
            },
            "required": ["seconds"]
        })
    }

    fn pairs(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn values_are_typed_by_the_schema() {
        let built = build(
            &schema(),
            None,
            &pairs(&[
                "seconds=2.5",
                "count=3",
                "label=42",
                "loud=yes",
                "tags=1,2,3",
                "level=high",
                "extra={\"a\":1}",
            ]),
        )
        .expect("valid");
        assert_eq!(
            Value::Object(built),
            json!({"seconds": 2.5, "count": 3, "label": "42", "loud": true, "tags": [1, 2, 3], "level": "high", "extra": {"a": 1}})
        );
        let whole = build(&schema(), None, &pairs(&["seconds=5"])).expect("valid");
        assert_eq!(whole["seconds"], json!(5), "a whole number stays an integer on the wire");
    }

    #[test]
    fn a_value_may_hold_equals_signs_and_shell_characters_literally() {
        let built = build(&schema(), None, &pairs(&["seconds=1", "label=a=b; rm -rf $HOME"])).expect("valid");
        assert_eq!(built["label"], json!("a=b; rm -rf $HOME"));
    }

    #[test]
    fn a_json_flag_without_a_value_prints_json_and_one_with_a_value_gives_the_arguments() {
        let flags = |json: &[&str], json_args: Option<&str>| {
            json_flags(&json.iter().map(|s| s.to_string()).collect::<Vec<_>>(), json_args)
        };
        assert_eq!(flags(&[], None).expect("accepted"), JsonFlags::default());
        assert_eq!(flags(&[""], None).expect("accepted"), JsonFlags { arguments: None, print_json: true });
        assert_eq!(
            flags(&["{\"n\":1}"], None).expect("accepted"),
            JsonFlags { arguments: Some("{\"n\":1}".into()), print_json: false }
        );
        assert_eq!(
            flags(&["{}", ""], None).expect("accepted"),
            JsonFlags { arguments: Some("{}".into()), print_json: true }
        );
        assert_eq!(
            flags(&[""], Some("{}")).expect("accepted"),
            JsonFlags { arguments: Some("{}".into()), print_json: true }
        );
        let twice = flags(&["{}"], Some("{}")).expect_err("two objects");
        assert!(twice.message.contains("twice"), "{}", twice.message);
        assert!(flags(&["{}", "{}"], None).is_err());
    }

    #[test]
    fn json_comes_first_and_args_override_it() {
        let built =
            build(&schema(), Some(r#"{"seconds": 1, "label": "x"}"#), &pairs(&["label=y"])).expect("valid");
        assert_eq!(Value::Object(built), json!({"seconds": 1, "label": "y"}));
    }

    #[test]
    fn bad_input_gets_a_message_that_says_what_to_do() {
        let message = |json: Option<&str>, list: &[&str]| {
            build(&schema(), json, &pairs(list)).expect_err("refused").message
        };
        assert!(message(None, &["seconds=soon"]).contains("`seconds` must be a number"));
        assert!(message(None, &["seconds=1", "count=1.5"]).contains("an integer"));
        assert!(message(None, &["seconds=1", "loud=maybe"]).contains("true or false"));
        assert!(message(None, &["seconds=1", "level=medium"]).contains(r#"one of "low", "high""#));
        assert!(message(None, &["seconds=1", "colour=red"]).contains("takes no argument `colour`"));
        assert!(message(None, &["seconds"]).contains("KEY=VALUE"));
        assert!(message(None, &[]).contains("missing required argument: seconds (number: How long)"));
        assert!(message(Some("[1]"), &["seconds=1"]).contains("JSON object"));
        assert!(message(Some("{"), &["seconds=1"]).contains("not valid JSON"));
    }

    #[test]
    fn a_tool_without_properties_takes_json_or_strings() {
        let open = json!({"type": "object"});
        let built = build(&open, None, &pairs(&["n=3", "s=hello", "o={\"k\":true}"])).expect("valid");
        assert_eq!(Value::Object(built), json!({"n": 3, "s": "hello", "o": {"k": true}}));
    }
}
