//! How the gateway reads a task for a client: only what the reader shows, behind the caller's
//! poll gap, and held against the caller's in-flight budget until the reply built of it is
//! written. Every reader of one task goes through [`read_task`] (`tasks/get`, `tasks/result`, the
//! task resources, the web view's task and stream), every listing through [`pass_list_gate`] and
//! the store's listings, which read status fields only.
//!
//! A read first allows itself [`FIRST_ALLOWANCE`] bytes of large fields (what most tasks hold, in
//! one round trip); when the task holds more, the store says how much without reading it, the
//! reader holds [`READ_COST`] times that of its caller's budget (or is refused, naming the limit),
//! and reads again. So a refused reader costs no large read, and what a gateway holds for readers
//! is bounded by its budget, per principal and in all.

use conveyor_shared::model::TaskRecord;
use conveyor_shared::store::{Gate, GateKind, ReadOutcome, TaskDetail, TaskParts, TaskRead};
use serde_json::json;

use crate::access::Caller;
use crate::rpc::RpcFailure;
use crate::state::{AppState, BudgetPermit};

/// Memory a read holds per byte of large fields it reads: the text read from Redis, the parsed
/// JSON, and the reply's text built of it, each about as large as what is stored.
pub const READ_COST: u64 = conveyor_shared::config::READ_COST;
/// Bytes of large fields a read takes without asking first.
pub const FIRST_ALLOWANCE: u64 = 64 * 1024;
/// Reads of a task that grew between being measured and being read, before giving up.
const ATTEMPTS: usize = 4;

/// One reader of one task.
#[derive(Clone, Copy)]
pub(crate) struct Reader<'a> {
    pub caller: &'a Caller,
    /// What the audit log names as the request of a refusal.
    pub method: &'a str,
    pub parts: TaskParts,
    /// The caller's gate this read passes (with a poll gap configured).
    pub gate: Option<GateKind>,
    /// A synchronous call's hidden task is readable too (what its result names).
    pub hidden: bool,
    /// The version the reader shows already: a task still at it is not read.
    pub since: Option<&'a str>,
}

impl<'a> Reader<'a> {
    pub fn new(caller: &'a Caller, method: &'a str, parts: TaskParts) -> Self {
        Self { caller, method, parts, gate: None, hidden: false, since: None }
    }

    pub fn gated(mut self, kind: GateKind) -> Self {
        self.gate = Some(kind);
        self
    }
}

/// A task read, and the memory its caller holds for it until the reply is written.
pub(crate) struct Held {
    pub detail: TaskDetail,
    pub permit: BudgetPermit,
}

impl Held {
    pub fn task(&self) -> &TaskRecord {
        &self.detail.task
    }
}

/// What a read found.
pub(crate) enum Found {
    Read(Box<Held>),
    /// Still at the version the reader shows; nothing was read.
    Same,
}

/// Reads `task_id` for `reader`: `None` for an unknown, expired or hidden task and for another
/// principal's (audited), which all answer alike so that others' task ids are not confirmed.
pub(crate) async fn read_task(
    state: &AppState,
    reader: Reader<'_>,
    task_id: &str,
) -> Result<Option<Found>, RpcFailure> {
    let caller = reader.caller;
    let gap = state.shared_limits.min_poll_gap_ms;
    let mut read = TaskRead::new(caller.owner_filter(), reader.parts);
    read.hidden = reader.hidden;
    read.since = reader.since;
    read.gate =
        reader.gate.filter(|_| gap > 0).map(|kind| Gate { caller: &caller.principal, gap_ms: gap, kind });
    let mut permit = BudgetPermit::default();
    if reader.parts.reads_large() {
        read.allowance = FIRST_ALLOWANCE;
        permit = state.budget.reserve_read(&caller.principal, cost(FIRST_ALLOWANCE)).await?;
    }
    for _ in 0..ATTEMPTS {
        match state.store.read_task(task_id, &read).await? {
            ReadOutcome::Read(mut detail) => {
                if !reader.parts.call {
                    // Not read: every gateway stores its own configured interval in the call.
                    detail.task.call.poll_interval_ms = state.config.poll_interval_ms;
                }
                return Ok(Some(Found::Read(Box::new(Held { detail: *detail, permit }))));
            }
            ReadOutcome::Same { .. } => return Ok(Some(Found::Same)),
            // Changed between being measured and being read: measured again.
            ReadOutcome::Moved => {}
            ReadOutcome::Missing => return Ok(None),
            ReadOutcome::Other => {
                crate::access::audit_denied(
                    caller,
                    reader.method,
                    task_id,
                    "the task belongs to another principal",
                );
                return Ok(None);
            }
            ReadOutcome::TooSoon { retry_after_ms } => {
                return Err(too_soon(task_id, gap, retry_after_ms, reader.gate));
            }
            ReadOutcome::Over { bytes, .. } => {
                // Held for the whole read before it is made; the first allowance's stays held.
                state.budget.check_fits(cost(bytes))?;
                let more = cost(bytes).saturating_sub(cost(read.allowance));
                permit.merge(state.budget.reserve(&caller.principal, more).await?);
                read.allowance = bytes;
            }
        }
    }
    Err(RpcFailure::internal(format!("task `{task_id}` kept growing while it was read; read it again")))
}

/// The budget a read of `bytes` of large fields holds.
pub fn cost(bytes: u64) -> usize {
    usize::try_from(bytes.saturating_mul(READ_COST)).unwrap_or(usize::MAX)
}

fn too_soon(task_id: &str, gap: u64, retry_after_ms: u64, gate: Option<GateKind>) -> RpcFailure {
    let what = match gate {
        Some(GateKind::Result) => format!("the result of task `{task_id}`"),
        _ => format!("task `{task_id}`"),
    };
    RpcFailure::new(
        crate::rpc::codes::OVERLOADED,
        format!(
            "Polling too fast: read {what} at most every {gap} ms (limit min_poll_gap_ms; its pollInterval says how often to poll). Retry in {retry_after_ms} ms."
        ),
        Some(
            json!({"limit": "min_poll_gap_ms", "max": gap, "retryAfterMs": retry_after_ms, "retryable": true}),
        ),
    )
}

/// Passes the caller's gate for one page of one listing (`listing` names the reader, `page` its
/// cursor or `first`), or refuses a read of it within the poll gap.
pub(crate) async fn pass_list_gate(
    state: &AppState,
    caller: &Caller,
    listing: &str,
    page: &str,
) -> Result<(), RpcFailure> {
    let gap = state.shared_limits.min_poll_gap_ms;
    if gap == 0 {
        return Ok(());
    }
    let key = conveyor_shared::keys::list_gate(listing, page, &caller.principal);
    let token = conveyor_shared::model::random_id();
    match state.store.pass_gate(&key, &token, gap).await? {
        None => Ok(()),
        Some(retry_after_ms) => Err(RpcFailure::new(
            crate::rpc::codes::OVERLOADED,
            format!(
                "Polling too fast: read this page of your tasks at most every {gap} ms (limit min_poll_gap_ms). Retry in {retry_after_ms} ms."
            ),
            Some(
                json!({"limit": "min_poll_gap_ms", "max": gap, "retryAfterMs": retry_after_ms, "retryable": true}),
            ),
        )),
    }
}
