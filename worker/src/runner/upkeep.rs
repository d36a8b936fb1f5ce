//! A worker's upkeep: its heartbeat, and, on the one worker that holds the deployment's
//! maintenance lease, the maintenance of every shard.
//!
//! Nothing here runs on a timer per shard or per stream. A worker sends one heartbeat script every
//! [`heartbeat_every`]; the holder of the maintenance lease (taken and renewed by those heartbeats,
//! and given up by a worker that stops) looks at a shard only when something in it falls due: the
//! next retry or expiry, which `maintain.lua` plans and which scripts that schedule something
//! sooner announce on the shard's cancel channel ([`Wakes`]); while the shard has live tasks, a
//! look at least every lease for entries that nobody renewed for a lease, whoever holds them (one
//! script per shard); and a lost worker's entries when that worker's liveness (its last heartbeat
//! plus its own lease) has run out. An idle deployment costs its heartbeats and its blocking reads,
//! however many shards, queues and tools it has.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::Duration;

use conveyor_shared::keys::{self, Shard};
use conveyor_shared::metrics;
use conveyor_shared::model::WorkItem;
use conveyor_shared::store::{Heartbeat, IdleEntry, MaintainOutcome, ReclaimOutcome, WorkerRecord};
use conveyor_shared::telemetry::context::TaskTrace;
use conveyor_shared::{Store, StoreError};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Worker;

/// How long a shard's maintenance pauses after an item it could not handle.
const MAINTAIN_AFTER_FAILURE: Duration = Duration::from_secs(1);
/// While nodes are set aside in a shard, its maintenance puts a few back at least this often.
const SET_ASIDE_EVERY: Duration = conveyor_shared::store::RELEASE_SET_ASIDE_AFTER;
/// Most due items handled per shard per look.
const MAINTAIN_BATCH: usize = 256;
/// Entries taken over per stream per look (of a lost worker's, or of any holder's).
const TAKE_OVER_BATCH: usize = 100;
/// Nodes the shard's maintenance puts back on their streams per queue and look, when no node
/// finishing in that queue has put them back: a trickle that finds them a worker with room for
/// their principal, or sets them aside again.
const RELEASE_PER_LOOK: u64 = 8;
/// A lost worker stays listed (as silent) for this long after its last heartbeat.
const FORGET_AFTER: Duration = Duration::from_millis(conveyor_shared::store::FORGET_AFTER_MS);

/// How often a worker sends its heartbeat: four times per lease, so that a worker that dies is
/// known lost within its lease, and at least at the configured pace (10 s by default; with the
/// default 30 s lease, every 7.5 s).
pub(super) fn heartbeat_every(worker: &Worker) -> Duration {
    worker.options.heartbeat.min(worker.options.lease / 4).max(Duration::from_millis(50))
}

/// How long the maintenance lease lasts without renewal: two and a half heartbeats, so that one
/// late heartbeat does not hand it over, and a lost holder's successor takes it within its lease.
fn maintenance_lease(worker: &Worker) -> Duration {
    heartbeat_every(worker) * 5 / 2
}

/// Shards whose maintenance was asked for by a notice: a script scheduled something sooner than
/// the planned look, or notices may have been lost (every shard).
#[derive(Default)]
pub(super) struct Wakes {
    shards: Mutex<(HashSet<Shard>, bool)>,
    notify: tokio::sync::Notify,
}

impl Wakes {
    pub(super) fn shard(&self, shard: Shard) {
        self.lock().0.insert(shard);
        self.notify.notify_one();
    }

