#!/usr/bin/env python3
"""Where a plan's step goes above its mean busy time, per worker and per node.

For each plan and profile: `fcp simulate --per-worker --json` (the
simulator's own per-worker busy time: modelled kernel time plus one launch
per stage with work), and from the plan file the kernels each worker runs
(forward and backward stages with compute). Prints one line a plan:

  step          the simulated step (ms)
  mean busy     mean of the workers' busy time (ms): perfect balance
  kernels       most forward + backward stages with compute on one worker
  busy +        the busiest worker's busy time over the mean (worker level)
  node +        the busiest node's mean busy time over the mean (node level:
                what exchanges inside a node cannot lower)
  pairs +       the most forward FLOPs (token pairs) on a worker over the mean
  pairs-max busy +  the busy time of the worker with the most pairs over the
                mean: below `busy +` where the token pairs do not rank the
                workers as kernel time does (short sequences run below peak)

Needs only python3 and the `fcp` binary. Example (docs/planner-quality.md,
"All-short batches against ByteScale-like"):

  python3 scripts/busy_gap.py --fcp build/fcp --reshuffle overlap fcp.json bytescale.json
"""

import argparse
import json
import subprocess
import sys


def simulate(fcp, plan, profile, reshuffle):
    r = subprocess.run([fcp, "simulate", "--plan", plan, "--profile", profile, "--json",
                        "--per-worker", "--reshuffle", reshuffle],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit("busy_gap: fcp simulate failed on %s: %s" % (plan, r.stderr.strip()))
    return json.loads(r.stdout)


def kernels(plan):
    """Most forward + backward stages with compute on one worker."""
    owner = [b["worker"] for b in plan["blocks"]]
    count = [0] * plan["workers"]
    for stage in plan["forward"] + plan["backward"]:
        for w in {owner[q] for q, _ in stage["compute"]}:
            count[w] += 1
    return max(count)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("plans", nargs="+")
    ap.add_argument("--fcp", default="build/fcp")
    ap.add_argument("--profiles", default="gpu-x,gpu-y")
    ap.add_argument("--reshuffle", default="none", help="as fcp simulate --reshuffle")
    ap.add_argument("--node-workers", type=int, default=8)
    args = ap.parse_args()
    for path in args.plans:
        plan = json.load(open(path))
        for profile in args.profiles.split(","):
            d = simulate(args.fcp, path, profile, args.reshuffle)
            busy = [w["busy_s"] for w in d["worker_stats"]]
            flops = [w["forward_flops"] for w in d["worker_stats"]]
            n = len(busy)
            mean = sum(busy) / n
            node = args.node_workers
            node_mean = max(sum(busy[i:i + node]) / len(busy[i:i + node]) for i in range(0, n, node))
            top = flops.index(max(flops))
            pct = lambda v: "%+.2f%%" % (100 * (v / mean - 1))
            print("%s %s: step %.4f ms, mean busy %.4f ms, kernels %d, busy %s, node %s, "
                  "pairs %+.2f%%, pairs-max busy %s"
                  % (path, profile, d["total_time_s"] * 1e3, mean * 1e3, kernels(plan), pct(max(busy)),
                     pct(node_mean), 100 * (max(flops) / (sum(flops) / n) - 1), pct(busy[top])))


if __name__ == "__main__":
    main()
