//! One Redis node: connect with timeouts, and acquire, extend and release
//! through the scripts of `scripts.rs`, one EVAL round trip each.

use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use redis::{Connection, Value};

use crate::config::{scrub, Endpoint};
use crate::scripts;

/// The Redis keys of one lock (see `scripts.rs`).
#[derive(Debug, Clone)]
pub struct LockKeys {
    pub lock: String,
    pub holder: String,
    pub fence: String,
}

impl LockKeys {
    pub fn new(prefix: &str, key: &str) -> LockKeys {
        let lock = format!("{prefix}{{{key}}}");
        LockKeys {
            holder: format!("{lock}:holder"),
            fence: format!("{lock}:fence"),
            lock,
        }
    }

    fn all(&self) -> [&str; 3] {
        [&self.lock, &self.holder, &self.fence]
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
    pub pttl_ms: i64,
    pub host: String,
    pub pid: String,
    pub acquired_at: String,
}

/// One node's answer to an acquire.
#[derive(Debug, Clone)]
pub enum Acquire {
    Held { fence: i64 },
    Busy(BusyInfo),
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

    /// Run one script. Any failure drops the connection: after a timeout
    /// the stream may still carry a late reply.
    fn eval(&mut self, script: &str, keys: &LockKeys, args: &[&str]) -> Result<Value> {
        let result = self.connection().and_then(|conn| {
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(script).arg(3).arg(&keys.all()[..]).arg(args);
            cmd.query::<Value>(conn).map_err(describe)
        });
        if result.is_err() {
            self.conn = None;
        }
        result.with_context(|| scrub(&self.endpoint.shown))
    }

    pub fn acquire(
        &mut self,
        keys: &LockKeys,
        token: &str,
        ttl: Duration,
        holder: &Holder,
    ) -> Result<Acquire> {
        let ttl_ms = millis(ttl).to_string();
        let pid = holder.pid.to_string();
        let args = [
            token,
            &ttl_ms,
            &holder.host,
            &pid,
            &holder.user,
            &holder.command,
            &holder.acquired_at,
        ];
        let reply = self.eval(scripts::ACQUIRE, keys, &args)?;
        parse_acquire(reply)
            .with_context(|| format!("{}: unexpected reply to acquire", self.shown()))
    }

    pub fn extend(&mut self, keys: &LockKeys, token: &str, ttl: Duration) -> Result<Ownership> {
        let reply = self.eval(scripts::EXTEND, keys, &[token, &millis(ttl).to_string()])?;
        ownership(reply).with_context(|| format!("{}: unexpected reply to extend", self.shown()))
    }

    pub fn release(&mut self, keys: &LockKeys, token: &str) -> Result<Ownership> {
        let reply = self.eval(scripts::RELEASE, keys, &[token])?;
        ownership(reply).with_context(|| format!("{}: unexpected reply to release", self.shown()))
    }
}

/// Milliseconds for PX/PEXPIRE, at least 1 (0 is an error in Redis).
pub fn millis(d: Duration) -> u64 {
    (d.as_millis() as u64).max(1)
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
    anyhow!(scrub(&e.to_string()))
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
        })),
        _ => Err(anyhow!("{items:?}")),
    }
}

fn ownership(reply: Value) -> Result<Ownership> {
    match int(&reply) {
        Some(1) => Ok(Ownership::Ours),
        Some(0) => Ok(Ownership::Replaced),
        Some(-1) => Ok(Ownership::Gone),
        _ => Err(anyhow!("{reply:?}")),
    }
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
    }
}
