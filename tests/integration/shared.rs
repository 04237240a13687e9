//! `-s, --shared`: any number of shared holders at once, none beside an
//! exclusive one; a waiting exclusive run goes before shared runs that
//! come after it; each shared holder refreshes, is fenced, can be lost
//! or force-released on its own. Against real redis-server.

use crate::common::*;

use std::process::Command;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::Value;

const T: Duration = Duration::from_secs(30);

/// A holder of `key` (shared with `-s` in `extra`) that writes its
/// `REDLOCK_MODE`, token and fence to `<name>.env`, says it started and
/// waits for `<name>.go`.
fn holder(base: Command, dir: &TestDir, key: &str, name: &str, extra: &[&str]) -> RunningChild {
    let hold = Hold::named(dir, name);
    let env = dir.file(&format!("{name}.env"));
    let script = format!(
        "echo \"$REDLOCK_MODE $REDLOCK_TOKEN $REDLOCK_FENCE\" > '{env}'; {}",
        hold.script("true"),
        env = env.display()
    );
    let mut cmd = Job::using(base, key).args(extra).sh(script);
    hold.spawn(&mut cmd, T)
}

/// `(mode, token, fence)` that holder `name` was given.
fn env_of(dir: &TestDir, name: &str) -> (String, String, i64) {
    let text = dir.read(&format!("{name}.env")).expect("env file");
    let parts: Vec<&str> = text.split_whitespace().collect();
    let [mode, token, fence] = parts.as_slice() else {
        panic!("{name}.env: {text:?}");
    };
    (
        mode.to_string(),
        token.to_string(),
        fence.parse().expect("a fence"),
    )
}

fn go(dir: &TestDir, name: &str) {
    Hold::named(dir, name).go();
}

/// A run of `key` that appends `name` to `order` when COMMAND starts.
fn appending(base: Command, dir: &TestDir, key: &str, name: &str, extra: &[&str]) -> Command {
    let line = format!("echo {name} >> '{}'", dir.file("order").display());
    Job::using(base, key).args(extra).sh(line)
}

fn code(cmd: &mut Command) -> Option<i32> {
    run_with_timeout(cmd, T).code
}

fn status_json(url: &str, key: &str) -> Value {
    let out = run_with_timeout(redlock(url).args(["status", key, "--json"]), T);
    serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

#[test]
fn shared_holders_overlap_and_an_exclusive_run_waits_for_every_one() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = TestDir::new();
    let mut a = holder(redlock(&url), &dir, "db", "a", &["-s"]);
    let mut b = holder(redlock(&url), &dir, "db", "b", &["--shared"]);
    // Both COMMANDs run at once: each said it started, neither has ended.
    assert!(Hold::named(&dir, "a").started() && Hold::named(&dir, "b").started());
    let (mode_a, token_a, fence_a) = env_of(&dir, "a");
    let (mode_b, token_b, fence_b) = env_of(&dir, "b");
    assert_eq!((mode_a.as_str(), mode_b.as_str()), ("shared", "shared"));
    assert_ne!(token_a, token_b);
    assert!(fence_b > fence_a, "{fence_a} {fence_b}");
    let excl = |o: &[&str]| appending(redlock(&url), &dir, "db", "x", o);
    assert_eq!(code(&mut excl(&["-n"])), Some(75));
    assert_eq!(code(&mut excl(&["-n", "-E", "9"])), Some(9));
    let mut waiting = spawn_waiting(&mut excl(&["-v"]), T);
    go(&dir, "a");
    assert_eq!(a.wait_timeout(T).code, Some(0));
    // One shared holder is left: the exclusive run still waits.
    let status = status_json(&url, "db");
    assert_eq!(
        status["holders"].as_array().map(Vec::len),
        Some(1),
        "{status}"
    );
    assert_eq!(status["waiters_count"], 1, "{status}");
    assert!(dir.read("order").is_none(), "ran beside a shared holder");
    go(&dir, "b");
    assert_eq!(b.wait_timeout(T).code, Some(0));
    assert_eq!(waiting.wait_timeout(T).code, Some(0));
    assert_eq!(dir.read("order").as_deref(), Some("x\n"));
    let mut conn = server.conn();
    assert_eq!(dbsize(&mut conn), 1, "only the fence is left");
}

