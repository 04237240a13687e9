//! How each script is called: its KEYS and ARGV, built from named fields
//! (one struct per script), so that no caller counts positions. This
//! table is the one place the layout is written down; the scripts
//! themselves are in `scripts/`.
//!
//! KEYS, with prefix `P` and key `K` (see `LockKeys`), the same for every
//! script so that each reads its keys by one number:
//!
//! | KEYS | key | what | given |
//! |---|---|---|---|
//! | 1 | `P{K}` | the lock: the holder's token, expiring after the TTL | always |
//! | 2 | `P{K}:holder` | hash describing the holder, same expiry | always |
//! | 3 | `P{K}:fence` | fencing counter, never expires, only grows | always |
//! | 4 | `P{K}:holders` | `--limit N > 1`: zset token -> expiry (ms) | always |
//! | 5 | `P{K}:limit` | `--limit N > 1`: N, while any holder lives | always |
//! | 6 | `P{K}:waiters` | zset of waiting tokens, by order of arrival | always |
//! | 7 | `P{K}:waiters:newest` | newest-wins: the newest arrival (token host pid) | always |
//! | 8 | `P{K}:waiters:<token>` | the caller's own liveness hash in line | with a token |
//! | 9 | `P{K}:holder:<token>` | the caller's own slot record (semaphore) | with a token |
//! | 10... | `P{K}:waiters:<t>`, `P{K}:holder:<t>` | other clients' records | when asked |
//!
//! Keys named after another client's token (a waiter's liveness hash, a
//! semaphore holder's record) cannot be known before the script reads
//! whose they are. A script that touches them first lists every such key
//! it is going to touch; if one is not in its KEYS it writes nothing and
//! answers `{-99, names}`, and [`Node::call`] sends it again with those
//! names as KEYS[10...] (the names are remembered per lock, so a waiter's
//! next try sends them at once and costs one round trip while the line
//! stays the same). RELEASE never asks (a release is one round trip, and
//! its reply may be lost): a waiter whose liveness hash it was not given
//! is live while this server sees it subscribed (or cannot tell), and is
//! never dropped from the line by it. The data in Redis is laid out as
//! before, so runs of an older version still see this one's records, and
//! it theirs.
//!
//! ARGV:
//!
//! | script | ARGV |
//! |---|---|
//! | ACQUIRE, SLOT_ACQUIRE ([`Acquire`]) | 1 token, 2 ttl_ms, 3 host, 4 pid, 5 user, 6 command, 7 acquired_at, 8 queue mode (ACQUIRE: see `queue_flag`) or N (SLOT_ACQUIRE), 9 refresh_ms, 10 kill_after_ms, 11 subscribed (`1`/`0`), 12 liveness_ms, 13 floor (`1`/`0`), 14 screen (`1`/`0`), 15 say (`1`: the reply is `{answer, run_id}`, see `scripts::saying_server`), 16 label, 17 at (`''`: none), 18 queue_max (`--queue-max`; `0`: unbounded; ACQUIRE only), 19 hold_reason (`hold`; `''`: a run; ACQUIRE only), 20 kind (`1`: `--shared`; `2`: an exclusive waiter without a line, which marks itself in line while the lock is held shared; ACQUIRE only, see `scripts/shared.rs`) |
//! | EXTEND, SLOT_EXTEND ([`Extend`]) | 1 token, 2 ttl_ms, 3 ended_at (absent while COMMAND runs) |
//! | RELEASE ([`Release`]) | 1 token, 2 how (`0` wake the next, `1` nobody, `2` also where not ours) |
//! | SLOT_RELEASE ([`Release`]) | 1 token |
//! | LEAVE ([`Leave`]) | 1 token |
//! | INSPECT ([`Inspect`]), WAITERS ([`Waiters`]) | none |
//! | FORCE_RELEASE ([`ForceRelease`]) | 1 check (`1`: only if held by ARGV[2]), 2 token (`''`), 3 now (`1`/`0`), 4 by (`--replace-running`: who replaces the holder; `''`: none) |
//! | RAISE_FENCE ([`RaiseFence`]) | 1 token, 2 fence (decimal), 3 limit (1: a plain lock) |

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use anyhow::anyhow;
use redis::Value;

use super::error::{NodeError, NodeResult};
use super::keys::{Holder, LockKeys};
use super::node::Node;
use super::scripts;

/// One script and what it is given, rendered from named fields.
pub(super) trait Call {
    /// The script's text.
    fn lua(&self) -> &'static str;
    /// The caller's own token: its liveness hash and slot record are
    /// then KEYS[8] and KEYS[9].
    fn token(&self) -> Option<&str> {
        None
    }
    /// ARGV in the table's order.
    fn argv(&self) -> Vec<String>;
}

