//! `bootstrap_validation_loop {"profile", "root", "adrPath", "maxIterations", "updateAdrs"}`: the
//! self-learning deployment check, as one graph planned up front with a round of nodes per
//! iteration:
//!
//! ```text
//! generate-1 → approve-1 → run-1 → check-1-1 … check-1-n → learn-1 → generate-2 → … → report
//! ```
//!
//! - `generate-k` writes the iteration's scripts from the ADRs, taking the known fixes: files
//!   whose absence the caller's earlier executions of the profile (this task's among them)
//!   learned to be a cause, created from their templates.
//! - `approve-k` asks the person to approve the plan (elicitation: the node parks and holds no
//!   worker); nothing runs without a yes.
//! - `run-k` makes the workspace (see [`super::workspace`]) and runs `bootstrap.sh` there;
//!   `check-k-i` runs one check of `validate_bootstrap.sh` each, in parallel.
//! - `learn-k` classifies every failure, masks secrets, keeps the execution in Redis under the
//!   profile, the caller's own (`ToolContext::record_memory`: one principal's executions are
//!   neither seen nor pushed out by another's), and says whether the loop is done.
//! - Once a round passes (or the person declines), the later rounds' nodes end at once as
//!   skipped. `report` gathers the executions and proposes ADR updates as unified diffs; with
//!   `updateAdrs` on a profile marked `writable`, it asks the person and applies them.
//!
//! Only operators' profiles run anything: a client names a profile, never a root or a command.
//! Cancelling the task kills every child process (see [`crate::process`]); a node whose worker
//! died is run again by another like any node.

mod learn;
mod nodes;
mod report;

use std::sync::Arc;

use conveyor_shared::model::{ToolOutcome, result};
use conveyor_shared::roots::RootUse;
use serde_json::{Value, json};

use super::platforms::detect;
use super::scripts::Plan;
use super::{QUEUE, adr_path_arg, read_requirements};
use crate::operator_config::{BootstrapProfile, OperatorConfig, Workspace};
use crate::roots::{Root, RootError, Roots};
use crate::{invalid, plan};
use conveyor_worker::tool::{FnTool, ToolContext, ToolRegistry};

pub const TOOL: &str = "bootstrap_validation_loop";
/// Iterations when the call names none, and the most it may name.
const DEFAULT_ITERATIONS: u64 = 3;
const MAX_ITERATIONS: u64 = 5;
/// Checks one iteration runs at most: each is a node, held while it runs.
const MAX_CHECKS: usize = 50;
/// Slack a running node gets beyond its command's timeout, to kill the command and report.
const NODE_SLACK_MS: u64 = 30_000;

/// Registers the loop and its steps; each step reads the profile it is given.
pub fn register(registry: &mut ToolRegistry, roots: &Roots, config: &Arc<OperatorConfig>) {
    let (planner_config, planner_roots) = (config.clone(), roots.clone());
    let mut reads = RootUse::argument("root");
    reads.bound.insert(
        "profile".to_owned(),
        config.bootstrap.values().map(|p| (p.name.clone(), vec![p.root.clone()])).collect(),
    );
    registry.register(
        FnTool::new(reads.declared_in(definition(roots, config)), move |ctx| {
            let (config, roots) = (planner_config.clone(), planner_roots.clone());
            async move { plan_loop(&config, &roots, &ctx).await }
        })
        .requiring(json!({"elicitation": {}}))
        .on_queue(QUEUE),
    );
    type Handler = fn(Context) -> Pending;
    let steps: [(&str, &str, Handler); 6] = [
        ("bootstrap_loop_generate", "Writes one iteration's scripts.", |c| Box::pin(nodes::generate(c))),
        ("bootstrap_loop_approve", "Asks the person to approve an iteration.", |c| {
            Box::pin(nodes::approve(c))
        }),
        ("bootstrap_loop_run", "Runs an iteration's bootstrap.", |c| Box::pin(nodes::run_bootstrap(c))),
        ("bootstrap_loop_check", "Runs one validation check.", |c| Box::pin(nodes::check(c))),
        ("bootstrap_loop_learn", "Learns from an iteration.", |c| Box::pin(learn::learn(c))),
        ("bootstrap_loop_report", "Gathers the loop's result.", |c| Box::pin(report::report(c))),
    ];
    for (name, description, handler) in steps {
        let (config, roots) = (config.clone(), roots.clone());
        registry.register(
            FnTool::step(crate::step_definition(name, description), move |ctx| {
                handler(Context { ctx, config: config.clone(), roots: roots.clone() })
            })
            .on_queue(QUEUE),
        );
    }
}

