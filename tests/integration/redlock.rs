//! Redlock: one lock across five independent masters, majority quorum.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::*;

const LONG: Duration = Duration::from_secs(60);

/// The binary with every server as a `--redis` node.
fn nodes(servers: &[RedisServer]) -> Command {
    redlock_on(servers.iter().map(RedisServer::url))
}

/// How many running nodes hold `value` under `key`.
fn holding(servers: &[RedisServer], key: &str, value: &str) -> usize {
    servers
        .iter()
        .filter(|s| s.is_running())
        .filter(|s| get(&mut s.conn(), key).as_deref() == Some(value))
        .count()
}

/// A job that writes its token and pid, then holds until `go`.
fn hold_until_go(dir: &TestDir) -> String {
    let pids = format!(
        "echo $REDLOCK_TOKEN > '{t}'; echo $$ > '{p}'",
        t = dir.file("token").display(),
        p = dir.file("pid").display(),
    );
    format!("{pids}; {}", Hold::new(dir).script(""))
}

fn token(dir: &TestDir) -> String {
    // The pid is written after the token, so a pid means a complete token.
    assert!(
        wait_until(LONG, || dir.read("pid").is_some_and(|p| p.ends_with('\n'))),
        "child never started"
    );
    dir.read("token").expect("token").trim().to_string()
}

#[test]
fn five_nodes_hold_the_lock_on_a_majority_and_release_everywhere() {
    let servers = RedisServer::many(5);
    let dir = TestDir::new();
    let mut run = spawn_piped(&mut Job::using(nodes(&servers), "five").sh(hold_until_go(&dir)));
    let token = token(&dir);
    assert!(holding(&servers, "redlock:{five}", &token) >= 3);
    Hold::new(&dir).go();
    assert_eq!(run.wait_timeout(LONG).code, Some(0));
    assert_eq!(holding(&servers, "redlock:{five}", &token), 0);
    for s in &servers {
        assert!(!exists(&mut s.conn(), "redlock:{five}"));
    }
}

/// Nodes that granted us the lock and hold another token at release (a
/// rival's minority left on a node that lost our key; set by hand here):
/// one of three is no lost lock (said with -v only); two of three is a
/// lost majority, and COMMAND may have run unprotected.
#[test]
fn only_a_lost_majority_is_warned_of_at_release() {
    for taken in [1, 2] {
        let servers = RedisServer::many(3);
        let dir = TestDir::new();
        let mut run = spawn_piped(
            &mut Job::using(nodes(&servers), "taken")
                .args(["-v"])
                .sh(hold_until_go(&dir)),
        );
        let token = token(&dir);
        assert_eq!(holding(&servers, "redlock:{taken}", &token), 3);
        for server in &servers[..taken] {
            // The node lost our key, and a rival that died took it.
            let _: () = redis::cmd("FLUSHALL").query(&mut server.conn()).unwrap();
            let _: () = redis::cmd("SET")
                .arg("redlock:{taken}")
                .arg("dead-rival")
                .arg("PX")
                .arg(60_000)
                .query(&mut server.conn())
                .unwrap();
        }
        Hold::new(&dir).go();
        let out = run.wait_timeout(LONG);
        assert_eq!(out.code, Some(0), "{out:?}");
        let warned = out.stderr.contains("may have run unprotected");
        assert_eq!(warned, taken == 2, "{taken} of 3 taken: {out:?}");
        let said = format!("held by another token on {taken} of 3 nodes at release (a minority");
        assert_eq!(out.stderr.contains(&said), taken == 1, "{out:?}");
        assert_eq!(holding(&servers, "redlock:{taken}", &token), 0, "released");
    }
}

/// The scripts the nodes of `servers` have run so far (INFO
/// commandstats: EVAL and EVALSHA calls), summed.
fn scripts_run(servers: &[RedisServer]) -> u64 {
    servers.iter().map(RedisServer::script_calls).sum()
}

