//! Real processes for tests: `redis-server` and `conveyor`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// How long a process's log must stay unchanged before [`Conveyor::log_text`] reads it.
const LOG_QUIET: Duration = Duration::from_millis(100);
/// How long [`Conveyor::log_text`] waits at most for a growing log to settle.
const LOG_SETTLE_MAX: Duration = Duration::from_secs(3);

/// The shard a task id names (whatever the deployment's shard count).
pub fn shard_of(task_id: &str) -> conveyor_shared::keys::Shard {
    conveyor_shared::keys::shard_of(task_id, conveyor_shared::keys::MAX_SHARDS)
        .unwrap_or(conveyor_shared::keys::Shard(0))
}

/// The key of a task's hash.
pub fn task_key(task_id: &str) -> String {
    shard_of(task_id).task(task_id)
}

/// The key of the hash that holds a task's nodes (`<node>:<field>`): the task's own.
pub fn nodes_key(task_id: &str) -> String {
    shard_of(task_id).task(task_id)
}

/// The keys matching `pattern` on one server, each once (`SCAN`, so that a big keyspace is not
/// blocked).
pub fn scan(conn: &mut redis::Connection, pattern: &str) -> redis::RedisResult<Vec<String>> {
    let mut keys = std::collections::BTreeSet::new();
    let mut cursor = 0u64;
    loop {
        let (next, batch): (u64, Vec<String>) =
            redis::cmd("SCAN").arg(cursor).arg("MATCH").arg(pattern).arg("COUNT").arg(1000).query(conn)?;
        keys.extend(batch);
        if next == 0 {
            return Ok(keys.into_iter().collect());
        }
        cursor = next;
    }
}

/// A TCP port on the loopback interface that was free a moment ago, from the kernel's range of
/// ephemeral ports. Good for a unique name; not for a server to listen on: released, the port goes
/// back to the range, and the kernel may hand it to another socket (another test's listener, any
/// outgoing connection) before the server binds it, and then the test talks to someone else's
/// server. A `conveyor` process listens on port 0 and says where ([`Conveyor::gateway`]); a
/// server that must be told its port gets a [`server_port`].
pub fn free_port() -> u16 {
    #[allow(clippy::expect_used)] // tests cannot run at all without a local port
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free local port")
}

/// The lowest port [`server_port`] hands out: below are the ports of well-known services.
const SERVER_PORTS_FROM: u16 = 10_000;

/// The first port of the kernel's ephemeral range (`bind` to port 0, outgoing connections).
pub fn ephemeral_ports_from() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// A free port for a server that must be told its port before it starts (`redis-server`,
/// nginx): chosen at random below the kernel's ephemeral range, where neither `bind` to port 0 nor
/// an outgoing connection ever lands, so that only another such choice can take it before the
/// server binds it (and whoever starts the server still checks that the one answering is its
/// own, as [`RedisServer`] does).
pub fn server_port() -> u16 {
    server_port_below(ephemeral_ports_from())
}

/// [`server_port`] below `limit` (which the ephemeral range lowers further): for a server that
/// also listens on a port above its own (a cluster node's bus port).
pub fn server_port_below(limit: u16) -> u16 {
    let limit = limit.min(ephemeral_ports_from());
    let span = limit.saturating_sub(SERVER_PORTS_FROM);
    if span >= 1_000 {
        for _ in 0..1_000 {
            let port = SERVER_PORTS_FROM + (random_u64() % u64::from(span)) as u16;
            if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return port;
            }
        }
    }
    // No room below the ephemeral range on this machine: the next best.
    free_port()
}

fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    // Each RandomState is seeded afresh (per process, then per state): random enough to spread
    // ports, and no dependency for it.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos(),
    );
    hasher.finish()
}

/// The address a `conveyor` process's log says a listener of its is at: what follows `marker`
/// (`"MCP at http://"`, `"metrics at http://"`) up to the next `/`.
pub fn logged_address(log: &str, marker: &str) -> Option<String> {
    let at = log.find(marker)? + marker.len();
    let address: String =
        log[at..].chars().take_while(|c| *c != '/' && !c.is_whitespace() && *c != '"').collect();
    address.parse::<std::net::SocketAddr>().is_ok().then_some(address)
}

