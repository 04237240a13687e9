//! Hostile or broken input from the user's side: bytes that are not UTF-8
//! in options and in the environment, empty variables. Bad input is exit 2
//! with one line naming the option or variable, nothing sent to Redis, no
//! password printed.

use crate::common::*;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::process::Command;
use std::time::Duration;

const T: Duration = Duration::from_secs(20);
/// The timeout of the tests that came from the run-mode modules.
const LONG: Duration = Duration::from_secs(30);

/// Latin-1 "é": what an EnvironmentFile written in Latin-1 holds.
fn latin1(text: &str) -> &'static OsStr {
    let bytes: Vec<u8> = text
        .bytes()
        .flat_map(|b| match b {
            b'~' => vec![0xE9],
            b => vec![b],
        })
        .collect();
    OsStr::from_bytes(Box::leak(bytes.into_boxed_slice()))
}

/// The error's first line, which must name `what`.
fn assert_usage_names(out: &Output, what: &str) {
    assert_eq!(out.code, Some(2), "{what}: {out:?}");
    let first = out.stderr.lines().next().unwrap_or_default();
    assert!(first.contains(what), "{what} not named: {out:?}");
}

#[test]
fn a_redis_url_variable_that_is_not_utf8_is_an_error_not_skipped() {
    let wanted = RedisServer::start();
    let fallback = RedisServer::start();
    let url = format!("redis://:s3cr~t-pw@127.0.0.1:{}", wanted.port());
    let mut cmd = redlock_bare();
    cmd.env("REDLOCK_REDIS_URL", latin1(&url))
        .env("REDIS_URL", fallback.url())
        .args(["-k", "env", "--", "true"]);
    let out = run_with_timeout(&mut cmd, T);
    assert_usage_names(&out, "$REDLOCK_REDIS_URL");
    assert!(!out.stderr.contains("s3cr"), "password printed: {out:?}");
    assert_eq!(
        dbsize(&mut fallback.conn()),
        0,
        "locked the fallback server"
    );
    assert_eq!(dbsize(&mut wanted.conn()), 0);

    // The same for $REDIS_URL when it is the one in use, and for --redis.
    let mut cmd = redlock_bare();
    cmd.env("REDIS_URL", latin1(&url)).args(["status", "env"]);
    assert_usage_names(&run_with_timeout(&mut cmd, T), "$REDIS_URL");
    let mut cmd = redlock_bare();
    cmd.arg("--redis").arg(latin1(&url)).args(["list"]);
    let out = run_with_timeout(&mut cmd, T);
    assert_usage_names(&out, "--redis");
    assert!(!out.stderr.contains("s3cr"), "password printed: {out:?}");
}

#[test]
fn empty_variables_mean_unset() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut cmd = server.job("empty").sh("echo ran > \"$0\"");
    cmd.arg(dir.file("ran"));
    for var in [
        "REDLOCK_QUEUE",
        "REDLOCK_LOG_FORMAT",
        "REDLOCK_METRICS_DIR",
        "REDLOCK_REDIS_URL",
    ] {
        cmd.env(var, "");
    }
    let out = run_with_timeout(&mut cmd, T);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(dir.read("ran").as_deref(), Some("ran\n"));

    // An empty REDLOCK_REDIS_URL falls through to REDIS_URL.
    let mut cmd = redlock_bare();
    cmd.env("REDLOCK_REDIS_URL", " ")
        .env("REDIS_URL", server.url())
        .env("REDLOCK_LOG_FORMAT", "")
        .args(["status", "empty"]);
    let out = run_with_timeout(&mut cmd, T);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stdout.starts_with("empty  free"), "{out:?}");
}

#[test]
fn a_bad_variable_is_named_and_fails_only_where_it_is_used() {
    let server = RedisServer::start();
    let bad: [(&str, &OsStr); 5] = [
        ("REDLOCK_QUEUE", OsStr::new("fastest")),
        ("REDLOCK_QUEUE", latin1("newest-wins~")),
        ("REDLOCK_LOG_FORMAT", OsStr::new("xml")),
        ("REDLOCK_LOG_FORMAT", latin1("~")),
        ("REDLOCK_METRICS_DIR", OsStr::new("/nonexistent/metrics")),
    ];
    for (var, value) in bad {
        let mut cmd = server.job("vars").sh("true");
        cmd.env(var, value);
        let out = run_with_timeout(&mut cmd, T);
        assert_usage_names(&out, &format!("${var}"));
        let first = out.stderr.lines().next().unwrap_or_default();
        assert!(!first.contains("'--"), "names a flag: {out:?}");
    }
    assert_eq!(dbsize(&mut server.conn()), 0);

    // The run's own variables do not concern status or generate.
    let mut cmd = redlock(&server.url());
    cmd.env("REDLOCK_QUEUE", "fastest")
        .env("REDLOCK_METRICS_DIR", "/nonexistent/metrics")
        .args(["status", "vars"]);
    assert_eq!(run_with_timeout(&mut cmd, T).code, Some(1));
    let mut cmd: Command = redlock_bare();
    cmd.env("REDLOCK_LOG_FORMAT", "xml")
        .env("REDLOCK_REDIS_URL", latin1("redis://~"))
        .args(["generate", "bash"]);
    assert_eq!(run_with_timeout(&mut cmd, T).code, Some(0));
}

#[test]
fn text_options_that_are_not_utf8_name_the_option() {
    let server = RedisServer::start();
    let cases: [(&str, &[&OsStr]); 4] = [
        (
            "--key",
            &[
                OsStr::new("-k"),
                latin1("caf~"),
                OsStr::new("-c"),
                OsStr::new("true"),
            ],
        ),
        (
            "--command",
            &[
                OsStr::new("-k"),
                OsStr::new("a"),
                OsStr::new("-c"),
                latin1("echo caf~"),
            ],
        ),
        (
            "--prefix",
            &[
                OsStr::new("--prefix"),
                latin1("caf~:"),
                OsStr::new("-k"),
                OsStr::new("a"),
                OsStr::new("-c"),
                OsStr::new("true"),
            ],
        ),
        (
            "--on-lost",
            &[
                OsStr::new("--on-lost"),
                latin1("echo caf~"),
                OsStr::new("-k"),
                OsStr::new("a"),
                OsStr::new("-c"),
                OsStr::new("true"),
            ],
        ),
    ];
    for (option, args) in cases {
        let out = run_with_timeout(redlock(&server.url()).args(args), T);
        assert_usage_names(&out, option);
    }
    assert_eq!(dbsize(&mut server.conn()), 0);
}

#[test]
fn durations_that_would_wrap_are_refused_before_redis() {
    let server = RedisServer::start();
    for args in [
        ["--ttl", "18446744073709552s"],
        ["--min-hold", "18446744073709552s"],
        ["--max-hold", "500000000y"],
        ["--refresh", "1ns"],
        ["--wait", "500000000y"],
        ["--random-delay", "500000000y"],
    ] {
        let out = run_with_timeout(
            redlock(&server.url())
                .args(["-k", "wrap"])
                .args(args)
                .args(["--", "true"]),
            LONG,
        );
        assert_eq!(out.code, Some(2), "{args:?}: {out:?}");
        assert!(out.stderr.contains(args[0]), "{args:?}: {}", out.stderr);
        assert_eq!(dbsize(&mut server.conn()), 0, "{args:?} touched Redis");
    }
}
