//! `troubleshoot {"root", "failure"}`: from a failure log or message, finds the code it concerns
//! and the decisions (ADRs) that bear on it (research nodes over the root and over its ADR
//! folders), the failing tests the readiness history knows, and returns a test plan that cites
//! each of them. When the client samples, its model adds a hypothesis from the same evidence.
//!
//! Each run is a session kept in Redis ([`memory`]): `troubleshoot_feedback` says which of its
//! steps helped, and a later run over a similar failure puts those steps first.

pub mod memory;

use std::sync::Arc;

use conveyor_shared::input::{self, InputRequired};
use conveyor_shared::model::{ToolOutcome, result};
use conveyor_shared::roots::RootUse;
use serde_json::{Value, json};

use super::operator_config::OperatorConfig;
use super::readiness::history::RunRecord;
use super::readiness::reports::TestOutcome;
use super::research::{self, sampled_text};
use super::roots::{Root, Roots, root_schema};
use super::{invalid, plan};
use conveyor_worker::tool::{FnTool, ToolContext, ToolRegistry};

pub const TOOL: &str = "troubleshoot";
/// Where teams keep their ADRs, looked for in this order.
const ADR_FOLDERS: &[&str] = &[
    "docs/adr",
    "docs/adrs",
    "doc/adr",
    "docs/decisions",
    "docs/architecture/decisions",
    "adr",
    "adrs",
    "decisions",
];
/// The part of a failure log searched for: its most telling lines.
const MAX_QUESTION_CHARS: usize = 1_500;
const MAX_FAILURE_CHARS: usize = 100_000;
/// Readiness runs read per profile.
const HISTORY_RUNS: usize = 10;

pub fn register(registry: &mut ToolRegistry, roots: &Roots, config: &Arc<OperatorConfig>) {
    let planner = roots.clone();
    registry.register(
        FnTool::new(root_use(config).declared_in(definition(roots)), move |ctx| {
            let roots = planner.clone();
            async move { plan_troubleshooting(&roots, &ctx).await }
        })
        .on_queue(research::QUEUE),
    );
    let profiles = config.clone();
    registry.register(
        FnTool::step(json!({"name": "troubleshoot_history", "description": "Failing tests from the readiness history.", "inputSchema": {"type": "object"}}), move |ctx| {
            let config = profiles.clone();
            async move { failing_tests(&config, &ctx).await }
        })
        .on_queue(research::QUEUE),
    );
    registry.register(
        FnTool::step(json!({"name": "troubleshoot_plan", "description": "A test plan from what was found.", "inputSchema": {"type": "object"}}), |ctx| async move { test_plan(&ctx).await })
            .on_queue(research::QUEUE),
    );
}

/// Its roots: the one it searches, and those of the readiness profile whose history it reads.
fn root_use(config: &OperatorConfig) -> RootUse {
    let mut roots = RootUse::argument("root");
    let profiles = config.profiles.values().map(|p| (p.name.clone(), p.roots())).collect();
    roots.bound.insert("profile".to_owned(), profiles);
    roots
}

fn definition(roots: &Roots) -> Value {
    json!({
        "name": TOOL,
        "title": "Troubleshoot a failure",
        "description": "From a failure log or message, finds the related code and ADRs in a root (research nodes), the failing tests from the readiness history when there is one, and returns a test plan citing path:line for each step. When the client offers sampling, its model adds a hypothesis from the same evidence.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "root": root_schema(roots),
                "failure": {"type": "string", "minLength": 1, "maxLength": MAX_FAILURE_CHARS, "description": "The failure: an error message, a stack trace, a failing test's output"},
                "profile": {"type": "string", "description": "The readiness profile whose history to read; every profile when absent"}
            },
            "required": ["root", "failure"],
            "additionalProperties": false
        },
        "outputSchema": {
            "type": "object",
            "properties": {
                "failure": {"type": "string"},
                "locations": {"type": "array"},
                "code": {"type": "array"},
                "adrs": {"type": "array"},
                "failingTests": {"type": "array"},
                "plan": {"type": "array"},
                "session": {"type": "string", "description": "This run, for troubleshoot_feedback"},
                "earlierSessions": {"type": "array", "description": "Sessions of similar failures whose helpful steps come first"},
                "hypothesis": {"type": "string"}
            },
            "required": ["failure", "code", "adrs", "failingTests", "plan"]
        },
        "execution": {"taskSupport": "optional"}
    })
}

