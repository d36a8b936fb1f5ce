//! The consumer loop of one worker process.
//!
//! - Readers ([`read_loop`]) read batches from the queues this worker serves (one reader on a
//!   single server, one per shard on a cluster) and start each batch in one script per shard.
//! - Each started attempt runs as a [`NodeJob`]; it completes with one script that also
//!   acknowledges its entry.
//! - [`renew_leases`] renews the entries of running attempts in one command per stream, and stops
//!   an attempt whose entry another worker took over.
//! - [`listen_for_cancels`] stops running attempts of cancelled tasks (sharded pub/sub), and
//!   re-checks them all once whenever cancel messages may have been lost.
//! - [`upkeep`]: the heartbeat, and the maintenance of every shard on the one worker that holds
//!   its lease, only when something falls due.

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

mod upkeep;

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
/// process to get its SIGTERM, then its SIGKILL (`tools::process`).
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

/// Why a running attempt was told to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum StopReason {
    Running = 0,
    /// Its task was cancelled, failed or expired.
    Task = 1,
    /// The worker shuts down: the node goes back to its queue.
    Shutdown = 2,
    /// Another worker took the node over (this one was presumed lost).
    Lost = 3,
    /// The attempt ran out of time.
    Timeout = 4,
}

/// One running attempt, as the worker tracks it.
struct Run {
    attempt: Attempt,
    tool: String,
    started_at_ms: u64,
    token: CancellationToken,
    reason: Arc<AtomicU8>,
    metrics: NodeRun,
}

impl Run {
    fn stop(&self, reason: StopReason) {
        if reason == StopReason::Task {
            self.metrics.stop_requested();
        }
        // The first reason wins: a node stopped for its task stays stopped for its task.
        let _ = self.reason.compare_exchange(
            StopReason::Running as u8,
            reason as u8,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
        self.token.cancel();
    }
}

fn reason_of(cell: &AtomicU8) -> StopReason {
    match cell.load(Ordering::SeqCst) {
        1 => StopReason::Task,
        2 => StopReason::Shutdown,
        3 => StopReason::Lost,
        4 => StopReason::Timeout,
        _ => StopReason::Running,
    }
}

/// A stream entry: its stream and its id. Ids are unique only within a stream (two queues'
/// streams take the same id for entries added in the same millisecond), so both name a run.
type EntryKey = (String, String);

fn entry_of(attempt: &Attempt) -> EntryKey {
    (attempt.stream.clone(), attempt.entry_id.clone())
}

/// The attempts this worker runs, by entry, and the tasks it heard were cancelled lately: a
/// notice can arrive between a node's start and its run joining the map, and must still stop it.
#[derive(Default, Clone)]
struct Running(Arc<Mutex<HashMap<EntryKey, Run>>>, Arc<Mutex<HashMap<String, std::time::Instant>>>);

/// How long a cancelled task is remembered: far longer than a start takes.
const CANCEL_MEMORY: Duration = Duration::from_secs(60);

impl Running {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<EntryKey, Run>> {
        // Every operation on the map is a single call, so a panic elsewhere cannot leave it
        // half-updated and a poisoned lock is safe to keep using.
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Adds a run; one whose task was cancelled meanwhile is stopped at once.
    fn add(&self, run: Run) {
        let mut runs = self.lock();
        if self.cancelled().contains_key(&run.attempt.task_id) {
            run.stop(StopReason::Task);
        }
        runs.insert(entry_of(&run.attempt), run);
    }

    fn remove(&self, attempt: &Attempt) {
        self.lock().remove(&entry_of(attempt));
    }

    fn cancelled(&self) -> std::sync::MutexGuard<'_, HashMap<String, std::time::Instant>> {
        self.1.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn stop_task(&self, task_id: &str, reason: StopReason) -> usize {
        let runs = self.lock();
        if reason == StopReason::Task {
            // Under the runs' lock, so that a run added after this sees it.
            let mut cancelled = self.cancelled();
            cancelled.retain(|_, at| at.elapsed() < CANCEL_MEMORY);
            cancelled.insert(task_id.to_owned(), std::time::Instant::now());
        }
        let mut stopped = 0;
        for run in runs.values().filter(|r| r.attempt.task_id == task_id) {
            run.stop(reason);
            stopped += 1;
        }
        stopped
    }

    fn stop_entries(&self, entries: &[EntryKey], reason: StopReason) {
        let runs = self.lock();
        for entry in entries {
            if let Some(run) = runs.get(entry) {
                run.stop(reason);
            }
        }
    }

    fn held_set(&self) -> HashSet<EntryKey> {
        self.lock().keys().cloned().collect()
    }

    fn held(&self) -> Vec<EntryKey> {
        self.lock().keys().cloned().collect()
    }

    fn tasks(&self) -> Vec<String> {
        let mut tasks: Vec<String> = self.lock().values().map(|r| r.attempt.task_id.clone()).collect();
        tasks.sort();
        tasks.dedup();
        tasks
    }

