//! `--limit N`: up to N holders share a key (a counting semaphore), each
//! with its own token, expiry, refresh and fence; against real redis-server.

use crate::common::*;

use std::collections::HashSet;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::Value;

const T: Duration = Duration::from_secs(30);

/// A holder of a `--limit` slot of `key` running `sleep 60`; returns once
/// COMMAND has started and written its fence and pid to `<name>.fence`
/// and `<name>.pid`.
fn hold(
    server: &RedisServer,
    dir: &TestDir,
    key: &str,
    name: &str,
    extra: &[&str],
) -> RunningChild {
    let (fence, pid) = (
        dir.file(&format!("{name}.fence")),
        dir.file(&format!("{name}.pid")),
    );
    let mut cmd = server.job(key).args(extra).sh(
        "echo \"$REDLOCK_FENCE\" > \"$1.tmp\"; mv \"$1.tmp\" \"$1\"; \
         echo $$ > \"$2.tmp\"; mv \"$2.tmp\" \"$2\"; exec sleep 60",
    );
    cmd.arg("sh").arg(&fence).arg(&pid);
    spawn_started(&mut cmd, &pid, T)
}

fn read_number(dir: &TestDir, name: &str) -> i64 {
    dir.read(name)
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name}: no number"))
}

/// A run with `-n` that would leave `ran` behind if COMMAND started.
fn try_once(server: &RedisServer, dir: &TestDir, key: &str, extra: &[&str]) -> Output {
    attempt(server, dir, key, &[&["-n"], extra].concat())
}

/// A run that would leave `ran` behind if COMMAND started.
fn attempt(server: &RedisServer, dir: &TestDir, key: &str, extra: &[&str]) -> Output {
    let mut cmd = server.job(key).args(extra).exec(["touch"]);
    run_with_timeout(cmd.arg(dir.file("ran")), T)
}

fn zcard(conn: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("ZCARD").arg(key).query(conn).unwrap()
}

fn json_line(out: &Output) -> Value {
    assert_eq!(out.stdout.lines().count(), 1, "{out:?}");
    serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("bad JSON: {e}: {out:?}"))
}

fn stop(mut holder: RunningChild) -> Output {
    holder.signal(Signal::SIGTERM);
    holder.wait_timeout(T)
}

#[test]
fn three_holders_run_together_and_a_fourth_is_busy() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let holders: Vec<RunningChild> = (0..3)
        .map(|i| hold(&server, &dir, "pool", &format!("h{i}"), &["--limit", "3"]))
        .collect();
    // All three COMMANDs are running at the same time.
    for h in &holders {
        assert!(process_alive(h.pid()), "a holder ended early");
    }
    let mut conn = server.conn();
    assert_eq!(zcard(&mut conn, "redlock:{pool}:holders"), 3);
    assert_eq!(get(&mut conn, "redlock:{pool}:limit").as_deref(), Some("3"));
    assert!(!exists(&mut conn, "redlock:{pool}"), "no plain lock key");

    let out = try_once(&server, &dir, "pool", &["--limit", "3"]);
    assert_eq!(out.code, Some(75), "{out:?}");
    assert!(out.stderr.contains("3 holders"), "{out:?}");
    assert!(!dir.file("ran").exists(), "the fourth ran");
    let out = try_once(&server, &dir, "pool", &["--limit", "3", "-E", "0"]);
    assert_eq!(out.code, Some(0), "-E applies: {out:?}");

    // One leaves: its slot is free at once, the others stay.
    let mut holders = holders;
    let out = stop(holders.pop().unwrap());
    assert_eq!(out.code, Some(143), "{out:?}");
    assert_eq!(zcard(&mut conn, "redlock:{pool}:holders"), 2);
    let out = try_once(&server, &dir, "pool", &["--limit", "3"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(dir.file("ran").exists());
    for h in &holders {
        assert!(process_alive(h.pid()), "another holder's slot was touched");
    }

    // The last one out leaves only the fence behind.
    for h in holders {
        stop(h);
    }
    let mut left: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).unwrap();
    left.sort();
    assert_eq!(left, ["redlock:{pool}:fence"]);
}

