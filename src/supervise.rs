//! The main thread while COMMAND runs: one loop over `poll` that passes
//! signals on, follows job-control stops, enforces the lease's deadline
//! and `--max-hold`, and waits for COMMAND and what it left behind.
//!
//! Nothing in this loop can block but `poll` itself: no Redis call (the
//! refresher has its own thread and connections), no name lookup, no
//! stderr write (lines go to a queue), no lock held by a thread that does
//! I/O. So when a deadline comes, the signal goes out at once; the line
//! saying why is written after it.

use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags};
use nix::sys::signal::Signal;

use crate::child::{self, Job, Leader};
use crate::exit::Exit;
use crate::lock::timing::Timing;
use crate::log::{field, ms, show, Ev, Log};
use crate::refresh::{Lease, Loss};
use crate::signals::{poll_timeout, stop_self, Event, Signals};
use crate::warn::{OnLost, Warning};

/// How often what COMMAND left behind is looked at again while it is
/// being stopped (its exits are not all reported to us).
const LEFTOVER_POLL: Duration = Duration::from_millis(10);

/// How long after SIGKILL leftovers are waited for (a process we may not
/// signal, such as a setuid one, would otherwise keep us forever).
const UNKILLABLE: Duration = Duration::from_secs(2);

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

/// How a supervised COMMAND ended.
#[derive(Debug)]
pub struct Ended {
    /// The leader's own exit.
    pub exit: Exit,
    /// Set when the lock was lost (COMMAND was stopped for it).
    pub lost: Option<Loss>,
    /// COMMAND was stopped by `--max-hold`.
    pub max_hold: bool,
    /// COMMAND was stopped for a local failure (this one).
    pub local: Option<String>,
}

/// The lease to enforce, when COMMAND runs under a lock.
pub struct Guard {
    pub lease: Arc<Lease>,
    pub timing: Timing,
    /// Read end of the refresher's wake-up pipe.
    pub wake: UnixStream,
}

/// A stop in progress: SIGTERM sent, SIGKILL due at `kill_at`.
struct Stopping {
    reason: Reason,
    kill_at: Instant,
    killed: bool,
}

pub struct Supervisor<'a> {
    job: Job,
    signals: &'a Signals,
    log: &'a Log,
    guard: Option<Guard>,
    grace: Duration,
    max_hold: Option<(Duration, Instant)>,
    /// Called once when `start_at` passes (the refresher's lazy start);
    /// an error stops COMMAND (a local failure).
    later: Option<(Instant, Later<'a>)>,
    stopping: Option<Stopping>,
    lost: Option<Loss>,
    /// `--warn-signal` and `--on-lost` (see `warn.rs`).
    warning: Option<Warning>,
    on_lost: Option<&'a OnLost>,
    local: Option<String>,
}

type Later<'a> = Box<dyn FnOnce() -> Result<(), String> + 'a>;

