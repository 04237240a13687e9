//! Options for fleets of cron hosts: --min-hold, --max-hold,
//! --random-delay, --on-unavailable and --replicas.

use std::time::{Duration, Instant};

use crate::common::*;

const LONG: Duration = Duration::from_secs(30);

#[test]
fn min_hold_keeps_the_lock_after_a_short_job_without_waiting() {
    let server = RedisServer::start();
    let start = Instant::now();
    let out = run_with_timeout(
        &mut server
            .job("cron")
            .args(["--min-hold", "5s", "-v"])
            .sh("sleep 0.2; exit 3"),
        LONG,
    );
    let took = start.elapsed();
    assert_eq!(out.code, Some(3), "{out:?}");
    assert!(
        took < Duration::from_secs(4),
        "waited for --min-hold: {took:?}"
    );
    assert!(out.stderr.contains("min-hold"), "{out:?}");

    // The window comes from the lock itself: it lives on for the rest of
    // the 5 s, and another host's run is kept out while it does.
    let mut conn = server.conn();
    let left = pttl(&mut conn, "redlock:{cron}");
    assert!(
        (1..=5000).contains(&left),
        "the lock's rest after the job: {left} ms"
    );
    let out = run_with_timeout(&mut server.job("cron").args(["-n"]).sh("echo ran"), LONG);
    if pttl(&mut conn, "redlock:{cron}") > 0 {
        assert_eq!(out.code, Some(75), "{out:?}");
        assert_eq!(out.stdout, "");
    }
    // Once it has run out by itself, the lock is free again.
    assert!(wait_until(LONG, || !exists(&mut conn, "redlock:{cron}")));
    let out = run_with_timeout(&mut server.job("cron").args(["-n"]).sh("echo ran"), LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stdout.trim(), "ran");
}

#[test]
fn min_hold_shorter_than_the_job_changes_nothing() {
    let server = RedisServer::start();
    let out = run_with_timeout(
        &mut server
            .job("long")
            .args(["--min-hold", "100ms"])
            .sh("sleep 0.3"),
        LONG,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        !exists(&mut server.conn(), "redlock:{long}"),
        "released at once"
    );
}

#[test]
fn max_hold_stops_the_whole_group_with_124_and_releases() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let script = format!(
        "sleep 100 & echo $! > '{}'; sleep 100",
        dir.file("grandchild").display()
    );
    let start = Instant::now();
    let out = run_with_timeout(
        &mut server.job("runaway").args(["--max-hold", "1s"]).sh(&script),
        LONG,
    );
    assert_eq!(out.code, Some(124), "{out:?}");
    assert!(
        start.elapsed() >= Duration::from_millis(950),
        "stopped too early"
    );
    assert!(out.stderr.contains("--max-hold"), "{out:?}");
    let grandchild: i32 = dir.read("grandchild").unwrap().trim().parse().unwrap();
    assert!(!process_alive(grandchild), "the job's group survived");
    assert!(
        !exists(&mut server.conn(), "redlock:{runaway}"),
        "lock not released"
    );
}

#[test]
fn max_hold_escalates_to_sigkill_after_the_grace() {
    let server = RedisServer::start();
    let out = run_with_timeout(
        &mut server
            .job("stubborn")
            .args(["--max-hold", "500ms", "--kill-after", "500ms"])
            .sh("trap '' TERM; while :; do sleep 0.05; done"),
        LONG,
    );
    assert_eq!(out.code, Some(124), "{out:?}");
}

#[test]
fn a_job_that_ends_in_time_is_not_affected_by_max_hold() {
    let server = RedisServer::start();
    let out = run_with_timeout(
        &mut server.job("quick").args(["--max-hold", "20s"]).sh("exit 9"),
        LONG,
    );
    assert_eq!(out.code, Some(9), "{out:?}");
}

