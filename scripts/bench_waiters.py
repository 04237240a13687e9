#!/usr/bin/env python3
"""Section 4 of bench.py (waiters queued on one held lock) at any size,
for docs/benchmarks.md's "Fleet scale": Redis's commands per second while
they wait (PUBSUB, which scripts call, counted too), the waiters' CPU
while idle, and the drain, with the release-to-acquire latency inside
Redis from MONITOR timestamps.

    python3 scripts/bench_waiters.py --binary target/release/redlock-run --waiters 1000 --idle 80
"""
import argparse
import os
import resource
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402
import benchlib  # noqa: E402

KEY = "redlock:{queue-redlock-run}"


def cpu_s(pids):
    """CPU seconds of `pids` (schedstat: nanoseconds, not clock ticks)."""
    total = 0
    for p in pids:
        try:
            total += int(Path(f"/proc/{p}/schedstat").read_text().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            pass
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", required=True)
    ap.add_argument("--waiters", type=int, default=1000)
    ap.add_argument("--idle", type=float, default=4.0, help="bench.py's idle (full mode: 4)")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    # PUBSUB counted too: NUMSUB runs inside the scripts.
    benchlib.Redis.NOT_COUNTED = ("info", "config", "ping")
    spawned, state, lines, stop = [], {}, [], threading.Event()
    spawn, cmd = bench.Tools.spawn, benchlib.Redis.cmd

    def spawning(self, *a, **kw):
        pid = spawn(self, *a, **kw)
        spawned.append(pid)
        return pid

    def monitor(port):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"MONITOR\r\n")
        f = s.makefile("rb")
        while not stop.is_set():
            line = f.readline()
            if not line:
                break
            lines.append(line[:200])

    def command(self, *a):
        # queue() resets the stats before each idle window and before the
        # release: CPU over the idle windows, MONITOR from the release on.
        if a[:2] == ("CONFIG", "RESETSTAT"):
            state["resets"] = n = state.get("resets", 0) + 1
            if n == 1:
                state["cpu0"] = (cpu_s(spawned[1:]), time.monotonic())
            if n == 3:
                c0, t0 = state["cpu0"]
                state["cpu"] = (cpu_s(spawned[1:]) - c0) / (time.monotonic() - t0)
                threading.Thread(target=monitor, args=(self.port,), daemon=True).start()
                time.sleep(0.3)
        return cmd(self, *a)

    bench.Tools.spawn, benchlib.Redis.cmd = spawning, command
    with tempfile.TemporaryDirectory(prefix="redlock-waiters") as tmp:
        tmp = Path(tmp)
        section = bench.build_section(tmp)
        servers = benchlib.Servers(tmp)
        try:
            redis = servers.start("redis")
            tools = bench.Tools(tmp, redis, Path(args.binary))
            w = bench.queue(tools, redis, section, args.waiters, args.idle, 5)
            stop.set()
        finally:
            servers.stop()
    released, acquired = [], []
    for line in lines:
        if b"[0 lua]" not in line:
            continue
        ts = float(line.split(b" ", 1)[0])
        if b'"DEL" "%s" "%s:holder"' % (KEY.encode(), KEY.encode()) in line:
            released.append(ts)
        if b'"INCR" "%s:fence"' % KEY.encode() in line:
            acquired.append(ts)
    lat, j = [], 0
    for r in released:
        while j < len(acquired) and acquired[j] < r:
            j += 1
        if j < len(acquired):
            lat.append(acquired[j] - r)
    lat.sort()
    print(f"{args.binary}: {args.waiters} waiters, {w['queued']} subscribed; idle windows of "
          f"{args.idle * 3 / 8:.1f} s after {args.idle / 4:.1f} s")
    print(f"  while waiting: EVAL/s {w['rates'][0][0]:.1f} then {w['rates'][1][0]:.1f}; commands/s "
          f"{w['rates'][0][1]:.1f} then {w['rates'][1][1]:.1f}; waiters' CPU {state.get('cpu', 0) * 100:.1f}% of a core")
    if lat:
        print(f"  drain {w['total']:.2f} s; release -> next acquire in Redis: median {statistics.median(lat) * 1000:.3f} ms, "
              f"p90 {lat[int(len(lat) * 0.9)] * 1000:.3f} ms; section gap median {w['median'] * 1000:.3f} ms, "
              f"p99 {w['p99'] * 1000:.2f} ms; overlaps {w['overlaps']}")
    print(f"  load average {os.getloadavg()[0]:.2f}; failures: {tools.failures[:5] or 'none'}")
    return 1 if tools.failures else 0


if __name__ == "__main__":
    sys.exit(main())
