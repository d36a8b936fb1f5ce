//! Who may call which tool, and who operates the cluster. An access file (TOML) lists rules; a
//! caller sees in `tools/list`, and may call, only the tools a rule grants it. Operators see and
//! cancel every principal's tasks.
//!
//! ```toml
//! operators = ["group:ops"]
//! default = "deny"           # tools no rule names: "allow" (the default) or "deny"
//!
//! [[rule]]
//! tools = ["research", "validate_*"]
//! allow = ["group:research", "alice"]
//! ```

use std::path::Path;

use serde::Deserialize;

use crate::auth::Identity;

/// A caller as every handler sees it: who, in which groups, and whether an operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub principal: String,
    pub groups: Vec<String>,
    pub operator: bool,
}

impl Caller {
    /// The owner a store operation is restricted to: none for an operator (`""` skips the
    /// owner check in the scripts), the caller otherwise.
    pub fn owner_filter(&self) -> &str {
        if self.operator { "" } else { &self.principal }
    }

    /// Whether the caller may see a task of `owner`.
    pub fn may_see(&self, owner: &str) -> bool {
        self.operator || owner == self.principal
    }
}

/// What becomes of a tool no rule names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnnamedTools {
    #[default]
    Allow,
    Deny,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Rule {
    /// Tool names; a trailing `*` matches a prefix.
    tools: Vec<String>,
    /// Principals, and groups as `group:<name>`.
    allow: Vec<String>,
}

/// The access policy of a gateway. Without an access file every caller may call every tool and
/// nobody is an operator.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessPolicy {
    #[serde(default)]
    operators: Vec<String>,
    #[serde(default)]
    default: UnnamedTools,
    #[serde(default, rename = "rule")]
    rules: Vec<Rule>,
}

fn matches_tool(pattern: &str, tool: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => tool.starts_with(prefix),
        None => pattern == tool,
    }
}

fn names(subject: &str, identity: &Identity) -> bool {
    match subject.strip_prefix("group:") {
        Some(group) => identity.groups.iter().any(|g| g == group),
        None => subject == identity.principal,
    }
}

impl AccessPolicy {
    pub fn load(path: &Path) -> Result<Self, String> {
        let text =
            std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let policy: Self = toml::from_str(text).map_err(|e| e.to_string())?;
        for (i, rule) in policy.rules.iter().enumerate() {
            if rule.tools.is_empty() || rule.tools.iter().any(|t| t.is_empty()) {
                return Err(format!("rule {}: `tools` must name at least one tool", i + 1));
            }
        }
        Ok(policy)
    }

    /// The caller an identity is under this policy.
    pub fn caller(&self, identity: Identity) -> Caller {
        let operator = self.operators.iter().any(|s| names(s, &identity));
        Caller { principal: identity.principal, groups: identity.groups, operator }
    }

    /// Whether the caller may call (and see) `tool`. Operators are bound by the rules too: seeing
    /// every task is not the same as running every tool.
    pub fn may_call(&self, caller: &Caller, tool: &str) -> bool {
        let identity = Identity { principal: caller.principal.clone(), groups: caller.groups.clone() };
        let mut named = false;
        for rule in self.rules.iter().filter(|r| r.tools.iter().any(|p| matches_tool(p, tool))) {
            named = true;
            if rule.allow.iter().any(|s| names(s, &identity)) {
                return true;
            }
        }
        !named && self.default == UnnamedTools::Allow
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(principal: &str, groups: &[&str]) -> Identity {
        Identity { principal: principal.into(), groups: groups.iter().map(|g| (*g).to_owned()).collect() }
    }

    #[test]
    fn rules_grant_tools_to_principals_and_groups() {
        let policy = AccessPolicy::parse(
            r#"
            operators = ["group:ops", "root"]
            default = "deny"
            [[rule]]
            tools = ["research", "validate_*"]
            allow = ["group:research", "alice"]
            [[rule]]
            tools = ["greet"]
            allow = ["bob"]
            "#,
        )
        .expect("valid");
        let alice = policy.caller(identity("alice", &[]));
        let carol = policy.caller(identity("carol", &["research"]));
        let bob = policy.caller(identity("bob", &["ops"]));
        assert!(policy.may_call(&alice, "research") && policy.may_call(&alice, "validate_adrs"));
        assert!(!policy.may_call(&alice, "greet"));
        assert!(policy.may_call(&carol, "validate_x"));
        assert!(policy.may_call(&bob, "greet") && !policy.may_call(&bob, "research"));
        assert!(!policy.may_call(&bob, "unnamed"), "default deny");
        assert!(bob.operator && !alice.operator);
        assert_eq!(bob.owner_filter(), "");
        assert_eq!(alice.owner_filter(), "alice");
        assert!(policy.caller(identity("root", &[])).operator);
    }

    #[test]
    fn without_rules_everything_is_allowed_and_nobody_operates() {
        let policy = AccessPolicy::default();
        let anyone = policy.caller(identity("x", &["ops"]));
        assert!(policy.may_call(&anyone, "anything"));
        assert!(!anyone.operator);
        assert!(AccessPolicy::parse("[[rule]]\ntools = []\nallow = []\n").is_err());
        assert!(AccessPolicy::parse("unknown = 1\n").is_err());
    }
}
