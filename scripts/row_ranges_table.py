#!/usr/bin/env python3
"""FCP with whole-block K/V sends against row ranges (PlannerConfig::row_ranges,
docs/plan-format.md, "Who emits them"): per benchmark mix (compare_runs.MIXES,
seed 0), N and mask, the forward K/V tokens FCP's plan moves and the simulated
step (gpu-x) under both rules of `fcp compare --reshuffle both`: (a) each plan in
its own layout, no reshuffle (planned without the reshuffle locality), (b) from
the dataloader layout, the reshuffle overlapped (planned with it). Also checks
that the causal plans are byte-identical but for the recorded option.

Usage: scripts/row_ranges_table.py [--fcp build/tools/fcp/fcp] [--workers 16,64]
Prints the Markdown table; needs only Debian's python3."""
import argparse
import hashlib
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_runs import MIXES, Runner, table  # noqa: E402

PROFILE = "gpu-x"
MASKS = {"causal": ["--mask", "causal"],
         "window 4096": ["--mask", "sliding_window", "--window", "4096"]}
# (rule, `fcp plan` locality, `fcp simulate` reshuffle): as `fcp compare` pairs them.
RULES = [("a", "false", "none"), ("b", "true", "overlap")]
RULE_NAMES = {"a": "own-layout", "b": "dataloader"}


def forward_kv_tokens(plan):
    """Tokens the forward K/V sends move, each its rows (send_rows) or its whole block."""
    tokens = [sum(seg[2] for seg in b["segments"]) for b in plan["blocks"]]
    total = 0
    for stage in plan["forward"]:
        rows = {i: count for i, _, count in stage.get("send_rows", [])}
        for i, (block, _src, _dst) in enumerate(stage.get("send", [])):
            total += rows.get(i, tokens[block])
    return total


def without_option(text, name):
    """The plan file with the recorded option `name` taken out (what the
    byte-identity check compares)."""
    plan = json.loads(text)
    plan["planner_options"] = [o for o in plan.get("planner_options", []) if o[0] != name]
    return json.dumps(plan, sort_keys=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fcp", default="build/tools/fcp/fcp")
    ap.add_argument("--workers", default="16,64")
    args = ap.parse_args()
    runner = Runner(args.fcp)
    header = ["batch", "N", "mask", "rule", "forward K/V tokens, whole -> rows", "step ms, whole -> rows"]
    rows, slower, changed_causal = [], [], []
    checked = False
    with tempfile.TemporaryDirectory(prefix="fcp-rows-") as tmp:
        for n in map(int, args.workers.split(",")):
            for mix, mix_args in MIXES.items():
                lengths = os.path.join(tmp, "lengths.txt")
                dist = [a.replace("{giant}", str(n * 32768)) for a in mix_args]
                runner.run(["workload"] + dist + ["--workers", str(n), "--seed", "0", "--out", lengths])
                for mask, mask_args in MASKS.items():
                    for rule, locality, reshuffle in RULES:
                        got = {}
                        for rr in ("false", "true"):
                            plan_path = os.path.join(tmp, f"plan-{rr}.json")
                            runner.run(["plan", "--lengths", lengths, "--workers", str(n)] + mask_args +
                                       ["--network-flops-per-byte", repr(GPU_X_RATIO),
                                        "--reshuffle-locality", locality, "--row-ranges", rr,
                                        "--out", plan_path])
                            with open(plan_path) as f:
                                text = f.read()
                            _, out = runner.run(["simulate", "--plan", plan_path, "--profile", PROFILE,
                                                 "--reshuffle", reshuffle, "--json"])
                            got[rr] = (forward_kv_tokens(json.loads(text)),
                                       1e3 * json.loads(out)["total_time_s"],
                                       hashlib.sha256(without_option(text, "row_ranges").encode()).hexdigest())
                        (t0, s0, h0), (t1, s1, h1) = got["false"], got["true"]
                        if not checked:  # the plans and simulations are `fcp compare`'s
                            _, compared = runner.compare(
                                ["--lengths", lengths, "--workers", str(n), "--planners", "fcp",
                                 "--profile", PROFILE, "--reshuffle", "both", "--row-ranges", "true"]
                                + mask_args)
                            want = [r for r in compared if r["rule"] == RULE_NAMES[rule]][0]
                            assert abs(1e3 * want["total_time_s"] - s1) <= 1e-6 * s1, (want, s1)
                            checked = rule == "b"
                        if mask == "causal" and h0 != h1:
                            changed_causal.append((mix, n, rule))
                        if s1 > s0 * (1 + 1e-9):
                            slower.append((mix, n, mask, rule, s0, s1))
                        change = f" ({100 * (t1 - t0) / t0:+.1f}%)" if t0 else ""
                        rows.append([mix, n, mask, rule, f"{t0:,} -> {t1:,}{change}",
                                     f"{s0:.3f} -> {s1:.3f}"])
    print(table(header, rows))
    print(f"causal plans that differ beyond the recorded option: {changed_causal or 'none'}")
    print(f"rows slower with row ranges: {slower or 'none'}")


# The network ratio `fcp compare` plans with on gpu-x: NetworkFlopsPerByte
# (src/model/cost_model.cpp), peak x SM share x saturated efficiency / NIC
# bytes per second, in the same order of operations (so the same double);
# main() checks one row against `fcp compare`.
GPU_X_RATIO = 989e12 * (126.0 / 132.0) * 0.66 / 50e9


if __name__ == "__main__":
    main()
