//! Every script names every key it touches in KEYS: managed servers
//! (ElastiCache, Upstash, Dragonfly) refuse a script that touches a key it
//! was not given. Each test runs features with MONITOR on: MONITOR shows
//! a script's commands as `[0 lua]` lines right after the client's EVAL,
//! and the server itself (`COMMAND GETKEYS`) says which of their
//! arguments are keys.

use crate::common::*;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const LONG: Duration = Duration::from_secs(30);

/// A raw connection reading a server's MONITOR stream into `lines`.
struct Monitor {
    port: u16,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Monitor {
    fn start(server: &RedisServer) -> Monitor {
        let port = server.port();
        let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect for MONITOR");
        stream.write_all(b"MONITOR\r\n").expect("send MONITOR");
        let mut reader = BufReader::new(stream);
        let mut ok = String::new();
        reader.read_line(&mut ok).expect("MONITOR's answer");
        assert_eq!(ok.trim_end(), "+OK", "MONITOR refused: {ok}");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in reader.lines() {
                let Ok(line) = line else { break };
                sink.lock().unwrap().push(line);
            }
        });
        Monitor { port, lines }
    }

    /// Everything seen so far, once a marker sent after the features has
    /// come through (so nothing they sent is still on its way).
    fn seen(&self, server: &RedisServer) -> Vec<String> {
        let marker = format!("declared-keys-end-{}", self.port);
        let mut conn = server.conn();
        let _: String = redis::cmd("ECHO")
            .arg(&marker)
            .query(&mut conn)
            .expect("ECHO");
        let through = wait_until(LONG, || {
            self.lines
                .lock()
                .unwrap()
                .iter()
                .any(|l| l.contains(&marker))
        });
        assert!(through, "the marker never came through MONITOR");
        self.lines.lock().unwrap().clone()
    }
}

/// The quoted arguments of a MONITOR line (`+ts [db client] "a" "b"`),
/// unescaped as `sdscatrepr` escaped them.
fn monitor_args(line: &str) -> Option<(String, Vec<String>)> {
    let open = line.find('[')?;
    let close = open + line[open..].find(']')?;
    let client = line[open + 1..close].to_string();
    let mut args = Vec::new();
    let bytes = &line.as_bytes()[close + 1..];
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'"' {
            i += 1;
            continue;
        }
        let (arg, next) = quoted(bytes, i + 1);
        args.push(String::from_utf8_lossy(&arg).into_owned());
        i = next;
    }
    Some((client, args))
}

/// One quoted argument from `start` (after its opening quote): its bytes
/// and the index after its closing quote.
fn quoted(bytes: &[u8], start: usize) -> (Vec<u8>, usize) {
    let mut out = Vec::new();
    let mut i = start;
    while i < bytes.len() && bytes[i] != b'"' {
        if bytes[i] != b'\\' || i + 1 >= bytes.len() {
            out.push(bytes[i]);
            i += 1;
            continue;
        }
        let (byte, len) = match bytes[i + 1] {
            b'n' => (b'\n', 2),
            b'r' => (b'\r', 2),
            b't' => (b'\t', 2),
            b'a' => (7, 2),
            b'b' => (8, 2),
            b'x' => {
                let hex =
                    std::str::from_utf8(bytes.get(i + 2..i + 4).unwrap_or(b"3f")).unwrap_or("3f");
                (u8::from_str_radix(hex, 16).unwrap_or(b'?'), 4)
            }
            other => (other, 2),
        };
        out.push(byte);
        i += len;
    }
    (out, i + 1)
}

/// Commands without keys that scripts send (channels are no keys).
const KEYLESS: [&str; 5] = ["PUBLISH", "PUBSUB", "INFO", "TIME", "PING"];

/// The keys among a command's arguments, as the server says.
fn keys_of(conn: &mut redis::Connection, args: &[String]) -> Vec<String> {
    let name = args
        .first()
        .map(|a| a.to_ascii_uppercase())
        .unwrap_or_default();
    if KEYLESS.contains(&name.as_str()) {
        return Vec::new();
    }
    let mut cmd = redis::cmd("COMMAND");
    cmd.arg("GETKEYS").arg(args);
    cmd.query(conn)
        .unwrap_or_else(|e| panic!("COMMAND GETKEYS {args:?}: {e}"))
}