#[test]
fn a_shared_run_waits_for_an_exclusive_holder() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = TestDir::new();
    let mut excl = holder(redlock(&url), &dir, "db", "x", &[]);
    assert_eq!(env_of(&dir, "x").0, "exclusive");
    let shared = |o: &[&str]| appending(redlock(&url), &dir, "db", "s", &[&["-s"], o].concat());
    assert_eq!(code(&mut shared(&["-n"])), Some(75));
    let mut waiting = spawn_waiting(&mut shared(&["-v"]), T);
    assert!(dir.read("order").is_none());
    go(&dir, "x");
    assert_eq!(excl.wait_timeout(T).code, Some(0));
    assert_eq!(waiting.wait_timeout(T).code, Some(0));
    assert_eq!(dir.read("order").as_deref(), Some("s\n"));
}

#[test]
fn a_waiting_exclusive_run_goes_before_shared_runs_that_come_after_it() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = TestDir::new();
    let mut reader = holder(redlock(&url), &dir, "db", "r", &["-s"]);
    // The writer waits; it appends `x`, then holds until `x.go`.
    let hold = Hold::named(&dir, "x");
    let line = format!(
        "echo x >> '{}'; {}",
        dir.file("order").display(),
        hold.script("true")
    );
    let mut writer = spawn_waiting(
        &mut Job::using(redlock(&url), "db").args(["-v"]).sh(line),
        T,
    );
    // A later shared run does not pass it: busy with -n, else it waits.
    let later = |o: &[&str]| appending(redlock(&url), &dir, "db", "s", &[&["-s"], o].concat());
    assert_eq!(code(&mut later(&["-n"])), Some(75));
    let mut waiting = spawn_waiting(&mut later(&["-v"]), T);
    assert!(dir.read("order").is_none(), "the later shared run passed");
    // In line in that order, each said with its mode.
    let status = status_json(&url, "db");
    let modes: Vec<&str> = status["waiters"]
        .as_array()
        .expect("waiters")
        .iter()
        .map(|w| w["mode"].as_str().unwrap_or("exclusive"))
        .collect();
    assert_eq!(modes, ["exclusive", "shared"], "{status}");
    go(&dir, "r");
    assert_eq!(reader.wait_timeout(T).code, Some(0));
    assert!(wait_for_file(dir.file("x.started"), T));
    go(&dir, "x");
    assert_eq!(writer.wait_timeout(T).code, Some(0));
    assert_eq!(waiting.wait_timeout(T).code, Some(0));
    assert_eq!(dir.read("order").as_deref(), Some("x\ns\n"));
}

#[test]
fn shared_waiters_behind_an_exclusive_holder_all_go_together() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = TestDir::new();
    let mut excl = holder(redlock(&url), &dir, "db", "x", &[]);
    let waiter = |name: &str| {
        let hold = Hold::named(&dir, name);
        let mut cmd = Job::using(redlock(&url), "db")
            .args(["-v", "-s"])
            .sh(hold.script("true"));
        spawn_waiting(&mut cmd, T)
    };
    let mut one = waiter("s1");
    let mut two = waiter("s2");
    go(&dir, "x");
    assert_eq!(excl.wait_timeout(T).code, Some(0));
    // Both hold it at once: both started, neither may go on yet.
    assert!(wait_for_file(dir.file("s1.started"), T));
    assert!(wait_for_file(dir.file("s2.started"), T));
    go(&dir, "s1");
    go(&dir, "s2");
    assert_eq!(one.wait_timeout(T).code, Some(0));
    assert_eq!(two.wait_timeout(T).code, Some(0));
}

