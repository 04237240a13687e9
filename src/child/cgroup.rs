//! A cgroup (v2) of the job's own: the kernel's list of every process of
//! the job, and its way to kill them all at once.
//!
//! COMMAND's first process is made in the cgroup (`clone3`, see
//! clone3.rs), or joins it before it execs where that call is refused;
//! whatever it starts stays in it, whatever it does (`setsid`, a double
//! fork, a leader that changes its process group), and a zombie leaves
//! it. So "is anything of the job left" is the kernel's `populated`
//! flag, with no snapshot to race and no /proc to trust, and one write to
//! `cgroup.kill` SIGKILLs the whole tree, nested cgroups included, with
//! no fork between the listing and the kill. The job cannot see it (its
//! pid, its parent and its session are what they would be without it).
//!
//! Made where the process may: cgroup v2 mounted (`/sys/fs/cgroup`, or
//! `/sys/fs/cgroup/unified` on a hybrid host) with `cgroup.kill` (Linux
//! 5.14), and our own cgroup writable (root, or a delegated subtree).
//! Elsewhere the keeper alone does the job (see keeper.rs).

use std::ffi::CString;
use std::fs;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::libc;
use nix::unistd::Pid;

/// The mount points tried, pure v2 first.
const MOUNTS: [&str; 2] = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"];

/// `statfs`'s `f_type` of a cgroup v2 file system.
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

/// The prefix of the cgroups this tool makes; the rest is our pid.
const PREFIX: &str = "redlock-run.";

/// The job's cgroup, with the files the keeper and COMMAND's first
/// process use after the fork (opened here: they may only make system
/// calls then).
pub struct Cgroup {
    dir: PathBuf,
    /// The directory itself, open: COMMAND's child is made in it (see
    /// clone3.rs).
    dir_fd: OwnedFd,
    /// `cgroup.kill`, for writing "1".
    kill: OwnedFd,
    /// `cgroup.events`, read from offset 0 each time.
    events: OwnedFd,
}

/// The raw descriptors the keeper and COMMAND's child get (-1: none).
#[derive(Clone, Copy)]
pub struct Fds {
    pub dir: RawFd,
    pub kill: RawFd,
    pub events: RawFd,
}

impl Fds {
    pub const NONE: Fds = Fds {
        dir: -1,
        kill: -1,
        events: -1,
    };
}

impl Cgroup {
    /// A new cgroup below our own, or why there is none (the keeper alone
    /// then). Cgroups left by runs that were killed are cleared later, once
    /// COMMAND is started ([`Cgroup::sweep_siblings`]).
    pub fn create() -> Result<Cgroup, String> {
        let mount = MOUNTS
            .iter()
            .map(Path::new)
            .find(|m| is_cgroup2(m))
            .ok_or("no cgroup v2 file system is mounted")?;
        let parent = mount.join(own_cgroup().unwrap_or_default().trim_start_matches('/'));
        // Our pid alone is not unique: runs in other PID namespaces share
        // this parent (and a stranger's cgroup is never ours to clear).
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let dir = parent.join(format!("{PREFIX}{}.{}", std::process::id(), &nonce[..12]));
        fs::create_dir(&dir)
            .map_err(|e| format!("cannot create a cgroup in {}: {e}", parent.display()))?;
        let open = |name: &str, flags: libc::c_int| {
            open_in(&dir, name, flags).map_err(|e| format!("cannot open {name}: {e}"))
        };
        let made = (|| {
            Ok::<_, String>(Cgroup {
                dir_fd: open(".", libc::O_RDONLY | libc::O_DIRECTORY)?,
                // Missing before Linux 5.14: the keeper alone then.
                kill: open("cgroup.kill", libc::O_WRONLY)?,
                events: open("cgroup.events", libc::O_RDONLY)?,
                dir: dir.clone(),
            })
        })();
        if made.is_err() {
            let _ = fs::remove_dir(&dir);
        }
        made
    }

