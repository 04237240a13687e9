//! The lock across N nodes (Redlock): a majority must agree, within the
//! lock's validity. One node is simply a quorum of one: same code path.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::anyhow;

use super::calls::RaiseFence;
use super::endpoint::Endpoint;
use super::error::{Fault, NodeError, NodeResult};
use super::keys::{Holder, LockKeys};
use super::kind::{LockKind, Wake};
use super::node::{Node, Wakeups};
use super::reply::{Acquire, BusyInfo, Ownership};
use super::timing;

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
}

/// The result of one acquisition attempt.
pub enum Attempt {
    Acquired(Lease),
    Busy(BusyInfo),
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
        let not_ours = self.replaced + self.gone;
        nodes.saturating_sub(not_ours) < needed
    }
}

/// Whether a call that failed this way may still have been carried out
/// (the request may have reached the server): not when the server
/// refused it, a Cluster slot was moving, or this host ran out of
/// something first.
fn may_have_run(fault: Fault) -> bool {
    matches!(
        fault,
        Fault::Unreachable | Fault::Dropped | Fault::Interrupted
    )
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

/// `--replicas`: how many replicas must confirm each write (WAIT).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Replicas {
    /// Not given: `Auto` on Sentinel and Cluster endpoints, none elsewhere.
    #[default]
    Default,
    /// One, when the primary has any replica connected; else none.
    Auto,
    /// Exactly N (0: none).
    Exactly(u32),
}

pub struct Quorum {
    nodes: Vec<Node>,
    keys: LockKeys,
    ttl: Duration,
    /// Replicas that must confirm every acquire and extend (WAIT).
    replicas: Replicas,
    kind: LockKind,
    timeout: Duration,
    /// With several nodes: each node's `run_id` once it was asked (`None`
    /// inside: it did not say), to refuse one server counted twice.
    run_ids: Vec<Option<Option<String>>>,
    /// With several nodes: the `run_id` an earlier run found at each node
    /// (see [`super::servers`]), for its acquire script to check, until it
    /// has (then it is in `run_ids`). Empty until the first attempt.
    recalled: Vec<Option<String>>,
    /// What was read from that file, to write it only when it changed;
    /// `true` in `remembered` once this run wrote it or found it current.
    recalled_file: Option<Vec<String>>,
    remembered: bool,
    /// The nodes that granted the lock we hold (empty: none held yet).
    /// Our release finding another token on one of these is news; on
    /// another node (a Redlock minority that a rival's attempt took, and
    /// is giving back) it is not.
    held_on: Vec<bool>,
    /// See [`Quorum::quiet_splits`].
    quiet_splits: bool,
    /// A give-back was held over (see [`Quorum::give_back_owed`]).
    owed: bool,
}

