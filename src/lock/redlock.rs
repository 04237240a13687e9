//! What only several independent masters need (Redlock), and a one-node
//! lock never enters: the refusal of two nodes that are one server
//! reached under two addresses, the fence raised across a majority, and
//! which nodes granted us the lock (a rival's minority on another node is
//! no news when we give it back).

use anyhow::anyhow;

use super::calls::RaiseFence;
use super::error::{Fault, NodeError};
use super::fanout;
use super::keys::LockKeys;
use super::node::Node;

/// A Redlock's memory of its nodes, for the whole run.
pub struct Redlock {
    /// The nodes that granted the lock we hold (empty: none held yet).
    held_on: Vec<bool>,
}

impl Redlock {
    pub fn new() -> Redlock {
        Redlock {
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
}

/// One server reached under two names (a unix socket and a TCP port, two
/// interfaces of one host, a server bound to every address) would count
/// as two nodes: refused by the `run_id`s the nodes' acquires said
/// (`servers`, in the same order as `nodes`; every acquire says, so this
/// costs no round trip). A node that did not say (no `+info`) is not
/// compared. The caller gives back what the round took.
pub fn distinct(nodes: &[Node], servers: &[Option<String>]) -> anyhow::Result<()> {
    let Some((i, first)) = super::decide::same_server(servers) else {
        return Ok(());
    };
    let id = servers[i].as_deref().unwrap_or_default();
    Err(anyhow!(
        "'{}' names the same server as '{}' (run_id {}): each Redlock node must be an \
         independent server",
        nodes[i].shown(),
        nodes[first].shown(),
        crate::secrets::untrusted(id)
    ))
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
