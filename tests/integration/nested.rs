//! Nested runs: inside COMMAND, `redlock-run` for the same KEY whose
//! REDLOCK_TOKEN still holds the lock runs at once under the outer lock.

use std::time::Duration;

use crate::common::*;

const LONG: Duration = Duration::from_secs(30);

/// An outer run on `urls` whose job runs `inner` (a shell line in which
/// `$RR` is the binary with the same `--redis` options), then records
/// the inner's exit code and whether the lock was still there.
fn outer(urls: &[String], key: &str, extra: &[&str], inner: &str) -> Output {
    let redis: Vec<String> = urls.iter().map(|u| format!("--redis {u}")).collect();
    let rr = format!("{} {}", bin(), redis.join(" "));
    let mut cmd = redlock_bare();
    for url in urls {
        cmd.args(["--redis", url]);
    }
    cmd.args(["-k", key])
        .args(extra)
        .args(["--", "sh", "-c", &format!("{inner}; echo \"inner=$?\"")])
        .env("RR", rr);
    run_with_timeout(&mut cmd, LONG)
}

#[test]
fn a_nested_run_for_the_same_key_runs_at_once_under_the_outer_lock() {
    let server = RedisServer::start();
    let url = server.url();
    // --wait 0: were it an ordinary run it would find the lock busy (75).
    let out = outer(
        std::slice::from_ref(&url),
        "nest",
        &[],
        "$RR -v -k nest --wait 0 -- sh -c 'echo fence=$REDLOCK_FENCE; exit 7'; code=$?; \
         redis-cli -u URL exists 'redlock:{nest}'; (exit $code)"
            .replace("URL", &url)
            .as_str(),
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stdout.contains("inner=7") || out.stdout.contains("fence="),
        "{out:?}"
    );
    assert!(out.stderr.contains("nested in"), "{}", out.stderr);
    // The inner run released nothing: the lock was still there after it.
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(lines.iter().any(|l| l.starts_with("fence=")), "{out:?}");
    assert!(
        lines.contains(&"1"),
        "the inner run released the lock: {out:?}"
    );
    assert!(
        !exists(&mut server.conn(), "redlock:{nest}"),
        "the outer released it"
    );
}

#[test]
fn the_inner_exit_code_passes_through_and_another_key_waits_as_usual() {
    let server = RedisServer::start();
    let url = server.url();
    let out = outer(
        std::slice::from_ref(&url),
        "a",
        &[],
        "$RR -k a -- sh -c 'exit 9'",
    );
    assert!(out.stdout.contains("inner=9"), "{out:?}");
    // Another key: an ordinary run, which finds it free and takes it.
    let out = outer(std::slice::from_ref(&url), "a", &[], "$RR -v -k b -- true");
    assert!(out.stdout.contains("inner=0"), "{out:?}");
    assert!(out.stderr.contains("acquired lock 'b'"), "{}", out.stderr);
    // Another key held elsewhere: it waits as usual (here: -n, busy).
    let mut conn = server.conn();
    redis::cmd("SET")
        .arg("redlock:{c}")
        .arg("x")
        .query::<()>(&mut conn)
        .unwrap();
    let out = outer(&[url], "a", &[], "$RR -k c -n -- true");
    assert!(out.stdout.contains("inner=75"), "{out:?}");
}

#[test]
fn a_stale_token_is_an_ordinary_run() {
    let server = RedisServer::start();
    let mut cmd = redlock(&server.url());
    cmd.args(["-v", "-k", "stale", "--", "true"])
        .env("REDLOCK_KEY", "stale")
        .env("REDLOCK_TOKEN", "not-the-holder");
    let out = run_with_timeout(&mut cmd, LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stderr.contains("acquired lock 'stale'"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("nested"), "{}", out.stderr);
}

#[test]
fn nesting_works_for_semaphores_and_redlock_quorums() {
    let servers = RedisServer::many(3);
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    let out = outer(&urls, "q", &[], "$RR -v -k q --wait 0 -- sh -c 'exit 4'");
    assert!(out.stdout.contains("inner=4"), "{out:?}");
    assert!(out.stderr.contains("nested in"), "{}", out.stderr);
    let one = &urls[..1];
    let out = outer(
        one,
        "s",
        &["--limit", "2"],
        "$RR -v -k s --limit 2 --wait 0 -- sh -c 'exit 6'",
    );
    assert!(out.stdout.contains("inner=6"), "{out:?}");
    assert!(out.stderr.contains("nested in"), "{}", out.stderr);
}

#[test]
fn an_unlocked_run_inside_another_keys_command_gets_no_token_and_no_fence() {
    let server = RedisServer::start();
    let dead = format!("redis://127.0.0.1:{}", free_port());
    // Inside the COMMAND of a run for "outer": a run for "other" on a
    // server that is down, which runs its COMMAND without a lock.
    let show =
        "echo \"key=$REDLOCK_KEY token=${REDLOCK_TOKEN-unset} fence=${REDLOCK_FENCE-unset}\"";
    let inner = format!(
        "echo \"outer fence=$REDLOCK_FENCE\"; {} --redis {dead} -k other --on-unavailable run -- sh -c '{show}'",
        bin()
    );
    let out = outer(&[server.url()], "outer", &[], &inner);
    assert_eq!(out.code, Some(0), "{out:?}");
    let outer_fence = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("outer fence="));
    assert!(
        outer_fence.is_some_and(|f| f.parse::<i64>().is_ok()),
        "the outer job has a fence: {out:?}"
    );
    assert!(out.stdout.contains("inner=0"), "{out:?}");
    assert!(
        out.stdout.contains("key=other token=unset fence=unset"),
        "the unlocked job inherited the outer lock's token or fence: {out:?}"
    );
}
