//! What Redis holds about a lock, as one typed value: every node's
//! answer merged into who holds it (a plain lock's holder, or a
//! semaphore's), until when, its fence, and the line of waiters.
//!
//! Every node is asked (one round trip per key and node, all nodes at
//! once). A lock is held when a majority of the nodes hold the same token;
//! with one node that is simply "the node holds it".

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use crate::exit::Failure;
use crate::holder::Shown;
use crate::lock::{join_node_errors, Inspected, Line, LockKeys, NodeError, Quorum, Slot, Verdict};
use crate::log::Log;

/// One lock as the nodes see it together.
#[derive(Debug, Clone, Default)]
pub struct LockView {
    pub key: String,
    /// A majority of the nodes hold `token` (a semaphore: some token).
    pub held: bool,
    /// Not held by the answers, but a holder with the nodes that did not
    /// answer could have a majority: neither held nor free.
    pub undecided: bool,
    /// The token held by the most nodes, if any node holds one.
    pub token: Option<String>,
    /// How many nodes hold `token`, of how many.
    pub holding: usize,
    pub nodes: usize,
    /// How many nodes answered.
    pub answered: usize,
    /// How long a majority keeps holding it (`None`: no expiry).
    pub pttl: Option<Duration>,
    /// Held: the fencing token of this holder. Free: the last one issued.
    pub fence: i64,
    /// The holder record, from a node holding `token`.
    pub holder: Shown,
    /// A semaphore (`--limit N`, N > 1): N, else 0.
    pub limit: u32,
    /// A semaphore's holders (or a shared lock's), held by a majority or
    /// not, by fence.
    pub slots: Vec<SlotView>,
    /// Held shared (`--shared`): its holders are in `slots`.
    pub shared: bool,
    /// Force-released: waiting for its holder to stop.
    pub revoked: bool,
    /// The waiters, in the order they will be served.
    pub line: Line,
}

/// One holder of a semaphore as the nodes see it together.
#[derive(Debug, Clone, Default)]
pub struct SlotView {
    pub token: String,
    /// How many nodes hold this token.
    pub holding: usize,
    /// How long a majority keeps holding it.
    pub pttl: Option<Duration>,
    /// Its fencing token (0 if its record lacks one).
    pub fence: i64,
    /// From a node holding it.
    pub holder: Shown,
    /// Force-released: waiting for this holder to stop.
    pub revoked: bool,
}

/// `status KEY...`: each key as the nodes hold it, in the order given.
pub fn status(
    quorum: &mut Quorum,
    prefix: &str,
    keys: &[String],
    log: &Log,
) -> Result<Vec<LockView>, Failure> {
    let lock_keys: Vec<LockKeys> = keys.iter().map(|k| LockKeys::new(prefix, k)).collect();
    let answers = quorum.inspect_all(&lock_keys);
    let what = match keys {
        [key] => format!("cannot read lock '{key}'"),
        _ => "cannot read the locks".to_string(),
    };
    let nodes = answered(quorum, answers, &what, log)?;
    let total = quorum.nodes();
    let mut views: Vec<LockView> = keys
        .iter()
        .enumerate()
        .map(|(i, key)| LockView::merge(key, total, nodes.iter().map(|answers| &answers[i])))
        .collect();
    with_lines(quorum, prefix, &mut views, log);
    Ok(views)
}

/// `list`: every lock under the prefix that a majority holds, by KEY.
pub fn list(quorum: &mut Quorum, prefix: &str, log: &Log) -> Result<Vec<LockView>, Failure> {
    let answers = quorum.list_all(prefix);
    let nodes = answered(quorum, answers, "cannot list the locks", log)?;
    let nodes: Vec<HashMap<String, Inspected>> = nodes
        .into_iter()
        .map(|found| found.into_iter().collect())
        .collect();
    // Sorted by KEY; a node without the key holds nothing under it.
    let names: BTreeSet<&str> = nodes
        .iter()
        .flat_map(|found| found.keys().map(String::as_str))
        .collect();
    let free = Inspected::default();
    let total = quorum.nodes();
    let mut views: Vec<LockView> = names
        .into_iter()
        .map(|name| {
            let answers = nodes.iter().map(|found| found.get(name).unwrap_or(&free));
            LockView::merge(name, total, answers)
        })
        .filter(|view| view.held || view.undecided)
        .collect();
    with_lines(quorum, prefix, &mut views, log);
    Ok(views)
}