fn flag(on: bool) -> String {
    if on { "1" } else { "0" }.to_string()
}

/// ACQUIRE's ARGV[8]: the queue mode of a plain lock, or SLOT_ACQUIRE's N.
#[derive(Debug, Clone, Copy)]
pub(super) enum Take {
    /// A plain lock, with ACQUIRE's queue mode (see `kind::queue_flag`).
    Plain(&'static str),
    /// A semaphore's slot, `--limit N`.
    Slot(u32),
}

/// ACQUIRE or SLOT_ACQUIRE (see the scripts for what each field does).
/// Owned: it waits in a round for its reply, and may be sent again.
#[derive(Debug, Clone)]
pub(super) struct Acquire {
    pub token: String,
    pub ttl_ms: u64,
    pub holder: Holder,
    pub take: Take,
    /// We listen on our wake channel: our liveness hash lasts `liveness_ms`.
    pub subscribed: bool,
    pub liveness_ms: u64,
    /// The fence never falls below the server's clock (one endpoint).
    pub floor: bool,
    /// Refuse a server that may evict the lock (`scripts::eviction_lib`).
    pub screen: bool,
    /// Redlock: the reply says which server gave it (its `run_id`).
    pub say: bool,
    /// In line and subscribed: the `run_id` of the server subscribed on.
    pub at: String,
    /// `--queue-max`: at most this many waiters in line (0: unbounded).
    pub queue_max: u32,
    /// `--shared`: a shared holder (ACQUIRE only).
    pub shared: bool,
    /// An exclusive waiter without a line (see `kind::How::writer`).
    pub writer: bool,
    /// A shared run that saw a holder (see `kind::How::stand_in`).
    pub stand_in: bool,
}

impl Call for Acquire {
    fn lua(&self) -> &'static str {
        match self.take {
            Take::Plain(_) => scripts::ACQUIRE,
            Take::Slot(_) => scripts::SLOT_ACQUIRE,
        }
    }
    fn token(&self) -> Option<&str> {
        Some(&self.token)
    }
    fn argv(&self) -> Vec<String> {
        let h = &self.holder;
        let eighth = match self.take {
            Take::Plain(mode) => mode.to_string(),
            Take::Slot(n) => n.to_string(),
        };
        vec![
            self.token.to_string(),
            self.ttl_ms.to_string(),
            h.host.clone(),
            h.pid.to_string(),
            h.user.clone(),
            h.command.clone(),
            h.acquired_at.clone(),
            eighth,
            h.refresh_ms.to_string(),
            h.kill_after_ms.to_string(),
            flag(self.subscribed),
            self.liveness_ms.to_string(),
            flag(self.floor),
            flag(self.screen),
            flag(self.say),
            h.label.clone(),
            self.at.to_string(),
            self.queue_max.to_string(),
            h.hold_reason.clone(),
            match (self.shared, self.writer, self.stand_in) {
                (true, _, false) => "1",
                (true, _, true) => "3",
                (false, true, _) => "2",
                (false, false, _) => "0",
            }
            .to_string(),
        ]
    }
}

/// EXTEND or SLOT_EXTEND: push our lock's (or slot's) expiry.
#[derive(Debug, Clone, Copy)]
pub(super) struct Extend<'a> {
    pub slot: bool,
    pub token: &'a str,
    pub ttl_ms: u64,
    /// COMMAND ended then (RFC 3339); `--min-hold` keeps the lock.
    pub ended_at: Option<&'a str>,
}

impl Call for Extend<'_> {
    fn lua(&self) -> &'static str {
        if self.slot {
            scripts::SLOT_EXTEND
        } else {
            scripts::EXTEND
        }
    }
    fn token(&self) -> Option<&str> {
        Some(self.token)
    }
    fn argv(&self) -> Vec<String> {
        let mut argv = vec![self.token.to_string(), self.ttl_ms.to_string()];
        argv.extend(self.ended_at.map(str::to_string));
        argv
    }
}

/// RELEASE (`how`: see `kind::Wake`) or SLOT_RELEASE (`slot`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Release<'a> {
    pub slot: bool,
    pub token: &'a str,
    pub how: &'static str,
}

impl Call for Release<'_> {
    fn lua(&self) -> &'static str {
        if self.slot {
            scripts::SLOT_RELEASE
        } else {
            scripts::RELEASE
        }
    }
    fn token(&self) -> Option<&str> {
        Some(self.token)
    }
    fn argv(&self) -> Vec<String> {
        match self.slot {
            true => vec![self.token.to_string()],
            false => vec![self.token.to_string(), self.how.to_string()],
        }
    }
}