#[test]
fn random_delay_spreads_start_times_within_the_window() {
    let server = RedisServer::start();
    let runs: Vec<_> = (0..20)
        .map(|i| {
            spawn_piped(
                &mut server
                    .job(&format!("spread{i}"))
                    .args(["--random-delay", "500ms", "-v"])
                    .sh("true"),
            )
        })
        .collect();
    let mut delays = Vec::new();
    for mut run in runs {
        let out = run.wait_timeout(LONG);
        assert_eq!(out.code, Some(0), "{out:?}");
        let line = out
            .stderr
            .lines()
            .find(|l| l.contains("--random-delay"))
            .unwrap_or_else(|| panic!("no delay reported: {out:?}"));
        let said = line.split_whitespace().nth(2).expect("a duration");
        delays.push(humantime::parse_duration(said).unwrap_or_else(|e| panic!("{said}: {e}")));
    }
    assert!(
        delays.iter().all(|d| *d < Duration::from_millis(500)),
        "{delays:?}"
    );
    let (min, max) = (delays.iter().min().unwrap(), delays.iter().max().unwrap());
    assert!(
        *max - *min > Duration::from_millis(100),
        "not spread: {delays:?}"
    );
}

#[test]
fn on_unavailable_run_runs_the_command_unlocked_with_a_warning() {
    let mut server = RedisServer::start();
    let url = server.url();
    server.kill();
    let out = run_with_timeout(
        &mut Job::new(&url, "open")
            .args(["--on-unavailable", "run"])
            .sh("echo \"key=$REDLOCK_KEY fence=${REDLOCK_FENCE-unset}\"; exit 5"),
        LONG,
    );
    assert_eq!(out.code, Some(5), "{out:?}");
    assert_eq!(out.stdout.trim(), "key=open fence=unset");
    assert!(out.stderr.contains("WITHOUT the lock"), "{out:?}");

    let out = run_with_timeout(&mut Job::new(&url, "open").sh("echo ran"), LONG);
    assert_eq!(out.code, Some(69), "default is fail: {out:?}");
    assert_eq!(out.stdout, "");
    let out = run_with_timeout(
        &mut Job::new(&url, "open")
            .args(["--on-unavailable", "fail"])
            .sh("echo ran"),
        LONG,
    );
    assert_eq!(out.code, Some(69), "{out:?}");
}

#[test]
fn on_unavailable_run_does_not_bypass_a_busy_lock() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let started = dir.file("started");
    let script = format!("touch '{}'; sleep 5", started.display());
    let mut holder = spawn_started(&mut server.job("busy").sh(&script), &started, LONG);
    let out = run_with_timeout(
        &mut server
            .job("busy")
            .args(["-n", "--on-unavailable", "run"])
            .sh("echo ran"),
        LONG,
    );
    assert_eq!(out.code, Some(75), "{out:?}");
    assert_eq!(out.stdout, "");
    holder.signal(nix::sys::signal::Signal::SIGTERM);
    holder.wait_timeout(LONG);
}

fn primary_with_replica() -> (RedisServer, RedisServer) {
    let primary = RedisServer::start();
    let replica = RedisServer::builder()
        .arg("--replicaof")
        .arg("127.0.0.1")
        .arg(&primary.port().to_string())
        .start();
    let linked = wait_until(LONG, || {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut primary.conn())
            .unwrap();
        info.contains("connected_slaves:1") && info.contains("state=online")
    });
    assert!(linked, "replica never came online");
    (primary, replica)
}

