//! Waiting for a busy lock: sleep until the holder releases it (a message
//! on the lock's channel), its TTL runs out, or a slow fallback poll fires;
//! then try again, until `--wait` runs out, a signal arrives, or the lock
//! is ours.
//!
//! The subscription is made only once the lock was found busy, on a second
//! connection, and before the next try, so no release can slip between a
//! busy answer and the subscription. The uncontended path stays one
//! connection and one round trip.
//!
//! From the second try on, a waiter for a plain lock on one node stands in
//! line (see `scripts::ACQUIRE`): a release then wakes only the first in
//! line, on its own channel, and waiters are served in order of arrival.

use std::time::{Duration, Instant, SystemTime};

use crate::exit::{Exit, Failure};
use crate::lock::{Attempt, BusyInfo, Holder, Lease, Quorum, Wakeups};
use crate::log::short;
use crate::log::Log;
use crate::signals::Signals as SignalRelay;

/// How waiting ended, when it did not fail.
pub enum Waited {
    Acquired(Lease),
    /// Still busy when `--wait` ran out.
    Busy(BusyInfo),
    /// A signal arrived first; nothing is left in Redis.
    Signaled(i32),
}

/// Retry anyway this often while subscribed, in case a wake-up is missed
/// (a release on another Redlock node, a lock deleted by hand). Jittered so
/// that many waiters do not poll in lock-step.
const FALLBACK_MIN: Duration = Duration::from_millis(500);
const FALLBACK_MAX: Duration = Duration::from_millis(1000);

/// Retry delays when no subscription could be made (e.g. an ACL without
/// Pub/Sub): polling is then the only way to notice a release.
const POLL_MIN: Duration = Duration::from_millis(50);
const POLL_MAX: Duration = Duration::from_millis(250);

/// How long one blocking read of the subscription may last: the bound on
/// how late a signal is noticed while waiting.
const SLICE: Duration = Duration::from_millis(50);

/// Try to take the lock, waiting up to `wait` (`None`: forever).
pub fn acquire(
    quorum: &mut Quorum,
    token: &str,
    holder: &Holder,
    wait: Option<Duration>,
    key: &str,
    signals: &SignalRelay,
    log: &Log,
) -> Result<Waited, Failure> {
    let waited = wait_in_line(quorum, token, holder, wait, key, signals, log);
    if !matches!(waited, Ok(Waited::Acquired(_))) {
        // Let the next in line be woken instead of us.
        quorum.leave(token);
    }
    waited
}

