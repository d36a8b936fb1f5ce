//! Conveyor's built-in tools: what every worker offers without `--fixtures`, one module per
//! family. They are built on the worker runtime's tool API (`conveyor_worker::tool`) alone, as a
//! third party's tools would be; `register` adds them to a worker's registry.
//!
//! # Layout
//!
//!
//! - [`adr_templates`]: architecture decision record templates (Nygard, MADR), as prompts that
//!   draft an ADR and as resources a client can read.
//! - [`roots`]: the directories tools may read (`--root NAME=PATH`), offered as resources.
//! - [`research`]: ranked evidence for a question about a root, scanned in shards.
//! - [`plan_adr`]: the seven-phase guided ADR workflow, asking a person at each phase.
//! - [`adr_todo`]: `adr_todo`, the checklist of actions accepted ADRs imply, items the code
//!   already shows checked off with `path:line`.
//! - [`adrs`]: reading ADRs in the formats found in the wild and the rules `validate_adrs` applies.
//! - [`readiness`]: `deployment_readiness`: operators' checks, test reports, run history.
//! - [`troubleshoot`]: from a failure to related code, ADRs and failing tests, and a test plan.
//! - [`bootstrap`]: `adr_bootstrap_validation` (deployment scripts from ADRs) and
//!   `bootstrap_validation_loop` (run them where the operator allows, learn, propose ADR updates).
//! - [`configured`]: the operator's own tools, declared in the tools file ([`operator_config`]).
//! - [`process`]: child processes for operators' commands (no shell, allowlisted environment,
//!   capped output, the process group killed on timeout or cancellation, and with its worker:
//!   [`process::orphans`]).

pub mod adr_templates;
pub mod adr_todo;
pub mod adrs;
pub mod bootstrap;
pub mod configured;
pub mod operator_config;
pub mod plan_adr;
pub mod process;
pub mod readiness;
pub mod research;
pub mod roots;
pub mod troubleshoot;

use conveyor_shared::model::{RpcError, ToolOutcome};
use serde_json::{Value, json};

use conveyor_worker::tool::ToolRegistry;

/// What the operator gave the built-in tools.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    pub roots: roots::Roots,
    /// The tools file: the operator's tools and readiness profiles.
    pub operator: std::sync::Arc<operator_config::OperatorConfig>,
}

/// Adds every built-in offer to `registry`. The tools that read a root come only with roots,
/// readiness only with profiles: a worker offers nothing it could not run.
pub fn register(registry: &mut ToolRegistry, settings: &Settings) {
    adr_templates::register(registry);
    roots::register(registry, &settings.roots);
    if !settings.roots.is_empty() {
        research::register(registry, &settings.roots);
        adrs::tool::register(registry, &settings.roots);
        adr_todo::register(registry, &settings.roots);
        troubleshoot::register(registry, &settings.roots, &settings.operator);
        troubleshoot::memory::register(registry, &settings.roots);
    }
    plan_adr::register(registry, &settings.roots);
    readiness::tool::register(registry, &settings.roots, &settings.operator);
    bootstrap::register(registry, &settings.roots, &settings.operator);
    configured::register(registry, &settings.roots, &settings.operator);
    // Every worker of a host ends what the commands of its dead workers left, whatever it serves.
    for queue in registry.queues() {
        registry.add_chore(process::orphans::chore(&queue));
    }
}

/// The definition of a step (a node tool clients never see): its name and what it does.
pub(crate) fn step_definition(name: &str, description: &str) -> Value {
    json!({"name": name, "description": description, "inputSchema": {"type": "object"}})
}

/// The outcome of a node that stopped because it was cancelled.
pub(crate) fn cancelled() -> ToolOutcome {
    ToolOutcome::Error(RpcError { code: -32800, message: "cancelled".to_owned(), data: None })
}

/// The call's error for arguments a tool cannot use.
pub(crate) fn invalid(message: impl Into<String>) -> ToolOutcome {
    ToolOutcome::Error(RpcError { code: -32602, message: message.into(), data: None })
}

/// A tool's plan from its nodes (`run_dag`'s node shape) and output node.
pub(crate) fn plan(nodes: Vec<Value>, output: &str) -> ToolOutcome {
    match serde_json::from_value(json!({"nodes": nodes, "output": output})) {
        Ok(plan) => ToolOutcome::Plan(plan),
        Err(e) => ToolOutcome::Error(RpcError {
            code: -32603,
            message: format!("the tool planned an invalid graph: {e}"),
            data: None,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_of_one_tool_keeps_the_steps_of_its_queue_and_offers_no_other_tool() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let roots = roots::Roots::parse(&[format!("repo={}", dir.path().display())]).expect("roots");
        let mut registry = ToolRegistry::new();
        register(&mut registry, &Settings { roots, ..Settings::default() });
        let pool = registry.only(&["research".to_owned()]).expect("research is offered");
        let names = pool.names();
        assert!(
            names.iter().any(|n| n == "step/research_scan")
                && names.iter().any(|n| n == "step/research_merge")
        );
        assert!(!names.iter().any(|n| n == "step/adrs_batch" || n == "validate_adrs"), "{names:?}");
        // Steps are never offered to clients as tools.
        assert!(pool.published().iter().filter(|t| t.kind.is_tool()).all(|t| t.name() == Some("research")));
        assert_eq!(
            pool.queues(),
            vec![conveyor_shared::keys::BUILTIN_QUEUE.to_owned(), research::QUEUE.to_owned()]
        );
    }
}
