//! The consumer loop of one worker process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use conveyor_shared::model::{RpcError, TaskStatus, ToolOutcome, WorkItem};
use conveyor_shared::store::{CompleteOutcome, StartOutcome};
use conveyor_shared::{Store, StoreError, keys};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::tool::{ToolContext, ToolRegistry};

/// How a worker runs.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// Consumer name in the group; unique per worker process.
    pub name: String,
    /// Nodes run at once.
    pub concurrency: usize,
    /// How long one stream read blocks waiting for work.
    pub block: Duration,
    /// How often a running node re-checks its task's status, in case a cancel message was lost.
    pub status_recheck: Duration,
    /// On shutdown, how long running nodes may take to finish before they are stopped and handed
    /// back to the queue.
    pub shutdown_grace: Duration,
    /// How long a running node's lease lasts without renewal; after that another worker takes the
    /// node over. The worker renews its leases three times per lease.
    pub lease: Duration,
    /// After this many lost workers a node is not run again: it fails and is dead-lettered.
    pub max_losses: u32,
}

impl WorkerOptions {
    pub fn new(concurrency: usize) -> Self {
        Self {
            name: format!("worker-{}", uuid::Uuid::new_v4().simple()),
            concurrency: concurrency.max(1),
            block: Duration::from_secs(2),
            status_recheck: Duration::from_secs(1),
            shutdown_grace: Duration::from_secs(30),
            lease: Duration::from_secs(30),
            max_losses: 3,
        }
    }
}

type RunningMap = HashMap<String, HashMap<u64, CancellationToken>>;

/// The stream entries this worker holds, whose leases it renews.
#[derive(Default, Clone)]
struct Held(Arc<Mutex<std::collections::HashSet<String>>>);

impl Held {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
        // Single-call critical sections: a poisoned set is still whole.
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Cancellation tokens of the nodes this worker runs, by task id, then by registration number.
#[derive(Default, Clone)]
struct Running {
    map: Arc<Mutex<RunningMap>>,
    next: Arc<std::sync::atomic::AtomicU64>,
}

impl Running {
    fn insert(&self, task_id: &str, token: CancellationToken) -> u64 {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.lock().entry(task_id.to_owned()).or_default().insert(id, token);
        id
    }

    fn remove(&self, task_id: &str, id: u64) {
        let mut map = self.lock();
        if let Some(tokens) = map.get_mut(task_id) {
            tokens.remove(&id);
            if tokens.is_empty() {
                map.remove(task_id);
            }
        }
    }