/// Each key a script touched without having it in KEYS, with the
/// command that touched it: `(key, command)`.
fn undeclared(server: &RedisServer, lines: &[String]) -> BTreeSet<(String, String)> {
    let mut conn = server.conn();
    let mut found = BTreeSet::new();
    let mut declared: Option<BTreeSet<String>> = None;
    let mut scripts = 0;
    for line in lines {
        let Some((client, args)) = monitor_args(line) else {
            continue;
        };
        if !client.ends_with(" lua") {
            declared = eval_keys(&args);
            scripts += usize::from(declared.is_some());
            continue;
        }
        let Some(keys) = &declared else {
            panic!("a script's command with no EVAL before it: {line}")
        };
        for key in keys_of(&mut conn, &args) {
            if !keys.contains(&key) {
                found.insert((key, args[0].to_ascii_uppercase()));
            }
        }
    }
    assert!(scripts > 0, "no script ran: {lines:?}");
    found
}

/// The KEYS of an EVAL or EVALSHA (None for any other command).
fn eval_keys(args: &[String]) -> Option<BTreeSet<String>> {
    let name = args.first()?.to_ascii_uppercase();
    if !matches!(name.as_str(), "EVAL" | "EVALSHA" | "EVAL_RO" | "EVALSHA_RO") {
        return None;
    }
    let n: usize = args.get(2)?.parse().ok()?;
    Some(args.iter().skip(3).take(n).cloned().collect())
}

/// Run `features` against servers with MONITOR on, and fail naming each
/// key a script touched without declaring it.
fn check(servers: &[RedisServer], features: impl FnOnce()) {
    let monitors: Vec<Monitor> = servers.iter().map(Monitor::start).collect();
    features();
    let mut found = BTreeSet::new();
    for (server, monitor) in servers.iter().zip(&monitors) {
        found.extend(undeclared(server, &monitor.seen(server)));
    }
    assert!(
        found.is_empty(),
        "scripts touched keys they were not given in KEYS (key, command): {found:#?}"
    );
}

fn ok(cmd: &mut std::process::Command, code: i32) -> Output {
    let out = run_with_timeout(cmd, LONG);
    assert_eq!(out.code, Some(code), "{cmd:?}: {out:?}");
    out
}

#[test]
fn parsing_the_monitor_stream() {
    let line = r#"+1.5 [0 lua] "HSET" "p:{a \"b\"}:holder" "x\x01\n" "y""#;
    let (client, args) = monitor_args(line).expect("parsed");
    assert_eq!(client, "0 lua");
    assert_eq!(args, ["HSET", "p:{a \"b\"}:holder", "x\u{1}\n", "y"]);
    let eval = ["EVAL", "return 1", "2", "k1", "k2", "a"].map(String::from);
    let keys = eval_keys(&eval).expect("an EVAL");
    assert_eq!(keys.into_iter().collect::<Vec<_>>(), ["k1", "k2"]);
}

#[test]
fn a_plain_run_busy_min_hold_nested_and_the_admin_commands() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = TestDir::new();
    check(std::slice::from_ref(&server), || {
        ok(&mut server.job("plain").exec(["true"]), 0);
        let hold = Hold::new(&dir);
        let mut held = hold.spawn(
            &mut server
                .job("plain")
                .args(["--ttl", "5s"])
                .sh(hold.script("true")),
            LONG,
        );
        ok(&mut server.job("plain").args(["-n"]).exec(["true"]), 75);
        ok(redlock(&url).args(["status", "plain"]), 0);
        ok(redlock(&url).args(["list", "--json"]), 0);
        hold.go();
        assert_eq!(held.wait_timeout(LONG).code, Some(0));
        ok(
            &mut server
                .job("plain")
                .args(["--ttl", "1s", "--min-hold", "700ms"])
                .exec(["true"]),
            0,
        );
        let nested = format!("{} --redis {url} -k plain --wait 0 -- true", bin());
        ok(&mut server.job("plain").sh(nested), 0);
        ok(redlock(&url).args(["doctor", "--key", "plain"]), 0);
        ok(redlock(&url).args(["force-release", "plain"]), 1);
        ok(redlock(&url).args(["wait", "plain", "--timeout", "5s"]), 0);
    });
}

/// A holder of `key` (with `extra` options) that runs until `hold.go()`.
fn holder(server: &RedisServer, hold: &Hold, key: &str, extra: &[&str]) -> RunningChild {
    let cmd = server.job(key).args(["--ttl", "5s"]).args(extra);
    hold.spawn(&mut cmd.sh(hold.script("true")), LONG)
}

