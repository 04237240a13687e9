//! status, list, force-release and the fencing token, against real
//! redis-server processes.

use crate::common::*;

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

const T: Duration = Duration::from_secs(20);

/// A redlock-run holding `key` while `sleep` runs; returns once COMMAND
/// has started (its marker file exists).
fn hold(base: Command, dir: &TestDir, key: &str, extra: &[&str]) -> RunningChild {
    let marker = dir.file(&format!("started-{}", dir_safe(key)));
    let mut cmd = Job::using(base, key)
        .args(extra)
        .sh("touch \"$1\"; exec sleep 60");
    spawn_started(cmd.arg("sh").arg(&marker), &marker, T)
}

fn dir_safe(key: &str) -> String {
    key.bytes().map(|b| format!("{b:02x}")).collect()
}

fn run(cmd: &mut Command) -> Output {
    run_with_timeout(cmd, T)
}

fn connections(conn: &mut redis::Connection) -> i64 {
    let info: String = redis::cmd("INFO").arg("stats").query(conn).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("total_connections_received in INFO stats")
}

#[test]
fn status_of_held_free_and_mixed_keys() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let holder = hold(redlock(&server.url()), &dir, "job", &[]);

    let out = run(redlock(&server.url()).args(["status", "job"]));
    assert_eq!(out.code, Some(0), "{out:?}");
    let expected = format!("job  held by {} pid {} (", hostname(), holder.pid());
    assert!(out.stdout.starts_with(&expected), "{out:?}");
    let fence = get(&mut server.conn(), "redlock:{job}:fence").expect("fence counter");
    assert!(
        out.stdout.contains(&format!(", fence {fence}: sh -c ")),
        "{out:?}"
    );
    assert!(out.stdout.contains("expires in "), "{out:?}");
    assert_eq!(out.stdout.lines().count(), 1);

    let out = run(redlock(&server.url()).args(["status", "idle"]));
    assert_eq!(out.code, Some(1), "{out:?}");
    assert_eq!(out.stdout, "idle  free (never acquired)\n");

    // Several keys: a table, a header and a row each, columns aligned.
    let out = run(redlock(&server.url()).args(["status", "job", "idle"]));
    assert_eq!(out.code, Some(1), "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{out:?}");
    assert!(
        lines[0].starts_with("KEY   STATE  HOLDER ")
            && lines[0].contains("  LABEL  HELD FOR  EXPIRES IN  FENCE ")
            && lines[0].ends_with("  WAITERS  COMMAND"),
        "{out:?}"
    );
    let who = format!("job   held   {} pid {} (", hostname(), holder.pid());
    assert!(lines[1].starts_with(&who), "{out:?}");
    assert!(lines[2].starts_with("idle  free   -  "), "{out:?}");
    let column = |line: &str, name: &str| {
        let at = lines[0].find(name).expect("a column");
        line[at..]
            .split("  ")
            .next()
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(column(lines[1], "FENCE"), fence, "{out:?}");
    assert_eq!(column(lines[2], "FENCE"), "-", "{out:?}");
    assert!(column(lines[1], "COMMAND").starts_with("sh -c "), "{out:?}");

    // Released: free, and the fence is remembered.
    holder.signal(nix::sys::signal::Signal::SIGTERM);
    let mut holder = holder;
    holder.wait_timeout(T);
    let out = run(redlock(&server.url()).args(["status", "job"]));
    assert_eq!(out.code, Some(1), "{out:?}");
    assert_eq!(out.stdout, format!("job  free (last fence {fence})\n"));
}

#[test]
fn status_with_redis_down_exits_69_naming_the_url() {
    let mut server = RedisServer::start();
    let url = server.url();
    server.kill();
    for args in [&["status", "job"][..], &["list"], &["force-release", "job"]] {
        let out = run(redlock(&url).args(args));
        assert_eq!(out.code, Some(69), "{args:?}: {out:?}");
        assert_eq!(out.stdout, "", "{args:?}");
        assert_eq!(out.stderr.lines().count(), 1, "{args:?}: {out:?}");
        assert!(out.stderr.contains(&url), "{args:?}: {out:?}");
    }
}

