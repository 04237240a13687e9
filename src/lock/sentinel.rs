//! Finding the master of a Sentinel service, as the Sentinel client
//! guidelines say: ask the sentinels in turn, each within the per-node
//! timeout; move the one that answered to the front; connect to the
//! master it names and check with `ROLE` that it is one, else look again
//! after a short pause, within the same budget.
//!
//! Hand-written rather than redis-rs's `sentinel` feature: that one asks
//! `SENTINEL MASTERS` through connections of its own, whose connect time
//! is not bounded by our dial (a host name's resolution can block for many
//! seconds), and its errors cannot say which sentinels were tried.

use std::time::{Duration, Instant};

use anyhow::anyhow;
use redis::{Connection, ConnectionAddr, ConnectionInfo, FromRedisValue, RedisError, Value};

use super::endpoint::SentinelTarget;
use super::error::{classify, describe, Fault, NodeError};

/// How long to wait before looking again when the named master is not
/// (yet) one: a failover under way.
const PAUSE: Duration = Duration::from_millis(100);

/// What a discovery found, and whether any sentinel answered at all.
pub struct Found {
    pub result: Result<(Connection, ConnectionInfo), NodeError>,
    pub sentinel_answered: bool,
}

/// A connection to the master of `target`'s service. `shown` names the
/// endpoint in errors.
pub fn master(target: &mut SentinelTarget, timeout: Duration, shown: &str) -> Found {
    let deadline = Instant::now() + timeout;
    let mut answered = false;
    loop {
        let result = ask(target, timeout, shown, &mut answered)
            .and_then(|info| check(info, timeout, shown, &target.service));
        // Not a master (yet), or not answering: a failover is under way.
        // Look again while time is left; a refusal will not change.
        let again = matches!(&result, Err(e) if e.fault != Fault::Refused && answered);
        if !again || Instant::now() + PAUSE >= deadline {
            return Found {
                result,
                sentinel_answered: answered,
            };
        }
        std::thread::sleep(PAUSE);
    }
}

/// Whether `named` (what the sentinels name now) is `master`, the one a
/// write went to: after a write, a master that a failover has left
/// behind (it still says `role:master` until the sentinels demote it)
/// never counts. Another master named: an error, and the caller
/// reconnects.
pub fn same(
    target: &SentinelTarget,
    master: &ConnectionInfo,
    named: &ConnectionInfo,
    shown: &str,
) -> Result<(), NodeError> {
    if named.addr() == master.addr() {
        return Ok(());
    }
    Err(NodeError {
        fault: Fault::Dropped,
        error: anyhow!(
            "{}: the sentinels moved the master of '{}' from {} to {} (a failover)",
            crate::secrets::scrub(shown),
            target.service,
            address(master),
            address(named)
        ),
    })
}

/// The master each of `targets`' services has as the sentinels name it
/// now (as [`named`]), in one round: every target's first sentinel is
/// asked at once (see `fanout::exchange`); a target whose first sentinel
/// gives no answer asks its others in turn. Each target: its endpoint as
/// shown in errors.
pub fn named_each(
    targets: &mut [(&mut SentinelTarget, &str)],
    timeout: Duration,
) -> Vec<Result<ConnectionInfo, NodeError>> {
    let firsts = first_lookups(targets, timeout);
    (targets.iter_mut().zip(firsts))
        .map(|((target, shown), first)| ask_given(target, first, timeout, shown, &mut false))
        .collect()
}

/// `SENTINEL get-master-addr-by-name` on each target's first sentinel,
/// in one round.
fn first_lookups(targets: &[(&mut SentinelTarget, &str)], timeout: Duration) -> Vec<Lookup> {
    let infos: Vec<&ConnectionInfo> = (targets.iter())
        .filter_map(|(t, _)| t.sentinels.first())
        .collect();
    let cmds: Vec<redis::Cmd> = (targets.iter())
        .filter(|(t, _)| !t.sentinels.is_empty())
        .map(|(t, _)| lookup_cmd(&t.service))
        .collect();
    let mut conns = super::fanout::dial_all(&infos, timeout);
    let mut calls: Vec<(&mut Connection, &redis::Cmd)> = (conns.iter_mut().zip(&cmds))
        .filter_map(|(conn, cmd)| Some((conn.as_mut().ok()?, cmd)))
        .collect();
    let mut replies = super::fanout::exchange(&mut calls, timeout).into_iter();
    drop(calls);
    let mut answers = conns.into_iter().map(move |conn| {
        conn.and_then(|_| replies.next().unwrap_or_else(|| Err(not_asked())))
            .and_then(|v| Ok(Option::<(String, u16)>::from_redis_value(v)?))
    });
    (targets.iter())
        .map(|(t, _)| (!t.sentinels.is_empty()).then(|| answers.next()).flatten())
        .collect()
}

fn not_asked() -> RedisError {
    std::io::Error::other("not asked").into()
}

/// The master of `target`'s service as the sentinels name it now.
pub fn named(
    target: &mut SentinelTarget,
    timeout: Duration,
    shown: &str,
) -> Result<ConnectionInfo, NodeError> {
    ask(target, timeout, shown, &mut false)
}

/// How many replicas of the service the first sentinel that answers
/// knows, whatever their state (`SENTINEL REPLICAS`); `None` when none
/// answers. A sentinel never forgets a replica by itself: one that is
/// down, restarting or being reconfigured by a failover is still counted.
pub fn known_replicas(target: &SentinelTarget, timeout: Duration) -> Option<u64> {
    target.sentinels.iter().find_map(|sentinel| {
        let mut conn = super::dial::connect(sentinel, timeout).ok()?;
        let cmd = redis::cmd("SENTINEL")
            .arg("REPLICAS")
            .arg(&target.service)
            .clone();
        let listed: Vec<Value> = super::deadline::query(&cmd, &mut conn, timeout).ok()?;
        u64::try_from(listed.len()).ok()
    })
}

