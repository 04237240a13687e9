//! Job control and the terminal: an interactive job reads the terminal,
//! Ctrl-Z and `fg` stop and resume the job with the wrapper, a SIGSTOP of
//! the wrapper alone or a lease that ran out while stopped kills the job
//! when it is continued, `stty tostop` cannot stop the wrapper, a stop and
//! a continue seen at once leave it running, and the terminal comes back
//! after `&` then `fg` and after a failed exec.

use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::common::*;

const LONG: Duration = Duration::from_secs(30);

#[test]
fn an_interactive_child_reads_the_terminal() {
    if !have_tool("script", "bsdutils") {
        return;
    }
    let server = RedisServer::start();
    let dir = TestDir::new();
    let got = dir.file("got");
    let ready = dir.file("ready");
    let inner = format!(
        "{bin} --redis {url} -k tty -- sh -c 'touch {ready}; read line; echo \"got:\\$line\" > {got}'",
        bin = bin(),
        url = server.url(),
        ready = ready.display(),
        got = got.display()
    );
    // Type only once the child waits for input, as a person would.
    let feed = type_when_ready(&ready, "hello");
    let out = on_a_pty(&feed, &inner);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(&got).ok().as_deref(),
        Some("got:hello\n")
    );
}

#[test]
fn ctrl_z_suspends_the_job_and_fg_resumes_it() {
    let dir = TestDir::new();
    let Some(tmux) = Tmux::start(&dir) else {
        return;
    };
    let server = RedisServer::start();
    let out = dir.file("out");
    let ready = dir.file("ready");
    let job = format!(
        "-k jobctl -- sh -c 'touch {}; exec cat > {}'",
        ready.display(),
        out.display()
    );
    tmux.start_job(&server.url(), &job, &ready);
    tmux.suspend(&dir);
    assert!(
        exists(&mut server.conn(), "redlock:{jobctl}"),
        "still held while suspended"
    );
    tmux.fg_and_type_to_cat(&dir, "out");
    assert!(
        !exists(&mut server.conn(), "redlock:{jobctl}"),
        "released after the job"
    );
}

#[test]
fn stty_tostop_cannot_stop_the_wrapper() {
    let dir = TestDir::new();
    let Some(tmux) = Tmux::start(&dir) else {
        return;
    };
    let server = RedisServer::start();
    // COMMAND owns the terminal; -v writes a line on every refresh (three
    // a second with --ttl 1s) from the background.
    tmux.keys(&[
        &format!(
            "stty tostop; {} --redis {} -k tostop -v --ttl 1s -- sleep 2",
            bin(),
            server.url()
        ),
        "Enter",
    ]);
    assert_eq!(tmux.last_exit(&dir, "exit"), "exit=0", "{}", tmux.screen());
    assert!(
        tmux.screen().contains("refreshed lock 'tostop'"),
        "{}",
        tmux.screen()
    );
}

#[test]
fn ctrl_z_on_a_script_that_calls_us_gives_the_prompt_back() {
    let dir = TestDir::new();
    let Some(tmux) = Tmux::start(&dir) else {
        return;
    };
    let server = RedisServer::start();
    let ready = dir.file("ready");
    let script = dir.file("script.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n{} --redis {} -k script -- sh -c 'touch {}; sleep 1'\necho script-done\n",
            bin(),
            server.url(),
            ready.display()
        ),
    )
    .unwrap();
    tmux.keys(&[&format!("sh {}", script.display()), "Enter"]);
    assert!(wait_for_file(&ready, LONG), "{}", tmux.screen());
    tmux.suspend(&dir);
    tmux.keys(&["fg", "Enter"]);
    assert_eq!(tmux.last_exit(&dir, "exit"), "exit=0", "{}", tmux.screen());
    assert!(tmux.screen().contains("script-done"), "{}", tmux.screen());
    assert!(!exists(&mut server.conn(), "redlock:{script}"));
}

