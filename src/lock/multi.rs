//! The locks a run holds: one per key, each with its own quorum and
//! token, kept and given back together. One key is a set of one: the
//! same calls as a lone [`Quorum`], and the same answers.
//!
//! Several keys (`-k A -k B`) are all or nothing: a refresh counts only
//! when every key was extended, and the lease is the shortest of theirs;
//! any key lost is the lock lost. How they are taken (one at a time, in
//! one order) is `keyset.rs`'s business.

use std::time::{Duration, Instant};

use super::channels::Wakeups;
use super::outcome::{Extend, Released};
use super::quorum::Quorum;
use super::reply::Ownership;

/// One key of the set.
struct Part {
    key: String,
    quorum: Quorum,
    token: String,
}

/// What the release of one key found.
pub struct KeyReleased<'a> {
    pub key: &'a str,
    pub released: Released,
    /// The key's nodes, and how many make a majority.
    pub nodes: usize,
    pub needed: usize,
}

/// The keys a run holds (or is taking), in the order they were taken.
#[derive(Default)]
pub struct Locks {
    parts: Vec<Part>,
    /// The key whose loss a refresh found last (see [`Locks::lost_key`]).
    lost: Option<usize>,
}

impl Locks {
    /// Add `key`, held on `quorum` with `token`.
    pub fn push(&mut self, key: &str, quorum: Quorum, token: String) {
        self.parts.push(Part {
            key: key.to_string(),
            quorum,
            token,
        });
    }

    pub fn len(&self) -> usize {
        self.parts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// The keys, in the order they were taken.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().map(|p| p.key.as_str())
    }

    /// The token of each key, in the same order.
    pub fn tokens(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().map(|p| p.token.as_str())
    }

    /// The same keys and tokens on quorums `make` builds: connections of
    /// their own, for the refresher.
    pub fn fresh(&self, make: impl Fn(&str) -> Quorum) -> Locks {
        let mut fresh = Locks::default();
        for part in &self.parts {
            fresh.push(&part.key, make(&part.key), part.token.clone());
        }
        fresh
    }

    /// Hear a force-release of any key, on one connection (the first
    /// key's): the refresher then refreshes at once.
    pub fn watch(&self) -> anyhow::Result<Wakeups> {
        let Some((first, rest)) = self.parts.split_first() else {
            return Err(anyhow::anyhow!("no lock is held"));
        };
        match rest.is_empty() {
            true => first.quorum.watch(),
            false => {
                let others: Vec<&Quorum> = rest.iter().map(|p| &p.quorum).collect();
                first.quorum.watch_with(&others)
            }
        }
    }

    /// Refresh every key for another TTL.
    pub fn extend(&mut self) -> Extend {
        self.extend_each(None, None)
    }

    /// Set every key's remaining life to `ttl` (`--min-hold`).
    pub fn extend_for(&mut self, ttl: Duration, ended: Option<&str>) -> Extend {
        self.extend_each(Some(ttl), ended)
    }

    /// Every key is asked, also after one failed (the others' leases move
    /// on: the next try has less to do). The set's answer: lost if any key
    /// is lost, failed if any failed, else extended until the earliest end.
    fn extend_each(&mut self, ttl: Option<Duration>, ended: Option<&str>) -> Extend {
        let several = self.parts.len() > 1;
        let mut until: Option<Instant> = None;
        let mut failed = None;
        for (i, part) in self.parts.iter_mut().enumerate() {
            let extended = match ttl {
                None => part.quorum.extend(&part.token),
                Some(ttl) => part.quorum.extend_for(&part.token, ttl, ended),
            };
            match extended {
                Extend::Extended(end) => until = Some(until.map_or(end, |u| u.min(end))),
                Extend::Lost(why) => {
                    self.lost = Some(i);
                    return Extend::Lost(why);
                }
                Extend::Failed(e) if several => {
                    let key = &part.key;
                    failed.get_or_insert(e.context(format!("lock '{key}'")));
                }
                Extend::Failed(e) => failed = Some(e),
            }
        }
        match (failed, until) {
            (Some(e), _) => Extend::Failed(e),
            (None, Some(until)) => Extend::Extended(until),
            (None, None) => Extend::Lost(Ownership::Gone),
        }
    }

    /// The key a refresh found lost, when there are several.
    pub fn lost_key(&self) -> Option<&str> {
        let i = self.lost.filter(|_| self.parts.len() > 1)?;
        self.parts.get(i).map(|p| p.key.as_str())
    }

    /// Whether the lost key (or the only one) was revoked by a newer run
    /// (`--replace-running`): one read more, once the loss is certain.
    pub fn replaced(&mut self) -> bool {
        let i = self.lost.unwrap_or(0);
        self.parts.get_mut(i).is_some_and(|p| p.quorum.replaced())
    }

    /// Release every key, each on every node, trying each up to `tries`
    /// times; what each found, in order.
    pub fn release(&mut self, tries: usize) -> Vec<KeyReleased<'_>> {
        self.parts
            .iter_mut()
            .map(|part| KeyReleased {
                released: part.quorum.release(&part.token, tries),
                nodes: part.quorum.nodes(),
                needed: part.quorum.needed(),
                key: &part.key,
            })
            .collect()
    }
}
