//! `--replace-running` (CI's cancel-in-progress): the running holder is
//! revoked and stopped through the normal stop sequence, exits 70 saying
//! "replaced", and the new run starts only once the old job's whole tree
//! has ended.

use crate::common::*;

use std::process::Command;
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

fn run(cmd: &mut Command) -> Output {
    run_with_timeout(cmd, T)
}

/// A job that appends `start NAME` to `log`, says it started, and runs
/// until `go` exists; on SIGTERM it appends `term NAME`, and its
/// background grandchild, stopped too, appends `gone NAME` a moment
/// later, on its way out.
fn job(dir: &TestDir, name: &str) -> String {
    let log = dir.file("log");
    let log = log.display();
    format!(
        "echo \"start {name}\" >> '{log}'; \
         ( trap 'sleep 0.3; echo \"gone {name}\" >> \"{log}\"; exit 0' TERM; \
           while :; do sleep 0.05; done ) & \
         echo $! > '{grandchild}'; \
         trap 'echo \"term {name}\" >> \"{log}\"; wait; exit 143' TERM; \
         touch '{started}'; \
         while [ ! -e '{go}' ]; do sleep 0.02; done; \
         kill $!; wait; echo \"end {name}\" >> '{log}'",
        grandchild = dir.file(&format!("{name}.grandchild")).display(),
        started = dir.file(&format!("{name}.started")).display(),
        go = dir.file("go").display(),
    )
}

fn log_lines(dir: &TestDir) -> Vec<String> {
    dir.read("log")
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// No two jobs ever ran at once: a job starts only once the one before
/// it has gone (its grandchild wrote `gone` on its way out); `term` comes
/// while it runs, `end` after its own `gone`.
fn assert_one_at_a_time(lines: &[String]) {
    let (mut running, mut last_gone): (Option<&str>, Option<&str>) = (None, None);
    for line in lines {
        let (what, who) = line.split_once(' ').expect("WHAT NAME");
        match what {
            "start" => {
                assert!(
                    running.is_none(),
                    "{who} started beside {running:?}: {lines:?}"
                );
                running = Some(who);
            }
            "term" => assert_eq!(running, Some(who), "{lines:?}"),
            "gone" => {
                assert_eq!(running, Some(who), "{lines:?}");
                (running, last_gone) = (None, Some(who));
            }
            _ => assert_eq!((running, last_gone), (None, Some(who)), "{lines:?}"),
        }
    }
}

#[test]
fn the_holder_is_stopped_and_the_new_run_starts_after_its_whole_tree() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = TestDir::new();
    let started = dir.file("old.started");
    let mut old = spawn_started(
        &mut Job::new(&url, "ci")
            .args(["--ttl", "10s"])
            .sh(job(&dir, "old")),
        &started,
        T,
    );
    let new = format!("echo \"start new\" >> '{}'", dir.file("log").display());
    let out = run(&mut Job::new(&url, "ci").args(["--replace-running"]).sh(&new));
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stderr.contains("replacing "), "{out:?}");

    let old = old.wait_timeout(T);
    assert_eq!(old.code, Some(70), "{old:?}");
    assert!(
        old.stderr
            .contains("lost: it was replaced by a newer run (--replace-running)"),
        "{old:?}"
    );
    // SIGTERM reached the job, its grandchild wrote on its way out, and
    // only then did the new run's COMMAND start.
    assert_eq!(
        log_lines(&dir),
        ["start old", "term old", "gone old", "start new"],
        "{old:?}"
    );
}

#[test]
fn the_replaced_run_says_why_in_json() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = TestDir::new();
    let started = dir.file("old.started");
    let mut old = spawn_started(
        &mut Job::new(&url, "k")
            .args(["--ttl", "6s", "--log-format", "json"])
            .sh(job(&dir, "old")),
        &started,
        T,
    );
    let out = run(&mut Job::new(&url, "k")
        .args(["--replace-running", "-n"])
        .exec(["true"]));
    assert_eq!(out.code, Some(0), "-n waits for the replaced run: {out:?}");
    let old = old.wait_timeout(T);
    assert_eq!(old.code, Some(70), "{old:?}");
    let lost: Vec<serde_json::Value> = old
        .stderr
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|e: &serde_json::Value| e["event"] == "lost")
        .collect();
    assert_eq!(lost.len(), 1, "{old:?}");
    assert_eq!(lost[0]["reason"], "replaced", "{old:?}");
}

