//! Roots: the directories an operator lets tools read (`--root NAME=PATH`). A tool's arguments
//! name a root and a path relative to it; nothing outside a root is ever read.
//!
//! A relative path is refused when it is absolute, holds a `..` component, or resolves (through
//! symlinks) to a place outside its root. Walks honour `.gitignore`, `.ignore` and git's exclude
//! files (with the `ignore` crate, ripgrep's walker), skip hidden entries, and never follow a
//! symlink, so a link inside a root cannot lead a walk out of it.
//!
//! Each root is also an MCP resource (`conveyor://roots/NAME/`, its file list) and its files are
//! readable through the template `conveyor://roots/{root}/{+path}`.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use conveyor_shared::model::{RpcError, ToolOutcome};
use serde_json::{Value, json};

use crate::tool::{FnTool, ToolContext, ToolRegistry};

/// Largest file a resource read returns.
const MAX_RESOURCE_FILE_BYTES: u64 = 1024 * 1024;
/// Most paths a root's listing resource returns.
const MAX_LISTED_FILES: usize = 10_000;

/// Why a root or a path inside one was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RootError {
    #[error("a root is given as NAME=PATH, got `{0}`")]
    Malformed(String),
    #[error("root name `{0}` is not valid: use 1 to 64 letters, digits, `_`, `-` or `.`")]
    BadName(String),
    #[error("root `{0}` is given twice")]
    Duplicate(String),
    #[error("root `{name}`: {path} is not a directory that can be read ({reason})")]
    NotADirectory { name: String, path: String, reason: String },
    #[error("no root named `{name}`; this worker has: {known}")]
    UnknownRoot { name: String, known: String },
    #[error("path `{0}` is absolute; give a path relative to the root")]
    Absolute(String),
    #[error("path `{0}` holds `..`; give a path inside the root")]
    Parent(String),
    #[error("path `{path}` leads outside root `{root}` (through a symlink)")]
    Escapes { root: String, path: String },
    #[error("path `{path}` does not exist in root `{root}`")]
    NotFound { root: String, path: String },
    #[error("path `{0}` holds a NUL byte")]
    Nul(String),
}

impl RootError {
    /// The tool call's error: the caller gave a bad root or path.
    pub fn into_outcome(self) -> ToolOutcome {
        ToolOutcome::Error(RpcError { code: -32602, message: self.to_string(), data: None })
    }
}

/// One directory tools may read.
#[derive(Debug, Clone)]
pub struct Root {
    pub name: String,
    /// Canonical: symlinks resolved, so that containment is a prefix test.
    pub path: PathBuf,
}

impl Root {
    /// The file or directory `relative` names inside the root, canonical. `""` and `"."` name the
    /// root itself.
    pub fn resolve(&self, relative: &str) -> Result<PathBuf, RootError> {
        if relative.contains('\0') {
            return Err(RootError::Nul(relative.to_owned()));
        }
        let candidate = Path::new(relative);
        if candidate.is_absolute() || relative.starts_with('\\') {
            return Err(RootError::Absolute(relative.to_owned()));
        }
        for component in candidate.components() {
            match component {
                Component::ParentDir => return Err(RootError::Parent(relative.to_owned())),
                Component::Prefix(_) | Component::RootDir => {
                    return Err(RootError::Absolute(relative.to_owned()));
                }
                Component::CurDir | Component::Normal(_) => {}
            }
        }
        let joined = self.path.join(candidate);
        let resolved = joined.canonicalize().map_err(|_| {
            if joined.symlink_metadata().is_ok() {
                // The name exists but what it points at does not: a dangling link.
                RootError::Escapes { root: self.name.clone(), path: relative.to_owned() }
            } else {
                RootError::NotFound { root: self.name.clone(), path: relative.to_owned() }
            }
        })?;
        if !resolved.starts_with(&self.path) {
            return Err(RootError::Escapes { root: self.name.clone(), path: relative.to_owned() });
        }
        Ok(resolved)
    }

