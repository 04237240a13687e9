//! What only several independent masters need (Redlock), and a one-node
//! lock never enters: the check that no two nodes are one server reached
//! under two addresses, the fence raised across a majority, and which
//! nodes granted us the lock (a rival's minority on another node is no
//! news when we give it back).

use anyhow::anyhow;

use super::calls::RaiseFence;
use super::error::{Fault, NodeError, NodeResult};
use super::fanout;
use super::keys::LockKeys;
use super::node::Node;
use super::reply::Acquire;

/// Which nodes an acquire round asks (`None`: sits it out), with the
/// `run_id` for its script to check, or the error it failed with already.
pub type Who<'a> = dyn FnMut(usize) -> Option<NodeResult<Option<String>>> + 'a;

/// One acquire round over `nodes`, asking those `Who` names.
pub type AcquireRound<'a> =
    dyn Fn(&mut [Node], &LockKeys, &mut Who<'_>) -> Vec<Option<NodeResult<Acquire>>> + 'a;

/// A Redlock's memory of its nodes, for the whole run.
pub struct Redlock {
    /// Each node's `run_id` once it was asked (`None` inside: it did not
    /// say), to refuse one server counted twice.
    run_ids: Vec<Option<Option<String>>>,
    /// The `run_id` an earlier run found at each node (see
    /// [`super::servers`]), for its acquire script to check, until it has
    /// (then it is in `run_ids`). Empty until the first attempt.
    recalled: Vec<Option<String>>,
    /// What was read from that file, to write it only when it changed;
    /// `remembered` once this run wrote it or found it current.
    recalled_file: Option<Vec<String>>,
    remembered: bool,
    /// The nodes that granted the lock we hold (empty: none held yet).
    held_on: Vec<bool>,
}

impl Redlock {
    pub fn new(nodes: usize) -> Redlock {
        Redlock {
            run_ids: vec![None; nodes],
            recalled: Vec::new(),
            recalled_file: None,
            remembered: false,
            held_on: Vec::new(),
        }
    }

    /// The lock we hold was granted by the nodes with a fence here.
    pub fn held(&mut self, granted: &[Option<i64>]) {
        self.held_on = granted.iter().map(Option::is_some).collect();
    }

    /// Whether node `i` granted us the lock we hold (before one is held:
    /// every node may have).
    pub fn was_ours(&self, i: usize) -> bool {
        self.held_on.get(i).copied().unwrap_or(true)
    }

    /// The `run_id`s remembered for the nodes, for their scripts to check.
    pub fn expected(&self) -> Vec<Option<String>> {
        self.recalled.clone()
    }

    /// Before anything is written to a node: ask each node not asked yet
    /// for its `run_id` (all at once), and refuse two nodes that are one
    /// server under two addresses (a socket and a TCP port, two
    /// interfaces). A node that refuses INFO (no `+info`) is not checked.
    /// Ok: the nodes that did not answer, with their errors, not to be
    /// asked again in this attempt (so a dead node costs one timeout, not
    /// two). A node whose `run_id` an earlier run remembered is not
    /// asked: its acquire script checks it ([`Redlock::settle_run_ids`]).
    pub fn distinct_servers(
        &mut self,
        nodes: &mut [Node],
    ) -> anyhow::Result<Vec<Option<NodeError>>> {
        self.recall(nodes);
        for (id, node) in self.run_ids.iter_mut().zip(nodes.iter()) {
            if !node.has_run_id() {
                *id = Some(None);
            }
        }
        let asked: Vec<bool> = (self.run_ids.iter().zip(&self.recalled))
            .map(|(id, recalled)| id.is_some() || recalled.is_some())
            .collect();
        if asked.iter().all(|a| *a) {
            return Ok(Vec::new());
        }
        let answers = fanout::round(
            nodes,
            |i, node| match asked.get(i) {
                Some(false) => Some(Ok((node.run_id_cmd(), ()))),
                _ => None,
            },
            |node, (), reply| node.read_run_id(reply),
        );
        let mut skipped = Vec::new();
        for (i, answer) in answers.into_iter().enumerate() {
            let (id, failed) = match answer {
                None => (self.run_ids[i].clone(), None),
                Some(Ok(id)) => (Some(id), None),
                Some(Err(e)) if e.fault == Fault::Refused => (Some(None), None),
                Some(Err(e)) => (None, Some(e)),
            };
            self.run_ids[i] = id;
            skipped.push(failed);
        }
        match self.same_server(nodes) {
            Some(same) => Err(same),
            None => Ok(skipped),
        }
    }

    /// Two nodes that are one server, by the `run_id`s known (asked, or
    /// remembered and still to be checked by the acquire script).
    fn same_server(&self, nodes: &[Node]) -> Option<anyhow::Error> {
        let ids: Vec<Option<&String>> = (0..nodes.len())
            .map(|i| match (self.run_ids.get(i), self.recalled.get(i)) {
                (Some(Some(Some(id))), _) | (_, Some(Some(id))) => Some(id),
                _ => None,
            })
            .collect();
        for (i, id) in ids.iter().enumerate() {
            let Some(id) = id else { continue };
            if let Some(first) = ids[..i].iter().position(|other| *other == Some(*id)) {
                return Some(anyhow!(
                    "'{}' names the same server as '{}' (run_id {}): each Redlock node must \
                     be an independent server",
                    nodes[i].shown(),
                    nodes[first].shown(),
                    crate::secrets::untrusted(id)
                ));
            }
        }
        None
    }

    /// Before the first attempt: the `run_id`s an earlier run with these
    /// nodes found, if every node has one.
    fn recall(&mut self, nodes: &[Node]) {
        if !self.recalled.is_empty() {
            return;
        }
        self.recalled = vec![None; nodes.len()];
        let urls = shown_urls(nodes);
        let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
        if let Some(ids) = super::servers::recall(&urls) {
            self.recalled = ids.iter().cloned().map(Some).collect();
            self.recalled_file = Some(ids);
        }
    }

    /// Once every node's `run_id` is known: written down for the next
    /// run, unless that is what was read.
    fn remember(&mut self, nodes: &[Node]) {
        if self.remembered {
            return;
        }
        let ids: Option<Vec<String>> = self.run_ids.iter().map(|id| id.clone().flatten()).collect();
        let Some(ids) = ids else { return };
        self.remembered = true;
        if self.recalled_file.as_ref() != Some(&ids) {
            let urls = shown_urls(nodes);
            let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
            super::servers::remember(&urls, &ids);
        }
    }

    /// After an attempt's acquires: a node that checked a remembered
    /// `run_id` (`expected`) and answered is that server; one that is not
    /// (restarted, or its address leads elsewhere now) wrote nothing and
    /// said which server it is. Those ids are checked against the others'
    /// (two nodes that are one server: the error, and the caller gives
    /// back what the attempt took), then those nodes are asked again,
    /// with `acquire`, all at once.
    pub fn settle_run_ids(
        &mut self,
        (nodes, keys): (&mut [Node], &LockKeys),
        answers: &mut [NodeResult<Acquire>],
        expected: &[Option<String>],
        acquire: &AcquireRound<'_>,
    ) -> anyhow::Result<()> {
        let again = self.checked(answers, expected);
        if again.contains(&true) {
            if let Some(same) = self.same_server(nodes) {
                return Err(same);
            }
            let ids = self.run_ids.clone();
            let mut who = |i: usize| match again.get(i) {
                Some(true) => Some(Ok(ids.get(i).cloned().flatten().flatten())),
                _ => None,
            };
            let retried = acquire(nodes, keys, &mut who);
            for (i, answer) in retried.into_iter().enumerate() {
                let Some(answer) = answer else { continue };
                answers[i] = match answer {
                    Ok(Acquire::Elsewhere(_)) => {
                        // It changed again (restarting?): asked afresh next time.
                        self.run_ids[i] = None;
                        Err(NodeError {
                            fault: Fault::Dropped,
                            error: anyhow!(
                                "{}: a different server answered each time (restarting?)",
                                crate::secrets::scrub(nodes[i].shown())
                            ),
                        })
                    }
                    other => other,
                };
            }
        }
        self.remember(nodes);
        Ok(())
    }

    /// What the acquires found of the remembered `run_id`s; which nodes
    /// are another server now (to be asked again).
    fn checked(
        &mut self,
        answers: &[NodeResult<Acquire>],
        expected: &[Option<String>],
    ) -> Vec<bool> {
        let mut again = vec![false; answers.len()];
        for (i, answer) in answers.iter().enumerate() {
            let Some(Some(id)) = expected.get(i) else {
                continue;
            };
            let found = match answer {
                Ok(Acquire::Elsewhere(found)) => {
                    again[i] = true;
                    Some(found.clone()).filter(|f| !f.is_empty())
                }
                Ok(_) => Some(id.clone()),
                // Not checked: the next attempt's script checks it.
                Err(_) => continue,
            };
            self.run_ids[i] = Some(found);
            self.recalled[i] = None;
        }
        again
    }
}

/// The nodes' URLs as shown (passwords redacted), naming the file of
/// [`super::servers`].
fn shown_urls(nodes: &[Node]) -> Vec<String> {
    nodes
        .iter()
        .map(|n| crate::secrets::scrub(n.shown()))
        .collect()
}

/// Make `fence` (the largest a node of the majority gave) the next value
/// of one sequence across every majority: raise the counter to it on
/// every node that granted the lock with a smaller one (all at once),
/// while that node still holds our token (`call`: token, fence, limit).
/// Nodes that gave `fence` itself have it already. Ok when a majority's
/// counters are now at least `fence`: every later majority shares a node
/// with it, so counts on from above. Nothing is sent when a majority
/// already agreed (one node always does); else the errors of the nodes
/// that failed, or one saying that too few still held the lock.
pub fn raise_fence(
    (nodes, keys): (&mut [Node], &LockKeys),
    call: RaiseFence,
    granted: &[Option<i64>],
) -> Result<(), Vec<NodeError>> {
    let fence = call.fence;
    let (total, needed) = (nodes.len(), super::decide::majority(nodes.len()));
    let at = granted.iter().filter(|f| **f == Some(fence)).count();
    if at >= needed {
        return Ok(());
    }
    let answers = fanout::round(
        nodes,
        |i, _| match granted.get(i) {
            Some(Some(f)) if *f < fence => Some(Ok((Node::raising_fence(keys, call), ()))),
            _ => None,
        },
        |node, (), reply| node.read_raised(reply),
    );
    let mut raised = at;
    let mut errors = Vec::new();
    for answer in answers.into_iter().flatten() {
        match answer {
            Ok(true) => raised += 1,
            Ok(false) => {}
            Err(NodeError { fault, error }) => errors.push(NodeError {
                fault,
                error: error.context("raising the fence counter to the majority's"),
            }),
        }
    }
    if raised >= needed {
        return Ok(());
    }
    if errors.is_empty() {
        errors.push(NodeError {
            fault: Fault::Dropped,
            error: anyhow!(
                "the fence was raised on only {raised} of {total} nodes (a majority is \
                 {needed}): the lock expired meanwhile"
            ),
        });
    }
    Err(errors)
}
