//! A waiter's start made ready while it waits (issue 39): its keeper and
//! COMMAND's first process, parked before its exec, are there in `ps`
//! while it waits; COMMAND gets the lock's own token and fence from the
//! hand-over; and nothing of COMMAND ever runs without the lock: a waiter
//! that gives up, is signalled or is killed leaves no process behind and
//! never runs COMMAND, and one whose keeper was killed while parked does
//! not run it either (exit 71, the lock given back). Where a clone that
//! shares memory is refused (qemu-user; here a seccomp filter that
//! refuses it as qemu-user does), the start is parked all the same, in a
//! forked child.

use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::common::*;

const LONG: Duration = Duration::from_secs(30);

/// The children of `pid` (its main thread's), from /proc.
fn children(pid: i32) -> Vec<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// The waiting run `waiter`'s parked start: its keeper, and the keeper's
/// child, not yet COMMAND, once it is parked (asleep on its pipe: its
/// set-up before that sleeps only in the kernel's `D` state).
fn parked(waiter: i32) -> (i32, i32) {
    let mut found = None;
    let seen = wait_until(LONG, || {
        found = children(waiter)
            .into_iter()
            .find_map(|k| children(k).first().map(|&c| (k, c)));
        found.is_some_and(|(_, c)| process_state(c) == Some('S'))
    });
    assert!(seen, "the waiter {waiter} never parked a start");
    found.unwrap()
}

/// A holder of `key` until `Hold::new(dir).go()`.
fn holder(server: &RedisServer, key: &str, dir: &TestDir) -> RunningChild {
    let hold = Hold::new(dir);
    hold.spawn(&mut server.job(key).sh(hold.script("true")), LONG)
}

/// A verbose waiter whose COMMAND leaves `ran` in `dir`; once it waits
/// with its start parked: the run, its keeper, and the parked child.
fn waiter(
    server: &RedisServer,
    key: &str,
    extra: &[&str],
    dir: &TestDir,
) -> (RunningChild, i32, i32) {
    let ran = dir.file("ran");
    let mut cmd = server
        .job(key)
        .args(extra)
        .args(["-v"])
        .sh(format!("touch '{}'", ran.display()));
    let run = spawn_waiting(&mut cmd, LONG);
    let (keeper, child) = parked(run.pid());
    (run, keeper, child)
}

/// Once `pids` are gone: COMMAND never ran, even after the holder is done.
fn never_ran(server: &RedisServer, key: &str, dir: &TestDir, pids: [i32; 2]) {
    let gone = wait_until(LONG, || pids.iter().all(|&p| !process_alive(p)));
    assert!(gone, "the parked start {pids:?} is still there");
    Hold::new(dir).go();
    let free = wait_until(LONG, || {
        let held: Option<String> = redis::cmd("GET")
            .arg(format!("redlock:{{{key}}}"))
            .query(&mut server.conn())
            .unwrap();
        held.is_none()
    });
    assert!(free, "the holder never released {key}");
    assert!(!dir.file("ran").exists(), "COMMAND ran without the lock");
}

#[test]
fn a_waiter_that_gives_up_while_parked_never_runs_command_and_leaves_nothing() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut held = holder(&server, "give-up", &dir);
    let (mut run, keeper, child) = waiter(&server, "give-up", &["--wait", "5s"], &dir);
    let out = run.wait_timeout(LONG);
    assert_eq!(out.code, Some(75), "{out:?}");
    // Reaped by the time the run exits: nothing left of it.
    assert!(!process_alive(keeper) && !process_alive(child), "{out:?}");
    never_ran(&server, "give-up", &dir, [keeper, child]);
    assert_eq!(held.wait_timeout(LONG).code, Some(0));
}

