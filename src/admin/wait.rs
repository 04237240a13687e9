//! `redlock-run wait KEY`: wait until KEY is free without taking it, for
//! "deploy after the migration finishes" and scripts.
//!
//! Like a waiting run, it listens for the release (on `P{K}`, and on
//! `P{K}:free` where a release that wakes a waiter in line says so), looks
//! again when the holder's lease would end (it may have died), and on a
//! slow fallback timer (a release on another Redlock node). It returns as
//! soon as it sees KEY free, or held by another holder than before: the
//! lock was given back in between, and the next waiter took it at once.
//! It never stands in line, so it delays no one.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::config::Conn;
use crate::exit::{Exit, Failure};
use crate::holder::{holders, Shown};
use crate::jitter::jitter;
use crate::lock::{join_node_errors, Fault, Inspected, LockKeys, NodeError, Quorum, Wakeups};
use crate::log::{field, Ev, Log};
use crate::signals::Signals;

/// Per node, as for `status`: an operator's script should not hang on a
/// dead server.
const NODE_TIMEOUT: Duration = Duration::from_secs(2);

/// Look again this often while subscribed (a release on a node we do not
/// listen to, a lock deleted by hand without a message).
const FALLBACK_MIN: Duration = Duration::from_millis(1000);
const FALLBACK_MAX: Duration = Duration::from_millis(2000);

/// Without a subscription (an ACL without Pub/Sub), polling is all there is.
const POLL_MIN: Duration = Duration::from_millis(50);
const POLL_MAX: Duration = Duration::from_millis(250);

/// After Redis, having answered, stopped answering.
const RECONNECT_MIN: Duration = Duration::from_millis(100);
const RECONNECT_MAX: Duration = Duration::from_millis(500);

/// The bound on how late a signal is noticed while listening.
const SLICE: Duration = Duration::from_millis(50);

/// Wait up to `timeout` (`None`: forever) for `key` to be free; still
/// held then: exit `busy`.
pub fn run(conn: &Conn, key: &str, timeout: Option<Duration>, busy: u8) -> Result<Exit, Failure> {
    let log = conn.log().for_key(key);
    let signals = Signals::start().context("cannot set up signal handling")?;
    let keys = LockKeys::new(&conn.prefix, key);
    let quorum = Quorum::new(&conn.endpoints, keys.clone(), NODE_TIMEOUT, NODE_TIMEOUT);
    let give_up = timeout.map(|d| Instant::now() + d);
    let mut watch = Watch {
        quorum,
        keys,
        key,
        signals: &signals,
        log: &log,
        give_up,
        wakeups: None,
        seen: None,
        answered: false,
    };
    watch.run(busy)
}

/// The lock as one look saw it.
struct Seen {
    /// The tokens a majority holds (a semaphore may have several); empty:
    /// free.
    tokens: BTreeSet<String>,
    /// Until the first of them expires.
    pttl: Option<Duration>,
    /// "web1 pid 4242 (root)", for the messages.
    who: String,
}

struct Watch<'a> {
    quorum: Quorum,
    keys: LockKeys,
    key: &'a str,
    signals: &'a Signals,
    log: &'a Log,
    give_up: Option<Instant>,
    wakeups: Option<Wakeups>,
    /// The last look that found the lock held.
    seen: Option<Seen>,
    /// A look has succeeded once.
    answered: bool,
}

