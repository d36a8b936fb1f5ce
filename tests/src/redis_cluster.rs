//! A real Redis Cluster for end-to-end tests: `redis-server` processes in cluster mode on free
//! ports, joined by `redis-cli --cluster create`, whose nodes the tests kill and restart to see
//! what Conveyor does through a failover. Nothing here is mocked.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::process::{output_text, scratch_dir};

/// Hash slots in every Redis Cluster.
const SLOTS: usize = 16384;

/// A node's cluster bus listens this far above its client port (fixed by Redis).
const BUS_OFFSET: u16 = 10000;

/// Client ports must stay below this for the bus port to exist.
const PORT_LIMIT: u16 = u16::MAX - BUS_OFFSET;

/// How often the waits look again: often enough to be quick, rarely enough not to load a small
/// machine that also runs the nodes.
const POLL: Duration = Duration::from_millis(100);

/// How long one node may take to answer PING after it is spawned.
const SPAWN_TIMEOUT: Duration = Duration::from_secs(20);

/// How long `redis-cli --cluster create` may take (it waits for the nodes to meet).
const CREATE_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a new cluster may take to agree on its slots and attach its replicas (replicas make a
/// full sync first).
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Lines of each node's log that an error message carries.
const LOG_TAIL_LINES: usize = 20;

/// A Redis Cluster of the test's own: one `redis-server` per node, each in its own scratch
/// directory (its log, `nodes-<port>.conf` and append-only files survive a failed test there).
/// Dropping it kills every node.
pub struct RedisCluster {
    nodes: Vec<Node>,
    primaries: usize,
    replicas_per_primary: usize,
}

/// One node's process and where it keeps its state.
struct Node {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
    /// The slot ranges the cluster said this node served when [`RedisCluster::kill`] killed it:
    /// what [`RedisCluster::wait_failover`] waits to see served by another node.
    slots_at_kill: Vec<(u16, u16)>,
}

impl RedisCluster {
    /// Starts `primaries` primaries with `replicas_per_primary` replicas each and returns once
    /// every node says `cluster_state:ok`, all nodes agree on who serves each of the 16384 slots,
    /// and every replica is attached (listed `state=online` by its primary).
    ///
    /// Failure detection is fast (`cluster-node-timeout` 1 s) so that failovers take seconds, and
    /// each node writes an append-only file (fsync every second) like a production node would.
    pub fn start(primaries: usize, replicas_per_primary: usize) -> anyhow::Result<Self> {
        anyhow::ensure!(
            primaries >= 3,
            "a Redis Cluster needs at least 3 primaries (redis-cli refuses fewer), not {primaries}"
        );
        let count = primaries * (1 + replicas_per_primary);
        let mut cluster = Self {
            nodes: cluster_ports(count)?
                .into_iter()
                .map(|port| Node {
                    port,
                    dir: scratch_dir(&format!("redis-cluster-{port}")),
                    child: None,
                    slots_at_kill: Vec::new(),
                })
                .collect(),
            primaries,
            replicas_per_primary,
        };
        // On an error below, dropping `cluster` kills the nodes already started.
        for index in 0..cluster.nodes.len() {
            let mut attempt = 1;
            loop {
                let taken = cluster.ports();
                let Some(node) = cluster.nodes.get_mut(index) else { break };
                match node.spawn() {
                    Ok(()) => break,
                    // The node is gone (its port was taken between choosing and binding it, by
                    // another test's process): try again on another port.
                    Err(_) if node.child.is_none() && attempt < 3 => {
                        attempt += 1;
                        node.port = pick_port(&taken)?;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        cluster.create()?;
        cluster.wait_ready()?;
        Ok(cluster)
    }

    /// `redis://127.0.0.1:<port>` of the first node, for clients that discover the rest.
    pub fn seed_url(&self) -> String {
        self.nodes.first().map(|n| node_url(n.port)).unwrap_or_default()
    }

    /// Every node's URL, comma-separated, for clients that take a list of seeds.
    pub fn seed_urls(&self) -> String {
        self.nodes.iter().map(|n| node_url(n.port)).collect::<Vec<_>>().join(",")
    }

    /// Every node's port, running or not, in the order the nodes were started.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    /// The ports of the nodes whose processes are running (not killed).
    pub fn live_ports(&self) -> Vec<u16> {
        self.nodes.iter().filter(|n| n.child.is_some()).map(|n| n.port).collect()
    }

    /// A plain (not cluster-aware) blocking connection to one node, with timeouts so that a test
    /// fails rather than hangs; a key served elsewhere answers `MOVED`.
    pub fn connection(&self, port: u16) -> anyhow::Result<redis::Connection> {
        connect(port)
    }

    /// The running nodes that are primaries now, as one running node's `CLUSTER NODES` says (roles
    /// change with a failover).
    pub fn primaries(&self) -> anyhow::Result<Vec<u16>> {
        self.live_with_role(NodeLine::is_primary)
    }

    /// The running nodes that are replicas now, as one running node's `CLUSTER NODES` says.
    pub fn replicas(&self) -> anyhow::Result<Vec<u16>> {
        self.live_with_role(NodeLine::is_replica)
    }

    fn live_with_role(&self, role: fn(&NodeLine) -> bool) -> anyhow::Result<Vec<u16>> {
        let live = self.live_ports();
        let (_, view) = self.any_view()?;
        let mut ports: Vec<u16> =
            view.iter().filter(|n| role(n) && live.contains(&n.port)).map(|n| n.port).collect();
        ports.sort_unstable();
        Ok(ports)
    }

    /// The port of the primary serving `key`'s slot, as one running node sees it (until a
    /// failover completes, that can be a killed node).
    pub fn primary_for_key(&self, key: &str) -> anyhow::Result<u16> {
        let mut errors = Vec::new();
        let slot = self
            .live_ports()
            .into_iter()
            .find_map(|port| {
                connect(port)
                    .and_then(|mut c| {
                        Ok(redis::cmd("CLUSTER").arg("KEYSLOT").arg(key).query::<u16>(&mut c)?)
                    })
                    .map_err(|e| errors.push(format!("node {port}: {e:#}")))
                    .ok()
            })
            .with_context(|| format!("no running node answered CLUSTER KEYSLOT: {}", errors.join("; ")))?;
        let (seen_by, view) = self.any_view()?;
        view.iter()
            .find(|n| n.is_primary() && n.serves(slot))
            .map(|n| n.port)
            .with_context(|| format!("node {seen_by} sees no primary serving slot {slot} (key {key:?})"))
    }

    /// Kills one node with SIGKILL and reaps it (nothing flushed beyond what its append-only file
    /// already has). First it notes the slots the cluster says the node serves, for
    /// [`Self::wait_failover`]. A node not running, or a port not in the cluster, is left alone.
    pub fn kill(&mut self, port: u16) {
        if !self.live_ports().contains(&port) {
            return;
        }
        let slots = self.slots_of(port);
        if let Some(node) = self.nodes.iter_mut().find(|n| n.port == port) {
            node.kill();
            node.slots_at_kill = slots;
        }
    }

    /// The slot ranges a node serves, as another running node sees it (the cluster's word, not
    /// the node's own, which is stale just after a restart), else as the node itself sees it.
    fn slots_of(&self, port: u16) -> Vec<(u16, u16)> {
        let mut askers: Vec<u16> = self.live_ports().into_iter().filter(|p| *p != port).collect();
        askers.push(port);
        askers
            .into_iter()
            .find_map(|asker| {
                let view = cluster_nodes(asker).ok()?;
                let line = view.into_iter().find(|n| n.port == port)?;
                Some(if line.is_primary() { line.slots } else { Vec::new() })
            })
            .unwrap_or_default()
    }

    /// Starts a node again with its old directory, `nodes-<port>.conf` and append-only file, so
    /// that it rejoins the cluster (as a replica, if its slots were failed over meanwhile); kills
    /// it first if it runs. Returns once it answers PING: see [`Self::wait_replica`] for its
    /// rejoining.
    pub fn restart(&mut self, port: u16) -> anyhow::Result<()> {
        self.kill(port);
        let node = self
            .nodes
            .iter_mut()
            .find(|n| n.port == port)
            .with_context(|| format!("port {port} is not a node of this cluster"))?;
        node.spawn()
    }

    /// Waits until the slots that `killed` served when [`Self::kill`] killed it are all served by
    /// one other running node in the view of every running node, and every running node says
    /// `cluster_state:ok`; returns that promoted node's port.
    pub fn wait_failover(&self, killed: u16, timeout: Duration) -> anyhow::Result<u16> {
        let node = self.node(killed)?;
        anyhow::ensure!(
            !node.slots_at_kill.is_empty(),
            "node {killed} served no slots when it was killed (it was a replica, or was not killed \
             through RedisCluster::kill), so there is no failover to wait for"
        );
        let ranges = node.slots_at_kill.clone();
        self.wait_for(timeout, &format!("failover of the slots of killed primary {killed}"), || {
            let live = self.live_ports();
            let mut promoted = None;
            for &port in &live {
                check_state_ok(port)?;
                let owners = slot_owners(&cluster_nodes(port).map_err(|e| format!("{e:#}"))?);
                for slot in ranges.iter().flat_map(|&(first, last)| first..=last) {
                    let owner = owners.get(usize::from(slot)).copied().unwrap_or(0);
                    if owner == killed || owner == 0 || !live.contains(&owner) {
                        return Err(format!("node {port} sees slot {slot} served by {owner} (0: nobody)"));
                    }
                    match promoted {
                        None => promoted = Some(owner),
                        Some(p) if p != owner => {
                            return Err(format!("slot {slot} is served by {owner} but another by {p}"));
                        }
                        Some(_) => {}
                    }
                }
            }
            promoted.ok_or_else(|| "no node is running".to_owned())
        })
    }

    /// Waits until node `port` is a replica in the view of every running node, its primary runs
    /// and lists it `state=online`, and every running node says `cluster_state:ok`; returns its
    /// primary's port. For a node rejoining after [`Self::restart`].
    pub fn wait_replica(&self, port: u16, timeout: Duration) -> anyhow::Result<u16> {
        self.node(port)?;
        self.wait_for(timeout, &format!("node {port} to be an attached replica"), || {
            let live = self.live_ports();
            if !live.contains(&port) {
                return Err(format!("node {port} is not running"));
            }
            let mut primary = None;
            for &asker in &live {
                check_state_ok(asker)?;
                let view = cluster_nodes(asker).map_err(|e| format!("{e:#}"))?;
                let line = view
                    .iter()
                    .find(|n| n.port == port)
                    .ok_or_else(|| format!("node {asker} does not know node {port}"))?;
                if !line.is_replica() || line.is_failing() {
                    return Err(format!("node {asker} sees node {port} as {}", line.flags.join(",")));
                }
                let master = view
                    .iter()
                    .find(|n| Some(&n.id) == line.master_id.as_ref())
                    .ok_or_else(|| format!("node {asker} does not know the primary of node {port}"))?;
                match primary {
                    None => primary = Some(master.port),
                    Some(p) if p != master.port => {
                        return Err(format!(
                            "nodes disagree on the primary of {port}: {p} or {}",
                            master.port
                        ));
                    }
                    Some(_) => {}
                }
            }
            let primary = primary.ok_or_else(|| "no node is running".to_owned())?;
            if !live.contains(&primary) {
                return Err(format!("the primary of node {port}, {primary}, is not running"));
            }
            let online = online_replicas(primary).map_err(|e| format!("{e:#}"))?;
            if !online.contains(&port) {
                return Err(format!("primary {primary} lists online replicas {online:?}, not {port}"));
            }
            Ok(primary)
        })
    }

    /// Calls per command from `INFO commandstats`, summed over the running primaries (commands
    /// inside scripts count too; `info` is left out), for benchmarks that count Redis commands.
    /// A killed or demoted node's counts drop out of the sum.
    pub fn command_stats(&self) -> anyhow::Result<HashMap<String, u64>> {
        let mut total = HashMap::new();
        for port in self.primaries()? {
            let info = query_text(port, &["INFO", "commandstats"])?;
            for (name, calls) in parse_command_stats(&info) {
                *total.entry(name).or_insert(0) += calls;
            }
        }
        Ok(total)
    }

    /// CPU seconds (system plus user, from `INFO cpu`) used so far, summed over the running nodes;
    /// a restarted node starts again from zero.
    pub fn used_cpu_seconds(&self) -> anyhow::Result<f64> {
        let mut total = 0.0;
        for port in self.live_ports() {
            let info = query_text(port, &["INFO", "cpu"])?;
            for field in ["used_cpu_sys", "used_cpu_user"] {
                total += info_field(&info, field)
                    .and_then(|v| v.parse::<f64>().ok())
                    .with_context(|| format!("INFO cpu of node {port} has no number {field}"))?;
            }
        }
        Ok(total)
    }

    /// Joins the fresh nodes with `redis-cli --cluster create`, under a deadline (it loops until
    /// the nodes meet, which a blocked bus port would make forever).
    fn create(&self) -> anyhow::Result<()> {
        let dir = scratch_dir("redis-cluster-create");
        let (stdout, stderr) = (dir.join("stdout.log"), dir.join("stderr.log"));
        let mut command = Command::new("redis-cli");
        command.args(["--cluster", "create"]);
        command.args(self.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)));
        command.args(["--cluster-replicas", &self.replicas_per_primary.to_string(), "--cluster-yes"]);
        let mut child = command
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout)?)
            .stderr(std::fs::File::create(&stderr)?)
            .spawn()
            .context("redis-cli must be on PATH for the end-to-end tests")?;
        let deadline = Instant::now() + CREATE_TIMEOUT;
        let (status, timed_out) = loop {
            if let Some(status) = child.try_wait().context("waiting for redis-cli --cluster create")? {
                break (status, false);
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                break (child.wait().context("reaping redis-cli --cluster create")?, true);
            }
            std::thread::sleep(POLL);
        };
        let output = Output {
            status,
            stdout: std::fs::read(&stdout).unwrap_or_default(),
            stderr: std::fs::read(&stderr).unwrap_or_default(),
        };
        if timed_out {
            bail!(
                "redis-cli --cluster create did not finish within {CREATE_TIMEOUT:?}:\n{}\n{}",
                output_text(&output),
                self.log_tails()
            );
        }
        if !status.success() {
            bail!("redis-cli --cluster create failed:\n{}\n{}", output_text(&output), self.log_tails());
        }
        Ok(())
    }

    /// Waits until the new cluster is whole: see [`Self::start`].
    fn wait_ready(&self) -> anyhow::Result<()> {
        let count = self.nodes.len();
        self.wait_for(READY_TIMEOUT, "the new cluster to be ready", || {
            let mut first: Option<(u16, Vec<u16>)> = None;
            let mut primaries = Vec::new();
            for node in &self.nodes {
                let port = node.port;
                check_state_ok(port)?;
                let view = cluster_nodes(port).map_err(|e| format!("{e:#}"))?;
                if view.len() != count {
                    return Err(format!("node {port} knows {} of {count} nodes", view.len()));
                }
                if let Some(odd) = view.iter().find(|n| n.is_failing() || n.has_flag("handshake")) {
                    return Err(format!("node {port} sees node {} as {}", odd.port, odd.flags.join(",")));
                }
                primaries = view.iter().filter(|n| n.is_primary()).map(|n| n.port).collect();
                if primaries.len() != self.primaries {
                    return Err(format!("node {port} sees primaries {primaries:?}"));
                }
                let owners = slot_owners(&view);
                let unassigned = owners.iter().filter(|o| **o == 0).count();
                if unassigned > 0 {
                    return Err(format!("node {port} sees {unassigned} slots unassigned"));
                }
                match &first {
                    None => first = Some((port, owners)),
                    Some((other, seen)) if *seen != owners => {
                        return Err(format!("nodes {other} and {port} disagree on who serves which slots"));
                    }
                    Some(_) => {}
                }
            }
            for primary in primaries {
                let online = online_replicas(primary).map_err(|e| format!("{e:#}"))?;
                if online.len() != self.replicas_per_primary {
                    return Err(format!("primary {primary} has online replicas {online:?}"));
                }
            }
            Ok(())
        })
    }

    /// Polls `check` every [`POLL`] until it gives a value, or fails after `timeout` with its last
    /// reason for waiting and the tails of the nodes' logs.
    fn wait_for<T>(
        &self,
        timeout: Duration,
        what: &str,
        mut check: impl FnMut() -> Result<T, String>,
    ) -> anyhow::Result<T> {
        let deadline = Instant::now() + timeout;
        loop {
            match check() {
                Ok(value) => return Ok(value),
                Err(why) if Instant::now() >= deadline => {
                    bail!("timed out after {timeout:?} waiting for {what}; last: {why}\n{}", self.log_tails())
                }
                Err(_) => std::thread::sleep(POLL),
            }
        }
    }

    /// `CLUSTER NODES` of the first running node that answers, and which node that was.
    fn any_view(&self) -> anyhow::Result<(u16, Vec<NodeLine>)> {
        let mut errors = Vec::new();
        for port in self.live_ports() {
            match cluster_nodes(port) {
                Ok(view) => return Ok((port, view)),
                Err(e) => errors.push(format!("node {port}: {e:#}")),
            }
        }
        bail!("no running node answered CLUSTER NODES: [{}]", errors.join("; "))
    }

    fn node(&self, port: u16) -> anyhow::Result<&Node> {
        self.nodes
            .iter()
            .find(|n| n.port == port)
            .with_context(|| format!("port {port} is not a node of this cluster"))
    }

    /// The last lines of every node's log, for an error message.
    fn log_tails(&self) -> String {
        self.nodes.iter().map(Node::log_tail).collect::<Vec<_>>().join("\n")
    }
}

/// Reads over the whole keyspace, for the checks at the end of a test.
impl RedisCluster {
    /// The keys matching `pattern` on every running primary (a `SCAN` of each, so that no node is
    /// blocked), each with the port of the primary that holds it. Replicas are not scanned: they
    /// hold copies. Call it while the cluster is settled: a slot moving meanwhile could be missed.
    pub fn keys_by_primary(&self, pattern: &str) -> anyhow::Result<Vec<(u16, String)>> {
        let mut found = Vec::new();
        for port in self.primaries()? {
            let mut conn = connect(port)?;
            let keys = crate::process::scan(&mut conn, pattern)
                .with_context(|| format!("SCAN MATCH {pattern} on node {port}"))?;
            found.extend(keys.into_iter().map(|key| (port, key)));
        }
        Ok(found)
    }
}

/// Replication lag on demand, so that a test can kill a primary that acknowledged writes its
/// replica never got (what asynchronous replication loses in a failover).
impl RedisCluster {
    /// The running replicas of a primary, as one running node's `CLUSTER NODES` says.
    pub fn replicas_of(&self, primary: u16) -> anyhow::Result<Vec<u16>> {
        let live = self.live_ports();
        let (seen_by, view) = self.any_view()?;
        let id = view
            .iter()
            .find(|n| n.port == primary)
            .map(|n| n.id.clone())
            .with_context(|| format!("node {seen_by} does not know node {primary}"))?;
        let mut ports: Vec<u16> = view
            .iter()
            .filter(|n| n.is_replica() && n.master_id.as_ref() == Some(&id) && live.contains(&n.port))
            .map(|n| n.port)
            .collect();
        ports.sort_unstable();
        Ok(ports)
    }

    /// Stops a running node's process (SIGSTOP) until [`Self::resume`]: it answers nothing, and as
    /// a replica it neither reads its primary's stream nor connects again. Other calls of this
    /// harness that ask that node wait for their timeouts meanwhile.
    pub fn pause(&self, port: u16) -> anyhow::Result<()> {
        self.signal(port, "STOP")
    }

    /// Lets a node stopped by [`Self::pause`] run on (SIGCONT).
    pub fn resume(&self, port: u16) -> anyhow::Result<()> {
        self.signal(port, "CONT")
    }

    fn signal(&self, port: u16, signal: &str) -> anyhow::Result<()> {
        let pid = self
            .node(port)?
            .child
            .as_ref()
            .map(Child::id)
            .with_context(|| format!("node {port} is not running"))?;
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .context("kill must be on PATH")?;
        anyhow::ensure!(status.success(), "kill -{signal} {pid} (node {port}) failed: {status}");
        Ok(())
    }

    /// Closes a primary's connections to its replicas (`CLIENT KILL TYPE replica`); returns how
    /// many it closed. A replica connects again by itself within about a second, unless paused.
    pub fn cut_replication(&self, primary: u16) -> anyhow::Result<u64> {
        let mut conn = connect(primary)?;
        redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("replica")
            .query(&mut conn)
            .with_context(|| format!("CLIENT KILL TYPE replica on node {primary}"))
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.kill();
        }
    }
}

