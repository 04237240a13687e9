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
/// none (also after a short WAIT). Each step is one round over the
/// nodes (see `fanout`): `INFO replication` where `auto` must count,
/// WAIT, and `INFO replication` again where WAIT came back short.
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
    let mut checked = waited(nodes, keys, replicas, limit);
    // Behind sentinels, the write counts only if it went to the master
    // they name now, not to one a failover left behind: one round asks
    // the sentinels of every such node.
    let confirming: Vec<bool> = checked.iter().map(Result::is_ok).collect();
    let masters = fanout::masters(nodes, &confirming, false);
    let masters = masters.into_iter().map(|m| m.unwrap_or(Ok(())));
    for (checked, master) in checked.iter_mut().zip(masters) {
        if let (Ok(_), Err(e)) = (&checked, master) {
            *checked = Err(e);
        }
    }
    for answer in checked {
        // A refused WAIT or INFO (NOPERM, a managed service that
        // forbids WAIT) is a refusal, not a replica that is late:
        // retrying it until --wait ran out would hide the cause.
        let checked = answer.map_err(|e| match e.fault {
            Fault::Refused => Short::Refused(e.error),
            _ => Short::Unconfirmed(e.error),
        })?;
        if let Some(found) = checked {
            found.verdict(limit)?;
        }
    }
    Ok(())
}

/// What WAIT found on one node, when it waited for any replica.
struct Confirmed {
    wanted: u32,
    auto: bool,
    confirmed: i64,
    /// When fewer confirmed than wanted: how many are connected (`auto`:
    /// acknowledging).
    connected: Option<u64>,
    /// When fewer are connected than wanted: how many the sentinels know.
    known: Option<u64>,
    node: String,
}

impl Confirmed {
    /// Whether it is enough, else what a short WAIT means.
    fn verdict(&self, limit: Duration) -> Result<(), Short> {
        let (wanted, node) = (self.wanted, &self.node);
        match self.connected {
            // Auto: the replicas are gone; nothing to wait for.
            Some(0) if self.auto => Ok(()),
            // Behind sentinels that know enough replicas, one is down,
            // restarting, or being moved by a failover: not this time.
            Some(n) if n < u64::from(wanted) && !self.auto && self.known >= Some(wanted.into()) => {
                Err(Short::Unconfirmed(anyhow!(
                    "--replicas {wanted}: {node} has {n} of the {} replica(s) the sentinels \
                     know connected (one is down or reconnecting, or a failover is under way)",
                    self.known.unwrap_or_default()
                )))
            }
            Some(n) if n < u64::from(wanted) && !self.auto => Err(Short::TooFewReplicas(anyhow!(
                "--replicas {wanted} can never be met: {node} has {n} replica(s) connected"
            ))),
            Some(_) => Err(Short::Unconfirmed(anyhow!(
                "only {} of {wanted} replicas confirmed the lock within {} ({node})",
                self.confirmed,
                crate::log::show(limit)
            ))),
            None => Ok(()),
        }
    }
}

