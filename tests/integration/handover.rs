//! The lock passing from one run to the next, and never to two at once:
//! a waiter whose connection drops or whose server dies never fails open;
//! the line's order is the server's, whatever a client's clock says; after
//! a restart without persistence or a FLUSHALL every waiter that saw the
//! holder waits out its lease, and fences still grow; force-release lets
//! no waiter in beside a holder still stopping or cut off; a release or
//! give-back whose reply is lost or late never deletes the next holder's
//! lock nor reads as a lost lease.

use std::path::Path;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::common::*;

const LONG: Duration = Duration::from_secs(40);

/// A holder of `key` that logs its section to `log` in `dir`, and runs
/// until `Hold::new(dir).go()`; returns once its section has started.
fn holder(url: &str, key: &str, extra: &[&str], dir: &TestDir) -> RunningChild {
    let hold = Hold::new(dir);
    let log = dir.file("log");
    let script = format!(
        "echo \"start H\" >> '{log}'; {}",
        hold.script(&format!("echo \"end H\" >> '{}'", log.display())),
        log = log.display(),
    );
    hold.spawn(&mut Job::new(url, key).args(extra).line(&script), LONG)
}

/// A verbose waiter running a short section; returns once it waits.
fn waiter(url: &str, key: &str, extra: &[&str], log: &Path) -> RunningChild {
    let mut cmd = Job::new(url, key)
        .args(extra)
        .args(["-v"])
        .line(section_script(log, "0.2"));
    spawn_waiting(cmd.env("W", "W"), LONG)
}

#[test]
fn a_waiter_whose_connection_drops_does_not_fail_open() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let log = dir.file("log");
    let mut held = holder(&server.url(), "drop", &[], &dir);
    let extra = ["--on-unavailable", "run", "--wait", "20s"];
    let mut waiting = waiter(&server.url(), "drop", &extra, &log);
    let inodes = |run: &RunningChild| -> Vec<u64> {
        let sockets = connections_to(run.pid(), server.port());
        sockets.iter().map(|s| s.inode).collect()
    };
    let before = inodes(&waiting);
    let killed: i64 = redis::cmd("CLIENT")
        .arg(&["KILL", "TYPE", "normal"])
        .query(&mut server.conn())
        .expect("CLIENT KILL");
    assert!(killed >= 2, "killed {killed} connections");
    // The waiter's next poll meets the dead connection: it connects anew.
    assert!(
        wait_until(LONG, || inodes(&waiting)
            .iter()
            .any(|i| !before.contains(i))),
        "the waiter never reconnected: {}",
        waiting.stderr_now()
    );
    Hold::new(&dir).go();
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
    let mut held = holder(&server.url(), "dies", &[], &dir);
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

/// The tokens waiting for `key`, first in line first.
fn line(server: &RedisServer, key: &str) -> Vec<String> {
    redis::cmd("ZRANGE")
        .arg(format!("redlock:{{{key}}}:waiters"))
        .arg(0)
        .arg(-1)
        .query(&mut server.conn())
        .expect("ZRANGE")
}

#[test]
fn a_waiter_whose_clock_runs_ahead_keeps_its_place_in_line() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let log = dir.file("log");
    let mut held = holder(&server.url(), "skew", &[], &dir);
    // A waiter that arrived first, and whose clock ran an hour ahead: its
    // place is as far back as a clock-based score would have put it.
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let mut conn = server.conn();
    redis::cmd("ZADD")
        .arg("redlock:{skew}:waiters")
        .arg((now_ms + 3_600_000) as u64)
        .arg("early")
        .exec(&mut conn)
        .unwrap();
    redis::cmd("SET")
        .arg("redlock:{skew}:waiters:early")
        .arg("1")
        .arg("PX")
        .arg(60_000)
        .exec(&mut conn)
        .unwrap();
    let mut later = waiter(&server.url(), "skew", &["--wait", "20s"], &log);
    assert!(
        wait_until(LONG, || line(&server, "skew").len() == 2),
        "the second waiter never stood in line: {:?}",
        line(&server, "skew")
    );
    assert_eq!(
        line(&server, "skew")[0],
        "early",
        "the later waiter jumped the line"
    );
    Hold::new(&dir).go();
    held.wait_timeout(LONG);
    later.signal(Signal::SIGTERM);
    later.wait_timeout(LONG);
}

