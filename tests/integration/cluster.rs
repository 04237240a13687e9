//! Cluster endpoints (`redis+cluster://`) against a real 3+3 Cluster: the
//! admin commands from a seed that does not own the key, KEYs with braces,
//! a job and a waiter through a slot migration, and contended sections
//! through a migration, a CLUSTER FAILOVER and a killed primary.

use std::time::{Duration, Instant};

use crate::common::*;

const LONG: Duration = Duration::from_secs(90);

/// The Redis keys of KEY's lock under the default prefix (see LockKeys).
fn stored(key: &str) -> String {
    match key.starts_with('}') {
        true => format!("redlock:}}{{~{key}}}"),
        false => format!("redlock:{{{key}}}"),
    }
}

#[test]
fn admin_and_braces_from_a_seed_that_does_not_own_the_slot() {
    let cluster = Cluster::start();
    let slot = cluster.slot_of(&stored("held"));
    let url = cluster.seed_not_owning(slot);
    let dir = TestDir::new();

    let out = run_with_timeout(redlock(&url).args(["-k", "held", "--", "true"]), LONG);
    assert_eq!(out.code, Some(0), "{out:?}");

    let keys = ["held", "}x", "a{b}c", "{", "}"];
    let mut holders: Vec<RunningChild> = keys
        .iter()
        .enumerate()
        .map(|(i, key)| {
            spawn_piped(
                redlock(&url)
                    .args(["-k", key, "--ttl", "20s"])
                    .args(held_until_go(&dir, &i.to_string())),
            )
        })
        .collect();
    for i in 0..keys.len() {
        assert!(
            wait_for_file(dir.file(&format!("started-{i}")), LONG),
            "holder {i}"
        );
    }
    for key in keys {
        let lock = stored(key);
        let slot = cluster.slot_of(&lock);
        for other in [format!("{lock}:holder"), format!("{lock}:fence")] {
            assert_eq!(cluster.slot_of(&other), slot, "{key}: {other} vs {lock}");
        }
        let mut owner = cluster.conn(cluster.primary_for_slot(slot));
        assert!(
            get(&mut owner, &lock).is_some(),
            "{key}: {lock} on its slot's primary"
        );
        let out = run_with_timeout(redlock(&url).args(["status", key]), LONG);
        assert_eq!(out.code, Some(0), "{key}: {out:?}");
        assert!(
            out.stdout.starts_with(&format!("{key}  held by")),
            "{out:?}"
        );
    }
    let out = run_with_timeout(redlock(&url).args(["list", "--json"]), LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    let mut expected: Vec<&str> = keys.to_vec();
    expected.sort();
    let listed: Vec<String> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["key"].to_string())
        .collect();
    let expected: Vec<String> = expected.iter().map(|k| format!("{k:?}")).collect();
    assert_eq!(listed, expected, "every primary is scanned: {out:?}");

    let out = run_with_timeout(redlock(&url).args(["force-release", "}x", "--now"]), LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(holders[1].wait_timeout(LONG).code, Some(70));
    std::fs::write(dir.file("go"), "").unwrap();
    for (i, holder) in holders.iter_mut().enumerate().filter(|(i, _)| *i != 1) {
        assert_eq!(holder.wait_timeout(LONG).code, Some(0), "holder {i}");
    }

    // A plain URL to a node that does not serve the slot: a hint, not "unavailable".
    let plain = url.replace("redis+cluster://", "redis://");
    let out = run_with_timeout(redlock(&plain).args(["-k", "held", "--", "true"]), LONG);
    assert_eq!(out.code, Some(77), "{out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "one line: {out:?}");
    assert!(out.stderr.contains("redis+cluster://"), "{out:?}");
}

#[test]
fn a_job_and_its_waiter_ride_through_a_slot_migration() {
    let mut cluster = Cluster::start();
    let dir = TestDir::new();
    let url = cluster.url();
    let lock = stored("moving");
    let slot = cluster.slot_of(&lock);
    let mut holder = spawn_piped(
        redlock(&url)
            .args(["-k", "moving", "--ttl", "6s"])
            .args(held_until_go(&dir, "first")),
    );
    assert!(
        wait_for_file(dir.file("started-first"), LONG),
        "holder never started"
    );
    let mut waiter = spawn_piped(
        redlock(&url)
            .args(["-k", "moving", "--wait", "60s"])
            .args(held_until_go(&dir, "second")),
    );
    let from = cluster.primary_for_slot(slot);
    assert!(
        wait_until(LONG, || subscribed_waiters(from) == 1),
        "the waiter is subscribed on the key's primary: {}",
        waiter.stderr_now()
    );

    let to = cluster.port_not_owning(slot);
    cluster.migrate_slot(slot, to);
    let before = pttl(&mut cluster.conn(to), &lock);
    assert!(before > 0, "the lock moved with its slot");
    assert!(
        wait_until(LONG, || pttl(&mut cluster.conn(to), &lock) > before),
        "refreshes follow the slot: {}",
        holder.stderr_now()
    );

    std::fs::write(dir.file("go"), "").unwrap();
    let out = holder.wait_timeout(LONG);
    assert_eq!(
        out.code,
        Some(0),
        "a migrated slot is not a lost lock: {out:?}"
    );
    let released = Instant::now();
    assert!(wait_for_file(dir.file("started-second"), LONG));
    assert!(
        released.elapsed() < Duration::from_secs(5),
        "{:?}",
        released.elapsed()
    );
    assert_eq!(waiter.wait_timeout(LONG).code, Some(0));
    assert!(fence(&dir, "second") > fence(&dir, "first"));
}

#[test]
fn contended_sections_never_overlap_through_migration_and_failovers() {
    let mut cluster = Cluster::start();
    let url = cluster.url();
    let slot = cluster.slot_of(&stored("load"));
    // The default --replicas auto: a CLUSTER FAILOVER waits for the
    // replica to catch up, and a killed primary's replica had the lock.
    let sections = under_load(&url, &[], |goes_on| {
        let to = cluster.port_not_owning(slot);
        cluster.migrate_slot(slot, to);
        goes_on("the migration");
        cluster.failover_replica_of(cluster.primary_for_slot(slot));
        goes_on("CLUSTER FAILOVER");
        cluster.kill_primary_for_slot(slot);
        goes_on("SIGKILL of the primary");
    });
    assert!(sections >= 4, "{sections} sections");
}

#[test]
fn contended_runs_all_exit_0_through_slot_migrations_back_and_forth() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Mutex;

    let mut cluster = Cluster::start();
    let url = cluster.url();
    let lock = stored("reshard");
    let slot = cluster.slot_of(&lock);
    // Other keys in the lock's slot, moved one per MIGRATE: the slot
    // stays half-moved (TRYAGAIN, ASK) for the whole move, 0.7 to 3 s
    // here, mostly longer than the per-node timeout of a 10 s TTL (1 s),
    // so that runs also retry within --wait, not only within one call. A
    // holder cannot refresh while the slot is half-moved: a 2 s lease
    // was lost to a 3 s move on a loaded machine (exit 70, as
    // docs/topologies.md says); 10 s outlasts every move.
    let mut owner = cluster.conn(cluster.primary_for_slot(slot));
    for i in 0..600 {
        let _: () = redis::cmd("SET")
            .arg(format!("{{reshard}}-{i}"))
            .arg(i)
            .query(&mut owner)
            .unwrap();
    }
    let (home, away) = (
        cluster.primary_for_slot(slot),
        cluster.port_not_owning(slot),
    );
    let dir = TestDir::new();
    let log = dir.file("log");
    let (stop, runs) = (AtomicBool::new(false), AtomicUsize::new(0));
    let failed = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for w in 0..4 {
            let (stop, runs, failed, log, url) = (&stop, &runs, &failed, &log, &url);
            s.spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) {
                    n += 1;
                    let id = format!("w{w}r{n}");
                    let out = run_with_timeout(
                        redlock(url)
                            .args(["-k", "reshard", "--ttl", "10s", "--wait", "60s"])
                            .args(["--", "sh", "-c", &section(log, "0.02")])
                            .env("ID", &id),
                        LONG,
                    );
                    runs.fetch_add(1, Ordering::SeqCst);
                    if out.code != Some(0) {
                        failed.lock().unwrap().push(format!("{id}: {out:?}"));
                    }
                }
            });
        }
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            for n in 0..4 {
                let before = runs.load(Ordering::SeqCst);
                let to = if n % 2 == 0 { away } else { home };
                let t = std::time::Instant::now();
                cluster.migrate_slot_by(slot, to, 1);
                eprintln!("migration {n} took {:?}", t.elapsed());
                assert!(
                    wait_until(LONG, || runs.load(Ordering::SeqCst) > before + 4),
                    "no runs after migration {n}"
                );
            }
        }));
        stop.store(true, Ordering::SeqCst);
        if let Err(panic) = result {
            std::panic::resume_unwind(panic);
        }
    });
    let failed = failed.into_inner().unwrap();
    assert!(
        failed.is_empty(),
        "{} of {} runs failed through the migrations:\n{}",
        failed.len(),
        runs.load(Ordering::SeqCst),
        failed.join("\n")
    );
    let sections = assert_sections_apart(&log).len();
    assert!(sections >= 16, "{sections} sections");
}

