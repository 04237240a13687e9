//! The run mode: acquire -> spawn -> supervise -> release.

use std::cell::RefCell;
use std::io::{PipeReader, PipeWriter};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::child::{self, Containment, Job};
use crate::cli::OnUnavailable;
use crate::config::{Conn, RunConfig};
use crate::exit::{Exit, Failure};
use crate::keyset::{self, All, Got, Outer};
use crate::lock::{Extend, KeyReleased, Lease as Acquired, LockKeys, Locks, Quorum, Wakeups};
use crate::log::{field, ms, show, Ev, Log};
use crate::metrics::{Finished, Outcome, Writer};
use crate::plan;
use crate::refresh::{Holding, Loss, Refresher, SharedLease};
use crate::signals::Signals;
use crate::supervise::{Early, Ended, Guard, Supervisor};
use crate::wait::Waited;
use crate::warn::{LeaseFile, OnLost};

/// The refresher starts once COMMAND has run this long: a shorter job is
/// over before a second connection could tell it anything, and pays for
/// no thread. Far below the shortest refresh period.
const REFRESHER_AFTER: Duration = Duration::from_millis(20);

/// Pauses before the `--min-hold` re-arm is tried again (the first retry
/// at once: a connection the server closed while idle is simply remade).
const MIN_HOLD_RETRIES: [Duration; 3] = [
    Duration::ZERO,
    Duration::from_millis(100),
    Duration::from_millis(300),
];

pub fn run(conn: Conn, cfg: RunConfig, log: &Log) -> Result<Exit, Failure> {
    let log = log.for_key(&cfg.key);
    // Before any connection: a low descriptor, for the walk of COMMAND's
    // tree should the table be full by then (see child/reserve.rs).
    child::keep_reserve();
    // Its thread starts before anything else does, COMMAND included.
    let mut record = Record {
        metrics: cfg.metrics.as_ref().map(|m| m.writer(&log)),
        ..Record::default()
    };
    let result = run_recorded(&conn, &cfg, &log, &mut record);
    record.finish(&result);
    result
}

/// What the metrics file is told about a run.
#[derive(Default)]
struct Record {
    /// The metrics thread, with `--metrics-textfile`.
    metrics: Option<Writer>,
    /// When the lock was acquired (or COMMAND started without it).
    start: Option<SystemTime>,
    wait: Duration,
    fence: Option<i64>,
    refresh_failures: u64,
    /// COMMAND ran without the lock (`--on-unavailable run`).
    unlocked: bool,
}

impl Record {
    fn acquired(&mut self, wait: Duration, fence: i64) {
        self.start = Some(SystemTime::now());
        self.wait = wait;
        self.fence = Some(fence);
    }

    /// "Running", once COMMAND has started: handed to the metrics thread,
    /// so that no file I/O delays COMMAND or its supervision.
    fn running(&self) {
        let (Some(metrics), Some(start), Some(fence)) = (&self.metrics, self.start, self.fence)
        else {
            return;
        };
        metrics.acquired(start, self.wait, fence);
    }

    fn finish(self, result: &Result<Exit, Failure>) {
        let Some(metrics) = self.metrics else { return };
        let exit = match result {
            Ok(exit) => *exit,
            Err(failure) => failure.exit,
        };
        let outcome = match exit {
            Exit::Success | Exit::Child(0) => Outcome::Ok,
            Exit::Busy(_) | Exit::Replaced => Outcome::Busy,
            Exit::Unavailable | Exit::Refused => Outcome::Unavailable,
            Exit::LockLost => Outcome::Lost,
            Exit::MaxHold => Outcome::MaxHold,
            Exit::Signaled(_) => Outcome::Signaled,
            _ => Outcome::Failed,
        };
        metrics.finished(Finished {
            outcome,
            start: self.start,
            end: SystemTime::now(),
            exit_code: i32::from(exit.code()),
            wait: self.wait,
            fence: self.fence,
            refresh_failures: self.refresh_failures,
            unlocked: self.unlocked,
        });
    }
}

