#!/usr/bin/env python3
"""Benchmark redlock-run against plain `true`, flock(1) and a redis-cli wrapper.

Started by scripts/bench.sh, which builds the release binary first. Starts its
own redis-server on a free loopback port in a temp dir, and prints one table:

  1. uncontended `X -- true`: median and p95 wall time, overhead over `true`;
  2. contended: workers x runs of a short section on one key: total wall time,
     hand-over gaps (end of one section to start of the next), overlaps;
  3. peak RSS (VmHWM) of the wrapper while its child runs;
  4. many waiters queued on one key: Redis commands per second while they
     wait, and the time to drain the queue.

Only the Python standard library is used. Timing is not asserted: the table is
for people; `--quick` exists so CI can check the bench still runs.
"""

import argparse
import math
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# A critical section: sleeps, then appends "start end" (CLOCK_MONOTONIC ns)
# to a log in one write. Compiled so that its start-up does not blur the
# hand-over gaps (a shell would add a millisecond to every tool alike).
SECTION_C = r"""
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
static long long now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}
int main(int argc, char **argv) {
    if (argc != 3) return 2;
    long long start = now();
    long us = atol(argv[2]);
    struct timespec d = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&d, &d) != 0) {}
    long long end = now();
    char line[64];
    int n = snprintf(line, sizeof line, "%lld %lld\n", start, end);
    int fd = open(argv[1], O_WRONLY | O_APPEND | O_CREAT, 0644);
    return fd < 0 || write(fd, line, n) != n;
}
"""

# The wrapper people write by hand: SET NX PX, retry every 100 ms, then a
# compare-and-delete. `read` keeps the token free of an extra fork.
REDIS_CLI_WRAPPER = r"""#!/bin/sh
key=$1; shift
read token < /proc/sys/kernel/random/uuid
until [ "$(redis-cli -h 127.0.0.1 -p @PORT@ SET "$key" "$token" NX PX 30000)" = OK ]; do
  sleep 0.1
done
"$@"; rc=$?
redis-cli -h 127.0.0.1 -p @PORT@ EVAL "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end" 1 "$key" "$token" >/dev/null
exit $rc
"""


class Redis:
    """A throwaway redis-server with a minimal RESP client."""

    def __init__(self, tmp: Path):
        self.dir = tmp / "redis"
        self.dir.mkdir()
        for _ in range(5):
            self.port = free_port()
            self.proc = subprocess.Popen(
                [
                    "redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                    "--save", "", "--appendonly", "no", "--dir", str(self.dir),
                    "--logfile", str(self.dir / "redis.log"), "--daemonize", "no",
                    "--protected-mode", "no",
                ],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
                    self.reader = self.sock.makefile("rb")
                    if self.cmd("PING") == "PONG":
                        return
                except OSError:
                    time.sleep(0.02)
            self.stop()
        sys.exit("bench: redis-server did not start")

    def cmd(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.sock.sendall(b"".join(out))
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
            return [self._reply() for _ in range(int(rest))]
        raise RuntimeError(f"bad reply {line!r}")

    def calls(self, only=None):
        """Commands served since CONFIG RESETSTAT (those run by scripts
        included), the bench's own excluded; or calls of `only`."""
        total = 0
        for line in self.cmd("INFO", "commandstats").splitlines():
            if line.startswith("cmdstat_"):
                name, stats = line[len("cmdstat_"):].split(":", 1)
                name = name.split("|")[0]
                if name == only or (only is None and name not in ("info", "config", "pubsub", "ping")):
                    total += int(stats.split(",")[0].split("=")[1])
        return total

    def subscribers(self, channel):
        return self.cmd("PUBSUB", "NUMSUB", channel)[1]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def free_port():
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port != 6379:
            return port


def spawn(argv, stdout_null=True):
    actions = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)]
    if stdout_null:
        actions.append((os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0))
    return os.posix_spawn(argv[0], argv, os.environ, file_actions=actions)


def run(argv):
    """Run to completion; the exit code (negative: killed by a signal)."""
    status = os.waitpid(spawn(argv), 0)[1]
    return os.waitstatus_to_exitcode(status)


def pct(xs, p):
    """Nearest-rank percentile."""
    s = sorted(xs)
    return s[max(0, math.ceil(p / 100 * len(s)) - 1)]


def ms(seconds):
    return f"{seconds * 1000:.2f} ms"


