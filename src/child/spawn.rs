//! Starting COMMAND the way `posix_spawn` does, from the keeper (see
//! keeper.rs, forked first): `clone(CLONE_VM | CLONE_VFORK)` (for a
//! child parked until the lock is ours, without `CLONE_VFORK`: see
//! `keeper::clone_child`), so that no
//! copy of the keeper's address space is made (a `fork` copies the page
//! tables, then faults on every page either side writes). `posix_spawn`
//! itself cannot set the parent-death signal, hence this.
//!
//! The child shares the keeper's memory and runs until `execve` while the
//! keeper waits, so everything it needs is prepared beforehand (before the
//! keeper's fork) and it makes only system calls: it allocates nothing,
//! takes no lock, and writes to that memory only the `errno` of a failed
//! `execve`, a flag set just before it, for a file without `#!` one slot
//! of the prepared `/bin/sh` argument array, and, when it was parked
//! while the run waited (see park.rs), the "go" message, read into the
//! fixed buffer prepared for it (its environment's late entries point
//! there). Signals stay blocked until it has put each of
//! our handlers back to the default, so none of them runs in it. The
//! search of `$PATH` is our own (glibc's `execvp`, not musl's, runs a file
//! without `#!` with `/bin/sh`), so both builds behave the same.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::mem::MaybeUninit;
use std::os::unix::ffi::OsStrExt;
use std::ptr;
use std::sync::atomic::{AtomicI32, Ordering};

use nix::libc::{self, c_char, c_int};
use nix::sys::signal::{SigSet, SigmaskHow};
use std::os::fd::{AsRawFd, OwnedFd};

use nix::unistd::Pid;

use super::keeper::{self, Keeper};

/// How COMMAND starts, besides its arguments and environment.
pub struct Setup {
    /// Leave SIGPIPE ignored (as our own parent gave it to us).
    pub sigpipe_ignored: bool,
    /// Make COMMAND's group the terminal's foreground group.
    pub give_terminal: bool,
    /// The signals we catch (bit N: signal N), to put back to the default.
    pub caught: u64,
    /// The lease's end, for the keeper's watchdog from the first instant.
    pub lease_end: Option<std::time::Instant>,
    /// The job's cgroup, if one was made (see cgroup.rs).
    pub cgroup: super::cgroup::Fds,
    /// The keeper is the init of a PID namespace of its own.
    pub pid_namespace: bool,
}

/// Start `argv` (found on `$PATH` like `execvp` does) in a new process
/// group, with `env` set on top of our environment; its pid once it has
/// exec'd. A program that cannot be run is an error here (`errno` of the
/// last `execve`), and leaves no process behind. A child that could not
/// be created at all (out of processes or memory) is [`Failed::Start`].
pub fn spawn(
    argv: &[OsString],
    env: &[(&str, &str)],
    setup: &Setup,
) -> Result<(Pid, Keeper), Failed> {
    let keeper = prepared(argv, env, &[], setup, None, fork_keeper)?;
    started(keeper, setup.pid_namespace)
}

/// Fork the keeper and park COMMAND's child before its `execve` (see
/// park.rs): it waits on `go` (a pipe's ends: the caller keeps the
/// writing end, which the keeper closes) for a [`GO`]-byte message that carries the lease's
/// end, whether to take the terminal, and one environment entry per name
/// of `late`, in that order. EOF instead: it exits without running
/// anything, and so does the keeper.
pub fn park(
    argv: &[OsString],
    env: &[(&str, &str)],
    late: &[&str],
    setup: &Setup,
    go: (&OwnedFd, &OwnedFd),
) -> Result<Keeper, Failed> {
    if late.len() > LATE_MAX {
        return Err(Failed::Start(io::Error::other("too many late variables")));
    }
    prepared(argv, env, late, setup, Some(go), fork_keeper)
}

