//! Raw access to the servers behind an endpoint, for `doctor`: which
//! servers an endpoint names (the server; the sentinels and the master
//! they name; a Cluster's primaries), and one connection to each, made
//! with `dial` under the per-node timeout, that sends any command and
//! returns its reply as plain data. Nothing here decides what a reply
//! means; `doctor` does.

use std::time::Duration;

use redis::{Connection, ConnectionAddr, ConnectionInfo, RedisError, Value};

use super::endpoint::{Endpoint, Target};

/// A reply, without redis-rs's types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Nil,
    Int(i64),
    Text(String),
    List(Vec<Reply>),
    /// Maps, sets and other RESP3 shapes: their items in order.
    Other(Vec<Reply>),
}

impl Reply {
    /// The reply as text: a string, or a number written out.
    pub fn text(&self) -> Option<String> {
        match self {
            Reply::Text(s) => Some(s.clone()),
            Reply::Int(n) => Some(n.to_string()),
            _ => None,
        }
    }

    /// The items of an array reply (empty for anything else).
    pub fn items(&self) -> &[Reply] {
        match self {
            Reply::List(items) | Reply::Other(items) => items,
            _ => &[],
        }
    }

    pub fn int(&self) -> Option<i64> {
        match self {
            Reply::Int(n) => Some(*n),
            Reply::Text(s) => s.trim().parse().ok(),
            _ => None,
        }
    }
}

pub(super) fn reply(value: Value) -> Reply {
    match value {
        Value::Nil => Reply::Nil,
        Value::Int(n) => Reply::Int(n),
        Value::BulkString(bytes) => Reply::Text(String::from_utf8_lossy(&bytes).into_owned()),
        Value::SimpleString(s) => Reply::Text(s),
        Value::Okay => Reply::Text("OK".into()),
        Value::Array(items) | Value::Set(items) => {
            Reply::List(items.into_iter().map(reply).collect())
        }
        Value::Map(pairs) => Reply::Other(
            pairs
                .into_iter()
                .flat_map(|(k, v)| [reply(k), reply(v)])
                .collect(),
        ),
        Value::Boolean(b) => Reply::Int(i64::from(b)),
        Value::Double(d) => Reply::Text(d.to_string()),
        Value::VerbatimString { text, .. } => Reply::Text(text),
        Value::BigNumber(n) => Reply::Text(String::from_utf8_lossy(&n).into_owned()),
        _ => Reply::Nil,
    }
}

/// Why a command got no reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failed {
    /// No connection, or it broke: the server's address and why.
    Io(String),
    /// The server answered with an error: its code (`NOPERM`, `ERR`...)
    /// and its words, cut and cleaned.
    Refused { code: String, message: String },
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failed::Io(why) => f.write_str(why),
            Failed::Refused { message, .. } => f.write_str(message),
        }
    }
}

fn failed(e: RedisError) -> Failed {
    if e.is_io_error() {
        let why = if e.is_connection_refusal() {
            "connection refused".to_string()
        } else if e.is_timeout() {
            "timed out".to_string()
        } else {
            crate::secrets::untrusted(&e.to_string())
        };
        return Failed::Io(why);
    }
    if e.kind() == redis::ErrorKind::AuthenticationFailed || e.code() == Some("WRONGPASS") {
        return Failed::Refused {
            code: "WRONGPASS".into(),
            message: "authentication failed: wrong user name or password in the URL".into(),
        };
    }
    Failed::Refused {
        code: e.code().unwrap_or("ERR").to_string(),
        message: crate::secrets::untrusted(&e.to_string()),
    }
}

/// One server that can be dialled: its settings (user, password, TLS)
/// and its address as shown.
#[derive(Debug, Clone)]
pub struct Server {
    info: ConnectionInfo,
    /// `host:port` or the socket path.
    pub address: String,
}

/// An open connection to one server.
pub struct Conn {
    conn: Connection,
    timeout: Duration,
}

impl Server {
    fn new(info: ConnectionInfo) -> Server {
        let address = match info.addr() {
            ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                format!("{host}:{port}")
            }
            ConnectionAddr::Unix(path) => path.display().to_string(),
            other => format!("{other:?}"),
        };
        Server { info, address }
    }

    /// The user name the URL gives, if any.
    pub fn user(&self) -> Option<String> {
        self.info.redis_settings().username().map(str::to_string)
    }

    /// Connect within `timeout` (also each command's timeout).
    pub fn connect(&self, timeout: Duration) -> Result<Conn, Failed> {
        super::dial::connect(&self.info, timeout)
            .map(|conn| Conn { conn, timeout })
            .map_err(failed)
    }

    /// The same settings at another address (a master a sentinel named,
    /// a Cluster node), keeping TLS.
    pub fn at(&self, host: &str, port: u16) -> Server {
        let addr = match self.info.addr() {
            ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host: host.to_string(),
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => ConnectionAddr::Tcp(host.to_string(), port),
        };
        Server::new(self.info.clone().set_addr(addr))
    }
}

