//! `plan_adr`: the guided ADR workflow in seven phases (problem, research, options, decision,
//! impact, implementation plan, ADR), as one task whose phases are nodes of a graph. The phases
//! that need a person ask through elicitation (the node parks while it waits; no worker is held);
//! the research phase scans a root in shards like `research`, with the problem as its question.
//! The last phase writes a MADR document: the task's result, and a resource embedded in it,
//! readable by the task's owner at `conveyor://tasks/{taskId}/adr.md`, and the implementation
//! steps as a TODO checklist at `conveyor://tasks/{taskId}/TODO.md` (a step whose named things the
//! research phase found in the code checked off, with `path:line`).
//!
//! Progress moves by phase: every phase weighs the same, so the task reports 0, 14, 28, 42, 57,
//! 71, 85 and 100 %.

use conveyor_shared::input::{self, InputRequired};
use conveyor_shared::model::{ToolOutcome, result};
use serde_json::{Map, Value, json};

use super::research;
use super::roots::{Roots, root_schema, with_root_argument};
use super::{invalid, plan};
use crate::adr_todo::TodoItem;
use crate::bootstrap::requirements::Source;
use conveyor_worker::tool::{FnTool, ToolContext, ToolRegistry};

pub const TOOL: &str = "plan_adr";
/// The phases, in order, with the name a person sees.
pub const PHASES: [(&str, &str); 7] = [
    ("problem", "Problem definition"),
    ("research", "Research analysis"),
    ("options", "Option exploration"),
    ("decision", "Decision making"),
    ("impact", "Impact assessment"),
    ("implementation", "Implementation planning"),
    ("adr", "ADR generation"),
];
/// The weight of one phase. The planning node weighs 1, so it moves progress by less than 0.02 %.
const PHASE_WEIGHT: f64 = 1000.0;
/// Evidence items the research phase gathers.
const RESEARCH_RESULTS: usize = 8;

pub fn register(registry: &mut ToolRegistry, roots: &Roots) {
    let planner = roots.clone();
    registry.register(
        FnTool::new(with_root_argument(definition(roots)), move |ctx| {
            let roots = planner.clone();
            async move { plan_workflow(&roots, &ctx).await }
        })
        .requiring(json!({"elicitation": {}}))
        // Its research phase runs research's steps: one pool serves both.
        .on_queue(research::QUEUE),
    );
    registry.register(FnTool::step(
        json!({"name": "plan_adr_phase", "description": "One phase of plan_adr.", "inputSchema": {"type": "object"}}),
        |ctx| async move { phase(&ctx).await },
    ).on_queue(research::QUEUE));
}

fn definition(roots: &Roots) -> Value {
    json!({
        "name": TOOL,
        "title": "Plan an architecture decision",
        "description": "Guides a person through an architecture decision in seven phases: problem definition, research analysis (a search of a root for what the code already says), option exploration, decision making, impact assessment, implementation planning, and ADR generation. Each phase asks through elicitation; the result is a MADR document, also embedded as a resource. Progress moves by phase.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "topic": {"type": "string", "maxLength": 500, "description": "What the decision is about; the first question starts from it"},
                "root": root_schema(roots)
            },
            "additionalProperties": false
        },
        "outputSchema": {
            "type": "object",
            "properties": {
                "title": {"type": "string"},
                "status": {"type": "string"},
                "markdown": {"type": "string"},
                "uri": {"type": "string"},
                "chosenOption": {"type": "string"}
            },
            "required": ["title", "markdown", "uri"]
        },
        "execution": {"taskSupport": "required"}
    })
}

