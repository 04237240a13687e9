//! The run mode end to end: exit codes, what the child sees, what is in
//! Redis before, during and after, waiting, refresh, and mutual exclusion.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use crate::common::*;

const LONG: Duration = Duration::from_secs(30);

#[test]
fn exit_codes_pass_through() {
    let server = RedisServer::start();
    for code in [0, 3, 42] {
        let out = run_with_timeout(&mut server.job("codes").sh(format!("exit {code}")), LONG);
        assert_eq!(out.code, Some(code), "{out:?}");
    }
    let out = run_with_timeout(&mut server.job("codes").sh("kill -TERM $$"), LONG);
    assert_eq!(out.code, Some(128 + 15), "{out:?}");
    let out = run_with_timeout(&mut server.job("codes").sh("kill -KILL $$"), LONG);
    assert_eq!(out.code, Some(128 + 9), "{out:?}");
    // A real-time signal too (nix's wait status has no room for one).
    let out = run_with_timeout(&mut server.job("codes").sh("kill -40 $$"), LONG);
    assert_eq!(out.code, Some(128 + 40), "{out:?}");
}

#[test]
fn command_not_found_or_not_executable() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let out = run_with_timeout(
        redlock(&server.url()).args(["-k", "x", "--", "no-such-command-redlock-test"]),
        LONG,
    );
    assert_eq!(out.code, Some(127), "{out:?}");
    assert!(
        out.stderr.contains("no-such-command-redlock-test"),
        "{out:?}"
    );

    let not_exec = dir.file("not-executable");
    std::fs::write(&not_exec, "#!/bin/sh\necho ran\n").unwrap();
    let out = run_with_timeout(
        redlock(&server.url())
            .args(["-k", "x", "--"])
            .arg(&not_exec),
        LONG,
    );
    assert_eq!(out.code, Some(126), "{out:?}");
    assert!(!out.stdout.contains("ran"));
    // The lock was given back in both cases.
    assert!(!exists(&mut server.conn(), "redlock:{x}"));
}

#[test]
fn shell_mode_runs_the_line_with_sh() {
    let server = RedisServer::start();
    let out = run_with_timeout(
        redlock(&server.url()).args(["-k", "sh", "-c", "echo one | tr a-z A-Z; exit 7"]),
        LONG,
    );
    assert_eq!(out.code, Some(7), "{out:?}");
    assert_eq!(out.stdout.trim(), "ONE");
}

