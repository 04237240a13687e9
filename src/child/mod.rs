//! COMMAND's process tree: spawn it (its own process group, the terminal,
//! the parent-death signal, the signal dispositions it inherits), signal
//! it, stop it, find what it left behind, and reap it.
//!
//! COMMAND runs under a keeper (keeper.rs): a small forked process that is
//! its parent and the job's child subreaper, so that whatever COMMAND
//! starts stays below it even when it leaves the process group (`setsid`
//! daemons, `set -m`) and its parent exits, and dies with it if we die.
//! The tree is found under `/proc/<keeper>/task/<keeper>/children`,
//! recursively (a walk of the job's own tree, not of every process on the
//! host), and stopped before the lock is released. redlock-run is a
//! subreaper too: if the keeper is killed, what it held comes to us.
//!
//! The leader is reaped last on purpose: while it is an unreaped zombie
//! its pid, which is also the group id, cannot be reused, so signalling
//! the group can never hit a stranger.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

use nix::errno::Errno;
use nix::sys::signal::{self, killpg, Signal};
use nix::sys::wait::{waitid, waitpid, Id, WaitPidFlag, WaitStatus};
use nix::unistd::{self, Pid};

use crate::cli::Contain;
use crate::exit::Exit;

mod cgroup;
mod clone3;
mod keeper;
mod park;
mod reserve;
mod spawn;
mod trim;

pub use cgroup::Cgroup;
pub use keeper::{reap_dismissed, Dismissal};
pub use park::{park, Parked};
pub use spawn::Failed;
pub use trim::trim;

use keeper::Keeper;

/// Whether SIGPIPE was ignored when the process started, before Rust's
/// runtime set it to ignored: COMMAND gets the disposition we were given.
static SIGPIPE_WAS_IGNORED: AtomicBool = AtomicBool::new(false);

/// Runs before `main` (and before the runtime touches SIGPIPE).
///
/// The C runtime (glibc's and musl's, so both builds) calls every pointer
/// in the ELF `.init_array` section before `main`, and Rust's runtime sets
/// SIGPIPE to ignored only in `main`'s preamble: this is the one place
/// where the disposition our parent gave us can still be seen. `#[used]`
/// keeps the linker from dropping the otherwise unreferenced static. The
/// hook runs before Rust's runtime is set up, so it does one `sigaction`
/// query and an atomic store: no allocation, no I/O, no panic.
#[used]
#[link_section = ".init_array"]
static NOTE_SIGPIPE: extern "C" fn() = note_sigpipe;

extern "C" fn note_sigpipe() {
    let ignored = crate::signals::ignored(nix::libc::SIGPIPE);
    SIGPIPE_WAS_IGNORED.store(ignored, Ordering::Relaxed);
}

/// Make orphaned descendants ours if the keeper dies (see the module doc).
pub fn become_subreaper() {
    let _ = nix::sys::prctl::set_child_subreaper(true);
}

/// A running COMMAND.
pub struct Job {
    /// The leader's pid, which is also the group's id.
    pgid: Pid,
    /// COMMAND's parent, the job's subreaper (see keeper.rs).
    keeper: Keeper,
    /// How the leader ended, once reaped.
    reaped: Option<Exit>,
    /// Our own process group, when stdin is our session's terminal (in
    /// the foreground, COMMAND is given it; in the background, after
    /// `&`, it is given it once the shell puts us in the foreground).
    terminal_owner: Option<Pid>,
    /// The job's cgroup, when one could be made: then the kernel lists
    /// the job's processes and kills them (see cgroup.rs).
    cgroup: Option<Cgroup>,
    /// A refresh was confirmed while the job runs (see [`Job::news`]).
    refreshed: bool,
    /// The leader's pidfd, readable once it has ended (see
    /// [`Job::watch_end`]).
    end: Option<OwnedFd>,
}

