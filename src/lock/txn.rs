//! A plain lock's steps without scripts (see `scriptless`): transactions
//! on any server, and `SET ... IFEQ` for a refresh where the server has
//! it. Each answers what its script would have (`scripts/mod.rs`).
//!
//! Why a transaction keeps the script's promise: a step reads its keys
//! after `WATCH`ing every key whose value it decides on (the lock, and
//! also the fence, the limit and the holder record where it reads them),
//! then writes in `MULTI ... EXEC`. If any watched key changed between
//! the WATCH and the EXEC (another client's write, an expiry, a
//! FLUSHALL), EXEC aborts and writes nothing; the step then reads again,
//! up to [`TRIES`] times (each abort means another client made progress).
//! So the writes are made only if the state they were decided on still
//! holds when they are applied, all at once, as a script's are. Nothing
//! is written between the reads and the EXEC, so a step that fails (a
//! lost connection drops the WATCH and any MULTI) leaves what was there,
//! and an EXEC whose reply is lost is as a script whose reply is lost.
//! Before Redis 7.0 a watched key that merely expires does not abort the
//! EXEC: a refresh checks that its `PEXPIRE` of the lock found the key.
//! The reads themselves go in one round trip (`UNWATCH`, `WATCH`, the
//! reads), the writes in another: two round trips per step, one per
//! refresh with `SET IFEQ`.
//!
//! A refresh by `SET lock token IFEQ token PX ttl` is one atomic
//! compare-and-set of the lock; the holder record's `PEXPIRE`, in the
//! same round trip, runs whatever the answer. When the lock was not ours,
//! that only pushes the expiry of another holder's record (never its
//! content, never the lock): a record outliving its lock is read by
//! nobody (`status` reads the holder of a held lock only) and replaced by
//! the next acquire. `DELIFEQ` and `DELEX` could delete the lock alone
//! in one round trip, but its holder record must go with it only when
//! the lock was ours, which takes a WATCH: a release stays a transaction.

use redis::Value;

use super::error::{Fault, NodeError, NodeResult};
use super::node::Node;
use super::protocol::Native;
use super::scriptless::{command, Keys, Op, Take};

/// How many times a step reads again after an aborted EXEC.
const TRIES: usize = 32;

/// The answer to a step: the script's reply, or the feature refused.
type Answer = NodeResult<Result<Value, &'static str>>;

/// Make `op` on `node`, on the Cluster slot `slot`.
pub(super) fn make(node: &mut Node, k: &Keys, op: &Op, native: Native, slot: u16) -> Answer {
    let mut t = Txn { node, k, slot };
    match op {
        Op::Acquire(take) => t.acquire(take),
        Op::Extend {
            token,
            ttl_ms,
            ended_at,
        } => t.extend(token, ttl_ms, ended_at.as_deref(), native).map(Ok),
        Op::Release {
            token,
            quiet,
            anyway,
        } => t.release(token, *quiet, *anyway).map(Ok),
        Op::Inspect => t.inspect(),
        Op::Force { token, now } => t.force(token.as_deref(), *now),
        Op::RaiseFence { token, fence } => t.raise(token, fence).map(Ok),
        Op::Leave => Ok(Ok(Value::Int(1))),
        Op::Waiters => Ok(Ok(Value::Array(vec![Value::Int(0), Value::Array(vec![])]))),
    }
}

struct Txn<'a> {
    node: &'a mut Node,
    k: &'a Keys,
    slot: u16,
}

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

fn text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

fn int(v: Option<&Value>) -> Option<i64> {
    match v? {
        Value::Int(n) => Some(*n),
        other => text(Some(other))?.parse().ok(),
    }
}

/// A hash as a flat field/value array, as a script returns HGETALL's.
fn flat(v: Option<&Value>) -> Value {
    match v {
        Some(Value::Map(pairs)) => Value::Array(
            pairs
                .iter()
                .flat_map(|(f, v)| [f.clone(), v.clone()])
                .collect(),
        ),
        Some(Value::Array(items)) => Value::Array(items.clone()),
        _ => Value::Array(Vec::new()),
    }
}

/// A field of a flat hash array.
fn field(hash: &Value, name: &str) -> Option<String> {
    let Value::Array(items) = hash else {
        return None;
    };
    let at = items
        .chunks(2)
        .find(|p| text(p.first()).as_deref() == Some(name))?;
    text(at.get(1))
}