#[test]
fn status_json_carries_every_field() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let holder = hold(redlock(&server.url()), &dir, "job", &["--ttl", "20s"]);

    let out = run(redlock(&server.url()).args(["status", "job", "idle", "--json"]));
    assert_eq!(out.code, Some(1), "{out:?}");
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 2);

    let held = &lines[0];
    assert_eq!(held["key"], "job");
    assert_eq!(held["held"], true);
    let fence = get(&mut server.conn(), "redlock:{job}:fence").expect("fence counter");
    assert_eq!(held["fence"].as_i64(), fence.parse().ok(), "{held}");
    let ttl = held["ttl_ms"].as_i64().expect("ttl_ms is an integer");
    assert!((1..=20_000).contains(&ttl), "{held}");
    let token = get(&mut server.conn(), "redlock:{job}").expect("lock in Redis");
    assert_eq!(held["token"], token.as_str());
    let h = &held["holder"];
    assert_eq!(h["host"], hostname().as_str());
    assert_eq!(h["pid"].as_i64(), Some(holder.pid() as i64), "{held}");
    assert!(h["user"].as_str().is_some_and(|u| !u.is_empty()), "{held}");
    assert!(
        h["command"]
            .as_str()
            .is_some_and(|c| c.starts_with("sh -c touch")),
        "{held}"
    );
    let at = h["acquired_at"].as_str().expect("acquired_at is a string");
    assert!(at.ends_with('Z'), "not UTC: {at}");
    humantime::parse_rfc3339(at).unwrap_or_else(|e| panic!("not RFC 3339: {at}: {e}"));

    let free = lines[1].as_object().expect("an object");
    let mut fields: Vec<&str> = free.keys().map(String::as_str).collect();
    fields.sort();
    assert_eq!(fields, ["fence", "held", "key"]);
    assert_eq!(free["key"], "idle");
    assert_eq!(free["held"], false);
    assert_eq!(free["fence"], 0);
}

/// Issue 36, item 14: the holder as typed fields (no prose to parse):
/// host, pid, user, label, held_ms, expires_ms, in `status` and `list`.
#[test]
fn json_holder_has_typed_fields() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let args = ["--ttl", "20s", "--label", "nightly #3"];
    let holder = hold(redlock(&server.url()), &dir, "job", &args);
    let read = |what: &[&str]| {
        let out = run(redlock(&server.url()).args(what));
        assert_eq!(out.code, Some(0), "{out:?}");
        json_lines(&out).remove(0)
    };
    let first = read(&["status", "job", "--json"]);
    let h = &first["holder"];
    assert_eq!(h["host"], hostname().as_str(), "{first}");
    assert_eq!(
        h["pid"].as_u64(),
        Some(u64::from(holder.pid().unsigned_abs()))
    );
    assert!(h["user"].as_str().is_some_and(|u| !u.is_empty()), "{first}");
    assert_eq!(h["label"], "nightly #3", "{first}");
    let held = h["held_ms"].as_u64().expect("held_ms is an integer");
    let expires = h["expires_ms"].as_u64().expect("expires_ms is an integer");
    assert!(held < 20_000 && (1..=20_000).contains(&expires), "{first}");
    // The existing fields stay.
    for field in ["acquired_at", "command"] {
        assert!(h[field].is_string(), "{field}: {first}");
    }
    assert!(
        wait_until(T, || read(&["list", "--json"])["holder"]["held_ms"]
            .as_u64()
            .is_some_and(|later| later > held)),
        "held_ms does not grow"
    );
    let listed = read(&["list", "--json"]);
    assert_eq!(listed["holder"]["label"], "nightly #3", "{listed}");
    assert!(listed["holder"]["expires_ms"].is_u64(), "{listed}");

    // A record without acquired_at (written by hand): no held_ms.
    let mut conn = server.conn();
    let _: () = redis::cmd("SET")
        .arg("redlock:{bare}")
        .arg("t")
        .query(&mut conn)
        .unwrap();
    let bare = read(&["status", "bare", "--json"]);
    assert!(bare["holder"].get("held_ms").is_none(), "{bare}");
    assert!(bare["holder"].get("expires_ms").is_none(), "{bare}");
    drop(holder);
}