/// Words every failure log is full of, which say nothing about where the fault is.
pub(crate) const LOG_NOISE: &[&str] = &[
    "thread",
    "panicked",
    "test",
    "tests",
    "failed",
    "failure",
    "failures",
    "assertion",
    "error",
    "errors",
    "ok",
    "note",
    "run",
    "backtrace",
    "environment",
    "variable",
    "display",
    "stack",
    "traceback",
    "most",
    "recent",
    "call",
    "last",
    "line",
    "file",
    "result",
    "caused",
    "ignored",
    "passed",
    "finished",
    "running",
];

/// The places a log names as `path:line` (a stack trace, a compiler message) that are files of
/// the root: the first evidence to read. Absolute paths count when they lie inside the root. A
/// path the root does not serve by name (hidden, ignored, outside) is passed over: a log that
/// names `.env:1` must not get the secret's line quoted back.
pub fn locations(root: &Root, failure: &str) -> Vec<Value> {
    let mut found: Vec<Value> = Vec::new();
    for token in failure.split(|c: char| c.is_whitespace() || "()[]{}'\"`,<>".contains(c)) {
        // Resolving a path asks the walker about it: a long log must not cost a walk per token.
        if found.len() >= 5 {
            break;
        }
        let mut parts = token.split(':');
        let (Some(path), Some(line)) = (parts.next(), parts.next()) else { continue };
        let Ok(line) = line.parse::<u32>() else { continue };
        if !path.contains('.') || line == 0 {
            continue;
        }
        let relative = path.strip_prefix(&*root.path.to_string_lossy()).unwrap_or(path);
        let relative = relative.trim_start_matches("./").trim_start_matches('/');
        let Ok(resolved) = root.resolve(relative) else { continue };
        let relative = root.relative(&resolved);
        if found.iter().any(|f| f["path"] == relative.as_str() && f["line"] == line) {
            continue;
        }
        let text = research::index::read_text(&resolved).unwrap_or_default();
        let snippet: String =
            text.lines().skip(line.saturating_sub(2) as usize).take(3).collect::<Vec<_>>().join("\n");
        found.push(json!({"path": relative, "line": line, "snippet": snippet}));
    }
    found
}

/// The lines of a log that say what went wrong (errors, panics, assertions, failing tests, file
/// positions), or its start when none stands out; what the search looks for.
pub fn failure_question(failure: &str) -> String {
    const MARKERS: &[&str] = &[
        "error",
        "panic",
        "fail",
        "assert",
        "exception",
        "traceback",
        "expected",
        "caused by",
        ".rs:",
        ".py:",
        ".ts:",
        ".go:",
    ];
    let telling: Vec<&str> = failure
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .filter(|l| {
            let lower = l.to_lowercase();
            MARKERS.iter().any(|m| lower.contains(m))
        })
        .collect();
    let source =
        if telling.is_empty() { failure.lines().map(str::trim).collect::<Vec<_>>() } else { telling };
    let mut question = String::new();
    for line in source {
        if question.chars().count() + line.chars().count() > MAX_QUESTION_CHARS {
            break;
        }
        question.push_str(line);
        question.push('\n');
    }
    let question = if question.trim().is_empty() {
        failure.chars().take(MAX_QUESTION_CHARS).collect()
    } else {
        question
    };
    // Quoted phrases would demand the log's exact wording: the search takes its words.
    let words: Vec<&str> = question
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty() && !w.chars().all(|c| c.is_ascii_digit()))
        .filter(|w| !LOG_NOISE.contains(&w.to_lowercase().as_str()))
        .collect();
    words.join(" ")
}