/// LEAVE: take our token out of the line.
#[derive(Debug, Clone, Copy)]
pub(super) struct Leave<'a> {
    pub token: &'a str,
}

impl Call for Leave<'_> {
    fn lua(&self) -> &'static str {
        scripts::LEAVE
    }
    fn token(&self) -> Option<&str> {
        Some(self.token)
    }
    fn argv(&self) -> Vec<String> {
        vec![self.token.to_string()]
    }
}

/// INSPECT: read the lock, changing nothing.
#[derive(Debug, Clone, Copy)]
pub(super) struct Inspect;

impl Call for Inspect {
    fn lua(&self) -> &'static str {
        scripts::INSPECT
    }
    fn argv(&self) -> Vec<String> {
        Vec::new()
    }
}

/// WAITERS: read the line, changing nothing.
#[derive(Debug, Clone, Copy)]
pub(super) struct Waiters;

impl Call for Waiters {
    fn lua(&self) -> &'static str {
        scripts::WAITERS
    }
    fn argv(&self) -> Vec<String> {
        Vec::new()
    }
}

/// FORCE_RELEASE: whoever holds the lock, or only `token`; `now`: delete
/// rather than revoke.
#[derive(Debug, Clone, Copy)]
pub(super) struct ForceRelease<'a> {
    pub token: Option<&'a str>,
    pub now: bool,
    /// `--replace-running`: who replaces the holder (`""`: nobody).
    pub by: &'a str,
}

impl Call for ForceRelease<'_> {
    fn lua(&self) -> &'static str {
        scripts::FORCE_RELEASE
    }
    fn token(&self) -> Option<&str> {
        self.token
    }
    fn argv(&self) -> Vec<String> {
        vec![
            flag(self.token.is_some()),
            self.token.unwrap_or_default().to_string(),
            flag(self.now),
            self.by.to_string(),
        ]
    }
}

/// RAISE_FENCE: raise the counter to a majority's `fence`.
#[derive(Debug, Clone, Copy)]
pub(super) struct RaiseFence<'a> {
    pub token: &'a str,
    pub fence: i64,
    pub limit: u32,
}

impl Call for RaiseFence<'_> {
    fn lua(&self) -> &'static str {
        scripts::RAISE_FENCE
    }
    fn token(&self) -> Option<&str> {
        Some(self.token)
    }
    fn argv(&self) -> Vec<String> {
        vec![
            self.token.to_string(),
            self.fence.to_string(),
            self.limit.to_string(),
        ]
    }
}

/// How many times a script may ask for keys before we give up: each ask
/// means that someone new joined the line (or the holders) since the
/// call before, so a burst of N newcomers costs at most N asks.
const ASKS: usize = 64;

/// Other clients' keys each lock's scripts last asked for (see the module
/// doc), by lock key; a few locks per run, so it stays small.
static ASKED: Mutex<BTreeMap<String, Vec<String>>> = Mutex::new(BTreeMap::new());

fn asked(keys: &LockKeys) -> Vec<String> {
    let known = ASKED.lock().unwrap_or_else(PoisonError::into_inner);
    known.get(&keys.lock).cloned().unwrap_or_default()
}

fn remember(keys: &LockKeys, names: &[String]) {
    remember_for(&keys.lock, names.to_vec());
}

fn remember_for(lock: &str, names: Vec<String>) {
    let mut known = ASKED.lock().unwrap_or_else(PoisonError::into_inner);
    if known.len() > 64 {
        known.clear();
    }
    known.insert(lock.to_string(), names);
}

/// A wake-up that names the line's keys (`released NAME...`, from
/// RELEASE): remembered as if a script had asked for them, so that the
/// woken waiter's acquire declares them at once. Returns the message
/// without them. Only this lock's keys are taken (anyone may publish),
/// and at most as many as a script would ask for.
pub(super) fn heard(lock: &str, payload: String) -> String {
    let Some(names) = payload.strip_prefix("released ") else {
        return payload;
    };
    let own = format!("{lock}:");
    let names: Vec<String> = names
        .split(' ')
        .filter(|name| name.starts_with(&own))
        .take(1000)
        .map(str::to_string)
        .collect();
    if !names.is_empty() {
        remember_for(lock, names);
    }
    "released".to_string()
}