#[test]
fn a_shared_holder_whose_slot_is_lost_is_stopped_alone() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = TestDir::new();
    let fast = ["-s", "--ttl", "3s"];
    let mut a = holder(redlock(&url), &dir, "db", "a", &fast);
    let mut b = holder(redlock(&url), &dir, "db", "b", &fast);
    let (_, token_a, _) = env_of(&dir, "a");
    let mut conn = server.conn();
    let removed: i64 = redis::cmd("ZREM")
        .arg("redlock:{db}:holders")
        .arg(&token_a)
        .query(&mut conn)
        .expect("ZREM");
    assert_eq!(removed, 1);
    assert_eq!(a.wait_timeout(T).code, Some(70));
    assert!(!b.has_exited(), "the other shared holder was stopped too");
    let status = status_json(&url, "db");
    assert_eq!(
        status["holders"].as_array().map(Vec::len),
        Some(1),
        "{status}"
    );
    go(&dir, "b");
    assert_eq!(b.wait_timeout(T).code, Some(0));
}

#[test]
fn force_release_revokes_one_shared_holder_or_all() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = TestDir::new();
    let mut a = holder(redlock(&url), &dir, "db", "a", &["-s"]);
    let mut b = holder(redlock(&url), &dir, "db", "b", &["-s"]);
    let mut c = holder(redlock(&url), &dir, "db", "c", &["-s"]);
    let (_, token_a, _) = env_of(&dir, "a");
    let out = run_with_timeout(
        redlock(&url).args(["force-release", "db", "--token", &token_a]),
        T,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.contains("1 shared holder"), "{out:?}");
    assert_eq!(a.wait_timeout(T).code, Some(70));
    assert!(!b.has_exited() && !c.has_exited());
    let gone = run_with_timeout(
        redlock(&url).args(["force-release", "db", "--token", &token_a]),
        T,
    );
    assert_eq!(gone.code, Some(1), "{gone:?}");
    let out = run_with_timeout(redlock(&url).args(["force-release", "db"]), T);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.contains("2 shared holders"), "{out:?}");
    assert_eq!(b.wait_timeout(T).code, Some(70));
    assert_eq!(c.wait_timeout(T).code, Some(70));
    // Revoked and given back: an exclusive run takes it at once.
    assert_eq!(
        code(&mut server.job("db").args(["-w", "10s"]).exec(["true"])),
        Some(0)
    );
}

#[test]
fn status_and_list_show_the_mode_and_every_holder() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = TestDir::new();
    let mut a = holder(redlock(&url), &dir, "db", "a", &["-s"]);
    let mut b = holder(
        redlock(&url),
        &dir,
        "db",
        "b",
        &["-s", "--label", "nightly"],
    );
    let mut x = holder(redlock(&url), &dir, "other", "x", &[]);
    let status = status_json(&url, "db");
    assert_eq!(status["held"], true, "{status}");
    assert_eq!(status["mode"], "shared", "{status}");
    let holders = status["holders"].as_array().expect("holders");
    let tokens: Vec<&str> = holders.iter().filter_map(|h| h["token"].as_str()).collect();
    assert_eq!(tokens, [env_of(&dir, "a").1, env_of(&dir, "b").1]);
    let fences: Vec<i64> = holders.iter().filter_map(|h| h["fence"].as_i64()).collect();
    assert_eq!(fences, [env_of(&dir, "a").2, env_of(&dir, "b").2]);
    assert_eq!(holders[1]["holder"]["label"], "nightly", "{status}");
    assert!(status.get("token").is_none(), "{status}");
    assert_eq!(status_json(&url, "other")["mode"], "exclusive");
    let list = run_with_timeout(redlock(&url).args(["list", "--json"]), T);
    let modes: Vec<String> = json_lines(&list)
        .iter()
        .map(|v| format!("{} {}", v["key"], v["mode"]))
        .collect();
    assert_eq!(modes, [r#""db" "shared""#, r#""other" "exclusive""#]);
    let text = run_with_timeout(redlock(&url).args(["status", "db"]), T);
    assert_eq!(text.code, Some(0));
    assert_eq!(text.stdout.matches("held (shared)").count(), 2, "{text:?}");
    for name in ["a", "b", "x"] {
        go(&dir, name);
    }
    for child in [&mut a, &mut b, &mut x] {
        assert_eq!(child.wait_timeout(T).code, Some(0));
    }
}

#[test]
fn a_killed_shared_holder_lets_the_exclusive_run_in_after_its_ttl() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = TestDir::new();
    let mut a = holder(redlock(&url), &dir, "db", "a", &["-s", "--ttl", "2s"]);
    let mut waiting = spawn_waiting(&mut server.job("db").args(["-v"]).exec(["true"]), T);
    a.signal(Signal::SIGKILL);
    a.wait_timeout(T);
    assert_eq!(waiting.wait_timeout(T).code, Some(0));
}

