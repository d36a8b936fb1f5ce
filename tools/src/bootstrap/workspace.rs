//! Where one iteration of a bootstrap runs: the root itself, or a fresh copy of it under the
//! profile's scratch directory (`{scratch_dir}/conveyor-bootstrap/{task}/iteration-{n}`).
//!
//! The bootstrap node makes the copy and runs the bootstrap in it, then leaves a `.ready` marker
//! beside it. A check node that finds no marker (it runs on another machine, or the bootstrap
//! node's worker died after its work was recorded) makes its own copy under a temporary name,
//! runs the same bootstrap there, and renames it into place; the first rename wins.
//!
//! A copy takes what a walk of the root lists, as every read of a root does: hidden entries,
//! what the root's ignore files name, and links that lead out of the root or to something the
//! walk would not list are left out. Before the first copy of a task, its folder gets a marker
//! ([`MARKER`]) naming the task and the deployment. The copies go when the iteration ends (the
//! learnings node), when the loop ends (the report), when a node finds its task cancelled, and
//! otherwise by [`sweep`], which the workers serving the bootstrap queue run at start and every
//! [`SWEEP_EVERY`]: it removes each folder marked by this deployment whose task is no longer live
//! (settled, expired or unknown), such as one a killed worker left. A folder without the marker,
//! or marked by another deployment sharing the directory, is never touched.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::operator_config::{BootstrapProfile, Workspace};
use crate::roots::Root;
use conveyor_worker::tool::ChoreContext;

/// Most files a scratch copy takes.
const MAX_COPY_FILES: usize = 100_000;
/// Most bytes a scratch copy takes.
const MAX_COPY_BYTES: u64 = 2 * 1024 * 1024 * 1024;
/// The folder under a profile's `scratch_dir` that holds every task's copies.
const SCRATCH_FOLDER: &str = "conveyor-bootstrap";
/// The marker in a task's folder that says whose it is.
pub const MARKER: &str = "conveyor-scratch.json";
/// How often the workers of the bootstrap queue sweep what dead tasks left.
pub const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// Whose a task's scratch folder is: what its marker holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    pub task: String,
    pub deployment: String,
}

/// The directory an iteration runs in.
#[derive(Debug, Clone)]
pub struct Place {
    pub dir: PathBuf,
    /// `None` for the root itself, which is never copied or removed.
    ready: Option<PathBuf>,
}

impl Place {
    pub fn of(profile: &BootstrapProfile, root: &Path, task_id: &str, iteration: u64) -> Self {
        match &profile.workspace {
            Workspace::Root => Place { dir: root.to_path_buf(), ready: None },
            Workspace::Scratch(base) => {
                let task = task_folder(base, task_id);
                Place {
                    dir: task.join(format!("iteration-{iteration}")),
                    ready: Some(task.join(format!("iteration-{iteration}.ready"))),
                }
            }
        }
    }

    pub fn is_scratch(&self) -> bool {
        self.ready.is_some()
    }

    /// Whether the iteration's bootstrap has run here (always, for the root itself).
    pub fn is_ready(&self) -> bool {
        self.ready.as_ref().is_none_or(|marker| marker.exists() && self.dir.is_dir())
    }

    /// A fresh copy of `root` at the place (what an earlier attempt left is removed first), in
    /// a task folder marked as `owner`'s. Stops early, with an error, once `cancel` fires.
    pub fn copy_fresh(&self, root: &Root, owner: &Owner, cancel: &CancellationToken) -> Result<(), String> {
        if !self.is_scratch() {
            return Ok(());
        }
        mark(&self.dir, owner)?;
        remove(&self.dir);
        copy_tree(root, &self.dir, cancel)
    }

    pub fn mark_ready(&self) {
        if let Some(marker) = &self.ready {
            let _ = std::fs::write(marker, b"");
        }
    }

    /// A copy under a name of `node`'s own, to bootstrap there and [`Place::adopt`] after.
    pub fn private_copy(
        &self,
        root: &Root,
        node: &str,
        owner: &Owner,
        cancel: &CancellationToken,
    ) -> Result<Place, String> {
        let dir = self.dir.with_file_name(format!(
            "{}.{}",
            self.dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            node
        ));
        mark(&dir, owner)?;
        remove(&dir);
        copy_tree(root, &dir, cancel)?;
        Ok(Place { dir, ready: None })
    }

