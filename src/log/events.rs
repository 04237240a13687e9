//! Every event redlock-run writes on stderr, with its stable name, its
//! level and what it means. The README and the man page list them from
//! [`Ev::ALL`]; a test fails when one is missing there.

use super::Level;

/// The events of a run's life (and of the admin commands).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ev {
    RandomDelay,
    Waiting,
    StillWaiting,
    Replacing,
    Acquired,
    Contained,
    FenceReset,
    Protocol,
    Nested,
    Busy,
    Skipped,
    Unavailable,
    Refused,
    RunningUnlocked,
    Refreshed,
    RefreshFailed,
    Lost,
    Stopping,
    SignalForwarded,
    Suspended,
    CommandExited,
    LeftoversStopped,
    MinHold,
    MaxHold,
    Released,
    ReleaseFailed,
    NoneHeld,
    Warning,
    Note,
    Error,
}

impl Ev {
    /// Every event, in the order of a run's life.
    pub const ALL: [Ev; 30] = [
        Ev::RandomDelay,
        Ev::Waiting,
        Ev::StillWaiting,
        Ev::Replacing,
        Ev::Acquired,
        Ev::Contained,
        Ev::FenceReset,
        Ev::Protocol,
        Ev::Nested,
        Ev::Busy,
        Ev::Skipped,
        Ev::Unavailable,
        Ev::Refused,
        Ev::RunningUnlocked,
        Ev::Refreshed,
        Ev::RefreshFailed,
        Ev::Lost,
        Ev::Stopping,
        Ev::SignalForwarded,
        Ev::Suspended,
        Ev::CommandExited,
        Ev::LeftoversStopped,
        Ev::MinHold,
        Ev::MaxHold,
        Ev::Released,
        Ev::ReleaseFailed,
        Ev::NoneHeld,
        Ev::Warning,
        Ev::Note,
        Ev::Error,
    ];

    /// Name, level, typed fields, and what it means.
    fn row(self) -> (&'static str, Level, &'static str, &'static str) {
        use Level::*;
        match self {
            Ev::RandomDelay => (
                "random_delay",
                Info,
                "delay_ms",
                "sleeping before the first attempt (--random-delay)",
            ),
            Ev::Waiting => (
                "waiting",
                Info,
                "holder, label, hold_reason, in_line",
                "the lock is busy; waiting for it (shown without -v)",
            ),
            Ev::StillWaiting => (
                "still_waiting",
                Info,
                "wait_ms, holder, label, hold_reason, in_line",
                "still waiting, said every --progress (1m; shown without -v)",
            ),
            Ev::Replacing => (
                "replacing",
                Info,
                "holder, label",
                "--replace-running revoked the running holder; waiting for its job to end",
            ),
            Ev::Acquired => (
                "acquired",
                Info,
                "fence, wait_ms, ttl_ms, label, mode",
                "the lock is ours (mode: shared or exclusive)",
            ),
            Ev::Contained => (
                "contained",
                Info,
                "contain",
                "how COMMAND's whole tree is held: a cgroup of its own, or the keeper process alone",
            ),
            Ev::Protocol => (
                "protocol",
                Info,
                "server, protocol",
                "which protocol a server's connection got (scripts, native compare-and-set, \
                 transactions) and why",
            ),
            Ev::FenceReset => (
                "fence_reset",
                Info,
                "",
                "a key new on this server: its fence counter starts from the server's clock (in microseconds)",
            ),
            Ev::Nested => (
                "nested",
                Info,
                "fence",
                "a run inside COMMAND under the same lock: runs at once",
            ),
            Ev::Busy => (
                "busy",
                Warn,
                "holder, label, hold_reason",
                "still busy when --wait ran out: exit 75 (or -E)",
            ),
            Ev::Skipped => (
                "skipped",
                Info,
                "holder, label, hold_reason",
                "busy, and -E 0 makes that the intended outcome: this run did nothing, exit 0",
            ),
            Ev::Unavailable => (
                "unavailable",
                Error,
                "",
                "Redis could not be reached: exit 69",
            ),
            Ev::Refused => (
                "refused",
                Error,
                "",
                "Redis refused us (authentication, permission, read-only, script): exit 77",
            ),
            Ev::RunningUnlocked => (
                "running_unlocked",
                Error,
                "",
                "--on-unavailable run: COMMAND runs WITHOUT the lock",
            ),
            Ev::Refreshed => ("refreshed", Info, "ttl_ms", "the lock was refreshed"),
            Ev::RefreshFailed => (
                "refresh_failed",
                Info,
                "error",
                "a refresh failed and will be retried",
            ),
            Ev::Lost => (
                "lost",
                Error,
                "reason",
                "the lock was lost; COMMAND is being stopped: exit 70",
            ),
            Ev::Stopping => (
                "stopping",
                Info,
                "reason, grace_ms",
                "COMMAND gets SIGTERM, then SIGKILL after the grace",
            ),
            Ev::SignalForwarded => (
                "signal_forwarded",
                Info,
                "signal",
                "a signal was passed on to COMMAND's process group",
            ),
            Ev::Suspended => (
                "suspended",
                Info,
                "signal",
                "stopped (job control) together with COMMAND",
            ),
            Ev::CommandExited => ("command_exited", Info, "exit, signal", "COMMAND ended"),
            Ev::LeftoversStopped => (
                "leftovers_stopped",
                Warn,
                "count",
                "processes COMMAND left behind were stopped before the release",
            ),
            Ev::MinHold => (
                "min_hold",
                Info,
                "hold_ms",
                "the lock is kept a while after COMMAND ended (--min-hold)",
            ),
            Ev::MaxHold => (
                "max_hold",
                Error,
                "max_hold_ms, grace_ms",
                "COMMAND ran past --max-hold and is being stopped: exit 124",
            ),
            Ev::Released => ("released", Info, "", "the lock was given back"),
            Ev::ReleaseFailed => (
                "release_failed",
                Warn,
                "error",
                "the lock could not be given back (its TTL cleans up), or was not ours any more",
            ),
            Ev::NoneHeld => (
                "none_held",
                Info,
                "prefix",
                "list found no lock held under the prefix (shown without -v)",
            ),
            Ev::Warning => ("warning", Warn, "", "anything else a user should know"),
            Ev::Note => ("note", Info, "", "anything else, shown with -v"),
            Ev::Error => (
                "error",
                Error,
                "",
                "any other error: usage, a bug, COMMAND not runnable",
            ),
        }
    }

