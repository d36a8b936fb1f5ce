//! Settings shared by gateways and workers. The `conveyor` binary fills them from flags and the
//! environment; tests build them directly.

use std::time::Duration;

/// Default Redis address when `REDIS_URL` is not set.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

#[derive(Debug, Clone)]
pub struct Config {
    /// `REDIS_URL`.
    pub redis_url: String,
    /// TTL applied to a task whose client asks for none (`CONVEYOR_TASK_TTL_MS`).
    pub task_ttl_default_ms: u64,
    /// Largest TTL a client may ask for; larger requests are capped (`CONVEYOR_TASK_TTL_MAX_MS`).
    pub task_ttl_max_ms: u64,
    /// Poll interval suggested to clients (`CONVEYOR_POLL_INTERVAL_MS`).
    pub poll_interval_ms: u64,
    /// Largest accepted request body (`CONVEYOR_MAX_BODY_BYTES`).
    pub max_body_bytes: usize,
    /// Nesting and parsed-memory limits of a request body (`CONVEYOR_MAX_JSON_DEPTH`,
    /// `CONVEYOR_MAX_PARSED_BYTES`), checked before it is parsed.
    pub json_limits: crate::json_limits::JsonLimits,
    /// Memory all requests of one gateway may hold at once for their bodies and parsed JSON, and
    /// for what readers of tasks read until their answers are written
    /// (`CONVEYOR_MAX_INFLIGHT_BYTES`); a request that would exceed it waits briefly, then is
    /// refused with a retryable error.
    pub max_inflight_bytes: usize,
    /// The share of that memory one principal's requests may hold
    /// (`CONVEYOR_MAX_INFLIGHT_BYTES_PER_PRINCIPAL`); 0: a quarter of it, but at least one largest
    /// request ([`Config::inflight_bytes_per_principal`]).
    pub max_inflight_bytes_per_principal: usize,
    /// Streams and waiting calls (SSE replies, synchronous calls, `tasks/result`,
    /// `subscriptions/listen`, resumed streams, the web view) one principal may hold open on one
    /// gateway (`CONVEYOR_MAX_STREAMS_PER_PRINCIPAL`).
    pub max_streams_per_principal: usize,
    /// Largest `arguments` of one `tools/call`, in bytes of JSON (`CONVEYOR_MAX_ARGUMENT_BYTES`).
    pub max_argument_bytes: usize,
    /// How long a client may take to send a request's headers, which is also how long an idle
    /// connection is kept (`CONVEYOR_HEADER_TIMEOUT_MS`), and its body (`CONVEYOR_BODY_TIMEOUT_MS`).
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    /// Connections a gateway serves at once (`CONVEYOR_MAX_CONNECTIONS`); more wait to be accepted.
    pub max_connections: usize,
    /// How long any one Redis round trip may take before it fails (`CONVEYOR_REDIS_TIMEOUT_MS`).
    pub redis_timeout: Duration,
    /// How long an operation keeps trying while Redis is out of reach, a restart or a failover,
    /// before the request fails with a retryable error (`CONVEYOR_REDIS_OUTAGE_MS`).
    pub redis_outage_wait: Duration,
    /// Shards of the keyspace (`CONVEYOR_SHARDS`); fixed when a deployment is first set up.
    pub shards: u16,
    /// Replicas that must have a create, a cancel or a task's end before a client hears of it
    /// (`CONVEYOR_REDIS_WAIT_REPLICAS`; 0: none), and how long that may take
    /// (`CONVEYOR_REDIS_WAIT_MS`).
    pub redis_wait_replicas: u32,
    pub redis_wait_timeout: Duration,
    /// Whether synchronous calls of one tool go by the lean path (`CONVEYOR_LEAN_CALLS`, on by
    /// default; ADR-0028): created and completed in batches, started by their delivery.
    pub lean_calls: bool,
    /// How long a synchronous `tools/call` waits for its worker (`CONVEYOR_SYNC_TIMEOUT_MS`).
    pub sync_call_timeout: Duration,
    /// Most nodes in one DAG task (`CONVEYOR_MAX_DAG_NODES`).
    pub max_dag_nodes: usize,
    /// Largest arguments of one DAG node, in bytes of JSON (`CONVEYOR_MAX_DAG_NODE_BYTES`).
    pub max_dag_node_bytes: usize,
    /// Overload limits on new tasks (`CONVEYOR_MAX_QUEUED`, `CONVEYOR_MAX_QUEUED_PER_TOOL`,
    /// `CONVEYOR_MAX_LIVE_TASKS_PER_PRINCIPAL`, `CONVEYOR_MAX_NODES_PER_PRINCIPAL`,
    /// `CONVEYOR_MAX_STORED_BYTES_PER_PRINCIPAL`, `CONVEYOR_MAX_PARKED_ROUNDS_PER_PRINCIPAL`; 0
    /// means no limit).
    pub limits: crate::store::Limits,
    /// The bytes one task may store in Redis in all: arguments, node outputs, result
    /// (`CONVEYOR_MAX_TASK_BYTES`; 0: no limit).
    pub max_task_bytes: u64,
}

