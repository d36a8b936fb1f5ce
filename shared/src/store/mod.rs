//! [`Store`]: every Redis operation of Conveyor, typed, bounded in time, retried through a short
//! outage, and atomic where it changes state (each state change is one Lua script from
//! [`crate::scripts`], over the keys of one shard).
//!
//! The operations are grouped by concern:
//! - [`tasks`]: create, read, watch, cancel, answer input;
//! - [`nodes`]: start a batch, report progress, ask for input, complete, hand back, plan, settle;
//! - `completions`: completions of one shard sent as one script call per batch (`group_commit`);
//! - `lean`: lean calls (ADR-0028): created in batches, started by their delivery, completed in
//!   batches, adopted into the full path by a rare transition;
//! - [`queues`]: consumer groups, batched reads, lease renewal, entries nobody renewed for a lease;
//! - [`maintenance`]: each shard's due retries and expiries, run by one worker at a time;
//! - [`catalog`]: live workers and the tools they offer;
//! - [`dead_letters`]: nodes that failed for good, for operators;
//! - [`reads`]: one task read for a client: behind the poll gate, no more than the reader shows
//!   and holds memory for;
//! - [`listing`]: an owner's tasks (or every live task, for operators), page by page across shards,
//!   or the newest few (the web view);
//! - [`limits`]: limits every gateway shares: request rate per principal, poll gaps;
//! - [`history`]: tools' run histories (a readiness profile's past runs);
//! - [`stats`]: queue depths, dead letters and live workers, read for a metrics scrape;
//! - [`effects`]: what a transition's reply says it settled or dead-lettered, counted in the
//!   process's metrics.
//!
//! Every round trip is timed and its failures counted in [`crate::metrics`], by script, command
//! or pipeline name.

pub mod catalog;
mod completions;
pub mod dead_letters;
mod effects;
mod group_commit;
pub mod history;
pub mod lean;
pub mod limits;
pub mod listing;
pub mod maintenance;
pub mod nodes;
pub mod queues;
pub mod reads;
pub mod stats;
pub mod tasks;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::OnceCell;

pub use catalog::{FORGET_AFTER_MS, Heartbeat, RunningNode, WorkerRecord};
pub use dead_letters::DeadLetter;
pub use listing::{TaskIndex, TaskPage};
pub use maintenance::{MaintainOutcome, ReclaimOutcome};
pub use nodes::{
    Attempt, CompleteOutcome, ExpandOutcome, NodeStart, ParkOutcome, RELEASE_SET_ASIDE_AFTER, SlotShares,
    StartOutcome,
};
pub use queues::{IdleEntries, IdleEntry, WorkReader};
pub use reads::{Gate, GateKind, ReadOutcome, TaskDetail, TaskParts, TaskRead};
pub use stats::{ClusterStats, QueueDepth};
pub use tasks::{
    AnswerOutcome, CancelOutcome, Created, LimitHit, Limits, NewTask, Overdue, task_error, task_summary,
};

use crate::conn::{Backend, Conn};
use crate::error::StoreError;
use crate::events::EventHub;
use crate::keys::{self, Shard};
use crate::scripts::NamedScript;
use crate::telemetry::context::attr;
use tracing::Instrument;

/// Number of shards of a new deployment on a Redis Cluster (each shard is one slot), and of a
/// store opened without a count of its own.
pub const DEFAULT_SHARDS: u16 = 4;

/// Number of shards of a new deployment on a single server: one, so that a worker's read names
/// one stream per queue and a shard's batches gather every call (ADR-0028).
pub const SINGLE_SERVER_SHARDS: u16 = 1;