/// How the leader is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leader {
    Running,
    /// Stopped by a signal (Ctrl-Z on its terminal, or someone's SIGSTOP).
    Stopped,
    /// Exited or killed; not reaped yet.
    Gone,
}

/// How the job's tree is held (see the module doc and cgroup.rs).
pub struct Containment {
    /// A cgroup of its own, or why there is none.
    cgroup: Result<Cgroup, String>,
    /// The keeper is the init of a PID namespace of the job's own.
    pid_namespace: bool,
}

impl Containment {
    /// What `--contain` asks for, as far as this host allows: an error
    /// (a local failure) when it asks for more than can be had.
    pub fn choose(contain: Contain) -> Result<Containment, String> {
        let cgroup = match contain {
            Contain::Keeper => Err("--contain keeper".to_string()),
            _ => Cgroup::create(),
        };
        let pid_namespace = contain == Contain::PidNamespace;
        if let (Contain::Cgroup, Err(why)) = (contain, &cgroup) {
            return Err(format!("--contain cgroup: no cgroup for COMMAND ({why})"));
        }
        if pid_namespace && !proc_is_ours() {
            let why = "its leader is found in /proc, and /proc is missing or not ours";
            return Err(format!("--contain pid-namespace: {why}"));
        }
        Ok(Containment {
            cgroup,
            pid_namespace,
        })
    }

    /// What a run here would get, for `doctor`: whether a cgroup can be
    /// made (one is made and removed to find out), and the line to say.
    pub fn probe() -> (bool, String) {
        match Cgroup::create() {
            Ok(c) => {
                c.remove();
                let below = c.path().parent().unwrap_or(c.path());
                (
                    true,
                    format!("a cgroup of its own (made below {})", below.display()),
                )
            }
            Err(why) => (false, format!("its keeper process only (no cgroup: {why})")),
        }
    }

    /// Its name in JSON events: `cgroup` or `keeper`, `+pid-namespace`.
    pub fn name(&self) -> &'static str {
        match (&self.cgroup, self.pid_namespace) {
            (Ok(_), false) => "cgroup",
            (Err(_), false) => "keeper",
            (Ok(_), true) => "cgroup+pid-namespace",
            (Err(_), true) => "keeper+pid-namespace",
        }
    }

    /// One line for `-v` and `doctor`.
    pub fn describe(&self) -> String {
        let held = match &self.cgroup {
            Ok(c) => format!("a cgroup of its own ({})", c.path().display()),
            Err(why) => format!("its keeper process only (no cgroup: {why})"),
        };
        match self.pid_namespace {
            true => format!("{held}, in a PID namespace whose init is the keeper"),
            false => held,
        }
    }
}

/// Start `argv` in a new process group with `env` added to its environment
/// (a name with an empty value is removed from it). `lease_end`: when the
/// lock's lease ends as of now (the keeper kills the job then unless told
/// of a later end).
pub fn spawn(
    argv: &[OsString],
    env: &[(&str, &str)],
    lease_end: Option<std::time::Instant>,
    containment: Containment,
) -> Result<Job, Failed> {
    let pid_namespace = containment.pid_namespace;
    let cgroup = containment.cgroup.ok();
    start_job(cgroup, |foreground, cgroup| {
        let setup = setup(foreground, lease_end, cgroup, pid_namespace);
        spawn::spawn(argv, env, &setup)
    })
}

/// How COMMAND's child is to be set up (see spawn.rs).
fn setup(
    give_terminal: bool,
    lease_end: Option<std::time::Instant>,
    cgroup: Option<&Cgroup>,
    pid_namespace: bool,
) -> spawn::Setup {
    spawn::Setup {
        sigpipe_ignored: SIGPIPE_WAS_IGNORED.load(Ordering::Relaxed),
        give_terminal,
        caught: crate::signals::caught_mask(),
        lease_end,
        cgroup: cgroup.map_or(cgroup::Fds::NONE, Cgroup::fds),
        pid_namespace,
    }
}

