//! `research`: answers a question about a root's files with ranked evidence, as a graph whose
//! scan nodes spread over the workers.
//!
//! - The `research` node checks its arguments, counts the files, and plans: one
//!   `step/research_scan` node per shard of the tree (files are assigned to shards by a hash of
//!   their path, so scans need no shared listing), a `step/research_merge` node that ranks what the
//!   scans found with the whole tree's statistics, and, when the client offers sampling, a
//!   `step/research_answer` node that asks the client's model to answer from the evidence.
//! - [`text`]: terms of code and prose; [`index`]: chunks, BM25, shards and the merge.

pub mod index;
pub mod text;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use conveyor_shared::input::{self, InputRequired};
use conveyor_shared::model::{ToolOutcome, result};
use serde::Deserialize;
use serde_json::{Value, json};

use self::index::{Evidence, ShardScan};
use self::text::Query;
use super::roots::{Root, RootError, Roots, root_schema, with_root_argument};
use super::{invalid, plan};
use conveyor_worker::tool::{FnTool, ToolContext, ToolRegistry};

/// The queue of research and its steps.
pub const QUEUE: &str = "research";
/// Files per scan shard, roughly.
const FILES_PER_SHARD: usize = 4_000;
/// Most scan shards of one question.
const MAX_SHARDS: usize = 32;
/// Candidates each shard sends per evidence item asked for.
const CANDIDATES_PER_RESULT: usize = 3;
pub const DEFAULT_MAX_RESULTS: usize = 20;
pub const MAX_MAX_RESULTS: usize = 200;
const MAX_QUESTION_CHARS: usize = 2_000;

/// The arguments of `research`, and of each of its scans.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResearchArgs {
    pub root: String,
    pub question: String,
    #[serde(default)]
    pub paths: Vec<String>,
    #[serde(default)]
    pub max_results: Option<usize>,
    #[serde(default)]
    pub synthesize: Option<bool>,
}

impl ResearchArgs {
    fn max_results(&self) -> usize {
        self.max_results.unwrap_or(DEFAULT_MAX_RESULTS).clamp(1, MAX_MAX_RESULTS)
    }
}

pub fn register(registry: &mut ToolRegistry, roots: &Roots) {
    let planner = roots.clone();
    registry.register(
        FnTool::new(definition(roots), move |ctx| {
            let roots = planner.clone();
            async move { plan_research(&roots, &ctx).await }
        })
        .on_queue(QUEUE),
    );
    let scanner = roots.clone();
    registry.register(
        FnTool::step(
            step_definition("research_scan", "Scans one shard of a root for a question's terms."),
            move |ctx| {
                let roots = scanner.clone();
                async move { scan(&roots, &ctx).await }
            },
        )
        .on_queue(QUEUE),
    );
    registry.register(
        FnTool::step(
            step_definition(
                "research_merge",
                "Ranks what every shard found with the whole tree's statistics.",
            ),
            |ctx| async move { merge(&ctx) },
        )
        .on_queue(QUEUE),
    );
    registry.register(
        FnTool::step(
            step_definition("research_answer", "Asks the client's model to answer from the evidence."),
            |ctx| async move { answer(&ctx) },
        )
        .on_queue(QUEUE),
    );
}

fn definition(roots: &Roots) -> Value {
    with_root_argument(json!({
        "name": "research",
        "title": "Research a codebase",
        "description": "Answers a question about the files of a root with ranked evidence (BM25 over chunks of 20 lines, identifiers split on case and underscores, phrases in order and quoted phrases weighted up), each item citing path:line. The tree is scanned in shards on several workers. When the client offers sampling, its model writes an answer from the evidence, with citations.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "root": root_schema(roots),
                "question": {"type": "string", "minLength": 1, "maxLength": MAX_QUESTION_CHARS, "description": "What to find; put an exact phrase in double quotes"},
                "paths": {"type": "array", "items": {"type": "string"}, "maxItems": 64, "description": "Folders or files of the root to search (relative); all of it when absent"},
                "maxResults": {"type": "integer", "minimum": 1, "maximum": MAX_MAX_RESULTS, "default": DEFAULT_MAX_RESULTS, "description": "Most evidence items"},
                "synthesize": {"type": "boolean", "default": true, "description": "Ask the client's model for an answer when the client offers sampling"}
            },
            "required": ["root", "question"],
            "additionalProperties": false
        },
        "outputSchema": {
            "type": "object",
            "properties": {
                "question": {"type": "string"},
                "evidence": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "path": {"type": "string"},
                            "line": {"type": "integer"},
                            "snippet": {"type": "string"},
                            "score": {"type": "number"}
                        },
                        "required": ["path", "line", "snippet", "score"]
                    }
                },
                "answer": {"type": "string"},
                "stats": {"type": "object"}
            },
            "required": ["question", "evidence"]
        },
        "execution": {"taskSupport": "optional"}
    }))
}

fn step_definition(name: &str, description: &str) -> Value {
    json!({"name": name, "description": description, "inputSchema": {"type": "object"}})
}

