//! A start made ready while the run asks for (or waits for) its lock, so
//! that neither COMMAND's start after the acquire nor a hand-over waits
//! for a fork, a clone, a cgroup join and the resetting of signal
//! handlers.
//!
//! Before its first attempt at the lock (again once it settles down to
//! wait, if that failed), a run forks the keeper, whose clone of
//! COMMAND's first process goes as far as it can without the lock: its
//! own process group, the job's cgroup, the parent-death signal, the
//! signal handlers reset (but not the terminal: while we wait, Ctrl-C
//! must reach our group, not a group of the job's).
//! There it is parked, blocked on a pipe's read, every signal blocked
//! (only SIGKILL ends it); the keeper sleeps meanwhile on a pipe that the
//! child's exec closes (not in a `vfork`'s wait, which would count in the
//! load average: see `keeper::clone_child`). What is known only once the lock is ours (the
//! fence, the token, the lease's end, whether COMMAND takes the terminal)
//! comes in one message, read straight into fixed slots the environment
//! points at: the child shares the keeper's memory and allocates nothing.
//!
//! Nothing of COMMAND runs without the lock: the pipe's writing end is
//! ours alone (the keeper closes its copy, and ours closes on exec), so
//! when the lock is not had (busy at the end of `--wait`, a signal, an
//! error) or we die (even by SIGKILL), the child reads EOF and exits, and
//! the keeper after it, without a word.

use std::ffi::OsString;
use std::io;
use std::os::fd::OwnedFd;
use std::time::Instant;

use super::keeper::{self, Keeper};
use super::spawn::{self, Failed, GO, LATE_MAX};
use super::{Cgroup, Containment, Job};

/// A keeper whose child waits to exec COMMAND; given up when dropped.
pub struct Parked {
    keeper: Option<Keeper>,
    /// Our end of the "go" pipe: the message, or EOF.
    go: Option<OwnedFd>,
    /// The late variables' names, in the message's order.
    late: Vec<String>,
    cgroup: Option<Cgroup>,
    pid_namespace: bool,
    /// The containment's name and line (see [`Containment`]).
    contained: (&'static str, String),
}

/// Get `argv` ready to start as [`super::spawn`] would, with `env` on top
/// of our environment, and each name of `late` (up to four) given its
/// value in [`Parked::start`].
pub fn park(
    argv: &[OsString],
    env: &[(&str, &str)],
    late: &[&str],
    containment: Containment,
) -> Result<Parked, Failed> {
    let contained = (containment.name(), containment.describe());
    let pid_namespace = containment.pid_namespace;
    let cgroup = containment.cgroup.ok();
    let (go_r, go_w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| Failed::Start(e.into()))?;
    // The terminal is decided at the start, in the message.
    let setup = super::setup(false, None, cgroup.as_ref(), pid_namespace);
    let keeper = spawn::park(argv, env, late, &setup, (&go_r, &go_w))?;
    Ok(Parked {
        keeper: Some(keeper),
        go: Some(go_w),
        late: late.iter().map(|name| name.to_string()).collect(),
        cgroup,
        pid_namespace,
        contained,
    })
}

impl Parked {
    /// How the job's tree will be held: its name and its line for `-v`.
    pub fn contained(&self) -> (&'static str, &str) {
        (self.contained.0, &self.contained.1)
    }

    /// The lock is ours: COMMAND runs, with `values` for the late names
    /// (in their order) and the keeper watching `lease_end`; as
    /// [`super::spawn`] says, once it has exec'd, or why not.
    pub fn start(mut self, values: &[&str], lease_end: Option<Instant>) -> Result<Job, Failed> {
        let mut keeper = self.keeper.take();
        let go = self.go.take();
        let pid_namespace = self.pid_namespace;
        let late = std::mem::take(&mut self.late);
        super::start_job(self.cgroup.take(), |foreground, _| {
            let (Some(keeper), Some(go)) = (keeper.take(), go) else {
                return Err(Failed::Start(io::Error::other("started twice")));
            };
            let message = match message(&late, values, lease_end, foreground) {
                Ok(message) => message,
                Err(e) => {
                    drop(go);
                    let mut keeper = keeper;
                    keeper.abort();
                    return Err(e);
                }
            };
            // A failed write (the keeper or its child was killed) leaves
            // the keeper's report to say so.
            let _ = nix::unistd::write(&go, &message);
            drop(go);
            spawn::started(keeper, pid_namespace)
        })
    }
}

impl Drop for Parked {
    /// Not started: the child reads EOF and exits, the keeper after it.
    /// Both are gone, and the cgroup removed, when this returns.
    fn drop(&mut self) {
        self.go = None;
        if let Some(mut keeper) = self.keeper.take() {
            keeper.abort();
        }
    }
}

/// The "go" message (see [`spawn::GO`]): the lease's end, whether to take
/// the terminal, and each late `NAME=value` in its slot, NUL-padded.
fn message(
    late: &[String],
    values: &[&str],
    lease_end: Option<Instant>,
    terminal: bool,
) -> Result<[u8; GO], Failed> {
    let mut message = [0u8; GO];
    message[..8].copy_from_slice(&lease_end.map_or(0, keeper::deadline_ns).to_ne_bytes());
    message[8] = u8::from(terminal);
    if late.len() != values.len() || late.len() > LATE_MAX {
        return Err(Failed::Start(io::Error::other("late values do not match")));
    }
    for (i, (name, value)) in late.iter().zip(values).enumerate() {
        let entry = format!("{name}={value}");
        let slot = &mut message[spawn::slot(i)];
        // Room for its NUL; a NUL inside would cut it short.
        if entry.len() >= slot.len() || entry.contains('\0') {
            let why = format!("{name} does not fit its slot ({} bytes)", entry.len());
            return Err(Failed::Start(io::Error::other(why)));
        }
        slot[..entry.len()].copy_from_slice(entry.as_bytes());
    }
    Ok(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn late_values_fill_their_slots_nul_padded() {
        let late = ["REDLOCK_FENCE".to_string(), "REDLOCK_TOKEN".to_string()];
        let m = message(&late, &["42", "abc"], None, true).unwrap();
        assert_eq!(&m[..8], &0i64.to_ne_bytes());
        assert_eq!(m[8], 1);
        let slot = &m[spawn::slot(0)];
        assert_eq!(&slot[..17], b"REDLOCK_FENCE=42\0");
        assert!(slot.iter().skip(16).all(|&b| b == 0));
        assert_eq!(&m[spawn::slot(1)][..18], b"REDLOCK_TOKEN=abc\0");
    }

    #[test]
    fn a_value_too_long_for_its_slot_is_refused() {
        let late = ["X".to_string()];
        let long = "y".repeat(spawn::LATE_SLOT);
        assert!(message(&late, &[&long], None, false).is_err());
        assert!(message(&late, &["a\0b"], None, false).is_err());
        assert!(message(&late, &[], None, false).is_err());
    }
}
