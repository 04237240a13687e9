//! The lock across N nodes (Redlock): a majority must agree, within the
//! lock's validity. One node is simply a quorum of one: same code path.

use std::time::{Duration, Instant};

use anyhow::anyhow;

use super::calls::RaiseFence;
use super::channels::Wakeups;
use super::decide::{self, GiveBack, Outcome, Refreshed, Tally, Verdict};
use super::endpoint::Endpoint;
use super::error::{join_node_errors, Fault, NodeError, NodeResult};
use super::fanout;
use super::keys::{Holder, LockKeys};
use super::kind::{read_acquire, read_ownership, read_release, How, LockKind, Wake};
use super::node::Node;
use super::redlock::{self, Redlock};
use super::replicas::{self, Replicas, Short};
use super::reply::{Forced, Inspected, Ownership};
use super::timing;

pub use super::outcome::{Attempt, Extend, Lease, LineTry, Released, Tried};

pub struct Quorum {
    nodes: Vec<Node>,
    keys: LockKeys,
    ttl: Duration,
    /// Replicas that must confirm every acquire and extend (WAIT).
    replicas: Replicas,
    kind: LockKind,
    timeout: Duration,
    /// With several nodes, what only a Redlock needs; `None` for one.
    redlock: Option<Redlock>,
    /// An exclusive waiter's try was sent with `How::writer`: it may have
    /// marked its place in the nodes' lines.
    marked: bool,
}

impl Quorum {
    /// The names of this lock's keys in Redis.
    pub fn lock_keys(&self) -> &LockKeys {
        &self.keys
    }

    pub fn new(endpoints: &[Endpoint], keys: LockKeys, ttl: Duration, timeout: Duration) -> Quorum {
        Quorum {
            nodes: endpoints
                .iter()
                .map(|e| Node::new(e.clone(), timeout))
                .collect(),
            keys,
            ttl,
            replicas: Replicas::Default,
            kind: LockKind::Plain,
            timeout,
            redlock: (endpoints.len() > 1).then(Redlock::new),
            marked: false,
        }
    }

    /// The TTL this run asks for.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Require `n` replicas of each node to confirm every acquire and
    /// extend before it counts (`--replicas`).
    pub fn with_replicas(mut self, n: Replicas) -> Quorum {
        self.replicas = n;
        self
    }

    /// Let up to `n` holders share the key (`--limit`); 1 (the default)
    /// is a plain lock, more a semaphore with a slot per holder. Each node
    /// must grant the slot, a majority of them as for a plain lock.
    pub fn with_limit(mut self, n: u32) -> Quorum {
        self.kind = LockKind::from_limit(n);
        self
    }

    /// With `shared` (`--shared`), take the lock shared: any number of
    /// shared holders, no exclusive one.
    pub fn shared_if(mut self, shared: bool) -> Quorum {
        if shared {
            self.kind = LockKind::Shared;
        }
        self
    }

    /// The `--limit` this quorum asks for.
    pub fn limit(&self) -> u32 {
        self.kind.limit()
    }