    /// The stable snake_case name.
    pub fn name(self) -> &'static str {
        self.row().0
    }

    pub fn level(self) -> Level {
        self.row().1
    }

    /// Whether this info event is shown without `-v` (still hidden by
    /// `-q`): a run that waits says so, or a long wait looks hung; an
    /// empty `list` says why it printed nothing.
    pub fn said_by_default(self) -> bool {
        matches!(
            self,
            Ev::Waiting | Ev::StillWaiting | Ev::Replacing | Ev::NoneHeld
        )
    }

    /// The names of its typed fields, comma-separated.
    pub fn fields(self) -> &'static str {
        self.row().2
    }

    /// What it means, for the docs.
    pub fn meaning(self) -> &'static str {
        self.row().3
    }

    /// The rows of docs/monitoring.md's table: `| name | level | fields |
    /// meaning |` (a test holds the page to it).
    #[cfg(test)]
    pub fn markdown() -> String {
        let mut out = String::new();
        for ev in Ev::ALL {
            let fields: Vec<String> = ev
                .fields()
                .split(", ")
                .filter(|f| !f.is_empty())
                .map(|f| format!("`{f}`"))
                .collect();
            out += &format!(
                "| `{}` | {} | {} | {} |\n",
                ev.name(),
                ev.level().name(),
                fields.join(", "),
                ev.meaning()
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_monitoring_page_lists_every_event() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/monitoring.md");
        let page = std::fs::read_to_string(path).expect("docs/monitoring.md");
        let table = Ev::markdown();
        assert!(
            page.contains(&table),
            "the events table of docs/monitoring.md differs from the binary's; it should \
             read:\n{table}"
        );
    }

    #[test]
    fn names_are_unique_snake_case() {
        let mut names: Vec<&str> = Ev::ALL.iter().map(|e| e.name()).collect();
        assert!(names
            .iter()
            .all(|n| n.chars().all(|c| c.is_ascii_lowercase() || c == '_')));
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Ev::ALL.len());
    }
}
