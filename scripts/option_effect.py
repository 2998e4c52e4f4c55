#!/usr/bin/env python3
"""What one boolean FCP knob does to the report card's rows: per profile, N
and benchmark mix (compare_runs.MIXES, seed 0 or --seed), `fcp compare --planners fcp
--reshuffle both` with the knob off and on, so every figure is the report
card's (scripts/planner_quality.py): rule (a) each plan in its own layout, no
reshuffle charged; (b) from the dataloader layout, the reshuffle overlapped.
Prints one Markdown row per batch and rule (step off -> on, their ratio, step
/ bound off -> on) and a summary per N and rule: rows faster / slower by more
than 0.1%, the geometric mean of on / off, the worst row, and how many rows
meet the report card's bound targets (a) <= 1.10, (b) <= 1.15 off and on.

  python3 scripts/option_effect.py --fcp build/fcp --flag spread-stages \\
      [--workers 16,64,256] [--profiles gpu-x,gpu-y] [--cache DIR]

Needs only Debian's python3; deterministic (plans and simulations are)."""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_runs import MIXES, Runner, one, table  # noqa: E402

RULES = {"own-layout": ("a", 1.10), "dataloader": ("b", 1.15)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fcp", default="build/fcp")
    ap.add_argument("--flag", required=True, help="a boolean `fcp compare` flag, without the --")
    ap.add_argument("--workers", default="16,64,256")
    ap.add_argument("--profiles", default="gpu-x,gpu-y")
    ap.add_argument("--seed", default="0", help="the batches' seed (held-out checks: 1, 2, ...)")
    ap.add_argument("--cache", default=None, help="reuse `fcp compare` results kept here")
    args = ap.parse_args()
    runner = Runner(args.fcp, args.cache)
    rows, summary = [], {}
    for profile in args.profiles.split(","):
        for n in args.workers.split(","):
            for mix, mix_args in MIXES.items():
                base = [a.replace("{giant}", str(int(n) * 32768)) for a in mix_args]
                base += ["--workers", n, "--seed", args.seed, "--planners", "fcp", "--profile", profile,
                         "--reshuffle", "both"]
                _, off = runner.compare(base + [f"--{args.flag}", "false"])
                _, on = runner.compare(base + [f"--{args.flag}", "true"])
                for rule, (name, target) in RULES.items():
                    a, b = one(off, rule=rule), one(on, rule=rule)
                    ratio = b["total_time_s"] / a["total_time_s"]
                    rows.append([profile, mix, n, name,
                                 f"{1e3 * a['total_time_s']:.2f} -> {1e3 * b['total_time_s']:.2f}",
                                 f"{ratio:.3f}", f"{a['bound_ratio']:.3f} -> {b['bound_ratio']:.3f}"])
                    s = summary.setdefault((n, name), {"rows": 0, "faster": 0, "slower": 0, "log": 0.0,
                                                       "worst": (0.0, ""), "met": [0, 0]})
                    s["rows"] += 1
                    s["faster"] += ratio < 0.999
                    s["slower"] += ratio > 1.001
                    s["log"] += math.log(ratio)
                    s["worst"] = max(s["worst"], (ratio, f"{mix}, {profile}"))
                    s["met"][0] += a["bound_ratio"] <= target
                    s["met"][1] += b["bound_ratio"] <= target
    print(table(["profile", "mix", "N", "rule", "step ms, off -> on", "on / off", "step / bound"],
                rows))
    print(table(["N", "rule", "rows", "faster", "slower", "geometric mean on / off", "worst on / off",
                 "rows within the bound target, off -> on"],
                [[n, name, s["rows"], s["faster"], s["slower"], f"{math.exp(s['log'] / s['rows']):.3f}",
                  f"{s['worst'][0]:.3f} ({s['worst'][1]})", f"{s['met'][0]} -> {s['met'][1]}"]
                 for (n, name), s in summary.items()]))


if __name__ == "__main__":
    main()
