//! A request that waits for a task's end: relays progress from the gateway's inbox, answers from
//! the terminal event (which carries a small result), and reads the task again only when events
//! may have been lost.

use std::sync::Arc;
use std::time::Duration;

use conveyor_shared::events::{Delivery, Waiter};
use conveyor_shared::model::{TaskEvent, TaskMode, TaskRecord, TaskStatus};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;

use super::{ReplyStream, StreamItem, task_not_found};
use crate::rpc::{self, RpcFailure};
use crate::state::AppState;

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
}

/// Where a follow stopped.
pub(super) enum Stopped {
    /// The task ended.
    Terminal(TaskRecord),
    /// The task waits for input; `input_requests` holds what is pending.
    InputRequired(TaskRecord),
    /// The hidden task of a synchronous call became the client's task.
    Escalated(TaskRecord),
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
/// relays its progress as `notifications/progress` (when the client gave a token), then yields
/// `finish(stopped)`. `waiter` is a local waiter registered before the task was created with this
/// gateway's inbox among its waiters; without one, the follow registers its own and watches the
/// task (joins its waiters and reads it in one step).
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
        let outcome = wait_terminal(&state, follow, waiter, &tx).await;
        let _ = tx.send(StreamItem::Done(outcome.and_then(finish))).await;
    });
    ReceiverStream::new(rx).boxed()
}

async fn wait_terminal(
    state: &AppState,
    follow: Follow,
    waiter: Option<Waiter>,
    tx: &mpsc::Sender<StreamItem>,
) -> Result<Stopped, RpcFailure> {
    let Follow { mut task, caller, progress_token, deadline, stop_on_input } = follow;
    // Whether a task as read from Redis stops the follow.
    let stops = |task: &TaskRecord| {
        task.status.is_terminal()
            || (stop_on_input && (task.mode == TaskMode::Task || task.status == TaskStatus::InputRequired))
    };
    let task_id = task.task_id.clone();
    let give_up = Instant::now() + deadline;
    let hub = state.store.events().await?;
    let shard = state.store.shard_of(&task_id).ok_or_else(|| task_not_found(&task_id))?;
    let inbox = hub.inbox(shard);
    let watch = async |task_id: &str| -> Result<TaskRecord, RpcFailure> {
        match state.store.watch_task(task_id, &inbox).await? {
            Some(t) if caller.may_see(&t.owner) => Ok(t),
            _ => Err(task_not_found(task_id)),
        }
    };
    let mut waiter = match waiter {
        Some(waiter) => waiter,
        None => {
            let waiter = hub.waiter(&task_id);
            task = watch(&task_id).await?;
            if stops(&task) {
                return Ok(Stopped::of(task));
            }
            waiter
        }
    };
    let mut recheck = Instant::now() + SAFETY_RECHECK;
    loop {
        tokio::select! {
            delivery = waiter.recv() => match delivery {
                Some(Delivery::Event(TaskEvent::Progress { progress, total, message })) => {
                    if let Some(token) = &progress_token {
                        let mut params = json!({"progressToken": token, "progress": progress});
                        if let Some(total) = total { params["total"] = json!(total); }
                        if let Some(message) = message { params["message"] = json!(message); }
                        let _ = tx.send(StreamItem::Notification(rpc::notification("notifications/progress", params))).await;
                    }
                }
                Some(Delivery::Event(TaskEvent::Status { status, message, result, error, .. })) if status.is_terminal() => {
                    // The event carries the result when it is small: answer without a read.
                    if result.is_some() || error.is_some() || status == TaskStatus::Cancelled {
                        task.status = status;
                        task.status_message = message;
                        task.result = result;
                        task.error = error;
                        return Ok(Stopped::Terminal(task));
                    }
                    let task = state.store.get_task(&task_id).await?.ok_or_else(|| task_not_found(&task_id))?;
                    return Ok(Stopped::Terminal(task));
                }
                Some(Delivery::Event(TaskEvent::Status { escalated: true, status, message, .. })) if stop_on_input => {
                    task.status = status;
                    task.status_message = message;
                    task.mode = TaskMode::Task;
                    return Ok(Stopped::Escalated(task));
                }
                Some(Delivery::Event(TaskEvent::Status { status: TaskStatus::InputRequired, message, input_requests, .. })) if stop_on_input => {
                    // The event carries the requests when they are small; else they are read.
                    if let Some(requests) = input_requests {
                        task.status = TaskStatus::InputRequired;
                        task.status_message = message;
                        task.input_requests = Some(requests);
                        return Ok(Stopped::InputRequired(task));
                    }
                    task = state.store.get_task(&task_id).await?.ok_or_else(|| task_not_found(&task_id))?;
                    if stops(&task) {
                        return Ok(Stopped::of(task));
                    }
                }
                Some(Delivery::Event(TaskEvent::Status { status, message, .. })) => {
                    task.status = status;
                    task.status_message = message;
                }
                Some(Delivery::Event(TaskEvent::Expired)) => return Err(task_not_found(&task_id)),
                // Events may have been lost (the subscription dropped): read the task again.
                Some(Delivery::Resync) => {
                    task = watch(&task_id).await?;
                    if stops(&task) {
                        return Ok(Stopped::of(task));
                    }
                }
                None => return Err(RpcFailure::internal("this gateway's event hub stopped")),
            },
            () = tokio::time::sleep_until(recheck) => {
                recheck = Instant::now() + SAFETY_RECHECK;
                task = watch(&task_id).await?;
                if stops(&task) {
                    return Ok(Stopped::of(task));
                }
            }
            () = tokio::time::sleep_until(give_up) => {
                return Err(RpcFailure::internal(format!(
                    "Task `{task_id}` is still running after {deadline:?}; it goes on, ask again later"
                )));
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
