//! The lock across N nodes (Redlock): a majority must agree, within the
//! lock's validity. One node is simply a quorum of one: same code path.

use std::time::{Duration, Instant};

use anyhow::anyhow;

use super::node::{Acquire, BusyInfo, Holder, LockKeys, Node, Ownership, Wakeups};
use super::timing;
use crate::config::Endpoint;

/// A lock we hold, valid (by our own monotonic clock) until `valid_until`.
#[derive(Debug, Clone, Copy)]
pub struct Lease {
    pub fence: i64,
    /// When the winning attempt was sent: the lock is ours from then on.
    pub acquired_at: Instant,
    pub valid_until: Instant,
}

/// The result of one acquisition attempt.
pub enum Attempt {
    Acquired(Lease),
    Busy(BusyInfo),
    /// Fewer than a quorum of nodes answered.
    Unavailable(anyhow::Error),
    /// Held, but not confirmed by `--replicas`; given back already.
    Unconfirmed(anyhow::Error),
    /// KEY is held with another `--limit` (1: a plain lock); nothing taken.
    Mismatch {
        limit: u32,
    },
}

/// The result of one refresh.
pub enum Extend {
    Extended(Instant),
    /// The token is gone or replaced on so many nodes that no quorum is left.
    Lost(Ownership),
    /// Not confirmed this time (nodes down, slow, or validity used up).
    Failed(anyhow::Error),
}

/// What a release found on each node.
#[derive(Debug, Default)]
pub struct Released {
    pub ours: usize,
    pub replaced: usize,
    pub gone: usize,
    pub errors: Vec<anyhow::Error>,
}

pub struct Quorum {
    nodes: Vec<Node>,
    keys: LockKeys,
    ttl: Duration,
    /// Replicas that must confirm every acquire and extend (WAIT).
    replicas: u32,
    /// Holders allowed at once: 1 is a plain lock, more a semaphore.
    limit: u32,
    timeout: Duration,
}

impl Quorum {
    pub fn new(endpoints: &[Endpoint], keys: LockKeys, ttl: Duration, timeout: Duration) -> Quorum {
        Quorum {
            nodes: endpoints
                .iter()
                .map(|e| Node::new(e.clone(), timeout))
                .collect(),
            keys,
            ttl,
            replicas: 0,
            limit: 1,
            timeout,
        }
    }

    /// Require `n` replicas of each node to confirm every acquire and
    /// extend before it counts (`--replicas`).
    pub fn with_replicas(mut self, n: u32) -> Quorum {
        self.replicas = n;
        self
    }

    /// Let up to `n` holders share the key (`--limit`); 1 (the default)
    /// is a plain lock, more a semaphore with a slot per holder. Each node
    /// must grant the slot, a majority of them as for a plain lock.
    pub fn with_limit(mut self, n: u32) -> Quorum {
        self.limit = n.max(1);
        self
    }