fn wait_in_line(
    quorum: &mut Quorum,
    token: &str,
    holder: &Holder,
    wait: Option<Duration>,
    key: &str,
    signals: &SignalRelay,
    log: &Log,
) -> Result<Waited, Failure> {
    let give_up = wait.map(|w| Instant::now() + w);
    let mut wakeups: Option<Wakeups> = None;
    let mut first_busy = true;
    loop {
        // The first try does not queue: the uncontended path stays one EVAL.
        let info = match quorum.try_acquire(token, holder, !first_busy) {
            Attempt::Acquired(lease) => return Ok(Waited::Acquired(lease)),
            Attempt::Unavailable(error) => {
                return Err(Failure {
                    exit: Exit::Unavailable,
                    error: error.context(format!("cannot take lock '{key}': Redis unavailable")),
                })
            }
            Attempt::Busy(info) => info,
            // The arguments are valid, but not for this key as Redis holds
            // it: a configuration mismatch among its users, exit 2.
            Attempt::Mismatch { limit } => {
                return Err(Failure {
                    exit: Exit::Usage,
                    error: anyhow::anyhow!(
                        "lock '{key}' is held with --limit {limit}; this run asked for --limit {} \
                         (every holder of a key must use the same --limit)",
                        quorum.limit()
                    ),
                })
            }
            // Held but not confirmed by --replicas (and given back): retry
            // like a busy lock, and fail as unavailable when time is up.
            Attempt::Unconfirmed(error) => {
                if give_up.is_some_and(|end| Instant::now() >= end) {
                    return Err(Failure {
                        exit: Exit::Unavailable,
                        error: error.context(format!("cannot take lock '{key}'")),
                    });
                }
                if let Some(sig) = signals.sleep(jitter(POLL_MIN, POLL_MAX)) {
                    return Ok(Waited::Signaled(sig));
                }
                continue;
            }
        };
        let now = Instant::now();
        if give_up.is_some_and(|end| now >= end) {
            return Ok(Waited::Busy(info));
        }
        if first_busy {
            first_busy = false;
            let holder = describe_holder(&info);
            log.emit(
                crate::log::Ev::Waiting,
                format!("lock '{key}' {holder}; waiting"),
                &[crate::log::field("holder", holder.clone())],
            );
            match quorum.subscribe(token) {
                Ok(subscribed) => {
                    wakeups = Some(subscribed);
                    // A release between the busy answer and the subscription
                    // was not heard: look again before blocking.
                    continue;
                }
                Err(e) => log.info(format!(
                    "cannot subscribe to releases of lock '{key}' ({e:#}); polling instead"
                )),
            }
        }
        let mut delay = match wakeups {
            Some(_) => jitter(FALLBACK_MIN, FALLBACK_MAX),
            None => jitter(POLL_MIN, POLL_MAX),
        };
        if info.pttl_ms >= 0 {
            // Wake up when the holder's lease runs out (it may have died).
            delay = delay.min(Duration::from_millis(info.pttl_ms as u64 + 1));
        }
        let mut until = now + delay;
        if let Some(end) = give_up {
            until = until.min(end);
        }
        // Every waiter tries as soon as it hears of a release: a random
        // stagger, even with waiters standing down once they heard the lock
        // was taken, did not shorten a 200-waiter queue and slowed the
        // hand-over between a few (see scripts/bench.sh).
        match block(&mut wakeups, until, key, signals, log) {
            Woke::Signaled(sig) => return Ok(Waited::Signaled(sig)),
            Woke::Released | Woke::Timer => {}
        }
    }
}

/// Why a wait ended.
enum Woke {
    /// The lock was released (a message on its channel).
    Released,
    /// Time to look again: the holder's TTL or the fallback poll.
    Timer,
    Signaled(i32),
}

/// Block until `until`, a release message, or a signal.
fn block(
    wakeups: &mut Option<Wakeups>,
    until: Instant,
    key: &str,
    signals: &SignalRelay,
    log: &Log,
) -> Woke {
    loop {
        if let Some(sig) = signals.pending() {
            return Woke::Signaled(sig);
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Woke::Timer;
        }
        let Some(subscription) = wakeups else {
            return signals.sleep(left).map_or(Woke::Timer, Woke::Signaled);
        };
        match subscription.wait(left.min(SLICE)) {
            Ok(true) => return Woke::Released,
            Ok(false) => {}
            Err(e) => {
                log.info(format!(
                    "lost the subscription to releases of lock '{key}' ({e:#}); polling instead"
                ));
                *wakeups = None;
            }
        }
    }
}

/// "is held by host web1 pid 4242 for 12s (expires in 18s)".
pub fn describe_holder(info: &BusyInfo) -> String {
    let mut text = String::from("is held");
    if info.limit > 0 {
        // A semaphore: all its slots are taken.
        text += &format!(" by {} holders of --limit {}", info.holders, info.limit);
    } else if !info.host.is_empty() {
        text += &format!(" by host {} pid {}", info.host, info.pid);
    }
    if let Ok(since) = humantime::parse_rfc3339_weak(&info.acquired_at) {
        let age = SystemTime::now().duration_since(since).unwrap_or_default();
        text += &format!(" for {}", short(age));
    }
    if info.pttl_ms >= 0 {
        let what = if info.limit > 0 {
            "the first slot expires"
        } else {
            "expires"
        };
        text += &format!(
            " ({what} in {})",
            short(Duration::from_millis(info.pttl_ms as u64))
        );
    }
    text
}

/// A uniformly random duration in `[low, high)`.
pub fn jitter(low: Duration, high: Duration) -> Duration {
    let span = (high - low).as_micros().max(1) as u64;
    let random = uuid::Uuid::new_v4().as_u64_pair().0;
    low + Duration::from_micros(random % span)
}