    /// How many nodes must agree: a majority.
    pub fn needed(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    /// How many nodes there are.
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    /// What the nodes found that the run should warn about (see
    /// [`Node::take_notes`]), each said once.
    pub fn take_notes(&mut self) -> Vec<String> {
        self.nodes.iter_mut().flat_map(Node::take_notes).collect()
    }

    /// Which protocol each node's connections got, for `-v` (see
    /// `scriptless`), each said once.
    pub fn take_said(&mut self) -> Vec<super::node::Said> {
        self.nodes.iter_mut().flat_map(Node::take_said).collect()
    }

    /// Whether any node has ever answered anything in this run.
    pub fn ever_answered(&self) -> bool {
        self.nodes.iter().any(Node::ever_answered)
    }

    /// Hear releases of the lock from the first node that answered the last
    /// attempt. One node is enough: waiters also poll, this only wakes them.
    pub fn subscribe(&self, token: &str) -> anyhow::Result<Wakeups> {
        self.listen(&[self.keys.wake_channel(token)], false)
    }

    /// For `wait KEY`: hear every release of the lock, also one that
    /// woke a waiter (`P{K}:free`), from the first connected node.
    pub fn watch_releases(&self) -> anyhow::Result<Wakeups> {
        self.listen(&[self.keys.free_channel()], false)
    }

    /// For the holder: hear a force-release (or any release) of the lock,
    /// on a connection of its own to the first connected node (or the
    /// first node). The caller refreshes at once when it hears anything,
    /// or when the connection drops (it may have missed a message).
    pub fn watch(&self) -> anyhow::Result<Wakeups> {
        self.listen(&[], true)
    }

    /// [`Quorum::watch`] for a run holding several keys: also the lock
    /// channels of `others` (see `multi.rs`), on the same connection.
    /// Classic Pub/Sub: a Cluster delivers every channel on every node.
    pub(super) fn watch_with(&self, others: &[&Quorum]) -> anyhow::Result<Wakeups> {
        let also: Vec<String> = others.iter().map(|q| q.keys.lock.clone()).collect();
        self.listen(&also, true)
    }

    /// The one way to subscribe: to the lock's channel and `also`, on the
    /// first connected node (`any`: or the first node).
    fn listen(&self, also: &[String], any: bool) -> anyhow::Result<Wakeups> {
        let node = self.nodes.iter().find(|n| n.is_connected());
        let node = node.or(self.nodes.first().filter(|_| any));
        let node = node.ok_or_else(|| anyhow!("no node is connected"))?;
        let mut channels = vec![self.keys.lock.as_str()];
        channels.extend(also.iter().map(String::as_str));
        Ok(node.subscribe(&self.keys, &channels)?)
    }

    /// Whether waiters queue for this lock, to be woken one at a time:
    /// plain locks on one node. Elsewhere every release wakes every waiter
    /// (with several nodes each would keep its own order of arrival).
    pub fn queues_waiters(&self) -> bool {
        self.kind.queues() && self.nodes.len() == 1
    }

    /// Leave the line of waiters (best effort: a dead waiter's place lapses
    /// by itself within seconds).
    pub fn leave(&mut self, token: &str) {
        // Several nodes: an exclusive waiter may have marked its place
        // against shared runs (see `kind::How::writer`).
        if self.queues_waiters() || self.marked {
            let kind = self.kind;
            self.each(|node, keys| kind.leave(node, keys, token));
        }
    }

    /// Keep our place in line for `liveness` more (see `LockKind::stay`):
    /// `Ok(false)` when the place is gone and a full try must queue us
    /// again.
    pub fn stay_in_line(&mut self, token: &str, liveness: Duration) -> anyhow::Result<bool> {
        let kind = self.kind;
        match self
            .each(|node, keys| kind.stay(node, keys, token, liveness))
            .pop()
        {
            Some(Ok(kept)) => Ok(kept),
            Some(Err(e)) => Err(e.error),
            None => Ok(false),
        }
    }

    /// `f` on each node in turn: for `status`'s line of waiters, which
    /// only a lock on one node has.
    pub fn on_each<R>(&mut self, f: impl Fn(&mut Node) -> R) -> Vec<R> {
        self.each(|node, _| f(node))
    }

    /// `f` on each node in turn, with the lock's keys: for the line of
    /// waiters, which only a lock on one node has (see
    /// [`Quorum::queues_waiters`]).
    fn each<R>(&mut self, f: impl Fn(&mut Node, &LockKeys) -> R) -> Vec<R> {
        let keys = &self.keys;
        self.nodes.iter_mut().map(|node| f(node, keys)).collect()
    }
}

impl Quorum {
    /// One attempt; `waiting` says we wait in line if it is busy, and
    /// `liveness` (we are subscribed) how long our place lasts untouched;
    /// `quiet_splits`: a split's give-back may wake no one (the caller
    /// tries again soon: a waiter with time left).
    pub fn try_acquire(
        &mut self,
        token: &str,
        holder: &Holder,
        (waiting, liveness, at): (LineTry, Option<Duration>, Option<&str>),
        quiet_splits: bool,
        saw_holder: bool,
    ) -> Tried {
        let how = self.how(waiting, liveness, at, saw_holder);
        self.marked |= how.writer;
        let (ttl, kind, keys) = (self.ttl, self.kind, &self.keys);
        let start = Instant::now();
        let answers = fanout::round(
            &mut self.nodes,
            |_, node| Some(kind.acquiring(node, keys, token, ttl, holder, how)),
            |node, acquiring, reply| read_acquire(node, keys, acquiring, reply),
        );
        let (answers, servers): (Vec<_>, Vec<_>) = answers
            .into_iter()
            .map(|answer| match answer.unwrap_or_else(not_asked) {
                Ok((answer, server)) => (Ok(answer), server),
                Err(e) => (Err(e), None),
            })
            .unzip();
        if self.redlock.is_some() {
            if let Err(same) = redlock::distinct(&self.nodes, &servers) {
                // Refused, after what the round took is given back.
                let owes = self.give_back_or_owe(token, how.queue);
                return Tried::new(Attempt::SameServer(same), owes);
            }
        }
        let valid_until = timing::valid_until(start, ttl);
        let line = (how.queue, quiet_splits);
        self.decide(token, Tally::of(answers), (start, valid_until), line)
    }

