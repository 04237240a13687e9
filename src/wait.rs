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
//!
//! Waiting in line costs Redis almost nothing: a subscribed waiter that
//! Redis sees subscribed (`PUBSUB NUMSUB` of its wake channel) counts as
//! live while its connection lives, keeps its liveness key with one
//! PEXPIRE every 20-25 s, and tries again only when something may have
//! been missed: the first in line when the holder's lease runs out (it
//! may have died without releasing), the second in line a second after a
//! release that woke the first, or after the first took a lock left
//! without a release (`next`: in case the first does not come, and to
//! learn the new holder's lease),
//! any waiter when the live waiter before it would lapse, when its place
//! or its subscription was lost, and, as a last resort, at a slow pace
//! that grows with the line (about one try a second for the whole line).
//! Elsewhere (several nodes, a semaphore, no subscription or none that
//! Redis can see) a waiter retries every 0.5-1 s as before.

use std::time::{Duration, Instant};

use crate::exit::{Exit, Failure};
use crate::holder::{describe_holder, label_field};
use crate::jitter::jitter;
use crate::lock::{
    listen, Attempt, BusyInfo, Extend, Heard, Holder, Lease, LineTry, Place, Quorum, Wakeups,
};
use crate::log::{field, Ev, Log};
use crate::signals::Signals as SignalRelay;

/// How waiting ended, when it did not fail.
pub enum Waited {
    /// With the token of the lock we hold, and the subscription if we
    /// waited: closing it is left until COMMAND has started (see `run.rs`).
    Acquired(Lease, String, Option<Wakeups>),
    /// Still busy when `--wait` ran out (boxed: large, and rare).
    Busy(Box<BusyInfo>),
    /// `--queue newest-wins`: a newer waiter (host, pid) took our place.
    Replaced(String, String),
    /// A signal arrived first; nothing is left in Redis.
    Signaled(i32),
    /// No node could be reached at all, and none had answered anything in
    /// this run: the only case `--on-unavailable run` may run COMMAND.
    Unreachable(anyhow::Error),
}

/// Retry anyway this often while subscribed but not in line (several
/// Redlock nodes, a semaphore) or not seen subscribed by Redis, in case a
/// wake-up is missed (a release on another Redlock node, a lock deleted
/// by hand). Jittered so that many waiters do not poll in lock-step.
const FALLBACK_MIN: Duration = Duration::from_millis(500);
const FALLBACK_MAX: Duration = Duration::from_millis(1000);

/// How long the liveness key of a waiter in line that Redis sees
/// subscribed lasts untouched: a stopped waiter (or one on a host that
/// died with its connection open) leaves the line within this. Six of its
/// refresh periods (a minute with the defaults: what a stopped holder
/// would cost, twice), within these bounds.
fn liveness(refresh: Duration) -> Duration {
    (refresh * 6).clamp(LIVENESS_MIN, LIVENESS_MAX)
}
const LIVENESS_MIN: Duration = Duration::from_secs(3);
const LIVENESS_MAX: Duration = Duration::from_secs(60);

/// How often such a waiter pushes its liveness key back (one PEXPIRE):
/// at least twice within its liveness (20-25 s of a minute).
fn stay_within(liveness: Duration) -> (Duration, Duration) {
    (liveness / 3, liveness * 5 / 12)
}

/// The last-resort retry of such a waiter, in case a wake-up was missed
/// (the first in line and the holder died together): every waiter waits
/// a second per member of the line (so the whole line tries about once a
/// second), within these bounds, jittered up to twice that.
const PACE_PER_MEMBER: Duration = Duration::from_secs(1);
const PACE_MIN: Duration = Duration::from_secs(5);
const PACE_MAX: Duration = Duration::from_secs(900);

/// Told it is next in line, a waiter looks again this long after, unless
/// the release that wakes it comes first: in case the first in line does
/// not come (stopped, or killed just then), and to learn the new
/// holder's lease.
const NEXT_CHECK: Duration = Duration::from_secs(1);

/// After a split (several nodes, we held a minority and gave it back
/// without waking anyone), try again after this long, jittered so that the
/// rivals of the split do not race again in step.
const SPLIT_MIN: Duration = Duration::from_millis(1);
const SPLIT_MAX: Duration = Duration::from_millis(4);

/// After this many splits in a row, the next gives back with a wake-up and
/// we wait as after any busy answer.
const SPLITS_IN_A_ROW: u32 = 10;

/// A lost subscription is made again at most this often.
const RESUBSCRIBE: Duration = Duration::from_secs(1);

/// Retry delays when no subscription could be made (e.g. an ACL without
/// Pub/Sub): polling is then the only way to notice a release.
const POLL_MIN: Duration = Duration::from_millis(50);
const POLL_MAX: Duration = Duration::from_millis(250);

/// How long tries granted beside the holder we saw look again before
/// standing in for it (see `Waiter::look_again`), and their first pause.
const LOOK_AGAIN: Duration = Duration::from_secs(1);
const LOOK_AGAIN_FIRST: Duration = Duration::from_millis(5);

/// Retry delays after Redis, having answered once, stopped answering.
const RECONNECT_MIN: Duration = Duration::from_millis(100);
const RECONNECT_MAX: Duration = Duration::from_millis(500);