impl Watch<'_> {
    fn run(&mut self, busy: u8) -> Result<Exit, Failure> {
        loop {
            let delay = match self.look()? {
                Looked::Free => return Ok(Exit::Success),
                Looked::Held(now) => {
                    let changed = self
                        .seen
                        .as_ref()
                        .is_some_and(|was| released(&was.tokens, &now.tokens));
                    if changed {
                        self.log.emit(
                            Ev::Note,
                            format!("lock '{}' was released (and taken again at once)", self.key),
                            &[],
                        );
                        return Ok(Exit::Success);
                    }
                    let first = self.seen.is_none();
                    let left = now.pttl;
                    self.seen = Some(now);
                    if first {
                        self.first_held();
                        if self.wakeups.is_some() {
                            // A release before the subscription went unheard.
                            continue;
                        }
                    }
                    let mut delay = match self.wakeups {
                        Some(_) => jitter(FALLBACK_MIN, FALLBACK_MAX),
                        None => jitter(POLL_MIN, POLL_MAX),
                    };
                    if let Some(left) = left {
                        delay = delay.min(left + Duration::from_millis(1));
                    }
                    delay
                }
                Looked::Unreachable(error) => {
                    if self.timed_out() {
                        return Err(Failure {
                            exit: Exit::Unavailable,
                            error: error.context(format!(
                                "cannot watch lock '{}': Redis unavailable (it answered before, \
                                 and was still unreachable when --timeout ran out)",
                                self.key
                            )),
                        });
                    }
                    jitter(RECONNECT_MIN, RECONNECT_MAX)
                }
            };
            if self.timed_out() {
                return Ok(self.busy(busy));
            }
            let now = Instant::now();
            let until = self.give_up.map_or(now + delay, |end| end.min(now + delay));
            if let Some(sig) = self.block(until) {
                return Ok(Exit::Signaled(sig));
            }
        }
    }

    fn timed_out(&self) -> bool {
        self.give_up.is_some_and(|end| Instant::now() >= end)
    }

    /// Say that we wait (with `-v`), and subscribe to releases.
    fn first_held(&mut self) {
        let who = self
            .seen
            .as_ref()
            .map(|s| s.who.clone())
            .unwrap_or_default();
        self.log.emit(
            Ev::Waiting,
            format!(
                "lock '{}' is held by {who}; waiting until it is free",
                self.key
            ),
            &[field("holder", who.clone())],
        );
        match self.quorum.watch_releases() {
            Ok(wakeups) => self.wakeups = Some(wakeups),
            Err(e) => self.log.info(format!(
                "cannot subscribe to releases of lock '{}' ({e:#}); polling instead",
                self.key
            )),
        }
    }

    /// Still held at the timeout: the busy exit, as for a waiting run.
    fn busy(&self, code: u8) -> Exit {
        let who = self
            .seen
            .as_ref()
            .map(|s| s.who.clone())
            .unwrap_or_default();
        self.log.emit(
            Ev::Busy,
            format!("lock '{}' is held by {who}; giving up", self.key),
            &[field("holder", who)],
        );
        Exit::Busy(code)
    }

    /// Read the lock on every node. Too few answers: a refusal fails at
    /// once (77); unreachable fails at once before any answer (69), and
    /// later is retried until the timeout.
    fn look(&mut self) -> Result<Looked, Failure> {
        let keys = &self.keys;
        let answers = self.quorum.on_each(|node| node.inspect(keys));
        let total = self.quorum.nodes();
        let (ok, errors): (Vec<_>, Vec<_>) = answers.into_iter().partition(Result::is_ok);
        let ok: Vec<Inspected> = ok.into_iter().filter_map(Result::ok).collect();
        let errors: Vec<NodeError> = errors.into_iter().filter_map(Result::err).collect();
        let needed = self.quorum.needed();
        if ok.len() >= needed {
            self.answered = true;
            let unanswered = total - ok.len();
            return Ok(match held(&ok, needed) {
                Some(seen) => Looked::Held(seen),
                // Free only when a majority says so.
                None if super::view::undecided(false, most_holding(&ok), unanswered, needed) => {
                    Looked::Unreachable(
                        join_node_errors(errors, total)
                            .context("the nodes that did not answer may hold the lock's majority"),
                    )
                }
                None => Looked::Free,
            });
        }
        let refused = errors.iter().any(|e| e.fault == Fault::Refused);
        let error = join_node_errors(errors, total);
        if refused || !self.answered {
            let (exit, why) = match refused {
                true => (Exit::Refused, "Redis refused"),
                false => (Exit::Unavailable, "Redis unavailable"),
            };
            return Err(Failure {
                exit,
                error: error.context(format!("cannot watch lock '{}': {why}", self.key)),
            });
        }
        Ok(Looked::Unreachable(error))
    }

    /// Block until `until`, a message on the lock's channels, or a signal.
    fn block(&mut self, until: Instant) -> Option<i32> {
        loop {
            if let Some(sig) = self.signals.pending() {
                return Some(sig);
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            let Some(subscription) = &mut self.wakeups else {
                return self.signals.sleep(left);
            };
            match subscription.wait(left.min(SLICE)) {
                Ok(true) => return None,
                Ok(false) => {}
                Err(e) => {
                    self.log.info(format!(
                        "lost the subscription to releases of lock '{}' ({e:#}); polling instead",
                        self.key
                    ));
                    self.wakeups = None;
                }
            }
        }
    }
}

