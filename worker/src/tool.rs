//! What a tool is to the worker, and what it gets while it runs.

use std::collections::BTreeMap;
use std::sync::Arc;

use conveyor_shared::call::CallRecord;
use conveyor_shared::input;
use conveyor_shared::model::{LogLevel, OfferKind, PublishedTool, ToolDefinition, ToolOutcome};
use conveyor_shared::schema::InputSchema;
use conveyor_shared::store::Attempt;
use conveyor_shared::{Store, keys};
use futures::future::BoxFuture;
use serde_json::{Map, Value};
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
    /// Whether the tool gathers input in rounds of the call before any task exists, and turns the
    /// call into a task itself ([`ToolContext::escalate`]) once it has what it needs. A gateway
    /// then runs a call from a task-capable client synchronously first, so that the client sees
    /// the rounds (MRTR) before the task.
    fn input_before_task(&self) -> bool {
        false
    }
    /// What this is: a tool (the default), or a prompt, resource or resource template whose
    /// definition is the MCP object of that kind and whose `call` returns `GetPromptResult` or
    /// `ReadResourceResult` JSON (see [`FnTool::prompt`]).
    fn kind(&self) -> OfferKind {
        OfferKind::Tool
    }
    /// Runs one attempt. The future should return soon after `ctx.cancel` fires.
    fn call(&self, ctx: ToolContext) -> BoxFuture<'static, ToolOutcome>;
}

/// A tool made of a definition and an async function.
pub struct FnTool<F> {
    definition: ToolDefinition,
    required_client_capabilities: Option<Value>,
    queue: Option<String>,
    input_before_task: bool,
    kind: OfferKind,
    run: F,
}

