#!/usr/bin/env python3
"""Benchmark redlock-run against plain `true`, flock(1) and a redis-cli wrapper.

Started by scripts/bench.sh, which builds the binaries first: "redlock-run" is
the one given by --binary, the static musl binary that the .deb and the
tarball carry; --glibc-binary (`cargo build --release`, linked to glibc)
adds a row to section 1 only. Starts its own redis-servers on free loopback
ports in a temp dir, and prints one table:

  1. uncontended `X -- true`: median and p95 wall time, overhead over `true`
     (and the glibc build's, when given);
  2. contended: workers x runs of a short section on one key: total wall time,
     hand-over gaps (end of one section to start of the next), overlaps;
  3. peak RSS (VmHWM) of the wrapper while its child runs;
  4. many waiters queued on one key: Redis commands per second while they
     wait, and the time to drain the queue;
  5. the uncontended overhead with thousands of extra idle processes on the
     machine (started and killed by the bench), against without them;
  6. other topologies (a 5-node Redlock quorum, Sentinel, Cluster) and the
     observability options, each against the plain single-node URL;
  7-9. fleet scale (bench_fleet.py);
  10. each lock protocol (scripts, transactions, native compare-and-set):
     round trips per acquire, refresh and release, uncontended time and
     hand-over (bench_protocols.py; alone with `--protocols`);

then the targets of the current issue, each [met] or [MISSED] (and, marked
[info], the glibc build's overhead, which is not one of them).

`--phases` (scripts/phases.sh) instead traces a few uncontended runs with
strace and prints where the time goes, phase by phase (for the glibc build
too, side by side, when given), and how many Redis commands one run sends
(redis-cli MONITOR).

Only the Python standard library is used. Timing is never asserted: the exit
status is non-zero only if a wrapped run failed or two sections overlapped.
`--quick` exists so CI can check the bench still runs. `--focus N` measures
only issue 39's figures against flock over N interleaved rounds
(bench_focus.py); `--ab N --before B` what this build gains on B, uncontended,
in N shuffled rounds of both (one lever's worth, drift cancelled); `--json FILE`
keeps the raw results of any mode
(bench_render.py makes docs/benchmarks.md's side-by-side table of them).
"""

import argparse
import json
import math
import os
import platform
import random
import re
import resource
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_fleet as fleet  # noqa: E402  (sections 7-9)
import bench_focus as focus  # noqa: E402  (--focus: issue 39's figures)
import bench_protocols as protocols  # noqa: E402  (section 10, --protocols)

ROOT = Path(__file__).resolve().parent.parent
TRUE = shutil.which("true") or "/bin/true"
MUSL = "x86_64-unknown-linux-musl"
# The row of the --glibc-binary in section 1 (and a column of --phases).
GLIBC = "glibc build"

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

# What a binary says (exit 2) when it does not know a URL scheme or option
# yet: such rows print "n/a (not supported by this binary)", not a failure.
UNSUPPORTED = re.compile(
    r"expected redis://|unknown scheme|unsupported scheme|unexpected argument|"
    r"unrecognized (option|argument)|unknown (option|argument)",
    re.IGNORECASE,
)
NOT_SUPPORTED = "n/a (not supported by this binary)"


class Stop(Exception):
    """SIGTERM or SIGHUP: unwind through every `finally` (idle processes,
    redis-servers), like Ctrl-C does."""


# ---------------------------------------------------------------------------
# Redis servers and topologies: scripts/benchlib.py

from benchlib import (  # noqa: E402
    Redis, SetupError, Servers, build_c, free_port, start_cluster, start_quorum, start_sentinel,
    start_without_scripts, wait_for,
)


def ping(s):
    s.sendall(b"PING\r\n")
    got = b""
    while not got.endswith(b"\r\n"):
        got += s.recv(64)


def ping_rtt(port, count):
    """Medians of `count` raw PINGs: (a round trip on an open loopback
    connection, connect + PING + close)."""
    rtt, fresh = [], []
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(count):
            start = time.perf_counter()
            ping(s)
            rtt.append(time.perf_counter() - start)
    for _ in range(count // 4):
        start = time.perf_counter()
        with socket.create_connection(("127.0.0.1", port)) as s:
            ping(s)
        fresh.append(time.perf_counter() - start)
    return statistics.median(rtt), statistics.median(fresh)


# ---------------------------------------------------------------------------
# Running the wrappers


def spawn(argv, stdout_null=True, stderr_path=None, setpgroup=None):
    actions = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)]
    if stdout_null:
        actions.append((os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0))
    if stderr_path is not None:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        actions.append((os.POSIX_SPAWN_OPEN, 2, str(stderr_path), flags, 0o644))
    kw = {} if setpgroup is None else {"setpgroup": setpgroup}
    return os.posix_spawn(argv[0], argv, os.environ, file_actions=actions, **kw)


def reap(pid):
    """Wait for pid; its exit code (negative: killed by a signal)."""
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def pct(xs, p):
    """Nearest-rank percentile."""
    s = sorted(xs)
    return s[max(0, math.ceil(p / 100 * len(s)) - 1)]


class Tools:
    """The wrappers under test, by name: "true", "flock", "redis-cli", and
    redlock-run variants ("redlock-run" is the plain single-node URL; the
    topology and observability rows add more, see `variants`). GLIBC is the
    plain single-node URL run by the glibc build, when one is given."""

    def __init__(self, tmp: Path, redis: Redis, binary: Path, glibc=None):
        self.tmp = tmp
        self.url = f"redis://127.0.0.1:{redis.port}"
        self.binary = installed(tmp, binary, "redlock-run")
        self.glibc = installed(tmp, glibc, "redlock-run-glibc") if glibc else None
        self.failures = []
        self.variants = {"redlock-run": ["--redis", self.url]}
        # Rows run by another binary (--focus --before B: "before").
        self.others = {}
        if self.glibc:
            self.variants[GLIBC] = ["--redis", self.url]
        self.wrapper = None
        if shutil.which("redis-cli"):
            self.wrapper = tmp / "redis-cli-lock"
            self.wrapper.write_text(REDIS_CLI_WRAPPER.replace("@PORT@", str(redis.port)))
            self.wrapper.chmod(0o755)
        self.flock = shutil.which("flock")
        # --focus: [DESIGN_FLOOR_C's binary, port, cgroup parent or "-"].
        self.floor = None

    def names(self, with_true=False, with_glibc=False):
        names = ["true"] if with_true else []
        names += ["flock"] if self.flock else []
        names += ["redis-cli"] if self.wrapper else []
        return names + ["redlock-run"] + ([GLIBC] if with_glibc and self.glibc else [])

    def argv(self, name, key, command):
        if name == "true":
            return command
        if name == "flock":
            return [self.flock, str(self.tmp / f"{key}.flock")] + command
        if name == "redis-cli":
            return [str(self.wrapper), f"cli:{key}"] + command
        if name == focus.FLOOR:
            binary, port, parent = self.floor
            return [binary, port, key, parent] + command
        binary = self.glibc if name == GLIBC else self.others.get(name, self.binary)
        return [binary, *self.variants[name], "--key", key, "--"] + command

    def stderr_log(self, name):
        """redlock-run's stderr goes to a file (JSON logs would flood the
        table); the tail of it is quoted if a run fails."""
        return self.tmp / f"stderr-{name.replace(' ', '-')}.log" if name in self.variants else None

    def spawn(self, name, key, command, stdout_null=True):
        return spawn(self.argv(name, key, command), stdout_null, self.stderr_log(name))

    def run(self, name, key, command):
        """Run to completion, record a failure; the wall time in seconds."""
        start = time.perf_counter()
        code = reap(self.spawn(name, key, command))
        elapsed = time.perf_counter() - start
        self.check(name, code)
        return elapsed

    def check(self, name, code):
        if code != 0:
            why = ""
            log = self.stderr_log(name)
            if log is not None and log.exists():
                lines = log.read_text(errors="replace").strip().splitlines()
                why = f" ({lines[-1][:160]})" if lines else ""
            self.failures.append(f"{name} exited {code}{why}")

    def release_warnings(self):
        """Failures for every release warning in the runs' stderr (a
        release that found another token, an expired lock, an error): none
        is expected here. Busy answers (exit 75) are, and are not counted."""
        said = re.compile(r'at release|could not release|"event":"release_failed"')
        found = []
        for name in self.variants:
            log = self.stderr_log(name)
            if log is None or not log.exists():
                continue
            lines = [ln for ln in log.read_text(errors="replace").splitlines() if said.search(ln)]
            if lines:
                found.append(f"{name}: {len(lines)} release warning(s), e.g. {lines[0][:160]}")
        return found

    def probe(self, name):
        """Run `name -- true` once: "ok", NOT_SUPPORTED, or a failure."""
        got = subprocess.run(self.argv(name, "probe", [TRUE]), stdin=subprocess.DEVNULL,
                             capture_output=True, text=True, timeout=60)
        if got.returncode == 0:
            return "ok"
        if got.returncode == 2 and UNSUPPORTED.search(got.stderr):
            return NOT_SUPPORTED
        msg = got.stderr.strip().splitlines()[-1:] or [""]
        self.failures.append(f"{name}: `-- true` exited {got.returncode} ({msg[0][:160]})")
        return f"n/a (failed: exit {got.returncode})"


