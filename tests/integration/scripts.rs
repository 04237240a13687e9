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