#[test]
fn two_replacing_runs_end_with_one_running_never_two() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = TestDir::new();
    let holder = |name: &str, extra: &[&str]| {
        spawn_piped(
            &mut Job::new(&url, "deploy")
                .args(["--ttl", "3s"])
                .args(extra)
                .sh(job(&dir, name)),
        )
    };
    let mut first = holder("first", &[]);
    assert!(wait_for_file(dir.file("first.started"), T));
    let mut a = holder("a", &["--replace-running"]);
    let mut b = holder("b", &["--replace-running"]);
    assert_eq!(first.wait_timeout(T).code, Some(70));
    // One of them is replaced by the other (or, both having revoked
    // `first`, the later one in line replaces the one served first).
    assert!(wait_until(T, || a.has_exited() || b.has_exited()));
    let (mut gone, mut kept, name) = match a.has_exited() {
        true => (a, b, "b"),
        false => (b, a, "a"),
    };
    let out = gone.wait_timeout(T);
    assert_eq!(out.code, Some(70), "{out:?}");
    assert!(wait_for_file(dir.file(&format!("{name}.started")), T));
    assert!(!kept.has_exited());
    std::fs::write(dir.file("go"), "").unwrap();
    let out = kept.wait_timeout(T);
    assert_eq!(out.code, Some(0), "{out:?}");
    let lines = log_lines(&dir);
    assert_one_at_a_time(&lines);
    assert_eq!(
        lines.last().map(String::as_str),
        Some(&*format!("end {name}")),
        "{lines:?}"
    );
}

#[test]
fn a_holder_killed_while_being_replaced_leaves_nothing_running() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = TestDir::new();
    let started = dir.file("old.started");
    // The job ignores SIGTERM: it is still running when its redlock-run
    // is SIGKILLed in the middle of the stop sequence.
    let stubborn = format!(
        "trap '' TERM; sleep 100 & echo $! > '{g}'; echo $$ > '{c}'; touch '{s}'; \
         while :; do sleep 0.05; done",
        g = dir.file("grandchild").display(),
        c = dir.file("child").display(),
        s = started.display()
    );
    let old = spawn_started(
        &mut Job::new(&url, "k")
            .args(["--ttl", "8s", "--kill-after", "2s"])
            .sh(&stubborn),
        &started,
        T,
    );
    let (child, grandchild) = (read_pid(&dir, "child", T), read_pid(&dir, "grandchild", T));
    let check = dir.file("check");
    let new = format!(
        "for p in {child} {grandchild}; do kill -0 $p 2>/dev/null && echo alive $p; done; \
         echo ran >> '{}'",
        check.display()
    );
    let mut replacing = spawn_piped(&mut Job::new(&url, "k").args(["--replace-running"]).sh(&new));
    assert!(
        wait_until(T, || old.stderr_now().contains("replaced by a newer run")),
        "{}",
        old.stderr_now()
    );
    old.signal(nix::sys::signal::Signal::SIGKILL);
    let out = replacing.wait_timeout(T);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(dir.read("check").as_deref(), Some("ran\n"), "{out:?}");
    assert!(!out.stdout.contains("alive"), "{out:?}");
    assert!(!process_alive(child) && !process_alive(grandchild));
}

#[test]
fn a_hold_is_never_replaced() {
    let server = RedisServer::start();
    let url = server.url();
    let out = run(redlock(&url).args(["hold", "k", "--for", "1m", "--reason", "freeze"]));
    assert_eq!(out.code, Some(0), "{out:?}");
    let out = run(&mut Job::new(&url, "k")
        .args(["--replace-running", "-n"])
        .exec(["true"]));
    assert_eq!(out.code, Some(75), "{out:?}");
    assert!(out.stderr.contains("on hold (freeze)"), "{out:?}");
    assert!(exists(&mut server.conn(), "redlock:{k}"));
}

#[test]
fn replacing_across_three_redlock_nodes_with_one_down() {
    let mut servers = RedisServer::many(3);
    servers[1].kill();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let dir = TestDir::new();
    let started = dir.file("old.started");
    let mut old = spawn_started(
        &mut Job::using(redlock_on(&urls), "k")
            .args(["--ttl", "6s"])
            .sh(job(&dir, "old")),
        &started,
        T,
    );
    let new = format!("echo \"start new\" >> '{}'", dir.file("log").display());
    let out = run(&mut Job::using(redlock_on(&urls), "k")
        .args(["--replace-running"])
        .sh(&new));
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(old.wait_timeout(T).code, Some(70));
    assert_eq!(
        log_lines(&dir),
        ["start old", "term old", "gone old", "start new"]
    );
}

#[test]
fn replace_running_is_for_a_plain_lock() {
    let server = RedisServer::start();
    let out = run(&mut Job::new(&server.url(), "k")
        .args(["--replace-running", "--limit", "2"])
        .exec(["true"]));
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("--limit"), "{out:?}");
}

#[test]
fn replacing_on_a_cluster() {
    let cluster = Cluster::start();
    let url = cluster.url();
    let dir = TestDir::new();
    let started = dir.file("old.started");
    let mut old = spawn_started(
        &mut Job::new(&url, "k")
            .args(["--ttl", "6s"])
            .sh(job(&dir, "old")),
        &started,
        T,
    );
    let new = format!("echo \"start new\" >> '{}'", dir.file("log").display());
    let out = run(&mut Job::new(&url, "k").args(["--replace-running"]).sh(&new));
    assert_eq!(out.code, Some(0), "{out:?}");
    let old = old.wait_timeout(T);
    assert_eq!(old.code, Some(70), "{old:?}");
    assert!(old.stderr.contains("replaced by a newer run"), "{old:?}");
    assert_eq!(
        log_lines(&dir),
        ["start old", "term old", "gone old", "start new"]
    );
}
