//! Before and after a stop: `--warn-signal` with `--warn-before`,
//! `--on-lost`, and `--lease-file` (`REDLOCK_LEASE_FILE`).

use crate::common::*;

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const LONG: Duration = Duration::from_secs(30);

/// COMMAND: record when USR1 and TERM arrive (seconds since the epoch)
/// in `dir`, say it started, and run until TERM. bash, for a clock read
/// without a fork: the stop signals the group twice (by group, then each
/// process), which would kill a `date` started by the trap.
fn warned_job(dir: &TestDir) -> Vec<String> {
    let script = format!(
        "trap 'printf %s \"$EPOCHREALTIME\" > {d}/warned' USR1; \
         trap 'printf %s \"$EPOCHREALTIME\" > {d}/termed; exit 0' TERM; \
         printf %s \"$EPOCHREALTIME\" > {d}/started; while :; do sleep 0.05; done",
        d = dir.path().display()
    );
    vec!["bash".into(), "-c".into(), script]
}

/// A time the job wrote, in seconds since the epoch.
fn at(dir: &TestDir, name: &str) -> Option<f64> {
    dir.read(name)?.trim().replace(',', ".").parse().ok()
}

#[test]
fn the_warning_comes_before_max_hold_stops_the_job() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut cmd = server
        .job("warned")
        .args([
            "--max-hold",
            "3s",
            "--warn-signal",
            "USR1",
            "--warn-before",
            "1500ms",
        ])
        .exec(warned_job(&dir));
    let out = run_with_timeout(&mut cmd, LONG);
    assert_eq!(out.code, Some(124), "{out:?}");
    let (started, warned, termed) = (at(&dir, "started"), at(&dir, "warned"), at(&dir, "termed"));
    let (started, warned, termed) = (
        started.unwrap(),
        warned.expect("no warning"),
        termed.unwrap(),
    );
    assert!(warned < termed, "warned at {warned}, SIGTERM at {termed}");
    // Loosely: about 1.5 s before the SIGTERM, not at the start.
    assert!(
        (0.5..3.0).contains(&(termed - warned)),
        "{}",
        termed - warned
    );
    assert!(
        warned - started > 0.5,
        "warned {}s after the start",
        warned - started
    );
    assert!(out.stderr.contains("sent SIGUSR1 to COMMAND"), "{out:?}");
}

#[test]
fn no_warning_without_time_for_it() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut cmd = server
        .job("late")
        .args([
            "--max-hold",
            "1s",
            "--warn-signal",
            "USR1",
            "--warn-before",
            "2s",
        ])
        .exec(warned_job(&dir));
    let out = run_with_timeout(&mut cmd, LONG);
    assert_eq!(out.code, Some(124), "{out:?}");
    assert!(dir.read("termed").is_some(), "{out:?}");
    assert!(
        dir.read("warned").is_none(),
        "warned without time to: {out:?}"
    );
}

#[test]
fn the_warning_comes_before_a_lease_that_cannot_be_refreshed_ends() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut cmd = server
        .job("paused")
        .args(["--ttl", "6s", "--refresh", "1s", "--kill-after", "500ms"])
        .args(["--warn-signal", "USR1", "--warn-before", "1s"])
        .exec(warned_job(&dir));
    let mut run = spawn_started(&mut cmd, &dir.file("started"), LONG);
    // Refreshes fail from now on.
    server.pause();
    let out = run.wait_timeout(LONG);
    server.resume();
    assert_eq!(out.code, Some(70), "{out:?}");
    let (warned, termed) = (
        at(&dir, "warned").expect("no warning"),
        at(&dir, "termed").unwrap(),
    );
    assert!(warned < termed, "warned at {warned}, SIGTERM at {termed}");
    assert!(
        (0.3..3.0).contains(&(termed - warned)),
        "{}",
        termed - warned
    );
}

#[test]
fn a_healthy_run_is_never_warned() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    // A long --warn-before, over several refreshes that all succeed.
    let script = format!(
        "trap 'touch {d}/warned' USR1; i=0; while [ $i -lt 40 ]; do sleep 0.1; i=$((i+1)); done",
        d = dir.path().display()
    );
    let mut cmd = server
        .job("healthy")
        .args([
            "--ttl",
            "3s",
            "--warn-signal",
            "USR1",
            "--warn-before",
            "10s",
        ])
        .sh(script);
    let out = run_with_timeout(&mut cmd, LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        dir.read("warned").is_none(),
        "a healthy run was warned: {out:?}"
    );
}

