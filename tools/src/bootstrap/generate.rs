//! `adr_bootstrap_validation {"root", "adrPath"}`: a graph of two readers and a writer. `read`
//! turns the ADRs into requirements, `detect` finds the root's platforms, and `generate` writes
//! `bootstrap.sh` and `validate_bootstrap.sh` (embedded in the result at
//! `conveyor://tasks/{id}/bootstrap.sh` and `.../validate_bootstrap.sh`) and lists the files the
//! ADRs name that the root lacks. When the client samples, its model drafts steps for the
//! sections about setting up that hold no command; each drafted step says so in its comment.
//! Nothing is run and nothing is written to the root.

use conveyor_shared::input::{self, InputRequired};
use conveyor_shared::model::{ToolOutcome, result};
use serde_json::{Value, json};

use super::missing::{MissingFile, missing_files};
use super::platforms::{Platform, detect};
use super::requirements::{ProseSection, Requirements};
use super::scripts::{Draft, Plan};
use super::{QUEUE, adr_path_arg, read_requirements};
use crate::plan;
use crate::research::sampled_text;
use crate::roots::{Roots, root_schema, with_root_argument};
use conveyor_worker::tool::{FnTool, ToolContext, ToolRegistry};

pub const TOOL: &str = "adr_bootstrap_validation";
/// Sections whose steps a model is asked to draft, at most.
const MAX_DRAFTED_SECTIONS: usize = 10;
/// Steps taken from a model's draft, at most.
const MAX_DRAFTED_STEPS: usize = 20;
const DRAFT_MAX_TOKENS: u32 = 800;

pub fn register(registry: &mut ToolRegistry, roots: &Roots) {
    let planner = roots.clone();
    registry.register(
        FnTool::new(with_root_argument(definition(roots)), move |ctx| {
            let roots = planner.clone();
            async move { plan_generation(&roots, &ctx) }
        })
        .on_queue(QUEUE),
    );
    let reader = roots.clone();
    registry.register(
        FnTool::step(
            crate::step_definition("bootstrap_read", "Reads what a root's ADRs require."),
            move |ctx| {
                let roots = reader.clone();
                async move { read(&roots, &ctx).await }
            },
        )
        .on_queue(QUEUE),
    );
    let detector = roots.clone();
    registry.register(
        FnTool::step(
            crate::step_definition("bootstrap_detect", "Finds the platforms of a root."),
            move |ctx| {
                let roots = detector.clone();
                async move {
                    match roots.of(&ctx) {
                        Ok(root) => {
                            let platforms = detect(root);
                            let text = format!("{} platforms", platforms.len());
                            ToolOutcome::Result(result::structured(text, json!({"platforms": platforms})))
                        }
                        Err(e) => e.into_outcome(),
                    }
                }
            },
        )
        .on_queue(QUEUE),
    );
    let writer = roots.clone();
    registry.register(
        FnTool::step(
            crate::step_definition("bootstrap_generate", "Writes the bootstrap and validation scripts."),
            move |ctx| {
                let roots = writer.clone();
                async move { write_scripts(&roots, &ctx) }
            },
        )
        .on_queue(QUEUE),
    );
}

