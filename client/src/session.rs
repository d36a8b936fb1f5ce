//! The endpoint, the token, and the rmcp session the client talks through.

use rmcp::model::{
    ClientCapabilities, ClientConfig, ElicitationCapability, ErrorData, ExtensionCapabilities,
    FormElicitationCapability, Implementation, JsonObject, ProtocolVersion, ReadResourceRequestParams,
    ResourceContents, TASKS_EXTENSION_ID,
};
use rmcp::service::{ClientInitializeError, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, RoleClient, ServiceError};
use serde_json::Value;

use crate::exit::{ClientError, Exit};

/// Where the endpoint is and who the caller is.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// The MCP endpoint, e.g. `http://127.0.0.1:8080/mcp`.
    pub url: String,
    /// A bearer token (a static token or an OAuth access token); none for a gateway run with
    /// `--no-auth`.
    pub token: Option<String>,
}

/// What the client declares: it answers form elicitations (in the terminal) and speaks the
/// Tasks extension. It declares no sampling and no roots: a tool that needs them is refused by
/// the server with a message that says so.
#[derive(Clone, Default)]
pub struct Declared;

impl ClientHandler for Declared {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        capabilities.elicitation =
            Some(ElicitationCapability::new().with_form(FormElicitationCapability::new()));
        capabilities.extensions =
            Some(ExtensionCapabilities::from([(TASKS_EXTENSION_ID.to_owned(), JsonObject::new())]));
        ClientConfig::new(capabilities, Implementation::new("conveyor-cli", env!("CARGO_PKG_VERSION")))
    }
}

pub type Session = RunningService<RoleClient, Declared>;

/// Connects with the 2026-07-28 lifecycle (`server/discover`, then `_meta` on every request).
pub async fn connect(endpoint: &Endpoint) -> Result<Session, ClientError> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(endpoint.url.clone());
    if let Some(token) = endpoint.token.as_ref().filter(|t| !t.is_empty()) {
        config = config.auth_header(token.clone());
    }
    let transport = StreamableHttpClientTransport::from_config(config);
    Declared
        .serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] },
        )
        .await
        .map_err(|e| connect_error(endpoint, e))
}

fn connect_error(endpoint: &Endpoint, error: ClientInitializeError) -> ClientError {
    let url = &endpoint.url;
    if error.is_authorization_required() {
        let hint = if endpoint.token.is_some() {
            "the endpoint refused the token: check CONVEYOR_TOKEN (or --token)"
        } else {
            "the endpoint needs a token: set CONVEYOR_TOKEN (or --token)"
        };
        return ClientError::new(Exit::Unreachable, format!("{url}: {hint}"));
    }
    ClientError::new(
        Exit::Unreachable,
        format!(
            "cannot talk MCP to {url}: {}. Is a gateway running there (CONVEYOR_URL or --url)?",
            without_type_names(&error)
        ),
    )
}

/// What went wrong, without the transport's type names that rmcp's message carries
/// ("Send message error Transport [rmcp::transport::...] error: HTTP 501, when ...").
fn without_type_names(error: &ClientInitializeError) -> String {
    let text = error.to_string();
    match text.rsplit_once("] error: ") {
        Some((_, cause)) => cause.to_owned(),
        None => text,
    }
}

/// A JSON-RPC error from the server, or a transport failure, as the client reports it.
pub fn request_error(what: &str, error: ServiceError) -> ClientError {
    match error {
        ServiceError::McpError(ErrorData { code, message, data }) => {
            let detail = data.map(|d| format!(" ({d})")).unwrap_or_default();
            let exit = if code.0 == -32602 || code.0 == -32601 { Exit::Usage } else { Exit::Failed };
            ClientError::new(exit, format!("{what}: {message} [{}]{detail}", code.0))
        }
        other => ClientError::new(Exit::Unreachable, format!("{what}: {other}")),
    }
}

/// Reads a JSON resource the gateway serves (`conveyor://tasks`, `conveyor://tasks/{id}`).
pub async fn read_json(session: &Session, uri: &str) -> Result<Value, ClientError> {
    let read = session
        .read_resource(ReadResourceRequestParams::new(uri))
        .await
        .map_err(|e| request_error(&format!("reading {uri}"), e))?;
    let text = read
        .contents
        .iter()
        .find_map(|c| match c {
            ResourceContents::TextResourceContents { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .ok_or_else(|| ClientError::failed(format!("{uri} has no text contents")))?;
    serde_json::from_str(text).map_err(|e| ClientError::failed(format!("{uri} is not JSON: {e}")))
}