/// `status --json`'s count of live waiters of `key`.
fn waiters_seen(url: &str, key: &str) -> u64 {
    let out = run_with_timeout(redlock(url).args(["status", key, "--json"]), LONG);
    json_lines(&out)
        .first()
        .and_then(|v| v["waiters_count"].as_u64())
        .unwrap_or(0)
}

/// Waiters in line when the lock's primary fails over (CLUSTER FAILOVER:
/// their subscriptions stay on the old primary, now a replica) and when
/// the lock's slot moves to another primary: the new primary cannot see
/// them subscribed (PUBSUB NUMSUB is per node), yet they are alive.
/// `status` still counts both, and the release serves the first in line.
#[test]
fn waiters_in_line_stay_in_line_through_a_failover_and_a_resharding() {
    let mut cluster = Cluster::start();
    let url = cluster.url();
    let slot = cluster.slot_of(&stored("line"));
    let dir = TestDir::new();
    let order = dir.file("order");
    let hold = Hold::new(&dir);
    let mut holder = hold.spawn(
        &mut Job::new(&url, "line")
            .args(["--ttl", "60s"])
            .sh(hold.script("")),
        LONG,
    );
    let waiter = |name: &str| {
        let job = format!("echo {name} >> '{}'", order.display());
        spawn_waiting(&mut Job::new(&url, "line").args(["-v"]).sh(job), LONG)
    };
    let mut first = waiter("first");
    assert!(wait_until(LONG, || waiters_seen(&url, "line") == 1));
    let mut second = waiter("second");
    assert!(wait_until(LONG, || waiters_seen(&url, "line") == 2));
    let primary = cluster.primary_for_slot(slot);
    let promoted = cluster.failover_replica_of(primary);
    assert_eq!(waiters_seen(&url, "line"), 2, "after the failover");
    let other = cluster
        .primaries()
        .into_iter()
        .find(|&p| p != promoted)
        .expect("another primary");
    cluster.migrate_slot(slot, other);
    assert_eq!(waiters_seen(&url, "line"), 2, "after the resharding");
    hold.go();
    assert_eq!(holder.wait_timeout(LONG).code, Some(0));
    assert_eq!(first.wait_timeout(LONG).code, Some(0));
    assert_eq!(second.wait_timeout(LONG).code, Some(0));
    let served = std::fs::read_to_string(&order).unwrap_or_default();
    assert_eq!(served, "first\nsecond\n", "served out of order");
}
