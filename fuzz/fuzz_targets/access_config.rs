//! The gateway's security configuration, as operators write it: a tokens file and an access file
//! (TOML). Any text either parses into a policy that answers every question, or is refused with a
//! message; nothing panics. A parsed policy is asked about a few callers and tools.
#![no_main]

use conveyor_gateway::access::AccessPolicy;
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
                }
                assert_eq!(caller.owner_filter().is_empty(), caller.operator || caller.principal.is_empty());
            }
        }
        Err(message) => assert!(!message.is_empty()),
    }
});
