//! Password-protected servers (requirepass, ACL user): everything works
//! with the right password; with a wrong one every subcommand exits 77 and
//! no password is ever printed.

use crate::common::*;

use std::process::Command;
use std::time::Duration;

const T: Duration = Duration::from_secs(20);
/// The timeout of the tests that came from the run-mode modules.
const LONG: Duration = Duration::from_secs(30);

/// Characters that URL-encoding changes, so both forms must stay hidden.
const PASSWORD: &str = "s3cret-p@ss:w/rd%";
const WRONG: &str = "Wr0ng-p@ssword";
const ALICE: &str = "al1ce-pa55word";

/// The password as it appears percent-encoded in a URL.
fn encoded(password: &str) -> String {
    password
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn assert_hidden(out: &Output, secrets: &[&str], what: &str) {
    for secret in secrets {
        assert!(
            !out.stdout.contains(secret) && !out.stderr.contains(secret),
            "{what}: password {secret:?} printed: {out:?}"
        );
    }
}

/// run, status, list and force-release with the right credentials.
fn everything_works(url: &str, secrets: &[&str]) {
    let dir = TestDir::new();
    let marker = dir.file("started");
    let mut holder = spawn_piped(
        redlock(url)
            .args(["-v", "-k", "job", "--ttl", "1s", "--", "sh", "-c"])
            .arg("touch \"$1\"; exec sleep 60")
            .arg("sh")
            .arg(&marker),
    );
    assert!(wait_for_file(&marker, T), "{:?}", holder.stderr_now());

    let out = run_with_timeout(redlock(url).args(["-v", "status", "job"]), T);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.starts_with("job  held by "), "{out:?}");
    assert_hidden(&out, secrets, "status");

    let out = run_with_timeout(redlock(url).args(["-v", "list", "--json"]), T);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.contains(r#""key":"job""#), "{out:?}");
    assert_hidden(&out, secrets, "list");

    let out = run_with_timeout(redlock(url).args(["-v", "force-release", "job"]), T);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_hidden(&out, secrets, "force-release");

    let out = holder.wait_timeout(T);
    assert_eq!(out.code, Some(70), "{out:?}");
    assert_hidden(&out, secrets, "run");

    let out = run_with_timeout(redlock(url).args(["-v", "-k", "job", "--", "true"]), T);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_hidden(&out, secrets, "run");
}

/// Every subcommand, quiet, normal and verbose: exit 77 (Redis refused
/// us: waiting will not help), a clear message, no password.
fn everything_refused(url: &str, secrets: &[&str], expected: &str) {
    let cases: [&[&str]; 4] = [
        &["-k", "job", "--", "true"],
        &["status", "job"],
        &["list"],
        &["force-release", "job"],
    ];
    for args in cases {
        for verbosity in [None, Some("-v"), Some("-q")] {
            let mut cmd: Command = redlock(url);
            cmd.args(verbosity).args(args);
            let out = run_with_timeout(&mut cmd, T);
            let what = format!("{verbosity:?} {args:?}");
            assert_eq!(out.code, Some(77), "{what}: {out:?}");
            assert_eq!(out.stdout, "", "{what}");
            assert!(out.stderr.contains(expected), "{what}: {out:?}");
            assert_eq!(out.stderr.lines().count(), 1, "{what}: {out:?}");
            assert_hidden(&out, secrets, &what);
        }
    }
}

#[test]
fn requirepass_server_with_the_right_password() {
    let server = RedisServer::builder().requirepass(PASSWORD).start();
    let url = server.url_with(None, PASSWORD);
    everything_works(&url, &[PASSWORD, &encoded(PASSWORD)]);
    assert!(exists(&mut server.conn(), "redlock:{job}:fence"));
}

#[test]
fn requirepass_server_with_a_wrong_or_missing_password() {
    let server = RedisServer::builder().requirepass(PASSWORD).start();
    let secrets = [PASSWORD, WRONG, &encoded(PASSWORD), &encoded(WRONG)];
    everything_refused(
        &server.url_with(None, WRONG),
        &secrets,
        "authentication failed",
    );
    everything_refused(&server.url(), &secrets, "authentication required");
    assert_eq!(dbsize(&mut server.conn()), 0);
}

#[test]
fn acl_user_with_the_right_password() {
    let server = RedisServer::builder()
        .acl_user("alice", ALICE, "~* &* +@all")
        .start();
    everything_works(&server.url_with(Some("alice"), ALICE), &[ALICE]);
}

#[test]
fn acl_user_with_a_wrong_password_or_unknown_user() {
    let server = RedisServer::builder()
        .acl_user("alice", ALICE, "~* &* +@all")
        .start();
    let secrets = [ALICE, WRONG, &encoded(WRONG)];
    everything_refused(
        &server.url_with(Some("alice"), WRONG),
        &secrets,
        "authentication failed",
    );
    everything_refused(
        &server.url_with(Some("mallory"), ALICE),
        &secrets,
        "authentication failed",
    );
    assert_eq!(dbsize(&mut server.conn()), 0);
}

/// `ACL SETUSER` on each of `ports`: users beside the open default user,
/// so that the topology's own links keep working.
fn acl_users(ports: &[u16], conn: impl Fn(u16) -> redis::Connection) {
    for &port in ports {
        let mut conn = conn(port);
        for rules in [
            &["alice", "on", ">al1ce-pa55word", "~*", "&*", "+@all"][..],
            &["weak", "on", ">we4k-pa55word", "+@connection"][..],
        ] {
            redis::cmd("ACL")
                .arg("SETUSER")
                .arg(rules)
                .exec(&mut conn)
                .unwrap();
        }
    }
}

/// With the URL's credentials wrong or short of a right, a run is refused
/// (77), never "unavailable" (69), so `--on-unavailable run` never runs
/// COMMAND without the lock.
fn refused_not_unavailable(url_with: impl Fn(&str) -> String) {
    let dir = TestDir::new();
    for (userinfo, expected) in [
        (format!("alice:{WRONG}@"), "authentication failed"),
        ("weak:we4k-pa55word@".to_string(), "permission"),
    ] {
        let url = url_with(&userinfo);
        let mut cmd = redlock(&url);
        cmd.args(["-k", "refused", "--on-unavailable", "run", "--", "touch"])
            .arg(dir.file("ran"));
        let out = run_with_timeout(&mut cmd, T);
        assert_eq!(out.code, Some(77), "{userinfo}: {out:?}");
        assert!(out.stderr.contains(expected), "{userinfo}: {out:?}");
        assert!(
            !dir.file("ran").exists(),
            "{userinfo}: COMMAND ran unlocked"
        );
        assert_hidden(&out, &[WRONG, "we4k-pa55word"], &userinfo);
        for args in [&["status", "refused"][..], &["list"]] {
            let out = run_with_timeout(redlock(&url).args(args), T);
            assert_eq!(out.code, Some(77), "{userinfo} {args:?}: {out:?}");
        }
    }
}

#[test]
fn a_cluster_that_refuses_the_credentials_is_refused_not_unavailable() {
    let cluster = Cluster::start();
    acl_users(&cluster.ports(), |port| cluster.conn(port));
    let url = cluster.url();
    refused_not_unavailable(|userinfo| url.replacen("://", &format!("://{userinfo}"), 1));
    let right = url.replacen("://", &format!("://alice:{ALICE}@"), 1);
    let out = run_with_timeout(redlock(&right).args(["-k", "refused", "--", "true"]), T);
    assert_eq!(out.code, Some(0), "{out:?}");
}

#[test]
fn data_nodes_behind_sentinels_that_refuse_the_credentials_are_refused_not_unavailable() {
    let set = SentinelSet::start();
    acl_users(&set.data_ports(), |port| set.data_conn(port));
    let url = set.url();
    refused_not_unavailable(|userinfo| url.replacen("://", &format!("://{userinfo}"), 1));
    let right = url.replacen("://", &format!("://alice:{ALICE}@"), 1);
    let out = run_with_timeout(redlock(&right).args(["-k", "refused", "--", "true"]), T);
    assert_eq!(out.code, Some(0), "{out:?}");
}

/// A generated password as it often is: base64's `/` and `+`, with a `?`
/// and an `@`, none of them percent-encoded in the URL.
const RAW: &str = "Zm9v/YmFy+cXV4?eD@1";

#[test]
fn a_password_with_slash_question_mark_or_plus_needs_no_encoding_and_is_never_printed() {
    let server = RedisServer::builder().requirepass(RAW).start();
    let url = format!("redis://:{RAW}@127.0.0.1:{}", server.port());
    let out = run_with_timeout(redlock(&url).args(["-v", "-k", "raw", "--", "true"]), T);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_hidden(&out, &[RAW], "run");

    // A mistake elsewhere in such a URL, from --redis or the environment.
    let bad = format!("redis://:{RAW}@127.0.0.1:99999/0");
    let out = run_with_timeout(redlock(&bad).args(["-k", "raw", "--", "true"]), T);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("--redis"), "{out:?}");
    let mut cmd = redlock_bare();
    cmd.env("REDLOCK_REDIS_URL", &bad).args(["status", "raw"]);
    let out = run_with_timeout(&mut cmd, T);
    assert_eq!(out.code, Some(2), "{out:?}");
    for secret in [RAW, "Zm9v", "cXV4", "eD@1"] {
        assert!(!out.stderr.contains(secret), "{secret} printed: {out:?}");
    }
}

