//! `conveyor tasks ls|show|watch|cancel`: the caller's tasks through the endpoint, read from the
//! task resources the gateway serves (`conveyor://tasks`, `conveyor://tasks/{id}`) and cancelled
//! with `tasks/cancel`. An operator's token sees every unfinished task.

use std::time::Duration;

use rmcp::model::{CancelTaskParams, GetTaskParams, TaskPayload};
use serde_json::{Value, json};

use crate::call::report;
use crate::display::{Display, duration, status_word};
use crate::exit::{ClientError, Exit};
use crate::follow::{self, OnInterrupt, state_uri};
use crate::session::{Endpoint, Session, connect, read_json, request_error};

/// Most pages `ls` reads (100 tasks each).
const MAX_PAGES: usize = 100;

async fn with_session<F, Fut>(endpoint: &Endpoint, f: F) -> Result<Exit, ClientError>
where
    F: FnOnce(Session) -> Fut,
    Fut: std::future::Future<Output = (Session, Result<Exit, ClientError>)>,
{
    let session = connect(endpoint).await?;
    let (session, outcome) = f(session).await;
    let _ = session.cancel().await;
    outcome
}

/// `tasks ls`: the caller's tasks, oldest first; `all` includes settled ones.
pub async fn ls(endpoint: &Endpoint, all: bool, json: bool) -> Result<Exit, ClientError> {
    with_session(endpoint, |session| async move {
        let outcome = list(&session, all, json).await;
        (session, outcome)
    })
    .await
}

async fn list(session: &Session, all: bool, json: bool) -> Result<Exit, ClientError> {
    let mut tasks: Vec<Value> = Vec::new();
    let mut uri = "conveyor://tasks".to_owned();
    for _ in 0..MAX_PAGES {
        let page = read_json(session, &uri).await?;
        tasks.extend(page.get("tasks").and_then(Value::as_array).cloned().unwrap_or_default());
        match page.get("nextCursor").and_then(Value::as_str) {
            Some(cursor) => uri = format!("conveyor://tasks?cursor={cursor}"),
            None => break,
        }
    }
    let settled = |t: &Value| {
        matches!(t.get("status").and_then(Value::as_str), Some("completed" | "failed" | "cancelled"))
    };
    if !all {
        tasks.retain(|t| !settled(t));
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&json!(tasks)).unwrap_or_default());
        return Ok(Exit::Completed);
    }
    if tasks.is_empty() {
        println!("{}", if all { "no tasks" } else { "no unfinished tasks (--all shows finished ones too)" });
        return Ok(Exit::Completed);
    }
    println!("{:<32}  {:<20}  {:<14}  {:>5}  {:<20}  message", "task", "tool", "status", "done", "created");
    for task in &tasks {
        let text = |k: &str| task.get(k).and_then(Value::as_str).unwrap_or_default();
        let done =
            match (task.get("progress").and_then(Value::as_f64), task.get("total").and_then(Value::as_f64)) {
                (Some(p), Some(t)) if t > 0.0 => format!("{:.0}%", (p / t * 100.0).clamp(0.0, 100.0)),
                _ => "-".to_owned(),
            };
        let status = text("status");
        // Padding is computed on the plain word: colour codes take no columns.
        let padded = format!("{}{}", status_word(status), " ".repeat(14usize.saturating_sub(status.len())));
        println!(
            "{:<32}  {:<20}  {padded}  {done:>5}  {:<20}  {}",
            text("taskId"),
            text("tool"),
            text("createdAt").get(..19).unwrap_or(text("createdAt")),
            text("statusMessage")
        );
    }
    Ok(Exit::Completed)
}

/// `tasks show ID`: the task, its nodes, and its result once it has one.
pub async fn show(endpoint: &Endpoint, task_id: &str, json: bool) -> Result<Exit, ClientError> {
    let task_id = task_id.to_owned();
    with_session(endpoint, |session| async move {
        let outcome = show_task(&session, &task_id, json).await;
        (session, outcome)
    })
    .await
}

