//! A synchronous `tools/call` whose tool asks for input, on 2026-07-28 (multi-round-trip requests,
//! MRTR): the call answers `resultType: "input_required"` with the pending `inputRequests` and a
//! signed `requestState`, and the client calls again with `inputResponses` and that state.
//!
//! No task is visible to the client, but the call's hidden task holds the parked node, its state
//! and the answers in Redis, so a later round may reach any gateway. The `requestState` names that
//! task, its owner and tool, and the keys it asked; its HMAC makes it unforgeable, and a state that
//! was altered is refused. A tool that gathers input first may then turn the call into the
//! client's task: the round that started the work answers with the task instead.

use std::collections::HashMap;
use std::sync::Arc;

use conveyor_shared::events::Waiter;
use conveyor_shared::model::TaskRecord;
use conveyor_shared::store::{AnswerOutcome, TaskParts};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::follow::{Follow, Stopped, WhenOverdue, follow_task};
use super::resume::{ResumeKind, ResumePoint};
use super::tools_call::sync_outcome;
use super::{Reply, ReplyMode, RequestCtx, reply_from};
use crate::access::Caller;
use crate::rpc::RpcFailure;
use crate::signing::{Purpose, SigningKey};
use crate::state::AppState;
use crate::wire::{self, Wire};

/// The input a `tools/call` carries for a round: the client's answers, and the state of the round
/// they answer (2026-07-28 only; on 2025-11-25 answers arrive as JSON-RPC responses).
pub(super) struct RoundInput {
    pub responses: Option<Map<String, Value>>,
    pub request_state: Option<String>,
}

impl RoundInput {
    pub fn of(ctx: &RequestCtx) -> Result<Self, RpcFailure> {
        if ctx.wire != Wire::V2026 {
            return Ok(Self { responses: None, request_state: None });
        }
        let responses = match ctx.params.get("inputResponses") {
            None => None,
            Some(Value::Object(answers)) => {
                // Each answer is the client's result for one request: an object. Anything else
                // is a broken client, told so rather than handed to the tool.
                if let Some((key, _)) = answers.iter().find(|(_, v)| !v.is_object()) {
                    return Err(RpcFailure::invalid_params(format!(
                        "Invalid params: inputResponses.{key} must be an object (the client's result for that request)"
                    )));
                }
                Some(answers.clone())
            }
            Some(_) => {
                return Err(RpcFailure::invalid_params(
                    "Invalid params: `inputResponses` must be an object of answers by request key",
                ));
            }
        };
        let request_state = match ctx.params.get("requestState") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => {
                return Err(RpcFailure::invalid_params(
                    "Invalid params: `requestState` must be the string a previous round returned",
                ));
            }
        };
        Ok(Self { responses, request_state })
    }
}

/// What a `requestState` says, signed.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct RoundState {
    /// The call's hidden task.
    t: String,
    /// Its owner.
    p: String,
    /// The tool.
    n: String,
    /// The keys this round asked.
    k: Vec<String>,
    /// The round of the task's input that asked them: answers are taken for that round only, so
    /// that a state replayed later never answers a new question under the same key.
    #[serde(default)]
    r: u64,
    // No expiry of its own: the task's hash expires by Redis's clock, and a state whose task is
    // gone is refused by `answer_input`, whatever this gateway's clock says.
}

/// What a synchronous call is, for what becomes of it when its wait runs out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Overdue {
    /// A tool's call: it becomes the client's task. `client_tasks`: the client takes a task as the
    /// call's answer (2026-07-28 with the tasks extension).
    Task { client_tasks: bool },
    /// An offer's call (`prompts/get`, `resources/read`): it is cancelled.
    Offer,
}

