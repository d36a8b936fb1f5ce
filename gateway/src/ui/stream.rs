//! `GET /ui/api/stream`: Server-Sent Events that keep the page current without a reload. The
//! gateway holds no task state and hears no event for tasks it did not create, so each open
//! stream looks at Redis every [`STREAM_INTERVAL`] and sends an event only when something changed;
//! a comment every [`KEEP_ALIVE`] keeps proxies from closing a quiet stream.
//!
//! What a look reads: the list, status fields only (as every listing); and of the open task only
//! its version (status, update time, number of fields) unless that moved since the detail was
//! last sent, so that a finished task with a large result is read once, not every tick. A detail
//! read holds its memory of the caller's in-flight budget until its event has been handed on.
//! With a poll gap configured, the stream reads the list and the task no faster than the gap (it
//! shares the caller's gates with `tasks/get` and `GET /ui/api/tasks`): a look the gap refuses is
//! skipped, not reported.
//!
//! Bounds: at most [`MAX_STREAMS`] streams per gateway (each costs a few Redis reads per
//! interval), of which one principal may hold [`MAX_STREAMS_PER_PRINCIPAL`] (and each counts among
//! the principal's streams of every kind), the list at most [`super::LIST_LIMIT`] tasks, and each stream ends after
//! [`MAX_LIFETIME`] so that the page reconnects and its token is checked again (a revoked token
//! stops working within that time). The stream also ends when the gateway shuts down.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{HeaderValue, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, MissedTickBehavior};

use super::view;
use super::{ApiCaller, ApiError};
use crate::access::Caller;
use crate::reads::{Found, Reader, read_task};
use crate::state::AppState;
use conveyor_shared::store::GateKind;

/// How often an open stream reads Redis.
pub const STREAM_INTERVAL: Duration = Duration::from_millis(500);
pub use crate::state::{MAX_STREAMS, MAX_STREAMS_PER_PRINCIPAL};
/// How often a quiet stream sends a comment.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// How long one stream lasts before the page opens the next.
const MAX_LIFETIME: Duration = Duration::from_secs(300);
/// Longest task id the stream follows; longer ones name no task.
const MAX_TASK_ID: usize = 128;

#[derive(Debug, Deserialize)]
pub(super) struct StreamQuery {
    /// The task the page has open, whose detail the stream sends too.
    task: Option<String>,
}