impl Node {
    fn log_path(&self) -> PathBuf {
        self.dir.join("redis.log")
    }

    /// Starts the node's `redis-server` and waits until it answers PING.
    fn spawn(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .with_context(|| format!("cannot open {}", self.log_path().display()))?;
        let port = self.port.to_string();
        let child = Command::new("redis-server")
            .current_dir(&self.dir)
            .args(["--port", &port, "--bind", "127.0.0.1"])
            .args(["--cluster-enabled", "yes", "--cluster-config-file", &format!("nodes-{port}.conf")])
            .args(["--cluster-node-timeout", "1000"])
            .args(["--appendonly", "yes", "--appendfsync", "everysec", "--save", ""])
            // Replicas sync at once rather than after the default 5 s wait for more replicas.
            .args(["--repl-diskless-sync-delay", "0"])
            .arg("--dir")
            .arg(&self.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("redis-server must be on PATH for the end-to-end tests")?;
        self.child = Some(child);
        let deadline = Instant::now() + SPAWN_TIMEOUT;
        loop {
            if ping(self.port) {
                // Another process that took the port meanwhile would answer PING too.
                let ours = self.child.as_ref().map(Child::id);
                let answering = server_pid(self.port);
                if answering.is_some() && answering == ours {
                    return Ok(());
                }
                self.kill();
                bail!(
                    "port {} is answered by process {answering:?}, not by its redis-server {ours:?}\n{}",
                    self.port,
                    self.log_tail()
                );
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                self.child = None;
                bail!(
                    "redis-server on port {} exited ({status}) before answering PING\n{}",
                    self.port,
                    self.log_tail()
                );
            }
            if Instant::now() >= deadline {
                bail!(
                    "redis-server on port {} did not answer PING within {SPAWN_TIMEOUT:?}\n{}",
                    self.port,
                    self.log_tail()
                );
            }
            std::thread::sleep(POLL);
        }
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        format!(
            "--- redis-server {} ({}, {}) log tail ---\n{}",
            self.port,
            if self.child.is_some() { "running" } else { "not running" },
            self.dir.display(),
            lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
        )
    }
}

/// `count` distinct free ports whose bus ports (10000 higher) are free too.
fn cluster_ports(count: usize) -> anyhow::Result<Vec<u16>> {
    let mut ports: Vec<u16> = Vec::with_capacity(count);
    while ports.len() < count {
        ports.push(pick_port(&ports)?);
    }
    Ok(ports)
}

/// A free port below [`PORT_LIMIT`] whose bus port is free too, clashing with none of `taken` or
/// their bus ports.
fn pick_port(taken: &[u16]) -> anyhow::Result<u16> {
    let clashes = |p: u16| taken.iter().any(|&q| q == p || q + BUS_OFFSET == p || p + BUS_OFFSET == q);
    // Both the port and its bus port below the ephemeral range: see `process::server_port`.
    let below = crate::process::ephemeral_ports_from().saturating_sub(BUS_OFFSET).min(PORT_LIMIT);
    for _ in 0..10_000 {
        let port = crate::process::server_port_below(below);
        if port < PORT_LIMIT && !clashes(port) && port_free(port + BUS_OFFSET) {
            return Ok(port);
        }
    }
    bail!("found no free port below {PORT_LIMIT} with a free bus port in 10000 tries")
}

fn port_free(port: u16) -> bool {
    std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
}

fn node_url(port: u16) -> String {
    format!("redis://127.0.0.1:{port}")
}

fn connect(port: u16) -> anyhow::Result<redis::Connection> {
    let conn = redis::Client::open(node_url(port))?
        .get_connection_with_timeout(Duration::from_secs(2))
        .with_context(|| format!("cannot connect to cluster node {port}"))?;
    conn.set_read_timeout(Some(Duration::from_secs(5)))?;
    conn.set_write_timeout(Some(Duration::from_secs(5)))?;
    Ok(conn)
}

fn ping(port: u16) -> bool {
    redis::Client::open(node_url(port))
        .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
        .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
        .is_ok()
}

/// The process id that `INFO server` of the server on `port` reports.
fn server_pid(port: u16) -> Option<u32> {
    let info = query_text(port, &["INFO", "server"]).ok()?;
    info_field(&info, "process_id")?.parse().ok()
}

/// A command whose reply is text (`INFO`, `CLUSTER INFO`, `CLUSTER NODES`).
fn query_text(port: u16, args: &[&str]) -> anyhow::Result<String> {
    let (name, rest) = args.split_first().context("no command")?;
    let mut conn = connect(port)?;
    redis::cmd(name).arg(rest).query(&mut conn).with_context(|| format!("{} on node {port}", args.join(" ")))
}

/// Fails (with the reason, for [`RedisCluster::wait_for`]) unless the node says
/// `cluster_state:ok`.
fn check_state_ok(port: u16) -> Result<(), String> {
    let info = query_text(port, &["CLUSTER", "INFO"]).map_err(|e| format!("{e:#}"))?;
    match info_field(&info, "cluster_state") {
        Some("ok") => Ok(()),
        state => Err(format!("node {port} says cluster_state:{}", state.unwrap_or("?"))),
    }
}

/// The ports of the replicas that a primary's `INFO replication` lists `state=online`.
fn online_replicas(primary: u16) -> anyhow::Result<Vec<u16>> {
    let info = query_text(primary, &["INFO", "replication"])?;
    Ok(info
        .lines()
        .filter(|line| {
            line.strip_prefix("slave").is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
        })
        .filter(|line| line.contains("state=online"))
        .filter_map(|line| line.split([':', ',']).find_map(|kv| kv.strip_prefix("port="))?.parse().ok())
        .collect())
}

/// One `name:value` field of an `INFO`-style reply.
fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(':')).map(str::trim)
}