#[test]
fn a_waiter_sigtermed_while_parked_never_runs_command_and_leaves_nothing() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut held = holder(&server, "term", &dir);
    let (mut run, keeper, child) = waiter(&server, "term", &[], &dir);
    run.signal(Signal::SIGTERM);
    let out = run.wait_timeout(LONG);
    assert_eq!(out.code, Some(143), "{out:?}");
    assert!(!process_alive(keeper) && !process_alive(child), "{out:?}");
    never_ran(&server, "term", &dir, [keeper, child]);
    assert_eq!(held.wait_timeout(LONG).code, Some(0));
}

#[test]
fn a_waiter_sigkilled_while_parked_never_runs_command_and_leaves_nothing() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut held = holder(&server, "kill", &dir);
    let (mut run, keeper, child) = waiter(&server, "kill", &[], &dir);
    run.signal(Signal::SIGKILL);
    let out = run.wait_timeout(LONG);
    assert_eq!(out.signal, Some(9), "{out:?}");
    never_ran(&server, "kill", &dir, [keeper, child]);
    assert_eq!(held.wait_timeout(LONG).code, Some(0));
}

#[test]
fn a_parked_start_whose_keeper_was_killed_never_runs_command_and_gives_the_lock_back() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut held = holder(&server, "keeper", &dir);
    let (mut run, keeper, child) = waiter(&server, "keeper", &[], &dir);
    kill(Pid::from_raw(keeper), Signal::SIGKILL).unwrap();
    // The parked child dies with its keeper (its parent-death signal).
    assert!(wait_until(LONG, || !process_alive(child)));
    Hold::new(&dir).go();
    assert_eq!(held.wait_timeout(LONG).code, Some(0));
    // The waiter gets the lock, finds no start to make, gives it back.
    let out = run.wait_timeout(LONG);
    assert_eq!(out.code, Some(71), "{out:?}");
    assert!(!dir.file("ran").exists(), "COMMAND ran: {out:?}");
    let held: Option<String> = redis::cmd("GET")
        .arg("redlock:{keeper}")
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(held, None, "the lock was not given back: {out:?}");
}

#[test]
fn a_parked_start_gets_its_own_locks_token_and_fence_and_no_outer_lease_file() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut held = holder(&server, "env", &dir);
    let mine = Hold::named(&dir, "w");
    let env = dir.file("env");
    let script = format!(
        "env | grep -E '^REDLOCK_(KEY|TOKEN|FENCE|LEASE_FILE)=' | sort > '{}'; {}",
        env.display(),
        mine.script("true")
    );
    let mut cmd = server
        .job("env")
        .args(["-v"])
        .env("REDLOCK_LEASE_FILE", "/outer/lease")
        .sh(script);
    let mut run = spawn_waiting(&mut cmd, LONG);
    parked(run.pid());
    Hold::new(&dir).go();
    assert_eq!(held.wait_timeout(LONG).code, Some(0));
    assert!(
        wait_for_file(dir.file("w.started"), LONG),
        "{}",
        run.stderr_now()
    );
    let mut conn = server.conn();
    let token: String = redis::cmd("GET")
        .arg("redlock:{env}")
        .query(&mut conn)
        .unwrap();
    let fence: String = redis::cmd("GET")
        .arg("redlock:{env}:fence")
        .query(&mut conn)
        .unwrap();
    let seen = std::fs::read_to_string(&env).unwrap();
    let expected = format!("REDLOCK_FENCE={fence}\nREDLOCK_KEY=env\nREDLOCK_TOKEN={token}\n");
    assert_eq!(seen, expected);
    mine.go();
    let out = run.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
}

/// F14's suspicion, ruled out: a parked start's keeper learns the lease's
/// end from the "go" message, and ends COMMAND by then when its wrapper is
/// frozen right after the start (the campaign's late stops were its own:
/// it froze waiters whose start was parked, not started).
#[test]
fn a_parked_start_whose_wrapper_is_frozen_is_ended_by_its_keeper_at_the_lease_end() {
    frozen_after_the_start(false);
}

