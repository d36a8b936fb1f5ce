//! Tasks as graphs: the DAG a client submits (through `run_dag`) or a tool plans, and its checks.
//!
//! Everything here runs before anything is written: a graph that fails validation never reaches
//! Redis, and the error says which node is wrong and why (for a cycle, the cycle itself).

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a node does when its last attempt fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FailurePolicy {
    /// The task fails; running nodes are stopped and nothing else starts.
    #[default]
    Fail,
    /// The node's dependents (all of them, transitively) are skipped; the rest of the graph runs.
    SkipDependents,
    /// Dependents run as if the node had succeeded; its output is its error.
    Continue,
}

impl FailurePolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fail => "fail",
            Self::SkipDependents => "skipDependents",
            Self::Continue => "continue",
        }
    }
}

/// Work a node does without a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum BuiltinKind {
    /// Does nothing and succeeds: a join point, or a way to measure scheduling.
    Noop,
    /// Succeeds with the outputs of its dependencies, by node id.
    Collect,
}

impl BuiltinKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Noop => "noop",
            Self::Collect => "collect",
        }
    }
}

/// One node as submitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeSpec {
    pub id: String,
    /// The registered tool the node calls; exactly one of `tool` and `kind`.
    #[serde(default)]
    pub tool: Option<String>,
    #[serde(default)]
    pub kind: Option<BuiltinKind>,
    /// Arguments; any value may be `{"$from": "<nodeId>", "pointer": "/json/pointer"}` to take it
    /// from an upstream node's result.
    #[serde(default = "empty_object")]
    pub arguments: Value,
    #[serde(default)]
    pub depends_on: Vec<String>,
    /// Attempts after the first.
    #[serde(default)]
    pub retries: u32,
    /// Delay before the first retry; each further retry doubles it (with jitter).
    #[serde(default)]
    pub backoff_ms: Option<u64>,
    /// Limit of one attempt.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub on_failure: FailurePolicy,
    /// Share of the task's progress this node is worth.
    #[serde(default)]
    pub weight: Option<f64>,
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

/// A graph of nodes and the node whose result is the task's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DagSpec {
    pub nodes: Vec<NodeSpec>,
    #[serde(default)]
    pub output: Option<String>,
}

/// Limits on a graph, from configuration.
#[derive(Debug, Clone, Copy)]
pub struct DagLimits {
    pub max_nodes: usize,
    /// Largest serialized arguments of one node.
    pub max_node_bytes: usize,
    pub max_retries: u32,
    pub max_timeout_ms: u64,
}

impl Default for DagLimits {
    fn default() -> Self {
        Self {
            max_nodes: 10_000,
            max_node_bytes: 64 * 1024,
            max_retries: 20,
            max_timeout_ms: 24 * 60 * 60 * 1000,
        }
    }
}

/// Largest weight of one node: with at most a few million nodes their sum stays finite and exact
/// enough, in Rust and in Lua alike.
pub const MAX_WEIGHT: f64 = 1_000_000.0;

/// Default delay before a first retry.
pub const DEFAULT_BACKOFF_MS: u64 = 200;
/// Longest delay between retries.
pub const MAX_BACKOFF_MS: u64 = 60_000;

/// An upstream reference inside a node's arguments.
pub fn upstream_reference(value: &Value) -> Option<(&str, &str)> {
    let object = value.as_object()?;
    let from = object.get("$from")?.as_str()?;
    let pointer = object.get("pointer").and_then(Value::as_str).unwrap_or("");
    (object.len() <= 2).then_some((from, pointer))
}

/// Every upstream reference in a value, depth first.
pub fn upstream_references(value: &Value) -> Vec<(String, String)> {
    let mut found = Vec::new();
    collect_references(value, &mut found);
    found
}

fn collect_references(value: &Value, found: &mut Vec<(String, String)>) {
    if let Some((from, pointer)) = upstream_reference(value) {
        found.push((from.to_owned(), pointer.to_owned()));
        return;
    }
    match value {
        Value::Array(items) => items.iter().for_each(|v| collect_references(v, found)),
        Value::Object(map) => map.values().for_each(|v| collect_references(v, found)),
        _ => {}
    }
}

