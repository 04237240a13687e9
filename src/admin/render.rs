//! A lock's view as text and as JSON (`--json`), and the line that says
//! what `force-release` did. Everything in a view came from Redis: text
//! is escaped and cut, JSON has known passwords redacted.
//!
//! `now` is passed in (for "held for 12s"), so that the output of a view
//! is a pure function of it.

use std::time::{Duration, SystemTime};

use serde::Serialize;

use super::view::{LockView, SlotView};
use crate::holder::{details, group, Details, Shown};
use crate::lock::{Line, Waiting};
use crate::secrets::{scrub, untrusted};

/// `status` and `list` text: "KEY  held by ..." or "KEY  free (...)",
/// then the waiters' line if anyone waits.
pub fn text(view: &LockView, now: SystemTime) -> String {
    match waiters_text(&view.line, now) {
        Some(line) => format!("{}\n{line}", lock_text(view, now)),
        None => lock_text(view, now),
    }
}

fn lock_text(view: &LockView, now: SystemTime) -> String {
    let key = untrusted(&view.key);
    if view.held {
        return format!("{key}  {}", describe(view, true, now));
    }
    if view.undecided {
        let silent = view.nodes.saturating_sub(view.answered);
        return format!(
            "{key}  unknown (held on {} of {} nodes; {silent} did not answer, and with them \
             it may have a majority)",
            view.most_holding(),
            view.nodes,
        );
    }
    let mut why = match view.fence {
        0 => "never acquired".to_string(),
        fence => format!("last fence {fence}"),
    };
    if view.holding > 0 {
        why.push_str(&format!(
            "; held on only {} of {} nodes by {}, no majority",
            view.holding,
            view.nodes,
            who(view)
        ));
    }
    format!("{key}  free ({why})")
}

/// "web1 pid 4242 (root)", or the token when the record is missing; for
/// a semaphore "3 holders (limit 3)", a shared lock "3 shared holders".
pub fn who(view: &LockView) -> String {
    if view.shared {
        return shared_group(view.held_slots().count());
    }
    if view.limit > 0 {
        return group(view.held_slots().count(), view.limit);
    }
    view.holder.who(Some(view.token.as_deref().unwrap_or("?")))
}

/// "held by web1 pid 4242 (root) for 12s, expires in 18s, fence 42: pg_dump"
/// (without "expires in" for a lock that was just deleted); for a
/// semaphore "held by 2 holders (limit 3): web1 pid ...; web2 pid ...".
fn describe(view: &LockView, expiry: bool, now: SystemTime) -> String {
    if view.slotted() {
        let slots: Vec<&SlotView> = match expiry {
            true => view.held_slots().collect(),
            // Just deleted: every holder that was there.
            false => view.slots.iter().collect(),
        };
        let each: Vec<String> = slots
            .iter()
            .map(|s| describe_slot(view, s, expiry, now))
            .collect();
        let whom = match view.shared {
            true => shared_group(slots.len()),
            false => group(slots.len(), view.limit),
        };
        return format!("held by {whom}: {}", each.join("; "));
    }
    let hold = view.holder.on_hold();
    let ended = view
        .holder
        .ended(now)
        .filter(|_| expiry && !view.revoked && hold.is_none());
    let mut line = match (view.revoked, ended, &view.holder.replaced_by) {
        (true, _, Some(by)) => format!(
            "being replaced by {} (--replace-running), waiting for its holder to stop: ",
            untrusted(by)
        ),
        (true, _, None) => "being force-released, waiting for its holder to stop: ".to_string(),
        (false, Some(ago), _) => kept(ago, view.pttl, now),
        (false, None, _) => String::new(),
    };
    match hold {
        Some(hold) => line.push_str(&format!("{hold}{}", who(view))),
        None => line.push_str(&format!("held by {}", who(view))),
    }
    let more = Details {
        expires: view.pttl.filter(|_| expiry && ended.is_none()),
        fence: Some(view.fence),
        nodes: Some((view.holding, view.nodes)),
        command: view.holder.command.as_deref().filter(|c| !c.is_empty()),
    };
    line.push_str(&details(&view.holder, more, now));
    line
}

