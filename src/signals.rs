//! The signals redlock-run reacts to, delivered on a self-pipe that the
//! main thread's loop polls (no thread of their own).
//!
//! - Forwarded: SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2. Before
//!   COMMAND runs they end a wait (128 + N); once it runs they are passed
//!   to its process group.
//! - Job control: SIGTSTP, SIGTTIN, SIGTTOU stop COMMAND's group with us;
//!   SIGCONT wakes the loop to check the lease before COMMAND continues.
//! - SIGCHLD is not caught: news of COMMAND comes from its keeper on a
//!   pipe (child/keeper.rs), and a handler would only interrupt blocking
//!   socket reads (a socket with a timeout is not restarted: EINTR) when
//!   the keeper exits.
//!
//! A stop and a continue that both arrive before the loop looks (the loop
//! was inside a Redis call) are told in the order they arrived, as the
//! kernel would have acted on them: a continue after a stop cancels it
//! (see [`Signals::fill`]). Acting on the stop then would leave us stopped
//! with nobody left to continue us.
//!
//! A signal that was ignored when redlock-run started (`nohup`, `cmd &` in
//! a script) is not caught: it stays ignored, for us and for COMMAND, as
//! flock and nohup users expect.
//!
//! The handler is ours, one per signal, installed once and never taken
//! down: it marks the signal's bit, notes when a stop or a continue came,
//! and writes a byte to the pipe (`SA_RESTART`, as signal-hook installs
//! its own). signal-hook's registry, used here before, keeps a table of
//! actions per signal for handlers that chain and come and go, and copies
//! the whole table at each registration: a fifth of the instructions of
//! a whole `-k K -- true` run (callgrind, 14 registrations) and 37
//! `sigaction` calls, for a process that installs ten handlers once.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, IntoRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::libc::{
    self, c_int, SIGCONT, SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGTSTP, SIGTTIN, SIGTTOU, SIGUSR1,
    SIGUSR2,
};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};

/// Passed on to COMMAND's process group.
pub const FORWARDED: [i32; 6] = [SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2];

/// Stop COMMAND with us.
pub const JOB_CONTROL: [i32; 3] = [SIGTSTP, SIGTTIN, SIGTTOU];

/// Every signal a handler of ours was installed for (bit N: signal N). A
/// child must put these back to the default before it can get a signal.
static CAUGHT: AtomicU64 = AtomicU64::new(0);

/// When the last job-control stop and the last SIGCONT arrived, as numbers
/// from [`ARRIVALS`] (0: never), so that [`Signals::fill`] can tell which
/// came last when both are pending at once (the self-pipe reports them in
/// signal-number order, not in order of arrival).
static ARRIVALS: AtomicU64 = AtomicU64::new(0);
static LAST_STOP: AtomicU64 = AtomicU64::new(0);
static LAST_CONT: AtomicU64 = AtomicU64::new(0);

/// Signals that arrived and were not taken yet (bit N: signal N).
static ARRIVED: AtomicU64 = AtomicU64::new(0);

/// The self-pipe's write end (-1: not made yet).
static WAKE: AtomicI32 = AtomicI32::new(-1);

/// The handler of every signal we catch: async-signal-safe (atomics and
/// one `write`), errno kept.
extern "C" fn on_signal(sig: c_int) {
    let errno = Errno::last_raw();
    let last = match sig {
        SIGCONT => Some(&LAST_CONT),
        s if JOB_CONTROL.contains(&s) => Some(&LAST_STOP),
        _ => None,
    };
    if let Some(last) = last {
        last.store(
            ARRIVALS.fetch_add(1, Ordering::SeqCst) + 1,
            Ordering::SeqCst,
        );
    }
    ARRIVED.fetch_or(1u64 << sig, Ordering::SeqCst);
    let fd = WAKE.load(Ordering::SeqCst);
    if fd >= 0 {
        // Nonblocking: a full pipe already wakes the loop.
        // SAFETY: one byte from a live buffer to a descriptor we own.
        let _ = unsafe { libc::write(fd, [1u8].as_ptr().cast(), 1) };
    }
    Errno::set_raw(errno);
}

/// Whether a continue arrived after the last stop request.
fn continued_since_stop() -> bool {
    LAST_CONT.load(Ordering::SeqCst) > LAST_STOP.load(Ordering::SeqCst)
}

/// [`CAUGHT`]: the signals with a handler of ours.
pub fn caught_mask() -> u64 {
    CAUGHT.load(Ordering::Relaxed)
}

/// What the loop is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A signal to pass on (or, before COMMAND runs, to stop for).
    Forward(i32),
    /// A job-control stop request.
    Stop(i32),
    /// We were continued after a stop.
    Continued,
}

/// The caught signals: poll [`Signals::fd`], then [`Signals::take`].
pub struct Signals {
    /// The self-pipe's read end (nonblocking).
    read: OwnedFd,
    /// Taken from the pipe but not yet handed out.
    queue: RefCell<VecDeque<Event>>,
}

