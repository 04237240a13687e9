//! The line of waiters and the `--queue` policies: the line as `status`
//! and `list` show it, a free lock going to the first live waiter,
//! `newest-first` and `newest-wins`, and policies checked before anything
//! reaches Redis. `redlock-run wait KEY` is in `wait_key`.

use crate::common::*;

use std::process::Command;
use std::time::Duration;

use nix::sys::signal::Signal;

const LONG: Duration = Duration::from_secs(30);

/// A holder of `key` that runs until `hold.go()`; returns once it runs.
fn holder(server: &RedisServer, hold: &Hold, key: &str) -> RunningChild {
    hold.spawn(&mut server.job(key).sh(hold.script("true")), LONG)
}

#[test]
fn status_and_list_show_the_line_of_waiters() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let hold = Hold::new(&dir);
    let mut first = holder(&server, &hold, "line");
    let mut waiters = Vec::new();
    for n in 1..=3 {
        waiters.push(spawn_piped(&mut server.job("line").sh("true")));
        assert!(
            wait_until(LONG, || queued(&server, "line") == n),
            "waiter {n} never queued"
        );
    }
    let pids: Vec<i64> = waiters.iter().map(|w| i64::from(w.pid())).collect();

    let out = run_with_timeout(
        redlock(&server.url()).args(["status", "line", "--json"]),
        LONG,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    let v = &json_lines(&out)[0];
    assert_eq!(v["waiters_count"], 3, "{v}");
    let line = v["waiters"].as_array().expect("waiters is a list");
    let listed: Vec<(i64, i64)> = line
        .iter()
        .map(|w| (w["position"].as_i64().unwrap(), w["pid"].as_i64().unwrap()))
        .collect();
    assert_eq!(listed, [(1, pids[0]), (2, pids[1]), (3, pids[2])], "{v}");
    for w in line {
        assert_eq!(w["host"], hostname().as_str(), "{w}");
        let since = w["since"].as_str().expect("since is a string");
        humantime::parse_rfc3339(since).unwrap_or_else(|e| panic!("{since}: {e}"));
    }

    let out = run_with_timeout(redlock(&server.url()).args(["status", "line"]), LONG);
    let text: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(text.len(), 2, "{out:?}");
    let expected = format!("  3 waiting: 1) {} pid {} (", hostname(), pids[0]);
    assert!(text[1].starts_with(&expected), "{out:?}");
    assert!(
        text[1].contains(&format!("3) {} pid {}", hostname(), pids[2])),
        "{out:?}"
    );

    let out = run_with_timeout(redlock(&server.url()).args(["list", "--json"]), LONG);
    assert_eq!(json_lines(&out)[0]["waiters_count"], 3, "{out:?}");

    // A killed waiter leaves the line once its liveness key expires.
    waiters[1].signal(Signal::SIGKILL);
    let shown = || {
        let out = run_with_timeout(
            redlock(&server.url()).args(["status", "line", "--json"]),
            LONG,
        );
        let v = json_lines(&out).remove(0);
        let pids: Vec<Option<i64>> = v["waiters"]
            .as_array()
            .map(|l| l.iter().map(|w| w["pid"].as_i64()).collect())
            .unwrap_or_default();
        pids
    };
    assert!(
        wait_until(LONG, || shown() == [Some(pids[0]), Some(pids[2])]),
        "the killed waiter stayed in line: {:?}",
        shown()
    );
    let out = run_with_timeout(
        redlock(&server.url()).args(["status", "line", "--json"]),
        LONG,
    );
    let v = &json_lines(&out)[0];
    assert_eq!(v["waiters_count"], 2, "{v}");
    assert_eq!(v["waiters"].as_array().map(Vec::len), Some(2), "{v}");
    hold.go();
    assert_eq!(first.wait_timeout(LONG).code, Some(0));
    for (i, mut w) in waiters.into_iter().enumerate() {
        let out = w.wait_timeout(LONG);
        if i != 1 {
            assert_eq!(out.code, Some(0), "{out:?}");
        }
    }
    // Nobody waits: no waiters fields.
    let out = run_with_timeout(
        redlock(&server.url()).args(["status", "line", "--json"]),
        LONG,
    );
    let v = &json_lines(&out)[0];
    assert!(
        v.get("waiters").is_none() && v.get("waiters_count").is_none(),
        "{v}"
    );
}

