//! Logging. On 2025-11-25 a session asks for a level with `logging/setLevel`, kept in Redis so that
//! every gateway honours it; on 2026-07-28 each request names its level in `_meta`. Either way a
//! call's task carries the level to its tools, which send only messages at or above it
//! (`ToolContext::log`); the gateway that follows the call relays them as `notifications/message`.

use conveyor_shared::model::LogLevel;
use serde_json::{Value, json};

use super::RequestCtx;
use crate::rpc::RpcFailure;
use crate::state::AppState;
use crate::wire::Wire;

/// `_meta` key of a 2026-07-28 request's log level.
const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";

fn parse(value: &Value, what: &str) -> Result<LogLevel, RpcFailure> {
    value
        .as_str()
        .ok_or_else(|| format!("unknown log level {value}"))
        .and_then(str::parse)
        .map_err(|e| RpcFailure::invalid_params(format!("Invalid params: `{what}`: {e}")))
}

/// Where a 2025-11-25 level is kept: the session, or the principal when there is none.
fn scope(ctx: &RequestCtx) -> String {
    ctx.session.clone().unwrap_or_else(|| format!("principal:{}", ctx.caller.principal))
}

pub(super) async fn set_level(state: &AppState, ctx: &RequestCtx) -> Result<Value, RpcFailure> {
    let level = parse(ctx.params.get("level").unwrap_or(&Value::Null), "level")?;
    state.store.set_log_level(&scope(ctx), level).await?;
    Ok(json!({}))
}

/// The level of the messages a call's tools should send its client; `None`: none.
pub(super) async fn level_of_call(
    state: &AppState,
    ctx: &RequestCtx,
) -> Result<Option<LogLevel>, RpcFailure> {
    match ctx.wire {
        Wire::V2026 => match ctx.params.get("_meta").and_then(|m| m.get(META_LOG_LEVEL)) {
            None | Some(Value::Null) => Ok(None),
            Some(level) => parse(level, &format!("_meta.{META_LOG_LEVEL}")).map(Some),
        },
        Wire::V2025 => Ok(Box::pin(state.store.log_level(&scope(ctx))).await?),
    }
}
