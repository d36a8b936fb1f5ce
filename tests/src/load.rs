//! What the benchmarks share: synchronous `tools/call`s (of the `noop` fixture, or any
//! [`SyncRequest`]) as a 2026-07-28 client sends them, driven from this process; latency percentiles; and CPU readings of
//! processes (`/proc/<pid>/stat`) and of Redis (`INFO cpu`); and [`BenchProcess`], a `conveyor`
//! process at the binary's own log level; and [`at_least_one`], the parser of their count flags.

use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use serde_json::json;

use crate::RedisServer;

/// Synchronous `tools/call`s as a 2026-07-28 client without the tasks extension sends them (the
/// headers and `_meta` of [`crate::Mcp::call_2026`]), of one [`SyncRequest`], the body made once.
#[derive(Clone)]
pub struct SyncCaller {
    http: reqwest::Client,
    url: String,
    headers: reqwest::header::HeaderMap,
    body: String,
    expect: String,
}

/// One synchronous 2026-07-28 `tools/call` (no tasks extension: the gateway answers with the
/// result): its body, its headers, and what its reply holds when the call succeeded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncRequest {
    /// The tool called (the `Mcp-Name` header).
    pub tool: String,
    /// The JSON-RPC request.
    pub body: String,
    /// What a successful reply body contains: the tool's text as JSON, `"text":"<text>"`.
    pub expect: String,
}

impl SyncRequest {
    /// A call of `tool` with `arguments`, whose reply holds a text content of `reply_text`.
    pub fn new(tool: &str, arguments: serde_json::Value, reply_text: &str) -> Self {
        let body = json!({
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "name": tool,
                "arguments": arguments,
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientInfo": {"name": "conveyor-bench", "version": "1"},
                    "io.modelcontextprotocol/clientCapabilities": {},
                },
            },
        })
        .to_string();
        let expect = format!(r#""text":{}"#, serde_json::Value::from(reply_text));
        Self { tool: tool.to_owned(), body, expect }
    }

    /// A call of the `noop` fixture, which answers `ok`.
    pub fn noop() -> Self {
        Self::new("noop", json!({}), "ok")
    }

    /// The HTTP headers of the call.
    pub fn headers(&self) -> [(&'static str, &str); 5] {
        [
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", &self.tool),
        ]
    }
}

impl SyncCaller {
    /// Calls of `noop`.
    pub fn new(url: &str) -> anyhow::Result<Self> {
        Self::with_request(url, &SyncRequest::noop())
    }

    /// Calls of `request`.
    pub fn with_request(url: &str, request: &SyncRequest) -> anyhow::Result<Self> {
        let mut headers = reqwest::header::HeaderMap::new();
        for (name, value) in request.headers() {
            headers.insert(reqwest::header::HeaderName::from_bytes(name.as_bytes())?, value.parse()?);
        }
        let http = reqwest::Client::builder().timeout(Duration::from_secs(60)).build()?;
        Ok(Self {
            http,
            url: url.to_owned(),
            headers,
            body: request.body.clone(),
            expect: request.expect.clone(),
        })
    }

    /// One call; its time from send to the whole reply.
    pub async fn call(&self) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let response =
            self.http.post(&self.url).headers(self.headers.clone()).body(self.body.clone()).send().await?;
        let status = response.status();
        let text = response.text().await?;
        let elapsed = started.elapsed();
        anyhow::ensure!(
            status == 200 && text.contains(&self.expect),
            "a sync call answered {status}: {text}"
        );
        Ok(elapsed)
    }
}

/// `calls` sync calls, `concurrency` in flight, from this process: the wall time and each call's.
pub async fn drive(
    caller: &SyncCaller,
    calls: u64,
    concurrency: usize,
) -> anyhow::Result<(Duration, Vec<Duration>)> {
    let started = Instant::now();
    let latencies: Vec<anyhow::Result<Duration>> =
        futures::stream::iter(0..calls).map(|_| caller.call()).buffer_unordered(concurrency).collect().await;
    let elapsed = started.elapsed();
    Ok((elapsed, latencies.into_iter().collect::<anyhow::Result<_>>()?))
}

/// Percentiles of a run, in milliseconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Latencies {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Latencies {
    pub fn of(mut samples: Vec<Duration>) -> Self {
        samples.sort();
        let at = |p: f64| {
            let Some(last) = samples.len().checked_sub(1) else { return 0.0 };
            samples[((last as f64 * p).round() as usize).min(last)].as_secs_f64() * 1000.0
        };
        Self { p50: at(0.50), p90: at(0.90), p99: at(0.99), max: at(1.0) }
    }
}