impl<F, Fut> FnTool<F>
where
    F: Fn(ToolContext) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ToolOutcome> + Send + 'static,
{
    pub fn new(definition: ToolDefinition, run: F) -> Self {
        Self {
            definition,
            required_client_capabilities: None,
            queue: None,
            input_before_task: false,
            kind: OfferKind::Tool,
            run,
        }
    }

    /// A prompt: `definition` is an MCP `Prompt` (`name`, `description`, `arguments`); the
    /// handler gets the prompt's arguments as `ctx.arguments` and returns a `GetPromptResult`
    /// (`{"messages": [...]}`). It may ask the client for input like a tool.
    pub fn prompt(definition: Value, run: F) -> Self {
        Self { kind: OfferKind::Prompt, ..Self::new(definition, run) }
    }

    /// A resource: `definition` is an MCP `Resource` (`uri`, `name`, `mimeType`, ...); the
    /// handler gets `{"uri": ...}` and returns a `ReadResourceResult` (`{"contents": [...]}`).
    pub fn resource(definition: Value, run: F) -> Self {
        Self { kind: OfferKind::Resource, ..Self::new(definition, run) }
    }

    /// A resource template: `definition` is an MCP `ResourceTemplate` (`uriTemplate` with `{name}`
    /// variables); the handler gets `{"uri": ..., "variables": {name: value}}` and returns a
    /// `ReadResourceResult`.
    pub fn resource_template(definition: Value, run: F) -> Self {
        Self { kind: OfferKind::ResourceTemplate, ..Self::new(definition, run) }
    }

    /// A step: a tool that runs only as a node of the graphs other tools plan, named in a plan as
    /// `step/NAME` ([`OfferKind::Step`]); clients never see it.
    pub fn step(definition: ToolDefinition, run: F) -> Self {
        Self { kind: OfferKind::Step, ..Self::new(definition, run) }
    }

    /// Puts the tool's nodes in `queue` instead of a queue of the tool's own name.
    pub fn on_queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    /// Declares that the tool asks for input before it becomes a task
    /// ([`Tool::input_before_task`]).
    pub fn input_before_task(mut self) -> Self {
        self.input_before_task = true;
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
    fn input_before_task(&self) -> bool {
        self.input_before_task
    }
    fn kind(&self) -> OfferKind {
        self.kind
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
    /// The started attempt, whose keys and fencing token progress and escalation use.
    pub(crate) started: Attempt,
    pub(crate) answers: Map<String, Value>,
    pub(crate) state: Option<Value>,
    /// The call record as the task stores it: its client capabilities and log level, among
    /// the rest.
    pub(crate) call: std::sync::Arc<CallRecord>,
}

impl ToolContext {
    /// Records `entry` as the newest run of `tool` under `name` (a readiness profile, say),
    /// keeping the newest `keep`, and returns the runs recorded before it, newest first: a tool's
    /// history across tasks, kept in Redis and shared by every worker and every caller. What
    /// belongs to the caller alone goes in its memory ([`ToolContext::record_memory`]). Fenced by
    /// this attempt: once another worker has taken the node over, it records nothing and fails.
    pub async fn record_run(
        &self,
        tool: &str,
        name: &str,
        entry: &Value,
        keep: usize,
    ) -> Result<Vec<Value>, conveyor_shared::StoreError> {
        self.store.record_run(&self.started, tool, name, entry, keep).await
    }

    /// The newest `count` runs of `tool` under `name` that [`ToolContext::record_run`] kept,
    /// newest first.
    pub async fn runs(
        &self,
        tool: &str,
        name: &str,
        count: usize,
    ) -> Result<Vec<Value>, conveyor_shared::StoreError> {
        self.store.runs(tool, name, count).await
    }

    /// Whether this node's task is still live: not settled, not expired. A tool asks it before it
    /// removes what the task may still use, since its cancellation token also fires when only
    /// the worker stops (and the node will run again elsewhere).
    pub async fn task_is_live(&self) -> Result<bool, conveyor_shared::StoreError> {
        self.store.task_is_live(&self.task_id).await
    }

    /// The deployment's id ([`Store::deployment_id`]), to mark what a tool leaves outside Redis
    /// as this deployment's, for a [`Chore`] to find again.
    pub async fn deployment_id(&self) -> Result<String, conveyor_shared::StoreError> {
        self.store.deployment_id().await
    }

    /// Records `entry` as the newest of the caller's own memory of `tool` under `name` (a root's
    /// troubleshooting sessions, say), keeping its newest `keep`, and returns its entries recorded
    /// before it, newest first. Unlike [`ToolContext::record_run`], each principal's list is its
    /// own: no other principal reads it, and no other principal's entries push its out.
    pub async fn record_memory(
        &self,
        tool: &str,
        name: &str,
        entry: &Value,
        keep: usize,
    ) -> Result<Vec<Value>, conveyor_shared::StoreError> {
        self.store.record_memory(self.owner(), tool, name, entry, keep).await
    }

    /// The newest `count` entries of the caller's own memory of `tool` under `name` that
    /// [`ToolContext::record_memory`] kept, newest first.
    pub async fn memories(
        &self,
        tool: &str,
        name: &str,
        count: usize,
    ) -> Result<Vec<Value>, conveyor_shared::StoreError> {
        self.store.memories(self.owner(), tool, name, count).await
    }

    /// The principal the task belongs to: whoever called the tool.
    pub fn owner(&self) -> &str {
        &self.started.owner
    }

    /// Whether the caller may read root `name`: the access policy grants it the root's
    /// resources (`conveyor://roots/NAME/`). A tool reads a root only for a caller who may.
    pub fn may_read_root(&self, name: &str) -> bool {
        self.call.may_read_root(name)
    }

    /// The roots the caller may read; `None`: every root.
    pub fn granted_roots(&self) -> Option<&[String]> {
        self.call.roots.as_deref()
    }

    /// Writes a refusal that crosses principals (a root the caller may not read, another
    /// principal's memory) to the audit log, target `conveyor::audit`, as gateways write theirs.
    pub fn audit_denied(&self, subject: &str, reason: &str) {
        tracing::info!(target: "conveyor::audit", event = "denied", principal = %self.owner(), task = %self.task_id, node = %self.node_id, subject, reason, "access denied");
    }

    /// Reports progress to the task (and through the gateway to the client). Returns `false`
    /// when the report was refused because the task is no longer live or the attempt is stale,
    /// which a tool may take as a sign to stop.
    pub async fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) -> bool {
        if !progress.is_finite() || total.is_some_and(|t| !t.is_finite()) {
            // A tool's arithmetic slip is not a reason to stop it: the report is dropped.
            tracing::warn!(task = %self.task_id, progress, ?total, "dropping a progress report that is not a finite number");
            return true;
        }
        match self.store.report_progress(&self.started, progress, total, message).await {
            Ok(taken) => taken,
            Err(e) => {
                tracing::warn!(task = %self.task_id, error = %e, "progress report failed");
                false
            }
        }
    }

    /// Logs a message for the client that follows the call (MCP `notifications/message`), when
    /// the client asked for messages of this level; otherwise it costs nothing. `data` is any
    /// JSON (a string, or an object with details).
    pub async fn log(&self, level: LogLevel, data: impl Into<Value>) {
        if self.call.log_level.is_none_or(|wanted| level < wanted) {
            return;
        }
        let logger = self.started.node_id.as_str();
        if let Err(e) = self.store.log(&self.started, level, logger, &data.into()).await {
            tracing::debug!(task = %self.task_id, error = %e, "a log message for the client was lost");
        }
    }

    /// Lets the client's SSE stream of this call close now: the gateway asks the client to come
    /// back after `retry` and resume it (`Last-Event-ID`, on any gateway), where the rest of the
    /// call (its result) follows. For a long call on 2025-11-25, so that no connection is held
    /// open for it; a client that cannot resume still finds the result with `tasks/result`.
    pub async fn release_stream(&self, retry: std::time::Duration) {
        let retry_ms = u64::try_from(retry.as_millis()).unwrap_or(u64::MAX);
        if let Err(e) = self.store.release_stream(&self.started, retry_ms).await {
            tracing::debug!(task = %self.task_id, error = %e, "could not release the client's stream");
        }
    }

    /// The client's answer to the request this node asked under `key` (the client's result: for
    /// elicitation `{"action", "content"}`, for sampling the message, for roots `{"roots"}`), or
    /// one the call came with. `None` before the node has asked.
    pub fn input(&self, key: &str) -> Option<&Value> {
        self.answers.get(key)
    }

    /// Every answer this attempt was given, by key.
    pub fn inputs(&self) -> &Map<String, Value> {
        &self.answers
    }

    /// The state this node parked with (see [`conveyor_shared::input::InputRequired::with_state`]).
    pub fn state(&self) -> Option<&Value> {
        self.state.as_ref()
    }

    /// Whether the client declared what `request` needs ([`conveyor_shared::input`] builds
    /// requests). A tool that returns a request the client cannot answer fails with `-32021`.
    pub fn client_supports(&self, request: &Value) -> bool {
        input::client_supports(&self.call.client_capabilities, request)
    }

    /// The call record: what the call carries (its wire, arguments as the client sent them,
    /// progress token, client capabilities, log level).
    pub fn call(&self) -> &CallRecord {
        &self.call
    }

    /// The client's declared input capabilities (elicitation, sampling, roots).
    pub fn client_capabilities(&self) -> &Map<String, Value> {
        &self.call.client_capabilities
    }

    /// Turns a synchronous call into the client's task, for a tool that gathered its input in
    /// rounds of the call and now starts work that takes long: the client gets a task at once and
    /// follows it. Does nothing (and returns `false`) when the call was a task already or the
    /// client cannot take one.
    pub async fn escalate(&self, message: &str) -> bool {
        match self.store.escalate(&self.started, message).await {
            Ok(changed) => changed,
            Err(e) => {
                tracing::warn!(task = %self.task_id, error = %e, "could not turn the call into a task");
                false
            }
        }
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

/// Housekeeping a family of tools needs beside its nodes, such as removing what a run whose
/// worker crashed left on disk: every worker that serves `queue` runs it once it has reached
/// Redis, then every `every`, until it stops. A chore should cost nothing when there is nothing
/// to do: it runs on every such worker.
pub struct Chore {
    pub name: String,
    pub queue: String,
    pub every: std::time::Duration,
    run: Arc<dyn Fn(ChoreContext) -> BoxFuture<'static, ()> + Send + Sync>,
}

impl Chore {
    pub fn new<F, Fut>(
        name: impl Into<String>,
        queue: impl Into<String>,
        every: std::time::Duration,
        run: F,
    ) -> Self
    where
        F: Fn(ChoreContext) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        Self { name: name.into(), queue: queue.into(), every, run: Arc::new(move |cx| Box::pin(run(cx))) }
    }

    /// Runs the chore once.
    pub fn run(&self, cx: ChoreContext) -> BoxFuture<'static, ()> {
        (self.run)(cx)
    }
}

/// What a chore may ask.
#[derive(Clone)]
pub struct ChoreContext {
    /// Fires when the worker stops.
    pub cancel: CancellationToken,
    pub(crate) store: Store,
}

impl ChoreContext {
    /// Whether `task_id` names a task that is live: not settled, not expired.
    pub async fn task_is_live(&self, task_id: &str) -> Result<bool, conveyor_shared::StoreError> {
        self.store.task_is_live(task_id).await
    }

    /// The deployment's id ([`Store::deployment_id`]).
    pub async fn deployment_id(&self) -> Result<String, conveyor_shared::StoreError> {
        self.store.deployment_id().await
    }
}

/// The tools one worker runs, by name.
#[derive(Default, Clone)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
    /// Each tool's compiled input schema, for a graph node's resolved arguments.
    schemas: BTreeMap<String, InputSchema>,
    /// Names in registration order: the order of `tools/list`.
    order: Vec<String>,
    chores: Vec<Arc<Chore>>,
}