fn run_recorded(
    conn: &Conn,
    cfg: &RunConfig,
    log: &Log,
    record: &mut Record,
) -> Result<Exit, Failure> {
    // Kept to the process's end: taking the handlers down one by one was
    // 0.09 million of a run's 1.56 million instructions (callgrind), and
    // the process exits after the run.
    let signals = std::mem::ManuallyDrop::new(
        Signals::start().map_err(|e| Failure::local(e, "cannot set up signal handling"))?,
    );
    let quorum = |key: &str| quorum_for(conn, cfg, key);
    if let Outer::Nested = keyset::outer(cfg, |key, token| quorum(key).holds(token))? {
        return run_nested(cfg, &signals, log);
    }
    if let Some(sig) = random_delay(cfg, &signals, log) {
        return Ok(Exit::Signaled(sig));
    }
    // Before anything is written: a --contain this host cannot give is
    // refused first, and a waiter's cgroup is ready when the lock is.
    let mut containment = Some(contain(cfg)?);
    let mut parked = None;
    let started = Instant::now();
    // COMMAND's start made ready at once, while we ask for the lock: its
    // keeper's fork and clone run beside the acquire's round trip (and a
    // waiter's hand-over does not wait for them). A start that could not
    // be made ready is tried again when the run settles down to wait.
    let on_wait = &mut || {
        if parked.is_none() {
            parked = park(cfg, &mut containment)
        }
    };
    on_wait();
    let all = match keyset::acquire(&quorum, cfg, &signals, log, on_wait) {
        Ok(Got::All(all)) => all,
        Ok(Got::Not(other, key)) => {
            // Given up: nothing of COMMAND ran, nor will.
            drop(parked);
            return not_acquired(other, &key, cfg, &signals, log, record);
        }
        Err(failure) => return Err(failure),
    };
    let All {
        mut locks,
        lease: acquired,
        fences,
        subscription,
    } = all;
    record.acquired(started.elapsed(), acquired.fence);
    let fresh = locks.fresh(quorum);
    let held = Held {
        cfg,
        log,
        signals: &signals,
        acquired,
        fences,
        containment: std::cell::Cell::new(containment),
        parked: std::cell::Cell::new(parked),
    };
    held.run(&mut locks, fresh, record, subscription)
}

/// A key's nodes, not connected yet (each user opens its own).
fn quorum_for(conn: &Conn, cfg: &RunConfig, key: &str) -> Quorum {
    let keys = LockKeys::new(&conn.prefix, key);
    let timeout = cfg.timing.node_timeout();
    let endpoints = match cfg.allow_eviction {
        true => conn
            .endpoints
            .iter()
            .map(|e| e.clone().allowing_eviction())
            .collect(),
        false => conn.endpoints.clone(),
    };
    Quorum::new(&endpoints, keys, cfg.timing.ttl, timeout)
        .with_replicas(cfg.replicas)
        .with_limit(cfg.limit)
        .shared_if(cfg.shared)
}

/// `--random-delay`: a fleet's cron entries fire in the same second;
/// spread them out. A signal ends the sleep (and the run).
fn random_delay(cfg: &RunConfig, signals: &Signals, log: &Log) -> Option<i32> {
    let delay = crate::jitter::jitter(Duration::ZERO, cfg.random_delay?);
    log.emit(
        Ev::RandomDelay,
        format!(
            "sleeping {} before the first attempt (--random-delay)",
            show(delay)
        ),
        &[ms("delay_ms", delay)],
    );
    signals.sleep(delay)
}

/// Waiting for `key` ended without it: busy, a signal, or Redis
/// unreachable (then, with `--on-unavailable run`, COMMAND runs without
/// the lock).
fn not_acquired(
    waited: Waited,
    key: &str,
    cfg: &RunConfig,
    signals: &Signals,
    log: &Log,
    record: &mut Record,
) -> Result<Exit, Failure> {
    match waited {
        Waited::Acquired(..) => Err(anyhow::anyhow!("acquired, yet not acquired").into()),
        Waited::Busy(info) => Ok(busy(&info, key, cfg, log)),
        Waited::Signaled(sig) => Ok(Exit::Signaled(sig)),
        Waited::Replaced(host, pid) => Ok(crate::queue::replaced(key, &host, &pid, log)),
        // Only when Redis never answered: never after a refusal or a
        // busy answer (wait.rs decides).
        Waited::Unreachable(error) => {
            let failure = Failure {
                exit: Exit::Unavailable,
                error,
            };
            if cfg.on_unavailable != OnUnavailable::Run {
                return Err(failure);
            }
            log.emit(
                Ev::RunningUnlocked,
                format!(
                    "WARNING: {failure}; running COMMAND WITHOUT the lock (--on-unavailable run)"
                ),
                &[],
            );
            record.start = Some(SystemTime::now());
            record.unlocked = true;
            run_unlocked(cfg, signals, log)
        }
    }
}

