//! flock(1)'s habits, where they mean the same here: bare seconds, its
//! option spellings, `-n` winning over `-w`; a forgotten `--` answered with
//! the command line that works; and errors about a derived value that name
//! the option typed with the value that works (docs/flock.md).

use std::time::{Duration, Instant};

use crate::common::*;

const LONG: Duration = Duration::from_secs(30);

/// The first line a run printed on stderr.
fn first_line(out: &Output) -> &str {
    out.stderr.lines().next().unwrap_or_default()
}

#[test]
fn waits_take_bare_seconds_and_flocks_spellings() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let hold = Hold::new(&dir);
    let mut holder = hold.spawn(&mut server.job("busy").sh(hold.script("")), LONG);
    let marker = dir.file("ran");
    let ran = format!("touch '{}'", marker.display());

    // `-w 1` and `--timeout 0.5`: seconds, as flock and timeout(1) read them.
    for (wait, least) in [(["-w", "1"], 950), (["--timeout", "0.5"], 450)] {
        let start = Instant::now();
        let out = run_with_timeout(&mut server.job("busy").args(wait).sh(&ran), LONG);
        assert_eq!(out.code, Some(75), "{wait:?}: {out:?}");
        assert!(
            start.elapsed() >= Duration::from_millis(least),
            "{wait:?} gave up after {:?}",
            start.elapsed()
        );
    }
    // Not waiting, however spelt; -n wins over -w, as in flock.
    for nowait in [
        &["--nb"][..],
        &["--nonblock"],
        &["-n", "-w", "20"],
        &["-w", "20", "-n"],
    ] {
        let start = Instant::now();
        let out = run_with_timeout(&mut server.job("busy").args(nowait).sh(&ran), LONG);
        assert_eq!(out.code, Some(75), "{nowait:?}: {out:?}");
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{nowait:?} waited {:?}",
            start.elapsed()
        );
    }
    assert!(!marker.exists(), "a run ran although the lock was busy");
    hold.go();
    assert_eq!(holder.wait_timeout(LONG).code, Some(0));

    // An exclusive lock is the only kind: -x, -e, --exclusive change nothing.
    for exclusive in ["-x", "-e", "--exclusive"] {
        let out = run_with_timeout(&mut server.job("free").args([exclusive]).sh(&ran), LONG);
        assert_eq!(out.code, Some(0), "{exclusive}: {out:?}");
    }
    assert!(marker.exists());
}

#[test]
fn a_forgotten_double_dash_is_answered_with_the_line_that_works() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let marker = dir.file("ran");
    let url = server.url_with(Some("default"), "s3cret-pw");
    let out = run_with_timeout(
        redlock_bare()
            .args(["--redis", &url, "-k", "x", "touch"])
            .arg(&marker),
        LONG,
    );
    assert_eq!(out.code, Some(2), "{out:?}");
    let want = "redlock-run --redis redis://default:***@";
    let line = first_line(&out);
    assert!(line.contains(want), "{line}");
    assert!(
        line.ends_with(&format!(" -k x -- touch {}", marker.display())),
        "{line}"
    );
    assert!(!out.stderr.contains("s3cret-pw"), "{}", out.stderr);
    assert!(!marker.exists(), "COMMAND ran");
    let mut conn = server.conn();
    assert!(
        !exists(&mut conn, "redlock:{x}:fence"),
        "something reached Redis"
    );
    // A word that no `--` turns into a run keeps clap's own error.
    let out = run_with_timeout(redlock_bare().args(["statsu", "x"]), LONG);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(!out.stderr.contains("COMMAND goes after"), "{}", out.stderr);
}

/// The shortest TTL the first line of `out` names.
fn shortest_ttl_named(out: &Output) -> String {
    let line = first_line(out);
    line.rsplit(" is ")
        .next()
        .map(str::trim)
        .filter(|v| v.ends_with("ms") || v.ends_with('s'))
        .unwrap_or_else(|| panic!("no shortest TTL in {line:?}"))
        .to_string()
}

#[test]
fn a_derived_value_is_the_typed_options_fault_with_the_value_that_works() {
    let server = RedisServer::start();
    for extra in [&[][..], &["--kill-after", "10ms"]] {
        let run = |ttl: &str| {
            run_with_timeout(
                &mut server.job("t").args(["--ttl", ttl]).args(extra).sh("true"),
                LONG,
            )
        };
        let out = run("100ms");
        assert_eq!(out.code, Some(2), "{out:?}");
        let line = first_line(&out);
        assert!(line.contains("'--ttl <DURATION>'"), "{line}");
        assert!(
            !line.contains("--refresh"),
            "blames an option not given: {line}"
        );
        let least = shortest_ttl_named(&out);
        let ms: u64 = least
            .trim_end_matches("ms")
            .parse()
            .unwrap_or_else(|_| panic!("not in ms: {least}"));
        // Accepted: the run then holds a lease of a few hundred ms, which
        // a loaded machine can really lose (exit 70): not this test's
        // subject.
        let accepted = run(&least);
        assert!(
            accepted.code != Some(2) && !accepted.stderr.contains("--ttl"),
            "{extra:?} --ttl {least} is refused: {accepted:?}"
        );
        let shorter = format!("{}ms", ms - 1);
        assert_eq!(
            run(&shorter).code,
            Some(2),
            "{extra:?} --ttl {shorter} works too"
        );
    }
    // A typed option that can be fixed is named, with how far it may go.
    let out = run_with_timeout(
        &mut server
            .job("t")
            .args(["--ttl", "1s", "--refresh", "900ms"])
            .sh("true"),
        LONG,
    );
    assert_eq!(out.code, Some(2), "{out:?}");
    let line = first_line(&out);
    assert!(
        line.contains("'--refresh <DURATION>'") && line.contains("at most"),
        "{line}"
    );
}