#[test]
fn the_lock_is_in_redis_while_the_child_runs_and_gone_after() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let hold = Hold::new(&dir);
    let script = hold.script(&format!("env > '{}'", dir.file("env").display()));
    let mut run = hold.spawn(
        &mut server.job("data").args(["--ttl", "20s"]).sh(&script),
        LONG,
    );

    let mut conn = server.conn();
    let token = get(&mut conn, "redlock:{data}").expect("lock key while running");
    let ttl = pttl(&mut conn, "redlock:{data}");
    assert!(ttl > 0 && ttl <= 20_000, "pttl {ttl}");
    let holder = hgetall(&mut conn, "redlock:{data}:holder");
    assert_eq!(holder.get("token"), Some(&token));
    assert_eq!(holder.get("pid"), Some(&run.pid().to_string()));
    assert_eq!(holder.get("ttl_ms").map(String::as_str), Some("20000"));
    for field in ["host", "user", "command", "acquired_at"] {
        assert!(
            holder.get(field).is_some_and(|v| !v.is_empty()),
            "holder {field}: {holder:?}"
        );
    }
    assert!(holder["command"].contains("sh -c"), "{holder:?}");
    let fence = get(&mut conn, "redlock:{data}:fence").expect("fence counter");
    assert!(pttl(&mut conn, "redlock:{data}:holder") > 0);

    hold.go();
    let out = run.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");

    let env: HashMap<String, String> = dir
        .read("env")
        .expect("child wrote env")
        .lines()
        .filter_map(|l| {
            l.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect();
    assert_eq!(env.get("REDLOCK_KEY").map(String::as_str), Some("data"));
    assert_eq!(env.get("REDLOCK_TOKEN"), Some(&token));
    assert_eq!(env.get("REDLOCK_FENCE"), Some(&fence));
    uuid_v4(&token);

    assert!(!exists(&mut conn, "redlock:{data}"), "lock key left behind");
    assert!(
        !exists(&mut conn, "redlock:{data}:holder"),
        "holder record left behind"
    );
    assert_eq!(
        get(&mut conn, "redlock:{data}:fence"),
        Some(fence),
        "fence counter must remain"
    );
    assert_eq!(
        pttl(&mut conn, "redlock:{data}:fence"),
        -1,
        "fence counter must not expire"
    );
}

fn uuid_v4(token: &str) {
    let parts: Vec<&str> = token.split('-').collect();
    assert_eq!(
        parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
        [8, 4, 4, 4, 12],
        "{token}"
    );
    assert!(parts[2].starts_with('4'), "not a v4 uuid: {token}");
}

#[test]
fn busy_lock_with_no_wait_exits_75_without_running() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let hold = Hold::new(&dir);
    let mut holder = hold.spawn(&mut server.job("busy").sh(hold.script("")), LONG);
    let marker = dir.file("ran");
    let ran = format!("touch '{}'", marker.display());

    let out = run_with_timeout(&mut server.job("busy").args(["-n"]).sh(&ran), LONG);
    assert_eq!(out.code, Some(75), "{out:?}");
    assert!(
        out.stderr.contains(&format!("pid {}", holder.pid())),
        "says who holds it: {out:?}"
    );
    // -E 0: busy is the intended outcome, so nothing to report; -v says
    // why nothing ran, without the words of a failure.
    let out = run_with_timeout(
        &mut server.job("busy").args(["-n", "-E", "0"]).sh(&ran),
        LONG,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stderr, "", "a busy run with -E 0 prints nothing");
    let out = run_with_timeout(
        &mut server.job("busy").args(["-n", "-E", "0", "-v"]).sh(&ran),
        LONG,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stderr.contains("skipping this run"), "{out:?}");
    assert!(!out.stderr.contains("giving up"), "{out:?}");
    let out = run_with_timeout(
        &mut server
            .job("busy")
            .args(["--wait", "0", "-q", "-E", "9"])
            .sh(&ran),
        LONG,
    );
    assert_eq!(out.code, Some(9), "{out:?}");
    assert_eq!(out.stderr, "", "-q prints nothing but errors");

    let start = Instant::now();
    let out = run_with_timeout(
        &mut server.job("busy").args(["--wait", "1s"]).sh(&ran),
        LONG,
    );
    let waited = start.elapsed();
    assert_eq!(out.code, Some(75), "{out:?}");
    assert!(
        waited >= Duration::from_millis(950),
        "gave up too early: {waited:?}"
    );
    assert!(
        !marker.exists(),
        "the command ran although the lock was busy"
    );

    hold.go();
    assert_eq!(holder.wait_timeout(LONG).code, Some(0));
}

#[test]
fn a_waiting_contender_gets_the_lock_after_the_holder_exits() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let hold = Hold::new(&dir);
    let mut holder = hold.spawn(&mut server.job("turns").sh(hold.script("echo first")), LONG);
    // The waiter is blocked, not failed.
    let mut waiter = spawn_waiting(
        &mut server.job("turns").args(["-v"]).sh("echo second"),
        LONG,
    );
    assert!(!waiter.has_exited());
    hold.go();
    assert_eq!(holder.wait_timeout(LONG).code, Some(0));
    let out = waiter.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stdout.trim(), "second");
}

