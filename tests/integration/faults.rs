//! Never run unlocked: lock loss (stolen, deleted, Redis killed or paused),
//! the kill grace, signals, parent death, the terminal, and mutual
//! exclusion while Redis is being paused.

use std::time::{Duration, Instant};

use crate::common::*;
use nix::sys::signal::Signal;

const LONG: Duration = Duration::from_secs(30);

/// A job whose shell and background grandchild both record their pids.
fn tree_script(dir: &TestDir) -> String {
    format!(
        "sleep 100 & echo $! > '{g}'; echo $$ > '{c}'; wait",
        g = dir.file("grandchild").display(),
        c = dir.file("child").display()
    )
}

fn assert_tree_stopped_with_70(mut run: RunningChild, dir: &TestDir) {
    let child = read_pid(dir, "child", LONG);
    let grandchild = read_pid(dir, "grandchild", LONG);
    let out = run.wait_timeout(LONG);
    assert_eq!(out.code, Some(70), "{out:?}");
    assert!(out.stderr.contains("lost"), "one clear line: {out:?}");
    assert!(!process_alive(child), "child survived the lock");
    assert!(!process_alive(grandchild), "grandchild survived the lock");
}

/// A TTL 1s job whose tree runs when `tamper` changes its lock in Redis:
/// the whole tree is stopped, exit 70. Returns the server to look at.
fn tree_stops_when(key: &str, tamper: impl FnOnce(&mut redis::Connection)) -> RedisServer {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let run = spawn_piped(&mut server.job(key).args(["--ttl", "1s"]).sh(tree_script(&dir)));
    read_pid(&dir, "grandchild", LONG);
    tamper(&mut server.conn());
    assert_tree_stopped_with_70(run, &dir);
    server
}

#[test]
fn stolen_lock_stops_the_whole_tree_with_70() {
    let server = tree_stops_when("stolen", |conn| {
        let _: () = redis::cmd("SET")
            .arg("redlock:{stolen}")
            .arg("another-token")
            .query(conn)
            .unwrap();
    });
    assert_eq!(
        get(&mut server.conn(), "redlock:{stolen}").as_deref(),
        Some("another-token")
    );
}

#[test]
fn deleted_lock_stops_the_whole_tree_with_70() {
    tree_stops_when("deleted", |conn| {
        let _: () = redis::cmd("DEL")
            .arg("redlock:{deleted}")
            .query(conn)
            .unwrap();
    });
}

/// Redis goes away while a TTL 3s job runs: the job must be dead before
/// the lock could have expired in Redis. The expiry is read from Redis
/// itself just before the fault, so no refresh can have pushed it later.
fn job_is_stopped_before_expiry(
    fault: impl FnOnce(&mut RedisServer),
    undo: impl FnOnce(&mut RedisServer),
) {
    let mut server = RedisServer::start();
    let dir = TestDir::new();
    let mut run = spawn_piped(
        &mut server
            .job("fault")
            .args(["--ttl", "3s"])
            .sh(tree_script(&dir)),
    );
    let child = read_pid(&dir, "child", LONG);
    let grandchild = read_pid(&dir, "grandchild", LONG);
    let mut conn = server.conn();
    let before = Instant::now();
    let left = pttl(&mut conn, "redlock:{fault}");
    assert!(left > 0, "lock not held: {left}");
    let expiry = before + Duration::from_millis(left as u64);
    fault(&mut server);
    let gone = wait_until(LONG, || !process_alive(child) && !process_alive(grandchild));
    let stopped_at = Instant::now();
    undo(&mut server);
    assert!(gone, "job still running");
    assert!(
        stopped_at < expiry,
        "job outlived its lock by {:?}",
        stopped_at.duration_since(expiry)
    );
    let out = run.wait_timeout(LONG);
    assert_eq!(out.code, Some(70), "{out:?}");
    assert!(out.stderr.contains("could not be refreshed"), "{out:?}");
}

#[test]
fn redis_killed_stops_the_job_before_the_lock_could_expire() {
    job_is_stopped_before_expiry(|s| s.kill(), |_| {});
}

#[test]
fn redis_paused_stops_the_job_before_the_lock_could_expire() {
    job_is_stopped_before_expiry(|s| s.pause(), |s| s.resume());
}

#[test]
fn a_child_ignoring_sigterm_is_killed_after_the_grace() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let script = format!(
        "trap '' TERM; echo $$ > '{}'; while :; do sleep 0.05; done",
        dir.file("child").display()
    );
    let mut run = spawn_piped(
        &mut server
            .job("stubborn")
            .args(["--ttl", "3s", "--kill-after", "1s"])
            .sh(&script),
    );
    let child = read_pid(&dir, "child", LONG);
    let _: () = redis::cmd("DEL")
        .arg("redlock:{stubborn}")
        .query(&mut server.conn())
        .unwrap();
    assert!(
        wait_until(LONG, || run.stderr_now().contains("lost")),
        "loss not noticed"
    );
    let noticed = Instant::now();
    let out = run.wait_timeout(LONG);
    assert_eq!(out.code, Some(70), "{out:?}");
    assert!(!process_alive(child));
    // It ignores SIGTERM, so only SIGKILL, after the grace, can have ended it.
    assert!(
        noticed.elapsed() >= Duration::from_millis(900),
        "killed before the grace ran out"
    );
}