/// The job `start` starts (told whether COMMAND is to take the terminal,
/// and the job's cgroup): its leader given the terminal from our side
/// too, or, when it did not start, the terminal ours again and the
/// cgroup removed.
fn start_job(
    cgroup: Option<Cgroup>,
    start: impl FnOnce(bool, Option<&Cgroup>) -> Result<(Pid, Keeper), Failed>,
) -> Result<Job, Failed> {
    let terminal_owner = our_terminal();
    let foreground = terminal_owner.is_some_and(is_foreground);
    let (pgid, keeper) = start(foreground, cgroup.as_ref()).inspect_err(|_| {
        // The child took the terminal before its exec failed: the caller
        // (a shell, a script) must not be left behind a dead group.
        if let (Some(ours), true) = (terminal_owner, foreground) {
            without_sigttou(|| unistd::tcsetpgrp(stdin(), ours));
        }
        if let Some(c) = &cgroup {
            c.remove();
        }
    })?;
    if foreground {
        // Also from this side, so it holds whichever process runs first.
        without_sigttou(|| unistd::tcsetpgrp(stdin(), pgid));
    }
    Ok(Job {
        pgid,
        keeper,
        reaped: None,
        terminal_owner,
        cgroup,
        refreshed: false,
        end: None,
    })
}

/// The exit code for a spawn error: 127 not found, 126 not executable,
/// 71 when no process could be created (a local failure).
pub fn spawn_error_exit(e: &Failed) -> Exit {
    match e {
        Failed::Start(_) => Exit::LocalFailure,
        Failed::Exec(e) if e.kind() == io::ErrorKind::NotFound => Exit::NotFound,
        Failed::Exec(_) => Exit::CannotInvoke,
    }
}

impl Job {
    /// Clear stale cgroups beside the job's (see
    /// [`Cgroup::sweep_siblings`]); nothing without a cgroup.
    pub fn sweep_stale(&self) {
        if let Some(cgroup) = &self.cgroup {
            cgroup.sweep_siblings();
        }
    }

    /// Send `sig` to COMMAND's process group and to every descendant that
    /// left it. Only until [`Job::reap`], which consumes the job.
    pub fn signal(&self, sig: Signal) {
        if self.reaped.is_some() {
            // Only without /proc (see `drain_blind` in supervise.rs).
            signal_group_if_alive(self.pgid, sig);
            return;
        }
        if sig == Signal::SIGKILL {
            if let Some(c) = &self.cgroup {
                c.kill();
            }
        }
        let _ = killpg(self.pgid, sig);
        // Only to those outside the group: the group's members got it
        // already, and a second copy can land in a shell's vfork child
        // before it execs (dash's, which shares the shell's memory and
        // handlers), where it eats the shell's pending trap. The leader
        // too, if it left its group (it is unreaped: its pid is safe).
        if unistd::getpgid(Some(self.pgid)).is_ok_and(|g| g != self.pgid) {
            let _ = signal::kill(self.pgid, sig);
        }
        // A stop is listed again until a pass finds nobody new: a process
        // forked while the tree was listed (a double fork under way) would
        // run on through a job-control stop (the chaos campaign, seed
        // 20261204 episode 313); a stopped process forks no more, and one
        // that is stopped has no fork in flight either (one that got the
        // signal inside `fork` finishes it first, and its child could come
        // after the next listing): each pass waits for its stops to land.
        let passes = if sig == Signal::SIGSTOP { 8 } else { 1 };
        let mut sent = Vec::new();
        for _ in 0..passes {
            let before = sent.len();
            for (pid, pgid) in self.others(false).unwrap_or_default() {
                if pgid != self.pgid.as_raw() && !sent.contains(&pid) {
                    let _ = signal::kill(pid, sig);
                    sent.push(pid);
                }
            }
            if sent.len() == before {
                break;
            }
            if sig == Signal::SIGSTOP {
                until_stopped(&sent[before..]);
            }
        }
    }

