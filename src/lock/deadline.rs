//! One deadline per exchange with a server, not a timeout per read.
//!
//! redis-rs bounds each `read()` by the socket's timeout, so a server (or
//! a proxy) that trickles its reply a byte at a time, each byte sooner
//! than the timeout, holds a command forever; and it does not let us
//! reach the socket to shorten that timeout as the deadline nears. So
//! each exchange arms a POSIX timer of its own thread (`timer_create`
//! with `SIGEV_THREAD_ID`: no thread of ours) that sends [`SIGNAL`] to
//! that thread at the deadline, and again every few milliseconds until
//! the exchange ends (one that arrived between two reads interrupts
//! nothing). The signal's handler does nothing and is installed without
//! `SA_RESTART`, so the blocked read fails with EINTR, and the exchange
//! with it. The caller then drops the connection, as after any failure:
//! the stream may still carry the rest of a reply.
//!
//! Where a timer cannot be had (the handler, a timer), an exchange stays
//! bounded per read, as redis-rs does on its own.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nix::libc;
use redis::RedisError;

/// The signal that interrupts an exchange past its deadline. Ignored by
/// default and sent by nothing else we know of (Go's runtime uses it the
/// same way); COMMAND gets the default disposition back at exec.
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
    let result = armed.judge(exchange());
    armed.disarm();
    result
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
    /// The kernel's id of this thread's timer, if one could be made.
    timer: Option<libc::c_int>,
    deadline: Option<Instant>,
    limit: Duration,
}

impl Armed {
    /// Watch this thread's exchange from now on, for `limit`.
    pub fn new(limit: Duration) -> Armed {
        let deadline = Instant::now().checked_add(limit);
        let timer = match deadline.is_some() && handler_installed() {
            true => arm(limit),
            false => None,
        };
        Armed {
            timer,
            deadline,
            limit,
        }
    }

    /// Stop watching; whether the deadline passed while it ran (its
    /// blocking calls were interrupted).
    pub fn disarm(mut self) -> bool {
        self.delete();
        self.passed()
    }

    /// Whether the deadline has passed. Taken before the timer was set,
    /// it is never later than the timer's first signal: a call that
    /// signal interrupted is always past it, however long this thread
    /// waited between arming and reading (a second clock reading taken
    /// after arming could be later, and call that interruption a signal
    /// from elsewhere: CI, stop 54, at nice 19 on a loaded machine).
    fn passed(&self) -> bool {
        self.deadline.is_some_and(|at| Instant::now() >= at)
    }

    /// `result` of the exchange watched, as its caller is to see it: an
    /// I/O error past the deadline (its blocking call interrupted) is a
    /// timeout. A timeout of its own (a name lookup's) says more.
    pub fn judge<T>(&self, result: Result<T, RedisError>) -> Result<T, RedisError> {
        match result {
            Err(e) if e.is_io_error() && !e.is_timeout() && self.passed() => {
                Err(overrun(self.limit))
            }
            other => other,
        }
    }

    fn delete(&mut self) {
        if let Some(id) = self.timer.take() {
            // SAFETY: our own timer, deleted once; a signal it queued just
            // before is handled on the way out of this call (it does nothing).
            unsafe { libc::syscall(libc::SYS_timer_delete, libc::c_long::from(id)) };
        }
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        self.delete();
    }
}

/// The kernel's `struct sigevent` (64 bytes), for `SIGEV_THREAD_ID`: libc
/// wrappers differ on how they spell the thread id (musl's, glibc's), so
/// the system call is made directly.
#[repr(C)]
struct KernelSigevent {
    value: u64,
    signo: libc::c_int,
    notify: libc::c_int,
    thread_id: libc::c_int,
    pad: [libc::c_int; 11],
}

/// Linux's `SIGEV_THREAD_ID`: signal the thread named in the event.
const SIGEV_THREAD_ID: libc::c_int = 4;