    fn report(&self) -> Vec<RunningNode> {
        self.lock()
            .values()
            .map(|r| RunningNode {
                task_id: r.attempt.task_id.clone(),
                node_id: r.attempt.node_id.clone(),
                tool: r.tool.clone(),
                attempt: r.attempt.attempt,
                started_at_ms: r.started_at_ms,
            })
            .collect()
    }
}

/// What every part of a running worker shares.
#[derive(Clone)]
struct Worker {
    store: Store,
    registry: Arc<ToolRegistry>,
    options: Arc<WorkerOptions>,
    queues: Arc<Vec<String>>,
    running: Running,
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

/// Slots taken per principal on this worker.
#[derive(Default, Clone)]
struct OwnerSlots(Arc<Mutex<HashMap<String, usize>>>);

/// One slot a principal's node takes; given back when dropped.
struct OwnerSlot {
    slots: OwnerSlots,
    owner: String,
}

impl Drop for OwnerSlot {
    fn drop(&mut self) {
        let mut slots = self.slots.lock();
        if let Some(count) = slots.get_mut(&self.owner) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                slots.remove(&self.owner);
            }
        }
    }
}

impl OwnerSlots {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        // Each change is one call on the map: a poisoned lock holds nothing half-done.
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn take(&self, owner: &str) -> OwnerSlot {
        *self.lock().entry(owner.to_owned()).or_default() += 1;
        OwnerSlot { slots: self.clone(), owner: owner.to_owned() }
    }

    /// How many more slots `owner` may take under a share of `per_principal` (any number without).
    fn room(&self, owner: &str, per_principal: Option<usize>) -> usize {
        match per_principal {
            None => usize::MAX,
            Some(share) => share.saturating_sub(self.lock().get(owner).copied().unwrap_or(0)),
        }
    }

    /// How many more slots each principal may take, under a share of `per_principal` slots.
    fn shares(&self, per_principal: Option<usize>) -> SlotShares {
        let Some(share) = per_principal else { return SlotShares::unlimited() };
        let room = self
            .lock()
            .iter()
            .map(|(owner, taken)| (owner.clone(), share.saturating_sub(*taken) as u64))
            .collect();
        SlotShares { room, default: Some(share as u64), ..SlotShares::default() }
    }
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
        running: Running::default(),
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

/// How long an entry read beyond this worker's free slots may wait in its buffer for a slot
/// before it goes back to its queue for another worker.
const PREFETCH_FOR: Duration = Duration::from_millis(250);

/// One reader: takes free slots, reads a batch for them, starts it, runs what started.
///
/// One `XREADGROUP` returns up to COUNT entries *per stream*, so a read across shards and queues
/// may bring more entries than free slots. Those wait in a small buffer and start as slots free
/// up; one that waits longer than [`PREFETCH_FOR`] (a worker busy with long nodes) goes back to
/// its queue, so that an idle worker takes it.
///
/// A node whose principal already has its share of this worker's slots waits with the worker
/// for as long ([`Waiting`]): a short node of that principal's frees a slot soon, and then it
/// starts with no more Redis work than any other. Once its time is up it is set aside in its
/// queue's held list, so that the entries behind it, other principals' work, are read.
async fn read_loop(
    worker: Worker,
    mut reader: WorkReader,
    semaphore: Arc<Semaphore>,
    jobs: TaskTracker,
    shutdown: CancellationToken,
) {
    let mut backoff = Backoff::default();
    let mut buffer: std::collections::VecDeque<(WorkItem, tokio::time::Instant)> = Default::default();
    let mut waiting = Waiting::default();
    loop {
        let first = tokio::select! {
            // Shutdown first: with a free slot also ready, an unbiased choice would read again
            // (and block) as often as not.
            biased;
            () = shutdown.cancelled() => None,
            permit = semaphore.clone().acquire_owned() => Some(match permit {
                Ok(p) => p,
                Err(_) => return,
            }),
            // Buffered entries must not outwait their time while every slot is busy.
            () = tokio::time::sleep(PREFETCH_FOR), if !buffer.is_empty() => {
                hand_back_stale(&worker, &mut buffer).await;
                continue;
            }
        };
        let Some(first) = first else {
            let mut rest: Vec<WorkItem> = buffer.drain(..).map(|(item, _)| item).collect();
            rest.extend(waiting.drain());
            hand_back(&worker, rest).await;
            return;
        };
        let mut permits = vec![first];
        while let Ok(p) = semaphore.clone().try_acquire_owned() {
            permits.push(p);
        }
        // Listening before the slots are counted: a job that ends meanwhile still wakes this reader.
        let freed = worker.slot_freed.notified();
        tokio::pin!(freed);
        freed.as_mut().enable();
        hand_back_stale(&worker, &mut buffer).await;
        // Waiting nodes whose principal has a free slot now, or whose time is up, go first.
        let share = worker.options.slots_per_principal();
        let (mut items, set_aside) = waiting.ready(permits.len(), |owner| worker.owners.room(owner, share));
        if items.len() < permits.len() {
            if !buffer.is_empty() {
                let take = (permits.len() - items.len()).min(buffer.len());
                items.extend(buffer.drain(..take).map(|(item, _)| item));
            } else if waiting.len() < worker.options.concurrency {
                // With nodes in hand, read only what is there; while nodes wait, block no longer
                // than their time.
                let block = if !items.is_empty() {
                    Duration::ZERO
                } else if waiting.is_empty() {
                    worker.options.block
                } else {
                    PREFETCH_FOR
                };
                let count = permits.len() - items.len();
                match reader.read(&worker.store, &worker.options.name, count, block).await {
                    Ok((read, own_pending)) => {
                        backoff.reset();
                        if own_pending {
                            // A new connection: entries Redis counts as this worker's that it does
                            // not run or hold were delivered by a read whose reply was lost.
                            let mut known = worker.running.held_set();
                            known.extend(buffer.iter().map(|(i, _)| (i.stream.clone(), i.entry_id.clone())));
                            known.extend(waiting.entries());
                            known.extend(items.iter().map(|i| (i.stream.clone(), i.entry_id.clone())));
                            let lost: Vec<WorkItem> = read
                                .into_iter()
                                .filter(|i| !known.contains(&(i.stream.clone(), i.entry_id.clone())))
                                .collect();
                            if !lost.is_empty() {
                                tracing::info!(
                                    entries = lost.len(),
                                    "found entries delivered to this worker by a read whose reply was lost"
                                );
                            }
                            items.extend(lost);
                        } else {
                            items.extend(read);
                        }
                    }
                    Err(e) => {
                        if e.to_string().contains("NOGROUP") {
                            // Redis lost its data (restarted without persistence): set the groups up again.
                            let _ = worker.store.ensure_groups(&worker.queues).await;
                        } else {
                            tracing::warn!(error = %e, "reading work failed; reconnecting");
                            backoff.wait(&shutdown).await;
                        }
                        if items.is_empty() {
                            continue;
                        }
                    }
                }
            }
        }
        if items.is_empty() {
            // Every free slot is another principal's share, and the nodes read belong to
            // principals that have theirs: wait for one of their slots, or for their time.
            drop(permits);
            tokio::select! {
                () = freed => {}
                () = tokio::time::sleep_until(waiting.next_deadline()) => {}
                () = shutdown.cancelled() => {}
            }
            continue;
        }
        // After shutdown nothing read is run: it goes back to its queue.
        if shutdown.is_cancelled() {
            let mut rest = items;
            rest.extend(buffer.drain(..).map(|(item, _)| item));
            rest.extend(waiting.drain());
            hand_back(&worker, rest).await;
            return;
        }
        // Nodes beyond the free slots wait in the buffer; finalize and empty entries need none.
        let mut now_items = Vec::with_capacity(items.len());
        let mut nodes = 0;
        let read_at = tokio::time::Instant::now();
        for item in items {
            let needs_slot = !item.task_id.is_empty() && item.node_id != keys::FINALIZE_NODE;
            if needs_slot && nodes >= permits.len() {
                buffer.push_back((item, read_at));
            } else {
                nodes += usize::from(needs_slot);
                now_items.push(item);
            }
        }
        let dispatched = dispatch(&worker, now_items, permits, &jobs, set_aside).await;
        if dispatched.set_aside > 0 {
            tracing::debug!(
                set_aside = dispatched.set_aside,
                started = dispatched.started,
                "set aside nodes of principals at their share"
            );
        }
        waiting.extend(dispatched.capped);
    }
}

/// Nodes read whose principal had its share of this worker's slots, waiting with the worker (their
/// entries pending, unchanged) for a slot of that principal's, for up to [`PREFETCH_FOR`] from
/// when they were first read.
#[derive(Default)]
struct Waiting {
    nodes: std::collections::VecDeque<(WorkItem, String, tokio::time::Instant)>,
    /// When each entry was first read, across tries.
    since: HashMap<EntryKey, tokio::time::Instant>,
}

impl Waiting {
    fn len(&self) -> usize {
        self.nodes.len()
    }

    fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    fn extend(&mut self, capped: Vec<(WorkItem, String)>) {
        let now = tokio::time::Instant::now();
        for (item, owner) in capped {
            let since = *self.since.entry((item.stream.clone(), item.entry_id.clone())).or_insert(now);
            self.nodes.push_back((item, owner, since));
        }
    }

    /// Up to `slots` nodes to try now: as many of each owner's as its `room` (the slots it may
    /// still take), and those whose time is up (the second set: to be set aside if their owner
    /// has no room yet).
    fn ready(&mut self, slots: usize, room: impl Fn(&str) -> usize) -> (Vec<WorkItem>, HashSet<EntryKey>) {
        let mut ready = Vec::new();
        let mut set_aside = HashSet::new();
        let mut taken: HashMap<String, usize> = HashMap::new();
        let mut kept = std::collections::VecDeque::with_capacity(self.nodes.len());
        for (item, owner, since) in self.nodes.drain(..) {
            let due = since.elapsed() >= PREFETCH_FOR;
            let fits = {
                let taken = taken.entry(owner.clone()).or_default();
                let fits = *taken < room(&owner);
                if fits {
                    *taken += 1;
                }
                fits
            };
            if ready.len() < slots && (due || fits) {
                let key = (item.stream.clone(), item.entry_id.clone());
                self.since.remove(&key);
                if due {
                    set_aside.insert(key);
                }
                ready.push(item);
            } else {
                kept.push_back((item, owner, since));
            }
        }
        self.nodes = kept;
        (ready, set_aside)
    }

    /// When the oldest waiting node's time is up (or soon, when none waits).
    fn next_deadline(&self) -> tokio::time::Instant {
        let oldest = self.nodes.iter().map(|(_, _, since)| *since).min();
        oldest.unwrap_or_else(tokio::time::Instant::now) + PREFETCH_FOR
    }

