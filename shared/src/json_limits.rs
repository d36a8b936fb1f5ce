//! Bounds on JSON that comes from outside: a request body before it is parsed, and a tool's result
//! before it is stored.
//!
//! Parsing JSON into `serde_json::Value` can cost a hundred times the bytes read (every one-key
//! object is a B-tree node of about 640 bytes), so a request body is first measured in one pass
//! that allocates nothing: its nesting depth, and the memory its parse would take. A body over a
//! limit is refused before the real parse. The depth of a value built in memory (a tool's result)
//! is measured without recursion, so that no value can overflow a stack on the way to Redis.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// Limits on one JSON document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JsonLimits {
    /// Deepest nesting of arrays and objects.
    pub max_depth: usize,
    /// Most memory the parsed document may take, as [`JsonCost::parsed_bytes`] estimates it.
    pub max_parsed_bytes: usize,
}

/// Deepest nesting serde_json itself parses; limits above it could never be reached.
pub const PARSER_MAX_DEPTH: usize = 120;

/// Deepest nesting of a tool's result that is stored. The task record and the wire envelope add a
/// few levels, and every reader (Rust, Lua's cjson, the clients' parsers) must still read it.
pub const MAX_RESULT_DEPTH: usize = 64;

impl Default for JsonLimits {
    fn default() -> Self {
        Self { max_depth: 64, max_parsed_bytes: 32 * 1024 * 1024 }
    }
}

/// What measuring a document found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JsonCost {
    pub depth: usize,
    /// Values of any kind, containers included.
    pub values: usize,
    /// Estimated heap and inline memory of the document parsed into `serde_json::Value`.
    pub parsed_bytes: usize,
}

/// Why a document was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonRefusal {
    /// Not JSON (the parser's message).
    Syntax(String),
    /// Nested deeper than `max_depth`.
    TooDeep { max_depth: usize },
    /// Its parse would take more than `max_parsed_bytes`.
    TooCostly { max_parsed_bytes: usize },
}

impl fmt::Display for JsonRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Syntax(e) => write!(f, "{e}"),
            Self::TooDeep { max_depth } => {
                write!(f, "the JSON nests deeper than {max_depth} levels (limit max_json_depth)")
            }
            Self::TooCostly { max_parsed_bytes } => write!(
                f,
                "the JSON would take more than {} KiB of memory once parsed (limit max_parsed_bytes): send fewer, larger values",
                max_parsed_bytes / 1024
            ),
        }
    }
}

impl std::error::Error for JsonRefusal {}

/// Inline size of one `serde_json::Value`.
const VALUE_BYTES: usize = std::mem::size_of::<Value>();
/// One B-tree node of a `serde_json::Map` (11 keys and values, parent link, lengths).
const MAP_NODE_BYTES: usize = 11 * (24 + VALUE_BYTES) + 16;
const MAP_NODE_ENTRIES: usize = 11;

/// Measures `bytes` as JSON without building it; stops at the first limit crossed.
pub fn measure(bytes: &[u8], limits: &JsonLimits) -> Result<JsonCost, JsonRefusal> {
    let mut state = Measure { limits: *limits, cost: JsonCost::default(), refusal: None, depth: 0 };
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let outcome = (&mut state).deserialize(&mut deserializer).and_then(|()| deserializer.end());
    if let Some(refusal) = state.refusal {
        return Err(refusal);
    }
    outcome.map_err(|e| {
        if e.to_string().starts_with("recursion limit exceeded") {
            JsonRefusal::TooDeep { max_depth: limits.max_depth.min(PARSER_MAX_DEPTH) }
        } else {
            JsonRefusal::Syntax(e.to_string())
        }
    })?;
    Ok(state.cost)
}

/// The nesting depth of a value (a scalar is 0, `[]` is 1), without recursion.
pub fn depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut pending: Vec<(&Value, usize)> = vec![(value, 0)];
    while let Some((value, level)) = pending.pop() {
        match value {
            Value::Array(items) => {
                deepest = deepest.max(level + 1);
                pending.extend(items.iter().map(|v| (v, level + 1)));
            }
            Value::Object(map) => {
                deepest = deepest.max(level + 1);
                pending.extend(map.values().map(|v| (v, level + 1)));
            }
            _ => {}
        }
    }
    deepest
}

/// Bytes of a value as compact JSON (what `to_string` would write), counted without building the
/// text. `usize::MAX` for a value serde_json cannot write.
pub fn compact_size(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 = self.0.saturating_add(buf.len());
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => usize::MAX,
    }
}

struct Measure {
    limits: JsonLimits,
    cost: JsonCost,
    refusal: Option<JsonRefusal>,
    depth: usize,
}

impl Measure {
    fn add(&mut self, bytes: usize) -> Result<(), JsonRefusal> {
        self.cost.parsed_bytes = self.cost.parsed_bytes.saturating_add(bytes);
        if self.cost.parsed_bytes > self.limits.max_parsed_bytes {
            return Err(JsonRefusal::TooCostly { max_parsed_bytes: self.limits.max_parsed_bytes });
        }
        Ok(())
    }

    fn value<E: de::Error>(&mut self, heap: usize) -> Result<(), E> {
        self.cost.values += 1;
        self.add(VALUE_BYTES + heap).map_err(|r| self.refuse(r))
    }