/// A timer that signals this thread after `limit`, then every [`AGAIN`].
fn arm(limit: Duration) -> Option<libc::c_int> {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) };
    let event = KernelSigevent {
        value: 0,
        signo: SIGNAL,
        notify: SIGEV_THREAD_ID,
        thread_id: libc::c_int::try_from(tid).ok()?,
        pad: [0; 11],
    };
    let mut id: libc::c_int = 0;
    // SAFETY: both pointers are valid for the call; the kernel fills `id`.
    let made = unsafe {
        libc::syscall(
            libc::SYS_timer_create,
            // Variadic: every argument as a whole register (a long).
            libc::c_long::from(libc::CLOCK_MONOTONIC),
            &event as *const KernelSigevent,
            &mut id as *mut libc::c_int,
        )
    };
    if made != 0 {
        return None;
    }
    // A zero first expiry would disarm the timer: at least 1 ns.
    let spec = libc::itimerspec {
        it_interval: timespec(AGAIN),
        it_value: timespec(limit.max(Duration::from_nanos(1))),
    };
    let flags: libc::c_long = 0;
    // SAFETY: our timer, a valid itimerspec, no old value asked for.
    let set = unsafe {
        libc::syscall(
            libc::SYS_timer_settime,
            libc::c_long::from(id),
            flags,
            &spec as *const libc::itimerspec,
            std::ptr::null_mut::<libc::itimerspec>(),
        )
    };
    if set != 0 {
        // SAFETY: our timer, deleted once.
        unsafe { libc::syscall(libc::SYS_timer_delete, libc::c_long::from(id)) };
        return None;
    }
    Some(id)
}

// `time_t` is deprecated in the libc crate's musl targets only (it becomes
// 64-bit there); it is the field's type in every target.
#[allow(deprecated)]
fn timespec(d: Duration) -> libc::timespec {
    libc::timespec {
        tv_sec: libc::time_t::try_from(d.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(d.subsec_nanos()),
    }
}

extern "C" fn interrupt(_: libc::c_int) {}

/// The handler of [`SIGNAL`], installed once; whether it is.
fn handler_installed() -> bool {
    static INSTALLED: OnceLock<bool> = OnceLock::new();
    *INSTALLED.get_or_init(|| {
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
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::net::UnixStream;

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

    /// A read the timer interrupted is past the deadline, however late
    /// the thread came to it after arming (preempted at nice 19 on a busy
    /// host): the round's reply is then a timeout, never "Interrupted".
    #[test]
    fn an_interrupted_read_is_past_the_deadline_however_late_it_began() {
        let (mut ours, _theirs) = UnixStream::pair().expect("socketpair");
        ours.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let armed = Armed::new(Duration::from_millis(20));
        std::thread::sleep(Duration::from_millis(60));
        let mut byte = [0u8; 1];
        let read = ours.read(&mut byte).expect_err("nothing was sent");
        assert_eq!(read.kind(), std::io::ErrorKind::Interrupted, "{read}");
        assert!(armed.passed());
        assert!(armed.disarm());
    }

    /// An exchange that ends in time is not touched, and later calls of
    /// the thread are not interrupted.
    #[test]
    fn an_exchange_in_time_is_left_alone() {
        let (mut ours, mut theirs) = UnixStream::pair().expect("socketpair");
        std::io::Write::write_all(&mut theirs, b"y").expect("write");
        let got: Result<u8, RedisError> = within(Duration::from_secs(5), || {
            let mut byte = [0u8; 1];
            let n = ours.read(&mut byte)?;
            Ok(byte[..n].first().copied().unwrap_or_default())
        });
        assert_eq!(got.ok(), Some(b'y'));
        ours.set_read_timeout(Some(Duration::from_millis(100)))
            .expect("timeout");
        let mut byte = [0u8; 1];
        let late = ours.read(&mut byte).expect_err("nothing more came");
        assert_eq!(late.kind(), std::io::ErrorKind::WouldBlock, "{late}");
        // A limit too large for a deadline arms nothing.
        assert!(!Armed::new(Duration::MAX).disarm());
    }
}
