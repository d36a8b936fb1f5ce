//! Which roots a tool reads, as its definition tells gateways: `_meta["io.conveyor/roots"]`.
//! A tool that reads a root names how a call picks it (an argument whose value is a root's
//! name, an argument whose value names something the operator bound to roots such as a
//! readiness profile, or roots every call reads), so that a gateway can refuse a call naming a
//! root its caller may not read before any task exists, and show each caller only its own roots
//! in schemas and completions. The worker checks again when the tool looks a root up: this
//! declaration is what a gateway can see, not the guard itself.
//!
//! ```json
//! "_meta": {"io.conveyor/roots": {
//!     "arguments": ["root"],
//!     "bound": {"profile": {"release": ["repo"], "docs": ["site", "repo"]}},
//!     "fixed": ["repo"]
//! }}
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The `_meta` key of a definition's [`RootUse`].
pub const META_ROOTS: &str = "io.conveyor/roots";

/// How a tool's calls name the roots they read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RootUse {
    /// Top-level arguments whose value is a root's name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub arguments: Vec<String>,
    /// Top-level arguments whose value names something bound to roots: each value the argument
    /// takes, and the roots a call with it reads. A value not listed is not one to take.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub bound: BTreeMap<String, BTreeMap<String, Vec<String>>>,
    /// Roots every call reads, whatever its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fixed: Vec<String>,
}

/// Why a call may not read what it names: the argument (none for a fixed root), its value, and
/// the first root of it the caller lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootRefusal {
    pub argument: Option<String>,
    pub value: String,
    pub root: Option<String>,
}

impl RootUse {
    /// A tool whose argument `name` is a root's name.
    pub fn argument(name: &str) -> Self {
        Self { arguments: vec![name.to_owned()], ..Self::default() }
    }

    /// The declaration in `definition`'s `_meta`; `None` when it has none (or one that does not
    /// read as one: such a tool is checked by its worker alone).
    pub fn of(definition: &Value) -> Option<Self> {
        let meta = definition.get("_meta")?.get(META_ROOTS)?;
        serde_json::from_value(meta.clone()).ok()
    }

    /// Whether the tool reads no root at all.
    pub fn is_empty(&self) -> bool {
        self.arguments.is_empty() && self.bound.is_empty() && self.fixed.is_empty()
    }

    /// `definition` with this declaration in its `_meta` (unchanged when it reads no root).
    pub fn declared_in(&self, mut definition: Value) -> Value {
        if self.is_empty() {
            return definition;
        }
        if let Some(object) = definition.as_object_mut() {
            let meta = object.entry("_meta").or_insert_with(|| Value::Object(Default::default()));
            if let Some(meta) = meta.as_object_mut() {
                meta.insert(META_ROOTS.to_owned(), serde_json::to_value(self).unwrap_or(Value::Null));
            }
        }
        definition
    }

    /// Whether a call may pass `value` for `argument`, for a caller who may read the roots
    /// `may_read` says: `None` when the argument names no root.
    pub fn allows(&self, argument: &str, value: &str, may_read: impl Fn(&str) -> bool) -> Option<bool> {
        if self.arguments.iter().any(|a| a == argument) {
            return Some(may_read(value));
        }
        let bound = self.bound.get(argument)?;
        Some(bound.get(value).is_some_and(|roots| roots.iter().all(|r| may_read(r))))
    }

    /// The first root the caller lacks among those every call reads.
    pub fn fixed_refusal(&self, may_read: impl Fn(&str) -> bool) -> Option<RootRefusal> {
        self.fixed.iter().find(|r| !may_read(r)).map(|root| RootRefusal {
            argument: None,
            value: root.clone(),
            root: Some(root.clone()),
        })
    }