/// The `outputSchema` of a generated plan, shared with the loop's generation nodes.
pub fn plan_schema() -> Value {
    let item = json!({
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "command": {"type": "string"},
            "requirement": {"type": "string"},
            "origin": {"type": "string", "enum": ["adr", "platform", "knownFix", "drafted"]},
            "source": {"type": ["object", "null"], "properties": {
                "adrPath": {"type": "string"}, "adr": {"type": "string"}, "section": {"type": "string"}, "line": {"type": "integer"}
            }}
        },
        "required": ["id", "command", "requirement", "origin"]
    });
    json!({
        "type": "object",
        "properties": {
            "root": {"type": "string"},
            "adrPath": {"type": "string"},
            "adrs": {"type": "array", "items": {"type": "object", "properties": {
                "path": {"type": "string"}, "number": {"type": ["integer", "null"]}, "title": {"type": ["string", "null"]},
                "status": {"type": ["string", "null"]}, "inForce": {"type": "boolean"}
            }, "required": ["path", "inForce"]}},
            "platforms": {"type": "array", "items": {"type": "object", "properties": {
                "kind": {"type": "string"}, "evidence": {"type": "string"}, "requirement": {"type": "string"}, "command": {"type": "string"}
            }}},
            "steps": {"type": "array", "items": item},
            "checks": {"type": "array", "items": item},
            "missingFiles": {"type": "array", "items": {"type": "object", "properties": {
                "path": {"type": "string"},
                "requiredBy": {"type": "array"},
                "severity": {"type": "string", "enum": ["critical", "warning"]},
                "secret": {"type": "boolean"},
                "template": {"type": ["object", "null"]},
                "recommendation": {"type": "string"}
            }, "required": ["path", "requiredBy", "severity", "recommendation"]}},
            "drafted": {"type": "integer", "description": "Steps the client's model drafted"},
            "scripts": {"type": "object", "properties": {
                "bootstrap": {"type": "string", "description": "The uri of bootstrap.sh"},
                "validate": {"type": "string", "description": "The uri of validate_bootstrap.sh"}
            }}
        },
        "required": ["root", "adrPath", "adrs", "steps", "checks", "missingFiles", "scripts"]
    })
}

fn definition(roots: &Roots) -> Value {
    json!({
        "name": TOOL,
        "title": "Bootstrap scripts from ADRs",
        "description": "Reads the ADRs under a folder of a root and the platforms the root shows (containers, compose, Kubernetes, Cargo, npm, Python, Go, make), and writes bootstrap.sh (the commands of each ADR's implementation or deployment section) and validate_bootstrap.sh (the commands of each ADR's Confirmation or validation section, and a light check per platform), every step and check commented with its ADR, file, line and section. Lists the files the ADRs name that the root lacks, with the ADRs that require them, a severity and a template where one is safe (never for secrets). With a sampling client, its model drafts steps for setup sections that have no command, marked as drafted. Runs nothing.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "root": root_schema(roots),
                "adrPath": {"type": "string", "default": super::DEFAULT_ADR_PATH, "description": "The folder of ADRs, relative to the root"}
            },
            "required": ["root"],
            "additionalProperties": false
        },
        "outputSchema": plan_schema(),
        "execution": {"taskSupport": "optional"}
    })
}

fn plan_generation(roots: &Roots, ctx: &ToolContext) -> ToolOutcome {
    let root = match roots.of(ctx) {
        Ok(root) => root,
        Err(e) => return e.into_outcome(),
    };
    let adr_path = adr_path_arg(&ctx.arguments);
    if let Err(e) = root.resolve(&adr_path) {
        return e.into_outcome();
    }
    plan(
        vec![
            json!({"id": "read", "tool": "step/bootstrap_read", "arguments": {"root": root.name, "adrPath": adr_path}}),
            json!({"id": "detect", "tool": "step/bootstrap_detect", "arguments": {"root": root.name}}),
            json!({
                "id": "generate",
                "tool": "step/bootstrap_generate",
                "arguments": {
                    "root": root.name,
                    "adrPath": adr_path,
                    "requirements": {"$from": "read", "pointer": "/structuredContent"},
                    "platforms": {"$from": "detect", "pointer": "/structuredContent/platforms"},
                    "sample": ctx.client_supports(&input::sample("", 1))
                },
                "dependsOn": ["read", "detect"]
            }),
        ],
        "generate",
    )
}

