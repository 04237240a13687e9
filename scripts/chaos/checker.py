"""The independent checker: reads an episode's logs (events.jsonl written by
the harness, sections.log by the jobs, store.log by the fenced store; never
anything redlock-run printed) and counts what went wrong.

Counts per episode:
  sections        critical sections that started
  overlaps        two sections at once (a semaphore: more than N at once),
                  "in" or "out" of the safety model: out when the later
                  section began during an out-of-model fault (from its
                  planned time) or within 2 TTL + 1 s after it ended
  stale           writes the store ACCEPTED whose fence was below one it had
                  accepted before, or equal to one another section wrote
  rejected        stale writes the store refused (not a failure: the fence
                  doing its job)
  fence_back      sections whose fence was not above every earlier
                  section's (acquisition order = section start order)
  late            sections that went on after their lease could have ended
                  (the bounds are in late_stops below and docs/chaos.md)
  unexpected      exit codes outside the README's table for that run
  outlived        runs whose job (any of its processes: escaped helpers log
                  under their run's id) still logged or wrote more than
                  200 ms after the run ended (its wrapper exited) and after
                  another section had started since: the lock had moved on
  leftovers       processes or keys left when the episode was over; a
                  waiters queue whose every member's liveness key lapsed
                  (release skips them, the queue expires within 60 s) is
                  counted apart, as "lingering", not as a leftover
"""

import json
import os

SLACK_NS = 200_000_000  # scheduling slack for "at once" (kill, PDEATHSIG)


def load(workdir):
    events = [json.loads(line) for line in open(os.path.join(workdir, "events.jsonl"))]
    plan = next(e["plan"] for e in events if e["ev"] == "episode")
    runs = [e for e in events if e["ev"] == "run"]
    faults = [e for e in events if e["ev"] == "fault"]
    left = next((e["items"] for e in events if e["ev"] == "leftovers"), None)
    lingering = next((e["items"] for e in events if e["ev"] == "lingering"), [])
    begin = next(e["t"] for e in events if e["ev"] == "begin")
    sections = {}
    for line in open(os.path.join(workdir, "sections.log")):
        parts = line.split()
        if len(parts) < 3:
            continue
        kind, t, run = parts[0], int(parts[1]), parts[2]
        if kind == "S":
            sections[run] = {"run": run, "start": t, "last": t, "fence": parts[3],
                             "token": parts[4] if len(parts) > 4 else "-", "records": [t]}
            for field in parts[5:]:
                # What COMMAND saw (job.py): each key's fence, its mode.
                if field.startswith("R:"):
                    sections[run]["saw_keys"] = dict(x.split("=", 1) for x in field[2:].split(",") if "=" in x)
                elif field.startswith("M:"):
                    sections[run]["saw_mode"] = field[2:]
        elif run in sections:
            s = sections[run]
            s["last"] = max(s["last"], t)
            s["records"].append(t)
            if kind == "E":
                s["ended"] = True
    writes = []
    for line in open(os.path.join(workdir, "store.log")):
        parts = line.split()
        if len(parts) != 5:
            continue
        t, run, key, fence, verdict = int(parts[0]), parts[1], parts[2], parts[3], parts[4]
        writes.append({"t": t, "run": run, "key": key, "fence": fence, "ok": verdict == "ACC"})
        # Not part of the section's span: the store's time is when it
        # decided, which a loaded machine can put well after the job sent
        # the write (and died); the job logs a W as it sends one.
    return plan, runs, faults, sections, writes, left, lingering, begin


def out_of_model_windows(plan, faults, begin):
    """From the moment the harness set out to apply the fault (its planned
    time: applying one can take a while, as filling memory does, and its
    t0 is logged once it is in place) to 2 TTL + 1 s after it ended."""
    pad = (2 * plan["ttl_ms"] + 1000) * 1_000_000
    # Data lost under a semaphore's waiters: the stand-in that redlock-run
    # puts up takes one slot of N, and measures the lost holders' leases by
    # the soonest to expire (all a busy answer shows): finding F9, open;
    # out of the model (docs/safety.md, "Data lost in Redis").
    lost_semaphore = [f for f in faults if f["kind"] == "lost-under-waiters" and plan["limit"] > 1
                      and not f.get("skipped") and f.get("t0") is not None]
    return [(min(f["t0"], begin + int(f["at"] * 1e9)), f["t1"] + pad, f["kind"])
            for f in faults if f.get("model") == "out" or f in lost_semaphore]


def classify(t, windows):
    for a, b, kind in windows:
        if a <= t <= b:
            return "out", kind
    return "in", None


def fence_int(text):
    try:
        return int(text)
    except ValueError:
        return None


