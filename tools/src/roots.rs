//! Roots: the directories an operator lets tools read (`--root NAME=PATH`). A tool's arguments
//! name a root and a path relative to it; nothing outside a root is ever read.
//!
//! A relative path is refused when it is absolute, holds a `..` component, or resolves (through
//! symlinks) to a place outside its root. Walks honour `.gitignore`, `.ignore` and git's exclude
//! files (with the `ignore` crate, ripgrep's walker), skip hidden entries, and never follow a
//! symlink, so a link inside a root cannot lead a walk out of it.
//!
//! A path a caller names ([`Root::resolve`]: tool arguments, resource URIs, paths found in a
//! log) gets the walk's answer: it is refused when it, or the place it leads to through
//! symlinks, is hidden or is skipped by the walk's ignore rules, so that naming `.env` or a link
//! to it serves nothing a listing would not show. It is also refused unless it is a regular file
//! or a directory: opening a FIFO would block the worker. Paths from the operator's own tools
//! file (a working directory, a report under an ignored `build/`) only have to stay inside the
//! root ([`Root::resolve_configured`]).
//!
//! Each root is also an MCP resource (`conveyor://roots/NAME/`, its file list) and its files are
//! readable through the template `conveyor://roots/{root}/{+path}`.
//!
//! A tool reads a root only for a caller who may read it: the access policy's grant of the root's
//! resource is the grant of the root, and each call carries the roots its caller may read. A
//! tool looks the root of a call up with [`Roots::of`] or [`Roots::for_caller`], which refuse any
//! other (audited, and answered as an unknown root whose message names only the caller's roots);
//! [`Roots::get`] is for the operator's own names (a profile's root, checked when the worker
//! starts) and for resource reads, which gateways judge by the URI read. Definitions say which arguments name a root ([`with_root_argument`]), so that
//! gateways refuse such a call at the door and list only the caller's roots.

use std::collections::BTreeMap;
use std::os::unix::fs::FileTypeExt as _;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use conveyor_shared::model::{RpcError, ToolOutcome};
use conveyor_shared::roots::{RootUse, not_granted};
use ignore::Match;
use ignore::gitignore::GitignoreBuilder;
use serde_json::{Value, json};
use tokio::io::AsyncReadExt as _;

