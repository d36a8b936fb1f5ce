//! The roots a caller may read, and what follows from them at the door: a call is refused before
//! any task exists when it names a root its caller may not read (in a tool's argument, through a
//! profile bound to the root, or because the tool always reads it), and every listing and
//! completion shows a caller only its own roots. A root is the caller's when the access policy
//! lets it read the root's resource, `conveyor://roots/NAME/`; the roots are those workers publish.
//! Tools say how their calls name roots in their definition ([`RootUse`]); the worker checks again
//! when a tool looks a root up, with the list each call carries in its record.

use std::borrow::Cow;

use conveyor_shared::roots::{META_ROOTS, RootRefusal, RootUse, not_granted};
use serde_json::Value;

use super::offers::META_COMPLETIONS;
use crate::access::Caller;
use crate::catalog::Snapshot;
use crate::rpc::RpcFailure;
use crate::state::AppState;

/// The roots a caller may read; `None`: every root, so that calls carry no list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Grants(Option<Vec<String>>);

impl Grants {
    /// The caller's roots among those the catalog knows.
    pub fn of(state: &AppState, caller: &Caller, catalog: &Snapshot) -> Self {
        Self(state.access.granted_roots(caller, catalog.roots.iter().map(String::as_str)))
    }

    pub fn may_read(&self, name: &str) -> bool {
        self.0.as_ref().is_none_or(|roots| roots.iter().any(|r| r == name))
    }

    /// What a call's record carries.
    pub fn into_record(self) -> Option<Vec<String>> {
        self.0
    }

    /// An offer's definition as the caller sees it: the values of its root arguments (their
    /// schema's `enum`, and `enumDescriptions` beside it, and their completions) only those it
    /// may use, and without the declaration of its roots, which is the gateways' and names every
    /// root. `None` when the offer always reads a root the caller may not read: it is not offered
    /// to the caller at all.
    pub fn view<'a>(&self, definition: &'a Value) -> Option<Cow<'a, Value>> {
        let Some(roots) = RootUse::of(definition) else { return Some(Cow::Borrowed(definition)) };
        let may_read = |r: &str| self.may_read(r);
        if roots.fixed_refusal(may_read).is_some() {
            return None;
        }
        let mut shown = definition.clone();
        if let Some(meta) = shown.get_mut("_meta").and_then(Value::as_object_mut) {
            meta.remove(META_ROOTS);
            if meta.is_empty() {
                shown.as_object_mut().map(|d| d.remove("_meta"));
            }
        }
        if self.0.is_none() {
            return Some(Cow::Owned(shown));
        }
        for argument in roots.arguments.iter().chain(roots.bound.keys()) {
            let allowed =
                |v: &Value| v.as_str().is_some_and(|v| roots.allows(argument, v, may_read) == Some(true));
            if let Some(property) =
                shown.pointer_mut(&format!("/inputSchema/properties/{}", escaped(argument)))
            {
                retain_enum(property, allowed);
            }
            let completions = format!("/_meta/{}/{}", escaped(META_COMPLETIONS), escaped(argument));
            if let Some(Value::Array(values)) = shown.pointer_mut(&completions) {
                values.retain(allowed);
            }
        }
        Some(Cow::Owned(shown))
    }

    /// Of `candidates` (completion values of `argument` of the offer `definition`), those the
    /// caller may use.
    pub fn completions(&self, definition: &Value, argument: &str, mut candidates: Vec<Value>) -> Vec<Value> {
        if self.0.is_none() {
            return candidates;
        }
        if let Some(roots) = RootUse::of(definition) {
            candidates.retain(|v| {
                v.as_str().is_some_and(|v| roots.allows(argument, v, |r| self.may_read(r)) != Some(false))
            });
        }
        candidates
    }

    /// Refuses a call of `tool` whose `arguments` name a root the caller may not read, as the
    /// invalid arguments they are, naming only the caller's own roots (or the values it may
    /// use); the refusal is audited. `context` starts the message (`Invalid arguments for tool
    /// `x``, a graph node's). Nothing is said of whether the root exists.
    pub fn check_call(
        &self,
        caller: &Caller,
        tool: &str,
        definition: &Value,
        arguments: &Value,
        context: &str,
    ) -> Result<(), RpcFailure> {
        let Some(granted) = &self.0 else { return Ok(()) };
        let Some(roots) = RootUse::of(definition) else { return Ok(()) };
        let Some(refused) = roots.refusal(arguments, |r| self.may_read(r)) else { return Ok(()) };
        audit(caller, tool, &refused);
        let message = match &refused.argument {
            Some(argument) if roots.arguments.contains(argument) => {
                format!("{context}: /{argument}: {}", not_granted(&refused.value, granted))
            }
            Some(argument) => {
                let yours: Vec<&String> = roots
                    .bound
                    .get(argument)
                    .into_iter()
                    .flat_map(|values| values.keys())
                    .filter(|v| roots.allows(argument, v, |r| self.may_read(r)) == Some(true))
                    .collect();
                let yours = if yours.is_empty() {
                    "none".to_owned()
                } else {
                    yours.iter().map(|v| format!("`{v}`")).collect::<Vec<_>>().join(", ")
                };
                format!(
                    "{context}: /{argument}: no `{argument}` named `{}` that you may use (it must read only roots you may read); yours: {yours}",
                    refused.value
                )
            }
            // A tool that always reads a root is not offered to a caller without it.
            None => format!("{context}: it reads a root you may not read"),
        };
        Err(RpcFailure::invalid_params(message)
            .with_data(serde_json::json!({"tool": tool, "argument": refused.argument})))
    }

    /// Whether `tool` (its definition) is offered to the caller at all; a refusal is audited.
    pub fn offers(&self, caller: &Caller, tool: &str, definition: &Value) -> bool {
        if self.0.is_none() {
            return true;
        }
        let Some(refused) = RootUse::of(definition).and_then(|r| r.fixed_refusal(|r| self.may_read(r)))
        else {
            return true;
        };
        audit(caller, tool, &refused);
        false
    }
}

