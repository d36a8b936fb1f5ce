//! `run_dag` graphs and planned graphs: parsing, validation, and `$from` references.
//!
//! Two kinds of input, told apart by the first byte:
//! - JSON (starts with `{`, `[` or whitespace): the bytes as a client sends them in `run_dag`'s
//!   arguments, parsed as a `DagSpec` (the seeds in `corpus/dag_graph/` are of this kind);
//! - anything else: a graph built field by field with `arbitrary`, so that deep, nearly valid
//!   graphs (cycles, references to missing or undeclared nodes, odd pointers) are reached quickly.
//!
//! For every graph: `validate` with the default limits and with tight ones, `dependents`, a
//! serialize/parse round trip (a graph as stored must be readable again), and reference
//! resolution against outputs built from the graph itself (`resolve_references` fuzzes resolution
//! and its byte bounds on their own).
#![no_main]

use std::collections::HashMap;

use arbitrary::{Arbitrary, Result, Unstructured};
use conveyor_shared::dag::{
    BuiltinKind, DagLimits, DagSpec, FailurePolicy, NodeSpec, ResolveLimits, resolve_bounded, upstream_references,
};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value, json};

fuzz_target!(|data: &[u8]| {
    match data.first() {
        None => {}
        Some(b'{' | b'[' | b' ' | b'\n' | b'\r' | b'\t') => {
            if let Ok(spec) = serde_json::from_slice::<DagSpec>(data) {
                check(&spec);
            }
        }
        Some(_) => {
            let mut u = Unstructured::new(&data[1..]);
            if let Ok(spec) = arbitrary_graph(&mut u) {
                check(&spec);
            }
        }
    }
});

fn check(spec: &DagSpec) {
    let valid = spec.validate(&DagLimits::default());
    let tight = DagLimits { max_nodes: 8, max_node_bytes: 128, max_retries: 3, max_timeout_ms: 10_000 };
    let _ = spec.validate(&tight);
    let zero = DagLimits { max_nodes: 0, max_node_bytes: 0, max_retries: 0, max_timeout_ms: 0 };
    assert!(spec.validate(&zero).is_err(), "no graph fits limits of zero");
    let dependents = spec.dependents();
    if valid.is_ok() {
        assert_eq!(dependents.len(), spec.nodes.len(), "ids of a valid graph are unique");
    }

    // What is stored is read again by workers: the serialized graph must parse.
    let stored = serde_json::to_vec(spec).expect("a DagSpec serializes");
    let again = serde_json::from_slice::<DagSpec>(&stored).expect("a serialized DagSpec parses again");
    assert_eq!(again.nodes.len(), spec.nodes.len());
    let _ = again.validate(&DagLimits::default());

    // Every node's output, shaped like a CallToolResult, so that typical pointers resolve.
    // Stored as text, as workers read them from Redis.
    let mut outputs: HashMap<String, String> = HashMap::new();
    for node in &spec.nodes {
        let output = json!({
            "content": [{"type": "text", "text": node.id}],
            "structuredContent": {"id": node.id, "arguments": node.arguments, "items": [1, "two", null, {"a/b": {"m~n": true}}]},
            "isError": false
        });
        outputs.insert(node.id.clone(), output.to_string());
    }
    let limits = ResolveLimits::default();
    for node in &spec.nodes {
        let references = upstream_references(&node.arguments);
        if valid.is_ok() {
            for (from, _) in &references {
                assert!(outputs.contains_key(from), "a valid graph references only its own nodes: {from}");
            }
        }
        match resolve_bounded(&node.arguments, &outputs, &limits) {
            Ok(resolved) => {
                // Resolving again with the same outputs is stable once nothing is left to resolve.
                if upstream_references(&resolved).is_empty() {
                    assert_eq!(resolve_bounded(&resolved, &outputs, &limits).as_ref(), Ok(&resolved));
                }
            }
            Err(error) => assert!(!error.to_string().is_empty()),
        }
        // A node whose upstream nodes produced nothing yet: every reference fails to resolve.
        let _ = resolve_bounded(&node.arguments, &HashMap::new(), &limits);
    }
}

const IDS: [&str; 10] = ["a", "b", "c", "d", "e", "fetch-1", "n.2", "$finalize", "root", ""];
const POINTERS: [&str; 14] = [
    "",
    "/content/0/text",
    "/structuredContent",
    "/structuredContent/items/3/a~1b/m~0n",
    "/structuredContent/items/-",
    "/structuredContent/items/01",
    "/structuredContent/items/18446744073709551616",
    "/structuredContent/arguments",
    "/missing",
    "content",
    "/",
    "~",
    "/content/0/text/0",
    "/isError",
];

