//! COMMAND as a process group: spawn it (own group, terminal hand-over,
//! parent-death signal, environment), watch it exit, clean up what it
//! left in its group, and only then reap it.
//!
//! The leader is reaped last on purpose: while it is an unreaped zombie its
//! pid, which is also the group id, cannot be reused, so signalling the
//! group can never hit a stranger.

use std::ffi::OsString;
use std::io;
use std::os::fd::BorrowedFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{self, killpg, SigHandler, Signal};
use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
use nix::unistd::{self, Pid};

use crate::exit::Exit;

/// A handle to signal COMMAND's whole process group, safe to use from any
/// thread until the leader is reaped (after that it does nothing).
#[derive(Debug)]
pub struct ChildGroup {
    pgid: Pid,
    reaped: Mutex<bool>,
}

impl ChildGroup {
    /// Send `sig` to every process of the group.
    pub fn signal(&self, sig: Signal) {
        let reaped = self.reaped.lock().unwrap_or_else(|e| e.into_inner());
        if !*reaped {
            let _ = killpg(self.pgid, sig);
        }
    }
}

/// Stops a group after a delay (`--max-hold`): SIGTERM, then SIGKILL after
/// the grace, unless cancelled first.
pub struct StopTimer {
    cancel: mpsc::Sender<()>,
    handle: std::thread::JoinHandle<bool>,
}

impl StopTimer {
    /// After `after`, call `announce` and stop `group`.
    pub fn start(
        group: Arc<ChildGroup>,
        after: Duration,
        grace: Duration,
        announce: impl FnOnce() + Send + 'static,
    ) -> io::Result<StopTimer> {
        let (cancel, cancelled) = mpsc::channel::<()>();
        let handle = std::thread::Builder::new()
            .name("max-hold".into())
            .spawn(move || {
                if cancelled.recv_timeout(after) != Err(RecvTimeoutError::Timeout) {
                    return false;
                }
                announce();
                group.signal(Signal::SIGTERM);
                group.signal(Signal::SIGCONT);
                if cancelled.recv_timeout(grace) == Err(RecvTimeoutError::Timeout) {
                    group.signal(Signal::SIGKILL);
                }
                true
            })?;
        Ok(StopTimer { cancel, handle })
    }

    /// Cancel the timer; whether it had fired.
    pub fn stop(self) -> bool {
        let _ = self.cancel.send(());
        self.handle.join().unwrap_or(true)
    }
}

/// A running COMMAND.
pub struct Spawned {
    child: Child,
    pub group: Arc<ChildGroup>,
    /// Our own process group, when we handed the terminal to COMMAND.
    terminal_owner: Option<Pid>,
}

