//! The scripts' replies, parsed into types: no `-1`/`-2`/`0` sentinels
//! leave this file. Every number from Redis is range-checked here.

use std::time::Duration;

use anyhow::{anyhow, Result};
use redis::Value;

/// Who holds a busy lock, as the acquire script saw it.
#[derive(Debug, Clone, Default)]
pub struct BusyInfo {
    /// Until the lock (a semaphore: its first slot) expires; `None` when
    /// it has no expiry (not written by this tool) or just vanished.
    pub pttl: Option<Duration>,
    pub host: String,
    pub pid: String,
    pub acquired_at: String,
    /// Empty when the record lacks them (an older holder, a semaphore).
    pub user: String,
    pub label: String,
    /// Held by `redlock-run hold`: its reason (empty: a run).
    pub hold_reason: String,
    /// A semaphore whose slots are all taken: how many hold it, of how
    /// many; held shared (`--shared`): how many, of `limit` 0 (the fields
    /// above then describe the newest of them).
    pub slots: Option<SlotsTaken>,
    /// Being force-released: waiting for its holder to stop.
    pub revoked: bool,
    /// `--queue newest-wins`: a newer waiter took our place in line
    /// (its host and pid); we must leave without the lock.
    pub replaced_by: Option<(String, String)>,
    /// `--queue-max`: the line was full (this many live waiters) and we
    /// were not added to it; we must leave without waiting.
    pub line_full: Option<u64>,
    /// Where we stand in line, when this try queued us.
    pub place: Option<Place>,
    /// Several nodes: this try held some of them, not a majority, and gave
    /// them back without waking anyone: try again soon.
    pub split: bool,
    /// Several nodes: a node that granted this try (not a majority) had
    /// its fence counter started anew (see `Lease::reset`).
    pub reset: bool,
    /// The lock's fence counter existed: the holder, even one whose lease
    /// is not shown, took a lock this tool grants (not one set by hand),
    /// and data lost under it starts the counter anew (see `wait.rs`).
    pub counted: bool,
    /// Several nodes: the holder that a majority of them named, so that
    /// it held the lock (see [`holder_id`]); not a rival's minority.
    pub held_by: Option<std::num::NonZeroU64>,
}

impl BusyInfo {
    /// Which grant of a holder this is (see [`holder_id`]).
    pub fn holder_id(&self) -> Option<std::num::NonZeroU64> {
        holder_id(&self.host, &self.pid, &self.acquired_at)
    }
}

/// Which grant of a holder a record names (its host, pid and acquired-at),
/// to tell the holder we saw from one that took a node since; `None` for
/// a lock without a record.
pub fn holder_id(host: &str, pid: &str, acquired_at: &str) -> Option<std::num::NonZeroU64> {
    use std::hash::{Hash, Hasher};
    if acquired_at.is_empty() {
        return None;
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (host, pid, acquired_at).hash(&mut h);
    std::num::NonZeroU64::new(h.finish() | 1)
}

/// Where a waiter stands in line, as a queued try's busy answer says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Place {
    /// No live waiter stands before us.
    pub first: bool,
    /// Members of the queue, live or not.
    pub members: u64,
    /// The lock is free, but a live waiter stands before us: until its
    /// liveness key expires (unless it tries again or refreshes it).
    pub ahead_left: Option<Duration>,
    /// Whether the server sees our subscription; `None`: it cannot tell
    /// (PUBSUB refused to the user).
    pub seen: Option<bool>,
}

/// A full semaphore: `holders` of `limit` slots taken; a lock held
/// shared: `holders` and `limit` 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotsTaken {
    pub holders: u32,
    pub limit: u32,
}

/// One node's answer to an acquire.
#[derive(Debug, Clone)]
pub enum Acquire {
    /// Ours now. `reset`: the fence counter was missing and was seeded
    /// from the server's clock (the data in Redis was lost).
    Held { fence: i64, reset: bool },
    /// Boxed: a busy answer is the rare one, and large.
    Busy(Box<BusyInfo>),
    /// KEY is held with another `--limit` (1: a plain lock); nothing done.
    Mismatch { limit: u32 },
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
    /// Ours, but force-released by an operator: stop, then release.
    Revoked,
}

