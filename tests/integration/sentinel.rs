//! Sentinel endpoints (`redis+sentinel://`) against a real SentinelSet:
//! the admin commands, a wrong service, waiters woken by pub/sub, jobs
//! running through failovers, and many runs contending through forced
//! failovers of every kind.

use std::time::{Duration, Instant};

use crate::common::*;

const LONG: Duration = Duration::from_secs(90);

#[test]
fn admin_and_run_through_sentinels_with_one_down_and_a_wrong_service() {
    let mut set = SentinelSet::start();
    set.kill_sentinel(0);
    let url = set.url();
    let dir = TestDir::new();

    let out = run_with_timeout(redlock(&url).args(["-k", "once", "--", "true"]), LONG);
    assert_eq!(out.code, Some(0), "{out:?}");

    let mut holder = spawn_piped(
        redlock(&url)
            .args(["-k", "held", "--ttl", "20s"])
            .args(held_until_go(&dir, "h")),
    );
    assert!(
        wait_for_file(dir.file("started-h"), LONG),
        "holder never started"
    );
    let mut primary = set.primary_conn();
    assert!(
        get(&mut primary, "redlock:{held}").is_some(),
        "the lock is on the primary"
    );

    let out = run_with_timeout(redlock(&url).args(["status", "held", "once"]), LONG);
    assert_eq!(out.code, Some(1), "held and free: {out:?}");
    // Several keys: a table, a row each.
    let row = |key: &str| {
        out.stdout
            .lines()
            .find(|l| l.starts_with(&format!("{key} ")))
            .unwrap_or_default()
    };
    assert!(
        row("held").split_whitespace().nth(1) == Some("held"),
        "{out:?}"
    );
    assert!(
        row("once").split_whitespace().nth(1) == Some("free"),
        "{out:?}"
    );
    let list = run_with_timeout(redlock(&url).args(["list"]), LONG);
    assert_eq!(list.code, Some(0), "{list:?}");
    let held = list.stdout.lines().nth(1).unwrap_or_default();
    assert!(
        held.starts_with("held ") && held.split_whitespace().nth(1) == Some("held"),
        "{list:?}"
    );

    let out = run_with_timeout(redlock(&url).args(["force-release", "held", "--now"]), LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    let out = holder.wait_timeout(LONG);
    assert_eq!(
        out.code,
        Some(70),
        "the holder learns its lock is gone: {out:?}"
    );
    assert!(get(&mut primary, "redlock:{held}").is_none());

    let wrong = url.replace("/mymaster", "/nosuch");
    let out = run_with_timeout(redlock(&wrong).args(["-k", "x", "--", "true"]), LONG);
    assert_eq!(out.code, Some(69), "{out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "one line: {out:?}");
    assert!(
        out.stderr.contains("'nosuch'") && out.stderr.contains("unknown"),
        "{out:?}"
    );
    let out = run_with_timeout(redlock(&wrong).args(["status", "x"]), LONG);
    assert_eq!(out.code, Some(69), "{out:?}");
}

#[test]
fn a_job_runs_through_a_failover_and_a_waiter_wakes_by_pubsub() {
    let mut set = SentinelSet::start();
    let url = set.url();
    let dir = TestDir::new();
    let mut holder = spawn_piped(
        redlock(&url)
            .args(["-k", "job", "--ttl", "10s", "-v"])
            .args(held_until_go(&dir, "first")),
    );
    assert!(
        wait_for_file(dir.file("started-first"), LONG),
        "holder never started"
    );
    // The default --replicas auto waits for one replica; the failover may
    // promote the other (the documented window), so wait until both have
    // the lock: whichever the sentinels promote then has it.
    for replica in set.replicas() {
        assert!(
            wait_until(LONG, || get(&mut set.data_conn(replica), "redlock:{job}")
                .is_some()),
            "replica {replica} never got the lock"
        );
    }

    // Sentinels' own failover: the lock is on the new primary.
    let old = set.primary();
    let new = set.failover();
    assert_ne!(old, new);
    assert!(
        wait_until(LONG, || get(&mut set.primary_conn(), "redlock:{job}")
            .is_some()),
        "the lock survived on the new primary: {}",
        holder.stderr_now()
    );
    // A refresh reaches the new primary (the TTL is pushed again).
    let before = pttl(&mut set.primary_conn(), "redlock:{job}");
    assert!(
        wait_until(LONG, || pttl(&mut set.primary_conn(), "redlock:{job}")
            > before),
        "no refresh on the new primary: {}",
        holder.stderr_now()
    );

    // A waiter subscribes on the new primary, and wakes when we let go.
    let mut waiter = spawn_piped(
        redlock(&url)
            .args(["-k", "job", "--wait", "60s"])
            .args(held_until_go(&dir, "second")),
    );
    assert!(
        wait_until(LONG, || subscribed_waiters(new) == 1),
        "the waiter is subscribed on the primary: {}",
        waiter.stderr_now()
    );
    std::fs::write(dir.file("go"), "").unwrap();
    let out = holder.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    let released = Instant::now();
    assert!(wait_for_file(dir.file("started-second"), LONG));
    assert!(
        released.elapsed() < Duration::from_secs(5),
        "the waiter took {:?}",
        released.elapsed()
    );
    let out = waiter.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        fence(&dir, "second") > fence(&dir, "first"),
        "fences grow across the failover"
    );
}

/// One of the five failovers, by `n`: SENTINEL FAILOVER, SIGKILL of the
/// primary, or SIGSTOP past down-after.
fn fail_over(set: &mut SentinelSet, n: usize) -> &'static str {
    match n % 3 {
        0 => {
            set.failover();
            "SENTINEL FAILOVER"
        }
        1 => {
            let old = set.kill_primary();
            set.wait_for_new_primary(old, TOPOLOGY_TIMEOUT);
            set.restart_as_replica(old);
            "SIGKILL of the primary"
        }
        _ => {
            let (old, _) = set.pause_primary_past_down_after();
            set.resume_as_replica(old);
            "SIGSTOP of the primary"
        }
    }
}

