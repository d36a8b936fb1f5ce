//! A request that waits for a task's end: relays progress and (on 2025-11-25) the task's requests
//! for input from the gateway's inbox, answers from the terminal event (which carries a small
//! result), and reads the task again only when events may have been lost. A synchronous call
//! whose wait runs out hands its hidden task to the client as a task of its own (escalates it),
//! so that the work it leaves running stays in the client's reach.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use conveyor_shared::events::{Delivery, Waiter};
use conveyor_shared::model::{LogLevel, TaskEvent, TaskMode, TaskRecord, TaskStatus};
use conveyor_shared::store::{CancelOutcome, Overdue, TaskParts};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;

use super::client_messages::input_request_id;
use super::{ReplyStream, StreamItem, task_not_found};
use crate::rpc::{self, RpcFailure};
use crate::state::AppState;
use crate::wire::{META_RELATED_TASK, Wire};
use rmcp::model::TASKS_EXTENSION_ID;

/// How often a waiting request reads its task again although no event said so: events are only
/// lost when the subscription drops, and then every waiter reads again at once; this is a last
/// line of defence, not the way results arrive.
const SAFETY_RECHECK: Duration = Duration::from_secs(30);

/// Which task to follow, for whom, for how long, and until what.
pub(super) struct Follow {
    /// The task as last known; its status, result and error are updated from events.
    pub task: TaskRecord,
    /// Who follows it: the owner, or an operator.
    pub caller: crate::access::Caller,
    pub progress_token: Option<Value>,
    pub deadline: Duration,
    /// Stop when the task asks for input or becomes the client's task, not only at its end (a
    /// 2026-07-28 synchronous call answers with the input requests, or with the task).
    pub stop_on_input: bool,
    /// Send the task's input requests to the client on the reply stream, as requests it answers
    /// with a POST to any gateway (2025-11-25).
    pub relay_input: bool,
    /// Tag what goes out on the stream with the related-task `_meta` (a `tasks/result` stream).
    pub related_task: bool,
    /// The follow is the client's synchronous call: when the client goes away, its work stops.
    pub cancel_when_gone: bool,
    /// What becomes of the task when the deadline comes.
    pub when_overdue: WhenOverdue,
    /// The reply stream can be resumed after a disconnect, from this point; a tool may then let
    /// the stream close (`ToolContext::release_stream`).
    pub resume: Option<super::resume::ResumePoint>,
    /// Where a result read from Redis (one too large to travel with its event) holds its memory
    /// of the caller's budget until the reply is written.
    pub reply_budget: crate::state::ReplyBudget,
}

/// What a follow does with its task when its deadline comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WhenOverdue {
    /// Nothing: the client's task runs on, and the client asks again (`tasks/result`).
    AskAgain,
    /// The hidden task of a tool's synchronous call becomes the client's task
    /// ([`Stopped::Overdue`]), which it can fetch and cancel.
    Escalate,
    /// The hidden task of an offer's call (`prompts/get`, `resources/read`), which has no task
    /// form, is cancelled: nobody could fetch what it would make.
    Cancel,
}

/// Where a follow stopped.
pub(super) enum Stopped {
    /// The task ended.
    Terminal(TaskRecord),
    /// The task waits for input; `input_requests` holds what is pending.
    InputRequired(TaskRecord),
    /// The hidden task of a synchronous call became the client's task.
    Escalated(TaskRecord),
    /// The wait of a synchronous call ran out: its hidden task became the client's task, which
    /// runs on ([`overdue_failure`] says so to a client that cannot take a task as the answer).
    Overdue(TaskRecord),
}

impl Stopped {
    /// Where a task that stops a follow stopped it (checked in this order).
    fn of(task: TaskRecord) -> Self {
        if task.status.is_terminal() {
            Self::Terminal(task)
        } else if task.mode == TaskMode::Task {
            Self::Escalated(task)
        } else {
            Self::InputRequired(task)
        }
    }
}

