//! Data lost under a holder, as the stand-in tests stage it: a holder that
//! learns of the loss only seconds later, jobs that say whether they began
//! beside it, a waiter woken by hand, and a winning answer lost.

use std::path::Path;
use std::time::Duration;

use super::job::read_pid;
use super::run::{spawn_piped, RunningChild, TestDir};
use super::server::RedisServer;

/// A holder of `key` that refreshes every 8 s (TTL 10 s), so that data lost
/// under it goes unnoticed for seconds; its job writes its pid to `pid` in
/// `dir` and sleeps. Returns the run and the job's pid.
pub fn holder_slow_to_notice(
    server: &RedisServer,
    dir: &TestDir,
    key: &str,
) -> (RunningChild, i32) {
    let slow = ["--ttl", "10s", "--refresh", "8s", "--kill-after", "300ms"];
    let holding = format!("echo $$ > '{}'; sleep 30", dir.file("pid").display());
    let holder = spawn_piped(&mut server.job(key).args(slow).sh(&holding));
    let pid = read_pid(dir, "pid", Duration::from_secs(30));
    (holder, pid)
}

/// A job that writes to `log` whether process `pid` (the old holder's
/// job) still ran when it began: `overlap` or `alone`.
pub fn began_beside(pid: i32, log: &Path) -> String {
    format!(
        "if kill -0 {pid} 2>/dev/null; then echo overlap; else echo alone; fi > '{}'",
        log.display()
    )
}

/// The tokens in `key`'s line of waiters, first first.
pub fn line_of(server: &RedisServer, key: &str) -> Vec<String> {
    redis::cmd("ZRANGE")
        .arg(format!("redlock:{{{key}}}:waiters"))
        .arg(0)
        .arg(-1)
        .query(&mut server.conn())
        .unwrap()
}

/// Wake whoever listens on `channel` (as a release would) and, in the same
/// pipeline, pause the server's writes for 1.5 s (CLIENT PAUSE WRITE): the
/// woken waiter's tries time out and are carried out once the pause ends,
/// their answers lost.
pub fn wake_with_writes_paused(server: &RedisServer, channel: &str) {
    let _: () = redis::pipe()
        .cmd("PUBLISH")
        .arg(channel)
        .arg("released")
        .ignore()
        .cmd("CLIENT")
        .arg("PAUSE")
        .arg(1500)
        .arg("WRITE")
        .ignore()
        .query(&mut server.conn())
        .unwrap();
}