/// A holder without the first node (it was down at the acquire, or lost
/// its data since): waiters listen there, and each of their attempts took
/// that free node and gave it back with a wake-up that woke the others,
/// for as long as the lock was held (3,400 scripts a second on every node
/// for three waiters). Now a minority given back behind a holder of a
/// majority wakes no one, and the holder's release wakes the waiters also
/// where the lock was not its own.
#[test]
fn waiters_behind_a_holder_without_the_first_node_do_not_wake_each_other() {
    let servers = RedisServer::many(5);
    let dir = TestDir::new();
    let mut holder = spawn_piped(&mut Job::using(nodes(&servers), "storm").sh(hold_until_go(&dir)));
    let token = token(&dir);
    let _: () = redis::cmd("DEL")
        .arg("redlock:{storm}")
        .query(&mut servers[0].conn())
        .unwrap();
    assert_eq!(holding(&servers, "redlock:{storm}", &token), 4);
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            spawn_waiting(
                &mut Job::using(nodes(&servers), "storm")
                    .args(["--wait", "60s", "-v"])
                    .sh("true"),
                LONG,
            )
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let before = scripts_run(&servers);
    std::thread::sleep(Duration::from_secs(3));
    let during = scripts_run(&servers) - before;
    // Each waiter retries every 0.5-1 s as a fallback: at most about 20
    // tries of five scripts in 3 s, plus give-backs.
    assert!(
        during < 300,
        "{during} scripts in 3 s while three waiters waited"
    );
    Hold::new(&dir).go();
    assert_eq!(holder.wait_timeout(LONG).code, Some(0));
    let released = Instant::now();
    for mut waiter in waiters {
        let out = waiter.wait_timeout(LONG);
        assert_eq!(out.code, Some(0), "{out:?}");
    }
    assert!(
        released.elapsed() < Duration::from_secs(20),
        "the waiters took {:?}",
        released.elapsed()
    );
}

#[test]
fn two_of_five_down_still_works_three_down_is_69() {
    let mut servers = RedisServer::many(5);
    servers[0].kill();
    servers[3].kill();
    let dir = TestDir::new();
    let out = run_with_timeout(
        &mut Job::using(nodes(&servers), "down").sh("echo ran; exit 6"),
        LONG,
    );
    assert_eq!(out.code, Some(6), "{out:?}");
    assert_eq!(out.stdout.trim(), "ran");

    servers[4].kill();
    let marker = dir.file("ran");
    let out = run_with_timeout(
        &mut Job::using(nodes(&servers), "down").sh(format!("touch '{}'", marker.display())),
        LONG,
    );
    assert_eq!(out.code, Some(69), "{out:?}");
    assert!(!marker.exists(), "ran without a quorum");
    assert!(
        out.stderr.contains("3 of 5"),
        "says how many nodes failed: {out:?}"
    );
    for s in servers.iter().filter(|s| s.is_running()) {
        assert!(
            !exists(&mut s.conn(), "redlock:{down}"),
            "minority lock left behind"
        );
    }
}

#[test]
fn a_majority_blocks_others_and_a_stale_minority_does_not() {
    let servers = RedisServer::many(5);
    let dir = TestDir::new();
    let mut holder = spawn_piped(&mut Job::using(nodes(&servers), "major").sh(hold_until_go(&dir)));
    token(&dir);
    let out = run_with_timeout(
        &mut Job::using(nodes(&servers), "major")
            .args(["-n"])
            .sh("echo ran"),
        LONG,
    );
    assert_eq!(out.code, Some(75), "{out:?}");
    assert_eq!(out.stdout, "");
    Hold::new(&dir).go();
    assert_eq!(holder.wait_timeout(LONG).code, Some(0));

    // A stale holder left its key on two nodes only.
    for s in &servers[..2] {
        let _: () = redis::cmd("SET")
            .arg("redlock:{minor}")
            .arg("stale")
            .arg("PX")
            .arg(60_000)
            .query(&mut s.conn())
            .unwrap();
    }
    let out = run_with_timeout(
        &mut Job::using(nodes(&servers), "minor")
            .args(["-n"])
            .sh("echo ran"),
        LONG,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stdout.trim(), "ran");
    assert_eq!(
        holding(&servers, "redlock:{minor}", "stale"),
        2,
        "someone else's keys are left alone"
    );
}

