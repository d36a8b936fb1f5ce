//! The running registry: the attempts this worker runs, by stream entry, why each was told to
//! stop, the tasks it heard were cancelled lately, and the slots each principal's nodes take.

use super::*;

/// Why a running attempt was told to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum StopReason {
    /// Not told to stop (yet).
    NotStopped = 0,
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
pub(super) struct Run {
    pub(super) attempt: Attempt,
    pub(super) tool: String,
    pub(super) started_at_ms: u64,
    pub(super) token: CancellationToken,
    pub(super) reason: Arc<AtomicU8>,
    pub(super) metrics: NodeRun,
}

impl Run {
    pub(super) fn stop(&self, reason: StopReason) {
        if reason == StopReason::Task {
            self.metrics.stop_requested();
        }
        // The first reason wins: a node stopped for its task stays stopped for its task.
        let _ = self.reason.compare_exchange(
            StopReason::NotStopped as u8,
            reason as u8,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
        self.token.cancel();
    }
}

pub(super) fn reason_of(cell: &AtomicU8) -> StopReason {
    match cell.load(Ordering::SeqCst) {
        1 => StopReason::Task,
        2 => StopReason::Shutdown,
        3 => StopReason::Lost,
        4 => StopReason::Timeout,
        _ => StopReason::NotStopped,
    }
}

/// A stream entry: its stream and its id. Ids are unique only within a stream (two queues'
/// streams take the same id for entries added in the same millisecond), so both name a run.
pub(super) type EntryKey = (String, String);

fn entry_of(attempt: &Attempt) -> EntryKey {
    (attempt.stream.clone(), attempt.entry_id.clone())
}

/// The attempts this worker runs, by entry, and the tasks it heard were cancelled lately: a
/// notice can arrive between a node's start and its run joining the map, and must still stop it.
#[derive(Default, Clone)]
pub(super) struct RunningRegistry {
    runs: Arc<Mutex<HashMap<EntryKey, Run>>>,
    /// Entries whose start is being tried again ([`super::intake`]): held by this worker though
    /// no run has them yet, so that a reader that re-reads its own pending entries leaves them.
    starting: Arc<Mutex<HashSet<EntryKey>>>,
    /// Tasks cancelled lately, and when this worker heard of it.
    recently_cancelled: Arc<Mutex<HashMap<String, std::time::Instant>>>,
}

/// How long a cancelled task is remembered: far longer than a start takes.
const CANCEL_MEMORY: Duration = Duration::from_secs(60);

impl RunningRegistry {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<EntryKey, Run>> {
        // Every operation on the map is a single call, so a panic elsewhere cannot leave it
        // half-updated and a poisoned lock is safe to keep using.
        self.runs.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Adds a run; one whose task was cancelled meanwhile is stopped at once.
    pub(super) fn add(&self, run: Run) {
        let mut runs = self.lock();
        if self.cancelled().contains_key(&run.attempt.task_id) {
            run.stop(StopReason::Task);
        }
        runs.insert(entry_of(&run.attempt), run);
    }

    pub(super) fn remove(&self, attempt: &Attempt) {
        self.lock().remove(&entry_of(attempt));
    }

    pub(super) fn cancelled(&self) -> std::sync::MutexGuard<'_, HashMap<String, std::time::Instant>> {
        self.recently_cancelled.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn stop_task(&self, task_id: &str, reason: StopReason) -> usize {
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

    pub(super) fn stop_entries(&self, entries: &[EntryKey], reason: StopReason) {
        let runs = self.lock();
        for entry in entries {
            if let Some(run) = runs.get(entry) {
                run.stop(reason);
            }
        }
    }

    /// Every entry this worker holds: those it runs, and those whose start it tries again.
    pub(super) fn held_set(&self) -> HashSet<EntryKey> {
        let mut held: HashSet<EntryKey> = self.lock().keys().cloned().collect();
        held.extend(self.starting().iter().cloned());
        held
    }

    fn starting(&self) -> std::sync::MutexGuard<'_, HashSet<EntryKey>> {
        // Each change is one call on the set: a poisoned lock holds nothing half-done.
        self.starting.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Entries whose start is tried again from now on.
    pub(super) fn start_again(&self, entries: impl IntoIterator<Item = EntryKey>) {
        self.starting().extend(entries);
    }

    /// Entries whose start is no longer tried again (started, and then held by a run, or given up).
    pub(super) fn started(&self, entries: &[EntryKey]) {
        let mut starting = self.starting();
        for entry in entries {
            starting.remove(entry);
        }
    }

    pub(super) fn held(&self) -> Vec<EntryKey> {
        self.lock().keys().cloned().collect()
    }

    pub(super) fn tasks(&self) -> Vec<String> {
        let mut tasks: Vec<String> = self.lock().values().map(|r| r.attempt.task_id.clone()).collect();
        tasks.sort();
        tasks.dedup();
        tasks
    }

    pub(super) fn report(&self) -> Vec<RunningNode> {
        self.lock()
            .values()
            .map(|r| RunningNode {
                task_id: r.attempt.task_id.clone(),
                node_id: r.attempt.node_id.clone(),
                tool: r.tool.clone(),
                attempt: r.attempt.number,
                started_at_ms: r.started_at_ms,
            })
            .collect()
    }
}

/// Slots taken per principal on this worker.
#[derive(Default, Clone)]
pub(super) struct OwnerSlots(Arc<Mutex<HashMap<String, usize>>>);

/// One slot a principal's node takes; given back when dropped.
pub(super) struct OwnerSlot {
    pub(super) slots: OwnerSlots,
    pub(super) owner: String,
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
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        // Each change is one call on the map: a poisoned lock holds nothing half-done.
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn take(&self, owner: &str) -> OwnerSlot {
        *self.lock().entry(owner.to_owned()).or_default() += 1;
        OwnerSlot { slots: self.clone(), owner: owner.to_owned() }
    }

    /// How many more slots `owner` may take under a share of `per_principal` (any number without).
    pub(super) fn room(&self, owner: &str, per_principal: Option<usize>) -> usize {
        match per_principal {
            None => usize::MAX,
            Some(share) => share.saturating_sub(self.lock().get(owner).copied().unwrap_or(0)),
        }
    }

    /// How many more slots each principal may take, under a share of `per_principal` slots.
    pub(super) fn shares(&self, per_principal: Option<usize>) -> SlotShares {
        let Some(share) = per_principal else { return SlotShares::unlimited() };
        let room = self
            .lock()
            .iter()
            .map(|(owner, taken)| (owner.clone(), share.saturating_sub(*taken) as u64))
            .collect();
        SlotShares { room, default: Some(share as u64), ..SlotShares::default() }
    }
}
