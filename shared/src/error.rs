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

    /// Whether the same operation may succeed a moment later: Redis was out of reach, or it
    /// refused for now (out of memory, busy with a long script). A worker keeps trying such a
    /// transition of its own instead of leaving its entry for the maintenance.
    pub fn may_pass_later(&self) -> bool {
        match self {
            Self::Refused(message) => FOR_NOW
                .iter()
                .any(|code| message.strip_prefix(code).is_some_and(|rest| rest.starts_with(' '))),
            other => other.is_transient(),
        }
    }
}

/// Codes of the errors with which Redis refuses an operation for now, not for good: out of memory,
/// busy with a long script. A refusal with one of them starts with the code and a space.
const FOR_NOW: [&str; 2] = ["OOM", "BUSY"];

impl From<redis::RedisError> for StoreError {
    fn from(e: redis::RedisError) -> Self {
        if is_transient(&e) {
            return Self::Unavailable(e.to_string());
        }
        match e.code().filter(|code| FOR_NOW.contains(code)) {
            Some(code) => Self::Refused(format!("{code} {e}")),
            None => Self::Refused(e.to_string()),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_for_now_may_pass_and_a_refusal_for_good_does_not() {
        let server = |code: &str, detail: &str| {
            StoreError::from(redis::make_extension_error(code.to_owned(), Some(detail.to_owned())))
        };
        let refused = server("OOM", "command not allowed when used memory > 'maxmemory'.");
        assert!(refused.may_pass_later() && !refused.is_transient(), "{refused}");
        let busy = server("BUSY", "Redis is busy running a script.");
        assert!(busy.may_pass_later(), "{busy}");
        for for_good in ["BUSYGROUP Consumer Group name already exists", "ERR user_script:1: boom"] {
            assert!(!StoreError::Refused(for_good.to_owned()).may_pass_later(), "{for_good}");
        }
        assert!(StoreError::Timeout(std::time::Duration::from_secs(1)).may_pass_later());
        assert!(!StoreError::Corrupt("x".to_owned()).may_pass_later());
    }
}
