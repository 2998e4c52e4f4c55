#!/usr/bin/env python3
"""The planner's benchmark set, judged by the simulated step (issue 17).

For every batch of the set, worker count and hardware profile: plan with FCP
and each baseline (`fcp plan`), simulate (`fcp simulate --json`) and report

  - FCP's step with the transparent reshuffle overlapped (the default users get),
  - FCP's step with no reshuffle charged, and their ratio,
  - each baseline's step (no reshuffle, as `fcp compare` charges them),
  - the share of tokens FCP moves away from their dataloader worker, against a
    floor computed here (below),
  - a lower bound on FCP's step and the step's ratio to it.

Lower bound: when `fcp simulate --json` carries lower-bound fields (any
number whose key ends in `_bound_s`, or the values of a `lower_bounds`
object, in seconds) their maximum; otherwise the plan's largest per-worker
busy compute (`worker_stats[].busy_s`), which no schedule of that plan beats.
The column says which was used.

Floor on the tokens reshuffled: in the dataloader layout (rank r holds global
tokens [floor(rT/N), floor((r+1)T/N))) a worker whose compute exceeds the mean
must give away at least its densest query tokens covering the excess (causal:
token at position p does p + 1 pairs; full mask: a sequence's length); every
token it sheds lands on a worker that, beyond the free room the cap leaves
it, must send as many away. floor = shed + max(0, shed - free room).

Needs only Debian's python3 and the `fcp` binary. Deterministic: the same
binary gives the same table. Example:

  python3 scripts/step_bench.py --workers 16,64 --json before.json > before.md
  python3 scripts/step_bench.py --workers 256 --batches lognormal-0,allshort
"""

import argparse
import bisect
import json
import os
import subprocess
import sys
import tempfile

# name -> `fcp workload` arguments (besides --workers and --seed).
BATCHES = {
    "lognormal-0": (["--dist", "lognormal"], 0),
    "lognormal-1": (["--dist", "lognormal"], 1),
    "lognormal-2": (["--dist", "lognormal"], 2),
    "bimodal": (["--dist", "bimodal"], 0),
    "allshort": (["--dist", "uniform", "--min-len", "64", "--max-len", "2048"], 0),
    "giant": (["--dist", "fixed", "--max-len", "{giant}"], 0),
    "uniform16k-128k": (["--dist", "uniform", "--min-len", "16384", "--max-len", "131072"], 0),
    # Heavier tails than the paper's, same token-weighted median (mu + sigma^2 = 8.32).
    "heavy-s2.0": (["--dist", "lognormal", "--sigma", "2.0", "--mu", "4.32"], 0),
    "heavy-s2.3": (["--dist", "lognormal", "--sigma", "2.3", "--mu", "3.03"], 0),
}
BASELINES = ["bytescale", "magi", "ring", "wlb"]
TOKENS_PER_WORKER = 32768


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit("step_bench: '%s' failed (exit %d): %s" % (" ".join(cmd), r.returncode, r.stderr.strip()))
    return r.stdout


