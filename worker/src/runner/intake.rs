//! Intake: the readers that read batches from the queues this worker serves, hold entries beyond
//! the free slots for a moment, give each principal its share, and start each batch with one
//! script per shard. What fails to start (Redis refused the batch, or lost its reply; one entry's
//! record could not be read) is tried again apart, for up to a lease, before the maintenance's
//! look for unrenewed entries takes it.

use super::*;

/// How long an entry read beyond this worker's free slots may wait in its buffer for a slot
/// before it goes back to its queue for another worker.
const PREFETCH_FOR: Duration = Duration::from_millis(250);

/// While nodes wait for their principals' slots and the worker has nodes in hand, how often it
/// reads ahead for other principals' work with the slots their shares keep free. Reading ahead at
/// every slot that frees cost one `XREADGROUP` per node under one principal's flood, each bringing
/// more of that principal's nodes to wait; another principal's node is found this much later at
/// most.
const READ_AHEAD_EVERY: Duration = Duration::from_millis(5);

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
pub(super) async fn read_loop(
    worker: Worker,
    mut reader: WorkReader,
    semaphore: Arc<Semaphore>,
    jobs: TaskTracker,
    shutdown: CancellationToken,
) {
    let mut backoff = Backoff::default();
    let mut buffer: std::collections::VecDeque<(WorkItem, tokio::time::Instant)> = Default::default();
    let mut waiting = Waiting::default();
    let mut read_ahead_at: Option<tokio::time::Instant> = None;
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
            } else if waiting.len() < worker.options.concurrency
                && (waiting.is_empty()
                    || items.is_empty()
                    || read_ahead_at.is_none_or(|at| at.elapsed() >= READ_AHEAD_EVERY))
            {
                if !waiting.is_empty() && !items.is_empty() {
                    read_ahead_at = Some(tokio::time::Instant::now());
                }
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
    pub(super) nodes: std::collections::VecDeque<(WorkItem, String, tokio::time::Instant)>,
    /// When each entry was first read, across tries.
    pub(super) since: HashMap<EntryKey, tokio::time::Instant>,
}

impl Waiting {
    pub(super) fn len(&self) -> usize {
        self.nodes.len()
    }