/// A shared lock's holders: "1 shared holder", "3 shared holders".
fn shared_group(n: usize) -> String {
    match n {
        1 => "1 shared holder".to_string(),
        n => format!("{n} shared holders"),
    }
}

/// A lock whose job has ended, kept by `--min-hold`: "job ended 3s ago;
/// kept by --min-hold until 2026-12-01T10:00:30Z (18s more): ".
fn kept(ago: Duration, left: Option<Duration>, now: SystemTime) -> String {
    let until = match left {
        Some(left) => format!(
            " until {} ({} more)",
            humantime::format_rfc3339_seconds(now + left),
            crate::log::short(left)
        ),
        None => String::new(),
    };
    format!(
        "job ended {} ago; kept by --min-hold{until}: ",
        crate::log::short(ago)
    )
}

/// "web1 pid 4242 (root) for 12s, expires in 18s, fence 42: pg_dump".
fn describe_slot(view: &LockView, slot: &SlotView, expiry: bool, now: SystemTime) -> String {
    let mut line = match slot.revoked {
        true => "being force-released: ".to_string(),
        false => String::new(),
    };
    line.push_str(&slot.holder.who(Some(&slot.token)));
    let more = Details {
        expires: slot.pttl.filter(|_| expiry),
        fence: Some(slot.fence),
        nodes: Some((slot.holding, view.nodes)),
        command: slot.holder.command.as_deref(),
    };
    line.push_str(&details(&slot.holder, more, now));
    line
}

/// What `force-release` deleted: "released 'KEY': it was held by ...";
/// with several nodes, "on 2 of 3 nodes" says where it was deleted.
/// `one_slot`: one holder of a semaphore (`--token`), the others stay.
/// Revoked: "revoked 'KEY' (its holder stops COMMAND; ...): it was held by ...".
pub fn released(view: &LockView, one_slot: bool, revoked: bool, now: SystemTime) -> String {
    let key = untrusted(&view.key);
    if !revoked && !view.slotted() && view.holder.hold_reason.is_some() {
        return format!(
            "released the hold on '{key}': it was {}",
            describe(view, false, now)
        );
    }
    if !revoked && !view.slotted() && view.holder.ended_at.is_some() {
        return format!(
            "released '{key}' at once (its job had ended; --min-hold kept the lock, and \
             there was no holder to stop): it was {}",
            describe(view, false, now)
        );
    }
    if revoked {
        return format!(
            "revoked '{key}' (its holder stops COMMAND; no waiter gets the lock before, \
             --now deletes it at once): it was {}",
            describe(view, false, now)
        );
    }
    match view.slots.as_slice() {
        [slot] if one_slot => format!(
            "released a holder of '{key}' ({}): it was {}",
            match view.shared {
                true => "shared".to_string(),
                false => format!("limit {}", view.limit),
            },
            describe_slot(view, slot, false, now)
        ),
        _ => format!("released '{key}': it was {}", describe(view, false, now)),
    }
}

/// "  2 waiting: 1) web1 pid 4242 (root) for 12s; 2) ..." under the
/// lock's line, or nothing when nobody waits.
fn waiters_text(line: &Line, now: SystemTime) -> Option<String> {
    if line.count == 0 {
        return None;
    }
    let mut each: Vec<String> = line
        .waiters
        .iter()
        .enumerate()
        .map(|(i, w)| format!("{}) {}", i + 1, waiter(w, now)))
        .collect();
    let listed = u64::try_from(line.waiters.len()).unwrap_or(u64::MAX);
    let more = line.count.saturating_sub(listed);
    if more > 0 {
        each.push(format!("and {more} more"));
    }
    Some(format!("  {} waiting: {}", line.count, each.join("; ")))
}

