"""Fleet-scale sections of the benchmark (scripts/bench.py imports this):

  7. a herd: N runs of `redlock-run -n -k K -- section` let go at the same
     instant (a fleet's cron at the top of the minute), through a gate that
     each process waits on before it execs redlock-run;
  8. many locks at once: N holders on distinct keys, each `--ttl 30s`, while
     their jobs sleep: Redis CPU and commands per second, the holders' CPU,
     their largest RSS;
  9. Redlock fan-out under latency: a small TCP proxy adds a delay in front
     of each node; an uncontended run and a hand-over over 5 proxied nodes
     against one proxied node, and the client's own CPU per run without
     added latency; and the floor of the five-node row: the Redis work
     alone (FLOOR_C, a client that does nothing else) on one node and on
     five.

Only the Python standard library is used; nothing here asserts timing.
"""

import os
import resource
import statistics
import subprocess
import threading
import time
from pathlib import Path

from benchlib import CountingProxy, DelayProxy, build_c, redis_args, request, start_masters

# Waits until its inherited pipe (fd 3) reaches end of file, then execs the
# rest of its arguments: N processes started one by one are let go at once
# by closing the pipe's write end.
GATE_C = r"""
#include <unistd.h>
int main(int argc, char **argv) {
    char c;
    while (read(3, &c, 1) > 0) {}
    close(3);
    if (argc < 2) return 2;
    execv(argv[1], argv + 1);
    return 127;
}
"""


def build_gate(tmp: Path):
    return build_c(tmp, "gate", GATE_C)


def commands_processed(redis):
    """Commands served so far, this bench's own sampling included."""
    return int(redis.info("stats")["total_commands_processed"])


def redis_cpu(redis):
    i = redis.info("cpu")
    return float(i["used_cpu_user"]) + float(i["used_cpu_sys"])


