//! The job's tree ends with its lock whatever is killed or stopped (issue
//! 34): the keeper killed or stopped alone, wrapper and keeper killed
//! together as `pkill` does, the wrapper stopped before it could tell the
//! keeper anything, a leader that leaves its group, no /proc or a foreign
//! one, and a child that hands its children over while the keeper counts.
//! Each runs with the default containment (a cgroup where one can be
//! made, as here in CI) and with `--contain keeper` (the keeper alone).

use std::process::Command;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::common::*;

const LONG: Duration = Duration::from_secs(30);

/// Both containments: the default (a cgroup where one can be made) and
/// the keeper alone.
const CONTAIN: [&str; 2] = ["auto", "keeper"];

/// The children of `pid` (its main thread's), from /proc.
fn children(pid: i32) -> Vec<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

fn comm(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

/// The keeper of the run `wrapper`: its child named redlock-keeper.
fn keeper_of(wrapper: i32) -> i32 {
    let mut found = None;
    assert!(
        wait_until(LONG, || {
            found = children(wrapper)
                .into_iter()
                .find(|&c| comm(c) == "redlock-keeper");
            found.is_some()
        }),
        "no child of {wrapper} is named redlock-keeper: {:?}",
        children(wrapper)
            .into_iter()
            .map(|c| (c, comm(c)))
            .collect::<Vec<_>>()
    );
    found.unwrap()
}

/// A script for a worker started with `setsid` (another session, another
/// group): it writes its pid to `name` in `dir`, then ticks.
fn escaped_worker(dir: &TestDir, name: &str) -> String {
    let script = dir.file(&format!("{name}.sh"));
    std::fs::write(
        &script,
        format!(
            "echo $$ > '{pid}'; while :; do sleep 0.05; done\n",
            pid = dir.file(name).display()
        ),
    )
    .unwrap();
    format!("setsid sh {} &", script.display())
}

#[test]
fn a_keeper_killed_alone_takes_the_job_with_it_before_the_release() {
    let server = RedisServer::start();
    for contain in CONTAIN {
        let dir = TestDir::new();
        let key = format!("keeper-killed-{contain}");
        // The job kills its own parent, the keeper.
        let script = format!(
            "{w} while [ ! -s '{pid}' ]; do sleep 0.02; done; kill -9 $PPID; sleep 30",
            w = escaped_worker(&dir, "w"),
            pid = dir.file("w").display(),
        );
        let mut run =
            spawn_piped(&mut server.job(&key).env("REDLOCK_CONTAIN", contain).sh(&script));
        let worker = read_pid(&dir, "w", LONG);
        let out = run.wait_timeout(LONG);
        assert_eq!(out.code, Some(70), "{contain}: {out:?}");
        assert!(
            out.stderr.contains("keeper process") && out.stderr.contains("was killed"),
            "{contain}: {}",
            out.stderr
        );
        // Stopped before the release: dead by the time the run exits.
        assert!(
            !process_alive(worker),
            "{contain}: the job's worker runs on after the release"
        );
        let held: Option<String> = redis::cmd("GET")
            .arg(format!("redlock:{{{key}}}"))
            .query(&mut server.conn())
            .unwrap();
        assert_eq!(held, None, "{contain}: the lock was not released");
    }
}

/// The lowest descriptor number `pid` has free: with its limit set there,
/// every descriptor it asks for next fails with EMFILE.
fn lowest_free_fd(pid: i32) -> usize {
    let used: Vec<usize> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    (0..).find(|n| !used.contains(n)).unwrap()
}

/// The chaos campaign's F21: out of file descriptors, with its keeper
/// killed and no cgroup, the wrapper walked /proc, took each failed read
/// for a process that had exited, and said "nothing left" (or, when even
/// its first read failed, kept the lock blind). It keeps one descriptor
/// in reserve for that walk, so the escaped worker is named and stopped
/// before the release.
#[test]
fn out_of_file_descriptors_the_keeper_killed_an_escaped_worker_still_ends_first() {
    if !have_tool("prlimit", "util-linux") {
        return;
    }
    let server = RedisServer::start();
    let dir = TestDir::new();
    let key = "keeper-killed-no-fds";
    // The job kills its keeper once the test has filled the wrapper's
    // descriptor table.
    let script = format!(
        "{w} while [ ! -s '{pid}' ] || [ ! -e '{go}' ]; do sleep 0.02; done; kill -9 $PPID; sleep 30",
        w = escaped_worker(&dir, "w"),
        pid = dir.file("w").display(),
        go = dir.file("go").display(),
    );
    let job = server.job(key).args(["-v", "--ttl", "3s"]);
    let mut run = spawn_piped(&mut job.env("REDLOCK_CONTAIN", "keeper").sh(&script));
    let worker = read_pid(&dir, "w", LONG);
    // Every connection made (a refresh done): the table is filled after,
    // and nothing but the walk asks for a descriptor.
    assert!(
        wait_until(LONG, || run.stderr_now().contains("refreshed lock")),
        "no refresh: {}",
        run.stderr_now()
    );
    let wrapper = run.pid();
    let limit = lowest_free_fd(wrapper);
    let limited = Command::new("prlimit")
        .args([
            "--pid",
            &wrapper.to_string(),
            &format!("--nofile={limit}:{limit}"),
        ])
        .status()
        .unwrap();
    assert!(limited.success(), "prlimit failed");
    std::fs::write(dir.file("go"), "").unwrap();
    let out = run.wait_timeout(LONG);
    // Dead by the time the run exits: named (the walk's reserve) and
    // stopped before the release.
    let ran_on = process_alive(worker);
    if ran_on {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(worker), Signal::SIGKILL);
    }
    assert_eq!(out.code, Some(70), "{out:?}");
    assert!(out.stderr.contains("was killed"), "{}", out.stderr);
    assert!(
        !ran_on,
        "the job's worker runs on after the release: {}",
        out.stderr
    );
    let held: Option<String> = redis::cmd("GET")
        .arg(format!("redlock:{{{key}}}"))
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(held, None, "the lock was not released");
}