    /// Every live process of the job but the leader, with its group:
    /// from the cgroup when there is one, else from /proc (`None`: no
    /// usable /proc).
    fn others(&self, leader_gone: bool) -> Option<Vec<(Pid, i32)>> {
        if let Some(c) = &self.cgroup {
            let members = c.members().into_iter().filter(|&p| p != self.pgid);
            let grouped =
                members.filter_map(|p| Some((p, unistd::getpgid(Some(p)).ok()?.as_raw())));
            return Some(grouped.collect());
        }
        if self.keeper.killed() {
            self.keeper.reap_dead();
            // The leader, handed to us with the keeper reaped, dies of its
            // parent-death signal: once it is a zombie its children are
            // ours to list too (it stays unreaped: its pid is the group's).
            let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT;
            while waitid(Id::Pid(self.pgid), flags) == Err(Errno::EINTR) {}
        }
        let keeper = (!self.keeper.dead()).then(|| self.keeper.pid());
        descendants(self.pgid, keeper, leader_gone)
    }

    /// The one stop protocol: SIGTERM (with SIGCONT, so that a stopped job
    /// can act on it) now; [`Job::kill`] when the grace is over.
    pub fn terminate(&self) {
        self.signal(Signal::SIGTERM);
        self.signal(Signal::SIGCONT);
    }

    /// SIGKILL to everything (stopped processes die of it too).
    pub fn kill(&self) {
        self.signal(Signal::SIGKILL);
    }

    /// Look at the leader without reaping it or blocking (the keeper
    /// reports its stops and its end).
    pub fn leader(&mut self) -> Leader {
        self.keeper.poll();
        if self.keeper.exit().is_some() {
            Leader::Gone
        } else if self.keeper.take_stop().is_some() {
            Leader::Stopped
        } else {
            Leader::Running
        }
    }

    /// Tell the keeper the lease's end: past it, a job still running is
    /// killed by the keeper (see keeper.rs).
    ///
    /// A later end than the first is a refresh confirmed: COMMAND runs on,
    /// and from then on the binary's pages are let go of before each
    /// wait (see [`Job::news`] and trim.rs).
    pub fn lease_until(&mut self, until: std::time::Instant) {
        if self.keeper.lease_until(until) {
            self.refreshed = true;
        }
    }

    /// Whether the keeper killed the job at the lease's end.
    pub fn killed_by_keeper(&self) -> bool {
        self.keeper.fired()
    }

    /// Readable when the keeper has news of the leader; `None` once the
    /// leader's end is known (nothing more will come).
    ///
    /// Asked just before each wait: while a job that has seen a refresh
    /// runs on, the binary's pages are let go of then (the wait may be
    /// long, and what runs after it maps again only what it touches).
    /// Not once the leader has ended: the release is on the hand-over's
    /// path, where the pages would fault back in.
    pub fn news(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        let running = self.keeper.exit().is_none();
        if running && self.refreshed {
            trim::trim();
        }
        running.then(|| self.keeper.fd())
    }

    /// Watch for the leader's end ourselves, not only through the keeper:
    /// with the job in a cgroup of its own, the leader's end and the
    /// cgroup's `populated 0` say together that nothing of the job runs
    /// any more, and the release need not wait for the keeper to wake up,
    /// look and tell us (see [`Job::tree_gone`]). Not where there is no
    /// such cgroup, nor where COMMAND may have the terminal (it is given
    /// back after the leader's end, before the release).
    pub fn watch_end(&mut self) {
        if self.cgroup.is_none() || self.terminal_owner.is_some() {
            return;
        }
        // The keeper reaps the leader only once told "done": until then
        // the pid is the leader's.
        self.end = keeper::pidfd(self.pgid);
    }

