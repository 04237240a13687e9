//! The promise under real operations: job-control stops, a stalled
//! stderr, no /proc, processes that leave the group, inherited signal
//! dispositions, and durations that could wrap. Each test breaks
//! something real and checks what a user would see.

use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::common::*;

const LONG: Duration = Duration::from_secs(30);

/// A job that writes its pid, then ticks into a file every 20 ms.
fn ticking(dir: &TestDir) -> String {
    format!(
        "echo $$ > '{pid}'; while :; do echo tick >> '{ticks}'; sleep 0.02; done",
        pid = dir.file("pid").display(),
        ticks = dir.file("ticks").display(),
    )
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

/// A pipe whose reader never reads, already full: the next write blocks.
fn stalled_pipe() -> (OwnedFd, OwnedFd) {
    // Close-on-exec, so that no other test's child inherits it.
    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
    let flags = nix::fcntl::fcntl(&write, nix::fcntl::FcntlArg::F_GETFL).unwrap();
    let nonblocking = nix::fcntl::OFlag::from_bits_truncate(flags) | nix::fcntl::OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(&write, nix::fcntl::FcntlArg::F_SETFL(nonblocking)).unwrap();
    let mut file = std::fs::File::from(write.try_clone().unwrap());
    while file.write(&[b'x'; 4096]).is_ok() {}
    let blocking = nonblocking - nix::fcntl::OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(&write, nix::fcntl::FcntlArg::F_SETFL(blocking)).unwrap();
    (read, write)
}

/// `cmd` with stdin and stdout null and `stderr` the writing end of a
/// `stalled_pipe`.
fn spawn_stalled(cmd: &mut Command, stderr: OwnedFd) -> Child {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(stderr))
        .spawn()
        .unwrap()
}

/// How `run` exited; it must within LONG although its stderr is stalled.
fn exit_status(run: &mut Child) -> ExitStatus {
    let end = Instant::now() + LONG;
    loop {
        if let Some(status) = run.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < end, "redlock-run hung on its stderr");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_stalled_stderr_does_not_freeze_the_refresher() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let (_read, write) = stalled_pipe();
    // -v writes a line on every refresh, three a second.
    let mut cmd = server
        .job("stalled")
        .args(["-v", "--ttl", "1s"])
        .sh(format!("sleep 3; touch '{}'", dir.file("done").display()));
    let mut run = spawn_stalled(&mut cmd, write);
    // Once taken, past the TTL, as long as the job runs, the lock is
    // there: refreshed behind the stall.
    let mut conn = server.conn();
    assert!(wait_until(LONG, || exists(&mut conn, "redlock:{stalled}")));
    let finished = wait_until(LONG, || {
        let held = exists(&mut conn, "redlock:{stalled}");
        let done = dir.file("done").exists();
        assert!(held || done, "the lock expired under the running job");
        done
    });
    assert!(finished, "the job did not finish");
    let status = exit_status(&mut run);
    assert_eq!(status.code(), Some(0));
}

#[test]
fn a_stalled_stderr_does_not_keep_a_lost_lock_running() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let (_read, write) = stalled_pipe();
    let mut cmd = server
        .job("stalled-loss")
        .args(["--ttl", "1s"])
        .sh(ticking(&dir));
    let mut run = spawn_stalled(&mut cmd, write);
    let child = read_pid(&dir, "pid", LONG);
    // Someone else takes the lock: the holder must stop its job although
    // the line saying so cannot be written.
    let mut conn = server.conn();
    redis::cmd("SET")
        .arg("redlock:{stalled-loss}")
        .arg("thief")
        .query::<()>(&mut conn)
        .unwrap();
    assert!(
        wait_until(LONG, || !process_alive(child)),
        "the job ran on after its lock was taken"
    );
    let status = exit_status(&mut run);
    assert_eq!(status.code(), Some(70));
}