#[test]
fn shared_with_a_semaphore_is_refused() {
    let server = RedisServer::start();
    let out = run_with_timeout(
        &mut server.job("db").args(["-s", "--limit", "2"]).exec(["true"]),
        T,
    );
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("--limit"), "{out:?}");
    assert_eq!(dbsize(&mut server.conn()), 0);
    // A key held shared is not a semaphore's: refused as another --limit.
    let dir = TestDir::new();
    let mut a = holder(redlock(&server.url()), &dir, "db", "a", &["-s"]);
    let out = run_with_timeout(
        &mut server.job("db").args(["-n", "--limit", "2"]).exec(["true"]),
        T,
    );
    assert_eq!(out.code, Some(2), "{out:?}");
    go(&dir, "a");
    assert_eq!(a.wait_timeout(T).code, Some(0));
}

#[test]
fn over_redlock_with_a_node_down() {
    let mut servers = RedisServer::many(3);
    servers[2].kill();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let dir = TestDir::new();
    let all = || redlock_on(&urls);
    let mut a = holder(all(), &dir, "rl", "a", &["-s"]);
    let mut b = holder(all(), &dir, "rl", "b", &["-s"]);
    assert!(env_of(&dir, "b").2 > env_of(&dir, "a").2);
    let excl = |o: &[&str]| appending(all(), &dir, "rl", "x", o);
    assert_eq!(code(&mut excl(&["-n"])), Some(75));
    let mut waiting = spawn_waiting(&mut excl(&["-v"]), T);
    let status = run_with_timeout(all().args(["status", "rl", "--json"]), T);
    let status: Value = serde_json::from_str(status.stdout.trim()).expect("json");
    assert_eq!(status["mode"], "shared", "{status}");
    assert_eq!(status["holders"].as_array().map(Vec::len), Some(2));
    go(&dir, "a");
    assert_eq!(a.wait_timeout(T).code, Some(0));
    assert!(dir.read("order").is_none());
    go(&dir, "b");
    assert_eq!(b.wait_timeout(T).code, Some(0));
    assert_eq!(waiting.wait_timeout(T).code, Some(0));
    assert_eq!(dir.read("order").as_deref(), Some("x\n"));
}

/// The previous version's binary (`$REDLOCK_TEST_OLD_BINARY`), against
/// `server`.
fn old_version(server: &RedisServer) -> Option<Command> {
    let path = std::env::var("REDLOCK_TEST_OLD_BINARY").ok()?;
    let mut cmd = Command::new(path);
    cmd.env_remove("REDLOCK_REDIS_URL").env_remove("REDIS_URL");
    for var in LABEL_VARS {
        cmd.env_remove(var);
    }
    cmd.args(["--redis", &server.url()]);
    Some(cmd)
}

