//! A plain lock, a shared lock or a counting semaphore: chosen once per
//! run, it picks the scripts that take, refresh and give back the lock on
//! one node.

use std::time::Duration;

use super::calls::{self, Acquire, Extend, Leave, RaiseFence, Release, Take};
use super::error::{NodeError, NodeResult};
use super::keys::{Holder, LockKeys};
use super::node::{Node, Unexpected};
use super::reply::{self, Ownership};
use super::timing::millis;
use crate::queue::Queue;

/// What kind of lock KEY is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    /// One holder at a time (`--limit 1`).
    Plain,
    /// Up to N holders (`--limit N`, N > 1), each with its own slot.
    Semaphore(u32),
    /// `--shared`: any number of shared holders, each with its own slot,
    /// and no exclusive one (see `scripts/shared.rs`).
    Shared,
}

impl LockKind {
    /// The kind `--limit n` asks for.
    pub fn from_limit(n: u32) -> LockKind {
        match n {
            0 | 1 => LockKind::Plain,
            n => LockKind::Semaphore(n),
        }
    }

    /// The `--limit` of this kind.
    pub fn limit(self) -> u32 {
        match self {
            LockKind::Plain | LockKind::Shared => 1,
            LockKind::Semaphore(n) => n,
        }
    }

    /// RAISE_FENCE's limit: 1 looks for our token in the lock key, any
    /// other number in the holder set (a semaphore's or a shared lock's).
    pub fn fence_limit(self) -> u32 {
        match self {
            LockKind::Shared => 0,
            kind => kind.limit(),
        }
    }

    /// Whether a try marks its place against shared newcomers where no
    /// line is kept (`How::writer`): an exclusive waiter on several nodes,
    /// from its second try on (a `-n` run tries once: it never waits).
    pub fn marks_place(self, nodes: usize, line: bool, first_try: bool) -> bool {
        self == LockKind::Plain && nodes > 1 && !line && !first_try
    }

    /// Whether waiters stand in line for this kind (on one node).
    pub fn queues(self) -> bool {
        matches!(self, LockKind::Plain | LockKind::Shared)
    }

    /// Take the lock (or a slot); with `queue`, a busy plain lock also
    /// puts us in line (see `scripts::ACQUIRE`), and with `liveness` (we
    /// are subscribed to our wake channel) our liveness key lasts that long.
    /// The call to send in a round (see `fanout`); [`read_acquire`] reads
    /// its reply.
    pub fn acquiring(
        self,
        node: &mut Node,
        keys: &LockKeys,
        token: &str,
        ttl: Duration,
        holder: &Holder,
        how: How<'_>,
    ) -> NodeResult<(redis::Cmd, Acquiring)> {
        let liveness = how.liveness;
        // A server that may evict the lock's key would hand it out and
        // then drop it under a running holder: the script checks first,
        // or (--allow-eviction) an INFO of our own.
        let screen = node.screens();
        if !screen {
            node.check_eviction(keys)?;
        }
        let take = match self {
            LockKind::Plain | LockKind::Shared => {
                Take::Plain(queue_flag(how.queue, how.first, how.arriving, holder.queue))
            }
            LockKind::Semaphore(n) => Take::Slot(n),
        };
        let call = Acquire {
            token: token.to_string(),
            ttl_ms: millis(ttl),
            holder: holder.clone(),
            take,
            subscribed: liveness.is_some(),
            liveness_ms: liveness.map(millis).unwrap_or_default(),
            floor: how.floor,
            screen,
            say: how.say,
            at: how.at.unwrap_or_default().to_string(),
            queue_max: holder.queue_max,
            shared: self == LockKind::Shared,
            writer: how.writer,
            stand_in: how.stand_in,
        };
        Ok((calls::command(keys, &call), Acquiring { call }))
    }

    /// What a waiter's stand-in for a lost holder is held as: a shared
    /// run's exclusively (see `scripts/shared.rs`), a semaphore's as a slot.
    pub fn stand_in(self) -> LockKind {
        match self {
            LockKind::Shared => LockKind::Plain,
            kind => kind,
        }
    }

