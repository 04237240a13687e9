//! A server that trickles its reply, a byte at a time and each byte
//! sooner than any per-read timeout, holds nothing forever: not the
//! acquire, not the release after COMMAND, not the give-back of a waiter
//! stopped by SIGTERM, not a subcommand. Each exchange has one deadline.

use std::time::{Duration, Instant};

use crate::common::*;
use nix::sys::signal::Signal;

/// Far longer than any bounded exchange here, far shorter than forever.
const BOUND: Duration = Duration::from_secs(20);
const LONG: Duration = Duration::from_secs(60);
/// Each byte 50 ms after the last: well within the per-node timeout
/// (1 s at the default TTL, 2 s for subcommands).
const GAP: Duration = Duration::from_millis(50);

#[test]
fn a_trickling_server_cannot_hold_the_acquire() {
    let server = RedisServer::start();
    let proxy = Proxy::trickling(server.port(), GAP, false);
    let started = Instant::now();
    let out = run_with_timeout(&mut Job::new(&proxy.url(), "acquire").exec(["true"]), LONG);
    let took = started.elapsed();
    assert_eq!(out.code, Some(69), "{out:?}");
    assert!(out.stderr.contains("timed out"), "{out:?}");
    assert!(took < BOUND, "took {took:?}: {out:?}");
}

#[test]
fn a_trickling_server_cannot_hold_the_release() {
    let server = RedisServer::start();
    let mut proxy = Proxy::trickling(server.port(), GAP, true);
    let dir = TestDir::new();
    let hold = Hold::new(&dir);
    let mut run = hold.spawn(
        &mut Job::new(&proxy.url(), "release")
            .args(["-v"])
            .sh(hold.script("exit 3")),
        LONG,
    );
    proxy.start_trickling();
    let started = Instant::now();
    hold.go();
    let out = run.wait_timeout(LONG);
    let took = started.elapsed();
    assert_eq!(out.code, Some(3), "COMMAND's code: {out:?}");
    assert!(out.stderr.contains("timed out"), "{out:?}");
    assert!(took < BOUND, "took {took:?}: {out:?}");
}

#[test]
fn a_trickling_server_cannot_hold_the_give_back_of_a_signalled_waiter() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let _: () = redis::cmd("SET")
        .arg("redlock:{given}")
        .arg("someone-else")
        .arg("PX")
        .arg(120_000)
        .query(&mut conn)
        .unwrap();
    let mut proxy = Proxy::trickling(server.port(), GAP, true);
    let mut waiter = spawn_waiting(
        &mut Job::new(&proxy.url(), "given").args(["-v"]).exec(["true"]),
        LONG,
    );
    proxy.start_trickling();
    let started = Instant::now();
    waiter.signal(Signal::SIGTERM);
    let out = waiter.wait_timeout(LONG);
    let took = started.elapsed();
    assert_eq!(out.code, Some(143), "{out:?}");
    assert!(took < BOUND, "took {took:?}: {out:?}");
}

#[test]
fn a_trickling_server_cannot_hold_a_subcommand() {
    let server = RedisServer::start();
    let proxy = Proxy::trickling(server.port(), GAP, false);
    for args in [
        vec!["status", "sub"],
        vec!["wait", "sub", "--timeout", "1h"],
        vec!["force-release", "sub"],
    ] {
        let started = Instant::now();
        let out = run_with_timeout(redlock(&proxy.url()).args(&args), LONG);
        let took = started.elapsed();
        assert_eq!(out.code, Some(69), "{args:?}: {out:?}");
        assert!(took < BOUND, "{args:?} took {took:?}: {out:?}");
    }
    let started = Instant::now();
    let out = run_with_timeout(redlock(&proxy.url()).args(["doctor"]), LONG);
    let took = started.elapsed();
    assert_eq!(out.code, Some(78), "doctor: {out:?}");
    assert!(took < BOUND, "doctor took {took:?}: {out:?}");
}

/// A Redlock holder with a short TTL whose one node of three trickles
/// keeps its lock on the other two. Each round waits out the slow node's
/// timeout (100 ms, a sixth of this TTL); before the fix a refresh sent a
/// third of the TTL after the last one was confirmed after the moment
/// COMMAND must get SIGTERM, and the run exited 70 within 0.5 s (the
/// chaos campaign, seed 20261208 episode 197, F20).
#[test]
fn a_trickling_minority_costs_a_short_lease_nothing() {
    let servers = RedisServer::many(3);
    let proxy = Proxy::trickling(servers[2].port(), Duration::from_millis(33), false);
    let urls = [servers[0].url(), servers[1].url(), proxy.url()];
    let out = run_with_timeout(
        redlock_on(&urls).args(["--ttl", "600ms", "-k", "t", "--", "sleep", "1.5"]),
        LONG,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
}