/// Waits until the `conveyor` process `child`, started with `--listen 127.0.0.1:0`, logs where
/// it listens (the kernel chose a free port as it bound it, so no other process can hold it), and
/// returns that address once it accepts connections.
pub fn wait_listening(child: &mut Child, log: &Path, within: Duration) -> anyhow::Result<String> {
    let deadline = Instant::now() + within;
    let text = || std::fs::read_to_string(log).unwrap_or_default();
    loop {
        if let Some(address) = logged_address(&text(), "MCP at http://")
            && std::net::TcpStream::connect(&address).is_ok()
        {
            return Ok(address);
        }
        if let Ok(Some(status)) = child.try_wait() {
            bail!("conveyor exited ({status}) before serving; log:\n{}", text());
        }
        if Instant::now() >= deadline {
            bail!("conveyor did not start serving within {within:?}; log:\n{}", text());
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// The workspace's root directory.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default()
}

/// Cargo's target directory: `CARGO_TARGET_DIR` when set, else `<workspace>/target`. Builds,
/// scratch directories, installed clients and test artifacts all go there.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace_root().join("target"))
}

/// A finished process's exit status and output, for a failure message.
pub fn output_text(output: &std::process::Output) -> String {
    format!(
        "exit: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// A scratch directory for one process, under the target directory so that logs survive a failed
/// test for inspection. Made new, never shared: two processes that wrote one log (or one Redis
/// directory) would read each other's lines (and data), so the name is one no directory has yet,
/// in this run or a run before it.
pub fn scratch_dir(name: &str) -> PathBuf {
    static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let parent = target_dir().join("e2e");
    let _ = std::fs::create_dir_all(&parent);
    loop {
        let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = parent.join(format!("{name}-{}-{n}", std::process::id()));
        match std::fs::create_dir(&dir) {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            // Anything else shows when the process writes its first file there.
            _ => return dir,
        }
    }
}

static PREFER_RELEASE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes [`conveyor_bin`] build and use the release binary (for benchmarks); call it first.
pub fn prefer_release_binary() {
    PREFER_RELEASE.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// The `conveyor` binary.
///
/// The end-to-end tests are `conveyor-cli`'s integration tests (`cli/tests/e2e`): they run from
/// `<target>/<profile>/deps/`, and cargo built the package's `conveyor` binary beside that
/// directory before it ran them (it is their `CARGO_BIN_EXE_conveyor`), so they use that one and
/// build nothing. Any other caller (a benchmark) gets it built once per process with the same
/// cargo: the debug build, or the release build after [`prefer_release_binary`] or with
/// `CONVEYOR_TEST_RELEASE=1`.
pub fn conveyor_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(built) = built_beside_tests() {
            return built;
        }
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        let release = PREFER_RELEASE.load(std::sync::atomic::Ordering::Relaxed)
            || std::env::var("CONVEYOR_TEST_RELEASE").is_ok_and(|v| v == "1");
        let mut build = Command::new(cargo);
        build.current_dir(workspace_root()).args(["build", "-q", "-p", "conveyor-cli", "--bin", "conveyor"]);
        without_package_env(&mut build);
        if release {
            build.arg("--release");
        }
        #[allow(clippy::expect_used)] // without the binary no end-to-end test can run
        let status = build.status().expect("cargo runs");
        assert!(status.success(), "building the conveyor binary failed");
        target_dir().join(if release { "release" } else { "debug" }).join("conveyor")
    })
}

/// The `conveyor` binary cargo built for the integration tests this process runs: the one in the
/// profile directory above `deps/`, where a test executable lives. `None` for anything else (a
/// benchmark runs from the profile directory itself), or when `CONVEYOR_TEST_RELEASE=1` asks for
/// the release build.
fn built_beside_tests() -> Option<PathBuf> {
    if std::env::var("CONVEYOR_TEST_RELEASE").is_ok_and(|v| v == "1") {
        return None;
    }
    let exe = std::env::current_exe().ok()?;
    let deps = exe.parent()?;
    if deps.file_name()? != "deps" {
        return None;
    }
    let bin = deps.parent()?.join(format!("conveyor{}", std::env::consts::EXE_SUFFIX));
    bin.is_file().then_some(bin)
}

/// Leaves out of a nested cargo's environment what `cargo test` sets for the test itself (the
/// package's name, version and directory, ...). Build scripts that watch such variables (ring's)
/// would otherwise see them change between the outer build and this one, and both would rebuild
/// them, and everything above them, on every run.
fn without_package_env(command: &mut Command) {
    const SET_FOR_TESTS: [&str; 6] = [
        "CARGO_MANIFEST_DIR",
        "CARGO_MANIFEST_PATH",
        "CARGO_CRATE_NAME",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_TARGET_TMPDIR",
        "CARGO_RUSTC_CURRENT_DIR",
    ];
    for (name, _) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        if SET_FOR_TESTS.contains(&name) || name.starts_with("CARGO_PKG_") || name.starts_with("CARGO_BIN_") {
            command.env_remove(name);
        }
    }
}

