//! Before and after a stop: `--warn-signal` with `--warn-before`,
//! `--on-lost`, and `--lease-file` (`REDLOCK_LEASE_FILE`).

use crate::common::*;

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const LONG: Duration = Duration::from_secs(30);

/// COMMAND: record when USR1 and TERM arrive (seconds since the epoch)
/// in `dir`, say it started, and run until TERM. bash, for a clock read
/// without a fork: the stop signals the group twice (by group, then each
/// process), which would kill a `date` started by the trap.
fn warned_job(dir: &TestDir) -> Vec<String> {
    let script = format!(
        "trap 'printf %s \"$EPOCHREALTIME\" > {d}/warned' USR1; \
         trap 'printf %s \"$EPOCHREALTIME\" > {d}/termed; exit 0' TERM; \
         printf %s \"$EPOCHREALTIME\" > {d}/started; while :; do sleep 0.05; done",
        d = dir.path().display()
    );
    vec!["bash".into(), "-c".into(), script]
}

/// A time the job wrote, in seconds since the epoch.
fn at(dir: &TestDir, name: &str) -> Option<f64> {
    dir.read(name)?.trim().replace(',', ".").parse().ok()
}

#[test]
fn the_warning_comes_before_max_hold_stops_the_job() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut cmd = server
        .job("warned")
        .args([
            "--max-hold",
            "3s",
            "--warn-signal",
            "USR1",
            "--warn-before",
            "1500ms",
        ])
        .exec(warned_job(&dir));
    let out = run_with_timeout(&mut cmd, LONG);
    assert_eq!(out.code, Some(124), "{out:?}");
    let (started, warned, termed) = (at(&dir, "started"), at(&dir, "warned"), at(&dir, "termed"));
    let (started, warned, termed) = (
        started.unwrap(),
        warned.expect("no warning"),
        termed.unwrap(),
    );
    assert!(warned < termed, "warned at {warned}, SIGTERM at {termed}");
    // Loosely: about 1.5 s before the SIGTERM, not at the start.
    assert!(
        (0.5..3.0).contains(&(termed - warned)),
        "{}",
        termed - warned
    );
    assert!(
        warned - started > 0.5,
        "warned {}s after the start",
        warned - started
    );
    assert!(out.stderr.contains("sent SIGUSR1 to COMMAND"), "{out:?}");
}

#[test]
fn no_warning_without_time_for_it() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut cmd = server
        .job("late")
        .args([
            "--max-hold",
            "1s",
            "--warn-signal",
            "USR1",
            "--warn-before",
            "2s",
        ])
        .exec(warned_job(&dir));
    let out = run_with_timeout(&mut cmd, LONG);
    assert_eq!(out.code, Some(124), "{out:?}");
    assert!(dir.read("termed").is_some(), "{out:?}");
    assert!(
        dir.read("warned").is_none(),
        "warned without time to: {out:?}"
    );
}

#[test]
fn the_warning_comes_before_a_lease_that_cannot_be_refreshed_ends() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut cmd = server
        .job("paused")
        .args(["--ttl", "6s", "--refresh", "1s", "--kill-after", "500ms"])
        .args(["--warn-signal", "USR1", "--warn-before", "1s"])
        .exec(warned_job(&dir));
    let mut run = spawn_started(&mut cmd, &dir.file("started"), LONG);
    // Refreshes fail from now on.
    server.pause();
    let out = run.wait_timeout(LONG);
    server.resume();
    assert_eq!(out.code, Some(70), "{out:?}");
    let (warned, termed) = (
        at(&dir, "warned").expect("no warning"),
        at(&dir, "termed").unwrap(),
    );
    assert!(warned < termed, "warned at {warned}, SIGTERM at {termed}");
    assert!(
        (0.3..3.0).contains(&(termed - warned)),
        "{}",
        termed - warned
    );
}

#[test]
fn a_healthy_run_is_never_warned() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    // A long --warn-before, over several refreshes that all succeed.
    let script = format!(
        "trap 'touch {d}/warned' USR1; i=0; while [ $i -lt 40 ]; do sleep 0.1; i=$((i+1)); done",
        d = dir.path().display()
    );
    let mut cmd = server
        .job("healthy")
        .args([
            "--ttl",
            "3s",
            "--warn-signal",
            "USR1",
            "--warn-before",
            "10s",
        ])
        .sh(script);
    let out = run_with_timeout(&mut cmd, LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        dir.read("warned").is_none(),
        "a healthy run was warned: {out:?}"
    );
}

