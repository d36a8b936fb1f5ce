//! The checks of a `[bootstrap.NAME]` profile: the only place a root's ADR commands may run.

use std::path::PathBuf;

use super::raw::RawBootstrap;
use super::validate::{Problem, check_env, check_output_bytes, check_timeout, name_problem};
use super::{
    BootstrapProfile, DEFAULT_CHECK_OUTPUT_BYTES, DEFAULT_CHECK_TIMEOUT_S, DEFAULT_HISTORY, MAX_HISTORY,
    Workspace,
};

pub(super) fn check_bootstrap(name: String, raw: RawBootstrap) -> Result<BootstrapProfile, Problem> {
    let subject = format!("bootstrap profile {name:?}");
    let fail = |field: &str, problem: String| Problem::new(subject.clone(), field, problem);
    if let Some(problem) = name_problem(&name) {
        return Err(fail("name", problem));
    }
    let root = raw.root.ok_or_else(|| {
        fail("root", "is missing: name the root (--root NAME=PATH) whose ADRs this profile runs".into())
    })?;
    if let Some(problem) = name_problem(&root) {
        return Err(fail("root", problem));
    }
    let workspace = match (raw.workspace.as_deref(), raw.scratch_dir) {
        (None | Some("scratch"), dir) => Workspace::Scratch(match dir {
            None => std::env::temp_dir(),
            Some(dir) if dir.starts_with('/') => PathBuf::from(dir),
            Some(dir) => return Err(fail("scratch_dir", format!("is {dir:?}; give an absolute path"))),
        }),
        (Some("root"), None) => Workspace::Root,
        (Some("root"), Some(_)) => {
            return Err(fail(
                "scratch_dir",
                "is given, but workspace is \"root\", which runs in the root itself; drop one".into(),
            ));
        }
        (Some(other), _) => {
            return Err(fail(
                "workspace",
                format!(
                    "is {other:?}; use \"scratch\" (a copy of the root per iteration) or \"root\" (the root itself)"
                ),
            ));
        }
    };
    let timeout_s =
        check_timeout(raw.timeout_s, DEFAULT_CHECK_TIMEOUT_S).map_err(|p| fail("timeout_s", p))?;
    check_env(&raw.env).map_err(|p| fail("env", p))?;
    let history = match raw.history {
        None => DEFAULT_HISTORY,
        Some(n) => usize::try_from(n)
            .ok()
            .filter(|n| (1..=MAX_HISTORY).contains(n))
            .ok_or_else(|| fail("history", format!("is {n}; keep between 1 and {MAX_HISTORY} executions")))?,
    };
    let max_output_bytes = check_output_bytes(raw.max_output_bytes, DEFAULT_CHECK_OUTPUT_BYTES)
        .map_err(|p| fail("max_output_bytes", p))?;
    Ok(BootstrapProfile {
        name,
        description: raw.description,
        root,
        workspace,
        timeout_s,
        env: raw.env,
        writable: raw.writable,
        history,
        max_output_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::super::{Workspace, parse};

    #[test]
    fn a_profile_gets_defaults_and_names_its_root() {
        let config = parse("[bootstrap.sample]\nroot = \"demo\"\n", "/x.toml").expect("valid");
        let profile = &config.bootstrap["sample"];
        assert_eq!(profile.root, "demo");
        assert_eq!(profile.workspace, Workspace::Scratch(std::env::temp_dir()));
        assert!(!profile.writable);
        let config = parse(
            "[bootstrap.live]\nroot = \"demo\"\nworkspace = \"root\"\nwritable = true\ntimeout_s = 30\n",
            "/x.toml",
        )
        .expect("valid");
        assert_eq!(config.bootstrap["live"].workspace, Workspace::Root);
        assert!(config.bootstrap["live"].writable);
    }

    #[test]
    fn mistakes_name_the_profile_and_the_field() {
        for (text, expected) in [
            ("[bootstrap.s]\n", "bootstrap profile \"s\": root is missing"),
            ("[bootstrap.s]\nroot = \"d\"\nworkspace = \"tmp\"\n", "workspace is \"tmp\""),
            (
                "[bootstrap.s]\nroot = \"d\"\nscratch_dir = \"rel\"\n",
                "scratch_dir is \"rel\"; give an absolute path",
            ),
            ("[bootstrap.s]\nroot = \"d\"\nworkspace = \"root\"\nscratch_dir = \"/t\"\n", "drop one"),
            ("[bootstrap.s]\nroot = \"d\"\ntimeout_s = 0\n", "timeout_s is 0"),
            ("[bootstrap.s]\nroot = \"d\"\nhistory = 0\n", "history is 0"),
            ("[bootstrap.s]\nroot = \"d\"\nrun = \"x\"\n", "unknown field `run`"),
        ] {
            let error = parse(text, "/x.toml").expect_err(text).to_string();
            assert!(error.contains(expected), "{text}: {error}");
        }
    }
}
