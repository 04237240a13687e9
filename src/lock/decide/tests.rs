//! The decisions of `decide`, table by table.

use super::*;
use anyhow::anyhow;

fn error(fault: Fault) -> NodeError {
    NodeError {
        fault,
        error: anyhow!("{fault:?}"),
    }
}

fn busy(host: &str) -> NodeResult<Acquire> {
    Ok(Acquire::Busy(Box::new(BusyInfo {
        host: host.into(),
        ..BusyInfo::default()
    })))
}

fn held(fence: i64) -> NodeResult<Acquire> {
    Ok(Acquire::Held {
        fence,
        reset: false,
    })
}

#[test]
fn two_nodes_that_named_one_server_are_found_first_pair_first() {
    let ids = |ids: &[Option<&str>]| -> Vec<Option<String>> {
        ids.iter().map(|id| id.map(str::to_string)).collect()
    };
    assert_eq!(same_server(&ids(&[Some("a"), Some("b"), Some("c")])), None);
    assert_eq!(same_server(&ids(&[Some("a"), None, None])), None, "unsaid");
    assert_eq!(
        same_server(&ids(&[Some("a"), Some("b"), Some("a")])),
        Some((2, 0))
    );
    assert_eq!(
        same_server(&ids(&[None, Some("b"), Some("b"), Some("b")])),
        Some((2, 1))
    );
}

#[test]
fn a_majority_is_more_than_half() {
    for (nodes, needed) in [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (7, 4)] {
        assert_eq!(majority(nodes), needed, "{nodes}");
    }
}

#[test]
fn a_local_failure_wins_then_a_refusal_then_a_move() {
    use Fault::*;
    let cases: [(&[Fault], Verdict, u8); 7] = [
        (&[Unreachable, Local, Refused], Verdict::Local, 71),
        (&[Refused, Moving, Dropped], Verdict::Refused, 77),
        (&[Dropped, Moving], Verdict::Moving, 69),
        (
            &[Unreachable, Dropped, Interrupted],
            Verdict::Unavailable,
            69,
        ),
        (&[Local], Verdict::Local, 71),
        (&[Refused], Verdict::Refused, 77),
        (&[], Verdict::Unavailable, 69),
    ];
    for (faults, verdict, code) in cases {
        let found = Verdict::of(faults.iter().copied());
        assert_eq!(found, verdict, "{faults:?}");
        assert_eq!(found.exit().code(), code, "{faults:?}");
    }
}

#[test]
fn the_lock_is_granted_by_a_majority_in_time() {
    // (answers, nodes, in time, granted, fence)
    let cases = [
        (vec![held(7)], 1, true, true, 7),
        (vec![held(7)], 1, false, false, 7),
        (vec![held(3), held(9), busy("a")], 3, true, true, 9),
        (vec![held(3), busy("a"), busy("a")], 3, true, false, 3),
        (
            vec![held(3), held(4), Err(error(Fault::Dropped))],
            3,
            true,
            true,
            4,
        ),
        (vec![Err(error(Fault::Unreachable))], 1, true, false, 0),
    ];
    for (answers, nodes, in_time, want, fence) in cases {
        let tally = Tally::of(answers);
        assert_eq!(granted(&tally, nodes, in_time), want, "{tally:?}");
        assert_eq!(tally.fence(), fence, "{tally:?}");
    }
}

/// Node answers written one letter each: `H` held (fence 1), `a` and
/// `b` busy (held by a, by b), `M` another --limit, `U` unreachable,
/// `D` dropped, `V` a slot moving, `R` refused, `L` a local failure.
fn answers(letters: &str) -> Vec<NodeResult<Acquire>> {
    let one = |c| match c {
        'H' => held(1),
        'a' | 'b' => busy(&c.to_string()),
        'M' => Ok(Acquire::Mismatch { limit: 3 }),
        'U' => Err(error(Fault::Unreachable)),
        'D' => Err(error(Fault::Dropped)),
        'V' => Err(error(Fault::Moving)),
        'R' => Err(error(Fault::Refused)),
        _ => Err(error(Fault::Local)),
    };
    letters.chars().map(one).collect()
}