    fn entries(&self) -> impl Iterator<Item = EntryKey> + '_ {
        self.nodes.iter().map(|(item, _, _)| (item.stream.clone(), item.entry_id.clone()))
    }

    fn drain(&mut self) -> Vec<WorkItem> {
        self.since.clear();
        self.nodes.drain(..).map(|(item, _, _)| item).collect()
    }
}

/// Hands back the buffered entries that waited longer than [`PREFETCH_FOR`].
async fn hand_back_stale(
    worker: &Worker,
    buffer: &mut std::collections::VecDeque<(WorkItem, tokio::time::Instant)>,
) {
    let mut stale = Vec::new();
    while buffer.front().is_some_and(|(_, at)| at.elapsed() >= PREFETCH_FOR) {
        if let Some((item, _)) = buffer.pop_front() {
            stale.push(item);
        }
    }
    hand_back(worker, stale).await;
}

/// Puts entries this worker read but will not run back on their queues (one script per shard).
async fn hand_back(worker: &Worker, items: Vec<WorkItem>) {
    let mut by_shard: HashMap<Shard, Vec<WorkItem>> = HashMap::new();
    // Only node entries go back; a finalize entry left pending is taken over after its lease.
    for item in items.into_iter().filter(|i| !i.task_id.is_empty() && i.node_id != keys::FINALIZE_NODE) {
        by_shard.entry(item.shard).or_default().push(item);
    }
    for (shard, items) in by_shard {
        let none = SlotShares::unlimited();
        if let Err(e) = worker.store.start_batch(shard, &items, 0, &worker.options.name, &none).await {
            // They stay pending with this worker, unrenewed: maintenance queues them again later.
            tracing::warn!(entries = items.len(), error = %e, "could not hand entries back");
        }
    }
}

/// What a dispatch did with the nodes it was given.
#[derive(Debug, Default)]
struct Dispatched {
    started: usize,
    set_aside: usize,
    /// Nodes whose principal has its share: left as they were, with the principal.
    capped: Vec<(WorkItem, String)>,
}

/// Starts what was read: finalize entries at once, nodes up to the free slots and each
/// principal's share of them (one script per shard); a node whose principal has its share is set
/// aside, the rest handed back to their queue.
async fn dispatch(
    worker: &Worker,
    items: Vec<WorkItem>,
    mut permits: Vec<OwnedSemaphorePermit>,
    jobs: &TaskTracker,
    set_aside: HashSet<EntryKey>,
) -> Dispatched {
    let mut dispatched = Dispatched::default();
    let mut by_shard: HashMap<Shard, (Vec<WorkItem>, usize)> = HashMap::new();
    for item in items {
        if item.task_id.is_empty() {
            if let Err(e) = worker.store.drop_entry(&item).await {
                tracing::warn!(entry = %item.entry_id, error = %e, "could not drop an empty entry");
            }
        } else if item.node_id == keys::FINALIZE_NODE {
            let store = worker.store.clone();
            jobs.spawn(async move {
                if let Err(e) = crate::dag::finalize(&store, &item).await {
                    // The entry stays pending; maintenance queues it again after the lease.
                    tracing::warn!(task = %item.task_id, error = %e, "could not finalize the task");
                }
            });
        } else {
            let batch = by_shard.entry(item.shard).or_default();
            batch.0.push(item);
        }
    }
    // Free slots go to the entries in the order they came, shard by shard.
    let mut free = permits.len();
    for (items, run) in by_shard.values_mut() {
        *run = free.min(items.len());
        free -= *run;
    }
    let mut shares = worker.owners.shares(worker.options.slots_per_principal());
    shares.set_aside = set_aside;
    let shares = &shares;
    let starts = futures::future::join_all(by_shard.into_iter().map(|(shard, (items, run))| async move {
        let begun = SystemTime::now();
        let outcomes = worker.store.start_batch(shard, &items, run, &worker.options.name, shares).await;
        (items, outcomes, (begun, SystemTime::now()))
    }))
    .await;
    for (items, outcomes, round_trip) in starts {
        let outcomes = match outcomes {
            Ok(outcomes) => outcomes,
            Err(e) => {
                // The entries stay pending with this worker, unrenewed: maintenance queues them
                // again once their lease runs out.
                tracing::warn!(entries = items.len(), error = %e, "could not start a batch");
                continue;
            }
        };
        for (item, outcome) in items.into_iter().zip(outcomes) {
            match outcome {
                StartOutcome::Run(start) => {
                    let Some(permit) = permits.pop() else { continue };
                    dispatched.started += 1;
                    let attempt = &start.attempt;
                    let slot = worker.owners.take(&attempt.owner);
                    let freed = worker.slot_freed.clone();
                    let span = node_span(
                        attempt,
                        &start.tool,
                        &worker.options.name,
                        start.losses,
                        !start.answers.is_empty(),
                    );
                    if conveyor_shared::telemetry::exporting() {
                        context::finished_span(
                            &span.context(),
                            "EVALSHA start_nodes".into(),
                            round_trip.0,
                            round_trip.1,
                            context::redis_attributes("EVALSHA", "start_nodes"),
                        );
                    }
                    let job = NodeJob {
                        metrics: NodeRun::start(&attempt.stream, &attempt.entry_id, &start.tool),
                        span,
                        worker: worker.clone(),
                        start: *start,
                    };
                    jobs.spawn(async move {
                        job.run().await;
                        drop(slot);
                        drop(permit);
                        freed.notify_waiters();
                    });
                }
                StartOutcome::Capped { owner } => dispatched.capped.push((item, owner)),
                StartOutcome::Deferred => dispatched.set_aside += 1,
                StartOutcome::HandedBack => {}
                StartOutcome::Skip(reason) => {
                    tracing::debug!(task = %item.task_id, node = %item.node_id, %reason, "skipped an entry");
                }
            }
        }
    }
    dispatched
}

/// Renews the leases of the entries this worker runs, three times per lease; stops the runs whose
/// entry is gone (another worker took the node over).
async fn renew_leases(worker: Worker) {
    loop {
        tokio::time::sleep(worker.options.lease / 3).await;
        let held = worker.running.held();
        if held.is_empty() {
            continue;
        }
        match worker.store.renew_leases(&worker.options.name, &held).await {
            Ok(lost) if !lost.is_empty() => {
                tracing::warn!(entries = ?lost, "lost running nodes to another worker; stopping them");
                worker.running.stop_entries(&lost, StopReason::Lost);
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, held = held.len(), "could not renew leases"),
        }
    }
}

/// Stops running nodes of cancelled tasks as notices arrive; after a possible loss of notices,
/// checks every running task's status once.
async fn listen_for_cancels(worker: Worker, shutdown: CancellationToken) {
    let hub = loop {
        match worker.store.events().await {
            Ok(hub) => break hub,
            Err(e) => {
                tracing::warn!(error = %e, "cannot subscribe to cancellations; retrying");
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                    () = shutdown.cancelled() => return,
                }
            }
        }
    };
    let mut notices = hub.cancel_notices();
    // Notices sent before the listener was registered: look once.
    recheck_running(&worker).await;
    loop {
        tokio::select! {
            notice = notices.recv() => match notice {
                Some(CancelNotice::Task(task_id)) => {
                    let stopped = worker.running.stop_task(&task_id, StopReason::Task);
                    if stopped > 0 {
                        tracing::info!(task = %task_id, nodes = stopped, "cancelling running nodes");
                    }
                }
                Some(CancelNotice::Resync) => {
                    worker.wakes.all();
                    recheck_running(&worker).await;
                }
                Some(CancelNotice::Maintain(shard)) => worker.wakes.shard(shard),
                None => return,
            },
            () = shutdown.cancelled() => return,
        }
    }
}