#[test]
fn refresh_keeps_a_short_ttl_alive_for_a_longer_child() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let hold = Hold::new(&dir);
    let mut holder = hold.spawn(
        &mut server
            .job("refresh")
            .args(["--ttl", "2s"])
            .sh(hold.script("exit 0")),
        LONG,
    );
    // The window comes from the lock: watch its PTTL until it has been
    // pushed back up (a refresh) and more than a TTL has passed since the
    // holder record says it was acquired.
    let mut conn = server.conn();
    let record = hgetall(&mut conn, "redlock:{refresh}:holder");
    let acquired = humantime::parse_rfc3339(&record["acquired_at"]).unwrap();
    let (mut last, mut refreshed) = (pttl(&mut conn, "redlock:{refresh}"), 0);
    let past_ttl = wait_until(LONG, || {
        let now = pttl(&mut conn, "redlock:{refresh}");
        assert!(now > 0, "the lock expired under its running holder");
        refreshed += usize::from(now > last);
        last = now;
        let age = std::time::SystemTime::now()
            .duration_since(acquired)
            .unwrap_or_default();
        refreshed >= 2 && age > Duration::from_millis(2500)
    });
    assert!(past_ttl, "never refreshed twice");
    let out = run_with_timeout(&mut server.job("refresh").args(["-n"]).sh("true"), LONG);
    assert_eq!(
        out.code,
        Some(75),
        "a 2s lock must still be held after 2.5s: {out:?}"
    );
    hold.go();
    let out = holder.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
}

#[test]
fn release_leaves_someone_elses_token_alone() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let hold = Hold::new(&dir);
    let mut run = hold.spawn(
        &mut server
            .job("stolen")
            .args(["--ttl", "30s"])
            .sh(hold.script("exit 5")),
        LONG,
    );
    let mut conn = server.conn();
    let _: () = redis::cmd("SET")
        .arg("redlock:{stolen}")
        .arg("someone-else")
        .query(&mut conn)
        .unwrap();
    hold.go();
    let out = run.wait_timeout(LONG);
    assert_eq!(out.code, Some(5), "the child's code stays: {out:?}");
    assert_eq!(
        get(&mut conn, "redlock:{stolen}").as_deref(),
        Some("someone-else")
    );
    assert!(out.stderr.contains("another token"), "warns: {out:?}");
}

#[test]
fn mutual_exclusion_under_contention() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let log = dir.file("log");
    let script = section_script(&log, "0.01");
    contend(16, 5, || {
        let mut cmd = redlock(&server.url());
        cmd.args(["-k", "mutex", "-q", "--", "sh", "-c", &script]);
        cmd
    });
    assert_eq!(
        sections_in(&log),
        (80, 1),
        "all 80 sections ran, one at a time"
    );
}

#[test]
fn bad_input_exits_2_naming_the_option_and_touches_nothing() {
    let server = RedisServer::start();
    let cases: &[(&[&str], &str)] = &[
        (&["-k", "x", "--ttl", "30x", "--", "true"], "--ttl"),
        (&["-k", "x", "--ttl", "0s", "--", "true"], "--ttl"),
        (
            &["-k", "x", "--ttl", "10s", "--refresh", "10s", "--", "true"],
            "--refresh",
        ),
        (
            &["-k", "x", "--ttl", "10s", "--refresh", "20s", "--", "true"],
            "--refresh",
        ),
        (
            &[
                "-k",
                "x",
                "--ttl",
                "10s",
                "--kill-after",
                "10s",
                "--",
                "true",
            ],
            "--kill-after",
        ),
        (&["-k", "x", "--wait", "soon", "--", "true"], "--wait"),
        (
            &["-k", "x", "-E", "300", "--", "true"],
            "--conflict-exit-code",
        ),
        (&["-k", "x"], "COMMAND"),
        (&["-k", "x", "-c", "true", "--", "true"], "--command"),
        (&["-k", "", "--", "true"], "--key"),
        (&["-k", "a\u{1}b", "--", "true"], "--key"),
        (&["--", "true"], "--key"),
    ];
    for (args, names) in cases {
        let out = run_with_timeout(redlock(&server.url()).args(*args), LONG);
        assert_eq!(out.code, Some(2), "{args:?}: {out:?}");
        let first = out.stderr.lines().next().unwrap_or_default();
        assert!(
            first.contains(names),
            "{args:?}: first line should name {names}: {out:?}"
        );
    }
    for url in [
        "http://127.0.0.1:1",
        "redis://127.0.0.1:notaport",
        "not a url",
    ] {
        let out = run_with_timeout(redlock(url).args(["-k", "x", "--", "true"]), LONG);
        assert_eq!(out.code, Some(2), "{url}: {out:?}");
        assert!(
            out.stderr
                .lines()
                .next()
                .unwrap_or_default()
                .contains("--redis"),
            "{out:?}"
        );
    }
    let out = run_with_timeout(
        redlock("redis://user:hunter22@127.0.0.1:notaport").args(["-k", "x", "--", "true"]),
        LONG,
    );
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(!out.stderr.contains("hunter22"), "password shown: {out:?}");
    assert_eq!(
        dbsize(&mut server.conn()),
        0,
        "nothing may be sent to Redis"
    );
}