    /// Push the expiry of our lock (or slot) to `ttl` from now; `ended`:
    /// COMMAND ended then (RFC 3339), and `--min-hold` keeps the lock.
    /// The call to send in a round; [`read_ownership`] reads its reply.
    pub fn extending(
        self,
        keys: &LockKeys,
        token: &str,
        ttl: Duration,
        ended: Option<&str>,
    ) -> redis::Cmd {
        let call = Extend {
            slot: self != LockKind::Plain,
            token,
            ttl_ms: millis(ttl),
            ended_at: ended,
        };
        calls::command(keys, &call)
    }

    /// Give back our lock (or slot), waking waiters as `wake` says (a plain
    /// lock only: a semaphore's release always wakes its waiters).
    /// The call to send in a round; [`read_release`] reads its reply.
    pub fn releasing(self, keys: &LockKeys, token: &str, wake: Wake) -> redis::Cmd {
        let how = match wake {
            Wake::Next => "0",
            Wake::Nobody => "1",
            Wake::Anyway => "2",
        };
        let slot = self != LockKind::Plain;
        calls::command(keys, &Release { slot, token, how })
    }

    /// Leave the line of waiters (plain locks only queue).
    pub fn leave(self, node: &mut Node, keys: &LockKeys, token: &str) -> NodeResult<()> {
        node.call(keys, &Leave { token }).map(drop)
    }

    /// Keep our liveness key for `liveness` more: one PEXPIRE, the cheap
    /// way a subscribed waiter stays in line. `false`: the key is gone
    /// (it lapsed, or the data was lost).
    pub fn stay(
        self,
        node: &mut Node,
        keys: &LockKeys,
        token: &str,
        liveness: Duration,
    ) -> NodeResult<bool> {
        let mut cmd = redis::cmd("PEXPIRE");
        cmd.arg(keys.mark(token)).arg(millis(liveness));
        node.query_at::<i64>(&cmd, Some(keys.slot()))
            .map(|n| n == 1)
    }
}

impl Node {
    /// Raise the fence counter (see `scripts::RAISE_FENCE`): the call to
    /// send in a round.
    pub(super) fn raising_fence(keys: &LockKeys, call: RaiseFence) -> redis::Cmd {
        calls::command(keys, &call)
    }

    /// Its reply: `true` when the node still holds our lock.
    pub(super) fn read_raised(&mut self, reply: NodeResult<redis::Value>) -> NodeResult<bool> {
        match reply? {
            redis::Value::Int(n @ 0..=1) => Ok(n == 1),
            other => Err(NodeError::unexpected(
                self.shown(),
                "raising the fence",
                anyhow::anyhow!("{other:?}"),
            )),
        }
    }
}

/// Whom a release wakes (see `scripts::RELEASE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// The next waiter (all of them, without a line), when it was ours.
    Next,
    /// No one: a failed Redlock attempt's give-back.
    Nobody,
    /// The waiters also where the lock was not ours: a Redlock holder's
    /// release (waiters listen on the first node only).
    Anyway,
}

/// How an acquire stands: in line (`queue`), with our liveness key
/// lasting `liveness` (we are subscribed to our wake channel), and
/// whether the fence may not fall below the server's clock (`floor`, one
/// endpoint: see `scripts::fence_lib`).
#[derive(Debug, Clone, Copy)]
pub struct How<'a> {
    pub queue: bool,
    /// Not in line yet, but a line is kept (one node, a plain lock): the
    /// run's first try.
    pub first: bool,
    /// The run's first try in line.
    pub arriving: bool,
    pub liveness: Option<Duration>,
    pub floor: bool,
    /// Redlock: each answer says which server gave it (its `run_id`), to
    /// refuse two nodes that are one server (see `redlock::distinct`).
    pub say: bool,
    /// In line and subscribed: the `run_id` of the server subscribed on,
    /// where the lock may move (see `Wakeups::at`).
    pub at: Option<&'a str>,
    /// An exclusive waiter with no line (Redlock): it marks itself in
    /// each node's line while the lock is held shared, so that shared
    /// newcomers wait behind it (see `scripts/shared.rs`).
    pub writer: bool,
    /// A shared run that saw a holder: should its take start the fence
    /// counter anew, it is an exclusive stand-in (see `scripts/shared.rs`).
    pub stand_in: bool,
}

/// An acquire on its way: what reading its reply needs.
pub struct Acquiring {
    call: Acquire,
}