/// A lock as one node sees it, read in one round trip by `scripts::INSPECT`.
#[derive(Debug, Clone, Default)]
pub struct Inspected {
    /// The holder's token; `None` when the lock is free on this node.
    pub token: Option<String>,
    /// Time the lock has left; `None` when free or without expiry.
    pub pttl: Option<Duration>,
    /// The fence counter: the last fencing token issued (0: never).
    pub fence: i64,
    /// The holder record, field by field (empty when free or missing).
    pub holder: Vec<(String, String)>,
    /// A semaphore's limit N; `None` when KEY is no semaphore on this node.
    pub limit: Option<u32>,
    /// A semaphore's live holders.
    pub slots: Vec<Slot>,
    /// Force-released, waiting for its holder to stop.
    pub revoked: bool,
    /// Held shared (`--shared`): its holders are in `slots`, and `token`
    /// is `None` (the lock key holds the mark `shared`, no token).
    pub shared: bool,
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
    /// Time the slot has left.
    pub pttl: Option<Duration>,
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
    /// Deleted at once (`--now`, or a semaphore's slot).
    Deleted,
    /// Marked revoked: waiters get it once its holder has stopped.
    Revoked,
    /// Held by a token other than the one required; left alone.
    Mismatch,
    /// Nothing to delete.
    Free,
}

pub(super) fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

pub(super) fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        _ => String::new(),
    }
}

/// A PTTL as Redis answers it: negative for "no expiry" and "no key".
fn pttl(v: Option<&Value>) -> Result<Option<Duration>> {
    let ms = v.and_then(int).ok_or_else(|| anyhow!("no pttl"))?;
    Ok(u64::try_from(ms).ok().map(Duration::from_millis))
}

/// A limit as a script sent it.
fn limit(v: Option<&Value>) -> Result<u32> {
    v.and_then(int)
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| anyhow!("bad limit {v:?}"))
}

pub(super) fn items(reply: Value) -> Result<Vec<Value>> {
    match reply {
        Value::Array(items) => Ok(items),
        other => Err(anyhow!("{other:?}")),
    }
}

/// `{1, fence, reset}`, `{0, pttl, host, pid, acquired_at, holders?,
/// limit?, revoked?, first?, line?, ahead_ms?, seen?, user?, label?, hold_reason?,
/// counted?}`, `{-1, limit}` or `{-2, host, pid}` (see
/// `scripts::ACQUIRE`).
pub fn acquire(reply: Value) -> Result<Acquire> {
    match screened(reply)? {
        Screened::Answer(answer) => Ok(answer),
        other => Err(anyhow!(
            "an eviction check's answer that was not asked for: {other:?}"
        )),
    }
}

/// An acquire script's reply and the server that gave it: with `say`
/// (ARGV[15], see `scripts::saying_server`) the reply is `{answer,
/// run_id}`, else the answer alone. `None`: not asked, or the server did
/// not say (`INFO` refused to the user).
pub fn said(reply: Value, say: bool) -> Result<(Value, Option<String>)> {
    if !say {
        return Ok((reply, None));
    }
    match items(reply)?.as_mut_slice() {
        [answer @ Value::Array(_), id @ (Value::BulkString(_) | Value::SimpleString(_))] => {
            let id = text(id);
            let answer = std::mem::replace(answer, Value::Nil);
            Ok((answer, Some(id).filter(|id| !id.is_empty())))
        }
        other => Err(anyhow!("no server named: {other:?}")),
    }
}

/// An acquire script's reply when it was asked to check eviction first
/// (ARGV[14], see `scripts::eviction_lib`).
#[derive(Debug)]
pub enum Screened {
    /// The server may evict the key: `maxmemory`, `maxmemory-policy`.
    /// Nothing was written.
    Evicts(String, String),
    /// `INFO memory` was refused (the error): nothing was written.
    NoInfo(String),
    /// Checked (or not asked): the acquire's own answer.
    Answer(Acquire),
}

/// [`acquire`] with the checks' answers: `{-3, maxmemory, policy}` and
/// `{-4, error}`.
pub fn screened(reply: Value) -> Result<Screened> {
    let items = items(reply)?;
    let field = |i: usize| items.get(i).map(text).unwrap_or_default();
    match items.first().and_then(int) {
        Some(-3) => Ok(Screened::Evicts(field(1), field(2))),
        Some(-4) => Ok(Screened::NoInfo(field(1))),
        Some(1) => Ok(Screened::Answer(Acquire::Held {
            fence: items
                .get(1)
                .and_then(int)
                .ok_or_else(|| anyhow!("no fence"))?,
            reset: items.get(2).and_then(int) == Some(1),
        })),
        Some(0) => Ok(Screened::Answer(Acquire::Busy(Box::new(busy(&items)?)))),
        Some(-1) => Ok(Screened::Answer(Acquire::Mismatch {
            limit: limit(items.get(1))?,
        })),
        // Replaced in line: busy for us, for good.
        Some(-2) => Ok(Screened::Answer(Acquire::Busy(Box::new(BusyInfo {
            replaced_by: Some((field(1), field(2))),
            ..BusyInfo::default()
        })))),
        // The line is full (--queue-max): busy for us, nothing written.
        Some(-5) => Ok(Screened::Answer(Acquire::Busy(Box::new(BusyInfo {
            line_full: Some(
                items
                    .get(1)
                    .and_then(int)
                    .and_then(|n| u64::try_from(n).ok())
                    .ok_or_else(|| anyhow!("a full line without its length: {items:?}"))?,
            ),
            ..BusyInfo::default()
        })))),
        _ => Err(anyhow!("{items:?}")),
    }
}