    fn cancel(&self, task_id: &str) -> usize {
        let map = self.lock();
        let Some(tokens) = map.get(task_id) else { return 0 };
        tokens.values().for_each(CancellationToken::cancel);
        tokens.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RunningMap> {
        // Every operation on the map is a single call, so a panic elsewhere cannot leave it
        // half-updated and a poisoned lock is safe to keep using.
        self.map.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Runs a worker until `shutdown` fires: publishes the registry's tools, then consumes work.
/// On shutdown it stops reading, lets running nodes finish within the grace period, then stops
/// them and hands them back to the queue for another worker.
pub async fn run(
    store: Store,
    registry: Arc<ToolRegistry>,
    options: WorkerOptions,
    shutdown: CancellationToken,
) -> Result<(), StoreError> {
    let running = Running::default();
    let stop_running = CancellationToken::new();
    wait_for_redis(&store, &registry, &shutdown).await;
    let listener = tokio::spawn(listen_for_cancels(store.clone(), running.clone(), shutdown.clone()));
    let publisher = tokio::spawn(keep_tools_published(store.clone(), registry.clone(), shutdown.clone()));
    let promoter = tokio::spawn(promote_retries(store.clone(), shutdown.clone()));
    let held = Held::default();
    let renewer =
        tokio::spawn(renew_leases(store.clone(), options.name.clone(), held.clone(), options.lease));
    let mut last_claim = tokio::time::Instant::now();
    let semaphore = Arc::new(Semaphore::new(options.concurrency));
    let mut nodes = JoinSet::new();
    let mut conn = None;
    let mut backoff = Backoff::default();
    tracing::info!(worker = %options.name, concurrency = options.concurrency, "worker started");

    while !shutdown.is_cancelled() {
        let first = tokio::select! {
            permit = semaphore.clone().acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => break,
            },
            () = shutdown.cancelled() => break,
        };
        let mut permits = vec![first];
        while let Ok(p) = semaphore.clone().try_acquire_owned() {
            permits.push(p);
        }
        // Take over nodes whose worker stopped renewing its lease (killed, hung, cut off).
        if last_claim.elapsed() >= options.lease / 2 {
            last_claim = tokio::time::Instant::now();
            match store.claim_abandoned(&options.name, options.lease, permits.len()).await {
                Ok(claimed) if !claimed.is_empty() => {
                    tracing::info!(worker = %options.name, nodes = claimed.len(), "took over nodes whose lease ran out");
                    for item in claimed {
                        let Some(permit) = permits.pop() else { break };
                        let job = job_for(&store, &registry, &running, &held, &options, &stop_running);
                        nodes.spawn(async move {
                            job.run(item, true).await;
                            drop(permit);
                        });
                    }
                    if permits.is_empty() {
                        continue;
                    }
                }
                Ok(_) => {}
                Err(e) => tracing::debug!(error = %e, "could not look for abandoned nodes"),
            }
        }
        if conn.is_none() {
            match store.blocking_connection().await {
                Ok(c) => conn = Some(c),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot reach Redis; retrying");
                    backoff.wait(&shutdown).await;
                    continue;
                }
            }
        }
        let Some(c) = conn.as_mut() else { continue };
        // The read is never abandoned half-way: Redis would still deliver an entry to a read the
        // worker stopped waiting for, and that entry would sit with a consumer that is gone. It
        // blocks for at most `options.block`; what it returns after shutdown goes back to the queue.
        let read = Store::read_work(c, &options.name, permits.len(), options.block).await;
        if shutdown.is_cancelled() {
            for item in read.unwrap_or_default() {
                if let Err(e) = store.requeue(&item).await {
                    tracing::warn!(entry = %item.entry_id, error = %e, "could not requeue an unstarted entry");
                }
            }
            break;
        }
        let items = match read {
            Ok(items) => {
                backoff.reset();
                items
            }
            Err(e) => {
                if e.to_string().contains("NOGROUP") {
                    // Redis lost its data (restarted without persistence): set the group and the
                    // tool catalog up again.
                    let _ = store.ensure_work_group().await;
                    let _ = store.publish_tools(&registry.published()).await;
                } else {
                    tracing::warn!(error = %e, "reading work failed; reconnecting");
                    conn = None;
                    backoff.wait(&shutdown).await;
                }
                continue;
            }
        };
        for item in items {
            let Some(permit) = permits.pop() else { break };
            let job = job_for(&store, &registry, &running, &held, &options, &stop_running);
            nodes.spawn(async move {
                job.run(item, false).await;
                drop(permit);
            });
        }
        // Reap finished nodes so the set does not grow.
        while nodes.try_join_next().is_some() {}
    }

    tracing::info!(worker = %options.name, running = nodes.len(), "worker stopping: no new work is read");
    let drained =
        tokio::time::timeout(options.shutdown_grace, async { while nodes.join_next().await.is_some() {} })
            .await;
    if drained.is_err() {
        tracing::warn!(worker = %options.name, "grace period over: stopping running nodes and handing them back");
        stop_running.cancel();
        while nodes.join_next().await.is_some() {}
    }
    listener.abort();
    publisher.abort();
    promoter.abort();
    renewer.abort();
    tracing::info!(worker = %options.name, "worker stopped");
    Ok(())
}

/// Waits until Redis answers, then publishes the tools and makes sure the consumer group exists.
async fn wait_for_redis(store: &Store, registry: &ToolRegistry, shutdown: &CancellationToken) {
    let mut backoff = Backoff::default();
    while !shutdown.is_cancelled() {
        let ready = async {
            store.ensure_work_group().await?;
            store.publish_tools(&registry.published()).await
        };
        match ready.await {
            Ok(()) => return,
            Err(e) => {
                tracing::warn!(error = %e, "waiting for Redis");
                backoff.wait(shutdown).await;
            }
        }
    }
}

/// How often a worker republishes its tools, so that a Redis that lost its data (restarted without
/// persistence) lists them again without a worker restart.
const REPUBLISH_EVERY: Duration = Duration::from_secs(10);

async fn keep_tools_published(store: Store, registry: Arc<ToolRegistry>, shutdown: CancellationToken) {
    let published = registry.published();
    loop {
        tokio::select! {
            () = tokio::time::sleep(REPUBLISH_EVERY) => {}
            () = shutdown.cancelled() => return,
        }
        if let Err(e) = store.publish_tools(&published).await {
            tracing::debug!(error = %e, "could not republish tools; trying again later");
        }
    }
}

/// How often a worker moves due retries back onto the stream. Every worker does it, so retries
/// keep flowing while any worker runs.
const PROMOTE_EVERY: Duration = Duration::from_millis(100);
/// How often a worker drops finished entries from the work stream.
const TRIM_EVERY: Duration = Duration::from_secs(5);

async fn promote_retries(store: Store, shutdown: CancellationToken) {
    let mut last_trim = tokio::time::Instant::now();
    loop {
        tokio::select! {
            () = tokio::time::sleep(PROMOTE_EVERY) => {}
            () = shutdown.cancelled() => return,
        }
        if let Err(e) = store.promote_retries(256).await {
            tracing::debug!(error = %e, "could not promote retries; trying again");
        }
        if let Err(e) = store.reap_expired(256).await {
            tracing::debug!(error = %e, "could not reap expired index entries; trying again");
        }
        if last_trim.elapsed() >= TRIM_EVERY {
            last_trim = tokio::time::Instant::now();
            if let Err(e) = store.trim_work().await {
                tracing::debug!(error = %e, "could not trim the work stream; trying again");
            }
        }
    }
}

/// Renews the leases of the entries this worker holds, three times per lease.
async fn renew_leases(store: Store, worker: String, held: Held, lease: Duration) {
    loop {
        tokio::time::sleep(lease / 3).await;
        let ids: Vec<String> = held.lock().iter().cloned().collect();
        if let Err(e) = store.renew_leases(&worker, &ids).await {
            tracing::warn!(error = %e, held = ids.len(), "could not renew leases");
        }
    }
}

/// Fires the tokens of cancelled tasks as cancel messages arrive; resubscribes after a drop.
async fn listen_for_cancels(store: Store, running: Running, shutdown: CancellationToken) {
    let mut backoff = Backoff::default();
    while !shutdown.is_cancelled() {
        let mut messages = match store.subscribe(keys::CANCEL_CHANNEL).await {
            Ok(m) => {
                backoff.reset();
                m
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot subscribe to cancellations; retrying");
                backoff.wait(&shutdown).await;
                continue;
            }
        };
        loop {
            tokio::select! {
                message = messages.recv() => match message {
                    Some(task_id) => {
                        let stopped = running.cancel(&task_id);
                        if stopped > 0 {
                            tracing::info!(task = %task_id, nodes = stopped, "cancelling running nodes");
                        }
                    }
                    None => break,
                },
                () = shutdown.cancelled() => return,
            }
        }
    }
}

/// One work item, from start script to acknowledgement.
struct NodeJob {
    store: Store,
    registry: Arc<ToolRegistry>,
    running: Running,
    held: Held,
    worker: String,
    recheck: Duration,
    max_losses: u32,
    stop: CancellationToken,
}

fn job_for(
    store: &Store,
    registry: &Arc<ToolRegistry>,
    running: &Running,
    held: &Held,
    options: &WorkerOptions,
    stop_running: &CancellationToken,
) -> NodeJob {
    NodeJob {
        store: store.clone(),
        registry: registry.clone(),
        running: running.clone(),
        held: held.clone(),
        worker: options.name.clone(),
        recheck: options.status_recheck,
        max_losses: options.max_losses,
        stop: stop_running.child_token(),
    }
}

impl NodeJob {
    async fn run(self, item: WorkItem, reclaimed: bool) {
        self.held.lock().insert(item.entry_id.clone());
        self.process(item.clone(), reclaimed).await;
        self.held.lock().remove(&item.entry_id);
    }

