//! `completion/complete`: suggestions for a prompt's argument or a resource template's variable,
//! from the values the offer's definition lists under `_meta["io.conveyor/completions"]`, filtered
//! by what the person has typed so far.

use conveyor_shared::model::OfferKind;
use serde_json::{Value, json};

use super::RequestCtx;
use super::offers::META_COMPLETIONS;
use super::root_grants::Grants;
use crate::access::Offer;
use crate::rpc::RpcFailure;
use crate::state::AppState;

/// The most values one answer carries (the protocol's own cap).
const MAX_VALUES: usize = 100;

pub(super) async fn complete(state: &AppState, ctx: &RequestCtx) -> Result<Value, RpcFailure> {
    let reference = ctx
        .params
        .get("ref")
        .ok_or_else(|| RpcFailure::invalid_params("Invalid params: `ref` names the prompt or template"))?;
    let argument =
        ctx.params.get("argument").and_then(|a| a.get("name")).and_then(Value::as_str).ok_or_else(|| {
            RpcFailure::invalid_params("Invalid params: `argument.name` names the argument to complete")
        })?;
    let typed = ctx.params.pointer("/argument/value").and_then(Value::as_str).unwrap_or_default();
    let field = |name: &str| reference.get(name).and_then(Value::as_str);
    let key = match field("type") {
        Some("ref/prompt") => OfferKind::Prompt.key(&json!({"name": field("name")})),
        Some("ref/resource") => OfferKind::ResourceTemplate.key(&json!({"uriTemplate": field("uri")})),
        _ => None,
    }
    .ok_or_else(|| {
        RpcFailure::invalid_params(
            "Invalid params: `ref` must be {\"type\": \"ref/prompt\", \"name\"} or {\"type\": \"ref/resource\", \"uri\"}",
        )
    })?;
    let granted = |offer: &crate::catalog::CatalogTool| match offer.kind {
        OfferKind::Prompt => {
            state.access.may_use(&ctx.caller, Offer::Prompt, field("name").unwrap_or_default())
        }
        _ => state.access.may_use_template(&ctx.caller, field("uri").unwrap_or_default()),
    };
    let catalog = state.catalog.snapshot_with(&key).await?;
    let offer = match catalog.get(&key) {
        Some(offer) if offer.live && granted(offer) => offer,
        found => {
            if found.is_some_and(|o| o.live) {
                super::audit_denied(
                    &ctx.caller,
                    "completion/complete",
                    &key,
                    "the access policy does not grant this offer",
                );
            }
            return Err(RpcFailure::invalid_params(format!(
                "Invalid params: nothing named by `ref` ({key})"
            )));
        }
    };
    let candidates = offer
        .definition
        .pointer(&format!("/_meta/{}/{argument}", META_COMPLETIONS.replace('/', "~1")))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    // Values that name a root the caller may not read are no suggestion of its.
    let candidates =
        Grants::of(state, &ctx.caller, &catalog).completions(&offer.definition, argument, candidates);
    let typed = typed.to_lowercase();
    let matching: Vec<Value> = candidates
        .into_iter()
        .filter(|v| v.as_str().is_some_and(|s| s.to_lowercase().starts_with(&typed)))
        .collect();
    let total = matching.len();
    let values: Vec<Value> = matching.into_iter().take(MAX_VALUES).collect();
    Ok(json!({"completion": {"values": values, "total": total, "hasMore": total > MAX_VALUES}}))
}
