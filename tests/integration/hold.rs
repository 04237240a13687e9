//! `hold KEY --for DURATION --reason TEXT` and `release KEY`: a lock with
//! no command, its reason shown by status, list and the runs it keeps
//! out, its end by itself or by `release`.

use crate::common::*;

use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const T: Duration = Duration::from_secs(20);

fn run(cmd: &mut Command) -> Output {
    run_with_timeout(cmd, T)
}

/// `hold KEY --for FOR --reason REASON [EXTRA...]` on `base`.
fn hold(mut base: Command, key: &str, for_: &str, reason: &str, extra: &[&str]) -> Output {
    run(base
        .args(["hold", key, "--for", for_, "--reason", reason])
        .args(extra))
}

fn now_ms() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    u64::try_from(since.as_millis()).unwrap()
}

#[test]
fn a_hold_is_taken_shown_with_its_reason_and_released_early() {
    let server = RedisServer::start();
    let url = server.url();
    let mut conn = server.conn();
    let before = now_ms();
    let out = hold(
        redlock(&url),
        "deploy",
        "60s",
        "INC-7: freeze",
        &["--label", "INC-7"],
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    let token = out.stdout.trim().to_string();
    assert_eq!(token.len(), 36, "the token alone on stdout: {out:?}");
    assert_eq!(
        get(&mut conn, "redlock:{deploy}").as_deref(),
        Some(token.as_str())
    );
    let left = pttl(&mut conn, "redlock:{deploy}");
    assert!(left > 50_000 && left <= 60_000, "{left}");

    // Busy for another hold and for a run: both say why.
    let again = hold(redlock(&url), "deploy", "1m", "other", &[]);
    assert_eq!(again.code, Some(75), "{again:?}");
    assert!(
        again.stderr.contains("on hold (INC-7: freeze)"),
        "{again:?}"
    );
    let busy = run(&mut Job::new(&url, "deploy").args(["-n"]).exec(["true"]));
    assert_eq!(busy.code, Some(75), "{busy:?}");
    assert!(
        busy.stderr.contains("is on hold (INC-7: freeze) by ") && busy.stderr.contains("[INC-7]"),
        "{busy:?}"
    );

    let busy = run(&mut Job::new(&url, "deploy")
        .args(["-n", "--log-format", "json"])
        .exec(["true"]));
    let event: serde_json::Value = serde_json::from_str(busy.stderr.trim()).expect("one event");
    assert_eq!(
        (&event["event"], &event["hold_reason"], &event["label"]),
        (&"busy".into(), &"INC-7: freeze".into(), &"INC-7".into()),
        "{busy:?}"
    );

    let status = run(redlock(&url).args(["status", "deploy"]));
    assert_eq!(status.code, Some(0), "{status:?}");
    assert!(
        status
            .stdout
            .starts_with("deploy  on hold (INC-7: freeze) until ")
            && status.stdout.contains(&format!(" by {} pid ", hostname()))
            && status.stdout.contains("[INC-7]"),
        "{status:?}"
    );
    let json = run(redlock(&url).args(["status", "deploy", "--json"]));
    let seen = &json_lines(&json)[0];
    assert_eq!(seen["hold"]["reason"], "INC-7: freeze", "{seen}");
    assert_eq!(seen["label"], "INC-7", "{seen}");
    assert_eq!(seen["token"], token.as_str(), "{seen}");
    let until = seen["hold"]["until_ms"].as_u64().expect("until_ms");
    assert!(
        until >= before + 59_000 && until <= now_ms() + 61_000,
        "{seen}"
    );
    let list = run(redlock(&url).args(["list"]));
    assert!(
        list.stdout.contains("on hold") && list.stdout.contains("(hold) INC-7: freeze"),
        "{list:?}"
    );

    let out = run(redlock(&url).args(["release", "deploy"]));
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stdout.starts_with("released the hold on 'deploy'"),
        "{out:?}"
    );
    assert!(!exists(&mut conn, "redlock:{deploy}"));
    assert!(!exists(&mut conn, "redlock:{deploy}:holder"));
    let out = run(redlock(&url).args(["release", "deploy"]));
    assert_eq!(out.code, Some(1), "{out:?}");
    let ran = run(&mut Job::new(&url, "deploy").args(["-n"]).exec(["true"]));
    assert_eq!(ran.code, Some(0), "{ran:?}");
}

#[test]
fn a_hold_expires_by_itself_and_a_waiting_run_waits_it_out() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = TestDir::new();
    let out = hold(redlock(&url), "window", "3s", "maintenance", &[]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let marker = dir.file("ran");
    let mut waiter = spawn_waiting(
        &mut Job::new(&url, "window").exec([std::ffi::OsStr::new("touch"), marker.as_os_str()]),
        T,
    );
    // It said why it waits, and waits: KEY is still held.
    assert!(
        waiter.stderr_now().contains("is on hold (maintenance) by "),
        "{}",
        waiter.stderr_now()
    );
    assert!(!marker.exists());
    assert!(exists(&mut server.conn(), "redlock:{window}"));
    let out = waiter.wait_timeout(T);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(marker.exists());
}