#[test]
fn pkill_patterns_for_the_wrapper_do_not_select_the_keeper() {
    let server = RedisServer::start();
    for contain in CONTAIN {
        let dir = TestDir::new();
        let key = format!("pkill-{contain}-{}", std::process::id());
        let script = format!("{w} wait", w = escaped_worker(&dir, "w"));
        let run = spawn_piped(&mut server.job(&key).env("REDLOCK_CONTAIN", contain).sh(&script));
        let worker = read_pid(&dir, "w", LONG);
        let keeper = keeper_of(run.pid());
        // `pkill redlock-run` and `killall redlock-run` match the name;
        // `pkill -f 'redlock-run .* -k KEY'` the command line.
        assert_ne!(comm(keeper), "redlock-run", "{contain}");
        assert!(
            !cmdline(keeper).contains("redlock-run") && !cmdline(keeper).contains(&key),
            "{contain}: the keeper's command line is {:?}",
            cmdline(keeper)
        );
        // The pattern selects the wrapper alone (the key is this test's).
        let pattern = format!("redlock-run .*{key}");
        let selected = Command::new("pgrep")
            .args(["-f", &pattern])
            .output()
            .expect("pgrep (procps)");
        let selected: Vec<i32> = String::from_utf8_lossy(&selected.stdout)
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        assert_eq!(selected, vec![run.pid()], "{contain}");
        let status = Command::new("pkill")
            .args(["-9", "-f", &pattern])
            .status()
            .unwrap();
        assert!(status.success());
        assert!(
            wait_until(LONG, || !process_alive(worker)),
            "{contain}: the worker runs on after pkill -9 -f of the wrapper"
        );
        assert!(wait_until(LONG, || !process_alive(keeper)), "{contain}");
    }
}

