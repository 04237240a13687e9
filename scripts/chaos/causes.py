"""What each failure of a campaign's kept episodes involves on the host side.

The per-kind table of the summary counts an episode in the row of every
kind it had; this reads the kept logs of failed episodes instead and names,
for each in-model overlap, late stop and job that outlived its run, the
run it is about (for an overlap, the earlier section that ran on) and what
was done to that run: the host-side fault that struck it, the environment
it ran in (no-proc, foreign-proc) and how its job escaped (`/left`: the
leader ended at once and left its helper behind).

usage: causes.py DIR   (the campaign's base directory, printed as `logs:`
                        without the episode's own part)
"""

import collections
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checker  # noqa: E402


def cause(run, runs, faults):
    r = runs.get(run, {})
    why = []
    for f in faults:
        if f.get("skipped"):
            continue
        if f.get("run") == run and f["kind"] in ("keeper-kill", "kill-both", "wrapper-freeze", "keeper-stop"):
            why.append(f["kind"] + ("/" + f["mode"] if f.get("mode") else "")
                       + ("/early" if f.get("early") else ""))
        elif f["kind"] == "kill-both" and run in (f.get("runs") or []):
            why.append("kill-both/pkill")
        elif f.get("strike_run") == run:
            why.append(f"{f['kind']}+{f['strike']}")
        elif f.get("run") == run and f["kind"].startswith("wrapper-"):
            why.append(f["kind"])
    if r.get("env", "host") != "host":
        why.append(r["env"])
    if r.get("escape"):
        why.append("escape:" + r["escape"] + ("" if r.get("escape_wait") else "/left"))
    return ",".join(why) or "no host-side fault"


def main():
    base = sys.argv[1]
    tally = collections.Counter()
    episodes = collections.defaultdict(set)
    for name in sorted(os.listdir(base)):
        d = os.path.join(base, name)
        plan, counts = checker.check(d)
        if plan["control"]:
            continue
        events = [json.loads(line) for line in open(os.path.join(d, "events.jsonl"))]
        runs = {e["run"]: e for e in events if e["ev"] == "run"}
        faults = [e for e in events if e["ev"] == "fault"]
        for line in counts["details"]:
            if line.startswith("note") or line.startswith("overlap (out"):
                continue
            what = line.split(":")[0].split(" (")[0]
            if what == "overlap":
                # The sections under way: the first one something was done to.
                names = re.findall(r"(w\d+r\d+) \(fence", line.split(" started while ", 1)[1])
            else:
                names = re.findall(r"(w\d+r\d+)", line)[:1]
            whys = [cause(n, runs, faults) for n in names] or ["?"]
            key = (what, next((w for w in whys if w != "no host-side fault"), whys[0]))
            tally[key] += 1
            episodes[key].add(plan["episode"])
    for (what, why), n in sorted(tally.items(), key=lambda x: (x[0][1], x[0][0])):
        eps = sorted(episodes[(what, why)], key=str)
        print(f"{n:4d} {what:10s} {why:55s} episodes {' '.join(map(str, eps))}")


if __name__ == "__main__":
    main()
