//! The deadline plan of a supervised run: when to refresh, when to warn
//! COMMAND, when it gets SIGTERM, when SIGKILL at the latest, when to give
//! up on what it left behind, and what a continue after a stop means for
//! the lease.
//!
//! Pure arithmetic: no clock, no signal, no I/O. The caller passes the
//! clock readings (`now`) and the events (a refresh confirmed, a loss
//! reported, a warning or SIGKILL sent, a stop begun, a continue, the
//! keeper's kill) and executes what the plan says is due. The supervision
//! loop (`supervise.rs`) and the refresher (`refresh.rs`) do no deadline
//! arithmetic of their own.

use std::time::{Duration, Instant};

use crate::lock::timing::{self, Timing};

/// Why the lock was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    /// Another token holds it.
    Replaced,
    /// It expired or was deleted.
    Gone,
    /// An operator force-released it: stop, then give it back at once.
    Revoked,
    /// A newer run revoked it (`--replace-running`): as `Revoked`.
    Superseded,
    /// No refresh was confirmed before the deadline.
    Unconfirmed,
    /// redlock-run was stopped (job control) past the point where the
    /// lease could still be shown valid.
    Suspended,
}

impl Loss {
    /// The reason, as the "lost" event words it.
    pub fn why(self) -> &'static str {
        match self {
            Loss::Replaced => "was taken over by another holder",
            Loss::Gone => "expired or was deleted",
            Loss::Revoked => "was force-released",
            Loss::Superseded => "was replaced by a newer run (--replace-running)",
            Loss::Unconfirmed => "could not be refreshed before it could expire",
            Loss::Suspended => "ran out while redlock-run was stopped",
        }
    }

    /// The `reason` field of the JSON events.
    pub fn name(self) -> &'static str {
        match self {
            Loss::Replaced => "replaced",
            Loss::Gone => "gone",
            Loss::Revoked => "revoked",
            Loss::Superseded => "replaced",
            Loss::Unconfirmed => "unconfirmed",
            Loss::Suspended => "suspended",
        }
    }
}

/// How long after SIGKILL leftovers are waited for (a process we may not
/// signal, such as a setuid one, would otherwise keep us forever).
pub const UNKILLABLE: Duration = Duration::from_secs(2);

/// Why COMMAND is being stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Lost(Loss),
    MaxHold,
    /// COMMAND exited, but left processes behind.
    Leftovers,
    /// A resource supervision needs could not be had (a thread).
    Local,
}

impl Reason {
    /// The `reason` field of the "stopping" event.
    pub fn name(self) -> &'static str {
        match self {
            Reason::Lost(loss) => loss.name(),
            Reason::MaxHold => "max_hold",
            Reason::Leftovers => "leftovers",
            Reason::Local => "local_failure",
        }
    }
}

/// What is due now; the caller does it, then tells the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Send the `--warn-signal`, then [`Plan::warned`].
    Warn,
    /// The grace of the stop in progress is over: SIGKILL, then
    /// [`Plan::kill_sent`].
    Kill,
    /// The lock is lost (the refresher found it so, or no refresh was
    /// confirmed before the SIGTERM was due): [`Plan::lose`], and begin a
    /// stop unless one is in progress.
    Lose(Loss),
    /// COMMAND ran for `--max-hold` (this long): begin a stop.
    MaxHold(Duration),
}

/// What to do with COMMAND when we are continued after a stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Continue {
    /// The lease still holds: continue it.
    Resume,
    /// The lease may have run out meanwhile: SIGKILL before it can run
    /// another instruction (the plan counts the lock as lost).
    Kill,
}

/// A stop in progress: SIGTERM sent, SIGKILL due at `kill_at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stop {
    pub reason: Reason,
    pub kill_at: Instant,
    pub killed: bool,
}

/// The deadlines of one supervised COMMAND, and where they stand.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Between SIGTERM and SIGKILL (`--kill-after`).
    grace: Duration,
    /// The lease enforced, if any: its timing and its end as last
    /// confirmed.
    lease: Option<(Timing, Instant)>,
    /// A loss the refresher reported.
    reported: Option<Loss>,
    /// The loss acted on.
    lost: Option<Loss>,
    /// `--max-hold`, and when it runs out.
    max_hold: Option<(Duration, Instant)>,
    /// `--warn-before`, with a `--warn-signal`.
    warn_before: Option<Duration>,
    warned: bool,
    stop: Option<Stop>,
}