async fn plan_workflow(roots: &Roots, ctx: &ToolContext) -> ToolOutcome {
    let topic = ctx.str_arg("topic").unwrap_or_default().to_owned();
    let root = match ctx.str_arg("root") {
        Some(name) => match roots.for_caller(ctx, name) {
            Ok(root) => Some(root.clone()),
            Err(e) => return e.into_outcome(),
        },
        None => None,
    };
    let phase_node = |index: usize, depends: Vec<String>, context: Value, weight: f64| {
        json!({
            "id": PHASES[index].0,
            "tool": "step/plan_adr_phase",
            "arguments": {"phase": index, "topic": topic, "context": context},
            "dependsOn": depends,
            "weight": weight
        })
    };
    let from = |node: &str| json!({"$from": node, "pointer": "/structuredContent"});
    let mut nodes = vec![phase_node(0, vec![], json!({}), PHASE_WEIGHT)];
    // The research phase: a search of the root whose question is the problem, or a phase that
    // says there was nothing to search.
    match &root {
        Some(root) => {
            let question = json!({"$from": "problem", "pointer": "/structuredContent/question"});
            let mut scans =
                match research::plan_scans(root, &[], question, RESEARCH_RESULTS, "research-").await {
                    Ok(scans) => scans,
                    Err(outcome) => return outcome,
                };
            // The scans and their merge carry the phase's weight but one, which its summary carries.
            let count = scans.len() as f64;
            for node in &mut scans {
                node["weight"] = json!((PHASE_WEIGHT - 1.0) / count);
                // Every one of them takes the question from the problem phase.
                let mut depends: Vec<Value> =
                    node.get("dependsOn").and_then(Value::as_array).cloned().unwrap_or_default();
                depends.push(json!("problem"));
                node["dependsOn"] = json!(depends);
            }
            nodes.extend(scans);
            nodes.push(phase_node(
                1,
                vec!["research-merge".into()],
                json!({"evidence": from("research-merge")}),
                1.0,
            ));
        }
        None => nodes.push(phase_node(1, vec!["problem".into()], json!({}), PHASE_WEIGHT)),
    }
    // Each later phase sees what every earlier one gathered.
    let mut gathered = Map::new();
    for index in 2..PHASES.len() {
        for (earlier, _) in &PHASES[..index] {
            gathered.insert((*earlier).to_owned(), from(earlier));
        }
        let depends = gathered.keys().cloned().collect();
        nodes.push(phase_node(index, depends, Value::Object(gathered.clone()), PHASE_WEIGHT));
    }
    plan(nodes, "adr")
}

/// What the research phase found, as `path:line`, best first.
fn research_citations(context: &Value) -> Vec<String> {
    context
        .pointer("/research/evidence")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|e| Some(format!("{}:{}", e.get("path")?.as_str()?, e.get("line")?)))
                .collect()
        })
        .unwrap_or_default()
}

/// Lines of a free-text answer, as a list.
fn lines(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_str)
        .unwrap_or_default()
        .lines()
        .map(|l| l.trim().trim_start_matches(['-', '*', '•']).trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect()
}

fn text_field(title: &str, description: &str) -> Value {
    json!({"type": "string", "title": title, "description": description})
}