#[test]
fn a_failed_exec_gives_the_terminal_back() {
    if !have_tool("script", "bsdutils") {
        return;
    }
    let server = RedisServer::start();
    let dir = TestDir::new();
    let ready = dir.file("ready");
    let got = dir.file("got");
    // A script on a terminal: redlock-run cannot run COMMAND (127), then
    // the script reads its terminal, as a person would type into it.
    let inner = format!(
        "{bin} --redis {url} -k exec127 -- /no/such/program; echo \\$? > {ready}; read line; echo \\\"got:\\$line\\\" > {got}",
        bin = bin(),
        url = server.url(),
        ready = ready.display(),
        got = got.display()
    );
    let feed = type_when_ready(&ready, "hello");
    on_a_pty(&feed, &format!("sh -c '{inner}'"));
    assert_eq!(dir.read("ready").as_deref(), Some("127\n"));
    assert_eq!(
        dir.read("got").as_deref(),
        Some("got:hello\n"),
        "the script was left without its terminal"
    );
}

#[test]
fn a_job_started_with_ampersand_gets_the_terminal_at_fg() {
    let dir = TestDir::new();
    let Some(tmux) = Tmux::start(&dir) else {
        return;
    };
    let server = RedisServer::start();
    let out = dir.file("out");
    let ready = dir.file("ready");
    let job = format!(
        "-k amp -- sh -c 'touch {}; exec cat > {}' &",
        ready.display(),
        out.display()
    );
    tmux.start_job(&server.url(), &job, &ready);
    // cat reads the terminal from the background: the job stops (tty input).
    assert!(
        wait_until(LONG, || {
            tmux.keys(&[
                "jobs -l > ",
                &dir.file("jobs").display().to_string(),
                "Enter",
            ]);
            // Paces the re-sent `jobs` (not a wait for a state: the
            // condition is checked again after each).
            std::thread::sleep(Duration::from_millis(100));
            dir.read("jobs").is_some_and(|j| j.contains("Stopped"))
        }),
        "the shell never saw the job stop:\n{}",
        tmux.screen()
    );
    tmux.fg_and_type_to_cat(&dir, "out");
    assert!(!exists(&mut server.conn(), "redlock:{amp}"));
}

/// A `ticking` job under a 1 s lock on `key`, and its pid once it runs.
fn ticking_job(server: &RedisServer, dir: &TestDir, key: &str, ttl: &str) -> (RunningChild, i32) {
    let run = spawn_piped(&mut server.job(key).args(["--ttl", ttl]).sh(ticking(dir)));
    (run, read_pid(dir, "pid", LONG))
}

fn ticks(dir: &TestDir) -> usize {
    dir.read("ticks").map_or(0, |t| t.lines().count())
}

#[test]
fn job_control_stops_take_the_job_with_them() {
    let server = RedisServer::start();
    for sig in [Signal::SIGTSTP, Signal::SIGTTIN, Signal::SIGTTOU] {
        let dir = TestDir::new();
        let key = format!("jobctl-{}", sig.as_str());
        let run = spawn_piped(&mut server.job(&key).sh(ticking(&dir)));
        let child = read_pid(&dir, "pid", LONG);
        run.signal(sig);
        assert!(
            wait_until(LONG, || process_state(run.pid()) == Some('T')),
            "{sig}: the wrapper did not stop"
        );
        assert!(
            wait_until(LONG, || job_stopped(child)),
            "{sig}: COMMAND runs on while the wrapper is stopped ({:?})",
            process_state(child)
        );
        run.signal(Signal::SIGCONT);
        let before = ticks(&dir);
        assert!(
            wait_until(LONG, || ticks(&dir) > before + 2),
            "{sig}: COMMAND was not continued"
        );
        kill(Pid::from_raw(child), Signal::SIGKILL).unwrap();
    }
}

#[test]
fn a_lease_that_ran_out_while_stopped_kills_the_job_before_it_continues() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    // A TTL long enough that the stopped job is seen stopped before its
    // lease runs out and the keeper kills it (1 s was missed once under
    // CI's load).
    let (mut run, child) = ticking_job(&server, &dir, "stopped", "4s");
    run.signal(Signal::SIGTSTP);
    assert!(wait_until(LONG, || job_stopped(child)));
    // The lock runs out in Redis while both are stopped; another holder
    // takes it.
    let other = run_with_timeout(
        &mut server
            .job("stopped")
            .args(["--wait", "10s"])
            .sh("echo second"),
        LONG,
    );
    assert_eq!(other.code, Some(0), "{other:?}");
    let frozen = ticks(&dir);
    run.signal(Signal::SIGCONT);
    let out = run.wait_timeout(LONG);
    assert_eq!(out.code, Some(70), "{out:?}");
    assert!(out.stderr.contains("lost"), "{}", out.stderr);
    assert!(!process_alive(child), "COMMAND outlived its lock");
    assert_eq!(
        ticks(&dir),
        frozen,
        "COMMAND ran again after its lock was gone"
    );
}

