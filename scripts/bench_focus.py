"""Issue 39's figures, side by side with flock, over several interleaved
rounds (`scripts/bench.sh --focus N`): the uncontended overhead, the
hand-over and total of the contended test, and a holder's memory (the
wrapper and its keeper together). Each round measures every row; the
report gives, per figure, the median of the rounds' ratios against flock
in the same round (the machine's drift hits both rows of a round alike),
and each target [met]/[MISSED]. `--json FILE` keeps the raw figures; see
scripts/bench_render.py for the tables docs/benchmarks.md is made from.
"""

import os
import statistics
import time
from pathlib import Path

# The row of an earlier build (--before), measured in the same rounds.
BEFORE = "before"

# Issue 39's targets: ratios against flock in the same run, and memory.
TARGETS = dict(overhead=1.15, handover=1.2, total=1.03, memory_mb=2.5)


def status_kb(pid, field):
    """A field of /proc/PID/status in kB (None once gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def children(pid):
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def keeper_of(pid):
    """The wrapper's child named redlock-keeper, if any."""
    for child in children(pid):
        try:
            if Path(f"/proc/{child}/comm").read_text().strip() == "redlock-keeper":
                return child
        except OSError:
            pass
    return None


def holder_memory(tools, name, settle=2.5):
    """VmRSS and RssAnon (kB) of a wrapper holding the lock, and of its
    keeper, medians of samples over the second up to `settle` seconds
    into a job that runs on: with `--ttl 3s` redlock-run has refreshed the
    lock by then, and refreshes it once in that second (a holder measured
    as it sits through a long job, refreshes included)."""
    marker = tools.tmp / f"mem-{name}-{time.monotonic_ns()}"
    job = ["/bin/sh", "-c", f"touch {marker}; exec sleep {settle + 0.5}"]
    argv = tools.argv(name, f"mem-{name}", job)
    if name != "flock":
        argv[1:1] = ["--ttl", "3s"]
    pid = spawn(argv, stderr_path=tools.stderr_log(name))
    deadline = time.monotonic() + 10
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(settle - 1)
    keeper = keeper_of(pid)
    # Ten samples over a second, a refresh period: the median of each
    # figure, so that the moment of a refresh neither hides nor counts.
    samples = []
    for _ in range(10):
        samples.append([status_kb(pid, "VmRSS"), status_kb(pid, "RssAnon"),
                        status_kb(keeper, "VmRSS") if keeper else None,
                        status_kb(keeper, "RssAnon") if keeper else None])
        time.sleep(0.1)
    mid = lambda i: statistics.median(s[i] for s in samples) if samples[0][i] is not None else None
    got = dict(rss=mid(0), anon=mid(1), keeper_rss=mid(2), keeper_anon=mid(3))
    tools.check(name, os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    return got


def spawn(argv, stderr_path):
    actions = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
               (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)]
    if stderr_path is not None:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        actions.append((os.POSIX_SPAWN_OPEN, 2, str(stderr_path), flags, 0o644))
    return os.posix_spawn(argv[0], argv, os.environ, file_actions=actions)


def one_round(tools, section, rounds, workers, runs, i, time_runs, summarize, contended):
    """One round of every figure, the rows' order turned each round."""
    ours = ["redlock-run"] + [n for n in tools.variants if n == BEFORE]
    pair = ["flock"] + ours
    pair = pair[i % len(pair):] + pair[:i % len(pair)]
    u = summarize(time_runs(tools, ["true"] + pair, rounds, key=f"focus{i}"))
    c = contended(tools, section, workers, runs, 10, pair, tag=f"focus{i}")
    mem = {n: holder_memory(tools, n) for n in pair}
    over = {n: u[n][0] - u["true"][0] for n in pair}
    return dict(
        overhead_ms={n: over[n] * 1000 for n in pair},
        handover_ms={n: c[n]["median"] * 1000 for n in pair},
        handover_p99_ms={n: c[n]["p99"] * 1000 for n in pair},
        total_s={n: c[n]["total"] for n in pair},
        memory_kb=mem,
    )


