//! Several keys, all or nothing (`-k A -k B`): COMMAND runs only while
//! every key is held, they are released together, two runs asking for
//! the same keys in opposite orders never deadlock, a busy key gives back
//! the others, and any key lost is the lock lost (exit 70). On one
//! server, a Cluster whose keys live on different primaries, and a
//! Redlock quorum with a node down.

use std::process::Command;
use std::time::Duration;

use crate::common::*;

const LONG: Duration = Duration::from_secs(60);

/// The Redis key of KEY's lock under the default prefix.
fn lock(key: &str) -> String {
    format!("redlock:{{{key}}}")
}

/// A run of `keys` (each as `-k KEY`) on `base`, with `extra` options.
fn keys_run(mut base: Command, keys: &[&str], extra: &[&str]) -> Command {
    for key in keys {
        base.args(["-k", key]);
    }
    base.args(extra);
    base
}

/// `sh` text that writes COMMAND's REDLOCK_* variables into `dir`, one
/// file each, before `then`.
fn record_env(dir: &TestDir, then: &str) -> String {
    let vars = ["KEY", "TOKEN", "FENCE", "KEYS", "TOKENS", "FENCES"];
    let writes: Vec<String> = vars
        .iter()
        .map(|v| format!("printf '%s' \"$REDLOCK_{v}\" > '{}'", dir.file(v).display()))
        .collect();
    format!("{}; {then}", writes.join("; "))
}

/// The lines of what `record_env` wrote for `var`.
fn lines(dir: &TestDir, var: &str) -> Vec<String> {
    let text = dir.read(var).unwrap_or_else(|| panic!("{var} not written"));
    text.lines().map(str::to_string).collect()
}

/// A single-key run of `key` that holds it until `hold` lets it go.
fn single_holder(server: &RedisServer, key: &str, hold: &Hold) -> RunningChild {
    hold.spawn(&mut server.job(key).sh(hold.script("")), LONG)
}

#[test]
fn every_key_is_held_while_command_runs_and_all_are_released_at_exit() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let hold = Hold::new(&dir);
    let mut cmd = keys_run(redlock(&server.url()), &["mk-b", "mk-a", "mk-b"], &["--"]);
    cmd.args(["sh", "-c", &record_env(&dir, &hold.script("exit 3"))]);
    let mut run = hold.spawn(&mut cmd, LONG);
    // Sorted, without the repeat: the first key has the singular names.
    assert_eq!(lines(&dir, "KEYS"), ["mk-a", "mk-b"]);
    assert_eq!(lines(&dir, "KEY"), ["mk-a"]);
    let tokens = lines(&dir, "TOKENS");
    let fences = lines(&dir, "FENCES");
    assert_eq!(
        (tokens.len(), fences.len()),
        (2, 2),
        "{tokens:?} {fences:?}"
    );
    assert_eq!(lines(&dir, "TOKEN"), tokens[..1]);
    assert_eq!(lines(&dir, "FENCE"), fences[..1]);
    let mut conn = server.conn();
    for (key, token) in ["mk-a", "mk-b"].iter().zip(&tokens) {
        assert_eq!(get(&mut conn, &lock(key)).as_ref(), Some(token), "{key}");
        let holder = hgetall(&mut conn, &format!("{}:holder", lock(key)));
        assert_eq!(holder.get("token"), Some(token), "{key}: {holder:?}");
        assert!(pttl(&mut conn, &lock(key)) > 0, "{key}");
    }
    hold.go();
    let out = run.wait_timeout(LONG);
    assert_eq!(out.code, Some(3), "COMMAND's own code: {out:?}");
    for key in ["mk-a", "mk-b"] {
        assert!(!exists(&mut conn, &lock(key)), "{key} released: {out:?}");
        assert!(
            !exists(&mut conn, &format!("{}:holder", lock(key))),
            "{key}"
        );
    }
}