impl Txn<'_> {
    /// Send `cmds` in one round trip; the replies.
    fn send(&mut self, cmds: &[redis::Cmd]) -> NodeResult<Vec<Value>> {
        self.node.pipeline(cmds, Some(self.slot))
    }

    /// UNWATCH, WATCH `watched`, then `reads`: the reads' replies.
    fn read(&mut self, watched: &[&str], reads: Vec<redis::Cmd>) -> NodeResult<Vec<Value>> {
        let mut watch = redis::cmd("WATCH");
        watch.arg(watched);
        let mut cmds = vec![redis::cmd("UNWATCH"), watch];
        cmds.extend(reads);
        let mut replies = self.send(&cmds)?;
        Ok(replies.split_off(2.min(replies.len())))
    }

    /// MULTI, `writes`, EXEC: EXEC's replies, `None` when it aborted (a
    /// watched key changed).
    fn exec(&mut self, writes: Vec<redis::Cmd>) -> NodeResult<Option<Vec<Value>>> {
        let mut cmds = vec![redis::cmd("MULTI")];
        cmds.extend(writes);
        cmds.push(redis::cmd("EXEC"));
        match self.send(&cmds)?.pop() {
            Some(Value::Array(done)) => Ok(Some(done)),
            Some(Value::Nil) => Ok(None),
            other => Err(self.odd("EXEC", &other)),
        }
    }

    fn odd(&self, what: &str, reply: &dyn std::fmt::Debug) -> NodeError {
        NodeError::unexpected(self.node.shown(), what, anyhow::anyhow!("{reply:?}"))
    }

    /// Every try aborted: other clients kept changing the lock.
    fn contended(&self, what: &str) -> NodeError {
        NodeError {
            fault: Fault::Dropped,
            error: anyhow::anyhow!(
                "{}: {what}: the lock's keys changed under {TRIES} transactions in a row",
                crate::secrets::scrub(self.node.shown())
            ),
        }
    }

    fn acquire(&mut self, t: &Take) -> Answer {
        if t.screen {
            if let Some(refused) = self.screen()? {
                return Ok(Ok(refused));
            }
        }
        let answer = self.take(t)?;
        if !t.say {
            return Ok(answer);
        }
        let info = self.send(&[command(&["INFO", "server"])]);
        let run_id = match info {
            Ok(r) => text(r.first()).and_then(|i| super::info::run_id_of(&i)),
            Err(e) if e.fault == Fault::Refused => None,
            Err(e) => return Err(e),
        };
        let id = bulk(&run_id.unwrap_or_default());
        Ok(answer.map(|a| Value::Array(vec![a, id])))
    }

    /// The acquire script's eviction check (`scripts::eviction_lib`):
    /// `{-3, maxmemory, policy}`, `{-4, error}`, or `None`: go on.
    fn screen(&mut self) -> NodeResult<Option<Value>> {
        let info = match self.send(&[command(&["INFO", "memory"])]) {
            Ok(r) => text(r.first()).unwrap_or_default(),
            Err(e) if e.fault == Fault::Refused => {
                let why = format!("{:#}", e.error);
                return Ok(Some(Value::Array(vec![Value::Int(-4), bulk(&why)])));
            }
            Err(e) => return Err(e),
        };
        Ok(super::info::eviction(&info).map(|(maxmemory, policy)| {
            let fields = [bulk(&maxmemory.to_string()), bulk(policy)];
            Value::Array([vec![Value::Int(-3)], fields.to_vec()].concat())
        }))
    }

    /// ACQUIRE without a line (`scripts::ACQUIRE`, queue '0').
    fn take(&mut self, t: &Take) -> Answer {
        let k = self.k;
        for _ in 0..TRIES {
            let reads = vec![
                command(&["GET", &k.limit]),
                command(&["GET", &k.lock]),
                command(&["PTTL", &k.lock]),
                command(&["GET", &k.fence]),
                command(&["TIME"]),
                command(&[
                    "HMGET",
                    &k.holder,
                    "host",
                    "pid",
                    "acquired_at",
                    "user",
                    "label",
                ]),
            ];
            let r = self.read(&[&k.lock, &k.fence, &k.limit], reads)?;
            if let Some(limit) = text(r.first()) {
                let n = limit.parse().unwrap_or(0);
                return Ok(Ok(Value::Array(vec![Value::Int(-1), Value::Int(n)])));
            }
            let cur = text(r.get(1));
            let written = match cur.as_deref() {
                None => self.take_free(t, r.get(3), r.get(4))?,
                Some(c) if c == t.token => self.take_again(t)?,
                Some(c) => return Ok(Ok(busy(c, r.get(2), r.get(5)))),
            };
            if let Some(answer) = written {
                return Ok(Ok(answer));
            }
        }
        Err(self.contended("acquire"))
    }

    /// The lock is free: take it, with the next fence and the holder
    /// record, in one EXEC; `None` when it aborted.
    fn take_free(
        &mut self,
        t: &Take,
        fence: Option<&Value>,
        time: Option<&Value>,
    ) -> NodeResult<Option<Value>> {
        let k = self.k;
        let (secs, micros) = match time {
            Some(Value::Array(t)) => (int(t.first()), int(t.get(1))),
            _ => (None, None),
        };
        let (Some(secs), Some(micros)) = (secs, micros) else {
            return Err(self.odd("TIME", &time));
        };
        let now = secs.saturating_mul(1_000_000).saturating_add(micros);
        let clock = format!("{secs}{micros:06}");
        let mut writes = vec![command(&["SET", &k.lock, &t.token, "NX", "PX", &t.ttl_ms])];
        let (fence, reset) = match next_fence(k, text(fence), t.floor, (now, &clock)) {
            Ok((cmds, fence, reset)) => {
                writes.extend(cmds);
                (fence, reset)
            }
            Err(f) => return Err(self.odd("the fence counter", &f)),
        };
        let at = writes.len() - 1;
        writes.push(command(&["DEL", &k.holder]));
        let mut hset = redis::cmd("HSET");
        hset.arg(&k.holder);
        for (name, value) in &t.record {
            hset.arg(*name).arg(value);
        }
        // Said again by a later try of ours (`take_again`).
        if reset == 1 {
            hset.arg("reset").arg("1");
        }
        writes.push(hset);
        writes.push(command(&["PEXPIRE", &k.holder, &t.ttl_ms]));
        let Some(done) = self.exec(writes)? else {
            return Ok(None);
        };
        let fence = fence.or_else(|| int(done.get(at)));
        match (done.first(), fence) {
            (Some(Value::Okay | Value::SimpleString(_)), Some(fence)) => {
                Ok(Some(Value::Array(vec![
                    Value::Int(1),
                    Value::Int(fence),
                    Value::Int(reset),
                ])))
            }
            _ => Err(self.odd("acquire", &done)),
        }
    }

    /// The lock is ours already (a try of ours took it and its answer was
    /// lost): push both expiries, and say again whether that grant started
    /// the fence counter (see `scripts::ACQUIRE`); `None` if aborted.
    fn take_again(&mut self, t: &Take) -> NodeResult<Option<Value>> {
        let k = self.k;
        let writes = vec![
            command(&["PEXPIRE", &k.lock, &t.ttl_ms]),
            command(&["PEXPIRE", &k.holder, &t.ttl_ms]),
            command(&["GET", &k.fence]),
            command(&["HMGET", &k.holder, "reset"]),
        ];
        let done = self.exec(writes)?;
        // Expired since it was read: the caller reads again.
        Ok(done.filter(|d| expired_or(d, 0, 1) == 1).map(|d| {
            let fence = int(d.get(2)).unwrap_or(0);
            let reset = match d.get(3) {
                Some(Value::Array(v)) => i64::from(text(v.first()).as_deref() == Some("1")),
                _ => 0,
            };
            Value::Array(vec![Value::Int(1), Value::Int(fence), Value::Int(reset)])
        }))
    }

    /// EXTEND: 1 ours (extended), 0 another's, -1 gone, -2 revoked.
    fn extend(
        &mut self,
        token: &str,
        ttl: &str,
        ended: Option<&str>,
        native: Native,
    ) -> NodeResult<Value> {
        let k = self.k;
        if native.ifeq && ended.is_none() {
            let cas = ["SET", &k.lock, token, "IFEQ", token, "PX", ttl];
            let cmds = [command(&cas), command(&["PEXPIRE", &k.holder, ttl])];
            let r = self.send(&cmds)?;
            if !matches!(r.first(), Some(Value::Nil) | None) {
                return Ok(Value::Int(1));
            }
            let cur = self.send(&[command(&["GET", &k.lock])])?;
            return Ok(Value::Int(not_ours(token, text(cur.first()))));
        }
        for _ in 0..TRIES {
            let cur = text(
                self.read(&[&k.lock], vec![command(&["GET", &k.lock])])?
                    .first(),
            );
            if cur.as_deref() != Some(token) {
                return Ok(Value::Int(not_ours(token, cur)));
            }
            let mut writes = Vec::new();
            if let Some(at) = ended {
                writes.push(command(&["HSET", &k.holder, "ended_at", at]));
            }
            let at = writes.len();
            writes.push(command(&["PEXPIRE", &k.lock, ttl]));
            writes.push(command(&["PEXPIRE", &k.holder, ttl]));
            if let Some(done) = self.exec(writes)? {
                return Ok(Value::Int(expired_or(&done, at, 1)));
            }
        }
        Err(self.contended("refresh"))
    }

    /// RELEASE: 1 released, 0 another's (left alone), -1 gone.
    fn release(&mut self, token: &str, quiet: bool, anyway: bool) -> NodeResult<Value> {
        let k = self.k;
        let revoked = format!("revoked:{token}");
        for _ in 0..TRIES {
            let cur = text(
                self.read(&[&k.lock], vec![command(&["GET", &k.lock])])?
                    .first(),
            );
            if cur.as_deref() != Some(token) && cur.as_deref() != Some(&revoked) {
                if anyway {
                    self.send(&[command(&["PUBLISH", &k.lock, "released"])])?;
                }
                return Ok(Value::Int(if cur.is_some() { 0 } else { -1 }));
            }
            let mut writes = Vec::new();
            if !quiet {
                writes.push(command(&["PUBLISH", &k.lock, "released"]));
            }
            writes.push(command(&["DEL", &k.lock, &k.holder]));
            if self.exec(writes)?.is_some() {
                return Ok(Value::Int(1));
            }
        }
        Err(self.contended("release"))
    }

    /// INSPECT, in one MULTI (a consistent view, nothing watched).
    fn inspect(&mut self) -> Answer {
        let k = self.k;
        let reads = vec![
            command(&["GET", &k.lock]),
            command(&["PTTL", &k.lock]),
            command(&["GET", &k.fence]),
            command(&["GET", &k.limit]),
            command(&["HGETALL", &k.holder]),
        ];
        // Nothing watched: UNWATCH first, or a WATCH left by a busy
        // acquire on this connection could abort the EXEC.
        let mut cmds = vec![redis::cmd("UNWATCH"), redis::cmd("MULTI")];
        cmds.extend(reads);
        cmds.push(redis::cmd("EXEC"));
        let r = match self.send(&cmds)?.pop() {
            Some(Value::Array(r)) => r,
            other => return Err(self.odd("status", &other)),
        };
        if text(r.get(3)).is_some() {
            return Ok(Err("status of a semaphore (--limit)"));
        }
        let (token, revoked) = unrevoked(text(r.first()));
        let holder = match token {
            Some(_) => flat(r.get(4)),
            None => Value::Array(Vec::new()),
        };
        Ok(Ok(Value::Array(vec![
            token.as_deref().map_or(Value::Nil, bulk),
            Value::Int(int(r.get(1)).unwrap_or(-2)),
            Value::Int(int(r.get(2)).unwrap_or(0)),
            holder,
            Value::Int(0),
            Value::Array(Vec::new()),
            Value::Int(i64::from(revoked)),
        ])))
    }

    /// FORCE_RELEASE of a plain lock: `{outcome, token, pttl, fence,
    /// holder, 0, {}, revoked}` as the script says.
    fn force(&mut self, only: Option<&str>, now: bool) -> Answer {
        let k = self.k;
        for _ in 0..TRIES {
            let reads = vec![
                command(&["GET", &k.lock]),
                command(&["PTTL", &k.lock]),
                command(&["GET", &k.fence]),
                command(&["GET", &k.limit]),
                command(&["HGETALL", &k.holder]),
            ];
            let r = self.read(&[&k.lock, &k.holder, &k.limit], reads)?;
            let (pttl, fence) = (int(r.get(1)).unwrap_or(-2), int(r.get(2)).unwrap_or(0));
            let (token, revoked) = unrevoked(text(r.first()));
            let Some(token) = token else {
                if text(r.get(3)).is_some() {
                    return Ok(Err("force-release of a semaphore (--limit)"));
                }
                let free = [
                    Value::Int(-1),
                    Value::Nil,
                    Value::Int(pttl),
                    Value::Int(fence),
                ];
                return Ok(Ok(Value::Array(
                    [&free[..], &[Value::Array(vec![])]].concat(),
                )));
            };
            let holder = flat(r.get(4));
            let said = |outcome: i64, revoked: bool| {
                let (pttl, fence) = (Value::Int(pttl), Value::Int(fence));
                let head = [
                    Value::Int(outcome),
                    bulk(&token),
                    pttl,
                    fence,
                    holder.clone(),
                ];
                let tail = [
                    Value::Int(0),
                    Value::Array(vec![]),
                    Value::Int(revoked.into()),
                ];
                Value::Array([&head[..], &tail[..]].concat())
            };
            if only.is_some_and(|t| t != token) {
                return Ok(Ok(said(0, revoked)));
            }
            let ended = field(&holder, "ended_at").is_some();
            let delete = now || (ended && !revoked);
            if revoked && !delete {
                return Ok(Ok(said(2, true)));
            }
            let px = lease_left(pttl, &holder);
            if self.exec(forcing(k, &token, delete, px))?.is_some() {
                return Ok(Ok(said(if delete { 1 } else { 2 }, false)));
            }
        }
        Err(self.contended("force-release"))
    }

    /// RAISE_FENCE of a plain lock: 1 ours (the counter is at least
    /// `fence` now), 0 not ours.
    fn raise(&mut self, token: &str, fence: &str) -> NodeResult<Value> {
        let k = self.k;
        for _ in 0..TRIES {
            let reads = vec![command(&["GET", &k.lock]), command(&["GET", &k.fence])];
            let r = self.read(&[&k.lock, &k.fence], reads)?;
            if text(r.first()).as_deref() != Some(token) {
                return Ok(Value::Int(0));
            }
            let cur = text(r.get(1)).unwrap_or_else(|| "0".into());
            if (cur.len(), cur.as_str()) >= (fence.len(), fence) {
                return Ok(Value::Int(1));
            }
            if self
                .exec(vec![command(&["SET", &k.fence, fence])])?
                .is_some()
            {
                return Ok(Value::Int(1));
            }
        }
        Err(self.contended("raising the fence"))
    }
}