#[test]
fn twelve_contenders_never_exceed_the_limit() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let log = dir.file("log");
    let script = section_script(&log, "0.2");
    // A counter that exists is never seeded, and one above the server's
    // clock is not raised to it: count from there.
    set_fence(&server, "sem", AHEAD);
    contend(12, 5, || {
        server.job("sem").args(["-q", "--limit", "3"]).sh(&script)
    });
    let (sections, most) = sections_in(&log);
    assert_eq!(sections, 60, "all 60 sections ran");
    assert!(most <= 3, "{most} sections at once with --limit 3");
    assert!(most >= 2, "the semaphore never let two in at once");
    let mut conn = server.conn();
    let counted = (AHEAD + 60).to_string();
    assert_eq!(
        get(&mut conn, "redlock:{sem}:fence").as_deref(),
        Some(counted.as_str())
    );
    assert!(!exists(&mut conn, "redlock:{sem}:holders"));
    assert!(!exists(&mut conn, "redlock:{sem}:limit"));
}

#[test]
fn a_killed_holder_frees_its_slot_after_its_ttl() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let extra = ["--limit", "2", "--ttl", "5s"];
    let mut victim = hold(&server, &dir, "k", "victim", &extra);
    let other = hold(&server, &dir, "k", "other", &extra);
    let child = read_number(&dir, "victim.pid") as i32;
    victim.signal(Signal::SIGKILL);
    victim.wait_timeout(T);
    assert!(
        wait_until(Duration::from_secs(5), || !process_alive(child)),
        "COMMAND outlived its wrapper"
    );
    // Its slot is still taken until its TTL runs out...
    let out = try_once(&server, &dir, "k", &extra);
    assert_eq!(out.code, Some(75), "{out:?}");
    // ...and then a waiter gets it, with no one releasing anything.
    let cmd = server.job("k").args(["--wait", "20s"]).args(extra);
    let out = run_with_timeout(cmd.exec(["touch"]).arg(dir.file("ran")), T);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(dir.file("ran").exists());
    assert!(process_alive(other.pid()), "the other holder was disturbed");
    let mut conn = server.conn();
    assert_eq!(
        zcard(&mut conn, "redlock:{k}:holders"),
        1,
        "only the other holder"
    );
    // The survivor keeps refreshing its slot past its first TTL.
    assert!(process_alive(other.pid()));
    stop(other);
}

#[test]
fn status_and_list_show_every_holder_and_the_limit() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let holders: Vec<RunningChild> = (0..3)
        .map(|i| hold(&server, &dir, "web", &format!("h{i}"), &["--limit", "3"]))
        .collect();
    let plain = hold(&server, &dir, "alone", "plain", &[]);
    let fences: Vec<i64> = (0..3)
        .map(|i| read_number(&dir, &format!("h{i}.fence")))
        .collect();

    // A table: a row per holder, not one line joined by "; ".
    let out = run_with_timeout(redlock(&server.url()).args(["status", "web"]), T);
    assert_eq!(out.code, Some(0), "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "a header and 3 rows: {out:?}");
    assert!(lines[0].starts_with("KEY  STATE  "), "{out:?}");
    for (h, fence) in holders.iter().zip(&fences) {
        let row = lines
            .iter()
            .find(|l| l.contains(&format!(" pid {} ", h.pid())))
            .unwrap_or_else(|| panic!("no row for {}: {out:?}", h.pid()));
        assert!(row.starts_with("web  held (limit 3)  "), "{out:?}");
        assert!(row.contains(&format!("  {fence}  ")), "{out:?}");
        assert!(row.contains("  sh -c "), "{out:?}");
    }

    let out = run_with_timeout(redlock(&server.url()).args(["status", "web", "--json"]), T);
    assert_eq!(out.code, Some(0), "{out:?}");
    let v = json_line(&out);
    assert_eq!(v["key"], "web");
    assert_eq!(v["held"], true);
    assert_eq!(v["limit"], 3);
    assert_eq!(v["fence"].as_i64(), fences.iter().copied().max(), "{v}");
    let ttl = v["ttl_ms"].as_i64().expect("ttl_ms");
    assert!((1..=30_000).contains(&ttl), "{v}");
    let listed = v["holders"].as_array().expect("holders array");
    assert_eq!(listed.len(), 3, "{v}");
    let mut conn = server.conn();
    let tokens: Vec<String> = redis::cmd("ZRANGE")
        .arg("redlock:{web}:holders")
        .arg(0)
        .arg(-1)
        .query(&mut conn)
        .unwrap();
    for one in listed {
        assert!(tokens.iter().any(|t| one["token"] == t.as_str()), "{one}");
        assert!(one["ttl_ms"].as_i64().is_some_and(|t| t > 0), "{one}");
        let pid = one["holder"]["pid"].as_i64().expect("pid");
        let i = holders
            .iter()
            .position(|h| h.pid() as i64 == pid)
            .unwrap_or_else(|| panic!("unknown pid {pid}: {v}"));
        assert_eq!(one["fence"].as_i64(), Some(fences[i]), "{one}");
        assert!(one["holder"]["command"]
            .as_str()
            .is_some_and(|c| c.starts_with("sh -c")));
    }

    // `list` shows the semaphore and the plain lock, one line each.
    let out = run_with_timeout(redlock(&server.url()).arg("list"), T);
    assert_eq!(out.code, Some(0), "{out:?}");
    let keys: Vec<&str> = out
        .stdout
        .lines()
        .skip(1)
        .map(|l| l.split_once("  held").expect("held line").0.trim_end())
        .collect();
    assert_eq!(keys, ["alone", "web", "web", "web"], "{out:?}");
    assert!(out.stdout.contains(&format!(" pid {} ", plain.pid())));
    let out = run_with_timeout(redlock(&server.url()).args(["list", "--json"]), T);
    let lines: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{out:?}");
    assert!(lines[0].get("limit").is_none(), "a plain lock has no limit");
    assert_eq!(lines[1]["holders"].as_array().map(Vec::len), Some(3));

    // Released, it is free like a plain lock, and remembers its fence.
    for h in holders {
        stop(h);
    }
    let out = run_with_timeout(redlock(&server.url()).args(["status", "web"]), T);
    assert_eq!(out.code, Some(1), "{out:?}");
    let last = fences.iter().max().unwrap();
    assert_eq!(out.stdout, format!("web  free (last fence {last})\n"));
}

