#!/usr/bin/env python3
"""Make docs/benchmarks.md's tables from a bench's raw results.

`scripts/bench.sh --focus N --json FILE` (or `--before B` with it) keeps
the raw figures of every round; this turns them into the Markdown table
between the `<!-- bench: begin -->` and `<!-- bench: end -->` lines of
docs/benchmarks.md (`--into`), or prints it. `scripts/bench.sh --protocols
--json FILE` (section 10, each lock protocol's cost) goes between the
`<!-- protocols: begin -->` and `<!-- protocols: end -->` lines. Only the
standard library.

    python3 scripts/bench_render.py docs/benchmarks.json --into docs/benchmarks.md
    python3 scripts/bench_render.py docs/benchmarks-protocols.json --into docs/benchmarks.md
"""

import argparse
import json
import sys
from pathlib import Path

MARKS = {"focus": "bench", "protocols": "protocols"}
FIGURES = [
    ("uncontended overhead (`X -- true`)", "overhead_ms", "ms", "overhead"),
    ("hand-over median (8 workers x 10 x 10 ms)", "handover_ms", "ms", "handover"),
    ("hand-over p99", "handover_p99_ms", "ms", None),
    ("contended total", "total_s", "s", "total"),
]


def rows_of(results):
    """The wrappers measured besides flock: this build first."""
    return [n for n in results["summary"] if n != "flock"]


def figure_rows(results, targets):
    s = results["summary"]
    names = rows_of(results)
    for label, fig, unit, target in FIGURES:
        cells = [f"{s[names[0]][fig]['flock']:.2f} {unit}"]
        for n in names:
            cells.append(f"{s[n][fig][n]:.2f} {unit} ({s[n][fig]['ratio']:.2f}x)")
        want = f"<= {targets[target]}x" if target else ""
        yield [label] + cells + [want]
        floor = s[names[0]].get("floor", {}).get(fig)
        if floor:
            yield (["... the design's floor (DESIGN_FLOOR_C)", cells[0],
                    f"{floor['value']:.2f} {unit} ({floor['ratio']:.2f}x)"] + [""] * len(names))


def memory_rows(results, targets):
    s = results["summary"]
    names = rows_of(results)
    mem = lambda n, k: s[n]["memory"][k]
    yield (["a holder's memory, VmRSS: wrapper + keeper", f"{mem(names[0], 'flock_mb'):.2f} MB"]
           + [f"{mem(n, 'wrapper_mb'):.2f} + {mem(n, 'keeper_mb'):.2f} = {mem(n, 'holder_mb'):.2f} MB"
              for n in names] + [f"<= {targets['memory_mb']} MB"])
    yield (["its own memory (RssAnon, both)", ""]
           + [f"{mem(n, 'anon_mb'):.2f} MB" for n in names] + [""])


def table(results, targets):
    names = rows_of(results)
    heads = {"redlock-run": "redlock-run (x flock)", "before": "before (x flock)"}
    head = ["figure", "flock"] + [heads.get(n, n) for n in names] + ["target"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in list(figure_rows(results, targets)) + list(memory_rows(results, targets)):
        lines.append("| " + " | ".join(row) + " |")
    n, rounds, workers, runs = results["params"]
    lines.append("")
    lines.append(f"Medians of {n} interleaved rounds ({rounds} uncontended runs per row, "
                 f"{workers} workers x {runs} sections of 10 ms, one holder's memory, per round); "
                 f"ratios are the medians of each round's ratio against flock in that round. "
                 f"{results['date']}, {results['machine']}; `{results['binary']}` ({results['linkage']}).")
    verdicts = results["targets"].get("redlock-run", [])
    if verdicts:
        lines.append("")
        lines.extend(f"- [{'met' if ok else 'MISSED'}] {text}" for text, ok in verdicts)
    return "\n".join(lines)


def protocols_table(results):
    """Section 10 (bench_protocols.py): a row per protocol, then each
    step's round trips with their commands."""
    import bench_protocols as bp

    p = results["protocols"]
    head = ["protocol (server)", "`-v` says", "acquire", "refresh: first, then each", "release",
            "subscribe", "served", "a `-- true` run", "uncontended median (over `true`)", "p95", "hand-over median", "p99"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    base = p["stats"]["true"][0]
    for name in p["rows"]:
        c, (med, p95), h = p["counts"].get(name), p["stats"][name], p["handover"][name]
        counted = ([f"`{c['said']}`", bp.trips_cell(c["parts"]["acquire"]), bp.refresh_cell(c["parts"]["refreshes"]),
                    bp.trips_cell(c["parts"]["release"]), bp.trips_cell(c["parts"]["subscribed"]), str(c["served"]),
                    bp.true_cell(c["true"])]
                   if c else ["?"] + ["-"] * 6)
        lines.append("| " + " | ".join([name] + counted + [
            f"{med * 1000:.2f} ms (+{(med - base) * 1000:.2f})", f"{p95 * 1000:.2f} ms",
            f"{h['median'] * 1000:.2f} ms", f"{h['p99'] * 1000:.2f} ms"]) + " |")
    lines += ["", "Round trips (commands in them), counted through a proxy in one run with "
              f"{bp.REFRESHES} refreshes; served: the commands the server ran in that run "
              f"(`INFO commandstats`, those inside scripts included); a `-- true` run: all its round trips, "
              f"through the proxy. `true` alone: {base * 1000:.2f} ms median. "
              f"{p['rounds']} uncontended runs per row, interleaved; hand-over: {p['workers']} workers x "
              f"{p['runs']} sections of 10 ms. {results['date']}, {results['machine']}; "
              f"`{results['binary']}` ({results['linkage']}); load average "
              f"{results['load'][0]:.2f} at the start, {results['load'][1]:.2f} at the end."]
    lines += [f"- {note}" for note in p["notes"]]
    lines.append("")
    lines.append("Each round trip's commands, in order:")
    lines.append("")
    for name in p["rows"]:
        parts = (p["counts"].get(name) or {}).get("parts")
        if not parts:
            continue
        steps = [("acquire", parts["acquire"])] + [
            (f"refresh {i}", r) for i, r in enumerate(parts["refreshes"], 1)] + [
            ("release", parts["release"]), ("subscribe (own connection)", parts["subscribed"])]
        lines.append(f"- {name}: " + "; ".join(f"{step} `{bp.grouped(trips)}`" for step, trips in steps))
    return "\n".join(lines)


def into(doc: Path, text, kind):
    begin, end = f"<!-- {MARKS[kind]}: begin -->", f"<!-- {MARKS[kind]}: end -->"
    body = doc.read_text()
    if begin not in body or end not in body:
        sys.exit(f"bench_render: {doc} has no {begin} ... {end} lines")
    head, rest = body.split(begin, 1)
    _, tail = rest.split(end, 1)
    doc.write_text(f"{head}{begin}\n{text}\n{end}{tail}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", help="a bench's --json file (kind: focus or protocols)")
    ap.add_argument("--into", metavar="DOC", help="replace the table in DOC (docs/benchmarks.md)")
    args = ap.parse_args()
    results = json.loads(Path(args.results).read_text())
    kind = results.get("kind")
    if kind not in MARKS:
        sys.exit("bench_render: only --focus and --protocols results make tables")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    if kind == "focus":
        import bench_focus  # the targets, from one place

        text = table(results, bench_focus.TARGETS)
    else:
        text = protocols_table(results)
    if args.into:
        into(Path(args.into), text, kind)
    else:
        print(text)


if __name__ == "__main__":
    main()