/// A job that records each signal it receives, and exits 0 on a stop signal.
///
/// Once ready it waits in the `wait` builtin and starts no process (a
/// loop of `sleep 0.05` made dash vfork twenty times a second, and a
/// signal that reaches a shell's vfork child before its exec can eat the
/// shell's pending trap). The background sleep ignores USR1 and USR2
/// (and, in the background, INT and QUIT); it is stopped as a leftover
/// when the shell exits.
fn trapping_script(dir: &TestDir) -> String {
    let log = dir.file("signals");
    let log = log.display();
    format!(
        "for s in INT TERM HUP QUIT; do trap \"echo $s >> '{log}'; exit 0\" $s; done; \
         trap \"echo USR1 >> '{log}'\" USR1; trap \"echo USR2 >> '{log}'\" USR2; \
         (trap '' USR1 USR2; exec sleep 1000) & \
         touch '{ready}'; while :; do wait; done",
        ready = dir.file("ready").display()
    )
}

#[test]
fn signals_reach_the_child_and_the_lock_is_released_after() {
    for sig in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
    ] {
        let server = RedisServer::start();
        let dir = TestDir::new();
        let mut cmd = server.job("sig").sh(trapping_script(&dir));
        // A signal ignored when redlock-run starts stays ignored, as
        // nohup(1) means it (see signals.rs): under `nohup` SIGHUP never
        // reached the job, so the test does not inherit that.
        // SAFETY: signal(2) is async-signal-safe; nothing else runs here.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                nix::sys::signal::signal(Signal::SIGHUP, nix::sys::signal::SigHandler::SigDfl)
                    .map(drop)
                    .map_err(std::io::Error::from)
            });
        }
        let mut run = spawn_piped(&mut cmd);
        assert!(wait_for_file(dir.file("ready"), LONG));
        run.signal(sig);
        let out = run.wait_timeout(LONG);
        assert_eq!(out.code, Some(0), "{sig}: the child's own code: {out:?}");
        let name = sig.as_str().trim_start_matches("SIG");
        assert_eq!(
            dir.read("signals").as_deref().map(str::trim),
            Some(name),
            "{sig}"
        );
        assert!(
            !exists(&mut server.conn(), "redlock:{sig}"),
            "{sig}: lock not released"
        );
    }
}

#[test]
fn usr1_reaches_the_child_without_ending_the_run() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut run = spawn_piped(&mut server.job("usr").sh(trapping_script(&dir)));
    assert!(wait_for_file(dir.file("ready"), LONG));
    run.signal(Signal::SIGUSR1);
    assert!(wait_until(LONG, || dir
        .read("signals")
        .is_some_and(|s| s.contains("USR1"))));
    run.signal(Signal::SIGUSR2);
    assert!(wait_until(LONG, || dir
        .read("signals")
        .is_some_and(|s| s.contains("USR2"))));
    assert!(!run.has_exited(), "USR1/USR2 must not end the run");
    assert!(
        exists(&mut server.conn(), "redlock:{usr}"),
        "lock still held"
    );
    run.signal(Signal::SIGTERM);
    assert_eq!(run.wait_timeout(LONG).code, Some(0));
}

#[test]
fn a_child_killed_by_a_forwarded_signal_gives_128_plus_n() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let script = format!("touch '{}'; exec sleep 100", dir.file("ready").display());
    let mut run = spawn_piped(&mut server.job("plain").sh(&script));
    assert!(wait_for_file(dir.file("ready"), LONG));
    // `exec sleep` may not have happened yet; the shell dies of TERM too.
    run.signal(Signal::SIGTERM);
    let out = run.wait_timeout(LONG);
    assert_eq!(out.code, Some(143), "{out:?}");
    assert!(!exists(&mut server.conn(), "redlock:{plain}"));
}

#[test]
fn a_signal_while_waiting_stops_waiting_and_leaves_nothing() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut holder = spawn_piped(&mut server.job("queue").sh(trapping_script(&dir)));
    assert!(wait_for_file(dir.file("ready"), LONG));
    let marker = dir.file("waiter-ran");
    let mut waiter = spawn_waiting(
        &mut server
            .job("queue")
            .args(["-v"])
            .sh(format!("touch '{}'", marker.display())),
        LONG,
    );
    waiter.signal(Signal::SIGINT);
    let out = waiter.wait_timeout(LONG);
    assert_eq!(out.code, Some(130), "{out:?}");
    assert!(!marker.exists());
    holder.signal(Signal::SIGTERM);
    assert_eq!(holder.wait_timeout(LONG).code, Some(0));
    assert_eq!(
        dbsize(&mut server.conn()),
        1,
        "only the fence counter remains"
    );
}