/// Everything COMMAND's child reads, prepared, handed to `fork` (with the
/// stack the child runs on) while it lives: the keeper's copy of it is
/// made by the fork. The caller's copy is left as it is, not freed: after
/// the fork each page a `free` writes would first be copied for us (a
/// page fault each), and a run prepares once.
fn prepared<T>(
    argv: &[OsString],
    env: &[(&str, &str)],
    late: &[&str],
    setup: &Setup,
    go: Option<(&OwnedFd, &OwnedFd)>,
    fork: impl FnOnce(&Exec, &mut [MaybeUninit<u8>]) -> Result<T, Failed>,
) -> Result<T, Failed> {
    let program = argv
        .first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no COMMAND"))?;
    let candidates = candidates(program)?;
    let args = argv
        .iter()
        .map(|a| c_string(a))
        .collect::<io::Result<Vec<_>>>()?;
    // A late name is left out of what we pass on: its slot in the message
    // (filled in by the child's read) is COMMAND's entry.
    let mut overridden: Vec<(&str, &str)> = env.to_vec();
    overridden.extend(late.iter().map(|name| (*name, "")));
    let envs = environment(&overridden)?;
    let mut message = vec![0u8; GO].into_boxed_slice();
    let base = message.as_mut_ptr();
    let arg_ptrs = null_terminated(&args);
    let mut env_ptrs: Vec<*const c_char> = envs.iter().map(|s| s.as_ptr()).collect();
    // SAFETY: each slot lies within the message's GO bytes.
    env_ptrs
        .extend((0..late.len()).map(|i| unsafe { base.add(slot(i).start).cast_const().cast() }));
    env_ptrs.push(ptr::null());
    // `/bin/sh FILE ARG...` for a file without `#!` (ENOEXEC), as POSIX
    // `execvp` does; slot 1 is the file, filled in by the child.
    let shell = c"/bin/sh";
    let mut sh_argv: Vec<*const c_char> = Vec::with_capacity(arg_ptrs.len() + 1);
    sh_argv.push(shell.as_ptr());
    sh_argv.push(ptr::null());
    sh_argv.extend_from_slice(&arg_ptrs[1..]);
    let exec = Exec {
        candidates: &candidates,
        argv: &arg_ptrs,
        envp: &env_ptrs,
        shell,
        sh_argv: sh_argv.as_mut_ptr(),
        parent: AtomicI32::new(0),
        setup,
        failed: AtomicI32::new(0),
        join_failed: AtomicI32::new(0),
        in_cgroup: AtomicI32::new(0),
        went: AtomicI32::new(0),
        said: AtomicI32::new(-1),
        go: go.map_or(-1, |(r, _)| r.as_raw_fd()),
        go_w: go.map_or(-1, |(_, w)| w.as_raw_fd()),
        message: base,
    };
    // Not zeroed: only the pages the child's frames reach are ever
    // touched, in the keeper (zeroing touched all 8 here).
    let mut stack = Box::<[u8]>::new_uninit_slice(32 * 1024);
    let forked = fork(&exec, &mut stack);
    std::mem::forget((stack, message, candidates, args, envs));
    std::mem::forget((arg_ptrs, env_ptrs, sh_argv, overridden));
    forked
}

/// What a forked child says (see [`Exec::say`]): a tag (a native `i32`)
/// and a value (a native `i64`); under `PIPE_BUF`, so each is one write,
/// read whole.
pub const SAID: usize = 12;
/// It was told to go, and execs now; the value is the lease's end from
/// its "go" message (see [`GO`]), which the keeper's copy never got.
pub const SAID_WENT: i32 = 1;
/// Its exec failed with the `errno` given.
pub const SAID_FAILED: i32 = 2;
/// Its join of the job's cgroup failed with the `errno` given.
pub const SAID_JOIN_FAILED: i32 = 3;

/// The size of the "go" message (see [`park`]): the lease's end (an
/// `i64`, CLOCK_MONOTONIC ns, 0 for none), a byte that says whether to
/// take the terminal, then one NUL-padded `NAME=value` slot per late
/// variable. Under `PIPE_BUF`: one write, read whole.
pub const GO: usize = 16 + LATE_MAX * LATE_SLOT;
/// How many late variables, and the room for each entry (its NUL too).
pub const LATE_MAX: usize = 4;
pub const LATE_SLOT: usize = 128;

/// Where the late variable `i`'s entry sits in the message.
pub fn slot(i: usize) -> std::ops::Range<usize> {
    16 + i * LATE_SLOT..16 + (i + 1) * LATE_SLOT
}