async fn read(roots: &Roots, ctx: &ToolContext) -> ToolOutcome {
    let root = match roots.of(ctx) {
        Ok(root) => root.clone(),
        Err(e) => return e.into_outcome(),
    };
    let adr_path = adr_path_arg(&ctx.arguments);
    let read = tokio::task::spawn_blocking(move || read_requirements(&root, &adr_path)).await;
    match read {
        Ok(Ok(requirements)) => {
            let text = format!(
                "{} ADRs: {} steps, {} checks, {} files named",
                requirements.adrs.len(),
                requirements.steps.len(),
                requirements.checks.len(),
                requirements.files.len()
            );
            ToolOutcome::Result(result::structured(
                text,
                serde_json::to_value(&requirements).unwrap_or(Value::Null),
            ))
        }
        Ok(Err(outcome)) => outcome,
        Err(e) => crate::invalid(format!("reading the ADRs failed: {e}")),
    }
}

/// What a generation node was given.
pub struct Inputs {
    pub requirements: Requirements,
    pub platforms: Vec<Platform>,
}

impl Inputs {
    pub fn from(arguments: &Value) -> Result<Self, ToolOutcome> {
        let requirements =
            serde_json::from_value(arguments.get("requirements").cloned().unwrap_or(Value::Null))
                .map_err(|e| crate::invalid(format!("bootstrap: the requirements are not readable: {e}")))?;
        let platforms = serde_json::from_value(arguments.get("platforms").cloned().unwrap_or(json!([])))
            .map_err(|e| crate::invalid(format!("bootstrap: the platforms are not readable: {e}")))?;
        Ok(Inputs { requirements, platforms })
    }
}

fn write_scripts(roots: &Roots, ctx: &ToolContext) -> ToolOutcome {
    let root = match roots.of(ctx) {
        Ok(root) => root,
        Err(e) => return e.into_outcome(),
    };
    let inputs = match Inputs::from(&ctx.arguments) {
        Ok(inputs) => inputs,
        Err(outcome) => return outcome,
    };
    let prose: Vec<&ProseSection> = inputs.requirements.prose.iter().take(MAX_DRAFTED_SECTIONS).collect();
    let wants_drafts =
        ctx.arguments.get("sample").and_then(Value::as_bool).unwrap_or(false) && !prose.is_empty();
    let drafts = match (wants_drafts, ctx.input("draft")) {
        (true, None) => {
            return ToolOutcome::InputRequired(
                InputRequired::new().ask("draft", input::sample(draft_prompt(&prose), DRAFT_MAX_TOKENS)),
            );
        }
        (true, Some(answer)) => parse_drafts(&sampled_text(answer).unwrap_or_default(), &prose),
        (false, _) => vec![],
    };
    let missing = missing_files(root, &inputs.requirements);
    let adr_path = adr_path_arg(&ctx.arguments);
    let plan = Plan::new(&inputs.requirements, &inputs.platforms, &[], &drafts);
    let heading = format!(
        "written by Conveyor's {TOOL} from {} ADRs under {adr_path} of root `{}` (task {})",
        inputs.requirements.adrs.len(),
        root.name,
        ctx.task_id
    );
    scripts_result(ctx, &root.name, &adr_path, &inputs, &plan, &missing, &heading, drafts.len())
}