async fn plan_troubleshooting(roots: &Roots, ctx: &ToolContext) -> ToolOutcome {
    let root = match roots.of(ctx) {
        Ok(root) => root.clone(),
        Err(e) => return e.into_outcome(),
    };
    let failure = ctx.str_arg("failure").unwrap_or_default().to_owned();
    if failure.trim().is_empty() {
        return invalid("troubleshoot: `failure` is empty; give the error message or log");
    }
    let question = failure_question(&failure);
    let located = locations(&root, &failure);
    if question.trim().is_empty() && located.is_empty() {
        return invalid(
            "troubleshoot: the failure names nothing to search for; give its error message or log",
        );
    }
    let mut nodes = match research::plan_scans(&root, &[], json!(question), 10, "code-").await {
        Ok(nodes) => nodes,
        Err(outcome) => return outcome,
    };
    let adr_folders: Vec<String> = ADR_FOLDERS
        .iter()
        .filter(|f| root.resolve(f).is_ok_and(|p| p.is_dir()))
        .map(|f| (*f).to_owned())
        .collect();
    let mut depends = vec!["code-merge".to_owned(), "history".to_owned()];
    let mut adrs = Value::Null;
    if !adr_folders.is_empty() {
        match research::plan_scans(&root, &adr_folders, json!(question), 5, "adr-").await {
            Ok(scans) => nodes.extend(scans),
            Err(outcome) => return outcome,
        }
        depends.push("adr-merge".to_owned());
        adrs = json!({"$from": "adr-merge", "pointer": "/structuredContent/evidence"});
    }
    nodes.push(json!({
        "id": "history",
        "tool": "step/troubleshoot_history",
        // Test names are matched against the log; a node's arguments are bounded, so its start.
        "arguments": {"failure": failure.chars().take(32_000).collect::<String>(), "profile": ctx.str_arg("profile")}
    }));
    nodes.push(json!({
        "id": "plan",
        "tool": "step/troubleshoot_plan",
        "arguments": {
            "failure": failure.chars().take(4_000).collect::<String>(),
            "root": root.name,
            "adrFolders": adr_folders,
            "locations": located,
            "code": {"$from": "code-merge", "pointer": "/structuredContent/evidence"},
            "adrs": adrs,
            "history": {"$from": "history", "pointer": "/structuredContent"},
            "sample": ctx.client_supports(&input::sample("", 1))
        },
        "dependsOn": depends
    }));
    plan(nodes, "plan")
}

/// The failing tests of the latest runs of the profile (or of every profile), those the failure
/// names first. Only profiles whose checks run in roots the caller may read: their history tells
/// of those roots.
async fn failing_tests(config: &OperatorConfig, ctx: &ToolContext) -> ToolOutcome {
    let failure = ctx.str_arg("failure").unwrap_or_default().to_lowercase();
    let yours: Vec<String> = config
        .profiles
        .values()
        .filter(|p| p.roots().iter().all(|r| ctx.may_read_root(r)))
        .map(|p| p.name.clone())
        .collect();
    let profiles: Vec<String> = match ctx.str_arg("profile") {
        Some(profile) if !yours.iter().any(|p| p == profile) => {
            if config.profiles.contains_key(profile) {
                ctx.audit_denied(profile, "troubleshoot was asked for the history of a readiness profile in a root the access policy does not grant");
            }
            return invalid(format!(
                "troubleshoot: no readiness profile `{profile}` that you may read; yours: {}",
                if yours.is_empty() { "none".to_owned() } else { yours.join(", ") }
            ));
        }
        Some(profile) => vec![profile.to_owned()],
        None => yours,
    };
    let mut failing = Vec::new();
    for profile in &profiles {
        let runs = match ctx.runs(super::readiness::tool::TOOL, profile, HISTORY_RUNS).await {
            Ok(runs) => runs,
            Err(e) => {
                return ToolOutcome::Result(result::error_text(format!(
                    "could not read the readiness history: {e}"
                )));
            }
        };
        let runs: Vec<RunRecord> = runs.into_iter().filter_map(|r| serde_json::from_value(r).ok()).collect();
        let Some(latest) = runs.first() else { continue };
        for check in &latest.checks {
            for test in check.tests.iter().filter(|t| t.outcome == TestOutcome::Failed) {
                // How many of the recent runs this test failed in: one that always fails is broken,
                // one that sometimes passes is flaky.
                let failures = runs
                    .iter()
                    .filter(|run| {
                        run.checks.iter().any(|c| {
                            c.name == check.name
                                && c.tests
                                    .iter()
                                    .any(|t2| t2.name == test.name && t2.outcome == TestOutcome::Failed)
                        })
                    })
                    .count();
                let short = test.name.rsplit("::").next().unwrap_or(&test.name).to_lowercase();
                failing.push(json!({
                    "profile": profile,
                    "check": check.name,
                    "test": test.name,
                    "message": test.message,
                    "mentioned": failure.contains(&test.name.to_lowercase()) || failure.contains(&short),
                    "failedInRecentRuns": failures,
                    "recentRuns": runs.len()
                }));
            }
        }
    }
    failing.sort_by_key(|t| std::cmp::Reverse(t["mentioned"].as_bool().unwrap_or(false)));
    let text =
        format!("{} failing tests in the readiness history of {} profiles", failing.len(), profiles.len());
    ToolOutcome::Result(result::structured(text, json!({"failingTests": failing, "profiles": profiles})))
}

fn cite(item: &Value) -> Option<String> {
    Some(format!("{}:{}", item.get("path")?.as_str()?, item.get("line")?))
}