def late_stops(plan, faults, sections):
    """Records of a section after the moment its lease could have ended.

    - A fault that leaves the holder no quorum to refresh on for at least a
      TTL (a partition or pause of a quorum of nodes, latency beyond the
      per-node timeout on a quorum, a partition of the holder's client):
      no confirmed refresh was sent after the fault began (t0, logged after
      it was applied), so the lease ended by t0 + TTL at the latest. A
      section under way at t0 must log nothing after t0 + TTL.
    - Data lost on a quorum of nodes (FLUSHALL, a restart without
      persistence, eviction, lost-under-waiters): the README bounds the
      stop by one refresh period + --kill-after (+ one per-node timeout);
      slack 200 ms. A section whose wrapper was stopped or killed before
      that bound cannot refresh to see the loss: its lease's bound, the
      fault's end + TTL.
    - A trickle on a quorum for a TTL or more: as latency beyond the
      timeout (one deadline per exchange: no reply is in time).
    - A wrapper SIGKILLed: its job dies with it (PDEATHSIG): nothing after
      the kill + 200 ms.
    - A wrapper stopped by SIGTSTP in its section: the job stops with it
      (nothing between stop + 200 ms and SIGCONT - 50 ms); after a stop of
      a TTL or more the job is killed before it continues (nothing after
      SIGCONT + 200 ms).
    - A wrapper SIGSTOPped in its section for longer than a TTL: when
      continued it kills its job at once (nothing after SIGCONT + 200 ms).
      (A wrapper stopped while it waits may take the lock afterwards.)
    - --max-hold M: nothing after start + M + --kill-after + 200 ms.
    - The host side: a wrapper SIGSTOPped (wrapper-freeze, or the strike of
      a no-proc/foreign-proc window) for a TTL or more while its job ran:
      the keeper knows a lease end no later than the stop + TTL (no
      refresh is sent while the wrapper is stopped) and must have killed
      the job by then: nothing after stop + TTL + 200 ms. Wrapper and
      keeper SIGKILLed together (kill-both): nothing of the job may outlive
      the lease, which ends by the kill + TTL. A wrapper SIGKILLed in a
      no-proc or foreign-proc window: as wrapper-kill.
    """
    ttl = plan["ttl_ms"] * 1_000_000
    found = []
    # A wrapper frozen by a long SIGSTOP cannot stop its job: the README's
    # frozen-wrapper window, not a late stop.
    frozen = {f.get("run") for f in faults if f["kind"] == "wrapper-stop" and f.get("model") == "out"}

    def late_after(s, bound, why):
        after = [t for t in s["records"] if t > bound]
        if after:
            found.append(f"late stop: {s['run']} logged {(max(after) - bound) / 1e6:.0f} ms after {why}")

    for f in faults:
        kind = f["kind"]
        t0, t1 = f.get("t0"), f.get("t1")
        if t0 is None or f.get("skipped"):
            continue
        # A trickle on a quorum: every reply takes longer than the
        # per-node timeout, so no refresh sent after t0 is confirmed.
        cut = (kind in ("node-partition", "node-pause") and f.get("quorum_lost")) or \
              (kind == "latency" and f.get("quorum_lost") and f.get("beyond_timeout")) or \
              (kind == "trickle" and f.get("quorum_lost"))
        if cut or kind == "client-partition":
            if t1 - t0 < ttl:
                continue
            for s in sections.values():
                if kind == "client-partition" and not s["run"].startswith(f"w{f['worker']}r"):
                    continue
                if s["start"] < t0 < s["last"] and s["run"] not in frozen:
                    late_after(s, t0 + ttl, f"{kind} at t0 + TTL")
        elif kind == "lost-under-waiters":
            for s, bound, why in lost_data_bounds(plan, f, faults, sections):
                late_after(s, bound, why)
        elif kind == "eviction" and f.get("error") and not f.get("applied"):
            # The harness could not reach the node to set its limit (a
            # partition at the same time): nothing was evicted, and a
            # holder that refreshes on is right to (seed 20261217
            # episode 279).
            continue
        elif kind in ("flushall", "node-restart-volatile", "eviction") and f.get("quorum_lost", True):
            bound = (plan["refresh_ms"] + plan["kill_after_ms"] + plan["timeout_ms"]) * 1_000_000 + SLACK_NS
            start = t1 if kind == "node-restart-volatile" else t0
            for s in sections.values():
                if not s["start"] < t0 < s["last"] or s["run"] in frozen:
                    continue
                if wrapper_struck_before(faults, s["run"], start + bound):
                    # Its wrapper, stopped or killed, could not refresh to
                    # see the loss: the lease's bound (seed 20261206
                    # episode 589: frozen 86 ms into an eviction).
                    late_after(s, t1 + ttl + SLACK_NS, f"{kind}, its wrapper stopped or killed: t1 + TTL")
                else:
                    late_after(s, start + bound, f"{kind}: refresh + kill-after + timeout")
        elif kind == "wrapper-kill" and f.get("run") in sections:
            late_after(sections[f["run"]], t0 + SLACK_NS, "its wrapper was SIGKILLed")
        elif kind == "wrapper-tstp" and f.get("run") in sections and sections[f["run"]]["start"] < t0:
            s = sections[f["run"]]
            # t1 is taken just after SIGCONT: the job may log before it.
            during = [t for t in s["records"] if t0 + SLACK_NS < t < t1 - 50_000_000]
            if during:
                found.append(f"late stop: {s['run']} ran while its wrapper was stopped by SIGTSTP")
            if t1 - t0 >= ttl:
                late_after(s, t1 + SLACK_NS, "SIGCONT after a SIGTSTP of a TTL or more")
        elif kind == "wrapper-stop" and f.get("run") in sections and t1 - t0 >= ttl \
                and sections[f["run"]]["start"] < t0:
            late_after(sections[f["run"]], t1 + SLACK_NS, "SIGCONT after a SIGSTOP longer than the TTL")
        elif kind == "wrapper-freeze" and f.get("run") in sections and t1 - t0 >= ttl \
                and sections[f["run"]]["start"] < t1:
            # A job that started after its wrapper was continued (its start
            # was parked while it waited: F14) never ran under the freeze.
            late_after(sections[f["run"]], t0 + ttl + SLACK_NS, "its wrapper was SIGSTOPped: stop + TTL")
        elif kind == "kill-both":
            victims = f.get("runs") or [f.get("run")]
            for run in victims:
                if run in sections and sections[run]["start"] < t0:
                    late_after(sections[run], t0 + ttl + SLACK_NS,
                               f"wrapper and keeper were SIGKILLed ({f.get('mode')}): kill + TTL")
        elif kind in ("no-proc", "foreign-proc") and f.get("strike_run") in sections \
                and f.get("strike_t0") and not f.get("strike_skipped"):
            s, s0, s1 = sections[f["strike_run"]], f["strike_t0"], f.get("strike_t1")
            if f["strike"] == "wrapper-kill":
                late_after(s, s0 + SLACK_NS, f"its wrapper was SIGKILLed ({kind})")
            elif s1 is not None and s1 - s0 >= ttl:
                late_after(s, s0 + ttl + SLACK_NS, f"its wrapper was SIGSTOPped ({kind}): stop + TTL")
    return found


