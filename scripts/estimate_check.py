#!/usr/bin/env python3
"""The step estimate (include/fcp/step_estimate.h) against the simulated step.

For every batch of the planner's benchmark set (scripts/step_bench.py's
BATCHES), worker count and hardware profile: FCP's plan as `fcp plan` makes
it, its step simulated (`fcp simulate --json`) and estimated (`fcp estimate`)
under both reshuffle rules (none: the plan's layout fed; overlap: the
reshuffle from the dataloader layout charged), and

  - per row, estimate / simulated step - 1 (the error), with the median and
    worst |error| per N, profile and rule;
  - rank agreement on candidates: per batch (at --candidate-workers), the
    plans of the variants FCP's tuning tries (fcp/fcp_tuning.h: heavy
    fraction 0.1, 0.2, 0.3, 0.4, 0; imbalance bound 0.1, 1), and over all
    pairs of them whose simulated steps differ by more than --tie, the
    share the estimate orders as the simulator does.

Needs only Debian's python3 and the `fcp` binary; deterministic. Example:

  python3 scripts/estimate_check.py --workers 16,64,256 --json est.json > est.md
"""

import argparse
import itertools
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from step_bench import BATCHES, TOKENS_PER_WORKER, run  # noqa: E402

CANDIDATES = [[], ["--heavy-fraction", "0.2"], ["--heavy-fraction", "0.3"],
              ["--heavy-fraction", "0.4"], ["--heavy-fraction", "0"], ["--max-imbalance", "0.1"],
              ["--max-imbalance", "1"]]
RULES = ["none", "overlap"]


def lengths_file(fcp, tmp, batch, workers):
    args, seed = BATCHES[batch]
    args = [a.replace("{giant}", str(workers * TOKENS_PER_WORKER)) for a in args]
    path = os.path.join(tmp, "l.txt")
    run([fcp, "workload", "--workers", str(workers), "--seed", str(seed), "--out", path] + args)
    return path


def judge(fcp, plan, profile, rule):
    """(simulated step, estimated step, the simulator's lower bound) in ms."""
    sim = json.loads(run([fcp, "simulate", "--plan", plan, "--profile", profile, "--json",
                          "--no-validate", "--reshuffle", rule]))
    est = json.loads(run([fcp, "estimate", "--plan", plan, "--profile", profile, "--reshuffle",
                          rule]))
    return sim["total_time_s"] * 1e3, est["total_s"] * 1e3, sim["bound_s"] * 1e3


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fcp", default=os.path.join(os.path.dirname(__file__), "..", "build", "fcp"))
    p.add_argument("--workers", default="16,64")
    p.add_argument("--candidate-workers", default="16",
                   help="N at which the tuning candidates are ranked ('' = none)")
    p.add_argument("--profiles", default="gpu-x,gpu-y")
    p.add_argument("--batches", default=",".join(BATCHES))
    p.add_argument("--tie", type=float, default=0.001,
                   help="pairs whose simulated steps differ by less than this share are not ranked")
    p.add_argument("--json", help="also write the rows here")
    o = p.parse_args()
    if not os.access(o.fcp, os.X_OK):
        p.error("no fcp binary at '%s' (build it, or pass --fcp)" % o.fcp)
    workers = [int(w) for w in o.workers.split(",") if w]
    cand_workers = [int(w) for w in o.candidate_workers.split(",") if w]
    profiles = o.profiles.split(",")
    batches = o.batches.split(",")
    for b in batches:
        if b not in BATCHES:
            p.error("unknown batch '%s'" % b)
    rows, ranks = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for n in sorted(set(workers) | set(cand_workers)):
            for batch in batches:
                lengths = lengths_file(o.fcp, tmp, batch, n)
                plans = []
                for k, extra in enumerate(CANDIDATES if n in cand_workers else CANDIDATES[:1]):
                    path = os.path.join(tmp, "p%d.json" % k)
                    run([o.fcp, "plan", "--lengths", lengths, "--workers", str(n), "--out", path]
                        + extra)
                    plans.append(path)
                for profile in profiles:
                    for rule in RULES:
                        judged = [judge(o.fcp, plan, profile, rule) for plan in plans]
                        if n in workers:
                            sim, est, _ = judged[0]
                            rows.append({"batch": batch, "workers": n, "profile": profile,
                                         "rule": rule, "sim_ms": sim, "est_ms": est,
                                         "error": est / sim - 1})
                        if len(judged) > 1:
                            same = by_bound = total = 0
                            for (s1, e1, b1), (s2, e2, b2) in itertools.combinations(judged, 2):
                                if abs(s1 - s2) <= o.tie * max(s1, s2):
                                    continue
                                total += 1
                                same += (s1 < s2) == (e1 < e2)
                                by_bound += (s1 < s2) == (b1 < b2)
                            ranks.append({"batch": batch, "workers": n, "profile": profile,
                                          "rule": rule, "pairs": total, "agree": same,
                                          "bound_agrees": by_bound, "candidates": judged})
    out = ["| N | profile | rule | rows | median error | median abs error | worst error |",
           "|---:|---|---|---:|---:|---:|---:|"]
    groups = {}
    for r in rows:
        groups.setdefault((r["workers"], r["profile"], r["rule"]), []).append(r["error"])
    everything = [r["error"] for r in rows]
    for (n, profile, rule), errs in sorted(groups.items()):
        worst = max(errs, key=abs)
        out.append("| %d | %s | %s | %d | %+.1f%% | %.1f%% | %+.1f%% |" % (
            n, profile, rule, len(errs), 100 * statistics.median(errs),
            100 * statistics.median(map(abs, errs)), 100 * worst))
    if everything:
        out.append("| all | | | %d | %+.1f%% | %.1f%% | %+.1f%% |" % (
            len(everything), 100 * statistics.median(everything),
            100 * statistics.median(map(abs, everything)), 100 * max(everything, key=abs)))
    if ranks:
        out += ["", "| N | profile | rule | candidate pairs ranked | estimate: same order as "
                "simulated | lower bound: same order |", "|---:|---|---|---:|---:|---:|"]
        share = lambda part, whole: 100 * part / whole if whole else 100
        rgroups = {}
        for r in ranks:
            g = rgroups.setdefault((r["workers"], r["profile"], r["rule"]), [0, 0, 0])
            g[0] += r["pairs"]
            g[1] += r["agree"]
            g[2] += r["bound_agrees"]
        rgroups[("all", "", "")] = [sum(g[k] for g in list(rgroups.values())) for k in range(3)]
        for (n, profile, rule), (total, same, by_bound) in rgroups.items():
            out.append("| %s | %s | %s | %d | %.1f%% | %.1f%% |" % (
                n, profile, rule, total, share(same, total), share(by_bound, total)))
    out += ["", "| batch | N | profile | rule | simulated ms | estimate ms | error |",
            "|---|---:|---|---|---:|---:|---:|"]
    for r in rows:
        out.append("| %s | %d | %s | %s | %.2f | %.2f | %+.1f%% |" % (
            r["batch"], r["workers"], r["profile"], r["rule"], r["sim_ms"], r["est_ms"],
            100 * r["error"]))
    print("\n".join(out))
    if o.json:
        with open(o.json, "w") as f:
            json.dump({"rows": rows, "ranks": ranks}, f, indent=1)


if __name__ == "__main__":
    main()