/// Fork the keeper, which clones COMMAND's child onto `stack` to run
/// `exec`. The caller keeps `exec` and `stack` (and all they point to)
/// until this returns: the fork copies them for the keeper.
fn fork_keeper(exec: &Exec, stack: &mut [MaybeUninit<u8>]) -> Result<Keeper, Failed> {
    // SAFETY: one past the end of `stack`, rounded down to 16 bytes.
    let top = unsafe {
        let end = stack.as_mut_ptr().cast::<u8>().add(stack.len());
        end.sub(end.addr() % 16)
    };
    let start = start_for(exec, top, top.addr() - stack.as_ptr().addr());
    let pid_namespace = exec.setup.pid_namespace;
    let [ctl_r, ctl_w, st_r, st_w] = keeper::pipes().map_err(Failed::Start)?;
    let raw = [&ctl_r, &ctl_w, &st_r, &st_w].map(|fd| fd.as_raw_fd());
    let all = SigSet::all();
    let mut old = SigSet::empty();
    nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&all), Some(&mut old))
        .map_err(|e| Failed::Start(e.into()))?;
    // SAFETY: the child runs `keeper::run`, which makes only system calls
    // on data prepared above (a child of a multithreaded process). A raw
    // clone into a new PID namespace is a fork there; the keeper calls
    // nothing of libc's that a fork's handlers would have reset.
    let forked = unsafe {
        match pid_namespace {
            true => libc::syscall(
                libc::SYS_clone,
                libc::CLONE_NEWPID | libc::SIGCHLD,
                0usize,
                0usize,
                0usize,
                0usize,
            ) as libc::pid_t,
            false => libc::fork(),
        }
    };
    if forked == 0 {
        unsafe { keeper::run(&start, raw) }
    }
    let fork_error = io::Error::last_os_error();
    let _ = nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
    drop((ctl_r, st_w));
    if forked < 0 {
        return Err(Failed::Start(fork_error));
    }
    Ok(Keeper::new(
        Pid::from_raw(forked),
        ctl_w,
        st_r,
        exec.setup.lease_end,
    ))
}

/// What the keeper is given: `exec` to clone COMMAND's child with, on the
/// stack whose top is `top`, and what it must know of its own.
fn start_for(exec: &Exec, top: *mut u8, stack_len: usize) -> keeper::Start {
    let lease_end = exec.setup.lease_end.map_or(0, keeper::deadline_ns);
    // In a PID namespace of its own, the keeper sees the host's /proc.
    let pid_namespace = exec.setup.pid_namespace;
    let proc_is_ours = super::proc_is_ours();
    keeper::Start {
        entry: enter,
        arg: (exec as *const Exec).cast_mut().cast(),
        stack_top: top.cast(),
        stack_len,
        failed: &exec.failed,
        join_failed: &exec.join_failed,
        in_cgroup: &exec.in_cgroup,
        went: &exec.went,
        said: &exec.said,
        parent: &exec.parent,
        lease_end,
        go_w: exec.go_w,
        go: match exec.go {
            -1 => ptr::null(),
            _ => exec.message.cast_const(),
        },
        cgroup: exec.setup.cgroup,
        proc_ok: proc_is_ours && !pid_namespace,
        retitle: proc_is_ours,
        init: pid_namespace,
        trim: super::trim::segments(),
    }
}

/// The keeper's first report: COMMAND's leader (in a PID namespace, found
/// as the keeper's first child: its pid there, 2, is not ours), or why not.
pub fn started(mut keeper: Keeper, pid_namespace: bool) -> Result<(Pid, Keeper), Failed> {
    match keeper.started() {
        keeper::Started::Spawned(_) if pid_namespace => match super::first_child(keeper.pid()) {
            Some(pid) => Ok((pid, keeper)),
            None => {
                keeper.finish();
                let lost = io::Error::other("COMMAND's leader is not below its keeper in /proc");
                Err(Failed::Start(lost))
            }
        },
        keeper::Started::Spawned(pid) => Ok((pid, keeper)),
        keeper::Started::StartFailed(e) => {
            keeper.finish();
            Err(Failed::Start(e))
        }
        keeper::Started::ExecFailed(e) => {
            keeper.finish();
            Err(Failed::Exec(e))
        }
    }
}

/// `clone`'s entry point in COMMAND's child: the prepared [`Exec`].
extern "C" fn enter(arg: *mut libc::c_void) -> c_int {
    // SAFETY: `arg` is the `Exec` the keeper was given, alive in its memory.
    let exec = unsafe { &*(arg as *const Exec) };
    exec.run()
}

