//! Waiting for a busy lock: wake-up on release, on the holder's expiry,
//! signals while waiting, `--wait` running out, and the load on Redis.

use crate::common::*;

use std::time::Duration;

use nix::sys::signal::Signal;

const LONG: Duration = Duration::from_secs(30);

/// A holder that runs until `Hold::new(dir).go()`, logging its section
/// to `log` in `dir`; returns once it has started.
fn holder(server: &RedisServer, dir: &TestDir, key: &str, ttl: &str) -> RunningChild {
    let hold = Hold::new(dir);
    let log = dir.file("log");
    let script = format!(
        "echo holder-start >> '{}'; {}",
        log.display(),
        hold.script(&format!("echo holder-end >> '{}'", log.display()))
    );
    hold.spawn(&mut server.job(key).args(["--ttl", ttl]).sh(script), LONG)
}

/// A verbose waiter that logs "waiter" to `log` and marks `ran`.
fn waiter(server: &RedisServer, dir: &TestDir, key: &str, extra: &[&str]) -> RunningChild {
    let script = format!(
        "echo waiter >> {log}; touch {ran}",
        log = dir.file("log").display(),
        ran = dir.file("ran").display(),
    );
    let mut cmd = server.job(key).args(["-v"]).args(extra).sh(script);
    spawn_waiting(&mut cmd, LONG)
}

/// Subscribers of a channel (the lock key is its release channel).
fn subscribers(conn: &mut redis::Connection, channel: &str) -> i64 {
    let reply: (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query(conn)
        .expect("PUBSUB NUMSUB");
    reply.1
}

#[test]
fn waiter_runs_after_the_holder_releases() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut conn = server.conn();
    let mut first = holder(&server, &dir, "handover", "30s");
    let mut second = waiter(&server, &dir, "handover", &[]);
    // Waiting means listening for the release, not only polling.
    assert!(
        wait_until(LONG, || clients_subscribed_to(&mut conn, 2) == 1),
        "the waiter did not subscribe to the lock's channel"
    );
    assert!(
        dir.read("ran").is_none(),
        "waiter ran while the lock was held"
    );

    Hold::new(&dir).go();
    let first = first.wait_timeout(LONG);
    let second = second.wait_timeout(LONG);
    assert_eq!(first.code, Some(0), "holder: {}", first.stderr);
    assert_eq!(second.code, Some(0), "waiter: {}", second.stderr);
    assert_eq!(
        dir.read("log").as_deref(),
        Some("holder-start\nholder-end\nwaiter\n")
    );
    assert!(!exists(&mut conn, "redlock:{handover}"));
    assert_eq!(subscribers(&mut conn, "redlock:{handover}"), 0);
}

#[test]
fn waiter_gets_the_lock_of_a_killed_holder_after_its_ttl() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut conn = server.conn();
    // Killed with SIGKILL: no release, so no message; only the TTL frees it.
    let first = holder(&server, &dir, "killed", "2s");
    let mut second = waiter(&server, &dir, "killed", &[]);
    first.signal(Signal::SIGKILL);

    let second = second.wait_timeout(LONG);
    assert_eq!(second.code, Some(0), "waiter: {}", second.stderr);
    assert_eq!(
        dir.read("log").as_deref(),
        Some("holder-start\nwaiter\n"),
        "the killed holder's section must not finish"
    );
    assert!(!exists(&mut conn, "redlock:{killed}"));
}

#[test]
fn sigterm_while_waiting_exits_143_and_leaves_nothing() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut conn = server.conn();
    let mut first = holder(&server, &dir, "term", "30s");
    let token = get(&mut conn, "redlock:{term}").expect("holder's token");
    // The holder itself listens on its lock's channel.
    assert!(wait_until(LONG, || subscribers(
        &mut conn,
        "redlock:{term}"
    ) == 1));
    let mut second = waiter(&server, &dir, "term", &[]);

    second.signal(Signal::SIGTERM);
    let out = second.wait_timeout(Duration::from_secs(10));
    assert_eq!(out.code, Some(143), "waiter: {}", out.stderr);
    assert!(dir.read("ran").is_none(), "COMMAND ran after SIGTERM");
    // Only the holder's lock, record and fence; no subscription left.
    assert_eq!(get(&mut conn, "redlock:{term}"), Some(token));
    assert_eq!(dbsize(&mut conn), 3);
    assert!(wait_until(LONG, || subscribers(
        &mut conn,
        "redlock:{term}"
    ) == 1));

    Hold::new(&dir).go();
    assert_eq!(first.wait_timeout(LONG).code, Some(0));
}

