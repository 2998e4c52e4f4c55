#!/usr/bin/env python3
"""Overlap of communication with compute in an `fcp run --trace` file.

For each rank: the union of the intervals during which a stage transfer (send
or recv lane) or a reshuffle was in flight, and how much of that union lies
inside compute intervals. Prints one line per rank and the total.
Usage: trace_overlap.py TRACE.json
"""
import json
import sys


def union(intervals):
    out = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def length(intervals):
    return sum(b - a for a, b in intervals)


def intersect(xs, ys):
    i = j = 0
    out = []
    while i < len(xs) and j < len(ys):
        a, b = max(xs[i][0], ys[j][0]), min(xs[i][1], ys[j][1])
        if a < b:
            out.append([a, b])
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    events = json.load(open(sys.argv[1]))["traceEvents"]
    ranks = sorted({e["pid"] for e in events})
    totals = {"stage": [0.0, 0.0], "reshuffle": [0.0, 0.0]}
    for r in ranks:
        mine = [e for e in events if e["pid"] == r and e.get("ph") == "X"]
        span = lambda cat: union([[e["ts"], e["ts"] + e["dur"]] for e in mine if e["cat"] in cat])
        compute = span({"compute"})
        parts = []
        for name, cats in (("stage", {"send", "recv"}), ("reshuffle", {"reshuffle"})):
            comm = span(cats)
            hidden = length(intersect(comm, compute))
            totals[name][0] += length(comm)
            totals[name][1] += hidden
            parts.append(f"{name} transfers in flight {length(comm) / 1e3:.1f} ms, "
                         f"{100 * hidden / max(length(comm), 1e-9):.1f}% under compute")
        print(f"rank {r}: compute {length(compute) / 1e3:.1f} ms; " + "; ".join(parts))
    for name, (t, h) in totals.items():
        print(f"all ranks: {name} transfers {t / 1e3:.1f} ms in flight, {100 * h / max(t, 1e-9):.1f}% overlapped with compute")


if __name__ == "__main__":
    main()
