//! `subscriptions/listen` (2026-07-28): a long-lived SSE stream of the notifications a client asks
//! for. Task status (`notifications/tasks`, a full DetailedTask, for the client's own tasks named
//! in `taskIds`; Tasks extension), resource updates (a task result resource changes when its task
//! finishes) and list changes (tools, prompts, resources, noticed as the catalog live workers
//! offer changes). The first message acknowledges what the gateway agreed to send: only the
//! caller's own tasks and the resources it may read (others are left out, and audited); every message
//! carries the subscription id (the request's id); when the gateway shuts down it ends the stream
//! with a result, so the client knows to listen again elsewhere.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use conveyor_shared::events::{Delivery, Waiter};
use conveyor_shared::model::{OfferKind, TaskEvent, TaskMode, TaskRecord};
use futures::StreamExt;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::resources::{TASK_RESULT_TEMPLATE, task_of_resource};
use super::{Reply, RequestCtx, StreamItem, client_has_tasks_extension, missing_capability};
use conveyor_shared::store::TaskParts;

use crate::access::Caller;
use crate::reads::{Found, Reader, read_task};
use crate::rpc::{self, RpcFailure};
use crate::state::{AppState, BudgetPermit};
use crate::uri_template::match_template;
use crate::wire;

/// `_meta` key of the subscription id on every message of the stream.
const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
/// How often a stream that listens for list changes compares what live workers offer.
const CATALOG_CHECK: Duration = Duration::from_secs(1);
/// The most task ids and resource URIs one subscription may name.
const MAX_NAMED: usize = 256;

/// What a client asked to hear of.
#[derive(Default)]
struct Filter {
    tools: bool,
    prompts: bool,
    resources: bool,
    resource_uris: Vec<String>,
    task_ids: Vec<String>,
}

impl Filter {
    fn parse(params: &Value) -> Result<Self, RpcFailure> {
        let notifications = match params.get("notifications") {
            None | Some(Value::Null) => return Ok(Self::default()),
            Some(Value::Object(n)) => n,
            Some(_) => {
                return Err(RpcFailure::invalid_params("Invalid params: `notifications` must be an object"));
            }
        };
        let flag = |name: &str| match notifications.get(name) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(RpcFailure::invalid_params(format!(
                "Invalid params: `notifications.{name}` must be a boolean"
            ))),
        };
        let names = |name: &str| -> Result<Vec<String>, RpcFailure> {
            let list = match notifications.get(name) {
                None | Some(Value::Null) => return Ok(Vec::new()),
                Some(Value::Array(list)) => list,
                Some(_) => {
                    return Err(RpcFailure::invalid_params(format!(
                        "Invalid params: `notifications.{name}` must be an array of strings"
                    )));
                }
            };
            if list.len() > MAX_NAMED {
                return Err(RpcFailure::invalid_params(format!(
                    "Invalid params: `notifications.{name}` names {} items; at most {MAX_NAMED} per subscription",
                    list.len()
                )));
            }
            let mut seen = BTreeSet::new();
            list.iter()
                .map(|v| {
                    v.as_str().map(str::to_owned).ok_or_else(|| {
                        RpcFailure::invalid_params(format!(
                            "Invalid params: `notifications.{name}` must hold strings"
                        ))
                    })
                })
                .filter(|v| v.as_ref().map_or(true, |s| seen.insert(s.clone())))
                .collect()
        };
        Ok(Self {
            tools: flag("toolsListChanged")?,
            prompts: flag("promptsListChanged")?,
            resources: flag("resourcesListChanged")?,
            resource_uris: names("resourceSubscriptions")?,
            task_ids: names("taskIds")?,
        })
    }

    /// What the gateway agrees to send, in the shape of the request's filter.
    fn agreed(&self) -> Value {
        let mut agreed = Map::new();
        for (name, on) in [
            ("toolsListChanged", self.tools),
            ("promptsListChanged", self.prompts),
            ("resourcesListChanged", self.resources),
        ] {
            if on {
                agreed.insert(name.to_owned(), json!(true));
            }
        }
        if !self.resource_uris.is_empty() {
            agreed.insert("resourceSubscriptions".to_owned(), json!(self.resource_uris));
        }
        if !self.task_ids.is_empty() {
            agreed.insert("taskIds".to_owned(), json!(self.task_ids));
        }
        Value::Object(agreed)
    }
}

