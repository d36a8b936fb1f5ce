//! npm packages the tests run (the official TypeScript client, the MCP Inspector, a browser
//! driver): installed once into the target directory, found again by their versions.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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

/// What a script run by [`run_script`] did.
#[derive(Debug)]
pub struct ScriptRun {
    /// It exited 0 before its timeout.
    pub success: bool,
    /// It was killed at its timeout.
    pub timed_out: bool,
    pub stdout: String,
    pub stderr: String,
}

impl ScriptRun {
    /// How it ended, and its stdout and stderr, for a failure message.
    pub fn report(&self) -> String {
        let ending = if self.timed_out {
            "killed at its timeout"
        } else if self.success {
            "exit 0"
        } else {
            "exit non-zero"
        };
        format!("{ending}\n--- stdout ---\n{}\n--- stderr ---\n{}", self.stdout, self.stderr)
    }
}

/// Runs `node ARGS` in `dir`, killing it after `timeout`. With `echo`, its stdout is printed as
/// it comes (a long browser run shows its steps). Both pipes are drained on threads, so that a
/// chatty script cannot block on a full pipe.
pub fn run_script(node: &Path, dir: &Path, args: &[&str], timeout: Duration, echo: bool) -> ScriptRun {
    let mut child = Command::new(node)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("cannot run {}: {error}", node.display()));
    let drain = |mut pipe: Box<dyn Read + Send>, echo: bool| -> JoinHandle<String> {
        std::thread::spawn(move || {
            let mut all = Vec::new();
            let mut buffer = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buffer) {
                if n == 0 {
                    break;
                }
                if echo {
                    print!("{}", String::from_utf8_lossy(&buffer[..n]));
                }
                all.extend_from_slice(&buffer[..n]);
            }
            String::from_utf8_lossy(&all).into_owned()
        })
    };
    let stdout = child.stdout.take().map(|p| drain(Box::new(p), echo));
    let stderr = child.stderr.take().map(|p| drain(Box::new(p), false));
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let collect = |handle: Option<JoinHandle<String>>| handle.and_then(|h| h.join().ok()).unwrap_or_default();
    ScriptRun {
        success: status.is_some_and(|s| s.success()),
        timed_out: status.is_none(),
        stdout: collect(stdout),
        stderr: collect(stderr),
    }
}
