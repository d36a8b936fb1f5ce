//! The consumer loop of one worker process: [`run`] and what every part of it shares
//! ([`WorkerOptions`], the `Worker` handle).
//!
//! - [`intake`]: readers (one on a single server, one per shard on a cluster) read batches from the
//!   queues this worker serves and start each batch in one script per shard; a batch or an entry
//!   that failed to start is tried again apart, keeping its slots.
//! - [`job`]: each started attempt runs as a `NodeJob`; it completes with one script that also
//!   acknowledges its entry.
//! - [`leases`]: the entries of running attempts renewed in one command per stream (an attempt
//!   whose entry another worker took over is stopped), and running attempts of cancelled tasks
//!   stopped (sharded pub/sub), all re-checked whenever cancel notices may have been lost.
//! - [`registry`]: the attempts this worker runs, why each was told to stop, and the slots each
//!   principal's nodes take.
//! - [`upkeep`]: the heartbeat, and the maintenance of every shard on the one worker that holds
//!   its lease, only when something falls due (and, while a shard has live tasks, a look once a
//!   lease for entries nobody renewed); the lease handed over when the worker stops.
//! - [`chores`]: the housekeeping the served tools ask for, on their own periods.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use conveyor_shared::events::CancelNotice;
use conveyor_shared::input::{self, InputRequired};
use conveyor_shared::keys::{self, Shard};
use conveyor_shared::metrics::{self, NodeOutcome, NodeRun};
use conveyor_shared::model::{RpcError, TaskStatus, ToolOutcome, WorkItem, now_ms};
use conveyor_shared::store::{
    Attempt, CompleteOutcome, ExpandOutcome, NodeStart, ParkOutcome, RunningNode, SlotShares, StartOutcome,
    WorkReader,
};
use conveyor_shared::telemetry::context::{self, TaskTrace, attr};
use conveyor_shared::{Store, StoreError};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::tool::{ToolContext, ToolRegistry};

mod chores;
mod intake;
mod job;
mod leases;
mod registry;
mod upkeep;

use intake::*;
use job::*;
use leases::*;
use registry::*;

/// How a message names what a node runs: `tool `x``, or `prompt `x`` for a prompt's handler.
fn offer_name(key: &str) -> String {
    match key.split_once('/') {
        Some(("prompt", name)) => format!("prompt `{name}`"),
        Some(("resource", uri)) => format!("resource `{uri}`"),
        Some(("template", template)) => format!("resource template `{template}`"),
        _ => format!("tool `{key}`"),
    }
}

/// The protocol's error for a request the client did not declare it can take (2026-07-28 names
/// it; on 2025-11-25 the same code travels with the same `data.requiredCapabilities`).
const MISSING_CLIENT_CAPABILITY: i32 = -32021;
/// How long a tool told to stop may take to return before it is aborted: enough for a child
/// process to get its SIGTERM, then its SIGKILL (`conveyor_tools::process`).
const TOOL_STOP_GRACE: Duration = Duration::from_secs(5);
/// How long a stopping worker keeps trying to record a finished node while Redis is away.
const PERSIST_WHILE_STOPPING: Duration = Duration::from_secs(10);

/// How a worker runs.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// Consumer name in the group; unique per worker process.
    pub name: String,
    /// Nodes run at once.
    pub concurrency: usize,
    /// How long one stream read blocks waiting for work.
    pub block: Duration,
    /// On shutdown, how long running nodes may take to finish before they are stopped and handed
    /// back to the queue.
    pub shutdown_grace: Duration,
    /// How long a running node's lease lasts without renewal; after that the shard's maintenance
    /// queues the node again for another worker. The worker renews its leases three times per
    /// lease.
    pub lease: Duration,
    /// After this many lost workers a node is not run again: it fails and is dead-lettered.
    pub max_losses: u32,
    /// How often the worker announces itself (its queues, tools and running nodes).
    pub heartbeat: Duration,
    /// What one node may take in and hand out.
    pub node_limits: NodeLimits,
    /// The share of this worker's slots one principal's nodes may take (0 < share <= 1): the rest
    /// stays free for other principals, so that one principal's long graph never makes everyone
    /// else wait for a slot. 1: no share.
    pub principal_share: f64,
}

impl WorkerOptions {
    /// How many of this worker's slots one principal may take; `None`: all of them.
    pub fn slots_per_principal(&self) -> Option<usize> {
        if !(self.principal_share > 0.0 && self.principal_share < 1.0) {
            return None;
        }
        let share = (self.concurrency as f64 * self.principal_share).floor() as usize;
        Some(share.clamp(1, self.concurrency))
    }
}

/// Bounds on the bytes one node may take in (its arguments with upstream values put in) and hand
/// out (its result or error), so that no graph can make a worker, or Redis, hold more than these
/// per running node, however its nodes feed each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeLimits {
    /// Largest arguments of a node once its `$from` references are resolved, in bytes of JSON.
    pub max_argument_bytes: usize,
    /// Largest result (or error) a node may store, in bytes of JSON.
    pub max_output_bytes: usize,
}

