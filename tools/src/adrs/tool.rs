//! `validate_adrs {"root", "path"}`: reads the records under a folder of a root in batches, one
//! node per batch on any worker, then checks them against each other in one node. With
//! `"review": true` and a client that samples, the client's model reviews each record too.

use std::collections::BTreeMap;
use std::path::Path;

use conveyor_shared::input::{self, InputRequired};
use conveyor_shared::model::{ToolOutcome, result};
use serde::Deserialize;
use serde_json::{Value, json};

use super::parse::{self, AdrDoc};
use super::rules::{self, Finding};
use crate::research::{index::read_text, sampled_text};
use crate::roots::{Root, Roots, root_schema, with_root_argument};
use crate::{invalid, plan, step_definition};
use conveyor_worker::tool::{FnTool, ToolContext, ToolRegistry};

pub const TOOL: &str = "validate_adrs";
/// The queue of ADR validation and its steps.
pub const QUEUE: &str = "adrs";
/// Records per batch node.
const BATCH: usize = 50;
/// Most records one call validates.
const MAX_RECORDS: usize = 20_000;
/// Most records the client's model is asked to review in one call.
const MAX_REVIEWS: usize = 50;
/// Longest review asked of the client's model, in tokens.
const REVIEW_MAX_TOKENS: u32 = 600;

pub fn register(registry: &mut ToolRegistry, roots: &Roots) {
    let planner = roots.clone();
    registry.register(
        FnTool::new(with_root_argument(definition(roots)), move |ctx| {
            let roots = planner.clone();
            async move { plan_validation(&roots, &ctx).await }
        })
        .on_queue(QUEUE),
    );
    let reader = roots.clone();
    registry.register(
        FnTool::step(step_definition("adrs_batch", "Reads and checks one batch of ADR files."), move |ctx| {
            let roots = reader.clone();
            async move { batch(&roots, &ctx).await }
        })
        .on_queue(QUEUE),
    );
    registry.register(
        FnTool::step(
            step_definition("adrs_check", "Checks ADRs against each other and reports."),
            |ctx| async move { cross_check(&ctx) },
        )
        .on_queue(QUEUE),
    );
    let reviewer = roots.clone();
    registry.register(
        FnTool::step(
            step_definition("adrs_review", "Asks the client's model to review each ADR."),
            move |ctx| {
                let roots = reviewer.clone();
                async move { review(&roots, &ctx).await }
            },
        )
        .on_queue(QUEUE),
    );
}

fn definition(roots: &Roots) -> Value {
    json!({
        "name": TOOL,
        "title": "Validate architecture decision records",
        "description": "Validates the ADRs under a folder of a root: Nygard, MADR (with or without front matter) and bold inline fields (**Status**: Accepted). Finds missing required sections, unknown status values, bad or missing dates, duplicate and missing numbers (gaps in the summary), supersedes/superseded-by without the matching link, links to ADRs or files that do not exist, and empty sections. README, index and template files are skipped. With review: true, the client's model reviews each ADR through sampling.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "root": root_schema(roots),
                "path": {"type": "string", "description": "The folder of ADRs, relative to the root (for example docs/adr)"},
                "review": {"type": "boolean", "default": false, "description": format!("Ask the client's model to review each ADR (at most {MAX_REVIEWS}; needs sampling)")}
            },
            "required": ["root", "path"],
            "additionalProperties": false
        },
        "outputSchema": rules::output_schema(),
        "execution": {"taskSupport": "optional"}
    })
}

#[derive(Deserialize)]
struct Args {
    root: String,
    path: String,
    #[serde(default)]
    review: bool,
}