#[test]
fn waiters_are_served_in_the_servers_order_of_arrival() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut held = holder(&server.url(), "fifo", &[], &dir);
    let order = dir.file("order");
    let mut waiters = Vec::new();
    for n in 1..=3 {
        let script = format!("echo {n} >> '{}'", order.display());
        waiters.push(spawn_piped(&mut server.job("fifo").line(&script)));
        assert!(
            wait_until(LONG, || line(&server, "fifo").len() == n),
            "waiter {n} never stood in line"
        );
    }
    // Scores are the server's arrival order, not anybody's clock.
    let scores: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg("redlock:{fifo}:waiters")
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(&mut server.conn())
        .unwrap();
    let scores: Vec<f64> = scores.into_iter().map(|(_, s)| s).collect();
    assert_eq!(scores, [1.0, 2.0, 3.0]);
    Hold::new(&dir).go();
    held.wait_timeout(LONG);
    for mut w in waiters {
        assert_eq!(w.wait_timeout(LONG).code, Some(0));
    }
    let order = std::fs::read_to_string(&order).unwrap();
    assert_eq!(
        order.split_whitespace().collect::<Vec<_>>(),
        ["1", "2", "3"]
    );
}

/// One run of `key`: the fence COMMAND saw, and what it printed on stderr.
fn fence_of_a_run(url: &str, key: &str) -> (i64, String) {
    let out = run_with_timeout(
        &mut Job::new(url, key).args(["-v"]).line("echo $REDLOCK_FENCE"),
        LONG,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    let fence = out.stdout.trim().parse().expect("REDLOCK_FENCE");
    (fence, out.stderr)
}

#[test]
fn fences_grow_across_a_restart_without_persistence_and_flushall() {
    let mut server = RedisServer::start();
    let url = server.url();
    let (first, said) = fence_of_a_run(&url, "f");
    assert!(said.contains("is new on this server"), "{said}");
    let (second, said) = fence_of_a_run(&url, "f");
    assert!(second > first, "{second} after {first}");
    assert!(
        !said.contains("is new on this server"),
        "nothing was lost: {said}"
    );
    server.restart();
    let (third, said) = fence_of_a_run(&url, "f");
    assert!(third > second, "after a restart: {third} after {second}");
    assert!(said.contains("is new on this server"), "{said}");
    redis::cmd("FLUSHALL").exec(&mut server.conn()).unwrap();
    let (fourth, _) = fence_of_a_run(&url, "f");
    assert!(fourth > third, "after FLUSHALL: {fourth} after {third}");
    // A semaphore shares the counter, and seeds it the same way.
    redis::cmd("FLUSHALL").exec(&mut server.conn()).unwrap();
    let out = run_with_timeout(
        &mut Job::new(&url, "f")
            .args(["--limit", "2"])
            .line("echo $REDLOCK_FENCE"),
        LONG,
    );
    let fifth: i64 = out.stdout.trim().parse().expect("REDLOCK_FENCE");
    assert!(
        fifth > fourth,
        "semaphore after FLUSHALL: {fifth} after {fourth}"
    );
}

/// A holder whose COMMAND takes `grace` to stop after SIGTERM, logging its
/// section (`start H` .. `end H`) to `log`.
fn slow_to_stop_holder(url: &str, key: &str, log: &Path) -> RunningChild {
    let dir = log.parent().expect("log in a directory");
    let script = format!(
        "echo \"start H\" >> '{log}'; \
         trap 'sleep 1; echo \"end H\" >> \"{log}\"; exit 0' TERM; \
         touch '{started}'; while :; do sleep 0.02; done",
        log = log.display(),
        started = dir.join("started").display(),
    );
    // Refresh every second, 2 s between SIGTERM and SIGKILL.
    let extra = ["--ttl", "6s", "--refresh", "1s", "--kill-after", "2s"];
    let started = dir.join("started");
    spawn_started(
        &mut Job::new(url, key).args(extra).line(&script),
        &started,
        LONG,
    )
}

#[test]
fn force_release_lets_no_waiter_in_before_the_holder_has_stopped() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let log = dir.file("log");
    let mut held = slow_to_stop_holder(&server.url(), "fr", &log);
    let mut waiting = waiter(&server.url(), "fr", &["--wait", "30s"], &log);
    let out = run_with_timeout(redlock(&server.url()).args(["force-release", "fr"]), LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.starts_with("revoked 'fr'"), "{out:?}");
    // While the holder stops, others see it as busy, and status says why.
    let out = run_with_timeout(redlock(&server.url()).args(["status", "fr"]), LONG);
    assert!(out.stdout.contains("being force-released"), "{out:?}");
    let out = run_with_timeout(&mut server.job("fr").args(["-n"]).line("true"), LONG);
    assert_eq!(out.code, Some(75), "{out:?}");
    assert!(out.stderr.contains("being force-released"), "{out:?}");

    let out = held.wait_timeout(LONG);
    assert_eq!(out.code, Some(70), "{out:?}");
    let out = waiting.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text, "start H\nend H\nstart W\nend W\n", "overlap");
}