impl<'a> Supervisor<'a> {
    pub fn new(job: Job, signals: &'a Signals, log: &'a Log, grace: Duration) -> Supervisor<'a> {
        Supervisor {
            job,
            signals,
            log,
            guard: None,
            grace,
            max_hold: None,
            later: None,
            stopping: None,
            lost: None,
            warning: None,
            on_lost: None,
            local: None,
        }
    }

    /// Warn COMMAND before a planned SIGTERM, and run a hook once the
    /// lock is lost (see `warn.rs`).
    pub fn warn(mut self, warning: Option<Warning>, on_lost: Option<&'a OnLost>) -> Self {
        (self.warning, self.on_lost) = (warning, on_lost);
        self
    }

    /// When the warning is due, and the SIGTERM it warns of: before the
    /// lease's or --max-hold's, whichever comes first; never once sent, or
    /// once a stop has begun.
    fn warn_at(&self) -> Option<(Instant, Instant)> {
        let warning = self
            .warning
            .filter(|w| !w.sent && self.stopping.is_none())?;
        let lease = match (&self.guard, self.lost) {
            (Some(g), None) => warning.lease_at(&g.timing, g.lease.valid_until()),
            _ => None,
        };
        let max_hold = self.max_hold.and_then(|(d, at)| warning.max_hold_at(d, at));
        lease.into_iter().chain(max_hold).min()
    }

    /// Enforce this lease: stop COMMAND before it could expire.
    pub fn guard(mut self, guard: Guard) -> Self {
        self.guard = Some(guard);
        self
    }

    /// Stop COMMAND once it has run for `limit` (`--max-hold`).
    pub fn max_hold(mut self, limit: Option<Duration>) -> Self {
        self.max_hold = limit.map(|d| (d, Instant::now() + d));
        self
    }

    /// Run `f` once, `after` from now, if COMMAND still runs.
    pub fn later(mut self, after: Duration, f: impl FnOnce() -> Result<(), String> + 'a) -> Self {
        self.later = Some((Instant::now() + after, Box::new(f)));
        self
    }

    /// Supervise until COMMAND and everything it left behind are gone.
    pub fn run(mut self) -> Ended {
        loop {
            let leader = self.job.leader();
            self.keeper_fired();
            match leader {
                Leader::Gone => break,
                Leader::Stopped if self.job.owns_terminal() => {
                    self.job.follow_stop();
                    self.continued();
                }
                Leader::Stopped | Leader::Running => {}
            }
            self.enforce();
            self.wait(None);
        }
        self.drain();
        let exit = self.job.reap();
        let (code, signal) = match exit {
            Exit::Signaled(sig) => (None, Some(sig)),
            other => (Some(other.code()), None),
        };
        self.log.emit(
            Ev::CommandExited,
            "COMMAND exited",
            &[field("exit", code), field("signal", signal)],
        );
        let max_hold = self
            .stopping
            .as_ref()
            .is_some_and(|s| s.reason == Reason::MaxHold);
        Ended {
            exit,
            lost: self.lost,
            max_hold,
            local: self.local,
        }
    }

    /// Act on every deadline that has come: the lease, the grace of a
    /// stop in progress, `--max-hold`, the lazy start.
    fn enforce(&mut self) {
        let now = Instant::now();
        // Not when the SIGTERM is due as well (a late wake-up).
        if let Some(warning) = self
            .warn_at()
            .filter(|(at, term)| now >= *at && now < *term)
            .and(self.warning.as_mut())
        {
            self.job.signal(warning.signal);
            warning.sent = true;
            let (name, before) = (warning.signal.as_str(), warning.before);
            self.log.emit(
                Ev::Warning,
                format!(
                    "sent {name} to COMMAND: it may be stopped within {} (--warn-signal)",
                    show(before)
                ),
                &[field("signal", name), ms("warn_before_ms", before)],
            );
        }
        if let Some(stop) = &mut self.stopping {
            if !stop.killed && now >= stop.kill_at {
                self.job.kill();
                stop.killed = true;
            }
        }
        if let Some(loss) = self.loss_at(now) {
            self.lose(loss);
        }
        if let Some((limit, at)) = self.max_hold {
            if now >= at && self.stopping.is_none() {
                self.stop(Reason::MaxHold);
                self.log.emit(
                    Ev::MaxHold,
                    format!(
                        "COMMAND still runs after --max-hold {}; stopping it (SIGTERM, SIGKILL after {}), exit 124",
                        show(limit),
                        show(self.grace)
                    ),
                    &[ms("max_hold_ms", limit), ms("grace_ms", self.grace)],
                );
            }
        }
        if self.later.as_ref().is_some_and(|(at, _)| now >= *at) {
            if let Some(Err(why)) = self.later.take().map(|(_, f)| f()) {
                if self.stopping.is_none() {
                    self.stop(Reason::Local);
                }
                self.log.error(format!(
                    "{why}; stopping COMMAND (SIGTERM, SIGKILL after {}), exit 71",
                    show(self.grace)
                ));
                self.local = Some(why);
            }
        }
    }

    /// The keeper killed the job at the lease's end: we were stopped (or
    /// hung) past it. Say so once; the run ends as a lost lock.
    fn keeper_fired(&mut self) {
        if self.lost.is_some() || !self.job.killed_by_keeper() {
            return;
        }
        self.lost = Some(Loss::Suspended);
        self.stopping = Some(Stopping {
            reason: Reason::Lost(Loss::Suspended),
            kill_at: Instant::now(),
            killed: true,
        });
        let key = self.log.key().unwrap_or_default();
        self.log.emit(
            Ev::Lost,
            format!(
                "lock '{key}' lost: it {}; its keeper killed COMMAND and all it started \
                 (SIGKILL: the lease had run out), exit 70",
                Loss::Suspended.why()
            ),
            &[field("reason", Loss::Suspended.name())],
        );
    }

    /// A loss that has happened by `now`, if not acted on yet.
    fn loss_at(&self, now: Instant) -> Option<Loss> {
        if self.lost.is_some() {
            return None;
        }
        let guard = self.guard.as_ref()?;
        if let Some(loss) = guard.lease.loss() {
            return Some(loss);
        }
        (now >= guard.timing.term_at(guard.lease.valid_until())).then_some(Loss::Unconfirmed)
    }

    /// The lock is lost: stop COMMAND first, then say so.
    fn lose(&mut self, loss: Loss) {
        self.lost = Some(loss);
        let already = self.stopping.is_some();
        if !already {
            self.stop(Reason::Lost(loss));
        }
        let key = self.log.key().unwrap_or_default();
        let how = match self.stopping.as_ref().is_some_and(|s| s.killed) {
            true => "killed COMMAND (SIGKILL: the lease had run out already)".to_string(),
            false => format!(
                "stopping COMMAND (SIGTERM, SIGKILL after {})",
                show(self.grace)
            ),
        };
        self.log.emit(
            Ev::Lost,
            format!("lock '{key}' lost: it {}; {how}, exit 70", loss.why()),
            &[field("reason", loss.name()), ms("grace_ms", self.grace)],
        );
        if let Some(hook) = self.on_lost {
            hook.fire(loss.name());
        }
    }

    /// The one stop protocol: SIGTERM now, SIGKILL after the grace.
    fn stop(&mut self, reason: Reason) {
        self.job.terminate();
        let now = Instant::now();
        // SIGKILL lands before the lease could expire, whatever the grace;
        // at once when it has run out already (we were frozen: SIGSTOP, a
        // suspended host).
        let lease_end = self.guard.as_ref().map(|g| g.lease.valid_until());
        let kill_at = lease_end.map_or(now + self.grace, |end| end.min(now + self.grace));
        let killed = kill_at <= now;
        if killed {
            self.job.kill();
        }
        let why = match reason {
            Reason::Lost(loss) => loss.name(),
            Reason::MaxHold => "max_hold",
            Reason::Leftovers => "leftovers",
            Reason::Local => "local_failure",
        };
        self.log.emit(
            Ev::Stopping,
            format!(
                "stopping COMMAND ({why}): SIGTERM sent, SIGKILL after {}",
                show(self.grace)
            ),
            &[field("reason", why), ms("grace_ms", self.grace)],
        );
        self.stopping = Some(Stopping {
            reason,
            kill_at,
            killed,
        });
    }

    /// The next deadline, if any.
    fn next_deadline(&self) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let mut consider = |at: Instant| next = Some(next.map_or(at, |n| n.min(at)));
        if let Some(stop) = self.stopping.as_ref().filter(|s| !s.killed) {
            consider(stop.kill_at);
        }
        if let (Some(guard), None) = (&self.guard, self.lost) {
            consider(guard.timing.term_at(guard.lease.valid_until()));
        }
        if let (Some((_, at)), None) = (self.max_hold, &self.stopping) {
            consider(at);
        }
        if let Some((at, _)) = &self.later {
            consider(*at);
        }
        if let Some((at, _)) = self.warn_at() {
            consider(at);
        }
        next
    }

    /// Sleep until a signal, a wake-up from the refresher, the next
    /// deadline or `cap`, then handle the signals.
    fn wait(&mut self, cap: Option<Duration>) {
        let now = Instant::now();
        let mut timeout = self
            .next_deadline()
            .map(|at| at.saturating_duration_since(now));
        if let Some(cap) = cap {
            timeout = Some(timeout.map_or(cap, |t| t.min(cap)));
        }
        if let (Some(guard), None) = (&self.guard, self.lost) {
            self.job.lease_until(guard.lease.valid_until());
        }
        let signals = self.signals.fd();
        let mut fds = vec![PollFd::new(signals, PollFlags::POLLIN)];
        if let Some(news) = self.job.news() {
            fds.push(PollFd::new(news, PollFlags::POLLIN));
        }
        if let Some(guard) = &self.guard {
            fds.push(PollFd::new(guard.wake.as_fd(), PollFlags::POLLIN));
        }
        let timeout = timeout.map_or(nix::poll::PollTimeout::NONE, poll_timeout);
        let _ = poll(&mut fds, timeout);
        drop(fds);
        if let Some(guard) = &self.guard {
            // Empty it (a loss writes a byte), or every later poll returns
            // at once and the loop spins through the grace.
            let mut buf = [0u8; 64];
            while matches!(std::io::Read::read(&mut &guard.wake, &mut buf), Ok(n) if n > 0) {}
        }
        for event in self.signals.take() {
            self.on(event);
        }
    }

    fn on(&mut self, event: Event) {
        match event {
            Event::Forward(sig) => {
                let Ok(signal) = Signal::try_from(sig) else {
                    return;
                };
                self.job.signal(signal);
                self.log.emit(
                    Ev::SignalForwarded,
                    format!("passed {} on to COMMAND", signal.as_str()),
                    &[field("signal", sig)],
                );
            }
            Event::Stop(sig) => self.suspend(sig),
            Event::Continued => {}
        }
    }

    /// A job-control stop for us (SIGTSTP, SIGTTIN, SIGTTOU): stop COMMAND
    /// with us, in every case; see [`Supervisor::continued`].
    fn suspend(&mut self, sig: i32) {
        self.job.signal(Signal::SIGSTOP);
        self.log.emit(
            Ev::Suspended,
            "stopped with COMMAND (job control)",
            &[field("signal", sig)],
        );
        stop_self();
        self.continued();
    }

    /// We were continued after a stop. While we were stopped nothing
    /// refreshed the lock: if it may have run out meanwhile, COMMAND is
    /// killed before it can run another instruction (exit 70); else it is
    /// continued.
    fn continued(&mut self) {
        let expired = self
            .guard
            .as_ref()
            .is_some_and(|g| Instant::now() >= g.timing.term_at(g.lease.valid_until()));
        if expired && self.lost.is_none() {
            self.job.kill();
            self.lost = Some(Loss::Suspended);
            self.stopping = Some(Stopping {
                reason: Reason::Lost(Loss::Suspended),
                kill_at: Instant::now(),
                killed: true,
            });
            let key = self.log.key().unwrap_or_default();
            self.log.emit(
                Ev::Lost,
                format!(
                    "lock '{key}' lost: it {}; COMMAND was killed (SIGKILL) before it could continue, exit 70",
                    Loss::Suspended.why()
                ),
                &[field("reason", Loss::Suspended.name())],
            );
            if let Some(hook) = self.on_lost {
                hook.fire(Loss::Suspended.name());
            }
            return;
        }
        self.job.resume();
    }

    /// COMMAND exited: stop what it left behind (the same protocol), still
    /// enforcing the lease, until nothing is left.
    fn drain(&mut self) {
        let Some(left) = self.job.leftovers() else {
            return self.drain_blind();
        };
        if left == 0 {
            return;
        }
        self.stop_leftovers();
        let give_up = Instant::now() + self.grace + UNKILLABLE;
        while self.job.leftovers().is_some_and(|n| n > 0) && Instant::now() < give_up {
            self.enforce();
            self.wait(Some(LEFTOVER_POLL));
        }
        if self.lost.is_none() {
            self.log.emit(
                Ev::LeftoversStopped,
                format!(
                    "COMMAND exited but left {left} process(es) in its group; stopped them before releasing the lock"
                ),
                &[field("count", left)],
            );
        }
    }

    fn stop_leftovers(&mut self) {
        match self.stopping {
            None => self.stop(Reason::Leftovers),
            // Already being stopped: make sure the newcomers hear it too.
            Some(ref stop) if !stop.killed => self.job.terminate(),
            Some(_) => self.job.kill(),
        }
    }

    /// Without /proc nothing can be listed: the leader is reaped, and
    /// whether any descendant lives is asked of `waitid` (each is our
    /// child by then, or below one). The group is stopped by its id while
    /// it has members; processes that left it cannot be named, so the
    /// lock is kept (and refreshed) until they are gone.
    fn drain_blind(&mut self) {
        self.job.reap();
        if !child::descendants_remain() {
            return;
        }
        self.stop_leftovers();
        let mut warned = false;
        while child::descendants_remain() {
            self.enforce();
            let killed = self.stopping.as_ref().is_some_and(|s| s.killed);
            if killed && self.lost.is_some() {
                return;
            }
            if killed && !warned {
                warned = true;
                self.log.emit(
                    Ev::Warning,
                    "processes COMMAND started outside its process group still run and cannot be \
                     named without /proc; keeping the lock until they exit",
                    &[],
                );
            }
            self.wait(Some(LEFTOVER_POLL));
        }
    }
}
