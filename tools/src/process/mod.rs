//! Child processes for the tools that run operators' commands (readiness checks, tools from
//! configuration): never through a shell, with an allowlisted environment, output capped, and
//! the whole process group killed on timeout or cancellation, so that nothing a command started
//! outlives its node, nor its worker ([`orphans`]).

pub mod orphans;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio_util::sync::CancellationToken;

/// Variables every child gets from the worker's environment (when set there); a command gets
/// more only by naming them.
pub const BASE_ENV: &[&str] = &["PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "USER"];

/// How long a process group gets between SIGTERM and SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(2);
/// How long output still arriving is read once the command has ended.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(500);

/// What to run.
#[derive(Debug, Clone)]
pub struct Command {
    pub argv: Vec<String>,
    pub cwd: PathBuf,
    /// Extra variables passed through from the worker's environment, by name.
    pub env: Vec<String>,
    pub timeout: Duration,
    /// Most bytes kept of stdout and of stderr each: the first and the last half of it.
    pub max_output_bytes: usize,
    /// The W3C trace context of the node that runs the command, handed on as `TRACEPARENT` (the
    /// OpenTelemetry convention for processes), so that an instrumented command joins the trace.
    pub traceparent: Option<String>,
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Ending {
    Exited,
    TimedOut,
    Cancelled,
    FailedToStart,
}

/// One stream of output, capped.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Captured {
    pub text: String,
    /// Bytes the command wrote, kept or not.
    pub bytes: u64,
    pub truncated: bool,
}

impl Captured {
    /// The last `bytes` of what was kept, on a character boundary: what a result shows a person.
    pub fn tail(&self, bytes: usize) -> String {
        tail_of(&self.text, bytes).to_owned()
    }
}

/// The last `bytes` of `text`, on a character boundary.
pub fn tail_of(text: &str, bytes: usize) -> &str {
    let mut start = text.len().saturating_sub(bytes);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// What a run produced.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finished {
    pub ending: Ending,
    pub exit_code: Option<i32>,
    /// The signal that ended the command, when one did.
    pub signal: Option<i32>,
    pub duration_ms: u64,
    pub stdout: Captured,
    pub stderr: Captured,
    /// Why the command could not start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Finished {
    pub fn succeeded(&self) -> bool {
        self.ending == Ending::Exited && self.exit_code == Some(0)
    }

    /// One line on how it ended: `exit code 1`, `timed out after 5 s`, ...
    pub fn describe(&self, timeout: Duration) -> String {
        match self.ending {
            Ending::Exited => match (self.exit_code, self.signal) {
                (Some(code), _) => format!("exit code {code}"),
                (None, Some(signal)) => format!("killed by signal {signal}"),
                (None, None) => "ended".to_owned(),
            },
            Ending::TimedOut => format!("timed out after {} s", timeout.as_secs_f64()),
            Ending::Cancelled => "cancelled".to_owned(),
            Ending::FailedToStart => {
                format!("could not start: {}", self.error.as_deref().unwrap_or("unknown error"))
            }
        }
    }
}

/// Runs `command` to its end, its timeout, or `cancel`.
pub async fn run(command: &Command, cancel: &CancellationToken) -> Finished {
    let started = Instant::now();
    let failed = |error: String| Finished {
        ending: Ending::FailedToStart,
        exit_code: None,
        signal: None,
        duration_ms: 0,
        stdout: Captured::default(),
        stderr: Captured::default(),
        error: Some(error),
    };
    let Some((program, args)) = command.argv.split_first() else {
        return failed("the command is empty".to_owned());
    };
    let mut child = tokio::process::Command::new(program);
    child
        .args(args)
        .current_dir(&command.cwd)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so that one signal reaches everything it starts.
        .process_group(0)
        .kill_on_drop(true);
    for name in BASE_ENV.iter().copied().chain(command.env.iter().map(String::as_str)) {
        if let Some(value) = std::env::var_os(name) {
            child.env(name, value);
        }
    }
    if let Some(traceparent) = &command.traceparent {
        child.env("TRACEPARENT", traceparent);
    }
    if let Some(worker) = orphans::incarnation() {
        child.env(orphans::MARK, worker);
    }
    die_with_this_process(&mut child);
    let mut child = match child.spawn() {
        Ok(child) => child,
        Err(e) => return failed(format!("{program}: {e}")),
    };
    let group = child.id().and_then(|id| i32::try_from(id).ok()).map(Pid::from_raw);
    // Dropped when this function returns, after the group's last signal.
    let _listed = orphans::LedgerEntry::open(group);
    let stdout = child.stdout.take().map(|s| tokio::spawn(capture(s, command.max_output_bytes)));
    let stderr = child.stderr.take().map(|s| tokio::spawn(capture(s, command.max_output_bytes)));
    let (ending, status) = tokio::select! {
        status = child.wait() => (Ending::Exited, status.ok()),
        () = tokio::time::sleep(command.timeout) => (Ending::TimedOut, None),
        () = cancel.cancelled() => (Ending::Cancelled, None),
    };
    let status = match status {
        Some(status) => Some(status),
        None => {
            signal_group(group, Signal::SIGTERM);
            match tokio::time::timeout(TERM_GRACE, child.wait()).await {
                Ok(status) => status.ok(),
                Err(_) => {
                    signal_group(group, Signal::SIGKILL);
                    child.wait().await.ok()
                }
            }
        }
    };
    // What the command left running in its group would hold the pipes open: it goes too.
    signal_group(group, Signal::SIGKILL);
    let collect = |task: Option<tokio::task::JoinHandle<Captured>>| async move {
        match task {
            Some(task) => tokio::time::timeout(DRAIN_AFTER_EXIT, task)
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or_default(),
            None => Captured::default(),
        }
    };
    let (stdout, stderr) = (collect(stdout).await, collect(stderr).await);
    use std::os::unix::process::ExitStatusExt as _;
    Finished {
        ending,
        exit_code: status.and_then(|s| s.code()),
        signal: status.and_then(|s| s.signal()),
        duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        stdout,
        stderr,
        error: None,
    }
}

/// Makes the kernel send the command SIGKILL when this process dies, however it dies: a worker
/// killed outright cannot end its commands itself.
///
/// The signal follows the thread that forks, not the process; commands are spawned from the
/// runtime's worker threads, which live as long as the worker.
#[allow(unsafe_code)]
fn die_with_this_process(child: &mut tokio::process::Command) {
    let parent = nix::unistd::getpid();
    // SAFETY: the closure runs in the forked child before `exec`, where only async-signal-safe
    // calls are allowed: `prctl` and `getppid` are plain system calls, and the error it returns
    // is built from an `ErrorKind`, without allocating.
    unsafe {
        child.pre_exec(move || {
            if nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).is_err() {
                return Err(std::io::ErrorKind::Unsupported.into());
            }
            // This process died between the fork and the prctl: the signal will never come.
            if nix::unistd::getppid() != parent {
                return Err(std::io::ErrorKind::BrokenPipe.into());
            }
            Ok(())
        });
    }
}