/// How long a run waits for a busy lock, and how often it says so.
#[derive(Debug, Clone, Copy)]
pub struct Patience {
    /// `None`: forever.
    pub wait: Option<Duration>,
    /// Say "still waiting" this often (zero: only when it starts).
    pub progress: Duration,
}

impl Patience {
    /// The run's `--wait` and `--progress`.
    pub fn of(cfg: &crate::config::RunConfig) -> Patience {
        Patience {
            wait: cfg.wait,
            progress: cfg.progress,
        }
    }
}

/// Try to take the lock with a fresh token, waiting up to `patience.wait`
/// (`None`: forever), and saying so (see [`Waiter::tell`]). Acquired:
/// with the token of the lock we hold, which is the waiter's to choose:
/// with several nodes (Redlock), an attempt that failed (a timeout, or a
/// minority given back) is followed by one with a fresh token, so that a
/// command of the earlier attempt that reaches a node late (a lossy link
/// delivers what was queued on a dropped connection) can never touch the
/// later attempt's lock. `on_wait` is called once, when the run first
/// settles down to wait (the lock was busy and `--wait` allows it).
pub fn acquire(
    quorum: &mut Quorum,
    holder: &Holder,
    patience: Patience,
    key: &str,
    signals: &SignalRelay,
    log: &Log,
    on_wait: &mut dyn FnMut(),
) -> Result<Waited, Failure> {
    let mut waiter = Waiter {
        token: uuid::Uuid::new_v4().to_string(),
        holder,
        started: Instant::now(),
        give_up: patience.wait.map(|w| Instant::now() + w),
        every: patience.progress,
        told: None,
        tell_at: None,
        key,
        signals,
        log,
        wakeups: None,
        first_busy: true,
        joined: false,
        warned_unreachable: false,
        retried_unreached: false,
        holder_until: None,
        seen_holder: None,
        looking_since: None,
        reset_seen: None,
        seen_by_reset: None,
        longest_pttl: Duration::ZERO,
        was_subscribed: false,
        resubscribe_at: None,
        warned_unseen: false,
        resubscribed_unseen: false,
        splits: 0,
        owes: false,
        on_wait: Some(on_wait),
    };
    let waited = waiter.wait_in_line(quorum);
    let token = &waiter.token;
    let give_back_owed = |quorum: &mut Quorum| {
        if waiter.owes {
            quorum.give_back(token);
        }
    };
    match waited {
        Ok(Waited::Acquired(lease, token, _)) => {
            Ok(Waited::Acquired(lease, token, waiter.wakeups.take()))
        }
        // Out of the line already: the newer waiter took us out.
        Ok(Waited::Busy(info)) if info.replaced_by.is_some() => {
            give_back_owed(quorum);
            let (host, pid) = info.replaced_by.unwrap_or_default();
            Ok(Waited::Replaced(host, pid))
        }
        other => {
            // Let the next in line be woken instead of us.
            quorum.leave(token);
            give_back_owed(quorum);
            other
        }
    }
}

/// One waiter's state while it waits.
struct Waiter<'a> {
    token: String,
    holder: &'a Holder,
    started: Instant,
    give_up: Option<Instant>,
    /// `--progress`: say "still waiting" this often (zero: never).
    every: Duration,
    /// The last busy answer, once "waiting" was said.
    told: Option<BusyInfo>,
    /// When to say "still waiting" next.
    tell_at: Option<Instant>,
    key: &'a str,
    signals: &'a SignalRelay,
    log: &'a Log,
    wakeups: Option<Wakeups>,
    first_busy: bool,
    /// A try in line was answered: we joined the line (see `LineTry`).
    joined: bool,
    /// "Redis stopped answering" was said once already.
    warned_unreachable: bool,
    /// The first attempt failed unanswered and was made again.
    retried_unreached: bool,
    /// Until when the last holder we saw could still hold the lock.
    holder_until: Option<Instant>,
    /// Which holder we saw last (see `BusyInfo::holder_id`).
    seen_holder: Option<std::num::NonZeroU64>,
    /// Since when our tries, granted beside the holder we saw, look
    /// again before standing in for it (see `look_again`).
    looking_since: Option<Instant>,
    /// When a try of ours that did not get the lock last started a fence
    /// counter anew: a later try that does finds it counting (see
    /// `lost_lease`). Data lost then can have left a holder its lease
    /// from then on, not from when we get the lock.
    reset_seen: Option<Instant>,
    /// Until when the holders seen by then (in that round too) could
    /// hold the lock: one seen only later took it on data not lost.
    seen_by_reset: Option<Instant>,
    /// The longest lease left we saw a holder have: about its TTL, which
    /// each of its refreshes renews (see [`lost_holder_until`]; a
    /// stand-in lasts at least our own TTL too).
    longest_pttl: Duration,
    /// We had a subscription once: make it again if it is lost.
    was_subscribed: bool,
    /// Not before this.
    resubscribe_at: Option<Instant>,
    /// "Redis cannot see our subscription" was said once already.
    warned_unseen: bool,
    /// A subscription Redis did not see was made again once already.
    resubscribed_unseen: bool,
    /// Splits in a row (see SPLITS_IN_A_ROW).
    splits: u32,
    /// A failed attempt's give-back is held over (see `lock::Tried`):
    /// given back when the wait ends without the lock.
    owes: bool,
    /// Called before the first sleep (see [`acquire`]).
    on_wait: Option<&'a mut dyn FnMut()>,
}