/// Still busy when waiting ended (or its line full: `--queue-max`): said
/// once, as a skip under `-E 0` (the intended outcome: cron on many
/// hosts, nothing to report unless -v asks).
fn busy(info: &crate::lock::BusyInfo, key: &str, cfg: &RunConfig, log: &Log) -> Exit {
    let code = cfg.conflict_exit_code;
    let ev = if code == 0 { Ev::Skipped } else { Ev::Busy };
    if let Some(waiting) = info.line_full {
        let max = cfg.queue_max.unwrap_or_default();
        log.emit(
            ev,
            format!(
                "lock '{key}' is busy and its line is full ({waiting} waiting, --queue-max \
                 {max}); not waiting, exit {code}"
            ),
            &[field("waiting", waiting.to_string())],
        );
        return Exit::Busy(code);
    }
    let holder = crate::holder::describe_holder(info);
    let outcome = match code {
        0 => "skipping this run (-E 0)",
        _ => "giving up",
    };
    log.emit(
        ev,
        format!("lock '{key}' {holder}; {outcome}"),
        &[
            field("holder", holder.clone()),
            crate::holder::label_field(info),
            crate::holder::hold_field(info),
        ],
    );
    Exit::Busy(code)
}

/// The lock is ours: run COMMAND under it, then give it back.
struct Held<'a> {
    cfg: &'a RunConfig,
    log: &'a Log,
    signals: &'a Signals,
    /// The set's lease (see `keyset::All`).
    acquired: Acquired,
    /// Each key's fence, in the order of the keys.
    fences: Vec<i64>,
    /// Made before the wait, so that a hand-over does not wait for it.
    containment: std::cell::Cell<Option<Containment>>,
    /// COMMAND's start, made ready before the lock was ours (see [`park`]).
    parked: std::cell::Cell<Option<child::Parked>>,
}