/// Each node's WAIT for the replicas `replicas` asks of it, in rounds:
/// `None` where nothing was waited for.
fn waited(
    nodes: &mut [Node],
    keys: &LockKeys,
    replicas: Replicas,
    limit: Duration,
) -> Vec<NodeResult<Option<Confirmed>>> {
    let auto: Vec<bool> = nodes
        .iter()
        .map(|node| match replicas {
            Replicas::Exactly(_) => false,
            Replicas::Auto => true,
            Replicas::Default => node.is_topology(),
        })
        .collect();
    // Auto: one replica, if any is really acknowledging (a stopped one
    // stays "connected" for repl-timeout and would fail every WAIT).
    let counted = replication(nodes, keys, |i| auto.get(i) == Some(&true));
    let wanted: Vec<NodeResult<u32>> = (counted.into_iter())
        .map(|count| match (replicas, count) {
            (Replicas::Exactly(n), _) => Ok(n),
            (_, Some(count)) => count.map(|c| u32::from(c.acknowledging > 0)),
            // Not auto: nothing to wait for.
            _ => Ok(0),
        })
        .collect();
    let ms = super::timing::millis(limit);
    let confirmed = fanout::round_at(
        nodes,
        Some(keys.slot()),
        |i, _| match wanted.get(i) {
            Some(Ok(n)) if *n > 0 => Some(Ok((redis::cmd("WAIT").arg(*n).arg(ms).clone(), ()))),
            _ => None,
        },
        |node, (), reply| read_int(node, "WAIT", reply),
    );
    let short: Vec<bool> = (confirmed.iter().zip(&wanted))
        .map(|(c, w)| matches!((c, w), (Some(Ok(c)), Ok(w)) if *c < i64::from(*w)))
        .collect();
    let counted = replication(nodes, keys, |i| short.get(i) == Some(&true));
    let found = wanted.into_iter().zip(confirmed).zip(counted).zip(&auto);
    let mut checked = Vec::with_capacity(nodes.len());
    for (node, (((wanted, confirmed), counted), auto)) in nodes.iter_mut().zip(found) {
        checked.push(one(node, wanted, confirmed, counted, *auto));
    }
    checked
}

/// One node's rounds put together (see [`waited`]).
fn one(
    node: &mut Node,
    wanted: NodeResult<u32>,
    confirmed: Option<NodeResult<i64>>,
    counted: Option<NodeResult<Replication>>,
    auto: bool,
) -> NodeResult<Option<Confirmed>> {
    let wanted = wanted?;
    let Some(confirmed) = confirmed else {
        return Ok(None);
    };
    let confirmed = confirmed?;
    let connected = match counted.transpose()? {
        // Auto: none acknowledging now (it stopped during the WAIT).
        Some(count) if auto => Some(count.acknowledging),
        Some(count) => Some(count.connected),
        None => None,
    };
    let known = match connected.is_some_and(|n| n < u64::from(wanted)) {
        true => node.known_replicas(),
        false => None,
    };
    Ok(Some(Confirmed {
        wanted,
        auto,
        confirmed,
        connected,
        known,
        node: node.shown().to_string(),
    }))
}

/// What `INFO replication` says of a primary's replicas.
#[derive(Debug, Clone, Copy)]
struct Replication {
    /// `connected_slaves`.
    connected: u64,
    /// See [`acknowledging`].
    acknowledging: u64,
}

/// One round of `INFO replication` to the nodes `ask` names (to the
/// lock's primary on a Cluster).
fn replication(
    nodes: &mut [Node],
    keys: &LockKeys,
    ask: impl Fn(usize) -> bool,
) -> Vec<Option<NodeResult<Replication>>> {
    if !(0..nodes.len()).any(&ask) {
        return nodes.iter().map(|_| None).collect();
    }
    fanout::round_at(
        nodes,
        Some(keys.slot()),
        |i, _| ask(i).then(|| Ok((redis::cmd("INFO").arg("replication").clone(), ()))),
        |node, (), reply| {
            let unexpected = |why| NodeError::unexpected(node.shown(), "INFO replication", why);
            let info: String = redis::from_redis_value(reply?).map_err(|e| unexpected(e.into()))?;
            let connected = info
                .lines()
                .find_map(|line| line.strip_prefix("connected_slaves:"))
                .and_then(|n| n.trim().parse().ok())
                .ok_or_else(|| unexpected(anyhow!("no connected_slaves")))?;
            Ok(Replication {
                connected,
                acknowledging: acknowledging(&info),
            })
        },
    )
}

/// An integer reply (WAIT's count).
fn read_int(node: &mut Node, what: &str, reply: NodeResult<redis::Value>) -> NodeResult<i64> {
    match reply? {
        redis::Value::Int(n) => Ok(n),
        other => Err(NodeError::unexpected(
            node.shown(),
            what,
            anyhow!("{other:?}"),
        )),
    }
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
