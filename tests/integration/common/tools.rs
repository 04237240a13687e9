//! Tests that need a program besides redis-server (groff, man, zsh, fish,
//! tmux, script) skip with a note when it is missing, unless
//! `REDLOCK_TEST_REQUIRE_TOOLS=1` (set by `scripts/test.sh` and CI): then a
//! missing tool fails the test, so that nothing passes by skipping.

use std::process::Command;

/// Whether `program` is on PATH. When it is not: a one-line note naming
/// the Debian `package` to install, or a failure under
/// `REDLOCK_TEST_REQUIRE_TOOLS=1`.
pub fn have_tool(program: &str, package: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        let note = format!("{program} is not installed (apt-get install {package})");
        assert!(
            !tools_required(),
            "{note}, and REDLOCK_TEST_REQUIRE_TOOLS=1"
        );
        eprintln!("skipped: {note}");
    }
    found
}

/// Whether a missing tool must fail the test rather than skip it.
pub fn tools_required() -> bool {
    std::env::var("REDLOCK_TEST_REQUIRE_TOOLS").is_ok_and(|v| v == "1")
}
