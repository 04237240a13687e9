"""Issue 39's figures, side by side with flock, over several interleaved
rounds (`scripts/bench.sh --focus N`): the uncontended overhead, the
hand-over and total of the contended test, and a holder's memory (the
wrapper and its keeper together). Each round measures every row; the
report gives, per figure, the median of the rounds' ratios against flock
in the same round (the machine's drift hits both rows of a round alike),
and each target [met]/[MISSED]. A row of DESIGN_FLOOR_C, a C program
that does only what the design must (see below), says where the floor
is. `--json FILE` keeps the raw figures; see scripts/bench_render.py for
the tables docs/benchmarks.md is made from.
"""

import os
import statistics
import time
from pathlib import Path

# The row of an earlier build (--before), measured in the same rounds.
BEFORE = "before"

# The row of DESIGN_FLOOR_C below (uncontended and contended), in the same rounds.
FLOOR = "floor"

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


# The floor of the design (the "floor" row): what any wrapper that keeps
# issue 1's promises must do on one Redis, and nothing else, in C, static.
# `floor PORT KEY CGROUP_PARENT|- COMMAND...`: connect to 127.0.0.1:PORT,
# SET KEY with a random token NX PX; while it is held, wait for a wake-up
# (BLPOP on KEY:wake, which wakes one waiter per release; 1 s at most)
# and try again; make a cgroup under CGROUP_PARENT; fork a keeper that
# clones COMMAND into it (clone3, CLONE_INTO_CGROUP), which execs once
# the lock is ours; the keeper waits for it, reads `cgroup.events` (the
# tree's end) and reports the status on a pipe;
# release by compare-and-delete and wake the next waiter (one EVAL);
# wait for the keeper; remove the cgroup; exit with COMMAND's status.
# While it waits it makes the cgroup, the keeper and COMMAND's first
# process, parked on a pipe, as redlock-run does. No fence, holder record,
# fair line, refresh, events or configuration.
DESIGN_FLOOR_C = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* clone3's arguments, as <linux/sched.h> has them: musl-gcc, which builds
   this program as redlock-run's static build is built, has no kernel
   headers. */
struct clone_args {
    unsigned long long flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size,
        tls, set_tid, set_tid_size, cgroup;
};
#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif

static const char RELEASE[] =
    "if redis.call('get',KEYS[1])~=ARGV[1] then return 0 end redis.call('del',KEYS[1]) "
    "if redis.call('llen',KEYS[2])==0 then redis.call('rpush',KEYS[2],'1') "
    "redis.call('pexpire',KEYS[2],1000) end return 1";

static int ask(int fd, const char *cmd, int len, char *reply, int size) {
    if (send(fd, cmd, len, MSG_NOSIGNAL) != len) return -1;
    int n = recv(fd, reply, size - 1, 0);
    if (n <= 0) return -1;
    reply[n] = 0;
    return n;
}

/* The cgroup, the keeper and COMMAND's first process, parked on a pipe
   until `go` is written: made while waiting, as redlock-run does. */
