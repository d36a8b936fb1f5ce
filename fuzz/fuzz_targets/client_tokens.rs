//! What a client hands back to the gateway and the gateway must trust only if it made it: a
//! session id, an MRTR `requestState`, a stream's `Last-Event-ID`; and the `Mcp-Param-*` headers it
//! sends beside a tool's arguments. Any bytes are refused cleanly or accepted only when signed;
//! a token of one purpose never passes as another; nothing panics.
#![no_main]

use conveyor_gateway::methods::resume;
use conveyor_gateway::signing::{Purpose, SigningKey};
use conveyor_gateway::wire::check_param_headers;
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let key = SigningKey::from_secret(b"fuzz");
    for purpose in [Purpose::Session, Purpose::RequestState, Purpose::StreamEvent] {
        // Bytes nobody signed never verify (forging an HMAC is not what a fuzzer finds).
        assert!(key.verify::<Value>(purpose, text).is_err(), "an unsigned token passed");
    }
    assert!(resume::parse_event_id(&key, text).is_err());
    // What the gateway signs comes back intact, and only for its purpose.
    let payload = json!({"t": text, "i": text.len()});
    let token = key.sign(Purpose::RequestState, &payload);
    assert_eq!(key.verify::<Value>(Purpose::RequestState, &token).ok(), Some(payload));
    assert!(key.verify::<Value>(Purpose::Session, &token).is_err());

    // A header value against an argument value: matched, or refused with -32020; never a panic.
    let definition = json!({"inputSchema": {"properties": {"region": {"type": "string", "x-mcp-header": "Region"}}}});
    let (header, argument) = text.split_once('\n').unwrap_or((text, text));
    let headers = vec![("region".to_owned(), header.trim().to_owned())];
    if let Err(failure) = check_param_headers(&definition, &json!({"region": argument}), &headers) {
        assert_eq!(failure.error.code.0, -32020);
    }
});
