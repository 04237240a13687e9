//! Operators can watch it: the JSON event stream (`--log-format json`)
//! and the node_exporter textfile (`--metrics-textfile DIR`), for every
//! outcome of a run, against real redis-server processes.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::*;

const LONG: Duration = Duration::from_secs(30);

/// A run whose stderr is JSON events.
fn job(url: &str, key: &str) -> Job {
    Job::new(url, key).args(["--log-format", "json"])
}

/// Every stderr line as JSON, checked for the fields every event has.
fn events(out: &Output) -> Vec<Value> {
    out.stderr
        .lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {line}\n{}", out.stderr));
            let ts = v["ts"].as_str().unwrap_or_else(|| panic!("no ts: {line}"));
            humantime::parse_rfc3339(ts).unwrap_or_else(|e| panic!("ts {ts}: {e}"));
            assert!(ts.ends_with('Z') && ts.contains('.'), "not UTC ms: {ts}");
            for field in ["level", "event", "msg"] {
                assert!(v[field].is_string(), "no {field}: {line}");
            }
            assert!(
                ["info", "warn", "error"].contains(&v["level"].as_str().unwrap()),
                "{line}"
            );
            v
        })
        .collect()
}

fn names(events: &[Value]) -> Vec<&str> {
    events.iter().filter_map(|e| e["event"].as_str()).collect()
}

fn event<'a>(events: &'a [Value], name: &str) -> &'a Value {
    events
        .iter()
        .find(|e| e["event"] == name)
        .unwrap_or_else(|| panic!("no {name} event in {:?}", names(events)))
}

/// Every event name docs/monitoring.md documents (its events table).
fn documented() -> BTreeSet<String> {
    let monitoring = source_file("docs/monitoring.md");
    monitoring
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(String::from)
        .collect()
}

fn assert_documented(events: &[Value]) {
    let docs = documented();
    for name in names(events) {
        assert!(
            docs.contains(name),
            "event {name} is not in docs/monitoring.md"
        );
    }
}

#[test]
fn a_clean_run_is_a_stream_of_typed_events() {
    let server = RedisServer::start();
    let out = run_with_timeout(
        &mut job(&server.url(), "json").args(["-v"]).sh("exit 0"),
        LONG,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    let evs = events(&out);
    // A new key's fence counter starts from the server's clock.
    assert_eq!(
        names(&evs),
        [
            "fence_reset",
            "protocol",
            "acquired",
            "contained",
            "command_exited",
            "released"
        ],
        "{}",
        out.stderr
    );
    let acquired = event(&evs, "acquired");
    assert_eq!(acquired["key"], "json");
    assert!(acquired["fence"].is_i64(), "{acquired}");
    assert!(acquired["wait_ms"].is_u64(), "{acquired}");
    assert_eq!(acquired["ttl_ms"], 30_000);
    assert_eq!(event(&evs, "command_exited")["exit"], 0);
    // Which protocol the server gets (-v): scripts, where EVAL runs.
    let protocol = event(&evs, "protocol");
    assert!(protocol["server"].is_string(), "{protocol}");
    assert!(protocol["protocol"].is_string(), "{protocol}");
    assert_documented(&evs);
}

#[test]
fn busy_waiting_and_signals_as_events() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let hold = Hold::new(&dir);
    let mut holder = hold.spawn(
        &mut job(&server.url(), "busy").args(["-v"]).sh(hold.script("")),
        LONG,
    );
    let busy = run_with_timeout(
        &mut job(&server.url(), "busy").args(["-n"]).sh("true"),
        LONG,
    );
    assert_eq!(busy.code, Some(75), "{busy:?}");
    let evs = events(&busy);
    assert_eq!(names(&evs), ["busy"]);
    assert_eq!(event(&evs, "busy")["level"], "warn");
    assert!(event(&evs, "busy")["holder"]
        .as_str()
        .unwrap()
        .contains("pid"));

    let spawned = Instant::now();
    let mut waiter = spawn_waiting(
        &mut job(&server.url(), "busy").args(["-v"]).sh("true"),
        LONG,
    );
    hold.go();
    let waited = waiter.wait_timeout(LONG);
    let lived = spawned.elapsed();
    assert_eq!(waited.code, Some(0), "{waited:?}");
    let evs = events(&waited);
    assert!(names(&evs).contains(&"waiting"), "{}", waited.stderr);
    // wait_ms spans at least from "waiting" to "acquired" (their ms
    // timestamps, 5 ms for rounding) and at most the waiter's life.
    let wait_ms = event(&evs, "acquired")["wait_ms"].as_u64().unwrap();
    let at = |name| humantime::parse_rfc3339(event(&evs, name)["ts"].as_str().unwrap()).unwrap();
    let between = at("acquired")
        .duration_since(at("waiting"))
        .unwrap_or_default();
    assert!(
        u128::from(wait_ms) + 5 >= between.as_millis(),
        "{wait_ms} ms: {between:?}"
    );
    assert!(
        u128::from(wait_ms) <= lived.as_millis(),
        "{wait_ms} ms: {lived:?}"
    );
    assert_documented(&evs);
    holder.wait_timeout(LONG);

    let trap = format!(
        "exec 2>/dev/null; trap 'exit 9' TERM; touch '{s}'; while :; do sleep 0.02; done",
        s = dir.file("trap").display()
    );
    let mut run = spawn_piped(&mut job(&server.url(), "sig").args(["-v"]).sh(&trap));
    assert!(wait_for_file(dir.file("trap"), LONG));
    run.signal(nix::sys::signal::Signal::SIGTERM);
    let out = run.wait_timeout(LONG);
    assert_eq!(out.code, Some(9), "{out:?}");
    let evs = events(&out);
    assert_eq!(event(&evs, "signal_forwarded")["signal"], 15);
    assert_documented(&evs);
}