async fn recheck_running(worker: &Worker) {
    for task_id in worker.running.tasks() {
        match worker.store.get_task(&task_id).await {
            Ok(Some(task)) if !task.status.is_terminal() => {}
            Ok(_) => {
                worker.running.stop_task(&task_id, StopReason::Task);
            }
            Err(_) => {} // Redis is away; the next resync looks again.
        }
    }
}

/// The span of one attempt of a node: a child of its task's span, on whatever worker runs it.
fn node_span(attempt: &Attempt, tool: &str, worker: &str, losses: u32, resumed: bool) -> tracing::Span {
    let reason = match (attempt.attempt, resumed, losses) {
        (1, false, _) => "first",
        (_, true, _) => "resumed",
        (_, false, 0) => "retry",
        _ => "reclaimed",
    };
    let queue = attempt.stream.rsplit_once(":q:").map_or("", |(_, queue)| queue);
    let span = tracing::info_span!(
        "node",
        otel.name = %format!("node {tool}"),
        otel.kind = "consumer",
        otel.status_code = tracing::field::Empty,
        otel.status_description = tracing::field::Empty,
        { attr::TASK_ID } = %attempt.task_id,
        { attr::NODE_ID } = %attempt.node_id,
        { attr::TOOL } = %tool,
        { attr::ATTEMPT } = attempt.attempt,
        { attr::QUEUE } = %queue,
        { attr::WORKER } = %worker,
        { attr::RUN_REASON } = reason,
        conveyor.node.losses = losses,
        { attr::OUTCOME } = tracing::field::Empty,
    );
    if let Some(trace) = attempt.traceparent.as_deref().and_then(TaskTrace::decode) {
        trace.adopt_node_span(&span, &attempt.node_id, attempt.attempt);
    }
    span
}

/// The W3C `traceparent` of a span, for a tool to hand on (to a child process, a remote call).
fn w3c_traceparent(span: &tracing::Span) -> String {
    use opentelemetry::trace::TraceContextExt;
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    format!("00-{}-{}-{:02x}", sc.trace_id(), sc.span_id(), sc.trace_flags().to_u8())
}

/// One started attempt, from the tool call to its completion.
struct NodeJob {
    /// The attempt's span, entered while it runs.
    span: tracing::Span,
    /// Counts the attempt as running until the job ends, and records how it ended.
    metrics: NodeRun,
    worker: Worker,
    /// The node as `start_nodes` handed it over: its attempt, arguments and the call record.
    start: NodeStart,
}

impl NodeJob {
    async fn run(self) {
        let span = self.span.clone();
        self.run_in_span().instrument(span).await
    }

