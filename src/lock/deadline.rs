//! One deadline per exchange with a server, not a timeout per read.
//!
//! redis-rs bounds each `read()` by the socket's timeout, so a server (or
//! a proxy) that trickles its reply a byte at a time, each byte sooner
//! than the timeout, holds a command forever; and it does not let us
//! reach the socket to shorten that timeout as the deadline nears. So a
//! watchdog thread interrupts the thread of an exchange that outlives its
//! deadline: `pthread_kill` with [`SIGNAL`], whose handler does nothing
//! and is installed without `SA_RESTART`, so the blocked read fails with
//! EINTR and the exchange fails with it. The signal is sent again every
//! few milliseconds until the exchange has ended (one that arrived between
//! two reads interrupts nothing). The caller then drops the connection,
//! as after any failure: the stream may still carry the rest of a reply.
//!
//! What cannot be set up (the handler, the thread) leaves exchanges bounded
//! per read, as redis-rs does on its own.

use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use nix::libc;
use redis::RedisError;

/// The signal that interrupts an exchange past its deadline. Ignored by
/// default and sent by nothing else we know of (Go's runtime uses it the
/// same way); never caught by COMMAND, which gets default dispositions.
pub const SIGNAL: i32 = libc::SIGURG;

/// How often an exchange past its deadline is interrupted again.
const AGAIN: Duration = Duration::from_millis(5);

/// Run `exchange` (a command and its whole reply, or a connection with its
/// handshake) on this thread within `limit`: past it, the exchange's
/// blocking calls fail, and an I/O error it returns becomes a timeout.
pub fn within<T>(
    limit: Duration,
    exchange: impl FnOnce() -> Result<T, RedisError>,
) -> Result<T, RedisError> {
    let armed = Armed::new(limit);
    let result = exchange();
    let fired = armed.disarm();
    match result {
        // A timeout of its own (a name lookup's) says more.
        Err(e) if fired && e.is_io_error() && !e.is_timeout() => Err(overrun(limit)),
        other => other,
    }
}

/// `cmd` on a plain connection, its whole reply within `limit`.
pub fn query<T: redis::FromRedisValue>(
    cmd: &redis::Cmd,
    conn: &mut redis::Connection,
    limit: Duration,
) -> Result<T, RedisError> {
    within(limit, || cmd.query(conn))
}

/// The error of an exchange that outlived its deadline.
pub fn overrun(limit: Duration) -> RedisError {
    let message = format!(
        "timed out: no whole reply within {}",
        humantime::format_duration(limit)
    );
    std::io::Error::new(std::io::ErrorKind::TimedOut, message).into()
}

/// An exchange being watched, until [`Armed::disarm`] (or drop).
pub struct Armed {
    id: Option<u64>,
}

impl Armed {
    /// Watch this thread's exchange from now on, for `limit`.
    pub fn new(limit: Duration) -> Armed {
        let Some(at) = Instant::now().checked_add(limit) else {
            return Armed { id: None };
        };
        if !started() {
            return Armed { id: None };
        }
        let mut watch = state();
        watch.next_id += 1;
        let id = watch.next_id;
        watch.armed.push(Entry {
            id,
            // SAFETY: no preconditions; the id is this thread's own, and
            // this thread cannot end before `disarm` (drop) removes it.
            thread: Thread(unsafe { libc::pthread_self() }),
            at,
            fired: false,
        });
        if watch.sleeping_until.is_none_or(|until| at < until) {
            WAKE.notify_one();
        }
        Armed { id: Some(id) }
    }

    /// Stop watching; whether the deadline passed while it ran (its
    /// blocking calls were interrupted).
    pub fn disarm(mut self) -> bool {
        self.remove()
    }

    fn remove(&mut self) -> bool {
        let Some(id) = self.id.take() else {
            return false;
        };
        let mut watch = state();
        match watch.armed.iter().position(|e| e.id == id) {
            Some(i) => watch.armed.swap_remove(i).fired,
            None => false,
        }
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        self.remove();
    }
}

/// A thread's `pthread_t`: a number on glibc, a pointer on musl (so not
/// `Send` there, and the static list below needs it to be).
struct Thread(libc::pthread_t);

// SAFETY: the handle is only an id, passed to `pthread_kill` from the
// watchdog while the thread it names is alive (see `watchdog`); nothing
// is read or written through it.
unsafe impl Send for Thread {}

