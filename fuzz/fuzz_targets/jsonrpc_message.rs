//! JSON-RPC decoding of a `/mcp` POST body, then the wire checks on the decoded request:
//! `conveyor_gateway::http::decode_message` (measure against `JsonLimits`, parse, check the
//! envelope), `Wire::detect` and `wire::check_2026`.
//!
//! Input:
//! - a body (any bytes; the seeds in `corpus/jsonrpc_message/` are JSON-RPC messages): decoded,
//!   then checked with several header sets derived from it (none, a 2025-11-25 client's, and a
//!   2026-07-28 client's headers that agree with the body);
//! - or `#headers\n`, then `Name: value` lines, a blank line, and the body: decoded and checked
//!   with exactly those headers.
#![no_main]

use base64::Engine;
use conveyor_gateway::http::{Decoded, decode_message};
use conveyor_gateway::rpc;
use conveyor_gateway::wire::{self, META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, Wire};
use conveyor_shared::json_limits::{self, JsonLimits, PARSER_MAX_DEPTH};
use http::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

const HEADERS_MARKER: &[u8] = b"#headers\n";
const V2026: &str = "2026-07-28";

fuzz_target!(|data: &[u8]| {
    let (explicit, body) = match data.strip_prefix(HEADERS_MARKER) {
        Some(rest) => {
            let (head, body) = split_head(rest);
            (Some(headers_from(head)), body)
        }
        None => (None, data),
    };

    let limits = [
        JsonLimits::default(),
        JsonLimits { max_depth: 8, max_parsed_bytes: 4096 },
        JsonLimits { max_depth: PARSER_MAX_DEPTH, max_parsed_bytes: usize::MAX },
    ];
    let parsed = serde_json::from_slice::<Value>(body);
    for limits in &limits {
        check_measure(body, limits, parsed.as_ref().ok());
        match decode_message(body, limits) {
            Ok((decoded, _cost)) => {
                assert!(parsed.is_ok(), "decoded a body serde_json does not parse");
                if let Decoded::Request { id, method, params } = decoded {
                    assert!(
                        id.is_string() || id.is_i64() || id.is_u64(),
                        "a request id is a string or an integer"
                    );
                    assert!(params.is_null() || params.is_object(), "params are an object or absent");
                    match &explicit {
                        Some(headers) => {
                            let _ = check_wire(&method, &params, headers);
                        }
                        None => derived(&method, &params),
                    }
                    let _ = rpc::response(&id, Value::Null).to_string();
                }
            }
            Err(failure) => {
                // What the gateway sends back must serialize.
                let _ = rpc::error_response(&Value::Null, &failure.error).to_string();
            }
        }
    }
});

/// `json_limits::measure` against what serde_json itself makes of the body.
fn check_measure(body: &[u8], limits: &JsonLimits, parsed: Option<&Value>) {
    match json_limits::measure(body, limits) {
        Ok(cost) => {
            let value = parsed.expect("measure accepted a body serde_json refuses");
            assert!(cost.depth <= limits.max_depth, "measured depth {} over the limit", cost.depth);
            // Measured on the text: a duplicate key's overwritten values count too, so the
            // measure may exceed the parsed value's, never fall short of it.
            assert!(cost.depth >= json_limits::depth(value), "measured depth below the actual depth");
            assert!(cost.values >= count(value), "measured fewer values than the document has");
            assert!(cost.parsed_bytes <= limits.max_parsed_bytes);
        }
        Err(json_limits::JsonRefusal::Syntax(_)) => {
            assert!(parsed.is_none(), "measure calls valid JSON a syntax error");
        }
        Err(json_limits::JsonRefusal::TooDeep { .. }) => {
            // The text nests too deep; with duplicate keys the parsed value may not (see above).
            if let Some(value) = parsed
                && !has_duplicate_keys(body)
            {
                assert!(json_limits::depth(value) > limits.max_depth, "refused as too deep, but is not");
            }
        }
        Err(json_limits::JsonRefusal::TooCostly { .. }) => {
            assert!(limits.max_parsed_bytes < usize::MAX, "nothing is too costly without a limit");
        }
    }
}

/// Whether an object of the document repeats a key (serde_json keeps the last value).
fn has_duplicate_keys(body: &[u8]) -> bool {
    struct Check(bool);
    impl<'de> serde::de::Visitor<'de> for &mut Check {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("JSON")
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while seq.next_element_seed(&mut *self)?.is_some() {}
            Ok(())
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let mut keys = std::collections::HashSet::new();
            while let Some(key) = map.next_key::<String>()? {
                self.0 |= !keys.insert(key);
                map.next_value_seed(&mut *self)?;
            }
            Ok(())
        }
    }
    impl<'de> serde::de::DeserializeSeed<'de> for &mut Check {
        type Value = ();
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }
    let mut check = Check(false);
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    serde::de::DeserializeSeed::deserialize(&mut check, &mut deserializer).is_err() || check.0
}