#[test]
fn fence_grows_with_every_run_and_status_shows_it() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    // The job asks `status` itself, through the environment it inherits.
    let script = r#""$BIN" status "$REDLOCK_KEY" --json > "$DIR/status$N"; echo "$REDLOCK_FENCE" > "$DIR/fence$N""#;
    let mut fences = Vec::new();
    for n in 1..=3 {
        let out = run(redlock_bare()
            .env("REDLOCK_REDIS_URL", server.url())
            .env("BIN", bin())
            .env("DIR", dir.path())
            .env("N", n.to_string())
            .args(["-k", "fenced", "-c", script]));
        assert_eq!(out.code, Some(0), "{out:?}");
        let fence: i64 = dir
            .read(&format!("fence{n}"))
            .and_then(|f| f.trim().parse().ok())
            .expect("REDLOCK_FENCE is an integer");
        let status = dir.read(&format!("status{n}")).expect("status output");
        let status: Value = serde_json::from_str(status.trim()).expect("status JSON");
        assert_eq!(status["held"], true, "{status}");
        assert_eq!(status["fence"].as_i64(), Some(fence), "{status}");
        fences.push(fence);
        // Someone else's acquisitions count too.
        let out = run(redlock(&server.url()).args(["-k", "fenced", "--", "true"]));
        assert_eq!(out.code, Some(0), "{out:?}");
    }
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fences must strictly increase: {fences:?}"
    );
    // The other run after the last one COMMAND saw counted too: the last
    // fence is above it (by one, or up to the server's clock: see
    // `scripts::fence_lib`).
    let out = run(redlock(&server.url()).args(["status", "fenced"]));
    let shown: i64 = out
        .stdout
        .strip_prefix("fenced  free (last fence ")
        .and_then(|rest| rest.strip_suffix(")\n"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{out:?}"));
    assert!(shown > *fences.last().expect("three fences"), "{out:?}");
}

#[test]
fn list_shows_exactly_the_held_locks_among_unrelated_keys() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut conn = server.conn();
    let mut pipe = redis::pipe();
    for i in 0..300 {
        pipe.cmd("SET").arg(format!("app:{i}")).arg(i).ignore();
    }
    // Near misses: other prefixes, other types, holder-like names.
    for key in [
        "redlockx{a}",
        "redlock{a}",
        "other:{a}",
        "redlock:{a",
        "redlock:a}",
    ] {
        pipe.cmd("SET").arg(key).arg("x").ignore();
    }
    pipe.cmd("HSET")
        .arg("redlock:{h}")
        .arg("f")
        .arg("v")
        .ignore();
    pipe.query::<()>(&mut conn).unwrap();
    // Acquired and released: only its fence is left.
    let out = run(redlock(&server.url()).args(["-k", "done", "--", "true"]));
    assert_eq!(out.code, Some(0), "{out:?}");

    let keys = ["b c", "a", "z{1}:x"];
    let holders: Vec<RunningChild> = keys
        .iter()
        .map(|k| hold(redlock(&server.url()), &dir, k, &[]))
        .collect();

    let out = run(redlock(&server.url()).arg("list"));
    assert_eq!(out.code, Some(0), "{out:?}");
    let listed: Vec<&str> = out
        .stdout
        .lines()
        .skip(1)
        .map(|l| l.split_once("  held  ").expect("held line").0.trim_end())
        .collect();
    assert_eq!(listed, ["a", "b c", "z{1}:x"], "{out:?}");
    for (key, holder) in keys.iter().zip(&holders) {
        let pid = format!(" pid {} ", holder.pid());
        assert!(
            out.stdout
                .lines()
                .any(|l| l.starts_with(&format!("{key}  ")) && l.contains(&pid)),
            "{key}: {out:?}"
        );
    }

    let out = run(redlock(&server.url()).args(["list", "--json"]));
    assert_eq!(out.code, Some(0), "{out:?}");
    let listed: Vec<String> = json_lines(&out)
        .iter()
        .map(|v| {
            assert_eq!(v["held"], true);
            v["key"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(listed, ["a", "b c", "z{1}:x"]);

    // Nothing held: exit 0, no output.
    drop(holders);
    for key in keys {
        redis::cmd("DEL")
            .arg(format!("redlock:{{{key}}}"))
            .exec(&mut conn)
            .unwrap();
    }
    let out = run(redlock(&server.url()).arg("list"));
    assert_eq!((out.code, out.stdout.as_str()), (Some(0), ""), "{out:?}");
}

#[test]
fn force_release_of_a_held_lock_stops_the_holder() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut holder = hold(redlock(&server.url()), &dir, "job", &["--ttl", "5s"]);
    let fence = get(&mut server.conn(), "redlock:{job}:fence");

    let out = run(redlock(&server.url()).args(["force-release", "job", "--now"]));
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stdout.starts_with(&format!(
            "released 'job': it was held by {} pid {} (",
            hostname(),
            holder.pid()
        )),
        "{out:?}"
    );
    let mut conn = server.conn();
    assert!(!exists(&mut conn, "redlock:{job}"));
    assert!(!exists(&mut conn, "redlock:{job}:holder"));
    assert_eq!(get(&mut conn, "redlock:{job}:fence"), fence, "fence kept");

    // Its next refresh finds the lock gone: COMMAND is stopped, exit 70.
    let out = holder.wait_timeout(T);
    assert_eq!(out.code, Some(70), "{out:?}");

    let out = run(redlock(&server.url()).args(["force-release", "job"]));
    assert_eq!(out.code, Some(1), "{out:?}");
    assert_eq!(out.stdout, "");
    assert!(out.stderr.contains("not held"), "{out:?}");
}

#[test]
fn force_release_with_a_token_deletes_only_that_holders_lock() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut conn = server.conn();
    let _holder = hold(redlock(&server.url()), &dir, "job", &[]);
    let token = get(&mut conn, "redlock:{job}").expect("held");

    let out = run(redlock(&server.url()).args(["force-release", "job", "--token", "wrong"]));
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains("another token"), "{out:?}");
    assert_eq!(
        get(&mut conn, "redlock:{job}").as_deref(),
        Some(token.as_str())
    );
    assert!(exists(&mut conn, "redlock:{job}:holder"));

    let out =
        run(redlock(&server.url()).args(["force-release", "job", "--token", &token, "--now"]));
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(!exists(&mut conn, "redlock:{job}"));

    let out = run(redlock(&server.url()).args(["force-release", "never", "--token", &token]));
    assert_eq!(out.code, Some(1), "{out:?}");
}