impl Default for NodeLimits {
    fn default() -> Self {
        Self { max_argument_bytes: 4 * 1024 * 1024, max_output_bytes: 8 * 1024 * 1024 }
    }
}

impl NodeLimits {
    /// How references are resolved under these limits. An upstream output is parsed to pick
    /// values out of it; what it may cost in memory scales with what a node may output.
    pub fn resolve(&self) -> conveyor_shared::dag::ResolveLimits {
        conveyor_shared::dag::ResolveLimits {
            max_resolved_bytes: self.max_argument_bytes,
            max_parsed_bytes: self.max_output_bytes.saturating_mul(8),
        }
    }
}

impl WorkerOptions {
    pub fn new(concurrency: usize) -> Self {
        Self {
            name: format!("worker-{}", uuid::Uuid::new_v4().simple()),
            concurrency: concurrency.max(1),
            block: Duration::from_secs(2),
            shutdown_grace: Duration::from_secs(30),
            lease: Duration::from_secs(30),
            max_losses: 3,
            heartbeat: Duration::from_secs(10),
            node_limits: NodeLimits::default(),
            principal_share: 0.75,
        }
    }
}

/// What every part of a running worker shares.
#[derive(Clone)]
struct Worker {
    store: Store,
    registry: Arc<ToolRegistry>,
    options: Arc<WorkerOptions>,
    queues: Arc<Vec<String>>,
    running: RunningRegistry,
    /// The slots each principal's nodes take on this worker now, counted from the start of a
    /// node to the end of its job, for the principals' shares.
    owners: OwnerSlots,
    /// Told whenever a job ends: a reader whose nodes wait for their principal's slot wakes.
    slot_freed: Arc<tokio::sync::Notify>,
    /// Fires when running nodes must stop and go back to their queue (end of the grace period).
    stop_running: CancellationToken,
    /// Shards whose maintenance a notice asked for.
    wakes: Arc<upkeep::Wakes>,
    /// The consumer groups are set up and the tools published, as far as the last heartbeat knows
    /// (one that Redis did not recognise, after it lost its data, does both again).
    set_up: Arc<std::sync::atomic::AtomicBool>,
}

/// Runs a worker until `shutdown` fires: announces itself and its tools, then consumes work.
/// On shutdown it stops reading, lets running nodes finish within the grace period, then stops
/// them and hands them back to their queue for another worker.
pub async fn run(
    store: Store,
    registry: Arc<ToolRegistry>,
    options: WorkerOptions,
    shutdown: CancellationToken,
) -> Result<(), StoreError> {
    let queues = registry.queues();
    let worker = Worker {
        store: store.clone(),
        registry,
        options: Arc::new(options),
        queues: Arc::new(queues),
        running: RunningRegistry::default(),
        owners: OwnerSlots::default(),
        slot_freed: Arc::new(tokio::sync::Notify::new()),
        stop_running: CancellationToken::new(),
        wakes: Arc::default(),
        set_up: Arc::default(),
    };
    let name = worker.options.name.clone();
    if !wait_for_redis(&worker, &shutdown).await? {
        return Ok(());
    }
    let semaphore = Arc::new(Semaphore::new(worker.options.concurrency));
    let jobs = TaskTracker::new();
    let background = [
        tokio::spawn(listen_for_cancels(worker.clone(), shutdown.clone())),
        tokio::spawn(renew_leases(worker.clone())),
        tokio::spawn(upkeep::keep_alive(worker.clone(), shutdown.clone())),
        tokio::spawn(chores::run_chores(worker.clone(), shutdown.clone())),
    ];
    let readers = loop {
        match store.work_readers(&worker.queues).await {
            Ok(readers) => break readers,
            Err(e) => {
                tracing::warn!(error = %e, "cannot set up work readers; retrying");
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                    () = shutdown.cancelled() => return Ok(()),
                }
            }
        }
    };
    tracing::info!(
        worker = %name, concurrency = worker.options.concurrency, queues = ?worker.queues,
        readers = readers.len(), "worker started"
    );
    let reading: Vec<_> = readers
        .into_iter()
        .map(|reader| {
            tokio::spawn(read_loop(worker.clone(), reader, semaphore.clone(), jobs.clone(), shutdown.clone()))
        })
        .collect();
    for reader in reading {
        let _ = reader.await;
    }

    jobs.close();
    tracing::info!(worker = %name, running = jobs.len(), "worker stopping: no new work is read");
    if tokio::time::timeout(worker.options.shutdown_grace, jobs.wait()).await.is_err() {
        tracing::warn!(worker = %name, "grace period over: stopping running nodes and handing them back");
        // Each run learns why before its token fires, so that it hands its node back.
        for run in worker.running.lock().values() {
            run.stop(StopReason::Shutdown);
        }
        worker.stop_running.cancel();
        jobs.wait().await;
    }
    for task in background {
        task.abort();
    }
    upkeep::leave(&worker).await;
    tracing::info!(worker = %name, "worker stopped");
    Ok(())
}

