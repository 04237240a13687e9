//! The main thread while COMMAND runs: one loop over `poll` that passes
//! signals on, follows job-control stops, enforces the lease's deadline
//! and `--max-hold`, and waits for COMMAND and what it left behind.
//!
//! Nothing in this loop can block but `poll` itself: no Redis call (the
//! refresher has its own thread and connections), no name lookup, no
//! stderr write (lines go to a queue), no lock held by a thread that does
//! I/O. So when a deadline comes, the signal goes out at once; the line
//! saying why is written after it.
//!
//! When each deadline comes is the plan's business (`plan.rs`): the loop
//! tells it what happened, and does what it says is due.

use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags};
use nix::sys::signal::Signal;

use crate::child::{self, Job, Leader};
use crate::exit::Exit;
use crate::lock::timing::Timing;
use crate::log::{field, ms, show, Ev, Log};
use crate::plan::{Action, Continue, Plan, Reason};
use crate::refresh::{Loss, SharedLease};
use crate::signals::{poll_timeout, stop_self, Event, Signals};
use crate::warn::{OnLost, Warning};

/// How often what COMMAND left behind is looked at again while it is
/// being stopped (its exits are not all reported to us).
const LEFTOVER_POLL: Duration = Duration::from_millis(10);

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
    /// The keeper was killed while COMMAND ran (its leader died with it;
    /// the rest was stopped).
    pub keeper_killed: bool,
    /// The job's cgroup, empty now: removed when dropped (while the
    /// release is on its way, by the caller).
    pub cgroup: Option<child::Cgroup>,
    /// The keeper's "done": it reaps the leader and exits when this is
    /// dropped (while the release is on its way, by the caller).
    pub keeper: Option<child::Dismissal>,
}

impl Ended {
    /// What is left of the run once its release is sent, to be done
    /// while the reply is on its way: the keeper told "done" (it reaps the
    /// leader and exits) and the cgroup removed, after giving way to the
    /// next holder (see `child::give_way`).
    pub fn leave(&mut self) -> impl FnOnce() + 'static {
        let (cgroup, keeper) = (self.cgroup.take(), self.keeper.take());
        move || {
            child::give_way(keeper.as_ref().map(child::Dismissal::pid));
            drop((keeper, cgroup));
        }
    }
}

/// COMMAND's end seen before the keeper reported it (see
/// [`Supervisor::early`]): its leader ended of itself, and nothing of the
/// job is left in its cgroup. How the leader ended is still to be read
/// from the keeper.
pub struct Early {
    job: Job,
    log: Log,
}

impl Early {
    /// How COMMAND ended, read from the keeper and said as
    /// [`Supervisor::run`] says it (a killed keeper too): nothing is left
    /// to stop.
    pub fn ended(mut self) -> Ended {
        let (exit, keeper) = self.job.reap_later();
        let keeper_killed = self.job.keeper_killed();
        if keeper_killed {
            say_keeper_killed(&self.log, self.job.keeper_pid());
        } else if self.job.keeper_continued() {
            say_keeper_stopped(&self.log, self.job.keeper_pid());
        }
        command_exited(&self.log, exit);
        Ended {
            exit,
            lost: None,
            max_hold: false,
            local: None,
            keeper_killed,
            cgroup: self.job.take_cgroup(),
            keeper: Some(keeper),
        }
    }

    /// Once the release is on its way: how COMMAND ended (see
    /// [`Early::ended`]), then the rest of the run ([`Ended::leave`]). The
    /// run's exit: the leader's, or 70 when the keeper was killed (its
    /// leader with it).
    pub fn settle(self) -> Exit {
        let mut ended = self.ended();
        ended.leave()();
        match ended.keeper_killed {
            true => Exit::LockLost,
            false => ended.exit,
        }
    }
}

/// Say how COMMAND's leader ended.
fn command_exited(log: &Log, exit: Exit) {
    let (code, signal) = match exit {
        Exit::Signaled(sig) => (None, Some(sig)),
        other => (Some(other.code()), None),
    };
    log.emit(
        Ev::CommandExited,
        "COMMAND exited",
        &[field("exit", code), field("signal", signal)],
    );
}