fn parse_args(ctx: &ToolContext) -> Result<ResearchArgs, ToolOutcome> {
    let args: ResearchArgs = serde_json::from_value(ctx.arguments.clone())
        .map_err(|e| invalid(format!("research: invalid arguments: {e}")))?;
    if args.question.trim().is_empty() || args.question.chars().count() > MAX_QUESTION_CHARS {
        return Err(invalid(format!(
            "research: the question must hold 1 to {MAX_QUESTION_CHARS} characters"
        )));
    }
    Ok(args)
}

async fn plan_research(roots: &Roots, ctx: &ToolContext) -> ToolOutcome {
    let args = match parse_args(ctx) {
        Ok(args) => args,
        Err(outcome) => return outcome,
    };
    let root = match roots.for_caller(ctx, &args.root) {
        Ok(root) => root.clone(),
        Err(e) => return e.into_outcome(),
    };
    if Query::parse(&args.question).is_empty() {
        return invalid(format!("research: the question `{}` has no word to search for", args.question));
    }
    let mut nodes = match plan_scans(&root, &args.paths, json!(args.question), args.max_results(), "").await {
        Ok(nodes) => nodes,
        Err(outcome) => return outcome,
    };
    let synthesize = args.synthesize.unwrap_or(true) && ctx.client_supports(&input::sample("", 1));
    if synthesize {
        nodes.push(json!({
            "id": "answer",
            "tool": "step/research_answer",
            "arguments": {"found": {"$from": "merge", "pointer": "/structuredContent"}},
            "dependsOn": ["merge"]
        }));
    }
    plan(nodes, if synthesize { "answer" } else { "merge" })
}

/// The scan nodes of a search of `root` (one per shard, ids `{prefix}scan-N`) and the node that
/// merges them (`{prefix}merge`), for a graph a tool plans. `question` is the question's text, or
/// an upstream reference to it (a question another node asks the person).
pub async fn plan_scans(
    root: &Root,
    paths: &[String],
    question: Value,
    max_results: usize,
    prefix: &str,
) -> Result<Vec<Value>, ToolOutcome> {
    let (counted_root, counted_paths) = (root.clone(), paths.to_vec());
    let counted = tokio::task::spawn_blocking(move || {
        counted_root.files_under(&counted_paths).map(|files| files.len())
    })
    .await;
    let files = match counted {
        Ok(Ok(files)) => files,
        Ok(Err(e)) => return Err(e.into_outcome()),
        Err(e) => return Err(invalid(format!("research: listing the root failed: {e}"))),
    };
    let shards = files.div_ceil(FILES_PER_SHARD).clamp(1, MAX_SHARDS);
    let max_results = max_results.clamp(1, MAX_MAX_RESULTS);
    let keep = max_results * CANDIDATES_PER_RESULT;
    let scan_ids: Vec<String> = (0..shards).map(|s| format!("{prefix}scan-{s}")).collect();
    let mut nodes: Vec<Value> = scan_ids
        .iter()
        .enumerate()
        .map(|(shard, id)| {
            json!({
                "id": id,
                "tool": "step/research_scan",
                "arguments": {"root": root.name, "question": question, "paths": paths, "shard": shard, "shards": shards, "keep": keep},
                "retries": 2
            })
        })
        .collect();
    let scans: Vec<Value> =
        scan_ids.iter().map(|id| json!({"$from": id, "pointer": "/structuredContent"})).collect();
    nodes.push(json!({
        "id": format!("{prefix}merge"),
        "tool": "step/research_merge",
        "arguments": {"question": question, "maxResults": max_results, "root": root.name, "scans": scans},
        "dependsOn": scan_ids
    }));
    Ok(nodes)
}

#[derive(Deserialize)]
struct ScanArgs {
    #[serde(flatten)]
    research: ResearchArgs,
    shard: u32,
    shards: u32,
    keep: usize,
}