impl Signals {
    /// Catch every signal of interest that is not ignored now. The pipe's
    /// write end lives as long as the process (the handlers stay).
    pub fn start() -> io::Result<Signals> {
        let caught: Vec<i32> = FORWARDED
            .iter()
            .chain(&JOB_CONTROL)
            .copied()
            .filter(|&sig| !ignored(sig))
            .chain([SIGCONT])
            .collect();
        // Children are waited for: an inherited "ignore" would reap them
        // behind our back.
        if ignored(libc::SIGCHLD) {
            // SAFETY: back to the default action; no handler is involved.
            unsafe { libc::signal(libc::SIGCHLD, libc::SIG_DFL) };
        }
        let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
        // A second start (none today) leaves the first pipe's end open: a
        // handler on another thread may still be writing to it.
        WAKE.store(write.into_raw_fd(), Ordering::SeqCst);
        let action = SigAction::new(
            SigHandler::Handler(on_signal),
            SaFlags::SA_RESTART,
            SigSet::empty(),
        );
        for &sig in &caught {
            let sig = Signal::try_from(sig).map_err(io::Error::from)?;
            // SAFETY: the handler is async-signal-safe (see `on_signal`).
            unsafe { sigaction(sig, &action) }.map_err(io::Error::from)?;
        }
        let mask = caught.iter().fold(0u64, |mask, &sig| mask | 1 << sig);
        CAUGHT.fetch_or(mask, Ordering::Relaxed);
        Ok(Signals {
            read,
            queue: RefCell::default(),
        })
    }

    /// Readable when a signal has arrived.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.read.as_fd()
    }

    /// Everything that arrived, without blocking.
    pub fn take(&self) -> Vec<Event> {
        self.fill();
        self.queue.borrow_mut().drain(..).collect()
    }

    /// A forwarded signal that arrived and was not handled yet, if any.
    /// Job-control stops are obeyed on the spot (we are not running
    /// COMMAND yet); continue notices are dropped.
    pub fn pending(&self) -> Option<i32> {
        self.fill();
        loop {
            let event = self.queue.borrow_mut().pop_front()?;
            match event {
                Event::Forward(sig) => return Some(sig),
                Event::Stop(_) => stop_self(),
                Event::Continued => {}
            }
        }
    }

    /// Sleep for up to `d`; a forwarded signal ends the sleep and is returned.
    pub fn sleep(&self, d: Duration) -> Option<i32> {
        let end = Instant::now() + d;
        loop {
            if let Some(sig) = self.pending() {
                return Some(sig);
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            wait_readable(self.fd(), left);
        }
    }

    /// Move what arrived into the queue. A stop request that a continue
    /// followed is dropped: the kernel discards a pending stop when
    /// SIGCONT arrives, and obeying it now would stop us with nobody left
    /// to continue us (chaos seed 20261206, episode 354: a waiter stopped
    /// and continued while inside a Redis call stayed stopped for good).
    fn fill(&self) {
        // The pipe first, then the bits: a signal between the two leaves
        // its byte for the next poll, never a bit without a byte.
        let mut buf = [0u8; 64];
        // SAFETY: reads into a live buffer of its length.
        while unsafe { libc::read(self.read.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) } > 0 {
        }
        let arrived = ARRIVED.swap(0, Ordering::SeqCst);
        let mut queue = self.queue.borrow_mut();
        let mut continued = false;
        for sig in (1..64).filter(|sig| arrived & 1 << sig != 0) {
            continued |= sig == SIGCONT;
            queue.push_back(match sig {
                SIGCONT => Event::Continued,
                s if JOB_CONTROL.contains(&s) => Event::Stop(s),
                s => Event::Forward(s),
            });
        }
        // Both at once: signal-number order tells SIGCONT first, which is
        // right when the stop came last; when the continue came last, the
        // stop is void.
        if continued && continued_since_stop() {
            queue.retain(|e| !matches!(e, Event::Stop(_)));
        }
    }
}

/// A waiting run's and `wait KEY`'s waits end with a forwarded signal.
impl crate::lock::Interrupts for Signals {
    fn pending(&self) -> Option<i32> {
        Signals::pending(self)
    }
    fn sleep(&self, d: Duration) -> Option<i32> {
        Signals::sleep(self, d)
    }
}

/// Block until `fd` is readable or `timeout` passes (EINTR ends it too).
pub fn wait_readable(fd: BorrowedFd<'_>, timeout: Duration) -> bool {
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
    poll(&mut fds, poll_timeout(timeout)).is_ok_and(|n| n > 0)
}

/// A poll timeout, rounded up to whole milliseconds so that a wake-up is
/// never early, and capped at what poll takes.
pub fn poll_timeout(d: Duration) -> PollTimeout {
    let ms = d.as_micros().div_ceil(1000);
    PollTimeout::try_from(i32::try_from(ms).unwrap_or(i32::MAX)).unwrap_or(PollTimeout::MAX)
}

/// Stop this process (as the default action of SIGTSTP would, which we
/// replaced by catching it). Returns once we are continued, or at once
/// when a SIGCONT already came after the last stop request (it would have
/// cancelled that stop had we not caught it).
pub fn stop_self() {
    if !continued_since_stop() {
        let _ = nix::sys::signal::raise(Signal::SIGSTOP);
    }
}

/// Whether `sig` is ignored right now (as inherited from our parent).
pub fn ignored(sig: i32) -> bool {
    // SAFETY: a query only (no new action): nothing changes.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

/// For helper threads: block SIGTTOU (a write to a terminal that has
/// `stty tostop` set then goes through instead of stopping the process)
/// and every signal we catch (their handlers then run on the main thread,
/// and no blocking call of this thread fails with EINTR).
pub fn block_in_this_thread() {
    let mut set = SigSet::empty();
    for sig in FORWARDED.iter().chain(&JOB_CONTROL).chain(&[SIGCONT]) {
        if let Ok(sig) = Signal::try_from(*sig) {
            set.add(sig);
        }
    }
    let _ = set.thread_block();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_timeouts_round_up() {
        assert_eq!(
            poll_timeout(Duration::from_micros(1)),
            PollTimeout::try_from(1).unwrap()
        );
        assert_eq!(poll_timeout(Duration::ZERO), PollTimeout::ZERO);
        assert_eq!(
            poll_timeout(Duration::from_secs(u64::MAX)),
            PollTimeout::MAX
        );
    }
}