fn signal_group(group: Option<Pid>, signal: Signal) {
    if let Some(group) = group {
        // ESRCH: the group is gone already, which is what was wanted.
        let _ = killpg(group, signal);
    }
}

/// Reads a stream to its end, keeping its first and last `cap / 2` bytes.
async fn capture(mut stream: impl AsyncRead + Unpin, cap: usize) -> Captured {
    let half = (cap / 2).max(1);
    let mut head: Vec<u8> = Vec::new();
    let mut tail: std::collections::VecDeque<u8> = std::collections::VecDeque::new();
    let mut total: u64 = 0;
    let mut buffer = [0u8; 8192];
    loop {
        let read = match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        total += read as u64;
        let mut chunk = &buffer[..read];
        if head.len() < half {
            let take = chunk.len().min(half - head.len());
            head.extend_from_slice(&chunk[..take]);
            chunk = &chunk[take..];
        }
        tail.extend(chunk);
        while tail.len() > half {
            tail.pop_front();
        }
    }
    let truncated = total > (head.len() + tail.len()) as u64;
    let mut tail = Vec::from(tail);
    if truncated {
        // The line the cut goes through is left out on both sides: a secret split by the cut
        // would show as two pieces that no masking pattern recognises.
        head.truncate(head.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1));
        tail.drain(..tail.iter().position(|b| *b == b'\n').map_or(tail.len(), |i| i + 1));
    }
    let mut text = String::from_utf8_lossy(&head).into_owned();
    if truncated {
        let left_out = total - (head.len() + tail.len()) as u64;
        text.push_str(&format!("… {left_out} bytes left out …\n"));
    }
    text.push_str(&String::from_utf8_lossy(&tail));
    Captured { text, bytes: total, truncated }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str, timeout_ms: u64) -> Command {
        Command {
            argv: vec!["sh".into(), "-c".into(), script.into()],
            cwd: std::env::temp_dir(),
            env: vec![],
            timeout: Duration::from_millis(timeout_ms),
            max_output_bytes: 64,
            traceparent: None,
        }
    }

    #[tokio::test]
    async fn output_is_capped_and_exit_codes_kept() {
        let done = run(&sh("seq 1 1000; echo oops >&2; exit 3", 10_000), &CancellationToken::new()).await;
        assert_eq!((done.ending, done.exit_code), (Ending::Exited, Some(3)));
        assert!(
            done.stdout.truncated
                && done.stdout.text.starts_with("1\n2\n")
                && done.stdout.text.ends_with("1000\n")
        );
        assert_eq!(done.stderr.text, "oops\n");
    }

    #[tokio::test]
    async fn the_line_a_cut_goes_through_is_left_out() {
        // 64 bytes kept: 32 of the head, 32 of the tail; the secret line straddles both cuts.
        let script = "echo first; printf 'token sk-abcdefghij0123456789abcdefghij0123456789abcdefghij0123456789\\n'; echo last";
        let done = run(&sh(script, 10_000), &CancellationToken::new()).await;
        assert!(done.stdout.truncated, "{:?}", done.stdout);
        let text = &done.stdout.text;
        assert!(text.starts_with("first\n… ") && text.ends_with(" bytes left out …\nlast\n"), "{text:?}");
        assert!(!text.contains("sk-") && !text.contains("6789"), "no piece of the cut line: {text:?}");
        let left_out: u64 = text
            .split("… ")
            .nth(1)
            .and_then(|t| t.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        assert_eq!(
            left_out + "first\nlast\n".len() as u64,
            done.stdout.bytes,
            "the count is what is not shown"
        );
    }

    #[tokio::test]
    async fn a_timeout_kills_the_whole_group() {
        let marker = std::env::temp_dir().join(format!("cv-group-{}", std::process::id()));
        let script = format!("(sleep 30; touch {}) & sleep 30", marker.display());
        let done = run(&sh(&script, 300), &CancellationToken::new()).await;
        assert_eq!(done.ending, Ending::TimedOut);
        assert!(done.duration_ms < 10_000);
        // The backgrounded grandchild was in the group too.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let alive = std::process::Command::new("pgrep").args(["-f", &marker.display().to_string()]).output();
        assert!(alive.is_ok_and(|o| o.stdout.is_empty()), "the grandchild outlived the timeout");
    }

    #[tokio::test]
    async fn cancellation_stops_it_and_the_environment_is_allowlisted() {
        let cancel = CancellationToken::new();
        let stopper = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            stopper.cancel();
        });
        let done = run(&sh("sleep 30", 30_000), &cancel).await;
        assert_eq!(done.ending, Ending::Cancelled);
        // cargo sets CARGO_PKG_NAME for the test process; a child sees it only when named.
        assert!(std::env::var("CARGO_PKG_NAME").is_ok());
        let echo = sh("echo \"[$CARGO_PKG_NAME]\"", 5_000);
        let done = run(&echo, &CancellationToken::new()).await;
        assert_eq!(done.stdout.text, "[]\n");
        let named = Command { env: vec!["CARGO_PKG_NAME".into()], ..echo };
        assert_eq!(
            run(&named, &CancellationToken::new()).await.stdout.text,
            format!("[{}]\n", env!("CARGO_PKG_NAME"))
        );
        let traced = Command {
            traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
            ..sh("echo \"$TRACEPARENT\"", 5_000)
        };
        let handed_on = run(&traced, &CancellationToken::new()).await.stdout.text;
        assert_eq!(handed_on, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\n");
        let missing = run(
            &Command { argv: vec!["/no/such/program".into()], ..sh("", 1000) },
            &CancellationToken::new(),
        )
        .await;
        assert_eq!(missing.ending, Ending::FailedToStart);
        assert!(missing.describe(Duration::from_secs(1)).contains("/no/such/program"));
    }
}