#[test]
fn newest_first_serves_the_newest_waiter_first() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let hold = Hold::new(&dir);
    let mut first = holder(&server, &hold, "lifo");
    let order = dir.file("order");
    let mut waiters = Vec::new();
    for n in 1..=3 {
        let script = format!("echo {n} >> '{}'", order.display());
        let mut cmd = server
            .job("lifo")
            .args(["--queue", "newest-first"])
            .sh(script);
        waiters.push(spawn_piped(&mut cmd));
        assert!(
            wait_until(LONG, || queued(&server, "lifo") == n),
            "waiter {n} never queued"
        );
    }
    hold.go();
    assert_eq!(first.wait_timeout(LONG).code, Some(0));
    for mut w in waiters {
        assert_eq!(w.wait_timeout(LONG).code, Some(0));
    }
    let order = std::fs::read_to_string(&order).unwrap();
    assert_eq!(
        order.split_whitespace().collect::<Vec<_>>(),
        ["3", "2", "1"]
    );
    assert_eq!(dbsize(&mut server.conn()), 1, "only the fence is left");
}

#[test]
fn newest_wins_burst_of_20_runs_exactly_one() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let log = dir.file("sections");
    let hold = Hold::new(&dir);
    // The holder's own section is in the same log.
    let held = format!(
        "echo 'start H' >> '{log}'; {}",
        hold.script(&format!("echo 'end H' >> '{}'", log.display())),
        log = log.display()
    );
    let mut first = hold.spawn(&mut server.job("ci").sh(held), LONG);
    let mut burst: Vec<RunningChild> = (0..20)
        .map(|w| {
            let mut cmd = server
                .job("ci")
                .args(["--queue", "newest-wins"])
                .sh(section_script(&log, "0.2"));
            cmd.env("W", w.to_string());
            spawn_piped(&mut cmd)
        })
        .collect();
    // All but one leave at once, before the holder is done.
    assert!(
        wait_until(LONG, || burst
            .iter_mut()
            .filter_map(|w| w.has_exited().then_some(()))
            .count()
            == 19),
        "not 19 replaced waiters"
    );
    let mut running = None;
    for (i, w) in burst.iter_mut().enumerate() {
        if !w.has_exited() {
            running = Some(i);
            continue;
        }
        let out = w.wait_timeout(LONG);
        assert_eq!(out.code, Some(79), "{out:?}");
        // At most the line that says it waits, then why it left.
        let reason: Vec<&str> = out.stderr.lines().collect();
        assert!(reason.len() <= 2, "{out:?}");
        assert!(
            reason[..reason.len() - 1]
                .iter()
                .all(|l| l.contains("; waiting")),
            "{out:?}"
        );
        assert!(
            reason[reason.len() - 1].contains("replaced in line by a newer waiter"),
            "{out:?}"
        );
    }
    assert_eq!(queued(&server, "ci"), 1);
    hold.go();
    assert_eq!(first.wait_timeout(LONG).code, Some(0));
    let last = burst[running.expect("one waiter left")].wait_timeout(LONG);
    assert_eq!(last.code, Some(0), "{last:?}");
    // The holder, then exactly one of the burst; never two at once.
    assert_eq!(sections_in(&log), (2, 1));
    // Only the fence and the newest arrival (for waiters stopped past
    // their mark, see below) are left.
    let mut conn = server.conn();
    assert_eq!(dbsize(&mut conn), 2);
    assert!(exists(&mut conn, "redlock:{ci}:waiters:newest"));
}

/// A lock held by hand (no expiry), so that only the test frees it.
fn held_by_hand(server: &RedisServer, key: &str) {
    let _: () = redis::cmd("SET")
        .arg(format!("redlock:{{{key}}}"))
        .arg("by-hand")
        .query(&mut server.conn())
        .unwrap();
}

/// A newest-wins run that marks `ran` when its COMMAND runs.
fn newest_wins(server: &RedisServer, key: &str, ran: &std::path::Path) -> Command {
    server
        .job(key)
        .args(["-v", "--queue", "newest-wins"])
        .sh(format!("touch '{}'", ran.display()))
}

