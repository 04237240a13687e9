//! Tests that need a program besides redis-server (groff, man, zsh, fish,
//! tmux, script, unshare) skip with a note when it is missing, unless
//! `REDLOCK_TEST_REQUIRE_TOOLS=1` (set by `scripts/test.sh` and CI): then a
//! missing tool fails the test, so that nothing passes by skipping.

use std::ffi::OsStr;
use std::process::Command;

/// Whether `program` is on PATH. When it is not: a one-line note naming
/// the Debian `package` to install, or a failure under
/// `REDLOCK_TEST_REQUIRE_TOOLS=1`.
pub fn have_tool(program: &str, package: &str) -> bool {
    super::note_test();
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        skip(
            &format!("{program} is not installed (apt-get install {package})"),
            None,
        );
    }
    found
}

/// Whether this test may make a private mount namespace (util-linux's
/// `unshare -m`, which needs root). When not: a loud note saying what is
/// `untested`, or a failure under `REDLOCK_TEST_REQUIRE_TOOLS=1`.
pub fn can_unshare(untested: &str) -> bool {
    if !have_tool("unshare", "util-linux") {
        return false;
    }
    let permitted = Command::new("unshare")
        .args(["-m", "--propagation", "private", "true"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !permitted {
        skip(
            "unshare -m is not permitted here (needs root)",
            Some(untested),
        );
    }
    permitted
}

/// `cmd` run by `sh` in a private mount namespace after `setup` (shell
/// text, run there first) succeeded. Check `can_unshare` before.
pub fn unshared(setup: &str, cmd: &Command) -> Command {
    let script = format!("{setup} && exec \"$@\"");
    let args = ["-m", "--propagation", "private", "sh", "-c", &script, "sh"];
    wrapped("unshare", args, cmd)
}

/// `program ARGS... CMD'S PROGRAM CMD'S ARGS...`, with `cmd`'s changes to
/// the environment: `cmd` run by another program that runs its arguments.
pub fn wrapped<I, S>(program: impl AsRef<OsStr>, args: I, cmd: &Command) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut wrapped = Command::new(program);
    wrapped
        .args(args)
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (name, value) in cmd.get_envs() {
        match value {
            Some(value) => wrapped.env(name, value),
            None => wrapped.env_remove(name),
        };
    }
    wrapped
}

/// Whether the server under test has TLS. When not: a loud note, or a
/// failure under `REDLOCK_TEST_REQUIRE_TOOLS=1` unless
/// `REDLOCK_TEST_REQUIRE_TLS=0` says this server is known to lack it
/// (`scripts/test.sh --server` sets it for the builds without TLS).
pub fn have_tls(untested: &str) -> bool {
    if super::server_has_tls() {
        return true;
    }
    let known = std::env::var("REDLOCK_TEST_REQUIRE_TLS").is_ok_and(|v| v == "0");
    let note = format!("{} was built without TLS", super::redis_server_bin());
    assert!(
        known || !tools_required(),
        "{note}, and REDLOCK_TEST_REQUIRE_TOOLS=1 without REDLOCK_TEST_REQUIRE_TLS=0"
    );
    eprintln!("\n!!!!! SKIPPED: {note}: {untested} is NOT tested !!!!!\n");
    false
}

/// Whether a missing tool must fail the test rather than skip it.
pub fn tools_required() -> bool {
    std::env::var("REDLOCK_TEST_REQUIRE_TOOLS").is_ok_and(|v| v == "1")
}

/// Skip with `note` (loudly when a whole area goes `untested`), or fail
/// under `REDLOCK_TEST_REQUIRE_TOOLS=1`.
fn skip(note: &str, untested: Option<&str>) {
    assert!(
        !tools_required(),
        "{note}, and REDLOCK_TEST_REQUIRE_TOOLS=1"
    );
    match untested {
        None => eprintln!("skipped: {note}"),
        Some(what) => eprintln!("\n!!!!! SKIPPED: {note}: {what} is NOT tested !!!!!\n"),
    }
}
