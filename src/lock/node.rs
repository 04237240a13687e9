//! One Redis node: connect with timeouts, and acquire, extend and release
//! through the scripts of `scripts.rs`, one EVAL round trip each.

use std::time::{Duration, SystemTime};

use anyhow::{anyhow, Context, Result};
use redis::{Connection, Value};

use super::scripts;
use super::timing::millis;
use crate::config::{scrub, Endpoint};

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

    fn all(&self) -> [&str; 6] {
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
}

/// Who holds a busy lock, as the acquire script saw it.
#[derive(Debug, Clone, Default)]
pub struct BusyInfo {
    /// Until the lock (a semaphore: its first slot) expires.
    pub pttl_ms: i64,
    pub host: String,
    pub pid: String,
    pub acquired_at: String,
    /// A semaphore: how many hold it, and its limit (both 0: a plain lock).
    pub holders: u32,
    pub limit: u32,
}

/// One node's answer to an acquire.
#[derive(Debug, Clone)]
pub enum Acquire {
    Held {
        fence: i64,
    },
    Busy(BusyInfo),
    /// KEY is held with another `--limit` (1: a plain lock); nothing done.
    Mismatch {
        limit: u32,
    },
}

/// Whose the lock is, as found by extend and release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    /// Ours (and now extended, or released).
    Ours,
    /// Another token holds it.
    Replaced,
    /// Nobody holds it: expired or deleted.
    Gone,
}

/// A connection to one node, made on first use and remade after an error.
pub struct Node {
    endpoint: Endpoint,
    timeout: Duration,
    conn: Option<Connection>,
}

impl Node {
    /// `timeout` bounds connecting and every command.
    pub fn new(endpoint: Endpoint, timeout: Duration) -> Node {
        Node {
            endpoint,
            timeout,
            conn: None,
        }
    }

    /// The node's URL, password redacted.
    pub fn shown(&self) -> &str {
        &self.endpoint.shown
    }

    fn connection(&mut self) -> Result<&mut Connection> {
        if self.conn.is_none() {
            let client = redis::Client::open(self.endpoint.info.clone()).map_err(describe)?;
            let conn = client
                .get_connection_with_timeout(self.timeout)
                .map_err(describe)?;
            conn.set_read_timeout(Some(self.timeout))
                .map_err(describe)?;
            conn.set_write_timeout(Some(self.timeout))
                .map_err(describe)?;
            self.conn = Some(conn);
        }
        Ok(self.conn.as_mut().expect("connection was just made"))
    }

    /// Send one command. Any failure drops the connection: after a timeout
    /// the stream may still carry a late reply.
    fn query<T: redis::FromRedisValue>(&mut self, cmd: &redis::Cmd) -> Result<T> {
        let result = self
            .connection()
            .and_then(|conn| cmd.query::<T>(conn).map_err(describe));
        if result.is_err() {
            self.conn = None;
        }
        result.with_context(|| scrub(&self.endpoint.shown))
    }

    /// Run one script with the lock's keys.
    fn eval(&mut self, script: &str, keys: &LockKeys, args: &[&str]) -> Result<Value> {
        let all = keys.all();
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(script).arg(all.len()).arg(&all[..]).arg(args);
        self.query(&cmd)
    }

    /// Take the lock; with `queue`, a busy answer also puts us in line
    /// (see `scripts::ACQUIRE`).
    pub fn acquire(
        &mut self,
        keys: &LockKeys,
        token: &str,
        ttl: Duration,
        holder: &Holder,
        queue: bool,
    ) -> Result<Acquire> {
        let now_ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis()
            .to_string();
        let queue = if queue { "1" } else { "0" };
        self.take(
            scripts::ACQUIRE,
            keys,
            token,
            ttl,
            holder,
            &[queue, &now_ms],
        )
    }