def each_task(pid, name):
    """The text of /proc/PID/task/*/NAME, thread by thread (a thread that
    ended meanwhile is skipped); None once the process is gone."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    texts = []
    for task in tasks:
        try:
            texts.append(Path(f"/proc/{pid}/task/{task}/{name}").read_text())
        except OSError:
            pass
    return texts


def proc_cpu(pid):
    """CPU time of pid, all its threads, in seconds (schedstat: nanoseconds;
    utime and stime are clock ticks, and a 50 µs refresh that falls
    between two ticks counts for nothing there); None once gone."""
    texts = each_task(pid, "schedstat")
    return None if texts is None else sum(int(t.split()[0]) for t in texts if t.split()) / 1e9


def proc_wakeups(pid):
    """Voluntary context switches of pid, all its threads: each is a sleep
    that ended (a poll loop shows as many); None once gone."""
    texts = each_task(pid, "status")
    if texts is None:
        return None
    return sum(int(line.split()[1]) for t in texts for line in t.splitlines()
               if line.startswith("voluntary_ctxt_switches:"))


def proc_rss_kb(pid, field="VmRSS"):
    """A memory figure of /proc/PID/status in kB: VmRSS (resident, the
    binary's shared pages included), or RssAnon (the process's own)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def raise_nofile():
    """The bench holds a pipe or a log per process: lift the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


# ---------------------------------------------------------------------------
# Section 7: the herd


def herd(tools, redis, section, gate, runs, sections):
    """`runs` processes of `redlock-run -n` let go within a few ms."""
    key = "herd"
    log = tools.tmp / "herd.log"
    r, w = os.pipe()
    os.set_inheritable(r, True)
    argv = [gate, tools.binary, *tools.variants["redlock-run"], "--key", key, "-n", "--",
            section, str(log), "2000"]
    pids = []
    for _ in range(runs):
        pid = os.posix_spawn(
            argv[0], argv, os.environ,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
                (os.POSIX_SPAWN_DUP2, r, 3),
                (os.POSIX_SPAWN_CLOSE, w),
            ],
        )
        pids.append(pid)
    os.close(r)
    samples = []
    stop = threading.Event()

    def sample():
        last, at = commands_processed(redis), time.monotonic()
        while not stop.is_set():
            time.sleep(0.05)
            now_n, now = commands_processed(redis), time.monotonic()
            samples.append((now_n - last - 1) / (now - at))
            last, at = now_n, now

    sampler = threading.Thread(target=sample)
    sampler.start()
    time.sleep(0.2)
    start = time.monotonic()
    os.close(w)
    walls, codes = [], {}
    left = set(pids)
    while left:
        pid, status = os.wait()
        if pid in left:
            left.discard(pid)
            walls.append(time.monotonic() - start)
            code = os.waitstatus_to_exitcode(status)
            codes[code] = codes.get(code, 0) + 1
    stop.set()
    sampler.join()
    spans, _, overlaps = sections(log)
    unexpected = {c: n for c, n in codes.items() if c not in (0, 75)}
    if unexpected:
        tools.failures.append(f"herd: exits {unexpected}")
    if overlaps:
        tools.failures.append(f"redlock-run: {overlaps} sections overlapped (herd)")
    return dict(
        runs=runs,
        codes=codes,
        ran=len(spans),
        overlaps=overlaps,
        slowest=max(walls),
        p50=statistics.median(walls),
        p99=sorted(walls)[max(0, int(len(walls) * 0.99) - 1)],
        peak=max(samples) if samples else 0.0,
    )


def report_herd(h):
    print(f"7. A herd: {h['runs']} runs of `redlock-run -n -k herd -- section` let go at one instant")
    codes = ", ".join(f"exit {c}: {n}" for c, n in sorted(h["codes"].items()))
    print(f"   {codes}; {h['ran']} ran (sections of 2 ms), overlaps {h['overlaps']}")
    print(f"   wall time per run: p50 {h['p50'] * 1000:.0f} ms, p99 {h['p99'] * 1000:.0f} ms, "
          f"slowest {h['slowest'] * 1000:.0f} ms; Redis peak {h['peak']:.0f} commands/s (50 ms windows)")
    print()


# ---------------------------------------------------------------------------
# Section 8: many holders


def holders(tools, redis, count, window, spawn, reap):
    """`count` holders on distinct keys (`--ttl 30s`) with sleeping jobs."""
    # Each job blocks in one read of a FIFO (no CPU, no process started
    # every second: 2,000 `sleep 1` loops would load two cores by
    # themselves); one line per job lets them all go.
    go = tools.tmp / "holders-go"
    os.mkfifo(go)
    ready = tools.tmp / "holders-ready"
    ready.mkdir()
    job = ["/bin/sh", "-c", f'touch {ready}/$$; read line < {go}; exit 0']
    # Every holder's stderr, appended to one file: a holder that says
    # anything (a lease lost, a release that found the lock gone) fails
    # the section.
    said = tools.tmp / "holders-stderr"
    pids = []
    started = time.monotonic()
    for i in range(count):
        argv = [tools.binary, *tools.variants["redlock-run"], "--key", f"holder-{i}",
                "--ttl", "30s", "--"] + job
        pids.append(spawn(argv, True, said))
    deadline = time.monotonic() + 120
    while len(os.listdir(ready)) < count and time.monotonic() < deadline:
        time.sleep(0.1)
    up = len(os.listdir(ready))
    setup = time.monotonic() - started
    time.sleep(1)  # every first refresh timer armed
    cpu0 = {p: proc_cpu(p) for p in pids}
    wake0 = {p: proc_wakeups(p) for p in pids}
    e0 = redis.calls(redis.SCRIPTS)
    n0, r0, t0 = commands_processed(redis), redis_cpu(redis), time.monotonic()
    time.sleep(window)
    n1, r1, t1 = commands_processed(redis), redis_cpu(redis), time.monotonic()
    refreshes = redis.calls(redis.SCRIPTS) - e0
    cpu1 = {p: proc_cpu(p) for p in pids}
    wake1 = {p: proc_wakeups(p) for p in pids}
    woke = sum(wake1[p] - wake0[p] for p in pids if wake0[p] is not None and wake1[p] is not None)
    rss = [x for x in (proc_rss_kb(p) for p in pids) if x is not None]
    anon = [x for x in (proc_rss_kb(p, "RssAnon") for p in pids) if x is not None]
    elapsed = t1 - t0
    used = sum(cpu1[p] - cpu0[p] for p in pids if cpu0[p] is not None and cpu1[p] is not None)
    gate = os.open(go, os.O_RDWR)
    os.write(gate, b"\n" * count)
    for pid in pids:
        tools.check("holder", reap(pid))
    os.close(gate)
    complaints = said.read_text().splitlines() if said.exists() else []
    if complaints:
        tools.failures.append(f"holders: {len(complaints)} lines on stderr, the first: {complaints[0]}")
    return dict(
        count=count,
        up=up,
        setup=setup,
        window=elapsed,
        commands=(n1 - n0 - 2) / elapsed,
        redis_cpu=(r1 - r0) / elapsed,
        holders_cpu=used / elapsed,
        refreshes=refreshes,
        wakeups=woke,
        rss_max=max(rss) if rss else None,
        rss_median=statistics.median(rss) if rss else None,
        anon_median=statistics.median(anon) if anon else None,
    )


def report_holders(h):
    print(f"8. Many locks: {h['count']} holders on distinct keys (--ttl 30s, refresh every 10 s), jobs asleep")
    print(f"   {h['up']} of {h['count']} holding after {h['setup']:.1f} s; over {h['window']:.1f} s:")
    print(f"   Redis {h['commands']:.0f} commands/s, {h['redis_cpu'] * 100:.1f}% of a CPU; "
          f"all holders together {h['holders_cpu'] * 100:.2f}% of a CPU "
          f"({h['holders_cpu'] / max(h['count'], 1) * 1e6:.1f} µs/s each)")
    print(f"   {h['refreshes']} refreshes; the holders' threads woke {h['wakeups']} times "
          f"({h['wakeups'] / max(h['refreshes'], 1):.1f} per refresh)")
    if h["rss_max"] is not None:
        print(f"   holder RSS: median {h['rss_median'] / 1024:.2f} MB, largest {h['rss_max'] / 1024:.2f} MB"
              f" (its own, RssAnon: median {(h['anon_median'] or 0) / 1024:.2f} MB; the rest is the"
              " binary's pages, shared by every holder)")
    print()


# ---------------------------------------------------------------------------
# Section 9: Redlock fan-out under latency

# The floor of an uncontended run's Redis work over N nodes:
# `floor ACQUIRE_FILE RELEASE_FILE RUNS PORT...` connects to every port (one
# after another, each sent its acquire at once, as redlock-run does), reads
# every reply, sends every release, reads every reply and closes, RUNS
# times; prints the median in microseconds. The two files hold the very
# requests (RESP) a five-node redlock-run sent, so the servers do the same
# work; the client does nothing else.
FLOOR_C = r"""
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
static char acq[65536], rel[65536];
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}
static int reply(int fd) { char b[4096]; return recv(fd, b, sizeof b, 0) > 0; }
static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static size_t load(const char *path, char *buf) {
    FILE *f = fopen(path, "rb");
    if (!f) exit(2);
    size_t n = fread(buf, 1, 65536, f);
    fclose(f);
    return n;
}
int main(int argc, char **argv) {
    if (argc < 5 || argc > 4 + 16) return 2;
    size_t na = load(argv[1], acq), nr = load(argv[2], rel);
    int runs = atoi(argv[3]), n = argc - 4, fd[16], one = 1;
    double *took = malloc(sizeof(double) * runs);
    for (int r = 0; r < runs; r++) {
        double start = now();
        for (int i = 0; i < n; i++) {
            struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[4 + i])),
                                     .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
            fd[i] = socket(AF_INET, SOCK_STREAM, 0);
            setsockopt(fd[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            if (connect(fd[i], (struct sockaddr *)&a, sizeof a) != 0) return 1;
            if (send(fd[i], acq, na, 0) != (ssize_t)na) return 1;
        }
        for (int i = 0; i < n; i++) if (!reply(fd[i])) return 1;
        for (int i = 0; i < n; i++) if (send(fd[i], rel, nr, 0) != (ssize_t)nr) return 1;
        for (int i = 0; i < n; i++) if (!reply(fd[i])) return 1;
        for (int i = 0; i < n; i++) close(fd[i]);
        took[r] = now() - start;
    }
    qsort(took, runs, sizeof(double), cmp);
    printf("%.1f\n", took[runs / 2]);
    return 0;
}
"""


def floor(tools, nodes, proxies, rounds):
    """The Redis work of an uncontended five-node run, alone: the acquire
    and the release one such run sent (by digest; captured through a
    CountingProxy in front of the first node, after a run that cached the
    scripts), replayed by FLOOR_C on the first node and on all five,
    straight and through the delay proxies, interleaved. Medians in
    seconds, by row: "1 node", "5 nodes", "1 node +delay", "5 nodes +delay"."""
    proxy = CountingProxy(nodes[0].port)
    try:
        tools.variants["floor capture"] = redis_args([proxy.port] + [n.port for n in nodes[1:]])
        for _ in range(2):
            proxy.trips.clear()
            tools.run("floor capture", "fanout-floor", ["/bin/true"])
        calls = [c for t in proxy.trips for c in t["commands"] if c and c[0].upper() == "EVALSHA"]
    finally:
        proxy.close()
        tools.variants.pop("floor capture", None)
    if len(calls) != 2:
        tools.failures.append(f"floor: {len(calls)} EVALSHA calls captured, not 2 (acquire, release)")
        return None
    files = []
    for name, call in zip(("acquire", "release"), calls):
        path = tools.tmp / f"floor-{name}.resp"
        path.write_bytes(request(call))
        files.append(str(path))
    binary = build_c(tools.tmp, "floor", FLOOR_C)
    ports = [str(n.port) for n in nodes]
    delayed = [str(p.port) for p in proxies]
    rows = {"1 node": ports[:1], "5 nodes": ports, "1 node +delay": delayed[:1], "5 nodes +delay": delayed}
    times = {name: [] for name in rows}
    for _ in range(max(3, rounds // 50)):
        for name, some in rows.items():
            count = "10" if name.endswith("+delay") else "50"
            out = subprocess.run([binary, *files, count, *some], capture_output=True, text=True)
            if out.returncode != 0:
                tools.failures.append(f"floor: the client exited {out.returncode}")
                return None
            times[name].append(float(out.stdout) / 1e6)
    return {name: statistics.median(xs) for name, xs in times.items()}


def fanout(tools, servers, section, rounds, workers, runs, delay, _free_port, time_runs,
           summarize, contended):
    """Uncontended runs and hand-overs over 5 proxied nodes against one
    proxied node (same delay), and the client CPU per run without delay.
    (`_free_port` is what bench.py still passes; benchlib has its own.)"""
    nodes = start_masters(servers, "fanout", 5)
    proxies = [DelayProxy(n.port, delay, tools.tmp) for n in nodes]
    try:
        tools.variants["1 node +delay"] = redis_args([proxies[0].port])
        tools.variants["5 nodes +delay"] = redis_args(p.port for p in proxies)
        tools.variants["1 node"] = redis_args([nodes[0].port])
        tools.variants["5 nodes"] = redis_args(n.port for n in nodes)
        delayed = ["1 node +delay", "5 nodes +delay"]
        stats = summarize(time_runs(tools, ["true"] + delayed, rounds, key="fanout"))
        # Without delay too: the hand-overs of five nodes on loopback race
        # hardest (a rival's minority is still being given back when the
        # holder releases everywhere), and any release warning fails the bench.
        hand = contended(tools, section, workers, runs, 10, names=delayed + ["1 node", "5 nodes"],
                         tag="fanout")
        cpu = {name: run_cpu(tools, name, rounds) for name in ("1 node", "5 nodes")}
        redis_work = floor(tools, nodes, proxies, rounds)
    finally:
        for p in proxies:
            p.close()
    return dict(delay=delay, stats=stats, hand=hand, cpu=cpu, floor=redis_work)


def run_cpu(tools, name, rounds):
    """Median user+system CPU of one uncontended run (os.wait4's rusage)."""
    cpu = []
    for _ in range(rounds):
        pid = tools.spawn(name, "fanout-cpu", ["/bin/true"])
        _, status, usage = os.wait4(pid, 0)
        tools.check(name, os.waitstatus_to_exitcode(status))
        cpu.append(usage.ru_utime + usage.ru_stime)
    return statistics.median(cpu)


def report_fanout(f):
    s, h, c = f["stats"], f["hand"], f["cpu"]
    d = f["delay"] * 1000
    print(f"9. Redlock fan-out: a proxy adds {d:.1f} ms each way in front of every node")
    print("   variant            median       p95   overhead  hand-over median       p99")
    for name in ("1 node +delay", "5 nodes +delay"):
        med, p95 = s[name]
        print(f"   {name:<16} {med * 1000:7.2f} ms {p95 * 1000:6.2f} ms {(med - s['true'][0]) * 1000:+8.2f} ms"
              f"        {h[name]['median'] * 1000:7.2f} ms {h[name]['p99'] * 1000:6.2f} ms")
    print(f"   client CPU per uncontended run, no delay: 1 node {c['1 node'] * 1000:.2f} ms, "
          f"5 nodes {c['5 nodes'] * 1000:.2f} ms ({c['5 nodes'] / max(c['1 node'], 1e-9):.2f}x)")
    one, five = h["1 node"]["median"], h["5 nodes"]["median"]
    print(f"   hand-over median, no delay: 1 node {one * 1000:.2f} ms, 5 nodes {five * 1000:.2f} ms "
          f"({five / max(one, 1e-9):.2f}x)")
    fl = f.get("floor")
    if fl:
        print(f"   the Redis work alone (a C client replaying a five-node run's acquire and release,\n"
              f"   connecting to each node), no delay: 1 node {fl['1 node'] * 1000:.2f} ms, "
              f"5 nodes {fl['5 nodes'] * 1000:.2f} ms ({(fl['5 nodes'] - fl['1 node']) * 1000:+.2f} ms); "
              f"+delay: 1 node {fl['1 node +delay'] * 1000:.2f} ms, 5 nodes {fl['5 nodes +delay'] * 1000:.2f} ms "
              f"({(fl['5 nodes +delay'] - fl['1 node +delay']) * 1000:+.2f} ms)")
    print()


def fleet_targets(w, herd_r, hold, fan):
    """[(text, met?)] for issue 27's targets measured here; `w` is section
    4's result for redlock-run (waiters on one held lock)."""
    out = []
    if w is not None:
        per_s = max(r[1] for r in w["rates"])
        out.append((f"{w['waiters']} waiters cost Redis <= 100 commands/s in total ({per_s:.0f})", per_s <= 100))
        out.append((f"a release wakes the next waiter within 1 ms median ({w['median'] * 1000:.2f} ms)", w["median"] <= 0.001))
    if herd_r is not None:
        ok = set(herd_r["codes"]) <= {0, 75} and herd_r["overlaps"] == 0
        out.append((f"herd of {herd_r['runs']}: every run exits 0 or 75, one at a time", ok))
        out.append((f"herd of {herd_r['runs']}: the slowest ends within 2 s ({herd_r['slowest']:.2f} s)", herd_r["slowest"] <= 2.0))
    if hold is not None:
        # No CPU between refreshes = no wake-up but a refresh's own (its
        # timer, its reply, the main thread told the new lease end): a poll
        # loop would add wake-ups with time, not with refreshes.
        # A window may hold no refresh (quick mode): then no wake-ups.
        woke, refreshed = hold["wakeups"], hold["refreshes"]
        out.append((f"{hold['count']} idle holders wake only to refresh ({woke} wake-ups for {refreshed} "
                    f"refreshes, at most 5 each; all together {hold['holders_cpu'] * 100:.2f}% of a CPU)",
                    woke <= 5 * refreshed + hold["count"] // 10))
        if hold["rss_max"] is not None:
            out.append((f"holder RSS <= 2.5 MB (largest {hold['rss_max'] / 1024:.2f} MB)", hold["rss_max"] <= 2.5 * 1024))
    if fan is not None:
        s, h = fan["stats"], fan["hand"]
        one = s["1 node +delay"][0] - s["true"][0]
        five = s["5 nodes +delay"][0] - s["true"][0]
        out.append((f"Redlock 5 nodes under latency <= 1.1x one node's run ({five * 1000:.2f} vs {one * 1000:.2f} ms = "
                    f"{five / max(one, 1e-9):.2f}x)", five <= 1.1 * one))
        fl = fan.get("floor")
        if fl:
            extra = fl["5 nodes +delay"] - fl["1 node +delay"]
            out.append((f"the Redis work alone of four more nodes under latency ({extra * 1000:+.2f} ms) puts the floor "
                        f"of that ratio at {(one + extra) / max(one, 1e-9):.2f}x on this machine", "info"))
        h1, h5 = h["1 node +delay"]["median"], h["5 nodes +delay"]["median"]
        out.append((f"Redlock 5 nodes hand-over under latency <= 1.2x one node's ({h5 * 1000:.2f} vs {h1 * 1000:.2f} ms = "
                    f"{h5 / max(h1, 1e-9):.2f}x)", h5 <= 1.2 * h1))
    return out