#[test]
fn a_different_limit_is_a_clear_error_and_nothing_runs() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let holder = hold(&server, &dir, "cfg", "h", &["--limit", "3"]);
    for (limit, wait) in [("2", "-n"), ("4", "--wait=5s"), ("1", "-n")] {
        // Not a matter of waiting: it fails at once, also with --wait.
        let out = attempt(&server, &dir, "cfg", &["--limit", limit, wait]);
        assert_eq!(out.code, Some(2), "--limit {limit}: {out:?}");
        assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
        assert!(
            out.stderr.contains(&format!(
                "lock 'cfg' is held with --limit 3; this run asked for --limit {limit}"
            )),
            "{out:?}"
        );
        assert!(!dir.file("ran").exists(), "--limit {limit}: COMMAND ran");
    }
    // The limit in Redis is unchanged, and the holder keeps its slot.
    let mut conn = server.conn();
    assert_eq!(get(&mut conn, "redlock:{cfg}:limit").as_deref(), Some("3"));
    assert_eq!(zcard(&mut conn, "redlock:{cfg}:holders"), 1);
    assert!(process_alive(holder.pid()));
    stop(holder);
    // Once every holder is gone, any limit may be used again.
    let out = try_once(&server, &dir, "cfg", &["--limit", "2"]);
    assert_eq!(out.code, Some(0), "{out:?}");
}

#[test]
fn a_plain_lock_and_a_semaphore_do_not_mix() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let plain = hold(&server, &dir, "mix", "plain", &[]);
    let out = try_once(&server, &dir, "mix", &["--limit", "3"]);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(
        out.stderr
            .contains("lock 'mix' is held with --limit 1; this run asked for --limit 3"),
        "{out:?}"
    );
    assert!(!dir.file("ran").exists(), "COMMAND ran");
    let mut conn = server.conn();
    assert!(!exists(&mut conn, "redlock:{mix}:holders"));
    assert!(!exists(&mut conn, "redlock:{mix}:limit"));
    stop(plain);
    assert!(!exists(&mut conn, "redlock:{mix}"));
}