/// "web1 pid 4242 (root) for 12s" (shown as a holder is), or "token T"
/// for a waiter that left no description.
fn waiter(w: &Waiting, now: SystemTime) -> String {
    let mode = if w.shared { " (shared)" } else { "" };
    if w.host.is_empty() {
        return format!("token {}{mode}", untrusted(&w.token));
    }
    let shown = Shown {
        host: Some(w.host.clone()),
        pid: Some(w.pid.clone()),
        user: Some(w.user.clone()),
        command: None,
        acquired_at: Some(w.since.clone()),
        label: (!w.label.is_empty()).then(|| w.label.clone()),
        ..Shown::default()
    };
    let age = details(&shown, Details::default(), now);
    format!("{}{age}{mode}", shown.who(None))
}

/// `--json`: the contract's fields (`ttl_ms`, `token` and `holder` only
/// when held) and, with several nodes, `nodes` and `nodes_holding`. A
/// semaphore has `limit` and `holders` instead of `token` and `holder`;
/// its `ttl_ms` is the longest of its holders'. Fields in alphabetical
/// order, as the first versions printed them.
#[derive(Serialize)]
struct JsonView<'a> {
    fence: i64,
    /// `None` (null): unknown, nodes that did not answer may hold it.
    held: Option<bool>,
    /// Held by `redlock-run hold`: why, and until when.
    #[serde(skip_serializing_if = "Option::is_none")]
    hold: Option<JsonHold>,
    #[serde(skip_serializing_if = "Option::is_none")]
    holder: Option<JsonHolder>,
    #[serde(skip_serializing_if = "Option::is_none")]
    holders: Option<Vec<JsonSlot<'a>>>,
    key: &'a str,
    /// The holder's `--label` (a plain lock), absent when it has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    label: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    limit: Option<u32>,
    /// Held: `shared` or `exclusive` (a semaphore has `limit` instead).
    #[serde(skip_serializing_if = "Option::is_none")]
    mode: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    nodes: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    nodes_holding: Option<usize>,
    /// Present (true) only while the lock is being force-released.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    revoked: bool,
    /// `Some(None)`: held, but by no token of a majority (null).
    #[serde(skip_serializing_if = "Option::is_none")]
    token: Option<Option<&'a str>>,
    /// `Some(None)`: held without expiry (null: not set by this tool).
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl_ms: Option<Option<u128>>,
    /// The line of waiters, absent when nobody waits.
    #[serde(skip_serializing_if = "Option::is_none")]
    waiters: Option<Vec<JsonWaiter>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    waiters_count: Option<u64>,
}

/// `hold` of `--json`: a hold's reason, and its end in Unix milliseconds
/// (by the server's clock; absent from a record without it).
#[derive(Serialize)]
struct JsonHold {
    reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    until_ms: Option<u64>,
}

/// One holder of a semaphore in `--json`.
#[derive(Serialize)]
struct JsonSlot<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    fence: Option<i64>,
    holder: JsonHolder,
    #[serde(skip_serializing_if = "Option::is_none")]
    nodes_holding: Option<usize>,
    token: &'a str,
    ttl_ms: Option<u128>,
}

/// The `holder` object of `--json`: machine-readable, so not cut or
/// escaped beyond JSON's own escaping; known passwords are redacted.
/// Typed fields only: `held_ms` and `expires_ms` are what the text form
/// says as "for 12s, expires in 18s".
#[derive(Serialize)]
struct JsonHolder {
    #[serde(skip_serializing_if = "Option::is_none")]
    acquired_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    command: Option<String>,
    /// When COMMAND ended, if `--min-hold` keeps the lock after it.
    #[serde(skip_serializing_if = "Option::is_none")]
    ended_at: Option<String>,
    /// Until the lock (this holder's slot) expires; absent without expiry.
    #[serde(skip_serializing_if = "Option::is_none")]
    expires_ms: Option<u128>,
    /// Since `acquired_at` (the holder's clock against ours; never below 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    held_ms: Option<u128>,
    #[serde(skip_serializing_if = "Option::is_none")]
    host: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    label: Option<String>,
    /// `Some(None)`: a pid that is not a number (null).
    #[serde(skip_serializing_if = "Option::is_none")]
    pid: Option<Option<u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<String>,
}

