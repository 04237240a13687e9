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

use crate::config::Conn;
use crate::exit::{Exit, Failure};
use crate::holder::holders;
use crate::jitter::jitter;
use crate::lock::{
    join_node_errors, listen, Fault, Heard, Inspected, LockKeys, NodeError, Quorum, Wakeups,
};
use crate::log::{field, Ev, Log};
use crate::signals::Signals;

use super::view::{LockView, SlotView};

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

/// Wait up to `timeout` (`None`: forever) for `key` to be free; still
/// held then: exit `busy`.
pub fn run(conn: &Conn, key: &str, timeout: Option<Duration>, busy: u8) -> Result<Exit, Failure> {
    let log = conn.log().for_key(key);
    let signals =
        Signals::start().map_err(|e| Failure::local(e, "cannot set up signal handling"))?;
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

    /// Read the lock on every node, merged as `status` merges it. Too few
    /// answers: a local failure (71) or a refusal (77) fails at once;
    /// unreachable fails at once before any answer (69), and later is
    /// retried until the timeout.
    fn look(&mut self) -> Result<Looked, Failure> {
        let keys = &self.keys;
        let answers = self.quorum.inspect_each(keys);
        let total = self.quorum.nodes();
        let (ok, errors): (Vec<_>, Vec<_>) = answers.into_iter().partition(Result::is_ok);
        let ok: Vec<Inspected> = ok.into_iter().filter_map(Result::ok).collect();
        let errors: Vec<NodeError> = errors.into_iter().filter_map(Result::err).collect();
        if ok.len() >= self.quorum.needed() {
            self.answered = true;
            let view = LockView::merge(self.key, total, ok.iter());
            if view.undecided {
                // Free only when a majority says so.
                return Ok(Looked::Unreachable(
                    join_node_errors(errors, total)
                        .context("the nodes that did not answer may hold the lock's majority"),
                ));
            }
            return Ok(seen(&view).map_or(Looked::Free, Looked::Held));
        }
        let gives_up = errors
            .iter()
            .any(|e| matches!(e.fault, Fault::Refused | Fault::Local));
        if gives_up || !self.answered {
            let what = format!("cannot watch lock '{}'", self.key);
            return Err(super::view::failure(errors, total, &what));
        }
        Ok(Looked::Unreachable(join_node_errors(errors, total)))
    }

    /// Block until `until`, a message on the lock's channels, or a signal.
    fn block(&mut self, until: Instant) -> Option<i32> {
        match listen(&mut self.wakeups, until, self.signals) {
            Heard::Interrupted(sig) => Some(sig),
            Heard::Lost(e) => {
                self.log.info(format!(
                    "lost the subscription to releases of lock '{}' ({e:#}); polling instead",
                    self.key
                ));
                None
            }
            Heard::Message(_) | Heard::Deadline => None,
        }
    }
}

enum Looked {
    Free,
    Held(Seen),
    /// Redis answered before, and not now.
    Unreachable(anyhow::Error),
}

/// The holders a majority holds, as `status` merges the answers, or
/// `None` when free: a plain lock's token (revoked or not: its holder
/// still runs), or a semaphore's slots.
fn seen(view: &LockView) -> Option<Seen> {
    if !view.held {
        return None;
    }
    let slots: Vec<&SlotView> = view.held_slots().collect();
    if slots.is_empty() {
        let token = view.token.clone()?;
        let who = view.holder.who(Some(&token));
        let tokens = BTreeSet::from([token]);
        return Some(Seen {
            tokens,
            pttl: view.pttl,
            who,
        });
    }
    let who = match slots.as_slice() {
        [one] => one.holder.who(Some(&one.token)),
        many => holders(many.len()),
    };
    // Held shared: free only once no shared holder is left (shared
    // holders coming and going never free it), so one mark for them all.
    let tokens = match view.shared {
        true => BTreeSet::from(["shared".to_string()]),
        false => slots.iter().map(|s| s.token.clone()).collect(),
    };
    Some(Seen {
        tokens,
        // Look again when the first of them could have ended.
        pttl: slots.iter().filter_map(|s| s.pttl).min(),
        who,
    })
}

/// Whether a holder seen before is gone: the lock (or a semaphore's
/// slot) was given back. A holder joining a free slot releases nothing.
fn released(was: &BTreeSet<String>, now: &BTreeSet<String>) -> bool {
    !was.is_subset(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(tokens: &[&str]) -> BTreeSet<String> {
        tokens.iter().map(|t| t.to_string()).collect()
    }

    #[test]
    fn a_shared_lock_is_released_only_when_no_shared_holder_is_left() {
        let slot = |token: &str| crate::lock::Slot {
            token: token.into(),
            pttl: Some(Duration::from_secs(9)),
            holder: Vec::new(),
        };
        let shared = |tokens: &[&str]| Inspected {
            shared: true,
            slots: tokens.iter().map(|t| slot(t)).collect(),
            ..Inspected::default()
        };
        let tokens = |answer: Inspected| {
            let view = LockView::merge("k", 1, [answer].iter());
            seen(&view).expect("held").tokens
        };
        let was = tokens(shared(&["a", "b"]));
        assert!(!released(&was, &tokens(shared(&["c"]))));
        let plain = Inspected {
            token: Some("x".into()),
            ..Inspected::default()
        };
        assert!(released(&was, &tokens(plain)));
    }

    #[test]
    fn only_a_holder_leaving_is_a_release() {
        assert!(released(&set(&["a"]), &set(&["b"])));
        assert!(released(&set(&["a", "b"]), &set(&["b", "c"])));
        assert!(!released(&set(&["a"]), &set(&["a", "b"])));
        assert!(!released(&set(&["a"]), &set(&["a"])));
    }

    fn plain(token: &str, ms: u64) -> Inspected {
        Inspected {
            token: Some(token.into()),
            pttl: Some(Duration::from_millis(ms)),
            ..Inspected::default()
        }
    }

    fn slots(tokens: &[(&str, u64)]) -> Inspected {
        let slots = tokens
            .iter()
            .map(|(t, ms)| crate::lock::Slot {
                token: t.to_string(),
                pttl: Some(Duration::from_millis(*ms)),
                holder: Vec::new(),
            })
            .collect();
        Inspected {
            limit: Some(2),
            slots,
            ..Inspected::default()
        }
    }

    fn seen_in(nodes: usize, answers: &[Inspected]) -> Option<(Vec<String>, Option<Duration>)> {
        let view = LockView::merge("k", nodes, answers.iter());
        seen(&view).map(|s| (s.tokens.into_iter().collect(), s.pttl))
    }

    #[test]
    fn held_is_what_status_calls_held() {
        let ms = |n| Some(Duration::from_millis(n));
        // A majority of three holds "a": its expiry is the majority's.
        let a = seen_in(3, &[plain("a", 900), plain("a", 500), plain("b", 100)]);
        assert_eq!(a, Some((vec!["a".to_string()], ms(500))));
        // One of three holds it: free (for `wait`, undecided is asked of the view).
        assert_eq!(seen_in(3, &[plain("a", 9), Inspected::default()]), None);
        assert_eq!(seen_in(1, &[Inspected::default()]), None);
        // A semaphore: the slots a majority holds; look again at the first end.
        let s = seen_in(1, &[slots(&[("x", 300), ("y", 200)])]);
        assert_eq!(s, Some((vec!["x".to_string(), "y".to_string()], ms(200))));
    }
}