    pub fn fds(&self) -> Fds {
        Fds {
            dir: self.dir_fd.as_raw_fd(),
            kill: self.kill.as_raw_fd(),
            events: self.events.as_raw_fd(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Clear the cgroups that runs killed before they could remove theirs
    /// left beside ours. Called once COMMAND is started: the listing then
    /// runs while COMMAND execs, off the path to its start.
    pub fn sweep_siblings(&self) {
        if let Some(parent) = self.dir.parent() {
            sweep(parent);
        }
    }

    /// SIGKILL every process in the cgroup and below, at once.
    pub fn kill(&self) {
        // SAFETY: a write from a local buffer to our own descriptor.
        unsafe { kill_raw(self.kill.as_raw_fd()) };
    }

    /// Whether any process of the job is left (`None`: unreadable).
    pub fn populated(&self) -> Option<bool> {
        // SAFETY: a read into a local buffer from our own descriptor.
        unsafe { populated_raw(self.events.as_raw_fd()) }
    }

    /// Every process in the cgroup and its descendants, as pids of our
    /// own namespace (the kernel translates them, whatever /proc shows).
    pub fn members(&self) -> Vec<Pid> {
        let mut found = Vec::new();
        collect(&self.dir, &mut found, 0);
        found
    }

    /// Remove the cgroup once the job is gone (a kill is not instant: a
    /// few tries), with any the job made below it (a nested run killed
    /// before it removed its own).
    pub fn remove(&self) {
        for _ in 0..50 {
            if remove_tree(&self.dir, 0) || !self.dir.exists() {
                return;
            }
            if self.populated() == Some(true) {
                self.kill();
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
}

impl std::fmt::Debug for Cgroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Cgroup").field(&self.dir).finish()
    }
}

impl Drop for Cgroup {
    /// Never used (a run that did not get its lock) or done with: gone.
    /// A job still in it is killed: nothing of it may outlive its lock.
    fn drop(&mut self) {
        self.remove();
    }
}

/// Remove the (empty) cgroup `dir` and the cgroups below it, deepest
/// first; whether `dir` is gone.
fn remove_tree(dir: &Path, depth: usize) -> bool {
    if fs::remove_dir(dir).is_ok() {
        return true;
    }
    if depth < 16 {
        for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&entry.path(), depth + 1);
            }
        }
    }
    fs::remove_dir(dir).is_ok()
}

/// Write "1" to a `cgroup.kill` descriptor; nothing if it is -1.
///
/// # Safety
/// `fd` is -1 or an open descriptor; only a `write` (for the keeper).
pub unsafe fn kill_raw(fd: RawFd) {
    if fd >= 0 {
        libc::write(fd, b"1".as_ptr().cast(), 1);
    }
}

/// Read a `cgroup.events` descriptor from offset 0: whether it says
/// `populated 1`. `None` for -1 or a failed read.
///
/// # Safety
/// `fd` is -1 or an open descriptor; a `pread` into the stack only (for
/// the keeper: no allocation).
pub unsafe fn populated_raw(fd: RawFd) -> Option<bool> {
    if fd < 0 {
        return None;
    }
    let mut buf = [0u8; 128];
    let n = libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), 0);
    let n = usize::try_from(n).ok()?;
    let text = &buf[..n];
    let key = b"populated ";
    let at = text.windows(key.len()).position(|w| w == key)?;
    text.get(at + key.len()).map(|&b| b == b'1')
}

/// Whether `path` is the root of a cgroup v2 file system.
// `f_type`'s type differs between libcs (i64 in glibc's, u64 in musl's).
#[allow(clippy::useless_conversion)]
fn is_cgroup2(path: &Path) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: statfs into a local struct.
    unsafe {
        let mut fs: libc::statfs = std::mem::zeroed();
        libc::statfs(c.as_ptr(), &mut fs) == 0
            && i64::try_from(fs.f_type).is_ok_and(|t| t == CGROUP2_SUPER_MAGIC)
    }
}

/// Our cgroup v2 path, from `/proc/self/cgroup` (`0::/path`).
fn own_cgroup() -> Option<String> {
    let text = fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    // A cgroup namespace may show "/.." for a cgroup outside it.
    (!path.contains("..")).then(|| path.to_string())
}

/// Empty cgroups of runs that ended without removing theirs (killed),
/// once they are a minute old: `rmdir` removes only an empty cgroup, so
/// a running job's is never touched, and the age keeps us from removing
/// one that a starting run made and its COMMAND has not joined yet.
fn sweep(parent: &Path) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let ours = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(PREFIX));
        // Only ours are looked at (an lstat each): not the parent's files.
        let old = || {
            (entry.metadata().and_then(|m| m.modified()))
                .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > STALE))
        };
        if ours && old() {
            let _ = fs::remove_dir(entry.path());
        }
    }
}

/// How old an empty cgroup of ours must be to be removed by another run.
const STALE: std::time::Duration = std::time::Duration::from_secs(60);

/// Open `name` in `dir` (close-on-exec, not following a symlink).
fn open_in(dir: &Path, name: &str, flags: libc::c_int) -> io::Result<OwnedFd> {
    let path = CString::new(dir.join(name).as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: open with a valid C string; the fd is owned below.
    let fd = unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC | libc::O_NOFOLLOW) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor we just opened.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The pids in `dir/cgroup.procs` and in every cgroup below it.
fn collect(dir: &Path, found: &mut Vec<Pid>, depth: usize) {
    if let Ok(mut f) = fs::File::open(dir.join("cgroup.procs")) {
        let mut text = String::new();
        if f.read_to_string(&mut text).is_ok() {
            found.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .map(Pid::from_raw),
            );
        }
    }
    // A job can make cgroups of its own (a nested run does): bounded depth.
    if depth >= 16 {
        return;
    }
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                collect(&entry.path(), found, depth + 1);
            }
        }
    }
}
