//! The line of waiters in `status` and `list`: read from Redis, and shown
//! as text and JSON. Waiters stand in line only for a plain lock on one
//! server (see `queue.rs`); elsewhere there is no line to show.

use std::time::SystemTime;

use serde::Serialize;

use crate::lock::{Line, LockKeys, Quorum, Waiting};
use crate::log::{short, Log};
use crate::secrets::{scrub, untrusted};

/// The line of each of `keys`, in order (empty where there is none, or
/// where it could not be read: said once on stderr).
pub fn read(quorum: &mut Quorum, keys: &[LockKeys], log: &Log) -> Vec<Line> {
    if !quorum.queues_waiters() || keys.is_empty() {
        return vec![Line::default(); keys.len()];
    }
    let answers = quorum.on_each(|node| {
        keys.iter()
            .map(|k| node.waiters(k))
            .collect::<Result<Vec<_>, _>>()
    });
    match answers.into_iter().next() {
        Some(Ok(lines)) => lines,
        Some(Err(e)) => {
            log.warn(format!("cannot read the waiters ({e:#}); shown as none"));
            vec![Line::default(); keys.len()]
        }
        None => vec![Line::default(); keys.len()],
    }
}

/// "  waiting: 1) web1 pid 4242 (root) for 12s; 2) ..." under the lock's
/// line, or nothing when nobody waits. Every field comes from Redis:
/// escaped and cut.
pub fn text(line: &Line) -> Option<String> {
    if line.count == 0 {
        return None;
    }
    let mut each: Vec<String> = line
        .waiters
        .iter()
        .enumerate()
        .map(|(i, w)| format!("{}) {}", i + 1, who(w)))
        .collect();
    let more = line.count.saturating_sub(line.waiters.len() as u64);
    if more > 0 {
        each.push(format!("and {more} more"));
    }
    Some(format!("  {} waiting: {}", line.count, each.join("; ")))
}

/// "web1 pid 4242 (root) for 12s".
fn who(w: &Waiting) -> String {
    if w.host.is_empty() {
        return format!("token {}", untrusted(&w.token));
    }
    let mut who = format!("{} pid {}", untrusted(&w.host), untrusted(&w.pid));
    if !w.user.is_empty() {
        who.push_str(&format!(" ({})", untrusted(&w.user)));
    }
    if let Ok(since) = humantime::parse_rfc3339_weak(&w.since) {
        let age = SystemTime::now().duration_since(since).unwrap_or_default();
        who.push_str(&format!(" for {}", short(age)));
    }
    who
}

/// One waiter in `--json`; fields a liveness key lacks are absent.
#[derive(Serialize)]
pub struct JsonWaiter {
    #[serde(skip_serializing_if = "Option::is_none")]
    host: Option<String>,
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

/// `waiters` of `--json`: `None` (absent) when nobody waits.
pub fn json(line: &Line) -> Option<Vec<JsonWaiter>> {
    if line.count == 0 {
        return None;
    }
    let given = |s: &str| (!s.is_empty()).then(|| scrub(s));
    let listed = line.waiters.iter().enumerate().map(|(i, w)| JsonWaiter {
        host: given(&w.host),
        pid: (!w.pid.is_empty()).then(|| w.pid.parse().ok()),
        position: i + 1,
        since: given(&w.since),
        token: w.token.clone(),
        user: given(&w.user),
    });
    Some(listed.collect())
}