/// The EVAL of `call`, with the other clients' keys its script last asked
/// for: to send in a round (see `fanout`), its reply read by
/// [`Node::answer`].
pub(super) fn command(keys: &LockKeys, call: &impl Call) -> redis::Cmd {
    eval_cmd(keys, call, &asked(keys))
}

fn eval_cmd(keys: &LockKeys, call: &impl Call, others: &[String]) -> redis::Cmd {
    let mut names = keys.declared(call.token());
    names.extend(others.iter().cloned());
    let argv = call.argv();
    let count = names.len().to_string();
    let args: Vec<&str> = (std::iter::once(count.as_str()))
        .chain(names.iter().map(String::as_str))
        .chain(argv.iter().map(String::as_str))
        .collect();
    super::wire::call(call.lua(), &args)
}

impl Node {
    /// The reply to [`command`] sent in a round: when its script asked for
    /// other keys, it is sent again here with them (see the module doc).
    pub(super) fn answer(
        &mut self,
        keys: &LockKeys,
        call: &impl Call,
        reply: NodeResult<Value>,
    ) -> NodeResult<Value> {
        let reply = reply?;
        match asking(keys, &reply) {
            Ok(None) => Ok(reply),
            Ok(Some(wanted)) => {
                remember(keys, &wanted);
                self.call(keys, call)
            }
            Err(why) => Err(NodeError::unexpected(self.shown(), "a script", why)),
        }
    }

    /// Run one script with its KEYS and ARGV (see the module doc), giving
    /// it other clients' keys when it asks for them.
    pub(super) fn call(&mut self, keys: &LockKeys, call: &impl Call) -> NodeResult<Value> {
        let mut others = asked(keys);
        for _ in 0..ASKS {
            let reply = self.eval(&eval_cmd(keys, call, &others))?;
            match asking(keys, &reply) {
                Ok(Some(wanted)) => {
                    remember(keys, &wanted);
                    // Those named before stay: a line that grows between
                    // two calls is then given every key in the end.
                    others.retain(|name| !wanted.contains(name));
                    others.extend(wanted);
                }
                Ok(None) => return Ok(reply),
                Err(why) => return Err(NodeError::unexpected(self.shown(), "a script", why)),
            }
        }
        Err(NodeError::unexpected(
            self.shown(),
            "a script",
            anyhow!("it asked for other keys {ASKS} times (the line kept changing)"),
        ))
    }
}