    /// Readable once the leader has ended, while the keeper has not said
    /// so (see [`Job::watch_end`]).
    pub fn end(&self) -> Option<BorrowedFd<'_>> {
        match self.keeper.exit() {
            None => self.end.as_ref().map(|fd| fd.as_fd()),
            Some(_) => None,
        }
    }

    /// Whether the leader has ended with nothing of the job left in its
    /// cgroup (the kernel moves a process out of it before the end that
    /// makes the pidfd readable). Once the leader has ended with something
    /// left, no more: the keeper's report and the drain see to the rest.
    pub fn tree_gone(&mut self) -> bool {
        let ended = self
            .end()
            .is_some_and(|fd| crate::signals::wait_readable(fd, std::time::Duration::ZERO));
        if !ended {
            return false;
        }
        let empty = self.cgroup.as_ref().and_then(Cgroup::populated) == Some(false);
        if !empty {
            self.end = None;
        }
        empty
    }

    /// How many processes COMMAND left behind (in its group or below us),
    /// once the leader is gone. `None` when they cannot be counted
    /// (no usable /proc): see [`Job::reap`].
    pub fn leftovers(&self) -> Option<usize> {
        if self.keeper.alone() {
            // The keeper looked once the leader had ended: nothing left.
            return Some(0);
        }
        if let Some(c) = &self.cgroup {
            if c.populated() == Some(false) {
                return Some(0);
            }
        }
        let found = self.others(true)?;
        Some(found.len())
    }

    /// The job's cgroup, empty once the job is reaped: removed when it is
    /// dropped, which the caller may leave until after the release (its
    /// `rmdir` need not delay the next holder).
    pub fn take_cgroup(&mut self) -> Option<Cgroup> {
        self.cgroup.take()
    }

    /// Whether the keeper was killed before the leader ended (the leader
    /// died with it).
    pub fn keeper_killed(&self) -> bool {
        self.keeper.killed()
    }

    /// The keeper's pid, for messages.
    pub fn keeper_pid(&self) -> Pid {
        self.keeper.pid()
    }

    /// Continue the keeper if it was stopped; whether it was.
    pub fn keeper_continued(&mut self) -> bool {
        self.keeper.continue_if_stopped()
    }

    /// Whether stdin is our session's terminal (job control applies).
    pub fn owns_terminal(&self) -> bool {
        self.terminal_owner.is_some()
    }

    /// COMMAND, on our terminal, was stopped (Ctrl-Z, or SIGTTIN/SIGTTOU
    /// after `&`). Its group is not the shell's job, ours is: stop the rest
    /// of the job's tree (descendants in other groups and sessions did not
    /// see the terminal's signal), take the terminal back, and stop our
    /// whole group (a script that called us stops too), so that the shell
    /// sees the job stopped and gets its prompt back. Returns once continued.
    pub fn follow_stop(&self) {
        let Some(ours) = self.terminal_owner else {
            return;
        };
        self.signal(Signal::SIGSTOP);
        // After `bg` the shell owns the terminal: leave it there.
        if unistd::tcgetpgrp(stdin()) == Ok(self.pgid) {
            without_sigttou(|| unistd::tcsetpgrp(stdin(), ours));
        }
        let _ = killpg(ours, Signal::SIGSTOP);
    }

    /// After we were continued: give the terminal back to COMMAND if we
    /// are in the foreground, and continue it.
    pub fn resume(&self) {
        if let Some(ours) = self.terminal_owner {
            if unistd::tcgetpgrp(stdin()) == Ok(ours) {
                without_sigttou(|| unistd::tcsetpgrp(stdin(), self.pgid));
            }
        }
        self.signal(Signal::SIGCONT);
    }

    /// Reap the leader (once), give the terminal back, and say how it ended.
    pub fn reap(&mut self) -> Exit {
        let exit = self.ended();
        self.keeper.finish();
        exit
    }

    /// As [`Job::reap`], with the leader reaped (and the keeper gone) only
    /// when the [`Dismissal`] returned is dropped: by the caller, while the
    /// release is on its way. Only once nothing of the job is left.
    pub fn reap_later(&mut self) -> (Exit, Dismissal) {
        let exit = self.ended();
        (exit, self.keeper.dismissal())
    }

    /// How the leader ended (waited for, once), with the terminal given
    /// back.
    fn ended(&mut self) -> Exit {
        if let Some(exit) = self.reaped {
            return exit;
        }
        let exit = self.keeper.wait_exit();
        if let Some(ours) = self.terminal_owner {
            // Back to us if COMMAND's group had it, or a group that is no
            // more (one the job made); never taken from the shell (`bg`).
            let fg = unistd::tcgetpgrp(stdin());
            let dead = |pg: Pid| killpg(pg, None) == Err(Errno::ESRCH);
            if fg.is_ok_and(|fg| fg == self.pgid || (fg != ours && dead(fg))) {
                without_sigttou(|| unistd::tcsetpgrp(stdin(), ours));
            }
        }
        self.reaped = Some(exit);
        exit
    }
}

