use thiserror::Error;

/// Failures of the Redis-backed store.
#[derive(Debug, Error)]
pub enum StoreError {
    #[error(
        "Redis is unavailable: {0}. Check that Redis runs and REDIS_URL points at it; the request may be retried."
    )]
    Unavailable(String),
    #[error("Redis did not answer within {0:?}; the request may be retried")]
    Timeout(std::time::Duration),
    #[error("invalid REDIS_URL {0}; expected redis://[user:password@]host[:port][/db] or rediss://...")]
    InvalidUrl(String),
    #[error("stored data is not in the expected shape: {0}")]
    Corrupt(String),
}

impl From<redis::RedisError> for StoreError {
    fn from(e: redis::RedisError) -> Self {
        Self::Unavailable(e.to_string())
    }
}

impl From<deadpool_redis::PoolError> for StoreError {
    fn from(e: deadpool_redis::PoolError) -> Self {
        Self::Unavailable(e.to_string())
    }
}