    async fn process(&self, item: WorkItem, reclaimed: bool) {
        if item.task_id.is_empty() {
            self.ack(&item).await;
            return;
        }
        if item.node_id == keys::FINALIZE_NODE {
            match crate::dag::finalize(&self.store, &item.task_id).await {
                Ok(()) => self.ack(&item).await,
                // The entry stays pending; it is delivered again once claimed.
                Err(e) => tracing::warn!(task = %item.task_id, error = %e, "could not finalize the task"),
            }
            return;
        }
        let start =
            match self.store.start_attempt(&item.task_id, &item.node_id, &self.worker, reclaimed).await {
                Ok(s) => s,
                Err(e) => {
                    // The entry stays pending; it is delivered again once claimed.
                    tracing::warn!(task = %item.task_id, error = %e, "could not start node");
                    return;
                }
            };
        let (attempt, tool_name, arguments, timeout) = match start {
            StartOutcome::Skip(reason) => {
                tracing::debug!(task = %item.task_id, node = %item.node_id, %reason, "skipping node");
                self.ack(&item).await;
                return;
            }
            StartOutcome::Run { attempt, losses, .. } if self.max_losses > 0 && losses >= self.max_losses => {
                // This node took its worker down too often: it is not run again.
                tracing::warn!(task = %item.task_id, node = %item.node_id, losses, "node lost its worker too often; failing it");
                let error = ToolOutcome::Error(RpcError {
                    code: -32603,
                    message: format!("the node lost its worker {losses} times; it is not run again"),
                    data: None,
                });
                match self
                    .store
                    .complete_attempt(&item.task_id, &item.node_id, attempt, Some(&error), true)
                    .await
                {
                    Ok(_) => self.ack(&item).await,
                    Err(e) => {
                        tracing::warn!(task = %item.task_id, error = %e, "could not fail the node; it stays pending")
                    }
                }
                return;
            }
            StartOutcome::Run { attempt, tool, arguments, timeout, .. } => {
                (attempt, tool, arguments, timeout)
            }
        };
        let token = self.stop.child_token();
        let registration = self.running.insert(&item.task_id, token.clone());
        let mut timed_out = false;
        let outcome = match crate::dag::resolve_arguments(&self.store, &item.task_id, &arguments).await {
            Err(outcome) => outcome,
            Ok(arguments) => {
                let ctx = ToolContext {
                    task_id: item.task_id.clone(),
                    node_id: item.node_id.clone(),
                    attempt,
                    arguments,
                    cancel: token.clone(),
                    traceparent: item.traceparent.clone(),
                    store: self.store.clone(),
                };
                let watcher = tokio::spawn(watch_status(
                    self.store.clone(),
                    item.task_id.clone(),
                    token.clone(),
                    self.recheck,
                ));
                let call = self.call(&tool_name, ctx);
                let outcome = match timeout {
                    None => call.await,
                    Some(limit) => match tokio::time::timeout(limit, call).await {
                        Ok(outcome) => outcome,
                        Err(_) => {
                            // The tool is told to stop; the attempt counts as failed.
                            timed_out = true;
                            token.cancel();
                            ToolOutcome::Error(RpcError {
                                code: -32001,
                                message: format!("timed out after {} ms", limit.as_millis()),
                                data: None,
                            })
                        }
                    },
                };
                watcher.abort();
                outcome
            }
        };
        self.running.remove(&item.task_id, registration);
        if self.stop.is_cancelled() && !token_cancelled_by_task(&self.store, &item.task_id).await {
            // Stopped by shutdown, not by the task: hand the node back so another worker starts
            // it at once.
            match self.store.release_node(&item, attempt).await {
                Ok(true) => {
                    tracing::info!(task = %item.task_id, node = %item.node_id, "handed the node back to the queue")
                }
                Ok(false) => {
                    tracing::info!(task = %item.task_id, "node already settled elsewhere; nothing to hand back")
                }
                Err(e) => {
                    tracing::warn!(task = %item.task_id, error = %e, "could not hand the node back; it stays pending")
                }
            }
            return;
        }
        let outcome = if token.is_cancelled() && !timed_out { None } else { Some(outcome) };
        let outcome = match outcome {
            Some(ToolOutcome::Plan(plan)) => match crate::dag::check_plan(&self.store, &plan).await {
                Ok(()) => {
                    self.expand(&item, attempt, &plan).await;
                    return;
                }
                Err(invalid) => Some(invalid),
            },
            other => other,
        };
        // Finished work is not thrown away because Redis is briefly away: the completion is
        // retried (the lease stays held and renewed meanwhile) until Redis takes it.
        let mut backoff = Backoff::default();
        let completed = loop {
            match self.store.complete_node(&item.task_id, &item.node_id, attempt, outcome.as_ref()).await {
                Ok(done) => break done,
                Err(e) => {
                    tracing::warn!(task = %item.task_id, error = %e, "could not record the node's outcome yet; retrying");
                    if self.stop.is_cancelled() {
                        return; // shutting down: the entry stays pending for another worker
                    }
                    backoff.wait(&self.stop).await;
                }
            }
        };
        if completed == CompleteOutcome::Stale {
            // Another worker took the node over (this one was presumed lost) and now holds its
            // entry: acknowledging it would take it from under that worker.
            tracing::info!(task = %item.task_id, attempt, "completion refused: attempt is stale");
            return;
        }
        self.ack(&item).await;
    }

