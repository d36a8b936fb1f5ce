//! Flags and environment variables of every subcommand.

use std::net::SocketAddr;

use clap::{ArgAction, Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "conveyor",
    version,
    about = "Conveyor: a hosted MCP endpoint whose long-running tools run as durable tasks on a worker cluster backed by Redis",
    after_help = "Redis comes from REDIS_URL (default redis://127.0.0.1:6379). Logs go to stderr; set RUST_LOG (e.g. debug, conveyor_worker=debug) to change their level. Traces are exported over OTLP once OTEL_EXPORTER_OTLP_ENDPOINT is set (OTEL_EXPORTER_OTLP_PROTOCOL grpc or http/protobuf, OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER); see docs/observability.md."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// How log lines look: `human` (one readable line) or `json` (one object per line, for a log
    /// pipeline). Lines written inside a span carry its `trace_id` and `span_id` either way.
    #[arg(long, global = true, env = "CONVEYOR_LOG_FORMAT", default_value = "human", value_parser = parse_log_format)]
    pub log_format: conveyor_shared::telemetry::LogFormat,
}

fn parse_log_format(value: &str) -> Result<conveyor_shared::telemetry::LogFormat, String> {
    value.parse()
}

impl Cli {
    /// The name this process has in traces unless `OTEL_SERVICE_NAME` says otherwise.
    pub fn service_name(&self) -> &'static str {
        match self.command {
            Command::Gateway(_) => "conveyor-gateway",
            Command::Worker(_) => "conveyor-worker",
            _ => "conveyor",
        }
    }

    /// Whether this command is a client of an endpoint, run in a person's terminal: its logs
    /// stay at `warn` unless RUST_LOG says otherwise, so that they do not cover the progress bar.
    pub fn is_client(&self) -> bool {
        matches!(self.command, Command::Call(_) | Command::Tasks { .. })
    }
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
    /// Run a tool through the endpoint: a task shows a live progress bar (and a line per running
    /// node of a graph), questions are asked here, Ctrl-C cancels it, and the result is printed.
    Call(CallArgs),
    /// Your tasks, through the endpoint with your token (an operator's token sees every
    /// unfinished task).
    Tasks {
        #[command(subcommand)]
        command: TasksCommand,
    },
    /// Operator commands that read and write Redis directly (REDIS_URL), bypassing the endpoint
    /// and its authentication: tasks of any principal, live workers, dead letters.
    Redis {
        #[command(subcommand)]
        command: RedisCommand,
    },
    /// Static bearer tokens for a tokens file (`--tokens-file`).
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Make a new random token: prints the token (give it to its holder; it is not shown again)
    /// and the `[[token]]` entry to add to the tokens file, which keeps only its SHA-256.
    New {
        /// The principal the token speaks for: tasks are owned by it.
        #[arg(long)]
        principal: String,
        /// Groups of the principal, for the access file's `group:<name>` rules (repeatable).
        #[arg(long = "group")]
        groups: Vec<String>,
    },
    /// Print the SHA-256 of a token read from standard input, as a tokens file stores it.
    Hash,
}

/// Where the MCP endpoint is and who the caller is.
#[derive(Debug, Clone, Args)]
pub struct EndpointArgs {
    /// The MCP endpoint.
    #[arg(long, env = "CONVEYOR_URL", default_value = "http://127.0.0.1:8080/mcp")]
    pub url: String,
    /// Bearer token: a static token (`conveyor token new`) or an OAuth access token. Not needed
    /// for a gateway run with `--no-auth`.
    #[arg(long, env = "CONVEYOR_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

#[derive(Debug, Clone, Args)]
#[command(
    after_help = "Exit codes: 0 completed, 1 the tool reported an error (isError), 2 bad command line \
(unknown tool or argument, wrong type), 3 the task failed or the server refused the call, 4 the endpoint \
cannot be reached or refused the token, 5 cancelled by someone else or expired, 130 cancelled with Ctrl-C."
)]
pub struct CallArgs {
    /// The tool to run (`tools/list` names them).
    pub tool: String,
    /// One argument as KEY=VALUE, typed by the tool's input schema (`seconds=5` is a number when
    /// the schema says so; arrays as `a,b,c` or JSON; objects as JSON). Repeatable. Taken
    /// literally: nothing in it is run by a shell.
    #[arg(long = "arg", short = 'a', value_name = "KEY=VALUE")]
    pub args: Vec<String>,
    /// `--json '{...}'` gives all arguments as one JSON object (`--arg` values override its
    /// keys); `--json` alone prints the whole result (the CallToolResult) as JSON instead of its
    /// text. Both at once: `--json '{...}' --json`.
    #[arg(
        long,
        value_name = "ARGUMENTS",
        num_args = 0..=1,
        default_missing_value = "",
        action = ArgAction::Append
    )]
    pub json: Vec<String>,
    /// All arguments as one JSON object, as `--json '{...}'` gives them (but prints text).
    #[arg(long = "json-args", value_name = "JSON")]
    pub json_args: Option<String>,
    /// Poll the task at least this often, in milliseconds (default: the interval the server
    /// suggests).
    #[arg(long, value_name = "MS")]
    pub poll_ms: Option<u64>,
    #[command(flatten)]
    pub endpoint: EndpointArgs,
}

