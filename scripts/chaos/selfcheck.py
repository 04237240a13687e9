"""Hand-made episodes for the checker's workload rules (docs/chaos.md,
"Workloads"): each must be judged as its comment says, or this exits 1.
Run: python3 scripts/chaos/selfcheck.py (no root, no servers)."""

import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checker  # noqa: E402

MS = 1_000_000
PLAN = {"seed": "x", "episode": 0, "control": None, "topology": "single", "nodes": 1, "limit": 1,
        "workers": 2, "faults": [], "evicting": False, "cgroups": "none", "ttl_ms": 600, "refresh_ms": 200,
        "kill_after_ms": 200, "timeout_ms": 100}


def episode(workload, runs, writes=(), faults=()):
    """runs: (run, start ms, end ms, rc, extra run fields, extra S fields);
    faults: (kind, at ms) applied at once, out of the model."""
    d = tempfile.mkdtemp(prefix="chaos-selfcheck-")
    with open(os.path.join(d, "events.jsonl"), "w") as f:
        f.write(json.dumps({"ev": "episode", "plan": dict(PLAN, workload=workload)}) + "\n")
        f.write(json.dumps({"ev": "begin", "t": 0}) + "\n")
        for run, a, b, rc, fields, _ in runs:
            fields = {k: v for k, v in fields.items() if k not in ("fence", "said")}
            f.write(json.dumps({"ev": "run", "run": run, "worker": int(run[1]), "t0": a * MS - 5 * MS,
                                "t1": b * MS + 5 * MS, "rc": rc, "job_exit": 0, "hung": False,
                                "env": "host", **fields}) + "\n")
        for kind, at, *extra in faults:
            f.write(json.dumps({"ev": "fault", "kind": kind, "model": "out", "at": at / 1000,
                                "length": 0, "nodes": [0], "t0": at * MS, "t1": at * MS,
                                **(extra[0] if extra else {})}) + "\n")
        f.write(json.dumps({"ev": "leftovers", "items": []}) + "\n")
    with open(os.path.join(d, "sections.log"), "w") as f:
        for run, a, b, _, fields, extra in runs:
            f.write(f"S {a * MS} {run} {fields.get('fence', a)} tok {extra}\nE {b * MS} {run}\n")
    with open(os.path.join(d, "store.log"), "w") as f:
        f.writelines(f"{t * MS} {run} {key} {fence} ACC\n" for t, run, key, fence in writes)
    # What each run said (its stderr): a field "said" of the run, else nothing.
    os.mkdir(os.path.join(d, "stderr"))
    for run, _, _, _, fields, _ in runs:
        with open(os.path.join(d, "stderr", f"{run}.txt"), "w") as f:
            f.write(fields.get("said", ""))
    try:
        return checker.check(d)[1]
    finally:
        shutil.rmtree(d, ignore_errors=True)


EXCL, SHARED = {"mode": "exclusive"}, {"mode": "shared"}
# A fence above a later one, handed out after a server's clock jumped
# ahead (its counter seeded from that clock): out of the model however
# long after the jump's window (seed 20261214, episode 325); before any
# jump, in it.
JUMPED = [("w0r0", 100, 200, 0, dict(EXCL, fence=900), "M:exclusive"),
          ("w1r0", 5000, 5100, 0, dict(EXCL, fence=500), "M:exclusive")]
