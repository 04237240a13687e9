//! The keeper: a small process between redlock-run and COMMAND that holds
//! the job's tree when redlock-run cannot.
//!
//! redlock-run forks it; it is the job's subreaper and COMMAND's parent
//! (COMMAND's parent-death signal follows it), in a process group of its
//! own, with every signal blocked but SIGCHLD. It tells redlock-run, on a
//! pipe, how COMMAND's leader stops and ends (without reaping it: its pid
//! is the group's id), and reaps what else ends below it. When the pipe
//! from redlock-run closes without a word, redlock-run is dead (SIGKILL,
//! a crash): the keeper SIGKILLs every process below it, so no process of
//! the job runs on without a lock being refreshed for it.
//!
//! The keeper is a child of a multithreaded process: from the fork on it
//! makes only system calls on data prepared before the fork, and never
//! allocates (see [`run`]).

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};

use nix::libc::{self, c_int};
use nix::unistd::Pid;

use crate::exit::Exit;

/// What the keeper says (three native `i32`s: a tag and two values).
const MESSAGE: usize = 12;
const SPAWNED: i32 = 1;
const START_FAILED: i32 = 2;
const EXEC_FAILED: i32 = 3;
const STOPPED: i32 = 4;
const EXITED: i32 = 5;
/// The lease ran out with the job still running: the keeper kills it.
const WATCHDOG: i32 = 6;
/// Just before EXITED: nothing else of the job is left below the keeper
/// (it looked after the leader ended), so redlock-run need not look.
const ALONE: i32 = 7;

/// How long a parked start given up may take to end (see [`Keeper::abort`]).
const ABORT_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// What redlock-run says: a tag (`L`: the lease's end follows; `R`: done)
/// and an `i64` (CLOCK_MONOTONIC nanoseconds).
const CTL: usize = 9;

/// redlock-run's side of a keeper.
pub struct Keeper {
    pid: Pid,
    /// Our end of the pipe the keeper watches; closed without a word when
    /// we die.
    ctl: Option<OwnedFd>,
    /// The keeper's reports (nonblocking once COMMAND runs).
    status: OwnedFd,
    partial: [u8; MESSAGE],
    have: usize,
    stop: Option<i32>,
    exit: Option<Exit>,
    /// The keeper is gone (its pipe closed).
    dead: bool,
    /// The lease's end the keeper was last told.
    told: Option<std::time::Instant>,
    /// The keeper killed the job: its lease ran out while we did not act.
    fired: bool,
    /// The keeper found nothing of the job left once the leader ended.
    alone: bool,
    /// The keeper was found stopped and continued while we waited for it.
    was_stopped: bool,
}

/// How the keeper's first report went.
pub enum Started {
    Spawned(Pid),
    StartFailed(io::Error),
    ExecFailed(io::Error),
}