/// The keeper was found stopped (see [`Supervisor::keeper_stopped`]).
fn say_keeper_stopped(log: &Log, pid: nix::unistd::Pid) {
    log.warn(format!(
        "redlock-run's keeper process (pid {pid}) was stopped; continued it (it watches \
         COMMAND and ends its tree if redlock-run cannot)"
    ));
}

/// The keeper was killed (see [`Supervisor::keeper_killed`]).
fn say_keeper_killed(log: &Log, pid: nix::unistd::Pid) {
    log.error(format!(
        "redlock-run's keeper process (pid {pid}) was killed; COMMAND's leader died with it \
         (SIGKILL); stopping everything else COMMAND started before the lock is released, exit 70"
    ));
}

/// The lease to enforce, when COMMAND runs under a lock.
pub struct Guard {
    /// The lock's key, for the lines that say it is lost.
    pub key: String,
    pub lease: Arc<SharedLease>,
    pub timing: Timing,
    /// Read end of the refresher's wake-up pipe.
    pub wake: std::io::PipeReader,
}

pub struct Supervisor<'a> {
    job: Job,
    signals: &'a Signals,
    log: &'a Log,
    guard: Option<Guard>,
    grace: Duration,
    /// Every deadline, and where the stop stands.
    plan: Plan,
    /// Called once when `start_at` passes (the refresher's lazy start);
    /// an error stops COMMAND (a local failure).
    later: Option<(Instant, Later<'a>)>,
    /// `--warn-signal` and `--on-lost` (see `warn.rs`).
    warning: Option<Warning>,
    on_lost: Option<&'a OnLost>,
    local: Option<String>,
    /// The job's end may be taken from the kernel (see [`Supervisor::early`])
    /// until then: the lease's end the keeper was given with COMMAND,
    /// before which its watchdog cannot have fired.
    early: Option<Instant>,
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
            plan: Plan::new(grace),
            later: None,
            warning: None,
            on_lost: None,
            local: None,
            early: None,
        }
    }

    /// COMMAND's end may be seen before the keeper reports it: when its
    /// leader has ended of itself (nothing was stopping it) and its
    /// cgroup is empty, [`Supervisor::run_early`] returns at once, and the
    /// exit status is read once the release is on its way (see
    /// [`Early`]). For a run whose release follows COMMAND's end at once
    /// (no `--min-hold`, which decides on how it ended), once the lease
    /// is guarded (after [`Supervisor::guard`]): only before the end of
    /// the lease the keeper started with, which no later end it is told
    /// comes before. Until then its watchdog cannot have killed the job,
    /// which would be a loss to say, not COMMAND's own end.
    pub fn early(self) -> Self {
        Supervisor {
            early: self.plan.lease_end(),
            ..self
        }
    }

    /// Warn COMMAND before a planned SIGTERM, and run a hook once the
    /// lock is lost (see `warn.rs`).
    pub fn warn(self, warning: Option<Warning>, on_lost: Option<&'a OnLost>) -> Self {
        Supervisor {
            plan: self.plan.warn_before(warning.map(|w| w.before)),
            warning,
            on_lost,
            ..self
        }
    }

    /// Enforce this lease: stop COMMAND before it could expire.
    pub fn guard(self, guard: Guard) -> Self {
        Supervisor {
            plan: self.plan.lease(guard.timing, guard.lease.valid_until()),
            guard: Some(guard),
            ..self
        }
    }

    /// Stop COMMAND once it has run for `limit` (`--max-hold`).
    pub fn max_hold(self, limit: Option<Duration>) -> Self {
        Supervisor {
            plan: self.plan.max_hold(limit, Instant::now()),
            ..self
        }
    }

    /// Run `f` once, `after` from now, if COMMAND still runs.
    pub fn later(mut self, after: Duration, f: impl FnOnce() -> Result<(), String> + 'a) -> Self {
        self.later = Some((Instant::now() + after, Box::new(f)));
        self
    }

    /// Supervise until COMMAND and everything it left behind are gone.
    pub fn run(self) -> Ended {
        self.run_early().unwrap_or_else(|early| early.ended())
    }

    /// As [`Supervisor::run`], or [`Early`] once the kernel says that
    /// nothing of the job is left before the keeper has said how it ended
    /// (see [`Supervisor::early`]).
    pub fn run_early(mut self) -> Result<Ended, Box<Early>> {
        if self.early.is_some() {
            self.job.watch_end();
        }
        loop {
            let leader = self.job.leader();
            self.keeper_fired();
            self.keeper_stopped();
            match leader {
                Leader::Gone if self.job.keeper_killed() => {
                    self.keeper_killed();
                    break;
                }
                Leader::Gone => break,
                Leader::Stopped if self.job.owns_terminal() => {
                    self.job.follow_stop();
                    self.continued();
                }
                Leader::Stopped | Leader::Running => {}
            }
            if self.may_end_early() && self.job.tree_gone() {
                return Err(Box::new(Early {
                    job: self.job,
                    log: self.log.clone(),
                }));
            }
            self.enforce();
            self.wait(None);
        }
        self.drain();
        let (exit, keeper) = self.job.reap_later();
        command_exited(self.log, exit);
        let max_hold = self
            .plan
            .stopping()
            .is_some_and(|s| s.reason == Reason::MaxHold);
        Ok(Ended {
            exit,
            lost: self.plan.lost(),
            max_hold,
            local: self.local,
            keeper_killed: self.job.keeper_killed(),
            cgroup: self.job.take_cgroup(),
            keeper: Some(keeper),
        })
    }

    /// Whether COMMAND's end would be its own: nothing is stopping it, no
    /// loss, no local failure (each decides after the end what to say and
    /// what to give back), and the keeper's watchdog cannot have fired
    /// (see [`Supervisor::early`]).
    fn may_end_early(&self) -> bool {
        self.early.is_some_and(|until| Instant::now() < until)
            && self.plan.stopping().is_none()
            && self.plan.lost().is_none()
            && self.local.is_none()
    }

    /// The keeper was killed (`kill -9` of the wrong one of two lines in
    /// `ps`, or by the job: it is COMMAND's parent). COMMAND's leader died
    /// with it; the rest of the job is stopped by the drain that follows,
    /// before the lock is released. Said loudly: the job did not end by
    /// itself.
    fn keeper_killed(&mut self) {
        say_keeper_killed(self.log, self.job.keeper_pid());
    }

    /// The keeper was stopped (SIGSTOP, a debugger): while it is, nobody
    /// sees COMMAND end and the lease's watchdog sleeps. It is continued.
    fn keeper_stopped(&mut self) {
        if self.job.keeper_continued() {
            say_keeper_stopped(self.log, self.job.keeper_pid());
        }
    }

    /// The guarded lock's key (the plan loses no lock it does not guard).
    fn key(&self) -> &str {
        self.guard.as_ref().map_or("", |g| g.key.as_str())
    }

    /// What the refresher learnt, told to the plan: a confirmed end, a
    /// loss.
    fn sync(&mut self) {
        if let Some(guard) = &self.guard {
            self.plan.extended(guard.lease.valid_until());
            if let Some(loss) = guard.lease.loss() {
                self.plan.reported(loss);
            }
        }
    }

    /// Act on every deadline that has come: the lease, the grace of a
    /// stop in progress, `--max-hold`, the lazy start.
    fn enforce(&mut self) {
        self.sync();
        let now = Instant::now();
        while let Some(action) = self.plan.due(now) {
            match action {
                Action::Warn => self.send_warning(),
                Action::Kill => {
                    self.job.kill();
                    self.plan.kill_sent();
                }
                Action::Lose(loss) => self.lose(loss),
                Action::MaxHold(limit) => {
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
        }
        if self.later.as_ref().is_some_and(|(at, _)| now >= *at) {
            if let Some(Err(why)) = self.later.take().map(|(_, f)| f()) {
                if self.plan.stopping().is_none() {
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

    /// `--warn-signal`: the warning is due.
    fn send_warning(&mut self) {
        self.plan.warned();
        let Some(warning) = self.warning else {
            return;
        };
        self.job.signal(warning.signal);
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

    /// The keeper killed the job at the lease's end: we were stopped (or
    /// hung) past it. Say so once; the run ends as a lost lock.
    fn keeper_fired(&mut self) {
        if !self.job.killed_by_keeper() || !self.plan.keeper_fired(Instant::now()) {
            return;
        }
        let key = self.key();
        self.log.emit(
            Ev::Lost,
            format!(
                "lock '{key}' lost: it {}; its keeper killed COMMAND and all it started \
                 (SIGKILL: the lease had run out), exit 70",
                Loss::Suspended.why()
            ),
            &[field("reason", Loss::Suspended.name())],
        );
        if let Some(hook) = self.on_lost {
            hook.fire(Loss::Suspended.name());
        }
    }

    /// The lock is lost: stop COMMAND first, then say so.
    fn lose(&mut self, loss: Loss) {
        self.plan.lose(loss);
        if let Some(guard) = &self.guard {
            // Told once: a retry failing from now on is news to nobody.
            guard.lease.hush();
        }
        if self.plan.stopping().is_none() {
            self.stop(Reason::Lost(loss));
        }
        let key = self.key();
        let how = match self.plan.stopping().is_some_and(|s| s.killed) {
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
        self.sync();
        // SIGKILL lands before the lease could expire, whatever the grace;
        // at once when it has run out already (we were frozen: SIGSTOP, a
        // suspended host).
        if self.plan.stop(reason, Instant::now()) {
            self.job.kill();
        }
        let why = reason.name();
        self.log.emit(
            Ev::Stopping,
            format!(
                "stopping COMMAND ({why}): SIGTERM sent, SIGKILL after {}",
                show(self.grace)
            ),
            &[field("reason", why), ms("grace_ms", self.grace)],
        );
    }

    /// The next deadline, if any.
    fn next_deadline(&self) -> Option<Instant> {
        let later = self.later.as_ref().map(|(at, _)| *at);
        self.plan.next().into_iter().chain(later).min()
    }

    /// Sleep until a signal, a wake-up from the refresher, the next
    /// deadline or `cap`, then handle the signals.
    fn wait(&mut self, cap: Option<Duration>) {
        self.sync();
        let now = Instant::now();
        let mut timeout = self
            .next_deadline()
            .map(|at| at.saturating_duration_since(now));
        // A stopped keeper sends no news: it is looked for at least once
        // a refresh period (one wake-up per refresh, no polling).
        let keeper_check = self.guard.as_ref().map(|g| g.timing.refresh);
        for cap in cap.into_iter().chain(keeper_check) {
            timeout = Some(timeout.map_or(cap, |t| t.min(cap)));
        }
        if let Some(until) = self.plan.watchdog() {
            self.job.lease_until(until);
        }
        let signals = self.signals.fd();
        let mut fds = vec![PollFd::new(signals, PollFlags::POLLIN)];
        if let Some(news) = self.job.news() {
            fds.push(PollFd::new(news, PollFlags::POLLIN));
        }
        if let Some(end) = self.job.end().filter(|_| self.may_end_early()) {
            fds.push(PollFd::new(end, PollFlags::POLLIN));
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
        self.sync();
        if self.plan.continued(Instant::now()) == Continue::Kill {
            self.job.kill();
            let key = self.key();
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
        let give_up = self.plan.give_up(Instant::now());
        loop {
            match self.job.leftovers() {
                Some(0) => break,
                // They could be counted, and now cannot (out of file
                // descriptors): that is no "nothing left".
                None => return self.drain_blind(),
                Some(_) if Instant::now() >= give_up => break,
                Some(_) => {}
            }
            self.enforce();
            self.wait(Some(LEFTOVER_POLL));
        }
        if self.plan.lost().is_none() {
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
        match self.plan.stopping() {
            None => self.stop(Reason::Leftovers),
            // Already being stopped: make sure the newcomers hear it too.
            Some(stop) if !stop.killed => self.job.terminate(),
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
            let killed = self.plan.stopping().is_some_and(|s| s.killed);
            if killed && self.plan.lost().is_some() {
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
