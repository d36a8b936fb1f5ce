//! A `redis-server` under valgrind's callgrind, for the instructions the server executes between
//! two marks: a count, not a time, so it holds on a noisy machine where CPU seconds do not.
//!
//! [`CallgrindRedis::zero`] sets the counters to zero and [`CallgrindRedis::dump`] reads what they
//! reached (both through `callgrind_control`, which valgrind serves between the server's basic
//! blocks). Every thread of the server counts.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

pub struct CallgrindRedis {
    child: Child,
    port: u16,
    dir: PathBuf,
    dumps: u32,
}

impl CallgrindRedis {
    /// Starts a server that keeps nothing on disk, under callgrind, and waits for it to answer
    /// (valgrind makes its start take seconds).
    pub fn start() -> anyhow::Result<Self> {
        for tool in ["valgrind", "callgrind_control"] {
            let found =
                Command::new(tool).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status();
            if found.is_err() {
                bail!("{tool} is not installed (Debian: apt-get install valgrind)");
            }
        }
        let port = crate::process::server_port();
        let dir = crate::process::scratch_dir("callgrind-redis");
        let log = std::fs::File::create(dir.join("valgrind.log"))?;
        let child = Command::new("valgrind")
            .arg("--tool=callgrind")
            .arg(format!("--callgrind-out-file={}", dir.join("callgrind.out").display()))
            .args(["redis-server", "--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("cannot start valgrind")?;
        let server = Self { child, port, dir, dumps: 0 };
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let answered = redis::Client::open(server.url())
                .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(500)))
                .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
                .is_ok();
            if answered {
                return Ok(server);
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "redis-server under callgrind did not answer; log:\n{}",
                std::fs::read_to_string(server.dir.join("valgrind.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Sets every counter to zero.
    pub fn zero(&self) -> anyhow::Result<()> {
        self.control("-z")
    }

    /// The instructions executed since the last [`Self::zero`] (or the start).
    pub fn dump(&mut self) -> anyhow::Result<u64> {
        self.dump_keeping(None)
    }

    /// [`Self::dump`], keeping the profile at `keep` (a file `callgrind_annotate` reads) when given.
    pub fn dump_keeping(&mut self, keep: Option<&std::path::Path>) -> anyhow::Result<u64> {
        self.control("-d")?;
        self.dumps += 1;
        let file = self.dir.join(format!("callgrind.out.{}", self.dumps));
        let text =
            std::fs::read_to_string(&file).with_context(|| format!("no dump at {}", file.display()))?;
        // Each dump is a file of its own; only its summary line is wanted, unless it is kept.
        match keep {
            Some(to) => {
                std::fs::copy(&file, to)
                    .with_context(|| format!("cannot keep the profile at {}", to.display()))?;
                let _ = std::fs::remove_file(&file);
            }
            None => {
                let _ = std::fs::remove_file(&file);
            }
        }
        text.lines()
            .find_map(|line| line.strip_prefix("summary:"))
            .and_then(|n| n.trim().parse().ok())
            .with_context(|| format!("the dump {} has no summary line", file.display()))
    }

    fn control(&self, flag: &str) -> anyhow::Result<()> {
        let output = Command::new("callgrind_control")
            .arg(flag)
            .arg(self.child.id().to_string())
            .output()
            .context("cannot run callgrind_control")?;
        if !output.status.success() {
            bail!("callgrind_control {flag} failed: {}", String::from_utf8_lossy(&output.stderr));
        }
        Ok(())
    }
}

impl Drop for CallgrindRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
