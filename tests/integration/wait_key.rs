//! `redlock-run wait KEY`: it returns once KEY is released (also when the
//! release hands the lock to a waiter in line) and not before, at once on
//! a free KEY, with the busy code at its timeout, 143 on SIGTERM; a holder
//! joining a semaphore's free slot is no release.

use std::process::Command;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::common::*;

const LONG: Duration = Duration::from_secs(30);

/// A holder of `key` that runs until `hold.go()`; returns once it runs.
fn holder(server: &RedisServer, hold: &Hold, key: &str) -> RunningChild {
    hold.spawn(&mut server.job(key).sh(hold.script("true")), LONG)
}

/// `wait KEY ...` against `server`, verbose (it says when it waits).
fn wait_cmd(server: &RedisServer, key: &str, extra: &[&str]) -> Command {
    let mut cmd = redlock(&server.url());
    cmd.args(["-v", "wait", key]).args(extra);
    cmd
}

#[test]
fn wait_returns_after_the_release_and_not_before() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let hold = Hold::new(&dir);
    let mut first = holder(&server, &hold, "migrate");
    let mut conn = server.conn();
    let token = get(&mut conn, "redlock:{migrate}").expect("holder's token");
    let mut waiting = spawn_waiting(&mut wait_cmd(&server, "migrate", &[]), LONG);
    // It listens for the release (the lock's channel and P{K}:free).
    assert!(
        wait_until(LONG, || clients_subscribed_to(&mut conn, 2) == 1),
        "wait did not subscribe"
    );
    assert!(
        !waiting.has_exited(),
        "wait returned while the lock was held"
    );
    hold.go();
    let out = waiting.wait_timeout(LONG);
    // Once it has returned, the holder's token is gone from Redis.
    assert_ne!(
        get(&mut conn, "redlock:{migrate}").as_deref(),
        Some(token.as_str())
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(first.wait_timeout(LONG).code, Some(0));
    // wait took nothing and left nothing but the fence counter.
    assert_eq!(dbsize(&mut conn), 1);
}

#[test]
fn wait_returns_when_a_release_hands_the_lock_to_a_waiter_in_line() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let (one, two) = (Hold::named(&dir, "one"), Hold::named(&dir, "two"));
    let mut first = holder(&server, &one, "deploy");
    let mut second = spawn_piped(&mut server.job("deploy").sh(two.script("true")));
    assert!(
        wait_until(LONG, || queued(&server, "deploy") == 1),
        "never queued"
    );
    let mut conn = server.conn();
    let mut waiting = spawn_waiting(&mut wait_cmd(&server, "deploy", &[]), LONG);
    let listeners = || {
        let (_, n): (String, i64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg("redlock:{deploy}:free")
            .query(&mut server.conn())
            .unwrap();
        n
    };
    assert!(
        wait_until(LONG, || listeners() == 1),
        "wait does not listen on P{{K}}:free"
    );
    // The release that wakes the waiter in line also says so on P{K}:free.
    let mut heard = server.conn();
    let mut pubsub = heard.as_pubsub();
    pubsub.subscribe("redlock:{deploy}:free").unwrap();
    pubsub.set_read_timeout(Some(LONG)).unwrap();
    // Stopped, wait looks again only once the waiter in line has the lock.
    waiting.signal(Signal::SIGSTOP);
    one.go();
    let message = pubsub.get_message().expect("a message on P{K}:free");
    assert_eq!(message.get_payload::<String>().unwrap(), "released");
    drop(pubsub);
    assert_eq!(first.wait_timeout(LONG).code, Some(0));
    assert!(wait_for_file(dir.file("two.started"), LONG));
    // The lock was given back in between: wait returns, though it is held.
    waiting.signal(Signal::SIGCONT);
    let out = waiting.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        exists(&mut conn, "redlock:{deploy}"),
        "the waiter lost the lock"
    );
    two.go();
    assert_eq!(second.wait_timeout(LONG).code, Some(0));
}