/// The result of a generation: a summary, both scripts as embedded resources of the task, and
/// everything in `structuredContent`.
#[allow(clippy::too_many_arguments)]
pub fn scripts_result(
    ctx: &ToolContext,
    root: &str,
    adr_path: &str,
    inputs: &Inputs,
    plan: &Plan,
    missing: &[MissingFile],
    heading: &str,
    drafted: usize,
) -> ToolOutcome {
    let prefix = match ctx.arguments.get("iteration").and_then(Value::as_u64) {
        Some(n) => format!("conveyor://tasks/{}/iteration-{n}/", ctx.task_id),
        None => format!("conveyor://tasks/{}/", ctx.task_id),
    };
    let (bootstrap_uri, validate_uri) =
        (format!("{prefix}bootstrap.sh"), format!("{prefix}validate_bootstrap.sh"));
    let bootstrap = plan.bootstrap_script(heading);
    let validation = plan.validation_script(heading);
    let mut text = format!(
        "{} ADRs under {adr_path}: {} steps, {} checks ({} from platforms){}.\n",
        inputs.requirements.adrs.len(),
        plan.steps.len(),
        plan.checks.len(),
        inputs.platforms.len(),
        if drafted > 0 { format!(", {drafted} steps drafted by the client's model") } else { String::new() }
    );
    if !missing.is_empty() {
        text.push_str("\nMissing files:\n");
        for file in missing {
            let by: Vec<&str> = file.required_by.iter().map(|s| s.adr.as_str()).collect();
            text.push_str(&format!(
                "- {} [{}], required by {}: {}\n",
                file.path,
                serde_json::to_value(file.severity)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
                by.join(", "),
                file.recommendation
            ));
        }
    }
    text.push_str(&format!("\nScripts: {bootstrap_uri}, {validate_uri}\n"));
    let structured = json!({
        "root": root,
        "adrPath": adr_path,
        "adrs": inputs.requirements.adrs,
        "platforms": inputs.platforms,
        "steps": plan.steps,
        "checks": plan.checks,
        "missingFiles": missing,
        "drafted": drafted,
        "scripts": {"bootstrap": bootstrap_uri, "validate": validate_uri}
    });
    ToolOutcome::Result(json!({
        "content": [
            {"type": "text", "text": text},
            {"type": "resource", "resource": {"uri": bootstrap_uri, "mimeType": "text/x-shellscript", "text": bootstrap}},
            {"type": "resource", "resource": {"uri": validate_uri, "mimeType": "text/x-shellscript", "text": validation}}
        ],
        "structuredContent": structured,
        "isError": false
    }))
}

fn draft_prompt(prose: &[&ProseSection]) -> String {
    let mut prompt = String::from(
        "These sections of architecture decision records say how to set a project up, but give no command. For each, write the shell commands that do what it says, run at the project's root, one per line as `N: command` where N is the section's number. Write nothing for a section you cannot turn into commands, and never put a secret's value in a command.\n",
    );
    for (i, section) in prose.iter().enumerate() {
        let text: String = section.text.chars().take(1_500).collect();
        prompt.push_str(&format!(
            "\n[{}] {} ({}), section \"{}\":\n{text}\n",
            i + 1,
            section.source.adr,
            section.source.adr_path,
            section.source.section
        ));
    }
    prompt
}

/// `N: command` lines of a model's reply, each tied to its section.
fn parse_drafts(reply: &str, prose: &[&ProseSection]) -> Vec<Draft> {
    reply
        .lines()
        .filter_map(|line| {
            let line = line.trim().trim_start_matches(['-', '*', '[']).trim();
            let (number, command) = line.split_once(':')?;
            let index: usize = number.trim().trim_end_matches(']').parse().ok()?;
            let section = prose.get(index.checked_sub(1)?)?;
            let command = command.trim().trim_matches('`').trim();
            (!command.is_empty())
                .then(|| Draft { command: command.to_owned(), source: section.source.clone() })
        })
        .take(MAX_DRAFTED_STEPS)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drafts_keep_their_section_and_skip_what_is_not_a_numbered_command() {
        let mut requirements = Requirements::default();
        requirements.add("0001-a.md", "# 1. A\n\n## Setup\n\nInstall the CLI and log in.\n");
        let prose: Vec<&ProseSection> = requirements.prose.iter().collect();
        let drafts =
            parse_drafts("Here you go:\n1: `npm install -g thing`\n- 1: thing login\n7: nope\n", &prose);
        let commands: Vec<&str> = drafts.iter().map(|d| d.command.as_str()).collect();
        assert_eq!(commands, ["npm install -g thing", "thing login"]);
        assert_eq!(drafts[0].source.section, "Setup");
        assert!(draft_prompt(&prose).contains("[1] ADR 1: A (0001-a.md), section \"Setup\""));
    }
}
