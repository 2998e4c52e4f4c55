"""Plans a fixed corpus of batches with `fcp plan` and prints one line per plan,
`<name> <sha256 of the plan file>` (or the exit code and error message), so that a change meant to leave every plan
byte-identical (a planner speed-up) can be checked: run it before and after
and diff the two outputs.

The corpus: the benchmark set's length mixes (compare_runs.MIXES, seed 0)
and lognormal seeds 1-3, at N = 16, 64, 256 and 1024 (and lognormal seed 0 at
N = 4096); causal, full and sliding-window (4096) masks; the default options,
--reshuffle-locality 0 and --node-relays 1.

  python3 scripts/plan_digests.py [--fcp build/fcp] [--jobs 2] [--quick] > digests.txt

--quick leaves out N = 1024 and 4096. Needs only Debian's python3."""
import argparse
import concurrent.futures
import hashlib
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_runs import MIXES  # noqa: E402

MASKS = {"causal": ["--mask", "causal"], "full": ["--mask", "full"],
         "sliding_window": ["--mask", "sliding_window", "--window", "4096"]}
OPTIONS = {"default": [], "no-locality": ["--reshuffle-locality", "0"],
           "relays": ["--node-relays", "1"]}


def batches(quick):
    """(name, workers, `fcp workload` arguments) of the corpus."""
    sizes = [16, 64, 256] if quick else [16, 64, 256, 1024]
    out = []
    for n in sizes:
        for mix, args in MIXES.items():
            args = [a.replace("{giant}", str(n * 32768)) for a in args]
            out.append((f"{mix}/seed0", n, args + ["--seed", "0"]))
        for seed in (1, 2, 3):
            out.append((f"lognormal/seed{seed}", n, ["--dist", "lognormal", "--seed", str(seed)]))
    if not quick:
        out.append(("lognormal/seed0", 4096, ["--dist", "lognormal", "--seed", "0"]))
    return out


def digest(fcp, workdir, name, workers, plan_args):
    lengths = os.path.join(workdir, f"{abs(hash((name, workers)))}.txt")
    plan = lengths + "." + str(abs(hash(tuple(plan_args)))) + ".json"
    run = subprocess.run([fcp, "plan", "--lengths", lengths, "--workers", str(workers), "--out",
                          plan] + plan_args, capture_output=True, text=True)
    if run.returncode != 0:  # a batch the planner rejects: its message must stay the same too
        return f"exit {run.returncode}: {run.stderr.strip()}"
    with open(plan, "rb") as f:
        h = hashlib.sha256(f.read()).hexdigest()
    os.remove(plan)
    return h


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fcp", default="build/fcp")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        runs = []
        for name, n, args in batches(a.quick):
            lengths = os.path.join(workdir, f"{abs(hash((name, n)))}.txt")
            subprocess.run([a.fcp, "workload", "--workers", str(n), "--out", lengths] + args,
                           check=True, capture_output=True)
            for mask, margs in MASKS.items():
                for opt, oargs in OPTIONS.items():
                    runs.append((f"N={n} {name} {mask} {opt}", name, n, margs + oargs))
        with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
            hashes = pool.map(lambda r: digest(a.fcp, workdir, r[1], r[2], r[3]), runs)
            for r, h in zip(runs, hashes):
                print(f"{r[0]}\t{h}", flush=True)


if __name__ == "__main__":
    main()