#[test]
fn a_lost_lock_and_its_stop_as_events() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let script = format!(
        "touch '{s}'; while :; do sleep 0.02; done",
        s = dir.file("started").display()
    );
    let mut run = spawn_piped(
        // 3 s: the refresh due at 1 s has 0.66 s to fail before the stop
        // begins (1 s left it 0.2 s, which a loaded machine can spend
        // before the refresher runs at all).
        &mut job(&server.url(), "lost")
            .args(["-v", "--ttl", "3s"])
            .sh(&script),
    );
    assert!(wait_for_file(dir.file("started"), LONG));
    server.pause();
    let out = run.wait_timeout(LONG);
    server.resume();
    assert_eq!(out.code, Some(70), "{out:?}");
    let evs = events(&out);
    let order = names(&evs);
    let at = |name| order.iter().position(|n| *n == name);
    assert!(at("refresh_failed").is_some(), "{order:?}");
    assert!(
        at("stopping") < at("lost"),
        "stop first, talk later: {order:?}"
    );
    assert_eq!(event(&evs, "lost")["reason"], "unconfirmed");
    assert_eq!(event(&evs, "lost")["level"], "error");
    assert!(event(&evs, "stopping")["grace_ms"].is_u64());
    assert_documented(&evs);
}

#[test]
fn leftovers_min_hold_max_hold_and_fail_open_as_events() {
    let server = RedisServer::start();
    let url = server.url();
    let out = run_with_timeout(
        &mut job(&url, "left")
            .args(["--kill-after", "1s"])
            .sh("sleep 30 & exit 0"),
        LONG,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    let evs = events(&out);
    assert_eq!(event(&evs, "leftovers_stopped")["count"], 1);

    let out = run_with_timeout(
        &mut job(&url, "min").args(["-v", "--min-hold", "3s"]).sh("true"),
        LONG,
    );
    assert!(
        event(&events(&out), "min_hold")["hold_ms"]
            .as_u64()
            .unwrap()
            > 2000
    );

    let out = run_with_timeout(
        &mut job(&url, "max")
            .args(["--max-hold", "500ms"])
            .sh("sleep 30"),
        LONG,
    );
    assert_eq!(out.code, Some(124), "{out:?}");
    let evs = events(&out);
    assert_eq!(event(&evs, "max_hold")["max_hold_ms"], 500);
    assert_documented(&evs);

    let dead = format!("redis://127.0.0.1:{}", free_port());
    let out = run_with_timeout(
        &mut job(&dead, "open")
            .args(["--on-unavailable", "run"])
            .sh("exit 5"),
        LONG,
    );
    assert_eq!(out.code, Some(5), "{out:?}");
    let evs = events(&out);
    assert_eq!(event(&evs, "running_unlocked")["level"], "error");
    assert_documented(&evs);
}

#[test]
fn no_password_in_any_event() {
    let server = RedisServer::builder().requirepass("s3cret-pw").start();
    let url = server.url_with(None, "s3cret-pw");
    let out = run_with_timeout(
        &mut job(&url, "pw")
            .args(["-v"])
            .sh(format!("echo {url} >/dev/null")),
        LONG,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    let wrong = server.url_with(None, "s3cret-pw-wrong");
    let bad = run_with_timeout(&mut job(&wrong, "pw").args(["-v"]).sh("true"), LONG);
    assert_ne!(bad.code, Some(0), "{bad:?}");
    for out in [&out, &bad] {
        events(out);
        assert!(!out.stderr.contains("s3cret-pw"), "{}", out.stderr);
    }
}

#[test]
fn every_event_of_the_docs_is_in_the_man_page() {
    // The table of docs/monitoring.md is the binary's own catalog (a unit
    // test in src/log/events.rs holds it to it); the man page lists the
    // same events.
    let monitoring = source_file("docs/monitoring.md");
    let rows: Vec<&str> = monitoring
        .lines()
        .filter(|l| l.starts_with("| `") && l.matches(" | ").count() == 3)
        .collect();
    assert!(rows.len() >= 20, "{rows:?}");
    let man = man_page_text();
    for row in rows {
        let name = row.split('`').nth(1).unwrap();
        assert!(man.contains(name), "event {name} is not in the man page");
    }
}

fn metrics(dir: &Path, key: &str) -> Vec<Sample> {
    let stem = format!("redlock_run_{key}.prom");
    parse_prom(&dir.join(stem))
}

fn runs(samples: &[Sample], key: &str, outcome: &str) -> f64 {
    prom_value(
        samples,
        "redlock_run_runs_total",
        &[("key", key), ("outcome", outcome)],
    )
    .unwrap_or_else(|| panic!("no runs_total for {outcome}"))
}

#[test]
fn the_metrics_file_after_each_outcome() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let m = dir.path().to_str().unwrap().to_string();
    let url = server.url();
    let run = |key: &str, extra: &[&str], script: &str| {
        let mut cmd = redlock(&url);
        cmd.args(["--metrics-textfile", &m, "-k", key])
            .args(extra)
            .args(["--", "sh", "-c", script]);
        run_with_timeout(&mut cmd, LONG)
    };
    assert_eq!(run("k", &[], "exit 0").code, Some(0));
    let s = metrics(dir.path(), "k");
    assert_eq!(runs(&s, "k", "ok"), 1.0);
    let success = prom_value(
        &s,
        "redlock_run_last_success_timestamp_seconds",
        &[("key", "k")],
    )
    .unwrap();
    assert!(success > 1.7e9, "{success}");
    assert_eq!(
        prom_value(&s, "redlock_run_running", &[("key", "k")]),
        Some(0.0)
    );
    assert!(prom_value(&s, "redlock_run_last_fence", &[("key", "k")]).unwrap() >= 1.0);

    assert_eq!(run("k", &[], "exit 3").code, Some(3));
    let s = metrics(dir.path(), "k");
    assert_eq!(runs(&s, "k", "failed"), 1.0);
    assert_eq!(runs(&s, "k", "ok"), 1.0, "counters carry over");
    assert_eq!(
        prom_value(&s, "redlock_run_last_exit_code", &[("key", "k")]),
        Some(3.0)
    );
    assert_eq!(
        prom_value(
            &s,
            "redlock_run_last_success_timestamp_seconds",
            &[("key", "k")]
        ),
        Some(success),
        "only exit 0 moves last_success"
    );

    assert_eq!(
        run("k", &["--max-hold", "300ms"], "sleep 30").code,
        Some(124)
    );
    assert_eq!(run("k", &[], "kill -TERM $$").code, Some(143));
    let s = metrics(dir.path(), "k");
    assert_eq!(runs(&s, "k", "max_hold"), 1.0);
    assert_eq!(runs(&s, "k", "signaled"), 1.0);

    let dir_dead = TestDir::new();
    let dead = format!("redis://127.0.0.1:{}", free_port());
    let out = run_with_timeout(
        redlock(&dead).args([
            "--metrics-textfile",
            dir_dead.path().to_str().unwrap(),
            "-k",
            "u",
            "--",
            "true",
        ]),
        LONG,
    );
    assert_eq!(out.code, Some(69), "{out:?}");
    assert_eq!(
        runs(&metrics(dir_dead.path(), "u"), "u", "unavailable"),
        1.0
    );

    // Busy: hold the key by hand, then -n.
    let mut conn = server.conn();
    redis::cmd("SET")
        .arg("redlock:{b}")
        .arg("someone")
        .query::<()>(&mut conn)
        .unwrap();
    assert_eq!(run("b", &["-n"], "true").code, Some(75));
    assert_eq!(runs(&metrics(dir.path(), "b"), "b", "busy"), 1.0);
}

#[test]
fn the_metrics_file_after_a_lost_lock() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let started = dir.file("started");
    let mut cmd = redlock(&server.url());
    cmd.args([
        "--metrics-textfile",
        dir.path().to_str().unwrap(),
        "-k",
        "l",
        // 3 s: the refresh due at 1 s has 0.66 s to fail (and be counted)
        // before the stop begins; 1 s left it 0.2 s, which a loaded
        // machine could spend before the refresher ran at all.
        "--ttl",
        "3s",
    ])
    .args([
        "--",
        "sh",
        "-c",
        &format!("touch '{}'; sleep 30", started.display()),
    ]);
    let mut run = spawn_piped(&mut cmd);
    assert!(wait_for_file(&started, LONG));
    // Written once COMMAND has started, beside it.
    let prom = dir.path().join("redlock_run_l.prom");
    assert!(
        wait_until(LONG, || prom.exists()
            && prom_value(
                &metrics(dir.path(), "l"),
                "redlock_run_running",
                &[("key", "l")]
            ) == Some(1.0)),
        "running never became 1"
    );
    server.pause();
    let out = run.wait_timeout(LONG);
    server.resume();
    assert_eq!(out.code, Some(70), "{out:?}");
    let s = metrics(dir.path(), "l");
    assert_eq!(runs(&s, "l", "lost"), 1.0);
    assert!(prom_value(&s, "redlock_run_refresh_failures_total", &[("key", "l")]).unwrap() >= 1.0);
}