#[test]
fn on_lost_runs_once_and_never_delays_the_stop() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let d = dir.path().display();
    let hook = format!(
        "echo \"$REDLOCK_KEY $REDLOCK_FENCE $REDLOCK_LOST_REASON\" >> {d}/hook; \
         while [ ! -e {d}/hook.go ]; do sleep 0.02; done; echo end >> {d}/hook"
    );
    let mut cmd = server
        .job("hooked")
        .args(["--on-lost", &hook])
        .exec(warned_job(&dir));
    let mut run = spawn_started(&mut cmd, &dir.file("started"), LONG);
    let mut conn = server.conn();
    let fence = get(&mut conn, "redlock:{hooked}:fence").expect("fence");
    // The holder hears the force-release once it listens on its channel.
    assert!(wait_until(LONG, || clients_subscribed_to(&mut conn, 1) == 1));
    let out = run_with_timeout(
        redlock(&server.url()).args(["force-release", "hooked"]),
        LONG,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    // The job is stopped and the lock given back while the hook still runs.
    assert!(
        wait_for_file(dir.file("termed"), LONG),
        "the job was not stopped"
    );
    assert!(
        wait_until(LONG, || !exists(&mut conn, "redlock:{hooked}")),
        "the lock was kept while the hook ran"
    );
    assert!(wait_for_file(dir.file("hook"), LONG), "the hook never ran");
    assert!(!run.has_exited());
    std::fs::write(dir.file("hook.go"), "").unwrap();
    let out = run.wait_timeout(LONG);
    assert_eq!(out.code, Some(70), "{out:?}");
    assert_eq!(
        dir.read("hook").unwrap(),
        // Once, and it ran to its end: it was not killed for taking long.
        format!("hooked {fence} revoked\nend\n")
    );
}

#[test]
fn the_lease_file_follows_the_refreshes_and_is_removed() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let hold = Hold::new(&dir);
    let d = dir.path().display();
    let script = format!(
        "f=\"$REDLOCK_LEASE_FILE\"; echo \"$f\" > {d}/path; cat \"$f\" > {d}/first; \
         while [ \"$(cat \"$f\")\" = \"$(cat {d}/first)\" ]; do sleep 0.05; done; \
         cat \"$f\" > {d}/second; {}",
        hold.script("true")
    );
    let before = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let mut cmd = server
        .job("leased")
        .args(["--lease-file", "--ttl", "3s", "--refresh", "500ms"])
        .sh(script);
    let mut run = hold.spawn(&mut cmd, LONG);
    let path = std::path::PathBuf::from(dir.read("path").unwrap().trim());
    let mode = std::fs::metadata(path.parent().unwrap())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700, "{}", path.display());
    let ms = |name: &str| dir.read(name).unwrap().trim().parse::<u128>().unwrap();
    let (first, second) = (ms("first"), ms("second"));
    assert!(
        first > before && first <= before + 3_000 + 1_000,
        "{first} vs {before}"
    );
    assert!(second > first, "{second} <= {first}");
    hold.go();
    assert_eq!(run.wait_timeout(LONG).code, Some(0));
    assert!(
        !path.parent().unwrap().exists(),
        "the lease file's directory is left"
    );
}

#[test]
fn warning_options_are_checked_before_anything_reaches_redis() {
    let server = RedisServer::start();
    for args in [
        &["--warn-signal", "USR1"][..],
        &["--warn-before", "1s"],
        &["--warn-signal", "KILL", "--warn-before", "1s"],
        &["--warn-signal", "USR9", "--warn-before", "1s"],
        &["--warn-signal", "USR1", "--warn-before", "0s"],
    ] {
        let out = run_with_timeout(&mut server.job("opts").args(args).sh("true"), LONG);
        assert_eq!(out.code, Some(2), "{args:?}: {out:?}");
        assert!(out.stderr.contains("--warn-"), "{out:?}");
    }
    assert_eq!(dbsize(&mut server.conn()), 0);
}

/// A `$TMPDIR` anyone may write to, without the sticky bit: our lease
/// directory can be renamed away and another put in its place.
fn open_tmpdir(dir: &TestDir) -> std::path::PathBuf {
    let tmp = dir.file("tmp");
    std::fs::create_dir(&tmp).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o777)).unwrap();
    tmp
}

