//! Commands outlive nothing they were started for: a worker killed outright (SIGKILL, the OOM
//! killer) cannot signal its commands' process groups, and its node runs again elsewhere. Two
//! things end what it left:
//!
//! - the command it started itself gets SIGKILL from the kernel when the worker dies (its
//!   parent-death signal, set between `fork` and `exec`);
//! - what that command started in turn is found by the ledger: each running command's process
//!   group is a file `<worker pid>.<worker start time>.<group>` in a directory of the host
//!   ([`ledger_dir`]), and every command carries [`MARK`] naming its worker. [`reap`] (at a
//!   worker's start and then on a period, by every worker of the host) kills the marked members
//!   of groups whose worker is gone. The mark, not the group number alone, decides: a group's
//!   number may be reused once all of its members have ended.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use conveyor_worker::tool::Chore;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// The environment variable every command gets: the worker incarnation that started it.
pub const MARK: &str = "CONVEYOR_COMMAND_OF";

/// This process's incarnation: `<pid>.<start time>`, the start time in clock ticks since boot
/// (`/proc/<pid>/stat`), so that a reused pid is a different incarnation. `None` without `/proc`:
/// then nothing is listed, since no other worker could tell whether this one lives.
pub fn incarnation() -> Option<&'static str> {
    static ID: OnceLock<Option<String>> = OnceLock::new();
    ID.get_or_init(|| {
        let pid = std::process::id();
        start_time(pid).map(|start| format!("{pid}.{start}"))
    })
    .as_deref()
}

/// Where the running commands of this host's workers are listed.
pub fn ledger_dir() -> PathBuf {
    std::env::temp_dir().join("conveyor-commands")
}

/// A running command's entry in the ledger; removed when its group has been ended.
pub(super) struct LedgerEntry(Option<PathBuf>);

impl LedgerEntry {
    /// Lists `group` as a command of this worker. A ledger that cannot be written (a read-only
    /// temporary directory) costs only the reaping of grandchildren: the command still runs.
    pub(super) fn open(group: Option<Pid>) -> Self {
        let (Some(group), Some(worker)) = (group, incarnation()) else { return Self(None) };
        let dir = ledger_dir();
        let path = dir.join(format!("{worker}.{group}"));
        let written = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, b""));
        match written {
            Ok(()) => Self(Some(path)),
            Err(e) => {
                tracing::debug!(dir = %dir.display(), error = %e, "cannot list a command in the ledger");
                Self(None)
            }
        }
    }
}

impl Drop for LedgerEntry {
    fn drop(&mut self) {
        if let Some(path) = self.0.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// How often each worker looks for what dead workers of its host left: a grandchild outlives
/// its worker by at most this (its command itself dies with the worker).
pub const REAP_EVERY: Duration = Duration::from_secs(5);

/// The reaping chore for the workers that serve `queue`. A worker that serves several queues
/// gets one per queue; they share one look per period.
pub fn chore(queue: &str) -> Chore {
    Chore::new("reap-orphaned-commands", queue, REAP_EVERY, |_cx| async {
        static LAST: Mutex<Option<Instant>> = Mutex::new(None);
        {
            let mut last = LAST.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if last.is_some_and(|at| at.elapsed() < REAP_EVERY / 2) {
                return;
            }
            *last = Some(Instant::now());
        }
        let _ = tokio::task::spawn_blocking(reap).await;
    })
}

/// Ends what commands of workers that are gone left running on this host, and forgets their
/// entries. Returns how many processes it killed.
pub fn reap() -> usize {
    reap_in(&ledger_dir())
}

fn reap_in(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    let mut killed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some((worker, group)) = name.to_str().and_then(parse_entry) else { continue };
        if is_alive(&worker) {
            continue;
        }
        for pid in marked_members(group, &worker) {
            if kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok() {
                killed += 1;
            }
        }
        let _ = std::fs::remove_file(entry.path());
    }
    if killed > 0 {
        tracing::warn!(processes = killed, "ended commands whose worker had died");
    }
    killed
}

/// `<pid>.<start>.<group>` into the worker's incarnation and the group.
fn parse_entry(name: &str) -> Option<(String, i32)> {
    let (worker, group) = name.rsplit_once('.')?;
    let (pid, start) = worker.split_once('.')?;
    pid.parse::<u32>().ok()?;
    start.parse::<u64>().ok()?;
    Some((worker.to_owned(), group.parse().ok()?))
}

/// Whether the incarnation `<pid>.<start>` still runs.
fn is_alive(worker: &str) -> bool {
    let Some((pid, start)) = worker.split_once('.') else { return false };
    let (Ok(pid), Ok(start)) = (pid.parse::<u32>(), start.parse::<u64>()) else { return false };
    start_time(pid) == Some(start)
}

/// The processes of `group` that carry the mark of `worker`.
fn marked_members(group: i32, worker: &str) -> Vec<i32> {
    let mark = format!("{MARK}={worker}");
    let Ok(procs) = std::fs::read_dir("/proc") else { return Vec::new() };
    procs
        .flatten()
        .filter_map(|p| p.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            stat_fields(*pid as u32).is_some_and(|f| f.get(2).and_then(|g| g.parse().ok()) == Some(group))
        })
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|var| var == mark.as_bytes()))
        })
        .collect()
}