def homes(total, workers):
    """First global token of each dataloader rank, and the end."""
    return [r * total // workers for r in range(workers + 1)]


def reshuffled_tokens(plan, bounds):
    offsets = [0]
    for n in plan["sequences"]:
        offsets.append(offsets[-1] + n)
    moved = 0
    for block in plan["blocks"]:
        w = block["worker"]
        lo, hi = bounds[w], bounds[w + 1]
        for seq, start, length in block["segments"]:
            g0 = offsets[seq] + start
            g1 = g0 + length
            kept = max(0, min(g1, hi) - max(g0, lo))
            moved += length - kept
    return moved


def reshuffle_floor(lengths, workers, mask, cap):
    """Least tokens any plan must move from their dataloader worker (docstring)."""
    total = sum(lengths)
    bounds = homes(total, workers)
    pieces = [[] for _ in range(workers)]  # per home: (first pos, end pos, seq length)
    g = 0
    for n in lengths:
        a = 0
        while a < n:
            r = bisect.bisect_right(bounds, g + a) - 1
            b = min(n, bounds[r + 1] - g)
            pieces[r].append((a, b, n))
            a = b
        g += n

    def work_at_least(piece, v):
        """(tokens, pairs) of the piece's tokens whose work is >= v."""
        a, b, n = piece
        if mask == "full":
            return (b - a, (b - a) * n) if n >= v else (0, 0)
        lo = max(a, v - 1)  # causal: position p does p + 1 pairs
        if lo >= b:
            return 0, 0
        return b - lo, (b * (b + 1) - lo * (lo + 1)) // 2

    def load(ps):
        return sum(work_at_least(p, 0)[1] for p in ps)

    loads = [load(ps) for ps in pieces]
    mean = sum(loads) / workers
    shed = 0
    for r in range(workers):
        excess = loads[r] - mean
        if excess <= 0:
            continue
        # The largest v whose tokens of work >= v cover the excess; then only
        # as many of the tokens at exactly v as needed.
        lo, hi = 1, max(n for _, _, n in pieces[r]) + 1
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if sum(work_at_least(p, mid)[1] for p in pieces[r]) >= excess:
                lo = mid
            else:
                hi = mid
        above_t = sum(work_at_least(p, lo + 1)[0] for p in pieces[r])
        above_w = sum(work_at_least(p, lo + 1)[1] for p in pieces[r])
        shed += above_t + -(-(excess - above_w) // lo) if excess > above_w else above_t
    room = sum(max(0, cap - (bounds[r + 1] - bounds[r])) for r in range(workers) if loads[r] <= mean)
    return shed + max(0, shed - room)


def sim_bound(sim):
    """(lower bound in seconds, where it came from)."""
    found = []
    for key, value in sim.items():
        if isinstance(value, (int, float)) and key.endswith("_bound_s"):
            found.append(value)
    lb = sim.get("lower_bounds")
    if isinstance(lb, dict):
        found += [v for v in lb.values() if isinstance(v, (int, float))]
    if found:
        return max(found), "simulate"
    return max(w["busy_s"] for w in sim["worker_stats"]), "max busy"


def measure(fcp, tmp, batch, workers, profiles, baselines):
    args, seed = BATCHES[batch]
    args = [a.replace("{giant}", str(workers * TOKENS_PER_WORKER)) for a in args]
    lengths_path = os.path.join(tmp, "l.txt")
    run([fcp, "workload", "--workers", str(workers), "--seed", str(seed), "--out", lengths_path] + args)
    lengths = [int(x) for x in open(lengths_path).read().split()]
    plans = {}
    for planner in ["fcp"] + baselines:
        path = os.path.join(tmp, planner + ".json")
        run([fcp, "plan", "--lengths", lengths_path, "--workers", str(workers), "--planner", planner,
             "--out", path])
        plans[planner] = path
    plan = json.load(open(plans["fcp"]))
    total = sum(lengths)
    moved = reshuffled_tokens(plan, homes(total, workers))
    floor = int(reshuffle_floor(lengths, workers, plan["mask"]["kind"], plan["token_cap"]))
    rows = []
    for profile in profiles:
        def simulate(path, reshuffle):
            return json.loads(run([fcp, "simulate", "--plan", path, "--profile", profile, "--json",
                                   "--per-worker", "--no-validate", "--reshuffle", reshuffle]))
        overlap = simulate(plans["fcp"], "overlap")
        none = simulate(plans["fcp"], "none")
        bound, source = sim_bound(overlap)
        row = {
            "batch": batch, "workers": workers, "profile": profile,
            "fcp_overlap_ms": overlap["total_time_s"] * 1e3,
            "fcp_none_ms": none["total_time_s"] * 1e3,
            "bound_ms": bound * 1e3, "bound_source": source,
            "reshuffled": moved / total, "floor": floor / total,
            "compute_imbalance": none["compute_imbalance"],
        }
        for b in baselines:
            row[b + "_ms"] = simulate(plans[b], "none")["total_time_s"] * 1e3
        rows.append(row)
    return rows


def markdown(rows, baselines):
    head = ["batch", "N", "profile", "FCP overlap ms", "FCP none ms", "overlap / none"]
    head += [b + " ms" for b in baselines]
    head += ["FCP overlap / best baseline", "reshuffled", "floor", "reshuffled / floor",
             "bound ms", "overlap / bound"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * 3 + "---:|" * (len(head) - 3)]
    for r in rows:
        best = min(r[b + "_ms"] for b in baselines) if baselines else float("nan")
        ratio_floor = r["reshuffled"] / r["floor"] if r["floor"] > 0 else float("inf")
        cells = [r["batch"], str(r["workers"]), r["profile"], "%.1f" % r["fcp_overlap_ms"],
                 "%.1f" % r["fcp_none_ms"], "%.2f" % (r["fcp_overlap_ms"] / r["fcp_none_ms"])]
        cells += ["%.1f" % r[b + "_ms"] for b in baselines]
        cells += ["%.2f" % (r["fcp_overlap_ms"] / best), "%.1f%%" % (100 * r["reshuffled"]),
                  "%.1f%%" % (100 * r["floor"]),
                  "-" if ratio_floor == float("inf") else "%.1f" % ratio_floor,
                  "%.1f (%s)" % (r["bound_ms"], r["bound_source"]),
                  "%.2f" % (r["fcp_overlap_ms"] / r["bound_ms"])]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fcp", default=os.path.join(os.path.dirname(__file__), "..", "build", "fcp"))
    p.add_argument("--workers", default="16,64", help="comma-separated N (256 is slow: seconds a plan)")
    p.add_argument("--profiles", default="gpu-x,gpu-y")
    p.add_argument("--batches", default=",".join(BATCHES), help="comma-separated, from: " + ", ".join(BATCHES))
    p.add_argument("--baselines", default=",".join(BASELINES))
    p.add_argument("--json", help="also write the rows here")
    o = p.parse_args()
    try:
        workers = [int(w) for w in o.workers.split(",")]
    except ValueError:
        p.error("--workers takes comma-separated integers, got '%s'" % o.workers)
    batches = o.batches.split(",")
    for b in batches:
        if b not in BATCHES:
            p.error("unknown batch '%s' (known: %s)" % (b, ", ".join(BATCHES)))
    baselines = [b for b in o.baselines.split(",") if b]
    if not os.access(o.fcp, os.X_OK):
        p.error("no fcp binary at '%s' (build it, or pass --fcp)" % o.fcp)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in workers:
            for b in batches:
                print("step_bench: %s N=%d" % (b, n), file=sys.stderr)
                rows += measure(o.fcp, tmp, b, n, o.profiles.split(","), baselines)
    sys.stdout.write(markdown(rows, baselines))
    if o.json:
        with open(o.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
