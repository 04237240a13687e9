//! Exit codes: the one place that says which number means what.
//!
//! The README's table and the man page's EXIT STATUS section are written
//! from [`Exit::TABLE`], so they cannot drift from the code.

use std::fmt;
use std::process::ExitCode;

/// How redlock-run ends. Every path out of `main` maps to one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// COMMAND ran and exited with this code.
    Child(u8),
    /// COMMAND (or, while waiting, redlock-run itself) was killed by signal N: 128 + N.
    Signaled(i32),
    /// Bad arguments or configuration.
    Usage,
    /// The lock was busy for longer than `--wait`; carries `-E`'s value.
    Busy(u8),
    /// Redis unavailable (or no quorum reachable) before COMMAND started.
    Unavailable,
    /// The lock was lost while COMMAND ran; COMMAND was stopped.
    LockLost,
    /// `--max-hold` ran out; COMMAND was stopped.
    MaxHold,
    /// COMMAND exists but could not be executed.
    CannotInvoke,
    /// COMMAND was not found.
    NotFound,
    /// An admin subcommand's "no" (a free key, nothing deleted).
    No,
    /// A bug in redlock-run.
    Internal,
}

impl Exit {
    /// The process exit status.
    pub fn code(self) -> u8 {
        match self {
            Exit::Child(code) | Exit::Busy(code) => code,
            Exit::Signaled(sig) => (128 + sig).clamp(0, 255) as u8,
            Exit::Usage => 2,
            Exit::Unavailable => 69,
            Exit::LockLost => 70,
            Exit::MaxHold => 124,
            Exit::CannotInvoke => 126,
            Exit::NotFound => 127,
            Exit::No | Exit::Internal => 1,
        }
    }

    /// The exit-code table of the contract, as (code, meaning) rows.
    pub const TABLE: &'static [(&'static str, &'static str)] = &[
        ("COMMAND's own", "COMMAND ran and exited"),
        ("128 + N", "COMMAND was killed by signal N"),
        ("2", "bad arguments or configuration"),
        ("75 (or -E N)", "lock busy: not acquired within --wait"),
        (
            "69",
            "Redis unavailable (or no quorum reachable) before COMMAND started",
        ),
        ("70", "lock lost while COMMAND ran; COMMAND was stopped"),
        ("124", "--max-hold reached; COMMAND was stopped"),
        ("126 / 127", "COMMAND not executable / not found"),
        (
            "1",
            "an unexpected internal error (a bug: the message says so)",
        ),
    ];
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        ExitCode::from(exit.code())
    }
}

/// An error that knows how redlock-run must exit because of it.
///
/// Built where the cause is known (connect failed: [`Exit::Unavailable`]);
/// anything else that bubbles up as a plain `anyhow::Error` is a bug.
#[derive(Debug)]
pub struct Failure {
    pub exit: Exit,
    pub error: anyhow::Error,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#}", self.error)
    }
}

impl From<anyhow::Error> for Failure {
    fn from(error: anyhow::Error) -> Failure {
        Failure {
            exit: Exit::Internal,
            error: error.context("internal error (a bug in redlock-run, please report it)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_the_contract() {
        assert_eq!(Exit::Signaled(15).code(), 143);
        assert_eq!(Exit::Busy(75).code(), 75);
        assert_eq!(Exit::Unavailable.code(), 69);
        assert_eq!(Exit::LockLost.code(), 70);
        assert_eq!(Exit::NotFound.code(), 127);
        assert_eq!(Exit::CannotInvoke.code(), 126);
        assert_eq!(Exit::Usage.code(), 2);
    }
}