impl JsonHolder {
    fn of(shown: &Shown, pttl: Option<Duration>, now: SystemTime) -> JsonHolder {
        let text = |field: &Option<String>| field.as_deref().map(scrub);
        JsonHolder {
            acquired_at: text(&shown.acquired_at),
            command: text(&shown.command).filter(|c| !c.is_empty()),
            // A hold has no job that ended: its `hold` says the rest.
            ended_at: text(&shown.ended_at).filter(|_| shown.hold_reason.is_none()),
            expires_ms: pttl.map(|d| d.as_millis()),
            held_ms: shown.age(now).map(|d| d.as_millis()),
            host: text(&shown.host),
            label: text(&shown.label),
            pid: shown.pid.as_deref().map(|pid| pid.parse().ok()),
            user: text(&shown.user),
        }
    }
}

/// One waiter in `--json`; fields a liveness key lacks are absent.
#[derive(Serialize)]
struct JsonWaiter {
    #[serde(skip_serializing_if = "Option::is_none")]
    host: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    label: Option<String>,
    /// `shared` for a waiter of `--shared` (absent: exclusive).
    #[serde(skip_serializing_if = "Option::is_none")]
    mode: Option<&'static str>,
    /// `Some(None)`: a pid that is not a number (null).
    #[serde(skip_serializing_if = "Option::is_none")]
    pid: Option<Option<u64>>,
    /// 1 is the next to be served.
    position: usize,
    /// When it began to wait (RFC 3339, by its own clock).
    #[serde(skip_serializing_if = "Option::is_none")]
    since: Option<String>,
    token: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<String>,
}

/// One line of `--json` (`now`: for each holder's `held_ms`).
pub fn json(view: &LockView, now: SystemTime) -> String {
    let several = (view.nodes > 1).then_some(view.nodes);
    let mut out = JsonView {
        fence: view.fence,
        held: (!view.undecided).then_some(view.held),
        hold: None,
        holder: None,
        holders: None,
        key: &view.key,
        label: None,
        limit: None,
        mode: None,
        nodes: several,
        nodes_holding: several.map(|_| view.holding),
        revoked: view.held && view.revoked,
        token: None,
        ttl_ms: None,
        waiters: waiters_json(&view.line),
        waiters_count: (view.line.count > 0).then_some(view.line.count),
    };
    if view.held {
        out.ttl_ms = Some(view.pttl.map(|d| d.as_millis()));
        if view.slotted() {
            out.limit = (view.limit > 0).then_some(view.limit);
            out.mode = view.shared.then_some("shared");
            out.nodes_holding = None;
            out.holders = Some(view.held_slots().map(|s| json_slot(view, s, now)).collect());
        } else {
            out.mode = Some("exclusive");
            out.token = Some(view.token.as_deref());
            out.holder = Some(JsonHolder::of(&view.holder, view.pttl, now));
            out.label = view.holder.label.as_deref().map(scrub);
            out.hold = view.holder.hold_reason.as_deref().map(|reason| JsonHold {
                reason: scrub(reason),
                until_ms: view.holder.hold_until,
            });
        }
    } else if view.slotted() {
        out.nodes_holding = None;
    }
    // Only strings, integers and booleans: serialising cannot fail.
    serde_json::to_string(&out).unwrap_or_default()
}

