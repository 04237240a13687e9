//! The job is its whole tree (issue 21): every process COMMAND starts
//! ends with the run when the wrapper is SIGKILLed or stopped, leftovers
//! in the group and processes that left it are stopped before the
//! release, Ctrl-Z reaches workers in other groups and sessions, and all
//! of it holds without /proc. The keeper's own part is in `keeper`.

use std::process::Command;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::common::*;

const LONG: Duration = Duration::from_secs(30);

/// A command line for a worker that writes its pid to `name` in `dir`,
/// then ticks (a script file, so that it quotes nowhere).
fn worker(dir: &TestDir, name: &str) -> String {
    let script = dir.file(&format!("{name}.sh"));
    std::fs::write(
        &script,
        format!(
            "echo $$ > '{pid}'; while :; do sleep 0.05; done\n",
            pid = dir.file(name).display()
        ),
    )
    .unwrap();
    format!("sh {}", script.display())
}

#[test]
fn sigkill_of_the_wrapper_kills_the_jobs_children_too() {
    let server = RedisServer::start();
    // A worker in the job's group, one in a group of its own (`set -m`),
    // one in a session of its own.
    let dir = TestDir::new();
    let script = format!(
        "{w1} & set -m; {w2} & setsid {w3} & wait",
        w1 = worker(&dir, "w1"),
        w2 = worker(&dir, "w2"),
        w3 = worker(&dir, "w3"),
    );
    let run = spawn_piped(&mut server.job("sigkill-tree").sh(&script));
    let workers: Vec<i32> = ["w1", "w2", "w3"]
        .iter()
        .map(|w| read_pid(&dir, w, LONG))
        .collect();
    run.signal(Signal::SIGKILL);
    for (i, pid) in workers.iter().enumerate() {
        assert!(
            wait_until(LONG, || !process_alive(*pid)),
            "worker {} ({pid}) runs on after redlock-run was SIGKILLed",
            i + 1
        );
    }
}

#[test]
fn ctrl_z_stops_workers_in_other_groups_and_sessions() {
    let dir = TestDir::new();
    let Some(tmux) = Tmux::start(&dir) else {
        return;
    };
    let server = RedisServer::start();
    let out = dir.file("out");
    let ready = dir.file("ready");
    let job = format!(
        "set -m; {w1} & setsid {w2} & touch {ready}; exec cat > {out}",
        w1 = worker(&dir, "w1"),
        w2 = worker(&dir, "w2"),
        ready = ready.display(),
        out = out.display()
    );
    let args = format!("-k ctrlz-tree --kill-after 1s -- sh -c \"{job}\"");
    tmux.start_job(&server.url(), &args, &ready);
    let workers = [read_pid(&dir, "w1", LONG), read_pid(&dir, "w2", LONG)];
    tmux.suspend(&dir);
    for pid in workers {
        assert!(
            wait_until(LONG, || job_stopped(pid)),
            "worker {pid} runs on while the job is suspended ({:?})",
            process_state(pid)
        );
    }
    tmux.keys(&["fg", "Enter"]);
    for pid in workers {
        assert!(
            wait_until(LONG, || process_state(pid) != Some('T')),
            "worker {pid} was not continued"
        );
    }
    tmux.keys(&["C-d"]);
    assert_eq!(tmux.last_exit(&dir, "exit"), "exit=0", "{}", tmux.screen());
    for pid in workers {
        assert!(
            wait_until(LONG, || !process_alive(pid)),
            "leftover {pid} not stopped"
        );
    }
}