#[test]
fn sigstop_of_the_wrapper_alone_kills_the_job_as_soon_as_it_is_continued() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let (mut run, child) = ticking_job(&server, &dir, "sigstop", "1s");
    // SIGSTOP cannot be caught: nothing refreshes; the keeper kills the
    // job when the lease ends, before a second holder can have the lock.
    run.signal(Signal::SIGSTOP);
    assert!(wait_until(LONG, || process_state(run.pid()) == Some('T')));
    let other = run_with_timeout(
        &mut server
            .job("sigstop")
            .args(["--wait", "10s"])
            .sh("echo second"),
        LONG,
    );
    assert_eq!(other.code, Some(0), "{other:?}");
    assert!(
        !process_alive(child),
        "COMMAND ran beside the second holder"
    );
    assert_eq!(
        process_state(run.pid()),
        Some('T'),
        "the wrapper was continued"
    );
    run.signal(Signal::SIGCONT);
    let out = run.wait_timeout(LONG);
    assert_eq!(out.code, Some(70), "{out:?}");
    assert!(
        out.stderr.contains("SIGKILL: the lease had run out"),
        "{}",
        out.stderr
    );
    assert!(!process_alive(child));
}

/// A job whose daemon (a session of its own, outside COMMAND's group)
/// forks all the time: a job-control stop reaches every process it
/// forked, also one forked while the job's processes were being listed
/// (chaos campaign, seed 20261204 episode 313: a double fork under way at
/// the stop ran on while the wrapper was stopped). The race is narrow, so
/// the stop is repeated; each time, once the wrapper has stopped, every
/// process of the daemon's session is stopped, or has the stop pending.
#[test]
fn a_job_control_stop_reaches_processes_forked_while_the_job_was_listed() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let python = std::env::var("REDLOCK_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let daemon = dir.file("daemon");
    let job = format!("exec {python} -c \"$1\" '{}'", daemon.display());
    let mut cmd = server.job("forking").args(["--ttl", "60s"]).sh(&job);
    let mut run = spawn_piped(cmd.args(["sh", FORKING]));
    let sid = read_pid(&dir, "daemon", LONG);
    let _daemon = KillSession(sid);
    for round in 0..40 {
        run.signal(Signal::SIGTSTP);
        assert!(
            wait_until(LONG, || process_state(run.pid()) == Some('T')),
            "round {round}: the wrapper did not stop"
        );
        let running = |pid: &i32| !stopped_or_stopping(*pid);
        // A stop sent just now may not have taken effect yet.
        let missed = |settle| {
            let mut left = session(sid);
            wait_until(settle, || {
                left.retain(running);
                left.is_empty()
            });
            left
        };
        let missed = missed(Duration::from_millis(300));
        assert!(
            missed.is_empty(),
            "round {round}: forked processes {missed:?} run on while the wrapper is stopped"
        );
        run.signal(Signal::SIGCONT);
        assert!(
            wait_until(LONG, || !stopped_or_stopping(sid)),
            "round {round}: the daemon was not continued"
        );
    }
    run.signal(Signal::SIGTERM);
    let out = run.wait_timeout(LONG);
    assert_ne!(out.code, None, "{out:?}");
}

/// COMMAND: a leader that waits, and a daemon in a session of its own
/// (its pid in the file $1) that forks a child every few milliseconds;
/// each child sleeps a second and exits.
const FORKING: &str = r#"
import os, sys, time
if os.fork():
    while True:
        time.sleep(1)
os.setsid()
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
while True:
    if os.fork() == 0:
        time.sleep(1)
        os._exit(0)
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass
    time.sleep(0.003)
"#;

/// Kills a forking daemon's session at the end, whatever happened.
struct KillSession(i32);

impl Drop for KillSession {
    fn drop(&mut self) {
        // The forker first: then its children fork no more.
        let _ = kill(Pid::from_raw(self.0), Signal::SIGKILL);
        for pid in session(self.0) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// The live processes of session `sid`.
fn session(sid: i32) -> Vec<i32> {
    let entries = std::fs::read_dir("/proc").expect("/proc");
    let pids = entries.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok());
    pids.filter(|pid| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or("", |s| s.1)
            .split_whitespace()
            .collect();
        // state ppid pgrp session ...
        fields.get(3).and_then(|s| s.parse().ok()) == Some(sid)
    })
    .collect()
}

