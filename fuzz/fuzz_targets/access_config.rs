//! The gateway's security configuration, as operators write it: a tokens file and an access file
//! (TOML). Any text either parses into a policy that answers every question, or is refused with a
//! message; nothing panics. A parsed policy is asked about a few callers and every kind of offer:
//! it answers the same twice, a tool's answer is the same asked either way, a resource template
//! is offered to whoever may read a URI it produces, and the roots a caller's tools may read are
//! exactly those whose resource it may read.
#![no_main]

use conveyor_gateway::access::{AccessPolicy, Offer, root_uri};
use conveyor_gateway::auth::{Identity, StaticTokens, token_digest};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match StaticTokens::parse(text) {
        Ok(tokens) => {
            let _ = tokens.identify(text);
            let _ = tokens.identify(&token_digest(text));
        }
        Err(message) => assert!(!message.is_empty()),
    }
    match AccessPolicy::parse(text) {
        Ok(policy) => {
            for (principal, groups) in [("alice", vec![]), ("bob", vec!["ops".to_owned()]), ("", vec![String::new()])] {
                let caller = policy.caller(Identity { principal: principal.to_owned(), groups });
                for tool in ["research", "validate_adrs", "run_dag", "", "*"] {
                    let allowed = policy.may_call(&caller, tool);
                    assert_eq!(allowed, policy.may_call(&caller, tool), "a policy answers the same twice");
                    assert_eq!(allowed, policy.may_use(&caller, Offer::Tool, tool));
                }
                for prompt in ["adr_planning", "greet", ""] {
                    assert_eq!(
                        policy.may_use(&caller, Offer::Prompt, prompt),
                        policy.may_use(&caller, Offer::Prompt, prompt)
                    );
                }
                // Each template with URIs it produces.
                let produced: [(&str, &[&str]); 3] = [
                    ("conveyor://roots/{root}/{+path}", &["conveyor://roots/repo/src/lib.rs", "conveyor://roots/sample/.env", "conveyor://roots/a/b"]),
                    ("adr://{template}.{format}", &["adr://nygard.md", "adr://madr.txt"]),
                    ("test://static", &["test://static"]),
                ];
                for (template, uris) in produced {
                    let offered = policy.may_use_template(&caller, template);
                    assert_eq!(offered, policy.may_use_template(&caller, template));
                    for uri in uris {
                        if policy.may_use(&caller, Offer::Resource, uri) {
                            assert!(offered, "{uri} may be read, so {template} must be offered");
                        }
                    }
                }
                let known = ["repo", "sample", "vault", "a"];
                let granted = policy.granted_roots(&caller, known);
                for name in known {
                    let readable = policy.may_use(&caller, Offer::Resource, &root_uri(name));
                    match &granted {
                        None => assert!(readable, "every root is the caller's, so is {name}"),
                        Some(roots) => assert_eq!(roots.iter().any(|r| r == name), readable, "{name}"),
                    }
                }
                assert_eq!(caller.owner_filter().is_empty(), caller.operator || caller.principal.is_empty());
            }
        }
        Err(message) => assert!(!message.is_empty()),
    }
});