/// Values in a document, containers included, without recursion.
fn count(value: &Value) -> usize {
    let mut pending = vec![value];
    let mut n = 0;
    while let Some(v) = pending.pop() {
        n += 1;
        match v {
            Value::Array(items) => pending.extend(items),
            Value::Object(map) => pending.extend(map.values()),
            _ => {}
        }
    }
    n
}

fn check_wire(method: &str, params: &Value, headers: &HeaderMap) -> (Wire, Result<(), rpc::RpcFailure>) {
    let wire = Wire::detect(method, params, headers);
    let checked = wire::check_2026(method, params, headers);
    if let Err(failure) = &checked {
        let _ = rpc::error_response(&Value::Null, &failure.error).to_string();
    }
    let _ = wire::meta(params);
    (wire, checked)
}

/// Checks a request with header sets derived from its body.
fn derived(method: &str, params: &Value) {
    let _ = check_wire(method, params, &HeaderMap::new());

    let mut old = HeaderMap::new();
    old.insert("mcp-protocol-version", HeaderValue::from_static("2025-11-25"));
    let (wire, _) = check_wire(method, params, &old);
    if wire::meta(params).is_none_or(|m| !m.contains_key(META_PROTOCOL_VERSION))
        && method != "server/discover"
    {
        assert_eq!(wire, Wire::V2025, "a 2025-11-25 request without _meta version is 2025-11-25");
    }

    // A 2026-07-28 client's headers, agreeing with the body.
    let meta = wire::meta(params);
    let version = meta.and_then(|m| m.get(META_PROTOCOL_VERSION)).and_then(Value::as_str).unwrap_or(V2026);
    let mut headers = HeaderMap::new();
    let Some(version_header) = plain(version) else { return };
    headers.insert("mcp-protocol-version", version_header);
    let Some(method_header) = plain(method) else { return };
    headers.insert("mcp-method", method_header);
    let target = match method {
        "tools/call" | "prompts/get" => params.get("name"),
        "resources/read" => params.get("uri"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => params.get("taskId"),
        _ => None,
    };
    if let Some(Value::String(name)) = target {
        let value = match plain(name).filter(|_| !name.starts_with("=?base64?")) {
            Some(v) => v,
            None => {
                let encoded = base64::engine::general_purpose::STANDARD.encode(name);
                HeaderValue::from_str(&format!("=?base64?{encoded}?="))
                    .expect("base64 is a valid header value")
            }
        };
        headers.insert("mcp-name", value);
    }
    let (wire, checked) = check_wire(method, params, &headers);
    let complete = meta.and_then(|m| m.get(META_PROTOCOL_VERSION)).and_then(Value::as_str) == Some(V2026)
        && meta.and_then(|m| m.get(META_CLIENT_CAPABILITIES)).is_some_and(Value::is_object);
    if complete {
        assert_eq!(wire, Wire::V2026, "a request with a 2026-07-28 _meta version is 2026-07-28");
        if let Err(failure) = checked {
            panic!("headers that agree with the body are refused: {:?}", failure.error);
        }
    }
}

/// A header value that arrives unchanged: visible ASCII, no surrounding whitespace.
fn plain(value: &str) -> Option<HeaderValue> {
    let visible = !value.is_empty()
        && value.bytes().all(|b| b.is_ascii_graphic() || b == b' ')
        && value.trim() == value;
    if visible { HeaderValue::from_str(value).ok() } else { None }
}

/// Splits `head\n\nbody` (or `head\r\n\r\nbody`); no blank line means no body.
fn split_head(data: &[u8]) -> (&[u8], &[u8]) {
    for (i, window) in data.windows(2).enumerate() {
        if window == b"\n\n" {
            return (&data[..i], &data[i + 2..]);
        }
        if data[i..].starts_with(b"\r\n\r\n") {
            return (&data[..i], &data[i + 4..]);
        }
    }
    (data, &[])
}

/// `Name: value` lines; lines that make no valid header are skipped, as a server never sees them.
fn headers_from(head: &[u8]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for line in head.split(|b| *b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|b| *b == b':') else { continue };
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        let value = value.strip_prefix(b" ").unwrap_or(value);
        if let (Ok(name), Ok(value)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
            headers.append(name, value);
        }
    }
    headers
}