/// Start `argv` in a new process group with `env` added to its environment.
pub fn spawn(argv: &[OsString], env: &[(&str, &str)]) -> io::Result<Spawned> {
    let parent = unistd::getpid();
    let terminal_owner = foreground_terminal();
    let give_terminal = terminal_owner.is_some();
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]).process_group(0);
    for (name, value) in env {
        cmd.env(name, value);
    }
    // SAFETY: between fork and exec only async-signal-safe calls (prctl,
    // getppid, sigaction, tcsetpgrp, getpid, raise); nothing allocates.
    unsafe {
        cmd.pre_exec(move || {
            // If redlock-run dies (even by SIGKILL), so does COMMAND: it must
            // never run on without someone refreshing its lock.
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            if unistd::getppid() != parent {
                // The parent died before prctl took effect.
                let _ = signal::raise(Signal::SIGKILL);
            }
            if give_terminal {
                // Interactive programs must be the terminal's foreground
                // group or reading stdin stops them with SIGTTIN.
                signal::signal(Signal::SIGTTOU, SigHandler::SigIgn)?;
                let _ = unistd::tcsetpgrp(BorrowedFd::borrow_raw(0), unistd::getpid());
                signal::signal(Signal::SIGTTOU, SigHandler::SigDfl)?;
            }
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    let pgid = Pid::from_raw(child.id() as i32);
    if give_terminal {
        // Also from this side, so it holds whichever process runs first.
        without_sigttou(|| unistd::tcsetpgrp(stdin(), pgid));
    }
    Ok(Spawned {
        child,
        group: Arc::new(ChildGroup {
            pgid,
            reaped: Mutex::new(false),
        }),
        terminal_owner,
    })
}

/// The exit code for a spawn error: 127 not found, 126 not executable.
pub fn spawn_error_exit(e: &io::Error) -> Exit {
    match e.kind() {
        io::ErrorKind::NotFound => Exit::NotFound,
        _ => Exit::CannotInvoke,
    }
}

impl Spawned {
    /// Block until the leader exits, without reaping it. If it is stopped
    /// from the terminal (Ctrl-Z), stop along with it (see `follow_stop`).
    pub fn wait_exit(&self) {
        let pid = || Id::Pid(self.group.pgid);
        loop {
            let flags = WaitPidFlag::WEXITED | WaitPidFlag::WSTOPPED | WaitPidFlag::WNOWAIT;
            match waitid(pid(), flags) {
                Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) => return,
                Ok(WaitStatus::Stopped(..)) => {
                    // Take the stop notice (a stop is not an exit: nothing is reaped).
                    let _ = waitid(pid(), WaitPidFlag::WSTOPPED | WaitPidFlag::WNOHANG);
                    self.follow_stop();
                }
                Err(Errno::EINTR) | Ok(_) => continue,
                // Only if it was reaped already; `reap` will tell how it ended.
                Err(_) => return,
            }
        }
    }

    /// COMMAND, owning the terminal, was stopped (Ctrl-Z). Its group is not
    /// the shell's job, ours is: take the terminal back and stop ourselves,
    /// so that the shell sees the job stopped and gets its prompt back.
    /// Once the shell continues us (`fg` or `bg`), hand the terminal back if
    /// we are in the foreground and continue COMMAND. While stopped nothing
    /// refreshes the lock: a job suspended past its TTL loses it (exit 70).
    /// A stop without a terminal (a SIGSTOP from someone) is left alone.
    fn follow_stop(&self) {
        let Some(ours) = self.terminal_owner else {
            return;
        };
        // After `bg` the shell owns the terminal: leave it there.
        if unistd::tcgetpgrp(stdin()) == Ok(self.group.pgid) {
            without_sigttou(|| unistd::tcsetpgrp(stdin(), ours));
        }
        let _ = signal::raise(Signal::SIGTSTP);
        if unistd::tcgetpgrp(stdin()) == Ok(ours) {
            without_sigttou(|| unistd::tcsetpgrp(stdin(), self.group.pgid));
        }
        self.group.signal(Signal::SIGCONT);
    }

    /// Stop whatever the leader left running in its group (`sh -c 'd & exit'`):
    /// SIGTERM, then SIGKILL after `grace`. Returns how many were found.
    pub fn stop_leftovers(&self, grace: Duration) -> usize {
        let leader = self.group.pgid;
        let found = group_members(leader);
        if found == 0 {
            return 0;
        }
        self.group.signal(Signal::SIGTERM);
        self.group.signal(Signal::SIGCONT);
        if !wait_until(grace, || group_members(leader) == 0) {
            self.group.signal(Signal::SIGKILL);
            wait_until(Duration::from_secs(2), || group_members(leader) == 0);
        }
        found
    }

    /// Reap the leader, give the terminal back, and say how it ended.
    pub fn reap(mut self) -> Exit {
        *self.group.reaped.lock().unwrap_or_else(|e| e.into_inner()) = true;
        let status = self.child.wait();
        if let Some(ours) = self.terminal_owner {
            without_sigttou(|| unistd::tcsetpgrp(stdin(), ours));
        }
        match status {
            Ok(status) => exit_of(status),
            Err(_) => Exit::Internal,
        }
    }
}

fn exit_of(status: std::process::ExitStatus) -> Exit {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => Exit::Child(code as u8),
        (None, Some(sig)) => Exit::Signaled(sig),
        (None, None) => Exit::Internal,
    }
}

fn stdin() -> BorrowedFd<'static> {
    // SAFETY: fd 0 stays open for the life of the process.
    unsafe { BorrowedFd::borrow_raw(0) }
}

/// Our process group, if stdin is a terminal whose foreground group is ours.
fn foreground_terminal() -> Option<Pid> {
    let ours = unistd::getpgrp();
    match unistd::tcgetpgrp(stdin()) {
        Ok(fg) if fg == ours => Some(ours),
        _ => None,
    }
}

/// Run a terminal call that a background process may make only with
/// SIGTTOU ignored (otherwise the kernel stops us).
fn without_sigttou(f: impl FnOnce() -> nix::Result<()>) {
    // SAFETY: swapping a disposition between SIG_IGN and the previous one.
    unsafe {
        let previous = signal::signal(Signal::SIGTTOU, SigHandler::SigIgn);
        let _ = f();
        if let Ok(previous) = previous {
            let _ = signal::signal(Signal::SIGTTOU, previous);
        }
    }
}

/// How many live processes other than `leader` are in the group `leader`
/// leads (zombies do not count: they run nothing).
fn group_members(leader: Pid) -> usize {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != leader.as_raw())
        // One cheap syscall per process; /proc/PID/stat only for members
        // (reading every process's stat costs ~15 us each, on every run).
        .filter(|&pid| unistd::getpgid(Some(Pid::from_raw(pid))) == Ok(leader))
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            // Fields after the command name (which may hold spaces and parens):
            // state ppid pgrp ...
            let Some((_, rest)) = stat.rsplit_once(')') else {
                return false;
            };
            let mut fields = rest.split_whitespace();
            let state = fields.next();
            let pgrp = fields.nth(1).and_then(|p| p.parse::<i32>().ok());
            pgrp == Some(leader.as_raw()) && state != Some("Z") && state != Some("X")
        })
        .count()
}

fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