/// Calls per command from an `INFO commandstats` reply, `info` left out.
fn parse_command_stats(info: &str) -> HashMap<String, u64> {
    info.lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest.split(',').find_map(|kv| kv.strip_prefix("calls="))?.parse().ok()?;
            Some((name.to_owned(), calls))
        })
        .filter(|(name, _)| name != "info")
        .collect()
}

/// One line of `CLUSTER NODES`: `<id> <ip:port@bus[,hostname]> <flags> <primary id or ->
/// <ping-sent> <pong-recv> <config-epoch> <link-state> <slot or range>...`.
#[derive(Debug, Clone, PartialEq)]
struct NodeLine {
    id: String,
    port: u16,
    flags: Vec<String>,
    master_id: Option<String>,
    slots: Vec<(u16, u16)>,
}

impl NodeLine {
    fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }

    fn is_primary(&self) -> bool {
        self.has_flag("master")
    }

    fn is_replica(&self) -> bool {
        self.has_flag("slave")
    }

    /// Whether the line's node is suspected (`fail?`) or agreed (`fail`) to be down.
    fn is_failing(&self) -> bool {
        self.has_flag("fail") || self.has_flag("fail?")
    }

    fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(first, last)| (first..=last).contains(&slot))
    }
}

fn cluster_nodes(port: u16) -> anyhow::Result<Vec<NodeLine>> {
    parse_cluster_nodes(&query_text(port, &["CLUSTER", "NODES"])?)
        .with_context(|| format!("CLUSTER NODES of node {port}"))
}

