"""The chaos campaign: runs seeded episodes (episode.py, each in private
network and PID namespaces), the negative controls, and the independent
checker (checker.py) on each; prints one line per episode, a table per
fault kind, and the summary line. See docs/chaos.md.

usage: campaign.py [--episodes N] [--seed S] [--episode K] [--jobs J]
                   [--controls M] [--keep] [--no-host] [--no-server] [--no-workloads]
                   [--findings]
"""

import argparse
import atexit
import ctypes
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import checker  # noqa: E402
import episode as episode_mod  # noqa: E402

CONTROLS = {
    "c1": ("two workers on different prefixes", "overlaps"),
    "c2": ("a store that ignores fences", "stale writes accepted"),
    "c3": ("a stand-in wrapper that never refreshes", "overlaps or late stops"),
    "c4": ("a stand-in that releases when COMMAND's leader exits, and jobs that leave a daemon",
           "jobs that outlived their run"),
    "c5": ("a waiter that takes the lock at once after Redis lost a holder's data", "overlaps in model"),
}
RUNNING = set()
PR_SET_PDEATHSIG = 1


def die_with_parent():
    # The episode's unshare dies with the campaign; with --kill-child the
    # episode's PID namespace (every server, wrapper and job) dies with it.
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    os.setsid()


def kill_all(*_):
    for proc in list(RUNNING):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass


def on_signal(signum, _frame):
    kill_all()
    print(f"chaos: stopped by signal {signum}", file=sys.stderr, flush=True)
    os._exit(128 + signum)  # not sys.exit: the pool would wait for its episodes


