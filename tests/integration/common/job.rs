//! The run mode's command line as tests build it (`Job`), and the meeting
//! points between a test and its job's script (`Hold`): the script says
//! it started, the test waits for that, and later lets it go on.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::run::{redlock, spawn_piped, wait_for_file, wait_until, RunningChild, TestDir};
use super::server::RedisServer;

/// `redlock-run --redis URL --key KEY [ARGS...]`, finished by what it runs:
/// `.sh(SCRIPT)` (`-- sh -c SCRIPT`), `.line(LINE)` (`-c LINE`) or
/// `.exec(ARGV)` (`-- ARGV...`), each giving the `Command`.
///
/// ```ignore
/// let out = run_with_timeout(&mut server.job("k").args(["-n"]).sh("exit 3"), LONG);
/// ```
pub struct Job {
    cmd: Command,
}

impl Job {
    /// Against one server.
    pub fn new(url: &str, key: &str) -> Job {
        Job::using(redlock(url), key)
    }

    /// On a prepared `redlock-run` command line (several `--redis`, a
    /// prefix, an environment).
    pub fn using(mut base: Command, key: &str) -> Job {
        base.args(["--key", key]);
        Job { cmd: base }
    }

    /// More options before COMMAND.
    pub fn args<I, S>(mut self, args: I) -> Job
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.cmd.args(args);
        self
    }

    /// An environment variable for redlock-run (and COMMAND).
    pub fn env(mut self, name: &str, value: impl AsRef<OsStr>) -> Job {
        self.cmd.env(name, value);
        self
    }

    /// COMMAND is `sh -c SCRIPT`.
    pub fn sh(self, script: impl AsRef<OsStr>) -> Command {
        let mut cmd = self.cmd;
        cmd.args(["--", "sh", "-c"]).arg(script);
        cmd
    }

    /// COMMAND is a shell line given with `-c`.
    pub fn line(self, line: impl AsRef<OsStr>) -> Command {
        let mut cmd = self.cmd;
        cmd.arg("-c").arg(line);
        cmd
    }

    /// COMMAND is `ARGV...` (more can be added to the `Command`).
    pub fn exec<I, S>(self, argv: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = self.cmd;
        cmd.arg("--").args(argv);
        cmd
    }
}

impl RedisServer {
    /// `Job::new(&self.url(), key)`.
    pub fn job(&self, key: &str) -> Job {
        Job::new(&self.url(), key)
    }
}

/// The binary with one `--redis` per URL (Redlock over several nodes).
pub fn redlock_on<U: AsRef<str>>(urls: impl IntoIterator<Item = U>) -> Command {
    let mut cmd = super::run::redlock_bare();
    for url in urls {
        cmd.args(["--redis", url.as_ref()]);
    }
    cmd
}

/// A job that says it started (it creates `started`) and then waits for
/// the test to create `go`.
pub struct Hold {
    started: PathBuf,
    go: PathBuf,
}

impl Hold {
    /// `started` and `go` in `dir`.
    pub fn new(dir: &TestDir) -> Hold {
        Hold {
            started: dir.file("started"),
            go: dir.file("go"),
        }
    }

    /// `NAME.started` and `NAME.go` in `dir`, for several holders in one.
    pub fn named(dir: &TestDir, name: &str) -> Hold {
        Hold {
            started: dir.file(&format!("{name}.started")),
            go: dir.file(&format!("{name}.go")),
        }
    }

    /// `sh` text: create `started`, wait for `go`, then run `then`.
    pub fn script(&self, then: &str) -> String {
        format!(
            "touch '{started}'; while [ ! -e '{go}' ]; do sleep 0.02; done; {then}",
            started = self.started.display(),
            go = self.go.display(),
        )
    }

    /// Whether the job has said it started.
    pub fn started(&self) -> bool {
        self.started.exists()
    }

    /// Spawn `cmd` (whose script is `self.script(...)`) and return once it
    /// has started; see `spawn_started`.
    pub fn spawn(&self, cmd: &mut Command, timeout: Duration) -> RunningChild {
        spawn_started(cmd, &self.started, timeout)
    }

    /// Let the job go on.
    pub fn go(&self) {
        std::fs::write(&self.go, "").unwrap_or_else(|e| panic!("{}: {e}", self.go.display()));
    }
}

/// Spawn `cmd` and return once `marker` exists; if it does not appear
/// within `timeout`, panic with what the run printed.
pub fn spawn_started(cmd: &mut Command, marker: &Path, timeout: Duration) -> RunningChild {
    let mut child = spawn_piped(cmd);
    if !wait_for_file(marker, timeout) {
        let out = child.wait_timeout(Duration::from_secs(1));
        panic!("{cmd:?} never got to create {}: {out:?}", marker.display());
    }
    child
}

/// Spawn `cmd` (a verbose run of a busy key) and return once it says it
/// is waiting; panic with its stderr if it does not within `timeout`.
pub fn spawn_waiting(cmd: &mut Command, timeout: Duration) -> RunningChild {
    let child = spawn_piped(cmd);
    assert!(
        wait_until(timeout, || child.stderr_now().contains("waiting")),
        "never waited: {cmd:?}: {}",
        child.stderr_now()
    );
    child
}

/// The pid the job wrote to `name` in `dir`, once the file holds one.
pub fn read_pid(dir: &TestDir, name: &str, timeout: Duration) -> i32 {
    let mut pid = None;
    let found = wait_until(timeout, || {
        pid = dir.read(name).and_then(|s| s.trim().parse().ok());
        pid.is_some()
    });
    assert!(found, "{name} never held a pid");
    pid.unwrap_or_default()
}

/// A job that writes its pid to `pid` in `dir`, then ticks into `ticks`
/// there every 20 ms.
pub fn ticking(dir: &TestDir) -> String {
    format!(
        "echo $$ > '{pid}'; while :; do echo tick >> '{ticks}'; sleep 0.02; done",
        pid = dir.file("pid").display(),
        ticks = dir.file("ticks").display(),
    )
}

/// A job whose shell and background grandchild both record their pids
/// (`child` and `grandchild` in `dir`).
pub fn tree_script(dir: &TestDir) -> String {
    format!(
        "sleep 100 & echo $! > '{g}'; echo $$ > '{c}'; wait",
        g = dir.file("grandchild").display(),
        c = dir.file("child").display()
    )
}