def installed(tmp, binary, name):
    """A copy of `binary` in `tmp`, as an install copies it: every row
    runs a copy. Run from where the linker wrote it, the same binary was
    0.1-0.25 ms slower to start than a copy of itself in each of 7 rounds
    (an A/A run of --focus with --before the copy), so a row run from
    target/ lost to one run from elsewhere."""
    copy = Path(tmp) / name
    shutil.copyfile(binary, copy)
    copy.chmod(0o755)
    return str(copy)


def time_runs(tools, names, rounds, key="uncontended"):
    """Wall times of `X -- true`, interleaved in a rotating order so that
    drift on a shared machine hits every row alike. Each row has a key of
    its own: one node's runs push that node's fence counter to its clock,
    and a five-node run of the same key would then raise the others' to
    it every time (a round trip the row would not otherwise have)."""
    times = {n: [] for n in names}
    for i in range(rounds):
        for j in range(len(names)):
            name = names[(i + j) % len(names)]
            times[name].append(tools.run(name, f"{key}-{re.sub(r'[^A-Za-z0-9]+', '-', name)}", [TRUE]))
    return times


def summarize(times):
    """{name: (median, p95)}, and overheads over "true" when it is there."""
    return {n: (statistics.median(t), pct(t, 95)) for n, t in times.items() if t}


def overhead(stats, name):
    """(median, p95) of `name` minus those of `true`."""
    return stats[name][0] - stats["true"][0], stats[name][1] - stats["true"][1]


# ---------------------------------------------------------------------------
# Sections 1-4


def uncontended(tools, rounds):
    return summarize(time_runs(tools, tools.names(with_true=True, with_glibc=True), rounds))


def sections(log: Path):
    """(start, end) pairs in seconds, by start; gaps between them; overlaps."""
    text = log.read_text() if log.exists() else ""
    spans = sorted(tuple(int(x) / 1e9 for x in line.split()) for line in text.splitlines())
    gaps = [b[0] - a[1] for a, b in zip(spans, spans[1:])]
    overlaps = sum(1 for g in gaps if g < 0)
    return spans, gaps, overlaps


def contended(tools, section, workers, runs, section_ms, names=None, tag="contended"):
    results = {}
    for name in names or tools.names():
        log = tools.tmp / f"{tag}-{name.replace(' ', '-')}.log"
        command = [section, str(log), str(section_ms * 1000)]

        def worker():
            for _ in range(runs):
                tools.run(name, tag, command)

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
        if overlaps:
            tools.failures.append(f"{name}: {overlaps} sections overlapped ({tag})")
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
        pid = tools.spawn(name, "rss", child)
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
        tools.check(name, reap(pid))
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
    holder = tools.spawn(name, key, hold)
    while not held.exists():
        time.sleep(0.005)
    command = [section, str(log), str(section_ms * 1000)]
    pids = [tools.spawn(name, key, command) for _ in range(waiters)]
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
        rates.append((redis.calls(redis.SCRIPTS) / elapsed, redis.calls() / elapsed))

    redis.cmd("CONFIG", "RESETSTAT")
    released = time.monotonic()
    go.touch()
    tools.check("holder", reap(holder))
    for pid in pids:
        tools.check("waiter", reap(pid))
    done = time.monotonic()
    drain_rate = (redis.calls(redis.SCRIPTS) / (done - released), redis.calls() / (done - released))
    spans, gaps, overlaps = sections(log)
    if len(spans) != waiters:
        tools.failures.append(f"queue: {len(spans)} sections of {waiters}")
    if overlaps:
        tools.failures.append(f"{name}: {overlaps} sections overlapped (queue)")
    return dict(
        queued=subscribed,
        rates=rates,
        total=spans[-1][1] - released if spans else done - released,
        drain_rate=drain_rate,
        median=statistics.median(gaps) if gaps else 0.0,
        p99=pct(gaps, 99) if gaps else 0.0,
        overlaps=overlaps,
    )


# ---------------------------------------------------------------------------
# Section 5: process count


def process_room():
    """How many more processes this machine takes, keeping 1,000 spare for
    everything else: the smallest of pid_max, threads-max and ulimit -u,
    minus the tasks that exist now. And the numbers, for the report."""
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    threads_max = int(Path("/proc/sys/kernel/threads-max").read_text())
    tasks = int(Path("/proc/loadavg").read_text().split()[3].split("/")[1])
    nproc, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    limits = [pid_max, threads_max] + ([] if nproc == resource.RLIM_INFINITY else [nproc])
    shown = "unlimited" if nproc == resource.RLIM_INFINITY else str(nproc)
    about = f"pid_max {pid_max}, threads-max {threads_max}, ulimit -u {shown}, {tasks} tasks before"
    return min(limits) - tasks - 1000, about