#[test]
fn every_holder_gets_its_own_fence_and_token() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    // Fences are shared with the plain lock's counter: it only grows.
    set_fence(&server, "f", AHEAD);
    let out = try_once(&server, &dir, "f", &[]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let holders: Vec<RunningChild> = (0..4)
        .map(|i| hold(&server, &dir, "f", &format!("h{i}"), &["--limit", "4"]))
        .collect();
    let fences: HashSet<i64> = (0..4)
        .map(|i| read_number(&dir, &format!("h{i}.fence")))
        .collect();
    assert_eq!(fences, (2..=5).map(|n| AHEAD + n).collect::<HashSet<i64>>());
    let mut conn = server.conn();
    let tokens: Vec<String> = redis::cmd("ZRANGE")
        .arg("redlock:{f}:holders")
        .arg(0)
        .arg(-1)
        .query(&mut conn)
        .unwrap();
    assert_eq!(tokens.iter().collect::<HashSet<_>>().len(), 4);
    for token in &tokens {
        let record = hgetall(&mut conn, &format!("redlock:{{f}}:holder:{token}"));
        assert_eq!(record.get("token"), Some(token), "{record:?}");
        let fence: i64 = record["fence"].parse().unwrap();
        assert!(fences.contains(&fence));
        let ttl = pttl(&mut conn, &format!("redlock:{{f}}:holder:{token}"));
        assert!(ttl > 0, "a holder record without expiry");
    }
    for h in holders {
        stop(h);
    }
}

#[test]
fn a_lost_slot_stops_the_job_with_70() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let extra = ["--limit", "2", "--ttl", "3s", "--refresh", "200ms"];
    let mut victim = hold(&server, &dir, "lost", "victim", &extra);
    let other = hold(&server, &dir, "lost", "other", &extra);
    let child = read_number(&dir, "victim.pid") as i32;
    let mut conn = server.conn();
    // Find the victim's token by its holder record, and take its slot away.
    let tokens: Vec<String> = redis::cmd("ZRANGE")
        .arg("redlock:{lost}:holders")
        .arg(0)
        .arg(-1)
        .query(&mut conn)
        .unwrap();
    let token = tokens
        .iter()
        .find(|t| {
            hgetall(&mut conn, &format!("redlock:{{lost}}:holder:{t}"))
                .get("pid")
                .is_some_and(|p| p == &victim.pid().to_string())
        })
        .expect("the victim's slot")
        .clone();
    let _: i64 = redis::cmd("ZREM")
        .arg("redlock:{lost}:holders")
        .arg(&token)
        .query(&mut conn)
        .unwrap();
    let out = victim.wait_timeout(T);
    assert_eq!(out.code, Some(70), "{out:?}");
    assert!(out.stderr.contains("lost"), "{out:?}");
    assert!(!process_alive(child), "COMMAND outlived the slot");
    // The other holder keeps its slot and runs on.
    assert!(process_alive(other.pid()));
    assert_eq!(zcard(&mut conn, "redlock:{lost}:holders"), 1);
    stop(other);
}

/// With `--now`, force-release deletes slots at once.
#[test]
fn force_release_of_one_holder_or_all() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut holders: Vec<RunningChild> = (0..3)
        .map(|i| {
            hold(
                &server,
                &dir,
                "fr",
                &format!("h{i}"),
                &["--limit", "3", "--ttl", "3s"],
            )
        })
        .collect();
    let mut conn = server.conn();
    let out = run_with_timeout(
        redlock(&server.url()).args(["force-release", "fr", "--token", "nope"]),
        T,
    );
    assert_eq!(out.code, Some(1), "{out:?}");
    assert_eq!(zcard(&mut conn, "redlock:{fr}:holders"), 3);

    let token: String = redis::cmd("HGET")
        .arg(format!(
            "redlock:{{fr}}:holder:{}",
            redis::cmd("ZRANGE")
                .arg("redlock:{fr}:holders")
                .arg(0)
                .arg(0)
                .query::<Vec<String>>(&mut conn)
                .unwrap()[0]
        ))
        .arg("token")
        .query(&mut conn)
        .unwrap();
    let out = run_with_timeout(
        redlock(&server.url()).args(["force-release", "fr", "--token", &token, "--now"]),
        T,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stdout
            .starts_with("released a holder of 'fr' (limit 3): "),
        "{out:?}"
    );
    assert_eq!(zcard(&mut conn, "redlock:{fr}:holders"), 2);
    assert!(!exists(
        &mut conn,
        &format!("redlock:{{fr}}:holder:{token}")
    ));

    let out = run_with_timeout(
        redlock(&server.url()).args(["force-release", "fr", "--now"]),
        T,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stdout
            .starts_with("released 'fr': it was held by 2 holders (limit 3): "),
        "{out:?}"
    );
    let mut left: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).unwrap();
    left.sort();
    assert_eq!(left, ["redlock:{fr}:fence"]);
    // Every holder notices at its next refresh and stops with 70.
    for h in holders.iter_mut() {
        let out = h.wait_timeout(Duration::from_secs(60));
        assert_eq!(out.code, Some(70), "{out:?}");
    }
}

