//! Signals sent to redlock-run: forwarded to the job (which may survive
//! USR1 or die of one, exit 128+n), the lock released after; a signal
//! while waiting or during an acquire on a paused server ends the run
//! without COMMAND; dispositions ignored at start stay ignored, and
//! SIGPIPE is the job's default when it was ours.

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::common::*;

const LONG: Duration = Duration::from_secs(40);

/// A job that records each signal it receives, and exits 0 on a stop signal.
///
/// Once ready it waits in the `wait` builtin and starts no process (a
/// loop of `sleep 0.05` made dash vfork twenty times a second, and a
/// signal that reaches a shell's vfork child before its exec can eat the
/// shell's pending trap). The background sleep ignores USR1 and USR2
/// (and, in the background, INT and QUIT); it is stopped as a leftover
/// when the shell exits.
fn trapping_script(dir: &TestDir) -> String {
    let log = dir.file("signals");
    let log = log.display();
    format!(
        "for s in INT TERM HUP QUIT; do trap \"echo $s >> '{log}'; exit 0\" $s; done; \
         trap \"echo USR1 >> '{log}'\" USR1; trap \"echo USR2 >> '{log}'\" USR2; \
         (trap '' USR1 USR2; exec sleep 1000) & \
         touch '{ready}'; while :; do wait; done",
        ready = dir.file("ready").display()
    )
}

#[test]
fn signals_reach_the_child_and_the_lock_is_released_after() {
    for sig in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
    ] {
        let server = RedisServer::start();
        let dir = TestDir::new();
        let mut cmd = server.job("sig").sh(trapping_script(&dir));
        // A signal ignored when redlock-run starts stays ignored, as
        // nohup(1) means it (see signals.rs): under `nohup` SIGHUP never
        // reached the job, so the test does not inherit that.
        // SAFETY: signal(2) is async-signal-safe; nothing else runs here.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                nix::sys::signal::signal(Signal::SIGHUP, nix::sys::signal::SigHandler::SigDfl)
                    .map(drop)
                    .map_err(std::io::Error::from)
            });
        }
        let mut run = spawn_piped(&mut cmd);
        assert!(wait_for_file(dir.file("ready"), LONG));
        run.signal(sig);
        let out = run.wait_timeout(LONG);
        assert_eq!(out.code, Some(0), "{sig}: the child's own code: {out:?}");
        let name = sig.as_str().trim_start_matches("SIG");
        assert_eq!(
            dir.read("signals").as_deref().map(str::trim),
            Some(name),
            "{sig}"
        );
        assert!(
            !exists(&mut server.conn(), "redlock:{sig}"),
            "{sig}: lock not released"
        );
    }
}

#[test]
fn usr1_reaches_the_child_without_ending_the_run() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut run = spawn_piped(&mut server.job("usr").sh(trapping_script(&dir)));
    assert!(wait_for_file(dir.file("ready"), LONG));
    run.signal(Signal::SIGUSR1);
    assert!(wait_until(LONG, || dir
        .read("signals")
        .is_some_and(|s| s.contains("USR1"))));
    run.signal(Signal::SIGUSR2);
    assert!(wait_until(LONG, || dir
        .read("signals")
        .is_some_and(|s| s.contains("USR2"))));
    assert!(!run.has_exited(), "USR1/USR2 must not end the run");
    assert!(
        exists(&mut server.conn(), "redlock:{usr}"),
        "lock still held"
    );
    run.signal(Signal::SIGTERM);
    assert_eq!(run.wait_timeout(LONG).code, Some(0));
}

#[test]
fn a_child_killed_by_a_forwarded_signal_gives_128_plus_n() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let script = format!("touch '{}'; exec sleep 100", dir.file("ready").display());
    let mut run = spawn_piped(&mut server.job("plain").sh(&script));
    assert!(wait_for_file(dir.file("ready"), LONG));
    // `exec sleep` may not have happened yet; the shell dies of TERM too.
    run.signal(Signal::SIGTERM);
    let out = run.wait_timeout(LONG);
    assert_eq!(out.code, Some(143), "{out:?}");
    assert!(!exists(&mut server.conn(), "redlock:{plain}"));
}

