//! The lock's decisions as pure functions: the nodes' answers in, the
//! outcome out (acquired, busy, split, lost, released), and which error
//! decides when too few nodes answered. No I/O and no clock: the caller
//! says whether the round ended in time, and carries out what is decided
//! (a fence raise, a give-back). One node is a quorum of one: the same
//! functions, with `nodes == 1`.

use super::error::{Fault, NodeError, NodeResult};
use super::reply::{Acquire, BusyInfo, Ownership};
use crate::exit::Exit;

/// How many of `nodes` must agree: a majority.
pub fn majority(nodes: usize) -> usize {
    nodes / 2 + 1
}

/// Which failure speaks for a round that too few nodes answered, the
/// first found in this order: a local failure (says nothing about Redis,
/// never a reason to run unlocked), a refusal (waiting will not help), a
/// Cluster slot on the move (retry), else Redis is unavailable. Every
/// mode (the run, the admin commands) maps it to the same exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Local,
    Refused,
    Moving,
    Unavailable,
}

impl Verdict {
    /// The verdict of the failed nodes' faults.
    pub fn of(faults: impl IntoIterator<Item = Fault>) -> Verdict {
        let faults: Vec<Fault> = faults.into_iter().collect();
        let any = |f: Fault| faults.contains(&f);
        match () {
            () if any(Fault::Local) => Verdict::Local,
            () if any(Fault::Refused) => Verdict::Refused,
            () if any(Fault::Moving) => Verdict::Moving,
            () => Verdict::Unavailable,
        }
    }

    /// [`Verdict::of`] the nodes' errors.
    pub fn of_errors(errors: &[NodeError]) -> Verdict {
        Verdict::of(errors.iter().map(|e| e.fault))
    }

    /// The exit code of a command that ends on this verdict (a slot on
    /// the move that outlasts the command is unavailable).
    pub fn exit(self) -> Exit {
        match self {
            Verdict::Local => Exit::LocalFailure,
            Verdict::Refused => Exit::Refused,
            Verdict::Moving | Verdict::Unavailable => Exit::Unavailable,
        }
    }

    /// The reason, as error messages say it after what was being done.
    pub fn why(self) -> &'static str {
        match self {
            Verdict::Local => "local failure",
            Verdict::Refused => "Redis refused",
            Verdict::Moving => "a Redis Cluster is moving the lock's slot",
            Verdict::Unavailable => "Redis unavailable",
        }
    }
}

/// Who holds a busy node: host, pid, start. Equal on a majority: one
/// holder has the lock; else rivals split the nodes.
type Who = (String, String, String);

/// The answers of one acquire round, sorted.
#[derive(Debug, Default)]
pub struct Tally {
    /// The fence each node that granted the lock gave, by node.
    pub granted: Vec<Option<i64>>,
    /// The fence counter was reset on a node that granted it.
    pub reset: bool,
    /// The first busy answer: who holds the lock.
    pub busy: Option<BusyInfo>,
    /// The longest lease left among the busy answers that name a holder
    /// record (not a bare key set by someone else).
    pub busy_left: Option<std::time::Duration>,
    /// Which holder that longest lease is (see `BusyInfo::holder_id`).
    pub busy_left_holder: Option<std::num::NonZeroU64>,
    holders: Vec<Who>,
    pub mismatch: Option<u32>,
    pub errors: Vec<NodeError>,
}

impl Tally {
    /// The answers, node by node.
    pub fn of(answers: Vec<NodeResult<Acquire>>) -> Tally {
        let mut tally = Tally::default();
        for answer in answers {
            let fence = match &answer {
                Ok(Acquire::Held { fence, .. }) => Some(*fence),
                _ => None,
            };
            tally.granted.push(fence);
            match answer {
                Ok(Acquire::Held { reset, .. }) => tally.reset |= reset,
                Ok(Acquire::Busy(info)) => {
                    let who = (
                        info.host.clone(),
                        info.pid.clone(),
                        info.acquired_at.clone(),
                    );
                    tally.holders.push(who);
                    // A holder of ours (a record), not a bare key.
                    if !info.acquired_at.is_empty() && info.pttl > tally.busy_left {
                        tally.busy_left = info.pttl;
                        tally.busy_left_holder = info.holder_id();
                    }
                    tally.busy.get_or_insert(*info);
                }
                Ok(Acquire::Mismatch { limit }) => {
                    tally.mismatch.get_or_insert(limit);
                }
                Err(e) => tally.errors.push(e),
            }
        }
        tally
    }

    /// How many nodes granted the lock.
    pub fn grants(&self) -> usize {
        self.granted.iter().flatten().count()
    }

    /// The largest fence a node gave (0: none granted).
    pub fn fence(&self) -> i64 {
        self.granted
            .iter()
            .flatten()
            .copied()
            .max()
            .unwrap_or_default()
    }

    /// The holder that `needed` of the busy nodes name, if one does.
    fn named_by(&self, needed: usize) -> Option<&Who> {
        let holds = |h: &Who| self.holders.iter().filter(|o| *o == h).count();
        self.holders.iter().find(|h| holds(h) >= needed)
    }

    /// Which holder (see `reply::holder_id`) `needed` of the busy nodes
    /// name, if one with a record does.
    pub fn majority_holder(&self, needed: usize) -> Option<std::num::NonZeroU64> {
        let (host, pid, at) = self.named_by(needed)?;
        super::reply::holder_id(host, pid, at)
    }

    /// Whether one holder has `needed` of the busy nodes.
    fn majority_held(&self, needed: usize) -> bool {
        self.named_by(needed).is_some()
    }
}

