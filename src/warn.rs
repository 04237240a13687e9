//! Telling COMMAND before it is stopped, and after: `--warn-signal` with
//! `--warn-before` (a signal that long before the planned SIGTERM),
//! `--on-lost` (a hook run once after a lost lock), and `--lease-file`
//! (`REDLOCK_LEASE_FILE`: when the lease ends, for a job that checks how
//! long it may still write).
//!
//! None of them may delay a stop: the warning is one `kill()` from the
//! supervision loop at an instant the plan computes from the deadline
//! the loop already has (`plan.rs`); the hook is started on a thread of
//! its own once SIGTERM has gone out; the lease file is written by the
//! refresher thread.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use crate::log::{field, Ev, Log};

/// `--warn-signal SIG --warn-before DURATION`: sent once per run, at the
/// instant the plan computes (`plan.rs`).
#[derive(Debug, Clone, Copy)]
pub struct Warning {
    pub signal: Signal,
    pub before: Duration,
}

/// Parse `--warn-signal`: a name (`USR1`, `SIGUSR1`, any case) or number.
/// SIGKILL and SIGSTOP cannot be a warning: they cannot be handled.
pub fn parse_signal(value: &str) -> Result<Signal, String> {
    let text = value.trim();
    let signal = match text.parse::<i32>() {
        Ok(n) => Signal::try_from(n).map_err(|_| format!("no signal number {n}"))?,
        Err(_) => {
            let upper = text.to_ascii_uppercase();
            let name = match upper.starts_with("SIG") {
                true => upper,
                false => format!("SIG{upper}"),
            };
            name.parse::<Signal>().map_err(|_| {
                "expected a signal name such as USR1 or TERM, or a number".to_string()
            })?
        }
    };
    if matches!(signal, Signal::SIGKILL | Signal::SIGSTOP) {
        return Err(format!(
            "{} cannot be caught, so it cannot warn",
            signal.as_str()
        ));
    }
    Ok(signal)
}

/// How long the `--on-lost` hook may run before its group gets SIGKILL.
pub const HOOK_TIMEOUT: Duration = Duration::from_secs(10);

/// `--on-lost LINE`: run once with `sh -c` after the lock was lost.
pub struct OnLost {
    line: String,
    env: Vec<(&'static str, String)>,
    log: Log,
    running: Mutex<Option<JoinHandle<()>>>,
}

impl OnLost {
    /// The hook for a run of `key` holding `fence`.
    pub fn new(line: String, key: &str, fence: i64, log: &Log) -> OnLost {
        OnLost {
            line,
            env: vec![
                ("REDLOCK_KEY", key.to_string()),
                ("REDLOCK_FENCE", fence.to_string()),
            ],
            log: log.clone(),
            running: Mutex::new(None),
        }
    }

    /// Start the hook (once) on a thread of its own, with the loss's
    /// `reason` in `REDLOCK_LOST_REASON`; it is stopped after
    /// [`HOOK_TIMEOUT`]. Returns at once.
    pub fn fire(&self, reason: &str) {
        let Ok(mut running) = self.running.lock() else {
            return;
        };
        if running.is_some() {
            return;
        }
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(&self.line)
            .envs(self.env.iter().map(|(k, v)| (*k, v.as_str())))
            .env("REDLOCK_LOST_REASON", reason)
            .stdin(Stdio::null())
            .process_group(0);
        let log = self.log.clone();
        let started = std::thread::Builder::new()
            .name("on-lost".into())
            .stack_size(128 * 1024)
            .spawn(move || {
                crate::signals::block_in_this_thread();
                run_hook(cmd, &log)
            });
        match started {
            Ok(handle) => *running = Some(handle),
            Err(e) => self
                .log
                .error(format!("cannot run the --on-lost hook: {e}")),
        }
    }

    /// Wait for a started hook to end (it is bounded by [`HOOK_TIMEOUT`]).
    pub fn finish(&self) {
        let handle = self.running.lock().ok().and_then(|mut r| r.take());
        if let Some(handle) = handle {
            let _ = handle.join();
        }
    }
}

/// Spawn the hook, and stop its group if it outlives the timeout.
fn run_hook(mut cmd: Command, log: &Log) {
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => return log.error(format!("cannot run the --on-lost hook: {e}")),
    };
    let end = Instant::now() + HOOK_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return,
            Ok(Some(status)) => {
                return log.emit(
                    Ev::Warning,
                    format!("the --on-lost hook failed ({status})"),
                    &[field("exit", status.code())],
                )
            }
            // Reaped by someone else (the subreaper's last look): done.
            Err(_) => return,
            Ok(None) if Instant::now() >= end => break,
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
    }
    let _ = child.wait();
    log.emit(
        Ev::Warning,
        format!(
            "the --on-lost hook still ran after {}s; killed it",
            HOOK_TIMEOUT.as_secs()
        ),
        &[],
    );
}

/// `--lease-file`: `REDLOCK_LEASE_FILE`, a file in a private directory
/// (mode 0700) holding the lease's end as Unix milliseconds.
#[derive(Debug)]
pub struct LeaseFile {
    dir: PathBuf,
    path: PathBuf,
}

impl LeaseFile {
    /// Make the directory and write the lease's first end.
    pub fn create(valid_until: Instant) -> std::io::Result<LeaseFile> {
        let base = std::env::temp_dir();
        let dir = base.join(format!("redlock-run-{}", uuid::Uuid::new_v4().simple()));
        fs::DirBuilder::new().mode(0o700).create(&dir)?;
        let file = LeaseFile {
            path: dir.join("lease"),
            dir,
        };
        file.write(valid_until)?;
        Ok(file)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Replace the file's content with `valid_until` as Unix milliseconds
    /// (a temp file renamed into place: a reader never sees it torn).
    pub fn write(&self, valid_until: Instant) -> std::io::Result<()> {
        let left = valid_until.saturating_duration_since(Instant::now());
        let end = SystemTime::now() + left;
        let ms = end
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        let tmp = self.dir.join(".lease.tmp");
        let mut out = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        out.write_all(format!("{ms}\n").as_bytes())?;
        drop(out);
        fs::rename(&tmp, &self.path)
    }

    /// Remove the file and its directory.
    pub fn remove(&self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_parse_by_name_or_number() {
        assert_eq!(parse_signal("USR1"), Ok(Signal::SIGUSR1));
        assert_eq!(parse_signal("sigterm"), Ok(Signal::SIGTERM));
        assert_eq!(parse_signal("10"), Ok(Signal::SIGUSR1));
        assert!(parse_signal("KILL").is_err());
        assert!(parse_signal("STOP").is_err());
        assert!(parse_signal("nope").is_err());
        assert!(parse_signal("99").is_err());
    }
}