impl Plan {
    /// A plan with no deadline but the grace of a stop.
    pub fn new(grace: Duration) -> Plan {
        Plan {
            grace,
            lease: None,
            reported: None,
            lost: None,
            max_hold: None,
            warn_before: None,
            warned: false,
            stop: None,
        }
    }

    /// Enforce a lease of this timing, valid until `valid_until`.
    pub fn lease(mut self, timing: Timing, valid_until: Instant) -> Plan {
        self.lease = Some((timing, valid_until));
        self
    }

    /// `--max-hold`: COMMAND, started at `now`, runs for `limit` at most.
    pub fn max_hold(mut self, limit: Option<Duration>, now: Instant) -> Plan {
        self.max_hold = limit.map(|d| (d, now + d));
        self
    }

    /// `--warn-before`: warn this long before a planned SIGTERM.
    pub fn warn_before(mut self, before: Option<Duration>) -> Plan {
        self.warn_before = before;
        self
    }

    /// A refresh was confirmed: the lease holds until `valid_until` (an
    /// earlier end than one known already changes nothing).
    pub fn extended(&mut self, valid_until: Instant) {
        if let Some((_, until)) = &mut self.lease {
            *until = (*until).max(valid_until);
        }
    }

    /// The refresher found the lock lost.
    pub fn reported(&mut self, loss: Loss) {
        self.reported.get_or_insert(loss);
    }

    /// The warning was sent (it is sent once).
    pub fn warned(&mut self) {
        self.warned = true;
    }

    /// SIGKILL was sent.
    pub fn kill_sent(&mut self) {
        if let Some(stop) = &mut self.stop {
            stop.killed = true;
        }
    }

    /// The loss is acted on: no lease deadline or warning from now on.
    pub fn lose(&mut self, loss: Loss) {
        self.lost = Some(loss);
    }

    /// SIGTERM was sent at `now` for `reason`: SIGKILL after the grace,
    /// but never later than the lease's end. True when SIGKILL is due at
    /// once (the lease has run out already: we were frozen).
    pub fn stop(&mut self, reason: Reason, now: Instant) -> bool {
        let by_grace = now + self.grace;
        let kill_at = self.lease_end().map_or(by_grace, |end| end.min(by_grace));
        let killed = kill_at <= now;
        self.stop = Some(Stop {
            reason,
            kill_at,
            killed,
        });
        killed
    }

    /// We were continued at `now` after a stop (job control): nothing
    /// refreshed the lock meanwhile.
    pub fn continued(&mut self, now: Instant) -> Continue {
        let expired = self.term_at().is_some_and(|term| now >= term);
        if !expired {
            return Continue::Resume;
        }
        self.killed_at(now);
        Continue::Kill
    }

    /// The keeper killed the job at the lease's end (we were stopped or
    /// hung past it). False when a loss was acted on already.
    pub fn keeper_fired(&mut self, now: Instant) -> bool {
        if self.lost.is_some() {
            return false;
        }
        self.killed_at(now);
        true
    }

    fn killed_at(&mut self, now: Instant) {
        self.lost = Some(Loss::Suspended);
        self.stop = Some(Stop {
            reason: Reason::Lost(Loss::Suspended),
            kill_at: now,
            killed: true,
        });
    }

    /// The first thing due at `now`, if any. Ask again after doing it:
    /// several can be due at once.
    pub fn due(&self, now: Instant) -> Option<Action> {
        // Not when the SIGTERM is due as well (a late wake-up).
        if self
            .warn_at()
            .is_some_and(|(at, term)| now >= at && now < term)
        {
            return Some(Action::Warn);
        }
        if self
            .stop
            .is_some_and(|stop| !stop.killed && now >= stop.kill_at)
        {
            return Some(Action::Kill);
        }
        if self.lost.is_none() && self.lease.is_some() {
            if let Some(loss) = self.reported {
                return Some(Action::Lose(loss));
            }
            if self.term_at().is_some_and(|term| now >= term) {
                return Some(Action::Lose(Loss::Unconfirmed));
            }
        }
        match (self.max_hold, self.stop) {
            (Some((limit, at)), None) if now >= at => Some(Action::MaxHold(limit)),
            _ => None,
        }
    }

    /// The next deadline, if any: when to wake up and ask [`Plan::due`].
    pub fn next(&self) -> Option<Instant> {
        let kill = self.stop.filter(|s| !s.killed).map(|s| s.kill_at);
        let max_hold = match (self.max_hold, self.stop) {
            (Some((_, at)), None) => Some(at),
            _ => None,
        };
        let warn = self.warn_at().map(|(at, _)| at);
        [kill, self.term_at(), max_hold, warn]
            .into_iter()
            .flatten()
            .min()
    }