/// Bounds on resolving one node's upstream references (a worker's settings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResolveLimits {
    /// Largest resolved arguments, in bytes of compact JSON.
    pub max_resolved_bytes: usize,
    /// Most memory one upstream output may take once parsed ([`crate::json_limits::measure`]):
    /// an output is parsed only to pick the values the references point at.
    pub max_parsed_bytes: usize,
}

impl Default for ResolveLimits {
    fn default() -> Self {
        Self { max_resolved_bytes: 4 * 1024 * 1024, max_parsed_bytes: 64 * 1024 * 1024 }
    }
}

/// Why a node's arguments could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolveError {
    /// The upstream node has no stored output.
    NoOutput { from: String },
    /// The pointer selects nothing in the upstream output.
    NoValue { from: String, pointer: String },
    /// The upstream output is not JSON, or would take more memory than allowed once parsed.
    Unreadable { from: String, why: String },
    /// The arguments would be larger than allowed once resolved; nothing was built.
    TooLarge { size: usize, max: usize },
}

impl std::fmt::Display for ResolveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoOutput { from } => write!(f, "no output of node `{from}`"),
            Self::NoValue { from, pointer } => {
                write!(f, "the output of node `{from}` has nothing at `{pointer}`")
            }
            Self::Unreadable { from, why } => write!(f, "the output of node `{from}` cannot be read: {why}"),
            Self::TooLarge { size, max } => write!(
                f,
                "the node's arguments would be {size} bytes once its upstream values are put in; the limit is {max} bytes (max_node_argument_bytes)"
            ),
        }
    }
}

impl std::error::Error for ResolveError {}

/// Replaces every upstream reference in `arguments` with the value its pointer selects from the
/// referenced node's output (`outputs`: node id to the output's stored JSON text), within
/// `limits`. The size of the result is known before anything is copied: each referenced value is
/// measured once, however often it is referenced, so that thousands of references to one large
/// output are refused after reading it once, not after building gigabytes.
pub fn resolve_bounded(
    arguments: &Value,
    outputs: &HashMap<String, String>,
    limits: &ResolveLimits,
) -> Result<Value, ResolveError> {
    let references = upstream_references(arguments);
    if references.is_empty() {
        return Ok(arguments.clone());
    }
    // How often each (node, pointer) is referenced, grouped by node so that each output is parsed
    // once and dropped before the next.
    let mut wanted: BTreeMap<&str, BTreeMap<&str, usize>> = BTreeMap::new();
    for (from, pointer) in &references {
        *wanted.entry(from).or_default().entry(pointer).or_default() += 1;
    }
    let parse_limits = crate::json_limits::JsonLimits {
        max_depth: crate::json_limits::PARSER_MAX_DEPTH,
        max_parsed_bytes: limits.max_parsed_bytes,
    };
    let mut size = template_size(arguments);
    let mut picked: HashMap<(&str, &str), Value> = HashMap::new();
    for (from, pointers) in wanted {
        let text = outputs.get(from).ok_or_else(|| ResolveError::NoOutput { from: from.to_owned() })?;
        let unreadable = |why: String| ResolveError::Unreadable { from: from.to_owned(), why };
        crate::json_limits::measure(text.as_bytes(), &parse_limits).map_err(|e| unreadable(e.to_string()))?;
        let output: Value = serde_json::from_str(text).map_err(|e| unreadable(e.to_string()))?;
        for (pointer, count) in pointers {
            let value = output.pointer(pointer).ok_or_else(|| ResolveError::NoValue {
                from: from.to_owned(),
                pointer: pointer.to_owned(),
            })?;
            let each = crate::json_limits::compact_size(value);
            size = size.saturating_add(each.saturating_mul(count));
            if size > limits.max_resolved_bytes {
                return Err(ResolveError::TooLarge { size, max: limits.max_resolved_bytes });
            }
            picked.insert((from, pointer), value.clone());
        }
    }
    if size > limits.max_resolved_bytes {
        return Err(ResolveError::TooLarge { size, max: limits.max_resolved_bytes });
    }
    Ok(substitute(arguments, &picked))
}