/// The names a script asks for (`{-99, names}`), checked to be keys of
/// this lock; `None` when the reply is an answer.
fn asking(keys: &LockKeys, reply: &Value) -> anyhow::Result<Option<Vec<String>>> {
    let Value::Array(parts) = reply else {
        return Ok(None);
    };
    let [Value::Int(-99), Value::Array(names)] = parts.as_slice() else {
        return Ok(None);
    };
    let own = format!("{}:", keys.lock);
    names
        .iter()
        .map(|name| match name {
            Value::BulkString(raw) => std::str::from_utf8(raw)
                .ok()
                .filter(|n| n.starts_with(&own))
                .map(str::to_string)
                .ok_or_else(|| anyhow!("a key not of this lock")),
            other => Err(anyhow!("a key name that is no string: {other:?}")),
        })
        .collect::<anyhow::Result<Vec<_>>>()
        .map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::Queue;

    #[test]
    fn a_wake_up_gives_the_next_acquire_this_locks_keys_only() {
        let keys = LockKeys::new("redlock:", "heard");
        assert_eq!(heard(&keys.lock, "next".into()), "next");
        assert_eq!(heard(&keys.lock, "released".into()), "released");
        assert!(asked(&keys).is_empty());
        // Anyone may publish: another lock's keys, or a longer name that
        // only starts like this lock's, are not given to its scripts.
        let payload = "released redlock:{heard}:waiters:a redlock:{other}:waiters:b \
                       redlock:{heard}x redlock:{heard}:waiters:c";
        assert_eq!(heard(&keys.lock, payload.into()), "released");
        assert_eq!(
            asked(&keys),
            ["redlock:{heard}:waiters:a", "redlock:{heard}:waiters:c"]
        );
        // Nothing of this lock's: what was known stays.
        assert_eq!(heard(&keys.lock, "released x y".into()), "released");
        assert_eq!(asked(&keys).len(), 2);
    }

    fn holder() -> Holder {
        Holder {
            host: "h".into(),
            pid: 42,
            user: "u".into(),
            command: "c".into(),
            acquired_at: "t0".into(),
            label: "l".into(),
            refresh_ms: 10,
            kill_after_ms: 5,
            queue: Queue::OldestFirst,
            queue_max: 0,
            hold_reason: String::new(),
        }
    }

    #[test]
    fn acquire_renders_the_documented_positions() {
        let h = holder();
        let call = Acquire {
            token: "tok".into(),
            ttl_ms: 30,
            holder: h,
            take: Take::Plain("1"),
            subscribed: true,
            liveness_ms: 60,
            floor: false,
            screen: true,
            say: true,
            at: "at".into(),
            queue_max: 7,
            shared: true,
            writer: false,
            stand_in: false,
        };
        let argv = call.argv();
        let expected = [
            "tok", "30", "h", "42", "u", "c", "t0", "1", "10", "5", "1", "60", "0", "1", "1", "l",
            "at", "7", "", "1",
        ];
        assert_eq!(argv, expected);
        // A shared run that saw a holder (see `scripts/shared.rs`).
        let standing = Acquire {
            stand_in: true,
            ..call.clone()
        };
        assert_eq!(standing.argv()[19], "3");
        let slot = Acquire {
            take: Take::Slot(3),
            ..call
        };
        assert_eq!(slot.argv()[7], "3");
        assert_eq!(slot.lua(), scripts::SLOT_ACQUIRE);
    }

    #[test]
    fn a_token_brings_its_own_records_into_keys() {
        let keys = LockKeys::new("p:", "k");
        let names = keys.declared(Leave { token: "t" }.token());
        assert_eq!(names[6], "p:{k}:waiters:newest");
        assert_eq!(names[7], "p:{k}:waiters:t");
        assert_eq!(names[8], "p:{k}:holder:t");
        assert_eq!(keys.declared(Inspect.token()).len(), 7);
        let forced = ForceRelease {
            token: None,
            now: true,
            by: "",
        };
        assert_eq!(forced.argv(), ["0", "", "1", ""]);
    }

    #[test]
    fn asks_are_checked_and_odd_replies_are_answers() {
        let keys = LockKeys::new("p:", "k");
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let ask = |names: Vec<Value>| Value::Array(vec![Value::Int(-99), Value::Array(names)]);
        let wanted = asking(&keys, &ask(vec![bulk("p:{k}:waiters:a")])).expect("ok");
        assert_eq!(wanted, Some(vec!["p:{k}:waiters:a".to_string()]));
        assert!(asking(&keys, &ask(vec![bulk("other")])).is_err());
        assert!(asking(&keys, &ask(vec![Value::Int(1)])).is_err());
        assert_eq!(asking(&keys, &Value::Int(-99)).expect("ok"), None);
        let answer = Value::Array(vec![Value::Int(-1), Value::Int(2)]);
        assert_eq!(asking(&keys, &answer).expect("ok"), None);
    }

    /// The largest `NAME[n]` a script's text reads.
    fn largest(lua: &str, name: &str) -> usize {
        lua.match_indices(&format!("{name}["))
            .filter_map(|(at, m)| {
                let rest = &lua[at + m.len()..];
                rest[..rest.find(']')?].parse().ok()
            })
            .max()
            .unwrap_or(0)
    }

    #[test]
    fn no_script_reads_past_what_its_builder_renders() {
        let h = holder();
        let acquire = |take| Acquire {
            token: "t".into(),
            ttl_ms: 1,
            holder: h.clone(),
            take,
            subscribed: false,
            liveness_ms: 0,
            floor: false,
            screen: false,
            say: false,
            at: String::new(),
            queue_max: 0,
            shared: false,
            writer: true,
            stand_in: false,
        };
        let extend = |slot| Extend {
            slot,
            token: "t",
            ttl_ms: 1,
            ended_at: Some("e"),
        };
        let release = |slot| Release {
            slot,
            token: "t",
            how: "0",
        };
        let calls: Vec<Box<dyn Call>> = vec![
            Box::new(acquire(Take::Plain("1"))),
            Box::new(acquire(Take::Slot(2))),
            Box::new(extend(false)),
            Box::new(extend(true)),
            Box::new(release(false)),
            Box::new(release(true)),
            Box::new(Leave { token: "t" }),
            Box::new(Inspect),
            Box::new(Waiters),
            Box::new(ForceRelease {
                token: Some("t"),
                now: false,
                by: "",
            }),
            Box::new(RaiseFence {
                token: "t",
                fence: 1,
                limit: 1,
            }),
        ];
        let keys = LockKeys::new("p:", "k");
        for call in calls {
            let lua = call.lua();
            let head = &lua[..lua.len().min(60)];
            assert!(largest(lua, "ARGV") <= call.argv().len(), "{head}");
            let given = keys.declared(call.token()).len();
            assert!(largest(lua, "KEYS") <= given, "{head}");
        }
    }
}