#[test]
fn replicas_confirm_the_lock_or_it_is_not_taken() {
    let (primary, replica) = primary_with_replica();
    let out = run_with_timeout(
        &mut Job::new(&primary.url(), "durable")
            .args(["--replicas", "1"])
            .sh("echo $REDLOCK_FENCE"),
        LONG,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    // Under load a WAIT may time out first; each retry takes a new fence.
    let fence: u64 = out.stdout.trim().parse().expect("REDLOCK_FENCE");
    assert!(fence >= 1, "{out:?}");

    replica.pause();
    let dir = TestDir::new();
    let marker = dir.file("ran");
    let start = Instant::now();
    let out = run_with_timeout(
        &mut Job::new(&primary.url(), "durable")
            .args(["--replicas", "1", "--wait", "1s"])
            .sh(format!("touch '{}'", marker.display())),
        LONG,
    );
    let took = start.elapsed();
    replica.resume();
    assert_eq!(out.code, Some(69), "{out:?}");
    assert!(out.stderr.contains("replicas confirmed"), "{out:?}");
    assert!(!marker.exists(), "ran without a confirmed lock");
    assert!(
        took >= Duration::from_millis(950),
        "gave up before --wait: {took:?}"
    );
    let mut conn = primary.conn();
    assert!(!exists(&mut conn, "redlock:{durable}"), "lock left behind");
    assert!(
        !exists(&mut conn, "redlock:{durable}:holder"),
        "holder record left behind"
    );
}

/// How long ago (`lag`, seconds) the primary's only replica last
/// acknowledged, by the primary's INFO.
fn replica_lag(primary: &RedisServer) -> Option<u64> {
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut primary.conn())
        .unwrap();
    let line = info.lines().find(|l| l.starts_with("slave0:"))?;
    line.split(',')
        .find_map(|kv| kv.strip_prefix("lag="))?
        .trim()
        .parse()
        .ok()
}

/// `--replicas auto` with the only replica stopped (SIGSTOP): the primary
/// still counts it connected (for repl-timeout, 60 s), but it no longer
/// acknowledges; once its lag shows it, auto stops waiting for it. The
/// holder is not killed (70) and a new run gets the lock (not 69).
#[test]
fn replicas_auto_does_not_wait_for_a_hung_replica() {
    let (primary, replica) = primary_with_replica();
    let dir = TestDir::new();
    let hold = Hold::new(&dir);
    let auto = ["--replicas", "auto"];
    // Refreshed every 5 s; stopped 6 s before the lease could end.
    let mut holder = hold.spawn(
        &mut Job::new(&primary.url(), "hung")
            .args(auto)
            .args(["--ttl", "15s", "-v"])
            .sh(hold.script("")),
        LONG,
    );
    replica.pause();
    assert!(
        wait_until(LONG, || replica_lag(&primary).is_some_and(|lag| lag > 2)),
        "the stopped replica's lag never grew"
    );
    // Still "connected" by the primary's count.
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut primary.conn())
        .unwrap();
    assert!(info.contains("connected_slaves:1"), "{info}");
    // doctor says so: a WARN, not a FAIL.
    let doctor = run_with_timeout(
        redlock(&primary.url()).args(["doctor", "--replicas", "auto"]),
        LONG,
    );
    assert_eq!(doctor.code, Some(0), "{doctor:?}");
    assert!(
        doctor
            .stdout
            .lines()
            .any(|l| l.contains("WARN") && l.contains("none acknowledging")),
        "{doctor:?}"
    );
    // The holder refreshes with the replica hung.
    let refreshes = |h: &RunningChild| h.stderr_now().matches("refreshed lock 'hung'").count();
    let before = refreshes(&holder);
    assert!(
        wait_until(LONG, || refreshes(&holder) > before || holder.has_exited()),
        "no refresh"
    );
    let out = run_with_timeout(
        &mut Job::new(&primary.url(), "other")
            .args(auto)
            .args(["-n"])
            .sh("true"),
        LONG,
    );
    hold.go();
    let held = holder.wait_timeout(LONG);
    replica.resume();
    assert_eq!(out.code, Some(0), "a new run: {out:?}");
    assert_eq!(held.code, Some(0), "the holder: {held:?}");
}