impl Held<'_> {
    /// `subscription`: a waiter's, closed once COMMAND runs. Closing a
    /// loopback TCP connection does the FIN's work on this thread, which
    /// would delay the hand-over.
    fn run(
        self,
        main: &mut Locks,
        fresh: Locks,
        record: &mut Record,
        subscription: Option<Wakeups>,
    ) -> Result<Exit, Failure> {
        if let Some(exit) = self.too_late(main) {
            return Ok(exit);
        }
        // Everything supervision needs exists before COMMAND does: a
        // failure here is a local one, and COMMAND never starts.
        let (wake, woken) = self.wake_pipe(main)?;
        let file = self.lease_file();
        let job = self.spawn(main, file.as_ref())?;
        drop(subscription);
        record.running();
        let lease = SharedLease::new(self.acquired.valid_until, wake);
        if let Some(file) = file {
            lease.keep_file(file);
        }
        let hook = self.cfg.on_lost.as_ref().map(|line| {
            let first = self.cfg.keys.first().unwrap_or(&self.cfg.key);
            OnLost::new(line.clone(), first, self.acquired.fence, self.log)
        });
        let ended = self.supervise(job, fresh, &lease, hook.as_ref(), woken);
        lease.remove_file();
        record.refresh_failures = lease.refresh_failures();
        let exit = match ended {
            Ok(mut ended) => {
                // The keeper's exit and the cgroup's rmdir while the release
                // is on its way: the next holder need not wait for them,
                // nor we for the reply before doing them.
                crate::lock::while_sent(Box::new(ended.leave()));
                self.finish(main, ended, lease.valid_until())
            }
            Err(early) => Ok(self.finish_early(main, early)),
        };
        crate::lock::sent_or_now();
        // After the release: the next holder need not wait for the hook.
        if let Some(hook) = &hook {
            hook.finish();
        }
        exit
    }

    /// The wake-up pipe; if it cannot be made, the lock is given back and
    /// the run is a local failure.
    fn wake_pipe(&self, main: &mut Locks) -> Result<(PipeWriter, PipeReader), Failure> {
        match crate::refresh::wake_pipe() {
            Ok(pipe) => Ok(pipe),
            Err(e) => {
                self.release(main);
                Err(Failure {
                    exit: Exit::LocalFailure,
                    error: anyhow::Error::new(e).context(
                        "cannot create the wake-up pipe (out of file descriptors?); COMMAND did not run",
                    ),
                })
            }
        }
    }

    /// COMMAND supervised to its end, the refresher started lazily and
    /// stopped once it has ended.
    fn supervise(
        &self,
        job: Job,
        fresh: Locks,
        lease: &Arc<SharedLease>,
        hook: Option<&OnLost>,
        woken: PipeReader,
    ) -> Result<Ended, Box<Early>> {
        let timing = self.cfg.timing;
        let refresher = RefCell::new(None);
        // The one resource made after the spawn (a thread, started lazily
        // so that a short job pays for none): if it cannot start, COMMAND
        // is stopped at once and the run ends as a local failure.
        let holding = self.holding();
        let start_refresher =
            || match Refresher::start(fresh, holding.clone(), lease.clone(), timing) {
                Ok(started) => {
                    *refresher.borrow_mut() = Some(started);
                    Ok(())
                }
                Err(e) => Err(format!("cannot start the refresh thread: {e}")),
            };
        let mut supervisor =
            Supervisor::new(job, self.signals, self.log, timing.kill_after).guard(Guard {
                key: holding.key.clone(),
                lease: lease.clone(),
                timing,
                wake: woken,
            });
        if self.cfg.min_hold.is_none() {
            // The release follows COMMAND's end at once, however it ended.
            supervisor = supervisor.early();
        }
        let ended = supervisor
            .max_hold(self.cfg.max_hold)
            .warn(self.cfg.warning, hook)
            .later(REFRESHER_AFTER, start_refresher)
            .run_early();
        if let Some(refresher) = refresher.into_inner() {
            refresher.stop();
        }
        ended
    }

    /// The lock, as the refresher and the supervision loop name it.
    fn holding(&self) -> Holding {
        Holding {
            key: self.cfg.key.clone(),
            log: self.log.clone(),
        }
    }

    /// `--lease-file`: made before COMMAND starts, so that it is there
    /// when COMMAND looks. A failure is said, and COMMAND runs without it.
    fn lease_file(&self) -> Option<LeaseFile> {
        if !self.cfg.lease_file {
            return None;
        }
        LeaseFile::create(self.acquired.valid_until)
            .inspect_err(|e| {
                self.log.error(format!(
                    "cannot write the lease file ({e}); COMMAND runs without REDLOCK_LEASE_FILE"
                ))
            })
            .ok()
    }

    /// A signal while acquiring, or a lease used up before COMMAND could
    /// start (we were stopped, or Redis was slow): COMMAND never starts,
    /// and the lock is given back.
    fn too_late(&self, main: &mut Locks) -> Option<Exit> {
        if let Some(sig) = self.signals.pending() {
            self.release(main);
            return Some(Exit::Signaled(sig));
        }
        if Instant::now() < self.cfg.timing.term_at(self.acquired.valid_until) {
            return None;
        }
        self.release(main);
        self.log.error(format!(
            "lock '{}' was acquired too late to be of use (its lease was spent before \
             COMMAND could start); COMMAND did not run",
            self.cfg.key
        ));
        Some(Exit::LockLost)
    }

    /// Start COMMAND with the lock's variables (or give the lock back).
    fn spawn(&self, main: &mut Locks, file: Option<&LeaseFile>) -> Result<Job, Failure> {
        let tokens: Vec<&str> = main.tokens().collect();
        let vars = keyset::env_of(&self.cfg.keys, &tokens, &self.fences);
        let path = file.map(|f| f.path().to_string_lossy().into_owned());
        let mut env = command_env(self.cfg);
        env.extend(vars.iter().map(|(n, v)| (*n, v.as_str())));
        // Empty removes it: an outer run's file is not this lock's lease.
        env.push(("REDLOCK_LEASE_FILE", path.as_deref().unwrap_or_default()));
        let lease = Some(self.acquired.valid_until);
        let spawned = match self.parked.take() {
            // A subreaper since it parked (see `park`).
            Some(parked) => {
                let late =
                    LATE.map(|name| env.iter().find(|(n, _)| *n == name).map_or("", |v| v.1));
                start_parked(self.cfg, parked, late, lease, self.log)
            }
            None => {
                child::become_subreaper();
                let containment = self.containment.take();
                let containment = containment.map_or_else(|| contain(self.cfg), Ok);
                containment.and_then(|c| spawn(self.cfg, &env, lease, c, self.log))
            }
        };
        let job = spawned.inspect_err(|_| {
            file.inspect(|f| f.remove());
            self.release(main)
        })?;
        job.sweep_stale();
        Ok(job)
    }

    /// After COMMAND: release (or keep for `--min-hold`), and the exit code.
    /// `valid_until`: the end of the lease as last refreshed.
    fn finish(
        &self,
        main: &mut Locks,
        ended: crate::supervise::Ended,
        valid_until: Instant,
    ) -> Result<Exit, Failure> {
        if let (Some(why), None) = (&ended.local, ended.lost) {
            self.release(main);
            return Err(Failure {
                exit: Exit::LocalFailure,
                error: anyhow::anyhow!("{why}; COMMAND was stopped and the lock released"),
            });
        }
        match ended.lost {
            // With several keys, the others are still ours: given back.
            Some(Loss::Replaced | Loss::Gone) if main.len() > 1 => {
                self.release(main);
                return Ok(Exit::LockLost);
            }
            Some(Loss::Replaced | Loss::Gone) => return Ok(Exit::LockLost),
            // Revoked by force-release: the marker keeps waiters out until
            // we give it back, now that COMMAND has stopped.
            Some(Loss::Revoked | Loss::Superseded) => {
                self.release(main);
                return Ok(Exit::LockLost);
            }
            // Not confirmed is not known lost: give it back if we still can.
            Some(Loss::Unconfirmed | Loss::Suspended) => {
                main.release(1);
                return Ok(Exit::LockLost);
            }
            None => {}
        }
        if ended.keeper_killed {
            // Nothing of the job is left (the drain saw to it): the lock
            // goes back at once, no --min-hold for a job that was killed.
            self.release(main);
            return Ok(Exit::LockLost);
        }
        if !self.hold_on(main, valid_until, ended.max_hold) {
            self.release(main);
        }
        Ok(if ended.max_hold {
            Exit::MaxHold
        } else {
            ended.exit
        })
    }

    /// COMMAND's end seen by the kernel before the keeper reported it (see
    /// `Supervisor::early`): it ended of itself and nothing of it is left,
    /// so the lock goes back at once (no `--min-hold` here), and how it
    /// ended is read from the keeper while the release is on its way.
    fn finish_early(&self, main: &mut Locks, early: Box<Early>) -> Exit {
        let settled = std::rc::Rc::new(std::cell::Cell::new(None));
        let into = settled.clone();
        crate::lock::while_sent(Box::new(move || into.set(Some(early.settle()))));
        self.release(main);
        // Done by the release's round, or here if no round was made.
        crate::lock::sent_or_now();
        settled.take().unwrap_or(Exit::LocalFailure)
    }

    /// `--min-hold`: if COMMAND ended early, keep the lock until `min-hold`
    /// after acquiring it, by setting its expiry to the rest. Whether it did.
    ///
    /// The acquire connection has been idle while COMMAND ran, and the
    /// server may have closed it (its `timeout`): a failed re-arm is tried
    /// again on a new connection, a few times, while the lease (ending at
    /// `valid_until`) still holds. A job that `--max-hold` stopped gets no
    /// hold on top (`max_hold`).
    fn hold_on(&self, main: &mut Locks, valid_until: Instant, max_hold: bool) -> bool {
        let key = &self.cfg.key;
        let held = || self.acquired.acquired_at.elapsed();
        let rest = || plan::min_hold_rest(self.cfg.min_hold, held(), max_hold);
        let mut pauses = MIN_HOLD_RETRIES.iter();
        let ended = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
        while let Some(rest) = rest() {
            let error = match main.extend_for(rest, Some(&ended)) {
                Extend::Extended(_) => {
                    self.log.emit(
                        Ev::MinHold,
                        format!("keeping lock '{key}' for {} more (--min-hold)", show(rest)),
                        &[ms("hold_ms", rest)],
                    );
                    return true;
                }
                Extend::Lost(_) => {
                    self.log.warn(format!(
                        "lock '{key}' was already gone at exit; --min-hold cannot keep it"
                    ));
                    return true;
                }
                Extend::Failed(e) => e,
            };
            let retry_at = pauses.next();
            let retry_at =
                retry_at.and_then(|p| plan::min_hold_retry(Instant::now(), *p, valid_until));
            let Some(at) = retry_at else {
                self.log.warn(format!(
                    "cannot keep lock '{key}' for --min-hold ({error:#}); releasing it"
                ));
                return false;
            };
            std::thread::sleep(at.saturating_duration_since(Instant::now()));
        }
        false
    }

    /// Release every key on every node, and say so if anything was not
    /// as expected.
    fn release(&self, main: &mut Locks) {
        for done in main.release(3) {
            self.released(done);
        }
    }

    /// What the release of one key found, said.
    fn released(&self, done: KeyReleased) {
        let key = done.key;
        // Named by the key it is about (with several, the run's name is all of them).
        let log = self.log.for_key(key);
        let lost = done.released.majority_lost(done.nodes, done.needed);
        let crate::lock::Released {
            ours,
            replaced,
            gone,
            unanswered,
            errors,
        } = done.released;
        if replaced > 0 && !lost {
            log.info(format!(
                "lock '{key}' was held by another token on {replaced} of {} nodes at release \
                 (a minority: a majority still held it)",
                done.nodes
            ));
        } else if replaced > 0 {
            log.emit(
                Ev::ReleaseFailed,
                format!(
                    "lock '{key}' was held by another token at release and was left alone; \
                     COMMAND may have run unprotected since the last refresh"
                ),
                &[field("error", "replaced")],
            );
        } else if ours == 0 && unanswered == 0 && gone > 0 {
            log.emit(
                Ev::ReleaseFailed,
                format!("lock '{key}' had already expired at release"),
                &[field("error", "expired")],
            );
        }
        for e in errors {
            log.emit(
                Ev::ReleaseFailed,
                format!("could not release lock '{key}' ({e:#}); its TTL will clean up"),
                &[field("error", format!("{e:#}"))],
            );
        }
        if ours > 0 {
            log.emit(Ev::Released, format!("released lock '{key}'"), &[]);
        } else if unanswered > 0 {
            // Not "expired": the lease still held when COMMAND ended.
            log.emit(
                Ev::Released,
                format!(
                    "released lock '{key}' (a release's reply was lost; the next try found \
                     it gone or taken by the next holder)"
                ),
                &[],
            );
        }
    }
}

