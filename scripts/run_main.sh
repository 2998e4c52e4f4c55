#!/usr/bin/env bash
# The main job on a fresh machine: install what fcp needs, build it, then plan
# a default batch (the paper's setup: lognormal lengths up to 512K, 32K tokens
# per worker, 64 workers, block 4096, coalesce 16, causal, Llama-3-70B heads),
# print its summary, simulate it against the baselines, and run a small batch
# end to end under mpirun, checked against a float64 reference.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh release
FCP=build/fcp
OUT=${FCP_MAIN_OUT:-build/main-job}
mkdir -p "$OUT"

echo "== 1. a default batch"
"$FCP" workload --dist lognormal --workers 64 --tokens-per-worker 32768 --max-len 524288 --seed 1 \
  --stats --out "$OUT/lengths.txt"
echo "== 2. plan it (with the debug self-check) and summarise"
"$FCP" plan --lengths "$OUT/lengths.txt" --workers 64 --check --out "$OUT/plan.json"
"$FCP" inspect --plan "$OUT/plan.json"
if "$FCP" simulate --help >/dev/null 2>&1; then
  echo "== 3. simulate it on an H100-like cluster"
  "$FCP" simulate --plan "$OUT/plan.json" --profile gpu-x --trace "$OUT/trace.json"
fi
echo "== 4. run a small batch under mpirun and compare with the reference"
bash scripts/run_small_batch.sh build 4 causal
echo "main job done; files in $OUT (trace.json opens in https://ui.perfetto.dev)"