#[test]
fn a_wrapper_stopped_before_it_said_anything_still_has_its_job_killed_at_the_lease_end() {
    let server = RedisServer::start();
    // Parked (one key): COMMAND's start is made ready before the acquire
    // and its keeper learns the lease with the "go" that starts it. Direct
    // (a second key: no parked start): the keeper is forked once the lock
    // is ours and told the lease after COMMAND started.
    for (contain, parked) in CONTAIN.iter().flat_map(|c| [(c, true), (c, false)]) {
        let dir = TestDir::new();
        let key = format!("early-stop-{contain}-{parked}");
        let script = format!(
            "echo $$ > '{pid}'; while :; do sleep 0.05; done",
            pid = dir.file("pid").display()
        );
        let mut first = server
            .job(&key)
            .env("REDLOCK_CONTAIN", contain)
            .args(["--ttl", "1s"]);
        if !parked {
            first = first.args(["--key", &format!("{key}-second")]);
        }
        let run = spawn_piped(&mut first.sh(&script));
        let job = match parked {
            // Stopped as soon as COMMAND runs: right after the "go".
            true => {
                let job = read_pid(&dir, "pid", LONG);
                run.signal(Signal::SIGSTOP);
                job
            }
            // Stopped as soon as its keeper exists: before it returns from
            // starting COMMAND, so before it could tell the keeper a lease.
            // A tight loop: the keeper's fork and COMMAND's exec take about
            // a millisecond, and the stop must land within it.
            false => {
                let until = std::time::Instant::now() + LONG;
                let children_file = format!("/proc/{0}/task/{0}/children", run.pid());
                while std::fs::read_to_string(&children_file).is_ok_and(|c| c.trim().is_empty()) {
                    assert!(std::time::Instant::now() < until, "no keeper appeared");
                }
                run.signal(Signal::SIGSTOP);
                read_pid(&dir, "pid", LONG)
            }
        };
        let other = run_with_timeout(
            &mut server.job(&key).args(["--wait", "20s"]).sh("echo second"),
            LONG,
        );
        assert_eq!(other.code, Some(0), "{contain} parked {parked}: {other:?}");
        assert!(
            !process_alive(job),
            "{contain} parked {parked}: COMMAND ran beside the second holder"
        );
        assert_eq!(process_state(run.pid()), Some('T'), "{contain}");
        run.signal(Signal::SIGCONT);
    }
}

#[test]
fn a_stopped_keeper_is_continued_and_the_jobs_own_exit_code_is_kept() {
    let server = RedisServer::start();
    for contain in CONTAIN {
        let key = format!("keeper-stopped-{contain}");
        // The job stops its parent, the keeper, then exits 0: the run
        // must see that (not refresh for nobody) and exit 0.
        let out = run_with_timeout(
            &mut server
                .job(&key)
                .env("REDLOCK_CONTAIN", contain)
                .args(["--ttl", "1500ms"])
                .sh("kill -STOP $PPID; exit 0"),
            LONG,
        );
        assert_eq!(out.code, Some(0), "{contain}: {out:?}");
        assert!(
            out.stderr.contains("keeper process") && out.stderr.contains("stopped"),
            "{contain}: {}",
            out.stderr
        );
    }
}

#[test]
fn a_leader_that_leaves_its_group_is_still_stopped() {
    let server = RedisServer::start();
    for contain in CONTAIN {
        let dir = TestDir::new();
        let key = format!("leader-leaves-{contain}");
        // The leader joins the keeper's group (the only other one in its
        // session it can join), then runs past --max-hold.
        let script = format!(
            "import os, time\nos.setpgid(0, os.getpgid(os.getppid()))\ntime.sleep(8)\nopen('{done}', 'w').close()\n",
            done = dir.file("done").display()
        );
        let out = run_with_timeout(
            &mut server
                .job(&key)
                .env("REDLOCK_CONTAIN", contain)
                .args(["--max-hold", "1s", "--kill-after", "500ms"])
                .exec(["python3", "-c", &script]),
            LONG,
        );
        assert_eq!(out.code, Some(124), "{contain}: {out:?}");
        assert!(
            !dir.file("done").exists(),
            "{contain}: the leader ran its whole course past --max-hold"
        );
    }
}