async fn plan_validation(roots: &Roots, ctx: &ToolContext) -> ToolOutcome {
    let args: Args = match serde_json::from_value(ctx.arguments.clone()) {
        Ok(args) => args,
        Err(e) => return invalid(format!("{TOOL}: invalid arguments: {e}")),
    };
    let root = match roots.for_caller(ctx, &args.root) {
        Ok(root) => root.clone(),
        Err(e) => return e.into_outcome(),
    };
    let folder = args.path.clone();
    let listed = tokio::task::spawn_blocking(move || adr_files(&root, &folder)).await;
    let files = match listed {
        Ok(Ok(files)) => files,
        Ok(Err(outcome)) => return outcome,
        Err(e) => return invalid(format!("{TOOL}: listing failed: {e}")),
    };
    if files.len() > MAX_RECORDS {
        return invalid(format!(
            "{TOOL}: `{}` holds {} ADR files; one call validates at most {MAX_RECORDS}",
            args.path,
            files.len()
        ));
    }
    let batches: Vec<&[String]> = files.chunks(BATCH).collect();
    let mut nodes: Vec<Value> = batches
        .iter()
        .enumerate()
        .map(|(i, batch)| {
            json!({"id": format!("batch-{i}"), "tool": "step/adrs_batch", "arguments": {"root": args.root, "files": batch}, "retries": 2})
        })
        .collect();
    let ids: Vec<String> = (0..batches.len()).map(|i| format!("batch-{i}")).collect();
    let from: Vec<Value> =
        ids.iter().map(|id| json!({"$from": id, "pointer": "/structuredContent"})).collect();
    nodes.push(json!({"id": "check", "tool": "step/adrs_check", "arguments": {"path": args.path, "batches": from}, "dependsOn": ids}));
    let review = args.review && !files.is_empty() && ctx.client_supports(&input::sample("", 1));
    if review {
        nodes.push(json!({
            "id": "review",
            "tool": "step/adrs_review",
            "arguments": {"root": args.root, "report": {"$from": "check", "pointer": "/structuredContent"}},
            "dependsOn": ["check"]
        }));
    }
    plan(nodes, if review { "review" } else { "check" })
}

/// The ADR files under `folder`, relative to the root, sorted.
fn adr_files(root: &Root, folder: &str) -> Result<Vec<String>, ToolOutcome> {
    let start = root.resolve(folder).map_err(|e| e.into_outcome())?;
    if !start.is_dir() {
        return Err(invalid(format!("{TOOL}: `{folder}` is not a folder of root `{}`", root.name)));
    }
    Ok(root
        .files(&start)
        .map(|p| root.relative(&p))
        .filter(|p| p.ends_with(".md") || p.ends_with(".markdown"))
        .filter(|p| parse::is_adr_path(p))
        .collect())
}

async fn batch(roots: &Roots, ctx: &ToolContext) -> ToolOutcome {
    let root = match roots.of(ctx) {
        Ok(root) => root.clone(),
        Err(e) => return e.into_outcome(),
    };
    let files: Vec<String> =
        ctx.arguments.get("files").and_then(|f| serde_json::from_value(f.clone()).ok()).unwrap_or_default();
    let checked = tokio::task::spawn_blocking(move || {
        let mut docs = Vec::new();
        let mut findings: BTreeMap<String, Vec<Finding>> = BTreeMap::new();
        for relative in files {
            let Some(text) = root.resolve(&relative).ok().and_then(|p| read_text(&p)) else {
                findings.entry(relative.clone()).or_default().push(Finding {
                    rule: "unreadable".to_owned(),
                    severity: rules::Severity::Error,
                    message: format!("`{relative}` could not be read as text (gone, too large or binary)"),
                    line: None,
                });
                docs.push(parse::parse_adr(&relative, ""));
                continue;
            };
            let doc = parse::parse_adr(&relative, &text);
            let directory = Path::new(&relative).parent().map(Path::to_path_buf).unwrap_or_default();
            let exists = |target: &str| link_target_exists(&root, &directory, target);
            let found = rules::file_findings(&doc, &exists);
            if !found.is_empty() {
                findings.insert(relative.clone(), found);
            }
            docs.push(doc);
        }
        (docs, findings)
    })
    .await;
    match checked {
        Ok((docs, findings)) => {
            let text = format!("read {} ADRs, {} with findings", docs.len(), findings.len());
            ToolOutcome::Result(result::structured(text, json!({"docs": docs, "findings": findings})))
        }
        Err(e) => invalid(format!("adrs_batch: {e}")),
    }
}

/// Whether a record's link to `target` (relative to the record's `directory`) has something to
/// lead to in the root. The check reads nothing, so a hidden or ignored target (`.github/...`)
/// counts as there; a link that climbs out of the root counts as missing.
fn link_target_exists(root: &Root, directory: &Path, target: &str) -> bool {
    let joined = directory.join(target);
    root.contains(&joined.to_string_lossy()) || resolves_upward(root, &joined)
}

/// Whether a link with `..` (`../architecture.md`, common in ADRs) names something inside the
/// root: normalised lexically, then checked as any link target is.
fn resolves_upward(root: &Root, joined: &Path) -> bool {
    let mut parts: Vec<String> = Vec::new();
    for component in joined.components() {
        match component {
            std::path::Component::ParentDir if parts.pop().is_none() => return false,
            std::path::Component::ParentDir => {}
            std::path::Component::Normal(part) => parts.push(part.to_string_lossy().into_owned()),
            _ => {}
        }
    }
    root.contains(&parts.join("/"))
}

