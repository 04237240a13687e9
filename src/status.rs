//! status, list and force-release: what Redis holds about a lock, as text
//! or JSON, and deleting a lock by hand.
//!
//! Every node is asked (one round trip per key and node, all nodes at
//! once). A lock is held when a majority of the nodes hold the same token;
//! with one node that is simply "the node holds it".

use std::collections::{BTreeSet, HashMap};
use std::io::{self, Write};
use std::time::{Duration, SystemTime};

use anyhow::anyhow;
use serde::Serialize;

use crate::cli::Cmd;
use crate::config::Conn;
use crate::exit::{Exit, Failure};
use crate::lock::{
    join_node_errors, Fault, Forced, Inspected, Line, LockKeys, NodeError, Quorum, Slot,
};
use crate::log::short;
use crate::log::Log;
use crate::log::Verbosity;
use crate::secrets::{scrub, untrusted};
use crate::waiters;

/// Connect and command timeout per node: an operator at a terminal should
/// not wait long for a dead server, but a busy one deserves a moment.
const NODE_TIMEOUT: Duration = Duration::from_secs(2);

pub fn run(conn: Conn, cmd: Cmd) -> Result<Exit, Failure> {
    let log = conn.log();
    // The quorum's own key and TTL are unused: admin calls name their keys.
    let mut quorum = Quorum::new(
        &conn.endpoints,
        LockKeys::new(&conn.prefix, ""),
        NODE_TIMEOUT,
        NODE_TIMEOUT,
    );
    let prefix = conn.prefix.as_str();
    match cmd {
        Cmd::Status { keys, json } => status(&mut quorum, prefix, &keys, json, &log),
        Cmd::List { json } => list(&mut quorum, prefix, json, &log),
        Cmd::ForceRelease { key, token, now } => {
            let quiet = conn.verbosity == Verbosity::Quiet;
            let how = Forcing {
                token: token.as_deref(),
                now,
                quiet,
            };
            force_release(&mut quorum, prefix, &key, how, &log)
        }
        Cmd::Generate { .. } | Cmd::Doctor { .. } => {
            Err(anyhow!("`generate` and `doctor` are handled before status::run").into())
        }
        Cmd::Wait(_) => Err(anyhow!("`wait` is not an inspection").into()),
    }
}

fn status(
    quorum: &mut Quorum,
    prefix: &str,
    keys: &[String],
    json: bool,
    log: &Log,
) -> Result<Exit, Failure> {
    let lock_keys: Vec<LockKeys> = keys.iter().map(|k| LockKeys::new(prefix, k)).collect();
    let answers = quorum.on_each(|node| {
        lock_keys
            .iter()
            .map(|k| node.inspect(k))
            .collect::<Result<Vec<_>, NodeError>>()
    });
    let what = match keys {
        [key] => format!("cannot read lock '{key}'"),
        _ => "cannot read the locks".to_string(),
    };
    let nodes = answered(quorum, answers, &what, log)?;
    let mut views: Vec<View> = keys
        .iter()
        .enumerate()
        .map(|(i, key)| View::merge(key, quorum, nodes.iter().map(|answers| &answers[i])))
        .collect();
    with_lines(quorum, prefix, &mut views, log);
    let all_held = views.iter().all(|v| v.held);
    print(&views, json)?;
    Ok(if all_held { Exit::Success } else { Exit::No })
}