    /// Runs one attempt of a tool or a built-in node. A panicking tool must not take the worker
    /// down: it fails its attempt instead.
    async fn call(&self, tool_name: &str, ctx: ToolContext) -> ToolOutcome {
        if let Some(outcome) = crate::dag::builtin(tool_name, &ctx) {
            return outcome;
        }
        match self.registry.get(tool_name) {
            Some(tool) => tokio::spawn(tool.call(ctx)).await.unwrap_or_else(|e| {
                ToolOutcome::Error(RpcError {
                    code: -32603,
                    message: format!("tool `{tool_name}` crashed: {e}"),
                    data: None,
                })
            }),
            None => ToolOutcome::Error(RpcError {
                code: -32601,
                message: format!("tool `{tool_name}` is not registered on worker {}", self.worker),
                data: None,
            }),
        }
    }

    /// Adds a planning node's graph to its task, then acknowledges the entry.
    async fn expand(&self, item: &WorkItem, attempt: u32, plan: &conveyor_shared::dag::DagSpec) {
        use conveyor_shared::store::ExpandOutcome;
        match self.store.expand_plan(&item.task_id, &item.node_id, attempt, plan).await {
            Ok(ExpandOutcome::Expanded(n)) => {
                tracing::info!(task = %item.task_id, nodes = n, "expanded a planned graph")
            }
            Ok(ExpandOutcome::Refused(reason)) => {
                // The plan cannot join this task: the node fails with the reason.
                let error = ToolOutcome::Error(RpcError { code: -32602, message: reason, data: None });
                if let Err(e) =
                    self.store.complete_node(&item.task_id, &item.node_id, attempt, Some(&error)).await
                {
                    tracing::warn!(task = %item.task_id, error = %e, "could not record a refused plan; it stays pending");
                    return;
                }
            }
            Ok(ExpandOutcome::Stale) => {
                // The node was taken over; its new worker holds the entry now.
                tracing::info!(task = %item.task_id, "plan refused: attempt is stale");
                return;
            }
            Ok(other) => tracing::info!(task = %item.task_id, outcome = ?other, "plan not expanded"),
            Err(e) => {
                tracing::warn!(task = %item.task_id, error = %e, "could not expand a plan; it stays pending");
                return;
            }
        }
        self.ack(item).await;
    }

