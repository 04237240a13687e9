//! What a process's TCP connections are doing, from /proc: for tests that
//! wait on a connection's state (a request sent, a reconnect made)
//! instead of sleeping.

use std::collections::HashSet;

/// One IPv4 TCP socket of a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpSocket {
    pub local_port: u16,
    pub remote_port: u16,
    pub established: bool,
    /// Bytes received and not yet read by the process.
    pub unread: u64,
    /// The socket's inode: a new connection has a new one, even on a
    /// local port used before. 0 for one not yet accepted.
    pub inode: u64,
}

/// Every IPv4 TCP socket in `pid`'s network namespace, whoever holds it
/// (a connection the kernel completed for a stopped server, not yet
/// accepted, too).
pub fn tcp_table(pid: i32) -> Vec<TcpSocket> {
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            // sl local rem st tx_queue:rx_queue tr:when retrnsmt uid timeout inode
            let f: Vec<&str> = line.split_whitespace().collect();
            let port = |addr: &str| u16::from_str_radix(addr.rsplit_once(':')?.1, 16).ok();
            Some(TcpSocket {
                local_port: port(f.get(1)?)?,
                remote_port: port(f.get(2)?)?,
                established: *f.get(3)? == "01",
                unread: u64::from_str_radix(f.get(4)?.split_once(':')?.1, 16).ok()?,
                inode: f.get(9)?.parse().ok()?,
            })
        })
        .collect()
}

/// The IPv4 TCP sockets `pid` holds open (its descriptors, matched by
/// inode against its network namespace's /proc/PID/net/tcp); empty once
/// it is gone.
pub fn tcp_sockets(pid: i32) -> Vec<TcpSocket> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    let inodes: HashSet<u64> = fds
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter_map(|link| {
            let link = link.to_string_lossy().into_owned();
            link.strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()
        })
        .collect();
    tcp_table(pid)
        .into_iter()
        .filter(|s| inodes.contains(&s.inode))
        .collect()
}

/// `pid`'s established connections to `port`.
pub fn connections_to(pid: i32, port: u16) -> Vec<TcpSocket> {
    tcp_sockets(pid)
        .into_iter()
        .filter(|s| s.established && s.remote_port == port)
        .collect()
}

/// Whether one of `pid`'s connections to `port` (a server on this host)
/// has sent bytes the server has not read yet: a request it waits on.
pub fn request_unread(pid: i32, port: u16) -> bool {
    let ours: HashSet<u16> = connections_to(pid, port)
        .iter()
        .map(|s| s.local_port)
        .collect();
    tcp_table(pid)
        .iter()
        .any(|s| s.local_port == port && ours.contains(&s.remote_port) && s.unread > 0)
}
