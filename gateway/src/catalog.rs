//! The tools gateways offer: read from what workers publish in Redis, cached briefly, each with
//! its input schema compiled once so that bad arguments are refused before a task exists. A tool
//! is listed while a live worker (one whose heartbeat is recent) offers it; a call to a known tool
//! whose workers are all gone is still taken, and waits in its queue for one.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use conveyor_shared::model::{OfferKind, PublishedTool};
use conveyor_shared::{Store, StoreError};
use serde_json::{Value, json};

use crate::rpc::RpcFailure;

/// How long a fetched catalog is used before it is read again.
const FRESH_FOR: Duration = Duration::from_secs(2);
/// A lookup of an unknown tool re-reads at most this often, so that a newly started worker's tools
/// are found at once without letting unknown names hammer Redis.
const MISS_REFRESH: Duration = Duration::from_millis(200);

/// `execution.taskSupport` of a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskSupport {
    Forbidden,
    Optional,
    Required,
}

impl TaskSupport {
    fn of(definition: &Value) -> Self {
        match definition.pointer("/execution/taskSupport").and_then(Value::as_str) {
            Some("required") => Self::Required,
            Some("optional") => Self::Optional,
            _ => Self::Forbidden,
        }
    }
}

/// One tool as the gateway knows it.
#[derive(Clone)]
pub struct CatalogTool {
    pub name: String,
    pub definition: Value,
    pub task_support: TaskSupport,
    /// Client capabilities the tool needs (a ClientCapabilities object).
    pub required_client_capabilities: Option<Value>,
    /// The tool asks for input in rounds of the call before it becomes a task.
    pub input_before_task: bool,
    /// The queue its nodes wait in.
    pub queue: String,
    /// Whether a live worker offers it now.
    pub live: bool,
    /// A tool, or a prompt, resource or template a worker's handler produces.
    pub kind: OfferKind,
    validator: Option<conveyor_shared::schema::InputSchema>,
}

impl CatalogTool {
    fn new(published: PublishedTool, live: bool) -> Option<Self> {
        let queue = published.queue_name()?.to_owned();
        let name = published.name()?.to_owned();
        let definition = published.definition;
        let validator = match definition.get("inputSchema").filter(|_| published.kind.is_tool()) {
            Some(schema) => match conveyor_shared::schema::InputSchema::compile(schema) {
                Ok(v) => Some(v),
                Err(e) => {
                    tracing::warn!(tool = %name, error = %e, "tool has an invalid inputSchema; its arguments are not checked");
                    None
                }
            },
            None => None,
        };
        Some(Self {
            task_support: TaskSupport::of(&definition),
            required_client_capabilities: published.required_client_capabilities,
            input_before_task: published.input_before_task,
            kind: published.kind,
            queue,
            live,
            name,
            definition,
            validator,
        })
    }

    /// A tool from its MCP definition alone, as a worker publishes it with no queue of its own
    /// (the fuzz target of argument validation builds its tools this way). `None` without a name.
    pub fn from_definition(definition: Value) -> Option<Self> {
        Self::new(PublishedTool::tool(0, definition), true)
    }

    /// The built-in `run_dag` tool.
    pub fn run_dag() -> Self {
        run_dag_tool()
    }

    /// Checks arguments against the tool's input schema; the error names every failing field.
    pub fn validate(&self, arguments: &Value) -> Result<(), RpcFailure> {
        let Some(validator) = &self.validator else { return Ok(()) };
        let errors: Vec<(String, String)> =
            validator.errors(arguments).into_iter().map(|e| (e.path, e.message)).collect();
        if errors.is_empty() {
            return Ok(());
        }
        let summary =
            errors.iter().map(|(path, message)| format!("{path}: {message}")).collect::<Vec<_>>().join("; ");
        Err(RpcFailure::invalid_params(format!("Invalid arguments for tool `{}`: {summary}", self.name)).with_data(
            json!({"tool": self.name, "errors": errors.iter().map(|(p, m)| json!({"path": p, "message": m})).collect::<Vec<_>>()}),
        ))
    }
}

/// One reading of the catalog, shared by every request until the next one: requests hold it
/// (or one of its tools) by `Arc`, never by copy.
#[derive(Default)]
pub struct Snapshot {
    fetched: Option<Instant>,
    /// In `tools/list` order; catalogs are small, so lookups scan.
    pub tools: Vec<Arc<CatalogTool>>,
    /// The queue of every known tool, by name.
    pub queues: Arc<std::collections::HashMap<String, String>>,
    /// The name of every known root: workers publish root `NAME` as resource
    /// `conveyor://roots/NAME/`.
    pub roots: Vec<String>,
}

impl Snapshot {
    /// A known tool by name.
    pub fn get(&self, name: &str) -> Option<&Arc<CatalogTool>> {
        self.tools.iter().find(|t| t.name == name)
    }
}

