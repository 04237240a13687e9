//! The refresher: a thread that keeps the lock alive while COMMAND runs,
//! on connections of its own, and tells the main thread what it learns.
//!
//! It never signals COMMAND and never waits on stderr: it only moves the
//! lease's deadline forward ([`SharedLease::valid_until`]) after each
//! confirmed refresh, and reports a loss. When it talks to Redis is the
//! plan's arithmetic (`plan.rs`). The main thread, which blocks on nothing
//! but `poll`, stops COMMAND when the deadline comes or a loss is reported
//! (see `supervise.rs`): signal first, talk later.

use std::io::{PipeReader, PipeWriter};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use crate::lock::timing::Timing;
use crate::lock::{listen, Extend, Fault, Heard, Interrupts, Locks, NodeError, Ownership, Wakeups};
use crate::log::{field, ms, Ev, Log};
pub use crate::plan::Loss;
use crate::plan::{self, Refresh};
use crate::warn::LeaseFile;

/// A loss as stored in `SharedLease` (0: none).
fn loss_from_code(code: u8) -> Option<Loss> {
    match code {
        1 => Some(Loss::Replaced),
        2 => Some(Loss::Gone),
        3 => Some(Loss::Revoked),
        4 => Some(Loss::Superseded),
        _ => None,
    }
}

/// What the refresher and the main thread share about the lease: its
/// end as last confirmed, and a loss found. (`lock::Lease` is what an
/// acquisition returns.)
pub struct SharedLease {
    /// Our clock's origin for `valid_until_ns`.
    base: Instant,
    valid_until_ns: AtomicU64,
    /// 0: held; else a [`Loss`] code.
    loss: AtomicU8,
    refresh_failures: AtomicU64,
    /// Held by the refresher while it talks to Redis; taken by `stop`.
    busy: Mutex<bool>,
    /// Set by `stop` before it waits for `busy`, or by `hush` once a loss
    /// was told: a refresh in flight then ends quietly (its failure is
    /// news to nobody).
    stopping: AtomicBool,
    /// Written to when a loss is found, to wake the main thread's poll.
    wake: PipeWriter,
    /// `--lease-file`: rewritten with every extension (see `warn.rs`).
    file: OnceLock<LeaseFile>,
}

/// The main thread's wake-up pipe (write end, read end), both nonblocking
/// and close-on-exec: one system call (a socket pair took three).
pub fn wake_pipe() -> std::io::Result<(PipeWriter, PipeReader)> {
    use nix::fcntl::OFlag;
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
    Ok((PipeWriter::from(write), PipeReader::from(read)))
}

impl SharedLease {
    /// A lease valid until `valid_until`; `wake` is the write end of the
    /// main thread's wake-up pipe.
    pub fn new(valid_until: Instant, wake: PipeWriter) -> Arc<SharedLease> {
        let base = Instant::now();
        let lease = SharedLease {
            base,
            valid_until_ns: AtomicU64::new(0),
            loss: AtomicU8::new(0),
            refresh_failures: AtomicU64::new(0),
            busy: Mutex::new(false),
            stopping: AtomicBool::new(false),
            wake,
            file: OnceLock::new(),
        };
        lease.extend_to(valid_until);
        Arc::new(lease)
    }

    /// Until when the lock is ours, by our monotonic clock.
    pub fn valid_until(&self) -> Instant {
        self.base + Duration::from_nanos(self.valid_until_ns.load(Ordering::SeqCst))
    }

    fn extend_to(&self, until: Instant) {
        let ns = until.saturating_duration_since(self.base).as_nanos();
        let ns = u64::try_from(ns).unwrap_or(u64::MAX);
        self.valid_until_ns.fetch_max(ns, Ordering::SeqCst);
        let lost = self.loss.load(Ordering::SeqCst) != 0;
        if let Some(file) = self.file.get().filter(|_| !lost) {
            // Best effort: the job reads it, the lock does not depend on it.
            let _ = file.write(self.valid_until());
        }
    }

    /// Keep `file` up to date from now on (the refresher writes it).
    pub fn keep_file(&self, file: LeaseFile) {
        let _ = self.file.set(file);
    }

    /// Remove the lease file, if any: once the refresher has stopped.
    pub fn remove_file(&self) {
        if let Some(file) = self.file.get() {
            file.remove();
        }
    }