/// A newcomer that finds the lock free (the holder's lock was deleted, and
/// the waiter has not looked yet) takes it, and the older waiter is
/// replaced (79): it does not run after it.
#[test]
fn newest_wins_a_newcomer_taking_a_free_lock_replaces_the_waiters() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    held_by_hand(&server, "free");
    let (old_ran, new_ran) = (dir.file("old"), dir.file("new"));
    let mut old = spawn_waiting(&mut newest_wins(&server, "free", &old_ran), LONG);
    assert!(wait_until(LONG, || queued(&server, "free") == 1));
    let _: () = redis::cmd("DEL")
        .arg("redlock:{free}")
        .query(&mut server.conn())
        .unwrap();
    let out = run_with_timeout(&mut newest_wins(&server, "free", &new_ran), LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(new_ran.exists());
    let out = old.wait_timeout(LONG);
    assert_eq!(out.code, Some(79), "{out:?}");
    assert!(!old_ran.exists(), "the older run ran after the newer one");
}

/// A replaced waiter stopped past its mark's 60 s (a suspended runner;
/// the mark is deleted here, as it would have lapsed) does not come back
/// as a newcomer: it is the one replaced (79), named by the newer run,
/// and the newer run is served.
#[test]
fn newest_wins_a_waiter_stopped_past_its_mark_does_not_replace_the_newer_one() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    held_by_hand(&server, "stale");
    let (old_ran, new_ran) = (dir.file("old"), dir.file("new"));
    let mut old = spawn_waiting(&mut newest_wins(&server, "stale", &old_ran), LONG);
    assert!(wait_until(LONG, || queued(&server, "stale") == 1));
    let tokens: Vec<String> = redis::cmd("ZRANGE")
        .arg("redlock:{stale}:waiters")
        .arg(0)
        .arg(-1)
        .query(&mut server.conn())
        .unwrap();
    let old_token = tokens.first().expect("the old waiter in line").clone();
    old.signal(Signal::SIGSTOP);
    let mut new = spawn_waiting(&mut newest_wins(&server, "stale", &new_ran), LONG);
    let mark = format!("redlock:{{stale}}:waiters:{old_token}");
    assert!(wait_until(LONG, || hgetall(&mut server.conn(), &mark)
        .contains_key("replaced_by_pid")));
    let _: () = redis::cmd("DEL")
        .arg(&mark)
        .query(&mut server.conn())
        .unwrap();
    old.signal(Signal::SIGCONT);
    let out = old.wait_timeout(LONG);
    assert_eq!(out.code, Some(79), "{out:?}");
    assert!(
        out.stderr.contains(&format!("pid {}", new.pid())),
        "{out:?}"
    );
    assert!(!new.has_exited(), "the newer waiter was replaced");
    let _: () = redis::cmd("DEL")
        .arg("redlock:{stale}")
        .query(&mut server.conn())
        .unwrap();
    let out = new.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(new_ran.exists() && !old_ran.exists());
}

#[test]
fn queue_policies_are_checked_before_anything_reaches_redis() {
    let server = RedisServer::start();
    let other = RedisServer::start();
    let bad: [&[&str]; 3] = [
        &["--queue", "fastest"],
        &["--queue", "newest-wins", "--limit", "2"],
        &["--queue", "newest-first", "--redis", &other.url()],
    ];
    for args in bad {
        let out = run_with_timeout(&mut server.job("q").args(args).sh("true"), LONG);
        assert_eq!(out.code, Some(2), "{args:?}: {out:?}");
        assert!(out.stderr.contains("--queue"), "{out:?}");
    }
    let mut cmd = server.job("q").sh("true");
    cmd.env("REDLOCK_QUEUE", "newest-wins");
    assert_eq!(run_with_timeout(&mut cmd, LONG).code, Some(0));
    let mut cmd = server.job("q").sh("true");
    cmd.env("REDLOCK_QUEUE", "bogus");
    assert_eq!(run_with_timeout(&mut cmd, LONG).code, Some(2));
    assert_eq!(dbsize(&mut server.conn()), 1);
    assert_eq!(dbsize(&mut other.conn()), 0);
}

