//! `redlock-run doctor`: each FAIL and WARN is produced by a real server
//! configured that way, and a clean server (persistence on, noeviction)
//! gives only PASS. Exit 0 without a FAIL, 78 with one.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::process::Command;
use std::time::Duration;

use crate::common::*;

const T: Duration = Duration::from_secs(60);

/// One line of doctor's text output: status, check, the whole line.
#[derive(Debug)]
struct Line {
    status: String,
    check: String,
    text: String,
}

struct Report {
    code: Option<i32>,
    lines: Vec<Line>,
    /// The last line, `summary: ...`.
    summary: String,
    stdout: String,
    stderr: String,
}

impl Report {
    /// The statuses of `check` (one per node).
    fn of(&self, check: &str) -> Vec<&str> {
        self.lines
            .iter()
            .filter(|l| l.check == check)
            .map(|l| l.status.as_str())
            .collect()
    }

    fn line(&self, check: &str) -> &str {
        self.lines
            .iter()
            .find(|l| l.check == check)
            .map(|l| l.text.as_str())
            .unwrap_or_else(|| panic!("no {check} line in {self:?}"))
    }

    /// The checks that did not pass, as `STATUS check`.
    fn not_passed(&self) -> Vec<String> {
        self.lines
            .iter()
            .filter(|l| l.status != "PASS")
            .map(|l| format!("{} {}", l.status, l.check))
            .collect()
    }
}

impl std::fmt::Debug for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "exit {:?}", self.code)?;
        for l in &self.lines {
            writeln!(f, "{}", l.text)?;
        }
        write!(f, "stderr: {}", self.stderr)
    }
}

/// The text report read back: a node's URL once, its checks under it
/// (`  STATUS  check  detail`, continued on lines indented further, the
/// fix among them), a summary last. Each check becomes one line,
/// `STATUS  check NODE: detail fix: ...`, its wrapping undone.
fn report(out: Output) -> Report {
    let mut lines: Vec<Line> = Vec::new();
    let (mut node, mut summary) = (String::new(), String::new());
    for l in out.stdout.lines() {
        if let Some(rest) = l.strip_prefix("summary: ") {
            summary = rest.to_string();
            continue;
        }
        if !l.starts_with(' ') {
            node = l.to_string();
            continue;
        }
        let mut words = l.split_whitespace();
        let status = words.next().unwrap_or_default();
        let starts = !l.starts_with("   ") && ["PASS", "WARN", "FAIL"].contains(&status);
        match lines.last_mut() {
            Some(last) if !starts => {
                last.text.push(' ');
                last.text.push_str(l.trim());
            }
            _ => {
                let check = words.next().unwrap_or_default();
                let rest: Vec<&str> = words.collect();
                lines.push(Line {
                    status: status.to_string(),
                    check: check.to_string(),
                    text: format!("{status}  {check} {node}: {}", rest.join(" ")),
                });
            }
        }
    }
    Report {
        code: out.code,
        lines,
        summary,
        stdout: out.stdout,
        stderr: out.stderr,
    }
}

fn doctor(url: &str, args: &[&str]) -> Report {
    report(run_with_timeout(redlock(url).arg("doctor").args(args), T))
}

/// A server without the WARN of the default test server: AOF on.
fn clean_server() -> RedisServer {
    RedisServer::builder()
        .arg("--appendonly")
        .arg("yes")
        .start()
}

#[test]
fn a_clean_server_gives_only_pass_and_exit_0() {
    let server = clean_server();
    let r = doctor(&server.url(), &[]);
    assert_eq!(r.code, Some(0), "{r:?}");
    assert!(r.not_passed().is_empty(), "{r:?}");
    for check in [
        "round-trip",
        "server",
        "role",
        "eviction",
        "persistence",
        "protocol",
        "scripting",
        "rights",
        "clock",
    ] {
        assert_eq!(r.of(check), ["PASS"], "{check}: {r:?}");
    }
    // JSON: one object per check, the same verdicts.
    let out = run_with_timeout(redlock(&server.url()).args(["doctor", "--json"]), T);
    assert_eq!(out.code, Some(0), "{out:?}");
    let objects: Vec<serde_json::Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON object per line"))
        .collect();
    assert_eq!(objects.len(), r.lines.len(), "{out:?}");
    assert!(objects.iter().all(|o| o["status"] == "PASS"), "{out:?}");
    assert!(objects.iter().any(|o| o["check"] == "eviction"), "{out:?}");
}

