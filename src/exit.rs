//! Exit codes: the one place that says which number means what.
//!
//! [`Exit::ROWS`] is the contract's table. The man page's EXIT STATUS
//! section and the long `--help` are written from it, and a test checks
//! the README's table against it, so none of them can drift from the code.

use std::fmt;
use std::process::ExitCode;

/// How redlock-run ends. Every path out of `main` maps to one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Done, and nothing to report: an admin command's "yes", `generate`.
    Success,
    /// COMMAND ran and exited with this code.
    Child(u8),
    /// COMMAND (or, while waiting, redlock-run itself) was killed by signal N: 128 + N.
    Signaled(i32),
    /// Bad arguments or configuration.
    Usage,
    /// The lock was busy for longer than `--wait`; carries `-E`'s value.
    Busy(u8),
    /// No connection to Redis could be made (or no quorum reachable)
    /// before COMMAND started.
    Unavailable,
    /// Redis answered but refused us: authentication, permissions
    /// (NOPERM), a read-only replica, out of memory, a script error.
    Refused,
    /// The lock was lost while COMMAND ran; COMMAND was stopped.
    LockLost,
    /// `--max-hold` ran out; COMMAND was stopped.
    MaxHold,
    /// `--queue newest-wins`: a newer waiter took our place in line;
    /// COMMAND did not run.
    Replaced,
    /// COMMAND exists but could not be executed.
    CannotInvoke,
    /// COMMAND was not found.
    NotFound,
    /// A resource of this host ran out (file descriptors, memory,
    /// threads): neither Redis unavailable nor refused, and never a reason
    /// to run COMMAND without the lock.
    LocalFailure,
    /// An admin subcommand's "no" (a free key, nothing deleted).
    No,
    /// `doctor` found a setting that breaks locks (a FAIL line).
    DoctorFail,
    /// A bug in redlock-run.
    Internal,
}

/// One row of the exit-code table: the code as the docs write it, and when.
pub struct Row {
    pub code: &'static str,
    pub when: &'static str,
}

impl Exit {
    /// The process exit status.
    pub fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::Child(code) | Exit::Busy(code) => code,
            Exit::Signaled(sig) => u8::try_from(128 + sig.clamp(0, 127)).unwrap_or(255),
            Exit::Usage => 2,
            Exit::Unavailable => 69,
            Exit::LockLost => 70,
            Exit::LocalFailure => 71,
            Exit::Refused => 77,
            Exit::DoctorFail => 78,
            Exit::MaxHold => 124,
            // Past sysexits' 64-78, so no tool reads it as one of theirs.
            Exit::Replaced => 79,
            Exit::CannotInvoke => 126,
            Exit::NotFound => 127,
            Exit::No | Exit::Internal => 1,
        }
    }

    /// The run mode's exit codes, in the contract's order.
    pub const ROWS: &'static [Row] = &[
        Row {
            code: "COMMAND's own",
            when: "COMMAND ran and exited",
        },
        Row {
            code: "128 + N",
            when: "COMMAND was killed by signal N (also: redlock-run got signal N before COMMAND started)",
        },
        Row {
            code: "2",
            when: "bad arguments or configuration; nothing was sent to Redis",
        },
        Row {
            code: "75 (or -E N)",
            when: "lock busy: not acquired within --wait",
        },
        Row {
            code: "69",
            when: "Redis unavailable: no connection could be made (or no quorum reachable) before COMMAND started",
        },
        Row {
            code: "77",
            when: "Redis refused us: authentication, permission (NOPERM), read-only replica, out of memory, script error; or the server may evict the lock (maxmemory with an evicting maxmemory-policy; see --allow-eviction)",
        },
        Row {
            code: "70",
            when: "lock lost while COMMAND ran; COMMAND was stopped",
        },
        Row {
            code: "71",
            when: "a local failure (out of processes, threads, file descriptors or memory; never counted as Redis unavailable): COMMAND did not start, or was stopped; the lock was released",
        },
        Row {
            code: "124",
            when: "--max-hold reached; COMMAND was stopped",
        },
        Row {
            code: "79",
            when: "--queue newest-wins: a newer waiter replaced this one in line; COMMAND did not run",
        },
        Row {
            code: "126 / 127",
            when: "COMMAND not executable / not found",
        },
        Row {
            code: "78",
            when: "doctor found a FAIL: a server setting that breaks locks (EX_CONFIG); a server it cannot reach is 69, one that refuses us 77, as elsewhere",
        },
        Row {
            code: "1",
            when: "an unexpected internal error (a bug: the message says so)",
        },
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

impl Failure {
    /// `e` while doing `what`: [`Exit::LocalFailure`] if a resource of
    /// this host ran out (see [`local_resource`]), else a bug.
    pub fn local(e: std::io::Error, what: &str) -> Failure {
        match local_resource(&e) {
            Some(why) => Failure {
                exit: Exit::LocalFailure,
                error: anyhow::anyhow!("{what}: local failure: {why}: {e}"),
            },
            None => anyhow::Error::new(e).context(what.to_string()).into(),
        }
    }
}

/// What ran out, if `e` says a resource of this host did.
pub fn local_resource(e: &std::io::Error) -> Option<&'static str> {
    local_errno(e.raw_os_error()?)
}

/// [`local_resource`] by errno.
pub fn local_errno(errno: i32) -> Option<&'static str> {
    match errno {
        nix::libc::EMFILE => Some("out of file descriptors (the process's limit: ulimit -n)"),
        nix::libc::ENFILE => Some("the system is out of file descriptors (fs.file-max)"),
        nix::libc::ENOMEM | nix::libc::ENOBUFS => Some("out of memory"),
        _ => None,
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
        assert_eq!(Exit::LocalFailure.code(), 71);
        assert_eq!(Exit::NotFound.code(), 127);
        assert_eq!(Exit::CannotInvoke.code(), 126);
        assert_eq!(Exit::Usage.code(), 2);
        assert_eq!(Exit::Refused.code(), 77);
        assert_eq!(Exit::Replaced.code(), 79);
        assert_eq!(Exit::DoctorFail.code(), 78);
        assert_eq!(Exit::Success.code(), 0);
        assert_eq!(Exit::Signaled(200).code(), 255);
    }

    #[test]
    fn every_fixed_code_has_a_row() {
        let exits = [
            Exit::Usage,
            Exit::Unavailable,
            Exit::Refused,
            Exit::LockLost,
            Exit::LocalFailure,
            Exit::MaxHold,
            Exit::Replaced,
            Exit::DoctorFail,
            Exit::Internal,
        ];
        for exit in exits {
            let code = exit.code().to_string();
            assert!(
                Exit::ROWS.iter().any(|row| row.code == code),
                "no row for {exit:?}"
            );
        }
    }
}
