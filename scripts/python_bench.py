#!/usr/bin/env python3
"""What planning from Python costs over planning in C++ (docs/python.md).

For one batch (lognormal, `--tokens-per-worker` tokens on each of N workers;
seed 1 is the batch bench/planner_bench plans), times `--repeats` runs of each
and reports the median:
  python  fcp.plan(lengths_list, ...) end to end, from a Python list of ints
          (what a dataloader has), wrapper, conversion and result object
          included: wall time and the calling thread's CPU time;
  core    the MakePlan call inside that same fcp.plan (Plan.planning_seconds,
          wall): python - core is what the binding adds, measured in one call;
  cli     MakePlan in the `fcp plan` command (its "planned in X ms", wall, a
          fresh process each time), when the command is found;
  bench   the Google Benchmark bench/planner_bench, when given with --bench
          (BM_FcpPlan/N:<workers>, CPU time of its median of 5), alternated
          `--rounds` times with rounds of 5 fcp.plan calls (their median
          thread CPU time); the best round of each is compared.
On a loaded machine compare CPU times (wall times include waiting for a
core), and prefer minima: interference only ever adds time.

Run: python scripts/python_bench.py [--workers 256] [--cli build/fcp]
"""
import argparse
import json
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
    for candidate in [REPO / "build" / "fcp", *sorted(REPO.glob("build*/fcp"))]:
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
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--cli", help="the fcp command (default $FCP_CLI or build*/fcp)")
    parser.add_argument("--bench", help="bench/planner_bench binary to run as well")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds with --bench")
    args = parser.parse_args()

    lengths = fcp.workload("lognormal", workers=args.workers,
                           tokens_per_worker=args.tokens_per_worker, max_len=args.max_len,
                           seed=args.seed)
    lengths_list = [int(x) for x in lengths]  # a dataloader hands over Python ints
    kwargs = dict(workers=args.workers, block_size=args.block_size, coalesce=args.coalesce)
    fcp.plan(lengths_list, **kwargs)  # warm-up: page in code and allocator

    python_s, python_cpu_s, core_s = [], [], []
    for _ in range(args.repeats):
        start, start_cpu = time.perf_counter(), time.thread_time()
        plan = fcp.plan(lengths_list, **kwargs)
        python_cpu_s.append(time.thread_time() - start_cpu)
        python_s.append(time.perf_counter() - start)
        core_s.append(plan.planning_seconds)

    print(f"batch: lognormal, N = {args.workers}, {args.tokens_per_worker} tokens/worker, "
          f"{len(lengths)} sequences, {plan.total_tokens} tokens, block {args.block_size}, "
          f"coalesce {args.coalesce}, seed {args.seed}; {plan.num_blocks} blocks; "
          f"median of {args.repeats}")
    py, py_cpu, core = (statistics.median(x) for x in (python_s, python_cpu_s, core_s))
    # Per call, so that waiting for a CPU (which hits both alike) cancels.
    added = statistics.median(p - c for p, c in zip(python_s, core_s))
    overhead = added / core
    print(f"  python fcp.plan (end to end):   {py * 1e3:9.2f} ms wall {py_cpu * 1e3:9.2f} ms CPU")
    print(f"  core MakePlan inside fcp.plan:  {core * 1e3:9.2f} ms wall   "
          f"(binding adds {added * 1e3:.2f} ms per call = {100 * overhead:+.2f}%)")
    cli = find_cli(args.cli)
    if cli:
        c = statistics.median(time_cli(cli, lengths, args, args.repeats))
        print(f"  cli fcp plan (MakePlan):        {c * 1e3:9.2f} ms wall   "
              f"(python / cli - 1 = {100 * (py / c - 1):+.2f}%)")
    if args.bench:
        # The benchmark reports the median of its 5 repetitions. Alternate
        # rounds of it with rounds of 5 Python calls and compare the least
        # disturbed round of each (interference only ever adds time).
        bench_cpu, python_cpu = [], []
        for _ in range(args.rounds):
            result = subprocess.run(
                [args.bench, f"--benchmark_filter=BM_FcpPlan/N:{args.workers}/",
                 "--benchmark_format=json"], capture_output=True, text=True, check=True)
            b = next(b for b in json.loads(result.stdout)["benchmarks"]
                     if b.get("aggregate_name") == "median")
            scale = {"ms": 1e-3, "us": 1e-6, "ns": 1e-9, "s": 1.0}[b["time_unit"]]
            bench_cpu.append(b["cpu_time"] * scale)
            calls = []
            for _ in range(5):
                start_cpu = time.thread_time()
                fcp.plan(lengths_list, **kwargs)
                calls.append(time.thread_time() - start_cpu)
            python_cpu.append(statistics.median(calls))
        b, p = min(bench_cpu), min(python_cpu)
        print(f"  google benchmark BM_FcpPlan:    {b * 1e3:9.2f} ms CPU   "
              f"(best of {args.rounds} rounds of its median of 5)")
        print(f"  python fcp.plan, same rounds:   {p * 1e3:9.2f} ms CPU   (python / bench - 1 = "
              f"{100 * (p / b - 1):+.2f}%; per round: "
              + ", ".join(f"{100 * (x / y - 1):+.1f}%" for x, y in zip(python_cpu, bench_cpu)) + ")")
    print(f"binding overhead: {100 * overhead:+.2f}% "
          f"({'within' if overhead < 0.10 else 'ABOVE'} the 10% budget)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