pub(super) async fn listen(state: Arc<AppState>, ctx: RequestCtx) -> Result<Reply, RpcFailure> {
    if !ctx.accepts_sse {
        return Err(RpcFailure::invalid_request(
            "subscriptions/listen answers with an SSE stream: send `Accept: text/event-stream`",
        ));
    }
    let mut filter = Filter::parse(&ctx.params)?;
    // A resource the policy does not grant is not agreed to: the acknowledgement leaves it out.
    filter.resource_uris.retain(|uri| {
        let granted = super::resources::is_task_resource(uri)
            || state.access.may_use(&ctx.caller, crate::access::Offer::Resource, uri);
        if !granted {
            super::audit_denied(
                &ctx.caller,
                "subscriptions/listen",
                uri,
                "the access policy does not grant this resource",
            );
        }
        granted
    });
    if !filter.task_ids.is_empty() && !client_has_tasks_extension(&ctx.params) {
        return Err(missing_capability(
            format!("task notifications need the {} extension", rmcp::model::TASKS_EXTENSION_ID),
            json!({"extensions": {rmcp::model::TASKS_EXTENSION_ID: {}}}),
        ));
    }
    let held = super::hold_stream(&state, &ctx.caller)?;
    let (tx, rx) = mpsc::channel(64);
    let subscription = Subscription { id: ctx.id.clone(), caller: ctx.caller.clone(), tx, _held: held };
    tokio::spawn(async move { subscription.run(state, filter).await });
    Ok(Reply::Stream(ReceiverStream::new(rx).boxed()))
}

struct Subscription {
    id: Value,
    caller: Caller,
    tx: mpsc::Sender<StreamItem>,
    /// One of the caller's streams, for as long as the subscription lasts.
    _held: crate::state::Held,
}

/// What a watched task is watched for.
#[derive(Default, Clone)]
struct Watch {
    status: bool,
    result_uri: Option<String>,
}

impl Subscription {
    fn meta(&self) -> Value {
        json!({META_SUBSCRIPTION_ID: self.id})
    }

    /// Sends one notification; `false` when the client has gone.
    async fn send(&self, method: &str, mut params: Value) -> bool {
        if let Some(object) = params.as_object_mut() {
            object.insert("_meta".to_owned(), self.meta());
        }
        self.tx.send(StreamItem::Message(rpc::notification(method, params))).await.is_ok()
    }