/// Stopped (or gone, or a zombie), or with SIGSTOP pending.
fn stopped_or_stopping(pid: i32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return true;
    };
    let field = |name: &str| {
        let line = status.lines().find(|l| l.starts_with(name))?;
        u64::from_str_radix(line.split_whitespace().nth(1)?, 16).ok()
    };
    let sigstop = 1u64 << (Signal::SIGSTOP as u32 - 1);
    let pending = [field("SigPnd:"), field("ShdPnd:")]
        .into_iter()
        .any(|mask| mask.is_some_and(|m| m & sigstop != 0));
    matches!(process_state(pid), Some('T' | 'Z' | 'X') | None) || pending
}

/// A stop and a continue that both land while the wrapper is inside a
/// call that a signal does not end (a connect: it is retried on EINTR)
/// are seen at once when the call ends: the wrapper must not obey the
/// stop then, with nobody left to continue it (chaos campaign, seed
/// 20261206 episode 354: a waiter stopped and continued 114 ms later
/// while its client was partitioned stayed stopped for good). The first
/// of three Redlock nodes is a listener whose queue is full, so a connect
/// to it hangs for the per-node timeout (1 s with a 10 s TTL); the other
/// two are a majority.
#[test]
fn a_stop_and_continue_during_a_connect_do_not_leave_the_wrapper_stopped() {
    let servers = RedisServer::many(2);
    let (hole, _queued) = black_hole();
    let port = hole.local_addr().unwrap().port();
    let urls = [
        format!("redis://127.0.0.1:{port}"),
        servers[0].url(),
        servers[1].url(),
    ];
    let mut run = spawn_piped(
        &mut Job::using(redlock_on(&urls), "stop-cont")
            .args(["--ttl", "10s", "--wait", "30s"])
            .sh("echo ran"),
    );
    assert!(
        wait_until(LONG, || connecting_to(port)),
        "the wrapper never connected to the first node"
    );
    // The stop must reach its handler before the continue is sent: the
    // kernel discards a stop still pending when SIGCONT comes.
    run.signal(Signal::SIGTSTP);
    assert!(
        wait_until(LONG, || !stop_pending(run.pid())),
        "SIGTSTP was never delivered"
    );
    run.signal(Signal::SIGCONT);
    assert!(
        connecting_to(port),
        "the connect ended before both signals were sent: the test proves nothing"
    );
    assert!(
        wait_until(LONG, || run.has_exited()),
        "the wrapper never finished (state {:?}: T is stopped for good)",
        process_state(run.pid())
    );
    let out = run.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.contains("ran"), "{out:?}");
}

/// Whether a SIGTSTP sent to `pid` is still pending (not yet handed to
/// a handler): `ShdPnd` or `SigPnd` in /proc/PID/status.
fn stop_pending(pid: i32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let bit = 1u64 << (Signal::SIGTSTP as i32 - 1);
    status.lines().any(|line| {
        let (name, mask) = line.split_once(':').unwrap_or_default();
        (name == "ShdPnd" || name == "SigPnd")
            && u64::from_str_radix(mask.trim(), 16).is_ok_and(|m| m & bit != 0)
    })
}

/// A loopback listener that never accepts, its queue full (one
/// connection of ours, the second return value): a connect to it is
/// never answered (the kernel drops its SYNs) until the client gives up.
fn black_hole() -> (std::net::TcpListener, std::net::TcpStream) {
    use std::os::fd::AsRawFd;
    let hole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    // SAFETY: listen again on our own socket, to shrink its queue to one.
    assert_eq!(unsafe { nix::libc::listen(hole.as_raw_fd(), 0) }, 0);
    let queued = std::net::TcpStream::connect(hole.local_addr().unwrap()).unwrap();
    (hole, queued)
}

/// Whether a connect to loopback `port` is under way (SYN_SENT, in
/// /proc/net/tcp: remote address `0100007F:PORT`, state `02`).
fn connecting_to(port: u16) -> bool {
    let remote = format!("0100007F:{port:04X}");
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    table.lines().skip(1).any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        fields.get(2) == Some(&remote.as_str()) && fields.get(3) == Some(&"02")
    })
}
