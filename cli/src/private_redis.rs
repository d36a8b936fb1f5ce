//! A throwaway `redis-server` for `conveyor up` on a machine with no Redis running.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::process::{Child, Command};

/// A `redis-server` child process in its own temporary directory; stopped and removed on drop.
pub struct PrivateRedis {
    child: Child,
    dir: PathBuf,
    pub url: String,
}

impl PrivateRedis {
    /// Starts `redis-server` from `PATH` on a free loopback port and waits until it answers, as
    /// itself: the port is free when chosen, but another process may bind it before ours does,
    /// and `up` would then run against that process's Redis. Another port is tried then.
    pub async fn start() -> anyhow::Result<Self> {
        for _ in 0..5 {
            if let Some(redis) = Self::start_once().await? {
                return Ok(redis);
            }
        }
        bail!("every free port tried for a private redis-server was taken by another process first")
    }

    /// One try on one port: `None` when another process answers on it (ours is stopped).
    async fn start_once() -> anyhow::Result<Option<Self>> {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .context("no free local port for a private redis-server")?
            .port();
        let dir = std::env::temp_dir().join(format!("conveyor-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn();
        let child = match child {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
                "no Redis answers at REDIS_URL and there is no redis-server on PATH. Install Redis \
                 (Debian/Ubuntu: `apt-get install redis-server`; macOS: `brew install redis`) or set \
                 REDIS_URL to a running Redis"
            ),
            Err(e) => return Err(e).context("cannot start redis-server"),
        };
        let mut redis = Self { child, dir, url: format!("redis://127.0.0.1:{port}") };
        let ours = redis.child.id();
        let client = redis::Client::open(redis.url.as_str())?;
        for _ in 0..100 {
            if let Ok(mut conn) = client.get_multiplexed_async_connection().await
                && let Ok(info) = redis::cmd("INFO").arg("server").query_async::<String>(&mut conn).await
            {
                let answering = info
                    .lines()
                    .find_map(|l| l.strip_prefix("process_id:"))
                    .and_then(|p| p.trim().parse().ok());
                return Ok((answering == ours).then_some(redis));
            }
            if let Some(status) = redis.child.try_wait().ok().flatten() {
                // Ours could not bind the port because another process holds it: the next port.
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return Ok(None);
                }
                bail!("the private redis-server on port {port} exited ({status}); its own words are above");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!("the private redis-server on port {port} did not answer within 5 s")
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