class IdleProcesses:
    """`sleep` processes in a process group of their own. `stop()` kills
    them all (by group and one by one) and reaps them; call it in a
    `finally`. They sleep 15 minutes at most, should the bench be SIGKILLed."""

    def __init__(self, count):
        room, self.about = process_room()
        self.count = max(0, min(count, room))
        self.pids = []
        self.pgid = None
        self.sleep = shutil.which("sleep") or "/bin/sleep"

    def start(self):
        for _ in range(self.count):
            pid = spawn([self.sleep, "900"], setpgroup=0 if self.pgid is None else self.pgid)
            self.pids.append(pid)
            if self.pgid is None:
                self.pgid = pid
        wait_for(f"{self.count} sleep processes", self._all_asleep, timeout=120)

    def _all_asleep(self):
        """Every one exec'd sleep and sleeps (no exec or start-up in flight)."""
        for pid in self.pids:
            stat = Path(f"/proc/{pid}/stat").read_text()
            if not stat.startswith(f"{pid} (sleep) S"):
                return False
        return True

    def stop(self):
        if self.pgid is not None:
            try:
                os.killpg(self.pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in self.pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in self.pids:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        self.pids = []
        self.pgid = None


def process_count(tools, rounds, count):
    """Uncontended runs without and with `count` extra idle processes, in
    ABBA blocks (without, with, with, without) so that drift cancels; the
    rows are interleaved inside each block."""
    names = ["true"] + (["flock"] if tools.flock else []) + ["redlock-run"]
    half = max(1, rounds // 2)
    without = time_runs(tools, names, half)
    idle = IdleProcesses(count)
    try:
        start = time.monotonic()
        idle.start()
        spawn_s = time.monotonic() - start
        extra = idle.count
        with_ = time_runs(tools, names, 2 * half)
    finally:
        idle.stop()
    for name, t in time_runs(tools, names, half).items():
        without[name] += t
    return dict(count=extra, wanted=count, about=idle.about, spawn_s=spawn_s,
                rounds=2 * half, without=summarize(without), with_=summarize(with_))


# ---------------------------------------------------------------------------
# Section 6: topologies and observability

TOPOLOGIES = [
    ("redlock 5 nodes", start_quorum),
    ("no scripts", start_without_scripts),
    ("sentinel", start_sentinel),
    ("cluster", start_cluster),
]
OBSERVED = "json+metrics"


def set_up_variants(tools, servers, topologies):
    """Start the servers of each topology and probe the binary with it:
    {row name: "ok" | "n/a (...)"}; the "ok" ones are in tools.variants."""
    status = {}
    for name, start in TOPOLOGIES if topologies else []:
        try:
            tools.variants[name] = start(servers)
        except (SetupError, OSError, subprocess.SubprocessError) as e:
            status[name] = f"n/a (setup failed: {e})"
            continue
        status[name] = tools.probe(name)
    metrics = tools.tmp / "metrics"
    metrics.mkdir()
    tools.variants[OBSERVED] = ["--redis", tools.url, "--log-format", "json",
                                "--metrics-textfile", str(metrics)]
    status[OBSERVED] = tools.probe(OBSERVED)
    return status


def variants(tools, servers, section, rounds, workers, runs, topologies):
    setup_start = time.monotonic()
    status = set_up_variants(tools, servers, topologies)
    setup_s = time.monotonic() - setup_start
    ok = [n for n, s in status.items() if s == "ok"]
    stats = summarize(time_runs(tools, ["true", "redlock-run"] + ok, rounds, key="variants"))
    handover_rows = ["redlock-run"] + [n for n in ok if n in ("sentinel", "cluster", "no scripts")]
    handover = contended(tools, section, workers, runs, 10, handover_rows, tag="handover")
    rtt, fresh = ping_rtt(int(tools.url.rsplit(":", 1)[1]), 2000)
    return dict(status=status, stats=stats, handover=handover, rtt=rtt, fresh=fresh,
                rounds=rounds, setup_s=setup_s)


# ---------------------------------------------------------------------------
# --phases: where one uncontended run spends its time

TRACE_LINE = re.compile(r"^(\d+)\s+(\d+\.\d+)\s+(.*)$")
CALL_START = re.compile(r"^(\w+)\(")
RESUMED = re.compile(r"^<\.\.\. (\w+) resumed>(.*)$")
DURATION = re.compile(r"<(\d+\.\d+)>\s*$")
RETURNED = re.compile(r"\)\s+= (\S+)")
FIRST_ARG = re.compile(r"^\w+\((\d+)")
SCRIPT_CALL = re.compile(r"\\r\\n(EVAL|EVALSHA|EVAL_RO|EVALSHA_RO|FCALL|FCALL_RO)\\r\\n", re.IGNORECASE)
SENDS = {"write", "writev", "sendto", "sendmsg", "sendmmsg"}
RECVS = {"read", "readv", "recvfrom", "recvmsg", "recvmmsg"}
CLONES = {"clone", "clone3", "fork", "vfork"}
OPENS = {"open", "openat", "openat2"}


class Call:
    __slots__ = ("pid", "name", "start", "end", "text", "ret")

    def __init__(self, pid, name, start, end, text):
        self.pid, self.name, self.start, self.end, self.text = pid, name, start, end, text
        # strace pads short calls to a column: "fork()          = 8162".
        ret = RETURNED.findall(text)
        try:
            self.ret = int(ret[-1], 0) if ret else None
        except ValueError:
            self.ret = None

    def fd(self):
        m = FIRST_ARG.match(self.text)
        return int(m.group(1)) if m else None


def parse_strace(text):
    """strace -f -ttt -T output: calls (unfinished/resumed pairs joined),
    by start; and {pid: time of its "+++ exited"/"+++ killed" line}."""
    calls, exits, pending = [], {}, {}
    for line in text.splitlines():
        m = TRACE_LINE.match(line)
        if not m:
            continue
        pid, ts, rest = int(m.group(1)), float(m.group(2)), m.group(3)
        if rest.startswith("+++"):
            exits[pid] = ts
            continue
        resumed = RESUMED.match(rest)
        if resumed:
            if pid in pending:
                name, start, head = pending.pop(pid)
                calls.append(Call(pid, name, start, ts, head + resumed.group(2)))
            continue
        c = CALL_START.match(rest)
        if not c:
            continue   # signals ("--- SIGCHLD ...")
        if rest.endswith("<unfinished ...>"):
            pending[pid] = (c.group(1), ts, rest[: -len("<unfinished ...>")])
            continue
        d = DURATION.search(rest)
        calls.append(Call(pid, c.group(1), ts, ts + float(d.group(1)) if d else ts, rest))
    calls.sort(key=lambda c: c.start)
    return calls, exits


def first(calls, cond):
    return next((c for c in calls if cond(c)), None)


def phase_marks(calls, exits, port):
    """The moments that split one run into phases (None where not seen), and
    the calls redlock-run itself made (its threads, its child before exec)."""
    main = calls[0].pid
    threads = {c.ret for c in calls if c.name in CLONES and "CLONE_THREAD" in c.text and c.ret}
    fork = first(calls, lambda c: c.pid in threads | {main} and c.name in CLONES
                 and "CLONE_THREAD" not in c.text and c.ret)
    # Round 3 forks a keeper, which clones COMMAND; before, the wrapper
    # cloned COMMAND itself. The keeper's calls are ours too.
    keeper = fork.ret if fork else None
    inner = first(calls, lambda c: c.pid == keeper and c.name in CLONES
                  and "CLONE_THREAD" not in c.text and c.ret)
    child = inner.ret if inner else keeper
    exec_ = first(calls, lambda c: c.pid == child and c.name == "execve" and c.ret == 0)
    exec_end = exec_.end if exec_ else math.inf
    kept = {keeper} - {child, None}
    ours = [c for c in calls if c.pid in threads | {main} | kept
            or (c.pid == child and c.start < exec_end)]

    m = {"exec": calls[0].start, "exit": exits.get(main)}
    conns = [c for c in ours if c.name == "connect" and f"htons({port})" in c.text]
    fds = {c.fd() for c in conns}
    if conns:
        sock = [c for c in ours if c.name == "socket" and c.ret == conns[0].fd() and c.start <= conns[0].start]
        m["connect"] = (sock[-1] if sock else conns[0]).start
    # main(): after the Rust runtime's start-up (its SIGBUS handler or
    # alternate signal stack are the last things it sets up).
    before = [c for c in ours if c.pid == main and c.start < m.get("connect", math.inf)]
    init = [i for i, c in enumerate(before)
            if c.text.startswith(("rt_sigaction(SIGBUS, {", "sigaltstack({ss_sp=0x"))]
    if init and init[-1] + 1 < len(before):
        m["main"] = before[init[-1] + 1].start
    elif len(before) > 1:
        m["main"] = before[1].start   # no Rust runtime: main right after execve

    scripts = [c for c in ours if c.name in SENDS and c.fd() in fds and SCRIPT_CALL.search(c.text)]
    replies = [c for c in ours if c.name in RECVS and c.fd() in fds and (c.ret or 0) > 0]
    if scripts:
        m["acquire"] = scripts[0].start
        if fork:
            got = [r for r in replies if r.start >= scripts[0].start and r.end <= fork.start]
            m["acquired"] = got[-1].end if got else None
    if fork:
        m["fork"] = fork.start
        m["child exec"] = exec_.end if exec_ else None
        m["child exit"] = exits.get(child)
    if m.get("child exit"):
        done = m["child exit"]
        # The wrapper woken by the news (a wait, or a poll of the keeper's
        # pipe): its first call to end after the child's.
        woken = first(sorted(ours, key=lambda c: c.end), lambda c: c.pid == main and c.end >= done)
        m["reaped"] = woken.end if woken else None
        release = first(scripts, lambda c: c.start >= done)
        if release:
            m["release"] = release.start
            reply = first(replies, lambda r: r.start >= release.start)
            m["released"] = reply.end if reply else None
    return m, ours, threads, fork


PHASES = [
    ("exec to main (ld.so, runtime init)", "exec", "main"),
    ("main to connect (arguments, config)", "main", "connect"),
    ("connect (socket to first EVAL sent)", "connect", "acquire"),
    ("acquire EVAL round trip", "acquire", "acquired"),
    ("acquired to fork (pgrp, tty, pipes)", "acquired", "fork"),
    ("fork (keeper) + clone + exec", "fork", "child exec"),
    ("the child's run (`true`)", "child exec", "child exit"),
    ("its exit to the wrapper woken", "child exit", "reaped"),
    ("woken to release (keeper, scans)", "reaped", "release"),
    ("release EVAL round trip", "release", "released"),
    ("exit (release reply to process gone)", "released", "exit"),
]


def trace_once(tools, port, out: Path, name="redlock-run"):
    """One uncontended run of `name` under strace: its phases (seconds, None
    when not seen), syscalls per phase, and the counts."""
    argv = [shutil.which("strace"), "-f", "-ttt", "-T", "-s", "48", "-o", str(out)] + tools.argv(name, "phases", [TRUE])
    code = reap(spawn(argv, stderr_path=tools.tmp / "strace.stderr"))
    tools.check(f"strace {name}", code)
    calls, exits = parse_strace(out.read_text(errors="replace"))
    m, ours, threads, fork = phase_marks(calls, exits, port)
    phases = {}
    for label, a, b in PHASES:
        if m.get(a) is not None and m.get(b) is not None:
            n = sum(1 for c in ours if m[a] <= c.start < m[b])
            phases[label] = (m[b] - m[a], n)
        else:
            phases[label] = (None, None)
    if m.get("exit") is not None:
        phases["total"] = (m["exit"] - m["exec"], len(ours))
    opens = [c for c in ours if c.name in OPENS]
    proc = [c for c in opens if '"/proc' in c.text]
    counts = {
        "threads created (clone with CLONE_THREAD)": len(threads),
        "child processes (other clones/forks)": sum(1 for c in ours if c.name in CLONES and "CLONE_THREAD" not in c.text),
        "/proc opens": len(proc),
        "opens of /etc/nsswitch.conf": sum(1 for c in opens if '"/etc/nsswitch.conf"' in c.text),
        "opens of /etc/passwd": sum(1 for c in opens if '"/etc/passwd"' in c.text),
        "opens of /etc/group": sum(1 for c in opens if '"/etc/group"' in c.text),
        "connects to the nscd socket": sum(1 for c in ours if c.name == "connect" and "nscd" in c.text),
        "syscalls by redlock-run (its child after exec not counted)": len(ours),
    }
    paths = sorted({re.search(r'"(/proc[^"]*)"', c.text).group(1) for c in proc})
    return phases, counts, paths


def monitor_run(tools, redis):
    """Redis commands one uncontended run sends (and runs inside scripts),
    as redis-cli MONITOR shows them: (Counter of round trips, Counter of
    script calls)."""
    out = tools.tmp / "monitor.txt"
    with open(out, "wb") as f:
        mon = subprocess.Popen(["redis-cli", "-p", str(redis.port), "MONITOR"],
                               stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.DEVNULL)
    try:
        wait_for("redis-cli MONITOR", lambda: out.read_text().startswith("OK"), timeout=10)
        tools.run("redlock-run", "monitor", [TRUE])
        time.sleep(0.3)
    finally:
        mon.terminate()
        mon.wait()
    sent, scripted = Counter(), Counter()
    for line in out.read_text(errors="replace").splitlines()[1:]:
        m = re.match(r'^[\d.]+ \[\d+ ([^\]]+)\] "([^"]+)"', line)
        if m:
            (scripted if m.group(1) == "lua" else sent)[m.group(2).upper()] += 1
    return sent, scripted


def phases_main(args):
    if not shutil.which("strace"):
        sys.exit("bench: strace not found (apt-get install strace)")
    with tempfile.TemporaryDirectory(prefix="redlock-phases") as tmp:
        tmp = Path(tmp)
        servers = Servers(tmp)
        try:
            redis = servers.start("redis")
            tools = Tools(tmp, redis, Path(args.binary), args.glibc_binary)
            names = ["redlock-run"] + ([GLIBC] if tools.glibc else [])
            untraced = summarize(time_runs(tools, ["true"] + names, 50))
            traces = {name: [] for name in names}
            for i in range(args.traces):
                for name in names:
                    out = tmp / f"trace{i}-{name.replace(' ', '-')}.txt"
                    traces[name].append(trace_once(tools, redis.port, out, name))
            sent, scripted = monitor_run(tools, redis)
        finally:
            servers.stop()
    print(f"redlock-run phases, {time.strftime('%Y-%m-%d')}: {machine()}")
    print(binaries_header(args))
    print_phases(args.traces, untraced, traces, sent, scripted)
    if tools.failures:
        print("\nFailures: " + "; ".join(sorted(set(tools.failures))[:10]))
    return 1 if tools.failures else 0


def print_phases(n, untraced, traces, sent, scripted):
    """The phase table: a column (ms, syscalls) per traced binary."""
    names = list(traces)
    runs = "; ".join(f"{name} {untraced[name][0] * 1000:.2f} ms median, "
                     f"{overhead(untraced, name)[0] * 1000:.2f} ms over `true`" for name in names)
    print(f"One uncontended `X -- true` under strace -f -ttt -T, median of {n} traced runs each.")
    print(f"strace slows every syscall, so compare phases with each other, not with the untraced")
    print(f"runs (50 each): {runs}.")
    print()
    print(f"   {'':<40}" + "".join(f" {name:>17}" for name in names))
    print(f"   {'phase':<40}" + f" {'ms':>7} {'syscalls':>9}" * len(names))
    for label in [p[0] for p in PHASES] + ["total"]:
        row = f"   {label:<40}"
        for name in names:
            got = [t[0][label] for t in traces[name] if t[0].get(label, (None,))[0] is not None]
            if got:
                ms_ = statistics.median(g[0] for g in got) * 1000
                calls = statistics.median(g[1] for g in got)
                row += f" {ms_:>7.2f} {calls:>9.0f}"
            else:
                row += f" {'-':>7} {'-':>9}"
        print(row)
    print()
    first_ = traces[names[0]]
    for label in first_[0][1]:
        print(f"   {label:<58}" + "".join(
            f" {statistics.median(t[1][label] for t in traces[name]):>5.0f}" for name in names))
    if len(names) > 1:
        print(f"   (columns: {', '.join(names)})")
    if first_[0][2]:
        print(f"   (/proc paths of {names[0]}: {', '.join(first_[0][2])})")
    print()
    rt = ", ".join(f"{k} x{v}" for k, v in sent.most_common())
    sc = ", ".join(f"{k} x{v}" for k, v in scripted.most_common())
    print(f"   Redis commands per run (MONITOR): {sum(sent.values())} sent ({rt or '-'}); "
          f"{sum(scripted.values())} run inside scripts ({sc or '-'})")


# ---------------------------------------------------------------------------
# The report


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


def linkage(path):
    """"statically linked" or "dynamically linked" (the ELF names an
    interpreter, ld.so, in a PT_INTERP program header), from the file."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if head[:4] != b"\x7fELF" or head[4] != 2:
                return "not a 64-bit ELF"
            order = "<" if head[5] == 1 else ">"
            (phoff,) = struct.unpack_from(order + "Q", head, 32)
            phentsize, phnum = struct.unpack_from(order + "HH", head, 54)
            f.seek(phoff)
            table = f.read(phentsize * phnum)
    except (OSError, struct.error) as e:
        return f"unreadable: {e}"
    types = {struct.unpack_from(order + "I", table, i * phentsize)[0] for i in range(phnum)}
    return "dynamically linked" if 3 in types else "statically linked"   # 3 = PT_INTERP


def shown_path(path):
    """`path` relative to the repository when it is inside it."""
    p = Path(path).resolve()
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)


def binaries_header(args):
    """Which binary "redlock-run" is (and the glibc build, when given)."""
    how = linkage(args.binary)
    if how == "statically linked":
        what = "the static musl binary as released (.deb, tarball)"
    else:
        what = f"a build that is {how}, NOT the static binary that is released"
    lines = [f"redlock-run = {what}: {shown_path(args.binary)}"]
    if args.glibc_binary:
        where = "the second column" if args.phases else "a row of section 1 only"
        lines.append(f"{GLIBC} = `cargo build --release`, {linkage(args.glibc_binary)}, {where}: "
                     f"{shown_path(args.glibc_binary)}")
    return "\n".join(lines)


def report_uncontended(rounds, u):
    base = u["true"][0]
    print(f"1. Uncontended `X -- true`, {rounds} runs each (interleaved)")
    print(f"   {'wrapper':<12} {'median':>9} {'p95':>9} {'overhead':>10} {'p95 overhead':>13}")
    for name, (med, p95) in u.items():
        over = "" if name == "true" else f"+{(med - base) * 1000:.2f} ms"
        over95 = "" if name == "true" else f"+{(p95 - u['true'][1]) * 1000:.2f} ms"
        print(f"   {name:<12} {med * 1000:>6.2f} ms {p95 * 1000:>6.2f} ms {over:>10} {over95:>13}")
    ours = u["redlock-run"][0] - base
    ratios = []
    if "flock" in u:
        ratios.append(f"{ours / max(u['flock'][0] - base, 1e-6):.2f}x flock's")
    if "redis-cli" in u:
        ratios.append(f"{ours / max(u['redis-cli'][0] - base, 1e-6):.3f}x the redis-cli wrapper's")
    if ratios:
        print(f"   redlock-run overhead = {', '.join(ratios)}")
    if GLIBC in u:
        theirs = u[GLIBC][0] - base
        vs_flock = f"{theirs / max(u['flock'][0] - base, 1e-6):.2f}x flock's, " if "flock" in u else ""
        print(f"   {GLIBC} overhead = {vs_flock}{(theirs - ours) * 1000:+.2f} ms over redlock-run's")
    print()


def handover_rows(c, indent="   "):
    """Rows of a contended test; vs flock when flock ran in it."""
    for name, x in c.items():
        vs_flock = f"{x['total'] / c['flock']['total']:.2f}x" if "flock" in c else "-"
        yield (
            f"{indent}{name:<16} {x['total']:>6.2f} s {vs_flock:>9} "
            f"{x['median'] * 1000:>14.2f} ms {x['p99'] * 1000:>6.2f} ms {x['overlaps']:>9}"
        )


def report_contended(workers, runs, c):
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


def report_rss(r):
    print("3. Peak RSS (VmHWM) of the wrapper process while its child runs")
    for name, kb in r.items():
        shown = "n/a" if kb is None else f"{kb / 1024:.1f} MB"
        what = " (the sh running the script)" if name == "redis-cli" else ""
        print(f"   {name:<12} {shown:>8}{what}")
    print()


def report_queue(waiters, idle, w):
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


def process_rises(p):
    """{name: (overhead without, overhead with)} of the median."""
    return {n: (overhead(p["without"], n)[0], overhead(p["with_"], n)[0])
            for n in p["with_"] if n != "true"}


def report_processes(p):
    short = f" (of {p['wanted']} asked: no room)" if p["count"] < p["wanted"] else ""
    print(f"5. Process count: uncontended `X -- true` without and with {p['count']} extra idle `sleep`")
    print(f"   processes{short}, {p['rounds']} runs each way (ABBA blocks, rows interleaved;")
    print(f"   {p['about']}; starting them took {p['spawn_s']:.1f} s)")
    print(f"   {'wrapper':<12} {'median w/o':>11} {'with':>9} {'overhead w/o':>13} {'with':>9} {'rise':>9}")
    for name, (a, b) in process_rises(p).items():
        print(
            f"   {name:<12} {p['without'][name][0] * 1000:>8.2f} ms {p['with_'][name][0] * 1000:>6.2f} ms "
            f"{a * 1000:>10.2f} ms {b * 1000:>6.2f} ms {(b - a) * 1000:>+6.2f} ms"
        )
    t = p["without"]["true"][0], p["with_"]["true"][0]
    print(f"   (`true` itself: {t[0] * 1000:.2f} ms without, {t[1] * 1000:.2f} ms with)")
    print()


def report_variants(v, workers, runs):
    st, stats, rtt = v["status"], v["stats"], v["rtt"]
    plain = overhead(stats, "redlock-run")[0]
    print(f"6. Topologies and observability: uncontended `redlock-run -- true`, {v['rounds']} runs each")
    print(f"   (interleaved), and hand-over in the {workers} x {runs} x 10 ms test; extra = per run, over the")
    print(f"   plain single-node URL. One loopback round trip (raw PING from Python on an open")
    print(f"   connection, median of 2000): {rtt * 1000:.3f} ms; connect + PING + close: {v['fresh'] * 1000:.3f} ms.")
    print(f"   Setting up the servers took {v['setup_s']:.1f} s.")
    print(f"   {'variant':<16} {'median':>9} {'p95':>9} {'overhead':>10} {'extra':>10} {'x plain':>8} {'hand-over median':>17} {'p99':>9}")
    rows = ["redlock-run"] + list(st)
    for name in rows:
        label = "plain (1 node)" if name == "redlock-run" else name
        if name != "redlock-run" and st[name] != "ok":
            print(f"   {label:<16} {st[name]}")
            continue
        med, p95 = stats[name]
        over = overhead(stats, name)[0]
        extra = "" if name == "redlock-run" else f"{(over - plain) * 1000:+.2f} ms"
        ratio = "" if name == "redlock-run" else f"{over / max(plain, 1e-6):.2f}x"
        h = v["handover"].get(name)
        hand = f"{h['median'] * 1000:>14.2f} ms {h['p99'] * 1000:>6.2f} ms" if h else f"{'-':>17} {'-':>9}"
        print(f"   {label:<16} {med * 1000:>6.2f} ms {p95 * 1000:>6.2f} ms {over * 1000:>+7.2f} ms {extra:>10} {ratio:>8} {hand}")
    for name in ("sentinel", "cluster"):
        if st.get(name) == "ok":
            extra = overhead(stats, name)[0] - plain
            hx = v["handover"][name]["median"] - v["handover"]["redlock-run"]["median"]
            print(f"   {name}: discovery costs {extra * 1000:+.2f} ms per uncontended run = {extra / rtt:.1f} round trips; "
                  f"hand-over {hx * 1000:+.2f} ms")
    print()


def targets(u, c, r, p, v, fan=None):
    """[(text, True/False/None/"info")]: None = not measurable with this
    binary; "info" = a number shown beside the targets, not one of them."""
    out = []
    ours, ours95 = overhead(u, "redlock-run")
    if "flock" in u:
        fl, fl95 = overhead(u, "flock")
        out.append((f"uncontended overhead median <= 1.5x flock's ({ours * 1000:.2f} vs {fl * 1000:.2f} ms = {ours / max(fl, 1e-6):.2f}x)", ours <= 1.5 * fl))
        out.append((f"uncontended overhead p95 <= 2x flock's ({ours95 * 1000:.2f} vs {fl95 * 1000:.2f} ms = {ours95 / max(fl95, 1e-6):.2f}x)", ours95 <= 2 * fl95))
    if GLIBC in u:
        theirs = overhead(u, GLIBC)[0]
        vs_flock = f" = {theirs / max(fl, 1e-6):.2f}x flock's" if "flock" in u else ""
        out.append((f"{GLIBC} (cargo build --release), not a target: uncontended overhead {theirs * 1000:.2f} ms{vs_flock}", "info"))
    rc = c["redlock-run"]
    if "flock" in c:
        fc = c["flock"]
        out.append((f"hand-over median <= 1.3x flock's ({rc['median'] * 1000:.2f} vs {fc['median'] * 1000:.2f} ms = {rc['median'] / fc['median']:.2f}x)", rc["median"] <= 1.3 * fc["median"]))
        out.append((f"hand-over p99 <= 3x flock's p99 ({rc['p99'] * 1000:.2f} vs {fc['p99'] * 1000:.2f} ms = {rc['p99'] / fc['p99']:.2f}x)", rc["p99"] <= 3 * fc["p99"]))
        out.append((f"contended total <= 1.05x flock's ({rc['total']:.3f} vs {fc['total']:.3f} s = {rc['total'] / fc['total']:.3f}x)", rc["total"] <= 1.05 * fc["total"]))
    rises = {n: b - a for n, (a, b) in process_rises(p).items()}
    others = "; ".join(f"{n} {x * 1000:+.2f} ms" for n, x in rises.items() if n != "redlock-run")
    out.append((f"with {p['count']} extra processes the overhead rises <= 0.1 ms (redlock-run {rises['redlock-run'] * 1000:+.2f} ms"
                f"{'; ' + others if others else ''})", rises["redlock-run"] <= 0.0001))
    if r.get("redlock-run"):
        out.append((f"peak RSS <= 4 MB ({r['redlock-run'] / 1024:.1f} MB)", r["redlock-run"] <= 4096))
    if v is None:
        out.append(("topology and observability rows (skipped: --no-topologies)", None))
    else:
        st, stats = v["status"], v["stats"]
        plain = overhead(stats, "redlock-run")[0]
        five = "redlock 5 nodes"
        if five in st:
            if st[five] == "ok":
                o = overhead(stats, five)[0]
                out.append((f"Redlock over 5 nodes overhead <= 1.2x single-node ({o * 1000:.2f} vs {plain * 1000:.2f} ms = {o / max(plain, 1e-6):.2f}x)", o <= 1.2 * plain))
                fl = (fan or {}).get("floor")
                if fl:
                    # Four more nodes' Redis work, done by a client that does
                    # nothing else (section 9), over the single-node run.
                    least = plain + fl["5 nodes"] - fl["1 node"]
                    out.append((f"the Redis work alone of four more nodes (+{(fl['5 nodes'] - fl['1 node']) * 1000:.2f} ms, section 9) "
                                f"puts the floor of that ratio at {least / max(plain, 1e-6):.2f}x on this machine", "info"))
            else:
                out.append((f"Redlock over 5 nodes overhead <= 1.2x single-node: {st[five]}", None))
        for name in ("sentinel", "cluster"):
            if name not in st:
                continue
            if st[name] == "ok":
                extra = overhead(stats, name)[0] - plain
                out.append((f"(informational) {name} discovery <= 1 round trip per run ({extra * 1000:+.2f} ms = {extra / v['rtt']:.1f} x {v['rtt'] * 1000:.3f} ms)", extra <= v["rtt"]))
            else:
                out.append((f"(informational) {name} discovery <= 1 round trip per run: {st[name]}", None))
        if st[OBSERVED] == "ok":
            extra = overhead(stats, OBSERVED)[0] - plain
            out.append((f"--log-format json --metrics-textfile at most 0.2 ms slower ({extra * 1000:+.2f} ms)", extra <= 0.0002))
        else:
            out.append((f"--log-format json --metrics-textfile at most 0.2 ms slower: {st[OBSERVED]}", None))
    return out


def report(args, params, u, c, r, w, p, v, f, pr, tools, elapsed):
    rounds, workers, runs, waiters, idle = params
    mode = "quick" if args.quick else "full"
    print(f"redlock-run bench ({mode}), {time.strftime('%Y-%m-%d')}: {machine()}")
    print(f"(load average {args.load:.2f} when it started)")
    print(binaries_header(args))
    print()
    report_uncontended(rounds, u)
    report_contended(workers, runs, c)
    report_rss(r)
    report_queue(waiters, idle, w)
    report_processes(p)
    if v is not None:
        report_variants(v, workers, runs)
    fleet.report_herd(f["herd"])
    fleet.report_holders(f["holders"])
    fleet.report_fanout(f["fanout"])
    protocols.report(pr)
    ours = w.get("redlock-run")
    if ours is not None:
        ours = dict(ours, waiters=waiters)
    print("Targets (issues 13 and 27), ratios against flock in this run" + (" (quick: not asserted)" if args.quick else "") + ":")
    for text, ok in targets(u, c, r, p, v, f["fanout"]) + fleet.fleet_targets(ours, f["herd"], f["holders"], f["fanout"]):
        mark = "info" if ok == "info" else "n/a" if ok is None else "met" if ok else "MISSED"
        print(f"   [{mark}] {text}")
    overlaps = [f for f in tools.failures if "overlapped" in f]
    print(f"   [{'met' if not overlaps else 'MISSED'}] no two sections overlapped")
    print(f"   [{'met' if not tools.failures else 'MISSED'}] every wrapped run succeeded")
    if tools.failures:
        print()
        print("Failures: " + "; ".join(sorted(set(tools.failures))[:10]))
    print()
    print(f"(the bench took {elapsed:.0f} s)")


# ---------------------------------------------------------------------------


def build_section(tmp: Path):
    section = tmp / "section"
    (tmp / "section.c").write_text(SECTION_C)
    subprocess.run(["cc", "-O2", "-o", str(section), str(tmp / "section.c")], check=True)
    return str(section)


def smoke(tools):
    for name in tools.names(with_glibc=True):
        code = reap(tools.spawn(name, "smoke", [TRUE]))
        if code != 0:
            sys.exit(f"bench: `{name} -- true` exited {code}; not measuring")


def floor_tool(tools):
    """The floor row's argv head: DESIGN_FLOOR_C built as redlock-run's static
    build is, with musl-gcc (else static with glibc, else dynamic, and said
    so), this bench's Redis, and the cgroup parent a run of ours would use.
    The libc matters here: glibc's start-up asks the CPU what it is (CPUID)
    dozens of times, and in a VM that traps each one costs microseconds (a
    static program that does nothing: 0.56 ms with glibc, 0.25 ms with musl
    on the 2-core VM of docs/benchmarks.md)."""
    tries = [("cc", ["-static"]), ("cc", [])]
    if shutil.which("musl-gcc"):
        tries.insert(0, ("musl-gcc", ["-static"]))
    for cc, flags in tries:
        try:
            binary = build_c(tools.tmp, "floor", focus.DESIGN_FLOOR_C, *flags, cc=cc)
            break
        except subprocess.CalledProcessError:
            continue
    else:
        raise SystemExit("bench: DESIGN_FLOOR_C did not build")
    if cc != "musl-gcc":
        how = "static with glibc" if flags else "dynamic"
        print(f"bench: DESIGN_FLOOR_C built {how} (no musl-gcc, or it failed), unlike "
              "redlock-run's static build", file=sys.stderr)
    parent = focus.cgroup_parent()
    if parent is None:
        print("bench: no writable cgroup v2 here: the floor row runs without one", file=sys.stderr)
    return [binary, tools.url.rsplit(":", 1)[1], parent or "-"]


def focus_main(args):
    """--focus N: issue 39's figures, N rounds (see bench_focus.py)."""
    params = (args.focus, 20 if args.quick else 100, 8, 5 if args.quick else 10)
    n, rounds, workers, runs = params
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="redlock-focus") as tmp:
        tmp = Path(tmp)
        section = build_section(tmp)
        servers = Servers(tmp)
        try:
            tools = Tools(tmp, servers.start("redis"), Path(args.binary))
            if args.before:
                tools.others[focus.BEFORE] = installed(tools.tmp, args.before, "redlock-run-before")
                tools.variants[focus.BEFORE] = list(tools.variants["redlock-run"])
            tools.floor = floor_tool(tools)
            smoke(tools)
            got = [focus.one_round(tools, section, rounds, workers, runs, i, time_runs, summarize, contended)
                   for i in range(n)]
            tools.failures += tools.release_warnings()
        finally:
            servers.stop()
    s = {n: focus.summary(got, n) for n in got[0]["overhead_ms"] if n not in ("flock", focus.FLOOR)}
    print(f"redlock-run bench (focus), {time.strftime('%Y-%m-%d')}: {machine()}")
    print(f"(load average {os.getloadavg()[0]:.2f} at the end)")
    print(binaries_header(args))
    if args.before:
        print(f"{focus.BEFORE} = {shown_path(args.before)}, measured in the same rounds")
    focus.report(got, params)
    if args.json:
        save_json(args, dict(kind="focus", params=params, rounds=got, summary=s,
                             targets={n: focus.targets(x, n) for n, x in s.items()}, failures=tools.failures))
    print(f"(the bench took {time.monotonic() - began:.0f} s)")
    if tools.failures:
        print("Failures: " + "; ".join(sorted(set(tools.failures))[:10]))
    return 1 if tools.failures else 0


def ab_main(args):
    """--ab N with --before B: what one change buys, uncontended. N rounds,
    each one `-k K -- true` of this build and one of B in a shuffled order;
    the median of the rounds' differences (B's minus ours) cancels the
    machine's drift, which moves each build's own median by more than a
    lever of a few percent buys. Each build runs from COPIES copies in
    turn: two copies of one binary differ by up to 60 us a run on this VM
    (where the kernel put each file's pages), a single copy's bias."""
    rng = random.Random(args.ab)
    with tempfile.TemporaryDirectory(prefix="redlock-ab") as tmp:
        servers = Servers(Path(tmp))
        try:
            tools = Tools(Path(tmp), servers.start("redis"), Path(args.binary))
            for i in range(COPIES):
                for name, binary in (("ours", args.binary), (focus.BEFORE, args.before)):
                    tools.others[f"{name}{i}"] = installed(tools.tmp, binary, f"redlock-run-{name}{i}")
                    tools.variants[f"{name}{i}"] = list(tools.variants["redlock-run"])
            smoke(tools)
            times = {name: [] for name in ("ours", focus.BEFORE)}
            for r in range(args.ab):
                names = ["ours", focus.BEFORE]
                rng.shuffle(names)
                for name in names:
                    times[name].append(tools.run(f"{name}{r % COPIES}", f"ab-{name}", [TRUE]))
            tools.failures += tools.release_warnings()
        finally:
            servers.stop()
    ours, theirs = times["ours"], times[focus.BEFORE]
    diffs = [b - a for a, b in zip(ours, theirs)]
    by_copy = [statistics.median(diffs[i::COPIES]) * 1e6 for i in range(COPIES)]
    print(f"Uncontended `-k K -- true`, {args.ab} rounds of both builds, each in a shuffled order, "
          f"each build from {COPIES} copies in turn:")
    print(f"   this build:  median {statistics.median(ours) * 1000:.3f} ms")
    print(f"   --before:    median {statistics.median(theirs) * 1000:.3f} ms")
    print(f"   --before minus this build, median of the rounds: {statistics.median(diffs) * 1e6:+.0f} us "
          f"(by copy: {', '.join(f'{d:+.0f}' for d in by_copy)})")
    for f in tools.failures:
        print(f"FAILED: {f}")
    if args.json:
        save_json(args, dict(kind="ab", rounds=args.ab, copies=COPIES, ours=ours, before=theirs))
    return 1 if tools.failures else 0


# --ab: copies of each build, run in turn.
COPIES = 4


def protocols_main(args):
    """--protocols: section 10 alone (see bench_protocols.py), of the
    --binary only (bench.sh's glibc build is not measured here)."""
    args.glibc_binary = None
    rounds = args.rounds or (40 if args.quick else 300)
    workers, runs = 8, 5 if args.quick else 10
    load = os.getloadavg()[0]
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="redlock-protocols") as tmp:
        tmp = Path(tmp)
        section = build_section(tmp)
        servers = Servers(tmp)
        try:
            tools = Tools(tmp, servers.start("redis"), Path(args.binary))
            smoke(tools)
            pr = protocols.measure(tools, servers, section, rounds, workers, runs,
                                   time_runs, summarize, contended)
            tools.failures += tools.release_warnings()
        finally:
            servers.stop()
    print(f"redlock-run bench (protocols), {time.strftime('%Y-%m-%d %H:%M')}: {machine()}")
    print(f"(load average {load:.2f} when it started, {os.getloadavg()[0]:.2f} at the end)")
    print(binaries_header(args))
    print()
    protocols.report(pr)
    if args.json:
        save_json(args, dict(kind="protocols", protocols=pr, load=[load, os.getloadavg()[0]],
                             failures=tools.failures))
    print(f"(the bench took {time.monotonic() - began:.0f} s)")
    if tools.failures:
        print("Failures: " + "; ".join(sorted(set(tools.failures))[:10]))
    return 1 if tools.failures else 0


