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

use std::fs::{self, File};
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::fcntl::{open, openat, renameat, OFlag};
use nix::sys::signal::{kill, killpg, Signal};
use nix::sys::stat::{fstat, mkdirat, Mode};
use nix::unistd::{geteuid, unlinkat, Pid, UnlinkatFlags};

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
            // Ours is lost; an outer run's (inside its COMMAND) is not the
            // hook's to use.
            .env_remove("REDLOCK_TOKEN")
            .env_remove("REDLOCK_LEASE_FILE")
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
/// (mode 0700) under `$TMPDIR`, holding the lease's end as Unix
/// milliseconds.
///
/// `$TMPDIR` may be writable by others (without the sticky bit, our
/// directory could be renamed away and another put in its place): after
/// `mkdir` nothing is done by path. The directory is opened once and
/// checked to be ours, and every write goes through that descriptor to a
/// new file of a random name (`O_EXCL`, no link followed) renamed into
/// place, so a planted link or FIFO is never opened. A run killed with
/// SIGKILL cannot remove its directory: the next run with `--lease-file`
/// removes those of runs that are gone (their pid is in the name).
#[derive(Debug)]
pub struct LeaseFile {
    /// `$TMPDIR`, where the directory is made and removed.
    base: OwnedFd,
    /// The directory's name in `base`.
    name: String,
    dir: OwnedFd,
    path: PathBuf,
}

/// The start of a lease directory's name; then the run's pid, a dot and
/// a random part.
const LEASE_DIR: &str = "redlock-run-lease.";
/// The lease file's name in its directory.
const LEASE: &str = "lease";

impl LeaseFile {
    /// Make the directory and write the lease's first end; on any failure
    /// nothing is left behind.
    pub fn create(valid_until: Instant) -> std::io::Result<LeaseFile> {
        let base_path = std::env::temp_dir();
        let base = open(
            &base_path,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        sweep(&base_path, &base);
        let name = format!(
            "{LEASE_DIR}{}.{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        );
        mkdirat(&base, name.as_str(), Mode::from_bits_truncate(0o700))?;
        let file = match open_ours(&base, &name) {
            Ok(dir) => LeaseFile {
                path: base_path.join(&name).join(LEASE),
                base,
                name,
                dir,
            },
            Err(e) => {
                let _ = unlinkat(&base, name.as_str(), UnlinkatFlags::RemoveDir);
                return Err(e);
            }
        };
        if let Err(e) = file.write(valid_until) {
            file.remove();
            return Err(e);
        }
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
        let tmp = format!(".{LEASE}.{}", uuid::Uuid::new_v4().simple());
        let flags = OFlag::O_WRONLY
            | OFlag::O_CREAT
            | OFlag::O_EXCL
            | OFlag::O_NOFOLLOW
            | OFlag::O_NONBLOCK
            | OFlag::O_CLOEXEC;
        let fd = openat(
            &self.dir,
            tmp.as_str(),
            flags,
            Mode::from_bits_truncate(0o600),
        )?;
        let written = File::from(fd)
            .write_all(format!("{ms}\n").as_bytes())
            .and_then(|()| Ok(renameat(&self.dir, tmp.as_str(), &self.dir, LEASE)?));
        if written.is_err() {
            let _ = unlinkat(&self.dir, tmp.as_str(), UnlinkatFlags::NoRemoveDir);
        }
        written
    }

    /// Say the lease is over (the lock is known lost): its end is now.
    pub fn ended(&self) {
        let _ = self.write(Instant::now());
    }

    /// Remove the file and its directory.
    pub fn remove(&self) {
        let _ = unlinkat(&self.dir, LEASE, UnlinkatFlags::NoRemoveDir);
        let _ = unlinkat(&self.base, self.name.as_str(), UnlinkatFlags::RemoveDir);
    }
}

/// `name` in `base`: a directory (not a link) owned by us and closed to
/// others.
fn open_ours(base: &OwnedFd, name: &str) -> std::io::Result<OwnedFd> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let dir = openat(base, name, flags, Mode::empty())?;
    let st = fstat(&dir)?;
    if st.st_uid != geteuid().as_raw() || st.st_mode & 0o077 != 0 {
        return Err(std::io::Error::other(format!(
            "{name} is not a private directory of ours"
        )));
    }
    Ok(dir)
}

/// Remove the lease directories of runs that are gone (a SIGKILL leaves
/// them): ours, named with a pid that no longer exists. Best effort.
fn sweep(base_path: &Path, base: &OwnedFd) {
    let Ok(entries) = fs::read_dir(base_path) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        let pid = name
            .strip_prefix(LEASE_DIR)
            .and_then(|rest| rest.split_once('.'))
            .and_then(|(pid, _)| pid.parse::<i32>().ok());
        let gone = pid.is_some_and(|pid| {
            pid > 0 && kill(Pid::from_raw(pid), None) == Err(nix::errno::Errno::ESRCH)
        });
        if !gone {
            continue;
        }
        let Ok(dir) = open_ours(base, name) else {
            continue;
        };
        // A run dies between a temp file's creation and its rename only
        // rarely; those are removed too.
        if let Ok(files) = fs::read_dir(base_path.join(name)) {
            for file in files.flatten() {
                let _ = unlinkat(
                    &dir,
                    file.file_name().as_os_str(),
                    UnlinkatFlags::NoRemoveDir,
                );
            }
        }
        let _ = unlinkat(base, name, UnlinkatFlags::RemoveDir);
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