/// Two waiters behind a holder under `policy`; returns their exit codes.
fn line_of_two(server: &RedisServer, dir: &TestDir, key: &str, policy: &str) -> Vec<Option<i32>> {
    let hold = Hold::named(dir, key);
    let mut first = holder(server, &hold, key, &[]);
    let waiter = || {
        server
            .job(key)
            .args(["-v", "--queue", policy, "--ttl", "1s"])
            .exec(["true"])
    };
    let mut one = spawn_waiting(&mut waiter(), LONG);
    let mut two = spawn_waiting(&mut waiter(), LONG);
    ok(redlock(&server.url()).args(["status", key, "--json"]), 0);
    hold.go();
    assert_eq!(first.wait_timeout(LONG).code, Some(0));
    vec![one.wait_timeout(LONG).code, two.wait_timeout(LONG).code]
}

#[test]
fn each_queue_policy() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    check(std::slice::from_ref(&server), || {
        assert_eq!(
            line_of_two(&server, &dir, "old", "oldest-first"),
            [Some(0); 2]
        );
        assert_eq!(
            line_of_two(&server, &dir, "new", "newest-first"),
            [Some(0); 2]
        );
        assert_eq!(
            line_of_two(&server, &dir, "wins", "newest-wins"),
            [Some(79), Some(0)]
        );
    });
}

#[test]
fn revocation_and_wait_key_while_held() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = TestDir::new();
    check(std::slice::from_ref(&server), || {
        let hold = Hold::new(&dir);
        let mut held = holder(&server, &hold, "rev", &[]);
        let mut waiting = spawn_waiting(redlock(&url).args(["-v", "wait", "rev"]), LONG);
        ok(redlock(&url).args(["force-release", "rev"]), 0);
        assert_eq!(held.wait_timeout(LONG).code, Some(70));
        assert_eq!(waiting.wait_timeout(LONG).code, Some(0));
        ok(redlock(&url).args(["force-release", "rev", "--now"]), 1);
    });
}

#[test]
fn a_semaphore_its_status_and_its_revocation() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = TestDir::new();
    check(std::slice::from_ref(&server), || {
        let sem = ["--limit", "2"];
        let (a, b) = (Hold::named(&dir, "a"), Hold::named(&dir, "b"));
        let mut one = holder(&server, &a, "sem", &sem);
        let mut two = holder(&server, &b, "sem", &sem);
        ok(
            &mut server.job("sem").args(["-n"]).args(sem).exec(["true"]),
            75,
        );
        let mut third = spawn_waiting(
            &mut server.job("sem").args(["-v"]).args(sem).exec(["true"]),
            LONG,
        );
        ok(redlock(&url).args(["status", "sem"]), 0);
        ok(redlock(&url).args(["list"]), 0);
        a.go();
        assert_eq!(one.wait_timeout(LONG).code, Some(0));
        assert_eq!(third.wait_timeout(LONG).code, Some(0));
        ok(redlock(&url).args(["force-release", "sem"]), 0);
        assert_eq!(two.wait_timeout(LONG).code, Some(70));
        ok(&mut server.job("sem").args(sem).exec(["true"]), 0);
    });
}

#[test]
fn redlock_over_three_nodes() {
    let servers = RedisServer::many(3);
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let dir = TestDir::new();
    check(&servers, || {
        let all = || redlock_on(&urls);
        ok(&mut Job::using(all(), "rl").exec(["true"]), 0);
        let hold = Hold::new(&dir);
        let mut held = hold.spawn(
            &mut Job::using(all(), "rl")
                .args(["--ttl", "5s"])
                .sh(hold.script("true")),
            LONG,
        );
        ok(&mut Job::using(all(), "rl").args(["-n"]).exec(["true"]), 75);
        ok(all().args(["status", "rl"]), 0);
        hold.go();
        assert_eq!(held.wait_timeout(LONG).code, Some(0));
        ok(
            &mut Job::using(all(), "rl")
                .args(["--limit", "2"])
                .exec(["true"]),
            0,
        );
        ok(all().args(["force-release", "rl"]), 1);
    });
}

/// The previous version's binary (`$REDLOCK_TEST_OLD_BINARY`, built from
/// main before scripts declared every key), against `server`.
fn old_version(server: &RedisServer) -> Option<std::process::Command> {
    let path = std::env::var("REDLOCK_TEST_OLD_BINARY").ok()?;
    let mut cmd = std::process::Command::new(path);
    cmd.env_remove("REDLOCK_REDIS_URL").env_remove("REDIS_URL");
    for var in LABEL_VARS {
        cmd.env_remove(var);
    }
    cmd.args(["--redis", &server.url()]);
    Some(cmd)
}

/// A holder run by `base` that runs until `hold.go()`.
fn hold_with(base: std::process::Command, hold: &Hold, key: &str, extra: &[&str]) -> RunningChild {
    let job = Job::using(base, key).args(extra);
    hold.spawn(&mut job.sh(hold.script("true")), LONG)
}