#[test]
fn a_stopped_wrapper_cannot_leave_its_tree_running_past_the_lease() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let script = format!(
        "setsid {w} & echo $$ > {pid}; while :; do sleep 0.05; done",
        w = worker(&dir, "w"),
        pid = dir.file("pid").display()
    );
    let mut run = spawn_piped(
        &mut server
            .job("frozen")
            .args(["--ttl", "2s", "--kill-after", "500ms"])
            .sh(&script),
    );
    let leader = read_pid(&dir, "pid", LONG);
    let worker = read_pid(&dir, "w", LONG);
    run.signal(Signal::SIGSTOP);
    assert!(wait_until(LONG, || process_state(run.pid()) == Some('T')));
    // Nothing refreshes now; by the lease's end the whole tree is dead,
    // while redlock-run is still stopped.
    for pid in [leader, worker] {
        assert!(
            wait_until(LONG, || !process_alive(pid)),
            "{pid} runs on past the lease while redlock-run is stopped"
        );
    }
    assert_eq!(process_state(run.pid()), Some('T'));
    let second = run_with_timeout(
        &mut server.job("frozen").args(["--wait", "10s"]).sh("true"),
        LONG,
    );
    assert_eq!(second.code, Some(0), "{second:?}");
    run.signal(Signal::SIGCONT);
    let out = run.wait_timeout(LONG);
    assert_eq!(out.code, Some(70), "{out:?}");
    assert!(out.stderr.contains("keeper killed"), "{}", out.stderr);
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
fn processes_that_leave_the_group_are_stopped_before_release() {
    let server = RedisServer::start();
    for (name, start) in [
        ("setsid", "setsid sh -c 'echo $$ > {pid}; exec sleep 60' &"),
        ("set-m", "set -m; sh -c 'echo $$ > {pid}; exec sleep 60' &"),
    ] {
        let dir = TestDir::new();
        let script = start.replace("{pid}", &format!("'{}'", dir.file("left").display()))
            + &format!(
                " while [ ! -s '{}' ]; do sleep 0.01; done; exit 3",
                dir.file("left").display()
            );
        let out = run_with_timeout(
            &mut server.job(name).args(["--kill-after", "1s"]).sh(&script),
            LONG,
        );
        assert_eq!(out.code, Some(3), "{name}: {out:?}");
        let left = read_pid(&dir, "left", LONG);
        assert!(
            !process_alive(left),
            "{name}: a process that left the group outlived the lock"
        );
        assert!(!exists(&mut server.conn(), &format!("redlock:{{{name}}}")));
    }
}

/// `job` in a private mount namespace whose /proc is empty, or `None`
/// where that cannot be made (see `can_unshare`).
fn without_proc(job: Command) -> Option<Command> {
    can_unshare("running without /proc").then(|| unshared("mount -t tmpfs none /proc", &job))
}

#[test]
fn without_proc_leftovers_in_the_group_are_still_stopped() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let script = format!(
        "sh -c 'echo $$ > {left}; exec sleep 60' & while [ ! -s {left} ]; do sleep 0.01; done; exit 4",
        left = dir.file("left").display()
    );
    let job = server
        .job("noproc")
        .args(["--kill-after", "1s"])
        .sh(&script);
    let Some(mut cmd) = without_proc(job) else {
        return;
    };
    let out = run_with_timeout(&mut cmd, LONG);
    assert_eq!(out.code, Some(4), "{out:?}");
    let left = read_pid(&dir, "left", LONG);
    assert!(
        !process_alive(left),
        "a leftover outlived the lock without /proc"
    );
    assert!(!exists(&mut server.conn(), "redlock:{noproc}"));
}

#[test]
fn without_proc_the_lock_is_kept_while_unnamed_descendants_run() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    // A daemon outside the group: with the keeper alone (no cgroup) it
    // cannot be named without /proc, so the lock must stay until it is
    // gone. (With a cgroup it is stopped: keeper::without_proc_...)
    let script = format!(
        "setsid sh -c 'touch {started}; sleep 3; touch {done}' & \
         while [ ! -e {started} ]; do sleep 0.01; done; exit 0",
        started = dir.file("started").display(),
        done = dir.file("done").display()
    );
    let job = server
        .job("noproc-kept")
        .args(["--kill-after", "1s", "--contain", "keeper"])
        .sh(&script);
    let Some(mut cmd) = without_proc(job) else {
        return;
    };
    let mut run = spawn_piped(&mut cmd);
    assert!(wait_for_file(dir.file("started"), LONG));
    // The leader exited at once; until the descendant is done, the lock
    // stays.
    let mut conn = server.conn();
    let finished = wait_until(LONG, || {
        let held = exists(&mut conn, "redlock:{noproc-kept}");
        let done = dir.file("done").exists();
        assert!(held || done, "released while a descendant still ran");
        done
    });
    assert!(finished, "the descendant never finished");
    let out = run.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(dir.file("done").exists(), "{out:?}");
    assert!(!exists(&mut server.conn(), "redlock:{noproc-kept}"));
}
