//! Files the ADRs name that a root lacks, how much each matters, and a template where one is
//! safe: the contents an ADR shows for it, an example file beside it, or (for an env file) the
//! variables the ADRs name with empty values. A file named like a secret never gets one.
//!
//! The root is asked as every read of it is ([`Root::resolve`]): a file is there, and an example
//! file is read, only when a walk of the root lists it. A hidden or ignored file (`.env`, a
//! `local.toml` the `.gitignore` names, a link out of the root) is neither read nor said to
//! exist, so the answer is the same whether or not it is on disk; such a file counts as missing
//! (a scratch copy leaves it out too), and the command that creates it from its template never
//! overwrites one that is there when the script runs.

use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;

use crate::roots::Root;

use serde::{Deserialize, Serialize};

use super::requirements::{Requirements, Source};
use super::secrets::{mask, names_a_secret};

/// Largest example file read as a template.
const MAX_TEMPLATE_BYTES: u64 = 64 * 1024;
/// Where a file's example is kept, beside it: `{path}{suffix}`.
const EXAMPLE_SUFFIXES: &[&str] = &[".example", ".sample", ".template", ".dist", ".tmpl"];
/// Folders that hold what a build makes: a file under them is an output, not a requirement.
const OUTPUT_FOLDERS: &[&str] =
    &["build", "dist", "target", "out", "node_modules", ".venv", "venv", "coverage"];
/// Or `{stem}.{infix}.{ext}`.
const EXAMPLE_INFIXES: &[&str] = &["example", "sample", "template"];