/// Memory a gateway's reader of a task holds per byte of the result it reads, against its
/// caller's in-flight budget: the text read from Redis, the parsed JSON, and the reply built of it.
pub const READ_COST: u64 = 3;

impl Default for Config {
    fn default() -> Self {
        Self {
            redis_url: DEFAULT_REDIS_URL.to_owned(),
            task_ttl_default_ms: 60 * 60 * 1000,
            task_ttl_max_ms: 24 * 60 * 60 * 1000,
            poll_interval_ms: 1000,
            max_body_bytes: 4 * 1024 * 1024,
            json_limits: crate::json_limits::JsonLimits::default(),
            max_inflight_bytes: 256 * 1024 * 1024,
            max_inflight_bytes_per_principal: 0,
            max_streams_per_principal: 128,
            max_argument_bytes: 1024 * 1024,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            max_connections: 1024,
            redis_timeout: Duration::from_secs(3),
            redis_outage_wait: Duration::from_secs(5),
            shards: crate::store::DEFAULT_SHARDS,
            redis_wait_replicas: 0,
            redis_wait_timeout: Duration::from_secs(1),
            lean_calls: true,
            sync_call_timeout: Duration::from_secs(300),
            max_dag_nodes: 10_000,
            max_dag_node_bytes: 64 * 1024,
            limits: crate::store::Limits {
                max_queued: 100_000,
                max_queued_per_tool: 0,
                max_live_per_principal: 1_000,
                max_nodes_per_principal: 50_000,
                max_stored_bytes_per_principal: 256 * 1024 * 1024,
                max_parked_rounds_per_principal: 32,
            },
            max_task_bytes: 16 * 1024 * 1024,
        }
    }
}