/// `REDLOCK_MODE`: how COMMAND holds KEY.
fn mode(cfg: &RunConfig) -> &'static str {
    match cfg.shared {
        true => "shared",
        false => "exclusive",
    }
}

/// A nested run: the outer run holds the lock and refreshes it; COMMAND
/// runs at once under it, with the outer run's REDLOCK_* variables, and
/// nothing is released when it ends.
fn run_nested(cfg: &RunConfig, signals: &Signals, log: &Log) -> Result<Exit, Failure> {
    nested_options(cfg)?;
    let fence = std::env::var("REDLOCK_FENCE").unwrap_or_default();
    log.emit(
        Ev::Nested,
        format!(
            "lock '{}' is held by the run this one is nested in (fence {fence}); running COMMAND under it",
            cfg.key
        ),
        &[field("fence", fence.parse::<i64>().ok())],
    );
    run_without_lease(cfg, &[], signals, log)
}

/// A nested run neither refreshes nor watches the lock (the outer run
/// does, and stops this COMMAND with its own): its own `--on-lost` could
/// never fire, and `--lease-file` can only be the outer run's. Either
/// is honoured or refused, never dropped in silence.
fn nested_options(cfg: &RunConfig) -> Result<(), Failure> {
    let outer_file = std::env::var_os("REDLOCK_LEASE_FILE").is_some_and(|f| !f.is_empty());
    let refused = match (&cfg.on_lost, cfg.lease_file && !outer_file) {
        (Some(_), _) => {
            "--on-lost: the run this one is nested in holds the lock and stops \
                         this COMMAND if it loses it; give --on-lost to that run"
        }
        (None, true) => {
            "--lease-file: the run this one is nested in holds the lock and was \
                         started without --lease-file; give it to that run"
        }
        (None, false) => return Ok(()),
    };
    Err(Failure {
        exit: Exit::Usage,
        error: anyhow::anyhow!("lock '{}' is held by an outer run: {refused}", cfg.key),
    })
}