    async fn run(self, state: Arc<AppState>, mut filter: Filter) {
        // Only the caller's own tasks are agreed to. Each task named (by id, or by a task
        // resource) is looked at before the acknowledgement, which leaves out every one that is
        // not the caller's, unknown ones included, so that it confirms no other principal's task
        // id; another principal's is in the audit log. A task watched for changes is joined (its
        // waiters) in the same step as it is read, so that no change falls before the watch.
        let mut watches: HashMap<String, Watch> = HashMap::new();
        for task_id in &filter.task_ids {
            watches.entry(task_id.clone()).or_default().status = true;
        }
        let mut named_only = BTreeSet::new();
        for uri in &filter.resource_uris {
            if let Some(id) = match_template(TASK_RESULT_TEMPLATE, uri).and_then(|v| v.get("taskId").cloned())
            {
                watches.entry(id.as_str().unwrap_or_default().to_owned()).or_default().result_uri =
                    Some(uri.clone());
            } else if let Some(id) = task_of_resource(uri) {
                named_only.insert(id);
            }
        }
        let mut joined = HashMap::new();
        for task_id in watches.keys() {
            if let Some(found) = self.join(&state, task_id).await {
                joined.insert(task_id.clone(), found);
            }
        }
        let mut owned_only = BTreeSet::new();
        for task_id in named_only.into_iter().filter(|id| !watches.contains_key(id)) {
            if self.owns(&state, &task_id).await {
                owned_only.insert(task_id);
            }
        }
        filter.task_ids.retain(|id| joined.contains_key(id));
        filter.resource_uris.retain(|uri| match task_of_resource(uri) {
            Some(id) => joined.contains_key(&id) || owned_only.contains(&id),
            None => true,
        });
        watches.retain(|id, _| joined.contains_key(id));
        if !self
            .send("notifications/subscriptions/acknowledged", json!({"notifications": filter.agreed()}))
            .await
        {
            return;
        }
        let (events, mut deliveries) = mpsc::channel::<(String, Delivery)>(64);
        for (task_id, (task, waiter)) in joined {
            let watch = watches.get(&task_id).cloned().unwrap_or_default();
            self.start_watch(&state, task, waiter, &watch, events.clone()).await;
        }
        drop(events);
        let lists = filter.tools || filter.prompts || filter.resources;
        let mut offered = if lists { catalog_fingerprint(&state).await } else { HashMap::new() };
        let mut check = tokio::time::interval(CATALOG_CHECK);
        loop {
            tokio::select! {
                Some((task_id, delivery)) = deliveries.recv() => {
                    let Some(watch) = watches.get(&task_id).cloned() else { continue };
                    let changed = matches!(
                        delivery,
                        Delivery::Event(TaskEvent::Status { .. } | TaskEvent::Expired) | Delivery::Resync
                    );
                    if changed && !self.task_changed(&state, &task_id, &watch).await {
                        return;
                    }
                }
                _ = check.tick(), if lists => {
                    let now = catalog_fingerprint(&state).await;
                    for (kind, on, method) in [
                        (OfferKind::Tool, filter.tools, "notifications/tools/list_changed"),
                        (OfferKind::Prompt, filter.prompts, "notifications/prompts/list_changed"),
                        (OfferKind::Resource, filter.resources, "notifications/resources/list_changed"),
                    ] {
                        if on && now.get(&kind) != offered.get(&kind) && !self.send(method, json!({})).await {
                            return;
                        }
                    }
                    offered = now;
                }
                () = self.tx.closed() => return,
                () = state.shutdown.cancelled() => {
                    // A graceful end: the client knows to listen again on another gateway.
                    let _ = self.tx.send(StreamItem::Done(Ok(json!({"_meta": self.meta()})))).await;
                    return;
                }
            }
        }
    }

    /// Joins a named task's waiters and reads it, when it is the caller's (a client's task, of the
    /// caller or seen by an operator); another principal's is audited, and neither it nor an
    /// unknown one is joined.
    async fn join(&self, state: &AppState, task_id: &str) -> Option<(TaskRecord, Waiter)> {
        let hub = state.store.events().await.ok()?;
        let shard = state.store.shard_of(task_id)?;
        let waiter = hub.waiter(task_id);
        // Without its result, which the script would copy while Redis serves no one else: a
        // settled task's is read after, with a plain read.
        let inbox = hub.inbox(shard);
        match state.store.watch_task_without_result(task_id, &inbox, self.caller.owner_filter()).await {
            // A settled task's outcome is read when it is told of, within the caller's budget.
            Ok(Some(task)) if task.mode == TaskMode::Task && self.caller.may_see(&task.owner) => {
                Some((task, waiter))
            }
            Ok(Some(task)) if task.mode == TaskMode::Task => {
                self.refused(task_id);
                None
            }
            _ => None,
        }
    }

    /// Whether a task a resource names is the caller's (looked at, not joined).
    async fn owns(&self, state: &AppState, task_id: &str) -> bool {
        match state.store.task_status(task_id).await {
            Ok(Some(task)) if task.mode == TaskMode::Task && self.caller.may_see(&task.owner) => true,
            Ok(Some(task)) if task.mode == TaskMode::Task => {
                self.refused(task_id);
                false
            }
            _ => false,
        }
    }

