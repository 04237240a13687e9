//! Keeping the lock's promise under real operations: what counts as
//! "Redis unavailable" (and may fail open), refusals, signals during a
//! call, name resolution, queue order, fences, force-release, and bounded
//! inputs. Against real redis-server processes.

use crate::common::*;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

const LONG: Duration = Duration::from_secs(40);

/// `redlock-run --redis URL -k KEY EXTRA... -c SCRIPT`.
fn job(url: &str, key: &str, extra: &[&str], script: &str) -> Command {
    let mut cmd = redlock(url);
    cmd.args(["-k", key]).args(extra).args(["-c", script]);
    cmd
}

/// A holder of `key` that logs its section to `log`, and runs until the
/// file `go` appears next to it; returns once its section has started.
fn holder(url: &str, key: &str, extra: &[&str], log: &Path) -> RunningChild {
    let dir = log.parent().expect("log in a directory");
    let script = format!(
        "echo \"start H\" >> '{log}'; touch '{started}'; \
         while [ ! -e '{go}' ]; do sleep 0.02; done; echo \"end H\" >> '{log}'",
        log = log.display(),
        started = dir.join("started").display(),
        go = dir.join("go").display(),
    );
    let child = spawn_piped(&mut job(url, key, extra, &script));
    assert!(
        wait_for_file(dir.join("started"), LONG),
        "holder never started: {}",
        child.stderr_now()
    );
    child
}

/// A verbose waiter running a short section; returns once it waits.
fn waiter(url: &str, key: &str, extra: &[&str], log: &Path) -> RunningChild {
    let mut cmd = job(url, key, extra, &section_script(log, "0.2"));
    cmd.arg("-v").env("W", "W");
    let child = spawn_piped(&mut cmd);
    assert!(
        wait_until(LONG, || child.stderr_now().contains("waiting")),
        "waiter never waited: {}",
        child.stderr_now()
    );
    child
}

#[test]
fn a_waiter_whose_connection_drops_does_not_fail_open() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let log = dir.file("log");
    let mut held = holder(&server.url(), "drop", &[], &log);
    let extra = ["--on-unavailable", "run", "--wait", "20s"];
    let mut waiting = waiter(&server.url(), "drop", &extra, &log);
    let killed: i64 = redis::cmd("CLIENT")
        .arg(&["KILL", "TYPE", "normal"])
        .query(&mut server.conn())
        .expect("CLIENT KILL");
    assert!(killed >= 2, "killed {killed} connections");
    // Long enough for the waiter's next poll to meet the dead connection.
    std::thread::sleep(Duration::from_millis(1500));
    std::fs::write(dir.file("go"), "").unwrap();
    assert_eq!(held.wait_timeout(LONG).code, Some(0));
    let out = waiting.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(!out.stderr.contains("WITHOUT the lock"), "{out:?}");
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text, "start H\nend H\nstart W\nend W\n", "overlap");
}

#[test]
fn a_waiter_whose_redis_dies_exits_69_when_wait_runs_out_never_failing_open() {
    let mut server = RedisServer::start();
    let dir = TestDir::new();
    let log = dir.file("log");
    let mut held = holder(&server.url(), "dies", &[], &log);
    let extra = ["--on-unavailable", "run", "--wait", "3s"];
    let mut waiting = waiter(&server.url(), "dies", &extra, &log);
    server.kill();
    let out = waiting.wait_timeout(LONG);
    assert_eq!(out.code, Some(69), "{out:?}");
    assert!(!out.stderr.contains("WITHOUT the lock"), "{out:?}");
    assert!(out.stderr.contains("--wait"), "{out:?}");
    held.signal(Signal::SIGTERM);
    held.wait_timeout(LONG);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains("start W"), "the waiter ran: {text}");
}

/// Run `touch MARKER` with `--on-unavailable run` against `url`: exit 77,
/// one line naming the redacted URL and `what` (lowercase), no COMMAND.
fn assert_refused(url: &str, shown: &str, what: &str) {
    let dir = TestDir::new();
    let marker = dir.file("ran");
    let out = run_with_timeout(
        redlock(url)
            .args(["-k", "job", "--on-unavailable", "run", "--", "touch"])
            .arg(&marker),
        LONG,
    );
    assert_eq!(out.code, Some(77), "{url}: {out:?}");
    assert!(!marker.exists(), "{url}: COMMAND ran: {out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "{url}: {out:?}");
    assert!(out.stderr.contains(shown), "{url}: {out:?}");
    assert!(!out.stderr.contains("unavailable"), "{url}: {out:?}");
    let line = out.stderr.to_lowercase();
    assert!(line.contains(what), "{url}: wanted {what:?}: {out:?}");
}

#[test]
fn refusals_exit_77_with_their_own_message_and_never_run_command() {
    let server = RedisServer::builder()
        .acl_user("noeval", "pw-noeval", "~* &* +@all -eval -evalsha")
        .acl_user("alice", "pw-alice", "~* &* +@all")
        .start();
    let port = server.port();
    let wrong = server.url_with(Some("alice"), "not-her-password");
    assert_refused(
        &wrong,
        &format!("redis://alice:***@127.0.0.1:{port}"),
        "authentication failed",
    );
    let noeval = server.url_with(Some("noeval"), "pw-noeval");
    assert_refused(&noeval, "noeval:***@", "permission");
    let db = format!("redis://127.0.0.1:{port}/99");
    assert_refused(&db, &db, "database");
}

#[test]
fn a_server_without_eval_is_refused_with_77() {
    let server = RedisServer::builder()
        .arg("--rename-command")
        .arg("EVAL")
        .arg("")
        .start();
    assert_refused(&server.url(), &server.url(), "eval");
}

/// Whether `pid` has set up its signal thread (named "signals").
fn handles_signals(pid: i32) -> bool {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"));
    tasks.into_iter().flatten().flatten().any(|task| {
        std::fs::read_to_string(task.path().join("comm")).is_ok_and(|c| c.trim() == "signals")
    })
}

#[test]
fn sigterm_during_an_acquire_on_a_paused_server_exits_143_without_command() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let marker = dir.file("ran");
    server.pause();
    let mut run = spawn_piped(
        redlock(&server.url())
            .args(["-k", "job", "--ttl", "30s", "--on-unavailable", "run"])
            .args(["--", "touch"])
            .arg(&marker),
    );
    let pid = run.pid();
    assert!(
        wait_until(LONG, || handles_signals(pid)),
        "no signal thread"
    );
    // The acquire's EVAL now waits up to its 1 s timeout on the paused
    // server; a signal that comes before it ends must stop the run.
    std::thread::sleep(Duration::from_millis(200));
    run.signal(Signal::SIGTERM);
    let out = run.wait_timeout(LONG);
    server.resume();
    assert_eq!(out.code, Some(143), "{out:?}");
    assert!(!out.stderr.contains("WITHOUT the lock"), "{out:?}");
    assert!(!marker.exists(), "COMMAND ran");
}

/// Used by later tests: how long `cmd` took, and its output.
#[allow(dead_code)]
fn timed(cmd: &mut Command) -> (Duration, Output) {
    let start = Instant::now();
    let out = run_with_timeout(cmd, LONG);
    (start.elapsed(), out)
}