fn id(u: &mut Unstructured<'_>, count: usize) -> Result<String> {
    Ok(match u8::arbitrary(u)? % 8 {
        0 => String::arbitrary(u)?,
        1 | 2 => IDS[usize::from(u8::arbitrary(u)?) % IDS.len()].to_owned(),
        _ => format!("n{}", usize::from(u8::arbitrary(u)?) % count.max(1)),
    })
}

fn pointer(u: &mut Unstructured<'_>) -> Result<String> {
    Ok(if bool::arbitrary(u)? {
        POINTERS[usize::from(u8::arbitrary(u)?) % POINTERS.len()].to_owned()
    } else {
        String::arbitrary(u)?
    })
}

/// An argument value: scalars, nested arrays and objects, and `$from` references.
fn argument(u: &mut Unstructured<'_>, count: usize, depth: u32) -> Result<Value> {
    let choice = if depth >= 6 { u8::arbitrary(u)? % 5 } else { u8::arbitrary(u)? % 9 };
    Ok(match choice {
        0 => Value::Null,
        1 => Value::Bool(bool::arbitrary(u)?),
        2 => json!(i64::arbitrary(u)?),
        3 => json!(f64::arbitrary(u)?),
        4 => Value::String(String::arbitrary(u)?),
        5 | 6 => {
            // A reference, sometimes with a pointer, sometimes with a third key (then it is not one).
            let mut object = Map::new();
            object.insert("$from".into(), Value::String(id(u, count)?));
            if bool::arbitrary(u)? {
                object.insert("pointer".into(), Value::String(pointer(u)?));
            }
            if u8::arbitrary(u)? % 8 == 0 {
                object.insert(String::arbitrary(u)?, argument(u, count, depth + 1)?);
            }
            Value::Object(object)
        }
        7 => {
            let len = u.int_in_range(0..=4)?;
            Value::Array((0..len).map(|_| argument(u, count, depth + 1)).collect::<Result<_>>()?)
        }
        _ => {
            let len = u.int_in_range(0..=4)?;
            let mut object = Map::new();
            for _ in 0..len {
                object.insert(String::arbitrary(u)?, argument(u, count, depth + 1)?);
            }
            Value::Object(object)
        }
    })
}

fn arbitrary_graph(u: &mut Unstructured<'_>) -> Result<DagSpec> {
    let count = u.int_in_range(0..=24)?;
    let mut nodes = Vec::with_capacity(count);
    for i in 0..count {
        let node_id = if u8::arbitrary(u)? % 16 == 0 { id(u, count)? } else { format!("n{i}") };
        let (tool, kind) = match u8::arbitrary(u)? % 6 {
            0 => (None, None),
            1 => (Some("echo".to_owned()), Some(BuiltinKind::Noop)),
            2 => (None, Some(BuiltinKind::Noop)),
            3 => (None, Some(BuiltinKind::Collect)),
            4 => (Some(String::arbitrary(u)?), None),
            _ => (Some("echo".to_owned()), None),
        };
        let mut depends_on = Vec::new();
        for _ in 0..u.int_in_range(0..=3)? {
            depends_on.push(id(u, count)?);
        }
        let arguments = if u8::arbitrary(u)? % 16 == 0 {
            argument(u, count, 5)?
        } else {
            let mut object = Map::new();
            for _ in 0..u.int_in_range(0..=3)? {
                object.insert(String::arbitrary(u)?, argument(u, count, 1)?);
            }
            Value::Object(object)
        };
        let on_failure = match u8::arbitrary(u)? % 3 {
            0 => FailurePolicy::Fail,
            1 => FailurePolicy::SkipDependents,
            _ => FailurePolicy::Continue,
        };
        nodes.push(NodeSpec {
            id: node_id,
            tool,
            kind,
            arguments,
            depends_on,
            retries: u32::arbitrary(u)? % 32,
            backoff_ms: Option::<u64>::arbitrary(u)?,
            timeout_ms: Option::<u64>::arbitrary(u)?,
            on_failure,
            weight: Option::<f64>::arbitrary(u)?,
        });
    }
    let output = if bool::arbitrary(u)? { Some(id(u, count)?) } else { None };
    Ok(DagSpec { nodes, output })
}
