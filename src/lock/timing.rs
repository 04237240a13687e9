//! The safety timing of a lease, in one place.
//!
//! A lease is valid, by our own monotonic clock, until the moment its last
//! confirmed write was *sent* plus the TTL minus a drift allowance (the
//! Redlock algorithm's 1% + 2 ms). COMMAND must be dead before then, so it
//! gets SIGTERM a stop margin earlier: the grace before SIGKILL, one
//! per-node timeout (a refresh may be in flight) and a little slack.
//! Refreshes happen every `refresh`; a failed one is retried every
//! `retry_every` until the lease can no longer be shown valid.
//!
//! Every duration a user gives is checked here against what Redis (`PX`
//! takes milliseconds as a signed 64-bit integer) and `Instant` accept, so
//! that no arithmetic below can overflow, truncate or panic. The caller
//! names the settings in the messages (the run mode's options: see
//! `config.rs`); nothing here knows the command line.

use std::time::{Duration, Instant};

use crate::log::show;

/// The longest duration any option takes: a century. Far below what `PX`
/// and `Instant` can hold, so sums of a few of them never overflow.
pub const MAX: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// The shortest refresh period: faster refreshes only load Redis.
pub const MIN_REFRESH: Duration = Duration::from_millis(100);

/// Slack for the stop: the time between deciding to stop and `kill()`.
const SLACK: Duration = Duration::from_millis(10);

/// A duration that a setting cannot take, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// The setting as the caller named it ([`Name::full`]).
    pub option: &'static str,
    pub value: Duration,
    pub why: String,
}

/// What the caller calls one setting: in full (the one an error is
/// about, e.g. an option with its value's name) and in a sentence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Name {
    pub full: &'static str,
    pub short: &'static str,
}

/// The names of the three settings a [`Timing`] is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Names {
    pub ttl: Name,
    pub refresh: Name,
    pub kill_after: Name,
}

/// The checked timing of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub ttl: Duration,
    pub refresh: Duration,
    /// Grace between SIGTERM and SIGKILL.
    pub kill_after: Duration,
}

impl Timing {
    /// Check a TTL with the optional refresh period and grace before
    /// SIGKILL (defaults: TTL / 3, and 5 s or TTL / 3 if shorter), named
    /// in messages by `names`: every value in range, and room enough to
    /// stop COMMAND before the lock could expire.
    pub fn new(
        ttl: Duration,
        refresh: Option<Duration>,
        kill_after: Option<Duration>,
        names: &Names,
    ) -> Result<Timing, Invalid> {
        let invalid = |name: Name, value, why: String| Invalid {
            option: name.full,
            value,
            why,
        };
        let (ttl_name, refresh_name, kill_name) = (names.ttl, names.refresh, names.kill_after);
        check(ttl_name.full, ttl)?;
        if ttl.is_zero() {
            return Err(invalid(ttl_name, ttl, "must be longer than zero".into()));
        }
        let refresh_given = refresh.is_some();
        let refresh = refresh.unwrap_or(ttl / 3);
        if refresh_given {
            check(refresh_name.full, refresh)?;
            if refresh < MIN_REFRESH {
                let why = format!("must be at least {}", show(MIN_REFRESH));
                return Err(invalid(refresh_name, refresh, why));
            }
        }
        if refresh >= ttl {
            let why = format!("must be shorter than {} ({})", ttl_name.short, show(ttl));
            return Err(invalid(refresh_name, refresh, why));
        }
        let kill_after_given = kill_after;
        let kill_after = kill_after.unwrap_or_else(|| Duration::from_secs(5).min(ttl / 3));
        check(kill_name.full, kill_after)?;
        if kill_after >= ttl {
            let why = format!(
                "must be shorter than {} ({}), so that COMMAND is dead before the lock can expire",
                ttl_name.short,
                show(ttl)
            );
            return Err(invalid(kill_name, kill_after, why));
        }
        let timing = Timing {
            ttl,
            refresh,
            kill_after,
        };
        timing.check_room(kill_after_given, names)?;
        Ok(timing)
    }