/// The master's address as the first sentinel that knows SERVICE says;
/// that sentinel moves to the front of the list.
fn ask(
    target: &mut SentinelTarget,
    timeout: Duration,
    shown: &str,
    answered: &mut bool,
) -> Result<ConnectionInfo, NodeError> {
    ask_given(target, None, timeout, shown, answered)
}

/// What one sentinel said of a service's master (`None`: it does not
/// know the service).
type Lookup = Option<Result<Option<(String, u16)>, RedisError>>;

/// [`ask`], with the first sentinel's answer given (`first`) when it was
/// asked already, in a round.
fn ask_given(
    target: &mut SentinelTarget,
    mut first: Lookup,
    timeout: Duration,
    shown: &str,
    answered: &mut bool,
) -> Result<ConnectionInfo, NodeError> {
    let (mut unknown, mut failed, mut refused) = (Vec::new(), Vec::new(), false);
    for i in 0..target.sentinels.len() {
        let sentinel = &target.sentinels[i];
        let looked = first.take();
        match looked.unwrap_or_else(|| lookup(sentinel, &target.service, timeout)) {
            Ok(Some((host, port))) => {
                *answered = true;
                target.sentinels[..=i].rotate_right(1);
                return Ok(at(&target.data, host, port));
            }
            Ok(None) => {
                *answered = true;
                unknown.push(address(sentinel));
            }
            Err(e) => {
                refused |= !e.is_io_error();
                failed.push(format!("{}: {}", address(sentinel), one_line(&e)));
            }
        }
    }
    let error = if unknown.is_empty() {
        anyhow!(
            "no sentinel answered for service '{}' ({})",
            target.service,
            failed.join("; ")
        )
    } else {
        let others = match failed.is_empty() {
            true => String::new(),
            false => format!("; no answer from {}", failed.join("; ")),
        };
        anyhow!(
            "service '{}' is unknown to the sentinels that answered ({}){others}",
            target.service,
            unknown.join(", ")
        )
    };
    // An unknown SERVICE is unavailable (exit 69) like a dead sentinel: a
    // sentinel that just restarted may not know it yet.
    let fault = match refused && unknown.is_empty() {
        true => Fault::Refused,
        false => Fault::Unreachable,
    };
    Err(NodeError {
        fault,
        error: error.context(crate::secrets::scrub(shown)),
    })
}

/// `SENTINEL get-master-addr-by-name SERVICE` on one sentinel.
fn lookup(
    sentinel: &ConnectionInfo,
    service: &str,
    timeout: Duration,
) -> Result<Option<(String, u16)>, RedisError> {
    let mut conn = super::dial::connect(sentinel, timeout)?;
    super::deadline::query(&lookup_cmd(service), &mut conn, timeout)
}

fn lookup_cmd(service: &str) -> redis::Cmd {
    redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(service)
        .clone()
}

/// The data nodes' settings at the master's address.
fn at(data: &ConnectionInfo, host: String, port: u16) -> ConnectionInfo {
    let addr = match data.addr() {
        ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host,
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => ConnectionAddr::Tcp(host, port),
    };
    data.clone().set_addr(addr)
}

/// Connect to the node a sentinel named and check that it is a master.
fn check(
    master: ConnectionInfo,
    timeout: Duration,
    shown: &str,
    service: &str,
) -> Result<(Connection, ConnectionInfo), NodeError> {
    let name = address(&master);
    let failed = |fault, e: anyhow::Error| NodeError {
        fault,
        error: e.context(format!(
            "{}: master {name} of '{service}'",
            crate::secrets::scrub(shown)
        )),
    };
    // A data node that refuses our credentials answered: that is a
    // refusal (77), which must never pass for "unavailable".
    let mut conn = super::dial::connect(&master, timeout)
        .map_err(|e| failed(classify(&e, false), describe(e)))?;
    let role: Value =
        super::deadline::query(&redis::cmd("ROLE"), &mut conn, timeout).map_err(|e| {
            let fault = match e.is_io_error() {
                true => Fault::Dropped,
                false => Fault::Refused,
            };
            failed(fault, anyhow!(one_line(&e)))
        })?;
    match role {
        Value::Array(fields) if matches!(fields.first(), Some(Value::BulkString(r)) if r == b"master") => {
            Ok((conn, master))
        }
        _ => Err(failed(
            Fault::Dropped,
            anyhow!("not a master (yet): a failover under way"),
        )),
    }
}

/// `host:port` of a connection, for messages.
/// The host comes from a sentinel's answer: untrusted text.
fn address(info: &ConnectionInfo) -> String {
    match info.addr() {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            format!("{}:{port}", crate::secrets::untrusted(host))
        }
        other => format!("{other:?}"),
    }
}

/// A library error as a short phrase.
fn one_line(e: &RedisError) -> String {
    if e.is_connection_refusal() {
        return "connection refused".into();
    }
    if e.is_timeout() {
        return "timed out".into();
    }
    crate::secrets::untrusted(&e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::IntoConnectionInfo;

    #[test]
    fn a_named_master_is_shown_escaped() {
        let info = "redis://127.0.0.1:1"
            .into_connection_info()
            .unwrap()
            .set_addr(ConnectionAddr::Tcp("\x1b]0;x\x07\u{202e}h".into(), 6379));
        assert_eq!(address(&info), "\\u{1b}]0;x\\u{7}\\u{202e}h:6379");
    }
}