#[test]
fn the_on_lost_hook_runs_when_the_keeper_stopped_the_job() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let script = format!(
        "echo $$ > '{pid}'; while :; do sleep 0.05; done",
        pid = dir.file("pid").display()
    );
    let hook = format!("touch '{}'", dir.file("hook").display());
    let mut run = spawn_piped(
        &mut server
            .job("hook-keeper")
            .args(["--ttl", "1s", "--on-lost", &hook])
            .sh(&script),
    );
    let job = read_pid(&dir, "pid", LONG);
    run.signal(Signal::SIGSTOP);
    assert!(
        wait_until(LONG, || !process_alive(job)),
        "the keeper did not act"
    );
    run.signal(Signal::SIGCONT);
    let out = run.wait_timeout(LONG);
    assert_eq!(out.code, Some(70), "{out:?}");
    assert!(
        wait_for_file(dir.file("hook"), LONG),
        "--on-lost did not run: {}",
        out.stderr
    );
}

/// A unique `sleep` for a leftover, so that it can be looked for by its
/// command line whatever PID namespace it runs in.
fn unique_sleep(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{}{:09}.{tag}", 600 + std::process::id() % 100, nanos)
        .chars()
        .filter(|c| c.is_ascii_digit() || *c == '.')
        .collect::<String>()
        .trim_end_matches('.')
        .to_string()
}

