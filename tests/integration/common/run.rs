//! Helpers for running the `redlock-run` binary (or any command) with timeouts.
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// The binary under test: cargo's build, or `$REDLOCK_TEST_BINARY` (CI
/// runs the suite once against the static binary that is released).
pub fn bin() -> &'static str {
    super::note_test();
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        std::env::var("REDLOCK_TEST_BINARY")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_redlock-run").to_string())
    })
}

/// The variables a run takes its default `--label` from (a CI's job URL):
/// removed, so that a suite run inside CI prints what it prints elsewhere.
pub const LABEL_VARS: [&str; 6] = [
    "REDLOCK_LABEL",
    "GITHUB_SERVER_URL",
    "GITHUB_REPOSITORY",
    "GITHUB_RUN_ID",
    "CI_JOB_URL",
    "BUILD_URL",
];

/// The binary with no inherited Redis URL or label in the environment
/// and no arguments.
pub fn redlock_bare() -> Command {
    let mut cmd = Command::new(bin());
    cmd.env_remove("REDLOCK_REDIS_URL").env_remove("REDIS_URL");
    for var in LABEL_VARS {
        cmd.env_remove(var);
    }
    cmd
}

/// The binary with `--redis <url>` as its first arguments.
pub fn redlock(server_url: &str) -> Command {
    let mut cmd = redlock_bare();
    cmd.args(["--redis", server_url]);
    cmd
}

/// A scratch directory removed on drop.
pub struct TestDir(tempfile::TempDir);

impl TestDir {
    pub fn new() -> TestDir {
        super::note_test();
        TestDir(
            tempfile::Builder::new()
                .prefix("redlock-test")
                .tempdir()
                .unwrap(),
        )
    }
    pub fn path(&self) -> &Path {
        self.0.path()
    }
    pub fn file(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }
    pub fn read(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.file(name)).ok()
    }
}

impl Default for TestDir {
    fn default() -> Self {
        Self::new()
    }
}

/// Poll `cond` every 10 ms; true as soon as it holds, false after `timeout`.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub fn wait_for_file(path: impl AsRef<Path>, timeout: Duration) -> bool {
    wait_until(timeout, || path.as_ref().exists())
}

/// This host's name, as a holder line shows it.
pub fn hostname() -> String {
    nix::unistd::gethostname().unwrap().into_string().unwrap()
}

/// Each line of `out`'s stdout as JSON (`--format json` output).
pub fn json_lines(out: &Output) -> Vec<serde_json::Value> {
    out.stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON {l:?}: {e}")))
        .collect()
}

/// The state letter of a process (`R`, `S`, `T` stopped, `Z`...), from
/// /proc; `None` once it is gone.
pub fn process_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Whether the process `pid` is stopped: in state `T`, or blocked in a
/// `vfork` (state `D`) behind a child that is stopped before its exec (a
/// shell starting `sleep` when the stop came: a stop signal to the group
/// stops the child, and the shell waits for it, stopped as well as the
/// job is; it shows `D`, not `T`).
pub fn job_stopped(pid: i32) -> bool {
    match process_state(pid) {
        Some('T') => true,
        Some('D') => std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|c| c.parse().ok())
            .any(|c| process_state(c) == Some('T')),
        _ => false,
    }
}

/// kill(pid, 0) succeeds and the process is not a zombie.
pub fn process_alive(pid: i32) -> bool {
    if kill(Pid::from_raw(pid), None).is_err() {
        return false;
    }
    // State is the first field after the parenthesised command name (which may contain spaces).
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

#[derive(Debug, Clone)]
pub struct Output {
    /// Exit code; None if killed by a signal.
    pub code: Option<i32>,
    /// Terminating signal number, if any.
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// A spawned child whose stdout/stderr are drained on background threads
/// (so a chatty child never blocks on a full pipe). Killed on drop if still running.
pub struct RunningChild {
    child: Child,
    out: Arc<Mutex<Vec<u8>>>,
    err: Arc<Mutex<Vec<u8>>>,
    readers: Vec<JoinHandle<()>>,
    desc: String,
}

fn drain(mut src: impl Read + Send + 'static, dst: Arc<Mutex<Vec<u8>>>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        while let Ok(n @ 1..) = src.read(&mut buf) {
            dst.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    })
}

/// Spawn with stdin null and stdout/stderr piped.
pub fn spawn_piped(cmd: &mut Command) -> RunningChild {
    let desc = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {desc}: {e}"));
    let (out, err) = (Arc::default(), Arc::default());
    let readers = vec![
        drain(child.stdout.take().unwrap(), Arc::clone(&out)),
        drain(child.stderr.take().unwrap(), Arc::clone(&err)),
    ];
    RunningChild {
        child,
        out,
        err,
        readers,
        desc,
    }
}