async fn show_task(session: &Session, task_id: &str, json: bool) -> Result<Exit, ClientError> {
    let mut state = read_json(session, &state_uri(task_id)).await.map_err(|e| not_yours(task_id, e))?;
    let status = state.get("status").and_then(Value::as_str).unwrap_or_default().to_owned();
    let outcome = if matches!(status.as_str(), "completed" | "failed") {
        let got = session
            .get_task(GetTaskParams::new(task_id.to_owned()))
            .await
            .map_err(|e| request_error("tasks/get", e))?;
        match got.task.payload {
            TaskPayload::Completed { result } => Some(("result", Value::Object(result))),
            TaskPayload::Failed { error } => Some(("error", Value::Object(error))),
            _ => None,
        }
    } else {
        None
    };
    if json {
        if let (Some((key, value)), Some(object)) = (&outcome, state.as_object_mut()) {
            object.insert((*key).to_owned(), value.clone());
        }
        println!("{}", serde_json::to_string_pretty(&state).unwrap_or_default());
        return Ok(Exit::Completed);
    }
    let text = |k: &str| state.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
    println!("task      {}", text("taskId"));
    println!("tool      {}", text("tool"));
    let message =
        state.get("statusMessage").and_then(Value::as_str).map(|m| format!(" ({m})")).unwrap_or_default();
    println!("status    {}{message}", status_word(&status));
    println!("owner     {}", text("owner"));
    println!("created   {}", text("createdAt"));
    println!("updated   {}", text("lastUpdatedAt"));
    if let (Some(p), Some(t)) =
        (state.get("progress").and_then(Value::as_f64), state.get("total").and_then(Value::as_f64))
    {
        println!("progress  {p} of {t}");
    }
    let nodes = state.get("nodes").and_then(Value::as_array).cloned().unwrap_or_default();
    if !nodes.is_empty() {
        println!();
        println!(
            "{:<20} {:<20} {:<12} {:>8} {:>10}  worker",
            "node", "tool", "status", "attempts", "duration"
        );
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        for node in &nodes {
            let field = |k: &str| node.get(k).and_then(Value::as_str).unwrap_or_default();
            let (started, finished) = (
                node.get("startedAtMs").and_then(Value::as_u64),
                node.get("finishedAtMs").and_then(Value::as_u64),
            );
            let took = match (started, finished) {
                (Some(s), Some(f)) => duration(f.saturating_sub(s)),
                (Some(s), None) => format!("{} …", duration(now.saturating_sub(s))),
                _ => "-".to_owned(),
            };
            let status = field("status");
            let padded =
                format!("{}{}", status_word(status), " ".repeat(12usize.saturating_sub(status.len())));
            println!(
                "{:<20} {:<20} {padded} {:>8} {:>10}  {}",
                field("nodeId"),
                field("tool"),
                node.get("attempt").and_then(Value::as_u64).unwrap_or(0),
                took,
                field("worker")
            );
            if let Some(error) = node.get("error").filter(|e| !e.is_null()) {
                let message = error
                    .get("message")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .unwrap_or_else(|| error.to_string());
                println!("{:<20} error: {message}", "");
            }
        }
    }
    match outcome {
        Some(("result", result)) => {
            println!();
            crate::display::print_result(&result, false);
        }
        Some((_, error)) => {
            println!();
            println!("error     {}", error.get("message").and_then(Value::as_str).unwrap_or_default());
        }
        None => {}
    }
    Ok(Exit::Completed)
}

fn not_yours(task_id: &str, error: ClientError) -> ClientError {
    if error.exit == Exit::Usage {
        ClientError::usage(format!("no task `{task_id}` of yours (unknown, or expired after its TTL)"))
    } else {
        error
    }
}

/// `tasks watch ID`: the live view of a task, until it settles; Ctrl-C stops watching.
pub async fn watch(
    endpoint: &Endpoint,
    task_id: &str,
    json: bool,
    poll_ms: Option<u64>,
) -> Result<Exit, ClientError> {
    let task_id = task_id.to_owned();
    with_session(endpoint, |session| async move {
        let outcome = async {
            let first =
                read_json(&session, &state_uri(&task_id)).await.map_err(|e| not_yours(&task_id, e))?;
            let tool = first.get("tool").and_then(Value::as_str).unwrap_or("task").to_owned();
            let got = session
                .get_task(GetTaskParams::new(task_id.clone()))
                .await
                .map_err(|e| request_error("tasks/get", e))?;
            let mut interval = Duration::from_millis(got.task.task.poll_interval_ms.unwrap_or(1000).max(50));
            if let Some(ms) = poll_ms {
                interval = interval.min(Duration::from_millis(ms.max(50)));
            }
            let mut display = Display::new(&tool);
            let ending = follow::follow(&session, &task_id, interval, &mut display, OnInterrupt::Stop).await;
            display.finish();
            Ok(report(&task_id, ending?, json))
        }
        .await;
        (session, outcome)
    })
    .await
}

/// `tasks cancel ID`: asks the task to stop and says how it ended.
pub async fn cancel(endpoint: &Endpoint, task_id: &str) -> Result<Exit, ClientError> {
    let task_id = task_id.to_owned();
    with_session(endpoint, |session| async move {
        let outcome = async {
            session
                .cancel_task(CancelTaskParams::new(task_id.clone()))
                .await
                .map_err(|e| not_yours(&task_id, request_error("tasks/cancel", e)))?;
            let got = session
                .get_task(GetTaskParams::new(task_id.clone()))
                .await
                .map_err(|e| request_error("tasks/get", e))?;
            match got.task.payload {
                TaskPayload::Cancelled => {
                    eprintln!("task {task_id} cancelled");
                    Ok(Exit::Completed)
                }
                other => {
                    let status = other.status();
                    eprintln!("task {task_id} had already ended ({status:?}); nothing to cancel");
                    Ok(Exit::Completed)
                }
            }
        }
        .await;
        (session, outcome)
    })
    .await
}