#[derive(Debug, Subcommand)]
pub enum TasksCommand {
    /// List your unfinished tasks (with --all, finished ones too, until their TTL runs out).
    Ls {
        /// Include completed, failed and cancelled tasks.
        #[arg(long)]
        all: bool,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        endpoint: EndpointArgs,
    },
    /// Print a task: status, progress, each node of its graph (status, attempts, duration,
    /// worker), and its result once it has one.
    Show {
        /// The task id.
        id: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        endpoint: EndpointArgs,
    },
    /// Watch a task live until it settles, answering its questions here; Ctrl-C stops watching
    /// (the task goes on). Exits as `conveyor call` does.
    Watch {
        /// The task id.
        id: String,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
        /// Poll at least this often, in milliseconds.
        #[arg(long, value_name = "MS")]
        poll_ms: Option<u64>,
        #[command(flatten)]
        endpoint: EndpointArgs,
    },
    /// Cancel a task (`tasks/cancel`) and say how it ended.
    Cancel {
        /// The task id.
        id: String,
        #[command(flatten)]
        endpoint: EndpointArgs,
    },
}

#[derive(Debug, Subcommand)]
pub enum RedisCommand {
    /// Tasks of any principal, read from Redis.
    Tasks {
        #[command(subcommand)]
        command: RedisTasksCommand,
    },
    /// List the live workers: their queues, tools and running nodes.
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
pub enum RedisTasksCommand {
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
        /// The limits the retry is held to, as a call of the dead letter's owner is.
        #[command(flatten)]
        limits: TaskLimitArgs,
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
    /// worker must use the same number. Unset: the number the deployment recorded, and for a new
    /// deployment 1 on a single server, 4 on a Redis Cluster.
    #[arg(long, env = "CONVEYOR_SHARDS")]
    pub shards: Option<u16>,
    /// Answer a create or a cancel only once this many replicas have the write (`WAIT`, sent in
    /// the same round trip), and tell clients of a task's end (events, reads) only once they have
    /// it, so that a failover cannot lose what a client was told. Set it on workers too: their
    /// completions wait the same way. 0: rely on Redis's asynchronous replication.
    #[arg(long = "redis-wait-replicas", env = "CONVEYOR_REDIS_WAIT_REPLICAS", default_value_t = 0)]
    pub wait_replicas: u32,
    /// How long such a wait may take before the request fails with a retryable error, in
    /// milliseconds.
    #[arg(long = "redis-wait-ms", env = "CONVEYOR_REDIS_WAIT_MS", default_value_t = 1000)]
    pub wait_ms: u64,
    /// Run synchronous calls of one tool by the lean path (docs/adr/0028): created and completed
    /// in batches, started by their delivery, with the call in the stream entry. `off`: a gateway
    /// creates every call by the full path, and a worker starts every entry with a start script.
    /// Off whenever --redis-wait-replicas is set.
    #[arg(
        long = "lean-calls",
        env = "CONVEYOR_LEAN_CALLS",
        default_value = "on",
        value_name = "on|off",
        action = clap::ArgAction::Set,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub lean_calls: bool,
}

#[derive(Debug, Clone, Args)]
pub struct GatewayArgs {
    /// Address to listen on; MCP is served at /mcp, liveness at /healthz, readiness at /readyz.
    #[arg(long, env = "CONVEYOR_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Address of the gateway's own listener for Prometheus and probes: /metrics (this process's
    /// metrics and the deployment's gauges), /healthz and /readyz. /metrics is never served on
    /// the public listener. Unset: no metrics listener.
    #[arg(long, env = "CONVEYOR_METRICS_LISTEN", value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
    /// Hosts (comma-separated, no port) whose Host and Origin headers are accepted, against DNS
    /// rebinding. `*` accepts any. localhost, 127.0.0.1 and ::1 are always accepted.
    #[arg(long, env = "CONVEYOR_ALLOWED_HOSTS", value_delimiter = ',')]
    pub allowed_hosts: Vec<String>,
    /// Secret that signs what gateways hand clients and must recognise on any replica (session
    /// ids, MRTR request states, stream event ids); every gateway of a deployment needs the same
    /// one. Unset: a secret made once and kept in Redis. Changing it ends what was signed with
    /// the old one (clients start a new session, a new call).
    #[arg(long, env = "CONVEYOR_SIGNING_KEY", hide_env_values = true)]
    pub signing_key: Option<String>,
    #[command(flatten)]
    pub auth: AuthArgs,
    #[command(flatten)]
    pub limits: LimitArgs,
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
    #[command(flatten)]
    pub tasks: TaskLimitArgs,
    /// How long a synchronous tools/call waits for its worker, in milliseconds.
    #[arg(long, env = "CONVEYOR_SYNC_TIMEOUT_MS", default_value_t = 300_000)]
    pub sync_timeout_ms: u64,
    #[command(flatten)]
    pub redis: RedisArgs,
}

/// What a new task may take: graph sizes, queues, a principal's live tasks, nodes and stored bytes,
/// and a task's bytes. A gateway checks its calls against them, and `conveyor redis dlq retry` its
/// retries, as calls.
#[derive(Debug, Clone, Args)]
pub struct TaskLimitArgs {
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
    /// Most tasks of one principal that are not yet terminal (synchronous calls included), over
    /// every shard: exactly this many are admitted. 0: no limit.
    #[arg(long, env = "CONVEYOR_MAX_LIVE_TASKS_PER_PRINCIPAL", default_value_t = 1_000)]
    pub max_live_tasks_per_principal: u64,
    /// Most nodes one principal's unfinished tasks may hold (a single call holds one node, a
    /// graph all of its nodes): its share of what the deployment queues. Each shard holds an equal
    /// part, and one task's nodes must fit in one part. 0: no limit.
    #[arg(long, env = "CONVEYOR_MAX_NODES_PER_PRINCIPAL", default_value_t = 50_000)]
    pub max_nodes_per_principal: u64,
    /// Most bytes one principal may keep in Redis, over every shard: its tasks' calls, node
    /// outputs, results and answers until their TTL runs out, and its memories. Over it, a new
    /// call is refused at once, saying when the oldest task gives its bytes back; a node that
    /// would pass it fails. Each shard holds an equal share, and one task must fit in one share.
    /// 0: no limit.
    #[arg(long, env = "CONVEYOR_MAX_STORED_BYTES_PER_PRINCIPAL", default_value_t = 256 * 1024 * 1024)]
    pub max_stored_bytes_per_principal: u64,
    /// Most synchronous calls of one principal that wait in an input round its client was told of
    /// (2026-07-28 without tasks: MRTR). They hold no live-task slot, so that rounds a client
    /// abandons never lock it out; past this many, its oldest unanswered round ends (cancelled).
    /// Each shard holds an equal share, at least one. 0: no limit.
    #[arg(long, env = "CONVEYOR_MAX_PARKED_ROUNDS_PER_PRINCIPAL", default_value_t = 32)]
    pub max_parked_rounds_per_principal: u64,
    /// Most bytes one task may store in Redis in all (its arguments, every node's output, its
    /// result); a node that would pass it fails with an error naming the limit. A reader holds
    /// three times a result's size of its caller's in-flight budget, so this is at most a third
    /// of that budget.
    #[arg(long, env = "CONVEYOR_MAX_TASK_BYTES", default_value_t = 16 * 1024 * 1024)]
    pub max_task_bytes: u64,
}

impl TaskLimitArgs {
    /// The overload limits a new task is checked against.
    pub fn limits(&self) -> conveyor_shared::store::Limits {
        conveyor_shared::store::Limits {
            max_queued: self.max_queued,
            max_queued_per_tool: self.max_queued_per_tool,
            max_live_per_principal: self.max_live_tasks_per_principal,
            max_nodes_per_principal: self.max_nodes_per_principal,
            max_stored_bytes_per_principal: self.max_stored_bytes_per_principal,
            max_parked_rounds_per_principal: self.max_parked_rounds_per_principal,
        }
    }