fn busy(items: &[Value]) -> Result<BusyInfo> {
    let slots = match (items.get(5), items.get(6)) {
        (Some(holders), Some(n)) if int(n).is_some_and(|n| n > 0) => Some(SlotsTaken {
            holders: limit(Some(holders))?,
            limit: limit(Some(n))?,
        }),
        // Held shared (see `scripts/shared.rs`).
        (Some(holders), Some(n)) if int(n) == Some(-1) => Some(SlotsTaken {
            holders: limit(Some(holders))?,
            limit: 0,
        }),
        _ => None,
    };
    Ok(BusyInfo {
        pttl: pttl(items.get(1))?,
        host: items.get(2).map(text).unwrap_or_default(),
        pid: items.get(3).map(text).unwrap_or_default(),
        acquired_at: items.get(4).map(text).unwrap_or_default(),
        user: items.get(12).map(text).unwrap_or_default(),
        label: items.get(13).map(text).unwrap_or_default(),
        hold_reason: items.get(14).map(text).unwrap_or_default(),
        counted: items.get(15).and_then(int) == Some(1),
        slots,
        revoked: items.get(7).and_then(int) == Some(1),
        replaced_by: None,
        line_full: None,
        place: place(items),
        split: false,
        reset: false,
        held_by: None,
    })
}

/// The place in line of a queued busy answer (`None` when not queued, or
/// from a script without these fields).
fn place(items: &[Value]) -> Option<Place> {
    let n = |i: usize| items.get(i).and_then(int);
    let members = u64::try_from(n(9)?).ok().filter(|&m| m > 0)?;
    Some(Place {
        first: n(8)? == 1,
        members,
        ahead_left: n(10)
            .and_then(|ms| u64::try_from(ms).ok())
            .map(Duration::from_millis),
        seen: match n(11)? {
            1 => Some(true),
            0 => Some(false),
            _ => None,
        },
    })
}

/// 1 ours, 0 replaced, -1 gone, -2 revoked.
pub fn ownership(reply: Value) -> Result<Ownership> {
    match int(&reply) {
        Some(1) => Ok(Ownership::Ours),
        Some(0) => Ok(Ownership::Replaced),
        Some(-1) => Ok(Ownership::Gone),
        Some(-2) => Ok(Ownership::Revoked),
        _ => Err(anyhow!("{reply:?}")),
    }
}

/// `{outcome, ...inspected}` as FORCE_RELEASE sends it.
pub fn forced(reply: Value) -> Result<(Forced, Inspected)> {
    let items = items(reply)?;
    let outcome = match items.first().and_then(int) {
        Some(1) => Forced::Deleted,
        Some(2) => Forced::Revoked,
        Some(0) => Forced::Mismatch,
        Some(-1) => Forced::Free,
        _ => return Err(anyhow!("{items:?}")),
    };
    Ok((outcome, inspected(items.get(1..).unwrap_or_default())?))
}

/// `[token, pttl, fence, holder, limit?, slots?, revoked?]` as sent by
/// INSPECT (and FORCE_RELEASE after its outcome).
pub fn inspect(reply: Value) -> Result<Inspected> {
    inspected(&items(reply)?)
}

fn inspected(items: &[Value]) -> Result<Inspected> {
    let token = match items.first() {
        Some(Value::Nil) | None => None,
        Some(v) => Some(text(v)),
    };
    // The mark of a shared lock (see `scripts/shared.rs`): no token.
    let shared = token.as_deref() == Some("shared");
    let token = token.filter(|_| !shared);
    let slots = match items.get(5) {
        Some(Value::Array(slots)) => slots.iter().map(slot).collect::<Result<_>>()?,
        _ => Vec::new(),
    };
    Ok(Inspected {
        token,
        pttl: pttl(items.get(1))?,
        fence: items
            .get(2)
            .and_then(int)
            .ok_or_else(|| anyhow!("no fence"))?,
        holder: record(items.get(3)),
        limit: match items.get(4) {
            None => None,
            some => Some(limit(some)?).filter(|&n| n > 0),
        },
        slots,
        revoked: items.get(6).and_then(int) == Some(1),
        shared,
    })
}