#[derive(Deserialize)]
struct Batch {
    docs: Vec<AdrDoc>,
    #[serde(default)]
    findings: BTreeMap<String, Vec<Finding>>,
}

fn cross_check(ctx: &ToolContext) -> ToolOutcome {
    let batches: Vec<Batch> = match ctx.arguments.get("batches").map(|b| serde_json::from_value(b.clone())) {
        Some(Ok(batches)) => batches,
        Some(Err(e)) => return invalid(format!("adrs_check: a batch's result is not readable: {e}")),
        None => vec![],
    };
    let mut docs: Vec<AdrDoc> = Vec::new();
    let mut findings: BTreeMap<String, Vec<Finding>> = BTreeMap::new();
    for batch in batches {
        docs.extend(batch.docs);
        findings.extend(batch.findings);
    }
    let cross = rules::cross_check(&docs);
    let report = rules::report(&docs, &findings, &cross);
    let path = ctx.str_arg("path").unwrap_or_default();
    let text = if docs.is_empty() {
        format!("No ADR files under `{path}`.\n{}", rules::summary_text(&report))
    } else {
        rules::summary_text(&report)
    };
    ToolOutcome::Result(result::structured(text, report))
}

async fn review(roots: &Roots, ctx: &ToolContext) -> ToolOutcome {
    let mut report = ctx.arguments.get("report").cloned().unwrap_or(Value::Null);
    let paths: Vec<String> = report
        .get("adrs")
        .and_then(Value::as_array)
        .map(|adrs| {
            adrs.iter().filter_map(|a| a.get("path").and_then(Value::as_str).map(str::to_owned)).collect()
        })
        .unwrap_or_default();
    let reviewed: Vec<String> = paths.into_iter().take(MAX_REVIEWS).collect();
    if ctx.inputs().is_empty() {
        let root = match roots.of(ctx) {
            Ok(root) => root.clone(),
            Err(e) => return e.into_outcome(),
        };
        let mut asking = InputRequired::new();
        for (i, path) in reviewed.iter().enumerate() {
            let text = root.resolve(path).ok().and_then(|p| read_text(&p)).unwrap_or_default();
            asking = asking
                .ask(format!("review-{i}"), input::sample(review_prompt(path, &text), REVIEW_MAX_TOKENS));
        }
        return ToolOutcome::InputRequired(asking);
    }
    let mut text = rules::summary_text(&report);
    text.push_str("\n\nReview by the client's model:\n");
    let mut reviews = Vec::new();
    for (i, path) in reviewed.iter().enumerate() {
        let review = ctx.input(&format!("review-{i}")).and_then(sampled_text);
        if let Some(review) = &review {
            text.push_str(&format!("\n## {path}\n{}\n", review.trim()));
        }
        reviews.push(json!({"path": path, "review": review}));
    }
    report["reviews"] = json!(reviews);
    ToolOutcome::Result(result::structured(text, report))
}

fn review_prompt(path: &str, text: &str) -> String {
    format!(
        "Review this architecture decision record ({path}). Say in a few bullet points whether the context explains the problem, whether the decision is stated clearly and follows from the options, and whether the consequences (good and bad) are honest. Quote the lines you comment on.\n\n{text}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_to_hidden_or_ignored_files_are_not_broken_but_reading_them_is_refused() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let base = dir.path();
        for folder in ["docs/adr", ".github/workflows", "build"] {
            std::fs::create_dir_all(base.join(folder)).expect("mkdir");
        }
        std::fs::write(base.join(".gitignore"), "build/\n").expect("write");
        std::fs::write(base.join(".github/workflows/ci.yml"), "on: push").expect("write");
        std::fs::write(base.join("build/report.html"), "<html/>").expect("write");
        std::fs::write(base.join("docs/architecture.md"), "# Architecture").expect("write");
        let roots = Roots::parse(&[format!("repo={}", base.display())]).expect("roots");
        let root = roots.get("repo").expect("root");
        let adr_dir = Path::new("docs/adr");
        assert!(link_target_exists(root, adr_dir, "../../.github/workflows/ci.yml"));
        assert!(link_target_exists(root, adr_dir, "../../build/report.html"));
        assert!(link_target_exists(root, adr_dir, "../architecture.md"));
        assert!(!link_target_exists(root, adr_dir, "../missing.md"));
        assert!(!link_target_exists(root, adr_dir, "../../../outside.md"), "above the root is missing");
        assert!(root.resolve(".github/workflows/ci.yml").is_err(), "a link check is no way to read");
        assert!(root.resolve("build/report.html").is_err());
    }
}
