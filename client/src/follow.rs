//! Following a task until it settles: read `conveyor://tasks/{id}` at the poll interval (status,
//! message, progress and nodes in one request), draw it, answer its questions in the terminal,
//! and on Ctrl-C either cancel it (`conveyor call`) or stop watching (`conveyor tasks watch`).
//! Once it settles, `tasks/get` brings its result or error.

use std::time::Duration;

use rmcp::model::{
    CancelTaskParams, GetTaskParams, InputRequest, InputRequests, InputResponses, TaskPayload,
    UpdateTaskParams,
};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::display::{Display, TaskState};
use crate::exit::{ClientError, Exit};
use crate::form;
use crate::session::{Session, read_json, request_error};

/// How long a cancelled task may take to say so before the client stops waiting.
const CANCEL_WAIT: Duration = Duration::from_secs(15);

/// What Ctrl-C does while following.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnInterrupt {
    /// Cancel the task, wait until it says `cancelled`.
    Cancel,
    /// Stop watching; the task goes on.
    Stop,
}

/// How following ended.
#[derive(Debug)]
pub enum Ending {
    /// The tool's `CallToolResult` (which may say `isError`).
    Completed(Value),
    /// The JSON-RPC error the task failed with.
    Failed(Value),
    /// Cancelled: by this client after Ctrl-C (`interrupted`), or by someone else.
    Cancelled { interrupted: bool },
    /// Ctrl-C was pressed twice, or the cancelled task did not settle in time.
    GaveUp,
    /// Ctrl-C while watching: the task goes on.
    StoppedWatching,
    /// The task is gone: expired after its TTL, or never visible to this caller.
    Gone,
}

/// The URI of a task's state resource.
pub fn state_uri(task_id: &str) -> String {
    format!("conveyor://tasks/{task_id}")
}

/// Follows `task_id` until it settles, drawing on `display`.
pub async fn follow(
    session: &Session,
    task_id: &str,
    mut interval: Duration,
    display: &mut Display,
    on_interrupt: OnInterrupt,
) -> Result<Ending, ClientError> {
    let uri = state_uri(task_id);
    let mut interrupted = false;
    let mut cancel_deadline: Option<Instant> = None;
    loop {
        let state = match read_json(session, &uri).await {
            Ok(value) => TaskState::from_json(&value),
            Err(e) if e.exit == Exit::Usage => return Ok(Ending::Gone),
            Err(e) => return Err(e),
        };
        display.update(&state);
        match state.status.as_str() {
            "completed" | "failed" | "cancelled" => return settled(session, task_id, interrupted).await,
            "input_required" if !interrupted => {
                let got = session
                    .get_task(GetTaskParams::new(task_id.to_owned()))
                    .await
                    .map_err(|e| request_error("tasks/get", e))?;
                if let TaskPayload::InputRequired { input_requests } = got.task.payload {
                    match answer(input_requests, display).await? {
                        Some(responses) => {
                            session
                                .update_task(UpdateTaskParams::new(task_id.to_owned(), responses))
                                .await
                                .map_err(|e| request_error("tasks/update", e))?;
                            continue;
                        }
                        None => {
                            if on_interrupt == OnInterrupt::Stop {
                                return Ok(Ending::StoppedWatching);
                            }
                            interrupted = true;
                            cancel(session, task_id, display).await?;
                            cancel_deadline = Some(Instant::now() + CANCEL_WAIT);
                            interval = interval.min(Duration::from_millis(200));
                            continue;
                        }
                    }
                }
            }
            _ => {}
        }
        if cancel_deadline.is_some_and(|d| Instant::now() >= d) {
            display.note(&format!("task {task_id} has not said it is cancelled yet; not waiting any longer"));
            return Ok(Ending::GaveUp);
        }
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            _ = tokio::signal::ctrl_c() => {
                if interrupted {
                    return Ok(Ending::GaveUp);
                }
                match on_interrupt {
                    OnInterrupt::Stop => return Ok(Ending::StoppedWatching),
                    OnInterrupt::Cancel => {
                        interrupted = true;
                        cancel(session, task_id, display).await?;
                        cancel_deadline = Some(Instant::now() + CANCEL_WAIT);
                        // The cancellation is seen sooner than the next poll would see it.
                        interval = interval.min(Duration::from_millis(200));
                    }
                }
            }
        }
    }
}

async fn cancel(session: &Session, task_id: &str, display: &Display) -> Result<(), ClientError> {
    display.note(&format!("Ctrl-C: cancelling task {task_id} (press Ctrl-C again to stop waiting)"));
    session
        .cancel_task(CancelTaskParams::new(task_id.to_owned()))
        .await
        .map_err(|e| request_error("tasks/cancel", e))
}

async fn settled(session: &Session, task_id: &str, interrupted: bool) -> Result<Ending, ClientError> {
    let got = session
        .get_task(GetTaskParams::new(task_id.to_owned()))
        .await
        .map_err(|e| request_error("tasks/get", e))?;
    Ok(match got.task.payload {
        TaskPayload::Completed { result } => Ending::Completed(Value::Object(result)),
        TaskPayload::Failed { error } => Ending::Failed(Value::Object(error)),
        TaskPayload::Cancelled => Ending::Cancelled { interrupted },
        // Read between the resource and tasks/get: a later poll settles it.
        _ => Ending::Cancelled { interrupted },
    })
}

/// Asks the person each request of `requests` in the terminal. `None` when they pressed Ctrl-C.
pub async fn answer(
    requests: InputRequests,
    display: &Display,
) -> Result<Option<InputResponses>, ClientError> {
    let mut questions = Vec::new();
    for (key, request) in requests {
        match request {
            InputRequest::Elicitation(request) => {
                let params = serde_json::to_value(&request.params)
                    .map_err(|e| ClientError::failed(format!("cannot read the question {key}: {e}")))?;
                questions.push((key, params));
            }
            InputRequest::CreateMessage(_) => {
                return Err(ClientError::failed(format!(
                    "the tool asks for a model completion (`{key}`), which conveyor call cannot give; use an MCP client with sampling"
                )));
            }
            InputRequest::ListRoots(_) => {
                return Err(ClientError::failed(format!(
                    "the tool asks for the client's roots (`{key}`), which conveyor call does not have; use an MCP client with roots"
                )));
            }
            _ => {
                return Err(ClientError::failed(format!(
                    "the tool asks for `{key}` in a way this client does not know"
                )));
            }
        }
    }
    display.pause();
    // A blocking read of stdin on a thread of its own, so that Ctrl-C is still heard; a plain
    // thread, not the runtime's blocking pool, whose shutdown would wait for a read that never
    // ends.
    let (done, asking) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut responses = InputResponses::new();
        let mut stderr = std::io::stderr();
        for (key, params) in questions {
            let answer = form::ask(&params, &mut form::Stdin, &mut stderr)
                .unwrap_or_else(|_| json!({"action": "cancel"}));
            responses.insert(key, answer);
        }
        let _ = done.send(responses);
    });
    let answered = tokio::select! {
        answered = asking => answered.map_err(|_| ClientError::failed("asking in the terminal failed"))?,
        _ = tokio::signal::ctrl_c() => {
            display.resume();
            return Ok(None);
        }
    };
    display.resume();
    Ok(Some(answered))
}