#[test]
fn sigkill_to_the_wrapper_kills_the_child() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut run = spawn_piped(&mut server.job("orphan").sh(tree_script(&dir)));
    let child = read_pid(&dir, "child", LONG);
    run.signal(Signal::SIGKILL);
    run.wait_timeout(LONG);
    assert!(
        wait_until(Duration::from_secs(5), || !process_alive(child)),
        "child outlived its wrapper"
    );
}

#[test]
fn leftovers_in_the_group_are_stopped_before_release() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let script = format!(
        "sleep 100 & echo $! > '{}'; exit 4",
        dir.file("grandchild").display()
    );
    let out = run_with_timeout(&mut server.job("leftover").sh(&script), LONG);
    assert_eq!(out.code, Some(4), "{out:?}");
    let grandchild = read_pid(&dir, "grandchild", LONG);
    assert!(
        !process_alive(grandchild),
        "a daemon of the job outlived the lock"
    );
    assert!(!exists(&mut server.conn(), "redlock:{leftover}"));
}

#[test]
fn an_interactive_child_reads_the_terminal() {
    if !have_tool("script", "bsdutils") {
        return;
    }
    let server = RedisServer::start();
    let dir = TestDir::new();
    let got = dir.file("got");
    let ready = dir.file("ready");
    let inner = format!(
        "{bin} --redis {url} -k tty -- sh -c 'touch {ready}; read line; echo \"got:\\$line\" > {got}'",
        bin = bin(),
        url = server.url(),
        ready = ready.display(),
        got = got.display()
    );
    // Type only once the child waits for input, as a person would.
    let feed = type_when_ready(&ready, "hello");
    let out = on_a_pty(&feed, &inner);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(&got).ok().as_deref(),
        Some("got:hello\n")
    );
}

#[test]
fn ctrl_z_suspends_the_job_and_fg_resumes_it() {
    let dir = TestDir::new();
    let Some(tmux) = Tmux::start(&dir) else {
        return;
    };
    let server = RedisServer::start();
    let out = dir.file("out");
    let ready = dir.file("ready");
    let job = format!(
        "-k jobctl -- sh -c 'touch {}; exec cat > {}'",
        ready.display(),
        out.display()
    );
    tmux.start_job(&server.url(), &job, &ready);
    tmux.suspend(&dir);
    assert!(
        exists(&mut server.conn(), "redlock:{jobctl}"),
        "still held while suspended"
    );
    tmux.fg_and_type_to_cat(&dir, "out");
    assert!(
        !exists(&mut server.conn(), "redlock:{jobctl}"),
        "released after the job"
    );
}

#[test]
fn stty_tostop_cannot_stop_the_wrapper() {
    let dir = TestDir::new();
    let Some(tmux) = Tmux::start(&dir) else {
        return;
    };
    let server = RedisServer::start();
    // COMMAND owns the terminal; -v writes a line on every refresh (three
    // a second with --ttl 1s) from the background.
    tmux.keys(&[
        &format!(
            "stty tostop; {} --redis {} -k tostop -v --ttl 1s -- sleep 2",
            bin(),
            server.url()
        ),
        "Enter",
    ]);
    assert_eq!(tmux.last_exit(&dir, "exit"), "exit=0", "{}", tmux.screen());
    assert!(
        tmux.screen().contains("refreshed lock 'tostop'"),
        "{}",
        tmux.screen()
    );
}

#[test]
fn ctrl_z_on_a_script_that_calls_us_gives_the_prompt_back() {
    let dir = TestDir::new();
    let Some(tmux) = Tmux::start(&dir) else {
        return;
    };
    let server = RedisServer::start();
    let ready = dir.file("ready");
    let script = dir.file("script.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n{} --redis {} -k script -- sh -c 'touch {}; sleep 1'\necho script-done\n",
            bin(),
            server.url(),
            ready.display()
        ),
    )
    .unwrap();
    tmux.keys(&[&format!("sh {}", script.display()), "Enter"]);
    assert!(wait_for_file(&ready, LONG), "{}", tmux.screen());
    tmux.suspend(&dir);
    tmux.keys(&["fg", "Enter"]);
    assert_eq!(tmux.last_exit(&dir, "exit"), "exit=0", "{}", tmux.screen());
    assert!(tmux.screen().contains("script-done"), "{}", tmux.screen());
    assert!(!exists(&mut server.conn(), "redlock:{script}"));
}