enum Looked {
    Free,
    Held(Seen),
    /// Redis answered before, and not now.
    Unreachable(anyhow::Error),
}

/// The lock as a majority of the answers hold it, or `None` when free: a
/// plain lock's token (revoked or not: its holder still runs), or a
/// semaphore's slots.
fn held(answers: &[Inspected], needed: usize) -> Option<Seen> {
    let mut tokens = BTreeSet::new();
    let mut pttl: Option<Duration> = None;
    let mut who = String::new();
    let count = |token: &str, slot: bool| {
        answers
            .iter()
            .filter(|a| match slot {
                false => a.token.as_deref() == Some(token),
                true => a.slots.iter().any(|s| s.token == token),
            })
            .count()
    };
    for a in answers {
        if let Some(token) = a.token.as_deref() {
            if count(token, false) >= needed && tokens.insert(token.to_string()) {
                pttl = min(pttl, a.pttl);
                who = Shown::of(|f| a.field(f)).who(Some(token));
            }
        }
        for slot in &a.slots {
            if count(&slot.token, true) >= needed && tokens.insert(slot.token.clone()) {
                pttl = min(pttl, slot.pttl);
                if who.is_empty() {
                    who = Shown::of(|f| slot.field(f)).who(Some(&slot.token));
                }
            }
        }
    }
    let slots = answers.iter().map(|a| a.slots.len()).max().unwrap_or(0);
    if slots > 1 && tokens.len() > 1 {
        who = holders(tokens.len());
    }
    (!tokens.is_empty()).then_some(Seen { tokens, pttl, who })
}

/// How many answers hold the most widely held token or slot.
fn most_holding(answers: &[Inspected]) -> usize {
    let tokens = answers.iter().flat_map(|a| {
        a.token
            .iter()
            .cloned()
            .chain(a.slots.iter().map(|s| s.token.clone()))
    });
    let mut counts: std::collections::HashMap<String, usize> = Default::default();
    for token in tokens {
        *counts.entry(token).or_default() += 1;
    }
    counts.into_values().max().unwrap_or(0)
}

/// Whether a holder seen before is gone: the lock (or a semaphore's
/// slot) was given back. A holder joining a free slot releases nothing.
fn released(was: &BTreeSet<String>, now: &BTreeSet<String>) -> bool {
    !was.is_subset(now)
}

fn min(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(tokens: &[&str]) -> BTreeSet<String> {
        tokens.iter().map(|t| t.to_string()).collect()
    }

    #[test]
    fn only_a_holder_leaving_is_a_release() {
        assert!(released(&set(&["a"]), &set(&["b"])));
        assert!(released(&set(&["a", "b"]), &set(&["b", "c"])));
        assert!(!released(&set(&["a"]), &set(&["a", "b"])));
        assert!(!released(&set(&["a"]), &set(&["a"])));
    }

    #[test]
    fn the_most_widely_held_token_counts_slots_too() {
        let plain = |t: &str| Inspected {
            token: Some(t.into()),
            ..Inspected::default()
        };
        assert_eq!(most_holding(&[plain("a"), plain("a"), plain("b")]), 2);
        assert_eq!(most_holding(&[Inspected::default()]), 0);
    }
}