#[test]
fn force_release_wakes_a_waiter() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let _holder = hold(redlock(&server.url()), &dir, "job", &["--ttl", "60s"]);
    let marker = dir.file("waiter-ran");
    let mut waiter = spawn_piped(
        redlock(&server.url())
            .args(["-k", "job", "--", "touch"])
            .arg(&marker),
    );
    // Wait until the waiter listens for the release (on two channels;
    // the holder listens on one, for a force-release).
    let mut conn = server.conn();
    assert!(wait_until(T, || clients_subscribed_to(&mut conn, 2) == 1));
    let out = run(redlock(&server.url()).args(["force-release", "job", "--now"]));
    assert_eq!(out.code, Some(0), "{out:?}");
    // Long before the holder's 60 s TTL.
    let out = waiter.wait_timeout(T);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(marker.exists());
}

#[test]
fn odd_keys_round_trip() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let keys = [
        "with space",
        "ünïcødé ключ 🔒",
        "{braces}",
        "a}b{c",
        "x:y:z",
        "}",
        "{",
        "a b {c}: ü",
        "*",
    ];
    let holders: Vec<RunningChild> = keys
        .iter()
        .map(|k| hold(redlock(&server.url()), &dir, k, &["--ttl", "5s"]))
        .collect();
    let mut conn = server.conn();
    // A KEY that begins with `}` would leave `P{K}` an empty hash tag.
    let stored = |key: &str| match key.starts_with('}') {
        true => format!("redlock:}}{{~{key}}}"),
        false => format!("redlock:{{{key}}}"),
    };
    for key in keys {
        assert!(exists(&mut conn, &stored(key)), "{key}");
        let out = run(redlock(&server.url()).args(["status", key]));
        assert_eq!(out.code, Some(0), "{key}: {out:?}");
        assert!(
            out.stdout.starts_with(&format!("{key}  held by ")),
            "{out:?}"
        );
        let out = run(redlock(&server.url()).args(["status", "--json", key]));
        assert_eq!(json_lines(&out)[0]["key"], key);
    }

    let out = run(redlock(&server.url()).args(["list", "--json"]));
    assert_eq!(out.code, Some(0), "{out:?}");
    let listed: Vec<String> = json_lines(&out)
        .iter()
        .map(|v| v["key"].as_str().unwrap().to_string())
        .collect();
    let mut expected: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
    expected.sort();
    assert_eq!(listed, expected);

    for key in keys {
        let out = run(redlock(&server.url()).args(["force-release", key, "--now"]));
        assert_eq!(out.code, Some(0), "{key}: {out:?}");
        assert!(
            out.stdout.starts_with(&format!("released '{key}'")),
            "{out:?}"
        );
        let out = run(redlock(&server.url()).args(["status", key]));
        assert_eq!(out.code, Some(1), "{key}: {out:?}");
        let fence = get(&mut conn, &format!("{}:fence", stored(key))).expect("fence");
        assert_eq!(out.stdout, format!("{key}  free (last fence {fence})\n"));
    }
    for mut holder in holders {
        assert_eq!(holder.wait_timeout(T).code, Some(70));
    }
}