#[test]
fn wait_runs_out_with_exit_75() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut first = holder(&server, &dir, "busy", "30s");
    let mut cmd = redlock(&server.url());
    cmd.args(["--key", "busy", "--wait", "1s", "--", "touch"])
        .arg(dir.file("ran"));
    let out = run_with_timeout(&mut cmd, LONG);
    assert_eq!(out.code, Some(75), "stderr: {}", out.stderr);
    assert!(out.stderr.contains("busy"), "stderr: {}", out.stderr);
    assert!(dir.read("ran").is_none());

    Hold::new(&dir).go();
    assert_eq!(first.wait_timeout(LONG).code, Some(0));
}

#[test]
fn waiting_does_not_hammer_redis() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut conn = server.conn();
    // A TTL long enough that the holder does not refresh during the wait.
    let mut first = holder(&server, &dir, "quiet", "2m");
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .exec(&mut conn)
        .expect("CONFIG RESETSTAT");
    let mut cmd = redlock(&server.url());
    cmd.args(["--key", "quiet", "--wait", "3s", "--", "true"]);
    let out = run_with_timeout(&mut cmd, LONG);
    assert_eq!(out.code, Some(75), "stderr: {}", out.stderr);
    // Polling every 100 ms would be about 30 tries; a subscribed waiter
    // tries on arrival, after subscribing, and on a slow fallback timer.
    let tries = server.script_calls();
    assert!(tries <= 15, "{tries} EVALs in 3 s of waiting");

    Hold::new(&dir).go();
    assert_eq!(first.wait_timeout(LONG).code, Some(0));
}

#[test]
fn waiters_get_the_lock_in_order_of_arrival() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut first = holder(&server, &dir, "fifo", "30s");
    let log = dir.file("order");
    let mut waiters = Vec::new();
    for n in 1..=5 {
        let script = format!("echo {n} >> '{}'; sleep 0.05", log.display());
        let mut cmd = redlock(&server.url());
        cmd.args(["-k", "fifo", "--", "sh", "-c", &script]);
        waiters.push(spawn_piped(&mut cmd));
        // The next one arrives only once this one stands in line.
        assert!(
            wait_until(LONG, || queued(&server, "fifo") == n),
            "waiter {n} never queued"
        );
    }
    Hold::new(&dir).go();
    assert_eq!(first.wait_timeout(LONG).code, Some(0));
    for mut w in waiters {
        let out = w.wait_timeout(LONG);
        assert_eq!(out.code, Some(0), "{out:?}");
    }
    let order = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        order.split_whitespace().collect::<Vec<_>>(),
        ["1", "2", "3", "4", "5"]
    );
    // Nothing of the line is left behind, only the fence counter.
    assert_eq!(dbsize(&mut server.conn()), 1);
}

#[test]
fn a_waiter_that_gives_up_leaves_the_line() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut first = holder(&server, &dir, "leave", "30s");
    let mut cmd = redlock(&server.url());
    cmd.args(["-k", "leave", "--wait", "1s", "--", "true"]);
    let mut patient = spawn_piped(&mut cmd);
    assert!(
        wait_until(LONG, || queued(&server, "leave") == 1),
        "never queued"
    );
    assert_eq!(patient.wait_timeout(LONG).code, Some(75));
    assert_eq!(queued(&server, "leave"), 0, "still in line after giving up");
    let alive: Vec<String> = redis::cmd("KEYS")
        .arg("redlock:{leave}:waiters:*")
        .query(&mut server.conn())
        .unwrap();
    assert!(alive.is_empty(), "{alive:?}");
    Hold::new(&dir).go();
    assert_eq!(first.wait_timeout(LONG).code, Some(0));
}

