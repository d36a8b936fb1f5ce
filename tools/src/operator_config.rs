//! The operator's tools file: one TOML file that declares tools run as child processes (each an
//! MCP tool whose arguments fill an argv template) and readiness profiles (named lists of checks,
//! each a command run in a root whose exit status, and optionally test report, is recorded).
//!
//! Everything is checked when the file is read, so that a typo fails the worker's start with a
//! message naming the tool, profile or check and the field, rather than failing a call later.
//! Unknown keys are errors for the same reason. No command ever goes through a shell: `argv[0]`
//! is the program and each template item becomes exactly one argument.
//!
//! A root is a directory the operator names when starting the worker (`--root NAME=PATH`); this
//! file refers to roots by name only, and whoever runs the commands resolves them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::readiness::history::Severity;
use super::readiness::reports::ReportFormat;

/// A tool's timeout when the file gives none, in seconds.
pub const DEFAULT_TOOL_TIMEOUT_S: u64 = 60;
/// A check's timeout when the file gives none: test suites run for minutes, not seconds.
pub const DEFAULT_CHECK_TIMEOUT_S: u64 = 600;
/// The longest timeout the file may give: a day.
pub const MAX_TIMEOUT_S: u64 = 86_400;
/// How much of a tool's output is kept when the file says nothing: plenty for a search's
/// matches, little enough for a model's context.
pub const DEFAULT_TOOL_OUTPUT_BYTES: u64 = 256 * 1024;
/// How much of a check's output is kept when the file says nothing. Larger than a tool's, since a
/// `cargo` or `pytest` report is read from that output and a cut report loses tests.
pub const DEFAULT_CHECK_OUTPUT_BYTES: u64 = 1024 * 1024;
/// The most output the file may ask to keep.
pub const MAX_OUTPUT_BYTES: u64 = 16 * 1024 * 1024;
/// Runs a readiness profile keeps when the file says nothing.
pub const DEFAULT_HISTORY: usize = 20;
/// The most runs a profile may keep.
pub const MAX_HISTORY: usize = 1000;
/// Runs, the current one included, that flaky tests are looked for in when the file says nothing
/// (fewer when the profile keeps fewer).
pub const DEFAULT_FLAKY_WINDOW: usize = 10;
/// Longest tool, profile, root or queue name.
const MAX_NAME_CHARS: usize = 64;
/// Longest check name.
const MAX_CHECK_NAME_CHARS: usize = 128;

/// Whether a tool may, must or must not run as an MCP task (`execution.taskSupport`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskSupport {
    #[default]
    Optional,
    Required,
    Forbidden,
}

impl TaskSupport {
    /// The value of `execution.taskSupport`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Optional => "optional",
            Self::Required => "required",
            Self::Forbidden => "forbidden",
        }
    }
}

/// A tool the file declares, with defaults filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfiguredTool {
    /// The MCP tool name.
    pub name: String,
    pub description: String,
    /// The command: `argv[0]` is the program, found on `PATH` when it has no `/`; later items may
    /// hold `{name}` placeholders (see [`fill_argv`]).
    pub argv: Vec<String>,
    /// The root whose directory the command runs in, if any.
    pub root: Option<String>,
    /// The working directory, relative to the root.
    pub cwd: String,
    /// Arguments that name a path inside the root; the caller confines them to it.
    pub path_arguments: Vec<String>,
    pub timeout_s: u64,
    /// The queue its calls wait in; the tool's name when `None`.
    pub queue: Option<String>,
    pub task_support: TaskSupport,
    /// Environment variables passed through from the worker's, besides a fixed minimal set.
    pub env: Vec<String>,
    pub max_output_bytes: u64,
    /// A JSON Schema whose `type` is `"object"`.
    pub input_schema: Value,
}

impl ConfiguredTool {
    /// The MCP `Tool` object gateways list.
    pub fn definition(&self) -> Value {
        json!({
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
            "execution": {"taskSupport": self.task_support.as_str()},
        })
    }

    /// The command line for a call with these arguments; see [`fill_argv`].
    pub fn fill_argv(&self, arguments: &Map<String, Value>) -> Result<Vec<String>, ArgvError> {
        fill_argv(&self.argv, arguments, &self.input_schema)
    }
}

/// A readiness profile: the checks that decide whether a project is ready.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    pub name: String,
    pub description: Option<String>,
    /// Runs kept.
    pub history: usize,
    /// Runs, the current one included, that flaky tests are looked for in.
    pub flaky_window: usize,
    pub checks: Vec<ConfiguredCheck>,
}

/// One check of a profile, with defaults filled in. Its argv is taken literally: a check has no
/// arguments, so braces in it are plain text.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfiguredCheck {
    /// Unique within its profile.
    pub name: String,
    pub argv: Vec<String>,
    pub root: String,
    pub cwd: String,
    pub timeout_s: u64,
    pub severity: Severity,
    pub report: Option<ReportFormat>,
    /// Where a JUnit report is read from after the run, relative to the root.
    pub report_path: Option<String>,
    pub env: Vec<String>,
    pub max_output_bytes: u64,
}

/// What the tools file declares.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OperatorConfig {
    pub tools: Vec<ConfiguredTool>,
    /// By profile name.
    pub profiles: BTreeMap<String, Profile>,
}

/// A tools file that cannot be used. Each message starts with the file it came from.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("tools file {origin}: cannot read it ({source}); check the path and that the worker may read it")]
    Read {
        origin: String,
        #[source]
        source: std::io::Error,
    },
    /// Not TOML, or not the shape this file has (a misspelt key, a wrong type); the detail says
    /// where.
    #[error("tools file {origin}: {detail}")]
    Syntax { origin: String, detail: String },
    /// Well-formed, but a value is not allowed.
    #[error("tools file {origin}: {subject}: {field} {problem}")]
    Invalid { origin: String, subject: String, field: String, problem: String },
}

/// Arguments that cannot make a command line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgvError {
    #[error("the command-line item {item:?} {problem}")]
    Template { item: String, problem: String },
    #[error(
        "argument `{name}` is missing, and the command-line item {item:?} needs it; pass it, or give \
         it a default in the tool's input schema"
    )]
    Missing { name: String, item: String },
    #[error(
        "argument `{name}` is {kind}; a command-line argument can only be a string, a number or a boolean"
    )]
    NotScalar { name: String, kind: &'static str },
    #[error("argument `{name}` contains a NUL byte, which no command-line argument can carry; remove it")]
    NulByte { name: String },
}

/// Reads and checks the tools file at `path`.
pub fn load(path: &Path) -> Result<OperatorConfig, ConfigError> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|source| ConfigError::Read { origin: origin.clone(), source })?;
    parse(&text, &origin)
}