#[test]
fn keys_with_control_characters_are_refused_before_redis() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let before = connections(&mut conn);
    let cases: [&[&str]; 4] = [
        &["status", "ok", "a\u{1}b"],
        &["force-release", "a\nb"],
        &["-k", "a\tb", "--", "true"],
        &["status", ""],
    ];
    for args in cases {
        let out = run(redlock(&server.url()).args(args));
        assert_eq!(out.code, Some(2), "{args:?}: {out:?}");
        assert!(
            out.stderr.contains("control characters") || out.stderr.contains("empty"),
            "{args:?}: {out:?}"
        );
    }
    assert_eq!(connections(&mut conn), before, "something reached Redis");
    assert_eq!(dbsize(&mut conn), 0);
}

#[test]
fn admin_commands_honour_prefix_and_environment() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let env = |cmd: &mut Command| {
        cmd.env("REDLOCK_REDIS_URL", server.url());
    };
    let mut cmd = redlock_bare();
    env(&mut cmd);
    let _team = hold(cmd, &dir, "job", &["--prefix", "team1:"]);
    // Glob characters in a prefix are literal.
    let _star = hold(redlock(&server.url()), &dir, "s", &["--prefix", "a*"]);
    let _ab = hold(redlock(&server.url()), &dir, "t", &["--prefix", "ab"]);
    assert!(exists(&mut server.conn(), "team1:{job}"));

    let status_before = run(redlock_bare()
        .env("REDLOCK_REDIS_URL", server.url())
        .args(["--prefix", "team1:", "status", "job"]));
    assert_eq!(status_before.code, Some(0), "{status_before:?}");
    let status_after = run(redlock_bare()
        .env("REDIS_URL", server.url())
        .args(["status", "job", "--prefix", "team1:"]));
    assert_eq!(status_after.code, Some(0), "{status_after:?}");
    let default = run(redlock(&server.url()).args(["status", "job"]));
    assert_eq!(default.code, Some(1), "{default:?}");

    let list = |prefix: &str| {
        let out = run(redlock(&server.url()).args(["list", "--prefix", prefix]));
        assert_eq!(out.code, Some(0), "{out:?}");
        out.stdout
            .lines()
            .skip(1)
            .map(|l| l.split("  ").next().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(list("team1:"), ["job"]);
    assert_eq!(list("a*"), ["s"]);
    assert_eq!(list("ab"), ["t"]);
    assert!(list("redlock:").is_empty());

    let out = run(redlock_bare().env("REDLOCK_REDIS_URL", server.url()).args([
        "force-release",
        "--prefix",
        "team1:",
        "job",
        "--now",
    ]));
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(!exists(&mut server.conn(), "team1:{job}"));
    assert!(exists(&mut server.conn(), "a*{s}"));
}

#[test]
fn a_closed_stdout_is_not_an_error() {
    let server = RedisServer::start();
    let keys: Vec<String> = (0..200).map(|i| format!("k{i}")).collect();
    let mut child = redlock(&server.url())
        .arg("status")
        .args(&keys)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}

#[test]
fn status_across_three_nodes_counts_the_majority() {
    let mut servers = RedisServer::many(3);
    let dir = TestDir::new();
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    let _holder = hold(redlock_on(&urls), &dir, "job", &[]);
    let status = |json: bool| {
        let mut cmd = redlock_on(&urls);
        cmd.args(["status", "job"]);
        if json {
            cmd.arg("--json");
        }
        run(&mut cmd)
    };

    let out = status(false);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.contains(", on 3 of 3 nodes: "), "{out:?}");
    let v = &json_lines(&status(true))[0];
    assert_eq!(
        (v["held"].as_bool(), v["nodes_holding"].as_i64()),
        (Some(true), Some(3))
    );

    // Gone from one node: still a majority.
    redis::cmd("DEL")
        .arg("redlock:{job}")
        .exec(&mut servers[0].conn())
        .unwrap();
    let out = status(false);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.contains(", on 2 of 3 nodes: "), "{out:?}");

    // Gone from two: held on one node only, which is no lock.
    redis::cmd("DEL")
        .arg("redlock:{job}")
        .exec(&mut servers[1].conn())
        .unwrap();
    let out = status(false);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stdout.starts_with("job  free (last fence "), "{out:?}");
    assert!(
        out.stdout.contains("; held on only 1 of 3 nodes"),
        "{out:?}"
    );
    let v = &json_lines(&status(true))[0];
    assert_eq!(
        (v["held"].as_bool(), v["nodes_holding"].as_i64()),
        (Some(false), Some(1))
    );

    // One node down: the other two still answer, but the dead node may
    // hold it too (with the one holding, a majority): unknown, not free.
    servers[0].kill();
    let out = status(false);
    assert_eq!(out.code, Some(69), "{out:?}");
    assert!(
        out.stdout.starts_with("job  unknown (held on 1 of 3 nodes"),
        "{out:?}"
    );
    assert!(out.stderr.contains(&urls[0]), "{out:?}");
    // Two down: no majority can answer.
    servers[1].kill();
    let out = status(false);
    assert_eq!(out.code, Some(69), "{out:?}");
}