    /// The first thing `arguments` name that the caller may not read: a fixed root, or an
    /// argument whose string value is a root (or a bound value) it lacks. Values that are not
    /// strings (a graph node's `{"$from": ...}`) are left to the worker, which sees them resolved.
    pub fn refusal(&self, arguments: &Value, may_read: impl Fn(&str) -> bool) -> Option<RootRefusal> {
        if let Some(refused) = self.fixed_refusal(&may_read) {
            return Some(refused);
        }
        let named = self.arguments.iter().chain(self.bound.keys());
        for argument in named {
            let Some(value) = arguments.get(argument).and_then(Value::as_str) else { continue };
            if self.allows(argument, value, &may_read) == Some(false) {
                let root = match self.bound.get(argument) {
                    None => Some(value.to_owned()),
                    Some(bound) => {
                        bound.get(value).and_then(|roots| roots.iter().find(|r| !may_read(r)).cloned())
                    }
                };
                return Some(RootRefusal { argument: Some(argument.clone()), value: value.to_owned(), root });
            }
        }
        None
    }
}

/// What a caller is told of a root it may not read, whether or not the root exists, so that the
/// answer confirms no other principal's root: `yours` are the roots it may read.
pub fn not_granted(name: &str, yours: &[String]) -> String {
    let yours = if yours.is_empty() { "none".to_owned() } else { yours.join(", ") };
    format!("no root named `{name}` that you may read; your roots: {yours}")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn example() -> RootUse {
        RootUse {
            arguments: vec!["root".to_owned()],
            bound: BTreeMap::from([(
                "profile".to_owned(),
                BTreeMap::from([
                    ("release".to_owned(), vec!["repo".to_owned()]),
                    ("docs".to_owned(), vec!["site".to_owned(), "repo".to_owned()]),
                ]),
            )]),
            fixed: Vec::new(),
        }
    }

    #[test]
    fn a_declaration_round_trips_through_a_definition() {
        let definition = example().declared_in(json!({"name": "t", "_meta": {"other": 1}}));
        assert_eq!(definition["_meta"]["other"], 1, "other meta stays");
        assert_eq!(definition["_meta"][META_ROOTS]["arguments"], json!(["root"]));
        assert!(definition["_meta"][META_ROOTS].get("fixed").is_none(), "empty parts are left out");
        assert_eq!(RootUse::of(&definition), Some(example()));
        assert_eq!(RootUse::of(&json!({"name": "t"})), None);
        assert_eq!(
            RootUse::default().declared_in(json!({"name": "t"})),
            json!({"name": "t"}),
            "reads no root"
        );
        assert_eq!(RootUse::of(&json!({"_meta": {META_ROOTS: {"arguments": 3}}})), None);
    }

    #[test]
    fn a_call_naming_a_root_the_caller_lacks_is_refused_with_the_root() {
        let repo_only = |r: &str| r == "repo";
        let roots = example();
        assert_eq!(roots.refusal(&json!({"root": "repo", "profile": "release"}), repo_only), None);
        assert_eq!(
            roots.refusal(&json!({"root": "vault"}), repo_only),
            Some(RootRefusal {
                argument: Some("root".to_owned()),
                value: "vault".to_owned(),
                root: Some("vault".to_owned())
            })
        );
        let docs = roots.refusal(&json!({"profile": "docs"}), repo_only).expect("site is not granted");
        assert_eq!((docs.value.as_str(), docs.root.as_deref()), ("docs", Some("site")));
        let unknown = roots.refusal(&json!({"profile": "nope"}), |_| true).expect("no such profile");
        assert_eq!(unknown.root, None, "an unknown value names no root");
        assert_eq!(roots.refusal(&json!({"root": {"$from": "a"}}), repo_only), None, "left to the worker");
        assert_eq!(roots.refusal(&json!({}), repo_only), None);
        let fixed = RootUse { fixed: vec!["vault".to_owned()], ..RootUse::default() };
        assert_eq!(fixed.refusal(&json!({}), repo_only).and_then(|r| r.root), Some("vault".to_owned()));
        assert_eq!(roots.allows("question", "x", repo_only), None);
        assert_eq!(roots.allows("profile", "release", repo_only), Some(true));
    }

    #[test]
    fn the_refusal_names_only_the_callers_roots() {
        assert_eq!(
            not_granted("vault", &["sample".to_owned()]),
            "no root named `vault` that you may read; your roots: sample"
        );
        assert!(not_granted("vault", &[]).ends_with("your roots: none"));
    }
}
