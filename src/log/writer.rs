//! The one writer of redlock-run's own stderr lines: a thread with a
//! bounded queue, so that no other thread ever blocks on stderr.
//!
//! A stalled reader (a log shipper, a container runtime's blocking log
//! mode) or `stty tostop` with COMMAND in the foreground must not freeze
//! the thread that refreshes the lock or stops COMMAND. Lines are queued
//! without blocking; when the queue is full they are dropped and counted,
//! and the count is written once the reader catches up. The thread is
//! started by the first line, so a quiet run starts no thread at all.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Condvar, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// Lines that may wait for a slow reader before new ones are dropped.
const QUEUE: usize = 256;

struct Writer {
    queue: SyncSender<Vec<u8>>,
    /// Lines queued and not yet written; `flush` waits on `written`.
    pending: Mutex<usize>,
    written: Condvar,
    /// Lines dropped since the last report.
    dropped: AtomicU64,
}

static WRITER: OnceLock<Option<Writer>> = OnceLock::new();

/// Queue `line` (with its newline) for stderr; never blocks on the reader.
pub fn write(line: Vec<u8>) {
    let Some(writer) = writer() else {
        return write_now(&line);
    };
    *writer.count() += 1;
    match writer.queue.try_send(line) {
        Ok(()) => {}
        Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
            *writer.count() -= 1;
            writer.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// No thread could be started (out of processes): write the line here,
/// only if stderr takes it at once (never block: this thread may be the
/// one that must stop COMMAND on time).
fn write_now(line: &[u8]) {
    use std::os::fd::AsFd;
    let err = std::io::stderr();
    let mut fds = [nix::poll::PollFd::new(
        err.as_fd(),
        nix::poll::PollFlags::POLLOUT,
    )];
    let ready = nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO).unwrap_or(0);
    if ready > 0
        && fds[0]
            .revents()
            .is_some_and(|r| r.contains(nix::poll::PollFlags::POLLOUT))
    {
        let _ = err.lock().write_all(line);
    }
}

/// Wait up to `limit` for the queued lines to be written (at exit).
pub fn flush(limit: Duration) {
    let Some(Some(writer)) = WRITER.get() else {
        return;
    };
    let end = Instant::now() + limit;
    let mut pending = writer.count();
    while *pending > 0 {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        pending = writer
            .written
            .wait_timeout(pending, left)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
}

impl Writer {
    fn count(&self) -> std::sync::MutexGuard<'_, usize> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn writer() -> Option<&'static Writer> {
    WRITER.get_or_init(start).as_ref()
}

/// Start the writer thread; `None` (lines are dropped) if it cannot start.
fn start() -> Option<Writer> {
    let (queue, lines) = mpsc::sync_channel(QUEUE);
    std::thread::Builder::new()
        .name("stderr".into())
        .stack_size(64 * 1024)
        .spawn(move || run(lines))
        .ok()?;
    Some(Writer {
        queue,
        pending: Mutex::new(0),
        written: Condvar::new(),
        dropped: AtomicU64::new(0),
    })
}

fn run(lines: Receiver<Vec<u8>>) {
    // With `stty tostop` a background write raises SIGTTOU, which would
    // stop the whole process; blocked, the kernel lets the write through.
    crate::signals::block_in_this_thread();
    let mut reported = 0;
    for line in lines {
        let mut err = std::io::stderr().lock();
        // A closed stderr (`2>&-`, `| head`) is not a reason to die.
        let _ = err.write_all(&line);
        if let Some(Some(writer)) = WRITER.get() {
            let dropped = writer.dropped.load(Ordering::Relaxed);
            if dropped > reported {
                let note = format!(
                    "redlock-run: {} line(s) of this log were dropped: stderr was not being read\n",
                    dropped - reported
                );
                let _ = err.write_all(note.as_bytes());
                reported = dropped;
            }
            *writer.count() -= 1;
            writer.written.notify_all();
        }
    }
}