#[test]
fn force_release_across_three_nodes_deletes_everywhere() {
    let servers = RedisServer::many(3);
    let dir = TestDir::new();
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    let with_nodes = || redlock_on(&urls);
    let mut holder = hold(with_nodes(), &dir, "job", &["--ttl", "5s"]);
    for s in &servers {
        assert!(exists(&mut s.conn(), "redlock:{job}"));
    }
    let out = run(with_nodes().args(["list"]));
    assert_eq!(out.code, Some(0), "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "a header and a row: {out:?}");
    assert!(lines[0].contains("  NODES  COMMAND"), "{out:?}");
    assert!(lines[1].contains("  3/3    sh -c "), "{out:?}");

    let out = run(with_nodes().args(["force-release", "job", "--now"]));
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.contains(", on 3 of 3 nodes"), "{out:?}");
    for s in &servers {
        assert!(!exists(&mut s.conn(), "redlock:{job}"));
        assert!(!exists(&mut s.conn(), "redlock:{job}:holder"));
    }
    assert_eq!(holder.wait_timeout(T).code, Some(70));
    let out = run(with_nodes().args(["list"]));
    assert_eq!((out.code, out.stdout.as_str()), (Some(0), ""), "{out:?}");
}

#[test]
fn hostile_holder_fields_are_escaped_and_cut_everywhere() {
    let server = RedisServer::builder().requirepass("hunter22pw").start();
    let url = server.url_with(None, "hunter22pw");
    let mut conn = server.conn();
    // A holder record as another program (or an attacker with write
    // access) could have written it.
    let evil_host = "web\u{202E}1\x1b[31m";
    let long_command = format!("pg_dump hunter22pw {}", "x".repeat(1000));
    redis::cmd("SET")
        .arg("redlock:{job}")
        .arg("tok")
        .arg("PX")
        .arg(60_000)
        .exec(&mut conn)
        .unwrap();
    redis::cmd("HSET")
        .arg("redlock:{job}:holder")
        .arg(&[
            ("token", "tok"),
            ("host", evil_host),
            ("pid", "1\u{2066}2"),
            ("user", "root\n"),
            ("command", long_command.as_str()),
            ("acquired_at", "2020-01-01T00:00:00Z"),
        ])
        .exec(&mut conn)
        .unwrap();
    let check = |what: &str, text: &str| {
        for bad in ['\u{202E}', '\u{2066}', '\x1b'] {
            assert!(!text.contains(bad), "{what}: {bad:?} printed raw: {text:?}");
        }
        assert!(
            !text.contains("hunter22pw"),
            "{what}: password printed: {text:?}"
        );
        assert!(
            !text.contains(&"x".repeat(300)),
            "{what}: field not cut: {text:?}"
        );
        assert!(
            text.contains("web\\u{202e}1\\u{1b}[31m"),
            "{what}: {text:?}"
        );
    };
    let out = run(redlock(&url).args(["status", "job"]));
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.contains("(root\\n)"), "{out:?}");
    check("status", &out.stdout);
    let out = run(redlock(&url).arg("list"));
    check("list", &out.stdout);
    let out = run(redlock(&url).args(["-k", "job", "-n", "--", "true"]));
    assert_eq!(out.code, Some(75), "{out:?}");
    check("busy message", &out.stderr);
    let out = run(redlock(&url).args(["status", "job", "--json"]));
    assert!(!out.stdout.contains("hunter22pw"), "{out:?}");
}