#[test]
fn unreachable_redis_exits_69_without_running() {
    let mut server = RedisServer::start();
    let url = server.url();
    server.kill();
    let dir = TestDir::new();
    let marker = dir.file("ran");
    let mut cmd = redlock(&url);
    cmd.args(["-k", "down", "--", "touch"]).arg(&marker);
    let out = run_with_timeout(&mut cmd, LONG);
    assert_eq!(out.code, Some(69), "{out:?}");
    assert!(out.stderr.contains(&url), "names the server: {out:?}");
    assert!(!marker.exists(), "the command ran without a lock");
}

/// A herd of runs overflows the server's accept queue, and a restarting
/// server turns connections away for a moment: a run that never reached
/// Redis tries once more before exit 69, and then gives up.
#[test]
fn a_run_turned_away_once_tries_again_and_always_exits_69() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let once = Proxy::dropping_first(server.port(), 1);
    let marker = dir.file("ran");
    let mut cmd = redlock(&once.url());
    cmd.args(["-n", "-v", "-k", "turned", "--", "touch"])
        .arg(&marker);
    let out = run_with_timeout(&mut cmd, LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stderr.contains("trying once more"), "{out:?}");
    assert!(marker.exists(), "the command did not run");
    assert!(exists(&mut server.conn(), "redlock:{turned}:fence"));

    let twice = Proxy::dropping_first(server.port(), 1000);
    let marker = dir.file("ran-twice");
    let mut cmd = redlock(&twice.url());
    cmd.args(["-n", "-k", "turned-twice", "--", "touch"])
        .arg(&marker);
    let out = run_with_timeout(&mut cmd, LONG);
    assert_eq!(out.code, Some(69), "{out:?}");
    assert!(!marker.exists(), "the command ran without a lock");
    assert!(!exists(&mut server.conn(), "redlock:{turned-twice}:fence"));
}

#[test]
fn redis_url_comes_from_the_environment() {
    let server = RedisServer::start();
    let other = RedisServer::start();
    let mut cmd = redlock_bare();
    cmd.env("REDLOCK_REDIS_URL", server.url())
        .env("REDIS_URL", other.url())
        .args(["-k", "env", "--", "true"]);
    assert_eq!(run_with_timeout(&mut cmd, LONG).code, Some(0));
    assert!(exists(&mut server.conn(), "redlock:{env}:fence"));
    assert!(!exists(&mut other.conn(), "redlock:{env}:fence"));

    let mut cmd = redlock_bare();
    cmd.env("REDIS_URL", other.url())
        .args(["-k", "env2", "--prefix", "jobs/", "--", "true"]);
    assert_eq!(run_with_timeout(&mut cmd, LONG).code, Some(0));
    assert!(exists(&mut other.conn(), "jobs/{env2}:fence"));
}

#[test]
fn a_closed_stderr_does_not_kill_the_wrapper() {
    use std::process::Stdio;
    let server = RedisServer::start();
    let dir = TestDir::new();
    let hold = Hold::new(&dir);
    let mut cmd = server.job("pipe").args(["-v"]).sh(hold.script("exit 4"));
    let mut run = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_until(LONG, || hold.started()));
    // Like `redlock-run -v ... 2>&1 | head -1`: the reader goes away.
    drop(run.stderr.take());
    hold.go();
    let status = run.wait().unwrap();
    assert_eq!(status.code(), Some(4), "{status:?}");
    assert!(
        !exists(&mut server.conn(), "redlock:{pipe}"),
        "lock not released"
    );
}