/// Waits until Redis answers and the deployment's layout agrees, then sets up the consumer
/// groups and announces the worker. `false` when shutdown came first.
async fn wait_for_redis(worker: &Worker, shutdown: &CancellationToken) -> Result<bool, StoreError> {
    let mut backoff = Backoff::default();
    while !shutdown.is_cancelled() {
        let ready = async {
            worker.store.check_layout().await?;
            upkeep::announce(worker).await.map(drop)
        };
        match ready.await {
            Ok(()) => return Ok(true),
            Err(e @ StoreError::Layout(_)) => return Err(e),
            Err(e) => {
                tracing::warn!(error = %e, "waiting for Redis");
                backoff.wait(shutdown).await;
            }
        }
    }
    Ok(false)
}

/// Tries a transition of the worker's own (start, hand-back, finalize, failing an unreadable node)
/// again, with backoff, until it goes through; `None` when it still fails after `within` (then its
/// entry, unrenewed, is queued again by the maintenance a lease after it was last renewed), or
/// when the worker has stopped running nodes for [`PERSIST_WHILE_STOPPING`].
async fn keep_trying<T, F, Fut>(
    worker: &Worker,
    what: &str,
    task_id: &str,
    within: Duration,
    mut op: F,
) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    let give_up = tokio::time::Instant::now() + within;
    let mut backoff = Backoff::default();
    let mut stopping_since: Option<tokio::time::Instant> = None;
    loop {
        let error = match op().await {
            Ok(done) => return Some(done),
            Err(e) => e,
        };
        let now = tokio::time::Instant::now();
        if worker.stop_running.is_cancelled() {
            stopping_since.get_or_insert(now);
        }
        if now >= give_up || stopping_since.is_some_and(|since| now >= since + PERSIST_WHILE_STOPPING) {
            tracing::warn!(task = %task_id, error = %error, "gave up trying to {what}; the maintenance queues its entry again");
            return None;
        }
        tracing::warn!(task = %task_id, error = %error, "could not {what} yet; trying again");
        if stopping_since.is_some() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        } else {
            backoff.wait(&worker.stop_running).await;
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn run_of(task_id: &str, queue: &str, entry_id: &str) -> Run {
        let attempt = Attempt {
            shard: Shard(0),
            task_id: task_id.to_owned(),
            node_id: "n".to_owned(),
            number: 1,
            queues: vec![queue.to_owned()],
            stream: Shard(0).queue(queue),
            entry_id: entry_id.to_owned(),
            traceparent: None,
            owner: "alice".to_owned(),
            tool: "runner_test_tool".to_owned(),
            release_held: false,
            tool_error_fails: false,
            worker: "w".to_owned(),
        };
        let metrics = NodeRun::start(&attempt.stream, &attempt.entry_id, "runner_test_tool");
        Run {
            attempt,
            tool: "runner_test_tool".to_owned(),
            started_at_ms: 0,
            token: CancellationToken::new(),
            reason: Arc::new(AtomicU8::new(StopReason::NotStopped as u8)),
            metrics,
        }
    }

    #[test]
    fn a_cancellation_heard_before_a_run_joins_still_stops_it() {
        let running = RunningRegistry::default();
        assert_eq!(running.stop_task("t1", StopReason::Task), 0, "nothing runs yet");
        let late = run_of("t1", "q", "1-0");
        let (token, reason) = (late.token.clone(), late.reason.clone());
        running.add(late);
        assert!(token.is_cancelled());
        assert_eq!(reason_of(&reason), StopReason::Task);
        let other = run_of("t2", "q", "2-0");
        let token = other.token.clone();
        running.add(other);
        assert!(!token.is_cancelled(), "another task's run goes on");
    }

    #[test]
    fn runs_of_two_queues_with_the_same_entry_id_are_told_apart() {
        // Two queues' streams give the same id to entries added in the same millisecond.
        let running = RunningRegistry::default();
        let quick = run_of("t1", "greet", "1700000000000-0");
        let quick_attempt = quick.attempt.clone();
        running.add(quick);
        let slow = run_of("t2", "slow_compute", "1700000000000-0");
        let slow_token = slow.token.clone();
        running.add(slow);
        assert_eq!(running.held().len(), 2, "both entries are renewed");
        running.remove(&quick_attempt);
        assert_eq!(running.held(), vec![(Shard(0).queue("slow_compute"), "1700000000000-0".to_owned())]);
        assert_eq!(running.stop_task("t2", StopReason::Task), 1, "the slow run still hears its cancellation");
        assert!(slow_token.is_cancelled());
    }
}