    /// A failed refresh needs time to be retried, and COMMAND time to stop,
    /// before the lock could expire.
    fn check_room(&self, kill_after_given: Option<Duration>, names: &Names) -> Result<(), Invalid> {
        let margin = self.stop_margin() + drift(self.ttl);
        if self.refresh + margin < self.ttl {
            return Ok(());
        }
        let (option, value) = match kill_after_given {
            Some(k) => (names.kill_after.full, k),
            None => (names.refresh.full, self.refresh),
        };
        let why = format!(
            "leaves no time to stop COMMAND before the lock could expire: {} ({}) + \
             {} ({}) + {} of margin must be shorter than {} ({})",
            names.refresh.short,
            show(self.refresh),
            names.kill_after.short,
            show(self.kill_after),
            show(margin - self.kill_after),
            names.ttl.short,
            show(self.ttl)
        );
        Err(Invalid { option, value, why })
    }

    /// The per-node command timeout of this lock.
    pub fn node_timeout(&self) -> Duration {
        node_timeout(self.ttl)
    }

    /// How long before the lease ends COMMAND must get SIGTERM: the grace,
    /// one refresh in flight, and slack.
    pub fn stop_margin(&self) -> Duration {
        self.kill_after + self.node_timeout() + SLACK
    }

    /// How soon a failed refresh is tried again.
    pub fn retry_every(&self) -> Duration {
        (self.refresh / 10).clamp(Duration::from_millis(10), Duration::from_millis(250))
    }

    /// When COMMAND gets SIGTERM if nothing confirms the lease again.
    pub fn term_at(&self, valid_until: Instant) -> Instant {
        earlier(valid_until, self.stop_margin())
    }
}

/// Check that a user's duration is in range for every later sum.
pub fn check(option: &'static str, value: Duration) -> Result<Duration, Invalid> {
    if value > MAX {
        return Err(Invalid {
            option,
            value,
            why: format!("must be at most {}", show(MAX)),
        });
    }
    Ok(value)
}

/// Clock drift allowance of the Redlock algorithm: 1% of the TTL + 2 ms.
pub fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// The per-node command timeout for a lock of this TTL: short against the
/// TTL, so a dead or paused node costs little of the lock's validity.
pub fn node_timeout(ttl: Duration) -> Duration {
    (ttl / 10).clamp(Duration::from_millis(100), Duration::from_secs(1))
}

/// Until when a write of `ttl`, sent at `sent`, keeps the lock ours.
pub fn valid_until(sent: Instant, ttl: Duration) -> Instant {
    // `ttl` is at most MAX: no overflow. A TTL within the drift is over
    // as soon as it is sent.
    sent + ttl.saturating_sub(drift(ttl))
}

/// Milliseconds for `PX`/`PEXPIRE`: at least 1 (0 is an error in Redis),
/// and at most what fits an i64 (a checked duration always does).
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis())
        .unwrap_or(i64::MAX as u64)
        .clamp(1, i64::MAX as u64)
}