    /// Run an acquire script: ARGV is the token, the TTL in ms, the holder
    /// record (host, pid, user, command, acquired_at), then `extra`.
    fn take(
        &mut self,
        script: &str,
        keys: &LockKeys,
        token: &str,
        ttl: Duration,
        holder: &Holder,
        extra: &[&str],
    ) -> Result<Acquire> {
        let (ttl_ms, pid) = (millis(ttl).to_string(), holder.pid.to_string());
        let record = [
            &holder.host,
            &pid,
            &holder.user,
            &holder.command,
            &holder.acquired_at,
        ];
        let mut args = vec![token, &ttl_ms];
        args.extend(record.iter().map(|s| s.as_str()));
        args.extend(extra);
        let reply = self.eval(script, keys, &args)?;
        parse_acquire(reply)
            .with_context(|| format!("{}: unexpected reply to acquire", self.shown()))
    }

    pub fn extend(&mut self, keys: &LockKeys, token: &str, ttl: Duration) -> Result<Ownership> {
        let reply = self.eval(scripts::EXTEND, keys, &[token, &millis(ttl).to_string()])?;
        ownership(reply).with_context(|| format!("{}: unexpected reply to extend", self.shown()))
    }

    /// WAIT for `replicas` replicas to have this connection's writes;
    /// returns how many confirmed within `limit`.
    pub fn wait_replicas(&mut self, replicas: u32, limit: Duration) -> Result<i64> {
        self.query(redis::cmd("WAIT").arg(replicas).arg(millis(limit)))
    }

    /// Leave the line of waiters.
    pub fn leave(&mut self, keys: &LockKeys, token: &str) -> Result<()> {
        self.eval(scripts::LEAVE, keys, &[token]).map(drop)
    }

    pub fn release(&mut self, keys: &LockKeys, token: &str) -> Result<Ownership> {
        let reply = self.eval(scripts::RELEASE, keys, &[token])?;
        ownership(reply).with_context(|| format!("{}: unexpected reply to release", self.shown()))
    }
}

/// A semaphore (`--limit N`, N > 1): each holder takes, refreshes and
/// gives back its own slot, by token, through the `SLOT_*` scripts.
impl Node {
    pub fn acquire_slot(
        &mut self,
        keys: &LockKeys,
        token: &str,
        ttl: Duration,
        holder: &Holder,
        limit: u32,
    ) -> Result<Acquire> {
        let limit = limit.to_string();
        self.take(scripts::SLOT_ACQUIRE, keys, token, ttl, holder, &[&limit])
    }

    pub fn extend_slot(
        &mut self,
        keys: &LockKeys,
        token: &str,
        ttl: Duration,
    ) -> Result<Ownership> {
        let reply = self.eval(
            scripts::SLOT_EXTEND,
            keys,
            &[token, &millis(ttl).to_string()],
        )?;
        ownership(reply).with_context(|| format!("{}: unexpected reply to extend", self.shown()))
    }

    pub fn release_slot(&mut self, keys: &LockKeys, token: &str) -> Result<Ownership> {
        let reply = self.eval(scripts::SLOT_RELEASE, keys, &[token])?;
        ownership(reply).with_context(|| format!("{}: unexpected reply to release", self.shown()))
    }
}

/// A Redis error as one readable line: the server's own words for error
/// replies (NOPERM, WRONGPASS...), the OS error for I/O.
fn describe(e: redis::RedisError) -> anyhow::Error {
    if e.is_timeout() {
        return anyhow!("timed out");
    }
    if e.is_connection_refusal() {
        return anyhow!("connection refused");
    }
    // Never the server's or the library's words here: say what to fix.
    if e.kind() == redis::ErrorKind::AuthenticationFailed || e.code() == Some("WRONGPASS") {
        return anyhow!("authentication failed: wrong user name or password in the URL");
    }
    // An unauthenticated client may not even send a long script.
    if e.code() == Some("NOAUTH") || e.to_string().contains("unauthenticated") {
        return anyhow!(
            "authentication required: give the password in the URL \
             (redis://[USER]:PASSWORD@HOST:PORT)"
        );
    }
    let message = e.to_string();
    anyhow!(scrub(&format!("{message}{}", hint(&message))))
}

