#!/usr/bin/env python3
"""Make docs/benchmarks.md's side-by-side table from a bench's raw results.

`scripts/bench.sh --focus N --json FILE` (or `--before B` with it) keeps
the raw figures of every round; this turns them into the Markdown table
between the `<!-- bench: begin -->` and `<!-- bench: end -->` lines of
docs/benchmarks.md (`--into`), or prints it. Only the standard library.

    python3 scripts/bench_render.py docs/benchmarks.json --into docs/benchmarks.md
"""

import argparse
import json
import sys
from pathlib import Path

BEGIN, END = "<!-- bench: begin -->", "<!-- bench: end -->"
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


def into(doc: Path, text):
    body = doc.read_text()
    if BEGIN not in body or END not in body:
        sys.exit(f"bench_render: {doc} has no {BEGIN} ... {END} lines")
    head, rest = body.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    doc.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", help="a bench's --json file (kind: focus)")
    ap.add_argument("--into", metavar="DOC", help="replace the table in DOC (docs/benchmarks.md)")
    args = ap.parse_args()
    results = json.loads(Path(args.results).read_text())
    if results.get("kind") != "focus":
        sys.exit("bench_render: only --focus results make the side-by-side table")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_focus  # the targets, from one place

    text = table(results, bench_focus.TARGETS)
    if args.into:
        into(Path(args.into), text)
    else:
        print(text)


if __name__ == "__main__":
    main()
