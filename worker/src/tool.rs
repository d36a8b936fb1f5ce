//! What a tool is to the worker, and what it gets while it runs.

use std::collections::BTreeMap;
use std::sync::Arc;

use conveyor_shared::events::Delivery;
use conveyor_shared::model::{PublishedTool, TaskEvent, TaskStatus, ToolDefinition, ToolOutcome};
use conveyor_shared::store::Attempt;
use conveyor_shared::{Store, StoreError, keys};
use futures::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// A tool the worker can run. Its definition is the MCP `Tool` object gateways list, including
/// `inputSchema` (gateways validate arguments against it before a task exists) and
/// `execution.taskSupport`.
pub trait Tool: Send + Sync + 'static {
    fn definition(&self) -> ToolDefinition;
    /// Client capabilities the tool needs, e.g. `{"sampling": {}}`. A 2026-07-28 client that
    /// lacks them is refused by the gateway before any task exists.
    fn required_client_capabilities(&self) -> Option<Value> {
        None
    }
    /// The queue the tool's nodes wait in; the tool's own name when `None`. Tools that share a
    /// queue share the workers that read it: give a pool of workers its own queue.
    fn queue(&self) -> Option<String> {
        None
    }
    /// Runs one attempt. The future should return soon after `ctx.cancel` fires.
    fn call(&self, ctx: ToolContext) -> BoxFuture<'static, ToolOutcome>;
}

/// A tool made of a definition and an async function.
pub struct FnTool<F> {
    definition: ToolDefinition,
    required_client_capabilities: Option<Value>,
    queue: Option<String>,
    run: F,
}

impl<F, Fut> FnTool<F>
where
    F: Fn(ToolContext) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ToolOutcome> + Send + 'static,
{
    pub fn new(definition: ToolDefinition, run: F) -> Self {
        Self { definition, required_client_capabilities: None, queue: None, run }
    }

    /// Puts the tool's nodes in `queue` instead of a queue of the tool's own name.
    pub fn on_queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    /// Declares client capabilities the tool needs (see [`Tool::required_client_capabilities`]).
    pub fn requiring(mut self, capabilities: Value) -> Self {
        self.required_client_capabilities = Some(capabilities);
        self
    }
}

impl<F, Fut> Tool for FnTool<F>
where
    F: Fn(ToolContext) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ToolOutcome> + Send + 'static,
{
    fn definition(&self) -> ToolDefinition {
        self.definition.clone()
    }
    fn required_client_capabilities(&self) -> Option<Value> {
        self.required_client_capabilities.clone()
    }
    fn queue(&self) -> Option<String> {
        self.queue.clone()
    }
    fn call(&self, ctx: ToolContext) -> BoxFuture<'static, ToolOutcome> {
        Box::pin((self.run)(ctx))
    }
}

/// Everything a running tool may use.
#[derive(Clone)]
pub struct ToolContext {
    pub task_id: String,
    pub node_id: String,
    /// The attempt number; it fences this run's progress and completion.
    pub attempt: u32,
    pub arguments: Value,
    /// Fires when the task is cancelled or the worker must stop.
    pub cancel: CancellationToken,
    /// W3C trace context of the request that created the task.
    pub traceparent: Option<String>,
    pub(crate) store: Store,
    /// The started attempt, whose keys and fencing token progress and input requests use.
    pub(crate) lease: Attempt,
}