    /// `path` (inside the root) as the `/`-separated relative path results show.
    pub fn relative(&self, path: &Path) -> String {
        let relative = path.strip_prefix(&self.path).unwrap_or(path);
        let parts: Vec<String> =
            relative.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
        parts.join("/")
    }

    /// Every regular file under `start` (a file or directory inside the root), in a stable order,
    /// honouring ignore files, skipping hidden entries and symlinks.
    pub fn files(&self, start: &Path) -> impl Iterator<Item = PathBuf> + use<> {
        let mut builder = ignore::WalkBuilder::new(start);
        builder
            .follow_links(false)
            .require_git(false)
            .hidden(true)
            .parents(true)
            .sort_by_file_path(|a, b| a.cmp(b));
        // A root's own `.gitignore` applies even when the walk starts below it.
        let root_ignore = self.path.join(".gitignore");
        if start != self.path && root_ignore.is_file() {
            builder.add_ignore(root_ignore);
        }
        builder
            .build()
            .filter_map(Result::ok)
            .filter(|entry| entry.file_type().is_some_and(|t| t.is_file()))
            .map(ignore::DirEntry::into_path)
    }

    /// The files under each of `paths` (relative to the root; all of it when empty), each once,
    /// walked lazily: a tree of any size costs the memory of one directory at a time. A path
    /// that is not in the root fails before anything is walked.
    pub fn walk_under(&self, paths: &[String]) -> Result<impl Iterator<Item = PathBuf> + use<>, RootError> {
        let starts = if paths.is_empty() {
            vec![self.path.clone()]
        } else {
            paths.iter().map(|p| self.resolve(p)).collect::<Result<Vec<_>, _>>()?
        };
        let root = self.clone();
        Ok(starts.clone().into_iter().enumerate().flat_map(move |(i, start)| {
            // A file under an earlier start was walked already.
            let earlier: Vec<PathBuf> = starts[..i].to_vec();
            root.files(&start).filter(move |f| !earlier.iter().any(|e| f.starts_with(e)))
        }))
    }

    /// [`Root::walk_under`], collected.
    pub fn files_under(&self, paths: &[String]) -> Result<Vec<PathBuf>, RootError> {
        Ok(self.walk_under(paths)?.collect())
    }
}

/// The roots of one worker, by name. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Roots {
    roots: Arc<BTreeMap<String, Root>>,
}

impl Roots {
    /// Reads `NAME=PATH` specifications; each path must be a readable directory.
    pub fn parse(specs: &[String]) -> Result<Self, RootError> {
        let mut roots = BTreeMap::new();
        for spec in specs.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
            let (name, path) = spec.split_once('=').ok_or_else(|| RootError::Malformed(spec.to_owned()))?;
            let (name, path) = (name.trim(), path.trim());
            let valid_name = !name.is_empty()
                && name.len() <= 64
                && name.chars().all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c));
            if !valid_name {
                return Err(RootError::BadName(name.to_owned()));
            }
            let canonical = Path::new(path).canonicalize().map_err(|e| RootError::NotADirectory {
                name: name.to_owned(),
                path: path.to_owned(),
                reason: e.to_string(),
            })?;
            if !canonical.is_dir() {
                return Err(RootError::NotADirectory {
                    name: name.to_owned(),
                    path: path.to_owned(),
                    reason: "not a directory".to_owned(),
                });
            }
            let root = Root { name: name.to_owned(), path: canonical };
            if roots.insert(name.to_owned(), root).is_some() {
                return Err(RootError::Duplicate(name.to_owned()));
            }
        }
        Ok(Self { roots: Arc::new(roots) })
    }

    pub fn get(&self, name: &str) -> Result<&Root, RootError> {
        self.roots.get(name).ok_or_else(|| RootError::UnknownRoot {
            name: name.to_owned(),
            known: if self.roots.is_empty() {
                "no roots (start it with --root NAME=PATH)".to_owned()
            } else {
                self.names().join(", ")
            },
        })
    }

    pub fn names(&self) -> Vec<String> {
        self.roots.keys().cloned().collect()
    }

    pub fn is_empty(&self) -> bool {
        self.roots.is_empty()
    }

    /// The root a tool's arguments name in `root`.
    pub fn of(&self, ctx: &ToolContext) -> Result<&Root, RootError> {
        self.get(ctx.str_arg("root").unwrap_or_default())
    }
}

