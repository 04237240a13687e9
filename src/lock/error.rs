//! A node's errors by kind: what the callers of a node decide on
//! (waiting, failing open, telling the user what to fix). Its own file so
//! that `node.rs` and `sentinel.rs` both use it without using each other.

use std::fmt;

/// What kind of failure a node's error is: it decides between waiting,
/// failing open, and telling the user what to fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// No connection could be made (refused, timed out, name not
    /// resolvable), or one was made but never answered (a paused server).
    Unreachable,
    /// A connection that had answered broke or timed out; or the server
    /// said "not now" (LOADING, BUSY, MASTERDOWN, CLUSTERDOWN).
    Dropped,
    /// A Redis Cluster is moving the lock's slot (TRYAGAIN, ASK, MOVED
    /// still answered after following them for a while): nothing was
    /// done, and the same call will work once the move is over.
    Moving,
    /// The server answered with an error: authentication, NOPERM,
    /// READONLY, OOM, WRONGTYPE, an unknown command, a script error.
    Refused,
    /// A signal arrived during the call (EINTR).
    Interrupted,
    /// A resource of this host ran out (EMFILE, ENFILE, ENOMEM, ENOBUFS,
    /// a thread that could not start): says nothing about Redis, so it is
    /// never "unavailable".
    Local,
}

/// The start of the error a helper thread that could not start gives
/// (its errno, EAGAIN, is also what a read timeout gives).
pub(super) const NO_THREAD: &str = "cannot start a thread";

/// A node's error: its kind, and one readable line naming the node.
#[derive(Debug)]
pub struct NodeError {
    pub fault: Fault,
    pub error: anyhow::Error,
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#}", self.error)
    }
}

impl std::error::Error for NodeError {}

impl NodeError {
    /// A reply this tool cannot read: the server is not what we expect.
    pub(super) fn unexpected(node: &str, what: &str, why: anyhow::Error) -> NodeError {
        NodeError {
            fault: Fault::Refused,
            error: why.context(format!("{node}: unexpected reply to {what}")),
        }
    }
}

pub type NodeResult<T> = Result<T, NodeError>;
