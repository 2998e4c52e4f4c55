"""Plans the same batches with two `fcp` binaries (a planner before and after a
change) and simulates both plans where they differ, so that a change is
judged by the step it gives wherever it changes a plan.

Per option set (each a string of `fcp plan` options, e.g. "--coalesce 1"),
distribution, N and seed: the batch from `fcp workload`, a plan from --old and
one from --new with the same options; identical files print "same", others
both simulated steps (`fcp simulate` of --old, the profile's default rules:
reshuffle overlapped, as the default plan is made for it). Prints one
markdown row per changed plan and a summary: plans changed, faster, slower,
and the geometric mean of new / old over the changed plans and over all.

  python3 scripts/plan_ab.py --old /tmp/fcp-before --new build/fcp \\
      --options "--coalesce 1;--coalesce 2;--block-size 1024;--block-size 2048" \\
      --dists lognormal,bimodal,pareto --workers 64,128,256 --seeds 0,1,2

Needs only Debian's python3; deterministic (plans and simulations are)."""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"plan_ab: {' '.join(cmd)} failed: {r.stderr.strip()}")
    return r.stdout


def step_ms(fcp, plan):
    out = json.loads(run([fcp, "simulate", "--plan", plan, "--json", "--no-validate"]))
    return out["total_time_s"] * 1e3


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--old", required=True, help="fcp binary before the change (also simulates)")
    p.add_argument("--new", required=True, help="fcp binary after the change")
    p.add_argument("--options", default="", help="option sets, ';'-separated")
    p.add_argument("--dists", default="lognormal")
    p.add_argument("--workers", default="64,128,256")
    p.add_argument("--seeds", default="0,1,2")
    o = p.parse_args()
    ratios, changed = [], []  # new / old per plan; per changed plan
    print("| batch | options | N | seed | step old -> new |")
    print("|---|---|---:|---:|---|")
    with tempfile.TemporaryDirectory() as tmp:
        lengths, a, b = (os.path.join(tmp, f) for f in ("l.txt", "a.json", "b.json"))
        for options in o.options.split(";"):
            for dist in o.dists.split(","):
                for n in o.workers.split(","):
                    for seed in o.seeds.split(","):
                        run([o.old, "workload", "--dist", dist, "--workers", n, "--seed", seed,
                             "--out", lengths])
                        for fcp, out in ((o.old, a), (o.new, b)):
                            run([fcp, "plan", "--lengths", lengths, "--workers", n, "--out", out]
                                + options.split())
                        with open(a, "rb") as fa, open(b, "rb") as fb:
                            if fa.read() == fb.read():
                                ratios.append(1.0)
                                continue
                        old, new = step_ms(o.old, a), step_ms(o.old, b)
                        ratios.append(new / old)
                        changed.append(new / old)
                        print(f"| {dist} | `{options}` | {n} | {seed} | {old:.2f} -> {new:.2f} ms "
                              f"({new / old - 1:+.1%}) |", flush=True)

    def geo(xs):
        return math.exp(sum(math.log(x) for x in xs) / len(xs)) - 1 if xs else 0.0

    print(f"\n{len(changed)} of {len(ratios)} plans changed: "
          f"{sum(r < 1 for r in changed)} faster, {sum(r > 1 for r in changed)} slower; "
          f"geometric mean {geo(changed):+.1%} over the changed, {geo(ratios):+.1%} over all")


if __name__ == "__main__":
    main()