fn running(pattern: &str) -> bool {
    Command::new("pgrep")
        .args(["-f", pattern])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn a_foreign_proc_is_no_proc_and_leftovers_end_before_the_release() {
    if !can_unshare("leftovers under a foreign /proc") {
        return;
    }
    let server = RedisServer::start();
    let secs = unique_sleep("1");
    let dir = TestDir::new();
    // In a new PID namespace that still sees the host's /proc, under a
    // shell that outlives the run (so that the namespace does too: its
    // init's end would kill a leftover, hiding a late stop).
    let mut cmd = Command::new("unshare");
    cmd.args(["--pid", "--fork", "sh", "-c"])
        .arg(format!(
            "\"$@\"; echo $? > '{rc}'; sleep 20",
            rc = dir.file("rc").display()
        ))
        .arg("sh")
        .arg(bin())
        .args([
            "--redis",
            &server.url(),
            "-k",
            "foreign-proc",
            "--kill-after",
            "1s",
        ])
        .args(["-c", &format!("setsid sleep {secs} & exit 0")]);
    let _ns = spawn_piped(&mut cmd);
    assert!(wait_for_file(dir.file("rc"), LONG));
    let leftover = running(&format!("^sleep {secs}$"));
    assert_eq!(dir.read("rc").unwrap_or_default().trim(), "0");
    assert!(!leftover, "a leftover runs on after the release");
}

#[test]
fn without_proc_a_sigkilled_wrapper_still_takes_escaped_workers_with_it() {
    if !can_unshare("the tree's end without /proc") {
        return;
    }
    let server = RedisServer::start();
    let secs = unique_sleep("2");
    let dir = TestDir::new();
    let job = format!(
        "setsid sleep {secs} & set -m; sleep {secs} & touch '{ready}'; wait",
        ready = dir.file("ready").display()
    );
    let mut base = redlock(&server.url());
    base.args(["-k", "no-proc", "-c", &job]);
    let run = spawn_piped(&mut unshared("umount -l /proc", &base));
    assert!(wait_for_file(dir.file("ready"), LONG));
    assert!(running(&format!("^sleep {secs}$")));
    // The wrapper is the process the unshare shell exec'd.
    run.signal(Signal::SIGKILL);
    assert!(
        wait_until(LONG, || !running(&format!("^sleep {secs}$"))),
        "escaped workers run on without a lock"
    );
}

/// A shared object that makes the keeper's `waitpid(pid, WNOHANG)` of a
/// child other than the one it starts with slow (a keeper preempted or
/// throttled between reading its children and reaping them). For
/// processes named redlock-keeper only.
const SLOW_WAITPID: &str = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
pid_t waitpid(pid_t pid, int *status, int options) {
    static pid_t (*real)(pid_t, int *, int);
    if (!real) real = (pid_t (*)(pid_t, int *, int))dlsym(RTLD_NEXT, "waitpid");
    char name[16] = {0}, parent[32] = {0}, path[64];
    prctl(PR_GET_NAME, name);
    /* Before the keeper had a name of its own: a redlock-run whose
       parent is a redlock-run. */
    snprintf(path, sizeof path, "/proc/%d/comm", (int)getppid());
    FILE *f = fopen(path, "r");
    if (f) { fgets(parent, sizeof parent, f); fclose(f); }
    int keeper = strcmp(name, "redlock-keeper") == 0
        || (strcmp(name, "redlock-run") == 0 && strncmp(parent, "redlock-run", 11) == 0);
    if (pid > 0 && (options & WNOHANG) && keeper)
        usleep(700000);
    return real(pid, status, options);
}
"#;

#[test]
fn a_child_that_hands_its_children_over_while_the_keeper_counts_is_seen() {
    if !have_tool("gcc", "gcc") {
        return;
    }
    let server = RedisServer::start();
    let dir = TestDir::new();
    let source = dir.file("slow.c");
    std::fs::write(&source, SLOW_WAITPID).unwrap();
    let shim = dir.file("slow.so");
    let built = Command::new("gcc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&shim)
        .arg(&source)
        .arg("-ldl")
        .status()
        .unwrap();
    assert!(built.success());
    // A dynamically linked build: the shim must be loadable (CI's static
    // binary is not; cargo's build is).
    let binary = std::env::var("REDLOCK_TEST_DYNAMIC_BINARY")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_redlock-run").to_string());
    for contain in CONTAIN {
        let secs = unique_sleep(if contain == "auto" { "3" } else { "4" });
        // The leader leaves C behind and exits; C is alive when the keeper
        // lists its children, starts G and exits while the keeper's
        // waitpid is slow: G is handed to the keeper after the list.
        let job = format!("(sleep 0.2; sleep {secs} & exit 0) & exit 0");
        let out = run_with_timeout(
            Command::new(&binary)
                .env("LD_PRELOAD", &shim)
                .env("REDLOCK_CONTAIN", contain)
                .args(["--redis", &server.url()])
                .args(["-k", &format!("handover-{contain}"), "--kill-after", "1s"])
                .args(["-c", &job]),
            LONG,
        );
        assert_eq!(out.code, Some(0), "{contain}: {out:?}");
        assert!(
            !running(&format!("^sleep {secs}$")),
            "{contain}: the grandchild runs on after the release"
        );
    }
}

#[test]
fn the_man_page_says_what_the_safety_model_says_about_the_trees_end() {
    let safety = source_file("docs/safety.md");
    let section = safety
        .split_once("<!-- tree: begin")
        .and_then(|(_, rest)| rest.split_once("<!-- tree: end -->"))
        .expect("docs/safety.md marks the section on the tree's end")
        .0;
    // Every cell of the table, without Markdown's marks, is in the page.
    let man = man_page_text();
    let man = man.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut cells = 0;
    let rows = section
        .lines()
        .filter(|l| l.starts_with("| ") && !l.contains("---"));
    // The header's first cell names no column of the page's rows.
    for row in rows.skip(1) {
        for cell in row.trim_matches('|').split(" | ") {
            let cell = cell.trim().replace("**", "").replace('`', "");
            let cell = cell.split_whitespace().collect::<Vec<_>>().join(" ");
            cells += 1;
            assert!(man.contains(&cell), "the man page lacks: {cell}");
        }
    }
    assert!(cells >= 30, "{cells} cells");
}

/// Whether this host lets a run make a cgroup: cgroup v2 with
/// `cgroup.kill` where root may write (as in CI).
fn cgroups_here() -> bool {
    let root = nix::unistd::geteuid().is_root();
    let v2 = [
        "/sys/fs/cgroup/cgroup.controllers",
        "/sys/fs/cgroup/unified/cgroup.controllers",
    ]
    .iter()
    .any(|p| std::path::Path::new(p).exists());
    root && v2
}

/// Without cgroups here: true, after saying loudly that `untested` is
/// not tested (a failure instead where tools are required, as in CI).
fn skipped_without_cgroups(untested: &str) -> bool {
    if cgroups_here() {
        return false;
    }
    assert!(!tools_required(), "no cgroup v2 for root here");
    eprintln!("\n!!!!! SKIPPED: no cgroup v2 for root here: {untested} is NOT tested !!!!!\n");
    true
}

#[test]
fn verbose_runs_and_doctor_say_how_the_tree_is_held() {
    let server = RedisServer::start();
    let out = run_with_timeout(&mut server.job("said").args(["-v"]).sh("exit 0"), LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    let doctor = run_with_timeout(
        redlock(&server.url()).args(["doctor", "--key", "said"]),
        LONG,
    );
    // `  PASS  tree         COMMAND's tree ...` under `this host`.
    let tree = doctor
        .stdout
        .lines()
        .map(str::trim_start)
        .find(|l| l.contains(" tree "))
        .unwrap_or_else(|| panic!("doctor says nothing of the tree: {}", doctor.stdout));
    if cgroups_here() {
        assert!(
            out.stderr
                .contains("COMMAND's tree is held by a cgroup of its own"),
            "{}",
            out.stderr
        );
        assert!(
            tree.starts_with("PASS") && tree.contains("cgroup"),
            "{tree}"
        );
    } else {
        assert!(out.stderr.contains("keeper process only"), "{}", out.stderr);
        assert!(
            tree.starts_with("PASS") && tree.contains("keeper"),
            "{tree}"
        );
    }
    let keeper = run_with_timeout(
        &mut server
            .job("said")
            .env("REDLOCK_CONTAIN", "keeper")
            .args(["-v"])
            .sh("exit 0"),
        LONG,
    );
    assert!(
        keeper
            .stderr
            .contains("keeper process only (no cgroup: --contain keeper)"),
        "{}",
        keeper.stderr
    );
}

#[test]
fn in_a_pid_namespace_killing_wrapper_and_keeper_together_takes_the_tree() {
    let server = RedisServer::start();
    let secs = unique_sleep("5");
    let dir = TestDir::new();
    // The worker's pid is its namespace's: it is looked for by name.
    let job = format!(
        "setsid sleep {secs} & set -m; sleep {secs} & touch '{ready}'; wait",
        ready = dir.file("ready").display()
    );
    let run = spawn_piped(
        &mut server
            .job("pidns-both")
            .env("REDLOCK_CONTAIN", "pid-namespace")
            .line(&job),
    );
    assert!(wait_for_file(dir.file("ready"), LONG));
    let keeper = keeper_of(run.pid());
    assert!(running(&format!("^sleep {secs}$")));
    // As `kill -9 WRAPPER KEEPER`, or a pattern naming both.
    run.signal(Signal::SIGKILL);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(keeper), Signal::SIGKILL).unwrap();
    assert!(
        wait_until(LONG, || !running(&format!("^sleep {secs}$"))),
        "the job's workers run on after wrapper and keeper were killed"
    );
}

#[test]
fn in_a_pid_namespace_the_job_cannot_kill_its_keeper_and_sees_its_own_pid() {
    let server = RedisServer::start();
    let out = run_with_timeout(
        &mut server
            .job("pidns-self")
            .env("REDLOCK_CONTAIN", "pid-namespace")
            .sh("echo \"pid $$ parent $PPID\"; kill -9 $PPID; exit 5"),
        LONG,
    );
    assert_eq!(out.code, Some(5), "{out:?}");
    assert_eq!(out.stdout.trim(), "pid 2 parent 1", "{out:?}");
}

/// The cgroups of runs of `pid` left in the cgroup v2 hierarchy.
fn cgroups_of(pid: i32) -> Vec<String> {
    let mut found = Vec::new();
    for mount in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
        let Ok(out) = Command::new("find")
            .args([mount, "-maxdepth", "4", "-type", "d", "-name"])
            .arg(format!("redlock-run.{pid}.*"))
            .output()
        else {
            continue;
        };
        found.extend(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(String::from),
        );
    }
    found
}

#[test]
fn no_cgroup_is_left_behind_even_when_the_job_made_its_own_below_it() {
    if skipped_without_cgroups("cgroup clean-up") {
        return;
    }
    let server = RedisServer::start();
    // The job makes a cgroup below its own (as a nested run killed before
    // it cleaned up would leave one).
    let job = "cg=$(sed -n 's/^0:://p' /proc/self/cgroup); \
               for m in /sys/fs/cgroup /sys/fs/cgroup/unified; do \
               [ -e \"$m$cg/cgroup.procs\" ] && mkdir \"$m$cg/below\" && exit 0; done; exit 9";
    let mut run = spawn_piped(&mut server.job("cg-left").sh(job));
    let pid = run.pid();
    let out = run.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(cgroups_of(pid), Vec::<String>::new());
}

/// Where a run started by this test process makes its cgroup: beside
/// its own, below the test process's cgroup (None: no cgroup v2 here).
fn our_cgroup_dir() -> Option<std::path::PathBuf> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let own = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
        .iter()
        .map(|m| std::path::Path::new(m).join(own.trim_start_matches('/')))
        .find(|d| d.join("cgroup.procs").exists())
}