async fn phase(ctx: &ToolContext) -> ToolOutcome {
    let index = ctx.arguments.get("phase").and_then(Value::as_u64).unwrap_or(0) as usize;
    let Some((id, name)) = PHASES.get(index).copied() else {
        return invalid(format!("plan_adr: there is no phase {index}"));
    };
    let settled = 1.0 + PHASE_WEIGHT * index as f64;
    let total = 1.0 + PHASE_WEIGHT * PHASES.len() as f64;
    ctx.progress(settled, Some(total), Some(&format!("Phase {} of 7: {name}", index + 1))).await;
    let context = ctx.arguments.get("context").cloned().unwrap_or(Value::Null);
    let topic = ctx.str_arg("topic").unwrap_or_default();
    match id {
        "problem" => ask(
            ctx,
            index,
            format!(
                "Phase 1 of 7, {name}. What decision has to be made{}? Describe the problem and what drives the decision.",
                if topic.is_empty() { String::new() } else { format!(" about {topic}") }
            ),
            json!({
                "type": "object",
                "properties": {
                    "title": text_field("Title", "A short title for the decision"),
                    "problem": text_field("Problem", "The context and the problem that needs a decision"),
                    "drivers": text_field("Decision drivers", "What matters most, one per line")
                },
                "required": ["title", "problem"]
            }),
            |answer| {
                let title = answer.get("title").and_then(Value::as_str).unwrap_or_default().trim().to_owned();
                let problem =
                    answer.get("problem").and_then(Value::as_str).unwrap_or_default().trim().to_owned();
                json!({"title": title, "problem": problem, "drivers": lines(answer.get("drivers")), "question": format!("{title} {problem}")})
            },
        ),
        "research" => {
            let evidence = context.pointer("/evidence/evidence").cloned().unwrap_or_else(|| json!([]));
            let count = evidence.as_array().map_or(0, Vec::len);
            let text = if context.get("evidence").is_some() {
                research::report(
                    context.pointer("/evidence/question").and_then(Value::as_str).unwrap_or_default(),
                    context.pointer("/evidence/root").and_then(Value::as_str).unwrap_or_default(),
                    &serde_json::from_value::<Vec<research::index::Evidence>>(evidence.clone())
                        .unwrap_or_default(),
                    None,
                )
            } else {
                "No root was given, so nothing was searched.".to_owned()
            };
            ToolOutcome::Result(result::structured(text, json!({"evidence": evidence, "found": count})))
        }
        "options" => {
            let cited: Vec<String> = research_citations(&context).into_iter().take(5).collect();
            let found = if cited.is_empty() {
                String::new()
            } else {
                format!(" The research found: {}.", cited.join(", "))
            };
            ask(
                ctx,
                index,
                format!(
                    "Phase 3 of 7, {name}.{found} Which options do you consider? One per line, at least two."
                ),
                json!({"type": "object", "properties": {"options": text_field("Options", "The options considered, one per line")}, "required": ["options"]}),
                |answer| json!({"options": lines(answer.get("options"))}),
            )
        }
        "decision" => {
            let options: Vec<String> = context
                .pointer("/options/options")
                .and_then(|o| serde_json::from_value(o.clone()).ok())
                .unwrap_or_default();
            if options.is_empty() {
                return ToolOutcome::Result(result::error_text(
                    "plan_adr: no options were given, so there is nothing to decide",
                ));
            }
            ask(
                ctx,
                index,
                format!("Phase 4 of 7, {name}. Which option do you choose, and why?"),
                json!({
                    "type": "object",
                    "properties": {
                        "chosen": {"type": "string", "title": "Chosen option", "enum": options},
                        "rationale": text_field("Rationale", "Why this option, against the drivers")
                    },
                    "required": ["chosen", "rationale"]
                }),
                |answer| json!({"chosen": answer.get("chosen").cloned().unwrap_or(Value::Null), "rationale": answer.get("rationale").cloned().unwrap_or(Value::Null), "options": options}),
            )
        }
        "impact" => ask(
            ctx,
            index,
            format!(
                "Phase 5 of 7, {name}. What are the consequences of choosing {}?",
                context.pointer("/decision/chosen").and_then(Value::as_str).unwrap_or("it")
            ),
            json!({
                "type": "object",
                "properties": {
                    "positive": text_field("Good", "Good consequences, one per line"),
                    "negative": text_field("Bad", "Bad consequences and risks, one per line")
                },
                "required": ["positive", "negative"]
            }),
            |answer| json!({"positive": lines(answer.get("positive")), "negative": lines(answer.get("negative"))}),
        ),
        "implementation" => ask(
            ctx,
            index,
            format!(
                "Phase 6 of 7, {name}. Which steps put the decision into effect, and how will you confirm it worked?"
            ),
            json!({
                "type": "object",
                "properties": {
                    "steps": text_field("Steps", "Implementation steps, one per line"),
                    "confirmation": text_field("Confirmation", "How compliance with the decision is confirmed")
                },
                "required": ["steps"]
            }),
            |answer| json!({"steps": lines(answer.get("steps")), "confirmation": answer.get("confirmation").cloned().unwrap_or(Value::Null)}),
        ),
        _ => write_adr(ctx, &context),
    }
}

/// Asks the person one phase's questions, or, once answered, gives the phase's output. A person
/// who declines or cancels ends the workflow with a tool error that says where.
fn ask(
    ctx: &ToolContext,
    index: usize,
    message: String,
    schema: Value,
    output: impl FnOnce(&Map<String, Value>) -> Value,
) -> ToolOutcome {
    let (id, name) = PHASES[index];
    let Some(reply) = ctx.input(id) else {
        return ToolOutcome::InputRequired(InputRequired::new().ask(id, input::elicit_form(message, schema)));
    };
    match (reply.get("action").and_then(Value::as_str), reply.get("content").and_then(Value::as_object)) {
        (Some("accept"), Some(content)) => {
            let produced = output(content);
            let text = format!("Phase {} of 7, {name}: done", index + 1);
            ToolOutcome::Result(result::structured(text, produced))
        }
        (action, _) => ToolOutcome::Result(result::error_text(format!(
            "plan_adr stopped at phase {} of 7 ({name}): the person answered `{}`",
            index + 1,
            action.unwrap_or("nothing")
        ))),
    }
}