fn parse_cluster_nodes(text: &str) -> anyhow::Result<Vec<NodeLine>> {
    text.lines().filter(|line| !line.trim().is_empty()).map(parse_node_line).collect()
}

fn parse_node_line(line: &str) -> anyhow::Result<NodeLine> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    anyhow::ensure!(fields.len() >= 8, "a CLUSTER NODES line has too few fields: {line:?}");
    let port = fields[1]
        .split(['@', ','])
        .next()
        .and_then(|address| address.rsplit_once(':'))
        .and_then(|(_, port)| port.parse().ok())
        .with_context(|| format!("no port in CLUSTER NODES line {line:?}"))?;
    let slots = fields[8..]
        .iter()
        // `[slot->-id]` and `[slot-<-id]` are migrations in progress, not ownership.
        .filter(|s| !s.starts_with('['))
        .map(|s| {
            let (first, last) = s.split_once('-').unwrap_or((s, s));
            Ok((first.parse()?, last.parse()?))
        })
        .collect::<anyhow::Result<Vec<(u16, u16)>>>()
        .with_context(|| format!("bad slots in CLUSTER NODES line {line:?}"))?;
    Ok(NodeLine {
        id: fields[0].to_owned(),
        port,
        flags: fields[2].split(',').map(str::to_owned).collect(),
        master_id: Some(fields[3]).filter(|m| *m != "-").map(str::to_owned),
        slots,
    })
}