#[test]
fn a_busy_key_in_either_place_is_75_with_n_and_leaves_the_other_key_alone() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut conn = server.conn();
    for (held, other) in [("mk-a", "mk-b"), ("mk-b", "mk-a")] {
        let hold = Hold::named(&dir, held);
        let mut holder = single_holder(&server, held, &hold);
        for order in [[held, other], [other, held]] {
            let ran = dir.file("ran");
            let mut cmd = keys_run(redlock(&server.url()), &order, &["-n", "--", "touch"]);
            let out = run_with_timeout(cmd.arg(&ran), LONG);
            assert_eq!(out.code, Some(75), "{order:?}: {out:?}");
            assert!(!ran.exists(), "COMMAND ran: {order:?}");
            assert!(
                out.stderr.contains(&format!("lock '{held}' is held by")),
                "{out:?}"
            );
            assert!(
                !exists(&mut conn, &lock(other)),
                "{order:?}: {other} left taken"
            );
            assert!(
                !exists(&mut conn, &format!("{}:holder", lock(other))),
                "{order:?}"
            );
        }
        hold.go();
        assert_eq!(holder.wait_timeout(LONG).code, Some(0));
    }
}

#[test]
fn two_runs_asking_for_the_same_keys_in_opposite_orders_both_complete() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    // Each key held by a run of its own, given back one after the other:
    // runs that took the keys in the order given would each get one, and
    // wait for the other's.
    let holds = [Hold::named(&dir, "a"), Hold::named(&dir, "b")];
    let mut holders: Vec<RunningChild> = ["mk-a", "mk-b"]
        .iter()
        .zip(&holds)
        .map(|(key, hold)| single_holder(&server, key, hold))
        .collect();
    let log = dir.file("sections");
    let section = section_script(&log, "0.3");
    let mut runs: Vec<RunningChild> = [["mk-a", "mk-b"], ["mk-b", "mk-a"]]
        .iter()
        .enumerate()
        .map(|(w, order)| {
            let mut cmd = keys_run(
                redlock(&server.url()),
                order,
                &["-v", "--wait", "30s", "--", "sh", "-c"],
            );
            cmd.arg(&section).env("W", w.to_string());
            spawn_waiting(&mut cmd, LONG)
        })
        .collect();
    holds[0].go();
    let took_a = |runs: &[RunningChild]| {
        runs.iter()
            .any(|r| r.stderr_now().contains("acquired lock 'mk-a'"))
    };
    assert!(wait_until(LONG, || took_a(&runs)), "nobody took mk-a");
    holds[1].go();
    for holder in &mut holders {
        assert_eq!(holder.wait_timeout(LONG).code, Some(0));
    }
    for run in &mut runs {
        let out = run.wait_timeout(LONG);
        assert_eq!(out.code, Some(0), "deadlocked? {out:?}");
    }
    assert_eq!(sections_in(&log), (2, 1), "one at a time, both ran");
}

#[test]
fn a_run_waiting_for_its_second_key_keeps_the_first_and_blocks_its_users() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let hold = Hold::named(&dir, "b");
    let mut holder = single_holder(&server, "mk-b", &hold);
    let ran = dir.file("ran");
    let mut cmd = keys_run(
        redlock(&server.url()),
        &["mk-b", "mk-a"],
        &["-v", "--ttl", "1s", "--"],
    );
    cmd.args(["touch"]).arg(&ran);
    let mut run = spawn_waiting(&mut cmd, LONG);
    // Refreshed while it waits, past its TTL: still its own.
    let refreshed = |n: usize| run.stderr_now().matches("refreshed lock 'mk-a'").count() >= n;
    assert!(wait_until(LONG, || refreshed(6)), "{}", run.stderr_now());
    let mut conn = server.conn();
    let holder_pid = hgetall(&mut conn, &format!("{}:holder", lock("mk-a")));
    assert_eq!(
        holder_pid.get("pid"),
        Some(&run.pid().to_string()),
        "{holder_pid:?}"
    );
    // A run of that key alone finds it busy.
    let out = run_with_timeout(&mut server.job("mk-a").args(["-n"]).exec(["true"]), LONG);
    assert_eq!(out.code, Some(75), "{out:?}");
    assert!(!ran.exists(), "COMMAND ran with one key of two");
    hold.go();
    assert_eq!(holder.wait_timeout(LONG).code, Some(0));
    let out = run.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(ran.exists());
    assert!(!exists(&mut conn, &lock("mk-a")) && !exists(&mut conn, &lock("mk-b")));
}

