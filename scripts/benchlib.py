"""Throwaway Redis for the benchmarks (scripts/bench.py, bench_fleet.py,
bench_waiters.py): redis-servers and sentinels on free loopback ports (never
6379) in a temp dir, with a minimal RESP client; the topologies (a Redlock
quorum, a primary with sentinels, a Cluster); and a TCP proxy that delays
every chunk; and one that counts round trips.

Only the Python standard library. The integration tests have their own
harness in Rust (tests/integration/common/), the fault campaign its own in
scripts/chaos/.
"""

import os
import select
import socket
import subprocess
import threading
import time
from pathlib import Path


class SetupError(Exception):
    """A server or topology that did not come up."""


# ---------------------------------------------------------------------------
# Redis servers and topologies


class Redis:
    """A throwaway redis-server (or sentinel) with a minimal RESP client."""

    # Commands `calls()` leaves out: the bench's own. bench_waiters.py
    # counts PUBSUB too (the scripts call NUMSUB).
    NOT_COUNTED = ("info", "config", "pubsub", "ping")

    def __init__(self, tmp: Path, name="redis", args=(), sentinel_for=None, binary="redis-server"):
        self.name = name
        self.binary = binary
        self.dir = tmp / name
        self.dir.mkdir()
        self.sock = None
        for _ in range(5):
            self.port = free_port()
            self.proc = subprocess.Popen(
                self._argv(list(args), sentinel_for),
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            if self._ready():
                return
            self.stop()
        raise SetupError(f"{name}: {binary} did not start (see {self.dir / 'redis.log'})")

    def _argv(self, args, sentinel_for):
        if sentinel_for is None:
            return [
                self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--dir", str(self.dir),
                "--logfile", str(self.dir / "redis.log"), "--daemonize", "no",
                "--protected-mode", "no", *args,
            ]
        conf = self.dir / "sentinel.conf"   # a sentinel rewrites its config: a file of its own
        conf.write_text(
            f"port {self.port}\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\n"
            f"dir {self.dir}\nlogfile {self.dir / 'redis.log'}\n"
            f"sentinel monitor mymaster 127.0.0.1 {sentinel_for} 2\n"
        )
        return [self.binary, str(conf), "--sentinel"]

    def _ready(self):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
                self.reader = self.sock.makefile("rb")
                if self.cmd("PING") == "PONG":
                    return True
            except OSError:
                time.sleep(0.02)
        return False

    def cmd(self, *args):
        self.sock.sendall(request(args))
        return self._reply()

    def _reply(self):
        line = self.reader.readline().rstrip(b"\r\n")
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.reader.read(n + 2)[:-2]
            return data.decode()
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise RuntimeError(f"bad reply {line!r}")

    # A script's call: redlock-run sends EVALSHA, and the EVAL itself
    # only to a server that lacks the script (its first call there).
    SCRIPTS = ("eval", "evalsha")

    def calls(self, only=None):
        """Commands served since CONFIG RESETSTAT (those run by scripts
        included), the bench's own excluded; or calls of the commands in
        `only` (a tuple of names, such as SCRIPTS)."""
        total = 0
        for line in self.cmd("INFO", "commandstats").splitlines():
            if line.startswith("cmdstat_"):
                name, stats = line[len("cmdstat_"):].split(":", 1)
                name = name.split("|")[0]
                if (only is not None and name in only) or (only is None and name not in self.NOT_COUNTED):
                    total += int(stats.split(",")[0].split("=")[1])
        return total

    def info(self, section):
        """`INFO section` as a dict of its fields."""
        out = {}
        for line in self.cmd("INFO", section).splitlines():
            if ":" in line:
                k, v = line.split(":", 1)
                out[k] = v
        return out

    def subscribers(self, channel):
        return self.cmd("PUBSUB", "NUMSUB", channel)[1]

    def stop(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


class Servers:
    """Every redis-server and sentinel the bench starts, stopped together."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.all = []

    def start(self, name, args=(), sentinel_for=None, binary="redis-server"):
        server = Redis(self.tmp, name, args, sentinel_for, binary)
        self.all.append(server)
        return server

    def stop(self):
        for server in reversed(self.all):
            server.stop()
        self.all = []


def request(args):
    """A command (its arguments, each str()'d) as RESP bytes."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def free_port():
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port != 6379:
            return port


def wait_for(what, check, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except (OSError, RuntimeError):
            pass
        if time.monotonic() > deadline:
            raise SetupError(f"{what} not ready after {timeout} s")
        time.sleep(0.05)


def redis_args(ports):
    """`--redis redis://127.0.0.1:PORT` for each port."""
    return [a for p in ports for a in ("--redis", f"redis://127.0.0.1:{p}")]


def start_masters(servers, name, count):
    """`count` independent masters, NAME0, NAME1, ..."""
    return [servers.start(f"{name}{i}") for i in range(count)]


def start_quorum(servers, nodes=5):
    """`nodes` independent masters: `--redis` repeated, a Redlock quorum."""
    return redis_args(m.port for m in start_masters(servers, "quorum", nodes))


def start_sentinel(servers):
    """One primary watched by 3 sentinels (quorum 2)."""
    primary = servers.start("sentinel-primary")
    sentinels = [servers.start(f"sentinel{i}", sentinel_for=primary.port) for i in range(3)]
    want = ["127.0.0.1", str(primary.port)]
    for s in sentinels:
        wait_for(s.name, lambda: s.cmd("SENTINEL", "get-master-addr-by-name", "mymaster") == want)
    hosts = ",".join(f"127.0.0.1:{s.port}" for s in sentinels)
    return ["--redis", f"redis+sentinel://{hosts}/mymaster"]


def start_without_scripts(servers):
    """One server whose default user may not run scripts (`ACL SETUSER
    default -@scripting`): a plain lock by transactions (issue 38)."""
    s = servers.start("noscripts")
    s.cmd("ACL", "SETUSER", "default", "-@scripting")
    return ["--redis", f"redis://127.0.0.1:{s.port}"]


def start_cluster(servers):
    """3 primaries, no replicas, all 16384 slots assigned."""
    args = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", "5000"]
    nodes = [servers.start(f"cluster{i}", args) for i in range(3)]
    addrs = [f"127.0.0.1:{n.port}" for n in nodes]
    made = subprocess.run(
        ["redis-cli", "--cluster", "create", *addrs, "--cluster-replicas", "0", "--cluster-yes"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
    )
    if made.returncode != 0:
        raise SetupError("redis-cli --cluster create: " + (made.stderr or made.stdout).strip()[-200:])
    for n in nodes:
        wait_for(n.name, lambda: "cluster_state:ok" in n.cmd("CLUSTER", "INFO"))
    return ["--redis", "redis+cluster://" + ",".join(addrs)]


# ---------------------------------------------------------------------------
# Helpers in C, and a TCP proxy that adds latency


def build_c(tmp: Path, name, source, *flags, cc="cc"):
    """`source` compiled with `cc -O2` (or the compiler `cc`) to
    `tmp/name`; its path."""
    binary = tmp / name
    (tmp / f"{name}.c").write_text(source)
    subprocess.run([cc, "-O2", *flags, "-o", str(binary), str(tmp / f"{name}.c")], check=True)
    return str(binary)


# A TCP proxy: `delay-proxy LISTEN_FD TARGET_PORT DELAY_US`. Every chunk
# read from either end is sent on DELAY_US after it arrived (as `tc netem
# delay` on an interface would; this kernel has no netem), its end too
# (a shutdown passed on in order). One process per proxy, every connection
# in one epoll loop with one timer (a timerfd at the first chunk due): no
# process or thread per connection, whose start would cost CPU at each new
# connection and so add time to the five-node runs only (five connections
# a run where one node makes one). In C so that five proxies do not queue
# behind one Python interpreter lock either.
DELAY_PROXY_C = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>
#define MAXFD 65536
struct chunk { struct chunk *next; int to; long long due; size_t len; char data[]; };
static struct chunk *head, *tail;
/* ended[min of a pair]: how many of its two ends were passed on */
static int peer[MAXFD], ended[MAXFD];
static long long delay_ns;
static int ep, tfd;
static long long now_ns(void) {
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}
static void arm(void) {
    struct itimerspec it = {0};
    if (head) { it.it_value.tv_sec = head->due / 1000000000LL; it.it_value.tv_nsec = head->due % 1000000000LL; }
    timerfd_settime(tfd, TFD_TIMER_ABSTIME, &it, NULL);
}
static void later(int to, const char *data, size_t len) {
    struct chunk *c = malloc(sizeof *c + len);
    c->next = NULL; c->to = to; c->due = now_ns() + delay_ns; c->len = len;
    memcpy(c->data, data, len);
    if (tail) tail->next = c; else { head = c; arm(); }
    tail = c;
}
static void deliver(struct chunk *c) {
    if (c->len == 0) {   /* the other side ended: pass it on, close when both have */
        int a = c->to, b = peer[a], pair = a < b ? a : b;
        shutdown(a, SHUT_WR);
        if (++ended[pair] == 2) { close(a); close(b); }
        return;
    }
    for (size_t sent = 0; sent < c->len;) {
        ssize_t k = send(c->to, c->data + sent, c->len - sent, MSG_NOSIGNAL);
        if (k <= 0) break;
        sent += k;
    }
}
int main(int argc, char **argv) {
    if (argc != 4) return 2;
    int listener = atoi(argv[1]);
    struct sockaddr_in target = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[2])),
                                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    delay_ns = atol(argv[3]) * 1000LL;
    ep = epoll_create1(0);
    tfd = timerfd_create(CLOCK_MONOTONIC, 0);
    struct epoll_event ev = { .events = EPOLLIN };
    ev.data.fd = listener; epoll_ctl(ep, EPOLL_CTL_ADD, listener, &ev);
    ev.data.fd = tfd; epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &ev);
    static char buf[65536];
    for (;;) {
        struct epoll_event evs[64];
        int n = epoll_wait(ep, evs, 64, -1);
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == listener) {
                int client = accept(listener, NULL, NULL);
                if (client < 0 || client >= MAXFD) { if (client >= 0) close(client); continue; }
                int server = socket(AF_INET, SOCK_STREAM, 0);
                if (server < 0 || server >= MAXFD || connect(server, (struct sockaddr *)&target, sizeof target) != 0) {
                    close(client); if (server >= 0) close(server); continue;
                }
                int one = 1;
                setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                peer[client] = server; peer[server] = client;
                ended[client] = ended[server] = 0;
                ev.data.fd = client; epoll_ctl(ep, EPOLL_CTL_ADD, client, &ev);
                ev.data.fd = server; epoll_ctl(ep, EPOLL_CTL_ADD, server, &ev);
            } else if (fd == tfd) {
                unsigned long long expirations;
                if (read(tfd, &expirations, sizeof expirations) < 0) {}
            } else {
                ssize_t got = recv(fd, buf, sizeof buf, 0);
                if (got > 0) { later(peer[fd], buf, (size_t)got); continue; }
                if (got < 0 && errno == EINTR) continue;
                epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
                later(peer[fd], buf, 0);   /* after what came before it */
            }
        }
        long long now = now_ns();
        while (head && head->due <= now) {
            struct chunk *c = head;
            head = c->next;
            if (!head) tail = NULL;
            deliver(c);
            free(c);
        }
        arm();
    }
}
"""


class DelayProxy:
    """A TCP proxy on a free loopback port in front of `port` that delays
    every chunk by `delay` seconds each way (DELAY_PROXY_C, built into
    `tmp`), in a process of its own."""

    def __init__(self, port, delay, tmp: Path):
        binary = tmp / "delay-proxy"
        if not binary.exists():
            build_c(tmp, "delay-proxy", DELAY_PROXY_C)
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.port = free_port()
        listener.bind(("127.0.0.1", self.port))
        listener.listen(256)
        self.proc = subprocess.Popen(
            [str(binary), str(listener.fileno()), str(port), str(round(delay * 1e6))],
            pass_fds=[listener.fileno()], start_new_session=True)
        listener.close()

    def close(self):
        # Its connections' processes are in its session: stop them all.
        try:
            os.killpg(self.proc.pid, 9)
        except ProcessLookupError:
            pass
        self.proc.wait()


class CountingProxy:
    """A TCP proxy on a free loopback port in front of `port` that forwards
    every byte unchanged and counts round trips: `trips` is, in the order
    the proxy saw them, each request a client sent before the server's next
    answer on that connection, as {conn, at (monotonic s), commands}; a
    pipeline is one. In one thread of the bench (a select loop), so the
    order across connections is the order the bytes arrived in. For
    counting only: it adds latency, time nothing through it."""

    def __init__(self, port):
        self.target = port
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.port = free_port()
        self.listener.bind(("127.0.0.1", self.port))
        self.listener.listen(64)
        self.trips = []
        self.conns = 0
        self.peers = {}   # socket -> [other socket, connection number, client?, bytes not parsed]
        self.answered = {}   # connection number -> the server spoke last
        self.done = False
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _accept(self):
        client, _ = self.listener.accept()
        server = socket.create_connection(("127.0.0.1", self.target))
        for s in (client, server):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.conns += 1
        self.peers[client] = [server, self.conns, True, b""]
        self.peers[server] = [client, self.conns, False, b""]
        self.answered[self.conns] = True

    def _drop(self, s):
        other = self.peers.pop(s)[0]
        self.peers.pop(other, None)
        s.close()
        other.close()

    def _loop(self):
        while not self.done:
            ready, _, _ = select.select([self.listener, *self.peers], [], [], 0.05)
            for s in ready:
                if s is self.listener:
                    self._accept()
                elif s in self.peers:
                    self._forward(s)

    def _forward(self, s):
        other, conn, client, rest = self.peers[s]
        try:
            data = s.recv(65536)
            if data:
                other.sendall(data)
        except OSError:
            data = b""
        if not data:
            self._drop(s)
            return
        if not client:
            self.answered[conn] = True
            return
        if self.answered[conn]:
            self.trips.append(dict(conn=conn, at=time.monotonic(), commands=[]))
            self.answered[conn] = False
        trip = next(t for t in reversed(self.trips) if t["conn"] == conn)
        commands, self.peers[s][3] = parse_requests(rest + data)
        trip["commands"] += commands

    def close(self):
        self.done = True
        self.thread.join()
        for s in list(self.peers):
            if s in self.peers:
                self._drop(s)
        self.listener.close()


def parse_requests(buf: bytes):
    """The complete commands (lists of str arguments) at the start of
    `buf`, and what is left of it (a command not yet whole)."""
    out = []
    while buf:
        if not buf.startswith(b"*"):   # an inline command: one line
            line, sep, rest = buf.partition(b"\r\n")
            if not sep:
                break
            out.append(line.decode(errors="replace").split())
            buf = rest
            continue
        got = _one_request(buf)
        if got is None:
            break
        args, buf = got
        out.append(args)
    return out, buf


def _one_request(buf: bytes):
    """(arguments, the rest) of the RESP array at the start of `buf`, or
    None while it is not whole."""
    head, sep, rest = buf.partition(b"\r\n")
    if not sep:
        return None
    args = []
    for _ in range(int(head[1:])):
        size, sep, rest = rest.partition(b"\r\n")
        if not sep or len(rest) < int(size[1:]) + 2:
            return None
        n = int(size[1:])
        args.append(rest[:n].decode(errors="replace"))
        rest = rest[n + 2:]
    return args, rest