#[test]
fn contended_sections_never_overlap_through_five_failovers() {
    let mut set = SentinelSet::start();
    let url = set.url();
    // Both replicas confirm every write: with the default --replicas auto
    // (one) a forced failover can promote the replica that had not
    // confirmed, while the old primary still takes writes (the window
    // docs/topologies.md lists; once in five CI runs here).
    let sections = under_load(&url, &["--replicas", "2"], |goes_on| {
        for n in 0..5 {
            let what = fail_over(&mut set, n);
            goes_on(what);
        }
    });
    assert!(sections >= 6, "{sections} sections");
}

#[test]
fn redlock_over_three_sentinel_services_survives_a_failover() {
    let mut sets: Vec<SentinelSet> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..3).map(|_| s.spawn(SentinelSet::start)).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let dir = TestDir::new();
    let mut cmd = redlock_bare();
    for set in &sets {
        cmd.args(["--redis", &set.url()]);
    }
    // Both replicas of every set confirm each write (an explicit N is
    // allowed with several Sentinel nodes), so whichever one the failover
    // promotes has the lock; a long TTL keeps it there through a slow
    // failover (Redis 6.2's sentinels take tens of seconds), and frequent
    // refreshes show that they reach the new primary.
    let mut holder = spawn_piped(
        cmd.args([
            "-k",
            "rl",
            "--ttl",
            "60s",
            "--refresh",
            "2s",
            "--replicas",
            "2",
        ])
        .args(held_until_go(&dir, "h")),
    );
    assert!(
        wait_for_file(dir.file("started-h"), LONG),
        "holder never started"
    );
    sets[1].failover();
    let before = pttl(&mut sets[1].primary_conn(), "redlock:{rl}");
    assert!(
        before > 0,
        "the lock is on the new primary of the failed-over set"
    );
    assert!(
        wait_until(LONG, || pttl(&mut sets[1].primary_conn(), "redlock:{rl}")
            > before),
        "refreshes reach the new primary: {}",
        holder.stderr_now()
    );
    std::fs::write(dir.file("go"), "").unwrap();
    let out = holder.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    for set in &sets {
        assert!(
            get(&mut set.primary_conn(), "redlock:{rl}").is_none(),
            "released everywhere"
        );
    }
}