impl Conn {
    /// Send one command.
    pub fn call(&mut self, args: &[&str]) -> Result<Reply, Failed> {
        let Some((name, rest)) = args.split_first() else {
            return Err(Failed::Io("empty command".into()));
        };
        let mut cmd = redis::cmd(name);
        cmd.arg(rest);
        super::deadline::query::<Value>(&cmd, &mut self.conn, self.timeout)
            .map(reply)
            .map_err(failed)
    }
}

/// A connection to each of `servers`, made as a round makes them (see
/// `fanout`): one after another while each is quick, the rest at once
/// after a slow one. In `servers`' order.
pub fn connect_each(servers: &[&Server], timeout: Duration) -> Vec<Result<Conn, Failed>> {
    let infos: Vec<&ConnectionInfo> = servers.iter().map(|s| &s.info).collect();
    (super::fanout::dial_all(&infos, timeout).into_iter())
        .map(|made| made.map(|conn| Conn { conn, timeout }).map_err(failed))
        .collect()
}

/// One command to each of `links` in one round: sent to all, then every
/// reply read, within one deadline (the links' timeout).
pub fn call_each(links: &mut [&mut Conn], args: &[&str]) -> Vec<Result<Reply, Failed>> {
    let Some((name, rest)) = args.split_first() else {
        return links
            .iter()
            .map(|_| Err(Failed::Io("empty command".into())))
            .collect();
    };
    let mut cmd = redis::cmd(name);
    cmd.arg(rest);
    let timeout = links.first().map(|l| l.timeout).unwrap_or_default();
    let mut calls: Vec<(&mut Connection, &redis::Cmd)> =
        links.iter_mut().map(|l| (&mut l.conn, &cmd)).collect();
    (super::fanout::exchange(&mut calls, timeout).into_iter())
        .map(|r| r.map(reply).map_err(failed))
        .collect()
}

/// The servers an endpoint names up front.
pub enum Layout {
    /// One server.
    Plain(Server),
    /// A Sentinel service: its sentinels, and the data nodes' settings
    /// (address unknown until a sentinel names the master).
    Sentinel {
        sentinels: Vec<Server>,
        service: String,
        data: Server,
    },
    /// A Cluster's seed nodes.
    Cluster(Vec<Server>),
}

/// One primary of a Cluster and the slots it serves.
pub struct Primary {
    pub server: Server,
    pub slots: Vec<std::ops::RangeInclusive<u16>>,
}

/// What `endpoint` names.
pub fn layout(endpoint: &Endpoint) -> Layout {
    match &endpoint.target {
        Target::Plain(info) => Layout::Plain(Server::new(info.clone())),
        Target::Sentinel(s) => Layout::Sentinel {
            sentinels: s.sentinels.iter().cloned().map(Server::new).collect(),
            service: s.service.clone(),
            data: Server::new(s.data.clone()),
        },
        Target::Cluster(seeds) => Layout::Cluster(seeds.iter().cloned().map(Server::new).collect()),
    }
}

/// A Cluster's primaries by `CLUSTER SLOTS` of the first seed that
/// answers (slots no primary serves are absent).
pub fn primaries(seeds: &[Server], timeout: Duration) -> Result<Vec<Primary>, Failed> {
    let infos: Vec<ConnectionInfo> = seeds.iter().map(|s| s.info.clone()).collect();
    let found = super::cluster::primaries(&infos, timeout).map_err(failed)?;
    Ok(found
        .into_iter()
        .map(|p| Primary {
            server: Server::new(p.info),
            slots: p.slots,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_become_plain_data() {
        let v = Value::Array(vec![
            Value::BulkString(b"a".to_vec()),
            Value::Int(3),
            Value::Nil,
        ]);
        assert_eq!(
            reply(v),
            Reply::List(vec![Reply::Text("a".into()), Reply::Int(3), Reply::Nil])
        );
        assert_eq!(Reply::Text(" 12".into()).int(), Some(12));
    }
}
