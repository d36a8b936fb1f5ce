//! Who may use which offer (tools, prompts, resources and resource templates), and who operates
//! the cluster. An access file (TOML) lists rules; a caller sees in every listing, and may use,
//! only what a rule grants it (or what no rule names, when the default allows it). Operators see
//! and cancel every principal's tasks.
//!
//! ```toml
//! operators = ["group:ops"]
//! default = "deny"           # offers no rule names: "allow" (the default) or "deny"
//!
//! [[rule]]
//! tools = ["research", "validate_*"]
//! prompts = ["adr_*"]
//! resources = ["conveyor://roots/repo/*", "adr://*"]
//! allow = ["group:research", "alice"]
//! ```
//!
//! Tools and prompts are named by name, resources by URI; a trailing `*` matches a prefix. A
//! resource read through a template is judged by the URI read, and a template is offered to a
//! caller who may read some URI it can produce. The gateway's own resources of a caller's tasks
//! (`conveyor://tasks...`) are the caller's like `tasks/get` is, and no rule is needed for them.

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

/// An access the caller was refused, in the audit log.
pub(crate) fn audit_denied(caller: &Caller, method: &str, subject: &str, reason: &str) {
    tracing::info!(target: "conveyor::audit", event = "denied", principal = %caller.principal, method, subject, reason, "access denied");
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

/// What becomes of an offer no rule names.
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
    #[serde(default)]
    tools: Vec<String>,
    /// Prompt names, likewise.
    #[serde(default)]
    prompts: Vec<String>,
    /// Resource URIs, likewise (they also grant the templates that produce them).
    #[serde(default)]
    resources: Vec<String>,
    /// Principals, and groups as `group:<name>` (an OAuth token's as `group:<issuer>#<name>`).
    allow: Vec<String>,
}

/// The kinds of offer a rule names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    Tool,
    Prompt,
    Resource,
}

impl Rule {
    fn patterns(&self, offer: Offer) -> &[String] {
        match offer {
            Offer::Tool => &self.tools,
            Offer::Prompt => &self.prompts,
            Offer::Resource => &self.resources,
        }
    }
}

/// The access policy of a gateway. Without an access file every caller may use every offer and
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

/// What every root's resource URI starts with: root `NAME` is `conveyor://roots/NAME/`.
pub const ROOTS_PREFIX: &str = "conveyor://roots/";

/// The URI of root `name`'s resource (its file list): the grant to read it is the grant to have
/// tools read the root.
pub fn root_uri(name: &str) -> String {
    format!("{ROOTS_PREFIX}{name}/")
}

fn matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

/// Whether `pattern` (a resource rule) matches some URI that `template` (RFC 6570, `{var}`) can
/// produce: the literal text before the template's first variable and the pattern's fixed text
/// must agree where both have characters.
fn matches_template(pattern: &str, template: &str) -> bool {
    let literal = template.split('{').next().unwrap_or(template);
    let has_variables = literal.len() < template.len();
    match pattern.strip_suffix('*') {
        Some(prefix) => (has_variables && prefix.starts_with(literal)) || literal.starts_with(prefix),
        // An exact URI: the template must be able to produce it.
        None => crate::uri_template::template_matches(template, pattern),
    }
}