#[test]
fn force_release_now_deletes_at_once() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let log = dir.file("log");
    let mut held = slow_to_stop_holder(&server.url(), "frn", &log);
    let args = ["force-release", "frn", "--now"];
    let out = run_with_timeout(redlock(&server.url()).args(args), LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.starts_with("released 'frn'"), "{out:?}");
    assert!(!exists(&mut server.conn(), "redlock:{frn}"));
    // Free at once: a run gets it while the old holder may still stop.
    let out = run_with_timeout(&mut server.job("frn").args(["-n"]).line("true"), LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(held.wait_timeout(LONG).code, Some(70));
}

/// A holder alive but cut off from Redis (its connections go through a
/// proxy that stops forwarding) does not hear of a force-release and runs
/// its job until its own deadline stops it. No waiter may get the lock
/// before then: the revocation lasts as long as the lock had left.
#[test]
fn force_release_of_a_partitioned_holder_lets_no_waiter_in_beside_it() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let dir = TestDir::new();
    let beats = dir.file("beats");
    // The job ignores SIGTERM, so it runs until redlock-run's SIGKILL,
    // which comes no later than the holder's lease ends.
    let script = format!(
        "trap '' TERM; touch '{started}'; while :; do date +%s%N >> '{beats}'; sleep 0.02; done",
        started = dir.file("started").display(),
        beats = beats.display(),
    );
    let extra = ["--ttl", "6s", "--refresh", "1s", "--kill-after", "1s"];
    let mut held = spawn_started(
        &mut Job::new(&proxy.url(), "cut").args(extra).line(&script),
        &dir.file("started"),
        LONG,
    );
    proxy.pause();
    let out = run_with_timeout(redlock(&server.url()).args(["force-release", "cut"]), LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.starts_with("revoked 'cut'"), "{out:?}");
    let started = dir.file("waiter");
    let out = run_with_timeout(
        &mut server
            .job("cut")
            .args(["--wait", "30s"])
            .line(format!("date +%s%N > '{}'", started.display())),
        LONG,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    let out = held.wait_timeout(LONG);
    assert_eq!(out.code, Some(70), "{out:?}");
    let last_beat: u128 = std::fs::read_to_string(&beats)
        .unwrap()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .max()
        .expect("the holder's job ran");
    let waiter: u128 = std::fs::read_to_string(&started)
        .unwrap()
        .trim()
        .parse()
        .expect("the waiter's start time");
    assert!(
        waiter > last_beat,
        "the waiter started {} ms before the cut-off holder's job stopped",
        (last_beat - waiter) / 1_000_000
    );
    proxy.resume();
}