WRAPPER_STRIKES = ("wrapper-stop", "wrapper-tstp", "wrapper-freeze", "wrapper-kill", "kill-both")


def wrapper_struck_before(faults, run, when):
    """Whether `run`'s wrapper was stopped or killed (a fault of its own, or
    the strike of a no-proc/foreign-proc window) before `when`: after
    data loss it then cannot refresh, see its token gone and stop its job
    within the README's bound; its job ends by its lease's end instead
    (the keeper's kill, or the fault's own bound)."""
    for f in faults:
        if f.get("skipped") or f.get("t0") is None:
            continue
        if f["kind"] in WRAPPER_STRIKES and run in (f.get("runs") or [f.get("run")]) and f["t0"] < when:
            return True
        if f.get("strike_run") == run and f.get("strike_t0") and not f.get("strike_skipped") \
                and f["strike_t0"] < when:
            return True
    return False


FAILING_OVER = ("failover-forced", "failover-kill", "failover-pause", "cluster-failover", "failover-waiters",
                "slot-migration")


def lost_data_bounds(plan, f, faults, sections):
    """lost-under-waiters: (section, bound, why) for each section under way
    when the data was lost. The loss lands somewhere in [t0, t1] (a FLUSHALL
    over a lossy link arrives up to a SYN retransmission, 1 s, late: seed
    20261206 episode 427), so the bounds count from t1:

    - the README's, one refresh period + --kill-after + one per-node
      timeout (+ 200 ms), when the holder's next refresh is answered: no
      other Redis-side fault within a TTL of the loss, and nothing done to
      the holder's own run (its wrapper stopped or killed has a bound of
      its own, above);
    - else the lease's: no refresh sent after the loss is confirmed (the
      token is gone), so the holder's lease, and its job, end by t1 + TTL;
    - none on Sentinel and Cluster with a failover within a TTL of the
      loss: a replica promoted before the FLUSHALL reached it still has
      the lock, and the holder may refresh there (seed 20261206 episode
      394: the primary was SIGKILLed 3.6 ms after its FLUSHALL).
    """
    ttl = plan["ttl_ms"] * 1_000_000
    t0, t1 = f["t0"], f["t1"]
    near = [g for g in faults if g is not f and not g.get("skipped") and g.get("t0") is not None
            and g["t0"] - ttl < t1 and (g.get("t1") or g["t0"]) + ttl > t0]
    redis_side = [g for g in near if g["kind"] not in HOST_KINDS]
    # A node paused or cut off may be failed over too.
    if plan["topology"] in ("sentinel", "cluster") and any(
            g["kind"] in FAILING_OVER + ("node-pause", "node-partition") for g in redis_side):
        return []
    struck = set()
    for g in faults:
        struck.update(g.get("runs") or [])
        struck.update(r for r in (g.get("run"), g.get("strike_run")) if r)
    out = []
    readme = (plan["refresh_ms"] + plan["kill_after_ms"] + plan["timeout_ms"]) * 1_000_000 + SLACK_NS
    for s in sections.values():
        if not s["start"] < t0 < s["last"] or s["run"] in struck:
            continue
        # Two keys on a Cluster (keys2): the loss is on the node of {chaos}'s
        # slot; a run that held only the other key, on another node, lost
        # nothing and need not stop (seed 20261210 episode 169; F24).
        if plan["topology"] == "cluster" and s.get("saw_keys") and "chaos" not in s["saw_keys"]:
            continue
        if redis_side:
            out.append((s, t1 + ttl + SLACK_NS, "lost-under-waiters (other faults near): t1 + TTL"))
        else:
            out.append((s, t1 + readme, "lost-under-waiters: refresh + kill-after + timeout"))
    return out


HOST_KINDS = ("keeper-kill", "kill-both", "wrapper-freeze", "keeper-stop", "escape", "cpu-starve", "no-proc",
              "foreign-proc", "wrapper-stop", "wrapper-tstp", "wrapper-kill", "stderr-stall", "fd-limit")