/// Without /proc the leftovers cannot be listed. What is left of the tree
/// is then found by reaping: after the leader is reaped, `waitid` on all
/// children says whether any descendant still lives (every one of them is
/// our child by then, or below one). Returns whether any does.
pub fn descendants_remain() -> bool {
    loop {
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG;
        match waitid(Id::All, flags) {
            // A zombie reaped; look again.
            Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) => continue,
            Ok(_) => return true,
            Err(Errno::EINTR) => continue,
            Err(_) => return false,
        }
    }
}

/// Send `sig` to process group `pgid` if it still has members. Only for
/// the case without /proc after the leader was reaped: a group with a
/// live member keeps its id, so it cannot be a stranger's.
fn signal_group_if_alive(pgid: Pid, sig: Signal) {
    if killpg(pgid, None).is_ok() {
        let _ = killpg(pgid, sig);
    }
}

fn stdin() -> BorrowedFd<'static> {
    // SAFETY: fd 0 stays open for the life of the process.
    unsafe { BorrowedFd::borrow_raw(0) }
}

/// Our process group, if stdin is our session's terminal.
fn our_terminal() -> Option<Pid> {
    // SAFETY: a query on fd 0, which stays open.
    let session = unsafe { nix::libc::tcgetsid(0) };
    (session > 0 && unistd::getsid(None).ok()?.as_raw() == session).then(unistd::getpgrp)
}

/// Whether `ours` is the terminal's foreground group.
fn is_foreground(ours: Pid) -> bool {
    unistd::tcgetpgrp(stdin()) == Ok(ours)
}

/// Run a terminal call that a background process may make only with
/// SIGTTOU blocked (otherwise the kernel stops us).
fn without_sigttou(f: impl FnOnce() -> nix::Result<()>) {
    let mut set = signal::SigSet::empty();
    set.add(Signal::SIGTTOU);
    let blocked = set.thread_block().is_ok();
    let _ = f();
    if blocked {
        let _ = set.thread_unblock();
    }
}

/// Every live process below us but `leader` (with its process group), from
/// `/proc/self/task/*/children` (recursively): the cost grows with our own
/// tree, not with the host's process count. Zombies among our own children
/// (orphans handed to us that exited) are reaped on the way; the leader is
/// reaped last, by [`Job::reap`]. `None` when /proc cannot be read: it is
/// missing or not ours, or a read failed for another reason than a
/// process that exited while we looked (out of file descriptors: then the
/// walk is made once more with the one kept in reserve, see reserve.rs).
/// A walk that could not see never says "nothing left".
/// `leader_gone`: the leader is known to have exited (its state need not
/// be read).
fn descendants(leader: Pid, keeper: Option<Pid>, leader_gone: bool) -> Option<Vec<(Pid, i32)>> {
    if !proc_is_ours() {
        return None;
    }
    let look = || walk(leader, keeper, leader_gone);
    match look() {
        Ok(found) => Some(found),
        Err(e) if reserve::full(&e) => reserve::spend(look).ok(),
        Err(_) => None,
    }
}