impl Config {
    /// Checks that the settings make sense together; the error says which one is wrong.
    pub fn validate(&self) -> Result<(), String> {
        if self.task_ttl_max_ms == 0 {
            return Err("the maximum task TTL (CONVEYOR_TASK_TTL_MAX_MS) must be at least 1 ms".to_owned());
        }
        if self.task_ttl_default_ms == 0 || self.task_ttl_default_ms > self.task_ttl_max_ms {
            return Err(format!(
                "the default task TTL (CONVEYOR_TASK_TTL_MS = {}) must be between 1 and the maximum ({} ms)",
                self.task_ttl_default_ms, self.task_ttl_max_ms
            ));
        }
        if self.poll_interval_ms == 0 {
            return Err("the poll interval (CONVEYOR_POLL_INTERVAL_MS) must be at least 1 ms".to_owned());
        }
        if self.max_body_bytes < 1024 {
            return Err(format!(
                "the body limit (CONVEYOR_MAX_BODY_BYTES = {}) must be at least 1024 bytes",
                self.max_body_bytes
            ));
        }
        if self.redis_timeout.is_zero() || self.sync_call_timeout.is_zero() {
            return Err("timeouts (CONVEYOR_REDIS_TIMEOUT_MS, CONVEYOR_SYNC_TIMEOUT_MS) must be above zero"
                .to_owned());
        }
        if self.shards == 0 || self.shards > crate::keys::MAX_SHARDS {
            return Err(format!(
                "the shard count (CONVEYOR_SHARDS = {}) must be between 1 and {}",
                self.shards,
                crate::keys::MAX_SHARDS
            ));
        }
        let json = &self.json_limits;
        if json.max_depth < 8 || json.max_depth > crate::json_limits::PARSER_MAX_DEPTH {
            return Err(format!(
                "the JSON depth limit (CONVEYOR_MAX_JSON_DEPTH = {}) must be between 8 and {}",
                json.max_depth,
                crate::json_limits::PARSER_MAX_DEPTH
            ));
        }
        if json.max_parsed_bytes < self.max_body_bytes {
            return Err(format!(
                "the parsed-memory limit (CONVEYOR_MAX_PARSED_BYTES = {}) must be at least the body limit (CONVEYOR_MAX_BODY_BYTES = {})",
                json.max_parsed_bytes, self.max_body_bytes
            ));
        }
        if self.max_inflight_bytes < self.max_body_bytes + json.max_parsed_bytes {
            return Err(format!(
                "the in-flight memory limit (CONVEYOR_MAX_INFLIGHT_BYTES = {}) must hold at least one largest request: the body limit plus the parsed-memory limit ({} bytes)",
                self.max_inflight_bytes,
                self.max_body_bytes + json.max_parsed_bytes
            ));
        }
        let own = self.max_inflight_bytes_per_principal;
        if own != 0 && (own < self.max_body_bytes + json.max_parsed_bytes || own > self.max_inflight_bytes) {
            return Err(format!(
                "the in-flight memory limit per principal (CONVEYOR_MAX_INFLIGHT_BYTES_PER_PRINCIPAL = {}) must hold one largest request ({} bytes) and be at most CONVEYOR_MAX_INFLIGHT_BYTES ({})",
                self.max_inflight_bytes_per_principal,
                self.max_body_bytes + json.max_parsed_bytes,
                self.max_inflight_bytes
            ));
        }
        if self.max_streams_per_principal == 0 {
            return Err("CONVEYOR_MAX_STREAMS_PER_PRINCIPAL must be at least 1".to_owned());
        }
        if self.header_timeout.is_zero() || self.body_timeout.is_zero() || self.max_connections == 0 {
            return Err("CONVEYOR_HEADER_TIMEOUT_MS, CONVEYOR_BODY_TIMEOUT_MS and CONVEYOR_MAX_CONNECTIONS must be above zero".to_owned());
        }
        let stored = self.limits.max_stored_bytes_per_principal;
        if stored != 0 && stored / u64::from(self.shards.max(1)) < self.max_argument_bytes as u64 {
            return Err(format!(
                "the stored-bytes budget per principal (CONVEYOR_MAX_STORED_BYTES_PER_PRINCIPAL = {stored}) is shared by the {} shards, and each share must hold one call's largest arguments (CONVEYOR_MAX_ARGUMENT_BYTES = {}): raise it to at least {}",
                self.shards,
                self.max_argument_bytes,
                self.max_argument_bytes as u64 * u64::from(self.shards.max(1))
            ));
        }
        let readable = self.inflight_bytes_per_principal() as u64 / READ_COST;
        if self.max_task_bytes > readable {
            return Err(format!(
                "a task may store {} bytes (CONVEYOR_MAX_TASK_BYTES), but a result read holds {READ_COST} times its size of its caller's in-flight budget ({} bytes, CONVEYOR_MAX_INFLIGHT_BYTES_PER_PRINCIPAL), so results over {readable} bytes could never be read: lower the one or raise the other",
                self.max_task_bytes,
                self.inflight_bytes_per_principal()
            ));
        }
        if self.max_dag_nodes == 0 {
            return Err("the DAG node limit (CONVEYOR_MAX_DAG_NODES) must be at least 1".to_owned());
        }
        Ok(())
    }