/// Parses and checks a tools file's text; `origin` (its path, usually) starts every error.
pub fn parse(text: &str, origin: &str) -> Result<OperatorConfig, ConfigError> {
    let raw: RawFile = toml::from_str(text).map_err(|e| ConfigError::Syntax {
        origin: origin.to_owned(),
        detail: e.to_string().trim_end().to_owned(),
    })?;
    let invalid = |problem: Problem| ConfigError::Invalid {
        origin: origin.to_owned(),
        subject: problem.subject,
        field: problem.field,
        problem: problem.problem,
    };

    let mut tools = Vec::with_capacity(raw.tool.len());
    let mut tool_names = BTreeSet::new();
    for (index, raw_tool) in raw.tool.into_iter().enumerate() {
        let tool = check_tool(raw_tool, index).map_err(invalid)?;
        if !tool_names.insert(tool.name.clone()) {
            return Err(invalid(Problem::new(
                subject_tool(&tool.name, index),
                "name",
                "is given to another tool too; tool names must be unique",
            )));
        }
        tools.push(tool);
    }

    let mut profiles = BTreeMap::new();
    for (name, raw_profile) in raw.readiness {
        let profile = check_profile(name, raw_profile).map_err(invalid)?;
        profiles.insert(profile.name.clone(), profile);
    }
    Ok(OperatorConfig { tools, profiles })
}

