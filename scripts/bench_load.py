#!/usr/bin/env python3
"""One run's wall time beside busy processes, for builds side by side:
docs/benchmarks.md's "The end of a run" (how a lowered CPU priority of a
run's tail delays its own exit on a loaded machine).

Starts a throwaway redis-server, then BUSY processes (`while :; do :;
done`, nice 0), and times RUNS runs of `BINARY -k load -- true` for each
binary, interleaved in a shuffled order; prints the median, p90, p99 and
the longest, in milliseconds. Timing is never asserted.

    python3 scripts/bench_load.py --busy 8 --runs 100 OLD_BINARY target/x86_64-unknown-linux-musl/release/redlock-run
"""
import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402


def percentile(sorted_times, p):
    return sorted_times[min(len(sorted_times) - 1, int(p * len(sorted_times)))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--busy", type=int, default=3, help="busy processes beside the runs")
    parser.add_argument("--runs", type=int, default=200, help="runs of each binary")
    parser.add_argument("binaries", nargs="+", help="redlock-run builds to time")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-load.") as tmp:
        servers = benchlib.Servers(Path(tmp))
        busy = []
        try:
            server = servers.start("redis")
            env = dict(os.environ, REDLOCK_REDIS_URL=f"redis://127.0.0.1:{server.port}")
            busy = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(args.busy)]
            times = {b: [] for b in args.binaries}
            order = list(args.binaries)
            rng = random.Random(3)
            for _ in range(args.runs):
                rng.shuffle(order)
                for binary in order:
                    started = time.perf_counter()
                    pid = os.posix_spawn(binary, [binary, "-k", "load", "--", "true"], env)
                    _, status, _ = os.wait4(pid, 0)
                    times[binary].append(time.perf_counter() - started)
                    if status != 0:
                        sys.exit(f"bench_load: {binary} exited with status {status}")
        finally:
            for process in busy:
                process.kill()
                process.wait()
            servers.stop()
    print(f"one run's wall time, ms, beside {args.busy} busy processes, {args.runs} runs each")
    for binary, taken in times.items():
        taken = sorted(t * 1e3 for t in taken)
        print(
            f"{binary}: median {percentile(taken, 0.5):.2f}  p90 {percentile(taken, 0.9):.2f}"
            f"  p99 {percentile(taken, 0.99):.2f}  max {taken[-1]:.2f}"
        )


if __name__ == "__main__":
    main()
