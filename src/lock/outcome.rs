//! What the lock's calls come to, as its callers see it: a lease, an
//! attempt's outcome, a refresh's, what a release found.

use std::time::Instant;

use super::reply::{BusyInfo, Ownership};

/// A lock we hold, valid (by our own monotonic clock) until `valid_until`.
#[derive(Debug, Clone, Copy)]
pub struct Lease {
    pub fence: i64,
    /// When the winning attempt was sent: the lock is ours from then on.
    pub acquired_at: Instant,
    pub valid_until: Instant,
    /// The fence counter was missing on a node of the majority and was
    /// seeded from its clock: the data in Redis was lost (a restart
    /// without persistence, FLUSHALL).
    pub reset: bool,
    /// The longest lease left of another holder that a node of the same
    /// round still named (Redlock): with `reset`, that holder's majority
    /// was lost to the data loss, and it may run on until it finds out.
    pub beside: Option<std::time::Duration>,
    /// Which holder that is (see `BusyInfo::holder_id`).
    pub beside_holder: Option<std::num::NonZeroU64>,
}

/// The result of one acquisition attempt.
pub enum Attempt {
    Acquired(Lease),
    /// Boxed: a busy answer is large, and rarer than the others.
    Busy(Box<BusyInfo>),
    /// Fewer than a quorum of nodes answered; none refused.
    Unavailable(anyhow::Error),
    /// Fewer than a quorum answered, and a node's call failed for want of
    /// a resource of this host (file descriptors, memory, threads).
    Local(anyhow::Error),
    /// A node answered with an error (authentication, NOPERM, READONLY,
    /// OOM, a script error...): waiting will not help.
    Refused(anyhow::Error),
    /// A Redis Cluster is moving the lock's slot: nothing was done; try
    /// again (within `--wait`).
    Moving(anyhow::Error),
    /// Held, but not confirmed by `--replicas`; given back already.
    Unconfirmed(anyhow::Error),
    /// `--replicas N` can never be met: the node has fewer replicas
    /// connected than N. Given back already.
    TooFewReplicas(anyhow::Error),
    /// KEY is held with another `--limit` (1: a plain lock); nothing taken.
    Mismatch {
        limit: u32,
    },
    /// Two of the nodes are one server (the same `run_id`), reached under
    /// two addresses: not a quorum. Nothing taken.
    SameServer(anyhow::Error),
}

/// One attempt and what it leaves its caller to do.
pub struct Tried {
    pub attempt: Attempt,
    /// What the attempt may still hold with its token was not given back:
    /// a waiter in line keeps its token (its place) for the next attempt,
    /// and a give-back whose fate is unknown could delete the lock that
    /// attempt takes. The waiter gives it back (`Quorum::give_back`) once
    /// its wait ends without the lock.
    pub owes: bool,
}

impl Tried {
    pub fn new(attempt: Attempt, owes: bool) -> Tried {
        Tried { attempt, owes }
    }
}

/// The result of one refresh.
pub enum Extend {
    Extended(Instant),
    /// The token is gone, replaced or revoked on so many nodes that no
    /// quorum is left.
    Lost(Ownership),
    /// Not confirmed this time (nodes down, slow, or validity used up).
    Failed(anyhow::Error),
}

/// What a release found on each node.
#[derive(Debug, Default)]
pub struct Released {
    pub ours: usize,
    pub replaced: usize,
    pub gone: usize,
    /// Gone (or taken by the next holder) on a retry after a try whose
    /// reply never came (it timed out or the connection broke after the
    /// request went out): most likely that try released it.
    pub unanswered: usize,
    pub errors: Vec<anyhow::Error>,
}

impl Released {
    /// Whether the lock was really lost while held: so many of the `nodes`
    /// were found holding another token or none (`replaced`, `gone`) that
    /// fewer than `needed` can have been ours. Another token on a node of
    /// a majority that held (a rival's minority, left by a rival that
    /// died, on a node that lost our key) lost nothing. Nodes that did not
    /// answer may still have been ours.
    pub fn majority_lost(&self, nodes: usize, needed: usize) -> bool {
        nodes.saturating_sub(self.replaced + self.gone) < needed
    }
}

/// Where an attempt stands with the line of waiters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineTry {
    /// The run's first try: not in line (the uncontended path).
    First,
    /// The first try in line: it joins it.
    Joining,
    /// A later try in line.
    InLine,
}

#[cfg(test)]
mod tests {
    use super::Released;

    #[test]
    fn a_rivals_minority_on_a_node_of_ours_is_no_lost_majority() {
        let found = |ours, replaced, gone| Released {
            ours,
            replaced,
            gone,
            ..Released::default()
        };
        // 3 nodes: one taken by a rival, two ours: held throughout.
        assert!(!found(2, 1, 0).majority_lost(3, 2));
        // Two of three taken or gone: lost.
        assert!(found(1, 1, 1).majority_lost(3, 2));
        assert!(found(1, 2, 0).majority_lost(3, 2));
        // One node: another token there is the lock lost.
        assert!(found(0, 1, 0).majority_lost(1, 1));
        // Nodes that did not answer may have been ours.
        assert!(!found(0, 1, 0).majority_lost(3, 2));
        // 5 nodes: two taken, three ours.
        assert!(!found(3, 2, 0).majority_lost(5, 3));
    }
}