/// The root a resource of a worker's is the file list of, by its URI.
fn root_of_resource(tool: &CatalogTool) -> Option<String> {
    if tool.kind != OfferKind::Resource {
        return None;
    }
    let uri = tool.definition.get("uri").and_then(Value::as_str)?;
    let name = uri.strip_prefix(crate::access::ROOTS_PREFIX)?.strip_suffix('/')?;
    (!name.is_empty() && !name.contains('/')).then(|| name.to_owned())
}

/// The name of the built-in tool that runs a client's graph of tool calls as one task.
pub const RUN_DAG: &str = "run_dag";

/// `run_dag`: offered by every gateway itself, since its nodes run on whichever workers hold
/// their tools.
fn run_dag_tool() -> CatalogTool {
    let definition = json!({
        "name": RUN_DAG,
        "title": "Run a graph of tool calls",
        "description": "Runs a DAG of calls to other tools as one task: each node starts as soon as the nodes it \
    depends on have settled, on whichever worker is free. A node's arguments may take values from upstream results \
    with {\"$from\": \"<nodeId>\", \"pointer\": \"/json/pointer\"}. The result holds every node's outcome and the \
    output node's content.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "nodes": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": {"type": "string"},
                            "tool": {"type": "string"},
                            "kind": {"enum": ["noop", "collect"]},
                            "arguments": {"type": "object"},
                            "dependsOn": {"type": "array", "items": {"type": "string"}},
                            "retries": {"type": "integer", "minimum": 0},
                            "backoffMs": {"type": "integer", "minimum": 0},
                            "timeoutMs": {"type": "integer", "minimum": 1},
                            "onFailure": {"enum": ["fail", "skipDependents", "continue"]},
                            "weight": {"type": "number", "exclusiveMinimum": 0}
                        },
                        "required": ["id"]
                    }
                },
                "output": {"type": "string", "description": "The node whose content is the task's result"}
            },
            "required": ["nodes"]
        },
        "execution": {"taskSupport": "optional"}
    });
    #[allow(clippy::expect_used)] // a constant definition with a name
    CatalogTool::new(PublishedTool::tool(u32::MAX, definition), true).expect("run_dag has a name")
}

/// The cached catalog. Cheap to share.
pub struct ToolCatalog {
    store: Store,
    snapshot: RwLock<Arc<Snapshot>>,
    /// Held by the one caller that re-reads the catalog: the requests that find it stale at the
    /// same moment (all of those in flight, under load) share that read instead of each reading
    /// and compiling every tool again.
    reading: tokio::sync::Mutex<()>,
}

impl ToolCatalog {
    pub fn new(store: Store) -> Self {
        Self { store, snapshot: RwLock::default(), reading: tokio::sync::Mutex::new(()) }
    }

