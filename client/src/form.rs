//! An elicitation asked in the terminal: the message, then one field at a time from the requested
//! schema (text, numbers, yes/no, a choice from a list, several choices), with defaults, until the
//! person has answered every required field, declined (`!decline`) or cancelled (`!cancel`).
//! Prompts go to stderr, so that stdout keeps only the tool's result; answers are read a line at
//! a time, from a terminal or a pipe alike.

use std::io::Write;

use serde_json::{Map, Value, json};

use crate::arguments::{type_of, typed};

/// Where answers come from: a line at a time, `None` at end of input.
pub trait Lines {
    fn next_line(&mut self) -> Option<String>;
}

/// Standard input.
pub struct Stdin;

impl Lines for Stdin {
    fn next_line(&mut self) -> Option<String> {
        let mut line = String::new();
        match std::io::stdin().read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line.trim_end_matches(['\n', '\r']).to_owned()),
        }
    }
}

/// What the person typed instead of an answer.
enum Escape {
    Decline,
    Cancel,
}

fn escape(line: &str) -> Option<Escape> {
    match line.trim() {
        "!decline" => Some(Escape::Decline),
        "!cancel" => Some(Escape::Cancel),
        _ => None,
    }
}

/// Asks the elicitation `params` (`message`, `mode`, `requestedSchema`) and returns the
/// `ElicitResult` to send back: `{"action": "accept", "content": {...}}`, or decline, or cancel.
/// End of input is a cancel.
pub fn ask(params: &Value, input: &mut dyn Lines, out: &mut dyn Write) -> std::io::Result<Value> {
    let message = params.get("message").and_then(Value::as_str).unwrap_or("The tool asks for input.");
    writeln!(out)?;
    writeln!(out, "{}", console::style(format!("? {message}")).bold().for_stderr())?;
    if params.get("mode").and_then(Value::as_str) == Some("url") {
        let url = params.get("url").and_then(Value::as_str).unwrap_or_default();
        writeln!(out, "  Open {url} and follow it; then press Enter (or type !decline).")?;
        out.flush()?;
        return Ok(match input.next_line() {
            None => json!({"action": "cancel"}),
            Some(line) => match escape(&line) {
                Some(Escape::Decline) => json!({"action": "decline"}),
                Some(Escape::Cancel) => json!({"action": "cancel"}),
                None => json!({"action": "accept"}),
            },
        });
    }
    let schema = params.get("requestedSchema").cloned().unwrap_or_else(|| json!({}));
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    writeln!(
        out,
        "{}",
        console::style("  (Enter keeps a default; !decline refuses to answer; !cancel stops the question)")
            .dim()
            .for_stderr()
    )?;
    let mut content = Map::new();
    let empty = Map::new();
    let properties = schema.get("properties").and_then(Value::as_object).unwrap_or(&empty);
    for (name, field) in properties {
        let needed = required.contains(&name.as_str());
        match ask_field(name, field, needed, input, out)? {
            Answer::Value(value) => {
                content.insert(name.clone(), value);
            }
            Answer::Skipped => {}
            Answer::Decline => return Ok(json!({"action": "decline"})),
            Answer::Cancel => return Ok(json!({"action": "cancel"})),
        }
    }
    Ok(json!({"action": "accept", "content": content}))
}

enum Answer {
    Value(Value),
    Skipped,
    Decline,
    Cancel,
}

fn ask_field(
    name: &str,
    field: &Value,
    required: bool,
    input: &mut dyn Lines,
    out: &mut dyn Write,
) -> std::io::Result<Answer> {
    let title = field.get("title").and_then(Value::as_str).unwrap_or(name);
    let description = field.get("description").and_then(Value::as_str);
    let default = field.get("default");
    let choices = choices(field);
    let multiple = type_of(field) == Some("array");
    loop {
        write!(out, "  {}", console::style(title).cyan().for_stderr())?;
        if let Some(description) = description {
            write!(out, " ({description})")?;
        }
        if !required {
            write!(out, " [optional]")?;
        }
        if !choices.is_empty() {
            writeln!(out)?;
            for (i, (_, label)) in choices.iter().enumerate() {
                writeln!(out, "    {}) {label}", i + 1)?;
            }
            write!(out, "    {}", if multiple { "numbers, separated by commas" } else { "number" })?;
        } else if type_of(field) == Some("boolean") {
            write!(
                out,
                " [{}]",
                match default.and_then(Value::as_bool) {
                    Some(true) => "Y/n",
                    Some(false) => "y/N",
                    None => "y/n",
                }
            )?;
        }
        if let Some(default) = default.filter(|_| type_of(field) != Some("boolean")) {
            let shown = default.as_str().map(str::to_owned).unwrap_or_else(|| default.to_string());
            write!(out, " [{shown}]")?;
        }
        write!(out, ": ")?;
        out.flush()?;
        let Some(line) = input.next_line() else { return Ok(Answer::Cancel) };
        match escape(&line) {
            Some(Escape::Decline) => return Ok(Answer::Decline),
            Some(Escape::Cancel) => return Ok(Answer::Cancel),
            None => {}
        }
        let line = line.trim();
        if line.is_empty() {
            match (default, required) {
                (Some(default), _) => return Ok(Answer::Value(default.clone())),
                (None, false) => return Ok(Answer::Skipped),
                (None, true) => {
                    writeln!(
                        out,
                        "    {}",
                        console::style("an answer is needed here").yellow().for_stderr()
                    )?;
                    continue;
                }
            }
        }
        let parsed = if choices.is_empty() {
            typed(name, line, field).map_err(|e| e.message)
        } else {
            pick(line, &choices, multiple)
        };
        match parsed.and_then(|value| check_bounds(field, value)) {
            Ok(value) => return Ok(Answer::Value(value)),
            Err(why) => writeln!(out, "    {}", console::style(why).yellow().for_stderr())?,
        }
    }
}