impl ToolContext {
    /// Reports progress to the task (and through the gateway to the client). Returns `false`
    /// when the report was refused because the task is no longer live or the attempt is stale,
    /// which a tool may take as a sign to stop.
    pub async fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) -> bool {
        if !progress.is_finite() || total.is_some_and(|t| !t.is_finite()) {
            // A tool's arithmetic slip is not a reason to stop it: the report is dropped.
            tracing::warn!(task = %self.task_id, progress, ?total, "dropping a progress report that is not a finite number");
            return true;
        }
        match self.store.report_progress(&self.lease, progress, total, message).await {
            Ok(taken) => taken,
            Err(e) => {
                tracing::warn!(task = %self.task_id, error = %e, "progress report failed");
                false
            }
        }
    }

    /// Asks the client for input and waits for all of it: the task shows `input_required` with
    /// these requests (key -> an `elicitation/create` or `sampling/createMessage` request) until
    /// the client answers them with `tasks/update`. Returns the answers by key.
    pub async fn request_input(&self, requests: Value) -> Result<Value, InputError> {
        // Wait locally first, so that an answer arriving right after the script cannot be missed.
        let hub = self.store.events().await.map_err(InputError::Store)?;
        let mut waiter = hub.waiter(&self.task_id);
        let keys = requests
            .as_object()
            .map(|o| o.keys().cloned().collect::<Vec<_>>().join(", "))
            .unwrap_or_default();
        let message = format!("Waiting for input: {keys}");
        let inbox = hub.inbox(self.lease.shard);
        let taken = self
            .store
            .request_input(&self.lease, &requests, &message, &inbox)
            .await
            .map_err(InputError::Store)?;
        if !taken {
            return Err(InputError::NotLive);
        }
        loop {
            tokio::select! {
                () = self.cancel.cancelled() => return Err(InputError::Cancelled),
                delivery = waiter.recv() => match delivery {
                    Some(Delivery::Event(TaskEvent::Status { status: TaskStatus::Working, .. })) => break,
                    Some(Delivery::Event(TaskEvent::Status { status, .. })) if status.is_terminal() => {
                        return Err(InputError::NotLive);
                    }
                    Some(Delivery::Event(TaskEvent::Expired)) | None => return Err(InputError::NotLive),
                    Some(Delivery::Event(_)) => {}
                    Some(Delivery::Resync) => match self.store.watch_task(&self.task_id, &inbox).await {
                        Ok(Some(task)) if task.status == TaskStatus::Working => break,
                        Ok(Some(task)) if task.status == TaskStatus::InputRequired => {}
                        Ok(_) => return Err(InputError::NotLive),
                        Err(_) => {} // Redis is away; the hub resyncs again once it is back.
                    },
                },
            }
        }
        self.store.input_responses(&self.task_id).await.map_err(InputError::Store)
    }

    /// A string argument, if present.
    pub fn str_arg(&self, name: &str) -> Option<&str> {
        self.arguments.get(name).and_then(Value::as_str)
    }

    /// A numeric argument, if present.
    pub fn f64_arg(&self, name: &str) -> Option<f64> {
        self.arguments.get(name).and_then(Value::as_f64)
    }
}

/// The tools one worker runs, by name.
#[derive(Default, Clone)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
    /// Names in registration order: the order of `tools/list`.
    order: Vec<String>,
}

impl ToolRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool under the `name` of its definition, replacing one of the same name.
    ///
    /// # Panics
    /// When the definition has no string `name`: that is a programming error in the tool.
    pub fn register(&mut self, tool: impl Tool) -> &mut Self {
        let definition = tool.definition();
        #[allow(clippy::expect_used)] // a nameless tool can never be called; fail at startup
        let name = definition
            .get("name")
            .and_then(Value::as_str)
            .expect("a tool definition needs a string `name`")
            .to_owned();
        if self.tools.insert(name.clone(), Arc::new(tool)).is_none() {
            self.order.push(name);
        }
        self
    }

    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools.get(name).cloned()
    }

    /// Only the named tools of this registry, in its order (`conveyor worker --tools`), so that
    /// one binary can serve several pools. The error names the tools it does not have.
    pub fn only(&self, names: &[String]) -> Result<Self, String> {
        let unknown: Vec<&str> =
            names.iter().filter(|n| !self.tools.contains_key(n.as_str())).map(String::as_str).collect();
        if !unknown.is_empty() {
            return Err(format!(
                "this worker has no tool named {}; it has: {}",
                unknown.join(", "),
                self.order.join(", ")
            ));
        }
        let mut only = Self::new();
        for name in self.order.iter().filter(|n| names.contains(n)) {
            if let Some(tool) = self.tools.get(name) {
                only.tools.insert(name.clone(), tool.clone());
                only.order.push(name.clone());
            }
        }
        Ok(only)
    }

    /// The queues this registry's tools wait in, and the built-in queue every worker serves.
    pub fn queues(&self) -> Vec<String> {
        let mut queues = vec![keys::BUILTIN_QUEUE.to_owned()];
        for tool in self.published() {
            if let Some(queue) = tool.queue_name()
                && !queues.iter().any(|q| q == queue)
            {
                queues.push(queue.to_owned());
            }
        }
        queues
    }

    /// The names of the tools, in registration order.
    pub fn names(&self) -> &[String] {
        &self.order
    }

    /// The tools as gateways see them, in registration order.
    pub fn published(&self) -> Vec<PublishedTool> {
        self.order
            .iter()
            .enumerate()
            .filter_map(|(position, name)| {
                let tool = self.tools.get(name)?;
                Some(PublishedTool {
                    position: position as u32,
                    queue: tool.queue(),
                    definition: tool.definition(),
                    required_client_capabilities: tool.required_client_capabilities(),
                })
            })
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

/// Why [`ToolContext::request_input`] returned without answers.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("the task was cancelled while waiting for input")]
    Cancelled,
    #[error("the task is no longer live, or this attempt is stale")]
    NotLive,
    #[error(transparent)]
    Store(StoreError),
}