#[test]
fn a_failed_round_says_why_and_what_it_gives_back() {
    use GiveBack::*;
    use Outcome::{Busy, Failed};
    let busy = Busy { split: false };
    // (answers, splits, quiet splits, give back, outcome)
    let cases = [
        ("a", false, false, Nothing, busy),
        ("M", false, false, Nothing, Outcome::Mismatch { limit: 3 }),
        ("U", false, false, All, Failed(Verdict::Unavailable)),
        ("L", false, false, All, Failed(Verdict::Local)),
        // One holder has a majority: our minority goes back quietly.
        ("Haa", true, false, Quietly, busy),
        // Rivals split the nodes: quietly only when we retry soon.
        ("Hab", true, true, Quietly, Busy { split: true }),
        ("Hab", true, false, All, busy),
        // A node failed: all back, waking the waiters.
        ("HaD", true, true, All, busy),
        // Too few answered: the gravest fault speaks.
        ("HRL", true, true, All, Failed(Verdict::Local)),
        ("aVD", true, true, All, Failed(Verdict::Moving)),
        ("aVR", true, true, All, Failed(Verdict::Refused)),
        // In line (no splits): everything back, whatever others hold.
        ("Haa", false, true, All, busy),
    ];
    for (letters, splits, quiet_splits, give_back, outcome) in cases {
        let tally = Tally::of(answers(letters));
        let shape = Shape {
            nodes: letters.len(),
            splits,
            quiet_splits,
        };
        let found = not_acquired(&tally, shape);
        assert_eq!(found, (give_back, outcome), "{letters} {shape:?}");
    }
}

/// F25 (docs/chaos.md): a waiter stands in for the holder it saw when
/// granted beside it, so that holder must be one that held the lock
/// (named by a majority of all nodes), not a rival's minority.
#[test]
fn the_holder_a_waiter_saw_is_the_one_a_majority_names() {
    let record = |c: char| BusyInfo {
        host: c.to_string(),
        pid: "1".into(),
        acquired_at: "2026-12-05T00:00:00.000Z".into(),
        ..BusyInfo::default()
    };
    let id = |c: char| record(c).holder_id();
    // (answers, nodes, the holder a majority names)
    let cases = [
        ("aaa", 3, id('a')),
        ("Haa", 3, id('a')),
        ("HHa", 3, None),
        ("Hab", 3, None),
        ("aabbH", 5, None),
        ("aaabb", 5, id('a')),
        ("a", 1, id('a')),
        // A bare key (no record) is no holder of ours.
        ("xxx", 3, None),
    ];
    for (letters, nodes, want) in cases {
        let answers = letters.chars().map(|c| match c {
            'H' => held(1),
            'x' => busy("x"),
            c => Ok(Acquire::Busy(Box::new(record(c)))),
        });
        let tally = Tally::of(answers.collect());
        assert_eq!(tally.majority_holder(majority(nodes)), want, "{letters}");
    }
}

#[test]
fn a_refresh_is_lost_only_when_no_majority_can_be_ours() {
    use Ownership::*;
    use Refreshed::*;
    // (answers, nodes, errors, in time, outcome)
    let cases: [(&[Ownership], usize, usize, bool, Refreshed); 8] = [
        (&[Ours], 1, 0, true, Extended),
        (&[Ours], 1, 0, false, TooLate),
        (&[Gone], 1, 0, true, Lost(Gone)),
        (&[Ours, Ours, Replaced], 3, 0, true, Extended),
        (&[Ours, Replaced, Revoked], 3, 0, true, Lost(Revoked)),
        (&[Ours, Gone, Replaced], 3, 0, true, Lost(Replaced)),
        (&[Ours, Gone], 3, 1, true, Failed),
        (&[], 1, 1, true, Failed),
    ];
    for (found, nodes, errors, in_time, want) in cases {
        assert_eq!(refreshed(found, nodes, errors, in_time), want, "{found:?}");
    }
}

#[test]
fn a_release_tells_a_lost_lock_from_a_rivals_minority() {
    use Ownership::*;
    // (found, an earlier try's reply lost, the node was ours, says)
    let cases = [
        (Ours, false, true, Found::Ours),
        (Revoked, false, true, Found::Ours),
        (Gone, true, true, Found::Unanswered),
        (Replaced, true, false, Found::Unanswered),
        (Replaced, false, true, Found::Replaced),
        (Replaced, false, false, Found::Unrelated),
        (Gone, false, false, Found::Gone),
    ];
    for (found, maybe_done, ours_before, says) in cases {
        assert_eq!(
            release_found(found, maybe_done, ours_before),
            says,
            "{found:?}"
        );
    }
}

#[test]
fn only_a_call_that_may_have_reached_the_server_may_have_run() {
    use Fault::*;
    for (fault, may) in [
        (Unreachable, true),
        (Dropped, true),
        (Interrupted, true),
        (Refused, false),
        (Moving, false),
        (Local, false),
    ] {
        assert_eq!(may_have_run(fault), may, "{fault:?}");
    }
}