/// Two nodes of a Redlock that are one server reached under two names:
/// the first node whose answer named (`servers`, by `run_id`) the same
/// server as an earlier one, and that earlier one. A node that did not
/// say is not compared.
pub fn same_server(servers: &[Option<String>]) -> Option<(usize, usize)> {
    servers.iter().enumerate().find_map(|(i, id)| {
        let id = id.as_ref()?;
        let first = servers[..i].iter().position(|o| o.as_ref() == Some(id))?;
        Some((i, first))
    })
}

/// Whether an acquire round holds the lock: a majority granted it, and
/// the round ended (`in_time`) within the lock's validity.
pub fn granted(tally: &Tally, nodes: usize, in_time: bool) -> bool {
    tally.grants() >= majority(nodes) && in_time
}

/// What a round that did not get the lock comes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Held by another holder (or rivals split the nodes: `split`, try
    /// again soon).
    Busy { split: bool },
    /// KEY is held with another `--limit`.
    Mismatch { limit: u32 },
    /// Too few nodes answered.
    Failed(Verdict),
}

/// What a failed round gives back of what it took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GiveBack {
    /// Nothing was taken, and no reply was lost.
    Nothing,
    /// Our minority, waking no one (see [`not_acquired`]).
    Quietly,
    /// Everything, waking the next waiter (or held over while a waiter
    /// in line keeps its token).
    All,
}

/// How a lock is laid out for [`not_acquired`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub nodes: usize,
    /// Rivals can split the nodes: a plain lock on several nodes, tried
    /// by a run not in line.
    pub splits: bool,
    /// A split's give-back may be quiet: the caller tries again soon.
    pub quiet_splits: bool,
}

/// A round that did not get the lock: what it gives back, and why it
/// failed, most telling first.
///
/// Several nodes, some granted, the rest busy, none failed: either one
/// holder has a majority (then no waiter can take the lock, so none is
/// woken), or rivals split the nodes (then we try again soon ourselves,
/// and the others would only race again). Either way our minority goes
/// back without a wake-up.
pub fn not_acquired(tally: &Tally, shape: Shape) -> (GiveBack, Outcome) {
    let took = tally.grants() > 0;
    let partial = shape.splits && took && tally.errors.is_empty();
    let busy = tally.busy.is_some();
    let held = partial && busy && tally.majority_held(majority(shape.nodes));
    let split = partial && !held && busy && shape.quiet_splits;
    let give_back = match () {
        () if held || split => GiveBack::Quietly,
        // Some nodes may hold our token (a reply may also have been lost).
        () if took || !tally.errors.is_empty() => GiveBack::All,
        () => GiveBack::Nothing,
    };
    let outcome = match tally.mismatch {
        Some(limit) => Outcome::Mismatch { limit },
        None if shape.nodes - tally.errors.len() < majority(shape.nodes) => {
            Outcome::Failed(Verdict::of_errors(&tally.errors))
        }
        None => Outcome::Busy { split },
    };
    (give_back, outcome)
}

/// What a refresh round comes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refreshed {
    /// A majority extended it in time (replicas still to confirm).
    Extended,
    /// Gone, replaced or revoked on so many nodes that no quorum is left:
    /// the gravest reason found.
    Lost(Ownership),
    /// Confirmed by a majority, but too late to count.
    TooLate,
    /// Not confirmed this time (nodes down or slow).
    Failed,
}

/// A refresh round: `found` what each node that answered said, of
/// `nodes`; `in_time`: it ended within the new validity.
pub fn refreshed(found: &[Ownership], nodes: usize, errors: usize, in_time: bool) -> Refreshed {
    let ours = found.iter().filter(|o| **o == Ownership::Ours).count();
    let lost = found.len() - ours;
    if ours >= majority(nodes) && in_time {
        return Refreshed::Extended;
    }
    if nodes - lost < majority(nodes) {
        let gravest = [Ownership::Revoked, Ownership::Replaced]
            .into_iter()
            .find(|o| found.contains(o));
        return Refreshed::Lost(gravest.unwrap_or(Ownership::Gone));
    }
    match errors {
        0 => Refreshed::TooLate,
        _ => Refreshed::Failed,
    }
}

/// What a release found on one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// Ours (or revoked from us), now released.
    Ours,
    /// Gone or taken on a retry after a try whose reply never came: most
    /// likely that try released it (and the next holder took it).
    Unanswered,
    /// Another token, on a node that had granted us the lock.
    Replaced,
    /// Another token on a node of a rival's minority, never ours.
    Unrelated,
    /// Nobody holds it: expired or deleted.
    Gone,
}

/// One node's release answer; `maybe_done`: an earlier try's reply never
/// came; `ours_before`: the node granted us the lock we held.
pub fn release_found(found: Ownership, maybe_done: bool, ours_before: bool) -> Found {
    match found {
        Ownership::Ours | Ownership::Revoked => Found::Ours,
        Ownership::Gone | Ownership::Replaced if maybe_done => Found::Unanswered,
        Ownership::Replaced if ours_before => Found::Replaced,
        Ownership::Replaced => Found::Unrelated,
        Ownership::Gone => Found::Gone,
    }
}

/// Whether a call that failed this way may still have been carried out
/// (the request may have reached the server): not when the server
/// refused it, a Cluster slot was moving, or this host ran out of
/// something first.
pub fn may_have_run(fault: Fault) -> bool {
    matches!(
        fault,
        Fault::Unreachable | Fault::Dropped | Fault::Interrupted
    )
}

#[cfg(test)]
mod tests;