/// The walk of [`descendants`], one file open at a time; an error when a
/// file could not be read for another reason than its process's end.
fn walk(leader: Pid, keeper: Option<Pid>, leader_gone: bool) -> io::Result<Vec<(Pid, i32)>> {
    // The walk starts at the keeper, the job's subreaper (one file: it is
    // single-threaded); if it is gone (reaped: a zombie's list is empty),
    // what it held was handed to us.
    let from = match keeper {
        Some(k) => pids_in(format!("/proc/{k}/task/{k}/children"))?,
        None => None,
    };
    let (root, from_keeper) = match from {
        Some(children) => (children, true),
        None => (own_children()?, false),
    };
    let keeper = keeper.unwrap_or(Pid::from_raw(0));
    let mut found = Vec::new();
    let mut parents: Vec<(i32, Option<Vec<i32>>)> = vec![(0, Some(root))];
    while let Some((parent, known)) = parents.pop() {
        // Only our own children (the keeper gone) are ours to reap.
        let ours = known.is_some() && !from_keeper;
        let children = match known {
            Some(children) => children,
            // None: a process that exited while we looked.
            None => match children_of(parent)? {
                Some(children) => children,
                None => continue,
            },
        };
        for pid in children {
            let group = match leader_gone && pid == leader.as_raw() {
                true => None,
                false => live_group(pid)?,
            };
            let live = group.is_some();
            let skip = pid == leader.as_raw() || pid == keeper.as_raw();
            if let (Some(group), false) = (group, skip) {
                found.push((Pid::from_raw(pid), group));
            } else if !live && ours && !skip {
                let _ = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG));
            }
            // A zombie has no children of its own.
            if live {
                parents.push((pid, None));
            }
        }
    }
    Ok(found)
}

/// Keep a file descriptor in reserve for the walk of COMMAND's tree (see
/// reserve.rs): once, as a run starts, while descriptors are plenty.
pub fn keep_reserve() {
    reserve::keep();
}

/// How much lower the CPU priority of a run's tail is (see [`give_way`]).
/// Five steps, not the lowest (19): under the kernel's EEVDF scheduler a
/// task at nice 19 beside busy ones waits hundreds of milliseconds for a
/// core (the run's exit at 8 busy processes on 2 cores: median 80 ms
/// against 35, 99th percentile 349 ms against 48); at nice 5 the tail
/// costs nothing measurable there and keeps most of the hand-over's gain
/// (docs/benchmarks.md, "The end of a run").
const GIVE_WAY: i32 = 5;

/// Once the release is on its way, what is left of a run (our reading of
/// its reply, the keeper's exit, the cgroup's removal, our own exit)
/// gives way to whoever runs next: this thread (the main one; threads and
/// processes started from it from now on too) and the keeper `keeper`
/// take a CPU priority [`GIVE_WAY`] steps lower than ours was. On a busy
/// machine the next holder, woken by our release, then gets a core
/// before our tail does.
pub fn give_way(keeper: Option<Pid>) {
    // SAFETY: getpriority(2) and setpriority(2) on this thread and on our
    // own child; raising a nice value needs no privilege, and a failure
    // changes nothing. (A failed getpriority says -1, as a nice of -1
    // does: 4 then, and a nice above it is kept, lowering it is refused.)
    unsafe {
        use nix::libc::{getpriority, id_t, setpriority, PRIO_PROCESS};
        let nice = getpriority(PRIO_PROCESS, 0)
            .saturating_add(GIVE_WAY)
            .min(19);
        setpriority(PRIO_PROCESS, 0, nice);
        if let Some(keeper) = keeper.and_then(|k| id_t::try_from(k.as_raw()).ok()) {
            setpriority(PRIO_PROCESS, keeper, nice);
        }
    }
}

/// Whether /proc shows our own processes: not missing, and not a host's
/// /proc seen from a PID namespace (its pids are not ours to wait for or
/// signal): `/proc/self` names our pid as /proc counts them. Asked once.
pub fn proc_is_ours() -> bool {
    static OURS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OURS.get_or_init(|| {
        let link = std::fs::read_link("/proc/self").ok();
        let pid = link.and_then(|l| l.to_str()?.parse::<u32>().ok());
        pid == Some(std::process::id())
    })
}