#[test]
fn an_evicting_policy_with_maxmemory_fails() {
    let server = clean_server();
    config_set(&mut server.conn(), "maxmemory-policy", "allkeys-lru");
    // No maxmemory: nothing is ever evicted.
    let r = doctor(&server.url(), &[]);
    assert_eq!(r.of("eviction"), ["PASS"], "{r:?}");
    config_set(&mut server.conn(), "maxmemory", "100mb");
    let r = doctor(&server.url(), &[]);
    assert_eq!(r.code, Some(78), "{r:?}");
    assert_eq!(r.not_passed(), ["FAIL eviction"], "{r:?}");
    let line = r.line("eviction");
    assert!(
        line.contains("allkeys-lru")
            && line.contains("fix: CONFIG SET maxmemory-policy noeviction"),
        "{line}"
    );
    config_set(&mut server.conn(), "maxmemory-policy", "volatile-ttl");
    let r = doctor(&server.url(), &["--json"]);
    assert_eq!(r.code, Some(78), "{r:?}");
}

#[test]
fn no_persistence_warns_and_exits_0() {
    // The test harness's default: save "" and appendonly no.
    let server = RedisServer::start();
    let r = doctor(&server.url(), &[]);
    assert_eq!(r.code, Some(0), "a WARN is not a failure: {r:?}");
    assert_eq!(r.not_passed(), ["WARN persistence"], "{r:?}");
    assert!(
        r.line("persistence")
            .contains("fences restart from the clock"),
        "{r:?}"
    );
    // RDB save points alone are persistence too.
    config_set(&mut server.conn(), "save", "3600 1");
    assert_eq!(doctor(&server.url(), &[]).of("persistence"), ["PASS"]);
}

#[test]
fn a_replica_fails() {
    let primary = clean_server();
    let replica = clean_server();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(primary.port())
        .query(&mut replica.conn())
        .expect("REPLICAOF");
    let r = doctor(&replica.url(), &[]);
    assert_eq!(r.code, Some(78), "{r:?}");
    assert_eq!(r.not_passed(), ["FAIL role"], "{r:?}");
    let line = r.line("role");
    assert!(
        line.contains(&format!("a replica of 127.0.0.1:{}", primary.port())),
        "{line}"
    );
    assert!(line.contains("fix: give the primary's URL"), "{line}");
}

#[test]
fn too_few_replicas_for_replicas_n_fail() {
    let server = clean_server();
    let r = doctor(&server.url(), &["--replicas", "1"]);
    assert_eq!(r.code, Some(78), "{r:?}");
    assert_eq!(r.not_passed(), ["FAIL replicas"], "{r:?}");
    assert!(r.line("rights").contains("WAIT"), "{r:?}");
}

/// A user without EVAL gets the script-free protocol (a WARN: what needs
/// scripts is refused), and its rights are those of the transactions:
/// one without WATCH FAILs, naming it.
#[test]
fn a_user_without_eval_warns_protocol_and_needs_the_transactions_rights() {
    let server = RedisServer::builder()
        .arg("--appendonly")
        .arg("yes")
        .acl_user("noeval", "pw-noeval", "~* &* +@all -eval")
        .acl_user("nowatch", "pw-nowatch", "~* &* +@all -eval -watch")
        .start();
    let r = doctor(&server.url_with(Some("noeval"), "pw-noeval"), &[]);
    assert_eq!(r.code, Some(0), "{r:?}");
    assert_eq!(r.not_passed(), ["WARN protocol"], "{r:?}");
    assert!(r.line("protocol").contains("denies EVAL"), "{r:?}");
    assert!(
        r.line("rights").contains("may run WATCH/MULTI/EXEC"),
        "{r:?}"
    );
    let r = doctor(&server.url_with(Some("nowatch"), "pw-nowatch"), &[]);
    assert_eq!(r.code, Some(78), "{r:?}");
    assert_eq!(r.not_passed(), ["WARN protocol", "FAIL rights"], "{r:?}");
    let line = r.line("rights");
    // Redis 6.2 has no ACL DRYRUN: the harmless commands are tried.
    let dryrun = redis::cmd("ACL")
        .arg("DRYRUN")
        .arg("default")
        .arg("PING")
        .query::<String>(&mut server.conn())
        .is_ok();
    let how = match dryrun {
        true => "(by ACL DRYRUN)",
        false => "(by trying them)",
    };
    assert!(
        line.contains(&format!("may not run: watch {how}")),
        "{line}"
    );
    assert!(line.contains("fix: ACL SETUSER nowatch +watch"), "{line}");
    assert!(!r.stderr.contains("pw-no") && !line.contains("pw-no"));
}