/// The choices a field offers, as (value, label): `enum` (with `enumNames`), `oneOf`/`anyOf` of
/// `const` and `title`, and the same under `items` for a multi-select.
fn choices(field: &Value) -> Vec<(Value, String)> {
    let field = if type_of(field) == Some("array") { field.get("items").unwrap_or(field) } else { field };
    if let Some(values) = field.get("enum").and_then(Value::as_array) {
        let names = field.get("enumNames").and_then(Value::as_array);
        return values
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let label = names
                    .and_then(|n| n.get(i))
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .unwrap_or_else(|| v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string()));
                (v.clone(), label)
            })
            .collect();
    }
    let options = field.get("oneOf").or_else(|| field.get("anyOf")).and_then(Value::as_array);
    options
        .into_iter()
        .flatten()
        .filter_map(|option| {
            let value = option.get("const")?.clone();
            let label =
                option.get("title").and_then(Value::as_str).map(str::to_owned).unwrap_or_else(|| {
                    value.as_str().map(str::to_owned).unwrap_or_else(|| value.to_string())
                });
            Some((value, label))
        })
        .collect()
}

fn pick(line: &str, choices: &[(Value, String)], multiple: bool) -> Result<Value, String> {
    let one = |part: &str| -> Result<Value, String> {
        let part = part.trim();
        if let Ok(n) = part.parse::<usize>()
            && (1..=choices.len()).contains(&n)
        {
            return Ok(choices[n - 1].0.clone());
        }
        // The value or its label, typed out, is an answer too.
        choices
            .iter()
            .find(|(value, label)| value.as_str() == Some(part) || label == part)
            .map(|(value, _)| value.clone())
            .ok_or_else(|| format!("choose a number from 1 to {}", choices.len()))
    };
    if multiple {
        line.split(',')
            .filter(|p| !p.trim().is_empty())
            .map(one)
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array)
    } else {
        one(line)
    }
}

/// The bounds a form schema may set: minimum/maximum, minLength/maxLength, minItems/maxItems.
fn check_bounds(field: &Value, value: Value) -> Result<Value, String> {
    let get = |k: &str| field.get(k).and_then(Value::as_f64);
    if let Some(n) = value.as_f64() {
        if let Some(min) = get("minimum").filter(|min| n < *min) {
            return Err(format!("at least {min}"));
        }
        if let Some(max) = get("maximum").filter(|max| n > *max) {
            return Err(format!("at most {max}"));
        }
    }
    if let Some(s) = value.as_str() {
        let length = s.chars().count() as f64;
        if let Some(min) = get("minLength").filter(|min| length < *min) {
            return Err(format!("at least {min} characters"));
        }
        if let Some(max) = get("maxLength").filter(|max| length > *max) {
            return Err(format!("at most {max} characters"));
        }
    }
    if let Some(items) = value.as_array() {
        let count = items.len() as f64;
        if let Some(min) = get("minItems").filter(|min| count < *min) {
            return Err(format!("choose at least {min}"));
        }
        if let Some(max) = get("maxItems").filter(|max| count > *max) {
            return Err(format!("choose at most {max}"));
        }
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Script(std::collections::VecDeque<&'static str>);

    impl Lines for Script {
        fn next_line(&mut self) -> Option<String> {
            self.0.pop_front().map(str::to_owned)
        }
    }

    fn run(params: Value, lines: &[&'static str]) -> (Value, String) {
        let mut input = Script(lines.iter().copied().collect());
        let mut out = Vec::new();
        let answer = ask(&params, &mut input, &mut out).expect("writes to memory");
        (answer, String::from_utf8_lossy(&out).into_owned())
    }

    #[test]
    fn every_field_kind_is_asked_and_typed() {
        let params = json!({
            "mode": "form",
            "message": "Tell me about the release",
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "title": "Name", "minLength": 2},
                    "count": {"type": "integer", "minimum": 1, "maximum": 5},
                    "ship": {"type": "boolean", "default": true},
                    "level": {"type": "string", "oneOf": [{"const": "lo", "title": "Low"}, {"const": "hi", "title": "High"}]},
                    "regions": {"type": "array", "items": {"type": "string", "enum": ["eu", "us", "ap"]}},
                    "note": {"type": "string", "default": "none"}
                },
                "required": ["name", "count", "level"]
            }
        });
        // Fields come in name order (the schema reaches the client as a map). count is asked again
        // after two wrong answers; name after an empty and a one-letter answer.
        let (answer, shown) = run(params, &["9", "two", "3", "2", "", "x", "Ada", "", "1,3", ""]);
        assert_eq!(
            answer,
            json!({"action": "accept", "content": {"count": 3, "level": "hi", "name": "Ada", "note": "none", "regions": ["eu", "ap"], "ship": true}})
        );
        assert!(shown.contains("Tell me about the release"), "{shown}");
        assert!(shown.contains("an answer is needed here"), "{shown}");
        assert!(shown.contains("at least 2 characters"), "{shown}");
        assert!(shown.contains("at most 5"), "{shown}");
        assert!(shown.contains("1) Low"), "{shown}");
    }

    #[test]
    fn decline_cancel_and_end_of_input() {
        let params = json!({"message": "Delete?", "requestedSchema": {"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}});
        assert_eq!(run(params.clone(), &["!decline"]).0, json!({"action": "decline"}));
        assert_eq!(run(params.clone(), &["!cancel"]).0, json!({"action": "cancel"}));
        assert_eq!(run(params.clone(), &[]).0, json!({"action": "cancel"}));
        assert_eq!(run(params, &["y"]).0, json!({"action": "accept", "content": {"confirm": true}}));
    }
}