#[test]
fn a_release_right_after_a_failover_reaches_the_new_primary() {
    let mut set = SentinelSet::start();
    let url = set.url();
    let dir = TestDir::new();
    // Both replicas confirm the lock, so whichever is promoted has it.
    let mut holder = spawn_piped(
        redlock(&url)
            .args(["-k", "moved", "--ttl", "9s", "--replicas", "2", "-v"])
            .args(held_until_go(&dir, "h")),
    );
    assert!(
        wait_for_file(dir.file("started-h"), LONG),
        "holder never started"
    );
    // The job ends while the old primary, not yet demoted, still takes
    // writes; the holder's first connection to it is still open.
    let (old, new) = set.start_failover();
    let stale = set.says_master(old);
    std::fs::write(dir.file("go"), "").unwrap();
    let mut primary = redis::Client::open(format!("redis://127.0.0.1:{new}"))
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap();
    let out = holder.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stderr.contains("released lock"), "{out:?}");
    assert!(
        !exists(&mut primary, "redlock:{moved}"),
        "the lock is still held on the new primary {new} (PTTL {} ms; old primary {old} \
         still a master at release: {stale}):\n{}",
        pttl(&mut primary, "redlock:{moved}"),
        out.stderr
    );
    // The next job does not find it busy (no replica confirmation: the
    // replicas may still be catching up with the new primary).
    let out = run_with_timeout(
        redlock(&url).args(["-k", "moved", "-n", "--replicas", "0", "--", "true"]),
        LONG,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    if !stale {
        eprintln!("note: the old primary {old} was demoted before the release");
    }
}

/// A replica the sentinels know but that is down or reconnecting (here:
/// killed, then started again) is waited for within `--wait`, as during a
/// failover, when the promoted replica has left the old primary: only a
/// `--replicas N` beyond the replicas the sentinels know is refused at
/// once (chaos finding F5: waiters gave up with exit 69 mid-failover).
#[test]
fn a_known_replica_that_is_down_is_waited_for_and_too_many_are_refused_at_once() {
    let mut set = SentinelSet::start();
    let url = set.url();
    let primary = set.primary();
    let replica = set.replicas()[0];
    set.data_node(replica).kill();
    let counted = wait_until(LONG, || {
        let info: Result<String, _> = redis::cmd("INFO")
            .arg("replication")
            .query(&mut set.data_conn(primary));
        info.is_ok_and(|i| i.contains("connected_slaves:1"))
    });
    assert!(
        counted,
        "the primary still counts two replicas:\n{}",
        set.logs()
    );
    let out = run_with_timeout(
        redlock(&url).args([
            "-k",
            "known",
            "--replicas",
            "3",
            "--wait",
            "60s",
            "--",
            "true",
        ]),
        LONG,
    );
    assert_eq!(out.code, Some(69), "{out:?}");
    assert!(out.stderr.contains("can never be met"), "{out:?}");

    let dir = TestDir::new();
    let ran = dir.file("ran");
    let mut waiter = spawn_piped(
        redlock(&url)
            .args([
                "-k",
                "known",
                "--replicas",
                "2",
                "--wait",
                "60s",
                "--",
                "touch",
            ])
            .arg(&ran),
    );
    std::thread::sleep(Duration::from_secs(1));
    assert!(!ran.exists(), "ran with one replica of the two asked for");
    set.restart_as_replica(replica);
    let out = waiter.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(ran.exists(), "the command did not run");
}
