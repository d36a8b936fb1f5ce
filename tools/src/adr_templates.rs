//! Architecture decision record templates: Michael Nygard's original format and MADR (Markdown
//! Architectural Decision Records, 4.0). Each is a resource (`conveyor://adr-templates/NAME`, the
//! blank template as Markdown) and a prompt (`adr_NAME`) that asks the client's model to draft an
//! ADR in that format from a title and what the person knows, with the template embedded.

use conveyor_shared::model::ToolOutcome;
use serde_json::{Value, json};

use conveyor_worker::tool::{FnTool, ToolContext, ToolRegistry};

/// The queue every template offer shares: they are light, and one queue per shard serves them all.
const QUEUE: &str = "adr-templates";

/// The status values ADRs use, offered as completions.
const STATUSES: [&str; 5] = ["proposed", "accepted", "rejected", "deprecated", "superseded"];

const NYGARD: &str = "\
# NUMBER. TITLE

Date: YYYY-MM-DD

## Status

Proposed

## Context

The forces at play: technological, political, social and project-local. They are probably in
tension, and should be called out as such. Describe facts, in value-neutral language.

## Decision

The response to these forces, in full sentences and the active voice: \"We will ...\".

## Consequences

What becomes easier or harder to do because of this change: every consequence, positive,
negative and neutral, that affects the team and the project in the future.
";

const MADR: &str = "\
---
status: proposed
date: YYYY-MM-DD
decision-makers: list everyone involved in the decision
consulted: list everyone whose opinions are sought
informed: list everyone who is kept up to date on progress
---

# TITLE: a short title, representative of the solved problem and the found solution

## Context and Problem Statement

Describe the context and problem statement in two or three sentences, or as a question.

## Decision Drivers

* driver 1, e.g., a force, facing concern, ...
* driver 2

## Considered Options

* option 1
* option 2
* option 3

## Decision Outcome

Chosen option: \"option 1\", because justification, e.g., only option which meets a k.o. criterion.

### Consequences

* Good, because positive consequence, e.g., improvement of one or more desired qualities
* Bad, because negative consequence, e.g., compromising one or more desired qualities

### Confirmation

How the implementation of or compliance with the ADR can be confirmed (a review, a test).

## Pros and Cons of the Options

### option 1

* Good, because argument a
* Neutral, because argument b
* Bad, because argument c

## More Information

Further evidence, the team's agreement, links to other decisions and resources.
";

/// One template: its short name, its title, the template and how its files are usually named.
struct Template {
    name: &'static str,
    title: &'static str,
    text: &'static str,
    about: &'static str,
}

static TEMPLATES: [Template; 2] = [
    Template {
        name: "nygard",
        title: "Nygard ADR",
        text: NYGARD,
        about: "Michael Nygard's original format: Title, Status, Context, Decision, Consequences.",
    },
    Template {
        name: "madr",
        title: "MADR 4.0",
        text: MADR,
        about: "Markdown Architectural Decision Records: front matter, problem, drivers, options, outcome, pros and cons.",
    },
];

fn uri(name: &str) -> String {
    format!("conveyor://adr-templates/{name}")
}

fn text(ctx: &ToolContext, name: &str) -> String {
    ctx.str_arg(name).map(str::trim).filter(|s| !s.is_empty()).unwrap_or_default().to_owned()
}

/// The messages of a drafting prompt: the template embedded, then what to write.
fn draft(template: &Template, ctx: &ToolContext) -> Value {
    let title = text(ctx, "title");
    let mut ask = format!(
        "Draft an architecture decision record titled \"{title}\" in the {} format of the template above. \
         Keep every section of the template, in its order; write in full sentences; where something is not \
         known yet, say so in the section rather than inventing it.",
        template.title
    );
    for (argument, label) in
        [("context", "What we know about the context"), ("decision", "The decision, if made")]
    {
        let value = text(ctx, argument);
        if !value.is_empty() {
            ask.push_str(&format!("\n\n{label}: {value}"));
        }
    }
    let status = text(ctx, "status");
    if !status.is_empty() {
        ask.push_str(&format!("\n\nStatus: {status}"));
    }
    json!({
        "description": format!("Draft \"{title}\" as a {}", template.title),
        "messages": [
            {"role": "user", "content": {"type": "resource", "resource": {
                "uri": uri(template.name), "mimeType": "text/markdown", "text": template.text
            }}},
            {"role": "user", "content": {"type": "text", "text": ask}}
        ]
    })
}

/// Adds the templates as resources and as drafting prompts.
pub fn register(registry: &mut ToolRegistry) {
    for template in &TEMPLATES {
        let definition = json!({
            "uri": uri(template.name),
            "name": format!("adr-template-{}", template.name),
            "title": template.title,
            "description": format!("A blank {} template. {}", template.title, template.about),
            "mimeType": "text/markdown",
        });
        let (name, text) = (template.name, template.text);
        registry.register(
            FnTool::resource(definition, move |_ctx| async move {
                // The templates change only with a new release: any client may keep them for a day.
                ToolOutcome::Result(json!({
                    "contents": [{"uri": uri(name), "mimeType": "text/markdown", "text": text}],
                    "ttlMs": 86_400_000, "cacheScope": "public"
                }))
            })
            .on_queue(QUEUE),
        );
        let prompt = json!({
            "name": format!("adr_{}", template.name),
            "title": format!("Draft a {}", template.title),
            "description": format!("Drafts an architecture decision record in the {} format. {}", template.title, template.about),
            "arguments": [
                {"name": "title", "description": "What the decision is about, as a short title", "required": true},
                {"name": "context", "description": "What you know about the problem and its forces"},
                {"name": "decision", "description": "The decision, when it is already made"},
                {"name": "status", "description": "proposed, accepted, rejected, deprecated or superseded"}
            ],
            "_meta": {"io.conveyor/completions": {"status": STATUSES}},
        });
        registry.register(
            FnTool::prompt(prompt, move |ctx| async move { ToolOutcome::Result(draft(template, &ctx)) })
                .on_queue(QUEUE),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_template_is_offered_as_a_resource_and_a_prompt() {
        let mut registry = ToolRegistry::new();
        register(&mut registry);
        let names = registry.names();
        for expected in [
            "resource/conveyor://adr-templates/nygard",
            "prompt/adr_nygard",
            "resource/conveyor://adr-templates/madr",
            "prompt/adr_madr",
        ] {
            assert!(names.iter().any(|n| n == expected), "{expected} missing from {names:?}");
        }
    }

    #[test]
    fn the_templates_have_the_sections_of_their_format() {
        for section in ["## Status", "## Context", "## Decision", "## Consequences"] {
            assert!(NYGARD.contains(section), "{section}");
        }
        for section in [
            "status: proposed",
            "## Context and Problem Statement",
            "## Considered Options",
            "## Decision Outcome",
        ] {
            assert!(MADR.contains(section), "{section}");
        }
    }
}