/// Run to completion; panics (after killing the child) if it takes longer than `timeout`.
pub fn run_with_timeout(cmd: &mut Command, timeout: Duration) -> Output {
    spawn_piped(cmd).wait_timeout(timeout)
}

impl RunningChild {
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn signal(&self, sig: Signal) {
        kill(Pid::from_raw(self.pid()), sig)
            .unwrap_or_else(|e| panic!("kill -{sig} {}: {e}", self.pid()));
    }

    /// Output captured so far (the child may still be running).
    pub fn stdout_now(&self) -> String {
        String::from_utf8_lossy(&self.out.lock().unwrap()).into_owned()
    }
    pub fn stderr_now(&self) -> String {
        String::from_utf8_lossy(&self.err.lock().unwrap()).into_owned()
    }

    /// Non-blocking: has the child exited (and been reaped)?
    pub fn has_exited(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_some()
    }

    /// Wait for exit; on timeout kill the child and panic with what it printed.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Output {
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "timed out after {timeout:?}: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
                    self.desc,
                    self.stdout_now(),
                    self.stderr_now()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        // A surviving grandchild may hold the pipes open, so don't wait for EOF forever.
        wait_until(Duration::from_secs(2), || {
            self.readers.iter().all(|r| r.is_finished())
        });
        use std::os::unix::process::ExitStatusExt;
        Output {
            code: status.code(),
            signal: status.signal(),
            stdout: self.stdout_now(),
            stderr: self.stderr_now(),
        }
    }
}

impl Drop for RunningChild {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A critical section for `sh -c`: appends `start $W`, sleeps `secs`, and
/// appends `end $W` to `log` (W: the worker's number, set by `contend`).
pub fn section_script(log: &Path, secs: &str) -> String {
    format!(
        "echo \"start $W\" >> '{log}'; sleep {secs}; echo \"end $W\" >> '{log}'",
        log = log.display()
    )
}

/// `workers` threads each run `runs` times the command `make()` builds,
/// with `W` set to the worker's number; every run must exit 0.
pub fn contend(workers: usize, runs: usize, make: impl Fn() -> Command + Sync) {
    contend_checked(workers, runs, make, None);
}

/// [`contend`], and every run also prints nothing but that it waits: no
/// warning, unless it contains one of `tolerated`.
pub fn contend_saying_only(
    workers: usize,
    runs: usize,
    tolerated: &[&str],
    make: impl Fn() -> Command + Sync,
) {
    contend_checked(workers, runs, make, Some(tolerated));
}

fn contend_checked(
    workers: usize,
    runs: usize,
    make: impl Fn() -> Command + Sync,
    tolerated: Option<&[&str]>,
) {
    std::thread::scope(|s| {
        for w in 0..workers {
            let make = &make;
            s.spawn(move || {
                for _ in 0..runs {
                    let mut cmd = make();
                    cmd.env("W", w.to_string());
                    let out = run_with_timeout(&mut cmd, Duration::from_secs(120));
                    assert_eq!(out.code, Some(0), "{out:?}");
                    let Some(tolerated) = tolerated else {
                        continue;
                    };
                    // A run that waits says so (unless -q): not a warning.
                    // A warning may end in "; waiting ..." too (a stand-in
                    // for a holder that lost its lock): it names a lock
                    // with "lock '...': ", a waiting line does not.
                    let waits = |l: &str| {
                        !l.contains("': ")
                            && (l.contains("; waiting") || l.contains("; still waiting"))
                    };
                    let said = out
                        .stderr
                        .lines()
                        .any(|l| !waits(l) && !tolerated.iter().any(|t| l.contains(t)));
                    assert!(!said, "a run said: {out:?}");
                }
            });
        }
    });
}

/// From a log of `section_script` lines: how many sections ran, and the
/// most that ran at once.
pub fn sections_in(log: &Path) -> (usize, usize) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let (mut running, mut most, mut sections) = (0usize, 0, 0);
    for line in text.lines() {
        if line.starts_with("start ") {
            running += 1;
            sections += 1;
            most = most.max(running);
        } else {
            running = running
                .checked_sub(1)
                .unwrap_or_else(|| panic!("an end without a start:\n{text}"));
        }
    }
    assert_eq!(running, 0, "a section never ended:\n{text}");
    (sections, most)
}
