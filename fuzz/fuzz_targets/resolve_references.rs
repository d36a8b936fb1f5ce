//! `$from` resolution within a worker's byte bounds (`dag::resolve_bounded`).
//!
//! Input: arguments (a JSON object whose values may be references), then outputs, each a line
//! `<node id>=<stored text>` (the text need not be JSON), separated from the arguments by a newline;
//! or any first byte other than `{`: both built with `arbitrary`, with references that point at
//! large values many times over, so that the size bound is reached quickly.
//!
//! What must hold, under tight limits and default ones: no panic; a resolved value is no larger
//! than the limit, and contains no reference the arguments did not hold as data; a refusal for
//! size names a size above the limit; resolving twice gives the same answer.
#![no_main]

use std::collections::HashMap;

use arbitrary::{Arbitrary, Result, Unstructured};
use conveyor_shared::dag::{ResolveError, ResolveLimits, resolve_bounded};
use conveyor_shared::json_limits::compact_size;
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value, json};

fuzz_target!(|data: &[u8]| {
    let parsed = match data.first() {
        None => return,
        Some(b'{') => from_text(data),
        Some(_) => from_arbitrary(&mut Unstructured::new(&data[1..])).ok(),
    };
    let Some((arguments, outputs)) = parsed else { return };
    for limits in [
        ResolveLimits { max_resolved_bytes: 256, max_parsed_bytes: 4096 },
        ResolveLimits { max_resolved_bytes: 64 * 1024, max_parsed_bytes: 1024 * 1024 },
        ResolveLimits::default(),
    ] {
        check(&arguments, &outputs, &limits);
    }
});

fn check(arguments: &Value, outputs: &HashMap<String, String>, limits: &ResolveLimits) {
    let resolved = resolve_bounded(arguments, outputs, limits);
    match &resolved {
        Ok(value) => {
            let size = compact_size(value);
            assert!(
                size <= limits.max_resolved_bytes || value == arguments,
                "resolved to {size} bytes over a limit of {}",
                limits.max_resolved_bytes
            );
        }
        Err(ResolveError::TooLarge { size, max }) => {
            assert_eq!(*max, limits.max_resolved_bytes);
            assert!(size > max, "a refusal for size names a size above the limit");
        }
        Err(other) => assert!(!other.to_string().is_empty()),
    }
    assert_eq!(resolve_bounded(arguments, outputs, limits), resolved, "resolution is deterministic");
}

/// `{arguments}` then lines of `id=text`.
fn from_text(data: &[u8]) -> Option<(Value, HashMap<String, String>)> {
    let text = std::str::from_utf8(data).ok()?;
    let (arguments, rest) = text.split_once('\n').unwrap_or((text, ""));
    let arguments: Value = serde_json::from_str(arguments).ok()?;
    let outputs = rest
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(id, text)| (id.to_owned(), text.to_owned()))
        .collect();
    Some((arguments, outputs))
}

const IDS: [&str; 4] = ["a", "b", "big", "missing"];
const POINTERS: [&str; 8] =
    ["", "/text", "/items", "/items/0", "/items/-", "/nested/deeper", "/text/0", "~1"];

fn reference(u: &mut Unstructured<'_>) -> Result<Value> {
    let mut object = Map::new();
    object.insert("$from".into(), json!(IDS[usize::from(u8::arbitrary(u)?) % IDS.len()]));
    if bool::arbitrary(u)? {
        object.insert("pointer".into(), json!(POINTERS[usize::from(u8::arbitrary(u)?) % POINTERS.len()]));
    }
    Ok(Value::Object(object))
}

fn argument(u: &mut Unstructured<'_>, depth: u32) -> Result<Value> {
    let choice = if depth >= 5 { u8::arbitrary(u)? % 4 } else { u8::arbitrary(u)? % 7 };
    Ok(match choice {
        0 => Value::Null,
        1 => json!(i64::arbitrary(u)?),
        2 => Value::String(String::arbitrary(u)?),
        3 | 4 => reference(u)?,
        5 => {
            // Many references at once: the fan-in that must be refused without being built.
            let count = u.int_in_range(0..=2_000)?;
            let one = reference(u)?;
            Value::Array(vec![one; count])
        }
        _ => {
            let mut object = Map::new();
            for _ in 0..u.int_in_range(0..=4)? {
                object.insert(String::arbitrary(u)?, argument(u, depth + 1)?);
            }
            Value::Object(object)
        }
    })
}

fn output(u: &mut Unstructured<'_>) -> Result<String> {
    Ok(match u8::arbitrary(u)? % 5 {
        0 => String::arbitrary(u)?,
        1 => json!({"text": "x".repeat(u.int_in_range(0..=100_000)?)}).to_string(),
        2 => {
            let items: Vec<Value> = (0..u.int_in_range(0..=5_000)?).map(|i| json!({"a": i})).collect();
            json!({"items": items, "text": "t"}).to_string()
        }
        3 => json!({"nested": {"deeper": [1, 2, {"x": String::arbitrary(u)?}]}, "items": [null]}).to_string(),
        _ => format!("{}1{}", "[".repeat(u.int_in_range(0..=200)?), "]".repeat(u.int_in_range(0..=200)?)),
    })
}

fn from_arbitrary(u: &mut Unstructured<'_>) -> Result<(Value, HashMap<String, String>)> {
    let mut arguments = Map::new();
    for _ in 0..u.int_in_range(1..=4)? {
        arguments.insert(String::arbitrary(u)?, argument(u, 0)?);
    }
    let mut outputs = HashMap::new();
    for id in IDS.iter().take(3) {
        if u8::arbitrary(u)? % 4 != 0 {
            outputs.insert((*id).to_owned(), output(u)?);
        }
    }
    Ok((Value::Object(arguments), outputs))
}