def save_json(args, results):
    """The raw results as JSON (scripts/bench_render.py makes tables of it)."""
    results.update(date=time.strftime("%Y-%m-%d"), machine=machine(),
                   binary=shown_path(args.binary), linkage=linkage(args.binary))
    Path(args.json).write_text(json.dumps(results, indent=1, default=str) + "\n")


def on_signal(signum, frame):
    raise Stop(signal.Signals(signum).name)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer iterations, for CI (timing not asserted)")
    ap.add_argument("--binary", default=str(ROOT / "target" / MUSL / "release" / "redlock-run"),
                    help="the redlock-run measured everywhere: the static musl binary as released")
    ap.add_argument("--glibc-binary",
                    help="the glibc build (`cargo build --release`): a row of section 1 only (a column of --phases)")
    ap.add_argument("--idle", type=int, help="extra idle processes for section 5 (default 5000, quick 500)")
    ap.add_argument("--no-topologies", action="store_true", help="skip the 5-node, Sentinel and Cluster rows")
    ap.add_argument("--phases", action="store_true", help="per-phase strace breakdown of one run, instead of the bench")
    ap.add_argument("--traces", type=int, default=5, help="traced runs for --phases (median)")
    ap.add_argument("--focus", type=int, metavar="N",
                    help="only issue 39's figures against flock, N interleaved rounds (medians)")
    ap.add_argument("--before", metavar="BINARY",
                    help="with --focus: also measure BINARY (an earlier build), a row of its own in every round")
    ap.add_argument("--ab", type=int, metavar="N",
                    help="with --before: what this build gains on it uncontended, N shuffled rounds of both")
    ap.add_argument("--protocols", action="store_true",
                    help="only section 10: each lock protocol's round trips, uncontended time and hand-over")
    ap.add_argument("--rounds", type=int, metavar="N",
                    help="with --protocols: uncontended runs per row (default 300, quick 40)")
    ap.add_argument("--json", metavar="FILE", help="also write the raw results to FILE (JSON)")
    return ap.parse_args()