/// Each view's line of waiters. Waiters stand in line only for a plain
/// lock on one server (see `queue.rs`); elsewhere there is no line.
fn with_lines(quorum: &mut Quorum, prefix: &str, views: &mut [LockView], log: &Log) {
    let keys: Vec<LockKeys> = views
        .iter()
        .map(|v| LockKeys::new(prefix, &v.key))
        .collect();
    for (view, line) in views.iter_mut().zip(lines(quorum, &keys, log)) {
        view.line = line;
    }
}

/// The line of each of `keys`, in order (empty where there is none, or
/// where it could not be read: said once on stderr).
fn lines(quorum: &mut Quorum, keys: &[LockKeys], log: &Log) -> Vec<Line> {
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

/// The answers of the nodes that answered, or exit 69 when fewer than a
/// majority did. Each failed node is reported on stderr.
pub fn answered<T>(
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
        log.warn(format!(
            "{e:#}; it may hold a lock: what only it could decide is shown as unknown"
        ));
    }
    Ok(ok)
}

/// Too few nodes answered: the exit code of the gravest cause, as in
/// every mode (see `lock::Verdict`): 71 for a local failure, 77 if one
/// refused us (waiting or retrying will not help), else 69.
pub fn failure(errors: Vec<NodeError>, total: usize, what: &str) -> Failure {
    let verdict = Verdict::of_errors(&errors);
    Failure {
        exit: verdict.exit(),
        error: join_node_errors(errors, total).context(format!("{what}: {}", verdict.why())),
    }
}