#[test]
fn a_free_lock_goes_to_the_first_live_waiter_not_to_whoever_looks_first() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let hold = Hold::new(&dir);
    let mut first = holder(&server, &hold, "order");
    let line = || -> Vec<String> {
        redis::cmd("ZRANGE")
            .arg("redlock:{order}:waiters")
            .arg(0)
            .arg(-1)
            .query(&mut server.conn())
            .unwrap()
    };
    // --ttl 3s: a waiter's liveness in line is six refresh periods, 6 s
    // (a minute with the defaults).
    let mut a = spawn_piped(&mut server.job("order").args(["--ttl", "3s"]).sh("true"));
    assert!(wait_until(LONG, || line().len() == 1), "a never queued");
    let b_ran = dir.file("b-ran");
    let mut b = spawn_piped(
        &mut server
            .job("order")
            .args(["--ttl", "3s"])
            .sh(format!("touch '{}'", b_ran.display())),
    );
    assert!(wait_until(LONG, || line().len() == 2), "b never queued");
    let a_token = line()[0].clone();
    // A stands first but cannot try; its liveness key still says it lives.
    a.signal(Signal::SIGSTOP);
    // Deleted by hand: every waiter hears of it, B as soon as A.
    let out = run_with_timeout(
        redlock(&server.url()).args(["force-release", "order", "--now"]),
        LONG,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    let mut conn = server.conn();
    let a_alive = format!("redlock:{{order}}:waiters:{a_token}");
    while exists(&mut conn, &a_alive) {
        assert!(!b_ran.exists(), "B jumped the line");
        std::thread::sleep(Duration::from_millis(10));
    }
    // A stopped waiter leaves the line: B goes on without it.
    a.signal(Signal::SIGCONT);
    assert_eq!(b.wait_timeout(LONG).code, Some(0));
    assert_eq!(a.wait_timeout(LONG).code, Some(0));
    // The holder's lock was deleted under it: stopped, exit 70.
    assert_eq!(first.wait_timeout(LONG).code, Some(70));
}

/// The live waiters' records of `key` (`P{K}:waiters:<token>`).
fn waiter_records(server: &RedisServer, key: &str) -> Vec<String> {
    let mut names: Vec<String> = redis::cmd("KEYS")
        .arg(format!("redlock:{{{key}}}:waiters:*"))
        .query(&mut server.conn())
        .unwrap();
    names.sort();
    names
}

/// `--queue-max 1`: the first waiter waits; a second leaves at once with
/// the busy code, saying why, and leaves nothing in Redis; the first is
/// served after the release.
#[test]
fn queue_max_turns_away_a_waiter_when_the_line_is_full() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let hold = Hold::new(&dir);
    let mut first = hold.spawn(
        &mut server
            .job("qmax")
            .args(["--ttl", "5s"])
            .sh(hold.script("true")),
        LONG,
    );
    let bounded = |ran: &std::path::Path| {
        server
            .job("qmax")
            .args(["--ttl", "5s", "--queue-max", "1"])
            .sh(format!("touch '{}'", ran.display()))
    };
    let (a_ran, b_ran) = (dir.file("a"), dir.file("b"));
    let mut a = spawn_piped(&mut bounded(&a_ran));
    assert!(wait_until(LONG, || queued(&server, "qmax") == 1));
    let records = waiter_records(&server, "qmax");
    assert_eq!(records.len(), 1, "{records:?}");
    let out = run_with_timeout(&mut bounded(&b_ran), LONG);
    assert_eq!(out.code, Some(75), "{out:?}");
    assert!(
        out.stderr.contains(
            "lock 'qmax' is busy and its line is full (1 waiting, --queue-max 1); not \
             waiting, exit 75"
        ),
        "{out:?}"
    );
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
    // `-E 0`: a full line is a quiet skip.
    let out = run_with_timeout(
        &mut server
            .job("qmax")
            .args(["--ttl", "5s", "--queue-max", "1", "-E", "0"])
            .sh(format!("touch '{}'", b_ran.display())),
        LONG,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stderr, "", "{out:?}");
    assert!(!b_ran.exists());
    assert_eq!(queued(&server, "qmax"), 1);
    assert_eq!(waiter_records(&server, "qmax"), records);
    assert!(!a.has_exited(), "the first waiter left");
    hold.go();
    assert_eq!(first.wait_timeout(LONG).code, Some(0));
    let out = a.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(a_ran.exists());
    assert_eq!(dbsize(&mut server.conn()), 1, "only the fence is left");
}

/// Under newest-wins a full line takes the newcomer: the older waiter is
/// replaced (79), and the newcomer is served.
#[test]
fn queue_max_under_newest_wins_replaces_the_waiter() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let hold = Hold::new(&dir);
    let mut first = hold.spawn(
        &mut server
            .job("qmaxw")
            .args(["--ttl", "5s"])
            .sh(hold.script("true")),
        LONG,
    );
    let bounded = |ran: &std::path::Path| {
        server
            .job("qmaxw")
            .args(["--ttl", "5s", "--queue-max", "1", "--queue", "newest-wins"])
            .sh(format!("touch '{}'", ran.display()))
    };
    let (old_ran, new_ran) = (dir.file("old"), dir.file("new"));
    let mut old = spawn_piped(&mut bounded(&old_ran));
    assert!(wait_until(LONG, || queued(&server, "qmaxw") == 1));
    let mut new = spawn_piped(&mut bounded(&new_ran));
    let out = old.wait_timeout(LONG);
    assert_eq!(out.code, Some(79), "{out:?}");
    assert!(out.stderr.contains("replaced in line"), "{out:?}");
    assert_eq!(queued(&server, "qmaxw"), 1);
    hold.go();
    assert_eq!(first.wait_timeout(LONG).code, Some(0));
    let out = new.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(new_ran.exists() && !old_ran.exists());
}