/// What to do after an attempt that did not find the lock busy.
enum Next {
    Done(Box<Waited>),
    /// Try again after a short pause.
    Retry,
}

impl Next {
    fn done(waited: Waited) -> Next {
        Next::Done(Box::new(waited))
    }
}

impl Waiter<'_> {
    /// Our liveness key's life in line (see [`liveness`]).
    fn liveness(&self) -> Duration {
        liveness(Duration::from_millis(self.holder.refresh_ms))
    }

    fn wait_in_line(&mut self, quorum: &mut Quorum) -> Result<Waited, Failure> {
        loop {
            let attempt = self.attempt(quorum);
            let lost = self.lost_lease(&attempt, quorum);
            if let Some(pause) = self.look_again(lost.as_ref()) {
                if let Some(sig) = self.signals.sleep(pause) {
                    return Ok(Waited::Signaled(sig));
                }
                continue;
            }
            if let Some(lost) = lost {
                match self.wait_out_lost_holder(quorum, lost) {
                    LostHolder::Over => continue,
                    LostHolder::Signaled(sig) => return Ok(Waited::Signaled(sig)),
                    LostHolder::TimedOut(info) => return Ok(Waited::Busy(info)),
                }
            }
            let info = match attempt {
                Attempt::Busy(info) if info.split => match self.pause(quorum, SPLIT_MIN, SPLIT_MAX)
                {
                    Some(sig) => return Ok(Waited::Signaled(sig)),
                    None => continue,
                },
                Attempt::Busy(info) => {
                    // A minority may have granted it and been given back.
                    self.renew_token(quorum);
                    info
                }
                other => match self.settle(other, quorum)? {
                    Next::Done(waited) => return Ok(*waited),
                    Next::Retry => match self.pause(quorum, RECONNECT_MIN, RECONNECT_MAX) {
                        Some(sig) => return Ok(Waited::Signaled(sig)),
                        None => continue,
                    },
                },
            };
            let now = Instant::now();
            self.saw_busy(&info, now);
            if self.timed_out() || info.replaced_by.is_some() || info.line_full.is_some() {
                return Ok(Waited::Busy(info));
            }
            if self.first_busy && self.start_waiting(quorum) {
                continue;
            }
            self.tell(&info);
            if self.resubscribe(quorum, &info) {
                continue;
            }
            // Seen subscribed by Redis, in line: the cheap cadence.
            let place = info
                .place
                .filter(|p| self.wakeups.is_some() && p.seen == Some(true));
            let delay = self.delay(&info, place);
            let until = self.give_up.map_or(now + delay, |end| end.min(now + delay));
            let (min, max) = stay_within(self.liveness());
            let stay = place.map(|_| now + jitter(min, max));
            // Every waiter tries as soon as it hears of a release: a random
            // stagger, even with waiters standing down once they heard the lock
            // was taken, did not shorten a 200-waiter queue and slowed the
            // hand-over between a few (see scripts/bench.sh).
            if let Some(sig) = self.sleep_in_line(quorum, until, stay) {
                return Ok(Waited::Signaled(sig));
            }
        }
    }

    /// A fresh token (see [`Waiter::renew_token`]), then a pause of
    /// `low`..`high`, jittered; `Some` when a signal ended it.
    fn pause(&mut self, quorum: &Quorum, low: Duration, high: Duration) -> Option<i32> {
        self.renew_token(quorum);
        self.signals.sleep(jitter(low, high))
    }

    /// One try. The first does not queue: the uncontended path stays one
    /// EVAL. In line and subscribed, our place lasts LIVENESS untouched.
    fn attempt(&mut self, quorum: &mut Quorum) -> Attempt {
        let liveness = self.wakeups.as_ref().map(|_| self.liveness());
        let waiting = match (self.first_busy, self.joined) {
            (true, _) => LineTry::First,
            (false, false) => LineTry::Joining,
            (false, true) => LineTry::InLine,
        };
        // A split's give-back wakes no one only if we try again soon
        // (time is left, and this is not one split too many in a row).
        let time_left = self
            .give_up
            .is_none_or(|end| Instant::now() + SPLIT_MAX < end);
        let quiet_splits = time_left && self.splits < SPLITS_IN_A_ROW;
        let at = self.wakeups.as_ref().and_then(Wakeups::at);
        let line = (waiting, liveness, at);
        // A shared run that saw a holder takes a counter started anew as
        // an exclusive stand-in (see `lost_lease`).
        let saw = self.holder_until.is_some();
        let tried = quorum.try_acquire(&self.token, self.holder, line, quiet_splits, saw);
        let attempt = tried.attempt;
        // Ours now: nothing held over is owed.
        self.owes = !matches!(attempt, Attempt::Acquired(_)) && (self.owes || tried.owes);
        let answered = matches!(attempt, Attempt::Busy(_) | Attempt::Acquired(_));
        self.joined |= waiting != LineTry::First && answered;
        self.splits = match &attempt {
            Attempt::Busy(info) if info.split => self.splits + 1,
            _ => 0,
        };
        if let Attempt::Busy(info) = &attempt {
            if info.reset {
                let now = Instant::now();
                self.reset_seen = Some(now);
                self.seen_by_reset = self.holder_until.max(info.pttl.map(|left| now + left));
            }
        }
        // Granted by a majority while another node still named a holder:
        // one we saw, if the data was lost under it (`lost_lease`).
        if let Attempt::Acquired(Lease {
            beside: Some(left), ..
        }) = &attempt
        {
            let left = *left;
            let until = Instant::now() + left;
            self.saw_holder(
                self.holder_until.map_or(until, |seen| seen.max(until)),
                left,
            );
        }
        attempt
    }

    /// What a busy answer at `now` showed of its holder.
    fn saw_busy(&mut self, info: &BusyInfo, now: Instant) {
        match info.pttl {
            Some(left) => {
                self.seen_holder = info.held_by.or(self.seen_holder);
                self.saw_holder(now + left, left)
            }
            // A holder whose lease is not shown (an unknown one, on a
            // Cluster node mid-migration: the chaos campaign, seed
            // 20261207 episode 10; or a free lock with a waiter before us)
            // of a lock this tool has granted is seen too: should the data
            // be lost under it, the stand-in lasts a lease, as for one we
            // saw (`lost_lease`).
            None if info.counted => {
                let until = self.holder_until.map_or(now, |u| u.max(now));
                self.saw_holder(until, Duration::ZERO);
            }
            // Set by hand: its end is no sign of lost data.
            None => {}
        }
    }

    /// A holder had the lock until `until` at least, with `left` to go.
    fn saw_holder(&mut self, until: Instant, left: Duration) {
        self.holder_until = Some(until);
        self.longest_pttl = self.longest_pttl.max(left);
    }

    /// The first busy answer: subscribe. True: look again before
    /// blocking (that look also puts us in line, so "waiting" can say
    /// where we stand).
    fn start_waiting(&mut self, quorum: &Quorum) -> bool {
        self.first_busy = false;
        // A release between the busy answer and the subscription
        // was not heard: look again before blocking.
        self.subscribe(quorum)
    }

    /// Say that we wait, once, with who holds the lock, for how long and
    /// where we stand in line; then "still waiting" every `--progress`.
    fn tell(&mut self, info: &BusyInfo) {
        let first = self.told.is_none();
        self.told = Some(info.clone());
        if !first {
            return self.tell_if_due();
        }
        self.tell_at = (!self.every.is_zero()).then(|| Instant::now() + self.every);
        let (key, holder) = (self.key, describe_holder(info));
        let place = match info.place {
            Some(Place {
                first: true,
                members: 0..=1,
                ..
            }) => " (first in line)".to_string(),
            Some(Place {
                first: true,
                members,
                ..
            }) => format!(" (first of {members} in line)"),
            Some(Place { members, .. }) => format!(" ({members} in line, this run included)"),
            None => String::new(),
        };
        self.log.emit(
            Ev::Waiting,
            format!("lock '{key}' {holder}; waiting{place}"),
            &[
                field("holder", holder.clone()),
                label_field(info),
                crate::holder::hold_field(info),
                in_line(info),
            ],
        );
    }

    /// "Still waiting", if it is time: who holds the lock (as the last
    /// try, made for this, found it), and how long we have waited.
    fn tell_if_due(&mut self) {
        let now = Instant::now();
        let (Some(at), Some(info)) = (self.tell_at, &self.told) else {
            return;
        };
        if now < at {
            return;
        }
        self.tell_at = Some(now + self.every);
        let holder = describe_holder(info);
        let waited = now.saturating_duration_since(self.started);
        let line = match info.place {
            Some(place) => format!(", {} in line", place.members),
            None => String::new(),
        };
        self.log.emit(
            Ev::StillWaiting,
            format!(
                "lock '{}' {holder}; still waiting ({} so far{line})",
                self.key,
                crate::log::short(waited)
            ),
            &[
                crate::log::ms("wait_ms", waited),
                field("holder", holder.clone()),
                label_field(info),
                crate::holder::hold_field(info),
                in_line(info),
            ],
        );
    }

    /// How long to sleep before the next try, at most.
    fn delay(&self, info: &BusyInfo, place: Option<Place>) -> Duration {
        let mut delay = match (place, &self.wakeups) {
            (Some(place), _) => pace(place.members),
            (None, Some(_)) => jitter(FALLBACK_MIN, FALLBACK_MAX),
            (None, None) => jitter(POLL_MIN, POLL_MAX),
        };
        let first = place.is_none_or(|p| p.first);
        match info.pttl.filter(|_| first) {
            // Wake up when the holder's lease runs out (it may have died).
            Some(left) => delay = delay.min(left + Duration::from_millis(1)),
            // First in line behind a lock without an expiry (not ours:
            // set by hand): nothing but a poll would see it go.
            None if first && place.is_some() => {
                delay = delay.min(jitter(FALLBACK_MIN, FALLBACK_MAX));
            }
            None => {}
        }
        if let Some(left) = place.and_then(|p| p.ahead_left.filter(|_| !p.first)) {
            // The live waiter before us may be gone by then (stopped).
            delay = delay.min(left + Duration::from_millis(1));
        }
        delay
    }

    /// Sleep until `until`, a release or a signal (Some), keeping our place
    /// in line at `stay`.
    fn sleep_in_line(
        &mut self,
        quorum: &mut Quorum,
        mut until: Instant,
        mut stay: Option<Instant>,
    ) -> Option<i32> {
        if let Some(on_wait) = self.on_wait.take() {
            on_wait();
        }
        loop {
            let wake = [stay, self.tell_at]
                .into_iter()
                .flatten()
                .fold(until, Instant::min);
            match self.block(wake) {
                Woke::Signaled(sig) => return Some(sig),
                Woke::Released => break,
                Woke::Next => until = until.min(Instant::now() + NEXT_CHECK),
                Woke::Timer => {
                    // Time to say "still waiting": look first, so that it
                    // says who holds the lock now and how many wait.
                    let now = Instant::now();
                    if now >= until || self.tell_at.is_some_and(|at| now >= at) {
                        break;
                    }
                    if stay.is_none_or(|at| now < at) {
                        continue;
                    }
                    // Time to keep our place: one PEXPIRE. A place that
                    // is gone (or an error) takes a full try.
                    let (min, max) = stay_within(self.liveness());
                    stay = Some(now + jitter(min, max));
                    if !matches!(quorum.stay_in_line(&self.token, self.liveness()), Ok(true)) {
                        break;
                    }
                }
            }
        }
        None
    }

    /// A fresh token for the next attempt (see [`acquire`]): an attempt
    /// that failed was given back, and that give-back may reach a node
    /// late. Only a waiter in the line of a plain lock on one node keeps
    /// its token: it is its place in the line, and renewing it after every
    /// network error let faults starve a waiter past `--wait`. Its
    /// give-backs are held over until the wait ends instead (see
    /// `Quorum::give_back`). Before the first busy answer it has no place
    /// yet: the retry of an unanswered first attempt gets a fresh token.
    fn renew_token(&mut self, quorum: &Quorum) {
        if !quorum.queues_waiters() || self.first_busy {
            self.token = uuid::Uuid::new_v4().to_string();
        }
    }

    /// Make a lost subscription again (a reconnect), or one that Redis
    /// does not see (a failover moved the lock elsewhere); whether it is
    /// new, so that the caller looks again (a release may have been
    /// missed). Says once, with `-v`, when Redis cannot tell.
    fn resubscribe(&mut self, quorum: &Quorum, info: &BusyInfo) -> bool {
        let seen = info.place.map(|p| p.seen);
        if seen == Some(None) && self.wakeups.is_some() && !self.warned_unseen {
            self.warned_unseen = true;
            self.log.info(format!(
                "lock '{}': Redis cannot tell whether this waiter is subscribed (PUBSUB NUMSUB \
                 refused: grant +pubsub|numsub); polling instead, every second",
                self.key
            ));
        }
        // Once: behind a proxy that routes Pub/Sub elsewhere it would not
        // help, and the subscription may still hear releases.
        if seen == Some(Some(false)) && self.wakeups.is_some() && !self.resubscribed_unseen {
            self.resubscribed_unseen = true;
            self.wakeups = None;
        }
        let now = Instant::now();
        let due = self.resubscribe_at.is_none_or(|at| now >= at);
        if self.wakeups.is_some() || !self.was_subscribed || !due {
            return false;
        }
        self.resubscribe_at = Some(now + RESUBSCRIBE);
        match quorum.subscribe(&self.token) {
            Ok(subscribed) => {
                self.wakeups = Some(subscribed);
                true
            }
            Err(_) => false,
        }
    }

    /// We got the lock, but its fence counter was started anew while a
    /// holder we saw may still hold it: Redis lost its data (a restart
    /// without persistence, FLUSHALL) under that holder, which may still be
    /// running until its next refresh tells it. The holder seen in an
    /// earlier round, or in this one (a node that kept its data still
    /// named it: a newcomer, or a holder that took the lock between our
    /// rounds, as in the chaos campaign, seed 20261206 episode 788); the
    /// counter started anew by this try or by a failed one of ours (two
    /// waiters split the nodes that lost their data, then one took both).
    ///
    /// `Some`: wait until its `until`. A holder that lost its lock cannot
    /// renew it after the loss, so its lease ends a whole lease after the
    /// counter was last seen started anew at the latest, not after our
    /// acquire: the waiters of a key's first Redlock race (which start
    /// counters on the nodes they take) do not each wait a lease in turn
    /// (CI, redlock::mutual_exclusion_across_five_nodes: 8 runs, more
    /// than 120 s).
    fn lost_lease(&self, attempt: &Attempt, quorum: &Quorum) -> Option<LostLease> {
        let Attempt::Acquired(lease) = attempt else {
            return None;
        };
        let now = Instant::now();
        // Found by this try: a holder seen before or named beside us now
        // (on a node that kept its data). Found by an earlier try: the
        // holders seen by then, whose leases a lease after that covers; a
        // holder named beside us now but not then took its node since
        // (a rival's minority held over: not a holder that lost its lock).
        // Granted beside the very holder we saw, still named on another
        // node with a lease: it lost its majority (data lost on the nodes
        // we took), whatever their counters say: other runs' tries may
        // have started them anew and given them back (the chaos campaign,
        // seed 20261211 episode 528, F25).
        let beside_seen = lease.beside_holder.is_some() && lease.beside_holder == self.seen_holder;
        let (found, seen) = if lease.reset || beside_seen {
            (now, self.holder_until)
        } else {
            (self.reset_seen?, self.seen_by_reset)
        };
        let longest = stand_in_length(self.longest_pttl, quorum.ttl());
        let until = lost_holder_until(seen, longest, found).filter(|until| *until > now)?;
        // A counter this try started, beside a holder: also what runs
        // racing for a key's first lock on several nodes look like.
        let first_use = lease.reset && quorum.nodes() > 1;
        let counter = lease.reset || !beside_seen;
        Some(LostLease {
            until,
            first_use,
            counter,
        })
    }

    /// Only the holder we saw, still named beside our grant, says that it
    /// lost its majority; but so does a holder whose release (or a
    /// rival's give-back) has reached some nodes and not yet the rest: it
    /// sends to one node after another, and a loaded machine can stop it
    /// in between while two of our tries run (5 nodes, 8 runs racing for
    /// 40 sections on 2 cores: a whole lease stood in, in 3 runs of 6,
    /// when one more try was all we looked). So our tries (same token:
    /// they keep what we took) look again, at growing pauses, for up to
    /// `LOOK_AGAIN`: a release is over by then, and a holder that lost its
    /// majority is still named. A signal meanwhile leaves what we took to
    /// expire, as a stand-in's would. The pause before the next look, or
    /// `None` to go on with this attempt.
    fn look_again(&mut self, lost: Option<&LostLease>) -> Option<Duration> {
        if lost.is_none_or(|lost| lost.counter) {
            self.looking_since = None;
            return None;
        }
        let now = Instant::now();
        let spent = now - *self.looking_since.get_or_insert(now);
        if spent >= LOOK_AGAIN {
            self.looking_since = None;
            return None;
        }
        Some(match spent.is_zero() {
            true => Duration::ZERO,
            false => spent.max(LOOK_AGAIN_FIRST).min(LOOK_AGAIN - spent),
        })
    }

    /// Wait until the lost holder's lease would have ended (by then it has
    /// stopped its job), then try again. Meanwhile the lock stays ours,
    /// renewed to last that long, standing in for the lost lease: every
    /// other waiter that saw the holder (its own try does not find the
    /// counter started anew: ours did) and every newcomer finds it busy.
    /// It is never given back: when the wait is over our next try (same
    /// token) takes it as ours; after a signal or at `--wait`'s end it is
    /// left to expire then.
    fn wait_out_lost_holder(&mut self, quorum: &mut Quorum, lost: LostLease) -> LostHolder {
        let how = lost.sign();
        let LostLease {
            until, first_use, ..
        } = lost;
        let now = Instant::now();
        // One loss, one wait.
        self.holder_until = None;
        self.seen_holder = None;
        self.reset_seen = None;
        self.seen_by_reset = None;
        // Never given back here: the next try uses the same token (a
        // waiter's place in line), and a give-back that a lossy link
        // delivers after that try deleted the lock it had just taken (the
        // chaos campaign, seed 20261206 episode 86, as F0 and F6). The
        // stand-in lasts until `until` (or its own TTL when it could not
        // be extended), and our next try takes it as ours.
        // At least our own TTL (see `lost_lease`): the holder we saw
        // last may not be the one that lost its lock (another took it
        // unseen, with a whole lease: the chaos campaign, seed 20261206
        // episode 462), and the runs of one KEY share their TTL as a rule.
        let left = until.saturating_duration_since(now);
        let kept = matches!(
            quorum.extend_stand_in(&self.token, left),
            Extend::Extended(_)
        );
        // Both look the same from here (docs/safety.md): say so.
        let or_a_race = if first_use {
            ", or runs raced for the lock's first use on these nodes"
        } else {
            ""
        };
        self.log.warn(format!(
            "lock '{}': the data in Redis was lost ({how}) while another holder had \
             it{or_a_race}; waiting {} until that holder's lease would have ended",
            self.key,
            crate::log::show(left)
        ));
        let end = self.give_up.map_or(until, |end| end.min(until));
        if let Some(sig) = self
            .signals
            .sleep(end.saturating_duration_since(Instant::now()))
        {
            return LostHolder::Signaled(sig);
        }
        if end < until && kept {
            // --wait ran out first: busy, with our stand-in.
            return LostHolder::TimedOut(Box::new(BusyInfo {
                pttl: Some(until.saturating_duration_since(Instant::now())),
                host: self.holder.host.clone(),
                pid: self.holder.pid.to_string(),
                ..BusyInfo::default()
            }));
        }
        LostHolder::Over
    }

    fn timed_out(&self) -> bool {
        self.give_up.is_some_and(|end| Instant::now() >= end)
    }

    /// Subscribe to releases; whether it worked.
    fn subscribe(&mut self, quorum: &Quorum) -> bool {
        match quorum.subscribe(&self.token) {
            Ok(subscribed) => {
                self.wakeups = Some(subscribed);
                self.was_subscribed = true;
                true
            }
            Err(e) => {
                self.log.info(format!(
                    "cannot subscribe to releases of lock '{}' ({e:#}); polling instead",
                    self.key
                ));
                false
            }
        }
    }

    /// Every answer but busy. A signal that arrived while a call failed
    /// wins over the failure (the call may have failed because of it).
    fn settle(&mut self, attempt: Attempt, quorum: &Quorum) -> Result<Next, Failure> {
        let key = self.key;
        let failed = |exit, error, why: &str| failure(key, exit, error, why);
        let failure = !matches!(attempt, Attempt::Acquired(_) | Attempt::Busy(_));
        if let Some(sig) = self.signals.pending().filter(|_| failure) {
            return Ok(Next::done(Waited::Signaled(sig)));
        }
        match attempt {
            Attempt::Acquired(lease) => {
                warn_if_reset(&lease, key, self.log);
                Ok(Next::done(Waited::Acquired(
                    lease,
                    self.token.clone(),
                    None,
                )))
            }
            Attempt::Refused(error) => Err(failed(Exit::Refused, error, "Redis refused")),
            // Not Redis's doing: never a reason to run without the lock.
            Attempt::Local(error) => Err(failed(Exit::LocalFailure, error, "local failure")),
            Attempt::Unavailable(error) => self.unavailable(error, quorum),
            // The arguments are valid, but not for this key as Redis holds
            // it: a configuration mismatch among its users, exit 2.
            Attempt::Mismatch { limit } => Err(Failure {
                exit: Exit::Usage,
                error: anyhow::anyhow!(
                    "lock '{key}' is held with --limit {limit}; this run asked for --limit {} \
                     (every holder of a key must use the same --limit)",
                    quorum.limit()
                ),
            }),
            // One server counted as two nodes: a configuration error.
            Attempt::SameServer(error) => Err(Failure {
                exit: Exit::Usage,
                error,
            }),
            // A resharding moves the lock's slot: routine, and soon over.
            Attempt::Moving(error) if self.timed_out() => Err(failed(
                Exit::Unavailable,
                error,
                "a Redis Cluster was still moving its slot when --wait ran out",
            )),
            Attempt::Moving(_) => Ok(Next::Retry),
            // Held but not confirmed by --replicas (and given back): retry
            // like a busy lock, and fail as unavailable when time is up.
            Attempt::Unconfirmed(error) if self.timed_out() => Err(failed(
                Exit::Unavailable,
                error,
                "not confirmed by the replicas",
            )),
            Attempt::Unconfirmed(_) => Ok(Next::Retry),
            Attempt::TooFewReplicas(error) => {
                Err(failed(Exit::Unavailable, error, "not enough replicas"))
            }
            Attempt::Busy(info) => Ok(Next::done(Waited::Busy(info))),
        }
    }

    /// Unavailable, and nothing busy seen: fail open, fail, or retry.
    fn unavailable(&mut self, error: anyhow::Error, quorum: &Quorum) -> Result<Next, Failure> {
        let key = self.key;
        // The first attempt, unanswered: try once more before calling it
        // unavailable. A herd of runs (a fleet's cron at the top of the
        // minute) overflows the server's accept queue, and the kernel
        // would retry a dropped connection only after 1 s, the per-node
        // timeout; a restarting server turns clients away for a moment.
        // A silent name server stays silent: it is not asked twice.
        let resolving = format!("{error:#}").contains("resolving the host name");
        if self.first_busy && !resolving && !std::mem::replace(&mut self.retried_unreached, true) {
            self.log.info(format!(
                "lock '{key}': no answer from Redis ({error:#}); trying once more"
            ));
            return Ok(Next::Retry);
        }
        if !quorum.ever_answered() {
            return Ok(Next::done(Waited::Unreachable(
                error.context(format!("cannot take lock '{key}': Redis unavailable")),
            )));
        }
        // Some nodes answered, but no busy lock was seen: nothing to
        // wait for, and not unreachable enough to fail open.
        if self.first_busy {
            return Err(failure(key, Exit::Unavailable, error, "Redis unavailable"));
        }
        if self.timed_out() {
            return Err(failure(
                key,
                Exit::Unavailable,
                error,
                "Redis unavailable (it answered before, and was still unreachable when --wait ran out)",
            ));
        }
        if !std::mem::replace(&mut self.warned_unreachable, true) {
            self.log.warn(format!(
                "lock '{key}': Redis stopped answering ({error:#}); reconnecting within --wait"
            ));
        }
        Ok(Next::Retry)
    }
}