#[test]
fn wait_times_out_with_the_busy_code() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let hold = Hold::new(&dir);
    let mut first = holder(&server, &hold, "long");
    let out = run_with_timeout(&mut wait_cmd(&server, "long", &["--timeout", "1s"]), LONG);
    assert_eq!(out.code, Some(75), "{out:?}");
    assert!(out.stderr.contains("giving up"), "{out:?}");
    let out = run_with_timeout(
        &mut wait_cmd(&server, "long", &["--timeout", "0", "-E", "3"]),
        LONG,
    );
    assert_eq!(out.code, Some(3), "{out:?}");
    // Still the holder's, and nothing queued.
    assert_eq!(queued(&server, "long"), 0);
    hold.go();
    assert_eq!(first.wait_timeout(LONG).code, Some(0));
}

/// A second holder joining a semaphore's free slot releases nothing:
/// `wait` keeps waiting (busy at its timeout); a holder leaving is a
/// release, and it returns 0.
#[test]
fn wait_on_a_semaphore_ignores_a_holder_joining_a_free_slot() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let (one, two) = (Hold::named(&dir, "one"), Hold::named(&dir, "two"));
    let pool = |hold: &Hold| {
        server
            .job("pool")
            .args(["--limit", "2"])
            .sh(hold.script("true"))
    };
    let mut first = one.spawn(&mut pool(&one), LONG);
    let mut joined = spawn_waiting(&mut wait_cmd(&server, "pool", &["--timeout", "6s"]), LONG);
    let mut second = two.spawn(&mut pool(&two), LONG);
    let out = joined.wait_timeout(LONG);
    assert_eq!(out.code, Some(75), "nothing was released: {out:?}");
    let mut left = spawn_waiting(&mut wait_cmd(&server, "pool", &[]), LONG);
    one.go();
    assert_eq!(first.wait_timeout(LONG).code, Some(0));
    let out = left.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "a holder left: {out:?}");
    two.go();
    assert_eq!(second.wait_timeout(LONG).code, Some(0));
}

#[test]
fn wait_on_a_free_key_returns_at_once_and_bad_input_is_exit_2() {
    let server = RedisServer::start();
    let out = run_with_timeout(&mut wait_cmd(&server, "free", &[]), LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    for bad in [
        &["wait", ""][..],
        &["wait", "k", "--timeout", "5x"],
        &["wait"],
    ] {
        let out = run_with_timeout(redlock(&server.url()).args(bad), LONG);
        assert_eq!(out.code, Some(2), "{bad:?}: {out:?}");
        assert_eq!(
            out.stderr
                .lines()
                .filter(|l| l.starts_with("error"))
                .count(),
            1,
            "{out:?}"
        );
    }
    assert_eq!(dbsize(&mut server.conn()), 0);
    // Nothing listens on a free port: unavailable.
    let url = format!("redis://127.0.0.1:{}", free_port());
    let out = run_with_timeout(redlock(&url).args(["wait", "k"]), LONG);
    assert_eq!(out.code, Some(69), "{out:?}");
}

#[test]
fn sigterm_ends_wait_with_143() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let hold = Hold::new(&dir);
    let mut first = holder(&server, &hold, "term");
    let mut waiting = spawn_waiting(&mut wait_cmd(&server, "term", &[]), LONG);
    waiting.signal(Signal::SIGTERM);
    assert_eq!(waiting.wait_timeout(LONG).code, Some(143));
    hold.go();
    assert_eq!(first.wait_timeout(LONG).code, Some(0));
}

/// Out of file descriptors is a local failure, 71 as for a run, never
/// "Redis unavailable" (69) nor an internal error, whatever the limit.
#[test]
fn out_of_file_descriptors_is_exit_71_as_for_a_run() {
    if !have_tool("prlimit", "util-linux") {
        return;
    }
    let server = RedisServer::start();
    let mut local = 0;
    for n in 4..=16 {
        let mut cmd = Command::new("prlimit");
        cmd.arg(format!("--nofile={n}")).args([
            "--",
            bin(),
            "--redis",
            &server.url(),
            "wait",
            "free-key",
        ]);
        let out = run_with_timeout(&mut cmd, LONG);
        match out.code {
            Some(0) => {}
            Some(71) => {
                assert!(
                    out.stderr.contains("local failure"),
                    "--nofile={n}: {out:?}"
                );
                local += 1;
            }
            _ => panic!("--nofile={n}: {out:?}"),
        }
    }
    assert!(
        local > 0,
        "no limit made wait KEY run out of file descriptors"
    );
}
