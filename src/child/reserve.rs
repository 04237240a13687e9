//! One file descriptor kept in reserve for the walk of COMMAND's tree.
//!
//! Without a cgroup, what COMMAND left behind is named from /proc, one file
//! at a time, and each read needs a descriptor. A wrapper held to its
//! descriptor limit (`ulimit -n`, a leak in a library, the campaign's
//! `fd-limit` fault) could then see nothing at the moment it must name the
//! job's processes to stop them before the lock is released (the chaos
//! campaign's F21). So a run keeps one descriptor from its start, a low
//! one (the limit counts descriptor numbers), and gives it up for a walk
//! that found the table full: the walk's one file at a time takes its
//! slot, and it is taken back afterwards. Servers keep one the same way
//! for `accept`.
//!
//! Another thread can take the freed slot first (a reconnect): the walk
//! then fails as before and says it cannot count, which is the safe
//! answer (see `descendants` in mod.rs).

use std::fs::File;
use std::sync::Mutex;

static RESERVE: Mutex<Option<File>> = Mutex::new(None);

/// Take the reserve, once per process (later calls keep the first).
pub fn keep() {
    let mut reserve = RESERVE.lock().unwrap_or_else(|e| e.into_inner());
    if reserve.is_none() {
        // Rust opens with O_CLOEXEC: COMMAND never inherits it.
        *reserve = File::open("/dev/null").ok();
    }
}

/// Run `f` with the reserve's slot free, then take the slot back. Without
/// a reserve (none kept, or lost to another thread last time), `f` runs as
/// it is.
pub fn spend<T>(f: impl FnOnce() -> T) -> T {
    let mut reserve = RESERVE.lock().unwrap_or_else(|e| e.into_inner());
    let had = reserve.take().is_some();
    let result = f();
    if had {
        *reserve = File::open("/dev/null").ok();
    }
    result
}

/// Whether a failed open means the descriptor table was full (ours, or
/// the system's).
pub fn full(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(nix::libc::EMFILE | nix::libc::ENFILE)
    )
}
