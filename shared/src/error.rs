use thiserror::Error;

/// Failures of the Redis-backed store.
#[derive(Debug, Clone, Error)]
pub enum StoreError {
    /// Redis is out of reach (down, restarting, failing over); the operation may be retried.
    #[error(
        "Redis is unavailable: {0}. Check that Redis runs and REDIS_URL points at it; the request may be retried."
    )]
    Unavailable(String),
    #[error("Redis did not answer within {0:?}; the request may be retried")]
    Timeout(std::time::Duration),
    #[error(
        "invalid REDIS_URL {0}; expected redis://[user:password@]host[:port][/db], rediss://..., or a comma-separated list of cluster nodes"
    )]
    InvalidUrl(String),
    /// Redis answered with an error that retrying will not cure (a script error, a wrong type).
    #[error("Redis refused an operation: {0}")]
    Refused(String),
    #[error("stored data is not in the expected shape: {0}")]
    Corrupt(String),
    /// The deployment was set up with another layout than this process was started with.
    #[error("{0}")]
    Layout(String),
}

impl StoreError {
    /// Whether Redis was out of reach, so that the same operation may succeed a moment later.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unavailable(_) | Self::Timeout(_))
    }
}

impl From<redis::RedisError> for StoreError {
    fn from(e: redis::RedisError) -> Self {
        if is_transient(&e) { Self::Unavailable(e.to_string()) } else { Self::Refused(e.to_string()) }
    }
}

/// Whether an error means Redis is (briefly) out of reach, so that the operation may be retried:
/// a dropped or refused connection, a timeout, a cluster that is failing over.
pub fn is_transient(error: &redis::RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    if error.is_io_error()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_timeout()
        || error.is_cluster_error()
    {
        return true;
    }
    matches!(
        error.kind(),
        ErrorKind::Server(
            ServerErrorKind::BusyLoading
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
                | ServerErrorKind::ReadOnly
                | ServerErrorKind::Moved
                | ServerErrorKind::Ask
        )
    )
}