fn json_slot<'a>(view: &LockView, slot: &'a SlotView, now: SystemTime) -> JsonSlot<'a> {
    JsonSlot {
        fence: (slot.fence > 0).then_some(slot.fence),
        holder: JsonHolder::of(&slot.holder, slot.pttl, now),
        nodes_holding: (view.nodes > 1).then_some(slot.holding),
        token: &slot.token,
        ttl_ms: slot.pttl.map(|d| d.as_millis()),
    }
}

/// `waiters` of `--json`: `None` (absent) when nobody waits.
fn waiters_json(line: &Line) -> Option<Vec<JsonWaiter>> {
    if line.count == 0 {
        return None;
    }
    let given = |s: &str| (!s.is_empty()).then(|| scrub(s));
    let listed = line.waiters.iter().enumerate().map(|(i, w)| JsonWaiter {
        host: given(&w.host),
        label: given(&w.label),
        mode: w.shared.then_some("shared"),
        pid: (!w.pid.is_empty()).then(|| w.pid.parse().ok()),
        position: i + 1,
        since: given(&w.since),
        token: w.token.clone(),
        user: given(&w.user),
    });
    Some(listed.collect())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::lock::{Inspected, Slot};

    /// Twelve seconds after every record below was acquired.
    fn now() -> SystemTime {
        humantime::parse_rfc3339("2026-12-01T10:00:12Z").expect("time")
    }

    fn record(host: &str, pid: &str, user: &str, command: &str) -> Vec<(String, String)> {
        [
            ("host", host),
            ("pid", pid),
            ("user", user),
            ("command", command),
            ("acquired_at", "2026-12-01T10:00:00.000Z"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    fn held(token: &str, fence: i64) -> Inspected {
        Inspected {
            token: Some(token.into()),
            pttl: Some(Duration::from_secs(18)),
            fence,
            holder: record("web1", "4242", "root", "pg_dump -f /backup/db.sql"),
            ..Inspected::default()
        }
    }

    fn view(key: &str, nodes: usize, answers: &[Inspected]) -> LockView {
        LockView::merge(key, nodes, answers.iter())
    }

    #[test]
    fn a_free_lock() {
        let never = view("job", 1, &[Inspected::default()]);
        assert_eq!(text(&never, now()), "job  free (never acquired)");
        assert_eq!(
            json(&never, now()),
            r#"{"fence":0,"held":false,"key":"job"}"#
        );
        let after = Inspected {
            fence: 7,
            ..Inspected::default()
        };
        assert_eq!(
            text(&view("job", 1, &[after]), now()),
            "job  free (last fence 7)"
        );
    }

    #[test]
    fn a_held_lock() {
        let v = view("backup", 1, &[held("t1", 42)]);
        assert_eq!(
            text(&v, now()),
            "backup  held by web1 pid 4242 (root) for 12s, expires in 18s, fence 42: \
             pg_dump -f /backup/db.sql"
        );
        assert_eq!(
            json(&v, now()),
            r#"{"fence":42,"held":true,"holder":{"acquired_at":"2026-12-01T10:00:00.000Z","command":"pg_dump -f /backup/db.sql","expires_ms":18000,"held_ms":12000,"host":"web1","pid":4242,"user":"root"},"key":"backup","mode":"exclusive","token":"t1","ttl_ms":18000}"#
        );
        let revoked = Inspected {
            revoked: true,
            holder: Vec::new(),
            pttl: None,
            ..held("t1", 42)
        };
        let v = view("backup", 1, &[revoked]);
        assert_eq!(
            text(&v, now()),
            "backup  being force-released, waiting for its holder to stop: held by an unknown \
             holder, token t1, fence 42"
        );
        assert_eq!(
            json(&v, now()),
            r#"{"fence":42,"held":true,"holder":{},"key":"backup","mode":"exclusive","revoked":true,"token":"t1","ttl_ms":null}"#
        );
    }

    #[test]
    fn a_hold_and_a_holder_being_replaced() {
        let mut hold = held("t1", 42);
        hold.holder.retain(|(k, _)| k != "command");
        hold.holder.extend(
            [
                ("hold_reason", "INC-7: freeze"),
                ("hold_until", "1796119230000"),
                ("ended_at", "2026-12-01T10:00:00.000Z"),
            ]
            .map(|(k, v)| (k.to_string(), v.to_string())),
        );
        let v = view("deploy", 1, &[hold]);
        assert_eq!(
            text(&v, now()),
            "deploy  on hold (INC-7: freeze) until 2026-12-01T10:00:30Z by web1 pid 4242 (root) \
             for 12s, expires in 18s, fence 42"
        );
        let line = json(&v, now());
        assert!(
            line.contains(r#""hold":{"reason":"INC-7: freeze","until_ms":1796119230000}"#)
                && !line.contains("ended_at")
                && !line.contains("command"),
            "{line}"
        );
        let mut replaced = held("t1", 42);
        replaced.revoked = true;
        replaced
            .holder
            .push(("replaced_by".into(), "ci2 pid 7".into()));
        let v = view("deploy", 1, &[replaced]);
        assert!(
            text(&v, now()).starts_with(
                "deploy  being replaced by ci2 pid 7 (--replace-running), waiting for its \
                 holder to stop: held by web1 pid 4242"
            ),
            "{}",
            text(&v, now())
        );
    }

    #[test]
    fn text_escapes_what_redis_sent_and_json_keeps_it() {
        let mut odd = held("t1", 1);
        odd.holder = record("we\u{1b}b1", "x", "", "rm\n-rf");
        let v = view("k\u{7}", 1, &[odd]);
        let shown = text(&v, now());
        assert!(!shown.chars().any(char::is_control), "{shown}");
        assert!(
            json(&v, now()).contains(r#""host":"we\u001bb1","pid":null"#),
            "{}",
            json(&v, now())
        );
    }

    fn slot(token: &str, fence: &str, host: &str, user: &str) -> Slot {
        let mut holder = record(host, "1", user, "job");
        holder.push(("fence".into(), fence.into()));
        Slot {
            token: token.into(),
            pttl: Some(Duration::from_secs(20)),
            holder,
        }
    }

    fn semaphore() -> Inspected {
        Inspected {
            limit: Some(3),
            fence: 6,
            slots: vec![slot("b", "6", "web2", "ci"), slot("a", "5", "web1", "root")],
            ..Inspected::default()
        }
    }

    #[test]
    fn a_semaphore() {
        let v = view("pool", 1, &[semaphore()]);
        assert_eq!(
            text(&v, now()),
            "pool  held by 2 holders (limit 3): web1 pid 1 (root) for 12s, expires in 20s, \
             fence 5: job; web2 pid 1 (ci) for 12s, expires in 20s, fence 6: job"
        );
        let holder = |host: &str, user: &str| {
            format!(
                r#"{{"acquired_at":"2026-12-01T10:00:00.000Z","command":"job","expires_ms":20000,"held_ms":12000,"host":"{host}","pid":1,"user":"{user}"}}"#
            )
        };
        assert_eq!(
            json(&v, now()),
            format!(
                r#"{{"fence":6,"held":true,"holders":[{{"fence":5,"holder":{},"token":"a","ttl_ms":20000}},{{"fence":6,"holder":{},"token":"b","ttl_ms":20000}}],"key":"pool","limit":3,"ttl_ms":20000}}"#,
                holder("web1", "root"),
                holder("web2", "ci")
            )
        );
        assert_eq!(
            released(&v, false, false, now()),
            "released 'pool': it was held by 2 holders (limit 3): web1 pid 1 (root) for 12s, \
             fence 5: job; web2 pid 1 (ci) for 12s, fence 6: job"
        );
        let mut one = semaphore();
        one.slots.truncate(1);
        assert_eq!(
            released(&view("pool", 1, &[one]), true, false, now()),
            "released a holder of 'pool' (limit 3): it was web2 pid 1 (ci) for 12s, fence 6: job"
        );
    }

    #[test]
    fn a_shared_lock() {
        let shared = Inspected {
            limit: None,
            shared: true,
            ..semaphore()
        };
        let v = view("db", 1, std::slice::from_ref(&shared));
        assert_eq!(
            text(&v, now()),
            "db  held by 2 shared holders: web1 pid 1 (root) for 12s, expires in 20s, \
             fence 5: job; web2 pid 1 (ci) for 12s, expires in 20s, fence 6: job"
        );
        let out = json(&v, now());
        assert!(
            out.contains(r#""key":"db","mode":"shared","ttl_ms":20000}"#),
            "{out}"
        );
        assert!(out.contains(r#""holders":[{"fence":5,"#), "{out}");
        assert!(!out.contains("limit"), "{out}");
        let mut one = shared;
        one.slots.truncate(1);
        assert_eq!(
            released(&view("db", 1, &[one]), true, false, now()),
            "released a holder of 'db' (shared): it was web2 pid 1 (ci) for 12s, fence 6: job"
        );
    }

    #[test]
    fn waiters_under_the_lock() {
        let mut v = view("deploy", 1, &[held("t1", 9)]);
        v.line = Line {
            count: 3,
            waiters: vec![
                Waiting {
                    token: "w1".into(),
                    host: "ci1".into(),
                    pid: "7".into(),
                    user: "ci".into(),
                    since: "2026-12-01T10:00:10Z".into(),
                    label: String::new(),
                    shared: false,
                },
                Waiting {
                    token: "w2".into(),
                    shared: true,
                    ..Waiting::default()
                },
            ],
        };
        let shown = text(&v, now());
        let (_, line) = shown.split_once('\n').expect("two lines");
        assert_eq!(
            line,
            "  3 waiting: 1) ci1 pid 7 (ci) for 2s; 2) token w2 (shared); and 1 more"
        );
        let lines = json(&v, now());
        assert!(
            lines.ends_with(
                r#""waiters":[{"host":"ci1","pid":7,"position":1,"since":"2026-12-01T10:00:10Z","token":"w1","user":"ci"},{"mode":"shared","position":2,"token":"w2"}],"waiters_count":3}"#
            ),
            "{lines}"
        );
        v.line = Line::default();
        assert!(!text(&v, now()).contains('\n'));
        assert!(!json(&v, now()).contains("waiters"));
    }

    #[test]
    fn several_nodes() {
        let answers = [held("t1", 42), held("t1", 41), Inspected::default()];
        let v = view("job", 3, &answers);
        assert_eq!(
            text(&v, now()),
            "job  held by web1 pid 4242 (root) for 12s, expires in 18s, fence 42, on 2 of 3 \
             nodes: pg_dump -f /backup/db.sql"
        );
        assert!(json(&v, now()).starts_with(r#"{"fence":42,"held":true,"holder":{"#));
        assert!(
            json(&v, now()).ends_with(
                r#""key":"job","mode":"exclusive","nodes":3,"nodes_holding":2,"token":"t1","ttl_ms":18000}"#
            ),
            "{}",
            json(&v, now())
        );
        let minority = [held("t1", 9), Inspected::default(), Inspected::default()];
        let v = view("job", 3, &minority);
        assert_eq!(
            text(&v, now()),
            "job  free (last fence 9; held on only 1 of 3 nodes by web1 pid 4242 (root), no \
             majority)"
        );
        assert_eq!(
            json(&v, now()),
            r#"{"fence":9,"held":false,"key":"job","nodes":3,"nodes_holding":1}"#
        );
        assert_eq!(
            released(&v, false, true, now()),
            "revoked 'job' (its holder stops COMMAND; no waiter gets the lock before, --now \
             deletes it at once): it was held by web1 pid 4242 (root) for 12s, fence 9, on 1 of \
             3 nodes: pg_dump -f /backup/db.sql"
        );
    }
}