def host_windows(plan, runs, faults):
    """Runs whose job may run on after its run ended, by docs/safety.md's
    table of the tree's end (the documented host-side windows), with why:

    - wrapper and keeper both SIGKILLed by pid (kill-both, mode pid, or a
      keeper-kill and a wrapper-kill of the same run): in every containment
      but a PID namespace "the leader dies; the rest runs on";
    - the keeper alone without a usable /proc (a no-proc run, or a
      foreign-proc run without a delegated cgroup: what the harness gives
      it), a job that escaped its group (setsid, a double fork, a leader
      that moved its helper's group), and a run that did not end as its
      job did (killed, stopped past its lease, lock lost): only COMMAND's
      group and its leader are reached, "processes that left the group run
      on".

    `pkill -9 redlock-run` is in the model: it selects the wrapper alone.
    """
    exempt = {}
    keeper_killed, wrapper_killed = set(), set()
    for f in faults:
        if f.get("skipped"):
            continue
        if f["kind"] == "kill-both" and f.get("mode") == "pid" and f.get("run"):
            exempt[f["run"]] = "wrapper and keeper both SIGKILLed by pid"
        if f["kind"] == "keeper-kill" and f.get("run"):
            keeper_killed.add(f["run"])
        if f["kind"] == "wrapper-kill" and f.get("run"):
            wrapper_killed.add(f["run"])
        if f.get("strike") == "wrapper-kill" and f.get("strike_run"):
            wrapper_killed.add(f["strike_run"])
    # Two wrapper-kills of one run that hit two pids: the second found the
    # keeper (a foreign-proc run's wrapper looked up after it died, seed
    # 20261204 episode 824, before the harness remembered wrappers).
    struck = {}
    for f in faults:
        if f.get("strike") == "wrapper-kill" and f.get("strike_run") and f.get("strike_pids"):
            struck.setdefault(f["strike_run"], set()).add(f["strike_pids"][0])
    for run, pids in struck.items():
        if len(pids) > 1:
            exempt.setdefault(run, "wrapper and keeper both SIGKILLed by pid (a second wrapper-kill hit the keeper)")
    # The same window reached by two faults: each SIGKILL by pid, the second
    # before the survivor could act (seed 20261204 episode 779: 0.23 ms apart).
    for run in keeper_killed & wrapper_killed:
        exempt.setdefault(run, "wrapper and keeper both SIGKILLed by pid (two faults)")
    # And the keeper killed while its wrapper was stopped: neither can act
    # until the wrapper is continued (seed 20261205 episode 64), or just
    # before the stop, before the wrapper could act on the keeper's death
    # (seed 20261206 episode 894: a foreign-proc strike froze the wrapper
    # 0.38 ms after a keeper-kill).
    stops = [(f["run"], f.get("t0", 0), f.get("t1", 0)) for f in faults if not f.get("skipped") and f.get("run")
             and f["kind"] in ("wrapper-stop", "wrapper-freeze", "wrapper-tstp")]
    stops += [(f["strike_run"], f["strike_t0"], f.get("strike_t1") or f["strike_t0"]) for f in faults
              if f.get("strike") in ("wrapper-freeze", "wrapper-stop") and f.get("strike_run")
              and f.get("strike_t0") and not f.get("strike_skipped")]
    for f in faults:
        if f["kind"] != "keeper-kill" or f.get("skipped") or not f.get("run"):
            continue
        for run, s0, s1 in stops:
            if run == f["run"] and s0 - SLACK_NS <= f.get("t0", 0) <= s1:
                exempt.setdefault(f["run"], "the keeper SIGKILLed while its wrapper was stopped")
    delegated = plan.get("cgroups") == "delegated"
    for r in runs:
        env = r.get("env", "host")
        blind = env == "no-proc" or (env == "foreign-proc" and not delegated)
        left_group = r.get("escape") in ("setsid", "doublefork", "setpgid")
        if blind and left_group and r["rc"] != r["job_exit"]:
            exempt.setdefault(r["run"], f"the keeper alone without /proc ({env}), a job that left "
                                        f"its group ({r['escape']}), exit {r['rc']}")
    return exempt


def outlived(runs, sections, exempt=()):
    """Runs whose job ran on after the run ended and the lock moved on:
    a record more than SLACK after the wrapper exited, later than the start
    of a section that began after that exit."""
    found = []
    starts = sorted((s["start"], s["run"]) for s in sections.values())
    for r in runs:
        s = sections.get(r["run"])
        if s is None or r["run"] in exempt:
            continue
        ended = r["t1"]
        late = [t for t in s["records"] if t > ended + SLACK_NS]
        if not late:
            continue
        moved = next((start for start, run in starts if run != r["run"] and ended < start < max(late)), None)
        if moved is None:
            continue
        after = [t for t in late if t > moved]
        found.append(f"outlived: {r['run']}'s job ({r.get('escape') or 'no escape'}, {r.get('env', 'host')}) "
                     f"ran {(max(after) - ended) / 1e6:.0f} ms after its run ended (exit {r['rc']}), "
                     f"{(max(after) - moved) / 1e6:.0f} ms of it after the next section began")
    return found


