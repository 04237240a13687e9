//! A shell in a tmux session: job control (Ctrl-Z, `&`, `fg`) as a person
//! at a terminal uses it.

use std::process::Command;
use std::time::Duration;

use super::{have_tool, wait_until, TestDir};

const LONG: Duration = Duration::from_secs(30);

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