/// The reply to an acquire, and with `How::say` the server that gave it
/// (its `run_id`; `None`: it did not say). A user who may not read
/// `INFO` (noted) is asked again without the eviction check.
pub fn read_acquire(
    node: &mut Node,
    keys: &LockKeys,
    acquiring: Acquiring,
    reply: NodeResult<redis::Value>,
) -> NodeResult<(reply::Acquire, Option<String>)> {
    let Acquiring { mut call } = acquiring;
    let reply = node.answer(keys, &call, reply)?;
    let (reply, server) = reply::said(reply, call.say).unexpected(node, "acquire")?;
    if !call.screen {
        return Ok((reply::acquire(reply).unexpected(node, "acquire")?, server));
    }
    let found = reply::screened(reply).unexpected(node, "acquire")?;
    if let Some(answer) = node.screened(found)? {
        return Ok((answer, server));
    }
    call.screen = false;
    let reply = node.call(keys, &call)?;
    let (reply, server) = reply::said(reply, call.say).unexpected(node, "acquire")?;
    Ok((reply::acquire(reply).unexpected(node, "acquire")?, server))
}

/// The reply to an extend or a release: whose the lock was.
pub fn read_ownership(
    node: &mut Node,
    what: &str,
    reply: NodeResult<redis::Value>,
) -> NodeResult<Ownership> {
    reply::ownership(reply?).unexpected(node, what)
}

/// The reply to a release.
pub fn read_release(node: &mut Node, reply: NodeResult<redis::Value>) -> NodeResult<Ownership> {
    // Behind sentinels, a release counts only if it went to the master
    // they name now (one that a failover left behind still takes writes
    // for a while, and the lock would stay on the new one): the round's
    // caller asks them, for every node at once (`fanout::masters`).
    read_ownership(node, "release", reply)
}

/// ACQUIRE's queue argument: not in line, or in line by our `--queue`.
/// The acquire script's ARGV[8] for a plain lock (see `scripts::ACQUIRE`):
/// in line, the policy's flag; a newest-wins run's first try ('4') and
/// first try in line ('5') make it the newest arrival.
fn queue_flag(queue: bool, first: bool, arriving: bool, policy: Queue) -> &'static str {
    match (queue, policy) {
        (true, Queue::NewestWins) if arriving => "5",
        (true, policy) => policy.argv(),
        (false, Queue::NewestWins) if first => "4",
        (false, _) => "0",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_lock_queues_like_a_plain_one_and_fences_like_a_semaphore() {
        use LockKind::*;
        assert_eq!(
            [Plain, Shared, Semaphore(3)].map(LockKind::queues),
            [true, true, false]
        );
        // RAISE_FENCE: 1 looks at the lock key, any other at the holder set.
        assert_eq!(
            [Plain, Shared, Semaphore(3)].map(LockKind::fence_limit),
            [1, 0, 3]
        );
        // A shared run asks for no semaphore: a mismatch says --limit 1.
        assert_eq!(Shared.limit(), 1);
    }

    #[test]
    fn only_an_exclusive_redlock_waiter_marks_its_place() {
        use LockKind::*;
        // (kind, nodes, line kept, first try) -> marks
        let table = [
            (Plain, 3, false, false, true),
            (Plain, 3, false, true, false),
            (Plain, 1, true, false, false),
            (Shared, 3, false, false, false),
            (Semaphore(2), 3, false, false, false),
        ];
        for (kind, nodes, line, first, marks) in table {
            assert_eq!(
                kind.marks_place(nodes, line, first),
                marks,
                "{kind:?} {nodes}"
            );
        }
    }

    #[test]
    fn a_newest_wins_run_arrives_on_its_first_try_and_its_first_try_in_line() {
        use Queue::*;
        assert_eq!(queue_flag(false, true, false, NewestWins), "4");
        assert_eq!(queue_flag(true, false, true, NewestWins), "5");
        assert_eq!(queue_flag(true, false, false, NewestWins), "3");
        // No line kept (several nodes, a semaphore): nothing to arrive in.
        assert_eq!(queue_flag(false, false, false, NewestWins), "0");
        assert_eq!(queue_flag(false, true, false, OldestFirst), "0");
        assert_eq!(queue_flag(true, false, true, OldestFirst), "1");
        assert_eq!(queue_flag(true, false, true, NewestFirst), "2");
    }
}