class Tools:
    def __init__(self, tmp: Path, redis: Redis, binary: Path):
        self.tmp = tmp
        self.url = f"redis://127.0.0.1:{redis.port}"
        self.binary = str(binary)
        self.failures = []
        self.wrapper = None
        if shutil.which("redis-cli"):
            self.wrapper = tmp / "redis-cli-lock"
            self.wrapper.write_text(REDIS_CLI_WRAPPER.replace("@PORT@", str(redis.port)))
            self.wrapper.chmod(0o755)
        self.flock = shutil.which("flock")

    def names(self, with_true=False):
        names = ["true"] if with_true else []
        names += ["flock"] if self.flock else []
        names += ["redis-cli"] if self.wrapper else []
        return names + ["redlock-run"]

    def argv(self, name, key, command):
        if name == "true":
            return command
        if name == "flock":
            return [self.flock, str(self.tmp / f"{key}.flock")] + command
        if name == "redis-cli":
            return [str(self.wrapper), f"cli:{key}"] + command
        return [self.binary, "--redis", self.url, "--key", key, "--"] + command

    def check(self, name, code):
        if code != 0:
            self.failures.append(f"{name} exited {code}")


def uncontended(tools, rounds):
    true = shutil.which("true")
    names = tools.names(with_true=True)
    times = {n: [] for n in names}
    for i in range(rounds):
        # Interleaved, rotating order: drift on a shared machine hits all alike.
        for j in range(len(names)):
            name = names[(i + j) % len(names)]
            argv = tools.argv(name, "uncontended", [true])
            start = time.perf_counter()
            code = run(argv)
            times[name].append(time.perf_counter() - start)
            tools.check(name, code)
    return {n: (statistics.median(t), pct(t, 95)) for n, t in times.items()}


def sections(log: Path):
    """(start, end) pairs in seconds, by start; gaps between them; overlaps."""
    text = log.read_text() if log.exists() else ""
    spans = sorted(tuple(int(x) / 1e9 for x in line.split()) for line in text.splitlines())
    gaps = [b[0] - a[1] for a, b in zip(spans, spans[1:])]
    overlaps = sum(1 for g in gaps if g < 0)
    return spans, gaps, overlaps