fn first_line(item: &Value) -> String {
    let snippet = item.get("snippet").and_then(Value::as_str).unwrap_or_default();
    let line = item.get("line").and_then(Value::as_u64).unwrap_or(1) as u32;
    research::index::cited_line(snippet, line).to_owned()
}

async fn test_plan(ctx: &ToolContext) -> ToolOutcome {
    let failure = ctx.str_arg("failure").unwrap_or_default().to_owned();
    let list = |name: &str| ctx.arguments.get(name).and_then(Value::as_array).cloned().unwrap_or_default();
    // Decisions are cited as decisions, not as code.
    let adr_folders: Vec<String> =
        list("adrFolders").iter().filter_map(|f| f.as_str().map(|f| format!("{f}/"))).collect();
    let code: Vec<Value> = list("code")
        .into_iter()
        .filter(|c| {
            !adr_folders.iter().any(|f| c["path"].as_str().is_some_and(|p| p.starts_with(f.as_str())))
        })
        .collect();
    let adrs = list("adrs");
    let failing: Vec<Value> =
        ctx.arguments.pointer("/history/failingTests").and_then(Value::as_array).cloned().unwrap_or_default();
    let mut steps: Vec<Value> = Vec::new();
    let mentioned: Vec<&Value> = failing.iter().filter(|t| t["mentioned"].as_bool() == Some(true)).collect();
    let reproduce: Vec<&Value> =
        if mentioned.is_empty() { failing.iter().take(3).collect() } else { mentioned };
    if reproduce.is_empty() {
        steps.push(json!({"step": "reproduce", "action": "Reproduce the failure with the smallest command that shows it, and keep its output.", "cites": []}));
    } else {
        for test in reproduce {
            let flaky = test["failedInRecentRuns"].as_u64() < test["recentRuns"].as_u64();
            steps.push(json!({
                "step": "reproduce",
                "action": format!(
                    "Run `{}` of check `{}` (readiness profile `{}`) alone{}.",
                    test["test"].as_str().unwrap_or_default(),
                    test["check"].as_str().unwrap_or_default(),
                    test["profile"].as_str().unwrap_or_default(),
                    if flaky { "; it has also passed in recent runs, so run it several times to tell a flaky test from a regression" } else { "; it failed in every recent run" }
                ),
                "cites": [format!("{}::{}", test["check"].as_str().unwrap_or_default(), test["test"].as_str().unwrap_or_default())]
            }));
        }
    }
    let located = list("locations");
    for item in &located {
        if let Some(at) = cite(item) {
            steps.push(json!({"step": "inspect", "action": format!("Read {at}, where the failure points (`{}`), and write a test that fails the same way.", first_line(item)), "cites": [at]}));
        }
    }
    for item in code.iter().filter(|c| !located.iter().any(|l| l["path"] == c["path"])).take(3) {
        if let Some(at) = cite(item) {
            steps.push(json!({"step": "inspect", "action": format!("Read {at} (`{}`) and write a test that pins its behaviour for the failing input.", first_line(item)), "cites": [at]}));
        }
    }
    for item in adrs.iter().take(2) {
        if let Some(at) = cite(item) {
            steps.push(json!({"step": "check-decision", "action": format!("Check that the fix keeps to the decision at {at} (`{}`).", first_line(item)), "cites": [at]}));
        }
    }
    let profiles: Vec<String> = ctx
        .arguments
        .pointer("/history/profiles")
        .and_then(|p| serde_json::from_value(p.clone()).ok())
        .unwrap_or_default();
    steps.push(json!({
        "step": "verify",
        "action": if profiles.is_empty() {
            "Run the whole test suite again and confirm the failing test now passes and nothing else broke.".to_owned()
        } else {
            format!("Run deployment_readiness for {} and confirm the test moves to `fixed` with no new failures.", profiles.iter().map(|p| format!("`{p}`")).collect::<Vec<_>>().join(", "))
        },
        "cites": []
    }));
    let root = ctx.str_arg("root").unwrap_or_default().to_owned();
    let helped = memory::helped_before(ctx, &root, &memory::signature(&failure)).await;
    let earlier = memory::rank(&mut steps, &helped);
    let mut structured = json!({
        "session": ctx.task_id,
        "earlierSessions": earlier,
        "failure": failure,
        "locations": located,
        "code": code,
        "adrs": adrs,
        "failingTests": failing,
        "plan": steps
    });
    let sample = ctx.arguments.get("sample").and_then(Value::as_bool).unwrap_or(false);
    if sample && !code.is_empty() {
        match ctx.input("hypothesis") {
            None => {
                let evidence: Vec<research::index::Evidence> =
                    code.iter().chain(&adrs).filter_map(|e| serde_json::from_value(e.clone()).ok()).collect();
                let prompt = format!(
                    "{}\n\nFrom the evidence, give the most likely cause of this failure and the test that would prove it, citing path:line.",
                    research::answer_prompt(&failure, &evidence)
                );
                return ToolOutcome::InputRequired(
                    InputRequired::new().ask("hypothesis", input::sample(prompt, 800)),
                );
            }
            Some(reply) => {
                if let Some(text) = sampled_text(reply) {
                    structured["hypothesis"] = json!(text);
                }
            }
        }
    }
    // Kept once the plan is final: a run that still waits for the model keeps nothing yet.
    if let Err(e) = memory::keep_session(ctx, &root, &failure, &steps).await {
        tracing::warn!(task = %ctx.task_id, error = %e, "could not keep the troubleshooting session");
    }
    ToolOutcome::Result(result::structured(plan_text(&structured), structured))
}

