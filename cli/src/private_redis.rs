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
    /// Starts `redis-server` from `PATH` on a free loopback port and waits until it answers.
    pub async fn start() -> anyhow::Result<Self> {
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
        let redis = Self { child, dir, url: format!("redis://127.0.0.1:{port}") };
        let client = redis::Client::open(redis.url.as_str())?;
        for _ in 0..100 {
            if let Ok(mut conn) = client.get_multiplexed_async_connection().await
                && redis::cmd("PING").query_async::<String>(&mut conn).await.is_ok()
            {
                return Ok(redis);
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
