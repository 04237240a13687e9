//! The scripts a newcomer and CI run: the demo behaves step by step, and
//! the packaging files agree with the sources they are made from.

use std::process::Command;
use std::time::Duration;

use crate::common::*;

fn source(path: &str) -> String {
    let full = format!("{}/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{full}: {e}"))
}

#[test]
fn demo_shows_every_step_and_exits_0() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/demo.sh");
    let out = run_with_timeout(
        Command::new("bash")
            .arg(script)
            .env("REDLOCK_DEMO_BIN", bin())
            .env_remove("REDLOCK_REDIS_URL")
            .env_remove("REDIS_URL"),
        Duration::from_secs(120),
    );
    let all = format!("{}\n--- stderr ---\n{}", out.stdout, out.stderr);
    assert_eq!(out.code, Some(0), "{all}");
    for line in [
        "== step 1: job A takes the lock and holds it",
        "   ok: job A holds the lock",
        "== step 2: status while the lock is held",
        "   ok: status: exit 0 (held)",
        "== step 3: a -n contender is turned away",
        "   ok: exit 75 (lock busy; the command did not run)",
        "== step 4: job B waits its turn",
        "   ok: A ran, then B (exit 0 and 0); never both at once",
        "== step 5: a lock lost to a paused Redis stops its job",
        "   ok: exit 70 (lock lost; the job was stopped before the lock could expire)",
        "demo: all 5 steps behaved",
    ] {
        assert!(
            out.stdout.lines().any(|l| l == line),
            "no {line:?} in:\n{all}"
        );
    }
    assert!(out.stdout.contains("held by"), "{all}");
    // Where the binary is, and how to put it on PATH.
    let dir = std::path::Path::new(bin())
        .parent()
        .expect("the binary's dir");
    let dir = dir.canonicalize().expect("canonical");
    let path_line = format!("  export PATH=\"{}:$PATH\"", dir.display());
    assert!(
        out.stdout.lines().any(|l| l == path_line),
        "no {path_line:?} in:\n{all}"
    );
    assert!(
        !out.stdout.lines().any(|l| l == "never"),
        "the -n contender ran:\n{all}"
    );
    // The demo removes its temp dir (and so its redis-server's socket).
    let socket = out
        .stdout
        .split_whitespace()
        .find_map(|w| w.strip_prefix("redis+unix://"))
        .unwrap_or_else(|| panic!("no socket named in:\n{all}"));
    assert!(
        !std::path::Path::new(socket).exists(),
        "{socket} left behind"
    );
}

#[test]
fn demo_test_and_ci_share_one_list_of_prerequisites() {
    for script in ["scripts/demo.sh", "scripts/test.sh", ".ci/run"] {
        assert!(
            source(script)
                .lines()
                .any(|l| l.trim().starts_with("source scripts/prereqs.sh")),
            "{script} does not source scripts/prereqs.sh"
        );
    }
    // The demo installs only what it needs.
    assert!(
        source("scripts/demo.sh")
            .lines()
            .any(|l| l.trim() == "source scripts/prereqs.sh --demo"),
        "scripts/demo.sh should install only the demo's packages"
    );
}

/// The packages `scripts/prereqs.sh ARGS --list` names.
fn prereqs(args: &[&str]) -> Vec<String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/prereqs.sh");
    let out = run_with_timeout(
        Command::new("bash").arg(script).args(args).arg("--list"),
        Duration::from_secs(30),
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    let mut packages: Vec<String> = out.stdout.lines().map(String::from).collect();
    packages.sort();
    packages
}

/// The package names in code spans of `text` between `from` and `to`
/// (white space folded), leaving out paths and options.
fn named_between(text: &str, from: &str, to: &str) -> Vec<String> {
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let start = text.find(from).unwrap_or_else(|| panic!("no {from:?}")) + from.len();
    let end = start
        + text[start..]
            .find(to)
            .unwrap_or_else(|| panic!("no {to:?}"));
    let mut names: Vec<String> = text[start..end]
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| !w.contains(['/', ' ']) && !w.starts_with('-'))
        .map(String::from)
        .collect();
    names.sort();
    names
}

#[test]
fn contributing_names_the_packages_prereqs_installs() {
    let contributing = source("CONTRIBUTING.md");
    let demo = named_between(&contributing, "The demo needs", "; the tests add");
    let tests = named_between(&contributing, "; the tests add", "As root");
    let release = named_between(
        &contributing,
        "scripts/prereqs.sh --release` (adding",
        "to the list above",
    );
    assert_eq!(demo, prereqs(&["--demo"]), "the demo's packages");
    let mut all = [demo.clone(), tests].concat();
    all.sort();
    assert_eq!(all, prereqs(&[]), "the tests' packages");
    let mut with_release = [all, release].concat();
    with_release.sort();
    assert_eq!(
        with_release,
        prereqs(&["--release"]),
        "CI's release packages"
    );
    // The demo needs a server and a linker, not the test toolchain.
    for heavy in ["prometheus", "nftables", "fish", "tmux", "faketime"] {
        assert!(
            !demo.iter().any(|p| p == heavy),
            "the demo installs {heavy}"
        );
    }
}

