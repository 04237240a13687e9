//! A Redis Cluster: redis-rs's synchronous `ClusterConnection` routes
//! each script by its first key and follows `MOVED` and `ASK`; this file
//! builds it with our timeouts, sends the commands that must go to the
//! lock's primary only (`WAIT`, `INFO`), and lists the primaries for what
//! the connection does not do: pub/sub and `SCAN` on every primary.

use std::ops::RangeInclusive;
use std::time::{Duration, Instant};

use redis::cluster::{ClusterClientBuilder, ClusterConnection};
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{ConnectionAddr, ConnectionInfo, RedisError, Value};

use super::endpoint::Certificates;

/// Redirections and retries within one call: enough for a `MOVED`, then
/// an `ASK` while a slot migrates, then a `TRYAGAIN`. Our callers retry
/// on their own schedule after that.
const RETRIES: u32 = 4;
/// Bounds of the pause between retries, in milliseconds.
const RETRY_WAIT_MS: (u64, u64) = (10, 200);

/// A connection to the Cluster that the first answering seed describes.
pub fn connect(
    seeds: &[ConnectionInfo],
    tls: Option<&Certificates>,
    timeout: Duration,
) -> Result<ClusterConnection, RedisError> {
    let mut builder = ClusterClientBuilder::new(seeds.to_vec())
        .connection_timeout(timeout)
        .response_timeout(timeout)
        .retries(RETRIES)
        .min_retry_wait(RETRY_WAIT_MS.0)
        .max_retry_wait(RETRY_WAIT_MS.1);
    if let Some(certificates) = tls {
        builder = builder.certs(certificates.0.clone());
    }
    // redis-rs connects to the seeds and then to every node the slots
    // name, one after the other: a deadline for each, roughly.
    let limit = timeout.saturating_mul(
        u32::try_from(seeds.len())
            .unwrap_or(u32::MAX)
            .saturating_add(2),
    );
    super::deadline::within(limit, || builder.build()?.get_connection())
        .map_err(|e| explain(seeds, timeout, e))
}

/// A Cluster connection's failure as the seeds explain it: redis-rs
/// reports every seed's failure, a wrong password included, as one I/O
/// error ("failed to check startup nodes"), which would pass for
/// "unavailable" and let `--on-unavailable run` run COMMAND unlocked; and
/// a `CLUSTER SLOTS` refused (NOPERM), or no node reachable, as "no
/// connections found". Other errors are the server's own answer already.
pub fn explain(seeds: &[ConnectionInfo], timeout: Duration, e: RedisError) -> RedisError {
    let vague = e.is_io_error() || e.kind() == redis::ErrorKind::ClusterConnectionNotFound;
    if !vague {
        return e;
    }
    match refusal(seeds, timeout) {
        Some(Ok(refused)) => refused,
        Some(Err(unreachable)) if !e.is_io_error() => unreachable,
        _ => e,
    }
}

/// Ask the seeds ourselves (a connection, `CLUSTER SLOTS` and the `PING`
/// redis-rs checks each node with), within one `timeout` for all: `Ok`
/// with the first refusal; `Err` with the last I/O error when no seed
/// answered; `None` when one answered well.
fn refusal(seeds: &[ConnectionInfo], timeout: Duration) -> Option<Result<RedisError, RedisError>> {
    let deadline = Instant::now() + timeout;
    let mut last = None;
    for seed in seeds {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let answer = super::dial::connect(seed, left).and_then(|mut conn| {
            super::deadline::query::<Value>(redis::cmd("CLUSTER").arg("SLOTS"), &mut conn, left)?;
            super::deadline::query::<Value>(&redis::cmd("PING"), &mut conn, left)
        });
        match answer {
            Ok(_) => return None,
            Err(e) if !e.is_io_error() => return Some(Ok(e)),
            Err(e) => last = Some(e),
        }
    }
    last.map(Err)
}

/// Send `cmd` to the primary of `slot` (never to every primary, as
/// redis-rs would route a `WAIT`).
pub fn on_primary(
    conn: &mut ClusterConnection,
    cmd: &redis::Cmd,
    slot: u16,
) -> Result<Value, RedisError> {
    let route = Route::new(slot, SlotAddr::Master);
    let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
    conn.route_command(cmd, routing)
}

/// One primary and the slots it serves.
pub struct Primary {
    pub info: ConnectionInfo,
    pub slots: Vec<RangeInclusive<u16>>,
}

/// The primaries, by `CLUSTER SLOTS` of the first seed that answers.
pub fn primaries(seeds: &[ConnectionInfo], timeout: Duration) -> Result<Vec<Primary>, RedisError> {
    let mut last = RedisError::from(std::io::Error::other("no seed node"));
    for seed in seeds {
        let reply = super::dial::connect(seed, timeout).and_then(|mut conn| {
            super::deadline::query::<Value>(redis::cmd("CLUSTER").arg("SLOTS"), &mut conn, timeout)
        });
        match reply {
            Ok(slots) => return Ok(parse_slots(seed, slots)),
            Err(e) if e.is_io_error() => last = e,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

/// `CLUSTER SLOTS`: `[[start, end, [host, port, id...], replicas...]...]`.
/// An empty host means the seed's own.
fn parse_slots(seed: &ConnectionInfo, reply: Value) -> Vec<Primary> {
    let mut primaries: Vec<Primary> = Vec::new();
    let Value::Array(ranges) = reply else {
        return primaries;
    };
    for range in ranges {
        let Value::Array(fields) = range else {
            continue;
        };
        let (Some(start), Some(end), Some(Value::Array(node))) =
            (int(fields.first()), int(fields.get(1)), fields.get(2))
        else {
            continue;
        };
        let (Some(host), Some(port)) = (text(node.first()), int(node.get(1))) else {
            continue;
        };
        let info = with_address(seed, host, port);
        let slots = start..=end;
        match primaries.iter_mut().find(|p| p.info.addr() == info.addr()) {
            Some(p) => p.slots.push(slots),
            None => primaries.push(Primary {
                info,
                slots: vec![slots],
            }),
        }
    }
    primaries
}

fn int(value: Option<&Value>) -> Option<u16> {
    match value? {
        Value::Int(n) => u16::try_from(*n).ok(),
        _ => None,
    }
}

fn text(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// The seed's settings (user, password, TLS) at another node's address.
fn with_address(seed: &ConnectionInfo, host: String, port: u16) -> ConnectionInfo {
    let addr = match seed.addr() {
        ConnectionAddr::TcpTls {
            host: own,
            insecure,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host: if host.is_empty() { own.clone() } else { host },
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        ConnectionAddr::Tcp(own, _) => {
            ConnectionAddr::Tcp(if host.is_empty() { own.clone() } else { host }, port)
        }
        other => other.clone(),
    };
    seed.clone().set_addr(addr)
}