static int report[2], go[2], events = -1, dirfd = -1;
static char cg[512];
static pid_t keeper;
static int prepare(const char *parent, char **command) {
    if (strcmp(parent, "-") != 0) {
        snprintf(cg, sizeof cg, "%s/floor.%d", parent, getpid());
        if (mkdir(cg, 0755) != 0) return -1;
        dirfd = open(cg, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        char path[600];
        snprintf(path, sizeof path, "%s/cgroup.events", cg);
        events = open(path, O_RDONLY | O_CLOEXEC);
        if (dirfd < 0 || events < 0) return -1;
    }
    if (pipe2(report, O_CLOEXEC) != 0 || pipe2(go, O_CLOEXEC) != 0) return -1;
    keeper = fork();
    if (keeper == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        struct clone_args ca;
        memset(&ca, 0, sizeof ca);
        ca.flags = dirfd >= 0 ? CLONE_INTO_CGROUP : 0;
        ca.exit_signal = SIGCHLD;
        ca.cgroup = dirfd >= 0 ? dirfd : 0;
        pid_t child = syscall(SYS_clone3, &ca, sizeof ca);
        if (child == 0) {
            char c;
            if (read(go[0], &c, 1) != 1) _exit(127);
            execvp(command[0], command);
            _exit(127);
        }
        char buf[128];
        int status = 0;
        waitpid(child, &status, 0);
        if (events >= 0 && pread(events, buf, sizeof buf - 1, 0) <= 0) _exit(1);
        if (write(report[1], &status, sizeof status) != sizeof status) _exit(1);
        _exit(0);
    }
    close(report[1]);
    close(go[0]);
    return keeper > 0 ? 0 : -1;
}

int main(int argc, char **argv) {
    if (argc < 5) return 2;
    const char *key = argv[2], *parent = argv[3];
    unsigned char raw[16];
    char token[33], cmd[1024], reply[512];
    if (getrandom(raw, sizeof raw, 0) != sizeof raw) return 1;
    for (int i = 0; i < 16; i++) sprintf(token + 2 * i, "%02x", raw[i]);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[1])),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1, prepared = 0;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) return 1;
    int n = snprintf(cmd, sizeof cmd,
                     "*6\r\n$3\r\nSET\r\n$%zu\r\n%s\r\n$32\r\n%s\r\n$2\r\nNX\r\n$2\r\nPX\r\n$5\r\n30000\r\n",
                     strlen(key), key, token);
    char wake[1024];
    int w = snprintf(wake, sizeof wake, "*3\r\n$5\r\nBLPOP\r\n$%zu\r\n%s:wake\r\n$1\r\n1\r\n",
                     strlen(key) + 5, key);
    for (;;) {
        if (ask(fd, cmd, n, reply, sizeof reply) < 0) return 1;
        if (reply[0] == '+') break;
        if (reply[0] != '$') return 1;
        if (!prepared++ && prepare(parent, argv + 4) != 0) return 1;
        int got = ask(fd, wake, w, reply, sizeof reply);
        if (got < 0) return 1;
        /* Woken ("*2 ... $1 1"; a reply may come in two reads) or timed out ("*-1"). */
        while (strncmp(reply, "*-1", 3) != 0 && !strstr(reply, "\r\n$1\r\n1\r\n")) {
            int more = recv(fd, reply + got, sizeof reply - 1 - got, 0);
            if (more <= 0) return 1;
            reply[got += more] = 0;
        }
    }
    if (!prepared && prepare(parent, argv + 4) != 0) return 1;
    if (write(go[1], "g", 1) != 1) return 1;
    int status = 0;
    if (read(report[0], &status, sizeof status) != sizeof status) return 1;
    n = snprintf(cmd, sizeof cmd,
                 "*6\r\n$4\r\nEVAL\r\n$%zu\r\n%s\r\n$1\r\n2\r\n$%zu\r\n%s\r\n$%zu\r\n%s:wake\r\n$32\r\n%s\r\n",
                 strlen(RELEASE), RELEASE, strlen(key), key, strlen(key) + 5, key, token);
    if (ask(fd, cmd, n, reply, sizeof reply) < 0 || strncmp(reply, ":1", 2) != 0) return 1;
    waitpid(keeper, NULL, 0);
    if (dirfd >= 0 && rmdir(cg) != 0) return 1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
"""


def cgroup_parent():
    """Where a run of ours makes its cgroup: its own cgroup v2 directory,
    if writable; None otherwise (the floor row then goes without one, and
    says so)."""
    try:
        own = next(line[3:].strip() for line in open("/proc/self/cgroup") if line.startswith("0::"))
        mounts = [line.split()[1] for line in open("/proc/self/mounts") if line.split()[2] == "cgroup2"]
    except (OSError, StopIteration, IndexError):
        return None
    for mount in mounts:
        path = mount + own.rstrip("/")
        if os.access(path, os.W_OK):
            return path
    return None


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
    floor = [FLOOR] if tools.floor else []
    u = summarize(time_runs(tools, ["true"] + pair + floor, rounds, key=f"focus{i}"))
    c = contended(tools, section, workers, runs, 10, pair + floor, tag=f"focus{i}")
    mem = {n: holder_memory(tools, n) for n in pair}
    over = {n: u[n][0] - u["true"][0] for n in pair + floor}
    return dict(
        overhead_ms={n: over[n] * 1000 for n in pair + floor},
        handover_ms={n: c[n]["median"] * 1000 for n in pair + floor},
        handover_p99_ms={n: c[n]["p99"] * 1000 for n in pair + floor},
        total_s={n: c[n]["total"] for n in pair + floor},
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
    if FLOOR in rounds_[0]["overhead_ms"]:
        out["floor"] = {
            fig: dict(value=med(lambda r, fig=fig: r[fig][FLOOR]),
                      ratio=med(lambda r, fig=fig: r[fig][FLOOR] / max(r[fig]["flock"], 1e-9)))
            for fig in ("overhead_ms", "handover_ms", "total_s")
        }
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
    floor = summary(rounds_).get("floor")
    if floor:
        o, h, t = floor["overhead_ms"], floor["handover_ms"], floor["total_s"]
        print(f"The design's floor (DESIGN_FLOOR_C: SET NX PX, a wake-up list, keeper, cgroup, release), "
              f"medians of the rounds' ratios against flock: uncontended overhead {o['value']:.2f} ms "
              f"= {o['ratio']:.3f}x, hand-over {h['value']:.2f} ms = {h['ratio']:.3f}x, "
              f"contended total {t['value']:.2f} s = {t['ratio']:.3f}x")
    for name in rows:
        label = "this build" if name == "redlock-run" else "the --before build"
        print(f"Targets (issue 39), {label}, medians of the rounds' ratios against flock:")
        for text, ok in targets(summary(rounds_, name), name):
            print(f"   [{'met' if ok else 'MISSED'}] {text}")