use conveyor_worker::tool::{FnTool, ToolContext, ToolRegistry};

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
    /// A root the caller may not read, or one this worker lacks when the caller may read only
    /// some: the same answer either way, naming only the caller's roots (`yours`).
    #[error("{}", not_granted(.name, .yours))]
    NotGranted { name: String, yours: Vec<String> },
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
    /// `at` is the hidden part, relative to the root: a component of the path, or of the place
    /// a symlink in it leads to.
    #[error(
        "path `{path}` is hidden (`{at}` starts with `.`); hidden files and files the root's ignore \
         files name are not served: pick one that conveyor://roots/{root}/ lists"
    )]
    Hidden { root: String, path: String, at: String },
    /// `at` is the part of the path the walk skips; `by` says which ignore file names it, when
    /// one of the root's own does.
    #[error(
        "path `{path}` is ignored by {by} of root `{root}` (it names `{at}`); hidden files and files \
         the root's ignore files name are not served: pick one that conveyor://roots/{root}/ lists"
    )]
    Ignored { root: String, path: String, at: String, by: String },
    #[error("path `{path}` is not a regular file or a directory (a {kind}); only files and folders are read")]
    NotRegular { path: String, kind: &'static str },
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
    /// The file or directory a caller names with `relative` inside the root, canonical; `""` and
    /// `"."` name the root itself. Besides [`Root::resolve_configured`]'s rules, the path is
    /// refused when a component of it or of its canonical form (symlinks resolved) is hidden,
    /// when a walk of the root would skip it or a directory above it (the walk's own ignore
    /// rules, asked of the walker itself), or when it is neither a regular file nor a directory.
    /// So a path is served by name exactly when a walk would list it (or, for a symlink, list
    /// what it leads to).
    pub fn resolve(&self, relative: &str) -> Result<PathBuf, RootError> {
        let named = self.lexical(relative)?;
        if let Some(at) = first_hidden(&named) {
            return Err(self.hidden(relative, &at));
        }
        let resolved = self.canonical(relative, &named)?;
        let canonical = resolved.strip_prefix(&self.path).unwrap_or(&resolved).to_path_buf();
        if let Some(at) = first_hidden(&canonical) {
            return Err(self.hidden(relative, &at));
        }
        // After canonicalizing, so that the type is that of the file itself and not of a link.
        let file_type = resolved
            .symlink_metadata()
            .map_err(|_| RootError::NotFound { root: self.name.clone(), path: relative.to_owned() })?
            .file_type();
        if !file_type.is_file() && !file_type.is_dir() {
            return Err(RootError::NotRegular { path: relative.to_owned(), kind: kind_of(file_type) });
        }
        // The name as given and the place it leads to: an ignored link to a served file and a
        // served link into an ignored folder are both refused.
        let mut targets = vec![self.path.join(&named)];
        if targets[0] != resolved {
            targets.push(resolved.clone());
        }
        for target in targets {
            if let Some(skipped) = self.skipped_by_walk(&target) {
                return Err(RootError::Ignored {
                    root: self.name.clone(),
                    path: relative.to_owned(),
                    at: self.relative(&skipped),
                    by: self.ignore_file_naming(&skipped),
                });
            }
        }
        Ok(resolved)
    }

    /// The file or directory `relative` names inside the root, canonical, for a path from the
    /// operator's own configuration (a working directory, a report file): it must not be
    /// absolute, hold `..` or lead out of the root through a symlink, and may be hidden, ignored
    /// or of any type. Never use it for a path a caller gave: that is [`Root::resolve`].
    pub fn resolve_configured(&self, relative: &str) -> Result<PathBuf, RootError> {
        let named = self.lexical(relative)?;
        self.canonical(relative, &named)
    }

    /// Whether `relative` names something inside the root ([`Root::resolve_configured`]'s rules),
    /// for a check that reads nothing, such as whether a document's link has a target.
    pub fn contains(&self, relative: &str) -> bool {
        self.resolve_configured(relative).is_ok()
    }

    /// `relative` checked without touching the disk: its normal components, relative.
    fn lexical(&self, relative: &str) -> Result<PathBuf, RootError> {
        if relative.contains('\0') {
            return Err(RootError::Nul(relative.to_owned()));
        }
        let candidate = Path::new(relative);
        if candidate.is_absolute() || relative.starts_with('\\') {
            return Err(RootError::Absolute(relative.to_owned()));
        }
        let mut named = PathBuf::new();
        for component in candidate.components() {
            match component {
                Component::ParentDir => return Err(RootError::Parent(relative.to_owned())),
                Component::Prefix(_) | Component::RootDir => {
                    return Err(RootError::Absolute(relative.to_owned()));
                }
                Component::CurDir => {}
                Component::Normal(part) => named.push(part),
            }
        }
        Ok(named)
    }

    /// The canonical form of `named` (relative to the root), which must lie inside the root.
    fn canonical(&self, relative: &str, named: &Path) -> Result<PathBuf, RootError> {
        let joined = self.path.join(named);
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

    fn hidden(&self, path: &str, at: &Path) -> RootError {
        RootError::Hidden { root: self.name.clone(), path: path.to_owned(), at: self.relative(at) }
    }

    /// The first of `target` (inside the root, not canonical) and the directories above it that
    /// a walk of the whole root skips; `None` when the walk reaches `target`, or a symlink on
    /// the way to it (a walk stops at a link; where it leads is checked as a path of its own).
    /// The walker itself answers, pruned to the entries on the way, so that every rule it has
    /// (the precedence of nested `.ignore` and `.gitignore` files, `!` whitelists, git's exclude
    /// and global files, ignore files above the root) holds for a named path too.
    fn skipped_by_walk(&self, target: &Path) -> Option<PathBuf> {
        if target == self.path {
            return None;
        }
        let wanted = target.to_path_buf();
        let mut builder = walker(&self.path);
        builder.filter_entry(move |entry| wanted.starts_with(entry.path()));
        let mut deepest = self.path.clone();
        for entry in builder.build().filter_map(Result::ok) {
            if entry.depth() == 0 {
                continue;
            }
            if entry.path() == target || entry.path_is_symlink() {
                return None;
            }
            deepest = entry.into_path();
        }
        let below = target.strip_prefix(&deepest).ok()?.components().next()?;
        Some(deepest.join(below))
    }

    /// Which of the root's ignore files names `skipped`, for the message: the walker's order
    /// (every `.ignore` before any `.gitignore`, the deepest first), read again for one path.
    fn ignore_file_naming(&self, skipped: &Path) -> String {
        const UNNAMED: &str = "the walk (git's exclude or global ignore file, or a directory it cannot list)";
        let is_dir = skipped.is_dir();
        for name in [".ignore", ".gitignore"] {
            // Files above the root count in the walker's order too, but are not named.
            for dir in skipped.ancestors().skip(1) {
                let file = dir.join(name);
                if !file.is_file() {
                    continue;
                }
                let mut builder = GitignoreBuilder::new(dir);
                // A line that does not parse is dropped, as the walker drops it.
                let _ = builder.add(&file);
                let Ok(rules) = builder.build() else { continue };
                match rules.matched(skipped, is_dir) {
                    Match::Ignore(_) if dir.starts_with(&self.path) => {
                        return format!("`{}`", self.relative(&file));
                    }
                    Match::Ignore(_) => return format!("a `{name}` file above the root"),
                    // A whitelist here outranks every later file: something else skipped it.
                    Match::Whitelist(_) => return UNNAMED.to_owned(),
                    Match::None => {}
                }
            }
        }
        UNNAMED.to_owned()
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
        walker(start)
            .build()
            .filter_map(Result::ok)
            .filter(|entry| entry.file_type().is_some_and(|t| t.is_file()))
            .map(ignore::DirEntry::into_path)
    }

    /// The files under each of `paths` (relative to the root; all of it when empty), each once,
    /// walked lazily: a tree of any size costs the memory of one directory at a time. A path
    /// [`Root::resolve`] refuses (outside the root, hidden, ignored) fails before anything is
    /// walked: a walk that starts at a folder does not judge the folder itself.
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

    /// Every folder, file and symlink a walk of the whole root reaches (never below a link), in
    /// a stable order, the root itself first: what a copy of the root takes. Entries the walk
    /// cannot read are left out, as [`Root::files`] leaves them out.
    pub fn entries(&self) -> impl Iterator<Item = ignore::DirEntry> + use<> {
        walker(&self.path).build().filter_map(Result::ok)
    }

    /// [`Root::walk_under`], collected.
    pub fn files_under(&self, paths: &[String]) -> Result<Vec<PathBuf>, RootError> {
        Ok(self.walk_under(paths)?.collect())
    }
}

/// The walk behind every listing and every check of a named path, so that both give one answer.
/// The ignore files of the directories above `start` (the root's among them) apply through
/// `parents`, each relative to its own directory, so a walk that starts below the root skips
/// what a walk of the whole root skips there.
fn walker(start: &Path) -> ignore::WalkBuilder {
    let mut builder = ignore::WalkBuilder::new(start);
    builder
        .follow_links(false)
        .require_git(false)
        .hidden(true)
        .parents(true)
        .sort_by_file_path(|a, b| a.cmp(b));
    builder
}

/// `path` up to its first hidden component (a name starting with `.`), if it has one; the
/// walker's test of a hidden entry.
fn first_hidden(path: &Path) -> Option<PathBuf> {
    let mut prefix = PathBuf::new();
    for component in path.components() {
        prefix.push(component);
        if let Component::Normal(name) = component
            && name.as_encoded_bytes().first() == Some(&b'.')
        {
            return Some(prefix);
        }
    }
    None
}

/// What a file that is neither a regular file nor a directory is, for a message.
fn kind_of(file_type: std::fs::FileType) -> &'static str {
    if file_type.is_fifo() {
        "FIFO"
    } else if file_type.is_socket() {
        "socket"
    } else if file_type.is_block_device() {
        "block device"
    } else if file_type.is_char_device() {
        "character device"
    } else if file_type.is_symlink() {
        "symlink"
    } else {
        "special file"
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

    /// The root `name`, whoever asks: for the operator's own names (a profile's root). A root a
    /// call names is looked up with [`Roots::for_caller`].
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

    /// The root a tool's arguments name in `root`, for the call's caller ([`Roots::for_caller`]).
    pub fn of(&self, ctx: &ToolContext) -> Result<&Root, RootError> {
        self.for_caller(ctx, ctx.str_arg("root").unwrap_or_default())
    }

    /// The root `name`, when the call's caller may read it. Another root is refused like an
    /// unknown one, naming only the caller's roots; a refusal of a root this worker has is
    /// written to the audit log.
    pub fn for_caller(&self, ctx: &ToolContext, name: &str) -> Result<&Root, RootError> {
        let found = self.granted(ctx.granted_roots(), name);
        if matches!(found, Err(RootError::NotGranted { .. })) && self.roots.contains_key(name) {
            ctx.audit_denied(name, "a tool was asked to read a root the access policy does not grant");
        }
        found
    }

    /// The root `name` for a caller who may read `granted` (`None`: every root).
    pub fn granted(&self, granted: Option<&[String]>, name: &str) -> Result<&Root, RootError> {
        let Some(granted) = granted else { return self.get(name) };
        match self.roots.get(name) {
            Some(root) if granted.iter().any(|g| g == name) => Ok(root),
            _ => {
                Err(RootError::NotGranted { name: name.to_owned(), yours: self.names_granted(Some(granted)) })
            }
        }
    }

    /// The names of this worker's roots a caller who may read `granted` may read.
    pub fn names_granted(&self, granted: Option<&[String]>) -> Vec<String> {
        self.roots.keys().filter(|name| granted.is_none_or(|g| g.contains(name))).cloned().collect()
    }

    /// The names of this worker's roots the call's caller may read.
    pub fn names_for(&self, ctx: &ToolContext) -> Vec<String> {
        self.names_granted(ctx.granted_roots())
    }
}

/// `definition` declaring that its argument `root` names a root ([`RootUse`]): gateways then
/// refuse a call naming a root its caller may not read, and list only the caller's roots.
pub fn with_root_argument(definition: Value) -> Value {
    RootUse::argument("root").declared_in(definition)
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
        with_root_argument(json!({
            "uriTemplate": "conveyor://roots/{root}/{+path}",
            "name": "root-file",
            "title": "A file inside a root",
            "description": "Reads a text file of a root the operator named (up to 1 MiB).",
            "mimeType": "text/plain",
            "_meta": {"io.conveyor/completions": {"root": roots.names()}}
        })),
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
    // A resource read is judged by the gateway by the URI read, which may be finer than a root
    // (a rule that grants one file of it): the root's name alone is not the grant here.
    let root = match roots.get(variable("root")) {
        Ok(root) => root.clone(),
        Err(e) => return e.into_outcome(),
    };
    let path = match root.resolve(variable("path")) {
        Ok(path) => path,
        Err(e) => return e.into_outcome(),
    };
    let invalid = |message: String| ToolOutcome::Error(RpcError { code: -32602, message, data: None });
    if path.is_dir() {
        return invalid(format!(
            "`{}` is a directory; read conveyor://roots/{}/ for its files",
            variable("path"),
            root.name
        ));
    }
    match read_regular_file(&path).await {
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
        Err(why) => invalid(format!("cannot read `{}`: {why}", variable("path"))),
    }
}

/// The bytes of the regular file at `path`, at most [`MAX_RESOURCE_FILE_BYTES`]. The path was
/// checked, but it may have been swapped since: opened without blocking (a FIFO's open waits for
/// a writer) and without following a link, the handle's own type decides whether it is read.
async fn read_regular_file(path: &Path) -> Result<Vec<u8>, String> {
    let mut file = tokio::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOFOLLOW)
        .open(path)
        .await
        .map_err(|e| e.to_string())?;
    let meta = file.metadata().await.map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err(format!("it is not a regular file (a {})", kind_of(meta.file_type())));
    }
    if meta.len() > MAX_RESOURCE_FILE_BYTES {
        return Err(format!(
            "it is {} bytes; a resource read returns at most {MAX_RESOURCE_FILE_BYTES}",
            meta.len()
        ));
    }
    let mut bytes = Vec::new();
    // The file may grow after the size was read.
    (&mut file).take(MAX_RESOURCE_FILE_BYTES + 1).read_to_end(&mut bytes).await.map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_RESOURCE_FILE_BYTES {
        return Err(format!(
            "it grew past {MAX_RESOURCE_FILE_BYTES} bytes, the most a resource read returns"
        ));
    }
    Ok(bytes)
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
    fn a_caller_gets_only_the_roots_it_may_read_and_hears_of_no_other() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        for name in ["sample", "vault"] {
            std::fs::create_dir_all(dir.path().join(name)).expect("mkdir");
        }
        let roots = Roots::parse(&[
            format!("sample={}", dir.path().join("sample").display()),
            format!("vault={}", dir.path().join("vault").display()),
        ])
        .expect("roots");
        let alice = ["sample".to_owned(), "elsewhere".to_owned()];
        assert_eq!(roots.granted(Some(&alice), "sample").expect("hers").name, "sample");
        let refused = roots.granted(Some(&alice), "vault").expect_err("not hers");
        assert_eq!(refused.to_string(), "no root named `vault` that you may read; your roots: sample");
        let unknown = roots.granted(Some(&alice), "nope").expect_err("unknown");
        assert_eq!(unknown.to_string(), "no root named `nope` that you may read; your roots: sample");
        assert!(
            matches!(roots.granted(Some(&alice), "elsewhere"), Err(RootError::NotGranted { .. })),
            "granted, but another worker's: the same answer, naming only hers"
        );
        assert_eq!(
            roots.granted(Some(&[]), "sample").expect_err("none").to_string().rsplit(": ").next(),
            Some("none")
        );
        assert_eq!(roots.granted(None, "vault").expect("every root").name, "vault");
        assert!(matches!(roots.granted(None, "nope"), Err(RootError::UnknownRoot { .. })));
        assert_eq!(roots.names_granted(Some(&alice)), ["sample"]);
        assert_eq!(roots.names_granted(None), ["sample", "vault"]);
        assert_eq!(
            refused.into_outcome(),
            ToolOutcome::Error(RpcError {
                code: -32602,
                message: "no root named `vault` that you may read; your roots: sample".to_owned(),
                data: None
            })
        );
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

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }

    /// A root with nested ignore files of both kinds, whitelists, git's exclude file, an ignore
    /// file above the root and hidden entries; no symlinks.
    fn ignored_tree() -> (tempfile::TempDir, Roots) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let base = dir.path();
        let repo = base.join("repo");
        write(&base.join(".ignore"), "from-above.md\n");
        let files = [
            (".gitignore", "*.gen\nbuild/\n!keep.gen\n/anchored.txt\n"),
            (".ignore", "!sub/wanted.out\nscratch/\n"),
            (".git/info/exclude", "excluded.txt\n"),
            (".git/config", "[remote]\n"),
            (".env", "API_KEY=secret\n"),
            (".github/workflows/ci.yml", "on: push\n"),
            ("src/lib.rs", "fn lib() {}\n"),
            ("src/made.gen", "generated\n"),
            ("src/keep.gen", "kept\n"),
            ("src/anchored.txt", "only the root's is ignored\n"),
            ("src/excluded.txt", "excluded\n"),
            ("anchored.txt", "ignored\n"),
            ("excluded.txt", "excluded\n"),
            ("from-above.md", "ignored from above the root\n"),
            ("build/out.bin", "junk\n"),
            ("build/keep.gen", "a whitelist cannot reach into an ignored folder\n"),
            ("scratch/notes.md", "scratch\n"),
            ("sub/.gitignore", "*.out\n!debug.gen\ndata/\n"),
            ("sub/.ignore", "local.md\n"),
            ("sub/wanted.out", "the root's .ignore outranks sub/.gitignore\n"),
            ("sub/other.out", "ignored\n"),
            ("sub/debug.gen", "the deeper whitelist wins\n"),
            ("sub/local.md", "ignored\n"),
            ("sub/data/table.md", "ignored folder\n"),
            ("sub/.hidden/code.rs", "hidden folder\n"),
            ("sub/deep/.gitignore", "*.md\n!readme.md\n"),
            ("sub/deep/readme.md", "whitelisted\n"),
            ("sub/deep/notes.md", "ignored\n"),
            ("sub/deep/code.rs", "fn deep() {}\n"),
        ];
        for (path, text) in files {
            write(&repo.join(path), text);
        }
        let roots = Roots::parse(&[format!("repo={}", repo.display())]).expect("roots");
        (dir, roots)
    }

    /// Every file and folder under `dir`, relative to `root`, found without the walker.
    fn everything(root: &Root, dir: &Path, found: &mut Vec<(String, bool)>) {
        for entry in std::fs::read_dir(dir).expect("read_dir") {
            let path = entry.expect("entry").path();
            let is_dir = path.is_dir();
            found.push((root.relative(&path), is_dir));
            if is_dir {
                everything(root, &path, found);
            }
        }
    }

    #[test]
    fn a_path_is_served_by_name_exactly_when_the_walk_lists_it() {
        let (_dir, roots) = ignored_tree();
        let root = roots.get("repo").expect("root");
        let walked: Vec<String> = root.files(&root.path).map(|p| root.relative(&p)).collect();
        assert_eq!(
            walked,
            vec![
                "src/anchored.txt",
                "src/keep.gen",
                "src/lib.rs",
                "sub/debug.gen",
                "sub/deep/code.rs",
                "sub/deep/readme.md",
                "sub/wanted.out",
            ],
            "the tree exercises each rule of the walk"
        );
        let reached: Vec<String> = walker(&root.path)
            .build()
            .filter_map(Result::ok)
            .filter(|e| e.depth() > 0)
            .map(|e| root.relative(e.path()))
            .collect();
        let mut all = Vec::new();
        everything(root, &root.path, &mut all);
        assert!(all.len() > reached.len() + 20, "most of the tree is skipped: {all:?}");
        for (path, is_dir) in &all {
            let by_name = root.resolve(path);
            if reached.contains(path) {
                assert!(by_name.is_ok(), "the walk lists `{path}` but its name is refused: {by_name:?}");
            } else {
                assert!(
                    matches!(by_name, Err(RootError::Hidden { .. } | RootError::Ignored { .. })),
                    "the walk skips `{path}` but its name gives {by_name:?}"
                );
            }
            // A walk that starts at a folder lists what the walk of the whole root lists there.
            if *is_dir && by_name.is_ok() {
                let under: Vec<String> = root
                    .files_under(std::slice::from_ref(path))
                    .expect("files")
                    .iter()
                    .map(|p| root.relative(p))
                    .collect();
                let expected: Vec<String> =
                    walked.iter().filter(|w| w.starts_with(&format!("{path}/"))).cloned().collect();
                assert_eq!(under, expected, "the files under `{path}`");
            }
        }
    }

    #[test]
    fn refusals_say_what_hides_or_ignores_the_path() {
        let (_dir, roots) = ignored_tree();
        let root = roots.get("repo").expect("root");
        let ignored_by = |path: &str| match root.resolve(path) {
            Err(RootError::Ignored { at, by, .. }) => (at, by),
            other => panic!("`{path}` gave {other:?}"),
        };
        assert_eq!(ignored_by("build/keep.gen"), ("build".to_owned(), "`.gitignore`".to_owned()));
        assert_eq!(ignored_by("sub/local.md"), ("sub/local.md".to_owned(), "`sub/.ignore`".to_owned()));
        assert_eq!(
            ignored_by("sub/deep/notes.md"),
            ("sub/deep/notes.md".to_owned(), "`sub/deep/.gitignore`".to_owned())
        );
        assert_eq!(ignored_by("scratch"), ("scratch".to_owned(), "`.ignore`".to_owned()));
        assert_eq!(ignored_by("from-above.md").1, "a `.ignore` file above the root");
        assert!(ignored_by("excluded.txt").1.contains("git's exclude"));
        let message = root.resolve("build/out.bin").expect_err("ignored").to_string();
        assert!(message.contains("ignored by `.gitignore` of root `repo`"), "{message}");
        assert!(message.contains("conveyor://roots/repo/"), "says what to do instead: {message}");
        let hidden = root.resolve(".git/config").expect_err("hidden");
        assert!(matches!(&hidden, RootError::Hidden { at, .. } if at == ".git"), "{hidden:?}");
        assert!(hidden.to_string().starts_with("path `.git/config` is hidden"), "{hidden}");
        // Existence is not asked of a hidden name.
        assert!(matches!(root.resolve(".no-such-file"), Err(RootError::Hidden { .. })));
        assert!(matches!(root.resolve("./.env"), Err(RootError::Hidden { .. })));
        assert!(root.resolve("./src/lib.rs").is_ok());
    }

    #[test]
    fn research_paths_that_are_hidden_or_ignored_are_refused_before_any_walk() {
        let (_dir, roots) = ignored_tree();
        let root = roots.get("repo").expect("root");
        assert!(matches!(root.files_under(&[".env".to_owned()]), Err(RootError::Hidden { .. })));
        assert!(matches!(root.files_under(&[".github".to_owned()]), Err(RootError::Hidden { .. })));
        assert!(matches!(
            root.files_under(&["src".to_owned(), "build".to_owned()]),
            Err(RootError::Ignored { .. })
        ));
        assert!(matches!(
            root.walk_under(&["sub/data/table.md".to_owned()]).err(),
            Some(RootError::Ignored { .. })
        ));
        assert_eq!(root.files_under(&["src".to_owned()]).expect("files").len(), 3);
    }

    #[test]
    fn a_symlink_does_not_get_around_the_rules() {
        let (_dir, roots) = ignored_tree();
        let root = roots.get("repo").expect("root");
        let link = |target: &str, name: &str| {
            std::os::unix::fs::symlink(root.path.join(target), root.path.join(name)).expect("symlink");
        };
        link(".env", "notes.txt");
        link(".git", "git");
        link("build", "artifacts");
        link("src/lib.rs", "alias.rs");
        link("src/lib.rs", "anchored.txt-link");
        link("src/lib.rs", ".hidden-alias.rs");
        link("src/lib.rs", "made-alias.gen");
        let refused_at = |path: &str| match root.resolve(path) {
            Err(RootError::Hidden { at, .. } | RootError::Ignored { at, .. }) => at,
            other => panic!("`{path}` gave {other:?}"),
        };
        assert_eq!(refused_at("notes.txt"), ".env", "a link to a hidden file");
        assert_eq!(refused_at("git/config"), ".git", "through a link to a hidden folder");
        assert_eq!(refused_at("artifacts/out.bin"), "build", "through a link to an ignored folder");
        assert_eq!(refused_at("artifacts"), "build");
        assert_eq!(refused_at(".hidden-alias.rs"), ".hidden-alias.rs", "a hidden link to a served file");
        assert_eq!(refused_at("made-alias.gen"), "made-alias.gen", "an ignored link to a served file");
        assert!(root.resolve("alias.rs").is_ok(), "a link to a served file is served");
        assert!(root.resolve("anchored.txt-link").is_ok());
        assert_eq!(root.resolve("alias.rs").expect("alias"), root.path.join("src/lib.rs"));
    }

    #[test]
    fn fifos_and_sockets_are_refused() {
        let (_dir, roots) = ignored_tree();
        let root = roots.get("repo").expect("root");
        let fifo = root.path.join("src/pipe");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo runs");
        assert!(made.success(), "mkfifo {}", fifo.display());
        let _socket = std::os::unix::net::UnixListener::bind(root.path.join("src/socket")).expect("a socket");
        std::os::unix::fs::symlink(&fifo, root.path.join("src/pipe-link")).expect("symlink");
        assert_eq!(
            root.resolve("src/pipe"),
            Err(RootError::NotRegular { path: "src/pipe".to_owned(), kind: "FIFO" })
        );
        assert!(matches!(root.resolve("src/pipe-link"), Err(RootError::NotRegular { kind: "FIFO", .. })));
        assert!(matches!(root.resolve("src/socket"), Err(RootError::NotRegular { kind: "socket", .. })));
        let message = root.resolve("src/pipe").expect_err("a FIFO").to_string();
        assert_eq!(
            message,
            "path `src/pipe` is not a regular file or a directory (a FIFO); only files and folders are read"
        );
        let walked: Vec<String> = root.files(&root.path.join("src")).map(|p| root.relative(&p)).collect();
        assert!(!walked.iter().any(|p| p.contains("pipe") || p.contains("socket")), "{walked:?}");
    }

    #[tokio::test]
    async fn reading_a_file_swapped_for_a_fifo_does_not_block() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let fifo = dir.path().join("pipe");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo runs");
        assert!(made.success());
        let read = tokio::time::timeout(std::time::Duration::from_secs(10), read_regular_file(&fifo))
            .await
            .expect("the read returns without a writer");
        assert_eq!(read, Err("it is not a regular file (a FIFO)".to_owned()));
        let file = dir.path().join("text.txt");
        std::fs::write(&file, "hello").expect("write");
        assert_eq!(read_regular_file(&file).await, Ok(b"hello".to_vec()));
        std::os::unix::fs::symlink(&file, dir.path().join("link")).expect("symlink");
        assert!(
            read_regular_file(&dir.path().join("link")).await.is_err(),
            "a link swapped in is not followed"
        );
    }

    #[test]
    fn configured_paths_only_have_to_stay_inside_the_root() {
        let (_dir, roots) = ignored_tree();
        let root = roots.get("repo").expect("root");
        assert_eq!(root.resolve_configured("build/out.bin"), Ok(root.path.join("build/out.bin")));
        assert!(root.resolve_configured(".github/workflows").is_ok());
        assert!(root.resolve_configured(".").is_ok());
        assert!(matches!(root.resolve_configured("../repo"), Err(RootError::Parent(_))));
        assert!(matches!(root.resolve_configured("/etc"), Err(RootError::Absolute(_))));
        assert!(matches!(root.resolve_configured("build/nothing"), Err(RootError::NotFound { .. })));
        assert!(root.contains(".env") && root.contains("sub/data/table.md") && root.contains("src"));
        assert!(!root.contains("missing.md") && !root.contains("../repo/src"));
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