impl Keeper {
    /// The keeper forked as `pid`, with our ends of its pipes, told the
    /// lease's end `told` in its own memory before the fork (none for a
    /// parked start: the end in its "go" is told again, see `run`).
    pub(super) fn new(
        pid: Pid,
        ctl: OwnedFd,
        status: OwnedFd,
        told: Option<std::time::Instant>,
    ) -> Keeper {
        // Nonblocking from the start: every wait for a report is a poll
        // with a timeout, between which a stopped keeper is looked for.
        let nonblocking = nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK);
        let _ = nix::fcntl::fcntl(&status, nonblocking);
        Keeper {
            pid,
            ctl: Some(ctl),
            status,
            partial: [0; MESSAGE],
            have: 0,
            stop: None,
            exit: None,
            dead: false,
            told,
            fired: false,
            alone: false,
            was_stopped: false,
        }
    }

    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// Readable when the keeper has something to say.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.status.as_fd()
    }

    /// Wait for the first report: COMMAND runs, or why not.
    pub(super) fn started(&mut self) -> Started {
        let message = loop {
            match self.read_one(true) {
                Some(m) => break m,
                None if self.dead => {
                    let died = io::Error::other("the keeper process died before COMMAND started");
                    return Started::StartFailed(died);
                }
                None => {}
            }
        };
        let nonblocking = || nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK);
        if let Some(ctl) = &self.ctl {
            let _ = nix::fcntl::fcntl(ctl, nonblocking());
        }
        match message {
            (SPAWNED, pid, _) => Started::Spawned(Pid::from_raw(pid)),
            (EXEC_FAILED, errno, _) => Started::ExecFailed(io::Error::from_raw_os_error(errno)),
            (_, errno, _) => Started::StartFailed(io::Error::from_raw_os_error(errno)),
        }
    }

    /// Take in every report that has arrived, without blocking.
    pub fn poll(&mut self) {
        while let Some(message) = self.read_one(false) {
            match message {
                (STOPPED, sig, _) => self.stop = Some(sig),
                (EXITED, code, status) if code == libc::CLD_EXITED => {
                    let code = u8::try_from(status & 0xff).unwrap_or(u8::MAX);
                    self.exit = Some(Exit::Child(code));
                }
                (EXITED, _, sig) => self.exit = Some(Exit::Signaled(sig)),
                (WATCHDOG, _, _) => self.fired = true,
                (ALONE, _, _) => self.alone = true,
                _ => {}
            }
        }
    }

    /// A stop of the leader reported since the last call (its signal).
    pub fn take_stop(&mut self) -> Option<i32> {
        self.stop.take()
    }

    /// How the leader ended, once it has. A keeper that died (someone
    /// SIGKILLed it) took the leader with it: its parent-death signal.
    pub fn exit(&self) -> Option<Exit> {
        match (self.exit, self.dead) {
            (Some(exit), _) => Some(exit),
            (None, true) => Some(Exit::Signaled(libc::SIGKILL)),
            (None, false) => None,
        }
    }

    /// Block until the leader's end is known.
    pub fn wait_exit(&mut self) -> Exit {
        loop {
            self.poll();
            if let Some(exit) = self.exit() {
                return exit;
            }
            let wait = std::time::Duration::from_millis(200);
            if !crate::signals::wait_readable(self.fd(), wait) && self.continue_now() {
                self.was_stopped = true;
            }
        }
    }

    /// Tell the keeper until when the lease holds (if that changed): past
    /// it, with the job still running, the keeper kills the whole tree
    /// (we are stopped or hung: SIGSTOP cannot be caught). A nonblocking
    /// write of one message; a full pipe keeps the last end it read.
    /// Whether it told a new end after an earlier one.
    pub fn lease_until(&mut self, until: std::time::Instant) -> bool {
        if self.told == Some(until) {
            return false;
        }
        let Some(ctl) = &self.ctl else {
            return false;
        };
        let left = until.saturating_duration_since(std::time::Instant::now());
        let left = i64::try_from(left.as_nanos()).unwrap_or(i64::MAX);
        let mut message = [0u8; CTL];
        message[0] = b'L';
        message[1..].copy_from_slice(&monotonic_ns().saturating_add(left).to_ne_bytes());
        // O_NONBLOCK is set on our end at spawn.
        let again = self.told.is_some();
        if nix::unistd::write(ctl, &message).is_ok() {
            self.told = Some(until);
        }
        again
    }

    /// The leader has ended and the keeper, looking after that, found no
    /// other process of the job below it (none can appear later: a tree
    /// with no live process has none to start one).
    pub fn alone(&self) -> bool {
        self.alone && self.exit.is_some()
    }

    /// Whether the keeper killed the job because its lease ran out.
    pub fn fired(&self) -> bool {
        self.fired
    }

    /// The keeper died before it reported the leader's end: someone
    /// killed it (the leader died of its parent-death signal).
    pub fn killed(&self) -> bool {
        self.dead && self.exit.is_none()
    }

    /// The keeper itself is stopped (SIGSTOP, a debugger's stop): it is
    /// continued at once, since while it is stopped nobody sees the
    /// leader end or enforces the lease. Whether it was.
    pub fn continue_if_stopped(&mut self) -> bool {
        std::mem::take(&mut self.was_stopped) || self.continue_now()
    }

    fn continue_now(&self) -> bool {
        use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
        let flags = WaitPidFlag::WSTOPPED | WaitPidFlag::WNOHANG;
        match waitid(Id::Pid(self.pid), flags) {
            Ok(WaitStatus::Stopped(..)) => {
                let _ = nix::sys::signal::kill(self.pid, nix::sys::signal::Signal::SIGCONT);
                true
            }
            _ => false,
        }
    }

    /// Reap the keeper once it is dead, waiting for it: its pipe closes
    /// before the kernel hands its children to us, and only once it is a
    /// zombie are they ours to list (a zombie's own list is empty).
    pub fn reap_dead(&self) {
        if self.dead {
            while nix::sys::wait::waitpid(self.pid, None) == Err(nix::errno::Errno::EINTR) {}
        }
    }

    /// Whether the keeper is gone.
    pub fn dead(&self) -> bool {
        self.dead
    }

    /// A parked start given up (its "go" pipe closed, see park.rs): the
    /// keeper ends once its child has, without a word; wait for that and
    /// reap it. One that has not ended within [`ABORT_WAIT`] (its child
    /// stopped, say) is killed, and the child dies with it (its
    /// parent-death signal): nothing of COMMAND runs either way.
    pub(super) fn abort(&mut self) {
        let until = std::time::Instant::now() + ABORT_WAIT;
        while !self.dead {
            if self.read_one(false).is_some() || self.dead {
                continue;
            }
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                let _ = nix::sys::signal::kill(self.pid, nix::sys::signal::Signal::SIGKILL);
                break;
            }
            let _ = crate::signals::wait_readable(self.fd(), left);
        }
        self.dead = true;
        self.ctl = None;
        while nix::sys::wait::waitpid(self.pid, None) == Err(nix::errno::Errno::EINTR) {}
    }

    /// The job is over: the keeper reaps the leader and exits (see
    /// [`Dismissal`]).
    pub fn finish(&mut self) {
        drop(self.dismissal());
    }

    /// The keeper's "done", said when the [`Dismissal`] is dropped.
    pub fn dismissal(&mut self) -> Dismissal {
        Dismissal {
            pid: self.pid,
            ctl: self.ctl.take(),
        }
    }

    /// One whole report, if there is one (blocking: wait for it).
    fn read_one(&mut self, block: bool) -> Option<(i32, i32, i32)> {
        while self.have < MESSAGE && !self.dead {
            let rest = &mut self.partial[self.have..];
            match nix::unistd::read(&self.status, rest) {
                Ok(0) => self.dead = true,
                Ok(n) => self.have += n,
                Err(nix::errno::Errno::EINTR) => {}
                Err(nix::errno::Errno::EAGAIN) if !block => return None,
                Err(nix::errno::Errno::EAGAIN) => {
                    // A stopped keeper says nothing: look for that too.
                    let wait = std::time::Duration::from_millis(200);
                    if !crate::signals::wait_readable(self.fd(), wait) && self.continue_now() {
                        self.was_stopped = true;
                    }
                }
                Err(_) => self.dead = true,
            }
        }
        if self.have < MESSAGE {
            return None;
        }
        self.have = 0;
        let word = |i: usize| {
            i32::from_ne_bytes([
                self.partial[i],
                self.partial[i + 1],
                self.partial[i + 2],
                self.partial[i + 3],
            ])
        };
        Some((word(0), word(4), word(8)))
    }
}

