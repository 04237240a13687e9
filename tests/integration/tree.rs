//! The job is its whole tree (issue 21, host side): what every process
//! COMMAND starts does when redlock-run is SIGKILLed, stopped, short of
//! processes or file descriptors; the terminal through `&`, `fg` and a
//! failed exec; a job's SIGTERM trap; scripts without `#!`.

use std::os::unix::fs::PermissionsExt;
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
fn a_jobs_sigterm_trap_runs_when_the_lock_is_lost() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    for i in 0..20 {
        let dir = TestDir::new();
        let key = format!("trap-{i}");
        let script = format!(
            "trap 'touch {trapped}; exit 3' TERM; touch {ready}; while :; do sleep 0.05; done",
            trapped = dir.file("trapped").display(),
            ready = dir.file("ready").display(),
        );
        let mut run = spawn_piped(
            &mut server
                .job(&key)
                .args(["--refresh", "300ms", "--kill-after", "1500ms"])
                .sh(&script),
        );
        assert!(wait_for_file(dir.file("ready"), LONG));
        // Another holder takes the lock: the next refresh finds it gone.
        let _: () = redis::cmd("SET")
            .arg(format!("redlock:{{{key}}}"))
            .arg("someone-else")
            .query(&mut conn)
            .unwrap();
        let out = run.wait_timeout(LONG);
        assert_eq!(out.code, Some(70), "run {i}: {out:?}");
        assert!(
            dir.file("trapped").exists(),
            "run {i}: the job's SIGTERM trap never ran before SIGKILL: {out:?}"
        );
    }
}

/// CPU time (user + system) of `pid` in clock ticks.
fn cpu_ticks(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime: fields 14 and 15 of stat, 12 and 13 after the name.
    fields
        .get(11..13)
        .map_or(0, |f| f.iter().filter_map(|t| t.parse::<u64>().ok()).sum())
}

#[test]
fn the_grace_after_a_lost_lock_is_not_a_busy_loop() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let script = format!(
        "trap '' TERM; touch {ready}; while :; do sleep 0.05; done",
        ready = dir.file("ready").display()
    );
    let mut run = spawn_piped(
        &mut server
            .job("spin")
            .args(["--ttl", "30s", "--refresh", "200ms", "--kill-after", "4s"])
            .sh(&script),
    );
    assert!(wait_for_file(dir.file("ready"), LONG));
    let _: () = redis::cmd("SET")
        .arg("redlock:{spin}")
        .arg("someone-else")
        .query(&mut server.conn())
        .unwrap();
    assert!(
        wait_until(LONG, || run.stderr_now().contains("lost")),
        "{}",
        run.stderr_now()
    );
    let before = cpu_ticks(run.pid());
    // Time passing is what is measured here (the CPU spent in it), not a
    // stand-in for a state.
    std::thread::sleep(Duration::from_secs(2));
    let spent = cpu_ticks(run.pid()) - before;
    // 2 s of grace at 100 ticks a second: a spinning loop burns ~200.
    assert!(
        spent < 50,
        "redlock-run used {spent} ticks of CPU in 2 s of grace"
    );
    let out = run.wait_timeout(LONG);
    assert_eq!(out.code, Some(70), "{out:?}");
}

#[test]
fn a_script_without_a_shebang_runs_with_sh() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let script = dir.file("plain-script");
    std::fs::write(&script, "echo \"ran with $# args: $1 $2\"\nexit 7\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    // By path, and found on $PATH.
    let by_path = run_with_timeout(
        &mut server
            .job("noshebang")
            .exec([script.to_str().unwrap(), "a", "b c"]),
        LONG,
    );
    assert_eq!(by_path.code, Some(7), "{by_path:?}");
    assert_eq!(by_path.stdout, "ran with 2 args: a b c\n");
    let path = format!("{}:/usr/bin:/bin", dir.path().display());
    let on_path = run_with_timeout(
        server
            .job("noshebang")
            .exec(["plain-script", "x"])
            .env("PATH", path),
        LONG,
    );
    assert_eq!(on_path.code, Some(7), "{on_path:?}");
    assert_eq!(on_path.stdout, "ran with 1 args: x \n");
    // A file that is not executable is still 126, a missing one 127.
    let data = dir.file("data");
    std::fs::write(&data, "echo no\n").unwrap();
    let denied = run_with_timeout(&mut server.job("noshebang").exec([&data]), LONG);
    assert_eq!(denied.code, Some(126), "{denied:?}");
    let missing = run_with_timeout(
        &mut server.job("noshebang").exec(["no-such-command-here"]),
        LONG,
    );
    assert_eq!(missing.code, Some(127), "{missing:?}");
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