#[test]
fn a_sentinel_password_is_read_as_the_user_info_password_is_and_never_printed() {
    let mut set = SentinelSet::start();
    for i in 0..3 {
        let mut conn = set.sentinel(i).conn();
        redis::cmd("ACL")
            .arg(&["SETUSER", "watcher", "on", &format!(">{RAW}"), "+@all"])
            .exec(&mut conn)
            .unwrap();
    }
    // The password raw (a `+` is a `+`, as in the user-info), the
    // option's name percent-encoded.
    let url = format!(
        "{}?sentinel_username=watcher&sentinel%5Fpassword={}",
        set.url(),
        RAW.replace('@', "%40")
    );
    let out = run_with_timeout(redlock(&url).args(["-v", "-k", "snt", "--", "true"]), T);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_hidden(&out, &[RAW, "Zm9v"], "run");
    let out = run_with_timeout(redlock(&url).args(["-v", "status", "snt"]), T);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert_hidden(&out, &[RAW, "Zm9v"], "status");

    // Given twice: a usage error that shows neither.
    let twice = format!("{url}&sentinel_password=0ther-secret");
    let out = run_with_timeout(redlock(&twice).args(["-k", "snt", "--", "true"]), T);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert_hidden(&out, &[RAW, "Zm9v", "0ther-secret"], "twice");
}

