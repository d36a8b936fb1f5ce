//! The operator's tools file: one TOML file that declares tools run as child processes (each an
//! MCP tool whose arguments fill an argv template), readiness profiles (named lists of checks,
//! each a command run in a root whose exit status, and optionally test report, is recorded), and
//! bootstrap profiles (where `bootstrap_validation_loop` may run what a root's ADRs say, and
//! whether it may write the ADRs back).
//!
//! Everything is checked when the file is read, so that a typo fails the worker's start with a
//! message naming the tool, profile or check and the field, rather than failing a call later.
//! Unknown keys are errors for the same reason. No command ever goes through a shell: `argv[0]`
//! is the program and each template item becomes exactly one argument.
//!
//! A root is a directory the operator names when starting the worker (`--root NAME=PATH`); this
//! file refers to roots by name only, and whoever runs the commands resolves them.
//!
//! Reading the file takes three steps, one submodule each:
//!
//! - `raw`: the file's tables as serde reads them, so that unknown keys and wrong types fail
//!   with TOML's position.
//! - `validate`: the checks that turn those tables into [`ConfiguredTool`]s and [`Profile`]s, and
//!   the messages that name what is wrong.
//! - `argv`: `{name}` placeholders in a tool's argv, read when the file is checked and filled
//!   for each call.
//! - `bootstrap`: the checks of a `[bootstrap.NAME]` profile.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

mod argv;
mod bootstrap;
mod raw;
mod validate;

pub use argv::fill_argv;

/// How much a check's result matters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The project is not ready unless it passes.
    #[default]
    Critical,
    /// Reported, never blocking.
    Warning,
}

/// The kinds of report a readiness check can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReportFormat {
    /// A JUnit XML file the command writes.
    Junit,
    /// `cargo test`'s output.
    Cargo,
    /// pytest's output with `-v` (and `-rA` for every test's line in the short summary).
    Pytest,
}

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

impl Profile {
    /// The roots its checks run in, each once.
    pub fn roots(&self) -> Vec<String> {
        let mut roots: Vec<String> = self.checks.iter().map(|c| c.root.clone()).collect();
        roots.sort();
        roots.dedup();
        roots
    }
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

/// Where a bootstrap profile runs a root's scripts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Workspace {
    /// A fresh copy of the root per iteration, under this directory; the root is never touched.
    Scratch(std::path::PathBuf),
    /// The root itself: what the scripts create stays.
    Root,
}

/// A bootstrap profile: the root whose ADRs `bootstrap_validation_loop` may turn into scripts
/// and run, where they run, and whether the ADRs may be written back.
#[derive(Debug, Clone, PartialEq)]
pub struct BootstrapProfile {
    pub name: String,
    pub description: Option<String>,
    pub root: String,
    pub workspace: Workspace,
    /// The longest a bootstrap script or one check may run.
    pub timeout_s: u64,
    pub env: Vec<String>,
    /// Whether approved ADR updates may be written into the root.
    pub writable: bool,
    /// Executions kept.
    pub history: usize,
    pub max_output_bytes: u64,
}

/// What the tools file declares.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OperatorConfig {
    pub tools: Vec<ConfiguredTool>,
    /// By profile name.
    pub profiles: BTreeMap<String, Profile>,
    /// Bootstrap profiles, by name.
    pub bootstrap: BTreeMap<String, BootstrapProfile>,
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
    let raw: raw::RawFile = toml::from_str(text).map_err(|e| ConfigError::Syntax {
        origin: origin.to_owned(),
        detail: e.to_string().trim_end().to_owned(),
    })?;
    validate::check_file(raw).map_err(|problem| ConfigError::Invalid {
        origin: origin.to_owned(),
        subject: problem.subject,
        field: problem.field,
        problem: problem.problem,
    })
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

    pub(super) fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    pub(super) fn error_of(text: &str) -> String {
        match parse(text, "/x.toml") {
            Ok(config) => panic!("accepted: {config:?}"),
            Err(e) => e.to_string(),
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
        assert_eq!(release.roots(), ["repo"], "three checks in one root: named once");
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
    pub(super) fn tool_with(extra: &str) -> String {
        format!(
            "[[tool]]\nname = \"grep_code\"\ndescription = \"d\"\nargv = [\"grep\", \"{{pattern}}\"]\n{extra}\n[tool.input_schema]\ntype = \"object\"\n[tool.input_schema.properties.pattern]\ntype = \"string\"\n"
        )
    }

    /// A profile "release" with one valid check, with `extra` lines added to the check's table.
    pub(super) fn check_with(extra: &str) -> String {
        format!(
            "[readiness.release]\n[[readiness.release.check]]\nname = \"unit tests\"\nargv = [\"cargo\", \"test\"]\n{extra}\n"
        )
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