/// Taking lock `key` failed: `why`, with its exit code.
fn failure(key: &str, exit: Exit, error: anyhow::Error, why: &str) -> Failure {
    Failure {
        exit,
        error: error.context(format!("cannot take lock '{key}': {why}")),
    }
}

/// The fence counter was started: say so plainly with `-v`. It is the
/// first acquisition of a key, as far as the server knows; data lost
/// under a holder we saw is told loudly elsewhere (`data_was_lost`), and
/// `doctor` says whether the server keeps its data over a restart.
fn warn_if_reset(lease: &Lease, key: &str, log: &Log) {
    if lease.reset {
        log.emit(
            Ev::FenceReset,
            format!(
                "lock '{key}' is new on this server: its fence counter starts from the \
                 server's clock, in microseconds, so fences only grow"
            ),
            &[],
        );
    }
}

/// How waiting out a holder whose lock Redis lost ended.
enum LostHolder {
    /// Its lease is over: try again.
    Over,
    Signaled(i32),
    /// `--wait` ran out first.
    TimedOut(Box<BusyInfo>),
}

/// Until when a holder we saw may still run after Redis lost its lock,
/// found at `found` (a fence counter started anew); `None` when we saw
/// none. Its lease ran at least until `seen` (what its lock had left when
/// we last looked), and it may have renewed it since, at any time up to
/// the loss, which came before `found`: for about its TTL from then, of
/// which the longest lease we saw it have, `longest`, is our measure.
/// (The fence counter never expires: a counter started anew after we saw
/// a holder is always lost data.)
fn lost_holder_until(seen: Option<Instant>, longest: Duration, found: Instant) -> Option<Instant> {
    seen.map(|seen| seen.max(found + longest))
}