/// The keeper's "done" (`R`), said when this is dropped: the keeper
/// reaps the leader and exits. Once nothing of the job is left, the
/// caller drops it while the release is on its way to Redis, so that the
/// keeper's exit (a wake-up and an address space to tear down) takes a
/// core while we only wait, not before the release is sent. The keeper
/// is reaped here if it is done already; else [`reap_dismissed`] waits
/// for it, a little, at our exit.
#[derive(Debug)]
pub struct Dismissal {
    pid: Pid,
    ctl: Option<OwnedFd>,
}

impl Dismissal {
    /// The keeper's pid.
    pub fn pid(&self) -> Pid {
        self.pid
    }
}

/// How long a keeper told "done" is waited for (see [`reap_dismissed`]).
const DISMISSED_END: std::time::Duration = std::time::Duration::from_millis(100);

/// The keeper told "done" that had not ended yet (see [`Dismissal`]), whose
/// end [`reap_dismissed`] is to see (0: none).
static DISMISSED: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// Reap the keeper [`DISMISSED`] names, just before we exit (which gives
/// it the most time to have ended): it has usually ended by now,
/// else it is waited for a little (at most [`DISMISSED_END`]: a stopped
/// keeper is not). Left to end after we do, it would be a zombie of
/// whatever adopts it, for good where that is a container's first
/// process that reaps nothing.
pub fn reap_dismissed() {
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    let pid = DISMISSED.swap(0, std::sync::atomic::Ordering::Relaxed);
    if pid <= 0 {
        return;
    }
    let pid = Pid::from_raw(pid);
    if waitpid(pid, Some(WaitPidFlag::WNOHANG)) != Ok(WaitStatus::StillAlive) {
        return;
    }
    // Our own child, unreaped: the pid is its.
    let Some(fd) = pidfd(pid) else {
        return;
    };
    if crate::signals::wait_readable(fd.as_fd(), DISMISSED_END) {
        let _ = waitpid(pid, Some(WaitPidFlag::WNOHANG));
    }
}

