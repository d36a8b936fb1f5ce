//! What every request handler shares. Nothing here is per client: any replica serves any request.

use std::collections::HashMap;

use conveyor_shared::{Config, Store};

use crate::catalog::ToolCatalog;

/// HTTP-level policy of a gateway.
#[derive(Clone)]
pub struct HttpPolicy {
    /// Hosts (without port) the gateway answers for, for DNS-rebinding protection; `*` allows all.
    pub allowed_hosts: Vec<String>,
    /// API key -> principal. Empty: no authentication, every caller is `anonymous`.
    pub api_keys: HashMap<String, String>,
}

impl Default for HttpPolicy {
    fn default() -> Self {
        Self {
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "::1".into()],
            api_keys: HashMap::new(),
        }
    }
}

impl HttpPolicy {
    /// Reads `principal=key` pairs separated by commas; the error names the malformed entry.
    pub fn parse_api_keys(spec: &str) -> Result<HashMap<String, String>, String> {
        let mut keys = HashMap::new();
        for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let Some((principal, key)) = entry.split_once('=') else {
                return Err(format!("API key entry `{entry}` is not `principal=key`"));
            };
            let (principal, key) = (principal.trim(), key.trim());
            if principal.is_empty() || key.len() < 16 {
                return Err(format!(
                    "API key entry for `{principal}` needs a principal and a key of at least 16 characters"
                ));
            }
            if keys.insert(key.to_owned(), principal.to_owned()).is_some() {
                return Err(format!("the key of `{principal}` is given twice"));
            }
        }
        Ok(keys)
    }

    /// The principal of an API key.
    pub fn principal_of(&self, key: &str) -> Option<&str> {
        self.api_keys.get(key).map(String::as_str)
    }
}

pub struct AppState {
    pub store: Store,
    pub config: Config,
    pub catalog: ToolCatalog,
    pub http: HttpPolicy,
    /// Fires when the gateway shuts down: requests that wait on a task end with an error the
    /// client can retry on another gateway, so that the drain does not wait for tasks to finish.
    pub shutdown: tokio_util::sync::CancellationToken,
}

impl AppState {
    pub fn new(store: Store, config: Config, http: HttpPolicy) -> Self {
        Self {
            catalog: ToolCatalog::new(store.clone()),
            store,
            config,
            http,
            shutdown: tokio_util::sync::CancellationToken::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_keys_parse_and_refuse_bad_entries() {
        let keys = HttpPolicy::parse_api_keys("alice=0123456789abcdef, bob=fedcba9876543210").expect("valid");
        assert_eq!(keys.get("0123456789abcdef").map(String::as_str), Some("alice"));
        assert!(HttpPolicy::parse_api_keys("alice").is_err());
        assert!(HttpPolicy::parse_api_keys("alice=short").is_err());
        assert!(HttpPolicy::parse_api_keys("a=0123456789abcdef,b=0123456789abcdef").is_err());
        assert!(HttpPolicy::parse_api_keys("").expect("empty").is_empty());
    }
}
