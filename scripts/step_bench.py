#!/usr/bin/env python3
"""The planner's benchmark set, judged by the simulated step (issue 17).

For every batch of the set, worker count and hardware profile: plan with FCP
and each baseline (`fcp plan`), simulate (`fcp simulate --json`) and report

  - FCP's step with the transparent reshuffle overlapped (the default users get),
  - FCP's step with no reshuffle charged, and their ratio,
  - each baseline's step under the same two rules (DESIGN.md section 8, equal
    terms): no reshuffle charged, and the reshuffle to its own layout charged
    (overlapped), and FCP's step over the best baseline's under each rule,
  - the share of tokens FCP moves away from their dataloader worker, against
    the reshuffle floor, both as `fcp inspect` reports them (the floor is
    ComputeReshuffleFloor, include/fcp/reshuffle_floor.h),
  - the step's lower bound (`bound_s` of `fcp simulate --json`, with the
    reshuffle charged: include/fcp/lower_bounds.h) and the step's ratio to it.

Needs only Debian's python3 and the `fcp` binary. Deterministic: the same
binary gives the same table. Example:

  python3 scripts/step_bench.py --workers 16,64 --json before.json > before.md
  python3 scripts/step_bench.py --workers 256 --batches lognormal-0,allshort
  # a change judged against before.json: per-row change, geometric means per N
  python3 scripts/step_bench.py --workers 16,64 --fcp other/fcp --compare before.json
  # held out: the set's distributions at other seeds (rows named lognormal@3, ...)
  python3 scripts/step_bench.py --workers 16,32 --seeds 3,4,5 --batches lognormal-0,heavy-s2.0
"""

import argparse
import json
import math
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


def measure(fcp, tmp, batch, workers, profiles, baselines, fcp_args=(), seed=None):
    """Rows of one batch (at its own seed, or at `seed`, named batch@seed)."""
    args, own_seed = BATCHES[batch]
    if seed is None:
        seed = own_seed
    else:
        batch = "%s@%d" % (family(batch), seed)
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
        for b in baselines:  # each rule as FCP's: no reshuffle, and its own charged
            row[b + "_none_ms"] = simulate(plans[b], "none")["total_time_s"] * 1e3
            row[b + "_overlap_ms"] = simulate(plans[b], "overlap")["total_time_s"] * 1e3
        rows.append(row)
    return rows


def family(batch):
    """The batch's distribution: its name without a trailing seed ("lognormal-0" -> "lognormal")."""
    return re.sub(r"-\d+$", "", batch)


def compare(rows, before):
    """Markdown: each row's FCP step (reshuffle overlap) against the same row of `before`, and
    per N the geometric means of the step and of step / bound, and the rows more than 1% slower."""
    key = lambda r: (r["batch"], r["workers"], r["profile"])
    old = {key(r): r for r in before}
    missing = [k for k in map(key, rows) if k not in old]
    if missing:
        sys.exit("step_bench: --compare file has no row %s" % (missing[0],))
    out = ["| batch | N | profile | before ms | after ms | change |", "|---|---|---|---:|---:|---:|"]
    by_n = {}
    for r in rows:
        b = old[key(r)]
        change = r["fcp_overlap_ms"] / b["fcp_overlap_ms"]
        out.append("| %s | %d | %s | %.1f | %.1f | %+.2f%% |" % (r["batch"], r["workers"], r["profile"],
                   b["fcp_overlap_ms"], r["fcp_overlap_ms"], 100 * (change - 1)))
        by_n.setdefault(r["workers"], []).append((change, b["fcp_overlap_ms"] / b["bound_ms"],
                                                  r["fcp_overlap_ms"] / r["bound_ms"]))
    out += ["", "| N | rows | step, geometric mean | step / bound before -> after | rows > 1% slower |",
            "|---|---:|---:|---|---:|"]
    geomean = lambda xs: math.exp(sum(math.log(x) for x in xs) / len(xs))
    for n, v in sorted(by_n.items()):
        out.append("| %d | %d | %+.2f%% | %.4f -> %.4f | %d |" % (
            n, len(v), 100 * (geomean([c for c, _, _ in v]) - 1), geomean([x for _, x, _ in v]),
            geomean([y for _, _, y in v]), sum(1 for c, _, _ in v if c > 1.01)))
    return "\n".join(out) + "\n"


def markdown(rows, baselines):
    head = ["batch", "N", "profile", "FCP overlap ms", "FCP none ms", "overlap / none"]
    head += [b + " none / overlap ms" for b in baselines]
    head += ["FCP / best baseline, none", "FCP / best baseline, overlap", "reshuffled", "floor",
             "reshuffled / floor",
             "bound ms", "overlap / bound"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * 3 + "---:|" * (len(head) - 3)]
    for r in rows:
        # Each ratio within one rule: FCP and the baselines all uncharged, or all charged.
        best = {rule: min(r[b + "_" + rule + "_ms"] for b in baselines) if baselines else float("nan")
                for rule in ("none", "overlap")}
        ratio_floor = r["reshuffled"] / r["floor"] if r["floor"] > 0 else float("inf")
        cells = [r["batch"], str(r["workers"]), r["profile"], "%.1f" % r["fcp_overlap_ms"],
                 "%.1f" % r["fcp_none_ms"], "%.2f" % (r["fcp_overlap_ms"] / r["fcp_none_ms"])]
        cells += ["%.1f / %.1f" % (r[b + "_none_ms"], r[b + "_overlap_ms"]) for b in baselines]
        cells += ["%.2f" % (r["fcp_" + rule + "_ms"] / best[rule]) if baselines else "-"
                  for rule in ("none", "overlap")]
        cells += ["%.1f%%" % (100 * r["reshuffled"]),
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
    p.add_argument("--seeds", default="",
                   help="comma-separated seeds to use instead of each batch's own (held-out checks); "
                        "batches of one distribution are measured once per seed, as NAME@SEED")
    p.add_argument("--compare", help="rows of an earlier --json run: also print each row's change")
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
    try:
        seeds = [int(x) for x in o.seeds.split(",") if x]
    except ValueError:
        p.error("--seeds takes comma-separated integers, got '%s'" % o.seeds)
    before = None
    if o.compare:
        try:
            with open(o.compare) as f:
                before = json.load(f)
        except (OSError, ValueError) as e:
            p.error("--compare: cannot read '%s': %s" % (o.compare, e))
    # (batch, seed) runs: each batch at its own seed, or one run per distribution and seed.
    runs = [(b, None) for b in batches]
    if seeds:
        firsts = {}
        for b in batches:
            firsts.setdefault(family(b), b)
        runs = [(b, s) for b in firsts.values() for s in seeds]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in workers:
            for b, seed in runs:
                print("step_bench: %s N=%d%s" % (b, n, "" if seed is None else " seed %d" % seed),
                      file=sys.stderr)
                rows += measure(o.fcp, tmp, b, n, o.profiles.split(","), baselines, o.fcp_args.split(),
                                seed)
    sys.stdout.write(markdown(rows, baselines))
    if before is not None:
        sys.stdout.write("\n" + compare(rows, before))
    if o.json:
        with open(o.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