/// Wake-ups of every thread of `pid` so far (voluntary context switches:
/// each is a sleep that ended), from /proc.
fn wakeups(pid: i32) -> u64 {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the holder runs");
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("status")).ok())
        .filter_map(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|n| n.trim().parse::<u64>().ok())
        })
        .sum()
}

/// A holder whose job sleeps does nothing until its next refresh (a third
/// of the TTL away): no thread of it polls. Its refresher used to wake
/// every 100 ms to look for a stop (2,000 holders: a third of a core).
#[test]
fn an_idle_holder_sleeps_until_its_next_refresh() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let started = dir.file("started");
    let mut held = spawn_started(
        redlock(&server.url())
            .args(["-k", "idle", "--ttl", "60s", "--"])
            .args([
                "sh",
                "-c",
                &format!("touch '{}'; sleep 30", started.display()),
            ]),
        &started,
        LONG,
    );
    // Past start-up (the refresher thread starts shortly after COMMAND).
    std::thread::sleep(Duration::from_secs(1));
    let before = wakeups(held.pid());
    std::thread::sleep(Duration::from_secs(4));
    let woke = wakeups(held.pid()) - before;
    held.signal(nix::sys::signal::Signal::SIGTERM);
    let out = held.wait_timeout(LONG);
    // 100 ms slices would be 40 wake-ups; a refresh is 20 s away.
    assert!(woke <= 8, "{woke} wake-ups in 4 s while idle: {out:?}");
}

#[test]
fn without_user_or_logname_the_holder_is_named_from_the_passwd_file() {
    // systemd services and containers set neither; status named "(uid 0)".
    let uid = nix::unistd::getuid().as_raw();
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let name = passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.len() > 2 && f[2] == uid.to_string() && !f[0].starts_with(['+', '-']))
        .map(|f| f[0].to_string())
        .unwrap_or_else(|| format!("uid {uid}"));
    let server = RedisServer::start();
    let dir = TestDir::new();
    let hold = Hold::new(&dir);
    let mut job = server.job("who").sh(hold.script(""));
    job.env_remove("USER").env_remove("LOGNAME");
    let mut holder = hold.spawn(&mut job, LONG);
    let status = run_with_timeout(redlock(&server.url()).args(["status", "who"]), LONG);
    hold.go();
    assert_eq!(holder.wait_timeout(LONG).code, Some(0));
    assert_eq!(status.code, Some(0), "{status:?}");
    assert!(
        status.stdout.contains(&format!("({name})")),
        "status should name the user {name}: {status:?}"
    );
}

#[test]
fn a_script_without_a_shebang_runs_with_sh() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let script = dir.file("plain-script");
    std::fs::write(&script, "echo \"ran with $# args: $1 $2\"\nexit 7\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    // By path, and found on $PATH.
    let by_path = run_with_timeout(
        &mut server
            .job("noshebang")
            .exec([script.to_str().unwrap(), "a", "b c"]),
        LONG,
    );
    assert_eq!(by_path.code, Some(7), "{by_path:?}");
    assert_eq!(by_path.stdout, "ran with 2 args: a b c\n");
    let path = format!("{}:/usr/bin:/bin", dir.path().display());
    let on_path = run_with_timeout(
        server
            .job("noshebang")
            .exec(["plain-script", "x"])
            .env("PATH", path),
        LONG,
    );
    assert_eq!(on_path.code, Some(7), "{on_path:?}");
    assert_eq!(on_path.stdout, "ran with 1 args: x \n");
    // A file that is not executable is still 126, a missing one 127.
    let data = dir.file("data");
    std::fs::write(&data, "echo no\n").unwrap();
    let denied = run_with_timeout(&mut server.job("noshebang").exec([&data]), LONG);
    assert_eq!(denied.code, Some(126), "{denied:?}");
    let missing = run_with_timeout(
        &mut server.job("noshebang").exec(["no-such-command-here"]),
        LONG,
    );
    assert_eq!(missing.code, Some(127), "{missing:?}");
}