    pub(super) fn all(&self) {
        self.lock().1 = true;
        self.notify.notify_one();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (HashSet<Shard>, bool)> {
        // Each change is one call on the set: a poisoned lock holds nothing half-done.
        self.shards.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The shards asked for since the last call (`None`: all of them).
    fn take(&self) -> Option<Vec<Shard>> {
        let mut wakes = self.lock();
        let all = std::mem::take(&mut wakes.1);
        let shards: Vec<Shard> = wakes.0.drain().collect();
        if all { None } else { Some(shards) }
    }
}

/// The worker's record as its heartbeat carries it.
fn record(worker: &Worker) -> WorkerRecord {
    WorkerRecord {
        name: worker.options.name.clone(),
        queues: worker.queues.to_vec(),
        tools: worker.registry.names().to_vec(),
        concurrency: worker.options.concurrency,
        running: worker.running.report(),
        heartbeat_ms: 0, // Set by the script, from Redis's clock.
        lease_ms: worker.options.lease.as_millis() as u64,
        host: std::env::var("HOSTNAME").unwrap_or_default(),
        pid: std::process::id(),
    }
}

/// Sends one heartbeat; a worker Redis did not know (its first heartbeat, or Redis lost its data)
/// publishes its tools and sets its consumer groups up again.
pub(super) async fn announce(worker: &Worker) -> Result<Heartbeat, StoreError> {
    let beat =
        worker.store.heartbeat(&record(worker), worker.options.lease, maintenance_lease(worker)).await?;
    if beat.fresh {
        worker.set_up.store(false, Ordering::SeqCst);
    }
    if !worker.set_up.load(Ordering::SeqCst) {
        worker.store.ensure_groups(&worker.queues).await?;
        worker.store.publish_tools(&worker.registry.published()).await?;
        worker.set_up.store(true, Ordering::SeqCst);
    }
    Ok(beat)
}

/// Gives up the maintenance lease if this worker holds it: the next heartbeat of a live worker
/// takes it at once, instead of once it runs out.
async fn hand_over_maintenance(worker: &Worker) {
    match worker.store.release_maintenance(&worker.options.name).await {
        Ok(true) => tracing::info!("handed the deployment's maintenance over"),
        Ok(false) => {}
        Err(e) => tracing::debug!(error = %e, "could not hand the maintenance over; it runs out on its own"),
    }
}

/// A stopping worker hands the maintenance lease over, and leaves the consumer groups where it
/// holds nothing, and the catalog.
pub(super) async fn leave(worker: &Worker) {
    hand_over_maintenance(worker).await;
    let name = &worker.options.name;
    match worker.store.leave_groups(name, &worker.queues).await {
        Ok(0) => {
            if let Err(e) = worker.store.forget_worker(name).await {
                tracing::debug!(error = %e, "could not remove this worker from the catalog");
            }
        }
        // Entries it could not hand back stay its own until maintenance takes them over, and it
        // stays listed until then.
        Ok(kept) => {
            tracing::warn!(streams = kept, "stopping with entries still pending; maintenance takes them over")
        }
        Err(e) => tracing::debug!(error = %e, "could not leave the consumer groups"),
    }
}

/// The heartbeat, and the maintenance while this worker holds its lease, until shutdown (when it
/// hands the maintenance over at once: the nodes it still finishes need none).
pub(super) async fn keep_alive(worker: Worker, shutdown: CancellationToken) {
    let every = heartbeat_every(&worker);
    let shards: Vec<Shard> = worker.store.all_shards().collect();
    let mut maintainer = false;
    let mut next_beat = Instant::now() + every;
    let mut next_lapse: Option<Instant> = None;
    let mut due: HashMap<Shard, Instant> = HashMap::new();
    let mut idle = IdleLooks::default();
    loop {
        let wake = [Some(next_beat), next_lapse, due.values().min().copied()].into_iter().flatten().min();
        let wake = wake.unwrap_or(next_beat);
        tokio::select! {
            () = tokio::time::sleep_until(wake) => {}
            () = worker.wakes.notify.notified() => {}
            () = shutdown.cancelled() => {
                if maintainer {
                    hand_over_maintenance(&worker).await;
                }
                return;
            }
        }
        let now = Instant::now();
        let asked = worker.wakes.take();
        if maintainer {
            for shard in asked.unwrap_or_else(|| shards.clone()) {
                due.insert(shard, now);
            }
        }
        if now >= next_beat || next_lapse.is_some_and(|at| now >= at) {
            next_beat = now + every;
            match announce(&worker).await {
                Ok(beat) => {
                    if beat.maintainer && !maintainer {
                        tracing::info!("this worker now runs the deployment's maintenance");
                        due = shards.iter().map(|s| (*s, now)).collect();
                        idle = IdleLooks::default();
                        adopt_orphans(&worker).await;
                    } else if !beat.maintainer && maintainer {
                        tracing::info!("another worker runs the deployment's maintenance now");
                        due.clear();
                    }
                    maintainer = beat.maintainer;
                    next_lapse = beat.next_lapse_in.map(|d| now + d);
                    for (name, record) in beat.lapsed {
                        if let Some(again) = take_over(&worker, &name, record.as_ref(), beat.now_ms).await {
                            next_lapse = Some(next_lapse.map_or(now + again, |at| at.min(now + again)));
                        }
                    }
                }
                Err(e) => tracing::debug!(error = %e, "could not send a heartbeat; trying again later"),
            }
        }
        if !maintainer {
            continue;
        }
        let now = Instant::now();
        let ready: Vec<Shard> = due.iter().filter(|(_, at)| **at <= now).map(|(s, _)| *s).collect();
        for shard in ready {
            match maintain_shard(&worker, shard, &mut idle).await {
                Some(after) => due.insert(shard, Instant::now() + after),
                None => due.remove(&shard),
            };
        }
    }
}

/// The maintenance holder's looks for idle entries: when each shard's next is due, and the queues
/// of the catalog (read again at most once a lease).
#[derive(Default)]
struct IdleLooks {
    due: HashMap<Shard, Instant>,
    queues: Option<(Instant, Vec<String>)>,
}

impl IdleLooks {
    async fn queues(&mut self, worker: &Worker) -> Result<Vec<String>, StoreError> {
        if let Some((read_at, queues)) = &self.queues
            && read_at.elapsed() < worker.options.lease
        {
            return Ok(queues.clone());
        }
        let queues = catalog_queues(&worker.store).await?;
        self.queues = Some((Instant::now(), queues.clone()));
        Ok(queues)
    }
}

/// A new maintenance holder looks once for entries held by consumers the liveness set does not
/// know; they are taken over at its next heartbeat.
async fn adopt_orphans(worker: &Worker) {
    let queues = match catalog_queues(&worker.store).await {
        Ok(queues) => queues,
        Err(e) => {
            tracing::debug!(error = %e, "could not read the catalog's queues");
            return;
        }
    };
    match worker.store.adopt_orphans(&queues).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(
            consumers = n,
            "found entries held by workers no heartbeat has named; taking them over"
        ),
        Err(e) => tracing::debug!(error = %e, "could not look for entries of unknown workers"),
    }
}

/// One look at a shard: due retries go back to their queue, tasks past their TTL expire, set-aside
/// nodes trickle back, and, while the shard has live tasks, at most once a lease, entries nobody
/// renewed for a lease are queued again. Returns when to look again (`None`: when a notice says
/// so).
async fn maintain_shard(worker: &Worker, shard: Shard, idle: &mut IdleLooks) -> Option<Duration> {
    let store = &worker.store;
    let lease = worker.options.lease;
    let MaintainOutcome { retries, expired, next_due_in, set_aside, live } =
        match store.maintain(shard, MAINTAIN_BATCH, SET_ASIDE_EVERY, lease).await {
            Ok(outcome) => outcome,
            Err(e) => {
                tracing::debug!(shard = %shard, error = %e, "shard maintenance failed; trying again");
                return Some(MAINTAIN_AFTER_FAILURE);
            }
        };
    if set_aside > 0 {
        release_set_aside(worker, shard).await;
    }
    let mut next_due_in = next_due_in;
    if live && idle.due.get(&shard).is_none_or(|at| *at <= Instant::now()) {
        let more = take_over_idle(worker, shard, idle).await;
        // A full page: more may be idle now.
        let after = if more { Duration::ZERO } else { lease };
        idle.due.insert(shard, Instant::now() + after);
        next_due_in = Some(next_due_in.map_or(after, |d| d.min(after)));
    }
    // An item that keeps failing (a corrupt record, Redis refusing) is looked at again after a
    // pause, not in a tight loop.
    let mut failed = 0usize;
    for member in &retries {
        if let Err(e) = store.promote_retry(shard, member).await {
            failed += 1;
            tracing::warn!(error = %e, "could not queue a retry again");
        }
    }
    for task_id in &expired {
        match store.expire_task(shard, task_id).await {
            Ok(true) => tracing::info!(task = %task_id, "task expired"),
            Ok(false) => {}
            Err(e) => {
                failed += 1;
                tracing::warn!(task = %task_id, error = %e, "could not expire a task");
            }
        }
    }
    if failed > 0 {
        return Some(next_due_in.map_or(MAINTAIN_AFTER_FAILURE, |d| d.max(MAINTAIN_AFTER_FAILURE)));
    }
    next_due_in
}

/// Puts a few set-aside nodes of every queue of `shard` back on their streams.
async fn release_set_aside(worker: &Worker, shard: Shard) {
    let Ok(queues) = catalog_queues(&worker.store).await else { return };
    for queue in queues {
        if let Err(e) = worker.store.release_held(shard, &queue, RELEASE_PER_LOOK).await {
            tracing::debug!(shard = %shard, queue = %queue, error = %e, "could not put set-aside nodes back");
        }
    }
}

/// Every queue the catalog knows, and the built-in one.
async fn catalog_queues(store: &Store) -> Result<Vec<String>, StoreError> {
    let mut queues: Vec<String> =
        store.tools().await?.iter().filter_map(|t| t.queue_name().map(str::to_owned)).collect();
    queues.push(keys::BUILTIN_QUEUE.to_owned());
    queues.sort();
    queues.dedup();
    Ok(queues)
}

/// Queues again the nodes of the entries of `shard` that have gone unrenewed for a lease, whoever
/// holds them: a running attempt renews its entry three times per lease, so such an entry is run
/// by nobody, whether its holder died or is alive and failed to start it, hand it back or finish
/// with it. An entry counts as idle once it has gone unrenewed for its holder's own lease. Returns
/// whether more such entries may be left than one look takes.
async fn take_over_idle(worker: &Worker, shard: Shard, idle: &mut IdleLooks) -> bool {
    let store = &worker.store;
    let own = worker.options.lease;
    let queues = match idle.queues(worker).await {
        Ok(queues) => queues,
        Err(e) => {
            tracing::debug!(error = %e, "could not read the catalog's queues");
            return false;
        }
    };
    let found = match store.idle_entries(shard, &queues, None, own, TAKE_OVER_BATCH).await {
        Ok(found) => found,
        Err(e) => {
            tracing::warn!(shard = %shard, error = %e, "could not look for idle entries");
            return false;
        }
    };
    if found.entries.is_empty() {
        return false;
    }
    // Another worker's lease may be longer than this one's: its entries are idle once they have
    // gone unrenewed for its own.
    let leases: HashMap<String, Duration> = if found.entries.iter().any(|e| e.holder != worker.options.name) {
        match store.workers().await {
            Ok(records) => records
                .into_iter()
                .filter(|r| r.lease_ms > 0)
                .map(|r| (r.name, Duration::from_millis(r.lease_ms)))
                .collect(),
            Err(e) => {
                tracing::debug!(error = %e, "could not read the workers' leases");
                return false;
            }
        }
    } else {
        HashMap::new()
    };
    let idle_entries: Vec<(IdleEntry, Duration)> = found
        .entries
        .into_iter()
        .filter_map(|entry| {
            let lease = leases.get(&entry.holder).copied().unwrap_or(own).max(own);
            (entry.idle >= lease).then_some((entry, lease))
        })
        .collect();
    reclaim(worker, idle_entries).await;
    found.more
}

/// Takes over the entries of `lost`, a worker whose liveness ran out, that have gone unrenewed for
/// its own lease (`record`'s); an entry renewed more recently waits for its turn. Once it holds
/// nothing it leaves the consumer groups, and the catalog after [`FORGET_AFTER`]. Returns when to
/// look at it again (`None`: it is gone, or a heartbeat of its own will say when).
async fn take_over(
    worker: &Worker,
    lost: &str,
    record: Option<&WorkerRecord>,
    now_ms: u64,
) -> Option<Duration> {
    let store = &worker.store;
    let queues = match record {
        Some(r) => r.queues.clone(),
        None => catalog_queues(store).await.unwrap_or_default(),
    };
    let lease =
        record.map(|r| r.lease_ms).filter(|ms| *ms > 0).map_or(worker.options.lease, Duration::from_millis);
    let mut again: Option<Duration> = None;
    let mut soonest = |d: Duration| again = Some(again.map_or(d, |a: Duration| a.min(d)));
    for shard in store.all_shards() {
        match store.idle_entries(shard, &queues, Some(lost), lease, TAKE_OVER_BATCH).await {
            Ok(found) => {
                reclaim(worker, found.entries.into_iter().map(|e| (e, lease)).collect()).await;
                if let Some(next) = found.next {
                    soonest(next);
                }
            }
            Err(e) => {
                tracing::warn!(shard = %shard, worker = %lost, error = %e, "could not take over a lost worker's entries");
                soonest(MAINTAIN_AFTER_FAILURE);
            }
        }
    }
    let again = match again {
        Some(after) => Some(after),
        None => match store.leave_groups(lost, &queues).await {
            Ok(0) => {
                let silent_for =
                    Duration::from_millis(now_ms.saturating_sub(record.map_or(0, |r| r.heartbeat_ms)));
                if silent_for >= FORGET_AFTER {
                    let _ = store.forget_worker(lost).await;
                    return None;
                }
                Some(FORGET_AFTER - silent_for)
            }
            Ok(_) => Some(lease),
            Err(_) => Some(MAINTAIN_AFTER_FAILURE),
        },
    };
    // A lost worker's entry comes due a little after its idle time passes the lease.
    let after = again.map(|d| d + Duration::from_millis(20));
    if let Some(after) = after
        && let Err(e) = store.recheck_worker_at(lost, now_ms + after.as_millis() as u64).await
    {
        tracing::debug!(worker = %lost, error = %e, "could not plan the next look at a lost worker");
    }
    after
}

/// Queues again the nodes of entries found unrenewed for their holder's lease (the second of each
/// pair), unless a running attempt renewed one meanwhile. What fails here stays pending with its
/// holder, unrenewed, and is found again at the next look.
async fn reclaim(worker: &Worker, entries: Vec<(IdleEntry, Duration)>) {
    let store = &worker.store;
    for (IdleEntry { item, holder, idle }, lease) in entries {
        if item.task_id.is_empty() {
            let _ = store.drop_entry(&item).await;
            continue;
        }
        if item.node_id == keys::FINALIZE_NODE {
            // A finalize entry names no node: its holder's work is simply done again.
            finalize_taken_over(store, &item).await;
            continue;
        }
        match store.reclaim(&item, lease).await {
            Ok(ReclaimOutcome::Requeued { losses, lost }) => {
                metrics::node_reclaimed(keys::queue_of_stream(&item.stream).unwrap_or_default());
                if let (Some(lost), Some(trace)) =
                    (lost, item.traceparent.as_deref().and_then(TaskTrace::decode))
                {
                    trace.lost_attempt_span(&lost, &item.task_id, &item.node_id);
                }
                tracing::info!(
                    task = %item.task_id, node = %item.node_id, %holder, idle_ms = idle.as_millis() as u64, losses,
                    "took over a node whose entry went unrenewed for a lease"
                );
            }
            Ok(ReclaimOutcome::Renewed) => {
                tracing::debug!(task = %item.task_id, node = %item.node_id, "a running attempt renewed the entry meanwhile");
            }
            Ok(ReclaimOutcome::Dropped(reason)) => {
                tracing::debug!(task = %item.task_id, node = %item.node_id, %reason, "dropped a stale entry");
            }
            Err(e) => tracing::warn!(task = %item.task_id, error = %e, "could not take over a node"),
        }
    }
}

async fn finalize_taken_over(store: &Store, item: &WorkItem) {
    if let Err(e) = crate::dag::finalize(store, item).await {
        tracing::warn!(task = %item.task_id, error = %e, "could not finalize a taken-over task");
    }
}