pub(super) async fn open(
    State(state): State<Arc<AppState>>,
    ApiCaller(caller): ApiCaller,
    Query(query): Query<StreamQuery>,
) -> Response {
    let Some(own) = state.ui_streams_per_principal.take(&caller.principal) else {
        tracing::info!(target: "conveyor::audit", event = "denied", principal = %caller.principal, reason = "web view streams per principal", "web view stream refused: {MAX_STREAMS_PER_PRINCIPAL} of this principal are open");
        return ApiError::TooManyOwnStreams.into_response();
    };
    let Some(any) = state.streams.take(&caller.principal) else {
        return ApiError::Refused(crate::methods::too_many_streams(&state)).into_response();
    };
    let Ok(permit) = state.ui_streams.clone().try_acquire_owned() else {
        tracing::info!(principal = %caller.principal, "web view stream refused: {MAX_STREAMS} are open");
        return ApiError::TooManyStreams.into_response();
    };
    let task = query.task.filter(|t| !t.is_empty() && t.len() <= MAX_TASK_ID);
    let mut ticks = tokio::time::interval(STREAM_INTERVAL);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let watch = Watch {
        state,
        caller,
        task,
        ticks,
        ends: Instant::now() + MAX_LIFETIME,
        sent_list: None,
        sent_task: SentTask::Nothing,
        sent_problem: None,
        ready: Vec::new(),
        held: None,
        _permit: (permit, own, any),
    };
    let events = futures::stream::unfold(watch, |mut watch| async move {
        let event = watch.next().await?;
        Some((Ok::<_, Infallible>(event), watch))
    });
    let mut response = Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // nginx buffers responses unless told not to; events must arrive as they are sent.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// One open stream: what it follows and what it last sent.
struct Watch {
    state: Arc<AppState>,
    caller: Caller,
    task: Option<String>,
    ticks: tokio::time::Interval,
    ends: Instant,
    /// A digest of the list as last sent.
    sent_list: Option<u64>,
    sent_task: SentTask,
    sent_problem: Option<String>,
    /// Events read and not sent yet, last first.
    ready: Vec<Event>,
    /// What the last detail read holds of the caller's budget: given back when the stream is
    /// asked for an event after the last one read has been handed on.
    held: Option<crate::state::BudgetPermit>,
    _permit: (OwnedSemaphorePermit, crate::state::Held, crate::state::Held),
}

/// What the stream last sent of the open task.
#[derive(Default)]
enum SentTask {
    #[default]
    Nothing,
    /// Its detail at this version (and a digest of the detail), and when to read it again even
    /// if its version has not moved (a live task: a change that moves none of status, update time
    /// and field count is seen that late).
    Detail { version: String, digest: u64, reload: Instant },
    /// It was found missing: an unknown task never appears, and a gone one never returns.
    Missing,
}

/// How long a live task's detail is shown without reading it again, if its version stays.
const RELOAD: Duration = Duration::from_secs(10);

impl Watch {
    /// The next event, reading Redis as often as it takes; `None` ends the stream.
    async fn next(&mut self) -> Option<Event> {
        // Every event read has been handed on: what the read held goes back.
        if self.ready.is_empty() {
            self.held = None;
        }
        loop {
            if let Some(event) = self.ready.pop() {
                return Some(event);
            }
            tokio::select! {
                _ = self.ticks.tick() => {}
                () = tokio::time::sleep_until(self.ends) => return None,
                () = self.state.shutdown.cancelled() => return None,
            }
            let mut events = Vec::new();
            let problem = match self.read(&mut events).await {
                Ok(()) => None,
                Err(e) => Some(e.to_string()),
            };
            if problem != self.sent_problem {
                // `null` when Redis answers again after a failure.
                events.push(Event::default().event("problem").data(json!({"error": problem}).to_string()));
                self.sent_problem = problem;
            }
            events.reverse();
            self.ready = events;
        }
    }

    /// Reads the list and the open task, adding an event for each that changed.
    async fn read(&mut self, events: &mut Vec<Event>) -> Result<(), ApiError> {
        let state = self.state.clone();
        match skip_too_soon(
            crate::reads::pass_list_gate(&state, &self.caller, super::api::LISTING, "first").await,
        )? {
            None => {}
            Some(()) => {
                let list = view::task_list(&state.store, &self.caller).await?.to_string();
                let digest = digest(&list);
                if self.sent_list != Some(digest) {
                    events.push(Event::default().event("tasks").data(list));
                    self.sent_list = Some(digest);
                }
            }
        }
        let Some(task_id) = self.task.clone() else { return Ok(()) };
        let since = match &self.sent_task {
            SentTask::Missing => return Ok(()),
            SentTask::Detail { version, reload, .. } if Instant::now() < *reload => Some(version.clone()),
            _ => None,
        };
        let reader =
            Reader { since: since.as_deref(), ..Reader::new(&self.caller, "ui/stream", super::api::DETAIL) }
                .gated(GateKind::Poll);
        let found = match skip_too_soon(read_task(&state, reader, &task_id).await)? {
            None => return Ok(()),
            Some(found) => found,
        };
        match found {
            None => {
                events.push(Event::default().event("missing").data(json!({"taskId": task_id}).to_string()));
                self.sent_task = SentTask::Missing;
            }
            Some(Found::Same) => {}
            Some(Found::Read(held)) => {
                let held = *held;
                let detail = view::task_detail(held.task(), &held.detail.nodes).to_string();
                let digest = digest(&detail);
                let unchanged = matches!(&self.sent_task, SentTask::Detail { digest: d, .. } if *d == digest);
                // A finished task never changes: it is not read again, whatever the interval.
                let reload =
                    if held.task().status.is_terminal() { self.ends } else { Instant::now() + RELOAD };
                self.sent_task = SentTask::Detail { version: held.detail.version.clone(), digest, reload };
                if !unchanged {
                    events.push(Event::default().event("task").data(detail));
                    self.held = Some(held.permit);
                }
            }
        }
        Ok(())
    }
}

/// A read refused by the poll gap is skipped this tick (`None`); any other failure is one.
fn skip_too_soon<T>(read: Result<T, crate::rpc::RpcFailure>) -> Result<Option<T>, ApiError> {
    match read {
        Ok(value) => Ok(Some(value)),
        Err(failure)
            if failure.error.data.as_ref().and_then(|d| d.get("limit")).and_then(|l| l.as_str())
                == Some("min_poll_gap_ms") =>
        {
            Ok(None)
        }
        Err(failure) => Err(ApiError::Refused(failure)),
    }
}

/// A digest of what was sent, to tell whether the next read differs without keeping it.
fn digest(text: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut hasher);
    hasher.finish()
}