/// The writes that give the next fence (see `scripts::fence_lib`), from
/// the counter as read (`None`: absent) and the server's clock (`now` in
/// microseconds, and as text): the writes, the fence when they set it
/// (`None`: their last, an INCR, answers it), and whether the counter
/// was seeded. A counter that is no integer is an error.
fn next_fence(
    k: &Keys,
    fence: Option<String>,
    floor: bool,
    (now, clock): (i64, &str),
) -> Result<(Vec<redis::Cmd>, Option<i64>, i64), String> {
    let incr = command(&["INCR", &k.fence]);
    let Some(f) = fence else {
        return Ok((vec![command(&["SET", &k.fence, clock]), incr], None, 1));
    };
    let f: i64 = f.parse().map_err(|_| f.clone())?;
    match floor && f.saturating_add(1) < now {
        true => Ok((
            vec![command(&["SET", &k.fence, &now.to_string()])],
            Some(now),
            0,
        )),
        false => Ok((vec![incr], None, 0)),
    }
}

/// `ours` when the `PEXPIRE` of the lock at `at` in EXEC's replies found
/// it, else -1 (gone): a server before Redis 7.0 does not abort an EXEC
/// whose watched key expired after the WATCH.
fn expired_or(done: &[Value], at: usize, ours: i64) -> i64 {
    match int(done.get(at)) {
        Some(1) => ours,
        _ => -1,
    }
}