impl ToolRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool under the `name` of its definition (a prompt, resource or template under its
    /// key, [`OfferKind::key`]), replacing one of the same name.
    ///
    /// # Panics
    /// When the definition lacks the field that names it (`name`, or `uri` / `uriTemplate`):
    /// that is a programming error in the tool.
    pub fn register(&mut self, tool: impl Tool) -> &mut Self {
        let definition = tool.definition();
        #[allow(clippy::expect_used)] // a nameless tool can never be called; fail at startup
        let name = tool
            .kind()
            .key(&definition)
            .expect("a definition needs a string `name` (a resource `uri`, a template `uriTemplate`)");
        let schema = definition
            .get("inputSchema")
            .filter(|_| matches!(tool.kind(), OfferKind::Tool | OfferKind::Step));
        match schema.map(InputSchema::compile) {
            Some(Ok(schema)) => {
                self.schemas.insert(name.clone(), schema);
            }
            Some(Err(e)) => {
                tracing::warn!(tool = %name, error = %e, "the tool's inputSchema does not compile; its arguments are not checked");
                self.schemas.remove(&name);
            }
            None => {
                self.schemas.remove(&name);
            }
        }
        if self.tools.insert(name.clone(), Arc::new(tool)).is_none() {
            self.order.push(name);
        }
        self
    }

    /// Adds housekeeping for the workers that serve the chore's queue.
    pub fn add_chore(&mut self, chore: Chore) -> &mut Self {
        self.chores.push(Arc::new(chore));
        self
    }

    /// The chores of the queues this registry serves.
    pub fn chores(&self) -> &[Arc<Chore>] {
        &self.chores
    }

    /// Checks arguments against the input schema of the tool `name` (what is wrong, in one line).
    /// Built-in nodes and tools without a schema take anything.
    pub fn check_arguments(&self, name: &str, arguments: &Value) -> Result<(), String> {
        match self.schemas.get(name).and_then(|schema| schema.check(arguments)) {
            Some(errors) => Err(errors),
            None => Ok(()),
        }
    }

    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools.get(name).cloned()
    }

    /// Only the named tools of this registry, in its order (`conveyor worker --tools`), so that
    /// one binary can serve several pools. Prompts and resources are named by their key
    /// (`prompt/NAME`, `resource/URI`, `template/URI-TEMPLATE`); those not named are left out, so
    /// that a pool reads only the queues it serves. The error names the tools it does not have.
    pub fn only(&self, names: &[String]) -> Result<Self, String> {
        let unknown: Vec<&str> =
            names.iter().filter(|n| !self.tools.contains_key(n.as_str())).map(String::as_str).collect();
        if !unknown.is_empty() {
            return Err(format!(
                "this worker has no tool named {}; it has: {}",
                unknown.join(", "),
                self.order.iter().filter(|n| self.is_tool(n)).cloned().collect::<Vec<_>>().join(", ")
            ));
        }
        // The steps of the kept tools' plans come along: a step shares its tool's queue.
        let kept_queues: Vec<String> = names
            .iter()
            .filter_map(|n| self.tools.get(n))
            .map(|t| {
                t.queue().unwrap_or_else(|| t.definition()["name"].as_str().unwrap_or_default().to_owned())
            })
            .collect();
        let is_kept_step = |name: &String| {
            self.tools.get(name).is_some_and(|t| {
                t.kind() == OfferKind::Step && t.queue().is_some_and(|q| kept_queues.contains(&q))
            })
        };
        let mut only = Self::new();
        for name in self.order.iter().filter(|n| names.contains(n) || is_kept_step(n)) {
            if let Some(tool) = self.tools.get(name) {
                only.tools.insert(name.clone(), tool.clone());
                if let Some(schema) = self.schemas.get(name) {
                    only.schemas.insert(name.clone(), schema.clone());
                }
                only.order.push(name.clone());
            }
        }
        let served = only.queues();
        only.chores = self.chores.iter().filter(|c| served.contains(&c.queue)).cloned().collect();
        Ok(only)
    }

    fn is_tool(&self, name: &str) -> bool {
        self.tools.get(name).is_some_and(|t| t.kind().is_tool())
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
                    input_before_task: tool.input_before_task(),
                    kind: tool.kind(),
                    key: (!tool.kind().is_tool()).then(|| name.clone()),
                })
            })
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// Whether it holds any tool (not only prompts and resources).
    pub fn has_tools(&self) -> bool {
        self.tools.values().any(|t| t.kind().is_tool())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_pool_keeps_the_chores_of_the_queues_it_serves() {
        let tool = |name: &str, queue: &str| {
            FnTool::new(json!({"name": name, "inputSchema": {"type": "object"}}), |_ctx| async {
                ToolOutcome::Result(json!({}))
            })
            .on_queue(queue)
        };
        let mut registry = ToolRegistry::new();
        registry.register(tool("build", "builds")).register(tool("search", "searches"));
        registry.add_chore(Chore::new("sweep", "builds", std::time::Duration::from_secs(60), |_cx| async {}));
        assert_eq!(registry.chores().len(), 1);
        let builds = registry.only(&["build".to_owned()]).expect("offered");
        assert_eq!(builds.chores().iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["sweep"]);
        let searches = registry.only(&["search".to_owned()]).expect("offered");
        assert!(searches.chores().is_empty(), "a pool that does not serve the queue does not sweep it");
    }
}