    /// Moves a private copy into place, unless another node's got there first.
    pub fn adopt(&self, private: Place) {
        if std::fs::rename(&private.dir, &self.dir).is_err() {
            remove(&private.dir);
        }
        self.mark_ready();
    }
}

fn task_folder(base: &Path, task_id: &str) -> PathBuf {
    let safe: String = task_id.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
    base.join(SCRATCH_FOLDER).join(safe)
}

/// Writes the marker of the task folder that holds `copy`, before anything is copied into it,
/// so that no copy exists that a sweep cannot tell the owner of.
fn mark(copy: &Path, owner: &Owner) -> Result<(), String> {
    let Some(folder) = copy.parent() else { return Ok(()) };
    std::fs::create_dir_all(folder)
        .map_err(|e| format!("cannot create the scratch folder {}: {e}", folder.display()))?;
    let marker = folder.join(MARKER);
    if read_marker(folder).as_ref() == Some(owner) {
        return Ok(());
    }
    let text = serde_json::to_string(owner).unwrap_or_default();
    std::fs::write(&marker, text)
        .map_err(|e| format!("cannot mark the scratch folder {}: {e}", folder.display()))
}

fn read_marker(folder: &Path) -> Option<Owner> {
    let text = std::fs::read_to_string(folder.join(MARKER)).ok()?;
    serde_json::from_str(&text).ok()
}

/// Removes every copy a task made under the profile's scratch directory.
pub fn remove_task(profile: &BootstrapProfile, task_id: &str) {
    if let Workspace::Scratch(base) = &profile.workspace {
        remove(&task_folder(base, task_id));
    }
}

/// Removes one iteration's copy.
pub fn remove_place(place: &Place) {
    if let Some(marker) = &place.ready {
        remove(&place.dir);
        let _ = std::fs::remove_file(marker);
    }
}