/// Mixed fleets during an upgrade: a run of the previous version and one
/// of this one exclude each other, wait for each other in one line, and
/// share a semaphore's slots. Skipped without `$REDLOCK_TEST_OLD_BINARY`.
#[test]
fn the_previous_version_and_this_one_exclude_each_other() {
    let server = RedisServer::start();
    let Some(_) = old_version(&server) else {
        eprintln!("skipped: no REDLOCK_TEST_OLD_BINARY");
        return;
    };
    let old = || old_version(&server).expect("old binary");
    let new = || redlock(&server.url());
    let dir = TestDir::new();
    for (first, second, name) in [(old(), new(), "o"), (new(), old(), "n")] {
        let hold = Hold::named(&dir, name);
        let mut held = hold_with(first, &hold, name, &["--ttl", "5s"]);
        ok(&mut Job::using(new(), name).args(["-n"]).exec(["true"]), 75);
        ok(&mut Job::using(old(), name).args(["-n"]).exec(["true"]), 75);
        let mut waiter = spawn_waiting(
            &mut Job::using(second, name).args(["-v"]).exec(["true"]),
            LONG,
        );
        ok(redlock(&server.url()).args(["status", name]), 0);
        hold.go();
        assert_eq!(held.wait_timeout(LONG).code, Some(0));
        assert_eq!(waiter.wait_timeout(LONG).code, Some(0));
    }
    let sem = ["--limit", "2", "--ttl", "5s"];
    let (a, b) = (Hold::named(&dir, "a"), Hold::named(&dir, "b"));
    let mut one = hold_with(old(), &a, "sem", &sem);
    let mut two = hold_with(new(), &b, "sem", &sem);
    ok(
        &mut Job::using(new(), "sem")
            .args(["-n"])
            .args(sem)
            .exec(["true"]),
        75,
    );
    ok(
        &mut Job::using(old(), "sem")
            .args(["-n"])
            .args(sem)
            .exec(["true"]),
        75,
    );
    let status = ok(redlock(&server.url()).args(["status", "sem", "--json"]), 0);
    assert_eq!(status.stdout.matches("\"pid\"").count(), 2, "{status:?}");
    ok(redlock(&server.url()).args(["force-release", "sem"]), 0);
    assert_eq!(one.wait_timeout(LONG).code, Some(70));
    assert_eq!(two.wait_timeout(LONG).code, Some(70));
}

/// A shared holder of `key` with its token in `<name>.token`, until
/// `hold.go()`.
fn shared_holder(server: &RedisServer, dir: &TestDir, name: &str) -> (Hold, RunningChild) {
    let hold = Hold::named(dir, name);
    let token = dir.file(&format!("{name}.token"));
    let script = format!(
        "echo \"$REDLOCK_TOKEN\" > '{}'; {}",
        token.display(),
        hold.script("true")
    );
    let cmd = server.job("sh").args(["-s", "--ttl", "5s"]);
    let held = hold.spawn(&mut cmd.sh(script), LONG);
    (hold, held)
}

#[test]
fn shared_holders_their_line_and_the_admin_commands() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = TestDir::new();
    check(std::slice::from_ref(&server), || {
        let (a, mut one) = shared_holder(&server, &dir, "a");
        let (b, mut two) = shared_holder(&server, &dir, "b");
        ok(&mut server.job("sh").args(["-n"]).exec(["true"]), 75);
        let mut excl = spawn_waiting(&mut server.job("sh").args(["-v"]).exec(["true"]), LONG);
        ok(&mut server.job("sh").args(["-n", "-s"]).exec(["true"]), 75);
        let mut later = spawn_waiting(
            &mut server.job("sh").args(["-v", "-s"]).exec(["true"]),
            LONG,
        );
        ok(redlock(&url).args(["status", "sh", "--json"]), 0);
        ok(redlock(&url).args(["list"]), 0);
        let token = dir.read("a.token").expect("a's token");
        ok(
            redlock(&url).args(["force-release", "sh", "--token", token.trim()]),
            0,
        );
        assert_eq!(one.wait_timeout(LONG).code, Some(70));
        b.go();
        a.go();
        assert_eq!(two.wait_timeout(LONG).code, Some(0));
        assert_eq!(excl.wait_timeout(LONG).code, Some(0));
        assert_eq!(later.wait_timeout(LONG).code, Some(0));
        let (c, mut three) = shared_holder(&server, &dir, "c");
        ok(redlock(&url).args(["force-release", "sh", "--now"]), 0);
        assert_eq!(three.wait_timeout(LONG).code, Some(70));
        c.go();
    });
}