/// The documented least-privilege user has no right to ACL DRYRUN or
/// CONFIG: the rights are tried, and what cannot be read is a WARN; one
/// from before `+info` was documented cannot be asked INFO either.
#[test]
fn the_least_privilege_user_passes_rights_by_trying_and_without_eval_needs_transactions() {
    let rules = documented_acl_rules().join(" ");
    assert!(rules.contains("+info"), "{rules}");
    let without = |right: &str| {
        let kept = rules.split_whitespace().filter(|r| *r != right);
        kept.collect::<Vec<_>>().join(" ")
    };
    // `+evalsha` kept: it cannot load a script, so scripts are still out.
    let (without_eval, without_info) = (without("+eval"), without("+info"));
    let server = RedisServer::builder()
        .acl_user("least", "pw-least", &rules)
        .acl_user("lesser", "pw-lesser", &without_eval)
        .acl_user("older", "pw-older", &without_info)
        .start();
    let r = doctor(&server.url_with(Some("least"), "pw-least"), &[]);
    assert_eq!(r.code, Some(0), "{r:?}");
    assert_eq!(r.of("rights"), ["PASS"], "{r:?}");
    assert!(r.line("rights").contains("by trying them"), "{r:?}");
    assert!(!r.of("info").contains(&"WARN"), "{r:?}");
    let r = doctor(&server.url_with(Some("older"), "pw-older"), &[]);
    assert_eq!(r.code, Some(0), "{r:?}");
    assert_eq!(r.of("info"), ["WARN"], "{r:?}");
    // Without +eval the transactions' rights are needed (the line
    // for servers without scripts grants them).
    let r = doctor(&server.url_with(Some("lesser"), "pw-lesser"), &[]);
    assert_eq!(r.code, Some(78), "{r:?}");
    assert_eq!(r.of("rights"), ["FAIL"], "{r:?}");
    let line = r.line("rights");
    assert!(
        line.contains("may not run: watch, unwatch, multi, exec (by trying them)"),
        "{line}"
    );
}

#[test]
fn eval_renamed_away_warns_protocol() {
    let server = RedisServer::builder()
        .arg("--appendonly")
        .arg("yes")
        .arg("--rename-command")
        .arg("EVAL")
        .arg("\"\"")
        .start();
    let r = doctor(&server.url(), &[]);
    assert_eq!(r.code, Some(0), "{r:?}");
    assert_eq!(r.of("protocol"), ["WARN"], "{r:?}");
    assert!(r.line("protocol").contains("no EVAL command"), "{r:?}");
}