fn remove(dir: &Path) {
    if dir.symlink_metadata().is_ok() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// The marked task folders under each scratch directory of `bases`, with their marker.
pub fn marked_folders(bases: &[PathBuf]) -> Vec<(PathBuf, Owner)> {
    let mut found = Vec::new();
    for base in bases {
        let Ok(entries) = std::fs::read_dir(base.join(SCRATCH_FOLDER)) else { continue };
        for entry in entries.filter_map(Result::ok) {
            if entry.file_type().is_ok_and(|t| t.is_dir())
                && let Some(owner) = read_marker(&entry.path())
            {
                found.push((entry.path(), owner));
            }
        }
    }
    found
}

/// Removes the folders of `marked` that `deployment` marked and whose task `is_live` says is
/// over (`Some(false)`); `None` (the store did not answer) keeps the folder for the next sweep.
/// Returns how many were removed.
pub async fn sweep<F, Fut>(marked: Vec<(PathBuf, Owner)>, deployment: &str, is_live: F) -> usize
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Option<bool>>,
{
    let mut removed = 0;
    for (folder, owner) in marked.into_iter().filter(|(_, owner)| owner.deployment == deployment) {
        if is_live(owner.task.clone()).await != Some(false) {
            continue;
        }
        tracing::info!(task = %owner.task, folder = %folder.display(), "removing the scratch copies of a task that is over");
        if tokio::task::spawn_blocking(move || remove(&folder)).await.is_ok() {
            removed += 1;
        }
    }
    removed
}

/// [`sweep`] as the chore of the workers that serve the bootstrap queue: this deployment's
/// folders under `bases`, each task asked of the store.
pub async fn sweep_chore(bases: &Arc<Vec<PathBuf>>, cx: &ChoreContext) {
    let scanned = bases.clone();
    let marked = tokio::task::spawn_blocking(move || marked_folders(&scanned)).await.unwrap_or_default();
    if marked.is_empty() {
        // Nothing on disk: the store is not asked.
        return;
    }
    let deployment = match cx.deployment_id().await {
        Ok(deployment) => deployment,
        Err(e) => {
            tracing::debug!(error = %e, "no sweep of scratch copies now: the store did not answer");
            return;
        }
    };
    sweep(marked, &deployment, |task| {
        let cx = cx.clone();
        async move { cx.task_is_live(&task).await.ok() }
    })
    .await;
}

/// Copies what a walk of `root` lists into `to` (created): folders, files (keeping their
/// modes) and links that lead to something the walk lists; an absolute link into the root is
/// pointed at the copy, so that writing through it does not reach the root.
fn copy_tree(root: &Root, to: &Path, cancel: &CancellationToken) -> Result<(), String> {
    // Inside its marked task folder, which is not made again here.
    std::fs::create_dir(to).map_err(|e| format!("cannot create the scratch copy {}: {e}", to.display()))?;
    let (mut files, mut bytes) = (0usize, 0u64);
    for entry in root.entries() {
        if cancel.is_cancelled() {
            return Err("the copy was stopped: the node was cancelled".to_owned());
        }
        let Ok(relative) = entry.path().strip_prefix(&root.path) else { continue };
        if relative.as_os_str().is_empty() {
            continue;
        }
        let target = to.join(relative);
        let Some(kind) = entry.file_type() else { continue };
        let failed = |e: std::io::Error| format!("cannot copy {}: {e}", relative.display());
        if kind.is_dir() {
            // Not `create_dir_all`: a folder removed under the copy (by a sweep of a task that
            // is over) is not made again without its marker.
            std::fs::create_dir(&target).map_err(failed)?;
        } else if kind.is_symlink() {
            let Ok(resolved) = root.resolve(&root.relative(entry.path())) else { continue };
            let link = std::fs::read_link(entry.path()).map_err(failed)?;
            let link = match resolved.strip_prefix(&root.path) {
                Ok(inside) if link.is_absolute() => to.join(inside),
                _ => link,
            };
            std::os::unix::fs::symlink(link, &target).map_err(failed)?;
        } else if kind.is_file() {
            files += 1;
            bytes += std::fs::copy(entry.path(), &target).map_err(failed)?;
            if files > MAX_COPY_FILES || bytes > MAX_COPY_BYTES {
                return Err(format!(
                    "the root holds more than {MAX_COPY_FILES} files or {} GiB, too much for a scratch copy per iteration; give the profile workspace = \"root\"",
                    MAX_COPY_BYTES >> 30
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roots::Roots;
    use std::os::unix::fs::PermissionsExt;

    fn profile(scratch: &Path) -> BootstrapProfile {
        BootstrapProfile {
            name: "p".into(),
            description: None,
            root: "r".into(),
            workspace: Workspace::Scratch(scratch.to_path_buf()),
            timeout_s: 1,
            env: vec![],
            writable: false,
            history: 1,
            max_output_bytes: 1,
        }
    }

    fn owner(task: &str) -> Owner {
        Owner { task: task.into(), deployment: "d1".into() }
    }

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }

    /// Every path under `dir`, relative, sorted.
    fn listing(dir: &Path) -> Vec<String> {
        let mut found = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(at) = stack.pop() {
            for entry in std::fs::read_dir(&at).expect("read_dir").map(|e| e.expect("entry")) {
                let path = entry.path();
                found.push(path.strip_prefix(dir).expect("under").to_string_lossy().into_owned());
                if entry.file_type().expect("type").is_dir() {
                    stack.push(path);
                }
            }
        }
        found.sort();
        found
    }

    #[test]
    fn a_scratch_copy_takes_what_the_walk_lists_keeping_modes_and_links() {
        let base = tempfile::tempdir().expect("root");
        let outside = base.path().join("outside");
        write(&outside.join("secret.txt"), "outside\n");
        let repo = base.path().join("repo");
        write(&repo.join(".git/HEAD"), "x");
        write(&repo.join("run.sh"), "#!/bin/sh\n");
        std::fs::set_permissions(repo.join("run.sh"), std::fs::Permissions::from_mode(0o755)).expect("chmod");
        write(&repo.join(".env"), "API_TOKEN=real\n");
        write(&repo.join(".env.example"), "API_TOKEN=\n");
        write(&repo.join(".gitignore"), "node_modules/\nlocal.toml\n");
        write(&repo.join("node_modules/dep/index.js"), "x");
        write(&repo.join("config/local.toml"), "password = \"real\"\n");
        write(&repo.join("config/app.toml"), "port = 1\n");
        let link =
            |target: &Path, name: &str| std::os::unix::fs::symlink(target, repo.join(name)).expect("symlink");
        link(Path::new("run.sh"), "link");
        link(&repo.join("config"), "abs-config");
        link(&outside, "escape");
        link(Path::new(".env"), "env-link");
        link(Path::new("config/local.toml"), "local-link");
        let roots = Roots::parse(&[format!("r={}", repo.display())]).expect("roots");
        let root = roots.get("r").expect("root");
        let scratch = tempfile::tempdir().expect("scratch");
        let profile = profile(scratch.path());

        let place = Place::of(&profile, &root.path, "task-1", 2);
        assert!(place.dir.ends_with("conveyor-bootstrap/task-1/iteration-2"));
        assert!(!place.is_ready());
        place.copy_fresh(root, &owner("task-1"), &CancellationToken::new()).expect("copied");
        place.mark_ready();
        assert!(place.is_ready());
        assert_eq!(
            listing(&place.dir),
            ["abs-config", "config", "config/app.toml", "link", "run.sh"],
            "no hidden or ignored file, no link out of the root or to what the walk skips"
        );
        let mode = std::fs::metadata(place.dir.join("run.sh")).expect("copied").permissions().mode();
        assert_eq!(mode & 0o777, 0o755);
        assert_eq!(std::fs::read_link(place.dir.join("link")).expect("a link"), Path::new("run.sh"));
        assert_eq!(
            std::fs::read_link(place.dir.join("abs-config")).expect("a link"),
            place.dir.join("config"),
            "an absolute link into the root points into the copy"
        );
        let folder = place.dir.parent().expect("the task folder");
        assert_eq!(read_marker(folder), Some(owner("task-1")));
        let private =
            place.private_copy(root, "check-1", &owner("task-1"), &CancellationToken::new()).expect("copied");
        place.adopt(private);
        assert!(place.is_ready());
        remove_task(&profile, "task-1");
        assert!(!folder.exists());

        // A cancelled node stops copying.
        let cancelled = CancellationToken::new();
        cancelled.cancel();
        let stopped = place.copy_fresh(root, &owner("task-1"), &cancelled);
        assert!(stopped.is_err_and(|e| e.contains("cancelled")));
    }

    #[tokio::test]
    async fn a_sweep_removes_this_deployments_folders_of_tasks_that_are_over() {
        let scratch = tempfile::tempdir().expect("scratch");
        let base = scratch.path().to_path_buf();
        let folder = |task: &str| base.join(SCRATCH_FOLDER).join(task);
        for task in ["live", "over", "unknown"] {
            write(&folder(task).join("iteration-1/file"), "x");
            mark(&folder(task).join("iteration-1"), &owner(task)).expect("marked");
        }
        // Another deployment's, and a folder without a marker: neither is this sweep's to judge.
        write(&folder("foreign").join("iteration-1/file"), "x");
        mark(
            &folder("foreign").join("iteration-1"),
            &Owner { task: "foreign".into(), deployment: "d2".into() },
        )
        .expect("marked");
        write(&folder("unmarked").join("iteration-1/file"), "x");
        let marked = marked_folders(std::slice::from_ref(&base));
        assert_eq!(marked.len(), 4, "the unmarked folder is not listed: {marked:?}");
        let removed = sweep(marked, "d1", |task| async move {
            match task.as_str() {
                "live" => Some(true),
                "over" => Some(false),
                _ => None,
            }
        })
        .await;
        assert_eq!(removed, 1);
        assert!(!folder("over").exists());
        for kept in ["live", "unknown", "foreign", "unmarked"] {
            assert!(folder(kept).join("iteration-1/file").exists(), "{kept} is kept");
        }
        assert!(marked_folders(&[base.join("nowhere")]).is_empty());
    }
}