def expected_codes(plan, run, section, faults):
    codes = {run["job_exit"], 70, 75}
    if run.get("max_hold_ms"):
        codes.add(124)
    if section is None:
        codes.add(69)  # unavailable: only before COMMAND started
    if plan["evicting"]:
        codes.add(77)  # an evicting server is refused (or its OOM answer)
    if run.get("nofile") and section is None:
        # Out of file descriptors (the fd-limit fault): a local failure,
        # exit 71, before COMMAND starts; never 69 or 1.
        codes.add(71)
    if any(f["kind"] == "wrapper-kill" and f.get("run") == run["run"] for f in faults):
        codes.add(-9)
    for f in faults:
        if f["kind"] == "kill-both" and run["run"] in (f.get("runs") or [f.get("run")]):
            codes.add(-9)
        if f["kind"] in ("no-proc", "foreign-proc") and f.get("strike") == "wrapper-kill" \
                and f.get("strike_run") == run["run"]:
            codes.add(-9)
        if f["kind"] == "keeper-kill" and f.get("run") == run["run"]:
            # The keeper gone: COMMAND's leader died of its parent-death
            # signal (128 + 9 today), or the run says the lock's job was
            # lost (70) or that supervision failed (71).
            codes.update({70, 71, 137})
    return codes


def replaced(run, runs):
    """Whether a run with --replace-running was spawned while `run` lived:
    it may have revoked `run` (exit 70, "replaced", by the README's table)."""
    return any(r.get("replace") and r["run"] != run["run"] and run["t0"] <= r["t0"] <= run["t1"] for r in runs)