    pub(super) fn is_empty(&self) -> bool {
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
    pub(super) fn ready(
        &mut self,
        slots: usize,
        room: impl Fn(&str) -> usize,
    ) -> (Vec<WorkItem>, HashSet<EntryKey>) {
        let mut ready = Vec::new();
        let mut set_aside = HashSet::new();
        let mut taken: HashMap<String, usize> = HashMap::new();
        let mut kept = std::collections::VecDeque::with_capacity(self.nodes.len());
        for (item, owner, since) in self.nodes.drain(..) {
            let due = since.elapsed() >= PREFETCH_FOR;
            let fits = {
                // Looked up before it is inserted: an owner's name is copied once per call of
                // this, not once per waiting node.
                let taken = match taken.get_mut(owner.as_str()) {
                    Some(taken) => taken,
                    None => taken.entry(owner.clone()).or_default(),
                };
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

    pub(super) fn entries(&self) -> impl Iterator<Item = EntryKey> + '_ {
        self.nodes.iter().map(|(item, _, _)| (item.stream.clone(), item.entry_id.clone()))
    }

    pub(super) fn drain(&mut self) -> Vec<WorkItem> {
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

/// Puts entries this worker read but will not run back on their queues (one script per shard),
/// trying again for a moment while Redis refuses.
pub(super) async fn hand_back(worker: &Worker, items: Vec<WorkItem>) {
    let mut by_shard: HashMap<Shard, Vec<WorkItem>> = HashMap::new();
    // Only node entries go back; a finalize entry left pending is taken over after its lease.
    for item in items.into_iter().filter(|i| !i.task_id.is_empty() && i.node_id != keys::FINALIZE_NODE) {
        by_shard.entry(item.shard).or_default().push(item);
    }
    for (shard, items) in by_shard {
        let none = SlotShares::unlimited();
        let name = &worker.options.name;
        // What stays pending with this worker, unrenewed, is queued again by the maintenance once
        // a lease has passed.
        keep_trying(worker, "hand entries back", &items[0].task_id, HAND_BACK_WITHIN, || {
            worker.store.start_batch(shard, &items, 0, name, &none)
        })
        .await;
    }
}

/// How long a reader keeps trying to hand entries back before it leaves them to the maintenance.
const HAND_BACK_WITHIN: Duration = Duration::from_secs(1);

/// What a dispatch did with the nodes it was given.
#[derive(Debug, Default)]
struct Dispatched {
    pub(super) started: usize,
    pub(super) set_aside: usize,
    /// Nodes whose principal has its share: left as they were, with the principal.
    capped: Vec<(WorkItem, String)>,
}

/// Starts what was read: finalize entries at once, nodes up to the free slots and each
/// principal's share of them (one script per shard); a node whose principal has its share is set
/// aside, the rest handed back to their queue. A batch, or an entry, that could not be started
/// is tried again apart ([`start_again`]), keeping its slots.
async fn dispatch(
    worker: &Worker,
    items: Vec<WorkItem>,
    mut permits: Vec<OwnedSemaphorePermit>,
    jobs: &TaskTracker,
    set_aside: HashSet<EntryKey>,
) -> Dispatched {
    let mut dispatched = Dispatched::default();
    let mut by_shard: HashMap<Shard, (Vec<WorkItem>, usize)> = HashMap::new();
    let share = worker.options.slots_per_principal();
    for item in items {
        // A lean entry whose owner has room runs straight from its delivery (ADR-0028); one whose
        // owner has its share, or that was waiting for long enough to be set aside, goes through
        // `start_nodes` with the rest.
        let lean_owner =
            item.lean.as_ref().filter(|_| worker.store.lean_calls()).map(|lean| lean.owner.as_str());
        // Nearly always empty: no key is built for the look then.
        let waited_out =
            !set_aside.is_empty() && set_aside.contains(&(item.stream.clone(), item.entry_id.clone()));
        if let Some(owner) = lean_owner
            && !permits.is_empty()
            && !waited_out
            && worker.owners.room(owner, share) > 0
            && let Some(start) = conveyor_shared::store::lean::lean_start(&item, &worker.options.name)
            && let Some(permit) = permits.pop()
        {
            dispatched.started += 1;
            run_node(worker, start, permit, jobs, None);
            continue;
        }
        // A lean entry whose owner has its share waits with the worker as `start_nodes` would
        // have said ("capped": nothing changed), without the script: the entry names its owner.
        // Only once its wait runs out does it go through `start_nodes`, to be set aside.
        if let Some(owner) = lean_owner
            && !waited_out
            && worker.owners.room(owner, share) == 0
        {
            let owner = owner.to_owned();
            dispatched.capped.push((item, owner));
            continue;
        }
        if item.task_id.is_empty() {
            if let Err(e) = worker.store.drop_entry(&item).await {
                tracing::warn!(entry = %item.entry_id, error = %e, "could not drop an empty entry");
            }
        } else if item.node_id == keys::FINALIZE_NODE {
            let worker = worker.clone();
            jobs.spawn(async move {
                let store = &worker.store;
                keep_trying(&worker, "finalize the task", &item.task_id, worker.options.lease, || {
                    crate::dag::finalize(store, &item)
                })
                .await;
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
        (shard, items, run, outcomes, (begun, SystemTime::now()))
    }))
    .await;
    for (shard, items, run, outcomes, round_trip) in starts {
        let outcomes = match outcomes {
            Ok(outcomes) => outcomes,
            Err(e) => {
                // Redis refused the batch for now, or ran it and the reply was lost: it is tried
                // again (a node the lost reply started comes back as started), keeping its slots.
                tracing::warn!(entries = items.len(), error = %e, "could not start a batch; trying again");
                let slots = permits.split_off(permits.len().saturating_sub(run));
                let again = items.into_iter().enumerate().map(|(i, item)| (item, i < run)).collect();
                jobs.spawn(start_again(worker.clone(), shard, again, slots, jobs.clone()));
                continue;
            }
        };
        let mut again = Vec::new();
        for (i, (item, outcome)) in items.into_iter().zip(outcomes).enumerate() {
            match outcome {
                StartOutcome::Run(start) => {
                    let Some(permit) = permits.pop() else { continue };
                    dispatched.started += 1;
                    run_node(worker, *start, permit, jobs, Some(round_trip));
                }
                StartOutcome::Unreadable { attempt: Some(attempt), reason } => {
                    fail_unreadable(worker, *attempt, reason, jobs);
                }
                StartOutcome::Unreadable { attempt: None, reason } => {
                    tracing::warn!(task = %item.task_id, node = %item.node_id, %reason, "could not start an entry; trying again");
                    again.push((item, i < run));
                }
                StartOutcome::Capped { owner } => dispatched.capped.push((item, owner)),
                StartOutcome::Deferred => dispatched.set_aside += 1,
                StartOutcome::HandedBack => {}
                StartOutcome::Skip(reason) => {
                    tracing::debug!(task = %item.task_id, node = %item.node_id, %reason, "skipped an entry");
                }
            }
        }
        if !again.is_empty() {
            let runs = again.iter().filter(|(_, run)| *run).count();
            let slots = permits.split_off(permits.len().saturating_sub(runs));
            jobs.spawn(start_again(worker.clone(), shard, again, slots, jobs.clone()));
        }
    }
    dispatched
}

/// How often an entry that failed alone in its batch (the script could not read its record, or
/// Redis refused one of its writes) is tried again, unless Redis said it refuses for now.
const TRIES_OF_AN_ENTRY_THAT_FAILS_ALONE: u32 = 3;

/// Tries again to start entries of `shard` whose start failed (`true`: the entry has a slot among
/// `permits` and starts; `false`: it goes back to its queue), with backoff, until each has an
/// outcome. After a lease it gives up (sooner for an entry that keeps failing alone): the entries,
/// unrenewed, are then the maintenance's to queue again. A node started meanwhile is renewed
/// before it runs, and run only if it was not taken over.
async fn start_again(
    worker: Worker,
    shard: Shard,
    items: Vec<(WorkItem, bool)>,
    mut permits: Vec<OwnedSemaphorePermit>,
    jobs: TaskTracker,
) {
    let give_up = tokio::time::Instant::now() + worker.options.lease;
    let mut backoff = Backoff::default();
    let name = worker.options.name.clone();
    let entries: Vec<EntryKey> = items.iter().map(|(i, _)| (i.stream.clone(), i.entry_id.clone())).collect();
    worker.running.start_again(entries.iter().cloned());
    // Each entry with how often it failed alone.
    let mut items: Vec<(WorkItem, bool, u32)> = items.into_iter().map(|(item, run)| (item, run, 0)).collect();
    while !items.is_empty() {
        backoff.wait(&worker.stop_running).await;
        if worker.stop_running.is_cancelled() || tokio::time::Instant::now() >= give_up {
            tracing::warn!(
                entries = items.len(),
                "gave up starting entries; the maintenance queues them again once they have gone unrenewed for a lease"
            );
            break;
        }
        // A batch starts its first `run` entries.
        items.sort_by_key(|(_, run, _)| !*run);
        let run = items.iter().filter(|(_, run, _)| *run).count();
        let batch: Vec<WorkItem> = items.iter().map(|(item, _, _)| item.clone()).collect();
        let mut shares = worker.owners.shares(worker.options.slots_per_principal());
        // An entry whose principal has no room now is set aside, not left waiting with a reader.
        shares.set_aside = batch.iter().map(|i| (i.stream.clone(), i.entry_id.clone())).collect();
        let outcomes = match worker.store.start_batch(shard, &batch, run, &name, &shares).await {
            Ok(outcomes) => outcomes,
            Err(e) => {
                tracing::warn!(entries = batch.len(), error = %e, "could not start entries yet; trying again");
                continue;
            }
        };
        let mut left = Vec::new();
        let mut started = Vec::new();
        for ((item, runs, failed), outcome) in items.into_iter().zip(outcomes) {
            match outcome {
                StartOutcome::Run(start) => started.push(*start),
                StartOutcome::Unreadable { attempt: Some(attempt), reason } => {
                    fail_unreadable(&worker, *attempt, reason, &jobs);
                }
                StartOutcome::Unreadable { attempt: None, reason } => {
                    let for_now = reason.starts_with("OOM") || reason.starts_with("BUSY");
                    if for_now || failed + 1 < TRIES_OF_AN_ENTRY_THAT_FAILS_ALONE {
                        tracing::debug!(task = %item.task_id, %reason, "could not start an entry yet");
                        left.push((item, runs, failed + 1));
                    } else {
                        tracing::warn!(task = %item.task_id, %reason, "gave up starting an entry that keeps failing; the maintenance queues it again once it has gone unrenewed for a lease");
                    }
                }
                StartOutcome::Capped { .. }
                | StartOutcome::Deferred
                | StartOutcome::HandedBack
                | StartOutcome::Skip(_) => {}
            }
        }
        if !started.is_empty() {
            // Their entries went unrenewed while the start was tried: renewed now, and a node the
            // maintenance queued again meanwhile is not run here.
            let held: Vec<EntryKey> =
                started.iter().map(|s| (s.attempt.stream.clone(), s.attempt.entry_id.clone())).collect();
            let lost = worker.store.renew_leases(&name, &held).await.unwrap_or_default();
            for start in started {
                let entry = (start.attempt.stream.clone(), start.attempt.entry_id.clone());
                if lost.contains(&entry) {
                    tracing::info!(task = %start.attempt.task_id, "a node whose start was tried again was taken over meanwhile");
                    continue;
                }
                let Some(permit) = permits.pop() else { continue };
                tracing::info!(task = %start.attempt.task_id, node = %start.attempt.node_id, "started a node on a later try");
                run_node(&worker, start, permit, &jobs, None);
            }
        }
        // Slots of entries that are done with go back at once.
        permits.truncate(left.iter().filter(|(_, run, _)| *run).count());
        worker.slot_freed.notify_waiters();
        items = left;
    }
    // Those that started are held by their runs now; the rest are the maintenance's.
    worker.running.started(&entries);
}

/// Runs a started node as a job that holds `permit` (one of this worker's slots) and a slot of its
/// principal's until it ends.
fn run_node(
    worker: &Worker,
    start: NodeStart,
    permit: OwnedSemaphorePermit,
    jobs: &TaskTracker,
    round_trip: Option<(SystemTime, SystemTime)>,
) {
    let attempt = &start.attempt;
    let slot = worker.owners.take(&attempt.owner);
    let freed = worker.slot_freed.clone();
    let span = node_span(attempt, &start.tool, &worker.options.name, start.losses, !start.answers.is_empty());
    if let Some((begun, ended)) = round_trip
        && conveyor_shared::telemetry::exporting()
    {
        context::finished_span(
            &span.context(),
            "EVALSHA start_nodes".into(),
            begun,
            ended,
            context::redis_attributes("EVALSHA", "start_nodes"),
        );
    }
    let metrics = NodeRun::start(&attempt.stream, &attempt.entry_id, &start.tool);
    // Registered before the job runs: from here its entry is renewed, a cancel reaches it, and a
    // reader that re-reads its own pending entries knows it.
    let token = worker.stop_running.child_token();
    let reason = Arc::new(AtomicU8::new(StopReason::NotStopped as u8));
    worker.running.add(Run {
        attempt: attempt.clone(),
        tool: start.tool.clone(),
        started_at_ms: now_ms(),
        token: token.clone(),
        reason: reason.clone(),
        metrics: metrics.clone(),
    });
    let job = NodeJob { metrics, span, token, reason, worker: worker.clone(), start };
    jobs.spawn(async move {
        job.run().await;
        drop(slot);
        drop(permit);
        freed.notify_waiters();
    });
}

/// Fails, for good, a node that started but whose stored record cannot be read (another attempt
/// would read the same): its task fails with a message that says why, or, in a graph, the node
/// fails as its failure policy says. Nothing else of its batch is held up.
fn fail_unreadable(worker: &Worker, attempt: Attempt, reason: String, jobs: &TaskTracker) {
    tracing::warn!(task = %attempt.task_id, node = %attempt.node_id, %reason, "a started node's stored record cannot be read; failing it");
    let worker = worker.clone();
    jobs.spawn(async move {
        let error = ToolOutcome::Error(RpcError {
            code: -32603,
            message: format!("the node cannot run: what its task stores cannot be read ({reason})"),
            data: None,
        });
        let store = &worker.store;
        let max_output_bytes = worker.options.node_limits.max_output_bytes;
        keep_trying(
            &worker,
            "fail a node that cannot be read",
            &attempt.task_id,
            worker.options.lease,
            || store.complete(&attempt, Some(&error), true, max_output_bytes),
        )
        .await;
    });
}