/// The start time of process `pid`, in clock ticks since boot.
fn start_time(pid: u32) -> Option<u64> {
    stat_fields(pid)?.get(19)?.parse().ok()
}

/// The fields of `/proc/<pid>/stat` after the command name (which may hold spaces and
/// parentheses): the state first, then the parent, the group, ... the start time 20th.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    Some(after.split_whitespace().map(str::to_owned).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_made_up_incarnation_is_not() {
        let me = incarnation().expect("/proc");
        assert!(is_alive(me));
        let (pid, start) = me.split_once('.').expect("pid.start");
        let start: u64 = start.parse().expect("start");
        assert!(!is_alive(&format!("{pid}.{}", start + 1)), "the same pid started later is another");
        assert_eq!(parse_entry("12.345.678"), Some(("12.345".to_owned(), 678)));
        assert_eq!(parse_entry("junk"), None);
    }

    #[test]
    fn a_dead_workers_marked_group_is_killed_and_an_unmarked_one_is_not() {
        use std::os::unix::process::CommandExt as _;
        let dir = tempfile::tempdir().expect("dir");
        // A worker that has died: a made-up incarnation of a pid that is not running.
        let gone = format!("{}.1", u32::MAX - 7);
        let spawn = |mark: &str| {
            std::process::Command::new("sleep")
                .arg("600")
                .env(MARK, mark)
                .process_group(0)
                .spawn()
                .expect("sleep")
        };
        let (mut marked, mut other) = (spawn(&gone), spawn("someone-else"));
        for child in [&marked, &other] {
            std::fs::write(dir.path().join(format!("{gone}.{}", child.id())), b"").expect("entry");
        }
        // The ledger of a live worker is left alone.
        let me = incarnation().expect("/proc");
        let mut alive = spawn(me);
        std::fs::write(dir.path().join(format!("{me}.{}", alive.id())), b"").expect("entry");

        assert_eq!(reap_in(dir.path()), 1);
        let ended = marked.wait().expect("wait");
        use std::os::unix::process::ExitStatusExt as _;
        assert_eq!(ended.signal(), Some(9));
        assert!(other.try_wait().expect("try_wait").is_none(), "a process without the mark lives");
        assert!(alive.try_wait().expect("try_wait").is_none(), "a live worker's command lives");
        let left: Vec<_> = std::fs::read_dir(dir.path()).expect("dir").flatten().collect();
        assert_eq!(left.len(), 1, "the dead worker's entries are forgotten, the live one's kept");
        for mut child in [other, alive] {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