/// Follows a task until it is terminal (or, with `stop_on_input`, asks for input or escalates):
/// relays its progress as `notifications/progress` (when the client gave a token) and, with
/// `relay_input`, its requests for input, then yields `finish(stopped)`. `waiter` is a local
/// waiter registered before the task was created with this gateway's inbox among its waiters;
/// without one, the follow registers its own and watches the task (joins its waiters and reads
/// it in one step).
pub(super) fn follow_task<F>(
    state: Arc<AppState>,
    follow: Follow,
    waiter: Option<Waiter>,
    finish: F,
) -> ReplyStream
where
    F: FnOnce(Stopped) -> Result<Value, RpcFailure> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        let task_id = follow.task.task_id.clone();
        let cancel_when_gone = follow.cancel_when_gone;
        if let Some(point) = follow.resume.clone() {
            let _ = tx.send(StreamItem::Resumable(point)).await;
        }
        let outcome = match wait_until_stopped(&state, follow, waiter, &tx).await {
            // The stream was let go on purpose: the client resumes it; the work goes on.
            Ok(None) => return,
            Ok(Some(stopped)) => Ok(stopped),
            Err(e) => Err(e),
        };
        if cancel_when_gone && tx.is_closed() {
            // The client closed its stream: on Streamable HTTP that cancels the request.
            match state.store.cancel_task(&task_id, "", "Cancelled: the client closed the call").await {
                Ok(CancelOutcome::Cancelled) => {
                    tracing::info!(task = %task_id, "the client went away; its call's work is cancelled")
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(task = %task_id, error = %e, "could not cancel the call of a client that went away")
                }
            }
            return;
        }
        let _ = tx.send(StreamItem::Done(outcome.and_then(finish))).await;
    });
    ReceiverStream::new(rx).boxed()
}

/// What goes out on the reply stream before the response.
struct Relay<'a> {
    tx: &'a mpsc::Sender<StreamItem>,
    task_id: String,
    progress_token: Option<Value>,
    relay_input: bool,
    related_task: bool,
    /// Input requests already sent, by round and key, so that each goes out once.
    sent: HashSet<(u64, String)>,
}

impl Relay<'_> {
    fn related_meta(&self) -> Value {
        json!({META_RELATED_TASK: {"taskId": self.task_id}})
    }

    async fn progress(&self, progress: f64, total: Option<f64>, message: Option<String>) {
        let Some(token) = &self.progress_token else { return };
        let mut params = json!({"progressToken": token, "progress": progress});
        if let Some(total) = total {
            params["total"] = json!(total);
        }
        if let Some(message) = message {
            params["message"] = json!(message);
        }
        if self.related_task {
            params["_meta"] = self.related_meta();
        }
        let _ = self.tx.send(StreamItem::Message(rpc::notification("notifications/progress", params))).await;
    }

    /// A message a tool logged, as `notifications/message` (the worker sent it only because the
    /// client asked for its level).
    async fn log(&self, level: LogLevel, logger: String, data: Value) {
        let mut params = json!({"level": level.as_str(), "data": data});
        if !logger.is_empty() {
            params["logger"] = json!(logger);
        }
        if self.related_task {
            params["_meta"] = self.related_meta();
        }
        let _ = self.tx.send(StreamItem::Message(rpc::notification("notifications/message", params))).await;
    }

    /// Sends each pending request not sent yet, as a request to the client whose id names the
    /// task and the key ([`input_request_id`]).
    async fn input_requests(&mut self, task: &TaskRecord) {
        if !self.relay_input || task.status != TaskStatus::InputRequired {
            return;
        }
        let Some(requests) = task.input_requests.as_ref().and_then(Value::as_object) else { return };
        for (key, request) in requests {
            // A key asked again in a later round is a new question, sent again.
            let round = task.input_rounds.get(key).copied().unwrap_or(0);
            if !self.sent.insert((round, key.clone())) {
                continue;
            }
            let method = request.get("method").cloned().unwrap_or(Value::Null);
            let mut params = request.get("params").cloned().unwrap_or_else(|| json!({}));
            if self.related_task
                && let Some(object) = params.as_object_mut()
            {
                object.insert("_meta".to_owned(), self.related_meta());
            }
            let message = json!({
                "jsonrpc": "2.0", "id": input_request_id(&self.task_id, round, key), "method": method, "params": params,
            });
            let _ = self.tx.send(StreamItem::Message(message)).await;
        }
    }
}

