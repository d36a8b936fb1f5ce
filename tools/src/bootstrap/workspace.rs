//! Where one iteration of a bootstrap runs: the root itself, or a fresh copy of it under the
//! profile's scratch directory (`{scratch_dir}/conveyor-bootstrap/{task}/iteration-{n}`).
//!
//! The bootstrap node makes the copy and runs the bootstrap in it, then leaves a `.ready` marker
//! beside it. A check node that finds no marker (it runs on another machine, or the bootstrap
//! node's worker died after its work was recorded) makes its own copy under a temporary name,
//! runs the same bootstrap there, and renames it into place; the first rename wins. The
//! learnings node removes the copy once the iteration is over.

use std::path::{Path, PathBuf};

use crate::operator_config::{BootstrapProfile, Workspace};

/// Most files a scratch copy takes.
const MAX_COPY_FILES: usize = 100_000;
/// Most bytes a scratch copy takes.
const MAX_COPY_BYTES: u64 = 2 * 1024 * 1024 * 1024;
/// Folders never copied: version control and build output that a bootstrap makes anew.
const SKIPPED: &[&str] = &[".git", ".hg", ".svn"];

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

    /// A fresh copy of `root` at the place (what an earlier attempt left is removed first).
    pub fn copy_fresh(&self, root: &Path) -> Result<(), String> {
        if !self.is_scratch() {
            return Ok(());
        }
        remove(&self.dir);
        copy_tree(root, &self.dir)
    }

    pub fn mark_ready(&self) {
        if let Some(marker) = &self.ready {
            let _ = std::fs::write(marker, b"");
        }
    }

    /// A copy under a name of `node`'s own, to bootstrap there and [`Place::adopt`] after.
    pub fn private_copy(&self, root: &Path, node: &str) -> Result<Place, String> {
        let dir = self.dir.with_file_name(format!(
            "{}.{}",
            self.dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            node
        ));
        remove(&dir);
        copy_tree(root, &dir)?;
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
    base.join("conveyor-bootstrap").join(safe)
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
    if dir.exists() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Copies the files, folders and symlinks of `from` into `to` (created), keeping permissions.
fn copy_tree(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::create_dir_all(to)
        .map_err(|e| format!("cannot create the scratch copy {}: {e}", to.display()))?;
    let (mut files, mut bytes) = (0usize, 0u64);
    let walk = ignore::WalkBuilder::new(from)
        .standard_filters(false)
        .filter_entry(|entry| !SKIPPED.iter().any(|s| entry.file_name() == *s))
        .build();
    for entry in walk {
        let entry = entry.map_err(|e| format!("cannot read the root: {e}"))?;
        let relative = entry.path().strip_prefix(from).unwrap_or(entry.path());
        if relative.as_os_str().is_empty() {
            continue;
        }
        let target = to.join(relative);
        let kind = entry.file_type().ok_or_else(|| format!("cannot read {}", entry.path().display()))?;
        if kind.is_dir() {
            std::fs::create_dir_all(&target)
                .map_err(|e| format!("cannot copy {}: {e}", relative.display()))?;
        } else if kind.is_symlink() {
            let link = std::fs::read_link(entry.path())
                .map_err(|e| format!("cannot copy {}: {e}", relative.display()))?;
            std::os::unix::fs::symlink(link, &target)
                .map_err(|e| format!("cannot copy {}: {e}", relative.display()))?;
        } else if kind.is_file() {
            files += 1;
            bytes += std::fs::copy(entry.path(), &target)
                .map_err(|e| format!("cannot copy {}: {e}", relative.display()))?;
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
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_scratch_copy_keeps_modes_and_links_and_skips_version_control() {
        let root = tempfile::tempdir().expect("root");
        let scratch = tempfile::tempdir().expect("scratch");
        std::fs::create_dir_all(root.path().join(".git")).expect("mkdir");
        std::fs::write(root.path().join(".git/HEAD"), "x").expect("write");
        std::fs::write(root.path().join("run.sh"), "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(root.path().join("run.sh"), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        std::fs::write(root.path().join(".env.example"), "A=\n").expect("write");
        std::os::unix::fs::symlink("run.sh", root.path().join("link")).expect("symlink");
        let profile = BootstrapProfile {
            name: "p".into(),
            description: None,
            root: "r".into(),
            workspace: Workspace::Scratch(scratch.path().to_path_buf()),
            timeout_s: 1,
            env: vec![],
            writable: false,
            history: 1,
            max_output_bytes: 1,
        };
        let place = Place::of(&profile, root.path(), "task-1", 2);
        assert!(place.dir.ends_with("conveyor-bootstrap/task-1/iteration-2"));
        assert!(!place.is_ready());
        place.copy_fresh(root.path()).expect("copied");
        place.mark_ready();
        assert!(place.is_ready());
        let mode = std::fs::metadata(place.dir.join("run.sh")).expect("copied").permissions().mode();
        assert_eq!(mode & 0o777, 0o755);
        assert!(place.dir.join(".env.example").is_file() && !place.dir.join(".git").exists());
        assert_eq!(std::fs::read_link(place.dir.join("link")).expect("a link"), Path::new("run.sh"));
        let private = place.private_copy(root.path(), "check-1").expect("copied");
        place.adopt(private);
        assert!(place.is_ready());
        remove_task(&profile, "task-1");
        assert!(!place.dir.exists());
    }
}