    /// The limits a graph is checked against.
    pub fn dag_limits(&self) -> conveyor_shared::dag::DagLimits {
        conveyor_shared::dag::DagLimits {
            max_nodes: self.max_dag_nodes,
            max_node_bytes: self.max_dag_node_bytes,
            ..Default::default()
        }
    }
}

/// Who may call: static tokens, OAuth 2.1 access tokens (JWT), the access policy.
#[derive(Debug, Clone, Args)]
pub struct AuthArgs {
    /// Serve without authentication: every caller is `anonymous` and may do anything. For a
    /// gateway on your own machine only; a gateway refuses to start with no authentication
    /// configured unless this is given.
    #[arg(long, env = "CONVEYOR_NO_AUTH", value_parser = clap::builder::BoolishValueParser::new())]
    pub no_auth: bool,
    /// Static bearer tokens: a TOML file of `[[token]]` entries, each a `principal`, its `groups`
    /// and the token's `sha256` (`conveyor token new` makes one).
    #[arg(long, env = "CONVEYOR_TOKENS_FILE")]
    pub tokens_file: Option<std::path::PathBuf>,
    /// OAuth 2.1: the issuer (`iss`) of the access tokens this gateway accepts. Needs `--jwks`.
    #[arg(long, env = "CONVEYOR_JWT_ISSUER")]
    pub jwt_issuer: Option<String>,
    /// The authorization server's JSON Web Key Set: a file or an https:// URL (plain http is
    /// refused; redirects are not followed; at most 1 MiB), read at start, every
    /// `--jwks-refresh-s`, and when a token names a key not in it (one read at a time, at most
    /// one every 10 s).
    #[arg(long, env = "CONVEYOR_JWKS")]
    pub jwks: Option<String>,
    /// Accepted token audiences (`aud`), comma-separated; default: `--resource-url`.
    #[arg(long, env = "CONVEYOR_JWT_AUDIENCE", value_delimiter = ',')]
    pub jwt_audience: Vec<String>,
    /// Scopes every access token must grant, comma-separated.
    #[arg(long, env = "CONVEYOR_JWT_SCOPES", value_delimiter = ',')]
    pub jwt_scopes: Vec<String>,
    /// Clock skew allowed on `exp` and `nbf`, in seconds.
    #[arg(long, env = "CONVEYOR_JWT_LEEWAY_S", default_value_t = 60)]
    pub jwt_leeway_s: u64,
    /// The claim that names the principal. The principal is `<issuer>#<claim>` (for example
    /// `https://idp.example.com#alice`), unless `--jwt-bare-principals`.
    #[arg(long, env = "CONVEYOR_JWT_PRINCIPAL_CLAIM", default_value = "sub")]
    pub jwt_principal_claim: String,
    /// Name a JWT's principal by its claim alone (`alice`), not `<issuer>#alice`: for an access
    /// file that names the authorization server's subjects as they are. A static token of the same
    /// name is then the same principal, with its tasks and rights; use it only when no static
    /// token's principal can collide with a subject.
    #[arg(long, env = "CONVEYOR_JWT_BARE_PRINCIPALS", value_parser = clap::builder::BoolishValueParser::new())]
    pub jwt_bare_principals: bool,
    /// The claim that lists the principal's groups (an array, or a space-separated string).
    #[arg(long, env = "CONVEYOR_JWT_GROUPS_CLAIM", default_value = "groups")]
    pub jwt_groups_claim: String,
    /// How often the JWKS is read again, in seconds.
    #[arg(long, env = "CONVEYOR_JWKS_REFRESH_S", default_value_t = 300)]
    pub jwks_refresh_s: u64,
    /// The URL clients reach this endpoint at (e.g. https://conveyor.example.com/mcp): the
    /// `resource` of the protected resource metadata, and the default token audience.
    #[arg(long, env = "CONVEYOR_RESOURCE_URL")]
    pub resource_url: Option<String>,
    /// Authorization servers named in the resource metadata, comma-separated; default: the issuer.
    #[arg(long, env = "CONVEYOR_AUTHORIZATION_SERVERS", value_delimiter = ',')]
    pub authorization_servers: Vec<String>,
    /// Who may call which tool, and who operates (sees and cancels every task): a TOML file
    /// (see docs/security.md). Without one every caller may call every tool.
    #[arg(long, env = "CONVEYOR_ACCESS_FILE")]
    pub access_file: Option<std::path::PathBuf>,
}

/// Bounds on what one request, one client or one connection may cost.
#[derive(Debug, Clone, Args)]
pub struct LimitArgs {
    /// Deepest nesting of arrays and objects in a request.
    #[arg(long, env = "CONVEYOR_MAX_JSON_DEPTH", default_value_t = 64)]
    pub max_json_depth: usize,
    /// Most memory one request's JSON may take once parsed, in bytes (measured before parsing).
    #[arg(long, env = "CONVEYOR_MAX_PARSED_BYTES", default_value_t = 32 * 1024 * 1024)]
    pub max_parsed_bytes: usize,
    /// Memory all requests of this gateway may hold at once, in bytes: bodies and parsed JSON, and
    /// three times what a reader of a task reads, until its answer is written; past it a request
    /// waits up to 2 s, then is refused with a retryable error.
    #[arg(long, env = "CONVEYOR_MAX_INFLIGHT_BYTES", default_value_t = 256 * 1024 * 1024)]
    pub max_inflight_bytes: usize,
    /// The share of that memory one principal's requests may hold at once, in bytes; a request
    /// over it waits up to 2 s, then is refused with a retryable error naming the limit. 0: a
    /// quarter of --max-inflight-bytes, but at least one largest request (body and parse).
    #[arg(long, env = "CONVEYOR_MAX_INFLIGHT_BYTES_PER_PRINCIPAL", default_value_t = 0)]
    pub max_inflight_bytes_per_principal: usize,
    /// Streams and waiting calls one principal may hold open on this gateway at once: SSE
    /// replies, synchronous calls waiting for their task, tasks/result, subscriptions/listen,
    /// resumed streams and web view streams.
    #[arg(long, env = "CONVEYOR_MAX_STREAMS_PER_PRINCIPAL", default_value_t = 128)]
    pub max_streams_per_principal: usize,
    /// Largest `arguments` of one tools/call, in bytes of JSON.
    #[arg(long, env = "CONVEYOR_MAX_ARGUMENT_BYTES", default_value_t = 1024 * 1024)]
    pub max_argument_bytes: usize,
    /// How long a client may take to send a request's headers, and how long an idle connection is
    /// kept open, in milliseconds.
    #[arg(long, env = "CONVEYOR_HEADER_TIMEOUT_MS", default_value_t = 10_000)]
    pub header_timeout_ms: u64,
    /// How long a client may take to send a request's body, in milliseconds.
    #[arg(long, env = "CONVEYOR_BODY_TIMEOUT_MS", default_value_t = 30_000)]
    pub body_timeout_ms: u64,
    /// Connections served at once; more wait to be accepted.
    #[arg(long, env = "CONVEYOR_MAX_CONNECTIONS", default_value_t = 1024)]
    pub max_connections: usize,
    /// Requests per second per principal, over every gateway of the deployment (kept in Redis).
    /// 0: no limit.
    #[arg(long, env = "CONVEYOR_RATE_LIMIT_RPS", default_value_t = 0.0)]
    pub rate_limit_rps: f64,
    /// Requests a principal may send at once above its rate. 0: twice the rate.
    #[arg(long, env = "CONVEYOR_RATE_LIMIT_BURST", default_value_t = 0)]
    pub rate_limit_burst: u32,
    /// Shortest time between two reads of one task by one principal, over every gateway, in
    /// milliseconds (clients should poll at the task's pollInterval): tasks/get, the task resource
    /// and the web view share one gap, tasks/result and the result resource another, and each page
    /// of each listing has its own. 0: no limit.
    #[arg(long, env = "CONVEYOR_MIN_POLL_GAP_MS", default_value_t = 0)]
    pub min_poll_gap_ms: u64,
}

#[derive(Debug, Clone, Args)]
pub struct WorkerArgs {
    /// Nodes this worker runs at once.
    #[arg(long, env = "CONVEYOR_WORKER_CONCURRENCY", default_value_t = 16)]
    pub concurrency: usize,
    #[command(flatten)]
    pub offers: OfferArgs,
    /// On SIGINT/SIGTERM, how long running nodes may take to finish before they are stopped and
    /// handed back to the queue for another worker, in milliseconds.
    #[arg(long, env = "CONVEYOR_SHUTDOWN_GRACE_MS", default_value_t = 30_000)]
    pub shutdown_grace_ms: u64,
    /// How long a running node's lease lasts, in milliseconds. A worker renews its leases three
    /// times per lease; when one stops renewing (killed, hung, cut off), another worker takes its
    /// nodes over after this long.
    #[arg(long, env = "CONVEYOR_LEASE_MS", default_value_t = 30_000)]
    pub lease_ms: u64,
    /// This worker's name among the deployment's consumers (letters, digits, `.`, `_`, `-`). A
    /// worker restarted under the same name (a StatefulSet's pod name, say) takes up at once the
    /// entries Redis still counts as delivered to it. Default: `worker-` and a random id.
    #[arg(long = "name", env = "CONVEYOR_WORKER_NAME")]
    pub name: Option<String>,
    /// After a node has lost its worker this many times it is not run again: it fails and goes to
    /// the dead-letter stream.
    #[arg(long, env = "CONVEYOR_MAX_NODE_LOSSES", default_value_t = 3)]
    pub max_node_losses: u32,
    /// Address of this worker's own HTTP listener, for Prometheus and probes: /metrics, /healthz
    /// (the process runs) and /readyz (Redis answers). Unset: no listener.
    #[arg(long, env = "CONVEYOR_METRICS_LISTEN", value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
    #[command(flatten)]
    pub nodes: NodeArgs,
    #[command(flatten)]
    pub redis: RedisArgs,
}

/// What one node may take in and hand out on a worker, and the share of its slots one principal
/// may take.
#[derive(Debug, Clone, Args)]
pub struct NodeArgs {
    /// The share of a worker's slots one principal's nodes may take (more than 0, at most 1); the
    /// rest stay free for other principals, whose work then starts at once however long one
    /// principal's graph is. 1: no share.
    #[arg(long, env = "CONVEYOR_PRINCIPAL_SHARE", default_value_t = 0.75)]
    pub principal_share: f64,
    /// Largest arguments of a graph node once the upstream values its `$from` references name are
    /// put in, in bytes of JSON; a node over it fails (for good) with an error naming the limit,
    /// before anything that large is built.
    #[arg(long, env = "CONVEYOR_MAX_NODE_ARGUMENT_BYTES", default_value_t = 4 * 1024 * 1024)]
    pub max_node_argument_bytes: usize,
    /// Largest result or error one node may store, in bytes of JSON; a node over it fails (for
    /// good) with an error naming the limit.
    #[arg(long, env = "CONVEYOR_MAX_NODE_OUTPUT_BYTES", default_value_t = 8 * 1024 * 1024)]
    pub max_node_output_bytes: usize,
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
    #[command(flatten)]
    pub offers: OfferArgs,
    #[command(flatten)]
    pub nodes: NodeArgs,
}

/// What a worker offers: its tools, what they may read, and the operator's own tools.
#[derive(Debug, Clone, Args)]
pub struct OfferArgs {
    /// A directory tools may read, as NAME=PATH (repeatable; in CONVEYOR_ROOTS, comma-separated).
    /// Tools take a root's name and paths relative to it; nothing outside a root is read.
    #[arg(long = "root", env = "CONVEYOR_ROOTS", value_delimiter = ',', value_name = "NAME=PATH")]
    pub roots: Vec<String>,
    /// A TOML file of the operator's tools (commands run without a shell) and readiness profiles
    /// (see the README).
    #[arg(long, env = "CONVEYOR_TOOLS_FILE", value_name = "FILE")]
    pub tools_file: Option<std::path::PathBuf>,
    /// Also offer the fixture tools (greet, slow_compute, failing_job, ... and the MCP
    /// conformance suite's test_* tools). Off by default.
    #[arg(long, env = "CONVEYOR_FIXTURES")]
    pub fixtures: bool,
    /// Offer only these tools of the worker's registry (comma-separated), so that one binary can
    /// serve several pools: the worker reads only the queues of the tools it offers (and of the
    /// steps their graphs use).
    #[arg(long, env = "CONVEYOR_TOOLS", value_delimiter = ',')]
    pub tools: Vec<String>,
}