/// `--on-unavailable run`: COMMAND without a lock, so without a token or
/// a fence, whatever our environment had (inside another key's COMMAND,
/// that lock's): a fence it does not hold would pass fenced storage.
fn run_unlocked(cfg: &RunConfig, signals: &Signals, log: &Log) -> Result<Exit, Failure> {
    let vars = keyset::env_of(&cfg.keys, &[], &[]);
    let mut env: Vec<(&str, &str)> = vars.iter().map(|(n, v)| (*n, v.as_str())).collect();
    env.push(("REDLOCK_LEASE_FILE", ""));
    env.push(("REDLOCK_MODE", ""));
    run_without_lease(cfg, &env, signals, log)
}

/// COMMAND supervised with no lease of its own to enforce (`--max-hold`
/// still applies).
fn run_without_lease(
    cfg: &RunConfig,
    env: &[(&str, &str)],
    signals: &Signals,
    log: &Log,
) -> Result<Exit, Failure> {
    child::become_subreaper();
    let job = spawn(cfg, env, None, contain(cfg)?, log)?;
    let ended = Supervisor::new(job, signals, log, cfg.timing.kill_after)
        .max_hold(cfg.max_hold)
        .warn(cfg.warning, None)
        .run();
    Ok(if ended.max_hold {
        Exit::MaxHold
    } else {
        ended.exit
    })
}

