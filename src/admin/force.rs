//! `force-release KEY`: delete a lock by hand (or revoke it, so that its
//! live holder stops first), and say whose it was.

use std::time::SystemTime;

use super::{render, view, write};
use crate::exit::{Exit, Failure};
use crate::lock::{Forced, Inspected, LockKeys, NodeError, Quorum};
use crate::log::Log;
use crate::secrets::untrusted;

/// How `force-release` was asked to go about it.
#[derive(Clone, Copy)]
pub struct Forcing<'a> {
    /// Only if the lock holds this token.
    pub token: Option<&'a str>,
    /// Delete at once rather than revoke.
    pub now: bool,
    /// `-q`: say nothing on success.
    pub quiet: bool,
}

/// What the nodes did, together.
#[derive(Default)]
struct Tally {
    /// What each node deleted (or revoked) held.
    deleted: Vec<Inspected>,
    /// What each node holding another token held.
    mismatched: Vec<Inspected>,
    errors: Vec<NodeError>,
    revoked: bool,
}

impl Tally {
    fn of(answers: Vec<Result<(Forced, Inspected), NodeError>>) -> Tally {
        let mut tally = Tally::default();
        for answer in answers {
            match answer {
                Ok((Forced::Deleted, was)) => tally.deleted.push(was),
                Ok((Forced::Revoked, was)) => {
                    tally.revoked = true;
                    tally.deleted.push(was);
                }
                Ok((Forced::Mismatch, was)) => tally.mismatched.push(was),
                Ok((Forced::Free, _)) => {}
                Err(e) => tally.errors.push(e),
            }
        }
        tally
    }
}

pub fn force_release(
    quorum: &mut Quorum,
    prefix: &str,
    key: &str,
    how: Forcing,
    log: &Log,
) -> Result<Exit, Failure> {
    let keys = LockKeys::new(prefix, key);
    let answers = quorum.force_each(&keys, how.token, how.now);
    let total = quorum.nodes();
    let tally = Tally::of(answers);
    if total - tally.errors.len() < quorum.needed() {
        let done = match tally.deleted.len() {
            0 => String::new(),
            n => format!(" (deleted on {n} of {total} nodes)"),
        };
        let what = format!("cannot release lock '{key}'{done}");
        return Err(view::failure(tally.errors, total, &what));
    }
    for e in &tally.errors {
        log.warn(format!(
            "{e:#}; the lock may stay there until its TTL runs out"
        ));
    }
    if !tally.deleted.is_empty() {
        let was = view::LockView::merge(key, total, tally.deleted.iter());
        if !how.quiet {
            let line =
                render::released(&was, how.token.is_some(), tally.revoked, SystemTime::now());
            write([line])?;
        }
        return Ok(Exit::Success);
    }
    let why = match tally.mismatched.is_empty() {
        false => format!(
            "is held by {} with another token; not released",
            render::who(&view::LockView::merge(key, total, tally.mismatched.iter()))
        ),
        true => "is not held; nothing to release".to_string(),
    };
    log.warn(format!("lock '{}' {why}", untrusted(key)));
    Ok(Exit::No)
}
