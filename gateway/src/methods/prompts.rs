//! `prompts/list` and `prompts/get`: the prompts live workers offer; a prompt is produced by its
//! handler on a worker, which may ask the client for input first.

use std::sync::Arc;

use conveyor_shared::model::OfferKind;
use serde_json::{Value, json};

use super::offers::{LIST_TTL_MS, run_offer, with_cache_hints};
use super::{Reply, RequestCtx, string_param};
use crate::access::Offer;
use crate::catalog::CatalogTool;
use crate::rpc::RpcFailure;
use crate::state::AppState;

/// The name a prompt is listed, called and granted by.
pub(super) fn prompt_name(prompt: &CatalogTool) -> &str {
    prompt.definition.get("name").and_then(Value::as_str).unwrap_or_default()
}

pub(super) async fn prompts_list(state: &AppState, ctx: &RequestCtx) -> Result<Value, RpcFailure> {
    let catalog = state.catalog.snapshot().await?;
    let roots = super::root_grants::Grants::of(state, &ctx.caller, &catalog);
    let prompts: Vec<Value> = catalog
        .tools
        .iter()
        .filter(|p| p.live && p.kind == OfferKind::Prompt)
        .filter(|p| state.access.may_use(&ctx.caller, Offer::Prompt, prompt_name(p)))
        .filter_map(|p| roots.view(&p.definition).map(std::borrow::Cow::into_owned))
        .collect();
    Ok(with_cache_hints(ctx.wire, json!({"prompts": prompts}), LIST_TTL_MS))
}

pub(super) async fn prompts_get(state: Arc<AppState>, mut ctx: RequestCtx) -> Result<Reply, RpcFailure> {
    let name = string_param(&ctx.params, "name")?.to_owned();
    let key = format!("prompt/{name}");
    let prompt = match state.catalog.get(&key).await? {
        Some(prompt)
            if prompt.kind == OfferKind::Prompt
                && prompt.live
                && state.access.may_use(&ctx.caller, Offer::Prompt, &name) =>
        {
            prompt
        }
        found => {
            if found.is_some_and(|p| p.kind == OfferKind::Prompt) {
                super::audit_denied(
                    &ctx.caller,
                    "prompts/get",
                    &name,
                    "the access policy does not grant this prompt",
                );
            }
            return Err(RpcFailure::invalid_params(format!(
                "Unknown prompt: `{name}`. prompts/list names the prompts this server offers."
            )));
        }
    };
    let arguments = match ctx.params.get_mut("arguments").map(Value::take) {
        None | Some(Value::Null) => json!({}),
        Some(Value::Object(arguments)) if arguments.values().all(Value::is_string) => {
            Value::Object(arguments)
        }
        Some(_) => {
            return Err(RpcFailure::invalid_params(
                "Invalid params: `arguments` must be an object of strings (prompt arguments are text)",
            ));
        }
    };
    let missing: Vec<&str> = prompt
        .definition
        .get("arguments")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|a| a.get("required") == Some(&json!(true)))
        .filter_map(|a| a.get("name").and_then(Value::as_str))
        .filter(|n| arguments.get(n).is_none())
        .collect();
    if !missing.is_empty() {
        return Err(RpcFailure::invalid_params(format!(
            "Invalid params: prompt `{name}` needs the argument(s) {}",
            missing.join(", ")
        )));
    }
    run_offer(state, ctx, &prompt, arguments).await
}