/// During an upgrade: an older exclusive holder excludes shared runs, and
/// shared holders exclude an older exclusive run, which waits for them.
/// Skipped without `$REDLOCK_TEST_OLD_BINARY`.
#[test]
fn an_older_version_holding_exclusively() {
    let server = RedisServer::start();
    let Some(_) = old_version(&server) else {
        eprintln!("skipped: no REDLOCK_TEST_OLD_BINARY");
        return;
    };
    let old = || old_version(&server).expect("old binary");
    let url = server.url();
    let dir = TestDir::new();
    let mut x = holder(old(), &dir, "db", "x", &[]);
    let shared = |o: &[&str]| appending(redlock(&url), &dir, "db", "s", &[&["-s"], o].concat());
    assert_eq!(code(&mut shared(&["-n"])), Some(75));
    let mut waiting = spawn_waiting(&mut shared(&["-v"]), T);
    go(&dir, "x");
    assert_eq!(x.wait_timeout(T).code, Some(0));
    assert_eq!(waiting.wait_timeout(T).code, Some(0));
    assert_eq!(dir.read("order").as_deref(), Some("s\n"));
    let mut a = holder(redlock(&url), &dir, "db", "a", &["-s"]);
    let mut b = holder(redlock(&url), &dir, "db", "b", &["-s"]);
    let older = |o: &[&str]| appending(old(), &dir, "db", "o", o);
    assert_eq!(code(&mut older(&["-n"])), Some(75));
    let mut old_waiting = spawn_waiting(&mut older(&["-v"]), T);
    // It waits in line: a later shared run does not pass it.
    assert_eq!(code(&mut shared(&["-n"])), Some(75));
    go(&dir, "a");
    assert_eq!(a.wait_timeout(T).code, Some(0));
    assert_eq!(dir.read("order").as_deref(), Some("s\n"));
    go(&dir, "b");
    assert_eq!(b.wait_timeout(T).code, Some(0));
    assert_eq!(old_waiting.wait_timeout(T).code, Some(0));
    assert_eq!(dir.read("order").as_deref(), Some("s\no\n"));
}

/// Two shared holders through `url`, an exclusive run busy then waiting
/// for both, and a later shared run behind it.
fn shared_through(url: &str) {
    let dir = TestDir::new();
    let mut a = holder(redlock(url), &dir, "db", "a", &["-s"]);
    let mut b = holder(redlock(url), &dir, "db", "b", &["-s"]);
    let status = status_json(url, "db");
    assert_eq!(status["mode"], "shared", "{status}");
    assert_eq!(status["holders"].as_array().map(Vec::len), Some(2));
    let excl = |o: &[&str]| appending(redlock(url), &dir, "db", "x", o);
    assert_eq!(code(&mut excl(&["-n"])), Some(75));
    let mut waiting = spawn_waiting(&mut excl(&["-v"]), T);
    let later = |o: &[&str]| appending(redlock(url), &dir, "db", "s", &[&["-s"], o].concat());
    assert_eq!(code(&mut later(&["-n"])), Some(75));
    let mut behind = spawn_waiting(&mut later(&["-v"]), T);
    go(&dir, "a");
    go(&dir, "b");
    for child in [&mut a, &mut b, &mut waiting, &mut behind] {
        assert_eq!(child.wait_timeout(T).code, Some(0));
    }
    assert_eq!(dir.read("order").as_deref(), Some("x\ns\n"));
}

#[test]
fn through_sentinels() {
    let set = SentinelSet::start();
    shared_through(&set.url());
}

#[test]
fn on_a_cluster_from_a_seed_that_does_not_own_the_slot() {
    let cluster = Cluster::start();
    let slot = cluster.slot_of("redlock:{db}");
    shared_through(&cluster.seed_not_owning(slot));
    // Every key of the lock lives in that slot (MOVED would fail a script).
    let mut owner = cluster.conn(cluster.primary_for_slot(slot));
    assert!(get(&mut owner, "redlock:{db}:fence").is_some());
}