async fn scan(roots: &Roots, ctx: &ToolContext) -> ToolOutcome {
    let args: ScanArgs = match serde_json::from_value(ctx.arguments.clone()) {
        Ok(args) => args,
        Err(e) => return invalid(format!("research_scan: invalid arguments: {e}")),
    };
    let root: Root = match roots.for_caller(ctx, &args.research.root) {
        Ok(root) => root.clone(),
        Err(e) => return e.into_outcome(),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let scanned = Arc::new(AtomicU64::new(0));
    let cancel = ctx.cancel.clone();
    let watcher = {
        let stop = stop.clone();
        tokio::spawn(async move {
            cancel.cancelled().await;
            stop.store(true, Ordering::Relaxed);
        })
    };
    let query = Query::parse(&args.research.question);
    let (flag, count) = (stop.clone(), scanned.clone());
    let work = tokio::task::spawn_blocking(move || -> Result<ShardScan, RootError> {
        let files = root.walk_under(&args.research.paths)?;
        let mine = files.filter_map(|path| {
            let relative = root.relative(&path);
            (index::shard_of(&relative, args.shards) == args.shard).then_some((relative, path))
        });
        Ok(index::scan_shard(mine, &query, args.keep, &|| flag.load(Ordering::Relaxed), &|| {
            count.fetch_add(1, Ordering::Relaxed);
        }))
    })
    .await;
    watcher.abort();
    if ctx.cancel.is_cancelled() {
        return ToolOutcome::Result(result::error_text("research_scan: cancelled"));
    }
    match work {
        Ok(Ok(found)) => {
            let text = format!(
                "shard {} of {}: {} files, {} chunks, {} candidates",
                args.shard + 1,
                args.shards,
                found.stats.files,
                found.stats.chunks,
                found.candidates.len()
            );
            ToolOutcome::Result(result::structured(text, serde_json::to_value(&found).unwrap_or(Value::Null)))
        }
        Ok(Err(e)) => e.into_outcome(),
        Err(e) => invalid(format!("research_scan: the scan failed: {e}")),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MergeArgs {
    question: String,
    max_results: usize,
    root: String,
    scans: Vec<ShardScan>,
}

fn merge(ctx: &ToolContext) -> ToolOutcome {
    let args: MergeArgs = match serde_json::from_value(ctx.arguments.clone()) {
        Ok(args) => args,
        Err(e) => return invalid(format!("research_merge: invalid arguments: {e}")),
    };
    let (stats, evidence) = index::merge(&args.scans, args.max_results);
    let report = report(&args.question, &args.root, &evidence, None);
    ToolOutcome::Result(result::structured(
        report,
        json!({
            "question": args.question,
            "root": args.root,
            "evidence": evidence,
            "stats": {"files": stats.files, "skipped": stats.skipped, "chunks": stats.chunks, "shards": args.scans.len(), "truncated": stats.truncated}
        }),
    ))
}

/// The text a person reads: the answer (when there is one), then each piece of evidence as
/// `path:line`.
pub fn report(question: &str, root: &str, evidence: &[Evidence], answer: Option<&str>) -> String {
    let mut out = String::new();
    if let Some(answer) = answer {
        out.push_str(answer.trim());
        out.push_str("\n\n");
    }
    if evidence.is_empty() {
        out.push_str(&format!("No evidence found in root `{root}` for: {question}\n"));
        return out;
    }
    out.push_str(&format!("Evidence in root `{root}` for: {question}\n"));
    for (i, item) in evidence.iter().enumerate() {
        let cited = index::cited_line(&item.snippet, item.line);
        out.push_str(&format!("{}. {}:{} (score {:.2}) {cited}\n", i + 1, item.path, item.line, item.score));
    }
    out
}

/// Longest answer asked of the client's model, in tokens.
const ANSWER_MAX_TOKENS: u32 = 1_000;

/// The prompt that asks the client's model to answer from evidence, citing `path:line`.
pub fn answer_prompt(question: &str, evidence: &[Evidence]) -> String {
    let mut prompt = format!(
        "Answer the question below using only the evidence that follows. Cite every claim as path:line. If the evidence does not answer it, say so.\n\nQuestion: {question}\n\nEvidence:\n"
    );
    for item in evidence {
        prompt.push_str(&format!("--- {}:{}\n{}\n", item.path, item.line, item.snippet));
    }
    prompt
}

/// The text of a sampling result (`{"role", "content": {"type": "text", "text"}}`, or a content
/// array), when the client answered with text.
pub fn sampled_text(answer: &Value) -> Option<String> {
    let content = answer.get("content")?;
    let items: Vec<&Value> = match content {
        Value::Array(items) => items.iter().collect(),
        other => vec![other],
    };
    let text: Vec<&str> = items.iter().filter_map(|c| c.get("text").and_then(Value::as_str)).collect();
    (!text.is_empty()).then(|| text.join("\n"))
}

fn answer(ctx: &ToolContext) -> ToolOutcome {
    let found = ctx.arguments.get("found").cloned().unwrap_or(Value::Null);
    let question = found.get("question").and_then(Value::as_str).unwrap_or_default().to_owned();
    let root = found.get("root").and_then(Value::as_str).unwrap_or_default().to_owned();
    let evidence: Vec<Evidence> =
        found.get("evidence").cloned().and_then(|e| serde_json::from_value(e).ok()).unwrap_or_default();
    if evidence.is_empty() {
        return ToolOutcome::Result(result::structured(report(&question, &root, &evidence, None), found));
    }
    let Some(reply) = ctx.input("answer") else {
        return ToolOutcome::InputRequired(
            InputRequired::new()
                .ask("answer", input::sample(answer_prompt(&question, &evidence), ANSWER_MAX_TOKENS)),
        );
    };
    let mut structured = found.clone();
    match sampled_text(reply) {
        Some(text) => {
            structured["answer"] = json!(text);
            if let Some(model) = reply.get("model") {
                structured["model"] = model.clone();
            }
            ToolOutcome::Result(result::structured(
                report(&question, &root, &evidence, Some(&text)),
                structured,
            ))
        }
        None => {
            // A client that declined or failed leaves the evidence, which still answers.
            ToolOutcome::Result(result::structured(report(&question, &root, &evidence, None), structured))
        }
    }
}
