//! Messages from the client that are not requests: its answers to the requests the gateway sent
//! on a response stream (2025-11-25 elicitation, sampling, roots), and notifications (a cancelled
//! synchronous call). Neither gets a reply; what cannot be acted on is logged and dropped.

use std::collections::HashMap;

use conveyor_shared::keys;
use conveyor_shared::model::TaskMode;
use conveyor_shared::store::{AnswerOutcome, CancelOutcome};
use serde_json::{Map, Value};

use crate::access::Caller;
use crate::state::AppState;

/// The JSON-RPC id of a request the gateway sends a client for input: it names the task, the
/// round of its input that asked and the key, so that the answer reaches the asking node through
/// whichever gateway the client posts it to, and answers that question only (the tool may ask
/// the same key again in a later round). The owner check on answering keeps one client from
/// answering another's task.
pub(crate) fn input_request_id(task_id: &str, round: u64, key: &str) -> String {
    format!("conveyor-input/{task_id}/{round}/{key}")
}

/// The task, round and key an input request id names (a key may hold `/`: a graph node's).
fn parse_input_request_id(id: &Value) -> Option<(&str, u64, &str)> {
    let (task_id, rest) = id.as_str()?.strip_prefix("conveyor-input/")?.split_once('/')?;
    let (round, key) = rest.split_once('/')?;
    Some((task_id, round.parse().ok()?, key))
}

/// A request id as text that tells `1` from `"1"`.
pub(crate) fn request_id_text(id: &Value) -> String {
    match id {
        Value::String(s) => format!("s:{s}"),
        other => format!("n:{other}"),
    }
}

/// The client's answer to a request for input: it is the answer to that key of that task.
pub(crate) async fn client_response(state: &AppState, caller: &Caller, id: &Value, answer: Value) {
    let Some((task_id, round, key)) = parse_input_request_id(id) else {
        tracing::debug!(%id, "a response to no request of this server; ignored");
        return;
    };
    let answers = Map::from_iter([(key.to_owned(), answer)]);
    let rounds = HashMap::from([(key.to_owned(), round)]);
    match state.store.answer_input(task_id, &caller.principal, &answers, &rounds).await {
        Ok(AnswerOutcome::Answered { remaining, resumed }) => {
            tracing::debug!(task = %task_id, %key, remaining, resumed, "client answered a request for input");
        }
        Ok(AnswerOutcome::NotWaiting(status)) => {
            tracing::info!(task = %task_id, %key, %status, "an answer arrived for a task that no longer waits for it");
        }
        Ok(AnswerOutcome::Missing) => {
            tracing::info!(task = %task_id, %key, principal = %caller.principal, "an answer for an unknown task");
        }
        Ok(AnswerOutcome::Denied) => {
            super::audit_denied(caller, "response", task_id, "an answer to another principal's task");
        }
        Err(e) => tracing::warn!(task = %task_id, error = %e, "could not record the client's answer"),
    }
}

/// A notification from the client. `notifications/cancelled` stops the work of a synchronous
/// call (a task is cancelled with tasks/cancel instead); the rest need nothing from the gateway.
///
/// A cancel names only a request id, in the request's session or, without one, in its principal's
/// name: two clients of one principal without sessions (sharing a token) may each have a call
/// under the same id. It cancels the one call of its caller still running under that id; when
/// there are several, it cannot tell which is meant, and cancels none (audited).
pub(crate) async fn notification(
    state: &AppState,
    caller: &Caller,
    session: Option<&String>,
    method: &str,
    params: &Value,
) {
    if method != "notifications/cancelled" {
        return;
    }
    let Some(id) = params.get("requestId").filter(|id| id.is_string() || id.is_i64() || id.is_u64()) else {
        return;
    };
    let scope = session.cloned().unwrap_or_else(|| caller.principal.clone());
    let request_id = request_id_text(id);
    let shard = keys::shard_of_key(&scope, &request_id, state.store.shards());
    let running = match calls_in_progress(state, caller, &shard.call(&scope, &request_id)).await {
        Ok(running) => running,
        Err(e) => {
            tracing::warn!(%id, error = %e, "could not look up a cancelled call");
            return;
        }
    };
    let task_id = match <[String; 1]>::try_from(running) {
        Ok([task_id]) => task_id,
        Err(running) if running.is_empty() => {
            tracing::debug!(%id, "notifications/cancelled for no call in progress; ignored");
            return;
        }
        Err(running) => {
            tracing::info!(target: "conveyor::audit", event = "cancel_ambiguous", principal = %caller.principal, session = session.is_some(), request = %id, calls = running.len(), "notifications/cancelled names a request id several calls of this caller run under; nothing cancelled (use a session to tell them apart)");
            return;
        }
    };
    let reason = params.get("reason").and_then(Value::as_str).unwrap_or("no reason given");
    let message = format!("Cancelled by the client (notifications/cancelled: {reason})");
    match state.store.cancel_task(&task_id, &caller.principal, &message).await {
        Ok(CancelOutcome::Cancelled) => {
            tracing::info!(target: "conveyor::audit", event = "call_cancelled", principal = %caller.principal, task = %task_id, "synchronous call cancelled");
        }
        Ok(CancelOutcome::Missing) if state.store.task_status(&task_id).await.ok().flatten().is_some() => {
            super::audit_denied(caller, method, &task_id, "the call belongs to another principal");
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(task = %task_id, error = %e, "could not cancel a call"),
    }
}

/// The calls of `caller` still running under `call_key`: its synchronous calls not yet over, nor
/// become tasks (those are cancelled with tasks/cancel).
async fn calls_in_progress(
    state: &AppState,
    caller: &Caller,
    call_key: &str,
) -> Result<Vec<String>, conveyor_shared::StoreError> {
    let mut running = Vec::new();
    for task_id in state.store.call_tasks(call_key).await? {
        let Some(task) = state.store.task_status(&task_id).await? else { continue };
        if task.owner != caller.principal {
            super::audit_denied(
                caller,
                "notifications/cancelled",
                &task_id,
                "the call belongs to another principal",
            );
        } else if task.mode == TaskMode::Sync && !task.status.is_terminal() {
            running.push(task_id);
        }
    }
    Ok(running)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_input_request_id_names_its_task_round_and_key() {
        let id = json!(input_request_id("t1", 3, "plan/confirm"));
        assert_eq!(parse_input_request_id(&id), Some(("t1", 3, "plan/confirm")));
        assert_eq!(parse_input_request_id(&json!("conveyor-input/t1/step1")), None);
        assert_eq!(parse_input_request_id(&json!(7)), None);
    }
}