/// A shared run needs the semaphore's rules on top of a plain lock's; an
/// exclusive run with a plain lock's rules finds a shared lock busy, not
/// forbidden, and an admin with them sees and revokes its holders.
#[test]
fn acl_the_documented_rules_for_shared_and_plain_runs() {
    const PASS: &str = "sh-pass";
    let base = documented_acl_rules();
    let all = [base.clone(), documented_semaphore_rules()].concat();
    let server = RedisServer::builder()
        .acl_user("reader", PASS, &all.join(" "))
        .acl_user("writer", PASS, &base.join(" "))
        .start();
    let reader = server.url_with(Some("reader"), PASS);
    let writer = server.url_with(Some("writer"), PASS);
    let dir = TestDir::new();
    let mut a = holder(redlock(&reader), &dir, "db", "a", &["-s"]);
    let mut b = holder(redlock(&reader), &dir, "db", "b", &["-s"]);
    let out = run_with_timeout(redlock(&writer).args(["-n", "-k", "db", "--", "true"]), T);
    assert_eq!(out.code, Some(75), "{out:?}");
    assert!(out.stderr.contains("held shared by 2 holders"), "{out:?}");
    let status = status_json(&writer, "db");
    assert_eq!(status["holders"].as_array().map(Vec::len), Some(2));
    let out = run_with_timeout(redlock(&writer).args(["force-release", "db"]), T);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(a.wait_timeout(T).code, Some(70));
    assert_eq!(b.wait_timeout(T).code, Some(70));
    let out = run_with_timeout(
        redlock(&writer).args(["-w", "20s", "-k", "db", "--", "true"]),
        T,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
}

/// Redlock keeps no line, but a waiting exclusive run marks its place on
/// the nodes while the lock is held shared: later shared runs wait
/// behind it there too.
#[test]
fn over_redlock_a_waiting_exclusive_run_goes_before_later_shared_runs() {
    let servers = RedisServer::many(3);
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let dir = TestDir::new();
    let all = || redlock_on(&urls);
    let mut reader = holder(all(), &dir, "rl", "r", &["-s"]);
    let hold = Hold::named(&dir, "x");
    let line = format!(
        "echo x >> '{}'; {}",
        dir.file("order").display(),
        hold.script("true")
    );
    let mut writer = spawn_waiting(&mut Job::using(all(), "rl").args(["-v"]).sh(line), T);
    // Marked in line on every node (from its second try on).
    let marked = wait_until(T, || {
        servers
            .iter()
            .all(|s| exists(&mut s.conn(), "redlock:{rl}:waiters"))
    });
    assert!(marked, "the waiting writer never marked its place");
    let later = |o: &[&str]| appending(all(), &dir, "rl", "s", &[&["-s"], o].concat());
    assert_eq!(code(&mut later(&["-n"])), Some(75));
    let mut waiting = spawn_waiting(&mut later(&["-v"]), T);
    go(&dir, "r");
    assert_eq!(reader.wait_timeout(T).code, Some(0));
    assert!(wait_for_file(dir.file("x.started"), T));
    go(&dir, "x");
    assert_eq!(writer.wait_timeout(T).code, Some(0));
    assert_eq!(waiting.wait_timeout(T).code, Some(0));
    assert_eq!(dir.read("order").as_deref(), Some("x\ns\n"));
    // Nothing of the marks is left behind (they lapse within seconds).
    let gone = wait_until(T, || {
        servers
            .iter()
            .all(|s| !exists(&mut s.conn(), "redlock:{rl}:waiters"))
    });
    assert!(gone, "the marks outlived the wait");
}

/// The queue policies: newest-first does not let a shared run pass a
/// waiting exclusive one; newest-wins replaces the older waiters, of
/// either kind; --queue-max counts shared waiters as any.
#[test]
fn shared_runs_and_the_queue_policies() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = TestDir::new();
    let mut x = holder(redlock(&url), &dir, "db", "x", &[]);
    let excl = |o: &[&str]| appending(redlock(&url), &dir, "db", "e", o);
    let mut writer = spawn_waiting(&mut excl(&["-v"]), T);
    let newest = |name: &str, o: &[&str]| {
        let opts = [&["-s"], o].concat();
        appending(redlock(&url), &dir, "db", name, &opts)
    };
    // A line of one is full for a newcomer, shared or not.
    let out = run_with_timeout(&mut newest("f", &["--queue-max", "1"]), T);
    assert_eq!(out.code, Some(75), "{out:?}");
    assert!(out.stderr.contains("full"), "{out:?}");
    let mut first = spawn_waiting(&mut newest("n", &["-v", "--queue", "newest-first"]), T);
    go(&dir, "x");
    assert_eq!(x.wait_timeout(T).code, Some(0));
    assert_eq!(writer.wait_timeout(T).code, Some(0));
    assert_eq!(first.wait_timeout(T).code, Some(0));
    assert_eq!(dir.read("order").as_deref(), Some("e\nn\n"));
    // newest-wins: the newer shared waiter replaces the older ones.
    let mut y = holder(redlock(&url), &dir, "db", "y", &[]);
    let wins = ["-v", "--queue", "newest-wins"];
    let mut older = spawn_waiting(&mut excl(&wins), T);
    let mut newer = spawn_waiting(&mut newest("w", &wins), T);
    assert_eq!(older.wait_timeout(T).code, Some(79));
    go(&dir, "y");
    assert_eq!(y.wait_timeout(T).code, Some(0));
    assert_eq!(newer.wait_timeout(T).code, Some(0));
    assert_eq!(dir.read("order").as_deref(), Some("e\nn\nw\n"));
}