    /// How an attempt stands with the line of waiters (see `kind::How`).
    fn how<'a>(
        &self,
        waiting: LineTry,
        liveness: Option<Duration>,
        at: Option<&'a str>,
        saw_holder: bool,
    ) -> How<'a> {
        let line = self.queues_waiters();
        How {
            queue: waiting != LineTry::First && line,
            first: waiting == LineTry::First && line,
            arriving: waiting == LineTry::Joining && line,
            liveness,
            // One endpoint: no fence below its server's clock (see
            // `scripts::fence_lib`). Redlock's nodes count on from the
            // majority's raise instead: clocks differ between nodes, so a
            // floor would make every acquisition need a raise.
            floor: self.nodes.len() == 1,
            // Several nodes: each answer says which server gave it.
            say: self.redlock.is_some(),
            at,
            writer: self
                .kind
                .marks_place(self.nodes.len(), line, waiting == LineTry::First),
            stand_in: saw_holder && self.kind == LockKind::Shared,
        }
    }

    /// An attempt's answers (started at `at.0`, valid until `at.1`): held
    /// when a majority granted in time and its fence is raised on one.
    /// `line`: the token is kept (in line), and splits may be quiet.
    fn decide(
        &mut self,
        token: &str,
        mut tally: Tally,
        (start, valid_until): (Instant, Instant),
        line: (bool, bool),
    ) -> Tried {
        let nodes = self.nodes.len();
        let mut granted = decide::granted(&tally, nodes, Instant::now() < valid_until);
        let fence = tally.fence();
        if granted && self.redlock.is_some() {
            let limit = self.kind.fence_limit();
            let call = RaiseFence {
                token,
                fence,
                limit,
            };
            let nodes = (self.nodes.as_mut_slice(), &self.keys);
            match redlock::raise_fence(nodes, call, &tally.granted) {
                Ok(()) => granted = Instant::now() < valid_until,
                Err(errors) => {
                    // Not raised on a majority: a later majority might count
                    // from below this fence. Fail like a lost quorum.
                    tally.errors.extend(errors);
                    granted = false;
                }
            }
        }
        if granted {
            if let Some(redlock) = self.redlock.as_mut() {
                redlock.held(&tally.granted);
            }
            let lease = Lease {
                fence,
                acquired_at: start,
                valid_until,
                reset: tally.reset,
                beside: tally.busy_left,
                beside_holder: tally.busy_left_holder,
            };
            return self.confirmed(token, lease, line.0);
        }
        self.not_acquired(token, tally, line)
    }

    /// Give back what a failed attempt may hold, now, or once the token
    /// is no longer needed. A waiter in line on one node keeps its token
    /// (its place) for the next attempt, and a give-back whose fate is
    /// unknown (a lossy link may deliver it late, on a connection we
    /// dropped) could then delete the lock that attempt takes: so it is
    /// owed (`true`), and the waiter gives it back once its wait ends
    /// without the lock ([`Quorum::give_back`]). Meanwhile what the
    /// failed attempt took is still ours: the next attempt finds it with
    /// our token.
    fn give_back_or_owe(&mut self, token: &str, token_kept: bool) -> bool {
        if !token_kept {
            self.give_back(token);
        }
        token_kept
    }

    /// Give back what a failed attempt may still hold with `token` (a
    /// waiter whose wait ended without the lock, see [`Tried::owes`]).
    pub fn give_back(&mut self, token: &str) {
        drop(self.release_waking(token, 1, Wake::Next));
    }

    /// Granted: kept if the replicas confirm it, else given back.
    fn confirmed(&mut self, token: &str, lease: Lease, token_kept: bool) -> Tried {
        match replicas::confirm(&mut self.nodes, &self.keys, self.replicas, self.timeout / 2) {
            Ok(()) => Tried::new(Attempt::Acquired(lease), false),
            Err(short) => {
                // Not durable: a failover could lose it. Give it back.
                let owes = self.give_back_or_owe(token, token_kept);
                let attempt = match short {
                    Short::Unconfirmed(e) => Attempt::Unconfirmed(e),
                    Short::TooFewReplicas(e) => Attempt::TooFewReplicas(e),
                    Short::Refused(e) => Attempt::Refused(e),
                };
                Tried::new(attempt, owes)
            }
        }
    }

    /// Not granted: what was taken given back, and why, most telling first.
    fn not_acquired(
        &mut self,
        token: &str,
        tally: Tally,
        (token_kept, quiet_splits): (bool, bool),
    ) -> Tried {
        let shape = decide::Shape {
            nodes: self.nodes.len(),
            splits: self.nodes.len() > 1 && self.kind == LockKind::Plain && !token_kept,
            quiet_splits,
        };
        let (give_back, outcome) = decide::not_acquired(&tally, shape);
        let owes = match give_back {
            // With a wake-up, the waiters (subscribed on the first node)
            // woke each other for as long as a holder without that node
            // held the lock.
            GiveBack::Quietly => {
                drop(self.release_waking(token, 1, Wake::Nobody));
                false
            }
            // Before anyone retries.
            GiveBack::All => self.give_back_or_owe(token, token_kept),
            GiveBack::Nothing => false,
        };
        Tried::new(self.failed(tally, outcome), owes)
    }

    /// What a failed attempt comes to.
    fn failed(&self, tally: Tally, outcome: Outcome) -> Attempt {
        let held_by = tally.majority_holder(decide::majority(self.nodes.len()));
        let error = || join_node_errors(tally.errors, self.nodes.len());
        match outcome {
            // Not a matter of waiting: the holders use another --limit.
            Outcome::Mismatch { limit } => Attempt::Mismatch { limit },
            Outcome::Failed(Verdict::Local) => Attempt::Local(error()),
            Outcome::Failed(Verdict::Refused) => Attempt::Refused(error()),
            Outcome::Failed(Verdict::Moving) => Attempt::Moving(error()),
            Outcome::Failed(Verdict::Unavailable) => Attempt::Unavailable(error()),
            Outcome::Busy { split } => {
                let mut busy = tally.busy.unwrap_or_default();
                busy.split = split;
                busy.reset = tally.reset;
                busy.held_by = held_by;
                Attempt::Busy(Box::new(busy))
            }
        }
    }

    /// Refresh the lock for another TTL.
    pub fn extend(&mut self, token: &str) -> Extend {
        self.extend_for(token, self.ttl, None)
    }

    /// Set the lock's remaining life to `ttl` (`--min-hold` re-arms it,
    /// saying when COMMAND `ended`, RFC 3339, in the holder record).
    pub fn extend_for(&mut self, token: &str, ttl: Duration, ended: Option<&str>) -> Extend {
        self.extend_as(token, ttl, (self.kind, ended))
    }

    /// Make a waiter's stand-in for a lost holder (see `wait.rs`) last
    /// `ttl` more, held as `LockKind::stand_in` says.
    pub fn extend_stand_in(&mut self, token: &str, ttl: Duration) -> Extend {
        self.extend_as(token, ttl, (self.kind.stand_in(), None))
    }

    /// [`Quorum::extend_for`] with the call of a lock of `how.0`.
    fn extend_as(&mut self, token: &str, ttl: Duration, how: (LockKind, Option<&str>)) -> Extend {
        let ((kind, ended), start) = (how, Instant::now());
        let keys = &self.keys;
        let answers = fanout::round(
            &mut self.nodes,
            |_, _| Some(Ok((kind.extending(keys, token, ttl, ended), ()))),
            |node, (), reply| read_ownership(node, "extend", reply),
        );
        let answers = answers.into_iter().map(|a| a.unwrap_or_else(not_asked));
        let valid_until = timing::valid_until(start, ttl);
        let (found, errors): (Vec<_>, Vec<_>) = answers.into_iter().partition(Result::is_ok);
        let found: Vec<Ownership> = found.into_iter().flatten().collect();
        let errors: Vec<NodeError> = errors.into_iter().filter_map(Result::err).collect();
        let in_time = Instant::now() < valid_until;
        match decide::refreshed(&found, self.nodes.len(), errors.len(), in_time) {
            Refreshed::Extended => match replicas::confirm(
                &mut self.nodes,
                &self.keys,
                self.replicas,
                self.timeout / 2,
            ) {
                Ok(()) => Extend::Extended(valid_until),
                Err(Short::Unconfirmed(e) | Short::TooFewReplicas(e) | Short::Refused(e)) => {
                    Extend::Failed(e)
                }
            },
            Refreshed::Lost(why) => Extend::Lost(why),
            Refreshed::TooLate => Extend::Failed(anyhow!("refresh confirmed too late to count")),
            Refreshed::Failed => Extend::Failed(join_node_errors(errors, self.nodes.len())),
        }
    }

    /// Whether `token` holds the lock now (on a majority of the nodes),
    /// read without changing anything: for a run nested inside its job.
    pub fn holds(&mut self, token: &str) -> bool {
        let keys = self.keys.clone();
        let holding = self
            .inspect_each(&keys)
            .into_iter()
            .flatten()
            .filter(|seen| {
                let plain = seen.token.as_deref() == Some(token) && !seen.revoked;
                let revoked = |slot: &super::reply::Slot| slot.field("revoked") == Some("1");
                plain
                    || seen
                        .slots
                        .iter()
                        .any(|slot| slot.token == token && !revoked(slot))
            })
            .count();
        holding >= self.needed()
    }

    /// Whether a node says this lock was revoked by a newer run
    /// (`--replace-running` wrote `replaced_by` in the holder record).
    pub fn replaced(&mut self) -> bool {
        let keys = self.keys.clone();
        self.inspect_each(&keys)
            .into_iter()
            .flatten()
            .any(|seen| seen.revoked && seen.field("replaced_by").is_some())
    }

    /// Read `keys`' lock on every node, in one round (see `fanout`): for
    /// `wait KEY` and a nested run.
    pub fn inspect_each(&mut self, keys: &LockKeys) -> Vec<NodeResult<Inspected>> {
        let found = self.inspect_all(std::slice::from_ref(keys));
        let one = |found: NodeResult<Vec<Inspected>>| found?.pop().ok_or_else(not_asked_error);
        found.into_iter().map(one).collect()
    }

    /// Read each of `keys`' locks on every node (`status`): a round per
    /// key, all nodes at once; a node that failed is not asked again in
    /// this call, its error stands for every key.
    pub fn inspect_all(&mut self, keys: &[LockKeys]) -> Vec<NodeResult<Vec<Inspected>>> {
        let found = self.nodes.iter().map(|_| Ok(Vec::new())).collect();
        self.inspect_from(keys, found)
    }

    /// `list`: every lock under `prefix`, by node: SCAN's pages in rounds,
    /// then each name any node has read on every node that answered (a
    /// round per name); a node's error stands for all.
    pub fn list_all(&mut self, prefix: &str) -> Vec<NodeResult<Vec<(String, Inspected)>>> {
        let scanned = super::inspect::scan_each(&mut self.nodes, prefix);
        let names: std::collections::BTreeSet<String> =
            scanned.iter().flatten().flatten().cloned().collect();
        let keys: Vec<LockKeys> = names.iter().map(|n| LockKeys::new(prefix, n)).collect();
        let found = scanned.into_iter().map(|s| s.map(|_| Vec::new())).collect();
        let found = self.inspect_from(&keys, found);
        let named = |seen: Vec<Inspected>| names.iter().cloned().zip(seen).collect();
        found.into_iter().map(|f| f.map(named)).collect()
    }

    /// [`Quorum::inspect_all`], asking only the nodes `found` is `Ok` for.
    fn inspect_from(
        &mut self,
        keys: &[LockKeys],
        mut found: Vec<NodeResult<Vec<Inspected>>>,
    ) -> Vec<NodeResult<Vec<Inspected>>> {
        for keys in keys {
            let answers = fanout::round(
                &mut self.nodes,
                |i, _| (found.get(i)?.is_ok()).then(|| Ok((Node::inspecting(keys), ()))),
                |node, (), reply| node.read_inspect(keys, reply),
            );
            for (found, answer) in found.iter_mut().zip(answers) {
                match (found.as_mut(), answer) {
                    (Ok(seen), Some(Ok(one))) => seen.push(one),
                    (Ok(_), Some(Err(e))) => *found = Err(e),
                    _ => {}
                }
            }
        }
        found
    }

    /// Take `keys`' lock from its holder on every node, in one round,
    /// whoever holds it, or only if it holds `token`: revoke it (no waiter
    /// gets it before the holder has stopped), or with `now` delete it at
    /// once. What was done and the lock as it was, by node.
    pub fn force_each(
        &mut self,
        keys: &LockKeys,
        token: Option<&str>,
        now: bool,
    ) -> Vec<NodeResult<(Forced, Inspected)>> {
        self.force_each_by(keys, token, now, "")
    }

    /// [`Quorum::force_each`] for `--replace-running`: a revoked holder's
    /// record says `by` whom it was replaced (`""`: a force-release).
    pub fn force_each_by(
        &mut self,
        keys: &LockKeys,
        token: Option<&str>,
        now: bool,
        by: &str,
    ) -> Vec<NodeResult<(Forced, Inspected)>> {
        let answers = fanout::round(
            &mut self.nodes,
            |_, _| Some(Ok((Node::forcing(keys, token, now, by), ()))),
            |node, (), reply| node.read_forced(keys, token, now, by, reply),
        );
        answers
            .into_iter()
            .map(|a| a.unwrap_or_else(not_asked))
            .collect()
    }

    /// Release on every node, trying each up to `tries` times. With
    /// several nodes every node wakes its waiters, also one where the lock
    /// was not ours (they listen on the first node only).
    pub fn release(&mut self, token: &str, tries: usize) -> Released {
        let wake = match self.nodes.len() > 1 {
            true => Wake::Anyway,
            false => Wake::Next,
        };
        self.release_waking(token, tries, wake)
    }

    fn release_waking(&mut self, token: &str, tries: usize, wake: Wake) -> Released {
        let kind = self.kind;
        let mut last: Vec<Option<NodeResult<Ownership>>> =
            self.nodes.iter().map(|_| None).collect();
        // A try whose reply never came may have released it: a later try
        // then finds it gone, our own doing, not an expiry.
        let mut maybe_done = vec![false; self.nodes.len()];
        for again in 0..tries.max(1) {
            let failed: Vec<bool> = last.iter().map(|l| matches!(l, Some(Err(_)))).collect();
            if again > 0 {
                if !failed.contains(&true) {
                    break;
                }
                for (maybe, last) in maybe_done.iter_mut().zip(&last) {
                    *maybe |= matches!(last, Some(Err(e)) if decide::may_have_run(e.fault));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let keys = &self.keys;
            let asked = fanout::round(
                &mut self.nodes,
                |i, _| {
                    let ask = again == 0 || failed.get(i) == Some(&true);
                    ask.then(|| Ok((kind.releasing(keys, token, wake), ())))
                },
                |node, (), reply| read_release(node, reply),
            );
            let asked = confirm_masters(&mut self.nodes, asked);
            for (last, answer) in last.iter_mut().zip(asked) {
                if answer.is_some() {
                    *last = answer;
                }
            }
        }
        let answers =
            (last.into_iter().zip(maybe_done)).map(|(l, m)| (l.unwrap_or_else(not_asked), m));
        let mut released = Released::default();
        for (i, (answer, maybe_done)) in answers.into_iter().enumerate() {
            let ours_before = self.redlock.as_ref().is_none_or(|r| r.was_ours(i));
            let found = match answer {
                Ok(found) => decide::release_found(found, maybe_done, ours_before),
                Err(e) => {
                    released.errors.push(e.error);
                    continue;
                }
            };
            match found {
                decide::Found::Ours => released.ours += 1,
                decide::Found::Unanswered => released.unanswered += 1,
                decide::Found::Replaced => released.replaced += 1,
                decide::Found::Unrelated => {}
                decide::Found::Gone => released.gone += 1,
            }
        }
        released
    }
}

/// The answer of a node a round left out (never: every node is asked).
fn not_asked<T>() -> NodeResult<T> {
    Err(not_asked_error())
}

fn not_asked_error() -> NodeError {
    NodeError {
        fault: Fault::Dropped,
        error: anyhow!("not asked"),
    }
}

/// Behind sentinels, a release counts only where it went to the master
/// they name now: asked for every node it was sent to, in one round.
fn confirm_masters(
    nodes: &mut [Node],
    asked: Vec<Option<NodeResult<Ownership>>>,
) -> Vec<Option<NodeResult<Ownership>>> {
    let released: Vec<bool> = asked.iter().map(|a| matches!(a, Some(Ok(_)))).collect();
    let masters = fanout::masters(nodes, &released, false);
    (asked.into_iter().zip(masters))
        .map(|(answer, master)| match (answer, master) {
            (Some(Ok(_)), Some(Err(e))) => Some(Err(e)),
            (answer, _) => answer,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quorum(n: usize) -> Quorum {
        let e = super::super::endpoint::endpoint("redis://127.0.0.1:1").expect("valid url");
        Quorum::new(
            &vec![e; n],
            LockKeys::new("p:", "k"),
            Duration::from_secs(10),
            Duration::from_millis(100),
        )
    }

    #[test]
    fn majority() {
        assert_eq!(quorum(1).needed(), 1);
        assert_eq!(quorum(2).needed(), 2);
        assert_eq!(quorum(3).needed(), 2);
        assert_eq!(quorum(5).needed(), 3);
    }
}