    /// The in-flight memory one principal's requests may hold: as configured, or a quarter of all
    /// of it but at least one largest request (a body and its parse).
    pub fn inflight_bytes_per_principal(&self) -> usize {
        match self.max_inflight_bytes_per_principal {
            0 => (self.max_inflight_bytes / 4)
                .max(self.max_body_bytes + self.json_limits.max_parsed_bytes)
                .min(self.max_inflight_bytes),
            configured => configured,
        }
    }

    /// How a store of this deployment reaches Redis.
    pub fn store_options(&self) -> crate::store::StoreOptions {
        crate::store::StoreOptions {
            timeout: self.redis_timeout,
            outage_wait: self.redis_outage_wait,
            shards: self.shards,
            process: None,
            wait_replicas: self.redis_wait_replicas,
            wait_timeout: self.redis_wait_timeout,
            lean_calls: self.lean_calls,
        }
    }

    /// The limits every submitted graph is checked against.
    pub fn dag_limits(&self) -> crate::dag::DagLimits {
        crate::dag::DagLimits {
            max_nodes: self.max_dag_nodes,
            max_node_bytes: self.max_dag_node_bytes,
            ..Default::default()
        }
    }

    /// The TTL to apply for a requested one: the default when none, capped at the maximum.
    pub fn applied_ttl_ms(&self, requested: Option<u64>) -> u64 {
        requested.unwrap_or(self.task_ttl_default_ms).clamp(1, self.task_ttl_max_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_the_bad_setting() {
        assert!(Config::default().validate().is_ok());
        let bad = Config { task_ttl_default_ms: 10, task_ttl_max_ms: 5, ..Config::default() };
        assert!(bad.validate().expect_err("default above max").contains("CONVEYOR_TASK_TTL_MS"));
        let bad = Config { task_ttl_max_ms: 0, ..Config::default() };
        assert!(bad.validate().expect_err("zero max").contains("CONVEYOR_TASK_TTL_MAX_MS"));
        let bad = Config { max_body_bytes: 10, ..Config::default() };
        assert!(bad.validate().expect_err("tiny body limit").contains("CONVEYOR_MAX_BODY_BYTES"));
        let mut bad = Config::default();
        bad.limits.max_stored_bytes_per_principal = 2 * 1024 * 1024;
        let refused = bad.validate().expect_err("a share below one call's arguments");
        assert!(
            refused.contains("CONVEYOR_MAX_STORED_BYTES_PER_PRINCIPAL") && refused.contains("4194304"),
            "{refused}"
        );
        bad.limits.max_stored_bytes_per_principal = 0;
        assert!(bad.validate().is_ok(), "0 is no limit");
        let bad = Config { max_task_bytes: 32 * 1024 * 1024, ..Config::default() };
        let refused = bad.validate().expect_err("results too large to read");
        assert!(
            refused.contains("CONVEYOR_MAX_TASK_BYTES")
                && refused.contains("CONVEYOR_MAX_INFLIGHT_BYTES_PER_PRINCIPAL"),
            "{refused}"
        );
        let raised = Config { max_inflight_bytes_per_principal: 96 * 1024 * 1024, ..bad };
        assert!(raised.validate().is_ok(), "{:?}", raised.validate());
    }

    #[test]
    fn ttl_defaults_and_caps() {
        let config = Config { task_ttl_default_ms: 100, task_ttl_max_ms: 1000, ..Config::default() };
        assert_eq!(config.applied_ttl_ms(None), 100);
        assert_eq!(config.applied_ttl_ms(Some(500)), 500);
        assert_eq!(config.applied_ttl_ms(Some(5000)), 1000);
        assert_eq!(config.applied_ttl_ms(Some(0)), 1);
    }
}