/// A fence counter set back (as a failover to a replica that had not seen
/// the last acquisitions sets it back: chaos finding F4) never hands out
/// a fence again: on one endpoint the fence is never below the server's
/// clock in microseconds, which is above every fence handed out before
/// the failover.
#[test]
fn a_counter_set_back_never_hands_out_an_old_fence_again() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let (secs, micros): (String, String) = redis::cmd("TIME").query(&mut conn).unwrap();
    let before: i64 = format!("{secs}{micros:0>6}").parse().unwrap();
    // Handed out before the "failover": the counter was at `before + 5`
    // on the old primary; the new one only saw up to 5.
    let _: () = redis::cmd("SET")
        .arg("redlock:{back}:fence")
        .arg(5)
        .query(&mut conn)
        .unwrap();
    let out = run_with_timeout(
        &mut server.job("back").sh("echo $REDLOCK_FENCE"),
        Duration::from_secs(30),
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    let fence: i64 = out.stdout.trim().parse().expect("REDLOCK_FENCE");
    assert!(
        fence > before,
        "fence {fence} is not above the clock {before}"
    );
}

/// Issue 36, item 13: `list` is a table a person can scan (a header,
/// aligned columns: key, state, holder, label, held for, expires in,
/// fence, waiters, command); an empty one says so on stderr.
#[test]
fn list_is_a_table_and_an_empty_one_says_so() {
    let server = RedisServer::start();
    let out = run(redlock(&server.url()).arg("list"));
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stdout, "", "{out:?}");
    assert_eq!(
        out.stderr,
        "redlock-run: no lock is held under the prefix 'redlock:'\n"
    );
    let out = run(redlock(&server.url()).args(["list", "--prefix", "team1:", "--json"]));
    assert_eq!((out.code, out.stdout.as_str()), (Some(0), ""), "{out:?}");
    assert!(out.stderr.contains("under the prefix 'team1:'"), "{out:?}");
    let out = run(redlock(&server.url()).args(["list", "-q"]));
    assert_eq!((out.code, out.stderr.as_str()), (Some(0), ""), "{out:?}");

    let dir = TestDir::new();
    let holder = hold(
        redlock(&server.url()),
        &dir,
        "deploy",
        &["--label", "release 1.2", "--ttl", "20s"],
    );
    let _other = hold(redlock(&server.url()), &dir, "backup", &[]);
    let mut waiter = spawn_piped(
        &mut Job::new(&server.url(), "deploy")
            .args(["-q"])
            .exec(["true"]),
    );
    let listed = || run(redlock(&server.url()).arg("list")).stdout;
    assert!(
        wait_until(T, || listed().contains("  1        sh -c ")),
        "no waiter counted: {}",
        listed()
    );
    let text = listed();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    let header = lines[0];
    for (name, next) in [
        ("KEY", "STATE"),
        ("STATE", "HOLDER"),
        ("HOLDER", "LABEL"),
        ("LABEL", "HELD FOR"),
        ("HELD FOR", "EXPIRES IN"),
        ("EXPIRES IN", "FENCE"),
        ("FENCE", "WAITERS"),
        ("WAITERS", "COMMAND"),
    ] {
        let (a, b) = (header.find(name), header.find(next));
        assert!(a < b && a.is_some(), "{name} before {next}: {text}");
    }
    // Every column starts at the same place in every row.
    let cell = |line: &str, name: &str| {
        let at = header.find(name).expect("column");
        line[at..]
            .split("  ")
            .next()
            .unwrap_or_default()
            .to_string()
    };
    let (backup, deploy) = (lines[1], lines[2]);
    assert_eq!(cell(backup, "KEY"), "backup");
    assert_eq!(cell(deploy, "KEY"), "deploy");
    assert_eq!(cell(deploy, "STATE"), "held");
    let who = format!("{} pid {} (", hostname(), holder.pid());
    assert!(cell(deploy, "HOLDER").starts_with(&who), "{text}");
    assert_eq!(cell(deploy, "LABEL"), "release 1.2");
    assert_eq!(cell(backup, "LABEL"), "-");
    assert!(cell(deploy, "EXPIRES IN").ends_with('s'), "{text}");
    let fence = get(&mut server.conn(), "redlock:{deploy}:fence").expect("fence");
    assert_eq!(cell(deploy, "FENCE"), fence);
    assert_eq!(cell(deploy, "WAITERS"), "1");
    assert_eq!(cell(backup, "WAITERS"), "-");
    assert!(cell(deploy, "COMMAND").starts_with("sh -c "), "{text}");
    holder.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(waiter.wait_timeout(T).code, Some(0));
}