/// Valkey 9.1 moved Lua into a module: unloaded, no script runs. Where
/// the server has no such module (Redis, Valkey 8), nothing to unload.
#[test]
fn without_the_lua_module_doctor_warns_protocol_and_a_plain_lock_runs() {
    let probe = RedisServer::start();
    let has_switch: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("enable-module-command")
        .query(&mut probe.conn())
        .unwrap_or_default();
    if has_switch.is_empty() {
        eprintln!("note: this server has no enable-module-command: no Lua module to unload");
        return;
    }
    let server = RedisServer::builder()
        .arg("--appendonly")
        .arg("yes")
        .arg("--enable-module-command")
        .arg("yes")
        .start();
    let modules: redis::Value = redis::cmd("MODULE")
        .arg("LIST")
        .query(&mut server.conn())
        .expect("MODULE LIST");
    if !format!("{modules:?}").contains("lua") {
        eprintln!(
            "note: Lua is not a module on this server (before Valkey 9.1): nothing to unload"
        );
        return;
    }
    let _: () = redis::cmd("MODULE")
        .arg("UNLOAD")
        .arg("lua")
        .query(&mut server.conn())
        .expect("MODULE UNLOAD lua");
    let r = doctor(&server.url(), &[]);
    assert_eq!(r.code, Some(0), "{r:?}");
    assert_eq!(r.not_passed(), ["WARN protocol"], "{r:?}");
    assert!(
        r.line("protocol").contains("Lua module is unloaded"),
        "{r:?}"
    );
    let dir = TestDir::new();
    let ran = dir.file("ran");
    let out = run_with_timeout(
        redlock(&server.url())
            .args(["-k", "no-lua", "-n", "--", "touch"])
            .arg(&ran),
        T,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(ran.exists(), "COMMAND did not run: {out:?}");
}

/// Issue 36, item 18: a server doctor cannot reach is exit 69, one that
/// refuses us 77, as `status` says of the same URL; 78 stays for a
/// setting that breaks locks. The fix of a refused connection is about
/// the address, not a password.
#[test]
fn an_unreachable_or_refusing_server_exits_as_status_does() {
    let url = format!("redis://127.0.0.1:{}", free_port());
    let r = doctor(&url, &[]);
    assert_eq!(r.code, Some(69), "{r:?}");
    assert_eq!(r.not_passed(), ["FAIL connect"], "{r:?}");
    let line = r.line("connect");
    assert!(line.contains("connection refused"), "{r:?}");
    assert!(!line.contains("password"), "{r:?}");
    assert!(
        r.summary.ends_with("a server is unreachable; exit 69"),
        "{r:?}"
    );
    let status = run_with_timeout(redlock(&url).args(["status", "k"]), T);
    assert_eq!(status.code, r.code, "{status:?}");

    let locked = RedisServer::builder().requirepass("s3cret-pw").start();
    let r = doctor(&locked.url(), &[]);
    assert_eq!(r.code, Some(77), "{r:?}");
    assert_eq!(r.not_passed(), ["FAIL round-trip"], "{r:?}");
    assert!(r
        .line("round-trip")
        .contains("fix: give the user and password"));
    assert!(r.summary.ends_with("a server refused us; exit 77"), "{r:?}");
    assert!(!r.stdout.contains("s3cret-pw"), "{r:?}");
    let status = run_with_timeout(redlock(&locked.url()).args(["status", "k"]), T);
    assert_eq!(status.code, r.code, "{status:?}");
}

/// Issue 36, item 18: each server's URL once, the checks under it within
/// 80 columns, and a summary line.
#[test]
fn the_report_names_each_server_once_fits_80_columns_and_sums_up() {
    let clean = clean_server();
    let bare = RedisServer::start();
    let urls = [clean.url(), bare.url()];
    let out = run_with_timeout(redlock(&urls[0]).args(["--redis", &urls[1], "doctor"]), T);
    assert_eq!(out.code, Some(0), "{out:?}");
    for url in &urls {
        let shown = out
            .stdout
            .lines()
            .filter(|l| l.contains(url.as_str()))
            .count();
        assert_eq!(shown, 1, "{url} once: {}", out.stdout);
    }
    for line in out.stdout.lines() {
        assert!(
            line.chars().count() <= 80,
            "{} columns: {line}",
            line.chars().count()
        );
    }
    let last = out.stdout.lines().last().unwrap_or_default();
    // And this host's check of how a job's tree is held.
    assert_eq!(
        last, "summary: 18 PASS, 1 WARN, 0 FAIL (2 servers): usable, with warnings; exit 0",
        "{}",
        out.stdout
    );
    let r = doctor(&clean.url(), &[]);
    assert_eq!(
        r.summary, "10 PASS, 0 WARN, 0 FAIL (1 server): ready for locks; exit 0",
        "{r:?}"
    );
}

/// Whether the binary under test is statically linked (libfaketime cannot
/// change its clock: it makes system calls directly).
fn is_static(bin: &str) -> bool {
    Command::new("ldd")
        .arg(bin)
        .output()
        .map(|o| {
            let text = String::from_utf8_lossy(&o.stdout).to_string()
                + &String::from_utf8_lossy(&o.stderr);
            text.contains("not a dynamic executable") || text.contains("statically linked")
        })
        .unwrap_or(false)
}

/// This host's clock moved by libfaketime (on the client: Debian's
/// redis-server hangs under it); the monotonic clock stays true.
#[test]
fn a_clock_offset_warns_beyond_the_drift_and_fails_beyond_the_ttl() {
    if !have_tool("faketime", "faketime") {
        return;
    }
    if is_static(bin()) {
        eprintln!("note: the clock-offset test needs a dynamically linked binary (libfaketime); skipped for {}", bin());
        return;
    }
    let server = clean_server();
    let faked = |offset: &str| {
        let mut cmd = Command::new("faketime");
        cmd.env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
            .env_remove("REDLOCK_REDIS_URL")
            .env_remove("REDIS_URL")
            .args(["-f", offset, bin(), "--redis", &server.url(), "doctor"]);
        report(run_with_timeout(&mut cmd, T))
    };
    // --ttl 30s: a drift allowance of 302 ms.
    let r = faked("+2s");
    assert_eq!(r.code, Some(0), "{r:?}");
    assert_eq!(r.not_passed(), ["WARN clock"], "{r:?}");
    assert!(r.line("clock").contains("behind this host's"), "{r:?}");
    let r = faked("-90s");
    assert_eq!(r.code, Some(78), "{r:?}");
    assert_eq!(r.not_passed(), ["FAIL clock"], "{r:?}");
    assert!(r.line("clock").contains("more than a whole TTL"), "{r:?}");
}

/// A TCP proxy on loopback that holds every reply for `delay`.
fn slow_proxy(upstream: u16, delay: Duration) -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let Ok(server) = TcpStream::connect((Ipv4Addr::LOCALHOST, upstream)) else {
                continue;
            };
            let (mut c_read, mut s_write) = (
                client.try_clone().expect("clone"),
                server.try_clone().expect("clone"),
            );
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                while let Ok(n @ 1..) = c_read.read(&mut buf) {
                    if s_write.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
            let (mut s_read, mut c_write) = (server, client);
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                while let Ok(n @ 1..) = s_read.read(&mut buf) {
                    // The delay under test (the slow link), not a wait.
                    std::thread::sleep(delay);
                    if c_write.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    port
}

#[test]
fn a_slow_round_trip_warns_and_one_past_the_timeout_fails() {
    let server = clean_server();
    // --ttl 10s: a per-node timeout of 1 s; a WARN from half of it
    // (500 ms), and 400 ms of room above the 600 ms of delay (200 ms was
    // spent by a loaded machine: 300 ms measured 525 ms).
    let slow = slow_proxy(server.port(), Duration::from_millis(600));
    let r = doctor(&format!("redis://127.0.0.1:{slow}"), &["--ttl", "10s"]);
    assert_eq!(r.code, Some(0), "{r:?}");
    assert_eq!(r.not_passed(), ["WARN round-trip"], "{r:?}");
    let slower = slow_proxy(server.port(), Duration::from_millis(2000));
    let r = doctor(&format!("redis://127.0.0.1:{slower}"), &["--ttl", "10s"]);
    assert_eq!(r.code, Some(78), "{r:?}");
    assert_eq!(r.not_passed(), ["FAIL round-trip"], "{r:?}");
    assert!(
        r.line("round-trip")
            .contains("no answer within the per-node timeout of 1s"),
        "{r:?}"
    );
}

#[test]
fn sentinel_checks_every_sentinel_the_master_and_the_replicas() {
    let mut set = SentinelSet::start();
    let r = doctor(&set.url(), &[]);
    assert_eq!(r.of("sentinels"), ["PASS"], "{r:?}");
    assert_eq!(r.of("sentinel-replicas"), ["PASS"], "{r:?}");
    assert_eq!(r.of("role"), ["PASS"], "the master's own checks: {r:?}");
    assert!(
        r.line("sentinels").contains(&format!(
            "3 of 3 sentinels answer and name 127.0.0.1:{}",
            set.primary()
        )),
        "{r:?}"
    );
    assert!(
        !r.not_passed().iter().any(|l| l.starts_with("FAIL")),
        "{r:?}"
    );

    // More replicas than there are.
    let r = doctor(&set.url(), &["--replicas", "3"]);
    assert_eq!(r.code, Some(78), "{r:?}");
    assert_eq!(r.of("sentinel-replicas"), ["FAIL"], "{r:?}");
    assert_eq!(r.of("replicas"), ["FAIL"], "{r:?}");

    // A sentinel that names another master under the same service name.
    let other = clean_server();
    let stray = RedisServer::builder()
        .config(&format!(
            "sentinel resolve-hostnames no\nsentinel monitor {} 127.0.0.1 {} 1\n",
            set.service(),
            other.port()
        ))
        .sentinel()
        .start();
    let url = with_sentinel(&set.url(), stray.port());
    let r = doctor(&url, &[]);
    assert_eq!(r.code, Some(78), "{url}: {r:?}");
    assert_eq!(r.of("sentinels"), ["FAIL"], "{r:?}");
    assert!(r.line("sentinels").contains("disagree"), "{r:?}");

    // One sentinel down: a WARN, the others still agree.
    set.kill_sentinel(0);
    let r = doctor(&set.url(), &[]);
    assert_eq!(r.of("sentinels"), ["WARN"], "{r:?}");
    assert!(r.line("sentinels").contains("2 of 3 sentinels"), "{r:?}");

    // No sentinel answers: unreachable, as for a run.
    let r = doctor(
        &format!(
            "redis+sentinel://127.0.0.1:{}/{}",
            free_port(),
            set.service()
        ),
        &[],
    );
    assert_eq!(r.code, Some(69), "{r:?}");
    assert_eq!(r.not_passed(), ["FAIL sentinels"], "{r:?}");
}

/// `redis+sentinel://H1,H2,H3/S` with one more sentinel before the `/S`.
fn with_sentinel(url: &str, port: u16) -> String {
    let (hosts, service) = url.rsplit_once('/').expect("a service");
    format!("{hosts},127.0.0.1:{port}/{service}")
}

#[test]
fn cluster_checks_every_slot_and_the_locks_primary() {
    let cluster = Cluster::start();
    let key = "doctor-cluster";
    let r = doctor(&cluster.url(), &["--key", key]);
    assert_eq!(r.of("slots"), ["PASS"], "{r:?}");
    assert_eq!(r.of("lock-slot"), ["PASS"], "{r:?}");
    assert_eq!(
        r.of("role"),
        ["PASS", "PASS", "PASS"],
        "each primary's checks: {r:?}"
    );
    assert!(
        !r.not_passed().iter().any(|l| l.starts_with("FAIL")),
        "{r:?}"
    );

    // The lock's slot served by nobody: on every node, so no view has it.
    let slot = cluster.slot_of(&format!("redlock:{{{key}}}"));
    for port in cluster.ports() {
        let _: redis::RedisResult<()> = redis::cmd("CLUSTER")
            .arg("DELSLOTS")
            .arg(slot)
            .query(&mut cluster.conn(port));
    }
    let r = doctor(&cluster.url(), &["--key", key]);
    assert_eq!(r.code, Some(78), "{r:?}");
    assert_eq!(r.of("slots"), ["FAIL"], "{r:?}");
    assert!(
        r.line("slots")
            .contains(&format!("1 slot(s) are served by no primary: {slot}")),
        "{r:?}"
    );
    assert_eq!(r.of("lock-slot"), ["FAIL"], "{r:?}");
}

#[test]
fn server_text_reaches_the_terminal_escaped() {
    let server = clean_server();
    // REPLICAOF takes any host name, and INFO shows it as given: a window
    // title escape and a right-to-left override.
    let _: () = redis::cmd("REPLICAOF")
        .arg("\x1b]0;pwned\x07\u{202e}evil")
        .arg(6379)
        .query(&mut server.conn())
        .expect("REPLICAOF");
    for args in [&[][..], &["--json"]] {
        let out = run_with_timeout(redlock(&server.url()).arg("doctor").args(args), T);
        assert_eq!(out.code, Some(78), "{out:?}");
        for raw in ['\x1b', '\x07', '\u{202e}'] {
            assert!(!out.stdout.contains(raw), "{raw:?} printed raw: {out:?}");
            assert!(!out.stderr.contains(raw), "{raw:?} printed raw: {out:?}");
        }
        assert!(out.stdout.contains("]0;pwned"), "{out:?}");
    }
}

/// Setups that break every run: doctor FAILs each (78), in the run's
/// words. One server given twice, by its port and by its unix socket:
/// every run exits 2.
#[test]
fn one_server_by_port_and_by_socket_fails_as_the_run_is_refused() {
    let dir = TestDir::new();
    let socket = dir.file("redis.sock");
    let server = RedisServer::builder()
        .arg("--appendonly")
        .arg("yes")
        .arg("--unixsocket")
        .arg(&socket.display().to_string())
        .start();
    let other = clean_server();
    let by_socket = format!("redis+unix://{}", socket.display());
    let nodes = || redlock_on([server.url(), other.url(), by_socket.clone()]);
    let run = run_with_timeout(nodes().args(["-k", "x", "--", "true"]), T);
    assert_eq!(run.code, Some(2), "{run:?}");
    let r = report(run_with_timeout(nodes().arg("doctor"), T));
    assert_eq!(r.code, Some(78), "{r:?}");
    assert_eq!(r.of("same-server"), ["FAIL"], "{r:?}");
    let words = format!(
        "'{by_socket}' names the same server as '{}' (run_id ",
        server.url()
    );
    assert!(r.line("same-server").contains(&words), "{r:?}");
    assert!(run.stderr.contains(&words), "the run's words: {run:?}");
}

/// A server that cannot persist (a failed RDB snapshot, with the default
/// stop-writes-on-bgsave-error) refuses every write: every run exits 77.
#[test]
fn a_server_refusing_writes_after_a_failed_snapshot_fails() {
    // Its directory is removed under it: the snapshot cannot be written.
    let gone = TestDir::new();
    let server = RedisServer::builder()
        .arg("--dir")
        .arg(&gone.path().display().to_string())
        .start();
    let mut conn = server.conn();
    config_set(&mut conn, "save", "3600 1");
    drop(gone);
    let _: () = redis::cmd("BGSAVE").query(&mut conn).unwrap();
    assert!(
        wait_until(T, || {
            let info: String = redis::cmd("INFO")
                .arg("persistence")
                .query(&mut conn)
                .unwrap();
            info.contains("rdb_last_bgsave_status:err")
        }),
        "the snapshot did not fail"
    );
    let run = run_with_timeout(&mut server.job("x").exec(["true"]), T);
    assert_eq!(run.code, Some(77), "{run:?}");
    // Redis 7 says "currently unable to persist to disk", 6.2 "currently
    // not able to persist on disk" (cut in the run's line).
    assert!(run.stderr.contains("MISCONF"), "{run:?}");
    let words = "MISCONF";
    let r = doctor(&server.url(), &[]);
    assert_eq!(r.code, Some(78), "{r:?}");
    assert_eq!(r.of("writes"), ["FAIL"], "{r:?}");
    let line = r.line("writes");
    assert!(
        line.contains("(Redis refused, exit 77): ") && line.contains(words),
        "{r:?}"
    );
    assert!(
        r.line("writes").contains("the server cannot persist"),
        "{r:?}"
    );
}

/// TIME renamed away: the lock scripts call it, so every run exits 77.
#[test]
fn time_renamed_away_fails_the_clock() {
    let server = RedisServer::builder()
        .arg("--appendonly")
        .arg("yes")
        .arg("--rename-command")
        .arg("TIME")
        .arg("\"\"")
        .start();
    let run = run_with_timeout(&mut server.job("x").exec(["true"]), T);
    assert_eq!(run.code, Some(77), "{run:?}");
    // "Unknown Redis command called from script" (Redis 7), "... from
    // Lua script" (6.2), "Unknown command called from script" (Valkey).
    let words = "command called from";
    assert!(run.stderr.contains(words), "{run:?}");
    let r = doctor(&server.url(), &[]);
    assert_eq!(r.code, Some(78), "{r:?}");
    assert_eq!(r.of("clock"), ["FAIL"], "{r:?}");
    assert!(r.line("clock").contains(words), "{r:?}");
}