/// The first child of `pid` (its only thread's), from /proc: the
/// oldest (the kernel lists children in the order they became so, and
/// orphans handed over later come after).
fn first_child(pid: Pid) -> Option<Pid> {
    let children = pids_in(format!("/proc/{pid}/task/{pid}/children")).ok()??;
    children.first().map(|&p| Pid::from_raw(p))
}

/// Our own children: those of the main thread. Only it starts COMMAND,
/// and orphans are handed to a subreaper's first live thread, which is
/// the main thread while we run (`find_new_reaper` in the kernel): one
/// file to read, not a directory of threads.
fn own_children() -> io::Result<Vec<i32>> {
    let pid = std::process::id();
    // We are alive: our own file missing is no end of ours.
    pids_in(format!("/proc/{pid}/task/{pid}/children"))?
        .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
}

/// The children of every thread of `pid`; `None` if it is gone. The
/// directory is read to its end and closed before any thread's file is
/// opened: one descriptor at a time.
fn children_of(pid: i32) -> io::Result<Option<Vec<i32>>> {
    let tasks = match std::fs::read_dir(format!("/proc/{pid}/task")) {
        Ok(dir) => dir,
        Err(e) if gone(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut paths = Vec::new();
    for task in tasks {
        match task {
            Ok(task) => paths.push(task.path().join("children")),
            Err(e) if gone(&e) => return Ok(None),
            Err(e) => return Err(e),
        }
    }
    let mut children = Vec::new();
    for path in paths {
        // A thread that ended meanwhile has no children left.
        children.extend(pids_in(path)?.unwrap_or_default());
    }
    Ok(Some(children))
}

/// The pids listed in a `children` file; `None` if its process is gone.
fn pids_in(path: impl AsRef<std::path::Path>) -> io::Result<Option<Vec<i32>>> {
    let Some(text) = read_proc(path)? else {
        return Ok(None);
    };
    Ok(Some(
        text.split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect(),
    ))
}

/// A file of a process under /proc; `None` if the process is gone (it
/// exited while we looked), an error if it could not be read for any
/// other reason (no descriptor left, no right to it): then it may still
/// run, and nothing may be concluded from the silence.
fn read_proc(path: impl AsRef<std::path::Path>) -> io::Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if gone(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether a read of /proc failed because its process is gone.
fn gone(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(nix::libc::ESRCH)
}

/// Wait until each of `pids` is stopped (or gone), for at most
/// [`STOP_LANDS`]: a process in uninterruptible sleep stops when it
/// wakes, which may take longer, and the stop must not hang on it.
fn until_stopped(pids: &[Pid]) {
    if !proc_is_ours() {
        return;
    }
    let deadline = std::time::Instant::now() + STOP_LANDS;
    for pid in pids {
        while !stopped_or_gone(*pid) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }
}

/// How long a job-control stop waits for its SIGSTOPs to land.
const STOP_LANDS: std::time::Duration = std::time::Duration::from_millis(100);

/// Whether `pid` is stopped (traced or not), a zombie, or gone.
fn stopped_or_gone(pid: Pid) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, s)| s.split_whitespace().next());
    matches!(state, Some("T" | "t" | "Z" | "X") | None)
}

/// The process group of `pid`, if it is not a zombie (zombies run nothing)
/// and not gone.
fn live_group(pid: i32) -> io::Result<Option<i32>> {
    let Some(stat) = read_proc(format!("/proc/{pid}/stat"))? else {
        return Ok(None);
    };
    // The state follows the command name, which may hold spaces and parens;
    // then the parent, then the group.
    let group = || {
        let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
        match fields.next()? {
            "Z" | "X" => None,
            _ => fields.nth(1)?.parse().ok(),
        }
    };
    Ok(group())
}