fn list(quorum: &mut Quorum, prefix: &str, json: bool, log: &Log) -> Result<Exit, Failure> {
    let answers = quorum.on_each(|node| {
        let names = node.scan_locks(prefix)?;
        names
            .into_iter()
            .map(|name| {
                let inspected = node.inspect(&LockKeys::new(prefix, &name))?;
                Ok((name, inspected))
            })
            .collect::<Result<HashMap<_, _>, NodeError>>()
    });
    let nodes = answered(quorum, answers, "cannot list the locks", log)?;
    // Sorted by KEY; a node without the key holds nothing under it.
    let names: BTreeSet<&str> = nodes
        .iter()
        .flat_map(|found| found.keys().map(String::as_str))
        .collect();
    let free = Inspected::default();
    let mut views: Vec<View> = names
        .into_iter()
        .map(|name| {
            let answers = nodes.iter().map(|found| found.get(name).unwrap_or(&free));
            View::merge(name, quorum, answers)
        })
        .filter(|view| view.held)
        .collect();
    with_lines(quorum, prefix, &mut views, log);
    print(&views, json)?;
    Ok(Exit::Success)
}

/// Each view's line of waiters (see `waiters.rs`).
fn with_lines(quorum: &mut Quorum, prefix: &str, views: &mut [View], log: &Log) {
    let keys: Vec<LockKeys> = views
        .iter()
        .map(|v| LockKeys::new(prefix, &v.key))
        .collect();
    for (view, line) in views.iter_mut().zip(waiters::read(quorum, &keys, log)) {
        view.line = line;
    }
}

/// How `force-release` was asked to go about it.
#[derive(Clone, Copy)]
struct Forcing<'a> {
    /// Only if the lock holds this token.
    token: Option<&'a str>,
    /// Delete at once rather than revoke.
    now: bool,
    quiet: bool,
}

fn force_release(
    quorum: &mut Quorum,
    prefix: &str,
    key: &str,
    how: Forcing,
    log: &Log,
) -> Result<Exit, Failure> {
    let keys = LockKeys::new(prefix, key);
    let answers = quorum.on_each(|node| node.force_release(&keys, how.token, how.now));
    let total = quorum.nodes();
    let mut deleted = Vec::new();
    let mut mismatched = Vec::new();
    let mut errors = Vec::new();
    let mut revoked = false;
    for answer in answers {
        match answer {
            Ok((Forced::Deleted, was)) => deleted.push(was),
            Ok((Forced::Revoked, was)) => {
                revoked = true;
                deleted.push(was);
            }
            Ok((Forced::Mismatch, was)) => mismatched.push(was),
            Ok((Forced::Free, _)) => {}
            Err(e) => errors.push(e),
        }
    }
    if total - errors.len() < quorum.needed() {
        let done = match deleted.len() {
            0 => String::new(),
            n => format!(" (deleted on {n} of {total} nodes)"),
        };
        return Err(failure(
            errors,
            total,
            &format!("cannot release lock '{key}'{done}"),
        ));
    }
    for e in &errors {
        log.warn(format!(
            "{e:#}; the lock may stay there until its TTL runs out"
        ));
    }
    if !deleted.is_empty() {
        let view = View::merge(key, quorum, deleted.iter());
        if !how.quiet {
            emit([released_line(&view, key, how.token, revoked)])?;
        }
        return Ok(Exit::Success);
    }
    let why = match mismatched.is_empty() {
        false => format!(
            "is held by {} with another token; not released",
            View::merge(key, quorum, mismatched.iter()).who()
        ),
        true => "is not held; nothing to release".to_string(),
    };
    log.warn(format!("lock '{}' {why}", untrusted(key)));
    Ok(Exit::No)
}

/// "released 'KEY': it was held by ..."; with several nodes, "on 2 of 3
/// nodes" says where it was deleted.
///
/// Revoked: "revoked 'KEY' (no one gets it before its holder has stopped,
/// or within Ns): it was held by ...".
fn released_line(view: &View, key: &str, token: Option<&str>, revoked: bool) -> String {
    if revoked {
        return format!(
            "revoked '{}' (its holder stops COMMAND; no waiter gets the lock before, \
             --now deletes it at once): it was {}",
            untrusted(key),
            view.describe(false)
        );
    }
    match view.slots.as_slice() {
        // One holder of a semaphore (--token): the others stay.
        [slot] if token.is_some() => format!(
            "released a holder of '{}' (limit {}): it was {}",
            untrusted(key),
            view.limit,
            view.describe_slot(slot, false)
        ),
        _ => format!(
            "released '{}': it was {}",
            untrusted(key),
            view.describe(false)
        ),
    }
}