/// Issue 36, item 16: a `--min-hold` lock whose job has ended says so in
/// `status` (and until when it is kept), and `force-release` frees it at
/// once: there is no holder to stop, so nothing to wait for.
#[test]
fn a_lock_kept_by_min_hold_after_its_job_says_so_and_is_freed_at_once() {
    let server = RedisServer::start();
    let done = run(&mut Job::new(&server.url(), "backup")
        .args(["--min-hold", "120s"])
        .exec(["true"]));
    assert_eq!(done.code, Some(0), "{done:?}");

    let out = run(redlock(&server.url()).args(["status", "backup"]));
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.starts_with("backup  job ended "), "{out:?}");
    assert!(
        out.stdout.contains(" ago; kept by --min-hold until ")
            && out.stdout.contains(" more): held by "),
        "{out:?}"
    );
    assert!(!out.stdout.contains("expires in"), "said once: {out:?}");
    let json = json_lines(&run(
        redlock(&server.url()).args(["status", "backup", "--json"])
    ));
    let ended = json[0]["holder"]["ended_at"].as_str().expect("ended_at");
    humantime::parse_rfc3339(ended).unwrap_or_else(|e| panic!("{ended}: {e}"));
    let listed = run(redlock(&server.url()).arg("list"));
    assert!(
        listed
            .stdout
            .lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("backup  kept (min-hold)  ")),
        "{listed:?}"
    );

    // A waiter is not kept waiting for a holder that is long gone.
    let mut waiter = spawn_waiting(
        &mut Job::new(&server.url(), "backup")
            .args(["-v"])
            .exec(["true"]),
        T,
    );
    let out = run(redlock(&server.url()).args(["force-release", "backup"]));
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stdout.starts_with(
            "released 'backup' at once (its job had ended; --min-hold kept the lock, and there \
             was no holder to stop): it was held by "
        ),
        "{out:?}"
    );
    let out = waiter.wait_timeout(T);
    assert_eq!(out.code, Some(0), "{out:?}");

    // A semaphore's slot the same way.
    let done = run(&mut Job::new(&server.url(), "pool")
        .args(["--limit", "2", "--min-hold", "120s"])
        .exec(["true"]));
    assert_eq!(done.code, Some(0), "{done:?}");
    let out = run(redlock(&server.url()).args(["status", "pool"]));
    assert_eq!(out.code, Some(0), "{out:?}");
    let out = run(redlock(&server.url()).args(["force-release", "pool"]));
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.starts_with("released 'pool'"), "{out:?}");
    let out = run(redlock(&server.url()).args(["status", "pool"]));
    assert_eq!(out.code, Some(1), "freed at once: {out:?}");
}