#[test]
fn test_times_lists_modules_costliest_first_with_their_slowest_test() {
    let dir = TestDir::new();
    let times = dir.file("times");
    std::fs::write(
        &times,
        "quick::a\t100\nslow::b\t2500\nslow::c\t900\nmid::d\t1200\n",
    )
    .unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/test-times.sh");
    let out = run_with_timeout(Command::new(script).arg(&times), Duration::from_secs(30));
    assert_eq!(out.code, Some(0), "{out:?}");
    let rows: Vec<Vec<&str>> = out
        .stdout
        .lines()
        .skip(2)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [
            ["slow", "2", "3.4", "b", "(2.5)"],
            ["mid", "1", "1.2", "d", "(1.2)"],
            ["quick", "1", "0.1", "a", "(0.1)"],
        ],
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.starts_with("test times (4 tests"),
        "{}",
        out.stdout
    );
}

/// What `scripts/test-summary.sh` says of a run that printed `log` and
/// exited `status` after `secs` seconds.
fn summary(log: &str, status: i32, secs: u32) -> String {
    let dir = TestDir::new();
    std::fs::write(dir.file("log"), log).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/test-summary.sh");
    let out = run_with_timeout(
        Command::new(script)
            .arg(dir.file("log"))
            .arg(status.to_string())
            .arg(secs.to_string()),
        Duration::from_secs(30),
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stdout.lines().count(), 1, "one line: {}", out.stdout);
    out.stdout.trim_end().to_string()
}

#[test]
fn test_sh_ends_with_one_line_saying_passed_or_failed_and_how_long() {
    let passed = "running 81 tests\ntest result: ok. 81 passed; 0 failed; 0 ignored; 0 measured; \
                  0 filtered out; finished in 0.10s\n\nrunning 206 tests\ntest result: ok. 204 \
                  passed; 0 failed; 2 ignored; 0 measured; 0 filtered out; finished in 300.2s\n";
    assert_eq!(
        summary(passed, 0, 405),
        "test.sh: passed: 285 tests, 2 ignored, in 6m 45s"
    );
    let failed = "test queue::a ... ok\ntest wait::b ... FAILED\ntest tree::c ... FAILED\n\
                  test result: FAILED. 40 passed; 2 failed; 0 ignored; 0 measured; 0 filtered \
                  out; finished in 9.0s\n";
    assert_eq!(
        summary(failed, 101, 62),
        "test.sh: FAILED: 2 of 42 tests (tree::c, wait::b), in 1m 02s; their output is above \
         the time table"
    );
    let broken = "error[E0425]: cannot find value `x` in this scope\n";
    assert!(
        summary(broken, 101, 3).starts_with("test.sh: FAILED: cargo test exited 101"),
        "a build error is a failure"
    );
    // scripts/test.sh prints it last, after the time table.
    let test_sh = source("scripts/test.sh");
    let last = test_sh
        .lines()
        .rfind(|l| !l.trim().is_empty() && !l.starts_with("exit"))
        .unwrap_or_default();
    assert!(last.starts_with("scripts/test-summary.sh "), "{last}");
}

#[test]
fn debian_copyright_carries_the_mit_text_and_points_to_apache() {
    let copyright = source("packaging/copyright");
    let mit = source("LICENSE-MIT");
    let permission = mit
        .split_once("Permission is hereby granted")
        .map(|(_, rest)| rest)
        .expect("LICENSE-MIT has the MIT permission text");
    let indented: String = copyright
        .lines()
        .map(|l| if l == " ." { "" } else { l.trim_start() })
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        indented.contains(permission.trim_end()),
        "packaging/copyright's MIT text differs from LICENSE-MIT"
    );
    assert!(copyright.contains("/usr/share/common-licenses/Apache-2.0"));
    assert!(source("LICENSE-APACHE").contains("Version 2.0, January 2004"));
}

#[test]
fn changelogs_name_the_package_version() {
    let manifest = source("Cargo.toml");
    let version = manifest
        .lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .expect("Cargo.toml has a version");
    let debian = source("packaging/changelog.Debian");
    let top = debian.lines().next().unwrap_or_default();
    assert!(
        top.starts_with(&format!("redlock-run ({version}-1) ")),
        "packaging/changelog.Debian's top entry is not {version}-1: {top:?}"
    );
    let changelog = source("CHANGELOG.md");
    assert!(changelog.contains("## [Unreleased]"));
    assert!(
        changelog.contains(&format!("## [{version}]")),
        "CHANGELOG.md has no section for {version}"
    );
}