/// Follows a synchronous call's hidden task: its result when it ends; on 2026-07-28 the input
/// requests when it asks, or the task when the tool turns the call into one; on 2025-11-25 its
/// requests go to the client on the reply stream, and the client's answers resume it. A call
/// still running when the wait runs out becomes the client's task: the answer is that task for a
/// client that declared the tasks extension, an error naming it for any other; an offer's call is
/// cancelled then (`overdue`).
#[allow(clippy::too_many_arguments)] // each is a distinct fact of the call; a struct would only rename them
pub(super) async fn follow_call(
    state: Arc<AppState>,
    wire: Wire,
    request_id: Value,
    caller: Caller,
    task: TaskRecord,
    waiter: Option<Waiter>,
    progress_token: Option<Value>,
    mode: ReplyMode,
    cancel_when_gone: bool,
    overdue: Overdue,
    reply_budget: crate::state::ReplyBudget,
) -> Result<Reply, RpcFailure> {
    // A 2025-11-25 client that takes no SSE cannot be asked anything: its call stops there.
    let stop_on_input = wire == Wire::V2026 || mode == ReplyMode::Json;
    let key = if wire == Wire::V2026 { Some(state.signer.key(&state.store).await?) } else { None };
    // A 2025-11-25 stream can be resumed after a disconnect (2026-07-28 has no GET stream).
    let resume = (wire == Wire::V2025 && mode != ReplyMode::Json).then(|| ResumePoint {
        task_id: task.task_id.clone(),
        request_id,
        kind: ResumeKind::Call,
    });
    let follow = Follow {
        task,
        caller,
        progress_token,
        deadline: state.config.sync_call_timeout,
        stop_on_input,
        relay_input: !stop_on_input,
        related_task: false,
        cancel_when_gone,
        when_overdue: match overdue {
            Overdue::Task { .. } => WhenOverdue::Escalate,
            Overdue::Offer => WhenOverdue::Cancel,
        },
        resume,
        reply_budget,
    };
    let waited = follow.deadline;
    let store = state.store.clone();
    let stream = follow_task(state, follow, waiter, move |stopped| match stopped {
        Stopped::Terminal(task) => sync_outcome(&task),
        Stopped::Escalated(task) => Ok(wire::create_result(wire, &task)),
        Stopped::Overdue(task)
            if wire == Wire::V2026 && overdue == (Overdue::Task { client_tasks: true }) =>
        {
            Ok(wire::create_result(wire, &task))
        }
        Stopped::Overdue(task) => Err(super::follow::overdue_failure(wire, &task, waited)),
        Stopped::InputRequired(task) => match &key {
            Some(key) => Ok(input_required(key, &task)),
            None => {
                let task_id = task.task_id.clone();
                tokio::spawn(async move {
                    let message = "Cancelled: the tool asked for input the client cannot receive";
                    if let Err(e) = store.cancel_task(&task_id, "", message).await {
                        tracing::warn!(task = %task_id, error = %e, "could not cancel a call that cannot get its input");
                    }
                });
                Err(RpcFailure::invalid_request(format!(
                    "Tool `{}` asks the client for input, which on protocol 2025-11-25 travels on an SSE stream: \
                     send the call with `Accept: application/json, text/event-stream`",
                    task.tool
                )))
            }
        },
    });
    reply_from(stream, mode).await
}

/// The `InputRequiredResult` of a round: what is pending, and the signed state to send back.
fn input_required(key: &SigningKey, task: &TaskRecord) -> Value {
    let requests = task.input_requests.clone().unwrap_or_else(|| json!({}));
    let keys: Vec<String> = requests.as_object().map(|o| o.keys().cloned().collect()).unwrap_or_default();
    // A call's one node asks everything pending in one round.
    let input_round = keys.iter().filter_map(|k| task.input_rounds.get(k)).copied().max().unwrap_or(0);
    let round = RoundState {
        t: task.task_id.clone(),
        p: task.owner.clone(),
        n: task.tool.clone(),
        k: keys,
        r: input_round,
    };
    json!({
        "resultType": "input_required",
        "inputRequests": requests,
        "requestState": key.sign(Purpose::RequestState, &round),
    })
}

