//! Exit codes. A script tells from the code alone how a command ended; the message on stderr
//! says why.

use std::fmt;

/// How a client command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// The tool completed (or the command did what it was asked).
    Completed,
    /// The tool ran and reported an error (`isError: true` in its result).
    ToolError,
    /// The command line was wrong: an unknown tool or argument, a value of the wrong type.
    Usage,
    /// The task failed (a protocol error), or the server refused the request.
    Failed,
    /// The endpoint could not be reached, or refused the token.
    Unreachable,
    /// The task was cancelled by someone else (another client, an operator), or expired.
    Cancelled,
    /// The person pressed Ctrl-C; the task was cancelled.
    Interrupted,
}

impl Exit {
    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            Exit::Completed => 0,
            Exit::ToolError => 1,
            Exit::Usage => 2,
            Exit::Failed => 3,
            Exit::Unreachable => 4,
            Exit::Cancelled => 5,
            Exit::Interrupted => 130,
        }
    }
}

/// A command that could not do what it was asked, with the exit code that says so.
#[derive(Debug)]
pub struct ClientError {
    pub exit: Exit,
    pub message: String,
}

impl ClientError {
    pub fn new(exit: Exit, message: impl Into<String>) -> Self {
        Self { exit, message: message.into() }
    }

    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(Exit::Usage, message)
    }

    pub fn failed(message: impl Into<String>) -> Self {
        Self::new(Exit::Failed, message)
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ClientError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct() {
        let all = [
            Exit::Completed,
            Exit::ToolError,
            Exit::Usage,
            Exit::Failed,
            Exit::Unreachable,
            Exit::Cancelled,
            Exit::Interrupted,
        ];
        let codes: std::collections::BTreeSet<u8> = all.iter().map(|e| e.code()).collect();
        assert_eq!(codes.len(), all.len());
        assert_eq!(Exit::Completed.code(), 0);
        assert_eq!(Exit::Interrupted.code(), 130, "the shell's code for SIGINT");
    }
}
