//! `tools/list`: the tools a live worker offers and the caller may call, in each revision's shape.

use serde_json::{Value, json};

use super::RequestCtx;
use super::root_grants::Grants;
use crate::rpc::RpcFailure;
use crate::state::AppState;
use crate::wire::Wire;

/// How long a client may cache `tools/list`: workers may publish new tools at any time.
const TOOLS_LIST_TTL_MS: u64 = 5_000;

pub(super) async fn tools_list(state: &AppState, ctx: &RequestCtx) -> Result<Value, RpcFailure> {
    let wire = ctx.wire;
    let catalog = state.catalog.snapshot().await?;
    let roots = Grants::of(state, &ctx.caller, &catalog);
    let tools: Vec<Value> = catalog
        .tools
        .iter()
        .filter(|t| t.live && t.kind.is_tool())
        .filter(|t| state.access.may_call(&ctx.caller, &t.name))
        // Only the caller's roots, and no tool that always reads another's.
        .filter_map(|t| roots.view(&t.definition))
        .map(|definition| match wire {
            Wire::V2025 => definition.into_owned(),
            // 2026-07-28 tools carry no `execution`: the server decides per call.
            Wire::V2026 => {
                let mut d = definition.into_owned();
                if let Some(o) = d.as_object_mut() {
                    o.remove("execution");
                }
                d
            }
        })
        .collect();
    Ok(match wire {
        Wire::V2025 => json!({"tools": tools}),
        // Private: what a caller may call depends on who it is.
        Wire::V2026 => json!({"tools": tools, "ttlMs": TOOLS_LIST_TTL_MS, "cacheScope": "private"}),
    })
}
