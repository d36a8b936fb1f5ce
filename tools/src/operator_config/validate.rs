//! The checks a tools file's values go through, and the messages that name the tool, profile or
//! check and the field when one fails.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use super::ReportFormat;
use super::argv::{Piece, pieces};
use super::raw::{RawCheck, RawFile, RawProfile, RawTool};
use super::{
    ConfiguredCheck, ConfiguredTool, DEFAULT_CHECK_OUTPUT_BYTES, DEFAULT_CHECK_TIMEOUT_S,
    DEFAULT_FLAKY_WINDOW, DEFAULT_HISTORY, DEFAULT_TOOL_OUTPUT_BYTES, DEFAULT_TOOL_TIMEOUT_S, MAX_HISTORY,
    MAX_OUTPUT_BYTES, MAX_TIMEOUT_S, OperatorConfig, Profile,
};

/// Longest tool, profile, root or queue name.
const MAX_NAME_CHARS: usize = 64;
/// Longest check name.
const MAX_CHECK_NAME_CHARS: usize = 128;

/// Checks every tool and profile of a file, in the order written, stopping at the first problem.
pub(super) fn check_file(raw: RawFile) -> Result<OperatorConfig, Problem> {
    let mut tools = Vec::with_capacity(raw.tool.len());
    let mut tool_names = BTreeSet::new();
    for (index, raw_tool) in raw.tool.into_iter().enumerate() {
        let tool = check_tool(raw_tool, index)?;
        if !tool_names.insert(tool.name.clone()) {
            return Err(Problem::new(
                subject_tool(&tool.name, index),
                "name",
                "is given to another tool too; tool names must be unique",
            ));
        }
        tools.push(tool);
    }

    let mut profiles = BTreeMap::new();
    for (name, raw_profile) in raw.readiness {
        let profile = check_profile(name, raw_profile)?;
        profiles.insert(profile.name.clone(), profile);
    }
    let mut bootstrap = BTreeMap::new();
    for (name, raw_profile) in raw.bootstrap {
        let profile = super::bootstrap::check_bootstrap(name, raw_profile)?;
        bootstrap.insert(profile.name.clone(), profile);
    }
    Ok(OperatorConfig { tools, profiles, bootstrap })
}

/// One refused value: what it belongs to, the field, and what is wrong with it.
pub(super) struct Problem {
    pub(super) subject: String,
    pub(super) field: String,
    pub(super) problem: String,
}

impl Problem {
    pub(super) fn new(
        subject: impl Into<String>,
        field: impl Into<String>,
        problem: impl Into<String>,
    ) -> Self {
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
pub(super) fn name_problem(name: &str) -> Option<String> {
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
    check_placeholders(&raw.argv, &properties).map_err(|problem| fail("argv", problem))?;

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

/// The placeholders of a tool's argv: well formed, not in the program's place, and each naming a
/// scalar property of the input schema.
fn check_placeholders(argv: &[String], properties: &Map<String, Value>) -> Result<(), String> {
    for (position, item) in argv.iter().enumerate() {
        let pieces = pieces(item).map_err(|problem| format!("item {item:?} {problem}"))?;
        for piece in pieces {
            let Piece::Argument(name) = piece else { continue };
            if position == 0 {
                return Err(format!(
                    "item {item:?} is the program to run, which a call's arguments must not choose"
                ));
            }
            match properties.get(name) {
                None => {
                    return Err(format!(
                        "item {item:?} names `{name}`, which is not a property of input_schema; add it to \
                         [tool.input_schema.properties], or write a literal brace as `{{{{` or `}}}}`"
                    ));
                }
                Some(property) => {
                    if let Some(kind @ ("array" | "object")) = property.get("type").and_then(Value::as_str) {
                        return Err(format!(
                            "item {item:?} names `{name}`, whose input_schema type is {kind}; only a string, \
                             number or boolean can stand in a command line"
                        ));
                    }
                }
            }
        }
    }
    Ok(())
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
pub(super) fn check_relative_path(path: &str) -> Result<(), String> {
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

pub(super) fn check_timeout(value: Option<u64>, default: u64) -> Result<u64, String> {
    match value {
        None => Ok(default),
        Some(s) if (1..=MAX_TIMEOUT_S).contains(&s) => Ok(s),
        Some(s) => Err(format!("is {s}; give between 1 and {MAX_TIMEOUT_S} seconds")),
    }
}

pub(super) fn check_output_bytes(value: Option<u64>, default: u64) -> Result<u64, String> {
    match value {
        None => Ok(default),
        Some(n) if (1..=MAX_OUTPUT_BYTES).contains(&n) => Ok(n),
        Some(n) => Err(format!("is {n}; give between 1 and {MAX_OUTPUT_BYTES} bytes (16 MiB)")),
    }
}

pub(super) fn check_env(names: &[String]) -> Result<(), String> {
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

#[cfg(test)]
mod tests {
    use crate::operator_config::tests::{check_with, error_of, tool_with};

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
}
