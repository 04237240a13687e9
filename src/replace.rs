//! `--replace-running` (CI's cancel-in-progress): revoke the run that
//! holds KEY, then take KEY once that run has given it back.
//!
//! It goes through revocation, never around it: the holder is revoked as
//! `force-release --token` revokes it (its record says `replaced_by`), so
//! no run gets KEY before the replaced run has stopped its whole job
//! (warning signal, SIGTERM, grace, SIGKILL) and released it, or its lease
//! could have ended. The replaced run exits 70, saying "replaced". This
//! run then acquires as any run does.
//!
//! Waiting for the replaced run is not counted against `--wait` or `-n`:
//! each revocation extends the wait to the revoked lease's end (the time
//! the lock had left, at most the holder's `--ttl`) plus [`SLACK`]. A run
//! that takes KEY first (one already waiting, with several Redlock nodes
//! where there is no line) is replaced in turn while the wait lasts. A hold
//! (`redlock-run hold`) is never replaced: it is waited for, or not, as any
//! run would. Two replacing runs end with one running: each revokes only a
//! running holder, and a replaced run never tries again.

use std::time::{Duration, Instant};

use crate::exit::Failure;
use crate::holder::Shown;
use crate::lock::{Forced, Holder, Inspected, LockKeys, Quorum};
use crate::log::{field, show, Ev, Log};
use crate::queue::Queue;
use crate::signals::Signals;
use crate::wait::{self, Patience, Waited};

/// Beyond the revoked lease: time for its expiry to be seen and tried.
pub const SLACK: Duration = Duration::from_secs(2);

/// The line a replacing run stands in: first (newest-first) when no policy
/// was given and there is a line (one endpoint), so that the replaced
/// run's release wakes it rather than a run that was waiting already.
pub fn queue(replace: bool, given: Option<Queue>, queue: Queue, endpoints: usize) -> Queue {
    match (replace, given, endpoints) {
        (true, None, 1) => Queue::NewestFirst,
        _ => queue,
    }
}

/// What holds KEY when a replacing run looks.
#[derive(Debug)]
enum Found {
    /// A running holder, revoked by us now: its lease has this long left.
    Revoked(Option<Duration>),
    /// Already being revoked (by an operator or another replacing run).
    Ending(Option<Duration>),
    /// Free, or not decided: try, and look again soon.
    Free,
    /// A hold, a semaphore: not replaced; wait as any run.
    Kept,
}

/// The run's acquire with `--replace-running`: as `wait::acquire`, after
/// revoking the holder, round after round (see the module doc).
pub fn acquire(
    main: &mut Quorum,
    (key, keys): (&str, &LockKeys),
    holder: &Holder,
    patience: Patience,
    signals: &Signals,
    log: &Log,
) -> Result<Waited, Failure> {
    let mut deadline = patience.wait.map(|w| Instant::now() + w);
    loop {
        let now = Instant::now();
        let round = match revoke(main, keys, holder, log, key) {
            Found::Revoked(left) | Found::Ending(left) => {
                let end = now + left.unwrap_or_default() + SLACK;
                deadline = deadline.map(|d| d.max(end));
                Some(end)
            }
            Found::Free => Some(deadline.map_or(now + SLACK, |d| d.min(now + SLACK))),
            Found::Kept => None,
        };
        let until = round.or(deadline);
        let wait = Patience {
            wait: until.map(|end| end.saturating_duration_since(now)),
            ..patience
        };
        let waited = wait::acquire(main, holder, wait, key, signals, log, &mut || {})?;
        let time_left = deadline.is_none_or(|d| Instant::now() < d);
        match waited {
            Waited::Busy(info)
                if round.is_some()
                    && time_left
                    && info.replaced_by.is_none()
                    && info.line_full.is_none() => {}
            other => return Ok(other),
        }
    }
}

/// Look at KEY and revoke its running holder, if it has one.
fn revoke(main: &mut Quorum, keys: &LockKeys, me: &Holder, log: &Log, key: &str) -> Found {
    let seen: Vec<Inspected> = main.inspect_each(keys).into_iter().flatten().collect();
    let Some((token, node)) = majority_holder(&seen, main.needed()) else {
        return Found::Free;
    };
    if node.limit.is_some() || node.field("hold_reason").is_some() {
        return Found::Kept;
    }
    if node.revoked {
        return Found::Ending(node.pttl);
    }
    let by = format!("{} pid {}", me.host, me.pid);
    let answers = main.force_each_by(keys, Some(&token), false, &by);
    let done = answers
        .iter()
        .filter(|a| matches!(a, Ok((Forced::Revoked | Forced::Deleted, _))))
        .count();
    if done < main.needed() {
        // It changed hands meanwhile: look again after a try.
        return Found::Free;
    }
    let shown = Shown::of(|f| node.field(f));
    let who = shown.who(Some(&token));
    let left = node
        .pttl
        .map_or_else(String::new, |d| format!(" (at most {})", show(d + SLACK)));
    log.emit(
        Ev::Replacing,
        format!(
            "lock '{key}': replacing {who} (--replace-running): its lock is revoked; waiting for \
             its job to end{left}"
        ),
        &[
            field("holder", who.clone()),
            crate::holder::label_of(shown.label.as_deref().unwrap_or_default()),
        ],
    );
    Found::Revoked(node.pttl)
}

/// The token a majority of the nodes hold, with one node's view of it.
fn majority_holder(seen: &[Inspected], needed: usize) -> Option<(String, &Inspected)> {
    seen.iter().find_map(|one| {
        let token = one.token.as_deref()?;
        let holding = seen
            .iter()
            .filter(|s| s.token.as_deref() == Some(token))
            .count();
        (holding >= needed).then(|| (token.to_string(), one))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replacing_run_stands_first_unless_told_otherwise() {
        use Queue::*;
        assert_eq!(queue(true, None, OldestFirst, 1), NewestFirst);
        assert_eq!(queue(true, Some(OldestFirst), OldestFirst, 1), OldestFirst);
        assert_eq!(queue(true, Some(NewestWins), NewestWins, 1), NewestWins);
        assert_eq!(queue(true, None, OldestFirst, 3), OldestFirst);
        assert_eq!(queue(false, None, OldestFirst, 1), OldestFirst);
    }

    #[test]
    fn the_holder_is_the_token_of_a_majority() {
        let held = |t: &str| Inspected {
            token: Some(t.into()),
            ..Inspected::default()
        };
        let free = Inspected::default();
        let seen = [held("a"), free.clone(), held("a")];
        assert_eq!(
            majority_holder(&seen, 2).map(|(t, _)| t).as_deref(),
            Some("a")
        );
        let split = [held("a"), held("b"), free];
        assert!(majority_holder(&split, 2).is_none());
        assert!(majority_holder(&[], 1).is_none());
    }
}