/// `at - d`, or `at` itself when the monotonic clock cannot go that far
/// back (only just after boot).
fn earlier(at: Instant, d: Duration) -> Instant {
    at.checked_sub(d).unwrap_or(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    const S: Duration = Duration::from_secs(1);

    /// Names of the caller's choosing, as they come back in errors.
    const NAMES: Names = Names {
        ttl: Name {
            full: "ttl <D>",
            short: "ttl",
        },
        refresh: Name {
            full: "refresh <D>",
            short: "refresh",
        },
        kill_after: Name {
            full: "kill-after <D>",
            short: "kill-after",
        },
    };

    #[test]
    fn defaults_follow_the_ttl() {
        let t = Timing::new(30 * S, None, None, &NAMES).unwrap();
        assert_eq!((t.refresh, t.kill_after), (10 * S, 5 * S));
        assert_eq!(t.node_timeout(), S);
        assert_eq!(t.stop_margin(), 6 * S + 10 * MS);
        assert_eq!(t.retry_every(), 250 * MS);
        let t = Timing::new(3 * S, None, None, &NAMES).unwrap();
        assert_eq!((t.refresh, t.kill_after), (S, S));
        assert_eq!(t.node_timeout(), 300 * MS);
        assert_eq!(t.retry_every(), 100 * MS);
    }

    #[test]
    fn node_timeouts_are_short_against_the_ttl() {
        assert_eq!(node_timeout(S), 100 * MS);
        assert_eq!(node_timeout(5 * S), 500 * MS);
        assert_eq!(node_timeout(30 * S), S);
        assert_eq!(node_timeout(MAX), S);
    }

    #[test]
    fn drift_is_one_percent_and_two_ms() {
        assert_eq!(drift(10 * S), 102 * MS);
        assert_eq!(drift(Duration::ZERO), 2 * MS);
    }

    #[test]
    fn the_stop_must_fit_in_the_ttl() {
        // 1 s: refresh 333 ms + kill-after 333 ms + 100 ms timeout + 10 ms
        // + 12 ms drift = 788 ms < 1 s.
        assert!(Timing::new(S, None, None, &NAMES).is_ok());
        // 400 ms: 133 + 133 + 100 + 10 + 6 = 382 ms < 400: just fits.
        assert!(Timing::new(400 * MS, None, Some(133 * MS), &NAMES).is_ok());
        // 300 ms: 100 + 100 + 100 + 10 + 5 = 315 ms: no room.
        let e = Timing::new(300 * MS, None, None, &NAMES).unwrap_err();
        assert_eq!(e.option, "refresh <D>");
        let e = Timing::new(10 * S, None, Some(9 * S), &NAMES).unwrap_err();
        assert_eq!(e.option, "kill-after <D>");
        assert!(e.why.contains("leaves no time"), "{}", e.why);
    }

    #[test]
    fn out_of_range_values_are_refused() {
        let e = Timing::new(Duration::ZERO, None, None, &NAMES).unwrap_err();
        assert_eq!(e.option, "ttl <D>");
        // humantime parses this; as milliseconds it would wrap.
        let huge = Duration::from_secs(18_446_744_073_709_552);
        assert_eq!(
            Timing::new(huge, None, None, &NAMES).unwrap_err().option,
            "ttl <D>"
        );
        let e = Timing::new(30 * S, Some(Duration::from_nanos(1)), None, &NAMES).unwrap_err();
        assert_eq!(e.option, "refresh <D>");
        assert!(e.why.contains("at least 100ms"), "{}", e.why);
        let e = Timing::new(30 * S, Some(30 * S), None, &NAMES).unwrap_err();
        assert!(e.why.contains("shorter than ttl"), "{}", e.why);
        let e = Timing::new(30 * S, None, Some(30 * S), &NAMES).unwrap_err();
        assert_eq!(e.option, "kill-after <D>");
        assert!(check("wait", MAX + S).is_err());
        assert!(check("wait", MAX).is_ok());
    }

    #[test]
    fn the_longest_lease_does_not_overflow() {
        let t = Timing::new(MAX, None, None, &NAMES).unwrap();
        let now = Instant::now();
        let until = valid_until(now, t.ttl);
        assert!(until > now);
        assert!(t.term_at(until) < until);
        assert_eq!(u128::from(millis(MAX)), MAX.as_millis());
    }

    #[test]
    fn validity_ends_a_drift_before_the_ttl() {
        let now = Instant::now();
        assert_eq!(valid_until(now, 10 * S), now + 10 * S - 102 * MS);
        // A TTL shorter than its drift is over at once, never before `sent`.
        assert_eq!(valid_until(now, MS), now);
    }

    #[test]
    fn milliseconds_are_never_zero_nor_truncated() {
        assert_eq!(millis(Duration::from_micros(10)), 1);
        assert_eq!(millis(1500 * MS), 1500);
        assert_eq!(millis(Duration::MAX), i64::MAX as u64);
    }

    #[test]
    fn the_term_never_goes_before_the_clock_starts() {
        let now = Instant::now();
        let t = Timing::new(30 * S, None, None, &NAMES).unwrap();
        assert!(t.term_at(now) <= now);
    }
}