/// What to do about the usual TLS and ACL complaints.
fn hint(message: &str) -> &'static str {
    let acl = [
        "NoPerm",
        "NOPERM",
        "can't run this command",
        "No permissions to access",
    ];
    if acl.iter().any(|needle| message.contains(needle)) {
        " (the Redis user lacks a permission: see REDIS PERMISSIONS in redlock-run(1))"
    } else if message.contains("invalid peer certificate") {
        " (is the server's CA in --tls-ca?)"
    } else if message.contains("CertificateRequired") {
        " (the server wants a client certificate: --tls-cert and --tls-key)"
    } else {
        ""
    }
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        _ => String::new(),
    }
}

fn parse_acquire(reply: Value) -> Result<Acquire> {
    let Value::Array(items) = reply else {
        return Err(anyhow!("{reply:?}"));
    };
    match items.first().and_then(int) {
        Some(1) => Ok(Acquire::Held {
            fence: items
                .get(1)
                .and_then(int)
                .ok_or_else(|| anyhow!("no fence"))?,
        }),
        Some(0) => Ok(Acquire::Busy(BusyInfo {
            pttl_ms: items.get(1).and_then(int).unwrap_or(-1),
            host: items.get(2).map(text).unwrap_or_default(),
            pid: items.get(3).map(text).unwrap_or_default(),
            acquired_at: items.get(4).map(text).unwrap_or_default(),
            // A semaphore's reply adds how many hold it, and its limit.
            holders: items
                .get(5)
                .map(|v| limit(Some(v)))
                .transpose()?
                .unwrap_or(0),
            limit: items
                .get(6)
                .map(|v| limit(Some(v)))
                .transpose()?
                .unwrap_or(0),
        })),
        Some(-1) => Ok(Acquire::Mismatch {
            limit: limit(items.get(1))?,
        }),
        _ => Err(anyhow!("{items:?}")),
    }
}

/// A limit as a script sent it.
fn limit(v: Option<&Value>) -> Result<u32> {
    v.and_then(int)
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| anyhow!("bad limit {v:?}"))
}

fn ownership(reply: Value) -> Result<Ownership> {
    match int(&reply) {
        Some(1) => Ok(Ownership::Ours),
        Some(0) => Ok(Ownership::Replaced),
        Some(-1) => Ok(Ownership::Gone),
        _ => Err(anyhow!("{reply:?}")),
    }
}

/// Wake-ups from a lock's release channel (see `scripts::RELEASE`), on a
/// connection of their own: the lock's connection stays free for commands.
pub struct Wakeups {
    conn: Connection,
}

impl Node {
    /// Whether this node answered the last command (its connection is open).
    pub fn is_connected(&self) -> bool {
        self.conn.is_some()
    }

    /// Open a second connection to this node, subscribed to `channels`.
    pub fn subscribe(&self, channels: &[&str]) -> Result<Wakeups> {
        let mut other = Node::new(self.endpoint.clone(), self.timeout);
        // A plain query, unlike `PubSub::subscribe`, reports NOPERM. It
        // reads the first confirmation; `get_message` skips the others.
        other.query::<Value>(redis::cmd("SUBSCRIBE").arg(channels))?;
        let conn = other.conn.take().ok_or_else(|| anyhow!("not connected"))?;
        Ok(Wakeups { conn })
    }
}

impl Wakeups {
    /// Block up to `d` (not zero) for a message: `Ok(true)` if one came,
    /// `Ok(false)` on timeout, an error if the connection broke.
    pub fn wait(&mut self, d: Duration) -> Result<bool> {
        let mut pubsub = self.conn.as_pubsub();
        let got = pubsub
            .set_read_timeout(Some(d))
            .and_then(|()| pubsub.get_message());
        // Dropping a PubSub unsubscribes: a round trip that could block on a
        // dead server. The subscription ends with the connection instead.
        // Nothing leaks: its queue only fills while a command awaits a reply.
        std::mem::forget(pubsub);
        match got {
            Ok(_) => Ok(true),
            Err(e) if e.is_timeout() => Ok(false),
            Err(e) => Err(describe(e)),
        }
    }
}