def spurious_lost(plan, run, section, faults):
    """A run whose keeper was stopped, whose job ended by itself (its end
    was logged), and that exits 70 "lock lost" with no fault near it that
    could have cost it its lock: it was never lost (docs/chaos.md:
    keeper-stop). Faults aimed at another run or worker cannot, nor can
    jobs that escape, a dropped connection, latency within the timeout or
    a fault on a minority of Redlock's masters."""
    if run["rc"] != 70 or section is None or not section.get("ended"):
        return False
    mine = [f for f in faults if f["kind"] == "keeper-stop" and f.get("run") == run["run"]]
    if not mine:
        return False
    pad = plan["ttl_ms"] * 1_000_000

    def could_cost_the_lock(f):
        if f in mine or f.get("t0") is None or f.get("skipped"):
            return False
        # Jobs that escape, a dropped connection (the client reconnects
        # and refreshes), latency within the per-node timeout.
        if f["kind"] in ("escape", "client-kill") or (f["kind"] == "latency" and not f.get("beyond_timeout")):
            return False
        # A minority of Redlock's masters: the majority keeps the lock.
        if plan["topology"].startswith("redlock") and "nodes" in f and not f.get("quorum_lost"):
            return False
        if not (f["t0"] - pad < run["t1"] and (f.get("t1") or f["t0"]) + pad > run["t0"]):
            return False
        if f.get("runs"):
            return run["run"] in f["runs"]
        if f.get("run") and f["kind"] not in ("no-proc", "foreign-proc"):
            return f["run"] == run["run"]
        if "worker" in f and f["kind"] in ("client-partition", "stderr-stall", "fd-limit"):
            return f["worker"] == run["worker"]
        return True
    # Faults on minorities of Redlock's masters that together cover more
    # than a minority can (seed 20261206 episode 548: a trickle, a pause
    # and latency beyond the timeout, one node each of five).
    if plan["topology"].startswith("redlock"):
        hit = set()
        for f in faults:
            if f in mine or f.get("t0") is None or f.get("skipped") or "nodes" not in f:
                continue
            if f["kind"] == "client-kill" or (f["kind"] == "latency" and not f.get("beyond_timeout")):
                continue
            if f["t0"] - pad < run["t1"] and (f.get("t1") or f["t0"]) + pad > run["t0"]:
                hit.update(f["nodes"])
        if len(hit) > plan["nodes"] - (plan["nodes"] // 2 + 1):
            return False
    return not any(could_cost_the_lock(f) for f in faults)


def newcomer(s, runs, faults):
    """A section of a run spawned after a lost-under-waiters fault froze
    new runs, beginning before the old holder's lease could have ended: a
    newcomer that never saw the old holder may take the lock at once
    (docs/safety.md, "Data lost in Redis"). The harness starts none then,
    so this is a safeguard, not a window it relies on."""
    spawned = next((r["t0"] for r in runs if r["run"] == s["run"]), None)
    for f in faults:
        if f["kind"] != "lost-under-waiters" or f.get("skipped") or "freeze" not in f:
            continue
        if spawned is not None and spawned > f["freeze"] and f["t0"] <= s["start"] <= f.get("quiet_until", 0):
            return True
    return False


def later_key_newcomer(plan, s, others, runs, faults, resource, saw_held):
    """A run of several keys takes them in order, standing in line for one
    at a time: for a key after its first it is a newcomer, which sees that
    key's holder only if one still holds it when the run gets there. Data
    lost under that key's holder (a lost-under-waiters strike) then lets
    it take the key at once (docs/safety.md, "Data lost in Redis": a run
    that never saw the old holder), beside a holder that must stop by the
    lease's bound, the loss + TTL (seed 20261219 episode 503, F29: w3r0
    waited for chaos and took it; w0r1 took chaos2 the moment its holder
    released it, a FLUSHALL came 9 ms later, and w3r0 found chaos2 new
    and took it 1.4 ms after w0r1; w0r1 stopped 645 ms after the loss).
    Not when the run said it saw the key held (`saw_held`): a waiter that
    saw the holder must wait out its lease (F15)."""
    keys = next((r.get("keys") or [] for r in runs if r["run"] == s["run"]), [])
    if resource not in keys[1:] or saw_held(s["run"], resource):
        return False
    ttl = plan["ttl_ms"] * 1_000_000
    for f in faults:
        if f["kind"] != "lost-under-waiters" or f.get("skipped") or f.get("t0") is None:
            continue
        bound = f["t1"] + ttl + SLACK_NS
        if f["t0"] <= s["start"] <= bound and all(o["last"] <= bound for o in others):
            return True
    return False


def server_side_exits(plan, runs, sections, faults):
    """What the server-side kinds promise of the runs' ends:

    - replica-hang (Sentinel, --replicas auto): locking goes on while the
      primary is healthy (docs/topologies.md: "a sick replica never takes
      locking down"; the other replica confirms). A run that lived within
      the hang and exited 69 (unavailable), with no other fault near it
      that could explain it, is unexpected.
    - failover-waiters (Cluster): no waiter is skipped forever. A run that
      waited in line at the failover and exited 75 (busy) although the
      lock was free, after the failover, for longer than 2 TTL + 1 s + 10
      s of its wait, is unexpected. A waiter in line that is not first
      looks again at its slowest pace, 5 to 10 s (src/wait.rs, PACE_MIN
      jittered up to twice): a line can stall that long (finding F7, seed
      20261206 episode 319), but not for ever; its runs wait 20 s.
    """
    found = []
    pad = plan["ttl_ms"] * 1_000_000
    for f in faults:
        if f.get("skipped") or f.get("t0") is None:
            continue
        if f["kind"] == "replica-hang":
            for r in runs:
                # docs/topologies.md: in the first 2-3 s after a replica
                # hangs a WAIT can come back short (a -n run exits 69):
                # only a run that ended later counts (seed 20261206,
                # third run, episode 409: a -n run 0.65 s into a hang).
                if r["rc"] != 69 or r.get("nofile") or not (f["t0"] <= r["t0"] and r["t1"] <= f["t1"]) \
                        or r["t1"] < f["t0"] + 3_000_000_000:
                    continue
                near = [g for g in faults if g is not f and not g.get("skipped") and g.get("t0") is not None
                        and g["kind"] != "escape"
                        and g["t0"] - pad < r["t1"] and (g.get("t1") or g["t0"]) + pad > r["t0"]
                        and g.get("run", r["run"]) == r["run"] and g.get("worker", r["worker"]) == r["worker"]]
                if not near:
                    found.append(f"unexpected exit: {r['run']} exited 69 while only a replica was hung "
                                 f"({f.get('mode')}): locking must go on with --replicas auto")
        elif f["kind"] == "failover-waiters":
            spans = sorted((x["start"], x["last"]) for x in sections.values())
            for r in runs:
                if r["run"] not in f.get("in_line", []) or r["rc"] != 75:
                    continue
                covered, cursor = 0, f["t1"]
                for a, b in spans:
                    a, b = max(a, cursor), min(b, r["t1"])
                    if b > a:
                        covered += b - a
                        cursor = b
                free = max(0, r["t1"] - f["t1"]) - covered
                if free > 2 * pad + 11_000_000_000:
                    found.append(f"unexpected exit: {r['run']} waited in line through a Cluster failover and "
                                 f"exited 75, though the lock was free for {free / 1e6:.0f} ms of its wait after it")
    return found


def conflicts(s, others):
    """The sections among `others` that may not run beside `s`: any other
    for an exclusive section, the exclusive ones for a shared one (any
    number of readers at once, a writer beside nothing)."""
    if s["mode"] == "shared":
        return [o for o in others if o["mode"] != "shared"]
    return others


def fence_of(s, resource):
    """The section's fence for `resource`: its key's line of
    REDLOCK_FENCES for several keys, else REDLOCK_FENCE."""
    return s.get("saw_keys", {}).get(resource, s["fence"])


def overlaps(plan, runs, faults, windows, ordered, resource, exempt, saw_held=lambda run, key: True):
    """(message, "in"|"out") for each section of `resource` that started
    while sections it may not run beside were under way (a semaphore: N
    of them)."""
    found = []
    limit = plan["limit"]
    label = "" if resource == "r" else f"[{resource}] "
    # A semaphore over several independent masters may admit up to
    # floor(nodes * N / majority) holders (the README says so): above N
    # and up to that bound is outside the model.
    redlock_bound = limit
    if limit > 1 and plan["topology"].startswith("redlock"):
        redlock_bound = plan["nodes"] * limit // (plan["nodes"] // 2 + 1)
    # A section whose run had ended (its wrapper exited) before another
    # began holds no lock whatever happened in Redis: an overlap with it is
    # in the model even inside an out-of-model window. (A SIGKILLed
    # wrapper's lease runs on for up to a TTL.)
    ttl_ns = plan["ttl_ms"] * 1_000_000
    ended = {r["run"]: r["t1"] + SLACK_NS + (ttl_ns if r["rc"] == -9 else 0) for r in runs}
    for i, s in enumerate(ordered):
        others = conflicts(s, [o for o in ordered[:i] if o["last"] > s["start"]])
        if len(others) < limit:
            continue
        where, why = classify(s["start"], windows)
        # A job in a documented host-side window runs unguarded by the
        # model's own words: what overlaps it is out of the model (not
        # whatever else overlaps too).
        gone = [o["run"] for o in others if o["run"] in exempt]
        if gone and len(others) - len(gone) < limit:
            where, why = "out", f"{', '.join(gone)}: {exempt[gone[0]]}"
        # (Runs in a documented host-side window held no slot the bound
        # must count: seed 20261206 episode 401, a semaphore of 3 on
        # Redlock 3 with one killed by pid.)
        if where == "in" and len(others) - len(gone) < redlock_bound:
            where, why = "out", f"Redlock semaphore, at most {redlock_bound} holders"
        if where == "in" and newcomer(s, runs, faults):
            where, why = "out", "a newcomer that never saw the old holder took the lock after Redis lost it"
        if where == "in" and later_key_newcomer(plan, s, others, runs, faults, resource, saw_held):
            where, why = "out", "a newcomer to a later key took it after Redis lost it under its holder"
        orphans = [o["run"] for o in others
                   if ended.get(o["run"], s["start"]) < s["start"] and o["run"] not in exempt]
        if orphans:
            where, why = "in", f"{', '.join(orphans)} ran on after its run ended"
        mode = lambda x: " shared" if x["mode"] == "shared" else ""  # noqa: E731
        found.append((f"overlap ({where} model{', ' + why if why else ''}): {label}{s['run']}{mode(s)} "
                      f"(fence {fence_of(s, resource)}) started while "
                      f"{', '.join(o['run'] + mode(o) + ' (fence ' + fence_of(o, resource) + ')' for o in others)} "
                      f"ran, by {(min(o['last'] for o in others) - s['start']) / 1e6:.0f} ms", where))
    return found


def fences_back(ordered, resource, windows, jumped=None):
    """(message, "in"|"out") for each section of `resource` whose fence is
    not above every earlier section's it may not run beside (readers at
    once may start in any order of their fences).

    `jumped`: when a server's clock first jumped ahead (clock-jump), if
    one did. A counter seeded after that (a node that lost its data, or a
    key's first use) starts from a clock that runs ahead, and its fences
    stay ahead once the jump's window is over; a majority that then
    loses its data seeds anew from clocks that are right, below them
    (docs/safety.md, "Clock jumps on Redis"). So a fence back below a
    fence handed out after the jump is out of the model, whenever it
    comes (seed 20261214, episode 325)."""
    found = []
    best = {"all": None, "exclusive": None}
    for s in ordered:
        f = fence_int(fence_of(s, resource))
        if f is None:
            continue
        top = best["exclusive" if s["mode"] == "shared" else "all"]
        if top is not None and f <= top[0]:
            where, why = classify(s["start"], windows)
            if where == "in" and jumped is not None and top[2] >= jumped:
                where, why = "out", f"{top[1]}'s fence was handed out after a clock jump (clock-jump)"
            label = "" if resource == "r" else f"[{resource}] "
            found.append((f"fence back ({where} model{', ' + why if why else ''}): {label}{s['run']} got "
                          f"{f} after {top[1]} got {top[0]}", where))
        for kind in ("all", "exclusive") if s["mode"] != "shared" else ("all",):
            if best[kind] is None or f > best[kind][0]:
                best[kind] = (f, s["run"], s["start"])
    return found


def workload_sections(plan, runs, sections):
    """What COMMAND saw against what its run asked for: REDLOCK_MODE the
    mode asked (shared workload), REDLOCK_KEYS the keys asked (keys2),
    each with a fence. A mismatch is counted as an unexpected exit."""
    found = []
    for r in runs:
        s = sections.get(r["run"])
        if s is None:
            continue
        if r.get("mode") and s.get("saw_mode") != r["mode"]:
            found.append(f"unexpected: {r['run']} asked for a {r['mode']} lock, COMMAND saw "
                         f"REDLOCK_MODE={s.get('saw_mode')}")
        if r.get("keys"):
            saw = s.get("saw_keys", {})
            if sorted(saw) != sorted(r["keys"]) or any(fence_int(f) is None for f in saw.values()):
                found.append(f"unexpected: {r['run']} asked for keys {','.join(r['keys'])}, COMMAND saw "
                             f"REDLOCK_KEYS/REDLOCK_FENCES {saw}")
    return found


def saw_held(workdir):
    """Whether a run said it found a key held (its line `lock 'KEY' is held
    by ...`), from its stderr; unreadable: as if it had."""
    def said(run, key):
        try:
            with open(os.path.join(workdir, "stderr", f"{run}.txt"), "rb") as f:
                return f"lock '{key}' is held by".encode() in f.read()
        except OSError:
            return True
    return said


def check(workdir):
    plan, runs, faults, sections, writes, left, lingering, begin = load(workdir)
    out = {"sections": len(sections), "overlaps_in": 0, "overlaps_out": 0, "stale": 0,
           "rejected": 0, "fence_back_in": 0, "fence_back_out": 0, "late": 0,
           "unexpected": 0, "leftovers": 0, "outlived": 0, "details": [], "lingering": len(lingering),
           "faults": len([f for f in faults if not f.get("skipped")]),
           "kinds": sorted({f["kind"] for f in faults if not f.get("skipped")}),
           "skipped": len([f for f in faults if f.get("skipped") or f.get("strike_skipped")]),
           "skipped_kinds": [f["kind"] for f in faults if f.get("skipped") or f.get("strike_skipped")]}
    d = out["details"]
    windows = out_of_model_windows(plan, faults, begin)
    jumps = [f["t0"] for f in faults if f["kind"] == "clock-jump" and not f.get("skipped")
             and f.get("t0") is not None]
    jumped = min(jumps, default=None)
    limit = plan["limit"]
    ordered = sorted(sections.values(), key=lambda s: s["start"])

    exempt = {run: why for run, why in host_windows(plan, runs, faults).items() if run in sections}
    d += workload_sections(plan, runs, sections)
    out["unexpected"] += len([x for x in d if x.startswith("unexpected")])
    # Which resources each section holds, and how (the harness's request,
    # not what redlock-run said): one resource "r", exclusive, unless the
    # workload says otherwise (keys2: a resource per key; shared: readers).
    asked = {r["run"]: r for r in runs}
    for s in ordered:
        r = asked.get(s["run"], {})
        s["resources"] = r.get("keys") or ["r"]
        s["mode"] = r.get("mode") or "exclusive"
    # Readers that started while another ran (allowed; shows the workload
    # had shared sections at once).
    out["readers_together"] = len([s for i, s in enumerate(ordered) if s["mode"] == "shared" and any(
        o["mode"] == "shared" and o["last"] > s["start"] for o in ordered[:i])])
    for resource in sorted({x for s in ordered for x in s["resources"]}):
        mine = [s for s in ordered if resource in s["resources"]]
        for msg, where in overlaps(plan, runs, faults, windows, mine, resource, exempt, saw_held(workdir)):
            out[f"overlaps_{where}"] += 1
            d.append(msg)
        if limit == 1:
            for msg, where in fences_back(mine, resource, windows, jumped):
                out[f"fence_back_{where}"] += 1
                d.append(msg)

    # Stale writes the store accepted, re-judged from its own log: a write
    # accepted with a fence below (or equal to another section's) the last
    # one accepted, or from a section older than one whose write was
    # accepted already (a superseded holder the fence let through).
    last, newest = {}, {}
    for w in sorted(writes, key=lambda w: w["t"]):
        f = fence_int(w["fence"])
        if not w["ok"]:
            out["rejected"] += 1
            continue
        prev = last.get(w["key"])
        mine = sections.get(w["run"], {}).get("start", 0)
        top = newest.get(w["key"])
        if prev is not None and (f is None or f < prev[0] or (f == prev[0] and w["run"] != prev[1])):
            out["stale"] += 1
            d.append(f"stale write accepted: {w['run']} wrote fence {w['fence']} after "
                     f"{prev[1]} wrote {prev[0]}")
        elif top is not None and mine < top[0]:
            out["stale"] += 1
            d.append(f"stale write accepted: {w['run']} (fence {w['fence']}) wrote after the newer "
                     f"holder {top[1]} (fence {top[2]}) had written")
        if f is not None and (prev is None or f >= prev[0]):
            last[w["key"]] = (f, w["run"])
        if top is None or mine > top[0]:
            newest[w["key"]] = (mine, w["run"], w["fence"])

    for msg in late_stops(plan, faults, {k: v for k, v in sections.items() if k not in exempt}):
        out["late"] += 1
        d.append(msg)

    for r in runs:
        section = sections.get(r["run"])
        if r.get("hung"):
            out["unexpected"] += 1
            d.append(f"unexpected exit: {r['run']} hung and was killed by the harness")
        elif r["rc"] not in expected_codes(plan, r, section, faults):
            out["unexpected"] += 1
            extra = f" (RLIMIT_NOFILE {r['nofile']})" if r.get("nofile") else ""
            d.append(f"unexpected exit: {r['run']} exited {r['rc']}{extra}, "
                     f"section {'started' if section else 'never started'}")
        elif spurious_lost(plan, r, section, faults) and not replaced(r, runs):
            out["unexpected"] += 1
            d.append(f"unexpected exit: {r['run']} exited 70 (lock lost) after its job ended by itself; "
                     "its keeper was stopped, and no fault near it could have cost it the lock")

    for msg in server_side_exits(plan, runs, sections, faults):
        out["unexpected"] += 1
        d.append(msg)

    for msg in outlived(runs, sections, exempt):
        out["outlived"] += 1
        d.append(msg)
    d += [f"note (not counted): {run} in a documented host-side window: {why}"
          for run, why in sorted(exempt.items())]

    if left is None:
        out["leftovers"] += 1
        d.append("leftovers: the episode did not finish its clean-up check")
    else:
        out["leftovers"] += len(left)
        d += [f"leftover: {item}" for item in left]
    d += [f"note (not counted): a queue of dead waiters, expiring by itself: {item}" for item in lingering]
    with open(os.path.join(workdir, "events.jsonl")) as f:
        cgroups = [json.loads(line) for line in f if '"cgroups' in line]
    d += [f"note (not counted): a cgroup a run left behind: {c}"
          for e in cgroups if e["ev"] == "cgroups_left" for c in e["items"]]
    d += [f"note (not counted): cgroups were not delegated: {e['why']}"
          for e in cgroups if e["ev"] == "cgroups" and not e["delegated"]]
    return plan, out


if __name__ == "__main__":
    import sys
    plan, out = check(sys.argv[1])
    print(json.dumps(out, indent=1))