// ---------------------------------------------------------------------------------------------
// The file as written

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    tool: Vec<RawTool>,
    #[serde(default)]
    readiness: BTreeMap<String, RawProfile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTool {
    name: String,
    description: String,
    // Defaulted so that a missing argv gets the same message, naming the tool, as an empty one.
    #[serde(default)]
    argv: Vec<String>,
    root: Option<String>,
    cwd: Option<String>,
    #[serde(default)]
    path_arguments: Vec<String>,
    timeout_s: Option<u64>,
    queue: Option<String>,
    #[serde(default)]
    task_support: TaskSupport,
    #[serde(default)]
    env: Vec<String>,
    max_output_bytes: Option<u64>,
    input_schema: Option<toml::Table>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProfile {
    description: Option<String>,
    history: Option<u64>,
    flaky_window: Option<u64>,
    #[serde(default)]
    check: Vec<RawCheck>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCheck {
    name: String,
    #[serde(default)]
    argv: Vec<String>,
    root: Option<String>,
    cwd: Option<String>,
    timeout_s: Option<u64>,
    #[serde(default)]
    severity: Severity,
    report: Option<ReportFormat>,
    report_path: Option<String>,
    #[serde(default)]
    env: Vec<String>,
    max_output_bytes: Option<u64>,
}

// ---------------------------------------------------------------------------------------------
// Checks

/// One refused value: what it belongs to, the field, and what is wrong with it.
struct Problem {
    subject: String,
    field: String,
    problem: String,
}

impl Problem {
    fn new(subject: impl Into<String>, field: impl Into<String>, problem: impl Into<String>) -> Self {
        Self { subject: subject.into(), field: field.into(), problem: problem.into() }
    }
}

fn subject_tool(name: &str, index: usize) -> String {
    if name.is_empty() { format!("tool #{}", index + 1) } else { format!("tool {name:?}") }
}

fn subject_check(profile: &str, name: &str, index: usize) -> String {
    if name.is_empty() {
        format!("readiness profile {profile:?}, check #{}", index + 1)
    } else {
        format!("readiness profile {profile:?}, check {name:?}")
    }
}

/// Tool, profile, root and queue names: what MCP clients accept in a tool name.
fn name_problem(name: &str) -> Option<String> {
    let ok = !name.is_empty()
        && name.chars().count() <= MAX_NAME_CHARS
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    (!ok).then(|| {
        format!("{name:?} is not a valid name: use 1 to {MAX_NAME_CHARS} letters, digits, `_`, `.` or `-`")
    })
}

fn check_tool(raw: RawTool, index: usize) -> Result<ConfiguredTool, Problem> {
    let subject = subject_tool(&raw.name, index);
    let fail = |field: &str, problem: String| Problem::new(subject.clone(), field, problem);

    if let Some(problem) = name_problem(&raw.name) {
        return Err(fail("name", problem));
    }
    if raw.description.trim().is_empty() {
        return Err(fail(
            "description",
            "is empty: say what the tool does, for the model that chooses it".into(),
        ));
    }
    let input_schema = match &raw.input_schema {
        Some(table) => toml_to_json(&toml::Value::Table(table.clone()), "input_schema")
            .map_err(|(field, problem)| fail(&field, problem))?,
        None => json!({"type": "object"}),
    };
    let properties = check_schema(&input_schema).map_err(|(field, problem)| fail(&field, problem))?;

    check_argv(&raw.argv).map_err(|problem| fail("argv", problem))?;
    for (position, item) in raw.argv.iter().enumerate() {
        let pieces = pieces(item).map_err(|problem| fail("argv", format!("item {item:?} {problem}")))?;
        for piece in pieces {
            let Piece::Argument(name) = piece else { continue };
            if position == 0 {
                return Err(fail(
                    "argv",
                    format!("item {item:?} is the program to run, which a call's arguments must not choose"),
                ));
            }
            match properties.get(name) {
                None => {
                    return Err(fail(
                        "argv",
                        format!(
                            "item {item:?} names `{name}`, which is not a property of input_schema; add it to \
                             [tool.input_schema.properties], or write a literal brace as `{{{{` or `}}}}`"
                        ),
                    ));
                }
                Some(property) => {
                    if let Some(kind @ ("array" | "object")) = property.get("type").and_then(Value::as_str) {
                        return Err(fail(
                            "argv",
                            format!(
                                "item {item:?} names `{name}`, whose input_schema type is {kind}; only a string, \
                                 number or boolean can stand in a command line"
                            ),
                        ));
                    }
                }
            }
        }
    }

    if let Some(root) = &raw.root
        && let Some(problem) = name_problem(root)
    {
        return Err(fail("root", problem));
    }
    if raw.root.is_none() && raw.cwd.is_some() {
        return Err(fail(
            "cwd",
            "is set but root is not; cwd is relative to the tool's root, so name one".into(),
        ));
    }
    if raw.root.is_none() && !raw.path_arguments.is_empty() {
        return Err(fail(
            "path_arguments",
            "is set but root is not; path arguments are confined to the tool's root, so name one".into(),
        ));
    }
    let cwd = raw.cwd.unwrap_or_else(|| ".".to_owned());
    check_relative_path(&cwd).map_err(|problem| fail("cwd", problem))?;
    let mut seen = BTreeSet::new();
    for argument in &raw.path_arguments {
        if !properties.contains_key(argument) {
            return Err(fail(
                "path_arguments",
                format!("names `{argument}`, which is not a property of input_schema"),
            ));
        }
        if !seen.insert(argument) {
            return Err(fail("path_arguments", format!("names `{argument}` twice")));
        }
    }
    let timeout_s = check_timeout(raw.timeout_s, DEFAULT_TOOL_TIMEOUT_S).map_err(|p| fail("timeout_s", p))?;
    if let Some(queue) = &raw.queue
        && let Some(problem) = name_problem(queue)
    {
        return Err(fail("queue", problem));
    }
    check_env(&raw.env).map_err(|problem| fail("env", problem))?;
    let max_output_bytes = check_output_bytes(raw.max_output_bytes, DEFAULT_TOOL_OUTPUT_BYTES)
        .map_err(|problem| fail("max_output_bytes", problem))?;

    Ok(ConfiguredTool {
        name: raw.name,
        description: raw.description,
        argv: raw.argv,
        root: raw.root,
        cwd,
        path_arguments: raw.path_arguments,
        timeout_s,
        queue: raw.queue,
        task_support: raw.task_support,
        env: raw.env,
        max_output_bytes,
        input_schema,
    })
}

fn check_profile(name: String, raw: RawProfile) -> Result<Profile, Problem> {
    let subject = format!("readiness profile {name:?}");
    let fail = |field: &str, problem: String| Problem::new(subject.clone(), field, problem);
    if let Some(problem) = name_problem(&name) {
        return Err(fail("name", problem));
    }
    let history = match raw.history {
        None => DEFAULT_HISTORY,
        Some(n) => usize::try_from(n)
            .ok()
            .filter(|n| (1..=MAX_HISTORY).contains(n))
            .ok_or_else(|| fail("history", format!("is {n}; keep between 1 and {MAX_HISTORY} runs")))?,
    };
    let flaky_window = match raw.flaky_window {
        None => DEFAULT_FLAKY_WINDOW.min(history),
        Some(n) => usize::try_from(n).ok().filter(|n| (1..=history).contains(n)).ok_or_else(|| {
            fail(
                "flaky_window",
                format!("is {n}; it counts runs among those kept, so give between 1 and history ({history})"),
            )
        })?,
    };
    if raw.check.is_empty() {
        return Err(fail(
            "check",
            format!("is missing: add at least one [[readiness.{name}.check]] with a name, argv and root"),
        ));
    }
    let mut checks = Vec::with_capacity(raw.check.len());
    let mut check_names = BTreeSet::new();
    for (index, raw_check) in raw.check.into_iter().enumerate() {
        let check = check_check(&name, raw_check, index)?;
        if !check_names.insert(check.name.clone()) {
            return Err(Problem::new(
                subject_check(&name, &check.name, index),
                "name",
                "is given to another check of this profile too; check names must be unique in a profile",
            ));
        }
        checks.push(check);
    }
    Ok(Profile { name, description: raw.description, history, flaky_window, checks })
}

fn check_check(profile: &str, raw: RawCheck, index: usize) -> Result<ConfiguredCheck, Problem> {
    let subject = subject_check(profile, &raw.name, index);
    let fail = |field: &str, problem: String| Problem::new(subject.clone(), field, problem);

    let name = raw.name.trim();
    if name.is_empty() || name.len() != raw.name.len() || raw.name.chars().count() > MAX_CHECK_NAME_CHARS {
        return Err(fail(
            "name",
            format!(
                "{:?} is not a valid check name: use 1 to {MAX_CHECK_NAME_CHARS} characters without \
                 leading or trailing spaces",
                raw.name
            ),
        ));
    }
    if raw.name.chars().any(char::is_control) {
        return Err(fail("name", "contains a control character; use printable text".into()));
    }
    // A test is known as CHECK::TEST in the run history, which must not be ambiguous.
    if raw.name.contains("::") {
        return Err(fail(
            "name",
            "contains `::`, which separates a check's name from its tests' names; use another separator"
                .into(),
        ));
    }
    check_argv(&raw.argv).map_err(|problem| fail("argv", problem))?;
    let Some(root) = raw.root else {
        return Err(fail(
            "root",
            "is missing: a check runs inside a root; name one given with --root NAME=PATH".into(),
        ));
    };
    if let Some(problem) = name_problem(&root) {
        return Err(fail("root", problem));
    }
    let cwd = raw.cwd.unwrap_or_else(|| ".".to_owned());
    check_relative_path(&cwd).map_err(|problem| fail("cwd", problem))?;
    let timeout_s =
        check_timeout(raw.timeout_s, DEFAULT_CHECK_TIMEOUT_S).map_err(|p| fail("timeout_s", p))?;
    match (raw.report, &raw.report_path) {
        (Some(ReportFormat::Junit), None) => {
            return Err(fail(
                "report_path",
                "is missing: a junit report is read from the file the command writes; give its path inside the root"
                    .into(),
            ));
        }
        (Some(ReportFormat::Junit), Some(path)) => {
            check_relative_path(path).map_err(|problem| fail("report_path", problem))?;
            if path.rsplit('/').next().is_none_or(|last| last.is_empty() || last == ".") {
                return Err(fail(
                    "report_path",
                    format!("is {path:?}, which is a directory; name the report file"),
                ));
            }
        }
        (_, Some(_)) => {
            return Err(fail(
                "report_path",
                "is only read for report = \"junit\" (cargo and pytest reports are read from the output); \
                 remove it or set report = \"junit\""
                    .into(),
            ));
        }
        (_, None) => {}
    }
    check_env(&raw.env).map_err(|problem| fail("env", problem))?;
    let max_output_bytes = check_output_bytes(raw.max_output_bytes, DEFAULT_CHECK_OUTPUT_BYTES)
        .map_err(|problem| fail("max_output_bytes", problem))?;
    Ok(ConfiguredCheck {
        name: raw.name,
        argv: raw.argv,
        root,
        cwd,
        timeout_s,
        severity: raw.severity,
        report: raw.report,
        report_path: raw.report_path,
        env: raw.env,
        max_output_bytes,
    })
}

fn check_argv(argv: &[String]) -> Result<(), String> {
    let Some(program) = argv.first() else {
        return Err(
            "is empty: give the program to run and its arguments, e.g. [\"grep\", \"-rn\", \"{pattern}\"]"
                .into(),
        );
    };
    if program.trim().is_empty() {
        return Err("starts with an empty program name; argv[0] is the program to run".into());
    }
    if let Some(item) = argv.iter().find(|item| item.contains('\0')) {
        return Err(format!("item {item:?} contains a NUL byte, which no command-line argument can carry"));
    }
    Ok(())
}

/// A path inside a root: relative, and never climbing out of it.
fn check_relative_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("is empty; use \".\" for the root itself".into());
    }
    if path.contains('\0') {
        return Err(format!("{path:?} contains a NUL byte"));
    }
    if path.starts_with('/') {
        return Err(format!("is {path:?}, an absolute path; give a path relative to the root"));
    }
    if path.split('/').any(|component| component == "..") {
        return Err(format!(
            "is {path:?}, which has a `..` component; give a path that stays inside the root"
        ));
    }
    Ok(())
}