#[test]
fn processes_that_leave_the_group_are_stopped_before_release() {
    let server = RedisServer::start();
    for (name, start) in [
        ("setsid", "setsid sh -c 'echo $$ > {pid}; exec sleep 60' &"),
        ("set-m", "set -m; sh -c 'echo $$ > {pid}; exec sleep 60' &"),
    ] {
        let dir = TestDir::new();
        let script = start.replace("{pid}", &format!("'{}'", dir.file("left").display()))
            + &format!(
                " while [ ! -s '{}' ]; do sleep 0.01; done; exit 3",
                dir.file("left").display()
            );
        let out = run_with_timeout(
            &mut server.job(name).args(["--kill-after", "1s"]).sh(&script),
            LONG,
        );
        assert_eq!(out.code, Some(3), "{name}: {out:?}");
        let left = read_pid(&dir, "left", LONG);
        assert!(
            !process_alive(left),
            "{name}: a process that left the group outlived the lock"
        );
        assert!(!exists(&mut server.conn(), &format!("redlock:{{{name}}}")));
    }
}

/// `job` in a private mount namespace whose /proc is empty, or `None`
/// where that cannot be made (see `can_unshare`).
fn without_proc(job: Command) -> Option<Command> {
    can_unshare("running without /proc").then(|| unshared("mount -t tmpfs none /proc", &job))
}

#[test]
fn without_proc_leftovers_in_the_group_are_still_stopped() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let script = format!(
        "sh -c 'echo $$ > {left}; exec sleep 60' & while [ ! -s {left} ]; do sleep 0.01; done; exit 4",
        left = dir.file("left").display()
    );
    let job = server
        .job("noproc")
        .args(["--kill-after", "1s"])
        .sh(&script);
    let Some(mut cmd) = without_proc(job) else {
        return;
    };
    let out = run_with_timeout(&mut cmd, LONG);
    assert_eq!(out.code, Some(4), "{out:?}");
    let left = read_pid(&dir, "left", LONG);
    assert!(
        !process_alive(left),
        "a leftover outlived the lock without /proc"
    );
    assert!(!exists(&mut server.conn(), "redlock:{noproc}"));
}

#[test]
fn without_proc_the_lock_is_kept_while_unnamed_descendants_run() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    // A daemon outside the group: with the keeper alone (no cgroup) it
    // cannot be named without /proc, so the lock must stay until it is
    // gone. (With a cgroup it is stopped: keeper::without_proc_...)
    let script = format!(
        "setsid sh -c 'touch {started}; sleep 3; touch {done}' & \
         while [ ! -e {started} ]; do sleep 0.01; done; exit 0",
        started = dir.file("started").display(),
        done = dir.file("done").display()
    );
    let job = server
        .job("noproc-kept")
        .args(["--kill-after", "1s", "--contain", "keeper"])
        .sh(&script);
    let Some(mut cmd) = without_proc(job) else {
        return;
    };
    let mut run = spawn_piped(&mut cmd);
    assert!(wait_for_file(dir.file("started"), LONG));
    // The leader exited at once; until the descendant is done, the lock
    // stays.
    let mut conn = server.conn();
    let finished = wait_until(LONG, || {
        let held = exists(&mut conn, "redlock:{noproc-kept}");
        let done = dir.file("done").exists();
        assert!(held || done, "released while a descendant still ran");
        done
    });
    assert!(finished, "the descendant never finished");
    let out = run.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(dir.file("done").exists(), "{out:?}");
    assert!(!exists(&mut server.conn(), "redlock:{noproc-kept}"));
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

#[test]
fn durations_that_would_wrap_are_refused_before_redis() {
    let server = RedisServer::start();
    for args in [
        ["--ttl", "18446744073709552s"],
        ["--min-hold", "18446744073709552s"],
        ["--max-hold", "500000000y"],
        ["--refresh", "1ns"],
        ["--wait", "500000000y"],
        ["--random-delay", "500000000y"],
    ] {
        let out = run_with_timeout(
            redlock(&server.url())
                .args(["-k", "wrap"])
                .args(args)
                .args(["--", "true"]),
            LONG,
        );
        assert_eq!(out.code, Some(2), "{args:?}: {out:?}");
        assert!(out.stderr.contains(args[0]), "{args:?}: {}", out.stderr);
        assert_eq!(dbsize(&mut server.conn()), 0, "{args:?} touched Redis");
    }
}