    /// When the warning is due, and the SIGTERM it warns of: before the
    /// lease's or `--max-hold`'s, whichever comes first; never once sent,
    /// or once a stop has begun.
    pub fn warn_at(&self) -> Option<(Instant, Instant)> {
        if self.warned || self.stop.is_some() {
            return None;
        }
        let before = self.warn_before?;
        let lease = match (self.lease, self.lost) {
            (Some((timing, until)), None) => warn_before_lease(&timing, until, before),
            _ => None,
        };
        let max_hold = self
            .max_hold
            .and_then(|(limit, at)| warn_before_max_hold(before, limit, at));
        lease.into_iter().chain(max_hold).min()
    }

    /// When COMMAND gets SIGTERM if nothing confirms the lease again;
    /// none once the loss is acted on.
    pub fn term_at(&self) -> Option<Instant> {
        match (self.lease, self.lost) {
            (Some((timing, until)), None) => Some(timing.term_at(until)),
            _ => None,
        }
    }

    /// The end the keeper's watchdog is told: past it, with the job still
    /// running, the keeper kills the whole tree. The lease's end itself
    /// (the keeper acts only when we did not); none once lost.
    pub fn watchdog(&self) -> Option<Instant> {
        match (self.lease, self.lost) {
            (Some((_, until)), None) => Some(until),
            _ => None,
        }
    }

    /// Leftovers being stopped from `now` are waited for until then: the
    /// grace, and as long again as an unkillable process is given.
    pub fn give_up(&self, now: Instant) -> Instant {
        now + self.grace + UNKILLABLE
    }

    /// The lease's end as last confirmed, lost or not.
    pub fn lease_end(&self) -> Option<Instant> {
        self.lease.map(|(_, until)| until)
    }

    /// The loss acted on, if any.
    pub fn lost(&self) -> Option<Loss> {
        self.lost
    }

    /// The stop in progress, if any.
    pub fn stopping(&self) -> Option<Stop> {
        self.stop
    }
}

/// When to warn before the lease's planned SIGTERM, if there is time:
/// `before` the SIGTERM, but never before a refresh is overdue (the
/// refresh due `refresh` after the last confirmed one, given two per-node
/// timeouts to be sent and answered), so that a healthy run is never
/// warned. With the SIGTERM's instant.
pub fn warn_before_lease(
    timing: &Timing,
    valid_until: Instant,
    before: Duration,
) -> Option<(Instant, Instant)> {
    let term_at = timing.term_at(valid_until);
    let refreshed =
        valid_until.checked_sub(timing.ttl.saturating_sub(timing::drift(timing.ttl)))?;
    // The refresh is sent a period after `refreshed`, or sooner (see
    // `refresh_at`).
    let planned = refresh_at(timing, Refresh::Confirmed(valid_until), refreshed);
    let overdue = planned + 2 * timing.node_timeout();
    let at = term_at
        .checked_sub(before)
        .map_or(overdue, |at| at.max(overdue));
    (at < term_at).then_some((at, term_at))
}

/// When to warn before `--max-hold` stops COMMAND at `stop_at` (it ran
/// for `limit` by then), if the warning fits within the run; with
/// `stop_at`.
pub fn warn_before_max_hold(
    before: Duration,
    limit: Duration,
    stop_at: Instant,
) -> Option<(Instant, Instant)> {
    let at = (before < limit).then(|| stop_at.checked_sub(before));
    Some((at.flatten()?, stop_at))
}

/// What the refresher's last attempt did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refresh {
    /// The acquire or a refresh was confirmed: the lock holds until this
    /// instant.
    Confirmed(Instant),
    /// Failed, to be retried (the lease may still be shown valid).
    Failed,
}

/// When the refresher tries next, after `last` at `now`: a period after
/// the confirmed write was *sent*, as the lease counts (not after it was
/// answered, nor after the thread started: with the shortest TTLs either
/// would come after the SIGTERM); soon after a failure (the retries fall
/// within the lease, before its SIGTERM; see `Timing::new`).
///
/// Sooner where the period leaves less than two per-node timeouts before
/// the SIGTERM (TTLs under about a second, whose per-node timeout is the
/// 100 ms floor): a round waits out a slow node's timeout, and a dropped
/// connection's, so a Redlock whose one node trickled or hung lost a
/// 600 ms lease on the two healthy ones (the chaos campaign, seed
/// 20261208 episode 197, F20). Never sooner than a quarter period.
pub fn refresh_at(timing: &Timing, last: Refresh, now: Instant) -> Instant {
    match last {
        Refresh::Confirmed(valid_until) => {
            let sent = sent(timing, valid_until);
            let on_time = sent + timing.refresh;
            let in_time = timing
                .term_at(valid_until)
                .checked_sub(2 * timing.node_timeout())
                .unwrap_or(sent);
            on_time.min(in_time.max(sent + timing.refresh / 4))
        }
        Refresh::Failed => now + timing.retry_every(),
    }
}