/// The answers of the nodes that answered, or exit 69 when fewer than a
/// majority did. Each failed node is reported on stderr.
fn answered<T>(
    quorum: &Quorum,
    answers: Vec<Result<T, NodeError>>,
    what: &str,
    log: &Log,
) -> Result<Vec<T>, Failure> {
    let total = quorum.nodes();
    let (ok, errors): (Vec<_>, Vec<_>) = answers.into_iter().partition(|a| a.is_ok());
    let ok: Vec<T> = ok.into_iter().filter_map(Result::ok).collect();
    let errors: Vec<NodeError> = errors.into_iter().filter_map(Result::err).collect();
    if ok.len() < quorum.needed() {
        return Err(failure(errors, total, what));
    }
    for e in errors {
        log.warn(format!("{e:#}; counted as not holding any lock"));
    }
    Ok(ok)
}

/// Too few nodes answered: exit 77 if one refused us (waiting or retrying
/// will not help), else 69.
fn failure(errors: Vec<NodeError>, total: usize, what: &str) -> Failure {
    let refused = errors.iter().any(|e| e.fault == Fault::Refused);
    let (exit, why) = match refused {
        true => (Exit::Refused, "Redis refused"),
        false => (Exit::Unavailable, "Redis unavailable"),
    };
    Failure {
        exit,
        error: join_node_errors(errors, total).context(format!("{what}: {why}")),
    }
}

/// One lock as the nodes see it together.
#[derive(Debug)]
struct View {
    key: String,
    /// A majority of the nodes hold `token`.
    held: bool,
    /// The token held by the most nodes, if any node holds one.
    token: Option<String>,
    /// How many nodes hold `token`, of how many.
    holding: usize,
    nodes: usize,
    /// How long a majority keeps holding it (`None`: no expiry).
    pttl: Option<Duration>,
    /// Held: the fencing token of this holder. Free: the last one issued.
    fence: i64,
    /// The holder record, from a node holding `token`.
    record: Inspected,
    /// A semaphore (`--limit N`, N > 1): N, else 0.
    limit: u32,
    /// A semaphore's holders, held by a majority or not, by fence.
    slots: Vec<SlotView>,
    /// Force-released: waiting for its holder to stop.
    revoked: bool,
    /// The waiters, in the order they will be served.
    line: Line,
}

/// One holder of a semaphore as the nodes see it together.
#[derive(Debug)]
struct SlotView {
    token: String,
    /// How many nodes hold this token.
    holding: usize,
    /// How long a majority keeps holding it.
    pttl: Option<Duration>,
    /// Its fencing token (0 if its record lacks one).
    fence: i64,
    /// From a node holding it.
    record: Slot,
}

/// The expiry a majority of `holding` copies still has: the `needed`-th
/// longest of their expiries.
fn majority_pttl(mut pttls: Vec<Option<Duration>>, needed: usize) -> Option<Duration> {
    pttls.sort_unstable_by(|a, b| b.cmp(a));
    let holding = pttls.len();
    pttls
        .get(needed.min(holding).saturating_sub(1))
        .copied()
        .flatten()
}