#[test]
fn a_run_clears_the_empty_cgroups_killed_runs_left_once_they_are_old() {
    if skipped_without_cgroups("clearing stale cgroups") {
        return;
    }
    let parent = our_cgroup_dir().expect("our cgroup v2 directory");
    // A pid no run has here (above the kernel's limit), made by "a killed
    // run"; named after this test process, which CI may run beside another.
    let me = std::process::id();
    let old = parent.join(format!("redlock-run.9999999.old{me}"));
    let young = parent.join(format!("redlock-run.9999999.young{me}"));
    let stranger = parent.join(format!("not-ours.9999999.{me}"));
    for dir in [&old, &young, &stranger] {
        let _ = std::fs::remove_dir(dir);
        std::fs::create_dir(dir).expect("mkdir a cgroup");
    }
    for dir in [&old, &stranger] {
        let touched = Command::new("touch")
            .args(["-d", "2 minutes ago"])
            .arg(dir)
            .status()
            .expect("touch");
        assert!(touched.success());
    }
    let server = RedisServer::start();
    let out = run_with_timeout(&mut server.job("stale-cgroups").sh("exit 0"), LONG);
    let left = [&old, &young, &stranger].map(|d| d.exists());
    for dir in [&old, &young, &stranger] {
        let _ = std::fs::remove_dir(dir);
    }
    assert_eq!(out.code, Some(0), "{out:?}");
    // Only ours, and only once a minute old: a run starting now may have
    // made the young one and not yet put COMMAND in it.
    assert_eq!(
        left,
        [false, true, true],
        "old, young, stranger still there"
    );
}