/// When the write that keeps the lock until `valid_until` was sent.
fn sent(timing: &Timing, valid_until: Instant) -> Instant {
    let lasts = timing.ttl.saturating_sub(timing::drift(timing.ttl));
    valid_until.checked_sub(lasts).unwrap_or(valid_until)
}

/// `--min-hold`: how much longer to keep the lock after COMMAND ended,
/// `held` after acquiring it; none under 1 ms, and none when `--max-hold`
/// stopped COMMAND (a job stopped for running too long gets no hold on
/// top).
pub fn min_hold_rest(
    min_hold: Option<Duration>,
    held: Duration,
    max_hold_stopped: bool,
) -> Option<Duration> {
    min_hold
        .filter(|_| !max_hold_stopped)
        .and_then(|min| min.checked_sub(held))
        .filter(|rest| *rest >= Duration::from_millis(1))
}

/// `--min-hold`'s re-arm failed at `now`: when to try it again after
/// `pause`, if that is still within the lease (ending at `valid_until`).
pub fn min_hold_retry(now: Instant, pause: Duration, valid_until: Instant) -> Option<Instant> {
    Some(now + pause).filter(|at| *at < valid_until)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    const S: Duration = Duration::from_secs(1);
    const NS: Duration = Duration::from_nanos(1);

    fn timing(ttl: Duration, refresh: Option<Duration>, kill: Option<Duration>) -> Timing {
        Timing::new(ttl, refresh, kill, &crate::config::TIMING_OPTIONS).expect("a valid timing")
    }

    /// The timings the tests run through: the defaults of a few TTLs, and
    /// some given by hand, the tightest that `Timing::new` accepts among
    /// them.
    fn timings() -> Vec<Timing> {
        vec![
            timing(30 * S, None, None),
            timing(3 * S, None, None),
            timing(S, None, None),
            timing(10 * S, Some(2 * S), Some(S)),
            timing(400 * MS, None, Some(133 * MS)),
            timing(S, Some(400 * MS), Some(300 * MS)),
            timing(timing::MAX, None, None),
        ]
    }

    /// A plan for a lease acquired (sent) at `t0`, as the run mode makes it.
    fn leased(t: Timing, t0: Instant) -> Plan {
        Plan::new(t.kill_after).lease(t, timing::valid_until(t0, t.ttl))
    }

    #[test]
    fn sigterm_comes_a_stop_margin_before_the_lease_ends() {
        let t0 = Instant::now();
        for t in timings() {
            let plan = leased(t, t0);
            let valid = t0 + t.ttl - timing::drift(t.ttl);
            // deadline - --kill-after - one per-node timeout - 10 ms of slack
            let term = valid - t.kill_after - t.node_timeout() - 10 * MS;
            assert_eq!(plan.term_at(), Some(term), "{t:?}");
            assert_eq!(plan.next(), Some(term), "{t:?}");
            assert_eq!(plan.due(t0), None, "{t:?}");
            assert_eq!(plan.due(term - NS), None, "{t:?}");
            assert_eq!(plan.due(term), Some(Action::Lose(Loss::Unconfirmed)));
            assert_eq!(plan.due(valid + S), Some(Action::Lose(Loss::Unconfirmed)));
        }
    }

    #[test]
    fn a_confirmed_refresh_moves_every_deadline_and_an_older_one_none() {
        let t0 = Instant::now();
        for t in timings().into_iter().filter(|t| t.ttl < timing::MAX) {
            let mut plan = leased(t, t0);
            let first = plan.term_at().expect("a lease");
            let later = timing::valid_until(t0 + t.refresh, t.ttl);
            plan.extended(later);
            assert_eq!(plan.term_at(), Some(first + t.refresh), "{t:?}");
            assert_eq!(plan.due(first), None, "{t:?}");
            assert_eq!(plan.watchdog(), Some(later), "{t:?}");
            // A confirmation that arrives late, of an earlier refresh.
            plan.extended(timing::valid_until(t0, t.ttl));
            assert_eq!(plan.watchdog(), Some(later), "{t:?}");
        }
    }

    #[test]
    fn sigkill_comes_a_grace_after_sigterm_and_never_after_the_lease() {
        let t = timing(30 * S, None, None);
        let t0 = Instant::now();
        let valid = timing::valid_until(t0, t.ttl);
        let term = t.term_at(valid);
        // (why, plan, SIGTERM sent at, SIGKILL due at, at once)
        let lease = leased(t, t0);
        let long_grace = Plan::new(20 * S).lease(t, valid);
        let cases = [
            (
                "the lease's SIGTERM",
                lease.clone(),
                term,
                term + 5 * S,
                false,
            ),
            (
                "early, for --max-hold",
                lease.clone(),
                t0 + S,
                t0 + 6 * S,
                false,
            ),
            ("a grace past the lease", long_grace, term, valid, false),
            (
                "the lease's last instant",
                lease.clone(),
                valid - NS,
                valid,
                false,
            ),
            (
                "frozen to the lease's end",
                lease.clone(),
                valid,
                valid,
                true,
            ),
            ("frozen past it", lease, valid + 3 * S, valid, true),
            ("no lease", Plan::new(5 * S), t0, t0 + 5 * S, false),
        ];
        for (why, mut plan, sent, kill_at, at_once) in cases {
            assert_eq!(plan.stop(Reason::MaxHold, sent), at_once, "{why}");
            let stop = plan.stopping().expect("a stop");
            assert_eq!((stop.kill_at, stop.killed), (kill_at, at_once), "{why}");
            assert!(
                plan.lease_end().is_none_or(|end| stop.kill_at <= end),
                "{why}"
            );
            if at_once {
                continue;
            }
            assert!(plan.next().is_some_and(|n| n <= kill_at), "{why}");
            assert_ne!(plan.due(kill_at - NS), Some(Action::Kill), "{why}");
            assert_eq!(plan.due(kill_at), Some(Action::Kill), "{why}");
            plan.kill_sent();
            assert_ne!(plan.due(kill_at + S), Some(Action::Kill), "{why}");
        }
    }

    #[test]
    fn a_reported_loss_is_due_at_once_and_ends_the_lease_deadlines() {
        let t = timing(30 * S, None, None);
        let t0 = Instant::now();
        for loss in [Loss::Replaced, Loss::Gone, Loss::Revoked] {
            let mut plan = leased(t, t0).max_hold(Some(60 * S), t0);
            plan.reported(loss);
            assert_eq!(plan.due(t0 + MS), Some(Action::Lose(loss)));
            plan.lose(loss);
            assert!(!plan.stop(Reason::Lost(loss), t0 + MS));
            assert_eq!(plan.lost(), Some(loss));
            assert_eq!((plan.term_at(), plan.watchdog()), (None, None));
            // The stop's SIGKILL, by the grace, is the only deadline left.
            assert_eq!(plan.next(), Some(t0 + MS + 5 * S));
            assert_eq!(plan.due(t0 + 2 * MS), None);
            // A second report (the refresher says it once) changes nothing.
            plan.reported(Loss::Gone);
            assert_eq!(plan.due(t0 + 2 * MS), None);
        }
    }

    #[test]
    fn the_lease_expiring_during_a_max_hold_stop_is_still_a_loss() {
        let t = timing(30 * S, None, Some(15 * S));
        let t0 = Instant::now();
        let mut plan = leased(t, t0).max_hold(Some(10 * S), t0);
        assert_eq!(plan.due(t0 + 10 * S), Some(Action::MaxHold(10 * S)));
        assert!(!plan.stop(Reason::MaxHold, t0 + 10 * S));
        assert_eq!(plan.due(t0 + 10 * S), None);
        let term = plan.term_at().expect("a lease");
        assert_eq!(plan.due(term), Some(Action::Lose(Loss::Unconfirmed)));
        plan.lose(Loss::Unconfirmed);
        // Stopped for --max-hold still: SIGKILL stays a grace after it.
        let stop = plan.stopping().expect("a stop");
        assert_eq!(stop.reason, Reason::MaxHold);
        assert_eq!(stop.kill_at, t0 + 25 * S);
        assert_eq!(
            (plan.due(t0 + 25 * S - NS), plan.next()),
            (None, Some(t0 + 25 * S))
        );
    }

    #[test]
    fn a_healthy_run_is_never_warned() {
        let t0 = Instant::now();
        for t in timings().into_iter().filter(|t| t.ttl < timing::MAX) {
            let nt = t.node_timeout();
            // Each refresh is answered within a per-node timeout, and in
            // time for the SIGTERM: within the room `Timing::new` leaves
            // between a refresh sent on time and the SIGTERM.
            let room = t.ttl - t.refresh - t.stop_margin() - timing::drift(t.ttl);
            for latency in [Duration::ZERO, nt / 2, nt - MS].map(|l| l.min(room - NS)) {
                for before in [MS, t.refresh, t.ttl - MS, timing::MAX] {
                    let mut plan = leased(t, t0).warn_before(Some(before));
                    let mut valid = timing::valid_until(t0, t.ttl);
                    // When the acquire was answered.
                    let mut confirmed = t0 + latency;
                    for _ in 0..20 {
                        let sent = refresh_at(&t, Refresh::Confirmed(valid), confirmed);
                        confirmed = sent + latency;
                        let case = format!("{t:?} {latency:?} {before:?}");
                        assert_eq!(plan.due(confirmed - NS), None, "{case}");
                        assert!(plan.next().is_some_and(|at| at >= confirmed), "{case}");
                        valid = timing::valid_until(sent, t.ttl);
                        plan.extended(valid);
                    }
                }
            }
        }
    }

    #[test]
    fn the_warning_comes_before_the_first_planned_sigterm_and_once() {
        let t = timing(30 * S, None, None);
        let t0 = Instant::now();
        let valid = timing::valid_until(t0, t.ttl);
        let term = t.term_at(valid);
        let overdue = t0 + t.refresh + 2 * t.node_timeout();
        let stop = t0 + 60 * S;
        // (--warn-before, --max-hold, expected (warn at, SIGTERM at))
        let cases = [
            (2 * S, None, Some((term - 2 * S, term))),
            // Not before a refresh is overdue.
            (25 * S, None, Some((overdue, term))),
            (5 * S, Some(60 * S), Some((term - 5 * S, term))),
            (5 * S, Some(20 * S), Some((t0 + 15 * S, t0 + 20 * S))),
        ];
        for (before, max_hold, want) in cases {
            let mut plan = leased(t, t0)
                .max_hold(max_hold, t0)
                .warn_before(Some(before));
            assert_eq!(plan.warn_at(), want, "{before:?} {max_hold:?}");
            let (at, _) = want.expect("a warning");
            assert_eq!(plan.next(), Some(at));
            assert_eq!(plan.due(at - NS), None);
            assert_eq!(plan.due(at), Some(Action::Warn));
            plan.warned();
            assert_eq!((plan.warn_at(), plan.due(at)), (None, None));
        }
        let before_max_hold = |before, limit| warn_before_max_hold(before, limit, stop);
        assert_eq!(before_max_hold(5 * S, 60 * S), Some((stop - 5 * S, stop)));
        assert_eq!(before_max_hold(60 * S, 60 * S), None);
    }

    #[test]
    fn no_warning_when_there_is_no_time_for_one() {
        let t0 = Instant::now();
        // A refresh is overdue (400 ms + 2 x 100 ms) only after the SIGTERM
        // (988 ms - 410 ms): no time to warn.
        let tight = timing(S, Some(400 * MS), Some(300 * MS));
        let t = timing(30 * S, None, None);
        let term = t.term_at(timing::valid_until(t0, t.ttl));
        let warned = |p: Plan| p.warn_before(Some(2 * S));
        let mut stopping = warned(leased(t, t0));
        stopping.stop(Reason::Local, t0 + S);
        let mut lost = warned(leased(t, t0));
        lost.lose(Loss::Gone);
        let mut sent = warned(leased(t, t0));
        sent.warned();
        // (why, plan, now)
        let cases = [
            (
                "refreshes too slow",
                warned(leased(tight, t0)),
                t0 + 600 * MS,
            ),
            (
                "a late wake-up, at the SIGTERM",
                warned(leased(t, t0)),
                term,
            ),
            ("a late wake-up, past it", warned(leased(t, t0)), term + S),
            ("a stop in progress", stopping, term - S),
            ("the lock lost", lost, term - S),
            ("sent already", sent, term - S),
            (
                "--warn-before >= --max-hold",
                warned(Plan::new(S).max_hold(Some(2 * S), t0)),
                t0 + S,
            ),
        ];
        for (why, plan, now) in cases {
            assert_ne!(plan.due(now), Some(Action::Warn), "{why}");
        }
        assert_eq!(warned(leased(tight, t0)).warn_at(), None);
    }

    #[test]
    fn a_continue_after_a_stop_that_outlasted_the_lease_kills_first() {
        let t = timing(30 * S, None, None);
        let t0 = Instant::now();
        let valid = timing::valid_until(t0, t.ttl);
        let term = t.term_at(valid);
        let mut lost = leased(t, t0);
        lost.lose(Loss::Gone);
        lost.stop(Reason::Lost(Loss::Gone), t0 + S);
        let mut extended = leased(t, t0);
        extended.extended(timing::valid_until(t0 + 20 * S, t.ttl));
        // (why, plan, continued at, expected)
        let cases = [
            (
                "within the lease",
                leased(t, t0),
                term - NS,
                Continue::Resume,
            ),
            ("at its SIGTERM", leased(t, t0), term, Continue::Kill),
            (
                "past its end",
                leased(t, t0),
                valid + 60 * S,
                Continue::Kill,
            ),
            (
                "refreshed before the stop",
                extended,
                term + S,
                Continue::Resume,
            ),
            ("lost and being stopped", lost, valid + S, Continue::Resume),
            ("no lease", Plan::new(5 * S), t0 + 60 * S, Continue::Resume),
        ];
        for (why, mut plan, now, want) in cases {
            assert_eq!(plan.continued(now), want, "{why}");
            if want == Continue::Kill {
                assert_eq!(plan.lost(), Some(Loss::Suspended), "{why}");
                let stop = plan.stopping().expect("a stop");
                assert!(stop.killed, "{why}");
                assert_eq!(stop.reason, Reason::Lost(Loss::Suspended));
                assert_eq!(
                    (plan.next(), plan.due(now), plan.watchdog()),
                    (None, None, None)
                );
            }
        }
    }

    #[test]
    fn the_keeper_watchdog_is_the_lease_end_and_its_kill_a_loss() {
        let t0 = Instant::now();
        for t in timings() {
            let mut plan = leased(t, t0);
            let valid = timing::valid_until(t0, t.ttl);
            // The keeper acts only if we did not: at the lease's end, after
            // our SIGTERM and SIGKILL, never later.
            assert_eq!(plan.watchdog(), Some(valid), "{t:?}");
            assert!(plan.term_at().is_some_and(|term| term < valid), "{t:?}");
            assert!(plan.keeper_fired(valid), "{t:?}");
            assert_eq!(plan.lost(), Some(Loss::Suspended));
            assert!(plan.stopping().is_some_and(|s| s.killed));
            assert_eq!(
                (plan.watchdog(), plan.next(), plan.due(valid)),
                (None, None, None)
            );
            // Once only; and not after a loss acted on already.
            assert!(!plan.keeper_fired(valid));
            let mut lost = leased(t, t0);
            lost.lose(Loss::Replaced);
            assert!(!lost.keeper_fired(valid));
            assert_eq!(lost.lost(), Some(Loss::Replaced));
        }
        assert_eq!(Plan::new(S).watchdog(), None);
    }

    #[test]
    fn refresh_retries_fall_within_the_lease() {
        let t0 = Instant::now();
        // (timing, retries at least) after the first refresh failed
        let cases = [
            (timing(30 * S, None, None), 50),
            (timing(3 * S, None, None), 3),
            (timing(S, None, None), 5),
            (timing(400 * MS, None, Some(133 * MS)), 1),
        ];
        for (t, least) in cases {
            let valid = timing::valid_until(t0, t.ttl);
            let term = t.term_at(valid);
            // However late the answer came or the thread started; sooner
            // than a period only for the shortest TTLs (see `refresh_at`).
            let first = refresh_at(&t, Refresh::Confirmed(valid), t0 + 50 * MS);
            let in_time = (term - 2 * t.node_timeout()).max(t0 + t.refresh / 4);
            assert_eq!(first, (t0 + t.refresh).min(in_time), "{t:?}");
            assert!(first < term, "{t:?}");
            let mut retries = 0;
            let mut at = refresh_at(&t, Refresh::Failed, first);
            while at < term {
                retries += 1;
                at = refresh_at(&t, Refresh::Failed, at);
            }
            assert!(retries >= least, "{t:?}: {retries} retries");
            let again = timing::valid_until(at, t.ttl);
            assert_eq!(
                refresh_at(&t, Refresh::Confirmed(again), at + MS),
                at + (first - t0)
            );
        }
    }

    #[test]
    fn a_refresh_whose_round_takes_two_node_timeouts_is_in_time() {
        let t0 = Instant::now();
        // (TTL, the period it is refreshed at: `None`, a third of it)
        for (ttl, period) in [
            (30 * S, None),
            (3 * S, None),
            (S, None),
            // 800 - 10 (drift) - 267 (kill) - 110 (margin) - 200.
            (800 * MS, Some(213_333_334 * NS)),
            // 600 - 8 - 200 - 110 - 200.
            (600 * MS, Some(82 * MS)),
        ] {
            let t = timing(ttl, None, None);
            let valid = timing::valid_until(t0, t.ttl);
            let sent = refresh_at(&t, Refresh::Confirmed(valid), t0);
            assert_eq!(sent - t0, period.unwrap_or(t.refresh), "{t:?}");
            // A slow node's connection made again, then its answer: both
            // timeouts, and still confirmed before the SIGTERM.
            assert!(sent + 2 * t.node_timeout() <= t.term_at(valid), "{t:?}");
        }
        // Where even that cannot fit, a quarter period.
        let t = timing(400 * MS, None, Some(133 * MS));
        let valid = timing::valid_until(t0, t.ttl);
        assert_eq!(
            refresh_at(&t, Refresh::Confirmed(valid), t0),
            t0 + t.refresh / 4
        );
    }

    #[test]
    fn min_hold_keeps_the_rest_unless_max_hold_stopped_the_job() {
        // (--min-hold, held for, stopped by --max-hold, rest)
        let cases = [
            (Some(10 * S), 3 * S, false, Some(7 * S)),
            (Some(10 * S), 3 * S, true, None),
            (Some(10 * S), 10 * S, false, None),
            (Some(10 * S), 20 * S, false, None),
            (Some(10 * S), 10 * S - MS / 2, false, None),
            (Some(10 * S), 10 * S - MS, false, Some(MS)),
            (None, S, false, None),
        ];
        for (min, held, stopped, want) in cases {
            assert_eq!(min_hold_rest(min, held, stopped), want, "{min:?} {held:?}");
        }
        let now = Instant::now();
        assert_eq!(min_hold_retry(now, 100 * MS, now + S), Some(now + 100 * MS));
        assert_eq!(min_hold_retry(now, S, now + S), None);
        assert_eq!(min_hold_retry(now, Duration::ZERO, now), None);
    }

    #[test]
    fn leftovers_are_given_up_on_after_the_grace_and_two_seconds() {
        let now = Instant::now();
        assert_eq!(Plan::new(5 * S).give_up(now), now + 7 * S);
        assert_eq!(Plan::new(Duration::ZERO).give_up(now), now + UNKILLABLE);
    }

    #[test]
    fn the_next_deadline_is_the_earliest_one_pending() {
        let t = timing(30 * S, None, None);
        let t0 = Instant::now();
        let term = t.term_at(timing::valid_until(t0, t.ttl));
        let mut max_hold_stop = Plan::new(5 * S).max_hold(Some(S), t0);
        max_hold_stop.stop(Reason::MaxHold, t0 + S);
        let mut killed = max_hold_stop.clone();
        killed.kill_sent();
        // (why, plan, next)
        let cases = [
            ("nothing to enforce", Plan::new(5 * S), None),
            ("the lease", leased(t, t0), Some(term)),
            (
                "--max-hold first",
                leased(t, t0).max_hold(Some(S), t0),
                Some(t0 + S),
            ),
            (
                "the lease first",
                leased(t, t0).max_hold(Some(60 * S), t0),
                Some(term),
            ),
            (
                "the warning first",
                leased(t, t0).warn_before(Some(2 * S)),
                Some(term - 2 * S),
            ),
            ("a stop's SIGKILL", max_hold_stop, Some(t0 + 6 * S)),
            ("killed", killed, None),
        ];
        for (why, plan, want) in cases {
            assert_eq!(plan.next(), want, "{why}");
        }
    }

    #[test]
    fn max_hold_is_due_once_at_its_limit() {
        let t0 = Instant::now();
        let mut plan = Plan::new(5 * S).max_hold(Some(10 * S), t0);
        assert_eq!(plan.due(t0 + 10 * S - NS), None);
        assert_eq!(plan.due(t0 + 10 * S), Some(Action::MaxHold(10 * S)));
        assert!(!plan.stop(Reason::MaxHold, t0 + 10 * S));
        assert_eq!(plan.due(t0 + 11 * S), None);
        assert_eq!(plan.due(t0 + 15 * S), Some(Action::Kill));
        assert_eq!(Plan::new(S).max_hold(None, t0).next(), None);
    }

    #[test]
    fn reasons_are_named_for_the_stopping_event() {
        let cases = [
            (Reason::Lost(Loss::Unconfirmed), "unconfirmed"),
            (Reason::Lost(Loss::Suspended), "suspended"),
            (Reason::MaxHold, "max_hold"),
            (Reason::Leftovers, "leftovers"),
            (Reason::Local, "local_failure"),
        ];
        for (reason, name) in cases {
            assert_eq!(reason.name(), name);
        }
    }
}