    fn refused(&self, task_id: &str) {
        super::audit_denied(
            &self.caller,
            "subscriptions/listen",
            task_id,
            "the task belongs to another principal; left out of the acknowledgement",
        );
    }

    /// Tells the client a joined task's status now when it asked for status, and hears of its
    /// events from then on until it settles.
    async fn start_watch(
        &self,
        state: &AppState,
        task: TaskRecord,
        mut waiter: Waiter,
        watch: &Watch,
        events: mpsc::Sender<(String, Delivery)>,
    ) {
        if task.status.is_terminal() {
            // Joined without its outcome: read now, within the caller's budget.
            self.task_changed(state, &task.task_id, watch).await;
            return;
        }
        if watch.status {
            self.send("notifications/tasks", task_params(&task)).await;
        }
        let task_id = task.task_id;
        tokio::spawn(async move {
            while let Some(delivery) = waiter.recv().await {
                if events.send((task_id.clone(), delivery)).await.is_err() {
                    return;
                }
            }
        });
    }

    /// Reads a watched task for a notification: its outcome within the caller's in-flight
    /// budget (the permit comes along), or, when that has no room for it, how it stands without
    /// its outcome, which the client reads with `tasks/get`. `None`: gone, or unreadable.
    async fn read(&self, state: &AppState, task_id: &str) -> Option<(TaskRecord, BudgetPermit)> {
        let read =
            |parts| read_task(state, Reader::new(&self.caller, "subscriptions/listen", parts), task_id);
        let found = match read(TaskParts::OUTCOME).await {
            Err(refused) => {
                tracing::debug!(task = %task_id, error = %refused.error.message, "notifying a task's status without its outcome");
                read(TaskParts::STATUS).await
            }
            found => found,
        };
        match found {
            Ok(Some(Found::Read(held))) => Some((held.detail.task, held.permit)),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(task = %task_id, error = %e.error.message, "could not read a watched task");
                None
            }
        }
    }

    /// Tells the client a watched task changed; `false` when the client has gone.
    async fn task_changed(&self, state: &AppState, task_id: &str, watch: &Watch) -> bool {
        // Expired or unreadable: nothing more will be told of it.
        let Some((task, permit)) = self.read(state, task_id).await else { return true };
        let terminal = task.status.is_terminal();
        if watch.status {
            if !self.send("notifications/tasks", task_params(&task)).await {
                return false;
            }
            // What the notification holds stays counted until the stream's writer has taken it
            // (the queue has room for all it can hold again), so that a client that reads slowly
            // holds no more than its budget of outcomes.
            drop(task);
            let _ = self.tx.reserve_many(self.tx.max_capacity()).await;
        }
        drop(permit);
        if terminal && let Some(uri) = &watch.result_uri {
            return self.send("notifications/resources/updated", json!({"uri": uri})).await;
        }
        true
    }
}

/// A `notifications/tasks` payload: the DetailedTask `tasks/get` would answer now.
fn task_params(task: &TaskRecord) -> Value {
    let mut params = json!(wire::detailed_2026(task));
    if let Some(object) = params.as_object_mut() {
        object.remove("resultType");
        if task.result.is_none() && task.error.is_none() {
            // Its outcome was not read (past the caller's budget): `tasks/get` reads it.
            object.remove("result");
            object.remove("error");
        }
    }
    params
}

/// What live workers offer, per kind: names and definitions, to notice any change.
async fn catalog_fingerprint(state: &AppState) -> HashMap<OfferKind, Vec<(String, String)>> {
    let mut offered: HashMap<OfferKind, Vec<(String, String)>> = HashMap::new();
    if let Ok(snapshot) = state.catalog.snapshot().await {
        for offer in snapshot.tools.iter().filter(|t| t.live) {
            // Templates are listed with resources: a change to either is a resource list change.
            let kind =
                if offer.kind == OfferKind::ResourceTemplate { OfferKind::Resource } else { offer.kind };
            offered.entry(kind).or_default().push((offer.name.clone(), offer.definition.to_string()));
        }
    }
    for list in offered.values_mut() {
        list.sort();
    }
    offered
}
