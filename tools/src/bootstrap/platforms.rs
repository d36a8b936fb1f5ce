//! The platforms a root is built for, from the files at its top (and a `k8s/`-like folder), and
//! the light checks each implies: the toolchain is there and the manifest reads. Nothing here
//! builds, installs or starts anything; that is what the ADRs' own steps are for. A file counts
//! only when a walk of the root lists it (not ignored, not a link out of the root).

use serde::{Deserialize, Serialize};

use crate::roots::Root;

/// One platform found in a root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Platform {
    /// `container`, `compose`, `kubernetes`, `cargo`, `npm`, `python`, `go` or `make`.
    pub kind: String,
    /// The file that shows it, relative to the root.
    pub evidence: String,
    /// What is checked, in words.
    pub requirement: String,
    /// The check's shell command, run at the root.
    pub command: String,
}

const COMPOSE_FILES: &[&str] = &["compose.yaml", "compose.yml", "docker-compose.yml", "docker-compose.yaml"];
const KUBERNETES_FOLDERS: &[&str] = &["k8s", "kubernetes", "deploy/k8s", "manifests", "helm"];

/// The platforms `root` shows, in a fixed order.
pub fn detect(root: &Root) -> Vec<Platform> {
    let has = |name: &str| root.resolve(name).is_ok_and(|p| p.is_file());
    let has_folder = |name: &str| root.resolve(name).is_ok_and(|p| p.is_dir());
    let mut found = Vec::new();
    let mut add = |kind: &str, evidence: &str, requirement: String, command: String| {
        found.push(Platform { kind: kind.into(), evidence: evidence.into(), requirement, command })
    };
    for file in ["Dockerfile", "Containerfile"] {
        if has(file) {
            add(
                "container",
                file,
                format!("a container engine can build {file}"),
                "command -v docker >/dev/null || command -v podman >/dev/null".into(),
            );
            break;
        }
    }
    if let Some(file) = COMPOSE_FILES.iter().find(|f| has(f)) {
        add(
            "compose",
            file,
            format!("{file} is a valid Compose file"),
            format!("docker compose -f {file} config --quiet"),
        );
    }
    if let Some(folder) = KUBERNETES_FOLDERS.iter().find(|f| has_folder(f)) {
        add(
            "kubernetes",
            folder,
            format!("kubectl is there for the manifests in {folder}/"),
            "command -v kubectl >/dev/null".into(),
        );
    }
    if has("Cargo.toml") {
        add(
            "cargo",
            "Cargo.toml",
            "Cargo reads the manifest".into(),
            "cargo metadata --no-deps --format-version 1 >/dev/null".into(),
        );
    }
    if has("package.json") {
        add(
            "npm",
            "package.json",
            "npm is there and package.json is valid JSON".into(),
            "command -v npm >/dev/null && node -e \"JSON.parse(require('fs').readFileSync('package.json','utf8'))\"".into(),
        );
    }
    if let Some(file) = ["pyproject.toml", "requirements.txt", "setup.py"].iter().find(|f| has(f)) {
        add("python", file, "a Python 3 interpreter is there".into(), "python3 --version".into());
    }
    if has("go.mod") {
        add("go", "go.mod", "Go reads the module".into(), "go list -m >/dev/null".into());
    }
    if has("Makefile") {
        add("make", "Makefile", "make reads the Makefile".into(), "make -n >/dev/null".into());
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root_of(dir: &std::path::Path) -> Root {
        let roots = crate::roots::Roots::parse(&[format!("r={}", dir.display())]).expect("roots");
        roots.get("r").expect("root").clone()
    }

    #[test]
    fn files_at_the_top_show_the_platforms() {
        let dir = tempfile::tempdir().expect("dir");
        assert!(detect(&root_of(dir.path())).is_empty());
        for file in ["Dockerfile", "docker-compose.yml", "Cargo.toml", "package.json", "requirements.txt"] {
            std::fs::write(dir.path().join(file), "").expect("write");
        }
        std::fs::create_dir(dir.path().join("k8s")).expect("mkdir");
        let kinds: Vec<String> = detect(&root_of(dir.path())).into_iter().map(|p| p.kind).collect();
        assert_eq!(kinds, ["container", "compose", "kubernetes", "cargo", "npm", "python"]);
    }

    #[test]
    fn a_file_the_walk_skips_shows_no_platform() {
        let base = tempfile::tempdir().expect("dir");
        let dir = base.path().join("repo");
        std::fs::create_dir_all(base.path().join("elsewhere")).expect("mkdir");
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join(".gitignore"), "Dockerfile\nk8s/\n").expect("write");
        std::fs::write(dir.join("Dockerfile"), "").expect("write");
        std::fs::create_dir(dir.join("k8s")).expect("mkdir");
        std::fs::write(base.path().join("elsewhere/Cargo.toml"), "").expect("write");
        std::os::unix::fs::symlink(base.path().join("elsewhere/Cargo.toml"), dir.join("Cargo.toml"))
            .expect("link");
        assert!(detect(&root_of(&dir)).is_empty());
    }
}