    /// The loss has been told (or COMMAND has exited): a refresh that
    /// fails from now on says nothing.
    pub fn hush(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    /// A loss the refresher found, if any.
    pub fn loss(&self) -> Option<Loss> {
        loss_from_code(self.loss.load(Ordering::SeqCst))
    }

    /// Refreshes that failed (and were retried) so far.
    pub fn refresh_failures(&self) -> u64 {
        self.refresh_failures.load(Ordering::Relaxed)
    }

    fn lost(&self, loss: Loss) {
        let code = match loss {
            Loss::Replaced => 1,
            Loss::Revoked => 3,
            Loss::Superseded => 4,
            _ => 2,
        };
        self.loss.store(code, Ordering::SeqCst);
        // Nonblocking: a full pipe already holds a wake-up.
        let _ = std::io::Write::write(&mut &self.wake, b"!");
        // Then, not before (the stop comes first): the file no longer
        // promises the job time it does not have.
        if let Some(file) = self.file.get() {
            file.ended();
        }
    }
}

/// The lock being kept, as the refresher and the supervision loop name
/// it (its key; the keys, with several), with the run's log.
#[derive(Clone)]
pub struct Holding {
    pub key: String,
    pub log: Log,
}

/// A running refresher.
pub struct Refresher {
    stop: Sender<()>,
    lease: Arc<SharedLease>,
}

impl Refresher {
    /// Start refreshing `locks` (on connections of their own), named
    /// `holding`.
    pub fn start(
        mut locks: Locks,
        holding: Holding,
        lease: Arc<SharedLease>,
        timing: Timing,
    ) -> std::io::Result<Refresher> {
        let (stop, stopped) = mpsc::channel::<()>();
        let shared = Arc::clone(&lease);
        std::thread::Builder::new()
            .name("refresh".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                crate::signals::block_in_this_thread();
                refresh(&mut locks, &holding, &shared, timing, &stopped)
            })?;
        Ok(Refresher { stop, lease })
    }

    /// Stop refreshing: waits for a refresh in flight (at most one per-node
    /// timeout), so that none lands after this returns.
    pub fn stop(self) {
        self.lease.hush();
        let mut busy = self
            .lease
            .busy
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *busy = true;
        let _ = self.stop.send(());
    }
}

/// The refresher's loop: refresh every period, and at once whenever the
/// lock's channel says something (a force-release) or its connection drops
/// (a restart may have lost the lock); retry failures quickly; until
/// stopped or the lock is lost.
fn refresh(
    locks: &mut Locks,
    holding: &Holding,
    lease: &SharedLease,
    timing: Timing,
    stopped: &Receiver<()>,
) {
    let Holding { key, log } = holding;
    let confirmed = Refresh::Confirmed(lease.valid_until());
    let mut next = plan::refresh_at(&timing, confirmed, Instant::now());
    let mut watch = None;
    let mut unheard = Unheard::default();
    if let Some(soon) = unheard.subscribe(locks, &mut watch, timing.retry_every()) {
        next = next.min(soon);
    }
    loop {
        if !wait_for(next, &mut watch, stopped) {
            return;
        }
        let busy = lease.busy.lock().unwrap_or_else(PoisonError::into_inner);
        if *busy {
            return;
        }
        let extended = locks.extend();
        // Counted before `stop` can return: a run that ends on this
        // failure reports it (its metrics are read once `stop` returns).
        if matches!(extended, Extend::Failed(_)) {
            lease.refresh_failures.fetch_add(1, Ordering::Relaxed);
        }
        drop(busy);
        match extended {
            Extend::Extended(until) => {
                lease.extend_to(until);
                next = plan::refresh_at(&timing, Refresh::Confirmed(until), Instant::now());
                let refreshed = format!("refreshed lock '{key}'");
                log.emit(Ev::Refreshed, refreshed, &[ms("ttl_ms", timing.ttl)]);
                // The round mapped the binary's pages again: let them go
                // now, not when the main thread next wakes (it may sleep
                // until the lease's end; see child/trim.rs). Not once the
                // run is stopping: its release would fault them back in.
                if !lease.stopping.load(Ordering::SeqCst) {
                    crate::child::trim();
                }
                if let Some(soon) = unheard.subscribe(locks, &mut watch, timing.retry_every()) {
                    next = next.min(soon);
                }
            }
            Extend::Lost(why) => return lost(locks, lease, why, log),
            Extend::Failed(e) => {
                failed(lease, key, log, &e);
                next = plan::refresh_at(&timing, Refresh::Failed, Instant::now());
            }
        }
    }
}

