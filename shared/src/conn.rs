//! Connections to Redis: one server or a Redis Cluster, told apart once, then used the same way.
//!
//! A process holds one shared connection for commands ([`Conn`]: a reconnecting multiplexed
//! connection, or the `redis` crate's cluster connection) and opens dedicated ones only for what
//! would stall the shared one: blocking stream reads ([`Backend::blocking`]) and subscriptions
//! (`events.rs`). No connection is checked out or health-checked per command.

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, IntoConnectionInfo, Pipeline, ProtocolVersion, RedisFuture, Value};

use crate::error::StoreError;

/// A command connection: cheap to clone, safe to use from many tasks at once.
#[derive(Clone)]
pub enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Self::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Cluster(_) => 0,
        }
    }
}

/// Where Redis is and how to reach it: one server, or the seed nodes of a cluster.
#[derive(Clone, Debug)]
pub struct Backend {
    /// The addresses as given (`REDIS_URL`: one URL, or a comma-separated list of cluster seeds).
    urls: Vec<String>,
    /// Whether the deployment is a Redis Cluster (learned from the server, or from several seeds).
    pub cluster: bool,
    timeout: Duration,
}

impl Backend {
    /// Checks `REDIS_URL` without connecting: one URL, or several comma-separated cluster seeds.
    pub fn parse(spec: &str, timeout: Duration) -> Result<Self, StoreError> {
        let urls: Vec<String> =
            spec.split(',').map(str::trim).filter(|u| !u.is_empty()).map(str::to_owned).collect();
        if urls.is_empty() {
            return Err(StoreError::InvalidUrl(format!("{spec:?} (empty)")));
        }
        for url in &urls {
            url.as_str()
                .into_connection_info()
                .map_err(|e| StoreError::InvalidUrl(format!("{url:?} ({e})")))?;
        }
        Ok(Self { cluster: urls.len() > 1, urls, timeout })
    }

    /// Connects the shared command connection. A single URL naming a node of a cluster
    /// (`cluster_enabled:1`) switches to the cluster client.
    pub async fn connect(&mut self) -> Result<Conn, StoreError> {
        if !self.cluster {
            let client = redis::Client::open(self.urls[0].as_str())?;
            let mut probe = tokio::time::timeout(self.timeout, client.get_multiplexed_async_connection())
                .await
                .map_err(|_| StoreError::Timeout(self.timeout))??;
            let info: String = redis::cmd("INFO").arg("cluster").query_async(&mut probe).await?;
            self.cluster = info.lines().any(|l| l.trim() == "cluster_enabled:1");
        }
        if self.cluster {
            return Ok(Conn::Cluster(self.cluster_connection(Some(self.timeout), None).await?));
        }
        let client = redis::Client::open(self.urls[0].as_str())?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout))
            // Reconnection is retried by the store within its outage budget; the manager tries
            // once per request so that a dead Redis fails fast instead of stacking retries.
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let manager = tokio::time::timeout(self.timeout, ConnectionManager::new_with_config(client, config))
            .await
            .map_err(|_| StoreError::Timeout(self.timeout))??;
        Ok(Conn::Single(manager))
    }

    /// A cluster connection of its own. `response_timeout` `None` suits blocking reads.
    pub(crate) async fn cluster_connection(
        &self,
        response_timeout: Option<Duration>,
        push: Option<tokio::sync::mpsc::UnboundedSender<redis::PushInfo>>,
    ) -> Result<ClusterConnection, StoreError> {
        let mut builder = ClusterClientBuilder::new(self.urls.clone())
            .connection_timeout(self.timeout)
            .retries(3)
            .min_retry_wait(50)
            .max_retry_wait(500);
        // A blocking read must not be cut off by the response timeout meant for commands.
        builder = builder.response_timeout(response_timeout.unwrap_or(Duration::from_secs(24 * 60 * 60)));
        if let Some(sender) = push {
            builder = builder.use_protocol(ProtocolVersion::RESP3).push_sender(sender);
        }
        let client = builder.build()?;
        tokio::time::timeout(self.timeout, client.get_async_connection())
            .await
            .map_err(|_| StoreError::Timeout(self.timeout))?
            .map_err(Into::into)
    }

    /// A dedicated connection for blocking stream reads (`XREADGROUP ... BLOCK`): it holds no one
    /// else's commands, and has no response timeout of its own (the caller bounds each read).
    pub async fn blocking(&self) -> Result<Conn, StoreError> {
        if self.cluster {
            return Ok(Conn::Cluster(self.cluster_connection(None, None).await?));
        }
        let client = redis::Client::open(self.urls[0].as_str())?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(None)
            .set_number_of_retries(1);
        let manager = tokio::time::timeout(self.timeout, ConnectionManager::new_with_config(client, config))
            .await
            .map_err(|_| StoreError::Timeout(self.timeout))??;
        Ok(Conn::Single(manager))
    }

    /// A RESP3 connection to the single server that delivers push messages to `push`.
    pub(crate) async fn single_push_connection(
        &self,
        push: tokio::sync::mpsc::UnboundedSender<redis::PushInfo>,
    ) -> Result<redis::aio::MultiplexedConnection, StoreError> {
        let info = self.urls[0].as_str().into_connection_info()?;
        let settings = info.redis_settings().clone().set_protocol(ProtocolVersion::RESP3);
        let client = redis::Client::open(info.set_redis_settings(settings))?;
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout))
            .set_push_sender(push);
        tokio::time::timeout(self.timeout, client.get_multiplexed_async_connection_with_config(&config))
            .await
            .map_err(|_| StoreError::Timeout(self.timeout))?
            .map_err(Into::into)
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}