/// A later round: checks its `requestState`, hands the answers to the call's hidden task (which
/// resumes the parked node), and follows the task to its next stop.
#[allow(clippy::too_many_arguments)] // each is a distinct fact of the round; a struct would only rename them
pub(super) async fn continue_round(
    state: Arc<AppState>,
    request_id: Value,
    caller: Caller,
    tool: &str,
    request_state: &str,
    responses: Option<Map<String, Value>>,
    accepts_sse: bool,
    overdue: Overdue,
    reply_budget: crate::state::ReplyBudget,
) -> Result<Reply, RpcFailure> {
    let key = state.signer.key(&state.store).await?;
    let round: RoundState = key.verify(Purpose::RequestState, request_state).map_err(|why| {
        RpcFailure::invalid_params(format!("Invalid params: `requestState` is refused: {why}"))
            .with_data(json!({"reason": "requestState integrity check failed"}))
    })?;
    if round.p != caller.principal || round.n != tool {
        if round.p != caller.principal {
            super::audit_denied(
                &caller,
                "tools/call",
                &round.t,
                "a requestState of another principal's call",
            );
        }
        return Err(RpcFailure::invalid_params(
            "Invalid params: this `requestState` belongs to another call (another tool or caller)",
        ));
    }
    let gone = || {
        RpcFailure::invalid_params(format!(
            "Invalid params: the call this `requestState` continues has ended or expired; call `{tool}` again without it"
        ))
    };
    let responses = responses.unwrap_or_default();
    // A state issued before rounds were numbered (r = 0) names none.
    let rounds: HashMap<String, u64> =
        if round.r == 0 { HashMap::new() } else { round.k.iter().map(|k| (k.clone(), round.r)).collect() };
    match state.store.answer_input(&round.t, &caller.principal, &responses, &rounds).await? {
        AnswerOutcome::Missing => return Err(gone()),
        AnswerOutcome::Denied => {
            super::audit_denied(&caller, "tools/call", &round.t, "the call belongs to another principal");
            return Err(gone());
        }
        AnswerOutcome::Answered { .. } | AnswerOutcome::NotWaiting(_) => {}
    }
    // The call's record (its progress token), not its outcome: that is read, within the caller's
    // budget, when the call settles.
    let reader = crate::reads::Reader {
        hidden: true,
        ..crate::reads::Reader::new(
            &caller,
            "tools/call",
            TaskParts { call: true, outcome: false, nodes: false },
        )
    };
    let task = match crate::reads::read_task(&state, reader, &round.t).await? {
        Some(crate::reads::Found::Read(held)) => held.detail.task,
        _ => return Err(gone()),
    };
    if task.mode == conveyor_shared::model::TaskMode::Task {
        // The call became a task in an earlier round (this one is a repeat): answer with it.
        return Ok(Reply::Result(wire::create_result(Wire::V2026, &task)));
    }
    let progress_token = task.call.progress_token.clone();
    let mode = ReplyMode::of(accepts_sse, progress_token.is_some());
    // A round's connection is the client's hold on the call: when it goes away, the work stops.
    follow_call(
        state,
        Wire::V2026,
        request_id,
        caller,
        task,
        None,
        progress_token,
        mode,
        true,
        overdue,
        reply_budget,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_state_names_its_task_and_keys_and_changes_with_the_round() {
        let key = SigningKey::from_secret(b"k");
        let mut task = crate::wire::tests_support::record(conveyor_shared::model::TaskStatus::InputRequired);
        task.input_requests = Some(json!({"step1": {"method": "elicitation/create", "params": {}}}));
        let first = input_required(&key, &task);
        assert_eq!(first["resultType"], "input_required");
        let state: RoundState = key
            .verify(Purpose::RequestState, first["requestState"].as_str().expect("a string"))
            .expect("valid");
        assert_eq!((state.t.as_str(), state.k.clone()), ("t1", vec!["step1".to_owned()]));
        task.input_requests = Some(json!({"step2": {"method": "elicitation/create", "params": {}}}));
        assert_ne!(first["requestState"], input_required(&key, &task)["requestState"]);
    }
}
