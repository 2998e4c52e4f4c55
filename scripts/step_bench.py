#!/usr/bin/env python3
"""The planner's benchmark set, judged by the simulated step (issue 17).

For every batch of the set, worker count and hardware profile: plan with FCP
and each baseline (`fcp plan`), simulate (`fcp simulate --json`) and report

  - FCP's step with the transparent reshuffle overlapped (the default users get),
  - FCP's step with no reshuffle charged, and their ratio,
  - each baseline's step (no reshuffle, as `fcp compare` charges them),
  - the share of tokens FCP moves away from their dataloader worker, against
    the reshuffle floor, both as `fcp inspect` reports them (the floor is
    ComputeReshuffleFloor, include/fcp/reshuffle_floor.h),
  - the step's lower bound (`bound_s` of `fcp simulate --json`, with the
    reshuffle charged: include/fcp/lower_bounds.h) and the step's ratio to it.

Needs only Debian's python3 and the `fcp` binary. Deterministic: the same
binary gives the same table. Example:

  python3 scripts/step_bench.py --workers 16,64 --json before.json > before.md
  python3 scripts/step_bench.py --workers 256 --batches lognormal-0,allshort
"""

import argparse
import json
import os
import re
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


def inspect_reshuffle(fcp, plan_path):
    """(tokens reshuffled, floor tokens) as `fcp inspect` prints them."""
    text = run([fcp, "inspect", "--plan", plan_path])
    moved = re.search(r"reshuffle: (\d+) tokens", text)
    floor = re.search(r"floor (\d+) tokens", text)
    if not moved or not floor:
        sys.exit("step_bench: 'fcp inspect' printed no reshuffle or floor line for " + plan_path)
    return int(moved.group(1)), int(floor.group(1))


def measure(fcp, tmp, batch, workers, profiles, baselines, fcp_args=()):
    args, seed = BATCHES[batch]
    fcp_args = list(fcp_args)
    args = [a.replace("{giant}", str(workers * TOKENS_PER_WORKER)) for a in args]
    lengths_path = os.path.join(tmp, "l.txt")
    run([fcp, "workload", "--workers", str(workers), "--seed", str(seed), "--out", lengths_path] + args)
    lengths = [int(x) for x in open(lengths_path).read().split()]
    plans = {}
    for planner in ["fcp"] + baselines:
        path = os.path.join(tmp, planner + ".json")
        run([fcp, "plan", "--lengths", lengths_path, "--workers", str(workers), "--planner", planner,
             "--out", path] + (fcp_args if planner == "fcp" else []))
        plans[planner] = path
    total = sum(lengths)
    moved, floor = inspect_reshuffle(fcp, plans["fcp"])
    rows = []
    for profile in profiles:
        def simulate(path, reshuffle):
            return json.loads(run([fcp, "simulate", "--plan", path, "--profile", profile, "--json",
                                   "--per-worker", "--no-validate", "--reshuffle", reshuffle]))
        overlap = simulate(plans["fcp"], "overlap")
        none = simulate(plans["fcp"], "none")
        bound = overlap["bound_s"]
        row = {
            "batch": batch, "workers": workers, "profile": profile,
            "fcp_overlap_ms": overlap["total_time_s"] * 1e3,
            "fcp_none_ms": none["total_time_s"] * 1e3,
            "bound_ms": bound * 1e3,
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
                  "%.1f" % r["bound_ms"],
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
    p.add_argument("--fcp-args", default="",
                   help="extra `fcp plan` arguments for FCP alone, space-separated (ablations: "
                        "'--rescue-max-split 0', '--traffic-leveling false', ...)")
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
                rows += measure(o.fcp, tmp, b, n, o.profiles.split(","), baselines, o.fcp_args.split())
    sys.stdout.write(markdown(rows, baselines))
    if o.json:
        with open(o.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