/// EXTEND's answer for a lock that is not `token`'s: -2 revoked from us,
/// 0 another's, -1 gone.
fn not_ours(token: &str, cur: Option<String>) -> i64 {
    match cur {
        Some(c) if c.strip_prefix("revoked:") == Some(token) => -2,
        Some(_) => 0,
        None => -1,
    }
}

/// A lock's token without its `revoked:` mark, and whether it had one.
fn unrevoked(cur: Option<String>) -> (Option<String>, bool) {
    match cur {
        Some(c) => match c.strip_prefix("revoked:") {
            Some(t) => (Some(t.to_string()), true),
            None => (Some(c), false),
        },
        None => (None, false),
    }
}

/// What a force-release of `token`'s lock writes: with `delete`, the
/// lock and its record go; else the lock becomes `revoked:<token>` for
/// `px` ms, the lease its holder may have left.
fn forcing(k: &Keys, token: &str, delete: bool, px: i64) -> Vec<redis::Cmd> {
    if delete {
        return vec![
            command(&["PUBLISH", &k.lock, "released"]),
            command(&["DEL", &k.lock, &k.holder]),
        ];
    }
    let (px, mark) = (px.to_string(), format!("revoked:{token}"));
    vec![
        command(&["SET", &k.lock, &mark, "PX", &px]),
        command(&["PEXPIRE", &k.holder, &px]),
        command(&["PUBLISH", &k.lock, "revoked"]),
    ]
}

