//! Sections that must never overlap, run by contending workers while
//! faults break things (Sentinel failovers, Cluster migrations), and the
//! jobs and checks those tests share.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use super::{clients_subscribed_to, redlock, run_with_timeout, wait_until, TestDir};

const LONG: Duration = Duration::from_secs(90);

/// A critical section for `sh -c`: `start $ID T`, then `end $ID T` after
/// `secs` (T in nanoseconds); a SIGTERM also writes its end.
pub fn section(log: &Path, secs: &str) -> String {
    let log = log.display();
    format!(
        "now() {{ date +%s%N; }}; echo \"start $ID $(now)\" >> '{log}'; \
         trap 'echo \"end $ID $(now)\" >> \"{log}\"; exit 0' TERM; \
         sleep {secs}; echo \"end $ID $(now)\" >> '{log}'"
    )
}

/// Each section's (start, end) from a `section` log, checked not to overlap.
pub fn assert_sections_apart(log: &Path) -> HashMap<String, (u128, u128)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut spans: HashMap<String, (u128, u128)> = HashMap::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let [_, id, t] = words[..] else {
            panic!("bad line {line:?}")
        };
        let t: u128 = t.parse().expect("timestamp");
        let span = spans.entry(id.to_string()).or_insert((t, t));
        span.0 = span.0.min(t);
        span.1 = span.1.max(t);
    }
    let mut sorted: Vec<_> = spans.iter().collect();
    sorted.sort_by_key(|(_, span)| span.0);
    for pair in sorted.windows(2) {
        let ((a, (_, a_end)), (b, (b_start, _))) = (pair[0], pair[1]);
        assert!(a_end <= b_start, "sections {a} and {b} overlapped:\n{text}");
    }
    spans
}

/// Workers that run `make(id)` until `stop`, each run's exit code checked
/// against the section log: the job's 0, a lost lock (70), or, only when
/// its job never started, unavailable (69). `ok` counts the runs that
/// exited 0.
pub fn contend_until(
    workers: usize,
    stop: &AtomicBool,
    ok: &AtomicUsize,
    log: &Path,
    make: impl Fn(&str) -> Command + Sync,
) {
    std::thread::scope(|s| {
        for w in 0..workers {
            let make = &make;
            s.spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) {
                    n += 1;
                    let id = format!("w{w}r{n}");
                    let mut cmd = make(&id);
                    cmd.env("ID", &id);
                    let out = run_with_timeout(&mut cmd, LONG);
                    let text = std::fs::read_to_string(log).unwrap_or_default();
                    let started = text.contains(&format!("start {id} "));
                    match out.code {
                        Some(0) => {
                            ok.fetch_add(1, Ordering::SeqCst);
                        }
                        Some(70) => {}
                        Some(69) if !started => {}
                        _ => panic!("run {id} (started: {started}): {out:?}"),
                    }
                }
            });
        }
    });
}

/// Eight workers run logged sections on KEY `load` of `url` while
/// `faults` breaks things (it is handed a check that work goes on after
/// each fault); then no two sections may have overlapped. `extra`: more
/// options for every run. Returns how many sections ran.
pub fn under_load(url: &str, extra: &[&str], faults: impl FnOnce(&dyn Fn(&str))) -> usize {
    let dir = TestDir::new();
    let log = dir.file("log");
    let (stop, ok) = (AtomicBool::new(false), AtomicUsize::new(0));
    std::thread::scope(|s| {
        s.spawn(|| {
            contend_until(8, &stop, &ok, &log, |_| {
                let mut cmd = redlock(url);
                cmd.args(["-k", "load", "--ttl", "10s", "--wait", "60s"])
                    .args(extra)
                    .args(["--", "sh", "-c", &section(&log, "0.1")])
                    .stdin(Stdio::null());
                cmd
            })
        });
        let goes_on = |after: &str| assert_work_continues(&ok, ok.load(Ordering::SeqCst), after);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            assert_work_continues(&ok, 0, "the start");
            faults(&goes_on);
        }));
        stop.store(true, Ordering::SeqCst);
        if let Err(panic) = result {
            std::panic::resume_unwind(panic);
        }
    });
    assert_sections_apart(&log).len()
}

/// Wait until `ok` grows past `from`: work goes on.
pub fn assert_work_continues(ok: &AtomicUsize, from: usize, after: &str) {
    assert!(
        wait_until(LONG, || ok.load(Ordering::SeqCst) > from),
        "no run succeeded after {after}"
    );
}

/// A job that writes its fence to `dir/fence-NAME`, touches `dir/started-NAME`
/// and runs until `dir/go` exists.
pub fn held_until_go(dir: &TestDir, name: &str) -> Vec<String> {
    let d = dir.path().display();
    let line = format!(
        "echo $REDLOCK_FENCE > '{d}/fence-{name}'; touch '{d}/started-{name}'; \
         while [ ! -e '{d}/go' ]; do sleep 0.05; done"
    );
    vec!["--".into(), "sh".into(), "-c".into(), line]
}

pub fn fence(dir: &TestDir, name: &str) -> i64 {
    let text = dir.read(&format!("fence-{name}")).expect("fence file");
    text.trim().parse().expect("fence")
}

/// Waiters subscribed on the node on `port` (each listens on two channels).
pub fn subscribed_waiters(port: u16) -> usize {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    match client.get_connection_with_timeout(Duration::from_secs(2)) {
        Ok(mut conn) => clients_subscribed_to(&mut conn, 2),
        Err(_) => 0,
    }
}