/// Another user swaps our lease directory for one of theirs holding a
/// link (to a file of root's) or a FIFO at every name the old code
/// wrote: the refresher writes through the directory it made, never by
/// path, so the file is untouched, the refresher never blocks, and the
/// job sees its lease move on.
#[test]
fn the_lease_file_is_never_written_through_a_directory_someone_else_swapped_in() {
    let server = RedisServer::start();
    for plant in ["ln -s \"$VICTIM\"", "mkfifo"] {
        let dir = TestDir::new();
        let tmp = open_tmpdir(&dir);
        let victim = dir.file("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        let d = dir.path().display();
        let script = format!(
            "f=\"$REDLOCK_LEASE_FILE\"; p=$(dirname \"$f\"); cat \"$f\" > {d}/first; \
             mv \"$p\" \"$p.moved\" && mkdir \"$p\" && {plant} \"$p/.lease.tmp\" && \
             {plant} \"$p/lease\" || exit 9; i=0; \
             while [ $i -lt 500 ] && [ \"$(cat \"$p.moved/lease\")\" = \"$(cat {d}/first)\" ]; \
             do sleep 0.02; i=$((i+1)); done; cat \"$p.moved/lease\" > {d}/second"
        );
        let mut cmd = server
            .job("swapped")
            .args(["--lease-file", "--ttl", "3s", "--refresh", "300ms"])
            .sh(script);
        cmd.env("TMPDIR", &tmp).env("VICTIM", &victim);
        let out = run_with_timeout(&mut cmd, LONG);
        assert_eq!(out.code, Some(0), "{plant}: {out:?}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        assert_ne!(
            dir.read("first"),
            dir.read("second"),
            "{plant}: no refresh seen"
        );
    }
}

/// Once the lock is known lost (here revoked), the file no longer
/// promises the job time while it is in its SIGTERM grace.
#[test]
fn a_lost_lock_ends_the_lease_file_at_once() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let d = dir.path().display();
    // In the TERM trap, give the file a moment to be rewritten (it is,
    // right after the stop), then say what it promised.
    let script = format!(
        "f=\"$REDLOCK_LEASE_FILE\"; \
         trap 'i=0; while [ $i -lt 100 ]; do now=${{EPOCHREALTIME/[.,]/}}; \
         [ \"$(cat \"$f\")\" -le $((now / 1000 + 50)) ] && break; sleep 0.02; i=$((i+1)); done; \
         echo \"$(cat \"$f\") $((${{EPOCHREALTIME/[.,]/}} / 1000))\" > {d}/promised; exit 0' TERM; \
         touch {d}/started; while :; do sleep 0.05; done"
    );
    let mut cmd = server
        .job("ended")
        .args(["--lease-file", "--ttl", "30s", "--kill-after", "5s"])
        .exec(["bash", "-c", &script]);
    let mut run = spawn_started(&mut cmd, &dir.file("started"), LONG);
    let mut conn = server.conn();
    assert!(wait_until(LONG, || clients_subscribed_to(&mut conn, 1) == 1));
    let out = run_with_timeout(
        redlock(&server.url()).args(["force-release", "ended"]),
        LONG,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(run.wait_timeout(LONG).code, Some(70));
    let promised = dir.read("promised").unwrap();
    let (until, now) = promised.trim().split_once(' ').unwrap();
    let (until, now): (u128, u128) = (until.parse().unwrap(), now.parse().unwrap());
    assert!(
        until <= now + 50,
        "the file still promised {}ms",
        until - now
    );
}

/// A run inside COMMAND of another key, or one that runs unlocked, does
/// not hand the outer lease file on, and its `--on-lost` hook does not get
/// the outer token; a nested run of the same key honours its own
/// `--lease-file` (the outer run's file) or refuses it, and refuses
/// `--on-lost`, saying why.
#[test]
fn nested_runs_get_no_outer_lease_file_or_token_and_never_drop_their_options() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let d = dir.path().display();
    let (b, url) = (bin(), server.url());
    let show = |name: &str| format!("sh -c 'echo \"${{REDLOCK_LEASE_FILE-unset}}\" > {d}/{name}'");
    let script = format!(
        "echo \"$REDLOCK_LEASE_FILE\" > {d}/outer; \
         {b} --redis {url} -k other -- {other}; \
         {b} --redis redis://127.0.0.1:1 --on-unavailable run -k third -- {unlocked}; \
         {b} --redis {url} -k same --lease-file -- {same}; \
         {b} --redis {url} -k same --on-lost true -- true 2> {d}/on-lost-err; echo $? > {d}/on-lost; \
         {b} --redis {url} -k lost --on-lost 'echo \"${{REDLOCK_TOKEN-unset}}\" > {d}/hook' \
             -- sh -c '{b} --redis {url} force-release lost; exec sleep 30'; true",
        other = show("other"),
        unlocked = show("unlocked"),
        same = show("same"),
    );
    let mut cmd = server.job("same").args(["--lease-file"]).sh(&script);
    let out = run_with_timeout(&mut cmd, LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    let read = |name: &str| dir.read(name).unwrap_or_default().trim().to_string();
    assert!(read("outer").ends_with("/lease"), "{}", read("outer"));
    assert_eq!(read("other"), "unset");
    assert_eq!(read("unlocked"), "unset");
    assert_eq!(
        read("same"),
        read("outer"),
        "the outer lease is this one's too"
    );
    assert_eq!(read("on-lost"), "2");
    assert!(
        read("on-lost-err").contains("--on-lost"),
        "{}",
        read("on-lost-err")
    );
    assert!(
        wait_until(LONG, || dir.read("hook").is_some()),
        "the hook never ran"
    );
    assert_eq!(read("hook"), "unset");

    // Without a lease file outside, a nested --lease-file is refused.
    let script = format!("{b} --redis {url} -k bare --lease-file -- true");
    let out = run_with_timeout(&mut server.job("bare").sh(&script), LONG);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("--lease-file"), "{out:?}");
}