struct Entry {
    id: u64,
    thread: Thread,
    at: Instant,
    fired: bool,
}

#[derive(Default)]
struct Watch {
    armed: Vec<Entry>,
    next_id: u64,
    /// When the watchdog wakes next (`None`: when told).
    sleeping_until: Option<Instant>,
}

static WATCH: Mutex<Watch> = Mutex::new(Watch {
    armed: Vec::new(),
    next_id: 0,
    sleeping_until: None,
});
static WAKE: Condvar = Condvar::new();

fn state() -> MutexGuard<'static, Watch> {
    // Nothing is left half-done under this lock: a panic elsewhere does
    // not make the list wrong.
    WATCH
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The handler and the watchdog, set up once; whether both are there.
fn started() -> bool {
    static STARTED: OnceLock<bool> = OnceLock::new();
    *STARTED.get_or_init(|| {
        install_handler()
            && std::thread::Builder::new()
                .name("deadline".into())
                .spawn(watchdog)
                .is_ok()
    })
}

extern "C" fn interrupt(_: libc::c_int) {}

fn install_handler() -> bool {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let Ok(signal) = Signal::try_from(SIGNAL) else {
        return false;
    };
    // No SA_RESTART: the interrupted read must fail, not start over.
    let action = SigAction::new(
        SigHandler::Handler(interrupt),
        SaFlags::empty(),
        SigSet::empty(),
    );
    // SAFETY: the handler does nothing, so it is async-signal-safe.
    unsafe { sigaction(signal, &action) }.is_ok()
}

/// Interrupt every exchange past its deadline, again every [`AGAIN`]
/// until it ends; sleep until the next deadline otherwise.
fn watchdog() {
    crate::signals::block_in_this_thread();
    let mut watch = state();
    loop {
        let now = Instant::now();
        for entry in watch.armed.iter_mut().filter(|e| e.at <= now) {
            entry.fired = true;
            // SAFETY: the thread is alive: it removes its entry (under
            // this lock) before it can end.
            unsafe { libc::pthread_kill(entry.thread.0, SIGNAL) };
        }
        let next = next_wake(watch.armed.iter().map(|e| (e.at, e.fired)), now);
        watch.sleeping_until = next;
        watch = match next {
            Some(at) => {
                let wait = at.saturating_duration_since(now);
                WAKE.wait_timeout(watch, wait)
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .0
            }
            None => WAKE
                .wait(watch)
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        };
    }
}

/// When the watchdog must look again: at the earliest deadline, or
/// [`AGAIN`] from `now` for an exchange interrupted already.
fn next_wake(deadlines: impl Iterator<Item = (Instant, bool)>, now: Instant) -> Option<Instant> {
    deadlines
        .map(|(at, fired)| if fired { now + AGAIN } else { at })
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::net::UnixStream;

    #[test]
    fn the_watchdog_wakes_at_the_first_deadline_or_soon_after_a_fired_one() {
        let now = Instant::now();
        let s = Duration::from_secs(1);
        assert_eq!(next_wake(std::iter::empty(), now), None);
        assert_eq!(
            next_wake([(now + 2 * s, false), (now + s, false)].into_iter(), now),
            Some(now + s)
        );
        assert_eq!(
            next_wake([(now + s, false), (now, true)].into_iter(), now),
            Some(now + AGAIN)
        );
    }

    /// A peer that sends a byte every 20 ms, each well within the read
    /// timeout, cannot hold a read loop past the exchange's deadline.
    #[test]
    fn a_trickle_is_cut_at_the_deadline() {
        let (mut ours, theirs) = UnixStream::pair().expect("socketpair");
        ours.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let trickle = std::thread::spawn(move || {
            let mut theirs = theirs;
            for _ in 0..200 {
                if std::io::Write::write_all(&mut theirs, b"x").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        let start = Instant::now();
        // `read`, as redis-rs does (`read_exact` would retry on EINTR).
        let result: Result<(), RedisError> = within(Duration::from_millis(200), || {
            let mut byte = [0u8; 1];
            while ours.read(&mut byte)? > 0 {}
            Ok(())
        });
        let took = start.elapsed();
        drop(ours);
        let _ = trickle.join();
        let e = result.expect_err("the trickle ended the read");
        assert!(e.is_timeout(), "{e}");
        assert!(took < Duration::from_secs(2), "took {took:?}");
    }
}