/// A lock as one node sees it, read in one round trip by `scripts::INSPECT`.
#[derive(Debug, Clone, Default)]
pub struct Inspected {
    /// The holder's token; `None` when the lock is free on this node.
    pub token: Option<String>,
    /// Milliseconds the lock has left (negative when free).
    pub pttl_ms: i64,
    /// The fence counter: the last fencing token issued (0: never).
    pub fence: i64,
    /// The holder record, field by field (empty when free or missing).
    pub holder: Vec<(String, String)>,
    /// A semaphore's limit N (0: KEY is no semaphore on this node).
    pub limit: u32,
    /// A semaphore's live holders.
    pub slots: Vec<Slot>,
}

impl Inspected {
    /// A field of the holder record, if present.
    pub fn field(&self, name: &str) -> Option<&str> {
        field(&self.holder, name)
    }
}

/// One holder of a semaphore, as one node sees it.
#[derive(Debug, Clone, Default)]
pub struct Slot {
    pub token: String,
    /// Milliseconds the slot has left.
    pub pttl_ms: i64,
    /// Its holder record (with a `fence` field), field by field.
    pub holder: Vec<(String, String)>,
}

impl Slot {
    /// A field of the holder record, if present.
    pub fn field(&self, name: &str) -> Option<&str> {
        field(&self.holder, name)
    }
}

fn field<'a>(record: &'a [(String, String)], name: &str) -> Option<&'a str> {
    record
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// What `force_release` did on one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forced {
    Deleted,
    /// Held by a token other than the one required; left alone.
    Mismatch,
    /// Nothing to delete.
    Free,
}

/// Inspection and deletion by hand, for `status`, `list` and `force-release`.
impl Node {
    /// Read a lock, its holder record and its fence, changing nothing.
    pub fn inspect(&mut self, keys: &LockKeys) -> Result<Inspected> {
        let reply = self.eval(scripts::INSPECT, keys, &[])?;
        let Value::Array(items) = reply else {
            return Err(anyhow!("{}: unexpected reply to inspect", self.shown()));
        };
        parse_inspected(&items)
            .with_context(|| format!("{}: unexpected reply to inspect", self.shown()))
    }

    /// Delete a lock and its holder record, whoever holds it, or only if it
    /// holds `token`. Returns what was done and the lock as it was.
    pub fn force_release(
        &mut self,
        keys: &LockKeys,
        token: Option<&str>,
    ) -> Result<(Forced, Inspected)> {
        let args = match token {
            Some(token) => ["1", token],
            None => ["0", ""],
        };
        let reply = self.eval(scripts::FORCE_RELEASE, keys, &args)?;
        let parsed = match &reply {
            Value::Array(items) => {
                let outcome = match items.first().and_then(int) {
                    Some(1) => Some(Forced::Deleted),
                    Some(0) => Some(Forced::Mismatch),
                    Some(-1) => Some(Forced::Free),
                    _ => None,
                };
                outcome.zip(parse_inspected(&items[1..]).ok())
            }
            _ => None,
        };
        parsed.ok_or_else(|| anyhow!("{}: unexpected reply to force-release", self.shown()))
    }

    /// The names (KEY, not `P{KEY}`) of every lock under `prefix` on this
    /// node, found with SCAN (KEYS would block the server): plain locks
    /// `P{KEY}` and semaphores `P{KEY}:limit`, both strings. Holder, fence
    /// and holder-set keys never match: the pattern ends with the closing
    /// brace or the `t` of `:limit`. Names that this tool could not have
    /// written are skipped.
    pub fn scan_locks(&mut self, prefix: &str) -> Result<Vec<String>> {
        let pattern = format!("{}{{*[}}t]", glob_escape(prefix));
        let mut names = Vec::new();
        let mut cursor: u64 = 0;
        loop {
            let mut cmd = redis::cmd("SCAN");
            cmd.arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .arg("TYPE")
                .arg("string");
            let (next, batch): (u64, Vec<Vec<u8>>) = self.query(&cmd)?;
            names.extend(batch.iter().filter_map(|raw| lock_name(prefix, raw)));
            if next == 0 {
                break;
            }
            cursor = next;
        }
        names.sort();
        names.dedup();
        Ok(names)
    }
}