fn slot(v: &Value) -> Result<Slot> {
    let Value::Array(parts) = v else {
        return Err(anyhow!("bad slot {v:?}"));
    };
    Ok(Slot {
        token: parts.first().map(text).unwrap_or_default(),
        pttl: pttl(parts.get(1))?,
        holder: record(parts.get(2)),
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_force_release_reply_is_an_error_not_a_panic() {
        assert!(forced(Value::Array(vec![])).is_err());
        assert!(forced(Value::Array(vec![Value::Int(1)])).is_err());
        assert!(inspect(Value::Array(vec![])).is_err());
    }

    #[test]
    fn a_full_line_is_busy_and_odd_ones_are_errors() {
        let ints = |v: &[i64]| Value::Array(v.iter().map(|&i| Value::Int(i)).collect());
        match acquire(ints(&[-5, 3])) {
            Ok(Acquire::Busy(info)) => assert_eq!(info.line_full, Some(3)),
            other => panic!("{other:?}"),
        }
        assert!(acquire(ints(&[-5])).is_err());
        assert!(acquire(ints(&[-5, -1])).is_err());
        let text = Value::Array(vec![Value::Int(-5), Value::BulkString(b"x".to_vec())]);
        assert!(acquire(text).is_err());
    }

    #[test]
    fn a_lock_held_shared_is_said_as_such() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let busy = |holders: i64, of: i64| {
            let items = [0, 20_000]
                .map(Value::Int)
                .into_iter()
                .chain([bulk("h"), bulk("1"), bulk("t")])
                .chain([holders, of, 0].map(Value::Int))
                .collect();
            match acquire(Value::Array(items)) {
                Ok(Acquire::Busy(info)) => info.slots,
                other => panic!("{other:?}"),
            }
        };
        let shared = Some(SlotsTaken {
            holders: 3,
            limit: 0,
        });
        assert_eq!(busy(3, -1), shared);
        assert_eq!(busy(0, 0), None);
        assert_eq!(busy(2, 2).map(|s| s.limit), Some(2));
        // INSPECT's token `shared` is the mark, not a token.
        let seen = |token: &str| {
            let reply = vec![
                bulk(token),
                Value::Int(5),
                Value::Int(7),
                Value::Array(vec![]),
            ];
            inspect(Value::Array(reply)).expect("inspected")
        };
        let marked = seen("shared");
        assert!(marked.shared && marked.token.is_none());
        let plain = seen("t1");
        assert!(!plain.shared && plain.token.as_deref() == Some("t1"));
    }

    #[test]
    fn a_queued_busy_answer_says_where_we_stand() {
        let busy = |tail: &[i64]| {
            let mut items = vec![
                Value::Int(0),
                Value::Int(20_000),
                Value::BulkString(b"h".to_vec()),
                Value::BulkString(b"1".to_vec()),
                Value::BulkString(b"t".to_vec()),
                Value::Int(0),
                Value::Int(0),
                Value::Int(0),
            ];
            items.extend(tail.iter().map(|&n| Value::Int(n)));
            match acquire(Value::Array(items)) {
                Ok(Acquire::Busy(info)) => info.place,
                other => panic!("{other:?}"),
            }
        };
        // Not queued (and an older script's reply): no place.
        assert_eq!(busy(&[]), None);
        assert_eq!(busy(&[0, 0, -1, 0]), None);
        let second = busy(&[0, 3, 1500, 1]).expect("queued");
        assert_eq!(
            second,
            Place {
                first: false,
                members: 3,
                ahead_left: Some(Duration::from_millis(1500)),
                seen: Some(true),
            }
        );
        let first = busy(&[1, 1, -1, -1]).expect("queued");
        assert!(first.first && first.ahead_left.is_none() && first.seen.is_none());
    }

    #[test]
    fn negative_pttls_are_none() {
        let reply = Value::Array(vec![
            Value::Nil,
            Value::Int(-2),
            Value::Int(7),
            Value::Array(vec![]),
        ]);
        let seen = inspect(reply).expect("parses");
        assert_eq!((seen.token, seen.pttl, seen.fence), (None, None, 7));
        assert_eq!(seen.limit, None);
    }
}
