//! Failures of this host, not of Redis: a metrics directory that blocks
//! (a held `flock`, a FIFO) or holds planted links, and a process out of
//! file descriptors. None of them may cost the promise: the lock is kept
//! while COMMAND runs, nothing outside DIR is written, and COMMAND never
//! runs unlocked because of them.

use std::fs::{self, File};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use nix::fcntl::{Flock, FlockArg};

use crate::common::*;

const LONG: Duration = Duration::from_secs(30);

/// A job of 5 s under a 2 s TTL with `--metrics-textfile m`: the lock must
/// stay held (a live PTTL) from COMMAND's start to its end, which needs
/// the refresher and the supervision loop to run whatever DIR does (a
/// stall would lose it twice over; 1 s was lost to a starved machine).
fn held_throughout(server: &RedisServer, dir: &TestDir, key: &str, m: &Path) -> Output {
    let (started, done) = (dir.file("started"), dir.file("done"));
    let script = format!(
        "touch '{}'; sleep 5; touch '{}'",
        started.display(),
        done.display()
    );
    let job = server
        .job(key)
        .args(["--ttl", "2s", "--metrics-textfile"])
        .args([m]);
    let mut run = spawn_piped(&mut job.sh(script));
    assert!(wait_for_file(&started, LONG), "{}", run.stderr_now());
    let mut conn = server.conn();
    let lock = format!("redlock:{{{key}}}");
    while !run.has_exited() {
        let left = pttl(&mut conn, &lock);
        if left <= 0 && !done.exists() {
            panic!(
                "lock '{key}' expired (PTTL {left}) while its job ran: {}",
                run.stderr_now()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    run.wait_timeout(LONG)
}

#[test]
fn a_held_flock_in_the_metrics_directory_never_stalls_supervision() {
    let server = RedisServer::start();
    let (dir, m) = (TestDir::new(), TestDir::new());
    // Another process holds the KEY's metrics lock and never lets go.
    let file = File::create(m.file(".redlock_run_stall.lock")).unwrap();
    let _held = Flock::lock(file, FlockArg::LockExclusive).unwrap();
    let out = held_throughout(&server, &dir, "stall", m.path());
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stderr.contains("cannot write the metrics file"),
        "{}",
        out.stderr
    );
    assert!(!exists(&mut server.conn(), "redlock:{stall}"), "released");
}

#[test]
fn a_fifo_in_the_metrics_directory_never_stalls_supervision() {
    let server = RedisServer::start();
    let (dir, m) = (TestDir::new(), TestDir::new());
    let prom = m.file("redlock_run_fifo.prom");
    nix::unistd::mkfifo(&prom, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    let out = held_throughout(&server, &dir, "fifo", m.path());
    assert_eq!(out.code, Some(0), "{out:?}");
    // The FIFO was replaced by the file, which counts this run.
    assert!(fs::symlink_metadata(&prom).unwrap().is_file());
    let samples = parse_prom(&prom);
    let ok = prom_value(
        &samples,
        "redlock_run_runs_total",
        &[("key", "fifo"), ("outcome", "ok")],
    );
    assert_eq!(ok, Some(1.0), "{out:?}");
}

#[test]
fn a_metrics_directory_anyone_can_write_without_the_sticky_bit_is_refused_before_redis() {
    let server = RedisServer::start();
    let m = TestDir::new();
    fs::set_permissions(m.path(), fs::Permissions::from_mode(0o777)).unwrap();
    let job = server
        .job("open")
        .args(["--metrics-textfile"])
        .args([m.path()]);
    let out = run_with_timeout(&mut job.exec(["true"]), LONG);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("--metrics-textfile"), "{}", out.stderr);
    assert!(out.stderr.contains("sticky"), "{}", out.stderr);
    assert_eq!(dbsize(&mut server.conn()), 0);
}

/// `ln -s target link` as uid 65534 (another user of a shared DIR).
fn plant(target: &Path, link: &Path) {
    let out = Command::new("setpriv")
        .args([
            "--reuid",
            "65534",
            "--regid",
            "65534",
            "--clear-groups",
            "ln",
            "-s",
        ])
        .arg(target)
        .arg(link)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn links_planted_in_a_shared_metrics_directory_are_never_followed() {
    if !have_tool("setpriv", "util-linux") {
        return;
    }
    let server = RedisServer::start();
    let outer = TestDir::new();
    fs::set_permissions(outer.path(), fs::Permissions::from_mode(0o755)).unwrap();
    // A shared DIR, like /tmp: writable by all, sticky.
    let shared = outer.file("shared");
    fs::create_dir(&shared).unwrap();
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).unwrap();
    // Files of ours outside DIR, and one that must not come to exist.
    let (tmp_victim, prom_victim) = (outer.file("victim-tmp"), outer.file("victim-prom"));
    let lock_victim = outer.file("victim-lock");
    for victim in [&tmp_victim, &prom_victim] {
        fs::write(victim, "precious\n").unwrap();
    }
    plant(&tmp_victim, &shared.join(".redlock_run_ln.prom.tmp"));
    plant(&prom_victim, &shared.join("redlock_run_ln.prom"));
    plant(&lock_victim, &shared.join(".redlock_run_ln2.lock"));

    let run = |key: &str| {
        let job = server.job(key).args(["--metrics-textfile"]).args([&shared]);
        run_with_timeout(&mut job.exec(["true"]), LONG)
    };
    let (first, second) = (run("ln"), run("ln2"));
    // Nothing outside DIR was written or created through a link.
    for victim in [&tmp_victim, &prom_victim] {
        let text = fs::read_to_string(victim).unwrap();
        assert_eq!(text, "precious\n", "{victim:?} written: {first:?}");
    }
    assert!(!lock_victim.exists(), "created through a link: {second:?}");
    // The links at the temp and .prom names were replaced: metrics as usual.
    assert_eq!(first.code, Some(0), "{first:?}");
    let prom = shared.join("redlock_run_ln.prom");
    assert!(fs::symlink_metadata(&prom).unwrap().is_file(), "{first:?}");
    let ok = prom_value(
        &parse_prom(&prom),
        "redlock_run_runs_total",
        &[("key", "ln"), ("outcome", "ok")],
    );
    assert_eq!(ok, Some(1.0), "{first:?}");
    // A link at the lock file's name: no metrics, a warning; COMMAND ran.
    assert_eq!(second.code, Some(0), "{second:?}");
    assert!(second.stderr.contains("symbolic link"), "{}", second.stderr);
}

#[test]
fn out_of_file_descriptors_is_a_local_failure_never_redis_unavailable() {
    if !have_tool("prlimit", "util-linux") {
        return;
    }
    let server = RedisServer::start();
    let dir = TestDir::new();
    // A live holder of the lock.
    redis::cmd("SET")
        .arg("redlock:{fd}")
        .arg("someone")
        .arg("PX")
        .arg(600_000)
        .query::<()>(&mut server.conn())
        .unwrap();
    let ran = dir.file("ran");
    // From too few descriptors to start up to enough for the lock's
    // socket: whichever call runs out, COMMAND never runs.
    let outs: Vec<(u32, Output)> = (4..=12)
        .map(|n| {
            let mut cmd = Command::new("prlimit");
            cmd.arg(format!("--nofile={n}"))
                .arg(bin())
                .args(["--redis", &server.url(), "-k", "fd", "-n"])
                .args(["--on-unavailable", "run", "--", "touch"])
                .arg(&ran);
            (n, run_with_timeout(&mut cmd, LONG))
        })
        .collect();
    assert!(
        !ran.exists(),
        "COMMAND ran unlocked beside the holder: {outs:?}"
    );
    let (mut local, mut busy) = (0, 0);
    for (n, out) in &outs {
        match out.code {
            Some(71) => {
                assert!(out.stderr.contains("local failure"), "{}", out.stderr);
                assert!(out.stderr.contains("file descriptors"), "{}", out.stderr);
                assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
                local += 1;
            }
            Some(75) => busy += 1,
            // So few that a dynamically linked build cannot even load its
            // libraries: it never started, so COMMAND did not run either.
            Some(127) if out.stderr.contains("error while loading shared libraries") => {}
            _ => panic!("with {n} descriptors: {out:?}"),
        }
    }
    assert!(local > 0 && busy > 0, "{local} local failures, {busy} busy");
    assert_eq!(
        get(&mut server.conn(), "redlock:{fd}").as_deref(),
        Some("someone")
    );
}
