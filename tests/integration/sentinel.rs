//! Sentinel endpoints (`redis+sentinel://`) against a real SentinelSet:
//! the admin commands, a wrong service, waiters woken by pub/sub, jobs
//! running through failovers, and many runs contending through forced
//! failovers of every kind.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::common::*;

const LONG: Duration = Duration::from_secs(90);

/// A critical section for `sh -c`: `start $ID T`, then `end $ID T` after
/// `secs` (T in nanoseconds); a SIGTERM also writes its end.
pub(crate) fn section(log: &Path, secs: &str) -> String {
    let log = log.display();
    format!(
        "now() {{ date +%s%N; }}; echo \"start $ID $(now)\" >> '{log}'; \
         trap 'echo \"end $ID $(now)\" >> \"{log}\"; exit 0' TERM; \
         sleep {secs}; echo \"end $ID $(now)\" >> '{log}'"
    )
}

/// Each section's (start, end) from a `section` log, checked not to overlap.
pub(crate) fn assert_sections_apart(log: &Path) -> HashMap<String, (u128, u128)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut spans: HashMap<String, (u128, u128)> = HashMap::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let [_, id, t] = words[..] else {
            panic!("bad line {line:?}")
        };
        let t: u128 = t.parse().expect("timestamp");
        let span = spans.entry(id.to_string()).or_insert((t, t));
        span.0 = span.0.min(t);
        span.1 = span.1.max(t);
    }
    let mut sorted: Vec<_> = spans.iter().collect();
    sorted.sort_by_key(|(_, span)| span.0);
    for pair in sorted.windows(2) {
        let ((a, (_, a_end)), (b, (b_start, _))) = (pair[0], pair[1]);
        assert!(a_end <= b_start, "sections {a} and {b} overlapped:\n{text}");
    }
    spans
}

/// Workers that run `make(id)` until `stop`, each run's exit code checked
/// against the section log: the job's 0, a lost lock (70), or, only when
/// its job never started, unavailable (69). `ok` counts the runs that
/// exited 0.
pub(crate) fn contend_until(
    workers: usize,
    stop: &AtomicBool,
    ok: &AtomicUsize,
    log: &Path,
    make: impl Fn(&str) -> Command + Sync,
) {
    std::thread::scope(|s| {
        for w in 0..workers {
            let make = &make;
            s.spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) {
                    n += 1;
                    let id = format!("w{w}r{n}");
                    let mut cmd = make(&id);
                    cmd.env("ID", &id);
                    let out = run_with_timeout(&mut cmd, LONG);
                    let text = std::fs::read_to_string(log).unwrap_or_default();
                    let started = text.contains(&format!("start {id} "));
                    match out.code {
                        Some(0) => {
                            ok.fetch_add(1, Ordering::SeqCst);
                        }
                        Some(70) => {}
                        Some(69) if !started => {}
                        _ => panic!("run {id} (started: {started}): {out:?}"),
                    }
                }
            });
        }
    });
}

/// Eight workers run logged sections on KEY `load` of `url` while
/// `faults` breaks things (it is handed a check that work goes on after
/// each fault); then no two sections may have overlapped. Returns how
/// many sections ran.
pub(crate) fn under_load(url: &str, faults: impl FnOnce(&dyn Fn(&str))) -> usize {
    let dir = TestDir::new();
    let log = dir.file("log");
    let (stop, ok) = (AtomicBool::new(false), AtomicUsize::new(0));
    std::thread::scope(|s| {
        s.spawn(|| {
            contend_until(8, &stop, &ok, &log, |_| {
                let mut cmd = redlock(url);
                cmd.args(["-k", "load", "--ttl", "10s", "--wait", "60s"])
                    .args(["--", "sh", "-c", &section(&log, "0.1")])
                    .stdin(Stdio::null());
                cmd
            })
        });
        let goes_on = |after: &str| assert_work_continues(&ok, ok.load(Ordering::SeqCst), after);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            assert_work_continues(&ok, 0, "the start");
            faults(&goes_on);
        }));
        stop.store(true, Ordering::SeqCst);
        if let Err(panic) = result {
            std::panic::resume_unwind(panic);
        }
    });
    assert_sections_apart(&log).len()
}

/// Wait until `ok` grows past `from`: work goes on.
pub(crate) fn assert_work_continues(ok: &AtomicUsize, from: usize, after: &str) {
    assert!(
        wait_until(LONG, || ok.load(Ordering::SeqCst) > from),
        "no run succeeded after {after}"
    );
}

/// A job that writes its fence to `dir/fence-NAME`, touches `dir/started-NAME`
/// and runs until `dir/go` exists.
pub(crate) fn held_until_go(dir: &TestDir, name: &str) -> Vec<String> {
    let d = dir.path().display();
    let line = format!(
        "echo $REDLOCK_FENCE > '{d}/fence-{name}'; touch '{d}/started-{name}'; \
         while [ ! -e '{d}/go' ]; do sleep 0.05; done"
    );
    vec!["--".into(), "sh".into(), "-c".into(), line]
}

pub(crate) fn fence(dir: &TestDir, name: &str) -> i64 {
    let text = dir.read(&format!("fence-{name}")).expect("fence file");
    text.trim().parse().expect("fence")
}

/// Waiters subscribed on the node on `port` (each listens on two channels).
pub(crate) fn subscribed_waiters(port: u16) -> usize {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    match client.get_connection_with_timeout(Duration::from_secs(2)) {
        Ok(mut conn) => clients_subscribed_to(&mut conn, 2),
        Err(_) => 0,
    }
}

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
    assert!(out.stdout.contains("held  held by"), "{out:?}");
    assert!(out.stdout.contains("once  free"), "{out:?}");
    let out = run_with_timeout(redlock(&url).args(["list"]), LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.starts_with("held  held by"), "{out:?}");

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

    // Sentinels' own failover: the lock (confirmed by a replica under the
    // default --replicas auto) is on the new primary.
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
    let sections = under_load(&url, |goes_on| {
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
