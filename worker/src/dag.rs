//! The worker's side of DAG tasks: upstream values in a node's arguments, built-in nodes, and the
//! result of a finished graph.

use std::collections::HashMap;

use conveyor_shared::model::{NodeRecord, OfferKind, RpcError, ToolOutcome, WorkItem};
use conveyor_shared::{Store, StoreError, dag};
use serde_json::{Map, Value, json};

use crate::tool::ToolContext;

/// The node's arguments with every `{"$from", "pointer"}` replaced by the upstream value, within
/// `limits`; a reference that does not resolve, or arguments that would be too large, fail the
/// attempt with a message that names the reference or the limit.
pub async fn resolve_arguments(
    store: &Store,
    task_id: &str,
    arguments: &Value,
    limits: &dag::ResolveLimits,
) -> Result<Value, ToolOutcome> {
    let references = dag::upstream_references(arguments);
    if references.is_empty() {
        return Ok(arguments.clone());
    }
    let mut upstream: Vec<String> = references.into_iter().map(|(from, _)| from).collect();
    upstream.sort();
    upstream.dedup();
    let outputs = store
        .node_outputs(task_id, &upstream)
        .await
        .map_err(|e| invalid(format!("cannot read upstream outputs: {e}")))?;
    dag::resolve_bounded(arguments, &outputs, limits).map_err(|e| match e {
        dag::ResolveError::TooLarge { size, max } => ToolOutcome::Error(RpcError {
            code: -32602,
            message: e.to_string(),
            data: Some(json!({"limit": "max_node_argument_bytes", "max": max, "size": size})),
        }),
        other => invalid(other.to_string()),
    })
}

fn invalid(message: String) -> ToolOutcome {
    ToolOutcome::Error(RpcError { code: -32602, message, data: None })
}

/// Checks a graph a tool planned: its shape, and that a worker offers each tool it calls. The
/// error fails the planning node with the reason. Its size is held to the limits its task was
/// created under when it joins the task ([`Store::expand_plan`]), not to this worker's defaults.
pub async fn check_plan(store: &Store, plan: &dag::DagSpec) -> Result<(), ToolOutcome> {
    let shape =
        dag::DagLimits { max_nodes: usize::MAX, max_node_bytes: usize::MAX, ..dag::DagLimits::default() };
    plan.validate(&shape).map_err(|e| invalid(format!("invalid plan: {e}")))?;
    let published = store.tools().await.map_err(|e| invalid(format!("cannot read the tool catalog: {e}")))?;
    for node in &plan.nodes {
        if let Some(tool) = &node.tool
            && !published
                .iter()
                .any(|t| (t.kind.is_tool() || t.kind == OfferKind::Step) && t.name() == Some(tool.as_str()))
        {
            return Err(invalid(format!("invalid plan: node `{}` calls unknown tool `{tool}`", node.id)));
        }
    }
    Ok(())
}

/// Runs a built-in node (`$noop`, `$collect`); `None` for a tool.
pub fn builtin(tool: &str, ctx: &ToolContext) -> Option<ToolOutcome> {
    match tool {
        "$noop" => Some(ToolOutcome::Result(json!({"content": [], "isError": false}))),
        "$collect" => {
            let collected = ctx.arguments.get("nodes").cloned().unwrap_or_else(|| json!({}));
            Some(ToolOutcome::Result(json!({
                "content": [{"type": "text", "text": collected.to_string()}],
                "structuredContent": collected,
                "isError": false
            })))
        }
        _ => None,
    }
}

/// Assembles a finished DAG task's result and settles the task with it (unless it already
/// ended), acknowledging the finalize entry `item` in the same script.
pub async fn finalize(store: &Store, item: &WorkItem) -> Result<(), StoreError> {
    let Some(task) = store.get_task(&item.task_id).await? else {
        return store.drop_entry(item).await;
    };
    let (result, message) = if task.status.is_terminal() {
        (json!({"content": [], "isError": false}), String::new())
    } else {
        let nodes = store.get_nodes(&item.task_id).await?;
        match planned_result(&task.tool, &nodes, task.output_node.as_deref()) {
            Some(result) => result,
            None => dag_result(&nodes, task.output_node.as_deref()),
        }
    };
    store.settle_dag(item, &result, &message, task.call.tool_error_fails()).await?;
    Ok(())
}

/// The result of a graph a tool planned, when its output node completed: that node's result as
/// it is, so that the tool's caller gets what the tool declares (its `outputSchema`), not the
/// graph's inner workings. `None` for `run_dag`, whose caller asked for the graph itself.
fn planned_result(tool: &str, nodes: &[NodeRecord], output: Option<&str>) -> Option<(Value, String)> {
    if tool == RUN_DAG {
        return None;
    }
    let node = nodes.iter().find(|n| Some(n.node_id.as_str()) == output)?;
    let result = node.output.clone().filter(|o| node.status == "completed" && o.is_object())?;
    Some((result, format!("Completed ({} nodes)", nodes.len())))
}

/// The name of the gateway's built-in tool that runs a client's graph.
const RUN_DAG: &str = "run_dag";

/// The `CallToolResult` of a graph: every node's outcome in `structuredContent.nodes`, and the
/// output node's content as the content.
pub fn dag_result(nodes: &[NodeRecord], output: Option<&str>) -> (Value, String) {
    let mut outcomes = Map::new();
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for node in nodes {
        *counts.entry(node.status.as_str()).or_default() += 1;
        let mut outcome = json!({
            "status": node.status,
            "attempts": node.attempt,
            "durationMs": match (node.started_at_ms, node.finished_at_ms) {
                (Some(s), Some(f)) => json!(f.saturating_sub(s)),
                _ => Value::Null,
            },
        });
        if node.status == "completed" {
            outcome["output"] = node.output.clone().unwrap_or(Value::Null);
        } else if let Some(error) = &node.error {
            outcome["error"] = error.clone();
        }
        outcomes.insert(node.node_id.clone(), outcome);
    }
    let mut summary: Vec<String> = counts.iter().map(|(status, n)| format!("{n} {status}")).collect();
    summary.sort();
    let message = format!("Completed: {}", summary.join(", "));
    let output_node = output.and_then(|id| nodes.iter().find(|n| n.node_id == id));
    let (content, is_error) = match output_node {
        Some(node) if node.status == "completed" => {
            let content = node.output.as_ref().and_then(|o| o.get("content")).cloned();
            (content.unwrap_or_else(|| json!([{"type": "text", "text": node.output.clone().unwrap_or(Value::Null).to_string()}])), false)
        }
        Some(node) => (
            json!([{"type": "text", "text": format!("output node `{}` ended {}", node.node_id, node.status)}]),
            true,
        ),
        None => (json!([{"type": "text", "text": message.clone()}]), false),
    };
    (json!({"content": content, "structuredContent": {"nodes": outcomes}, "isError": is_error}), message)
}
