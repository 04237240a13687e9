//! The lock across N nodes (Redlock): a majority must agree, within the
//! lock's validity. One node is simply a quorum of one: same code path.

use std::time::{Duration, Instant};

use anyhow::anyhow;

use crate::config::Endpoint;
use crate::lock::{Acquire, BusyInfo, Holder, LockKeys, Node, Ownership};

/// A lock we hold, valid (by our own monotonic clock) until `valid_until`.
#[derive(Debug, Clone, Copy)]
pub struct Lease {
    pub fence: i64,
    pub valid_until: Instant,
}

/// The result of one acquisition attempt.
pub enum Attempt {
    Acquired(Lease),
    Busy(BusyInfo),
    /// Fewer than a quorum of nodes answered.
    Unavailable(anyhow::Error),
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
        }
    }

    /// How many nodes must agree: a majority.
    pub fn needed(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    fn drift(&self) -> Duration {
        crate::config::drift(self.ttl)
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

    pub fn try_acquire(&mut self, token: &str, holder: &Holder) -> Attempt {
        let ttl = self.ttl;
        let start = Instant::now();
        let answers = self.each(|node, keys| node.acquire(keys, token, ttl, holder));
        let valid_until = start + ttl - self.drift();
        let mut fences = Vec::new();
        let mut busy = None;
        let mut errors = Vec::new();
        for answer in answers {
            match answer {
                Ok(Acquire::Held { fence }) => fences.push(fence),
                Ok(Acquire::Busy(info)) => {
                    busy.get_or_insert(info);
                }
                Err(e) => errors.push(e),
            }
        }
        if fences.len() >= self.needed() && Instant::now() < valid_until {
            let fence = fences.into_iter().max().unwrap_or_default();
            return Attempt::Acquired(Lease { fence, valid_until });
        }
        if !fences.is_empty() || !errors.is_empty() {
            // Some nodes may hold our token (a reply may also have been lost):
            // give them all back before anyone retries.
            self.release(token, 1);
        }
        if self.nodes.len() - errors.len() < self.needed() {
            return Attempt::Unavailable(join_errors(errors, self.nodes.len()));
        }
        Attempt::Busy(busy.unwrap_or_default())
    }

    pub fn extend(&mut self, token: &str) -> Extend {
        let ttl = self.ttl;
        let start = Instant::now();
        let answers = self.each(|node, keys| node.extend(keys, token, ttl));
        let valid_until = start + ttl - self.drift();
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
            return Extend::Extended(valid_until);
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

    /// Release on every node, trying each up to `tries` times.
    pub fn release(&mut self, token: &str, tries: usize) -> Released {
        let answers = self.each(|node, keys| {
            let mut last = node.release(keys, token);
            for _ in 1..tries {
                if last.is_ok() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
                last = node.release(keys, token);
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
fn join_errors(errors: Vec<anyhow::Error>, nodes: usize) -> anyhow::Error {
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
        assert_eq!(quorum(1).drift(), Duration::from_millis(102));
    }
}
