#!/usr/bin/env python3
"""Overlap of communication with compute in an `fcp run --trace` file.

1. For each rank: the union of the intervals during which a stage transfer
   (send or recv lane) or a reshuffle was in flight, and how much of that
   union lies inside compute intervals.
2. Stage waits split in two: time blocked before the peer had even posted
   its side of a transfer (the peer was still computing an earlier stage:
   load imbalance between ranks, not communication), and time blocked
   after both sides had posted (data still moving: exposed communication).
   A transfer's wire time runs from the later of its two posts to its last
   completion; hidden = 1 - exposed / wire time.
All ranks of one machine share the clock; origins differ by the exit skew
of one barrier. Usage: trace_overlap.py TRACE.json
"""
import json
import re
import sys
from collections import defaultdict

TRANSFER = re.compile(r"^(fwd|bwd) s(\d+) (send|recv) (kv|dkv)(\d+) (to|from) (\d+)$")


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
    split_waits(events)


def split_waits(events):
    # Match each send with its receive: key (pass, stage, kind, block, src, dst).
    sides = defaultdict(list)
    for e in events:
        m = TRANSFER.match(e.get("name", "")) if e.get("ph") == "X" else None
        if not m:
            continue
        pas, stage, way, kind, block, _, peer = m.groups()
        src, dst = (e["pid"], int(peer)) if way == "send" else (int(peer), e["pid"])
        sides[(pas, int(stage), kind, int(block), src, dst)].append(e)
    posted = {}  # key -> (both posted, both done)
    for key, es in sides.items():
        posted[key] = (max(x["ts"] for x in es), max(x["ts"] + x["dur"] for x in es))
    wire = defaultdict(list)   # rank -> wire intervals of its transfers
    latest = defaultdict(float)  # (rank, pass, stage) -> latest both-posted time
    for key, (start, end) in posted.items():
        pas, stage, _, _, src, dst = key
        for r in (src, dst):
            wire[r].append([start, end])
            latest[(r, pas, stage)] = max(latest[(r, pas, stage)], start)
    exposed = late_peer = 0.0
    for e in events:
        m = re.match(r"^wait (fwd|bwd) s(\d+)$", e.get("name", ""))
        if not m or e.get("ph") != "X":
            continue
        a, b = e["ts"], e["ts"] + e["dur"]
        ready = latest.get((e["pid"], m.group(1), int(m.group(2))), a)
        late_peer += max(0.0, min(b, ready) - a)
        exposed += max(0.0, b - max(a, ready))
    wire_total = sum(length(union(v)) for v in wire.values())
    print(f"all ranks: stage transfers on the wire (both sides posted -> done) {wire_total / 1e3:.1f} ms, "
          f"exposed {exposed / 1e3:.1f} ms: {100 * (1 - exposed / max(wire_total, 1e-9)):.1f}% hidden; "
          f"waiting for a peer still computing an earlier stage (imbalance) {late_peer / 1e3:.1f} ms")


if __name__ == "__main__":
    main()
