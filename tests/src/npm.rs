//! npm packages the tests run (the official TypeScript client, the MCP Inspector, a browser
//! driver): installed once into the target directory, found again by their versions.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::process::output_text;

/// The `version` of the npm package installed in `package_dir`, if one is.
pub fn package_version(package_dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(package_dir.join("package.json")).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    json.get("version")?.as_str().map(str::to_owned)
}

/// Runs `npm ARGS` in `dir` with what every install here wants: no audit, no funding messages,
/// no install scripts, and an engine mismatch not fatal (npm itself may run on an older Node than
/// the packages declare; they run on their own). Panics with `hint` (how to get npm) when npm
/// cannot run, and with npm's output when it fails.
pub fn run(dir: &Path, args: &[&str], hint: &str) -> Output {
    let output = Command::new("npm")
        .args(args)
        .args(["--no-audit", "--no-fund", "--ignore-scripts", "--engine-strict=false", "--loglevel=error"])
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|error| panic!("cannot run `npm` ({error}); {hint}"));
    assert!(
        output.status.success(),
        "npm {} in {} failed\n{}",
        args.join(" "),
        dir.display(),
        output_text(&output)
    );
    output
}

/// Panics unless `node --version` runs with this binary.
pub fn check_node(node: &Path) {
    let version = Command::new(node)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|error| panic!("{} does not run on this machine: {error}", node.display()));
    assert!(version.status.success(), "{} --version failed\n{}", node.display(), output_text(&version));
}