/// Compact JSON bytes of `value` with each upstream reference counted as nothing.
fn template_size(value: &Value) -> usize {
    if upstream_reference(value).is_some() {
        return 0;
    }
    match value {
        Value::Array(items) => {
            2 + items.len().saturating_sub(1) + items.iter().map(template_size).fold(0, usize::saturating_add)
        }
        Value::Object(map) => {
            let entries = map.iter().map(|(key, v)| {
                crate::json_limits::compact_size(&Value::String(key.clone())) + 1 + template_size(v)
            });
            2 + map.len().saturating_sub(1) + entries.fold(0, usize::saturating_add)
        }
        scalar => crate::json_limits::compact_size(scalar),
    }
}

fn substitute(value: &Value, picked: &HashMap<(&str, &str), Value>) -> Value {
    if let Some(reference) = upstream_reference(value) {
        // Every reference was picked before substitution starts.
        return picked.get(&reference).cloned().unwrap_or(Value::Null);
    }
    match value {
        Value::Array(items) => Value::Array(items.iter().map(|v| substitute(v, picked)).collect()),
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), substitute(v, picked))).collect())
        }
        other => other.clone(),
    }
}

fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && !id.starts_with('$')
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
}

impl DagSpec {
    /// Checks the graph against the limits; the error says what is wrong, naming the node.
    pub fn validate(&self, limits: &DagLimits) -> Result<(), String> {
        if self.nodes.is_empty() {
            return Err("the graph has no nodes".to_owned());
        }
        if self.nodes.len() > limits.max_nodes {
            return Err(format!(
                "the graph has {} nodes; the limit is {}",
                self.nodes.len(),
                limits.max_nodes
            ));
        }
        let mut ids = HashSet::with_capacity(self.nodes.len());
        for node in &self.nodes {
            if !valid_id(&node.id) {
                return Err(format!(
                    "node id `{}` is not valid: use 1 to 64 letters, digits, `_`, `-` or `.`",
                    node.id
                ));
            }
            if !ids.insert(node.id.as_str()) {
                return Err(format!("node id `{}` appears more than once", node.id));
            }
        }
        for node in &self.nodes {
            let id = &node.id;
            match (&node.tool, node.kind) {
                (Some(_), None) | (None, Some(_)) => {}
                _ => return Err(format!("node `{id}` needs exactly one of `tool` and `kind`")),
            }
            if !node.arguments.is_object() {
                return Err(format!("node `{id}`: `arguments` must be an object"));
            }
            let size = node.arguments.to_string().len();
            if size > limits.max_node_bytes {
                return Err(format!(
                    "node `{id}`: arguments are {size} bytes; the limit is {}",
                    limits.max_node_bytes
                ));
            }
            if node.retries > limits.max_retries {
                return Err(format!(
                    "node `{id}`: {} retries; the limit is {}",
                    node.retries, limits.max_retries
                ));
            }
            if let Some(t) = node.timeout_ms
                && (t == 0 || t > limits.max_timeout_ms)
            {
                return Err(format!(
                    "node `{id}`: timeoutMs must be between 1 and {}",
                    limits.max_timeout_ms
                ));
            }
            if let Some(w) = node.weight
                && !(w.is_finite() && w > 0.0 && w <= MAX_WEIGHT)
            {
                return Err(format!("node `{id}`: weight must be a positive number of at most {MAX_WEIGHT}"));
            }
            let depth = crate::json_limits::depth(&node.arguments);
            if depth > crate::json_limits::MAX_RESULT_DEPTH {
                return Err(format!(
                    "node `{id}`: arguments nest {depth} levels deep; the limit is {}",
                    crate::json_limits::MAX_RESULT_DEPTH
                ));
            }
            let mut seen = HashSet::with_capacity(node.depends_on.len());
            for dep in &node.depends_on {
                if dep == id {
                    return Err(format!("node `{id}` depends on itself"));
                }
                if !ids.contains(dep.as_str()) {
                    return Err(format!("node `{id}` depends on `{dep}`, which is not in the graph"));
                }
                if !seen.insert(dep) {
                    return Err(format!("node `{id}` lists `{dep}` twice in dependsOn"));
                }
            }
            // `seen` holds this node's dependencies: each reference is checked in constant time.
            for (from, _) in upstream_references(&node.arguments) {
                if !seen.contains(&from) {
                    return Err(format!("node `{id}` takes a value from `{from}` but does not depend on it"));
                }
            }
        }
        if let Some(output) = &self.output
            && !ids.contains(output.as_str())
        {
            return Err(format!("the output node `{output}` is not in the graph"));
        }
        if let Some(cycle) = self.find_cycle() {
            return Err(format!("the graph has a cycle: {}", cycle.join(" -> ")));
        }
        Ok(())
    }