#[test]
fn losing_the_majority_stops_the_job_before_the_validity_ends() {
    let mut servers = RedisServer::many(5);
    let dir = TestDir::new();
    let mut run = spawn_piped(
        &mut Job::using(nodes(&servers), "minority")
            .args(["--ttl", "3s"])
            .sh(hold_until_go(&dir)),
    );
    token(&dir);
    let child = read_pid(&dir, "pid", LONG);
    // The lock cannot outlive the longest TTL left on any node.
    let before = Instant::now();
    let left = servers
        .iter()
        .map(|s| pttl(&mut s.conn(), "redlock:{minority}"))
        .max()
        .unwrap();
    assert!(left > 0);
    let expiry = before + Duration::from_millis(left as u64);
    for s in &mut servers[..3] {
        s.kill();
    }
    assert!(
        wait_until(LONG, || !process_alive(child)),
        "job kept running without a quorum"
    );
    assert!(Instant::now() < expiry, "job outlived the lock's validity");
    let out = run.wait_timeout(LONG);
    assert_eq!(out.code, Some(70), "{out:?}");
}

#[test]
fn losing_one_node_of_five_is_not_losing_the_lock() {
    let mut servers = RedisServer::many(5);
    let dir = TestDir::new();
    let script = format!(
        "echo $$ > '{p}'; sleep 4; echo survived",
        p = dir.file("pid").display()
    );
    // A 3 s TTL: refreshes every second, each with 1.6 s to be confirmed
    // before the stop would begin (a 1 s TTL leaves 0.2 s, which a
    // loaded machine can really miss: the lock is then lost, exit 70).
    let mut run = spawn_piped(
        &mut Job::using(nodes(&servers), "onedown")
            .args(["--ttl", "3s"])
            .sh(&script),
    );
    assert!(wait_for_file(dir.file("pid"), LONG));
    servers[2].kill();
    let out = run.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stdout.trim(), "survived");
}

#[test]
fn a_paused_node_costs_at_most_its_timeout() {
    let servers = RedisServer::many(5);
    servers[1].pause();
    let start = Instant::now();
    // TTL 2s: the per-node timeout is 200ms; a paused node must not make
    // acquisition wait for anything like the TTL, let alone hang.
    let out = run_with_timeout(
        &mut Job::using(nodes(&servers), "paused")
            .args(["--ttl", "2s"])
            .sh("echo ran"),
        LONG,
    );
    let took = start.elapsed();
    servers[1].resume();
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
}

/// Also: no run warns. Each release goes to every node, and a node that
/// a rival's failed attempt took (a minority it is giving back) holds
/// another token then: that is not "held by another token at release"
/// (which said COMMAND may have run unprotected, in a third of the runs).
#[test]
fn mutual_exclusion_across_five_nodes() {
    let servers = RedisServer::many(5);
    let dir = TestDir::new();
    let log = dir.file("log");
    let script = section_script(&log, "0.01");
    // A key's first use: runs racing for it start the nodes' fence
    // counters anew, which looks like data lost under a holder, and one
    // of them may stand in (docs/safety.md). Nothing else is said: not
    // F25's sign (a holder it saw, named beside its grant), which a
    // release on its way through the nodes would give if the waiter did
    // not look again.
    let first_use = ["(its fence counter started anew)"];
    contend_saying_only(8, 5, &first_use, || {
        Job::using(nodes(&servers), "m5").sh(&script)
    });
    assert_eq!(
        sections_in(&log),
        (40, 1),
        "all 40 sections ran, one at a time"
    );
}

#[test]
fn the_fence_is_the_largest_among_the_majority() {
    let servers = RedisServer::many(3);
    // One node's counter is far ahead of the others' (which start from
    // their clocks in microseconds, about 1.7e15 in 2024).
    let ahead: i64 = 8_000_000_000_000_000;
    let _: () = redis::cmd("SET")
        .arg("redlock:{f}:fence")
        .arg(ahead)
        .query(&mut servers[2].conn())
        .unwrap();
    let out = run_with_timeout(
        &mut Job::using(nodes(&servers), "f").sh("echo $REDLOCK_FENCE"),
        LONG,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stdout.trim(), (ahead + 1).to_string());
}