#[test]
fn any_key_lost_stops_the_job_with_70_and_gives_back_the_others() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let mut conn = server.conn();
    for (i, lose) in ["delete", "force-release"].iter().enumerate() {
        let hold = Hold::named(&dir, lose);
        let mut cmd = keys_run(
            redlock(&server.url()),
            &["mk-a", "mk-b"],
            &["--ttl", "5s", "--"],
        );
        cmd.args(["sh", "-c", &hold.script("sleep 60")]);
        let mut run = hold.spawn(&mut cmd, LONG);
        // The second key one time, the first the next.
        let (lost, kept) = [("mk-b", "mk-a"), ("mk-a", "mk-b")][i];
        match *lose {
            "delete" => redis::cmd("DEL")
                .arg(lock(lost))
                .query::<()>(&mut conn)
                .unwrap(),
            _ => {
                let out =
                    run_with_timeout(redlock(&server.url()).args(["force-release", lost]), LONG);
                assert_eq!(out.code, Some(0), "{out:?}");
            }
        }
        let out = run.wait_timeout(LONG);
        assert_eq!(out.code, Some(70), "{lose}: {out:?}");
        assert!(out.stderr.contains(&format!("lock '{lost}'")), "{out:?}");
        assert!(
            !exists(&mut conn, &lock(kept)),
            "{lose}: {kept} given back: {out:?}"
        );
        assert!(!exists(&mut conn, &lock(lost)), "{lose}: {lost}");
    }
}