/// An example program of a workspace package, built with the same cargo that runs the tests. With
/// the workspace's feature set, so that after `cargo test --workspace` (which builds every
/// example) this is a check that finds it fresh, not a second build of its dependencies.
pub fn example_bin(example: &str) -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut build = Command::new(cargo);
    without_package_env(&mut build);
    #[allow(clippy::expect_used)] // without the binary the test cannot run
    let status = build
        .current_dir(workspace_root())
        .args(["build", "-q", "--workspace", "--example", example])
        .status()
        .expect("cargo runs");
    assert!(status.success(), "building example {example} failed");
    target_dir().join("debug").join("examples").join(example)
}

/// Redis commands per unit of work between two [`RedisServer::command_stats`] readings: the total,
/// and each command's share, busiest first.
pub fn commands_per(
    before: &std::collections::HashMap<String, u64>,
    after: &std::collections::HashMap<String, u64>,
    units: f64,
) -> (f64, Vec<(String, f64)>) {
    let mut per: Vec<(String, f64)> = after
        .iter()
        .map(|(name, count)| {
            (
                name.clone(),
                count.saturating_sub(before.get(name).copied().unwrap_or(0)) as f64 / units.max(1.0),
            )
        })
        .filter(|(_, n)| *n > 0.0)
        .collect();
    per.sort_by(|a, b| b.1.total_cmp(&a.1));
    (per.iter().map(|(_, n)| n).sum(), per)
}

/// A `redis-server` of the test's own, on a free port.
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    pub dir: PathBuf,
    extra: Vec<String>,
}

impl RedisServer {
    /// Starts a server that keeps nothing on disk.
    pub fn start() -> anyhow::Result<Self> {
        Self::start_with(&["--save", "", "--appendonly", "no"])
    }

    /// Starts a server with extra arguments (for example `--appendonly yes`).
    pub fn start_with(args: &[&str]) -> anyhow::Result<Self> {
        let mut server = Self {
            child: None,
            port: server_port(),
            dir: scratch_dir("redis"),
            extra: args.iter().map(|s| s.to_string()).collect(),
        };
        server.start_on_a_free_port()?;
        Ok(server)
    }

    /// Spawns the server on its port, or on another when another process took that one first.
    fn start_on_a_free_port(&mut self) -> anyhow::Result<()> {
        for _ in 0..10 {
            match self.spawn()? {
                Spawned::Ours => return Ok(()),
                Spawned::PortTaken(_) => self.port = server_port(),
            }
        }
        bail!("every port tried for redis-server was taken by another process first")
    }

