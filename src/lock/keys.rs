//! What a lock is made of in Redis: the names of its keys, and the holder
//! record written beside it (see `scripts.rs` for the layout).

/// The Redis keys of one lock (see `scripts.rs`).
#[derive(Debug, Clone)]
pub struct LockKeys {
    pub lock: String,
    pub holder: String,
    pub fence: String,
    /// `--limit N > 1`: the holders of a semaphore, token -> expiry (ms).
    pub holders: String,
    /// `--limit N > 1`: N, while any holder lives.
    pub limit: String,
    /// Tokens waiting for the lock, by arrival.
    pub waiters: String,
}

impl LockKeys {
    pub fn new(prefix: &str, key: &str) -> LockKeys {
        let lock = format!("{prefix}{{{key}}}");
        LockKeys {
            holder: format!("{lock}:holder"),
            fence: format!("{lock}:fence"),
            holders: format!("{lock}:holders"),
            limit: format!("{lock}:limit"),
            waiters: format!("{lock}:waiters"),
            lock,
        }
    }

    /// KEYS of every script, in the order `scripts.rs` documents.
    pub(super) fn all(&self) -> [&str; 6] {
        [
            &self.lock,
            &self.holder,
            &self.fence,
            &self.holders,
            &self.limit,
            &self.waiters,
        ]
    }

    /// The channel on which a release wakes the waiter with `token` when
    /// it is first in line.
    pub fn wake_channel(&self, token: &str) -> String {
        format!("{}:wake:{token}", self.lock)
    }
}

/// What the holder record says about us.
#[derive(Debug, Clone)]
pub struct Holder {
    pub host: String,
    pub pid: u32,
    pub user: String,
    pub command: String,
    pub acquired_at: String,
    /// The holder's refresh period and its grace between SIGTERM and
    /// SIGKILL: a force-release waits this long for it to stop.
    pub refresh_ms: u64,
    pub kill_after_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_a_hash_tag() {
        let k = LockKeys::new("redlock:", "a b");
        assert_eq!(k.lock, "redlock:{a b}");
        assert_eq!(k.holder, "redlock:{a b}:holder");
        assert_eq!(k.fence, "redlock:{a b}:fence");
        assert_eq!(k.holders, "redlock:{a b}:holders");
        assert_eq!(k.limit, "redlock:{a b}:limit");
    }
}
