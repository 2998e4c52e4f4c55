#!/usr/bin/env bash
# End to end on a small batch: FCP plan -> random inputs -> `fcp run` under
# mpirun (forward + backward, with a Chrome trace) -> comparison with the
# float64 reference. Prints "... matched the reference" and exits 0 on success.
# Usage: scripts/run_small_batch.sh [BUILD_DIR=build] [RANKS=4] [MASK=causal]
set -euo pipefail
BUILD=${1:-build}; NP=${2:-4}; MASK=${3:-causal}
FCP="$BUILD/fcp"
DIR=$(mktemp -d); trap 'rm -rf "$DIR"' EXIT
# OpenMPI in containers / as root (CI): see docs/runtime.md.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN=(mpirun --oversubscribe --bind-to none --mca btl self,vader --mca btl_vader_single_copy_mechanism none)
WINDOW=(); [ "$MASK" = sliding_window ] && WINDOW=(--window 128)

"$FCP" workload --dist lognormal --workers "$NP" --tokens-per-worker 512 --max-len 1024 --seed 7 --out "$DIR/lengths.txt"
"$FCP" plan --lengths "$DIR/lengths.txt" --workers "$NP" --block-size 128 --coalesce 2 --mask "$MASK" "${WINDOW[@]}" \
  --heads-q 8 --heads-kv 2 --head-dim 32 --out "$DIR/plan.json"
"$FCP" make-inputs --plan "$DIR/plan.json" --out "$DIR/in" --seed 1
"${MPIRUN[@]}" -np "$NP" "$FCP" run --plan "$DIR/plan.json" --inputs "$DIR/in" --out "$DIR/out" --backward \
  --trace "$DIR/trace.json" --check