#[test]
fn twenty_concurrent_runs_count_twenty() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let m = dir.path().to_str().unwrap().to_string();
    let url = server.url();
    std::thread::scope(|s| {
        for _ in 0..20 {
            s.spawn(|| {
                let out = run_with_timeout(
                    redlock(&url).args(["--metrics-textfile", &m, "-k", "many", "--", "true"]),
                    LONG,
                );
                assert_eq!(out.code, Some(0), "{out:?}");
            });
        }
    });
    assert_eq!(runs(&metrics(dir.path(), "many"), "many", "ok"), 20.0);
}

#[test]
fn status_shows_no_password_of_a_url_list_in_a_jobs_command_line() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let hold = Hold::new(&dir);
    // Passwords redlock-run was never given: only the URL syntax tells.
    let list = "redis://app:first-pw@db1:6380,redis://app:second-pw@db2:6380";
    let mut run = hold.spawn(
        &mut server
            .job("list")
            .sh(format!("{}; : --upstream={list}", hold.script("true"))),
        LONG,
    );
    let out = run_with_timeout(redlock(&server.url()).args(["status", "list"]), LONG);
    let json = run_with_timeout(
        redlock(&server.url()).args(["status", "--json", "list"]),
        LONG,
    );
    hold.go();
    assert_eq!(run.wait_timeout(LONG).code, Some(0));
    for out in [&out, &json] {
        assert_eq!(out.code, Some(0), "{out:?}");
        assert!(out.stdout.contains("db2:6380"), "{out:?}");
        for secret in ["first-pw", "second-pw"] {
            assert!(
                !out.stdout.contains(secret),
                "{secret} shown: {}",
                out.stdout
            );
        }
    }
}