def main():
    args = parse_args()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    for tool in ("redis-server", "cc"):
        if not shutil.which(tool):
            sys.exit(f"bench: {tool} not found on PATH")
    for binary in filter(None, (args.binary, args.glibc_binary)):
        if not os.access(binary, os.X_OK):
            sys.exit(f"bench: {binary} is not an executable (scripts/bench.sh builds it)")
    if args.phases:
        return phases_main(args)
    if args.ab:
        if not args.before:
            sys.exit("bench: --ab needs --before BINARY")
        return ab_main(args)
    if args.focus:
        return focus_main(args)
    if args.protocols:
        return protocols_main(args)

    args.load = os.getloadavg()[0]
    q = args.quick
    params = (40, 8, 5, 50, 2.0) if q else (300, 8, 10, 1000, 4.0)
    herd_runs, holder_count = (100, 100) if q else (1000, 2000)
    rounds, workers, runs, waiters, idle = params
    idle_count = args.idle if args.idle is not None else (500 if q else 5000)
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="redlock-bench") as tmp:
        tmp = Path(tmp)
        section = build_section(tmp)
        servers = Servers(tmp)
        try:
            redis = servers.start("redis")
            tools = Tools(tmp, redis, Path(args.binary), args.glibc_binary)
            smoke(tools)
            u = uncontended(tools, rounds)
            c = contended(tools, section, workers, runs, 10)
            r = peak_rss(tools)
            w = {
                name: queue(tools, redis, section, waiters, idle, 5, name)
                for name in tools.names()
                if name != "redis-cli"
            }
            p = process_count(tools, rounds, idle_count)
            v = None
            if not args.no_topologies:
                v = variants(tools, servers, section, rounds // 2 if q else rounds, workers, runs, True)
            fleet.raise_nofile()
            gate = fleet.build_gate(tmp)
            f = dict(
                herd=fleet.herd(tools, redis, section, gate, herd_runs, sections),
                holders=fleet.holders(tools, redis, holder_count, 2.0 if q else 10.0, spawn, reap),
                fanout=fleet.fanout(tools, servers, section, rounds // 2 if q else rounds, workers, runs,
                                    0.001, free_port, time_runs, summarize, contended),
            )
            pr = protocols.measure(tools, servers, section, rounds, workers, runs,
                                   time_runs, summarize, contended)
            # Read while the logs are still there.
            tools.failures += tools.release_warnings()
        finally:
            servers.stop()
    report(args, params, u, c, r, w, p, v, f, pr, tools, time.monotonic() - began)
    if args.json:
        save_json(args, dict(kind="quick" if q else "full", params=params, uncontended=u, contended=c,
                             rss=r, queue=w, processes=p, variants=v, fleet=f, protocols=pr,
                             failures=tools.failures))
    return 1 if tools.failures else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (Stop, KeyboardInterrupt) as e:
        sys.exit(f"bench: stopped ({e or 'SIGINT'}); idle processes and servers cleaned up")