#[test]
fn nested_runs_take_all_their_keys_from_the_outer_run_or_none() {
    let server = RedisServer::start();
    let url = server.url();
    let rr = format!("{} --redis {url}", bin());
    let inner = "$RR -n -k mk-b -- true; echo one=$?; \
                 $RR -n -k mk-b -k mk-a -- true; echo both=$?; \
                 $RR -n -k mk-a -k mk-c -- true; echo some=$?";
    let mut cmd = keys_run(redlock(&url), &["mk-a", "mk-b"], &["--", "sh", "-c", inner]);
    let out = run_with_timeout(cmd.env("RR", rr), LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    for said in ["one=0", "both=0", "some=2"] {
        assert!(out.stdout.contains(said), "{said}: {out:?}");
    }
    assert!(out.stderr.contains("'mk-c' is not"), "{}", out.stderr);
    assert!(
        !exists(&mut server.conn(), &lock("mk-c")),
        "the refused run took nothing"
    );
}

#[test]
fn several_keys_with_a_semaphore_or_a_newest_first_line_are_refused() {
    let server = RedisServer::start();
    for extra in [
        &["--limit", "2"][..],
        &["--queue", "newest-first"],
        &["--queue", "newest-wins"],
        &["--shared"],
        &["--replace-running"],
    ] {
        let mut cmd = keys_run(redlock(&server.url()), &["mk-a", "mk-b"], extra);
        let out = run_with_timeout(cmd.args(["--", "true"]), LONG);
        assert_eq!(out.code, Some(2), "{extra:?}: {out:?}");
        let first = out.stderr.lines().next().unwrap_or_default();
        assert!(
            first.contains(extra[0]) && first.contains("several --key"),
            "{out:?}"
        );
    }
    // A shared run replaces nobody.
    let mut cmd = keys_run(
        redlock(&server.url()),
        &["mk-a"],
        &["--shared", "--replace-running"],
    );
    let out = run_with_timeout(cmd.args(["--", "true"]), LONG);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("--replace-running"), "{out:?}");
    assert_eq!(
        dbsize(&mut server.conn()),
        0,
        "the refused runs wrote nothing"
    );
    // One key, twice, is one key: --limit is fine.
    let mut cmd = keys_run(redlock(&server.url()), &["mk-a", "mk-a"], &["--limit", "2"]);
    let out = run_with_timeout(cmd.args(["--", "true"]), LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
}

#[test]
fn keys_on_different_cluster_primaries_are_held_all_or_none() {
    let cluster = Cluster::start();
    // Two keys whose slots have different primaries.
    let names: Vec<String> = (0..64).map(|i| format!("mk-{i}")).collect();
    let primary = |k: &str| cluster.primary_for_slot(cluster.slot_of(&lock(k)));
    let first = &names[0];
    let second = names
        .iter()
        .find(|k| primary(k) != primary(first))
        .expect("keys on two primaries");
    let (a, b) = match first < second {
        true => (first.as_str(), second.as_str()),
        false => (second.as_str(), first.as_str()),
    };
    let dir = TestDir::new();
    let hold = Hold::new(&dir);
    let mut cmd = keys_run(redlock(&cluster.url()), &[b, a], &["--"]);
    cmd.args(["sh", "-c", &record_env(&dir, &hold.script(""))]);
    let mut run = hold.spawn(&mut cmd, LONG);
    let tokens = lines(&dir, "TOKENS");
    for (key, token) in [a, b].iter().zip(&tokens) {
        let mut owner = cluster.conn(primary(key));
        assert_eq!(get(&mut owner, &lock(key)).as_ref(), Some(token), "{key}");
    }
    // Busy on either key: 75, and nothing taken on the other primary.
    for order in [[a, b], [b, a]] {
        let mut cmd = keys_run(redlock(&cluster.url()), &order, &["-n", "--", "true"]);
        let out = run_with_timeout(&mut cmd, LONG);
        assert_eq!(out.code, Some(75), "{out:?}");
    }
    hold.go();
    assert_eq!(run.wait_timeout(LONG).code, Some(0));
    for key in [a, b] {
        assert!(
            !exists(&mut cluster.conn(primary(key)), &lock(key)),
            "{key}"
        );
    }
    // The second key busy (a run of it alone): nothing left on the first
    // key's primary.
    let second = Hold::named(&dir, "second");
    let mut job = Job::new(&cluster.url(), b).sh(second.script(""));
    let mut holder = second.spawn(&mut job, LONG);
    let mut cmd = keys_run(redlock(&cluster.url()), &[a, b], &["-n", "--", "true"]);
    assert_eq!(run_with_timeout(&mut cmd, LONG).code, Some(75));
    assert!(
        !exists(&mut cluster.conn(primary(a)), &lock(a)),
        "{a} left taken"
    );
    second.go();
    assert_eq!(holder.wait_timeout(LONG).code, Some(0));
    // A run that loses its second key stops with 70 and gives back the first.
    let hold = Hold::named(&dir, "lose");
    let mut cmd = keys_run(redlock(&cluster.url()), &[a, b], &["--"]);
    cmd.args(["sh", "-c", &hold.script("sleep 60")]);
    let mut run = hold.spawn(&mut cmd, LONG);
    redis::cmd("DEL")
        .arg(lock(b))
        .query::<()>(&mut cluster.conn(primary(b)))
        .unwrap();
    assert_eq!(run.wait_timeout(LONG).code, Some(70));
    assert!(
        !exists(&mut cluster.conn(primary(a)), &lock(a)),
        "{a} given back"
    );
}

#[test]
fn a_redlock_quorum_with_a_node_down_holds_every_key_on_a_majority() {
    let mut servers = RedisServer::many(3);
    servers[2].kill();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let dir = TestDir::new();
    let hold = Hold::new(&dir);
    let mut cmd = keys_run(redlock_on(&urls), &["mk-b", "mk-a"], &["--"]);
    cmd.args(["sh", "-c", &record_env(&dir, &hold.script(""))]);
    let mut run = hold.spawn(&mut cmd, LONG);
    let tokens = lines(&dir, "TOKENS");
    for (key, token) in ["mk-a", "mk-b"].iter().zip(&tokens) {
        for server in &servers[..2] {
            assert_eq!(
                get(&mut server.conn(), &lock(key)).as_ref(),
                Some(token),
                "{key}"
            );
        }
    }
    for order in [["mk-a", "mk-b"], ["mk-b", "mk-a"]] {
        let mut cmd = keys_run(redlock_on(&urls), &order, &["-n", "--", "true"]);
        assert_eq!(run_with_timeout(&mut cmd, LONG).code, Some(75));
    }
    hold.go();
    assert_eq!(run.wait_timeout(LONG).code, Some(0));
    for server in &servers[..2] {
        for key in ["mk-a", "mk-b"] {
            assert!(!exists(&mut server.conn(), &lock(key)), "{key}");
        }
    }
    // The second key busy: the first is given back on every node.
    let second = Hold::named(&dir, "second");
    let mut job = Job::using(redlock_on(&urls), "mk-b").sh(second.script(""));
    let mut holder = second.spawn(&mut job, LONG);
    let mut cmd = keys_run(redlock_on(&urls), &["mk-a", "mk-b"], &["-n", "--", "true"]);
    assert_eq!(run_with_timeout(&mut cmd, LONG).code, Some(75));
    for server in &servers[..2] {
        assert!(
            !exists(&mut server.conn(), &lock("mk-a")),
            "mk-a left taken"
        );
    }
    second.go();
    assert_eq!(holder.wait_timeout(LONG).code, Some(0));
}

#[test]
fn a_first_key_force_released_while_the_run_waits_for_the_next_is_70_and_nothing_runs() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let hold = Hold::named(&dir, "b");
    let mut holder = single_holder(&server, "mk-b", &hold);
    let ran = dir.file("ran");
    let mut cmd = keys_run(redlock(&server.url()), &["mk-a", "mk-b"], &["-v", "--"]);
    cmd.args(["touch"]).arg(&ran);
    let mut run = spawn_waiting(&mut cmd, LONG);
    let out = run_with_timeout(redlock(&server.url()).args(["force-release", "mk-a"]), LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    hold.go();
    assert_eq!(holder.wait_timeout(LONG).code, Some(0));
    let out = run.wait_timeout(LONG);
    assert_eq!(out.code, Some(70), "{out:?}");
    assert!(
        out.stderr
            .contains("lock 'mk-a' was force-released while this run waited"),
        "{out:?}"
    );
    assert!(!ran.exists(), "COMMAND ran without mk-a");
    let mut conn = server.conn();
    assert!(!exists(&mut conn, &lock("mk-a")) && !exists(&mut conn, &lock("mk-b")));
}

#[test]
fn unlocked_runs_of_several_keys_name_the_keys_and_no_token() {
    let dir = TestDir::new();
    let url = format!("redis://127.0.0.1:{}", free_port());
    let mut cmd = keys_run(
        redlock(&url),
        &["mk-b", "mk-a"],
        &["--on-unavailable", "run", "--"],
    );
    cmd.args(["sh", "-c", &record_env(&dir, "true")]);
    let out = run_with_timeout(&mut cmd, LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(lines(&dir, "KEYS"), ["mk-a", "mk-b"]);
    assert_eq!(lines(&dir, "KEY"), ["mk-a"]);
    for var in ["TOKEN", "TOKENS", "FENCE", "FENCES"] {
        assert_eq!(dir.read(var).as_deref(), Some(""), "{var}");
    }
}