/// The JSON Schema of a `root` argument: the names this worker knows, as an enum when there are
/// any, so that clients can offer them.
pub fn root_schema(roots: &Roots) -> Value {
    let names = roots.names();
    if names.is_empty() {
        json!({"type": "string", "description": "A root the operator named with --root NAME=PATH"})
    } else {
        json!({"type": "string", "enum": names, "description": "A root the operator named with --root NAME=PATH"})
    }
}

/// Offers each root as a resource (its file list) and its files through a resource template.
pub fn register(registry: &mut ToolRegistry, roots: &Roots) {
    for root in roots.roots.values() {
        let listed = root.clone();
        registry.register(FnTool::resource(
            json!({
                "uri": format!("conveyor://roots/{}/", root.name),
                "name": format!("root:{}", root.name),
                "title": format!("Files of root {}", root.name),
                "description": format!("The files tools may read in root `{}`, one path per line (ignore files honoured).", root.name),
                "mimeType": "text/plain"
            }),
            move |ctx| {
                let root = listed.clone();
                async move {
                    let uri = ctx.str_arg("uri").unwrap_or_default().to_owned();
                    let listing = tokio::task::spawn_blocking(move || {
                        let mut lines: Vec<String> =
                            root.files(&root.path).take(MAX_LISTED_FILES + 1).map(|p| root.relative(&p)).collect();
                        if lines.len() > MAX_LISTED_FILES {
                            lines.truncate(MAX_LISTED_FILES);
                            lines.push(format!("… more than {MAX_LISTED_FILES} files; read a narrower path"));
                        }
                        lines.join("\n")
                    })
                    .await
                    .unwrap_or_default();
                    ToolOutcome::Result(json!({"contents": [{"uri": uri, "mimeType": "text/plain", "text": listing}]}))
                }
            },
        ));
    }
    if roots.is_empty() {
        return;
    }
    let files = roots.clone();
    registry.register(FnTool::resource_template(
        json!({
            "uriTemplate": "conveyor://roots/{root}/{+path}",
            "name": "root-file",
            "title": "A file inside a root",
            "description": "Reads a text file of a root the operator named (up to 1 MiB).",
            "mimeType": "text/plain",
            "_meta": {"io.conveyor/completions": {"root": roots.names()}}
        }),
        move |ctx| {
            let roots = files.clone();
            async move { read_root_file(&roots, &ctx).await }
        },
    ));
}

