//! Least privilege: the ACL rules documented in the man page (REDIS
//! PERMISSIONS) are enough for the run mode and every subcommand, each of
//! them is needed, and a missing one is reported in one clear line.

use crate::common::*;

use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(30);

/// The documented rights that only a topology needs: behind sentinels
/// ROLE (the master is checked) and WAIT (`--replicas auto`); on a
/// Cluster PING and CLUSTER SLOTS (how redis-rs finds the slots).
const TOPOLOGY_ONLY: [(&str, &str); 4] = [
    ("+role", "sentinel"),
    ("+wait", "sentinel"),
    ("+ping", "cluster"),
    ("+cluster|slots", "cluster"),
];
/// Rights that save time, not needed for anything to work: each has a
/// test of its own showing what it saves.
const SPEED_ONLY: [&str; 1] = ["+evalsha"];
const PASS: &str = "s3cret-acl";

/// The rules with one permission (`+cmd`, `~keys` or `&channels`) left out.
fn without(rules: &[String], left_out: &str) -> String {
    rules
        .iter()
        .filter(|r| *r != left_out)
        .cloned()
        .collect::<Vec<_>>()
        .join(" ")
}

fn user_name(left_out: &str) -> String {
    match left_out.chars().next() {
        Some('~') => "without-keys".into(),
        Some('&') => "without-channels".into(),
        // `+pubsub|numsub`: no `|` in a URL's user name.
        _ => format!(
            "without-{}",
            left_out.trim_start_matches('+').replace('|', "-")
        ),
    }
}

/// One step of the scenario: what ran, what it should have exited with,
/// and what happened.
struct Step {
    name: &'static str,
    expected: i32,
    out: Output,
}

impl Step {
    /// Exit status as expected, and no sign of a refused command (a
    /// command refused inside a script says "can't run this command").
    fn clean(&self) -> bool {
        let stderr = self.out.stderr.to_lowercase();
        self.out.code == Some(self.expected)
            && !stderr.contains("permission")
            && !stderr.contains("grant the redis user")
            && !stderr.contains("polling instead")
            && !stderr.contains("already expired")
    }
}

/// Run mode (free and busy lock, waiting for a release) and every admin
/// subcommand, as `user`; locks are held by `holder_url` (full rights).
fn scenario(server: &RedisServer, user: &str, holder_url: &str) -> Vec<Step> {
    scenario_at(&server.url_with(Some(user), PASS), user, holder_url)
}

/// [`scenario`] through `url` (any topology); `user` names the keys.
fn scenario_at(url: &str, user: &str, holder_url: &str) -> Vec<Step> {
    let url = url.to_string();
    let dir = TestDir::new();
    let key = |what: &str| format!("{user}-{what}");
    let hold = |what: &str| {
        let hold = Hold::named(&dir, what);
        let child = hold.spawn(
            &mut Job::new(holder_url, &key(what)).sh(hold.script("")),
            TIMEOUT,
        );
        (child, hold)
    };
    let run = |args: &[&str]| run_with_timeout(redlock(&url).args(["-v"]).args(args), TIMEOUT);
    // Subcommand first: options go after its name.
    let admin = |args: &[&str]| {
        run_with_timeout(redlock_bare().args(args).args(["--redis", &url]), TIMEOUT)
    };
    let mut steps = Vec::new();
    let mut step = |name, expected, out| {
        steps.push(Step {
            name,
            expected,
            out,
        })
    };

    step("run", 0, run(&["-k", &key("run"), "--", "true"]));

    let (mut busy, stop) = hold("busy");
    step("busy", 75, run(&["-k", &key("busy"), "-n", "--", "true"]));
    step("status", 0, admin(&["status", &key("busy")]));
    let list = admin(&["list"]);
    let listed = list.stdout.contains(&key("busy"));
    step("list", if listed { 0 } else { -1 }, list);
    let mut waiter = waiting(&url, &key("busy"));
    stop.go();
    step("wait", 0, waiter.wait_timeout(TIMEOUT));
    busy.wait_timeout(TIMEOUT);

    // Hand-over: this user holds the lock while another job waits in line,
    // then its release wakes that job.
    let handover = Hold::named(&dir, "handover");
    let mut handing = spawn_piped(
        &mut Job::new(&url, &key("handover"))
            .args(["-v", "--ttl", "5s"])
            .sh(handover.script("")),
    );
    // Without some permission the holder cannot even start: that is the step.
    wait_until(TIMEOUT, || handover.started() || handing.has_exited());
    if handover.started() {
        let mut next = waiting(holder_url, &key("handover"));
        handover.go();
        step("hand-over", 0, handing.wait_timeout(TIMEOUT));
        next.wait_timeout(TIMEOUT);
    } else {
        step("hand-over", 0, handing.wait_timeout(TIMEOUT));
    }

    let (_forced, _stop) = hold("forced");
    step(
        "force-release",
        0,
        admin(&["force-release", &key("forced")]),
    );
    step("status of a free lock", 1, admin(&["status", &key("run")]));
    steps
}