/// The retry of an unanswered first attempt takes a fresh token: the
/// failed attempt's give-back, delivered late by a lossy link on a
/// connection the run had dropped, can never delete the lock the retry
/// took (fault campaign, `--seed 1201 --episode 39`: two holders at once).
/// The proxy turns the first connection away and holds back every
/// command of the second (the give-back) 2.5 s.
#[test]
fn a_late_give_back_of_an_unanswered_first_attempt_never_deletes_the_retrys_lock() {
    let server = RedisServer::start();
    // Cached, the give-back goes by its digest, and runs when it comes.
    server.cache_scripts();
    let proxy = Proxy::with_plan(server.port(), &["d", "l0:2500"]);
    let dir = TestDir::new();
    let started = dir.file("started");
    let mut held = spawn_piped(
        redlock(&proxy.url())
            .args(["-k", "late", "--ttl", "3s", "-v", "--"])
            .args([
                "sh",
                "-c",
                &format!("touch '{}'; sleep 5", started.display()),
            ]),
    );
    if !wait_for_file(&started, LONG) {
        held.signal(Signal::SIGKILL);
        panic!("the holder never started: {:?}", held.wait_timeout(LONG));
    }
    let token: String = redis::cmd("GET")
        .arg("redlock:{late}")
        .query(&mut server.conn())
        .expect("the lock is held");
    // The held-back give-back reaches Redis 2.5 s after it was sent.
    std::thread::sleep(Duration::from_secs(3));
    let now: Option<String> = redis::cmd("GET")
        .arg("redlock:{late}")
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(
        now.as_deref(),
        Some(token.as_str()),
        "the holder's lock went"
    );
    let out = run_with_timeout(
        redlock(&server.url()).args(["-n", "-k", "late", "--", "true"]),
        LONG,
    );
    assert_eq!(out.code, Some(75), "a second holder got in: {out:?}");
    let out = held.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stderr.contains("trying once more"), "{out:?}");
}

/// A release whose reply is lost (carried out by Redis, the answer never
/// came) is tried again, which finds the lock gone: that is our own
/// release, not an expiry, and is not reported as one (2,000 holders
/// releasing at once on two cores timed some replies out, and each said
/// "had already expired at release", which reads as a lease lost while
/// COMMAND ran).
#[test]
fn a_release_whose_reply_was_lost_is_not_reported_as_an_expired_lock() {
    let server = RedisServer::start();
    server.cache_scripts();
    // The first connection: the acquire's reply, then none.
    let proxy = Proxy::with_plan(server.port(), &["r1"]);
    let out = run_with_timeout(
        // 10 s: a per-node timeout of 1 s, so that the acquire's reply
        // comes in time on a loaded machine (its retry, on a connection
        // of its own, would get every reply).
        redlock(&proxy.url()).args(["-k", "lost-reply", "--ttl", "10s", "-v", "--", "true"]),
        LONG,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(!out.stderr.contains("expired"), "{out:?}");
    assert!(out.stderr.contains("reply was lost"), "{out:?}");
    assert!(
        !exists(&mut server.conn(), "redlock:{lost-reply}"),
        "the lock is still there: {out:?}"
    );
}

/// The same with a waiter: the lost reply's release went through, the
/// waiter took the lock at once, and the retry finds the waiter's token.
/// That is the hand-over, not "held by another token at release" (which
/// says COMMAND may have run unprotected): five nodes behind a 1 ms proxy
/// said it in the bench.
#[test]
fn a_release_whose_reply_was_lost_then_found_the_next_holder_is_no_warning() {
    let server = RedisServer::start();
    server.cache_scripts();
    let proxy = Proxy::with_plan(server.port(), &["r1"]);
    let dir = TestDir::new();
    let (first, second) = (Hold::named(&dir, "first"), Hold::named(&dir, "second"));
    let key = ["-k", "handed", "--ttl", "3s"];
    let mut holder = first.spawn(
        redlock(&proxy.url())
            .args(key)
            .args(["-v", "--", "sh", "-c", &first.script("")]),
        LONG,
    );
    let mut waiter = spawn_waiting(
        redlock(&server.url()).args(key).args([
            "--wait",
            "30s",
            "-v",
            "--",
            "sh",
            "-c",
            &second.script(""),
        ]),
        LONG,
    );
    first.go();
    assert!(
        wait_until(LONG, || second.started()),
        "{}",
        waiter.stderr_now()
    );
    let out = holder.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(!out.stderr.contains("another token"), "{out:?}");
    assert!(out.stderr.contains("reply was lost"), "{out:?}");
    second.go();
    assert_eq!(waiter.wait_timeout(LONG).code, Some(0));
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

/// A waiter that stood in for a holder lost with Redis's data never gives
/// its stand-in back: its next try, with the same token, takes the lock,
/// and a give-back that a lossy link delivered after that try deleted it
/// (chaos campaign, seed 20261206 episode 86, finding F8: two holders at
/// once). The proxy holds the waiter's first RELEASE back 3 s, past its
/// next try (the per-node timeout is 300 ms).
#[test]
fn a_stand_ins_late_give_back_never_deletes_the_lock_its_next_try_took() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let notes = dir.file("proxy");
    let late = Duration::from_secs(3);
    let proxy = Proxy::holding_back(server.port(), RELEASE_WORD, late, &notes);
    let pid = dir.file("pid");
    // It refreshes every 4 s: FLUSHALL goes unnoticed by it for seconds.
    let slow = ["--ttl", "5s", "--refresh", "4s", "--kill-after", "300ms"];
    let holding = format!("echo $$ > '{}'; sleep 20", pid.display());
    let mut holder = spawn_piped(&mut server.job("stand-in").args(slow).sh(&holding));
    read_pid(&dir, "pid", LONG);
    let waiting = Hold::named(&dir, "waiter");
    let mut waiter = spawn_waiting(
        &mut Job::new(&proxy.url(), "stand-in")
            .args(["--ttl", "3s", "-v"])
            .sh(waiting.script("")),
        LONG,
    );
    let _: () = redis::cmd("FLUSHALL").query(&mut server.conn()).unwrap();
    assert!(
        wait_until(LONG, || waiting.started()),
        "the waiter never ran: {}",
        waiter.stderr_now()
    );
    // A give-back it sent (the code before the fix did) reaches Redis now.
    let count = |what: &str| {
        let notes = dir.read("proxy").unwrap_or_default();
        notes.lines().filter(|l| *l == what).count()
    };
    assert!(
        wait_until(LONG, || count("delivered") == count("held")),
        "the held-back request never went"
    );
    let now: Option<String> = redis::cmd("GET")
        .arg("redlock:{stand-in}")
        .query(&mut server.conn())
        .unwrap();
    assert!(
        now.is_some(),
        "a late give-back deleted the lock under the waiter's job: {}",
        waiter.stderr_now()
    );
    let out = run_with_timeout(
        redlock(&server.url()).args(["-n", "-k", "stand-in", "--", "true"]),
        LONG,
    );
    assert_eq!(out.code, Some(75), "a second holder got in: {out:?}");
    waiting.go();
    let out = waiter.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stderr.contains("data in Redis was lost"), "{out:?}");
    let out = holder.wait_timeout(LONG);
    assert_eq!(out.code, Some(70), "the holder's lock vanished: {out:?}");
}