impl Quorum {
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
            run_ids: vec![None; endpoints.len()],
            recalled: Vec::new(),
            recalled_file: None,
            remembered: false,
            held_on: Vec::new(),
            quiet_splits: false,
            owed: false,
        }
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

    /// Whether any node has ever answered anything in this run.
    pub fn ever_answered(&self) -> bool {
        self.nodes.iter().any(Node::ever_answered)
    }

    /// Hear releases of the lock from the first node that answered the last
    /// attempt. One node is enough: waiters also poll, this only wakes them.
    pub fn subscribe(&self, token: &str) -> anyhow::Result<Wakeups> {
        let node = self.nodes.iter().find(|n| n.is_connected());
        let wake = self.keys.wake_channel(token);
        let node = node.ok_or_else(|| anyhow!("no node is connected"))?;
        Ok(node.subscribe(&self.keys, &[&self.keys.lock, &wake])?)
    }

    /// For `wait KEY`: hear every release of the lock, also one that
    /// woke a waiter (`P{K}:free`), from the first connected node.
    pub fn watch_releases(&self) -> anyhow::Result<Wakeups> {
        let node = self.nodes.iter().find(|n| n.is_connected());
        let node = node.ok_or_else(|| anyhow!("no node is connected"))?;
        let free = self.keys.free_channel();
        Ok(node.subscribe(&self.keys, &[&self.keys.lock, &free])?)
    }

    /// For the holder: hear a force-release (or any release) of the lock,
    /// on a connection of its own to the first connected node (or the
    /// first node). The caller refreshes at once when it hears anything,
    /// or when the connection drops (it may have missed a message).
    pub fn watch(&self) -> anyhow::Result<Wakeups> {
        let node = self.nodes.iter().find(|n| n.is_connected());
        let node = node.or(self.nodes.first());
        let node = node.ok_or_else(|| anyhow!("no node to watch"))?;
        Ok(node.subscribe(&self.keys, &[&self.keys.lock])?)
    }

    /// Whether waiters queue for this lock, to be woken one at a time:
    /// plain locks on one node. Elsewhere every release wakes every waiter
    /// (with several nodes each would keep its own order of arrival).
    pub fn queues_waiters(&self) -> bool {
        self.kind == LockKind::Plain && self.nodes.len() == 1
    }

    /// Leave the line of waiters (best effort: a dead waiter's place lapses
    /// by itself within seconds).
    pub fn leave(&mut self, token: &str) {
        if self.queues_waiters() {
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

    /// Ask every node at once, for commands that span many keys (`status`,
    /// `list`, `force-release`): the same fan-out as the lock's own calls.
    pub fn on_each<R: Send>(&mut self, f: impl Fn(&mut Node) -> R + Sync) -> Vec<R> {
        self.each(|node, _| f(node))
    }

    /// Ask every node at once; one node is asked on this thread.
    fn each<R: Send>(&mut self, f: impl Fn(&mut Node, &LockKeys) -> R + Sync) -> Vec<R> {
        self.each_at(|_, node, keys| f(node, keys))
    }

    /// [`Quorum::each`], telling `f` each node's place in the list.
    fn each_at<R: Send>(&mut self, f: impl Fn(usize, &mut Node, &LockKeys) -> R + Sync) -> Vec<R> {
        let keys = &self.keys;
        if let [node] = self.nodes.as_mut_slice() {
            return vec![f(0, node, keys)];
        }
        // The first node is asked on this thread, the others on small
        // threads of their own, all at once.
        let Some((first, rest)) = self.nodes.split_first_mut() else {
            return Vec::new();
        };
        // A node whose thread cannot start (out of processes) is asked
        // on this thread, after the others: slower, never a crash.
        let rest: Vec<std::sync::Mutex<&mut Node>> =
            rest.iter_mut().map(std::sync::Mutex::new).collect();
        std::thread::scope(|s| {
            let f = &f;
            let handles: Vec<_> = rest
                .iter()
                .enumerate()
                .map(|(i, node)| {
                    std::thread::Builder::new()
                        .stack_size(128 * 1024)
                        .spawn_scoped(s, move || f(i + 1, &mut lock(node), keys))
                        .ok()
                })
                .collect();
            let mut answers = vec![f(0, first, keys)];
            for (i, (node, handle)) in rest.iter().zip(handles).enumerate() {
                answers.push(match handle {
                    Some(h) => h
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                    None => f(i + 1, &mut lock(node), keys),
                });
            }
            answers
        })
    }
}

fn lock<'m, 'n>(
    node: &'m std::sync::Mutex<&'n mut Node>,
) -> std::sync::MutexGuard<'m, &'n mut Node> {
    node.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The answers of one acquire round, sorted.
#[derive(Default)]
struct Tally {
    /// The fence each node that granted the lock gave, by node.
    granted: Vec<Option<i64>>,
    fences: Vec<i64>,
    reset: bool,
    busy: Option<BusyInfo>,
    /// Who holds each busy node (host, pid, start), to tell a holder of a
    /// majority from a split among rivals.
    holders: Vec<(String, String, String)>,
    mismatch: Option<u32>,
    errors: Vec<NodeError>,
}

impl Tally {
    /// Whether one holder has `needed` of the busy nodes.
    fn majority_held(&self, needed: usize) -> bool {
        self.holders
            .iter()
            .any(|h| self.holders.iter().filter(|o| *o == h).count() >= needed)
    }
}

impl Tally {
    fn of(answers: Vec<NodeResult<Acquire>>) -> Tally {
        let mut tally = Tally::default();
        for answer in answers {
            let fence = match &answer {
                Ok(Acquire::Held { fence, .. }) => Some(*fence),
                _ => None,
            };
            tally.granted.push(fence);
            match answer {
                Ok(Acquire::Held { fence, reset }) => {
                    tally.fences.push(fence);
                    tally.reset |= reset;
                }
                Ok(Acquire::Busy(info)) => {
                    let who = (
                        info.host.clone(),
                        info.pid.clone(),
                        info.acquired_at.clone(),
                    );
                    tally.holders.push(who);
                    tally.busy.get_or_insert(*info);
                }
                Ok(Acquire::Mismatch { limit }) => {
                    tally.mismatch.get_or_insert(limit);
                }
                // Settled before the tally (`Quorum::settle_run_ids`).
                Ok(Acquire::Elsewhere(_)) => tally.errors.push(NodeError {
                    fault: Fault::Dropped,
                    error: anyhow!("another server than expected answered"),
                }),
                Err(e) => tally.errors.push(e),
            }
        }
        tally
    }
}

impl Quorum {
    /// One attempt; `waiting` says we wait in line if it is busy, and
    /// `liveness` (we are subscribed) how long our place lasts untouched.
    pub fn try_acquire(
        &mut self,
        token: &str,
        holder: &Holder,
        waiting: LineTry,
        liveness: Option<Duration>,
        at: Option<&str>,
    ) -> Attempt {
        let (ttl, kind) = (self.ttl, self.kind);
        let line = self.queues_waiters();
        let queue = waiting != LineTry::First && line;
        let first = waiting == LineTry::First && line;
        let arriving = waiting == LineTry::Joining && line;
        let skipped = match self.distinct_servers() {
            Ok(skipped) => skipped,
            Err(same) => return Attempt::SameServer(same),
        };
        // One endpoint: no fence below its server's clock (see
        // `scripts::fence_lib`). Redlock's nodes count on from the
        // majority's raise instead: clocks differ between nodes, so a
        // floor would make every acquisition need a raise.
        let floor = self.nodes.len() == 1;
        let acquire = |node: &mut Node, keys: &LockKeys, run_id: Option<&str>| {
            let how = super::kind::How {
                queue,
                first,
                arriving,
                liveness,
                floor,
                run_id,
                at,
            };
            kind.acquire(node, keys, token, ttl, holder, how)
        };
        let expected = self.recalled.clone();
        let start = Instant::now();
        let mut answers = self.each_at(|i, node, keys| {
            // A node that did not answer INFO just now is not asked again.
            let failed = skipped.get(i).and_then(|m| m.lock().ok()?.take());
            match failed {
                Some(error) => Err(error),
                None => acquire(node, keys, expected.get(i).and_then(Option::as_deref)),
            }
        });
        if let Err(same) = self.settle_run_ids(&mut answers, &expected, acquire) {
            self.give_back(token, queue);
            return Attempt::SameServer(same);
        }
        let valid_until = timing::valid_until(start, ttl);
        self.decide(token, Tally::of(answers), (start, valid_until), queue)
    }

    /// An attempt's answers (started at `at.0`, valid until `at.1`): held
    /// when a majority granted in time and its fence is raised on one.
    fn decide(
        &mut self,
        token: &str,
        mut tally: Tally,
        (start, valid_until): (Instant, Instant),
        queue: bool,
    ) -> Attempt {
        let mut granted = tally.fences.len() >= self.needed() && Instant::now() < valid_until;
        let fence = tally.fences.iter().copied().max().unwrap_or_default();
        if granted {
            match self.raise_fence(token, fence, &tally.granted) {
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
            self.held_on = tally.granted.iter().map(Option::is_some).collect();
            let lease = Lease {
                fence,
                acquired_at: start,
                valid_until,
                reset: tally.reset,
            };
            return self.confirmed(token, lease, queue);
        }
        self.not_acquired(token, tally, queue)
    }

    /// Give back what a failed attempt may hold, now, or once the token
    /// is no longer needed. A waiter in line on one node keeps its token
    /// (its place) for the next attempt, and a give-back whose fate is
    /// unknown (a lossy link may deliver it late, on a connection we
    /// dropped) could then delete the lock that attempt takes: so it is
    /// held over until the wait ends without the lock ([`give_back_owed`]).
    /// Meanwhile what the failed attempt took is still ours: the next
    /// attempt finds it with our token.
    ///
    /// [`give_back_owed`]: Quorum::give_back_owed
    fn give_back(&mut self, token: &str, token_kept: bool) {
        match token_kept {
            true => self.owed = true,
            false => drop(self.release_waking(token, 1, Wake::Next)),
        }
    }

    /// The wait ended without the lock: give back what a failed attempt
    /// may still hold with `token`, which no later attempt will use.
    pub fn give_back_owed(&mut self, token: &str) {
        if std::mem::take(&mut self.owed) {
            drop(self.release_waking(token, 1, Wake::Next));
        }
    }

    /// Granted: kept if the replicas confirm it, else given back.
    fn confirmed(&mut self, token: &str, lease: Lease, token_kept: bool) -> Attempt {
        match self.confirm_replicas() {
            Ok(()) => {
                // Ours now: nothing held over is owed.
                self.owed = false;
                Attempt::Acquired(lease)
            }
            Err(short) => {
                // Not durable: a failover could lose it. Give it back.
                self.give_back(token, token_kept);
                match short {
                    Short::Unconfirmed(e) => Attempt::Unconfirmed(e),
                    Short::TooFewReplicas(e) => Attempt::TooFewReplicas(e),
                    Short::Refused(e) => Attempt::Refused(e),
                }
            }
        }
    }

    /// Not granted: what was taken given back, and why, most telling first.
    fn not_acquired(&mut self, token: &str, tally: Tally, token_kept: bool) -> Attempt {
        // Several nodes, some granted, the rest busy, none failed: either
        // one holder has a majority (then no waiter can take the lock, so
        // none is woken), or rivals split the nodes (then we try again
        // soon ourselves, and the others would only race again). Either
        // way our minority goes back without a wake-up: with one, the
        // waiters (subscribed on the first node) woke each other for as
        // long as a holder without that node held the lock.
        let several = self.nodes.len() > 1 && self.kind == LockKind::Plain && !token_kept;
        let partial = several && !tally.fences.is_empty() && tally.errors.is_empty();
        let held = partial && tally.busy.is_some() && tally.majority_held(self.needed());
        let split = partial && !held && tally.busy.is_some() && self.quiet_splits;
        if held || split {
            drop(self.release_waking(token, 1, Wake::Nobody));
        } else if !tally.fences.is_empty() || !tally.errors.is_empty() {
            // Some nodes may hold our token (a reply may also have been lost):
            // give them all back before anyone retries.
            self.give_back(token, token_kept);
        }
        if let Some(limit) = tally.mismatch {
            // Not a matter of waiting: the holders use another --limit.
            return Attempt::Mismatch { limit };
        }
        if self.nodes.len() - tally.errors.len() < self.needed() {
            let refused = tally.errors.iter().any(|e| e.fault == Fault::Refused);
            let local = tally.errors.iter().any(|e| e.fault == Fault::Local);
            let moving = tally.errors.iter().any(|e| e.fault == Fault::Moving);
            let error = join_node_errors(tally.errors, self.nodes.len());
            return match (local, refused, moving) {
                (true, _, _) => Attempt::Local(error),
                (false, true, _) => Attempt::Refused(error),
                (false, false, true) => Attempt::Moving(error),
                (false, false, false) => Attempt::Unavailable(error),
            };
        }
        let mut busy = tally.busy.unwrap_or_default();
        busy.split = split;
        Attempt::Busy(busy)
    }

    /// Whether a split's give-back may be quiet: only when the caller
    /// tries again soon (a waiter with time left).
    pub fn quiet_splits(&mut self, quiet: bool) {
        self.quiet_splits = quiet;
    }

    /// With several nodes, before anything is written to a node: ask each
    /// node not asked yet for its `run_id` (all at once), and refuse two
    /// nodes that are one server under two addresses (a socket and a TCP
    /// port, two interfaces). A node that refuses INFO (no `+info`) is not
    /// checked. Ok: the nodes that did not answer, with their errors, not
    /// to be asked again in this attempt (so a dead node costs one
    /// timeout, not two).
    ///
    /// A node whose `run_id` an earlier run remembered is not asked: its
    /// acquire script checks it ([`Quorum::settle_run_ids`]).
    fn distinct_servers(&mut self) -> anyhow::Result<Vec<Mutex<Option<NodeError>>>> {
        if self.nodes.len() < 2 {
            return Ok(Vec::new());
        }
        self.recall();
        let asked: Vec<bool> = (self.run_ids.iter().zip(&self.recalled))
            .map(|(id, recalled)| id.is_some() || recalled.is_some())
            .collect();
        if asked.iter().all(|a| *a) {
            return Ok(Vec::new());
        }
        let answers = self.each_at(|i, node, _| match asked.get(i) {
            Some(false) => Some(node.run_id()),
            _ => None,
        });
        let mut skipped = Vec::new();
        for (i, answer) in answers.into_iter().enumerate() {
            let (id, failed) = match answer {
                None => (self.run_ids[i].clone(), None),
                Some(Ok(id)) => (Some(id), None),
                Some(Err(e)) if e.fault == Fault::Refused => (Some(None), None),
                Some(Err(e)) => (None, Some(e)),
            };
            self.run_ids[i] = id;
            skipped.push(Mutex::new(failed));
        }
        match self.same_server() {
            Some(same) => Err(same),
            None => Ok(skipped),
        }
    }

    /// Two nodes that are one server, by the `run_id`s known (asked, or
    /// remembered and still to be checked by the acquire script).
    fn same_server(&self) -> Option<anyhow::Error> {
        let ids: Vec<Option<&String>> = (0..self.nodes.len())
            .map(|i| match (self.run_ids.get(i), self.recalled.get(i)) {
                (Some(Some(Some(id))), _) | (_, Some(Some(id))) => Some(id),
                _ => None,
            })
            .collect();
        for (i, id) in ids.iter().enumerate() {
            let Some(id) = id else { continue };
            if let Some(first) = ids[..i].iter().position(|other| *other == Some(*id)) {
                return Some(anyhow!(
                    "'{}' names the same server as '{}' (run_id {}): each Redlock node must \
                     be an independent server",
                    self.nodes[i].shown(),
                    self.nodes[first].shown(),
                    crate::secrets::untrusted(id)
                ));
            }
        }
        None
    }

    /// The nodes' URLs as shown (passwords redacted), naming the file of
    /// [`super::servers`].
    fn shown_urls(&self) -> Vec<String> {
        let shown = self.nodes.iter().map(|n| crate::secrets::scrub(n.shown()));
        shown.collect()
    }

    /// Before the first attempt: the `run_id`s an earlier run with these
    /// nodes found, if every node has one.
    fn recall(&mut self) {
        if !self.recalled.is_empty() {
            return;
        }
        self.recalled = vec![None; self.nodes.len()];
        let urls = self.shown_urls();
        let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
        if let Some(ids) = super::servers::recall(&urls) {
            self.recalled = ids.iter().cloned().map(Some).collect();
            self.recalled_file = Some(ids);
        }
    }

    /// Once every node's `run_id` is known: written down for the next
    /// run, unless that is what was read.
    fn remember(&mut self) {
        if self.remembered || self.nodes.len() < 2 {
            return;
        }
        let ids: Option<Vec<String>> = self.run_ids.iter().map(|id| id.clone().flatten()).collect();
        let Some(ids) = ids else { return };
        self.remembered = true;
        if self.recalled_file.as_ref() != Some(&ids) {
            let urls = self.shown_urls();
            let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
            super::servers::remember(&urls, &ids);
        }
    }

    /// After an attempt's acquires: a node that checked a remembered
    /// `run_id` (`expected`) and answered is that server; one that is not
    /// (restarted, or its address leads elsewhere now) wrote nothing and
    /// said which server it is. Those ids are checked against the others'
    /// (two nodes that are one server: the error, and the caller gives
    /// back what the attempt took), then those nodes are asked again,
    /// with `acquire`, all at once.
    fn settle_run_ids(
        &mut self,
        answers: &mut [NodeResult<Acquire>],
        expected: &[Option<String>],
        acquire: impl Fn(&mut Node, &LockKeys, Option<&str>) -> NodeResult<Acquire> + Sync,
    ) -> anyhow::Result<()> {
        let mut again = vec![false; answers.len()];
        for (i, answer) in answers.iter().enumerate() {
            let Some(Some(id)) = expected.get(i) else {
                continue;
            };
            let found = match answer {
                Ok(Acquire::Elsewhere(found)) => {
                    again[i] = true;
                    Some(found.clone()).filter(|f| !f.is_empty())
                }
                Ok(_) => Some(id.clone()),
                // Not checked: the next attempt's script checks it.
                Err(_) => continue,
            };
            self.run_ids[i] = Some(found);
            self.recalled[i] = None;
        }
        if again.contains(&true) {
            if let Some(same) = self.same_server() {
                return Err(same);
            }
            let ids = self.run_ids.clone();
            let retried = self.each_at(|i, node, keys| match again.get(i) {
                Some(true) => Some(acquire(
                    node,
                    keys,
                    ids[i].as_ref().and_then(|id| id.as_deref()),
                )),
                _ => None,
            });
            for (i, answer) in retried.into_iter().enumerate() {
                let Some(answer) = answer else { continue };
                answers[i] = match answer {
                    Ok(Acquire::Elsewhere(_)) => {
                        // It changed again (restarting?): asked afresh next time.
                        self.run_ids[i] = None;
                        Err(NodeError {
                            fault: Fault::Dropped,
                            error: anyhow!(
                                "{}: a different server answered each time (restarting?)",
                                crate::secrets::scrub(self.nodes[i].shown())
                            ),
                        })
                    }
                    other => other,
                };
            }
        }
        self.remember();
        Ok(())
    }

    /// Make `fence` (the largest a node of the majority gave) the next
    /// value of one sequence across every majority: raise the counter to
    /// it on every node that granted the lock with a smaller one (all at
    /// once), while that node still holds our token. Nodes that gave
    /// `fence` itself have it already. Ok when a majority's counters are
    /// now at least `fence`: every later majority shares a node with it,
    /// so counts on from above. Nothing is sent when a majority already
    /// agreed (one node always does); else the errors of the nodes that
    /// failed, or one saying that too few still held the lock.
    fn raise_fence(
        &mut self,
        token: &str,
        fence: i64,
        granted: &[Option<i64>],
    ) -> Result<(), Vec<NodeError>> {
        let at = granted.iter().filter(|f| **f == Some(fence)).count();
        if at >= self.needed() {
            return Ok(());
        }
        let limit = self.kind.limit();
        let answers = self.each_at(|i, node, keys| match granted.get(i) {
            Some(Some(f)) if *f < fence => {
                let call = RaiseFence {
                    token,
                    fence,
                    limit,
                };
                Some(node.raise_fence(keys, call))
            }
            _ => None,
        });
        let mut raised = at;
        let mut errors = Vec::new();
        for answer in answers.into_iter().flatten() {
            match answer {
                Ok(true) => raised += 1,
                Ok(false) => {}
                Err(NodeError { fault, error }) => errors.push(NodeError {
                    fault,
                    error: error.context("raising the fence counter to the majority's"),
                }),
            }
        }
        if raised >= self.needed() {
            return Ok(());
        }
        if errors.is_empty() {
            errors.push(NodeError {
                fault: Fault::Dropped,
                error: anyhow!(
                    "the fence was raised on only {raised} of {} nodes (a majority is {}): \
                     the lock expired meanwhile",
                    self.nodes.len(),
                    self.needed()
                ),
            });
        }
        Err(errors)
    }

    /// Refresh the lock for another TTL.
    pub fn extend(&mut self, token: &str) -> Extend {
        self.extend_for(token, self.ttl, None)
    }

    /// Set the lock's remaining life to `ttl` (`--min-hold` re-arms it,
    /// saying when COMMAND `ended`, RFC 3339, in the holder record).
    pub fn extend_for(&mut self, token: &str, ttl: Duration, ended: Option<&str>) -> Extend {
        let start = Instant::now();
        let kind = self.kind;
        let answers = self.each(|node, keys| kind.extend(node, keys, token, ttl, ended));
        let valid_until = timing::valid_until(start, ttl);
        let mut ours = 0;
        let mut lost = Vec::new();
        let mut errors = Vec::new();
        for answer in answers {
            match answer {
                Ok(Ownership::Ours) => ours += 1,
                Ok(other) => lost.push(other),
                Err(e) => errors.push(e),
            }
        }
        if ours >= self.needed() && Instant::now() < valid_until {
            return match self.confirm_replicas() {
                Ok(()) => Extend::Extended(valid_until),
                Err(Short::Unconfirmed(e) | Short::TooFewReplicas(e) | Short::Refused(e)) => {
                    Extend::Failed(e)
                }
            };
        }
        if self.nodes.len() - lost.len() < self.needed() {
            // The gravest reason found: revoked by an operator, then taken.
            let why = [Ownership::Revoked, Ownership::Replaced]
                .into_iter()
                .find(|o| lost.contains(o))
                .unwrap_or(Ownership::Gone);
            return Extend::Lost(why);
        }
        if errors.is_empty() {
            return Extend::Failed(anyhow!("refresh confirmed too late to count"));
        }
        Extend::Failed(join_node_errors(errors, self.nodes.len()))
    }

    /// With `--replicas N`: WAIT until N replicas have the last write, for
    /// at most half the per-node timeout, on every node. When WAIT comes
    /// back short, ask once how many replicas there are: fewer than N will
    /// never do, however long one waits. With `auto` (the default on
    /// Sentinel and Cluster endpoints), one replica when the primary has
    /// any acknowledging (see `node::acknowledging`), none when it has
    /// none (also after a short WAIT).
    fn confirm_replicas(&mut self) -> Result<(), Short> {
        let (replicas, limit) = (self.replicas, self.timeout / 2);
        let none = matches!(replicas, Replicas::Default | Replicas::Exactly(0));
        if none && !self.nodes.iter().any(Node::is_topology) {
            // Nothing to wait for and no master to confirm: no fan-out.
            return Ok(());
        }
        let answers = self.each(|node, keys| {
            let confirmed = replicas_confirm(node, keys, replicas, limit)?;
            // Behind sentinels, the write counts only if it went to the
            // master they name now, not to one a failover left behind.
            node.confirm_master()?;
            Ok::<_, NodeError>(confirmed)
        });
        for answer in answers {
            // A refused WAIT or INFO (NOPERM, a managed service that
            // forbids WAIT) is a refusal, not a replica that is late:
            // retrying it until --wait ran out would hide the cause.
            let checked = answer.map_err(|e| match e.fault {
                Fault::Refused => Short::Refused(e.error),
                _ => Short::Unconfirmed(e.error),
            })?;
            let Some((wanted, auto, confirmed, connected, known, node)) = checked else {
                continue;
            };
            match connected {
                // Auto: the replicas are gone; nothing to wait for.
                Some(0) if auto => {}
                // Behind sentinels that know enough replicas, one is down,
                // restarting, or being moved by a failover: not this time.
                Some(n) if n < u64::from(wanted) && !auto && known >= Some(wanted.into()) => {
                    return Err(Short::Unconfirmed(anyhow!(
                        "--replicas {wanted}: {node} has {n} of the {} replica(s) the sentinels \
                         know connected (one is down or reconnecting, or a failover is under way)",
                        known.unwrap_or_default()
                    )))
                }
                Some(n) if n < u64::from(wanted) && !auto => {
                    return Err(Short::TooFewReplicas(anyhow!(
                        "--replicas {wanted} can never be met: {node} has {n} replica(s) connected"
                    )))
                }
                Some(_) => {
                    return Err(Short::Unconfirmed(anyhow!(
                    "only {confirmed} of {wanted} replicas confirmed the lock within {} ({node})",
                    crate::log::show(limit)
                )))
                }
                None => {}
            }
        }
        Ok(())
    }

    /// Whether `token` holds the lock now (on a majority of the nodes),
    /// read without changing anything: for a run nested inside its job.
    pub fn holds(&mut self, token: &str) -> bool {
        let answers = self.each(|node, keys| node.inspect(keys));
        let holding = answers
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
        let answers = self.each(|node, keys| {
            let mut last = kind.release(node, keys, token, wake);
            // A try whose reply never came may have released it: a later
            // try then finds it gone, our own doing, not an expiry.
            let mut maybe_done = false;
            for _ in 1..tries {
                match &last {
                    Ok(_) => break,
                    Err(e) => maybe_done |= may_have_run(e.fault),
                }
                std::thread::sleep(Duration::from_millis(50));
                last = kind.release(node, keys, token, wake);
            }
            (last, maybe_done)
        });
        let mut released = Released::default();
        for (i, (answer, maybe_done)) in answers.into_iter().enumerate() {
            let ours_before = self.held_on.get(i).copied().unwrap_or(true);
            match answer {
                Ok(Ownership::Ours | Ownership::Revoked) => released.ours += 1,
                // Most likely that try released it, and the next holder
                // (woken by it) took the lock before the retry came.
                Ok(Ownership::Gone | Ownership::Replaced) if maybe_done => released.unanswered += 1,
                Ok(Ownership::Replaced) if ours_before => released.replaced += 1,
                // A node of a rival's minority, never ours: nothing to say.
                Ok(Ownership::Replaced) => {}
                Ok(Ownership::Gone) => released.gone += 1,
                Err(e) => released.errors.push(e.error),
            }
        }
        released
    }
}

/// What WAIT found on one node: (wanted, auto, confirmed, connected
/// when fewer confirmed, the node); `None` when nothing was waited for.
/// `(wanted, auto, confirmed, connected, known, node)`: `connected` when
/// fewer confirmed than wanted, `known` also when fewer are connected.
type Confirmed = Option<(u32, bool, i64, Option<u64>, Option<u64>, String)>;

/// WAIT on one node for the replicas `replicas` asks of it.
fn replicas_confirm(
    node: &mut Node,
    keys: &LockKeys,
    replicas: Replicas,
    limit: Duration,
) -> NodeResult<Confirmed> {
    let auto = match replicas {
        Replicas::Exactly(_) => false,
        Replicas::Auto => true,
        Replicas::Default => node.is_topology(),
    };
    // Auto: one replica, if any is really acknowledging (a stopped one
    // stays "connected" for repl-timeout and would fail every WAIT).
    let wanted = match replicas {
        Replicas::Exactly(n) => n,
        _ if !auto => return Ok(None),
        _ => u32::from(node.acknowledging_replicas(keys)? > 0),
    };
    if wanted == 0 {
        return Ok(None);
    }
    let confirmed = node.wait_replicas(keys, wanted, limit)?;
    let connected = match (confirmed < i64::from(wanted), auto) {
        (false, _) => None,
        // Auto: none acknowledging now (it stopped during the WAIT).
        (true, true) => Some(node.acknowledging_replicas(keys)?),
        (true, false) => Some(node.connected_replicas(keys)?),
    };
    let known = match connected.is_some_and(|n| n < u64::from(wanted)) {
        true => node.known_replicas(),
        false => None,
    };
    Ok(Some((
        wanted,
        auto,
        confirmed,
        connected,
        known,
        node.shown().to_string(),
    )))
}

/// Why `--replicas` did not confirm a write.
enum Short {
    /// Not this time (slow replicas, a timeout).
    Unconfirmed(anyhow::Error),
    /// Never: fewer replicas are connected than wanted.
    TooFewReplicas(anyhow::Error),
    /// The server refused WAIT or INFO (permissions, a forbidden command).
    Refused(anyhow::Error),
}

/// Several nodes' errors as one error: "2 of 3 nodes failed: a; b".
pub fn join_errors(errors: Vec<anyhow::Error>, nodes: usize) -> anyhow::Error {
    match errors.len() {
        0 => anyhow!("no quorum"),
        1 if nodes == 1 => errors
            .into_iter()
            .next()
            .unwrap_or_else(|| anyhow!("no quorum")),
        n => {
            let all: Vec<String> = errors.iter().map(|e| format!("{e:#}")).collect();
            anyhow!("{n} of {nodes} Redis nodes failed: {}", all.join("; "))
        }
    }
}

/// [`join_errors`] for nodes' errors.
pub fn join_node_errors(errors: Vec<NodeError>, nodes: usize) -> anyhow::Error {
    join_errors(errors.into_iter().map(|e| e.error).collect(), nodes)
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