/// The same, with the start parked in a forked child (see `like_qemu`),
/// whose keeper learns the lease's end from what the child says.
#[cfg(target_arch = "x86_64")]
#[test]
fn a_forked_parked_start_whose_wrapper_is_frozen_is_ended_by_its_keeper_at_the_lease_end() {
    frozen_after_the_start(true);
}

fn frozen_after_the_start(forked: bool) {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut held = holder(&server, "frozen", &dir);
    let pid = dir.file("pid");
    let mut cmd = server
        .job("frozen")
        .args(["-v", "--ttl", "2s", "--kill-after", "500ms"])
        .sh(format!(
            "echo $$ > '{}'; while :; do sleep 0.05; done",
            pid.display()
        ));
    #[cfg(target_arch = "x86_64")]
    if forked {
        like_qemu(&mut cmd);
    }
    let mut run = spawn_waiting(&mut cmd, LONG);
    let (keeper, child) = parked(run.pid());
    #[cfg(target_arch = "x86_64")]
    assert_eq!(share_memory(keeper, child), !forked);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (forked, keeper, child);
    Hold::new(&dir).go();
    assert_eq!(held.wait_timeout(LONG).code, Some(0));
    let leader = read_pid(&dir, "pid", LONG);
    run.signal(Signal::SIGSTOP);
    assert!(wait_until(LONG, || process_state(run.pid()) == Some('T')));
    assert!(
        wait_until(LONG, || !process_alive(leader)),
        "COMMAND {leader} runs on past the lease while redlock-run is stopped"
    );
    assert_eq!(process_state(run.pid()), Some('T'));
    run.signal(Signal::SIGCONT);
    let out = run.wait_timeout(LONG);
    assert_eq!(out.code, Some(70), "{out:?}");
    assert!(out.stderr.contains("keeper killed"), "{}", out.stderr);
}

