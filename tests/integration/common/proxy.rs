//! A small TCP proxy in front of a server (Python, standard library only),
//! for a client that is alive but cut off: `pause` freezes the proxy
//! (SIGSTOP), so connections through it still open (the kernel's
//! backlog) but nothing is forwarded either way, while clients that talk
//! to the server directly go on as before.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::server::free_port;

const SCRIPT: &str = r#"
import socket, sys, threading
listen, target = int(sys.argv[1]), int(sys.argv[2])
mode = sys.argv[3]
late = None
trickle = None
limit = None
drop = 0
plan = []
hold = None
if mode.startswith("plan:"):
    plan = mode[5:].split(",")
elif mode.startswith("drop:"):
    drop = int(mode[5:])
elif mode.startswith("trickle:"):
    # trickle:MS:now or trickle:MS:later (from a line "trickle" on stdin on)
    _, ms, when = mode.split(":")
    trickle = {"gap": int(ms) / 1000, "on": when == "now"}
    def control():
        for line in sys.stdin:
            if line.strip() == "trickle":
                trickle["on"] = True
                print("trickling", flush=True)
    threading.Thread(target=control, daemon=True).start()
elif mode.startswith("late:"):
    _, n, ms = mode.split(":")
    late = (int(n), int(ms) / 1000)
elif mode.startswith("hold:"):
    # hold:MS:WORD:FILE: the first request that contains WORD, on any
    # connection, is forwarded MS late; FILE says "held", then "delivered".
    _, ms, word, path = mode.split(":", 3)
    hold = {"delay": int(ms) / 1000, "word": word.encode(), "left": 1, "path": path,
            "lock": threading.Lock()}
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
def pipe_trickle(a, b):
    """Once trickling is on, a reply never ends: in its place come
    out-of-band push messages (which a client skips while it waits for
    its reply), one byte every `gap`, until the client leaves."""
    endless = b">1\r\n+x\r\n"
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            if not trickle["on"]:
                b.sendall(data)
                continue
            while True:
                for i in range(len(endless)):
                    b.sendall(endless[i:i + 1])
                    time.sleep(trickle["gap"])
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
def note(what):
    with open(hold["path"], "a") as f:
        f.write(what + "\n")
def pipe_hold(a, b):
    """As `pipe`, but the first request (of all connections) with the
    word in it goes `delay` late, even once the client has gone (as TCP
    delivers what a lossy link held back on a dropped connection)."""
    timers = []
    def late(data):
        b.sendall(data)
        note("delivered")
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            with hold["lock"]:
                held = hold["left"] > 0 and hold["word"] in data
                hold["left"] -= int(held)
            if not held:
                b.sendall(data)
                continue
            note("held")
            t = threading.Timer(hold["delay"], late, args=(data,))
            t.start()
            timers.append(t)
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
    elif hold is not None:
        threading.Thread(target=pipe_hold, args=(client, upstream), daemon=True).start()
    elif late is not None and connections == 1:
        threading.Thread(target=pipe_late, args=(client, upstream) + late, daemon=True).start()
    else:
        threading.Thread(target=pipe, args=(client, upstream, limit), daemon=True).start()
    if trickle is not None:
        threading.Thread(target=pipe_trickle, args=(upstream, client), daemon=True).start()
        continue
    threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()
"#;

/// A proxy on a free loopback port forwarding to `127.0.0.1:target`.
pub struct Proxy {
    child: Child,
    port: u16,
    stdout: BufReader<ChildStdout>,
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

    /// A proxy that forwards everything at once but the first request,
    /// on any connection, that contains `word`: that one goes `late`
    /// after it came, even after the client closed its connection (as TCP
    /// delivers what a lossy link held back). `file` gets a line `held`
    /// when it is held back and `delivered` once it went.
    pub fn holding_back(target: u16, word: &str, late: std::time::Duration, file: &Path) -> Proxy {
        assert!(!word.contains(':'), "the word is the mode's third field");
        let mode = format!("hold:{}:{word}:{}", late.as_millis(), file.display());
        Proxy::spawn(target, &mode)
    }

    /// A proxy whose replies trickle and never end: one byte every `gap`
    /// (out-of-band push messages, which a client skips while it waits
    /// for its reply), so no read ever times out; from the start or, with
    /// `later`, from [`Proxy::start_trickling`] on. Requests go through
    /// at once.
    pub fn trickling(target: u16, gap: std::time::Duration, later: bool) -> Proxy {
        let when = if later { "later" } else { "now" };
        Proxy::spawn(target, &format!("trickle:{}:{when}", gap.as_millis()))
    }

    /// From now on, every reply trickles (see [`Proxy::trickling`]);
    /// returns once the proxy has said so.
    pub fn start_trickling(&mut self) {
        let stdin = self.child.stdin.as_mut().expect("proxy stdin");
        writeln!(stdin, "trickle").expect("tell the proxy");
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .expect("read from the proxy");
        assert_eq!(
            line.trim(),
            "trickling",
            "the proxy did not start trickling"
        );
    }

    fn spawn(target: u16, mode: &str) -> Proxy {
        let python = std::env::var("REDLOCK_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
        let port = free_port();
        let mut child = Command::new(&python)
            .args(["-c", SCRIPT, &port.to_string(), &target.to_string(), mode])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("{python} (REDLOCK_TEST_PYTHON): {e}"));
        let mut line = String::new();
        let mut stdout = BufReader::new(child.stdout.take().expect("proxy stdout"));
        stdout.read_line(&mut line).expect("read from the proxy");
        assert_eq!(line.trim(), "ready", "the proxy did not start");
        Proxy {
            child,
            port,
            stdout,
        }
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