/// Where a template's contents come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum TemplateSource {
    /// An example file of the root, copied.
    ExampleFile { path: String },
    /// A code block of an ADR.
    Adr { adr: String, adr_path: String, line: u32 },
    /// The variables the ADRs name, each with an empty value.
    Variables,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Template {
    pub source: TemplateSource,
    /// Secrets masked.
    pub contents: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// A step or check names it, or it holds secrets or settings: the run fails without it.
    Critical,
    /// Only the prose names it.
    Warning,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MissingFile {
    pub path: String,
    pub required_by: Vec<Source>,
    pub severity: Severity,
    pub secret: bool,
    pub template: Option<Template>,
    pub recommendation: String,
}

impl MissingFile {
    /// The shell command that creates the file from its template, if it has one.
    pub fn create_command(&self) -> Option<String> {
        let template = self.template.as_ref()?;
        let folder = self.path.rsplit_once('/').map(|(dir, _)| format!("mkdir -p {} && ", quote(dir)));
        let folder = folder.unwrap_or_default();
        let target = quote(&self.path);
        // Only when it is not there: a file the root hides from tools may still be on disk.
        Some(match &template.source {
            TemplateSource::ExampleFile { path } => {
                format!("if [ ! -e {target} ]; then {folder}cp {} {target}; fi", quote(path))
            }
            _ => {
                let mut delimiter = "CONVEYOR_TEMPLATE".to_owned();
                while template.contents.lines().any(|l| l == delimiter) {
                    delimiter.push('_');
                }
                let body = template.contents.trim_end_matches('\n');
                format!(
                    "if [ ! -e {target} ]; then {folder}cat > {target} <<'{delimiter}'\n{body}\n{delimiter}\nfi"
                )
            }
        })
    }
}

/// A word for a POSIX shell, quoted when it needs to be.
pub fn quote(word: &str) -> String {
    if !word.is_empty()
        && word.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'))
    {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// The files `requirements` names that `root` lacks, in the order first named. ADR files, and
/// files a step creates (`cp a b`, `> b`, `touch b`), and files under a build's output folders
/// (`build/`, `dist/`, `target/`, ...), are not missing.
pub fn missing_files(root: &Root, requirements: &Requirements) -> Vec<MissingFile> {
    let mut missing: Vec<MissingFile> = Vec::new();
    for mention in &requirements.files {
        if root.resolve(&mention.path).is_ok()
            || requirements.adrs.iter().any(|a| a.path == mention.path)
            || created_by_a_step(&mention.path, requirements)
            || OUTPUT_FOLDERS.contains(&mention.path.split('/').next().unwrap_or_default())
        {
            continue;
        }
        if let Some(known) = missing.iter_mut().find(|m| m.path == mention.path) {
            known.required_by.push(mention.source.clone());
            if mention.in_command {
                known.severity = Severity::Critical;
            }
            continue;
        }
        let secret = names_a_secret(&mention.path);
        let settings = is_env_file(&mention.path);
        let template = if secret { None } else { template(root, &mention.path, requirements) };
        let severity =
            if mention.in_command || secret || settings { Severity::Critical } else { Severity::Warning };
        let recommendation = match (&template, secret) {
            (_, true) => format!(
                "Provide {} from your secret store before the run; it is never generated, and it must not be committed",
                mention.path
            ),
            (Some(t), false) => match &t.source {
                TemplateSource::ExampleFile { path } => format!("Create {} from {path}", mention.path),
                TemplateSource::Adr { adr, .. } => {
                    format!("Create {} with the contents {adr} shows", mention.path)
                }
                TemplateSource::Variables => {
                    format!("Create {} and give each variable the ADRs name a value", mention.path)
                }
            },
            (None, false) => format!("Create {}; the ADRs name it but show no contents for it", mention.path),
        };
        missing.push(MissingFile {
            path: mention.path.clone(),
            required_by: vec![mention.source.clone()],
            severity,
            secret,
            template,
            recommendation,
        });
    }
    missing
}

fn is_env_file(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.starts_with(".env") || name.ends_with(".env")
}

fn created_by_a_step(path: &str, requirements: &Requirements) -> bool {
    requirements.steps.iter().any(|step| {
        let words: Vec<&str> = step.command.split_whitespace().collect();
        let redirected = words
            .windows(2)
            .any(|w| matches!(w[0], ">" | ">>" | "-o" | "--output") && w[1] == path)
            || words.iter().any(|w| w.strip_prefix('>').is_some_and(|t| t.trim_start_matches('>') == path));
        let copied = matches!(words.first(), Some(&("cp" | "mv" | "touch" | "install" | "ln")))
            && words.last().is_some_and(|w| w.trim_start_matches("./") == path);
        redirected || copied
    })
}

fn template(root: &Root, path: &str, requirements: &Requirements) -> Option<Template> {
    if let Some(shown) = requirements.shown.iter().find(|s| s.path == path) {
        return Some(Template {
            source: TemplateSource::Adr {
                adr: shown.source.adr.clone(),
                adr_path: shown.source.adr_path.clone(),
                line: shown.source.line,
            },
            contents: mask(&shown.contents),
        });
    }
    for example in example_paths(path) {
        if let Some(contents) = read_example(root, &example) {
            return Some(Template {
                source: TemplateSource::ExampleFile { path: example },
                contents: mask(&contents),
            });
        }
    }
    if is_env_file(path) && !requirements.variables.is_empty() {
        let mut contents = String::from("# The variables the ADRs name; give each a value.\n");
        for name in &requirements.variables {
            if names_a_secret(name) {
                contents.push_str("# a secret: set it from your secret store, and never commit it\n");
            }
            contents.push_str(&format!("{name}=\n"));
        }
        return Some(Template { source: TemplateSource::Variables, contents });
    }
    None
}

/// The text of the example file `relative`, when a walk of the root lists it and it is a small
/// regular text file. Opened without following a link and without blocking, so that a file
/// swapped since it was checked (for a link out of the root, a FIFO) is not read.
fn read_example(root: &Root, relative: &str) -> Option<String> {
    let path = root.resolve(relative).ok()?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOFOLLOW)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() > MAX_TEMPLATE_BYTES {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(MAX_TEMPLATE_BYTES + 1).read_to_end(&mut bytes).ok()?;
    if bytes.len() as u64 > MAX_TEMPLATE_BYTES {
        return None;
    }
    String::from_utf8(bytes).ok()
}

fn example_paths(path: &str) -> Vec<String> {
    let mut paths: Vec<String> = EXAMPLE_SUFFIXES.iter().map(|s| format!("{path}{s}")).collect();
    let (folder, name) = match path.rsplit_once('/') {
        Some((folder, name)) => (format!("{folder}/"), name),
        None => (String::new(), path),
    };
    if let Some((stem, ext)) = name.rsplit_once('.').filter(|(stem, _)| !stem.is_empty()) {
        paths.extend(EXAMPLE_INFIXES.iter().map(|infix| format!("{folder}{stem}.{infix}.{ext}")));
    }
    paths
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roots::Roots;

    fn requirements(text: &str) -> Requirements {
        let mut r = Requirements::default();
        r.add("docs/adr/0001-a.md", text);
        r
    }

    fn root_of(dir: &std::path::Path) -> Root {
        Roots::parse(&[format!("r={}", dir.display())]).expect("roots").get("r").expect("root").clone()
    }

    fn write(path: &std::path::Path, text: &str) {
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }

    #[test]
    fn missing_files_get_a_severity_and_a_template_where_one_is_safe() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::create_dir_all(dir.path().join("config")).expect("mkdir");
        std::fs::write(dir.path().join("config/app.example.toml"), "token = \"sk-abcdefghijklmnop1234\"\n")
            .expect("write");
        std::fs::write(dir.path().join("present.txt"), "").expect("write");
        let r = requirements(
            "# A\n\n## Implementation\n\n```sh\n./run.sh config/app.toml\ncp a.txt made.txt\n```\n\nUse `present.txt`, `docs/notes.md`, `.env` (with `API_TOKEN`) and `certs/tls.key`.\n",
        );
        let missing = missing_files(&root_of(dir.path()), &r);
        let by_path = |p: &str| missing.iter().find(|m| m.path == p);
        assert!(by_path("present.txt").is_none() && by_path("made.txt").is_none());
        let config = by_path("config/app.toml").expect("config is missing");
        assert_eq!(config.severity, Severity::Critical);
        let template = config.template.as_ref().expect("from the example");
        assert_eq!(template.source, TemplateSource::ExampleFile { path: "config/app.example.toml".into() });
        assert_eq!(template.contents, "token = ***\n", "secrets masked");
        assert_eq!(
            config.create_command().as_deref(),
            Some(
                "if [ ! -e config/app.toml ]; then mkdir -p config && cp config/app.example.toml config/app.toml; fi"
            )
        );
        assert_eq!(by_path("docs/notes.md").expect("notes").severity, Severity::Warning);
        let env = by_path(".env").expect("env");
        assert_eq!(env.severity, Severity::Critical);
        assert!(env.template.as_ref().expect("variables").contents.contains("API_TOKEN=\n"));
        let key = by_path("certs/tls.key").expect("key");
        assert!(key.secret && key.template.is_none() && key.create_command().is_none());
        assert!(key.recommendation.contains("secret store"));
    }

    #[test]
    fn templates_and_existence_obey_the_walk_rules() {
        let base = tempfile::tempdir().expect("dir");
        let dir = base.path().join("repo");
        write(&base.path().join("outside/settings.yaml"), "token: from-outside-the-root\n");
        write(&dir.join(".gitignore"), "config/app.toml.example\nlocal.txt\n");
        write(&dir.join(".env.example"), "FROM_A_HIDDEN_FILE=1\n");
        write(&dir.join("config/app.toml.example"), "from_an_ignored_file = 1\n");
        std::fs::create_dir_all(dir.join("deploy")).expect("mkdir");
        std::os::unix::fs::symlink(
            base.path().join("outside/settings.yaml"),
            dir.join("deploy/settings.yaml.example"),
        )
        .expect("symlink");
        write(&dir.join("local.txt"), "ignored, but on disk\n");
        write(&dir.join("served.conf.example"), "served = 1\n");
        let r = requirements(
            "# A\n\n## Implementation\n\nUse `.env` (with `API_TOKEN`), `config/app.toml`, `deploy/settings.yaml`, `local.txt` and `served.conf`.\n",
        );
        let missing = missing_files(&root_of(&dir), &r);
        let shown = serde_json::to_string(&missing).expect("json");
        for leaked in ["FROM_A_HIDDEN_FILE", "from_an_ignored_file", "from-outside-the-root"] {
            assert!(!shown.contains(leaked), "{leaked} was read: {shown}");
        }
        let by_path =
            |p: &str| missing.iter().find(|m| m.path == p).unwrap_or_else(|| panic!("{p}: {shown}"));
        assert_eq!(by_path(".env").template.as_ref().map(|t| &t.source), Some(&TemplateSource::Variables));
        assert!(by_path("config/app.toml").template.is_none());
        assert!(by_path("deploy/settings.yaml").template.is_none());
        // An ignored file is missing whether or not it is on disk; its fix would not overwrite it.
        assert!(by_path("local.txt").template.is_none());
        let served = by_path("served.conf").template.as_ref().expect("a served example");
        assert_eq!(served.source, TemplateSource::ExampleFile { path: "served.conf.example".into() });
        std::fs::remove_file(dir.join("local.txt")).expect("rm");
        assert_eq!(missing_files(&root_of(&dir), &r), missing, "the same answer without the ignored file");
    }

    #[test]
    fn contents_an_adr_shows_become_a_heredoc_that_keeps_a_file_already_there() {
        let dir = tempfile::tempdir().expect("dir");
        let r = requirements("# A\n\n## Decision\n\nWrite `conf/x.yaml`:\n\n```yaml\nport: 1\n```\n");
        let missing = missing_files(&root_of(dir.path()), &r);
        let command = missing[0].create_command().expect("a template");
        assert_eq!(
            command,
            "if [ ! -e conf/x.yaml ]; then mkdir -p conf && cat > conf/x.yaml <<'CONVEYOR_TEMPLATE'\nport: 1\nCONVEYOR_TEMPLATE\nfi"
        );
        assert_eq!(quote("it's"), "'it'\\''s'");
        let run = |at: &std::path::Path| {
            let ok = std::process::Command::new("bash").arg("-ec").arg(&command).current_dir(at).status();
            assert!(ok.expect("bash").success());
            std::fs::read_to_string(at.join("conf/x.yaml")).expect("written")
        };
        assert_eq!(run(dir.path()), "port: 1\n");
        std::fs::write(dir.path().join("conf/x.yaml"), "port: 2\n").expect("write");
        assert_eq!(run(dir.path()), "port: 2\n", "a file already there is kept");
    }
}