    /// A cycle, as the node ids along it with the first repeated at the end; iterative so that a
    /// chain of thousands of nodes cannot overflow the stack.
    fn find_cycle(&self) -> Option<Vec<String>> {
        let index: HashMap<&str, usize> =
            self.nodes.iter().enumerate().map(|(i, n)| (n.id.as_str(), i)).collect();
        let deps: Vec<Vec<usize>> = self
            .nodes
            .iter()
            .map(|n| n.depends_on.iter().filter_map(|d| index.get(d.as_str()).copied()).collect())
            .collect();
        // 0 = unvisited, 1 = on the current path, 2 = done.
        let mut state = vec![0u8; self.nodes.len()];
        for start in 0..self.nodes.len() {
            if state[start] != 0 {
                continue;
            }
            let mut path: Vec<(usize, usize)> = vec![(start, 0)];
            state[start] = 1;
            while let Some(&mut (node, ref mut next)) = path.last_mut() {
                if let Some(&dep) = deps[node].get(*next) {
                    *next += 1;
                    match state[dep] {
                        0 => {
                            state[dep] = 1;
                            path.push((dep, 0));
                        }
                        1 => {
                            let from = path.iter().position(|(n, _)| *n == dep).unwrap_or(0);
                            let mut cycle: Vec<String> =
                                path[from..].iter().map(|(n, _)| self.nodes[*n].id.clone()).collect();
                            cycle.push(self.nodes[dep].id.clone());
                            return Some(cycle);
                        }
                        _ => {}
                    }
                } else {
                    state[node] = 2;
                    path.pop();
                }
            }
        }
        None
    }