#[test]
fn a_signal_while_waiting_stops_waiting_and_leaves_nothing() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut holder = spawn_piped(&mut server.job("queue").sh(trapping_script(&dir)));
    assert!(wait_for_file(dir.file("ready"), LONG));
    let marker = dir.file("waiter-ran");
    let mut waiter = spawn_waiting(
        &mut server
            .job("queue")
            .args(["-v"])
            .sh(format!("touch '{}'", marker.display())),
        LONG,
    );
    waiter.signal(Signal::SIGINT);
    let out = waiter.wait_timeout(LONG);
    assert_eq!(out.code, Some(130), "{out:?}");
    assert!(!marker.exists());
    holder.signal(Signal::SIGTERM);
    assert_eq!(holder.wait_timeout(LONG).code, Some(0));
    assert_eq!(
        dbsize(&mut server.conn()),
        1,
        "only the fence counter remains"
    );
}

/// `redlock-run` started with `sig` ignored, as `nohup` and `cmd &` do.
fn with_ignored(mut cmd: Command, sig: Signal) -> Command {
    // SAFETY: only sigaction between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::signal::signal(sig, nix::sys::signal::SigHandler::SigIgn)?;
            Ok(())
        });
    }
    cmd
}

/// The signal mask of a `SigIgn:` line of /proc/PID/status.
fn ignored_mask(line: &str) -> u64 {
    let hex = line.split_whitespace().nth(1).expect("a SigIgn line");
    u64::from_str_radix(hex, 16).expect("a hex mask")
}

#[test]
fn signals_ignored_at_start_stay_ignored_for_us_and_the_job() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let script = format!(
        "echo $$ > '{pid}'; grep SigIgn /proc/$$/status > '{ign}'; sleep 1; echo survived",
        pid = dir.file("pid").display(),
        ign = dir.file("ignored").display()
    );
    let cmd = with_ignored(server.job("nohup").sh(&script), Signal::SIGHUP);
    let mut cmd = with_ignored(cmd, Signal::SIGPIPE);
    let mut run = spawn_piped(&mut cmd);
    read_pid(&dir, "pid", LONG);
    run.signal(Signal::SIGHUP);
    let out = run.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.contains("survived"), "{out:?}");
    let mask = ignored_mask(&dir.read("ignored").unwrap());
    assert_ne!(
        mask & (1 << (1 - 1)),
        0,
        "SIGHUP is not ignored in COMMAND: {mask:x}"
    );
    assert_ne!(
        mask & (1 << (13 - 1)),
        0,
        "SIGPIPE is not ignored in COMMAND: {mask:x}"
    );
}

#[test]
fn sigpipe_is_default_for_the_job_when_it_was_for_us() {
    let server = RedisServer::start();
    let out = run_with_timeout(
        &mut server.job("pipe").sh("grep SigIgn /proc/$$/status"),
        LONG,
    );
    let mask = ignored_mask(&out.stdout);
    assert_eq!(
        mask & (1 << (13 - 1)),
        0,
        "SIGPIPE ignored in COMMAND: {mask:x}"
    );
}

/// Whether `pid` catches SIGTERM yet (its signal handling is set up).
fn handles_signals(pid: i32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (15 - 1)) != 0)
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
        "SIGTERM is never caught"
    );
    // The acquire's first request now waits (up to its 1 s timeout) on
    // the paused server; a signal that comes before it ends must stop
    // the run.
    assert!(
        wait_until(LONG, || request_unread(pid, server.port())),
        "no request reached the paused server: {}",
        run.stderr_now()
    );
    run.signal(Signal::SIGTERM);
    let out = run.wait_timeout(LONG);
    server.resume();
    assert_eq!(out.code, Some(143), "{out:?}");
    assert!(!out.stderr.contains("WITHOUT the lock"), "{out:?}");
    assert!(!marker.exists(), "COMMAND ran");
}