/// Waits for where the follow stops; `None` when the stream was released for the client to
/// resume it later.
async fn wait_until_stopped(
    state: &AppState,
    follow: Follow,
    waiter: Option<Waiter>,
    tx: &mpsc::Sender<StreamItem>,
) -> Result<Option<Stopped>, RpcFailure> {
    let Follow {
        mut task,
        caller,
        progress_token,
        deadline,
        stop_on_input,
        relay_input,
        related_task,
        resume,
        reply_budget,
        when_overdue,
        ..
    } = follow;
    // Whether a task as read from Redis stops the follow.
    let stops = |task: &TaskRecord| {
        task.status.is_terminal()
            || (stop_on_input && (task.mode == TaskMode::Task || task.status == TaskStatus::InputRequired))
    };
    let task_id = task.task_id.clone();
    let mut relay = Relay {
        tx,
        task_id: task_id.clone(),
        progress_token,
        relay_input,
        related_task,
        sent: HashSet::new(),
    };
    let give_up = Instant::now() + deadline;
    let hub = state.store.events().await?;
    let shard = state.store.shard_of(&task_id).ok_or_else(|| task_not_found(&task_id))?;
    let inbox = hub.inbox(shard);
    // What a settled task or one that asks for input holds is read in the caller's budget, which
    // the reply keeps until it is written.
    let read = async |task_id: &str| -> Result<TaskRecord, RpcFailure> {
        // A synchronous call's hidden task is the follower's to read.
        let reader = crate::reads::Reader {
            hidden: true,
            ..crate::reads::Reader::new(&caller, "follow", TaskParts::OUTCOME)
        };
        match crate::reads::read_task(state, reader, task_id).await? {
            Some(crate::reads::Found::Read(held)) => {
                let held = *held;
                reply_budget.hold(held.permit);
                Ok(held.detail.task)
            }
            _ => Err(task_not_found(task_id)),
        }
    };
    // Joins the task's waiters and reads it, without its result: that is read (in the budget)
    // only when the task has settled.
    let watch = async |task_id: &str| -> Result<TaskRecord, RpcFailure> {
        let task = match state.store.watch_task_without_result(task_id, &inbox, caller.owner_filter()).await?
        {
            Some(t) if caller.may_see(&t.owner) => t,
            Some(_) => {
                super::audit_denied(&caller, "follow", task_id, "the task belongs to another principal");
                return Err(task_not_found(task_id));
            }
            None => return Err(task_not_found(task_id)),
        };
        if task.status.is_terminal() {
            let mut settled = read(task_id).await?;
            settled.call = task.call;
            return Ok(settled);
        }
        Ok(task)
    };
    let mut waiter = match waiter {
        Some(waiter) => waiter,
        None => {
            let waiter = hub.waiter(&task_id);
            task = Box::pin(watch(&task_id)).await?;
            // A follow that was given no progress token relays the one the call asked with.
            if relay.progress_token.is_none() {
                relay.progress_token = task.call.progress_token.clone();
            }
            if stops(&task) {
                return Ok(Some(Stopped::of(task)));
            }
            relay.input_requests(&task).await;
            waiter
        }
    };
    // The rare steps below (a read, a watch, an escalation) run boxed, so that the follow of a
    // call, spawned once per call, stays small.
    let mut recheck = Instant::now() + SAFETY_RECHECK;
    loop {
        tokio::select! {
            delivery = waiter.recv() => match delivery {
                Some(Delivery::Event(TaskEvent::Progress { progress, total, message })) => {
                    relay.progress(progress, total, message).await;
                }
                Some(Delivery::Event(TaskEvent::Log { level, logger, data })) => {
                    relay.log(level, logger, data).await;
                }
                Some(Delivery::Event(TaskEvent::Reconnect { retry_ms })) => {
                    // Only a stream the client can resume is let go; any other waits on.
                    if resume.is_some() {
                        let _ = tx.send(StreamItem::Release { retry_ms }).await;
                        return Ok(None);
                    }
                }
                Some(Delivery::Event(TaskEvent::Status { status, message, result, error, .. })) if status.is_terminal() => {
                    // The event carries the result when it is small: answer without a read.
                    if result.is_some() || error.is_some() || status == TaskStatus::Cancelled {
                        task.status = status;
                        task.status_message = message;
                        task.result = result;
                        task.error = error;
                        return Ok(Some(Stopped::Terminal(task)));
                    }
                    let mut settled = Box::pin(read(&task_id)).await?;
                    settled.call = std::mem::take(&mut task.call);
                    return Ok(Some(Stopped::Terminal(settled)));
                }
                Some(Delivery::Event(TaskEvent::Status { escalated: true, status, message, .. })) if stop_on_input => {
                    task.status = status;
                    task.status_message = message;
                    task.mode = TaskMode::Task;
                    return Ok(Some(Stopped::Escalated(task)));
                }
                Some(Delivery::Event(TaskEvent::Status {
                    status: TaskStatus::InputRequired, message, input_requests, input_rounds, ..
                })) => {
                    // The event carries the requests when they are small; else they are read.
                    match input_requests {
                        Some(requests) => {
                            task.status = TaskStatus::InputRequired;
                            task.status_message = message;
                            task.input_requests = Some(requests);
                            task.input_rounds = *input_rounds;
                        }
                        None => {
                            let call = std::mem::take(&mut task.call);
                            task = Box::pin(read(&task_id)).await?;
                            task.call = call;
                        }
                    }
                    if stops(&task) {
                        return Ok(Some(Stopped::of(task)));
                    }
                    relay.input_requests(&task).await;
                }
                Some(Delivery::Event(TaskEvent::Status { status, message, .. })) => {
                    task.status = status;
                    task.status_message = message;
                }
                Some(Delivery::Event(TaskEvent::Expired)) => return Err(task_not_found(&task_id)),
                // Events may have been lost (the subscription dropped): read the task again.
                Some(Delivery::Resync) => {
                    task = Box::pin(watch(&task_id)).await?;
                    if stops(&task) {
                        return Ok(Some(Stopped::of(task)));
                    }
                    relay.input_requests(&task).await;
                }
                None => return Err(RpcFailure::internal("this gateway's event hub stopped")),
            },
            () = tokio::time::sleep_until(recheck) => {
                recheck = Instant::now() + SAFETY_RECHECK;
                task = Box::pin(watch(&task_id)).await?;
                if stops(&task) {
                    return Ok(Some(Stopped::of(task)));
                }
                relay.input_requests(&task).await;
            }
            () = tokio::time::sleep_until(give_up) => {
                match when_overdue {
                    WhenOverdue::Escalate => {}
                    WhenOverdue::AskAgain => {
                        return Err(RpcFailure::internal(format!(
                            "Task `{task_id}` is still running after {deadline:?}; it goes on, ask again later"
                        )));
                    }
                    WhenOverdue::Cancel => {
                        let message = "Cancelled: it took longer than the server waits for a synchronous call";
                        Box::pin(state.store.cancel_task(&task_id, "", message)).await?;
                        return Err(RpcFailure::internal(format!(
                            "The request did not finish within {} s, as long as this server waits (CONVEYOR_SYNC_TIMEOUT_MS); its work was stopped",
                            deadline.as_secs_f64()
                        )));
                    }
                }
                // The work runs on: as the client's task, which it can fetch and cancel, never
                // as a hidden one out of its reach.
                let retention = super::index_retention_ms(state);
                return match Box::pin(state.store.escalate_overdue(&task_id, &task.owner, retention)).await? {
                    Overdue::Escalated => {
                        tracing::info!(task = %task_id, waited = ?deadline, "a synchronous call outlived its wait; it is the client's task now");
                        task.mode = TaskMode::Task;
                        Ok(Some(Stopped::Overdue(task)))
                    }
                    // It settled just now: its outcome is the call's answer after all.
                    Overdue::Settled => {
                        let mut settled = Box::pin(read(&task_id)).await?;
                        settled.call = std::mem::take(&mut task.call);
                        Ok(Some(Stopped::Terminal(settled)))
                    }
                    Overdue::Missing => Err(task_not_found(&task_id)),
                };
            }
            () = tx.closed() => {
                return Err(RpcFailure::internal("the client went away"));
            }
            () = state.shutdown.cancelled() => {
                return Err(RpcFailure::internal(format!(
                    "This gateway is shutting down; task `{task_id}` goes on. Ask again (tasks/get, tasks/result) on any gateway."
                ))
                .with_data(json!({"retryable": true, "taskId": task_id})));
            }
        }
    }
}

