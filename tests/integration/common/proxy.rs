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
mode = sys.argv[3]
late = None
limit = None
drop = 0
plan = []
if mode.startswith("plan:"):
    plan = mode[5:].split(",")
elif mode.startswith("drop:"):
    drop = int(mode[5:])
elif mode.startswith("late:"):
    _, n, ms = mode.split(":")
    late = (int(n), int(ms) / 1000)
elif mode != "all":
    limit = int(mode)
import time
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
def pipe_late(a, b, first, delay):
    """The first `first` requests at once, later ones `delay` after they
    came, even once the client has gone (as TCP delivers what a lossy link
    held back on a connection the client dropped)."""
    sent, timers = 0, []
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            if sent < first:
                b.sendall(data)
            else:
                t = threading.Timer(delay, lambda d=data: b.sendall(d))
                t.start()
                timers.append(t)
            sent += 1
    except OSError:
        pass
    for t in timers:
        t.join()
    time.sleep(0.2)
    for s in (a, b):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
connections = 0
while True:
    client, _ = server.accept()
    connections += 1
    step = plan[connections - 1] if connections <= len(plan) else "f"
    if connections <= drop or step == "d":
        client.close()
        continue
    upstream = socket.create_connection(("127.0.0.1", target))
    if step.startswith("l"):
        first, ms = step[1:].split(":")
        threading.Thread(target=pipe_late, args=(client, upstream, int(first), int(ms) / 1000),
                         daemon=True).start()
    elif step.startswith("r"):
        # Every request goes through; only the first N replies come back.
        threading.Thread(target=pipe, args=(client, upstream), daemon=True).start()
        threading.Thread(target=pipe, args=(upstream, client, int(step[1:])), daemon=True).start()
        continue
    elif late is not None and connections == 1:
        threading.Thread(target=pipe_late, args=(client, upstream) + late, daemon=True).start()
    else:
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

    /// A proxy whose first connection forwards its first `first`
    /// requests at once and every later one `late` after it came, even
    /// after the client closed it; later connections forward at once.
    pub fn first_connection_late(target: u16, first: usize, late: std::time::Duration) -> Proxy {
        Proxy::spawn(target, &format!("late:{first}:{}", late.as_millis()))
    }

    /// A proxy that closes its first `n` connections at once, unanswered
    /// (as a server whose accept queue overflowed, or that is restarting,
    /// turns a client away), and forwards later ones.
    pub fn dropping_first(target: u16, n: usize) -> Proxy {
        Proxy::spawn(target, &format!("drop:{n}"))
    }

    /// A proxy that treats its connections as `plan` says, one entry per
    /// connection in order of arrival: `d` closes it unanswered, `lN:MS`
    /// forwards its first N requests at once and every later one MS
    /// milliseconds after it came (even after the client closed it), `rN`
    /// forwards every request but only the first N replies (later ones are
    /// carried out, unanswered), `f` forwards it; connections beyond the
    /// plan are forwarded.
    pub fn with_plan(target: u16, plan: &[&str]) -> Proxy {
        Proxy::spawn(target, &format!("plan:{}", plan.join(",")))
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