#[test]
fn a_keeper_stopped_when_the_wrapper_is_killed_still_ends_the_tree() {
    let server = RedisServer::start();
    for contain in CONTAIN {
        let dir = TestDir::new();
        let key = format!("stopped-keeper-killed-wrapper-{contain}");
        let script = format!("{w} wait", w = escaped_worker(&dir, "w"));
        let run = spawn_piped(&mut server.job(&key).env("REDLOCK_CONTAIN", contain).sh(&script));
        let worker = read_pid(&dir, "w", LONG);
        let keeper = keeper_of(run.pid());
        let keeper_pid = nix::unistd::Pid::from_raw(keeper);
        // The wrapper first: it would continue a stopped keeper.
        run.signal(Signal::SIGSTOP);
        assert!(wait_until(LONG, || process_state(run.pid()) == Some('T')));
        nix::sys::signal::kill(keeper_pid, Signal::SIGSTOP).unwrap();
        assert!(wait_until(LONG, || process_state(keeper) == Some('T')));
        // Nobody continues the keeper: the kernel does, as redlock-run dies.
        run.signal(Signal::SIGKILL);
        assert!(
            wait_until(LONG, || !process_alive(worker)),
            "{contain}: the job runs on under a stopped keeper after redlock-run died"
        );
    }
}

/// A shell command that prints the cgroup (v2) it runs in.
const OWN_CGROUP: &str = "sed -n 's/^0:://p' /proc/self/cgroup";

