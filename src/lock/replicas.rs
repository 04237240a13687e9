//! `--replicas`: after each acquire and refresh, WAIT until the replicas
//! have the write, and what a short WAIT means (not this time, or never).

use std::time::Duration;

use anyhow::anyhow;

use super::error::{Fault, NodeError, NodeResult};
use super::fanout;
use super::keys::LockKeys;
use super::node::Node;

/// `--replicas`: how many replicas must confirm each write (WAIT).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Replicas {
    /// Not given: `Auto` on Sentinel and Cluster endpoints, none elsewhere.
    #[default]
    Default,
    /// One, when the primary has any replica connected; else none.
    Auto,
    /// Exactly N (0: none).
    Exactly(u32),
}

/// With `--replicas N`: WAIT until N replicas have the last write, for
/// at most half the per-node timeout, on every node. When WAIT comes
/// back short, ask once how many replicas there are: fewer than N will
/// never do, however long one waits. With `auto` (the default on
/// Sentinel and Cluster endpoints), one replica when the primary has
/// any acknowledging (see [`acknowledging`]), none when it has
/// none (also after a short WAIT).
pub fn confirm(
    nodes: &mut [Node],
    keys: &LockKeys,
    replicas: Replicas,
    limit: Duration,
) -> Result<(), Short> {
    let none = matches!(replicas, Replicas::Default | Replicas::Exactly(0));
    if none && !nodes.iter().any(Node::is_topology) {
        // Nothing to wait for and no master to confirm: no fan-out.
        return Ok(());
    }
    let answers = fanout::each(nodes, |node| {
        let confirmed = replicas_confirm(node, keys, replicas, limit)?;
        // Behind sentinels, the write counts only if it went to the
        // master they name now, not to one a failover left behind.
        node.confirm_master()?;
        Ok::<_, NodeError>(confirmed)
    });
    for answer in answers {
        // A refused WAIT or INFO (NOPERM, a managed service that
        // forbids WAIT) is a refusal, not a replica that is late:
        // retrying it until --wait ran out would hide the cause.
        let checked = answer.map_err(|e| match e.fault {
            Fault::Refused => Short::Refused(e.error),
            _ => Short::Unconfirmed(e.error),
        })?;
        let Some((wanted, auto, confirmed, connected, known, node)) = checked else {
            continue;
        };
        match connected {
            // Auto: the replicas are gone; nothing to wait for.
            Some(0) if auto => {}
            // Behind sentinels that know enough replicas, one is down,
            // restarting, or being moved by a failover: not this time.
            Some(n) if n < u64::from(wanted) && !auto && known >= Some(wanted.into()) => {
                return Err(Short::Unconfirmed(anyhow!(
                    "--replicas {wanted}: {node} has {n} of the {} replica(s) the sentinels \
                     know connected (one is down or reconnecting, or a failover is under way)",
                    known.unwrap_or_default()
                )))
            }
            Some(n) if n < u64::from(wanted) && !auto => {
                return Err(Short::TooFewReplicas(anyhow!(
                    "--replicas {wanted} can never be met: {node} has {n} replica(s) connected"
                )))
            }
            Some(_) => {
                return Err(Short::Unconfirmed(anyhow!(
                    "only {confirmed} of {wanted} replicas confirmed the lock within {} ({node})",
                    crate::log::show(limit)
                )))
            }
            None => {}
        }
    }
    Ok(())
}

/// What WAIT found on one node: (wanted, auto, confirmed, connected
/// when fewer confirmed, the node); `None` when nothing was waited for.
/// `(wanted, auto, confirmed, connected, known, node)`: `connected` when
/// fewer confirmed than wanted, `known` also when fewer are connected.
type Confirmed = Option<(u32, bool, i64, Option<u64>, Option<u64>, String)>;

/// WAIT on one node for the replicas `replicas` asks of it.
fn replicas_confirm(
    node: &mut Node,
    keys: &LockKeys,
    replicas: Replicas,
    limit: Duration,
) -> NodeResult<Confirmed> {
    let auto = match replicas {
        Replicas::Exactly(_) => false,
        Replicas::Auto => true,
        Replicas::Default => node.is_topology(),
    };
    // Auto: one replica, if any is really acknowledging (a stopped one
    // stays "connected" for repl-timeout and would fail every WAIT).
    let wanted = match replicas {
        Replicas::Exactly(n) => n,
        _ if !auto => return Ok(None),
        _ => u32::from(node.acknowledging_replicas(keys)? > 0),
    };
    if wanted == 0 {
        return Ok(None);
    }
    let confirmed = node.wait_replicas(keys, wanted, limit)?;
    let connected = match (confirmed < i64::from(wanted), auto) {
        (false, _) => None,
        // Auto: none acknowledging now (it stopped during the WAIT).
        (true, true) => Some(node.acknowledging_replicas(keys)?),
        (true, false) => Some(node.connected_replicas(keys)?),
    };
    let known = match connected.is_some_and(|n| n < u64::from(wanted)) {
        true => node.known_replicas(),
        false => None,
    };
    Ok(Some((
        wanted,
        auto,
        confirmed,
        connected,
        known,
        node.shown().to_string(),
    )))
}