/// Why no COMMAND runs.
#[derive(Debug)]
pub enum Failed {
    /// No process could be created (EAGAIN: out of processes; ENOMEM).
    Start(io::Error),
    /// COMMAND could not be executed (not found, not executable...).
    Exec(io::Error),
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failed::Start(e) => write!(f, "cannot start a process: {e}"),
            Failed::Exec(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for Failed {}

impl From<io::Error> for Failed {
    fn from(e: io::Error) -> Failed {
        Failed::Exec(e)
    }
}

/// Where `execvp` would look for `program`: itself if it holds a `/`,
/// else each `$PATH` entry (an empty one is the current directory; no
/// `$PATH` is glibc's default, `/bin:/usr/bin`).
fn candidates(program: &OsStr) -> io::Result<Vec<CString>> {
    let bytes = program.as_bytes();
    if bytes.is_empty() {
        return Err(io::Error::from_raw_os_error(libc::ENOENT));
    }
    if bytes.contains(&b'/') {
        return Ok(vec![c_string(program)?]);
    }
    let path = std::env::var_os("PATH");
    let path = path
        .as_deref()
        .map_or(&b"/bin:/usr/bin"[..], OsStr::as_bytes);
    path.split(|&b| b == b':')
        .map(|dir| {
            let mut full = Vec::with_capacity(dir.len() + bytes.len() + 1);
            if !dir.is_empty() {
                full.extend_from_slice(dir);
                full.push(b'/');
            }
            full.extend_from_slice(bytes);
            c_string(OsStr::from_bytes(&full))
        })
        .collect()
}

/// What the child needs, all of it prepared by the parent.
struct Exec<'a> {
    candidates: &'a [CString],
    argv: &'a [*const c_char],
    envp: &'a [*const c_char],
    shell: &'a std::ffi::CStr,
    /// `/bin/sh`, (the file), the arguments: for a file without `#!`.
    sh_argv: *mut *const c_char,
    /// The keeper's pid (set by the keeper before it clones).
    parent: AtomicI32,
    setup: &'a Setup,
    /// The `errno` of a failed `execve`, for the parent.
    failed: AtomicI32,
    /// The `errno` of a failed join of the job's cgroup.
    join_failed: AtomicI32,
    /// Made in the job's cgroup by the keeper's clone: no join to make.
    in_cgroup: AtomicI32,
    /// Set just before `execve`: the child was told to go (or was never
    /// parked). Still 0 when the keeper resumes: nothing ran.
    went: AtomicI32,
    /// -1 while the child shares the keeper's memory. Else (a parked
    /// child forked, under qemu-user: see `keeper::clone_child`) the pipe
    /// on which it says what it would have left in the three above, whose
    /// writes to its own copy never reach the keeper (see [`Exec::say`]).
    said: AtomicI32,
    /// The "go" pipe's reading end, when parked (see [`park`]); else -1.
    go: c_int,
    /// Its writing end, which the keeper closes (-1: none).
    go_w: c_int,
    /// The keeper's copy of the message (see [`GO`]): the child reads
    /// into it, the late entries of `envp` point into it.
    message: *mut u8,
}

impl Exec<'_> {
    /// In the child: set it up, then exec. Only system calls from here.
    fn run(&self) -> ! {
        // SAFETY: plain system calls on prepared data (see the module doc).
        unsafe {
            default_handlers(self.setup.caught, self.setup.sigpipe_ignored);
            libc::setpgid(0, 0);
            // Made in it by the keeper's clone, or no cgroup: no join.
            let dir = self.setup.cgroup.dir;
            let joined = match self.in_cgroup.load(Ordering::Acquire) {
                0 if dir >= 0 => join_cgroup(dir),
                _ => Ok(()),
            };
            if let Err(e) = joined {
                // Never run outside the cgroup the tree's end relies on.
                self.join_failed.store(e, Ordering::Release);
                self.say(SAID_JOIN_FAILED, i64::from(e));
                libc::_exit(127)
            }
            // If redlock-run dies (even by SIGKILL), so does COMMAND: it
            // must never run on without someone refreshing its lock.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if libc::getppid() != self.parent.load(Ordering::Relaxed) {
                // The parent died before prctl took effect.
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
            // Parked until the lock is ours; a run that did not get it
            // closes the pipe, and nothing of COMMAND ever runs.
            if self.go >= 0 && !self.park() {
                libc::_exit(0)
            }
            if self.setup.give_terminal || (self.go >= 0 && *self.message.add(8) != 0) {
                // Interactive programs must be the terminal's foreground
                // group or reading stdin stops them with SIGTTIN.
                set_handler(libc::SIGTTOU, libc::SIG_IGN);
                libc::tcsetpgrp(0, libc::getpid());
                set_handler(libc::SIGTTOU, libc::SIG_DFL);
            }
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::pthread_sigmask(libc::SIG_SETMASK, &none, ptr::null_mut());
            self.went.store(1, Ordering::Release);
            if self.go >= 0 {
                // The lease's end, from the message (see [`GO`]).
                let mut end = [0u8; 8];
                ptr::copy_nonoverlapping(self.message, end.as_mut_ptr(), 8);
                self.say(SAID_WENT, i64::from_ne_bytes(end));
            }
            let failed = self.exec();
            self.failed.store(failed, Ordering::Release);
            self.say(SAID_FAILED, i64::from(failed));
            libc::_exit(127)
        }
    }