/// `wait KEY` waits until no shared holder is left, not for the first.
#[test]
fn wait_key_waits_for_every_shared_holder() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = TestDir::new();
    let order = dir.file("order");
    let ending = |name: &str, then: &str| {
        let hold = Hold::named(&dir, name);
        let line = format!("{then}echo {name} >> '{}'", order.display());
        let mut cmd = Job::using(redlock(&url), "db")
            .args(["-s"])
            .sh(hold.script(&line));
        hold.spawn(&mut cmd, T)
    };
    let mut a = ending("a", "");
    // b takes its time to end: a wait that returned after a would be first.
    let mut b = ending("b", "sleep 0.5; ");
    let line = format!(
        "{} --redis {url} -v wait db && echo w >> '{}'",
        bin(),
        order.display()
    );
    let mut waiting = spawn_waiting(Command::new("sh").args(["-c", &line]), T);
    go(&dir, "a");
    assert_eq!(a.wait_timeout(T).code, Some(0));
    go(&dir, "b");
    assert_eq!(b.wait_timeout(T).code, Some(0));
    assert_eq!(waiting.wait_timeout(T).code, Some(0));
    assert_eq!(dir.read("order").as_deref(), Some("a\nb\nw\n"));
}

/// Data lost under an exclusive holder while shared runs wait (the chaos
/// campaign's F16, seed 20261207 episode 10): the first shared waiter to
/// find the fence counter started anew stands in for the lost lease, and
/// holds the lock exclusively meanwhile, so that the other shared waiter,
/// whose own try sees no loss (the counter is counting again), does not
/// start beside the old holder's job either. Each waiter is woken by hand,
/// as a release would: the first, then the other once the first stands in.
#[test]
fn data_lost_under_an_exclusive_holder_lets_no_shared_waiter_in_beside_its_job() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let key = "lost-under-shared";
    let (mut holder, holder_pid) = holder_slow_to_notice(&server, &dir, key);
    // Each shared job says whether the holder's job still ran when it began.
    let check = |name: &str| began_beside(holder_pid, &dir.file(name));
    let shared = ["-s", "--ttl", "3s", "-v"];
    let mut a = spawn_waiting(&mut server.job(key).args(shared).sh(check("a")), T);
    let mut b = spawn_waiting(&mut server.job(key).args(shared).sh(check("b")), T);
    let line = line_of(&server, key);
    assert_eq!(line.len(), 2, "{line:?}");
    let _: () = redis::cmd("FLUSHALL").query(&mut server.conn()).unwrap();
    let wake = |token: &str| {
        let _: i64 = redis::cmd("PUBLISH")
            .arg(format!("redlock:{{{key}}}:wake:{token}"))
            .arg("released")
            .query(&mut server.conn())
            .unwrap();
    };
    wake(&line[0]);
    let lost = |run: &RunningChild| run.stderr_now().contains("data in Redis was lost");
    assert!(
        wait_until(T, || lost(&a) || lost(&b)),
        "no waiter stood in: {}\n{}",
        a.stderr_now(),
        b.stderr_now()
    );
    // The other tries while the holder's job still runs.
    assert!(process_alive(holder_pid), "the holder's job ended too soon");
    wake(&line[1]);
    let out = holder.wait_timeout(T);
    assert_eq!(out.code, Some(70), "the holder's lock vanished: {out:?}");
    for (name, run) in [("a", &mut a), ("b", &mut b)] {
        let out = run.wait_timeout(T);
        assert_eq!(out.code, Some(0), "{name}: {out:?}");
        assert_eq!(
            dir.read(name).as_deref(),
            Some("alone\n"),
            "{name}: {out:?}"
        );
    }
}