#[test]
fn on_lost_runs_once_and_never_delays_the_stop() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let d = dir.path().display();
    let hook = format!(
        "echo \"$REDLOCK_KEY $REDLOCK_FENCE $REDLOCK_LOST_REASON\" >> {d}/hook; \
         while [ ! -e {d}/hook.go ]; do sleep 0.02; done; echo end >> {d}/hook"
    );
    let mut cmd = server
        .job("hooked")
        .args(["--on-lost", &hook])
        .exec(warned_job(&dir));
    let mut run = spawn_started(&mut cmd, &dir.file("started"), LONG);
    let mut conn = server.conn();
    let fence = get(&mut conn, "redlock:{hooked}:fence").expect("fence");
    // The holder hears the force-release once it listens on its channel.
    assert!(wait_until(LONG, || clients_subscribed_to(&mut conn, 1) == 1));
    let out = run_with_timeout(
        redlock(&server.url()).args(["force-release", "hooked"]),
        LONG,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    // The job is stopped and the lock given back while the hook still runs.
    assert!(
        wait_for_file(dir.file("termed"), LONG),
        "the job was not stopped"
    );
    assert!(
        wait_until(LONG, || !exists(&mut conn, "redlock:{hooked}")),
        "the lock was kept while the hook ran"
    );
    assert!(wait_for_file(dir.file("hook"), LONG), "the hook never ran");
    assert!(!run.has_exited());
    std::fs::write(dir.file("hook.go"), "").unwrap();
    let out = run.wait_timeout(LONG);
    assert_eq!(out.code, Some(70), "{out:?}");
    assert_eq!(
        dir.read("hook").unwrap(),
        // Once, and it ran to its end: it was not killed for taking long.
        format!("hooked {fence} revoked\nend\n")
    );
}

#[test]
fn the_lease_file_follows_the_refreshes_and_is_removed() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let hold = Hold::new(&dir);
    let d = dir.path().display();
    let script = format!(
        "f=\"$REDLOCK_LEASE_FILE\"; echo \"$f\" > {d}/path; cat \"$f\" > {d}/first; \
         while [ \"$(cat \"$f\")\" = \"$(cat {d}/first)\" ]; do sleep 0.05; done; \
         cat \"$f\" > {d}/second; {}",
        hold.script("true")
    );
    let before = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let mut cmd = server
        .job("leased")
        .args(["--lease-file", "--ttl", "3s", "--refresh", "500ms"])
        .sh(script);
    let mut run = hold.spawn(&mut cmd, LONG);
    let path = std::path::PathBuf::from(dir.read("path").unwrap().trim());
    let mode = std::fs::metadata(path.parent().unwrap())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700, "{}", path.display());
    let ms = |name: &str| dir.read(name).unwrap().trim().parse::<u128>().unwrap();
    let (first, second) = (ms("first"), ms("second"));
    assert!(
        first > before && first <= before + 3_000 + 1_000,
        "{first} vs {before}"
    );
    assert!(second > first, "{second} <= {first}");
    hold.go();
    assert_eq!(run.wait_timeout(LONG).code, Some(0));
    assert!(
        !path.parent().unwrap().exists(),
        "the lease file's directory is left"
    );
}

#[test]
fn warning_options_are_checked_before_anything_reaches_redis() {
    let server = RedisServer::start();
    for args in [
        &["--warn-signal", "USR1"][..],
        &["--warn-before", "1s"],
        &["--warn-signal", "KILL", "--warn-before", "1s"],
        &["--warn-signal", "USR9", "--warn-before", "1s"],
        &["--warn-signal", "USR1", "--warn-before", "0s"],
    ] {
        let out = run_with_timeout(&mut server.job("opts").args(args).sh("true"), LONG);
        assert_eq!(out.code, Some(2), "{args:?}: {out:?}");
        assert!(out.stderr.contains("--warn-"), "{out:?}");
    }
    assert_eq!(dbsize(&mut server.conn()), 0);
}