/// A holder of a slot of `key` whose job logs its section (`start NAME`
/// .. `end NAME`) to `log` and takes a second to stop after SIGTERM.
fn slow_to_stop(server: &RedisServer, dir: &TestDir, key: &str, name: &str) -> RunningChild {
    let log = dir.file("log");
    let started = dir.file(&format!("{name}.started"));
    let script = format!(
        "echo \"start {name}\" >> '{log}'; \
         trap 'sleep 1; echo \"end {name}\" >> \"{log}\"; exit 0' TERM; \
         touch '{started}'; while :; do sleep 0.02; done",
        log = log.display(),
        started = started.display(),
    );
    let mut cmd = server
        .job(key)
        .args(["--limit", "2", "--ttl", "6s"])
        .line(&script);
    spawn_started(&mut cmd, &started, T)
}

/// Without `--now`, a semaphore is revoked slot by slot as a plain lock
/// is: each slot stays taken until its holder has stopped its job and
/// given it back, so waiters never run beside the holders being stopped.
#[test]
fn force_release_of_a_semaphore_revokes_slot_by_slot() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let log = dir.file("log");
    let mut holders = [
        slow_to_stop(&server, &dir, "sem", "h1"),
        slow_to_stop(&server, &dir, "sem", "h2"),
    ];
    let waiters: Vec<RunningChild> = (3..5)
        .map(|w| {
            let mut cmd = server
                .job("sem")
                .args(["--limit", "2", "--wait", "30s", "-v"])
                .sh(section_script(&log, "0.2"));
            spawn_waiting(cmd.env("W", format!("w{w}")), T)
        })
        .collect();
    let forced = run_with_timeout(redlock(&server.url()).args(["force-release", "sem"]), T);
    assert_eq!(forced.code, Some(0), "{forced:?}");
    // While they stop, their slots are taken, and status says why.
    let status = run_with_timeout(redlock(&server.url()).args(["status", "sem"]), T);
    for h in holders.iter_mut() {
        let out = h.wait_timeout(T);
        assert_eq!(out.code, Some(70), "{out:?}");
    }
    for mut w in waiters {
        let out = w.wait_timeout(T);
        assert_eq!(out.code, Some(0), "{out:?}");
    }
    let (sections, most) = sections_in(&log);
    assert_eq!(sections, 4);
    assert!(
        most <= 2,
        "{most} jobs ran at once with --limit 2:\n{}",
        std::fs::read_to_string(&log).unwrap()
    );
    assert!(
        forced
            .stdout
            .starts_with("revoked 'sem' (its holder stops COMMAND"),
        "{forced:?}"
    );
    assert!(
        forced.stdout.contains("held by 2 holders (limit 2)"),
        "{forced:?}"
    );
    assert!(
        status
            .stdout
            .lines()
            .skip(1)
            .all(|l| l.starts_with("sem  revoked  ")),
        "{status:?}"
    );
}

/// The same semaphore across three Redis nodes: a majority grants a slot.
#[test]
fn a_semaphore_across_three_nodes() {
    let servers = RedisServer::many(3);
    let dir = TestDir::new();
    let with_all = || redlock_on(servers.iter().map(RedisServer::url));
    let mut holders = Vec::new();
    for i in 0..2 {
        let marker = dir.file(&format!("h{i}"));
        let mut cmd = Job::using(with_all(), "multi")
            .args(["--limit", "2"])
            .sh("touch \"$1\"; exec sleep 60");
        holders.push(spawn_started(cmd.arg("sh").arg(&marker), &marker, T));
    }
    let out = run_with_timeout(
        with_all().args(["-k", "multi", "--limit", "2", "-n", "--", "true"]),
        T,
    );
    assert_eq!(out.code, Some(75), "{out:?}");
    let out = run_with_timeout(with_all().args(["status", "multi", "--json"]), T);
    assert_eq!(out.code, Some(0), "{out:?}");
    let v = json_line(&out);
    assert_eq!(v["limit"], 2, "{v}");
    assert_eq!(v["nodes"], 3, "{v}");
    let listed = v["holders"].as_array().expect("holders");
    assert_eq!(listed.len(), 2, "{v}");
    assert!(listed.iter().all(|h| h["nodes_holding"] == 3), "{v}");
    for h in holders {
        stop(h);
    }
    for s in &servers {
        assert!(!exists(&mut s.conn(), "redlock:{multi}:holders"));
    }
}

