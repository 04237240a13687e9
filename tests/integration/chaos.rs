//! Chaos: eight workers run short critical sections on one key while the
//! test pauses and kills Redis, drops every client's connection, stops
//! and continues the wrappers (job control), and gives some workers a
//! stderr nobody reads. No two sections may overlap, and every run must
//! end as its job did (0), as a lost lock (70), or, only when its job
//! never started, as Redis unavailable (69).

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::common::*;

const WORKERS: usize = 8;
const RUNS: usize = 6;

/// A section: `start ID T`, `alive ID T` every 50 ms, `end ID T`; a
/// SIGTERM also writes its end. T is nanoseconds (CLOCK_REALTIME), read
/// with a bash builtin in a function of the shell itself: a `$(...)`
/// forks a subshell, which a second SIGTERM (a forwarded one, then the
/// stop's) can kill in the trap, and leave the line without its time.
fn section(log: &str) -> String {
    format!(
        "line() {{ local t=${{EPOCHREALTIME/./}}; echo \"$1 $ID ${{t}}000\" >> '{log}'; }}; line start; \
         trap 'line end; exit 0' TERM; \
         for i in 1 2 3 4 5 6; do sleep 0.05; line alive; done; \
         line end"
    )
}

/// Each section's span, from its first line to its last.
fn spans(text: &str) -> HashMap<String, (u128, u128)> {
    let mut spans: HashMap<String, (u128, u128)> = HashMap::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let (Some(_), Some(id), Some(t)) = (words.next(), words.next(), words.next()) else {
            panic!("bad line {line:?}");
        };
        let t: u128 = t.parse().expect("timestamp");
        let span = spans.entry(id.to_string()).or_insert((t, t));
        span.0 = span.0.min(t);
        span.1 = span.1.max(t);
    }
    spans
}

fn assert_no_overlap(spans: &HashMap<String, (u128, u128)>, text: &str) {
    let mut sorted: Vec<(&String, &(u128, u128))> = spans.iter().collect();
    sorted.sort_by_key(|(_, span)| span.0);
    for pair in sorted.windows(2) {
        let ((a, (_, a_end)), (b, (b_start, _))) = (pair[0], pair[1]);
        assert!(a_end <= b_start, "sections {a} and {b} overlapped:\n{text}");
    }
}

/// One worker's run: a wrapper, sometimes with a stderr nobody reads.
fn run_once(url: &str, log: &str, id: &str, stalled: bool, pids: &Mutex<Vec<i32>>) -> i32 {
    let mut cmd = redlock(url);
    cmd.args(["-k", "chaos", "--ttl", "1s", "--wait", "30s"])
        .args(["--", "bash", "-c", &section(log)])
        .env("ID", id)
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    // A full pipe that is never read: every stderr write would block.
    // Close-on-exec: another test's child must not inherit it (one run
    // under a 4-descriptor limit fails to start with an fd too many).
    let (_read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
    if stalled {
        fill(&write);
        cmd.stderr(Stdio::from(write));
    } else {
        cmd.stderr(Stdio::null());
    }
    let mut child = cmd.spawn().expect("spawn redlock-run");
    pids.lock().unwrap().push(child.id() as i32);
    let end = Instant::now() + Duration::from_secs(120);
    let status = loop {
        // Reaped only under the lock, and taken off the list with it: the
        // fault thread holds the lock while it signals a pid, so that pid
        // is never another test's process by reuse.
        let mut listed = pids.lock().unwrap();
        if let Some(status) = child.try_wait().expect("wait") {
            listed.retain(|&p| p != child.id() as i32);
            break status;
        }
        drop(listed);
        assert!(Instant::now() < end, "run {id} hung");
        std::thread::sleep(Duration::from_millis(10));
    };
    status.code().unwrap_or(-1)
}

fn fill(fd: &std::os::fd::OwnedFd) {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    use std::io::Write;
    let flags = OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL).unwrap());
    fcntl(fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK)).unwrap();
    let mut file = std::fs::File::from(fd.try_clone().unwrap());
    while file.write(&[b'x'; 4096]).is_ok() {}
    fcntl(fd, FcntlArg::F_SETFL(flags)).unwrap();
}

/// One fault, chosen by `n`, then undone. Its sleeps are the fault's
/// length (what is under test), not waits for a state.
fn fault(n: usize, server: &mut RedisServer, pids: &Mutex<Vec<i32>>) {
    match n % 5 {
        0 => {
            server.pause();
            std::thread::sleep(Duration::from_millis(100 + 113 * (n % 5) as u64));
            server.resume();
        }
        1 => {
            // With appendfsync always the lock survives the restart.
            server.kill();
            std::thread::sleep(Duration::from_millis(50));
            server.restart();
        }
        2 => {
            let _: Result<i64, _> = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("TYPE")
                .arg("normal")
                .query(&mut server.conn());
        }
        _ => {
            // Job control on one wrapper; now and then past its TTL. The
            // lock keeps it from being reaped (and its pid reused) meanwhile.
            let listed = pids.lock().unwrap();
            let Some(&pid) = listed.get(n % WORKERS) else {
                return;
            };
            let _ = kill(Pid::from_raw(pid), Signal::SIGTSTP);
            let pause = if n.is_multiple_of(3) { 1300 } else { 150 };
            std::thread::sleep(Duration::from_millis(pause));
            let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
            drop(listed);
        }
    }
}

#[test]
fn no_two_sections_overlap_through_redis_faults_and_job_control() {
    let mut server = RedisServer::builder()
        .arg("--appendonly")
        .arg("yes")
        .arg("--appendfsync")
        .arg("always")
        .start();
    let dir = TestDir::new();
    let log = dir.file("log").display().to_string();
    let url = server.url();
    let pids = Arc::new(Mutex::new(Vec::new()));
    let exits = Arc::new(Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (url, log, pids, exits) = (url.clone(), log.clone(), pids.clone(), exits.clone());
            std::thread::spawn(move || {
                for r in 0..RUNS {
                    let id = format!("{w}.{r}");
                    let code = run_once(&url, &log, &id, w.is_multiple_of(3), &pids);
                    exits.lock().unwrap().push((id, code));
                }
            })
        })
        .collect();
    let mut faults = 0;
    while !workers.iter().all(|w| w.is_finished()) {
        // The spacing of the faults, not a wait for a state.
        std::thread::sleep(Duration::from_millis(200 + 37 * (faults % 7) as u64));
        fault(faults, &mut server, &pids);
        faults += 1;
    }
    for w in workers {
        w.join().expect("worker");
    }
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let spans = spans(&text);
    assert_no_overlap(&spans, &text);
    let exits = exits.lock().unwrap();
    for (id, code) in exits.iter() {
        let started = spans.contains_key(id);
        match code {
            0 | 70 => {}
            69 if !started => {}
            other => panic!("run {id} exited {other} (started: {started}):\n{text}"),
        }
        if *code == 0 {
            assert!(started, "run {id} exited 0 but its section never ran");
        }
    }
    let completed = exits.iter().filter(|(_, c)| *c == 0).count();
    assert!(
        completed >= WORKERS * RUNS / 2,
        "only {completed} of {} runs completed through {faults} faults",
        WORKERS * RUNS
    );
    eprintln!(
        "{} sections ({completed} completed), {faults} faults",
        spans.len()
    );
}
