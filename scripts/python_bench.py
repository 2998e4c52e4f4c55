#!/usr/bin/env python3
"""What planning from Python costs over planning in C++ (docs/python.md).

For one batch (lognormal, `--tokens-per-worker` tokens on each of N workers),
times, `--repeats` times each and reporting the median:
  python  fcp.plan(lengths_list, ...) end to end, from a Python list of ints
          (what a dataloader has), wrapper, conversion and result object included;
  core    the MakePlan call inside that same fcp.plan (Plan.planning_seconds);
  cli     MakePlan in the `fcp plan` command (its "planned in X ms"), when found;
  bench   the Google Benchmark bench/planner_bench when given with --bench
          (its BM_ name filter is --bench-filter), reported as it prints.
Overhead = python / cli - 1 (or python / core - 1 without the CLI).

Run: python scripts/python_bench.py [--workers 256] [--cli build/fcp]
"""
import argparse
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import time

import fcp

REPO = pathlib.Path(__file__).resolve().parent.parent


def find_cli(path):
    if path:
        return path
    if os.environ.get("FCP_CLI"):
        return os.environ["FCP_CLI"]
    for candidate in sorted(REPO.glob("build*/fcp")):
        if os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def time_cli(cli, lengths, args, repeats):
    with tempfile.TemporaryDirectory() as tmp:
        lengths_path = pathlib.Path(tmp) / "lengths.txt"
        lengths_path.write_text("\n".join(map(str, lengths)) + "\n")
        times = []
        for _ in range(repeats):
            result = subprocess.run(
                [cli, "plan", "--lengths", str(lengths_path), "--workers", str(args.workers),
                 "--block-size", str(args.block_size), "--coalesce", str(args.coalesce),
                 "--out", str(pathlib.Path(tmp) / "plan.json")],
                capture_output=True, text=True, check=True)
            times.append(float(re.search(r"planned in ([0-9.]+) ms", result.stderr).group(1)) / 1e3)
        return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=256)
    parser.add_argument("--tokens-per-worker", type=int, default=32768)
    parser.add_argument("--max-len", type=int, default=524288)
    parser.add_argument("--block-size", type=int, default=4096)
    parser.add_argument("--coalesce", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--cli", help="the fcp command (default $FCP_CLI or build*/fcp)")
    parser.add_argument("--bench", help="bench/planner_bench binary to run as well")
    parser.add_argument("--bench-filter", default=".*")
    args = parser.parse_args()

    lengths = fcp.workload("lognormal", workers=args.workers,
                           tokens_per_worker=args.tokens_per_worker, max_len=args.max_len,
                           seed=args.seed)
    lengths_list = [int(x) for x in lengths]  # a dataloader hands over Python ints
    kwargs = dict(workers=args.workers, block_size=args.block_size, coalesce=args.coalesce)
    fcp.plan(lengths_list, **kwargs)  # warm-up: page in code and allocator

    python_s, core_s = [], []
    for _ in range(args.repeats):
        start = time.perf_counter()
        plan = fcp.plan(lengths_list, **kwargs)
        python_s.append(time.perf_counter() - start)
        core_s.append(plan.planning_seconds)

    print(f"batch: lognormal, N = {args.workers}, {args.tokens_per_worker} tokens/worker, "
          f"{len(lengths)} sequences, {plan.total_tokens} tokens, block {args.block_size}, "
          f"coalesce {args.coalesce}, seed {args.seed}; {plan.num_blocks} blocks; "
          f"median of {args.repeats}")
    py, core = statistics.median(python_s), statistics.median(core_s)
    print(f"  python fcp.plan (end to end):   {py * 1e3:9.2f} ms")
    print(f"  core MakePlan inside fcp.plan:  {core * 1e3:9.2f} ms   "
          f"(binding overhead {(py - core) * 1e3:.2f} ms = {100 * (py / core - 1):.2f}%)")
    reference = core
    cli = find_cli(args.cli)
    if cli:
        c = statistics.median(time_cli(cli, lengths, args, args.repeats))
        print(f"  cli fcp plan (MakePlan):        {c * 1e3:9.2f} ms   "
              f"(python / cli - 1 = {100 * (py / c - 1):+.2f}%)")
        reference = c
    if args.bench:
        result = subprocess.run([args.bench, f"--benchmark_filter={args.bench_filter}"],
                                capture_output=True, text=True, check=True)
        print("  google benchmark:\n" + "\n".join("    " + l for l in result.stdout.splitlines()))
    overhead = py / reference - 1
    print(f"overhead: {100 * overhead:+.2f}% ({'within' if overhead < 0.10 else 'ABOVE'} the 10% budget)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