def holder_kb(m, field="rss"):
    """Wrapper and keeper together (kB)."""
    return (m[field] or 0) + (m.get("keeper_" + field) or 0)


def summary(rounds_, ours="redlock-run"):
    """Medians over the rounds: each figure, and its ratio against flock."""
    def med(f):
        return statistics.median(f(r) for r in rounds_)

    out = {}
    for fig in ("overhead_ms", "handover_ms", "handover_p99_ms", "total_s"):
        out[fig] = {n: med(lambda r, n=n, fig=fig: r[fig][n]) for n in ("flock", ours)}
        out[fig]["ratio"] = med(lambda r, fig=fig: r[fig][ours] / max(r[fig]["flock"], 1e-9))
    mem = [r["memory_kb"][ours] for r in rounds_]
    out["memory"] = dict(
        holder_mb=statistics.median(holder_kb(m) for m in mem) / 1024,
        wrapper_mb=statistics.median(m["rss"] or 0 for m in mem) / 1024,
        keeper_mb=statistics.median(m["keeper_rss"] or 0 for m in mem) / 1024,
        anon_mb=statistics.median(holder_kb(m, "anon") for m in mem) / 1024,
        flock_mb=statistics.median(r["memory_kb"]["flock"]["rss"] or 0 for r in rounds_) / 1024,
    )
    return out


def targets(s, ours="redlock-run"):
    """[(text, met)] for issue 39."""
    t, m = TARGETS, s["memory"]
    row = lambda fig, unit: (
        f"{s[fig][ours]:.2f} vs {s[fig]['flock']:.2f} {unit} = {s[fig]['ratio']:.3f}x")
    return [
        (f"hand-over median <= {t['handover']}x flock's ({row('handover_ms', 'ms')})",
         s["handover_ms"]["ratio"] <= t["handover"]),
        (f"contended total <= {t['total']}x flock's ({row('total_s', 's')})", s["total_s"]["ratio"] <= t["total"]),
        (f"uncontended overhead <= {t['overhead']}x flock's ({row('overhead_ms', 'ms')})",
         s["overhead_ms"]["ratio"] <= t["overhead"]),
        (f"a holder's memory, wrapper + keeper, <= {t['memory_mb']} MB VmRSS ({m['wrapper_mb']:.2f} + "
         f"{m['keeper_mb']:.2f} = {m['holder_mb']:.2f} MB; its own, RssAnon: {m['anon_mb']:.2f} MB; "
         f"flock {m['flock_mb']:.2f} MB)", m["holder_mb"] <= t["memory_mb"]),
    ]


def report(rounds_, params):
    n, rounds, workers, runs = params
    rows = [r for r in ("redlock-run", BEFORE) if r in rounds_[0]["overhead_ms"]]
    print(f"Issue 39, {n} interleaved rounds (each: {rounds} uncontended runs per row, "
          f"{workers} workers x {runs} sections of 10 ms, one holder's memory)")
    print(f"   {'round':<6} {'row':<12} {'overhead x':>11} {'hand-over x':>12} {'total x':>8} "
          f"{'hand-over ms (flock)':>21} {'holder MB':>10}")
    for i, r in enumerate(rounds_):
        for name in rows:
            ratio = lambda fig: r[fig][name] / max(r[fig]["flock"], 1e-9)
            hand = f"{r['handover_ms'][name]:.2f} ({r['handover_ms']['flock']:.2f})"
            mem = holder_kb(r["memory_kb"][name]) / 1024
            print(f"   {i + 1:<6} {name:<12} {ratio('overhead_ms'):>10.3f}x {ratio('handover_ms'):>11.3f}x "
                  f"{ratio('total_s'):>7.3f}x {hand:>21} {mem:>10.2f}")
    for name in rows:
        label = "this build" if name == "redlock-run" else "the --before build"
        print(f"Targets (issue 39), {label}, medians of the rounds' ratios against flock:")
        for text, ok in targets(summary(rounds_, name), name):
            print(f"   [{'met' if ok else 'MISSED'}] {text}")