fn write_adr(ctx: &ToolContext, context: &Value) -> ToolOutcome {
    let field =
        |pointer: &str| context.pointer(pointer).and_then(Value::as_str).unwrap_or_default().to_owned();
    let list = |pointer: &str| -> Vec<String> {
        context.pointer(pointer).and_then(|v| serde_json::from_value(v.clone()).ok()).unwrap_or_default()
    };
    let title = field("/problem/title");
    let chosen = field("/decision/chosen");
    let rationale = field("/decision/rationale");
    let options: Vec<String> = list("/options/options");
    let date = conveyor_shared::model::iso8601(conveyor_shared::model::now_ms());
    let date = date.get(..10).unwrap_or(&date).to_owned();
    let mut md = format!(
        "---\nstatus: proposed\ndate: {date}\n---\n\n# {title}\n\n## Context and Problem Statement\n\n{}\n",
        field("/problem/problem")
    );
    let drivers = list("/problem/drivers");
    if !drivers.is_empty() {
        md.push_str("\n## Decision Drivers\n\n");
        drivers.iter().for_each(|d| md.push_str(&format!("* {d}\n")));
    }
    md.push_str("\n## Considered Options\n\n");
    options.iter().for_each(|o| md.push_str(&format!("* {o}\n")));
    md.push_str(&format!("\n## Decision Outcome\n\nChosen option: \"{chosen}\", because {rationale}\n"));
    md.push_str("\n### Consequences\n\n");
    list("/impact/positive").iter().for_each(|c| md.push_str(&format!("* Good, because {c}\n")));
    list("/impact/negative").iter().for_each(|c| md.push_str(&format!("* Bad, because {c}\n")));
    let confirmation = field("/implementation/confirmation");
    if !confirmation.is_empty() {
        md.push_str(&format!("\n### Confirmation\n\n{confirmation}\n"));
    }
    md.push_str("\n## Implementation Plan\n\n");
    list("/implementation/steps")
        .iter()
        .enumerate()
        .for_each(|(i, s)| md.push_str(&format!("{}. {s}\n", i + 1)));
    let cited: Vec<String> = research_citations(context).iter().map(|c| format!("* `{c}`")).collect();
    if !cited.is_empty() {
        md.push_str(&format!(
            "\n## More Information\n\nWhat the code says, found by research:\n\n{}\n",
            cited.join("\n")
        ));
    }
    let uri = format!("conveyor://tasks/{}/adr.md", ctx.task_id);
    let (todo, items) = todo_list(&uri, &title, context);
    let todo_uri = format!("conveyor://tasks/{}/TODO.md", ctx.task_id);
    ToolOutcome::Result(json!({
        "content": [
            {"type": "text", "text": md},
            {"type": "resource", "resource": {"uri": uri, "mimeType": "text/markdown", "text": md}},
            {"type": "resource", "resource": {"uri": todo_uri, "mimeType": "text/markdown", "text": todo}}
        ],
        "structuredContent": {"title": title, "status": "proposed", "markdown": md, "uri": uri, "chosenOption": chosen, "todo": {"markdown": todo, "uri": todo_uri, "items": items}},
        "isError": false
    }))
}

/// The implementation phase's steps as a checklist citing the new record's Implementation Plan;
/// a step whose named things (in backticks) the research phase found in the code is checked off
/// with that `path:line`.
fn todo_list(uri: &str, title: &str, context: &Value) -> (String, Vec<TodoItem>) {
    let steps: Vec<String> = context
        .pointer("/implementation/steps")
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default();
    let evidence: Vec<Value> =
        context.pointer("/research/evidence").and_then(Value::as_array).cloned().unwrap_or_default();
    let mut items = Vec::new();
    for step in steps {
        let source = Source {
            adr_path: uri.to_owned(),
            adr: title.to_owned(),
            section: "Implementation Plan".to_owned(),
            line: 0,
        };
        let mut item = TodoItem::new(step, source);
        let found: Vec<String> = item
            .terms()
            .iter()
            .filter_map(|term| {
                evidence
                    .iter()
                    .find(|e| e["snippet"].as_str().is_some_and(|s| s.contains(term.as_str())))
                    .and_then(|e| Some(format!("{}:{}", e.get("path")?.as_str()?, e.get("line")?)))
            })
            .collect();
        if !item.terms().is_empty() && found.len() == item.terms().len() {
            item.mark(found);
        }
        items.push(item);
    }
    (crate::adr_todo::checklist(&format!("TODO: {title}"), &items), items)
}
