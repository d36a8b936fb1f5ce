//! Helpers shared by the fuzz targets: JSON values built with `arbitrary`, biased towards the keys
//! and strings a target cares about so that structured inputs get past the first checks.

use arbitrary::{Arbitrary, Result, Unstructured};
use serde_json::{Map, Value, json};

/// Deepest nesting of a generated value (serde_json refuses to parse more than 128 levels, so
/// nothing deeper reaches Conveyor from the wire).
pub const MAX_DEPTH: u32 = 24;

/// A JSON value: scalars, arrays and objects, with keys and strings drawn from `keys` and
/// `strings` half of the time.
pub fn json_value(u: &mut Unstructured<'_>, keys: &[&str], strings: &[&str], depth: u32) -> Result<Value> {
    let kinds = if depth >= MAX_DEPTH { 6 } else { 9 };
    Ok(match u8::arbitrary(u)? % kinds {
        0 => Value::Null,
        1 => Value::Bool(bool::arbitrary(u)?),
        2 => json!(i64::arbitrary(u)?),
        3 => json!(f64::arbitrary(u)?),
        4 => json!(u64::arbitrary(u)?),
        5 => Value::String(string(u, strings)?),
        6 => {
            let len = u.int_in_range(0..=6)?;
            Value::Array((0..len).map(|_| json_value(u, keys, strings, depth + 1)).collect::<Result<_>>()?)
        }
        _ => {
            let len = u.int_in_range(0..=6)?;
            let mut object = Map::new();
            for _ in 0..len {
                let key = string(u, keys)?;
                object.insert(key, json_value(u, keys, strings, depth + 1)?);
            }
            Value::Object(object)
        }
    })
}

/// A string, from `vocabulary` half of the time.
pub fn string(u: &mut Unstructured<'_>, vocabulary: &[&str]) -> Result<String> {
    if !vocabulary.is_empty() && bool::arbitrary(u)? {
        Ok(vocabulary[usize::from(u8::arbitrary(u)?) % vocabulary.len()].to_owned())
    } else {
        String::arbitrary(u)
    }
}

/// Whether a fuzz input is JSON text (the seed corpora's kind) rather than bytes for `arbitrary`.
pub fn looks_like_json(data: &[u8]) -> bool {
    matches!(data.first(), Some(b'{' | b'[' | b'"' | b' ' | b'\n' | b'\r' | b'\t'))
}
