//! Failures of this host, not of Redis: a metrics directory that blocks
//! (a held `flock`, a FIFO), holds planted links, is missing, read-only
//! or writable by anyone; a stderr nobody reads; a process out of file
//! descriptors or processes. None of them may cost the promise: the lock
//! is kept while COMMAND runs, nothing outside DIR is written, a refusal
//! comes before Redis, and COMMAND never runs unlocked because of them.

use std::fs::{self, File};
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::fcntl::{Flock, FlockArg};

use crate::common::*;

const LONG: Duration = Duration::from_secs(30);

/// A job of 7 s under a 3 s TTL with `--metrics-textfile m`: the lock must
/// stay held (a live PTTL) from COMMAND's start to its end, which needs
/// the refresher and the supervision loop to run whatever DIR does (a
/// stall would lose it twice over; 1 s and 2 s TTLs were really lost on a
/// starved machine, the refresher not run in time).
fn held_throughout(server: &RedisServer, dir: &TestDir, key: &str, m: &Path) -> Output {
    let (started, done) = (dir.file("started"), dir.file("done"));
    let script = format!(
        "touch '{}'; sleep 7; touch '{}'",
        started.display(),
        done.display()
    );
    let job = server
        .job(key)
        .args(["--ttl", "3s", "--metrics-textfile"])
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

/// Run `job` as a uid of its own under `prlimit` (RLIMIT_NPROC counts
/// that user's processes, and root is exempt): a uid no other test, and no
/// other suite running beside this one, uses.
/// The binary is run from a copy in a directory that uid may enter (the
/// one under test may sit in a private temp dir, as CI's unpacked tarball
/// does); the returned directory holds it.
fn as_other_uid_limited(limit: &str, job: Command) -> Option<(Command, tempfile::TempDir)> {
    if !have_tool("setpriv", "util-linux") || !have_tool("prlimit", "util-linux") {
        return None;
    }
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: RLIMIT_NPROC needs another uid (setpriv as root)");
        return None;
    }
    use std::os::unix::fs::PermissionsExt;
    let uid = 60_000 + std::process::id() % 5_000;
    let public = tempfile::Builder::new()
        .prefix("redlock-uid")
        .tempdir()
        .expect("temp dir");
    let copy = public.path().join("redlock-run");
    std::fs::copy(job.get_program(), &copy).expect("copy the binary");
    for (path, mode) in [(public.path(), 0o755), (copy.as_path(), 0o755)] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }
    let mut cmd = Command::new("setpriv");
    cmd.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .args(["--clear-groups", "prlimit", limit, "--"])
        .arg(&copy)
        .args(job.get_args());
    for (name, value) in job.get_envs() {
        match value {
            Some(value) => cmd.env(name, value),
            None => cmd.env_remove(name),
        };
    }
    Some((cmd, public))
}

/// Both cases in one test: they count processes of the same uid.
#[test]
fn out_of_processes_is_exit_71_with_the_lock_released() {
    let server = RedisServer::start();
    // One process: redlock-run itself; COMMAND cannot start (nor can the
    // keeper), and COMMAND never runs.
    let Some((mut cmd, _bin)) =
        as_other_uid_limited("--nproc=1", server.job("nproc1").sh("echo started"))
    else {
        return;
    };
    let out = run_with_timeout(&mut cmd, LONG);
    assert_eq!(out.code, Some(71), "{out:?}");
    assert!(!out.stdout.contains("started"), "{out:?}");
    assert!(out.stderr.contains("cannot start"), "{out:?}");
    assert!(
        !exists(&mut server.conn(), "redlock:{nproc1}"),
        "lock left held"
    );

    // Three: redlock-run, its keeper and COMMAND (which execs, forking
    // nothing; an exchange's deadline is a timer, no thread: see
    // src/lock/deadline.rs); the refresh thread cannot start: the job is
    // stopped.
    let job = server
        .job("nproc3")
        .args(["--ttl", "30s"])
        .sh("echo started; exec sleep 20");
    let Some((mut cmd, _bin)) = as_other_uid_limited("--nproc=3", job) else {
        return;
    };
    let out = run_with_timeout(&mut cmd, LONG);
    assert_eq!(out.code, Some(71), "{out:?}");
    assert!(out.stdout.contains("started"), "{out:?}");
    assert!(out.stderr.contains("refresh thread"), "{out:?}");
    assert!(
        !exists(&mut server.conn(), "redlock:{nproc3}"),
        "lock left held"
    );
}