/// The boxed future of a step handler.
type Pending = std::pin::Pin<Box<dyn std::future::Future<Output = ToolOutcome> + Send>>;

/// What every step of the loop gets.
pub(super) struct Context {
    pub ctx: ToolContext,
    pub config: Arc<OperatorConfig>,
    pub roots: Roots,
}

impl Context {
    /// The profile the node's arguments name, and its root.
    pub fn profile(&self) -> Result<(&BootstrapProfile, &Root), ToolOutcome> {
        profile_and_root(
            &self.config,
            &self.roots,
            &self.ctx,
            self.ctx.str_arg("profile").unwrap_or_default(),
        )
    }

    pub fn iteration(&self) -> u64 {
        self.ctx.arguments.get("iteration").and_then(Value::as_u64).unwrap_or(1)
    }

    /// The upstream value under `name`, or null.
    pub fn arg(&self, name: &str) -> &Value {
        self.ctx.arguments.get(name).unwrap_or(&Value::Null)
    }

    /// Whether this round's plan says the loop ended before it.
    pub fn round_skipped(&self) -> bool {
        self.arg("plan").get("skipped").and_then(Value::as_bool).unwrap_or(false)
    }

    pub fn approved(&self) -> bool {
        self.arg("approval").get("approved").and_then(Value::as_bool).unwrap_or(false)
    }
}

/// The bootstrap profiles whose root the caller may read: the only ones it may name or hear of.
fn yours<'a>(config: &'a OperatorConfig, ctx: &ToolContext) -> impl Iterator<Item = &'a BootstrapProfile> {
    config.bootstrap.values().filter(|p| ctx.may_read_root(&p.root))
}

fn profile_and_root<'a>(
    config: &'a OperatorConfig,
    roots: &'a Roots,
    ctx: &ToolContext,
    name: &str,
) -> Result<(&'a BootstrapProfile, &'a Root), ToolOutcome> {
    let profile = match config.bootstrap.get(name) {
        Some(profile) if ctx.may_read_root(&profile.root) => profile,
        found => {
            if found.is_some() {
                ctx.audit_denied(name, "a bootstrap profile whose root the access policy does not grant");
            }
            let names: Vec<String> = yours(config, ctx).map(|p| p.name.clone()).collect();
            return Err(invalid(format!(
                "no bootstrap profile `{name}` that you may run; yours: {}",
                if names.is_empty() { "none".to_owned() } else { names.join(", ") }
            )));
        }
    };
    let root = roots.get(&profile.root).map_err(|e| {
        invalid(format!(
            "bootstrap profile `{name}` runs in root `{}`, which this worker lacks: {e}",
            profile.root
        ))
    })?;
    Ok((profile, root))
}

