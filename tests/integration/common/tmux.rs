//! Terminals: a shell in a tmux session, for job control (Ctrl-Z, `&`,
//! `fg`) as a person at a terminal uses it, and a command on a pty of its
//! own (`script`).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::{bin, have_tool, run_with_timeout, wait_for_file, wait_until, Output, TestDir};

const LONG: Duration = Duration::from_secs(30);

/// `script` runs `inner` on a pty of its own, fed from `feed` (sh text).
/// What a person types on the pty: `line`, once `ready` exists (the
/// program waits for input), then the terminal stays open a while.
pub fn type_when_ready(ready: &std::path::Path, line: &str) -> String {
    format!(
        "while [ ! -e {ready} ]; do sleep 0.02; done; sleep 0.2; printf '{line}\\n'; sleep 2",
        ready = ready.display()
    )
}

pub fn on_a_pty(feed: &str, inner: &str) -> Output {
    let mut sh = Command::new("sh");
    sh.arg("-c")
        .arg(format!("({feed}) | script -qec \"{inner}\" /dev/null"));
    run_with_timeout(&mut sh, LONG)
}

/// A shell in a tmux session, for job control as a person would use it.
pub struct Tmux {
    name: String,
}

impl Tmux {
    /// A tmux server running bash, or `None` where tmux is missing (see
    /// `have_tool`).
    pub fn start(dir: &TestDir) -> Option<Tmux> {
        if !have_tool("tmux", "tmux") {
            return None;
        }
        let name = format!("redlock-test-{}", std::process::id());
        let socket = dir.file("tmux.sock");
        let started = Command::new("tmux")
            .args(["-S"])
            .arg(&socket)
            .args([
                "new-session",
                "-d",
                "-s",
                &name,
                "-x",
                "150",
                "-y",
                "40",
                "bash --norc --noprofile",
            ])
            .status()
            .expect("run tmux");
        assert!(started.success(), "tmux is installed but did not start");
        Some(Tmux {
            name: socket.display().to_string(),
        })
    }

    pub fn keys(&self, keys: &[&str]) {
        let ok = Command::new("tmux")
            .args(["-S", &self.name, "send-keys"])
            .args(keys)
            .status()
            .unwrap();
        assert!(ok.success());
    }

    /// Type `redlock-run --redis URL ARGS` at the shell (`args` as typed,
    /// quotes and all) and wait until its job has created `ready`.
    pub fn start_job(&self, url: &str, args: &str, ready: &Path) {
        self.keys(&[&format!("{} --redis {url} {args}", bin()), "Enter"]);
        assert!(
            wait_for_file(ready, LONG),
            "job never started:\n{}",
            self.screen()
        );
    }

    /// `fg` a job that runs `cat > FILE` (`out` in `dir`): a line typed
    /// then reaches FILE, and Ctrl-D ends the job with `$?` 0.
    pub fn fg_and_type_to_cat(&self, dir: &TestDir, out: &str) {
        self.keys(&["fg", "Enter"]);
        self.keys(&["hello", "Enter"]);
        assert!(
            wait_until(LONG, || dir.read(out).is_some_and(|o| o.contains("hello"))),
            "after fg the job did not read the terminal:\n{}",
            self.screen()
        );
        self.keys(&["C-d"]);
        assert_eq!(self.last_exit(dir, "exit"), "exit=0", "{}", self.screen());
    }

    pub fn screen(&self) -> String {
        let out = Command::new("tmux")
            .args(["-S", &self.name, "capture-pane", "-p"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Ctrl-Z: the shell must get its prompt back and list the job as
    /// stopped (`jobs -l` into `jobs` in `dir`).
    pub fn suspend(&self, dir: &TestDir) {
        let stops = self.screen().matches("Stopped").count();
        self.keys(&["C-z"]);
        // Keys typed before the stop reach the job's terminal and are
        // flushed with it (ISIG): type the next line only at the prompt.
        assert!(
            wait_until(LONG, || self.screen().matches("Stopped").count() > stops),
            "the job did not stop on Ctrl-Z:\n{}",
            self.screen()
        );
        self.keys(&[
            "jobs -l > ",
            &dir.file("jobs").display().to_string(),
            "Enter",
        ]);
        assert!(
            wait_until(LONG, || dir
                .read("jobs")
                .is_some_and(|j| j.contains("Stopped"))),
            "the shell did not get its prompt back:\n{}",
            self.screen()
        );
    }

    /// `echo "exit=$?"` at the shell into `name` in `dir`: that line,
    /// once written.
    pub fn last_exit(&self, dir: &TestDir, name: &str) -> String {
        self.keys(&[
            "echo \"exit=$?\" > ",
            &dir.file(name).display().to_string(),
            "Enter",
        ]);
        // The redirection creates the file before echo writes to it.
        assert!(
            wait_until(LONG, || dir.read(name).is_some_and(|e| e.ends_with('\n'))),
            "{}",
            self.screen()
        );
        dir.read(name).unwrap_or_default().trim().to_string()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-S", &self.name, "kill-server"])
            .status();
    }
}