/// A run of `key` that waits for it (or has already failed: a missing
/// permission may end it at once, and that is the step's result).
fn waiting(url: &str, key: &str) -> RunningChild {
    let mut run = spawn_piped(
        &mut Job::new(url, key)
            .args(["-v", "--wait", "20s"])
            .exec(["true"]),
    );
    assert!(
        wait_until(TIMEOUT, || run.stderr_now().contains("waiting")
            || run.has_exited()),
        "a run of {key} never waited"
    );
    run
}

fn describe(steps: &[Step]) -> String {
    steps
        .iter()
        .map(|s| {
            format!(
                "{}: exit {:?} (expected {}), stderr: {}",
                s.name,
                s.out.code,
                s.expected,
                s.out.stderr.trim()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn documented_acl_is_enough_for_everything() {
    let rules = documented_acl_rules().join(" ");
    let server = RedisServer::builder()
        .acl_user("redlock", PASS, &rules)
        .start();
    let steps = scenario(&server, "redlock", &server.url_with(Some("redlock"), PASS));
    assert!(
        steps.iter().all(Step::clean),
        "with `{rules}`:\n{}",
        describe(&steps)
    );
    let mut conn = server.conn();
    let fence = get(&mut conn, "redlock:{redlock-run}:fence");
    assert!(
        fence
            .and_then(|f| f.parse::<i64>().ok())
            .is_some_and(|f| f > 0),
        "the run step did not go through Redis"
    );
}

#[test]
fn every_documented_permission_is_needed() {
    let rules = documented_acl_rules();
    // Those for Sentinel and Cluster only are checked there.
    let permissions: Vec<&String> = rules
        .iter()
        .filter(|r| r.starts_with(['+', '~', '&']))
        .filter(|r| !TOPOLOGY_ONLY.iter().any(|(right, _)| r == right))
        .filter(|r| !SPEED_ONLY.contains(&r.as_str()))
        .collect();
    assert!(permissions.len() > 5, "{rules:?}");
    let mut builder = RedisServer::builder().acl_user("full", PASS, &rules.join(" "));
    for p in &permissions {
        builder = builder.acl_user(&user_name(p), PASS, &without(&rules, p));
    }
    let server = builder.start();
    let holder = server.url_with(Some("full"), PASS);
    let control = scenario(&server, "full", &holder);
    assert!(
        control.iter().all(Step::clean),
        "fails even with every documented permission:\n{}",
        describe(&control)
    );
    let mut unneeded = Vec::new();
    for p in &permissions {
        // A server whose script cache is cold (a restart): a script the
        // other users' runs left there would go by its digest alone.
        let _: String = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query(&mut server.conn())
            .expect("SCRIPT FLUSH");
        let steps = scenario(&server, &user_name(p), &holder);
        if steps.iter().all(Step::clean) {
            unneeded.push(format!("{p}:\n{}", describe(&steps)));
        }
    }
    assert!(
        unneeded.is_empty(),
        "documented but not needed:\n{}",
        unneeded.join("\n")
    );
}

#[test]
fn missing_permission_is_one_clear_line() {
    let rules = documented_acl_rules();
    let server = RedisServer::builder()
        .acl_user("noeval", PASS, &without(&rules, "+eval"))
        .acl_user("noincr", PASS, &without(&rules, "+incr"))
        .start();
    let dir = TestDir::new();
    let marker = dir.file("ran");
    for (user, names) in [("noeval", Some("eval")), ("noincr", None)] {
        let out = run_with_timeout(
            redlock(&server.url_with(Some(user), PASS))
                .args(["-k", "job", "--", "touch"])
                .arg(&marker),
            TIMEOUT,
        );
        assert_eq!(out.code, Some(77), "{user}: {}", out.stderr);
        assert_eq!(out.stderr.lines().count(), 1, "{user}: {}", out.stderr);
        let line = out.stderr.to_lowercase();
        assert!(line.contains("permission"), "{user}: {}", out.stderr);
        // Redis names a refused command, but not one refused inside a script.
        if let Some(command) = names {
            assert!(line.contains(command), "{user}: {}", out.stderr);
        }
        assert!(!out.stderr.contains(PASS), "password printed");
        assert!(!marker.exists(), "{user}: COMMAND ran without the lock");
    }
    // Whatever the failed script had done is undone.
    let mut conn = server.conn();
    assert!(!exists(&mut conn, "redlock:{job}"), "lock left behind");
}

/// The documented rules, given to `user` on the server behind `conn`
/// (every data node of a topology gets them: ACLs are not replicated).
fn grant(conn: &mut redis::Connection, user: &str, rules: &[String]) {
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER")
        .arg(user)
        .arg("on")
        .arg(format!(">{PASS}"));
    cmd.arg(rules);
    let _: () = cmd.query(conn).expect("ACL SETUSER");
}

/// `scheme://user:PASS@rest` from `scheme://rest`.
fn with_user(url: &str, user: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL");
    format!("{scheme}://{user}:{PASS}@{rest}")
}

/// The documented line works behind sentinels (the master found, checked
/// with ROLE, writes confirmed by a replica with WAIT: `--replicas auto`)
/// and on a Cluster (its slots read with CLUSTER SLOTS); doctor passes it
/// there too.
#[test]
fn documented_acl_is_enough_on_every_topology() {
    let rules = documented_acl_rules();
    let sentinels = SentinelSet::start();
    for port in sentinels.data_ports() {
        grant(&mut sentinels.data_conn(port), "redlock", &rules);
    }
    let cluster = Cluster::start();
    for port in cluster.ports() {
        grant(&mut cluster.conn(port), "redlock", &rules);
    }
    for (name, url) in [
        ("sentinel", with_user(&sentinels.url(), "redlock")),
        ("cluster", with_user(&cluster.url(), "redlock")),
    ] {
        let steps = scenario_at(&url, "redlock", &url);
        assert!(
            steps.iter().all(Step::clean),
            "{name}, with `{}`:\n{}",
            rules.join(" "),
            describe(&steps)
        );
        let out = run_with_timeout(redlock(&url).arg("doctor"), TIMEOUT);
        assert!(
            !out.stdout
                .lines()
                .any(|l| l.trim_start().starts_with("FAIL")),
            "{name}: {out:?}"
        );
    }
}

/// Each right only a topology needs is needed there: without it a run is
/// refused (77), and doctor FAILs `rights` naming exactly that right.
#[test]
fn every_topology_permission_is_needed_and_named_by_doctor() {
    let rules = documented_acl_rules();
    for (right, _) in TOPOLOGY_ONLY {
        assert!(rules.iter().any(|r| r == right), "{right} not documented");
    }
    let sentinels = SentinelSet::start();
    let cluster = Cluster::start();
    let users = |on: &'static str| TOPOLOGY_ONLY.iter().filter(move |(_, t)| *t == on);
    for port in sentinels.data_ports() {
        for (right, _) in users("sentinel") {
            grant(
                &mut sentinels.data_conn(port),
                &user_name(right),
                &without_one(&rules, right),
            );
        }
    }
    for port in cluster.ports() {
        for (right, _) in users("cluster") {
            grant(
                &mut cluster.conn(port),
                &user_name(right),
                &without_one(&rules, right),
            );
        }
    }
    for (right, on) in TOPOLOGY_ONLY {
        let base = match on {
            "sentinel" => sentinels.url(),
            _ => cluster.url(),
        };
        let url = with_user(&base, &user_name(right));
        let out = run_with_timeout(redlock(&url).args(["-k", "x", "--", "true"]), TIMEOUT);
        assert_eq!(out.code, Some(77), "{right} on {on}: {out:?}");
        let out = run_with_timeout(redlock(&url).arg("doctor"), TIMEOUT);
        assert_eq!(out.code, Some(78), "{right} on {on}: {out:?}");
        let name = right.trim_start_matches('+');
        let exactly = format!("may not run: {name} (");
        assert!(
            out.stdout
                .lines()
                .any(|l| l.trim_start().starts_with("FAIL  rights") && l.contains(&exactly)),
            "{right} on {on}: {out:?}"
        );
    }
}

/// The documented rules without `right`, as separate rules.
fn without_one(rules: &[String], right: &str) -> Vec<String> {
    rules.iter().filter(|r| *r != right).cloned().collect()
}

/// `+evalsha` saves a run the scripts' text: with the documented rules a
/// second run sends none (each script by its digest); without `+evalsha`
/// a run still takes and frees the lock, its scripts then sent whole after
/// the one refused EVALSHA (each run pays that round trip once per node).
#[test]
fn evalsha_is_documented_for_speed_and_its_lack_costs_only_time() {
    let rules = documented_acl_rules();
    for right in SPEED_ONLY {
        assert!(rules.iter().any(|r| r == right), "{right} not documented");
    }
    let server = RedisServer::builder()
        .acl_user("full", PASS, &rules.join(" "))
        .acl_user("noevalsha", PASS, &without(&rules, "+evalsha"))
        .start();
    let run = |user: &str| {
        let url = server.url_with(Some(user), PASS);
        let out = run_with_timeout(redlock(&url).args(["-k", "digest", "--", "true"]), TIMEOUT);
        assert_eq!(out.code, Some(0), "{user}: {out:?}");
        assert!(out.stderr.is_empty(), "{user}: {out:?}");
        assert!(!exists(&mut server.conn(), "redlock:{digest}"), "released");
    };
    run("full");
    let texts = server.calls_of("eval");
    run("full");
    assert_eq!(server.calls_of("eval"), texts, "no text the second time");
    for _ in 0..2 {
        let before = server.calls_of("eval");
        run("noevalsha");
        assert_eq!(
            server.calls_of("eval"),
            before + 2,
            "acquire and release, whole"
        );
    }
}