/// Whether a lock that the answers do not show held may be held all the
/// same: its most widely held token, on `holding` nodes, would have a
/// majority with the `unanswered` nodes. A node that does not answer is
/// not a node that does not hold it: the lock is free only when a
/// majority says so.
pub fn undecided(held: bool, holding: usize, unanswered: usize, needed: usize) -> bool {
    !held && unanswered > 0 && holding + unanswered >= needed
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

impl LockView {
    /// The answers of the nodes that answered, of `nodes` in all, merged.
    pub fn merge<'a>(
        key: &str,
        nodes: usize,
        answers: impl Iterator<Item = &'a Inspected>,
    ) -> LockView {
        let answers: Vec<&Inspected> = answers.collect();
        let needed = nodes / 2 + 1;
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
        let unanswered = nodes.saturating_sub(answers.len());
        let mut view = LockView {
            key: key.to_string(),
            held,
            undecided: undecided(held, holding, unanswered, needed),
            token,
            holding,
            nodes,
            answered: answers.len(),
            pttl: majority_pttl(holders.iter().map(|a| a.pttl).collect(), needed),
            fence,
            holder: holders
                .first()
                .map(|a| Shown::of(|f| a.field(f)))
                .unwrap_or_default(),
            limit: 0,
            slots: Vec::new(),
            shared: false,
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
        let most = limits.iter().max_by(|a, b| a.1.cmp(b.1).then(a.0.cmp(b.0)));
        // A shared lock's holders are kept as a semaphore's, without a limit.
        let shared = answers.iter().filter(|a| a.shared).count();
        let limit = match most {
            Some((&limit, &n)) if n >= shared => limit,
            _ if shared > 0 => 0,
            _ => return,
        };
        self.shared = limit == 0;
        let mut tokens: HashMap<&str, Vec<&Slot>> = HashMap::new();
        for slot in answers.iter().flat_map(|a| &a.slots) {
            tokens.entry(&slot.token).or_default().push(slot);
        }
        let mut slots: Vec<SlotView> = tokens
            .into_iter()
            .filter_map(|(token, copies)| SlotView::merge(token, &copies, needed))
            .collect();
        slots.sort_by(|a, b| a.fence.cmp(&b.fence).then(a.token.cmp(&b.token)));
        self.limit = limit;
        self.held = slots.iter().any(|s| s.holding >= needed);
        let unanswered = self.nodes.saturating_sub(answers.len());
        let most = slots.iter().map(|s| s.holding).max().unwrap_or(0);
        self.undecided = undecided(self.held, most, unanswered, needed);
        if self.held {
            self.pttl = slots.iter().filter_map(|s| s.pttl).max();
        }
        self.slots = slots;
    }

    /// How many nodes hold the most widely held token (or slot).
    pub fn most_holding(&self) -> usize {
        let slots = self.slots.iter().map(|s| s.holding).max().unwrap_or(0);
        self.holding.max(slots)
    }

    /// A semaphore's or a shared lock's: its holders are `slots`.
    pub fn slotted(&self) -> bool {
        self.limit > 0 || self.shared
    }

    /// The semaphore's holders that a majority of nodes hold.
    pub fn held_slots(&self) -> impl Iterator<Item = &SlotView> {
        let needed = self.nodes / 2 + 1;
        self.slots.iter().filter(move |s| s.holding >= needed)
    }
}

impl SlotView {
    /// One token's copies, one per node holding it.
    fn merge(token: &str, copies: &[&Slot], needed: usize) -> Option<SlotView> {
        let first = copies.first()?;
        Some(SlotView {
            token: token.to_string(),
            holding: copies.len(),
            pttl: majority_pttl(copies.iter().map(|s| s.pttl).collect(), needed),
            fence: copies
                .iter()
                .filter_map(|s| s.field("fence")?.parse().ok())
                .max()
                .unwrap_or(0),
            holder: Shown::of(|f| first.field(f)),
            revoked: first.field("revoked") == Some("1"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holding(token: &str, pttl_s: u64, fence: i64) -> Inspected {
        Inspected {
            token: Some(token.into()),
            pttl: Some(Duration::from_secs(pttl_s)),
            fence,
            ..Inspected::default()
        }
    }

    #[test]
    fn a_majority_holds_until_its_copies_expire() {
        let secs = |s| Some(Duration::from_secs(s));
        assert_eq!(
            majority_pttl(vec![secs(10), secs(30), secs(20)], 2),
            secs(20)
        );
        assert_eq!(majority_pttl(vec![secs(10), None], 2), None);
        assert_eq!(majority_pttl(vec![secs(5)], 2), secs(5));
        let answers = [
            holding("a", 30, 8),
            holding("a", 10, 7),
            holding("b", 50, 9),
        ];
        let view = LockView::merge("k", 3, answers.iter());
        assert!(view.held);
        assert_eq!(view.token.as_deref(), Some("a"));
        assert_eq!((view.holding, view.fence), (2, 8));
        assert_eq!(view.pttl, Some(Duration::from_secs(10)));
    }

    #[test]
    fn a_node_that_did_not_answer_may_hold_the_majority() {
        // 2 of 3 answered; one holds "a": with the third, a majority.
        let answers = [holding("a", 30, 8), Inspected::default()];
        let view = LockView::merge("k", 3, answers.iter());
        assert!(!view.held && view.undecided);
        // Both answers free: a majority says free.
        let answers = [Inspected::default(), Inspected::default()];
        let view = LockView::merge("k", 3, answers.iter());
        assert!(!view.held && !view.undecided);
        // 3 of 5 answered, one holds: 1 + 2 reaches 3.
        assert!(undecided(false, 1, 2, 3));
        assert!(!undecided(false, 0, 2, 3));
        assert!(!undecided(true, 3, 2, 3));
        assert!(!undecided(false, 1, 0, 2));
    }

    #[test]
    fn without_a_majority_a_lock_is_free() {
        let answers = [
            holding("a", 30, 8),
            holding("b", 30, 9),
            Inspected::default(),
        ];
        let view = LockView::merge("k", 3, answers.iter());
        assert!(!view.held);
        // A tie, broken by name so that the output is stable.
        assert_eq!(view.token.as_deref(), Some("a"));
        assert_eq!((view.holding, view.fence), (1, 9));
    }
}