    /// Each node's dependents (the nodes that list it in `dependsOn`), in graph order.
    pub fn dependents(&self) -> BTreeMap<&str, Vec<&str>> {
        let mut map: BTreeMap<&str, Vec<&str>> =
            self.nodes.iter().map(|n| (n.id.as_str(), Vec::new())).collect();
        for node in &self.nodes {
            for dep in &node.depends_on {
                if let Some(list) = map.get_mut(dep.as_str()) {
                    list.push(node.id.as_str());
                }
            }
        }
        map
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(value: Value) -> DagSpec {
        serde_json::from_value(value).expect("a DAG spec")
    }

    #[test]
    fn checking_references_is_linear_in_the_graph() {
        // One node that depends on, and takes a value from, each of 100,000 others: checked
        // pairwise that is 10^10 comparisons (minutes); checked against a set, well under a
        // second. The bound below leaves a hundredfold margin on a slow machine.
        let n = 100_000;
        let mut nodes: Vec<Value> = (0..n).map(|i| json!({"id": format!("n{i}"), "kind": "noop"})).collect();
        let references: Vec<Value> = (0..n).map(|i| json!({"$from": format!("n{i}")})).collect();
        let dependencies: Vec<String> = (0..n).map(|i| format!("n{i}")).collect();
        nodes.push(json!({"id": "all", "kind": "collect", "arguments": {"values": references}, "dependsOn": dependencies}));
        let graph = spec(json!({"nodes": nodes}));
        let limits = DagLimits { max_nodes: 2 * n, max_node_bytes: 64 * 1024 * 1024, ..Default::default() };
        let (done, checked) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = done.send(graph.validate(&limits));
        });
        let outcome =
            checked.recv_timeout(std::time::Duration::from_secs(60)).expect("validation is not quadratic");
        assert_eq!(outcome, Ok(()));
    }

    #[test]
    fn weights_are_bounded_so_that_their_sum_is_finite() {
        let heavy = json!({"nodes": [{"id": "a", "kind": "noop", "weight": 1e308}, {"id": "b", "kind": "noop", "weight": 1e308}]});
        assert!(check(heavy).expect_err("too heavy").contains("weight"));
        let fine = json!({"nodes": [{"id": "a", "kind": "noop", "weight": MAX_WEIGHT}]});
        assert_eq!(check(fine), Ok(()));
    }

    fn check(value: Value) -> Result<(), String> {
        spec(value).validate(&DagLimits::default())
    }

    #[test]
    fn a_diamond_is_valid() {
        assert_eq!(
            check(json!({"nodes": [
                {"id": "a", "tool": "t"},
                {"id": "b", "tool": "t", "dependsOn": ["a"], "arguments": {"x": {"$from": "a", "pointer": "/content/0/text"}}},
                {"id": "c", "kind": "noop", "dependsOn": ["a"]},
                {"id": "d", "kind": "collect", "dependsOn": ["b", "c"]}
            ], "output": "d"})),
            Ok(())
        );
    }

    #[test]
    fn mistakes_are_named() {
        let err = |v| check(v).expect_err("invalid");
        assert!(err(json!({"nodes": []})).contains("no nodes"));
        assert!(
            err(json!({"nodes": [{"id": "a", "tool": "t"}, {"id": "a", "tool": "t"}]}))
                .contains("`a` appears more than once")
        );
        assert!(err(json!({"nodes": [{"id": "a", "tool": "t", "dependsOn": ["zz"]}]})).contains("`zz`"));
        assert!(err(json!({"nodes": [{"id": "a"}]})).contains("exactly one of"));
        assert!(err(json!({"nodes": [{"id": "a:b", "tool": "t"}]})).contains("not valid"));
        assert!(err(json!({"nodes": [{"id": "a", "tool": "t"}], "output": "b"})).contains("output node `b`"));
        assert!(
            err(json!({"nodes": [{"id": "a", "tool": "t"}, {"id": "b", "tool": "t", "arguments": {"x": {"$from": "a"}}}]}))
                .contains("does not depend on it")
        );
        assert!(err(json!({"nodes": [{"id": "a", "tool": "t", "retries": 99}]})).contains("retries"));
        assert!(err(json!({"nodes": [{"id": "a", "tool": "t", "timeoutMs": 0}]})).contains("timeoutMs"));
    }

    #[test]
    fn a_cycle_is_named() {
        let error = check(json!({"nodes": [
            {"id": "a", "tool": "t", "dependsOn": ["c"]},
            {"id": "b", "tool": "t", "dependsOn": ["a"]},
            {"id": "c", "tool": "t", "dependsOn": ["b"]},
            {"id": "d", "tool": "t"}
        ]}))
        .expect_err("a cycle");
        assert!(error.contains("a -> c -> b -> a"), "{error}");
        assert!(
            check(json!({"nodes": [{"id": "a", "tool": "t", "dependsOn": ["a"]}]}))
                .expect_err("self")
                .contains("itself")
        );
    }

    #[test]
    fn a_long_chain_validates_without_recursion() {
        let nodes: Vec<Value> = (0..20_000)
            .map(|i| {
                if i == 0 {
                    json!({"id": "n0", "kind": "noop"})
                } else {
                    json!({"id": format!("n{i}"), "kind": "noop", "dependsOn": [format!("n{}", i - 1)]})
                }
            })
            .collect();
        let limits = DagLimits { max_nodes: 20_000, ..DagLimits::default() };
        assert_eq!(spec(json!({"nodes": nodes})).validate(&limits), Ok(()));
        let too_many = DagLimits { max_nodes: 100, ..DagLimits::default() };
        assert!(spec(json!({"nodes": [{"id": "a", "kind": "noop"}]})).validate(&too_many).is_ok());
    }

    fn outputs(pairs: &[(&str, Value)]) -> HashMap<String, String> {
        pairs.iter().map(|(id, v)| ((*id).to_owned(), v.to_string())).collect()
    }

    #[test]
    fn references_resolve_by_pointer() {
        let outputs = outputs(&[("a", json!({"content": [{"type": "text", "text": "hi"}], "n": 3}))]);
        let args = json!({"greeting": {"$from": "a", "pointer": "/content/0/text"}, "list": [{"$from": "a", "pointer": "/n"}], "whole": {"$from": "a"}});
        let limits = ResolveLimits::default();
        let resolved = resolve_bounded(&args, &outputs, &limits).expect("resolves");
        assert_eq!(resolved["greeting"], "hi");
        assert_eq!(resolved["list"][0], 3);
        assert_eq!(resolved["whole"]["n"], 3);
        let missing = resolve_bounded(&json!({"x": {"$from": "a", "pointer": "/nope"}}), &outputs, &limits)
            .expect_err("missing");
        assert!(missing.to_string().contains("/nope"), "{missing}");
        let absent =
            resolve_bounded(&json!({"x": {"$from": "b"}}), &outputs, &limits).expect_err("no output");
        assert_eq!(absent, ResolveError::NoOutput { from: "b".to_owned() });
    }

    #[test]
    fn the_resolved_size_is_exact_and_known_before_anything_is_built() {
        let big = json!({"text": "x".repeat(10_000)});
        let outputs = outputs(&[("big", big.clone())]);
        let args = json!({"a": {"$from": "big"}, "b": [1, {"$from": "big", "pointer": "/text"}], "c": "é"});
        let resolved = resolve_bounded(&args, &outputs, &ResolveLimits::default()).expect("fits");
        let exact = resolved.to_string().len();
        let just = ResolveLimits { max_resolved_bytes: exact, ..ResolveLimits::default() };
        assert_eq!(resolve_bounded(&args, &outputs, &just).expect("exactly at the limit"), resolved);
        let under = ResolveLimits { max_resolved_bytes: exact - 1, ..ResolveLimits::default() };
        assert!(matches!(
            resolve_bounded(&args, &outputs, &under),
            Err(ResolveError::TooLarge { max, .. }) if max == exact - 1
        ));
    }

    #[test]
    fn thousands_of_references_to_one_large_output_are_refused_without_building_them() {
        let outputs = outputs(&[("big", json!({"text": "x".repeat(1024 * 1024)}))]);
        let references: Vec<Value> =
            (0..5_000).map(|_| json!({"$from": "big", "pointer": "/text"})).collect();
        let args = json!({"items": references});
        let started = std::time::Instant::now();
        let error = resolve_bounded(&args, &outputs, &ResolveLimits::default()).expect_err("5 GB");
        assert!(matches!(error, ResolveError::TooLarge { size, .. } if size > 4 * 1024 * 1024), "{error}");
        assert!(error.to_string().contains("max_node_argument_bytes"), "{error}");
        // Measured once, not 5,000 times: far under a second even on a slow machine.
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
    }

    #[test]
    fn an_output_too_costly_to_parse_is_not_parsed() {
        let mut many = String::from("[");
        for i in 0..200_000 {
            if i > 0 {
                many.push(',');
            }
            many.push_str(r#"{"a":1}"#);
        }
        many.push(']');
        let outputs = HashMap::from([("n".to_owned(), many)]);
        let limits = ResolveLimits { max_parsed_bytes: 8 * 1024 * 1024, ..ResolveLimits::default() };
        let error = resolve_bounded(&json!({"x": {"$from": "n", "pointer": "/0"}}), &outputs, &limits)
            .expect_err("too costly");
        assert!(matches!(error, ResolveError::Unreadable { .. }), "{error}");
    }
}