fn plan_text(structured: &Value) -> String {
    let mut out = format!("Test plan (session {})\n", structured["session"].as_str().unwrap_or_default());
    for earlier in structured["earlierSessions"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "Steps that helped with a similar failure come first (session {}, {}).\n",
            earlier["session"].as_str().unwrap_or_default(),
            earlier["outcome"].as_str().unwrap_or_default()
        ));
    }
    for (i, step) in structured["plan"].as_array().into_iter().flatten().enumerate() {
        out.push_str(&format!(
            "{}. [{}] {}{}\n",
            i + 1,
            step["step"].as_str().unwrap_or_default(),
            step["action"].as_str().unwrap_or_default(),
            step["helpedBefore"]["session"]
                .as_str()
                .map(|s| format!(" (helped before, session {s})"))
                .unwrap_or_default()
        ));
    }
    let section = |title: &str, items: &Value, out: &mut String| {
        let cited: Vec<String> = items
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| cite(i).map(|c| format!("- {c} {}", first_line(i))))
            .collect();
        if !cited.is_empty() {
            out.push_str(&format!("\n{title}:\n{}\n", cited.join("\n")));
        }
    };
    section("Where the failure points", &structured["locations"], &mut out);
    section("Related code", &structured["code"], &mut out);
    section("Related decisions", &structured["adrs"], &mut out);
    if let Some(hypothesis) = structured.get("hypothesis").and_then(Value::as_str) {
        out.push_str(&format!("\nHypothesis from the client's model:\n{hypothesis}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_search_takes_the_lines_that_say_what_failed() {
        let log = "running 3 tests\ntest a ... ok\nthread 'b' panicked at src/retry.rs:42:9:\nassertion failed: backoff < max\ntest b ... FAILED\n";
        let question = failure_question(log);
        assert!(question.contains("retry") && question.contains("backoff") && question.contains("max"));
        assert!(!question.contains("running") && !question.contains("panicked"), "{question}");
        assert_eq!(failure_question("just words").trim(), "just words");
    }

    #[test]
    fn hidden_and_ignored_files_named_in_a_log_are_never_read() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let base = dir.path();
        for folder in ["src", ".git", "target/debug"] {
            std::fs::create_dir_all(base.join(folder)).expect("mkdir");
        }
        std::fs::write(base.join(".gitignore"), "target/\n").expect("write");
        std::fs::write(base.join(".env"), "API_KEY=secret-env\n").expect("write");
        std::fs::write(base.join(".git/config"), "[remote]\ntoken = secret-git\n").expect("write");
        std::fs::write(base.join("target/debug/build.log"), "secret-build\n").expect("write");
        std::fs::write(base.join("src/lib.rs"), "fn lib() {}\n").expect("write");
        std::os::unix::fs::symlink(base.join(".env"), base.join("notes.txt")).expect("symlink");
        let roots = Roots::parse(&[format!("repo={}", base.display())]).expect("roots");
        let root = roots.get("repo").expect("root");
        let absolute_env = root.path.join(".env");
        let log = format!(
            "error at .env:1\nconfig .git/config:2\n./.env:1 {}:1 notes.txt:1 target/debug/build.log:1\n\
             panicked at src/lib.rs:1:4",
            absolute_env.display()
        );
        let found = locations(root, &log);
        let paths: Vec<&str> = found.iter().filter_map(|f| f["path"].as_str()).collect();
        assert_eq!(paths, vec!["src/lib.rs"], "{found:?}");
        let quoted = serde_json::to_string(&found).expect("json");
        assert!(!quoted.contains("secret"), "{quoted}");
    }
}