/// Whether `pattern` (a resource rule) matches every URI `template` can produce.
fn covers(pattern: &str, template: &str) -> bool {
    let literal = template.split('{').next().unwrap_or(template);
    match pattern.strip_suffix('*') {
        Some(prefix) => literal.starts_with(prefix),
        None => pattern == template && !template.contains('{'),
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
            let named = [&rule.tools, &rule.prompts, &rule.resources];
            if named.iter().all(|list| list.is_empty()) {
                return Err(format!(
                    "rule {}: name at least one tool, prompt or resource (`tools`, `prompts`, `resources`)",
                    i + 1
                ));
            }
            if named.iter().any(|list| list.iter().any(|p| p.is_empty())) {
                return Err(format!("rule {}: an empty name matches nothing; remove it", i + 1));
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
        self.may_use(caller, Offer::Tool, tool)
    }

    /// Whether the caller may use (and see) the offer of kind `offer` named `name` (a tool or
    /// prompt name, a resource URI).
    pub fn may_use(&self, caller: &Caller, offer: Offer, name: &str) -> bool {
        self.decide(caller, offer, |pattern| matches(pattern, name))
    }

    /// Whether a resource template is offered to the caller: when a rule that grants the caller
    /// names a URI the template can produce, or, with the default allowing, unless rules name
    /// every URI it can produce (a rule's prefix that every one of them starts with). Reading a
    /// URI through it is judged by that URI ([`AccessPolicy::may_use`]).
    pub fn may_use_template(&self, caller: &Caller, template: &str) -> bool {
        let identity = Identity { principal: caller.principal.clone(), groups: caller.groups.clone() };
        let granted = self
            .rules
            .iter()
            .filter(|r| r.allow.iter().any(|s| names(s, &identity)))
            .flat_map(|r| r.resources.iter())
            .any(|p| matches_template(p, template));
        granted
            || (self.default == UnnamedTools::Allow
                && !self.rules.iter().flat_map(|r| r.resources.iter()).any(|p| covers(p, template)))
    }

    /// Whether the caller may read every root, whatever its name: a rule that grants the caller
    /// matches every root's URI (`conveyor://roots/*`), or no rule names any root's URI and the
    /// default allows. Its calls then carry no list of roots.
    pub fn reads_every_root(&self, caller: &Caller) -> bool {
        let identity = Identity { principal: caller.principal.clone(), groups: caller.groups.clone() };
        let covers_every_root =
            |p: &String| p.strip_suffix('*').is_some_and(|prefix| ROOTS_PREFIX.starts_with(prefix));
        let granted = self
            .rules
            .iter()
            .filter(|r| r.allow.iter().any(|s| names(s, &identity)))
            .flat_map(|r| r.resources.iter())
            .any(covers_every_root);
        let names_a_root = |p: &String| match p.strip_suffix('*') {
            Some(prefix) => prefix.starts_with(ROOTS_PREFIX) || ROOTS_PREFIX.starts_with(prefix),
            None => p.starts_with(ROOTS_PREFIX),
        };
        granted
            || (self.default == UnnamedTools::Allow
                && !self.rules.iter().flat_map(|r| r.resources.iter()).any(names_a_root))
    }

    /// The roots among `known` the caller may read (the policy lets it read
    /// `conveyor://roots/NAME/`); `None` when it may read every root ([`Self::reads_every_root`]).
    pub fn granted_roots<'a>(
        &self,
        caller: &Caller,
        known: impl IntoIterator<Item = &'a str>,
    ) -> Option<Vec<String>> {
        if self.reads_every_root(caller) {
            return None;
        }
        Some(
            known
                .into_iter()
                .filter(|name| self.may_use(caller, Offer::Resource, &root_uri(name)))
                .map(str::to_owned)
                .collect(),
        )
    }

    fn decide(&self, caller: &Caller, offer: Offer, matched: impl Fn(&str) -> bool) -> bool {
        let identity = Identity { principal: caller.principal.clone(), groups: caller.groups.clone() };
        let mut named = false;
        for rule in self.rules.iter().filter(|r| r.patterns(offer).iter().any(|p| matched(p))) {
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
    fn prompts_resources_and_templates_pass_the_same_rules() {
        let policy = AccessPolicy::parse(
            r#"
            default = "deny"
            [[rule]]
            resources = ["conveyor://roots/repo/*"]
            prompts = ["adr_*"]
            allow = ["alice"]
            [[rule]]
            resources = ["adr://nygard.md"]
            allow = ["bob"]
            "#,
        )
        .expect("valid");
        let alice = policy.caller(identity("alice", &[]));
        let bob = policy.caller(identity("bob", &[]));
        let nobody = policy.caller(identity("mallory", &[]));
        let roots = "conveyor://roots/{root}/{+path}";
        assert!(policy.may_use(&alice, Offer::Resource, "conveyor://roots/repo/src/lib.rs"));
        assert!(!policy.may_use(&alice, Offer::Resource, "conveyor://roots/sample/.env"));
        assert!(!policy.may_use(&nobody, Offer::Resource, "conveyor://roots/repo/src/lib.rs"));
        assert!(
            policy.may_use(&alice, Offer::Prompt, "adr_planning")
                && !policy.may_use(&bob, Offer::Prompt, "adr_planning")
        );
        assert!(!policy.may_use(&alice, Offer::Tool, "adr_planning"), "a prompt rule grants no tool");
        assert!(policy.may_use_template(&alice, roots), "alice may read some of its URIs");
        assert!(!policy.may_use_template(&nobody, roots), "default deny, nothing granted");
        assert!(policy.may_use_template(&bob, "adr://{template}.md"), "an exact URI the template produces");
        assert!(!policy.may_use_template(&bob, "adr://{template}.txt"));

        let open =
            AccessPolicy::parse("[[rule]]\nresources = [\"conveyor://roots/*\"]\nallow = [\"group:ops\"]\n")
                .expect("valid");
        let anyone = open.caller(identity("x", &[]));
        assert!(open.may_use(&anyone, Offer::Prompt, "anything"), "default allow for what no rule names");
        assert!(
            !open.may_use(&anyone, Offer::Resource, "conveyor://roots/repo/a"),
            "named by a rule that does not grant x"
        );
        assert!(!open.may_use_template(&anyone, roots), "every URI it produces is named");
        assert!(open.may_use_template(&anyone, "adr://{template}"));
    }

    #[test]
    fn a_root_is_granted_by_the_grant_to_read_its_resource() {
        let policy = AccessPolicy::parse(
            r#"
            default = "deny"
            [[rule]]
            tools = ["research"]
            resources = ["conveyor://roots/sample/*"]
            allow = ["alice"]
            [[rule]]
            resources = ["conveyor://roots/*"]
            allow = ["group:ops"]
            [[rule]]
            resources = ["conveyor://roots/docs/README.md"]
            allow = ["bob"]
            "#,
        )
        .expect("valid");
        let known = ["sample", "vault", "docs"];
        let alice = policy.caller(identity("alice", &[]));
        let ops = policy.caller(identity("olga", &["ops"]));
        let bob = policy.caller(identity("bob", &[]));
        assert_eq!(policy.granted_roots(&alice, known), Some(vec!["sample".to_owned()]));
        assert_eq!(policy.granted_roots(&ops, known), None, "a rule over every root's URI");
        assert_eq!(policy.granted_roots(&bob, known), Some(Vec::new()), "one file is not the root");

        let open = AccessPolicy::default();
        assert_eq!(open.granted_roots(&open.caller(identity("x", &[])), known), None, "no access file");
        let tools_only =
            AccessPolicy::parse("[[rule]]\ntools = [\"research\"]\nallow = [\"alice\"]\n").expect("valid");
        assert!(tools_only.reads_every_root(&tools_only.caller(identity("x", &[]))), "no rule names a root");
        let one_hidden =
            AccessPolicy::parse("[[rule]]\nresources = [\"conveyor://roots/vault/*\"]\nallow = [\"ops\"]\n")
                .expect("valid");
        let anyone = one_hidden.caller(identity("x", &[]));
        assert!(!one_hidden.reads_every_root(&anyone));
        assert_eq!(
            one_hidden.granted_roots(&anyone, known),
            Some(vec!["sample".to_owned(), "docs".to_owned()]),
            "default allow: every root no rule keeps for others"
        );
        let everything =
            AccessPolicy::parse("default = \"deny\"\n[[rule]]\nresources = [\"*\"]\nallow = [\"x\"]\n")
                .expect("valid");
        assert!(everything.reads_every_root(&everything.caller(identity("x", &[]))));
        assert!(!everything.reads_every_root(&everything.caller(identity("y", &[]))));
    }

    #[test]
    fn the_roots_granted_are_exactly_those_whose_resource_may_be_read() {
        let patterns = [
            "conveyor://roots/*",
            "conveyor://*",
            "*",
            "conveyor://roots/sample/*",
            "conveyor://roots/sam*",
            "conveyor://roots/vault/",
            "conveyor://roots/vault/notes.md",
            "adr://*",
        ];
        let known = ["sample", "vault", "repo"];
        for default in ["allow", "deny"] {
            for (i, first) in patterns.iter().enumerate() {
                for second in &patterns[i..] {
                    let text = format!(
                        "default = \"{default}\"\n[[rule]]\nresources = [\"{first}\"]\nallow = [\"alice\"]\n[[rule]]\nresources = [\"{second}\"]\nallow = [\"bob\"]\n"
                    );
                    let policy = AccessPolicy::parse(&text).expect("valid");
                    for who in ["alice", "bob", "carol"] {
                        let caller = policy.caller(identity(who, &[]));
                        let granted = policy.granted_roots(&caller, known);
                        for name in known {
                            let readable = policy.may_use(&caller, Offer::Resource, &root_uri(name));
                            match &granted {
                                None => assert!(readable, "{who} may read every root, {name} too:\n{text}"),
                                Some(roots) => {
                                    assert_eq!(
                                        roots.iter().any(|r| r == name),
                                        readable,
                                        "{who}, {name}:\n{text}"
                                    )
                                }
                            }
                        }
                    }
                }
            }
        }
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
