//! Making a connection within one deadline, name resolution included.
//!
//! `getaddrinfo` cannot be given a timeout and may block for 10 s or more
//! on a silent DNS server, so a host name (never an IP literal: that path
//! costs nothing extra) is resolved on a helper thread that is abandoned
//! at the deadline. Every resolved address then gets a share of the time
//! left, so that a dead first address (an AAAA record, a round-robin
//! member) cannot use it all, and redis-rs connects to the address that
//! answers. TLS needs the host name to verify the certificate, so a
//! `rediss://` connection to a name is made whole on a helper thread
//! under the same deadline.

use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use redis::{Connection, ConnectionAddr, ConnectionInfo, RedisError};

/// A connection to `info`, made within `timeout`, with `timeout` as the
/// read and write timeout of every later command.
/// The handshake (AUTH, HELLO, SELECT) included, the whole connection is
/// made within `timeout` (see `deadline`).
pub fn connect(info: &ConnectionInfo, timeout: Duration) -> Result<Connection, RedisError> {
    super::deadline::within(timeout, || connect_within(info, timeout))
}

fn connect_within(info: &ConnectionInfo, timeout: Duration) -> Result<Connection, RedisError> {
    let deadline = Instant::now() + timeout;
    let conn = match info.addr() {
        ConnectionAddr::Tcp(host, port) if host.parse::<IpAddr>().is_err() => {
            let addresses = resolve(host, *port, deadline)?;
            each_address(info, &addresses, deadline)?
        }
        ConnectionAddr::TcpTls { host, .. } if host.parse::<IpAddr>().is_err() => {
            let info = info.clone();
            on_helper(deadline, move || open(&info, timeout))??
        }
        _ => open(info, timeout)?,
    };
    conn.set_read_timeout(Some(timeout))?;
    conn.set_write_timeout(Some(timeout))?;
    Ok(conn)
}

fn open(info: &ConnectionInfo, timeout: Duration) -> Result<Connection, RedisError> {
    redis::Client::open(info.clone())?.get_connection_with_timeout(timeout)
}

/// Run `work` on a thread of its own; give up on it at `deadline` (the
/// thread is left to finish alone: it owns everything it touches).
fn on_helper<T: Send + 'static>(
    deadline: Instant,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, RedisError> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("connect".into())
        .spawn(move || {
            let _ = tx.send(work());
        })
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", super::error::NO_THREAD)))?;
    rx.recv_timeout(deadline.saturating_duration_since(Instant::now()))
        .map_err(|_| timed_out("connecting"))
}

/// The addresses of `host`, resolved within the deadline.
pub(super) fn resolve(
    host: &str,
    port: u16,
    deadline: Instant,
) -> Result<Vec<SocketAddr>, RedisError> {
    // Host names are case-insensitive, but musl's resolver (the static
    // build) finds `LOCALHOST` nowhere: ask in lower case, as glibc would
    // answer for any case.
    let name = host.to_ascii_lowercase();
    let found = on_helper(deadline, move || {
        (name.as_str(), port)
            .to_socket_addrs()
            .map(|addresses| addresses.collect::<Vec<_>>())
    })
    .map_err(|_| timed_out("resolving the host name"))??;
    if found.is_empty() {
        return Err(io::Error::new(io::ErrorKind::NotFound, "the host name has no address").into());
    }
    Ok(found)
}

/// Connect to the first address that answers, each with an equal share
/// of the time left. A server that answered with an error ends it: the
/// next address is the same server.
fn each_address(
    info: &ConnectionInfo,
    addresses: &[SocketAddr],
    deadline: Instant,
) -> Result<Connection, RedisError> {
    let mut last = timed_out("connecting");
    for (i, address) in addresses.iter().enumerate() {
        let left = deadline.saturating_duration_since(Instant::now());
        let share = left / u32::try_from(addresses.len() - i).unwrap_or(u32::MAX);
        if share.is_zero() {
            break;
        }
        let one = info.clone().set_addr(ConnectionAddr::Tcp(
            address.ip().to_string(),
            address.port(),
        ));
        match open(&one, share) {
            Ok(conn) => return Ok(conn),
            Err(e) if e.is_io_error() => last = e,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

fn timed_out(what: &str) -> RedisError {
    io::Error::new(io::ErrorKind::TimedOut, format!("{what} timed out")).into()
}
