//! Queue policies: in which order waiters for a busy plain lock are
//! served (`--queue`), and what a new waiter does to the older ones.
//!
//! The order is kept in Redis (`P{K}:waiters`, see `lock/scripts/`) and
//! decided by the acquire script when a waiter first stands in line, so
//! every policy keeps the lock's one promise: `SET NX` hands it to one
//! holder at a time. Waiters only queue for a plain lock on one node
//! (`Quorum::queues_waiters`); elsewhere every release wakes every waiter.

use clap::ValueEnum;

use crate::exit::Exit;
use crate::log::{field, Ev, Log};
use crate::secrets::untrusted;

/// `--queue`: how a new waiter joins the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum Queue {
    /// At the end: waiters are served in order of arrival.
    #[default]
    OldestFirst,
    /// At the front: the newest waiter is served first.
    NewestFirst,
    /// Alone: every older waiter leaves at once (exit 79), so only the
    /// newest is served (CI: deploy only the latest pipeline).
    NewestWins,
}

impl Queue {
    /// The acquire script's ARGV[8] for a waiter standing in line.
    pub fn argv(self) -> &'static str {
        match self {
            Queue::OldestFirst => "1",
            Queue::NewestFirst => "2",
            Queue::NewestWins => "3",
        }
    }

    /// As the user writes it.
    pub fn name(self) -> &'static str {
        match self {
            Queue::OldestFirst => "oldest-first",
            Queue::NewestFirst => "newest-first",
            Queue::NewestWins => "newest-wins",
        }
    }
}

/// A waiter replaced in line (`newest-wins`): say by whom, in one line,
/// and exit 79; COMMAND never ran, and nothing of ours is left in Redis.
pub fn replaced(key: &str, host: &str, pid: &str, log: &Log) -> Exit {
    let by = match host.is_empty() {
        true => "a newer waiter".to_string(),
        false => format!(
            "a newer waiter (host {} pid {})",
            untrusted(host),
            untrusted(pid)
        ),
    };
    log.emit(
        Ev::Warning,
        format!("lock '{key}': replaced in line by {by} (--queue newest-wins); giving up"),
        &[field("replaced_by", by.clone())],
    );
    Exit::Replaced
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_clap() {
        for q in Queue::value_variants() {
            let shown = q.to_possible_value().map(|v| v.get_name().to_string());
            assert_eq!(shown.as_deref(), Some(q.name()));
        }
    }
}