fn check_timeout(value: Option<u64>, default: u64) -> Result<u64, String> {
    match value {
        None => Ok(default),
        Some(s) if (1..=MAX_TIMEOUT_S).contains(&s) => Ok(s),
        Some(s) => Err(format!("is {s}; give between 1 and {MAX_TIMEOUT_S} seconds")),
    }
}

fn check_output_bytes(value: Option<u64>, default: u64) -> Result<u64, String> {
    match value {
        None => Ok(default),
        Some(n) if (1..=MAX_OUTPUT_BYTES).contains(&n) => Ok(n),
        Some(n) => Err(format!("is {n}; give between 1 and {MAX_OUTPUT_BYTES} bytes (16 MiB)")),
    }
}

fn check_env(names: &[String]) -> Result<(), String> {
    let mut seen = BTreeSet::new();
    for name in names {
        let mut chars = name.chars();
        let valid = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(format!(
                "names {name:?}, which is not an environment variable name (letters, digits and `_`, not \
                 starting with a digit)"
            ));
        }
        if !seen.insert(name) {
            return Err(format!("names {name:?} twice"));
        }
    }
    Ok(())
}

/// Checks the shape of an input schema and returns its properties.
fn check_schema(schema: &Value) -> Result<Map<String, Value>, (String, String)> {
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err((
            "input_schema.type".into(),
            "must be \"object\": an MCP tool's arguments are an object; add type = \"object\"".into(),
        ));
    }
    let properties = match schema.get("properties") {
        None => Map::new(),
        Some(Value::Object(properties)) => properties.clone(),
        Some(_) => {
            return Err(("input_schema.properties".into(), "must be a table of property schemas".into()));
        }
    };
    for (name, property) in &properties {
        if !property.is_object() {
            return Err((
                format!("input_schema.properties.{name}"),
                "must be a table (a JSON Schema)".into(),
            ));
        }
    }
    match schema.get("required") {
        None => {}
        Some(Value::Array(required)) => {
            for entry in required {
                let Some(name) = entry.as_str() else {
                    return Err((
                        "input_schema.required".into(),
                        "must list property names as strings".into(),
                    ));
                };
                if !properties.contains_key(name) {
                    return Err((
                        "input_schema.required".into(),
                        format!("names `{name}`, which is not in input_schema.properties"),
                    ));
                }
            }
        }
        Some(_) => return Err(("input_schema.required".into(), "must be an array of property names".into())),
    }
    Ok(properties)
}

/// TOML to JSON, refusing what JSON cannot hold.
fn toml_to_json(value: &toml::Value, at: &str) -> Result<Value, (String, String)> {
    Ok(match value {
        toml::Value::String(s) => Value::String(s.clone()),
        toml::Value::Integer(i) => Value::from(*i),
        toml::Value::Float(f) => match serde_json::Number::from_f64(*f) {
            Some(n) => Value::Number(n),
            None => {
                return Err((at.to_owned(), format!("is {f}, which JSON cannot hold; give a finite number")));
            }
        },
        toml::Value::Boolean(b) => Value::Bool(*b),
        toml::Value::Datetime(d) => {
            return Err((
                at.to_owned(),
                format!("is the TOML date {d}, which JSON has no type for; quote it"),
            ));
        }
        toml::Value::Array(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, item)| toml_to_json(item, &format!("{at}[{i}]")))
                .collect::<Result<_, _>>()?,
        ),
        toml::Value::Table(table) => Value::Object(
            table
                .iter()
                .map(|(key, item)| toml_to_json(item, &format!("{at}.{key}")).map(|json| (key.clone(), json)))
                .collect::<Result<_, _>>()?,
        ),
    })
}

// ---------------------------------------------------------------------------------------------
// Argv templates

/// A piece of one argv template item.
#[derive(Debug, PartialEq, Eq)]
enum Piece<'a> {
    Text(String),
    Argument(&'a str),
}