/// How COMMAND's tree will be held, as `--contain` asks: a local failure
/// (exit 71) when it asks for more than this host allows.
fn contain(cfg: &RunConfig) -> Result<Containment, Failure> {
    Containment::choose(cfg.contain).map_err(|why| Failure {
        exit: Exit::LocalFailure,
        error: anyhow::anyhow!("{why}; COMMAND did not run"),
    })
}

/// Start COMMAND, its tree held by `containment` (said under `-v`).
/// `lease_end`: the lease as acquired, for the keeper's watchdog.
fn spawn(
    cfg: &RunConfig,
    env: &[(&str, &str)],
    lease_end: Option<Instant>,
    containment: Containment,
    log: &Log,
) -> Result<Job, Failure> {
    contained(log, containment.name(), &containment.describe());
    child::spawn(&cfg.argv, env, lease_end, containment).map_err(|e| spawn_failure(cfg, e))
}

/// COMMAND's variables known before the lock is ours (the parked start's
/// too: see [`park`]); the token and fence come with the lock.
fn command_env(cfg: &RunConfig) -> Vec<(&'static str, &str)> {
    vec![("REDLOCK_MODE", mode(cfg))]
}

/// The variables a parked start is given once the lock is ours (see
/// `keyset::env_of`); its key's are known before (one key only).
const LATE: [&str; 4] = [
    "REDLOCK_TOKEN",
    "REDLOCK_FENCE",
    "REDLOCK_TOKENS",
    "REDLOCK_FENCES",
];

/// Before the first attempt: COMMAND's start made ready, up to its exec,
/// so that neither the acquire nor a hand-over waits for it (see
/// child/park.rs). Not with `--lease-file` (the file is made once the
/// lock is ours). A start that cannot be made ready is left to the usual
/// path, which says what is wrong.
fn park(cfg: &RunConfig, containment: &mut Option<Containment>) -> Option<child::Parked> {
    if cfg.lease_file || cfg.keys.len() > 1 {
        return None;
    }
    let mut env = command_env(cfg);
    env.extend([
        ("REDLOCK_KEY", cfg.key.as_str()),
        ("REDLOCK_KEYS", &cfg.key),
    ]);
    // Empty removes it: an outer run's file is not this lock's lease.
    env.push(("REDLOCK_LEASE_FILE", ""));
    child::become_subreaper();
    child::park(&cfg.argv, &env, &LATE, containment.take()?).ok()
}

/// Start a parked COMMAND with its token and fence (see [`park`]).
fn start_parked(
    cfg: &RunConfig,
    parked: child::Parked,
    late: [&str; 4],
    lease_end: Option<Instant>,
    log: &Log,
) -> Result<Job, Failure> {
    let (name, line) = parked.contained();
    contained(log, name, line);
    parked
        .start(&late, lease_end)
        .map_err(|e| spawn_failure(cfg, e))
}

/// Say how COMMAND's tree is held (under `-v`).
fn contained(log: &Log, name: &str, line: &str) {
    log.emit(
        Ev::Contained,
        format!("COMMAND's tree is held by {line}"),
        &[field("contain", name.to_string())],
    );
}

/// COMMAND could not be started: its exit code and message.
fn spawn_failure(cfg: &RunConfig, e: child::Failed) -> Failure {
    let exit = child::spawn_error_exit(&e);
    let program = cfg.argv.first().map(|p| p.to_string_lossy());
    Failure {
        exit,
        error: anyhow::Error::new(e)
            .context(format!("cannot run '{}'", program.unwrap_or_default())),
    }
}
