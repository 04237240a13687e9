//! A small TCP proxy in front of a server (Python, standard library only),
//! for a client that is alive but cut off: `pause` freezes the proxy
//! (SIGSTOP), so connections through it still open (the kernel's
//! backlog) but nothing is forwarded either way, while clients that talk
//! to the server directly go on as before.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::server::free_port;

const SCRIPT: &str = r#"
import socket, sys, threading
listen, target = int(sys.argv[1]), int(sys.argv[2])
limit = None if sys.argv[3] == "all" else int(sys.argv[3])
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", listen))
server.listen(128)
print("ready", flush=True)
def pipe(a, b, limit=None):
    sent = 0
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            if limit is not None and sent >= limit:
                continue
            b.sendall(data)
            sent += 1
    except OSError:
        pass
    for s in (a, b):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
while True:
    client, _ = server.accept()
    upstream = socket.create_connection(("127.0.0.1", target))
    threading.Thread(target=pipe, args=(client, upstream, limit), daemon=True).start()
    threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()
"#;

/// A proxy on a free loopback port forwarding to `127.0.0.1:target`.
pub struct Proxy {
    child: Child,
    port: u16,
}

impl Proxy {
    pub fn start(target: u16) -> Proxy {
        Proxy::spawn(target, "all")
    }

    /// A proxy that forwards only the first `n` requests of each
    /// connection (a request: what the client sends before the server's
    /// reply, one piece on loopback); later ones are swallowed, so they
    /// time out.
    pub fn first_requests_only(target: u16, n: usize) -> Proxy {
        Proxy::spawn(target, &n.to_string())
    }

    fn spawn(target: u16, mode: &str) -> Proxy {
        let python = std::env::var("REDLOCK_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
        let port = free_port();
        let mut child = Command::new(&python)
            .args(["-c", SCRIPT, &port.to_string(), &target.to_string(), mode])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("{python} (REDLOCK_TEST_PYTHON): {e}"));
        let mut line = String::new();
        let stdout = child.stdout.take().expect("proxy stdout");
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read from the proxy");
        assert_eq!(line.trim(), "ready", "the proxy did not start");
        Proxy { child, port }
    }

    /// `redis://127.0.0.1:PORT` through the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Stop forwarding: everything through the proxy hangs.
    pub fn pause(&self) {
        self.signal(Signal::SIGSTOP);
    }

    pub fn resume(&self) {
        self.signal(Signal::SIGCONT);
    }

    fn signal(&self, sig: Signal) {
        kill(Pid::from_raw(self.child.id() as i32), sig).expect("signal the proxy");
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