/// How long a lost holder may have renewed its lease for: the longest
/// lease we saw a holder have, and at least our own TTL.
fn stand_in_length(longest_seen: Duration, own_ttl: Duration) -> Duration {
    longest_seen.max(own_ttl)
}

/// A lost holder's lease, still to be waited out (see `lost_lease`).
struct LostLease {
    until: Instant,
    /// It may as well be runs racing for the key's first use.
    first_use: bool,
    /// What said so: a fence counter started anew, or else the holder we
    /// saw still named beside a majority that no longer has it.
    counter: bool,
}

impl LostLease {
    /// What said so, as the warning puts it.
    fn sign(&self) -> &'static str {
        match self.counter {
            true => "its fence counter started anew",
            false => {
                "a majority of the nodes no longer have the lock that holder keeps on the rest"
            }
        }
    }
}

/// Why a wait ended.
enum Woke {
    /// The lock was released (a message on its channel).
    Released,
    /// Time to look again: the holder's TTL or the fallback poll.
    Timer,
    /// We are next in line: look again soon (see NEXT_CHECK).
    Next,
    Signaled(i32),
}

impl Waiter<'_> {
    /// Block until `until`, a release message, or a signal.
    fn block(&mut self, until: Instant) -> Woke {
        match listen(&mut self.wakeups, until, self.signals) {
            Heard::Message(payload) if payload == "next" => Woke::Next,
            Heard::Message(_) => Woke::Released,
            Heard::Deadline => Woke::Timer,
            Heard::Interrupted(sig) => Woke::Signaled(sig),
            Heard::Lost(e) => {
                self.log.info(format!(
                    "lost the subscription to releases of lock '{}' ({e:#}); polling instead",
                    self.key
                ));
                // A release may have been missed: look again now.
                Woke::Released
            }
        }
    }
}