    /// The `--limit` this quorum asks for.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// How many nodes must agree: a majority.
    pub fn needed(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    /// Hear releases of the lock from the first node that answered the last
    /// attempt. One node is enough: waiters also poll, this only wakes them.
    pub fn subscribe(&self, token: &str) -> anyhow::Result<Wakeups> {
        let node = self.nodes.iter().find(|n| n.is_connected());
        let wake = self.keys.wake_channel(token);
        node.ok_or_else(|| anyhow!("no node is connected"))?
            .subscribe(&[&self.keys.lock, &wake])
    }

    /// Whether waiters queue for this lock, to be woken one at a time:
    /// plain locks on one node. Elsewhere every release wakes every waiter
    /// (with several nodes each would keep its own order of arrival).
    pub fn queues_waiters(&self) -> bool {
        self.limit == 1 && self.nodes.len() == 1
    }

    /// Leave the line of waiters (best effort: a dead waiter's place lapses
    /// by itself within seconds).
    pub fn leave(&mut self, token: &str) {
        if self.queues_waiters() {
            self.each(|node, keys| node.leave(keys, token));
        }
    }

    /// How many nodes there are.
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    /// Ask every node at once, for commands that span many keys (`status`,
    /// `list`, `force-release`): the same fan-out as the lock's own calls.
    pub fn on_each<R: Send>(&mut self, f: impl Fn(&mut Node) -> R + Sync) -> Vec<R> {
        self.each(|node, _| f(node))
    }

    /// Ask every node at once; one node is asked on this thread.
    fn each<R: Send>(&mut self, f: impl Fn(&mut Node, &LockKeys) -> R + Sync) -> Vec<R> {
        let keys = &self.keys;
        if let [node] = self.nodes.as_mut_slice() {
            return vec![f(node, keys)];
        }
        std::thread::scope(|s| {
            let f = &f;
            let handles: Vec<_> = self
                .nodes
                .iter_mut()
                .map(|node| s.spawn(move || f(node, keys)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                })
                .collect()
        })
    }

    /// One attempt; `waiting` says we wait in line if it is busy.
    pub fn try_acquire(&mut self, token: &str, holder: &Holder, waiting: bool) -> Attempt {
        let (ttl, limit) = (self.ttl, self.limit);
        let queue = waiting && self.queues_waiters();
        let start = Instant::now();
        let answers = self.each(|node, keys| match limit {
            1 => node.acquire(keys, token, ttl, holder, queue),
            n => node.acquire_slot(keys, token, ttl, holder, n),
        });
        let valid_until = timing::valid_until(start, ttl);
        let mut fences = Vec::new();
        let mut busy = None;
        let mut mismatch = None;
        let mut errors = Vec::new();
        for answer in answers {
            match answer {
                Ok(Acquire::Held { fence }) => fences.push(fence),
                Ok(Acquire::Busy(info)) => {
                    busy.get_or_insert(info);
                }
                Ok(Acquire::Mismatch { limit }) => {
                    mismatch.get_or_insert(limit);
                }
                Err(e) => errors.push(e),
            }
        }
        if fences.len() >= self.needed() && Instant::now() < valid_until {
            match self.confirm_replicas() {
                Ok(()) => {
                    let fence = fences.into_iter().max().unwrap_or_default();
                    return Attempt::Acquired(Lease {
                        fence,
                        acquired_at: start,
                        valid_until,
                    });
                }
                Err(e) => {
                    // Not durable: a failover could lose it. Give it back.
                    self.release(token, 1);
                    return Attempt::Unconfirmed(e);
                }
            }
        }
        if !fences.is_empty() || !errors.is_empty() {
            // Some nodes may hold our token (a reply may also have been lost):
            // give them all back before anyone retries.
            self.release(token, 1);
        }
        if let Some(limit) = mismatch {
            // Not a matter of waiting: the holders use another --limit.
            return Attempt::Mismatch { limit };
        }
        if self.nodes.len() - errors.len() < self.needed() {
            return Attempt::Unavailable(join_errors(errors, self.nodes.len()));
        }
        Attempt::Busy(busy.unwrap_or_default())
    }

    /// Refresh the lock for another TTL.
    pub fn extend(&mut self, token: &str) -> Extend {
        self.extend_for(token, self.ttl)
    }

    /// Set the lock's remaining life to `ttl` (`--min-hold` re-arms it).
    pub fn extend_for(&mut self, token: &str, ttl: Duration) -> Extend {
        let start = Instant::now();
        let limit = self.limit;
        let answers = self.each(|node, keys| match limit {
            1 => node.extend(keys, token, ttl),
            _ => node.extend_slot(keys, token, ttl),
        });
        let valid_until = timing::valid_until(start, ttl);
        let mut ours = 0;
        let mut lost = Vec::new();
        let mut errors = Vec::new();
        for answer in answers {
            match answer {
                Ok(Ownership::Ours) => ours += 1,
                Ok(other) => lost.push(other),
                Err(e) => errors.push(e),
            }
        }
        if ours >= self.needed() && Instant::now() < valid_until {
            return match self.confirm_replicas() {
                Ok(()) => Extend::Extended(valid_until),
                Err(e) => Extend::Failed(e),
            };
        }
        if self.nodes.len() - lost.len() < self.needed() {
            let replaced = lost.contains(&Ownership::Replaced);
            return Extend::Lost(if replaced {
                Ownership::Replaced
            } else {
                Ownership::Gone
            });
        }
        if errors.is_empty() {
            return Extend::Failed(anyhow!("refresh confirmed too late to count"));
        }
        Extend::Failed(join_errors(errors, self.nodes.len()))
    }

    /// With `--replicas N`: WAIT until N replicas have the last write, for
    /// at most half the per-node timeout. One node only (see config).
    fn confirm_replicas(&mut self) -> anyhow::Result<()> {
        let (wanted, limit) = (self.replicas, self.timeout / 2);
        if wanted == 0 {
            return Ok(());
        }
        for confirmed in self.each(|node, _| node.wait_replicas(wanted, limit)) {
            let confirmed = confirmed?;
            if confirmed < i64::from(wanted) {
                return Err(anyhow!(
                    "only {confirmed} of {wanted} replicas confirmed the lock within {}",
                    crate::log::show(limit)
                ));
            }
        }
        Ok(())
    }

    /// Release on every node, trying each up to `tries` times.
    pub fn release(&mut self, token: &str, tries: usize) -> Released {
        let limit = self.limit;
        let answers = self.each(|node, keys| {
            let mut release = || match limit {
                1 => node.release(keys, token),
                _ => node.release_slot(keys, token),
            };
            let mut last = release();
            for _ in 1..tries {
                if last.is_ok() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
                last = release();
            }
            last
        });
        let mut released = Released::default();
        for answer in answers {
            match answer {
                Ok(Ownership::Ours) => released.ours += 1,
                Ok(Ownership::Replaced) => released.replaced += 1,
                Ok(Ownership::Gone) => released.gone += 1,
                Err(e) => released.errors.push(e),
            }
        }
        released
    }
}

/// Several nodes' errors as one error: "2 of 3 nodes failed: a; b".
pub fn join_errors(errors: Vec<anyhow::Error>, nodes: usize) -> anyhow::Error {
    match errors.len() {
        0 => anyhow!("no quorum"),
        1 if nodes == 1 => errors.into_iter().next().expect("one error"),
        n => {
            let all: Vec<String> = errors.iter().map(|e| format!("{e:#}")).collect();
            anyhow!("{n} of {nodes} Redis nodes failed: {}", all.join("; "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quorum(n: usize) -> Quorum {
        let e = crate::config::conn(&crate::cli::ConnArgs {
            redis: vec!["redis://127.0.0.1:1".into(); n],
            prefix: "p:".into(),
            verbose: false,
            quiet: false,
            log_format: crate::log::Format::Text,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
        })
        .expect("valid urls")
        .endpoints;
        Quorum::new(
            &e,
            LockKeys::new("p:", "k"),
            Duration::from_secs(10),
            Duration::from_millis(100),
        )
    }

    #[test]
    fn majority_and_drift() {
        assert_eq!(quorum(1).needed(), 1);
        assert_eq!(quorum(2).needed(), 2);
        assert_eq!(quorum(3).needed(), 2);
        assert_eq!(quorum(5).needed(), 3);
    }
}