#[test]
fn release_ends_holds_only_unless_given_a_token() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = TestDir::new();
    let mut conn = server.conn();
    let started = dir.file("started");
    let script = format!("touch '{}'; exec sleep 60", started.display());
    let mut job = spawn_started(&mut Job::new(&url, "job").sh(&script), &started, T);
    let job_token = get(&mut conn, "redlock:{job}").expect("held");

    let out = run(redlock(&url).args(["release", "job"]));
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains("a running job, not a hold"), "{out:?}");
    let out = run(redlock(&url).args(["release", "job", "--token", "wrong"]));
    assert_eq!(out.code, Some(1), "{out:?}");
    assert_eq!(get(&mut conn, "redlock:{job}"), Some(job_token.clone()));
    assert!(!job.has_exited());

    // A hold's own token.
    let held = hold(redlock(&url), "h", "1m", "r", &[]);
    let token = held.stdout.trim();
    let out = run(redlock(&url).args(["release", "h", "--token", "wrong"]));
    assert_eq!(out.code, Some(1), "{out:?}");
    let out = run(redlock(&url).args(["release", "h", "--token", token]));
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(!exists(&mut conn, "redlock:{h}"));

    // A running job's token: revoked, its holder stops (exit 70).
    let out = run(redlock(&url).args(["release", "job", "--token", &job_token]));
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(job.wait_timeout(T).code, Some(70));
    assert!(!exists(&mut conn, "redlock:{job}"));
}

#[test]
fn a_force_release_deletes_a_hold_at_once() {
    let server = RedisServer::start();
    let url = server.url();
    assert_eq!(hold(redlock(&url), "k", "10m", "r", &[]).code, Some(0));
    let out = run(redlock(&url).args(["force-release", "k"]));
    assert_eq!(out.code, Some(0), "{out:?}");
    // Nobody to stop: no revocation marker keeps the next run out.
    assert!(!exists(&mut server.conn(), "redlock:{k}"));
    let ran = run(&mut Job::new(&url, "k").args(["-n"]).exec(["true"]));
    assert_eq!(ran.code, Some(0), "{ran:?}");
}

#[test]
fn bad_hold_arguments_are_refused_before_redis() {
    let server = RedisServer::start();
    let url = server.url();
    for (args, option) in [
        (&["hold", "k", "--for", "0", "--reason", "r"][..], "--for"),
        (&["hold", "k", "--for", "soon", "--reason", "r"], "--for"),
        (&["hold", "k", "--for", "1m", "--reason", ""], "--reason"),
        (
            &["hold", "k", "--for", "1m", "--reason", "a\nb"],
            "--reason",
        ),
        (&["hold", "k", "--reason", "r"], "--for"),
        (&["hold", "k", "--for", "1m"], "--reason"),
    ] {
        let out = run(redlock(&url).args(args));
        assert_eq!(out.code, Some(2), "{args:?}: {out:?}");
        assert!(out.stderr.contains(option), "{args:?}: {out:?}");
    }
    assert!(!exists(&mut server.conn(), "redlock:{k}"));
}

#[test]
fn a_hold_over_three_redlock_nodes_with_one_down() {
    let mut servers = RedisServer::many(3);
    servers[2].kill();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let out = run(redlock_on(&urls).args(["hold", "k", "--for", "1m", "--reason", "freeze"]));
    assert_eq!(out.code, Some(0), "{out:?}");
    let token = out.stdout.trim().to_string();
    for server in &servers[..2] {
        assert_eq!(
            get(&mut server.conn(), "redlock:{k}").as_deref(),
            Some(token.as_str())
        );
    }
    let busy = run(&mut Job::using(redlock_on(&urls), "k")
        .args(["-n"])
        .exec(["true"]));
    assert_eq!(busy.code, Some(75), "{busy:?}");
    assert!(busy.stderr.contains("on hold (freeze)"), "{busy:?}");
    let json = run(redlock_on(&urls).args(["status", "k", "--json"]));
    assert_eq!(json_lines(&json)[0]["hold"]["reason"], "freeze", "{json:?}");
    let out = run(redlock_on(&urls).args(["release", "k"]));
    assert_eq!(out.code, Some(0), "{out:?}");
    for server in &servers[..2] {
        assert!(!exists(&mut server.conn(), "redlock:{k}"));
    }
}

/// A hold taken, seen (by a run and `status --json`) and released on `url`.
fn hold_round_trip(url: &str) {
    let out = hold(redlock(url), "k{x}", "1m", "freeze", &[]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let busy = run(&mut Job::new(url, "k{x}").args(["-n"]).exec(["true"]));
    assert_eq!(busy.code, Some(75), "{busy:?}");
    assert!(busy.stderr.contains("on hold (freeze)"), "{busy:?}");
    let json = run(redlock(url).args(["status", "k{x}", "--json"]));
    assert_eq!(json_lines(&json)[0]["hold"]["reason"], "freeze", "{json:?}");
    assert_eq!(json_lines(&json)[0]["token"], out.stdout.trim(), "{json:?}");
    let out = run(redlock(url).args(["release", "k{x}"]));
    assert_eq!(out.code, Some(0), "{out:?}");
    let ran = run(&mut Job::new(url, "k{x}").args(["-n"]).exec(["true"]));
    assert_eq!(ran.code, Some(0), "{ran:?}");
}

#[test]
fn a_hold_on_a_cluster_from_a_seed_that_does_not_own_the_slot() {
    let cluster = Cluster::start();
    let slot = cluster.slot_of("redlock:{k{x}}");
    hold_round_trip(&cluster.seed_not_owning(slot));
}

#[test]
fn a_hold_behind_sentinels() {
    let set = SentinelSet::start();
    hold_round_trip(&set.url());
}
