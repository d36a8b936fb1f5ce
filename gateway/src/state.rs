//! What every request handler shares. Nothing here is per client: any replica serves any request.

use conveyor_shared::{Config, Store};

use crate::catalog::ToolCatalog;

/// HTTP-level policy of a gateway.
#[derive(Debug, Clone)]
pub struct HttpPolicy {
    /// Hosts (without port) the gateway answers for, for DNS-rebinding protection; `*` allows all.
    pub allowed_hosts: Vec<String>,
}

impl Default for HttpPolicy {
    fn default() -> Self {
        Self { allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "::1".into()] }
    }
}

pub struct AppState {
    pub store: Store,
    pub config: Config,
    pub catalog: ToolCatalog,
    pub http: HttpPolicy,
}

impl AppState {
    pub fn new(store: Store, config: Config, http: HttpPolicy) -> Self {
        Self { catalog: ToolCatalog::new(store.clone()), store, config, http }
    }
}