#[test]
fn a_dead_waiter_first_in_line_does_not_stall_the_next() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut first = holder(&server, &dir, "dead", "30s");
    let mut doomed = spawn_piped(redlock(&server.url()).args(["-k", "dead", "--", "true"]));
    assert!(wait_until(LONG, || queued(&server, "dead") == 1));
    let mut next = spawn_piped(redlock(&server.url()).args(["-k", "dead", "--", "echo", "next"]));
    assert!(wait_until(LONG, || queued(&server, "dead") == 2));
    doomed.signal(Signal::SIGKILL);
    doomed.wait_timeout(LONG);
    Hold::new(&dir).go();
    assert_eq!(first.wait_timeout(LONG).code, Some(0));
    // The killed waiter's subscription closed with it: the release skips
    // it and wakes the next.
    let out = next.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stdout.trim(), "next");
}

/// Waiters in line, once queued and subscribed.
fn queue_up(server: &RedisServer, dir: &TestDir, key: &str, n: usize) -> Vec<RunningChild> {
    let log = dir.file("order");
    let mut conn = server.conn();
    let mut waiters = Vec::new();
    for i in 1..=n {
        let script = format!("echo {i} >> '{}'", log.display());
        waiters.push(spawn_piped(&mut server.job(key).sh(script)));
        assert!(
            wait_until(LONG, || queued(server, key) == i as i64
                && clients_subscribed_to(&mut conn, 2) == i),
            "waiter {i} never queued"
        );
    }
    waiters
}

#[test]
fn waiters_in_line_cost_redis_nothing_while_the_holder_lives() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut conn = server.conn();
    let mut first = holder(&server, &dir, "free", "2m");
    let waiters = queue_up(&server, &dir, "free", 5);
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .exec(&mut conn)
        .expect("CONFIG RESETSTAT");
    // A window of waiting, not a state: retrying every 0.5-1 s, five
    // waiters would try 20-40 times in it.
    std::thread::sleep(Duration::from_secs(4));
    let tries = server.script_calls();
    assert!(tries <= 2, "{tries} EVALs in 4 s of five waiters waiting");
    // Still in line, in order, and woken by the release.
    Hold::new(&dir).go();
    assert_eq!(first.wait_timeout(LONG).code, Some(0));
    for mut w in waiters {
        let out = w.wait_timeout(LONG);
        assert_eq!(out.code, Some(0), "{out:?}");
    }
    let order = dir.read("order").unwrap_or_default();
    assert_eq!(
        order.split_whitespace().collect::<Vec<_>>(),
        ["1", "2", "3", "4", "5"]
    );
}

#[test]
fn a_waiter_whose_subscription_was_killed_subscribes_again() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut conn = server.conn();
    let mut first = holder(&server, &dir, "resub", "2m");
    let mut waiters = queue_up(&server, &dir, "resub", 1);
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query(&mut conn)
        .expect("CLIENT KILL");
    assert!(killed >= 1, "no subscription was killed");
    // It subscribes again (its wake channel and the lock's).
    assert!(
        wait_until(LONG, || clients_subscribed_to(&mut conn, 2) == 1),
        "the waiter did not subscribe again"
    );
    Hold::new(&dir).go();
    assert_eq!(first.wait_timeout(LONG).code, Some(0));
    let out = waiters.remove(0).wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
}

#[test]
fn the_second_in_line_gets_the_lock_of_a_killed_holder_after_its_ttl() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut first = holder(&server, &dir, "chain", "30s");
    // A takes the lock from the line, then dies holding it (no release);
    // B, second in line, never hears a release.
    let a_hold = Hold::named(&dir, "a");
    let mut a = spawn_piped(
        &mut server
            .job("chain")
            .args(["--ttl", "2s"])
            .sh(a_hold.script("true")),
    );
    assert!(
        wait_until(LONG, || queued(&server, "chain") == 1),
        "A never queued"
    );
    let mut waiters = queue_up_after(&server, &dir, "chain", 2);
    Hold::new(&dir).go();
    assert_eq!(first.wait_timeout(LONG).code, Some(0));
    assert!(wait_until(LONG, || a_hold.started()), "A never ran");
    a.signal(Signal::SIGKILL);
    a.wait_timeout(LONG);
    let out = waiters.remove(0).wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(dir.read("order").as_deref(), Some("2\n"));
    a_hold.go();
}

/// One more waiter that logs `i` to "order", once the line holds `i`.
fn queue_up_after(server: &RedisServer, dir: &TestDir, key: &str, i: usize) -> Vec<RunningChild> {
    let script = format!("echo {i} >> '{}'", dir.file("order").display());
    let waiter = spawn_piped(&mut server.job(key).sh(script));
    assert!(
        wait_until(LONG, || queued(server, key) == i as i64),
        "waiter {i} never queued"
    );
    vec![waiter]
}