    /// A forked child's word to the keeper (see `said`): a tag and a
    /// value (see [`SAID`]); nothing when the child shares its memory.
    ///
    /// # Safety
    /// Only in the `clone`d child (see [`Exec::run`]).
    unsafe fn say(&self, tag: i32, value: i64) {
        let fd = self.said.load(Ordering::Relaxed);
        if fd >= 0 {
            let mut word = [0u8; SAID];
            word[..4].copy_from_slice(&tag.to_ne_bytes());
            word[4..].copy_from_slice(&value.to_ne_bytes());
            libc::write(fd, word.as_ptr().cast(), SAID);
        }
    }

    /// Wait for the whole "go" message, read into the keeper's copy of it
    /// (prepared for us); false at EOF (the lock was not had) or an error.
    ///
    /// # Safety
    /// Only in the `clone`d child (see [`Exec::run`]), with `go` its
    /// reading end and `message` [`GO`] bytes of the keeper's memory.
    unsafe fn park(&self) -> bool {
        read_whole(self.go, self.message, GO)
    }

    /// `execvp`'s search, the same in both builds (musl's `execvp` does
    /// not run a file without `#!` with sh; glibc's does, as POSIX says).
    /// Returns the `errno` that ends it.
    ///
    /// # Safety
    /// Only in the `clone`d child (see [`Exec::run`]), while the keeper waits
    /// for it: it writes into the keeper's memory (`sh_argv`'s slot 1,
    /// prepared for it), and makes only system calls.
    unsafe fn exec(&self) -> c_int {
        let mut denied = false;
        let mut last = libc::ENOENT;
        for file in self.candidates {
            libc::execve(file.as_ptr(), self.argv.as_ptr(), self.envp.as_ptr());
            last = errno();
            match last {
                libc::ENOEXEC => {
                    // The parent waits and built this array for us.
                    *self.sh_argv.add(1) = file.as_ptr();
                    libc::execve(self.shell.as_ptr(), self.sh_argv, self.envp.as_ptr());
                    return errno();
                }
                libc::EACCES => denied = true,
                libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT => {}
                _ => return last,
            }
        }
        match denied {
            true => libc::EACCES,
            false => last,
        }
    }
}

/// Join the cgroup whose directory is open as `dir`: "0" written to its
/// `cgroup.procs` (opened here: only this fallback needs it, and the
/// wrapper's usual start opens one file fewer). The `errno` of a failure.
///
/// # Safety
/// `dir` is an open directory; system calls only (in COMMAND's child).
unsafe fn join_cgroup(dir: c_int) -> Result<(), c_int> {
    let procs = libc::openat(
        dir,
        c"cgroup.procs".as_ptr(),
        libc::O_WRONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW,
    );
    if procs < 0 {
        return Err(errno());
    }
    let joined = match libc::write(procs, b"0".as_ptr().cast(), 1) {
        1 => Ok(()),
        _ => Err(errno()),
    };
    libc::close(procs);
    joined
}

/// Every signal we catch back to the default (our handlers must not run
/// in the child), also the runtime's SIGSEGV and SIGBUS handlers, and
/// SIGPIPE as we were given it. Ignored signals stay ignored, as `execve`
/// would keep them. A call per signal that has a handler, not per signal:
/// this is on the path of every start.
///
/// # Safety
/// Only in the `clone`d child, with every signal blocked (so that no
/// handler runs while it is being changed); system calls only.
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
    set_handler(libc::SIGPIPE, pipe);
}

/// Set `sig`'s disposition to `handler`, with no flags and an empty mask.
///
/// # Safety
/// `handler` is `SIG_DFL`, `SIG_IGN` or a function that is safe to run
/// as a signal handler; in the `clone`d child, system calls only.
unsafe fn set_handler(sig: c_int, handler: libc::sighandler_t) {
    let mut action: libc::sigaction = std::mem::zeroed();
    action.sa_sigaction = handler;
    libc::sigaction(sig, &action, ptr::null_mut());
}

/// Read exactly `len` bytes from `fd` into `buf`, a system call at a
/// time (EINTR retried): false at EOF or an error before then. For the
/// keeper and COMMAND's child, which make only system calls.
///
/// # Safety
/// `buf` is writable for `len` bytes.
pub(super) unsafe fn read_whole(fd: c_int, buf: *mut u8, len: usize) -> bool {
    let mut have = 0;
    while have < len {
        let n = libc::read(fd, buf.add(have).cast(), len - have);
        match usize::try_from(n) {
            Ok(0) => return false,
            Ok(n) => have += n,
            Err(_) if errno() == libc::EINTR => {}
            Err(_) => return false,
        }
    }
    true
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
