//! A node's errors by kind: what the callers of a node decide on
//! (waiting, failing open, telling the user what to fix). Its own file so
//! that `node.rs` and `sentinel.rs` both use it without using each other.

use std::fmt;

use anyhow::anyhow;
use redis::RedisError;

/// What kind of failure a node's error is: it decides between waiting,
/// failing open, and telling the user what to fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// No connection could be made (refused, timed out, name not
    /// resolvable), or one was made but never answered (a paused server).
    Unreachable,
    /// A connection that had answered broke or timed out; or the server
    /// said "not now" (LOADING, BUSY, MASTERDOWN, CLUSTERDOWN, UNBLOCKED:
    /// a WAIT cut short because the primary became a replica).
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

/// The kind of a failure; `answered`: the connection had answered before.
pub(super) fn classify(e: &RedisError, answered: bool) -> Fault {
    // UNBLOCKED: our WAIT was cut short by a failover (the primary became
    // a replica): not a refusal (the chaos campaign, seed 20261206
    // episode 844: a waiter exited 77 during a CLUSTER FAILOVER).
    let transient = [
        "LOADING",
        "BUSY",
        "TRYAGAIN",
        "MASTERDOWN",
        "CLUSTERDOWN",
        "UNBLOCKED",
    ];
    if e.is_io_error() {
        // redis-rs keeps the io::Error private; its text carries the errno.
        if e.to_string().contains("os error 4)") {
            return Fault::Interrupted;
        }
        if local_failure(e).is_some() {
            return Fault::Local;
        }
        return match answered {
            true => Fault::Dropped,
            false => Fault::Unreachable,
        };
    }
    if e.code().is_some_and(|code| transient.contains(&code)) {
        return Fault::Dropped;
    }
    Fault::Refused
}

/// What ran out on this host, if `e` is a local resource failure.
/// redis-rs keeps the io::Error private; its text carries the errno.
fn local_failure(e: &RedisError) -> Option<&'static str> {
    if !e.is_io_error() {
        return None;
    }
    let text = e.to_string();
    if text.contains(NO_THREAD) {
        return Some("cannot start a thread (a limit on processes or threads: ulimit -u)");
    }
    let errno = text.rsplit_once("(os error ")?.1.strip_suffix(')')?;
    crate::exit::local_errno(errno.parse().ok()?)
}

/// A Redis error as one readable line: what to fix for the usual
/// refusals, the OS error for I/O.
pub(super) fn describe(e: RedisError) -> anyhow::Error {
    if let Some(why) = local_failure(&e) {
        return anyhow!("{why}");
    }
    if e.is_timeout() {
        return match e.to_string().contains("resolving") {
            true => anyhow!("timed out resolving the host name"),
            false => anyhow!("timed out"),
        };
    }
    if e.is_connection_refusal() {
        return anyhow!("connection refused");
    }
    // Never the server's or the library's words here: say what to fix.
    if e.kind() == redis::ErrorKind::AuthenticationFailed || e.code() == Some("WRONGPASS") {
        return anyhow!("authentication failed: wrong user name or password in the URL");
    }
    // An unauthenticated client may not even send a long script.
    if e.code() == Some("NOAUTH") || e.to_string().contains("unauthenticated") {
        return anyhow!(
            "authentication required: give the password in the URL \
             (redis://[USER]:PASSWORD@HOST:PORT)"
        );
    }
    if matches!(e.code(), Some("MOVED" | "ASK")) {
        return anyhow!(
            "the server is a Redis Cluster node that does not serve the lock's slot: \
             give it as redis+cluster://HOST:PORT"
        );
    }
    let message = e.to_string();
    // The server's words are cut, our hint is not: it says what to fix.
    anyhow!("{}{}", crate::secrets::untrusted(&message), hint(&message))
}

/// What to do about the usual refusals.
fn hint(message: &str) -> &'static str {
    // Valkey words a refusal inside a script as "ACL failure in script:
    // User U has no permissions to run the 'zcard' command", with no code.
    let acl = [
        "NoPerm",
        "NOPERM",
        "can't run this command",
        "No permissions to access",
        "has no permissions to run",
        "ACL failure in script",
    ];
    let found = |needles: &[&str]| needles.iter().any(|n| message.contains(n));
    if found(&acl) {
        " (the Redis user lacks a permission: see REDIS PERMISSIONS in redlock-run(1))"
    } else if found(&["invalid peer certificate"]) {
        " (is the server's CA in --tls-ca?)"
    } else if found(&["CertificateRequired"]) {
        " (the server wants a client certificate: --tls-cert and --tls-key)"
    } else if found(&["DB index is out of range"]) {
        " (the URL names a database the server does not have: see 'databases' in redis.conf)"
    } else if found(&["Could not find scripting engine"]) {
        " (the server runs no Lua: Valkey 9.1 and later need their Lua module loaded)"
    } else if found(&["unknown command", "NOSCRIPT"]) {
        " (the server does not offer EVAL, which redlock-run needs: is it renamed or disabled?)"
    } else if found(&["READONLY"]) {
        " (the URL names a read-only replica: give the primary)"
    } else if found(&["OOM"]) {
        " (the server is out of memory: see maxmemory in redis.conf)"
    } else if found(&["WRONGTYPE"]) {
        " (a key of the lock holds another type: does another program use this --prefix?)"
    } else {
        ""
    }
}

/// Several nodes' errors as one error: "2 of 3 nodes failed: a; b".
pub fn join_errors(errors: Vec<anyhow::Error>, nodes: usize) -> anyhow::Error {
    match errors.len() {
        0 => anyhow!("no quorum"),
        1 if nodes == 1 => errors
            .into_iter()
            .next()
            .unwrap_or_else(|| anyhow!("no quorum")),
        n => {
            let all: Vec<String> = errors.iter().map(|e| format!("{e:#}")).collect();
            anyhow!("{n} of {nodes} Redis nodes failed: {}", all.join("; "))
        }
    }
}

/// [`join_errors`] for nodes' errors.
pub fn join_node_errors(errors: Vec<NodeError>, nodes: usize) -> anyhow::Error {
    join_errors(errors.into_iter().map(|e| e.error).collect(), nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_cut_short_by_a_failover_is_not_a_refusal() {
        let unblocked = redis::make_extension_error(
            "UNBLOCKED".into(),
            Some("force unblock from blocking operation, instance state changed (master -> replica?)".into()),
        );
        assert_eq!(classify(&unblocked, true), Fault::Dropped);
        let noperm = redis::make_extension_error("NOPERM".into(), None);
        assert_eq!(classify(&noperm, true), Fault::Refused);
    }
}