    async fn ack(&self, item: &WorkItem) {
        if let Err(e) = self.store.ack(&item.entry_id).await {
            tracing::warn!(entry = %item.entry_id, error = %e, "could not acknowledge entry");
        }
    }
}

/// Re-reads the task's status every `every`, firing `token` once the task is no longer working:
/// pub/sub may drop a cancel message, the hash never does. Runs until aborted.
async fn watch_status(store: Store, task_id: String, token: CancellationToken, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    loop {
        tick.tick().await;
        if token.is_cancelled() {
            continue;
        }
        match store.get_task(&task_id).await {
            Ok(Some(task))
                if task.status == TaskStatus::Working || task.status == TaskStatus::InputRequired => {}
            Ok(_) => token.cancel(),
            Err(_) => {} // Redis is away; the tool keeps running and we look again.
        }
    }
}

async fn token_cancelled_by_task(store: &Store, task_id: &str) -> bool {
    matches!(store.get_task(task_id).await, Ok(Some(t)) if t.status == TaskStatus::Cancelled)
}

/// Exponential backoff with a cap, for reconnecting to Redis.
#[derive(Default)]
struct Backoff {
    failures: u32,
}

impl Backoff {
    async fn wait(&mut self, shutdown: &CancellationToken) {
        let delay = Duration::from_millis(100u64.saturating_mul(1 << self.failures.min(5)))
            .min(Duration::from_secs(3));
        self.failures += 1;
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = shutdown.cancelled() => {}
        }
    }

    fn reset(&mut self) {
        self.failures = 0;
    }
}
