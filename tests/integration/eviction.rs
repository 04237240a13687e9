//! Unsuitable servers: one that may evict the lock's key (`maxmemory` set
//! with any `maxmemory-policy` but `noeviction`) is refused before anything
//! is written (exit 77, naming the policy and the fix), unless
//! `--allow-eviction` accepts the risk with a warning; and the risk is
//! real: another client's writes evict a running holder's lock.

use crate::common::*;

use std::time::Duration;

const LONG: Duration = Duration::from_secs(60);

#[test]
fn an_evicting_policy_is_refused_unless_allowed_and_noeviction_or_no_limit_runs() {
    let server = RedisServer::builder()
        .arg("--maxmemory")
        .arg("100mb")
        .arg("--maxmemory-policy")
        .arg("allkeys-lru")
        .start();
    let mut conn = server.conn();
    let dir = TestDir::new();
    let marker = dir.file("ran");
    let run = |extra: &[&str]| {
        run_with_timeout(
            redlock(&server.url())
                .args(["-k", "evict"])
                .args(extra)
                .args(["--", "touch"])
                .arg(&marker),
            LONG,
        )
    };

    for policy in [
        "allkeys-lru",
        "volatile-ttl",
        "allkeys-random",
        "volatile-lfu",
    ] {
        config_set(&mut conn, "maxmemory-policy", policy);
        let out = run(&[]);
        assert_eq!(out.code, Some(77), "{policy}: {out:?}");
        assert_eq!(out.stderr.lines().count(), 1, "one line: {out:?}");
        for needed in [policy, "maxmemory", "noeviction", "--allow-eviction"] {
            assert!(out.stderr.contains(needed), "{policy}: {needed}: {out:?}");
        }
        assert!(!marker.exists(), "{policy}: COMMAND ran");
        assert_eq!(dbsize(&mut conn), 0, "{policy}: written to Redis");
    }

    config_set(&mut conn, "maxmemory-policy", "allkeys-lru");
    let out = run(&["--allow-eviction"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(marker.exists(), "COMMAND ran with --allow-eviction");
    assert!(
        out.stderr.contains("WARNING") && out.stderr.contains("allkeys-lru"),
        "a warning says so: {out:?}"
    );
    let out = run(&["--allow-eviction", "--log-format", "json"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let event: serde_json::Value =
        serde_json::from_str(out.stderr.lines().next().unwrap_or("{}")).unwrap();
    assert_eq!(event["event"], "warning", "{out:?}");
    assert_eq!(event["level"], "warn", "{out:?}");

    config_set(&mut conn, "maxmemory-policy", "noeviction");
    let out = run(&[]);
    assert_eq!((out.code, out.stderr.as_str()), (Some(0), ""), "{out:?}");

    // maxmemory 0: no limit, nothing is ever evicted, whatever the policy.
    config_set(&mut conn, "maxmemory-policy", "allkeys-lru");
    config_set(&mut conn, "maxmemory", "0");
    let out = run(&[]);
    assert_eq!((out.code, out.stderr.as_str()), (Some(0), ""), "{out:?}");
}

#[test]
fn a_user_without_info_runs_with_a_warning_naming_the_permission() {
    let rules: Vec<String> = documented_acl_rules()
        .into_iter()
        .filter(|r| r != "+info")
        .collect();
    let server = RedisServer::builder()
        .acl_user("noinfo", "pw-noinfo", &rules.join(" "))
        .start();
    let url = server.url_with(Some("noinfo"), "pw-noinfo");
    let out = run_with_timeout(redlock(&url).args(["-k", "noinfo", "--", "true"]), LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "one warning: {out:?}");
    assert!(
        out.stderr.contains("+info") && out.stderr.contains("maxmemory-policy"),
        "{out:?}"
    );
    assert!(!out.stderr.contains("pw-noinfo"), "password printed");
}

#[test]
fn with_allow_eviction_another_clients_writes_can_evict_a_running_holders_lock() {
    // volatile-ttl evicts the keys closest to expiry first: the lock's.
    let server = RedisServer::builder()
        .arg("--maxmemory")
        .arg("4mb")
        .arg("--maxmemory-policy")
        .arg("volatile-ttl")
        .start();
    let dir = TestDir::new();
    let hold = Hold::named(&dir, "evicted");
    let mut holder = hold.spawn(
        &mut Job::new(&server.url(), "evicted")
            .args(["--allow-eviction", "--ttl", "30s"])
            .sh(hold.script("")),
        LONG,
    );
    let mut conn = server.conn();
    assert!(exists(&mut conn, "redlock:{evicted}"));
    // Another application's cache entries, with an hour's TTL each.
    let value = "x".repeat(10_000);
    let mut written = 0;
    while exists(&mut conn, "redlock:{evicted}") && written < 5_000 {
        let _: () = redis::cmd("SET")
            .arg(format!("cache-{written}"))
            .arg(&value)
            .arg("EX")
            .arg(3600)
            .query(&mut conn)
            .unwrap();
        written += 1;
    }
    assert!(
        !exists(&mut conn, "redlock:{evicted}"),
        "the lock survived {written} writes"
    );
    assert!(
        !holder.has_exited(),
        "the holder still runs without its lock"
    );
    // A second holder gets the lock while the first one's COMMAND runs.
    let out = run_with_timeout(
        redlock(&server.url()).args(["-k", "evicted", "-n", "--allow-eviction", "--", "true"]),
        LONG,
    );
    assert_eq!(out.code, Some(0), "a second holder ran: {out:?}");
    // The first learns at its next refresh.
    let out = holder.wait_timeout(LONG);
    assert_eq!(out.code, Some(70), "{out:?}");
}

#[test]
fn a_redlock_node_that_may_evict_does_not_count_and_the_run_says_so() {
    let evicting = RedisServer::builder()
        .arg("--maxmemory")
        .arg("100mb")
        .arg("--maxmemory-policy")
        .arg("volatile-lru")
        .start();
    let others = RedisServer::many(2);
    let mut cmd = redlock_bare();
    for server in [&evicting, &others[0], &others[1]] {
        cmd.args(["--redis", &server.url()]);
    }
    let out = run_with_timeout(cmd.args(["-k", "rl", "--", "true"]), LONG);
    assert_eq!(out.code, Some(0), "two good nodes of three: {out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "one warning: {out:?}");
    assert!(
        out.stderr.contains("volatile-lru") && out.stderr.contains(&evicting.port().to_string()),
        "{out:?}"
    );
    assert_eq!(
        dbsize(&mut evicting.conn()),
        0,
        "written to the evicting node"
    );
    // Two of three evicting: no majority, refused.
    let mut conn = others[0].conn();
    config_set(&mut conn, "maxmemory", "100mb");
    config_set(&mut conn, "maxmemory-policy", "allkeys-lru");
    let mut cmd = redlock_bare();
    for server in [&evicting, &others[0], &others[1]] {
        cmd.args(["--redis", &server.url()]);
    }
    let out = run_with_timeout(cmd.args(["-k", "rl2", "--", "true"]), LONG);
    assert_eq!(out.code, Some(77), "{out:?}");
}