/// Splits a template item into literal text and `{name}` placeholders; `{{` and `}}` are literal
/// braces. The error completes "item ITEM ...".
fn pieces(item: &str) -> Result<Vec<Piece<'_>>, String> {
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut rest = item;
    while let Some(c) = rest.chars().next() {
        match c {
            '{' if rest.starts_with("{{") => {
                text.push('{');
                rest = &rest[2..];
            }
            '}' if rest.starts_with("}}") => {
                text.push('}');
                rest = &rest[2..];
            }
            '{' => {
                let Some(end) = rest.find('}') else {
                    return Err("has a `{` that is not closed; write a literal brace as `{{`".into());
                };
                let name = &rest[1..end];
                if !is_identifier(name) {
                    return Err(format!(
                        "has the placeholder `{{{name}}}`, but a placeholder is `{{name}}` with a name of \
                         letters, digits and `_`; write a literal brace as `{{{{` or `}}}}`"
                    ));
                }
                if !text.is_empty() {
                    pieces.push(Piece::Text(std::mem::take(&mut text)));
                }
                pieces.push(Piece::Argument(name));
                rest = &rest[end + 1..];
            }
            '}' => return Err("has a `}` that closes nothing; write a literal brace as `}}`".into()),
            _ => {
                text.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
    }
    if !text.is_empty() || pieces.is_empty() {
        pieces.push(Piece::Text(text));
    }
    Ok(pieces)
}

fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The command line for a call: each template item becomes exactly one argument, never split on
/// spaces. `{name}` stands for the argument of that name: a string as it is, a number or boolean
/// as its JSON text; when the call does not give it (or gives `null`), the default in `schema`'s
/// `properties.NAME.default`. An item that is exactly `{name}` for an argument absent with no
/// default is left out (an optional argument); a placeholder within a longer item must have a
/// value. Arrays and objects are refused, as is a NUL byte anywhere.
pub fn fill_argv(
    template: &[String],
    arguments: &Map<String, Value>,
    schema: &Value,
) -> Result<Vec<String>, ArgvError> {
    let mut argv = Vec::with_capacity(template.len());
    for item in template {
        if item.contains('\0') {
            return Err(ArgvError::Template { item: item.clone(), problem: "contains a NUL byte".into() });
        }
        let pieces = pieces(item).map_err(|problem| ArgvError::Template { item: item.clone(), problem })?;
        if let [Piece::Argument(name)] = pieces.as_slice() {
            if let Some(value) = argument_value(name, arguments, schema)? {
                argv.push(value);
            }
            continue;
        }
        let mut filled = String::new();
        for piece in &pieces {
            match piece {
                Piece::Text(text) => filled.push_str(text),
                Piece::Argument(name) => match argument_value(name, arguments, schema)? {
                    Some(value) => filled.push_str(&value),
                    None => return Err(ArgvError::Missing { name: (*name).to_owned(), item: item.clone() }),
                },
            }
        }
        argv.push(filled);
    }
    Ok(argv)
}

/// The text an argument stands for on the command line; `None` when neither the call nor the
/// schema's default gives it.
fn argument_value(
    name: &str,
    arguments: &Map<String, Value>,
    schema: &Value,
) -> Result<Option<String>, ArgvError> {
    let given = arguments.get(name).filter(|v| !v.is_null());
    let default = || schema.get("properties")?.get(name)?.get("default").filter(|v| !v.is_null());
    let Some(value) = given.or_else(default) else { return Ok(None) };
    let text = match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Array(_) => return Err(ArgvError::NotScalar { name: name.to_owned(), kind: "an array" }),
        Value::Object(_) => return Err(ArgvError::NotScalar { name: name.to_owned(), kind: "an object" }),
        Value::Null => return Ok(None),
    };
    if text.contains('\0') {
        return Err(ArgvError::NulByte { name: name.to_owned() });
    }
    Ok(Some(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
[[tool]]
name = "grep_code"
description = "Search a root for a regular expression"
argv = ["grep", "-rn", "--", "{pattern}", "{path}"]
root = "repo"
cwd = "."
path_arguments = ["path"]
timeout_s = 60
queue = "shell"
task_support = "optional"
env = ["LANG"]
max_output_bytes = 65536
[tool.input_schema]
type = "object"
required = ["pattern"]
[tool.input_schema.properties.pattern]
type = "string"
[tool.input_schema.properties.path]
type = "string"
default = "."

[[tool]]
name = "date"
description = "The date"
argv = ["date", "+%F {{literal}}"]

[readiness.release]
description = "What must pass before a release"
history = 20
flaky_window = 10
[[readiness.release.check]]
name = "unit tests"
argv = ["cargo", "test"]
root = "repo"
cwd = "."
timeout_s = 600
severity = "critical"
report = "cargo"
env = ["CARGO_HOME"]
max_output_bytes = 262144
[[readiness.release.check]]
name = "python"
argv = ["pytest", "--junitxml=build/junit.xml"]
root = "repo"
cwd = "py"
severity = "warning"
report = "junit"
report_path = "py/build/junit.xml"
[[readiness.release.check]]
name = "lint {strict}"
argv = ["cargo", "clippy", "{not a placeholder}"]
root = "repo"

[readiness.quick]
history = 5
[[readiness.quick.check]]
name = "fmt"
argv = ["cargo", "fmt", "--check"]
root = "repo"
"#;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    fn error_of(text: &str) -> String {
        match parse(text, "/x.toml") {
            Ok(config) => panic!("accepted: {config:?}"),
            Err(e) => e.to_string(),
        }
    }

    fn object(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            other => panic!("not an object: {other}"),
        }
    }

    #[test]
    fn parses_the_example_with_defaults() {
        let config = parse(EXAMPLE, "/x.toml").expect("the example is valid");
        assert_eq!(config.tools.len(), 2);
        let grep = &config.tools[0];
        assert_eq!(
            grep,
            &ConfiguredTool {
                name: "grep_code".into(),
                description: "Search a root for a regular expression".into(),
                argv: strings(&["grep", "-rn", "--", "{pattern}", "{path}"]),
                root: Some("repo".into()),
                cwd: ".".into(),
                path_arguments: strings(&["path"]),
                timeout_s: 60,
                queue: Some("shell".into()),
                task_support: TaskSupport::Optional,
                env: strings(&["LANG"]),
                max_output_bytes: 65536,
                input_schema: json!({
                    "type": "object",
                    "required": ["pattern"],
                    "properties": {"pattern": {"type": "string"}, "path": {"type": "string", "default": "."}}
                }),
            }
        );
        let date = &config.tools[1];
        assert_eq!(date.root, None);
        assert_eq!(date.cwd, ".");
        assert_eq!(date.timeout_s, DEFAULT_TOOL_TIMEOUT_S);
        assert_eq!(date.max_output_bytes, DEFAULT_TOOL_OUTPUT_BYTES);
        assert_eq!(date.task_support, TaskSupport::Optional);
        assert_eq!(date.input_schema, json!({"type": "object"}));
        assert_eq!(date.fill_argv(&Map::new()), Ok(strings(&["date", "+%F {literal}"])));

        assert_eq!(config.profiles.keys().collect::<Vec<_>>(), ["quick", "release"]);
        let release = &config.profiles["release"];
        assert_eq!(release.description.as_deref(), Some("What must pass before a release"));
        assert_eq!((release.history, release.flaky_window), (20, 10));
        assert_eq!(
            release.checks[0],
            ConfiguredCheck {
                name: "unit tests".into(),
                argv: strings(&["cargo", "test"]),
                root: "repo".into(),
                cwd: ".".into(),
                timeout_s: 600,
                severity: Severity::Critical,
                report: Some(ReportFormat::Cargo),
                report_path: None,
                env: strings(&["CARGO_HOME"]),
                max_output_bytes: 262_144,
            }
        );
        let python = &release.checks[1];
        assert_eq!(python.severity, Severity::Warning);
        assert_eq!(python.report, Some(ReportFormat::Junit));
        assert_eq!(python.report_path.as_deref(), Some("py/build/junit.xml"));
        assert_eq!(python.timeout_s, DEFAULT_CHECK_TIMEOUT_S);
        assert_eq!(python.max_output_bytes, DEFAULT_CHECK_OUTPUT_BYTES);
        // A check's argv is literal: it has no arguments to fill.
        assert_eq!(release.checks[2].argv[2], "{not a placeholder}");
        assert_eq!(release.checks[2].severity, Severity::Critical);
        let quick = &config.profiles["quick"];
        assert_eq!((quick.history, quick.flaky_window, quick.description.as_deref()), (5, 5, None));
    }

    #[test]
    fn definition_is_an_mcp_tool() {
        let config = parse(EXAMPLE, "/x.toml").expect("the example is valid");
        assert_eq!(
            config.tools[0].definition(),
            json!({
                "name": "grep_code",
                "description": "Search a root for a regular expression",
                "inputSchema": {
                    "type": "object",
                    "required": ["pattern"],
                    "properties": {"pattern": {"type": "string"}, "path": {"type": "string", "default": "."}}
                },
                "execution": {"taskSupport": "optional"}
            })
        );
        let required = parse(
            "[[tool]]\nname = \"t\"\ndescription = \"d\"\nargv = [\"true\"]\ntask_support = \"required\"\n",
            "/x.toml",
        )
        .expect("valid");
        assert_eq!(required.tools[0].definition()["execution"]["taskSupport"], "required");
    }

    #[test]
    fn empty_file_declares_nothing() {
        assert_eq!(parse("", "/x.toml").expect("valid"), OperatorConfig::default());
    }

    #[test]
    fn load_reads_the_file_and_names_it() {
        let dir = std::env::temp_dir().join(format!("conveyor-operator-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("tools.toml");
        std::fs::write(&path, EXAMPLE).expect("write");
        assert_eq!(load(&path).expect("loads").tools.len(), 2);
        let missing = dir.join("missing.toml");
        let error = load(&missing).expect_err("no such file").to_string();
        assert!(error.starts_with(&format!("tools file {}: cannot read it (", missing.display())), "{error}");
        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    /// A minimal valid tool, with `extra` lines added to its table.
    fn tool_with(extra: &str) -> String {
        format!(
            "[[tool]]\nname = \"grep_code\"\ndescription = \"d\"\nargv = [\"grep\", \"{{pattern}}\"]\n{extra}\n[tool.input_schema]\ntype = \"object\"\n[tool.input_schema.properties.pattern]\ntype = \"string\"\n"
        )
    }

    #[test]
    fn tool_errors_name_the_tool_and_the_field() {
        let cases: &[(String, &str)] = &[
            (
                "[[tool]]\nname = \"grep_code\"\ndescription = \"d\"\nargv = []\n".into(),
                "tools file /x.toml: tool \"grep_code\": argv is empty",
            ),
            (
                "[[tool]]\nname = \"grep_code\"\ndescription = \"d\"\n".into(),
                "tools file /x.toml: tool \"grep_code\": argv is empty",
            ),
            (
                "[[tool]]\nname = \"grep code\"\ndescription = \"d\"\nargv = [\"x\"]\n".into(),
                "tools file /x.toml: tool \"grep code\": name \"grep code\" is not a valid name",
            ),
            (
                "[[tool]]\nname = \"\"\ndescription = \"d\"\nargv = [\"x\"]\n".into(),
                "tools file /x.toml: tool #1: name \"\" is not a valid name",
            ),
            (
                format!("[[tool]]\nname = \"{}\"\ndescription = \"d\"\nargv = [\"x\"]\n", "a".repeat(65)),
                "is not a valid name: use 1 to 64",
            ),
            (
                "[[tool]]\nname = \"t\"\ndescription = \" \"\nargv = [\"x\"]\n".into(),
                "tool \"t\": description is empty",
            ),
            (
                tool_with("").replace("\"grep\", ", "\"\", "),
                "tool \"grep_code\": argv starts with an empty program name",
            ),
            (
                tool_with("").replace("\"{pattern}\"", "\"{pattern}\", \"{path}\""),
                "tool \"grep_code\": argv item \"{path}\" names `path`, which is not a property of input_schema",
            ),
            (
                tool_with("").replace("\"{pattern}\"", "\"{pat tern}\""),
                "tool \"grep_code\": argv item \"{pat tern}\" has the placeholder `{pat tern}`",
            ),
            (
                tool_with("").replace("\"{pattern}\"", "\"{pattern\""),
                "tool \"grep_code\": argv item \"{pattern\" has a `{` that is not closed; write a literal brace as `{{`",
            ),
            (
                tool_with("").replace("\"{pattern}\"", "\"a}b\""),
                "tool \"grep_code\": argv item \"a}b\" has a `}` that closes nothing",
            ),
            (
                tool_with("").replace("\"grep\", ", "\"{pattern}\", "),
                "tool \"grep_code\": argv item \"{pattern}\" is the program to run",
            ),
            (
                tool_with("").replace("\"grep\", ", "\"gr\\u0000ep\", "),
                "tool \"grep_code\": argv item \"gr\\0ep\" contains a NUL byte",
            ),
            (tool_with("cwd = \"src\""), "tool \"grep_code\": cwd is set but root is not"),
            (
                tool_with("root = \"repo\"\ncwd = \"../etc\""),
                "tool \"grep_code\": cwd is \"../etc\", which has a `..` component",
            ),
            (
                tool_with("root = \"repo\"\ncwd = \"a/../../b\""),
                "cwd is \"a/../../b\", which has a `..` component",
            ),
            (
                tool_with("root = \"repo\"\ncwd = \"/etc\""),
                "tool \"grep_code\": cwd is \"/etc\", an absolute path",
            ),
            (tool_with("root = \"repo\"\ncwd = \"\""), "tool \"grep_code\": cwd is empty"),
            (tool_with("root = \"my repo\""), "tool \"grep_code\": root \"my repo\" is not a valid name"),
            (
                tool_with("path_arguments = [\"pattern\"]"),
                "tool \"grep_code\": path_arguments is set but root is not",
            ),
            (
                tool_with("root = \"r\"\npath_arguments = [\"path\"]"),
                "tool \"grep_code\": path_arguments names `path`, which is not a property of input_schema",
            ),
            (
                tool_with("timeout_s = 0"),
                "tool \"grep_code\": timeout_s is 0; give between 1 and 86400 seconds",
            ),
            (tool_with("timeout_s = 86401"), "timeout_s is 86401; give between 1 and 86400 seconds"),
            (
                tool_with("max_output_bytes = 0"),
                "tool \"grep_code\": max_output_bytes is 0; give between 1 and 16777216",
            ),
            (tool_with("max_output_bytes = 16777217"), "max_output_bytes is 16777217"),
            (tool_with("queue = \"a queue\""), "tool \"grep_code\": queue \"a queue\" is not a valid name"),
            (
                tool_with("env = [\"1PATH\"]"),
                "tool \"grep_code\": env names \"1PATH\", which is not an environment variable name",
            ),
            (tool_with("env = [\"LANG\", \"LANG\"]"), "tool \"grep_code\": env names \"LANG\" twice"),
        ];
        for (text, expected) in cases {
            let error = error_of(text);
            assert!(error.contains(expected), "expected {expected:?} in: {error}");
        }
    }

    #[test]
    fn schema_errors() {
        let base = "[[tool]]\nname = \"t\"\ndescription = \"d\"\nargv = [\"x\", \"{a}\"]\n";
        let cases = [
            ("[tool.input_schema]\ntype = \"array\"\n", "tool \"t\": input_schema.type must be \"object\""),
            (
                "[tool.input_schema]\nproperties = { a = { type = \"string\" } }\n",
                "input_schema.type must be \"object\"",
            ),
            (
                "[tool.input_schema]\ntype = \"object\"\nproperties = 3\n",
                "input_schema.properties must be a table",
            ),
            (
                "[tool.input_schema]\ntype = \"object\"\nproperties = { a = 3 }\n",
                "input_schema.properties.a must be a table",
            ),
            (
                "[tool.input_schema]\ntype = \"object\"\nrequired = [\"b\"]\nproperties = { a = {} }\n",
                "input_schema.required names `b`, which is not in input_schema.properties",
            ),
            (
                "[tool.input_schema]\ntype = \"object\"\nproperties = { a = { type = \"array\" } }\n",
                "argv item \"{a}\" names `a`, whose input_schema type is array",
            ),
            (
                "[tool.input_schema]\ntype = \"object\"\nproperties = { a = { default = 1979-05-27 } }\n",
                "input_schema.properties.a.default is the TOML date 1979-05-27, which JSON has no type for",
            ),
            (
                "[tool.input_schema]\ntype = \"object\"\nproperties = { a = { maximum = nan } }\n",
                "input_schema.properties.a.maximum is NaN, which JSON cannot hold",
            ),
            ("", "tool \"t\": argv item \"{a}\" names `a`, which is not a property of input_schema"),
        ];
        for (schema, expected) in cases {
            let error = error_of(&format!("{base}{schema}"));
            assert!(error.contains(expected), "expected {expected:?} in: {error}");
        }
    }

    #[test]
    fn duplicate_tool_names() {
        let text = "[[tool]]\nname = \"t\"\ndescription = \"d\"\nargv = [\"x\"]\n\n[[tool]]\nname = \"t\"\ndescription = \"e\"\nargv = [\"y\"]\n";
        assert_eq!(
            error_of(text),
            "tools file /x.toml: tool \"t\": name is given to another tool too; tool names must be unique"
        );
    }

    /// A profile "release" with one valid check, with `extra` lines added to the check's table.
    fn check_with(extra: &str) -> String {
        format!(
            "[readiness.release]\n[[readiness.release.check]]\nname = \"unit tests\"\nargv = [\"cargo\", \"test\"]\n{extra}\n"
        )
    }

    #[test]
    fn profile_and_check_errors_name_them() {
        let cases: &[(String, &str)] = &[
            (
                check_with("root = \"repo\"")
                    .replace("[readiness.release]", "[readiness.release]\nhistory = 0"),
                "tools file /x.toml: readiness profile \"release\": history is 0; keep between 1 and 1000 runs",
            ),
            (
                check_with("root = \"repo\"")
                    .replace("[readiness.release]", "[readiness.release]\nhistory = 1001"),
                "history is 1001",
            ),
            (
                check_with("root = \"repo\"")
                    .replace("[readiness.release]", "[readiness.release]\nhistory = 5\nflaky_window = 6"),
                "readiness profile \"release\": flaky_window is 6; it counts runs among those kept, so give between 1 and history (5)",
            ),
            (
                check_with("root = \"repo\"")
                    .replace("[readiness.release]", "[readiness.release]\nflaky_window = 0"),
                "flaky_window is 0",
            ),
            (
                "[readiness.release]\ndescription = \"x\"\n".into(),
                "readiness profile \"release\": check is missing: add at least one [[readiness.release.check]]",
            ),
            (
                check_with("root = \"repo\"").replace("readiness.release", "readiness.\"re lease\""),
                "readiness profile \"re lease\": name \"re lease\" is not a valid name",
            ),
            (
                check_with(""),
                "tools file /x.toml: readiness profile \"release\", check \"unit tests\": root is missing",
            ),
            (
                check_with("root = \"repo\"").replace("argv = [\"cargo\", \"test\"]", "argv = []"),
                "readiness profile \"release\", check \"unit tests\": argv is empty",
            ),
            (
                check_with("root = \"repo\"").replace("\"unit tests\"", "\"\""),
                "readiness profile \"release\", check #1: name \"\" is not a valid check name",
            ),
            (
                check_with("root = \"repo\"").replace("\"unit tests\"", "\" unit\""),
                "name \" unit\" is not a valid check name",
            ),
            (
                check_with("root = \"repo\"").replace("\"unit tests\"", "\"unit::tests\""),
                "check \"unit::tests\": name contains `::`",
            ),
            (
                check_with("root = \"repo\"").replace("\"unit tests\"", "\"unit\\ttests\""),
                "name contains a control character",
            ),
            (
                check_with("root = \"repo\"\ncwd = \"/abs\""),
                "check \"unit tests\": cwd is \"/abs\", an absolute path",
            ),
            (check_with("root = \"repo\"\ntimeout_s = 0"), "check \"unit tests\": timeout_s is 0"),
            (
                check_with("root = \"repo\"\nreport = \"junit\""),
                "check \"unit tests\": report_path is missing",
            ),
            (
                check_with("root = \"repo\"\nreport = \"junit\"\nreport_path = \"../junit.xml\""),
                "check \"unit tests\": report_path is \"../junit.xml\", which has a `..` component",
            ),
            (
                check_with("root = \"repo\"\nreport = \"junit\"\nreport_path = \"build/\""),
                "report_path is \"build/\", which is a directory",
            ),
            (
                check_with("root = \"repo\"\nreport = \"cargo\"\nreport_path = \"x.xml\""),
                "check \"unit tests\": report_path is only read for report = \"junit\"",
            ),
            (
                check_with("root = \"repo\"\nreport_path = \"x.xml\""),
                "report_path is only read for report = \"junit\"",
            ),
            (check_with("root = \"repo\"\nenv = [\"A-B\"]"), "check \"unit tests\": env names \"A-B\""),
            (
                check_with("root = \"repo\"\nmax_output_bytes = 0"),
                "check \"unit tests\": max_output_bytes is 0",
            ),
            (
                check_with("root = \"repo\"")
                    + "[[readiness.release.check]]\nname = \"unit tests\"\nargv = [\"x\"]\nroot = \"r\"\n",
                "readiness profile \"release\", check \"unit tests\": name is given to another check of this profile too",
            ),
        ];
        for (text, expected) in cases {
            let error = error_of(text);
            assert!(error.contains(expected), "expected {expected:?} in: {error}");
        }
    }

    #[test]
    fn unknown_keys_and_wrong_types_are_errors_with_a_position() {
        let error = error_of(&tool_with("timeout = 5"));
        assert!(error.starts_with("tools file /x.toml: TOML parse error at line 5"), "{error}");
        assert!(error.contains("unknown field `timeout`"), "{error}");

        let error = error_of(&check_with("root = \"repo\"\nseverty = \"warning\""));
        assert!(error.contains("unknown field `severty`"), "{error}");

        let error = error_of(&check_with("root = \"repo\"\nseverity = \"fatal\""));
        assert!(error.contains("unknown variant `fatal`"), "{error}");

        let error = error_of(&check_with("root = \"repo\"\nreport = \"tap\""));
        assert!(error.contains("unknown variant `tap`"), "{error}");

        let error = error_of(&tool_with("task_support = \"sometimes\""));
        assert!(error.contains("unknown variant `sometimes`"), "{error}");

        let error = error_of(&tool_with("timeout_s = -1"));
        assert!(error.contains("timeout_s") || error.contains("line 5"), "{error}");

        let error = error_of("[[tool]]\nname = \"t\"\nargv = [\"x\"]\n");
        assert!(error.contains("missing field `description`"), "{error}");

        let error = error_of("[tools]\nname = \"t\"\n");
        assert!(error.contains("unknown field `tools`"), "{error}");

        let error = error_of("[[tool]\nname = \"t\"\n");
        assert!(error.starts_with("tools file /x.toml: TOML parse error at line 1"), "{error}");
    }

    fn grep_schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string"},
                "path": {"type": "string", "default": "."},
                "context": {"type": "integer"},
                "ignore_case": {"type": "boolean", "default": false},
            }
        })
    }

    #[test]
    fn fill_argv_substitutes_each_item_whole() {
        let template = strings(&["grep", "-rn", "--context={context}", "--", "{pattern}", "{path}"]);
        let arguments = object(json!({"pattern": "a b; rm -rf /", "path": "src dir", "context": 3}));
        assert_eq!(
            fill_argv(&template, &arguments, &grep_schema()),
            Ok(strings(&["grep", "-rn", "--context=3", "--", "a b; rm -rf /", "src dir"]))
        );
    }

    #[test]
    fn fill_argv_uses_defaults_and_drops_absent_optional_items() {
        let template = strings(&["grep", "{context}", "{pattern}", "{path}", "--ignore-case={ignore_case}"]);
        let arguments = object(json!({"pattern": "x", "context": null}));
        assert_eq!(
            fill_argv(&template, &arguments, &grep_schema()),
            Ok(strings(&["grep", "x", ".", "--ignore-case=false"]))
        );
    }

    #[test]
    fn fill_argv_scalars_by_their_json_text() {
        let schema = json!({"type": "object", "properties": {"n": {}, "f": {}, "b": {}, "s": {}}});
        let template = strings(&["p", "{n}", "{f}", "{b}", "{s}", "{n}{s}", "{{{n}}}"]);
        let arguments = object(json!({"n": -42, "f": 1.5, "b": true, "s": ""}));
        assert_eq!(
            fill_argv(&template, &arguments, &schema),
            Ok(strings(&["p", "-42", "1.5", "true", "", "-42", "{-42}"]))
        );
    }

    #[test]
    fn fill_argv_refusals() {
        let schema = grep_schema();
        let template = strings(&["grep", "--context={context}", "{pattern}"]);
        let missing = fill_argv(&template, &object(json!({"pattern": "x"})), &schema);
        assert_eq!(
            missing,
            Err(ArgvError::Missing { name: "context".into(), item: "--context={context}".into() })
        );
        let message = missing.expect_err("missing").to_string();
        assert_eq!(
            message,
            "argument `context` is missing, and the command-line item \"--context={context}\" needs it; pass \
             it, or give it a default in the tool's input schema"
        );

        let template = strings(&["grep", "{pattern}"]);
        let array = fill_argv(&template, &object(json!({"pattern": ["a", "b"]})), &schema);
        assert_eq!(array, Err(ArgvError::NotScalar { name: "pattern".into(), kind: "an array" }));
        assert_eq!(
            array.expect_err("array").to_string(),
            "argument `pattern` is an array; a command-line argument can only be a string, a number or a boolean"
        );
        let object_argument = fill_argv(&template, &object(json!({"pattern": {"a": 1}})), &schema);
        assert_eq!(object_argument, Err(ArgvError::NotScalar { name: "pattern".into(), kind: "an object" }));

        let nul = fill_argv(&template, &object(json!({"pattern": "a\u{0}b"})), &schema);
        assert_eq!(nul, Err(ArgvError::NulByte { name: "pattern".into() }));
        assert!(nul.expect_err("nul").to_string().contains("NUL byte"));

        let array_default = json!({"type": "object", "properties": {"pattern": {"default": [1]}}});
        assert_eq!(
            fill_argv(&template, &Map::new(), &array_default),
            Err(ArgvError::NotScalar { name: "pattern".into(), kind: "an array" })
        );

        let broken = fill_argv(&strings(&["grep", "{pattern"]), &Map::new(), &schema);
        assert!(matches!(&broken, Err(ArgvError::Template { item, .. }) if item == "{pattern"), "{broken:?}");
        assert_eq!(
            broken.expect_err("broken").to_string(),
            "the command-line item \"{pattern\" has a `{` that is not closed; write a literal brace as `{{`"
        );
    }

    #[test]
    fn pieces_of_templates() {
        assert_eq!(pieces(""), Ok(vec![Piece::Text(String::new())]));
        assert_eq!(pieces("{a}"), Ok(vec![Piece::Argument("a")]));
        assert_eq!(
            pieces("x{a}é{_b1}"),
            Ok(vec![
                Piece::Text("x".into()),
                Piece::Argument("a"),
                Piece::Text("é".into()),
                Piece::Argument("_b1")
            ])
        );
        assert_eq!(pieces("{{a}}"), Ok(vec![Piece::Text("{a}".into())]));
        assert!(pieces("{}").is_err());
        assert!(pieces("{1a}").is_err());
        assert!(pieces("{a-b}").is_err());
        assert!(pieces("{a").is_err());
        assert!(pieces("a}").is_err());
    }

    #[test]
    fn the_readme_example_is_a_valid_tools_file() {
        let readme =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).expect("README");
        let start =
            readme.find("```toml\n# conveyor-tools.toml").expect("the README has a tools file example");
        let body = &readme[start + "```toml\n".len()..];
        let example = &body[..body.find("```").expect("the example ends")];
        let config = parse(example, "README.md").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.tools.len(), 1);
        assert_eq!(config.profiles["release"].checks.len(), 2);
    }
}