    async fn run_in_span(self) {
        let store = &self.worker.store;
        let attempt = &self.start.attempt;
        let max_losses = self.worker.options.max_losses;
        if max_losses > 0 && self.start.losses >= max_losses {
            // This node took its worker down too often: it is not run again.
            tracing::warn!(task = %attempt.task_id, node = %attempt.node_id, losses = self.start.losses, "node lost its worker too often; failing it");
            let error = ToolOutcome::Error(RpcError {
                code: -32603,
                message: format!("the node lost its worker {} times; it is not run again", self.start.losses),
                data: None,
            });
            self.settle(Some(error), true).await;
            return;
        }
        let token = self.worker.stop_running.child_token();
        let reason = Arc::new(AtomicU8::new(StopReason::Running as u8));
        self.worker.running.add(Run {
            attempt: attempt.clone(),
            tool: self.start.tool.clone(),
            started_at_ms: now_ms(),
            token: token.clone(),
            reason: reason.clone(),
            metrics: self.metrics.clone(),
        });
        // Arguments that cannot be resolved or that break the tool's schema fail the node for good:
        // another attempt would meet the same upstream values.
        let mut final_failure = false;
        let outcome = match self.arguments().await {
            Err(outcome) => {
                final_failure = true;
                outcome
            }
            Ok(arguments) => {
                let ctx = ToolContext {
                    task_id: attempt.task_id.clone(),
                    node_id: attempt.node_id.clone(),
                    attempt: attempt.attempt,
                    arguments,
                    cancel: token.clone(),
                    traceparent: Some(w3c_traceparent(&self.span)),
                    store: store.clone(),
                    lease: attempt.clone(),
                    answers: self.start.answers.clone(),
                    state: self.start.state.clone(),
                    call: self.start.call.clone(),
                };
                let call = self.call(ctx);
                tokio::pin!(call);
                match self.start.timeout {
                    None => call.await,
                    Some(limit) => tokio::select! {
                        outcome = &mut call => outcome,
                        () = tokio::time::sleep(limit) => {
                            // The tool is told to stop, and the slot stays held until it has (see
                            // `call`); the attempt counts as failed.
                            let _ = reason.compare_exchange(
                                0,
                                StopReason::Timeout as u8,
                                Ordering::SeqCst,
                                Ordering::SeqCst,
                            );
                            token.cancel();
                            let _ = call.await;
                            ToolOutcome::Error(RpcError {
                                code: -32001,
                                message: format!("timed out after {} ms", limit.as_millis()),
                                data: None,
                            })
                        }
                    },
                }
            }
        };
        // Told to stop before it returned: what it returned may be the stop's doing, not its work.
        let interrupted = token.is_cancelled();
        self.worker.running.remove(attempt);
        if self.worker.stop_running.is_cancelled() {
            let _ =
                reason.compare_exchange(0, StopReason::Shutdown as u8, Ordering::SeqCst, Ordering::SeqCst);
        }
        match reason_of(&reason) {
            StopReason::Lost => {
                // Another worker runs the node now; this attempt's completion would be refused.
                self.finish(NodeOutcome::Lost, Some("another worker took the node over"));
                tracing::info!(task = %attempt.task_id, node = %attempt.node_id, "stopped a node another worker took over");
            }
            StopReason::Task => {
                tracing::info!(task = %attempt.task_id, node = %attempt.node_id, "node stopped: its task was cancelled");
                self.settle(None, false).await
            }
            // A node that finished before the stop reached it keeps its outcome below: finished
            // work is recorded, not run again by another worker.
            StopReason::Shutdown if interrupted => {
                if cancelled_by_task(store, &attempt.task_id).await {
                    self.settle(None, false).await
                } else {
                    self.hand_back().await
                }
            }
            StopReason::Running | StopReason::Timeout | StopReason::Shutdown => match outcome {
                ToolOutcome::Plan(plan) => match crate::dag::check_plan(store, &plan).await {
                    Ok(()) => self.expand(&plan).await,
                    Err(invalid) => self.settle(Some(invalid), false).await,
                },
                ToolOutcome::InputRequired(input) => match self.askable(&input) {
                    Ok(()) => self.park(&input).await,
                    Err(refused) => self.refuse(refused).await,
                },
                outcome => self.settle(Some(outcome), final_failure).await,
            },
        }
    }

    /// The arguments the tool runs with. A node of a graph takes its upstream values in (within
    /// the worker's byte limits) and is checked against its tool's input schema here: the gateway
    /// could check only what the client sent, not what upstream nodes produced.
    async fn arguments(&self) -> Result<serde_json::Value, ToolOutcome> {
        if !self.start.in_graph() {
            return Ok(self.start.arguments().clone());
        }
        let limits = &self.worker.options.node_limits;
        let resolved = crate::dag::resolve_arguments(
            &self.worker.store,
            &self.start.attempt.task_id,
            self.start.arguments(),
            &limits.resolve(),
        )
        .await?;
        self.worker.registry.check_arguments(&self.start.tool, &resolved).map_err(|message| {
            ToolOutcome::Error(RpcError {
                code: -32602,
                message: format!("Invalid arguments for {}: {message}", offer_name(&self.start.tool)),
                data: None,
            })
        })?;
        Ok(resolved)
    }

    /// Records how the attempt ended, once: on its span (a failure also sets the span's status)
    /// and in the worker's metrics, in the same words.
    fn finish(&self, outcome: NodeOutcome, error: Option<&str>) {
        self.span.record(attr::OUTCOME, outcome.as_str());
        if let Some(error) = error {
            self.span.record("otel.status_code", "ERROR");
            self.span.record("otel.status_description", error);
        }
        self.metrics.finish(outcome);
    }