#[test]
fn shared_over_redlock() {
    let servers = RedisServer::many(3);
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let dir = TestDir::new();
    check(&servers, || {
        let all = || redlock_on(&urls);
        let hold = Hold::new(&dir);
        let mut held = hold.spawn(
            &mut Job::using(all(), "rs")
                .args(["-s", "--ttl", "5s"])
                .sh(hold.script("true")),
            LONG,
        );
        ok(&mut Job::using(all(), "rs").args(["-s"]).exec(["true"]), 0);
        ok(&mut Job::using(all(), "rs").args(["-n"]).exec(["true"]), 75);
        ok(all().args(["status", "rs"]), 0);
        // A waiting exclusive run marks its place; a shared one meets it.
        let mut excl = spawn_waiting(
            &mut Job::using(all(), "rs").args(["-v"]).exec(["true"]),
            LONG,
        );
        let marked = wait_until(LONG, || {
            servers
                .iter()
                .all(|s| exists(&mut s.conn(), "redlock:{rs}:waiters"))
        });
        assert!(marked);
        ok(
            &mut Job::using(all(), "rs").args(["-n", "-s"]).exec(["true"]),
            75,
        );
        hold.go();
        assert_eq!(held.wait_timeout(LONG).code, Some(0));
        assert_eq!(excl.wait_timeout(LONG).code, Some(0));
        ok(all().args(["force-release", "rs"]), 1);
    });
}

/// The release tells the waiter it wakes the line's keys (`released
/// NAME...`), which that waiter's acquire must declare: it takes the lock
/// in one call, not one that is asked for them and a second that gives
/// them (a round trip on every hand-over with a line behind the waiter).
/// The waiters join right before the release, so the first in line never
/// saw the second.
#[test]
fn a_woken_waiter_is_told_the_lines_keys_and_takes_the_lock_in_one_call() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let hold = Hold::new(&dir);
    let mut held = hold.spawn(&mut server.job("told").sh(hold.script("true")), LONG);
    let monitor = Monitor::start(&server);
    let mut first = spawn_piped(&mut server.job("told").exec(["true"]));
    assert!(wait_until(LONG, || queued(&server, "told") == 1));
    let mut second = spawn_piped(&mut server.job("told").exec(["true"]));
    assert!(wait_until(LONG, || queued(&server, "told") == 2));
    hold.go();
    assert_eq!(held.wait_timeout(LONG).code, Some(0));
    assert_eq!(first.wait_timeout(LONG).code, Some(0));
    assert_eq!(second.wait_timeout(LONG).code, Some(0));
    let lines: Vec<(String, Vec<String>)> = monitor
        .seen(&server)
        .iter()
        .filter_map(|l| monitor_args(l))
        .collect();
    let lua = |(client, _): &(String, Vec<String>)| client.ends_with(" lua");
    // The release's wake-up of the first waiter, naming both waiters.
    let woken = lines
        .iter()
        .position(|(client, args)| {
            client.ends_with(" lua")
                && args[0] == "PUBLISH"
                && args[1].contains(":wake:")
                && args[2].starts_with("released")
        })
        .unwrap_or_else(|| panic!("no wake-up: {lines:#?}"));
    let wake = &lines[woken].1;
    let token = wake[1].rsplit(":wake:").next().unwrap().to_string();
    let named: Vec<&str> = wake[2].split(' ').skip(1).collect();
    assert_eq!(named.len(), 2, "both waiters' keys: {wake:?}");
    assert!(named
        .iter()
        .all(|n| n.starts_with("redlock:{told}:waiters:")));
    // The first waiter's acquire: the script that takes it off the line.
    let took = lines[woken..]
        .iter()
        .position(|(client, args)| {
            client.ends_with(" lua") && args[0] == "ZREM" && args.get(2) == Some(&token)
        })
        .map(|i| woken + i)
        .unwrap_or_else(|| panic!("the first waiter never took the lock: {lines:#?}"));
    let caller = lines[..took]
        .iter()
        .rev()
        .find(|l| !lua(l))
        .map(|(client, _)| client.clone())
        .expect("a client's call before the script");
    let calls: Vec<&Vec<String>> = lines[woken..took]
        .iter()
        .filter(|(client, _)| *client == caller)
        .map(|(_, args)| args)
        .collect();
    assert_eq!(
        calls.len(),
        1,
        "the woken waiter's calls until it held the lock: {calls:#?}"
    );
}