/// `cmd` run where a clone that shares its parent's memory without
/// `CLONE_VFORK`'s wait is refused with EINVAL, and `clone3` is unknown
/// (ENOSYS), as under qemu-user: a seccomp filter installed before its
/// exec (x86_64's system call numbers; elsewhere the test is not built).
#[cfg(target_arch = "x86_64")]
fn like_qemu(cmd: &mut std::process::Command) -> &mut std::process::Command {
    use nix::libc;
    const LD_W_ABS: u16 = 0x20;
    const JEQ: u16 = 0x15;
    const JSET: u16 = 0x45;
    const RET: u16 = 0x06;
    const ARCH_X86_64: u32 = 0xc000_003e;
    const ALLOW: u32 = 0x7fff_0000;
    const ERRNO: u32 = 0x0005_0000;
    let op = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    let program = vec![
        op(LD_W_ABS, 0, 0, 4), // the architecture
        op(JEQ, 0, 7, ARCH_X86_64),
        op(LD_W_ABS, 0, 0, 0), // the system call
        op(JEQ, 6, 0, libc::SYS_clone3 as u32),
        op(JEQ, 0, 4, libc::SYS_clone as u32),
        op(LD_W_ABS, 0, 0, 16), // clone's flags (the low half)
        op(JSET, 2, 0, libc::CLONE_THREAD as u32),
        op(JSET, 1, 0, libc::CLONE_VFORK as u32),
        op(JSET, 2, 0, libc::CLONE_VM as u32),
        op(RET, 0, 0, ALLOW),
        op(RET, 0, 0, ERRNO | libc::ENOSYS as u32),
        op(RET, 0, 0, ERRNO | libc::EINVAL as u32),
    ];
    let program: &'static [libc::sock_filter] = Box::leak(program.into_boxed_slice());
    // SAFETY: prctl(2) only, on a program that lives as long as the test.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(cmd, move || {
            let fprog = libc::sock_fprog {
                len: program.len() as u16,
                filter: program.as_ptr().cast_mut(),
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER,
                    std::ptr::addr_of!(fprog),
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}

/// Whether two processes share their memory (kcmp(2), KCMP_VM).
#[cfg(target_arch = "x86_64")]
fn share_memory(a: i32, b: i32) -> bool {
    use nix::libc;
    const KCMP_VM: libc::c_int = 1;
    // SAFETY: a system call on two pids, no memory passed.
    let r = unsafe { libc::syscall(libc::SYS_kcmp, a, b, KCMP_VM, 0, 0) };
    assert!(r >= 0, "kcmp: {}", std::io::Error::last_os_error());
    r == 0
}

/// The filter works as qemu-user does: the usual parked start's child
/// shares its keeper's memory; under the filter it is a fork, and
/// COMMAND gets the lock's token and fence, its exit code passes through.
#[cfg(target_arch = "x86_64")]
#[test]
fn where_shared_memory_clones_are_refused_a_parked_start_is_forked_and_runs_command() {
    let server = RedisServer::start();
    for refused in [false, true] {
        let dir = TestDir::new();
        let mut held = holder(&server, "fork", &dir);
        let env = dir.file("env");
        let mut cmd = server.job("fork").args(["-v"]).sh(format!(
            "env | grep -E '^REDLOCK_(TOKEN|FENCE)=' | sort > '{}'; exit 3",
            env.display()
        ));
        if refused {
            like_qemu(&mut cmd);
        }
        let mut run = spawn_waiting(&mut cmd, LONG);
        let (keeper, child) = parked(run.pid());
        assert_eq!(share_memory(keeper, child), !refused, "refused: {refused}");
        Hold::new(&dir).go();
        assert_eq!(held.wait_timeout(LONG).code, Some(0));
        let out = run.wait_timeout(LONG);
        assert_eq!(out.code, Some(3), "refused: {refused}: {out:?}");
        let fence: String = redis::cmd("GET")
            .arg("redlock:{fork}:fence")
            .query(&mut server.conn())
            .unwrap();
        let seen = std::fs::read_to_string(&env).unwrap();
        let lines: Vec<&str> = seen.lines().collect();
        assert_eq!(
            lines.first(),
            Some(&format!("REDLOCK_FENCE={fence}").as_str())
        );
        // The run's token: a UUID, which the released lock no longer shows.
        let token = lines.get(1).and_then(|l| l.strip_prefix("REDLOCK_TOKEN="));
        assert!(
            token.is_some_and(|t| uuid::Uuid::parse_str(t).is_ok()),
            "{seen}"
        );
    }
}

/// A forked parked start (see above) says why COMMAND could not run: exit
/// 127 naming it, the lock given back; and one given up never runs.
#[cfg(target_arch = "x86_64")]
#[test]
fn a_forked_parked_start_says_a_failed_exec_and_never_runs_when_given_up() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut held = holder(&server, "forkfail", &dir);
    let mut cmd = server
        .job("forkfail")
        .args(["-v"])
        .exec(["no-such-command-redlock-test"]);
    let mut run = spawn_waiting(like_qemu(&mut cmd), LONG);
    let (keeper, child) = parked(run.pid());
    assert!(!share_memory(keeper, child));
    let ran = format!("touch '{}'", dir.file("ran").display());
    let mut cmd = server.job("forkfail").args(["-v", "--wait", "1s"]).sh(ran);
    let mut quitter = spawn_waiting(like_qemu(&mut cmd), LONG);
    let out = quitter.wait_timeout(LONG);
    assert_eq!(out.code, Some(75), "{out:?}");
    Hold::new(&dir).go();
    assert_eq!(held.wait_timeout(LONG).code, Some(0));
    let out = run.wait_timeout(LONG);
    assert_eq!(out.code, Some(127), "{out:?}");
    assert!(
        out.stderr.contains("no-such-command-redlock-test"),
        "{out:?}"
    );
    let held: Option<String> = redis::cmd("GET")
        .arg("redlock:{forkfail}")
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(held, None, "the lock was not given back: {out:?}");
    assert!(!dir.file("ran").exists(), "COMMAND ran without the lock");
}
