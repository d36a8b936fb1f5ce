//! `GET /ui/api/stream`: Server-Sent Events that keep the page current without a reload. The
//! gateway holds no task state and hears no event for tasks it did not create, so each open
//! stream reads Redis every [`STREAM_INTERVAL`] (the list, and the open task with its nodes) and
//! sends an event only when what it read differs from what it last sent; a comment every
//! [`KEEP_ALIVE`] keeps proxies from closing a quiet stream.
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
use crate::state::AppState;

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
        sent_task: None,
        sent_problem: None,
        ready: Vec::new(),
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
    sent_list: Option<String>,
    /// The open task's detail as last sent; `Some("")` once it was found missing.
    sent_task: Option<String>,
    sent_problem: Option<String>,
    /// Events read and not sent yet, last first.
    ready: Vec<Event>,
    _permit: (OwnedSemaphorePermit, crate::state::Held, crate::state::Held),
}

impl Watch {
    /// The next event, reading Redis as often as it takes; `None` ends the stream.
    async fn next(&mut self) -> Option<Event> {
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
                Err(e) => Some(ApiError::from(e).to_string()),
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
    async fn read(&mut self, events: &mut Vec<Event>) -> Result<(), conveyor_shared::StoreError> {
        let store = &self.state.store;
        let list = view::task_list(store, &self.caller).await?.to_string();
        if self.sent_list.as_ref() != Some(&list) {
            events.push(Event::default().event("tasks").data(list.clone()));
            self.sent_list = Some(list);
        }
        let Some(task_id) = &self.task else { return Ok(()) };
        if self.sent_task.as_deref() == Some("") {
            // Found missing once: an unknown task never appears, and a gone one never returns.
            return Ok(());
        }
        let detail = match crate::methods::visible_task(store, &self.caller, "ui/stream", task_id).await? {
            Some(task) => {
                let nodes = store.get_nodes(task_id).await?;
                view::task_detail(&task, &nodes).to_string()
            }
            None => String::new(),
        };
        if self.sent_task.as_ref() != Some(&detail) {
            let event = if detail.is_empty() {
                Event::default().event("missing").data(json!({"taskId": task_id}).to_string())
            } else {
                Event::default().event("task").data(detail.clone())
            };
            events.push(event);
            self.sent_task = Some(detail);
        }
        Ok(())
    }
}
