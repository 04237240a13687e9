//! Job control and the terminal: an interactive job reads the terminal,
//! Ctrl-Z and `fg` stop and resume the job with the wrapper, a SIGSTOP of
//! the wrapper alone or a lease that ran out while stopped kills the job
//! when it is continued, `stty tostop` cannot stop the wrapper, and the
//! terminal comes back after `&` then `fg` and after a failed exec.

use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::common::*;

const LONG: Duration = Duration::from_secs(30);

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

#[test]
fn a_failed_exec_gives_the_terminal_back() {
    if !have_tool("script", "bsdutils") {
        return;
    }
    let server = RedisServer::start();
    let dir = TestDir::new();
    let ready = dir.file("ready");
    let got = dir.file("got");
    // A script on a terminal: redlock-run cannot run COMMAND (127), then
    // the script reads its terminal, as a person would type into it.
    let inner = format!(
        "{bin} --redis {url} -k exec127 -- /no/such/program; echo \\$? > {ready}; read line; echo \\\"got:\\$line\\\" > {got}",
        bin = bin(),
        url = server.url(),
        ready = ready.display(),
        got = got.display()
    );
    let feed = type_when_ready(&ready, "hello");
    on_a_pty(&feed, &format!("sh -c '{inner}'"));
    assert_eq!(dir.read("ready").as_deref(), Some("127\n"));
    assert_eq!(
        dir.read("got").as_deref(),
        Some("got:hello\n"),
        "the script was left without its terminal"
    );
}

#[test]
fn a_job_started_with_ampersand_gets_the_terminal_at_fg() {
    let dir = TestDir::new();
    let Some(tmux) = Tmux::start(&dir) else {
        return;
    };
    let server = RedisServer::start();
    let out = dir.file("out");
    let ready = dir.file("ready");
    let job = format!(
        "-k amp -- sh -c 'touch {}; exec cat > {}' &",
        ready.display(),
        out.display()
    );
    tmux.start_job(&server.url(), &job, &ready);
    // cat reads the terminal from the background: the job stops (tty input).
    assert!(
        wait_until(LONG, || {
            tmux.keys(&[
                "jobs -l > ",
                &dir.file("jobs").display().to_string(),
                "Enter",
            ]);
            // Paces the re-sent `jobs` (not a wait for a state: the
            // condition is checked again after each).
            std::thread::sleep(Duration::from_millis(100));
            dir.read("jobs").is_some_and(|j| j.contains("Stopped"))
        }),
        "the shell never saw the job stop:\n{}",
        tmux.screen()
    );
    tmux.fg_and_type_to_cat(&dir, "out");
    assert!(!exists(&mut server.conn(), "redlock:{amp}"));
}

/// A `ticking` job under a 1 s lock on `key`, and its pid once it runs.
fn ticking_job(server: &RedisServer, dir: &TestDir, key: &str, ttl: &str) -> (RunningChild, i32) {
    let run = spawn_piped(&mut server.job(key).args(["--ttl", ttl]).sh(ticking(dir)));
    (run, read_pid(dir, "pid", LONG))
}

fn ticks(dir: &TestDir) -> usize {
    dir.read("ticks").map_or(0, |t| t.lines().count())
}

#[test]
fn job_control_stops_take_the_job_with_them() {
    let server = RedisServer::start();
    for sig in [Signal::SIGTSTP, Signal::SIGTTIN, Signal::SIGTTOU] {
        let dir = TestDir::new();
        let key = format!("jobctl-{}", sig.as_str());
        let run = spawn_piped(&mut server.job(&key).sh(ticking(&dir)));
        let child = read_pid(&dir, "pid", LONG);
        run.signal(sig);
        assert!(
            wait_until(LONG, || process_state(run.pid()) == Some('T')),
            "{sig}: the wrapper did not stop"
        );
        assert!(
            wait_until(LONG, || job_stopped(child)),
            "{sig}: COMMAND runs on while the wrapper is stopped ({:?})",
            process_state(child)
        );
        run.signal(Signal::SIGCONT);
        let before = ticks(&dir);
        assert!(
            wait_until(LONG, || ticks(&dir) > before + 2),
            "{sig}: COMMAND was not continued"
        );
        kill(Pid::from_raw(child), Signal::SIGKILL).unwrap();
    }
}

#[test]
fn a_lease_that_ran_out_while_stopped_kills_the_job_before_it_continues() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    // A TTL long enough that the stopped job is seen stopped before its
    // lease runs out and the keeper kills it (1 s was missed once under
    // CI's load).
    let (mut run, child) = ticking_job(&server, &dir, "stopped", "4s");
    run.signal(Signal::SIGTSTP);
    assert!(wait_until(LONG, || job_stopped(child)));
    // The lock runs out in Redis while both are stopped; another holder
    // takes it.
    let other = run_with_timeout(
        &mut server
            .job("stopped")
            .args(["--wait", "10s"])
            .sh("echo second"),
        LONG,
    );
    assert_eq!(other.code, Some(0), "{other:?}");
    let frozen = ticks(&dir);
    run.signal(Signal::SIGCONT);
    let out = run.wait_timeout(LONG);
    assert_eq!(out.code, Some(70), "{out:?}");
    assert!(out.stderr.contains("lost"), "{}", out.stderr);
    assert!(!process_alive(child), "COMMAND outlived its lock");
    assert_eq!(
        ticks(&dir),
        frozen,
        "COMMAND ran again after its lock was gone"
    );
}

#[test]
fn sigstop_of_the_wrapper_alone_kills_the_job_as_soon_as_it_is_continued() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let (mut run, child) = ticking_job(&server, &dir, "sigstop", "1s");
    // SIGSTOP cannot be caught: nothing refreshes; the keeper kills the
    // job when the lease ends, before a second holder can have the lock.
    run.signal(Signal::SIGSTOP);
    assert!(wait_until(LONG, || process_state(run.pid()) == Some('T')));
    let other = run_with_timeout(
        &mut server
            .job("sigstop")
            .args(["--wait", "10s"])
            .sh("echo second"),
        LONG,
    );
    assert_eq!(other.code, Some(0), "{other:?}");
    assert!(
        !process_alive(child),
        "COMMAND ran beside the second holder"
    );
    assert_eq!(
        process_state(run.pid()),
        Some('T'),
        "the wrapper was continued"
    );
    run.signal(Signal::SIGCONT);
    let out = run.wait_timeout(LONG);
    assert_eq!(out.code, Some(70), "{out:?}");
    assert!(
        out.stderr.contains("SIGKILL: the lease had run out"),
        "{}",
        out.stderr
    );
    assert!(!process_alive(child));
}