fn audit(caller: &Caller, tool: &str, refused: &RootRefusal) {
    let subject = refused.root.as_deref().unwrap_or(&refused.value);
    let reason = match &refused.argument {
        Some(argument) => format!(
            "tool `{tool}`: argument `{argument}` = `{}` names a root the access policy does not grant",
            refused.value
        ),
        None => format!("tool `{tool}` reads a root the access policy does not grant"),
    };
    super::audit_denied(caller, "tools/call", subject, &reason);
}

/// A name as one JSON pointer token.
fn escaped(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

/// Keeps the values of a schema property's `enum` that `allowed` keeps, and their descriptions in
/// `enumDescriptions` (when it lists one per value).
fn retain_enum(property: &mut Value, allowed: impl Fn(&Value) -> bool) {
    let Some(object) = property.as_object_mut() else { return };
    let Some(Value::Array(values)) = object.get("enum") else { return };
    let keep: Vec<bool> = values.iter().map(&allowed).collect();
    for field in ["enum", "enumDescriptions"] {
        if let Some(Value::Array(items)) = object.get_mut(field)
            && items.len() == keep.len()
        {
            let mut flags = keep.iter();
            items.retain(|_| flags.next().copied().unwrap_or(false));
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn grants(roots: &[&str]) -> Grants {
        Grants(Some(roots.iter().map(|r| (*r).to_owned()).collect()))
    }

    fn caller() -> Caller {
        Caller { principal: "alice".to_owned(), groups: Vec::new(), operator: false }
    }

    fn research() -> Value {
        RootUse::argument("root").declared_in(json!({
            "name": "research",
            "inputSchema": {"type": "object", "properties": {
                "root": {"type": "string", "enum": ["sample", "vault"]},
                "question": {"type": "string"}
            }}
        }))
    }

    fn readiness() -> Value {
        let mut roots = RootUse::default();
        roots.bound.insert(
            "profile".to_owned(),
            [
                ("quick".to_owned(), vec!["sample".to_owned()]),
                ("vaulted".to_owned(), vec!["vault".to_owned()]),
            ]
            .into_iter()
            .collect(),
        );
        roots.declared_in(json!({
            "name": "deployment_readiness",
            "inputSchema": {"type": "object", "properties": {"profile": {
                "enum": ["quick", "vaulted"], "enumDescriptions": ["fast", "the vault's"]
            }}}
        }))
    }

    #[test]
    fn a_caller_sees_only_its_roots_and_the_profiles_bound_to_them() {
        let alice = grants(&["sample"]);
        let (research, readiness) = (research(), readiness());
        let seen = alice.view(&research).expect("offered");
        assert_eq!(seen["inputSchema"]["properties"]["root"]["enum"], json!(["sample"]));
        let seen = alice.view(&readiness).expect("offered");
        assert_eq!(seen["inputSchema"]["properties"]["profile"]["enum"], json!(["quick"]));
        assert_eq!(seen["inputSchema"]["properties"]["profile"]["enumDescriptions"], json!(["fast"]));
        assert!(seen["_meta"].is_null(), "the declaration names every root: {seen}");
        let everyone = Grants(None);
        let all = everyone.view(&research).expect("offered");
        assert_eq!(all["inputSchema"]["properties"]["root"]["enum"], json!(["sample", "vault"]));
        assert!(all.get("_meta").is_none(), "{all}");
        let plain = json!({"name": "greet"});
        assert!(matches!(alice.view(&plain), Some(Cow::Borrowed(_))), "no copy of a tool that reads no root");
        let template = RootUse::argument("root").declared_in(json!({
            "uriTemplate": "conveyor://roots/{root}/{+path}",
            "_meta": {META_COMPLETIONS: {"root": ["sample", "vault"]}}
        }));
        let seen = alice.view(&template).expect("offered");
        assert_eq!(seen["_meta"][META_COMPLETIONS]["root"], json!(["sample"]));
        assert!(seen["_meta"].get(META_ROOTS).is_none(), "{seen}");
        assert_eq!(
            alice.completions(&template, "root", vec![json!("sample"), json!("vault")]),
            vec![json!("sample")]
        );
        assert_eq!(alice.completions(&template, "path", vec![json!("vault")]), vec![json!("vault")]);
        let fixed = RootUse { fixed: vec!["vault".to_owned()], ..RootUse::default() }
            .declared_in(json!({"name": "grep"}));
        assert!(alice.view(&fixed).is_none() && !alice.offers(&caller(), "grep", &fixed));
        assert!(grants(&["vault"]).view(&fixed).is_some());
    }

    #[test]
    fn a_call_naming_a_root_the_caller_lacks_is_refused_naming_only_its_own() {
        let alice = grants(&["sample"]);
        let context = "Invalid arguments for tool `research`";
        assert!(
            alice.check_call(&caller(), "research", &research(), &json!({"root": "sample"}), context).is_ok()
        );
        for root in ["vault", "nope"] {
            let refused = alice
                .check_call(&caller(), "research", &research(), &json!({"root": root}), context)
                .expect_err("not hers");
            assert_eq!(
                refused.error.message,
                format!(
                    "Invalid arguments for tool `research`: /root: no root named `{root}` that you may read; your roots: sample"
                )
            );
        }
        let refused = alice
            .check_call(&caller(), "deployment_readiness", &readiness(), &json!({"profile": "vaulted"}), "x")
            .expect_err("bound to the vault");
        assert!(
            refused.error.message.contains("yours: `quick`") && !refused.error.message.contains("vault`"),
            "{}",
            refused.error.message
        );
        assert!(
            Grants(None)
                .check_call(&caller(), "research", &research(), &json!({"root": "vault"}), context)
                .is_ok()
        );
    }
}