/// How long a revoked lock stays revoked (see `scripts::FORCE_RELEASE`):
/// the lock's time left, or for a lock without an expiry the holder's
/// refresh period plus its kill-after.
fn lease_left(pttl: i64, holder: &Value) -> i64 {
    if pttl > 0 {
        return pttl;
    }
    let n = |name: &str| field(holder, name).and_then(|v| v.parse::<i64>().ok());
    let ttl = n("ttl_ms").unwrap_or(30_000);
    let refresh = n("refresh_ms").unwrap_or((ttl + 2) / 3);
    refresh.saturating_add(n("kill_after_ms").unwrap_or(5_000))
}

/// ACQUIRE's busy answer, not in line: `{0, pttl, host, pid,
/// acquired_at, 0, 0, revoked, 0, 0, -1, 0, user, label}`.
fn busy(cur: &str, pttl: Option<&Value>, holder: Option<&Value>) -> Value {
    let h = match holder {
        Some(Value::Array(h)) => h.clone(),
        _ => Vec::new(),
    };
    let f = |i: usize| bulk(&text(h.get(i)).unwrap_or_default());
    let revoked = i64::from(cur.starts_with("revoked:"));
    let zero = Value::Int(0);
    Value::Array(vec![
        Value::Int(0),
        Value::Int(int(pttl).unwrap_or(-2)),
        f(0),
        f(1),
        f(2),
        zero.clone(),
        zero.clone(),
        Value::Int(revoked),
        zero.clone(),
        zero.clone(),
        Value::Int(-1),
        zero,
        f(3),
        f(4),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_revoked_lease_lasts_its_time_left_or_the_holders_stop_time() {
        let holder = Value::Array(
            ["refresh_ms", "100", "kill_after_ms", "50"]
                .iter()
                .map(|s| bulk(s))
                .collect(),
        );
        assert_eq!(lease_left(700, &holder), 700);
        assert_eq!(lease_left(-1, &holder), 150);
        assert_eq!(lease_left(-1, &Value::Array(vec![])), 15_000);
    }

    #[test]
    fn a_lock_not_ours_is_told_apart() {
        assert_eq!(not_ours("t", Some("revoked:t".into())), -2);
        assert_eq!(not_ours("t", Some("revoked:u".into())), 0);
        assert_eq!(not_ours("t", None), -1);
        assert_eq!(
            unrevoked(Some("revoked:t".into())),
            (Some("t".into()), true)
        );
    }

    #[test]
    fn busy_answers_parse_as_the_scripts_do() {
        let h = Value::Array(vec![
            bulk("web1"),
            bulk("42"),
            bulk("t0"),
            Value::Nil,
            bulk("l"),
        ]);
        let reply = busy("revoked:x", Some(&Value::Int(900)), Some(&h));
        match super::super::reply::acquire(reply) {
            Ok(super::super::reply::Acquire::Busy(info)) => {
                assert_eq!((info.host.as_str(), info.pid.as_str()), ("web1", "42"));
                assert!(info.revoked && info.place.is_none());
                assert_eq!(info.label, "l");
            }
            other => panic!("{other:?}"),
        }
    }
}