/// Why `--replicas` did not confirm a write.
pub enum Short {
    /// Not this time (slow replicas, a timeout).
    Unconfirmed(anyhow::Error),
    /// Never: fewer replicas are connected than wanted.
    TooFewReplicas(anyhow::Error),
    /// The server refused WAIT or INFO (permissions, a forbidden command).
    Refused(anyhow::Error),
}

impl Node {
    /// WAIT for `replicas` replicas to have this connection's writes to
    /// the lock's keys; returns how many confirmed within `limit`. On a
    /// Cluster, only the primary of the lock's slot is asked.
    pub fn wait_replicas(
        &mut self,
        keys: &LockKeys,
        replicas: u32,
        limit: Duration,
    ) -> NodeResult<i64> {
        let ms = super::timing::millis(limit);
        self.query_at(redis::cmd("WAIT").arg(replicas).arg(ms), Some(keys.slot()))
    }

    /// How many replicas the node (the lock's primary) says are connected
    /// (`INFO replication`).
    pub fn connected_replicas(&mut self, keys: &LockKeys) -> NodeResult<u64> {
        let info: String =
            self.query_at(redis::cmd("INFO").arg("replication"), Some(keys.slot()))?;
        let count = info
            .lines()
            .find_map(|line| line.strip_prefix("connected_slaves:"))
            .and_then(|n| n.trim().parse().ok());
        count.ok_or_else(|| {
            NodeError::unexpected(
                self.shown(),
                "INFO replication",
                anyhow!("no connected_slaves"),
            )
        })
    }

    /// How many replicas of the node (the lock's primary) are really
    /// acknowledging its writes (`INFO replication`; see
    /// [`acknowledging`]): those `--replicas auto` waits for.
    pub fn acknowledging_replicas(&mut self, keys: &LockKeys) -> NodeResult<u64> {
        let info: String =
            self.query_at(redis::cmd("INFO").arg("replication"), Some(keys.slot()))?;
        if !info.contains("connected_slaves:") {
            return Err(NodeError::unexpected(
                self.shown(),
                "INFO replication",
                anyhow!("no connected_slaves"),
            ));
        }
        Ok(acknowledging(&info))
    }
}

/// A replica that has not acknowledged the stream for longer than this
/// (`lag`, whole seconds since its last REPLCONF ACK, sent every second)
/// is not counted by `--replicas auto`: it is stopped, hung or cut off,
/// though the primary still counts it connected until `repl-timeout`
/// (60 s).
pub const ACK_LAG_SECS: u64 = 2;

/// The replicas in `INFO replication` that are online and acknowledged
/// within [`ACK_LAG_SECS`]: `slaveN:ip=...,port=...,state=online,
/// offset=...,lag=0`.
pub fn acknowledging(info: &str) -> u64 {
    let acking = info
        .lines()
        .filter(|line| {
            line.strip_prefix("slave")
                .and_then(|rest| rest.split_once(':'))
                .is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter(|line| {
            let field = |name: &str| {
                line.split_once(':')?
                    .1
                    .split(',')
                    .find_map(|kv| kv.trim().strip_prefix(name)?.strip_prefix('='))
            };
            let lag = field("lag").and_then(|lag| lag.parse::<u64>().ok());
            field("state") == Some("online") && lag.is_some_and(|lag| lag <= ACK_LAG_SECS)
        })
        .count();
    u64::try_from(acking).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_online_replicas_that_acknowledged_lately_count() {
        let info = "# Replication\r\nrole:master\r\nconnected_slaves:4\r\n\
            slave0:ip=127.0.0.1,port=1,state=online,offset=90,lag=0\r\n\
            slave1:ip=127.0.0.1,port=2,state=online,offset=80,lag=7\r\n\
            slave2:ip=127.0.0.1,port=3,state=wait_bgsave,offset=0,lag=0\r\n\
            slave3:ip=127.0.0.1,port=4,state=online,offset=90,lag=2\r\n\
            slave_read_repl_offset:5\r\nmaster_repl_offset:90\r\n";
        assert_eq!(acknowledging(info), 2);
        assert_eq!(acknowledging("# Replication\r\nconnected_slaves:0\r\n"), 0);
        assert_eq!(acknowledging("slave0:state=online,lag=x\r\n"), 0);
    }
}
