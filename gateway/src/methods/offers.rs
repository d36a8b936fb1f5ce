//! What the cluster offers besides tools: prompts, resources and resource templates, published by
//! workers as they publish tools and produced by a handler on a worker (a synchronous call of the
//! offer, through the same queues, parking and MRTR rounds as a tool). Gateways serve the union
//! of what live workers offer. The caching hints of 2026-07-28 lists and reads are set here.

use std::sync::Arc;

use conveyor_shared::model::new_task_id;
use conveyor_shared::store::{Created, NewTask};
use serde_json::{Value, json};

use futures::StreamExt;

use super::{Reply, ReplyMode, RequestCtx, StreamItem, rounds};
use crate::catalog::CatalogTool;
use crate::rpc::RpcFailure;
use crate::state::AppState;
use crate::wire::Wire;

/// How long a client may cache a list of offers: workers may publish new ones at any time.
pub(super) const LIST_TTL_MS: u64 = 5_000;

/// Adds the 2026-07-28 caching hints to a cacheable result. Lists and reads can depend on the
/// caller (access rules, task ownership), so they are private to the caller.
pub(super) fn with_cache_hints(wire: Wire, mut result: Value, ttl_ms: u64) -> Value {
    if wire == Wire::V2026
        && let Some(object) = result.as_object_mut()
    {
        object.insert("ttlMs".to_owned(), json!(ttl_ms));
        object.insert("cacheScope".to_owned(), json!("private"));
    }
    result
}

/// A reply with the 2026-07-28 caching hints on its result, where its handler set none: a
/// `resources/read` answer.
pub(super) fn reply_with_cache_hints(wire: Wire, reply: Reply, ttl_ms: u64) -> Reply {
    fn hint(wire: Wire, mut result: Value, ttl_ms: u64) -> Value {
        let asks = result.get("resultType").and_then(Value::as_str) == Some("input_required");
        if wire == Wire::V2026
            && !asks
            && let Some(object) = result.as_object_mut()
        {
            object.entry("ttlMs").or_insert_with(|| json!(ttl_ms));
            object.entry("cacheScope").or_insert_with(|| json!("private"));
        }
        result
    }
    match reply {
        Reply::Result(result) => Reply::Result(hint(wire, result, ttl_ms)),
        Reply::Stream(stream) => Reply::Stream(
            stream
                .map(move |item| match item {
                    StreamItem::Done(Ok(result)) => StreamItem::Done(Ok(hint(wire, result, ttl_ms))),
                    other => other,
                })
                .boxed(),
        ),
    }
}

/// Runs an offer's handler for a request (`prompts/get`, `resources/read`) as a synchronous call
/// of its own, and answers with what the handler returns; on 2026-07-28 a handler that asks for
/// input answers with an `input_required` result, continued by the next round.
pub(super) async fn run_offer(
    state: Arc<AppState>,
    ctx: RequestCtx,
    offer: &CatalogTool,
    arguments: Value,
) -> Result<Reply, RpcFailure> {
    let round = rounds::RoundInput::of(&ctx)?;
    let held = super::hold_stream(&state, &ctx.caller)?;
    if let Some(request_state) = &round.request_state {
        let reply = rounds::continue_round(
            state,
            ctx.id.clone(),
            ctx.caller.clone(),
            &offer.name,
            request_state,
            round.responses,
            ctx.accepts_sse,
            rounds::Overdue::Offer,
            ctx.reply_budget.clone(),
        )
        .await;
        return super::holding(reply, held);
    }
    let shard = state.store.pick_shard();
    let task_id = new_task_id(shard);
    crate::telemetry::record_task(&task_id);
    let hub = state.store.events().await?;
    let mut waiter = hub.waiter(&task_id);
    let catalog = state.catalog.snapshot().await?;
    let roots = super::root_grants::Grants::of(&state, &ctx.caller, &catalog);
    let call = super::call_record(&state, &ctx, arguments, roots);
    let mut new = NewTask {
        waiter: Some(hub.inbox(shard)),
        // The hidden task of an offer is never listed: its owner index entry may go at once.
        index_retention_ms: 1,
        input_responses: round.responses,
        ..super::new_task(&state, &ctx, task_id, &offer.name, call, &catalog)
    };
    let created = state
        .store
        .create_task_spread(&mut new, &state.config.limits, |moved, shard| {
            waiter = hub.waiter(&moved.task_id);
            moved.waiter = Some(hub.inbox(shard));
        })
        .await?;
    match created {
        Created::Created => {}
        refused => return Err(super::tools_call::refusal(refused)),
    }
    let record = new.record();
    let mode = ReplyMode::of(ctx.accepts_sse, false);
    let reply = rounds::follow_call(
        state,
        ctx.wire,
        ctx.id.clone(),
        ctx.caller.clone(),
        record,
        Some(waiter),
        None,
        mode,
        true,
        rounds::Overdue::Offer,
        ctx.reply_budget.clone(),
    )
    .await;
    super::holding(reply, held)
}

/// Completion values an offer's definition carries in `_meta`, by argument (or variable) name.
pub(super) const META_COMPLETIONS: &str = "io.conveyor/completions";
