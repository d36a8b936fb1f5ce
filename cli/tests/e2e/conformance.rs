//! The MCP conformance suite (`@modelcontextprotocol/conformance`) against a real Conveyor: runs
//! `scripts/conformance.sh required` from the workspace root and fails unless every required
//! scenario passes. See `docs/conformance.md`.
//!
//! Needs `npm` (npm 9 or newer, on any Node) with the npm registry reachable the first time: the
//! script installs the suite and a Node 22 binary into `<workspace>/.conformance/`, which later
//! runs reuse. It also needs `redis-server` on PATH; it runs the `conveyor` cargo built for these tests.

use std::process::{Command, Stdio};

use conveyor_tests::process::{conveyor_bin, output_text, workspace_root};

const INSTALL_NPM: &str = "the MCP conformance suite needs npm (npm 9 or newer, on any Node.js): install \
     Node.js and npm, e.g. `apt-get install -y nodejs npm` on Debian or Ubuntu, or from \
     https://nodejs.org, so that `npm` is on PATH";

#[test]
fn conformance_suite_required_scenarios_pass() {
    match Command::new("npm").arg("--version").stdin(Stdio::null()).output() {
        Ok(output) if output.status.success() => {}
        Ok(output) => panic!("`npm --version` failed; {INSTALL_NPM}\n{}", output_text(&output)),
        Err(error) => panic!("cannot run `npm` ({error}); {INSTALL_NPM}"),
    }

    let output = Command::new("bash")
        .args(["scripts/conformance.sh", "required"])
        .current_dir(workspace_root())
        .env("CONVEYOR_BIN", conveyor_bin())
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|error| panic!("cannot run bash scripts/conformance.sh: {error}"));
    let text = output_text(&output);
    assert!(output.status.success(), "required conformance scenarios failed\n{text}");
    println!("{text}");
}