/// For each slot, the port of the primary that a view says serves it (0: none).
fn slot_owners(view: &[NodeLine]) -> Vec<u16> {
    let mut owners = vec![0; SLOTS];
    for node in view.iter().filter(|n| n.is_primary()) {
        for &(first, last) in &node.slots {
            if let Some(range) = owners.get_mut(usize::from(first)..=usize::from(last)) {
                range.fill(node.port);
            }
        }
    }
    owners
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cluster_nodes_lines() -> anyhow::Result<()> {
        let text = "\
07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@40004,host slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@40002 master - 0 1426238316232 2 connected 5461-10922
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@40001 myself,master - 0 0 1 connected 0-5460 16383 [93->-292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f]
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:30003@40003 master,fail - 0 1426238318243 3 connected 10923-16382
";
        let view = parse_cluster_nodes(text)?;
        assert_eq!(view.len(), 4);
        assert!(view[0].is_replica());
        assert_eq!(view[0].port, 30004);
        assert_eq!(view[0].master_id.as_deref(), Some("e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca"));
        assert_eq!(view[2].slots, vec![(0, 5460), (16383, 16383)]);
        assert!(view[2].serves(16383) && !view[2].serves(5461));
        assert!(view[3].is_failing() && !view[2].is_failing());
        let owners = slot_owners(&view);
        assert!(owners.iter().all(|o| *o != 0));
        assert_eq!((owners[0], owners[5461], owners[16382], owners[16383]), (30001, 30002, 30003, 30001));
        Ok(())
    }

    /// The whole life of one cluster in one test, since starting six nodes is the slow part: a
    /// write routed by hand, a killed primary, a failover that keeps the acknowledged write, and
    /// the old primary back as a replica.
    #[test]
    fn failover_keeps_acknowledged_writes_and_the_old_primary_rejoins() -> anyhow::Result<()> {
        let began = Instant::now();
        let mut cluster = RedisCluster::start(3, 1)?;
        eprintln!("cluster of 6 nodes ready after {:?}", began.elapsed());
        assert_eq!(cluster.ports().len(), 6);
        assert_eq!(cluster.live_ports(), cluster.ports());
        assert_eq!(cluster.seed_urls().split(',').count(), 6);
        assert!(cluster.seed_urls().starts_with(&cluster.seed_url()));
        let primaries = cluster.primaries()?;
        let replicas = cluster.replicas()?;
        assert_eq!(primaries.len(), 3, "primaries {primaries:?}");
        assert_eq!(replicas.len(), 3, "replicas {replicas:?}");
        assert!(primaries.iter().all(|p| !replicas.contains(p)));

        let key = "conveyor:cluster-test:{task-1}";
        let owner = cluster.primary_for_key(key)?;
        assert!(primaries.contains(&owner));
        let elsewhere = primaries.iter().copied().find(|p| *p != owner).context("another primary")?;
        let misrouted = redis::cmd("SET").arg(key).arg("x").query::<()>(&mut cluster.connection(elsewhere)?);
        let redirect = misrouted.as_ref().err().and_then(|e| e.redirect_node());
        assert!(
            redirect.is_some_and(|(address, _)| address == format!("127.0.0.1:{owner}")),
            "a primary not serving the key must redirect to {owner}: {misrouted:?}"
        );
        let mut conn = cluster.connection(owner)?;
        redis::cmd("SET").arg(key).arg("before-failover").query::<()>(&mut conn)?;
        let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut conn)?;
        assert_eq!(acked, 1, "the replica must acknowledge the write before the primary dies");
        let stats = cluster.command_stats()?;
        assert!(stats.get("set").copied().unwrap_or(0) >= 1, "command stats {stats:?}");
        assert!(!stats.contains_key("info"));
        assert!(cluster.used_cpu_seconds()? > 0.0);

        cluster.kill(owner);
        assert_eq!(cluster.live_ports().len(), 5);
        let killed_at = Instant::now();
        let promoted = cluster.wait_failover(owner, Duration::from_secs(20))?;
        eprintln!("failover from {owner} to {promoted} after {:?}", killed_at.elapsed());
        assert_ne!(promoted, owner);
        assert!(replicas.contains(&promoted), "the promoted node {promoted} was a replica");
        assert_eq!(cluster.primary_for_key(key)?, promoted);
        assert_eq!(cluster.primaries()?.len(), 3);
        let value: Option<String> = redis::cmd("GET").arg(key).query(&mut cluster.connection(promoted)?)?;
        assert_eq!(value.as_deref(), Some("before-failover"));

        let restarted_at = Instant::now();
        cluster.restart(owner)?;
        eprintln!("old primary {owner} answered PING after {:?}", restarted_at.elapsed());
        let its_primary = cluster.wait_replica(owner, Duration::from_secs(30))?;
        eprintln!("old primary {owner} a replica of {its_primary} after {:?}", restarted_at.elapsed());
        assert_eq!(its_primary, promoted);
        assert!(cluster.replicas()?.contains(&owner));
        assert!(!cluster.primaries()?.contains(&owner));
        let mut replica = cluster.connection(owner)?;
        redis::cmd("READONLY").query::<()>(&mut replica)?;
        let value: Option<String> = redis::cmd("GET").arg(key).query(&mut replica)?;
        assert_eq!(value.as_deref(), Some("before-failover"));
        eprintln!("whole cluster test took {:?}", began.elapsed());
        Ok(())
    }
}