impl std::fmt::Display for Latencies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "p50 {:.2} ms  p90 {:.2} ms  p99 {:.2} ms  max {:.2} ms",
            self.p50, self.p90, self.p99, self.max
        )
    }
}

/// Parses a count flag of a benchmark: a whole number, 1 or more (a run of none measures nothing).
pub fn at_least_one<T: TryFrom<u64>>() -> clap::builder::RangedU64ValueParser<T> {
    clap::builder::RangedU64ValueParser::new().range(1..)
}

/// Redis's own CPU time so far (`used_cpu_sys + used_cpu_user` from `INFO cpu`).
pub fn redis_cpu_seconds(redis: &RedisServer) -> anyhow::Result<f64> {
    redis_cpu_seconds_on(&mut redis.connection()?)
}

/// [`redis_cpu_seconds`] on a connection already open (so that no new connection's handshake
/// shows among the commands of a window being counted).
pub fn redis_cpu_seconds_on(conn: &mut redis::Connection) -> anyhow::Result<f64> {
    let info: String = redis::cmd("INFO").arg("cpu").query(conn)?;
    let field = |name: &str| -> anyhow::Result<f64> {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .with_context(|| format!("INFO cpu has no {name}"))?
            .trim()
            .parse()
            .with_context(|| format!("INFO cpu's {name} is not a number"))
    };
    Ok(field("used_cpu_sys")? + field("used_cpu_user")?)
}

/// A process's CPU time so far (`utime + stime` of `/proc/<pid>/stat`, all threads); 0 when it
/// cannot be read.
pub fn process_cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0.0 };
    // The command name in parentheses may hold spaces: count fields after its closing one, where
    // field 3 (state) is index 0, utime (14) is index 11 and stime (15) index 12.
    let Some((_, rest)) = stat.rsplit_once(')') else { return 0.0 };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / clock_ticks()
}

/// Clock ticks per second of `/proc` times.
fn clock_ticks() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// A `conveyor` process at the binary's own log level (`info`, or `RUST_LOG` from the bench's
/// environment), not the end-to-end tests' debug level, whose line per node would cost CPU that a
/// deployment does not spend. A gateway (or `up`) listens on a free port and is waited for.
pub struct BenchProcess {
    pub command: &'static str,
    pub child: std::process::Child,
    /// `http://127.0.0.1:<port>` of a gateway or `up`; empty for a worker.
    pub base: String,
    log: std::path::PathBuf,
}

impl BenchProcess {
    /// `conveyor <command> <args>`, with `set` added to and `removed` taken from the bench's
    /// environment.
    pub fn start(
        command: &'static str,
        redis_url: &str,
        args: &[&str],
        set: &[(&str, String)],
        removed: &[std::ffi::OsString],
    ) -> anyhow::Result<Self> {
        let log = crate::process::scratch_dir(&format!("bench-{command}")).join("conveyor.log");
        let file = std::fs::File::create(&log)?;
        let mut cmd = Command::new(crate::process::conveyor_bin());
        cmd.arg(command).args(args);
        for name in removed {
            cmd.env_remove(name);
        }
        cmd.env("REDIS_URL", redis_url)
            .envs(crate::process::test_process_env(args, &[]))
            .envs(set.iter().map(|(k, v)| (k, v)))
            .stdin(std::process::Stdio::null());
        let serving = matches!(command, "gateway" | "up");
        if serving {
            // The kernel picks the port as the process binds it: see `process::free_port`.
            cmd.args(["--listen", "127.0.0.1:0"]);
        }
        let child = cmd.stdout(file.try_clone()?).stderr(file).spawn().context("cannot start conveyor")?;
        let mut proc = Self { command, child, base: String::new(), log };
        if serving {
            let address = crate::process::wait_listening(&mut proc.child, &proc.log, Duration::from_secs(30))
                .with_context(|| format!("conveyor {command}"))?;
            proc.base = format!("http://{address}");
        }
        Ok(proc)
    }

    pub fn mcp_url(&self) -> String {
        format!("{}/mcp", self.base)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, then waits for a clean exit (asynchronously: a receiver in the bench's process may
    /// have to go on answering the process's last exports).
    pub async fn terminate(&mut self) -> anyhow::Result<()> {
        let pid = self.child.id();
        let _ = Command::new("kill").arg("-TERM").arg(pid.to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait()? {
                anyhow::ensure!(
                    status.success(),
                    "conveyor {} exited ({status}) on SIGTERM; log:\n{}",
                    self.command,
                    self.log_text()
                );
                return Ok(());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "conveyor {} did not exit within 60 s of SIGTERM; log:\n{}",
                self.command,
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

impl Drop for BenchProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