#[test]
fn queue_max_is_checked_before_anything_reaches_redis() {
    let server = RedisServer::start();
    let other = RedisServer::start();
    let bad: [&[&str]; 6] = [
        &["--queue-max", "0"],
        &["--queue-max", "junk"],
        &["--queue-max", "10001"],
        &["--queue-max", "-1"],
        &["--queue-max", "2", "--limit", "2"],
        &["--queue-max", "2", "--redis", &other.url()],
    ];
    for args in bad {
        let out = run_with_timeout(&mut server.job("qm").args(args).sh("true"), LONG);
        assert_eq!(out.code, Some(2), "{args:?}: {out:?}");
        assert!(out.stderr.contains("--queue-max"), "{args:?}: {out:?}");
    }
    for value in ["0", "junk", "10001"] {
        let mut cmd = server.job("qm").sh("true");
        cmd.env("REDLOCK_QUEUE_MAX", value);
        let out = run_with_timeout(&mut cmd, LONG);
        assert_eq!(out.code, Some(2), "{value}: {out:?}");
        assert!(out.stderr.contains("REDLOCK_QUEUE_MAX"), "{out:?}");
        assert!(out.stderr.contains("--queue-max"), "{out:?}");
    }
    assert_eq!(dbsize(&mut server.conn()), 0);
    assert_eq!(dbsize(&mut other.conn()), 0);
    let mut cmd = server.job("qm").sh("true");
    cmd.env("REDLOCK_QUEUE_MAX", "3");
    assert_eq!(run_with_timeout(&mut cmd, LONG).code, Some(0));
}

/// A waiter that takes a lock its holder left without a release (killed,
/// or `--min-hold`) tells the next waiter in line that it is now first,
/// as a release does: else that one, not knowing, would not watch the new
/// holder's lease and would learn of its end only at its slow pace, 5 to
/// 10 s later (chaos campaign, seed 20261206 episode 319, finding F7).
#[test]
fn a_waiter_taking_a_lock_left_without_release_tells_the_next_in_line() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let key = ["--ttl", "2s"];
    let hold = Hold::named(&dir, "holder");
    let mut holder = hold.spawn(&mut server.job("told").args(key).sh(hold.script("")), LONG);
    let line = || -> Vec<String> {
        redis::cmd("ZRANGE")
            .arg("redlock:{told}:waiters")
            .arg(0)
            .arg(-1)
            .query(&mut server.conn())
            .unwrap()
    };
    let first = Hold::named(&dir, "first");
    let mut one = spawn_piped(&mut server.job("told").args(key).sh(first.script("")));
    assert!(
        wait_until(LONG, || line().len() == 1),
        "the first never queued"
    );
    let mut two = spawn_piped(&mut server.job("told").args(key).sh("true"));
    assert!(
        wait_until(LONG, || line().len() == 2),
        "the second never queued"
    );
    let second = line()[1].clone();
    let mut heard = server.conn();
    let mut pubsub = heard.as_pubsub();
    pubsub
        .subscribe(format!("redlock:{{told}}:wake:{second}"))
        .unwrap();
    pubsub.set_read_timeout(Some(LONG)).unwrap();
    // Gone without a release: its lock lasts out its TTL, and the first
    // in line takes it by a try of its own.
    holder.signal(Signal::SIGKILL);
    assert!(
        wait_until(LONG, || first.started()),
        "the first waiter never ran: {}",
        one.stderr_now()
    );
    let message = pubsub.get_message().expect("the second was never told");
    assert_eq!(message.get_payload::<String>().unwrap(), "next");
    drop(pubsub);
    first.go();
    assert_eq!(one.wait_timeout(LONG).code, Some(0));
    assert_eq!(two.wait_timeout(LONG).code, Some(0));
    assert_eq!(holder.wait_timeout(LONG).code, None, "SIGKILLed");
}
