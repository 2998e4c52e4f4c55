"""Shared by scripts/eval.py and scripts/planner_quality.py: `fcp compare`
runs (cached by the binary's SHA-256 and the arguments), the benchmark set's
length mixes and the Markdown helpers their documents are written with.
Needs only Debian's python3."""
import csv
import hashlib
import io
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

PLANNERS = ["fcp", "ring", "bytescale", "wlb", "magi"]
BASELINES = PLANNERS[1:]
# The headline tables add MagiAttention's dynamic solver: its grid of (query
# chunk, key chunk) cells grows as (8 N)^2, so the sweeps to N = 4096 leave it out.
HEADLINE_PLANNERS = PLANNERS + ["magi-dynamic"]
HEADLINE_BASELINES = HEADLINE_PLANNERS[1:]

# The benchmark set's length mixes (scripts/step_bench.py's BATCHES, seed 0, and
# a power-law mix):
# name -> `fcp compare` arguments; "{giant}" becomes N x 32K (one sequence).
MIXES = {
    "lognormal": ["--dist", "lognormal"],
    "heavy-tailed (sigma 2.0)": ["--dist", "lognormal", "--sigma", "2.0", "--mu", "4.32"],
    "heavy-tailed (sigma 2.3)": ["--dist", "lognormal", "--sigma", "2.3", "--mu", "3.03"],
    "video/text (bimodal)": ["--dist", "bimodal"],
    "pareto (alpha 1.2)": ["--dist", "pareto"],
    "all-short (64-2K)": ["--dist", "uniform", "--min-len", "64", "--max-len", "2048"],
    "one giant": ["--dist", "fixed", "--max-len", "{giant}"],
    "uniform-long (16K-128K)": ["--dist", "uniform", "--min-len", "16384", "--max-len", "131072"],
}


class Runner:
    def __init__(self, fcp, cache=None):
        self.fcp = fcp
        self.cache = cache
        self.command_s = 0.0  # what the fcp runs took (when first computed)
        if cache:
            os.makedirs(cache, exist_ok=True)
            with open(fcp, "rb") as f:
                self.binary = hashlib.sha256(f.read()).hexdigest()

    def run(self, args, timeout_s=None):
        cmd = [self.fcp] + args
        shown = "fcp " + " ".join(shlex.quote(a) for a in args)
        start = time.time()
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=timeout_s).stdout
        elapsed = time.time() - start
        self.command_s += elapsed
        print(f"  {elapsed:6.1f} s  {shown}", file=sys.stderr)
        return shown, out

    def compare(self, args, timeout_s=None):
        """Runs `fcp compare ARGS --csv`; returns (command, rows). With
        timeout_s it returns (command, None, why) when the run fails or takes
        longer, instead of raising."""
        shown = "fcp " + " ".join(shlex.quote(a) for a in ["compare"] + args + ["--csv", "out.csv"])
        entry = None
        if self.cache:
            key = hashlib.sha256("\0".join([self.binary] + args).encode()).hexdigest()[:24]
            cached = os.path.join(self.cache, key + ".json")
            if os.path.exists(cached):
                with open(cached) as f:
                    entry = json.load(f)
                self.command_s += entry["elapsed_s"]
        if entry is None:
            start = time.time()
            # The CSV goes to a directory removed however the run ends (a
            # killed script left one in docs/figures, where git picked it up).
            try:
                with tempfile.TemporaryDirectory(prefix="fcp-eval-") as scratch:
                    path = os.path.join(scratch, "compare.csv")
                    self.run(["compare"] + args + ["--csv", path], timeout_s)
                    with open(path) as f:
                        entry = {"csv": f.read()}
            except subprocess.TimeoutExpired:
                if timeout_s is None:
                    raise
                entry = {"error": f"not finished in {timeout_s:.0f} s", "timed_out": True}
            except subprocess.CalledProcessError as e:
                if timeout_s is None:
                    raise
                entry = {"error": (e.stderr.strip().splitlines() or [f"exit {e.returncode}"])[-1]}
            entry["elapsed_s"] = time.time() - start
            # A timeout depends on the limit and the machine's load, not only on
            # the binary and the arguments: it is not kept, so a rerun with a
            # longer --scale-timeout computes the point.
            if self.cache and not entry.get("timed_out"):
                with open(cached, "w") as f:
                    json.dump(entry, f)
        if "error" in entry:
            print(f"  failed: {shown}: {entry['error']}", file=sys.stderr)
            return shown, None, entry["error"]
        rows = list(csv.DictReader(io.StringIO(entry["csv"])))
        for r in rows:
            for k, v in r.items():
                try:
                    r[k] = float(v) if any(c in v for c in ".e") else int(v)
                except ValueError:
                    pass
        return (shown, rows) if timeout_s is None else (shown, rows, None)


def pct(x):
    return f"{100 * x:.1f}%"


def table(header, rows):
    out = "| " + " | ".join(header) + " |\n|" + "---|" * len(header) + "\n"
    for r in rows:
        out += "| " + " | ".join(str(c) for c in r) + " |\n"
    return out


def by(rows, **keys):
    return [r for r in rows if all(r[k] == v for k, v in keys.items())]


def one(rows, **keys):
    found = by(rows, **keys)
    assert len(found) == 1, (keys, len(found))
    return found[0]
