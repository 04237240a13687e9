//! Starting COMMAND the way `posix_spawn` does: `clone(CLONE_VM |
//! CLONE_VFORK)`, so that no copy of our address space is made (a `fork`
//! copies the page tables, then faults on every page either side writes:
//! 0.06-0.1 ms of every start and every hand-over on the benchmark's VM).
//! `posix_spawn` itself cannot set the parent-death signal, hence this.
//!
//! The child shares our memory and runs until `execve` while the calling
//! thread waits, so everything it needs is prepared beforehand and it makes
//! only system calls: it allocates nothing, takes no lock, and writes to
//! our memory only the `errno` of a failed `execve`. Signals stay blocked
//! until it has put each of our handlers back to the default, so none of
//! them runs in it.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::ptr;
use std::sync::atomic::{AtomicI32, Ordering};

use nix::libc::{self, c_char, c_int};
use nix::sched::{clone, CloneFlags};
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::sys::wait::waitpid;
use nix::unistd::Pid;

/// How COMMAND starts, besides its arguments and environment.
pub struct Setup {
    /// Leave SIGPIPE ignored (as our own parent gave it to us).
    pub sigpipe_ignored: bool,
    /// Make COMMAND's group the terminal's foreground group.
    pub give_terminal: bool,
    /// The signals we catch (bit N: signal N), to put back to the default.
    pub caught: u64,
}

/// Start `argv` (found on `$PATH` like `execvp` does) in a new process
/// group, with `env` set on top of our environment; its pid once it has
/// exec'd. A program that cannot be run is an error here (`errno` of the
/// last `execve`), and leaves no process behind.
pub fn spawn(argv: &[OsString], env: &[(&str, &str)], setup: &Setup) -> io::Result<Pid> {
    let program = argv
        .first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no COMMAND"))?;
    let program = c_string(program)?;
    let args = argv
        .iter()
        .map(|a| c_string(a))
        .collect::<io::Result<Vec<_>>>()?;
    let envs = environment(env)?;
    let arg_ptrs = null_terminated(&args);
    let env_ptrs = null_terminated(&envs);
    let exec = Exec {
        program: &program,
        argv: &arg_ptrs,
        envp: &env_ptrs,
        parent: nix::unistd::getpid(),
        setup,
        failed: AtomicI32::new(0),
    };
    // glibc's posix_spawn sizes its child's stack the same way: execvp
    // puts a copy of argv on it to run a script without `#!` with sh.
    let mut stack = vec![0u8; 32 * 1024 + args.len() * std::mem::size_of::<usize>()];
    let all = SigSet::all();
    let mut old = SigSet::empty();
    nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&all), Some(&mut old))?;
    // SAFETY: the child runs `Exec::run` on `stack` in our address space
    // while this thread waits (CLONE_VFORK); `run` only makes system calls
    // on data prepared above, which outlives the child's use of it.
    let cloned = unsafe {
        clone(
            Box::new(|| exec.run()),
            &mut stack,
            CloneFlags::CLONE_VM | CloneFlags::CLONE_VFORK,
            Some(libc::SIGCHLD),
        )
    };
    let _ = nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
    let pid = cloned?;
    match exec.failed.load(Ordering::Acquire) {
        0 => Ok(pid),
        errno => {
            let _ = waitpid(pid, None);
            Err(io::Error::from_raw_os_error(errno))
        }
    }
}

/// What the child needs, all of it prepared by the parent.
struct Exec<'a> {
    program: &'a CString,
    argv: &'a [*const c_char],
    envp: &'a [*const c_char],
    parent: Pid,
    setup: &'a Setup,
    /// The `errno` of a failed `execve`, for the parent.
    failed: AtomicI32,
}

impl Exec<'_> {
    /// In the child: set it up, then exec. Only system calls from here.
    fn run(&self) -> isize {
        // SAFETY: plain system calls on prepared data (see the module doc).
        unsafe {
            default_handlers(self.setup.caught, self.setup.sigpipe_ignored);
            libc::setpgid(0, 0);
            // If redlock-run dies (even by SIGKILL), so does COMMAND: it
            // must never run on without someone refreshing its lock.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if libc::getppid() != self.parent.as_raw() {
                // The parent died before prctl took effect.
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
            if self.setup.give_terminal {
                // Interactive programs must be the terminal's foreground
                // group or reading stdin stops them with SIGTTIN.
                set_handler(libc::SIGTTOU, libc::SIG_IGN);
                libc::tcsetpgrp(0, libc::getpid());
                set_handler(libc::SIGTTOU, libc::SIG_DFL);
            }
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::pthread_sigmask(libc::SIG_SETMASK, &none, ptr::null_mut());
            libc::execvpe(
                self.program.as_ptr(),
                self.argv.as_ptr(),
                self.envp.as_ptr(),
            );
            self.failed.store(errno(), Ordering::Release);
            libc::_exit(127)
        }
    }
}

/// Every signal we catch back to the default (our handlers must not run
/// in the child), also the runtime's SIGSEGV and SIGBUS handlers, and
/// SIGPIPE as we were given it. Ignored signals stay ignored, as `execve`
/// would keep them. A call per signal that has a handler, not per signal:
/// this is on the path of every start.
unsafe fn default_handlers(caught: u64, sigpipe_ignored: bool) {
    for sig in 1..64 {
        if caught & (1 << sig) != 0 {
            set_handler(sig, libc::SIG_DFL);
        }
    }
    for sig in [libc::SIGSEGV, libc::SIGBUS] {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(sig, ptr::null(), &mut old) == 0
            && old.sa_sigaction != libc::SIG_DFL
            && old.sa_sigaction != libc::SIG_IGN
        {
            set_handler(sig, libc::SIG_DFL);
        }
    }
    let pipe = match sigpipe_ignored {
        true => libc::SIG_IGN,
        false => libc::SIG_DFL,
    };
    set_handler(Signal::SIGPIPE as c_int, pipe);
}

unsafe fn set_handler(sig: c_int, handler: libc::sighandler_t) {
    let mut action: libc::sigaction = std::mem::zeroed();
    action.sa_sigaction = handler;
    libc::sigaction(sig, &action, ptr::null_mut());
}

fn errno() -> c_int {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Our environment with `env` set on top, as `NAME=value` strings; a
/// name given with an empty value is removed instead.
fn environment(env: &[(&str, &str)]) -> io::Result<Vec<CString>> {
    let mut out = Vec::new();
    for (name, value) in std::env::vars_os() {
        if env.iter().any(|(set, _)| OsStr::new(set) == name) {
            continue;
        }
        let mut entry = name;
        entry.push("=");
        entry.push(value);
        out.push(c_string(&entry)?);
    }
    for (name, value) in env.iter().filter(|(_, value)| !value.is_empty()) {
        out.push(c_string(OsStr::new(&format!("{name}={value}")))?);
    }
    Ok(out)
}

fn c_string(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} contains a NUL byte", s.to_string_lossy()),
        )
    })
}

fn null_terminated(strings: &[CString]) -> Vec<*const c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain([ptr::null()])
        .collect()
}