/// A pidfd of `pid` (pidfd_open(2)), readable once it has ended; `None`
/// where the kernel has none (before Linux 5.3) or the pid is gone. The
/// caller makes sure the pid is still the process it means: unreaped,
/// and reaped only by itself or by a process that waits for its word.
pub(super) fn pidfd(pid: Pid) -> Option<OwnedFd> {
    // SAFETY: a system call that takes a number and makes a descriptor.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid.as_raw(), 0) };
    let fd = RawFd::try_from(fd).ok().filter(|&fd| fd >= 0)?;
    // SAFETY: a new descriptor of our own.
    Some(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

impl Drop for Dismissal {
    fn drop(&mut self) {
        use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
        if let Some(ctl) = self.ctl.take() {
            let mut message = [0u8; CTL];
            message[0] = b'R';
            let _ = nix::unistd::write(&ctl, &message);
        }
        if waitpid(self.pid, Some(WaitPidFlag::WNOHANG)) == Ok(WaitStatus::StillAlive) {
            DISMISSED.store(self.pid.as_raw(), std::sync::atomic::Ordering::Relaxed);
        }
    }
}

impl Drop for Keeper {
    /// Never reaped (an early return): closing the pipe without a word
    /// makes the keeper stop the whole tree.
    fn drop(&mut self) {
        if self.ctl.take().is_some() {
            let _ = nix::sys::wait::waitpid(self.pid, Some(nix::sys::wait::WaitPidFlag::WNOHANG));
        }
    }
}

/// Two pipes (each `[read, write]`, close-on-exec): ours to the keeper,
/// the keeper's to us.
pub(super) fn pipes() -> io::Result<[OwnedFd; 4]> {
    let (ctl_r, ctl_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let (st_r, st_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    Ok([ctl_r, ctl_w, st_r, st_w])
}

/// What the keeper runs COMMAND with (prepared before the fork).
pub(super) struct Start {
    /// `clone`'s entry point and its argument (the prepared exec).
    pub entry: extern "C" fn(*mut libc::c_void) -> c_int,
    pub arg: *mut libc::c_void,
    /// Top of the stack COMMAND's child runs on until it execs (16-byte
    /// aligned), and how many bytes lie below it.
    pub stack_top: *mut libc::c_void,
    pub stack_len: usize,
    /// Where the child leaves the `errno` of a failed exec (0: none).
    pub failed: *const std::sync::atomic::AtomicI32,
    /// Where the child leaves the `errno` of a failed join of the
    /// job's cgroup (0: none; then it does not exec).
    pub join_failed: *const std::sync::atomic::AtomicI32,
    /// Set by the keeper while the child is made in the job's cgroup
    /// (see clone3.rs): then it does not join by a write.
    pub in_cgroup: *const std::sync::atomic::AtomicI32,
    /// Set by the child just before its `execve`: 0 when the keeper
    /// resumes means it was parked and never told to go (or was killed).
    pub went: *const std::sync::atomic::AtomicI32,
    /// A forked child's pipe, set by the keeper (see `clone_child`).
    pub said: *const std::sync::atomic::AtomicI32,
    /// The keeper's pid, for the child's parent-death check.
    pub parent: *const std::sync::atomic::AtomicI32,
    /// The lease's end (CLOCK_MONOTONIC ns) when COMMAND starts, 0 for
    /// none: a redlock-run stopped before it could say anything else
    /// still has its job killed then.
    pub lease_end: i64,
    /// A parked child's "go" message (see spawn.rs), which holds the
    /// lease's end instead, once it has gone; null when not parked.
    pub go: *const u8,
    /// The "go" pipe's writing end (-1: none): redlock-run's alone, so
    /// that its end (or its death) is the parked child's EOF.
    pub go_w: RawFd,
    /// The job's cgroup (see cgroup.rs), or -1s.
    pub cgroup: super::cgroup::Fds,
    /// /proc is there and shows our own processes (not a host's /proc
    /// seen from a PID namespace): only then are children listed from it.
    pub proc_ok: bool,
    /// Our command line's memory is to be overwritten in the keeper (see
    /// [`retitle`]), so that `pkill -f` patterns for redlock-run do not
    /// select it: /proc shows our own processes.
    pub retitle: bool,
    /// The keeper is the init of a PID namespace: `kill(-1)` is the job.
    pub init: bool,
    /// Our binary's read-only pages, which the keeper lets go of once
    /// COMMAND runs (see trim.rs).
    pub trim: super::trim::Segments,
}

/// The keeper's name in `ps`, `pkill` and `killall`: not redlock-run's,
/// so that killing a stuck wrapper by name leaves the keeper to end the
/// job's tree.
pub const NAME: &std::ffi::CStr = c"redlock-keeper";

extern "C" fn on_sigchld(_: c_int) {}

/// The keeper itself, in the forked child. Never returns.
///
/// # Safety
/// Only in the child of `fork`, with every signal blocked; `start` points
/// at data prepared before the fork. Only system calls from here on.
pub(super) unsafe fn run(start: &Start, fds: [RawFd; 4]) -> ! {
    use std::sync::atomic::Ordering;
    let [ctl_r, ctl_w, st_r, st_w] = fds;
    libc::close(ctl_w);
    libc::close(st_r);
    if start.go_w >= 0 {
        libc::close(start.go_w);
    }
    // Out of redlock-run's group: a signal to that group (Ctrl-C, a stop,
    // `kill -9 -PGID`) must not reach the one process that cleans up.
    libc::setpgid(0, 0);
    libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    libc::prctl(libc::PR_SET_NAME, NAME.as_ptr());
    // A keeper stopped when redlock-run dies is continued by the kernel,
    // to find its pipe closed and end the tree (nobody else would).
    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGCONT);
    // A parked start may wait long: named at once. Else COMMAND first.
    let parked = !start.go.is_null();
    if parked && start.retitle {
        retitle();
    }
    // Our own SIGCHLD handler (redlock-run's would write to its pipe).
    let mut action: libc::sigaction = std::mem::zeroed();
    action.sa_sigaction = on_sigchld as extern "C" fn(c_int) as usize;
    libc::sigaction(libc::SIGCHLD, &action, std::ptr::null_mut());
    (*start.parent).store(libc::getpid(), Ordering::Relaxed);
    let leader = clone_child(start);
    if leader < 0 {
        report(st_w, START_FAILED, errno(), 0);
        libc::_exit(0);
    }
    exec_or_exit(start, leader, st_w);
    report(st_w, SPAWNED, leader, 0);
    if !parked && start.retitle {
        retitle();
    }
    // COMMAND has its own copies: hold nothing of redlock-run's (its
    // stdout, its sockets), so that nothing waits on us once it is done.
    let cgroup = start.cgroup;
    close_all_but(&[ctl_r, st_w, cgroup.kill, cgroup.events]);
    let tree = Tree {
        leader,
        cgroup,
        proc_ok: start.proc_ok,
        init: start.init,
        trim: start.trim,
    };
    // The lease's end we start with, and how many ends that counts as
    // told (see `let_go`): redlock-run does not tell again the one in our
    // own copy, made before the fork (see `Keeper::new`). A parked child
    // reads its "go" into our memory (a forked one says its lease's end,
    // see `heard`); redlock-run tells that end again all the same.
    let (lease_end, ends) = match start.go.is_null() {
        true => (start.lease_end, u32::from(start.lease_end > 0)),
        false => (i64::from_ne_bytes(*start.go.cast::<[u8; 8]>()), 0),
    };
    keep(&tree, ctl_r, st_w, lease_end, ends)
}

/// Clone COMMAND's child onto its prepared stack, sharing our memory, and
/// return once it has exec'd or ended (or -1: no child).
///
/// A parked child (see park.rs) may wait long for its "go": it is not
/// cloned with `CLONE_VFORK`, whose wait would show us in the `D` state,
/// counted in the host's load average, all that while. We sleep on a
/// pipe instead, whose writing end only the child holds, closed by its
/// exec (close-on-exec) or its end. Until then we touch nothing it reads,
/// and no call of ours can fail (the child shares our `errno`): every
/// signal is blocked. Where such a clone is refused (qemu-user), the
/// parked child is forked instead, and says on that pipe what it would
/// have left in our memory.
///
/// # Safety
/// As [`run`]: in the keeper only, before anything else runs below it.
unsafe fn clone_child(start: &Start) -> c_int {
    use std::sync::atomic::Ordering;
    let mut flags = libc::CLONE_VM;
    let mut exec = [-1; 2];
    if start.go.is_null() || libc::pipe2(exec.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
        flags |= libc::CLONE_VFORK;
    }
    let mut leader = -1;
    if start.cgroup.dir >= 0 {
        // Made in the cgroup, without a move's wait (see clone3.rs); else
        // as before, and the child joins by a write.
        (*start.in_cgroup).store(1, Ordering::Release);
        let (top, len, dir) = (start.stack_top, start.stack_len, start.cgroup.dir);
        leader = super::clone3::clone_into(start.entry, top, len, flags, start.arg, dir);
        if leader < 0 {
            (*start.in_cgroup).store(0, Ordering::Release);
        }
    }
    if leader < 0 {
        leader = libc::clone(
            start.entry,
            start.stack_top,
            flags | libc::SIGCHLD,
            start.arg,
        );
    }
    let forked = leader < 0 && exec[1] >= 0 && errno() == libc::EINVAL;
    if forked {
        // qemu-user refuses a clone that shares our memory without
        // CLONE_VFORK's wait (it makes every such clone a fork or a
        // thread). A fork then: the child says on the pipe what it would
        // have left in our memory (see `heard`).
        (*start.said).store(exec[1], Ordering::Relaxed);
        let flags = (flags & !libc::CLONE_VM) | libc::SIGCHLD;
        leader = libc::clone(start.entry, start.stack_top, flags, start.arg);
    }
    if exec[1] >= 0 {
        libc::close(exec[1]);
        if leader > 0 && forked {
            heard(start, exec[0]);
        } else {
            let mut byte = 0u8;
            while leader > 0 && libc::read(exec[0], std::ptr::addr_of_mut!(byte).cast(), 1) < 0 {}
        }
        libc::close(exec[0]);
    }
    leader
}

/// What a forked child said on `pipe` until its exec (or its end) closed
/// it, left where a child that shares our memory leaves it (see
/// `spawn::Exec::say`).
///
/// # Safety
/// As [`clone_child`], with `pipe` the reading end of the child's.
unsafe fn heard(start: &Start, pipe: RawFd) {
    use super::spawn::{SAID, SAID_FAILED, SAID_JOIN_FAILED, SAID_WENT};
    use std::sync::atomic::Ordering;
    let mut word = [0u8; SAID];
    while super::spawn::read_whole(pipe, word.as_mut_ptr(), SAID) {
        let mut tag = [0u8; 4];
        tag.copy_from_slice(&word[..4]);
        let mut value = [0u8; 8];
        value.copy_from_slice(&word[4..]);
        let errno_of = || c_int::try_from(i64::from_ne_bytes(value)).unwrap_or(libc::EIO);
        match i32::from_ne_bytes(tag) {
            SAID_WENT => {
                // Where `run` reads the lease's end of a parked start.
                std::ptr::copy_nonoverlapping(value.as_ptr(), start.go.cast_mut(), 8);
                (*start.went).store(1, Ordering::Release);
            }
            SAID_FAILED => (*start.failed).store(errno_of(), Ordering::Release),
            SAID_JOIN_FAILED => (*start.join_failed).store(errno_of(), Ordering::Release),
            _ => {}
        }
    }
}

/// After COMMAND's child has left the keeper's memory (the `clone` has
/// returned): return if it exec'd, else reap it, say why not (nothing if
/// it was parked and never told to go, see spawn.rs), and exit.
///
/// # Safety
/// As [`run`]: in the keeper only; `leader` is its own child.
unsafe fn exec_or_exit(start: &Start, leader: c_int, st_w: RawFd) {
    use std::sync::atomic::Ordering;
    let join_failed = (*start.join_failed).load(Ordering::Acquire);
    // Only a parked child can end without going; a child cloned with
    // CLONE_VFORK has exec'd or failed when the clone returns (and under
    // qemu-user, which makes that clone a fork, its writes to our memory
    // never reach us: the exec alone must count).
    let went = start.go.is_null() || (*start.went).load(Ordering::Acquire) != 0;
    let failed = (*start.failed).load(Ordering::Acquire);
    if join_failed == 0 && went && failed == 0 {
        return;
    }
    let mut status = 0;
    libc::waitpid(leader, &mut status, 0);
    if join_failed != 0 {
        report(st_w, START_FAILED, join_failed, 0);
    } else if failed != 0 {
        report(st_w, EXEC_FAILED, failed, 0);
    }
    // Not gone: parked and never told to go (the lock was not had, or
    // redlock-run died), or killed; nothing ran, nothing to say.
    libc::_exit(0);
}

/// Once the keeper knows a second lease's end (a refresh: COMMAND
/// runs on), the keeper runs a loop of a few pages on a few locals until
/// COMMAND's end: what start-up mapped of the binary goes (it stays in
/// the page cache, shared), and so does redlock-run's memory (its heap,
/// its threads' stacks), which the keeper never reads again (see
/// trim.rs). A job that ends before a refresh is not touched: its end is
/// on the hand-over's path, where the pages would fault back in.
///
/// # Safety
/// As [`run`], once COMMAND has exec'd (its child's stack is unused).
unsafe fn let_go(start: &Tree) {
    // Only in the static build: in a dynamically linked one, a preloaded
    // library (LD_PRELOAD: a fake clock, a test's shim) may wrap the calls
    // the keeper makes and keep its state in memory of that kind.
    if cfg!(target_env = "musl") && start.proc_ok {
        let here = 0u8;
        let errno_at = libc::__errno_location() as usize;
        super::trim::drop_anonymous([std::ptr::addr_of!(here) as usize, errno_at]);
    }
    start.trim.drop_pages();
}

/// What the keeper watches: COMMAND's leader (its own child, unreaped
/// until the end), and where the rest of the job is found.
struct Tree {
    leader: c_int,
    cgroup: super::cgroup::Fds,
    proc_ok: bool,
    /// The init of the job's PID namespace: every other process in it is
    /// the job's (and dies with us).
    init: bool,
    /// Our binary's read-only segments (see [`let_go`]).
    trim: super::trim::Segments,
}

/// Overwrite our command line's memory with [`NAME`], NUL-padded: where
/// it is, `arg_start` and `arg_end`, read from our own `/proc/self/stat`
/// (here, beside redlock-run's acquire, rather than by redlock-run before
/// it), into a buffer on our stack. Nothing when it cannot be read.
///
/// # Safety
/// As [`run`]: in the keeper only (the memory is our own copy of
/// redlock-run's, which nothing reads here; a child cloned into it has
/// exec'd, or is parked and reads nothing of it).
unsafe fn retitle() {
    let mut stat = [0u8; 2048];
    let path = c"/proc/self/stat";
    // openat, not open: musl's open adds an fcntl for O_CLOEXEC.
    let fd = libc::openat(
        libc::AT_FDCWD,
        path.as_ptr(),
        libc::O_RDONLY | libc::O_CLOEXEC,
    );
    if fd < 0 {
        return;
    }
    let mut len = 0;
    while len < stat.len() {
        let n = libc::read(fd, stat[len..].as_mut_ptr().cast(), stat.len() - len);
        match n {
            0 => break,
            n if n < 0 && errno() == libc::EINTR => continue,
            n if n < 0 => break,
            n => len += n as usize,
        }
    }
    libc::close(fd);
    let Some((start, end)) = arg_area(&stat[..len]) else {
        return;
    };
    let (at, len) = (
        std::ptr::with_exposed_provenance_mut::<u8>(start),
        end - start,
    );
    let name = NAME.to_bytes();
    std::ptr::write_bytes(at, 0, len);
    std::ptr::copy_nonoverlapping(name.as_ptr(), at, name.len().min(len - 1));
}

/// `arg_start` and `arg_end`, fields 48 and 49 of a `/proc/PID/stat`
/// (there since Linux 3.5), when they make an area of at least two bytes.
/// The command's name (field 2) may hold spaces and parentheses: the
/// fields are counted from the last `)`, after which the state is field
/// 3. Allocates nothing (the keeper may not).
fn arg_area(stat: &[u8]) -> Option<(usize, usize)> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let mut fields = stat[close + 1..]
        .split(|b| b.is_ascii_whitespace())
        .filter(|f| !f.is_empty())
        .skip(45);
    let mut number = || -> Option<usize> {
        let field = fields.next()?;
        let digits = field.iter().all(u8::is_ascii_digit) && field.len() <= 19;
        digits.then(|| field.iter().fold(0, |n, d| n * 10 + usize::from(d - b'0')))
    };
    let (start, end) = (number()?, number()?);
    (start > 0 && end >= start + 2).then_some((start, end))
}

/// The keeper's watch over COMMAND's leader, until redlock-run says it
/// is done or is gone (`ctl_r` at its end). Never returns.
///
/// # Safety
/// As [`run`]: in the keeper only, system calls on our own locals.
unsafe fn keep(tree: &Tree, ctl_r: RawFd, st_w: RawFd, lease_end: i64, ends: u32) -> ! {
    // If redlock-run died before we were set up, the pipe says so too.
    let mut allow: libc::sigset_t = std::mem::zeroed();
    libc::sigfillset(&mut allow);
    libc::sigdelset(&mut allow, libc::SIGCHLD);
    // Every message waiting is read before the lease's end is looked at
    // (a keeper that was stopped must not act on an end since extended).
    let flags = libc::fcntl(ctl_r, libc::F_GETFL);
    libc::fcntl(ctl_r, libc::F_SETFL, flags | libc::O_NONBLOCK);
    let mut reported = false;
    // The lease's end (CLOCK_MONOTONIC, ns), as redlock-run last told us;
    // 0: none to watch.
    let mut lease_end = lease_end;
    let mut killing = false;
    let mut message = [0u8; CTL];
    let mut have = 0;
    // Lease ends told (see `let_go`).
    let mut ends = ends;
    loop {
        let mut fds = [libc::pollfd {
            fd: ctl_r,
            events: libc::POLLIN,
            revents: 0,
        }];
        let mut timeout: libc::timespec = std::mem::zeroed();
        let wait = poll_timeout(killing, lease_end, &mut timeout);
        let ready = libc::ppoll(fds.as_mut_ptr(), 1, wait, &allow);
        if ready > 0 {
            let was = ends;
            ends += read_messages(tree, ctl_r, &mut message, &mut have, &mut lease_end);
            if was < 2 && ends >= 2 {
                let_go(tree);
            }
        }
        if !reported {
            reported = watch_leader(tree, st_w, ready <= 0);
        } else if ready <= 0 {
            // A SIGCHLD (EINTR) or the killing round's timeout: reap. A
            // SIGCHLD that came with a message stays pending (blocked
            // outside ppoll) and ends the next ppoll at once.
            reap_others(tree);
        }
        if !killing && lease_end > 0 && monotonic_ns() >= lease_end {
            // The lease is over and redlock-run has not stopped the job
            // (it is stopped or hung itself): nothing may run on.
            report(st_w, WATCHDOG, 0, 0);
            killing = true;
        }
        if killing {
            kill_all(tree);
        }
    }
}

/// Read every message waiting on `ctl_r` (nonblocking), keeping a part
/// of one in `message[..have]`; the newest lease's end goes to
/// `lease_end`; how many ends were read. At redlock-run's end (the pipe
/// closed), or its "done", the keeper ends here.
///
/// # Safety
/// As [`run`]: in the keeper only; `ctl_r` is the control pipe's
/// nonblocking reading end.
unsafe fn read_messages(
    tree: &Tree,
    ctl_r: RawFd,
    message: &mut [u8; CTL],
    have: &mut usize,
    lease_end: &mut i64,
) -> u32 {
    let mut ends = 0;
    loop {
        let n = libc::read(ctl_r, message[*have..].as_mut_ptr().cast(), CTL - *have);
        if n == 0 || (n < 0 && errno() != libc::EINTR && errno() != libc::EAGAIN) {
            // redlock-run is gone: nothing of the job may run on.
            kill_tree(tree);
            libc::_exit(0);
        }
        if n < 0 {
            return ends;
        }
        *have += usize::try_from(n).unwrap_or(0);
        if *have == CTL {
            *have = 0;
            *lease_end = lease_end_in(message, tree.leader);
            ends += 1;
        }
    }
}

/// A whole message from redlock-run: the lease's new end (`L`), or done:
/// then the leader is reaped and the keeper exits.
///
/// # Safety
/// As [`run`]: in the keeper only.
unsafe fn lease_end_in(message: &[u8; CTL], leader: c_int) -> i64 {
    let mut value = [0u8; 8];
    value.copy_from_slice(&message[1..]);
    match message[0] {
        b'L' => i64::from_ne_bytes(value),
        _ => {
            // Done: redlock-run stopped what was left; the leader goes.
            let mut status = 0;
            while libc::waitpid(leader, &mut status, 0) < 0 && errno() == libc::EINTR {}
            libc::_exit(0);
        }
    }
}

/// How long `ppoll` may wait: set in `timeout` (the caller's local, which
/// the pointer points at), or null: no limit. Allocates nothing.
fn poll_timeout(
    killing: bool,
    lease_end: i64,
    timeout: &mut libc::timespec,
) -> *const libc::timespec {
    if killing {
        // Children of killed processes come to us: again, shortly.
        timeout.tv_nsec = 10_000_000;
        timeout as *const libc::timespec
    } else if lease_end > 0 {
        let left = (lease_end - monotonic_ns()).max(0);
        timeout.tv_sec = left / 1_000_000_000;
        timeout.tv_nsec = left % 1_000_000_000;
        timeout as *const libc::timespec
    } else {
        std::ptr::null()
    }
}

/// `until` on CLOCK_MONOTONIC in nanoseconds, as the keeper is told it
/// (never 0, which means none).
pub(super) fn deadline_ns(until: std::time::Instant) -> i64 {
    let left = until.saturating_duration_since(std::time::Instant::now());
    let left = i64::try_from(left.as_nanos()).unwrap_or(i64::MAX);
    monotonic_ns().saturating_add(left).max(1)
}

/// CLOCK_MONOTONIC in nanoseconds (the clock of Rust's `Instant`).
pub(super) fn monotonic_ns() -> i64 {
    // SAFETY: clock_gettime writes into our local.
    unsafe {
        let mut now: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now);
        now.tv_sec
            .saturating_mul(1_000_000_000)
            .saturating_add(now.tv_nsec)
    }
}

/// Report the leader's stops (consuming them) and, once, its end (not
/// reaping it); reap the other children that ended if `reap` (a signal or
/// a timeout woke us: a message from redlock-run is no reason to look).
/// Whether the end was reported.
///
/// # Safety
/// Only in the keeper (see [`run`]): system calls on the stack, no
/// allocation. `tree.leader` is the keeper's own child (a positive pid)
/// and `st_w` the open writing end of the status pipe.
unsafe fn watch_leader(tree: &Tree, st_w: RawFd, reap: bool) -> bool {
    let leader = tree.leader;
    loop {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let stopped = libc::waitid(
            libc::P_PID,
            leader.unsigned_abs(),
            &mut info,
            libc::WSTOPPED | libc::WNOHANG,
        );
        if stopped != 0 || info.si_pid() == 0 {
            break;
        }
        report(st_w, STOPPED, info.si_status(), 0);
    }
    let mut info: libc::siginfo_t = std::mem::zeroed();
    let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
    let ended = libc::waitid(libc::P_PID, leader.unsigned_abs(), &mut info, flags) == 0
        && info.si_pid() != 0;
    // With a cgroup, its `populated` flag says whether anything is left
    // (the kernel clears it before the leader's end is reported to us),
    // and the orphans' zombies are reaped after our report: off the path
    // to the release.
    let populated = match ended {
        true => super::cgroup::populated_raw(tree.cgroup.events),
        false => None,
    };
    // Else the leader's orphans were handed to us before its end was
    // reported (the kernel reparents first): what is left is listed now.
    let left = match (populated, ended || reap) {
        (Some(populated), _) => Some(usize::from(populated)),
        (None, true) => reap_others(tree),
        (None, false) => None,
    };
    if ended {
        // One write, so one wake-up of redlock-run: it releases the lock
        // once it has both.
        let exited = [EXITED, info.si_code, info.si_status()];
        match left == Some(0) {
            true => report_all(st_w, &[[ALONE, 0, 0], exited]),
            false => report_all(st_w, &[exited]),
        }
    }
    if populated.is_some() {
        reap_others(tree);
    }
    ended
}

/// Reap every child but the leader that has ended (orphans handed to us);
/// how many others still run (`None`: not known, no /proc and no cgroup).
///
/// A child reaped here may have handed its own children to us after the
/// list was read: then the list is read again, until a pass reaps none
/// (a count from one snapshot would miss them). With a cgroup, the
/// kernel's `populated` flag answers instead of the count.
///
/// # Safety
/// Only in the keeper (see [`run`]): system calls on the stack, no
/// allocation; `tree.leader` is the keeper's own child.
unsafe fn reap_others(tree: &Tree) -> Option<usize> {
    let leader = tree.leader;
    let counted = loop {
        let mut running = 0;
        let mut reaped = false;
        let listed = tree.proc_ok
            && each_child(|pid| {
                if pid != leader {
                    let mut status = 0;
                    match libc::waitpid(pid, &mut status, libc::WNOHANG) {
                        0 => running += 1,
                        r if r > 0 => reaped = true,
                        _ => {}
                    }
                }
            });
        if !listed {
            break None;
        }
        if !reaped {
            break Some(running);
        }
    };
    match super::cgroup::populated_raw(tree.cgroup.events) {
        Some(populated) => Some(usize::from(populated)),
        None => counted,
    }
}

/// SIGKILL everything below us once (the leader's zombie stays unreaped).
///
/// # Safety
/// Only in the keeper (see [`run`]), with `tree.leader` its own unreaped
/// child: then `-leader` is COMMAND's group, whose id cannot be reused
/// meanwhile, and `leader` itself (it may have left its group).
unsafe fn kill_all(tree: &Tree) {
    super::cgroup::kill_raw(tree.cgroup.kill);
    if tree.init {
        libc::kill(-1, libc::SIGKILL);
    }
    libc::kill(-tree.leader, libc::SIGKILL);
    libc::kill(tree.leader, libc::SIGKILL);
    if tree.proc_ok {
        each_child(|pid| {
            libc::kill(pid, libc::SIGKILL);
        });
    }
}

/// redlock-run is gone: SIGKILL everything below us, round after round
/// (the children of a killed process become ours), until nothing is left.
///
/// # Safety
/// As [`kill_all`]: only in the keeper, with `tree.leader` its own
/// unreaped child; it reaps every child, the leader too.
unsafe fn kill_tree(tree: &Tree) {
    loop {
        // Without /proc or a cgroup the children cannot be listed: the
        // group and the leader at least.
        kill_all(tree);
        let mut status = 0;
        let reaped = libc::waitpid(-1, &mut status, 0);
        if reaped < 0 && errno() == libc::ECHILD {
            return;
        }
        while libc::waitpid(-1, &mut status, libc::WNOHANG) > 0 {}
    }
}

/// Call `f` with each of our children's pids, from
/// `/proc/thread-self/children`, read into a buffer on the stack; false
/// when that file cannot be read (no /proc).
///
/// # Safety
/// Only in the keeper (see [`run`]): system calls on the stack, no
/// allocation; `f` must keep to the same (it runs between those calls).
unsafe fn each_child(mut f: impl FnMut(c_int)) -> bool {
    // openat, not open: musl's open adds an fcntl for O_CLOEXEC.
    let fd = libc::openat(
        libc::AT_FDCWD,
        c"/proc/thread-self/children".as_ptr(),
        libc::O_RDONLY | libc::O_CLOEXEC,
    );
    if fd < 0 {
        return false;
    }
    let complete;
    let mut buf = [0u8; 512];
    let mut pid: c_int = 0;
    let mut digits = false;
    loop {
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        if n < 0 && errno() == libc::EINTR {
            continue;
        }
        if n <= 0 {
            complete = n == 0;
            break;
        }
        for &b in &buf[..usize::try_from(n).unwrap_or(0)] {
            if b.is_ascii_digit() {
                pid = pid.saturating_mul(10).saturating_add(c_int::from(b - b'0'));
                digits = true;
            } else if digits {
                f(pid);
                pid = 0;
                digits = false;
            }
        }
    }
    if digits {
        f(pid);
    }
    libc::close(fd);
    complete
}

/// Close every fd but those in `keep` (close_range; nothing if the
/// kernel has none). Negative entries are ignored.
///
/// # Safety
/// Only in the keeper (see [`run`]) once COMMAND has its copies: every
/// other descriptor is closed under whatever owns it, so nothing may use
/// one afterwards.
unsafe fn close_all_but(keep: &[RawFd]) {
    let mut sorted = [RawFd::MAX; 4];
    for (slot, &fd) in sorted.iter_mut().zip(keep) {
        *slot = if fd < 0 { RawFd::MAX } else { fd };
    }
    sorted.sort_unstable();
    let close = |from: RawFd, to: RawFd| {
        if let (Ok(from), Ok(to)) = (u32::try_from(from), u32::try_from(to)) {
            if from <= to {
                libc::syscall(libc::SYS_close_range, from, to, 0u32);
            }
        }
    };
    let mut next = 0;
    for fd in sorted {
        if fd == RawFd::MAX {
            break;
        }
        close(next, fd - 1);
        next = fd + 1;
    }
    close(next, RawFd::MAX);
}

/// One report (a pipe write of up to PIPE_BUF bytes is atomic).
///
/// # Safety
/// Only in the keeper (see [`run`]): a `write` from the stack; `fd` is the
/// status pipe's writing end.
unsafe fn report(fd: RawFd, tag: i32, a: i32, b: i32) {
    report_all(fd, &[[tag, a, b]]);
}

/// Up to two reports in one write (atomic: under PIPE_BUF bytes).
///
/// # Safety
/// As [`report`].
unsafe fn report_all(fd: RawFd, reports: &[[i32; 3]]) {
    let mut message = [0u8; 2 * MESSAGE];
    let mut len = 0;
    for words in reports.iter().take(2) {
        for word in words {
            message[len..len + 4].copy_from_slice(&word.to_ne_bytes());
            len += 4;
        }
    }
    while libc::write(fd, message.as_ptr().cast(), len) < 0 && errno() == libc::EINTR {}
}

fn errno() -> c_int {
    nix::errno::Errno::last_raw()
}

#[cfg(test)]
mod tests {
    use super::arg_area;

    /// A stat line's fields after the name: 3 to 52, each its own number
    /// but 48 and 49 (`arg_start`, `arg_end`).
    fn stat(name: &str, start: &str, end: &str) -> Vec<u8> {
        let fields: Vec<String> = (3..=52)
            .map(|i| match i {
                3 => "S".to_string(),
                48 => start.to_string(),
                49 => end.to_string(),
                _ => i.to_string(),
            })
            .collect();
        format!("4242 ({name}) {}\n", fields.join(" ")).into_bytes()
    }

    #[test]
    fn the_command_lines_area_is_found_after_the_last_parenthesis() {
        let area = arg_area(&stat("redlock-run", "140737488347136", "140737488347200"));
        assert_eq!(area, Some((140737488347136, 140737488347200)));
        // A name with spaces and a parenthesis of its own.
        let area = arg_area(&stat("a) 1 2 (b", "1000", "1010"));
        assert_eq!(area, Some((1000, 1010)));
    }

    #[test]
    fn no_area_when_the_fields_are_missing_or_not_an_area() {
        assert_eq!(arg_area(b""), None);
        assert_eq!(arg_area(b"4242 (x) S 1 2 3"), None);
        assert_eq!(arg_area(&stat("x", "0", "10")), None);
        assert_eq!(arg_area(&stat("x", "1000", "1001")), None);
        assert_eq!(arg_area(&stat("x", "1000", "999")), None);
        assert_eq!(arg_area(&stat("x", "10x0", "2000")), None);
        assert_eq!(arg_area(&stat("x", "99999999999999999999", "2000")), None);
    }
}