async fn read_root_file(roots: &Roots, ctx: &ToolContext) -> ToolOutcome {
    let uri = ctx.str_arg("uri").unwrap_or_default().to_owned();
    let variable = |name: &str| {
        ctx.arguments.pointer(&format!("/variables/{name}")).and_then(Value::as_str).unwrap_or_default()
    };
    let root = match roots.get(variable("root")) {
        Ok(root) => root.clone(),
        Err(e) => return e.into_outcome(),
    };
    let path = match root.resolve(variable("path")) {
        Ok(path) => path,
        Err(e) => return e.into_outcome(),
    };
    let invalid = |message: String| ToolOutcome::Error(RpcError { code: -32602, message, data: None });
    match tokio::fs::metadata(&path).await {
        Ok(meta) if meta.is_file() && meta.len() <= MAX_RESOURCE_FILE_BYTES => {}
        Ok(meta) if meta.is_file() => {
            return invalid(format!(
                "`{}` is {} bytes; a resource read returns at most {MAX_RESOURCE_FILE_BYTES}",
                variable("path"),
                meta.len()
            ));
        }
        Ok(_) => {
            return invalid(format!(
                "`{}` is a directory; read conveyor://roots/{}/ for its files",
                variable("path"),
                root.name
            ));
        }
        Err(e) => return invalid(format!("cannot read `{}`: {e}", variable("path"))),
    }
    match tokio::fs::read(&path).await {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => ToolOutcome::Result(
                json!({"contents": [{"uri": uri, "mimeType": "text/plain", "text": text}]}),
            ),
            Err(e) => {
                use base64::Engine as _;
                let blob = base64::engine::general_purpose::STANDARD.encode(e.into_bytes());
                ToolOutcome::Result(
                    json!({"contents": [{"uri": uri, "mimeType": "application/octet-stream", "blob": blob}]}),
                )
            }
        },
        Err(e) => invalid(format!("cannot read `{}`: {e}", variable("path"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> (tempfile::TempDir, Roots) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let base = dir.path();
        std::fs::create_dir_all(base.join("repo/src")).expect("mkdir");
        std::fs::create_dir_all(base.join("repo/target")).expect("mkdir");
        std::fs::create_dir_all(base.join("outside")).expect("mkdir");
        std::fs::write(base.join("repo/src/lib.rs"), "fn main() {}").expect("write");
        std::fs::write(base.join("repo/target/big.o"), "junk").expect("write");
        std::fs::write(base.join("repo/.gitignore"), "target/\n").expect("write");
        std::fs::write(base.join("outside/secret.txt"), "secret").expect("write");
        std::os::unix::fs::symlink(base.join("outside"), base.join("repo/escape")).expect("symlink");
        std::os::unix::fs::symlink(base.join("repo/src/lib.rs"), base.join("repo/inside-link"))
            .expect("symlink");
        let roots = Roots::parse(&[format!("repo={}", base.join("repo").display())]).expect("roots");
        (dir, roots)
    }

    #[test]
    fn paths_that_leave_the_root_are_refused() {
        let (_dir, roots) = tree();
        let root = roots.get("repo").expect("root");
        assert!(root.resolve("src/lib.rs").is_ok());
        assert!(root.resolve("").is_ok());
        assert!(root.resolve("inside-link").is_ok(), "a link that stays inside is fine");
        assert!(matches!(root.resolve("/etc/passwd"), Err(RootError::Absolute(_))));
        assert!(matches!(root.resolve("../outside/secret.txt"), Err(RootError::Parent(_))));
        assert!(matches!(root.resolve("src/../../outside"), Err(RootError::Parent(_))));
        assert!(matches!(root.resolve("escape/secret.txt"), Err(RootError::Escapes { .. })));
        assert!(matches!(root.resolve("escape"), Err(RootError::Escapes { .. })));
        assert!(matches!(root.resolve("nope.rs"), Err(RootError::NotFound { .. })));
        assert!(matches!(root.resolve("a\0b"), Err(RootError::Nul(_))));
        assert!(matches!(roots.get("other"), Err(RootError::UnknownRoot { .. })));
    }

    #[test]
    fn walks_honour_ignore_files_and_never_follow_links() {
        let (_dir, roots) = tree();
        let root = roots.get("repo").expect("root");
        let files: Vec<String> = root.files(&root.path).map(|p| root.relative(&p)).collect();
        assert_eq!(files, vec!["src/lib.rs"], "target/ is ignored, links and hidden files skipped");
        let under = root.files_under(&["src".to_owned()]).expect("files");
        assert_eq!(under.len(), 1);
        let twice =
            root.files_under(&["src".to_owned(), "src/lib.rs".to_owned(), ".".to_owned()]).expect("files");
        assert_eq!(twice.len(), 1, "a file under two of the paths is listed once: {twice:?}");
    }

    #[test]
    fn bad_specifications_say_what_is_wrong() {
        assert!(matches!(Roots::parse(&["repo".to_owned()]), Err(RootError::Malformed(_))));
        assert!(matches!(Roots::parse(&["re po=/tmp".to_owned()]), Err(RootError::BadName(_))));
        assert!(matches!(Roots::parse(&["a=/no/such/dir".to_owned()]), Err(RootError::NotADirectory { .. })));
        assert!(matches!(
            Roots::parse(&["a=/tmp".to_owned(), "a=/tmp".to_owned()]),
            Err(RootError::Duplicate(_))
        ));
        assert!(Roots::parse(&[]).expect("no roots").is_empty());
    }
}