/// The answer to a synchronous call whose wait ran out, for a client that cannot take a task as
/// the call's answer (2025-11-25, or 2026-07-28 without the tasks extension): an error that names
/// the task the call became, what it is, and how to fetch and cancel it.
pub(super) fn overdue_failure(wire: Wire, task: &TaskRecord, waited: Duration) -> RpcFailure {
    let task_id = &task.task_id;
    let status = task.status_record();
    let (how, shown) = match wire {
        Wire::V2025 => (
            "fetch it with tasks/get and tasks/result, stop it with tasks/cancel".to_owned(),
            crate::wire::task_2025(&status, task.call.poll_interval_ms),
        ),
        Wire::V2026 => (
            format!(
                "fetch it with tasks/get, stop it with tasks/cancel (declaring the {TASKS_EXTENSION_ID} extension)"
            ),
            json!(crate::wire::task_2026(&status, task.call.poll_interval_ms)),
        ),
    };
    RpcFailure::internal(format!(
        "The call is still running after {} s, as long as this server waits for a synchronous call; \
         it goes on as task `{task_id}`: {how}",
        waited.as_secs_f64()
    ))
    .with_data(json!({
        "taskId": task_id,
        "task": shown,
        "reason": "the call outlived the server's wait for a synchronous call (CONVEYOR_SYNC_TIMEOUT_MS); it became a task",
        "_meta": {META_RELATED_TASK: {"taskId": task_id}},
    }))
}