    fn enter<E: de::Error>(&mut self) -> Result<(), E> {
        self.depth += 1;
        self.cost.depth = self.cost.depth.max(self.depth);
        if self.depth > self.limits.max_depth {
            return Err(self.refuse(JsonRefusal::TooDeep { max_depth: self.limits.max_depth }));
        }
        Ok(())
    }

    fn refuse<E: de::Error>(&mut self, refusal: JsonRefusal) -> E {
        let message = refusal.to_string();
        self.refusal = Some(refusal);
        E::custom(message)
    }
}

impl<'de> DeserializeSeed<'de> for &mut Measure {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for &mut Measure {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.value(0)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.value(0)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.value(0)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.value(0)
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.value(0)
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<(), E> {
        self.value(s.len())
    }
    fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<(), E> {
        self.value(s.len())
    }
    fn visit_string<E: de::Error>(self, s: String) -> Result<(), E> {
        self.value(s.len())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.enter()?;
        self.value(0)?;
        while seq.next_element_seed(&mut *self)?.is_some() {
            // A growing Vec holds up to twice its length while it is parsed.
            self.add(VALUE_BYTES).map_err(|r| self.refuse(r))?;
        }
        self.depth -= 1;
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.enter()?;
        self.value(0)?;
        let mut entries = 0usize;
        while let Some(key) = map.next_key::<KeyLength>()? {
            if entries.is_multiple_of(MAP_NODE_ENTRIES) {
                self.add(MAP_NODE_BYTES).map_err(|r| self.refuse(r))?;
            }
            entries += 1;
            self.add(key.0).map_err(|r| self.refuse(r))?;
            map.next_value_seed(&mut *self)?;
            // The value's inline bytes live in the map's node, already counted.
            self.cost.parsed_bytes = self.cost.parsed_bytes.saturating_sub(VALUE_BYTES);
        }
        self.depth -= 1;
        Ok(())
    }
}

/// The length of an object key, read without keeping it.
struct KeyLength(usize);

impl<'de> serde::Deserialize<'de> for KeyLength {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = KeyLength;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<KeyLength, E> {
                Ok(KeyLength(s.len()))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_depth: usize, max_parsed_bytes: usize) -> JsonLimits {
        JsonLimits { max_depth, max_parsed_bytes }
    }

    #[test]
    fn measures_depth_and_values() {
        let cost = measure(br#"{"a": [1, {"b": "xyz"}], "c": null}"#, &JsonLimits::default()).expect("fits");
        assert_eq!(cost.depth, 3);
        assert_eq!(cost.values, 6);
        assert!(cost.parsed_bytes > 2 * MAP_NODE_BYTES, "{cost:?}");
    }

    #[test]
    fn refuses_deep_documents_before_the_parser_does() {
        let deep = format!("{}{}", "[".repeat(65), "]".repeat(65));
        assert_eq!(
            measure(deep.as_bytes(), &limits(64, usize::MAX)),
            Err(JsonRefusal::TooDeep { max_depth: 64 })
        );
        let fine = format!("{}{}", "[".repeat(64), "]".repeat(64));
        assert_eq!(measure(fine.as_bytes(), &limits(64, usize::MAX)).expect("fits").depth, 64);
        let very_deep = "[".repeat(100_000);
        assert!(matches!(
            measure(very_deep.as_bytes(), &limits(200, usize::MAX)),
            Err(JsonRefusal::TooDeep { .. })
        ));
    }

    #[test]
    fn refuses_documents_whose_parse_would_multiply_their_size() {
        // Half a million one-key objects: 4 MB of text, about 320 MB as values.
        let mut body = String::from("[");
        for i in 0..500_000 {
            if i > 0 {
                body.push(',');
            }
            body.push_str(r#"{"a":1}"#);
        }
        body.push(']');
        let refused = measure(body.as_bytes(), &JsonLimits::default());
        assert_eq!(refused, Err(JsonRefusal::TooCostly { max_parsed_bytes: 32 * 1024 * 1024 }));
        // Text costs about its length.
        let text = format!(r#"{{"text": "{}"}}"#, "x".repeat(4_000_000));
        let cost = measure(text.as_bytes(), &JsonLimits::default()).expect("fits");
        assert!(cost.parsed_bytes < 4_100_000, "{cost:?}");
    }

    #[test]
    fn compact_size_is_the_length_of_the_text() {
        for value in [
            serde_json::json!(null),
            serde_json::json!({"a": [1, 2.5, "x\"y"], "b": {"c": true}, "é": "\u{1F600}"}),
            serde_json::json!([]),
        ] {
            assert_eq!(compact_size(&value), value.to_string().len(), "{value}");
        }
    }

    #[test]
    fn syntax_errors_are_reported_as_such() {
        assert!(matches!(measure(b"{\"a\": ", &JsonLimits::default()), Err(JsonRefusal::Syntax(_))));
        assert!(matches!(measure(b"[1] [2]", &JsonLimits::default()), Err(JsonRefusal::Syntax(_))));
    }

    #[test]
    fn depth_of_values_needs_no_recursion() {
        assert_eq!(depth(&serde_json::json!(1)), 0);
        assert_eq!(depth(&serde_json::json!({"a": [1, {"b": []}]})), 4);
        let mut deep = Value::Null;
        for _ in 0..200_000 {
            deep = Value::Array(vec![deep]);
        }
        assert_eq!(depth(&deep), 200_000);
        // Dropping a value this deep recurses in serde_json; hand it down iteratively.
        let mut current = deep;
        while let Value::Array(mut items) = current {
            current = items.pop().unwrap_or(Value::Null);
        }
    }
}
