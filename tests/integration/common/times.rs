//! How long each test took, for `scripts/test.sh`'s table of the suite's
//! cost (stable libtest reports no per-test time). With
//! `$REDLOCK_TEST_TIMES` set to a file, every test that uses the harness
//! (the common helpers call [`note_test`]) appends one line to it when it
//! ends: `NAME<TAB>MILLISECONDS`. Unset, nothing is recorded.
//!
//! libtest runs each test on a thread of its own, named after the test:
//! the test's start is that thread's start (from /proc, so a test is timed
//! from its first line, whichever helper it calls first), its end is the
//! thread's end (a thread-local's destructor), or the process's exit for
//! the last tests, whose threads may still be ending then.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io::Write;
use std::sync::{Mutex, Once};
use std::time::Duration;

use nix::libc;

/// Tests started and not yet written: their names and start times
/// (CLOCK_BOOTTIME).
static OPEN: Mutex<Option<HashMap<String, Duration>>> = Mutex::new(None);

/// Drops (and so records) when a test's thread ends.
struct Running(String);

impl Drop for Running {
    fn drop(&mut self) {
        finish(Some(&self.0));
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Running>> = const { RefCell::new(None) };
}

/// Note that the current test runs (the first call on its thread counts).
pub fn note_test() {
    static FILE: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    if FILE
        .get_or_init(|| std::env::var("REDLOCK_TEST_TIMES").ok())
        .is_none()
    {
        return;
    }
    let thread = std::thread::current();
    // Threads a test spawns have no name; libtest's main thread is "main".
    let Some(name) = thread.name().filter(|n| *n != "main") else {
        return;
    };
    let _ = CURRENT.try_with(|current| {
        let mut current = current.borrow_mut();
        if current.is_none() {
            let start = thread_start().unwrap_or_else(boottime);
            let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
            open.get_or_insert_with(HashMap::new)
                .insert(name.to_string(), start);
            *current = Some(Running(name.to_string()));
            static AT_EXIT: Once = Once::new();
            // SAFETY: registers a plain `extern "C" fn` with no arguments.
            AT_EXIT.call_once(|| unsafe {
                libc::atexit(finish_all);
            });
        }
    });
}

/// The process exits: record every test still open.
extern "C" fn finish_all() {
    finish(None);
}

/// Write the line of test `name` (all open tests for None).
fn finish(name: Option<&str>) {
    let Ok(path) = std::env::var("REDLOCK_TEST_TIMES") else {
        return;
    };
    let now = boottime();
    let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    let Some(open) = open.as_mut() else {
        return;
    };
    let done: Vec<(String, Duration)> = match name {
        Some(name) => open.remove_entry(name).into_iter().collect(),
        None => open.drain().collect(),
    };
    let text: String = done
        .iter()
        .map(|(name, start)| format!("{name}\t{}\n", now.saturating_sub(*start).as_millis()))
        .collect();
    if text.is_empty() {
        return;
    }
    // One append of a short line at a time: lines never interleave.
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = file.write_all(text.as_bytes());
    }
}

/// Now on CLOCK_BOOTTIME (the clock of a thread's start in /proc).
fn boottime() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into our local.
    if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut now) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(now.tv_sec.unsigned_abs(), 0) + Duration::from_nanos(now.tv_nsec.unsigned_abs())
}

/// When this thread started (field 22 of its stat, in clock ticks since
/// boot).
fn thread_start() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    let ticks: u64 = stat
        .rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()?;
    // SAFETY: a query only.
    let per_second = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok()?;
    Some(Duration::from_millis(
        ticks.checked_mul(1000)? / per_second.max(1),
    ))
}