#[test]
fn a_password_file_keeps_the_secret_out_of_the_jobs_environment_and_nested_runs_work() {
    let server = RedisServer::builder().requirepass(PASSWORD).start();
    let dir = TestDir::new();
    let file = dir.file("redis.pass");
    std::fs::write(&file, format!("{PASSWORD}\n")).unwrap();
    // The URL without a password in the environment, the file's path
    // beside it: a nested run of the same key and one of another key
    // inherit both, and authenticate.
    let script = format!(
        "env > \"$0\"; cat /proc/$PPID/cmdline /proc/$PPID/environ >> \"$0\"; \
         {bin} -k pf -- true && {bin} -k other -- true",
        bin = bin()
    );
    let mut cmd = redlock_bare();
    cmd.env("REDLOCK_REDIS_URL", server.url())
        .env("REDLOCK_PASSWORD_FILE", &file)
        .args(["-v", "-k", "pf", "--", "sh", "-c", &script])
        .arg(dir.file("seen"));
    let out = run_with_timeout(&mut cmd, T);
    assert_eq!(out.code, Some(0), "{out:?}");
    let seen = dir.read("seen").unwrap();
    assert!(seen.contains("REDLOCK_PASSWORD_FILE="), "{seen}");
    assert!(!seen.contains(PASSWORD), "the job saw the password: {seen}");
    assert_hidden(&out, &[PASSWORD], "run");
    assert!(exists(&mut server.conn(), "redlock:{other}:fence"));

    // --password-file on the command line works the same.
    let out = run_with_timeout(
        redlock(&server.url())
            .arg("--password-file")
            .arg(&file)
            .args(["status", "pf"]),
        T,
    );
    assert_eq!(out.code, Some(1), "{out:?}");
}

#[test]
fn a_password_file_that_is_not_a_small_regular_file_is_refused_at_once() {
    let server = RedisServer::builder().requirepass(PASSWORD).start();
    let dir = TestDir::new();
    let fifo = dir.file("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let empty = dir.file("empty");
    std::fs::write(&empty, "\n").unwrap();
    for file in [
        fifo.as_path(),
        std::path::Path::new("/dev/zero"),
        &empty,
        &dir.file("missing"),
    ] {
        let out = run_with_timeout(
            redlock(&server.url())
                .arg("--password-file")
                .arg(file)
                .args(["-k", "pf", "--", "true"]),
            T,
        );
        assert_eq!(out.code, Some(2), "{file:?}: {out:?}");
        assert!(out.stderr.contains("--password-file"), "{out:?}");
    }
    assert_eq!(dbsize(&mut server.conn()), 0);
}

#[test]
fn the_holder_record_never_stores_a_url_password() {
    let server = RedisServer::builder().requirepass("rec0rd-pw").start();
    let url = server.url_with(None, "rec0rd-pw");
    let dir = TestDir::new();
    let script = format!(
        "touch '{s}'; while [ ! -e '{go}' ]; do sleep 0.02; done; : redis://app:other-secret@db:6380/0 {url}",
        s = dir.file("started").display(),
        go = dir.file("go").display(),
    );
    let mut run = spawn_piped(&mut job_at(&url, "rec", &script));
    assert!(wait_for_file(dir.file("started"), LONG));
    let record = hgetall(&mut server.conn(), "redlock:{rec}:holder");
    let command = &record["command"];
    assert!(command.contains("redis://app:***@db:6380/0"), "{command}");
    assert!(
        !command.contains("other-secret") && !command.contains("rec0rd-pw"),
        "{command}"
    );
    let status = run_with_timeout(redlock(&url).args(["status", "rec"]), LONG);
    assert!(!status.stdout.contains("rec0rd-pw"), "{status:?}");
    std::fs::write(dir.file("go"), "").unwrap();
    assert_eq!(run.wait_timeout(LONG).code, Some(0));
}

fn job_at(url: &str, key: &str, script: &str) -> Command {
    let mut cmd = redlock(url);
    cmd.args(["--key", key, "--", "sh", "-c", script]);
    cmd
}