/// Nothing is left in `$TMPDIR`: not when the lease file cannot be
/// written (a full file system), and not after a run killed with SIGKILL
/// (the next run with --lease-file removes what it left).
#[test]
fn lease_directories_are_not_left_behind() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let tmp = dir.file("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let leftovers = || std::fs::read_dir(&tmp).unwrap().count();

    let mut cmd = server.job("killed").args(["--lease-file"]).sh(format!(
        "touch {}/started; exec sleep 60",
        dir.path().display()
    ));
    cmd.env("TMPDIR", &tmp);
    let mut killed = spawn_started(&mut cmd, &dir.file("started"), LONG);
    assert_eq!(leftovers(), 1);
    killed.signal(nix::sys::signal::Signal::SIGKILL);
    killed.wait_timeout(LONG);
    let mut cmd = server.job("next").args(["--lease-file"]).sh("true");
    cmd.env("TMPDIR", &tmp);
    assert_eq!(run_with_timeout(&mut cmd, LONG).code, Some(0));
    assert_eq!(leftovers(), 0, "a killed run's lease directory is left");

    if !can_unshare("--lease-file on a full TMPDIR") {
        return;
    }
    let t = tmp.display();
    let mut inner = server.job("full").args(["--lease-file"]).sh(format!(
        "echo \"${{REDLOCK_LEASE_FILE-unset}}\" > {}/seen",
        dir.path().display()
    ));
    inner.env("TMPDIR", &tmp);
    let setup = format!(
        "mount -t tmpfs -o size=8k tmpfs {t} && (dd if=/dev/zero of={t}/fill bs=1k count=64 \
         2>/dev/null || true)"
    );
    let mut shell = std::process::Command::new("sh");
    shell
        .arg("-c")
        .arg(format!(
            "\"$@\"; echo $? > {d}/code; ls -A {t} > {d}/listing",
            d = dir.path().display()
        ))
        .arg("sh")
        .arg(inner.get_program())
        .args(inner.get_args())
        .env("TMPDIR", &tmp);
    let out = run_with_timeout(&mut unshared(&setup, &shell), LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(dir.read("code").as_deref(), Some("0\n"), "{out:?}");
    assert!(
        out.stderr.contains("cannot write the lease file"),
        "{out:?}"
    );
    assert_eq!(dir.read("seen").as_deref(), Some("unset\n"));
    assert_eq!(
        dir.read("listing").as_deref(),
        Some("fill\n"),
        "left in a full TMPDIR"
    );
}