/// How a store reaches Redis and how its deployment is laid out.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// How long one Redis round trip may take.
    pub timeout: Duration,
    /// How long an operation keeps trying while Redis is out of reach (a restart, a failover)
    /// before it fails with a retryable error.
    pub outage_wait: Duration,
    /// Shards of the keyspace; the same for every process of a deployment.
    pub shards: u16,
    /// This process's name: its inbox channels carry it. Random when `None`.
    pub process: Option<String>,
    /// When above zero, a create or a cancel is answered only once this many replicas have the
    /// write (`WAIT`, in the same round trip), and a task's end reaches clients (its waiters'
    /// events, a read of it) only once they have it, so that a failover cannot lose what a client
    /// was told. Zero: Redis's asynchronous replication as it is.
    pub wait_replicas: u32,
    /// How long such a `WAIT` may take before the operation fails with a retryable error.
    pub wait_timeout: Duration,
    /// Whether gateways create lean calls (ADR-0028: a synchronous call of one tool whose entry
    /// carries what its worker runs; created and completed in batches). Off on a deployment that
    /// waits for replicas, whose transitions publish only after their `WAIT`. A worker with it off
    /// starts every entry with `start_nodes`, lean ones included (as a worker of the previous
    /// version does).
    pub lean_calls: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(3),
            outage_wait: Duration::from_secs(5),
            shards: DEFAULT_SHARDS,
            process: None,
            wait_replicas: 0,
            wait_timeout: Duration::from_secs(1),
            lean_calls: true,
        }
    }
}

struct Inner {
    backend: Mutex<Backend>,
    conn: OnceCell<Conn>,
    hub: OnceCell<EventHub>,
    options: StoreOptions,
    process: String,
    completions: group_commit::Batches<completions::Completion>,
    lean_creates: group_commit::Batches<lean::LeanCreate>,
    lean_completions: group_commit::Batches<lean::LeanCompletion>,
    /// Lean attempts adopted into the full path, by (stream, entry): their attempt numbers.
    adopted: Mutex<std::collections::HashMap<(String, String), u32>>,
}

/// A script's record (`ARGV[1]`) as MessagePack, which Redis's Lua unpacks (`cmsgpack.unpack`) in
/// about a third of the time `cjson.decode` takes for the same record. Structs go as maps by field
/// name; a `None` or JSON `null` arrives in Lua as an absent field.
fn script_record(record: &impl Serialize) -> Result<Vec<u8>, StoreError> {
    rmp_serde::to_vec_named(record).map_err(|e| StoreError::Corrupt(format!("script record: {e}")))
}

/// Redis's `TIME` reply (seconds, microseconds) in milliseconds.
pub(crate) fn redis_ms((seconds, micros): (u64, u64)) -> u64 {
    seconds.saturating_mul(1000).saturating_add(micros / 1000)
}

/// A script's reply with the events it kept for its caller (`deferEvents`).
#[derive(serde::Deserialize)]
pub(crate) struct Deferred {
    pub(crate) events: Vec<(String, String)>,
    pub(crate) reply: Value,
}

/// Conveyor's view of Redis. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

impl Store {
    /// A store for `url` with the default layout. Connections are made on first use, so this
    /// succeeds while Redis is down; every operation then fails within its time budget until
    /// Redis is back.
    pub fn new(url: &str, timeout: Duration) -> Result<Self, StoreError> {
        Self::open(url, StoreOptions { timeout, ..StoreOptions::default() })
    }

    /// A store for `url` with the deployment's shard count: the one it recorded, or a new
    /// deployment's for this Redis ([`Store::deployment_shards`]); the other options as given.
    /// Unlike [`Store::new`], it needs Redis to answer.
    pub async fn for_deployment(url: &str, options: StoreOptions) -> Result<Self, StoreError> {
        let shards = Self::open(url, options.clone())?.deployment_shards().await?;
        Self::open(url, StoreOptions { shards, ..options })
    }

    /// A store for `url` (one server, one node of a cluster, or comma-separated cluster seeds).
    pub fn open(url: &str, options: StoreOptions) -> Result<Self, StoreError> {
        if options.shards == 0 || options.shards > keys::MAX_SHARDS {
            return Err(StoreError::Layout(format!(
                "the shard count must be between 1 and {} (CONVEYOR_SHARDS), not {}",
                keys::MAX_SHARDS,
                options.shards
            )));
        }
        let backend = Backend::parse(url, options.timeout)?;
        let process = options.process.clone().unwrap_or_else(crate::model::random_id);
        Ok(Self {
            inner: Arc::new(Inner {
                backend: Mutex::new(backend),
                conn: OnceCell::new(),
                hub: OnceCell::new(),
                options,
                process,
                completions: Default::default(),
                lean_creates: Default::default(),
                lean_completions: Default::default(),
                adopted: Default::default(),
            }),
        })
    }

    pub fn shards(&self) -> u16 {
        self.inner.options.shards
    }