impl View {
    fn merge<'a>(key: &str, quorum: &Quorum, answers: impl Iterator<Item = &'a Inspected>) -> View {
        let answers: Vec<&Inspected> = answers.collect();
        let needed = quorum.needed();
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for token in answers.iter().filter_map(|a| a.token.as_deref()) {
            *counts.entry(token).or_default() += 1;
        }
        // The most widely held token; ties (no majority anyway) by name,
        // so that the output does not change from run to run.
        let token = counts
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
            .map(|(token, _)| token.to_string());
        let holders: Vec<&Inspected> = answers
            .iter()
            .copied()
            .filter(|a| a.token.is_some() && a.token == token)
            .collect();
        let holding = holders.len();
        let held = holding >= needed;
        // Counters only grow while the lock is free, so the holders'
        // largest is the fence their holder was given.
        let fenced = if held { &holders } else { &answers };
        let fence = fenced.iter().map(|a| a.fence).max().unwrap_or(0);
        let mut view = View {
            key: key.to_string(),
            held,
            token,
            holding,
            nodes: quorum.nodes(),
            pttl: majority_pttl(holders.iter().map(|a| a.pttl).collect(), needed),
            fence,
            record: holders.first().map(|a| (*a).clone()).unwrap_or_default(),
            limit: 0,
            slots: Vec::new(),
            revoked: holders.iter().any(|a| a.revoked),
            line: Line::default(),
        };
        if !held {
            view.merge_slots(&answers, needed);
        }
        view
    }

    /// A semaphore: its limit (as most nodes have it) and its holders.
    fn merge_slots(&mut self, answers: &[&Inspected], needed: usize) {
        let mut limits: HashMap<u32, usize> = HashMap::new();
        for limit in answers.iter().filter_map(|a| a.limit) {
            *limits.entry(limit).or_default() += 1;
        }
        let Some((&limit, _)) = limits.iter().max_by(|a, b| a.1.cmp(b.1).then(a.0.cmp(b.0))) else {
            return;
        };
        let mut tokens: HashMap<&str, Vec<&Slot>> = HashMap::new();
        for slot in answers.iter().flat_map(|a| &a.slots) {
            tokens.entry(&slot.token).or_default().push(slot);
        }
        let mut slots: Vec<SlotView> = tokens
            .into_iter()
            .filter_map(|(token, copies)| {
                Some(SlotView {
                    token: token.to_string(),
                    holding: copies.len(),
                    pttl: majority_pttl(copies.iter().map(|s| s.pttl).collect(), needed),
                    fence: copies
                        .iter()
                        .filter_map(|s| s.field("fence")?.parse().ok())
                        .max()
                        .unwrap_or(0),
                    record: (*copies.first()?).clone(),
                })
            })
            .collect();
        slots.sort_by(|a, b| a.fence.cmp(&b.fence).then(a.token.cmp(&b.token)));
        self.limit = limit;
        self.held = slots.iter().any(|s| s.holding >= needed);
        if self.held {
            self.pttl = slots.iter().filter_map(|s| s.pttl).max();
        }
        self.slots = slots;
    }

    /// The semaphore's holders that a majority of nodes hold.
    fn held_slots(&self) -> impl Iterator<Item = &SlotView> {
        let needed = self.nodes / 2 + 1;
        self.slots.iter().filter(move |s| s.holding >= needed)
    }

    /// "web1 pid 4242 (root)", or the token when the record is missing;
    /// for a semaphore "3 holders (limit 3)".
    fn who(&self) -> String {
        if self.limit > 0 {
            let n = self.held_slots().count();
            return format!("{} (limit {})", holders(n), self.limit);
        }
        let r = &self.record;
        who(|f| r.field(f), self.token.as_deref())
    }

    /// "held by web1 pid 4242 (root) for 12s, expires in 18s, fence 42: pg_dump"
    /// (without "expires in" for a lock that was just deleted); for a
    /// semaphore "held by 2 holders (limit 3): web1 pid ...; web2 pid ...".
    fn describe(&self, expiry: bool) -> String {
        if self.limit > 0 {
            let slots: Vec<&SlotView> = match expiry {
                true => self.held_slots().collect(),
                // Just deleted: every holder that was there.
                false => self.slots.iter().collect(),
            };
            let each: Vec<String> = slots
                .iter()
                .map(|s| self.describe_slot(s, expiry))
                .collect();
            return format!(
                "held by {} (limit {}): {}",
                holders(slots.len()),
                self.limit,
                each.join("; ")
            );
        }
        let r = &self.record;
        let mut line = match self.revoked {
            true => "being force-released, waiting for its holder to stop: ".to_string(),
            false => String::new(),
        };
        line.push_str(&format!("held by {}", self.who()));
        line.push_str(&details(
            |f| r.field(f),
            self.pttl.filter(|_| expiry),
            self.fence,
            self.nodes_note(self.holding),
        ));
        line
    }

    /// "web1 pid 4242 (root) for 12s, expires in 18s, fence 42: pg_dump".
    fn describe_slot(&self, slot: &SlotView, expiry: bool) -> String {
        let r = &slot.record;
        let mut line = match r.field("revoked") {
            Some("1") => "being force-released: ".to_string(),
            _ => String::new(),
        };
        line.push_str(&who(|f| r.field(f), Some(&slot.token)));
        line.push_str(&details(
            |f| r.field(f),
            slot.pttl.filter(|_| expiry),
            slot.fence,
            self.nodes_note(slot.holding),
        ));
        line
    }

    /// ", on 2 of 3 nodes" with several nodes.
    fn nodes_note(&self, holding: usize) -> String {
        match self.nodes {
            1 => String::new(),
            n => format!(", on {holding} of {n} nodes"),
        }
    }

    /// `status` and `list` text: "KEY  held by ..." or "KEY  free (...)".
    fn text(&self) -> String {
        match waiters::text(&self.line) {
            Some(line) => format!("{}\n{line}", self.lock_text()),
            None => self.lock_text(),
        }
    }

    fn lock_text(&self) -> String {
        let key = untrusted(&self.key);
        if self.held {
            return format!("{key}  {}", self.describe(true));
        }
        let mut why = match self.fence {
            0 => "never acquired".to_string(),
            fence => format!("last fence {fence}"),
        };
        if self.holding > 0 {
            why.push_str(&format!(
                "; held on only {} of {} nodes by {}, no majority",
                self.holding,
                self.nodes,
                self.who()
            ));
        }
        format!("{key}  free ({why})")
    }
}