/// COMMAND runs in its run's own cgroup from its start, made there by
/// `clone3` where the kernel allows (else moved before its exec), both
/// when it starts at once and when a waiter's parked start goes.
#[test]
fn the_job_runs_in_its_runs_own_cgroup_started_at_once_or_parked() {
    if skipped_without_cgroups("the job's cgroup") {
        return;
    }
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut run = spawn_piped(&mut server.job("own-cg").sh(OWN_CGROUP));
    let ours = format!("/redlock-run.{}.", run.pid());
    let out = run.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.contains(&ours), "not in {ours}: {out:?}");

    let hold = Hold::new(&dir);
    let mut held = hold.spawn(&mut server.job("own-cg").sh(hold.script("true")), LONG);
    let file = dir.file("cgroup");
    let job = format!("{OWN_CGROUP} > '{}'", file.display());
    let mut run = spawn_waiting(&mut server.job("own-cg").sh(job), LONG);
    let parked = wait_until(LONG, || {
        children(run.pid())
            .into_iter()
            .filter_map(|keeper| children(keeper).first().copied())
            .any(|child| process_state(child) == Some('S'))
    });
    assert!(
        parked,
        "the waiter never parked a start: {}",
        run.stderr_now()
    );
    hold.go();
    assert_eq!(held.wait_timeout(LONG).code, Some(0));
    let out = run.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    let seen = std::fs::read_to_string(&file).unwrap_or_default();
    let ours = format!("/redlock-run.{}.", run.pid());
    assert!(seen.contains(&ours), "not in {ours}: {seen:?} {out:?}");
}

/// Twenty runs under a subreaper that reaps only the runs themselves:
/// what each run's keeper leaves to whatever adopts it (`left:` and one
/// `PID COMM STATE` per child that is not a run).
const ADOPTER: &str = r#"
import ctypes, os, subprocess, sys
assert ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
for _ in range(20):
    code = subprocess.run(sys.argv[1:]).returncode
    if code != 0:
        sys.exit(f"a run exited {code}")
me = os.getpid()
left = []
for pid in open(f"/proc/{me}/task/{me}/children").read().split():
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
        left.append(f"{pid} {open(f'/proc/{pid}/comm').read().strip()} {state}")
    except OSError:
        pass
print("left:", "; ".join(left))
"#;

/// A run reaps its keeper before it exits: no keeper is left to the
/// process that adopts orphans, not even as a zombie (a container's first
/// process may reap nothing, and zombies would pile up there, one a run).
#[test]
fn a_finished_run_leaves_no_keeper_behind_not_even_a_zombie() {
    let server = RedisServer::start();
    let python = std::env::var("REDLOCK_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    for contain in CONTAIN {
        let key = format!("no-zombie-{contain}");
        let run = server
            .job(&key)
            .env("REDLOCK_CONTAIN", contain)
            .exec(["true"]);
        let mut adopter = wrapped(&python, ["-c", ADOPTER], &run);
        let out = run_with_timeout(&mut adopter, LONG);
        assert!(
            out.code == Some(0) && out.stdout.trim_end() == "left:",
            "{contain}: {}{}",
            out.stdout,
            out.stderr
        );
    }
}

/// A run may release as soon as the kernel says its job is over (the
/// leader has ended and its cgroup is empty), before its keeper reports:
/// with the keeper stopped by the job, that is the only way the run can
/// learn it (the keeper, continued, reports after). What the run says and
/// exits with is the same: the job's own code, the stopped keeper said,
/// "COMMAND exited" before "released", the lock gone, the keeper reaped.
#[test]
fn a_job_over_before_its_stopped_keeper_reports_ends_the_run_as_usual() {
    if skipped_without_cgroups("the release before the keeper's report") {
        return;
    }
    let server = RedisServer::start();
    let dir = TestDir::new();
    let keeper_pid = dir.file("keeper");
    let out = run_with_timeout(
        &mut server.job("early").args(["-v"]).sh(format!(
            "echo $PPID > '{}'; kill -STOP $PPID; exit 3",
            keeper_pid.display()
        )),
        LONG,
    );
    assert_eq!(out.code, Some(3), "{out:?}");
    let said = |line: &str| {
        out.stderr
            .find(line)
            .unwrap_or_else(|| panic!("no {line:?}: {}", out.stderr))
    };
    assert!(
        said("COMMAND exited") < said("released lock 'early'"),
        "{}",
        out.stderr
    );
    said("keeper process");
    assert!(!exists(&mut server.conn(), "redlock:{early}"), "{out:?}");
    let keeper = read_pid(&dir, "keeper", LONG);
    assert!(
        wait_until(LONG, || !process_alive(keeper)),
        "the keeper {keeper} is still there"
    );
}