/// Issue 36, item 9: a run that waits says so once (who holds the lock,
/// for how long, where it stands in line) and again every `--progress`,
/// without -v; -q says nothing.
#[test]
fn a_waiting_run_says_so_and_again_at_a_low_rate_unless_quiet() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let hold = Hold::new(&dir);
    let mut holder = hold.spawn(
        &mut server
            .job("deploy")
            .args(["--label", "deploy #7"])
            .sh(hold.script("")),
        LONG,
    );
    let said = |run: &RunningChild, what: &str| {
        wait_until(LONG, || run.stderr_now().contains(what));
        run.stderr_now()
    };
    let mut first = spawn_piped(
        &mut server
            .job("deploy")
            .args(["--progress", "1s"])
            .exec(["true"]),
    );
    let text = said(&first, "; waiting");
    let who = format!(
        "redlock-run: lock 'deploy' is held by {} pid {} (",
        hostname(),
        holder.pid()
    );
    assert!(text.starts_with(&who), "{text}");
    assert!(
        text.contains(") [deploy #7] for ") && text.contains(", expires in "),
        "{text}"
    );
    assert!(text.ends_with("; waiting (first in line)\n"), "{text}");

    let mut quiet = spawn_piped(&mut server.job("deploy").args(["-q"]).exec(["true"]));
    let mut conn = server.conn();
    let waiting = |conn: &mut redis::Connection| -> i64 {
        redis::cmd("ZCARD")
            .arg("redlock:{deploy}:waiters")
            .query(conn)
            .unwrap_or(0)
    };
    assert!(
        wait_until(LONG, || waiting(&mut conn) == 2),
        "-q never waited"
    );
    let mut json = spawn_piped(
        &mut server
            .job("deploy")
            .args(["--log-format", "json", "--progress", "0"])
            .exec(["true"]),
    );
    let events = said(&json, "\"waiting\"");
    let event: serde_json::Value =
        serde_json::from_str(events.lines().next().expect("a line")).expect("JSON");
    assert_eq!(event["event"], "waiting", "{events}");
    assert_eq!(event["level"], "info", "{events}");
    assert_eq!(event["in_line"], 3, "{events}");
    assert_eq!(event["label"], "deploy #7", "{events}");
    assert!(
        event["msg"]
            .as_str()
            .is_some_and(|m| m.ends_with("; waiting (3 in line, this run included)")),
        "{events}"
    );

    // Every --progress: one short line, with the line as it stands now.
    let text = said(&first, "still waiting");
    let still = text.lines().nth(1).expect("a second line");
    assert!(still.starts_with(&who), "{text}");
    assert!(still.contains("; still waiting ("), "{text}");
    assert!(still.ends_with(" so far, 3 in line)"), "{text}");
    hold.go();
    assert_eq!(holder.wait_timeout(LONG).code, Some(0));
    let out = first.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    // Said at a low rate: about once a second here, never in a burst.
    let lines = out.stderr.lines().count();
    assert!(lines >= 2, "{out:?}");
    let out = quiet.wait_timeout(LONG);
    assert_eq!((out.code, out.stderr.as_str()), (Some(0), ""), "{out:?}");
    let out = json.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        !out.stderr.contains("still_waiting"),
        "--progress 0: {out:?}"
    );
}

/// `wait KEY` says once, without -v, that it waits and for whom; -q says
/// nothing.
#[test]
fn wait_key_says_once_that_it_waits_unless_quiet() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut held = holder(&server, &dir, "migrate", "30s");
    let mut said = spawn_piped(redlock(&server.url()).args(["wait", "migrate"]));
    let mut quiet = spawn_piped(redlock(&server.url()).args(["wait", "migrate", "-q"]));
    assert!(
        wait_until(LONG, || said
            .stderr_now()
            .contains("; waiting until it is free")),
        "{}",
        said.stderr_now()
    );
    Hold::new(&dir).go();
    assert_eq!(held.wait_timeout(LONG).code, Some(0));
    let out = said.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
    assert!(
        out.stderr
            .starts_with("redlock-run: lock 'migrate' is held by "),
        "{out:?}"
    );
    let out = quiet.wait_timeout(LONG);
    assert_eq!((out.code, out.stderr.as_str()), (Some(0), ""), "{out:?}");
}