def findings():
    """(seed, episode, host, server, workloads) of every finding, from
    scripts/chaos/findings.txt."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "findings.txt")
    todo = []
    with open(path) as f:
        for text in f:
            fields = text.split("#", 1)[0].split()
            if fields:
                # "+host" after the episode: found with the host-side
                # faults, replayed with them; "+server": and the
                # server-side ones; "+workloads" (after those): and the
                # workloads (shared, two keys, script-free servers...).
                todo.append((fields[0], int(fields[1]), "+host" in fields[2:4] or "+server" in fields[2:4],
                             "+server" in fields[2:4], "+workloads" in fields[2:5]))
    return todo


def replay(seed, k, host=True, server=True, workloads=True):
    return (f"scripts/chaos.sh --seed {seed} --episode {k}" + ("" if host else " --no-host")
            + ("" if server or not host else " --no-server") + ("" if workloads else " --no-workloads"))


def run_episode(seed, k, base, keep, host=True, server=True, workloads=True):
    workdir = tempfile.mkdtemp(prefix=f"ep-{k}-", dir=base)
    os.chmod(workdir, 0o777)
    cmd = ["unshare", "--net", "--pid", "--fork", "--mount-proc", "--kill-child",
           sys.executable, os.path.join(HERE, "episode.py"), str(seed), str(k), workdir]
    if not host:
        cmd.append("--no-host")
    if not server:
        cmd.append("--no-server")
    if not workloads:
        cmd.append("--no-workloads")
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
    RUNNING.add(proc)
    try:
        output, _ = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        output = (output or b"") + b"\nepisode timed out after 120 s"
    RUNNING.discard(proc)
    remove_cgroups(workdir)
    elapsed = time.monotonic() - started
    result = {"k": k, "dir": workdir, "elapsed": elapsed, "rc": proc.returncode, "host": host, "server": server,
              "workloads": workloads, "output": output.decode(errors="replace")}
    try:
        result["plan"], result["counts"] = checker.check(workdir)
    except (OSError, ValueError, KeyError, StopIteration) as err:
        result["plan"], result["counts"] = None, None
        result["output"] += f"\nchecker: {err}"
    if proc.returncode != 0 or result["counts"] is None:
        result["error"] = True
    missed = result["plan"] and result["plan"]["control"] and not caught(result)
    if not keep and not failed(result) and not missed:
        shutil.rmtree(workdir, ignore_errors=True)
    return result


def remove_cgroups(workdir):
    """The cgroups an episode delegated (episode.py), once every process of
    it is gone: deepest first, a few tries (a kill is not instant)."""
    try:
        with open(os.path.join(workdir, "cgroups")) as f:
            base = f.read().strip()
    except OSError:
        return
    if not os.path.basename(base).startswith("redlock-chaos."):
        return
    for _ in range(50):
        dirs = [root for root, _, _ in os.walk(base)]
        for d in sorted(dirs, key=len, reverse=True):
            try:
                os.rmdir(d)
            except OSError:
                pass
        if not os.path.exists(base):
            return
        time.sleep(0.1)


def failed(r):
    if r.get("error") or r["counts"] is None:
        return True
    c = r["counts"]
    if r["plan"]["control"]:
        return False
    return any(c[x] for x in ("overlaps_in", "stale", "late", "unexpected", "leftovers", "fence_back_in",
                              "outlived"))


def caught(r):
    c = r["counts"]
    if c is None:
        return False
    control = r["plan"]["control"]
    if control == "c1":
        return c["overlaps_in"] + c["overlaps_out"] > 0
    if control == "c2":
        return c["stale"] > 0
    if control == "c4":
        return c["outlived"] > 0
    if control == "c5":
        return c["overlaps_in"] > 0
    return c["overlaps_in"] + c["overlaps_out"] + c["late"] > 0


def line(seed, r):
    p, c = r["plan"], r["counts"]
    if c is None:
        return f"episode {r['k']}: HARNESS ERROR (exit {r['rc']})"
    mode = f"limit{p['limit']}" if p["limit"] > 1 else p.get("workload", "mutex")
    if p.get("cgroups") == "delegated":
        mode += " cgroups"
    kinds = ",".join(f["kind"] for f in p["faults"]) or "-"
    head = (f"episode {r['k']}: {p['topology']} {mode} w{p['workers']} ttl {p['ttl_ms']}ms "
            f"faults [{kinds}] sections {c['sections']} overlaps {c['overlaps_in']}/{c['overlaps_out']} "
            f"(in/out) stale {c['stale']} (rejected {c['rejected']}) fence-back "
            f"{c['fence_back_in']}/{c['fence_back_out']} late {c['late']} exits {c['unexpected']} "
            f"outlived {c['outlived']} left {c['leftovers']} {r['elapsed']:.1f}s")
    if p.get("workload") == "shared":
        head += f" readers-together {c.get('readers_together', 0)}"
    if p["control"]:
        return head + (" caught" if caught(r) else " NOT CAUGHT")
    return head + (" FAIL" if failed(r) else " ok")


def table(results):
    rows = {}
    for r in results:
        if r["counts"] is None or r["plan"]["control"]:
            continue
        kinds = {}
        for f in r["plan"]["faults"]:
            if f["kind"] in r["counts"]["kinds"]:
                kinds[f["kind"]] = kinds.get(f["kind"], 0) + 1
        for kind, n in kinds.items():
            row = rows.setdefault(kind, dict.fromkeys(
                ["episodes", "faults", "sections", "overlaps_in", "overlaps_out", "stale", "late",
                 "fence_back_in", "unexpected", "outlived"], 0))
            row["episodes"] += 1
            row["faults"] += n
            for key in ("sections", "overlaps_in", "overlaps_out", "stale", "late",
                        "fence_back_in", "unexpected", "outlived"):
                row[key] += r["counts"][key]
    out = ["| fault kind | model | episodes | faults | sections | overlaps in model | "
           "overlaps out of model | stale writes accepted | late stops | fence back (in model) | unexpected exits | "
           "outlived |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for kind in episode_mod.KINDS:
        if kind in rows:
            row = rows[kind]
            out.append(f"| {kind} | {episode_mod.KINDS[kind]} | " + " | ".join(
                str(row[k]) for k in ("episodes", "faults", "sections", "overlaps_in", "overlaps_out",
                                      "stale", "late", "fence_back_in", "unexpected", "outlived")) + " |")
    return "\n".join(out)


def preflight():
    """Root and namespaces: say clearly what is missing."""
    problems = []
    if os.geteuid() != 0:
        problems.append("needs root (private network and PID namespaces, nftables, other uids)")
    for tool in ("unshare", "nft", "setpriv", "ip", "redis-server", "pkill", "umount"):
        if not shutil.which(tool):
            problems.append(f"needs {tool} on PATH (scripts/prereqs.sh installs it)")
    if not problems:
        probe = subprocess.run(["unshare", "--net", "--pid", "--fork", "--mount-proc", "sh", "-c",
                                "ip link set lo up && nft add table inet probe"],
                               capture_output=True, text=True)
        if probe.returncode != 0:
            problems.append("cannot make a network namespace with nftables: " + probe.stderr.strip())
        # The host-side faults: a mount namespace without /proc, a PID
        # namespace without a /proc of its own.
        probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                                "umount -l /proc && ! test -e /proc/self && "
                                "unshare --pid --fork --kill-child true"],
                               capture_output=True, text=True)
        if probe.returncode != 0:
            problems.append("cannot unmount /proc in a mount namespace or make a PID namespace: "
                            + probe.stderr.strip())
    return problems


def named_redlock_run():
    """The kill-both fault's `pkill -9 redlock-run` selects processes by
    name, which is the name of the file exec'd: a binary under test called
    anything else (a copy named after its commit) would be missed by it,
    and its runs judged as killed though they ran on (seed 20261207
    episode 340). Such a binary is run through a link called redlock-run."""
    binary = os.environ.get("REDLOCK_CHAOS_BINARY", "")
    if not binary or os.path.basename(binary) == "redlock-run":
        return
    named = tempfile.mkdtemp(prefix="redlock-chaos-bin-")
    os.chmod(named, 0o755)
    atexit.register(shutil.rmtree, named, True)
    link = os.path.join(named, "redlock-run")
    os.symlink(os.path.realpath(binary), link)
    os.environ["REDLOCK_CHAOS_BINARY"] = link


def main():
    ap = argparse.ArgumentParser(prog="scripts/chaos.sh")
    ap.add_argument("--episodes", type=int, default=60)
    ap.add_argument("--seed", default=None)
    ap.add_argument("--episode", default=None, help="replay one episode (a number, or c1-0 ...)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--controls", type=int, default=None,
                    help="episodes per negative control (default: 1 per 100 episodes, at least 1)")
    ap.add_argument("--keep", action="store_true", help="keep every episode's directory")
    ap.add_argument("--findings", action="store_true",
                    help="replay the episodes of every finding (scripts/chaos/findings.txt), "
                         "without host-side faults (those findings were made before them)")
    ap.add_argument("--no-host", action="store_true",
                    help="plan no host-side faults, nor server-side ones (replays an episode as it was "
                         "planned before them)")
    ap.add_argument("--no-server", action="store_true",
                    help="plan no server-side faults (replays an episode as it was planned before them)")
    ap.add_argument("--no-workloads", action="store_true",
                    help="plan no shared, several-key, replacing or script-free workloads (replays an "
                         "episode as it was planned before them; --findings always does)")
    args = ap.parse_args()

    problems = preflight()
    if problems:
        for p in problems:
            print(f"chaos: {p}", file=sys.stderr)
        if os.environ.get("CI") == "true":
            print("chaos: FAILED: the campaign cannot run here (CI=true: not skipped)", file=sys.stderr)
            return 1
        print("chaos: skipped (not root or no namespaces; CI=true makes this a failure)", file=sys.stderr)
        return 0

    seed = args.seed if args.seed is not None else str(random.SystemRandom().randrange(10**9))
    base = tempfile.mkdtemp(prefix="redlock-chaos-")
    os.chmod(base, 0o755)  # the workers run as other uids
    atexit.register(kill_all)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    host = not args.no_host
    server = host and not args.no_server
    workloads = not args.no_workloads and not args.findings
    named_redlock_run()
    if args.findings:
        todo = findings()
        seed = "of each finding"
    elif args.episode is not None:
        todo = [(seed, args.episode, host, server, workloads)]
    else:
        controls = args.controls if args.controls is not None else max(1, args.episodes // 100)
        todo = [(seed, f"{c}-{i}", host, server, workloads) for i in range(controls) for c in CONTROLS]
        todo += [(seed, k, host, server, workloads) for k in range(args.episodes)]
    print(f"chaos: seed {seed}, {len(todo)} episodes ({args.jobs} at a time), host-side faults "
          f"{'on' if host and not args.findings else 'off' if not args.findings else 'as each finding had them'}, "
          f"server-side faults "
          f"{'on' if server and not args.findings else 'off' if not args.findings else 'as each finding had them'}, "
          f"workloads {'on' if workloads else 'off' if not args.findings else 'as each finding had them'}, binary "
          f"{os.environ.get('REDLOCK_CHAOS_BINARY')}, clock jumps "
          f"{'with ' + os.environ['REDLOCK_CHAOS_VALKEY'] if episode_mod.valkey_server() else 'SKIPPED (no valkey-server with libfaketime)'}",
          flush=True)
    started = time.monotonic()
    results = []
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [(s, pool.submit(run_episode, s, k, base, args.keep, h, v, w)) for s, k, h, v, w in todo]
        for s, fut in futures:
            r = fut.result()
            results.append(r)
            print(line(s, r), flush=True)
            bad = failed(r) or (r["plan"] and r["plan"]["control"] and not caught(r))
            if bad or (r["plan"] and r["plan"]["control"] is None and r["counts"] and r["counts"]["details"] and args.episode is not None):
                for item in (r["counts"] or {}).get("details", []):
                    print(f"    {item}")
                if r.get("error"):
                    print("    harness: " + r["output"].strip().replace("\n", "\n    ")[-3000:])
                print(f"    logs: {r['dir']}")
                print(f"    replay: {replay(s, r['k'], r['host'], r['server'], r['workloads'])}", flush=True)
    elapsed = time.monotonic() - started

    main_results = [r for r in results if not (r["plan"] and r["plan"]["control"])]
    ctl = {}
    for r in results:
        if r["plan"] and r["plan"]["control"]:
            ctl.setdefault(r["plan"]["control"], []).append(caught(r))
    total = dict.fromkeys(["sections", "overlaps_in", "overlaps_out", "stale", "late", "unexpected",
                           "leftovers", "faults", "fence_back_in", "fence_back_out", "rejected",
                           "lingering", "outlived"], 0)
    errors = skipped = 0
    kinds = set()
    skipped_kinds = {}
    for r in main_results:
        if r["counts"] is None:
            errors += 1
            continue
        for key in total:
            total[key] += r["counts"][key]
        kinds.update(r["counts"]["kinds"])
        skipped += r["counts"]["skipped"]
        for kind in r["counts"]["skipped_kinds"]:
            skipped_kinds[kind] = skipped_kinds.get(kind, 0) + 1
    print()
    print(table(results))
    print()
    for c, (what, by) in CONTROLS.items():
        got = ctl.get(c, [])
        if got:
            print(f"negative control {c} ({what}): caught by {by} in {sum(got)}/{len(got)} episodes")
    print(f"fences that went back in acquisition order: {total['fence_back_in']} in model, "
          f"{total['fence_back_out']} out of model; stale writes the store rejected: {total['rejected']}; "
          f"overlaps out of model: {total['overlaps_out']}; faults skipped: {skipped} "
          f"(a wrapper fault that found no run, a clock jump without valkey-server"
          f"{': ' + ', '.join(f'{k} {n}' for k, n in sorted(skipped_kinds.items())) if skipped_kinds else ''}"
          f"); harness errors: {errors}")
    n = len(main_results)
    print(f"queues of dead waiters left to expire by themselves (not counted as leftovers): "
          f"{total['lingering']}")
    print(f"chaos: seed {seed}, {elapsed:.0f} s, {n / elapsed * 60:.1f} episodes per minute "
          f"({args.jobs} at a time)")
    caught_all = sum(1 for c in ctl.values() if all(c))
    print(f"chaos: {n} episodes, {total['faults']} faults ({len(kinds)} kinds), {total['sections']} sections, "
          f"overlaps {total['overlaps_in']} (in model), stale writes accepted {total['stale']}, "
          f"late stops {total['late']}, unexpected exits {total['unexpected']}, "
          f"jobs outlived their run {total['outlived']}, leftovers {total['leftovers']}, "
          f"negative controls caught {caught_all}/{len(ctl)}")
    ok = (errors == 0 and not any(total[k] for k in ("overlaps_in", "stale", "late", "unexpected",
                                                     "leftovers", "fence_back_in", "outlived"))
          and caught_all == len(ctl))
    if not os.listdir(base):
        os.rmdir(base)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