    /// Runs one attempt of a tool or a built-in node. A panicking tool must not take the worker
    /// down: it fails its attempt instead.
    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        if let Some(outcome) = crate::dag::builtin(&self.start.tool, &ctx) {
            return outcome;
        }
        match self.worker.registry.get(&self.start.tool) {
            Some(tool) => {
                let stop = ctx.cancel.clone();
                let mut running = tokio::spawn(tool.call(ctx));
                let joined = tokio::select! {
                    joined = &mut running => joined,
                    () = stop.cancelled() => {
                        // A tool told to stop (cancel, timeout, takeover, shutdown) has a grace
                        // period to clean up (its child processes); one that ignores it is aborted,
                        // so that it never runs beside its retry or outside the concurrency limit.
                        match tokio::time::timeout(TOOL_STOP_GRACE, &mut running).await {
                            Ok(joined) => joined,
                            Err(_) => {
                                running.abort();
                                tracing::warn!(tool = %self.start.tool, grace_ms = TOOL_STOP_GRACE.as_millis() as u64, "the tool did not stop when told to; aborted it");
                                return ToolOutcome::Error(RpcError {
                                    code: -32800,
                                    message: format!("tool `{}` did not stop when told to and was aborted", self.start.tool),
                                    data: None,
                                });
                            }
                        }
                    }
                };
                joined.unwrap_or_else(|e| {
                    ToolOutcome::Error(RpcError {
                        code: -32603,
                        message: format!("tool `{}` crashed: {e}", self.start.tool),
                        data: None,
                    })
                })
            }
            None => ToolOutcome::Error(RpcError {
                code: -32601,
                message: format!(
                    "tool `{}` is not registered on worker {}",
                    self.start.tool, self.worker.options.name
                ),
                data: None,
            }),
        }
    }

    /// Records the attempt's outcome (`None`: cancelled). Finished work is not thrown away because
    /// Redis is briefly away: the completion is tried again until Redis takes it (the lease stays
    /// held meanwhile); a repeat after a lost reply is refused as stale and changes nothing.
    async fn settle(&self, outcome: Option<ToolOutcome>, final_failure: bool) {
        let attempt = &self.start.attempt;
        let store = &self.worker.store;
        let error = match &outcome {
            Some(ToolOutcome::Error(error)) => Some(error.message.as_str()),
            _ => None,
        };
        self.finish(NodeOutcome::of(outcome.as_ref()), error);
        let max_output_bytes = self.worker.options.node_limits.max_output_bytes;
        let completed = self
            .persist("outcome", || store.complete(attempt, outcome.as_ref(), final_failure, max_output_bytes))
            .await;
        match completed {
            Some(CompleteOutcome::Retry { delay_ms }) => {
                metrics::node_retried(&self.start.tool);
                tracing::info!(task = %attempt.task_id, node = %attempt.node_id, attempt = attempt.attempt, delay_ms, "attempt failed; retry scheduled");
            }
            Some(CompleteOutcome::Stale) => {
                tracing::info!(task = %attempt.task_id, attempt = attempt.attempt, "completion refused: attempt is stale");
            }
            Some(done) => {
                tracing::debug!(task = %attempt.task_id, node = %attempt.node_id, outcome = ?done, "node completed");
            }
            None => {}
        }
    }

    /// Runs a transition of this attempt until Redis takes it (the lease stays held meanwhile);
    /// `None` when the worker shuts down first, leaving the entry pending for another worker. A
    /// repeat after a lost reply is refused as stale and changes nothing.
    async fn persist<T, F, Fut>(&self, what: &str, mut op: F) -> Option<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>>,
    {
        let mut backoff = Backoff::default();
        let mut stopping_since: Option<tokio::time::Instant> = None;
        loop {
            match op().await {
                Ok(done) => return Some(done),
                Err(e) => {
                    tracing::warn!(task = %self.start.attempt.task_id, error = %e, "could not record the node's {what} yet; retrying");
                    // A stopping worker keeps trying for a while: work it finished and fails to
                    // record would be run again by another worker after its lease.
                    if self.worker.stop_running.is_cancelled() {
                        let since = *stopping_since.get_or_insert_with(tokio::time::Instant::now);
                        if since.elapsed() >= PERSIST_WHILE_STOPPING {
                            tracing::warn!(task = %self.start.attempt.task_id, "gave up recording the node's {what}: the worker stops");
                            return None;
                        }
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    } else {
                        backoff.wait(&self.worker.stop_running).await;
                    }
                }
            }
        }
    }

    /// Checks a request for input before the node parks: something to ask, and nothing the client
    /// did not declare it can answer (the protocol's missing-capability error, `-32021`).
    fn askable(&self, input: &InputRequired) -> Result<(), RpcError> {
        let refuse = |code: i32, message: String, data: Option<serde_json::Value>| {
            Err(RpcError { code, message, data })
        };
        if input.requests.is_empty() {
            return refuse(
                -32603,
                format!("tool `{}` asked for input but named no request", self.start.tool),
                None,
            );
        }
        for (key, request) in &input.requests {
            let Some(needed) = input::required_capability(request) else {
                return refuse(
                    -32603,
                    format!(
                        "{} asked for input `{key}` with a method the client cannot answer: {}",
                        offer_name(&self.start.tool),
                        request.get("method").unwrap_or(&serde_json::Value::Null)
                    ),
                    None,
                );
            };
            if !input::client_supports(&self.start.call.client_capabilities, request) {
                return refuse(
                    MISSING_CLIENT_CAPABILITY,
                    format!(
                        "{} needs to ask the client ({key}: {}), but the client did not declare the capability {needed}",
                        offer_name(&self.start.tool),
                        request.get("method").and_then(serde_json::Value::as_str).unwrap_or_default()
                    ),
                    Some(serde_json::json!({"requiredCapabilities": needed})),
                );
            }
        }
        Ok(())
    }

    /// Fails the attempt with a refusal that is the client's to fix (no retry, no dead letter).
    async fn refuse(&self, error: RpcError) {
        self.finish(NodeOutcome::Failed, Some(&error.message));
        let attempt = &self.start.attempt;
        let store = &self.worker.store;
        if let Some(done) = self.persist("refusal", || store.complete_refused(attempt, error.clone())).await {
            tracing::debug!(task = %attempt.task_id, node = %attempt.node_id, outcome = ?done, "refused a request for input");
        }
    }

    /// Parks the node until the client answers; like a completion, tried again while Redis is away.
    async fn park(&self, input: &InputRequired) {
        self.finish(NodeOutcome::Parked, None);
        let attempt = &self.start.attempt;
        let store = &self.worker.store;
        match self.persist("request for input", || store.park(attempt, input)).await {
            Some(ParkOutcome::Parked) => {
                tracing::debug!(task = %attempt.task_id, node = %attempt.node_id, "node parked for input");
            }
            Some(ParkOutcome::TaskAlreadyTerminal) => {
                tracing::info!(task = %attempt.task_id, "the task ended while its node asked for input");
            }
            Some(ParkOutcome::Stale) => {
                tracing::info!(task = %attempt.task_id, attempt = attempt.attempt, "park refused: attempt is stale");
            }
            None => {}
        }
    }

    /// Hands the node back so that another worker starts it at once.
    async fn hand_back(&self) {
        self.finish(NodeOutcome::HandedBack, None);
        let attempt = &self.start.attempt;
        match self.worker.store.release(attempt).await {
            Ok(true) => {
                tracing::info!(task = %attempt.task_id, node = %attempt.node_id, "handed the node back to its queue")
            }
            Ok(false) => {
                tracing::info!(task = %attempt.task_id, "node already settled elsewhere; nothing to hand back")
            }
            Err(e) => {
                tracing::warn!(task = %attempt.task_id, error = %e, "could not hand the node back; it stays pending")
            }
        }
    }

    /// Adds a planning node's graph to its task.
    async fn expand(&self, plan: &conveyor_shared::dag::DagSpec) {
        let store = &self.worker.store;
        let attempt = &self.start.attempt;
        let queues = match store.tool_queues().await {
            Ok(queues) => queues,
            Err(e) => {
                tracing::warn!(task = %attempt.task_id, error = %e, "cannot read tool queues; the plan stays pending");
                return;
            }
        };
        match store.expand_plan(attempt, plan, &queues).await {
            Ok(ExpandOutcome::Expanded(n)) => {
                self.finish(NodeOutcome::Planned, None);
                tracing::info!(task = %attempt.task_id, nodes = n, "expanded a planned graph")
            }
            Ok(ExpandOutcome::Refused(reason)) => {
                // The plan cannot join this task: the node fails with the reason.
                let error = ToolOutcome::Error(RpcError { code: -32602, message: reason, data: None });
                self.settle(Some(error), false).await;
            }
            Ok(ExpandOutcome::Stale) => {
                tracing::info!(task = %attempt.task_id, "plan refused: attempt is stale")
            }
            Ok(ExpandOutcome::TaskAlreadyTerminal) => {
                // The task ended meanwhile: record the node as cancelled so its entry is done with.
                self.settle(None, false).await;
            }
            Err(e) => {
                tracing::warn!(task = %attempt.task_id, error = %e, "could not expand a plan; it stays pending")
            }
        }
    }
}

async fn cancelled_by_task(store: &Store, task_id: &str) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn run_of(task_id: &str, queue: &str, entry_id: &str) -> Run {
        let attempt = Attempt {
            shard: Shard(0),
            task_id: task_id.to_owned(),
            node_id: "n".to_owned(),
            attempt: 1,
            queues: vec![queue.to_owned()],
            stream: Shard(0).queue(queue),
            entry_id: entry_id.to_owned(),
            traceparent: None,
            owner: "alice".to_owned(),
            release_held: false,
            tool_error_fails: false,
        };
        let metrics = NodeRun::start(&attempt.stream, &attempt.entry_id, "runner_test_tool");
        Run {
            attempt,
            tool: "runner_test_tool".to_owned(),
            started_at_ms: 0,
            token: CancellationToken::new(),
            reason: Arc::new(AtomicU8::new(StopReason::Running as u8)),
            metrics,
        }
    }

    #[test]
    fn a_cancellation_heard_before_a_run_joins_still_stops_it() {
        let running = Running::default();
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
        let running = Running::default();
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