#[test]
fn a_missing_metrics_directory_is_refused_before_redis() {
    let server = RedisServer::start();
    let out = run_with_timeout(
        redlock(&server.url()).args([
            "-k",
            "m",
            "--metrics-textfile",
            "/nonexistent/redlock-test",
            "--",
            "true",
        ]),
        LONG,
    );
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("--metrics-textfile"), "{}", out.stderr);
    assert_eq!(dbsize(&mut server.conn()), 0);
}

#[test]
fn a_read_only_metrics_directory_is_refused_before_redis() {
    if !can_unshare("a read-only metrics directory") {
        return;
    }
    let server = RedisServer::start();
    let dir = TestDir::new();
    let m = dir.path().display().to_string();
    // Read-only for root too: a read-only mount, in a namespace of its own.
    let mut job = redlock(&server.url());
    job.args(["-k", "m", "--metrics-textfile", &m, "--", "true"]);
    let setup = format!("mount -t tmpfs -o ro tmpfs '{m}'");
    let out = run_with_timeout(&mut unshared(&setup, &job), LONG);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("--metrics-textfile"), "{}", out.stderr);
    assert!(out.stderr.contains("cannot write there"), "{}", out.stderr);
    assert_eq!(dbsize(&mut server.conn()), 0);
}

/// A holder with a 30 s TTL (refresh every 10 s) whose job ticks.
fn long_holder(server: &RedisServer, dir: &TestDir, key: &str) -> (RunningChild, i32) {
    let run = spawn_piped(&mut server.job(key).args(["--ttl", "30s"]).sh(ticking(dir)));
    let child = read_pid(dir, "pid", LONG);
    // Once the refresher listens on the lock's channel (one subscription).
    let mut conn = server.conn();
    assert!(
        wait_until(LONG, || clients_subscribed_to(&mut conn, 1) == 1),
        "the holder never listened: {}",
        run.stderr_now()
    );
    (run, child)
}

#[test]
fn a_holder_hears_force_release_at_once_not_at_its_next_refresh() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let (mut run, child) = long_holder(&server, &dir, "told");
    let started = Instant::now();
    let out = run_with_timeout(redlock(&server.url()).args(["force-release", "told"]), LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    let out = run.wait_timeout(LONG);
    assert_eq!(out.code, Some(70), "{out:?}");
    assert!(!process_alive(child));
    // Far sooner than the 10 s refresh period: it was told.
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    // Given back after the stop: the next run gets in at once.
    let next = run_with_timeout(&mut server.job("told").args(["-n"]).sh("true"), LONG);
    assert_eq!(next.code, Some(0), "{next:?}");
}

#[test]
fn a_holder_notices_a_restart_without_persistence_at_once() {
    let mut server = RedisServer::start();
    let dir = TestDir::new();
    let (mut run, child) = long_holder(&server, &dir, "restarted");
    let started = Instant::now();
    server.restart();
    let out = run.wait_timeout(LONG);
    assert_eq!(out.code, Some(70), "{out:?}");
    assert!(!process_alive(child));
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
}