#[test]
fn a_refusal_is_an_event_that_names_its_key() {
    let server = RedisServer::builder().requirepass("right-pw").start();
    let wrong = server.url_with(None, "wrong-pw");
    let out = run_with_timeout(&mut job(&wrong, "refused-key").sh("true"), LONG);
    assert_eq!(out.code, Some(77), "{out:?}");
    let admin = run_with_timeout(
        redlock(&wrong).args(["--log-format", "json", "force-release", "refused-key"]),
        LONG,
    );
    assert_eq!(admin.code, Some(77), "{admin:?}");
    for out in [&out, &admin] {
        let all = events(out);
        assert!(names(&all).contains(&"refused"), "{}", out.stderr);
        for event in &all {
            assert_eq!(event["key"], "refused-key", "{event}");
        }
    }
}

/// Issue 36, item 17: `-v` tells a lost lock once, in the order things
/// happened (no line for the stop before the line for the loss, no
/// "refresh failed, retrying" once the lease ran out or COMMAND exited),
/// and a key's first acquisition reads plainly, not like lost data.
#[test]
fn verbose_text_tells_a_lost_lock_once_in_order_and_a_new_key_plainly() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let script = format!(
        "touch '{s}'; while :; do sleep 0.02; done",
        s = dir.file("started").display()
    );
    let mut run = spawn_piped(
        // 3 s: room for a failed refresh and its retries before the loss
        // (see a_lost_lock_and_its_stop_as_events).
        &mut Job::new(&server.url(), "told")
            .args(["-v", "--ttl", "3s"])
            .sh(&script),
    );
    assert!(wait_for_file(dir.file("started"), LONG));
    server.pause();
    let out = run.wait_timeout(LONG);
    server.resume();
    assert_eq!(out.code, Some(70), "{out:?}");
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(
        lines.first().copied(),
        Some(
            "redlock-run: lock 'told' is new on this server: its fence counter starts from the \
             server's clock, in microseconds, so fences only grow"
        ),
        "{}",
        out.stderr
    );
    let lost: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].contains("lost"))
        .collect();
    assert_eq!(lost.len(), 1, "told once:\n{}", out.stderr);
    assert!(
        lines[lost[0]].starts_with("redlock-run: lock 'told' lost: it could not be refreshed")
            && lines[lost[0]].contains("; stopping COMMAND (SIGTERM, SIGKILL after "),
        "{}",
        out.stderr
    );
    assert!(
        !lines
            .iter()
            .any(|l| l.contains("stopping COMMAND (unconfirmed)")),
        "{}",
        out.stderr
    );
    let exited = lines
        .iter()
        .position(|l| *l == "redlock-run: COMMAND exited")
        .expect("COMMAND exited");
    assert!(lost[0] < exited, "{}", out.stderr);
    assert!(
        !lines[lost[0]..]
            .iter()
            .any(|l| l.contains("failed, retrying")),
        "no retry told after the loss:\n{}",
        out.stderr
    );
}