/// The majority moves the way a partition moves it: for each run some
/// nodes are unreachable (killed; they come back with their data, from
/// the append-only file) and others not. Each node counts only the
/// acquisitions it saw, so without raising the counters of the majority
/// to the fence it handed out, a run reaching A, B and C after nine runs
/// that reached D and E got a fence below the ones before.
#[test]
fn the_fence_never_goes_back_when_the_majority_moves() {
    let mut servers: Vec<RedisServer> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..5)
            .map(|_| {
                s.spawn(|| {
                    RedisServer::builder()
                        .arg("--appendonly")
                        .arg("yes")
                        .start()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for s in &servers {
        let _: () = redis::cmd("SET")
            .arg("redlock:{moving}:fence")
            .arg(100)
            .query(&mut s.conn())
            .unwrap();
    }
    // D and E with one of A, B, C each time; then A, B, C alone; then
    // every majority of three, some of four, and all five.
    let mut schedule: Vec<Vec<usize>> = (0..9).map(|i| vec![i % 3, 3, 4]).collect();
    schedule.push(vec![0, 1, 2]);
    for a in 0..5 {
        for b in a + 1..5 {
            for c in b + 1..5 {
                schedule.push(vec![a, b, c]);
            }
        }
    }
    schedule.extend([
        vec![0, 1, 2, 3],
        vec![1, 2, 3, 4],
        vec![0, 2, 4],
        (0..5).collect(),
    ]);
    let mut fences: Vec<i64> = Vec::new();
    for up in &schedule {
        for (i, s) in servers.iter_mut().enumerate() {
            match (up.contains(&i), s.is_running()) {
                (true, false) => s.restart(),
                (false, true) => s.kill(),
                _ => {}
            }
        }
        let out = run_with_timeout(
            &mut Job::using(nodes(&servers), "moving").sh("echo $REDLOCK_FENCE"),
            LONG,
        );
        assert_eq!(out.code, Some(0), "nodes {up:?} up: {out:?}");
        let fence: i64 = out.stdout.trim().parse().expect("a fence");
        if let Some(last) = fences.last() {
            assert!(
                fence > *last,
                "with nodes {up:?} up the fence went back to {fence} after {fences:?}"
            );
        }
        fences.push(fence);
    }
    assert_eq!(fences.len(), schedule.len());
}

/// The counters disagree, so the fence must be raised on a majority
/// before COMMAND starts; two of three nodes answer the acquire but never
/// the raise (their proxies forward one request per connection: the
/// acquire). Without
/// the raise on a majority the fence could go back later: COMMAND must
/// not run, and nothing is left held.
#[test]
fn a_fence_not_raised_on_a_majority_is_no_lock() {
    let servers = RedisServer::many(3);
    for s in &servers {
        s.cache_scripts();
    }
    // Far ahead of the others' counters, which start from their clocks.
    let _: () = redis::cmd("SET")
        .arg("redlock:{raise}:fence")
        .arg(8_000_000_000_000_000_i64)
        .query(&mut servers[0].conn())
        .unwrap();
    let proxies: Vec<Proxy> = servers[1..]
        .iter()
        .map(|s| Proxy::first_requests_only(s.port(), 1))
        .collect();
    let urls = [servers[0].url(), proxies[0].url(), proxies[1].url()];
    let dir = TestDir::new();
    let ran = dir.file("ran");
    let out = run_with_timeout(
        &mut Job::using(redlock_on(&urls), "raise")
            .args(["-n", "-v", "--ttl", "3s"])
            .sh(format!("touch '{}'", ran.display())),
        LONG,
    );
    assert!(
        !ran.exists(),
        "COMMAND ran with a fence not raised on a majority: {out:?}"
    );
    assert_eq!(out.code, Some(69), "{out:?}");
    assert!(out.stderr.contains("2 of 3 Redis nodes failed"), "{out:?}");
    // Said of the first attempt (-v), which is made once more.
    assert!(out.stderr.contains("raising the fence"), "{out:?}");
    for s in &servers {
        assert!(
            !exists(&mut s.conn(), "redlock:{raise}"),
            "lock left behind"
        );
    }
}

/// A command of a failed attempt that reaches a node late (a lossy link
/// delivers what was queued on a connection the client dropped) never
/// touches the lock a later attempt took: each attempt after a failed one
/// has a fresh token. Here the third node's first connection delivers the
/// give-back of the first attempt (a minority: the other two nodes were
/// held) 2.5 s late, after the second attempt took the lock: no node
/// that held the holder's lock loses it while its job runs.
#[test]
fn a_late_give_back_of_a_failed_attempt_never_deletes_a_later_lock() {
    let servers = RedisServer::many(3);
    for s in &servers[..2] {
        let _: () = redis::cmd("SET")
            .arg("redlock:{late}")
            .arg("someone-else")
            .arg("PX")
            .arg(1000)
            .query(&mut s.conn())
            .unwrap();
    }
    // The acquire goes through at once; the give-back after the failed
    // attempt arrives 2.5 s after it was sent (by its digest: cached, it
    // runs when it comes).
    servers[2].cache_scripts();
    let proxy = Proxy::first_connection_late(servers[2].port(), 1, Duration::from_millis(2500));
    let urls = [servers[0].url(), servers[1].url(), proxy.url()];
    let dir = TestDir::new();
    let (token_file, done) = (dir.file("token"), dir.file("done"));
    let mut child = spawn_piped(
        &mut Job::using(redlock_on(&urls), "late")
            .args(["--ttl", "5s", "--wait", "20s"])
            .sh(format!(
                "echo \"$REDLOCK_TOKEN\" > '{}'; sleep 4; touch '{}'",
                token_file.display(),
                done.display()
            )),
    );
    assert!(
        wait_until(LONG, || std::fs::read_to_string(&token_file)
            .is_ok_and(|t| t.ends_with('\n'))),
        "never acquired"
    );
    let token = std::fs::read_to_string(&token_file)
        .unwrap()
        .trim()
        .to_string();
    let mut conns: Vec<_> = servers.iter().map(|s| s.conn()).collect();
    let mut had = [false; 3];
    // Until the job is done (then the lock is given back, before the
    // wrapper exits), checked after each reading.
    while !child.has_exited() {
        let mut holding = 0;
        for (i, conn) in conns.iter_mut().enumerate() {
            let held: Option<String> = redis::cmd("GET").arg("redlock:{late}").query(conn).unwrap();
            let ours = held.as_deref() == Some(token.as_str());
            assert!(
                ours || !had[i] || done.exists(),
                "node {i} lost the holder's lock under it (now {held:?})"
            );
            had[i] |= ours;
            holding += usize::from(ours);
        }
        assert!(holding >= 2 || done.exists(), "no majority holds {token}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
}

/// A holder with 2 of 3 nodes, seen from a host that cannot reach one of
/// them: the lock is not free (only a majority can say so). `status` says
/// unknown (69, JSON `held: null`), `wait` keeps waiting and ends with 69,
/// never 0; once the node answers again, both see the holder.
#[test]
fn a_node_that_does_not_answer_is_not_a_node_that_does_not_hold() {
    let servers = RedisServer::many(3);
    let dir = TestDir::new();
    let hold = Hold::new(&dir);
    let _holder = hold.spawn(
        &mut Job::using(nodes(&servers), "migrate").sh(hold_until_go(&dir)),
        LONG,
    );
    let token = token(&dir);
    // The third node loses the key: the holder keeps 2 of 3.
    let _: () = redis::cmd("DEL")
        .arg("redlock:{migrate}")
        .query(&mut servers[2].conn())
        .unwrap();
    assert_eq!(holding(&servers, "redlock:{migrate}", &token), 2);
    // This host reaches the second node through a proxy that hangs.
    let proxy = Proxy::start(servers[1].port());
    let observer = || redlock_on([servers[0].url(), proxy.url(), servers[2].url()]);
    proxy.pause();
    let out = run_with_timeout(observer().args(["status", "migrate"]), LONG);
    assert_eq!(out.code, Some(69), "{out:?}");
    assert!(
        out.stdout
            .starts_with("migrate  unknown (held on 1 of 3 nodes; 1 did not answer"),
        "{out:?}"
    );
    let out = run_with_timeout(observer().args(["status", "migrate", "--json"]), LONG);
    assert!(out.stdout.contains(r#""held":null"#), "{out:?}");
    let out = run_with_timeout(
        observer().args(["wait", "migrate", "--timeout", "3s"]),
        LONG,
    );
    assert_eq!(out.code, Some(69), "not free, so not 0: {out:?}");
    assert!(
        out.stderr.contains("may hold the lock's majority"),
        "{out:?}"
    );
    proxy.resume();
    let out = run_with_timeout(observer().args(["status", "migrate"]), LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.contains("on 2 of 3 nodes"), "{out:?}");
    let out = run_with_timeout(observer().args(["wait", "migrate", "--timeout", "0"]), LONG);
    assert_eq!(out.code, Some(75), "held: {out:?}");
    hold.go();
}

/// FLUSHALL on two of three nodes under a holder: a newcomer finds the
/// third node still naming that holder and takes the other two, their fence
/// counters started anew. It never runs beside the holder's job (which
/// finds its majority gone at its next refresh, exit 70): with `-n` it is
/// busy (its stand-in left to expire), and a waiting one runs once the
/// holder's job is gone. On the code before
/// the fix the newcomer ran at once, the holder's job still running (the
/// chaos campaign, seed 20261206 episode 788, where the holder had taken
/// the lock a moment before the flush and no waiter had seen it).
#[test]
fn a_newcomer_after_a_majority_lost_its_data_waits_out_the_holder_it_finds() {
    let servers = RedisServer::many(3);
    let dir = TestDir::new();
    let (pid, log) = (dir.file("pid"), dir.file("log"));
    // It refreshes every 4 s: the FLUSHALL goes unnoticed by it for seconds.
    let slow = ["--ttl", "5s", "--refresh", "4s", "--kill-after", "300ms"];
    let holding = format!("echo $$ > '{}'; sleep 20", pid.display());
    let mut holder = spawn_piped(&mut Job::using(nodes(&servers), "lost").args(slow).sh(&holding));
    let holder_pid = read_pid(&dir, "pid", LONG);
    for server in &servers[1..] {
        let _: () = redis::cmd("FLUSHALL").query(&mut server.conn()).unwrap();
    }
    let busy = run_with_timeout(
        nodes(&servers).args(["-n", "--ttl", "3s", "-k", "lost", "--", "true"]),
        LONG,
    );
    assert_eq!(busy.code, Some(75), "ran beside the holder: {busy:?}");
    assert!(busy.stderr.contains("data in Redis was lost"), "{busy:?}");
    let newcomer = format!(
        "if kill -0 {holder_pid} 2>/dev/null; then echo overlap; else echo alone; fi > '{}'",
        log.display()
    );
    let out = run_with_timeout(
        &mut Job::using(nodes(&servers), "lost")
            .args(["--ttl", "3s", "--wait", "30s"])
            .sh(&newcomer),
        LONG,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(dir.read("log").as_deref(), Some("alone\n"), "{out:?}");
    let out = holder.wait_timeout(LONG);
    assert_eq!(
        out.code,
        Some(70),
        "the holder's majority vanished: {out:?}"
    );
}

/// A waiter that started a fence counter anew long ago (one node lost its
/// data, or the key's first Redlock race) does not wait a whole lease more
/// once the holder it saw since has released: that holder took the lock
/// on data that was not lost, and a holder whose data was lost can have
/// renewed only up to the loss. On the code before the fix each waiter
/// of the first race waited a lease after its acquire, in turn (CI:
/// mutual_exclusion_across_five_nodes, 8 runs, more than 120 s).
#[test]
fn a_counter_started_anew_long_ago_costs_no_wait_after_a_clean_release() {
    let servers = RedisServer::many(5);
    let dir = TestDir::new();
    let ttl = ["--ttl", "1s"];
    let mut holder = spawn_piped(
        nodes(&servers)
            .args(ttl)
            .args(["-k", "anew"])
            .args(held_until_go(&dir, "holder")),
    );
    assert!(wait_for_file(dir.file("started-holder"), LONG));
    let mut waiter = spawn_piped(
        nodes(&servers)
            .args(ttl)
            .args(["-k", "anew", "--wait", "60s", "--", "true"]),
    );
    // The waiter is in line: its wake channel is on the first node.
    let wake = || -> Option<String> {
        let channels: Vec<String> = redis::cmd("PUBSUB")
            .arg("CHANNELS")
            .arg("redlock:{anew}:wake:*")
            .query(&mut servers[0].conn())
            .ok()?;
        channels.into_iter().next()
    };
    assert!(
        wait_until(LONG, || wake().is_some()),
        "the waiter never got in line"
    );
    let channel = wake().unwrap_or_default();
    // The last node loses its data; the waiter, woken, takes that node
    // (starting its counter anew) but finds the lock busy on the others.
    let last = &servers[4];
    let _: () = redis::cmd("FLUSHALL").query(&mut last.conn()).unwrap();
    for server in &servers {
        let _: i64 = redis::cmd("PUBLISH")
            .arg(&channel)
            .arg("released")
            .query(&mut server.conn())
            .unwrap();
    }
    assert!(
        wait_until(LONG, || get(&mut last.conn(), "redlock:{anew}:fence")
            .is_some()),
        "the waiter never took the node that lost its data: {}",
        waiter.stderr_now()
    );
    // Well past a lease (1 s) since then, the holder ends and releases.
    std::thread::sleep(Duration::from_secs(5));
    std::fs::write(dir.file("go"), "").unwrap();
    let out = holder.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    let out = waiter.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        !out.stderr.contains("data in Redis was lost"),
        "waited out a lease that had long ended: {out:?}"
    );
}

/// F25 (docs/chaos.md): data lost on two of three nodes
/// under a holder slow to notice; other runs' tries start the lost
/// nodes' counters anew and give them back (busy: the holder keeps a
/// majority until the second node goes); then the waiter, which saw the
/// holder, takes those two nodes beside the holder still named on the
/// third, while the holder is stopped (as the campaign's wrapper-stop
/// did). No answer it got said "counter started anew"; it stands in all
/// the same, for the very holder it saw is still named beside its grant.
/// Without that its job began beside the holder's ("overlap"; 81e88d9).
#[test]
fn a_waiter_granted_beside_the_holder_it_saw_stands_in_though_others_remade_the_counters() {
    let servers = RedisServer::many(3);
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let dir = TestDir::new();
    let key = "remade";
    let lock = format!("redlock:{{{key}}}");
    let slow = ["--ttl", "10s", "--refresh", "8s", "--kill-after", "300ms"];
    let holding = format!("echo $$ > '{}'; sleep 30", dir.file("pid").display());
    let job = || Job::using(redlock_on(&urls), key);
    let mut holder = spawn_piped(&mut job().args(slow).sh(&holding));
    let pid = read_pid(&dir, "pid", LONG);
    let log = dir.file("log");
    // Running, not a zombie: the holder's keeper kills the job when its
    // lease runs out, and reaps it only once its wrapper (stopped below)
    // is back.
    let beside = format!(
        "s=$(sed 's/.*) //' /proc/{pid}/stat 2>/dev/null | cut -c1); \
         if [ -n \"$s\" ] && [ \"$s\" != Z ]; then echo overlap; else echo alone; fi > '{}'",
        log.display()
    );
    let mut waiter = spawn_waiting(&mut job().args(["--ttl", "3s", "-v"]).sh(&beside), LONG);
    let on = |i: usize, cmd: &mut redis::Cmd| {
        let _: redis::Value = cmd.query(&mut servers[i].conn()).unwrap();
    };
    // Stopped while the others try: the give-backs wake it (on node 0),
    // and a try of its own would find a counter started anew.
    waiter.signal(nix::sys::signal::Signal::SIGSTOP);
    // A try that starts a lost node's counter, finds the holder's
    // majority elsewhere and gives the node back.
    let busy_run = || {
        let out = run_with_timeout(&mut job().args(["-n"]).sh("true"), LONG);
        assert_eq!(out.code, Some(75), "{out:?}");
    };
    on(0, &mut redis::cmd("FLUSHALL"));
    busy_run();
    on(1, &mut redis::cmd("FLUSHALL"));
    on(
        0,
        redis::cmd("SET")
            .arg(&lock)
            .arg("by-hand")
            .arg("PX")
            .arg(5000),
    );
    busy_run();
    on(0, redis::cmd("DEL").arg(&lock));
    // The holder cannot learn of the loss before the waiter acts (its
    // keeper still ends the job when the lease runs out).
    holder.signal(nix::sys::signal::Signal::SIGSTOP);
    waiter.signal(nix::sys::signal::Signal::SIGCONT);
    on(0, redis::cmd("PUBLISH").arg(&lock).arg("released"));
    let out = waiter.wait_timeout(LONG);
    holder.signal(nix::sys::signal::Signal::SIGCONT);
    holder.wait_timeout(LONG);
    assert_eq!(dir.read("log").as_deref(), Some("alone\n"), "{out:?}");
    assert!(
        out.stderr
            .contains("a majority of the nodes no longer have the lock"),
        "{out:?}"
    );
}

/// The other side of F25's rule: a release reaches the nodes one after
/// another, so a waiter's try can be granted by a majority while the last
/// node still names the releasing holder, the very holder the waiter saw.
/// It looks again before standing in, and goes on once the release has
/// reached that node too. Standing in at once (or after one more try)
/// kept the lock for a whole lease (here 10 s) after a plain hand-over.
/// The test plays the release's last step as soon as it sees the grant
/// (polled every 10 ms), well inside the waiter's second of looks (5 of
/// 5 passed beside CI and three busy loops).
#[test]
fn a_waiter_granted_while_the_release_is_on_its_way_does_not_stand_in() {
    let servers = RedisServer::many(3);
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let key = "midway";
    let lock = format!("redlock:{{{key}}}");
    let job = || Job::using(redlock_on(&urls), key).args(["--ttl", "10s", "--refresh", "5s"]);
    let dir = TestDir::new();
    let holding = format!("echo $$ > '{}'; sleep 30", dir.file("pid").display());
    let mut holder = spawn_piped(&mut job().sh(&holding));
    read_pid(&dir, "pid", LONG);
    let mut waiter = spawn_waiting(&mut job().args(["-v"]).sh("echo ran"), LONG);
    let on = |i: usize, cmd: &mut redis::Cmd| -> i64 {
        let answer: redis::Value = cmd.query(&mut servers[i].conn()).unwrap();
        match answer {
            redis::Value::Int(n) => n,
            _ => 0,
        }
    };
    // Its release is played by hand, node by node.
    holder.signal(nix::sys::signal::Signal::SIGSTOP);
    on(0, redis::cmd("DEL").arg(&lock));
    on(1, redis::cmd("DEL").arg(&lock));
    on(0, redis::cmd("PUBLISH").arg(&lock).arg("released"));
    // The waiter's try took nodes 0 and 1, beside the holder on node 2.
    assert!(wait_until(LONG, || on(0, redis::cmd("EXISTS").arg(&lock)) == 1));
    assert_eq!(on(2, redis::cmd("EXISTS").arg(&lock)), 1);
    on(2, redis::cmd("DEL").arg(&lock));
    let out = waiter.wait_timeout(LONG);
    holder.signal(nix::sys::signal::Signal::SIGCONT);
    holder.signal(nix::sys::signal::Signal::SIGTERM);
    holder.wait_timeout(LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stdout, "ran\n");
    assert!(!out.stderr.contains("was lost"), "{out:?}");
}