#[test]
fn out_of_file_descriptors_is_never_an_internal_error_nor_a_held_lock() {
    if !have_tool("prlimit", "util-linux") {
        return;
    }
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut local = 0;
    for n in 4..=24 {
        let key = format!("nofile-{n}");
        let marker = dir.file(&format!("ran-{n}"));
        let job = server.job(&key).sh(format!("touch {}", marker.display()));
        let mut cmd = Command::new("prlimit");
        cmd.arg(format!("--nofile={n}"))
            .arg("--")
            .arg(job.get_program())
            .args(job.get_args());
        let out = run_with_timeout(&mut cmd, LONG);
        assert!(
            !out.stderr.contains("internal error") && out.code != Some(1),
            "--nofile={n}: {out:?}"
        );
        assert!(out.signal.is_none(), "--nofile={n}: {out:?}");
        if out.code == Some(71) {
            local += 1;
            assert!(!marker.exists(), "--nofile={n}: COMMAND ran: {out:?}");
        }
        assert!(
            !exists(&mut server.conn(), &format!("redlock:{{{key}}}")),
            "--nofile={n}: lock left held: {out:?}"
        );
    }
    assert!(local > 0, "no limit hit the local-failure path");
}

/// A pipe whose reader never reads, already full: the next write blocks.
fn stalled_pipe() -> (OwnedFd, OwnedFd) {
    // Close-on-exec, so that no other test's child inherits it.
    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
    let flags = nix::fcntl::fcntl(&write, nix::fcntl::FcntlArg::F_GETFL).unwrap();
    let nonblocking = nix::fcntl::OFlag::from_bits_truncate(flags) | nix::fcntl::OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(&write, nix::fcntl::FcntlArg::F_SETFL(nonblocking)).unwrap();
    let mut file = std::fs::File::from(write.try_clone().unwrap());
    while file.write(&[b'x'; 4096]).is_ok() {}
    let blocking = nonblocking - nix::fcntl::OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(&write, nix::fcntl::FcntlArg::F_SETFL(blocking)).unwrap();
    (read, write)
}

/// `cmd` with stdin and stdout null and `stderr` the writing end of a
/// `stalled_pipe`.
fn spawn_stalled(cmd: &mut Command, stderr: OwnedFd) -> Child {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(stderr))
        .spawn()
        .unwrap()
}

/// How `run` exited; it must within LONG although its stderr is stalled.
fn exit_status(run: &mut Child) -> ExitStatus {
    let end = Instant::now() + LONG;
    loop {
        if let Some(status) = run.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < end, "redlock-run hung on its stderr");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_stalled_stderr_does_not_freeze_the_refresher() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let (_read, write) = stalled_pipe();
    // -v writes a line on every refresh, three a second.
    let mut cmd = server
        .job("stalled")
        .args(["-v", "--ttl", "1s"])
        .sh(format!("sleep 3; touch '{}'", dir.file("done").display()));
    let mut run = spawn_stalled(&mut cmd, write);
    // Once taken, past the TTL, as long as the job runs, the lock is
    // there: refreshed behind the stall.
    let mut conn = server.conn();
    assert!(wait_until(LONG, || exists(&mut conn, "redlock:{stalled}")));
    let finished = wait_until(LONG, || {
        let held = exists(&mut conn, "redlock:{stalled}");
        let done = dir.file("done").exists();
        assert!(held || done, "the lock expired under the running job");
        done
    });
    assert!(finished, "the job did not finish");
    let status = exit_status(&mut run);
    assert_eq!(status.code(), Some(0));
}

#[test]
fn a_stalled_stderr_does_not_keep_a_lost_lock_running() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let (_read, write) = stalled_pipe();
    let mut cmd = server
        .job("stalled-loss")
        .args(["--ttl", "1s"])
        .sh(ticking(&dir));
    let mut run = spawn_stalled(&mut cmd, write);
    let child = read_pid(&dir, "pid", LONG);
    // Someone else takes the lock: the holder must stop its job although
    // the line saying so cannot be written.
    let mut conn = server.conn();
    redis::cmd("SET")
        .arg("redlock:{stalled-loss}")
        .arg("thief")
        .query::<()>(&mut conn)
        .unwrap();
    assert!(
        wait_until(LONG, || !process_alive(child)),
        "the job ran on after its lock was taken"
    );
    let status = exit_status(&mut run);
    assert_eq!(status.code(), Some(70));
}

#[test]
fn a_missing_metrics_directory_is_refused_before_redis() {
    let server = RedisServer::start();
    let out = run_with_timeout(
        redlock(&server.url()).args([
            "-k",
            "m",
            "--metrics-textfile",
            "/nonexistent/redlock-test",
            "--",
            "true",
        ]),
        LONG,
    );
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("--metrics-textfile"), "{}", out.stderr);
    assert_eq!(dbsize(&mut server.conn()), 0);
}

#[test]
fn a_read_only_metrics_directory_is_refused_before_redis() {
    if !can_unshare("a read-only metrics directory") {
        return;
    }
    let server = RedisServer::start();
    let dir = TestDir::new();
    let m = dir.path().display().to_string();
    // Read-only for root too: a read-only mount, in a namespace of its own.
    let mut job = redlock(&server.url());
    job.args(["-k", "m", "--metrics-textfile", &m, "--", "true"]);
    let setup = format!("mount -t tmpfs -o ro tmpfs '{m}'");
    let out = run_with_timeout(&mut unshared(&setup, &job), LONG);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("--metrics-textfile"), "{}", out.stderr);
    assert!(out.stderr.contains("cannot write there"), "{}", out.stderr);
    assert_eq!(dbsize(&mut server.conn()), 0);
}