def contended(tools, section, workers, runs, section_ms):
    results = {}
    for name in tools.names():
        log = tools.tmp / f"contended-{name}.log"
        argv = tools.argv(name, "contended", [section, str(log), str(section_ms * 1000)])

        def worker():
            for _ in range(runs):
                tools.check(name, run(argv))

        threads = [threading.Thread(target=worker) for _ in range(workers)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        total = time.perf_counter() - start
        spans, gaps, overlaps = sections(log)
        if len(spans) != workers * runs:
            tools.failures.append(f"{name}: {len(spans)} sections of {workers * runs}")
        results[name] = dict(
            total=total,
            median=statistics.median(gaps) if gaps else float("nan"),
            p99=pct(gaps, 99) if gaps else float("nan"),
            overlaps=overlaps,
        )
    return results


def peak_rss(tools):
    """VmHWM (kB) of each wrapper process while its child runs."""
    results = {}
    for name in tools.names():
        marker = tools.tmp / f"rss-{name}"
        child = ["/bin/sh", "-c", f"touch {marker}; sleep 0.3"]
        pid = spawn(tools.argv(name, "rss", child))
        deadline = time.monotonic() + 10
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(0.1)
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            hwm = next(l for l in status.splitlines() if l.startswith("VmHWM:"))
            results[name] = int(hwm.split()[1])
        except (OSError, StopIteration):
            results[name] = None
        tools.check(name, os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    return results


def queued_on_flock(path: Path):
    """Processes blocked on a flock (their /proc/locks lines have "->")."""
    inode = os.stat(path).st_ino
    lines = Path("/proc/locks").read_text().splitlines()
    return sum(1 for l in lines if "->" in l and f":{inode} " in l)


def queue(tools, redis, section, waiters, idle, section_ms, name="redlock-run"):
    """Many waiters on one key: Redis load while they wait, then the drain."""
    key = f"queue-{name}"
    go = tools.tmp / f"{key}-go"
    held = tools.tmp / f"{key}-held"
    log = tools.tmp / f"{key}.log"
    hold = ["/bin/sh", "-c", f"touch {held}; while [ ! -e {go} ]; do sleep 0.005; done"]
    holder = spawn(tools.argv(name, key, hold))
    while not held.exists():
        time.sleep(0.005)
    argv = tools.argv(name, key, [section, str(log), str(section_ms * 1000)])
    pids = [spawn(argv) for _ in range(waiters)]
    if name == "flock":
        queued = lambda: queued_on_flock(tools.tmp / f"{key}.flock")
    else:
        queued = lambda: redis.subscribers("redlock:{%s}" % key)
    deadline = time.monotonic() + 120
    while queued() < waiters and time.monotonic() < deadline:
        time.sleep(0.05)
    subscribed = queued()

    # Idle waiting, after a settling pause, in two halves: the rate must not
    # grow with waiting time. EVALs are round trips; "commands" also counts
    # the ones a script runs inside Redis.
    time.sleep(idle / 4)
    rates = []
    for _ in range(2):
        redis.cmd("CONFIG", "RESETSTAT")
        start = time.monotonic()
        time.sleep(idle * 3 / 8)
        elapsed = time.monotonic() - start
        rates.append((redis.calls("eval") / elapsed, redis.calls() / elapsed))

    redis.cmd("CONFIG", "RESETSTAT")
    released = time.monotonic()
    go.touch()
    tools.check("holder", os.waitstatus_to_exitcode(os.waitpid(holder, 0)[1]))
    for pid in pids:
        tools.check("waiter", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    done = time.monotonic()
    drain_rate = (redis.calls("eval") / (done - released), redis.calls() / (done - released))
    spans, gaps, overlaps = sections(log)
    if len(spans) != waiters:
        tools.failures.append(f"queue: {len(spans)} sections of {waiters}")
    return dict(
        queued=subscribed,
        rates=rates,
        total=spans[-1][1] - released if spans else done - released,
        drain_rate=drain_rate,
        median=statistics.median(gaps) if gaps else 0.0,
        p99=pct(gaps, 99) if gaps else 0.0,
        overlaps=overlaps,
    )


def machine():
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    redis = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout
    version = next((w[2:] for w in redis.split() if w.startswith("v=")), "?")
    return f"{os.cpu_count()} CPUs, {model}, Linux {platform.release()}, redis-server {version}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer iterations, for CI")
    ap.add_argument("--binary", default=str(ROOT / "target" / "release" / "redlock-run"))
    args = ap.parse_args()
    q = args.quick
    rounds, workers, runs, waiters, idle = (40, 8, 5, 50, 2.0) if q else (300, 8, 10, 200, 4.0)

    for tool in ("redis-server", "cc"):
        if not shutil.which(tool):
            sys.exit(f"bench: {tool} not found on PATH")
    with tempfile.TemporaryDirectory(prefix="redlock-bench") as tmp:
        tmp = Path(tmp)
        section = tmp / "section"
        (tmp / "section.c").write_text(SECTION_C)
        subprocess.run(["cc", "-O2", "-o", str(section), str(tmp / "section.c")], check=True)
        redis = Redis(tmp)
        try:
            tools = Tools(tmp, redis, Path(args.binary))
            for name in tools.names():
                code = run(tools.argv(name, "smoke", [shutil.which("true")]))
                if code != 0:
                    sys.exit(f"bench: `{name} -- true` exited {code}; not measuring")
            u = uncontended(tools, rounds)
            c = contended(tools, str(section), workers, runs, 10)
            r = peak_rss(tools)
            w = {
                name: queue(tools, redis, str(section), waiters, idle, 5, name)
                for name in tools.names()
                if name != "redis-cli"
            }
        finally:
            redis.stop()
    report(q, rounds, workers, runs, waiters, idle, u, c, r, w, tools)
    return 1 if tools.failures else 0


def report(q, rounds, workers, runs, waiters, idle, u, c, r, w, tools):
    mode = "quick" if q else "full"
    print(f"redlock-run bench ({mode}), {time.strftime('%Y-%m-%d')}: {machine()}")
    print()
    base = u["true"][0]
    print(f"1. Uncontended `X -- true`, {rounds} runs each (interleaved)")
    print(f"   {'wrapper':<12} {'median':>9} {'p95':>9} {'overhead':>10}")
    for name, (med, p95) in u.items():
        over = "" if name == "true" else f"+{(med - base) * 1000:.2f} ms"
        print(f"   {name:<12} {med * 1000:>6.2f} ms {p95 * 1000:>6.2f} ms {over:>10}")
    ours = u["redlock-run"][0] - base
    ratios = []
    if "flock" in u:
        ratios.append(f"{ours / max(u['flock'][0] - base, 1e-6):.2f}x flock's")
    if "redis-cli" in u:
        ratios.append(f"{ours / max(u['redis-cli'][0] - base, 1e-6):.3f}x the redis-cli wrapper's")
    if ratios:
        print(f"   redlock-run overhead = {', '.join(ratios)}")
    print()
    ideal = workers * runs * 0.010
    print(f"2. Contended: {workers} workers x {runs} runs of a 10 ms section on one key (ideal {ideal:.2f} s)")
    print(f"   {'wrapper':<12} {'total':>8} {'vs ideal':>9} {'vs flock':>9} {'hand-over median':>17} {'p99':>9} {'overlaps':>9}")
    for name, x in c.items():
        vs_flock = f"{x['total'] / c['flock']['total']:.2f}x" if "flock" in c else "-"
        print(
            f"   {name:<12} {x['total']:>6.2f} s {x['total'] / ideal:>8.2f}x {vs_flock:>9} "
            f"{x['median'] * 1000:>14.2f} ms {x['p99'] * 1000:>6.2f} ms {x['overlaps']:>9}"
        )
    print()
    print("3. Peak RSS (VmHWM) of the wrapper process while its child runs")
    for name, kb in r.items():
        shown = "n/a" if kb is None else f"{kb / 1024:.1f} MB"
        what = " (the sh running the script)" if name == "redis-cli" else ""
        print(f"   {name:<12} {shown:>8}{what}")
    print()
    print(f"4. {waiters} waiters queued on one key, each a 5 ms section (the redis-cli wrapper is left")
    print(f"   out: {waiters} shells polling every 100 ms would load this machine, not Redis, first)")
    ideal_q = waiters * 0.005
    o = w["redlock-run"]
    print(
        f"   redlock-run: {o['queued']} of {waiters} subscribed to the release channel; while all wait "
        f"({idle * 3 / 4:.1f} s, two halves): {o['rates'][0][0]:.0f} then {o['rates'][1][0]:.0f} EVAL/s "
        f"({o['rates'][0][1]:.0f} then {o['rates'][1][1]:.0f} commands/s counting those inside scripts)"
    )
    print(f"   {'wrapper':<12} {'drain':>8} {'vs ideal':>9} {'hand-over median':>17} {'p99':>9} {'overlaps':>9} {'EVAL/s':>8} {'commands/s':>11}")
    for name, x in w.items():
        rate = ("-", "-") if name == "flock" else (f"{x['drain_rate'][0]:.0f}", f"{x['drain_rate'][1]:.0f}")
        print(
            f"   {name:<12} {x['total']:>6.2f} s {x['total'] / ideal_q:>8.2f}x {x['median'] * 1000:>14.2f} ms "
            f"{x['p99'] * 1000:>6.2f} ms {x['overlaps']:>9} {rate[0]:>8} {rate[1]:>11}"
        )
    print(f"   (ideal: {waiters} x 5 ms = {ideal_q:.2f} s; drain = release of the holder to the end of the last section)")
    print()
    print("Targets (issue 6):")
    targets = []
    if "flock" in u:
        f_over = u["flock"][0] - base
        targets.append((f"uncontended overhead <= 1.5x flock's ({ours * 1000:.2f} vs {f_over * 1000:.2f} ms)", ours <= 1.5 * f_over))
    if "redis-cli" in u:
        r_over = u["redis-cli"][0] - base
        targets.append((f"uncontended overhead <= 0.15x redis-cli wrapper's ({ours * 1000:.2f} vs {r_over * 1000:.2f} ms)", ours <= 0.15 * r_over))
    ours_c = c["redlock-run"]
    if "flock" in c:
        targets.append((f"contended total <= 1.1x flock's ({ours_c['total']:.2f} vs {c['flock']['total']:.2f} s)", ours_c["total"] <= 1.1 * c["flock"]["total"]))
    targets.append((f"hand-over median <= 2 ms ({ours_c['median'] * 1000:.2f} ms)", ours_c["median"] <= 0.002))
    targets.append((f"hand-over p99 <= 20 ms ({ours_c['p99'] * 1000:.2f} ms)", ours_c["p99"] <= 0.020))
    if r.get("redlock-run"):
        targets.append((f"peak RSS <= 4 MB ({r['redlock-run'] / 1024:.1f} MB)", r["redlock-run"] <= 4096))
    r0, r1 = o["rates"][0][0], o["rates"][1][0]
    flat = r1 <= max(1.25 * r0, r0 + 20)
    targets.append((f"waiting load flat ({r0:.0f} -> {r1:.0f} EVAL/s for {waiters} waiters)", flat))
    bound = 1.2 * (ideal_q + waiters * ours_c["median"])
    targets.append((
        f"{waiters} waiters drain <= 1.2x ({waiters} x 5 ms + {waiters} x contended hand-over median) "
        f"({o['total']:.2f} vs {bound:.2f} s)", o["total"] <= bound))
    no_overlap = all(x["overlaps"] == 0 for x in list(c.values()) + list(w.values()))
    targets.append(("no two sections overlapped", no_overlap))
    for text, ok in targets:
        print(f"   [{'met' if ok else 'MISSED'}] {text}")
    if tools.failures:
        print()
        print("Failures: " + "; ".join(sorted(set(tools.failures))[:10]))


if __name__ == "__main__":
    sys.exit(main())