/// The profile a call names, or else the only one of the caller's for the root it names (or
/// the only one of the caller's).
fn chosen_profile(config: &OperatorConfig, ctx: &ToolContext) -> Result<String, ToolOutcome> {
    let (profile, root) = (ctx.str_arg("profile"), ctx.str_arg("root"));
    if let Some(profile) = profile {
        return Ok(profile.to_owned());
    }
    let fitting: Vec<&String> =
        yours(config, ctx).filter(|p| root.is_none_or(|r| p.root == r)).map(|p| &p.name).collect();
    match fitting.as_slice() {
        [only] => Ok((*only).clone()),
        [] => Err(invalid(format!(
            "no bootstrap profile of yours runs in root `{}`: yours are {}",
            root.unwrap_or_default(),
            yours(config, ctx)
                .map(|p| format!("`{}` (root `{}`)", p.name, p.root))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
        many => Err(invalid(format!(
            "name a profile: {} bootstrap profiles fit ({})",
            many.len(),
            many.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
        ))),
    }
}

fn definition(roots: &Roots, config: &OperatorConfig) -> Value {
    let profiles: Vec<&String> = config.bootstrap.keys().collect();
    let described: Vec<String> = config
        .bootstrap
        .values()
        .map(|p| {
            format!(
                "`{}` (root `{}`, {}{}{})",
                p.name,
                p.root,
                match p.workspace {
                    Workspace::Root => "in the root itself",
                    Workspace::Scratch(_) => "in a scratch copy",
                },
                if p.writable { ", ADRs writable" } else { "" },
                p.description.as_ref().map(|d| format!(": {d}")).unwrap_or_default()
            )
        })
        .collect();
    let root_names: Vec<String> =
        config.bootstrap.values().map(|p| p.root.clone()).filter(|r| roots.get(r).is_ok()).collect();
    json!({
        "name": TOOL,
        "title": "Bootstrap validation loop",
        "description": format!("Turns a root's ADRs into bootstrap.sh and validate_bootstrap.sh, asks you to approve each iteration, runs the bootstrap and then every validation check as its own node, and learns from each failure (classified: missing command, missing file, permission, port in use, dependency, test failure, timeout, unknown; secrets masked). Every execution is remembered per profile, in your own memory; the next iteration takes the known fixes. Loops until validation passes or maxIterations, then proposes ADR updates as unified diffs (applied only after you approve, on a profile the operator marked writable). Runs only in the operator's bootstrap profiles: `profile` lists those you may run. Needs elicitation."),
        "inputSchema": {
            "type": "object",
            "properties": {
                // Each profile names its root: they are described here alone, where a gateway
                // shows each caller the profiles of its own roots.
                "profile": {"type": "string", "enum": profiles, "enumDescriptions": described, "description": "The operator's bootstrap profile: which root, where the scripts run, whether ADRs may be written. Optional when only one profile runs in the root named"},
                "root": {"type": "string", "enum": root_names, "description": "The root whose ADRs to run; it must be the profile's"},
                "adrPath": {"type": "string", "default": super::DEFAULT_ADR_PATH, "description": "The folder of ADRs, relative to the root"},
                "maxIterations": {"type": "integer", "minimum": 1, "maximum": MAX_ITERATIONS, "default": DEFAULT_ITERATIONS},
                "updateAdrs": {"type": "boolean", "default": false, "description": "Offer to write what was learned into the ADRs (asks first; only on a writable profile)"}
            },
            "additionalProperties": false
        },
        "outputSchema": report::output_schema(),
        "execution": {"taskSupport": "required"}
    })
}

async fn plan_loop(config: &OperatorConfig, roots: &Roots, ctx: &ToolContext) -> ToolOutcome {
    if let Some(asked) = ctx.str_arg("root")
        && let Err(e @ RootError::NotGranted { .. }) = roots.for_caller(ctx, asked)
    {
        return e.into_outcome();
    }
    let name = match chosen_profile(config, ctx) {
        Ok(name) => name,
        Err(outcome) => return outcome,
    };
    let (profile, root) = match profile_and_root(config, roots, ctx, &name) {
        Ok(found) => found,
        Err(outcome) => return outcome,
    };
    if let Some(asked) = ctx.str_arg("root").filter(|r| *r != profile.root) {
        return invalid(format!(
            "bootstrap profile `{}` runs in root `{}`, not `{asked}`: name the profile of the root you mean",
            profile.name, profile.root
        ));
    }
    let iterations = ctx.arguments.get("maxIterations").and_then(Value::as_u64).unwrap_or(DEFAULT_ITERATIONS);
    if !(1..=MAX_ITERATIONS).contains(&iterations) {
        return invalid(format!("maxIterations is {iterations}; give between 1 and {MAX_ITERATIONS}"));
    }
    let adr_path = adr_path_arg(&ctx.arguments);
    let reader = root.clone();
    let folder = adr_path.clone();
    let read = tokio::task::spawn_blocking(move || {
        read_requirements(&reader, &folder).map(|requirements| (requirements, detect(&reader)))
    })
    .await;
    let (requirements, platforms) = match read {
        Ok(Ok(read)) => read,
        Ok(Err(outcome)) => return outcome,
        Err(e) => return invalid(format!("reading the ADRs failed: {e}")),
    };
    let checks = Plan::new(&requirements, &platforms, &[], &[]).checks;
    if requirements.steps.is_empty() && checks.is_empty() {
        return ToolOutcome::Result(result::error_text(format!(
            "the {} ADRs under `{adr_path}` of root `{}` give no command to run: no shell code block in an implementation, deployment or setup section, nor in a Confirmation or validation section, and the root shows no platform. adr_bootstrap_validation lists what they require.",
            requirements.adrs.len(),
            root.name
        )));
    }
    if checks.len() > MAX_CHECKS {
        return invalid(format!(
            "the ADRs under `{adr_path}` and the root's platforms give {} checks; one iteration runs at most {MAX_CHECKS}: name a narrower adrPath",
            checks.len()
        ));
    }
    let node_timeout = profile.timeout_s * 1000 + NODE_SLACK_MS;
    let base = json!({"profile": profile.name, "adrPath": adr_path, "maxIterations": iterations});
    let with = |extra: Value| {
        let mut arguments = base.clone();
        if let (Some(into), Value::Object(extra)) = (arguments.as_object_mut(), extra) {
            into.extend(extra);
        }
        arguments
    };
    let from = |node: &str, pointer: &str| json!({"$from": node, "pointer": pointer});
    let mut nodes = Vec::new();
    for k in 1..=iterations {
        let (generate, approve, run, learn) =
            (format!("generate-{k}"), format!("approve-{k}"), format!("run-{k}"), format!("learn-{k}"));
        let previous = (k > 1).then(|| format!("learn-{}", k - 1));
        let mut generate_args =
            with(json!({"iteration": k, "requirements": requirements, "platforms": platforms}));
        if let Some(previous) = &previous {
            generate_args["previous"] = from(previous, "/structuredContent");
        }
        nodes.push(json!({"id": generate, "tool": "step/bootstrap_loop_generate", "arguments": generate_args, "dependsOn": previous.iter().collect::<Vec<_>>()}));
        nodes.push(json!({"id": approve, "tool": "step/bootstrap_loop_approve", "arguments": with(json!({"iteration": k, "plan": from(&generate, "/structuredContent")})), "dependsOn": [generate]}));
        let script = from(&generate, "/structuredContent/bootstrapScript");
        let approval = from(&approve, "/structuredContent");
        nodes.push(json!({
            "id": run, "tool": "step/bootstrap_loop_run", "timeoutMs": node_timeout, "dependsOn": [generate, approve],
            "arguments": with(json!({"iteration": k, "approval": approval, "script": script, "steps": from(&generate, "/structuredContent/steps"), "checks": from(&generate, "/structuredContent/checks")}))
        }));
        let check_ids: Vec<String> = (1..=checks.len()).map(|i| format!("check-{k}-{i}")).collect();
        for (id, check) in check_ids.iter().zip(&checks) {
            nodes.push(json!({
                "id": id, "tool": "step/bootstrap_loop_check", "timeoutMs": node_timeout * 2, "dependsOn": [generate, approve, run],
                "arguments": with(json!({"iteration": k, "check": check, "approval": approval, "script": script}))
            }));
        }
        let mut learn_args = with(json!({
            "iteration": k,
            "plan": from(&generate, "/structuredContent"),
            "approval": approval,
            "run": from(&run, "/structuredContent"),
            "checks": check_ids.iter().map(|id| from(id, "/structuredContent")).collect::<Vec<_>>()
        }));
        if let Some(previous) = &previous {
            learn_args["previous"] = from(previous, "/structuredContent");
        }
        let mut depends = vec![generate.clone(), approve.clone(), run.clone()];
        depends.extend(check_ids.iter().cloned());
        depends.extend(previous.iter().cloned());
        nodes.push(json!({"id": learn, "tool": "step/bootstrap_loop_learn", "arguments": learn_args, "dependsOn": depends}));
    }
    let learned: Vec<Value> =
        (1..=iterations).map(|k| from(&format!("learn-{k}"), "/structuredContent")).collect();
    nodes.push(json!({
        "id": "report", "tool": "step/bootstrap_loop_report",
        "dependsOn": (1..=iterations).map(|k| format!("learn-{k}")).collect::<Vec<_>>(),
        "arguments": with(json!({"iterations": learned, "updateAdrs": ctx.arguments.get("updateAdrs").and_then(Value::as_bool).unwrap_or(false)}))
    }));
    plan(nodes, "report")
}