/// What a Redis ACL user needs for `--limit N > 1` on top of the rules in
/// the man page's REDIS PERMISSIONS (which cover plain locks).
#[test]
fn acl_for_a_semaphore_is_the_documented_rules_and_sorted_set_commands() {
    const PASS: &str = "s3m-pass";
    let base = documented_acl_rules();
    let semaphore_rules = documented_semaphore_rules();
    assert!(
        semaphore_rules.contains(&"+zcard".to_string()),
        "{semaphore_rules:?}"
    );
    let all = [base.clone(), semaphore_rules.clone()].concat();
    let mut builder = RedisServer::builder().acl_user("sem", PASS, &all.join(" "));
    for (i, left_out) in semaphore_rules.iter().enumerate() {
        let rules: Vec<&String> = all.iter().filter(|r| *r != left_out).collect();
        let rules: Vec<&str> = rules.iter().map(|r| r.as_str()).collect();
        builder = builder.acl_user(&format!("without{i}"), PASS, &rules.join(" "));
    }
    let server = builder.start();
    let dir = TestDir::new();
    let url = server.url_with(Some("sem"), PASS);

    let marker = dir.file("started");
    let mut cmd = Job::new(&url, "acl")
        .args(["--limit", "2", "--ttl", "3s"])
        .sh(format!("touch '{}'; exec sleep 60", marker.display()));
    let mut holder = spawn_started(&mut cmd, &marker, T);
    let out = run_with_timeout(
        redlock(&url).args(["-k", "acl", "--limit", "2", "--", "true"]),
        T,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    let out = run_with_timeout(redlock(&url).args(["status", "acl"]), T);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.contains("held by 1 holder (limit 2)"), "{out:?}");
    let out = run_with_timeout(redlock(&url).arg("list"), T);
    let row = out.stdout.lines().nth(1).unwrap_or_default();
    assert!(row.starts_with("acl  held (limit 2)  "), "{out:?}");
    let out = run_with_timeout(redlock(&url).args(["force-release", "acl"]), T);
    assert_eq!(out.code, Some(0), "{out:?}");
    // It notices at its next refresh.
    let out = holder.wait_timeout(T);
    assert_eq!(out.code, Some(70), "lost by force-release: {out:?}");

    // Each added command is needed: without it, a run is refused (77),
    // or (+zrem) its release fails, with the server's NOPERM and a hint.
    for (i, left_out) in semaphore_rules.iter().enumerate() {
        let url = server.url_with(Some(&format!("without{i}")), PASS);
        let out = run_with_timeout(
            redlock(&url)
                .args(["-k", "acl2", "--limit", "2", "--", "touch"])
                .arg(dir.file(&format!("ran{i}"))),
            T,
        );
        assert!(
            out.stderr.contains("lacks a permission"),
            "without {left_out}: {out:?}"
        );
        if out.code != Some(0) {
            assert_eq!(out.code, Some(77), "without {left_out}: {out:?}");
            let ran = dir.file(&format!("ran{i}")).exists();
            assert!(!ran, "without {left_out}: COMMAND ran");
        }
    }
}

/// Set the fence counter of `key`, as if it had been acquired `n` times.
/// A fence counter far above the server's clock in microseconds (about
/// 1.8e15 until 2030), below 2^53 (Lua's exact integers): counting on
/// from it is by one, never a jump to the clock.
const AHEAD: i64 = 8_000_000_000_000_000;

fn set_fence(server: &RedisServer, key: &str, n: i64) {
    redis::cmd("SET")
        .arg(format!("redlock:{{{key}}}:fence"))
        .arg(n)
        .exec(&mut server.conn())
        .unwrap();
}
