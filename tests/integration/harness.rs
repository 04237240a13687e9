//! Tests of the test harness itself (tests/common).

use crate::common::*;

use std::process::Command;
use std::time::{Duration, Instant};

fn ping(conn: &mut redis::Connection) -> redis::RedisResult<String> {
    redis::cmd("PING").query(conn)
}

#[test]
fn server_answers_ping_and_set_get() {
    let server = RedisServer::start();
    assert_ne!(server.port(), 6379);
    assert!(server.is_running());
    assert_eq!(raw_ping(server.port()).as_deref(), Some("+PONG"));
    let mut conn = server.conn();
    assert_eq!(ping(&mut conn).unwrap(), "PONG");
    redis::cmd("SET")
        .arg("k")
        .arg("v")
        .arg("PX")
        .arg(60_000)
        .exec(&mut conn)
        .unwrap();
    redis::cmd("HSET")
        .arg("h")
        .arg("f")
        .arg("x")
        .exec(&mut conn)
        .unwrap();
    assert_eq!(get(&mut conn, "k").as_deref(), Some("v"));
    assert_eq!(get(&mut conn, "missing"), None);
    assert!(exists(&mut conn, "k") && !exists(&mut conn, "missing"));
    assert!((1..=60_000).contains(&pttl(&mut conn, "k")));
    assert_eq!(pttl(&mut conn, "missing"), -2);
    assert_eq!(
        hgetall(&mut conn, "h").get("f").map(String::as_str),
        Some("x")
    );
    assert_eq!(dbsize(&mut conn), 2);
}

#[test]
fn servers_get_distinct_ports_and_are_independent() {
    let servers = RedisServer::many(3);
    let mut ports: Vec<u16> = servers.iter().map(|s| s.port()).collect();
    ports.sort();
    ports.dedup();
    assert_eq!(ports.len(), 3, "duplicate ports: {ports:?}");
    redis::cmd("SET")
        .arg("only-here")
        .arg(1)
        .exec(&mut servers[0].conn())
        .unwrap();
    assert!(exists(&mut servers[0].conn(), "only-here"));
    assert!(!exists(&mut servers[1].conn(), "only-here"));
}

#[test]
fn pause_blocks_replies_and_resume_restores_them() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    conn.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    server.pause();
    let t = Instant::now();
    let err = ping(&mut conn).expect_err("paused server must not answer");
    assert!(
        err.is_timeout() || err.is_io_error(),
        "unexpected error: {err}"
    );
    assert!(
        t.elapsed() >= Duration::from_millis(250),
        "{:?}",
        t.elapsed()
    );
    assert!(
        server.is_running(),
        "a stopped process still counts as running"
    );
    server.resume();
    assert_eq!(ping(&mut server.conn()).unwrap(), "PONG");
}

#[test]
fn kill_then_restart_on_same_port() {
    let mut server = RedisServer::start();
    let port = server.port();
    redis::cmd("SET")
        .arg("k")
        .arg("v")
        .exec(&mut server.conn())
        .unwrap();
    server.kill();
    server.kill(); // idempotent
    assert!(!server.is_running());
    let client = redis::Client::open(server.url()).unwrap();
    let err = client
        .get_connection_with_timeout(Duration::from_secs(1))
        .err()
        .expect("connect must fail");
    assert!(
        err.is_connection_refusal() || err.is_io_error(),
        "unexpected error: {err}"
    );
    server.restart();
    assert!(server.is_running());
    assert_eq!(server.port(), port);
    let mut conn = server.conn();
    assert_eq!(ping(&mut conn).unwrap(), "PONG");
    assert_eq!(
        dbsize(&mut conn),
        0,
        "no persistence configured, so a fresh process is empty"
    );
}

#[test]
fn requirepass_is_enforced() {
    let server = RedisServer::builder().requirepass("pw").start();
    assert_eq!(ping(&mut server.conn()).unwrap(), "PONG");
    let reply = raw_ping(server.port()).unwrap();
    assert!(reply.starts_with("-NOAUTH"), "{reply}");
    let mut c = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    assert!(ping(&mut c).is_err(), "unauthenticated command must fail");
    let mut c = redis::Client::open(server.url_with(None, "pw"))
        .unwrap()
        .get_connection()
        .unwrap();
    assert_eq!(ping(&mut c).unwrap(), "PONG");
}

#[test]
fn acl_user_and_extra_args() {
    let server = RedisServer::builder()
        .acl_user("alice", "pw2", "~* +@all")
        .arg("--maxmemory-policy")
        .arg("noeviction")
        .start();
    let client = redis::Client::open(server.url_with(Some("alice"), "pw2")).unwrap();
    let mut conn = client.get_connection().unwrap();
    let who: String = redis::cmd("ACL").arg("WHOAMI").query(&mut conn).unwrap();
    assert_eq!(who, "alice");
    redis::cmd("SET").arg("a").arg("b").exec(&mut conn).unwrap();
    assert_eq!(get(&mut conn, "a").as_deref(), Some("b"));
    let bad = redis::Client::open(server.url_with(Some("alice"), "wrong")).unwrap();
    assert!(
        bad.get_connection().is_err(),
        "wrong password must be rejected"
    );
    let cfg: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query(&mut conn)
        .unwrap();
    assert_eq!(cfg, ["maxmemory-policy", "noeviction"]);
}

#[test]
fn drop_leaves_no_process_or_dir() {
    let server = RedisServer::start();
    let (pid, dir) = (server.pid(), server.dir());
    assert!(process_alive(pid) && dir.exists());
    server.pause(); // drop must cope with a stopped server
    drop(server);
    assert!(!process_alive(pid), "redis-server {pid} survived drop");
    assert!(!dir.exists(), "{} not removed", dir.display());
}

#[test]
fn run_helpers() {
    let out = run_with_timeout(
        Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]),
        Duration::from_secs(10),
    );
    assert_eq!(
        (out.code, out.stdout.as_str(), out.stderr.as_str()),
        (Some(3), "out\n", "err\n")
    );

    let mut child = spawn_piped(Command::new("sh").args(["-c", "echo started; exec sleep 30"]));
    assert!(wait_until(Duration::from_secs(5), || child.stdout_now() == "started\n"));
    assert!(process_alive(child.pid()));
    child.signal(nix::sys::signal::Signal::SIGTERM);
    let out = child.wait_timeout(Duration::from_secs(5));
    assert_eq!((out.code, out.signal), (None, Some(15)));
    assert!(!process_alive(child.pid()));

    let timed_out = std::panic::catch_unwind(|| {
        run_with_timeout(Command::new("sleep").arg("30"), Duration::from_millis(100))
    });
    assert!(timed_out.is_err(), "run_with_timeout must panic on timeout");

    let cmd = redlock("redis://127.0.0.1:1");
    let args: Vec<_> = cmd.get_args().collect();
    assert_eq!(args, ["--redis", "redis://127.0.0.1:1"]);
    assert!(cmd.get_envs().any(|(k, v)| k == "REDIS_URL" && v.is_none()));

    let dir = TestDir::new();
    assert_eq!(dir.read("f"), None);
    std::fs::write(dir.file("f"), "x").unwrap();
    assert!(wait_for_file(dir.file("f"), Duration::from_secs(1)));
    assert_eq!(dir.read("f").as_deref(), Some("x"));
}