/// How many stand in line (this waiter included, and any that left from
/// the middle), as a JSON event's `in_line` field (absent without a line).
fn in_line(info: &BusyInfo) -> crate::log::Field {
    let members = info.place.map(|p| serde_json::Value::from(p.members));
    ("in_line", members.unwrap_or(serde_json::Value::Null))
}

/// The last-resort retry of a waiter that Redis sees subscribed in a
/// line of `members` (see PACE_PER_MEMBER).
fn pace(members: u64) -> Duration {
    let per = PACE_PER_MEMBER.saturating_mul(u32::try_from(members).unwrap_or(u32::MAX));
    let low = per.clamp(PACE_MIN, PACE_MAX);
    jitter(low, low * 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiters_liveness_is_six_refresh_periods_within_bounds() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        for (refresh, expected) in [
            (s(10), s(60)), // the defaults: --ttl 30s
            (s(100), s(60)),
            (s(2), s(12)),
            (ms(500), s(3)),
            (ms(133), s(3)),
        ] {
            assert_eq!(liveness(refresh), expected, "{refresh:?}");
            let (min, max) = stay_within(expected);
            assert!(min < max && max * 2 < expected, "{refresh:?}");
        }
    }

    #[test]
    fn a_stand_in_lasts_at_least_our_own_ttl() {
        let ms = Duration::from_millis;
        // Seen only near its end (28 ms left): a holder that came after
        // it unseen has a whole lease, about our TTL.
        assert_eq!(stand_in_length(ms(28), ms(1200)), ms(1200));
        assert_eq!(stand_in_length(ms(5000), ms(1200)), ms(5000));
    }

    #[test]
    fn a_lost_holder_is_waited_out_as_if_it_had_just_renewed() {
        let now = Instant::now();
        let s = Duration::from_secs(1);
        assert_eq!(lost_holder_until(None, 30 * s, now), None);
        // Seen with 5 s left, 30 s at most: it may have renewed just now.
        assert_eq!(
            lost_holder_until(Some(now + 5 * s), 30 * s, now),
            Some(now + 30 * s)
        );
        // Its lease as we last saw it outlasts that.
        assert_eq!(
            lost_holder_until(Some(now + 40 * s), 30 * s, now),
            Some(now + 40 * s)
        );
        // Seen long ago: it may still have renewed up to the loss.
        assert_eq!(
            lost_holder_until(Some(now), 9 * s, now + 60 * s),
            Some(now + 69 * s)
        );
        // The loss found 40 s ago, a holder seen since until 5 s ago (it
        // released): nothing left to wait for (`lost_lease` keeps
        // only an end still to come).
        let found = now.checked_sub(40 * s).unwrap_or(now);
        let end = lost_holder_until(Some(found + 35 * s), 30 * s, found);
        assert_eq!(end, Some(found + 35 * s));
        assert!(end < Some(now + s / 2) || found == now);
    }
}