#[test]
fn fleet_options_are_validated_before_redis() {
    let server = RedisServer::start();
    let other = RedisServer::start();
    let cases: &[(&[&str], &str)] = &[
        (&["--limit", "0"], "--limit"),
        (&["--limit", "many"], "--limit"),
        (&["--min-hold", "3x"], "--min-hold"),
        (&["--max-hold", "0s"], "--max-hold"),
        (&["--random-delay", "soon"], "--random-delay"),
        (&["--on-unavailable", "maybe"], "--on-unavailable"),
        (&["--replicas", "-1"], "--replicas"),
        (&["--replicas", "1", "--redis", &other.url()], "--replicas"),
    ];
    for (extra, names) in cases {
        let out = run_with_timeout(&mut server.job("v").args(*extra).sh("true"), LONG);
        assert_eq!(out.code, Some(2), "{extra:?}: {out:?}");
        let first = out.stderr.lines().next().unwrap_or_default();
        assert!(first.contains(names), "{extra:?}: {out:?}");
    }
    assert_eq!(dbsize(&mut server.conn()), 0);
    assert_eq!(dbsize(&mut other.conn()), 0);
}

#[test]
fn min_hold_with_redis_gone_at_exit_warns_and_keeps_the_jobs_code() {
    let mut server = RedisServer::start();
    let dir = TestDir::new();
    let hold = Hold::new(&dir);
    let mut run = hold.spawn(
        &mut server
            .job("gone")
            .args(["--min-hold", "20s"])
            .sh(hold.script("exit 6")),
        LONG,
    );
    server.kill();
    hold.go();
    let out = run.wait_timeout(LONG);
    assert_eq!(out.code, Some(6), "the job's code stays: {out:?}");
    assert!(
        out.stderr.contains("--min-hold"),
        "says it could not keep the lock: {out:?}"
    );
}

#[test]
fn min_hold_survives_the_server_closing_the_idle_acquire_connection() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("timeout")
        .arg("1")
        .query::<()>(&mut conn)
        .unwrap();
    drop(conn);
    // The job ends once the server has closed the connection that took
    // the lock (the only one whose last command was EVAL), idle since.
    let script = format!(
        "i=0; while '{cli}' -p {port} client list | grep -q 'cmd=eval'; do \
         i=$((i+1)); [ $i -gt 300 ] && exit 9; sleep 0.1; done",
        cli = redis_cli_bin(),
        port = server.port()
    );
    let out = run_with_timeout(
        &mut server
            .job("idle")
            .args(["--ttl", "30s", "--min-hold", "20s", "-v"])
            .sh(script),
        LONG,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stderr.contains("keeping lock 'idle'"), "{}", out.stderr);
    let mut conn = server.conn();
    assert!(
        pttl(&mut conn, "redlock:{idle}") > 1000,
        "released early: {}",
        out.stderr
    );
    let next = run_with_timeout(&mut server.job("idle").args(["-n"]).sh("echo ran"), LONG);
    assert_eq!(next.code, Some(75), "the next run went ahead: {next:?}");
}

/// A user that may not run WAIT (a managed service that forbids it) with
/// `--replicas 1`: a refusal, exit 77 naming WAIT, at once; not a replica
/// that is late, retried until `--wait` runs out (with the default
/// `--wait forever`, never).
#[test]
fn a_refused_wait_under_replicas_is_a_refusal_not_a_late_replica() {
    let (primary, _replica) = primary_with_replica();
    let mut acl = redis::cmd("ACL");
    for a in [
        "SETUSER", "nowait", "on", ">pw", "~*", "&*", "+@all", "-wait",
    ] {
        acl.arg(a);
    }
    let _: () = acl.query(&mut primary.conn()).unwrap();
    let dir = TestDir::new();
    let marker = dir.file("ran");
    let out = run_with_timeout(
        &mut Job::new(&primary.url_with(Some("nowait"), "pw"), "durable")
            .args(["--replicas", "1", "--wait", "20s"])
            .sh(format!("touch '{}'", marker.display())),
        LONG,
    );
    assert_eq!(out.code, Some(77), "{out:?}");
    assert!(out.stderr.to_lowercase().contains("wait"), "{out:?}");
    assert!(!marker.exists(), "ran without a confirmed lock");
    assert!(
        !exists(&mut primary.conn(), "redlock:{durable}"),
        "lock left held"
    );
}
