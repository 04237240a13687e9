//! What a lock is made of in Redis: the names of its keys, and the holder
//! record written beside it (see `calls.rs` for the layout).

/// The Redis keys of one lock (see `calls.rs`).
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
    /// newest-wins: the newest arrival in line.
    pub newest: String,
}

impl LockKeys {
    /// The keys of KEY under `prefix`: `P{K}`, and `P{K}:...` beside it,
    /// all in the Redis Cluster slot of the hash tag `{K}`. When that tag
    /// would be empty (KEY begins with `}`: `P{}x}`), Redis would hash
    /// each whole key and scatter them, so such a lock is `P}{~K}` (all in
    /// the slot of the tag `~`): never the form of another KEY, which
    /// always follows the prefix with `{`.
    pub fn new(prefix: &str, key: &str) -> LockKeys {
        let mut lock = format!("{prefix}{{{key}}}");
        if hash_tag(&lock) == Some("") && !prefix.contains('{') {
            lock = format!("{prefix}}}{{~{key}}}");
        }
        LockKeys {
            holder: format!("{lock}:holder"),
            fence: format!("{lock}:fence"),
            holders: format!("{lock}:holders"),
            limit: format!("{lock}:limit"),
            waiters: format!("{lock}:waiters"),
            newest: format!("{lock}:waiters:newest"),
            lock,
        }
    }

    /// The Redis Cluster slot of every key of this lock.
    pub fn slot(&self) -> u16 {
        slot(&self.lock)
    }

    /// The keys every script is given, in the order `calls.rs` documents.
    pub(super) fn all(&self) -> [&str; 7] {
        [
            &self.lock,
            &self.holder,
            &self.fence,
            &self.holders,
            &self.limit,
            &self.waiters,
            &self.newest,
        ]
    }

    /// KEYS of a script called by the holder of `token` (or by nobody in
    /// particular): `all()`, then that token's liveness hash and slot
    /// record (see `calls.rs`).
    pub(super) fn declared(&self, token: Option<&str>) -> Vec<String> {
        let mut keys: Vec<String> = self.all().iter().map(|k| k.to_string()).collect();
        if let Some(token) = token {
            keys.push(self.mark(token));
            keys.push(self.record(token));
        }
        keys
    }

    /// The liveness hash of the waiter with `token`, while it is in line.
    pub(super) fn mark(&self, token: &str) -> String {
        format!("{}:{token}", self.waiters)
    }

    /// The record of a semaphore's holder with `token`.
    pub(super) fn record(&self, token: &str) -> String {
        format!("{}:{token}", self.holder)
    }

    /// The channel on which a release that woke a waiter also says the
    /// lock was given back, for `wait KEY` (see `scripts::RELEASE`).
    pub fn free_channel(&self) -> String {
        format!("{}:free", self.lock)
    }

    /// The channel on which a release wakes the waiter with `token` when
    /// it is first in line.
    pub fn wake_channel(&self, token: &str) -> String {
        format!("{}:wake:{token}", self.lock)
    }
}

/// The hash tag of a Redis key: between its first `{` and the first `}`
/// after it. `Some("")` is the empty tag, which Redis ignores.
fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let len = key[open + 1..].find('}')?;
    Some(&key[open + 1..open + 1 + len])
}

/// The Redis Cluster slot of `key`: CRC16 (XMODEM) of its hash tag, or
/// of the whole key when it has none, modulo 16384.
pub fn slot(key: &str) -> u16 {
    let hashed = match hash_tag(key) {
        Some(tag) if !tag.is_empty() => tag,
        _ => key,
    };
    let mut crc: u16 = 0;
    for byte in hashed.bytes() {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = match crc & 0x8000 {
                0 => crc << 1,
                _ => (crc << 1) ^ 0x1021,
            };
        }
    }
    crc % 16384
}

/// Whether every lock under `prefix` can keep its keys in one Cluster
/// slot: not when the prefix's first `{` is followed by `}` (an empty
/// hash tag, whatever KEY is).
pub fn prefix_fits_cluster(prefix: &str) -> bool {
    hash_tag(prefix) != Some("")
}

/// What the holder record says about us.
#[derive(Debug, Clone)]
pub struct Holder {
    pub host: String,
    pub pid: u32,
    pub user: String,
    pub command: String,
    pub acquired_at: String,
    /// `--label` (empty: none): kept in the record and with a waiter.
    pub label: String,
    /// The holder's refresh period and its grace between SIGTERM and
    /// SIGKILL: a force-release waits this long for it to stop.
    pub refresh_ms: u64,
    pub kill_after_ms: u64,
    /// How we stand in line while the lock is busy (`--queue`).
    pub queue: crate::queue::Queue,
    /// `--queue-max`: at most this many waiters in line (0: unbounded).
    pub queue_max: u32,
    /// `redlock-run hold --reason`: why KEY is held with no command
    /// (empty: a run).
    pub hold_reason: String,
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

    #[test]
    fn every_key_of_a_lock_shares_one_slot() {
        assert_eq!(slot("123456789"), 0x31C3);
        assert_eq!(slot("{user1000}.following"), slot("user1000"));
        for key in ["}x", "a{b}c", "{", "}", "}}", "{}", "x", "a b"] {
            let k = LockKeys::new("redlock:", key);
            let all = k.all();
            assert!(
                all.iter().all(|name| slot(name) == k.slot()),
                "{key}: {all:?}"
            );
            assert!(hash_tag(&k.lock).is_some_and(|t| !t.is_empty()), "{key}");
        }
        assert_eq!(LockKeys::new("redlock:", "}x").lock, "redlock:}{~}x}");
        assert_eq!(LockKeys::new("redlock:", "a{b}c").lock, "redlock:{a{b}c}");
        assert!(!prefix_fits_cluster("a{}:"));
        assert!(prefix_fits_cluster("a{b}:"));
    }
}