    /// Every shard of the deployment.
    pub fn all_shards(&self) -> impl Iterator<Item = Shard> + use<> {
        (0..self.shards()).map(Shard)
    }

    /// The shard of a task id, or `None` for an id that names no task of this deployment.
    pub fn shard_of(&self, task_id: &str) -> Option<Shard> {
        keys::shard_of(task_id, self.shards())
    }

    /// A shard for a new task, spread at random.
    pub fn pick_shard(&self) -> Shard {
        Shard((rand::random::<u32>() % u32::from(self.shards())) as u16)
    }

    pub fn timeout(&self) -> Duration {
        self.inner.options.timeout
    }

    /// Whether the deployment is a Redis Cluster (known once connected).
    pub async fn is_cluster(&self) -> Result<bool, StoreError> {
        self.conn().await?;
        Ok(self.backend().cluster)
    }

    fn backend(&self) -> Backend {
        self.inner.backend.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// The shared command connection, made on first use.
    async fn conn(&self) -> Result<Conn, StoreError> {
        self.inner
            .conn
            .get_or_try_init(|| async {
                let mut backend = self.backend();
                let conn = backend.connect().await?;
                *self.inner.backend.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = backend;
                Ok::<_, StoreError>(conn)
            })
            .await
            .cloned()
    }

    /// The process's event hub (inbox and cancel channels), subscribed on first use.
    pub async fn events(&self) -> Result<EventHub, StoreError> {
        // Every call asks: once the hub listens, the answer is at hand, with no timer and no
        // room in the caller's future for the first start, which runs boxed.
        if let Some(hub) = self.inner.hub.get()
            && hub.is_live()
        {
            return Ok(hub.clone());
        }
        Box::pin(self.start_events()).await
    }

    async fn start_events(&self) -> Result<EventHub, StoreError> {
        self.conn().await?;
        let hub = self
            .inner
            .hub
            .get_or_init(|| async { EventHub::new(self.backend(), self.shards(), &self.inner.process) })
            .await
            .clone();
        if !hub.start(self.inner.options.outage_wait).await {
            return Err(StoreError::Unavailable("cannot subscribe to task events".to_owned()));
        }
        Ok(hub)
    }

    /// Runs one operation on the shared connection, each attempt bounded by the timeout, and
    /// tries again while Redis is briefly out of reach, up to the outage budget. Every operation
    /// passed here is safe to repeat: scripts are guarded by status and attempt, so a repeat
    /// after a lost reply finds its work done and changes nothing.
    pub(crate) async fn run<T, F, Fut>(&self, name: &'static str, op: F) -> Result<T, StoreError>
    where
        F: Fn(Conn) -> Fut,
        Fut: Future<Output = Result<T, redis::RedisError>>,
    {
        self.run_within(Op::Named(name), self.inner.options.timeout, op).await
    }

    /// [`Store::run`] with a round trip allowed `timeout` (longer for one that waits for replicas).
    async fn run_within<T, F, Fut>(&self, name: Op<'_>, timeout: Duration, op: F) -> Result<T, StoreError>
    where
        F: Fn(Conn) -> Fut,
        Fut: Future<Output = Result<T, redis::RedisError>>,
    {
        let give_up = tokio::time::Instant::now() + self.inner.options.outage_wait;
        let mut delay = Duration::from_millis(25);
        loop {
            let started = std::time::Instant::now();
            let attempt = async {
                let conn = self.conn().await?;
                op(conn).await.map_err(StoreError::from)
            };
            let span = name.span();
            let result = tokio::time::timeout(timeout, attempt)
                .instrument(span.clone())
                .await
                .unwrap_or(Err(StoreError::Timeout(timeout)));
            name.record(started.elapsed(), result.is_ok());
            if let Err(e) = &result {
                span.record("otel.status_code", "ERROR");
                span.record("otel.status_description", e.to_string());
            }
            let error = match result {
                Ok(value) => return Ok(value),
                Err(e) => e,
            };
            if !error.is_transient() || tokio::time::Instant::now() + delay > give_up {
                return Err(error);
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_millis(500));
        }
    }

    /// Runs one command (or one single-slot pipeline) through [`Store::run`].
    pub(crate) async fn query<T: redis::FromRedisValue>(
        &self,
        make: impl Fn() -> redis::Cmd,
    ) -> Result<T, StoreError> {
        let command = make();
        self.run_within(Op::Command(&command), self.inner.options.timeout, |mut c| {
            let cmd = make();
            async move { cmd.query_async(&mut c).await }
        })
        .await
    }

    /// Runs a script over `keys` with `record` as its one argument, and decodes its JSON reply.
    pub(crate) async fn script<T: DeserializeOwned>(
        &self,
        script: &'static NamedScript,
        keys: &[String],
        record: &impl Serialize,
    ) -> Result<T, StoreError> {
        let reply: String = self.script_reply(script, keys, record).await?;
        serde_json::from_str(&reply).map_err(|e| StoreError::Corrupt(format!("script reply {reply:?}: {e}")))
    }

    /// Runs a script over `keys` with `record` as its one argument, and takes its reply as Redis
    /// gives it: for scripts on the hot path, whose replies carry stored JSON texts that a JSON
    /// reply would escape into another document.
    pub(crate) async fn script_reply<T: redis::FromRedisValue>(
        &self,
        script: &'static NamedScript,
        keys: &[String],
        record: &impl Serialize,
    ) -> Result<T, StoreError> {
        let record = script_record(record)?;
        let mut invocation = script.prepare_invoke();
        for key in keys {
            invocation.key(key);
        }
        invocation.arg(&record);
        self.run_within(Op::Script(script.name), self.inner.options.timeout, |mut c| {
            let invocation = &invocation;
            async move { invocation.invoke_async(&mut c).await }
        })
        .await
    }

    /// Like [`Store::script`] for a transition a client is told about (create, cancel): with
    /// [`StoreOptions::wait_replicas`] set, the script and a `WAIT` travel in one pipeline on the
    /// connection to the shard's primary, and the reply counts only once enough replicas have the
    /// write; too few within the timeout is a retryable error (repeating the script is safe).
    pub(crate) async fn durable_script<T: DeserializeOwned>(
        &self,
        script: &'static NamedScript,
        keys: &[String],
        record: &impl Serialize,
    ) -> Result<T, StoreError> {
        let replicas = self.inner.options.wait_replicas;
        if replicas == 0 {
            return self.script(script, keys, record).await;
        }
        let (reply, acknowledged) = self.eval_and_wait(script, keys, &script_record(record)?).await?;
        self.enough_replicas(acknowledged)?;
        serde_json::from_str(&reply).map_err(|e| StoreError::Corrupt(format!("script reply {reply:?}: {e}")))
    }

    /// [`Store::durable_script`] for a transition whose waiters hear of it (a cancel, a graph's
    /// end): with [`StoreOptions::wait_replicas`] set, the script keeps its waiters' events
    /// (`deferEvents`), and they are published only once enough replicas have the write, so that
    /// no client hears of what a failover could take back. Too few replicas: a retryable error,
    /// and the events go unpublished (a waiter learns of the transition at its next read, which
    /// waits for the replicas too: [`Store::confirm_settled`]).
    pub(crate) async fn durable_transition<T: DeserializeOwned>(
        &self,
        script: &'static NamedScript,
        keys: &[String],
        record: &Value,
    ) -> Result<T, StoreError> {
        if self.inner.options.wait_replicas == 0 {
            return self.script(script, keys, record).await;
        }
        let mut record = record.clone();
        record["deferEvents"] = Value::Bool(true);
        let (reply, acknowledged) = self.eval_and_wait(script, keys, &script_record(&record)?).await?;
        let Deferred { events, reply } = serde_json::from_str(&reply)
            .map_err(|e| StoreError::Corrupt(format!("script reply {reply:?}: {e}")))?;
        self.enough_replicas(acknowledged)?;
        self.publish_events(&events).await?;
        serde_json::from_value(reply).map_err(|e| StoreError::Corrupt(format!("script reply: {e}")))
    }

    /// Runs `script` and a `WAIT` for [`StoreOptions::wait_replicas`] in one pipeline, on the
    /// connection to the shard's primary; the script's reply and how many replicas confirmed.
    pub(crate) async fn eval_and_wait(
        &self,
        script: &'static NamedScript,
        keys: &[String],
        record: &[u8],
    ) -> Result<(String, u32), StoreError> {
        let (replicas, timeout) = (self.inner.options.wait_replicas, self.inner.options.wait_timeout);
        let mut pipe = redis::pipe();
        pipe.cmd("EVALSHA").arg(script.get_hash()).arg(keys.len()).arg(keys).arg(record);
        pipe.cmd("WAIT").arg(replicas).arg(timeout.as_millis() as u64);
        self.run_within(Op::Script(script.name), self.inner.options.timeout + timeout, |mut c| {
            let pipe = &pipe;
            async move {
                match pipe.query_async::<(String, u32)>(&mut c).await {
                    Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                        script.prepare_invoke().load_async(&mut c).await?;
                        pipe.query_async(&mut c).await
                    }
                    other => other,
                }
            }
        })
        .await
    }

    /// Whether `acknowledged` replicas are enough; the retryable error when they are not.
    pub(crate) fn enough_replicas(&self, acknowledged: u32) -> Result<(), StoreError> {
        let (replicas, timeout) = (self.inner.options.wait_replicas, self.inner.options.wait_timeout);
        if acknowledged < replicas {
            return Err(StoreError::Unavailable(format!(
                "only {acknowledged} of {replicas} replicas confirmed the write within {timeout:?}"
            )));
        }
        Ok(())
    }

    /// Publishes events a script kept (`deferEvents`) on their waiters' inbox channels.
    pub(crate) async fn publish_events(&self, events: &[(String, String)]) -> Result<(), StoreError> {
        if events.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for (channel, message) in events {
            pipe.cmd("SPUBLISH").arg(channel).arg(message).ignore();
        }
        self.pipeline::<()>(&pipe).await
    }

    /// On a deployment that waits for replicas: returns once enough replicas have everything
    /// written to the task before now, its end included, so that a reader shows a settled task
    /// only when a failover cannot take its end back. Too few: a retryable error.
    pub(crate) async fn confirm_settled(&self, task_key: &str) -> Result<(), StoreError> {
        if self.inner.options.wait_replicas == 0 {
            return Ok(());
        }
        let record = script_record(&serde_json::json!({}))?;
        let (_, acknowledged) =
            self.eval_and_wait(&crate::scripts::CONFIRM_SETTLED, &[task_key.to_owned()], &record).await?;
        self.enough_replicas(acknowledged).map_err(|_| {
            StoreError::Unavailable(format!(
                "the task's end is not yet on {} replicas; ask again shortly",
                self.inner.options.wait_replicas
            ))
        })
    }

    /// Runs a pipeline whose commands all touch one slot.
    pub(crate) async fn pipeline<T: redis::FromRedisValue>(
        &self,
        pipe: &redis::Pipeline,
    ) -> Result<T, StoreError> {
        self.run("pipeline", |mut c| async move { pipe.query_async(&mut c).await }).await
    }

    /// Redis's clock (ms), which every time a script stores is taken from: ages and liveness are
    /// judged by it, never by this process's clock, which may be minutes off.
    pub async fn redis_now_ms(&self) -> Result<u64, StoreError> {
        Ok(redis_ms(self.query(|| redis::cmd("TIME")).await?))
    }

    /// Whether Redis answers.
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.run("PING", |mut c| async move { redis::cmd("PING").query_async::<()>(&mut c).await }).await
    }

    /// The deployment's shard count: the one it recorded (`check_layout`), or, for a deployment
    /// not set up yet, a new one's for this Redis: [`SINGLE_SERVER_SHARDS`] on a single server,
    /// [`DEFAULT_SHARDS`] on a Redis Cluster.
    pub async fn deployment_shards(&self) -> Result<u16, StoreError> {
        let recorded: Option<u16> = self.query(|| redis::Cmd::hget(keys::LAYOUT, "shards")).await?;
        Ok(match recorded {
            Some(shards) => shards,
            None if self.is_cluster().await? => DEFAULT_SHARDS,
            None => SINGLE_SERVER_SHARDS,
        })
    }

    /// Records this process's shard count as the deployment's, or checks it against the one
    /// recorded: processes that disagree would lose tasks in shards some of them never read.
    pub async fn check_layout(&self) -> Result<(), StoreError> {
        let shards = self.shards();
        let recorded: (bool, u16) = self
            .run("check_layout", |mut c| async move {
                redis::pipe()
                    .cmd("HSETNX")
                    .arg(keys::LAYOUT)
                    .arg("shards")
                    .arg(shards)
                    .cmd("HGET")
                    .arg(keys::LAYOUT)
                    .arg("shards")
                    .query_async(&mut c)
                    .await
            })
            .await?;
        if recorded.1 != shards {
            return Err(StoreError::Layout(format!(
                "this deployment has {} shards (recorded in {}), but this process was started with {shards}: start \
                 every gateway and worker with CONVEYOR_SHARDS={}",
                recorded.1,
                keys::LAYOUT,
                recorded.1
            )));
        }
        Ok(())
    }

    /// The deployment's signing secret (hex), which gateways share to sign what they hand clients
    /// and must recognise on any replica (session ids, MRTR request states): made once by the
    /// first process that asks (`candidate`), read by every later one.
    pub async fn signing_secret(&self, candidate: &str) -> Result<String, StoreError> {
        self.layout_field_once("signingKey", candidate).await
    }

    /// The deployment's id (hex): made once by the first process that asks, the same for every
    /// process that shares this Redis. Not a secret: it marks what a deployment leaves outside
    /// Redis (a scratch copy on a shared disk) as its own, so that another deployment's workers
    /// leave it alone.
    pub async fn deployment_id(&self) -> Result<String, StoreError> {
        self.layout_field_once("deploymentId", &format!("{:032x}", rand::random::<u128>())).await
    }

    /// A field of the layout that the first process to ask sets to its `candidate`, and every
    /// later one reads.
    async fn layout_field_once(&self, field: &'static str, candidate: &str) -> Result<String, StoreError> {
        let candidate = candidate.to_owned();
        let recorded: (bool, String) = self
            .run(field, |mut c| {
                let candidate = candidate.clone();
                async move {
                    redis::pipe()
                        .cmd("HSETNX")
                        .arg(keys::LAYOUT)
                        .arg(field)
                        .arg(candidate)
                        .cmd("HGET")
                        .arg(keys::LAYOUT)
                        .arg(field)
                        .query_async(&mut c)
                        .await
                }
            })
            .await?;
        Ok(recorded.1)
    }

    /// The backend, for connections of their own (blocking reads).
    pub(crate) async fn dedicated_backend(&self) -> Result<Backend, StoreError> {
        self.conn().await?;
        Ok(self.backend())
    }
}

/// What a round trip is named by in the metrics.
#[derive(Clone, Copy)]
pub(crate) enum Op<'a> {
    /// A Lua script, by its file's name.
    Script(&'static str),
    /// An operation named by its caller.
    Named(&'static str),
    /// A command, named by its first argument.
    Command(&'a redis::Cmd),
}

impl Op<'_> {
    fn record(&self, took: Duration, ok: bool) {
        match self {
            Op::Script(name) | Op::Named(name) => crate::metrics::redis_round_trip(name, took, ok),
            Op::Command(cmd) => crate::metrics::redis_command(cmd, took, ok),
        }
    }

    /// The span of one round trip, under the span it serves (a request, a node); none when
    /// nothing is exported or the round trip serves no traced operation (heartbeats, reads of
    /// the work streams), which would each start a trace of their own.
    fn span(&self) -> tracing::Span {
        if !crate::telemetry::exporting() || tracing::Span::current().is_none() {
            return tracing::Span::none();
        }
        let (name, operation, script) = match self {
            Op::Script(script) => (format!("EVALSHA {script}"), "EVALSHA".to_owned(), *script),
            Op::Named(name) => ((*name).to_owned(), (*name).to_owned(), ""),
            Op::Command(cmd) => {
                let command = match cmd.args_iter().next() {
                    Some(redis::Arg::Simple(name)) => String::from_utf8_lossy(name).to_ascii_uppercase(),
                    _ => "command".to_owned(),
                };
                (command.clone(), command, "")
            }
        };
        let span = tracing::info_span!(
            "redis",
            otel.name = %name,
            otel.kind = "client",
            otel.status_code = tracing::field::Empty,
            otel.status_description = tracing::field::Empty,
            { attr::DB_SYSTEM_NAME } = "redis",
            { attr::DB_OPERATION_NAME } = %operation,
            { attr::DB_STORED_PROCEDURE_NAME } = tracing::field::Empty,
        );
        if !script.is_empty() {
            span.record(attr::DB_STORED_PROCEDURE_NAME, script);
        }
        span
    }
}