# A holder whose section lasts 3 s (its end is its last record).
LONG = [("w0r0", 100, 3100, 0, EXCL, "M:exclusive")]
CASES = [
    # shared: readers together are fine; a writer beside a reader or a writer is not
    ("two readers at once", "shared", [("w0r0", 100, 300, 0, SHARED, "M:shared"),
                                       ("w1r0", 150, 400, 0, SHARED, "M:shared")], "overlaps_in", 0),
    ("a writer beside a reader", "shared", [("w0r0", 100, 300, 0, SHARED, "M:shared"),
                                            ("w1r0", 150, 400, 0, EXCL, "M:exclusive")], "overlaps_in", 1),
    ("a reader beside a writer", "shared", [("w0r0", 100, 300, 0, EXCL, "M:exclusive"),
                                            ("w1r0", 150, 400, 0, SHARED, "M:shared")], "overlaps_in", 1),
    ("two writers", "shared", [("w0r0", 100, 300, 0, EXCL, "M:exclusive"),
                               ("w1r0", 150, 400, 0, EXCL, "M:exclusive")], "overlaps_in", 1),
    ("COMMAND saw the wrong mode", "shared", [("w0r0", 100, 300, 0, SHARED, "M:exclusive")], "unexpected", 1),
    # keys2: an overlap counts per key
    ("two runs on different keys", "keys2",
     [("w0r0", 100, 300, 0, {"keys": ["chaos"]}, "R:chaos=100"),
      ("w1r0", 150, 400, 0, {"keys": ["chaos2"]}, "R:chaos2=150")], "overlaps_in", 0),
    ("both keys beside one of them", "keys2",
     [("w0r0", 100, 300, 0, {"keys": ["chaos", "chaos2"]}, "R:chaos=100,chaos2=100"),
      ("w1r0", 150, 400, 0, {"keys": ["chaos2"]}, "R:chaos2=150")], "overlaps_in", 1),
    ("a key's fence back", "keys2",
     [("w0r0", 100, 200, 0, {"keys": ["chaos", "chaos2"]}, "R:chaos=100,chaos2=900"),
      ("w1r0", 250, 400, 0, {"keys": ["chaos2"]}, "R:chaos2=500")], "fence_back_in", 1),
    ("COMMAND did not get a key", "keys2",
     [("w0r0", 100, 300, 0, {"keys": ["chaos", "chaos2"]}, "R:chaos=100")], "unexpected", 1),
    # replace: the replaced run's 70 is expected; an overlap with it is not
    ("replaced, then the new one ran", "replace",
     [("w0r0", 100, 300, 70, {"replace": False}, ""),
      ("w1r0", 320, 400, 0, {"replace": True}, "")], "unexpected", 0),
    ("replaced, but ran beside the new one", "replace",
     [("w0r0", 100, 300, 70, {"replace": False}, ""),
      ("w1r0", 250, 400, 0, {"replace": True}, "")], "overlaps_in", 1),
]


# keys2 and data lost under a holder (F29): the fault at 120 ms, the old
# holder of one key from 100 ms to `end`, and a run of both keys from
# 150 ms that took them at once.
LOST = [("lost-under-waiters", 120, {"model": "in"})]
TWO_KEYS = ("w1r0", 150, 400, 0, {"keys": ["chaos", "chaos2"]}, "R:chaos=150,chaos2=150")


def lost_holder(key, end):
    return ("w0r0", 100, end, 70, {"keys": [key]}, f"R:{key}=100")


def saying(run, said):
    """`run` with its stderr saying `said`."""
    name, a, b, rc, fields, extra = run
    return (name, a, b, rc, dict(fields, said=said), extra)


FAULTED = [
    ("a fence back long after a clock jump", "mutex", JUMPED, [("clock-jump", 50)], "fence_back_in", 0),
    ("... is counted out of the model", "mutex", JUMPED, [("clock-jump", 50)], "fence_back_out", 1),
    ("a fence back before a clock jump", "mutex", JUMPED, [("clock-jump", 150)], "fence_back_in", 1),
    ("a fence back without one", "mutex", JUMPED, [], "fence_back_in", 1),
    # An eviction: a holder that runs on past refresh + kill-after +
    # timeout is late, unless the harness never set the node's limit (its
    # own call failed before: seed 20261217 episode 279).
    ("a holder running on after an eviction", "mutex", LONG, [("eviction", 200)], "late", 1),
    ("... after one whose limit may be set", "mutex", LONG,
     [("eviction", 200, {"error": "timed out", "applied": True})], "late", 1),
    ("... after one never applied", "mutex", LONG,
     [("eviction", 200, {"error": "timed out"})], "late", 0),
    # keys2 and data lost under a holder (F29, seed 20261219 episode 503):
    # a run that took its first key, then the second at once beside that
    # key's holder, whose grant Redis lost, is a newcomer to that key while
    # the holder stops within the loss + TTL; not on its first key, not
    # when the holder runs on past that bound.
    ("a later key taken after its holder's grant was lost", "keys2",
     [lost_holder("chaos2", 600), TWO_KEYS], LOST, "overlaps_in", 0),
    ("a first key taken after its holder's grant was lost", "keys2",
     [lost_holder("chaos", 600), TWO_KEYS], LOST, "overlaps_in", 1),
    ("a later key's holder running on past the loss + TTL", "keys2",
     [lost_holder("chaos2", 1500), TWO_KEYS], LOST, "overlaps_in", 1),
    ("a later key taken beside the holder it saw", "keys2",
     [lost_holder("chaos2", 600), saying(TWO_KEYS, "redlock-run: lock 'chaos2' is held by vm pid 1 (root)")],
     LOST, "overlaps_in", 1),
]


def main():
    bad = 0
    cases = [c + ([],) for c in CASES] + [(n, w, r, c, want, f) for n, w, r, f, c, want in FAULTED]
    for name, workload, runs, count, want, faults in cases:
        got = episode(workload, runs, faults=faults)
        ok = got[count] == want
        bad += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {count} {got[count]} (want {want})"
              + ("" if ok else f": {got['details']}"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