/// `--json`: the contract's fields (`ttl_ms`, `token` and `holder` only
/// when held) and, with several nodes, `nodes` and `nodes_holding`. A
/// semaphore has `limit` and `holders` instead of `token` and `holder`;
/// its `ttl_ms` is the longest of its holders'. Fields in alphabetical
/// order, as the first versions printed them.
#[derive(Serialize)]
struct JsonView<'a> {
    fence: i64,
    held: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    holder: Option<JsonHolder>,
    #[serde(skip_serializing_if = "Option::is_none")]
    holders: Option<Vec<JsonSlot<'a>>>,
    key: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    limit: Option<u32>,
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
    waiters: Option<Vec<waiters::JsonWaiter>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    waiters_count: Option<u64>,
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
#[derive(Serialize)]
struct JsonHolder {
    #[serde(skip_serializing_if = "Option::is_none")]
    acquired_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    command: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    host: Option<String>,
    /// `Some(None)`: a pid that is not a number (null).
    #[serde(skip_serializing_if = "Option::is_none")]
    pid: Option<Option<u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<String>,
}

impl JsonHolder {
    fn of<'a>(field: impl Fn(&str) -> Option<&'a str>) -> JsonHolder {
        let text = |name: &str| field(name).map(scrub);
        JsonHolder {
            acquired_at: text("acquired_at"),
            command: text("command"),
            host: text("host"),
            pid: field("pid").map(|pid| pid.parse().ok()),
            user: text("user"),
        }
    }
}