/// A holder hash as HGETALL sends it.
fn record(v: Option<&Value>) -> Vec<(String, String)> {
    match v {
        Some(Value::Array(flat)) => flat
            .chunks_exact(2)
            .map(|pair| (text(&pair[0]), text(&pair[1])))
            .collect(),
        Some(Value::Map(pairs)) => pairs.iter().map(|(k, v)| (text(k), text(v))).collect(),
        _ => Vec::new(),
    }
}

/// `[token, pttl, fence, holder, limit?, slots?]` as sent by INSPECT and
/// FORCE_RELEASE.
fn parse_inspected(items: &[Value]) -> Result<Inspected> {
    let token = match items.first() {
        Some(Value::Nil) | None => None,
        Some(v) => Some(text(v)),
    };
    let pttl_ms = items
        .get(1)
        .and_then(int)
        .ok_or_else(|| anyhow!("no pttl"))?;
    let fence = items
        .get(2)
        .and_then(int)
        .ok_or_else(|| anyhow!("no fence"))?;
    let holder = record(items.get(3));
    let limit = match items.get(4) {
        None => 0,
        some => limit(some)?,
    };
    let slots = match items.get(5) {
        Some(Value::Array(slots)) => slots
            .iter()
            .map(|slot| match slot {
                Value::Array(parts) => Ok(Slot {
                    token: parts.first().map(text).unwrap_or_default(),
                    pttl_ms: parts
                        .get(1)
                        .and_then(int)
                        .ok_or_else(|| anyhow!("no slot pttl"))?,
                    holder: record(parts.get(2)),
                }),
                other => Err(anyhow!("bad slot {other:?}")),
            })
            .collect::<Result<_>>()?,
        _ => Vec::new(),
    };
    Ok(Inspected {
        token,
        pttl_ms,
        fence,
        holder,
        limit,
        slots,
    })
}

/// `prefix` as a literal in a SCAN MATCH pattern.
fn glob_escape(prefix: &str) -> String {
    let mut out = String::with_capacity(prefix.len());
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// KEY from a scanned `P{KEY}`. KEY may itself hold braces and colons, so
/// strip the ends rather than split. Not UTF-8, empty or with control
/// characters: not written by this tool, skipped.
fn lock_name(prefix: &str, raw: &[u8]) -> Option<String> {
    let key = std::str::from_utf8(raw).ok()?;
    let inner = key.strip_prefix(prefix)?.strip_prefix('{')?;
    let name = inner
        .strip_suffix('}')
        .or_else(|| inner.strip_suffix("}:limit"))?;
    if name.is_empty() || name.chars().any(char::is_control) {
        return None;
    }
    Some(name.to_string())
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
    fn scanned_names_are_parsed_from_the_ends() {
        assert_eq!(lock_name("p:", b"p:{a}").as_deref(), Some("a"));
        assert_eq!(
            lock_name("p:", "p:{x {y}: z ü}".as_bytes()).as_deref(),
            Some("x {y}: z ü")
        );
        assert_eq!(lock_name("p:", b"p:{a}:holder"), None);
        assert_eq!(lock_name("p:", b"p:{a}:fence"), None);
        assert_eq!(lock_name("p:", b"p:{a}:limit").as_deref(), Some("a"));
        assert_eq!(lock_name("p:", b"p:{a}:holders"), None);
        assert_eq!(lock_name("p:", b"p:{a}:holder:1-2"), None);
        assert_eq!(
            lock_name("p:", b"p:{a}:limit}").as_deref(),
            Some("a}:limit")
        );
        assert_eq!(lock_name("p:", b"p:{}"), None);
        assert_eq!(lock_name("p:", b"q:{a}"), None);
        assert_eq!(lock_name("p:", b"p:{a\x01}"), None);
        assert_eq!(lock_name("p:", b"p:{\xff}"), None);
    }

    #[test]
    fn prefixes_are_literal_in_patterns() {
        assert_eq!(glob_escape("redlock:"), "redlock:");
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