    fn read(&self) -> Arc<Snapshot> {
        // Writers replace the snapshot in one assignment, so a poisoned lock still holds a whole one.
        self.snapshot.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    async fn refresh(&self) -> Result<(), StoreError> {
        let (definitions, workers, now) = self.store.catalog().await?;
        let offered: std::collections::HashSet<String> =
            workers.into_iter().filter(|w| w.is_live(now)).flat_map(|w| w.tools).collect();
        let mut tools: Vec<CatalogTool> = definitions
            .into_iter()
            .filter_map(|t| {
                let live = t.name().is_some_and(|n| offered.contains(n));
                CatalogTool::new(t, live)
            })
            .collect();
        tools.retain(|t| t.name != RUN_DAG);
        tools.push(run_dag_tool());
        let queues = Arc::new(tools.iter().map(|t| (t.name.clone(), t.queue.clone())).collect());
        let mut roots: Vec<String> = tools.iter().filter_map(root_of_resource).collect();
        roots.sort();
        roots.dedup();
        let tools = tools.into_iter().map(Arc::new).collect();
        *self.snapshot.write().unwrap_or_else(std::sync::PoisonError::into_inner) =
            Arc::new(Snapshot { fetched: Some(Instant::now()), tools, queues, roots });
        Ok(())
    }

    fn age(&self) -> Option<Duration> {
        self.read().fetched.map(|t| t.elapsed())
    }

    /// Re-reads the catalog once for every caller that asks meanwhile. One that finds a read under
    /// way goes on with the snapshot it has when it may (`stale_will_do`), or waits for that read,
    /// which it takes as its own when the read began after it asked.
    async fn refresh_shared(&self, stale_will_do: bool) -> Result<(), StoreError> {
        let asked = Instant::now();
        // The read runs boxed: a request's future, moved whole, would otherwise hold room for it.
        if let Ok(_reading) = self.reading.try_lock() {
            return Box::pin(self.refresh()).await;
        }
        if stale_will_do {
            return Ok(());
        }
        let _reading = self.reading.lock().await;
        if self.read().fetched.is_some_and(|fetched| fetched >= asked) {
            return Ok(());
        }
        Box::pin(self.refresh()).await
    }

    /// The tools a live worker offers (and `run_dag`), in registration order.
    pub async fn list(&self) -> Result<Vec<Arc<CatalogTool>>, StoreError> {
        self.offers(OfferKind::Tool).await
    }

    /// What live workers offer of one kind, in registration order.
    pub async fn offers(&self, kind: OfferKind) -> Result<Vec<Arc<CatalogTool>>, StoreError> {
        Ok(self.snapshot().await?.tools.iter().filter(|t| t.live && t.kind == kind).cloned().collect())
    }

    /// The current reading: every known tool, offered by a live worker or not, and their queues.
    pub async fn snapshot(&self) -> Result<Arc<Snapshot>, StoreError> {
        match self.age() {
            None => self.refresh_shared(false).await?,
            Some(age) if age > FRESH_FOR => self.refresh_shared(true).await?,
            Some(_) => {}
        }
        Ok(self.read())
    }

    /// The snapshot, re-read when it is old, or when it does not know `name` and was not read
    /// just now (a tool published a moment ago); `Snapshot::get` then finds the tool.
    pub async fn snapshot_with(&self, name: &str) -> Result<Arc<Snapshot>, StoreError> {
        let snapshot = self.snapshot().await?;
        if snapshot.get(name).is_some() || self.age().is_some_and(|age| age <= MISS_REFRESH) {
            return Ok(snapshot);
        }
        self.refresh_shared(false).await?;
        Ok(self.read())
    }

    /// One known tool by name (offered by a live worker or not), re-reading the catalog when the
    /// name is unknown and the cache is not new.
    pub async fn get(&self, name: &str) -> Result<Option<Arc<CatalogTool>>, StoreError> {
        let stale = self.age().is_none_or(|age| age > FRESH_FOR);
        if !stale && let Some(tool) = self.read().get(name) {
            return Ok(Some(tool.clone()));
        }
        if stale || self.age().is_none_or(|age| age > MISS_REFRESH) {
            // A known tool from a stale reading will do while another caller reads again.
            let known = self.read().get(name).is_some();
            self.refresh_shared(stale && known).await?;
        }
        Ok(self.read().get(name).cloned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_the_field_and_the_reason() {
        let tool = CatalogTool::new(
            PublishedTool {
                position: 0,
                queue: None,
                definition: json!({
                    "name": "slow_compute",
                    "inputSchema": {
                        "type": "object",
                        "properties": {"seconds": {"type": "number"}},
                        "required": ["seconds"]
                    }
                }),
                required_client_capabilities: None,
                input_before_task: false,
                kind: Default::default(),
                key: None,
            },
            true,
        )
        .expect("valid definition");
        assert!(tool.validate(&json!({"seconds": 1})).is_ok());
        let err = tool.validate(&json!({"seconds": "soon"})).expect_err("a string is not a number");
        assert_eq!(err.error.code, rmcp::model::ErrorCode::INVALID_PARAMS);
        assert!(err.error.message.contains("/seconds"), "{}", err.error.message);
        let err = tool.validate(&json!({})).expect_err("seconds is required");
        assert!(err.error.message.contains("seconds"), "{}", err.error.message);
    }

    #[test]
    fn a_roots_resource_names_the_root() {
        let resource = |uri: &str| {
            let published = PublishedTool {
                position: 0,
                queue: None,
                definition: json!({"uri": uri, "name": "r"}),
                required_client_capabilities: None,
                input_before_task: false,
                kind: OfferKind::Resource,
                key: Some(format!("resource/{uri}")),
            };
            CatalogTool::new(published, true).expect("named")
        };
        assert_eq!(root_of_resource(&resource("conveyor://roots/sample/")), Some("sample".to_owned()));
        assert_eq!(root_of_resource(&resource("conveyor://roots/sample/a.md")), None);
        assert_eq!(root_of_resource(&resource("conveyor://roots//")), None);
        assert_eq!(root_of_resource(&resource("adr://nygard.md")), None);
        let tool = CatalogTool::from_definition(json!({"name": "conveyor://roots/x/"})).expect("named");
        assert_eq!(root_of_resource(&tool), None, "only a resource names a root");
    }

    #[test]
    fn task_support_defaults_to_forbidden() {
        assert_eq!(TaskSupport::of(&json!({})), TaskSupport::Forbidden);
        assert_eq!(
            TaskSupport::of(&json!({"execution": {"taskSupport": "required"}})),
            TaskSupport::Required
        );
        assert_eq!(
            TaskSupport::of(&json!({"execution": {"taskSupport": "optional"}})),
            TaskSupport::Optional
        );
    }
}