/// Text that only the RELEASE script sends (`scripts::RELEASE`).
const RELEASE_WORD: &str = "A Redlock holder's release";

/// F23 (the chaos campaign, seed 20261209 episode 822): a waiter's try
/// that took the lock after Redis lost its data, but whose answer was
/// lost (it timed out), started the fence counter anew; the waiter's next
/// try found the lock its own and was not told of the loss, so it ran at
/// once beside the old holder's job. The grant's record now says it
/// started the counter, and a try that finds the lock its own says so
/// again. Here the answer is lost by pausing writes (CLIENT PAUSE WRITE,
/// sent in one pipeline with the wake-up): the waiter's tries time out
/// and are carried out once the pause ends.
#[test]
fn a_waiter_whose_winning_answer_was_lost_still_waits_out_the_lost_holder() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let key = "lost-answer";
    let (mut holder, holder_pid) = holder_slow_to_notice(&server, &dir, key);
    let waiter = began_beside(holder_pid, &dir.file("log"));
    // A 300 ms per-node timeout (a tenth of the TTL).
    let mut waiter = spawn_waiting(
        &mut server.job(key).args(["--ttl", "3s", "-v"]).sh(&waiter),
        LONG,
    );
    // Its wake-up channel: its own in line, else (no line without
    // scripts) the lock's.
    let channel = match line_of(&server, key).first() {
        Some(token) => format!("redlock:{{{key}}}:wake:{token}"),
        None => format!("redlock:{{{key}}}"),
    };
    let _: () = redis::cmd("FLUSHALL").query(&mut server.conn()).unwrap();
    wake_with_writes_paused(&server, &channel);
    let out = holder.wait_timeout(LONG);
    assert_eq!(out.code, Some(70), "the holder's lock vanished: {out:?}");
    let out = waiter.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stderr.contains("timed out"),
        "the waiter's answer was not lost: {out:?}"
    );
    assert_eq!(dir.read("log").as_deref(), Some("alone\n"), "{out:?}");
    assert!(out.stderr.contains("data in Redis was lost"), "{out:?}");
}