impl View {
    fn json(&self) -> String {
        let several = (self.nodes > 1).then_some(self.nodes);
        let mut out = JsonView {
            fence: self.fence,
            held: self.held,
            holder: None,
            holders: None,
            key: &self.key,
            limit: None,
            nodes: several,
            nodes_holding: several.map(|_| self.holding),
            revoked: self.held && self.revoked,
            token: None,
            ttl_ms: None,
            waiters: waiters::json(&self.line),
            waiters_count: (self.line.count > 0).then_some(self.line.count),
        };
        if self.held {
            out.ttl_ms = Some(self.pttl.map(|d| d.as_millis()));
            if self.limit > 0 {
                out.limit = Some(self.limit);
                out.nodes_holding = None;
                out.holders = Some(self.held_slots().map(|s| self.json_slot(s)).collect());
            } else {
                out.token = Some(self.token.as_deref());
                let r = &self.record;
                out.holder = Some(JsonHolder::of(|f| r.field(f)));
            }
        } else if self.limit > 0 {
            out.nodes_holding = None;
        }
        // Only strings, integers and booleans: serialising cannot fail.
        serde_json::to_string(&out).unwrap_or_default()
    }

    fn json_slot<'a>(&self, slot: &'a SlotView) -> JsonSlot<'a> {
        let r = &slot.record;
        JsonSlot {
            fence: (slot.fence > 0).then_some(slot.fence),
            holder: JsonHolder::of(|f| r.field(f)),
            nodes_holding: (self.nodes > 1).then_some(slot.holding),
            token: &slot.token,
            ttl_ms: slot.pttl.map(|d| d.as_millis()),
        }
    }
}

/// "1 holder", "3 holders".
fn holders(n: usize) -> String {
    match n {
        1 => "1 holder".to_string(),
        n => format!("{n} holders"),
    }
}

/// "web1 pid 4242 (root)" from a holder record, or the token when the
/// record is missing.
fn who<'a>(field: impl Fn(&str) -> Option<&'a str>, token: Option<&str>) -> String {
    match (field("host"), field("pid")) {
        (Some(host), Some(pid)) => {
            let mut who = format!("{} pid {}", untrusted(host), untrusted(pid));
            if let Some(user) = field("user").filter(|u| !u.is_empty()) {
                who.push_str(&format!(" ({})", untrusted(user)));
            }
            who
        }
        _ => format!(
            "an unknown holder, token {}",
            untrusted(token.unwrap_or("?"))
        ),
    }
}

/// " for 12s, expires in 18s, fence 42, on 2 of 3 nodes: pg_dump".
fn details<'a>(
    field: impl Fn(&str) -> Option<&'a str>,
    pttl: Option<Duration>,
    fence: i64,
    nodes: String,
) -> String {
    let mut line = String::new();
    // How long ago the holder acquired the lock, by its own clock.
    let at = field("acquired_at").and_then(|at| humantime::parse_rfc3339_weak(at).ok());
    if let Some(at) = at {
        let age = SystemTime::now().duration_since(at).unwrap_or_default();
        line.push_str(&format!(" for {}", short(age)));
    }
    if let Some(left) = pttl {
        line.push_str(&format!(", expires in {}", short(left)));
    }
    line.push_str(&format!(", fence {fence}"));
    line.push_str(&nodes);
    if let Some(command) = field("command") {
        line.push_str(&format!(": {}", untrusted(command)));
    }
    line
}

fn print(views: &[View], json: bool) -> Result<(), Failure> {
    emit(views.iter().map(|v| match json {
        true => v.json(),
        false => v.text(),
    }))
}

/// Write lines to stdout. A closed pipe (`| head`) ends the output quietly.
fn emit(lines: impl IntoIterator<Item = String>) -> Result<(), Failure> {
    let mut out = io::stdout().lock();
    let written = lines
        .into_iter()
        .try_for_each(|line| writeln!(out, "{line}"))
        .and_then(|()| out.flush());
    match written {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(Failure {
            exit: Exit::No,
            error: anyhow!("cannot write to stdout: {e}"),
        }),
        _ => Ok(()),
    }
}