/// Two waiters saw the holder when Redis restarts without persistence:
/// the one whose try starts the fence counter anew must not be the only
/// one to wait out the holder's lease; the other, whose own try finds the
/// counter, must not take the lock beside the old job either.
#[test]
fn every_waiter_that_saw_a_holder_waits_out_its_lease_after_a_restart() {
    let mut server = RedisServer::start();
    let dir = TestDir::new();
    let pid = dir.file("pid");
    // Its job takes 2 s to stop after SIGTERM (it has 3).
    let holder = format!(
        "echo $$ > '{pid}'; trap 'sleep 2; exit 0' TERM; while :; do sleep 0.05; done",
        pid = pid.display()
    );
    let slow = ["--ttl", "6s", "--kill-after", "3s"];
    let mut holder = spawn_piped(&mut server.job("restarted").args(slow).sh(&holder));
    let holder_pid = read_pid(&dir, "pid", LONG);
    // Each waiter's job says whether the holder's job still ran when it began.
    let waiter = |name: &str| {
        let job = format!(
            "if kill -0 {holder_pid} 2>/dev/null; then echo overlap; else echo alone; fi > '{log}'",
            log = dir.file(name).display()
        );
        spawn_waiting(
            &mut server.job("restarted").args(["--ttl", "3s", "-v"]).sh(&job),
            LONG,
        )
    };
    let mut first = waiter("first");
    let mut second = waiter("second");
    server.restart();
    let out = holder.wait_timeout(LONG);
    assert_eq!(out.code, Some(70), "the holder's lock vanished: {out:?}");
    for (name, run) in [("first", &mut first), ("second", &mut second)] {
        let out = run.wait_timeout(LONG);
        assert_eq!(out.code, Some(0), "{name}: {out:?}");
        assert_eq!(
            dir.read(name).as_deref(),
            Some("alone\n"),
            "{name}: {out:?}"
        );
    }
}

#[test]
fn a_waiter_that_saw_a_holder_waits_out_its_lease_after_flushall() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let (pid, log) = (dir.file("pid"), dir.file("log"));
    let holder = format!("echo $$ > '{pid}'; sleep 20", pid = pid.display());
    // It refreshes every 4 s: FLUSHALL goes unnoticed by it for seconds.
    let slow = ["--ttl", "5s", "--refresh", "4s", "--kill-after", "300ms"];
    let mut holder = spawn_piped(&mut server.job("flushed").args(slow).sh(&holder));
    let holder_pid = read_pid(&dir, "pid", LONG);
    // The waiter's job says whether the holder's job still ran when it began.
    let waiter = format!(
        "if kill -0 {holder_pid} 2>/dev/null; then echo overlap; else echo alone; fi > '{log}'",
        log = log.display()
    );
    // Once it has seen the holder and waits.
    let mut waiter = spawn_waiting(
        &mut server
            .job("flushed")
            .args(["--ttl", "3s", "-v"])
            .sh(&waiter),
        LONG,
    );
    let _: () = redis::cmd("FLUSHALL").query(&mut server.conn()).unwrap();
    let out = holder.wait_timeout(LONG);
    assert_eq!(out.code, Some(70), "the holder's lock vanished: {out:?}");
    let out = waiter.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(dir.read("log").as_deref(), Some("alone\n"), "{out:?}");
    assert!(
        out.stderr.contains("data in Redis was lost"),
        "{}",
        out.stderr
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

#[test]
fn the_holder_record_never_stores_a_url_password() {
    let server = RedisServer::builder().requirepass("rec0rd-pw").start();
    let url = server.url_with(None, "rec0rd-pw");
    let dir = TestDir::new();
    let script = format!(
        "touch '{s}'; while [ ! -e '{go}' ]; do sleep 0.02; done; : redis://app:other-secret@db:6380/0 {url}",
        s = dir.file("started").display(),
        go = dir.file("go").display(),
    );
    let mut run = spawn_piped(&mut job_at(&url, "rec", &script));
    assert!(wait_for_file(dir.file("started"), LONG));
    let record = hgetall(&mut server.conn(), "redlock:{rec}:holder");
    let command = &record["command"];
    assert!(command.contains("redis://app:***@db:6380/0"), "{command}");
    assert!(
        !command.contains("other-secret") && !command.contains("rec0rd-pw"),
        "{command}"
    );
    let status = run_with_timeout(redlock(&url).args(["status", "rec"]), LONG);
    assert!(!status.stdout.contains("rec0rd-pw"), "{status:?}");
    std::fs::write(dir.file("go"), "").unwrap();
    assert_eq!(run.wait_timeout(LONG).code, Some(0));
}

fn job_at(url: &str, key: &str, script: &str) -> Command {
    let mut cmd = redlock(url);
    cmd.args(["--key", key, "--", "sh", "-c", script]);
    cmd
}