/// The refresher's subscription to the lock's channels, made after the
/// lock was confirmed (at the start, and again after a refresh once one
/// dropped).
#[derive(Default)]
struct Unheard {
    /// A subscription could not be made since the last that was, and a
    /// refresh was brought forward for it already.
    forward: bool,
}

impl Unheard {
    /// Subscribe if `watch` has no subscription. One that the server
    /// broke while it was being made (killed, restarted: the `SUBSCRIBE`
    /// was taken and its confirmation never came) is one that dropped: a
    /// restart may have lost the lock unheard, so the next refresh is due
    /// within `soon` (returned), not at the plan's time, up to a refresh
    /// period later. Once per run of such failures: a server that keeps
    /// breaking subscriptions while it confirms refreshes costs one
    /// refresh, not one every `soon`. A refused one (NOPERM) is no news.
    fn subscribe(
        &mut self,
        locks: &Locks,
        watch: &mut Option<Wakeups>,
        soon: Duration,
    ) -> Option<Instant> {
        if watch.is_some() {
            return None;
        }
        match locks.watch() {
            Ok(subscribed) => {
                *watch = Some(subscribed);
                self.forward = false;
                None
            }
            Err(e) if broken(&e) && !self.forward => {
                self.forward = true;
                Some(Instant::now() + soon)
            }
            Err(_) => None,
        }
    }
}

/// Whether a subscription failed because the server went away or broke
/// the connection, rather than refused it.
fn broken(e: &anyhow::Error) -> bool {
    e.downcast_ref::<NodeError>()
        .is_some_and(|e| matches!(e.fault, Fault::Unreachable | Fault::Dropped))
}

/// A refresh that failed, said only while a retry can still matter: not
/// once the run stopped refreshing (COMMAND has exited), nor once the
/// lease has run out (the main thread tells that loss, once, and stops
/// COMMAND).
fn failed(lease: &SharedLease, key: &str, log: &Log, e: &anyhow::Error) {
    let news = !lease.stopping.load(Ordering::SeqCst) && Instant::now() < lease.valid_until();
    if news {
        log.emit(
            Ev::RefreshFailed,
            format!("refresh of lock '{key}' failed, retrying: {e:#}"),
            &[field("error", format!("{e:#}"))],
        );
    }
}

/// A lost lock: told to the main thread first (it stops COMMAND), then,
/// with several keys, which one it was.
/// A revoked key costs one read more, once the loss is certain (the
/// lease's own deadline stops COMMAND in time whatever it costs): revoked
/// by a newer run (`--replace-running`) or by an operator.
fn lost(locks: &mut Locks, lease: &SharedLease, why: Ownership, log: &Log) {
    let loss = match why {
        Ownership::Replaced => Loss::Replaced,
        Ownership::Revoked if locks.replaced() => Loss::Superseded,
        Ownership::Revoked => Loss::Revoked,
        _ => Loss::Gone,
    };
    lease.lost(loss);
    if let Some(key) = locks.lost_key() {
        log.warn(format!(
            "lock '{key}' {} (one of the keys this run holds: all are given back)",
            loss.why()
        ));
    }
}

/// Wait until `next`, or less when the watch hears something or drops.
/// False once stopped. One blocking read of the watch until `next`, not a
/// loop of short ones: an idle holder wakes only to refresh (2,000 holders
/// woke 20,000 times a second with 100 ms slices, a third of a core). A
/// stop is noticed at the next wake-up at the latest; nothing waits for
/// it meanwhile, and no refresh follows it (see [`Refresher::stop`]).
fn wait_for(next: Instant, watch: &mut Option<Wakeups>, stopped: &Receiver<()>) -> bool {
    let heard = listen(watch, next, stopped);
    !matches!(heard, Heard::Interrupted(_)) && Interrupts::pending(stopped).is_none()
}

/// The refresher's thread blocks signals: only a stop ends its wait, and
/// only when it wakes (its reads last until the next refresh).
impl Interrupts for Receiver<()> {
    fn pending(&self) -> Option<i32> {
        match self.try_recv() {
            Err(TryRecvError::Empty) => None,
            Ok(()) | Err(TryRecvError::Disconnected) => Some(0),
        }
    }
    fn sleep(&self, d: Duration) -> Option<i32> {
        match self.recv_timeout(d) {
            Err(RecvTimeoutError::Timeout) => None,
            Ok(()) | Err(RecvTimeoutError::Disconnected) => Some(0),
        }
    }
    fn during_reads(&self) -> bool {
        false
    }
}
