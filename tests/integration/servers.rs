//! The servers a run is given: what is refused before anything is
//! written (one server under several names, by socket and by port, no
//! EVAL, ports and databases out of range, replicas that can never
//! confirm, and the refusals' exit 77), one server under two names that
//! addresses cannot tell (found by the acquire's answers: exit 2 and no
//! lock left), and reaching a server by name (a silent DNS server, a dead
//! first address).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::*;

const LONG: Duration = Duration::from_secs(40);

/// Run `touch MARKER` with `--on-unavailable run` against `url`: exit 77,
/// one line naming the redacted URL and `what` (lowercase), no COMMAND.
fn assert_refused(url: &str, shown: &str, what: &str) {
    let dir = TestDir::new();
    let marker = dir.file("ran");
    let out = run_with_timeout(
        redlock(url)
            .args(["-k", "job", "--on-unavailable", "run", "--", "touch"])
            .arg(&marker),
        LONG,
    );
    assert_eq!(out.code, Some(77), "{url}: {out:?}");
    assert!(!marker.exists(), "{url}: COMMAND ran: {out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "{url}: {out:?}");
    assert!(out.stderr.contains(shown), "{url}: {out:?}");
    assert!(!out.stderr.contains("unavailable"), "{url}: {out:?}");
    let line = out.stderr.to_lowercase();
    assert!(line.contains(what), "{url}: wanted {what:?}: {out:?}");
}

#[test]
fn refusals_exit_77_with_their_own_message_and_never_run_command() {
    let server = RedisServer::builder()
        .acl_user("nowatch", "pw-nowatch", "~* &* +@all -eval -evalsha -watch")
        .acl_user("alice", "pw-alice", "~* &* +@all")
        .start();
    let port = server.port();
    let wrong = server.url_with(Some("alice"), "not-her-password");
    assert_refused(
        &wrong,
        &format!("redis://alice:***@127.0.0.1:{port}"),
        "authentication failed",
    );
    // Without scripts a plain lock needs WATCH.
    let nowatch = server.url_with(Some("nowatch"), "pw-nowatch");
    assert_refused(&nowatch, "nowatch:***@", "permission");
    let db = format!("redis://127.0.0.1:{port}/99");
    assert_refused(&db, &db, "database");
}

/// EVAL renamed away: a plain lock runs without scripts; a semaphore
/// needs them and is refused.
#[test]
fn a_server_without_eval_runs_a_plain_lock_and_refuses_a_semaphore_with_77() {
    let server = RedisServer::builder()
        .arg("--rename-command")
        .arg("EVAL")
        .arg("")
        .start();
    let out = run_with_timeout(
        redlock(&server.url()).args(["-k", "job", "--", "true"]),
        LONG,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    let url = server.url();
    let dir = TestDir::new();
    let marker = dir.file("ran");
    let out = run_with_timeout(
        redlock(&url)
            .args(["-k", "pool", "--limit", "2", "--", "touch"])
            .arg(&marker),
        LONG,
    );
    assert_eq!(out.code, Some(77), "{out:?}");
    assert!(!marker.exists(), "COMMAND ran: {out:?}");
    assert!(out.stderr.contains("has no EVAL command"), "{out:?}");
}

/// How long `cmd` took, and its output.
fn timed(cmd: &mut Command) -> (Duration, Output) {
    let start = Instant::now();
    let out = run_with_timeout(cmd, LONG);
    (start.elapsed(), out)
}

/// A usage error (exit 2) before anything is sent to Redis, whose first
/// line contains `says`.
fn assert_usage(server: &RedisServer, args: &[&str], says: &str) {
    let mut conn = server.conn();
    let before: i64 = redis::cmd("DBSIZE").query(&mut conn).unwrap();
    let out = run_with_timeout(
        redlock_bare().args(args).args(["-k", "x", "--", "true"]),
        LONG,
    );
    assert_eq!(out.code, Some(2), "{args:?}: {out:?}");
    let first = out.stderr.lines().next().unwrap_or_default();
    assert!(first.contains(says), "{args:?}: wanted {says:?}: {out:?}");
    assert!(
        !out.stderr.contains("pw-secret"),
        "{args:?}: password shown"
    );
    let after: i64 = redis::cmd("DBSIZE").query(&mut conn).unwrap();
    assert_eq!(before, after, "{args:?}: something was written");
}

#[test]
fn the_same_server_twice_is_not_two_redlock_nodes() {
    let server = RedisServer::start();
    let (url, port) = (server.url(), server.port());
    let with_pw = format!("redis://:pw-secret@127.0.0.1:{port}");
    let cases = [
        [url.clone(), url.clone()],
        [url.clone(), format!("{url}/0")],
        [
            format!("redis://LOCALHOST:{port}"),
            format!("redis://localhost:{port}/"),
        ],
        [url.clone(), with_pw],
    ];
    for [a, b] in &cases {
        assert_usage(&server, &["--redis", a, "--redis", b], "same server");
    }
    // Another database of the same server is still the same server: one
    // restart would lose the lock on both "nodes" at once.
    assert_usage(
        &server,
        &["--redis", &url, "--redis", &format!("{url}/1")],
        "same server",
    );
}

/// A unix socket and a TCP port of one server cannot be told apart by
/// their addresses: the server's `run_id`, which each acquire says,
/// tells. Refused with exit 2 and one line naming both URLs; what the
/// attempt took is given back, so no lock is left on any server.
#[test]
fn one_server_by_socket_and_by_port_is_refused() {
    let dir = TestDir::new();
    let socket = dir.file("redis.sock");
    let server = RedisServer::builder()
        .arg("--unixsocket")
        .arg(&socket.display().to_string())
        .start();
    let other = RedisServer::start();
    let by_socket = format!("redis+unix://{}", socket.display());
    let urls = [server.url(), other.url(), by_socket.clone()];
    let args: Vec<&str> = urls.iter().flat_map(|u| ["--redis", u.as_str()]).collect();
    let ran = dir.file("ran");
    let out = run_with_timeout(
        redlock_bare()
            .args(&args)
            .args(["-k", "x", "--", "touch"])
            .arg(&ran),
        LONG,
    );
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(!ran.exists(), "COMMAND ran");
    let first = out.stderr.lines().next().unwrap_or_default();
    assert!(
        first.contains("same server")
            && first.contains(&by_socket)
            && first.contains(&server.url()),
        "one line naming both URLs: {out:?}"
    );
    for s in [&server, &other] {
        assert_no_lock(s, "x");
    }
}

/// No lock, holder record or semaphore slot of `key` on `server` (its
/// fence counter may stay: a fence only has to grow).
fn assert_no_lock(server: &RedisServer, key: &str) {
    let mut conn = server.conn();
    for suffix in ["", ":holder", ":holders", ":limit"] {
        let name = format!("redlock:{{{key}}}{suffix}");
        assert!(
            !exists(&mut conn, &name),
            "{name} left on {}",
            server.port()
        );
    }
}

/// One server under two names is exit 2 at the first attempt, whatever
/// the lock's state: free (what was taken is given back), held by
/// another run (left to it, and no waiting until `--wait` ends), and
/// for a semaphore's slot. Nothing of ours is left anywhere.
#[test]
fn one_server_under_two_names_is_exit_2_and_leaves_no_lock_anywhere() {
    let dir = TestDir::new();
    let socket = dir.file("redis.sock");
    let server = RedisServer::builder()
        .arg("--unixsocket")
        .arg(&socket.display().to_string())
        .start();
    let others = RedisServer::many(2);
    let by_socket = format!("redis+unix://{}", socket.display());
    let urls = [server.url(), others[0].url(), by_socket, others[1].url()];
    let cases: [(&str, &[&str]); 3] = [
        ("free", &[]),
        ("busy", &["--wait", "30s"]),
        ("slot", &["--limit", "2"]),
    ];
    for (key, args) in cases {
        if key == "busy" {
            for s in [&server, &others[0]] {
                let _: () = redis::cmd("SET")
                    .arg("redlock:{busy}")
                    .arg("rival")
                    .arg("PX")
                    .arg(60_000)
                    .query(&mut s.conn())
                    .unwrap();
            }
        }
        let ran = dir.file(&format!("ran-{key}"));
        let (took, out) = timed(
            redlock_on(&urls)
                .args(["-k", key])
                .args(args)
                .args(["--", "touch"])
                .arg(&ran),
        );
        assert_eq!(out.code, Some(2), "{key}: {out:?}");
        assert!(!ran.exists(), "{key}: COMMAND ran");
        assert!(out.stderr.contains("same server"), "{key}: {out:?}");
        assert!(took < Duration::from_secs(20), "{key}: waited {took:?}");
        assert_no_lock(&others[1], key);
        for s in [&server, &others[0]] {
            match key {
                // The rival's lock is left to it.
                "busy" => assert_eq!(
                    get(&mut s.conn(), "redlock:{busy}").as_deref(),
                    Some("rival")
                ),
                _ => assert_no_lock(s, key),
            }
        }
    }
}

/// With an ACL from before `+info` was documented, the `run_id` check
/// (and the eviction check) is skipped, and Redlock works as before.
#[test]
fn redlock_without_info_permission_still_works() {
    let documented = documented_acl_rules();
    assert!(documented.iter().any(|r| r == "+info"), "{documented:?}");
    let rules: Vec<String> = documented.into_iter().filter(|r| r != "+info").collect();
    let rules = rules.join(" ");
    let servers: Vec<RedisServer> = (0..3)
        .map(|_| {
            RedisServer::builder()
                .acl_user("lock", "pw", &rules)
                .start()
        })
        .collect();
    let urls: Vec<String> = servers
        .iter()
        .map(|s| s.url_with(Some("lock"), "pw"))
        .collect();
    let out = run_with_timeout(
        &mut Job::using(redlock_on(&urls), "noinfo").sh("echo ran"),
        LONG,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stdout.trim(), "ran");
}

/// The commands `port` is sent from outside scripts while `f` runs
/// (MONITOR, through redis-cli): their names, upper case.
fn commands_sent_to(port: u16, f: impl FnOnce()) -> Vec<String> {
    let dir = TestDir::new();
    let out = std::fs::File::create(dir.file("monitor")).unwrap();
    let mut monitor = Command::new(redis_cli_bin())
        .args(["-p", &port.to_string(), "monitor"])
        .stdout(out)
        .spawn()
        .expect("redis-cli monitor");
    assert!(
        wait_until(LONG, || dir
            .read("monitor")
            .is_some_and(|t| t.contains("OK"))),
        "MONITOR never started"
    );
    f();
    std::thread::sleep(Duration::from_millis(300));
    let _ = monitor.kill();
    let _ = monitor.wait();
    let text = dir.read("monitor").unwrap_or_default();
    text.lines()
        .filter(|line| !line.contains(" lua] "))
        .filter_map(|line| line.split("] \"").nth(1)?.split('"').next())
        .map(str::to_uppercase)
        .collect()
}

/// A script's text goes to a server once: a run sends each script by its
/// digest (EVALSHA), and the text (EVAL) only where the server answers
/// NOSCRIPT, its first call there. The next run sends no text; after
/// SCRIPT FLUSH the texts go again, and every run holds and frees the lock.
#[test]
fn a_scripts_text_goes_to_a_server_once_then_only_its_digest() {
    let server = RedisServer::start();
    let run = || {
        let out = run_with_timeout(
            redlock(&server.url()).args(["-k", "digest", "--", "true"]),
            LONG,
        );
        assert_eq!(out.code, Some(0), "{out:?}");
        assert!(out.stderr.is_empty(), "{out:?}");
        assert!(!exists(&mut server.conn(), "redlock:{digest}"), "released");
    };
    run();
    // The acquire's and the release's: each by digest, then its text.
    assert_eq!(server.calls_of("evalsha"), 2);
    assert_eq!(server.calls_of("eval"), 2);
    run();
    assert_eq!(server.calls_of("evalsha"), 4);
    assert_eq!(server.calls_of("eval"), 2, "no text the second time");
    let _: String = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut server.conn())
        .expect("SCRIPT FLUSH");
    run();
    assert_eq!(server.calls_of("evalsha"), 6);
    assert_eq!(server.calls_of("eval"), 4, "the texts again after a flush");
}

/// A Redlock run asks no node `INFO` outside its scripts: each acquire
/// says which server gave it (no round trip of its own, every run). It
/// writes no file (`$XDG_RUNTIME_DIR` stays empty), and a node that
/// restarted between two runs (another `run_id`) is simply counted.
#[test]
fn a_redlock_run_makes_no_info_round_and_writes_no_file() {
    let mut servers = RedisServer::many(3);
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let runtime = TestDir::new();
    let run = |job: &str| {
        let mut cmd = redlock_on(&urls);
        cmd.env("XDG_RUNTIME_DIR", runtime.path())
            .args(["-k", "rounds", "--", "sh", "-c", job]);
        cmd
    };
    for _ in 0..2 {
        let sent = commands_sent_to(servers[1].port(), || {
            let out = run_with_timeout(&mut run("true"), LONG);
            assert_eq!(out.code, Some(0), "{out:?}");
        });
        assert!(sent.iter().any(|c| c == "EVALSHA"), "{sent:?}");
        assert!(!sent.iter().any(|c| c == "INFO"), "an INFO round: {sent:?}");
    }
    let left: Vec<_> = std::fs::read_dir(runtime.path()).unwrap().collect();
    assert!(left.is_empty(), "files written: {left:?}");

    servers[1].restart();
    let dir = TestDir::new();
    let hold = Hold::new(&dir);
    let mut holder = hold.spawn(&mut run(&hold.script("true")), LONG);
    for server in &servers {
        assert!(
            exists(&mut server.conn(), "redlock:{rounds}"),
            "the lock is on {} (the restarted node is counted)",
            server.port()
        );
    }
    hold.go();
    let out = holder.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
}

/// A URL that reached a server of its own in an earlier run but now
/// reaches another node's server (here a socket link moved) is found by
/// the acquires' answers: exit 2, naming both URLs; COMMAND does not run
/// and no lock is left on any server.
#[test]
fn a_node_that_now_leads_to_another_nodes_server_is_refused() {
    let dir = TestDir::new();
    let (a_sock, c_sock, link) = (
        dir.file("a.sock"),
        dir.file("c.sock"),
        dir.file("node.sock"),
    );
    let socket = |path: &Path| {
        RedisServer::builder()
            .arg("--unixsocket")
            .arg(&path.display().to_string())
            .start()
    };
    let (a, b, c) = (socket(&a_sock), RedisServer::start(), socket(&c_sock));
    std::os::unix::fs::symlink(&c_sock, &link).unwrap();
    let by_link = format!("redis+unix://{}", link.display());
    let urls = [a.url(), b.url(), by_link.clone()];
    let ran = dir.file("ran");
    let run = || {
        let mut cmd = redlock_on(&urls);
        cmd.args(["-k", "moved", "--", "touch"]).arg(&ran);
        run_with_timeout(&mut cmd, LONG)
    };
    let out = run();
    assert_eq!(out.code, Some(0), "three servers: {out:?}");
    std::fs::remove_file(&ran).unwrap();

    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(&a_sock, &link).unwrap();
    let out = run();
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(!ran.exists(), "COMMAND ran");
    let first = out.stderr.lines().next().unwrap_or_default();
    assert!(
        first.contains("same server") && first.contains(&by_link) && first.contains(&a.url()),
        "one line naming both URLs: {out:?}"
    );
    for s in [&a, &b, &c] {
        assert!(
            !exists(&mut s.conn(), "redlock:{moved}"),
            "a lock left on {}",
            s.port()
        );
    }
}

#[test]
fn one_server_under_three_names_is_refused() {
    let server = RedisServer::start();
    let others = RedisServer::many(2);
    let port = server.port();
    let names = [
        format!("redis://127.0.0.1:{port}"),
        format!("redis://localhost:{port}"),
        format!("redis://127.1:{port}"),
    ];
    let args: Vec<&str> = names.iter().flat_map(|u| ["--redis", u.as_str()]).collect();
    assert_usage(&server, &args, "same server");
    let out = run_with_timeout(
        redlock_bare().args(&args).args(["-k", "x", "--", "true"]),
        LONG,
    );
    let first = out.stderr.lines().next().unwrap_or_default();
    assert!(
        first.contains(&names[1]) && first.contains(&names[0]),
        "names both URLs: {out:?}"
    );
    // Each spelling beside two other servers: still refused.
    for (a, b) in [(0, 1), (0, 2), (1, 2)] {
        let mut args = vec!["--redis", &names[a], "--redis", &names[b]];
        let urls: Vec<String> = others.iter().map(RedisServer::url).collect();
        args.extend(urls.iter().flat_map(|u| ["--redis", u.as_str()]));
        assert_usage(&server, &args, "same server");
        for other in &others {
            assert_eq!(dbsize(&mut other.conn()), 0, "{args:?} wrote to Redis");
        }
    }
    // Three servers, whatever the spelling, are three nodes.
    let out = run_with_timeout(
        redlock_bare()
            .args(["--redis", &names[2]])
            .args(others.iter().flat_map(|s| ["--redis".to_string(), s.url()]))
            .args(["-k", "x", "--", "true"]),
        LONG,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
}

#[test]
fn ports_and_databases_out_of_range_are_usage_errors() {
    let server = RedisServer::start();
    let port = server.port();
    let cases = [
        ("redis://127.0.0.1:70000".to_string(), "port"),
        ("redis://127.0.0.1:0".to_string(), "port"),
        (format!("redis://127.0.0.1:{port}/-1"), "database"),
        (format!("redis://127.0.0.1:{port}/99999999999"), "database"),
    ];
    for (url, says) in &cases {
        assert_usage(&server, &["--redis", url], says);
    }
}

#[test]
fn replicas_that_can_never_confirm_fail_at_once() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let marker = dir.file("ran");
    let start = Instant::now();
    let out = run_with_timeout(
        redlock(&server.url())
            .args(["-k", "r", "--replicas", "1", "--wait", "30s", "--", "touch"])
            .arg(&marker),
        LONG,
    );
    let took = start.elapsed();
    assert_eq!(out.code, Some(69), "{out:?}");
    assert!(out.stderr.contains("0 replica(s) connected"), "{out:?}");
    assert!(
        took < Duration::from_secs(15),
        "took {took:?}: retried until --wait"
    );
    assert!(!marker.exists(), "COMMAND ran");
    assert!(
        !exists(&mut server.conn(), "redlock:{r}"),
        "lock left behind"
    );
}

/// A UDP socket on port 53 of some loopback address that never answers:
/// a silent DNS server.
fn silent_nameserver() -> std::net::UdpSocket {
    let base = std::process::id() % 200;
    (1..250u32)
        .find_map(|n| {
            let ip = std::net::Ipv4Addr::new(127, 53, (base + 1) as u8, n as u8);
            std::net::UdpSocket::bind((ip, 53)).ok()
        })
        .expect("a free loopback address for a silent nameserver")
}

/// Run redlock-run with `args` in a private mount namespace whose
/// resolv.conf, hosts and nsswitch.conf are the given texts.
fn with_resolver(dir: &TestDir, resolv: &str, hosts: &str, args: &[&str]) -> (Duration, Output) {
    let files = [
        ("resolv.conf", resolv),
        ("hosts", hosts),
        ("nsswitch.conf", "hosts: files dns\n"),
    ];
    let mut binds = Vec::new();
    for (name, text) in files {
        std::fs::write(dir.file(name), text).unwrap();
        let path = dir.file(name);
        binds.push(format!("mount --bind '{}' /etc/{name}", path.display()));
    }
    let mut cmd = unshared(&binds.join(" && "), redlock_bare().args(args));
    timed(&mut cmd)
}

#[test]
fn a_silent_dns_server_costs_the_node_timeout_not_ten_seconds() {
    if !can_unshare("name resolution") {
        return;
    }
    let dir = TestDir::new();
    let dns = silent_nameserver();
    let ip = dns.local_addr().unwrap().ip();
    let resolv = format!("nameserver {ip}\n");
    let hosts = "127.0.0.1 localhost\n";
    let url = format!("redis://no-such-host.example:{}", free_port());
    let (took, out) = with_resolver(
        &dir,
        &resolv,
        hosts,
        &["--redis", &url, "-k", "x", "--", "true"],
    );
    assert_eq!(out.code, Some(69), "{out:?}");
    assert!(took < Duration::from_secs(5), "took {took:?}: {out:?}");
    assert!(out.stderr.contains("resolving"), "{out:?}");
    // Status and friends are bounded the same way.
    let (took, out) = with_resolver(&dir, &resolv, hosts, &["--redis", &url, "status", "x"]);
    assert_eq!(out.code, Some(69), "{out:?}");
    assert!(took < Duration::from_secs(8), "took {took:?}: {out:?}");
    drop(dns);
}

#[test]
fn a_name_with_a_dead_first_address_still_connects() {
    if !can_unshare("name resolution") {
        return;
    }
    let server = RedisServer::start();
    let dir = TestDir::new();
    let dns = silent_nameserver();
    let resolv = format!("nameserver {}\n", dns.local_addr().unwrap().ip());
    // The server listens on 127.0.0.1 only: ::1 is refused.
    let hosts = "::1 redlock-dual\n127.0.0.1 redlock-dual\n";
    let url = format!("redis://redlock-dual:{}", server.port());
    let (_, out) = with_resolver(
        &dir,
        &resolv,
        hosts,
        &["--redis", &url, "-k", "dual", "--", "true"],
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        exists(&mut server.conn(), "redlock:{dual}:fence"),
        "never reached Redis"
    );
}