    /// Spawns `redis-server` on `self.port` and waits until it answers, as itself: a process that
    /// took the port first would answer PING just as well, and the test would then run against
    /// another test's server.
    fn spawn(&mut self) -> anyhow::Result<Spawned> {
        let log_path = self.dir.join("redis.log");
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&log_path)?;
        let logged_before = log.metadata()?.len() as usize;
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra)
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("redis-server must be on PATH for the end-to-end tests")?;
        let ours = child.id();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(answering) = self.server_pid() {
                if answering == ours {
                    return Ok(Spawned::Ours);
                }
                self.kill();
                return Ok(Spawned::PortTaken(format!("process {answering} answers on port {}", self.port)));
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                self.child = None;
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                let this_run = log.get(logged_before..).unwrap_or_default();
                if this_run.contains("Address already in use") {
                    return Ok(Spawned::PortTaken(format!(
                        "port {} is in use by another process",
                        self.port
                    )));
                }
                bail!("redis-server on port {} exited ({status}):\n{this_run}", self.port);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
        bail!("redis-server on port {} did not answer", self.port)
    }

    /// The process id of the server answering on the port (`INFO server`), once one answers.
    fn server_pid(&self) -> Option<u32> {
        let mut conn = redis::Client::open(self.url())
            .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
            .ok()?;
        let info: String = redis::cmd("INFO").arg("server").query(&mut conn).ok()?;
        info.lines().find_map(|l| l.strip_prefix("process_id:"))?.trim().parse().ok()
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// A replica of `primary` that keeps nothing on disk and takes `DEBUG` (whose `DEBUG SLEEP`
    /// stands for a replica that stalls), once the primary sees it online.
    pub fn start_replica_of(primary: &RedisServer) -> anyhow::Result<Self> {
        let port = primary.port.to_string();
        let replica = Self::start_with(&[
            "--save",
            "",
            "--appendonly",
            "no",
            "--enable-debug-command",
            "yes",
            "--replicaof",
            "127.0.0.1",
            &port,
        ])?;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let mut conn = primary.connection()?;
            let info: String = redis::cmd("INFO").arg("replication").query(&mut conn)?;
            if info.contains("connected_slaves:1") && info.contains("state=online") {
                return Ok(replica);
            }
            if Instant::now() > deadline {
                bail!("the replica never came online:\n{info}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether the server answers PING.
    pub fn ping(&self) -> bool {
        redis::Client::open(self.url())
            .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
            .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
            .is_ok()
    }

    /// A blocking connection for assertions on Redis state.
    pub fn connection(&self) -> anyhow::Result<redis::Connection> {
        Ok(redis::Client::open(self.url())?.get_connection_with_timeout(Duration::from_secs(2))?)
    }

    /// Calls per command from `INFO commandstats` (commands inside scripts count too; `info` is
    /// left out), for benchmarks that count Redis commands.
    pub fn command_stats(&self) -> anyhow::Result<std::collections::HashMap<String, u64>> {
        let mut conn = self.connection()?;
        let info: String = redis::cmd("INFO").arg("commandstats").query(&mut conn)?;
        Ok(info
            .lines()
            .filter_map(|line| {
                let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
                let calls = rest.split(',').find_map(|kv| kv.strip_prefix("calls="))?.parse().ok()?;
                Some((name.to_owned(), calls))
            })
            .filter(|(name, _)| name != "info")
            .collect())
    }

    /// Waits until a node of a task has `status`, or fails after `timeout`.
    pub async fn wait_node_status(
        &self,
        task_id: &str,
        node_id: &str,
        status: &str,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        let reached = |now: Option<String>| match now.as_deref() {
            Some(now) if now == status => true,
            // A lean node runs from its entry's delivery and shows `queued` until it ends
            // (docs/adr/0028): it is running once its entry is pending with a worker.
            Some("queued") if status == "running" => self.lean_node_running(task_id, node_id),
            _ => false,
        };
        while !reached(self.node_field(task_id, node_id, "status")) {
            anyhow::ensure!(
                Instant::now() < deadline,
                "node {node_id} of task {task_id} never became {status}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Whether a queued node's lean entry (one that carries its call) was delivered to a worker: a
    /// lean node's attempt runs from its delivery (docs/adr/0028).
    pub fn lean_node_running(&self, task_id: &str, node_id: &str) -> bool {
        let Ok(mut conn) = self.connection() else { return false };
        let fields = [format!("{node_id}:entry"), format!("{node_id}:q"), "queues".to_owned()];
        let Ok((entry, q, queues)) =
            redis::cmd("HMGET").arg(nodes_key(task_id)).arg(&fields).query::<(
                Option<String>,
                Option<usize>,
                Option<String>,
            )>(&mut conn)
        else {
            return false;
        };
        let queues: Vec<String> = queues.and_then(|q| serde_json::from_str(&q).ok()).unwrap_or_default();
        let (Some(entry), Some(queue)) =
            (entry.filter(|e| !e.is_empty()), q.and_then(|q| queues.get(q.wrapping_sub(1))))
        else {
            return false;
        };
        let stream = shard_of(task_id).queue(queue);
        // Only a lean entry (it carries the call) starts its node by its delivery.
        let read: Vec<(String, std::collections::HashMap<String, String>)> =
            redis::cmd("XRANGE").arg(&stream).arg(&entry).arg(&entry).query(&mut conn).unwrap_or_default();
        if !read.first().is_some_and(|(_, fields)| fields.contains_key("call")) {
            return false;
        }
        redis::cmd("XPENDING")
            .arg(&stream)
            .arg("workers")
            .arg(&entry)
            .arg(&entry)
            .arg(1)
            .query::<Vec<redis::Value>>(&mut conn)
            .is_ok_and(|pending| !pending.is_empty())
    }

    /// One field of a node of a task (`<node>:<field>` in the task's hash).
    pub fn node_field(&self, task_id: &str, node_id: &str, field: &str) -> Option<String> {
        let mut conn = self.connection().ok()?;
        redis::cmd("HGET").arg(nodes_key(task_id)).arg(format!("{node_id}:{field}")).query(&mut conn).ok()?
    }

    /// Keys matching a pattern (SCAN, so that a big keyspace is not blocked).
    pub fn keys(&self, pattern: &str) -> Vec<String> {
        self.connection().and_then(|mut conn| Ok(scan(&mut conn, pattern)?)).unwrap_or_default()
    }

    /// Task hashes in every shard.
    pub fn task_count(&self) -> usize {
        self.keys("cv:{cv.*}:t:*").len()
    }

    /// Entries in every queue stream of every shard (acknowledged entries are deleted, so these
    /// are waiting or running nodes and finalize entries).
    pub fn stream_entries(&self) -> usize {
        let Ok(mut conn) = self.connection() else { return 0 };
        self.keys("cv:{cv.*}:q:*")
            .iter()
            .map(|k| redis::cmd("XLEN").arg(k).query::<usize>(&mut conn).unwrap_or(0))
            .sum()
    }

    /// What Conveyor has written: task hashes and queue stream entries ([`Self::task_count`],
    /// [`Self::stream_entries`]).
    pub fn written(&self) -> (usize, usize) {
        (self.task_count(), self.stream_entries())
    }

    /// Entries delivered to a worker and not yet acknowledged, over every queue stream.
    pub fn pending_entries(&self) -> usize {
        let Ok(mut conn) = self.connection() else { return 0 };
        self.keys("cv:{cv.*}:q:*")
            .iter()
            .map(|k| {
                redis::cmd("XPENDING")
                    .arg(k)
                    .arg("workers")
                    .query::<redis::Value>(&mut conn)
                    .ok()
                    .and_then(|v| match v {
                        redis::Value::Array(items) => {
                            items.first().and_then(|c| redis::from_redis_value_ref::<usize>(c).ok())
                        }
                        _ => None,
                    })
                    .unwrap_or(0)
            })
            .sum()
    }

    /// The load counters summed over every shard.
    pub fn load_totals(&self) -> std::collections::HashMap<String, i64> {
        let Ok(mut conn) = self.connection() else { return Default::default() };
        let mut totals = std::collections::HashMap::new();
        for key in self.keys("cv:{cv.*}:load") {
            let hash: std::collections::HashMap<String, i64> =
                redis::cmd("HGETALL").arg(&key).query(&mut conn).unwrap_or_default();
            for (field, value) in hash {
                *totals.entry(field).or_insert(0) += value;
            }
        }
        totals
    }

    /// Every dead-letter entry of every shard, as (field, value) lists.
    pub fn dead_letters(&self) -> Vec<Vec<(String, String)>> {
        let Ok(mut conn) = self.connection() else { return Vec::new() };
        let mut letters = Vec::new();
        for key in self.keys("cv:{cv.*}:dead") {
            let entries: Vec<(String, Vec<(String, String)>)> =
                redis::cmd("XRANGE").arg(&key).arg("-").arg("+").query(&mut conn).unwrap_or_default();
            letters.extend(entries.into_iter().map(|(_, fields)| fields));
        }
        letters
    }

    /// Kills the server with SIGKILL (nothing flushed beyond what its persistence already wrote).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and directory. Fails, rather than going on
    /// against a stranger, when another process took the port while the server was down.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.kill();
        match self.spawn()? {
            Spawned::Ours => Ok(()),
            Spawned::PortTaken(why) => {
                bail!("redis-server cannot restart where its clients expect it: {why}")
            }
        }
    }
}

/// Whether a spawned `redis-server` is the one answering on its port.
enum Spawned {
    Ours,
    /// Another process holds the port (what it is, for a message); ours is gone.
    PortTaken(String),
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What every `conveyor` process a test starts has in its environment: it is a test process
/// (so it may load the fixtures that harm it), and, unless the test configures authentication,
/// it serves without any, as `--no-auth` asks.
pub fn test_process_env(args: &[&str], env: &[(&str, &str)]) -> Vec<(&'static str, &'static str)> {
    let mut vars = vec![("CONVEYOR_TEST_PROCESS", "1")];
    let auth_flags = ["--tokens-file", "--jwt-issuer", "--jwks", "--no-auth"];
    let auth_env = ["CONVEYOR_TOKENS_FILE", "CONVEYOR_JWT_ISSUER", "CONVEYOR_JWKS", "CONVEYOR_NO_AUTH"];
    let configured = args.iter().any(|a| auth_flags.iter().any(|f| a.starts_with(f)))
        || env.iter().any(|(k, _)| auth_env.contains(k));
    if !configured {
        vars.push(("CONVEYOR_NO_AUTH", "true"));
    }
    vars
}

/// Peak resident memory of a process (`VmHWM`), in bytes.
pub fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    kib * 1024
}

/// A running `conveyor` process.
pub struct Conveyor {
    child: Option<Child>,
    /// `http://127.0.0.1:<port>` for gateways and `up`; empty for workers.
    pub base: String,
    pub log: PathBuf,
}

impl Conveyor {
    /// `conveyor up` with the given extra arguments, listening on a free port.
    pub fn up(redis_url: &str, args: &[&str]) -> anyhow::Result<Self> {
        Self::serving("up", redis_url, args)
    }

    /// `conveyor gateway`, listening on a free port.
    pub fn gateway(redis_url: &str, args: &[&str]) -> anyhow::Result<Self> {
        Self::serving("gateway", redis_url, args)
    }

    /// Any program that takes `REDIS_URL`, such as a worker with tools of its own.
    pub fn program(program: &Path, redis_url: &str) -> anyhow::Result<Self> {
        let log = scratch_dir("program").join("program.log");
        let file = std::fs::File::create(&log)?;
        let child = Command::new(program)
            .env("REDIS_URL", redis_url)
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("cannot start {}", program.display()))?;
        Ok(Self { child: Some(child), base: String::new(), log })
    }

    /// `conveyor worker` with the given extra arguments.
    pub fn worker(redis_url: &str, args: &[&str]) -> anyhow::Result<Self> {
        let (child, log) = Self::spawn("worker", redis_url, args)?;
        Ok(Self { child: Some(child), base: String::new(), log })
    }

    fn serving(command: &str, redis_url: &str, args: &[&str]) -> anyhow::Result<Self> {
        let mut all = vec!["--listen", "127.0.0.1:0"];
        all.extend_from_slice(args);
        let (child, log) = Self::spawn(command, redis_url, &all)?;
        let mut conveyor = Self { child: Some(child), base: String::new(), log };
        conveyor.wait_healthy()?;
        Ok(conveyor)
    }

    fn spawn(command: &str, redis_url: &str, args: &[&str]) -> anyhow::Result<(Child, PathBuf)> {
        let log = scratch_dir(command).join("conveyor.log");
        let file = std::fs::File::create(&log)?;
        let child = Command::new(conveyor_bin())
            .arg(command)
            .args(args)
            .env("REDIS_URL", redis_url)
            .env("RUST_LOG", "info,conveyor_worker=debug,conveyor_gateway=debug")
            .envs(test_process_env(args, &[]))
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .context("cannot start conveyor")?;
        Ok((child, log))
    }

    /// The MCP endpoint.
    pub fn mcp_url(&self) -> String {
        format!("{}/mcp", self.base)
    }

    /// Waits until the process, listening on a port the kernel chose, says where, and sets
    /// [`Conveyor::base`] to it.
    fn wait_healthy(&mut self) -> anyhow::Result<()> {
        let child = self.child.as_mut().context("the process was not started")?;
        let address = wait_listening(child, &self.log, Duration::from_secs(20))?;
        self.base = format!("http://{address}");
        Ok(())
    }

    /// Where the process's metrics listener (`--metrics-listen 127.0.0.1:0`) is, once it says.
    pub fn metrics_base(&self) -> Option<String> {
        logged_address(&self.log_now(), "metrics at http://").map(|address| format!("http://{address}"))
    }

    /// [`Conveyor::metrics_base`], waited for (a worker says it once it has connected to Redis).
    pub fn wait_metrics_base(&self, within: Duration) -> anyhow::Result<String> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(base) = self.metrics_base() {
                return Ok(base);
            }
            if Instant::now() >= deadline {
                bail!("no metrics listener within {within:?}; log:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// The process's log so far. A process writes its log lines from a thread of its own, a moment
    /// after it logs them: the
    /// text is read once it has stopped growing for [`LOG_QUIET`] (at most [`LOG_SETTLE_MAX`]), so
    /// that a line logged before the step a test saw is in it.
    pub fn log_text(&self) -> String {
        let read = || self.log_now();
        let deadline = Instant::now() + LOG_SETTLE_MAX;
        let mut text = read();
        loop {
            std::thread::sleep(LOG_QUIET);
            let now = read();
            if now.len() == text.len() || Instant::now() >= deadline {
                return now;
            }
            text = now;
        }
    }

    /// The process's log as written so far, for a helper that polls it until a line appears.
    fn log_now(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The consumer name a worker logged when it started (`worker started ...
    /// worker=worker-<32 hex digits>`), once it has.
    pub fn logged_worker_name(&self) -> Option<String> {
        let log = self.log_now();
        let line = log.lines().find(|l| l.contains("worker started"))?;
        let at = line.find("worker-")?;
        let name: String = line[at..].chars().take("worker-".len() + 32).collect();
        let hex = name.strip_prefix("worker-")?;
        (hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then_some(name)
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends a signal (e.g. "KILL", "TERM") to the process.
    pub fn signal(&self, signal: &str) {
        if let Some(pid) = self.pid() {
            let _ = Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status();
        }
    }

    /// Kills the process with SIGKILL and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits up to `timeout` for the process to exit; returns whether it did.
    pub fn wait_exit(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            match self.child.as_mut().map(Child::try_wait) {
                None | Some(Ok(Some(_))) => {
                    self.child = None;
                    return true;
                }
                _ => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        false
    }
}

/// Processes started with settings given by environment (`CONVEYOR_*`), as operators set them.
impl Conveyor {
    /// `conveyor <command>` (`gateway`, `worker` or `up`) with the given extra arguments and
    /// environment variables; `gateway` and `up` listen on a free port and are waited for, as
    /// [`Conveyor::gateway`] is.
    pub fn with_env(
        command: &str,
        redis_url: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        let serving = command != "worker";
        let mut all: Vec<&str> = if serving { vec!["--listen", "127.0.0.1:0"] } else { Vec::new() };
        all.extend_from_slice(args);
        let log = scratch_dir(command).join("conveyor.log");
        let file = std::fs::File::create(&log)?;
        let child = Command::new(conveyor_bin())
            .arg(command)
            .args(&all)
            .env("REDIS_URL", redis_url)
            .env("RUST_LOG", "info,conveyor_worker=debug,conveyor_gateway=debug")
            .envs(test_process_env(&all, env))
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .context("cannot start conveyor")?;
        let mut conveyor = Self { child: Some(child), base: String::new(), log };
        if serving {
            conveyor.wait_healthy()?;
        }
        Ok(conveyor)
    }
}

impl Drop for Conveyor {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The ids of the processes whose command line matches `pattern` (`pgrep -f`).
pub fn processes(pattern: &str) -> Vec<String> {
    let output = std::process::Command::new("pgrep").args(["-f", pattern]).output().expect("pgrep runs");
    String::from_utf8_lossy(&output.stdout).split_whitespace().map(str::to_owned).collect()
}

/// Waits until a process matches each of `patterns`; `log` is shown if none does in time.
pub async fn wait_started(patterns: &[&str], within: std::time::Duration, log: impl Fn() -> String) {
    let deadline = std::time::Instant::now() + within;
    while patterns.iter().any(|p| processes(p).is_empty()) {
        assert!(std::time::Instant::now() < deadline, "{patterns:?} never started:\n{}", log());
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Waits until no process matches `pattern`.
pub async fn wait_gone(pattern: &str, within: std::time::Duration) {
    let deadline = std::time::Instant::now() + within;
    while !processes(pattern).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "processes matching {pattern:?} outlived their node: {:?}",
            processes(pattern)
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// A `sleep` argument no other process has: 600 seconds and a fraction unique to this test.
pub fn sleep_marker() -> String {
    format!("600.{}{}", std::process::id(), free_port())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `redis-server` that is not the test's own, on `port`: another test's, as far as the
    /// test can tell.
    struct Stranger(Child);

    impl Stranger {
        fn on(port: u16) -> Self {
            let dir = scratch_dir("stranger-redis");
            #[allow(clippy::expect_used)] // the test cannot run without it
            let child = Command::new("redis-server")
                .args([
                    "--port",
                    &port.to_string(),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ])
                .arg("--dir")
                .arg(&dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server runs");
            let stranger = Self(child);
            let url = format!("redis://127.0.0.1:{port}");
            let deadline = Instant::now() + Duration::from_secs(10);
            while redis::Client::open(url.as_str())
                .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
                .is_err()
            {
                assert!(Instant::now() < deadline, "the stranger never answered");
                std::thread::sleep(Duration::from_millis(20));
            }
            stranger
        }
    }

    impl Drop for Stranger {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    #[test]
    fn a_redis_whose_port_was_taken_while_it_was_down_does_not_come_back_as_a_stranger() {
        let mut ours = RedisServer::start().expect("redis");
        ours.kill();
        let stranger = Stranger::on(ours.port);
        let restarted = ours.restart();
        assert!(restarted.is_err(), "the restarted server is another process: {}", stranger.0.id());
        let message = format!("{:#}", restarted.err().unwrap_or_else(|| anyhow::anyhow!("")));
        assert!(message.contains(&ours.port.to_string()), "{message}");
    }

    #[test]
    fn a_redis_whose_port_another_process_took_first_starts_on_another() {
        let taken = server_port();
        let _stranger = Stranger::on(taken);
        let mut ours = RedisServer {
            child: None,
            port: taken,
            dir: scratch_dir("redis"),
            extra: vec!["--save".into(), "".into(), "--appendonly".into(), "no".into()],
        };
        ours.start_on_a_free_port().expect("started");
        assert_ne!(ours.port, taken);
        assert_eq!(ours.server_pid(), ours.child.as_ref().map(Child::id), "the server answering is ours");
    }

    #[test]
    fn a_listener_address_is_read_from_plain_and_json_logs() {
        let plain = "2026-01-01T00:00:00Z  INFO conveyor_cli::run: gateway listening: MCP at http://127.0.0.1:40123/mcp address=127.0.0.1:40123";
        assert_eq!(logged_address(plain, "MCP at http://").as_deref(), Some("127.0.0.1:40123"));
        let json = r#"{"level":"INFO","fields":{"message":"worker metrics at http://127.0.0.1:40124/metrics","address":"127.0.0.1:40124"}}"#;
        assert_eq!(logged_address(json, "metrics at http://").as_deref(), Some("127.0.0.1:40124"));
        assert_eq!(logged_address("gateway listening", "MCP at http://"), None);
    }

    #[test]
    fn server_ports_are_below_the_ephemeral_range() {
        let from = ephemeral_ports_from();
        if from > SERVER_PORTS_FROM + 1_000 {
            for _ in 0..50 {
                let port = server_port();
                assert!((SERVER_PORTS_FROM..from).contains(&port), "{port} (ephemeral from {from})");
            }
        }
    }
}