/// F16's first half: the waiter whose try found the counter started anew
/// had seen only an unknown holder with no lease shown. A holder of a lock
/// this tool has granted (its fence counter exists) seen without a lease
/// is seen too: the shared waiter stands in for a lease, holding the lock
/// for its token alone. (One set by hand, with no counter, is not: see
/// `queue::newest_wins_a_waiter_stopped_past_its_mark_does_not_replace_the_newer_one`.)
#[test]
fn a_shared_waiter_that_saw_a_holder_without_a_lease_stands_in_alone() {
    let server = RedisServer::start();
    let key = "lost-unknown-holder";
    let lock = format!("redlock:{{{key}}}");
    // Held with no lease and no record: "an unknown holder", of a lock
    // granted before (fenced).
    let _: () = redis::cmd("MSET")
        .arg(&lock)
        .arg("someone")
        .arg(format!("{lock}:fence"))
        .arg(7)
        .query(&mut server.conn())
        .unwrap();
    let shared = ["-s", "--ttl", "3s", "-v"];
    let mut a = spawn_waiting(&mut server.job(key).args(shared).sh("true"), T);
    let line = line_of(&server, key);
    assert_eq!(line.len(), 1, "{line:?}");
    let _: () = redis::cmd("FLUSHALL").query(&mut server.conn()).unwrap();
    let _: i64 = redis::cmd("PUBLISH")
        .arg(format!("{lock}:wake:{}", line[0]))
        .arg("released")
        .query(&mut server.conn())
        .unwrap();
    assert!(
        wait_until(T, || a.stderr_now().contains("data in Redis was lost")),
        "no stand-in: {}",
        a.stderr_now()
    );
    let held: Option<String> = redis::cmd("GET")
        .arg(&lock)
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(held.as_deref(), Some(line[0].as_str()), "not held alone");
    let out = a.wait_timeout(T);
    assert_eq!(out.code, Some(0), "{out:?}");
}

/// F23 for a shared waiter: its try that took the lock as a stand-in
/// (exclusively) after data was lost had its answer lost (writes paused,
/// so that it timed out and was carried out afterwards). Its next try
/// finds its own stand-in, keeps it, and is told that the counter started
/// anew: it waits out the lost holder's lease before its job starts.
#[test]
fn a_shared_waiter_whose_stand_in_answer_was_lost_still_waits_out_the_holder() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let key = "lost-shared-answer";
    let (mut holder, holder_pid) = holder_slow_to_notice(&server, &dir, key);
    let check = began_beside(holder_pid, &dir.file("a"));
    let shared = ["-s", "--ttl", "3s", "-v"];
    let mut a = spawn_waiting(&mut server.job(key).args(shared).sh(check), T);
    let line = line_of(&server, key);
    assert_eq!(line.len(), 1, "{line:?}");
    let _: () = redis::cmd("FLUSHALL").query(&mut server.conn()).unwrap();
    wake_with_writes_paused(&server, &format!("redlock:{{{key}}}:wake:{}", line[0]));
    let out = holder.wait_timeout(T);
    assert_eq!(out.code, Some(70), "the holder's lock vanished: {out:?}");
    let out = a.wait_timeout(T);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stderr.contains("timed out"),
        "no answer was lost: {out:?}"
    );
    assert_eq!(dir.read("a").as_deref(), Some("alone\n"), "{out:?}");
    assert!(out.stderr.contains("data in Redis was lost"), "{out:?}");
}
