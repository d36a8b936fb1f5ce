//! Flags and environment variables of every subcommand.

use std::net::SocketAddr;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "conveyor",
    version,
    about = "Conveyor: a hosted MCP endpoint whose long-running tools run as durable tasks on a worker cluster backed by Redis",
    after_help = "Redis comes from REDIS_URL (default redis://127.0.0.1:6379). Logs go to stderr; set CONVEYOR_LOG (e.g. debug, conveyor_worker=debug) to change their level."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a gateway and N workers in one process: Conveyor on a laptop. Starts a private
    /// redis-server from PATH when nothing answers at REDIS_URL.
    Up(UpArgs),
    /// Run a stateless MCP gateway. Start any number behind a load balancer.
    Gateway(GatewayArgs),
    /// Run a worker that consumes task nodes from Redis. Start as many as the queue needs.
    Worker(WorkerArgs),
    /// Look at tasks from a terminal.
    Tasks {
        #[command(subcommand)]
        command: TasksCommand,
    },
    /// List the live workers: their queues, tools and running nodes (read from Redis).
    Workers {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Also list workers whose heartbeat stopped (recently dead or stopped).
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        redis: RedisArgs,
    },
    /// Nodes that failed for good (attempts spent, or their worker lost too often).
    Dlq {
        #[command(subcommand)]
        command: DlqCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum TasksCommand {
    /// Print a task and its nodes (status, attempts, duration).
    Show {
        /// The task id (32 hex digits).
        id: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        redis: RedisArgs,
    },
}

#[derive(Debug, Subcommand)]
pub enum DlqCommand {
    /// List dead letters, newest first: id, time, task, node, tool, attempts, last error.
    List {
        /// How many to show.
        #[arg(long, default_value_t = 50)]
        count: usize,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        redis: RedisArgs,
    },
    /// Run a dead-lettered node again as a new task of the same owner, and remove the dead letter.
    /// Prints the new task's id. (The original task stays failed: a terminal task never changes.)
    Retry {
        /// The dead letter's id, as `dlq list` shows it.
        id: String,
        /// TTL of the new task, in milliseconds.
        #[arg(long, env = "CONVEYOR_TASK_TTL_MS", default_value_t = 3_600_000)]
        task_ttl_ms: u64,
        #[command(flatten)]
        redis: RedisArgs,
    },
}

#[derive(Debug, Clone, Args)]
pub struct RedisArgs {
    /// Redis to use: one server, any node of a Redis Cluster, or a comma-separated list of
    /// cluster nodes. A cluster is recognised by itself (`cluster_enabled:1`).
    #[arg(long = "redis-url", env = "REDIS_URL", default_value = conveyor_shared::config::DEFAULT_REDIS_URL)]
    pub url: String,
    /// How long any one Redis round trip may take before it fails, in milliseconds.
    #[arg(long = "redis-timeout-ms", env = "CONVEYOR_REDIS_TIMEOUT_MS", default_value_t = 3000)]
    pub timeout_ms: u64,
    /// How long an operation keeps trying while Redis is out of reach (a restart, a failover)
    /// before the request fails with a retryable error, in milliseconds.
    #[arg(long = "redis-outage-ms", env = "CONVEYOR_REDIS_OUTAGE_MS", default_value_t = 5000)]
    pub outage_ms: u64,
    /// Shards of the keyspace: on a Redis Cluster each shard is one slot, so use at least twice
    /// as many shards as primaries. Fixed when a deployment is first set up; every gateway and
    /// worker must use the same number.
    #[arg(long, env = "CONVEYOR_SHARDS", default_value_t = conveyor_shared::store::DEFAULT_SHARDS)]
    pub shards: u16,
    /// Answer a create or a cancel only once this many replicas have the write (`WAIT`, sent in
    /// the same round trip), so that a failover cannot lose what a client was told. 0: rely on
    /// Redis's asynchronous replication.
    #[arg(long = "redis-wait-replicas", env = "CONVEYOR_REDIS_WAIT_REPLICAS", default_value_t = 0)]
    pub wait_replicas: u32,
    /// How long such a wait may take before the request fails with a retryable error, in
    /// milliseconds.
    #[arg(long = "redis-wait-ms", env = "CONVEYOR_REDIS_WAIT_MS", default_value_t = 1000)]
    pub wait_ms: u64,
}

#[derive(Debug, Clone, Args)]
pub struct GatewayArgs {
    /// Address to listen on; MCP is served at /mcp, liveness at /healthz, readiness at /readyz.
    #[arg(long, env = "CONVEYOR_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Hosts (comma-separated, no port) whose Host and Origin headers are accepted, against DNS
    /// rebinding. `*` accepts any. localhost, 127.0.0.1 and ::1 are always accepted.
    #[arg(long, env = "CONVEYOR_ALLOWED_HOSTS", value_delimiter = ',')]
    pub allowed_hosts: Vec<String>,
    /// API keys as `principal=key` pairs, comma-separated (keys of 16 characters or more). When
    /// set, every MCP request needs `Authorization: Bearer <key>`, and each principal sees only its
    /// own tasks. When unset, the endpoint is open and every caller is `anonymous`.
    #[arg(long, env = "CONVEYOR_API_KEYS", hide_env_values = true, default_value = "")]
    pub api_keys: String,
    /// TTL of a task whose client asks for none, in milliseconds.
    #[arg(long, env = "CONVEYOR_TASK_TTL_MS", default_value_t = 3_600_000)]
    pub task_ttl_ms: u64,
    /// Largest TTL a client may ask for, in milliseconds; larger requests are capped and the
    /// applied value is reported.
    #[arg(long, env = "CONVEYOR_TASK_TTL_MAX_MS", default_value_t = 86_400_000)]
    pub task_ttl_max_ms: u64,
    /// Poll interval suggested to clients, in milliseconds.
    #[arg(long, env = "CONVEYOR_POLL_INTERVAL_MS", default_value_t = 1000)]
    pub poll_interval_ms: u64,
    /// Largest request body accepted, in bytes; larger ones get HTTP 413.
    #[arg(long, env = "CONVEYOR_MAX_BODY_BYTES", default_value_t = 4 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Most nodes in one `run_dag` graph.
    #[arg(long, env = "CONVEYOR_MAX_DAG_NODES", default_value_t = 10_000)]
    pub max_dag_nodes: usize,
    /// Largest arguments of one `run_dag` node, in bytes of JSON.
    #[arg(long, env = "CONVEYOR_MAX_DAG_NODE_BYTES", default_value_t = 64 * 1024)]
    pub max_dag_node_bytes: usize,
    /// Most nodes waiting for a worker, over all tools; a tools/call that would queue more is
    /// refused at once with the limit and a retry hint. 0: no limit.
    #[arg(long, env = "CONVEYOR_MAX_QUEUED", default_value_t = 100_000)]
    pub max_queued: u64,
    /// Most nodes of one tool waiting for a worker. 0: no limit.
    #[arg(long, env = "CONVEYOR_MAX_QUEUED_PER_TOOL", default_value_t = 0)]
    pub max_queued_per_tool: u64,
    /// Most tasks of one principal that are not yet terminal (synchronous calls included). 0: no limit.
    #[arg(long, env = "CONVEYOR_MAX_LIVE_TASKS_PER_PRINCIPAL", default_value_t = 1_000)]
    pub max_live_tasks_per_principal: u64,
    /// How long a synchronous tools/call waits for its worker, in milliseconds.
    #[arg(long, env = "CONVEYOR_SYNC_TIMEOUT_MS", default_value_t = 300_000)]
    pub sync_timeout_ms: u64,
    #[command(flatten)]
    pub redis: RedisArgs,
}

#[derive(Debug, Clone, Args)]
pub struct WorkerArgs {
    /// Nodes this worker runs at once.
    #[arg(long, env = "CONVEYOR_WORKER_CONCURRENCY", default_value_t = 16)]
    pub concurrency: usize,
    /// Also offer the fixture tools (greet, slow_compute, failing_job, ... and the MCP
    /// conformance suite's test_* tools). Off by default.
    #[arg(long, env = "CONVEYOR_FIXTURES")]
    pub fixtures: bool,
    /// Offer only these tools of the worker's registry (comma-separated), so that one binary can
    /// serve several pools: the worker reads only the queues of the tools it offers.
    #[arg(long, env = "CONVEYOR_TOOLS", value_delimiter = ',')]
    pub tools: Vec<String>,
    /// On SIGINT/SIGTERM, how long running nodes may take to finish before they are stopped and
    /// handed back to the queue for another worker, in milliseconds.
    #[arg(long, env = "CONVEYOR_SHUTDOWN_GRACE_MS", default_value_t = 30_000)]
    pub shutdown_grace_ms: u64,
    /// How long a running node's lease lasts, in milliseconds. A worker renews its leases three
    /// times per lease; when one stops renewing (killed, hung, cut off), another worker takes its
    /// nodes over after this long.
    #[arg(long, env = "CONVEYOR_LEASE_MS", default_value_t = 30_000)]
    pub lease_ms: u64,
    /// After a node has lost its worker this many times it is not run again: it fails and goes to
    /// the dead-letter stream.
    #[arg(long, env = "CONVEYOR_MAX_NODE_LOSSES", default_value_t = 3)]
    pub max_node_losses: u32,
    #[command(flatten)]
    pub redis: RedisArgs,
}

#[derive(Debug, Clone, Args)]
pub struct UpArgs {
    #[command(flatten)]
    pub gateway: GatewayArgs,
    /// Workers to run in this process.
    #[arg(long, env = "CONVEYOR_WORKERS", default_value_t = 1)]
    pub workers: usize,
    /// Nodes each worker runs at once.
    #[arg(long, env = "CONVEYOR_WORKER_CONCURRENCY", default_value_t = 16)]
    pub concurrency: usize,
    /// Also offer the fixture tools (see `conveyor worker --help`).
    #[arg(long, env = "CONVEYOR_FIXTURES")]
    pub fixtures: bool,
    /// Offer only these tools (comma-separated; see `conveyor worker --help`).
    #[arg(long, env = "CONVEYOR_TOOLS", value_delimiter = ',')]
    pub tools: Vec<String>,
}
